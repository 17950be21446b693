/*
 * Tests of CyclicLR, and of LambdaLR / MultiplicativeLR whose factor is a
 * host callback: torch 2.13's learning-rate sequences, the callback's
 * errors and non-finite factors, re-entry from the callback, and the
 * userdata destructor (once when the scheduler goes, never on failure).
 */
#include "check.h"

static fulmen_optimizer *sgd_with_lr(double lr) {
    const float v[2] = {0, 0};
    const int64_t shape[1] = {2};
    fulmen_tensor *p = NULL;
    CHECK_OK(fulmen_tensor_from_data(v, sizeof v, FULMEN_DTYPE_F32, shape, 1, &p));
    CHECK_OK(fulmen_tensor_set_requires_grad(p, true));
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = lr;
    so.momentum = 0.9;
    fulmen_optimizer *o = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p, 1, &so, &o));
    fulmen_tensor_free(p);
    return o;
}

static double lr_of(const fulmen_optimizer *o) {
    double lr = NAN;
    CHECK_OK(fulmen_optimizer_get_lr(o, &lr));
    return lr;
}

/* The lr after construction and after each of n - 1 steps equals `want`. */
#define EXPECT_SCHEDULE(s, o, want, n) expect_schedule(__LINE__, (s), (o), (want), (n))
static void expect_schedule(int line, fulmen_scheduler *s, fulmen_optimizer *o, const double *want, int n) {
    for (int i = 0; i < n; i++) {
        if (i > 0) CHECK_OK(fulmen_scheduler_step(s, o, NAN));
        double got = lr_of(o);
        if (fabs(got - want[i]) <= 1e-15 * fmax(fabs(want[i]), 1.0)) {
            check_passed++;
        } else {
            check_failed++;
            fprintf(stderr, "line %d: lr at step %d: got %.17g, want %.17g\n", line, i, got, want[i]);
        }
    }
}

/* CyclicLR(base 0.01, max 0.1, step_size_up 3), triangular, over SGD with
 * momentum: torch 2.13's lrs; bad options refused. */
static void test_cyclic(void) {
    static const double want[14] = {0.01, 0.040000000000000015, 0.06999999999999999, 0.1, 0.07000000000000003,
                                    0.03999999999999998, 0.01, 0.040000000000000056, 0.06999999999999995, 0.1,
                                    0.06999999999999995, 0.040000000000000056, 0.01, 0.03999999999999998};
    fulmen_optimizer *o = sgd_with_lr(0.5);
    fulmen_cyclic_lr_options c = fulmen_cyclic_lr_options_default(0.01, 0.1);
    CHECK(c.step_size_up == 2000 && c.step_size_down == 0 && c.mode == FULMEN_CYCLIC_MODE_TRIANGULAR && c.gamma == 1.0);
    CHECK(c.cycle_momentum && c.base_momentum == 0.8 && c.max_momentum == 0.9);
    c.step_size_up = 3;
    fulmen_scheduler *s = NULL;
    CHECK_OK(fulmen_scheduler_cyclic_lr_new(o, &c, &s));
    EXPECT_SCHEDULE(s, o, want, 14);
    fulmen_scheduler_free(s);

    /* triangular2 with a longer falling half: the second peak is halved */
    c.step_size_up = 2;
    c.step_size_down = 3;
    c.mode = FULMEN_CYCLIC_MODE_TRIANGULAR2;
    CHECK_OK(fulmen_scheduler_cyclic_lr_new(o, &c, &s));
    static const double want2[8] = {0.01, 0.055, 0.09999999999999999, 0.06999999999999999, 0.039999999999999994,
                                    0.01, 0.03250000000000002, 0.055};
    EXPECT_SCHEDULE(s, o, want2, 8);
    fulmen_scheduler_free(s);

    fulmen_scheduler *bad = NULL;
    c = fulmen_cyclic_lr_options_default(0.01, 0.1);
    c.step_size_up = 0;
    CHECK_ERR(fulmen_scheduler_cyclic_lr_new(o, &c, &bad), FULMEN_CODE_INVALID_ARGUMENT, "step_size");
    c = fulmen_cyclic_lr_options_default(0.01, NAN);
    CHECK_ERR(fulmen_scheduler_cyclic_lr_new(o, &c, &bad), FULMEN_CODE_INVALID_ARGUMENT, "max_lr");
    c = fulmen_cyclic_lr_options_default(0.01, 0.1);
    c.mode = 7;
    CHECK_ERR(fulmen_scheduler_cyclic_lr_new(o, &c, &bad), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_cyclic_mode");
    CHECK_ERR(fulmen_scheduler_cyclic_lr_new(o, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    c = fulmen_cyclic_lr_options_default(0.01, 0.1);
    CHECK_ERR(fulmen_scheduler_cyclic_lr_new(NULL, &c, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);

    /* each group's own range: one group here, from 0.02 to 0.2 in 2 steps;
     * lists of another length, NULL lists and bad values refused */
    c.step_size_up = 2;
    const double lower[1] = {0.02}, upper[1] = {0.2}, two[2] = {0.1, 0.2}, negative[1] = {-0.1};
    CHECK_OK(fulmen_scheduler_cyclic_lr_ranges_new(o, &c, lower, 1, upper, 1, &s));
    static const double want3[4] = {0.02, 0.11000000000000001, 0.2, 0.11000000000000001};
    EXPECT_SCHEDULE(s, o, want3, 4);
    fulmen_scheduler_free(s);
    CHECK_OK(fulmen_scheduler_cyclic_lr_ranges_new(o, &c, NULL, 0, upper, 1, &s)); /* base_lr from the options */
    fulmen_scheduler_free(s);
    CHECK_ERR(fulmen_scheduler_cyclic_lr_ranges_new(o, &c, two, 2, NULL, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "1 base_lrs");
    CHECK_ERR(fulmen_scheduler_cyclic_lr_ranges_new(o, &c, NULL, 1, NULL, 0, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_cyclic_lr_ranges_new(o, &c, lower, 1, negative, 1, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "max_lrs");
    CHECK(bad == NULL);
    fulmen_optimizer_free(o);
}

/* What the factor callbacks see and do. */
typedef struct {
    int calls;
    int frees;
    int64_t fail_at;            /* step whose call fails (-1: none) */
    int64_t nan_at;             /* step whose factor is NaN (-1: none) */
    fulmen_scheduler *reenter;  /* stepped from inside the callback if set */
    fulmen_optimizer *optimizer;
    int reentry_code;
} lambda_state;

static fulmen_error *decay(void *userdata, int64_t epoch, size_t group, double *out) {
    lambda_state *st = userdata;
    st->calls++;
    if (group != 0) return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "one group expected");
    if (epoch == st->fail_at) return fulmen_error_new(FULMEN_CODE_CALLBACK, "host factor failed");
    if (st->reenter != NULL) {
        fulmen_error *e = fulmen_scheduler_step(st->reenter, st->optimizer, NAN);
        st->reentry_code = e ? fulmen_error_code(e) : 0;
        fulmen_error_free(e);
    }
    *out = epoch == st->nan_at ? NAN : pow(0.95, (double)epoch) / (1.0 + (double)epoch);
    return NULL;
}

static fulmen_error *alternate(void *userdata, int64_t epoch, size_t group, double *out) {
    (void)group;
    ((lambda_state *)userdata)->calls++;
    *out = epoch % 2 == 1 ? 0.9 : 0.8;
    return NULL;
}

static void count_free(void *userdata) { ((lambda_state *)userdata)->frees++; }

/* LambdaLR and MultiplicativeLR give torch's lrs; the destructor runs once,
 * when the scheduler is freed. */
static void test_lambda_sequences(void) {
    static const double want[14] = {0.1,
                                    0.0475,
                                    0.030083333333333337,
                                    0.021434375,
                                    0.016290125,
                                    0.01289634895833333,
                                    0.010501312723214284,
                                    0.008729216201171872,
                                    0.007371338125434026,
                                    0.006302494097246091,
                                    0.005443063083985261,
                                    0.004740000768970498,
                                    0.004156616058943359,
                                    0.0036667291662821778};
    static const double want_mult[6] = {0.1, 0.09000000000000001, 0.07200000000000001, 0.06480000000000001,
                                        0.05184000000000001, 0.04665600000000001};
    lambda_state st = {0, 0, -1, -1, NULL, NULL, 0};
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *s = NULL;
    CHECK_OK(fulmen_scheduler_lambda_lr_new(o, decay, &st, count_free, &s));
    CHECK(st.calls == 1);
    EXPECT_SCHEDULE(s, o, want, 14);
    CHECK(st.calls == 14 && st.frees == 0);
    fulmen_scheduler_free(s);
    CHECK(st.frees == 1);
    fulmen_optimizer_free(o);

    lambda_state m = {0, 0, -1, -1, NULL, NULL, 0};
    o = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_multiplicative_lr_new(o, alternate, &m, count_free, &s));
    CHECK(m.calls == 0); /* step 0 keeps the lr */
    EXPECT_SCHEDULE(s, o, want_mult, 6);
    fulmen_scheduler_free(s);
    CHECK(m.frees == 1 && m.calls == 5);
    fulmen_optimizer_free(o);
}

/* A failing callback, a NaN factor and a re-entrant step are errors that
 * leave the lr alone; a failed construction does not free the userdata. */
static void test_lambda_errors(void) {
    lambda_state st = {0, 0, -1, 2, NULL, NULL, 0};
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *s = NULL;
    CHECK_OK(fulmen_scheduler_lambda_lr_new(o, decay, &st, count_free, &s));
    CHECK_OK(fulmen_scheduler_step(s, o, NAN));
    double before = lr_of(o);
    CHECK_ERR(fulmen_scheduler_step(s, o, NAN), FULMEN_CODE_INVALID_ARGUMENT, "NaN");
    CHECK(lr_of(o) == before);
    st.nan_at = -1; /* the failed step did not count: step 2 again */
    st.fail_at = 2;
    CHECK_ERR(fulmen_scheduler_step(s, o, NAN), FULMEN_CODE_CALLBACK, "host factor failed");
    CHECK(lr_of(o) == before);
    /* re-entry: the callback steps its own scheduler, which is in use */
    st.fail_at = -1;
    st.reenter = s;
    st.optimizer = o;
    CHECK_OK(fulmen_scheduler_step(s, o, NAN));
    CHECK(st.reentry_code == FULMEN_CODE_INVALID_STATE);
    fulmen_scheduler_free(s);
    CHECK(st.frees == 1);

    /* failures: nothing made, the destructor not run */
    lambda_state f = {0, 0, 0, -1, NULL, NULL, 0};
    fulmen_scheduler *bad = NULL;
    CHECK_ERR(fulmen_scheduler_lambda_lr_new(o, decay, &f, count_free, &bad), FULMEN_CODE_CALLBACK, "lambda_lr");
    CHECK_ERR(fulmen_scheduler_lambda_lr_new(o, NULL, &f, count_free, &bad), FULMEN_CODE_NULL_ARGUMENT, "lr_lambda");
    CHECK_ERR(fulmen_scheduler_multiplicative_lr_new(NULL, alternate, &f, count_free, &bad),
              FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_multiplicative_lr_new(o, alternate, &f, count_free, NULL), FULMEN_CODE_NULL_ARGUMENT,
              NULL);
    CHECK(bad == NULL && f.frees == 0);
    fulmen_optimizer_free(o);
}

int main(void) {
    test_cyclic();
    test_lambda_sequences();
    test_lambda_errors();
    return check_finish("test_host_schedulers");
}

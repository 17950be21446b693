/*
 * `opt.step(closure)` under manual optimization
 * (fulmen_step_context_optimizer_step_closure): LBFGS stepped from a
 * manual training step equals LBFGS under automatic optimization; another
 * optimizer evaluates its closure once; what a closure may not do; a
 * failing closure leaves the weights alone.
 */
#include "check.h"
#include "fixture.h"

#include <stdint.h>

/* What the steps share. */
typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int mode;            /* which closure body runs */
    bool lbfgs;          /* configure_optimizers gives LBFGS (else SGD) */
    int64_t evaluations; /* closure calls (or automatic training steps) */
    int64_t batches;     /* manual steps run */
    int errors_ok;       /* the refused calls gave the expected codes */
    int hooks[64];       /* hooks the callback saw, by fulmen_hook */
    double first_loss;   /* the step's return value, first batch */
    fulmen_step_context *outer; /* the step's ctx, for the misuse checks */
    const fulmen_batch *batch;  /* the step's batch, for the closure */
} state;

enum { GOOD = 0, MISUSE = 1, NO_LOSS = 2, FAILS = 3 };

static int code_of(fulmen_error *e) {
    int c = e == NULL ? 0 : fulmen_error_code(e);
    fulmen_error_free(e);
    return c;
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e;
    if (s->lbfgs) {
        fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
        o.lr = 0.5;
        o.max_iter = 4;
        o.history_size = 3;
        e = fulmen_optimizer_lbfgs_new(s->model, NULL, 0, &o, &opt);
    } else {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        e = fulmen_optimizer_sgd_new(s->model, NULL, 0, &o, &opt);
    }
    return fixture_add_optimizer(config, e, opt);
}

/* The closure: zero_grad, loss, manual_backward, through its own ctx. */
static fulmen_error *closure(void *ud, fulmen_step_context *ctx, double *loss) {
    state *s = ud;
    s->evaluations++;
    if (s->mode == FAILS && s->evaluations == 3) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the data went away");
    if (s->mode == MISUSE && s->evaluations == 1) {
        bool made = false;
        double l = 0;
        /* the step's own ctx is in use until the step returns */
        s->errors_ok &= code_of(fulmen_step_context_optimizer_zero_grad(s->outer, 0)) == FULMEN_CODE_INVALID_STATE;
        /* the stepping optimizer cannot be stepped, nor its schedulers */
        s->errors_ok &= code_of(fulmen_step_context_optimizer_step(ctx, 0, &made)) == FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_step_context_optimizer_step_closure(ctx, 0, closure, s, &l, &made)) ==
                        FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_step_context_scheduler_step(ctx, 0, NULL)) == FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_step_context_optimizer_step(ctx, 7, &made)) == FULMEN_CODE_INVALID_ARGUMENT;
    }
    fulmen_tensor *out = NULL;
    fulmen_error *e = fulmen_step_context_optimizer_zero_grad(ctx, 0);
    if (e == NULL) e = fixture_cross_entropy(s->model, s->batch, &out);
    if (e == NULL) e = fulmen_step_context_manual_backward(ctx, out);
    if (e == NULL && s->mode != NO_LOSS) e = fulmen_tensor_item(out, loss);
    return e;
}

static fulmen_error *manual_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)out;
    state *s = ud;
    s->outer = ctx;
    s->batch = batch;
    bool made = false;
    if (s->mode == MISUSE)
        s->errors_ok &= code_of(fulmen_step_context_optimizer_step_closure(ctx, 0, NULL, s, NULL, NULL)) ==
                        FULMEN_CODE_NULL_ARGUMENT;
    double first = 0;
    fulmen_error *e = fulmen_step_context_optimizer_step_closure(ctx, 0, closure, s, &first, &made);
    if (s->batches == 0) s->first_loss = first;
    if (e == NULL && !made) e = fulmen_error_new(FULMEN_CODE_CALLBACK, "the update was not made");
    s->batches++;
    return e;
}

static fulmen_error *automatic_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                    fulmen_tensor **out) {
    (void)ctx;
    state *s = ud;
    s->evaluations++;
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *count_hooks(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook >= 0 && hook < 64) ((state *)ud)->hooks[hook]++;
    return NULL;
}

/* Fits `s->model` for 2 epochs of 4 batches; returns the fit's error. */
static fulmen_error *fit(state *s, bool manual, int64_t *global_step) {
    fulmen_dataset *ds = fixture_blobs(64, 7, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = manual ? manual_step : automatic_step;
    vt.configure_optimizers = configure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, !manual));
    fulmen_trainer *t = fixture_trainer(NULL, 2);
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.userdata = s;
    cb.on_hook = count_hooks;
    CHECK_OK(fulmen_trainer_add_callback(t, "counter", &cb));
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    CHECK_OK(fulmen_trainer_global_step(t, global_step));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return e;
}

/* LBFGS stepped by hand with a closure is Lightning's automatic LBFGS
 * step written out: the same evaluations, hooks and weights. */
static void test_lbfgs_manual_equals_automatic(void) {
    state man = {0}, aut = {0};
    CHECK_OK(fulmen_manual_seed(3));
    man.model = fixture_mlp(8, 0);
    CHECK_OK(fulmen_manual_seed(3));
    aut.model = fixture_mlp(8, 0);
    man.lbfgs = aut.lbfgs = true;
    int64_t gm = 0, ga = 0;
    CHECK_OK(fit(&man, true, &gm));
    CHECK_OK(fit(&aut, false, &ga));
    CHECK(fixture_max_diff(man.model, aut.model) == 0.0);
    CHECK(gm == 8 && ga == 8);
    CHECK(man.batches == 8);
    CHECK(man.evaluations == aut.evaluations && man.evaluations > 8);
    /* each evaluation is followed by on_before_optimizer_step */
    CHECK(man.hooks[FULMEN_HOOK_BEFORE_OPTIMIZER_STEP] == man.evaluations);
    CHECK(aut.hooks[FULMEN_HOOK_BEFORE_OPTIMIZER_STEP] == aut.evaluations);
    CHECK(man.hooks[FULMEN_HOOK_BEFORE_BACKWARD] == man.evaluations);
    CHECK(isfinite(man.first_loss) && man.first_loss > 0);
    fulmen_model_free(man.model);
    fulmen_model_free(aut.model);
}

/* SGD evaluates a closure once, then steps: as a plain step. */
static void test_sgd_closure_once(void) {
    state man = {0}, aut = {0};
    CHECK_OK(fulmen_manual_seed(4));
    man.model = fixture_mlp(8, 0);
    CHECK_OK(fulmen_manual_seed(4));
    aut.model = fixture_mlp(8, 0);
    int64_t gm = 0, ga = 0;
    CHECK_OK(fit(&man, true, &gm));
    CHECK_OK(fit(&aut, false, &ga));
    CHECK(fixture_max_diff(man.model, aut.model) == 0.0);
    CHECK(gm == 8 && man.evaluations == 8);
    fulmen_model_free(man.model);
    fulmen_model_free(aut.model);
}

/* Misuse inside the closure is refused and the step goes on; a closure
 * writing no loss, or failing, ends the fit with the weights untouched. */
static void test_closure_errors(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    s.lbfgs = true;
    s.mode = MISUSE;
    s.errors_ok = 1;
    int64_t g = 0;
    CHECK_OK(fit(&s, true, &g));
    CHECK(s.errors_ok);
    CHECK(g == 8);
    fulmen_model_free(s.model);

    for (int mode = NO_LOSS; mode <= FAILS; mode++) {
        state f = {0};
        CHECK_OK(fulmen_manual_seed(5));
        f.model = fixture_mlp(8, 0);
        CHECK_OK(fulmen_manual_seed(5));
        fulmen_model *before = fixture_mlp(8, 0);
        f.lbfgs = true;
        f.mode = mode;
        CHECK_ERR(fit(&f, true, &g), FULMEN_CODE_CALLBACK, mode == NO_LOSS ? "wrote no loss" : "the data went away");
        CHECK(g == 0);
        CHECK(fixture_max_diff(f.model, before) == 0.0);
        fulmen_model_free(f.model);
        fulmen_model_free(before);
    }
}

/* Outside a manual step, and with bad arguments. */
static void test_refusals(void) {
    double l = 0;
    bool made = false;
    CHECK_ERR(fulmen_step_context_optimizer_step_closure(NULL, 0, closure, NULL, &l, &made),
              FULMEN_CODE_NULL_ARGUMENT, NULL);
}

int main(void) {
    test_lbfgs_manual_equals_automatic();
    test_sgd_closure_once();
    test_closure_errors();
    test_refusals();
    return check_finish("test_manual_closure");
}

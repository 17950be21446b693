/*
 * The learning-rate range test (fulmen_trainer_lr_find): the learning
 * rates grow from min_lr towards max_lr as Lightning's do, a smoothed loss
 * per step, a suggestion inside the range, the weights put back and the
 * trainer unchanged; the early stop on a diverging loss; refusals. The
 * batch size finder (fulmen_trainer_scale_batch_size) in its power and
 * binsearch modes against batches that run out of memory.
 * tests/interop/lightning_parity.py checks the numbers against Lightning's
 * own Tuner.lr_find.
 */
#include "check.h"
#include "fixture.h"

#include <math.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int optimizers;      /* how many configure_optimizers makes */
    int64_t fits;        /* larger batches "run out of memory" (0: none do) */
    int64_t largest;     /* the largest batch a step saw */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    state *s = ud;
    fulmen_tensor *x = NULL;
    int64_t dims[2] = {0, 0};
    size_t ndim = 0;
    CHECK_OK(fulmen_batch_get(batch, 0, &x));
    CHECK_OK(fulmen_tensor_shape(x, dims, 2, &ndim));
    int64_t rows = dims[0];
    if (rows > s->largest) s->largest = rows;
    if (s->fits > 0 && rows > s->fits) return fulmen_error_new(FULMEN_CODE_OUT_OF_MEMORY, "simulated: out of memory");
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    fulmen_error *e = NULL;
    for (int i = 0; i < s->optimizers && e == NULL; i++) e = fixture_add_sgd(config, s->model, 0.1, 0.9);
    return e;
}

static fulmen_lightning_module *module_of(state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = step;
    vt.configure_optimizers = configure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

/* The batch size finder: power and binsearch against batches that "run out
 * of memory" above `fits`; the loader batches by the size found; the
 * weights are put back; refusals. */
static void test_scale_batch_size(fulmen_dataset *ds) {
    CHECK_OK(fulmen_manual_seed(5));
    state s = {fixture_mlp(8, 0), 1, 40, 0};
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *before = fixture_mlp(8, 0); /* the same weights */
    fulmen_lightning_module *m = module_of(&s);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    fulmen_loader *train = fixture_loader(ds, 8, true, 1);
    fulmen_batch_size_finder_options o = fulmen_batch_size_finder_options_default();
    CHECK(!o.binsearch && o.steps_per_trial == 3 && o.init_val == 2 && o.max_trials == 25);
    CHECK(o.margin == 0.05 && o.max_val == 8192);
    size_t found = 0, batches = 0;
    CHECK_OK(fulmen_trainer_scale_batch_size(t, m, train, NULL, &o, &found));
    CHECK(found == 32);
    CHECK(s.largest == 64); /* doubled up to the first failure */
    CHECK_OK(fulmen_loader_len(train, &batches));
    CHECK(batches == 200 / 32 + 1); /* the loader batches by the size found */
    CHECK(fixture_max_diff(before, s.model) == 0.0);
    o.binsearch = true;
    CHECK_OK(fulmen_trainer_scale_batch_size(t, m, train, NULL, &o, &found));
    CHECK(found == 38); /* 40, less the 5% margin */
    /* A dataset smaller than the doubling: it stops past its length. */
    s.fits = 0;
    o.binsearch = false;
    CHECK_OK(fulmen_trainer_scale_batch_size(t, m, train, NULL, &o, &found));
    CHECK(found == 256);
    /* Errors other than running out of memory end the search. */
    s.fits = 40;
    o.max_trials = 0;
    CHECK_ERR(fulmen_trainer_scale_batch_size(t, m, train, NULL, &o, &found), FULMEN_CODE_INVALID_ARGUMENT, "at least 1");
    o = fulmen_batch_size_finder_options_default();
    o.margin = 1.0;
    CHECK_ERR(fulmen_trainer_scale_batch_size(t, m, train, NULL, &o, NULL), FULMEN_CODE_INVALID_ARGUMENT, "margin");
    CHECK_OK(fulmen_trainer_scale_batch_size(t, m, train, NULL, NULL, NULL));
    fulmen_loader_free(train);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(before);
    fulmen_model_free(s.model);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(3));
    state s = {fixture_mlp(8, 0), 1, 0, 0};
    CHECK_OK(fulmen_manual_seed(3));
    fulmen_model *before = fixture_mlp(8, 0); /* the same weights */
    fulmen_dataset *ds = fixture_blobs(64, 1, 1.0f);
    fulmen_loader *train = fixture_loader(ds, 8, true, 1);
    fulmen_lightning_module *m = module_of(&s);
    fulmen_trainer *t = fixture_trainer(NULL, 5);
    CHECK(fixture_max_diff(before, s.model) == 0);

    fulmen_lr_find_options o = fulmen_lr_find_options_default();
    CHECK(o.min_lr == 1e-8 && o.max_lr == 1 && o.num_training == 100 && o.early_stop_threshold == 4);
    o.min_lr = 1e-4;
    o.num_training = 24;
    o.early_stop_threshold = 0; /* run every step */
    fulmen_lr_find_result *r = NULL;
    CHECK_OK(fulmen_trainer_lr_find(t, m, train, NULL, &o, &r));
    double lrs[32], losses[32];
    size_t n = 0;
    CHECK_OK(fulmen_lr_find_result_points(r, NULL, NULL, 0, &n));
    CHECK(n == 24); /* 5 epochs of 8 batches could take 40: num_training stops it */
    CHECK_ERR(fulmen_lr_find_result_points(r, lrs, losses, 3, &n), FULMEN_CODE_OUT_OF_RANGE, "capacity");
    CHECK_OK(fulmen_lr_find_result_points(r, lrs, losses, 32, &n));
    /* Lightning's schedule: min_lr, then min_lr * (max/min)^((i + 1) / N) */
    CHECK(lrs[0] == 1e-4);
    for (size_t i = 1; i < n; i++) {
        double want = 1e-4 * pow(1.0 / 1e-4, (double)(i + 1) / 24.0);
        CHECK(fabs(lrs[i] - want) <= 1e-12 * want);
        CHECK(isfinite(losses[i]) && losses[i] > 0);
    }
    double lr = 0;
    bool found = false;
    CHECK_OK(fulmen_lr_find_result_suggestion(r, 10, 1, &lr, &found));
    CHECK(found && lr >= lrs[10] && lr <= lrs[n - 2]);
    CHECK_OK(fulmen_lr_find_result_suggestion(r, 20, 10, &lr, &found));
    CHECK(!found);
    /* the weights are back, the trainer has trained nothing */
    CHECK(fixture_max_diff(before, s.model) == 0);
    int64_t steps = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 0);
    fulmen_lr_find_result_free(r);
    fulmen_lr_find_result_free(r); /* a no-op */

    /* a loss that diverges stops the test early (lr up to 1e4) */
    o = fulmen_lr_find_options_default();
    o.min_lr = 1e-3;
    o.max_lr = 1e4;
    o.num_training = 40;
    CHECK_OK(fulmen_trainer_lr_find(t, m, train, NULL, &o, &r));
    CHECK_OK(fulmen_lr_find_result_points(r, NULL, NULL, 0, &n));
    CHECK(n > 2 && n < 40);
    fulmen_lr_find_result_free(r);
    r = NULL;
    CHECK(fixture_max_diff(before, s.model) == 0);

    /* refusals */
    o = fulmen_lr_find_options_default();
    o.min_lr = 0;
    CHECK_ERR(fulmen_trainer_lr_find(t, m, train, NULL, &o, &r), FULMEN_CODE_INVALID_ARGUMENT, "min_lr");
    o = fulmen_lr_find_options_default();
    o.mode = 7;
    CHECK_ERR(fulmen_trainer_lr_find(t, m, train, NULL, &o, &r), FULMEN_CODE_INVALID_ARGUMENT, "mode");
    o = fulmen_lr_find_options_default();
    o.early_stop_threshold = NAN;
    CHECK_ERR(fulmen_trainer_lr_find(t, m, train, NULL, &o, &r), FULMEN_CODE_INVALID_ARGUMENT, "threshold");
    CHECK_ERR(fulmen_trainer_lr_find(t, m, train, NULL, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    s.optimizers = 2;
    CHECK_ERR(fulmen_trainer_lr_find(t, m, train, NULL, NULL, &r), FULMEN_CODE_INVALID_ARGUMENT, "single");
    s.optimizers = 1;
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, false));
    CHECK_ERR(fulmen_trainer_lr_find(t, m, train, NULL, NULL, &r), FULMEN_CODE_INVALID_ARGUMENT, "automatic");
    CHECK(r == NULL);
    CHECK(fixture_max_diff(before, s.model) == 0);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(train);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
    fulmen_model_free(before);
    fulmen_dataset *big = fixture_blobs(200, 2, 1.0f);
    test_scale_batch_size(big);
    fulmen_dataset_free(big);
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_tuner");
}

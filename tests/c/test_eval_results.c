/*
 * What validate and test give back, as Lightning's `trainer.validate` /
 * `trainer.test` return it (fulmen_trainer_eval_results): one dict per
 * loader of the epoch values logged for the loggers, each loader's own
 * with several, the epoch hooks' values in every dict; the step values of
 * evaluation batches go to logged_metrics and to the loggers (without an
 * epoch, at the loader's batch count) but never to callback_metrics; a
 * run whose loaders are all limited to 0 batches is skipped, hooks and
 * all, and gives an empty list.
 */
#include "check.h"
#include "fixture.h"

#include <math.h>

/* ---- the module: values that depend only on the batch's position ---- */

typedef struct {
    fulmen_model *model;
    int starts; /* on_validation_start / on_test_start calls */
} fixture;

/* validation_step and test_step: "v" = batch_idx + 10 * dataloader_idx per
 * step and per epoch, "n" = 1 summed over the epoch, "quiet" for the
 * callback metrics only, and "first" without the loader suffix from
 * loader 0 alone. */
static fulmen_error *eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ud;
    (void)batch;
    int64_t i = 0;
    size_t d = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    if (e == NULL) e = fulmen_step_context_dataloader_idx(ctx, &d);
    double v = (double)i + 10.0 * (double)d;
    if (e == NULL) e = fulmen_step_context_log(ctx, "v", v, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "n", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "quiet", v, FULMEN_LOG_NO_LOGGER, 0);
    if (e == NULL && d == 0) e = fulmen_step_context_log(ctx, "first", 1.0, FULMEN_LOG_NO_DATALOADER_IDX, 0);
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    if (hook == FULMEN_HOOK_VALIDATION_START || hook == FULMEN_HOOK_TEST_START) f->starts++;
    if (hook == FULMEN_HOOK_VALIDATION_EPOCH_END || hook == FULMEN_HOOK_TEST_EPOCH_END)
        return fulmen_hook_context_log(ctx, "ve", 7.0, FULMEN_LOG_DEFAULT);
    return NULL;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = NULL;
    vt.validation_step = eval_step;
    vt.test_step = eval_step;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

/* ---- a host logger that records the calls ---- */

#define CALLS_MAX 16

typedef struct {
    int n;
    int64_t epoch[CALLS_MAX], step[CALLS_MAX];
    double v_step[CALLS_MAX]; /* "v_step/dataloader_idx_N" of the call (NAN: none) */
} calls;

static fulmen_error *log_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                 int64_t step) {
    calls *c = ud;
    if (c->n == CALLS_MAX) return NULL;
    c->epoch[c->n] = epoch;
    c->step[c->n] = step;
    c->v_step[c->n] = NAN;
    for (size_t i = 0; i < n; i++)
        if (strncmp(names[i], "v_step/", 7) == 0) c->v_step[c->n] = values[i];
    c->n++;
    return NULL;
}

/* ---- reading the results ---- */

static size_t list_len(const fulmen_value *list) {
    int32_t kind = -1;
    size_t n = 0;
    CHECK_OK(fulmen_value_get_kind(list, &kind));
    CHECK(kind == FULMEN_VALUE_KIND_LIST);
    CHECK_OK(fulmen_value_len(list, &n));
    return n;
}

static fulmen_value *item_of(const fulmen_value *list, size_t i) {
    fulmen_value *d = NULL;
    CHECK_OK(fulmen_value_item(list, i, &d));
    return d;
}

static size_t dict_len(const fulmen_value *d) {
    size_t n = 0;
    CHECK_OK(fulmen_value_len(d, &n));
    return n;
}

/* The value of `name` in the dict (NAN when missing). */
static double get(const fulmen_value *d, const char *name) {
    fulmen_value *v = NULL;
    double x = NAN;
    if (fixture_code(fulmen_value_dict_get(d, name, &v)) == 0) CHECK_OK(fulmen_value_get_double(v, &x));
    fulmen_value_free(v);
    return x;
}

/* Whether any key of the dict contains `part`. */
static bool any_key_with(const fulmen_value *d, const char *part) {
    size_t n = dict_len(d);
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        fulmen_value *k = NULL, *v = NULL;
        char name[128];
        size_t len = 0;
        CHECK_OK(fulmen_value_dict_entry(d, i, &k, &v));
        CHECK_OK(fulmen_value_get_string(k, name, sizeof name, &len));
        found |= strstr(name, part) != NULL;
        fulmen_value_free(k);
        fulmen_value_free(v);
    }
    return found;
}

static fulmen_value *results_of(const fulmen_trainer *t) {
    fulmen_value *r = NULL;
    CHECK_OK(fulmen_trainer_eval_results(t, &r));
    return r;
}

/* ---- the cases ---- */

/* Loader A: 10 points in batches of 4, 4, 2; loader B: 6 in batches of 3. */
static void test_two_loaders(fulmen_loader *a, fulmen_loader *b) {
    fixture f = {.model = fixture_mlp(4, 0)};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    calls c = {0};
    fulmen_logger_vtable lv;
    memset(&lv, 0, sizeof lv);
    lv.struct_size = sizeof lv;
    lv.userdata = &c;
    lv.log_metrics = log_metrics;
    CHECK_OK(fulmen_trainer_add_logger(t, &lv));

    fulmen_value *r = results_of(t);
    CHECK(list_len(r) == 0); /* before any run */
    fulmen_value_free(r);

    const fulmen_loader *both[2] = {a, b};
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, both, 2, NULL));
    CHECK(f.starts == 1);
    r = results_of(t);
    CHECK(list_len(r) == 2);
    fulmen_value *r0 = item_of(r, 0), *r1 = item_of(r, 1);
    /* loader 0: v = (0*4 + 1*4 + 2*2) / 10, three batches, "first", "ve" */
    CHECK(dict_len(r0) == 4);
    CHECK(fabs(get(r0, "v_epoch/dataloader_idx_0") - 0.8) < 1e-12);
    CHECK(get(r0, "n/dataloader_idx_0") == 3.0);
    CHECK(get(r0, "first") == 1.0);
    CHECK(get(r0, "ve") == 7.0);
    /* loader 1: v = (10*3 + 11*3) / 6, two batches, "ve" */
    CHECK(dict_len(r1) == 3);
    CHECK(fabs(get(r1, "v_epoch/dataloader_idx_1") - 10.5) < 1e-12);
    CHECK(get(r1, "n/dataloader_idx_1") == 2.0);
    CHECK(get(r1, "ve") == 7.0);
    fulmen_value_free(r0);
    fulmen_value_free(r1);
    fulmen_value_free(r);

    /* callback metrics: the epoch values under both names, logger=False
     * ones too, never a step value */
    fulmen_value *cb = NULL, *logged = NULL;
    CHECK_OK(fulmen_trainer_callback_metrics(t, &cb));
    CHECK(fabs(get(cb, "v/dataloader_idx_0") - 0.8) < 1e-12);
    CHECK(fabs(get(cb, "v_epoch/dataloader_idx_1") - 10.5) < 1e-12);
    CHECK(get(cb, "quiet/dataloader_idx_1") == 10.5);
    CHECK(!any_key_with(cb, "_step"));
    /* logged metrics: the last batch's step values too */
    CHECK_OK(fulmen_trainer_logged_metrics(t, &logged));
    CHECK(get(logged, "v_step/dataloader_idx_0") == 2.0);
    CHECK(get(logged, "v_step/dataloader_idx_1") == 11.0);
    CHECK(get(logged, "v_epoch/dataloader_idx_0") == get(cb, "v_epoch/dataloader_idx_0"));
    CHECK(!any_key_with(logged, "quiet"));
    fulmen_value_free(cb);
    fulmen_value_free(logged);

    /* the logger: each batch's step values without an epoch at the
     * loader's batch count (0, 1, 2 then 0, 1), then the epoch values */
    CHECK(c.n == 6);
    const int64_t steps[5] = {0, 1, 2, 0, 1};
    const double v[5] = {0, 1, 2, 10, 11};
    for (int i = 0; i < 5 && i < c.n; i++) CHECK(c.epoch[i] == -1 && c.step[i] == steps[i] && c.v_step[i] == v[i]);
    CHECK(c.n == 6 && c.epoch[5] == 0 && isnan(c.v_step[5]));

    /* one test loader: one dict, names without the suffix */
    CHECK_OK(fulmen_trainer_test(t, m, a, NULL));
    r = results_of(t);
    CHECK(list_len(r) == 1);
    r0 = item_of(r, 0);
    CHECK(dict_len(r0) == 4);
    CHECK(fabs(get(r0, "v_epoch") - 0.8) < 1e-12);
    CHECK(get(r0, "n") == 3.0 && get(r0, "first") == 1.0 && get(r0, "ve") == 7.0);
    fulmen_value_free(r0);
    fulmen_value_free(r);
    CHECK(f.starts == 2);

    CHECK(fixture_code(fulmen_trainer_eval_results(t, NULL)) == FULMEN_CODE_NULL_ARGUMENT);
    CHECK(fixture_code(fulmen_trainer_eval_results(NULL, &r)) == FULMEN_CODE_NULL_ARGUMENT);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* limit_val_batches / limit_test_batches 0: the loop and its hooks are
 * skipped and the results are an empty list (not the last run's). */
static void test_zero_limits_skip(fulmen_loader *a) {
    fixture f = {.model = fixture_mlp(4, 0)};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set_int(o, "limit_test_batches", 0));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_validate(t, m, a, NULL));
    fulmen_value *r = results_of(t);
    CHECK(list_len(r) == 1 && f.starts == 1);
    fulmen_value_free(r);
    CHECK_OK(fulmen_trainer_test(t, m, a, NULL));
    r = results_of(t);
    CHECK(list_len(r) == 0);
    CHECK(f.starts == 1);
    fulmen_value_free(r);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

static fulmen_error *no_batch(void *ud, fulmen_batch_builder *batch, bool *done) {
    (void)ud;
    (void)batch;
    *done = true;
    return NULL;
}

/* Lightning's list holds a dict per loader that gave batches (and a
 * leading one of the hooks' values when loader 0 gave none); a failed run
 * leaves no results of the one before. */
static void test_empty_loaders_and_failures(fulmen_loader *a, fulmen_loader *empty) {
    fixture f = {.model = fixture_mlp(4, 0)};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    const fulmen_loader *a_then_empty[2] = {a, empty}, *empty_then_a[2] = {empty, a};
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, a_then_empty, 2, NULL));
    fulmen_value *r = results_of(t);
    CHECK(list_len(r) == 1);
    fulmen_value *r0 = item_of(r, 0);
    CHECK(dict_len(r0) == 4 && get(r0, "n/dataloader_idx_0") == 3.0);
    fulmen_value_free(r0);
    fulmen_value_free(r);
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, empty_then_a, 2, NULL));
    r = results_of(t);
    CHECK(list_len(r) == 2);
    r0 = item_of(r, 0);
    fulmen_value *r1 = item_of(r, 1);
    CHECK(dict_len(r0) == 1 && get(r0, "ve") == 7.0);
    CHECK(dict_len(r1) == 3 && get(r1, "n/dataloader_idx_1") == 3.0 && get(r1, "ve") == 7.0);
    fulmen_value_free(r0);
    fulmen_value_free(r1);
    fulmen_value_free(r);
    /* "best" with no checkpoint fails before the loop: no stale results */
    CHECK(fixture_code(fulmen_trainer_validate(t, m, a, "best")) == FULMEN_CODE_INVALID_STATE);
    r = results_of(t);
    CHECK(list_len(r) == 0);
    fulmen_value_free(r);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

int main(void) {
    fulmen_dataset *da = fixture_blobs(10, 1, 2.0f), *db = fixture_blobs(6, 2, 2.0f);
    fulmen_loader *a = fixture_loader(da, 4, false, 0), *b = fixture_loader(db, 3, false, 0);
    test_two_loaders(a, b);
    test_zero_limits_skip(a);
    /* a loader with no batch: a host iterator that ends at once */
    fulmen_iterator_vtable iv;
    memset(&iv, 0, sizeof iv);
    iv.struct_size = sizeof iv;
    iv.next = no_batch;
    iv.num_batches = 0;
    fulmen_loader *empty = NULL;
    CHECK_OK(fulmen_loader_from_iterator(&iv, &empty));
    test_empty_loaders_and_failures(a, empty);
    fulmen_loader_free(empty);
    fulmen_loader_free(a);
    fulmen_loader_free(b);
    fulmen_dataset_free(da);
    fulmen_dataset_free(db);
    return check_finish("test_eval_results");
}

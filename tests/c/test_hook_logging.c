/*
 * Logging from hooks as Lightning's `_FxValidator` allows it: for every
 * hook a fit and a test deliver, which on_step / on_epoch combinations are
 * accepted or refused (and with which code), what the defaults resolve
 * to, and where the values land (callback_metrics, logged_metrics, with
 * step values and batch-size-weighted epoch means); then
 * add_dataloader_idx=False (FULMEN_LOG_NO_DATALOADER_IDX) with two
 * validation loaders.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>

enum { REFUSED, TRAIN_BATCH, EVAL_BATCH, EPOCH_ONLY };

/* Lightning's fx_validator.py table for the hooks fulmen delivers. */
static int class_of(int32_t hook) {
    switch (hook) {
    case FULMEN_HOOK_TRAIN_BATCH_START:
    case FULMEN_HOOK_TRAIN_BATCH_END:
    case FULMEN_HOOK_BEFORE_BACKWARD:
    case FULMEN_HOOK_AFTER_BACKWARD:
    case FULMEN_HOOK_BEFORE_OPTIMIZER_STEP:
    case FULMEN_HOOK_BEFORE_ZERO_GRAD:
        return TRAIN_BATCH;
    case FULMEN_HOOK_VALIDATION_BATCH_START:
    case FULMEN_HOOK_VALIDATION_BATCH_END:
    case FULMEN_HOOK_TEST_BATCH_START:
    case FULMEN_HOOK_TEST_BATCH_END:
        return EVAL_BATCH;
    case FULMEN_HOOK_TRAIN_START:
    case FULMEN_HOOK_TRAIN_EPOCH_START:
    case FULMEN_HOOK_TRAIN_EPOCH_END:
    case FULMEN_HOOK_VALIDATION_START:
    case FULMEN_HOOK_VALIDATION_EPOCH_START:
    case FULMEN_HOOK_VALIDATION_EPOCH_END:
    case FULMEN_HOOK_TEST_START:
    case FULMEN_HOOK_TEST_EPOCH_START:
    case FULMEN_HOOK_TEST_EPOCH_END:
        return EPOCH_ONLY;
    default:
        return REFUSED;
    }
}

#define NHOOKS 46

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int seen[NHOOKS];
    int wrong[NHOOKS]; /* calls whose code differed from the table's */
    int val_calls;     /* validation_step calls since the last reset */
    int dl_mode;       /* 0: the table; 1: NO_DATALOADER_IDX in validation_step; 2: in a batch hook */
    int dl_refusal;    /* the step's second-loader log gave INVALID_ARGUMENT */
} state;

/* Expected code of a log call with `flags` in a hook of class `c`. */
static int expected(int c, uint32_t flags) {
    if (c == REFUSED) return FULMEN_CODE_INVALID_STATE;
    int step = (flags & FULMEN_LOG_ON_STEP) != 0;
    int epoch = (flags & FULMEN_LOG_ON_EPOCH) != 0;
    if (flags & FULMEN_LOG_DEFAULT_STEP) step = c == TRAIN_BATCH;
    if (flags & FULMEN_LOG_DEFAULT_EPOCH) epoch = c != TRAIN_BATCH;
    if (c == EPOCH_ONLY && (step || !epoch)) return FULMEN_CODE_INVALID_ARGUMENT;
    if (!step && !epoch) return FULMEN_CODE_INVALID_ARGUMENT;
    return 0;
}

/* Tries each combination under a name of its own ("<tag>_<hook>"). */
static void probe(state *s, int32_t hook, fulmen_hook_context *ctx) {
    static const struct {
        const char *tag;
        uint32_t flags;
    } cases[] = {
        {"d", FULMEN_LOG_DEFAULT},
        {"s", FULMEN_LOG_ON_STEP},
        {"e", FULMEN_LOG_ON_EPOCH},
        {"b", FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH},
        {"se", FULMEN_LOG_ON_STEP | FULMEN_LOG_DEFAULT_EPOCH},
        {"ne", FULMEN_LOG_DEFAULT_EPOCH},
    };
    int c = class_of(hook);
    s->seen[hook]++;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s_%s", cases[i].tag, fulmen_hook_name(hook));
        int got = fixture_code(fulmen_hook_context_log(ctx, name, 1.0, cases[i].flags));
        s->wrong[hook] += got != expected(c, cases[i].flags);
    }
    /* ON and DEFAULT for one level: a bad argument in any hook */
    int both = fixture_code(fulmen_hook_context_log(ctx, "x", 1.0, FULMEN_LOG_ON_STEP | FULMEN_LOG_DEFAULT_STEP));
    s->wrong[hook] += both != FULMEN_CODE_INVALID_ARGUMENT;
}

/* Values with known reductions: batch_idx, epoch and global step. */
static fulmen_error *values(int32_t hook, fulmen_hook_context *ctx) {
    int64_t i = -1, epoch = 0, step = 0;
    fulmen_error *e = fulmen_hook_context_batch_idx(ctx, &i);
    if (e == NULL) e = fulmen_hook_context_epoch(ctx, &epoch);
    if (e == NULL) e = fulmen_hook_context_global_step(ctx, &step);
    if (e != NULL) return e;
    switch (hook) {
    case FULMEN_HOOK_TRAIN_BATCH_END: /* default: on_step */
        return fulmen_hook_context_log(ctx, "tbe", (double)(i + 1 + 10 * epoch), 0);
    case FULMEN_HOOK_BEFORE_OPTIMIZER_STEP: /* step and epoch: _step / _epoch */
        return fulmen_hook_context_log(ctx, "bos", (double)step, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH);
    case FULMEN_HOOK_VALIDATION_BATCH_END: /* default: on_epoch, mean weighted by batch size */
        return fulmen_hook_context_log(ctx, "vbe", (double)i, FULMEN_LOG_DEFAULT);
    case FULMEN_HOOK_TRAIN_EPOCH_START:
        return fulmen_hook_context_log(ctx, "tes", (double)(10 * epoch), 0);
    default:
        return NULL;
    }
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    state *s = ud;
    if (s->dl_mode == 2 && hook == FULMEN_HOOK_VALIDATION_BATCH_END)
        return fulmen_hook_context_log(ctx, "hv", 1.0, FULMEN_LOG_NO_DATALOADER_IDX);
    if (s->dl_mode != 0) return NULL;
    if (hook >= 0 && hook < NHOOKS) probe(s, hook, ctx);
    return values(hook, ctx);
}

static fulmen_error *eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)batch;
    state *s = ud;
    int first_loader = s->val_calls++ < 2; /* two batches per loader below */
    if (s->dl_mode == 1) {
        int code = fixture_code(fulmen_step_context_log(ctx, "v", 1.0, FULMEN_LOG_NO_DATALOADER_IDX, 0));
        if (!first_loader) s->dl_refusal = code == FULMEN_CODE_INVALID_ARGUMENT;
        return first_loader && code != 0 ? fulmen_error_new(FULMEN_CODE_INVALID_STATE, "first loader refused") : NULL;
    }
    if (s->dl_mode == 2) {
        return first_loader ? fulmen_step_context_log(ctx, "only0", 2.0, FULMEN_LOG_NO_DATALOADER_IDX, 0) : NULL;
    }
    return fulmen_step_context_log(ctx, "vstep", 1.0, 0, 0);
}

static fulmen_error *train_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    state *s = ud;
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_lightning_module *module(state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = train_step;
    vt.validation_step = eval_step;
    vt.test_step = eval_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

static double dict_get(const fulmen_value *d, const char *name) {
    fulmen_value *v = NULL;
    double x = NAN;
    if (fixture_code(fulmen_value_dict_get(d, name, &v)) == 0) CHECK_OK(fulmen_value_get_double(v, &x));
    fulmen_value_free(v);
    return x;
}

/* A fit of two epochs (40 samples, batches 16, 16, 8, validated on the
 * same loader) and a test: every delivered hook follows the table, and
 * the values land as Lightning's Trainer puts them. */
static void test_table_and_values(state *s, fulmen_loader *loader) {
    fulmen_lightning_module *m = module(s);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, loader, NULL));

    fulmen_value *cb = NULL, *logged = NULL;
    CHECK_OK(fulmen_trainer_callback_metrics(t, &cb));
    CHECK_OK(fulmen_trainer_logged_metrics(t, &logged));
    /* on_train_batch_end, default on_step: the last batch's value (3 + 10 * epoch 1) */
    CHECK(dict_get(logged, "tbe") == 13.0 && dict_get(cb, "tbe") == 13.0);
    /* on_before_optimizer_step, both levels, at global steps 3, 4, 5 in epoch 1:
     * the last step's value, and the epoch's (3*16 + 4*16 + 5*8) / 40 */
    CHECK(dict_get(logged, "bos_step") == 5.0);
    CHECK_NEAR(dict_get(logged, "bos_epoch"), 3.8, 1e-12);
    CHECK_NEAR(dict_get(cb, "bos"), 3.8, 1e-12);
    CHECK_NEAR(dict_get(cb, "bos_epoch"), 3.8, 1e-12);
    /* on_validation_batch_end, default on_epoch: the weighted mean, no _epoch suffix */
    CHECK_NEAR(dict_get(logged, "vbe"), 0.8, 1e-12);
    CHECK_NEAR(dict_get(cb, "vbe"), 0.8, 1e-12);
    CHECK(isnan(dict_get(logged, "vbe_epoch")));
    /* on_train_epoch_start: on_epoch only, epoch 1's value */
    CHECK(dict_get(logged, "tes") == 10.0 && dict_get(cb, "tes") == 10.0);
    /* the defaults of the probes: a training batch hook logs per step, the others per epoch */
    CHECK(dict_get(cb, "d_on_after_backward") == 1.0 && dict_get(cb, "b_on_train_batch_start_step") == 1.0);
    CHECK(dict_get(cb, "d_on_validation_batch_start") == 1.0 && dict_get(cb, "d_on_train_epoch_end") == 1.0);
    CHECK(isnan(dict_get(cb, "d_on_fit_start")) && isnan(dict_get(cb, "s_on_train_epoch_end")));
    fulmen_value_free(cb);
    fulmen_value_free(logged);

    CHECK_OK(fulmen_trainer_test(t, m, loader, NULL));
    int32_t must_see[] = {FULMEN_HOOK_SETUP,
                          FULMEN_HOOK_FIT_START,
                          FULMEN_HOOK_TRAIN_START,
                          FULMEN_HOOK_TRAIN_EPOCH_START,
                          FULMEN_HOOK_TRAIN_BATCH_START,
                          FULMEN_HOOK_BEFORE_BACKWARD,
                          FULMEN_HOOK_AFTER_BACKWARD,
                          FULMEN_HOOK_BEFORE_OPTIMIZER_STEP,
                          FULMEN_HOOK_BEFORE_ZERO_GRAD,
                          FULMEN_HOOK_TRAIN_BATCH_END,
                          FULMEN_HOOK_VALIDATION_START,
                          FULMEN_HOOK_VALIDATION_BATCH_END,
                          FULMEN_HOOK_VALIDATION_EPOCH_END,
                          FULMEN_HOOK_VALIDATION_END,
                          FULMEN_HOOK_TRAIN_EPOCH_END,
                          FULMEN_HOOK_TRAIN_END,
                          FULMEN_HOOK_FIT_END,
                          FULMEN_HOOK_TEST_START,
                          FULMEN_HOOK_TEST_BATCH_START,
                          FULMEN_HOOK_TEST_EPOCH_END,
                          FULMEN_HOOK_TEST_END,
                          FULMEN_HOOK_TEARDOWN};
    for (size_t i = 0; i < sizeof must_see / sizeof must_see[0]; i++) CHECK(s->seen[must_see[i]] > 0);
    for (int h = 0; h < NHOOKS; h++) {
        if (s->wrong[h] != 0) fprintf(stderr, "%s: %d log calls gave another code\n", fulmen_hook_name(h), s->wrong[h]);
        CHECK(s->wrong[h] == 0);
    }
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
}

/* Refused hooks carry Lightning's message naming the hook. */
static fulmen_error *message_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    int *ok = ud;
    if (hook == FULMEN_HOOK_FIT_START)
        CHECK_ERR(fulmen_hook_context_log(ctx, "x", 1.0, 0), FULMEN_CODE_INVALID_STATE,
                  "You can't `self.log()` inside `on_fit_start`");
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_END)
        CHECK_ERR(fulmen_hook_context_log(ctx, "x", 1.0, FULMEN_LOG_ON_STEP), FULMEN_CODE_INVALID_ARGUMENT,
                  "You can't `self.log(on_step=True)` inside `on_train_epoch_end`, must be one of (False,).");
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END)
        CHECK_ERR(fulmen_hook_context_log(ctx, "x", 1.0, FULMEN_LOG_DEFAULT_EPOCH), FULMEN_CODE_INVALID_ARGUMENT,
                  "`self.log(on_step=False, on_epoch=False)` is not useful");
    *ok += 1;
    return NULL;
}

static void test_messages(fulmen_model *model, fulmen_loader *loader) {
    int calls = 0;
    fulmen_callback_vtable cv;
    memset(&cv, 0, sizeof cv);
    cv.struct_size = sizeof cv;
    cv.userdata = &calls;
    cv.on_hook = message_hook;
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_add_callback(t, "messages", &cv));
    state s;
    memset(&s, 0, sizeof s);
    s.model = model;
    s.dl_mode = 3; /* the module logs nothing */
    fulmen_lightning_module *m = module(&s);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(calls > 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
}

/* add_dataloader_idx=False: one loader's name stays bare, two loaders
 * logging it are Lightning's "twice ... with different arguments"; by
 * default a batch hook's name gets the loader's suffix. */
static void test_dataloader_idx(state *s, fulmen_loader *a, fulmen_loader *b) {
    const fulmen_loader *both[2] = {a, b};
    fulmen_lightning_module *m = module(s);
    fulmen_trainer *t = fixture_trainer(NULL, 1);

    s->dl_mode = 1;
    s->val_calls = 0;
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, both, 2, NULL));
    CHECK(s->dl_refusal);
    double v = 0;
    CHECK_OK(fulmen_trainer_callback_metric(t, "v", &v));
    CHECK(v == 1.0);

    s->dl_mode = 2;
    s->val_calls = 0;
    CHECK_ERR(fulmen_trainer_validate_loaders(t, m, both, 2, NULL), FULMEN_CODE_INVALID_ARGUMENT, "twice");

    /* the suffix by default, and a name that already holds one refused */
    s->dl_mode = 0;
    s->val_calls = 0;
    memset(s->wrong, 0, sizeof s->wrong);
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, both, 2, NULL));
    CHECK_OK(fulmen_trainer_callback_metric(t, "vbe/dataloader_idx_0", &v));
    CHECK_OK(fulmen_trainer_callback_metric(t, "vbe/dataloader_idx_1", &v));
    CHECK_OK(fulmen_trainer_callback_metric(t, "d_on_validation_batch_end/dataloader_idx_1", &v));
    CHECK_ERR(fulmen_trainer_callback_metric(t, "vbe", &v), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    for (int h = 0; h < NHOOKS; h++) CHECK(s->wrong[h] == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
}

/* A name holding `/dataloader_idx_` needs NO_DATALOADER_IDX. */
static fulmen_error *suffixed_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    CHECK_ERR(fulmen_step_context_log(ctx, "m/dataloader_idx_0", 1.0, 0, 0), FULMEN_CODE_INVALID_ARGUMENT,
              "add_dataloader_idx=True");
    CHECK_OK(fulmen_step_context_log(ctx, "n/dataloader_idx_0", 1.0, FULMEN_LOG_NO_DATALOADER_IDX, 0));
    return fixture_cross_entropy(s->model, batch, out);
}

int main(void) {
    char root[] = "/tmp/fulmen-hook-logging-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    fulmen_dataset *ds = fixture_blobs(40, 5, 1.0f);
    fulmen_dataset *small = fixture_blobs(20, 6, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_loader *two = fixture_loader(small, 10, false, 0);

    state s;
    memset(&s, 0, sizeof s);
    s.model = fixture_mlp(4, 0);
    test_table_and_values(&s, loader);
    test_messages(s.model, loader);
    fulmen_loader *first = fixture_loader(ds, 20, false, 0); /* two batches, as `two` */
    test_dataloader_idx(&s, first, two);
    fulmen_loader_free(first);

    fulmen_lightning_module *m = fixture_module(s.model, &s, suffixed_step, NULL);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(t, m, two, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);

    fulmen_loader_free(loader);
    fulmen_loader_free(two);
    fulmen_dataset_free(ds);
    fulmen_dataset_free(small);
    fulmen_model_free(s.model);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_hook_logging");
}

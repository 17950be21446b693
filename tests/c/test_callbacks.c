/*
 * Built-in callbacks and trainer options through the C API: EarlyStopping,
 * LearningRateMonitor, Timer / max_time, gradient accumulation and
 * clipping, validation scheduling, sanity checks, fast_dev_run,
 * overfit_batches, seeding, checkpointing switches, bad option values.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 1.0f); }

static fulmen_model *mlp(bool dropout) { return fixture_mlp(16, dropout ? 0.3 : 0); }

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 5); }

/* A trainer on `dir` (NULL: root) without progress output or loggers;
 * `kv` holds NULL-terminated key/value pairs of further options. */
static fulmen_trainer *trainer_in(const char *dir, long epochs, const char *const *kv) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", dir != NULL ? dir : root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    for (; kv != NULL && kv[0] != NULL; kv += 2) CHECK_OK(fulmen_trainer_options_set(o, kv[0], kv[1]));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static fulmen_trainer *trainer_with(long epochs, const char *const *kv) { return trainer_in(NULL, epochs, kv); }

/* ---- the module and a recording callback ---- */

typedef struct {
    fulmen_model *model;
    const double *script;   /* "score" logged in validation, per validation run */
    int val_runs;           /* validation runs (on_validation_end, sanity included) */
    int sanity_val_batches, val_batches, train_calls, steps_hooked;
    bool in_sanity;
    bool step_scheduler;    /* StepLR(1, 0.5) stepping every epoch */
    const char *sched_name; /* the scheduler's lr_scheduler "name", if any */
    const char *plateau_on; /* a ReduceLROnPlateau on this metric instead, if any */
    bool plateau_lenient;   /* its strict=False */
    double momentum, weight_decay; /* of the SGD */
    float first_x[8];       /* first input value of batch 0, per epoch */
    /* gradient clipping probe (first optimizer step) */
    double grad_norm, grad_max, before[128], after_delta_norm, after_delta_max;
    int nparams;
} fixture;

static fulmen_error *loss_of(fixture *f, const fulmen_batch *batch, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(f->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    int64_t epoch = 0, idx = 0;
    CHECK_OK(fulmen_step_context_epoch(ctx, &epoch));
    CHECK_OK(fulmen_step_context_batch_idx(ctx, &idx));
    f->train_calls++;
    if (idx == 0 && epoch < 8) {
        fulmen_tensor *x = NULL;
        CHECK_OK(fulmen_batch_get(batch, 0, &x));
        float v[2];
        fulmen_tensor *row = NULL;
        CHECK_OK(fulmen_tensor_narrow(x, 0, 0, 1, &row));
        CHECK_OK(fulmen_tensor_copy_to(row, FULMEN_DTYPE_F32, v, sizeof v));
        f->first_x[epoch] = v[0];
    }
    fulmen_error *e = loss_of(f, batch, out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", check_item(*out), FULMEN_LOG_ON_STEP, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fixture *f = ud;
    fulmen_tensor *loss = NULL;
    if (f->in_sanity) f->sanity_val_batches++;
    else f->val_batches++;
    fulmen_error *e = loss_of(f, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", check_item(loss), 0, 0);
    if (e == NULL && f->script != NULL) e = fulmen_step_context_log(ctx, "score", f->script[f->val_runs], 0, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = f->momentum;
    o.weight_decay = f->weight_decay;
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *s = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    if (e == NULL && f->step_scheduler) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &s);
    if (e == NULL && f->plateau_on != NULL) e = fulmen_scheduler_reduce_on_plateau_new(opt, NULL, &s);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, s, FULMEN_INTERVAL_EPOCH, 1, f->plateau_on);
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
        return e;
    }
    if (s != NULL && f->sched_name != NULL) e = fulmen_optimizer_config_set_scheduler_name(config, 0, 0, f->sched_name);
    if (e == NULL && s != NULL && f->plateau_lenient) e = fulmen_optimizer_config_set_scheduler_strict(config, 0, 0, false);
    return e;
}

/* Parameter values and gradients of the model, flattened. */
static int flat(const fulmen_model *m, double *values, double *grads, int cap) {
    size_t count = 0;
    int n = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &count));
    for (size_t i = 0; i < count; i++) {
        char name[64];
        size_t len = 0, numel = 0;
        fulmen_tensor *t = NULL, *g = NULL;
        CHECK_OK(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
        CHECK_OK(fulmen_tensor_numel(t, &numel));
        float buf[64];
        if (numel > 64 || n + (int)numel > cap) numel = 0;
        if (numel > 0) {
            CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, buf, numel * sizeof(float)));
            for (size_t k = 0; k < numel; k++) values[n + (int)k] = buf[k];
            if (grads != NULL) {
                CHECK_OK(fulmen_tensor_grad(t, &g));
                if (g != NULL) CHECK_OK(fulmen_tensor_copy_to(g, FULMEN_DTYPE_F32, buf, numel * sizeof(float)));
                for (size_t k = 0; k < numel; k++) grads[n + (int)k] = g != NULL ? buf[k] : 0;
                fulmen_tensor_free(g);
            }
            n += (int)numel;
        }
        fulmen_tensor_free(t);
    }
    return n;
}

static fulmen_error *module_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    int64_t step = 0;
    CHECK_OK(fulmen_hook_context_global_step(ctx, &step));
    if (hook == FULMEN_HOOK_SANITY_CHECK_START) f->in_sanity = true;
    if (hook == FULMEN_HOOK_SANITY_CHECK_END) f->in_sanity = false;
    if (hook == FULMEN_HOOK_VALIDATION_END && !f->in_sanity) f->val_runs++;
    if (hook == FULMEN_HOOK_BEFORE_OPTIMIZER_STEP) f->steps_hooked++;
    if (hook == FULMEN_HOOK_BEFORE_OPTIMIZER_STEP && step == 0) {
        double grads[128];
        f->nparams = flat(f->model, f->before, grads, 128);
        f->grad_norm = f->grad_max = 0;
        for (int i = 0; i < f->nparams; i++) {
            f->grad_norm += grads[i] * grads[i];
            f->grad_max = fmax(f->grad_max, fabs(grads[i]));
        }
        f->grad_norm = sqrt(f->grad_norm);
    }
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END && step == 1) {
        /* plain SGD, lr 0.1: the applied gradient is -(after - before) / lr */
        double after[128];
        int n = flat(f->model, after, NULL, 128);
        f->after_delta_norm = f->after_delta_max = 0;
        for (int i = 0; i < n && i < f->nparams; i++) {
            double g = (f->before[i] - after[i]) / 0.1;
            f->after_delta_norm += g * g;
            f->after_delta_max = fmax(f->after_delta_max, fabs(g));
        }
        f->after_delta_norm = sqrt(f->after_delta_norm);
    }
    return NULL;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = module_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

static int64_t global_step(const fulmen_trainer *t) {
    int64_t s = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &s));
    return s;
}

/* Fits a fresh fixture (4 train batches, 2 val batches) and returns the
 * steps taken; `setup` may add callbacks. */
typedef void (*setup_fn)(fulmen_trainer *t, void *arg);
static fulmen_loader *TL, *VL, *VL3;

static int64_t fit_steps(fixture *f, long epochs, const char *const *kv, setup_fn setup, void *arg, fulmen_error **err) {
    fulmen_lightning_module *m = module_for(f);
    fulmen_trainer *t = trainer_with(epochs, kv);
    if (setup != NULL) setup(t, arg);
    fulmen_error *e = fulmen_trainer_fit(t, m, TL, VL, NULL);
    if (err != NULL) *err = e;
    else CHECK_OK(e);
    int64_t s = global_step(t);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    return s;
}

static void add_es(fulmen_trainer *t, void *arg) {
    CHECK_OK(fulmen_trainer_add_early_stopping(t, (const fulmen_early_stopping_options *)arg));
}

static fulmen_early_stopping_options es_on(const char *monitor, int64_t patience) {
    fulmen_early_stopping_options o = fulmen_early_stopping_options_default();
    o.monitor = monitor;
    o.patience = patience;
    return o;
}

static void test_early_stopping(void) {
    fulmen_early_stopping_options d = fulmen_early_stopping_options_default();
    CHECK(d.monitor == NULL && d.min_delta == 0 && d.patience == 3 && d.mode == 0 && d.strict && d.check_finite);
    CHECK(isnan(d.stopping_threshold) && isnan(d.divergence_threshold) && d.check_on_train_epoch_end == -1);

    static const double plateau[] = {1.0, 0.8, 0.9, 0.85, 0.95, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9};
    fixture f = {.model = mlp(false), .script = plateau};
    fulmen_early_stopping_options o = es_on("score", 1);
    /* patience 1: epoch 2 does not improve on 0.8 -> stop after 3 epochs */
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 12);
    CHECK(f.val_runs == 3);
    /* patience 2: epochs 2 and 3 do not improve -> 4 epochs */
    f.val_runs = 0;
    o.patience = 2;
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 16);
    /* min_delta 0.3: only epoch 0 counts, 0.8 is not better by 0.3 */
    f.val_runs = 0;
    o.patience = 1;
    o.min_delta = 0.3;
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 8);
    /* min_epochs 5 keeps training past the stop */
    f.val_runs = 0;
    o.min_delta = 0;
    const char *min5[] = {"min_epochs", "5", NULL};
    CHECK(fit_steps(&f, 10, min5, add_es, &o, NULL) == 20);
    /* mode max: 1.0 is never beaten -> stop after epoch 1 */
    f.val_runs = 0;
    o.mode = 1;
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 8);

    static const double falling[] = {1.0, 0.7, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1};
    f.script = falling;
    f.val_runs = 0;
    o = es_on("score", 5);
    o.stopping_threshold = 0.5;
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 12); /* 0.4 < 0.5 at epoch 2 */
    static const double rising[] = {1.0, 1.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0};
    f.script = rising;
    f.val_runs = 0;
    o = es_on("score", 5);
    o.divergence_threshold = 2.0;
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 12); /* 3.0 > 2.0 at epoch 2 */
    static const double nan_at_1[] = {1.0, NAN, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1};
    f.script = nan_at_1;
    f.val_runs = 0;
    o = es_on("score", 5);
    CHECK(fit_steps(&f, 10, NULL, add_es, &o, NULL) == 8); /* check_finite */
    f.val_runs = 0;
    o.check_finite = false;
    CHECK(fit_steps(&f, 4, NULL, add_es, &o, NULL) == 16);

    /* a metric that is never logged: strict fails, lenient ignores it */
    f.val_runs = 0;
    o = es_on("val_accuracy", 1);
    fulmen_error *e = NULL;
    fit_steps(&f, 3, NULL, add_es, &o, &e);
    CHECK(fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE && strstr(fulmen_error_message(e), "val_accuracy") != NULL);
    fulmen_error_free(e);
    o.strict = false;
    CHECK(fit_steps(&f, 3, NULL, add_es, &o, NULL) == 12);

    /* bad options */
    fulmen_trainer *t = trainer_with(1, NULL);
    o = es_on(NULL, 1);
    CHECK_ERR(fulmen_trainer_add_early_stopping(t, &o), FULMEN_CODE_NULL_ARGUMENT, "monitor");
    o = es_on("score", -1);
    CHECK_ERR(fulmen_trainer_add_early_stopping(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "patience");
    o = es_on("score", 1);
    o.mode = 3;
    CHECK_ERR(fulmen_trainer_add_early_stopping(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "mode");
    o.mode = 0;
    o.check_on_train_epoch_end = 5;
    CHECK_ERR(fulmen_trainer_add_early_stopping(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "check_on_train_epoch_end");
    CHECK_ERR(fulmen_trainer_add_early_stopping(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "options");
    fulmen_trainer_free(t);
    fulmen_model_free(f.model);
}

/* ---- a host logger recording what LearningRateMonitor sends ---- */

typedef struct {
    int n;
    int64_t step[64];
    double value[64];
} lr_log;

static fulmen_error *lr_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch, int64_t step) {
    lr_log *l = ud;
    (void)epoch;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(names[i], "lr-", 3) == 0) CHECK(strcmp(names[i], "lr-SGD") == 0);
        if (strcmp(names[i], "lr-SGD") == 0 && l->n < 64) {
            l->step[l->n] = step;
            l->value[l->n++] = values[i];
        }
    }
    return NULL;
}

static void test_lr_monitor(void) {
    static lr_log log;
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &log;
    v.log_metrics = lr_metrics;
    fixture f = {.model = mlp(false)};
    fulmen_lightning_module *m = module_for(&f);

    const char *every2[] = {"log_every_n_steps", "2", NULL};
    fulmen_trainer *t = trainer_with(2, every2);
    CHECK_OK(fulmen_trainer_add_lr_monitor(t, "step"));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    /* on_train_batch_start when (global_step + 1) % 2 == 0, at that step */
    CHECK(log.n == 4 && log.step[0] == 1 && log.step[1] == 3 && log.step[2] == 5 && log.step[3] == 7);
    CHECK(log.value[0] == 0.1 && log.value[3] == 0.1);
    fulmen_trainer_free(t);

    /* "epoch": at every epoch start, following a StepLR */
    memset(&log, 0, sizeof log);
    f.step_scheduler = true;
    t = trainer_with(3, every2);
    CHECK_OK(fulmen_trainer_add_lr_monitor(t, "epoch"));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(log.n == 3 && log.step[0] == 0 && log.step[1] == 4 && log.step[2] == 8);
    CHECK_NEAR(log.value[0], 0.1, 1e-12);
    CHECK_NEAR(log.value[1], 0.05, 1e-12);
    CHECK_NEAR(log.value[2], 0.025, 1e-12);
    fulmen_trainer_free(t);
    /* both (NULL) */
    memset(&log, 0, sizeof log);
    f.step_scheduler = false;
    t = trainer_with(1, every2);
    CHECK_OK(fulmen_trainer_add_lr_monitor(t, NULL));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(log.n == 3 && log.step[0] == 0 && log.step[1] == 1 && log.step[2] == 3);
    CHECK_ERR(fulmen_trainer_add_lr_monitor(t, "hourly"), FULMEN_CODE_INVALID_ARGUMENT, "logging_interval");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ---- a scheduler's "name" and "strict" (Lightning's lr_scheduler config) ---- */

typedef struct {
    int named, unnamed;
    double last;
} name_log;

static fulmen_error *name_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                  int64_t step) {
    name_log *l = ud;
    (void)epoch;
    (void)step;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "warmup") == 0) {
            l->named++;
            l->last = values[i];
        }
        if (strncmp(names[i], "lr-", 3) == 0) l->unnamed++;
    }
    return NULL;
}

static fulmen_error *bad_index_config(void *ud, fulmen_optimizer_config *config) {
    fulmen_error *e = configure_optimizers(ud, config);
    if (e != NULL) return e;
    /* out-of-range indices and an empty name are refused */
    CHECK_ERR(fulmen_optimizer_config_set_scheduler_name(config, 0, 1, "x"), FULMEN_CODE_INVALID_ARGUMENT,
              "scheduler_index 1");
    CHECK_ERR(fulmen_optimizer_config_set_scheduler_strict(config, 1, 0, false), FULMEN_CODE_INVALID_ARGUMENT,
              "optimizer_index 1");
    CHECK_ERR(fulmen_optimizer_config_set_scheduler_name(config, 0, 0, ""), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    return NULL;
}

static void test_scheduler_name_and_strict(void) {
    static name_log log;
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &log;
    v.log_metrics = name_metrics;
    fixture f = {.model = mlp(false), .step_scheduler = true, .sched_name = "warmup"};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(2, NULL);
    CHECK_OK(fulmen_trainer_add_lr_monitor(t, "epoch"));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    /* LearningRateMonitor logs "warmup", never lr-SGD */
    CHECK(log.named == 2 && log.unnamed == 0);
    CHECK_NEAR(log.last, 0.05, 1e-12);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);

    /* bad indices, checked inside configure_optimizers */
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &f;
    vt.training_step = training_step;
    vt.configure_optimizers = bad_index_config;
    CHECK_OK(fulmen_lightning_module_new(&vt, f.model, &m));
    t = trainer_with(1, NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);

    /* ReduceLROnPlateau on a metric never logged: strict (default) fails the
     * fit, strict=False skips its steps and keeps the lr */
    f.step_scheduler = false;
    f.sched_name = NULL;
    f.plateau_on = "never_logged";
    m = module_for(&f);
    t = trainer_with(2, NULL);
    CHECK_ERR(fulmen_trainer_fit(t, m, TL, NULL, NULL), FULMEN_CODE_INVALID_STATE, "never_logged");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    f.plateau_lenient = true;
    m = module_for(&f);
    t = trainer_with(2, NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(global_step(t) > 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ---- LearningRateMonitor with momentum and weight decay ---- */

typedef struct {
    int calls;       /* log_metrics calls with an lr-SGD entry */
    int entries;     /* lr-SGD* entries seen */
    double lr, momentum, weight_decay;
} lr_stats;

static fulmen_error *stats_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                   int64_t step) {
    lr_stats *l = ud;
    (void)epoch;
    (void)step;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(names[i], "lr-", 3) != 0) continue;
        any = true;
        l->entries++;
        if (strcmp(names[i], "lr-SGD") == 0) l->lr = values[i];
        else if (strcmp(names[i], "lr-SGD-momentum") == 0) l->momentum = values[i];
        else if (strcmp(names[i], "lr-SGD-weight_decay") == 0) l->weight_decay = values[i];
        else CHECK(!"unexpected lr-* name");
    }
    if (any) l->calls++;
    return NULL;
}

/* log_momentum / log_weight_decay add <name>-momentum and
 * <name>-weight_decay; with both intervals (NULL) an optimizer whose
 * scheduler steps per epoch is logged at epoch starts only, as Lightning. */
static void test_lr_monitor_stats(void) {
    static lr_stats log;
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &log;
    v.log_metrics = stats_metrics;
    fixture f = {.model = mlp(false), .step_scheduler = true, .momentum = 0.9, .weight_decay = 0.01};
    fulmen_lightning_module *m = module_for(&f);
    const char *every1[] = {"log_every_n_steps", "1", NULL};
    fulmen_trainer *t = trainer_with(2, every1);
    CHECK_OK(fulmen_trainer_add_lr_monitor_with(t, NULL, true, true));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(log.calls == 2 && log.entries == 6); /* two epoch starts, 4 batches each not logged */
    CHECK_NEAR(log.lr, 0.05, 1e-12);
    CHECK(log.momentum == 0.9 && log.weight_decay == 0.01);
    fulmen_trainer_free(t);
    /* "step": every batch start, whatever the scheduler's interval */
    memset(&log, 0, sizeof log);
    t = trainer_with(1, every1);
    CHECK_OK(fulmen_trainer_add_lr_monitor_with(t, "step", true, false));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(log.calls == 4 && log.entries == 8 && log.weight_decay == 0);
    CHECK_ERR(fulmen_trainer_add_lr_monitor_with(t, "hourly", true, true), FULMEN_CODE_INVALID_ARGUMENT,
              "logging_interval");
    CHECK_ERR(fulmen_trainer_add_lr_monitor_with(NULL, "step", true, true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ---- DeviceStatsMonitor ---- */

typedef struct {
    int starts, ends; /* log_metrics calls carrying the CPU figures */
    double rss;
} stats_log;

static fulmen_error *stats_seen(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                int64_t step) {
    stats_log *l = ud;
    (void)epoch;
    (void)step;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "DeviceStatsMonitor.on_train_batch_start/cpu_percent") == 0) l->starts++;
        if (strcmp(names[i], "DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent") == 0) l->ends++;
        if (strcmp(names[i], "DeviceStatsMonitor.on_train_batch_end/cpu_rss_bytes") == 0) l->rss = values[i];
    }
    return NULL;
}

/* Logged when the loggers are due (every 2 steps: 2 batch starts and 2
 * batch ends in each 4-batch epoch); cpu_stats 0 logs nothing on a CPU.
 * The trainer is on the CPU also where a GPU would be "auto". */
static void test_device_stats(void) {
    static stats_log log;
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &log;
    v.log_metrics = stats_seen;
    fixture f = {.model = mlp(false)};
    fulmen_lightning_module *m = module_for(&f);
    const char *every2[] = {"log_every_n_steps", "2", "accelerator", "cpu", NULL};
    fulmen_trainer *t = trainer_with(2, every2);
    CHECK_OK(fulmen_trainer_add_device_stats_monitor(t, -1));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(log.starts == 4 && log.ends == 4);
    CHECK(log.rss > 1e6); /* this process's resident memory, in bytes */
    fulmen_trainer_free(t);
    memset(&log, 0, sizeof log);
    t = trainer_with(1, every2);
    CHECK_OK(fulmen_trainer_add_device_stats_monitor(t, 0));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(log.starts == 0 && log.ends == 0);
    CHECK_ERR(fulmen_trainer_add_device_stats_monitor(t, 2), FULMEN_CODE_INVALID_ARGUMENT, "cpu_stats");
    fulmen_trainer_free(t);
    /* Without any logger, as Lightning: DeviceStatsMonitor and
     * LearningRateMonitor refuse the fit before a step. */
    int64_t step = -1;
    t = trainer_with(1, every2);
    CHECK_OK(fulmen_trainer_add_device_stats_monitor(t, -1));
    CHECK_ERR(fulmen_trainer_fit(t, m, TL, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "needs a logger");
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 0);
    fulmen_trainer_free(t);
    t = trainer_with(1, every2);
    CHECK_OK(fulmen_trainer_add_lr_monitor(t, "step"));
    CHECK_ERR(fulmen_trainer_fit(t, m, TL, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "needs a logger");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ---- ThroughputMonitor ---- */

typedef struct {
    int rates, val_logs, global;
    double samples, per_sample; /* last train/samples; samples_per_sec / batches_per_sec */
} rate_log;

static fulmen_error *rates_seen(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                int64_t step) {
    rate_log *l = ud;
    (void)epoch;
    (void)step;
    double b = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "train/samples") == 0) l->samples = values[i];
        if (strcmp(names[i], "train/device/batches_per_sec") == 0) b = values[i];
        if (strcmp(names[i], "train/device/samples_per_sec") == 0) s = values[i];
        if (strcmp(names[i], "train/samples_per_sec") == 0) l->global++;
        if (strcmp(names[i], "validate/samples") == 0) l->val_logs++;
    }
    if (b > 0) {
        l->rates++;
        l->per_sample = s / b;
    }
    return NULL;
}

/* A window of 3: rates from the third batch on, samples per batch = the
 * batch size; counters of every batch; validation apart; one rank only. */
static void test_throughput(void) {
    static rate_log log;
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &log;
    v.log_metrics = rates_seen;
    fixture f = {.model = mlp(false)};
    fulmen_lightning_module *m = module_for(&f);
    const char *every1[] = {"log_every_n_steps", "1", "num_sanity_val_steps", "0", NULL};
    fulmen_trainer *t = trainer_with(1, every1);
    CHECK_OK(fulmen_trainer_add_throughput_monitor(t, 3, NULL));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, VL, NULL));
    CHECK(log.samples == 32 && log.rates == 2 && log.global == 0);
    CHECK_NEAR(log.per_sample, 8.0, 1e-9);
    CHECK(log.val_logs >= 1);
    CHECK_ERR(fulmen_trainer_add_throughput_monitor(t, 1, NULL), FULMEN_CODE_INVALID_ARGUMENT, "window_size");
    CHECK_ERR(fulmen_trainer_add_throughput_monitor(t, 10, "a,b"), FULMEN_CODE_INVALID_ARGUMENT, "separator");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

typedef struct {
    int seen;
    double batches_per_sec, flops_per_sec, mfu;
    int global_flops;
} flops_log;

static fulmen_error *flops_seen(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                int64_t step) {
    flops_log *l = ud;
    (void)epoch;
    (void)step;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "train/device/batches_per_sec") == 0) l->batches_per_sec = values[i];
        if (strcmp(names[i], "train/device/flops_per_sec") == 0) {
            l->flops_per_sec = values[i];
            l->seen++;
        }
        if (strcmp(names[i], "train/device/mfu") == 0) l->mfu = values[i];
        if (strcmp(names[i], "train/flops_per_sec") == 0) l->global_flops++;
    }
    return NULL;
}

/* FLOPs as fabric's Throughput: the window's FLOPs (but its first
 * update's) over its time, so 1000 FLOPs per batch give 1000 times the
 * batches per second; mfu is that over the peak. */
static void test_throughput_flops(void) {
    static flops_log log;
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &log;
    v.log_metrics = flops_seen;
    fixture f = {.model = mlp(false)};
    fulmen_lightning_module *m = module_for(&f);
    const char *every1[] = {"log_every_n_steps", "1", "num_sanity_val_steps", "0", NULL};
    fulmen_trainer *t = trainer_with(1, every1);
    CHECK_OK(fulmen_trainer_add_throughput_monitor_flops(t, 3, NULL, 1000.0, 4000.0));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, TL, VL, NULL));
    CHECK(log.seen == 2 && log.global_flops == 0);
    CHECK_NEAR(log.flops_per_sec / log.batches_per_sec, 1000.0, 1e-6);
    CHECK_NEAR(log.mfu * 4000.0, log.flops_per_sec, 1e-9 * log.flops_per_sec);
    CHECK_ERR(fulmen_trainer_add_throughput_monitor_flops(t, 3, NULL, -1.0, 0.0), FULMEN_CODE_INVALID_ARGUMENT,
              "flops_per_batch");
    CHECK_ERR(fulmen_trainer_add_throughput_monitor_flops(t, 3, NULL, 1.0, NAN), FULMEN_CODE_INVALID_ARGUMENT,
              "available_flops");
    double peak = -1;
    CHECK_OK(fulmen_available_flops("NVIDIA H100 80GB HBM3", "bfloat16", &peak));
    CHECK(peak == 9.894e14);
    CHECK_OK(fulmen_available_flops("NVIDIA H100 80GB HBM3", "float8", &peak));
    CHECK(peak == 0.0);
    CHECK_OK(fulmen_available_flops("cpu", "float32", &peak));
    CHECK(peak == 0.0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

static void add_timer(fulmen_trainer *t, void *arg) {
    const char *const *a = arg;
    CHECK_OK(fulmen_trainer_add_timer(t, a[0], a[1]));
}

static void test_timer(void) {
    fixture f = {.model = mlp(false)};
    const char *step0[] = {"0", "step"}, *epoch0[] = {"0", "epoch"}, *measure[] = {NULL, NULL};
    CHECK(fit_steps(&f, 5, NULL, add_timer, (void *)step0, NULL) == 1);
    CHECK(fit_steps(&f, 5, NULL, add_timer, (void *)epoch0, NULL) == 4);
    CHECK(fit_steps(&f, 2, NULL, add_timer, (void *)measure, NULL) == 8);
    const char *long_time[] = {"00:01:00:00", "step"};
    CHECK(fit_steps(&f, 2, NULL, add_timer, (void *)long_time, NULL) == 8);
    const char *max_time[] = {"max_time", "00:00:00:00", NULL};
    CHECK(fit_steps(&f, 5, max_time, NULL, NULL, NULL) == 1);
    const char *max_time_long[] = {"max_time", "3600", NULL};
    CHECK(fit_steps(&f, 2, max_time_long, NULL, NULL, NULL) == 8);
    fulmen_trainer *t = trainer_with(1, NULL);
    CHECK_ERR(fulmen_trainer_add_timer(t, "soon", "step"), FULMEN_CODE_INVALID_ARGUMENT, "soon");
    CHECK_ERR(fulmen_trainer_add_timer(t, "10", "hour"), FULMEN_CODE_INVALID_ARGUMENT, "hour");
    CHECK_ERR(fulmen_trainer_add_timer(t, "-1", "step"), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    fulmen_trainer_free(t);
    fulmen_model_free(f.model);
}

static void test_accumulate_and_clip(void) {
    fixture f = {.model = mlp(false)};
    const char *acc2[] = {"accumulate_grad_batches", "2", NULL};
    CHECK(fit_steps(&f, 2, acc2, NULL, NULL, NULL) == 4);
    CHECK(f.steps_hooked == 4 && f.train_calls == 8);
    const char *acc3[] = {"accumulate_grad_batches", "3", NULL};
    f.steps_hooked = 0;
    CHECK(fit_steps(&f, 2, acc3, NULL, NULL, NULL) == 4); /* batch 2 and the last batch of each epoch */
    CHECK(f.steps_hooked == 4);

    /* norm clipping: the applied gradient has norm 0.01; the hook saw the unclipped one */
    const char *norm[] = {"gradient_clip_val", "0.01", "max_steps", "1", NULL};
    CHECK(fit_steps(&f, 1, norm, NULL, NULL, NULL) == 1);
    CHECK(f.grad_norm > 0.05);
    CHECK_NEAR(f.after_delta_norm, 0.01, 1e-4);
    const char *value[] = {"gradient_clip_val", "0.001", "gradient_clip_algorithm", "value", "max_steps", "1", NULL};
    CHECK(fit_steps(&f, 1, value, NULL, NULL, NULL) == 1);
    CHECK(f.grad_max > 0.01);
    CHECK(f.after_delta_max <= 0.001 + 1e-5 && f.after_delta_max >= 0.001 - 1e-5);
    const char *none[] = {"max_steps", "1", NULL};
    CHECK(fit_steps(&f, 1, none, NULL, NULL, NULL) == 1);
    CHECK_NEAR(f.after_delta_norm, f.grad_norm, 1e-3);
    fulmen_model_free(f.model);
}

static int64_t fit_with_val(fixture *f, long epochs, const char *const *kv, const fulmen_loader *val) {
    fulmen_lightning_module *m = module_for(f);
    fulmen_trainer *t = trainer_with(epochs, kv);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, val, NULL));
    int64_t s = global_step(t);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    return s;
}

static void reset(fixture *f) {
    f->val_runs = f->val_batches = f->sanity_val_batches = f->train_calls = f->steps_hooked = 0;
}

static void test_validation_schedule(void) {
    fixture f = {.model = mlp(false)};
    const char *half[] = {"val_check_interval", "0.5", NULL};
    fit_with_val(&f, 2, half, VL);
    CHECK(f.val_runs == 4 && f.val_batches == 8);
    reset(&f);
    const char *every3[] = {"val_check_interval", "3", NULL};
    fit_with_val(&f, 2, every3, VL);
    CHECK(f.val_runs == 2); /* batch 2 of each epoch */
    reset(&f);
    const char *across[] = {"val_check_interval", "3", "check_val_every_n_epoch", "none", NULL};
    fit_with_val(&f, 3, across, VL);
    CHECK(f.val_runs == 4); /* after training batches 3, 6, 9, 12 */
    reset(&f);
    const char *every2ep[] = {"check_val_every_n_epoch", "2", NULL};
    fit_with_val(&f, 4, every2ep, VL);
    CHECK(f.val_runs == 2);
    reset(&f);
    const char *noval[] = {"limit_val_batches", "0", "num_sanity_val_steps", "2", NULL};
    fit_with_val(&f, 2, noval, VL);
    CHECK(f.val_runs == 0 && f.val_batches == 0 && f.sanity_val_batches == 0);
    reset(&f);
    const char *limit1[] = {"limit_val_batches", "1", NULL};
    fit_with_val(&f, 2, limit1, VL3);
    CHECK(f.val_runs == 2 && f.val_batches == 2);

    /* sanity check: 2 batches by default, none with 0, all with -1 */
    reset(&f);
    const char *sanity2[] = {"num_sanity_val_steps", "2", NULL};
    fit_with_val(&f, 1, sanity2, VL3);
    CHECK(f.sanity_val_batches == 2 && f.val_batches == 3);
    reset(&f);
    const char *sanity_all[] = {"num_sanity_val_steps", "-1", NULL};
    fit_with_val(&f, 1, sanity_all, VL3);
    CHECK(f.sanity_val_batches == 3 && f.val_batches == 3);
    reset(&f);
    fit_with_val(&f, 1, NULL, VL3);
    CHECK(f.sanity_val_batches == 0 && f.val_runs == 1);
    fulmen_model_free(f.model);
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int host_calls;
static fulmen_error *count_metrics(void *ud, const char *const *n, const double *v, size_t k, int64_t e, int64_t s) {
    (void)ud, (void)n, (void)v, (void)k, (void)e, (void)s;
    host_calls++;
    return NULL;
}

static void test_dev_runs(void) {
    char dir[300], sub[400];
    fixture f = {.model = mlp(false)};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.log_metrics = count_metrics;

    /* fast_dev_run: one batch of each loop, no sanity check, no files, no logs */
    snprintf(dir, sizeof dir, "%s/fastdev", root);
    const char *fast[] = {"fast_dev_run", "true", "logger", "true", "num_sanity_val_steps", "2", NULL};
    fulmen_trainer *t = trainer_in(dir, 5, fast);
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    host_calls = 0;
    CHECK_OK(fulmen_trainer_fit(t, m, TL, VL, NULL));
    CHECK(global_step(t) == 1 && f.train_calls == 1 && f.val_batches == 1 && f.sanity_val_batches == 0);
    snprintf(sub, sizeof sub, "%s/lightning_logs", dir);
    CHECK(!is_dir(sub));
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    CHECK(!is_dir(sub));
    if (host_calls != 0) fprintf(stderr, "fast_dev_run: the host logger got %d log_metrics calls, expected 0\n", host_calls);
    CHECK(host_calls == 0);
    fulmen_trainer_free(t);
    reset(&f);
    const char *fast3[] = {"fast_dev_run", "3", NULL};
    t = trainer_in(dir, 5, fast3);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, VL, NULL));
    CHECK(global_step(t) == 3 && f.val_batches == 2); /* the val loader has 2 batches */
    fulmen_trainer_free(t);

    /* overfit_batches: the same 2 batches every epoch, shuffle off */
    reset(&f);
    const char *overfit[] = {"overfit_batches", "2", NULL};
    t = trainer_in(dir, 3, overfit);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, VL3, NULL));
    CHECK(global_step(t) == 6 && f.val_batches == 6);
    CHECK(f.first_x[0] == f.first_x[1] && f.first_x[1] == f.first_x[2]);
    fulmen_trainer_free(t);
    reset(&f);
    t = trainer_in(dir, 3, NULL); /* the shuffled loader changes order per epoch */
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    CHECK(!(f.first_x[0] == f.first_x[1] && f.first_x[1] == f.first_x[2]));
    fulmen_trainer_free(t);

    /* checkpointing on (default) writes <root>/checkpoints; off writes nothing */
    snprintf(dir, sizeof dir, "%s/ckpt_on", root);
    t = trainer_in(dir, 1, NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    snprintf(sub, sizeof sub, "%s/checkpoints/epoch=0-step=4.ckpt", dir);
    CHECK(access(sub, F_OK) == 0);
    fulmen_trainer_free(t);
    snprintf(dir, sizeof dir, "%s/ckpt_off", root);
    const char *off[] = {"enable_checkpointing", "false", NULL};
    t = trainer_in(dir, 1, off);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    CHECK(!is_dir(sub));
    char buf[64];
    size_t len = 0;
    CHECK_ERR(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, buf, sizeof buf, &len), FULMEN_CODE_INVALID_STATE, NULL);
    fulmen_trainer_free(t);

    /* deterministic and the model summary switch run */
    const char *det[] = {"deterministic", "true", "enable_model_summary", "true", NULL};
    t = trainer_in(dir, 1, det);
    CHECK_OK(fulmen_trainer_fit(t, m, TL, VL, NULL));
    CHECK(global_step(t) == 4);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* The same seed gives bit-identical fits (dropout included); another does not. */
static void test_seed(void) {
    char init[300];
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    fulmen_model *base = mlp(true);
    CHECK_OK(fulmen_model_save(base, init));
    float w[3][2 * 16];
    for (int run = 0; run < 3; run++) {
        fixture f = {.model = mlp(true)};
        CHECK_OK(fulmen_model_load(f.model, init, true));
        const char *seed[] = {"seed", run < 2 ? "17" : "18", "enable_checkpointing", "false", NULL};
        fulmen_lightning_module *m = module_for(&f);
        fulmen_trainer *t = trainer_with(2, seed);
        CHECK_OK(fulmen_manual_seed(1000 + (uint64_t)run)); /* overridden by the seed option */
        CHECK_OK(fulmen_trainer_fit(t, m, TL, NULL, NULL));
        fulmen_tensor *p = NULL;
        CHECK_OK(fulmen_model_state_dict_get(f.model, "0.weight", &p));
        CHECK_OK(fulmen_tensor_copy_to(p, FULMEN_DTYPE_F32, w[run], sizeof w[run]));
        fulmen_tensor_free(p);
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(f.model);
    }
    CHECK(memcmp(w[0], w[1], sizeof w[0]) == 0);
    CHECK(memcmp(w[0], w[2], sizeof w[0]) != 0);
    fulmen_model_free(base);
}

static void test_bad_options(void) {
    static const char *bad[][3] = {
        {"accumulate_grad_batches", "0", "accumulate_grad_batches"},
        {"gradient_clip_val", "-1", "gradient_clip_val"},
        {"gradient_clip_val", "big", "gradient_clip_val"},
        {"gradient_clip_algorithm", "l2", "gradient_clip_algorithm"},
        {"val_check_interval", "1.5", "val_check_interval"},
        {"val_check_interval", "0", "val_check_interval"},
        {"check_val_every_n_epoch", "0", "check_val_every_n_epoch"},
        {"num_sanity_val_steps", "-2", "num_sanity_val_steps"},
        {"fast_dev_run", "-1", "fast_dev_run"},
        {"fast_dev_run", "maybe", "fast_dev_run"},
        {"overfit_batches", "1.5", "overfit_batches"},
        {"limit_val_batches", "-1", "limit_val_batches"},
        {"min_epochs", "-1", "min_epochs"},
        {"min_steps", "-3", "min_steps"},
        {"max_time", "soon", "max_time"},
        {"max_time", "1:2", "max_time"},
        {"deterministic", "maybe", "deterministic"},
        {"enable_checkpointing", "2", "enable_checkpointing"},
        {"enable_model_summary", "yes please", "enable_model_summary"},
        {"inference_mode", "x", "inference_mode"},
        {"logger", "xml", "logger"},
        {"seed", "-1", "seed"},
        {"gradient_clip", "1", "gradient_clip"},
    };
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fulmen_error *e = fulmen_trainer_options_set(o, bad[i][0], bad[i][1]);
        bool ok = fulmen_error_code(e) == FULMEN_CODE_INVALID_ARGUMENT && strstr(fulmen_error_message(e), bad[i][2]) != NULL;
        if (!ok) fprintf(stderr, "option %s=%s: got code %d \"%s\", expected INVALID_ARGUMENT naming %s\n", bad[i][0],
                         bad[i][1], fulmen_error_code(e), fulmen_error_message(e), bad[i][2]);
        CHECK(ok);
        fulmen_error_free(e);
    }
    /* the options are unchanged after a refused value */
    CHECK_OK(fulmen_trainer_options_set(o, "accumulate_grad_batches", "2"));
    CHECK_ERR(fulmen_trainer_options_set(o, "accumulate_grad_batches", "0"), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_OK(fulmen_trainer_options_set_float(o, "val_check_interval", 0.25));
    CHECK_OK(fulmen_trainer_options_set_int(o, "val_check_interval", 10));
    CHECK_OK(fulmen_trainer_options_set_float(o, "gradient_clip_val", 0.5));
    CHECK_OK(fulmen_trainer_options_set(o, "gradient_clip_val", "none"));
    CHECK_OK(fulmen_trainer_options_set(o, "max_time", "none"));
    CHECK_OK(fulmen_trainer_options_set(o, "min_epochs", "none"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "fast_dev_run", true));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "csv,tensorboard"));
    fulmen_trainer_options_free(o);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-callbacks-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    fulmen_dataset *train = blobs(32, 1), *val = blobs(32, 2), *val3 = blobs(48, 3);
    TL = loader(train, 8, true);
    VL = loader(val, 16, false);
    VL3 = loader(val3, 16, false);
    test_early_stopping();
    test_lr_monitor();
    test_scheduler_name_and_strict();
    test_lr_monitor_stats();
    test_device_stats();
    test_throughput();
    test_throughput_flops();
    test_timer();
    test_accumulate_and_clip();
    test_validation_schedule();
    test_dev_runs();
    test_seed();
    test_bad_options();
    fulmen_loader_free(TL);
    fulmen_loader_free(VL);
    fulmen_loader_free(VL3);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_dataset_free(val3);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_callbacks");
}

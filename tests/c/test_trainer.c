/*
 * The trainer through the C API: fit / validate / test / predict on a small
 * synthetic task, metrics and logs, limits, host data sources and iterators,
 * and every way a host callback can fail.
 */
#include "check.h"
#include "fixture.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

char *mkdtemp(char *template); /* POSIX, not declared under -std=c11 */

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 2.0f); }

/* What the callbacks of the test module see and record. */
typedef struct {
    fulmen_model *model;
    int fail_at_step;      /* training_step fails at this global step (-1: never) */
    bool nan_at_step2;     /* training_step returns NaN at global step 2 */
    bool leave_loss_null;  /* training_step writes no loss */
    bool detached_loss;    /* training_step returns a loss without grad */
    bool keep_one;         /* training_step keeps one tensor in `kept` */
    fulmen_tensor *kept;
    int train_calls, val_calls, test_calls, predict_calls, config_calls, freed;
    int64_t last_epoch, last_step, last_batch_idx;
    int32_t stages_seen; /* bit per fulmen_stage */
    const char *scheduler; /* NULL, "step", "plateau", "plateau-missing" */
    int64_t estimated;     /* estimated_stepping_batches seen by configure_optimizers (-1: unbounded) */
    bool draws;            /* validation_step draws random numbers; training_step records its first one */
    double first_draw;     /* training's first random number */
} fixture;

/* One number from the global generator. */
static double draw(void) {
    const int64_t shape[1] = {1};
    fulmen_tensor *r = NULL;
    CHECK_OK(fulmen_tensor_rand(shape, 1, FULMEN_DTYPE_F32, &r));
    double v = check_item(r);
    fulmen_tensor_free(r);
    return v;
}

static fulmen_error *loss_of(fixture *f, const fulmen_batch *batch, fulmen_tensor **logits, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL, *none = NULL;
    size_t n = 0;
    CHECK_OK(fulmen_batch_len(batch, &n));
    CHECK(n == 2);
    CHECK_ERR(fulmen_batch_get(batch, 2, &none), FULMEN_CODE_OUT_OF_RANGE, "2 tensors");
    CHECK_ERR(fulmen_batch_len(NULL, &n), FULMEN_CODE_NULL_ARGUMENT, "batch");
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(f->model, x, logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(*logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static void record(fixture *f, fulmen_step_context *ctx) {
    int32_t stage = -1;
    CHECK_OK(fulmen_step_context_stage(ctx, &stage));
    f->stages_seen |= 1 << stage;
    CHECK_OK(fulmen_step_context_epoch(ctx, &f->last_epoch));
    CHECK_OK(fulmen_step_context_global_step(ctx, &f->last_step));
    CHECK_OK(fulmen_step_context_batch_idx(ctx, &f->last_batch_idx));
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    f->train_calls++;
    record(f, ctx);
    if (f->draws && f->train_calls == 1) f->first_draw = draw();
    if (f->last_step == f->fail_at_step) return fulmen_error_new(FULMEN_CODE_CALLBACK, "host refused this batch");
    if (f->leave_loss_null) return NULL;
    fulmen_tensor *logits = NULL, *loss = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e != NULL) return e;
    if (f->nan_at_step2 && f->last_step == 2) {
        fulmen_tensor *nan = NULL;
        e = fulmen_tensor_mul_scalar(loss, NAN, &nan);
        loss = nan;
    }
    if (f->detached_loss) {
        fulmen_tensor *d = NULL;
        e = fulmen_tensor_detach(loss, &d);
        loss = d;
    }
    if (f->keep_one && f->kept == NULL) {
        f->kept = logits;
        CHECK_OK(fulmen_tensor_keep(logits));
    }
    double v = check_item(loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", v, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    *out = loss;
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fixture *f = ud;
    f->val_calls++;
    record(f, ctx);
    if (f->draws) (void)draw();
    fulmen_tensor *logits = NULL, *loss = NULL, *pred = NULL, *y = NULL, *hit = NULL, *hitf = NULL, *acc = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_tensor_argmax(logits, 1, false, &pred);
    if (e == NULL) e = fulmen_tensor_compare(pred, y, FULMEN_COMPARE_EQ, &hit);
    if (e == NULL) e = fulmen_tensor_to_dtype(hit, FULMEN_DTYPE_F32, &hitf);
    if (e == NULL) e = fulmen_tensor_mean(hitf, &acc);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", check_item(loss), 0, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_acc", check_item(acc), FULMEN_LOG_PROG_BAR, 0);
    return e;
}

static fulmen_error *test_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fixture *f = ud;
    f->test_calls++;
    record(f, ctx);
    fulmen_tensor *logits = NULL, *loss = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "test_loss", check_item(loss), 0, 0);
    return e;
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    f->predict_calls++;
    record(f, ctx);
    /* Logging is not allowed in predict. */
    CHECK_ERR(fulmen_step_context_log(ctx, "x", 1.0, 0, 0), FULMEN_CODE_INVALID_STATE, "predict");
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(f->model, x, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    f->config_calls++;
    fulmen_error *steps = fulmen_optimizer_config_estimated_stepping_batches(config, &f->estimated);
    if (steps != NULL) {
        CHECK(fulmen_error_code(steps) == FULMEN_CODE_INVALID_STATE);
        f->estimated = -1;
        fulmen_error_free(steps);
    }
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    fulmen_scheduler *s = NULL;
    int32_t interval = FULMEN_INTERVAL_EPOCH;
    const char *monitor = NULL;
    if (f->scheduler != NULL && strcmp(f->scheduler, "step") == 0) {
        e = fulmen_scheduler_step_lr_new(opt, 5, 0.5, &s);
        interval = FULMEN_INTERVAL_STEP;
    } else if (f->scheduler != NULL) {
        e = fulmen_scheduler_reduce_on_plateau_new(opt, NULL, &s);
        monitor = strcmp(f->scheduler, "plateau") == 0 ? "val_loss" : "no_such_metric";
    }
    if (e == NULL) {
        /* ReduceLROnPlateau without a monitor is refused and consumes nothing. */
        if (monitor != NULL) CHECK_ERR(fulmen_optimizer_config_add(config, opt, s, interval, 1, NULL), FULMEN_CODE_INVALID_ARGUMENT, "monitor");
        e = fulmen_optimizer_config_add(config, opt, s, interval, 1, monitor);
    }
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
    }
    return e;
}

static void free_fixture(void *ud) { ((fixture *)ud)->freed++; }

static fulmen_model *mlp(void) { return fixture_mlp(16, 0); }

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.userdata_free = free_fixture;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.test_step = test_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 7); }

static fulmen_trainer *trainer_with(const char *root, long epochs, const char *k1, const char *v1) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 5));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    if (k1 != NULL) CHECK_OK(fulmen_trainer_options_set(o, k1, v1));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static char root[64];

/* fit learns the blobs; metrics, steps, epochs, logs and every stage work. */
static void test_fit_validate_test_predict(void) {
    fulmen_dataset *train = blobs(256, 1), *val = blobs(64, 2);
    fulmen_loader *tl = loader(train, 32, true), *vl = loader(val, 32, false);
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(root, 4, NULL, NULL);
    size_t live_before = fulmen_live_handles();
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(fulmen_live_handles() == live_before); /* step tensors were released */
    CHECK(f.config_calls == 1);
    CHECK(f.train_calls == 4 * 8);
    CHECK(f.val_calls == 2 + 4 * 2); /* 2 sanity-check batches, then 2 per epoch */
    int64_t step = 0, epoch = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK_OK(fulmen_trainer_current_epoch(t, &epoch));
    CHECK(step == 32);
    CHECK(epoch == 4);
    double acc = 0, loss_epoch = 0, loss_step = 0;
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
    CHECK(acc > 0.95);
    CHECK_OK(fulmen_trainer_callback_metric(t, "train_loss_epoch", &loss_epoch));
    CHECK_OK(fulmen_trainer_callback_metric(t, "train_loss_step", &loss_step));
    CHECK(loss_epoch > 0 && loss_epoch < 0.5);
    CHECK_ERR(fulmen_trainer_callback_metric(t, "nope", &acc), FULMEN_CODE_INVALID_ARGUMENT, "val_acc");
    char dir[512], path[600];
    size_t len = 0;
    CHECK_ERR(fulmen_trainer_log_dir(t, dir, 4, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(len > 4);
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    CHECK(strstr(dir, "lightning_logs/version_") != NULL);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    CHECK(access(path, R_OK) == 0);
    snprintf(path, sizeof path, "%s/hparams.yaml", dir);
    CHECK(access(path, R_OK) == 0);

    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK_OK(fulmen_trainer_test(t, m, vl, NULL));
    double test_loss = 0;
    CHECK_OK(fulmen_trainer_callback_metric(t, "test_loss", &test_loss));
    CHECK(test_loss < 0.5);
    CHECK(f.test_calls == 2);
    fulmen_tensor *pred = NULL;
    CHECK_OK(fulmen_trainer_predict(t, m, vl, NULL, &pred));
    int64_t dims[2] = {0, 0};
    size_t nd = 0;
    CHECK_OK(fulmen_tensor_shape(pred, dims, 2, &nd));
    CHECK(nd == 2 && dims[0] == 64 && dims[1] == 2);
    CHECK(f.predict_calls == 2);
    CHECK(f.stages_seen == 0xF);
    char summary[1024];
    size_t slen = 0;
    CHECK_OK(fulmen_model_summary(f.model, 1, summary, sizeof summary, &slen));
    CHECK(strstr(summary, "Linear") != NULL && strstr(summary, "Total params") != NULL);
    CHECK(strstr(summary, "82 ") != NULL); /* 2*16+16 + 16*2+2 parameters */
    CHECK_ERR(fulmen_model_summary(f.model, 1, summary, 8, &slen), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(slen > 8);
    fulmen_tensor_free(pred);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    CHECK(f.freed == 1);
    fulmen_lightning_module_free(m); /* double free is a no-op */
    CHECK(f.freed == 1);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
}

/* max_steps, limit_train_batches (count and fraction), logger off. */
static void test_limits(void) {
    fulmen_dataset *train = blobs(64, 4);
    fulmen_loader *tl = loader(train, 8, false);
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    int64_t step = 0;

    fulmen_trainer *t = trainer_with(root, 100, "max_steps", "5");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 5);
    fulmen_trainer_free(t);

    t = trainer_with(root, 2, "limit_train_batches", "3");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 6);
    fulmen_trainer_free(t);

    t = trainer_with(root, 1, "limit_train_batches", "0.5");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 4);
    fulmen_trainer_free(t);

    t = trainer_with(root, 1, "logger", "false");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    char dir[16];
    size_t len = 0;
    CHECK_ERR(fulmen_trainer_log_dir(t, dir, sizeof dir, &len), FULMEN_CODE_INVALID_STATE, NULL);
    /* validate without a validation_step is refused */
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

/* Every way a step can go wrong ends fit with a clear error. */
static void test_callback_failures(void) {
    fulmen_dataset *train = blobs(64, 5);
    fulmen_loader *tl = loader(train, 8, false);
    fixture f = {.model = mlp(), .fail_at_step = 3};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(root, 2, "logger", "false");
    size_t live = fulmen_live_handles();

    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_CALLBACK, "training_step (epoch 0, global step 3, batch 3)");
    CHECK(fulmen_live_handles() == live);
    /* Each case on a new trainer: one goes on from its last fit's step. */
    fulmen_trainer_free(t);
    t = trainer_with(root, 2, "logger", "false");
    f.fail_at_step = -1;
    f.nan_at_step2 = true;
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_NON_FINITE, "NaN");
    f.nan_at_step2 = false;
    /* A step that writes no loss is skipped, as Lightning's `return None`
     * (no backward; tests/c/test_hook_returns.c checks the rest). */
    fulmen_trainer_free(t);
    t = trainer_with(root, 2, "logger", "false");
    f.leave_loss_null = true;
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    f.leave_loss_null = false;
    fulmen_trainer_free(t);
    t = trainer_with(root, 2, "logger", "false");
    f.detached_loss = true;
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_INVALID_STATE, "does not require grad");
    f.detached_loss = false;
    f.scheduler = "plateau-missing";
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_INVALID_STATE, "no_such_metric");
    CHECK(fulmen_live_handles() == live);

    /* NaN passes when detection is off. */
    f.scheduler = NULL;
    fulmen_trainer *lenient = trainer_with(root, 1, "detect_nonfinite_loss", "false");
    f.nan_at_step2 = true;
    CHECK_OK(fulmen_trainer_fit(lenient, m, tl, NULL, NULL));
    f.nan_at_step2 = false;
    fulmen_trainer_free(lenient);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

/* Schedulers given through configure_optimizers step with the loop. */
static void test_schedulers_in_fit(void) {
    fulmen_dataset *train = blobs(64, 6), *val = blobs(32, 7);
    fulmen_loader *tl = loader(train, 16, true), *vl = loader(val, 16, false);
    fixture f = {.model = mlp(), .fail_at_step = -1, .scheduler = "step"};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(root, 3, "logger", "false");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    f.scheduler = "plateau";
    fulmen_trainer_free(t); /* a new trainer: this one's fit is done */
    t = trainer_with(root, 3, "logger", "false");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
}

/* A tensor kept with fulmen_tensor_keep outlives its step. */
static void test_keep_inside_step(void) {
    fulmen_dataset *train = blobs(16, 8);
    fulmen_loader *tl = loader(train, 8, false);
    fixture f = {.model = mlp(), .fail_at_step = -1, .keep_one = true};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(root, 1, "logger", "false");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(f.kept != NULL);
    size_t nd = 0;
    int64_t dims[2];
    CHECK_OK(fulmen_tensor_shape(f.kept, dims, 2, &nd));
    CHECK(nd == 2 && dims[0] == 8 && dims[1] == 2);
    fulmen_tensor_free(f.kept);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

/* Bad vtables, options and handles. */
static void test_bad_input(void) {
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = 8;
    fulmen_lightning_module *m = NULL;
    CHECK_ERR(fulmen_lightning_module_new(&vt, f.model, &m), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK_ERR(fulmen_lightning_module_new(NULL, f.model, &m), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    vt.struct_size = sizeof vt;
    CHECK_ERR(fulmen_lightning_module_new(&vt, (fulmen_model *)&vt, &m), FULMEN_CODE_INVALID_HANDLE, "model");
    CHECK(m == NULL);
    /* A module without steps cannot fit. */
    CHECK_OK(fulmen_lightning_module_new(&vt, NULL, &m));
    fulmen_dataset *train = blobs(8, 9);
    fulmen_loader *tl = loader(train, 4, false);
    fulmen_trainer *t = trainer_with(root, 1, "logger", "false");
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_INVALID_STATE, "configure_optimizers");
    CHECK_ERR(fulmen_trainer_validate(t, m, tl, NULL), FULMEN_CODE_INVALID_STATE, "validation_step");
    CHECK_ERR(fulmen_trainer_fit(NULL, m, tl, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "trainer");
    CHECK_ERR(fulmen_trainer_fit(t, m, NULL, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "train");
    CHECK_ERR(fulmen_trainer_fit(t, (fulmen_lightning_module *)tl, tl, NULL, NULL), FULMEN_CODE_INVALID_HANDLE, "fulmen_loader");
    fulmen_lightning_module_free(m);
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_INVALID_HANDLE, "freed");

    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_ERR(fulmen_trainer_options_set(o, "max_epoch", "3"), FULMEN_CODE_INVALID_ARGUMENT, "max_epochs");
    CHECK_ERR(fulmen_trainer_options_set(o, "max_epochs", "three"), FULMEN_CODE_INVALID_ARGUMENT, "integer");
    CHECK_ERR(fulmen_trainer_options_set(o, "max_steps", "-5"), FULMEN_CODE_INVALID_ARGUMENT, "max_steps");
    CHECK_ERR(fulmen_trainer_options_set_float(o, "limit_val_batches", 2.5), FULMEN_CODE_INVALID_ARGUMENT, "whole");
    CHECK_ERR(fulmen_trainer_options_set_bool(NULL, "logger", true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_trainer_options_set(o, NULL, "1"), FULMEN_CODE_NULL_ARGUMENT, "key");
    CHECK_ERR(fulmen_trainer_options_set(o, "log_every_n_steps", "0"), FULMEN_CODE_INVALID_ARGUMENT, "log_every_n_steps");
    CHECK_OK(fulmen_trainer_options_set(o, "max_epochs", "none"));
    CHECK_OK(fulmen_trainer_options_set(o, "seed", "none"));
    fulmen_trainer *t2 = NULL;
    CHECK_ERR(fulmen_trainer_new(o, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_OK(fulmen_trainer_new(NULL, &t2));
    fulmen_trainer_free(t2);
    fulmen_trainer_options_free(o);
    fulmen_trainer_options_free(NULL);

    fulmen_trainer_free(t);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
    fulmen_model_free(f.model);
}

/* A host iterator: reset once per epoch, batches until done. */
typedef struct {
    fulmen_dataset *ds;
    size_t pos, n, resets, freed;
    bool fail;
} iter_state;

static fulmen_error *iter_reset(void *ud, uint64_t epoch) {
    iter_state *s = ud;
    (void)epoch;
    s->pos = 0;
    s->resets++;
    return NULL;
}

static fulmen_error *iter_next(void *ud, fulmen_batch_builder *b, bool *done) {
    iter_state *s = ud;
    if (s->fail && s->pos >= 8) return fulmen_error_new(FULMEN_CODE_IO, "the stream broke");
    if (s->pos >= s->n) {
        *done = true;
        return NULL;
    }
    int64_t idx[8];
    for (int i = 0; i < 8; i++) idx[i] = (int64_t)(s->pos + (size_t)i);
    s->pos += 8;
    fulmen_tensor *t[2] = {NULL, NULL};
    size_t count = 0;
    fulmen_error *e = fulmen_dataset_get(s->ds, idx, 8, t, 2, &count);
    if (e == NULL) e = fulmen_batch_builder_push(b, t[0]);
    if (e == NULL) e = fulmen_batch_builder_push(b, t[1]);
    return e; /* t[0], t[1] are released after the callback */
}

static void iter_free(void *ud) { ((iter_state *)ud)->freed++; }

static void test_iterator_loader(void) {
    iter_state s = {.ds = blobs(32, 10), .n = 32};
    fulmen_iterator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.userdata_free = iter_free;
    vt.reset = iter_reset;
    vt.next = iter_next;
    vt.num_batches = -1;
    fulmen_loader *l = NULL;
    CHECK_OK(fulmen_loader_from_iterator(&vt, &l));
    size_t n = 0;
    CHECK_ERR(fulmen_loader_len(l, &n), FULMEN_CODE_UNSUPPORTED, NULL);
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(root, 3, "logger", "false");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(s.resets == 3);
    CHECK(f.train_calls == 12);
    s.fail = true;
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 4));
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_IO, "stream broke");
    fulmen_loader_free(l);
    CHECK(s.freed == 1);
    vt.next = NULL;
    CHECK_ERR(fulmen_loader_from_iterator(&vt, &l), FULMEN_CODE_INVALID_ARGUMENT, "next");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_dataset_free(s.ds);
}

/* estimated_stepping_batches as Lightning computes it, seen from
 * configure_optimizers. */
static void test_estimated_stepping_batches(void) {
    fulmen_dataset *ds = blobs(100, 4);
    fulmen_loader *l = loader(ds, 10, false); /* 10 batches an epoch */
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    struct {
        const char *key, *value;
        int64_t want;
    } cases[] = {
        {"logger", "false", 30},                /* 10 batches * 3 epochs */
        {"accumulate_grad_batches", "3", 12},   /* ceil(10 / 3) * 3 */
        {"max_steps", "5", 5},                  /* the smaller bound */
        {"limit_train_batches", "4", 12},       /* 4 * 3 */
        {"limit_train_batches", "0.5", 15},     /* 5 * 3 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fulmen_trainer *t = trainer_with(root, 3, cases[i].key, cases[i].value);
        f.estimated = 0;
        CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
        if (f.estimated != cases[i].want)
            fprintf(stderr, "  %s=%s: estimated %lld, want %lld\n", cases[i].key, cases[i].value,
                    (long long)f.estimated, (long long)cases[i].want);
        CHECK(f.estimated == cases[i].want);
        fulmen_trainer_free(t);
    }
    /* an unbounded run: max_epochs -1 and no max_steps */
    fulmen_trainer *t = trainer_with(root, -1, "max_time", "00:00:00:01");
    f.estimated = 0;
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(f.estimated == -1);
    fulmen_trainer_free(t);
    int64_t v = 0;
    CHECK_ERR(fulmen_optimizer_config_estimated_stepping_batches(NULL, &v), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
}

/* The sanity check leaves the random state as it found it (Lightning's
 * isolate_rng): a validation_step that draws random numbers does not
 * change what training draws. */
static void test_sanity_check_keeps_the_random_state(void) {
    double first[2] = {-1, -2};
    for (int run = 0; run < 2; run++) {
        fulmen_dataset *train = blobs(64, 1), *val = blobs(32, 2);
        fulmen_loader *tl = loader(train, 32, true), *vl = loader(val, 16, false);
        fixture f = {.model = mlp(), .fail_at_step = -1, .draws = true};
        fulmen_lightning_module *m = module_for(&f);
        fulmen_trainer *t = trainer_with(root, 1, "num_sanity_val_steps", run == 0 ? "0" : "2");
        CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
        CHECK(f.val_calls == (run == 0 ? 2 : 4)); /* the sanity check ran in the second */
        first[run] = f.first_draw;
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(f.model);
        fulmen_loader_free(tl);
        fulmen_loader_free(vl);
        fulmen_dataset_free(train);
        fulmen_dataset_free(val);
    }
    CHECK(first[0] == first[1]);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-trainer-XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    test_fit_validate_test_predict();
    test_limits();
    test_estimated_stepping_batches();
    test_sanity_check_keeps_the_random_state();
    test_callback_failures();
    test_schedulers_in_fit();
    test_keep_inside_step();
    test_bad_input();
    test_iterator_loader();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_trainer");
}

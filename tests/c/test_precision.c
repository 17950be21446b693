/*
 * Precision through the C API: Lightning's precision strings on the trainer
 * options, and training on the CPU with each precision the CPU can run
 * (32-true, 64-true, bf16-mixed, 16-mixed with loss scaling, bf16-true, and
 * the legacy spellings): the dtypes the step sees, the parameter dtype, the
 * accuracy reached, and the GradScaler skipping a step whose gradients are
 * not finite. With FULMEN_MNIST set, one epoch of an MNIST MLP per precision.
 */
#include "check.h"
#include "fixture.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

char *mkdtemp(char *template); /* POSIX, not declared under -std=c11 */

static char root[64];

#define MAX_STEPS 128

/* ---------------------------------------------------------------- helpers */

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 2.0f); }

static fulmen_model *mlp(int64_t in, int64_t hidden, int64_t out, int32_t activation) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(in, hidden, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(activation, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(hidden, out, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

static int32_t dtype_of(const fulmen_tensor *t) {
    int32_t d = -1;
    CHECK_OK(fulmen_tensor_dtype(t, &d));
    return d;
}

/* The dtype of state_dict entry `name`. */
static int32_t param_dtype(const fulmen_model *m, const char *name) {
    fulmen_tensor *w = NULL;
    int32_t d = -1;
    CHECK_OK(fulmen_model_state_dict_get(m, name, &w));
    if (w != NULL) d = dtype_of(w);
    fulmen_tensor_free(w);
    return d;
}

/* What the module sees and records. */
typedef struct {
    fulmen_model *model;
    double lr;
    /* dtypes seen inside training_step (first step) and disagreements later */
    int32_t x_dtype, logits_dtype, weight_dtype;
    int32_t val_logits_dtype; /* inside validation_step */
    int dtype_changes;
    int train_calls;
    /* 16-mixed: multiply the loss by +inf at this global step (-1: never) */
    int64_t inf_step;
    /* snapshots of "0.weight" around each optimizer step */
    float *snap;
    size_t snap_n;
    int64_t snap_step;
    int changed[MAX_STEPS];   /* 1 changed, 0 unchanged, -1 not seen */
    int grad_finite[MAX_STEPS]; /* in on_before_optimizer_step */
    int hook_errors;
} fixture;

static void fixture_init(fixture *f, fulmen_model *model, double lr) {
    memset(f, 0, sizeof *f);
    f->model = model;
    f->lr = lr;
    f->x_dtype = f->logits_dtype = f->weight_dtype = f->val_logits_dtype = -1;
    f->inf_step = -1;
    f->snap_step = -1;
    for (int i = 0; i < MAX_STEPS; i++) f->changed[i] = f->grad_finite[i] = -1;
}

static fulmen_error *loss_of(fixture *f, const fulmen_batch *batch, fulmen_tensor **logits, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(f->model, x, logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(*logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static void see(int32_t *slot, int32_t value, int *changes) {
    if (*slot == -1) *slot = value;
    else if (*slot != value) (*changes)++;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    f->train_calls++;
    int64_t step = 0;
    CHECK_OK(fulmen_step_context_global_step(ctx, &step));
    fulmen_tensor *x = NULL, *logits = NULL, *loss = NULL, *w = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e != NULL) return e;
    CHECK_OK(fulmen_batch_get(batch, 0, &x));
    CHECK_OK(fulmen_model_state_dict_get(f->model, "0.weight", &w));
    see(&f->x_dtype, dtype_of(x), &f->dtype_changes);
    see(&f->logits_dtype, dtype_of(logits), &f->dtype_changes);
    see(&f->weight_dtype, dtype_of(w), &f->dtype_changes);
    if (step == f->inf_step) {
        fulmen_tensor *inf = NULL;
        e = fulmen_tensor_mul_scalar(loss, INFINITY, &inf);
        if (e != NULL) return e;
        loss = inf;
    }
    *out = loss;
    return NULL;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fixture *f = ud;
    fulmen_tensor *logits = NULL, *loss = NULL, *pred = NULL, *y = NULL, *hit = NULL, *hitf = NULL, *acc = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e == NULL) see(&f->val_logits_dtype, dtype_of(logits), &f->dtype_changes);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_tensor_argmax(logits, 1, false, &pred);
    if (e == NULL) e = fulmen_tensor_compare(pred, y, FULMEN_COMPARE_EQ, &hit);
    if (e == NULL) e = fulmen_tensor_to_dtype(hit, FULMEN_DTYPE_F32, &hitf);
    if (e == NULL) e = fulmen_tensor_mean(hitf, &acc);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_acc", check_item(acc), 0, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", check_item(loss), 0, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = f->lr;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

/* Copies "0.weight" (or its gradient) as f32 into `dst` (n elements). */
static fulmen_error *weight_f32(fixture *f, float *dst, size_t n, bool grad, bool *has) {
    fulmen_tensor *w = NULL, *g = NULL;
    fulmen_error *e = fulmen_model_state_dict_get(f->model, "0.weight", &w);
    if (e == NULL && grad) {
        e = fulmen_tensor_grad(w, &g);
        *has = e == NULL && g != NULL;
    }
    if (e == NULL && (!grad || g != NULL)) e = fulmen_tensor_copy_to(grad ? g : w, FULMEN_DTYPE_F32, dst, n * sizeof(float));
    fulmen_tensor_free(g);
    fulmen_tensor_free(w);
    return e;
}

/* on_before_optimizer_step snapshots the weight (and checks its gradient);
 * on_train_batch_end compares. */
static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    if (f->snap == NULL) return NULL;
    int64_t step = 0;
    fulmen_error *e = fulmen_hook_context_global_step(ctx, &step);
    if (e != NULL) return e;
    if (hook == FULMEN_HOOK_BEFORE_OPTIMIZER_STEP && step < MAX_STEPS) {
        float *g = malloc(f->snap_n * sizeof(float));
        bool has = false;
        e = weight_f32(f, g, f->snap_n, true, &has);
        if (e == NULL && has) {
            int finite = 1;
            for (size_t i = 0; i < f->snap_n; i++) finite &= isfinite(g[i]) ? 1 : 0;
            f->grad_finite[step] = finite;
        } else if (e == NULL) {
            f->hook_errors++;
        }
        free(g);
        if (e == NULL) e = weight_f32(f, f->snap, f->snap_n, false, NULL);
        f->snap_step = step;
        return e;
    }
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END && f->snap_step >= 0) {
        /* global_step was incremented by the optimizer step. */
        if (step != f->snap_step + 1) f->hook_errors++;
        float *now = malloc(f->snap_n * sizeof(float));
        e = weight_f32(f, now, f->snap_n, false, NULL);
        if (e == NULL) f->changed[f->snap_step] = memcmp(now, f->snap, f->snap_n * sizeof(float)) != 0;
        free(now);
        f->snap_step = -1;
        return e;
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
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 7); }

static fulmen_trainer_options *quiet_options(long epochs) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cpu"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    return o;
}

static fulmen_trainer *trainer_from(fulmen_trainer_options *o) {
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* ------------------------------------------------------ precision strings */

static const char *VALID_LIST = "64-true, 32-true, 16-mixed, bf16-mixed, 16-true, bf16-true";

static void test_strings(void) {
    const char *valid[] = {"64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
                           "64",      "32",      "16",       "bf16",       " 32-true "};
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) CHECK_OK(fulmen_trainer_options_set(o, "precision", valid[i]));
    const char *invalid[] = {"fp8", "", "transformer-engine", "transformer-engine-float16", "bnb-int8", "8-true",
                             "16-MIXED", "half", "float32", "32-mixed", "mixed"};
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        fulmen_error *e = fulmen_trainer_options_set(o, "precision", invalid[i]);
        CHECK(e != NULL);
        if (e != NULL) {
            const char *msg = fulmen_error_message(e);
            CHECK(fulmen_error_code(e) == FULMEN_CODE_INVALID_ARGUMENT);
            if (strstr(msg, VALID_LIST) == NULL || strstr(msg, "precision") == NULL) {
                fprintf(stderr, "precision=%s: %s\n", invalid[i], msg);
                CHECK(false);
            }
            char quoted[64];
            snprintf(quoted, sizeof quoted, "\"%s\"", invalid[i]);
            CHECK(strstr(msg, quoted) != NULL);
            fulmen_error_free(e);
        }
    }
    CHECK_ERR(fulmen_trainer_options_set(o, "precision", NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_trainer_options_set(o, "precisions", "32"), FULMEN_CODE_INVALID_ARGUMENT, "precision");
    fulmen_trainer_options_free(o);
}

/* ------------------------------------------------------ training per precision */

typedef struct {
    const char *precision;
    int32_t x, logits, weight; /* dtypes seen inside training_step */
    int32_t weight_after;      /* parameter dtype after fit */
} expectation;

static const expectation CASES[] = {
    {"32-true", FULMEN_DTYPE_F32, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32},
    {"32", FULMEN_DTYPE_F32, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32},
    {"64-true", FULMEN_DTYPE_F64, FULMEN_DTYPE_F64, FULMEN_DTYPE_F64, FULMEN_DTYPE_F64},
    {"64", FULMEN_DTYPE_F64, FULMEN_DTYPE_F64, FULMEN_DTYPE_F64, FULMEN_DTYPE_F64},
    {"bf16-mixed", FULMEN_DTYPE_F32, FULMEN_DTYPE_BF16, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32},
    {"bf16", FULMEN_DTYPE_F32, FULMEN_DTYPE_BF16, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32},
    {"16-mixed", FULMEN_DTYPE_F32, FULMEN_DTYPE_F16, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32},
    {"16", FULMEN_DTYPE_F32, FULMEN_DTYPE_F16, FULMEN_DTYPE_F32, FULMEN_DTYPE_F32},
    {"bf16-true", FULMEN_DTYPE_BF16, FULMEN_DTYPE_BF16, FULMEN_DTYPE_BF16, FULMEN_DTYPE_BF16},
    {"16-true", FULMEN_DTYPE_F16, FULMEN_DTYPE_F16, FULMEN_DTYPE_F16, FULMEN_DTYPE_F16},
};

/* Trains the blobs classifier under `e->precision`; checks dtypes and accuracy. */
static void train_blobs(const expectation *e, fulmen_dataset *train, fulmen_dataset *val) {
    fulmen_loader *tl = loader(train, 16, true), *vl = loader(val, 32, false);
    fixture f;
    fixture_init(&f, mlp(2, 16, 2, FULMEN_ACTIVATION_TANH), 0.1);
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer_options *o = quiet_options(3);
    CHECK_OK(fulmen_trainer_options_set(o, "precision", e->precision));
    fulmen_trainer *t = trainer_from(o);
    fulmen_error *err = fulmen_trainer_fit(t, m, tl, vl, NULL);
    if (err != NULL) {
        fprintf(stderr, "precision %s: fit failed: %s\n", e->precision, fulmen_error_message(err));
        fulmen_error_free(err);
        CHECK(false);
    } else {
        CHECK(true);
        double acc = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
        if (!(acc > 0.9)) fprintf(stderr, "precision %s: val_acc %.3f\n", e->precision, acc);
        CHECK(acc > 0.9);
        CHECK(f.train_calls == 3 * 8);
        if (f.x_dtype != e->x || f.logits_dtype != e->logits || f.weight_dtype != e->weight) {
            fprintf(stderr, "precision %s: in the step x %d logits %d weight %d, expected %d %d %d\n", e->precision,
                    f.x_dtype, f.logits_dtype, f.weight_dtype, e->x, e->logits, e->weight);
        }
        CHECK(f.x_dtype == e->x);
        CHECK(f.logits_dtype == e->logits);
        CHECK(f.weight_dtype == e->weight);
        CHECK(f.val_logits_dtype == e->logits); /* validation runs under the same precision */
        CHECK(f.dtype_changes == 0);
        CHECK(param_dtype(f.model, "0.weight") == e->weight_after);
        CHECK(param_dtype(f.model, "0.bias") == e->weight_after);
        CHECK(param_dtype(f.model, "2.weight") == e->weight_after);
        /* validate and predict run under the same precision */
        CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
        CHECK(acc > 0.9);
    }
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
}

static void test_training(void) {
    fulmen_dataset *train = blobs(128, 1), *val = blobs(64, 2);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) train_blobs(&CASES[i], train, val);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
}

/* A refused precision leaves the options as they were. */
static void test_refusal_keeps_options(void) {
    fulmen_dataset *train = blobs(32, 3);
    fulmen_loader *tl = loader(train, 16, false);
    fixture f;
    fixture_init(&f, mlp(2, 16, 2, FULMEN_ACTIVATION_TANH), 0.1);
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer_options *o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set(o, "precision", "64-true"));
    CHECK_ERR(fulmen_trainer_options_set(o, "precision", "fp8"), FULMEN_CODE_INVALID_ARGUMENT, VALID_LIST);
    fulmen_trainer *t = trainer_from(o);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(param_dtype(f.model, "0.weight") == FULMEN_DTYPE_F64);
    CHECK(f.logits_dtype == FULMEN_DTYPE_F64);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

/* 16-mixed: an infinite loss at one step gives infinite gradients, and the
 * GradScaler skips exactly that optimizer step. */
static void test_grad_scaler_skips(void) {
    fulmen_dataset *train = blobs(128, 4), *val = blobs(64, 5);
    fulmen_loader *tl = loader(train, 16, true), *vl = loader(val, 32, false);
    const int64_t inf_step = 5;
    const int steps = 2 * 8;
    fixture f;
    fixture_init(&f, mlp(2, 16, 2, FULMEN_ACTIVATION_TANH), 0.1);
    f.inf_step = inf_step;
    f.snap_n = 16 * 2;
    f.snap = calloc(f.snap_n, sizeof(float));
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer_options *o = quiet_options(2);
    CHECK_OK(fulmen_trainer_options_set(o, "precision", "16-mixed"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "detect_nonfinite_loss", false));
    fulmen_trainer *t = trainer_from(o);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    int64_t gs = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &gs));
    CHECK(gs == steps);
    /* the trainer's GradScaler backed off once from 2^16 (growth every 2000 steps) */
    double scale = 0;
    CHECK_OK(fulmen_trainer_grad_scale(t, &scale));
    CHECK(scale == 32768.0);
    CHECK(f.hook_errors == 0);
    CHECK(f.logits_dtype == FULMEN_DTYPE_F16);
    CHECK(f.weight_dtype == FULMEN_DTYPE_F32);
    for (int s = 0; s < steps; s++) {
        int want_changed = s != inf_step;
        if (f.changed[s] != want_changed || f.grad_finite[s] != want_changed) {
            fprintf(stderr, "16-mixed step %d: weight changed %d, gradient finite %d, expected %d\n", s, f.changed[s],
                    f.grad_finite[s], want_changed);
        }
        CHECK(f.changed[s] == want_changed);
        CHECK(f.grad_finite[s] == want_changed);
    }
    /* Training recovered: the parameters are finite and the model works. */
    float w[32];
    CHECK_OK(weight_f32(&f, w, 32, false, NULL));
    int finite = 1;
    for (int i = 0; i < 32; i++) finite &= isfinite(w[i]) ? 1 : 0;
    CHECK(finite);
    double acc = 0;
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
    CHECK(acc > 0.9);

    /* With bf16-mixed (no loss scaling) the same infinite loss is not
     * skipped: the weights become non-finite. */
    fixture g;
    fixture_init(&g, mlp(2, 16, 2, FULMEN_ACTIVATION_TANH), 0.1);
    g.inf_step = 2;
    g.snap_n = 32;
    g.snap = calloc(g.snap_n, sizeof(float));
    fulmen_lightning_module *m2 = module_for(&g);
    o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set(o, "precision", "bf16-mixed"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "detect_nonfinite_loss", false));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_steps", 3));
    fulmen_trainer *t2 = trainer_from(o);
    CHECK_OK(fulmen_trainer_fit(t2, m2, tl, NULL, NULL));
    CHECK(g.changed[2] == 1 && g.grad_finite[2] == 0);
    CHECK_OK(weight_f32(&g, w, 32, false, NULL));
    finite = 1;
    for (int i = 0; i < 32; i++) finite &= isfinite(w[i]) ? 1 : 0;
    CHECK(!finite);
    fulmen_trainer_free(t2);
    fulmen_lightning_module_free(m2);
    fulmen_model_free(g.model);
    free(g.snap);

    /* With detection on (the default), the infinite loss stops fit. */
    fixture_init(&g, mlp(2, 16, 2, FULMEN_ACTIVATION_TANH), 0.1);
    g.inf_step = 1;
    m2 = module_for(&g);
    o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set(o, "precision", "16-mixed"));
    fulmen_trainer *t3 = trainer_from(o);
    CHECK_ERR(fulmen_trainer_fit(t3, m2, tl, NULL, NULL), FULMEN_CODE_NON_FINITE, "global step 1");
    fulmen_trainer_free(t3);
    fulmen_lightning_module_free(m2);
    fulmen_model_free(g.model);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    free(f.snap);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
}

/* -------------------------------------------------------------- MNIST */

/* The handle form of a precision plugin, with GradScaler settings. */
static void test_precision_objects(void) {
    fulmen_precision *p = NULL, *bad = NULL, *bf16 = NULL;
    char name[32];
    size_t len = 0;
    CHECK_OK(fulmen_precision_new("16", &p));
    CHECK_OK(fulmen_precision_name(p, name, sizeof name, &len));
    CHECK(strcmp(name, "16-mixed") == 0 && len == 8);
    CHECK_ERR(fulmen_precision_name(p, name, 4, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_precision_new("fp8", &bad), FULMEN_CODE_INVALID_ARGUMENT, "bf16-mixed");
    CHECK(bad == NULL);
    CHECK_ERR(fulmen_precision_new(NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, "precision");
    CHECK_OK(fulmen_precision_new("bf16-mixed", &bf16));
    CHECK_ERR(fulmen_precision_set_grad_scaler(bf16, 1024, 2, 0.5, 100), FULMEN_CODE_INVALID_ARGUMENT, "16-mixed");
    CHECK_ERR(fulmen_precision_set_grad_scaler(p, -1, 2, 0.5, 100), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_precision_set_grad_scaler(p, 1024, 0.5, 0.5, 100), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_OK(fulmen_precision_set_grad_scaler(p, 1024, 2, 0.5, 100));

    fulmen_dataset *train = blobs(128, 21), *val = blobs(64, 22);
    fulmen_loader *tl = loader(train, 16, true), *vl = loader(val, 32, false);
    fixture f;
    fixture_init(&f, mlp(2, 16, 2, FULMEN_ACTIVATION_TANH), 0.1);
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer_options *o = quiet_options(3);
    CHECK_OK(fulmen_trainer_options_set_precision(o, p));
    CHECK_ERR(fulmen_trainer_options_set_precision(o, NULL), FULMEN_CODE_NULL_ARGUMENT, "precision");
    CHECK_ERR(fulmen_trainer_options_set_precision(o, (fulmen_precision *)tl), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_precision_free(p);
    fulmen_precision_free(p); /* double free: ignored */
    fulmen_trainer *t = trainer_from(o);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    double acc = 0;
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
    CHECK(acc > 0.9);
    CHECK(f.logits_dtype == FULMEN_DTYPE_F16); /* the plugin's 16-mixed was used */
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_precision_free(bf16);
}

static void test_mnist(void) {
    const char *path = getenv("FULMEN_MNIST");
    if (path == NULL) {
        printf("test_precision: FULMEN_MNIST not set, MNIST test skipped\n");
        return;
    }
    fulmen_csv_options co = fulmen_csv_options_default();
    co.label_column = -1;
    co.header = 0;
    co.scaling = FULMEN_SCALING_DIVIDE;
    co.scale_divisor = 255.0;
    fulmen_dataset *all = NULL, *val = NULL, *train = NULL;
    CHECK_OK(fulmen_dataset_from_csv(path, &co, &all));
    if (all == NULL) return;
    CHECK_OK(fulmen_dataset_split_every(all, 5, 0, &val, &train));
    size_t nt = 0, nv = 0;
    CHECK_OK(fulmen_dataset_len(train, &nt));
    CHECK_OK(fulmen_dataset_len(val, &nv));
    CHECK(nt == 4000 && nv == 1000);
    fulmen_loader *tl = loader(train, 32, true), *vl = loader(val, 500, false);
    const expectation cases[] = {CASES[0], CASES[2], CASES[4], CASES[6], CASES[8]};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const expectation *e = &cases[i];
        CHECK_OK(fulmen_manual_seed(11));
        fixture f;
        fixture_init(&f, mlp(784, 128, 10, FULMEN_ACTIVATION_RELU), 0.1);
        fulmen_lightning_module *m = module_for(&f);
        fulmen_trainer_options *o = quiet_options(1);
        CHECK_OK(fulmen_trainer_options_set(o, "precision", e->precision));
        fulmen_trainer *t = trainer_from(o);
        CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
        double acc = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
        double vloss = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &vloss));
        printf("test_precision: MNIST one epoch, precision %-10s val_acc %.4f val_loss %.5f\n", e->precision, acc, vloss);
        CHECK(acc > 0.8);
        CHECK(f.logits_dtype == e->logits);
        CHECK(f.weight_dtype == e->weight);
        CHECK(f.val_logits_dtype == e->logits);
        CHECK(param_dtype(f.model, "2.weight") == e->weight_after);
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(f.model);
    }
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_dataset_free(all);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-prec-XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    CHECK_OK(fulmen_set_num_threads(1)); /* small models: no thread-pool overhead */
    test_strings();
    test_training();
    test_refusal_keeps_options();
    test_grad_scaler_skips();
    test_precision_objects();
    test_mnist();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_precision");
}

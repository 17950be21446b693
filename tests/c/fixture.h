/*
 * Shared fixtures of the C tests: a small two-class data set, a small MLP,
 * a loader over them, the cross-entropy step, optimizer set-up and a weight
 * comparison.
 * Include after check.h.
 */
#ifndef FULMEN_TEST_FIXTURE_H
#define FULMEN_TEST_FIXTURE_H

#include "check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* `n` points in 2-D: class 0 around (-d, -d), class 1 around (d, d), with
 * unit Gaussian noise drawn after seeding with `seed`; labels alternate. */
static inline fulmen_dataset *fixture_blobs(size_t n, uint64_t seed, float d) {
    CHECK_OK(fulmen_manual_seed(seed));
    int64_t shape[2] = {(int64_t)n, 2}, lshape[1] = {(int64_t)n};
    float *centers = malloc(n * 2 * sizeof(float));
    int64_t *lab = malloc(n * sizeof(int64_t));
    if (centers == NULL || lab == NULL) exit(2);
    for (size_t i = 0; i < n; i++) {
        lab[i] = (int64_t)(i % 2);
        centers[2 * i] = centers[2 * i + 1] = lab[i] ? d : -d;
    }
    fulmen_tensor *noise = NULL, *x = NULL, *labels = NULL, *c = check_f32(centers, n * 2, shape, 2);
    CHECK_OK(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &noise));
    CHECK_OK(fulmen_tensor_add(noise, c, &x));
    CHECK_OK(fulmen_tensor_from_data(lab, n * sizeof(int64_t), FULMEN_DTYPE_I64, lshape, 1, &labels));
    const fulmen_tensor *parts[2] = {x, labels};
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_tensor_free(noise);
    fulmen_tensor_free(c);
    fulmen_tensor_free(x);
    fulmen_tensor_free(labels);
    free(centers);
    free(lab);
    return ds;
}

/* Sequential 2 -> hidden (tanh) [-> dropout p] -> 2; no dropout when p is 0. */
static inline fulmen_model *fixture_mlp(int64_t hidden, double dropout) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(2, hidden, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    if (dropout > 0) {
        CHECK_OK(fulmen_model_dropout_new(dropout, &l));
        CHECK_OK(fulmen_model_push(m, l));
    }
    CHECK_OK(fulmen_model_linear_new(hidden, 2, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

/* A loader over `ds` shuffled (or not) with `seed`. */
static inline fulmen_loader *fixture_loader(fulmen_dataset *ds, size_t batch, bool shuffle, uint64_t seed) {
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = batch;
    o.shuffle = shuffle;
    o.seed = seed;
    fulmen_loader *l = NULL;
    CHECK_OK(fulmen_loader_new(ds, &o, &l));
    return l;
}

/* Writes the mean cross-entropy of `model` on the batch's (features,
 * labels) to *out: the training step most tests use. */
static inline fulmen_error *fixture_cross_entropy(const fulmen_model *model, const fulmen_batch *batch,
                                                  fulmen_tensor **out) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

/* fixture_cross_entropy times NaN: a step whose loss is not finite. */
static inline fulmen_error *fixture_nan_loss(const fulmen_model *model, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fixture_cross_entropy(model, batch, &loss);
    if (e == NULL) e = fulmen_tensor_mul_scalar(loss, NAN, out);
    fulmen_tensor_free(loss);
    return e;
}

/* fixture_cross_entropy against the labels plus 100: class targets outside
 * the model's classes. */
static inline fulmen_error *fixture_bad_target_loss(const fulmen_model *model, const fulmen_batch *batch,
                                                    fulmen_tensor **out) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *shifted = NULL, *labels = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(model, x, &logits);
    if (e == NULL) e = fulmen_tensor_add_scalar(y, 100, &shifted);
    if (e == NULL) e = fulmen_tensor_to_dtype(shifted, FULMEN_DTYPE_I64, &labels);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, labels, FULMEN_REDUCTION_MEAN, out);
    fulmen_tensor *all[5] = {x, y, logits, shifted, labels};
    for (int i = 0; i < 5; i++) fulmen_tensor_free(all[i]);
    return e;
}

/* Adds to `config` an optimizer made by the caller (NULL: `made` failed);
 * frees it when adding fails. */
static inline fulmen_error *fixture_add_optimizer(fulmen_optimizer_config *config, fulmen_error *made,
                                                  fulmen_optimizer *opt) {
    if (made != NULL) return made;
    fulmen_error *e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

/* configure_optimizers' body for SGD with `lr` and `momentum` on `model`. */
static inline fulmen_error *fixture_add_sgd(fulmen_optimizer_config *config, const fulmen_model *model, double lr,
                                            double momentum) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = lr;
    o.momentum = momentum;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(model, NULL, 0, &o, &opt);
    return fixture_add_optimizer(config, e, opt);
}

/* configure_optimizers' body for Adam with `lr` on `model`. */
static inline fulmen_error *fixture_add_adam(fulmen_optimizer_config *config, const fulmen_model *model, double lr) {
    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = lr;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_adam_new(model, NULL, 0, &o, &opt);
    return fixture_add_optimizer(config, e, opt);
}

/* Trainer options for tests: `max_epochs`, no progress bar and no model
 * summary; with `root` NULL no logger and no checkpoint, else the default
 * loggers and checkpoint under `root`. */
static inline fulmen_trainer_options *fixture_options(const char *root, int64_t max_epochs) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", max_epochs));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    if (root == NULL) {
        CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
        CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    } else {
        CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    }
    return o;
}

/* A trainer with fixture_options(root, max_epochs). */
static inline fulmen_trainer *fixture_trainer(const char *root, int64_t max_epochs) {
    fulmen_trainer_options *o = fixture_options(root, max_epochs);
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* configure_optimizers for a userdata whose first member is the model:
 * plain SGD with lr 0.1. */
static inline fulmen_error *fixture_configure_sgd(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_sgd(config, *(fulmen_model **)ud, 0.1, 0.0);
}

/* configure_optimizers' body: SGD (lr 0.1, momentum 0.9) with fused
 * updates (which take 16-mixed's inf check on the device) on the model
 * that `ud`'s first member points to. */
static inline fulmen_error *fixture_configure_fused_sgd(void *ud, fulmen_optimizer_config *config) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(*(fulmen_model **)ud, NULL, 0, &o, &opt);
    if (e == NULL) {
        e = fulmen_optimizer_set_fused(opt, true);
        if (e != NULL) fulmen_optimizer_free(opt);
    }
    return fixture_add_optimizer(config, e, opt);
}

/* A LightningModule over `model` with `step`, `eval_step` (as
 * validation_step_output and test_step_output; NULL: neither), `on_hook`
 * (may be NULL) and `configure` (configure_optimizers); `ud` (first
 * member: the model) goes to all of them. */
static inline fulmen_lightning_module *fixture_module_with_eval(
    fulmen_model *model, void *ud,
    fulmen_error *(*step)(void *, fulmen_step_context *, const fulmen_batch *, fulmen_tensor **),
    fulmen_error *(*eval_step)(void *, fulmen_step_context *, const fulmen_batch *, fulmen_tensor **),
    fulmen_error *(*on_hook)(void *, int32_t, fulmen_hook_context *),
    fulmen_error *(*configure)(void *, fulmen_optimizer_config *)) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = ud;
    vt.training_step = step;
    vt.validation_step_output = vt.test_step_output = eval_step;
    vt.configure_optimizers = configure;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, model, &m));
    return m;
}

/* fixture_module_with_eval without evaluation steps. */
static inline fulmen_lightning_module *fixture_module_with(
    fulmen_model *model, void *ud,
    fulmen_error *(*step)(void *, fulmen_step_context *, const fulmen_batch *, fulmen_tensor **),
    fulmen_error *(*on_hook)(void *, int32_t, fulmen_hook_context *),
    fulmen_error *(*configure)(void *, fulmen_optimizer_config *)) {
    return fixture_module_with_eval(model, ud, step, NULL, on_hook, configure);
}

/* A LightningModule of `model` with only `predict` (predict_step), given
 * `ud`. */
static inline fulmen_lightning_module *fixture_module_predicting(
    fulmen_model *model, void *ud,
    fulmen_error *(*predict)(void *, fulmen_step_context *, const fulmen_batch *, fulmen_tensor **)) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = ud;
    vt.predict_step = predict;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, model, &m));
    return m;
}

/* fixture_module_with plain SGD (fixture_configure_sgd). */
static inline fulmen_lightning_module *fixture_module(
    fulmen_model *model, void *ud,
    fulmen_error *(*step)(void *, fulmen_step_context *, const fulmen_batch *, fulmen_tensor **),
    fulmen_error *(*on_hook)(void *, int32_t, fulmen_hook_context *)) {
    return fixture_module_with(model, ud, step, on_hook, fixture_configure_sgd);
}

/* Pushes a batch of `n` random 2-D points with label 0 into `b` (a host
 * iterator's or data source's batch). */
static inline fulmen_error *fixture_push_random_batch(fulmen_batch_builder *b, int64_t n) {
    int64_t xs[2] = {n, 2}, ys[1] = {n};
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_error *e = fulmen_tensor_randn(xs, 2, FULMEN_DTYPE_F32, &x);
    if (e == NULL) e = fulmen_tensor_zeros(ys, 1, FULMEN_DTYPE_I64, &y);
    if (e == NULL) e = fulmen_batch_builder_push(b, x);
    if (e == NULL) e = fulmen_batch_builder_push(b, y);
    return e;
}

/* The code of `e` (0 for NULL), freeing it. */
static inline int fixture_code(fulmen_error *e) {
    int code = e == NULL ? 0 : fulmen_error_code(e);
    fulmen_error_free(e);
    return code;
}

/* The whole file at `path`, NUL-terminated (malloc'd; NULL when it cannot
 * be read). */
static inline char *fixture_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s != NULL) s[fread(s, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return s;
}

/* The largest absolute difference between a CPU tensor and a tensor on any
 * device (NaN counts as the worst: 1e300). */
static inline double fixture_tensor_diff(const fulmen_tensor *cpu, const fulmen_tensor *other) {
    fulmen_tensor *back = NULL, *d = NULL, *ad = NULL, *mx = NULL;
    CHECK_OK(fulmen_tensor_to_device(other, FULMEN_DEVICE_TYPE_CPU, 0, &back));
    CHECK_OK(fulmen_tensor_sub(cpu, back, &d));
    CHECK_OK(fulmen_tensor_abs(d, &ad));
    CHECK_OK(fulmen_tensor_max(ad, &mx));
    double v = mx != NULL ? check_item(mx) : NAN;
    fulmen_tensor *all[4] = {back, d, ad, mx};
    for (int i = 0; i < 4; i++) fulmen_tensor_free(all[i]);
    return v == v ? v : 1e300;
}

/* The largest absolute difference between the state tensors of two models
 * with the same names. */
static inline double fixture_max_diff(const fulmen_model *a, const fulmen_model *b) {
    size_t n = 0;
    double worst = 0;
    CHECK_OK(fulmen_model_state_dict_len(a, &n));
    for (size_t i = 0; i < n; i++) {
        char name[128];
        size_t len = 0;
        fulmen_tensor *x = NULL, *y = NULL;
        CHECK_OK(fulmen_model_state_dict_name(a, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(a, name, &x));
        CHECK_OK(fulmen_model_state_dict_get(b, name, &y));
        double v = fixture_tensor_diff(x, y);
        if (v > worst) worst = v;
        fulmen_tensor_free(x);
        fulmen_tensor_free(y);
    }
    return worst;
}

#endif

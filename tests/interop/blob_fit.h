/* A small fit shared by the interop programs that log (logger_parity.c,
 * mlflow_logger.c, wandb_logger.c, comet_logger.c): an MLP 2-8-2 with tanh
 * on 32 two-blob points in batches of 8, cross-entropy logged as train_loss
 * (step and epoch) and val_loss, SGD with lr 0.1 (its Lightning twin:
 * blob_lightning.py). Include after defining TRY(call), which reports a
 * failed call and exits. */
#pragma once
#include <fulmen.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `e` must be an error of `code` whose message holds `needle` (NULL: any
 * message); anything else exits 3, naming `what`. Frees `e`. */
static inline void refused(fulmen_error *e, int code, const char *needle, const char *what) {
    if (e == NULL || fulmen_error_code(e) != code || (needle != NULL && strstr(fulmen_error_message(e), needle) == NULL)) {
        fprintf(stderr, "%s: expected code %d with \"%s\", got %s\n", what, code, needle ? needle : "",
                e ? fulmen_error_message(e) : "success");
        exit(3);
    }
    fulmen_error_free(e);
}

typedef struct {
    fulmen_model *model;
} job;

static fulmen_error *loss_of(job *j, const fulmen_batch *batch, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(j->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static double item(const fulmen_tensor *t) {
    double v = NAN;
    TRY(fulmen_tensor_item(t, &v));
    return v;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_error *e = loss_of(ud, batch, out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", item(*out), FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = loss_of(ud, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", item(loss), 0, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    job *j = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(j->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    return e;
}

/* The MLP into j->model. */
static void blob_mlp(job *j) {
    fulmen_model *layer = NULL;
    TRY(fulmen_model_sequential_new(&j->model));
    TRY(fulmen_model_linear_new(2, 8, true, &layer));
    TRY(fulmen_model_push(j->model, layer));
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &layer));
    TRY(fulmen_model_push(j->model, layer));
    TRY(fulmen_model_linear_new(8, 2, true, &layer));
    TRY(fulmen_model_push(j->model, layer));
}

/* The module of the fit: its training and validation steps, SGD, and
 * `on_hook` (may be NULL). */
static fulmen_lightning_module *blob_module(job *j, fulmen_error *(*on_hook)(void *, int32_t, fulmen_hook_context *)) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = j;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    TRY(fulmen_lightning_module_new(&vt, j->model, &m));
    return m;
}

/* The options of the loggers' fit writing under `root`: 2 epochs, every
 * step logged, seed 3, no progress bar, summary or default logger. The
 * caller frees them. */
static fulmen_trainer_options *blob_fit_options(const char *root) {
    fulmen_trainer_options *o = NULL;
    TRY(fulmen_trainer_options_new(&o));
    TRY(fulmen_trainer_options_set(o, "default_root_dir", root));
    TRY(fulmen_trainer_options_set_int(o, "max_epochs", 2));
    TRY(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    TRY(fulmen_trainer_options_set_int(o, "seed", 3));
    TRY(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    TRY(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    TRY(fulmen_trainer_options_set(o, "logger", "false"));
    return o;
}

/* The 32 points in batches of 8, in order. */
static fulmen_loader *blobs(void) {
    float x[32][2];
    int64_t y[32];
    for (int i = 0; i < 32; i++) {
        y[i] = i % 2;
        x[i][0] = (float)((y[i] ? 1.5 : -1.5) + sin(i * 1.7));
        x[i][1] = (float)((y[i] ? 1.5 : -1.5) + cos(i * 2.3));
    }
    int64_t xs[2] = {32, 2}, ys[1] = {32};
    fulmen_tensor *tx = NULL, *ty = NULL;
    TRY(fulmen_tensor_from_data(x, sizeof x, FULMEN_DTYPE_F32, xs, 2, &tx));
    TRY(fulmen_tensor_from_data(y, sizeof y, FULMEN_DTYPE_I64, ys, 1, &ty));
    const fulmen_tensor *parts[2] = {tx, ty};
    fulmen_dataset *ds = NULL;
    TRY(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 8;
    fulmen_loader *l = NULL;
    TRY(fulmen_loader_new(ds, &lo, &l));
    fulmen_dataset_free(ds);
    fulmen_tensor_free(tx);
    fulmen_tensor_free(ty);
    return l;
}

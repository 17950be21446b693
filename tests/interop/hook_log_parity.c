/* fulmen's side of the hook logging parity test
 * (tests/interop/hook_log_parity.py runs the same module on Lightning's
 * Trainer and compares).
 *
 *   hook_log_parity OUT
 *
 * A 2-epoch fit of a linear 2-2 model over 40 samples (batches 16, 16, 8),
 * validating on the same loader, with a CSV logger under OUT. The module
 * logs values that depend only on the loop's position, with Lightning's
 * default flags unless said: on_train_batch_end "tbe" (batch_idx + 1 + 10
 * * epoch) and "tbe2" (the same, on_step and on_epoch),
 * on_before_optimizer_step "bos" (global step), on_validation_batch_end
 * "vbe" (batch_idx), on_train_epoch_start "tes" (10 * epoch), training_step
 * "ts" (batch_idx), validation_step and test_step "vs" (batch_idx + 10 *
 * dataloader_idx, on_step and on_epoch), "vn" (1, summed) and "vq" (batch_idx,
 * logger=False), on_validation_epoch_end "vee" (3). Prints "logged NAME
 * VALUE" and "callback NAME VALUE" per metric. Then, on the same trainer,
 * validate over two loaders (the 40 samples in batches of 16 and of 10)
 * and test over the first: after each, "<label>_result<i> NAME VALUE" per
 * entry of the returned dicts and "<label>_logged" / "<label>_callback"
 * lines ("validate", "test"). Last "log_dir DIR". A failed call prints its
 * error and exits 1. */
#include <fulmen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "hook_log_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),           \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static fulmen_model *model;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ud;
    int64_t i = 0;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    if (e == NULL) e = fulmen_step_context_log(ctx, "ts", (double)i, FULMEN_LOG_DEFAULT, 0);
    if (e == NULL) e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ud;
    (void)batch;
    int64_t i = 0;
    size_t d = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    if (e == NULL) e = fulmen_step_context_dataloader_idx(ctx, &d);
    double v = (double)i + 10.0 * (double)d;
    if (e == NULL) e = fulmen_step_context_log(ctx, "vs", v, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "vn", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "vq", (double)i, FULMEN_LOG_NO_LOGGER, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    (void)ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    int64_t i = 0, epoch = 0, step = 0;
    fulmen_error *e = fulmen_hook_context_batch_idx(ctx, &i);
    if (e == NULL) e = fulmen_hook_context_epoch(ctx, &epoch);
    if (e == NULL) e = fulmen_hook_context_global_step(ctx, &step);
    if (e != NULL) return e;
    double tbe = (double)(i + 1 + 10 * epoch);
    switch (hook) {
    case FULMEN_HOOK_TRAIN_BATCH_END:
        e = fulmen_hook_context_log(ctx, "tbe", tbe, FULMEN_LOG_DEFAULT);
        if (e == NULL) e = fulmen_hook_context_log(ctx, "tbe2", tbe, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH);
        return e;
    case FULMEN_HOOK_BEFORE_OPTIMIZER_STEP:
        return fulmen_hook_context_log(ctx, "bos", (double)step, FULMEN_LOG_DEFAULT);
    case FULMEN_HOOK_VALIDATION_BATCH_END:
        return fulmen_hook_context_log(ctx, "vbe", (double)i, FULMEN_LOG_DEFAULT);
    case FULMEN_HOOK_TRAIN_EPOCH_START:
        return fulmen_hook_context_log(ctx, "tes", (double)(10 * epoch), FULMEN_LOG_DEFAULT);
    case FULMEN_HOOK_VALIDATION_EPOCH_END:
        return fulmen_hook_context_log(ctx, "vee", 3.0, FULMEN_LOG_DEFAULT);
    default:
        return NULL;
    }
}

static fulmen_loader *blobs(size_t batch_size) {
    float x[40][2];
    int64_t y[40];
    for (int i = 0; i < 40; i++) {
        y[i] = i % 2;
        x[i][0] = (float)((y[i] ? 1.5 : -1.5) + sin(i * 1.7));
        x[i][1] = (float)((y[i] ? 1.5 : -1.5) + cos(i * 2.3));
    }
    int64_t xs[2] = {40, 2}, ys[1] = {40};
    fulmen_tensor *tx = NULL, *ty = NULL;
    TRY(fulmen_tensor_from_data(x, sizeof x, FULMEN_DTYPE_F32, xs, 2, &tx));
    TRY(fulmen_tensor_from_data(y, sizeof y, FULMEN_DTYPE_I64, ys, 1, &ty));
    const fulmen_tensor *parts[2] = {tx, ty};
    fulmen_dataset *ds = NULL;
    TRY(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = batch_size;
    fulmen_loader *l = NULL;
    TRY(fulmen_loader_new(ds, &lo, &l));
    fulmen_dataset_free(ds);
    fulmen_tensor_free(tx);
    fulmen_tensor_free(ty);
    return l;
}

/* Prints every entry of a dict of metrics as "LABEL NAME VALUE". */
static void print_metrics(const char *label, const fulmen_value *d) {
    size_t n = 0;
    TRY(fulmen_value_len(d, &n));
    for (size_t i = 0; i < n; i++) {
        fulmen_value *k = NULL, *v = NULL;
        char name[256];
        size_t len = 0;
        double x = NAN;
        TRY(fulmen_value_dict_entry(d, i, &k, &v));
        TRY(fulmen_value_get_string(k, name, sizeof name, &len));
        TRY(fulmen_value_get_double(v, &x));
        printf("%s %s %.17g\n", label, name, x);
        fulmen_value_free(k);
        fulmen_value_free(v);
    }
}

/* Prints the trainer's logged and callback metrics after a run and the
 * dicts its validate / test returned, each line's label after `prefix`. */
static void print_run(const fulmen_trainer *t, const char *prefix) {
    char label[64];
    fulmen_value *logged = NULL, *cb = NULL, *results = NULL;
    TRY(fulmen_trainer_logged_metrics(t, &logged));
    TRY(fulmen_trainer_callback_metrics(t, &cb));
    TRY(fulmen_trainer_eval_results(t, &results));
    snprintf(label, sizeof label, "%slogged", prefix);
    print_metrics(label, logged);
    snprintf(label, sizeof label, "%scallback", prefix);
    print_metrics(label, cb);
    size_t n = 0;
    TRY(fulmen_value_len(results, &n));
    for (size_t i = 0; i < n; i++) {
        fulmen_value *d = NULL;
        TRY(fulmen_value_item(results, i, &d));
        snprintf(label, sizeof label, "%sresult%zu", prefix, i);
        print_metrics(label, d);
        fulmen_value_free(d);
    }
    fulmen_value_free(logged);
    fulmen_value_free(cb);
    fulmen_value_free(results);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: hook_log_parity OUT\n");
        return 2;
    }
    TRY(fulmen_set_num_threads(1));
    fulmen_model *layer = NULL;
    TRY(fulmen_model_sequential_new(&model));
    TRY(fulmen_model_linear_new(2, 2, true, &layer));
    TRY(fulmen_model_push(model, layer));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.test_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    TRY(fulmen_lightning_module_new(&vt, model, &m));
    fulmen_trainer_options *o = NULL;
    TRY(fulmen_trainer_options_new(&o));
    TRY(fulmen_trainer_options_set(o, "default_root_dir", argv[1]));
    TRY(fulmen_trainer_options_set_int(o, "max_epochs", 2));
    TRY(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    TRY(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    TRY(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    TRY(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    TRY(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    TRY(fulmen_trainer_options_set(o, "logger", "csv"));
    fulmen_trainer *t = NULL;
    TRY(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_loader *loader = blobs(16), *tens = blobs(10);
    TRY(fulmen_trainer_fit(t, m, loader, loader, NULL));
    print_run(t, "");
    const fulmen_loader *both[2] = {loader, tens};
    TRY(fulmen_trainer_validate_loaders(t, m, both, 2, NULL));
    print_run(t, "validate_");
    TRY(fulmen_trainer_test(t, m, loader, NULL));
    print_run(t, "test_");
    /* Lightning's trainer.fit_loop.max_epochs = 3 and fit again: one more
     * epoch, logged on in the same metrics.csv. */
    TRY(fulmen_trainer_set_max_epochs(t, 3));
    TRY(fulmen_trainer_fit(t, m, loader, loader, NULL));
    print_run(t, "refit_");
    char dir[1024];
    size_t len = 0;
    TRY(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    printf("log_dir %s\n", dir);
    fulmen_loader_free(loader);
    fulmen_loader_free(tens);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(model);
    return 0;
}

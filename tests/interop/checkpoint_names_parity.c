/* fulmen's side of the ModelCheckpoint file name parity test against
 * Lightning (tests/interop/checkpoint_names_parity.py runs Lightning's).
 *
 *   checkpoint_names_parity CASE DIR
 *
 * Fits Linear(2, 2) on 32 random samples in batches of 8 (4 steps per
 * epoch, no validation) with one ModelCheckpoint into DIR, as CASE says:
 * "versions" (filename "fixed", two fits), "no_versions" (the same,
 * enable_version_counter false), "link" (save_last_link, 2 epochs),
 * "exception" (save_on_exception and save_last, the training step failing
 * at global step 2), "time" (train_time_interval 1 microsecond, save_top_k
 * -1). A failed call prints its error and exits 1. */
#include <fulmen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLES 32
#define BATCH 8
#define FAIL_AT 2

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "checkpoint_names_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),   \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

struct job {
    fulmen_model *model;
    int64_t fail_at; /* -1: never */
};

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    struct job *job = ud;
    int64_t step = 0;
    fulmen_tensor *x, *y, *logits;
    fulmen_error *e = fulmen_step_context_global_step(ctx, &step);
    if (!e && step == job->fail_at) return fulmen_error_new(FULMEN_CODE_CALLBACK, "planned failure");
    if (!e) e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    struct job *job = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
    if (!e) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    return e;
}

static fulmen_loader *make_loader(fulmen_dataset **ds) {
    int64_t xs[2] = {SAMPLES, 2}, ys[1] = {SAMPLES};
    fulmen_tensor *x, *y;
    TRY(fulmen_manual_seed(0));
    TRY(fulmen_tensor_randn(xs, 2, FULMEN_DTYPE_F32, &x));
    int64_t labels[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) labels[i] = i % 2;
    TRY(fulmen_tensor_from_data(labels, sizeof labels, FULMEN_DTYPE_I64, ys, 1, &y));
    const fulmen_tensor *columns[2] = {x, y};
    TRY(fulmen_dataset_from_tensors(columns, 2, ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = BATCH;
    fulmen_loader *loader = NULL;
    TRY(fulmen_loader_new(*ds, &lo, &loader));
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    return loader;
}

/* One fit of `epochs` with `ck`; a planned failure is expected when
 * job->fail_at is set. */
static void fit(struct job *job, fulmen_loader *loader, int64_t epochs, const fulmen_model_checkpoint_options *ck) {
    fulmen_trainer_options *opts;
    TRY(fulmen_trainer_options_new(&opts));
    TRY(fulmen_trainer_options_set_int(opts, "max_epochs", epochs));
    TRY(fulmen_trainer_options_set(opts, "logger", "false"));
    TRY(fulmen_trainer_options_set_bool(opts, "enable_progress_bar", false));
    TRY(fulmen_trainer_options_set_bool(opts, "enable_model_summary", false));
    fulmen_trainer *trainer;
    TRY(fulmen_trainer_new(opts, &trainer));
    fulmen_trainer_options_free(opts);
    TRY(fulmen_trainer_add_model_checkpoint(trainer, ck));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = job;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module;
    TRY(fulmen_lightning_module_new(&vt, job->model, &module));
    fulmen_error *e = fulmen_trainer_fit(trainer, module, loader, NULL, NULL);
    if (job->fail_at >= 0 && e != NULL && fulmen_error_code(e) == FULMEN_CODE_CALLBACK) {
        fulmen_error_free(e);
    } else {
        TRY(e);
    }
    fulmen_lightning_module_free(module);
    fulmen_trainer_free(trainer);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: checkpoint_names_parity CASE DIR\n");
        return 2;
    }
    const char *name = argv[1];
    struct job job = {NULL, -1};
    fulmen_model *layer;
    TRY(fulmen_model_linear_new(2, 2, true, &layer));
    job.model = layer;
    fulmen_dataset *ds = NULL;
    fulmen_loader *loader = make_loader(&ds);
    fulmen_model_checkpoint_options ck = fulmen_model_checkpoint_options_default();
    ck.dirpath = argv[2];
    int64_t epochs = 1;
    int fits = 1;
    if (strcmp(name, "versions") == 0 || strcmp(name, "no_versions") == 0) {
        ck.filename = "fixed";
        ck.enable_version_counter = strcmp(name, "versions") == 0;
        fits = 2;
    } else if (strcmp(name, "link") == 0) {
        ck.save_last = true;
        ck.save_last_link = true;
        epochs = 2;
    } else if (strcmp(name, "exception") == 0) {
        ck.save_on_exception = true;
        ck.save_last = true;
        job.fail_at = FAIL_AT;
    } else if (strcmp(name, "time") == 0) {
        ck.train_time_interval = 1e-6;
        ck.save_top_k = -1;
    } else {
        fprintf(stderr, "checkpoint_names_parity: unknown case %s\n", name);
        return 2;
    }
    for (int i = 0; i < fits; i++) fit(&job, loader, epochs, &ck);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(job.model);
    return 0;
}

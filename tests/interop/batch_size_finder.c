/* fulmen's side of the batch size finder's parity test against Lightning's
 * own Tuner.scale_batch_size (tests/interop/batch_size_parity.py).
 *
 *   batch_size_finder MODE FITS INIT MAX_TRIALS MARGIN MAX_VAL SAMPLES
 *
 * MODE is "power" or "binsearch". A 2-16-2 MLP trains on SAMPLES random
 * 2-D points (a loader of batch size INIT) for at most 1 epoch per trial, 3
 * steps per trial; a training step whose batch has more than FITS rows
 * fails with FULMEN_CODE_OUT_OF_MEMORY. Prints the rows of each trial's
 * first batch ("tried N"), then "found N". A failed call prints its error
 * and exits 1. */
#include <fulmen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                           \
    do {                                                                                                    \
        fulmen_error *e_ = (call);                                                                          \
        if (e_) {                                                                                           \
            fprintf(stderr, "batch_size_finder: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),      \
                    fulmen_error_message(e_));                                                              \
            fulmen_error_free(e_);                                                                          \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

struct job {
    fulmen_model *model;
    int64_t fits;
    int64_t global_step_seen;
};

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    struct job *job = ud;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    int64_t dims[2] = {0, 0}, g = 0;
    size_t ndim = 0;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_tensor_shape(x, dims, 2, &ndim);
    if (!e) e = fulmen_step_context_global_step(ctx, &g);
    if (e) return e;
    /* A trial starts at global step 0. */
    if (g == 0) printf("tried %lld\n", (long long)dims[0]);
    if (dims[0] > job->fits) return fulmen_error_new(FULMEN_CODE_OUT_OF_MEMORY, "simulated: CUDA out of memory");
    e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    struct job *job = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
    if (!e) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e) fulmen_optimizer_free(opt);
    return e;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: batch_size_finder MODE FITS INIT MAX_TRIALS MARGIN MAX_VAL SAMPLES\n");
        return 2;
    }
    struct job job = {.fits = strtoll(argv[2], NULL, 10)};
    size_t samples = strtoull(argv[7], NULL, 10);
    TRY(fulmen_set_num_threads(1));
    TRY(fulmen_manual_seed(1));
    fulmen_model *layer = NULL;
    TRY(fulmen_model_sequential_new(&job.model));
    TRY(fulmen_model_linear_new(2, 16, true, &layer));
    TRY(fulmen_model_push(job.model, layer));
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0.0, &layer));
    TRY(fulmen_model_push(job.model, layer));
    TRY(fulmen_model_linear_new(16, 2, true, &layer));
    TRY(fulmen_model_push(job.model, layer));
    int64_t xshape[2] = {(int64_t)samples, 2}, yshape[1] = {(int64_t)samples};
    fulmen_tensor *x = NULL, *y = NULL;
    TRY(fulmen_tensor_randn(xshape, 2, FULMEN_DTYPE_F32, &x));
    int64_t *labels = calloc(samples, sizeof(int64_t));
    if (!labels) return 1;
    for (size_t i = 0; i < samples; i++) labels[i] = (int64_t)(i % 2);
    TRY(fulmen_tensor_from_data(labels, samples * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &y));
    free(labels);
    const fulmen_tensor *columns[2] = {x, y};
    fulmen_dataset *data = NULL;
    fulmen_loader *loader = NULL;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = strtoull(argv[3], NULL, 10); /* the loader starts at INIT */
    TRY(fulmen_dataset_from_tensors(columns, 2, &data));
    TRY(fulmen_loader_new(data, &lo, &loader));
    fulmen_module_vtable vt = {.struct_size = sizeof vt, .userdata = &job, .training_step = step,
                               .configure_optimizers = configure};
    fulmen_lightning_module *module = NULL;
    fulmen_trainer_options *opts = NULL;
    fulmen_trainer *trainer = NULL;
    TRY(fulmen_lightning_module_new(&vt, job.model, &module));
    TRY(fulmen_trainer_options_new(&opts));
    TRY(fulmen_trainer_options_set(opts, "max_epochs", "1"));
    TRY(fulmen_trainer_options_set(opts, "accelerator", "cpu"));
    TRY(fulmen_trainer_options_set(opts, "enable_progress_bar", "false"));
    TRY(fulmen_trainer_options_set(opts, "enable_model_summary", "false"));
    TRY(fulmen_trainer_options_set(opts, "logger", "false"));
    TRY(fulmen_trainer_options_set(opts, "enable_checkpointing", "false"));
    TRY(fulmen_trainer_new(opts, &trainer));
    fulmen_batch_size_finder_options bo = fulmen_batch_size_finder_options_default();
    bo.binsearch = strcmp(argv[1], "binsearch") == 0;
    bo.init_val = strtoull(argv[3], NULL, 10);
    bo.max_trials = strtoll(argv[4], NULL, 10);
    bo.margin = strtod(argv[5], NULL);
    bo.max_val = strtoull(argv[6], NULL, 10);
    size_t found = 0;
    TRY(fulmen_trainer_scale_batch_size(trainer, module, loader, NULL, &bo, &found));
    printf("found %zu\n", found);
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(data);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(job.model);
    return fulmen_live_handles() == 0 ? 0 : 1;
}

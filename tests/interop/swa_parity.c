/* fulmen's side of the StochasticWeightAveraging parity test against
 * Lightning's callback (tests/interop/swa_parity.py runs the Lightning twin).
 *
 *   swa_parity CONFIG INIT DATA_X DATA_Y SAMPLES BATCH EPOCHS LOSSES WEIGHTS
 *              [CKPT_DIR [RESUME [FORMAT]]]
 *
 * CONFIG "bn": Linear(32, 64), BatchNorm1d(64), ReLU, Linear(64, 10);
 * "mlp": the same without the BatchNorm. Weights from INIT (safetensors),
 * the first SAMPLES rows of DATA_X (float32, 32 per row) / DATA_Y (int64)
 * in order, BATCH rows per batch, EPOCHS epochs on one CPU thread. SGD (lr
 * 0.1, momentum 0.9) with StepLR (step_size 1, gamma 0.5) per epoch, which
 * StochasticWeightAveraging (swa_lr 0.05, from epoch 2, 2 annealing epochs,
 * cosine) replaces. Every training step's loss is appended to LOSSES
 * ("%.17g" per line) and the final weights saved to WEIGHTS. With CKPT_DIR
 * a checkpoint is kept per epoch ("epoch=N.ckpt") in FORMAT ("safetensors",
 * the default, or "lightning", the names under "model." as the twin's);
 * RESUME ("-": none) resumes from one, of either format. A failed call
 * prints its error and exits 1. */
#include <fulmen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURES 32
#define HIDDEN 64
#define CLASSES 10

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "swa_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),                \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

struct job {
    fulmen_model *model;
    FILE *losses;
};

static void push(fulmen_model *m, fulmen_model *layer) {
    TRY(fulmen_model_push(m, layer));
}

static fulmen_model *build(bool batch_norm) {
    fulmen_model *m, *layer;
    TRY(fulmen_model_sequential_new(&m));
    TRY(fulmen_model_linear_new(FEATURES, HIDDEN, true, &layer));
    push(m, layer);
    if (batch_norm) {
        TRY(fulmen_model_batch_norm_new(HIDDEN, 1e-5, 0.1, &layer));
        push(m, layer);
    }
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0.0, &layer));
    push(m, layer);
    TRY(fulmen_model_linear_new(HIDDEN, CLASSES, true, &layer));
    push(m, layer);
    return m;
}

static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    (void)ctx;
    struct job *job = userdata;
    fulmen_tensor *x, *y, *logits;
    double value;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    if (!e) e = fulmen_tensor_item(*loss, &value);
    if (!e) fprintf(job->losses, "%.17g\n", value);
    return e;
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    struct job *job = userdata;
    fulmen_optimizer *opt;
    fulmen_scheduler *sched;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = 0.9;
    fulmen_error *e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
    if (e) return e;
    e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
    if (e) {
        fulmen_optimizer_free(opt);
        return e;
    }
    return fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
}

static void *read_file(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "swa_parity: cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

static void set(fulmen_trainer_options *opts, const char *key, const char *value) {
    TRY(fulmen_trainer_options_set(opts, key, value));
}

int main(int argc, char **argv) {
    if (argc < 10 || argc > 13 || (strcmp(argv[1], "bn") != 0 && strcmp(argv[1], "mlp") != 0)) {
        fprintf(stderr, "usage: swa_parity bn|mlp INIT DATA_X DATA_Y SAMPLES BATCH EPOCHS LOSSES WEIGHTS "
                        "[CKPT_DIR [RESUME [FORMAT]]]\n");
        return 2;
    }
    struct job job = {0};
    size_t samples = strtoull(argv[5], NULL, 10);
    TRY(fulmen_set_num_threads(1));
    job.model = build(strcmp(argv[1], "bn") == 0);
    TRY(fulmen_model_load(job.model, argv[2], true));
    job.losses = fopen(argv[8], "a");
    if (!job.losses) {
        fprintf(stderr, "swa_parity: cannot open %s\n", argv[8]);
        return 1;
    }
    float *xs = read_file(argv[3], samples * FEATURES * sizeof(float));
    int64_t *ys = read_file(argv[4], samples * sizeof(int64_t));
    int64_t xshape[2] = {(int64_t)samples, FEATURES}, yshape[1] = {(int64_t)samples};
    fulmen_tensor *x, *y;
    TRY(fulmen_tensor_from_data(xs, samples * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &x));
    TRY(fulmen_tensor_from_data(ys, samples * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &y));
    free(xs);
    free(ys);
    const fulmen_tensor *columns[2] = {x, y};
    fulmen_dataset *data;
    fulmen_loader *loader;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = strtoull(argv[6], NULL, 10);
    TRY(fulmen_dataset_from_tensors(columns, 2, &data));
    TRY(fulmen_loader_new(data, &lo, &loader));

    fulmen_module_vtable vt = {.struct_size = sizeof vt,
                               .userdata = &job,
                               .training_step = training_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module;
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    TRY(fulmen_lightning_module_new(&vt, job.model, &module));
    TRY(fulmen_trainer_options_new(&opts));
    set(opts, "max_epochs", argv[7]);
    set(opts, "accelerator", "cpu");
    set(opts, "devices", "1");
    set(opts, "enable_progress_bar", "false");
    set(opts, "enable_model_summary", "false");
    set(opts, "logger", "false");
    set(opts, "handle_signals", "false");
    set(opts, "enable_checkpointing", argc > 10 ? "true" : "false");
    set(opts, "checkpoint_format", argc > 12 ? argv[12] : "safetensors");
    set(opts, "checkpoint_prefix", "model.");
    TRY(fulmen_trainer_new(opts, &trainer));
    fulmen_stochastic_weight_averaging_options swa = fulmen_stochastic_weight_averaging_options_default(0.05);
    swa.swa_epoch_start = 2;
    swa.annealing_epochs = 2;
    TRY(fulmen_trainer_add_stochastic_weight_averaging(trainer, &swa));
    if (argc > 10) {
        fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
        mc.dirpath = argv[10];
        mc.filename = "{epoch}";
        mc.save_top_k = -1;
        TRY(fulmen_trainer_add_model_checkpoint(trainer, &mc));
    }
    TRY(fulmen_trainer_fit(trainer, module, loader, NULL, argc > 11 && strcmp(argv[11], "-") != 0 ? argv[11] : NULL));
    TRY(fulmen_model_save(job.model, argv[9]));
    fclose(job.losses);
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

/* fulmen's side of the LightningDataModule parity test against Lightning's
 * Trainer (tests/interop/datamodule_parity.py runs the Lightning twin).
 *
 *   datamodule_parity INIT DATA_X DATA_Y SAMPLES VAL BATCH EPOCHS EVENTS LOSSES
 *
 * Linear(32, 64), ReLU, Linear(64, 10) with the weights of INIT
 * (safetensors), fit for EPOCHS epochs on one CPU thread with SGD (lr 0.1,
 * momentum 0.9) through a datamodule whose train_dataloader gives the first
 * SAMPLES rows of DATA_X (float32, 32 per row) / DATA_Y (int64) in order,
 * BATCH rows per batch, and whose val / test / predict dataloaders give the
 * first VAL rows; then validate, test and predict with the same datamodule.
 * No sanity check. Each datamodule call is written to EVENTS as a line
 * ("prepare_data", "setup fit", "train_dataloader", ...), each training
 * step's loss to LOSSES ("%.17g" per line). A failed call prints its error
 * and exits 1. */
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
            fprintf(stderr, "datamodule_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),         \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

struct job {
    fulmen_model *model;
    FILE *events, *losses;
    fulmen_dataset *train, *val;
    fulmen_tensor *parts[4]; /* the datasets' columns */
    size_t batch;
};

static fulmen_model *build(void) {
    fulmen_model *m, *layer;
    TRY(fulmen_model_sequential_new(&m));
    TRY(fulmen_model_linear_new(FEATURES, HIDDEN, true, &layer));
    TRY(fulmen_model_push(m, layer));
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0.0, &layer));
    TRY(fulmen_model_push(m, layer));
    TRY(fulmen_model_linear_new(HIDDEN, CLASSES, true, &layer));
    TRY(fulmen_model_push(m, layer));
    return m;
}

/* ------------------------------------------------------------ the module */

static fulmen_error *loss_of(struct job *job, const fulmen_batch *batch, fulmen_tensor **loss) {
    fulmen_tensor *x, *y, *logits;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    (void)ctx;
    struct job *job = userdata;
    double value;
    fulmen_error *e = loss_of(job, batch, loss);
    if (!e) e = fulmen_tensor_item(*loss, &value);
    if (!e) fprintf(job->losses, "%.17g\n", value);
    return e;
}

static fulmen_error *eval_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss;
    double value;
    fulmen_error *e = loss_of(userdata, batch, &loss);
    if (!e) e = fulmen_tensor_item(loss, &value);
    if (!e) e = fulmen_step_context_log(ctx, "loss", value, 0, 0);
    return e;
}

static fulmen_error *predict_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                  fulmen_tensor **out) {
    (void)ctx;
    struct job *job = userdata;
    fulmen_tensor *x;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    return e ? e : fulmen_model_forward(job->model, x, out);
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    struct job *job = userdata;
    fulmen_optimizer *opt;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = 0.9;
    fulmen_error *e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
    if (e) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e) fulmen_optimizer_free(opt);
    return e;
}

/* -------------------------------------------------------- the datamodule */

static void event(struct job *job, const char *what, const char *stage) {
    if (stage) {
        fprintf(job->events, "%s %s\n", what, stage);
    } else {
        fprintf(job->events, "%s\n", what);
    }
}

static fulmen_error *loader_over(struct job *job, fulmen_dataset *ds, fulmen_loader **out) {
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = job->batch;
    return fulmen_loader_new(ds, &lo, out);
}

static fulmen_error *prepare_data(void *userdata) {
    event(userdata, "prepare_data", NULL);
    return NULL;
}

static fulmen_error *setup(void *userdata, const char *stage) {
    event(userdata, "setup", stage);
    return NULL;
}

static fulmen_error *teardown(void *userdata, const char *stage) {
    event(userdata, "teardown", stage);
    return NULL;
}

static fulmen_error *train_dataloader(void *userdata, int64_t epoch, fulmen_loader **out) {
    (void)epoch;
    struct job *job = userdata;
    event(job, "train_dataloader", NULL);
    return loader_over(job, job->train, out);
}

static fulmen_error *eval_loader(struct job *job, const char *what, fulmen_loader **out, size_t *n) {
    event(job, what, NULL);
    *n = 1;
    return loader_over(job, job->val, &out[0]);
}

static fulmen_error *val_dataloader(void *userdata, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    (void)epoch;
    (void)capacity;
    return eval_loader(userdata, "val_dataloader", out, n);
}

static fulmen_error *test_dataloader(void *userdata, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    (void)epoch;
    (void)capacity;
    return eval_loader(userdata, "test_dataloader", out, n);
}

static fulmen_error *predict_dataloader(void *userdata, int64_t epoch, fulmen_loader **out, size_t capacity,
                                        size_t *n) {
    (void)epoch;
    (void)capacity;
    return eval_loader(userdata, "predict_dataloader", out, n);
}

/* ------------------------------------------------------------------ main */

static void *read_file(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "datamodule_parity: cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

static fulmen_dataset *dataset_of(const float *xs, const int64_t *ys, size_t rows, fulmen_tensor *parts[2]) {
    int64_t xshape[2] = {(int64_t)rows, FEATURES}, yshape[1] = {(int64_t)rows};
    TRY(fulmen_tensor_from_data(xs, rows * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &parts[0]));
    TRY(fulmen_tensor_from_data(ys, rows * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &parts[1]));
    const fulmen_tensor *columns[2] = {parts[0], parts[1]};
    fulmen_dataset *ds;
    TRY(fulmen_dataset_from_tensors(columns, 2, &ds));
    return ds;
}

static void set(fulmen_trainer_options *opts, const char *key, const char *value) {
    TRY(fulmen_trainer_options_set(opts, key, value));
}

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: datamodule_parity INIT DATA_X DATA_Y SAMPLES VAL BATCH EPOCHS EVENTS LOSSES\n");
        return 2;
    }
    struct job job = {0};
    size_t samples = strtoull(argv[4], NULL, 10), val = strtoull(argv[5], NULL, 10);
    job.batch = strtoull(argv[6], NULL, 10);
    if (val > samples || samples > 1000000) {
        fprintf(stderr, "datamodule_parity: VAL above SAMPLES, or SAMPLES above 1000000\n");
        return 2;
    }
    TRY(fulmen_set_num_threads(1));
    job.model = build();
    TRY(fulmen_model_load(job.model, argv[1], true));
    job.events = fopen(argv[8], "w");
    job.losses = fopen(argv[9], "w");
    if (!job.events || !job.losses) {
        fprintf(stderr, "datamodule_parity: cannot open %s or %s\n", argv[8], argv[9]);
        return 1;
    }
    float *xs = read_file(argv[2], samples * FEATURES * sizeof(float));
    int64_t *ys = read_file(argv[3], samples * sizeof(int64_t));
    job.train = dataset_of(xs, ys, samples, &job.parts[0]);
    job.val = dataset_of(xs, ys, val, &job.parts[2]);
    free(xs);
    free(ys);

    fulmen_module_vtable vt = {.struct_size = sizeof vt,
                               .userdata = &job,
                               .training_step = training_step,
                               .validation_step = eval_step,
                               .test_step = eval_step,
                               .predict_step = predict_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_datamodule_vtable dvt = {.struct_size = sizeof dvt,
                                    .userdata = &job,
                                    .prepare_data = prepare_data,
                                    .setup = setup,
                                    .teardown = teardown,
                                    .train_dataloader = train_dataloader,
                                    .val_dataloader = val_dataloader,
                                    .test_dataloader = test_dataloader,
                                    .predict_dataloader = predict_dataloader};
    fulmen_lightning_module *module;
    fulmen_datamodule *data;
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    TRY(fulmen_lightning_module_new(&vt, job.model, &module));
    TRY(fulmen_datamodule_new(&dvt, "ParityData", &data));
    TRY(fulmen_trainer_options_new(&opts));
    set(opts, "max_epochs", argv[7]);
    set(opts, "accelerator", "cpu");
    set(opts, "devices", "1");
    set(opts, "num_sanity_val_steps", "0");
    set(opts, "enable_progress_bar", "false");
    set(opts, "enable_model_summary", "false");
    set(opts, "logger", "false");
    set(opts, "handle_signals", "false");
    set(opts, "enable_checkpointing", "false");
    TRY(fulmen_trainer_new(opts, &trainer));
    TRY(fulmen_trainer_fit_datamodule(trainer, module, NULL, NULL, data, NULL));
    TRY(fulmen_trainer_validate_datamodule(trainer, module, NULL, data, NULL));
    TRY(fulmen_trainer_test_datamodule(trainer, module, NULL, data, NULL));
    fulmen_tensor *outs[1] = {NULL};
    size_t n = 0;
    TRY(fulmen_trainer_predict_datamodule(trainer, module, NULL, data, NULL, outs, 1, &n));
    fulmen_tensor_free(outs[0]);
    fclose(job.events);
    fclose(job.losses);
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_datamodule_free(data);
    fulmen_lightning_module_free(module);
    fulmen_dataset_free(job.train);
    fulmen_dataset_free(job.val);
    for (int i = 0; i < 4; i++) fulmen_tensor_free(job.parts[i]);
    fulmen_model_free(job.model);
    return fulmen_live_handles() == 0 ? 0 : 1;
}

/* fulmen's side of the ModelPruning parity test against Lightning's
 * callback (tests/interop/pruning_parity.py runs the Lightning twin).
 *
 *   pruning_parity CASE INIT DATA_X DATA_Y SAMPLES VAL BATCH EPOCHS SEED LOSSES WEIGHTS
 *
 * Linear(32, 64), ReLU, Linear(64, 10) with the weights of INIT
 * (safetensors), trained on the first SAMPLES rows of DATA_X (float32, 32
 * per row) / DATA_Y (int64) in order, BATCH rows per batch, validated on
 * the first VAL rows at each epoch end, EPOCHS epochs on one CPU thread,
 * SGD (lr 0.1, momentum 0.9), the global seed set to SEED before fit.
 * CASE picks the pruning: "l1_global" (l1_unstructured 0.3 over every
 * weight and bias, no lottery ticket reset), "l1_local_count"
 * (l1_unstructured, 50 entries of each weight by itself, no reset),
 * "random_lth" (random_unstructured 0.25, global, Lightning's defaults).
 * Every training step's loss is appended to LOSSES ("%.17g" per line) and
 * the final weights saved to WEIGHTS. A failed call prints its error and
 * exits 1. */
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
            fprintf(stderr, "pruning_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),            \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

struct job {
    fulmen_model *model;
    FILE *losses;
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

static fulmen_error *validation_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss;
    double value;
    fulmen_error *e = loss_of(userdata, batch, &loss);
    if (!e) e = fulmen_tensor_item(loss, &value);
    if (!e) e = fulmen_step_context_log(ctx, "val_loss", value, 0, 0);
    return e;
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

static void *read_file(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "pruning_parity: cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

static fulmen_loader *loader_of(const float *xs, const int64_t *ys, size_t rows, size_t batch, fulmen_dataset **ds,
                                fulmen_tensor *parts[2]) {
    int64_t xshape[2] = {(int64_t)rows, FEATURES}, yshape[1] = {(int64_t)rows};
    TRY(fulmen_tensor_from_data(xs, rows * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &parts[0]));
    TRY(fulmen_tensor_from_data(ys, rows * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &parts[1]));
    const fulmen_tensor *columns[2] = {parts[0], parts[1]};
    fulmen_loader *loader;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = batch;
    TRY(fulmen_dataset_from_tensors(columns, 2, ds));
    TRY(fulmen_loader_new(*ds, &lo, &loader));
    return loader;
}

static fulmen_model_pruning *pruning_for(const char *name) {
    fulmen_model_pruning *p;
    if (strcmp(name, "l1_global") == 0) {
        TRY(fulmen_model_pruning_new("l1_unstructured", 0.3, &p));
        TRY(fulmen_model_pruning_set_use_lottery_ticket_hypothesis(p, false));
    } else if (strcmp(name, "l1_local_count") == 0) {
        const char *weight[1] = {"weight"};
        TRY(fulmen_model_pruning_new("l1_unstructured", 0.0, &p));
        TRY(fulmen_model_pruning_set_amount_count(p, 50));
        TRY(fulmen_model_pruning_set_parameter_names(p, weight, 1));
        TRY(fulmen_model_pruning_set_use_global_unstructured(p, false));
        TRY(fulmen_model_pruning_set_use_lottery_ticket_hypothesis(p, false));
    } else if (strcmp(name, "random_lth") == 0) {
        TRY(fulmen_model_pruning_new("random_unstructured", 0.25, &p));
    } else {
        fprintf(stderr, "pruning_parity: unknown case %s\n", name);
        exit(2);
    }
    return p;
}

static void set(fulmen_trainer_options *opts, const char *key, const char *value) {
    TRY(fulmen_trainer_options_set(opts, key, value));
}

int main(int argc, char **argv) {
    if (argc != 12) {
        fprintf(stderr, "usage: pruning_parity CASE INIT DATA_X DATA_Y SAMPLES VAL BATCH EPOCHS SEED LOSSES WEIGHTS\n");
        return 2;
    }
    struct job job = {0};
    size_t samples = strtoull(argv[5], NULL, 10), val = strtoull(argv[6], NULL, 10);
    size_t batch = strtoull(argv[7], NULL, 10);
    if (val > samples) {
        fprintf(stderr, "pruning_parity: VAL is more than SAMPLES\n");
        return 2;
    }
    fulmen_model_pruning *pruning = pruning_for(argv[1]);
    TRY(fulmen_set_num_threads(1));
    job.model = build();
    TRY(fulmen_model_load(job.model, argv[2], true));
    job.losses = fopen(argv[10], "a");
    if (!job.losses) {
        fprintf(stderr, "pruning_parity: cannot open %s\n", argv[10]);
        return 1;
    }
    float *xs = read_file(argv[3], samples * FEATURES * sizeof(float));
    int64_t *ys = read_file(argv[4], samples * sizeof(int64_t));
    fulmen_dataset *train_ds, *val_ds;
    fulmen_tensor *train_parts[2], *val_parts[2];
    fulmen_loader *train = loader_of(xs, ys, samples, batch, &train_ds, train_parts);
    fulmen_loader *vals = loader_of(xs, ys, val, batch, &val_ds, val_parts);
    free(xs);
    free(ys);

    fulmen_module_vtable vt = {.struct_size = sizeof vt,
                               .userdata = &job,
                               .training_step = training_step,
                               .validation_step = validation_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module;
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    TRY(fulmen_lightning_module_new(&vt, job.model, &module));
    TRY(fulmen_trainer_options_new(&opts));
    set(opts, "max_epochs", argv[8]);
    set(opts, "accelerator", "cpu");
    set(opts, "devices", "1");
    set(opts, "enable_progress_bar", "false");
    set(opts, "enable_model_summary", "false");
    set(opts, "logger", "false");
    set(opts, "handle_signals", "false");
    set(opts, "enable_checkpointing", "false");
    TRY(fulmen_trainer_new(opts, &trainer));
    TRY(fulmen_trainer_add_model_pruning(trainer, pruning));
    TRY(fulmen_manual_seed(strtoull(argv[9], NULL, 10)));
    TRY(fulmen_trainer_fit(trainer, module, train, vals, NULL));
    TRY(fulmen_model_save(job.model, argv[11]));
    fclose(job.losses);
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_pruning_free(pruning);
    fulmen_loader_free(train);
    fulmen_loader_free(vals);
    fulmen_dataset_free(train_ds);
    fulmen_dataset_free(val_ds);
    for (int i = 0; i < 2; i++) {
        fulmen_tensor_free(train_parts[i]);
        fulmen_tensor_free(val_parts[i]);
    }
    fulmen_model_free(job.model);
    return fulmen_live_handles() == 0 ? 0 : 1;
}

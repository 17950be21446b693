/*
 * Memory and step time of strategy "fsdp" against "ddp" on 4 CPU ranks
 * (gloo): a GPT-like stack of about 100M parameters trains for a few
 * steps and each rank prints one JSON line of what it measured (read by
 * bench/fsdp_memory.py).
 *
 *   fsdp_memory STRATEGY STEPS
 *
 * STRATEGY: ddp, fsdp_full (fsdp, FULL_SHARD; each unit's backward gathers
 * the next unit ahead, the default), fsdp_full_no_prefetch (no gather
 * ahead: fsdp_backward_prefetch none), fsdp_full_forward_prefetch (forwards
 * gather ahead too: fsdp_forward_prefetch), fsdp_grad_op (fsdp,
 * SHARD_GRAD_OP) or fsdp_full_checkpointed (FULL_SHARD with every
 * TransformerEncoderLayer's forward checkpointed:
 * fsdp_activation_checkpointing_policy); fsdp's units are the
 * TransformerEncoderLayer blocks (the root holds the embedding, the final
 * norm and the head). STEPS: 2
 * to 1000 optimizer steps.
 *
 * Model: Embedding(8192, 768) -> 12 x TransformerEncoderLayer(768, 12
 * heads, feed-forward 3072, dropout 0, GELU, batch_first, norm_first) with
 * a causal mask -> LayerNorm(768) -> Linear(768, 8192); 97.6M float32
 * parameters. Data: seeded random token ids, sequences of 64, batch 2 per
 * rank, next-token cross-entropy; AdamW (lr 1e-4); one intra-op thread.
 *
 * The program is started once; fulmen's launcher re-executes it for ranks
 * 1..3 with the same arguments, so every rank builds the same model and
 * data and prints its own line:
 *
 *   {"strategy": ..., "rank": r, "world": 4, "params": N,
 *    "local_params": elements of the parameters this rank holds at a
 *        step's start (the whole model under ddp, its shards under fsdp),
 *    "state_bytes": local_params * 4 bytes * 4 (parameters, gradients and
 *        AdamW's two moments: what the rank holds between steps),
 *    "rss_before_model_bytes": VmRSS before the model is built,
 *    "rss_setup_peak_bytes": VmHWM at the first step's start (the model
 *        built and the strategy set up; under fsdp the full model existed),
 *    "rss_first_step_bytes": VmRSS then,
 *    "rss_train_peak_bytes": VmHWM at the last step's end, the peak having
 *        been reset at the first step's start (the steps alone),
 *    "hwm_reset": whether that reset worked (else the train peak is the
 *        process's peak so far),
 *    "rss_peak_bytes": the process's peak at the end of fit (VmHWM, with
 *        the setup peak taken into account; under fsdp the end of fit
 *        gathers the full parameters and optimizer state again),
 *    "step_seconds": median wall time of the steps after the first, from
 *        on_train_batch_start to on_train_batch_end,
 *    "steps": steps timed}
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#include <fulmen.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VOCAB 8192
#define D_MODEL 768
#define HEADS 12
#define FFN 3072
#define LAYERS 12
#define SEQ 64
#define BATCH 2
#define WORLD 4
#define LR 1e-4
#define MAX_STEPS 1000
#define SEED 0

/* The strategies the benchmark compares. */
typedef struct {
    const char *name;     /* the command line's */
    const char *strategy; /* the trainer's "strategy" */
    const char *sharding; /* fsdp_sharding_strategy, NULL for ddp */
    bool checkpointed;    /* the blocks' activations recomputed in backward */
    const char *backward_prefetch; /* fsdp_backward_prefetch */
    bool forward_prefetch;         /* fsdp_forward_prefetch */
    bool meta;                     /* built in a meta-init scope */
} choice;

static const choice CHOICES[] = {
    {"ddp", "ddp", NULL, false, "BACKWARD_PRE", false, false},
    {"fsdp_full", "fsdp", "FULL_SHARD", false, "BACKWARD_PRE", false, false},
    {"fsdp_full_no_prefetch", "fsdp", "FULL_SHARD", false, "none", false, false},
    {"fsdp_full_forward_prefetch", "fsdp", "FULL_SHARD", false, "BACKWARD_PRE", true, false},
    {"fsdp_grad_op", "fsdp", "SHARD_GRAD_OP", false, "BACKWARD_PRE", false, false},
    {"fsdp_full_checkpointed", "fsdp", "FULL_SHARD", true, "BACKWARD_PRE", false, false},
    {"fsdp_full_meta", "fsdp", "FULL_SHARD", false, "BACKWARD_PRE", false, true},
};

/* What the callbacks read and record. */
typedef struct {
    fulmen_model *model;
    fulmen_tensor *mask;    /* bool [SEQ, SEQ], true above the diagonal */
    int64_t steps;          /* max_steps, the capacity of durations */
    bool measured;          /* the first step's measurements are taken */
    int64_t local_params;   /* parameter elements held at the first step's start */
    int64_t rss_setup_peak; /* VmHWM then */
    int64_t rss_first_step; /* VmRSS then */
    bool hwm_reset;         /* VmHWM was reset then */
    int64_t rss_train_peak; /* VmHWM at the latest on_train_batch_end */
    double batch_start;     /* clock at the latest on_train_batch_start */
    double *durations;      /* seconds of each step */
    int64_t n_durations;
} bench;

static void check(fulmen_error *e, const char *what) {
    if (e == NULL) return;
    fprintf(stderr, "fsdp_memory: %s: %s (code %d)\n", what, fulmen_error_message(e), fulmen_error_code(e));
    fulmen_error_free(e);
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Field `key` ("VmRSS:", "VmHWM:") of /proc/self/status in bytes, or -1. */
static int64_t proc_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) return -1;
    char line[256];
    size_t n = strlen(key);
    long long kib = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, n) == 0) {
            kib = strtoll(line + n, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kib < 0 ? -1 : (int64_t)kib * 1024;
}

/* Resets VmHWM to the current RSS (Linux 4.0+); false when it cannot. */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f == NULL) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Sum of the element counts of the model's parameters as they are now:
 * under fsdp, between steps, this rank's shards. */
static fulmen_error *held_param_elements(const fulmen_model *model, int64_t *out) {
    *out = 0;
    size_t n = 0;
    fulmen_error *e = fulmen_model_parameters(model, false, NULL, 0, &n);
    if (e == NULL || fulmen_error_code(e) != FULMEN_CODE_OUT_OF_RANGE) return e;
    fulmen_error_free(e);
    fulmen_tensor **params = calloc(n, sizeof *params);
    if (params == NULL) return fulmen_error_new(FULMEN_CODE_OUT_OF_MEMORY, "fsdp_memory: parameter handles");
    size_t got = 0;
    e = fulmen_model_parameters(model, false, params, n, &got);
    int64_t total = 0;
    for (size_t i = 0; i < got; i++) {
        size_t k = 0;
        if (e == NULL) e = fulmen_tensor_numel(params[i], &k);
        total += (int64_t)k;
        fulmen_tensor_free(params[i]);
    }
    free(params);
    *out = total;
    return e;
}

/* At the first step's start (the strategy has set the model up): the
 * parameters this rank holds and the setup's peak, then a fresh peak. */
static fulmen_error *measure_first_step(bench *b) {
    fulmen_error *e = held_param_elements(b->model, &b->local_params);
    if (e != NULL) return e;
    b->rss_setup_peak = proc_status_bytes("VmHWM:");
    b->rss_first_step = proc_status_bytes("VmRSS:");
    if (b->rss_setup_peak < 0 || b->rss_first_step < 0)
        return fulmen_error_new(FULMEN_CODE_IO, "fsdp_memory: cannot read VmHWM / VmRSS from /proc/self/status");
    b->hwm_reset = reset_peak_rss();
    b->measured = true;
    return NULL;
}

/* Logits [B, SEQ, VOCAB] of ids [B, SEQ], each block under the causal mask. */
static fulmen_error *logits_of(const bench *b, const fulmen_tensor *ids, fulmen_tensor **out) {
    fulmen_tensor *h = NULL, *normed = NULL;
    fulmen_error *e = fulmen_model_forward_child(b->model, "tok", ids, &h);
    for (int i = 0; e == NULL && i < LAYERS; i++) {
        char path[32];
        snprintf(path, sizeof path, "blocks.%d", i);
        const fulmen_tensor *in[2] = {h, b->mask};
        fulmen_tensor *next = NULL;
        size_t count = 0;
        e = fulmen_model_forward_multi(b->model, path, in, 2, &next, 1, &count);
        fulmen_tensor_free(h);
        h = next;
    }
    if (e == NULL) e = fulmen_model_forward_child(b->model, "ln", h, &normed);
    if (e == NULL) e = fulmen_model_forward_child(b->model, "head", normed, out);
    fulmen_tensor_free(h);
    fulmen_tensor_free(normed);
    return e;
}

/* Mean next-token cross-entropy of batch = [x, y], both [B, SEQ]. */
static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    bench *b = ud;
    fulmen_error *e = b->measured ? NULL : measure_first_step(b);
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *flat = NULL, *targets = NULL;
    const int64_t rows[2] = {-1, VOCAB}, all[1] = {-1};
    if (e == NULL) e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = logits_of(b, x, &logits);
    if (e == NULL) e = fulmen_tensor_reshape(logits, rows, 2, &flat);
    if (e == NULL) e = fulmen_tensor_reshape(y, all, 1, &targets);
    if (e == NULL) e = fulmen_loss_cross_entropy(flat, targets, FULMEN_REDUCTION_MEAN, out);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(logits);
    fulmen_tensor_free(flat);
    fulmen_tensor_free(targets);
    return e;
}

/* A step's wall time, on_train_batch_start to on_train_batch_end, and the
 * peak RSS after it. */
static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    bench *b = ud;
    if (hook == FULMEN_HOOK_TRAIN_BATCH_START) {
        b->batch_start = now();
    } else if (hook == FULMEN_HOOK_TRAIN_BATCH_END) {
        if (b->n_durations < b->steps) b->durations[b->n_durations++] = now() - b->batch_start;
        b->rss_train_peak = proc_status_bytes("VmHWM:");
    }
    return NULL;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    bench *b = ud;
    fulmen_adam_options o = fulmen_adamw_options_default();
    o.lr = LR;
    fulmen_optimizer *adamw = NULL;
    fulmen_error *e = fulmen_optimizer_adamw_new(b->model, NULL, 0, &o, &adamw);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, adamw, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(adamw);
    return e;
}

/* Adds the layer `made` just wrote to *layer to `parent` under `name`. */
static void add(fulmen_model *parent, const char *name, fulmen_error *made, fulmen_model **layer) {
    check(made, name);
    check(fulmen_model_add(parent, name, *layer), name);
    *layer = NULL;
}

/* tok -> blocks.0..11 -> ln -> head, seeded. */
static fulmen_model *build_model(void) {
    fulmen_model *m = NULL, *l = NULL, *blocks = NULL;
    check(fulmen_manual_seed(SEED), "seeding");
    check(fulmen_model_named_new(&m), "creating the model");
    add(m, "tok", fulmen_model_embedding_new(VOCAB, D_MODEL, &l), &l);
    check(fulmen_model_sequential_new(&blocks), "creating the blocks");
    fulmen_transformer_options o = fulmen_transformer_options_default();
    o.dim_feedforward = FFN;
    o.dropout = 0.0;
    o.activation = FULMEN_ACTIVATION_GELU;
    o.batch_first = true;
    o.norm_first = true;
    for (int i = 0; i < LAYERS; i++) {
        check(fulmen_model_transformer_encoder_layer_new(D_MODEL, HEADS, &o, &l), "creating a block");
        check(fulmen_model_push(blocks, l), "adding a block");
        l = NULL;
    }
    add(m, "blocks", NULL, &blocks);
    const int64_t shape[1] = {D_MODEL};
    add(m, "ln", fulmen_model_layer_norm_new(shape, 1, 1e-5, &l), &l);
    add(m, "head", fulmen_model_linear_new(D_MODEL, VOCAB, true, &l), &l);
    return m;
}

/* xorshift64*: the token generator, the same on every rank. */
static uint64_t next_random(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* `count` sequences of random ids: x [count, SEQ] and y, x shifted by one. */
static fulmen_dataset *token_data(size_t count) {
    size_t cells = count * SEQ;
    int64_t *x = malloc(cells * sizeof *x), *y = malloc(cells * sizeof *y);
    if (x == NULL || y == NULL) {
        fprintf(stderr, "fsdp_memory: out of memory for the data\n");
        exit(1);
    }
    uint64_t state = 0x9E3779B97F4A7C15ull + SEED;
    for (size_t i = 0; i < count; i++) {
        int64_t prev = (int64_t)(next_random(&state) % VOCAB);
        for (size_t j = 0; j < SEQ; j++) {
            int64_t id = (int64_t)(next_random(&state) % VOCAB);
            x[i * SEQ + j] = prev;
            y[i * SEQ + j] = id;
            prev = id;
        }
    }
    const int64_t shape[2] = {(int64_t)count, SEQ};
    fulmen_tensor *tx = NULL, *ty = NULL;
    check(fulmen_tensor_from_data(x, cells * sizeof *x, FULMEN_DTYPE_I64, shape, 2, &tx), "inputs");
    check(fulmen_tensor_from_data(y, cells * sizeof *y, FULMEN_DTYPE_I64, shape, 2, &ty), "targets");
    free(x);
    free(y);
    const fulmen_tensor *parts[2] = {tx, ty};
    fulmen_dataset *ds = NULL;
    check(fulmen_dataset_from_tensors(parts, 2, &ds), "dataset");
    fulmen_tensor_free(tx);
    fulmen_tensor_free(ty);
    return ds;
}

/* A bool [SEQ, SEQ] mask, true where a query would see a later key. */
static fulmen_tensor *causal_mask(void) {
    const int64_t shape[2] = {SEQ, SEQ};
    fulmen_tensor *ones = NULL, *mask = NULL;
    check(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_BOOL, &ones), "mask");
    check(fulmen_tensor_triu(ones, 1, &mask), "mask");
    fulmen_tensor_free(ones);
    return mask;
}

static fulmen_trainer *make_trainer(const choice *c, int64_t steps) {
    fulmen_trainer_options *o = NULL;
    check(fulmen_trainer_options_new(&o), "options");
    check(fulmen_trainer_options_set(o, "accelerator", "cpu"), "accelerator");
    check(fulmen_trainer_options_set(o, "strategy", c->strategy), "strategy");
    if (c->sharding != NULL) {
        check(fulmen_trainer_options_set(o, "fsdp_sharding_strategy", c->sharding), "fsdp_sharding_strategy");
        check(fulmen_trainer_options_set(o, "fsdp_auto_wrap_policy", "TransformerEncoderLayer"),
              "fsdp_auto_wrap_policy");
        check(fulmen_trainer_options_set(o, "fsdp_backward_prefetch", c->backward_prefetch),
              "fsdp_backward_prefetch");
        check(fulmen_trainer_options_set_bool(o, "fsdp_forward_prefetch", c->forward_prefetch),
              "fsdp_forward_prefetch");
    }
    if (c->checkpointed) {
        check(fulmen_trainer_options_set(o, "fsdp_activation_checkpointing_policy", "TransformerEncoderLayer"),
              "fsdp_activation_checkpointing_policy");
    }
    check(fulmen_trainer_options_set(o, "devices", "4"), "devices");
    check(fulmen_trainer_options_set_int(o, "max_epochs", 1), "max_epochs");
    check(fulmen_trainer_options_set_int(o, "max_steps", steps), "max_steps");
    check(fulmen_trainer_options_set(o, "logger", "false"), "logger");
    check(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false), "enable_checkpointing");
    check(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false), "enable_progress_bar");
    check(fulmen_trainer_options_set_bool(o, "enable_model_summary", false), "enable_model_summary");
    check(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0), "num_sanity_val_steps");
    fulmen_trainer *t = NULL;
    check(fulmen_trainer_new(o, &t), "trainer");
    fulmen_trainer_options_free(o);
    return t;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n] (sorts it); n > 0. */
static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, by_value);
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const choice *parse_choice(const char *name) {
    for (size_t i = 0; i < sizeof CHOICES / sizeof *CHOICES; i++) {
        if (strcmp(CHOICES[i].name, name) == 0) return &CHOICES[i];
    }
    return NULL;
}

int main(int argc, char **argv) {
    const choice *c = argc == 3 ? parse_choice(argv[1]) : NULL;
    char *end = NULL;
    long steps = argc == 3 ? strtol(argv[2], &end, 10) : 0;
    if (c == NULL || end == NULL || *end != '\0' || steps < 2 || steps > MAX_STEPS) {
        fprintf(stderr,
                "usage: fsdp_memory ddp|fsdp_full|fsdp_full_no_prefetch|fsdp_full_forward_prefetch|fsdp_grad_op|"
                "fsdp_full_checkpointed|fsdp_full_meta STEPS   (STEPS 2..%d)\n",
                MAX_STEPS);
        return 2;
    }
    /* One intra-op thread here and in the ranks the launcher starts
     * (without OMP_NUM_THREADS it would give each rank cores / 4). */
    if (setenv("OMP_NUM_THREADS", "1", 1) != 0) {
        perror("fsdp_memory: setenv");
        return 1;
    }
    check(fulmen_set_num_threads(1), "threads");

    bench b;
    memset(&b, 0, sizeof b);
    b.steps = steps;
    b.rss_train_peak = -1;
    b.durations = calloc((size_t)steps, sizeof *b.durations);
    if (b.durations == NULL) {
        fprintf(stderr, "fsdp_memory: out of memory\n");
        return 1;
    }
    fulmen_dataset *ds = token_data((size_t)(WORLD * BATCH) * (size_t)steps);
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = BATCH;
    lo.shuffle = false;
    fulmen_loader *loader = NULL;
    check(fulmen_loader_new(ds, &lo, &loader), "loader");
    b.mask = causal_mask();

    int64_t rss_before = proc_status_bytes("VmRSS:");
    if (rss_before < 0) {
        fprintf(stderr, "fsdp_memory: cannot read VmRSS from /proc/self/status\n");
        return 1;
    }
    /* On the meta device, each unit gets its values as it is sharded. */
    if (c->meta) check(fulmen_meta_init_begin(), "meta-init scope");
    b.model = build_model();
    if (c->meta) check(fulmen_meta_init_end(), "meta-init scope");
    int64_t params = 0;
    check(fulmen_model_num_parameters(b.model, &params), "counting parameters");

    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &b;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, b.model, &module), "module");
    fulmen_trainer *trainer = make_trainer(c, steps);
    check(fulmen_trainer_fit(trainer, module, loader, NULL, NULL), "fit");
    int64_t hwm_end = proc_status_bytes("VmHWM:");
    size_t rank = 0, world = 0;
    check(fulmen_distributed_ranks(&rank, NULL, &world), "ranks");
    if (!b.measured || b.n_durations < 2 || hwm_end < 0) {
        fprintf(stderr, "fsdp_memory: rank %zu: %lld steps timed (2 or more needed), VmHWM %s\n", rank,
                (long long)b.n_durations, hwm_end < 0 ? "unreadable" : "read");
        return 1;
    }
    double step_seconds = median(b.durations + 1, (size_t)(b.n_durations - 1));
    int64_t peak = hwm_end > b.rss_setup_peak ? hwm_end : b.rss_setup_peak;

    fulmen_trainer_free(trainer);
    fulmen_lightning_module_free(module);
    fulmen_model_free(b.model);
    fulmen_tensor_free(b.mask);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    free(b.durations);

    printf("{\"strategy\": \"%s\", \"rank\": %zu, \"world\": %zu, \"params\": %lld, \"local_params\": %lld, "
           "\"state_bytes\": %lld, \"rss_before_model_bytes\": %lld, \"rss_setup_peak_bytes\": %lld, "
           "\"rss_first_step_bytes\": %lld, \"rss_train_peak_bytes\": %lld, \"hwm_reset\": %s, "
           "\"rss_peak_bytes\": %lld, \"step_seconds\": %.6f, \"steps\": %lld}\n",
           c->name, rank, world, (long long)params, (long long)b.local_params, (long long)(b.local_params * 4 * 4),
           (long long)rss_before, (long long)b.rss_setup_peak, (long long)b.rss_first_step,
           (long long)b.rss_train_peak, b.hwm_reset ? "true" : "false", (long long)peak, step_seconds,
           (long long)(b.n_durations - 1));
    fflush(stdout);
    /* Rank 0 waits for the ranks it started. */
    check(fulmen_distributed_shutdown(300), "shutdown");
    size_t live = fulmen_live_handles();
    if (live != 0) {
        fprintf(stderr, "fsdp_memory: rank %zu: %zu fulmen handles still live at exit\n", rank, live);
        return 1;
    }
    return 0;
}

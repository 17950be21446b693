/*
 * The fulmen contenders of bench/workloads.py: fulmen's Trainer.fit driven
 * from C on one of the workloads of bench/python/workload_models.py, built
 * here from fulmen's own layers with the same shapes:
 *
 *   mlp       Linear(784, 1024) -> ReLU -> Linear(1024, 10), batch 64
 *   cnn       bench/PROTOCOL.md's CNN on (N, 1, 28, 28), batch 64
 *   chargpt   a GPT of examples/c/charlm.c's shape (2 pre-norm blocks,
 *             d_model 64, 4 heads, context 64, vocabulary 96), built as
 *             gpt2 is (tied head, no dropout), batch 32
 *   gpt2      GPT-2 small: 12 pre-norm blocks, d_model 768, 12 heads,
 *             context 1024, vocabulary 50304, the head tied to the token
 *             embedding (124M parameters), batch 8
 *   resnet18  ResNet-18 for 32x32 images (3x3 stem, no max-pool), 10
 *             classes, batch 256
 *
 * The transformers use causal layers (fulmen_transformer_options.causal:
 * SDPA's is_causal, flash kernels on CUDA). `--size tiny` shrinks gpt2 and
 * resnet18 for a run on the CPU (the harness's own test). The data are
 * --batches fixed batches from a counter hash (bench/python/
 * workload_models.py's `batches`), in order, no shuffling. Optimizers: SGD
 * lr 0.05 (mlp, cnn), SGD momentum 0.9 lr 0.1 weight decay 5e-4
 * (resnet18), AdamW (chargpt lr 3e-3, gpt2 lr 6e-4), fused on CUDA.
 * `--precision` is the trainer's (the harness passes bf16-mixed for gpt2
 * and resnet18). `--cuda-graphs 1` is the "fulmen-c-graphs" contender
 * (fused updates then on any device). `--accelerator npu` trains on
 * fulmen's fake device, where graphs are captured and replayed as on CUDA:
 * bench/workloads.py's test runs each workload there with graphs.
 *
 * Prints bench/PROTOCOL.md's lines, one per measured epoch; on CUDA each
 * epoch's clock starts and stops after the device's queued work is done
 * (fulmen_device_synchronize), and the done line carries the allocator's
 * peak ("peak_bytes": allocated_bytes.all.peak of
 * fulmen_accelerator_device_stats, torch.cuda.max_memory_allocated).
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
        fprintf(stderr, "workload_bench: %s: %s\n", what, fulmen_error_message(err));
        fulmen_error_free(err);
        exit(1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The shapes of a workload. */
typedef struct {
    int64_t batch;
    int64_t vocab, context, d_model, heads, layers; /* the GPTs */
    int64_t width;                                  /* resnet18's first width */
} shape;

typedef enum { MLP, CNN, CHARGPT, GPT2, RESNET18 } kind;

typedef struct {
    kind kind;
    const char *workload;
    shape s;
    fulmen_model *model;
    /* The GPTs' token and position tables, taken once the model is on its
     * device (on_train_start): the tied head and the positions use them. */
    fulmen_tensor *wte, *wpe;
    bool on_gpu, graphs;
    long warmup;
    double started;
    long steps;
} bench;

static void *checked_malloc(size_t n) {
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "workload_bench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* The counter hash of workload_models.py: the same values in both. */
static uint32_t hash32(uint64_t i) {
    uint32_t x = (uint32_t)(i * 2654435761u + 12345u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return x;
}

static float unit(uint64_t i) { return (float)(hash32(i) >> 8) / 16777216.0f - 0.5f; }

static fulmen_error *forward_gpt(const bench *b, const fulmen_tensor *ids, fulmen_tensor **logits) {
    fulmen_tensor *tok = NULL, *h = NULL, *blocks = NULL, *normed = NULL, *wte_t = NULL;
    fulmen_error *e = fulmen_model_forward_child(b->model, "tok", ids, &tok);
    /* Every window is `context` long: the position table is added whole. */
    if (e == NULL) e = fulmen_tensor_add(tok, b->wpe, &h);
    if (e == NULL) e = fulmen_model_forward_child(b->model, "blocks", h, &blocks);
    if (e == NULL) e = fulmen_model_forward_child(b->model, "ln", blocks, &normed);
    /* The head is the token embedding, transposed (GPT-2's tied weights). */
    if (e == NULL) e = fulmen_tensor_transpose(b->wte, 0, 1, &wte_t);
    if (e == NULL) e = fulmen_tensor_matmul(normed, wte_t, logits);
    fulmen_tensor *all[] = {tok, h, blocks, normed, wte_t};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    return e;
}

static fulmen_error *run_child(const fulmen_model *m, const char *path, fulmen_tensor **x) {
    fulmen_tensor *y = NULL;
    fulmen_error *e = fulmen_model_forward_child(m, path, *x, &y);
    fulmen_tensor_free(*x);
    *x = y;
    return e;
}

static fulmen_error *relu_in(fulmen_tensor **x) {
    fulmen_tensor *y = NULL;
    fulmen_error *e = fulmen_tensor_relu(*x, &y);
    fulmen_tensor_free(*x);
    *x = y;
    return e;
}

/* One BasicBlock "layerL.B": conv, bn, relu, conv, bn, plus the shortcut
 * (a 1x1 conv and bn where the shape changes), relu. */
static fulmen_error *basic_block(const bench *b, const char *name, bool downsample, fulmen_tensor **x) {
    char path[64];
    fulmen_tensor *h = NULL, *skip = NULL, *sum = NULL;
    fulmen_error *e = NULL;
    snprintf(path, sizeof path, "%s.conv1", name);
    e = fulmen_model_forward_child(b->model, path, *x, &h);
    const char *rest[] = {"bn1", NULL, "conv2", "bn2"};
    for (size_t i = 0; e == NULL && i < 4; i++) {
        if (rest[i] == NULL) {
            e = relu_in(&h);
            continue;
        }
        snprintf(path, sizeof path, "%s.%s", name, rest[i]);
        e = run_child(b->model, path, &h);
    }
    if (e == NULL && downsample) {
        snprintf(path, sizeof path, "%s.shortcut.0", name);
        e = fulmen_model_forward_child(b->model, path, *x, &skip);
        snprintf(path, sizeof path, "%s.shortcut.1", name);
        if (e == NULL) e = run_child(b->model, path, &skip);
    }
    if (e == NULL) e = fulmen_tensor_add(h, skip != NULL ? skip : *x, &sum);
    if (e == NULL) e = relu_in(&sum);
    fulmen_tensor_free(h);
    fulmen_tensor_free(skip);
    fulmen_tensor_free(*x);
    *x = sum;
    return e;
}

static fulmen_error *forward_resnet(const bench *b, const fulmen_tensor *images, fulmen_tensor **logits) {
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_model_forward_child(b->model, "conv1", images, &x);
    if (e == NULL) e = run_child(b->model, "bn1", &x);
    if (e == NULL) e = relu_in(&x);
    for (int layer = 1; e == NULL && layer <= 4; layer++) {
        for (int block = 0; e == NULL && block < 2; block++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", layer, block);
            e = basic_block(b, name, layer > 1 && block == 0, &x);
        }
    }
    if (e == NULL) e = run_child(b->model, "pool", &x);
    if (e == NULL) e = run_child(b->model, "flatten", &x);
    if (e == NULL) e = fulmen_model_forward_child(b->model, "fc", x, logits);
    fulmen_tensor_free(x);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    bench *b = ud;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *flat = NULL, *targets = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) {
        switch (b->kind) {
        case CHARGPT:
        case GPT2: e = forward_gpt(b, x, &logits); break;
        case RESNET18: e = forward_resnet(b, x, &logits); break;
        default: e = fulmen_model_forward(b->model, x, &logits); break;
        }
    }
    if (e == NULL && (b->kind == CHARGPT || b->kind == GPT2)) {
        const int64_t rows[2] = {-1, b->s.vocab}, all[1] = {-1};
        e = fulmen_tensor_reshape(logits, rows, 2, &flat);
        if (e == NULL) e = fulmen_tensor_reshape(y, all, 1, &targets);
        if (e == NULL) e = fulmen_loss_cross_entropy(flat, targets, FULMEN_REDUCTION_MEAN, out);
    } else if (e == NULL) {
        e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    }
    fulmen_tensor *all[] = {x, y, logits, flat, targets};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    bench *b = ud;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = NULL;
    if (b->kind == CHARGPT || b->kind == GPT2) {
        fulmen_adam_options o = fulmen_adamw_options_default();
        o.lr = b->kind == GPT2 ? 6e-4 : 3e-3;
        e = fulmen_optimizer_adamw_new(b->model, NULL, 0, &o, &opt);
    } else {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.05;
        if (b->kind == RESNET18) {
            o.lr = 0.1;
            o.momentum = 0.9;
            o.weight_decay = 5e-4;
        }
        e = fulmen_optimizer_sgd_new(b->model, NULL, 0, &o, &opt);
    }
    if (e == NULL && (b->on_gpu || b->graphs)) e = fulmen_optimizer_set_fused(opt, true);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static const char *contender(const bench *b) { return b->graphs ? "fulmen-c-graphs" : "fulmen-c"; }

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    bench *b = ud;
    /* Counted here: a replayed graph does not call training_step. */
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END) b->steps++;
    if (hook == FULMEN_HOOK_TRAIN_START && (b->kind == CHARGPT || b->kind == GPT2)) {
        fulmen_tensor_free(b->wte);
        fulmen_tensor_free(b->wpe);
        b->wte = b->wpe = NULL;
        /* Made in a hook, so kept past its return (fulmen_tensor_keep). */
        fulmen_error *e = fulmen_model_state_dict_get(b->model, "tok.weight", &b->wte);
        if (e == NULL) e = fulmen_tensor_keep(b->wte);
        if (e == NULL) e = fulmen_model_state_dict_get(b->model, "pos.weight", &b->wpe);
        if (e == NULL) e = fulmen_tensor_keep(b->wpe);
        return e;
    }
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_START && hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    fulmen_error *e = b->on_gpu ? fulmen_device_synchronize(FULMEN_DEVICE_TYPE_CUDA, 0) : NULL;
    if (e != NULL) return e;
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_START) {
        b->steps = 0;
        b->started = now();
        return NULL;
    }
    double seconds = now() - b->started;
    int64_t epoch = 0;
    e = fulmen_hook_context_epoch(ctx, &epoch);
    if (e == NULL && epoch >= b->warmup)
        printf("{\"contender\": \"%s\", \"workload\": \"%s\", \"epoch\": %lld, \"seconds\": %.6f, \"steps\": %ld}\n",
               contender(b), b->workload, (long long)epoch, seconds, b->steps);
    fflush(stdout);
    return e;
}

/* Adds the layer `made` wrote to *layer (read after the call: C leaves the
 * order of argument evaluation open). */
static void add(fulmen_model *parent, const char *name, fulmen_error *made, fulmen_model **layer) {
    check(made, name);
    check(fulmen_model_add(parent, name, *layer), name);
}

static void push(fulmen_model *m, fulmen_error *made, fulmen_model **l) {
    check(made, "layer");
    check(fulmen_model_push(m, *l), "push");
}

static fulmen_model *build_gpt(const shape *s) {
    fulmen_model *m = NULL, *blocks = NULL, *l = NULL;
    check(fulmen_model_named_new(&m), "model");
    add(m, "tok", fulmen_model_embedding_new(s->vocab, s->d_model, &l), &l);
    add(m, "pos", fulmen_model_embedding_new(s->context, s->d_model, &l), &l);
    check(fulmen_model_sequential_new(&blocks), "blocks");
    fulmen_transformer_options o = fulmen_transformer_options_default();
    o.dim_feedforward = 4 * s->d_model;
    o.dropout = 0;
    o.activation = FULMEN_ACTIVATION_GELU;
    o.batch_first = true;
    o.norm_first = true;
    o.causal = true;
    for (int64_t i = 0; i < s->layers; i++)
        push(blocks, fulmen_model_transformer_encoder_layer_new(s->d_model, s->heads, &o, &l), &l);
    add(m, "blocks", NULL, &blocks);
    const int64_t d[1] = {s->d_model};
    add(m, "ln", fulmen_model_layer_norm_new(d, 1, 1e-5, &l), &l);
    return m;
}

static fulmen_model *conv_bn(int64_t in, int64_t out, int64_t kernel, int64_t stride, fulmen_model **bn) {
    fulmen_conv2d_options c = fulmen_conv2d_options_default(kernel);
    c.stride[0] = c.stride[1] = stride;
    c.padding[0] = c.padding[1] = kernel / 2;
    c.bias = false;
    fulmen_model *conv = NULL;
    check(fulmen_model_conv2d_new(in, out, &c, &conv), "conv");
    check(fulmen_model_batch_norm_new(out, 1e-5, 0.1, bn), "bn");
    return conv;
}

static fulmen_model *build_resnet(const shape *s) {
    fulmen_model *m = NULL, *l = NULL, *conv = NULL, *bn = NULL;
    check(fulmen_model_named_new(&m), "model");
    int64_t w = s->width;
    conv = conv_bn(3, w, 3, 1, &bn);
    add(m, "conv1", NULL, &conv);
    add(m, "bn1", NULL, &bn);
    int64_t in = w;
    for (int layer = 1; layer <= 4; layer++) {
        int64_t out = w << (layer - 1);
        fulmen_model *group = NULL;
        check(fulmen_model_named_new(&group), "layer");
        for (int block = 0; block < 2; block++) {
            int64_t stride = layer > 1 && block == 0 ? 2 : 1;
            fulmen_model *blk = NULL;
            check(fulmen_model_named_new(&blk), "block");
            conv = conv_bn(in, out, 3, stride, &bn);
            add(blk, "conv1", NULL, &conv);
            add(blk, "bn1", NULL, &bn);
            conv = conv_bn(out, out, 3, 1, &bn);
            add(blk, "conv2", NULL, &conv);
            add(blk, "bn2", NULL, &bn);
            if (stride != 1 || in != out) {
                fulmen_model *shortcut = NULL;
                check(fulmen_model_sequential_new(&shortcut), "shortcut");
                conv = conv_bn(in, out, 1, stride, &bn);
                push(shortcut, NULL, &conv);
                push(shortcut, NULL, &bn);
                add(blk, "shortcut", NULL, &shortcut);
            }
            char name[8];
            snprintf(name, sizeof name, "%d", block);
            add(group, name, NULL, &blk);
            in = out;
        }
        char name[16];
        snprintf(name, sizeof name, "layer%d", layer);
        add(m, name, NULL, &group);
    }
    const int64_t one[2] = {1, 1};
    add(m, "pool", fulmen_model_adaptive_avg_pool_new(one, 2, &l), &l);
    add(m, "flatten", fulmen_model_flatten_new(1, -1, &l), &l);
    add(m, "fc", fulmen_model_linear_new(in, 10, true, &l), &l);
    return m;
}

static fulmen_model *build_plain(kind k) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "model");
    if (k == CNN) {
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
        push(m, fulmen_model_linear_new(784, 1024, true, &l), &l);
        push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), &l);
        push(m, fulmen_model_linear_new(1024, 10, true, &l), &l);
    }
    return m;
}

/* --batches fixed batches: inputs and targets from the counter hash, as
 * workload_models.py's `batches` makes them. */
static fulmen_dataset *make_data(const bench *b, int64_t batches) {
    const shape *s = &b->s;
    int64_t n = batches * s->batch;
    fulmen_tensor *x = NULL, *y = NULL;
    if (b->kind == CHARGPT || b->kind == GPT2) {
        int64_t t = s->context, count = n * t;
        int64_t *ids = checked_malloc((size_t)(count + 1) * sizeof *ids);
        for (int64_t i = 0; i <= count; i++) ids[i] = (int64_t)(hash32((uint64_t)i) % (uint32_t)s->vocab);
        int64_t *next = checked_malloc((size_t)count * sizeof *next);
        memcpy(next, ids + 1, (size_t)count * sizeof *next);
        const int64_t d[2] = {n, t};
        check(fulmen_tensor_from_data(ids, (size_t)count * sizeof *ids, FULMEN_DTYPE_I64, d, 2, &x), "inputs");
        check(fulmen_tensor_from_data(next, (size_t)count * sizeof *next, FULMEN_DTYPE_I64, d, 2, &y), "targets");
        free(ids);
        free(next);
    } else {
        int64_t d4[4] = {n, 1, 28, 28}, d2[2] = {n, 784}, d1[1] = {n};
        if (b->kind == RESNET18) d4[1] = 3, d4[2] = d4[3] = 32;
        const int64_t *dims = b->kind == MLP ? d2 : d4;
        size_t ndim = b->kind == MLP ? 2 : 4, count = 1;
        for (size_t i = 0; i < ndim; i++) count *= (size_t)dims[i];
        float *pixels = checked_malloc(count * sizeof *pixels);
        for (size_t i = 0; i < count; i++) pixels[i] = unit(i);
        int64_t *labels = checked_malloc((size_t)n * sizeof *labels);
        for (int64_t i = 0; i < n; i++) labels[i] = (int64_t)(hash32((uint64_t)i + 7777777u) % 10u);
        check(fulmen_tensor_from_data(pixels, count * sizeof *pixels, FULMEN_DTYPE_F32, dims, ndim, &x), "inputs");
        check(fulmen_tensor_from_data(labels, (size_t)n * sizeof *labels, FULMEN_DTYPE_I64, d1, 1, &y), "targets");
        free(pixels);
        free(labels);
    }
    const fulmen_tensor *parts[2] = {x, y};
    fulmen_dataset *ds = NULL;
    check(fulmen_dataset_from_tensors(parts, 2, &ds), "dataset");
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    return ds;
}

/* The caching allocator's peak on cuda:0 over the process
 * (torch.cuda.max_memory_allocated). */
static double cuda_peak_bytes(void) {
    fulmen_accelerator *acc = NULL;
    fulmen_device_stat stats[256];
    size_t n = 0;
    const fulmen_device d0 = {FULMEN_DEVICE_TYPE_CUDA, 0};
    check(fulmen_accelerator_get("cuda", &acc), "cuda accelerator");
    check(fulmen_accelerator_device_stats(acc, d0, stats, sizeof stats / sizeof *stats, &n), "device stats");
    fulmen_accelerator_free(acc);
    for (size_t i = 0; i < n; i++)
        if (strcmp(stats[i].name, "allocated_bytes.all.peak") == 0) return stats[i].value;
    fprintf(stderr, "workload_bench: CUDA's statistics have no allocated_bytes.all.peak\n");
    exit(1);
}

static fulmen_error *npu_count(void *ud, size_t *out) {
    (void)ud;
    return fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, out);
}

static fulmen_error *npu_parallel(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = FULMEN_DEVICE_TYPE_PRIVATE_USE1;
        out[i].index = ids[i];
    }
    return NULL;
}

/* The fake device, and the accelerator "npu" over it. */
static void register_npu(void) {
    check(fulmen_fake_device_register("npu", 1), "fake device");
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    check(fulmen_accelerator_register("npu", "fulmen's fake device", &vt, false), "npu accelerator");
}

static bool workload_of(const char *name, bool tiny, bench *b) {
    static const struct {
        const char *name;
        kind kind;
        shape full, tiny;
    } table[] = {
        {"mlp", MLP, {64, 0, 0, 0, 0, 0, 0}, {64, 0, 0, 0, 0, 0, 0}},
        {"cnn", CNN, {64, 0, 0, 0, 0, 0, 0}, {64, 0, 0, 0, 0, 0, 0}},
        {"chargpt", CHARGPT, {32, 96, 64, 64, 4, 2, 0}, {32, 96, 64, 64, 4, 2, 0}},
        {"gpt2", GPT2, {8, 50304, 1024, 768, 12, 12, 0}, {2, 512, 64, 64, 4, 2, 0}},
        {"resnet18", RESNET18, {256, 0, 0, 0, 0, 0, 64}, {8, 0, 0, 0, 0, 0, 8}},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        if (strcmp(table[i].name, name) == 0) {
            b->kind = table[i].kind;
            b->workload = table[i].name;
            b->s = tiny ? table[i].tiny : table[i].full;
            return true;
        }
    }
    return false;
}

int main(int argc, char **argv) {
    const char *workload = "mlp", *accelerator = "cpu", *precision = "32-true", *size = "full";
    long epochs = 3, warmup = 1, threads = 1, seed = 0, graphs = 0, batches = 20;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *number = strcmp(a, "--epochs") == 0    ? &epochs
                       : strcmp(a, "--warmup") == 0  ? &warmup
                       : strcmp(a, "--batches") == 0 ? &batches
                       : strcmp(a, "--threads") == 0 ? &threads
                       : strcmp(a, "--seed") == 0    ? &seed
                       : strcmp(a, "--cuda-graphs") == 0 ? &graphs
                                                         : NULL;
        const char **text = strcmp(a, "--workload") == 0      ? &workload
                            : strcmp(a, "--accelerator") == 0 ? &accelerator
                            : strcmp(a, "--precision") == 0   ? &precision
                            : strcmp(a, "--size") == 0        ? &size
                                                              : NULL;
        char *end = NULL;
        if (v != NULL && number != NULL) *number = strtol(v, &end, 10);
        if (v == NULL || (number == NULL && text == NULL) || (number != NULL && (*v == '\0' || *end != '\0'))) {
            fprintf(stderr, "workload_bench: bad argument %s%s%s\n", a, v ? " " : "", v ? v : " (no value)");
            return 2;
        }
        if (text != NULL) *text = v;
    }
    bench b = {0};
    if (!workload_of(workload, strcmp(size, "tiny") == 0, &b)) {
        fprintf(stderr, "workload_bench: unknown workload %s (mlp, cnn, chargpt, gpt2, resnet18)\n", workload);
        return 2;
    }
    if (batches < 1 || batches > 100000 || epochs < 1 || warmup < 0) {
        fprintf(stderr, "workload_bench: --batches, --epochs and --warmup out of range\n");
        return 2;
    }
    b.on_gpu = strcmp(accelerator, "cuda") == 0;
    /* "npu" is fulmen's fake device: the graphed path's check without a GPU. */
    if (strcmp(accelerator, "npu") == 0) register_npu();
    b.graphs = graphs != 0;
    b.warmup = warmup;
    check(fulmen_set_num_threads((int32_t)threads), "threads");
    check(fulmen_manual_seed((uint64_t)seed), "seed");
    b.model = b.kind == CHARGPT || b.kind == GPT2 ? build_gpt(&b.s)
              : b.kind == RESNET18               ? build_resnet(&b.s)
                                                 : build_plain(b.kind);
    fulmen_dataset *ds = make_data(&b, batches);
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)b.s.batch;
    lo.pin_memory = b.on_gpu;
    fulmen_loader *loader = NULL;
    check(fulmen_loader_new(ds, &lo, &loader), "loader");
    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &b;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, b.model, &module), "module");
    fulmen_trainer_options *o = NULL;
    check(fulmen_trainer_options_new(&o), "options");
    check(fulmen_trainer_options_set_int(o, "max_epochs", warmup + epochs), "max_epochs");
    check(fulmen_trainer_options_set(o, "accelerator", accelerator), "accelerator");
    check(fulmen_trainer_options_set(o, "devices", "1"), "devices");
    check(fulmen_trainer_options_set(o, "precision", precision), "precision");
    check(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false), "progress");
    check(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false), "checkpointing");
    check(fulmen_trainer_options_set_bool(o, "enable_model_summary", false), "summary");
    check(fulmen_trainer_options_set(o, "logger", "false"), "logger");
    check(fulmen_trainer_options_set_bool(o, "cuda_graphs", b.graphs), "cuda_graphs");
    fulmen_trainer *t = NULL;
    check(fulmen_trainer_new(o, &t), "trainer");
    check(fulmen_trainer_fit(t, module, loader, NULL, NULL), "fit");
    double peak = b.on_gpu ? cuda_peak_bytes() : -1;
    printf("{\"contender\": \"%s\", \"workload\": \"%s\", \"done\": true", contender(&b), b.workload);
    if (peak >= 0) printf(", \"peak_bytes\": %.0f", peak);
    printf("}\n");
    fflush(stdout);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_tensor_free(b.wte);
    fulmen_tensor_free(b.wpe);
    fulmen_model_free(b.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return 0;
}

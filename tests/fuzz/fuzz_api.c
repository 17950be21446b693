/*
 * Fuzz target: random sequences of C API calls. The input is a program for
 * a small interpreter: each operation byte picks a call from one API family
 * (tensors, models, data, optimizers, options / strategies / accelerators,
 * frees) and the following bytes its arguments: handles taken from a pool
 * of slots (a live handle of the right type, one of another type, a freed
 * one or NULL), shapes, dtypes, indices, lengths and option strings.
 *
 * Checked on every call: no crash or sanitizer report, an error has a known
 * code and a message (never a caught panic); at the end every handle is
 * freed and fulmen_live_handles() is back to zero.
 *
 * Built with -DFUZZ_FAMILY=<name> the target draws only from one API
 * family (plus the constructors it needs and frees): tensor, model, data,
 * optim, options or trainer (random options, then a short real fit on a
 * small data set). Without it, every family is mixed.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

#ifndef FUZZ_FAMILY
#define FUZZ_FAMILY api
#endif
#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)

const char *fuzz_target_name = FUZZ_STR(FUZZ_FAMILY);

enum kind { K_NONE, K_TENSOR, K_MODEL, K_DATASET, K_LOADER, K_OPTIONS, K_STRATEGY, K_ACCEL, K_OPTIM, K_KINDS };

#define SLOTS 12
#define STALE 8

typedef struct {
    const uint8_t *p;
    size_t n;
    void *slot[SLOTS];
    enum kind kind[SLOTS];
    void *stale[STALE]; /* freed handles, kept to be passed again */
    size_t stale_next;
    char path[64];      /* a scratch file for save / load */
    char dir[64];       /* a scratch folder for trainers */
} vm;

static uint8_t byte(vm *v) {
    if (v->n == 0) return 0;
    v->n--;
    return *v->p++;
}

/* A small signed integer, mostly in [-1, 6]; rarely one too large for any
 * allocation (so shapes made of these either fit easily or fail cleanly). */
static int64_t small(vm *v) {
    uint8_t b = byte(v);
    if (b < 200) return (int64_t)(b % 8) - 1;
    if (b < 250) return (int64_t)(b % 40) - 20;
    static const int64_t huge[] = {INT64_MAX, INT64_MIN, (int64_t)1 << 40, (int64_t)1 << 62, -((int64_t)1 << 40),
                                   (int64_t)1 << 50};
    return huge[b - 250];
}

static double real(vm *v) {
    static const double values[] = {0.0, 0.1, 1.0, -1.0, 1e-3, 10.0, 1e300, -0.0};
    uint8_t b = byte(v);
    if (b < 240) return values[b % 8];
    return b == 240 ? NAN : b == 241 ? INFINITY : -INFINITY;
}

/* A string: one of `words` or up to 12 raw input bytes. */
static const char *text(vm *v, const char *const *words, size_t nwords, char *buf, size_t cap) {
    uint8_t b = byte(v);
    if (b < 200 && nwords > 0) return words[b % nwords];
    if (b == 255) return NULL;
    size_t len = byte(v) % 13;
    if (len >= cap) len = cap - 1;
    for (size_t i = 0; i < len; i++) buf[i] = (char)(byte(v) | 1); /* no interior NUL */
    buf[len] = 0;
    return buf;
}

/* A handle argument: mostly a live handle of `want`, sometimes another
 * kind's, a freed one or NULL. */
static void *handle(vm *v, enum kind want) {
    uint8_t b = byte(v);
    switch (b >> 6) {
    case 0: return v->slot[b % SLOTS]; /* any slot: maybe the wrong type or empty */
    case 1: return v->stale[b % STALE];
    case 2:
        if ((b & 7) == 0) return NULL;
        /* fall through */
    default:
        for (size_t i = 0; i < SLOTS; i++) {
            size_t j = (b + i) % SLOTS;
            if (v->kind[j] == want) return v->slot[j];
        }
        return NULL;
    }
}

static unsigned long calls, failures;

static void remove_tree(const char *dir) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", dir);
}

void fuzz_report(void) {
    printf("fuzz %s: %lu calls, %lu succeeded, %lu gave an error\n", fuzz_target_name, calls, calls - failures,
           failures);
}

static void check_error(fulmen_error *e) {
    calls++;
    if (e == NULL) return;
    failures++;
    int32_t code = fulmen_error_code(e);
    const char *msg = fulmen_error_message(e);
    /* A caught Rust panic is a bug too: every bad input needs its own error. */
    if (code < 1 || code > FULMEN_CODE_OUT_OF_MEMORY || code == FULMEN_CODE_PANIC || msg == NULL || msg[0] == 0) {
        fprintf(stderr, "fuzz api: bad error (code %d, message %s)\n", code, msg ? msg : "(null)");
        abort();
    }
    fulmen_error_free(e);
}

static void release(void *h, enum kind k) {
    switch (k) {
    case K_TENSOR: fulmen_tensor_free(h); break;
    case K_MODEL: fulmen_model_free(h); break;
    case K_DATASET: fulmen_dataset_free(h); break;
    case K_LOADER: fulmen_loader_free(h); break;
    case K_OPTIONS: fulmen_trainer_options_free(h); break;
    case K_STRATEGY: fulmen_strategy_free(h); break;
    case K_ACCEL: fulmen_accelerator_free(h); break;
    case K_OPTIM: fulmen_optimizer_free(h); break;
    default: break;
    }
}

/* Stores a new handle in slot `i` (freeing what was there). */
static void keep(vm *v, uint8_t i, void *h, enum kind k) {
    if (h == NULL) return;
    i %= SLOTS;
    release(v->slot[i], v->kind[i]);
    v->slot[i] = h;
    v->kind[i] = k;
}

/* Frees slot `i` and remembers the dangling pointer. */
static void drop(vm *v, uint8_t i) {
    i %= SLOTS;
    if (v->slot[i] == NULL) return;
    release(v->slot[i], v->kind[i]);
    v->stale[v->stale_next++ % STALE] = v->slot[i];
    v->slot[i] = NULL;
    v->kind[i] = K_NONE;
}

static size_t shape(vm *v, int64_t *dims) {
    size_t nd = byte(v) % 4;
    for (size_t i = 0; i < nd; i++) dims[i] = small(v);
    return nd;
}

static void op_tensor_new(vm *v) {
    int64_t dims[4];
    size_t nd = shape(v, dims);
    int32_t dtype = (int32_t)small(v) + 1;
    uint8_t to = byte(v), how = byte(v) % 3;
    fulmen_tensor *t = NULL;
    if (how == 0) {
        check_error(fulmen_tensor_zeros(dims, nd, dtype, &t));
    } else if (how == 1) {
        check_error(fulmen_tensor_randn(dims, nd, dtype, &t));
    } else {
        uint8_t data[64];
        size_t nbytes = byte(v) % sizeof data;
        for (size_t i = 0; i < nbytes; i++) data[i] = byte(v);
        check_error(fulmen_tensor_from_data(data, nbytes, dtype, dims, nd, &t));
    }
    keep(v, to, t, K_TENSOR);
}

static void op_tensor_math(vm *v) {
    fulmen_tensor *a = handle(v, K_TENSOR), *b = handle(v, K_TENSOR), *out = NULL;
    uint8_t which = byte(v) % 8, to = byte(v);
    int64_t dims[4];
    switch (which) {
    case 0: check_error(fulmen_tensor_add(a, b, &out)); break;
    case 1: check_error(fulmen_tensor_mul(a, b, &out)); break;
    case 2: check_error(fulmen_tensor_matmul(a, b, &out)); break;
    case 3: {
        size_t nd = shape(v, dims);
        check_error(fulmen_tensor_reshape(a, dims, nd, &out));
        break;
    }
    case 4: check_error(fulmen_tensor_softmax(a, small(v), &out)); break;
    case 5: {
        int64_t d = small(v), s = small(v), l = small(v);
        check_error(fulmen_tensor_narrow(a, d, s, l, &out));
        break;
    }
    case 6: {
        const fulmen_tensor *parts[3] = {a, b, handle(v, K_TENSOR)};
        size_t n = byte(v) % 4;
        check_error(fulmen_tensor_cat(n ? parts : NULL, n, small(v), &out));
        break;
    }
    default: {
        size_t nd = shape(v, dims);
        check_error(fulmen_tensor_sum_dims(a, dims, nd, byte(v) & 1, &out));
    }
    }
    keep(v, to, out, K_TENSOR);
}

/* The table-generated ops: one, two and many results, with handles of any
 * kind, small and huge integers, odd reals and dims lists. */
static void op_tensor_generated(vm *v) {
    fulmen_tensor *a = handle(v, K_TENSOR), *b = handle(v, K_TENSOR), *c = handle(v, K_TENSOR);
    fulmen_tensor *out = NULL, *second = NULL, *pieces[4] = {NULL, NULL, NULL, NULL};
    uint8_t which = byte(v) % 12, to = byte(v);
    int64_t dims[4];
    size_t nd = shape(v, dims), count = 0;
    fulmen_error *e = NULL;
    switch (which) {
    case 0: check_error(fulmen_tensor_where(a, b, c, &out)); break;
    case 1: check_error(fulmen_tensor_masked_fill(a, b, real(v), &out)); break;
    case 2: check_error(fulmen_tensor_topk(a, small(v), small(v), byte(v) & 1, byte(v) & 1, &out, &second)); break;
    case 3: check_error(fulmen_tensor_sort(a, small(v), byte(v) & 1, byte(v) & 1, &out, &out)); break;
    case 4:
        e = fulmen_tensor_chunk(a, small(v), small(v), pieces, byte(v) % 5, &count);
        if (e == NULL)
            for (size_t i = 0; i < count; i++) fulmen_tensor_free(pieces[i]);
        check_error(e);
        break;
    case 5: {
        /* a huge expanded view is valid and costs nothing, but every later
         * reduction over it would run for hours: keep views small */
        double n = 1;
        for (size_t i = 0; i < nd; i++) n *= fabs((double)dims[i]);
        if (n <= 4096) check_error(fulmen_tensor_expand(a, dims, nd, &out));
        break;
    }
    case 6: check_error(fulmen_tensor_scatter_add(a, small(v), b, c, &out)); break;
    case 7: {
        const fulmen_tensor *parts[3] = {a, b, c};
        const char *eqs[] = {"ij,jk->ik", "i,i->", "...ij->...ji", "ij;", "", "bij,bjk->bik"};
        size_t n = byte(v) % 4;
        check_error(fulmen_tensor_einsum(eqs[byte(v) % 6], n ? parts : NULL, n, &out));
        break;
    }
    case 8:
        check_error(fulmen_tensor_scaled_dot_product_attention(a, b, c, byte(v) & 1 ? handle(v, K_TENSOR) : NULL,
                                                               real(v), byte(v) & 1, real(v), &out));
        break;
    case 9: check_error(fulmen_tensor_logsumexp(a, dims, nd, byte(v) & 1, &out)); break;
    case 10:
        check_error(fulmen_loss_cross_entropy_with_options(a, b, byte(v) & 1 ? c : NULL, small(v), real(v),
                                                           (int32_t)small(v), &out));
        break;
    default: check_error(fulmen_loss_ctc(a, b, c, handle(v, K_TENSOR), small(v), byte(v) & 1, (int32_t)small(v), &out));
    }
    fulmen_tensor_free(second);
    keep(v, to, out, K_TENSOR);
}

static void op_tensor_query(vm *v) {
    fulmen_tensor *a = handle(v, K_TENSOR), *out = NULL;
    uint8_t which = byte(v) % 9, to = byte(v);
    int64_t dims[4];
    size_t n = 0;
    double d = 0;
    int32_t dtype = 0;
    bool flag = false;
    uint8_t buf[64];
    switch (which) {
    case 0: check_error(fulmen_tensor_item(a, &d)); break;
    case 1: check_error(fulmen_tensor_shape(a, dims, byte(v) % 5, &n)); break;
    case 2: check_error(fulmen_tensor_numel(a, &n)); break;
    case 3: check_error(fulmen_tensor_dtype(a, &dtype)); break;
    case 4: check_error(fulmen_tensor_copy_to(a, (int32_t)small(v) + 1, buf, byte(v) % sizeof buf)); break;
    case 5: check_error(fulmen_tensor_to_dtype(a, (int32_t)small(v) + 1, &out)); break;
    case 6: check_error(fulmen_tensor_backward(a)); break;
    case 7: check_error(fulmen_tensor_grad(a, &out)); break;
    default: check_error(fulmen_tensor_requires_grad(a, &flag));
    }
    keep(v, to, out, K_TENSOR);
}

static void op_model(vm *v) {
    uint8_t which = byte(v) % 8, to = byte(v);
    fulmen_model *m = NULL;
    fulmen_tensor *out = NULL;
    char name[32];
    size_t n = 0;
    switch (which) {
    case 0: check_error(fulmen_model_sequential_new(&m)); break;
    case 1: {
        int64_t in = small(v), o = small(v);
        check_error(fulmen_model_linear_new(in, o, byte(v) & 1, &m));
        break;
    }
    case 2: check_error(fulmen_model_activation_new((int32_t)small(v), real(v), &m)); break;
    case 3: {
        uint8_t parent = byte(v) % SLOTS, child = byte(v) % SLOTS;
        fulmen_model *p = v->kind[parent] == K_MODEL ? v->slot[parent] : handle(v, K_MODEL);
        fulmen_model *c = v->kind[child] == K_MODEL ? v->slot[child] : handle(v, K_MODEL);
        fulmen_error *e = fulmen_model_push(p, c);
        if (e == NULL && c != NULL) {
            /* The child handle was consumed: forget it without freeing. */
            for (size_t i = 0; i < SLOTS; i++)
                if (v->slot[i] == c) v->slot[i] = NULL, v->kind[i] = K_NONE;
        }
        check_error(e);
        break;
    }
    case 4: {
        fulmen_model *a = handle(v, K_MODEL);
        check_error(fulmen_model_forward(a, handle(v, K_TENSOR), &out));
        break;
    }
    case 5: check_error(fulmen_model_state_dict_name(handle(v, K_MODEL), byte(v) % 8, name, byte(v) % sizeof name, &n));
        break;
    case 6: {
        fulmen_model *a = handle(v, K_MODEL);
        check_error(fulmen_model_state_dict_len(a, &n));
        const char *words[] = {"0.weight", "0.bias", "2.weight", "weight", ""};
        check_error(fulmen_model_state_dict_get(a, text(v, words, 5, name, sizeof name), &out));
        break;
    }
    default: {
        fulmen_model *a = handle(v, K_MODEL);
        if (byte(v) & 1) {
            check_error(fulmen_model_save(a, v->path));
        } else {
            check_error(fulmen_model_load(a, v->path, byte(v) & 1));
        }
    }
    }
    keep(v, to, m, K_MODEL);
    keep(v, byte(v), out, K_TENSOR);
}

/* Sequence and spatial layers with fuzzed options, and forward_multi with fuzzed input
 * lists (NULL, freed or wrong-type entries, too many), capacities and
 * out-pointers. */
static void op_sequence(vm *v) {
    uint8_t which = byte(v) % 7, to = byte(v);
    fulmen_model *m = NULL;
    fulmen_rnn_options ro = fulmen_rnn_options_default();
    ro.num_layers = small(v);
    ro.bidirectional = byte(v) & 1;
    ro.batch_first = byte(v) & 1;
    ro.dropout = real(v);
    fulmen_transformer_options to_opts = fulmen_transformer_options_default();
    to_opts.dim_feedforward = small(v);
    to_opts.dropout = real(v);
    to_opts.activation = (int32_t)small(v);
    to_opts.norm_first = byte(v) & 1;
    to_opts.batch_first = byte(v) & 1;
    to_opts.causal = byte(v) & 1;
    const fulmen_rnn_options *rp = byte(v) == 0 ? NULL : &ro;
    switch (which) {
    case 0: check_error(fulmen_model_lstm_new(small(v), small(v), rp, &m)); break;
    case 1: check_error(fulmen_model_gru_new(small(v), small(v), rp, &m)); break;
    case 2: check_error(fulmen_model_rnn_new(small(v), small(v), (int32_t)small(v), rp, &m)); break;
    case 3: check_error(fulmen_model_multihead_attention_new(small(v), small(v), real(v), byte(v) & 1, byte(v) & 1, &m));
        break;
    case 5: {
        fulmen_conv_transpose_options ct = fulmen_conv_transpose_options_default((size_t)small(v), small(v));
        ct.stride[0] = small(v);
        ct.output_padding[0] = small(v);
        ct.groups = small(v);
        int64_t sizes[3] = {small(v), small(v), small(v)};
        const char *modes[] = {"nearest", "linear", "bilinear", "bicubic", "trilinear", "area"};
        char mode[16];
        switch (byte(v) % 5) {
        case 0: check_error(fulmen_model_conv_transpose_new(small(v), small(v), &ct, &m)); break;
        case 1:
            check_error(fulmen_model_instance_norm_new((size_t)small(v), small(v), real(v), real(v), byte(v) & 1,
                                                       byte(v) & 1, &m));
            break;
        case 2: check_error(fulmen_model_adaptive_avg_pool_new(sizes, byte(v) % 4, &m)); break;
        case 3: check_error(fulmen_model_adaptive_max_pool_new(byte(v) & 1 ? sizes : NULL, byte(v) % 4, &m)); break;
        default:
            check_error(fulmen_model_upsample_new(sizes, byte(v) % 5, real(v), text(v, modes, 6, mode, sizeof mode),
                                                  byte(v) & 1, &m));
        }
        break;
    }
    case 4:
        if (byte(v) & 1) {
            check_error(fulmen_model_transformer_encoder_layer_new(small(v), small(v), &to_opts, &m));
        } else {
            check_error(fulmen_model_transformer_decoder_layer_new(small(v), small(v), &to_opts, &m));
        }
        break;
    default: {
        const fulmen_tensor *in[18];
        size_t n = byte(v) % 19;
        for (size_t i = 0; i < n; i++) in[i] = handle(v, K_TENSOR);
        fulmen_tensor *outs[4] = {NULL, NULL, NULL, NULL};
        size_t count = 0, capacity = byte(v) % 5;
        const char *words[] = {"", "0", "lstm", "blocks.0"};
        char name[16];
        fulmen_error *e = fulmen_model_forward_multi(handle(v, K_MODEL), text(v, words, 4, name, sizeof name),
                                                     n > 0 || (byte(v) & 1) ? in : NULL, n, byte(v) == 7 ? NULL : outs,
                                                     capacity, byte(v) == 9 ? NULL : &count);
        if (e == NULL) {
            for (size_t i = 0; i < count && i < 4; i++) keep(v, byte(v), outs[i], K_TENSOR);
        }
        check_error(e);
    }
    }
    keep(v, to, m, K_MODEL);
}

static void op_data(vm *v) {
    uint8_t which = byte(v) % 5, to = byte(v);
    fulmen_tensor *got[4] = {NULL, NULL, NULL, NULL};
    size_t count = 0, n = 0;
    switch (which) {
    case 0: {
        const fulmen_tensor *parts[3] = {handle(v, K_TENSOR), handle(v, K_TENSOR), handle(v, K_TENSOR)};
        fulmen_dataset *d = NULL;
        size_t k = byte(v) % 4;
        check_error(fulmen_dataset_from_tensors(k ? parts : NULL, k, &d));
        keep(v, to, d, K_DATASET);
        break;
    }
    case 1: {
        fulmen_loader_options o = fulmen_loader_options_default();
        o.batch_size = (size_t)small(v);
        o.shuffle = byte(v) & 1;
        o.drop_last = byte(v) & 1;
        o.seed = byte(v);
        fulmen_loader *l = NULL;
        check_error(fulmen_loader_new(handle(v, K_DATASET), byte(v) == 0 ? NULL : &o, &l));
        keep(v, to, l, K_LOADER);
        break;
    }
    case 2: {
        int64_t idx[3] = {small(v), small(v), small(v)};
        check_error(fulmen_dataset_get(handle(v, K_DATASET), idx, byte(v) % 4, got, byte(v) % 5, &count));
        break;
    }
    case 3: check_error(fulmen_loader_batch(handle(v, K_LOADER), byte(v), (size_t)small(v), got, byte(v) % 5, &count));
        break;
    default:
        check_error(fulmen_loader_len(handle(v, K_LOADER), &n));
        check_error(fulmen_dataset_len(handle(v, K_DATASET), &n));
    }
    /* Tensors written on success (count of them, at most the capacity). */
    for (size_t i = 0; i < 4; i++)
        if (got[i] != NULL) keep(v, byte(v), got[i], K_TENSOR);
}

static void op_optim(vm *v) {
    uint8_t which = byte(v) % 6, to = byte(v);
    fulmen_optimizer *o = NULL;
    switch (which) {
    case 0: {
        fulmen_sgd_options s = fulmen_sgd_options_default();
        s.lr = real(v);
        s.momentum = real(v);
        s.nesterov = byte(v) & 1;
        const fulmen_tensor *params[2] = {handle(v, K_TENSOR), handle(v, K_TENSOR)};
        size_t k = byte(v) % 3;
        check_error(fulmen_optimizer_sgd_new(handle(v, K_MODEL), k ? params : NULL, k, &s, &o));
        break;
    }
    case 1: {
        fulmen_adam_options a = fulmen_adam_options_default();
        a.lr = real(v);
        a.eps = real(v);
        check_error(fulmen_optimizer_adam_new(handle(v, K_MODEL), NULL, 0, byte(v) ? &a : NULL, &o));
        break;
    }
    case 2: check_error(fulmen_optimizer_zero_grad(handle(v, K_OPTIM))); break;
    case 3: {
        static const char *const keys[] = {"lr", "weight_decay", "momentum", "betas.0", "beta1", "eps"};
        char buf[16];
        size_t group = byte(v) == 255 ? SIZE_MAX : byte(v) % 3;
        const char *key = text(v, keys, 6, buf, sizeof buf);
        double value = 0;
        if (byte(v) & 1) {
            check_error(fulmen_optimizer_param_group_set(handle(v, K_OPTIM), group, key, real(v)));
        } else {
            check_error(fulmen_optimizer_param_group_get(handle(v, K_OPTIM), group, key, byte(v) ? &value : NULL));
        }
        break;
    }
    case 4: {
        size_t n = 0;
        check_error(fulmen_optimizer_param_group_count(handle(v, K_OPTIM), byte(v) ? &n : NULL));
        break;
    }
    default: check_error(fulmen_optimizer_step(handle(v, K_OPTIM)));
    }
    keep(v, to, o, K_OPTIM);
}

static void op_options(vm *v) {
    static const char *const keys[] = {"max_epochs", "max_steps", "accelerator", "devices", "precision",
                                       "strategy", "logger", "default_root_dir", "gradient_clip_val",
                                       "accumulate_grad_batches", "val_check_interval", "max_time",
                                       "limit_train_batches", "num_nodes", "ddp_timeout", "deterministic"};
    static const char *const values[] = {"1", "0", "-1", "auto", "cpu", "16-mixed", "bf16-true", "ddp", "dp",
                                         "0.5", "nan", "1e400", "00:00:00:01", "csv,tensorboard", "true", ""};
    static const char *const names[] = {"auto", "single_device", "ddp", "dp", "xla", "ddp_spawn", "cpu", "cuda",
                                        "gpu", "tpu", "mps"};
    static const char *const skeys[] = {"timeout", "num_nodes", "bucket_cap_mb", "process_group_backend",
                                        "find_unused_parameters"};
    char kb[16], vb[16];
    uint8_t which = byte(v) % 8, to = byte(v);
    switch (which) {
    case 0: {
        fulmen_trainer_options *o = NULL;
        check_error(fulmen_trainer_options_new(&o));
        keep(v, to, o, K_OPTIONS);
        break;
    }
    case 1: {
        fulmen_trainer_options *o = handle(v, K_OPTIONS);
        const char *k = text(v, keys, 16, kb, sizeof kb);
        check_error(fulmen_trainer_options_set(o, k, text(v, values, 16, vb, sizeof vb)));
        break;
    }
    case 2: {
        fulmen_trainer_options *o = handle(v, K_OPTIONS);
        const char *k = text(v, keys, 16, kb, sizeof kb);
        check_error(fulmen_trainer_options_set_int(o, k, small(v)));
        check_error(fulmen_trainer_options_set_float(o, k, real(v)));
        check_error(fulmen_trainer_options_set_bool(o, k, byte(v) & 1));
        break;
    }
    case 3: {
        fulmen_strategy *s = NULL;
        check_error(fulmen_strategy_new(text(v, names, 11, kb, sizeof kb), &s));
        keep(v, to, s, K_STRATEGY);
        break;
    }
    case 4: {
        fulmen_strategy *s = handle(v, K_STRATEGY);
        const char *k = text(v, skeys, 5, kb, sizeof kb);
        check_error(fulmen_strategy_set(s, k, text(v, values, 16, vb, sizeof vb)));
        break;
    }
    case 5: check_error(fulmen_trainer_options_set_strategy(handle(v, K_OPTIONS), handle(v, K_STRATEGY))); break;
    case 6: {
        fulmen_accelerator *a = NULL;
        check_error(fulmen_accelerator_get(text(v, names, 11, kb, sizeof kb), &a));
        keep(v, to, a, K_ACCEL);
        break;
    }
    default: {
        fulmen_device devs[4];
        size_t n = 0;
        check_error(fulmen_accelerator_get_parallel_devices(handle(v, K_ACCEL), text(v, values, 16, vb, sizeof vb),
                                                            devs, byte(v) % 5, &n));
        check_error(fulmen_trainer_options_set_accelerator(handle(v, K_OPTIONS), handle(v, K_ACCEL)));
    }
    }
}

static fulmen_error *fit_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(ud, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *fit_eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    double v = 0;
    fulmen_error *e = fit_step(ud, ctx, batch, &loss);
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *fit_optimizers(void *ud, fulmen_optimizer_config *config) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(ud, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_STEP, 1, NULL);
    return e;
}

/* A trainer from an options slot runs a short fit, validate or predict of
 * a small MLP on 16 samples; the options it cannot be trusted with here
 * (run length, strategy, output folder) are set after the random ones. */
static void op_fit(vm *v) {
    fulmen_trainer_options *o = handle(v, K_OPTIONS);
    uint8_t what = byte(v) % 3;
    fulmen_error *live = o != NULL ? fulmen_trainer_options_set_int(o, "max_steps", 3) : NULL;
    if (o == NULL || live != NULL) { /* not live options */
        check_error(live);
        return;
    }
    check_error(fulmen_trainer_options_set_int(o, "max_epochs", 2));
    check_error(fulmen_trainer_options_set(o, "max_time", "none"));
    check_error(fulmen_trainer_options_set(o, "strategy", "single_device"));
    check_error(fulmen_trainer_options_set(o, "default_root_dir", v->dir));
    check_error(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    check_error(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    fulmen_model *m = NULL, *l = NULL;
    check_error(fulmen_model_sequential_new(&m));
    check_error(fulmen_model_linear_new(4, 3, true, &l));
    check_error(fulmen_model_push(m, l));
    int64_t xs[2] = {16, 4}, ys[1] = {16};
    int64_t labels[16];
    for (int i = 0; i < 16; i++) labels[i] = i % 3;
    fulmen_tensor *x = NULL, *y = NULL, *pred = NULL;
    check_error(fulmen_tensor_randn(xs, 2, FULMEN_DTYPE_F32, &x));
    check_error(fulmen_tensor_from_data(labels, sizeof labels, FULMEN_DTYPE_I64, ys, 1, &y));
    const fulmen_tensor *parts[2] = {x, y};
    fulmen_dataset *ds = NULL;
    fulmen_loader *loader = NULL;
    check_error(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 1 + byte(v) % 8;
    check_error(fulmen_loader_new(ds, &lo, &loader));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = m;
    vt.training_step = fit_step;
    vt.validation_step = fit_eval_step;
    vt.predict_step = fit_step;
    vt.configure_optimizers = fit_optimizers;
    fulmen_lightning_module *mod = NULL;
    fulmen_trainer *t = NULL;
    check_error(fulmen_lightning_module_new(&vt, m, &mod));
    check_error(fulmen_trainer_new(o, &t));
    if (t != NULL && mod != NULL) {
        if (what == 0) check_error(fulmen_trainer_fit(t, mod, loader, byte(v) & 1 ? loader : NULL, NULL));
        if (what == 1) check_error(fulmen_trainer_validate(t, mod, loader, NULL));
        if (what == 2) check_error(fulmen_trainer_predict(t, mod, loader, NULL, &pred));
    }
    fulmen_tensor_free(pred);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(mod);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(m);
}

/* Frees: a slot, a freed handle again, or a handle through the wrong free
 * function (both must be no-ops). */
static void op_free(vm *v) {
    uint8_t which = byte(v) % 3, i = byte(v);
    if (which == 0) {
        drop(v, i);
    } else if (which == 1) {
        release(v->stale[i % STALE], (enum kind)(1 + byte(v) % (K_KINDS - 1)));
    } else {
        void *h = v->slot[i % SLOTS];
        enum kind wrong = (enum kind)(1 + byte(v) % (K_KINDS - 1));
        if (h != NULL && wrong != v->kind[i % SLOTS]) release(h, wrong);
    }
}

/* Seeds: 16 pseudo-random programs of 512 bytes (64 operations each), so
 * mutations start from long call sequences, not from the short
 * regression files. */
void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    uint8_t buf[512];
    uint64_t x = 88172645463325252ULL;
    for (int k = 0; k < 16; k++) {
        for (size_t i = 0; i < sizeof buf; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        add(buf, sizeof buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int scratch_made = 0;
    static char scratch[64], dir[64];
    if (!scratch_made) {
        snprintf(scratch, sizeof scratch, "%s/scratch.safetensors", fuzz_work_dir());
        snprintf(dir, sizeof dir, "%s/root", fuzz_work_dir());
        scratch_made = 1;
    }
    size_t before = fulmen_live_handles();
    vm v;
    memset(&v, 0, sizeof v);
    v.p = data;
    v.n = size;
    memcpy(v.path, scratch, sizeof v.path);
    memcpy(v.dir, dir, sizeof v.dir);
    /* The operations this target draws from (see FUZZ_FAMILY). */
    static void (*const ops_all[])(vm *) = {op_tensor_new, op_tensor_math, op_tensor_generated, op_tensor_query,
                                            op_model,      op_data,        op_optim,            op_options,
                                            op_free,       op_sequence};
    static void (*const ops_tensor[])(vm *) = {op_tensor_new, op_tensor_math, op_tensor_generated, op_tensor_query,
                                               op_free};
    static void (*const ops_model[])(vm *) = {op_tensor_new, op_model, op_model, op_free, op_sequence};
    static void (*const ops_data[])(vm *) = {op_tensor_new, op_data, op_data, op_free};
    static void (*const ops_optim[])(vm *) = {op_tensor_new, op_model, op_optim, op_optim, op_free};
    static void (*const ops_options[])(vm *) = {op_options, op_options, op_free};
    static void (*const ops_trainer[])(vm *) = {op_options, op_options, op_options, op_fit, op_free};
#define FUZZ_OPS(name) (name), sizeof(name) / sizeof *(name)
    static const struct {
        const char *family;
        void (*const *ops)(vm *);
        size_t n;
    } families[] = {{"api", FUZZ_OPS(ops_all)},         {"tensor", FUZZ_OPS(ops_tensor)},   {"model", FUZZ_OPS(ops_model)},
                    {"data", FUZZ_OPS(ops_data)},       {"optim", FUZZ_OPS(ops_optim)},     {"options", FUZZ_OPS(ops_options)},
                    {"trainer", FUZZ_OPS(ops_trainer)}};
    size_t f = 0;
    while (f + 1 < sizeof families / sizeof *families && strcmp(families[f].family, fuzz_target_name) != 0) f++;
    for (int ops = 0; v.n > 0 && ops < 64; ops++) families[f].ops[byte(&v) % families[f].n](&v);
    for (uint8_t i = 0; i < SLOTS; i++) drop(&v, i);
    if (fulmen_live_handles() != before) {
        fprintf(stderr, "fuzz api: %zu handles leaked\n", fulmen_live_handles() - before);
        abort();
    }
    unlink(scratch);
    static unsigned runs = 0;
    if (++runs % 64 == 0) remove_tree(dir); /* now and then: trainers write logs there */
    return 0;
}

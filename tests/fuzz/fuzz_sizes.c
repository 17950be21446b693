/*
 * Fuzz target: hostile sizes. The input picks a place where a count or a
 * length comes from outside and the value it gets, from a table of
 * boundary numbers (0, 1, -1, 2^31, 2^32, 2^53, 2^63 - 1, INT64_MIN,
 * SIZE_MAX, 10^12, ...) or raw input bytes:
 *   - checkpoint metadata (epoch, global_step, batches_in_epoch,
 *     num_optimizers) and tensor-table shapes of a real checkpoint, then a
 *     resume;
 *   - a host data source's len, a loader's batch size and shard, a batch
 *     index;
 *   - an iterator's num_batches;
 *   - a custom accelerator's auto_device_count and parse_devices count;
 *   - `devices` and limit options as text;
 *   - a CSV's column count and label column;
 *   - tensor shapes and ranges;
 *   - counts and sizes of the generated tensor ops (splits, topk,
 *     one_hot, repeat, expand, unflatten, linspace, dims lists).
 * Checked: a clear error or success, never an abort on a giant allocation,
 * a caught panic or a leaked handle.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "../c/ckpt_edit.h"

const char *fuzz_target_name = "sizes";

static unsigned long cases, errors;

void fuzz_report(void) { printf("fuzz sizes: %lu cases, %lu gave an error\n", cases, errors); }

static void check_error(fulmen_error *e) { errors += (unsigned long)fuzz_check_error_("sizes", e); }

static void ok(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "fuzz sizes: set-up failed: %s\n", fulmen_error_message(e));
        abort();
    }
}

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t byte(input *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

/* A hostile number: a boundary value or eight raw bytes. */
static int64_t number(input *in) {
    static const int64_t table[] = {0,
                                    1,
                                    -1,
                                    2,
                                    7,
                                    255,
                                    65536,
                                    65537,
                                    INT32_MAX,
                                    (int64_t)INT32_MAX + 1,
                                    (int64_t)UINT32_MAX,
                                    (int64_t)1 << 32,
                                    (int64_t)1 << 40,
                                    (int64_t)1 << 53,
                                    ((int64_t)1 << 53) + 1,
                                    1000000000000LL,
                                    INT64_MAX,
                                    INT64_MAX - 1,
                                    INT64_MIN,
                                    -1000000000000LL,
                                    -65536};
    uint8_t b = byte(in);
    if (b < 224) return table[b % (sizeof table / sizeof *table)];
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | byte(in);
    return (int64_t)v;
}

/* ---- the shared world: a model, a module, a real checkpoint ---- */

static struct {
    bool ready;
    char dir[64], ckpt[256];
    fulmen_model *model;
    fulmen_lightning_module *module;
    fulmen_loader *loader;
} w;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ud;
    (void)ctx;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(w.model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    (void)ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(w.model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_trainer *trainer(int64_t epochs, bool checkpoint) {
    fulmen_trainer_options *o = NULL;
    ok(fulmen_trainer_options_new(&o));
    ok(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    ok(fulmen_trainer_options_set(o, "default_root_dir", w.dir));
    ok(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    ok(fulmen_trainer_options_set_bool(o, "enable_checkpointing", checkpoint));
    ok(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    ok(fulmen_trainer_options_set(o, "logger", "false"));
    /* checkpoint_counters edits the counters in a safetensors header. */
    ok(fulmen_trainer_options_set(o, "checkpoint_format", "safetensors"));
    fulmen_trainer *t = NULL;
    ok(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static void set_up(void) {
    if (w.ready) return;
    w.ready = true;
    snprintf(w.dir, sizeof w.dir, "%s/root", fuzz_work_dir());
    fulmen_model *l = NULL;
    ok(fulmen_model_sequential_new(&w.model));
    ok(fulmen_model_linear_new(2, 3, true, &l));
    ok(fulmen_model_push(w.model, l));
    float xs[16] = {0, 1, 1, 0, 1, 1, 0, 0, 2, 1, 1, 2, -1, 0, 0, -1};
    int64_t ys[8] = {0, 1, 1, 0, 1, 1, 0, 0}, xshape[2] = {8, 2}, yshape[1] = {8};
    fulmen_tensor *x = NULL, *y = NULL;
    ok(fulmen_tensor_from_data(xs, sizeof xs, FULMEN_DTYPE_F32, xshape, 2, &x));
    ok(fulmen_tensor_from_data(ys, sizeof ys, FULMEN_DTYPE_I64, yshape, 1, &y));
    const fulmen_tensor *parts[2] = {x, y};
    fulmen_dataset *ds = NULL;
    ok(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 4;
    ok(fulmen_loader_new(ds, &lo, &w.loader));
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.training_step = step;
    vt.configure_optimizers = configure;
    ok(fulmen_lightning_module_new(&vt, w.model, &w.module));
    fulmen_trainer *t = trainer(1, true);
    ok(fulmen_trainer_fit(t, w.module, w.loader, NULL, NULL));
    size_t len = 0;
    ok(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, w.ckpt, sizeof w.ckpt, &len));
    fulmen_trainer_free(t);
}

/* ---- the places ---- */

static void checkpoint_counters(input *in) {
    static const char *keys[] = {"epoch", "global_step", "batches_in_epoch", "num_optimizers"};
    ckpt_file c = ckpt_read(w.ckpt);
    for (int k = 0, edits = 1 + byte(in) % 3; k < edits; k++) {
        const char *key = keys[byte(in) % 4];
        char from[64], to[96];
        /* The saved value is a small number: find "key":"<digits>". */
        for (int v = 0; v < 10; v++) {
            snprintf(from, sizeof from, "\"%s\":\"%d\"", key, v);
            snprintf(to, sizeof to, "\"%s\":\"%" PRId64 "\"", key, number(in));
            if (ckpt_replace(&c, from, to) > 0) break;
        }
    }
    if (byte(in) & 1) {
        /* A tensor-table shape: "shape":[3,2] -> a hostile dimension. */
        char to[64];
        snprintf(to, sizeof to, "\"shape\":[%" PRIu64 ",2]", (uint64_t)number(in));
        ckpt_replace(&c, "\"shape\":[3,2]", to);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/hostile.ckpt", w.dir);
    ckpt_write(&c, path);
    ckpt_free(&c);
    fulmen_trainer *t = trainer(2, false);
    check_error(fulmen_trainer_fit(t, w.module, w.loader, NULL, path));
    fulmen_trainer_free(t);
    fulmen_model *m = NULL;
    ok(fulmen_model_sequential_new(&m));
    check_error(fulmen_model_load(m, path, false));
    fulmen_model_free(m);
    unlink(path);
}

static int64_t g_len;

static fulmen_error *source_len(void *ud, size_t *len) {
    (void)ud;
    *len = (size_t)g_len;
    return NULL;
}

static fulmen_error *source_get(void *ud, const int64_t *idx, size_t n, fulmen_batch_builder *b) {
    (void)ud;
    (void)idx;
    if (n > 4096) return fulmen_error_new(FULMEN_CODE_OUT_OF_RANGE, "batch too large for this source");
    int64_t xs[2] = {(int64_t)n, 2}, ys[1] = {(int64_t)n};
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_error *e = fulmen_tensor_zeros(xs, 2, FULMEN_DTYPE_F32, &x);
    if (e == NULL) e = fulmen_tensor_zeros(ys, 1, FULMEN_DTYPE_I64, &y);
    if (e == NULL) e = fulmen_batch_builder_push(b, x);
    if (e == NULL) e = fulmen_batch_builder_push(b, y);
    return e;
}

static void data_source_sizes(input *in) {
    g_len = number(in);
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.len = source_len;
    vt.get_batch = source_get;
    fulmen_dataset *ds = NULL;
    check_error(fulmen_dataset_from_source(&vt, &ds));
    if (ds == NULL) return;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)number(in);
    lo.shuffle = byte(in) & 1;
    lo.drop_last = byte(in) & 1;
    fulmen_loader *l = NULL;
    check_error(fulmen_loader_new(ds, &lo, &l));
    if (l != NULL) {
        fulmen_loader *shard = NULL;
        check_error(fulmen_loader_shard(l, (size_t)number(in), (size_t)number(in), &shard));
        fulmen_tensor *out[2] = {NULL, NULL};
        size_t count = 0;
        check_error(fulmen_loader_batch(shard ? shard : l, (uint64_t)number(in), (size_t)number(in), out, 2, &count));
        fulmen_tensor_free(out[0]);
        fulmen_tensor_free(out[1]);
        fulmen_trainer_options *o = NULL;
        ok(fulmen_trainer_options_new(&o));
        ok(fulmen_trainer_options_set_int(o, "max_epochs", 1));
        ok(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
        ok(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
        ok(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
        ok(fulmen_trainer_options_set(o, "logger", "false"));
        ok(fulmen_trainer_options_set_int(o, "limit_train_batches", 1 + byte(in) % 3));
        fulmen_trainer *t = NULL;
        ok(fulmen_trainer_new(o, &t));
        fulmen_trainer_options_free(o);
        check_error(fulmen_trainer_fit(t, w.module, shard ? shard : l, NULL, NULL));
        fulmen_trainer_free(t);
        fulmen_loader_free(shard);
        fulmen_loader_free(l);
    }
    fulmen_dataset_free(ds);
}

static fulmen_error *iter_next(void *ud, fulmen_batch_builder *b, bool *done) {
    int *left = ud;
    if ((*left)-- <= 0) {
        *done = true;
        return NULL;
    }
    return source_get(NULL, NULL, 4, b);
}

static void iterator_counts(input *in) {
    int left = byte(in) % 4;
    fulmen_iterator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &left;
    vt.next = iter_next;
    vt.num_batches = number(in);
    fulmen_loader *l = NULL;
    check_error(fulmen_loader_from_iterator(&vt, &l));
    if (l == NULL) return;
    size_t n = 0;
    check_error(fulmen_loader_len(l, &n));
    fulmen_trainer *t = trainer(1, false);
    check_error(fulmen_trainer_fit(t, w.module, l, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_loader_free(l);
}

static int64_t g_count, g_parsed;

static fulmen_error *acc_count(void *ud, size_t *out) {
    (void)ud;
    *out = (size_t)g_count;
    return NULL;
}

static fulmen_error *acc_parse(void *ud, const char *devices, int64_t *ids, size_t capacity, size_t *n_out) {
    (void)ud;
    (void)devices;
    for (size_t i = 0; i < capacity && i < 4; i++) ids[i] = (int64_t)i;
    *n_out = (size_t)g_parsed;
    return NULL;
}

static void accelerator_counts(input *in) {
    g_count = number(in);
    g_parsed = number(in);
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = acc_count;
    if (byte(in) & 1) vt.parse_devices = acc_parse;
    check_error(fulmen_accelerator_register("fuzzsizes", "hostile counts", &vt, true));
    fulmen_accelerator *a = NULL;
    check_error(fulmen_accelerator_get("fuzzsizes", &a));
    int64_t ids[8];
    size_t n = 0;
    char devices[32];
    snprintf(devices, sizeof devices, "%" PRId64, number(in));
    check_error(fulmen_accelerator_parse_devices(a, devices, ids, 8, &n));
    check_error(fulmen_accelerator_parse_devices(a, "auto", ids, 8, &n));
    size_t count = 0;
    check_error(fulmen_accelerator_auto_device_count(a, &count));
    fulmen_accelerator_free(a);
    fulmen_trainer_options *o = NULL;
    ok(fulmen_trainer_options_new(&o));
    check_error(fulmen_trainer_options_set(o, "devices", devices));
    check_error(fulmen_trainer_options_set_int(o, "devices", number(in)));
    check_error(fulmen_trainer_options_set_int(o, "limit_train_batches", number(in)));
    check_error(fulmen_trainer_options_set_int(o, "max_steps", number(in)));
    check_error(fulmen_trainer_options_set_int(o, "accumulate_grad_batches", number(in)));
    fulmen_trainer_options_free(o);
    check_error(fulmen_accelerator_unregister("fuzzsizes"));
}

static void csv_shapes(input *in) {
    char path[128];
    snprintf(path, sizeof path, "%s/hostile.csv", w.dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) abort();
    int64_t cols = number(in);
    size_t c = cols <= 0 ? 1 : (size_t)(cols > 200000 ? 200000 : cols);
    int rows = 1 + byte(in) % 3;
    for (int r = 0; r < rows; r++) {
        for (size_t i = 0; i < c; i++) fputs(i + 1 < c ? "1," : "1\n", f);
    }
    fclose(f);
    fulmen_csv_options o = fulmen_csv_options_default();
    o.label_column = number(in);
    o.header = (int32_t)(byte(in) % 4) - 1;
    fulmen_dataset *ds = NULL;
    check_error(fulmen_dataset_from_csv(path, &o, &ds));
    fulmen_dataset_free(ds);
    unlink(path);
}

/* Whether a tensor of `count` elements is either small or so large that
 * its allocation fails at once: a real 16 GB tensor is a legitimate request
 * this target must not make. */
static bool harmless_count(double count) { return !(count > (double)(1 << 24) && count < 1e18); }

static void tensor_sizes(input *in) {
    int64_t dims[3] = {number(in), number(in), number(in)};
    size_t nd = byte(in) % 4;
    double count = 1;
    for (size_t i = 0; i < nd; i++) count *= fabs((double)dims[i]);
    fulmen_tensor *t = NULL, *u = NULL;
    if (harmless_count(count)) {
        check_error(fulmen_tensor_zeros(dims, nd, FULMEN_DTYPE_F32, &t));
        check_error(fulmen_tensor_full(dims, nd, (double)number(in), (int32_t)(byte(in) % 10), &u));
        fulmen_tensor_free(u);
        u = NULL;
    }
    double start = (double)number(in), end = (double)number(in), step = (double)number(in);
    if (step != 0 && harmless_count(fabs((end - start) / step))) {
        check_error(fulmen_tensor_arange(start, end, step, (int32_t)(byte(in) % 10), &u));
        fulmen_tensor_free(u);
        u = NULL;
    }
    if (t != NULL) {
        check_error(fulmen_tensor_reshape(t, dims, nd, &u));
        fulmen_tensor_free(u);
        u = NULL;
        check_error(fulmen_tensor_narrow(t, number(in), number(in), number(in), &u));
        fulmen_tensor_free(u);
    }
    fulmen_tensor_free(t);
}

/* Frees the first `n` (at most 8) pieces of a split. */
static void free_pieces(fulmen_tensor **outs, size_t n) {
    for (size_t i = 0; i < n && i < 8; i++) fulmen_tensor_free(outs[i]);
}

/* Counts and sizes handed to the generated tensor ops: splits into a
 * capacity of 8 (a larger count must be refused before anything is made),
 * topk's k, one_hot's class count, repeat counts, expand / unflatten
 * sizes, linspace steps, dims lists. */
static void tensor_op_sizes(input *in) {
    fulmen_tensor *t = NULL, *u = NULL, *v = NULL, *outs[8];
    const int64_t shape[2] = {byte(in) % 5, byte(in) % 5};
    ok(fulmen_tensor_zeros(shape, 2, FULMEN_DTYPE_F32, &t));
    size_t count = 0;
    int64_t a = number(in), b = number(in);
    fulmen_error *e = fulmen_tensor_chunk(t, a, b, outs, 8, &count);
    if (e == NULL) free_pieces(outs, count);
    check_error(e);
    e = fulmen_tensor_split(t, a, b, outs, 8, &count);
    if (e == NULL) free_pieces(outs, count);
    check_error(e);
    const int64_t sizes[3] = {number(in), number(in), number(in)};
    e = fulmen_tensor_split_sizes(t, sizes, byte(in) % 4, b, outs, 8, &count);
    if (e == NULL) free_pieces(outs, count);
    check_error(e);
    e = fulmen_tensor_unbind(t, a, outs, 8, &count);
    if (e == NULL) free_pieces(outs, count);
    check_error(e);
    check_error(fulmen_tensor_topk(t, a, b, true, true, &u, &v));
    fulmen_tensor_free(u);
    fulmen_tensor_free(v);
    u = v = NULL;
    check_error(fulmen_tensor_expand(t, sizes, byte(in) % 4, &u));
    fulmen_tensor_free(u);
    u = NULL;
    check_error(fulmen_tensor_unflatten(t, a, sizes, byte(in) % 4, &u));
    fulmen_tensor_free(u);
    u = NULL;
    check_error(fulmen_tensor_flip(t, sizes, byte(in) % 4, &u));
    fulmen_tensor_free(u);
    u = NULL;
    check_error(fulmen_tensor_roll(t, sizes, byte(in) % 4, sizes + 1, byte(in) % 3, &u));
    fulmen_tensor_free(u);
    u = NULL;
    double numel = (double)(shape[0] * shape[1]);
    if (harmless_count(numel * fabs((double)sizes[0]) * fabs((double)sizes[1]))) {
        check_error(fulmen_tensor_repeat(t, sizes, 2, &u));
        fulmen_tensor_free(u);
        u = NULL;
    }
    if (harmless_count(fabs((double)a))) {
        check_error(fulmen_tensor_linspace(0, 1, a, FULMEN_DTYPE_F32, &u));
        fulmen_tensor_free(u);
        u = NULL;
    }
    const int64_t idx[2] = {byte(in) % 4, byte(in) % 4}, d2[1] = {2};
    ok(fulmen_tensor_from_data(idx, sizeof idx, FULMEN_DTYPE_I64, d2, 1, &v));
    if (harmless_count(2.0 * fabs((double)a))) {
        check_error(fulmen_tensor_one_hot(v, a, &u));
        fulmen_tensor_free(u);
    }
    fulmen_tensor_free(v);
    fulmen_tensor_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    set_up();
    size_t before = fulmen_live_handles();
    input in = {data, size};
    static void (*const places[])(input *) = {checkpoint_counters, data_source_sizes, iterator_counts,
                                              accelerator_counts,  csv_shapes,        tensor_sizes,
                                              tensor_op_sizes};
    for (int k = 0; k < 3 && in.n > 0; k++) {
        cases++;
        places[byte(&in) % (sizeof places / sizeof *places)](&in);
    }
    if (fulmen_live_handles() != before) {
        fprintf(stderr, "fuzz sizes: %zu handles leaked\n", fulmen_live_handles() - before);
        abort();
    }
    return 0;
}

/*
 * The fulmen contenders of bench/exported.py: one training step of a model
 * exported by python/fulmen_export.py. Loads the .pt2
 * (fulmen_model_load_exported), adds the compiled training step of
 * export_compiled_step's AOTInductor package with --compiled
 * (fulmen_model_add_compiled_step), and runs a plain loop over fixed
 * in-memory batches, each step: the method (training_step, or
 * training_step_compiled with --compiled) on the batch, its loss (the
 * result, or the result's "loss"), fulmen_optimizer_zero_grad (set to
 * none, as fulmen's Trainer does before backward), fulmen_tensor_backward
 * and fulmen_optimizer_step of SGD (no momentum). No value is read back to
 * the host until the last step's loss.
 *
 *   exported_step --model MODEL.pt2 --data DIR [--compiled PACKAGE.pt2]
 *       [--workload NAME] [--epochs 5] [--warmup 1] [--threads 1] [--seed 0]
 *       [--lr 0.05] [--accelerator cpu|cuda]
 *
 * DIR holds x.bin and y.bin (raw, row-major) and spec.txt: "ROWS BATCH",
 * then for x and for y "DTYPE RANK DIMS..." of one row (DTYPE f32 or i64,
 * RANK 0 to 3); ROWS is a multiple of BATCH. An epoch is one pass over the
 * ROWS / BATCH batches, in order; --warmup epochs run first. Prints
 * bench/PROTOCOL.md's lines: one per measured epoch, then
 *   {"contender": "fulmen-exported", "workload": NAME, "done": true,
 *    "loss": L, "load_seconds": S, "first_step_seconds": S}
 * (contender "fulmen-compiled" with --compiled): the last step's loss, the
 * time to load the model (and add the package), and the first step's time.
 * On cuda the model is loaded on cuda:0, the batches are copied there
 * before the loop, and each clock is read after the device's queued work is
 * done.
 */
#define _POSIX_C_SOURCE 200809L

#include <fulmen.h>

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RANK 3
#define MAX_ROW_ELEMENTS (1L << 20)
#define MAX_ROWS 1000000L
#define MAX_DATA_BYTES ((size_t)1 << 31)
#define PATH_CAP 4096
#define MAX_NAME 64

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "exported_step: %s: %s\n", what, fulmen_error_message(err));
        fulmen_error_free(err);
        exit(1);
    }
}

static _Noreturn void fail(const char *message, const char *detail) {
    fprintf(stderr, "exported_step: %s%s\n", message, detail);
    exit(2);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One column of the data: its dtype and the shape of one row. */
typedef struct {
    int32_t dtype;
    size_t elem_size;
    size_t rank;
    int64_t dims[MAX_RANK];
    size_t row_elements;
} column;

/* What a step needs, and the last step's loss. */
typedef struct {
    fulmen_model *model;
    fulmen_optimizer *opt;
    const char *method;
    fulmen_tensor *loss;
} loop;

/* Reads a column's "DTYPE RANK DIMS..." from spec.txt; 0 when malformed. */
static int read_column(FILE *f, column *c) {
    char dtype[8];
    unsigned rank = 0;
    if (fscanf(f, "%7s %u", dtype, &rank) != 2 || rank > MAX_RANK) return 0;
    if (strcmp(dtype, "f32") == 0) {
        c->dtype = FULMEN_DTYPE_F32;
        c->elem_size = sizeof(float);
    } else if (strcmp(dtype, "i64") == 0) {
        c->dtype = FULMEN_DTYPE_I64;
        c->elem_size = sizeof(int64_t);
    } else {
        return 0;
    }
    c->rank = rank;
    c->row_elements = 1;
    for (size_t i = 0; i < c->rank; i++) {
        long d = 0;
        if (fscanf(f, "%ld", &d) != 1 || d < 1 || d > MAX_ROW_ELEMENTS) return 0;
        c->dims[i] = d;
        c->row_elements *= (size_t)d;
        if (c->row_elements > (size_t)MAX_ROW_ELEMENTS) return 0;
    }
    return 1;
}

static void join(char *out, const char *dir, const char *name) {
    int n = snprintf(out, PATH_CAP, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_CAP) fail("path too long: ", dir);
}

/* The whole file at `path`, which must hold exactly `nbytes` bytes (its
 * size is checked before anything is allocated). */
static unsigned char *read_exactly(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || (size_t)size != nbytes || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "exported_step: %s holds %ld bytes, spec.txt asks for %zu\n", path, size, nbytes);
        exit(1);
    }
    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    if (buf == NULL || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "exported_step: cannot read the %zu bytes of %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

/* Rows first..first+rows of column `c` (its data in `buf`) as a tensor on
 * `device`. */
static fulmen_tensor *rows_tensor(const column *c, const unsigned char *buf, long first, long rows, int32_t device) {
    size_t row_bytes = c->row_elements * c->elem_size;
    int64_t shape[MAX_RANK + 1] = {rows};
    for (size_t i = 0; i < c->rank; i++) shape[i + 1] = c->dims[i];
    fulmen_tensor *host = NULL, *moved = NULL;
    check(fulmen_tensor_from_data(buf + (size_t)first * row_bytes, (size_t)rows * row_bytes, c->dtype, shape,
                                  c->rank + 1, &host),
          "batch tensor");
    if (device == FULMEN_DEVICE_TYPE_CPU) return host;
    check(fulmen_tensor_to_device(host, device, 0, &moved), "batch to the device");
    fulmen_tensor_free(host);
    return moved;
}

/* The batch (x, y) as the tuple value training_step takes. */
static fulmen_value *batch_value(const fulmen_tensor *x, const fulmen_tensor *y) {
    fulmen_value *items[2] = {NULL, NULL}, *tuple = NULL;
    check(fulmen_value_tensor(x, &items[0]), "batch value");
    check(fulmen_value_tensor(y, &items[1]), "batch value");
    check(fulmen_value_tuple((const fulmen_value *const *)items, 2, &tuple), "batch tuple");
    fulmen_value_free(items[0]);
    fulmen_value_free(items[1]);
    return tuple;
}

/* One training step on `batch`; keeps its loss in l->loss. */
static fulmen_error *train_step(loop *l, const fulmen_value *batch) {
    fulmen_value *out = NULL, *item = NULL;
    fulmen_tensor *loss = NULL;
    int32_t kind = FULMEN_VALUE_KIND_NONE;
    fulmen_error *e = fulmen_model_call_method(l->model, NULL, l->method, &batch, 1, &out);
    if (e == NULL) e = fulmen_value_get_kind(out, &kind);
    if (e == NULL && kind == FULMEN_VALUE_KIND_DICT) e = fulmen_value_dict_get(out, "loss", &item);
    if (e == NULL) e = fulmen_value_get_tensor(item != NULL ? item : out, &loss);
    if (e == NULL) e = fulmen_optimizer_zero_grad(l->opt);
    if (e == NULL) e = fulmen_tensor_backward(loss);
    if (e == NULL) e = fulmen_optimizer_step(l->opt);
    fulmen_value_free(item);
    fulmen_value_free(out);
    if (e != NULL) {
        fulmen_tensor_free(loss);
        return e;
    }
    fulmen_tensor_free(l->loss);
    l->loss = loss;
    return NULL;
}

static long parse_long(const char *s, long lo, long hi, const char *what) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "exported_step: %s must be a whole number in %ld..%ld, got '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return v;
}

static double parse_positive(const char *s, const char *what) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || v <= 0) {
        fprintf(stderr, "exported_step: %s must be a positive number, got '%s'\n", what, s);
        exit(2);
    }
    return v;
}

/* A name printed inside JSON: letters, digits, '-', '_' and '.' only. */
static int plain_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return 0;
    }
    return 1;
}

static _Noreturn void usage(void) {
    fprintf(stderr,
            "usage: exported_step --model MODEL.pt2 --data DIR [--compiled PACKAGE.pt2] [--workload NAME]\n"
            "           [--epochs N] [--warmup N] [--threads N] [--seed N] [--lr X] [--accelerator cpu|cuda]\n");
    exit(2);
}

static void sync_device(int32_t device) {
    check(fulmen_device_synchronize(device, 0), "synchronize");
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *data = NULL, *compiled = NULL, *workload = "model", *accelerator = "cpu";
    long epochs = 5, warmup = 1, threads = 1, seed = 0;
    double lr = 0.05;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) usage();
        const char *a = argv[i], *v = argv[i + 1];
        if (strcmp(a, "--model") == 0) model_path = v;
        else if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--compiled") == 0) compiled = v;
        else if (strcmp(a, "--workload") == 0) workload = v;
        else if (strcmp(a, "--accelerator") == 0) accelerator = v;
        else if (strcmp(a, "--epochs") == 0) epochs = parse_long(v, 1, 1000000, "--epochs");
        else if (strcmp(a, "--warmup") == 0) warmup = parse_long(v, 0, 1000000, "--warmup");
        else if (strcmp(a, "--threads") == 0) threads = parse_long(v, 1, 4096, "--threads");
        else if (strcmp(a, "--seed") == 0) seed = parse_long(v, 0, LONG_MAX, "--seed");
        else if (strcmp(a, "--lr") == 0) lr = parse_positive(v, "--lr");
        else usage();
    }
    if (model_path == NULL || data == NULL) usage();
    if (!plain_name(workload)) fail("--workload takes letters, digits, '-', '_' and '.', got ", workload);
    int32_t device = FULMEN_DEVICE_TYPE_CPU;
    if (strcmp(accelerator, "cuda") == 0) device = FULMEN_DEVICE_TYPE_CUDA;
    else if (strcmp(accelerator, "cpu") != 0) fail("--accelerator is cpu or cuda, got ", accelerator);
    check(fulmen_abi_check(FULMEN_ABI_VERSION), "abi");
    check(fulmen_set_num_threads((int32_t)threads), "threads");

    /* The data: spec.txt, then x.bin and y.bin, cut into fixed batches. */
    char path[PATH_CAP];
    join(path, data, "spec.txt");
    FILE *spec = fopen(path, "r");
    if (spec == NULL) {
        perror(path);
        return 1;
    }
    long rows = 0, batch = 0;
    column cols[2];
    memset(cols, 0, sizeof cols);
    int ok = fscanf(spec, "%ld %ld", &rows, &batch) == 2 && read_column(spec, &cols[0]) && read_column(spec, &cols[1]);
    fclose(spec);
    if (!ok || rows < 1 || rows > MAX_ROWS || batch < 1 || batch > rows || rows % batch != 0) {
        fprintf(stderr, "exported_step: %s is not \"ROWS BATCH\" (ROWS a multiple of BATCH, at most %ld) and two "
                        "columns\n", path, MAX_ROWS);
        return 2;
    }
    unsigned char *bufs[2] = {NULL, NULL};
    const char *files[2] = {"x.bin", "y.bin"};
    for (int k = 0; k < 2; k++) {
        size_t nbytes = cols[k].row_elements * cols[k].elem_size * (size_t)rows;
        if (nbytes > MAX_DATA_BYTES) {
            fprintf(stderr, "exported_step: %s/%s would hold %zu bytes, more than %zu\n", data, files[k], nbytes,
                    MAX_DATA_BYTES);
            return 2;
        }
        join(path, data, files[k]);
        bufs[k] = read_exactly(path, nbytes);
    }
    size_t n = (size_t)(rows / batch);
    fulmen_tensor **tensors = calloc(2 * n, sizeof *tensors);
    fulmen_value **batches = calloc(n, sizeof *batches);
    if (tensors == NULL || batches == NULL) fail("out of memory for the batches", "");
    for (size_t b = 0; b < n; b++) {
        for (int k = 0; k < 2; k++) tensors[2 * b + k] = rows_tensor(&cols[k], bufs[k], (long)b * batch, batch, device);
        batches[b] = batch_value(tensors[2 * b], tensors[2 * b + 1]);
    }
    free(bufs[0]);
    free(bufs[1]);

    /* The model, ready to train: load (and the compiled step) timed. */
    loop l = {NULL, NULL, "training_step", NULL};
    double started = now();
    if (device == FULMEN_DEVICE_TYPE_CPU) check(fulmen_model_load_exported(model_path, &l.model), "load");
    else check(fulmen_model_load_exported_on(model_path, device, 0, &l.model), "load");
    if (compiled != NULL) {
        check(fulmen_model_add_compiled_step(l.model, compiled, "training_step_compiled"), "compiled step");
        l.method = "training_step_compiled";
    }
    sync_device(device);
    double load_seconds = now() - started;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = lr;
    check(fulmen_optimizer_sgd_new(l.model, NULL, 0, &o, &l.opt), "sgd");

    const char *contender = compiled != NULL ? "fulmen-compiled" : "fulmen-exported";
    double first_step = -1;
    check(fulmen_manual_seed((uint64_t)seed), "seed");
    for (long epoch = 0; epoch < warmup + epochs; epoch++) {
        sync_device(device);
        double start = now();
        for (size_t b = 0; b < n; b++) {
            check(train_step(&l, batches[b]), l.method);
            if (first_step < 0) {
                sync_device(device);
                first_step = now() - start;
            }
        }
        sync_device(device);
        double seconds = now() - start;
        if (epoch >= warmup) {
            printf("{\"contender\": \"%s\", \"workload\": \"%s\", \"epoch\": %ld, \"seconds\": %.6f, \"steps\": %zu}\n",
                   contender, workload, epoch, seconds, n);
            fflush(stdout);
        }
    }
    double loss = 0;
    check(fulmen_tensor_item(l.loss, &loss), "loss");
    if (!isfinite(loss)) {
        fprintf(stderr, "exported_step: the last step's loss is %g\n", loss);
        return 1;
    }
    printf("{\"contender\": \"%s\", \"workload\": \"%s\", \"done\": true, \"loss\": %.9g, \"load_seconds\": %.6f, "
           "\"first_step_seconds\": %.6f}\n",
           contender, workload, loss, load_seconds, first_step);
    fflush(stdout);

    fulmen_tensor_free(l.loss);
    fulmen_optimizer_free(l.opt);
    fulmen_model_free(l.model);
    for (size_t b = 0; b < n; b++) fulmen_value_free(batches[b]);
    for (size_t i = 0; i < 2 * n; i++) fulmen_tensor_free(tensors[i]);
    free(batches);
    free(tensors);
    size_t live = fulmen_live_handles();
    if (live != 0) {
        fprintf(stderr, "exported_step: %zu handles left\n", live);
        return 1;
    }
    return 0;
}

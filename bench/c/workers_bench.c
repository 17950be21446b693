/*
 * What loader workers gain when a data source decodes its samples: the
 * MNIST-5k images are kept as text records (784 comma-separated pixel
 * values and the label, as in the CSV) and a host data source parses and
 * normalises each batch's records when asked, the way a real pipeline
 * decodes images. The same fit (784-256-10 MLP, SGD 0.1, batch 64, one
 * thread) runs with num_workers 0, 1 and 2; the source sets any_thread, so
 * with workers its parsing overlaps training (it is still called one batch
 * at a time). Prints one JSON line per run:
 *   {"workers": n, "epoch_s": median seconds per epoch, "loss": last loss}
 *
 *   workers_bench --data mnist_5k.csv.gz [--epochs 5] [--threads 1]
 */
#define _POSIX_C_SOURCE 200809L

#include <fulmen.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIXELS 784

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "workers_bench: %s: %s\n", what, fulmen_error_message(err));
        exit(1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The samples as text records, as a CSV holds them. */
typedef struct {
    char **records;
    size_t n;
} text_source;

static fulmen_error *source_len(void *ud, size_t *n) {
    *n = ((text_source *)ud)->n;
    return NULL;
}

/* Parses the batch's records: pixels / 255 as f32 (n, 784), labels i64. */
static fulmen_error *source_get(void *ud, const int64_t *indices, size_t n, fulmen_batch_builder *b) {
    text_source *s = ud;
    float *x = malloc(n * PIXELS * sizeof(float));
    int64_t *y = malloc(n * sizeof(int64_t));
    if (x == NULL || y == NULL) {
        free(x);
        free(y);
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const char *p = s->records[indices[i]];
        char *end = NULL;
        for (size_t j = 0; j < PIXELS; j++, p = end + 1) x[i * PIXELS + j] = (float)strtol(p, &end, 10) / 255.0f;
        y[i] = strtol(p, &end, 10);
    }
    const int64_t xs[2] = {(int64_t)n, PIXELS}, ys[1] = {(int64_t)n};
    fulmen_tensor *xt = NULL, *yt = NULL;
    fulmen_error *e = fulmen_tensor_from_data(x, n * PIXELS * sizeof(float), FULMEN_DTYPE_F32, xs, 2, &xt);
    if (e == NULL) e = fulmen_tensor_from_data(y, n * sizeof(int64_t), FULMEN_DTYPE_I64, ys, 1, &yt);
    if (e == NULL) e = fulmen_batch_builder_push(b, xt);
    if (e == NULL) e = fulmen_batch_builder_push(b, yt);
    free(x);
    free(y);
    return e;
}

/* The dataset's samples written back as text records "p0,...,p783,label". */
static text_source records_of(fulmen_dataset *ds) {
    text_source s = {NULL, 0};
    check(fulmen_dataset_len(ds, &s.n), "dataset length");
    s.records = calloc(s.n, sizeof(char *));
    float *pixels = malloc(PIXELS * sizeof(float));
    if (s.records == NULL || pixels == NULL) exit(2);
    for (size_t i = 0; i < s.n; i++) {
        int64_t index = (int64_t)i, label = 0;
        fulmen_tensor *parts[2] = {NULL, NULL};
        size_t count = 0;
        check(fulmen_dataset_get(ds, &index, 1, parts, 2, &count), "reading a sample");
        check(fulmen_tensor_copy_to(parts[0], FULMEN_DTYPE_F32, pixels, PIXELS * sizeof(float)), "pixels");
        check(fulmen_tensor_copy_to(parts[1], FULMEN_DTYPE_I64, &label, sizeof label), "label");
        fulmen_tensor_free(parts[0]);
        fulmen_tensor_free(parts[1]);
        char *r = malloc(PIXELS * 4 + 24);
        if (r == NULL) exit(2);
        size_t at = 0;
        for (size_t j = 0; j < PIXELS; j++) at += (size_t)sprintf(r + at, "%d,", (int)(pixels[j] * 255.0f + 0.5f));
        sprintf(r + at, "%lld", (long long)label);
        s.records[i] = r;
    }
    free(pixels);
    return s;
}

typedef struct {
    fulmen_model *model;
    double last_loss;
} module_state;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **loss) {
    (void)ctx;
    module_state *m = ud;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(m->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    if (e == NULL) e = fulmen_tensor_item(*loss, &m->last_loss);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(((module_state *)ud)->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_model *mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "model");
    check(fulmen_model_linear_new(PIXELS, 256, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), "relu");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_linear_new(256, 10, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    return m;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One fit of `epochs` epochs with `workers`; the median epoch time. */
static void run(fulmen_dataset *source, size_t workers, long epochs) {
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 64;
    lo.shuffle = true;
    lo.seed = 1;
    lo.num_workers = workers;
    fulmen_loader *loader = NULL;
    check(fulmen_loader_new(source, &lo, &loader), "loader");
    check(fulmen_manual_seed(0), "seed");
    module_state m = {mlp(), 0};
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &m;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, m.model, &module), "module");
    double *times = calloc((size_t)epochs, sizeof(double));
    if (times == NULL) exit(2);
    for (long e = 0; e < epochs; e++) {
        fulmen_trainer_options *o = NULL;
        check(fulmen_trainer_options_new(&o), "options");
        check(fulmen_trainer_options_set_int(o, "max_epochs", 1), "max_epochs");
        check(fulmen_trainer_options_set(o, "logger", "false"), "logger");
        check(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false), "checkpointing");
        check(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false), "progress");
        check(fulmen_trainer_options_set_bool(o, "enable_model_summary", false), "summary");
        fulmen_trainer *t = NULL;
        check(fulmen_trainer_new(o, &t), "trainer");
        fulmen_trainer_options_free(o);
        double start = now();
        check(fulmen_trainer_fit(t, module, loader, NULL, NULL), "fit");
        times[e] = now() - start;
        fulmen_trainer_free(t);
    }
    qsort(times, (size_t)epochs, sizeof(double), compare);
    printf("{\"workers\": %zu, \"epoch_s\": %.4f, \"loss\": %.6f}\n", workers, times[epochs / 2], m.last_loss);
    fflush(stdout);
    free(times);
    fulmen_lightning_module_free(module);
    fulmen_model_free(m.model);
    fulmen_loader_free(loader);
}

int main(int argc, char **argv) {
    const char *data = NULL;
    long epochs = 5, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--data") == 0) data = argv[i + 1];
        else if (strcmp(argv[i], "--epochs") == 0) epochs = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0) threads = strtol(argv[i + 1], NULL, 10);
    }
    if (data == NULL || epochs < 1 || threads < 1) {
        fprintf(stderr, "usage: workers_bench --data mnist_5k.csv.gz [--epochs 5] [--threads 1]\n");
        return 2;
    }
    check(fulmen_set_num_threads((int32_t)threads), "threads");
    fulmen_csv_options csv = fulmen_csv_options_default();
    csv.label_column = -1;
    csv.header = 0;
    csv.scaling = FULMEN_SCALING_DIVIDE;
    csv.scale_divisor = 255.0;
    fulmen_dataset *images = NULL;
    check(fulmen_dataset_from_csv(data, &csv, &images), "loading the CSV");
    text_source text = records_of(images);
    fulmen_dataset_free(images);
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &text;
    vt.len = source_len;
    vt.get_batch = source_get;
    vt.any_thread = true;
    fulmen_dataset *source = NULL;
    check(fulmen_dataset_from_source(&vt, &source), "data source");
    for (size_t w = 0; w <= 2; w++) run(source, w, epochs);
    fulmen_dataset_free(source);
    for (size_t i = 0; i < text.n; i++) free(text.records[i]);
    free(text.records);
    return 0;
}

/*
 * One-month-ahead forecasts of the El Nino series (monthly Pacific sea
 * surface temperatures 1950-2010, from the statsmodels package) with an
 * LSTM trained through fulmen's C API. Each sample is the previous
 * --window months (standardised by the training months' mean and standard
 * deviation); the LSTM's last hidden state goes through a linear head. The
 * last 120 months are the validation set.
 *
 *   forecast --data elnino.csv [--epochs 40] [--batch-size 32] [--window 24]
 *            [--hidden 32] [--lr 1e-2] [--seed 42] [--threads N]
 *            [--limit-batches N] [--no-shuffle] [--out runs/forecast]
 *            [--init-out FILE] [--loss-log FILE]
 *
 * Prints the validation mean absolute error (in degrees) after every epoch
 * and, at the end, beside the seasonal naive forecast (the same month a
 * year before), which the model must beat. --init-out and --loss-log let a
 * PyTorch twin (tests/interop/forecast_twin.py) replay the run.
 */
#include <fulmen.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The series holds at most this many months (a bigger file is refused). */
#define MAX_MONTHS 100000
/* Months held out for validation, and the seasonal period. */
#define VAL_MONTHS 120
#define SEASON 12

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "forecast: %s: %s (code %d)\n", what, fulmen_error_message(err), fulmen_error_code(err));
        fulmen_error_free(err);
        exit(1);
    }
}

typedef struct {
    fulmen_model *model;
    double lr, scale; /* scale: the standard deviation, back to degrees */
    FILE *loss_log;
} task;

/* Standardised next-month predictions [B, 1] of windows x [B, W, 1]. */
static fulmen_error *predict(const task *t, const fulmen_tensor *x, fulmen_tensor **out) {
    fulmen_tensor *states[3] = {NULL, NULL, NULL}, *last = NULL;
    const fulmen_tensor *in[1] = {x};
    size_t count = 0;
    fulmen_error *err = fulmen_model_forward_multi(t->model, "lstm", in, 1, states, 3, &count);
    /* states: output [B, W, H], h_n [1, B, H], c_n [1, B, H] */
    if (err == NULL) err = fulmen_tensor_squeeze(states[1], 0, &last);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "head", last, out);
    for (size_t i = 0; i < 3; i++) fulmen_tensor_free(states[i]);
    fulmen_tensor_free(last);
    return err;
}

/* The steps log tensors, not numbers read from them: on a GPU a read
 * (fulmen_tensor_item) would make every step wait for the device, while
 * a logged tensor is read only where the trainer reads values anyway. */
static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss_out) {
    task *t = userdata;
    fulmen_tensor *x = NULL, *y = NULL, *pred = NULL;
    fulmen_error *err = fulmen_batch_get(batch, 0, &x);
    if (err == NULL) err = fulmen_batch_get(batch, 1, &y);
    if (err == NULL) err = predict(t, x, &pred);
    if (err == NULL) err = fulmen_loss_mse(pred, y, FULMEN_REDUCTION_MEAN, loss_out);
    if (err == NULL && t->loss_log != NULL) {
        /* --loss-log asks for every step's loss: read at each step. */
        double value = 0;
        err = fulmen_tensor_item(*loss_out, &value);
        if (err == NULL) fprintf(t->loss_log, "%.9g\n", value);
    }
    if (err == NULL)
        err = fulmen_step_context_log_tensor(ctx, "train_loss", *loss_out, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return err;
}

static fulmen_error *validation_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch) {
    task *t = userdata;
    fulmen_tensor *x = NULL, *y = NULL, *pred = NULL, *mae = NULL, *scaled = NULL;
    fulmen_error *err = fulmen_batch_get(batch, 0, &x);
    if (err == NULL) err = fulmen_batch_get(batch, 1, &y);
    if (err == NULL) err = predict(t, x, &pred);
    if (err == NULL) err = fulmen_loss_l1(pred, y, FULMEN_REDUCTION_MEAN, &mae);
    if (err == NULL) err = fulmen_tensor_mul_scalar(mae, t->scale, &scaled);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "val_mae", scaled, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR, 0);
    return err;
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    task *t = userdata;
    fulmen_adam_options opts = fulmen_adam_options_default();
    opts.lr = t->lr;
    fulmen_optimizer *adam = NULL;
    fulmen_error *err = fulmen_optimizer_adam_new(t->model, NULL, 0, &opts, &adam);
    if (err != NULL) return err;
    err = fulmen_optimizer_config_add(config, adam, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (err != NULL) fulmen_optimizer_free(adam);
    return err;
}

/* Reads elnino.csv: a header, then "YEAR,jan,...,dec" per row. */
static size_t read_series(const char *path, double *months) {
    FILE *f = fopen(path, "r");
    if (f == NULL) { perror(path); exit(1); }
    char line[1024];
    size_t n = 0;
    if (fgets(line, sizeof line, f) == NULL) { fprintf(stderr, "forecast: %s is empty\n", path); exit(1); }
    while (fgets(line, sizeof line, f) != NULL) {
        char *p = line, *end = NULL;
        strtod(p, &end); /* the year */
        for (int m = 0; m < SEASON; m++) {
            if (end == p || *end != ',' || n == MAX_MONTHS) {
                fprintf(stderr, "forecast: %s: expected a year and 12 months per row\n", path);
                exit(1);
            }
            p = end + 1;
            months[n++] = strtod(p, &end);
        }
    }
    fclose(f);
    return n;
}

/* Windows of the standardised series z: x [count, window, 1] holds the
 * months before each target in [from, to), y [count, 1] the target. */
static fulmen_dataset *windows(const float *z, size_t from, size_t to, long window) {
    size_t count = to - from;
    float *x = malloc(count * (size_t)window * sizeof *x), *y = malloc(count * sizeof *y);
    if (x == NULL || y == NULL) { fprintf(stderr, "forecast: out of memory\n"); exit(1); }
    for (size_t i = 0; i < count; i++) {
        memcpy(x + i * (size_t)window, z + from + i - (size_t)window, (size_t)window * sizeof *x);
        y[i] = z[from + i];
    }
    const int64_t xs[3] = {(int64_t)count, window, 1}, ys[2] = {(int64_t)count, 1};
    fulmen_tensor *tx = NULL, *ty = NULL;
    check(fulmen_tensor_from_data(x, count * (size_t)window * sizeof *x, FULMEN_DTYPE_F32, xs, 3, &tx), "windows");
    check(fulmen_tensor_from_data(y, count * sizeof *y, FULMEN_DTYPE_F32, ys, 2, &ty), "windows");
    free(x);
    free(y);
    const fulmen_tensor *parts[2] = {tx, ty};
    fulmen_dataset *ds = NULL;
    check(fulmen_dataset_from_tensors(parts, 2, &ds), "dataset");
    fulmen_tensor_free(tx);
    fulmen_tensor_free(ty);
    return ds;
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = "runs/forecast", *init_out = NULL, *loss_log = NULL;
    long epochs = 40, batch_size = 32, window = 24, hidden = 32, seed = 42, threads = 0, limit_batches = 0;
    double lr = 1e-2;
    int shuffle = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-shuffle") == 0) { shuffle = 0; continue; }
        if (v == NULL) { fprintf(stderr, "forecast: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--init-out") == 0) init_out = v;
        else if (strcmp(a, "--loss-log") == 0) loss_log = v;
        else if (strcmp(a, "--epochs") == 0) epochs = atol(v);
        else if (strcmp(a, "--batch-size") == 0) batch_size = atol(v);
        else if (strcmp(a, "--window") == 0) window = atol(v);
        else if (strcmp(a, "--hidden") == 0) hidden = atol(v);
        else if (strcmp(a, "--lr") == 0) lr = atof(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else if (strcmp(a, "--threads") == 0) threads = atol(v);
        else if (strcmp(a, "--limit-batches") == 0) limit_batches = atol(v);
        else { fprintf(stderr, "forecast: unknown option %s\n", a); return 2; }
        i++;
    }
    if (data == NULL || window < SEASON || batch_size < 1 || hidden < 1) {
        fprintf(stderr, "usage: forecast --data elnino.csv [--epochs N] [--batch-size N] [--window N>=12] [--hidden N] [--lr X] [--seed N] [--threads N] [--limit-batches N] [--no-shuffle] [--out DIR] [--init-out FILE] [--loss-log FILE]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with the trainer's progress */
    printf("fulmen %s on libtorch %s\n", fulmen_version(), fulmen_libtorch_version());
    if (threads > 0) check(fulmen_set_num_threads((int32_t)threads), "setting threads");
    check(fulmen_manual_seed((uint64_t)seed), "seeding");

    double *months = malloc(MAX_MONTHS * sizeof *months);
    if (months == NULL) { fprintf(stderr, "forecast: out of memory\n"); return 1; }
    size_t n = read_series(data, months);
    if (n < VAL_MONTHS + (size_t)window + 1) { fprintf(stderr, "forecast: %zu months are too few\n", n); return 1; }
    size_t split = n - VAL_MONTHS;
    double mean = 0, var = 0;
    for (size_t i = 0; i < split; i++) mean += months[i];
    mean /= (double)split;
    for (size_t i = 0; i < split; i++) var += (months[i] - mean) * (months[i] - mean);
    double std = sqrt(var / (double)(split - 1));
    float *z = malloc(n * sizeof *z);
    if (z == NULL) { fprintf(stderr, "forecast: out of memory\n"); return 1; }
    for (size_t i = 0; i < n; i++) z[i] = (float)((months[i] - mean) / std);
    fulmen_dataset *train = windows(z, (size_t)window, split, window);
    fulmen_dataset *val = windows(z, split, n, window);
    double naive = 0;
    for (size_t i = split; i < n; i++) naive += fabs(months[i] - months[i - SEASON]);
    naive /= VAL_MONTHS;
    printf("%zu months; %zu training and %d validation targets, windows of %ld months\n", n, split - (size_t)window,
           VAL_MONTHS, window);

    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch_size;
    lo.shuffle = shuffle;
    lo.seed = (uint64_t)seed;
    fulmen_loader *train_loader = NULL, *val_loader = NULL;
    check(fulmen_loader_new(train, &lo, &train_loader), "train loader");
    lo.shuffle = false;
    lo.batch_size = VAL_MONTHS;
    check(fulmen_loader_new(val, &lo, &val_loader), "val loader");

    fulmen_model *model = NULL, *lstm = NULL, *head = NULL;
    fulmen_rnn_options ro = fulmen_rnn_options_default();
    ro.batch_first = true;
    check(fulmen_model_named_new(&model), "model");
    check(fulmen_model_lstm_new(1, hidden, &ro, &lstm), "lstm");
    check(fulmen_model_add(model, "lstm", lstm), "lstm");
    check(fulmen_model_linear_new(hidden, 1, true, &head), "head");
    check(fulmen_model_add(model, "head", head), "head");
    task t = {model, lr, std, NULL};
    if (init_out != NULL) check(fulmen_model_save(model, init_out), "saving the initial weights");
    if (loss_log != NULL && (t.loss_log = fopen(loss_log, "w")) == NULL) { perror(loss_log); return 1; }

    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &t;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, model, &module), "creating the module");
    mkdir(out, 0755);
    fulmen_trainer_options *opts = NULL;
    check(fulmen_trainer_options_new(&opts), "options");
    check(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    check(fulmen_trainer_options_set_int(opts, "num_sanity_val_steps", 0), "num_sanity_val_steps");
    check(fulmen_trainer_options_set(opts, "default_root_dir", out), "default_root_dir");
    if (limit_batches > 0) check(fulmen_trainer_options_set_int(opts, "limit_train_batches", limit_batches), "limit");
    fulmen_trainer *trainer = NULL;
    check(fulmen_trainer_new(opts, &trainer), "creating the trainer");
    check(fulmen_trainer_fit(trainer, module, train_loader, val_loader, NULL), "training");
    if (t.loss_log != NULL) fclose(t.loss_log);

    double mae = 0;
    check(fulmen_trainer_callback_metric(trainer, "val_mae", &mae), "reading val_mae");
    printf("validation MAE: LSTM %.3f degrees, seasonal naive %.3f degrees (%s)\n", mae, naive,
           mae < naive ? "the LSTM is better" : "the LSTM is NOT better");
    char weights[4096];
    snprintf(weights, sizeof weights, "%s/model.safetensors", out);
    check(fulmen_model_save(model, weights), "saving the weights");
    printf("weights: %s\n", weights);

    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(model);
    fulmen_loader_free(train_loader);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    free(z);
    free(months);
    return 0;
}

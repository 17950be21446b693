/* fulmen's side of the logger parity test (tests/interop/logger_parity.py
 * makes the same calls on Lightning's CSVLogger and TensorBoardLogger and
 * reads both with Python's csv module and TensorBoard's EventAccumulator).
 *
 *   logger_parity OUT
 *
 * OUT/csv: CSV loggers (save_dir OUT/csv) with the script's settings and
 * calls. OUT/tb: a TensorBoard logger with scalars, hyperparameters,
 * images, histograms and a text. OUT/trainer-option and OUT/trainer-handles:
 * a two-epoch fit logging to CSV and TensorBoard at once (the `logger`
 * option's pair, then two logger handles), media from on_train_epoch_end.
 * Prints "<label> <log_dir>" per logger. A failed call prints its error and
 * exits 1. The data are formulas the script evaluates the same way. */
#include <fulmen.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "logger_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),             \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static const char *out_dir;

static void print_dir(const char *label, fulmen_logger *l) {
    char dir[1024];
    size_t len = 0;
    TRY(fulmen_logger_log_dir(l, dir, sizeof dir, &len));
    printf("%s %s\n", label, dir);
}

static void metrics(fulmen_logger *l, int64_t step, size_t n, const char *const *names, const double *values) {
    TRY(fulmen_logger_log_metrics(l, names, values, n, step));
}

static fulmen_logger *csv_logger(const char *save, const char *name, int64_t version, const char *version_name) {
    fulmen_logger *l = NULL;
    TRY(fulmen_logger_csv_new(save, &l));
    TRY(fulmen_logger_set_name(l, name));
    if (version_name != NULL) TRY(fulmen_logger_set_version_name(l, version_name));
    if (version >= 0) TRY(fulmen_logger_set_version(l, version));
    return l;
}

/* The script's CSVLogger calls, in order. */
static void csv_part(void) {
    char save[900];
    snprintf(save, sizeof save, "%s/csv", out_dir);

    fulmen_logger *a = csv_logger(save, "exp", -1, NULL);
    TRY(fulmen_logger_set_prefix(a, "p"));
    TRY(fulmen_logger_set_flush_logs_every_n_steps(a, 2));
    const char *hk[3] = {"lr", "name", "depth"}, *hv[3] = {"0.1", "mlp", "3"};
    TRY(fulmen_logger_log_hyperparams(a, hk, hv, 3));
    const char *n0[2] = {"loss", "epoch"}, *n1[2] = {"val_acc", "zeta"}, *n2[1] = {"a,b"};
    const char *n3[3] = {"loss", "tiny", "neg"}, *n5[2] = {"q\"uote", "missing"}, *n99[1] = {"loss"};
    double v0[2] = {1.0, 0.0}, v1[2] = {1e-5, 1e16}, v2[1] = {2.5};
    double v3[3] = {(double)0.1f, 1e-300, -0.0}, v5[2] = {3.0, NAN}, v99[1] = {123456789.125};
    metrics(a, 0, 2, n0, v0);
    metrics(a, 1, 2, n1, v1);
    metrics(a, 2, 1, n2, v2);
    metrics(a, 3, 3, n3, v3);
    metrics(a, 4, 0, NULL, NULL);
    metrics(a, 5, 2, n5, v5);
    metrics(a, 99, 1, n99, v99);
    TRY(fulmen_logger_finalize(a, "success"));
    print_dir("csv-a", a);
    fulmen_logger_free(a);

    fulmen_logger *b = csv_logger(save, NULL, 7, NULL);
    const char *nx[1] = {"x"};
    double vx[1] = {1.5};
    metrics(b, 0, 1, nx, vx);
    TRY(fulmen_logger_finalize(b, "success"));
    print_dir("csv-b", b);
    fulmen_logger_free(b);

    fulmen_logger *c = csv_logger(save, "exp", -1, "named-run");
    const char *ny[1] = {"y"};
    double vy[1] = {2.0};
    metrics(c, 10, 1, ny, vy);
    TRY(fulmen_logger_finalize(c, "success"));
    print_dir("csv-c", c);
    fulmen_logger_free(c);

    fulmen_logger *d = NULL;
    TRY(fulmen_logger_csv_new(save, &d));
    const char *nz[1] = {"z"};
    double vz[1] = {0.5};
    metrics(d, 0, 1, nz, vz);
    TRY(fulmen_logger_finalize(d, "success"));
    print_dir("csv-d", d);
    fulmen_logger_free(d);
}

/* Image values: (c * 7 + y * 3 + x) % 11 / 10 - 0.05 (some below 0, some above 1). */
static float pixel(int c, int y, int x) { return (float)(((c * 7 + y * 3 + x) % 11) / 10.0 - 0.05); }

static fulmen_tensor *tensor(const void *data, size_t nbytes, int32_t dtype, const int64_t *shape, size_t ndim) {
    fulmen_tensor *t = NULL;
    TRY(fulmen_tensor_from_data(data, nbytes, dtype, shape, ndim, &t));
    return t;
}

/* The script's TensorBoardLogger calls, in order. */
static void tb_part(void) {
    char save[900];
    snprintf(save, sizeof save, "%s/tb", out_dir);
    fulmen_logger *l = NULL;
    TRY(fulmen_logger_tensorboard_new(save, &l));
    TRY(fulmen_logger_set_name(l, "tbexp"));
    TRY(fulmen_logger_set_prefix(l, "train"));
    const char *hk[4] = {"batch_size", "lr", "optimizer", "shuffle"}, *hv[4] = {"64", "0.001", "adam", "true"};
    TRY(fulmen_logger_log_hyperparams(l, hk, hv, 4));
    const char *n1[1] = {"loss"}, *n2[2] = {"acc", "loss"};
    double v1[1] = {0.5}, v2[2] = {0.75, 0.25};
    metrics(l, 1, 1, n1, v1);
    metrics(l, 2, 2, n2, v2);

    float chw[3][4][5], gray[4][5], one[1][4][5];
    uint8_t hwc[4][5][4];
    for (int y = 0; y < 4; y++) {
        for (int x = 0; x < 5; x++) {
            for (int c = 0; c < 3; c++) chw[c][y][x] = pixel(c, y, x);
            for (int c = 0; c < 4; c++) hwc[y][x][c] = (uint8_t)((c * 60 + y * 17 + x * 5) % 256);
            gray[y][x] = pixel(1, y, x);
            one[0][y][x] = pixel(2, y, x);
        }
    }
    int64_t s_chw[3] = {3, 4, 5}, s_hwc[3] = {4, 5, 4}, s_hw[2] = {4, 5}, s_one[3] = {1, 4, 5};
    fulmen_tensor *t_chw = tensor(chw, sizeof chw, FULMEN_DTYPE_F32, s_chw, 3);
    fulmen_tensor *t_hwc = tensor(hwc, sizeof hwc, FULMEN_DTYPE_U8, s_hwc, 3);
    fulmen_tensor *t_gray = tensor(gray, sizeof gray, FULMEN_DTYPE_F32, s_hw, 2);
    fulmen_tensor *t_one = tensor(one, sizeof one, FULMEN_DTYPE_F32, s_one, 3);
    TRY(fulmen_logger_add_image(l, "chw", t_chw, 3, "CHW"));
    TRY(fulmen_logger_add_image(l, "hwc_u8", t_hwc, 3, "HWC"));
    TRY(fulmen_logger_add_image(l, "gray", t_gray, 4, "HW"));
    TRY(fulmen_logger_add_image(l, "one_channel", t_one, 4, "CHW"));

    /* 1000 values sin(i) * 3^(i % 7 - 3) as f32; then f64 values from
     * 1e-13 to 1e19 with zeros. */
    float h32[1000];
    for (int i = 0; i < 1000; i++) h32[i] = (float)(sin((double)i) * pow(3.0, (double)(i % 7 - 3)));
    double h64[8] = {0.0, 0.0, 1e-13, -1e-13, 1e19, -2.5, 7.0, 1e-12};
    int64_t s_h32[1] = {1000}, s_h64[1] = {8};
    fulmen_tensor *t_h32 = tensor(h32, sizeof h32, FULMEN_DTYPE_F32, s_h32, 1);
    fulmen_tensor *t_h64 = tensor(h64, sizeof h64, FULMEN_DTYPE_F64, s_h64, 1);
    TRY(fulmen_logger_add_histogram(l, "hist", t_h32, 5));
    TRY(fulmen_logger_add_histogram(l, "hist64", t_h64, 6));
    TRY(fulmen_logger_add_text(l, "notes", "**bold** and `code`", 7));
    TRY(fulmen_logger_finalize(l, "success"));
    print_dir("tb", l);
    fulmen_logger_free(l);
    fulmen_tensor_free(t_chw);
    fulmen_tensor_free(t_hwc);
    fulmen_tensor_free(t_gray);
    fulmen_tensor_free(t_one);
    fulmen_tensor_free(t_h32);
    fulmen_tensor_free(t_h64);
}

/* ---- a fit logging to CSV and TensorBoard at once ---- */

#include "blob_fit.h"

/* on_train_epoch_end: an image, a histogram and a text at the global step. */
static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    int64_t step = 0;
    fulmen_error *e = fulmen_hook_context_global_step(ctx, &step);
    float img[3][2][2];
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 2; x++) img[c][y][x] = pixel(c, y, x + (int)step);
    int64_t shape[3] = {3, 2, 2};
    fulmen_tensor *t = NULL;
    if (e == NULL) e = fulmen_tensor_from_data(img, sizeof img, FULMEN_DTYPE_F32, shape, 3, &t);
    if (e == NULL) e = fulmen_hook_context_add_image(ctx, "epoch_image", t, step, "CHW");
    if (e == NULL) e = fulmen_hook_context_add_histogram(ctx, "epoch_hist", t, step);
    if (e == NULL) e = fulmen_hook_context_add_text(ctx, "epoch_text", "epoch done", step);
    fulmen_tensor_free(t);
    return e;
}

/* A 2-epoch fit under OUT/<name>: with `handles`, the `logger` option off
 * and a CSV and a TensorBoard handle added; else the option's pair. */
static void fit(const char *name, bool handles, fulmen_loader *loader) {
    char root[900];
    snprintf(root, sizeof root, "%s/%s", out_dir, name);
    job j = {NULL};
    blob_mlp(&j);
    fulmen_lightning_module *m = blob_module(&j, on_hook);
    TRY(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    TRY(fulmen_lightning_module_set_hparam(m, "hidden", "8"));
    TRY(fulmen_lightning_module_set_hparam(m, "activation", "tanh"));

    fulmen_trainer_options *o = blob_fit_options(root);
    TRY(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    TRY(fulmen_trainer_options_set(o, "logger", handles ? "false" : "csv,tensorboard"));
    fulmen_trainer *t = NULL;
    TRY(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_logger *csv = NULL, *tb = NULL;
    if (handles) {
        TRY(fulmen_logger_csv_new(root, &csv));
        TRY(fulmen_logger_set_name(csv, "csv"));
        TRY(fulmen_logger_tensorboard_new(root, &tb));
        TRY(fulmen_logger_set_name(tb, "tb"));
        TRY(fulmen_trainer_add_file_logger(t, csv));
        TRY(fulmen_trainer_add_file_logger(t, tb));
    }
    TRY(fulmen_trainer_fit(t, m, loader, loader, NULL));
    if (handles) {
        char label[64];
        snprintf(label, sizeof label, "%s-csv", name);
        print_dir(label, csv);
        snprintf(label, sizeof label, "%s-tb", name);
        print_dir(label, tb);
        fulmen_logger_free(csv);
        fulmen_logger_free(tb);
    } else {
        char dir[1024];
        size_t len = 0;
        TRY(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
        printf("%s-csv %s\n%s-tb %s\n", name, dir, name, dir);
    }
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(j.model);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: logger_parity OUT\n");
        return 2;
    }
    out_dir = argv[1];
    TRY(fulmen_set_num_threads(1));
    csv_part();
    tb_part();
    fulmen_loader *loader = blobs();
    fit("trainer-option", false, loader);
    fit("trainer-handles", true, loader);
    fulmen_loader_free(loader);
    return 0;
}

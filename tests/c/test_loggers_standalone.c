/*
 * The CSV and TensorBoard loggers as handles (Lightning's CSVLogger and
 * TensorBoardLogger): save_dir / name / version layout with Lightning's
 * next free version, prefix, flush_logs_every_n_steps, metrics.csv as
 * Lightning writes it, hparams.yaml, images / histograms / texts, bad
 * arguments; the same handles added to a trainer (both get the run's
 * metrics and hyperparameters), media logged from a hook, and a host
 * logger's after_save_checkpoint.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <dirent.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

/* ---- files ---- */

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static void make_dir(const char *path) { CHECK(mkdir(path, 0700) == 0); }

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f == NULL) return;
    fputs(text, f);
    fclose(f);
}

/* The whole file at `path` (malloc'd) and its size; NULL when unreadable. */
static unsigned char *read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    *len = b != NULL ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static bool has_bytes(const unsigned char *hay, size_t n, const void *needle, size_t m) {
    for (size_t i = 0; m <= n && i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0) return true;
    return false;
}

/* Whether `text` occurs in the event file (the only one) in `dir`; counts
 * the event files in *files. */
static bool event_file_has(const char *dir, const void *text, size_t m, int *files) {
    DIR *d = opendir(dir);
    *files = 0;
    if (d == NULL) return false;
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        (*files)++;
        char path[900];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        unsigned char *b = read_bytes(path, &n);
        if (b != NULL && has_bytes(b, n, text, m)) found = true;
        free(b);
    }
    closedir(d);
    return found;
}

static bool event_has(const char *dir, const char *text) {
    int files = 0;
    return event_file_has(dir, text, strlen(text), &files);
}

static void log_dir_of(fulmen_logger *l, char *dir, size_t cap) {
    size_t len = 0;
    dir[0] = '\0';
    CHECK_OK(fulmen_logger_log_dir(l, dir, cap, &len));
}

static fulmen_error *log_two(fulmen_logger *l, const char *a, double va, const char *b, double vb, int64_t step) {
    const char *names[2] = {a, b};
    double values[2] = {va, vb};
    return fulmen_logger_log_metrics(l, names, values, b == NULL ? 1 : 2, step);
}

static bool file_is(const char *path, const char *want) {
    char *text = fixture_read_text(path);
    bool same = text != NULL && strcmp(text, want) == 0;
    if (!same) fprintf(stderr, "%s holds [%s], expected [%s]\n", path, text != NULL ? text : "(none)", want);
    free(text);
    return same;
}

/* ---- CSV ---- */

static void test_csv_layout_and_rows(void) {
    char save[400], path[900], dir[700];
    snprintf(save, sizeof save, "%s/csv", root);
    make_dir(save);
    snprintf(path, sizeof path, "%s/exp", save);
    make_dir(path);
    /* Lightning's next version: folders version_<digits>[_...] only. */
    snprintf(path, sizeof path, "%s/exp/version_3_old", save);
    make_dir(path);
    snprintf(path, sizeof path, "%s/exp/version_9", save);
    write_file(path, "a file, not a version");
    snprintf(path, sizeof path, "%s/exp/version_x", save);
    make_dir(path);

    fulmen_logger *l = NULL;
    CHECK_OK(fulmen_logger_csv_new(save, &l));
    CHECK_OK(fulmen_logger_set_name(l, "exp"));
    CHECK_OK(fulmen_logger_set_prefix(l, "p"));
    CHECK_OK(fulmen_logger_set_flush_logs_every_n_steps(l, 2));
    CHECK_ERR(fulmen_logger_set_flush_logs_every_n_steps(l, 0), FULMEN_CODE_INVALID_ARGUMENT, "at least 1");
    CHECK_ERR(fulmen_logger_set_default_hp_metric(l, false), FULMEN_CODE_INVALID_ARGUMENT, "tensorboard logger");
    CHECK_ERR(fulmen_logger_set_version(l, -2), FULMEN_CODE_INVALID_ARGUMENT, "-1");
    CHECK_ERR(fulmen_logger_set_name(l, "../up"), FULMEN_CODE_INVALID_ARGUMENT, "relative");
    CHECK_ERR(fulmen_logger_set_version_name(l, "/abs"), FULMEN_CODE_INVALID_ARGUMENT, "relative");
    snprintf(path, sizeof path, "%s/exp/version_4", save);
    CHECK(!exists(path)); /* nothing on disk before the first use */

    CHECK_OK(log_two(l, "loss", 1.0, "epoch", 0.0, 0));
    log_dir_of(l, dir, sizeof dir);
    CHECK(strcmp(dir, path) == 0);
    int64_t version = -9;
    CHECK_OK(fulmen_logger_version(l, &version));
    CHECK(version == 4);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    CHECK(!exists(path)); /* (0 + 1) % 2 != 0: kept in memory */
    CHECK_OK(log_two(l, "val_acc", 1e-5, "zeta", 1e16, 1));
    CHECK(file_is(path, "p-epoch,p-loss,p-val_acc,p-zeta,step\r\n0.0,1.0,,,0\r\n,,1e-05,1e+16,1\r\n"));
    CHECK_OK(log_two(l, "a,b", 2.5, NULL, 0, 2));
    CHECK_ERR(fulmen_logger_set_name(l, "other"), FULMEN_CODE_INVALID_STATE, "before the first use");
    CHECK_ERR(fulmen_logger_set_prefix(l, "q"), FULMEN_CODE_INVALID_STATE, NULL);

    const char *keys[3] = {"lr", "name", "depth"}, *vals[3] = {"0.1", "mlp", "3"};
    CHECK_OK(fulmen_logger_log_hyperparams(l, keys, vals, 2));
    CHECK_OK(fulmen_logger_log_hyperparams(l, keys + 2, vals + 2, 1)); /* merged */
    CHECK_OK(fulmen_logger_finalize(l, "success"));
    /* A new name widens the header; every column sorted, as Lightning 2.6. */
    CHECK(file_is(path, "\"p-a,b\",p-epoch,p-loss,p-val_acc,p-zeta,step\r\n,0.0,1.0,,,0\r\n,,,1e-05,1e+16,1\r\n"
                        "2.5,,,,,2\r\n"));
    snprintf(path, sizeof path, "%s/hparams.yaml", dir);
    CHECK(file_is(path, "depth: 3\nlr: 0.1\nname: \"mlp\"\n"));

    /* Bad metric arguments change nothing. */
    const char *empty[1] = {""};
    double one = 1.0;
    CHECK_ERR(fulmen_logger_log_metrics(l, NULL, &one, 1, 3), FULMEN_CODE_NULL_ARGUMENT, "names");
    CHECK_ERR(fulmen_logger_log_metrics(l, empty, &one, 1, 3), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    CHECK_ERR(fulmen_logger_log_metrics(l, keys, NULL, 1, 3), FULMEN_CODE_NULL_ARGUMENT, "values");
    CHECK_ERR(fulmen_logger_add_text(l, "t", "x", 0), FULMEN_CODE_INVALID_ARGUMENT, "TensorBoard");
    CHECK_ERR(fulmen_logger_finalize(l, NULL), FULMEN_CODE_NULL_ARGUMENT, "status");
    CHECK_OK(fulmen_logger_log_metrics(l, NULL, NULL, 0, 5)); /* a row with only the step */
    fulmen_logger_free(l); /* writes the rows kept in memory */
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char *text = fixture_read_text(path);
    CHECK(text != NULL && strstr(text, "\r\n,,,,,5\r\n") != NULL);
    free(text);
    fulmen_logger_free(l); /* twice: a no-op */

    /* The next logger takes the next number; a given version is reused
     * and its old metrics.csv replaced; a version name is the folder. */
    CHECK_OK(fulmen_logger_csv_new(save, &l));
    CHECK_OK(fulmen_logger_set_name(l, "exp"));
    log_dir_of(l, dir, sizeof dir);
    CHECK(strstr(dir, "/exp/version_5") != NULL);
    fulmen_logger_free(l);
    CHECK_OK(fulmen_logger_csv_new(save, &l));
    CHECK_OK(fulmen_logger_set_name(l, "exp"));
    CHECK_OK(fulmen_logger_set_version(l, 4));
    CHECK_OK(log_two(l, "x", 0.5, NULL, 0, 0));
    CHECK_OK(fulmen_logger_save(l));
    snprintf(path, sizeof path, "%s/exp/version_4/metrics.csv", save);
    CHECK(file_is(path, "step,x\r\n0,0.5\r\n"));
    fulmen_logger_free(l);
    CHECK_OK(fulmen_logger_csv_new(save, &l));
    CHECK_OK(fulmen_logger_set_name(l, NULL));
    CHECK_OK(fulmen_logger_set_version_name(l, "run-a"));
    log_dir_of(l, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/run-a", save);
    CHECK(strcmp(dir, path) == 0);
    CHECK_OK(fulmen_logger_version(l, &version));
    CHECK(version == -1);
    fulmen_logger_free(l);

    /* A CSV logger never used makes nothing at finalize. */
    CHECK_OK(fulmen_logger_csv_new(save, &l));
    CHECK_OK(fulmen_logger_set_version(l, 11));
    CHECK_OK(fulmen_logger_finalize(l, "success"));
    snprintf(path, sizeof path, "%s/lightning_logs/version_11", save);
    CHECK(!exists(path));
    fulmen_logger_free(l);

    /* Bad paths and arguments. */
    CHECK_ERR(fulmen_logger_csv_new(NULL, &l), FULMEN_CODE_NULL_ARGUMENT, "save_dir");
    CHECK_ERR(fulmen_logger_csv_new("", &l), FULMEN_CODE_INVALID_ARGUMENT, "save_dir");
    CHECK_ERR(fulmen_logger_csv_new(save, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    snprintf(path, sizeof path, "%s/blocker", root);
    write_file(path, "");
    CHECK_OK(fulmen_logger_csv_new(path, &l)); /* a save_dir under a file */
    CHECK_ERR(log_two(l, "x", 1.0, NULL, 0, 0), FULMEN_CODE_IO, "blocker");
    size_t len = 0;
    CHECK_ERR(fulmen_logger_log_dir(l, dir, sizeof dir, &len), FULMEN_CODE_IO, NULL);
    fulmen_logger_free(l);
    CHECK_ERR(fulmen_logger_save(NULL), FULMEN_CODE_NULL_ARGUMENT, "logger");
    fulmen_logger_free(NULL);
}

/* ---- TensorBoard ---- */

static void test_tensorboard_media(void) {
    char save[400], dir[700];
    snprintf(save, sizeof save, "%s/tb", root);
    fulmen_logger *l = NULL;
    CHECK_OK(fulmen_logger_tensorboard_new(save, &l));
    CHECK_OK(fulmen_logger_set_name(l, "tbexp"));
    CHECK_OK(fulmen_logger_set_prefix(l, "train"));
    CHECK_ERR(fulmen_logger_set_flush_logs_every_n_steps(l, 5), FULMEN_CODE_INVALID_ARGUMENT, "csv logger");
    const char *keys[2] = {"lr", "optimizer"}, *vals[2] = {"0.001", "adam"};
    CHECK_OK(fulmen_logger_log_hyperparams(l, keys, vals, 2));
    CHECK_OK(log_two(l, "loss", 0.25, NULL, 0, 3));

    float chw[3 * 4 * 5];
    for (int i = 0; i < 60; i++) chw[i] = (float)((i % 11) / 10.0 - 0.05);
    int64_t chw_shape[3] = {3, 4, 5}, hw_shape[2] = {4, 5}, bad_shape[3] = {2, 4, 5};
    fulmen_tensor *img = check_f32(chw, 60, chw_shape, 3), *gray = NULL, *bad = check_f32(chw, 40, bad_shape, 3);
    unsigned char pixels[20];
    for (int i = 0; i < 20; i++) pixels[i] = (unsigned char)(i * 13);
    CHECK_OK(fulmen_tensor_from_data(pixels, sizeof pixels, FULMEN_DTYPE_U8, hw_shape, 2, &gray));
    CHECK_OK(fulmen_logger_add_image(l, "img", img, 4, NULL)); /* CHW */
    CHECK_OK(fulmen_logger_add_image(l, "gray", gray, 4, "HW"));
    CHECK_OK(fulmen_logger_add_histogram(l, "weights", img, 5));
    CHECK_OK(fulmen_logger_add_text(l, "notes", "**hello**", 6));
    CHECK_ERR(fulmen_logger_add_image(l, "img", bad, 4, "CHW"), FULMEN_CODE_SHAPE_MISMATCH, "channels");
    CHECK_ERR(fulmen_logger_add_image(l, "img", gray, 4, "CHW"), FULMEN_CODE_SHAPE_MISMATCH, "dimensions");
    CHECK_ERR(fulmen_logger_add_image(l, "img", img, 4, "CHX"), FULMEN_CODE_INVALID_ARGUMENT, "dataformats");
    CHECK_ERR(fulmen_logger_add_image(l, "img", img, 4, "NCHW"), FULMEN_CODE_INVALID_ARGUMENT, "4-D");
    CHECK_ERR(fulmen_logger_add_image(l, "img", NULL, 4, "CHW"), FULMEN_CODE_NULL_ARGUMENT, "image");
    CHECK_ERR(fulmen_logger_add_image(l, "", img, 4, "CHW"), FULMEN_CODE_INVALID_ARGUMENT, "tag");
    fulmen_tensor *none = NULL;
    int64_t zero_shape[1] = {0};
    CHECK_OK(fulmen_tensor_zeros(zero_shape, 1, FULMEN_DTYPE_F32, &none));
    CHECK_ERR(fulmen_logger_add_histogram(l, "w", none, 5), FULMEN_CODE_INVALID_ARGUMENT, "value");
    CHECK_ERR(fulmen_logger_add_text(l, "t", NULL, 6), FULMEN_CODE_NULL_ARGUMENT, "text");
    CHECK_OK(fulmen_logger_finalize(l, "success"));
    log_dir_of(l, dir, sizeof dir);
    CHECK(strstr(dir, "/tb/tbexp/version_0") != NULL);
    int files = 0;
    static const unsigned char png[4] = {0x89, 'P', 'N', 'G'};
    CHECK(event_file_has(dir, png, sizeof png, &files) && files == 1);
    CHECK(event_has(dir, "train-loss") && event_has(dir, "train-hp_metric") && event_has(dir, "_hparams_/experiment"));
    CHECK(event_has(dir, "weights") && event_has(dir, "notes/text_summary") && event_has(dir, "**hello**"));
    CHECK(!event_has(dir, "train-img")); /* media tags are not prefixed */
    char path[900];
    snprintf(path, sizeof path, "%s/hparams.yaml", dir);
    CHECK(file_is(path, "lr: 0.001\noptimizer: \"adam\"\n"));
    /* After finalize, logging opens a new event file (torch's SummaryWriter). */
    CHECK_OK(fulmen_logger_add_text(l, "late", "again", 7));
    CHECK_OK(fulmen_logger_finalize(l, "success"));
    CHECK(event_file_has(dir, "again", 5, &files) && files == 2);
    fulmen_logger_free(l);
    fulmen_tensor_free(img);
    fulmen_tensor_free(gray);
    fulmen_tensor_free(bad);
    fulmen_tensor_free(none);
}

/* ---- with a trainer ---- */

typedef struct {
    fulmen_model *model;
    int media_code; /* code of the hook's add_text (-1: not called) */
    int checkpoints;
    char last_checkpoint[700];
} hooked;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **loss) {
    hooked *h = ud;
    fulmen_error *e = fixture_cross_entropy(h->model, batch, loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", check_item(*loss), FULMEN_LOG_ON_STEP, 0);
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    hooked *h = ud;
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    int64_t gs = 0;
    fulmen_error *e = fulmen_hook_context_global_step(ctx, &gs);
    if (e != NULL) return e;
    fulmen_error *t = fulmen_hook_context_add_text(ctx, "epoch_note", "end of epoch", gs);
    h->media_code = fulmen_error_code(t);
    if (t != NULL) {
        fulmen_error_free(t); /* a run without TensorBoard: recorded, not fatal */
        return NULL;
    }
    int64_t shape[2] = {4, 6};
    fulmen_tensor *w = NULL;
    e = fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &w);
    if (e == NULL) e = fulmen_hook_context_add_histogram(ctx, "w0", w, gs);
    if (e == NULL) e = fulmen_hook_context_add_image(ctx, "w0_image", w, gs, "HW");
    fulmen_tensor_free(w);
    return e;
}

static fulmen_error *ckpt_saved(void *ud, const char *path) {
    hooked *h = ud;
    h->checkpoints++;
    snprintf(h->last_checkpoint, sizeof h->last_checkpoint, "%s", path);
    return NULL;
}

/* Quiet options under `save`: `epochs`, the `logger` option, step metrics
 * logged at every step. */
static fulmen_trainer_options *options(const char *save, int64_t epochs, const char *logger) {
    fulmen_trainer_options *o = fixture_options(save, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", logger));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    return o;
}

static void test_trainer_with_handles(fulmen_loader *tl) {
    hooked h = {.model = fixture_mlp(8, 0), .media_code = -1};
    fulmen_lightning_module *m = fixture_module(h.model, &h, step, on_hook);
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    char save[400], csv_dir[700], tb_dir[700], run_dir[700], path[900];
    snprintf(save, sizeof save, "%s/both", root);

    fulmen_logger *csv = NULL, *tb = NULL;
    CHECK_OK(fulmen_logger_csv_new(save, &csv));
    CHECK_OK(fulmen_logger_set_name(csv, "csv_run"));
    CHECK_OK(fulmen_logger_tensorboard_new(save, &tb));
    CHECK_OK(fulmen_logger_set_name(tb, "tb_run"));
    fulmen_trainer_options *o = options(save, 2, "false");
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_add_file_logger(t, csv));
    CHECK_OK(fulmen_trainer_add_file_logger(t, tb));
    CHECK_ERR(fulmen_trainer_add_file_logger(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "logger");
    /* A host logger with after_save_checkpoint; one of the first layout
     * (ending before that slot) is still accepted. */
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = &h;
    v.after_save_checkpoint = ckpt_saved;
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    fulmen_logger_vtable old = v;
    old.struct_size = offsetof(fulmen_logger_vtable, after_save_checkpoint);
    CHECK_OK(fulmen_trainer_add_logger(t, &old));
    old.struct_size = offsetof(fulmen_logger_vtable, after_save_checkpoint) - 1;
    CHECK_ERR(fulmen_trainer_add_logger(t, &old), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");

    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(h.media_code == 0);
    log_dir_of(csv, csv_dir, sizeof csv_dir);
    log_dir_of(tb, tb_dir, sizeof tb_dir);
    size_t len = 0;
    CHECK_OK(fulmen_trainer_log_dir(t, run_dir, sizeof run_dir, &len));
    /* The first added logger's folder is the run's (Lightning's trainer.log_dir). */
    CHECK(strcmp(run_dir, csv_dir) == 0 && strstr(csv_dir, "/both/csv_run/version_0") != NULL);
    CHECK(strstr(tb_dir, "/both/tb_run/version_0") != NULL);
    /* Both loggers got the run's metrics (with epoch) and hyperparameters. */
    snprintf(path, sizeof path, "%s/metrics.csv", csv_dir);
    char *text = fixture_read_text(path);
    CHECK(text != NULL && strncmp(text, "epoch,step,train_loss\r\n0,0,", 27) == 0);
    free(text);
    CHECK(event_has(tb_dir, "train_loss") && event_has(tb_dir, "epoch") && event_has(tb_dir, "_hparams_/session_start_info"));
    snprintf(path, sizeof path, "%s/hparams.yaml", csv_dir);
    CHECK(file_is(path, "lr: 0.1\n"));
    snprintf(path, sizeof path, "%s/hparams.yaml", tb_dir);
    CHECK(file_is(path, "lr: 0.1\n"));
    /* Media from the hook went to the TensorBoard logger. */
    CHECK(event_has(tb_dir, "w0_image") && event_has(tb_dir, "w0") && event_has(tb_dir, "epoch_note/text_summary"));
    /* after_save_checkpoint after each checkpoint of the default
     * ModelCheckpoint (one per epoch), under the run's folder. */
    CHECK(h.checkpoints == 2);
    snprintf(path, sizeof path, "%s/checkpoints/", csv_dir);
    CHECK(strncmp(h.last_checkpoint, path, strlen(path)) == 0 && exists(h.last_checkpoint));
    /* The handles stay usable and freeable while the trainer holds them. */
    fulmen_logger_free(csv);
    fulmen_logger_free(tb);
    /* one more epoch logs on into the same folders */
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 3));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    int files = 0;
    CHECK(event_file_has(tb_dir, "w0_image", 8, &files) && files == 2);
    fulmen_trainer_free(t);

    /* A run with CSV only: media from a hook is refused (not written). */
    h.media_code = -1;
    o = options(save, 1, "csv");
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(h.media_code == FULMEN_CODE_INVALID_STATE);
    fulmen_trainer_free(t);

    /* The `logger` option's CSV and TensorBoard loggers share a folder and
     * get the same metrics. */
    o = options(save, 1, "csv,tensorboard");
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(h.media_code == 0);
    CHECK_OK(fulmen_trainer_log_dir(t, run_dir, sizeof run_dir, &len));
    CHECK(event_has(run_dir, "train_loss") && event_has(run_dir, "epoch_note/text_summary"));
    snprintf(path, sizeof path, "%s/metrics.csv", run_dir);
    text = fixture_read_text(path);
    CHECK(text != NULL && strncmp(text, "epoch,step,train_loss\r\n", 23) == 0);
    free(text);
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_model_free(h.model);
}

/* A TensorBoard logger's sub_dir (Lightning's): its files and
 * hparams.yaml go below the run's folder, and so does the trainer's
 * log_dir, while the default ModelCheckpoint writes to the run's folder's
 * checkpoints/, as Lightning resolves it from save_dir, name and version.
 * Refused on a CSV logger, outside the save folder, and after first use. */
static void test_tensorboard_sub_dir(fulmen_loader *tl) {
    hooked h = {.model = fixture_mlp(8, 0), .media_code = -1};
    fulmen_lightning_module *m = fixture_module(h.model, &h, step, on_hook);
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    char save[400], tb_dir[700], run_dir[700], path[900];
    snprintf(save, sizeof save, "%s/sub", root);
    fulmen_logger *csv = NULL, *tb = NULL;
    CHECK_OK(fulmen_logger_csv_new(save, &csv));
    CHECK_ERR(fulmen_logger_set_sub_dir(csv, "train"), FULMEN_CODE_INVALID_ARGUMENT, "sub_dir");
    fulmen_logger_free(csv);
    CHECK_OK(fulmen_logger_tensorboard_new(save, &tb));
    CHECK_ERR(fulmen_logger_set_sub_dir(tb, "../out"), FULMEN_CODE_INVALID_ARGUMENT, "sub_dir");
    CHECK_ERR(fulmen_logger_set_sub_dir(tb, "/abs"), FULMEN_CODE_INVALID_ARGUMENT, "sub_dir");
    CHECK_OK(fulmen_logger_set_sub_dir(tb, "train"));
    fulmen_trainer_options *o = options(save, 1, "false");
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_add_file_logger(t, tb));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    log_dir_of(tb, tb_dir, sizeof tb_dir);
    size_t len = 0;
    CHECK_OK(fulmen_trainer_log_dir(t, run_dir, sizeof run_dir, &len));
    CHECK(strcmp(run_dir, tb_dir) == 0 && strstr(tb_dir, "/sub/lightning_logs/version_0/train") != NULL);
    CHECK(event_has(tb_dir, "train_loss"));
    snprintf(path, sizeof path, "%s/hparams.yaml", tb_dir);
    CHECK(file_is(path, "lr: 0.1\n"));
    snprintf(path, sizeof path, "%s/lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt", save);
    CHECK(exists(path));
    snprintf(path, sizeof path, "%s/checkpoints", tb_dir);
    CHECK(!exists(path));
    CHECK_ERR(fulmen_logger_set_sub_dir(tb, "later"), FULMEN_CODE_INVALID_STATE, "sub_dir");
    fulmen_logger_free(tb);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(h.model);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-loggers-standalone-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    test_csv_layout_and_rows();
    test_tensorboard_media();
    fulmen_dataset *ds = fixture_blobs(32, 1, 2.0f);
    fulmen_loader *tl = fixture_loader(ds, 8, true, 7);
    test_trainer_with_handles(tl);
    test_tensorboard_sub_dir(tl);
    fulmen_loader_free(tl);
    fulmen_dataset_free(ds);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_loggers_standalone");
}

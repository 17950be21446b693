/*
 * Loggers through the C API: the CSV logger's files in Lightning's layout,
 * TensorBoard event files, the `logger` option, and host loggers (metrics,
 * hyperparameters, finalize, errors, userdata_free).
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

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 2.0f); }

static fulmen_model *mlp(void) { return fixture_mlp(16, 0); }

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 7); }

static fulmen_trainer *trainer_with(long epochs, const char *logger, const char *const *kv) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", logger));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 2));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    for (; kv != NULL && kv[0] != NULL; kv += 2) CHECK_OK(fulmen_trainer_options_set(o, kv[0], kv[1]));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* ---- the module ---- */

typedef struct {
    fulmen_model *model;
    int fail_at_step;
    double loss_at[64]; /* training loss per global step */
} fixture;

static fulmen_error *loss_of(fixture *f, const fulmen_batch *batch, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(f->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    int64_t step = 0;
    CHECK_OK(fulmen_step_context_global_step(ctx, &step));
    if (step == f->fail_at_step) return fulmen_error_new(FULMEN_CODE_CALLBACK, "training exploded");
    fulmen_error *e = loss_of(f, batch, out);
    if (e == NULL && step < 64) f->loss_at[step] = check_item(*out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", check_item(*out), FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = loss_of(ud, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", check_item(loss), 0, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

/* ---- a host logger recording every call ---- */

enum { MAX_CALLS = 64 };

typedef struct {
    int n;
    int64_t step[MAX_CALLS], epoch[MAX_CALLS];
    char names[MAX_CALLS][160]; /* sorted names joined by ',' */
    double val_loss[MAX_CALLS];
    int hparams_calls, finalize_calls, freed;
    char hparams[256];
    char status[32];
    int fail_on_call; /* log_metrics call that fails (-1 never) */
} host_log;

static fulmen_error *h_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch, int64_t step) {
    host_log *h = ud;
    if (h->n == h->fail_on_call) return fulmen_error_new(FULMEN_CODE_IO, "disk full");
    if (h->n >= MAX_CALLS) return NULL;
    h->step[h->n] = step;
    h->epoch[h->n] = epoch;
    h->names[h->n][0] = '\0';
    h->val_loss[h->n] = NAN;
    for (size_t i = 0; i < n; i++) {
        if (i > 0) strcat(h->names[h->n], ",");
        strncat(h->names[h->n], names[i], 40);
        if (strcmp(names[i], "val_loss") == 0) h->val_loss[h->n] = values[i];
        if (i > 0) CHECK(strcmp(names[i - 1], names[i]) < 0);
    }
    h->n++;
    return NULL;
}

static fulmen_error *h_hparams(void *ud, const char *const *keys, const char *const *values, size_t n) {
    host_log *h = ud;
    h->hparams_calls++;
    h->hparams[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char kv[64];
        snprintf(kv, sizeof kv, "%s=%s;", keys[i], values[i]);
        if (strlen(h->hparams) + strlen(kv) < sizeof h->hparams) strcat(h->hparams, kv);
    }
    return NULL;
}

static fulmen_error *h_finalize(void *ud, const char *status) {
    host_log *h = ud;
    h->finalize_calls++;
    snprintf(h->status, sizeof h->status, "%s", status);
    return NULL;
}

static void h_free(void *ud) { ((host_log *)ud)->freed++; }

static fulmen_logger_vtable host_vtable(host_log *h) {
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = h;
    v.userdata_free = h_free;
    v.log_metrics = h_metrics;
    v.log_hyperparams = h_hparams;
    v.finalize = h_finalize;
    return v;
}

/* ---- files ---- */

/* Size of the first file in `dir` whose name starts with `prefix` (-1: none). */
static long file_with_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    long size = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            char path[700];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (stat(path, &st) == 0) size = (long)st.st_size;
            break;
        }
    }
    closedir(d);
    return size;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* One CSV row: the metric columns that hold a value (sorted, ','-joined),
 * epoch, step, and the val_loss cell. */
typedef struct {
    char names[160];
    long epoch, step;
    double val_loss, train_loss_step;
} csv_row;

/* Drops the '\r' of a "\r\n" line end (Python's csv module writes them). */
static char *chomp(char *line) {
    size_t n = line != NULL ? strlen(line) : 0;
    if (n > 0 && line[n - 1] == '\r') line[n - 1] = '\0';
    return line;
}

static int parse_csv(char *text, csv_row *rows, int cap, char *header, size_t hcap) {
    char *save = NULL, *line = chomp(strtok_r(text, "\n", &save));
    if (line == NULL) return -1;
    snprintf(header, hcap, "%s", line);
    char cols[16][48];
    int ncols = 0;
    for (char *p = line, *c; ncols < 16 && p != NULL; p = c ? c + 1 : NULL) {
        c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        snprintf(cols[ncols++], sizeof cols[0], "%.*s", (int)len, p);
    }
    int n = 0;
    while ((line = chomp(strtok_r(NULL, "\n", &save))) != NULL && n < cap) {
        csv_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        r->val_loss = r->train_loss_step = NAN;
        int col = 0;
        for (char *p = line, *c; col < ncols && p != NULL; p = c ? c + 1 : NULL, col++) {
            c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            if (len == 0) continue;
            char cell[64];
            snprintf(cell, sizeof cell, "%.*s", (int)len, p);
            if (strcmp(cols[col], "epoch") == 0) r->epoch = atol(cell);
            else if (strcmp(cols[col], "step") == 0) r->step = atol(cell);
            else {
                if (r->names[0] != '\0') strcat(r->names, ",");
                strcat(r->names, cols[col]);
                if (strcmp(cols[col], "val_loss") == 0) r->val_loss = strtod(cell, NULL);
                if (strcmp(cols[col], "train_loss_step") == 0) r->train_loss_step = strtod(cell, NULL);
            }
        }
    }
    return n;
}

/* 2 epochs x 4 batches, 2 validation batches, log_every_n_steps 2. */
static void test_csv_and_host(fulmen_loader *tl, fulmen_loader *vl) {
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "name", "mlp"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "hidden", "8"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "hidden", "16")); /* replaced */
    CHECK_ERR(fulmen_lightning_module_set_hparam(m, "k", NULL), FULMEN_CODE_NULL_ARGUMENT, "value");
    CHECK_ERR(fulmen_lightning_module_set_hparam(m, "\xff", "1"), FULMEN_CODE_INVALID_ARGUMENT, "UTF-8");
    /* Any UTF-8 key is kept (hparams.yaml quotes what YAML would misread). */
    fulmen_lightning_module *other = module_for(&f);
    CHECK_OK(fulmen_lightning_module_set_hparam(other, "a: b", "x\ny"));
    CHECK_OK(fulmen_lightning_module_set_hparam(other, "", "1"));
    fulmen_lightning_module_free(other);

    host_log h;
    memset(&h, 0, sizeof h);
    h.fail_on_call = -1;
    fulmen_logger_vtable v = host_vtable(&h);
    fulmen_trainer *t = trainer_with(2, "csv", NULL);
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));

    char dir[512], path[700], expect_dir[400], header[256];
    size_t len = 0;
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    snprintf(expect_dir, sizeof expect_dir, "%s/lightning_logs/version_0", root);
    CHECK(strcmp(dir, expect_dir) == 0);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char *text = fixture_read_text(path);
    CHECK(text != NULL);
    csv_row rows[32];
    int n = text != NULL ? parse_csv(text, rows, 32, header, sizeof header) : -1;
    /* Every column sorted, as Lightning 2.6's CSVLogger writes them. */
    CHECK(strcmp(header, "epoch,step,train_loss_epoch,train_loss_step,val_loss") == 0);
    /* Lightning's rows: step metrics at steps 1, 3 (every 2nd step), then
     * validation and the training epoch means at the epoch's last step */
    static const struct {
        long epoch, step;
        const char *names;
    } want[] = {{0, 1, "train_loss_step"}, {0, 3, "train_loss_step"}, {0, 3, "val_loss"}, {0, 3, "train_loss_epoch"},
                {1, 5, "train_loss_step"}, {1, 7, "train_loss_step"}, {1, 7, "val_loss"}, {1, 7, "train_loss_epoch"}};
    CHECK(n == 8);
    for (int i = 0; i < n && i < 8; i++) {
        bool ok = rows[i].epoch == want[i].epoch && rows[i].step == want[i].step && strcmp(rows[i].names, want[i].names) == 0;
        if (!ok) fprintf(stderr, "csv row %d: epoch %ld step %ld [%s]\n", i, rows[i].epoch, rows[i].step, rows[i].names);
        CHECK(ok);
    }
    if (n == 8) {
        CHECK_NEAR(rows[0].train_loss_step, f.loss_at[1], 1e-6);
        CHECK_NEAR(rows[5].train_loss_step, f.loss_at[7], 1e-6);
        double val = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &val));
        CHECK_NEAR(rows[6].val_loss, val, 1e-9);
    }
    /* the host logger got the same calls as the CSV rows */
    CHECK(h.n == n);
    for (int i = 0; i < n && i < h.n; i++) {
        bool ok = h.step[i] == rows[i].step && h.epoch[i] == rows[i].epoch && strcmp(h.names[i], rows[i].names) == 0;
        if (!ok) fprintf(stderr, "host call %d: epoch %ld step %ld [%s]\n", i, (long)h.epoch[i], (long)h.step[i], h.names[i]);
        CHECK(ok);
    }
    if (n == 8 && h.n == 8) CHECK(h.val_loss[6] == rows[6].val_loss);
    free(text);

    snprintf(path, sizeof path, "%s/hparams.yaml", dir);
    text = fixture_read_text(path);
    CHECK(text != NULL && strstr(text, "lr: 0.1\n") != NULL && strstr(text, "hidden: 16\n") != NULL);
    CHECK(text != NULL && (strstr(text, "name: mlp\n") != NULL || strstr(text, "name: \"mlp\"\n") != NULL ||
                           strstr(text, "name: 'mlp'\n") != NULL));
    free(text);
    CHECK(h.hparams_calls == 1 && strcmp(h.hparams, "hidden=16;lr=0.1;name=mlp;") == 0);
    CHECK(h.finalize_calls == 1 && strcmp(h.status, "success") == 0);
    snprintf(path, sizeof path, "%s", dir);
    CHECK(file_with_prefix(path, "events.out.tfevents.") == -1); /* csv only */

    /* the next fit, at the finished one's limit, trains and logs nothing
     * (Lightning's trainer keeps its loop's progress) */
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(h.n == 8 && h.finalize_calls == 2);
    /* raised to 4 epochs, the next fit trains epochs 2 and 3 and logs on
     * in version_0, as Lightning's trainer keeps its loggers */
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 4));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    CHECK(strcmp(dir, expect_dir) == 0);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    text = fixture_read_text(path);
    n = text != NULL ? parse_csv(text, rows, 32, header, sizeof header) : -1;
    CHECK(n == 16);
    if (n == 16) {
        CHECK(rows[7].epoch == 1 && rows[7].step == 7); /* the first fit's rows stay */
        CHECK(rows[8].epoch == 2 && rows[8].step == 9 && strcmp(rows[8].names, "train_loss_step") == 0);
        CHECK(rows[15].epoch == 3 && rows[15].step == 15 && strcmp(rows[15].names, "train_loss_epoch") == 0);
    }
    free(text);
    CHECK(h.hparams_calls == 3 && h.finalize_calls == 3 && h.n == 16);
    CHECK(h.epoch[8] == 2 && h.step[15] == 15);

    /* validate sends its metrics to the host logger, at the fit's last step;
     * Lightning's teardown then finalizes every logger with "success" */
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK(h.n == 17 && strcmp(h.names[16], "val_loss") == 0 && h.step[16] == 16);
    if (h.finalize_calls != 4) fprintf(stderr, "after validate: finalize called %d times, expected 4\n", h.finalize_calls);
    CHECK(h.finalize_calls == 4 && strcmp(h.status, "success") == 0);

    /* a failing fit finalizes with "failed" (the third batch of epoch 4) */
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 6));
    f.fail_at_step = 18;
    int before = h.finalize_calls;
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, vl, NULL), FULMEN_CODE_CALLBACK, "training exploded");
    CHECK(h.finalize_calls == before + 1 && strcmp(h.status, "failed") == 0);
    f.fail_at_step = -1;

    /* an error from the host logger stops the run, naming it */
    h.fail_on_call = h.n + 1;
    before = h.finalize_calls;
    fulmen_error *e = fulmen_trainer_fit(t, m, tl, vl, NULL);
    CHECK(fulmen_error_code(e) == FULMEN_CODE_IO);
    CHECK(strstr(fulmen_error_message(e), "log_metrics") != NULL && strstr(fulmen_error_message(e), "disk full") != NULL);
    fulmen_error_free(e);
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    /* epoch 4 again from its first batch at step 18 (the failed fit's
     * count): the second log call, for step index 21, fails after that
     * step */
    CHECK(step == 22);
    CHECK(h.finalize_calls == before + 1 && strcmp(h.status, "failed") == 0);

    CHECK(h.freed == 0);
    fulmen_trainer_free(t);
    CHECK(h.freed == 1);
    fulmen_trainer_free(t);
    CHECK(h.freed == 1);

    /* bad vtables take nothing (one ending before the appended
     * after_save_checkpoint is accepted) */
    t = trainer_with(1, "false", NULL);
    v.struct_size = offsetof(fulmen_logger_vtable, after_save_checkpoint) - 1;
    CHECK_ERR(fulmen_trainer_add_logger(t, &v), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK_ERR(fulmen_trainer_add_logger(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    /* NULL slots are skipped */
    fulmen_logger_vtable empty;
    memset(&empty, 0, sizeof empty);
    empty.struct_size = sizeof empty;
    CHECK_OK(fulmen_trainer_add_logger(t, &empty));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    fulmen_trainer_free(t);
    CHECK(h.freed == 1);

    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* The `logger` option: which files a run writes. */
static void test_logger_choice(fulmen_loader *tl) {
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    char dir[512], path[700];
    size_t len = 0;
    static const struct {
        const char *logger;
        bool csv, tb;
    } cases[] = {{"tensorboard", false, true}, {"true", true, true}, {"csv,tensorboard", true, true}, {"csv", true, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fulmen_trainer *t = trainer_with(1, cases[i].logger, NULL);
        CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
        CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
        snprintf(path, sizeof path, "%s/metrics.csv", dir);
        CHECK(exists(path) == cases[i].csv);
        long tb = file_with_prefix(dir, "events.out.tfevents.");
        CHECK(cases[i].tb ? tb > 0 : tb == -1);
        fulmen_trainer_free(t);
    }
    /* "false": no new version folder and no log dir */
    char next[600];
    const char *v = strrchr(dir, '_');
    snprintf(next, sizeof next, "%s/lightning_logs/version_%d", root, v != NULL ? atoi(v + 1) + 1 : -1);
    fulmen_trainer *t = trainer_with(1, "false", NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_ERR(fulmen_trainer_log_dir(t, dir, sizeof dir, &len), FULMEN_CODE_INVALID_STATE, NULL);
    CHECK(!exists(next));
    fulmen_trainer_free(t);
    /* the next logging run takes that number */
    t = trainer_with(1, "csv", NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    CHECK(strcmp(dir, next) == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* The W&B logger: a fit with it first among the loggers (the trainer's log
 * folder is its save_dir, ModelCheckpoint writes under project/run id),
 * settings refused once the run started, the wrong kind of logger, finish
 * (W&B's reader reads these files in tests/interop/wandb_logger.py). */
static void test_wandb(fulmen_loader *tl) {
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    char save[400], dir[512], id[64], path[700];
    size_t len = 0, id_len = 0;
    snprintf(save, sizeof save, "%s/wandb-save", root);
    fulmen_logger *wb = NULL;
    CHECK_ERR(fulmen_logger_wandb_new(save, "p", NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_OK(fulmen_logger_wandb_new(save, "proj", &wb));
    CHECK_ERR(fulmen_logger_wandb_set_id(wb, "a/b"), FULMEN_CODE_INVALID_ARGUMENT, "run id");
    CHECK_ERR(fulmen_logger_wandb_set_setting(wb, "colour", "x"), FULMEN_CODE_INVALID_ARGUMENT, "colour");
    CHECK_ERR(fulmen_logger_wandb_add_tag(wb, ""), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    CHECK_ERR(fulmen_logger_set_version(wb, 1), FULMEN_CODE_INVALID_ARGUMENT, "W&B logger");
    CHECK_ERR(fulmen_logger_mlflow_set_run_name(wb, "x"), FULMEN_CODE_INVALID_ARGUMENT, "W&B logger");
    CHECK_OK(fulmen_logger_wandb_set_id(wb, "c-test"));
    CHECK_OK(fulmen_logger_wandb_set_name(wb, "c test"));
    CHECK_OK(fulmen_logger_wandb_add_tag(wb, "c"));
    static const char *const ckpt[] = {"enable_checkpointing", "true", NULL};
    fulmen_trainer *t = trainer_with(1, "false", ckpt);
    CHECK_OK(fulmen_trainer_add_file_logger(t, wb));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_ERR(fulmen_logger_wandb_set_name(wb, "late"), FULMEN_CODE_INVALID_STATE, "started");
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    CHECK(strcmp(dir, save) == 0);
    CHECK_OK(fulmen_logger_wandb_run_id(wb, id, sizeof id, &id_len));
    CHECK(strcmp(id, "c-test") == 0);
    CHECK_ERR(fulmen_logger_wandb_run_id(wb, id, 3, &id_len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_OK(fulmen_logger_wandb_run_dir(wb, dir, sizeof dir, &len));
    snprintf(path, sizeof path, "%s/run-c-test.wandb", dir);
    CHECK(exists(path));
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, path, sizeof path, &len));
    char want[600];
    snprintf(want, sizeof want, "%s/proj/c-test/checkpoints/", save);
    CHECK(strncmp(path, want, strlen(want)) == 0);
    CHECK_OK(fulmen_logger_wandb_finish(wb, 0));
    double v = 1.0;
    const char *name = "x";
    CHECK_ERR(fulmen_logger_log_metrics(wb, &name, &v, 1, 0), FULMEN_CODE_INVALID_STATE, "finished");
    fulmen_logger_free(wb);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

static void test_comet(fulmen_loader *tl) {
    fixture f = {.model = mlp(), .fail_at_step = -1};
    fulmen_lightning_module *m = module_for(&f);
    char save[400], dir[512], key[64], path[700];
    size_t len = 0, key_len = 0;
    const char *k = "0123456789abcdef0123456789abcdef";
    snprintf(save, sizeof save, "%s/comet-save", root);
    fulmen_logger *cl = NULL;
    CHECK_ERR(fulmen_logger_comet_new(save, "p", NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_ERR(fulmen_logger_comet_new(save, "a/b", &cl), FULMEN_CODE_INVALID_ARGUMENT, "project");
    CHECK_OK(fulmen_logger_comet_new(save, "proj", &cl));
    CHECK_ERR(fulmen_logger_comet_set_experiment_key(cl, "short"), FULMEN_CODE_INVALID_ARGUMENT, "32 to 50");
    CHECK_ERR(fulmen_logger_comet_set_mode(cl, "append"), FULMEN_CODE_INVALID_ARGUMENT, "get_or_create");
    CHECK_ERR(fulmen_logger_comet_add_tag(cl, ""), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    CHECK_ERR(fulmen_logger_set_version(cl, 1), FULMEN_CODE_INVALID_ARGUMENT, "Comet logger");
    CHECK_ERR(fulmen_logger_wandb_set_name(cl, "x"), FULMEN_CODE_INVALID_ARGUMENT, "Comet logger");
    CHECK_OK(fulmen_logger_comet_set_experiment_key(cl, k));
    CHECK_OK(fulmen_logger_comet_set_mode(cl, "create"));
    CHECK_OK(fulmen_logger_comet_set_name(cl, "c test"));
    CHECK_OK(fulmen_logger_comet_set_workspace(cl, "team"));
    CHECK_OK(fulmen_logger_comet_add_tag(cl, "c"));
    static const char *const ckpt[] = {"enable_checkpointing", "true", NULL};
    fulmen_trainer *t = trainer_with(1, "false", ckpt);
    CHECK_OK(fulmen_trainer_add_file_logger(t, cl));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_ERR(fulmen_logger_comet_set_name(cl, "late"), FULMEN_CODE_INVALID_STATE, "started");
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    CHECK(strcmp(dir, save) == 0);
    CHECK_OK(fulmen_logger_comet_experiment_key(cl, key, sizeof key, &key_len));
    CHECK(strcmp(key, k) == 0);
    CHECK_ERR(fulmen_logger_comet_experiment_key(cl, key, 3, &key_len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    snprintf(path, sizeof path, "%s/%s.partial/messages.json", save, k);
    CHECK(exists(path));
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, path, sizeof path, &len));
    char want[600];
    snprintf(want, sizeof want, "%s/proj/%s/checkpoints/", save, k);
    CHECK(strncmp(path, want, strlen(want)) == 0);
    CHECK_OK(fulmen_logger_comet_end(cl));
    CHECK_OK(fulmen_logger_comet_end(cl));
    CHECK_OK(fulmen_logger_comet_archive_path(cl, path, sizeof path, &len));
    snprintf(want, sizeof want, "%s/%s.zip", save, k);
    CHECK(strcmp(path, want) == 0 && exists(path));
    snprintf(path, sizeof path, "%s/%s.partial", save, k);
    CHECK(!exists(path));
    double v = 1.0;
    const char *name = "x";
    CHECK_ERR(fulmen_logger_log_metrics(cl, &name, &v, 1, 0), FULMEN_CODE_INVALID_STATE, "ended");
    fulmen_logger_free(cl);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-loggers-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    fulmen_dataset *train = blobs(32, 1), *val = blobs(32, 2);
    fulmen_loader *tl = loader(train, 8, true), *vl = loader(val, 16, false);
    test_csv_and_host(tl, vl);
    test_logger_choice(tl);
    test_wandb(tl);
    test_comet(tl);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_loggers");
}

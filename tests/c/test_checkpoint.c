/*
 * Checkpoints through the C API: ModelCheckpoint's top-k / last / every-n
 * files and names, weights-only files, exact resumption (end of epoch and
 * mid-epoch), ckpt_path "last" / "best", and broken or foreign files.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 1.0f); }

static fulmen_model *mlp(int64_t hidden) { return fixture_mlp(hidden, 0.2); }

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 11); }

static fulmen_trainer *trainer_with(long epochs, const char *const *kv) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    for (; kv != NULL && kv[0] != NULL; kv += 2) CHECK_OK(fulmen_trainer_options_set(o, kv[0], kv[1]));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* ---- the module: cross-entropy training; validation logs either the
 * real loss or a scripted value per epoch ---- */

typedef struct {
    fulmen_model *model;
    const double *script; /* val_loss per epoch (NULL: the real loss) */
    int train_calls;
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
    f->train_calls++;
    fulmen_error *e = loss_of(f, batch, out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", check_item(*out), FULMEN_LOG_ON_STEP, 0);
    return e;
}

static fulmen_error *eval_step(fixture *f, fulmen_step_context *ctx, const fulmen_batch *batch, const char *name) {
    int64_t epoch = 0;
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fulmen_step_context_epoch(ctx, &epoch);
    if (e == NULL && f->script != NULL) return fulmen_step_context_log(ctx, name, f->script[epoch], 0, 0);
    if (e == NULL) e = loss_of(f, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, name, check_item(loss), 0, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return eval_step(ud, ctx, batch, "val_loss");
}

static fulmen_error *test_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return eval_step(ud, ctx, batch, "test_loss");
}

/* SGD with momentum, so the optimizer state matters when resuming. */
static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.05;
    o.momentum = 0.9;
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
    vt.test_step = test_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

/* ---- files and weights ---- */

/* Every state_dict tensor's bytes, concatenated (malloc'd; *n bytes). */
static unsigned char *weights_of(const fulmen_model *m, size_t *n) {
    size_t count = 0, total = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &count));
    unsigned char *buf = NULL;
    for (size_t i = 0; i < count; i++) {
        char name[64];
        size_t len = 0, numel = 0;
        fulmen_tensor *t = NULL;
        CHECK_OK(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
        CHECK_OK(fulmen_tensor_numel(t, &numel));
        buf = realloc(buf, total + numel * sizeof(float));
        CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, buf + total, numel * sizeof(float)));
        total += numel * sizeof(float);
        fulmen_tensor_free(t);
    }
    *n = total;
    return buf;
}

static bool same_weights(const fulmen_model *a, const fulmen_model *b) {
    size_t na = 0, nb = 0;
    unsigned char *wa = weights_of(a, &na), *wb = weights_of(b, &nb);
    bool same = na == nb && na > 0 && memcmp(wa, wb, na) == 0;
    free(wa);
    free(wb);
    return same;
}

static bool same_as_snapshot(const fulmen_model *m, const unsigned char *snap, size_t n) {
    size_t nm = 0;
    unsigned char *w = weights_of(m, &nm);
    bool same = nm == n && memcmp(w, snap, n) == 0;
    free(w);
    return same;
}

/* Number of *.ckpt files in `dir`; `names` (if not NULL) gets them joined by '|'. */
static int ckpt_files(const char *dir, char *names, size_t cap) {
    int n = 0;
    if (names != NULL) names[0] = '\0';
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".ckpt") == 0) {
            n++;
            if (names != NULL && strlen(names) + len + 2 < cap) {
                strcat(names, e->d_name);
                strcat(names, "|");
            }
        }
    }
    closedir(d);
    return n;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static fulmen_model_checkpoint_options ckpt_opts(const char *dir) {
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    return o;
}

static void test_defaults(void) {
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    CHECK(o.dirpath == NULL && o.filename == NULL && o.monitor == NULL && o.mode == 0);
    CHECK(o.save_top_k == 1 && !o.save_last && o.every_n_train_steps == 0 && o.every_n_epochs == 1);
    CHECK(!o.save_weights_only && o.auto_insert_metric_name && o.save_on_train_epoch_end == -1);
    fulmen_trainer *t = trainer_with(1, NULL);
    o.save_top_k = -2;
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "save_top_k");
    o.save_top_k = 2; /* several best files need a metric to rank them */
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "monitor");
    o.save_top_k = 1;
    o.mode = 2;
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "mode");
    o.mode = 0;
    o.every_n_train_steps = -1;
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "every_n_train_steps");
    char buf[64];
    size_t len = 0;
    double score = 0;
    CHECK_ERR(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, buf, sizeof buf, &len), FULMEN_CODE_INVALID_STATE, NULL);
    CHECK_ERR(fulmen_trainer_best_model_score(t, &score), FULMEN_CODE_INVALID_STATE, NULL);
    CHECK_ERR(fulmen_trainer_checkpoint_path(t, 7, buf, sizeof buf, &len), FULMEN_CODE_INVALID_STATE, NULL);
    fulmen_trainer_free(t);
}

/* monitor val_loss, min, top 2, last, "{epoch}-{val_loss:.3f}" over 4 epochs. */
static void test_top_k(fulmen_loader *tl, fulmen_loader *vl) {
    static const double script[] = {0.5, 0.25, 0.375, 0.125, 1.0, 1.0};
    char dir[300], names[1024], path[600];
    fixture f = {.model = mlp(16), .script = script};
    fulmen_lightning_module *m = module_for(&f);

    snprintf(dir, sizeof dir, "%s/topk", root);
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.monitor = "val_loss";
    o.save_top_k = 2;
    o.save_last = true;
    o.filename = "{epoch}-{val_loss:.3f}";
    fulmen_trainer *t = trainer_with(4, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(ckpt_files(dir, names, sizeof names) == 3);
    snprintf(path, sizeof path, "%s/epoch=1-val_loss=0.250.ckpt", dir);
    CHECK(exists(path));
    snprintf(path, sizeof path, "%s/epoch=3-val_loss=0.125.ckpt", dir);
    CHECK(exists(path));
    snprintf(path, sizeof path, "%s/last.ckpt", dir);
    CHECK(exists(path));
    snprintf(path, sizeof path, "%s/epoch=0-val_loss=0.500.ckpt", dir);
    CHECK(!exists(path));
    char best[600], last[600];
    size_t len = 0;
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, best, sizeof best, &len));
    CHECK(len == strlen(best) && ends_with(best, "/epoch=3-val_loss=0.125.ckpt") && strncmp(best, dir, strlen(dir)) == 0);
    CHECK_ERR(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, best, 5, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_LAST, last, sizeof last, &len));
    CHECK(ends_with(last, "/last.ckpt"));
    double score = 0, val = 0;
    CHECK_OK(fulmen_trainer_best_model_score(t, &score));
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &val));
    CHECK(score == 0.125 && val == 0.125);
    fulmen_trainer_free(t);

    /* save_top_k -1 keeps every epoch; 0 keeps none */
    snprintf(dir, sizeof dir, "%s/all", root);
    o = ckpt_opts(dir);
    o.monitor = "val_loss";
    o.save_top_k = -1;
    t = trainer_with(4, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(ckpt_files(dir, names, sizeof names) == 4);
    snprintf(path, sizeof path, "%s/epoch=2-step=6.ckpt", dir); /* default template {epoch}-{step}: 2 batches/epoch */
    CHECK(exists(path));
    fulmen_trainer_free(t);

    snprintf(dir, sizeof dir, "%s/none", root);
    o = ckpt_opts(dir);
    o.monitor = "val_loss";
    o.save_top_k = 0;
    t = trainer_with(2, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(ckpt_files(dir, NULL, 0) == 0);
    CHECK_ERR(fulmen_trainer_best_model_score(t, &score), FULMEN_CODE_INVALID_STATE, NULL);
    fulmen_trainer_free(t);

    /* mode max keeps the highest */
    snprintf(dir, sizeof dir, "%s/max", root);
    o = ckpt_opts(dir);
    o.monitor = "val_loss";
    o.mode = 1;
    o.filename = "best-{epoch:02d}";
    o.auto_insert_metric_name = false;
    t = trainer_with(4, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(ckpt_files(dir, names, sizeof names) == 1 && strcmp(names, "best-00.ckpt|") == 0);
    CHECK_OK(fulmen_trainer_best_model_score(t, &score));
    CHECK(score == 0.5);
    fulmen_trainer_free(t);

    /* a monitored metric that is never logged fails fit, naming it */
    snprintf(dir, sizeof dir, "%s/missing", root);
    o = ckpt_opts(dir);
    o.monitor = "val_accuracy";
    t = trainer_with(2, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, vl, NULL), FULMEN_CODE_INVALID_STATE, "val_accuracy");
    CHECK(ckpt_files(dir, NULL, 0) == 0);
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* every_n_train_steps (4 batches per epoch, every 3 steps). */
static void test_every_n_steps(fulmen_loader *tl4) {
    char dir[300], names[1024];
    fixture f = {.model = mlp(16)};
    fulmen_lightning_module *m = module_for(&f);
    snprintf(dir, sizeof dir, "%s/steps", root);
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.every_n_train_steps = 3;
    o.save_top_k = -1;
    fulmen_trainer *t = trainer_with(4, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl4, NULL, NULL));
    CHECK(ckpt_files(dir, names, sizeof names) == 5);
    static const char *expected[] = {"epoch=0-step=3.ckpt|", "epoch=1-step=6.ckpt|", "epoch=2-step=9.ckpt|",
                                     "epoch=2-step=12.ckpt|", "epoch=3-step=15.ckpt|"};
    for (int i = 0; i < 5; i++) CHECK(strstr(names, expected[i]) != NULL);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* Weights-only files are plain state_dicts that fulmen_model_load reads. */
static void test_weights_only(fulmen_loader *tl, fulmen_loader *vl) {
    char dir[300], path[600];
    fixture f = {.model = mlp(16)};
    fulmen_lightning_module *m = module_for(&f);
    snprintf(dir, sizeof dir, "%s/weights", root);
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.save_weights_only = true;
    o.save_last = true;
    fulmen_trainer *t = trainer_with(2, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    fulmen_model *fresh = mlp(16);
    CHECK(!same_weights(fresh, f.model));
    snprintf(path, sizeof path, "%s/last.ckpt", dir);
    CHECK_OK(fulmen_model_load(fresh, path, true));
    CHECK(same_weights(fresh, f.model));
    fulmen_model_free(fresh);
    fresh = mlp(16);
    snprintf(path, sizeof path, "%s/epoch=1-step=4.ckpt", dir);
    CHECK_OK(fulmen_model_load(fresh, path, true));
    CHECK(same_weights(fresh, f.model));
    /* it cannot resume training: it has no optimizer state */
    fulmen_trainer *t2 = trainer_with(3, NULL);
    CHECK_ERR(fulmen_trainer_fit(t2, m, tl, vl, path), FULMEN_CODE_FORMAT, "weights-only");
    fulmen_trainer_free(t2);
    fulmen_model_free(fresh);
    /* A torch.save state_dict is not a checkpoint to resume from: it says so. */
    char pt[600];
    snprintf(pt, sizeof pt, "%s/weights.pt", dir);
    CHECK_OK(fulmen_model_save(f.model, pt));
    fulmen_trainer *tp = trainer_with(3, NULL);
    CHECK_ERR(fulmen_trainer_fit(tp, m, tl, vl, pt), FULMEN_CODE_FORMAT, "is a torch.save file");
    fulmen_trainer_free(tp);
    /* A full checkpoint gives its weights too, strict or not. */
    fulmen_model_checkpoint_options full = ckpt_opts(dir);
    full.filename = "full";
    fulmen_trainer *t3 = trainer_with(2, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t3, &full));
    CHECK_OK(fulmen_trainer_fit(t3, m, tl, vl, NULL));
    snprintf(path, sizeof path, "%s/full.ckpt", dir);
    for (int strict = 0; strict < 2; strict++) {
        fresh = mlp(16);
        CHECK(!same_weights(fresh, f.model));
        CHECK_OK(fulmen_model_load(fresh, path, strict == 1));
        CHECK(same_weights(fresh, f.model));
        fulmen_model_free(fresh);
    }
    fulmen_trainer_free(t3);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* Trains `model` (already holding the initial weights) with a trainer of
 * `epochs` epochs and an optional ModelCheckpoint, resuming from `ckpt`. */
static int64_t train_with(fulmen_model *model, long epochs, const fulmen_model_checkpoint_options *o,
                          fulmen_loader *tl, const char *ckpt, const char *const *kv) {
    fixture f = {.model = model};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(epochs, kv);
    if (o != NULL) CHECK_OK(fulmen_trainer_add_model_checkpoint(t, o));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, ckpt));
    int64_t step = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    return step;
}

static int64_t train(fulmen_model *model, long epochs, const fulmen_model_checkpoint_options *o, fulmen_loader *tl,
                     const char *ckpt) {
    return train_with(model, epochs, o, tl, ckpt, NULL);
}

static fulmen_model *model_from(const char *init) {
    fulmen_model *m = mlp(16);
    CHECK_OK(fulmen_model_load(m, init, true));
    return m;
}

/* Whether the file at `path` is a zip (torch.save's container, "PK"
 * first) when `zip`, else a safetensors file (an 8-byte header length,
 * then the JSON header's "{"). */
static bool is_format(const char *path, bool zip) {
    FILE *f = fopen(path, "rb");
    unsigned char head[9] = {0};
    bool read = f != NULL && fread(head, 1, sizeof head, f) == sizeof head;
    if (f != NULL) fclose(f);
    return read && (zip ? head[0] == 'P' && head[1] == 'K' : head[8] == '{');
}

/* 4 epochs in one go == 2 epochs + resume to 4 == resume mid-epoch, with
 * checkpoints in `format` (NULL: the default, Lightning's torch.save zip;
 * "safetensors": fulmen's own). */
static void test_resume_exact(fulmen_loader *tl4, const char *format) {
    const char *const kv[] = {"checkpoint_format", format, NULL};
    const char *const *opts = format != NULL ? kv : NULL;
    const bool zip = format == NULL;
    char init[300], dir[300], path[600];
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    CHECK_OK(fulmen_manual_seed(42));
    fulmen_model *a = mlp(16);
    CHECK_OK(fulmen_model_save(a, init));
    int64_t step_a = train(a, 4, NULL, tl4, NULL);
    CHECK(step_a == 16);

    /* end-of-epoch checkpoint */
    fulmen_model *b = model_from(init);
    CHECK(!same_weights(a, b));
    snprintf(dir, sizeof dir, "%s/resume-%s", root, format ? format : "default");
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.save_last = true;
    CHECK(train_with(b, 2, &o, tl4, NULL, opts) == 8);
    CHECK(!same_weights(a, b));
    snprintf(path, sizeof path, "%s/last.ckpt", dir);
    CHECK(is_format(path, zip));
    snprintf(dir, sizeof dir, "%s/resume2-%s", root, format ? format : "default");
    fulmen_model_checkpoint_options o2 = ckpt_opts(dir);
    int64_t step_b = train_with(b, 4, &o2, tl4, path, opts);
    CHECK(step_b == step_a);
    CHECK(same_weights(a, b));

    /* mid-epoch checkpoint: step 6 is batch 2 of epoch 1 */
    fulmen_model *c = model_from(init);
    snprintf(dir, sizeof dir, "%s/mid-%s", root, format ? format : "default");
    o = ckpt_opts(dir);
    o.every_n_train_steps = 6;
    o.save_top_k = -1;
    CHECK(train_with(c, 4, &o, tl4, NULL, opts) == 16);
    CHECK(same_weights(a, c)); /* checkpointing does not disturb training */
    fulmen_model *d = model_from(init);
    snprintf(path, sizeof path, "%s/epoch=1-step=6.ckpt", dir);
    CHECK(exists(path) && is_format(path, zip));
    int64_t step_d = train(d, 4, NULL, tl4, path);
    CHECK(step_d == step_a);
    CHECK(same_weights(a, d));

    fulmen_model_free(a);
    fulmen_model_free(b);
    fulmen_model_free(c);
    fulmen_model_free(d);
}

/* SGD with OneCycleLR, whose ranges Lightning's format keeps in the
 * optimizer's param groups. */
static fulmen_error *configure_one_cycle(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *s = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    fulmen_one_cycle_options oc = fulmen_one_cycle_options_default(0.5, 100);
    if (e == NULL) e = fulmen_scheduler_one_cycle_lr_new(opt, &oc, &s);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, s, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
    }
    return e;
}

/* Checkpoints in Lightning's format (a torch.save zip, names under the
 * module attribute "net."): an exact resume from an epoch end and from
 * inside an epoch; the weights load on their own; a wrong prefix is named. */
static void test_lightning_format(fulmen_loader *tl4) {
    static const char *const lightning[] = {"checkpoint_format", "lightning", "checkpoint_prefix", "net.", NULL};
    static const char *const other_prefix[] = {"checkpoint_prefix", "other.", NULL};
    char init[300], dir[300], path[600];
    snprintf(init, sizeof init, "%s/init-lightning.safetensors", root);
    CHECK_OK(fulmen_manual_seed(7));
    fulmen_model *a = mlp(16);
    CHECK_OK(fulmen_model_save(a, init));
    CHECK(train(a, 4, NULL, tl4, NULL) == 16);

    fulmen_model *b = model_from(init);
    snprintf(dir, sizeof dir, "%s/lightning", root);
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.save_last = true;
    CHECK(train_with(b, 2, &o, tl4, NULL, lightning) == 8);
    snprintf(path, sizeof path, "%s/last.ckpt", dir);
    CHECK(is_format(path, true));
    /* the weights alone, the "net." prefix found and removed */
    fulmen_model *w = mlp(16);
    CHECK_OK(fulmen_model_load(w, path, true));
    CHECK(same_weights(w, b));
    /* read with a prefix the names do not have: refused, model untouched */
    fulmen_model *c = model_from(init);
    fixture fx = {.model = c};
    fulmen_lightning_module *m = module_for(&fx);
    fulmen_trainer *t = trainer_with(4, other_prefix);
    CHECK_ERR(fulmen_trainer_fit(t, m, tl4, NULL, path), FULMEN_CODE_FORMAT, "net.0.weight");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model *fresh = model_from(init);
    CHECK(same_weights(c, fresh));
    /* resumed from the epoch end: as if never stopped */
    CHECK(train_with(c, 4, NULL, tl4, path, lightning) == 16);
    CHECK(same_weights(a, c));

    /* inside an epoch: step 6 is batch 2 of epoch 1 */
    fulmen_model *d = model_from(init);
    snprintf(dir, sizeof dir, "%s/lightning-mid", root);
    o = ckpt_opts(dir);
    o.every_n_train_steps = 6;
    o.save_top_k = -1;
    CHECK(train_with(d, 2, &o, tl4, NULL, lightning) == 8);
    fulmen_model *e = model_from(init);
    snprintf(path, sizeof path, "%s/epoch=1-step=6.ckpt", dir);
    CHECK(train(e, 4, NULL, tl4, path) == 16);
    CHECK(same_weights(a, e));

    /* OneCycleLR in Lightning's format (its exact resume against Lightning
     * is tests/interop/lightning_parity.py's "onecycle") */
    fixture fw = {.model = a};
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &fw;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_one_cycle;
    fulmen_lightning_module *mw = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, a, &mw));
    t = trainer_with(1, lightning);
    CHECK_OK(fulmen_trainer_fit(t, mw, tl4, NULL, NULL));
    CHECK(fw.train_calls == 4);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(mw);

    fulmen_model_free(a);
    fulmen_model_free(b);
    fulmen_model_free(w);
    fulmen_model_free(c);
    fulmen_model_free(fresh);
    fulmen_model_free(d);
    fulmen_model_free(e);
}

/* A host hook saves checkpoints itself (Lightning's trainer.save_checkpoint
 * from a hook): one per epoch end, none allowed in on_save_checkpoint or
 * the sanity check; resuming from the host's file continues after it. */
typedef struct {
    char dir[400];
    int saved, refused_in_save, refused_in_sanity;
} host_saver;

static fulmen_error *host_save_hook(void *userdata, int32_t hook, fulmen_hook_context *ctx) {
    host_saver *h = userdata;
    char path[500];
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_END) {
        int64_t epoch = -1;
        fulmen_error *e = fulmen_hook_context_epoch(ctx, &epoch);
        if (e) return e;
        snprintf(path, sizeof path, "%s/epoch-%lld.ckpt", h->dir, (long long)epoch);
        e = fulmen_hook_context_save_checkpoint(ctx, path, false);
        if (e) return e;
        h->saved++;
    } else if (hook == FULMEN_HOOK_SAVE_CHECKPOINT || hook == FULMEN_HOOK_VALIDATION_START) {
        snprintf(path, sizeof path, "%s/never.ckpt", h->dir);
        fulmen_error *e = fulmen_hook_context_save_checkpoint(ctx, path, false);
        if (e == NULL) return fulmen_error_new(FULMEN_CODE_CALLBACK, "save_checkpoint was accepted where it must not be");
        if (fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE) {
            if (hook == FULMEN_HOOK_SAVE_CHECKPOINT) h->refused_in_save++;
            else h->refused_in_sanity++;
        }
        fulmen_error_free(e);
    }
    return NULL;
}

static void test_host_saves_checkpoints(fulmen_loader *tl, fulmen_loader *vl) {
    char init[300], path[500];
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    fixture f = {.model = model_from(init)};
    fulmen_lightning_module *m = module_for(&f);
    host_saver h = {.saved = 0};
    snprintf(h.dir, sizeof h.dir, "%s/host-saves", root);
    fulmen_callback_vtable cb = {.struct_size = sizeof cb, .userdata = &h, .on_hook = host_save_hook};
    /* The sanity check validates first: a save there is refused. Later
     * validations are not the sanity check, so only its refusal counts. */
    const char *kv[] = {"num_sanity_val_steps", "1", "check_val_every_n_epoch", "100", NULL};
    fulmen_trainer *t = trainer_with(2, kv);
    CHECK_OK(fulmen_trainer_add_callback(t, "saver", &cb));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(h.saved == 2 && h.refused_in_save == 2 && h.refused_in_sanity == 1);
    snprintf(path, sizeof path, "%s/never.ckpt", h.dir);
    CHECK(access(path, F_OK) != 0);
    fulmen_trainer_free(t);

    /* Resuming from the epoch-0 file trains the one remaining epoch. */
    snprintf(path, sizeof path, "%s/epoch-0.ckpt", h.dir);
    fulmen_trainer *t2 = trainer_with(2, NULL);
    f.train_calls = 0;
    CHECK_OK(fulmen_trainer_fit(t2, m, tl, NULL, path));
    CHECK(f.train_calls == 2);
    fulmen_trainer_free(t2);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* Epoch-level metrics logged from epoch-end hooks drive ModelCheckpoint
 * and EarlyStopping (Lightning's self.log in on_train_epoch_end), reach
 * the CSV log, and validate returns what on_validation_epoch_end logs;
 * on_fit_start, per-step flags in epoch hooks and both levels off are
 * refused. */
static const double epoch_scores[4] = {0.5, 0.9, 0.7, 0.8};
static int hook_log_refusals;

static fulmen_error *scoring_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_END) {
        int64_t epoch = 0;
        fulmen_error *e = fulmen_hook_context_epoch(ctx, &epoch);
        if (e) return e;
        fulmen_error *bad = fulmen_hook_context_log(ctx, "score", 1.0, FULMEN_LOG_ON_STEP);
        hook_log_refusals += bad != NULL && fulmen_error_code(bad) == FULMEN_CODE_INVALID_ARGUMENT;
        fulmen_error_free(bad);
        return fulmen_hook_context_log(ctx, "score", epoch_scores[epoch % 4], FULMEN_LOG_PROG_BAR);
    }
    if (hook == FULMEN_HOOK_VALIDATION_EPOCH_END) return fulmen_hook_context_log(ctx, "val_auc", 0.75, 0);
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END) {
        /* on_step off, on_epoch its default here (off): not useful, refused */
        fulmen_error *bad = fulmen_hook_context_log(ctx, "score", 1.0, FULMEN_LOG_DEFAULT_EPOCH);
        hook_log_refusals += bad != NULL && fulmen_error_code(bad) == FULMEN_CODE_INVALID_ARGUMENT;
        fulmen_error_free(bad);
    }
    if (hook == FULMEN_HOOK_FIT_START) {
        fulmen_error *bad = fulmen_hook_context_log(ctx, "score", 1.0, 0);
        hook_log_refusals += bad != NULL && fulmen_error_code(bad) == FULMEN_CODE_INVALID_STATE;
        fulmen_error_free(bad);
    }
    return NULL;
}

static void test_hook_logged_metrics_drive_callbacks(fulmen_loader *tl, fulmen_loader *vl) {
    char init[300], dir[300], best[600], csv[700];
    size_t len = 0;
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    snprintf(dir, sizeof dir, "%s/hook-log", root);
    fixture f = {.model = model_from(init)};
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = scoring_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f.model, &m));
    const char *kv[] = {"logger", "true", "default_root_dir", dir, NULL};
    fulmen_trainer *t = trainer_with(4, kv);
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.monitor = "score";
    o.mode = FULMEN_MODE_MAX;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    fulmen_early_stopping_options es = fulmen_early_stopping_options_default();
    es.monitor = "score";
    es.mode = FULMEN_MODE_MAX;
    es.patience = 1;
    es.check_on_train_epoch_end = 1; /* the score exists after on_train_epoch_end only */
    CHECK_OK(fulmen_trainer_add_early_stopping(t, &es));
    hook_log_refusals = 0;
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    /* scores 0.5, 0.9, 0.7: no improvement for one epoch stops after epoch 2 */
    int64_t epoch = 0;
    CHECK_OK(fulmen_trainer_current_epoch(t, &epoch));
    CHECK(epoch == 3);
    double best_score = 0, score = 0;
    CHECK_OK(fulmen_trainer_best_model_score(t, &best_score));
    CHECK_NEAR(best_score, 0.9, 1e-12);
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, best, sizeof best, &len));
    CHECK(strstr(best, "epoch=1") != NULL);
    CHECK_OK(fulmen_trainer_callback_metric(t, "score", &score));
    CHECK_NEAR(score, 0.7, 1e-12);
    CHECK(hook_log_refusals > 3);
    /* the CSV log has the hook's column */
    char logdir[500];
    CHECK_OK(fulmen_trainer_log_dir(t, logdir, sizeof logdir, &len));
    snprintf(csv, sizeof csv, "%s/metrics.csv", logdir);
    FILE *in = fopen(csv, "r");
    char header[512] = {0};
    CHECK(in != NULL && fgets(header, sizeof header, in) != NULL && strstr(header, "score") != NULL &&
          strstr(header, "val_auc") != NULL);
    if (in) fclose(in);
    /* validate returns what on_validation_epoch_end logged */
    double auc = 0;
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_auc", &auc));
    CHECK_NEAR(auc, 0.75, 1e-12);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* The default ModelCheckpoint and the log folder of a fit outlive the
 * validate / test runs after it (as Lightning's trainer.checkpoint_callback
 * and trainer.log_dir): "best" works for every later run. */
static void test_default_checkpoint_outlives_eval(fulmen_loader *tl, fulmen_loader *vl) {
    char init[300], sub[300], dir[600], dir_after[600], best[600], best_after[600];
    size_t len = 0;
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    snprintf(sub, sizeof sub, "%s/default-ckpt", root);
    fixture f = {.model = model_from(init)};
    fulmen_lightning_module *m = module_for(&f);
    const char *kv[] = {"logger", "true", "default_root_dir", sub, NULL};
    fulmen_trainer *t = trainer_with(2, kv);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, best, sizeof best, &len));
    CHECK_OK(fulmen_trainer_validate(t, m, vl, "best"));
    CHECK_OK(fulmen_trainer_test(t, m, vl, "best"));
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK_OK(fulmen_trainer_log_dir(t, dir_after, sizeof dir_after, &len));
    CHECK(strcmp(dir, dir_after) == 0);
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, best_after, sizeof best_after, &len));
    CHECK(strcmp(best, best_after) == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ckpt_path "last" / "best", validate / test with ckpt_path, bad files. */
static void test_ckpt_path(fulmen_loader *tl, fulmen_loader *vl) {
    char init[300], dir[300], best[600], last[600], path[700];
    size_t len = 0;
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    fixture f = {.model = model_from(init)};
    fulmen_lightning_module *m = module_for(&f);
    snprintf(dir, sizeof dir, "%s/paths", root);
    fulmen_model_checkpoint_options o = ckpt_opts(dir);
    o.monitor = "val_loss";
    o.save_last = true;
    fulmen_trainer *t = trainer_with(3, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    fulmen_trainer *bare = trainer_with(3, NULL);
    CHECK_ERR(fulmen_trainer_fit(bare, m, tl, vl, "best"), FULMEN_CODE_INVALID_STATE, "best");
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, best, sizeof best, &len));
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_LAST, last, sizeof last, &len));
    double score = 0, final_val = 0, v = 0;
    CHECK_OK(fulmen_trainer_best_model_score(t, &score));
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &final_val));

    /* validate / test load the checkpoint's weights first */
    CHECK_OK(fulmen_model_load(f.model, init, true));
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &v));
    CHECK(fabs(v - score) > 1e-3); /* the initial weights are worse */
    CHECK_OK(fulmen_trainer_validate(t, m, vl, "best"));
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &v));
    CHECK_NEAR(v, score, 1e-6);
    CHECK_OK(fulmen_model_load(f.model, init, true));
    CHECK_OK(fulmen_trainer_test(t, m, vl, last));
    CHECK_OK(fulmen_trainer_callback_metric(t, "test_loss", &v));
    CHECK_NEAR(v, final_val, 1e-6);
    CHECK_OK(fulmen_model_load(f.model, init, true));
    CHECK_OK(fulmen_trainer_validate(t, m, vl, "last"));
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", &v));
    CHECK_NEAR(v, final_val, 1e-6);

    /* fit with "last" resumes after epoch 2: with max_epochs 4, one epoch */
    fulmen_trainer *t4 = trainer_with(4, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t4, &o));
    f.train_calls = 0;
    CHECK_OK(fulmen_trainer_fit(t4, m, tl, vl, "last"));
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t4, &step));
    CHECK(step == 8 && f.train_calls == 2);
    /* and "best" resumes from the best file of this trainer's last fit */
    CHECK_OK(fulmen_trainer_checkpoint_path(t4, FULMEN_CHECKPOINT_PATH_BEST, best, sizeof best, &len));
    fulmen_trainer *t5 = trainer_with(5, NULL);
    CHECK_ERR(fulmen_trainer_fit(t5, m, tl, vl, "best"), FULMEN_CODE_INVALID_STATE, "best");
    fulmen_trainer_free(t5);
    const char *base = strrchr(best, '/');
    int best_epoch = -1;
    CHECK(base != NULL && sscanf(base, "/epoch=%d-", &best_epoch) == 1 && best_epoch >= 0 && best_epoch <= 3);
    f.train_calls = 0;
    CHECK_OK(fulmen_trainer_fit(t4, m, tl, vl, "best"));
    CHECK(f.train_calls == 2 * (3 - best_epoch)); /* resumes after the best epoch, up to max_epochs 4 */

    /* broken and foreign files; the model stays as it was */
    size_t nsnap = 0;
    unsigned char *snap = weights_of(f.model, &nsnap);
    snprintf(path, sizeof path, "%s/truncated.ckpt", root);
    FILE *in = fopen(last, "rb"), *out = fopen(path, "wb");
    CHECK(in != NULL && out != NULL);
    if (in != NULL && out != NULL) {
        fseek(in, 0, SEEK_END);
        long size = ftell(in);
        fseek(in, 0, SEEK_SET);
        char *bytes = malloc((size_t)size);
        CHECK(fread(bytes, 1, (size_t)size, in) == (size_t)size);
        CHECK(fwrite(bytes, 1, (size_t)size / 2, out) == (size_t)size / 2);
        free(bytes);
    }
    if (in != NULL) fclose(in);
    if (out != NULL) fclose(out);
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, vl, path), FULMEN_CODE_FORMAT, "truncated.ckpt");
    CHECK(same_as_snapshot(f.model, snap, nsnap));
    CHECK_ERR(fulmen_trainer_validate(t, m, vl, path), FULMEN_CODE_FORMAT, "truncated.ckpt");
    CHECK(same_as_snapshot(f.model, snap, nsnap));
    CHECK_ERR(fulmen_model_load(f.model, path, true), FULMEN_CODE_FORMAT, "truncated.ckpt");
    snprintf(path, sizeof path, "%s/no/such/file.ckpt", root);
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, vl, path), FULMEN_CODE_IO, "no/such/file.ckpt");
    CHECK_ERR(fulmen_trainer_test(t, m, vl, path), FULMEN_CODE_IO, "no/such/file.ckpt");
    /* a plain safetensors file is not a checkpoint */
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, vl, init), FULMEN_CODE_FORMAT, "not a fulmen checkpoint");
    CHECK(same_as_snapshot(f.model, snap, nsnap));
    free(snap);

    /* a checkpoint of another architecture: a shape error, model untouched */
    fixture g = {.model = mlp(8)};
    fulmen_lightning_module *mg = module_for(&g);
    snap = weights_of(g.model, &nsnap);
    CHECK_ERR(fulmen_trainer_fit(bare, mg, tl, vl, last), FULMEN_CODE_SHAPE_MISMATCH, "size mismatch");
    CHECK(same_as_snapshot(g.model, snap, nsnap));
    CHECK_ERR(fulmen_trainer_validate(bare, mg, vl, last), FULMEN_CODE_SHAPE_MISMATCH, "0.weight");
    CHECK(same_as_snapshot(g.model, snap, nsnap));
    free(snap);
    fulmen_lightning_module_free(mg);
    fulmen_model_free(g.model);

    fulmen_trainer_free(bare);
    fulmen_trainer_free(t4);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-checkpoint-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    fulmen_dataset *train = blobs(32, 1), *val = blobs(32, 2);
    fulmen_loader *tl = loader(train, 16, true), *tl4 = loader(train, 8, true), *vl = loader(val, 16, false);
    test_defaults();
    test_top_k(tl, vl);
    test_every_n_steps(tl4);
    test_weights_only(tl, vl);
    test_resume_exact(tl4, NULL);
    test_resume_exact(tl4, "safetensors");
    test_lightning_format(tl4);
    test_ckpt_path(tl, vl);
    test_default_checkpoint_outlives_eval(tl, vl);
    test_host_saves_checkpoints(tl, vl);
    test_hook_logged_metrics_drive_callbacks(tl, vl);
    fulmen_loader_free(tl);
    fulmen_loader_free(tl4);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_checkpoint");
}

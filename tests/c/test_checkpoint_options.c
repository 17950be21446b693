/*
 * ModelCheckpoint's train_time_interval, save_on_exception,
 * enable_version_counter and save_last_link (Lightning's save_last="link"),
 * through the C API.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

typedef struct {
    fulmen_model *model;
    int64_t fail_at_step; /* training_step fails at this global step (-1: never) */
} fixture;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    int64_t step = 0;
    fulmen_error *e = fulmen_step_context_global_step(ctx, &step);
    if (e == NULL && step == f->fail_at_step) return fulmen_error_new(FULMEN_CODE_CALLBACK, "planned failure");
    if (e == NULL) e = fixture_cross_entropy(f->model, batch, out);
    return e;
}

/* A new folder under root for one case. */
static void case_dir(const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s", root, name);
    CHECK(mkdir(out, 0755) == 0);
}

/* Whether `dir/name` exists (a symlink counts, even a dangling one). */
static bool has(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return lstat(p, &st) == 0;
}

/* The number of .ckpt entries in `dir`. */
static int ckpt_count(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".ckpt") == 0) n++;
    }
    closedir(d);
    return n;
}

/* Fits `epochs` epochs of 4 batches with one ModelCheckpoint `o`; returns
 * the fit's error code. */
static int fit_with(fixture *f, fulmen_loader *train, int64_t epochs, const fulmen_model_checkpoint_options *o) {
    fulmen_trainer *t = fixture_trainer(NULL, epochs);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, o));
    fulmen_lightning_module *m = fixture_module(f->model, f, training_step, NULL);
    int code = fixture_code(fulmen_trainer_fit(t, m, train, NULL, NULL));
    fulmen_lightning_module_free(m);
    fulmen_trainer_free(t);
    return code;
}

static void test_option_checks(void) {
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    CHECK(o.train_time_interval == 0.0 && !o.save_on_exception && o.enable_version_counter && !o.save_last_link);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    o.train_time_interval = -1.0;
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "train_time_interval");
    o.train_time_interval = 1.0;
    o.every_n_train_steps = 2;
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "mutually exclusive");
    o.every_n_train_steps = 0;
    o.every_n_epochs = 2;
    CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "mutually exclusive");
    o.every_n_epochs = 1; /* the default stands for Lightning's unset */
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    fulmen_trainer_free(t);
}

/* train_time_interval 1e-9 s: every batch end is due, and the epoch end
 * (every_n_epochs off with the interval) saves nothing more. */
static void test_time_interval(fixture *f, fulmen_loader *train) {
    char dir[300];
    case_dir("time", dir, sizeof dir);
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    o.train_time_interval = 1e-9;
    o.save_top_k = -1;
    CHECK(fit_with(f, train, 1, &o) == 0);
    CHECK(has(dir, "epoch=0-step=1.ckpt") && has(dir, "epoch=0-step=4.ckpt"));
    CHECK(ckpt_count(dir) == 4);
    /* A long interval never fires within this short fit. */
    char dir2[300];
    case_dir("time-long", dir2, sizeof dir2);
    o.dirpath = dir2;
    o.train_time_interval = 3600.0;
    CHECK(fit_with(f, train, 1, &o) == 0);
    CHECK(ckpt_count(dir2) == 0);
}

/* enable_version_counter: a name that exists gets -v1, or is overwritten. */
static void test_version_counter(fixture *f, fulmen_loader *train) {
    char dir[300];
    case_dir("versions", dir, sizeof dir);
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    o.filename = "fixed";
    CHECK(fit_with(f, train, 1, &o) == 0);
    CHECK(fit_with(f, train, 1, &o) == 0);
    CHECK(has(dir, "fixed.ckpt") && has(dir, "fixed-v1.ckpt") && ckpt_count(dir) == 2);
    char dir2[300];
    case_dir("no-versions", dir2, sizeof dir2);
    o.dirpath = dir2;
    o.enable_version_counter = false;
    CHECK(fit_with(f, train, 1, &o) == 0);
    CHECK(fit_with(f, train, 1, &o) == 0);
    CHECK(has(dir2, "fixed.ckpt") && !has(dir2, "fixed-v1.ckpt") && ckpt_count(dir2) == 1);
}

/* save_last_link: last.ckpt is a symlink to the newest checkpoint, by file
 * name; a symlink planted there is replaced, its target untouched. */
static void test_last_link(fixture *f, fulmen_loader *train) {
    char dir[300], victim[400], last[400], target[256];
    case_dir("link", dir, sizeof dir);
    snprintf(victim, sizeof victim, "%s/victim.txt", root);
    FILE *v = fopen(victim, "w");
    CHECK(v != NULL);
    if (v == NULL) return;
    fputs("precious", v);
    fclose(v);
    snprintf(last, sizeof last, "%s/last.ckpt", dir);
    CHECK(symlink(victim, last) == 0);
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    o.save_last = true;
    o.save_last_link = true;
    CHECK(fit_with(f, train, 2, &o) == 0);
    ssize_t n = readlink(last, target, sizeof target - 1);
    CHECK(n > 0);
    if (n > 0) target[n] = '\0';
    CHECK(n > 0 && strcmp(target, "epoch=1-step=8.ckpt") == 0);
    CHECK(has(dir, "epoch=1-step=8.ckpt") && !has(dir, "epoch=0-step=4.ckpt"));
    char *text = fixture_read_text(victim);
    CHECK(text != NULL && strcmp(text, "precious") == 0);
    free(text);
    /* The linked file loads as the newest checkpoint would. */
    struct stat st;
    CHECK(stat(last, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0);
}

/* save_on_exception: the failing fit leaves a checkpoint named by the
 * template at the step it failed, and last.ckpt. */
static void test_save_on_exception(fixture *f, fulmen_loader *train) {
    char dir[300];
    case_dir("exception", dir, sizeof dir);
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    o.save_on_exception = true;
    o.save_last = true;
    f->fail_at_step = 2;
    CHECK(fit_with(f, train, 1, &o) == FULMEN_CODE_CALLBACK);
    CHECK(has(dir, "epoch=0-step=2.ckpt") && has(dir, "last.ckpt") && ckpt_count(dir) == 2);
    /* Off (the default), the same failure leaves nothing. */
    char dir2[300];
    case_dir("no-exception", dir2, sizeof dir2);
    o.dirpath = dir2;
    o.save_on_exception = false;
    CHECK(fit_with(f, train, 1, &o) == FULMEN_CODE_CALLBACK);
    CHECK(ckpt_count(dir2) == 0);
    f->fail_at_step = -1;
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-ckpt-options-%ld-XXXXXX", (long)getpid());
    if (mkdtemp(root) == NULL) return 2;
    fixture f = {fixture_mlp(8, 0.0), -1};
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *train = fixture_loader(ds, 8, false, 1);
    test_option_checks();
    test_time_interval(&f, train);
    test_version_counter(&f, train);
    test_last_link(&f, train);
    test_save_on_exception(&f, train);
    fulmen_loader_free(train);
    fulmen_dataset_free(ds);
    fulmen_model_free(f.model);
    CHECK(fulmen_live_handles() == 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_checkpoint_options");
}

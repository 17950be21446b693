/*
 * A run touches only what it created: resuming from another run's
 * checkpoint never deletes it; a checkpoint whose ModelCheckpoint state
 * names files outside the callback's folder (or with "..") never gets
 * them deleted; symlinks planted at the temporary or final checkpoint
 * names are replaced, never followed; two processes saving into one folder
 * both succeed; a failed resume leaves the model's weights unchanged; an
 * on_save_checkpoint entry too large to load back is refused when saving;
 * hparams.yaml escapes what YAML would misread.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"
#include "ckpt_edit.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_root[64];

typedef struct {
    fulmen_model *model;
    size_t big_entry; /* bytes of an on_save_checkpoint entry (0: none) */
    int optimizers;   /* how many configure_optimizers makes (1 or 2) */
    size_t loaded;    /* bytes of the entry on_load_checkpoint found */
} world;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((world *)ud)->model, batch, out);
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    world *w = ud;
    fulmen_error *e = fixture_add_sgd(config, w->model, 0.1, 0.9);
    if (e == NULL && w->optimizers > 1) e = fixture_add_adam(config, w->model, 0.01);
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    world *w = ud;
    if (hook == FULMEN_HOOK_LOAD_CHECKPOINT) {
        size_t len = 0;
        fulmen_error *e = fulmen_hook_context_checkpoint_get(ctx, "blob", NULL, 0, &len);
        w->loaded = e == NULL || fulmen_error_code(e) == FULMEN_CODE_OUT_OF_RANGE ? len : 0;
        fulmen_error_free(e);
        return NULL;
    }
    if (hook != FULMEN_HOOK_SAVE_CHECKPOINT || w->big_entry == 0) return NULL;
    char *v = malloc(w->big_entry + 1);
    memset(v, 'x', w->big_entry);
    v[w->big_entry] = 0;
    fulmen_error *e = fulmen_hook_context_checkpoint_set(ctx, "blob", v);
    free(v);
    return e;
}

static fulmen_lightning_module *module_for(world *w) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = w;
    vt.training_step = step;
    vt.configure_optimizers = configure;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, w->model, &m));
    return m;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL) exit(2);
    fputs(text, f);
    fclose(f);
}

static bool has_text(const char *path, const char *text) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, text) != NULL;
}

/* A trainer with a ModelCheckpoint in `dirpath` (save_top_k 1, optional
 * last.ckpt) and no logger. */
/* A trainer checkpointing into `dirpath` in `format` (NULL: the default). */
static fulmen_trainer *trainer_as(const char *dirpath, int64_t epochs, bool save_last, const char *format) {
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", true));
    if (format != NULL) CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", format));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_model_checkpoint_options mo = fulmen_model_checkpoint_options_default();
    mo.dirpath = dirpath;
    mo.save_last = save_last;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mo));
    return t;
}

static fulmen_trainer *trainer_in(const char *dirpath, int64_t epochs, bool save_last) {
    return trainer_as(dirpath, epochs, save_last, NULL);
}

static void best_path(fulmen_trainer *t, char *out, size_t cap) {
    size_t len = 0;
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, out, cap, &len));
}

/* Run B, in another folder, resumes from run A's checkpoint: A's file stays. */
static void resuming_never_deletes_the_source(fulmen_lightning_module *m, fulmen_loader *l) {
    char a_dir[128], b_dir[128], a_best[512];
    snprintf(a_dir, sizeof a_dir, "%s/run-a", g_root);
    snprintf(b_dir, sizeof b_dir, "%s/run-b", g_root);
    fulmen_trainer *a = trainer_in(a_dir, 2, false);
    CHECK_OK(fulmen_trainer_fit(a, m, l, NULL, NULL));
    best_path(a, a_best, sizeof a_best);
    fulmen_trainer_free(a);
    CHECK(exists(a_best));
    fulmen_trainer *b = trainer_in(b_dir, 4, false);
    CHECK_OK(fulmen_trainer_fit(b, m, l, NULL, a_best));
    CHECK(exists(a_best));
    /* Resuming in A's own folder keeps the source too (Lightning's rule). */
    fulmen_trainer *a2 = trainer_in(a_dir, 5, false);
    CHECK_OK(fulmen_trainer_fit(a2, m, l, NULL, a_best));
    CHECK(exists(a_best));
    char a2_best[512];
    best_path(a2, a2_best, sizeof a2_best);
    CHECK(strcmp(a2_best, a_best) != 0 && exists(a2_best));
    fulmen_trainer_free(a2);
    fulmen_trainer_free(b);
}

/* A checkpoint whose state names files outside the folder, through "..":
 * after the resumed fit, those files are still there. (The state is
 * edited in a safetensors file's JSON header; a Lightning file's callback
 * states are read into the same map and checked by the same code.) */
static void planted_paths_are_never_deleted(fulmen_lightning_module *m, fulmen_loader *l) {
    char dir[128], victim_dir[128], best[512];
    snprintf(dir, sizeof dir, "%s/planted", g_root);
    snprintf(victim_dir, sizeof victim_dir, "%s/victim", g_root);
    CHECK(mkdir(victim_dir, 0755) == 0);
    fulmen_trainer *t = trainer_as(dir, 1, false, "safetensors");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    best_path(t, best, sizeof best);
    fulmen_trainer_free(t);
    /* best_model_path and best_k_models now say <dir>/../victim/<name>. */
    char from[256], to[256];
    snprintf(from, sizeof from, "%s/epoch=", dir);
    snprintf(to, sizeof to, "%s/../victim/epoch=", dir);
    ckpt_file c = ckpt_read(best);
    CHECK(ckpt_replace(&c, from, to) >= 2);
    char planted[600];
    snprintf(planted, sizeof planted, "%s/planted.ckpt", g_root);
    ckpt_write(&c, planted);
    ckpt_free(&c);
    const char *name = strrchr(best, '/') + 1;
    char victim[600];
    snprintf(victim, sizeof victim, "%s/%s", victim_dir, name);
    write_text(victim, "someone else's file\n");
    fulmen_trainer *r = trainer_in(dir, 3, false);
    CHECK_OK(fulmen_trainer_fit(r, m, l, NULL, planted));
    fulmen_trainer_free(r);
    CHECK(exists(victim) && has_text(victim, "someone else's file"));
}

/* Symlinks planted at the old temporary name and at last.ckpt itself: the
 * run replaces them; their targets are untouched. */
static void planted_symlinks_are_not_followed(fulmen_lightning_module *m, fulmen_loader *l) {
    char dir[128], target[256], link_tmp[256], link_last[256];
    snprintf(dir, sizeof dir, "%s/links", g_root);
    snprintf(target, sizeof target, "%s/precious.txt", g_root);
    snprintf(link_tmp, sizeof link_tmp, "%s/last.ckpt.tmp", dir);
    snprintf(link_last, sizeof link_last, "%s/last.ckpt", dir);
    CHECK(mkdir(dir, 0755) == 0);
    write_text(target, "precious\n");
    CHECK(symlink(target, link_tmp) == 0);
    CHECK(symlink(target, link_last) == 0);
    fulmen_trainer *t = trainer_in(dir, 2, true);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    fulmen_trainer_free(t);
    CHECK(has_text(target, "precious"));
    struct stat st;
    CHECK(lstat(link_last, &st) == 0 && S_ISREG(st.st_mode)); /* a real checkpoint now */
    fulmen_model *probe = fixture_mlp(8, 0);
    CHECK_OK(fulmen_model_load(probe, link_last, false));
    fulmen_model_free(probe);
}

/* Two processes write checkpoints into one folder at once. */
static void two_processes_share_a_folder(const char *self) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/shared", g_root);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            execl(self, self, "--writer", dir, (char *)NULL);
            _exit(127);
        }
    }
    for (int k = 0; k < 2; k++) {
        int status = 0;
        CHECK(waitpid(kids[k], &status, 0) == kids[k]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    char last[256];
    snprintf(last, sizeof last, "%s/last.ckpt", dir);
    fulmen_model *probe = fixture_mlp(8, 0);
    CHECK_OK(fulmen_model_load(probe, last, false));
    fulmen_model_free(probe);
}

/* The child of two_processes_share_a_folder: checkpoints every step. */
static int writer(const char *dir) {
    world w = {fixture_mlp(8, 0), 0, 1, 0};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_dataset *ds = fixture_blobs(64, 5, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, true, 1);
    fulmen_trainer *t = NULL;
    fulmen_trainer_options *o = fixture_options(NULL, 3);
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", true));
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_model_checkpoint_options mo = fulmen_model_checkpoint_options_default();
    mo.dirpath = dir;
    mo.save_last = true;
    mo.every_n_train_steps = 1;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mo));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
    return check_finish("test_files writer");
}

/* A resume that fails (weights-only file, optimizer mismatch) leaves the
 * model's weights as they were. */
static void failed_resumes_leave_the_weights(void) {
    world w = {fixture_mlp(8, 0), 0, 1, 0};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_dataset *ds = fixture_blobs(32, 6, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    char dir[128], full[512], weights[512];
    snprintf(dir, sizeof dir, "%s/resume-fail", g_root);
    fulmen_trainer *t = trainer_in(dir, 2, false);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    best_path(t, full, sizeof full);
    fulmen_trainer_free(t);
    /* A weights-only checkpoint of the same run. */
    char wdir[160];
    snprintf(wdir, sizeof wdir, "%s/weights-only", dir);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", true));
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_model_checkpoint_options mo = fulmen_model_checkpoint_options_default();
    mo.dirpath = wdir;
    mo.save_weights_only = true;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mo));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    best_path(t, weights, sizeof weights);
    fulmen_trainer_free(t);
    /* A fresh model: its weights must survive both failures. */
    world v = {fixture_mlp(8, 0), 0, 2, 0};
    fulmen_model *copy = fixture_mlp(8, 0);
    char snap[512];
    snprintf(snap, sizeof snap, "%s/snapshot.safetensors", dir);
    CHECK_OK(fulmen_model_save(v.model, snap));
    CHECK_OK(fulmen_model_load(copy, snap, true));
    fulmen_lightning_module *m2 = module_for(&v);
    fulmen_trainer *r = fixture_trainer(NULL, 4);
    CHECK_ERR(fulmen_trainer_fit(r, m2, l, NULL, full), FULMEN_CODE_FORMAT, "optimizer");
    CHECK(fixture_max_diff(v.model, copy) == 0);
    v.optimizers = 1;
    CHECK_ERR(fulmen_trainer_fit(r, m2, l, NULL, weights), FULMEN_CODE_FORMAT, "weights-only");
    CHECK(fixture_max_diff(v.model, copy) == 0);
    fulmen_trainer_free(r);
    fulmen_lightning_module_free(m2);
    fulmen_model_free(v.model);
    fulmen_model_free(copy);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
}

/* An entry bigger than a safetensors checkpoint's metadata can carry fails
 * the save, naming it; the checkpoint saved before stays. Lightning's
 * format has no such bound: the entry is saved and read back whole. */
static void oversized_entries_are_refused_at_save(void) {
    world w = {fixture_mlp(8, 0), 0, 1, 0};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_dataset *ds = fixture_blobs(16, 7, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    char dir[128], last[256];
    snprintf(dir, sizeof dir, "%s/oversized", g_root);
    snprintf(last, sizeof last, "%s/last.ckpt", dir);
    fulmen_trainer *t = trainer_as(dir, 1, true, "safetensors");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    fulmen_trainer_free(t);
    w.big_entry = 51 * 1000 * 1000;
    t = trainer_as(dir, 3, true, "safetensors");
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, last), FULMEN_CODE_INVALID_ARGUMENT, "\"blob\"");
    fulmen_trainer_free(t);
    fulmen_model *probe = fixture_mlp(8, 0);
    CHECK_OK(fulmen_model_load(probe, last, false));
    fulmen_model_free(probe);
    /* Lightning's format: saved, and resumed with the entry whole. */
    t = trainer_as(dir, 2, true, "lightning");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, last));
    fulmen_trainer_free(t);
    w.big_entry = 0;
    t = trainer_as(dir, 3, true, "lightning");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, last));
    fulmen_trainer_free(t);
    CHECK(w.loaded == 51u * 1000 * 1000);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
}

/* Keys and values YAML would misread are quoted and escaped. */
static void hparams_yaml_escapes_hostile_text(fulmen_loader *l) {
    world w = {fixture_mlp(8, 0), 0, 1, 0};
    fulmen_lightning_module *m = module_for(&w);
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "# not a comment", "- not a list"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "sep", "a\xe2\x80\xa8" "b"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "ctl", "bell\a"));
    CHECK_OK(fulmen_lightning_module_set_hparam(m, "key: with colon", "&anchor"));
    char root[128], yaml[256];
    snprintf(root, sizeof root, "%s/hparams", g_root);
    fulmen_trainer_options *o = fixture_options(root, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "csv"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    snprintf(yaml, sizeof yaml, "%s/lightning_logs/version_0/hparams.yaml", root);
    CHECK(has_text(yaml, "lr: 0.1\n"));
    CHECK(has_text(yaml, "\"# not a comment\": \"- not a list\"\n"));
    CHECK(has_text(yaml, "sep: \"a\\Lb\"\n"));
    CHECK(has_text(yaml, "ctl: \"bell\\x07\"\n"));
    CHECK(has_text(yaml, "\"key: with colon\": \"&anchor\"\n"));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

int main(int argc, char **argv) {
    CHECK_OK(fulmen_set_num_threads(1));
    if (argc == 3 && strcmp(argv[1], "--writer") == 0) return writer(argv[2]);
    snprintf(g_root, sizeof g_root, "/tmp/fulmen-test-files-XXXXXX");
    CHECK(mkdtemp(g_root) != NULL);
    world w = {fixture_mlp(8, 0), 0, 1, 0};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_dataset *ds = fixture_blobs(32, 4, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, true, 2);
    resuming_never_deletes_the_source(m, l);
    planted_paths_are_never_deleted(m, l);
    planted_symlinks_are_not_followed(m, l);
    two_processes_share_a_folder(argv[0]);
    failed_resumes_leave_the_weights();
    oversized_entries_are_refused_at_save();
    hparams_yaml_escapes_hostile_text(l);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    CHECK(system(cmd) == 0);
    return check_finish("test_files");
}

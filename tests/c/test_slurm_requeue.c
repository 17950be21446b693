/*
 * SLURM auto-requeue (Lightning's SLURMEnvironment auto_requeue): with
 * `slurm_auto_requeue` on in a SLURM job, SIGUSR1 saves
 * default_root_dir/hpc_ckpt_<n>.ckpt at the next batch end, runs
 * `scontrol requeue <job id>` (a stand-in script on PATH records its
 * arguments) and stops the fit with FULMEN_CODE_INTERRUPTED; the next fit
 * resumes from the highest hpc checkpoint. An array job is requeued as
 * <array job>_<task>; a failing scontrol is a clear error; the handler is
 * installed only when the option is on inside a non-interactive job, and
 * the default action is back after the run.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv */

#include "check.h"
#include "fixture.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[64];

typedef struct {
    fulmen_model *model;
    int steps;           /* training steps of this fit */
    int64_t raise_epoch; /* SIGUSR1 at the end of batch `raise_batch` of this epoch; -1: never */
    int64_t raise_batch;
    bool handler_seen;   /* whether SIGUSR1 had a handler other than SIG_DFL during the run */
} world;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    world *w = ud;
    w->steps++;
    return fixture_cross_entropy(w->model, batch, out);
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    world *w = ud;
    if (hook != FULMEN_HOOK_TRAIN_BATCH_END) return NULL;
    struct sigaction now;
    if (sigaction(SIGUSR1, NULL, &now) == 0 && now.sa_handler != SIG_DFL) w->handler_seen = true;
    int64_t epoch = 0, i = 0;
    CHECK_OK(fulmen_hook_context_epoch(ctx, &epoch));
    CHECK_OK(fulmen_hook_context_batch_idx(ctx, &i));
    if (epoch == w->raise_epoch && i == w->raise_batch) raise(SIGUSR1);
    return NULL;
}

static fulmen_trainer *trainer_at(const char *root, bool requeue) {
    fulmen_trainer_options *o = fixture_options(root, 3);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "slurm_auto_requeue", requeue));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* Writes an executable `scontrol` script with body `body` into `dir`. */
static void fake_scontrol(const char *dir, const char *body) {
    char path[256];
    snprintf(path, sizeof path, "%s/scontrol", dir);
    CHECK(mkdir(dir, 0755) == 0);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f == NULL) return;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    CHECK(chmod(path, 0755) == 0);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int64_t global_step(fulmen_trainer *t) {
    int64_t gs = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &gs));
    return gs;
}

static bool default_action(void) {
    struct sigaction now;
    return sigaction(SIGUSR1, NULL, &now) == 0 && now.sa_handler == SIG_DFL;
}

/* SIGUSR1 saves, requeues and stops; the next fits resume from the newest
 * hpc checkpoint; an array job's id is <array>_<task>. */
static void requeue_and_resume(fulmen_loader *l) {
    char root[128], log[192], ckpt[192], text_expected[64];
    snprintf(root, sizeof root, "%s/run", g_root);
    snprintf(log, sizeof log, "%s/scontrol.log", g_root);
    world w = {.model = fixture_mlp(8, 0), .raise_epoch = 1, .raise_batch = 1};
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, on_hook);

    fulmen_trainer *t = trainer_at(root, true);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_INTERRUPTED, "requeued job 4242");
    CHECK(w.steps == 6 && w.handler_seen);
    CHECK(default_action());
    snprintf(ckpt, sizeof ckpt, "%s/hpc_ckpt_1.ckpt", root);
    CHECK(exists(ckpt));
    char *text = fixture_read_text(log);
    CHECK(text != NULL && strcmp(text, "requeue 4242\n") == 0);
    free(text);
    fulmen_trainer_free(t);

    /* The requeued job (an array task now): resumes at step 6, is signalled
     * again at step 10, saves hpc_ckpt_2 and requeues 77_3. */
    CHECK(setenv("SLURM_ARRAY_JOB_ID", "77", 1) == 0);
    CHECK(setenv("SLURM_ARRAY_TASK_ID", "3", 1) == 0);
    w.steps = 0;
    w.raise_epoch = 2;
    t = trainer_at(root, true);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_INTERRUPTED, "requeued job 77_3");
    CHECK(w.steps == 4);
    snprintf(ckpt, sizeof ckpt, "%s/hpc_ckpt_2.ckpt", root);
    CHECK(exists(ckpt));
    snprintf(text_expected, sizeof text_expected, "requeue 4242\nrequeue 77_3\n");
    text = fixture_read_text(log);
    CHECK(text != NULL && strcmp(text, text_expected) == 0);
    free(text);
    fulmen_trainer_free(t);
    CHECK(unsetenv("SLURM_ARRAY_JOB_ID") == 0 && unsetenv("SLURM_ARRAY_TASK_ID") == 0);

    /* The last run resumes from hpc_ckpt_2 (step 10) and finishes at 12. */
    w.steps = 0;
    w.raise_epoch = -1;
    t = trainer_at(root, true);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(w.steps == 2 && global_step(t) == 12);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* The handler is installed only with the option on, inside a SLURM job
 * that is not interactive; a fit without it starts from scratch. */
static void only_when_asked_in_a_job(fulmen_loader *l) {
    char root[128];
    snprintf(root, sizeof root, "%s/run", g_root); /* holds hpc checkpoints */
    world w = {.model = fixture_mlp(8, 0), .raise_epoch = -1};
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, on_hook);
    fulmen_trainer *t = trainer_at(root, false);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(!w.handler_seen && w.steps == 12); /* no resume either */
    fulmen_trainer_free(t);
    CHECK(setenv("SLURM_JOB_NAME", "interactive", 1) == 0);
    w.steps = 0;
    t = trainer_at(root, true);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(!w.handler_seen && w.steps == 12);
    fulmen_trainer_free(t);
    CHECK(unsetenv("SLURM_JOB_NAME") == 0);
    CHECK(default_action());
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* A failing `scontrol requeue` is an IO error naming the saved checkpoint. */
static void a_failing_requeue_is_an_error(fulmen_loader *l, const char *failing_path) {
    char root[128], bin[128];
    snprintf(root, sizeof root, "%s/failing", g_root);
    snprintf(bin, sizeof bin, "%s/bin-failing", g_root);
    fake_scontrol(bin, "exit 3");
    CHECK(setenv("PATH", failing_path, 1) == 0);
    world w = {.model = fixture_mlp(8, 0), .raise_epoch = 0, .raise_batch = 0};
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, on_hook);
    fulmen_trainer *t = trainer_at(root, true);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_IO, "was not requeued");
    char ckpt[192];
    snprintf(ckpt, sizeof ckpt, "%s/hpc_ckpt_1.ckpt", root);
    CHECK(exists(ckpt));
    CHECK(default_action());
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    CHECK(default_action());
    snprintf(g_root, sizeof g_root, "/tmp/fulmen-test-slurm-XXXXXX");
    CHECK(mkdtemp(g_root) != NULL);
    const char *old = getenv("PATH");
    char *old_path = old != NULL ? strdup(old) : NULL;
    char bin[128], body[256], path[4096];
    snprintf(bin, sizeof bin, "%s/bin", g_root);
    snprintf(body, sizeof body, "printf '%%s\\n' \"$*\" >> '%s/scontrol.log'", g_root);
    fake_scontrol(bin, body);
    snprintf(path, sizeof path, "%s:%s", bin, old_path != NULL ? old_path : "/usr/bin:/bin");
    CHECK(setenv("PATH", path, 1) == 0);
    CHECK(setenv("SLURM_JOB_ID", "4242", 1) == 0);
    const char *unset[] = {"SLURM_JOB_NAME", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_NTASKS", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++) CHECK(unsetenv(unset[i]) == 0);

    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 1);
    requeue_and_resume(l);
    only_when_asked_in_a_job(l);
    char failing[4096];
    snprintf(failing, sizeof failing, "%s/bin-failing:%s", g_root, old_path != NULL ? old_path : "/usr/bin:/bin");
    a_failing_requeue_is_an_error(l, failing);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);

    /* The environment as it was (other tests may share this process). */
    if (old_path != NULL) {
        CHECK(setenv("PATH", old_path, 1) == 0);
    } else {
        CHECK(unsetenv("PATH") == 0);
    }
    free(old_path);
    CHECK(unsetenv("SLURM_JOB_ID") == 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    CHECK(system(cmd) == 0);
    return check_finish("test_slurm_requeue");
}

/*
 * SIGINT and SIGTERM during fit, as Lightning handles them: the run stops
 * at its next hook with FULMEN_CODE_INTERRUPTED, on_exception runs, and
 * the loggers are finalized, so metrics.csv and the TensorBoard file hold
 * every step logged before the signal. The host's own handlers are back
 * afterwards; `handle_signals=false` leaves them alone; SIG_IGN stays
 * ignored; a second signal before the run stops goes to the previous
 * handler (by default it ends the process).
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_root[64];

typedef struct {
    fulmen_model *model;
    int signal;      /* raised in the step of batch `at` of epoch 1 */
    int times;       /* how many times */
    int steps;       /* steps run */
    int exceptions;  /* on_exception calls */
    char exception[256];
} world;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    world *w = ud;
    int64_t epoch = 0, i = 0;
    CHECK_OK(fulmen_step_context_epoch(ctx, &epoch));
    CHECK_OK(fulmen_step_context_batch_idx(ctx, &i));
    w->steps++;
    fulmen_error *e = fixture_cross_entropy(w->model, batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, FULMEN_LOG_ON_STEP, 0);
    if (epoch == 1 && i == 2) {
        for (int k = 0; k < w->times; k++) raise(w->signal);
    }
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    world *w = ud;
    if (hook == FULMEN_HOOK_EXCEPTION) {
        w->exceptions++;
        size_t len = 0;
        CHECK_OK(fulmen_hook_context_exception(ctx, w->exception, sizeof w->exception, &len));
    }
    return NULL;
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static long tensorboard_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    long total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents", 19) != 0) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0) total += (long)st.st_size;
    }
    closedir(d);
    return total;
}

static fulmen_trainer *trainer_at(const char *root, bool handle) {
    fulmen_trainer_options *o = fixture_options(root, 3);
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "handle_signals", handle));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static int g_host_handled;
static void host_handler(int sig) {
    (void)sig;
    g_host_handled++;
}

/* The signal stops the run; its logs are on disk; the host's handler is back. */
static void a_signal_stops_the_run_cleanly(int sig, const char *name, fulmen_loader *l) {
    struct sigaction host, now;
    memset(&host, 0, sizeof host);
    host.sa_handler = host_handler;
    sigemptyset(&host.sa_mask);
    CHECK(sigaction(sig, &host, NULL) == 0);
    world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    w.signal = sig;
    w.times = 1;
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, on_hook);
    char root[128];
    snprintf(root, sizeof root, "%s/%s", g_root, name);
    fulmen_trainer *t = trainer_at(root, true);
    g_host_handled = 0;
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_INTERRUPTED, name);
    CHECK(w.steps == 4 + 3); /* epoch 0, then batches 0..2 of epoch 1 */
    CHECK(w.exceptions == 1 && strstr(w.exception, name) != NULL);
    CHECK(g_host_handled == 0); /* fulmen handled it */
    char csv[300], logdir[256];
    snprintf(logdir, sizeof logdir, "%s/lightning_logs/version_0", root);
    snprintf(csv, sizeof csv, "%s/metrics.csv", logdir);
    /* A header line and one row per completed step: 4 + 2, none lost (the
     * step of batch 2 was stopped before its backward). */
    CHECK(count_lines(csv) == 1 + 6);
    CHECK(tensorboard_bytes(logdir) > 6 * 40);
    CHECK(sigaction(sig, NULL, &now) == 0 && now.sa_handler == host_handler);
    /* The next fit runs normally. */
    w.times = 0;
    fulmen_trainer *again = trainer_at(NULL, true);
    CHECK_OK(fulmen_trainer_fit(again, m, l, NULL, NULL));
    fulmen_trainer_free(again);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
    signal(sig, SIG_DFL);
}

/* handle_signals=false: the host's handler gets the signal, the run goes on.
 * SIG_IGN: the signal stays ignored. */
static void hosts_can_keep_their_signals(fulmen_loader *l) {
    world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    w.signal = SIGINT;
    w.times = 1;
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, on_hook);
    signal(SIGINT, host_handler);
    g_host_handled = 0;
    fulmen_trainer *t = trainer_at(NULL, false);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(g_host_handled == 1 && w.exceptions == 0 && w.steps == 12);
    fulmen_trainer_free(t);
    signal(SIGINT, SIG_IGN);
    w.steps = 0;
    t = trainer_at(NULL, true);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(w.steps == 12 && w.exceptions == 0);
    struct sigaction now;
    CHECK(sigaction(SIGINT, NULL, &now) == 0 && now.sa_handler == SIG_IGN);
    fulmen_trainer_free(t);
    signal(SIGINT, SIG_DFL);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* Two signals before the run stops: the second ends the process as the
 * default handler would. Runs in a child (this program with --twice). */
static int second_signal_child(void) {
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, true, 4);
    world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    w.signal = SIGINT;
    w.times = 2;
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, on_hook);
    fulmen_trainer *t = trainer_at(NULL, true);
    fulmen_error *e = fulmen_trainer_fit(t, m, l, NULL, NULL);
    fulmen_error_free(e);
    return 3; /* not reached: the second SIGINT ends the process */
}

static void a_second_signal_forces(const char *self) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "--twice", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
}

int main(int argc, char **argv) {
    CHECK_OK(fulmen_set_num_threads(1));
    if (argc == 2 && strcmp(argv[1], "--twice") == 0) return second_signal_child();
    snprintf(g_root, sizeof g_root, "/tmp/fulmen-test-signals-XXXXXX");
    CHECK(mkdtemp(g_root) != NULL);
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, true, 4);
    a_signal_stops_the_run_cleanly(SIGINT, "SIGINT", l);
    a_signal_stops_the_run_cleanly(SIGTERM, "SIGTERM", l);
    hosts_can_keep_their_signals(l);
    a_second_signal_forces(argv[0]);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    CHECK(system(cmd) == 0);
    return check_finish("test_signals");
}

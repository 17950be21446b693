/*
 * Crash safety: a training process killed with SIGKILL at random moments
 * (during steps and in the middle of checkpoint writes) leaves checkpoints
 * that load, and resuming from "last" finishes the run with exactly the
 * weights of an uninterrupted run.
 *
 * Without arguments this program is the orchestrator; `test_crash train
 * DIR` is the training process (a checkpoint after every step, resumed
 * from "last" when DIR holds one), which writes DIR/final.safetensors.
 */
#define _XOPEN_SOURCE 700 /* fork, kill, mkdtemp, nanosleep */

#include "check.h"
#include "fixture.h"

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRIALS 20
#define SAMPLES 512
#define FEATURES 64
#define HIDDEN 256
#define CLASSES 10
#define EPOCHS 4

typedef struct {
    fulmen_model *model;
} module_state;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((module_state *)ud)->model, batch, out);
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_adam(config, ((module_state *)ud)->model, 1e-3);
}

static fulmen_model *seeded_model(void) {
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(FEATURES, HIDDEN, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(HIDDEN, CLASSES, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

/* Random features and labels, the same in every process. */
static fulmen_dataset *seeded_data(void) {
    CHECK_OK(fulmen_manual_seed(7));
    int64_t xs[2] = {SAMPLES, FEATURES};
    fulmen_tensor *x = NULL, *y = NULL, *head = NULL;
    CHECK_OK(fulmen_tensor_randn(xs, 2, FULMEN_DTYPE_F32, &x));
    /* The label: which of the first CLASSES features is largest. */
    CHECK_OK(fulmen_tensor_narrow(x, 1, 0, CLASSES, &head));
    CHECK_OK(fulmen_tensor_argmax(head, 1, false, &y));
    const fulmen_tensor *parts[2] = {x, y};
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(head);
    return ds;
}

static bool has_checkpoint(const char *dir) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    DIR *d = opendir(sub);
    if (d == NULL) return false;
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 5 && strcmp(e->d_name + n - 5, ".ckpt") == 0) found = true;
    }
    closedir(d);
    return found;
}

/* Leftover "*.tmp" files: the process died while writing a checkpoint. */
static int tmp_files(const char *dir) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    DIR *d = opendir(sub);
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0) n++;
    }
    closedir(d);
    return n;
}

/* The training process. */
static int train(const char *dir) {
    CHECK_OK(fulmen_set_num_threads(1));
    module_state s = {seeded_model()};
    fulmen_dataset *ds = seeded_data();
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 16;
    lo.shuffle = true;
    lo.seed = 3;
    fulmen_loader *loader = NULL;
    CHECK_OK(fulmen_loader_new(ds, &lo, &loader));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", EPOCHS));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", dir));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "csv"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_model_checkpoint_options c = fulmen_model_checkpoint_options_default();
    char ckpt_dir[512];
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/checkpoints", dir);
    c.dirpath = ckpt_dir;
    c.every_n_train_steps = 1;
    c.save_last = true;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &c));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, has_checkpoint(dir) ? "last" : NULL));
    char final[512];
    snprintf(final, sizeof final, "%s/final.safetensors", dir);
    CHECK_OK(fulmen_model_save(s.model, final));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
    CHECK(fulmen_live_handles() == 0);
    return check_failed != 0;
}

static const char *self_path;

static pid_t start(const char *dir) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_path, self_path, "train", dir, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether the two saved models are exactly equal. */
static bool same_weights(const char *a_path, const char *b_path) {
    fulmen_model *a = seeded_model(), *b = seeded_model();
    fulmen_error *ea = fulmen_model_load(a, a_path, true), *eb = fulmen_model_load(b, b_path, true);
    bool same = ea == NULL && eb == NULL && fixture_max_diff(a, b) == 0.0;
    fulmen_error_free(ea);
    fulmen_error_free(eb);
    fulmen_model_free(a);
    fulmen_model_free(b);
    return same;
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc == 3 && strcmp(argv[1], "train") == 0) return train(argv[2]);

    char base[] = "/tmp/fulmen-crash-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ref[600];
    snprintf(ref, sizeof ref, "%s/reference", base);
    /* The uninterrupted run, timed, with the moment its first checkpoint appears. */
    double t0 = now(), first = -1;
    pid_t ref_pid = start(ref);
    while (waitpid(ref_pid, NULL, WNOHANG) == 0) {
        if (first < 0 && has_checkpoint(ref)) first = now() - t0;
        struct timespec tick = {0, 2 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    double duration = now() - t0;
    CHECK(first > 0);
    char ref_weights[700];
    snprintf(ref_weights, sizeof ref_weights, "%s/final.safetensors", ref);
    printf("uninterrupted run: %.2f s, first checkpoint after %.2f s\n", duration, first);

    unsigned seed = (unsigned)time(NULL);
    const char *s = getenv("FULMEN_CRASH_SEED");
    if (s != NULL) seed = (unsigned)strtoul(s, NULL, 10);
    srand(seed);
    int mid_write = 0, before_first = 0, identical = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/trial-%d", base, trial);
        /* A random moment of the run (a few before its first checkpoint);
         * odd trials then wait for a checkpoint write to begin (its .tmp
         * file) and kill the process in the middle of it. */
        double from = trial % 5 == 0 ? 0.5 * first : first;
        double delay = from + (0.95 * duration - from) * (double)rand() / RAND_MAX;
        pid_t pid = start(dir);
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        int code = -1, status = 0;
        for (int polls = 0; trial % 2 == 1 && polls < 20000 && tmp_files(dir) == 0; polls++) {
            if (waitpid(pid, &status, WNOHANG) == pid) {
                code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                break;
            }
        }
        if (code < 0) {
            kill(pid, SIGKILL);
            code = wait_exit(pid);
        }
        bool killed = code == 128 + SIGKILL;
        int tmps = tmp_files(dir);
        mid_write += tmps > 0;
        before_first += !has_checkpoint(dir);
        /* Resume (from "last", or from scratch when no checkpoint was written). */
        CHECK(wait_exit(start(dir)) == 0);
        char weights[700];
        snprintf(weights, sizeof weights, "%s/final.safetensors", dir);
        bool same = same_weights(ref_weights, weights);
        identical += same;
        CHECK(same);
        printf("trial %2d: killed after %.2f s (%s)%s, resumed: %s\n", trial, delay,
               killed ? "SIGKILL" : "had already finished", tmps > 0 ? " in the middle of a checkpoint write" : "",
               same ? "same final weights" : "DIFFERENT final weights");
        rm_rf(dir);
    }
    printf("%d of %d resumed runs reached the uninterrupted weights exactly; %d kills hit a checkpoint write, "
           "%d came before the first checkpoint (FULMEN_CRASH_SEED=%u)\n",
           identical, TRIALS, mid_write, before_first, seed);
    rm_rf(base);
    return check_finish("test_crash");
}

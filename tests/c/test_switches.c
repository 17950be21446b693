/*
 * Lightning's Trainer switches: deterministic="warn" and benchmark (set for
 * the run, restored after it, also after a failed run), barebones (what it
 * turns off, Lightning's refusals, dropped logs) and a wall-time
 * val_check_interval ("DD:HH:MM:SS").
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    bool det, warn, bench; /* libtorch's flags seen in the last training step */
    int validations;       /* FULMEN_HOOK_VALIDATION_START calls */
    bool fail;             /* training_step fails */
    bool log;              /* training_step logs "loss" */
} state;

static char root[] = "/tmp/fulmen-switches-XXXXXX";

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    fulmen_torch_flags(&s->det, &s->warn, &s->bench);
    if (s->fail) return fulmen_error_new(FULMEN_CODE_CALLBACK, "step failed on purpose");
    fulmen_error *e = fixture_cross_entropy(s->model, batch, out);
    if (e == NULL && s->log) e = fulmen_step_context_log(ctx, "loss", 1.0, FULMEN_LOG_ON_STEP, 0);
    return e;
}

static fulmen_error *val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ud;
    (void)ctx;
    (void)batch;
    return NULL;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    state *s = ud;
    if (hook == FULMEN_HOOK_VALIDATION_START) s->validations++;
    return NULL;
}

static fulmen_lightning_module *module_for(state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = step;
    vt.validation_step = val_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

/* Options without logger, checkpoint, progress bar, summary or sanity
 * check, plus `extra` key / value pairs (NULL-terminated). */
static fulmen_trainer *trainer_with(int64_t epochs, const char **extra) {
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i += 2) CHECK_OK(fulmen_trainer_options_set(o, extra[i], extra[i + 1]));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static fulmen_loader *loader; /* 64 points in 4 batches */

/* Fits `s` once with `extra`; returns the error code (0: success). */
static int fit_with(state *s, int64_t epochs, const char **extra) {
    fulmen_lightning_module *m = module_for(s);
    fulmen_trainer *t = trainer_with(epochs, extra);
    int code = fixture_code(fulmen_trainer_fit(t, m, loader, loader, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    return code;
}

static void flags_now(bool *det, bool *warn, bool *bench) { fulmen_torch_flags(det, warn, bench); }

static void test_deterministic_and_benchmark(void) {
    state s = {.model = fixture_mlp(4, 0)};
    bool det = true, warn = true, bench = true;
    flags_now(&det, &warn, &bench);
    CHECK(!det && !warn && !bench);

    /* "warn": on with warn_only; benchmark not given: off */
    const char *w[] = {"deterministic", "warn", NULL};
    CHECK(fit_with(&s, 1, w) == 0);
    CHECK(s.det && s.warn && !s.bench);
    flags_now(&det, &warn, &bench);
    CHECK(!det && !warn && !bench);

    /* true with benchmark=true: both on (Lightning warns), restored */
    const char *both[] = {"deterministic", "true", "benchmark", "true", NULL};
    CHECK(fit_with(&s, 1, both) == 0);
    CHECK(s.det && !s.warn && s.bench);
    flags_now(&det, &warn, &bench);
    CHECK(!det && !warn && !bench);

    /* restored after a failed run too */
    const char *b[] = {"benchmark", "true", "deterministic", "warn", NULL};
    s.fail = true;
    CHECK(fit_with(&s, 1, b) == FULMEN_CODE_CALLBACK);
    CHECK(s.det && s.warn && s.bench);
    flags_now(&det, &warn, &bench);
    CHECK(!det && !warn && !bench);
    s.fail = false;

    /* false / "none" leave the flags alone */
    const char *off[] = {"deterministic", "false", "benchmark", "none", NULL};
    CHECK(fit_with(&s, 1, off) == 0);
    CHECK(!s.det && !s.warn && !s.bench);

    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_ERR(fulmen_trainer_options_set(o, "deterministic", "warn_only"), FULMEN_CODE_INVALID_ARGUMENT, "\"warn\"");
    CHECK_ERR(fulmen_trainer_options_set(o, "benchmark", "fast"), FULMEN_CODE_INVALID_ARGUMENT, "benchmark");
    CHECK_OK(fulmen_trainer_options_set_bool(o, "deterministic", true));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "benchmark", false));
    fulmen_trainer_options_free(o);
    fulmen_model_free(s.model);
}

static void test_barebones_refusals(void) {
    static const char *refused[][3] = {
        {"enable_checkpointing", "true", "`Trainer(barebones=True, enable_checkpointing=True)` was passed. Checkpointing"},
        {"logger", "true", "`Trainer(barebones=True, logger=True)` was passed. Logging can impact raw speed"},
        {"logger", "csv", "`Trainer(barebones=True, logger='csv')` was passed."},
        {"enable_progress_bar", "true", "`Trainer(barebones=True, enable_progress_bar=True)` was passed. The progress bar"},
        {"log_every_n_steps", "5", "`Trainer(barebones=True, log_every_n_steps=5)` was passed. Logging"},
        {"enable_model_summary", "true", "`Trainer(barebones=True, enable_model_summary=True)` was passed. Model summary"},
        {"num_sanity_val_steps", "2", "`Trainer(barebones=True, num_sanity_val_steps=2)` was passed. Sanity checking"},
        {"fast_dev_run", "true", "`Trainer(barebones=True, fast_dev_run=1)` was passed. Development run is not meant"},
        {"detect_anomaly", "true", "`Trainer(barebones=True, detect_anomaly=True)` was passed. Anomaly detection"},
        {"profiler", "simple", "`Trainer(barebones=True, profiler='simple')` was passed. Profiling can impact"},
    };
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "barebones", true));
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        fulmen_error *e = fulmen_trainer_options_set(o, refused[i][0], refused[i][1]);
        bool ok = fulmen_error_code(e) == FULMEN_CODE_INVALID_ARGUMENT && strstr(fulmen_error_message(e), refused[i][2]) != NULL &&
                  strstr(fulmen_error_message(e), "so it is disabled in barebones mode.") != NULL;
        if (!ok) fprintf(stderr, "barebones with %s=%s: got code %d \"%s\"\n", refused[i][0], refused[i][1],
                         fulmen_error_code(e), fulmen_error_message(e));
        CHECK(ok);
        fulmen_error_free(e);
    }
    /* turning them off, and log_every_n_steps=0, are accepted */
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 0));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    fulmen_trainer_options_free(o);

    /* an opt-in set before barebones is refused when barebones comes */
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "detect_anomaly", true));
    CHECK_ERR(fulmen_trainer_options_set_bool(o, "barebones", true), FULMEN_CODE_INVALID_ARGUMENT,
              "`Trainer(barebones=True, detect_anomaly=True)` was passed.");
    /* without barebones, 0 steps between logs is still refused */
    CHECK_ERR(fulmen_trainer_options_set_int(o, "log_every_n_steps", 0), FULMEN_CODE_INVALID_ARGUMENT, "log_every_n_steps");
    fulmen_trainer_options_free(o);
}

static void test_barebones_run(void) {
    state s = {.model = fixture_mlp(4, 0), .log = true};
    char dir[300], sub[400];
    snprintf(dir, sizeof dir, "%s/bare", root);
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", 1));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", dir));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "barebones", true));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_lightning_module *m = module_for(&s);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, loader, NULL));
    int64_t steps = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 4);
    CHECK(s.validations == 1); /* at the epoch end; no sanity check */
    double v = 0;
    CHECK_ERR(fulmen_trainer_callback_metric(t, "loss", &v), FULMEN_CODE_INVALID_ARGUMENT, NULL); /* log dropped */
    snprintf(sub, sizeof sub, "%s/lightning_logs", dir);
    CHECK(access(sub, F_OK) != 0);
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    CHECK(access(sub, F_OK) != 0);

    /* a logger added to a barebones trainer is refused when a run starts */
    fulmen_logger_vtable lv;
    memset(&lv, 0, sizeof lv);
    lv.struct_size = sizeof lv;
    CHECK_OK(fulmen_trainer_add_logger(t, &lv));
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, loader, NULL), FULMEN_CODE_INVALID_ARGUMENT, "`Trainer(barebones=True, logger=");
    fulmen_trainer_free(t);

    /* the same fit without barebones keeps the logged value */
    const char *none[] = {NULL};
    t = trainer_with(1, none);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, loader, NULL));
    CHECK_OK(fulmen_trainer_callback_metric(t, "loss", &v));
    CHECK(v == 1.0);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
}

static void test_time_val_check(void) {
    state s = {.model = fixture_mlp(4, 0)};
    /* 0 seconds: due after every batch, epoch end included */
    const char *zero[] = {"val_check_interval", "00:00:00:00", NULL};
    CHECK(fit_with(&s, 2, zero) == 0);
    CHECK(s.validations == 8);
    /* one hour: never due, and the epoch end does not validate either */
    s.validations = 0;
    const char *hour[] = {"val_check_interval", "00:01:00:00", NULL};
    CHECK(fit_with(&s, 2, hour) == 0);
    CHECK(s.validations == 0);
    /* only in the epochs check_val_every_n_epoch picks */
    s.validations = 0;
    const char *every2[] = {"val_check_interval", "0:0:0:0", "check_val_every_n_epoch", "2", NULL};
    CHECK(fit_with(&s, 2, every2) == 0);
    CHECK(s.validations == 4);
    /* fast_dev_run ignores the time: one validation after its batch */
    s.validations = 0;
    const char *dev[] = {"val_check_interval", "00:01:00:00", "fast_dev_run", "1", NULL};
    CHECK(fit_with(&s, 2, dev) == 0);
    CHECK(s.validations == 1);
    /* counts and fractions still work next to it */
    s.validations = 0;
    const char *half[] = {"val_check_interval", "0.5", NULL};
    CHECK(fit_with(&s, 1, half) == 0);
    CHECK(s.validations == 2);

    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_ERR(fulmen_trainer_options_set(o, "val_check_interval", "01:02:03"), FULMEN_CODE_INVALID_ARGUMENT,
              "Invalid time format for `val_check_interval`: \"01:02:03\". Expected 'DD:HH:MM:SS'.");
    CHECK_ERR(fulmen_trainer_options_set(o, "val_check_interval", "00:00:1.5:00"), FULMEN_CODE_INVALID_ARGUMENT,
              "Non-integer component in `val_check_interval` string");
    CHECK_ERR(fulmen_trainer_options_set(o, "val_check_interval", "-1:00:00:00"), FULMEN_CODE_INVALID_ARGUMENT,
              "Non-integer component in `val_check_interval` string");
    CHECK_ERR(fulmen_trainer_options_set(o, "val_check_interval", "99999999:00:00:00"), FULMEN_CODE_INVALID_ARGUMENT,
              "100 years");
    /* a refused value leaves the time set before */
    CHECK_OK(fulmen_trainer_options_set(o, "val_check_interval", "00:00:00:05"));
    fulmen_trainer_options_free(o);
    fulmen_model_free(s.model);
}

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    fulmen_dataset *ds = fixture_blobs(64, 3, 1.0f);
    loader = fixture_loader(ds, 16, false, 0);
    test_deterministic_and_benchmark();
    test_barebones_refusals();
    test_barebones_run();
    test_time_val_check();
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_switches");
}

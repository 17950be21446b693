/*
 * profiler="simple": the report of each run names the hooks of the
 * callbacks and the module, the steps, backward, the optimizer steps and
 * the batch fetches, with their call counts; off, there is no report.
 * profiler="pytorch": the same report, then libtorch's operators, and a
 * Chrome trace holding them and the hooks as named scopes; a run that
 * fails after libtorch's profiler started leaves it off.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */

#include "check.h"
#include "fixture.h"

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((state *)ud)->model, batch, out);
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fixture_cross_entropy(((state *)ud)->model, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", check_item(loss), 0, 0);
    return e;
}

static fulmen_error *noop(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    (void)hook;
    (void)ctx;
    return NULL;
}

static fulmen_error *failing_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                  fulmen_tensor **out) {
    (void)ud;
    (void)ctx;
    (void)batch;
    (void)out;
    return fulmen_error_new(FULMEN_CODE_CALLBACK, "this step refused its batch");
}

/* A one-epoch fit with profiler="pytorch" in `root` (no logger, no
 * checkpoints): NULL when it succeeded and reported libtorch's operators,
 * else its error. */
static fulmen_error *profiled_fit(fulmen_lightning_module *m, fulmen_loader *train, const char *root) {
    static char report[16384];
    size_t len = 0;
    fulmen_trainer_options *o = fixture_options(root, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set(o, "profiler", "pytorch"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_error *e = fulmen_trainer_fit(t, m, train, NULL, NULL);
    if (e == NULL) {
        CHECK_OK(fulmen_trainer_profiler_report(t, report, sizeof report, &len));
        CHECK(strstr(report, "FIT PyTorch Profiler Report") != NULL);
    }
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    return e;
}

/* A profiled fit that fails after libtorch's profiler started leaves it
 * off, so the next profiled fit runs: its trace folder under a regular
 * file (an IO error when the trace is written), and a training_step that
 * returns an error. */
static void test_failed_runs_stop_the_profiler(fulmen_lightning_module *m, fulmen_loader *train,
                                               const fulmen_module_vtable *vt, fulmen_model *model) {
    char base[] = "/tmp/fulmen-test-profiler-fail-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char blocker[100], under[100], fresh[100];
    snprintf(blocker, sizeof blocker, "%s/file", base);
    snprintf(under, sizeof under, "%s/file/root", base);
    snprintf(fresh, sizeof fresh, "%s/fresh", base);
    FILE *f = fopen(blocker, "w");
    CHECK(f != NULL);
    if (f != NULL) fclose(f);
    CHECK_ERR(profiled_fit(m, train, under), FULMEN_CODE_IO, "creating");
    CHECK_OK(profiled_fit(m, train, fresh));
    char trace[160];
    snprintf(trace, sizeof trace, "%s/fit.pt.trace.json", fresh);
    char *json = fixture_read_text(trace);
    CHECK(json != NULL && strstr(json, "\"traceEvents\"") != NULL);
    free(json);
    fulmen_module_vtable failing = *vt;
    failing.training_step = failing_step;
    fulmen_lightning_module *bad = NULL;
    CHECK_OK(fulmen_lightning_module_new(&failing, model, &bad));
    CHECK_ERR(profiled_fit(bad, train, fresh), FULMEN_CODE_CALLBACK, "refused its batch");
    CHECK_OK(profiled_fit(m, train, fresh));
    fulmen_lightning_module_free(bad);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    CHECK(system(cmd) == 0);
}

/* The "Num calls" column of the row of `action` in `report` (-1: none). */
static long calls_of(const char *report, const char *action) {
    char needle[128];
    snprintf(needle, sizeof needle, "| %s ", action);
    const char *row = strstr(report, needle);
    if (row == NULL) return -1;
    const char *cell = strchr(row + 1, '|'); /* end of the action cell */
    if (cell == NULL || (cell = strchr(cell + 1, '|')) == NULL) return -1; /* past the mean */
    return strtol(cell + 1, NULL, 10);
}

int main(void) {
    static char report[16384];
    size_t len = 0;
    state s = {fixture_mlp(4, 0)};
    fulmen_dataset *ds = fixture_blobs(64, 1, 1.0f);
    fulmen_loader *train = fixture_loader(ds, 8, false, 0), *val = fixture_loader(ds, 32, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = noop;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set(o, "profiler", "simple"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_ERR(fulmen_trainer_options_set(o, "profiler", "advanced"), FULMEN_CODE_INVALID_ARGUMENT, "simple");
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.on_hook = noop;
    CHECK_OK(fulmen_trainer_add_callback(t, "Watcher", &cb));
    CHECK_ERR(fulmen_trainer_profiler_report(t, report, sizeof report, &len), FULMEN_CODE_INVALID_STATE, "profiler");

    CHECK_OK(fulmen_trainer_fit(t, m, train, val, NULL));
    CHECK_OK(fulmen_trainer_profiler_report(t, report, sizeof report, &len));
    CHECK(strncmp(report, "FIT Profiler Report", 19) == 0 && len == strlen(report));
    CHECK(calls_of(report, "[Strategy].training_step") == 16); /* 2 epochs of 8 batches */
    CHECK(calls_of(report, "[Strategy].backward") == 16);
    CHECK(calls_of(report, "[Strategy].optimizer_step") == 16);
    CHECK(calls_of(report, "[_TrainingEpochLoop].train_dataloader_next") == 16);
    CHECK(calls_of(report, "run_training_batch") == 16);
    CHECK(calls_of(report, "run_training_epoch") == 2);
    CHECK(calls_of(report, "[Strategy].validation_step") == 4); /* 2 batches per epoch */
    CHECK(calls_of(report, "[Callback]Watcher.on_train_batch_start") == 16);
    CHECK(calls_of(report, "[LightningModule].on_fit_start") == 1);
    CHECK(calls_of(report, "Total") > 0);

    CHECK_OK(fulmen_trainer_validate(t, m, val, NULL));
    CHECK_OK(fulmen_trainer_profiler_report(t, report, sizeof report, &len));
    CHECK(strncmp(report, "VALIDATE Profiler Report", 24) == 0);
    CHECK(calls_of(report, "[_EvaluationLoop].val_next") >= 2);
    CHECK(calls_of(report, "[Strategy].training_step") == -1);
    char tiny[8];
    CHECK_ERR(fulmen_trainer_profiler_report(t, tiny, sizeof tiny, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);

    /* pytorch: libtorch's own profiler too, its trace in the root folder */
    char root[] = "/tmp/fulmen-test-profiler-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    o = fixture_options(root, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set(o, "profiler", "pytorch"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_add_callback(t, "Watcher", &cb));
    CHECK_OK(fulmen_trainer_fit(t, m, train, val, NULL));
    CHECK_OK(fulmen_trainer_profiler_report(t, report, sizeof report, &len));
    CHECK(calls_of(report, "[Strategy].training_step") == 8);
    const char *ops = strstr(report, "FIT PyTorch Profiler Report (trace: ");
    CHECK(ops != NULL);
    if (ops != NULL) {
        char trace[1024];
        const char *start = ops + strlen("FIT PyTorch Profiler Report (trace: ");
        size_t n = strcspn(start, ")");
        snprintf(trace, sizeof trace, "%.*s", (int)n, start);
        char expected[600];
        snprintf(expected, sizeof expected, "%s/fit.pt.trace.json", root);
        CHECK(strcmp(trace, expected) == 0);
        CHECK(strstr(ops, "aten::") != NULL); /* the operators' table */
        char *json = fixture_read_text(trace);
        CHECK(json != NULL);
        if (json != NULL) {
            CHECK(strstr(json, "\"traceEvents\"") != NULL);
            CHECK(strstr(json, "aten::addmm") != NULL);
            CHECK(strstr(json, "[Callback]Watcher.on_train_batch_start") != NULL);
            free(json);
        }
    }
    /* each run profiles anew */
    CHECK_OK(fulmen_trainer_validate(t, m, val, NULL));
    CHECK_OK(fulmen_trainer_profiler_report(t, report, sizeof report, &len));
    CHECK(strstr(report, "VALIDATE PyTorch Profiler Report") != NULL);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);

    test_failed_runs_stop_the_profiler(m, train, &vt, s.model);

    /* off: no report */
    t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(t, m, train, NULL, NULL));
    CHECK_ERR(fulmen_trainer_profiler_report(t, report, sizeof report, &len), FULMEN_CODE_INVALID_STATE, NULL);
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_loader_free(train);
    fulmen_loader_free(val);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
    return check_finish("test_profiler");
}

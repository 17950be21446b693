/*
 * Failures of the host's own code and of the machine, each ending the run
 * with a clear error and no damage:
 *   - a training_step slower than `callback_timeout`;
 *   - a data source that fails halfway through an epoch;
 *   - a NaN gradient behind a finite loss, caught by `detect_anomaly` at
 *     once (without it, one step later by the NaN loss);
 *   - a full disk while a checkpoint is written (RLIMIT_FSIZE makes writes
 *     past 64 KiB fail with EFBIG): the fit fails with FULMEN_CODE_IO, no
 *     partial file is left, the previous checkpoint still resumes.
 * Every case checks that the model keeps finite weights and that no handle
 * is left behind.
 */
#define _XOPEN_SOURCE 700 /* nanosleep, mkdtemp, setrlimit */

#include "check.h"
#include "fixture.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    fulmen_model *model;
    int64_t slow_at_step;  /* sleep 2.5 s at this global step (-1: never) */
    bool nan_gradient;     /* add sqrt(0 * relu(logits)): a finite loss, a NaN gradient */
    int64_t steps;
} state;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    int64_t step = 0;
    fulmen_error *e = fulmen_step_context_global_step(ctx, &step);
    if (e != NULL) return e;
    s->steps++;
    if (step == s->slow_at_step) {
        struct timespec ts = {2, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *ce = NULL;
    e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(s->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, s->nan_gradient ? &ce : out);
    if (e == NULL && s->nan_gradient) {
        fulmen_tensor *r = NULL, *z = NULL, *q = NULL, *extra = NULL;
        e = fulmen_tensor_relu(logits, &r);
        if (e == NULL) e = fulmen_tensor_mul_scalar(r, 0.0, &z);
        if (e == NULL) e = fulmen_tensor_sqrt(z, &q); /* d sqrt(0) = inf, times 0: NaN */
        if (e == NULL) e = fulmen_tensor_sum(q, &extra);
        if (e == NULL) e = fulmen_tensor_add(ce, extra, out);
    }
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_adam(config, ((state *)ud)->model, 0.01);
}

static fulmen_lightning_module *module_for(state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

static fulmen_trainer *trainer_with(const char *root, int64_t epochs, const char *key, const char *value) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    /* The CPU, also where a GPU would be "auto": callback_timeout's steps
     * must not include a GPU's start-up. */
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cpu"));
    if (key != NULL) CHECK_OK(fulmen_trainer_options_set(o, key, value));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* Whether every parameter of the model is finite. */
static bool finite_weights(const fulmen_model *m) {
    size_t n = 0;
    bool ok = true;
    CHECK_OK(fulmen_model_state_dict_len(m, &n));
    for (size_t i = 0; i < n; i++) {
        char name[64];
        size_t len = 0;
        fulmen_tensor *t = NULL, *s = NULL;
        CHECK_OK(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
        CHECK_OK(fulmen_tensor_sum(t, &s));
        double v = check_item(s);
        ok = ok && isfinite(v);
        fulmen_tensor_free(t);
        fulmen_tensor_free(s);
    }
    return ok;
}

static void slow_callback(const char *root) {
    state s = {fixture_mlp(8, 0), 3, false, 0};
    fulmen_dataset *ds = fixture_blobs(64, 1, 1.5f);
    fulmen_loader *l = fixture_loader(ds, 8, true, 1);
    fulmen_lightning_module *m = module_for(&s);
    /* A limit far above a normal step's time even under valgrind on a busy
     * machine (a first step there can take several tenths of a second), and
     * below the slow step's 2.5 s. */
    fulmen_trainer *t = trainer_with(root, 2, "callback_timeout", "2");
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_CALLBACK, "longer than callback_timeout");
    int64_t step = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 3); /* steps 0..2 completed; the slow one was not applied */
    CHECK(finite_weights(s.model));
    fulmen_trainer_free(t);
    /* Without the limit the same slow step is fine. */
    s.steps = 0;
    t = trainer_with(root, 1, "callback_timeout", "none");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(s.steps == 8);
    fulmen_trainer_free(t);
    CHECK_ERR(fulmen_trainer_options_set(NULL, "callback_timeout", "1"), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_ERR(fulmen_trainer_options_set(o, "callback_timeout", "-2"), FULMEN_CODE_INVALID_ARGUMENT, "callback_timeout");
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
}

/* A host data source: 64 samples of the blobs; get_batch fails from
 * sample `fail_from` on. */
typedef struct {
    fulmen_dataset *inner;
    int64_t fail_from;
} failing_source;

static fulmen_error *src_len(void *ud, size_t *out) { return fulmen_dataset_len(((failing_source *)ud)->inner, out); }

static fulmen_error *src_get(void *ud, const int64_t *indices, size_t n, fulmen_batch_builder *batch) {
    failing_source *s = ud;
    for (size_t i = 0; i < n; i++)
        if (indices[i] >= s->fail_from) return fulmen_error_new(FULMEN_CODE_IO, "the network share went away");
    fulmen_tensor *parts[2] = {NULL, NULL};
    size_t count = 0;
    fulmen_error *e = fulmen_dataset_get(s->inner, indices, n, parts, 2, &count);
    for (size_t i = 0; e == NULL && i < count; i++) e = fulmen_batch_builder_push(batch, parts[i]);
    for (size_t i = 0; i < count; i++) fulmen_tensor_free(parts[i]);
    return e;
}

static void data_source_fails_halfway(const char *root) {
    failing_source src = {fixture_blobs(64, 1, 1.5f), 40};
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &src;
    vt.len = src_len;
    vt.get_batch = src_get;
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_source(&vt, &ds));
    fulmen_loader *l = fixture_loader(ds, 8, false, 0); /* batch 5 holds sample 40 */
    state s = {fixture_mlp(8, 0), -1, false, 0};
    fulmen_lightning_module *m = module_for(&s);
    fulmen_trainer *t = trainer_with(root, 2, NULL, NULL);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_IO, "network share");
    CHECK(s.steps == 5);
    CHECK(finite_weights(s.model));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_dataset_free(src.inner);
    fulmen_model_free(s.model);
}

static void nan_gradient(const char *root) {
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.5f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    /* With detect_anomaly the first backward fails and names the operation. */
    state s = {fixture_mlp(8, 0), -1, true, 0};
    fulmen_lightning_module *m = module_for(&s);
    fulmen_trainer *t = trainer_with(root, 1, "detect_anomaly", "true");
    fulmen_error *e = fulmen_trainer_fit(t, m, l, NULL, NULL);
    CHECK(e != NULL);
    if (e != NULL) {
        printf("  detect_anomaly: %.160s...\n", fulmen_error_message(e));
        CHECK(strstr(fulmen_error_message(e), "nan") != NULL);
        CHECK(strstr(fulmen_error_message(e), "backward") != NULL);
    }
    fulmen_error_free(e);
    CHECK(finite_weights(s.model));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    /* Without it the finite loss hides the NaN gradient: the weights become
     * NaN and only the next step's loss gives it away. */
    state quiet = {fixture_mlp(8, 0), -1, true, 0};
    m = module_for(&quiet);
    t = trainer_with(root, 1, NULL, NULL);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_NON_FINITE, "global step 1");
    CHECK(!finite_weights(quiet.model));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(quiet.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
}

static int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    size_t sl = strlen(suffix);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > sl && strcmp(e->d_name + len - sl, suffix) == 0) n++;
    }
    closedir(d);
    return n;
}

static void disk_full_while_saving(const char *root) {
    char ckpts[512];
    snprintf(ckpts, sizeof ckpts, "%s/full/checkpoints", root);
    fulmen_dataset *ds = fixture_blobs(64, 1, 1.5f);
    fulmen_loader *l = fixture_loader(ds, 8, true, 2);
    state s = {fixture_mlp(512, 0), -1, false, 0}; /* 2.5k parameters and Adam's state: ~30 KiB */
    fulmen_lightning_module *m = module_for(&s);
    fulmen_model_checkpoint_options c = fulmen_model_checkpoint_options_default();
    c.dirpath = ckpts;
    c.save_top_k = -1; /* keep every epoch's file */
    /* Epoch 0 is saved normally. */
    fulmen_trainer *t = trainer_with(root, 1, NULL, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &c));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    fulmen_trainer_free(t);
    CHECK(count_files(ckpts, ".ckpt") == 1);

    /* The disk is "full": no file may grow past 16 KiB. */
    struct rlimit old, tiny;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    tiny = old;
    tiny.rlim_cur = 16 * 1024;
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
    CHECK(setrlimit(RLIMIT_FSIZE, &tiny) == 0);
    t = trainer_with(root, 3, NULL, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &c));
    fulmen_error *e = fulmen_trainer_fit(t, m, l, NULL, "last");
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK(e != NULL && fulmen_error_code(e) == FULMEN_CODE_IO);
    if (e != NULL) printf("  disk full: %s\n", fulmen_error_message(e));
    fulmen_error_free(e);
    fulmen_trainer_free(t);
    CHECK(count_files(ckpts, ".tmp") == 0); /* no partial file left */
    CHECK(count_files(ckpts, ".ckpt") == 1);
    CHECK(finite_weights(s.model));

    /* With room again, the run resumes from the good checkpoint and finishes. */
    t = trainer_with(root, 3, NULL, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &c));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, "last"));
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 3 * 8);
    CHECK(count_files(ckpts, ".ckpt") == 3);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
}

int main(void) {
    char root[] = "/tmp/fulmen-faults-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    slow_callback(root);
    data_source_fails_halfway(root);
    nan_gradient(root);
    disk_full_while_saving(root);
    CHECK(fulmen_live_handles() == 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_faults");
}

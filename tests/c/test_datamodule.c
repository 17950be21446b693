/*
 * The LightningDataModule (fulmen_datamodule): the order of its calls
 * across fit, validate, test and predict, its dataloaders before the
 * module's, teardown after a failed run, its state through checkpoints,
 * the module's test_dataloader / predict_dataloader, and the errors.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stddef.h>
#include <stdint.h>

/* What the datamodule and the module share. */
typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    char log[4096];      /* every call, comma-separated */
    int mode;            /* which misbehaviour, if any */
    char state[32];      /* what state_dict gives */
    char loaded[32];     /* what load_state_dict got */
    int loads;
    int64_t test_steps;
} state;

enum { GOOD = 0, STEP_FAILS = 1, SETUP_FAILS = 2, WRITES_NOTHING = 3, STATE_TOO_BIG = 4 };

static void note(state *s, const char *what, int64_t epoch) {
    char item[64];
    if (epoch >= 0) {
        snprintf(item, sizeof item, "%s%s:%lld", s->log[0] ? "," : "", what, (long long)epoch);
    } else {
        snprintf(item, sizeof item, "%s%s", s->log[0] ? "," : "", what);
    }
    strncat(s->log, item, sizeof s->log - strlen(s->log) - 1);
}

/* A loader over 48 blob samples, 16 per batch (3 batches). */
static fulmen_error *blob_loader(int64_t epoch, fulmen_loader **out) {
    fulmen_dataset *ds = fixture_blobs(48, (uint64_t)epoch + 1, 1.5f);
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 16;
    fulmen_error *e = fulmen_loader_new(ds, &o, out);
    fulmen_dataset_free(ds);
    return e;
}

/* ---------------------------------------------------- the datamodule */

static fulmen_error *dm_prepare_data(void *ud) {
    note(ud, "prepare_data", -1);
    return NULL;
}

static fulmen_error *dm_setup(void *ud, const char *stage) {
    state *s = ud;
    char item[32];
    snprintf(item, sizeof item, "setup(%s)", stage);
    note(s, item, -1);
    return s->mode == SETUP_FAILS ? fulmen_error_new(FULMEN_CODE_IO, "the data is not there") : NULL;
}

static fulmen_error *dm_teardown(void *ud, const char *stage) {
    char item[32];
    snprintf(item, sizeof item, "teardown(%s)", stage);
    note(ud, item, -1);
    return NULL;
}

static fulmen_error *dm_train(void *ud, int64_t epoch, fulmen_loader **out) {
    state *s = ud;
    note(s, "train", epoch);
    if (s->mode == WRITES_NOTHING) return NULL;
    return blob_loader(epoch, out);
}

static fulmen_error *dm_val(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    note(ud, "val", epoch);
    (void)capacity;
    *n = 1;
    return blob_loader(epoch, &out[0]);
}

static fulmen_error *dm_test(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    note(ud, "test", epoch);
    (void)capacity;
    *n = 1;
    return blob_loader(epoch, &out[0]);
}

static fulmen_error *dm_predict(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    note(ud, "predict", epoch);
    if (capacity < 2) return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "room for two loaders expected");
    *n = 2;
    fulmen_error *e = blob_loader(epoch, &out[0]);
    return e != NULL ? e : blob_loader(epoch + 1, &out[1]);
}

static fulmen_error *dm_state_dict(void *ud, const uint8_t **data, size_t *len) {
    state *s = ud;
    *data = (const uint8_t *)s->state;
    *len = s->mode == STATE_TOO_BIG ? (size_t)FULMEN_MAX_DATAMODULE_STATE + 1 : strlen(s->state);
    return NULL;
}

static fulmen_error *dm_load_state_dict(void *ud, const uint8_t *data, size_t len) {
    state *s = ud;
    s->loads++;
    if (len >= sizeof s->loaded) return fulmen_error_new(FULMEN_CODE_FORMAT, "state too long");
    memcpy(s->loaded, data, len);
    s->loaded[len] = '\0';
    return NULL;
}

/* A datamodule with every slot. */
static fulmen_datamodule_vtable full_vtable(state *s) {
    fulmen_datamodule_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.prepare_data = dm_prepare_data;
    vt.setup = dm_setup;
    vt.teardown = dm_teardown;
    vt.train_dataloader = dm_train;
    vt.val_dataloader = dm_val;
    vt.test_dataloader = dm_test;
    vt.predict_dataloader = dm_predict;
    vt.state_dict = dm_state_dict;
    vt.load_state_dict = dm_load_state_dict;
    return vt;
}

static fulmen_datamodule *datamodule_for(state *s) {
    fulmen_datamodule_vtable vt = full_vtable(s);
    fulmen_datamodule *dm = NULL;
    CHECK_OK(fulmen_datamodule_new(&vt, "BlobData", &dm));
    return dm;
}

/* ------------------------------------------------------- the module */

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    state *s = ud;
    (void)ctx;
    if (s->mode == STEP_FAILS) return fulmen_error_new(FULMEN_CODE_INVALID_STATE, "the step broke");
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    state *s = ud;
    fulmen_tensor *loss = NULL;
    double v = 0;
    fulmen_error *e = fixture_cross_entropy(s->model, batch, &loss);
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, 0, 0);
    return e;
}

static fulmen_error *test_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    ((state *)ud)->test_steps++;
    return eval_step(ud, ctx, batch);
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                  fulmen_tensor **out) {
    state *s = ud;
    fulmen_tensor *x = NULL;
    (void)ctx;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    return e != NULL ? e : fulmen_model_forward(s->model, x, out);
}

static fulmen_error *module_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook == FULMEN_HOOK_SETUP) note(ud, "M.setup", -1);
    if (hook == FULMEN_HOOK_TEARDOWN) note(ud, "M.teardown", -1);
    return NULL;
}

static fulmen_error *module_train(void *ud, int64_t epoch, fulmen_loader **out) {
    note(ud, "M.train", epoch);
    return blob_loader(epoch, out);
}

static fulmen_error *module_val(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    note(ud, "M.val", epoch);
    (void)capacity;
    *n = 1;
    return blob_loader(epoch, &out[0]);
}

static fulmen_error *module_test(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    note(ud, "M.test", epoch);
    (void)capacity;
    *n = 1;
    return blob_loader(epoch, &out[0]);
}

static fulmen_module_vtable module_vtable(state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = training_step;
    vt.validation_step = eval_step;
    vt.test_step = test_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = module_hook;
    return vt;
}

static fulmen_lightning_module *module_for(state *s) {
    fulmen_module_vtable vt = module_vtable(s);
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

static fulmen_trainer *trainer_for(const char *root, int64_t epochs, const char *format) {
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set_int(o, "reload_dataloaders_every_n_epochs", 1));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 1));
    if (format != NULL) CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", format));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static void expect_log(state *s, const char *want) {
    if (strcmp(s->log, want) != 0) {
        fprintf(stderr, "log:  %s\nwant: %s\n", s->log, want);
        CHECK(0);
    }
    s->log[0] = '\0';
}

static void remove_tree(const char *root) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

/* ------------------------------------------------------------ tests */

/* Lightning's order across fit -> validate -> test -> predict: prepare_data,
 * the datamodule's setup before the module's, the loaders when the loops
 * want them (reloaded every epoch), the datamodule's teardown before the
 * module's. */
static void test_call_order(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_lightning_module *m = module_for(&s);
    fulmen_datamodule *dm = datamodule_for(&s);
    fulmen_trainer *t = trainer_for(NULL, 2, NULL);
    CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL));
    expect_log(&s, "prepare_data,setup(fit),M.setup,train:0,val:0,train:1,val:1,teardown(fit),M.teardown");
    CHECK_OK(fulmen_trainer_validate_datamodule(t, m, NULL, dm, NULL));
    expect_log(&s, "prepare_data,setup(validate),M.setup,val:2,teardown(validate),M.teardown");
    CHECK_OK(fulmen_trainer_test_datamodule(t, m, NULL, dm, NULL));
    expect_log(&s, "prepare_data,setup(test),M.setup,test:2,teardown(test),M.teardown");
    CHECK(s.test_steps == 3);
    fulmen_tensor *outs[4] = {NULL, NULL, NULL, NULL};
    size_t n = 0;
    CHECK_OK(fulmen_trainer_predict_datamodule(t, m, NULL, dm, NULL, outs, 4, &n));
    expect_log(&s, "prepare_data,setup(predict),M.setup,predict:2,teardown(predict),M.teardown");
    CHECK(n == 2 && outs[0] != NULL && outs[1] != NULL && outs[2] == NULL);
    int64_t dims[2] = {0, 0};
    size_t ndim = 0;
    CHECK_OK(fulmen_tensor_shape(outs[1], dims, 2, &ndim));
    CHECK(ndim == 2 && dims[0] == 48);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    /* Too little room: every output is freed and *n says how many. */
    CHECK_ERR(fulmen_trainer_predict_datamodule(t, m, NULL, dm, NULL, outs, 1, &n), FULMEN_CODE_OUT_OF_RANGE,
              "room for 1");
    CHECK(n == 2 && outs[0] == NULL);
    s.log[0] = '\0';
    fulmen_trainer_free(t);
    fulmen_datamodule_free(dm);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
}

/* A datamodule's loaders come before the module's; the module's hooks
 * serve what the datamodule lacks; test / predict given no loader take the
 * module's new test_dataloader. */
static void test_precedence(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_module_vtable mvt = module_vtable(&s);
    mvt.train_dataloader = module_train;
    mvt.val_dataloader = module_val;
    mvt.test_dataloader = module_test;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&mvt, s.model, &m));
    fulmen_datamodule_vtable vt = full_vtable(&s);
    vt.val_dataloader = NULL;
    vt.prepare_data = NULL;
    fulmen_datamodule *dm = NULL;
    CHECK_OK(fulmen_datamodule_new(&vt, NULL, &dm));
    fulmen_trainer *t = trainer_for(NULL, 1, NULL);
    CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL));
    expect_log(&s, "setup(fit),M.setup,train:0,M.val:0,teardown(fit),M.teardown");
    CHECK_OK(fulmen_trainer_test(t, m, NULL, NULL));
    expect_log(&s, "M.setup,M.test:1,M.teardown");
    CHECK(s.test_steps == 3);
    /* No predict_dataloader on the module: NULL is refused, naming it. */
    fulmen_tensor *out = NULL;
    CHECK_ERR(fulmen_trainer_predict(t, m, NULL, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, "predict_dataloader");
    fulmen_trainer_free(t);
    fulmen_datamodule_free(dm);
    fulmen_lightning_module_free(m);

    /* An older module vtable, without the new slots, is accepted. */
    mvt.struct_size = offsetof(fulmen_module_vtable, test_dataloader);
    CHECK_OK(fulmen_lightning_module_new(&mvt, s.model, &m));
    t = trainer_for(NULL, 1, NULL);
    CHECK_ERR(fulmen_trainer_test(t, m, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "test_dataloader");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
}

/* ------------------------- the module's own slots beside a datamodule */

static int validation_outputs; /* validation steps that returned outputs */

static fulmen_error *slots_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    module_hook(ud, hook, ctx);
    if (hook == FULMEN_HOOK_PREPARE_DATA) note(ud, "M.prepare_data", -1);
    if (hook == FULMEN_HOOK_VALIDATION_MODEL_EVAL) note(ud, "M.model_eval", -1);
    return NULL;
}

static fulmen_error *slots_configure_model(void *ud, int32_t device_type, int64_t device_index) {
    (void)device_type;
    (void)device_index;
    note(ud, "M.configure_model", -1);
    return NULL;
}

static fulmen_error *noting_callback_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook == FULMEN_HOOK_FIT_START) note(ud, "cb.on_fit_start", -1);
    return NULL;
}

static fulmen_error *slots_configure_callbacks(void *ud, fulmen_callback_list *list) {
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.userdata = ud;
    cb.on_hook = noting_callback_hook;
    return fulmen_callback_list_add(list, "Noting", &cb);
}

static fulmen_error *slots_optimizer_step(void *ud, fulmen_optimization_context *ctx, int64_t epoch,
                                          int64_t batch_idx, size_t optimizer_idx, fulmen_optimizer_closure *closure) {
    (void)epoch;
    (void)optimizer_idx;
    if (batch_idx == 0) note(ud, "M.optimizer_step", -1);
    bool made = false;
    return fulmen_optimization_context_step(ctx, closure, &made);
}

static fulmen_error *slots_validation_output(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                             fulmen_tensor **out) {
    state *s = ud;
    (void)ctx;
    validation_outputs++;
    return fixture_cross_entropy(s->model, batch, out);
}

/* Every slot of the module works as well when a datamodule brings the
 * data: its prepare_data (after the datamodule's) and other overridden
 * hooks, configure_model, configure_callbacks, custom optimization and
 * the steps that return outputs. */
static void test_module_slots_with_datamodule(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_module_vtable mvt = module_vtable(&s);
    mvt.on_hook = slots_hook;
    mvt.configure_model = slots_configure_model;
    mvt.configure_callbacks = slots_configure_callbacks;
    mvt.optimizer_step = slots_optimizer_step;
    mvt.validation_step = NULL;
    mvt.validation_step_output = slots_validation_output;
    mvt.train_dataloader = module_train;
    mvt.val_dataloader = module_val;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&mvt, s.model, &m));
    CHECK_OK(fulmen_lightning_module_override_hook(m, FULMEN_HOOK_PREPARE_DATA, true));
    CHECK_OK(fulmen_lightning_module_override_hook(m, FULMEN_HOOK_VALIDATION_MODEL_EVAL, true));
    /* The datamodule brings only prepare_data, setup and teardown. */
    fulmen_datamodule_vtable vt = full_vtable(&s);
    vt.train_dataloader = NULL;
    vt.val_dataloader = NULL;
    fulmen_datamodule *dm = NULL;
    CHECK_OK(fulmen_datamodule_new(&vt, NULL, &dm));
    fulmen_trainer *t = trainer_for(NULL, 1, NULL);
    CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL));
    expect_log(&s,
               "prepare_data,M.prepare_data,setup(fit),M.setup,M.configure_model,M.train:0,cb.on_fit_start,"
               "M.val:0,M.model_eval,M.optimizer_step,M.model_eval,teardown(fit),M.teardown");
    CHECK(validation_outputs == 3 + 1); /* the epoch's validation and the sanity check's batch */
    fulmen_trainer_free(t);
    fulmen_datamodule_free(dm);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
}

/* A run that fails after setup still tears the datamodule down (its
 * error stays the one reported); one whose setup failed does not. */
static void test_teardown_on_failure(void) {
    int modes[3] = {STEP_FAILS, WRITES_NOTHING, SETUP_FAILS};
    int codes[3] = {FULMEN_CODE_INVALID_STATE, FULMEN_CODE_CALLBACK, FULMEN_CODE_IO};
    const char *needles[3] = {"the step broke", "wrote no loader", "the data is not there"};
    const char *logs[3] = {
        "prepare_data,setup(fit),M.setup,train:0,val:0,teardown(fit)",
        "prepare_data,setup(fit),M.setup,train:0,teardown(fit)",
        "prepare_data,setup(fit)",
    };
    for (int k = 0; k < 3; k++) {
        state s = {0};
        s.model = fixture_mlp(8, 0);
        s.mode = modes[k];
        fulmen_lightning_module *m = module_for(&s);
        fulmen_datamodule *dm = datamodule_for(&s);
        fulmen_trainer *t = trainer_for(NULL, 1, NULL);
        CHECK_ERR(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL), codes[k], needles[k]);
        expect_log(&s, logs[k]);
        fulmen_trainer_free(t);
        fulmen_datamodule_free(dm);
        fulmen_lightning_module_free(m);
        fulmen_model_free(s.model);
    }
}

/* The state goes into the checkpoints under the datamodule's name and
 * comes back to load_state_dict on resume and when validate loads
 * weights, in both checkpoint formats. */
static void test_state_round_trip(void) {
    const char *formats[2] = {"lightning", "safetensors"};
    for (int k = 0; k < 2; k++) {
        char root[] = "/tmp/fulmen-datamodule-XXXXXX";
        CHECK(mkdtemp(root) != NULL);
        state s = {0};
        s.model = fixture_mlp(8, 0);
        snprintf(s.state, sizeof s.state, "shard=7;seen=%d", k);
        fulmen_lightning_module *m = module_for(&s);
        fulmen_datamodule *dm = datamodule_for(&s);
        fulmen_trainer *t = trainer_for(root, 1, formats[k]);
        CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL));
        CHECK(s.loads == 0);
        fulmen_trainer_free(t);
        fulmen_datamodule_free(dm);

        state r = {0};
        r.model = s.model;
        snprintf(r.state, sizeof r.state, "fresh");
        fulmen_datamodule *fresh = datamodule_for(&r);
        t = trainer_for(root, 2, formats[k]);
        CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, fresh, "last"));
        CHECK(r.loads == 1 && strcmp(r.loaded, s.state) == 0);
        char path[512];
        size_t len = 0;
        CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, path, sizeof path, &len));
        CHECK_OK(fulmen_trainer_validate_datamodule(t, m, NULL, fresh, path));
        CHECK(r.loads == 2 && strcmp(r.loaded, "fresh") == 0);
        /* Another name finds nothing of its own: nothing is loaded. */
        state o = {0};
        o.model = s.model;
        fulmen_datamodule_vtable vt = full_vtable(&o);
        fulmen_datamodule *other = NULL;
        CHECK_OK(fulmen_datamodule_new(&vt, "OtherData", &other));
        CHECK_OK(fulmen_trainer_validate_datamodule(t, m, NULL, other, path));
        CHECK(o.loads == 0);
        fulmen_datamodule_free(other);
        fulmen_trainer_free(t);
        fulmen_datamodule_free(fresh);
        fulmen_lightning_module_free(m);
        fulmen_model_free(s.model);
        remove_tree(root);
    }
}

/* A state over FULMEN_MAX_DATAMODULE_STATE bytes is refused before it is
 * read, and the datamodule is still torn down. */
static void test_state_too_big(void) {
    char root[] = "/tmp/fulmen-datamodule-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    state s = {0};
    s.model = fixture_mlp(8, 0);
    s.mode = STATE_TOO_BIG;
    fulmen_lightning_module *m = module_for(&s);
    fulmen_datamodule *dm = datamodule_for(&s);
    fulmen_trainer *t = trainer_for(root, 1, NULL);
    CHECK_ERR(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL), FULMEN_CODE_OUT_OF_RANGE, "state_dict");
    CHECK(strstr(s.log, "teardown(fit)") != NULL);
    fulmen_trainer_free(t);
    fulmen_datamodule_free(dm);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    remove_tree(root);
}

static void free_counter(void *ud) {
    (*(int *)ud)++;
}

/* Bad arguments: clear errors, userdata_free not called on failure. */
static void test_errors(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    int freed = 0;
    fulmen_datamodule *dm = NULL;
    CHECK_ERR(fulmen_datamodule_new(NULL, NULL, &dm), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    fulmen_datamodule_vtable vt = full_vtable(&s);
    vt.userdata = &freed;
    vt.userdata_free = free_counter;
    vt.struct_size = offsetof(fulmen_datamodule_vtable, load_state_dict);
    CHECK_ERR(fulmen_datamodule_new(&vt, NULL, &dm), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    vt.struct_size = sizeof vt;
    CHECK_ERR(fulmen_datamodule_new(&vt, "state_dict", &dm), FULMEN_CODE_INVALID_ARGUMENT, "state_dict");
    CHECK_ERR(fulmen_datamodule_new(&vt, "", &dm), FULMEN_CODE_INVALID_ARGUMENT, "name");
    char long_name[300];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    CHECK_ERR(fulmen_datamodule_new(&vt, long_name, &dm), FULMEN_CODE_INVALID_ARGUMENT, "name");
    CHECK(dm == NULL && freed == 0);
    CHECK_OK(fulmen_datamodule_new(&vt, NULL, &dm));
    fulmen_datamodule_free(dm);
    CHECK(freed == 1);

    fulmen_lightning_module *m = module_for(&s);
    dm = datamodule_for(&s);
    fulmen_trainer *t = trainer_for(NULL, 1, NULL);
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    CHECK_ERR(fulmen_trainer_fit_datamodule(t, m, loader, NULL, dm, NULL), FULMEN_CODE_INVALID_ARGUMENT, "not both");
    CHECK_ERR(fulmen_trainer_test_datamodule(t, m, loader, dm, NULL), FULMEN_CODE_INVALID_ARGUMENT, "not both");
    CHECK_ERR(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "datamodule");
    CHECK(s.log[0] == '\0'); /* nothing was called */
    /* Neither the datamodule nor the module has a test_dataloader. */
    fulmen_datamodule_vtable bare;
    memset(&bare, 0, sizeof bare);
    bare.struct_size = sizeof bare;
    fulmen_datamodule *empty = NULL;
    CHECK_OK(fulmen_datamodule_new(&bare, NULL, &empty));
    CHECK_ERR(fulmen_trainer_test_datamodule(t, m, NULL, empty, NULL), FULMEN_CODE_INVALID_STATE, "test_dataloader");
    CHECK_ERR(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, empty, NULL), FULMEN_CODE_INVALID_STATE,
              "train_dataloader");
    fulmen_datamodule_free(empty);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_trainer_free(t);
    fulmen_datamodule_free(dm);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
}

int main(void) {
    test_call_order();
    test_precedence();
    test_module_slots_with_datamodule();
    test_teardown_on_failure();
    test_state_round_trip();
    test_state_too_big();
    test_errors();
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_datamodule");
}

/*
 * The LightningModule-only hooks (model eval / train / zero_grad, the batch
 * transfer hooks), configure_model, configure_callbacks, the optimizer of
 * the optimizer hooks and the outputs of validation / test steps.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_EVENTS = 256 };

typedef struct {
    fulmen_model *model;   /* first member: fixture_configure_sgd reads it */
    int hooks[MAX_EVENTS]; /* the module's hooks, in order */
    int n;
    int configure_model_calls, configure_model_after_setup, configure_model_device;
    int optimizers_configured; /* configure_optimizers calls */
    int configure_model_before_optimizers;
    int eval_in_train_mode;  /* validation steps that found the model training */
    int replaced_seen;       /* training steps that saw the replaced batch */
    int steps;               /* training steps */
    int set_batch_misuse;    /* set_batch outside a transfer hook refused */
    int transfer_sets_nothing;
    double outputs_sum;      /* validation / test outputs read in batch-end hooks */
    int outputs_seen;
    int opt_index_ok, opt_index_bad;
    int cb_hooks, cb_freed;
    int add_callbacks; /* configure_callbacks adds a callback named "recorder" */
} rec;

static void rec_init(rec *r) {
    memset(r, 0, sizeof *r);
    r->model = fixture_mlp(8, 0);
}

static bool seen(const rec *r, int hook) {
    for (int i = 0; i < r->n; i++)
        if (r->hooks[i] == hook) return true;
    return false;
}

static int index_of(const rec *r, int hook, int nth) {
    for (int i = 0; i < r->n; i++)
        if (r->hooks[i] == hook && nth-- == 0) return i;
    return -1;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    rec *r = ud;
    (void)ctx;
    r->steps++;
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_batch_get(batch, 0, &x));
    size_t len = 0;
    CHECK_OK(fulmen_batch_len(batch, &len));
    /* on_before_batch_transfer (when overridden) put a third tensor of 7s. */
    if (len == 3) {
        fulmen_tensor *marker = NULL;
        CHECK_OK(fulmen_batch_get(batch, 2, &marker));
        if (check_item(marker) == 7.0) r->replaced_seen++;
    }
    return fixture_cross_entropy(r->model, batch, out);
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                     fulmen_tensor **out) {
    rec *r = ud;
    (void)ctx;
    bool training = false;
    CHECK_OK(fulmen_model_is_training(r->model, &training));
    if (training) r->eval_in_train_mode++;
    return fixture_cross_entropy(r->model, batch, out);
}

/* predict_step: the model's output for the batch's features. */
static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    rec *r = ud;
    (void)ctx;
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_batch_get(batch, 0, &x));
    return fulmen_model_forward(r->model, x, out);
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    rec *r = ud;
    r->optimizers_configured++;
    return fixture_configure_sgd(ud, config);
}

static fulmen_error *configure_model(void *ud, int32_t device_type, int64_t device_index) {
    rec *r = ud;
    r->configure_model_calls++;
    if (seen(r, FULMEN_HOOK_SETUP)) r->configure_model_after_setup++;
    if (r->optimizers_configured == 0) r->configure_model_before_optimizers++;
    if (device_type == FULMEN_DEVICE_TYPE_CPU && device_index == 0) r->configure_model_device++;
    return NULL;
}

static fulmen_error *cb_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    rec *r = ud;
    r->cb_hooks++;
    int64_t idx = -2;
    CHECK_OK(fulmen_hook_context_optimizer_index(ctx, &idx));
    bool optimizer_hook = hook == FULMEN_HOOK_BEFORE_OPTIMIZER_STEP || hook == FULMEN_HOOK_BEFORE_ZERO_GRAD;
    if ((optimizer_hook && idx == 0) || (!optimizer_hook && idx == -1)) {
        r->opt_index_ok++;
    } else {
        r->opt_index_bad++;
    }
    /* A callback never sees the module-only hooks. */
    CHECK(hook < FULMEN_HOOK_VALIDATION_MODEL_EVAL);
    return NULL;
}

static void cb_free(void *ud) { ((rec *)ud)->cb_freed++; }

static fulmen_callback_vtable recorder_vtable(rec *r) {
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.userdata = r;
    cb.userdata_free = cb_free;
    cb.on_hook = cb_hook;
    return cb;
}

static fulmen_error *configure_callbacks(void *ud, fulmen_callback_list *list) {
    rec *r = ud;
    if (!r->add_callbacks) return NULL;
    fulmen_callback_vtable cb = recorder_vtable(r);
    return fulmen_callback_list_add(list, "recorder", &cb);
}

/* Replaces the batch with (x, y, a tensor of 7s). */
static fulmen_error *add_marker(fulmen_hook_context *ctx) {
    fulmen_tensor *x = NULL, *y = NULL, *marker = NULL;
    CHECK_OK(fulmen_hook_context_batch_get(ctx, 0, &x));
    CHECK_OK(fulmen_hook_context_batch_get(ctx, 1, &y));
    int64_t shape[1] = {1};
    CHECK_OK(fulmen_tensor_full(shape, 1, 7.0, FULMEN_DTYPE_F32, &marker));
    const fulmen_tensor *batch[3] = {x, y, marker};
    return fulmen_hook_context_set_batch(ctx, batch, 3);
}

static fulmen_error *mod_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    rec *r = ud;
    if (r->n < MAX_EVENTS) r->hooks[r->n++] = hook;
    switch (hook) {
    case FULMEN_HOOK_BEFORE_BATCH_TRANSFER: {
        int64_t stage_batch = -2;
        CHECK_OK(fulmen_hook_context_batch_idx(ctx, &stage_batch));
        CHECK(stage_batch >= 0);
        const char *stage = NULL;
        CHECK_OK(fulmen_hook_context_stage(ctx, &stage));
        if (strcmp(stage, "fit") == 0) return add_marker(ctx);
        return NULL;
    }
    case FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE: {
        int32_t type = -1;
        int64_t index = -1;
        CHECK_OK(fulmen_hook_context_device(ctx, &type, &index));
        CHECK(type == FULMEN_DEVICE_TYPE_CPU && index == 0);
        if (r->transfer_sets_nothing) return NULL;
        size_t n = 0;
        CHECK_OK(fulmen_hook_context_batch_len(ctx, &n));
        const fulmen_tensor *batch[4] = {NULL, NULL, NULL, NULL};
        fulmen_tensor *t[4] = {NULL, NULL, NULL, NULL};
        CHECK(n <= 4);
        for (size_t i = 0; i < n && i < 4; i++) {
            CHECK_OK(fulmen_hook_context_batch_get(ctx, i, &t[i]));
            batch[i] = t[i];
        }
        return fulmen_hook_context_set_batch(ctx, batch, n);
    }
    case FULMEN_HOOK_VALIDATION_BATCH_END:
    case FULMEN_HOOK_TEST_BATCH_END: {
        fulmen_tensor *out = NULL;
        CHECK_OK(fulmen_hook_context_output(ctx, &out));
        if (out != NULL) {
            r->outputs_sum += check_item(out);
            r->outputs_seen++;
        }
        /* Only the transfer hooks replace the batch. */
        fulmen_tensor *x = NULL;
        CHECK_OK(fulmen_hook_context_batch_get(ctx, 0, &x));
        const fulmen_tensor *b[1] = {x};
        fulmen_error *e = fulmen_hook_context_set_batch(ctx, b, 1);
        if (fixture_code(e) == FULMEN_CODE_INVALID_STATE) r->set_batch_misuse++;
        return NULL;
    }
    case FULMEN_HOOK_VALIDATION_MODEL_TRAIN:
    case FULMEN_HOOK_TEST_MODEL_TRAIN:
        return fulmen_model_set_training(r->model, true);
    default:
        return NULL;
    }
}

static fulmen_lightning_module *module_for(rec *r) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = r;
    vt.training_step = training_step;
    vt.validation_step_output = validation_step;
    vt.test_step_output = validation_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = mod_hook;
    vt.configure_model = configure_model;
    vt.configure_callbacks = configure_callbacks;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, r->model, &m));
    return m;
}

static fulmen_trainer *trainer_for(int64_t epochs) {
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* Not overridden: fulmen's defaults, the module never sees the hooks, and
 * the steps' outputs reach the batch-end hooks. */
static void test_defaults(void) {
    rec r;
    rec_init(&r);
    fulmen_dataset *ds = fixture_blobs(32, 5, 2.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 1);
    fulmen_lightning_module *m = module_for(&r);
    fulmen_trainer *t = trainer_for(1);
    CHECK_OK(fulmen_trainer_fit(t, m, l, l, NULL));
    for (int i = 0; i < r.n; i++) CHECK(r.hooks[i] < FULMEN_HOOK_VALIDATION_MODEL_EVAL);
    CHECK(r.eval_in_train_mode == 0);
    CHECK(r.steps == 4 && r.replaced_seen == 0);
    CHECK(r.outputs_seen == 4 && r.outputs_sum > 0);
    CHECK(r.set_batch_misuse == 4);
    /* configure_model: once, after setup, before configure_optimizers, on the CPU. */
    CHECK(r.configure_model_calls == 1 && r.configure_model_after_setup == 1);
    CHECK(r.configure_model_before_optimizers == 1 && r.configure_model_device == 1);
    r.n = 0;
    CHECK_OK(fulmen_trainer_test(t, m, l, NULL));
    CHECK(r.configure_model_calls == 2);
    CHECK(r.outputs_seen == 8);
    /* A validate run leaves the model in eval mode (no on_validation_model_train). */
    CHECK_OK(fulmen_trainer_validate(t, m, l, NULL));
    bool training = true;
    CHECK_OK(fulmen_model_is_training(r.model, &training));
    CHECK(!training);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(r.model);
}

/* Overridden: the module's hooks run where Lightning calls them, in place
 * of the defaults, and the batch transfer hooks replace the batch. */
static void test_overridden(void) {
    rec r;
    rec_init(&r);
    fulmen_dataset *ds = fixture_blobs(32, 5, 2.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 1);
    fulmen_lightning_module *m = module_for(&r);
    const int hooks[] = {FULMEN_HOOK_VALIDATION_MODEL_EVAL, FULMEN_HOOK_VALIDATION_MODEL_TRAIN,
                         FULMEN_HOOK_TEST_MODEL_EVAL,       FULMEN_HOOK_TEST_MODEL_TRAIN,
                         FULMEN_HOOK_PREDICT_MODEL_EVAL,    FULMEN_HOOK_VALIDATION_MODEL_ZERO_GRAD,
                         FULMEN_HOOK_BEFORE_BATCH_TRANSFER, FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE,
                         FULMEN_HOOK_AFTER_BATCH_TRANSFER};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) CHECK_OK(fulmen_lightning_module_override_hook(m, hooks[i], true));
    CHECK_ERR(fulmen_lightning_module_override_hook(m, FULMEN_HOOK_FIT_START, true), FULMEN_CODE_INVALID_ARGUMENT,
              "LightningModule-only");
    CHECK_ERR(fulmen_lightning_module_override_hook(m, 1000, true), FULMEN_CODE_INVALID_ARGUMENT, "1000");
    fulmen_trainer *t = trainer_for(1);
    CHECK_OK(fulmen_trainer_fit(t, m, l, l, NULL));
    /* The overridden eval hook does not switch modes: validation ran in train mode. */
    CHECK(r.eval_in_train_mode == 4);
    CHECK(r.steps == 4 && r.replaced_seen == 4);
    int zero = index_of(&r, FULMEN_HOOK_VALIDATION_MODEL_ZERO_GRAD, 0);
    int eval = index_of(&r, FULMEN_HOOK_VALIDATION_MODEL_EVAL, 0);
    int start = index_of(&r, FULMEN_HOOK_VALIDATION_START, 0);
    int end = index_of(&r, FULMEN_HOOK_VALIDATION_END, 0);
    int train = index_of(&r, FULMEN_HOOK_VALIDATION_MODEL_TRAIN, 0);
    CHECK(zero >= 0 && zero < eval && eval < start && start < end && end < train);
    CHECK(index_of(&r, FULMEN_HOOK_VALIDATION_MODEL_ZERO_GRAD, 1) == -1);
    /* Each training batch: before, transfer, after, then on_train_batch_start. */
    int before = index_of(&r, FULMEN_HOOK_BEFORE_BATCH_TRANSFER, 0);
    int transfer = index_of(&r, FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE, 0);
    int after = index_of(&r, FULMEN_HOOK_AFTER_BATCH_TRANSFER, 0);
    int batch_start = index_of(&r, FULMEN_HOOK_TRAIN_BATCH_START, 0);
    CHECK(before >= 0 && before < transfer && transfer < after && after < batch_start);
    r.n = 0;
    CHECK_OK(fulmen_trainer_test(t, m, l, NULL));
    CHECK(index_of(&r, FULMEN_HOOK_TEST_MODEL_EVAL, 0) < index_of(&r, FULMEN_HOOK_TEST_START, 0));
    CHECK(index_of(&r, FULMEN_HOOK_TEST_END, 0) < index_of(&r, FULMEN_HOOK_TEST_MODEL_TRAIN, 0));
    r.n = 0;
    fulmen_tensor *pred = NULL;
    CHECK_OK(fulmen_lightning_module_override_hook(m, FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE, false));
    CHECK_OK(fulmen_trainer_predict(t, m, l, NULL, &pred));
    CHECK(index_of(&r, FULMEN_HOOK_PREDICT_MODEL_EVAL, 0) >= 0);
    CHECK(index_of(&r, FULMEN_HOOK_PREDICT_MODEL_EVAL, 0) < index_of(&r, FULMEN_HOOK_PREDICT_START, 0));
    CHECK(!seen(&r, FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE) && seen(&r, FULMEN_HOOK_AFTER_BATCH_TRANSFER));
    fulmen_tensor_free(pred);
    /* An overridden transfer_batch_to_device must set the moved batch. */
    CHECK_OK(fulmen_lightning_module_override_hook(m, FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE, true));
    r.transfer_sets_nothing = 1;
    CHECK_ERR(fulmen_trainer_test(t, m, l, NULL), FULMEN_CODE_INVALID_STATE, "transfer_batch_to_device");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(r.model);
}

/* The optimizer index, configure_callbacks replacing a trainer callback of
 * its name, and the vtable rules of the new slots. */
static void test_callbacks_and_optimizer(void) {
    rec trainer_cb, r;
    rec_init(&trainer_cb);
    rec_init(&r);
    r.add_callbacks = 1;
    fulmen_dataset *ds = fixture_blobs(32, 5, 2.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 1);
    fulmen_lightning_module *m = module_for(&r);
    fulmen_trainer *t = trainer_for(1);
    fulmen_callback_vtable cb = recorder_vtable(&trainer_cb);
    CHECK_OK(fulmen_trainer_add_callback(t, "recorder", &cb));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    /* Replaced (and freed) when the fit started; the module's ran. */
    CHECK(trainer_cb.cb_freed == 1 && trainer_cb.cb_hooks == 0);
    CHECK(r.cb_hooks > 0 && r.opt_index_bad == 0 && r.opt_index_ok == r.cb_hooks);
    /* Each run asks again: the module's earlier callback is replaced. */
    CHECK_OK(fulmen_trainer_validate(t, m, l, NULL));
    CHECK(r.cb_freed == 1);
    fulmen_trainer_free(t);
    CHECK(r.cb_freed == 2);

    /* A module whose eval steps all return outputs, without on_hook. */
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.training_step = training_step;
    vt.validation_step_output = validation_step;
    vt.test_step_output = validation_step;
    fulmen_lightning_module *bad = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, r.model, &bad));
    /* No on_hook: nothing to override with. */
    CHECK_ERR(fulmen_lightning_module_override_hook(bad, FULMEN_HOOK_VALIDATION_MODEL_EVAL, true),
              FULMEN_CODE_INVALID_STATE, "on_hook");
    fulmen_lightning_module_free(bad);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(r.model);
    fulmen_model_free(trainer_cb.model);
}

static fulmen_error *eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ud;
    (void)ctx;
    (void)batch;
    return NULL;
}

static void test_exclusive_steps(void) {
    fulmen_model *model = fixture_mlp(4, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.training_step = training_step;
    vt.validation_step = eval_step;
    vt.validation_step_output = validation_step;
    fulmen_lightning_module *m = NULL;
    CHECK_ERR(fulmen_lightning_module_new(&vt, model, &m), FULMEN_CODE_INVALID_ARGUMENT, "not both");
    CHECK(m == NULL);
    fulmen_model_free(model);
}

int main(void) {
    size_t live = fulmen_live_handles();
    test_defaults();
    test_overridden();
    test_callbacks_and_optimizer();
    test_exclusive_steps();
    CHECK(fulmen_live_handles() == live);
    return check_finish("test_hooks_more");
}

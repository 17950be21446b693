/*
 * The hooks fulmen calls, in order, for the run hook_order_parity.py also
 * gives Lightning's Trainer: a 4-8-2 MLP, fit for 2 epochs over 3 training
 * batches validating on 2 (the sanity check included), then validate, test
 * and predict over 2 batches each. A host callback prints "cb:<hook>" and
 * the module "lm:<hook>" for every hook, one per line; the module overrides
 * every LightningModule-only hook (doing what Lightning's default does) and
 * prints configure_callbacks, configure_model and configure_optimizers
 * too. It first prints "known:<hook>" for every hook fulmen has.
 *
 *     hook_order_parity
 */
#include <fulmen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ok(fulmen_error *e, const char *what) {
    if (e == NULL) return;
    fprintf(stderr, "hook_order_parity: %s: %s\n", what, fulmen_error_message(e));
    fulmen_error_free(e);
    exit(1);
}

typedef struct {
    fulmen_model *model;
} module_state;

static fulmen_error *print_hook(const char *who, int32_t hook) {
    printf("%s:%s\n", who, fulmen_hook_name(hook));
    return NULL;
}

static fulmen_error *cb_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    (void)ctx;
    return print_hook("cb", hook);
}

/* The module's hooks; Lightning's defaults for the ones it overrides. */
static fulmen_error *lm_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    module_state *s = ud;
    print_hook("lm", hook);
    switch (hook) {
    case FULMEN_HOOK_VALIDATION_MODEL_EVAL:
    case FULMEN_HOOK_TEST_MODEL_EVAL:
    case FULMEN_HOOK_PREDICT_MODEL_EVAL:
        return fulmen_model_set_training(s->model, false);
    case FULMEN_HOOK_VALIDATION_MODEL_TRAIN:
    case FULMEN_HOOK_TEST_MODEL_TRAIN:
        return fulmen_model_set_training(s->model, true);
    case FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE: {
        /* The run is on the CPU, where the batch already is. */
        size_t n = 0;
        fulmen_error *e = fulmen_hook_context_batch_len(ctx, &n);
        if (e != NULL) return e;
        const fulmen_tensor *batch[8] = {NULL};
        if (n > 8) return fulmen_error_new(FULMEN_CODE_INVALID_STATE, "more than 8 tensors in a batch");
        for (size_t i = 0; i < n; i++) {
            fulmen_tensor *t = NULL;
            e = fulmen_hook_context_batch_get(ctx, i, &t);
            if (e != NULL) return e;
            batch[i] = t;
        }
        return fulmen_hook_context_set_batch(ctx, batch, n);
    }
    default:
        return NULL;
    }
}

static fulmen_error *loss_of(module_state *s, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(s->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    (void)ctx;
    return loss_of(ud, batch, out);
}

static fulmen_error *eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = loss_of(ud, batch, &loss);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, 0, 0);
    return e;
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                  fulmen_tensor **out) {
    module_state *s = ud;
    (void)ctx;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(s->model, x, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    module_state *s = ud;
    printf("lm:configure_optimizers\n");
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(s->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_error *configure_model(void *ud, int32_t device_type, int64_t device_index) {
    (void)ud;
    (void)device_type;
    (void)device_index;
    printf("lm:configure_model\n");
    return NULL;
}

static fulmen_error *configure_callbacks(void *ud, fulmen_callback_list *list) {
    (void)ud;
    (void)list;
    printf("lm:configure_callbacks\n");
    return NULL;
}

/* `n` rows of 4 features (randn) with labels alternating 0 / 1. */
static fulmen_dataset *data(size_t n) {
    int64_t shape[2] = {(int64_t)n, 4}, lshape[1] = {(int64_t)n};
    int64_t labels[16];
    if (n > 16) exit(2);
    for (size_t i = 0; i < n; i++) labels[i] = (int64_t)(i % 2);
    fulmen_tensor *x = NULL, *y = NULL;
    ok(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &x), "features");
    ok(fulmen_tensor_from_data(labels, n * sizeof(int64_t), FULMEN_DTYPE_I64, lshape, 1, &y), "labels");
    const fulmen_tensor *parts[2] = {x, y};
    fulmen_dataset *ds = NULL;
    ok(fulmen_dataset_from_tensors(parts, 2, &ds), "dataset");
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    return ds;
}

static fulmen_loader *loader(fulmen_dataset *ds) {
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 4;
    fulmen_loader *l = NULL;
    ok(fulmen_loader_new(ds, &o, &l), "loader");
    return l;
}

static fulmen_model *mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    ok(fulmen_model_sequential_new(&m), "model");
    ok(fulmen_model_linear_new(4, 8, true, &l), "linear");
    ok(fulmen_model_push(m, l), "push");
    ok(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l), "tanh");
    ok(fulmen_model_push(m, l), "push");
    ok(fulmen_model_linear_new(8, 2, true, &l), "linear");
    ok(fulmen_model_push(m, l), "push");
    return m;
}

int main(void) {
    ok(fulmen_manual_seed(0), "seed");
    module_state s = {mlp()};
    fulmen_dataset *train_ds = data(12), *eval_ds = data(8);
    fulmen_loader *train = loader(train_ds), *eval = loader(eval_ds);

    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = training_step;
    vt.validation_step = eval_step;
    vt.test_step = eval_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = lm_hook;
    vt.configure_model = configure_model;
    vt.configure_callbacks = configure_callbacks;
    fulmen_lightning_module *m = NULL;
    ok(fulmen_lightning_module_new(&vt, s.model, &m), "module");
    for (int32_t h = FULMEN_HOOK_VALIDATION_MODEL_EVAL; h <= FULMEN_HOOK_PREPARE_DATA; h++) {
        ok(fulmen_lightning_module_override_hook(m, h, true), "override_hook");
    }

    fulmen_trainer_options *o = NULL;
    ok(fulmen_trainer_options_new(&o), "options");
    ok(fulmen_trainer_options_set_int(o, "max_epochs", 2), "max_epochs");
    ok(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false), "progress");
    ok(fulmen_trainer_options_set_bool(o, "enable_model_summary", false), "summary");
    ok(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false), "checkpointing");
    ok(fulmen_trainer_options_set(o, "logger", "false"), "logger");
    ok(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 2), "num_sanity_val_steps");
    fulmen_trainer *t = NULL;
    ok(fulmen_trainer_new(o, &t), "trainer");
    fulmen_trainer_options_free(o);
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.on_hook = cb_hook;
    ok(fulmen_trainer_add_callback(t, "recorder", &cb), "callback");

    /* The hooks fulmen has, then the calls. */
    for (int32_t h = 0; fulmen_hook_name(h)[0] != '\0'; h++) printf("known:%s\n", fulmen_hook_name(h));
    printf("run:fit\n");
    ok(fulmen_trainer_fit(t, m, train, eval, NULL), "fit");
    printf("run:validate\n");
    ok(fulmen_trainer_validate(t, m, eval, NULL), "validate");
    printf("run:test\n");
    ok(fulmen_trainer_test(t, m, eval, NULL), "test");
    printf("run:predict\n");
    fulmen_tensor *pred = NULL;
    ok(fulmen_trainer_predict(t, m, eval, NULL, &pred), "predict");
    fulmen_tensor_free(pred);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(train);
    fulmen_loader_free(eval);
    fulmen_dataset_free(train_ds);
    fulmen_dataset_free(eval_ds);
    fulmen_model_free(s.model);
    return 0;
}

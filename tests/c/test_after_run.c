/*
 * After a run: fulmen_trainer_save_checkpoint (a fit that goes on from the
 * file saved after fit equals one that never stopped, in both checkpoint
 * formats, the module's on_save_checkpoint entries included; weights alone
 * after validate; the errors before any run, without a fit, for another
 * module), the metric dicts (callback, logged, progress bar metrics) and
 * the read-only queries (estimated_stepping_batches, should_stop,
 * num_training_batches, num_val_batches, num_test_batches,
 * num_predict_batches, num_sanity_val_batches, is_last_batch, num_devices,
 * device_ids, node_rank, the EarlyStopping state, the GradScaler's scale).
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stdlib.h>
#include <unistd.h>

static char root[256];

/* ---- the module: cross-entropy with SGD and momentum (its state matters
 * on resume), metrics logged for the dicts, an entry of its own in every
 * checkpoint, a stop request when asked ---- */

typedef struct {
    fulmen_model *model;
    bool stop_at_epoch_end; /* on_train_epoch_end asks to stop */
    int saves;              /* on_save_checkpoint calls */
    int loads_seen;         /* on_load_checkpoint calls that found the entry */
} fixture;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    fulmen_error *e = fixture_cross_entropy(f->model, batch, out);
    uint32_t shown = FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR;
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", check_item(*out), shown, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "hidden", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_NO_LOGGER, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fixture *f = ud;
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fixture_cross_entropy(f->model, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", check_item(loss), 0, 0);
    return e;
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    fixture *f = ud;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(f->model, x, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    return fixture_add_sgd(config, f->model, 0.05, 0.9);
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_END && f->stop_at_epoch_end) return fulmen_hook_context_request_stop(ctx);
    if (hook == FULMEN_HOOK_SAVE_CHECKPOINT) {
        f->saves++;
        return fulmen_hook_context_checkpoint_set(ctx, "saved_by", "host");
    }
    if (hook == FULMEN_HOOK_LOAD_CHECKPOINT) {
        char buf[16];
        size_t len = 0;
        fulmen_error *e = fulmen_hook_context_checkpoint_get(ctx, "saved_by", buf, sizeof buf, &len);
        if (e == NULL && strcmp(buf, "host") == 0) f->loads_seen++;
        return e;
    }
    return NULL;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.test_step = validation_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

/* A trainer on the CPU of `epochs` epochs, seeded, without loggers or a
 * ModelCheckpoint, writing checkpoints in `format` (NULL: the default). */
static fulmen_trainer *trainer_with(int64_t epochs, const char *format) {
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cpu"));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    if (format != NULL) CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", format));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- reading the metric dicts ---- */

/* The number of entries of one of the trainer's metric dicts, checking
 * that every key is a string and every value a float. */
static size_t dict_len(fulmen_value *d) {
    size_t n = 0;
    int32_t kind = -1;
    CHECK_OK(fulmen_value_get_kind(d, &kind));
    CHECK(kind == FULMEN_VALUE_KIND_DICT);
    CHECK_OK(fulmen_value_len(d, &n));
    for (size_t i = 0; i < n; i++) {
        fulmen_value *k = NULL, *v = NULL;
        int32_t kk = -1, vk = -1;
        CHECK_OK(fulmen_value_dict_entry(d, i, &k, &v));
        CHECK_OK(fulmen_value_get_kind(k, &kk));
        CHECK_OK(fulmen_value_get_kind(v, &vk));
        CHECK(kk == FULMEN_VALUE_KIND_STRING && vk == FULMEN_VALUE_KIND_DOUBLE);
        fulmen_value_free(k);
        fulmen_value_free(v);
    }
    return n;
}

/* Whether the dict has `name`. */
static bool has(const fulmen_value *d, const char *name) {
    fulmen_value *v = NULL;
    fulmen_error *e = fulmen_value_dict_get(d, name, &v);
    fulmen_value_free(v);
    return fixture_code(e) == 0;
}

/* The value of `name` in the dict (NAN when missing). */
static double get(const fulmen_value *d, const char *name) {
    fulmen_value *v = NULL;
    double x = NAN;
    if (fixture_code(fulmen_value_dict_get(d, name, &v)) == 0) CHECK_OK(fulmen_value_get_double(v, &x));
    fulmen_value_free(v);
    return x;
}

/* ---- before any run ---- */

static void test_before_any_run(void) {
    fixture f = {.model = fixture_mlp(8, 0)};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(1, NULL);
    char path[400];
    snprintf(path, sizeof path, "%s/early.ckpt", root);
    CHECK_ERR(fulmen_trainer_save_checkpoint(t, m, path, true), FULMEN_CODE_INVALID_STATE, "before the trainer has run");
    CHECK_ERR(fulmen_trainer_save_checkpoint(t, m, path, false), FULMEN_CODE_INVALID_STATE, NULL);
    CHECK(!exists(path) && f.saves == 0);
    CHECK_ERR(fulmen_trainer_save_checkpoint(t, m, NULL, false), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_trainer_save_checkpoint(t, m, "", false), FULMEN_CODE_INVALID_ARGUMENT, "empty");

    int64_t n = 0;
    bool b = true;
    size_t count = 99, devices = 0, node = 99;
    CHECK_ERR(fulmen_trainer_estimated_stepping_batches(t, &n), FULMEN_CODE_INVALID_STATE, "fit first");
    CHECK_OK(fulmen_trainer_num_training_batches(t, &n));
    CHECK(n == -1);
    CHECK_OK(fulmen_trainer_should_stop(t, &b));
    CHECK(!b);
    b = true;
    CHECK_OK(fulmen_trainer_is_last_batch(t, &b));
    CHECK(!b);
    CHECK_OK(fulmen_trainer_num_val_batches(t, NULL, 0, &count));
    CHECK(count == 0);
    CHECK_OK(fulmen_trainer_num_devices(t, &devices));
    CHECK(devices == 1);
    CHECK_OK(fulmen_trainer_node_rank(t, &node));
    CHECK(node == 0);
    CHECK_ERR(fulmen_trainer_num_devices(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    count = 99;
    CHECK_OK(fulmen_trainer_num_test_batches(t, NULL, 0, &count));
    CHECK(count == 0);
    CHECK_OK(fulmen_trainer_num_predict_batches(t, NULL, 0, &count));
    CHECK(count == 0);
    CHECK_OK(fulmen_trainer_num_sanity_val_batches(t, NULL, 0, &count));
    CHECK(count == 0);
    int64_t ids[2] = {7, 7};
    CHECK_OK(fulmen_trainer_device_ids(t, ids, 2, &count));
    CHECK(count == 1 && ids[0] == -1); /* a CPU device, as torch's _get_device_index(cpu, allow_cpu=True) */
    double scale = 0;
    CHECK_ERR(fulmen_trainer_grad_scale(t, &scale), FULMEN_CODE_INVALID_STATE, "no GradScaler");
    CHECK_ERR(fulmen_trainer_early_stopping_state(t, NULL, NULL, NULL), FULMEN_CODE_INVALID_STATE, "EarlyStopping");

    fulmen_value *d = NULL;
    CHECK_OK(fulmen_trainer_callback_metrics(t, &d));
    CHECK(dict_len(d) == 0);
    fulmen_value_free(d);
    CHECK_ERR(fulmen_trainer_logged_metrics(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ---- exact resume from a checkpoint saved after fit ---- */

/* Trains `model` (holding the initial weights) for `epochs` epochs with a
 * new trainer, from `ckpt` when not NULL; saves after the fit to `save`
 * when not NULL; returns the global step. */
static int64_t train(fulmen_model *model, int64_t epochs, fulmen_loader *tl, const char *ckpt, const char *save,
                     const char *format, fixture *out) {
    fixture f = {.model = model};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(epochs, format);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, ckpt));
    if (save != NULL) CHECK_OK(fulmen_trainer_save_checkpoint(t, m, save, false));
    int64_t step = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    if (out != NULL) *out = f;
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    return step;
}

/* Every state_dict tensor's bytes, concatenated (malloc'd; *n bytes). */
static unsigned char *weights_of(const fulmen_model *m, size_t *n) {
    size_t count = 0, total = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &count));
    unsigned char *buf = NULL;
    for (size_t i = 0; i < count; i++) {
        char name[64];
        size_t len = 0, numel = 0;
        fulmen_tensor *t = NULL;
        CHECK_OK(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
        CHECK_OK(fulmen_tensor_numel(t, &numel));
        unsigned char *grown = realloc(buf, total + numel * sizeof(float));
        if (grown == NULL) exit(2);
        buf = grown;
        CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, buf + total, numel * sizeof(float)));
        total += numel * sizeof(float);
        fulmen_tensor_free(t);
    }
    *n = total;
    return buf;
}

static bool same_weights(const fulmen_model *a, const fulmen_model *b) {
    size_t na = 0, nb = 0;
    unsigned char *wa = weights_of(a, &na), *wb = weights_of(b, &nb);
    bool same = na == nb && na > 0 && memcmp(wa, wb, na) == 0;
    free(wa);
    free(wb);
    return same;
}

/* 4 epochs in one go == 2 epochs, fulmen_trainer_save_checkpoint, and a
 * new trainer resuming from that file to 4; with dropout and a shuffled
 * loader, so the random states and the momentum must come back too. */
static void test_resume_after_fit(fulmen_loader *tl, const char *format) {
    char init[400], path[400];
    snprintf(init, sizeof init, "%s/init-%s.safetensors", root, format ? format : "default");
    snprintf(path, sizeof path, "%s/after-fit-%s/state.ckpt", root, format ? format : "default");
    CHECK_OK(fulmen_manual_seed(42));
    fulmen_model *a = fixture_mlp(16, 0.2);
    CHECK_OK(fulmen_model_save(a, init));
    int64_t step_a = train(a, 4, tl, NULL, NULL, format, NULL);
    CHECK(step_a == 16);

    fulmen_model *b = fixture_mlp(16, 0.2);
    CHECK_OK(fulmen_model_load(b, init, true));
    fixture first = {.model = NULL};
    CHECK(train(b, 2, tl, NULL, path, format, &first) == 8);
    CHECK(first.saves == 1); /* the module's on_save_checkpoint ran */
    CHECK(exists(path));     /* its folder was made */
    CHECK(!same_weights(a, b));
    fixture second = {.model = NULL};
    int64_t step_b = train(b, 4, tl, path, NULL, format, &second);
    CHECK(second.loads_seen == 1); /* and its entry came back */
    CHECK(step_b == step_a);
    CHECK(same_weights(a, b));
    fulmen_model_free(a);
    fulmen_model_free(b);
}

/* ---- weights alone after validate, and the refusals ---- */

static void test_weights_after_validate(fulmen_loader *vl) {
    char path[400];
    snprintf(path, sizeof path, "%s/weights-after-validate.ckpt", root);
    fixture f = {.model = fixture_mlp(8, 0)};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(1, NULL);
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    /* no fit: a full checkpoint has no optimizer state to hold */
    CHECK_ERR(fulmen_trainer_save_checkpoint(t, m, path, false), FULMEN_CODE_INVALID_STATE, "weights_only");
    CHECK(!exists(path));
    CHECK_OK(fulmen_trainer_save_checkpoint(t, m, path, true));
    fulmen_model *back = fixture_mlp(8, 0);
    CHECK(!same_weights(back, f.model));
    CHECK_OK(fulmen_model_load(back, path, true));
    CHECK(same_weights(back, f.model));
    /* another module's model is not the one the trainer ran */
    fixture g = {.model = back};
    fulmen_lightning_module *other = module_for(&g);
    CHECK_ERR(fulmen_trainer_save_checkpoint(t, other, path, true), FULMEN_CODE_INVALID_ARGUMENT, "last run");
    /* validate attached no optimizers, and a fit's go with a run on another model */
    int64_t n = 0;
    CHECK_ERR(fulmen_trainer_estimated_stepping_batches(t, &n), FULMEN_CODE_INVALID_STATE, NULL);
    size_t count = 0;
    int64_t counts[2] = {0, 0};
    CHECK_OK(fulmen_trainer_num_val_batches(t, counts, 2, &count));
    CHECK(count == 1 && counts[0] == 2); /* validate's loader: 32 samples in 16s */
    fulmen_value *d = NULL;
    CHECK_OK(fulmen_trainer_callback_metrics(t, &d));
    CHECK(dict_len(d) == 1 && has(d, "val_loss"));
    fulmen_value_free(d);
    fulmen_lightning_module_free(other);
    fulmen_model_free(back);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

/* ---- the metric dicts and the queries after a fit ---- */

static void test_queries_after_fit(fulmen_loader *tl, fulmen_loader *vl, fulmen_loader *vl_small) {
    fixture f = {.model = fixture_mlp(8, 0), .stop_at_epoch_end = true};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = trainer_with(3, NULL);
    fulmen_early_stopping_options es = fulmen_early_stopping_options_default();
    es.monitor = "val_loss/dataloader_idx_0";
    es.patience = 5;
    CHECK_OK(fulmen_trainer_add_early_stopping(t, &es));
    int64_t wait = -1, stopped = -1;
    double best = 0;
    CHECK_OK(fulmen_trainer_early_stopping_state(t, &wait, &stopped, &best));
    CHECK(wait == 0 && stopped == 0 && best == INFINITY); /* mode min, nothing seen yet */
    const fulmen_loader *vals[2] = {vl, vl_small};
    CHECK_OK(fulmen_trainer_fit_loaders(t, m, tl, vals, 2, NULL));

    int64_t epoch = -1, steps = -1, n = -1;
    CHECK_OK(fulmen_trainer_current_epoch(t, &epoch));
    CHECK(epoch == 1); /* the stop request ended the fit after its first epoch */
    bool b = false;
    CHECK_OK(fulmen_trainer_should_stop(t, &b));
    CHECK(b);
    b = false;
    CHECK_OK(fulmen_trainer_is_last_batch(t, &b));
    CHECK(b);
    CHECK_OK(fulmen_trainer_num_training_batches(t, &n));
    CHECK(n == 4); /* 32 samples in batches of 8 */
    CHECK_OK(fulmen_trainer_estimated_stepping_batches(t, &steps));
    CHECK(steps == 12); /* 4 batches * 3 epochs, whatever the stop */
    size_t count = 0, devices = 0, node = 99;
    int64_t counts[2] = {0, 0};
    CHECK_ERR(fulmen_trainer_num_val_batches(t, counts, 1, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(count == 2 && counts[0] == 0);
    CHECK_OK(fulmen_trainer_num_val_batches(t, counts, 2, &count));
    CHECK(count == 2 && counts[0] == 2 && counts[1] == 1);
    CHECK_OK(fulmen_trainer_num_devices(t, &devices));
    CHECK(devices == 1);
    CHECK_OK(fulmen_trainer_node_rank(t, &node));
    CHECK(node == 0);
    /* the sanity check ran num_sanity_val_steps (2) of each loader's batches, at most its own */
    CHECK_OK(fulmen_trainer_num_sanity_val_batches(t, counts, 2, &count));
    CHECK(count == 2 && counts[0] == 2 && counts[1] == 1);
    double scale = 0;
    CHECK_ERR(fulmen_trainer_grad_scale(t, &scale), FULMEN_CODE_INVALID_STATE, NULL); /* 32-true: no scaler */

    fulmen_value *cb = NULL, *logged = NULL, *bar = NULL;
    CHECK_OK(fulmen_trainer_callback_metrics(t, &cb));
    CHECK_OK(fulmen_trainer_logged_metrics(t, &logged));
    CHECK_OK(fulmen_trainer_progress_bar_metrics(t, &bar));
    /* callback metrics: every name, the epoch value also under the bare one */
    CHECK(has(cb, "train_loss") && has(cb, "train_loss_step") && has(cb, "train_loss_epoch") && has(cb, "hidden"));
    CHECK(has(cb, "val_loss/dataloader_idx_0") && has(cb, "val_loss/dataloader_idx_1"));
    CHECK(dict_len(cb) == 6);
    double one = NAN;
    CHECK_OK(fulmen_trainer_callback_metric(t, "train_loss_epoch", &one));
    CHECK(one == get(cb, "train_loss_epoch"));
    CHECK(get(cb, "hidden") == 1.0);
    /* EarlyStopping saw the one epoch's validation: its best is that loss */
    CHECK_OK(fulmen_trainer_early_stopping_state(t, &wait, &stopped, &best));
    CHECK(wait == 0 && stopped == 0 && best == get(cb, "val_loss/dataloader_idx_0"));
    /* logged metrics: what the loggers get, so not `hidden` (logger=False) */
    CHECK(has(logged, "train_loss_step") && has(logged, "train_loss_epoch") && !has(logged, "hidden"));
    CHECK(has(logged, "val_loss/dataloader_idx_0") && has(logged, "val_loss/dataloader_idx_1"));
    CHECK(dict_len(logged) == 4);
    CHECK(get(logged, "train_loss_epoch") == get(cb, "train_loss_epoch"));
    /* progress bar: only the prog_bar metric's step and epoch values */
    CHECK(has(bar, "train_loss_step") && has(bar, "train_loss_epoch") && !has(bar, "val_loss/dataloader_idx_0"));
    CHECK(dict_len(bar) == 2);
    fulmen_value_free(cb);
    fulmen_value_free(logged);
    fulmen_value_free(bar);

    /* the state stays for a save after a later validate on the same module */
    char path[400];
    snprintf(path, sizeof path, "%s/after-validate.ckpt", root);
    CHECK_OK(fulmen_trainer_validate(t, m, vl_small, NULL));
    CHECK_OK(fulmen_trainer_num_val_batches(t, counts, 2, &count));
    CHECK(count == 1 && counts[0] == 1);
    CHECK_OK(fulmen_trainer_should_stop(t, &b));
    CHECK(b);
    CHECK_OK(fulmen_trainer_save_checkpoint(t, m, path, false));
    CHECK(exists(path) && f.saves == 1);

    /* test and predict count their own loaders; validation's stay */
    CHECK_OK(fulmen_trainer_test(t, m, vl, NULL));
    CHECK_OK(fulmen_trainer_num_test_batches(t, counts, 2, &count));
    CHECK(count == 1 && counts[0] == 2);
    fulmen_tensor *pred = NULL;
    CHECK_OK(fulmen_trainer_predict(t, m, vl_small, NULL, &pred));
    fulmen_tensor_free(pred);
    CHECK_OK(fulmen_trainer_num_predict_batches(t, counts, 2, &count));
    CHECK(count == 1 && counts[0] == 1);
    CHECK_OK(fulmen_trainer_num_test_batches(t, counts, 2, &count));
    CHECK(count == 1 && counts[0] == 2);
    CHECK_OK(fulmen_trainer_num_val_batches(t, counts, 2, &count));
    CHECK(count == 1 && counts[0] == 1);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-after-run-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    fulmen_dataset *train_ds = fixture_blobs(32, 1, 1.0f), *val = fixture_blobs(32, 2, 1.0f);
    fulmen_dataset *small = fixture_blobs(16, 3, 1.0f);
    fulmen_loader *tl = fixture_loader(train_ds, 8, true, 11), *vl = fixture_loader(val, 16, false, 0);
    fulmen_loader *vl_small = fixture_loader(small, 16, false, 0);
    test_before_any_run();
    test_resume_after_fit(tl, NULL);
    test_resume_after_fit(tl, "safetensors");
    test_weights_after_validate(vl);
    test_queries_after_fit(tl, vl, vl_small);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_loader_free(vl_small);
    fulmen_dataset_free(train_ds);
    fulmen_dataset_free(val);
    fulmen_dataset_free(small);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_after_run");
}

/*
 * Strategy "dp" (DataParallel) on a custom accelerator with four devices
 * that compute on the CPU: the batch is split along dimension 0, the step
 * runs once per chunk with the model's replica of that device, losses are
 * averaged and predictions gathered. With equal chunks and a mean loss the
 * weights must equal those of one device seeing the whole batch.
 */
#include "check.h"
#include "fixture.h"

#include <string.h>

#define SAMPLES 96
#define BATCH 16
#define HIDDEN 8

static fulmen_error *four_devices(void *ud, size_t *out) {
    (void)ud;
    *out = 4;
    return NULL;
}

static void register_quad(void) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = four_devices; /* get_parallel_devices NULL: the CPU for every id */
    CHECK_OK(fulmen_accelerator_register("cpu_quad", "four devices computing on the CPU", &vt, true));
}

typedef struct {
    fulmen_model *model;
    int calls;            /* training_step calls */
    int64_t chunk_sum;    /* rows seen by training_step */
    int64_t largest_chunk;
    int fail_at_call;     /* training_step fails at this call (0: never) */
} state;

static fulmen_error *loss_of(state *s, const fulmen_batch *batch, fulmen_tensor **out) {
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    fulmen_tensor *x = NULL;
    int64_t dims[2] = {0, 0};
    size_t ndim = 0;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_tensor_shape(x, dims, 2, &ndim);
    if (e != NULL) return e;
    size_t size = (size_t)dims[0];
    s->calls++;
    s->chunk_sum += (int64_t)size;
    if ((int64_t)size > s->largest_chunk) s->largest_chunk = (int64_t)size;
    if (s->fail_at_call == s->calls) return fulmen_error_new(FULMEN_CODE_CALLBACK, "chunk step failed on purpose");
    e = loss_of(s, batch, out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "rows", (double)size, FULMEN_LOG_ON_STEP, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = loss_of(ud, batch, &loss);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    state *s = ud;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(s->model, x, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_sgd(config, ((state *)ud)->model, 0.2, 0.9);
}

static fulmen_lightning_module *module_for(state *s, fulmen_model *model) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, model, &m));
    return m;
}

static fulmen_trainer *trainer_for(const char *accelerator, const char *strategy, const char *devices) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", 3));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "strategy", strategy));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* Trains a fresh seeded MLP (left in s->model); returns fit's error and
 * writes the last val_loss when `val_loss` is not NULL. */
/* The seeded MLP of `fit`, or (scripted) the same network as TorchScript
 * (tests/fixtures/blobs_mlp_scripted.pt) holding the same weights. */
static fulmen_model *seeded_mlp(bool scripted) {
    fulmen_model *native = fixture_mlp(HIDDEN, 0);
    if (!scripted) return native;
    const char *dir = getenv("FULMEN_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/blobs_mlp_scripted.pt", dir != NULL ? dir : "tests/fixtures");
    fulmen_model *script = NULL;
    CHECK_OK(fulmen_model_load_torchscript(path, &script));
    static const char *const names[] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    for (size_t i = 0; i < 4 && script != NULL; i++) {
        fulmen_tensor *from = NULL, *to = NULL;
        CHECK_OK(fulmen_model_state_dict_get(native, names[i], &from));
        CHECK_OK(fulmen_model_state_dict_get(script, names[i], &to));
        CHECK_OK(fulmen_tensor_copy_(to, from));
        fulmen_tensor_free(from);
        fulmen_tensor_free(to);
    }
    fulmen_model_free(native);
    return script;
}

static fulmen_error *fit_model(const char *accelerator, const char *strategy, const char *devices, state *s,
                               int fail_at_call, double *val_loss, bool scripted) {
    CHECK_OK(fulmen_manual_seed(11));
    memset(s, 0, sizeof *s);
    s->model = seeded_mlp(scripted);
    s->fail_at_call = fail_at_call;
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 3, 1.5f);
    fulmen_loader *train_loader = fixture_loader(ds, BATCH, true, 5), *val_loader = fixture_loader(ds, BATCH, false, 0);
    fulmen_lightning_module *m = module_for(s, s->model);
    fulmen_trainer *t = trainer_for(accelerator, strategy, devices);
    fulmen_error *err = fulmen_trainer_fit(t, m, train_loader, val_loader, NULL);
    if (err == NULL && val_loss != NULL) CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss", val_loss));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(train_loader);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(ds);
    return err;
}

static fulmen_error *fit(const char *accelerator, const char *strategy, const char *devices, state *s,
                         int fail_at_call, double *val_loss) {
    return fit_model(accelerator, strategy, devices, s, fail_at_call, val_loss, false);
}

/* A TorchScript model is replicated too: its weights end where the native
 * model's do on one device. */
static void torchscript_models_replicate(void) {
    state ref, dp2;
    double ref_val = 0, dp2_val = 0;
    CHECK_OK(fit("cpu", "single_device", "1", &ref, 0, &ref_val));
    CHECK_OK(fit_model("cpu_quad", "dp", "2", &dp2, 0, &dp2_val, true));
    double d = fixture_max_diff(ref.model, dp2.model);
    printf("  TorchScript: max |w_dp - w_single| over 2 devices %.3g\n", d);
    CHECK(d < 1e-5);
    CHECK_NEAR(dp2_val, ref_val, 1e-5);
    fulmen_model_free(ref.model);
    fulmen_model_free(dp2.model);
}


static void equal_chunks_reach_the_single_device_weights(void) {
    state ref, dp2, dp4;
    double ref_val = 0, dp2_val = 0, dp4_val = 0;
    CHECK_OK(fit("cpu", "single_device", "1", &ref, 0, &ref_val));
    CHECK_OK(fit("cpu_quad", "dp", "2", &dp2, 0, &dp2_val));
    CHECK_OK(fit("cpu_quad", "dp", "4", &dp4, 0, &dp4_val));
    int batches = 3 * (SAMPLES / BATCH);
    CHECK(ref.calls == batches);
    CHECK(dp2.calls == 2 * batches && dp2.largest_chunk == BATCH / 2);
    CHECK(dp4.calls == 4 * batches && dp4.largest_chunk == BATCH / 4);
    CHECK(dp2.chunk_sum == ref.chunk_sum && dp4.chunk_sum == ref.chunk_sum);
    double d2 = fixture_max_diff(ref.model, dp2.model), d4 = fixture_max_diff(ref.model, dp4.model);
    printf("  max |w_dp - w_single|: 2 devices %.3g, 4 devices %.3g\n", d2, d4);
    CHECK(d2 < 1e-5);
    CHECK(d4 < 1e-5);
    CHECK_NEAR(dp2_val, ref_val, 1e-5);
    CHECK_NEAR(dp4_val, ref_val, 1e-5);
    fulmen_model_free(ref.model);
    fulmen_model_free(dp2.model);
    fulmen_model_free(dp4.model);
}

static void uneven_chunks_train(void) {
    state s;
    double val = 0;
    CHECK_OK(fit("cpu_quad", "dp", "3", &s, 0, &val)); /* 16 rows: chunks of 6, 6 and 4 */
    CHECK(s.calls == 3 * 3 * (SAMPLES / BATCH));
    CHECK(s.largest_chunk == 6);
    CHECK(s.chunk_sum == 3 * SAMPLES);
    CHECK(val < 0.5);
    fulmen_model_free(s.model);
}

static void predictions_are_gathered_in_order(void) {
    state s;
    memset(&s, 0, sizeof s);
    CHECK_OK(fulmen_manual_seed(4));
    s.model = fixture_mlp(HIDDEN, 0);
    fulmen_dataset *ds = fixture_blobs(10, 3, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 10, false, 0); /* one batch of 10: chunks 3, 3, 3, 1 */
    fulmen_lightning_module *m = module_for(&s, s.model);
    fulmen_tensor *single = NULL, *gathered = NULL, *d = NULL, *ad = NULL, *mx = NULL;
    fulmen_trainer *t1 = trainer_for("cpu", "single_device", "1"), *t4 = trainer_for("cpu_quad", "dp", "4");
    CHECK_OK(fulmen_trainer_predict(t1, m, loader, NULL, &single));
    CHECK_OK(fulmen_trainer_predict(t4, m, loader, NULL, &gathered));
    int64_t shape[2] = {0, 0};
    size_t ndim = 0;
    CHECK_OK(fulmen_tensor_shape(gathered, shape, 2, &ndim));
    CHECK(ndim == 2 && shape[0] == 10 && shape[1] == 2);
    CHECK_OK(fulmen_tensor_sub(single, gathered, &d));
    CHECK_OK(fulmen_tensor_abs(d, &ad));
    CHECK_OK(fulmen_tensor_max(ad, &mx));
    CHECK(check_item(mx) < 1e-6);
    fulmen_tensor_free(single);
    fulmen_tensor_free(gathered);
    fulmen_tensor_free(d);
    fulmen_tensor_free(ad);
    fulmen_tensor_free(mx);
    fulmen_trainer_free(t1);
    fulmen_trainer_free(t4);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
}

static void a_failing_chunk_leaves_the_model_usable(void) {
    state s;
    /* The second call is the replica of device 1 in the first batch. */
    CHECK_ERR(fit("cpu_quad", "dp", "2", &s, 2, NULL), FULMEN_CODE_CALLBACK, "chunk step failed on purpose");
    CHECK(s.calls == 2);
    fulmen_tensor *x = NULL, *y = NULL;
    int64_t shape[2] = {3, 2};
    CHECK_OK(fulmen_tensor_zeros(shape, 2, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_model_forward(s.model, x, &y));
    size_t n = 0;
    CHECK_OK(fulmen_model_state_dict_len(s.model, &n));
    CHECK(n == 4);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(s.model);
}

static void refusals(void) {
    state s;
    memset(&s, 0, sizeof s);
    fulmen_dataset *ds = fixture_blobs(8, 3, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 4, false, 0);
    fulmen_lightning_module *m = NULL;
    fulmen_trainer *t = NULL;
    s.model = fixture_mlp(HIDDEN, 0);

    /* dp needs the module's model. */
    m = module_for(&s, NULL);
    t = trainer_for("cpu_quad", "dp", "2");
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_INVALID_STATE, "dp needs a LightningModule");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);

    /* The xla strategy runs on the xla accelerator only; here it is unavailable. */
    m = module_for(&s, s.model);
    t = trainer_for("cpu", "xla", "1");
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT,
              "runs on the xla accelerator");
    fulmen_trainer_free(t);
    t = trainer_for("cpu", "single_xla", "1");
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT,
              "strategy \"single_xla\" runs on the xla accelerator");
    fulmen_trainer_free(t);
    t = trainer_for("xla", "xla", "auto");
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_UNAVAILABLE, "\"xla\" is not available");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
}

int main(void) {
    register_quad();
    equal_chunks_reach_the_single_device_weights();
    uneven_chunks_train();
    predictions_are_gathered_in_order();
    a_failing_chunk_leaves_the_model_usable();
    torchscript_models_replicate();
    refusals();
    CHECK_OK(fulmen_accelerator_unregister("cpu_quad"));
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_dp");
}

/*
 * Models built on the meta device from C (fulmen_meta_init_begin, as
 * Lightning's init_module(empty_init=True)): no values until materialized,
 * then those of the eager build under the same seed, the host's own
 * initialisation included; a fit of the meta-built model equals the eager
 * one's bit for bit (the trainer materializes it as it places it); an
 * optimizer over meta parameters, a model moved to the meta device, saving
 * or reading values not made yet and an unbalanced end are refused with
 * clear errors.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"

/* An MLP with a BatchNorm (buffers), its last layer given the host's own
 * initialisation: kaiming_normal_, then scaled by 0.5. */
static fulmen_model *build(void) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(2, 6, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_batch_norm_new(6, 1e-5, 0.1, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(6, 2, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "3.weight", &w));
    CHECK_OK(fulmen_init_kaiming_normal_(w, 0, FULMEN_FAN_MODE_FAN_IN, "relu"));
    CHECK_OK(fulmen_tensor_mul_scalar_(w, 0.5));
    fulmen_tensor_free(w);
    return m;
}

static bool on_meta(const fulmen_model *m, const char *name) {
    fulmen_tensor *t = NULL;
    int32_t type = -1;
    int64_t index = -1;
    CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
    CHECK_OK(fulmen_tensor_device(t, &type, &index));
    fulmen_tensor_free(t);
    return type == FULMEN_DEVICE_TYPE_META;
}

static fulmen_model *built_on_meta(void) {
    CHECK_OK(fulmen_meta_init_begin());
    CHECK_OK(fulmen_meta_init_begin()); /* scopes nest */
    fulmen_model *m = build();
    CHECK_OK(fulmen_meta_init_end());
    CHECK_OK(fulmen_meta_init_end());
    return m;
}

static void test_materialized_values(void) {
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *eager = build();
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *meta = built_on_meta();
    bool holds = false;
    CHECK_OK(fulmen_model_holds_meta(meta, &holds));
    CHECK(holds);
    CHECK(on_meta(meta, "0.weight") && on_meta(meta, "1.running_var") && on_meta(meta, "3.weight"));
    /* An optimizer cannot step tensors that will be replaced. */
    fulmen_tensor *params[16];
    size_t n = 0;
    CHECK_OK(fulmen_model_parameters(meta, true, params, 16, &n));
    fulmen_optimizer *opt = NULL;
    fulmen_sgd_options so = fulmen_sgd_options_default();
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)params, n, &so, &opt),
              FULMEN_CODE_INVALID_STATE, "meta device");
    for (size_t i = 0; i < n; i++) fulmen_tensor_free(params[i]);
    CHECK_OK(fulmen_model_materialize(meta));
    CHECK_OK(fulmen_model_holds_meta(meta, &holds));
    CHECK(!holds && !on_meta(meta, "3.weight"));
    CHECK(fixture_max_diff(eager, meta) == 0.0);
    CHECK_OK(fulmen_model_materialize(meta)); /* nothing left to do */
    fulmen_model_free(eager);
    fulmen_model_free(meta);
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(*(fulmen_model **)ud, batch, out);
}

/* Two epochs of SGD on the blobs; the model's handle stays the caller's. */
static void fit(fulmen_model **model) {
    fulmen_dataset *ds = fixture_blobs(16, 3, 2.0f);
    fulmen_loader *l = fixture_loader(ds, 4, false, 0);
    fulmen_lightning_module *m = fixture_module(*model, model, training_step, NULL);
    fulmen_trainer *t = fixture_trainer(NULL, 2);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
}

static void test_fit_equals_the_eager_build(void) {
    CHECK_OK(fulmen_manual_seed(4));
    fulmen_model *eager = build();
    fit(&eager);
    CHECK_OK(fulmen_manual_seed(4));
    fulmen_model *meta = built_on_meta();
    fit(&meta);
    bool holds = true;
    CHECK_OK(fulmen_model_holds_meta(meta, &holds));
    CHECK(!holds);
    CHECK(fixture_max_diff(eager, meta) == 0.0);
    fulmen_model_free(eager);
    fulmen_model_free(meta);
}

static void test_refusals(void) {
    CHECK_ERR(fulmen_meta_init_end(), FULMEN_CODE_INVALID_STATE, "no meta-init scope");
    /* Moved to the meta device: nothing recorded to make values from. */
    fulmen_model *m = fixture_mlp(3, 0);
    CHECK_OK(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_META, 0));
    CHECK_ERR(fulmen_model_materialize(m), FULMEN_CODE_INVALID_STATE, "no recorded values");
    /* Given whole values, a parameter can be materialized. */
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "0.weight", &w));
    CHECK_ERR(fulmen_tensor_mul_scalar_(w, 2.0), FULMEN_CODE_INVALID_STATE, "no values to change");
    CHECK_OK(fulmen_tensor_fill_(w, 0.25));
    fulmen_tensor_free(w);
    CHECK_ERR(fulmen_model_materialize(m), FULMEN_CODE_INVALID_STATE, "0.bias");
    CHECK_ERR(fulmen_model_materialize(NULL), FULMEN_CODE_NULL_ARGUMENT, "model");
    bool holds = false;
    CHECK_ERR(fulmen_model_holds_meta(m, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_OK(fulmen_model_holds_meta(m, &holds));
    CHECK(holds);
    /* A meta tensor has no values to read or save: nothing is written. */
    char dir[] = "/tmp/fulmen-test-meta-init-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    CHECK_ERR(fulmen_model_save(m, path), FULMEN_CODE_INVALID_STATE, "materialize");
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/w.pt", dir);
    CHECK_ERR(fulmen_model_save(m, path), FULMEN_CODE_INVALID_STATE, "materialize");
    CHECK(access(path, F_OK) != 0);
    CHECK(rmdir(dir) == 0); /* no temporary file left either */
    float out[3];
    CHECK_OK(fulmen_model_state_dict_get(m, "0.bias", &w));
    CHECK_ERR(fulmen_tensor_copy_to(w, FULMEN_DTYPE_F32, out, sizeof out), FULMEN_CODE_INVALID_STATE, "meta");
    fulmen_tensor_free(w);
    fulmen_model_free(m);
}

int main(void) {
    test_materialized_values();
    test_fit_equals_the_eager_build();
    test_refusals();
    return check_finish("test_meta_init");
}

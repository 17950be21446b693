/*
 * Pieces for host-written loops (Lightning Fabric's): an autocast scope
 * (a matmul inside runs in bf16 on the CPU, outside in float32; scopes
 * exit innermost first) and a GradScaler handle (scale multiplies, an inf
 * gradient skips the optimizer step and halves the scale, growth after
 * growth_interval clean steps, state round trip).
 */
#include "check.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static fulmen_tensor *tensor2(float a, float b, bool requires_grad) {
    const float data[2] = {a, b};
    const int64_t shape[1] = {2};
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_from_data(data, sizeof data, FULMEN_DTYPE_F32, shape, 1, &t));
    if (requires_grad) CHECK_OK(fulmen_tensor_set_requires_grad(t, true));
    return t;
}

static int32_t matmul_dtype(const fulmen_tensor *a) {
    fulmen_tensor *y = NULL;
    int32_t dtype = -1;
    CHECK_OK(fulmen_tensor_matmul(a, a, &y));
    CHECK_OK(fulmen_tensor_dtype(y, &dtype));
    fulmen_tensor_free(y);
    return dtype;
}

static void test_autocast_scope(void) {
    size_t live = fulmen_live_handles();
    const float data[4] = {1, 2, 3, 4};
    const int64_t shape[2] = {2, 2};
    fulmen_tensor *a = NULL;
    CHECK_OK(fulmen_tensor_from_data(data, sizeof data, FULMEN_DTYPE_F32, shape, 2, &a));
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_F32);

    fulmen_autocast_scope *outer = NULL, *inner = NULL;
    CHECK_OK(fulmen_autocast_enter(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_BF16, &outer));
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_BF16);
    CHECK_OK(fulmen_autocast_enter(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_F16, &inner));
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_F16);
    /* the outer scope cannot exit while the inner one is open */
    CHECK_ERR(fulmen_autocast_exit(outer), FULMEN_CODE_INVALID_STATE, "innermost");
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_F16);
    CHECK_OK(fulmen_autocast_exit(inner));
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_BF16);
    CHECK_OK(fulmen_autocast_exit(outer));
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_F32);
    /* an exited scope is gone */
    CHECK_ERR(fulmen_autocast_exit(outer), FULMEN_CODE_INVALID_HANDLE, "");

    fulmen_autocast_scope *bad = NULL;
    CHECK_ERR(fulmen_autocast_enter(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_F32, &bad), FULMEN_CODE_DTYPE_MISMATCH,
              "bfloat16");
    CHECK(bad == NULL);
    CHECK_ERR(fulmen_autocast_enter(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_BF16, NULL), FULMEN_CODE_NULL_ARGUMENT,
              "out_scope");
    CHECK(matmul_dtype(a) == FULMEN_DTYPE_F32);
    fulmen_tensor_free(a);
    CHECK(fulmen_live_handles() == live);
}

/* Backward of scaler.scale(sum(p * c)): p's gradient is c * scale. */
static void backward_scaled(fulmen_grad_scaler *s, fulmen_tensor *p, float c0, float c1, double *loss_out) {
    fulmen_tensor *c = tensor2(c0, c1, false), *pc = NULL, *loss = NULL, *scaled = NULL;
    CHECK_OK(fulmen_tensor_mul(p, c, &pc));
    CHECK_OK(fulmen_tensor_sum(pc, &loss));
    CHECK_OK(fulmen_grad_scaler_scale(s, loss, &scaled));
    if (loss_out != NULL) CHECK_OK(fulmen_tensor_item(scaled, loss_out));
    CHECK_OK(fulmen_tensor_backward(scaled));
    fulmen_tensor_free(scaled);
    fulmen_tensor_free(loss);
    fulmen_tensor_free(pc);
    fulmen_tensor_free(c);
}

static void values(const fulmen_tensor *t, float out[2]) {
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, out, 2 * sizeof(float)));
}

static double scale_of(const fulmen_grad_scaler *s) {
    double v = 0;
    CHECK_OK(fulmen_grad_scaler_get_scale(s, &v));
    return v;
}

/* The scaler's iteration with SGD; `fused`: fused updates, which take the
 * inf check on the device (the step skipped there), as torch's. */
static void test_grad_scaler(bool fused) {
    size_t live = fulmen_live_handles();
    fulmen_grad_scaler *s = NULL;
    CHECK_ERR(fulmen_grad_scaler_new(8.0, 1.0, 0.5, 2, &s), FULMEN_CODE_INVALID_ARGUMENT, "growth_factor");
    CHECK_OK(fulmen_grad_scaler_new(8.0, 2.0, 0.5, 2, &s));
    fulmen_tensor *p = tensor2(1, 1, true);
    const fulmen_tensor *params[1] = {p};
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, params, 1, &o, &opt));
    if (fused) CHECK_OK(fulmen_optimizer_set_fused(opt, true));
    CHECK_ERR(fulmen_grad_scaler_update(s), FULMEN_CODE_INVALID_STATE, "no inf checks");

    /* clean step: the loss is scaled by 8, the gradient unscaled, p stepped */
    double scaled = 0;
    bool found_inf = true, skipped = true;
    backward_scaled(s, p, 1, 2, &scaled);
    CHECK_NEAR(scaled, 24.0, 1e-6);
    CHECK_OK(fulmen_grad_scaler_unscale(s, opt, &found_inf));
    CHECK(!found_inf);
    CHECK_ERR(fulmen_grad_scaler_unscale(s, opt, NULL), FULMEN_CODE_INVALID_STATE, "already");
    CHECK_OK(fulmen_grad_scaler_step(s, opt, &skipped));
    CHECK(!skipped);
    CHECK_ERR(fulmen_grad_scaler_step(s, opt, NULL), FULMEN_CODE_INVALID_STATE, "already");
    CHECK_OK(fulmen_grad_scaler_update(s));
    float v[2];
    values(p, v);
    CHECK_NEAR(v[0], 0.9, 1e-6);
    CHECK_NEAR(v[1], 0.8, 1e-6);
    CHECK(scale_of(s) == 8.0);

    /* an inf gradient: the step is skipped and the scale halves */
    CHECK_OK(fulmen_optimizer_zero_grad(opt));
    backward_scaled(s, p, INFINITY, 1, NULL);
    CHECK_OK(fulmen_grad_scaler_step(s, opt, &skipped));
    CHECK(skipped);
    CHECK_OK(fulmen_grad_scaler_update(s));
    values(p, v);
    CHECK_NEAR(v[0], 0.9, 1e-6);
    CHECK_NEAR(v[1], 0.8, 1e-6);
    CHECK(scale_of(s) == 4.0);

    /* growth_interval (2) clean steps double the scale */
    for (int i = 0; i < 2; i++) {
        CHECK(scale_of(s) == 4.0);
        CHECK_OK(fulmen_optimizer_zero_grad(opt));
        backward_scaled(s, p, 1, 1, NULL);
        CHECK_OK(fulmen_grad_scaler_step(s, opt, &skipped));
        CHECK(!skipped);
        CHECK_OK(fulmen_grad_scaler_update(s));
    }
    CHECK(scale_of(s) == 8.0);

    /* state round trip into a fresh scaler; bad states change nothing */
    char state[512];
    size_t len = 0;
    CHECK_OK(fulmen_grad_scaler_state_save(s, state, sizeof state, &len));
    CHECK(len == strlen(state) && strstr(state, "\"scale\"") != NULL);
    char tiny[4];
    CHECK_ERR(fulmen_grad_scaler_state_save(s, tiny, sizeof tiny, &len), FULMEN_CODE_OUT_OF_RANGE, "");
    fulmen_grad_scaler *t = NULL;
    CHECK_OK(fulmen_grad_scaler_new(65536.0, 2.0, 0.5, 2000, &t));
    CHECK_ERR(fulmen_grad_scaler_state_load(t, "{\"scale\": 2.0}"), FULMEN_CODE_FORMAT, "growth_factor");
    CHECK_ERR(fulmen_grad_scaler_state_load(t, "[1, 2]"), FULMEN_CODE_FORMAT, "JSON");
    CHECK(scale_of(t) == 65536.0);
    CHECK_OK(fulmen_grad_scaler_state_load(t, state));
    CHECK(scale_of(t) == 8.0);
    char again[512];
    CHECK_OK(fulmen_grad_scaler_state_save(t, again, sizeof again, &len));
    CHECK(strcmp(state, again) == 0);

    fulmen_grad_scaler_free(t);
    fulmen_optimizer_free(opt);
    fulmen_tensor_free(p);
    fulmen_grad_scaler_free(s);
    CHECK(fulmen_live_handles() == live);
}

int main(void) {
    test_autocast_scope();
    test_grad_scaler(false);
    test_grad_scaler(true);
    return check_finish("test_fabric_pieces");
}

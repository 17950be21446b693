/*
 * In-place changes and nn.init on a model's own parameters from C: the
 * same seed gives PyTorch 2.13's values (weighted sums taken with torch:
 * torch.manual_seed(s); nn.init.<f>_(torch.empty(shape), ...)); an EMA
 * update, host data, clamping and pruning masks land in the model; the
 * parameters stay trainable leaves; bad arguments give clear errors.
 */
#include "check.h"
#include "tensor_check.h"

static fulmen_model *linear(int64_t in, int64_t out) {
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(in, out, true, &m));
    return m;
}

static fulmen_tensor *param(const fulmen_model *m, const char *name) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
    return t;
}

static fulmen_tensor *empty(const int64_t *shape, size_t nd, int32_t dtype) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_zeros(shape, nd, dtype, &t));
    return t;
}

/* The init family draws what PyTorch draws after the same seed. */
static void test_same_values_as_pytorch(void) {
    fulmen_model *m = linear(6, 4);
    fulmen_tensor *w = param(m, "weight");
    CHECK_OK(fulmen_manual_seed(0));
    CHECK_OK(fulmen_init_xavier_uniform_(w, 1.5));
    EXPECT_WS(w, 0.3169561307877302);
    fulmen_tensor *y = NULL, *x = NULL;
    const int64_t xs[2] = {1, 6};
    CHECK_OK(fulmen_tensor_ones(xs, 2, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_model_forward(m, x, &y)); /* the model sees the new weights */
    bool rg = false;
    CHECK_OK(fulmen_tensor_requires_grad(w, &rg));
    CHECK(rg);

    const int64_t s3[3] = {3, 5, 2}, s4[4] = {8, 3, 3, 3}, s2[2] = {5, 7}, s1[1] = {1000}, sw[2] = {3, 7},
                  st[3] = {6, 2, 1}, s10[1] = {10}, s300[1] = {300};
    fulmen_tensor *t = empty(s3, 3, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(1));
    CHECK_OK(fulmen_init_xavier_normal_(t, 0.5));
    EXPECT_WS(t, 0.34260412541528545);
    fulmen_tensor_free(t);
    t = empty(s4, 4, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(2));
    CHECK_OK(fulmen_init_kaiming_uniform_(t, 0.1, FULMEN_FAN_MODE_FAN_OUT, "leaky_relu"));
    EXPECT_WS(t, -2.0887617610418667);
    fulmen_tensor_free(t);
    t = empty(s2, 2, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(3));
    CHECK_OK(fulmen_init_kaiming_normal_(t, 0, FULMEN_FAN_MODE_FAN_IN, "relu"));
    EXPECT_WS(t, 0.614377451900925);
    fulmen_tensor_free(t);
    t = empty(s1, 1, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(4));
    CHECK_OK(fulmen_init_trunc_normal_(t, 0.5, 2.0, -1.0, 3.0));
    EXPECT_WS(t, 433.26829408571126);
    fulmen_tensor_free(t);
    t = empty(s300, 1, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(9));
    CHECK_OK(fulmen_init_trunc_normal_(t, 0.0, 1.0, 1.0, 3.0)); /* the tail: uniform proposals */
    EXPECT_WS(t, 230.84013402263324);
    fulmen_tensor_free(t);
    t = empty(sw, 2, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(5));
    CHECK_OK(fulmen_init_orthogonal_(t, 2.0));
    EXPECT_WS(t, -0.19455409049987793);
    fulmen_tensor_free(t);
    t = empty(st, 3, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(6));
    CHECK_OK(fulmen_init_orthogonal_(t, 1.0));
    EXPECT_WS(t, 0.28441728837788105);
    fulmen_tensor_free(t);
    t = empty(s10, 1, FULMEN_DTYPE_F64);
    CHECK_OK(fulmen_manual_seed(7));
    CHECK_OK(fulmen_tensor_uniform_(t, -2, 3));
    EXPECT_WS(t, 6.243837720587275);
    fulmen_tensor_free(t);
    t = empty(s10, 1, FULMEN_DTYPE_F32);
    CHECK_OK(fulmen_manual_seed(8));
    CHECK_OK(fulmen_tensor_normal_(t, 1, 0.5));
    EXPECT_WS(t, 3.848563453555107);
    fulmen_tensor_free(t);
    double g = 0;
    CHECK_OK(fulmen_init_calculate_gain("leaky_relu", NAN, &g));
    CHECK(fabs(g - 1.4141428569978354) < 1e-12);
    CHECK_OK(fulmen_init_calculate_gain("tanh", NAN, &g));
    CHECK(fabs(g - 5.0 / 3.0) < 1e-12);
    CHECK_ERR(fulmen_init_calculate_gain("swish", NAN, &g), FULMEN_CODE_INVALID_ARGUMENT, "swish");
    fulmen_tensor *all[] = {w, x, y};
    free_all(all, 3);
    fulmen_model_free(m);
}

/* EMA, host data, clamping, masks and fills on a model's parameters. */
static void test_inplace_updates(void) {
    fulmen_model *m = linear(3, 2), *ema_model = linear(3, 2);
    fulmen_tensor *w = param(m, "weight"), *b = param(m, "bias"), *ema = param(ema_model, "weight");
    const float host[6] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(fulmen_tensor_copy_from_host(w, host, sizeof host, FULMEN_DTYPE_F32));
    const double ints[6] = {1, 2, 3, 4, 5, 6};
    EXPECT_VALUES(w, ints, 6, 0);
    const int64_t longs[6] = {6, 5, 4, 3, 2, 1}; /* any host dtype, converted */
    CHECK_OK(fulmen_tensor_copy_from_host(ema, longs, sizeof longs, FULMEN_DTYPE_I64));
    /* ema = 0.9 * ema + 0.1 * w */
    CHECK_OK(fulmen_tensor_mul_scalar_(ema, 0.9));
    CHECK_OK(fulmen_tensor_add_(ema, w, 0.1));
    const double want_ema[6] = {5.5, 4.7, 3.9, 3.1, 2.3, 1.5};
    EXPECT_VALUES(ema, want_ema, 6, 1e-6);
    /* copy_ back (SWA / EMA swap) and a pruning mask */
    CHECK_OK(fulmen_tensor_copy_(w, ema));
    fulmen_tensor *mask = NULL;
    const float keep[3] = {1, 0, 1};
    const int64_t ms[1] = {3};
    CHECK_OK(fulmen_tensor_from_data(keep, sizeof keep, FULMEN_DTYPE_F32, ms, 1, &mask));
    CHECK_OK(fulmen_tensor_mul_(w, mask)); /* broadcast over rows */
    const double pruned[6] = {5.5, 0, 3.9, 3.1, 0, 1.5};
    EXPECT_VALUES(w, pruned, 6, 1e-6);
    CHECK_OK(fulmen_tensor_clamp_(w, NAN, 3.5));
    const double clamped[6] = {3.5, 0, 3.5, 3.1, 0, 1.5};
    EXPECT_VALUES(w, clamped, 6, 1e-6);
    CHECK_OK(fulmen_tensor_add_scalar_(w, 1));
    CHECK_OK(fulmen_tensor_clamp_(w, 2, NAN));
    const double raised[6] = {4.5, 2, 4.5, 4.1, 2, 2.5};
    EXPECT_VALUES(w, raised, 6, 1e-6);
    CHECK_OK(fulmen_tensor_fill_(b, 0.25));
    const double quarter[2] = {0.25, 0.25};
    EXPECT_VALUES(b, quarter, 2, 0);
    CHECK_OK(fulmen_tensor_zero_(b));
    /* still trainable: a backward pass reaches the changed parameters */
    fulmen_tensor *x = NULL, *y = NULL, *s = NULL, *gw = NULL;
    const int64_t xs[2] = {2, 3};
    CHECK_OK(fulmen_tensor_ones(xs, 2, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_model_forward(m, x, &y));
    CHECK_OK(fulmen_tensor_sum(y, &s));
    CHECK_OK(fulmen_tensor_backward(s));
    CHECK_OK(fulmen_tensor_grad(w, &gw));
    const double twos[6] = {2, 2, 2, 2, 2, 2};
    EXPECT_VALUES(gw, twos, 6, 0);
    /* errors */
    CHECK_ERR(fulmen_tensor_copy_from_host(w, host, 5 * sizeof(float), FULMEN_DTYPE_F32), FULMEN_CODE_SHAPE_MISMATCH,
              "bytes");
    CHECK_ERR(fulmen_tensor_copy_from_host(w, NULL, sizeof host, FULMEN_DTYPE_F32), FULMEN_CODE_NULL_ARGUMENT, "data");
    CHECK_ERR(fulmen_tensor_copy_from_host(w, host, sizeof host, 99), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_clamp_(w, 2, 1), FULMEN_CODE_INVALID_ARGUMENT, "min");
    CHECK_ERR(fulmen_tensor_uniform_(w, 1, 0), FULMEN_CODE_INVALID_ARGUMENT, "low");
    CHECK_ERR(fulmen_tensor_normal_(w, 0, -1), FULMEN_CODE_INVALID_ARGUMENT, "std");
    CHECK_ERR(fulmen_tensor_uniform_(w, 0, INFINITY), FULMEN_CODE_INVALID_ARGUMENT, "finite");
    fulmen_tensor *idx = NULL;
    const int64_t iv[2] = {0, 1}, is[1] = {2};
    CHECK_OK(fulmen_tensor_from_data(iv, sizeof iv, FULMEN_DTYPE_I64, is, 1, &idx));
    CHECK_ERR(fulmen_tensor_normal_(idx, 0, 1), FULMEN_CODE_DTYPE_MISMATCH, "Int64");
    CHECK_ERR(fulmen_init_orthogonal_(idx, 1), FULMEN_CODE_SHAPE_MISMATCH, "dimensions");
    CHECK_ERR(fulmen_init_xavier_uniform_(b, 1), FULMEN_CODE_SHAPE_MISMATCH, "fan");
    CHECK_ERR(fulmen_init_kaiming_uniform_(w, 0, 7, "relu"), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_fan_mode");
    CHECK_ERR(fulmen_init_kaiming_uniform_(w, 0, FULMEN_FAN_MODE_FAN_IN, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_init_trunc_normal_(w, 0, 1, 3, 2), FULMEN_CODE_INVALID_ARGUMENT, "a < b");
    /* [2] does not broadcast to [2, 3] */
    CHECK_ERR(fulmen_tensor_add_(w, idx, 1), FULMEN_CODE_SHAPE_MISMATCH, "must match the size");
    CHECK_ERR(fulmen_tensor_fill_(NULL, 1), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_tensor *all[] = {w, b, ema, mask, x, y, s, gw, idx};
    free_all(all, sizeof all / sizeof all[0]);
    fulmen_model_free(m);
    fulmen_model_free(ema_model);
}

int main(void) {
    test_same_values_as_pytorch();
    test_inplace_updates();
    return check_finish("test_init");
}

/*
 * Tests of the layers added for transformers, RNN heads and modern CNNs:
 * Conv1d, Dropout2d, GroupNorm, RMSNorm, PReLU, Unflatten, Embedding with
 * padding_idx and the activation kinds from Mish on. Values, state_dict names and default init are PyTorch 2.13's
 * (computed with torch and written here); bad arguments give clear errors.
 */
#include "check.h"
#include "tensor_check.h"

#include <stdint.h>
#include <string.h>

/* Runs a model forward (training mode as set), failing the check on error. */
static fulmen_tensor *run(const fulmen_model *m, const fulmen_tensor *x) {
    fulmen_tensor *y = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y));
    return y;
}

/* Checks that state_dict entry `i` is named `want`. */
static void expect_name(const fulmen_model *m, size_t i, const char *want) {
    char buf[64] = "";
    size_t len = 0;
    CHECK_OK(fulmen_model_state_dict_name(m, i, buf, sizeof buf, &len));
    if (strcmp(buf, want) != 0) {
        check_failed++;
        fprintf(stderr, "  state_dict[%zu] is \"%s\", want \"%s\"\n", i, buf, want);
    }
}

static size_t sd_len(const fulmen_model *m) {
    size_t n = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &n));
    return n;
}

static void test_new_activations(void) {
    const float v[3] = {-1.0f, 0.5f, 2.0f};
    const int64_t d[2] = {1, 3};
    fulmen_tensor *x = check_f32(v, 3, d, 2);
    static const struct {
        int32_t kind;
        double param;
        double want[3];
    } cases[] = {
        {FULMEN_ACTIVATION_MISH, 0, {-0.3034014, 0.3752452, 1.943959}},
        {FULMEN_ACTIVATION_HARDSWISH, 0, {-0.3333333, 0.2916667, 1.6666666}},
        {FULMEN_ACTIVATION_HARDSIGMOID, 0, {0.3333333, 0.5833333, 0.8333333}},
        {FULMEN_ACTIVATION_RELU6, 0, {0.0, 0.5, 2.0}},
        {FULMEN_ACTIVATION_GELU_TANH, 0, {-0.158808, 0.345714, 1.9545977}},
        {FULMEN_ACTIVATION_SELU, 0, {-1.1113307, 0.5253505, 2.101402}},
        {FULMEN_ACTIVATION_SOFTPLUS, 2.0, {0.063464, 0.6566308, 2.0090749}},
        {FULMEN_ACTIVATION_LOG_SIGMOID, 0, {-1.3132617, -0.474077, -0.126928}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fulmen_model *m = NULL;
        CHECK_OK(fulmen_model_activation_new(cases[i].kind, cases[i].param, &m));
        if (m == NULL) continue;
        CHECK(sd_len(m) == 0);
        fulmen_tensor *y = run(m, x);
        EXPECT_VALUES(y, cases[i].want, 3, 1e-6);
        fulmen_tensor_free(y);
        fulmen_model_free(m);
    }
    fulmen_model *bad = NULL;
    CHECK_ERR(fulmen_model_activation_new(FULMEN_ACTIVATION_SOFTPLUS, INFINITY, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "beta");
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
}

static void test_group_norm(void) {
    fulmen_model *g = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_group_norm_new(2, 4, 1e-5, true, &g));
    CHECK(sd_len(g) == 2);
    expect_name(g, 0, "weight");
    expect_name(g, 1, "bias");
    /* x = sin(arange(24).reshape(2, 4, 3)) */
    fulmen_tensor *ar = NULL, *r = NULL, *x = NULL;
    const int64_t d243[3] = {2, 4, 3};
    CHECK_OK(fulmen_tensor_arange(0, 24, 1, FULMEN_DTYPE_F32, &ar));
    CHECK_OK(fulmen_tensor_reshape(ar, d243, 3, &r));
    CHECK_OK(fulmen_tensor_sin(r, &x));
    fulmen_tensor *y = run(g, x), *head = NULL;
    CHECK_OK(fulmen_tensor_narrow(y, 1, 0, 2, &head));
    const double want[6] = {-0.041234, 1.140545, 1.235802, 0.156958, -1.104103, -1.387967};
    fulmen_tensor *first = NULL, *flat = NULL;
    CHECK_OK(fulmen_tensor_narrow(head, 0, 0, 1, &first));
    CHECK_OK(fulmen_tensor_flatten(first, 0, -1, &flat));
    EXPECT_VALUES(flat, want, 6, 1e-5);
    fulmen_tensor *wrong = NULL, *out = NULL;
    const int64_t d34[2] = {3, 4};
    CHECK_OK(fulmen_tensor_zeros(d34, 2, FULMEN_DTYPE_F32, &wrong));
    CHECK_OK(fulmen_model_forward(g, wrong, &out)); /* (N=3, C=4) is valid */
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_model_forward(g, ar, &out), FULMEN_CODE_SHAPE_MISMATCH, "group_norm");
    CHECK_ERR(fulmen_model_group_norm_new(3, 4, 1e-5, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, "multiple");
    CHECK_ERR(fulmen_model_group_norm_new(0, 4, 1e-5, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_group_norm_new(2, 4, NAN, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_model *plain = NULL;
    CHECK_OK(fulmen_model_group_norm_new(1, 4, 1e-5, false, &plain));
    CHECK(sd_len(plain) == 0);
    fulmen_model_free(plain);
    fulmen_tensor *all[] = {ar, r, x, y, head, first, flat, wrong};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(g);
}

static void test_rms_norm(void) {
    const int64_t shape[1] = {3}, zero[1] = {0};
    fulmen_model *m = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_rms_norm_new(shape, 1, 0.0, true, &m));
    CHECK(sd_len(m) == 1);
    expect_name(m, 0, "weight");
    const float v[6] = {1, 2, 3, -4, 0, 0.5f};
    const int64_t d[2] = {2, 3};
    fulmen_tensor *x = check_f32(v, 6, d, 2), *y = run(m, x);
    const double want[6] = {0.4629101, 0.9258201, 1.3887302, -1.7186757, 0.0, 0.2148345};
    EXPECT_VALUES(y, want, 6, 1e-6);
    CHECK_ERR(fulmen_model_rms_norm_new(zero, 1, 0.0, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_rms_norm_new(shape, 1, -1.0, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_rms_norm_new(NULL, 1, 0.0, true, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(m);
}

static void test_prelu_unflatten(void) {
    fulmen_model *p = NULL, *u = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_prelu_new(2, 0.25, &p));
    expect_name(p, 0, "weight");
    const float v[4] = {-1, 2, -3, -4};
    const int64_t d[2] = {2, 2};
    fulmen_tensor *x = check_f32(v, 4, d, 2), *y = run(p, x);
    const double want[4] = {-0.25, 2.0, -0.75, -1.0};
    EXPECT_VALUES(y, want, 4, 1e-7);
    CHECK_ERR(fulmen_model_prelu_new(0, 0.25, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_prelu_new(1, NAN, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    const int64_t sizes[2] = {2, -1}, two_inferred[2] = {-1, -1};
    CHECK_OK(fulmen_model_unflatten_new(1, sizes, 2, &u));
    fulmen_tensor *z = NULL, *w = NULL;
    const int64_t d26[2] = {2, 6}, d223[3] = {2, 2, 3};
    CHECK_OK(fulmen_tensor_zeros(d26, 2, FULMEN_DTYPE_F32, &z));
    w = run(u, z);
    EXPECT_SHAPE(w, d223, 3);
    fulmen_tensor *out = NULL, *odd = NULL;
    const int64_t d23[2] = {2, 3};
    CHECK_OK(fulmen_tensor_zeros(d23, 2, FULMEN_DTYPE_F32, &odd));
    CHECK_ERR(fulmen_model_forward(u, odd, &out), FULMEN_CODE_SHAPE_MISMATCH, "unflatten");
    fulmen_tensor_free(odd);
    CHECK_ERR(fulmen_model_unflatten_new(1, two_inferred, 2, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_unflatten_new(1, sizes, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor *all[] = {x, y, z, w};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(p);
    fulmen_model_free(u);
}

/* nn.Embedding(4, 2, padding_idx=-1) after torch.manual_seed(7): the same
 * draws, the last row zero, and no gradient ever reaches it. */
static void test_padded_embedding(void) {
    fulmen_model *e = NULL, *bad = NULL;
    CHECK_OK(fulmen_manual_seed(7));
    CHECK_OK(fulmen_model_embedding_padded_new(4, 2, -1, &e));
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(e, "weight", &w));
    const double want[8] = {-0.146795, 0.786141, 0.946822, -1.114344, 1.69079, -0.894828, 0.0, 0.0};
    EXPECT_VALUES(w, want, 8, 1e-6);
    const int64_t ids[3] = {3, 0, 3}, d3[1] = {3};
    fulmen_tensor *x = NULL, *y = NULL, *s = NULL, *g = NULL, *row = NULL;
    CHECK_OK(fulmen_tensor_from_data(ids, sizeof ids, FULMEN_DTYPE_I64, d3, 1, &x));
    y = run(e, x);
    CHECK_OK(fulmen_tensor_sum(y, &s));
    CHECK_OK(fulmen_tensor_backward(s));
    CHECK_OK(fulmen_tensor_grad(w, &g));
    CHECK_OK(fulmen_tensor_narrow(g, 0, 3, 1, &row));
    const double zero[2] = {0, 0};
    EXPECT_VALUES(row, zero, 2, 0);
    CHECK_ERR(fulmen_model_embedding_padded_new(4, 2, 4, &bad), FULMEN_CODE_OUT_OF_RANGE, "padding_idx");
    CHECK_ERR(fulmen_model_embedding_padded_new(4, 2, -5, &bad), FULMEN_CODE_OUT_OF_RANGE, "padding_idx");
    CHECK(bad == NULL);
    fulmen_tensor *all[] = {w, x, y, s, g, row};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(e);
}

/* nn.Conv1d(2, 3, 3, stride=2, padding=1) after torch.manual_seed(3):
 * the same weights and outputs as PyTorch. */
static void test_conv1d(void) {
    fulmen_model *c = NULL, *bad = NULL;
    CHECK_OK(fulmen_manual_seed(3));
    CHECK_OK(fulmen_model_conv1d_new(2, 3, 3, 2, 1, 1, 1, true, &c));
    expect_name(c, 0, "weight");
    expect_name(c, 1, "bias");
    fulmen_tensor *ar = NULL, *r = NULL, *x = NULL, *y = NULL, *out = NULL;
    const int64_t d125[3] = {1, 2, 5};
    CHECK_OK(fulmen_tensor_arange(0, 10, 1, FULMEN_DTYPE_F32, &ar));
    CHECK_OK(fulmen_tensor_reshape(ar, d125, 3, &r));
    CHECK_OK(fulmen_tensor_mul_scalar(r, 0.1, &x));
    y = run(c, x);
    const int64_t d133[3] = {1, 3, 3};
    EXPECT_SHAPE(y, d133, 3);
    const double want[9] = {0.039012, -0.409059, -0.296517, 0.440507, 0.74884, 0.669616, 0.172314, 0.055321, -0.261753};
    EXPECT_VALUES(y, want, 9, 1e-5);
    CHECK_ERR(fulmen_model_forward(c, ar, &out), FULMEN_CODE_SHAPE_MISMATCH, "conv1d");
    CHECK_ERR(fulmen_model_conv1d_new(2, 3, 0, 1, 0, 1, 1, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, "conv1d");
    CHECK_ERR(fulmen_model_conv1d_new(2, 3, 3, 1, 0, 1, 2, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, "divisible");
    CHECK_ERR(fulmen_model_conv1d_new(2, 3, INT64_MAX, 1, 0, 1, 1, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(bad == NULL && out == NULL);
    fulmen_tensor *all[] = {ar, r, x, y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(c);
}

/* nn.Dropout2d(0.5) after torch.manual_seed(5) on ones(2, 3, 1, 2): the
 * same channels dropped; the identity in eval mode; other ranks refused. */
static void test_dropout2d(void) {
    fulmen_model *d = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_dropout2d_new(0.5, &d));
    fulmen_tensor *x = NULL, *y = NULL, *flat = NULL, *out = NULL;
    const int64_t d2312[4] = {2, 3, 1, 2}, d23[2] = {2, 3};
    CHECK_OK(fulmen_tensor_ones(d2312, 4, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_manual_seed(5));
    y = run(d, x);
    const double want[12] = {0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0};
    EXPECT_VALUES(y, want, 12, 0);
    CHECK_OK(fulmen_model_set_training(d, false));
    fulmen_tensor *same = run(d, x);
    const double ones[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_VALUES(same, ones, 12, 0);
    CHECK_OK(fulmen_tensor_ones(d23, 2, FULMEN_DTYPE_F32, &flat));
    CHECK_ERR(fulmen_model_forward(d, flat, &out), FULMEN_CODE_SHAPE_MISMATCH, "dropout2d");
    CHECK_ERR(fulmen_model_dropout2d_new(1.5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(bad == NULL && out == NULL);
    fulmen_tensor *all[] = {x, y, same, flat};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(d);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(0));
    test_new_activations();
    test_group_norm();
    test_rms_norm();
    test_prelu_unflatten();
    test_padded_embedding();
    test_conv1d();
    test_dropout2d();
    return check_finish("test_layers");
}

/*
 * Tests of the layers for modern CNNs: Conv3d, ConvTranspose1d/2d,
 * InstanceNorm1d/2d, the adaptive pools, Upsample and
 * fulmen_tensor_interpolate. state_dict names, shapes and results are
 * PyTorch 2.13's after the same torch.manual_seed (computed with torch and
 * written here, as a weighted sum per tensor: sum(v[i] * i) / n); bad
 * arguments give clear errors.
 */
#include "check.h"
#include "tensor_check.h"

#include <stdint.h>

static fulmen_tensor *run(const fulmen_model *m, const fulmen_tensor *x) {
    fulmen_tensor *y = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y));
    return y;
}

/* nn.Conv3d(2, 3, 2) after manual_seed(6). */
static void test_conv3d(void) {
    fulmen_model *c = NULL, *bad = NULL;
    fulmen_conv3d_options o = fulmen_conv3d_options_default(2);
    CHECK_OK(fulmen_manual_seed(6));
    CHECK_OK(fulmen_model_conv3d_new(2, 3, &o, &c));
    static const char *const names[] = {"weight", "bias"};
    expect_names(c, names, 2);
    const int64_t d[5] = {1, 2, 3, 3, 3}, want[5] = {1, 3, 2, 2, 2};
    fulmen_tensor *x = wave(d, 5, 1.0f), *y = run(c, x), *out = NULL;
    EXPECT_SHAPE(y, want, 5);
    EXPECT_WS(y, -1.163043720337252);
    CHECK_ERR(fulmen_model_forward(c, y, &out), FULMEN_CODE_SHAPE_MISMATCH, "conv3d");
    CHECK_ERR(fulmen_model_conv3d_new(2, 3, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, "options");
    o.groups = 2;
    CHECK_ERR(fulmen_model_conv3d_new(2, 3, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "divisible");
    CHECK(bad == NULL && out == NULL);
    fulmen_tensor *all[] = {x, y};
    free_all(all, 2);
    fulmen_model_free(c);
}

/* nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1) after
 * manual_seed(7); nn.ConvTranspose1d(2, 4, 3, stride=2, groups=2) after
 * manual_seed(8) on unbatched input. */
static void test_conv_transpose(void) {
    fulmen_model *c2 = NULL, *c1 = NULL, *bad = NULL;
    fulmen_conv_transpose_options o = fulmen_conv_transpose_options_default(2, 3);
    o.stride[0] = o.stride[1] = 2;
    o.padding[0] = o.padding[1] = 1;
    o.output_padding[0] = o.output_padding[1] = 1;
    CHECK_OK(fulmen_manual_seed(7));
    CHECK_OK(fulmen_model_conv_transpose_new(2, 3, &o, &c2));
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(c2, "weight", &w));
    const int64_t wshape[4] = {2, 3, 3, 3};
    EXPECT_SHAPE(w, wshape, 4);
    const int64_t d[4] = {1, 2, 3, 3}, want[4] = {1, 3, 6, 6};
    fulmen_tensor *x = wave(d, 4, 1.0f), *y = run(c2, x);
    EXPECT_SHAPE(y, want, 4);
    EXPECT_WS(y, -1.434106656113053);

    fulmen_conv_transpose_options o1 = fulmen_conv_transpose_options_default(1, 3);
    o1.stride[0] = 2;
    o1.groups = 2;
    CHECK_OK(fulmen_manual_seed(8));
    CHECK_OK(fulmen_model_conv_transpose_new(2, 4, &o1, &c1));
    const int64_t d1[2] = {2, 5}, want1[2] = {4, 11};
    fulmen_tensor *x1 = wave(d1, 2, 1.0f), *y1 = run(c1, x1);
    EXPECT_SHAPE(y1, want1, 2);
    EXPECT_WS(y1, -0.6573548696257852);

    o.output_padding[0] = 2; /* not smaller than the stride (2) or the dilation (1) */
    CHECK_ERR(fulmen_model_conv_transpose_new(2, 3, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "output_padding");
    o.output_padding[0] = 1;
    o.dims = 3;
    CHECK_ERR(fulmen_model_conv_transpose_new(2, 3, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "dims");
    CHECK(bad == NULL);
    fulmen_tensor *all[] = {w, x, y, x1, y1};
    free_all(all, 5);
    fulmen_model_free(c2);
    fulmen_model_free(c1);
}

/* nn.InstanceNorm2d(3, affine=True, track_running_stats=True) in training
 * then eval mode; nn.InstanceNorm1d(4) on an unbatched (3, 5) input. */
static void test_instance_norm(void) {
    fulmen_model *n2 = NULL, *n1 = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_instance_norm_new(2, 3, 1e-5, 0.1, true, true, &n2));
    static const char *const names[] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    expect_names(n2, names, 5);
    const int64_t d[4] = {2, 3, 4, 4};
    fulmen_tensor *w = wave(d, 4, 2.0f), *x = NULL;
    CHECK_OK(fulmen_tensor_add_scalar(w, 0.5, &x));
    fulmen_tensor *y = run(n2, x), *mean = NULL;
    EXPECT_WS(y, -0.004751620426153143);
    CHECK_OK(fulmen_model_state_dict_get(n2, "running_mean", &mean));
    const double rm[3] = {0.05111227184534073, 0.18220502138137817, 0.04116707295179367};
    EXPECT_VALUES(mean, rm, 3, 1e-6);
    CHECK_OK(fulmen_model_set_training(n2, false));
    fulmen_tensor *ye = run(n2, x);
    EXPECT_WS(ye, 40.158606979763135);

    CHECK_OK(fulmen_model_instance_norm_new(1, 4, 1e-5, 0.1, false, false, &n1));
    const int64_t d1[2] = {3, 5};
    fulmen_tensor *x1 = wave(d1, 2, 1.0f), *y1 = run(n1, x1), *out = NULL;
    EXPECT_SHAPE(y1, d1, 2);
    EXPECT_WS(y1, 1.407006460428238);
    CHECK_ERR(fulmen_model_forward(n2, x1, &out), FULMEN_CODE_SHAPE_MISMATCH, "instance_norm");
    CHECK_ERR(fulmen_model_instance_norm_new(3, 4, 1e-5, 0.1, false, false, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "dims");
    CHECK_ERR(fulmen_model_instance_norm_new(1, 4, 1e-5, 2.0, false, false, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "momentum");
    CHECK(bad == NULL && out == NULL);
    fulmen_tensor *all[] = {w, x, y, mean, ye, x1, y1};
    free_all(all, 7);
    fulmen_model_free(n2);
    fulmen_model_free(n1);
}

/* nn.AdaptiveAvgPool2d((2, None)) and nn.AdaptiveMaxPool1d(3). */
static void test_adaptive_pools(void) {
    fulmen_model *avg = NULL, *max = NULL, *bad = NULL;
    const int64_t keep_w[2] = {2, -1}, three[1] = {3}, zero[1] = {0};
    CHECK_OK(fulmen_model_adaptive_avg_pool_new(keep_w, 2, &avg));
    CHECK_OK(fulmen_model_adaptive_max_pool_new(three, 1, &max));
    const int64_t d[4] = {1, 2, 5, 4}, want[4] = {1, 2, 2, 4}, d1[2] = {2, 7}, want1[2] = {2, 3};
    fulmen_tensor *x = wave(d, 4, 1.0f), *y = run(avg, x), *x1 = wave(d1, 2, 1.0f), *y1 = run(max, x1), *out = NULL;
    EXPECT_SHAPE(y, want, 4);
    EXPECT_WS(y, 2.015426221303642);
    EXPECT_SHAPE(y1, want1, 2);
    const double maxima[6] = {0.19866932928562164, 0.389418363571167, 0.5646424889564514,
                              0.7833269238471985,  0.8912073969841003, 0.9635581970214844};
    EXPECT_VALUES(y1, maxima, 6, 1e-6);
    CHECK_ERR(fulmen_model_forward(max, x, &out), FULMEN_CODE_SHAPE_MISMATCH, "AdaptiveMaxPool1d");
    CHECK_ERR(fulmen_model_adaptive_avg_pool_new(zero, 1, &bad), FULMEN_CODE_INVALID_ARGUMENT, "output_size");
    CHECK_ERR(fulmen_model_adaptive_avg_pool_new(keep_w, 3, &bad), FULMEN_CODE_INVALID_ARGUMENT, "1 or 2");
    CHECK_ERR(fulmen_model_adaptive_max_pool_new(NULL, 1, &bad), FULMEN_CODE_NULL_ARGUMENT, "output_size");
    CHECK(bad == NULL && out == NULL);
    fulmen_tensor *all[] = {x, y, x1, y1};
    free_all(all, 4);
    fulmen_model_free(avg);
    fulmen_model_free(max);
}

/* nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
 * nn.Upsample(size=5), and F.interpolate bicubic by size and trilinear by
 * a scale of 1.5. */
static void test_upsample_and_interpolate(void) {
    fulmen_model *bil = NULL, *near = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_upsample_new(NULL, 0, 2.0, "bilinear", true, &bil));
    const int64_t five[1] = {5};
    CHECK_OK(fulmen_model_upsample_new(five, 1, 0, NULL, false, &near));
    const int64_t d[4] = {1, 1, 2, 3}, want[4] = {1, 1, 4, 6}, d1[3] = {1, 2, 3}, want1[3] = {1, 2, 5};
    fulmen_tensor *x = wave(d, 4, 1.0f), *y = run(bil, x), *x1 = wave(d1, 3, 1.0f), *y1 = run(near, x1);
    EXPECT_SHAPE(y, want, 4);
    EXPECT_WS(y, 3.6381417314211526);
    EXPECT_SHAPE(y1, want1, 3);
    const double nearest[10] = {0.0, 0.0, 0.0998334214091301, 0.0998334214091301, 0.19866932928562164,
                                0.29552021622657776, 0.29552021622657776, 0.389418363571167, 0.389418363571167,
                                0.4794255495071411};
    EXPECT_VALUES(y1, nearest, 10, 1e-6);

    const int64_t d2[4] = {1, 1, 3, 3}, size2[2] = {3, 4}, want2[4] = {1, 1, 3, 4};
    const int64_t d3[5] = {1, 1, 2, 2, 2}, want3[5] = {1, 1, 3, 3, 3};
    fulmen_tensor *x2 = wave(d2, 4, 1.0f), *x3 = wave(d3, 5, 1.0f), *y2 = NULL, *y3 = NULL, *out = NULL;
    CHECK_OK(fulmen_tensor_interpolate(x2, size2, 2, 0, "bicubic", false, &y2));
    EXPECT_SHAPE(y2, want2, 4);
    EXPECT_WS(y2, 2.876813408297797);
    CHECK_OK(fulmen_tensor_interpolate(x3, NULL, 0, 1.5, "trilinear", false, &y3));
    EXPECT_SHAPE(y3, want3, 5);
    EXPECT_WS(y3, 5.668432533327076);

    CHECK_ERR(fulmen_tensor_interpolate(x2, size2, 2, 2.0, "nearest", false, &out), FULMEN_CODE_INVALID_ARGUMENT,
              "either");
    CHECK_ERR(fulmen_tensor_interpolate(x2, NULL, 0, 2.0, "linear", false, &out), FULMEN_CODE_SHAPE_MISMATCH,
              "spatial");
    CHECK_ERR(fulmen_tensor_interpolate(x2, NULL, 0, 2.0, "nearest", true, &out), FULMEN_CODE_INVALID_ARGUMENT,
              "align_corners");
    CHECK_ERR(fulmen_tensor_interpolate(x2, NULL, 0, 2.0, "area", false, &out), FULMEN_CODE_INVALID_ARGUMENT, "mode");
    CHECK_ERR(fulmen_tensor_interpolate(x2, NULL, 0, 1e300, "nearest", false, &out), FULMEN_CODE_SHAPE_MISMATCH,
              "too large");
    CHECK_ERR(fulmen_model_upsample_new(NULL, 0, 0, "nearest", false, &bad), FULMEN_CODE_INVALID_ARGUMENT, "either");
    CHECK_ERR(fulmen_model_upsample_new(NULL, 0, -2, "nearest", false, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "positive");
    CHECK(bad == NULL && out == NULL);
    fulmen_tensor *all[] = {x, y, x1, y1, x2, x3, y2, y3};
    free_all(all, 8);
    fulmen_model_free(bil);
    fulmen_model_free(near);
}

int main(void) {
    test_conv3d();
    test_conv_transpose();
    test_instance_norm();
    test_adaptive_pools();
    test_upsample_and_interpolate();
    return check_finish("test_spatial_layers");
}

/*
 * Tests of the fulmen_tensor_* C API: creation for every dtype, queries,
 * conversions, arithmetic, shape ops, indexing, comparisons, losses and
 * autograd, each with its bad inputs (NULL, freed and wrong-type handles,
 * wrong dtype, mismatched shapes, out-of-range dims, invalid enums).
 */
#include "check.h"
#include "tensor_check.h"

#include <stdint.h>

/* A live handle of another type (a model), cast to a tensor. */
static fulmen_model *g_model = NULL;
#define WRONG ((fulmen_tensor *)g_model)

/* ---------------------------------------------------------------- helpers */

/* Makes an f32 tensor of shape dims[0..nd] from values. */
static fulmen_tensor *mk(const float *v, size_t n, const int64_t *dims, size_t nd) {
    return check_f32(v, n, dims, nd);
}

/* A fresh f32 vector {1, -2, 3}. */
static fulmen_tensor *vec3(void) {
    static const float v[3] = {1.0f, -2.0f, 3.0f};
    static const int64_t d[1] = {3};
    return mk(v, 3, d, 1);
}

/* The [2,3] f32 matrix {1..6}. */
static fulmen_tensor *mat23(void) {
    static const float v[6] = {1, 2, 3, 4, 5, 6};
    static const int64_t d[2] = {2, 3};
    return mk(v, 6, d, 2);
}

/* An i64 tensor of shape dims from values. */
static fulmen_tensor *mk_i64(const int64_t *v, size_t n, const int64_t *dims, size_t nd) {
    fulmen_tensor *t = NULL;
    fulmen_error *e = fulmen_tensor_from_data(v, n * sizeof(int64_t), FULMEN_DTYPE_I64, dims, nd, &t);
    if (e != NULL) {
        fprintf(stderr, "mk_i64: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        exit(2);
    }
    return t;
}

/* A 2-D i64 index {{0, 1}, {1, 0}}, owned by a static slot freed in main. */
static fulmen_tensor *g_idx2d = NULL;
static fulmen_tensor *g_index2d(void) {
    if (g_idx2d == NULL) {
        const int64_t v[4] = {0, 1, 1, 0}, d[2] = {2, 2};
        g_idx2d = mk_i64(v, 4, d, 2);
    }
    return g_idx2d;
}

/* A handle that was live and is now freed (nothing is allocated after). */
static fulmen_tensor *freed_tensor(void) {
    fulmen_tensor *t = vec3();
    fulmen_tensor_free(t);
    return t;
}

/* Writes the tensor's dtype. */
static int32_t dtype_of(const fulmen_tensor *t) {
    int32_t d = -1;
    CHECK_OK(fulmen_tensor_dtype(t, &d));
    return d;
}

typedef fulmen_error *(*unary_fn)(const fulmen_tensor *, fulmen_tensor **);
typedef fulmen_error *(*binary_fn)(const fulmen_tensor *, const fulmen_tensor *, fulmen_tensor **);
typedef fulmen_error *(*scalar_fn)(const fulmen_tensor *, double, fulmen_tensor **);
typedef fulmen_error *(*dim_fn)(const fulmen_tensor *, int64_t, fulmen_tensor **);
typedef fulmen_error *(*loss_fn)(const fulmen_tensor *, const fulmen_tensor *, int32_t, fulmen_tensor **);

/* Runs the NULL / freed / wrong-type checks shared by every x -> out function;
 * `call` calls the function under test with x and out. */
#define BAD_HANDLE_CHECKS(name, good, call_x_out)                                    \
    do {                                                                             \
        int before_ = check_failed;                                                  \
        fulmen_tensor *out_ = NULL;                                                  \
        fulmen_tensor *x_ = NULL;                                                    \
        fulmen_tensor **o_ = &out_;                                                  \
        x_ = NULL;                                                                   \
        CHECK_ERR(call_x_out, FULMEN_CODE_NULL_ARGUMENT, NULL);                      \
        x_ = (good);                                                                 \
        o_ = NULL;                                                                   \
        CHECK_ERR(call_x_out, FULMEN_CODE_NULL_ARGUMENT, NULL);                      \
        o_ = &out_;                                                                  \
        fulmen_tensor *keep_ = x_;                                                   \
        x_ = freed_tensor();                                                         \
        CHECK_ERR(call_x_out, FULMEN_CODE_INVALID_HANDLE, NULL);                     \
        x_ = WRONG;                                                                  \
        CHECK_ERR(call_x_out, FULMEN_CODE_INVALID_HANDLE, NULL);                     \
        CHECK(out_ == NULL);                                                         \
        fulmen_tensor_free(keep_);                                                   \
        if (check_failed != before_) fprintf(stderr, "  (bad-handle checks of %s)\n", name); \
    } while (0)

/* ------------------------------------------------------------- creation */

/* Every dtype round-trips its bytes through from_data / copy_to and
 * reports the dtype it was created with; f32 copies convert. */
static void test_dtype_round_trips(void) {
    const int64_t d4[1] = {4};
    const float f32[4] = {1.5f, -2.0f, 3.0f, 0.25f};
    const double f64[4] = {1.5, -2.0, 3.0, 0.25};
    uint16_t f16[4], bf16[4];
    for (int i = 0; i < 4; i++) {
        f16[i] = fulmen_f16_from_f32(f32[i]);
        bf16[i] = fulmen_bf16_from_f32(f32[i]);
    }
    const int64_t i64[4] = {1, -2, 3, 1LL << 40};
    const int32_t i32[4] = {1, -2, 3, 100000};
    const uint8_t u8[4] = {0, 1, 200, 255};
    const uint8_t b[4] = {0, 1, 1, 0};
    const int8_t i8[4] = {-128, 127, 0, -1};
    const int16_t i16[4] = {-32768, 32767, 0, -1};
    struct {
        int32_t dtype;
        const void *data;
        size_t elem;
        double as_f64[4];
    } cases[] = {
        {FULMEN_DTYPE_F32, f32, 4, {1.5, -2, 3, 0.25}},
        {FULMEN_DTYPE_F64, f64, 8, {1.5, -2, 3, 0.25}},
        {FULMEN_DTYPE_F16, f16, 2, {1.5, -2, 3, 0.25}},
        {FULMEN_DTYPE_BF16, bf16, 2, {1.5, -2, 3, 0.25}},
        {FULMEN_DTYPE_I64, i64, 8, {1, -2, 3, 1099511627776.0}},
        {FULMEN_DTYPE_I32, i32, 4, {1, -2, 3, 100000}},
        {FULMEN_DTYPE_U8, u8, 1, {0, 1, 200, 255}},
        {FULMEN_DTYPE_BOOL, b, 1, {0, 1, 1, 0}},
        {FULMEN_DTYPE_I8, i8, 1, {-128, 127, 0, -1}},
        {FULMEN_DTYPE_I16, i16, 2, {-32768, 32767, 0, -1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int before = check_failed;
        fulmen_tensor *t = NULL;
        size_t nbytes = 4 * cases[c].elem;
        CHECK_OK(fulmen_tensor_from_data(cases[c].data, nbytes, cases[c].dtype, d4, 1, &t));
        if (t == NULL) continue;
        CHECK(dtype_of(t) == cases[c].dtype);
        unsigned char back[32] = {0};
        CHECK_OK(fulmen_tensor_copy_to(t, cases[c].dtype, back, nbytes));
        CHECK(memcmp(back, cases[c].data, nbytes) == 0);
        EXPECT_VALUES(t, cases[c].as_f64, 4, 0.0);
        /* the wrong number of bytes for this dtype, on create and on copy */
        fulmen_tensor *bad = NULL;
        CHECK_ERR(fulmen_tensor_from_data(cases[c].data, nbytes - 1, cases[c].dtype, d4, 1, &bad),
                  FULMEN_CODE_SHAPE_MISMATCH, NULL);
        CHECK(bad == NULL);
        CHECK_ERR(fulmen_tensor_copy_to(t, cases[c].dtype, back, nbytes + cases[c].elem),
                  FULMEN_CODE_SHAPE_MISMATCH, NULL);
        fulmen_tensor_free(t);
        if (check_failed != before) fprintf(stderr, "  (dtype case %zu)\n", c);
    }
}

/* copy_to converts: floats truncate to integers, nonzero becomes true,
 * integers widen to floats, f32 narrows to f16 / bf16. */
static void test_copy_conversions(void) {
    const float v[4] = {1.75f, -2.5f, 0.0f, 3.0f};
    const int64_t d[1] = {4};
    fulmen_tensor *t = mk(v, 4, d, 1);
    int32_t i32[4];
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_I32, i32, sizeof i32));
    CHECK(i32[0] == 1 && i32[1] == -2 && i32[2] == 0 && i32[3] == 3);
    uint8_t b[4];
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_BOOL, b, sizeof b));
    CHECK(b[0] == 1 && b[1] == 1 && b[2] == 0 && b[3] == 1);
    uint16_t h[4], bh[4];
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F16, h, sizeof h));
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_BF16, bh, sizeof bh));
    for (int i = 0; i < 4; i++) {
        CHECK(fulmen_f32_from_f16(h[i]) == v[i]);
        CHECK(fulmen_f32_from_bf16(bh[i]) == v[i]);
    }
    double f64[4];
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, f64, sizeof f64));
    CHECK(f64[0] == 1.75 && f64[1] == -2.5);
    /* bad arguments of copy_to */
    CHECK_ERR(fulmen_tensor_copy_to(t, 42, f64, sizeof f64), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_copy_to(t, -1, f64, sizeof f64), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, NULL, sizeof f64), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_copy_to(NULL, FULMEN_DTYPE_F64, f64, sizeof f64), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_copy_to(WRONG, FULMEN_DTYPE_F64, f64, sizeof f64), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_copy_to(freed_tensor(), FULMEN_DTYPE_F64, f64, sizeof f64), FULMEN_CODE_INVALID_HANDLE,
              NULL);
    fulmen_tensor_free(t);
}

/* f16 / bf16 helpers: known bit patterns and round-to-nearest-even. */
static void test_half_conversions(void) {
    CHECK(fulmen_f16_from_f32(1.0f) == 0x3C00);
    CHECK(fulmen_f16_from_f32(-2.0f) == 0xC000);
    CHECK(fulmen_f16_from_f32(0.0f) == 0x0000);
    CHECK(fulmen_f16_from_f32(65504.0f) == 0x7BFF);
    CHECK(fulmen_f16_from_f32(1e6f) == 0x7C00); /* overflow -> +inf */
    CHECK(fulmen_f16_from_f32(1.0f + 1.0f / 2048.0f) == 0x3C00); /* tie -> even */
    CHECK(fulmen_f16_from_f32(1.0f + 3.0f / 2048.0f) == 0x3C02); /* tie -> even (up) */
    CHECK(fulmen_f32_from_f16(0x3C00) == 1.0f);
    CHECK(fulmen_f32_from_f16(0x3555) == 0.333251953125f);
    CHECK(isinf(fulmen_f32_from_f16(0xFC00)) && fulmen_f32_from_f16(0xFC00) < 0);
    CHECK(isnan(fulmen_f32_from_f16(fulmen_f16_from_f32(NAN))));
    CHECK(fulmen_bf16_from_f32(1.0f) == 0x3F80);
    CHECK(fulmen_bf16_from_f32(-2.0f) == 0xC000);
    CHECK(fulmen_bf16_from_f32(1.0f + 1.0f / 256.0f) == 0x3F80);
    CHECK(fulmen_bf16_from_f32(1.0f + 3.0f / 256.0f) == 0x3F82);
    CHECK(fulmen_f32_from_bf16(0x4049) == 3.140625f);
    CHECK(isnan(fulmen_f32_from_bf16(fulmen_bf16_from_f32(NAN))));
}

/* from_data bad inputs: NULL pointers, invalid dtype, negative dims,
 * bool bytes other than 0/1; scalars from ndim 0; empty tensors. */
static void test_from_data_errors(void) {
    const float v[2] = {1, 2};
    const int64_t d[1] = {2};
    fulmen_tensor *t = NULL;
    CHECK_ERR(fulmen_tensor_from_data(NULL, 8, FULMEN_DTYPE_F32, d, 1, &t), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_from_data(v, 8, FULMEN_DTYPE_F32, NULL, 1, &t), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_from_data(v, 8, FULMEN_DTYPE_F32, d, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_from_data(v, 8, 10, d, 1, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_from_data(v, 8, -1, d, 1, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    const int64_t neg[2] = {-2, -1};
    CHECK_ERR(fulmen_tensor_from_data(v, 8, FULMEN_DTYPE_F32, neg, 2, &t), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    const uint8_t bad_bool[2] = {0, 2};
    CHECK_ERR(fulmen_tensor_from_data(bad_bool, 2, FULMEN_DTYPE_BOOL, d, 1, &t), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(t == NULL);
    /* ndim 0 (shape may be NULL) is a scalar */
    CHECK_OK(fulmen_tensor_from_data(v, 4, FULMEN_DTYPE_F32, NULL, 0, &t));
    size_t nd = 9, n = 0;
    CHECK_OK(fulmen_tensor_ndim(t, &nd));
    CHECK_OK(fulmen_tensor_numel(t, &n));
    CHECK(nd == 0 && n == 1);
    CHECK(check_item(t) == 1.0);
    fulmen_tensor_free(t);
    /* an empty tensor needs no data */
    const int64_t zero[2] = {0, 3};
    t = NULL;
    CHECK_OK(fulmen_tensor_from_data(NULL, 0, FULMEN_DTYPE_F32, zero, 2, &t));
    CHECK_OK(fulmen_tensor_numel(t, &n));
    CHECK(n == 0);
    EXPECT_SHAPE(t, zero, 2);
    fulmen_tensor_free(t);
}

/* zeros / ones / full fill every element with the value in each dtype. */
static void test_filled(void) {
    const int64_t d[2] = {2, 2};
    const int32_t dtypes[] = {FULMEN_DTYPE_F32, FULMEN_DTYPE_F64, FULMEN_DTYPE_F16, FULMEN_DTYPE_BF16, FULMEN_DTYPE_I64,
                              FULMEN_DTYPE_I32, FULMEN_DTYPE_U8,  FULMEN_DTYPE_BOOL, FULMEN_DTYPE_I8,  FULMEN_DTYPE_I16};
    const double zeros[4] = {0, 0, 0, 0}, ones[4] = {1, 1, 1, 1}, sevens[4] = {7, 7, 7, 7};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        fulmen_tensor *z = NULL, *o = NULL, *f = NULL;
        CHECK_OK(fulmen_tensor_zeros(d, 2, dtypes[i], &z));
        CHECK_OK(fulmen_tensor_ones(d, 2, dtypes[i], &o));
        CHECK_OK(fulmen_tensor_full(d, 2, dtypes[i] == FULMEN_DTYPE_BOOL ? 1.0 : 7.0, dtypes[i], &f));
        CHECK(dtype_of(z) == dtypes[i] && dtype_of(o) == dtypes[i] && dtype_of(f) == dtypes[i]);
        EXPECT_SHAPE(z, d, 2);
        EXPECT_VALUES(z, zeros, 4, 0);
        EXPECT_VALUES(o, ones, 4, 0);
        EXPECT_VALUES(f, dtypes[i] == FULMEN_DTYPE_BOOL ? ones : sevens, 4, 0);
        fulmen_tensor_free(z);
        fulmen_tensor_free(o);
        fulmen_tensor_free(f);
    }
    fulmen_tensor *t = NULL;
    const double halves[4] = {-0.5, -0.5, -0.5, -0.5};
    CHECK_OK(fulmen_tensor_full(d, 2, -0.5, FULMEN_DTYPE_F32, &t));
    EXPECT_VALUES(t, halves, 4, 0);
    fulmen_tensor_free(t);
    t = NULL;
    const int64_t neg[1] = {-1};
    CHECK_ERR(fulmen_tensor_zeros(neg, 1, FULMEN_DTYPE_F32, &t), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_ones(d, 2, 99, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_full(d, 2, 1.0, -3, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_zeros(NULL, 2, FULMEN_DTYPE_F32, &t), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_ones(d, 2, FULMEN_DTYPE_F32, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_full(d, 2, 1.0, FULMEN_DTYPE_F32, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(t == NULL);
}

/* rand / randn: same seed gives the same values, another seed differs,
 * rand lies in [0, 1), integer dtypes are rejected. */
static void test_random(void) {
    const int64_t d[1] = {64};
    float a[64], b[64], c[64];
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_manual_seed(42));
    CHECK_OK(fulmen_tensor_randn(d, 1, FULMEN_DTYPE_F32, &t));
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, a, sizeof a));
    fulmen_tensor_free(t);
    CHECK_OK(fulmen_manual_seed(42));
    CHECK_OK(fulmen_tensor_randn(d, 1, FULMEN_DTYPE_F32, &t));
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, b, sizeof b));
    fulmen_tensor_free(t);
    CHECK_OK(fulmen_manual_seed(43));
    CHECK_OK(fulmen_tensor_randn(d, 1, FULMEN_DTYPE_F32, &t));
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, c, sizeof c));
    fulmen_tensor_free(t);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    double mean = 0;
    for (int i = 0; i < 64; i++) mean += a[i] / 64.0;
    CHECK(fabs(mean) < 0.5);

    CHECK_OK(fulmen_manual_seed(7));
    CHECK_OK(fulmen_tensor_rand(d, 1, FULMEN_DTYPE_F64, &t));
    CHECK(dtype_of(t) == FULMEN_DTYPE_F64);
    double r[64], r2[64];
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, r, sizeof r));
    fulmen_tensor_free(t);
    int in_range = 1;
    for (int i = 0; i < 64; i++) in_range &= r[i] >= 0.0 && r[i] < 1.0;
    CHECK(in_range);
    CHECK_OK(fulmen_manual_seed(7));
    CHECK_OK(fulmen_tensor_rand(d, 1, FULMEN_DTYPE_F64, &t));
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, r2, sizeof r2));
    fulmen_tensor_free(t);
    CHECK(memcmp(r, r2, sizeof r) == 0);

    t = NULL;
    CHECK_ERR(fulmen_tensor_randn(d, 1, FULMEN_DTYPE_I64, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_rand(d, 1, FULMEN_DTYPE_BOOL, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_rand(d, 1, 77, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_randn(NULL, 1, FULMEN_DTYPE_F32, &t), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_rand(d, 1, FULMEN_DTYPE_F32, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(t == NULL);
}

/* Whether CUDA is available (the GPU kit runs these tests there too). */
static bool cuda_available(void) {
    fulmen_accelerator *cuda = NULL;
    bool av = false;
    CHECK_OK(fulmen_accelerator_get("cuda", &cuda));
    CHECK_OK(fulmen_accelerator_is_available(cuda, &av));
    fulmen_accelerator_free(cuda);
    return av;
}

/* arange and scalar: values, dtypes and bad ranges. */
static void test_arange_scalar(void) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_arange(0, 5, 1, FULMEN_DTYPE_I64, &t));
    const double w1[5] = {0, 1, 2, 3, 4};
    CHECK(dtype_of(t) == FULMEN_DTYPE_I64);
    EXPECT_VALUES(t, w1, 5, 0);
    fulmen_tensor_free(t);
    CHECK_OK(fulmen_tensor_arange(1, 0, -0.25, FULMEN_DTYPE_F32, &t));
    const double w2[4] = {1, 0.75, 0.5, 0.25};
    EXPECT_VALUES(t, w2, 4, 1e-7);
    fulmen_tensor_free(t);
    t = NULL;
    CHECK_ERR(fulmen_tensor_arange(0, 5, 0, FULMEN_DTYPE_F32, &t), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_arange(5, 0, 1, FULMEN_DTYPE_F32, &t), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_arange(0, NAN, 1, FULMEN_DTYPE_F32, &t), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_arange(0, 5, 1, 12, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_arange(0, 5, 1, FULMEN_DTYPE_F32, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(t == NULL);

    CHECK_OK(fulmen_tensor_scalar(2.5, FULMEN_DTYPE_F64, &t));
    size_t nd = 9, n = 0;
    CHECK_OK(fulmen_tensor_ndim(t, &nd));
    CHECK_OK(fulmen_tensor_numel(t, &n));
    CHECK(nd == 0 && n == 1 && dtype_of(t) == FULMEN_DTYPE_F64);
    CHECK(check_item(t) == 2.5);
    fulmen_tensor_free(t);
    CHECK_OK(fulmen_tensor_scalar(-3, FULMEN_DTYPE_I32, &t));
    CHECK(check_item(t) == -3.0 && dtype_of(t) == FULMEN_DTYPE_I32);
    fulmen_tensor_free(t);
    t = NULL;
    CHECK_ERR(fulmen_tensor_scalar(1, 10, &t), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_scalar(1, FULMEN_DTYPE_F32, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(t == NULL);
}

/* ---------------------------------------------------------------- queries */

/* dtype / ndim / numel / shape / device / requires_grad / item, including
 * a too-small shape buffer (OUT_OF_RANGE, ndim still written). */
static void test_queries(void) {
    fulmen_tensor *t = NULL;
    const int64_t d[3] = {2, 3, 4};
    CHECK_OK(fulmen_tensor_zeros(d, 3, FULMEN_DTYPE_I16, &t));
    size_t nd = 0, n = 0;
    CHECK_OK(fulmen_tensor_ndim(t, &nd));
    CHECK_OK(fulmen_tensor_numel(t, &n));
    CHECK(nd == 3 && n == 24 && dtype_of(t) == FULMEN_DTYPE_I16);
    int64_t dims[3] = {0, 0, 0};
    size_t got = 0;
    CHECK_OK(fulmen_tensor_shape(t, dims, 3, &got));
    CHECK(got == 3 && dims[0] == 2 && dims[1] == 3 && dims[2] == 4);
    int64_t small[2] = {-7, -7};
    got = 0;
    CHECK_ERR(fulmen_tensor_shape(t, small, 2, &got), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(got == 3);
    CHECK(small[0] == -7 && small[1] == -7);
    CHECK_ERR(fulmen_tensor_shape(t, dims, 3, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_shape(t, NULL, 3, &got), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_shape(NULL, dims, 3, &got), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_shape(WRONG, dims, 3, &got), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_shape(freed_tensor(), dims, 3, &got), FULMEN_CODE_INVALID_HANDLE, NULL);
    int32_t type = -1;
    int64_t index = -1;
    CHECK_OK(fulmen_tensor_device(t, &type, &index));
    CHECK(type == FULMEN_DEVICE_TYPE_CPU && index == 0);
    CHECK_ERR(fulmen_tensor_device(t, NULL, &index), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_device(t, &type, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_device(NULL, &type, &index), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_device(WRONG, &type, &index), FULMEN_CODE_INVALID_HANDLE, NULL);
    bool rg = true;
    CHECK_OK(fulmen_tensor_requires_grad(t, &rg));
    CHECK(!rg);
    CHECK_ERR(fulmen_tensor_requires_grad(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_requires_grad(WRONG, &rg), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_requires_grad(freed_tensor(), &rg), FULMEN_CODE_INVALID_HANDLE, NULL);
    int32_t dt = 0;
    CHECK_ERR(fulmen_tensor_dtype(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_dtype(NULL, &dt), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_dtype(WRONG, &dt), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_dtype(freed_tensor(), &dt), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_ndim(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_ndim(WRONG, &nd), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_ndim(freed_tensor(), &nd), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_numel(NULL, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_numel(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_numel(WRONG, &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    /* item needs exactly one element */
    double v = 0;
    CHECK_ERR(fulmen_tensor_item(t, &v), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_item(NULL, &v), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_item(WRONG, &v), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_item(freed_tensor(), &v), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor_free(t);
    /* a one-element 2-D tensor has an item */
    const float one[1] = {4.5f};
    const int64_t d11[2] = {1, 1};
    t = mk(one, 1, d11, 2);
    CHECK(check_item(t) == 4.5);
    CHECK_ERR(fulmen_tensor_item(t, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_tensor_free(t);
}

/* share / clone / detach / to_dtype / to_device: values, dtypes,
 * independence of handles, CUDA unavailable on this machine. */
static void test_conversions(void) {
    fulmen_tensor *x = vec3();
    const double w[3] = {1, -2, 3};
    fulmen_tensor *s = NULL, *c = NULL, *dt = NULL, *i = NULL, *cpu = NULL, *gpu = NULL;
    CHECK_OK(fulmen_tensor_share(x, &s));
    CHECK_OK(fulmen_tensor_clone(x, &c));
    CHECK(s != x && c != x);
    fulmen_tensor_free(x); /* the other handles stay valid */
    EXPECT_VALUES(s, w, 3, 0);
    EXPECT_VALUES(c, w, 3, 0);
    bool rg = true;
    CHECK_OK(fulmen_tensor_set_requires_grad(c, true));
    /* clone of a tensor that requires grad is tracked, as torch.clone */
    fulmen_tensor *cg = NULL;
    CHECK_OK(fulmen_tensor_clone(c, &cg));
    rg = false;
    if (cg != NULL) CHECK_OK(fulmen_tensor_requires_grad(cg, &rg));
    CHECK(rg);
    fulmen_tensor_free(cg);
    CHECK_OK(fulmen_tensor_detach(c, &dt));
    rg = true;
    CHECK_OK(fulmen_tensor_requires_grad(dt, &rg));
    CHECK(!rg);
    EXPECT_VALUES(dt, w, 3, 0);
    CHECK_OK(fulmen_tensor_to_dtype(s, FULMEN_DTYPE_I64, &i));
    CHECK(dtype_of(i) == FULMEN_DTYPE_I64);
    EXPECT_VALUES(i, w, 3, 0);
    CHECK_OK(fulmen_tensor_to_device(s, FULMEN_DEVICE_TYPE_CPU, 0, &cpu));
    EXPECT_VALUES(cpu, w, 3, 0);
    if (cuda_available()) {
        /* Where a GPU is: there and back. */
        fulmen_tensor *back = NULL;
        CHECK_OK(fulmen_tensor_to_device(s, FULMEN_DEVICE_TYPE_CUDA, 0, &gpu));
        CHECK_OK(fulmen_tensor_to_device(gpu, FULMEN_DEVICE_TYPE_CPU, 0, &back));
        EXPECT_VALUES(back, w, 3, 0);
        fulmen_tensor_free(back);
        fulmen_tensor_free(gpu);
        gpu = NULL;
    } else {
        CHECK_ERR(fulmen_tensor_to_device(s, FULMEN_DEVICE_TYPE_CUDA, 0, &gpu), FULMEN_CODE_UNAVAILABLE, "CUDA");
    }
    CHECK_ERR(fulmen_tensor_to_device(s, 42, 0, &gpu), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_device_type");
    CHECK_ERR(fulmen_tensor_to_device(s, FULMEN_DEVICE_TYPE_CPU, -1, &gpu), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_to_device(s, FULMEN_DEVICE_TYPE_CPU, 0, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_to_device(NULL, FULMEN_DEVICE_TYPE_CPU, 0, &gpu), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_to_device(WRONG, FULMEN_DEVICE_TYPE_CPU, 0, &gpu), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_to_device(freed_tensor(), FULMEN_DEVICE_TYPE_CPU, 0, &gpu), FULMEN_CODE_INVALID_HANDLE,
              NULL);
    CHECK_ERR(fulmen_tensor_to_dtype(s, 11, &gpu), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_to_dtype(s, FULMEN_DTYPE_F32, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_to_dtype(NULL, FULMEN_DTYPE_F32, &gpu), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_to_dtype(WRONG, FULMEN_DTYPE_F32, &gpu), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_to_dtype(freed_tensor(), FULMEN_DTYPE_F32, &gpu), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(gpu == NULL);
    BAD_HANDLE_CHECKS("share", vec3(), fulmen_tensor_share(x_, o_));
    BAD_HANDLE_CHECKS("clone", vec3(), fulmen_tensor_clone(x_, o_));
    BAD_HANDLE_CHECKS("detach", vec3(), fulmen_tensor_detach(x_, o_));
    fulmen_tensor_free(s);
    fulmen_tensor_free(c);
    fulmen_tensor_free(dt);
    fulmen_tensor_free(i);
    fulmen_tensor_free(cpu);
}

/* clone has its own storage and autograd flag: changing the clone in place
 * (an SGD step) or its requires_grad leaves the original alone. */
static void test_clone_owns_storage(void) {
    fulmen_tensor *x = vec3(), *c = NULL, *sq = NULL, *loss = NULL;
    CHECK_OK(fulmen_tensor_clone(x, &c));
    CHECK_OK(fulmen_tensor_set_requires_grad(c, true));
    bool rg = true;
    CHECK_OK(fulmen_tensor_requires_grad(x, &rg));
    CHECK(!rg);
    CHECK_OK(fulmen_tensor_mul(c, c, &sq));
    CHECK_OK(fulmen_tensor_sum(sq, &loss));
    CHECK_OK(fulmen_tensor_backward(loss));
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    const fulmen_tensor *params[1] = {c};
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, params, 1, &so, &opt));
    CHECK_OK(fulmen_optimizer_step(opt));
    const double moved[3] = {0.8, -1.6, 2.4}, orig[3] = {1, -2, 3};
    EXPECT_VALUES(c, moved, 3, 1e-6);
    EXPECT_VALUES(x, orig, 3, 0);
    fulmen_optimizer_free(opt);
    fulmen_tensor_free(loss);
    fulmen_tensor_free(sq);
    fulmen_tensor_free(c);
    fulmen_tensor_free(x);
}

/* ------------------------------------------------------------- arithmetic */

/* add / sub / mul / div / pow broadcast a [3] row over a [2,3] matrix;
 * [2,3] with [2] does not broadcast. */
static void test_binary_ops(void) {
    fulmen_tensor *a = mat23();
    const float bv[3] = {2, 1, 0.5f};
    const int64_t bd[1] = {3};
    fulmen_tensor *b = mk(bv, 3, bd, 1);
    struct {
        const char *name;
        binary_fn fn;
        double want[6];
    } ops[] = {
        {"add", fulmen_tensor_add, {3, 3, 3.5, 6, 6, 6.5}},
        {"sub", fulmen_tensor_sub, {-1, 1, 2.5, 2, 4, 5.5}},
        {"mul", fulmen_tensor_mul, {2, 2, 1.5, 8, 5, 3}},
        {"div", fulmen_tensor_div, {0.5, 2, 6, 2, 5, 12}},
        {"pow", fulmen_tensor_pow, {1, 2, 1.7320508, 16, 5, 2.4494897}},
    };
    const int64_t d23[2] = {2, 3};
    const float cv[2] = {1, 2};
    const int64_t cd[1] = {2};
    fulmen_tensor *c = mk(cv, 2, cd, 1);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int before = check_failed;
        fulmen_tensor *out = NULL;
        CHECK_OK(ops[i].fn(a, b, &out));
        EXPECT_SHAPE(out, d23, 2);
        EXPECT_VALUES(out, ops[i].want, 6, 1e-6);
        fulmen_tensor_free(out);
        out = NULL;
        CHECK_ERR(ops[i].fn(a, c, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
        CHECK_ERR(ops[i].fn(a, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
        CHECK_ERR(ops[i].fn(a, freed_tensor(), &out), FULMEN_CODE_INVALID_HANDLE, NULL);
        CHECK_ERR(ops[i].fn(a, WRONG, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
        CHECK(out == NULL);
        BAD_HANDLE_CHECKS(ops[i].name, mat23(), ops[i].fn(x_, b, o_));
        if (check_failed != before) fprintf(stderr, "  (binary op %s)\n", ops[i].name);
    }
    /* a [2,1] column against a [3] row broadcasts to [2,3] */
    const float colv[2] = {10, 20};
    const int64_t cold[2] = {2, 1};
    fulmen_tensor *col = mk(colv, 2, cold, 2), *out = NULL;
    CHECK_OK(fulmen_tensor_add(col, b, &out));
    const double want[6] = {12, 11, 10.5, 22, 21, 20.5};
    EXPECT_SHAPE(out, d23, 2);
    EXPECT_VALUES(out, want, 6, 0);
    fulmen_tensor_free(out);
    /* integer + float promotes to float */
    const int64_t iv[3] = {1, 2, 3};
    fulmen_tensor *ints = mk_i64(iv, 3, bd, 1);
    out = NULL;
    CHECK_OK(fulmen_tensor_add(ints, b, &out));
    CHECK(dtype_of(out) == FULMEN_DTYPE_F32);
    const double want2[3] = {3, 3, 3.5};
    EXPECT_VALUES(out, want2, 3, 0);
    fulmen_tensor_free(out);
    fulmen_tensor_free(ints);
    fulmen_tensor_free(col);
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);
    fulmen_tensor_free(c);
}

/* add_scalar / mul_scalar / pow_scalar / clamp (min > max is an error). */
static void test_scalar_ops(void) {
    fulmen_tensor *x = vec3(), *out = NULL;
    struct {
        const char *name;
        scalar_fn fn;
        double arg;
        double want[3];
    } ops[] = {
        {"add_scalar", fulmen_tensor_add_scalar, 0.5, {1.5, -1.5, 3.5}},
        {"mul_scalar", fulmen_tensor_mul_scalar, -2, {-2, 4, -6}},
        {"pow_scalar", fulmen_tensor_pow_scalar, 2, {1, 4, 9}},
        {"leaky_relu", fulmen_tensor_leaky_relu, 0.1, {1, -0.2, 3}},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        out = NULL;
        CHECK_OK(ops[i].fn(x, ops[i].arg, &out));
        EXPECT_VALUES(out, ops[i].want, 3, 1e-6);
        fulmen_tensor_free(out);
        BAD_HANDLE_CHECKS(ops[i].name, vec3(), ops[i].fn(x_, 1.0, o_));
    }
    out = NULL;
    CHECK_OK(fulmen_tensor_clamp(x, -1, 2, &out));
    const double wc[3] = {1, -1, 2};
    EXPECT_VALUES(out, wc, 3, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_OK(fulmen_tensor_clamp(x, 1, 1, &out));
    const double wc1[3] = {1, 1, 1};
    EXPECT_VALUES(out, wc1, 3, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_clamp(x, 2, -1, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(out == NULL);
    BAD_HANDLE_CHECKS("clamp", vec3(), fulmen_tensor_clamp(x_, 0, 1, o_));
    fulmen_tensor_free(x);
}

/* Unary math and activations against values computed here. */
static void test_unary_ops(void) {
    const float v[4] = {-1.5f, 0.0f, 0.5f, 2.0f};
    const int64_t d[1] = {4};
    fulmen_tensor *x = mk(v, 4, d, 1);
    const float pv[3] = {0.25f, 1.0f, 4.0f};
    const int64_t pd[1] = {3};
    fulmen_tensor *pos = mk(pv, 3, pd, 1);
    struct {
        const char *name;
        unary_fn fn;
        int positive;
        double (*ref)(double);
    } ops[] = {
        {"neg", fulmen_tensor_neg, 0, NULL},       {"exp", fulmen_tensor_exp, 0, exp},
        {"log", fulmen_tensor_log, 1, log},        {"sqrt", fulmen_tensor_sqrt, 1, sqrt},
        {"abs", fulmen_tensor_abs, 0, fabs},       {"relu", fulmen_tensor_relu, 0, NULL},
        {"sigmoid", fulmen_tensor_sigmoid, 0, NULL}, {"tanh", fulmen_tensor_tanh, 0, tanh},
        {"gelu", fulmen_tensor_gelu, 0, NULL},     {"silu", fulmen_tensor_silu, 0, NULL},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int before = check_failed;
        const float *in = ops[i].positive ? pv : v;
        size_t n = ops[i].positive ? 3 : 4;
        double want[4];
        for (size_t k = 0; k < n; k++) {
            double a = in[k];
            if (ops[i].ref) want[k] = ops[i].ref(a);
            else if (ops[i].fn == fulmen_tensor_neg) want[k] = -a;
            else if (ops[i].fn == fulmen_tensor_relu) want[k] = a > 0 ? a : 0;
            else if (ops[i].fn == fulmen_tensor_sigmoid) want[k] = 1 / (1 + exp(-a));
            else if (ops[i].fn == fulmen_tensor_gelu) want[k] = 0.5 * a * (1 + erf(a / sqrt(2.0)));
            else want[k] = a / (1 + exp(-a)); /* silu */
        }
        fulmen_tensor *out = NULL;
        CHECK_OK(ops[i].fn(ops[i].positive ? pos : x, &out));
        EXPECT_VALUES(out, want, n, 1e-6);
        fulmen_tensor_free(out);
        BAD_HANDLE_CHECKS(ops[i].name, vec3(), ops[i].fn(x_, o_));
        if (check_failed != before) fprintf(stderr, "  (unary op %s)\n", ops[i].name);
    }
    fulmen_tensor_free(x);
    fulmen_tensor_free(pos);
}

/* matmul: 2-D, batched (with broadcast), matrix-vector, vector-vector;
 * mismatched inner dimensions, 0-d operands and mixed dtypes fail. */
static void test_matmul(void) {
    fulmen_tensor *a = mat23(), *out = NULL;
    const float bv[6] = {1, 0, 0, 1, 1, 1};
    const int64_t bd[2] = {3, 2};
    fulmen_tensor *b = mk(bv, 6, bd, 2);
    CHECK_OK(fulmen_tensor_matmul(a, b, &out));
    const int64_t d22[2] = {2, 2};
    const double w[4] = {4, 5, 10, 11};
    EXPECT_SHAPE(out, d22, 2);
    EXPECT_VALUES(out, w, 4, 0);
    fulmen_tensor_free(out);
    /* batched [2,2,3] x [3,2] -> [2,2,2] */
    const float bav[12] = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
    const int64_t bad[3] = {2, 2, 3};
    fulmen_tensor *batch = mk(bav, 12, bad, 3);
    out = NULL;
    CHECK_OK(fulmen_tensor_matmul(batch, b, &out));
    const int64_t d222[3] = {2, 2, 2};
    const double wb[8] = {4, 5, 10, 11, -4, -5, -10, -11};
    EXPECT_SHAPE(out, d222, 3);
    EXPECT_VALUES(out, wb, 8, 0);
    fulmen_tensor_free(out);
    /* matrix x vector and vector . vector */
    fulmen_tensor *v = vec3();
    out = NULL;
    CHECK_OK(fulmen_tensor_matmul(a, v, &out));
    const int64_t d2[1] = {2};
    const double wv[2] = {6, 12};
    EXPECT_SHAPE(out, d2, 1);
    EXPECT_VALUES(out, wv, 2, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_OK(fulmen_tensor_matmul(v, v, &out));
    size_t nd = 9;
    CHECK_OK(fulmen_tensor_ndim(out, &nd));
    CHECK(nd == 0);
    CHECK(check_item(out) == 14.0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_matmul(a, a, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_matmul(v, a, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    fulmen_tensor *s = NULL;
    CHECK_OK(fulmen_tensor_scalar(2, FULMEN_DTYPE_F32, &s));
    CHECK_ERR(fulmen_tensor_matmul(s, v, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    fulmen_tensor *b64 = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(b, FULMEN_DTYPE_F64, &b64));
    CHECK_ERR(fulmen_tensor_matmul(a, b64, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_matmul(a, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_matmul(a, WRONG, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    BAD_HANDLE_CHECKS("matmul", mat23(), fulmen_tensor_matmul(x_, b, o_));
    fulmen_tensor_free(s);
    fulmen_tensor_free(b64);
    fulmen_tensor_free(v);
    fulmen_tensor_free(batch);
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);
}

/* softmax rows sum to 1; exp(log_softmax) too; negative dims count from
 * the end; out-of-range dims and integer inputs fail. */
static void test_softmax(void) {
    const float v[6] = {1, 2, 3, -1, 0, 100};
    const int64_t d[2] = {2, 3};
    fulmen_tensor *x = mk(v, 6, d, 2);
    dim_fn fns[2] = {fulmen_tensor_softmax, fulmen_tensor_log_softmax};
    for (int k = 0; k < 2; k++) {
        fulmen_tensor *out = NULL;
        CHECK_OK(fns[k](x, -1, &out));
        float got[6];
        CHECK_OK(fulmen_tensor_copy_to(out, FULMEN_DTYPE_F32, got, sizeof got));
        for (int r = 0; r < 2; r++) {
            double sum = 0, lse = 0;
            for (int c = 0; c < 3; c++) sum += k == 0 ? got[r * 3 + c] : exp(got[r * 3 + c]);
            CHECK_NEAR(sum, 1.0, 1e-6);
            double m = r == 0 ? 3 : 100;
            for (int c = 0; c < 3; c++) lse += exp(v[r * 3 + c] - m);
            double want0 = exp(v[r * 3] - m) / lse;
            CHECK_NEAR(k == 0 ? got[r * 3] : exp(got[r * 3]), want0, 1e-6);
        }
        fulmen_tensor_free(out);
        /* along dim 0 the columns sum to 1 */
        out = NULL;
        CHECK_OK(fns[k](x, 0, &out));
        CHECK_OK(fulmen_tensor_copy_to(out, FULMEN_DTYPE_F32, got, sizeof got));
        CHECK_NEAR(k == 0 ? got[0] + got[3] : exp(got[0]) + exp(got[3]), 1.0, 1e-6);
        fulmen_tensor_free(out);
        out = NULL;
        CHECK_ERR(fns[k](x, 2, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
        CHECK_ERR(fns[k](x, -3, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
        const int64_t iv[3] = {1, 2, 3};
        const int64_t id[1] = {3};
        fulmen_tensor *ints = mk_i64(iv, 3, id, 1);
        CHECK_ERR(fns[k](ints, 0, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
        fulmen_tensor_free(ints);
        CHECK(out == NULL);
        BAD_HANDLE_CHECKS(k == 0 ? "softmax" : "log_softmax", vec3(), fns[k](x_, 0, o_));
    }
    fulmen_tensor_free(x);
}

/* ------------------------------------------------------------ reductions */

/* sum / mean / sum_dims / mean_dims with dims lists, keepdim, negative and
 * duplicate dims; mean of an integer tensor is a dtype error. */
static void test_reductions(void) {
    fulmen_tensor *a = mat23(), *out = NULL;
    CHECK_OK(fulmen_tensor_sum(a, &out));
    CHECK(check_item(out) == 21.0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_mean(a, &out));
    CHECK(check_item(out) == 3.5);
    fulmen_tensor_free(out);
    const int64_t d0[1] = {0}, d1[1] = {-1}, d01[2] = {0, 1}, dup[2] = {1, 1}, dupneg[2] = {1, -1}, bad[1] = {2};
    CHECK_OK(fulmen_tensor_sum_dims(a, d0, 1, false, &out));
    const int64_t s3[1] = {3};
    const double w0[3] = {5, 7, 9};
    EXPECT_SHAPE(out, s3, 1);
    EXPECT_VALUES(out, w0, 3, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_sum_dims(a, d1, 1, true, &out));
    const int64_t s21[2] = {2, 1};
    const double w1[2] = {6, 15};
    EXPECT_SHAPE(out, s21, 2);
    EXPECT_VALUES(out, w1, 2, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_mean_dims(a, d1, 1, false, &out));
    const int64_t s2[1] = {2};
    const double wm[2] = {2, 5};
    EXPECT_SHAPE(out, s2, 1);
    EXPECT_VALUES(out, wm, 2, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_mean_dims(a, d01, 2, true, &out));
    const int64_t s11[2] = {1, 1};
    const double wall[1] = {3.5};
    EXPECT_SHAPE(out, s11, 2);
    EXPECT_VALUES(out, wall, 1, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_sum_dims(a, dup, 2, false, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_mean_dims(a, dupneg, 2, false, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_sum_dims(a, bad, 1, false, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_mean_dims(a, bad, 1, false, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_sum_dims(a, NULL, 1, false, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_sum_dims(a, d0, 1, false, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_mean_dims(NULL, d0, 1, false, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_sum_dims(WRONG, d0, 1, false, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_mean_dims(freed_tensor(), d0, 1, false, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    /* integer sums are i64 (torch promotes), integer means are errors */
    const int64_t iv[3] = {1, 2, 4};
    fulmen_tensor *ints = mk_i64(iv, 3, s3, 1);
    CHECK_OK(fulmen_tensor_sum(ints, &out));
    CHECK(dtype_of(out) == FULMEN_DTYPE_I64 && check_item(out) == 7.0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_mean(ints, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_mean_dims(ints, d0, 1, false, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK(out == NULL);
    fulmen_tensor_free(ints);
    BAD_HANDLE_CHECKS("sum", vec3(), fulmen_tensor_sum(x_, o_));
    BAD_HANDLE_CHECKS("mean", vec3(), fulmen_tensor_mean(x_, o_));
    fulmen_tensor_free(a);
}

/* max / min / argmax / argmin: values, keepdim shapes, empty tensors and
 * out-of-range dims. */
static void test_max_min(void) {
    const float v[6] = {3, -1, 7, 0, 9, -5};
    const int64_t d[2] = {2, 3};
    fulmen_tensor *x = mk(v, 6, d, 2), *out = NULL;
    CHECK_OK(fulmen_tensor_max(x, &out));
    CHECK(check_item(out) == 9.0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_min(x, &out));
    CHECK(check_item(out) == -5.0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_argmax(x, 1, false, &out));
    const double am[2] = {2, 1};
    CHECK(dtype_of(out) == FULMEN_DTYPE_I64);
    EXPECT_VALUES(out, am, 2, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_argmin(x, 0, true, &out));
    const int64_t s13[2] = {1, 3};
    const double an[3] = {1, 0, 1};
    EXPECT_SHAPE(out, s13, 2);
    EXPECT_VALUES(out, an, 3, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_argmin(x, -1, true, &out));
    const int64_t s21[2] = {2, 1};
    const double an2[2] = {1, 2};
    EXPECT_SHAPE(out, s21, 2);
    EXPECT_VALUES(out, an2, 2, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_argmax(x, 2, false, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_argmin(x, -3, false, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_argmax(x, 0, false, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_argmax(NULL, 0, false, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_argmin(WRONG, 0, false, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_argmin(freed_tensor(), 0, false, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor *empty = NULL;
    const int64_t d0[1] = {0};
    CHECK_OK(fulmen_tensor_zeros(d0, 1, FULMEN_DTYPE_F32, &empty));
    CHECK_ERR(fulmen_tensor_max(empty, &out), FULMEN_CODE_SHAPE_MISMATCH, "empty");
    CHECK_ERR(fulmen_tensor_min(empty, &out), FULMEN_CODE_SHAPE_MISMATCH, "empty");
    CHECK_ERR(fulmen_tensor_argmax(empty, 0, false, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(out == NULL);
    fulmen_tensor_free(empty);
    BAD_HANDLE_CHECKS("max", vec3(), fulmen_tensor_max(x_, o_));
    BAD_HANDLE_CHECKS("min", vec3(), fulmen_tensor_min(x_, o_));
    fulmen_tensor_free(x);
}

/* ------------------------------------------------------------------ shape */

/* reshape / view with -1 inference; bad element counts, two -1s; view of
 * a non-contiguous tensor fails while reshape copies. */
static void test_reshape_view(void) {
    fulmen_tensor *a = mat23(), *out = NULL;
    const int64_t s32[2] = {3, -1}, w32[2] = {3, 2}, s6[1] = {-1}, w6[1] = {6}, bad[2] = {4, 2}, two[2] = {-1, -1},
                  negs[2] = {-2, -3};
    const double vals[6] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(fulmen_tensor_reshape(a, s32, 2, &out));
    EXPECT_SHAPE(out, w32, 2);
    EXPECT_VALUES(out, vals, 6, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_view(a, s6, 1, &out));
    EXPECT_SHAPE(out, w6, 1);
    EXPECT_VALUES(out, vals, 6, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_reshape(a, bad, 2, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_view(a, bad, 2, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_reshape(a, two, 2, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_view(a, negs, 2, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_reshape(a, NULL, 2, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_view(a, s6, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_reshape(NULL, s6, 1, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_view(WRONG, s6, 1, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_reshape(freed_tensor(), s6, 1, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    /* a transposed tensor is not contiguous: view fails, reshape copies */
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_transpose(a, 0, 1, &t));
    /* the header names no code for this; any clean error will do */
    fulmen_error *e = fulmen_tensor_view(t, s6, 1, &out);
    CHECK(e != NULL && fulmen_error_code(e) != FULMEN_CODE_PANIC);
    fulmen_error_free(e);
    CHECK(out == NULL);
    CHECK_OK(fulmen_tensor_reshape(t, s6, 1, &out));
    const double tv[6] = {1, 4, 2, 5, 3, 6};
    EXPECT_VALUES(out, tv, 6, 0);
    fulmen_tensor_free(out);
    fulmen_tensor_free(t);
    fulmen_tensor_free(a);
}

/* flatten / permute / transpose with their bad dims and permutations. */
static void test_flatten_permute_transpose(void) {
    const float v[24] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
    const int64_t d[3] = {2, 3, 4};
    fulmen_tensor *x = mk(v, 24, d, 3), *out = NULL;
    CHECK_OK(fulmen_tensor_flatten(x, 1, -1, &out));
    const int64_t f[2] = {2, 12};
    EXPECT_SHAPE(out, f, 2);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_flatten(x, 0, 1, &out));
    const int64_t f2[2] = {6, 4};
    EXPECT_SHAPE(out, f2, 2);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_flatten(x, 2, 1, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_flatten(x, 0, 3, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    BAD_HANDLE_CHECKS("flatten", vec3(), fulmen_tensor_flatten(x_, 0, -1, o_));

    const int64_t p[3] = {2, 0, 1}, pdup[3] = {0, 0, 1}, pshort[2] = {0, 1}, prange[3] = {0, 1, 3};
    CHECK_OK(fulmen_tensor_permute(x, p, 3, &out));
    const int64_t pd[3] = {4, 2, 3};
    EXPECT_SHAPE(out, pd, 3);
    /* out[k][i][j] = x[i][j][k] = 12i + 4j + k: the first row is k=0 */
    float got[24];
    CHECK_OK(fulmen_tensor_copy_to(out, FULMEN_DTYPE_F32, got, sizeof got));
    CHECK(got[0] == 0 && got[1] == 4 && got[3] == 12 && got[6] == 1 && got[23] == 23);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_permute(x, pdup, 3, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_permute(x, pshort, 2, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_permute(x, prange, 3, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_permute(x, NULL, 3, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const int64_t p0[1] = {0};
    BAD_HANDLE_CHECKS("permute", vec3(), fulmen_tensor_permute(x_, p0, 1, o_));

    CHECK_OK(fulmen_tensor_transpose(x, -1, 0, &out));
    const int64_t td[3] = {4, 3, 2};
    EXPECT_SHAPE(out, td, 3);
    CHECK_OK(fulmen_tensor_copy_to(out, FULMEN_DTYPE_F32, got, sizeof got));
    CHECK(got[0] == 0 && got[1] == 12 && got[2] == 4 && got[6] == 1);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_transpose(x, 0, 3, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_transpose(x, -4, 0, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(out == NULL);
    BAD_HANDLE_CHECKS("transpose", vec3(), fulmen_tensor_transpose(x_, 0, 0, o_));
    fulmen_tensor_free(x);
}

/* squeeze / unsqueeze / narrow (a view of the right slice; out of range). */
static void test_squeeze_narrow(void) {
    const float v[3] = {1, 2, 3};
    const int64_t d[3] = {1, 3, 1};
    fulmen_tensor *x = mk(v, 3, d, 3), *out = NULL;
    CHECK_OK(fulmen_tensor_squeeze(x, 0, &out));
    const int64_t s31[2] = {3, 1};
    EXPECT_SHAPE(out, s31, 2);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_squeeze(x, -1, &out));
    const int64_t s13[2] = {1, 3};
    EXPECT_SHAPE(out, s13, 2);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_squeeze(x, 1, &out)); /* size 3: unchanged */
    EXPECT_SHAPE(out, d, 3);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_squeeze(x, 3, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_OK(fulmen_tensor_unsqueeze(x, 0, &out));
    const int64_t u0[4] = {1, 1, 3, 1};
    EXPECT_SHAPE(out, u0, 4);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_unsqueeze(x, -1, &out));
    const int64_t u1[4] = {1, 3, 1, 1};
    EXPECT_SHAPE(out, u1, 4);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_unsqueeze(x, 3, &out));
    EXPECT_SHAPE(out, u1, 4);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_unsqueeze(x, 5, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_unsqueeze(x, -6, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    BAD_HANDLE_CHECKS("squeeze", vec3(), fulmen_tensor_squeeze(x_, 0, o_));
    BAD_HANDLE_CHECKS("unsqueeze", vec3(), fulmen_tensor_unsqueeze(x_, 0, o_));
    fulmen_tensor_free(x);

    fulmen_tensor *a = mat23();
    CHECK_OK(fulmen_tensor_narrow(a, 1, 1, 2, &out));
    const int64_t s22[2] = {2, 2};
    const double w[4] = {2, 3, 5, 6};
    EXPECT_SHAPE(out, s22, 2);
    EXPECT_VALUES(out, w, 4, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_narrow(a, -2, 1, 1, &out));
    const double w2[3] = {4, 5, 6};
    EXPECT_VALUES(out, w2, 3, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_narrow(a, 1, 2, 2, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_narrow(a, 1, -1, 1, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_narrow(a, 1, 0, -1, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_narrow(a, 2, 0, 1, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    /* start + length past INT64_MAX is out of range, not a wrapped sum. */
    CHECK_ERR(fulmen_tensor_narrow(a, 1, INT64_MAX, 1, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_narrow(a, 1, 1, INT64_MAX, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    fulmen_tensor *scalar = NULL;
    const float one = 1.0f;
    CHECK_OK(fulmen_tensor_from_data(&one, sizeof one, FULMEN_DTYPE_F32, NULL, 0, &scalar));
    CHECK_ERR(fulmen_tensor_narrow(scalar, 0, 0, 1, &out), FULMEN_CODE_SHAPE_MISMATCH, "scalar");
    fulmen_tensor_free(scalar);
    /* Elements that fit but bytes that overflow size_t: refused, nothing read. */
    const int64_t huge[1] = {(int64_t)1 << 61};
    CHECK_ERR(fulmen_tensor_from_data(&one, sizeof one, FULMEN_DTYPE_F64, huge, 1, &out), FULMEN_CODE_SHAPE_MISMATCH,
              "too many bytes");
    CHECK(out == NULL);
    BAD_HANDLE_CHECKS("narrow", vec3(), fulmen_tensor_narrow(x_, 0, 0, 1, o_));
    fulmen_tensor_free(a);
}

/* cat / stack: values and shapes; mismatched shapes, empty lists, NULL
 * entries, out-of-range dims. */
static void test_cat_stack(void) {
    fulmen_tensor *a = mat23(), *b = NULL, *out = NULL;
    CHECK_OK(fulmen_tensor_mul_scalar(a, 10, &b));
    const fulmen_tensor *ab[2] = {a, b};
    CHECK_OK(fulmen_tensor_cat(ab, 2, 0, &out));
    const int64_t s43[2] = {4, 3};
    EXPECT_SHAPE(out, s43, 2);
    const double w0[12] = {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60};
    EXPECT_VALUES(out, w0, 12, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_cat(ab, 2, -1, &out));
    const int64_t s26[2] = {2, 6};
    const double w1[12] = {1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60};
    EXPECT_SHAPE(out, s26, 2);
    EXPECT_VALUES(out, w1, 12, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_stack(ab, 2, 1, &out));
    const int64_t s223[3] = {2, 2, 3};
    const double w2[12] = {1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60};
    EXPECT_SHAPE(out, s223, 3);
    EXPECT_VALUES(out, w2, 12, 0);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_tensor_stack(ab, 2, 2, &out));
    const int64_t s232[3] = {2, 3, 2};
    EXPECT_SHAPE(out, s232, 3);
    fulmen_tensor_free(out);
    out = NULL;
    fulmen_tensor *v = vec3();
    const fulmen_tensor *mixed[2] = {a, v};
    fulmen_tensor *n = NULL;
    const int64_t s23[2] = {2, 2};
    CHECK_OK(fulmen_tensor_zeros(s23, 2, FULMEN_DTYPE_F32, &n));
    const fulmen_tensor *mixed2[2] = {a, n};
    CHECK_ERR(fulmen_tensor_cat(mixed2, 2, 0, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_cat(mixed, 2, 0, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_stack(mixed2, 2, 0, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_cat(ab, 0, 0, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_stack(ab, 0, 0, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_cat(ab, 2, 2, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_stack(ab, 2, 3, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_cat(NULL, 2, 0, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_stack(ab, 2, 0, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const fulmen_tensor *with_null[2] = {a, NULL};
    CHECK_ERR(fulmen_tensor_cat(with_null, 2, 0, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const fulmen_tensor *with_wrong[2] = {a, WRONG};
    CHECK_ERR(fulmen_tensor_stack(with_wrong, 2, 0, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    const fulmen_tensor *with_freed[2] = {a, freed_tensor()};
    CHECK_ERR(fulmen_tensor_cat(with_freed, 2, 0, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    fulmen_tensor_free(n);
    fulmen_tensor_free(v);
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);
}

/* --------------------------------------------------------------- indexing */

/* index_select / gather: i64 and i32 indices, float index is a dtype error,
 * out-of-range positions and dims, wrong index shapes. */
static void test_index_gather(void) {
    fulmen_tensor *a = mat23(), *out = NULL;
    const int64_t iv[2] = {2, 0}, id[1] = {2};
    fulmen_tensor *idx = mk_i64(iv, 2, id, 1), *idx32 = NULL, *fidx = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(idx, FULMEN_DTYPE_I32, &idx32));
    CHECK_OK(fulmen_tensor_to_dtype(idx, FULMEN_DTYPE_F32, &fidx));
    CHECK_OK(fulmen_tensor_index_select(a, 1, idx, &out));
    const double w[4] = {3, 1, 6, 4};
    EXPECT_VALUES(out, w, 4, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_index_select(a, 0, idx32 /* row 2 of 2 rows */, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    const int64_t iv2[2] = {1, 1};
    fulmen_tensor *rows = mk_i64(iv2, 2, id, 1), *rows32 = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(rows, FULMEN_DTYPE_I32, &rows32));
    CHECK_OK(fulmen_tensor_index_select(a, 0, rows32, &out));
    const double w2[6] = {4, 5, 6, 4, 5, 6};
    EXPECT_VALUES(out, w2, 6, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_index_select(a, 1, fidx, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_index_select(a, 0, idx, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_index_select(a, 2, idx, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    const int64_t negv[1] = {-1}, one[1] = {1};
    fulmen_tensor *neg = mk_i64(negv, 1, one, 1);
    CHECK_ERR(fulmen_tensor_index_select(a, 1, neg, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_index_select(a, 1, g_index2d(), &out), FULMEN_CODE_SHAPE_MISMATCH, "1-D");
    CHECK_ERR(fulmen_tensor_index_select(a, 1, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_index_select(a, 1, WRONG, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    BAD_HANDLE_CHECKS("index_select", mat23(), fulmen_tensor_index_select(x_, 1, idx, o_));

    /* gather along dim 1: out[i][j] = a[i][index[i][j]] */
    const int64_t gv[4] = {0, 2, 1, 1}, gd[2] = {2, 2};
    fulmen_tensor *g = mk_i64(gv, 4, gd, 2), *g32 = NULL, *gf = NULL;
    CHECK_OK(fulmen_tensor_gather(a, 1, g, &out));
    const double wg[4] = {1, 3, 5, 5};
    EXPECT_SHAPE(out, gd, 2);
    EXPECT_VALUES(out, wg, 4, 0);
    fulmen_tensor_free(out);
    /* along dim 0 with an i32 index: out[i][j] = a[g[i][j]][j] */
    const int64_t g0v[4] = {0, 1, 1, 0};
    fulmen_tensor *g0 = mk_i64(g0v, 4, gd, 2);
    CHECK_OK(fulmen_tensor_to_dtype(g0, FULMEN_DTYPE_I32, &g32));
    fulmen_tensor_free(g0);
    CHECK_OK(fulmen_tensor_gather(a, 0, g32, &out));
    const double wg0[4] = {1, 5, 4, 2};
    EXPECT_VALUES(out, wg0, 4, 0);
    fulmen_tensor_free(out);
    out = NULL;
    CHECK_ERR(fulmen_tensor_gather(a, 0, g /* holds 2 on a 2-row dim */, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    out = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(g, FULMEN_DTYPE_F64, &gf));
    CHECK_ERR(fulmen_tensor_gather(a, 1, gf, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    const int64_t gbad[4] = {0, 3, 0, 0};
    fulmen_tensor *gb = mk_i64(gbad, 4, gd, 2);
    CHECK_ERR(fulmen_tensor_gather(a, 1, gb, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_gather(a, 1, idx /* 1-D */, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_gather(a, 2, g, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_gather(a, 1, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_gather(a, 1, freed_tensor(), &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    BAD_HANDLE_CHECKS("gather", mat23(), fulmen_tensor_gather(x_, 1, g, o_));
    fulmen_tensor_free(gb);
    fulmen_tensor_free(gf);
    fulmen_tensor_free(g32);
    fulmen_tensor_free(g);
    fulmen_tensor_free(neg);
    fulmen_tensor_free(rows);
    fulmen_tensor_free(rows32);
    fulmen_tensor_free(idx);
    fulmen_tensor_free(idx32);
    fulmen_tensor_free(fidx);
    fulmen_tensor_free(a);
}

/* compare / compare_scalar: every fulmen_compare op gives a bool tensor
 * with the right values; invalid ops and shapes fail. */
static void test_compare(void) {
    const float av[3] = {1, 2, 3}, bv[3] = {2, 2, 2};
    const int64_t d[1] = {3};
    fulmen_tensor *a = mk(av, 3, d, 1), *b = mk(bv, 3, d, 1), *out = NULL;
    const double want[6][3] = {
        {0, 1, 0}, /* EQ */
        {1, 0, 1}, /* NE */
        {1, 0, 0}, /* LT */
        {1, 1, 0}, /* LE */
        {0, 0, 1}, /* GT */
        {0, 1, 1}, /* GE */
    };
    for (int op = FULMEN_COMPARE_EQ; op <= FULMEN_COMPARE_GE; op++) {
        int before = check_failed;
        CHECK_OK(fulmen_tensor_compare(a, b, op, &out));
        CHECK(dtype_of(out) == FULMEN_DTYPE_BOOL);
        EXPECT_VALUES(out, want[op], 3, 0);
        fulmen_tensor_free(out);
        CHECK_OK(fulmen_tensor_compare_scalar(a, 2.0, op, &out));
        CHECK(dtype_of(out) == FULMEN_DTYPE_BOOL);
        EXPECT_VALUES(out, want[op], 3, 0);
        fulmen_tensor_free(out);
        if (check_failed != before) fprintf(stderr, "  (compare op %d)\n", op);
    }
    /* broadcasting [2,1] against [3] */
    const float cv[2] = {1, 3};
    const int64_t cd[2] = {2, 1};
    fulmen_tensor *c = mk(cv, 2, cd, 2);
    CHECK_OK(fulmen_tensor_compare(c, a, FULMEN_COMPARE_GE, &out));
    const int64_t s23[2] = {2, 3};
    const double wb[6] = {1, 0, 0, 1, 1, 1};
    EXPECT_SHAPE(out, s23, 2);
    EXPECT_VALUES(out, wb, 6, 0);
    fulmen_tensor_free(out);
    out = NULL;
    const float ev[2] = {1, 2};
    const int64_t ed[1] = {2};
    fulmen_tensor *e = mk(ev, 2, ed, 1);
    CHECK_ERR(fulmen_tensor_compare(a, e, FULMEN_COMPARE_EQ, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_compare(a, b, 6, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_compare(a, b, -1, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_compare_scalar(a, 1, 6, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_compare_scalar(a, 1, -1, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_compare(a, NULL, 0, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_compare(a, WRONG, 0, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_compare(a, freed_tensor(), 0, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    BAD_HANDLE_CHECKS("compare", vec3(), fulmen_tensor_compare(x_, b, 0, o_));
    BAD_HANDLE_CHECKS("compare_scalar", vec3(), fulmen_tensor_compare_scalar(x_, 1, 0, o_));
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);
    fulmen_tensor_free(c);
    fulmen_tensor_free(e);
}

/* ----------------------------------------------------------------- losses */

/* cross_entropy and nll against class indices (i64 and i32) and
 * cross_entropy against probabilities, for each reduction; target errors. */
static void test_loss_classification(void) {
    const float lv[6] = {1, 2, 3, 1, 1, 1};
    const int64_t ld[2] = {2, 3}, td[1] = {2};
    fulmen_tensor *logits = mk(lv, 6, ld, 2);
    const int64_t tv[2] = {2, 0};
    fulmen_tensor *target = mk_i64(tv, 2, td, 1), *t32 = NULL, *logp = NULL, *out = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(target, FULMEN_DTYPE_I32, &t32));
    CHECK_OK(fulmen_tensor_log_softmax(logits, 1, &logp));
    double lse0 = log(exp(1.0) + exp(2.0) + exp(3.0));
    double l[2] = {lse0 - 3.0, log(3.0)};
    double mean = (l[0] + l[1]) / 2, sum = l[0] + l[1];
    /* one-hot probabilities give the same losses; soft targets mix them */
    const float pv[6] = {0, 0, 1, 1, 0, 0};
    const float sv[6] = {0.5f, 0.5f, 0, 0.2f, 0.3f, 0.5f};
    fulmen_tensor *probs = mk(pv, 6, ld, 2), *soft = mk(sv, 6, ld, 2);
    double soft_l[2] = {0.5 * (lse0 - 1) + 0.5 * (lse0 - 2), log(3.0)};

    CHECK_OK(fulmen_loss_cross_entropy(logits, target, FULMEN_REDUCTION_NONE, &out));
    EXPECT_SHAPE(out, td, 1);
    EXPECT_VALUES(out, l, 2, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_cross_entropy(logits, target, FULMEN_REDUCTION_MEAN, &out));
    CHECK_NEAR(check_item(out), mean, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_cross_entropy(logits, t32, FULMEN_REDUCTION_SUM, &out));
    CHECK_NEAR(check_item(out), sum, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_cross_entropy(logits, probs, FULMEN_REDUCTION_MEAN, &out));
    CHECK_NEAR(check_item(out), mean, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_cross_entropy(logits, soft, FULMEN_REDUCTION_NONE, &out));
    EXPECT_VALUES(out, soft_l, 2, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_nll(logp, target, FULMEN_REDUCTION_MEAN, &out));
    CHECK_NEAR(check_item(out), mean, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_nll(logp, t32, FULMEN_REDUCTION_SUM, &out));
    CHECK_NEAR(check_item(out), sum, 1e-6);
    fulmen_tensor_free(out);
    CHECK_OK(fulmen_loss_nll(logp, target, FULMEN_REDUCTION_NONE, &out));
    EXPECT_VALUES(out, l, 2, 1e-6);
    fulmen_tensor_free(out);
    out = NULL;

    /* target errors */
    const int64_t big[2] = {3, 0}, negt[2] = {-1, 0}, three[1] = {3}, t3[3] = {0, 1, 2};
    fulmen_tensor *tbig = mk_i64(big, 2, td, 1), *tneg = mk_i64(negt, 2, td, 1), *tlong = mk_i64(t3, 3, three, 1);
    fulmen_tensor *tfloat = NULL, *tbool = NULL, *ilogits = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(target, FULMEN_DTYPE_F32, &tfloat));
    CHECK_OK(fulmen_tensor_to_dtype(target, FULMEN_DTYPE_BOOL, &tbool));
    CHECK_OK(fulmen_tensor_to_dtype(logits, FULMEN_DTYPE_I64, &ilogits));
    loss_fn fns[2] = {fulmen_loss_cross_entropy, fulmen_loss_nll};
    const char *names[2] = {"cross_entropy", "nll"};
    for (int k = 0; k < 2; k++) {
        int before = check_failed;
        fulmen_tensor *in = k == 0 ? logits : logp;
        CHECK_ERR(fns[k](in, tbig, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
        CHECK_ERR(fns[k](in, tneg, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_OUT_OF_RANGE, NULL);
        CHECK_ERR(fns[k](in, tlong, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
        CHECK_ERR(fns[k](in, tbool, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
        CHECK_ERR(fns[k](ilogits, target, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
        CHECK_ERR(fns[k](in, target, 3, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
        CHECK_ERR(fns[k](in, target, -1, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
        CHECK_ERR(fns[k](in, NULL, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
        CHECK_ERR(fns[k](in, WRONG, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
        CHECK_ERR(fns[k](in, freed_tensor(), FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
        BAD_HANDLE_CHECKS(names[k], mat23(), fns[k](x_, target, FULMEN_REDUCTION_MEAN, o_));
        CHECK(out == NULL);
        if (check_failed != before) fprintf(stderr, "  (loss %s)\n", names[k]);
    }
    /* float targets of the wrong shape are neither indices nor probabilities */
    CHECK_ERR(fulmen_loss_cross_entropy(logits, tfloat, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_SHAPE_MISMATCH,
              NULL);
    /* nll takes class indices only */
    CHECK_ERR(fulmen_loss_nll(logp, tfloat, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    /* logits need a class dimension */
    fulmen_tensor *v = vec3();
    CHECK_ERR(fulmen_loss_cross_entropy(v, target, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(out == NULL);
    fulmen_tensor_free(v);
    fulmen_tensor_free(tbig);
    fulmen_tensor_free(tneg);
    fulmen_tensor_free(tlong);
    fulmen_tensor_free(tfloat);
    fulmen_tensor_free(tbool);
    fulmen_tensor_free(ilogits);
    fulmen_tensor_free(probs);
    fulmen_tensor_free(soft);
    fulmen_tensor_free(logits);
    fulmen_tensor_free(logp);
    fulmen_tensor_free(target);
    fulmen_tensor_free(t32);
}

/* mse / l1 / bce_with_logits values for each reduction; shape and dtype
 * errors (no silent broadcasting of targets). */
static void test_loss_regression(void) {
    const float iv[3] = {1, 2, 3}, tv[3] = {1, 0, 5};
    const int64_t d[1] = {3};
    fulmen_tensor *in = mk(iv, 3, d, 1), *tg = mk(tv, 3, d, 1), *out = NULL;
    struct {
        const char *name;
        loss_fn fn;
        double none[3];
    } cases[] = {
        {"mse", fulmen_loss_mse, {0, 4, 4}},
        {"l1", fulmen_loss_l1, {0, 2, 2}},
        {"bce_with_logits", fulmen_loss_bce_with_logits, {0, 0, 0}},
    };
    /* bce: target t, logit x: max(x,0) - x t + log(1 + exp(-|x|)); targets here are {1,0,5}->use probs */
    const float pv[3] = {1, 0, 0.5f};
    fulmen_tensor *pt = mk(pv, 3, d, 1);
    for (int k = 0; k < 3; k++) {
        double x = iv[k], t = pv[k];
        cases[2].none[k] = fmax(x, 0) - x * t + log1p(exp(-fabs(x)));
    }
    const float sv[1] = {1};
    const int64_t d1[1] = {1}, d31[2] = {3, 1};
    fulmen_tensor *short_t = mk(sv, 1, d1, 1), *col = NULL, *itg = NULL;
    CHECK_OK(fulmen_tensor_reshape(tg, d31, 2, &col));
    CHECK_OK(fulmen_tensor_to_dtype(tg, FULMEN_DTYPE_I64, &itg));
    for (int c = 0; c < 3; c++) {
        int before = check_failed;
        fulmen_tensor *t = c == 2 ? pt : tg;
        double sum = cases[c].none[0] + cases[c].none[1] + cases[c].none[2];
        CHECK_OK(cases[c].fn(in, t, FULMEN_REDUCTION_NONE, &out));
        EXPECT_VALUES(out, cases[c].none, 3, 1e-6);
        fulmen_tensor_free(out);
        CHECK_OK(cases[c].fn(in, t, FULMEN_REDUCTION_MEAN, &out));
        CHECK_NEAR(check_item(out), sum / 3, 1e-6);
        fulmen_tensor_free(out);
        CHECK_OK(cases[c].fn(in, t, FULMEN_REDUCTION_SUM, &out));
        CHECK_NEAR(check_item(out), sum, 1e-6);
        fulmen_tensor_free(out);
        out = NULL;
        CHECK_ERR(cases[c].fn(in, short_t, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
        CHECK_ERR(cases[c].fn(in, col, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
        CHECK_ERR(cases[c].fn(in, itg, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
        CHECK_ERR(cases[c].fn(itg, itg, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
        CHECK_ERR(cases[c].fn(in, t, 7, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
        CHECK_ERR(cases[c].fn(in, NULL, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
        CHECK_ERR(cases[c].fn(in, WRONG, FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
        CHECK_ERR(cases[c].fn(in, freed_tensor(), FULMEN_REDUCTION_MEAN, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
        CHECK(out == NULL);
        BAD_HANDLE_CHECKS(cases[c].name, vec3(), cases[c].fn(x_, t, FULMEN_REDUCTION_MEAN, o_));
        if (check_failed != before) fprintf(stderr, "  (loss %s)\n", cases[c].name);
    }
    fulmen_tensor_free(short_t);
    fulmen_tensor_free(col);
    fulmen_tensor_free(itg);
    fulmen_tensor_free(pt);
    fulmen_tensor_free(in);
    fulmen_tensor_free(tg);
}

/* --------------------------------------------------------------- autograd */

/* y = sum(x*x) gives grad 2x; no grad before backward; gradients
 * accumulate; errors for int tensors, non-scalars and graphs without grad. */
static void test_autograd(void) {
    fulmen_tensor *x = vec3(), *g = NULL, *sq = NULL, *y = NULL;
    CHECK_OK(fulmen_tensor_set_requires_grad(x, true));
    bool rg = false;
    CHECK_OK(fulmen_tensor_requires_grad(x, &rg));
    CHECK(rg);
    static int sentinel;
    g = (fulmen_tensor *)&sentinel; /* must be overwritten with NULL */
    CHECK_OK(fulmen_tensor_grad(x, &g));
    CHECK(g == NULL);
    CHECK_OK(fulmen_tensor_mul(x, x, &sq));
    CHECK_OK(fulmen_tensor_sum(sq, &y));
    rg = false;
    CHECK_OK(fulmen_tensor_requires_grad(y, &rg));
    CHECK(rg);
    CHECK_ERR(fulmen_tensor_backward(sq), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_OK(fulmen_tensor_backward(y));
    CHECK_OK(fulmen_tensor_grad(x, &g));
    const double w[3] = {2, -4, 6};
    EXPECT_VALUES(g, w, 3, 1e-6);
    fulmen_tensor_free(g);
    fulmen_tensor_free(y);
    fulmen_tensor_free(sq);
    /* a second graph accumulates into the same .grad */
    sq = y = g = NULL;
    CHECK_OK(fulmen_tensor_mul(x, x, &sq));
    CHECK_OK(fulmen_tensor_sum(sq, &y));
    CHECK_OK(fulmen_tensor_backward(y));
    CHECK_OK(fulmen_tensor_grad(x, &g));
    const double w2[3] = {4, -8, 12};
    EXPECT_VALUES(g, w2, 3, 1e-6);
    fulmen_tensor_free(g);
    fulmen_tensor_free(y);
    fulmen_tensor_free(sq);
    /* setting requires_grad on a non-leaf fails; turning it off works */
    sq = NULL;
    CHECK_OK(fulmen_tensor_mul_scalar(x, 2, &sq));
    CHECK_ERR(fulmen_tensor_set_requires_grad(sq, false), FULMEN_CODE_INVALID_STATE, NULL);
    fulmen_tensor_free(sq);
    CHECK_OK(fulmen_tensor_set_requires_grad(x, false));
    CHECK_OK(fulmen_tensor_requires_grad(x, &rg));
    CHECK(!rg);
    /* backward of a tensor that needs no grad */
    y = NULL;
    CHECK_OK(fulmen_tensor_sum(x, &y));
    CHECK_ERR(fulmen_tensor_backward(y), FULMEN_CODE_INVALID_STATE, NULL);
    fulmen_tensor_free(y);
    /* integer tensors cannot require grad */
    const int64_t iv[2] = {1, 2}, id[1] = {2};
    fulmen_tensor *ints = mk_i64(iv, 2, id, 1);
    CHECK_ERR(fulmen_tensor_set_requires_grad(ints, true), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    fulmen_tensor_free(ints);
    /* bad handles */
    CHECK_ERR(fulmen_tensor_backward(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_backward(WRONG), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_backward(freed_tensor()), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_set_requires_grad(NULL, true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_set_requires_grad(WRONG, true), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_set_requires_grad(freed_tensor(), true), FULMEN_CODE_INVALID_HANDLE, NULL);
    BAD_HANDLE_CHECKS("grad", vec3(), fulmen_tensor_grad(x_, o_));
    fulmen_tensor_free(x);
}

/* -------------------------------------------------------------- lifetime */

/* keep outside a step has no effect (the test still frees the tensor);
 * double free, free(NULL) and freeing a wrong-type handle are harmless;
 * live handle counts follow creation and freeing. */
static void test_lifetime(void) {
    size_t base = fulmen_live_handles();
    fulmen_tensor *x = vec3();
    CHECK(fulmen_live_handles() == base + 1);
    CHECK_OK(fulmen_tensor_keep(x));
    CHECK(fulmen_live_handles() == base + 1);
    CHECK_ERR(fulmen_tensor_keep(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_keep(WRONG), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor_free(x);
    CHECK(fulmen_live_handles() == base);
    CHECK_ERR(fulmen_tensor_keep(x), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor_free(x); /* double free: ignored */
    fulmen_tensor_free(NULL);
    fulmen_tensor_free(WRONG); /* a model: must not be freed as a tensor */
    CHECK(fulmen_live_handles() == base);
    bool training = false;
    CHECK_OK(fulmen_model_is_training(g_model, &training));
    CHECK(fulmen_version() != NULL && strcmp(fulmen_version(), FULMEN_VERSION_STRING) == 0);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(0));
    CHECK_OK(fulmen_model_sequential_new(&g_model));
    test_dtype_round_trips();
    test_copy_conversions();
    test_half_conversions();
    test_from_data_errors();
    test_filled();
    test_random();
    test_arange_scalar();
    test_queries();
    test_conversions();
    test_clone_owns_storage();
    test_binary_ops();
    test_scalar_ops();
    test_unary_ops();
    test_matmul();
    test_softmax();
    test_reductions();
    test_max_min();
    test_reshape_view();
    test_flatten_permute_transpose();
    test_squeeze_narrow();
    test_cat_stack();
    test_index_gather();
    test_compare();
    test_loss_classification();
    test_loss_regression();
    test_autograd();
    test_lifetime();
    fulmen_model_free(g_model);
    fulmen_tensor_free(g_idx2d);
    /* Backward has run in this process: libtorch's autograd engine sized
     * its device queues, so the fake device is refused (and not added). */
    CHECK_ERR(fulmen_fake_device_register("npu", 1), FULMEN_CODE_INVALID_STATE, "before the first backward pass");
    return check_finish("test_tensor");
}

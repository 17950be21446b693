/*
 * Tests of the fulmen_model_* C API: every layer constructor, sequential
 * and named containers, forward passes, training mode, parameters and
 * state_dict names, safetensors save / load (strict, truncated, missing)
 * and TorchScript loading against the Python reference in tests/fixtures.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdint.h>
#include <unistd.h>

/* A live handle of another type (a tensor), cast to a model. */
static fulmen_tensor *g_tensor = NULL;
#define WRONG ((fulmen_model *)g_tensor)

/* A temporary directory for saved files, removed at the end. */
static char g_dir[64] = "/tmp/fulmen_test_model_XXXXXX";

/* ---------------------------------------------------------------- helpers */

/* A handle that was live and is now freed. */
static fulmen_model *freed_model(void) {
    fulmen_model *m = NULL;
    fulmen_error *e = fulmen_model_sequential_new(&m);
    fulmen_error_free(e);
    fulmen_model_free(m);
    return m;
}

/* Exits on a set-up error (the calls are checked elsewhere). */
static void must(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "set-up failed: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        exit(2);
    }
}

static fulmen_model *linear(int64_t in, int64_t out) {
    fulmen_model *m = NULL;
    must(fulmen_model_linear_new(in, out, true, &m));
    return m;
}

static fulmen_model *activation(int32_t kind, double param) {
    fulmen_model *m = NULL;
    must(fulmen_model_activation_new(kind, param, &m));
    return m;
}

/* Linear(in, hidden) -> ReLU -> Linear(hidden, out). */
static fulmen_model *mlp(int64_t in, int64_t hidden, int64_t out) {
    fulmen_model *m = NULL;
    must(fulmen_model_sequential_new(&m));
    must(fulmen_model_push(m, linear(in, hidden)));
    must(fulmen_model_push(m, activation(FULMEN_ACTIVATION_RELU, 0)));
    must(fulmen_model_push(m, linear(hidden, out)));
    return m;
}

static fulmen_tensor *tensor(const float *v, size_t n, const int64_t *d, size_t nd) {
    return check_f32(v, n, d, nd);
}

/* Copies up to n values of a tensor as doubles (checks the count). */
static void values(const fulmen_tensor *t, double *out, size_t n) {
    size_t numel = 0;
    CHECK_OK(fulmen_tensor_numel(t, &numel));
    CHECK(numel == n);
    if (numel == n) CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, out, n * sizeof(double)));
}

/* Checks a tensor's shape. */
#define EXPECT_SHAPE(t, dims, nd) expect_shape(__LINE__, (t), (dims), (nd))
static void expect_shape(int line, const fulmen_tensor *t, const int64_t *dims, size_t nd) {
    int before = check_failed;
    int64_t got[8] = {0};
    size_t got_nd = 99;
    CHECK_OK(fulmen_tensor_shape(t, got, 8, &got_nd));
    CHECK(got_nd == nd);
    for (size_t i = 0; i < nd && i < got_nd; i++) CHECK(got[i] == dims[i]);
    if (check_failed != before) fprintf(stderr, "  (EXPECT_SHAPE called from line %d)\n", line);
}

/* Runs forward and returns the output (NULL on error, reported). */
static fulmen_tensor *forward(const fulmen_model *m, const fulmen_tensor *x) {
    fulmen_tensor *y = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y));
    return y;
}

/* Whether two tensors hold exactly the same float values. */
static int same_values(const fulmen_tensor *a, const fulmen_tensor *b) {
    size_t na = 0, nb = 0;
    if (a == NULL || b == NULL) return 0;
    CHECK_OK(fulmen_tensor_numel(a, &na));
    CHECK_OK(fulmen_tensor_numel(b, &nb));
    if (na != nb || na > 4096) return 0;
    static double va[4096], vb[4096];
    CHECK_OK(fulmen_tensor_copy_to(a, FULMEN_DTYPE_F64, va, na * sizeof(double)));
    CHECK_OK(fulmen_tensor_copy_to(b, FULMEN_DTYPE_F64, vb, nb * sizeof(double)));
    return memcmp(va, vb, na * sizeof(double)) == 0;
}

/* Reads state_dict name `i` into buf (empty on error). */
static void sd_name(const fulmen_model *m, size_t i, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    CHECK_OK(fulmen_model_state_dict_name(m, i, buf, cap, &len));
    CHECK(strlen(buf) == len);
}

/* Checks that the state_dict names are exactly names[0..n]. */
#define EXPECT_NAMES(m, names, n) expect_names(__LINE__, (m), (names), (n))
static void expect_names(int line, const fulmen_model *m, const char *const *names, size_t n) {
    int before = check_failed;
    size_t len = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &len));
    CHECK(len == n);
    for (size_t i = 0; i < n && i < len; i++) {
        char buf[128];
        sd_name(m, i, buf, sizeof buf);
        if (strcmp(buf, names[i]) != 0) {
            check_failed++;
            fprintf(stderr, "  state_dict[%zu] is \"%s\", want \"%s\"\n", i, buf, names[i]);
        }
    }
    if (check_failed != before) fprintf(stderr, "  (EXPECT_NAMES called from line %d)\n", line);
}

static int64_t num_params(const fulmen_model *m) {
    int64_t n = -1;
    CHECK_OK(fulmen_model_num_parameters(m, &n));
    return n;
}

/* Reads a whole file into a malloc'd buffer. */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

static void path_in_dir(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_dir, name);
}

/* ----------------------------------------------------------------- layers */

/* Linear: y = x W^T + b computed by hand from its state_dict; parameter
 * counts with and without bias; bad sizes and inputs. */
static void test_linear(void) {
    fulmen_model *m = NULL, *nb = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_linear_new(3, 2, true, &m));
    CHECK_OK(fulmen_model_linear_new(3, 2, false, &nb));
    CHECK(num_params(m) == 8);
    CHECK(num_params(nb) == 6);
    const char *names[] = {"weight", "bias"};
    EXPECT_NAMES(m, names, 2);
    EXPECT_NAMES(nb, names, 1);
    fulmen_tensor *w = NULL, *b = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "weight", &w));
    CHECK_OK(fulmen_model_state_dict_get(m, "bias", &b));
    const int64_t wd[2] = {2, 3};
    EXPECT_SHAPE(w, wd, 2);
    double wv[6], bv[2], yv[4];
    values(w, wv, 6);
    values(b, bv, 2);
    /* PyTorch init: |w| <= 1/sqrt(in_features) */
    for (int i = 0; i < 6; i++) CHECK(fabs(wv[i]) <= 1 / sqrt(3.0) + 1e-6);
    const float xv[6] = {1, 2, 3, -1, 0, 0.5f};
    const int64_t xd[2] = {2, 3};
    fulmen_tensor *x = tensor(xv, 6, xd, 2), *y = forward(m, x);
    const int64_t yd[2] = {2, 2};
    EXPECT_SHAPE(y, yd, 2);
    values(y, yv, 4);
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < 2; o++) {
            double want = bv[o];
            for (int i = 0; i < 3; i++) want += xv[r * 3 + i] * wv[o * 3 + i];
            CHECK_NEAR(yv[r * 2 + o], want, 1e-5);
        }
    /* wrong feature count, wrong dtype */
    const int64_t x4d[2] = {1, 4};
    const float x4v[4] = {0, 0, 0, 0};
    fulmen_tensor *x4 = tensor(x4v, 4, x4d, 2), *xd64 = NULL, *out = NULL;
    CHECK_ERR(fulmen_model_forward(m, x4, &out), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_OK(fulmen_tensor_to_dtype(x, FULMEN_DTYPE_F64, &xd64));
    CHECK_ERR(fulmen_model_forward(m, xd64, &out), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK(out == NULL);
    CHECK_ERR(fulmen_model_linear_new(0, 2, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_linear_new(3, -1, true, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_linear_new(3, 2, true, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x4);
    fulmen_tensor_free(xd64);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(w);
    fulmen_tensor_free(b);
    fulmen_model_free(m);
    fulmen_model_free(nb);
}

/* A forward of `m` (of its child at `child` when not NULL) on ones and the
 * backward of its sum, as a host's step runs them. */
static fulmen_error *ones_forward_backward(fulmen_model *m, const char *child) {
    const int64_t shape[2] = {4, 3};
    fulmen_tensor *x = NULL, *y = NULL, *loss = NULL;
    fulmen_error *e = fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &x);
    if (!e) e = child ? fulmen_model_forward_child(m, child, x, &y) : fulmen_model_forward(m, x, &y);
    if (!e) e = fulmen_tensor_sum(y, &loss);
    if (!e) e = fulmen_tensor_backward(loss);
    fulmen_tensor_free(loss);
    fulmen_tensor_free(y);
    fulmen_tensor_free(x);
    return e;
}

/* What test_measure_flops measures: a step of the model `ud`. */
static fulmen_error *measured_step(void *ud) { return ones_forward_backward(ud, NULL); }

static fulmen_error *measured_failure(void *ud) {
    (void)ud;
    return fulmen_error_new(FULMEN_CODE_CALLBACK, "the simulator crashed");
}

static fulmen_error *measured_nested(void *ud) {
    uint64_t n = 0;
    return fulmen_measure_flops(measured_step, ud, &n);
}

/* FLOPs as PyTorch's FlopCounterMode counts them: 2 * m * n * k per
 * matrix product, the backward's included; failures and nesting. */
static void test_measure_flops(void) {
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(3, 2, true, &m));
    const int64_t shape[2] = {4, 3};
    fulmen_tensor *x = NULL, *w = NULL, *grad = NULL;
    CHECK_OK(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &x));
    uint64_t n = 0;
    CHECK_OK(fulmen_model_measure_flops(m, x, false, &n));
    CHECK(n == 2 * 4 * 3 * 2);
    /* The input needs no gradient: the backward computes the weight's only,
     * and hands it back without writing it. */
    CHECK_OK(fulmen_model_measure_flops(m, x, true, &n));
    CHECK(n == 2 * (2 * 4 * 3 * 2));
    CHECK_OK(fulmen_model_state_dict_get(m, "weight", &w));
    CHECK_OK(fulmen_tensor_grad(w, &grad));
    CHECK(grad == NULL);
    CHECK_OK(fulmen_measure_flops(measured_step, m, &n));
    CHECK(n == 2 * (2 * 4 * 3 * 2));
    n = 7;
    CHECK_ERR(fulmen_measure_flops(measured_failure, NULL, &n), FULMEN_CODE_CALLBACK, "the simulator crashed");
    CHECK(n == 7);
    CHECK_ERR(fulmen_measure_flops(measured_nested, m, &n), FULMEN_CODE_INVALID_STATE, "do not nest");
    CHECK_ERR(fulmen_measure_flops(NULL, NULL, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_measure_flops(measured_step, m, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_measure_flops(m, x, true, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_measure_flops(WRONG, x, true, &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_OK(fulmen_measure_flops(measured_step, m, &n));
    CHECK(n == 2 * (2 * 4 * 3 * 2));
    fulmen_tensor_free(grad);
    fulmen_tensor_free(w);
    fulmen_tensor_free(x);
    fulmen_model_free(m);
}

/* What test_flops_by_module measures: the child "enc" of the named
 * container `ud`, run by path as a host's own forward would. */
static fulmen_error *measured_child(void *ud) { return ones_forward_backward(ud, "enc"); }

/* FlopCounterMode's counts by module: "Global", the root by its class,
 * children by path, the backward with its forward's modules; operators in
 * the order first counted; the table; bad arguments. */
static void test_flops_by_module(void) {
    fulmen_model *seq = NULL, *l1 = NULL, *act = NULL, *l2 = NULL;
    CHECK_OK(fulmen_model_sequential_new(&seq));
    CHECK_OK(fulmen_model_linear_new(3, 5, true, &l1));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &act));
    CHECK_OK(fulmen_model_linear_new(5, 2, true, &l2));
    CHECK_OK(fulmen_model_push(seq, l1));
    CHECK_OK(fulmen_model_push(seq, act));
    CHECK_OK(fulmen_model_push(seq, l2));
    const int64_t shape[2] = {4, 3};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &x));
    fulmen_flop_counts *c = NULL;
    CHECK_OK(fulmen_model_measure_flops_by_module(seq, x, true, &c));
    const uint64_t first = 2 * 4 * 5 * 3, second = 2 * 4 * 2 * 5;
    size_t n = 0, len = 0;
    char name[64];
    CHECK_OK(fulmen_flop_counts_num_modules(c, &n));
    CHECK(n == 4);
    const char *want[4] = {"Global", "Sequential", "Sequential.0", "Sequential.2"};
    for (size_t i = 0; i < 4 && i < n; i++) {
        CHECK_OK(fulmen_flop_counts_module_name(c, i, name, sizeof name, &len));
        CHECK(strcmp(name, want[i]) == 0 && len == strlen(want[i]));
    }
    uint64_t flops = 0;
    CHECK_OK(fulmen_flop_counts_total(c, NULL, &flops));
    CHECK(flops == 2 * first + 3 * second);
    CHECK_OK(fulmen_flop_counts_total(c, "Sequential", &flops));
    CHECK(flops == 2 * first + 3 * second);
    /* The first layer's input needs no gradient: its weight's only. */
    CHECK_OK(fulmen_flop_counts_total(c, "Sequential.0", &flops));
    CHECK(flops == 2 * first);
    CHECK_OK(fulmen_flop_counts_total(c, "Sequential.1", &flops));
    CHECK(flops == 0);
    CHECK_OK(fulmen_flop_counts_num_operators(c, "Sequential.2", &n));
    CHECK(n == 2);
    CHECK_OK(fulmen_flop_counts_operator(c, "Sequential.2", 0, name, sizeof name, &len, &flops));
    CHECK(strcmp(name, "aten::addmm") == 0 && flops == second);
    CHECK_OK(fulmen_flop_counts_operator(c, "Sequential.2", 1, name, sizeof name, &len, &flops));
    CHECK(strcmp(name, "aten::mm") == 0 && flops == 2 * second);
    CHECK_OK(fulmen_flop_counts_num_operators(c, "Sequential.9", &n));
    CHECK(n == 0);
    CHECK_ERR(fulmen_flop_counts_operator(c, "Sequential.2", 2, name, sizeof name, &len, &flops),
              FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_flop_counts_module_name(c, 4, name, sizeof name, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_flop_counts_module_name(c, 2, name, 4, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(len == strlen("Sequential.0"));
    /* The table: its length first, then the text. */
    CHECK_ERR(fulmen_flop_counts_table(c, 2, NULL, 0, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    char *table = malloc(len + 1);
    CHECK(table != NULL);
    CHECK_OK(fulmen_flop_counts_table(c, 2, table, len + 1, &len));
    CHECK(strncmp(table, "Module", 6) == 0);
    CHECK(strstr(table, "\nSequential  ") != NULL && strstr(table, "\n Sequential.0  ") != NULL);
    CHECK(strstr(table, "Global") == NULL); /* the root holds every FLOP */
    free(table);
    CHECK_ERR(fulmen_flop_counts_total(NULL, NULL, &flops), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_flop_counts_total((fulmen_flop_counts *)g_tensor, NULL, &flops), FULMEN_CODE_INVALID_HANDLE,
              NULL);
    CHECK_ERR(fulmen_flop_counts_num_modules(c, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_flop_counts_free(c);
    CHECK_ERR(fulmen_flop_counts_num_modules(c, &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_flop_counts_free(c);
    fulmen_flop_counts_free(NULL);

    /* A child run by path from the host's code, under a named container. */
    fulmen_model *named = NULL;
    CHECK_OK(fulmen_model_named_new(&named));
    CHECK_OK(fulmen_model_add(named, "enc", seq));
    c = NULL;
    CHECK_OK(fulmen_measure_flops_by_module(measured_child, named, &c));
    CHECK_OK(fulmen_flop_counts_total(c, "Module.enc.2", &flops));
    CHECK(flops == 3 * second);
    CHECK_OK(fulmen_flop_counts_total(c, "Module", &flops));
    CHECK(flops == 2 * first + 3 * second);
    fulmen_flop_counts_free(c);
    c = NULL;
    CHECK_ERR(fulmen_measure_flops_by_module(measured_failure, NULL, &c), FULMEN_CODE_CALLBACK, NULL);
    CHECK(c == NULL);
    CHECK_ERR(fulmen_model_measure_flops_by_module(named, x, true, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_tensor_free(x);
    fulmen_model_free(named);
}

/* Conv2d: default options, output shapes with stride / padding, the value
 * of a 3x3 kernel over ones (sum of weights + bias), bad configurations. */
static void test_conv2d(void) {
    fulmen_conv2d_options o = fulmen_conv2d_options_default(3);
    CHECK(o.kernel[0] == 3 && o.kernel[1] == 3);
    CHECK(o.stride[0] == 1 && o.stride[1] == 1);
    CHECK(o.padding[0] == 0 && o.padding[1] == 0);
    CHECK(o.dilation[0] == 1 && o.dilation[1] == 1);
    CHECK(o.groups == 1 && o.bias);
    fulmen_model *c = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_conv2d_new(1, 1, &o, &c));
    CHECK(num_params(c) == 10);
    const int64_t d[4] = {1, 1, 3, 3};
    fulmen_tensor *ones = NULL, *w = NULL, *b = NULL;
    CHECK_OK(fulmen_tensor_ones(d, 4, FULMEN_DTYPE_F32, &ones));
    fulmen_tensor *y = forward(c, ones);
    const int64_t yd[4] = {1, 1, 1, 1};
    EXPECT_SHAPE(y, yd, 4);
    CHECK_OK(fulmen_model_state_dict_get(c, "weight", &w));
    CHECK_OK(fulmen_model_state_dict_get(c, "bias", &b));
    EXPECT_SHAPE(w, d, 4);
    double wv[9], bv[1], sum = 0;
    values(w, wv, 9);
    values(b, bv, 1);
    for (int i = 0; i < 9; i++) sum += wv[i];
    CHECK_NEAR(check_item(y), sum + bv[0], 1e-5);
    fulmen_tensor_free(y);
    fulmen_tensor_free(w);
    fulmen_tensor_free(b);
    fulmen_tensor_free(ones);
    fulmen_model_free(c);

    /* stride 2, padding 1, no bias: [2,3,5,5] -> [2,4,3,3] */
    o.stride[0] = o.stride[1] = 2;
    o.padding[0] = o.padding[1] = 1;
    o.bias = false;
    CHECK_OK(fulmen_model_conv2d_new(3, 4, &o, &c));
    CHECK(num_params(c) == 4 * 3 * 9);
    const char *names[] = {"weight"};
    EXPECT_NAMES(c, names, 1);
    const int64_t xd[4] = {2, 3, 5, 5};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_randn(xd, 4, FULMEN_DTYPE_F32, &x));
    y = forward(c, x);
    const int64_t yd2[4] = {2, 4, 3, 3};
    EXPECT_SHAPE(y, yd2, 4);
    fulmen_tensor_free(y);
    y = NULL;
    /* wrong channel count */
    fulmen_model *c1 = NULL;
    fulmen_conv2d_options o1 = fulmen_conv2d_options_default(3);
    CHECK_OK(fulmen_model_conv2d_new(2, 4, &o1, &c1));
    CHECK_ERR(fulmen_model_forward(c1, x, &y), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(y == NULL);
    fulmen_model_free(c1);
    /* groups = 2 with dilation 2 and a rectangular kernel */
    fulmen_conv2d_options g = fulmen_conv2d_options_default(3);
    g.kernel[1] = 1;
    g.groups = 2;
    g.dilation[0] = 2;
    fulmen_model *cg = NULL;
    CHECK_OK(fulmen_model_conv2d_new(4, 6, &g, &cg));
    CHECK(num_params(cg) == 6 * 2 * 3 * 1 + 6);
    const int64_t gd[4] = {1, 4, 7, 3};
    fulmen_tensor *gx = NULL;
    CHECK_OK(fulmen_tensor_zeros(gd, 4, FULMEN_DTYPE_F32, &gx));
    y = forward(cg, gx);
    const int64_t gyd[4] = {1, 6, 3, 3}; /* 7 - 2*(3-1) = 3 */
    EXPECT_SHAPE(y, gyd, 4);
    fulmen_tensor_free(y);
    fulmen_tensor_free(gx);
    fulmen_model_free(cg);
    /* bad configurations */
    fulmen_conv2d_options e = fulmen_conv2d_options_default(3);
    e.groups = 2;
    CHECK_ERR(fulmen_model_conv2d_new(3, 4, &e, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    e = fulmen_conv2d_options_default(0);
    CHECK_ERR(fulmen_model_conv2d_new(3, 4, &e, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    e = fulmen_conv2d_options_default(3);
    e.stride[1] = 0;
    CHECK_ERR(fulmen_model_conv2d_new(3, 4, &e, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    e = fulmen_conv2d_options_default(3);
    e.padding[0] = -1;
    CHECK_ERR(fulmen_model_conv2d_new(3, 4, &e, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    e = fulmen_conv2d_options_default(3);
    CHECK_ERR(fulmen_model_conv2d_new(0, 4, &e, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_conv2d_new(3, 4, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_conv2d_new(3, 4, &e, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
    fulmen_model_free(c);
}

/* MaxPool2d / AvgPool2d: values over a 4x4 ramp, stride 0 = kernel,
 * explicit stride, bad kernel / padding, inputs without spatial dims. */
static void test_pools(void) {
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (float)i;
    const int64_t d[4] = {1, 1, 4, 4};
    fulmen_tensor *x = tensor(v, 16, d, 4);
    fulmen_model *mp = NULL, *ap = NULL, *mp1 = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_max_pool2d_new(2, 0, 0, &mp));
    CHECK_OK(fulmen_model_avg_pool2d_new(2, 0, 0, &ap));
    CHECK_OK(fulmen_model_max_pool2d_new(3, 1, 1, &mp1));
    CHECK(num_params(mp) == 0);
    size_t len = 9;
    CHECK_OK(fulmen_model_state_dict_len(ap, &len));
    CHECK(len == 0);
    const int64_t yd[4] = {1, 1, 2, 2};
    fulmen_tensor *y = forward(mp, x);
    double got[16];
    EXPECT_SHAPE(y, yd, 4);
    values(y, got, 4);
    CHECK(got[0] == 5 && got[1] == 7 && got[2] == 13 && got[3] == 15);
    fulmen_tensor_free(y);
    y = forward(ap, x);
    values(y, got, 4);
    CHECK(got[0] == 2.5 && got[1] == 4.5 && got[2] == 10.5 && got[3] == 12.5);
    fulmen_tensor_free(y);
    y = forward(mp1, x); /* 3x3 windows with padding 1 keep the size */
    EXPECT_SHAPE(y, d, 4);
    values(y, got, 16);
    CHECK(got[0] == 5 && got[5] == 10 && got[15] == 15);
    fulmen_tensor_free(y);
    /* a 3-D input [C, H, W] is accepted as in PyTorch; 2-D is not */
    const int64_t d3[3] = {1, 4, 4}, d2[2] = {4, 4}, yd3[3] = {1, 2, 2};
    fulmen_tensor *x3 = NULL, *x2 = NULL;
    CHECK_OK(fulmen_tensor_reshape(x, d3, 3, &x3));
    CHECK_OK(fulmen_tensor_reshape(x, d2, 2, &x2));
    y = forward(mp, x3);
    EXPECT_SHAPE(y, yd3, 3);
    fulmen_tensor_free(y);
    y = NULL;
    CHECK_ERR(fulmen_model_forward(ap, x2, &y), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(y == NULL);
    fulmen_tensor_free(x3);
    fulmen_tensor_free(x2);
    CHECK_ERR(fulmen_model_max_pool2d_new(0, 0, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_avg_pool2d_new(2, -1, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_max_pool2d_new(2, 0, 2, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL); /* pad > k/2 */
    CHECK_ERR(fulmen_model_avg_pool2d_new(2, 0, -1, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_max_pool2d_new(2, 0, 0, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_avg_pool2d_new(2, 0, 0, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
    fulmen_model_free(mp);
    fulmen_model_free(ap);
    fulmen_model_free(mp1);
}

/* BatchNorm: buffers in the state_dict, normalised batch in training,
 * running statistics updated by momentum and used in eval; bad args. */
static void test_batch_norm(void) {
    fulmen_model *bn = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_batch_norm_new(2, 1e-5, 0.1, &bn));
    CHECK(num_params(bn) == 4);
    const char *names[] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    EXPECT_NAMES(bn, names, 5);
    /* column 0: {1,3} (mean 2, biased var 1), column 1: {10,10} (var 0) */
    const float v[4] = {1, 10, 3, 10};
    const int64_t d[2] = {2, 2};
    fulmen_tensor *x = tensor(v, 4, d, 2), *y = forward(bn, x);
    double got[4];
    values(y, got, 4);
    CHECK_NEAR(got[0], -1.0, 1e-4);
    CHECK_NEAR(got[2], 1.0, 1e-4);
    CHECK_NEAR(got[1], 0.0, 1e-4);
    fulmen_tensor_free(y);
    fulmen_tensor *rm = NULL, *rv = NULL, *nbt = NULL;
    CHECK_OK(fulmen_model_state_dict_get(bn, "running_mean", &rm));
    CHECK_OK(fulmen_model_state_dict_get(bn, "running_var", &rv));
    CHECK_OK(fulmen_model_state_dict_get(bn, "num_batches_tracked", &nbt));
    double m[2], var[2];
    values(rm, m, 2);
    values(rv, var, 2);
    CHECK_NEAR(m[0], 0.2, 1e-6); /* 0.9 * 0 + 0.1 * 2 */
    CHECK_NEAR(m[1], 1.0, 1e-6);
    CHECK_NEAR(var[0], 0.9 + 0.1 * 2.0, 1e-6); /* unbiased batch var 2 */
    CHECK_NEAR(var[1], 0.9, 1e-6);
    CHECK(check_item(nbt) == 1.0);
    int32_t dt = -1;
    CHECK_OK(fulmen_tensor_dtype(nbt, &dt));
    CHECK(dt == FULMEN_DTYPE_I64);
    /* eval uses the running statistics: (x - 0.2) / sqrt(1.1 + eps) */
    CHECK_OK(fulmen_model_set_training(bn, false));
    y = forward(bn, x);
    values(y, got, 4);
    CHECK_NEAR(got[0], (1 - 0.2) / sqrt(1.1 + 1e-5), 1e-5);
    CHECK_NEAR(got[1], (10 - 1.0) / sqrt(0.9 + 1e-5), 1e-4);
    fulmen_tensor_free(y);
    CHECK(check_item(nbt) == 1.0);
    /* 4-D input [N, C, H, W] works as BatchNorm2d */
    const int64_t d4[4] = {2, 2, 3, 3}, d4bad[4] = {2, 3, 3, 3};
    fulmen_tensor *x4 = NULL, *x4bad = NULL;
    CHECK_OK(fulmen_tensor_ones(d4, 4, FULMEN_DTYPE_F32, &x4));
    CHECK_OK(fulmen_tensor_ones(d4bad, 4, FULMEN_DTYPE_F32, &x4bad));
    y = forward(bn, x4);
    EXPECT_SHAPE(y, d4, 4);
    fulmen_tensor_free(y);
    y = NULL;
    CHECK_ERR(fulmen_model_forward(bn, x4bad, &y), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(y == NULL);
    fulmen_tensor_free(x4);
    fulmen_tensor_free(x4bad);
    CHECK_ERR(fulmen_model_batch_norm_new(0, 1e-5, 0.1, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_batch_norm_new(2, -1, 0.1, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_batch_norm_new(2, 1e-5, 1.5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_batch_norm_new(2, 1e-5, 0.1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(rm);
    fulmen_tensor_free(rv);
    fulmen_tensor_free(nbt);
    fulmen_tensor_free(x);
    fulmen_model_free(bn);
}

/* LayerNorm: rows normalised to mean 0 / variance 1; bad shapes. */
static void test_layer_norm(void) {
    const int64_t shape[1] = {3};
    fulmen_model *ln = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_layer_norm_new(shape, 1, 1e-5, &ln));
    CHECK(num_params(ln) == 6);
    const char *names[] = {"weight", "bias"};
    EXPECT_NAMES(ln, names, 2);
    const float v[6] = {1, 2, 3, -5, 0, 5};
    const int64_t d[2] = {2, 3};
    fulmen_tensor *x = tensor(v, 6, d, 2), *y = forward(ln, x);
    double got[6];
    values(y, got, 6);
    double s = sqrt(2.0 / 3.0 + 1e-5);
    CHECK_NEAR(got[0], -1 / s, 1e-4);
    CHECK_NEAR(got[1], 0, 1e-6);
    CHECK_NEAR(got[2], 1 / s, 1e-4);
    CHECK_NEAR(got[3], -5 / sqrt(50.0 / 3.0 + 1e-5), 1e-4);
    fulmen_tensor_free(y);
    y = NULL;
    const int64_t wrong[2] = {3, 2};
    fulmen_tensor *xw = NULL;
    CHECK_OK(fulmen_tensor_reshape(x, wrong, 2, &xw));
    CHECK_ERR(fulmen_model_forward(ln, xw, &y), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(y == NULL);
    fulmen_tensor_free(xw);
    const int64_t zero[1] = {0};
    CHECK_ERR(fulmen_model_layer_norm_new(NULL, 1, 1e-5, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_layer_norm_new(shape, 0, 1e-5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_layer_norm_new(zero, 1, 1e-5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_layer_norm_new(shape, 1, -1.0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_layer_norm_new(shape, 1, 1e-5, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
    fulmen_model_free(ln);
}

/* Dropout zeroes and rescales only in training mode; p outside [0,1]
 * is an error; p = 0 and p = 1 are the identity and all zeros. */
static void test_dropout(void) {
    fulmen_model *dp = NULL, *bad = NULL, *all = NULL;
    CHECK_OK(fulmen_manual_seed(1));
    CHECK_OK(fulmen_model_dropout_new(0.5, &dp));
    CHECK(num_params(dp) == 0);
    const int64_t d[1] = {1000};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_ones(d, 1, FULMEN_DTYPE_F32, &x));
    bool training = false;
    CHECK_OK(fulmen_model_is_training(dp, &training));
    CHECK(training); /* new modules train, as in PyTorch */
    fulmen_tensor *y = forward(dp, x);
    static double got[1000];
    values(y, got, 1000);
    int zeros = 0, twos = 0;
    for (int i = 0; i < 1000; i++) {
        zeros += got[i] == 0.0;
        twos += got[i] == 2.0;
    }
    CHECK(zeros + twos == 1000);
    CHECK(zeros > 400 && zeros < 600);
    fulmen_tensor_free(y);
    CHECK_OK(fulmen_model_set_training(dp, false));
    CHECK_OK(fulmen_model_is_training(dp, &training));
    CHECK(!training);
    y = forward(dp, x);
    values(y, got, 1000);
    int ones = 0;
    for (int i = 0; i < 1000; i++) ones += got[i] == 1.0;
    CHECK(ones == 1000);
    fulmen_tensor_free(y);
    CHECK_OK(fulmen_model_dropout_new(1.0, &all));
    y = forward(all, x);
    double s = 0;
    values(y, got, 1000);
    for (int i = 0; i < 1000; i++) s += fabs(got[i]);
    CHECK(s == 0.0);
    fulmen_tensor_free(y);
    CHECK_ERR(fulmen_model_dropout_new(1.5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_dropout_new(-0.1, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_dropout_new(NAN, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_dropout_new(0.5, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
    fulmen_model_free(dp);
    fulmen_model_free(all);
}

/* Embedding: rows of its weight for i64 / i32 ids; float ids and ids out
 * of range fail. */
static void test_embedding(void) {
    fulmen_model *e = NULL, *bad = NULL;
    CHECK_OK(fulmen_model_embedding_new(10, 4, &e));
    CHECK(num_params(e) == 40);
    const char *names[] = {"weight"};
    EXPECT_NAMES(e, names, 1);
    const int64_t ids[3] = {7, 0, 7}, d[1] = {3};
    fulmen_tensor *x = NULL, *x32 = NULL, *xf = NULL, *w = NULL;
    CHECK_OK(fulmen_tensor_from_data(ids, sizeof ids, FULMEN_DTYPE_I64, d, 1, &x));
    CHECK_OK(fulmen_tensor_to_dtype(x, FULMEN_DTYPE_I32, &x32));
    CHECK_OK(fulmen_tensor_to_dtype(x, FULMEN_DTYPE_F32, &xf));
    CHECK_OK(fulmen_model_state_dict_get(e, "weight", &w));
    double wv[40], yv[12];
    values(w, wv, 40);
    fulmen_tensor *y = forward(e, x);
    const int64_t yd[2] = {3, 4};
    EXPECT_SHAPE(y, yd, 2);
    values(y, yv, 12);
    int same = 1;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) same &= yv[r * 4 + c] == wv[ids[r] * 4 + c];
    CHECK(same);
    fulmen_tensor_free(y);
    y = forward(e, x32);
    CHECK(y != NULL);
    fulmen_tensor_free(y);
    y = NULL;
    CHECK_ERR(fulmen_model_forward(e, xf, &y), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    const int64_t big[1] = {10}, neg[1] = {-1}, d1[1] = {1};
    fulmen_tensor *xb = NULL, *xn = NULL;
    CHECK_OK(fulmen_tensor_from_data(big, sizeof big, FULMEN_DTYPE_I64, d1, 1, &xb));
    CHECK_OK(fulmen_tensor_from_data(neg, sizeof neg, FULMEN_DTYPE_I64, d1, 1, &xn));
    CHECK_ERR(fulmen_model_forward(e, xb, &y), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_model_forward(e, xn, &y), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(y == NULL);
    CHECK_ERR(fulmen_model_embedding_new(0, 4, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_embedding_new(10, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_embedding_new(10, 4, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(xb);
    fulmen_tensor_free(xn);
    fulmen_tensor_free(x);
    fulmen_tensor_free(x32);
    fulmen_tensor_free(xf);
    fulmen_tensor_free(w);
    fulmen_model_free(e);
}

/* Flatten: default (1, -1) and explicit ranges; out-of-range dims fail
 * at forward time. */
static void test_flatten(void) {
    fulmen_model *f = NULL, *f01 = NULL, *far = NULL;
    CHECK_OK(fulmen_model_flatten_new(1, -1, &f));
    CHECK_OK(fulmen_model_flatten_new(0, 1, &f01));
    CHECK_OK(fulmen_model_flatten_new(1, 5, &far));
    const int64_t d[3] = {2, 3, 4};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_zeros(d, 3, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *y = forward(f, x);
    const int64_t yd[2] = {2, 12}, yd01[2] = {6, 4};
    EXPECT_SHAPE(y, yd, 2);
    fulmen_tensor_free(y);
    y = forward(f01, x);
    EXPECT_SHAPE(y, yd01, 2);
    fulmen_tensor_free(y);
    y = NULL;
    CHECK_ERR(fulmen_model_forward(far, x, &y), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK(y == NULL);
    CHECK_ERR(fulmen_model_flatten_new(1, -1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_tensor_free(x);
    fulmen_model_free(f);
    fulmen_model_free(f01);
    fulmen_model_free(far);
}

/* Every fulmen_activation value against its formula; invalid kinds and a
 * non-integer softmax dimension fail. */
static void test_activations(void) {
    const float v[3] = {-1.0f, 0.5f, 2.0f};
    const int64_t d[2] = {1, 3};
    fulmen_tensor *x = tensor(v, 3, d, 2);
    double lse = log(exp(-1.0) + exp(0.5) + exp(2.0));
    for (int32_t k = FULMEN_ACTIVATION_RELU; k <= FULMEN_ACTIVATION_IDENTITY; k++) {
        int before = check_failed;
        double param = k == FULMEN_ACTIVATION_LEAKY_RELU ? 0.2
                       : k == FULMEN_ACTIVATION_ELU ? 1.5
                       : (k == FULMEN_ACTIVATION_SOFTMAX || k == FULMEN_ACTIVATION_LOG_SOFTMAX) ? 1.0
                                                                                                 : 123.0;
        fulmen_model *m = NULL;
        CHECK_OK(fulmen_model_activation_new(k, param, &m));
        if (m == NULL) continue;
        CHECK(num_params(m) == 0);
        fulmen_tensor *y = forward(m, x);
        double got[3], want[3];
        values(y, got, 3);
        for (int i = 0; i < 3; i++) {
            double a = v[i];
            switch (k) {
            case FULMEN_ACTIVATION_RELU: want[i] = a > 0 ? a : 0; break;
            case FULMEN_ACTIVATION_LEAKY_RELU: want[i] = a > 0 ? a : 0.2 * a; break;
            case FULMEN_ACTIVATION_GELU: want[i] = 0.5 * a * (1 + erf(a / sqrt(2.0))); break;
            case FULMEN_ACTIVATION_SIGMOID: want[i] = 1 / (1 + exp(-a)); break;
            case FULMEN_ACTIVATION_TANH: want[i] = tanh(a); break;
            case FULMEN_ACTIVATION_SILU: want[i] = a / (1 + exp(-a)); break;
            case FULMEN_ACTIVATION_ELU: want[i] = a > 0 ? a : 1.5 * (exp(a) - 1); break;
            case FULMEN_ACTIVATION_SOFTMAX: want[i] = exp(a - lse); break;
            case FULMEN_ACTIVATION_LOG_SOFTMAX: want[i] = a - lse; break;
            default: want[i] = a; break;
            }
            CHECK_NEAR(got[i], want[i], 1e-6);
        }
        fulmen_tensor_free(y);
        fulmen_model_free(m);
        if (check_failed != before) fprintf(stderr, "  (activation %d)\n", k);
    }
    /* softmax over dim 0 of a [1,3] input is all ones */
    fulmen_model *sm0 = activation(FULMEN_ACTIVATION_SOFTMAX, 0), *bad = NULL;
    fulmen_tensor *y = forward(sm0, x);
    double got[3];
    values(y, got, 3);
    CHECK(got[0] == 1.0 && got[1] == 1.0 && got[2] == 1.0);
    fulmen_tensor_free(y);
    fulmen_model_free(sm0);
    CHECK_ERR(fulmen_model_activation_new(18, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_activation_new(-1, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_activation_new(FULMEN_ACTIVATION_SOFTMAX, 0.5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    /* a softmax dimension beyond the input fails at forward */
    fulmen_model *sm5 = activation(FULMEN_ACTIVATION_SOFTMAX, 5);
    y = NULL;
    CHECK_ERR(fulmen_model_forward(sm5, x, &y), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(y == NULL);
    fulmen_model_free(sm5);
    fulmen_tensor_free(x);
}

/* ------------------------------------------------------------- containers */

/* Sequential push: children named 0, 1, 2; forward shape; the pushed
 * child handle is consumed; bad pushes leave both handles usable. */
static void test_sequential(void) {
    CHECK_OK(fulmen_manual_seed(3));
    fulmen_model *seq = NULL, *child = NULL;
    CHECK_OK(fulmen_model_sequential_new(&seq));
    size_t len = 9;
    CHECK_OK(fulmen_model_state_dict_len(seq, &len));
    CHECK(len == 0 && num_params(seq) == 0);
    child = linear(4, 3);
    size_t live = fulmen_live_handles();
    CHECK_OK(fulmen_model_push(seq, child));
    CHECK(fulmen_live_handles() == live - 1);
    bool training = false;
    CHECK_ERR(fulmen_model_is_training(child, &training), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_model_free(child); /* harmless: already consumed */
    CHECK_OK(fulmen_model_push(seq, activation(FULMEN_ACTIVATION_TANH, 0)));
    CHECK_OK(fulmen_model_push(seq, linear(3, 2)));
    const char *names[] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    EXPECT_NAMES(seq, names, 4);
    CHECK(num_params(seq) == 4 * 3 + 3 + 3 * 2 + 2);
    const int64_t xd[2] = {5, 4};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_randn(xd, 2, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *y = forward(seq, x);
    const int64_t yd[2] = {5, 2};
    EXPECT_SHAPE(y, yd, 2);
    /* the same as running the children one by one */
    fulmen_tensor *h0 = NULL, *h1 = NULL, *h2 = NULL;
    CHECK_OK(fulmen_model_forward_child(seq, "0", x, &h0));
    CHECK_OK(fulmen_model_forward_child(seq, "1", h0, &h1));
    CHECK_OK(fulmen_model_forward_child(seq, "2", h1, &h2));
    CHECK(same_values(y, h2));
    fulmen_tensor_free(h0);
    fulmen_tensor_free(h1);
    fulmen_tensor_free(h2);
    fulmen_tensor_free(y);

    /* failures consume nothing */
    fulmen_model *lin = linear(2, 2), *named = NULL, *c2 = linear(2, 2);
    CHECK_OK(fulmen_model_named_new(&named));
    CHECK_ERR(fulmen_model_push(lin, c2), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_push(named, c2), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_push(seq, seq), FULMEN_CODE_INVALID_ARGUMENT, "itself");
    CHECK(num_params(c2) == 6);
    CHECK(num_params(lin) == 6);
    CHECK(num_params(seq) == 23);
    CHECK_ERR(fulmen_model_push(NULL, c2), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_push(seq, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_push(seq, WRONG), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_push(WRONG, c2), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_push(seq, freed_model()), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_push(freed_model(), c2), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(num_params(seq) == 23);
    /* a sequential inside a sequential gets a nested prefix */
    fulmen_model *outer = NULL;
    CHECK_OK(fulmen_model_sequential_new(&outer));
    CHECK_OK(fulmen_model_push(outer, c2));
    CHECK_OK(fulmen_model_push(outer, seq));
    const char *onames[] = {"0.weight", "0.bias", "1.0.weight", "1.0.bias", "1.2.weight", "1.2.bias"};
    EXPECT_NAMES(outer, onames, 6);
    CHECK_ERR(fulmen_model_num_parameters(seq, &(int64_t){0}), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_model_free(outer);
    fulmen_model_free(lin);
    fulmen_model_free(named);
    fulmen_tensor_free(x);
}

/* Linear(3, 4) -> Sequential(Linear(4, 8), Dropout(0.3), Tanh, Linear(8, 1)),
 * from seed 7. */
static fulmen_model *dropout_net(void) {
    fulmen_model *m = NULL, *block = NULL, *drop = NULL;
    must(fulmen_manual_seed(7));
    must(fulmen_model_sequential_new(&m));
    must(fulmen_model_push(m, linear(3, 4)));
    must(fulmen_model_sequential_new(&block));
    must(fulmen_model_push(block, linear(4, 8)));
    must(fulmen_model_dropout_new(0.3, &drop));
    must(fulmen_model_push(block, drop));
    must(fulmen_model_push(block, activation(FULMEN_ACTIVATION_TANH, 0)));
    must(fulmen_model_push(block, linear(8, 1)));
    must(fulmen_model_push(m, block));
    return m;
}

#define NET_PARAMS 6

/* One forward and backward of `m` on `x` from seed 3: writes the loss and
 * every parameter's gradient (new handles). */
static void loss_and_grads(fulmen_model *m, const fulmen_tensor *x, fulmen_tensor **loss,
                           fulmen_tensor *grads[NET_PARAMS]) {
    CHECK_OK(fulmen_manual_seed(3));
    fulmen_tensor *y = forward(m, x);
    CHECK_OK(fulmen_tensor_mean(y, loss));
    CHECK_OK(fulmen_tensor_backward(*loss));
    fulmen_tensor *params[NET_PARAMS] = {NULL};
    size_t n = 0;
    CHECK_OK(fulmen_model_parameters(m, false, params, NET_PARAMS, &n));
    CHECK(n == NET_PARAMS);
    for (size_t i = 0; i < n; i++) {
        grads[i] = NULL;
        CHECK_OK(fulmen_tensor_grad(params[i], &grads[i]));
        CHECK(grads[i] != NULL);
        fulmen_tensor_free(params[i]);
    }
    fulmen_tensor_free(y);
}

/* Activation checkpointing: a checkpointed block with dropout gives the
 * loss and gradients of the plain forward exactly; bad paths are refused
 * and change nothing. */
static void test_activation_checkpointing(void) {
    fulmen_model *plain = dropout_net(), *checkpointed = dropout_net();
    CHECK_OK(fulmen_model_set_activation_checkpointing(checkpointed, "1", true));
    CHECK_OK(fulmen_model_set_activation_checkpointing(checkpointed, "1.0", true)); /* nested */
    CHECK_ERR(fulmen_model_set_activation_checkpointing(checkpointed, "9", true), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_set_activation_checkpointing(NULL, "1", true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_set_activation_checkpointing(WRONG, "1", true), FULMEN_CODE_INVALID_HANDLE, NULL);
    const int64_t xd[2] = {6, 3};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_randn(xd, 2, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *la = NULL, *lb = NULL, *ga[NET_PARAMS], *gb[NET_PARAMS];
    loss_and_grads(plain, x, &la, ga);
    loss_and_grads(checkpointed, x, &lb, gb);
    CHECK(same_values(la, lb));
    for (size_t i = 0; i < NET_PARAMS; i++) {
        CHECK(same_values(ga[i], gb[i]));
        fulmen_tensor_free(ga[i]);
        fulmen_tensor_free(gb[i]);
    }
    /* Off again (and the model itself, a path of NULL, on and off). */
    CHECK_OK(fulmen_model_set_activation_checkpointing(checkpointed, "1", false));
    CHECK_OK(fulmen_model_set_activation_checkpointing(checkpointed, NULL, true));
    CHECK_OK(fulmen_model_set_activation_checkpointing(checkpointed, "", false));
    fulmen_tensor_free(la);
    fulmen_tensor_free(lb);
    fulmen_tensor_free(x);
    fulmen_model_free(plain);
    fulmen_model_free(checkpointed);
}

/* Named containers: add under names, nested names in the state_dict,
 * forward_child by path, no forward of their own; bad names and paths. */
static void test_named(void) {
    fulmen_model *net = NULL, *enc = NULL, *lin = NULL;
    CHECK_OK(fulmen_model_named_new(&net));
    CHECK_OK(fulmen_model_sequential_new(&enc));
    CHECK_OK(fulmen_model_push(enc, linear(4, 3)));
    CHECK_OK(fulmen_model_push(enc, activation(FULMEN_ACTIVATION_RELU, 0)));
    CHECK_OK(fulmen_model_add(net, "encoder", enc));
    CHECK_OK(fulmen_model_add(net, "head", linear(3, 2)));
    const char *names[] = {"encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"};
    EXPECT_NAMES(net, names, 4);
    /* bad names: nothing consumed */
    lin = linear(1, 1);
    CHECK_ERR(fulmen_model_add(net, "head", lin), FULMEN_CODE_INVALID_ARGUMENT, "head");
    CHECK_ERR(fulmen_model_add(net, "a.b", lin), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_add(net, "", lin), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_add(net, "self", net), FULMEN_CODE_INVALID_ARGUMENT, "itself");
    CHECK_ERR(fulmen_model_add(net, NULL, lin), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_add(net, "x", NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_add(NULL, "x", lin), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_add(WRONG, "x", lin), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_add(net, "x", WRONG), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_add(net, "x", freed_model()), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_model *leaf = linear(2, 2);
    CHECK_ERR(fulmen_model_add(leaf, "x", lin), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    fulmen_model_free(leaf);
    CHECK(num_params(lin) == 2);
    /* a sequential accepts a named child too */
    fulmen_model *seq = NULL;
    CHECK_OK(fulmen_model_sequential_new(&seq));
    CHECK_OK(fulmen_model_add(seq, "first", lin));
    const char *snames[] = {"first.weight", "first.bias"};
    EXPECT_NAMES(seq, snames, 2);
    fulmen_model_free(seq);

    const int64_t xd[2] = {2, 4};
    fulmen_tensor *x = NULL, *h = NULL, *y = NULL, *h0 = NULL;
    CHECK_OK(fulmen_tensor_ones(xd, 2, FULMEN_DTYPE_F32, &x));
    CHECK_ERR(fulmen_model_forward(net, x, &y), FULMEN_CODE_UNSUPPORTED, NULL);
    CHECK(y == NULL);
    CHECK_OK(fulmen_model_forward_child(net, "encoder", x, &h));
    CHECK_OK(fulmen_model_forward_child(net, "head", h, &y));
    const int64_t hd[2] = {2, 3}, yd[2] = {2, 2};
    EXPECT_SHAPE(h, hd, 2);
    EXPECT_SHAPE(y, yd, 2);
    CHECK_OK(fulmen_model_forward_child(net, "encoder.0", x, &h0));
    EXPECT_SHAPE(h0, hd, 2);
    fulmen_tensor *out = NULL;
    CHECK_ERR(fulmen_model_forward_child(net, "decoder", x, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(net, "encoder.9", x, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(net, "head.weight", x, &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(net, NULL, x, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(net, "head", NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(net, "head", h, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(NULL, "head", h, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_child(WRONG, "head", h, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_forward_child(net, "head", (fulmen_tensor *)net, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_forward_child(freed_model(), "head", h, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    /* training mode reaches every child */
    CHECK_OK(fulmen_model_set_training(net, false));
    bool training = true;
    CHECK_OK(fulmen_model_is_training(net, &training));
    CHECK(!training);
    fulmen_tensor_free(x);
    fulmen_tensor_free(h);
    fulmen_tensor_free(h0);
    fulmen_tensor_free(y);
    fulmen_model_free(net);
}

/* set_training propagates into a sequential: its dropout is active only
 * in training; bad handles of the mode and forward calls. */
static void test_training_mode(void) {
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *seq = NULL, *dp = NULL;
    CHECK_OK(fulmen_model_sequential_new(&seq));
    CHECK_OK(fulmen_model_dropout_new(0.9, &dp));
    CHECK_OK(fulmen_model_push(seq, dp));
    const int64_t d[1] = {200};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_ones(d, 1, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *y = forward(seq, x);
    fulmen_tensor *s = NULL;
    CHECK_OK(fulmen_tensor_sum(y, &s));
    CHECK(check_item(s) != 200.0); /* dropout changed something */
    fulmen_tensor_free(s);
    fulmen_tensor_free(y);
    CHECK_OK(fulmen_model_set_training(seq, false));
    y = forward(seq, x);
    CHECK(same_values(x, y));
    fulmen_tensor_free(y);
    CHECK_OK(fulmen_model_set_training(seq, true));
    bool t = false;
    CHECK_OK(fulmen_model_is_training(seq, &t));
    CHECK(t);
    CHECK_ERR(fulmen_model_set_training(NULL, true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_set_training(WRONG, true), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_set_training(freed_model(), true), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_is_training(seq, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_is_training(NULL, &t), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_is_training(WRONG, &t), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_is_training(freed_model(), &t), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor *out = NULL;
    CHECK_ERR(fulmen_model_forward(NULL, x, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward(seq, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward(seq, x, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward(WRONG, x, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_forward(seq, (fulmen_tensor *)seq, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_forward(freed_model(), x, &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    /* an empty sequential is the identity */
    fulmen_model *empty = NULL;
    CHECK_OK(fulmen_model_sequential_new(&empty));
    y = forward(empty, x);
    CHECK(same_values(x, y));
    fulmen_tensor_free(y);
    fulmen_model_free(empty);
    fulmen_tensor_free(x);
    fulmen_model_free(seq);
    CHECK_ERR(fulmen_model_sequential_new(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_named_new(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
}

/* ------------------------------------------------------------- state_dict */

/* A 784-256-10 MLP has 203530 parameters; state_dict_name buffers too
 * small report OUT_OF_RANGE with the length; indices and names out of
 * range fail; state_dict_get shares storage with the parameters. */
static void test_state_dict(void) {
    fulmen_model *m = mlp(784, 256, 10);
    CHECK(num_params(m) == 203530);
    char buf[16] = "untouched";
    size_t len = 0;
    CHECK_ERR(fulmen_model_state_dict_name(m, 0, buf, 4, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(len == 8); /* "0.weight" */
    len = 0;
    CHECK_ERR(fulmen_model_state_dict_name(m, 0, buf, 8, &len), FULMEN_CODE_OUT_OF_RANGE, NULL); /* no room for NUL */
    CHECK(len == 8);
    CHECK(strcmp(buf, "untouched") == 0);
    CHECK_OK(fulmen_model_state_dict_name(m, 0, buf, 9, &len));
    CHECK(len == 8 && strcmp(buf, "0.weight") == 0);
    CHECK_OK(fulmen_model_state_dict_name(m, 3, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "2.bias") == 0);
    CHECK_ERR(fulmen_model_state_dict_name(m, 4, buf, sizeof buf, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_model_state_dict_name(m, 0, NULL, sizeof buf, &len), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_name(m, 0, buf, sizeof buf, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_name(NULL, 0, buf, sizeof buf, &len), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_name(WRONG, 0, buf, sizeof buf, &len), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_state_dict_name(freed_model(), 0, buf, sizeof buf, &len), FULMEN_CODE_INVALID_HANDLE,
              NULL);
    CHECK_ERR(fulmen_model_state_dict_len(m, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_len(NULL, &len), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_len(WRONG, &len), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_state_dict_len(freed_model(), &len), FULMEN_CODE_INVALID_HANDLE, NULL);
    int64_t n = 0;
    CHECK_ERR(fulmen_model_num_parameters(m, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_num_parameters(NULL, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_num_parameters(WRONG, &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_num_parameters(freed_model(), &n), FULMEN_CODE_INVALID_HANDLE, NULL);

    fulmen_tensor *w = NULL, *out = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "2.weight", &w));
    const int64_t wd[2] = {10, 256};
    EXPECT_SHAPE(w, wd, 2);
    bool rg = false;
    CHECK_OK(fulmen_tensor_requires_grad(w, &rg));
    CHECK(rg);
    CHECK_ERR(fulmen_model_state_dict_get(m, "3.weight", &out), FULMEN_CODE_INVALID_ARGUMENT, "3.weight");
    CHECK_ERR(fulmen_model_state_dict_get(m, "", &out), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_get(m, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_get(m, "0.bias", NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_get(NULL, "0.bias", &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_state_dict_get(WRONG, "0.bias", &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_state_dict_get(freed_model(), "0.bias", &out), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out == NULL);
    /* in-place updates of the model show through the handle: one SGD step */
    double before[2560], after[2560];
    values(w, before, 2560);
    const int64_t xd[2] = {2, 784};
    fulmen_tensor *x = NULL, *y = NULL, *loss = NULL;
    CHECK_OK(fulmen_tensor_ones(xd, 2, FULMEN_DTYPE_F32, &x));
    y = forward(m, x);
    CHECK_OK(fulmen_tensor_sum(y, &loss));
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &so, &opt));
    CHECK_OK(fulmen_tensor_backward(loss));
    CHECK_OK(fulmen_optimizer_step(opt));
    values(w, after, 2560);
    CHECK(memcmp(before, after, sizeof before) != 0);
    fulmen_optimizer_free(opt);
    fulmen_tensor_free(loss);
    fulmen_tensor_free(y);
    fulmen_tensor_free(x);
    /* the handle keeps the tensor alive after the model is freed */
    fulmen_model_free(m);
    values(w, before, 2560);
    CHECK(memcmp(before, after, sizeof before) == 0);
    fulmen_tensor_free(w);
}

/* ------------------------------------------------------------ save / load */

/* Save + load into a fresh model of the same architecture reproduces the
 * forward output exactly; save errors (NULL path, missing directory). */
static void test_save_load(void) {
    char path[128], nodir[160];
    path_in_dir(path, sizeof path, "mlp.safetensors");
    snprintf(nodir, sizeof nodir, "%s/missing/dir/m.safetensors", g_dir);
    CHECK_OK(fulmen_manual_seed(10));
    fulmen_model *a = mlp(4, 8, 3);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *b = mlp(4, 8, 3);
    const int64_t xd[2] = {3, 4};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_randn(xd, 2, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *ya = forward(a, x), *yb = forward(b, x);
    CHECK(!same_values(ya, yb));
    fulmen_tensor_free(yb);
    CHECK_OK(fulmen_model_save(a, path));
    CHECK(access(path, F_OK) == 0);
    CHECK_OK(fulmen_model_load(b, path, true));
    yb = forward(b, x);
    CHECK(same_values(ya, yb));
    fulmen_tensor_free(yb);
    /* A .pt path writes torch.save's format, which loads back the same. */
    char pt[128];
    path_in_dir(pt, sizeof pt, "m.pt");
    CHECK_OK(fulmen_manual_seed(12));
    fulmen_model *c = mlp(4, 8, 3);
    CHECK_OK(fulmen_model_save(a, pt));
    unsigned char magic[4] = {0};
    FILE *pf = fopen(pt, "rb");
    CHECK(pf != NULL && fread(magic, 1, 4, pf) == 4 && memcmp(magic, "PK\x03\x04", 4) == 0);
    if (pf != NULL) fclose(pf);
    CHECK_OK(fulmen_model_load(c, pt, true));
    fulmen_tensor *yc = forward(c, x);
    CHECK(same_values(ya, yc));
    fulmen_tensor_free(yc);
    fulmen_model_free(c);
    /* PyTorch's own torch.save file (scripts/make_torch_save_fixture.py)
     * loads into the same layers; a file that is neither format says so. */
    char fixture_pt[1024];
    snprintf(fixture_pt, sizeof fixture_pt, "%s/torch_save_mlp.pt", getenv("FULMEN_FIXTURES"));
    fulmen_model *tm = mlp(2, 8, 2);
    CHECK_OK(fulmen_model_load(tm, fixture_pt, true));
    fulmen_model_free(tm);
    char junk[128];
    path_in_dir(junk, sizeof junk, "junk.pt");
    FILE *jf = fopen(junk, "wb");
    CHECK(jf != NULL && fputs("PK\x03\x04 not really a zip", jf) >= 0 && fclose(jf) == 0);
    CHECK_ERR(fulmen_model_load(b, junk, true), FULMEN_CODE_FORMAT, "not a readable torch.save archive");
    /* A bare pickle (torch.save before PyTorch 1.6) is named as such. */
    jf = fopen(junk, "wb");
    CHECK(jf != NULL && fputs("\x80\x02N.", jf) >= 0 && fclose(jf) == 0);
    CHECK_ERR(fulmen_model_load(b, junk, true), FULMEN_CODE_FORMAT, "legacy torch.save file");
    CHECK(unlink(junk) == 0 && unlink(pt) == 0);
    CHECK_ERR(fulmen_model_save(a, nodir), FULMEN_CODE_IO, NULL);
    CHECK_ERR(fulmen_model_save(a, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_save(NULL, path), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_save(WRONG, path), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_save(freed_model(), path), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_load(b, NULL, true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_load(NULL, path, true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_load(WRONG, path, true), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_model_load(freed_model(), path, true), FULMEN_CODE_INVALID_HANDLE, NULL);

    /* a BatchNorm's buffers round-trip too */
    fulmen_model *bn = NULL, *bn2 = NULL;
    char bpath[128];
    path_in_dir(bpath, sizeof bpath, "bn.safetensors");
    CHECK_OK(fulmen_model_batch_norm_new(4, 1e-5, 0.5, &bn));
    CHECK_OK(fulmen_model_batch_norm_new(4, 1e-5, 0.5, &bn2));
    fulmen_tensor *yn = forward(bn, x); /* updates running stats */
    fulmen_tensor_free(yn);
    CHECK_OK(fulmen_model_save(bn, bpath));
    CHECK_OK(fulmen_model_load(bn2, bpath, true));
    fulmen_tensor *r1 = NULL, *r2 = NULL;
    CHECK_OK(fulmen_model_state_dict_get(bn, "running_mean", &r1));
    CHECK_OK(fulmen_model_state_dict_get(bn2, "running_mean", &r2));
    CHECK(same_values(r1, r2));
    fulmen_tensor_free(r1);
    fulmen_tensor_free(r2);
    CHECK_OK(fulmen_model_state_dict_get(bn2, "num_batches_tracked", &r2));
    CHECK(check_item(r2) == 1.0);
    fulmen_tensor_free(r2);
    unlink(bpath);
    fulmen_model_free(bn);
    fulmen_model_free(bn2);
    fulmen_tensor_free(ya);
    fulmen_tensor_free(x);
    fulmen_model_free(a);
    fulmen_model_free(b);
    unlink(path);
}

/* Strict loading rejects missing / unexpected names (FORMAT) and leaves
 * the model unchanged; non-strict loads the names that match; shapes must
 * match either way. */
static void test_load_strictness(void) {
    char small_path[128], big_path[128], wide_path[128];
    path_in_dir(small_path, sizeof small_path, "small.safetensors");
    path_in_dir(big_path, sizeof big_path, "big.safetensors");
    path_in_dir(wide_path, sizeof wide_path, "wide.safetensors");
    fulmen_model *small = NULL, *big = mlp(4, 3, 2), *wide = NULL;
    CHECK_OK(fulmen_model_sequential_new(&small));
    CHECK_OK(fulmen_model_push(small, linear(4, 3)));
    CHECK_OK(fulmen_model_sequential_new(&wide));
    CHECK_OK(fulmen_model_push(wide, linear(4, 5)));
    CHECK_OK(fulmen_model_save(small, small_path));
    CHECK_OK(fulmen_model_save(big, big_path));
    CHECK_OK(fulmen_model_save(wide, wide_path));
    /* snapshots are copied out as numbers */
    double small0[12], big0[12], big2[6], small2_0[12], now[12];
    fulmen_tensor *w_small = NULL, *w_big = NULL, *w2 = NULL, *w_small2 = NULL;
    CHECK_OK(fulmen_model_state_dict_get(small, "0.weight", &w_small));
    CHECK_OK(fulmen_model_state_dict_get(big, "0.weight", &w_big));
    CHECK_OK(fulmen_model_state_dict_get(big, "2.weight", &w2));
    values(w_small, small0, 12);
    values(w_big, big0, 12);
    values(w2, big2, 6);
    CHECK(memcmp(small0, big0, sizeof big0) != 0);
    /* missing names (2.*): strict fails and changes nothing */
    CHECK_ERR(fulmen_model_load(big, small_path, true), FULMEN_CODE_FORMAT, "2.weight");
    values(w_big, now, 12);
    CHECK(memcmp(now, big0, sizeof big0) == 0);
    /* non-strict loads 0.* and keeps 2.* */
    CHECK_OK(fulmen_model_load(big, small_path, false));
    values(w_big, now, 12);
    CHECK(memcmp(now, small0, sizeof small0) == 0);
    values(w2, now, 6);
    CHECK(memcmp(now, big2, sizeof big2) == 0);
    /* unexpected names: strict fails, non-strict ignores them */
    CHECK_OK(fulmen_model_save(big, big_path)); /* big now holds small's 0.* */
    fulmen_model *small2 = NULL;
    CHECK_OK(fulmen_model_sequential_new(&small2));
    CHECK_OK(fulmen_model_push(small2, linear(4, 3)));
    CHECK_OK(fulmen_model_state_dict_get(small2, "0.weight", &w_small2));
    values(w_small2, small2_0, 12);
    CHECK_ERR(fulmen_model_load(small2, big_path, true), FULMEN_CODE_FORMAT, NULL);
    values(w_small2, now, 12);
    CHECK(memcmp(now, small2_0, sizeof small2_0) == 0);
    CHECK_OK(fulmen_model_load(small2, big_path, false));
    values(w_small2, now, 12);
    CHECK(memcmp(now, small0, sizeof small0) == 0);
    /* a shape mismatch fails even when not strict, and changes nothing */
    CHECK_ERR(fulmen_model_load(small2, wide_path, false), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_model_load(small2, wide_path, true), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    values(w_small2, now, 12);
    CHECK(memcmp(now, small0, sizeof small0) == 0);
    fulmen_tensor_free(w_small);
    fulmen_tensor_free(w_big);
    fulmen_tensor_free(w2);
    fulmen_tensor_free(w_small2);
    fulmen_model_free(small);
    fulmen_model_free(small2);
    fulmen_model_free(big);
    fulmen_model_free(wide);
    unlink(small_path);
    unlink(big_path);
    unlink(wide_path);
}

/* A truncated file is FULMEN_CODE_FORMAT and leaves the model unchanged;
 * a missing file is FULMEN_CODE_IO; garbage is FORMAT. */
static void test_load_corrupt(void) {
    char path[128], half[128], junk[128], missing[128];
    path_in_dir(path, sizeof path, "full.safetensors");
    path_in_dir(half, sizeof half, "half.safetensors");
    path_in_dir(junk, sizeof junk, "junk.safetensors");
    path_in_dir(missing, sizeof missing, "does_not_exist.safetensors");
    CHECK_OK(fulmen_manual_seed(20));
    fulmen_model *a = mlp(4, 8, 3);
    CHECK_OK(fulmen_model_save(a, path));
    size_t len = 0;
    unsigned char *bytes = read_file(path, &len);
    CHECK(bytes != NULL && len > 100);
    FILE *f = fopen(half, "wb");
    fwrite(bytes, 1, len / 2, f);
    fclose(f);
    f = fopen(junk, "wb");
    fputs("this is not a safetensors file at all", f);
    fclose(f);
    free(bytes);
    CHECK_OK(fulmen_manual_seed(21));
    fulmen_model *b = mlp(4, 8, 3);
    const int64_t xd[2] = {2, 4};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_ones(xd, 2, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *before = forward(b, x);
    CHECK_ERR(fulmen_model_load(b, half, true), FULMEN_CODE_FORMAT, "half.safetensors");
    CHECK_ERR(fulmen_model_load(b, half, false), FULMEN_CODE_FORMAT, NULL);
    CHECK_ERR(fulmen_model_load(b, junk, false), FULMEN_CODE_FORMAT, "a text file beginning \"this is not a safetensors");
    CHECK_ERR(fulmen_model_load(b, missing, true), FULMEN_CODE_IO, "does_not_exist");
    CHECK_ERR(fulmen_model_load(b, g_dir, true), FULMEN_CODE_IO, NULL); /* a directory */
    fulmen_tensor *after = forward(b, x);
    CHECK(same_values(before, after));
    fulmen_tensor_free(before);
    fulmen_tensor_free(after);
    fulmen_tensor_free(x);
    fulmen_model_free(a);
    fulmen_model_free(b);
    unlink(path);
    unlink(half);
    unlink(junk);
}

/* ------------------------------------------------------------ TorchScript */

/* Reads mlp_reference.txt: '#' comment, 2 rows of 4 inputs, 2 rows of 3
 * outputs. Returns 0 on success. */
static int read_reference(const char *dir, float *in, float *out) {
    char path[1024];
    snprintf(path, sizeof path, "%s/mlp_reference.txt", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (line[0] == '#') continue;
        char *p = line, *end = NULL;
        for (;;) {
            double v = strtod(p, &end);
            if (end == p) break;
            if (n < 8) in[n] = (float)v;
            else if (n < 14) out[n - 8] = (float)v;
            n++;
            p = end;
        }
    }
    fclose(f);
    return n == 14 ? 0 : -1;
}

/* The scripted MLP keeps PyTorch's names and reproduces the Python output;
 * the same weights written by Python load into an equivalent Sequential;
 * bad paths are IO / FORMAT errors. */
static void test_torchscript(void) {
    const char *dir = getenv("FULMEN_FIXTURES");
    CHECK(dir != NULL);
    if (dir == NULL) return;
    float in[8], ref[6];
    CHECK(read_reference(dir, in, ref) == 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/mlp_scripted.pt", dir);
    fulmen_model *ts = NULL;
    CHECK_OK(fulmen_model_load_torchscript(path, &ts));
    if (ts == NULL) return;
    const char *names[] = {"l1.weight", "l1.bias", "l2.weight", "l2.bias"};
    EXPECT_NAMES(ts, names, 4);
    CHECK(num_params(ts) == 4 * 8 + 8 + 8 * 3 + 3);
    const int64_t xd[2] = {2, 4}, yd[2] = {2, 3};
    fulmen_tensor *x = tensor(in, 8, xd, 2), *y = forward(ts, x);
    EXPECT_SHAPE(y, yd, 2);
    double got[6];
    values(y, got, 6);
    for (int i = 0; i < 6; i++) CHECK_NEAR(got[i], ref[i], 1e-5);
    fulmen_tensor_free(y);
    /* its parameters train: they require grad */
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(ts, "l1.weight", &w));
    bool rg = false;
    CHECK_OK(fulmen_tensor_requires_grad(w, &rg));
    CHECK(rg);
    fulmen_tensor_free(w);
    /* the script inside a named container gets a prefix */
    fulmen_model *outer = NULL;
    CHECK_OK(fulmen_model_named_new(&outer));
    CHECK_OK(fulmen_model_add(outer, "net", ts));
    char buf[64];
    sd_name(outer, 0, buf, sizeof buf);
    CHECK(strcmp(buf, "net.l1.weight") == 0);
    y = NULL;
    CHECK_OK(fulmen_model_forward_child(outer, "net", x, &y));
    values(y, got, 6);
    for (int i = 0; i < 6; i++) CHECK_NEAR(got[i], ref[i], 1e-5);
    fulmen_tensor_free(y);
    fulmen_model_free(outer);
    /* Python's safetensors of the Sequential twin load strictly */
    fulmen_model *seq = mlp(4, 8, 3);
    char sf[1024];
    snprintf(sf, sizeof sf, "%s/mlp_seq.safetensors", dir);
    CHECK_OK(fulmen_model_load(seq, sf, true));
    y = forward(seq, x);
    values(y, got, 6);
    for (int i = 0; i < 6; i++) CHECK_NEAR(got[i], ref[i], 1e-5);
    fulmen_tensor_free(y);
    snprintf(sf, sizeof sf, "%s/mlp_scripted.safetensors", dir);
    CHECK_ERR(fulmen_model_load(seq, sf, true), FULMEN_CODE_FORMAT, "mlp_scripted.safetensors");
    /* the TorchScript file itself, given as weights, is named as one */
    CHECK_ERR(fulmen_model_load(seq, path, true), FULMEN_CODE_FORMAT, "is a TorchScript module");
    fulmen_model_free(seq);
    fulmen_tensor_free(x);
    /* bad paths */
    fulmen_model *bad = NULL;
    char nopath[1024];
    snprintf(nopath, sizeof nopath, "%s/no_such_model.pt", dir);
    CHECK_ERR(fulmen_model_load_torchscript(nopath, &bad), FULMEN_CODE_IO, "no_such_model.pt");
    CHECK_ERR(fulmen_model_load_torchscript(sf /* a safetensors file */, &bad), FULMEN_CODE_FORMAT, NULL);
    CHECK_ERR(fulmen_model_load_torchscript(NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_load_torchscript(path, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
}

/* Freeing: NULL, double free, a wrong-type handle are all harmless. */
static void test_free(void) {
    size_t base = fulmen_live_handles();
    fulmen_model *m = linear(2, 2);
    CHECK(fulmen_live_handles() == base + 1);
    fulmen_model_free(m);
    CHECK(fulmen_live_handles() == base);
    fulmen_model_free(m);
    fulmen_model_free(NULL);
    fulmen_model_free(WRONG); /* a tensor: must stay alive */
    CHECK(fulmen_live_handles() == base);
    size_t n = 0;
    CHECK_OK(fulmen_tensor_numel(g_tensor, &n));
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(0));
    CHECK(mkdtemp(g_dir) != NULL);
    CHECK_OK(fulmen_tensor_zeros(NULL, 0, FULMEN_DTYPE_F32, &g_tensor));
    test_linear();
    test_conv2d();
    test_pools();
    test_batch_norm();
    test_layer_norm();
    test_dropout();
    test_embedding();
    test_flatten();
    test_activations();
    test_sequential();
    test_activation_checkpointing();
    test_named();
    test_training_mode();
    test_state_dict();
    test_save_load();
    test_load_strictness();
    test_load_corrupt();
    test_torchscript();
    test_measure_flops();
    test_flops_by_module();
    test_free();
    fulmen_tensor_free(g_tensor);
    CHECK(rmdir(g_dir) == 0);
    return check_finish("test_model");
}

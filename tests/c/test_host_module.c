/*
 * Modules defined by the host: a forward written in C over a registered
 * parameter, a registered buffer and a child layer, used alone, inside a
 * Sequential and with several inputs and results; registered tensors are
 * in the state_dict in PyTorch's order, saved and loaded, cast, and
 * trained by an optimizer; a tensor registered twice is one tied
 * parameter; misuse gives clear errors.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "tensor_check.h"

#include <pthread.h>
#include <unistd.h>

/* forward(x[, bias]) = proj(x) * scale + x (+ bias); with two outputs the
 * second is the mean of the first. Counts its calls in the buffer. */
typedef struct {
    int calls;
    int misbehave; /* 1: writes nothing; 2: calls back into the root model; 3: hands the call to a thread */
    fulmen_model *root;
    int other_thread_code;
} residual;

typedef struct {
    fulmen_host_call *call;
    int code;
} borrowed;

static void *use_call(void *arg) {
    borrowed *b = arg;
    fulmen_tensor *t = NULL;
    fulmen_error *e = fulmen_host_call_get(b->call, "scale", &t);
    b->code = e ? fulmen_error_code(e) : 0;
    fulmen_error_free(e);
    fulmen_tensor_free(t);
    return NULL;
}

static fulmen_error *residual_forward(void *userdata, fulmen_host_call *call, const fulmen_tensor *const *inputs,
                                      size_t n_inputs, fulmen_tensor **outs, size_t n_outs) {
    residual *r = userdata;
    r->calls++;
    if (r->misbehave == 1) return NULL;
    if (r->misbehave == 2) {
        fulmen_tensor *y = NULL;
        return fulmen_model_forward(r->root, inputs[0], &y);
    }
    if (r->misbehave == 3) {
        borrowed b = {call, -1};
        pthread_t th;
        if (pthread_create(&th, NULL, use_call, &b) == 0) pthread_join(th, NULL);
        r->other_thread_code = b.code;
        r->misbehave = 0;
    }
    fulmen_tensor *scale = NULL, *steps = NULL, *p = NULL, *scaled = NULL, *y = NULL;
    size_t count = 0;
    fulmen_error *e = fulmen_host_call_get(call, "scale", &scale);
    if (!e) e = fulmen_host_call_get(call, "steps", &steps);
    if (!e) e = fulmen_tensor_add_scalar_(steps, 1);
    if (!e) e = fulmen_host_call_forward_child(call, "proj", inputs, 1, &p, 1, &count);
    if (!e) e = fulmen_tensor_mul(p, scale, &scaled);
    if (!e) e = fulmen_tensor_add(scaled, inputs[0], &y);
    if (!e && n_inputs > 1 && inputs[1] != NULL) {
        fulmen_tensor *biased = NULL;
        e = fulmen_tensor_add(y, inputs[1], &biased);
        y = biased;
    }
    if (!e) outs[0] = y;
    if (!e && n_outs > 1) e = fulmen_tensor_mean(y, &outs[1]);
    return e;
}

static fulmen_error *forward1(void *u, fulmen_host_call *c, const fulmen_tensor *const *in, size_t n,
                              fulmen_tensor **outs) {
    return residual_forward(u, c, in, n, outs, 1);
}

static fulmen_error *forward2(void *u, fulmen_host_call *c, const fulmen_tensor *const *in, size_t n,
                              fulmen_tensor **outs) {
    return residual_forward(u, c, in, n, outs, 2);
}

static int freed = 0;
static void count_free(void *u) {
    (void)u;
    freed++;
}

static fulmen_model *make_residual(residual *r, size_t outputs) {
    fulmen_host_module_vtable vt = {.struct_size = sizeof vt, .userdata = r, .userdata_free = count_free,
                                    .num_outputs = outputs, .forward = outputs == 1 ? forward1 : forward2};
    fulmen_model *m = NULL, *proj = NULL;
    CHECK_OK(fulmen_model_host_new(&vt, &m));
    CHECK_OK(fulmen_model_linear_new(4, 4, true, &proj));
    CHECK_OK(fulmen_model_add(m, "proj", proj));
    const int64_t s4[1] = {4}, s0[1] = {1};
    fulmen_tensor *scale = NULL, *steps = NULL;
    CHECK_OK(fulmen_tensor_ones(s4, 1, FULMEN_DTYPE_F32, &scale));
    CHECK_OK(fulmen_tensor_zeros(s0, 1, FULMEN_DTYPE_I64, &steps));
    CHECK_OK(fulmen_model_register_parameter(m, NULL, "scale", scale));
    CHECK_OK(fulmen_model_register_buffer(m, "", "steps", steps));
    fulmen_tensor_free(scale);
    fulmen_tensor_free(steps);
    return m;
}

static double item_of(const fulmen_model *m, const char *name) {
    fulmen_tensor *t = NULL;
    double v = NAN;
    CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
    CHECK_OK(fulmen_tensor_item(t, &v));
    fulmen_tensor_free(t);
    return v;
}

static void test_forward_state_and_training(void) {
    residual r = {0};
    /* Seeded: unseeded weights made the checks below fail now and then. */
    CHECK_OK(fulmen_manual_seed(1));
    fulmen_model *m = make_residual(&r, 1);
    static const char *const names[] = {"scale", "steps", "proj.weight", "proj.bias"};
    expect_names(m, names, 4);
    int64_t n = 0;
    CHECK_OK(fulmen_model_num_parameters(m, &n));
    CHECK(n == 4 + 16 + 4);
    const int64_t xs[2] = {3, 4};
    fulmen_tensor *x = wave(xs, 2, 1.0f), *y = NULL, *target = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y));
    CHECK(r.calls == 1 && item_of(m, "steps") == 1);
    /* an optimizer built on the model trains the registered parameter */
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &o, &opt));
    CHECK_OK(fulmen_tensor_zeros(xs, 2, FULMEN_DTYPE_F32, &target));
    double first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        fulmen_tensor *out = NULL, *loss = NULL;
        CHECK_OK(fulmen_optimizer_zero_grad(opt));
        CHECK_OK(fulmen_model_forward(m, x, &out));
        CHECK_OK(fulmen_loss_mse(out, target, FULMEN_REDUCTION_MEAN, &loss));
        CHECK_OK(fulmen_tensor_item(loss, step == 0 ? &first : &last));
        CHECK_OK(fulmen_tensor_backward(loss));
        CHECK_OK(fulmen_optimizer_step(opt));
        fulmen_tensor_free(out);
        fulmen_tensor_free(loss);
    }
    CHECK(last < first * 0.5);
    CHECK(item_of(m, "steps") == 21);
    fulmen_tensor *scale = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "scale", &scale));
    CHECK(fabs(weighted_sum(scale) - 1.5) > 1e-3); /* trained away from ones (whose weighted sum is 1.5) */
    /* saved and loaded with the rest of the state_dict */
    char path[] = "/tmp/fulmen-host-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(fulmen_model_save(m, path));
    residual r2 = {0};
    fulmen_model *fresh = make_residual(&r2, 1);
    CHECK_OK(fulmen_model_load(fresh, path, true));
    CHECK(item_of(fresh, "steps") == 21);
    fulmen_tensor *y1 = NULL, *y2 = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y1));
    CHECK_OK(fulmen_model_forward(fresh, x, &y2));
    CHECK(fabs(weighted_sum(y1) - weighted_sum(y2)) < 1e-9);
    remove(path);
    /* cast with the model */
    CHECK_OK(fulmen_model_to_dtype(fresh, FULMEN_DTYPE_F64));
    fulmen_tensor *s64 = NULL;
    int32_t dt = -1;
    CHECK_OK(fulmen_model_state_dict_get(fresh, "scale", &s64));
    CHECK_OK(fulmen_tensor_dtype(s64, &dt));
    CHECK(dt == FULMEN_DTYPE_F64);
    fulmen_tensor *steps = NULL;
    CHECK_OK(fulmen_model_state_dict_get(fresh, "steps", &steps));
    CHECK_OK(fulmen_tensor_dtype(steps, &dt));
    CHECK(dt == FULMEN_DTYPE_I64);
    /* the summary counts the registered parameter */
    char summary[1024];
    size_t len = 0;
    CHECK_OK(fulmen_model_summary(m, 1, summary, sizeof summary, &len));
    CHECK(strstr(summary, "HostModule") != NULL || strstr(summary, "proj") != NULL);
    fulmen_tensor *all[] = {x, y, target, scale, y1, y2, s64, steps};
    free_all(all, sizeof all / sizeof all[0]);
    fulmen_optimizer_free(opt);
    fulmen_model_free(fresh);
    fulmen_model_free(m);
    CHECK(freed == 2);
}

/* As a child of a Sequential, and with several inputs and results. */
static void test_composition(void) {
    residual r = {0}, r2 = {0};
    fulmen_model *seq = NULL, *relu = NULL, *head = NULL, *two = make_residual(&r2, 2);
    CHECK_OK(fulmen_model_sequential_new(&seq));
    CHECK_OK(fulmen_model_push(seq, make_residual(&r, 1)));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &relu));
    CHECK_OK(fulmen_model_push(seq, relu));
    CHECK_OK(fulmen_model_linear_new(4, 2, true, &head));
    CHECK_OK(fulmen_model_push(seq, head));
    static const char *const names[] = {"0.scale", "0.steps", "0.proj.weight", "0.proj.bias", "2.weight", "2.bias"};
    expect_names(seq, names, 6);
    const int64_t xs[2] = {3, 4}, ys[2] = {3, 2};
    fulmen_tensor *x = wave(xs, 2, 1.0f), *y = NULL, *outs[2] = {NULL, NULL};
    CHECK_OK(fulmen_model_forward(seq, x, &y));
    EXPECT_SHAPE(y, ys, 2);
    CHECK(r.calls == 1);
    /* two inputs (the second may be left out) and two results */
    const fulmen_tensor *ins[2] = {x, x};
    size_t count = 0;
    CHECK_OK(fulmen_model_forward_multi(two, NULL, ins, 2, outs, 2, &count));
    CHECK(count == 2);
    double with_bias = weighted_sum(outs[0]);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    ins[1] = NULL;
    CHECK_OK(fulmen_model_forward_multi(two, NULL, ins, 2, outs, 2, &count));
    CHECK(fabs(with_bias - weighted_sum(outs[0]) - weighted_sum(x)) < 1e-4);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    CHECK_ERR(fulmen_model_forward_multi(two, NULL, ins, 2, outs, 1, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    fulmen_tensor *one = NULL;
    CHECK_ERR(fulmen_model_forward(two, x, &one), FULMEN_CODE_INVALID_ARGUMENT, "forward_multi");
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(seq);
    fulmen_model_free(two);
}

static void test_errors(void) {
    residual r = {0};
    fulmen_model *m = make_residual(&r, 1), *bad = NULL, *lin = NULL;
    const int64_t s4[1] = {4}, xs[2] = {2, 4};
    fulmen_tensor *t = NULL, *ints = NULL, *x = wave(xs, 2, 1.0f), *y = NULL;
    CHECK_OK(fulmen_tensor_ones(s4, 1, FULMEN_DTYPE_F32, &t));
    CHECK_OK(fulmen_tensor_zeros(s4, 1, FULMEN_DTYPE_I64, &ints));
    CHECK_ERR(fulmen_model_register_parameter(m, NULL, "scale", t), FULMEN_CODE_INVALID_ARGUMENT, "already");
    CHECK_ERR(fulmen_model_register_buffer(m, NULL, "proj", t), FULMEN_CODE_INVALID_ARGUMENT, "already");
    CHECK_ERR(fulmen_model_register_parameter(m, NULL, "a.b", t), FULMEN_CODE_INVALID_ARGUMENT, "'.'");
    CHECK_ERR(fulmen_model_register_parameter(m, NULL, "", t), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_register_parameter(m, NULL, "count", ints), FULMEN_CODE_DTYPE_MISMATCH, "floating");
    CHECK_ERR(fulmen_model_register_parameter(m, "nope", "w", t), FULMEN_CODE_INVALID_ARGUMENT, "nope");
    /* on a built-in layer, after its own tensors (as register_parameter on nn.Linear) */
    CHECK_OK(fulmen_model_register_buffer(m, "proj", "mask", t));
    CHECK_ERR(fulmen_model_register_parameter(m, "proj", "weight", t), FULMEN_CODE_INVALID_ARGUMENT, "already");
    char name[64];
    size_t len = 0;
    CHECK_OK(fulmen_model_state_dict_name(m, 4, name, sizeof name, &len));
    CHECK(strcmp(name, "proj.mask") == 0);
    /* bad vtables */
    fulmen_host_module_vtable vt = {.struct_size = sizeof vt, .num_outputs = 1, .forward = forward1};
    vt.struct_size = 8;
    CHECK_ERR(fulmen_model_host_new(&vt, &bad), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    vt.struct_size = sizeof vt;
    vt.num_outputs = 0;
    CHECK_ERR(fulmen_model_host_new(&vt, &bad), FULMEN_CODE_INVALID_ARGUMENT, "num_outputs");
    vt.num_outputs = FULMEN_MAX_HOST_OUTPUTS + 1;
    CHECK_ERR(fulmen_model_host_new(&vt, &bad), FULMEN_CODE_INVALID_ARGUMENT, "num_outputs");
    vt.num_outputs = 1;
    vt.forward = NULL;
    CHECK_ERR(fulmen_model_host_new(&vt, &bad), FULMEN_CODE_INVALID_ARGUMENT, "forward");
    CHECK_ERR(fulmen_model_host_new(NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    CHECK(bad == NULL);
    /* a forward that writes nothing, or calls back into its own model */
    r.misbehave = 1;
    CHECK_ERR(fulmen_model_forward(m, x, &y), FULMEN_CODE_CALLBACK, "outs[0]");
    r.misbehave = 2;
    r.root = m;
    CHECK_ERR(fulmen_model_forward(m, x, &y), FULMEN_CODE_INVALID_STATE, "re-entrant");
    r.misbehave = 3; /* another thread may not use the call */
    CHECK_OK(fulmen_model_forward(m, x, &y));
    CHECK(r.other_thread_code == FULMEN_CODE_INVALID_STATE);
    fulmen_tensor_free(y);
    y = NULL;
    r.misbehave = 0;
    CHECK_OK(fulmen_model_forward(m, x, &y)); /* still usable */
    /* host calls outside the callback are refused */
    fulmen_tensor *none = NULL;
    CHECK_ERR(fulmen_host_call_get(NULL, "scale", &none), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_host_call_get((const fulmen_host_call *)m, "scale", &none), FULMEN_CODE_INVALID_HANDLE, NULL);
    /* a TorchScript module's tensors are its script's */
    char path[1024];
    const char *dir = getenv("FULMEN_FIXTURES");
    snprintf(path, sizeof path, "%s/mlp_scripted.pt", dir ? dir : "tests/fixtures");
    CHECK_OK(fulmen_model_load_torchscript(path, &lin));
    CHECK_ERR(fulmen_model_register_parameter(lin, NULL, "extra", t), FULMEN_CODE_UNSUPPORTED, "Python");
    fulmen_tensor *all[] = {t, ints, x, y};
    free_all(all, 4);
    fulmen_model_free(lin);
    fulmen_model_free(m);
}

/* A Sequential(Linear(3, 3)) with `p` registered twice, as "a" and "b". */
static fulmen_model *tied_model(const fulmen_tensor *p) {
    fulmen_model *seq = NULL, *lin = NULL;
    CHECK_OK(fulmen_model_sequential_new(&seq));
    CHECK_OK(fulmen_model_linear_new(3, 3, true, &lin));
    CHECK_OK(fulmen_model_push(seq, lin));
    CHECK_OK(fulmen_model_register_parameter(seq, NULL, "a", p));
    CHECK_OK(fulmen_model_register_parameter(seq, NULL, "b", p));
    return seq;
}

/* Whether the state_dict names `x` and `y` are one tensor. */
static int same_tensor(const fulmen_model *m, const char *x, const char *y) {
    fulmen_tensor *tx = NULL, *ty = NULL;
    void *px = NULL, *py = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, x, &tx));
    CHECK_OK(fulmen_model_state_dict_get(m, y, &ty));
    CHECK_OK(fulmen_tensor_data_ptr(tx, &px));
    CHECK_OK(fulmen_tensor_data_ptr(ty, &py));
    fulmen_tensor_free(tx);
    fulmen_tensor_free(ty);
    return px != NULL && px == py;
}

/* The same tensor registered twice is one parameter under two names, as
 * PyTorch's register_parameter of one Parameter: counted and listed once,
 * so SGD and Adam built on the model accept and train it; named twice in
 * the state_dict, and one tensor again after a save and load. */
static void test_tied_parameter(void) {
    const int64_t s3[1] = {3};
    fulmen_tensor *p = NULL, *params[4] = {NULL, NULL, NULL, NULL};
    CHECK_OK(fulmen_tensor_ones(s3, 1, FULMEN_DTYPE_F32, &p));
    fulmen_model *seq = tied_model(p);
    static const char *const names[] = {"a", "b", "0.weight", "0.bias"};
    expect_names(seq, names, 4);
    CHECK(same_tensor(seq, "a", "b"));
    int64_t n = 0;
    size_t count = 0;
    CHECK_OK(fulmen_model_num_parameters(seq, &n));
    CHECK(n == 3 + 9 + 3);
    CHECK_OK(fulmen_model_parameters(seq, false, params, 4, &count));
    CHECK(count == 3);
    free_all(params, count);
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.1;
    fulmen_adam_options ao = fulmen_adam_options_default();
    fulmen_optimizer *sgd = NULL, *adam = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(seq, NULL, 0, &so, &sgd));
    CHECK_OK(fulmen_optimizer_adam_new(seq, NULL, 0, &ao, &adam));
    /* sum(a * b) has the gradient 2a on the one leaf: SGD takes 1 to 0.8 */
    fulmen_tensor *a = NULL, *b = NULL, *ab = NULL, *loss = NULL, *loss2 = NULL;
    CHECK_OK(fulmen_model_state_dict_get(seq, "a", &a));
    CHECK_OK(fulmen_model_state_dict_get(seq, "b", &b));
    CHECK_OK(fulmen_tensor_mul(a, b, &ab));
    CHECK_OK(fulmen_tensor_sum(ab, &loss));
    CHECK_OK(fulmen_tensor_backward(loss));
    CHECK_OK(fulmen_optimizer_step(sgd));
    const double after_sgd[3] = {0.8, 0.8, 0.8}, after_adam[3] = {0.799, 0.799, 0.799};
    EXPECT_VALUES(a, after_sgd, 3, 1e-6);
    EXPECT_VALUES(b, after_sgd, 3, 1e-6);
    /* Adam's first step moves it by its lr (1e-3) */
    CHECK_OK(fulmen_optimizer_zero_grad(adam));
    CHECK_OK(fulmen_tensor_sum(b, &loss2));
    CHECK_OK(fulmen_tensor_backward(loss2));
    CHECK_OK(fulmen_optimizer_step(adam));
    EXPECT_VALUES(a, after_adam, 3, 1e-6);
    /* saved and loaded into a model tied the same way: both names hold the
     * saved value and stay one tensor */
    char path[] = "/tmp/fulmen-tied-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(fulmen_model_save(seq, path));
    fulmen_tensor *q = NULL, *a2 = NULL, *b2 = NULL;
    CHECK_OK(fulmen_tensor_zeros(s3, 1, FULMEN_DTYPE_F32, &q));
    fulmen_model *fresh = tied_model(q);
    CHECK_OK(fulmen_model_load(fresh, path, true));
    remove(path);
    CHECK_OK(fulmen_model_state_dict_get(fresh, "a", &a2));
    CHECK_OK(fulmen_model_state_dict_get(fresh, "b", &b2));
    EXPECT_VALUES(a2, after_adam, 3, 1e-6);
    EXPECT_VALUES(b2, after_adam, 3, 1e-6);
    CHECK(same_tensor(fresh, "a", "b"));
    CHECK_OK(fulmen_model_num_parameters(fresh, &n));
    CHECK(n == 3 + 9 + 3);
    /* a cast keeps the two names one tensor */
    CHECK_OK(fulmen_model_to_dtype(fresh, FULMEN_DTYPE_F64));
    CHECK(same_tensor(fresh, "a", "b"));
    /* a parameter is not also a buffer; buffers tie as parameters do */
    CHECK_ERR(fulmen_model_register_buffer(seq, NULL, "c", p), FULMEN_CODE_INVALID_ARGUMENT, "parameter \"a\"");
    fulmen_tensor *mask = NULL;
    CHECK_OK(fulmen_tensor_zeros(s3, 1, FULMEN_DTYPE_I64, &mask));
    CHECK_OK(fulmen_model_register_buffer(seq, NULL, "m1", mask));
    CHECK_OK(fulmen_model_register_buffer(seq, NULL, "m2", mask));
    CHECK(same_tensor(seq, "m1", "m2"));
    fulmen_tensor *all[] = {p, a, b, ab, loss, loss2, q, a2, b2, mask};
    free_all(all, sizeof all / sizeof all[0]);
    fulmen_optimizer_free(sgd);
    fulmen_optimizer_free(adam);
    fulmen_model_free(fresh);
    fulmen_model_free(seq);
}

int main(void) {
    test_forward_state_and_training();
    test_composition();
    test_errors();
    test_tied_parameter();
    return check_finish("test_host_module");
}

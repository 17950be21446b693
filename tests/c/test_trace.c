/*
 * Models traced into TorchScript (fulmen_model_to_torchscript, Lightning's
 * to_torchscript(method="trace")): a Sequential with BatchNorm gives its
 * evaluation-mode results, keeps its state_dict names, holds copies, is
 * left in its mode, saves and loads back; a host module's C forward is
 * recorded with its two results; a trace started inside a traced forward,
 * a thread attached to a traced forward, a meta model, bad inputs and bad
 * arguments are refused with clear errors.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "tensor_check.h"

static fulmen_model *mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(2, 6, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_batch_norm_new(6, 1e-5, 0.1, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_dropout_new(0.5, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(6, 2, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

/* Whether a and b hold the same values within 1e-6. */
static bool close_to(const fulmen_tensor *a, const fulmen_tensor *b) {
    size_t na = 0, nb = 0;
    CHECK_OK(fulmen_tensor_numel(a, &na));
    CHECK_OK(fulmen_tensor_numel(b, &nb));
    if (na != nb || na == 0) return false;
    double *va = calloc(na, sizeof(double)), *vb = calloc(nb, sizeof(double));
    CHECK_OK(fulmen_tensor_copy_to(a, FULMEN_DTYPE_F64, va, na * sizeof(double)));
    CHECK_OK(fulmen_tensor_copy_to(b, FULMEN_DTYPE_F64, vb, nb * sizeof(double)));
    bool same = true;
    for (size_t i = 0; i < na; i++) same = same && fabs(va[i] - vb[i]) <= 1e-6;
    free(va);
    free(vb);
    return same;
}

static void expect_same_forward(const fulmen_model *a, const fulmen_model *b, const fulmen_tensor *x) {
    fulmen_tensor *ya = NULL, *yb = NULL;
    CHECK_OK(fulmen_model_forward(a, x, &ya));
    CHECK_OK(fulmen_model_forward(b, x, &yb));
    CHECK(ya && yb && close_to(ya, yb));
    fulmen_tensor_free(ya);
    fulmen_tensor_free(yb);
}

static void test_traced_sequential(void) {
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *m = mlp();
    const int64_t shape[2] = {4, 2};
    fulmen_tensor *x = wave(shape, 2, 1.0f), *shifted = wave(shape, 2, 3.0f), *y = NULL;
    /* Running statistics away from their start, so evaluation mode shows. */
    CHECK_OK(fulmen_model_forward(m, shifted, &y));
    fulmen_tensor_free(y);
    fulmen_model *ts = NULL;
    const fulmen_tensor *inputs[1] = {x};
    CHECK_OK(fulmen_model_to_torchscript(m, inputs, 1, &ts));
    bool training = false;
    CHECK_OK(fulmen_model_is_training(m, &training));
    CHECK(training);
    CHECK_OK(fulmen_model_is_training(ts, &training));
    CHECK(!training);
    const char *names[] = {"0.weight",       "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                           "1.num_batches_tracked", "4.weight", "4.bias"};
    expect_names(ts, names, sizeof names / sizeof names[0]);
    CHECK_OK(fulmen_model_set_training(m, false));
    expect_same_forward(m, ts, x);
    expect_same_forward(m, ts, shifted);

    /* Copies: changing the model's weights leaves the trace's. */
    fulmen_tensor *w = NULL, *tw = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "4.bias", &w));
    CHECK_OK(fulmen_model_state_dict_get(ts, "4.bias", &tw));
    CHECK(close_to(w, tw));
    CHECK_OK(fulmen_tensor_add_scalar_(w, 1.0));
    CHECK(!close_to(w, tw));
    fulmen_tensor_free(w);
    fulmen_tensor_free(tw);

    /* Saved for torch.jit.load, and loaded back. */
    char dir[] = "/tmp/fulmen-test-trace-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/mlp.pt", dir);
    CHECK_OK(fulmen_model_save_torchscript(ts, NULL, path));
    fulmen_model *loaded = NULL;
    CHECK_OK(fulmen_model_load_torchscript(path, &loaded));
    CHECK_OK(fulmen_model_set_training(loaded, false));
    expect_same_forward(ts, loaded, x);
    CHECK(unlink(path) == 0);
    CHECK(rmdir(dir) == 0);
    fulmen_model_free(loaded);
    fulmen_model_free(ts);
    fulmen_model_free(m);
    fulmen_tensor_free(x);
    fulmen_tensor_free(shifted);
}

/* forward(x) = (proj(x) * scale + x, its mean). `mode` 1: also traces
 * `other` from inside the forward; 2: a thread attaches to the forward. */
typedef struct {
    int mode;
    fulmen_model *other;
    int nested_code;
    int attach_code;
} host;

static void *attach(void *arg) {
    fulmen_callback_context *ctx = arg;
    fulmen_error *e = fulmen_callback_attach(ctx);
    int code = e ? fulmen_error_code(e) : 0;
    if (e) {
        fulmen_error_free(e);
    } else {
        fulmen_error_free(fulmen_callback_detach());
    }
    return (void *)(intptr_t)code;
}

static fulmen_error *host_forward(void *userdata, fulmen_host_call *call, const fulmen_tensor *const *inputs,
                                  size_t n_inputs, fulmen_tensor **outs) {
    host *h = userdata;
    (void)n_inputs;
    if (h->mode == 1) {
        fulmen_model *ts = NULL;
        fulmen_error *e = fulmen_model_to_torchscript(h->other, inputs, 1, &ts);
        h->nested_code = e ? fulmen_error_code(e) : 0;
        fulmen_model_free(ts);
        if (e) return e;
    }
    if (h->mode == 2) {
        fulmen_callback_context *ctx = NULL;
        fulmen_error *e = fulmen_callback_context_current(&ctx);
        if (e) return e;
        pthread_t th;
        void *code = NULL;
        if (pthread_create(&th, NULL, attach, ctx) == 0) pthread_join(th, &code);
        h->attach_code = (int)(intptr_t)code;
        fulmen_callback_context_free(ctx);
    }
    fulmen_tensor *scale = NULL, *p = NULL, *scaled = NULL, *y = NULL;
    size_t count = 0;
    fulmen_error *e = fulmen_host_call_get(call, "scale", &scale);
    if (!e) e = fulmen_host_call_forward_child(call, "proj", inputs, 1, &p, 1, &count);
    if (!e) e = fulmen_tensor_mul(p, scale, &scaled);
    if (!e) e = fulmen_tensor_add(scaled, inputs[0], &y);
    if (!e) e = fulmen_tensor_mean(y, &outs[1]);
    if (!e) outs[0] = y;
    return e;
}

static fulmen_model *host_model(host *h) {
    fulmen_host_module_vtable vt = {
        .struct_size = sizeof vt, .userdata = h, .num_outputs = 2, .forward = host_forward};
    fulmen_model *m = NULL, *proj = NULL;
    CHECK_OK(fulmen_model_host_new(&vt, &m));
    CHECK_OK(fulmen_model_linear_new(4, 4, true, &proj));
    CHECK_OK(fulmen_model_add(m, "proj", proj));
    const int64_t s4[1] = {4};
    fulmen_tensor *scale = wave(s4, 1, 2.0f);
    CHECK_OK(fulmen_model_register_parameter(m, NULL, "scale", scale));
    fulmen_tensor_free(scale);
    return m;
}

static void test_traced_host_module(void) {
    CHECK_OK(fulmen_manual_seed(6));
    host h = {0};
    fulmen_model *m = host_model(&h), *ts = NULL;
    const int64_t shape[2] = {3, 4};
    fulmen_tensor *x = wave(shape, 2, 1.0f), *other = wave(shape, 2, -2.0f);
    const fulmen_tensor *inputs[1] = {x};
    CHECK_OK(fulmen_model_to_torchscript(m, inputs, 1, &ts));
    const char *names[] = {"scale", "proj.weight", "proj.bias"};
    expect_names(ts, names, 3);
    const fulmen_tensor *in[1] = {other};
    fulmen_tensor *want[2] = {NULL, NULL}, *got[2] = {NULL, NULL};
    size_t nw = 0, ng = 0;
    CHECK_OK(fulmen_model_forward_multi(m, NULL, in, 1, want, 2, &nw));
    CHECK_OK(fulmen_model_forward_multi(ts, NULL, in, 1, got, 2, &ng));
    CHECK(nw == 2 && ng == 2);
    CHECK(close_to(want[0], got[0]) && close_to(want[1], got[1]));
    free_all(want, 2);
    free_all(got, 2);
    fulmen_model_free(ts);
    ts = NULL;

    /* A trace cannot start inside a traced forward: the inner call is
     * refused, and so is the outer trace with the forward's error. */
    h.mode = 1;
    h.other = mlp();
    const int64_t s2[2] = {3, 2};
    fulmen_tensor *x2 = wave(s2, 2, 1.0f);
    CHECK_ERR(fulmen_model_to_torchscript(m, inputs, 1, &ts), FULMEN_CODE_INVALID_STATE, "inside another");
    CHECK(h.nested_code == FULMEN_CODE_INVALID_STATE);
    CHECK(ts == NULL);
    const fulmen_tensor *in2[1] = {x2};
    CHECK_OK(fulmen_model_to_torchscript(h.other, in2, 1, &ts)); /* nothing left behind */
    fulmen_model_free(ts);
    ts = NULL;

    /* A thread cannot join a traced forward: its ops would not be recorded. */
    h.mode = 2;
    h.attach_code = -1;
    CHECK_OK(fulmen_model_to_torchscript(m, inputs, 1, &ts));
    CHECK(h.attach_code == FULMEN_CODE_INVALID_STATE);
    /* Outside a trace the same forward lets it attach. */
    fulmen_tensor *outs[2] = {NULL, NULL};
    size_t n = 0;
    CHECK_OK(fulmen_model_forward_multi(m, NULL, in, 1, outs, 2, &n));
    CHECK(h.attach_code == 0);
    free_all(outs, 2);
    fulmen_model_free(ts);
    fulmen_model_free(h.other);
    fulmen_model_free(m);
    fulmen_tensor_free(x);
    fulmen_tensor_free(x2);
    fulmen_tensor_free(other);
}

static void test_refusals(void) {
    fulmen_model *m = mlp(), *ts = NULL;
    const int64_t shape[2] = {4, 2}, wrong[2] = {4, 3};
    fulmen_tensor *x = wave(shape, 2, 1.0f), *bad = wave(wrong, 2, 1.0f);
    const fulmen_tensor *inputs[17];
    for (int i = 0; i < 17; i++) inputs[i] = x;
    CHECK_ERR(fulmen_model_to_torchscript(NULL, inputs, 1, &ts), FULMEN_CODE_NULL_ARGUMENT, "model");
    CHECK_ERR(fulmen_model_to_torchscript(m, inputs, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_ERR(fulmen_model_to_torchscript(m, NULL, 1, &ts), FULMEN_CODE_NULL_ARGUMENT, "example_inputs");
    CHECK_ERR(fulmen_model_to_torchscript(m, inputs, 0, &ts), FULMEN_CODE_INVALID_ARGUMENT, "example inputs");
    CHECK_ERR(fulmen_model_to_torchscript(m, inputs, 17, &ts), FULMEN_CODE_INVALID_ARGUMENT,
              "FULMEN_MAX_TRACE_INPUTS");
    const fulmen_tensor *wrong_in[1] = {bad};
    CHECK_ERR(fulmen_model_to_torchscript(m, wrong_in, 1, &ts), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    bool training = false;
    CHECK_OK(fulmen_model_is_training(m, &training));
    CHECK(training);
    CHECK(ts == NULL);

    CHECK_OK(fulmen_meta_init_begin());
    fulmen_model *meta = mlp();
    CHECK_OK(fulmen_meta_init_end());
    CHECK_ERR(fulmen_model_to_torchscript(meta, inputs, 1, &ts), FULMEN_CODE_INVALID_STATE, "materialize");
    CHECK(ts == NULL);
    fulmen_model_free(meta);
    fulmen_model_free(m);
    fulmen_tensor_free(x);
    fulmen_tensor_free(bad);
}

int main(void) {
    test_traced_sequential();
    test_traced_host_module();
    test_refusals();
    return check_finish("test_trace");
}

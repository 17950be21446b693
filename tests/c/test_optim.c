/*
 * Tests of optimizers, gradient clipping and learning-rate schedulers:
 * option defaults, invalid hyperparameters, parameter collection, exact
 * first steps of SGD / Adam / AdamW / RMSprop, a host-owned (Fabric style)
 * training loop, parameter groups, and every scheduler's lr sequence
 * against PyTorch's formulas.
 */
#include "check.h"

#include <stdint.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* A live handle of another type (a tensor), cast where needed. */
static fulmen_tensor *g_tensor = NULL;
#define WRONG_MODEL ((fulmen_model *)g_tensor)
#define WRONG_OPT ((fulmen_optimizer *)g_tensor)
#define WRONG_SCHED ((fulmen_scheduler *)g_tensor)

/* ---------------------------------------------------------------- helpers */

static void must(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "set-up failed: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        exit(2);
    }
}

/* A leaf f32 parameter with the given values. */
static fulmen_tensor *param(const float *v, size_t n) {
    const int64_t d[1] = {(int64_t)n};
    fulmen_tensor *t = check_f32(v, n, d, 1);
    must(fulmen_tensor_set_requires_grad(t, true));
    return t;
}

/* Accumulates grad(sum(p * a)) = a into p. */
static void grad_of_dot(fulmen_tensor *p, const float *a, size_t n) {
    const int64_t d[1] = {(int64_t)n};
    fulmen_tensor *at = check_f32(a, n, d, 1), *prod = NULL, *loss = NULL;
    must(fulmen_tensor_mul(p, at, &prod));
    must(fulmen_tensor_sum(prod, &loss));
    must(fulmen_tensor_backward(loss));
    fulmen_tensor_free(at);
    fulmen_tensor_free(prod);
    fulmen_tensor_free(loss);
}

static void read3(const fulmen_tensor *t, double *out) {
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, out, 3 * sizeof(double)));
}

static double lr_of(const fulmen_optimizer *o) {
    double lr = NAN;
    CHECK_OK(fulmen_optimizer_get_lr(o, &lr));
    return lr;
}

static fulmen_optimizer *freed_optimizer(void) {
    const float v[1] = {1};
    fulmen_tensor *p = param(v, 1);
    fulmen_optimizer *o = NULL;
    fulmen_sgd_options so = fulmen_sgd_options_default();
    must(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p, 1, &so, &o));
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);
    return o;
}

/* An SGD optimizer over one fresh parameter with learning rate lr; the
 * parameter is freed right away (the optimizer keeps it). */
static fulmen_optimizer *sgd_with_lr(double lr) {
    const float v[1] = {1};
    fulmen_tensor *p = param(v, 1);
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = lr;
    so.momentum = 0.9;
    fulmen_optimizer *o = NULL;
    must(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p, 1, &so, &o));
    fulmen_tensor_free(p);
    return o;
}

/* ------------------------------------------------------------- optimizers */

/* Option defaults are torch's. */
static void test_defaults(void) {
    fulmen_sgd_options s = fulmen_sgd_options_default();
    CHECK(s.lr == 1e-3 && s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 && !s.nesterov &&
          !s.maximize);
    fulmen_adam_options a = fulmen_adam_options_default();
    CHECK(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 && a.weight_decay == 0 &&
          !a.amsgrad && !a.maximize);
    fulmen_adam_options w = fulmen_adamw_options_default();
    CHECK(w.lr == 1e-3 && w.beta1 == 0.9 && w.beta2 == 0.999 && w.eps == 1e-8 && w.weight_decay == 0.01);
    fulmen_rmsprop_options r = fulmen_rmsprop_options_default();
    CHECK(r.lr == 1e-2 && r.alpha == 0.99 && r.eps == 1e-8 && r.weight_decay == 0 && r.momentum == 0 &&
          !r.centered && !r.maximize);
    fulmen_one_cycle_options oc = fulmen_one_cycle_options_default(0.5, 100);
    CHECK(oc.max_lr == 0.5 && oc.total_steps == 100 && oc.pct_start == 0.3 && !oc.linear_anneal &&
          oc.cycle_momentum && oc.base_momentum == 0.85 && oc.max_momentum == 0.95 && oc.div_factor == 25 &&
          oc.final_div_factor == 1e4 && !oc.three_phase);
    fulmen_plateau_options pl = fulmen_plateau_options_default();
    CHECK(!pl.mode_max && pl.factor == 0.1 && pl.patience == 10 && pl.threshold == 1e-4 && !pl.threshold_abs &&
          pl.cooldown == 0 && pl.min_lr == 0 && pl.eps == 1e-8);
}

/* Every constructor with its defaults (the lr is the one given), and
 * invalid hyperparameters rejected with INVALID_ARGUMENT. */
static void test_constructors(void) {
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(3, 2, true, &m));
    fulmen_optimizer *o = NULL, *bad = NULL;
    fulmen_sgd_options s = fulmen_sgd_options_default();
    fulmen_adam_options a = fulmen_adam_options_default(), aw = fulmen_adamw_options_default();
    fulmen_rmsprop_options r = fulmen_rmsprop_options_default();
    CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &o));
    CHECK(lr_of(o) == 1e-3);
    fulmen_optimizer_free(o);
    CHECK_OK(fulmen_optimizer_adam_new(m, NULL, 0, &a, &o));
    CHECK(lr_of(o) == 1e-3);
    fulmen_optimizer_free(o);
    CHECK_OK(fulmen_optimizer_adamw_new(m, NULL, 0, &aw, &o));
    CHECK(lr_of(o) == 1e-3);
    fulmen_optimizer_free(o);
    CHECK_OK(fulmen_optimizer_rmsprop_new(m, NULL, 0, &r, &o));
    CHECK(lr_of(o) == 1e-2);
    fulmen_optimizer_free(o);
    /* SGD */
    s.lr = -0.1;
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    s.lr = NAN;
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    s = fulmen_sgd_options_default();
    s.nesterov = true;
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, "esterov");
    s.momentum = 0.9;
    s.dampening = 0.5;
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    s = fulmen_sgd_options_default();
    s.momentum = -1;
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    s = fulmen_sgd_options_default();
    s.weight_decay = -1;
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    /* Adam / AdamW */
    a.lr = -1;
    CHECK_ERR(fulmen_optimizer_adam_new(m, NULL, 0, &a, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    a = fulmen_adam_options_default();
    a.beta1 = 1.0;
    CHECK_ERR(fulmen_optimizer_adam_new(m, NULL, 0, &a, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    a = fulmen_adam_options_default();
    a.beta2 = -0.1;
    CHECK_ERR(fulmen_optimizer_adamw_new(m, NULL, 0, &a, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    a = fulmen_adam_options_default();
    a.eps = -1e-8;
    CHECK_ERR(fulmen_optimizer_adam_new(m, NULL, 0, &a, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    aw.weight_decay = -0.01;
    CHECK_ERR(fulmen_optimizer_adamw_new(m, NULL, 0, &aw, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    /* RMSprop */
    r.lr = -1;
    CHECK_ERR(fulmen_optimizer_rmsprop_new(m, NULL, 0, &r, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    r = fulmen_rmsprop_options_default();
    r.alpha = -0.5;
    CHECK_ERR(fulmen_optimizer_rmsprop_new(m, NULL, 0, &r, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    r = fulmen_rmsprop_options_default();
    r.momentum = -0.5;
    CHECK_ERR(fulmen_optimizer_rmsprop_new(m, NULL, 0, &r, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    r = fulmen_rmsprop_options_default();
    /* NULL options / out */
    s = fulmen_sgd_options_default();
    a = fulmen_adam_options_default();
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_adam_new(m, NULL, 0, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_adamw_new(m, NULL, 0, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_rmsprop_new(m, NULL, 0, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_sgd_new(m, NULL, 0, &s, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_adam_new(m, NULL, 0, &a, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_adamw_new(m, NULL, 0, &a, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_rmsprop_new(m, NULL, 0, &r, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_model_free(m);
}

/* Parameters come from a model and / or tensors; a tensor without
 * requires_grad, no parameters at all, duplicates, NULL and bad handles
 * are errors. */
static void test_params(void) {
    fulmen_model *m = NULL, *empty = NULL, *gone = NULL;
    CHECK_OK(fulmen_model_linear_new(2, 1, true, &m));
    CHECK_OK(fulmen_model_sequential_new(&empty));
    CHECK_OK(fulmen_model_linear_new(2, 1, true, &gone));
    fulmen_model_free(gone);
    const float v[2] = {1, 2};
    const int64_t d[1] = {2};
    fulmen_tensor *p = param(v, 2), *nograd = check_f32(v, 2, d, 1), *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "weight", &w));
    fulmen_sgd_options s = fulmen_sgd_options_default();
    fulmen_optimizer *o = NULL, *bad = NULL;
    const fulmen_tensor *ps[1] = {p};
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, ps, 1, &s, &o));
    fulmen_optimizer_free(o);
    CHECK_OK(fulmen_optimizer_sgd_new(m, ps, 1, &s, &o));
    fulmen_optimizer_free(o);
    const fulmen_tensor *ng[1] = {nograd};
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, ng, 1, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, "requires");
    CHECK_ERR(fulmen_optimizer_sgd_new(m, ng, 1, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_sgd_new(empty, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    const fulmen_tensor *dup[1] = {w};
    CHECK_ERR(fulmen_optimizer_sgd_new(m, dup, 1, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    const fulmen_tensor *twice[2] = {p, p};
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, twice, 2, &s, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, NULL, 1, &s, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const fulmen_tensor *with_null[2] = {p, NULL};
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, with_null, 2, &s, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const fulmen_tensor *with_wrong[1] = {(const fulmen_tensor *)m};
    CHECK_ERR(fulmen_optimizer_sgd_new(NULL, with_wrong, 1, &s, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_sgd_new(WRONG_MODEL, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_sgd_new(gone, NULL, 0, &s, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_adam_options a = fulmen_adam_options_default();
    fulmen_rmsprop_options r = fulmen_rmsprop_options_default();
    CHECK_ERR(fulmen_optimizer_adam_new(NULL, ng, 1, &a, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_adamw_new(NULL, NULL, 0, &a, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_rmsprop_new(WRONG_MODEL, NULL, 0, &r, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(bad == NULL);
    /* the optimizer keeps the model's parameters alive */
    CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &o));
    fulmen_model_free(m);
    CHECK_OK(fulmen_optimizer_step(o));
    CHECK_OK(fulmen_optimizer_zero_grad(o));
    fulmen_optimizer_free(o);
    fulmen_optimizer_free(o); /* double free: ignored */
    fulmen_optimizer_free(NULL);
    fulmen_optimizer_free(WRONG_OPT); /* a tensor: must stay alive */
    size_t n = 0;
    CHECK_OK(fulmen_tensor_numel(g_tensor, &n));
    fulmen_tensor_free(p);
    fulmen_tensor_free(nograd);
    fulmen_tensor_free(w);
    fulmen_model_free(empty);
}

/* One SGD step is exactly w - lr * grad (tensors and a model's Linear);
 * momentum and maximize follow torch; zero_grad clears to NULL; a step
 * without gradients changes nothing. */
static void test_sgd_exact(void) {
    const float v[3] = {1, -1, 0.5f}, a[3] = {2, -3, 0.25f};
    fulmen_tensor *p = param(v, 3), *g = NULL;
    fulmen_sgd_options s = fulmen_sgd_options_default();
    s.lr = 0.1;
    fulmen_optimizer *o = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p, 1, &s, &o));
    double w[3];
    CHECK_OK(fulmen_optimizer_step(o)); /* no grad yet: nothing moves */
    read3(p, w);
    CHECK(w[0] == 1 && w[1] == -1 && w[2] == 0.5);
    grad_of_dot(p, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    read3(p, w);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w[i], v[i] - 0.1 * a[i], 1e-6);
    CHECK_OK(fulmen_optimizer_zero_grad(o));
    CHECK_OK(fulmen_tensor_grad(p, &g));
    CHECK(g == NULL);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);

    /* momentum 0.9 with the same gradient twice: steps lr*g and lr*1.9g */
    p = param(v, 3);
    s.momentum = 0.9;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p, 1, &s, &o));
    for (int k = 0; k < 2; k++) {
        grad_of_dot(p, a, 3);
        CHECK_OK(fulmen_optimizer_step(o));
        CHECK_OK(fulmen_optimizer_zero_grad(o));
    }
    read3(p, w);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w[i], v[i] - 0.1 * a[i] * 2.9, 1e-6);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);

    /* maximize climbs the gradient */
    p = param(v, 3);
    s = fulmen_sgd_options_default();
    s.lr = 0.1;
    s.maximize = true;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p, 1, &s, &o));
    grad_of_dot(p, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    read3(p, w);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w[i], v[i] + 0.1 * a[i], 1e-6);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);

    /* a Linear(2, 1): y = w.x + b, so grad w = x and grad b = 1 */
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(2, 1, true, &m));
    fulmen_tensor *wt = NULL, *bt = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "weight", &wt));
    CHECK_OK(fulmen_model_state_dict_get(m, "bias", &bt));
    double w0[2], b0, w1[2], b1;
    CHECK_OK(fulmen_tensor_copy_to(wt, FULMEN_DTYPE_F64, w0, sizeof w0));
    b0 = check_item(bt);
    s = fulmen_sgd_options_default();
    s.lr = 0.5;
    CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &o));
    const float xv[2] = {2, -4};
    const int64_t xd[2] = {1, 2};
    fulmen_tensor *x = check_f32(xv, 2, xd, 2), *y = NULL, *loss = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y));
    CHECK_OK(fulmen_tensor_sum(y, &loss));
    CHECK_OK(fulmen_tensor_backward(loss));
    CHECK_OK(fulmen_optimizer_step(o));
    CHECK_OK(fulmen_tensor_copy_to(wt, FULMEN_DTYPE_F64, w1, sizeof w1));
    b1 = check_item(bt);
    CHECK_NEAR(w1[0], w0[0] - 0.5 * 2, 1e-6);
    CHECK_NEAR(w1[1], w0[1] + 0.5 * 4, 1e-6);
    CHECK_NEAR(b1, b0 - 0.5, 1e-6);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(loss);
    fulmen_tensor_free(wt);
    fulmen_tensor_free(bt);
    fulmen_optimizer_free(o);
    fulmen_model_free(m);
}

/* First steps of the adaptive optimizers: Adam moves each weight by about
 * lr against the sign of its gradient, AdamW also decays the weight by
 * lr * wd, RMSprop moves by lr / sqrt(1 - alpha). */
static void test_adaptive_first_step(void) {
    const float v[3] = {1, -1, 0.5f}, a[3] = {2, -3, 0.001f};
    double w[3];
    /* Adam */
    fulmen_tensor *p = param(v, 3);
    fulmen_adam_options ao = fulmen_adam_options_default();
    ao.lr = 0.01;
    fulmen_optimizer *o = NULL;
    CHECK_OK(fulmen_optimizer_adam_new(NULL, (const fulmen_tensor *const *)&p, 1, &ao, &o));
    grad_of_dot(p, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    read3(p, w);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w[i], v[i] - 0.01 * (a[i] > 0 ? 1 : -1), 1e-6);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);
    /* Adam maximize */
    p = param(v, 3);
    ao.maximize = true;
    CHECK_OK(fulmen_optimizer_adam_new(NULL, (const fulmen_tensor *const *)&p, 1, &ao, &o));
    grad_of_dot(p, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    read3(p, w);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w[i], v[i] + 0.01 * (a[i] > 0 ? 1 : -1), 1e-6);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);
    /* AdamW: w (1 - lr wd) - lr sign(g) */
    p = param(v, 3);
    fulmen_adam_options wo = fulmen_adamw_options_default();
    wo.lr = 0.01;
    wo.weight_decay = 0.1;
    CHECK_OK(fulmen_optimizer_adamw_new(NULL, (const fulmen_tensor *const *)&p, 1, &wo, &o));
    grad_of_dot(p, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    read3(p, w);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w[i], v[i] * (1 - 0.01 * 0.1) - 0.01 * (a[i] > 0 ? 1 : -1), 1e-6);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);
    /* RMSprop: v = (1 - alpha) g^2, step lr g / sqrt(v) = 10 lr sign(g) */
    p = param(v, 3);
    fulmen_rmsprop_options ro = fulmen_rmsprop_options_default();
    ro.lr = 0.01;
    CHECK_OK(fulmen_optimizer_rmsprop_new(NULL, (const fulmen_tensor *const *)&p, 1, &ro, &o));
    grad_of_dot(p, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    read3(p, w);
    for (int i = 0; i < 2; i++) CHECK_NEAR(w[i], v[i] - 0.1 * (a[i] > 0 ? 1 : -1), 1e-6);
    CHECK_NEAR(w[2], v[2] - 0.01 * 0.001 / (sqrt(0.01 * 0.001 * 0.001) + 1e-8), 1e-6);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p);
}

/* Adagrad, Adamax, NAdam, RAdam: first steps in closed form (the whole
 * trajectories are checked against torch in the Rust tests), option
 * checks. */
static void test_more_optimizers(void) {
    const float v[3] = {1, -1, 0.5f}, a[3] = {2, -3, 0.001f};
    double w[3];
    fulmen_optimizer *o = NULL;
    for (int kind = 0; kind < 4; kind++) {
        fulmen_tensor *p = param(v, 3);
        const fulmen_tensor *const *ps = (const fulmen_tensor *const *)&p;
        fulmen_adagrad_options ag = fulmen_adagrad_options_default();
        fulmen_adamax_options am = fulmen_adamax_options_default();
        fulmen_nadam_options na = fulmen_nadam_options_default();
        fulmen_radam_options ra = fulmen_radam_options_default();
        ag.lr = am.lr = na.lr = ra.lr = 0.01;
        if (kind == 0) CHECK_OK(fulmen_optimizer_adagrad_new(NULL, ps, 1, &ag, &o));
        if (kind == 1) CHECK_OK(fulmen_optimizer_adamax_new(NULL, ps, 1, &am, &o));
        if (kind == 2) CHECK_OK(fulmen_optimizer_nadam_new(NULL, ps, 1, &na, &o));
        if (kind == 3) CHECK_OK(fulmen_optimizer_radam_new(NULL, ps, 1, &ra, &o));
        grad_of_dot(p, a, 3);
        CHECK_OK(fulmen_optimizer_step(o));
        read3(p, w);
        for (int i = 0; i < 3; i++) {
            double sign = a[i] > 0 ? 1 : -1;
            if (kind <= 1) CHECK_NEAR(w[i], v[i] - 0.01 * sign, 1e-6); /* lr * g / |g| */
            if (kind == 2) CHECK(sign * (v[i] - w[i]) > 0.0 && fabs(v[i] - w[i]) < 0.03); /* against the gradient */
            if (kind == 3) CHECK_NEAR(w[i], v[i] - 0.01 * a[i], 1e-6); /* unrectified: lr * m / (1 - beta1) */
        }
        fulmen_optimizer_free(o);
        fulmen_tensor_free(p);
    }
    fulmen_tensor *p = param(v, 3);
    const fulmen_tensor *const *ps = (const fulmen_tensor *const *)&p;
    fulmen_adagrad_options ag = fulmen_adagrad_options_default();
    ag.initial_accumulator_value = -1;
    CHECK_ERR(fulmen_optimizer_adagrad_new(NULL, ps, 1, &ag, &o), FULMEN_CODE_INVALID_ARGUMENT, "initial_accumulator_value");
    fulmen_adamax_options am = fulmen_adamax_options_default();
    am.beta2 = 1.0;
    CHECK_ERR(fulmen_optimizer_adamax_new(NULL, ps, 1, &am, &o), FULMEN_CODE_INVALID_ARGUMENT, "beta");
    fulmen_nadam_options na = fulmen_nadam_options_default();
    na.momentum_decay = NAN;
    CHECK_ERR(fulmen_optimizer_nadam_new(NULL, ps, 1, &na, &o), FULMEN_CODE_INVALID_ARGUMENT, "momentum_decay");
    fulmen_radam_options ra = fulmen_radam_options_default();
    ra.lr = -1;
    CHECK_ERR(fulmen_optimizer_radam_new(NULL, ps, 1, &ra, &o), FULMEN_CODE_INVALID_ARGUMENT, "learning rate");
    CHECK_ERR(fulmen_optimizer_radam_new(NULL, ps, 1, NULL, &o), FULMEN_CODE_NULL_ARGUMENT, "options");
    CHECK_ERR(fulmen_optimizer_nadam_new(NULL, NULL, 0, &na, &o), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(fulmen_adagrad_options_default().eps == 1e-10 && fulmen_adamax_options_default().lr == 2e-3);
    CHECK(fulmen_nadam_options_default().momentum_decay == 4e-3 && fulmen_radam_options_default().lr == 1e-3);
    fulmen_tensor_free(p);
}

/* A host-owned loop (Fabric style) fits y = 3x + 1 with Linear(1, 1):
 * forward, mse, backward, clip_grad_norm, step, zero_grad. */
static void test_fabric_loop(void) {
    CHECK_OK(fulmen_manual_seed(1234));
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(1, 1, true, &m));
    float xv[16], yv[16];
    for (int i = 0; i < 16; i++) {
        xv[i] = -1.0f + (float)i * (2.0f / 15.0f);
        yv[i] = 3.0f * xv[i] + 1.0f;
    }
    const int64_t d[2] = {16, 1};
    fulmen_tensor *x = check_f32(xv, 16, d, 2), *y = check_f32(yv, 16, d, 2);
    fulmen_sgd_options s = fulmen_sgd_options_default();
    s.lr = 0.1;
    s.momentum = 0.5;
    fulmen_optimizer *o = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &o));
    double first = -1, last = -1;
    int failures = 0;
    for (int it = 0; it < 300; it++) {
        fulmen_tensor *pred = NULL, *loss = NULL;
        fulmen_error *e = fulmen_model_forward(m, x, &pred);
        if (e == NULL) e = fulmen_loss_mse(pred, y, FULMEN_REDUCTION_MEAN, &loss);
        if (e == NULL) {
            last = check_item(loss);
            if (first < 0) first = last;
            e = fulmen_tensor_backward(loss);
        }
        double norm = -1;
        if (e == NULL) e = fulmen_clip_grad_norm(m, 5.0, 2.0, &norm);
        if (e == NULL && !(norm >= 0)) failures++;
        if (e == NULL) e = fulmen_optimizer_step(o);
        if (e == NULL) e = fulmen_optimizer_zero_grad(o);
        if (e != NULL) {
            failures++;
            fprintf(stderr, "fabric loop iteration %d: %s\n", it, fulmen_error_message(e));
            fulmen_error_free(e);
        }
        fulmen_tensor_free(pred);
        fulmen_tensor_free(loss);
        if (failures) break;
    }
    CHECK(failures == 0);
    CHECK(last < first && last < 1e-4);
    fulmen_tensor *w = NULL, *b = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "weight", &w));
    CHECK_OK(fulmen_model_state_dict_get(m, "bias", &b));
    CHECK_NEAR(check_item(w), 3.0, 1e-2);
    CHECK_NEAR(check_item(b), 1.0, 1e-2);
    fulmen_tensor_free(w);
    fulmen_tensor_free(b);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_optimizer_free(o);
    fulmen_model_free(m);
}

/* Per-group hyperparameters: no weight decay on the second group, its own
 * momentum, Adam's eps and betas[1]; names as the optimizer keeps them;
 * bad values and groups. */
static void test_group_hyperparameters(void) {
    const float v[3] = {1, 1, 1}, a[3] = {1, 2, 3};
    fulmen_tensor *p0 = param(v, 3), *p1 = param(v, 3);
    fulmen_sgd_options s = fulmen_sgd_options_default();
    s.lr = 0.1;
    s.weight_decay = 0.5;
    fulmen_optimizer *o = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p0, 1, &s, &o));
    CHECK_OK(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&p1, 1, -1));
    size_t groups = 0;
    CHECK_OK(fulmen_optimizer_param_group_count(o, &groups));
    CHECK(groups == 2);
    double wd = NAN;
    CHECK_OK(fulmen_optimizer_param_group_get(o, 1, "weight_decay", &wd));
    CHECK(wd == 0.5); /* the optimizer's default */
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "weight_decay", 0.0));
    CHECK_OK(fulmen_optimizer_param_group_get(o, 1, "weight_decay", &wd));
    CHECK(wd == 0.0);
    grad_of_dot(p0, a, 3);
    grad_of_dot(p1, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    double w0[3], w1[3];
    read3(p0, w0);
    read3(p1, w1);
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(w0[i], 1 - 0.1 * (a[i] + 0.5 * 1), 1e-6); /* decayed */
        CHECK_NEAR(w1[i], 1 - 0.1 * a[i], 1e-6);             /* not decayed */
    }
    /* momentum in group 1 only: its second step adds 0.9 of the first */
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "momentum", 0.9));
    double m = NAN;
    CHECK_OK(fulmen_optimizer_param_group_get(o, 0, "momentum", &m));
    CHECK(m == 0.0);
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "lr", 0.01));
    CHECK_OK(fulmen_optimizer_step(o)); /* buffer = grad */
    CHECK_OK(fulmen_optimizer_step(o)); /* buffer = 0.9 grad + grad */
    double w1b[3];
    read3(p1, w1b);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w1b[i], w1[i] - 0.01 * a[i] - 0.01 * 1.9 * a[i], 1e-6);
    /* names, values and groups refused */
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 0, "betas.0", 0.9), FULMEN_CODE_INVALID_ARGUMENT, "\"momentum\"");
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 0, "weight_decay", -1), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 0, "lr", NAN), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 2, "lr", 0.1), FULMEN_CODE_OUT_OF_RANGE, "param group 2");
    CHECK_ERR(fulmen_optimizer_param_group_get(o, 2, "lr", &m), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_get(o, 0, NULL, &m), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_get(o, 0, "lr", NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_count(NULL, &groups), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_optimizer_free(o);

    /* the Adam family keeps beta1 as betas.0 (alias beta1), below 1 */
    fulmen_adam_options ao = fulmen_adam_options_default();
    CHECK_OK(fulmen_optimizer_adamw_new(NULL, (const fulmen_tensor *const *)&p0, 1, &ao, &o));
    CHECK_OK(fulmen_optimizer_param_group_set(o, 0, "beta1", 0.5));
    CHECK_OK(fulmen_optimizer_param_group_get(o, 0, "betas.0", &m));
    CHECK(m == 0.5);
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 0, "betas.0", 1.0), FULMEN_CODE_INVALID_ARGUMENT, "0 <= beta < 1");
    CHECK_ERR(fulmen_optimizer_param_group_get(o, 0, "momentum", &m), FULMEN_CODE_INVALID_ARGUMENT, "betas.0");
    fulmen_optimizer_free(o);

    /* eps, betas[1] and the flags per group, as torch keeps them. Adam's
     * first step moves p by lr * g / (|g| + eps): group 1's eps of 1 shows. */
    fulmen_tensor *q0 = param(v, 3), *q1 = param(v, 3);
    ao.lr = 0.1;
    CHECK_OK(fulmen_optimizer_adam_new(NULL, (const fulmen_tensor *const *)&q0, 1, &ao, &o));
    CHECK_OK(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&q1, 1, -1));
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "eps", 1.0));
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "beta2", 0.9));
    CHECK_OK(fulmen_optimizer_param_group_get(o, 1, "betas.1", &m));
    CHECK(m == 0.9);
    CHECK_OK(fulmen_optimizer_param_group_get(o, 0, "eps", &m));
    CHECK(m == 1e-8);
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "amsgrad", 1));
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 1, "amsgrad", 0.5), FULMEN_CODE_INVALID_ARGUMENT, "0 or 1");
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 1, "beta2", 1.0), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 1, "eps", -1.0), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_param_group_set(o, 1, "alpha", 0.5), FULMEN_CODE_INVALID_ARGUMENT, "\"eps\"");
    CHECK_OK(fulmen_optimizer_param_group_get(o, 1, "eps", &m));
    CHECK(m == 1.0); /* unchanged by the refusals */
    grad_of_dot(q0, a, 3);
    grad_of_dot(q1, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    double r0[3], r1[3];
    read3(q0, r0);
    read3(q1, r1);
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(r0[i], 1 - 0.1, 1e-6);
        CHECK_NEAR(r1[i], 1 - 0.1 * a[i] / (a[i] + 1.0), 1e-6);
    }
    fulmen_optimizer_free(o);
    fulmen_tensor_free(q0);
    fulmen_tensor_free(q1);
    fulmen_tensor_free(p0);
    fulmen_tensor_free(p1);
}

/* get_lr / set_lr (every group), negative or NaN lr rejected; a second
 * parameter group with its own lr (or the default when lr < 0). */
static void test_lr_and_groups(void) {
    const float v[3] = {1, 1, 1}, a[3] = {1, 2, 3};
    fulmen_tensor *p0 = param(v, 3), *p1 = param(v, 3), *p2 = param(v, 3), *nograd = NULL;
    const int64_t d[1] = {3};
    nograd = check_f32(v, 3, d, 1);
    fulmen_sgd_options s = fulmen_sgd_options_default();
    s.lr = 0.1;
    fulmen_optimizer *o = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)&p0, 1, &s, &o));
    CHECK(lr_of(o) == 0.1);
    CHECK_OK(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&p1, 1, 0.5));
    CHECK_OK(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&p2, 1, -1));
    CHECK(lr_of(o) == 0.1); /* group 0 */
    grad_of_dot(p0, a, 3);
    grad_of_dot(p1, a, 3);
    grad_of_dot(p2, a, 3);
    CHECK_OK(fulmen_optimizer_step(o));
    double w0[3], w1[3], w2[3];
    read3(p0, w0);
    read3(p1, w1);
    read3(p2, w2);
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(w0[i], 1 - 0.1 * a[i], 1e-6);
        CHECK_NEAR(w1[i], 1 - 0.5 * a[i], 1e-6);
        CHECK_NEAR(w2[i], 1 - 0.1 * a[i], 1e-6);
    }
    /* set_lr applies to every group */
    CHECK_OK(fulmen_optimizer_set_lr(o, 0.01));
    CHECK(lr_of(o) == 0.01);
    CHECK_OK(fulmen_optimizer_step(o)); /* same grads still there */
    double w1b[3];
    read3(p1, w1b);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w1b[i], w1[i] - 0.01 * a[i], 1e-6);
    CHECK_OK(fulmen_optimizer_set_lr(o, 0));
    CHECK(lr_of(o) == 0);
    CHECK_ERR(fulmen_optimizer_set_lr(o, -0.1), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_set_lr(o, NAN), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_set_lr(o, INFINITY), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(lr_of(o) == 0);
    /* bad groups */
    CHECK_ERR(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&p1, 1, 0.1),
              FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&nograd, 1, 0.1),
              FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(o, NULL, NULL, 0, 0.1), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(o, NULL, NULL, 1, 0.1), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(o, WRONG_MODEL, NULL, 0, 0.1), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&p1, 1, NAN),
              FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(NULL, NULL, (const fulmen_tensor *const *)&nograd, 1, 0.1),
              FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(WRONG_OPT, NULL, (const fulmen_tensor *const *)&p1, 1, 0.1),
              FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_add_param_group(freed_optimizer(), NULL, (const fulmen_tensor *const *)&p1, 1, 0.1),
              FULMEN_CODE_INVALID_HANDLE, NULL);
    /* a model's parameters as a group */
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(2, 2, true, &m));
    CHECK_OK(fulmen_optimizer_add_param_group(o, m, NULL, 0, 0.2));
    CHECK_ERR(fulmen_optimizer_add_param_group(o, m, NULL, 0, 0.2), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    fulmen_model_free(m);
    /* get / set / step / zero_grad with bad handles */
    double lr = 0;
    CHECK_ERR(fulmen_optimizer_get_lr(o, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_get_lr(NULL, &lr), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_get_lr(WRONG_OPT, &lr), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_get_lr(freed_optimizer(), &lr), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_set_lr(NULL, 0.1), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_set_lr(WRONG_OPT, 0.1), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_set_lr(freed_optimizer(), 0.1), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_step(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_step(WRONG_OPT), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_step(freed_optimizer()), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_zero_grad(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_zero_grad(WRONG_OPT), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_zero_grad(freed_optimizer()), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_optimizer_free(o);
    fulmen_tensor_free(p0);
    fulmen_tensor_free(p1);
    fulmen_tensor_free(p2);
    fulmen_tensor_free(nograd);
}

/* clip_grad_norm returns the norm before clipping and scales the grads to
 * max_norm (L2 and inf); clip_grad_value clamps; bad arguments fail. */
static void test_clipping(void) {
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_linear_new(2, 1, false, &m));
    fulmen_tensor *w = NULL, *g = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "weight", &w));
    double norm = -1;
    CHECK_OK(fulmen_clip_grad_norm(m, 1.0, 2.0, &norm)); /* no grads yet */
    CHECK(norm == 0.0);
    const float xv[2] = {3, 4};
    const int64_t xd[2] = {1, 2};
    fulmen_tensor *x = check_f32(xv, 2, xd, 2);
    /* one backward of sum(w.x) gives grad {3, 4}, norm 5 */
    for (int round = 0; round < 4; round++) {
        fulmen_tensor *y = NULL, *l = NULL;
        CHECK_OK(fulmen_tensor_grad(w, &g));
        if (g != NULL) {
            /* reset by a fresh model-wide zero_grad through an optimizer */
            fulmen_sgd_options s = fulmen_sgd_options_default();
            fulmen_optimizer *o = NULL;
            CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &s, &o));
            CHECK_OK(fulmen_optimizer_zero_grad(o));
            fulmen_optimizer_free(o);
            fulmen_tensor_free(g);
            g = NULL;
        }
        CHECK_OK(fulmen_model_forward(m, x, &y));
        CHECK_OK(fulmen_tensor_sum(y, &l));
        CHECK_OK(fulmen_tensor_backward(l));
        fulmen_tensor_free(y);
        fulmen_tensor_free(l);
        double gv[2] = {0, 0};
        CHECK_OK(fulmen_tensor_grad(w, &g));
        if (round == 0) {
            CHECK_OK(fulmen_clip_grad_norm(m, 1.0, 2.0, &norm));
            CHECK_NEAR(norm, 5.0, 1e-6);
            CHECK_OK(fulmen_tensor_copy_to(g, FULMEN_DTYPE_F64, gv, sizeof gv));
            CHECK_NEAR(gv[0], 0.6, 1e-5);
            CHECK_NEAR(gv[1], 0.8, 1e-5);
            CHECK(sqrt(gv[0] * gv[0] + gv[1] * gv[1]) <= 1.0 + 1e-6);
            /* clipping again reports the clipped norm */
            CHECK_OK(fulmen_clip_grad_norm(m, 1.0, 2.0, &norm));
            CHECK_NEAR(norm, 1.0, 1e-5);
        } else if (round == 1) {
            CHECK_OK(fulmen_clip_grad_norm(m, 2.0, INFINITY, &norm));
            CHECK_NEAR(norm, 4.0, 1e-6);
            CHECK_OK(fulmen_tensor_copy_to(g, FULMEN_DTYPE_F64, gv, sizeof gv));
            CHECK_NEAR(gv[0], 1.5, 1e-5);
            CHECK_NEAR(gv[1], 2.0, 1e-5);
        } else if (round == 2) {
            CHECK_OK(fulmen_clip_grad_norm(m, 10.0, 2.0, NULL)); /* under the limit: unchanged */
            CHECK_OK(fulmen_tensor_copy_to(g, FULMEN_DTYPE_F64, gv, sizeof gv));
            CHECK(gv[0] == 3.0 && gv[1] == 4.0);
        } else {
            CHECK_OK(fulmen_clip_grad_value(m, 3.5));
            CHECK_OK(fulmen_tensor_copy_to(g, FULMEN_DTYPE_F64, gv, sizeof gv));
            CHECK(gv[0] == 3.0 && gv[1] == 3.5);
            CHECK_OK(fulmen_clip_grad_value(m, 0.0));
            CHECK_OK(fulmen_tensor_copy_to(g, FULMEN_DTYPE_F64, gv, sizeof gv));
            CHECK(gv[0] == 0.0 && gv[1] == 0.0);
        }
        fulmen_tensor_free(g);
        g = NULL;
    }
    CHECK_ERR(fulmen_clip_grad_norm(m, -1.0, 2.0, &norm), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_norm(m, NAN, 2.0, &norm), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_norm(m, 1.0, 0.0, &norm), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_norm(m, 1.0, -2.0, &norm), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_norm(NULL, 1.0, 2.0, &norm), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_norm(WRONG_MODEL, 1.0, 2.0, &norm), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_clip_grad_value(m, -1.0), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_value(m, NAN), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_value(NULL, 1.0), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_clip_grad_value(WRONG_MODEL, 1.0), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_model *gone = NULL;
    CHECK_OK(fulmen_model_linear_new(1, 1, true, &gone));
    fulmen_model_free(gone);
    CHECK_ERR(fulmen_clip_grad_norm(gone, 1.0, 2.0, &norm), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_clip_grad_value(gone, 1.0), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor_free(x);
    fulmen_tensor_free(w);
    fulmen_model_free(m);
}

/* ------------------------------------------------------------ schedulers */

/* Steps `sched` n times and records the lr after each step in lrs. */
static void run_schedule(fulmen_scheduler *sched, fulmen_optimizer *o, int n, double *lrs) {
    for (int i = 0; i < n; i++) {
        CHECK_OK(fulmen_scheduler_step(sched, o, 0.0));
        lrs[i] = lr_of(o);
    }
}

#define EXPECT_LRS(got, want, n) expect_lrs(__LINE__, (got), (want), (n))
static void expect_lrs(int line, const double *got, const double *want, int n) {
    int before = check_failed;
    for (int i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) <= 1e-9 + 1e-6 * fabs(want[i]))) {
            check_failed++;
            fprintf(stderr, "  lr after step %d: got %.10g, want %.10g\n", i + 1, got[i], want[i]);
        } else {
            check_passed++;
        }
    }
    if (check_failed != before) fprintf(stderr, "  (EXPECT_LRS called from line %d)\n", line);
}

/* StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR and LinearLR give
 * torch's lr sequences. */
static void test_closed_form_schedulers(void) {
    double got[8];
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *s = NULL;
    /* StepLR(2, 0.5): halves every 2 steps */
    CHECK_OK(fulmen_scheduler_step_lr_new(o, 2, 0.5, &s));
    CHECK(lr_of(o) == 0.1);
    run_schedule(s, o, 5, got);
    const double w_step[5] = {0.1, 0.05, 0.05, 0.025, 0.025};
    EXPECT_LRS(got, w_step, 5);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
    /* MultiStepLR({2, 4}, 0.1) */
    o = sgd_with_lr(0.1);
    const int64_t ms[2] = {2, 4};
    CHECK_OK(fulmen_scheduler_multi_step_lr_new(o, ms, 2, 0.1, &s));
    run_schedule(s, o, 5, got);
    const double w_ms[5] = {0.1, 0.01, 0.01, 0.001, 0.001};
    EXPECT_LRS(got, w_ms, 5);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
    /* ExponentialLR(0.9) */
    o = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_exponential_lr_new(o, 0.9, &s));
    run_schedule(s, o, 3, got);
    const double w_exp[3] = {0.09, 0.081, 0.0729};
    EXPECT_LRS(got, w_exp, 3);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
    /* CosineAnnealingLR(4, 0.01) */
    o = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_cosine_lr_new(o, 4, 0.01, &s));
    run_schedule(s, o, 4, got);
    double w_cos[4];
    for (int t = 1; t <= 4; t++) w_cos[t - 1] = 0.01 + (0.1 - 0.01) * (1 + cos(M_PI * t / 4.0)) / 2;
    EXPECT_LRS(got, w_cos, 4);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
    /* LinearLR(0.25, 1.0, 4): warm-up, applied at construction */
    o = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_linear_lr_new(o, 0.25, 1.0, 4, &s));
    CHECK_NEAR(lr_of(o), 0.025, 1e-12);
    run_schedule(s, o, 6, got);
    const double w_lin[6] = {0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1};
    EXPECT_LRS(got, w_lin, 6);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
}

/* ConstantLR, PolynomialLR, CosineAnnealingWarmRestarts and SequentialLR
 * (warm-up then cosine) give torch 2.13's learning rates; SequentialLR
 * consumes its schedulers on success only. */
static void test_new_schedulers(void) {
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *s = NULL;
    double got[12];
    CHECK_OK(fulmen_scheduler_constant_lr_new(o, 0.5, 3, &s));
    CHECK_NEAR(lr_of(o), 0.05, 1e-12);
    run_schedule(s, o, 4, got);
    const double w_const[4] = {0.05, 0.05, 0.1, 0.1};
    EXPECT_LRS(got, w_const, 4);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);

    o = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_polynomial_lr_new(o, 6, 2.0, &s));
    run_schedule(s, o, 7, got);
    const double w_poly[7] = {0.06944444444444446, 0.04444444444444447, 0.02500000000000001, 0.011111111111111117,
                              0.0027777777777777775, 0.0, 0.0};
    EXPECT_LRS(got, w_poly, 7);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);

    o = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_cosine_warm_restarts_new(o, 3, 2, 0.01, &s));
    run_schedule(s, o, 10, got);
    const double w_sgdr[10] = {0.0775, 0.032500000000000015, 0.1, 0.09397114317029975, 0.0775, 0.05500000000000001,
                               0.032500000000000015, 0.01602885682970026, 0.1, 0.09846666218300808};
    EXPECT_LRS(got, w_sgdr, 10);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);

    /* SequentialLR([LinearLR(0.1, 1, 3), CosineAnnealingLR(6, 0.001)], [3]) */
    o = sgd_with_lr(0.1);
    fulmen_scheduler *warm = NULL, *cosine = NULL, *plateau = NULL, *foreign = NULL;
    CHECK_OK(fulmen_scheduler_linear_lr_new(o, 0.1, 1.0, 3, &warm));
    CHECK_OK(fulmen_scheduler_cosine_lr_new(o, 6, 0.001, &cosine));
    fulmen_plateau_options po = fulmen_plateau_options_default();
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_new(o, &po, &plateau));
    fulmen_optimizer *other = sgd_with_lr(0.1);
    CHECK_OK(fulmen_scheduler_step_lr_new(other, 1, 0.5, &foreign));
    const int64_t at3[1] = {3}, at_neg[1] = {-1};
    size_t live = fulmen_live_handles();
    fulmen_scheduler *with_plateau[2] = {warm, plateau}, *with_foreign[2] = {warm, foreign},
                     *twice[2] = {warm, warm}, *pair[2] = {warm, cosine};
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, with_plateau, 2, at3, 1, &s), FULMEN_CODE_INVALID_ARGUMENT,
              "reduce_lr_on_plateau");
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, with_foreign, 2, at3, 1, &s), FULMEN_CODE_INVALID_ARGUMENT,
              "another optimizer");
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, twice, 2, at3, 1, &s), FULMEN_CODE_INVALID_ARGUMENT, "again");
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, pair, 2, at3, 0, &s), FULMEN_CODE_INVALID_ARGUMENT, "milestones");
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, pair, 2, at_neg, 1, &s), FULMEN_CODE_INVALID_ARGUMENT, "milestones");
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, pair, 0, NULL, 0, &s), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, pair, FULMEN_SEQUENTIAL_MAX + 1, NULL, 0, &s),
              FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_sequential_lr_new(o, NULL, 2, at3, 1, &s), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(fulmen_live_handles() == live); /* nothing consumed by a failure */
    CHECK_OK(fulmen_scheduler_sequential_lr_new(o, pair, 2, at3, 1, &s));
    CHECK(fulmen_live_handles() == live - 1); /* two consumed, one made */
    CHECK_NEAR(lr_of(o), 0.010000000000000002, 1e-15);
    run_schedule(s, o, 12, got);
    const double w_seq[12] = {0.04, 0.07, 0.1, 0.09336825748732973, 0.07525000000000001, 0.0505, 0.025750000000000012,
                              0.007631742512670284, 0.001, 0.007631742512670284, 0.025750000000000002,
                              0.05050000000000004};
    EXPECT_LRS(got, w_seq, 12);
    fulmen_scheduler_free(s);
    fulmen_scheduler_free(plateau);
    fulmen_scheduler_free(foreign);
    fulmen_optimizer_free(other);
    fulmen_optimizer_free(o);
}

/* ChainedScheduler([ConstantLR(0.5, 3), ExponentialLR(0.9)]): the factors
 * compose as in torch 2.13; the parts must be fresh, and a failure
 * consumes none of them. */
static void test_chained_scheduler(void) {
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *constant = NULL, *decay = NULL, *plateau = NULL, *stepped = NULL, *seq = NULL, *s = NULL;
    CHECK_OK(fulmen_scheduler_constant_lr_new(o, 0.5, 3, &constant));
    CHECK_OK(fulmen_scheduler_exponential_lr_new(o, 0.9, &decay));
    fulmen_plateau_options po = fulmen_plateau_options_default();
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_new(o, &po, &plateau));
    CHECK_OK(fulmen_scheduler_step_lr_new(o, 2, 0.5, &stepped));
    CHECK_OK(fulmen_scheduler_step(stepped, o, 0.0));
    fulmen_scheduler *a = NULL, *b = NULL;
    CHECK_OK(fulmen_scheduler_linear_lr_new(o, 0.5, 1.0, 2, &a));
    CHECK_OK(fulmen_scheduler_exponential_lr_new(o, 0.9, &b));
    fulmen_scheduler *seq_parts[2] = {a, b};
    const int64_t at2[1] = {2};
    CHECK_OK(fulmen_scheduler_sequential_lr_new(o, seq_parts, 2, at2, 1, &seq));
    size_t live = fulmen_live_handles();
    fulmen_scheduler *with_plateau[2] = {constant, plateau}, *with_stepped[2] = {constant, stepped},
                     *with_seq[2] = {constant, seq}, *twice[2] = {constant, constant}, *pair[2] = {constant, decay};
    CHECK_ERR(fulmen_scheduler_chained_new(o, with_plateau, 2, &s), FULMEN_CODE_INVALID_ARGUMENT,
              "reduce_lr_on_plateau");
    CHECK_ERR(fulmen_scheduler_chained_new(o, with_stepped, 2, &s), FULMEN_CODE_INVALID_STATE, "stepped");
    CHECK_ERR(fulmen_scheduler_chained_new(o, with_seq, 2, &s), FULMEN_CODE_INVALID_ARGUMENT, "sequential_lr");
    CHECK_ERR(fulmen_scheduler_chained_new(o, twice, 2, &s), FULMEN_CODE_INVALID_ARGUMENT, "again");
    CHECK_ERR(fulmen_scheduler_chained_new(o, pair, 0, &s), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_chained_new(o, pair, FULMEN_CHAINED_MAX + 1, &s), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_chained_new(o, NULL, 2, &s), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_chained_new(o, pair, 2, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(fulmen_live_handles() == live); /* nothing consumed by a failure */
    CHECK_OK(fulmen_scheduler_chained_new(o, pair, 2, &s));
    CHECK(fulmen_live_handles() == live - 1); /* two consumed, one made */
    CHECK(lr_of(o) == 0.05);
    double got[12];
    run_schedule(s, o, 12, got);
    const double want[12] = {0.045000000000000005, 0.04050000000000001, 0.07290000000000002, 0.06561000000000002,
                             0.05904900000000002, 0.05314410000000002, 0.04782969000000002, 0.043046721000000024,
                             0.03874204890000002, 0.03486784401000002, 0.03138105960900001, 0.028242953648100012};
    for (int i = 0; i < 12; i++) CHECK(got[i] == want[i]); /* torch's operations, torch's bits */
    fulmen_scheduler_free(s);
    fulmen_scheduler_free(plateau);
    fulmen_scheduler_free(stepped);
    fulmen_scheduler_free(seq);
    fulmen_optimizer_free(o);
}

/* OneCycleLR: starts at max_lr / div_factor, peaks at max_lr after
 * pct_start of the cycle, ends at initial / final_div_factor; stepping past
 * the cycle is an error. */
static void test_one_cycle(void) {
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *s = NULL;
    fulmen_one_cycle_options oc = fulmen_one_cycle_options_default(1.0, 10);
    CHECK_OK(fulmen_scheduler_one_cycle_lr_new(o, &oc, &s));
    CHECK_NEAR(lr_of(o), 0.04, 1e-12);
    double got[9], want[9];
    run_schedule(s, o, 9, got);
    /* phase 1 ends at step 0.3 * 10 - 1 = 2, phase 2 at step 9 (cosine) */
    for (int t = 1; t <= 9; t++) {
        double start, end, pct;
        if (t <= 2) {
            start = 0.04, end = 1.0, pct = t / 2.0;
        } else {
            start = 1.0, end = 0.04 / 1e4, pct = (t - 2) / 7.0;
        }
        want[t - 1] = end + (start - end) / 2 * (1 + cos(M_PI * pct));
    }
    EXPECT_LRS(got, want, 9);
    /* past the cycle: an error within a couple of steps */
    fulmen_error *e = NULL;
    for (int i = 0; i < 3 && e == NULL; i++) e = fulmen_scheduler_step(s, o, 0.0);
    CHECK(e != NULL && fulmen_error_code(e) == FULMEN_CODE_OUT_OF_RANGE);
    fulmen_error_free(e);
    fulmen_scheduler_free(s);
    /* linear annealing */
    fulmen_optimizer_free(o);
    o = sgd_with_lr(0.1);
    oc.linear_anneal = true;
    CHECK_OK(fulmen_scheduler_one_cycle_lr_new(o, &oc, &s));
    run_schedule(s, o, 1, got);
    CHECK_NEAR(got[0], 0.04 + (1.0 - 0.04) * 0.5, 1e-9);
    fulmen_scheduler_free(s);
    /* bad options */
    fulmen_scheduler *bad = NULL;
    oc = fulmen_one_cycle_options_default(1.0, 0);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_new(o, &oc, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    oc = fulmen_one_cycle_options_default(1.0, 10);
    oc.pct_start = 1.5;
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_new(o, &oc, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    oc = fulmen_one_cycle_options_default(-1.0, 10);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_new(o, &oc, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    oc = fulmen_one_cycle_options_default(1.0, 10);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_new(o, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_new(o, &oc, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_new(NULL, &oc, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    /* a peak per param group: each group starts at its max_lr / 25 */
    const float ones[2] = {1, 1};
    fulmen_tensor *extra = param(ones, 2);
    CHECK_OK(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&extra, 1, -1));
    const double peaks[2] = {1.0, 5.0};
    CHECK_OK(fulmen_scheduler_one_cycle_lr_max_lrs_new(o, &oc, peaks, 2, &s));
    double g0 = 0, g1 = 0;
    CHECK_OK(fulmen_optimizer_param_group_get(o, 0, "lr", &g0));
    CHECK_OK(fulmen_optimizer_param_group_get(o, 1, "lr", &g1));
    CHECK_NEAR(g0, 0.04, 1e-15);
    CHECK_NEAR(g1, 0.2, 1e-15);
    fulmen_scheduler_free(s);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_max_lrs_new(o, &oc, peaks, 1, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "2 max_lrs");
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_max_lrs_new(o, &oc, NULL, 2, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_max_lrs_new(o, &oc, peaks, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    const double zero[2] = {1.0, 0.0};
    CHECK_ERR(fulmen_scheduler_one_cycle_lr_max_lrs_new(o, &oc, zero, 2, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(extra);
    fulmen_optimizer_free(o);
}

/* ReduceLROnPlateau: needs a finite metric; reduces by factor after more
 * than `patience` bad steps; respects min_lr, cooldown and mode max. */
static void test_plateau(void) {
    fulmen_optimizer *o = sgd_with_lr(0.1);
    fulmen_scheduler *s = NULL;
    fulmen_plateau_options p = fulmen_plateau_options_default();
    p.patience = 2;
    p.factor = 0.5;
    p.min_lr = 0.03;
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_new(o, &p, &s));
    CHECK_ERR(fulmen_scheduler_step(s, o, NAN), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(lr_of(o) == 0.1);
    const double metrics[9] = {1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5};
    const double want[9] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.03, 0.03};
    double got[9];
    for (int i = 0; i < 9; i++) {
        CHECK_OK(fulmen_scheduler_step(s, o, metrics[i]));
        got[i] = lr_of(o);
    }
    EXPECT_LRS(got, want, 9);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
    /* defaults (patience 10, factor 0.1), mode max and cooldown */
    o = sgd_with_lr(1.0);
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_new(o, NULL, &s));
    for (int i = 0; i < 11; i++) CHECK_OK(fulmen_scheduler_step(s, o, 3.0));
    CHECK_NEAR(lr_of(o), 1.0, 1e-12);
    CHECK_OK(fulmen_scheduler_step(s, o, 3.0));
    CHECK_NEAR(lr_of(o), 0.1, 1e-12);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(o);
    o = sgd_with_lr(1.0);
    p = fulmen_plateau_options_default();
    p.mode_max = true;
    p.patience = 0;
    p.cooldown = 2;
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_new(o, &p, &s));
    const double up[6] = {1, 2, 2, 2, 2, 3};
    const double want_up[6] = {1, 1, 0.1, 0.1, 0.1, 0.1};
    for (int i = 0; i < 6; i++) {
        CHECK_OK(fulmen_scheduler_step(s, o, up[i]));
        got[i] = lr_of(o);
    }
    EXPECT_LRS(got, want_up, 6);
    fulmen_scheduler_free(s);
    /* bad options */
    fulmen_scheduler *bad = NULL;
    p = fulmen_plateau_options_default();
    p.factor = 1.0;
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_new(o, &p, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    p = fulmen_plateau_options_default();
    p.min_lr = -1;
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_new(o, &p, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_new(o, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_new(NULL, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    /* one bound per param group: here group 1 (lr 2) stops at 0.5, group 0
     * (lr 1) at its own 0.3 */
    const float ones[2] = {1, 1};
    fulmen_tensor *extra = param(ones, 2);
    CHECK_OK(fulmen_optimizer_add_param_group(o, NULL, (const fulmen_tensor *const *)&extra, 1, 2.0));
    CHECK_OK(fulmen_optimizer_set_lr(o, 1.0));
    CHECK_OK(fulmen_optimizer_param_group_set(o, 1, "lr", 2.0));
    p = fulmen_plateau_options_default();
    p.patience = 0;
    const double bounds[2] = {0.3, 0.5};
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_min_lrs_new(o, &p, bounds, 2, &s));
    for (int i = 0; i < 3; i++) CHECK_OK(fulmen_scheduler_step(s, o, 1.0));
    double g0 = 0, g1 = 0;
    CHECK_OK(fulmen_optimizer_param_group_get(o, 0, "lr", &g0));
    CHECK_OK(fulmen_optimizer_param_group_get(o, 1, "lr", &g1));
    CHECK(g0 == 0.3 && g1 == 0.5);
    fulmen_scheduler_free(s);
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_min_lrs_new(o, &p, bounds, 1, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "2 min_lrs");
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_min_lrs_new(o, &p, NULL, 2, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const double negative[2] = {0.3, -1};
    CHECK_ERR(fulmen_scheduler_reduce_on_plateau_min_lrs_new(o, &p, negative, 2, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(extra);
    fulmen_optimizer_free(o);
}

/* Scheduler constructors reject bad arguments and bad optimizer handles;
 * stepping with another optimizer, a NULL, freed or wrong-type handle is
 * an error; freeing is idempotent. */
static void test_scheduler_errors(void) {
    fulmen_optimizer *o = sgd_with_lr(0.1), *other = sgd_with_lr(0.1), *gone = freed_optimizer();
    fulmen_scheduler *bad = NULL, *s = NULL;
    const int64_t ms[2] = {2, 4};
    CHECK_ERR(fulmen_scheduler_step_lr_new(o, 0, 0.5, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_step_lr_new(o, 2, NAN, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_multi_step_lr_new(o, NULL, 2, 0.1, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_multi_step_lr_new(o, ms, 2, INFINITY, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_exponential_lr_new(o, NAN, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_cosine_lr_new(o, 0, 0.0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_linear_lr_new(o, 0.0, 1.0, 4, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_linear_lr_new(o, 0.5, 1.5, 4, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_linear_lr_new(o, 0.5, 1.0, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_step_lr_new(NULL, 2, 0.5, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_step_lr_new(WRONG_OPT, 2, 0.5, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_scheduler_step_lr_new(gone, 2, 0.5, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_scheduler_step_lr_new(o, 2, 0.5, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_multi_step_lr_new(NULL, ms, 2, 0.1, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_multi_step_lr_new(o, ms, 2, 0.1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_exponential_lr_new(WRONG_OPT, 0.9, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_scheduler_exponential_lr_new(o, 0.9, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_cosine_lr_new(NULL, 4, 0.0, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_cosine_lr_new(o, 4, 0.0, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_linear_lr_new(gone, 0.5, 1.0, 4, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_scheduler_linear_lr_new(o, 0.5, 1.0, 4, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    CHECK(lr_of(o) == 0.1); /* failed constructors leave the lr alone */

    CHECK_OK(fulmen_scheduler_step_lr_new(o, 1, 0.5, &s));
    CHECK_ERR(fulmen_scheduler_step(s, other, 0.0), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(lr_of(o) == 0.1 && lr_of(other) == 0.1);
    CHECK_ERR(fulmen_scheduler_step(s, NULL, 0.0), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_step(NULL, o, 0.0), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_scheduler_step(WRONG_SCHED, o, 0.0), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_scheduler_step(s, WRONG_OPT, 0.0), FULMEN_CODE_INVALID_HANDLE, "fulmen_optimizer");
    CHECK_OK(fulmen_scheduler_step(s, o, 0.0));
    CHECK(lr_of(o) == 0.05);
    /* the optimizer freed under the scheduler */
    fulmen_optimizer_free(o);
    CHECK_ERR(fulmen_scheduler_step(s, o, 0.0), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_scheduler_free(s);
    CHECK_ERR(fulmen_scheduler_step(s, other, 0.0), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_scheduler_free(s); /* double free: ignored */
    fulmen_scheduler_free(NULL);
    fulmen_scheduler_free(WRONG_SCHED); /* a tensor: must stay alive */
    size_t n = 0;
    CHECK_OK(fulmen_tensor_numel(g_tensor, &n));
    fulmen_optimizer_free(other);
}

/* Fused updates (torch's fused=True): close to the default updates (torch's
 * fused kernels differ in the last bits; lightning_parity.py checks them
 * bit for bit against torch's), reported, and refused where torch has
 * none. */
static void test_fused(void) {
    const float start[3] = {1.0f, -2.0f, 0.5f}, a[3] = {0.3f, -0.7f, 1.1f};
    for (int kind = 0; kind < 4; kind++) {
        fulmen_tensor *p[2] = {param(start, 3), param(start, 3)};
        fulmen_optimizer *o[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            const fulmen_tensor *ps[1] = {p[k]};
            if (kind == 0) {
                fulmen_sgd_options s = fulmen_sgd_options_default();
                s.lr = 0.1;
                s.momentum = 0.9;
                s.nesterov = true;
                CHECK_OK(fulmen_optimizer_sgd_new(NULL, ps, 1, &s, &o[k]));
            } else if (kind == 3) {
                fulmen_adagrad_options g = fulmen_adagrad_options_default();
                g.lr = 0.1;
                g.lr_decay = 0.01;
                g.initial_accumulator_value = 0.1;
                CHECK_OK(fulmen_optimizer_adagrad_new(NULL, ps, 1, &g, &o[k]));
            } else {
                fulmen_adam_options d = kind == 1 ? fulmen_adam_options_default() : fulmen_adamw_options_default();
                d.lr = 0.05;
                d.amsgrad = true;
                CHECK_OK(kind == 1 ? fulmen_optimizer_adam_new(NULL, ps, 1, &d, &o[k])
                                   : fulmen_optimizer_adamw_new(NULL, ps, 1, &d, &o[k]));
            }
        }
        CHECK_OK(fulmen_optimizer_set_fused(o[1], true));
        bool fused[2] = {true, false};
        CHECK_OK(fulmen_optimizer_fused(o[0], &fused[0]));
        CHECK_OK(fulmen_optimizer_fused(o[1], &fused[1]));
        CHECK(!fused[0] && fused[1]);
        for (int step = 0; step < 6; step++) {
            for (int k = 0; k < 2; k++) {
                CHECK_OK(fulmen_optimizer_zero_grad(o[k]));
                grad_of_dot(p[k], a, 3);
                CHECK_OK(fulmen_optimizer_step(o[k]));
            }
        }
        double x[3], y[3];
        read3(p[0], x);
        read3(p[1], y);
        for (int i = 0; i < 3; i++) {
            CHECK_NEAR(y[i], x[i], 1e-6);
            CHECK(fabs(y[i] - start[i]) > 0.1); /* the fused update moved it */
        }
        for (int k = 0; k < 2; k++) {
            fulmen_optimizer_free(o[k]);
            fulmen_tensor_free(p[k]);
        }
    }
    fulmen_tensor *q = param(start, 3);
    const fulmen_tensor *qs[1] = {q};
    fulmen_optimizer *lbfgs = NULL, *rms = NULL;
    fulmen_lbfgs_options lo = fulmen_lbfgs_options_default();
    fulmen_rmsprop_options ro = fulmen_rmsprop_options_default();
    CHECK_OK(fulmen_optimizer_lbfgs_new(NULL, qs, 1, &lo, &lbfgs));
    CHECK_OK(fulmen_optimizer_rmsprop_new(NULL, qs, 1, &ro, &rms));
    CHECK_ERR(fulmen_optimizer_set_fused(lbfgs, true), FULMEN_CODE_UNSUPPORTED, "fused");
    CHECK_ERR(fulmen_optimizer_set_fused(rms, true), FULMEN_CODE_UNSUPPORTED, "fused");
    CHECK_OK(fulmen_optimizer_set_fused(rms, false));
    CHECK_ERR(fulmen_optimizer_set_fused(NULL, true), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_set_fused(WRONG_OPT, true), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_optimizer_free(lbfgs);
    fulmen_optimizer_free(rms);
    fulmen_tensor_free(q);
}

/* Foreach updates (torch's foreach) of SGD, Adam, AdamW, Adagrad, RMSprop
 * and Adamax: on the CPU equal to the for-loop updates bit for bit, as
 * torch's are; NAdam's and RAdam's, which order their operations
 * differently (torch's too), within float32 rounding of them. The choice
 * reported, and refused for LBFGS or with fused updates. */
static void test_foreach(void) {
    const float start[3] = {1.0f, -2.0f, 0.5f}, a[3] = {0.3f, -0.7f, 1.1f};
    for (int kind = 0; kind < 8; kind++) {
        fulmen_tensor *p[2] = {param(start, 3), param(start, 3)};
        fulmen_optimizer *o[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            const fulmen_tensor *ps[1] = {p[k]};
            if (kind == 0) {
                fulmen_sgd_options s = fulmen_sgd_options_default();
                s.lr = 0.1;
                s.momentum = 0.9;
                s.weight_decay = 0.01;
                CHECK_OK(fulmen_optimizer_sgd_new(NULL, ps, 1, &s, &o[k]));
            } else if (kind == 3) {
                fulmen_adagrad_options g = fulmen_adagrad_options_default();
                g.lr = 0.1;
                g.lr_decay = 0.01;
                g.weight_decay = 0.1;
                CHECK_OK(fulmen_optimizer_adagrad_new(NULL, ps, 1, &g, &o[k]));
            } else if (kind == 4) {
                fulmen_rmsprop_options r = fulmen_rmsprop_options_default();
                r.lr = 0.05;
                r.momentum = 0.9;
                r.centered = true;
                CHECK_OK(fulmen_optimizer_rmsprop_new(NULL, ps, 1, &r, &o[k]));
            } else if (kind == 5) {
                fulmen_adamax_options x = fulmen_adamax_options_default();
                x.lr = 0.1;
                x.weight_decay = 0.1;
                CHECK_OK(fulmen_optimizer_adamax_new(NULL, ps, 1, &x, &o[k]));
            } else if (kind == 6) {
                fulmen_nadam_options n = fulmen_nadam_options_default();
                n.lr = 0.1;
                n.weight_decay = 0.1;
                n.decoupled_weight_decay = true;
                CHECK_OK(fulmen_optimizer_nadam_new(NULL, ps, 1, &n, &o[k]));
            } else if (kind == 7) {
                fulmen_radam_options r = fulmen_radam_options_default();
                r.lr = 0.1;
                r.weight_decay = 0.1;
                CHECK_OK(fulmen_optimizer_radam_new(NULL, ps, 1, &r, &o[k]));
            } else {
                fulmen_adam_options d = kind == 1 ? fulmen_adam_options_default() : fulmen_adamw_options_default();
                d.lr = 0.05;
                d.amsgrad = true;
                CHECK_OK(kind == 1 ? fulmen_optimizer_adam_new(NULL, ps, 1, &d, &o[k])
                                   : fulmen_optimizer_adamw_new(NULL, ps, 1, &d, &o[k]));
            }
        }
        int32_t choice[2] = {-1, -1};
        CHECK_OK(fulmen_optimizer_foreach(o[0], &choice[0]));
        CHECK(choice[0] == FULMEN_FOREACH_DEFAULT);
        CHECK_OK(fulmen_optimizer_set_foreach(o[0], FULMEN_FOREACH_OFF));
        CHECK_OK(fulmen_optimizer_set_foreach(o[1], FULMEN_FOREACH_ON));
        CHECK_OK(fulmen_optimizer_foreach(o[0], &choice[0]));
        CHECK_OK(fulmen_optimizer_foreach(o[1], &choice[1]));
        CHECK(choice[0] == FULMEN_FOREACH_OFF && choice[1] == FULMEN_FOREACH_ON);
        if (kind == 0 || kind == 1 || kind == 2 || kind == 3) { /* the kinds with fused updates */
            CHECK_ERR(fulmen_optimizer_set_fused(o[1], true), FULMEN_CODE_INVALID_ARGUMENT, "foreach");
        }
        for (int step = 0; step < 6; step++) {
            for (int k = 0; k < 2; k++) {
                CHECK_OK(fulmen_optimizer_zero_grad(o[k]));
                grad_of_dot(p[k], a, 3);
                CHECK_OK(fulmen_optimizer_step(o[k]));
            }
        }
        double x[3], y[3];
        read3(p[0], x);
        read3(p[1], y);
        for (int i = 0; i < 3; i++) {
            CHECK(kind < 6 ? y[i] == x[i] : fabs(y[i] - x[i]) <= 1e-5 * fmax(1.0, fabs(x[i])));
            CHECK(fabs(y[i] - start[i]) > 0.1);
        }
        for (int k = 0; k < 2; k++) {
            fulmen_optimizer_free(o[k]);
            fulmen_tensor_free(p[k]);
        }
    }
    fulmen_tensor *q = param(start, 3);
    const fulmen_tensor *qs[1] = {q};
    fulmen_optimizer *lbfgs = NULL, *sgd = NULL;
    fulmen_lbfgs_options lo = fulmen_lbfgs_options_default();
    fulmen_sgd_options so = fulmen_sgd_options_default();
    CHECK_OK(fulmen_optimizer_lbfgs_new(NULL, qs, 1, &lo, &lbfgs));
    CHECK_OK(fulmen_optimizer_sgd_new(NULL, qs, 1, &so, &sgd));
    CHECK_ERR(fulmen_optimizer_set_foreach(lbfgs, FULMEN_FOREACH_ON), FULMEN_CODE_UNSUPPORTED, "foreach");
    CHECK_OK(fulmen_optimizer_set_foreach(lbfgs, FULMEN_FOREACH_OFF));
    int32_t choice = -1;
    CHECK_OK(fulmen_optimizer_foreach(lbfgs, &choice));
    CHECK(choice == FULMEN_FOREACH_DEFAULT);
    CHECK_ERR(fulmen_optimizer_set_foreach(sgd, 7), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_foreach");
    CHECK_ERR(fulmen_optimizer_set_foreach(sgd, -1), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_foreach");
    CHECK_OK(fulmen_optimizer_set_fused(sgd, true));
    CHECK_ERR(fulmen_optimizer_set_foreach(sgd, FULMEN_FOREACH_ON), FULMEN_CODE_INVALID_ARGUMENT, "fused");
    CHECK_ERR(fulmen_optimizer_set_foreach(NULL, FULMEN_FOREACH_ON), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_set_foreach(WRONG_OPT, FULMEN_FOREACH_ON), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_optimizer_foreach(sgd, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    fulmen_optimizer_free(lbfgs);
    fulmen_optimizer_free(sgd);
    fulmen_tensor_free(q);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(0));
    CHECK_OK(fulmen_tensor_zeros(NULL, 0, FULMEN_DTYPE_F32, &g_tensor));
    test_defaults();
    test_constructors();
    test_params();
    test_sgd_exact();
    test_adaptive_first_step();
    test_more_optimizers();
    test_fabric_loop();
    test_lr_and_groups();
    test_group_hyperparameters();
    test_clipping();
    test_closed_form_schedulers();
    test_new_schedulers();
    test_chained_scheduler();
    test_one_cycle();
    test_plateau();
    test_scheduler_errors();
    test_fused();
    test_foreach();
    fulmen_tensor_free(g_tensor);
    return check_finish("test_optim");
}

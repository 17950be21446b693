/*
 * Optimizers that re-evaluate the loss: LBFGS and
 * fulmen_optimizer_step_closure in a host loop (convergence, evaluation
 * counts, gradients reset before each call, the closure's errors, calls
 * on the busy optimizer, other optimizers through the same call), and
 * LBFGS in the trainer (every evaluation re-runs training_step; what fit
 * refuses).
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---------------------------------------------------------- host loop */

/* What the closure reads: a linear fit y = 3x + 1 on 16 points. */
typedef struct {
    fulmen_model *model;
    fulmen_tensor *x, *y;
    fulmen_optimizer *opt; /* the stepping optimizer, to try calls on it */
    int calls;
    int fail_at;         /* the call that fails (0: none) */
    int grads_were_none; /* calls that found every gradient reset */
    int busy_refused;    /* calls on the busy optimizer refused as in use */
} fit_data;

static fulmen_error *mse_closure(void *ud, double *loss) {
    fit_data *d = ud;
    d->calls++;
    if (d->fail_at == d->calls) return fulmen_error_new(FULMEN_CODE_CALLBACK, "closure gave up");
    fulmen_tensor *w = NULL, *g = NULL;
    fulmen_error *e = fulmen_model_state_dict_get(d->model, "weight", &w);
    if (e == NULL) e = fulmen_tensor_grad(w, &g);
    if (e == NULL && g == NULL) d->grads_were_none++;
    fulmen_tensor_free(g);
    fulmen_tensor_free(w);
    if (e == NULL && d->opt != NULL) {
        fulmen_error *busy = fulmen_optimizer_zero_grad(d->opt);
        if (busy != NULL && fulmen_error_code(busy) == FULMEN_CODE_INVALID_STATE) d->busy_refused++;
        fulmen_error_free(busy);
    }
    fulmen_tensor *pred = NULL, *l = NULL;
    if (e == NULL) e = fulmen_model_forward(d->model, d->x, &pred);
    if (e == NULL) e = fulmen_loss_mse(pred, d->y, FULMEN_REDUCTION_MEAN, &l);
    if (e == NULL) e = fulmen_tensor_backward(l);
    if (e == NULL) e = fulmen_tensor_item(l, loss);
    /* pred and l are left to the closure's scope, which frees them. */
    return e;
}

static fit_data line_data(void) {
    fit_data d = {0};
    CHECK_OK(fulmen_manual_seed(7));
    CHECK_OK(fulmen_model_linear_new(1, 1, true, &d.model));
    float xv[16], yv[16];
    for (int i = 0; i < 16; i++) {
        xv[i] = -1.0f + (float)i * (2.0f / 15.0f);
        yv[i] = 3.0f * xv[i] + 1.0f;
    }
    const int64_t shape[2] = {16, 1};
    d.x = check_f32(xv, 16, shape, 2);
    d.y = check_f32(yv, 16, shape, 2);
    return d;
}

static void free_data(fit_data *d) {
    fulmen_tensor_free(d->x);
    fulmen_tensor_free(d->y);
    fulmen_model_free(d->model);
}

/* LBFGS with the strong-Wolfe line search solves the least squares in a
 * step or two; each call's gradients start reset; the first evaluation's
 * loss comes back. */
static void test_lbfgs_host_loop(void) {
    fit_data d = line_data();
    fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
    CHECK(o.lr == 1.0 && o.max_iter == 20 && o.max_eval == 0 && o.history_size == 100 && !o.strong_wolfe);
    CHECK(o.tolerance_grad == 1e-7 && o.tolerance_change == 1e-9);
    o.strong_wolfe = true;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_lbfgs_new(d.model, NULL, 0, &o, &opt));
    d.opt = opt;
    double first = -1, loss = -1;
    CHECK_OK(fulmen_optimizer_step_closure(opt, mse_closure, &d, &first));
    CHECK(first > 1.0);
    CHECK(d.calls > 1 && d.calls <= 25); /* max_eval: 20 * 5 / 4 */
    CHECK(d.grads_were_none == d.calls);
    CHECK(d.busy_refused == d.calls);
    CHECK_OK(fulmen_optimizer_step_closure(opt, mse_closure, &d, &loss));
    CHECK(loss < 1e-6);
    fulmen_tensor *w = NULL, *b = NULL;
    CHECK_OK(fulmen_model_state_dict_get(d.model, "weight", &w));
    CHECK_OK(fulmen_model_state_dict_get(d.model, "bias", &b));
    CHECK_NEAR(check_item(w), 3.0, 1e-3);
    CHECK_NEAR(check_item(b), 1.0, 1e-3);
    fulmen_tensor_free(w);
    fulmen_tensor_free(b);

    /* Plain steps, parameter groups: refused. */
    CHECK_ERR(fulmen_optimizer_step(opt), FULMEN_CODE_UNSUPPORTED, "closure");
    CHECK_ERR(fulmen_optimizer_add_param_group(opt, d.model, NULL, 0, 0.1), FULMEN_CODE_INVALID_ARGUMENT,
              "parameter groups");
    CHECK_ERR(fulmen_optimizer_step_closure(opt, NULL, &d, NULL), FULMEN_CODE_NULL_ARGUMENT, "closure");
    /* The group's own constants by torch's key. */
    double v = 0;
    CHECK_OK(fulmen_optimizer_param_group_get(opt, 0, "max_eval", &v));
    CHECK(v == 25);
    CHECK_OK(fulmen_optimizer_param_group_get(opt, 0, "line_search_fn", &v));
    CHECK(v == 1);
    CHECK_OK(fulmen_optimizer_param_group_set(opt, 0, "history_size", 10));
    CHECK_ERR(fulmen_optimizer_param_group_set(opt, 0, "history_size", 0), FULMEN_CODE_INVALID_ARGUMENT, "history");
    CHECK_ERR(fulmen_optimizer_param_group_set(opt, 0, "max_iter", 1.5), FULMEN_CODE_INVALID_ARGUMENT, "max_iter");

    fulmen_optimizer_free(opt);

    /* A failing closure ends the step with its error (a fresh start, so
     * that the step evaluates more than once). */
    fulmen_model_free(d.model);
    CHECK_OK(fulmen_model_linear_new(1, 1, true, &d.model));
    CHECK_OK(fulmen_optimizer_lbfgs_new(d.model, NULL, 0, &o, &opt));
    d.opt = NULL;
    d.calls = 0;
    d.fail_at = 2;
    CHECK_ERR(fulmen_optimizer_step_closure(opt, mse_closure, &d, NULL), FULMEN_CODE_CALLBACK, "closure gave up");
    CHECK(d.calls == 2);
    fulmen_optimizer_free(opt);

    /* Bad options. */
    fulmen_lbfgs_options bad = fulmen_lbfgs_options_default();
    bad.history_size = 0;
    CHECK_ERR(fulmen_optimizer_lbfgs_new(d.model, NULL, 0, &bad, &opt), FULMEN_CODE_INVALID_ARGUMENT, "history_size");
    bad = fulmen_lbfgs_options_default();
    bad.max_iter = -3;
    CHECK_ERR(fulmen_optimizer_lbfgs_new(d.model, NULL, 0, &bad, &opt), FULMEN_CODE_INVALID_ARGUMENT, "max_iter");
    CHECK_ERR(fulmen_optimizer_lbfgs_new(d.model, NULL, 0, NULL, &opt), FULMEN_CODE_NULL_ARGUMENT, "options");
    free_data(&d);
}

/* Another optimizer through the same call: one evaluation, then its step. */
static void test_closure_with_sgd(void) {
    fit_data d = line_data();
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(d.model, NULL, 0, &o, &opt));
    double first = -1, later = -1;
    CHECK_OK(fulmen_optimizer_step_closure(opt, mse_closure, &d, &first));
    CHECK(d.calls == 1 && d.grads_were_none == 1);
    for (int i = 0; i < 50; i++) CHECK_OK(fulmen_optimizer_step_closure(opt, mse_closure, &d, &later));
    CHECK(d.calls == 51);
    CHECK(later < first / 10);
    fulmen_optimizer_free(opt);
    free_data(&d);
}

/* ------------------------------------------------------------- trainer */

typedef struct {
    fulmen_model *model;  /* first: the fixtures read it */
    int steps;            /* training_step calls */
    int optimizers;       /* 1, or 2 (LBFGS and SGD) */
    const char *save_at;  /* a checkpoint asked for in the first after_backward (NULL: none) */
} trainer_data;

/* Asks for a checkpoint from inside the closure (on_after_backward). */
static fulmen_error *save_in_closure(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    trainer_data *t = ud;
    if (hook != FULMEN_HOOK_AFTER_BACKWARD || t->save_at == NULL) return NULL;
    fulmen_error *e = fulmen_hook_context_save_checkpoint(ctx, t->save_at, false);
    t->save_at = NULL;
    return e;
}

static fulmen_error *count_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    trainer_data *t = ud;
    t->steps++;
    return fixture_cross_entropy(t->model, batch, out);
}

static fulmen_error *configure_lbfgs(void *ud, fulmen_optimizer_config *config) {
    trainer_data *t = ud;
    fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
    o.max_iter = 3;
    o.lr = 0.5;
    fulmen_optimizer *opt = NULL;
    fulmen_error *made = fulmen_optimizer_lbfgs_new(t->model, NULL, 0, &o, &opt);
    fulmen_error *e = fixture_add_optimizer(config, made, opt);
    if (e == NULL && t->optimizers == 2) e = fixture_add_sgd(config, t->model, 0.1, 0.0);
    return e;
}

/* Fits 4 batches for `epochs` with `key` = `value` set (NULL: nothing),
 * resuming from `ckpt` (NULL: none). */
static fulmen_error *fit_lbfgs_from(trainer_data *t, int64_t epochs, const char *key, const char *value,
                                    const char *ckpt) {
    fulmen_dataset *ds = fixture_blobs(64, 3, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = t;
    vt.training_step = count_step;
    vt.configure_optimizers = configure_lbfgs;
    vt.on_hook = save_in_closure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, t->model, &m));
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    if (key != NULL) CHECK_OK(fulmen_trainer_options_set(o, key, value));
    fulmen_trainer *tr = NULL;
    CHECK_OK(fulmen_trainer_new(o, &tr));
    fulmen_error *e = fulmen_trainer_fit(tr, m, loader, NULL, ckpt);
    fulmen_trainer_free(tr);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return e;
}

static fulmen_error *fit_lbfgs(trainer_data *t, const char *key, const char *value) {
    return fit_lbfgs_from(t, 1, key, value, NULL);
}

static void test_lbfgs_in_the_trainer(void) {
    trainer_data t = {fixture_mlp(8, 0), 0, 1, NULL};
    CHECK_OK(fit_lbfgs(&t, NULL, NULL));
    /* Each of the 4 stepping batches evaluates up to max_iter (3) times:
     * more training_step calls than batches. */
    CHECK(t.steps > 4 && t.steps <= 12);
    t.steps = 0;
    CHECK_OK(fit_lbfgs(&t, "gradient_clip_val", "0.5"));
    CHECK(t.steps > 4);
    CHECK_ERR(fit_lbfgs(&t, "precision", "16-mixed"), FULMEN_CODE_INVALID_ARGUMENT, "not compatible");
    CHECK_ERR(fit_lbfgs(&t, "strategy", "dp"), FULMEN_CODE_UNSUPPORTED, "dp");
    t.optimizers = 2;
    CHECK_ERR(fit_lbfgs(&t, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "only optimizer");
    /* A checkpoint asked for inside the closure holds the optimizer: a fit
     * resumes from it. */
    char dir[] = "/tmp/fulmen-closure-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/in-closure.ckpt", dir);
    t.optimizers = 1;
    t.save_at = path;
    CHECK_OK(fit_lbfgs(&t, NULL, NULL));
    CHECK_OK(fit_lbfgs_from(&t, 2, NULL, NULL, path));
    remove(path);
    rmdir(dir);
    fulmen_model_free(t.model);
}

int main(void) {
    test_lbfgs_host_loop();
    test_closure_with_sgd();
    test_lbfgs_in_the_trainer();
    return check_finish("test_closure_optim");
}

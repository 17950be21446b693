/*
 * Manual optimization (automatic_optimization off): the step's backward,
 * optimizer steps, zero_grad, toggling and schedulers through the step
 * context; global_step counting; the hooks callbacks see; what fit
 * refuses; calls outside a manual step.
 */
#include "check.h"
#include "fixture.h"

#include <stdint.h>

/* What the steps share. */
typedef struct {
    fulmen_model *model;  /* first: fixture_configure_sgd reads it */
    int mode;             /* which step body runs */
    int64_t batches;      /* steps run */
    int64_t steps_seen;   /* global_step read after the steps */
    int toggled_ok;       /* toggle / untoggle left requires_grad as expected */
    double lr_seen[8];    /* optimizer 0's lr per batch */
    double lr1_seen[8];   /* optimizer 1's lr per batch (PICK) */
    int errors_ok;        /* the refused calls gave the expected codes */
    int hooks[64];        /* hooks the callback saw, by fulmen_hook */
    int module_hooks[64]; /* hooks the module saw */
} state;

enum { PLAIN = 0, TOGGLE = 1, SCHEDULE = 2, AUTOMATIC_PROBE = 3, PICK = 4 };

/* Two optimizers: SGD over "0.*" (first Linear), SGD over "2.*" (last),
 * the first with StepLR(1, 0.5) in SCHEDULE mode. In PICK mode the first
 * has StepLR(1, 0.5) and ExponentialLR(0.9), the second StepLR(1, 0.1):
 * lr_schedulers() is [StepLR 0.5, ExponentialLR, StepLR 0.1]. */
static fulmen_error *two_optimizers(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    const char *names[2][2] = {{"0.weight", "0.bias"}, {"2.weight", "2.bias"}};
    for (int k = 0; k < 2; k++) {
        fulmen_tensor *p[2] = {NULL, NULL};
        fulmen_error *e = fulmen_model_state_dict_get(s->model, names[k][0], &p[0]);
        if (e == NULL) e = fulmen_model_state_dict_get(s->model, names[k][1], &p[1]);
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        fulmen_optimizer *opt = NULL;
        fulmen_scheduler *sched = NULL;
        if (e == NULL) e = fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)p, 2, &o, &opt);
        if (e == NULL && (s->mode == SCHEDULE || s->mode == PICK) && (k == 0 || s->mode == PICK))
            e = fulmen_scheduler_step_lr_new(opt, 1, k == 0 ? 0.5 : 0.1, &sched);
        fulmen_scheduler *second = NULL;
        if (e == NULL && k == 0 && s->mode == PICK) e = fulmen_scheduler_exponential_lr_new(opt, 0.9, &second);
        if (e == NULL) e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
        if (e != NULL) {
            fulmen_scheduler_free(second);
            fulmen_scheduler_free(sched);
            fulmen_optimizer_free(opt);
            return e;
        }
        if (second != NULL) e = fulmen_optimizer_config_add_scheduler(config, 0, second, FULMEN_INTERVAL_STEP, 1, NULL);
        if (e != NULL) {
            fulmen_scheduler_free(second);
            return e;
        }
    }
    return NULL;
}

/* Whether state_dict entry `name` requires grad (-1 on error). */
static int requires_grad(const fulmen_model *m, const char *name) {
    fulmen_tensor *t = NULL;
    bool r = false;
    fulmen_error *e = fulmen_model_state_dict_get(m, name, &t);
    if (e == NULL) e = fulmen_tensor_requires_grad(t, &r);
    fulmen_tensor_free(t);
    return e == NULL ? (int)r : (fulmen_error_free(e), -1);
}

static int code_of(fulmen_error *e) {
    int c = e == NULL ? 0 : fulmen_error_code(e);
    fulmen_error_free(e);
    return c;
}

static fulmen_error *manual_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    fulmen_tensor *loss = NULL;
    size_t n = 0;
    fulmen_error *e = fulmen_step_context_optimizer_count(ctx, &n);
    if (e != NULL) return e;
    if (n != 2) return fulmen_step_context_optimizer_count(NULL, &n);
    if (s->mode == TOGGLE) {
        e = fulmen_step_context_toggle_optimizer(ctx, 1);
        if (e != NULL) return e;
        s->toggled_ok &= requires_grad(s->model, "0.weight") == 0 && requires_grad(s->model, "2.weight") == 1;
    }
    e = fixture_cross_entropy(s->model, batch, &loss);
    for (size_t k = 0; e == NULL && k < 2; k++) e = fulmen_step_context_optimizer_zero_grad(ctx, k);
    if (e == NULL) e = fulmen_step_context_manual_backward(ctx, loss);
    bool made = false;
    for (size_t k = 0; e == NULL && k < 2; k++) {
        e = fulmen_step_context_optimizer_step(ctx, k, &made);
        if (e == NULL && !made) s->toggled_ok = 0;
    }
    if (e == NULL && s->mode == TOGGLE) {
        e = fulmen_step_context_untoggle_optimizer(ctx, 1);
        s->toggled_ok &= requires_grad(s->model, "0.weight") == 1 && requires_grad(s->model, "2.weight") == 1;
    }
    if (e == NULL && s->mode == SCHEDULE) {
        double lr = 0;
        e = fulmen_step_context_learning_rate(ctx, 0, 0, &lr);
        if (e == NULL && s->batches < 8) s->lr_seen[s->batches] = lr;
        if (e == NULL) e = fulmen_step_context_scheduler_step(ctx, 0, NULL);
        double metric = 1.0;
        /* optimizer 1 has no scheduler; index 2 and group 1 do not exist */
        if (e == NULL) {
            s->errors_ok &= code_of(fulmen_step_context_scheduler_step(ctx, 1, &metric)) == FULMEN_CODE_INVALID_STATE;
            s->errors_ok &= code_of(fulmen_step_context_optimizer_step(ctx, 2, NULL)) == FULMEN_CODE_INVALID_ARGUMENT;
            s->errors_ok &= code_of(fulmen_step_context_learning_rate(ctx, 0, 1, &lr)) == FULMEN_CODE_INVALID_ARGUMENT;
            s->errors_ok &= code_of(fulmen_step_context_toggle_optimizer(ctx, 9)) == FULMEN_CODE_INVALID_ARGUMENT;
            /* the loss's graph is gone: a second backward fails cleanly */
            s->errors_ok &= code_of(fulmen_step_context_manual_backward(ctx, loss)) == FULMEN_CODE_TORCH;
            fulmen_tensor *plain = NULL;
            int64_t one[1] = {1};
            e = fulmen_tensor_zeros(one, 1, FULMEN_DTYPE_F32, &plain);
            if (e == NULL)
                s->errors_ok &=
                    code_of(fulmen_step_context_manual_backward(ctx, plain)) == FULMEN_CODE_INVALID_ARGUMENT;
            s->errors_ok &= code_of(fulmen_step_context_manual_backward(ctx, NULL)) == FULMEN_CODE_NULL_ARGUMENT;
        }
    }
    if (e == NULL && s->mode == PICK && s->batches < 8) {
        /* Lightning's self.lr_schedulers()[i].step(), one at a time. */
        size_t count = 0;
        e = fulmen_step_context_lr_scheduler_count(ctx, &count);
        s->errors_ok &= count == 3;
        if (e == NULL) e = fulmen_step_context_learning_rate(ctx, 0, 0, &s->lr_seen[s->batches]);
        if (e == NULL) e = fulmen_step_context_learning_rate(ctx, 1, 0, &s->lr1_seen[s->batches]);
        if (e == NULL) e = fulmen_step_context_lr_scheduler_step(ctx, 1, NULL);
        if (e == NULL && s->batches % 2 == 0) e = fulmen_step_context_lr_scheduler_step(ctx, 2, NULL);
        s->errors_ok &= code_of(fulmen_step_context_lr_scheduler_step(ctx, 3, NULL)) == FULMEN_CODE_INVALID_ARGUMENT;
    }
    int64_t step = 0;
    if (e == NULL) e = fulmen_step_context_global_step(ctx, &step);
    s->steps_seen = step;
    s->batches++;
    if (e == NULL && s->batches % 2 == 1) *out = loss; /* returning the loss is optional */
    return e;
}

/* An automatic step that tries the manual calls: all refused. */
static fulmen_error *probing_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    size_t n = 0;
    s->errors_ok &= code_of(fulmen_step_context_optimizer_count(ctx, &n)) == FULMEN_CODE_INVALID_STATE;
    s->errors_ok &= code_of(fulmen_step_context_optimizer_step(ctx, 0, NULL)) == FULMEN_CODE_INVALID_STATE;
    s->errors_ok &= code_of(fulmen_step_context_toggle_optimizer(ctx, 0)) == FULMEN_CODE_INVALID_STATE;
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *count_hooks(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook >= 0 && hook < 64) ((state *)ud)->hooks[hook]++;
    return NULL;
}

static fulmen_error *module_hooks(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook >= 0 && hook < 64) ((state *)ud)->module_hooks[hook]++;
    return NULL;
}

static fulmen_lightning_module *module_for(state *s, bool manual) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = manual ? manual_step : probing_step;
    vt.configure_optimizers = two_optimizers;
    vt.on_hook = module_hooks;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, !manual));
    return m;
}

/* Fits `s->model` for 2 epochs of 4 batches; returns the fit's error. */
static fulmen_error *fit(state *s, bool manual, fulmen_trainer *t) {
    fulmen_dataset *ds = fixture_blobs(64, 7, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_lightning_module *m = module_for(s, manual);
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.userdata = s;
    cb.on_hook = count_hooks;
    CHECK_OK(fulmen_trainer_add_callback(t, "counter", &cb));
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return e;
}

/* Manual zero_grad / backward / step of both optimizers is automatic
 * optimization written out: the same weights, twice the steps. */
static void test_manual_equals_automatic(void) {
    state man = {0}, aut = {0};
    CHECK_OK(fulmen_manual_seed(3));
    man.model = fixture_mlp(8, 0);
    CHECK_OK(fulmen_manual_seed(3));
    aut.model = fixture_mlp(8, 0);
    man.mode = PLAIN;
    aut.mode = AUTOMATIC_PROBE;
    man.toggled_ok = aut.errors_ok = 1;
    fulmen_trainer *tm = fixture_trainer(NULL, 2), *ta = fixture_trainer(NULL, 2);
    CHECK_OK(fit(&man, true, tm));
    CHECK_OK(fit(&aut, false, ta));
    CHECK(fixture_max_diff(man.model, aut.model) == 0.0);
    int64_t gm = 0, ga = 0;
    CHECK_OK(fulmen_trainer_global_step(tm, &gm));
    CHECK_OK(fulmen_trainer_global_step(ta, &ga));
    CHECK(gm == 16 && ga == 8); /* every optimizer step counts */
    CHECK(man.steps_seen == 16);
    CHECK(man.toggled_ok);       /* every update was made */
    CHECK(aut.errors_ok);        /* manual calls refused in automatic mode */
    /* the callbacks saw each backward and step; the module did not */
    CHECK(man.hooks[FULMEN_HOOK_BEFORE_BACKWARD] == 8 && man.hooks[FULMEN_HOOK_AFTER_BACKWARD] == 8);
    CHECK(man.hooks[FULMEN_HOOK_BEFORE_OPTIMIZER_STEP] == 16);
    CHECK(man.module_hooks[FULMEN_HOOK_BEFORE_BACKWARD] == 0 && man.module_hooks[FULMEN_HOOK_TRAIN_BATCH_END] == 8);
    CHECK(man.hooks[FULMEN_HOOK_BEFORE_ZERO_GRAD] == 0);
    fulmen_trainer_free(tm);
    fulmen_trainer_free(ta);
    fulmen_model_free(man.model);
    fulmen_model_free(aut.model);
}

static void test_toggle(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    s.mode = TOGGLE;
    s.toggled_ok = 1;
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fit(&s, true, t));
    CHECK(s.toggled_ok);
    CHECK(requires_grad(s.model, "0.weight") == 1);
    fulmen_trainer_free(t);
    fulmen_model_free(s.model);
}

/* The step steps its scheduler; the trainer does not (interval "step"). */
static void test_schedulers_and_errors(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    s.mode = SCHEDULE;
    s.toggled_ok = s.errors_ok = 1;
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fit(&s, true, t));
    CHECK(s.errors_ok);
    CHECK(s.batches == 4);
    for (int i = 0; i < 4; i++) CHECK_NEAR(s.lr_seen[i], 0.1 * pow(0.5, i), 1e-15);
    fulmen_trainer_free(t);
    fulmen_model_free(s.model);
}

/* One scheduler stepped by its place in lr_schedulers(): the others keep
 * their factors (ExponentialLR alone on optimizer 0, StepLR 0.1 every other
 * batch on optimizer 1, StepLR 0.5 never). */
static void test_scheduler_by_index(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    s.mode = PICK;
    s.toggled_ok = s.errors_ok = 1;
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fit(&s, true, t));
    CHECK(s.errors_ok);
    CHECK(s.batches == 4);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(s.lr_seen[i], 0.1 * pow(0.9, i), 1e-15);
        CHECK_NEAR(s.lr1_seen[i], 0.1 * pow(0.1, (i + 1) / 2), 1e-15);
    }
    size_t count = 0;
    CHECK_ERR(fulmen_step_context_lr_scheduler_count(NULL, &count), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_trainer_free(t);
    fulmen_model_free(s.model);
}

/* What Lightning refuses with manual optimization. */
static void test_refused_settings(void) {
    const char *keys[3] = {"accumulate_grad_batches", "gradient_clip_val", "strategy"};
    const char *values[3] = {"2", "1.0", "dp"};
    int codes[3] = {FULMEN_CODE_INVALID_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT, FULMEN_CODE_UNSUPPORTED};
    for (int k = 0; k < 3; k++) {
        state s = {0};
        s.model = fixture_mlp(8, 0);
        fulmen_trainer_options *o = fixture_options(NULL, 1);
        CHECK_OK(fulmen_trainer_options_set(o, keys[k], values[k]));
        fulmen_trainer *t = NULL;
        CHECK_OK(fulmen_trainer_new(o, &t));
        CHECK_ERR(fit(&s, true, t), codes[k], "manual optimization");
        CHECK(s.batches == 0);
        fulmen_trainer_free(t);
        fulmen_trainer_options_free(o);
        fulmen_model_free(s.model);
    }
    CHECK_ERR(fulmen_lightning_module_set_automatic_optimization(NULL, false), FULMEN_CODE_NULL_ARGUMENT, NULL);
}

int main(void) {
    test_manual_equals_automatic();
    test_toggle();
    test_schedulers_and_errors();
    test_scheduler_by_index();
    test_refused_settings();
    return check_finish("test_manual");
}

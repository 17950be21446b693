/*
 * The module's optimization hooks (fulmen_module_vtable's optimizer_step,
 * optimizer_zero_grad, lr_scheduler_step, backward,
 * configure_gradient_clipping): each is called at Lightning's point with
 * Lightning's arguments, hooks doing the default train exactly as no hooks,
 * a skipped step leaves the weights alone, errors end the fit with their
 * code, misuse is refused; fulmen_step_context_clip_gradients in a manual
 * step.
 */
#include "check.h"
#include "fixture.h"

#include <stddef.h>
#include <stdint.h>

enum { DEFAULTS = 0, SKIP = 1, NO_CLOSURE = 2, FAIL = 3, MISUSE = 4, WARMUP = 5, NO_CLIP = 6, BACKWARD_FAILS = 7 };

/* What the hooks share. */
typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int mode;
    bool scheduler;       /* configure_optimizers adds a StepLR(1, 0.5) per epoch */
    char events[512];     /* one letter per hook call, in order */
    size_t n_events;
    int64_t step_calls;   /* optimizer_step calls */
    int64_t bad_args;     /* calls whose arguments were not the expected */
    int errors_ok;        /* the refused calls gave the expected codes */
    double clip_val;      /* configure_gradient_clipping's arguments */
    int32_t algorithm;
    int64_t scheduler_calls;
    double lr_seen[16];   /* lr read in optimizer_step, by call */
    int64_t before_steps; /* on_before_optimizer_step calls told optimizer 0 */
    fulmen_optimization_context *outer;
    fulmen_optimizer_closure *outer_closure;
} state;

static int code_of(fulmen_error *e) {
    int c = e == NULL ? 0 : fulmen_error_code(e);
    fulmen_error_free(e);
    return c;
}

static void event(state *s, char c) {
    if (s->n_events + 1 < sizeof s->events) s->events[s->n_events++] = c;
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(s->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    fulmen_scheduler *sched = NULL;
    if (s->scheduler) {
        e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
        if (e != NULL) {
            fulmen_optimizer_free(opt);
            return e;
        }
    }
    e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(sched);
        fulmen_optimizer_free(opt);
    }
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    (void)ctx;
    state *s = ud;
    event(s, 'T');
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *optimizer_step(void *ud, fulmen_optimization_context *ctx, int64_t epoch, int64_t batch_idx,
                                    size_t optimizer_idx, fulmen_optimizer_closure *closure) {
    state *s = ud;
    int64_t e = -1, g = -1;
    CHECK_OK(fulmen_optimization_context_epoch(ctx, &e));
    CHECK_OK(fulmen_optimization_context_global_step(ctx, &g));
    /* 4 batches per epoch; global_step counts the steps before this one */
    if (optimizer_idx != 0 || e != epoch || batch_idx != s->step_calls % 4 || g != s->step_calls) s->bad_args++;
    s->step_calls++;
    event(s, 'S');
    s->outer = ctx;
    s->outer_closure = closure;
    fulmen_error *err = NULL;
    bool made = false;
    double loss = 0;
    bool has_loss = false;
    switch (s->mode) {
    case SKIP:
        err = fulmen_optimizer_closure_run(closure, &loss, &has_loss);
        if (err == NULL && (!has_loss || !(loss > 0))) s->bad_args++;
        break;
    case NO_CLOSURE:
        break;
    case FAIL:
        if (s->step_calls == 2) return fulmen_error_new(FULMEN_CODE_IO, "the disk went away");
        err = fulmen_optimization_context_step(ctx, closure, &made);
        break;
    case MISUSE:
        /* clipping and scheduler steps belong to other hooks */
        s->errors_ok &= code_of(fulmen_optimization_context_clip_gradients(ctx, 1.0, FULMEN_CLIP_NORM)) ==
                        FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_optimization_context_scheduler_step(ctx, NULL)) == FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_optimization_context_set_learning_rate(ctx, 0, -1.0)) ==
                        FULMEN_CODE_INVALID_ARGUMENT;
        s->errors_ok &= code_of(fulmen_optimization_context_set_learning_rate(ctx, 9, 0.1)) ==
                        FULMEN_CODE_INVALID_ARGUMENT;
        err = fulmen_optimization_context_step(ctx, closure, &made);
        /* once per batch */
        s->errors_ok &= code_of(fulmen_optimization_context_step(ctx, closure, &made)) == FULMEN_CODE_INVALID_STATE;
        break;
    case WARMUP: {
        double lr = 0;
        CHECK_OK(fulmen_optimization_context_learning_rate(ctx, 0, &lr));
        if (s->step_calls <= 16) s->lr_seen[s->step_calls - 1] = lr;
        err = fulmen_optimization_context_step(ctx, closure, &made);
        if (err == NULL && g < 3) err = fulmen_optimization_context_set_learning_rate(ctx, 0, 0.1 * (double)(g + 2) / 4.0);
        break;
    }
    default:
        err = fulmen_optimization_context_step(ctx, closure, &made);
        if (err == NULL && !made) s->bad_args++;
        break;
    }
    event(s, 'E');
    return err;
}

static fulmen_error *zero_grad(void *ud, fulmen_optimization_context *ctx, int64_t epoch, int64_t batch_idx,
                               size_t optimizer_idx) {
    state *s = ud;
    (void)epoch;
    (void)batch_idx;
    (void)optimizer_idx;
    event(s, 'Z');
    if (s->mode == MISUSE)
        s->errors_ok &= code_of(fulmen_optimization_context_scheduler_step(ctx, NULL)) == FULMEN_CODE_INVALID_STATE;
    return fulmen_optimization_context_zero_grad(ctx, true);
}

static fulmen_error *backward(void *ud, fulmen_optimization_context *ctx, fulmen_tensor *loss) {
    state *s = ud;
    (void)ctx;
    event(s, 'B');
    if (s->mode == MISUSE && s->outer != NULL) {
        /* inside the closure of a step: the step's context and closure are in use */
        bool made = false;
        s->errors_ok &= code_of(fulmen_optimization_context_step(s->outer, s->outer_closure, &made)) ==
                        FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_optimizer_closure_run(s->outer_closure, NULL, NULL)) ==
                        FULMEN_CODE_INVALID_STATE;
        s->errors_ok &= code_of(fulmen_optimization_context_step(ctx, s->outer_closure, &made)) ==
                        FULMEN_CODE_INVALID_STATE;
    }
    if (s->mode == BACKWARD_FAILS && s->step_calls == 3)
        return fulmen_error_new(FULMEN_CODE_OUT_OF_RANGE, "backward refused");
    return fulmen_tensor_backward(loss);
}

static fulmen_error *clipping(void *ud, fulmen_optimization_context *ctx, size_t optimizer_idx, double clip_val,
                              int32_t algorithm) {
    state *s = ud;
    event(s, 'C');
    s->clip_val = clip_val;
    s->algorithm = algorithm;
    if (optimizer_idx != 0) s->bad_args++;
    if (s->mode == MISUSE)
        s->errors_ok &= code_of(fulmen_optimization_context_clip_gradients(ctx, 1.0, 7)) ==
                        FULMEN_CODE_INVALID_ARGUMENT;
    if (s->mode == NO_CLIP) return NULL;
    return fulmen_optimization_context_clip_gradients(ctx, clip_val, algorithm);
}

static fulmen_error *scheduler_step(void *ud, fulmen_optimization_context *ctx, size_t scheduler_idx,
                                    const double *metric) {
    state *s = ud;
    event(s, 'L');
    s->scheduler_calls++;
    if (scheduler_idx != 0 || metric != NULL) s->bad_args++;
    int64_t epoch = -1;
    CHECK_OK(fulmen_optimization_context_epoch(ctx, &epoch));
    /* a custom rule: step after epoch 0 only */
    if (epoch == 0) return NULL;
    return fulmen_optimization_context_scheduler_step(ctx, NULL);
}

/* Fits `s->model` for `epochs` epochs of 4 batches of 16, with the hooks
 * when `hooks`; `clip` (0: none) is the trainer's gradient_clip_val (by
 * value). Returns the fit's error; *global_step gets the steps taken. */
/* on_before_optimizer_step inside the module's optimizer_step: the
 * optimizer's index, and the optimizer itself through the context. */
static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    state *s = ud;
    if (hook != FULMEN_HOOK_BEFORE_OPTIMIZER_STEP) return NULL;
    int64_t idx = -1;
    double lr = 0;
    fulmen_error *e = fulmen_hook_context_optimizer_index(ctx, &idx);
    if (e == NULL) e = fulmen_hook_context_param_group_get(ctx, 0, 0, "lr", &lr);
    if (e == NULL && idx == 0 && lr > 0) s->before_steps++;
    return e;
}

static fulmen_error *fit(state *s, bool hooks, int64_t epochs, double clip, int64_t *global_step) {
    fulmen_dataset *ds = fixture_blobs(64, 7, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = training_step;
    vt.configure_optimizers = configure;
    if (hooks) {
        vt.optimizer_step = optimizer_step;
        vt.optimizer_zero_grad = zero_grad;
        vt.backward = backward;
        vt.configure_gradient_clipping = clipping;
        vt.lr_scheduler_step = scheduler_step;
        vt.on_hook = on_hook;
    }
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    if (clip > 0) {
        CHECK_OK(fulmen_trainer_options_set_float(o, "gradient_clip_val", clip));
        CHECK_OK(fulmen_trainer_options_set(o, "gradient_clip_algorithm", "value"));
    }
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    CHECK_OK(fulmen_trainer_global_step(t, global_step));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return e;
}

/* Two models of the same initial weights. */
static void twins(fulmen_model **a, fulmen_model **b, uint64_t seed) {
    CHECK_OK(fulmen_manual_seed(seed));
    *a = fixture_mlp(8, 0);
    CHECK_OK(fulmen_manual_seed(seed));
    *b = fixture_mlp(8, 0);
}

/* Hooks doing Lightning's defaults train as no hooks, every call in its
 * place: optimizer_step, then in its step the closure (training_step,
 * zero_grad, backward), clipping with the trainer's settings, the update;
 * the scheduler's rule is the host's. */
static void test_defaults_in_order(void) {
    state h = {0};
    h.model = fixture_mlp(8, 0);
    h.scheduler = true;
    int64_t gh = 0, gp = 0;
    CHECK_OK(fit(&h, true, 2, 0.05, &gh));
    CHECK(gh == 8);
    CHECK(h.bad_args == 0);
    CHECK(h.step_calls == 8);
    CHECK(h.before_steps == 8);
    /* epoch 0: four batches, then the epoch's scheduler call */
    CHECK(strncmp(h.events, "STZBCESTZBCESTZBCESTZBCEL", 25) == 0);
    CHECK(h.clip_val == 0.05 && h.algorithm == FULMEN_CLIP_VALUE);
    CHECK(h.scheduler_calls == 2);
    fulmen_model_free(h.model);

    /* one epoch each (the scheduler has not changed the lr yet): the same weights */
    state a = {0}, b = {0};
    twins(&a.model, &b.model, 12);
    CHECK_OK(fit(&a, true, 1, 0.05, &gh));
    CHECK_OK(fit(&b, false, 1, 0.05, &gp));
    CHECK(fixture_max_diff(a.model, b.model) == 0.0);
    fulmen_model_free(a.model);
    fulmen_model_free(b.model);

    /* a configure_gradient_clipping that does not clip: as no clipping */
    state c = {0}, d = {0};
    twins(&c.model, &d.model, 13);
    c.mode = NO_CLIP;
    CHECK_OK(fit(&c, true, 1, 1e-4, &gh));
    CHECK_OK(fit(&d, false, 1, 0, &gp));
    CHECK(fixture_max_diff(c.model, d.model) == 0.0);
    fulmen_model_free(c.model);
    fulmen_model_free(d.model);
}

/* An optimizer_step that runs the closure and does not step leaves the
 * weights as they were; every batch still counts in global_step. */
static void test_skipped_step(void) {
    state s = {0};
    fulmen_model *before = NULL;
    twins(&s.model, &before, 14);
    s.mode = SKIP;
    int64_t g = 0;
    CHECK_OK(fit(&s, true, 2, 0, &g));
    CHECK(g == 8);
    CHECK(s.bad_args == 0);
    CHECK(strncmp(s.events, "STZBESTZBE", 10) == 0);
    CHECK(fixture_max_diff(s.model, before) == 0.0);
    fulmen_model_free(s.model);
    fulmen_model_free(before);
}

/* The lr set in optimizer_step is the one the next step reads. */
static void test_warmup(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    s.mode = WARMUP;
    int64_t g = 0;
    CHECK_OK(fit(&s, true, 1, 0, &g));
    CHECK(g == 4);
    CHECK(s.lr_seen[0] == 0.1);
    CHECK(s.lr_seen[1] == 0.1 * 2.0 / 4.0);
    CHECK(s.lr_seen[2] == 0.1 * 3.0 / 4.0);
    CHECK(s.lr_seen[3] == 0.1 * 4.0 / 4.0);
    fulmen_model_free(s.model);
}

/* A hook's error ends the fit with its code; an optimizer_step that does
 * not run the closure is an error; misuse is refused and the fit goes on. */
static void test_errors(void) {
    state f = {0};
    f.model = fixture_mlp(8, 0);
    f.mode = FAIL;
    int64_t g = 0;
    CHECK_ERR(fit(&f, true, 1, 0, &g), FULMEN_CODE_IO, "the disk went away");
    CHECK(g == 1);
    fulmen_model_free(f.model);

    /* backward fails in the third batch's closure */
    state b = {0};
    b.model = fixture_mlp(8, 0);
    b.mode = BACKWARD_FAILS;
    CHECK_ERR(fit(&b, true, 1, 0, &g), FULMEN_CODE_OUT_OF_RANGE, "backward refused");
    CHECK(g == 2);
    fulmen_model_free(b.model);

    state n = {0};
    n.model = fixture_mlp(8, 0);
    n.mode = NO_CLOSURE;
    CHECK_ERR(fit(&n, true, 1, 0, &g), FULMEN_CODE_CALLBACK, "did not run the closure");
    CHECK(g == 0);
    fulmen_model_free(n.model);

    state m = {0};
    m.model = fixture_mlp(8, 0);
    m.mode = MISUSE;
    m.errors_ok = 1;
    CHECK_OK(fit(&m, true, 1, 0.5, &g));
    CHECK(m.errors_ok);
    CHECK(g == 4);
    fulmen_model_free(m.model);
}

static fulmen_error *configure_two(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    fulmen_error *e = fixture_add_sgd(config, s->model, 0.1, 0.0);
    if (e == NULL) e = fixture_add_sgd(config, s->model, 0.1, 0.0);
    return e;
}

/* The hooks run with one optimizer, as Lightning's automatic optimization;
 * a vtable ending before them is still accepted. */
static void test_one_optimizer_and_old_vtables(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_dataset *ds = fixture_blobs(64, 7, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_two;
    vt.optimizer_step = optimizer_step;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "one optimizer");
    CHECK(s.step_calls == 0);
    fulmen_lightning_module_free(m);

    /* the 0.2 layout, which ends at val_dataloader: the slots read as NULL */
    vt.struct_size = offsetof(fulmen_module_vtable, optimizer_step);
    vt.configure_optimizers = configure;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(s.step_calls == 0);
    fulmen_lightning_module_free(m);
    fulmen_trainer_free(t);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
}

/* fulmen_step_context_clip_gradients in a manual step clips before the
 * update; refused outside manual optimization and with bad arguments. */
typedef struct {
    fulmen_model *model;
    int errors_ok;
} manual_state;

static fulmen_error *manual_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)out;
    manual_state *s = ud;
    fulmen_tensor *loss = NULL;
    bool made = false;
    fulmen_error *e = fulmen_step_context_optimizer_zero_grad(ctx, 0);
    if (e == NULL) e = fixture_cross_entropy(s->model, batch, &loss);
    if (e == NULL) e = fulmen_step_context_manual_backward(ctx, loss);
    s->errors_ok &= code_of(fulmen_step_context_clip_gradients(ctx, 0, NAN, FULMEN_CLIP_NORM)) ==
                    FULMEN_CODE_INVALID_ARGUMENT;
    s->errors_ok &= code_of(fulmen_step_context_clip_gradients(ctx, 0, 1.0, 5)) == FULMEN_CODE_INVALID_ARGUMENT;
    s->errors_ok &= code_of(fulmen_step_context_clip_gradients(ctx, 3, 1.0, FULMEN_CLIP_NORM)) ==
                    FULMEN_CODE_INVALID_ARGUMENT;
    /* by value: no gradient element is above 1e-6 after it */
    if (e == NULL) e = fulmen_step_context_clip_gradients(ctx, 0, 1e-6, FULMEN_CLIP_VALUE);
    if (e == NULL) e = fulmen_step_context_optimizer_step(ctx, 0, &made);
    return e;
}

static fulmen_error *automatic_clip_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                         fulmen_tensor **out) {
    manual_state *s = ud;
    s->errors_ok &= code_of(fulmen_step_context_clip_gradients(ctx, 0, 1.0, FULMEN_CLIP_NORM)) ==
                    FULMEN_CODE_INVALID_STATE;
    return fixture_cross_entropy(s->model, batch, out);
}

static void test_manual_clip_gradients(void) {
    manual_state s = {0};
    fulmen_model *before = NULL;
    CHECK_OK(fulmen_manual_seed(15));
    s.model = fixture_mlp(8, 0);
    CHECK_OK(fulmen_manual_seed(15));
    before = fixture_mlp(8, 0);
    s.errors_ok = 1;
    fulmen_dataset *ds = fixture_blobs(64, 7, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_lightning_module *m = fixture_module(s.model, &s, manual_step, NULL);
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, false));
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(s.errors_ok);
    /* 4 SGD steps of lr 0.1 on gradients clamped to 1e-6 (unclipped they
     * move the weights by about 1e-2) */
    double moved = fixture_max_diff(s.model, before);
    CHECK(moved > 0 && moved < 1e-6);
    fulmen_lightning_module_free(m);

    m = fixture_module(s.model, &s, automatic_clip_step, NULL);
    fulmen_trainer_free(t); /* a new trainer: this one's fit is done */
    t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(s.errors_ok);
    fulmen_lightning_module_free(m);
    fulmen_trainer_free(t);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
    fulmen_model_free(before);
}

int main(void) {
    size_t handles = fulmen_live_handles();
    test_defaults_in_order();
    test_skipped_step();
    test_warmup();
    test_errors();
    test_one_optimizer_and_old_vtables();
    test_manual_clip_gradients();
    CHECK(fulmen_live_handles() == handles);
    return check_finish("test_custom_optimization");
}

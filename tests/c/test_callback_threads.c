/*
 * Helper threads inside a callback (fulmen_callback_context_current,
 * fulmen_callback_attach, fulmen_callback_detach). A training step that
 * computes its loss on a pthread attached to it trains for 40 steps and
 * leaves no handle behind (unattached, each step left the helper's 4
 * tensors: 160 after 40 steps); a tensor the helper keeps outlives the
 * step. In a validation step (no_grad) the attached helper's forward
 * records no graph, an unattached one's does. An attached helper's call
 * into the data source or the model running the callback is refused
 * instead of deadlocking, and it may use the host forward's
 * fulmen_host_call. A helper still attached after its step returned is refused
 * until it detaches. Attaching with a stale context, from the callback's
 * own thread or outside any callback, and detaching without attaching are
 * FULMEN_CODE_INVALID_STATE.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <pthread.h>
#include <string.h>

/* Prints and frees a failed call of a helper thread, counting it. */
static void helper_failed(int *failures, fulmen_error *e) {
    if (e == NULL) return;
    fprintf(stderr, "helper thread: %s (code %d)\n", fulmen_error_message(e), fulmen_error_code(e));
    fulmen_error_free(e);
    (*failures)++;
}

/* Runs `fn(arg)` on a new thread and waits for it. */
static bool run_thread(void *(*fn)(void *), void *arg) {
    pthread_t th;
    if (pthread_create(&th, NULL, fn, arg) != 0) return false;
    return pthread_join(th, NULL) == 0;
}

/* ---- a training step whose loss is computed on an attached helper ---- */

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    const fulmen_callback_context *cc;
    const fulmen_batch *batch;
    fulmen_tensor *loss;            /* the helper's result */
    fulmen_tensor *kept;            /* kept by the helper at step 5 */
    fulmen_callback_context *stale; /* the first step's context, kept past it */
    int steps;
    int failures;          /* failed calls on helper threads */
    int own_attach_wrong;  /* steps whose own attach was not INVALID_STATE */
} step_world;

static void *loss_on_helper(void *arg) {
    step_world *w = arg;
    fulmen_error *e = fulmen_callback_attach(w->cc);
    if (e != NULL) {
        helper_failed(&w->failures, e);
        return NULL;
    }
    helper_failed(&w->failures, fixture_cross_entropy(w->model, w->batch, &w->loss));
    if (w->steps == 5) {
        int64_t shape[1] = {2};
        e = fulmen_tensor_ones(shape, 1, FULMEN_DTYPE_F32, &w->kept);
        if (e == NULL) e = fulmen_tensor_keep(w->kept);
        helper_failed(&w->failures, e);
    }
    helper_failed(&w->failures, fulmen_callback_detach());
    return NULL;
}

static fulmen_error *attached_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    (void)ctx;
    step_world *w = ud;
    fulmen_callback_context *cc = NULL;
    fulmen_error *e = fulmen_callback_context_current(&cc);
    if (e != NULL) return e;
    /* The callback's own thread works inside it already. */
    if (fixture_code(fulmen_callback_attach(cc)) != FULMEN_CODE_INVALID_STATE) w->own_attach_wrong++;
    w->cc = cc;
    w->batch = batch;
    w->loss = NULL;
    bool ran = run_thread(loss_on_helper, w);
    if (w->stale == NULL) {
        w->stale = cc;
    } else {
        fulmen_callback_context_free(cc);
    }
    w->steps++;
    if (!ran) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the helper thread did not run");
    if (w->loss == NULL) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the helper thread made no loss");
    *out = w->loss;
    return NULL;
}

static void a_step_computed_on_an_attached_thread_leaves_nothing(void) {
    fulmen_dataset *ds = fixture_blobs(320, 4, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    step_world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, attached_step, NULL);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    size_t before = fulmen_live_handles();
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    int64_t global_step = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &global_step));
    CHECK(w.steps == 40);
    CHECK(global_step == 40);
    CHECK(w.failures == 0);
    CHECK(w.own_attach_wrong == 0);
    /* Left: the kept tensor and the first step's context, both the host's. */
    CHECK(w.kept != NULL);
    CHECK(w.stale != NULL);
    CHECK(fulmen_live_handles() == before + 2);
    double kept_sum = 0;
    fulmen_tensor *sum = NULL;
    CHECK_OK(fulmen_tensor_sum(w.kept, &sum));
    if (sum != NULL) kept_sum = check_item(sum);
    CHECK_NEAR(kept_sum, 2.0, 1e-6);
    fulmen_tensor_free(sum);
    fulmen_tensor_free(w.kept);

    /* The step has returned: its context attaches no more, here or on
     * another thread; outside any callback there is no context. */
    CHECK_ERR(fulmen_callback_attach(w.stale), FULMEN_CODE_INVALID_STATE, "has returned");
    fulmen_callback_context *none = NULL;
    CHECK_ERR(fulmen_callback_context_current(&none), FULMEN_CODE_INVALID_STATE, "no fulmen callback is running");
    CHECK(none == NULL);
    CHECK_ERR(fulmen_callback_detach(), FULMEN_CODE_INVALID_STATE, "not attached");
    fulmen_callback_context_free(w.stale);
    fulmen_callback_context_free(w.stale); /* a second free is a no-op */
    CHECK(fulmen_live_handles() == before);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
}

/* ---- a validation step: the helper gets no_grad only when attached ---- */

typedef struct {
    fulmen_model *model;
    const fulmen_callback_context *cc;
    const fulmen_batch *batch;
    int runs;
    int attached_grads;   /* attached forwards that recorded a graph */
    int unattached_grads; /* unattached forwards that recorded one */
    int failures;
} eval_world;

/* Adds to *count whether model(x) records a graph (and frees it). */
static void count_grad(eval_world *w, const fulmen_tensor *x, int *count) {
    fulmen_tensor *y = NULL;
    bool rg = false;
    fulmen_error *e = fulmen_model_forward(w->model, x, &y);
    if (e == NULL) e = fulmen_tensor_requires_grad(y, &rg);
    helper_failed(&w->failures, e);
    if (rg) (*count)++;
    fulmen_tensor_free(y);
}

static void *forward_on_helper(void *arg) {
    eval_world *w = arg;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_callback_attach(w->cc);
    if (e == NULL) e = fulmen_batch_get(w->batch, 0, &x);
    if (e != NULL) {
        helper_failed(&w->failures, e);
        helper_failed(&w->failures, fulmen_callback_detach());
        return NULL;
    }
    count_grad(w, x, &w->attached_grads);
    helper_failed(&w->failures, fulmen_callback_detach());
    /* Detached: its own grad mode (enabled) again; x is still alive (the
     * step's scope releases it when the step returns). */
    count_grad(w, x, &w->unattached_grads);
    w->runs++;
    return NULL;
}

static fulmen_error *attached_eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ctx;
    eval_world *w = ud;
    fulmen_callback_context *cc = NULL;
    fulmen_error *e = fulmen_callback_context_current(&cc);
    if (e != NULL) return e;
    w->cc = cc;
    w->batch = batch;
    bool ran = run_thread(forward_on_helper, w);
    fulmen_callback_context_free(cc);
    return ran ? NULL : fulmen_error_new(FULMEN_CODE_CALLBACK, "the helper thread did not run");
}

static void an_attached_thread_runs_under_the_steps_no_grad(void) {
    fulmen_dataset *ds = fixture_blobs(32, 5, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    eval_world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &w;
    vt.validation_step = attached_eval_step;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, w.model, &m));
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    size_t before = fulmen_live_handles();
    CHECK_OK(fulmen_trainer_validate(t, m, l, NULL));
    CHECK(w.runs == 4);
    CHECK(w.failures == 0);
    CHECK(w.attached_grads == 0);
    CHECK(w.unattached_grads == 4);
    CHECK(fulmen_live_handles() == before);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
}

/* ---- re-entry: an attached helper calls the data source running ---- */

typedef struct {
    fulmen_dataset *self;
    const fulmen_callback_context *cc;
    int reentry_code;
    char reentry_msg[256];
    int failures;
} reentry_source;

static fulmen_error *reentry_len(void *ud, size_t *len) {
    (void)ud;
    *len = 8;
    return NULL;
}

static void *get_own_dataset(void *arg) {
    reentry_source *s = arg;
    fulmen_error *e = fulmen_callback_attach(s->cc);
    if (e != NULL) {
        helper_failed(&s->failures, e);
        return NULL;
    }
    int64_t idx[1] = {0};
    fulmen_tensor *out[2] = {NULL, NULL};
    size_t count = 0;
    e = fulmen_dataset_get(s->self, idx, 1, out, 2, &count);
    s->reentry_code = e == NULL ? 0 : fulmen_error_code(e);
    if (e != NULL) snprintf(s->reentry_msg, sizeof s->reentry_msg, "%s", fulmen_error_message(e));
    fulmen_error_free(e);
    for (size_t k = 0; k < count && k < 2; k++) fulmen_tensor_free(out[k]);
    helper_failed(&s->failures, fulmen_callback_detach());
    return NULL;
}

static fulmen_error *reentry_get(void *ud, const int64_t *idx, size_t n, fulmen_batch_builder *b) {
    (void)idx;
    reentry_source *s = ud;
    fulmen_callback_context *cc = NULL;
    fulmen_error *e = fulmen_callback_context_current(&cc);
    if (e != NULL) return e;
    s->cc = cc;
    bool ran = run_thread(get_own_dataset, s);
    fulmen_callback_context_free(cc);
    if (!ran) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the helper thread did not run");
    int64_t shape[1] = {(int64_t)n};
    fulmen_tensor *x = NULL;
    e = fulmen_tensor_zeros(shape, 1, FULMEN_DTYPE_F32, &x);
    if (e == NULL) e = fulmen_batch_builder_push(b, x);
    return e;
}

static void an_attached_call_into_the_running_source_is_refused(void) {
    reentry_source s;
    memset(&s, 0, sizeof s);
    s.reentry_code = -1;
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.len = reentry_len;
    vt.get_batch = reentry_get;
    CHECK_OK(fulmen_dataset_from_source(&vt, &s.self));
    int64_t idx[2] = {0, 1};
    fulmen_tensor *out[1] = {NULL};
    size_t count = 0;
    CHECK_OK(fulmen_dataset_get(s.self, idx, 2, out, 1, &count));
    CHECK(count == 1);
    if (count == 1) fulmen_tensor_free(out[0]);
    CHECK(s.failures == 0);
    CHECK(s.reentry_code == FULMEN_CODE_INVALID_STATE);
    CHECK(strstr(s.reentry_msg, "re-entrant") != NULL);
    fulmen_dataset_free(s.self);
}

/* ---- a host forward: the attached helper may use its fulmen_host_call,
 * and its call into the model running the forward is refused ---- */

typedef struct {
    fulmen_model *self;
    fulmen_host_call *call;
    const fulmen_tensor *input;
    const fulmen_callback_context *cc;
    fulmen_tensor *scale; /* read by the helper through the call */
    int get_code;
    int self_code;
    char self_msg[256];
    int failures;
} forward_world;

static void *use_the_forward(void *arg) {
    forward_world *w = arg;
    fulmen_error *e = fulmen_callback_attach(w->cc);
    if (e != NULL) {
        helper_failed(&w->failures, e);
        return NULL;
    }
    w->get_code = fixture_code(fulmen_host_call_get(w->call, "scale", &w->scale));
    fulmen_tensor *y = NULL;
    e = fulmen_model_forward(w->self, w->input, &y);
    w->self_code = e == NULL ? 0 : fulmen_error_code(e);
    if (e != NULL) snprintf(w->self_msg, sizeof w->self_msg, "%s", fulmen_error_message(e));
    fulmen_error_free(e);
    fulmen_tensor_free(y);
    helper_failed(&w->failures, fulmen_callback_detach());
    return NULL;
}

static fulmen_error *scaled_forward(void *ud, fulmen_host_call *call, const fulmen_tensor *const *inputs, size_t n,
                                    fulmen_tensor **outs) {
    (void)n;
    forward_world *w = ud;
    fulmen_callback_context *cc = NULL;
    fulmen_error *e = fulmen_callback_context_current(&cc);
    if (e != NULL) return e;
    w->call = call;
    w->input = inputs[0];
    w->cc = cc;
    w->scale = NULL;
    bool ran = run_thread(use_the_forward, w);
    fulmen_callback_context_free(cc);
    if (!ran || w->scale == NULL) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the helper read no scale");
    return fulmen_tensor_mul(inputs[0], w->scale, &outs[0]);
}

static void an_attached_thread_uses_the_forwards_call_but_not_its_model(void) {
    forward_world w;
    memset(&w, 0, sizeof w);
    w.get_code = w.self_code = -1;
    fulmen_host_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &w;
    vt.num_outputs = 1;
    vt.forward = scaled_forward;
    CHECK_OK(fulmen_model_host_new(&vt, &w.self));
    float three = 3.0f, two = 2.0f;
    int64_t one[1] = {1};
    fulmen_tensor *s = check_f32(&three, 1, one, 1);
    CHECK_OK(fulmen_model_register_parameter(w.self, NULL, "scale", s));
    fulmen_tensor_free(s);
    fulmen_tensor *x = check_f32(&two, 1, one, 1), *y = NULL;
    CHECK_OK(fulmen_model_forward(w.self, x, &y));
    CHECK(w.failures == 0);
    CHECK(w.get_code == 0);
    CHECK(w.self_code == FULMEN_CODE_INVALID_STATE);
    CHECK(strstr(w.self_msg, "re-entrant") != NULL);
    if (y != NULL) CHECK_NEAR(check_item(y), 6.0, 1e-6);
    fulmen_tensor_free(y);
    fulmen_tensor_free(x);
    fulmen_model_free(w.self);
}

/* ---- a helper that stays attached after its step returned ---- */

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    fulmen_callback_context *cc;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage;         /* 1: attached; 2: the fit returned */
    int late_code;     /* a call after the step returned, still attached */
    int detach_code;   /* the detach after that */
    int after_code;    /* a call once detached */
    fulmen_tensor *own; /* what it made once detached (the host's) */
} late_world;

static void late_set_stage(late_world *w, int stage) {
    pthread_mutex_lock(&w->mu);
    w->stage = stage;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void late_wait_stage(late_world *w, int stage) {
    pthread_mutex_lock(&w->mu);
    while (w->stage < stage) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void *stays_attached(void *arg) {
    late_world *w = arg;
    int code = fixture_code(fulmen_callback_attach(w->cc));
    late_set_stage(w, 1);
    if (code != 0) return NULL;
    late_wait_stage(w, 2);
    int64_t shape[1] = {3};
    fulmen_tensor *t = NULL;
    w->late_code = fixture_code(fulmen_tensor_ones(shape, 1, FULMEN_DTYPE_F32, &t));
    w->detach_code = fixture_code(fulmen_callback_detach());
    w->after_code = fixture_code(fulmen_tensor_ones(shape, 1, FULMEN_DTYPE_F32, &w->own));
    return NULL;
}

static fulmen_error *late_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    late_world *w = ud;
    if (!w->started) {
        fulmen_error *e = fulmen_callback_context_current(&w->cc);
        if (e != NULL) return e;
        if (pthread_create(&w->thread, NULL, stays_attached, w) != 0) {
            return fulmen_error_new(FULMEN_CODE_CALLBACK, "pthread_create failed");
        }
        w->started = true;
        late_wait_stage(w, 1);
    }
    return fixture_cross_entropy(w->model, batch, out);
}

static void a_helper_attached_past_its_step_is_refused_until_it_detaches(void) {
    fulmen_dataset *ds = fixture_blobs(16, 6, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    late_world w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.late_code = w.detach_code = w.after_code = -1;
    w.model = fixture_mlp(4, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, late_step, NULL);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    size_t before = fulmen_live_handles();
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(w.started);
    late_set_stage(&w, 2);
    if (w.started) pthread_join(w.thread, NULL);
    CHECK(w.late_code == FULMEN_CODE_INVALID_STATE);
    CHECK(w.detach_code == 0);
    CHECK(w.after_code == 0);
    /* Left: the context and the tensor made once detached, the host's. */
    CHECK(fulmen_live_handles() == before + 2);
    fulmen_tensor_free(w.own);
    fulmen_callback_context_free(w.cc);
    CHECK(fulmen_live_handles() == before);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    a_step_computed_on_an_attached_thread_leaves_nothing();
    an_attached_thread_runs_under_the_steps_no_grad();
    an_attached_call_into_the_running_source_is_refused();
    an_attached_thread_uses_the_forwards_call_but_not_its_model();
    a_helper_attached_past_its_step_is_refused_until_it_detaches();
    return check_finish("test_callback_threads");
}

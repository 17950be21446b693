/*
 * Handles in use: a call pins the handles it uses. Freeing a trainer,
 * module, loader or dataset inside a step of the fit that uses them, or
 * from another thread during the fit, is deferred until the fit returns
 * (the fit finishes; ASan and valgrind see no access to freed memory);
 * changing a running trainer, or calling fit re-entrantly, is
 * FULMEN_CODE_INVALID_STATE; a data source or accelerator that calls back
 * into itself gets FULMEN_CODE_INVALID_STATE instead of a deadlock; tensors
 * a helper thread that is not attached makes during a step belong to the
 * host.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <pthread.h>
#include <string.h>

/* Shared by the fit scenarios: what the step does at which batch. */
typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    fulmen_trainer *trainer;
    fulmen_lightning_module *module;
    fulmen_loader *loader;
    fulmen_dataset *dataset;
    int64_t free_at;      /* batch index of the frees (-1: none) */
    int steps;            /* training steps run */
    int after_free_codes; /* codes of calls on freed handles, summed */
    int in_use_code;      /* code of a call on the running trainer */
    char in_use_msg[256];
    int refit_code; /* code of a re-entrant fit */
    int userdata_frees;
    int frees_seen_in_steps; /* userdata_free calls observed during the fit */
} world;

static void count_free(void *ud) { ((world *)ud)->userdata_frees++; }

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    world *w = ud;
    int64_t i = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    if (e != NULL) return e;
    w->steps++;
    w->frees_seen_in_steps += w->userdata_frees;
    if (i == w->free_at) {
        if (w->trainer != NULL) {
            /* The running trainer: changes and a second fit are refused. */
            fulmen_error *busy = fulmen_trainer_add_lr_monitor(w->trainer, "step");
            w->in_use_code = busy == NULL ? 0 : fulmen_error_code(busy);
            if (busy != NULL) snprintf(w->in_use_msg, sizeof w->in_use_msg, "%s", fulmen_error_message(busy));
            fulmen_error_free(busy);
            w->refit_code = fixture_code(fulmen_trainer_fit(w->trainer, w->module, w->loader, NULL, NULL));
            fulmen_trainer_free(w->trainer);
            int64_t gs = 0;
            w->after_free_codes += fixture_code(fulmen_trainer_global_step(w->trainer, &gs));
        }
        if (w->module != NULL) fulmen_lightning_module_free(w->module);
        if (w->loader != NULL) fulmen_loader_free(w->loader);
        if (w->dataset != NULL) fulmen_dataset_free(w->dataset);
    }
    return fixture_cross_entropy(w->model, batch, out);
}

static fulmen_lightning_module *module_for(world *w) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = w;
    vt.userdata_free = count_free;
    vt.training_step = step;
    vt.configure_optimizers = fixture_configure_sgd;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, w->model, &m));
    return m;
}

/* Trainer, module, loader and dataset all freed inside the step of batch 1:
 * every free waits for the fit, which runs its 4 batches and returns OK. */
static void frees_inside_a_step_are_deferred(void) {
    world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    w.dataset = fixture_blobs(32, 1, 1.0f);
    w.loader = fixture_loader(w.dataset, 8, true, 3);
    w.module = module_for(&w);
    w.trainer = fixture_trainer(NULL, 1);
    w.free_at = 1;
    fulmen_trainer *t = w.trainer;
    fulmen_lightning_module *m = w.module;
    fulmen_loader *l = w.loader;
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(w.steps == 4);
    CHECK(w.in_use_code == FULMEN_CODE_INVALID_STATE);
    CHECK(strstr(w.in_use_msg, "in use by fulmen_trainer_fit") != NULL);
    CHECK(w.refit_code == FULMEN_CODE_INVALID_STATE);
    CHECK(w.after_free_codes == FULMEN_CODE_INVALID_HANDLE);
    CHECK(w.frees_seen_in_steps == 0); /* the module's userdata lived through the fit */
    CHECK(w.userdata_frees == 1);      /* ... and was freed once, after it */
    /* Every handle is gone now; a later use is a clear error. */
    int64_t gs = 0;
    CHECK_ERR(fulmen_trainer_global_step(t, &gs), FULMEN_CODE_INVALID_HANDLE, "freed");
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_model_free(w.model);
    CHECK(fulmen_live_handles() == 0);
}

/* Another thread frees the trainer and the loader while the fit waits in a
 * step; the fit finishes on the objects it started with. */
typedef struct {
    world *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage; /* 1: the step is waiting; 2: the other thread freed */
} handoff;

static handoff *g_handoff;

static fulmen_error *waiting_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    world *w = ud;
    int64_t i = 0;
    CHECK_OK(fulmen_step_context_batch_idx(ctx, &i));
    w->steps++;
    if (i == 1 && g_handoff->stage == 0) {
        pthread_mutex_lock(&g_handoff->mu);
        g_handoff->stage = 1;
        pthread_cond_broadcast(&g_handoff->cv);
        while (g_handoff->stage != 2) pthread_cond_wait(&g_handoff->cv, &g_handoff->mu);
        pthread_mutex_unlock(&g_handoff->mu);
    }
    return fixture_cross_entropy(w->model, batch, out);
}

static void *free_from_other_thread(void *arg) {
    handoff *h = arg;
    pthread_mutex_lock(&h->mu);
    while (h->stage != 1) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    /* The trainer is in use: reading it is refused, freeing it is deferred. */
    int64_t gs = 0;
    h->w->in_use_code = fixture_code(fulmen_trainer_global_step(h->w->trainer, &gs));
    fulmen_trainer_free(h->w->trainer);
    fulmen_loader_free(h->w->loader);
    fulmen_lightning_module_free(h->w->module);
    pthread_mutex_lock(&h->mu);
    h->stage = 2;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void frees_from_another_thread_are_deferred(void) {
    world w;
    memset(&w, 0, sizeof w);
    w.model = fixture_mlp(8, 0);
    fulmen_dataset *ds = fixture_blobs(32, 2, 1.0f);
    w.loader = fixture_loader(ds, 8, false, 0);
    fulmen_dataset_free(ds);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &w;
    vt.userdata_free = count_free;
    vt.training_step = waiting_step;
    vt.configure_optimizers = fixture_configure_sgd;
    CHECK_OK(fulmen_lightning_module_new(&vt, w.model, &w.module));
    w.trainer = fixture_trainer(NULL, 2);
    handoff h = {&w, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    g_handoff = &h;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, free_from_other_thread, &h) == 0);
    CHECK_OK(fulmen_trainer_fit(w.trainer, w.module, w.loader, NULL, NULL));
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(w.steps == 8); /* both epochs ran */
    CHECK(w.in_use_code == FULMEN_CODE_INVALID_STATE);
    CHECK(w.userdata_frees == 1);
    fulmen_model_free(w.model);
    CHECK(fulmen_live_handles() == 0);
}

/* A host data source that calls back into its own dataset, and one that
 * frees its own handle while it is being read. */
typedef struct {
    fulmen_dataset *self;
    int reentry_code;
    bool free_self;
} source;

static fulmen_error *source_len(void *ud, size_t *len) {
    (void)ud;
    *len = 16;
    return NULL;
}

static fulmen_error *source_get(void *ud, const int64_t *idx, size_t n, fulmen_batch_builder *b) {
    source *s = ud;
    if (s->self != NULL && !s->free_self) {
        fulmen_tensor *out[2];
        size_t count = 0;
        s->reentry_code = fixture_code(fulmen_dataset_get(s->self, idx, n, out, 2, &count));
    }
    if (s->free_self) fulmen_dataset_free(s->self);
    int64_t shape[1] = {(int64_t)n};
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_tensor_zeros(shape, 1, FULMEN_DTYPE_F32, &x);
    if (e == NULL) e = fulmen_batch_builder_push(b, x);
    return e;
}

static fulmen_dataset *host_dataset(source *s) {
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.len = source_len;
    vt.get_batch = source_get;
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_source(&vt, &ds));
    return ds;
}

static void data_sources_that_call_back_into_themselves(void) {
    source s = {NULL, 0, false};
    s.self = host_dataset(&s);
    int64_t idx[2] = {0, 1};
    fulmen_tensor *out[2] = {NULL, NULL};
    size_t count = 0;
    CHECK_OK(fulmen_dataset_get(s.self, idx, 2, out, 2, &count));
    CHECK(count == 1);
    CHECK(s.reentry_code == FULMEN_CODE_INVALID_STATE);
    fulmen_tensor_free(out[0]);
    /* Freeing itself inside get_batch: the outer get still completes. */
    s.free_self = true;
    CHECK_OK(fulmen_dataset_get(s.self, idx, 2, out, 2, &count));
    fulmen_tensor_free(out[0]);
    CHECK_ERR(fulmen_dataset_get(s.self, idx, 2, out, 2, &count), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(fulmen_live_handles() == 0);
}

/* A custom accelerator whose callback queries its own handle. */
static int g_acc_inner_code = -1;

static fulmen_error *acc_is_available(void *ud, bool *out) {
    (void)ud;
    fulmen_accelerator *self = NULL;
    fulmen_error *e = fulmen_accelerator_get("selfcheck", &self);
    if (e != NULL) return e;
    bool inner = false;
    g_acc_inner_code = fixture_code(fulmen_accelerator_is_available(self, &inner));
    fulmen_accelerator_free(self);
    *out = true;
    return NULL;
}

static void accelerators_that_call_back_into_themselves(void) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.is_available = acc_is_available;
    CHECK_OK(fulmen_accelerator_register("selfcheck", "queries itself", &vt, false));
    fulmen_accelerator *a = NULL;
    CHECK_OK(fulmen_accelerator_get("selfcheck", &a));
    bool avail = false;
    CHECK_OK(fulmen_accelerator_is_available(a, &avail));
    CHECK(avail);
    CHECK(g_acc_inner_code == FULMEN_CODE_INVALID_STATE);
    fulmen_accelerator_free(a);
    CHECK_OK(fulmen_accelerator_unregister("selfcheck"));
}

/* Tensors a helper thread that is not attached to the step
 * (fulmen_callback_attach, test_callback_threads) makes during it are the
 * host's: scopes are per thread. Freed by the host, nothing is left; kept,
 * they stay alive. */
typedef struct {
    fulmen_model *model;
    bool free_them;
    fulmen_tensor *made[4];
    int made_count;
} helper_world;

static void *make_tensors(void *arg) {
    helper_world *h = arg;
    int64_t shape[1] = {3};
    for (int k = 0; k < 4; k++) {
        fulmen_tensor *t = NULL;
        if (fulmen_tensor_ones(shape, 1, FULMEN_DTYPE_F32, &t) == NULL) {
            if (h->free_them) {
                fulmen_tensor_free(t);
            } else if (h->made_count < 4) {
                h->made[h->made_count++] = t;
            } else {
                fulmen_tensor_free(t);
            }
        }
    }
    return NULL;
}

static fulmen_error *helper_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    helper_world *h = ud;
    pthread_t th;
    if (pthread_create(&th, NULL, make_tensors, h) == 0) pthread_join(th, NULL);
    return fixture_cross_entropy(h->model, batch, out);
}

static void helper_thread_tensors_belong_to_the_host(void) {
    fulmen_dataset *ds = fixture_blobs(16, 3, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    for (int keep = 0; keep < 2; keep++) {
        helper_world h;
        memset(&h, 0, sizeof h);
        h.model = fixture_mlp(4, 0);
        h.free_them = keep == 0;
        fulmen_lightning_module *m = fixture_module(h.model, &h, helper_step, NULL);
        fulmen_trainer *t = fixture_trainer(NULL, 1);
        size_t before = fulmen_live_handles();
        CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
        /* Freed by the helper: nothing left. Kept: the first 4 are alive
         * (the rule: no scope covers a thread that is not attached) until
         * the host frees. */
        CHECK(fulmen_live_handles() == before + (size_t)h.made_count);
        CHECK(h.made_count == (keep ? 4 : 0));
        for (int k = 0; k < h.made_count; k++) fulmen_tensor_free(h.made[k]);
        CHECK(fulmen_live_handles() == before);
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(h.model);
    }
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    frees_inside_a_step_are_deferred();
    frees_from_another_thread_are_deferred();
    data_sources_that_call_back_into_themselves();
    accelerators_that_call_back_into_themselves();
    helper_thread_tensors_belong_to_the_host();
    return check_finish("test_pinning");
}

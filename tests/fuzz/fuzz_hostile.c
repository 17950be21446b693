/*
 * Fuzz target: a hostile host. Each input runs real fits whose callbacks
 * (training and validation steps, every hook, a host data source's
 * get_batch) read their next action from the input: free the running
 * trainer, module, loader, dataset or model; call fit, validate or a
 * setter on the running trainer; read it; call fulmen_dataset_get on the
 * dataset being read; log into the step context from another thread; free
 * or use handles from another thread; return an error; stop the run.
 *
 * Checked: no crash or sanitizer report (the frees must be deferred, the
 * re-entrant calls refused, nothing deadlocks), every error has a known
 * code and is never a caught panic, and once the host has freed what it
 * still owns, fulmen_live_handles() is back to where it was.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

const char *fuzz_target_name = "hostile";

static unsigned long actions, errors, fits;

void fuzz_report(void) {
    printf("fuzz hostile: %lu fits, %lu hostile actions, %lu errors returned\n", fits, actions, errors);
}

static void check_error(fulmen_error *e) { errors += (unsigned long)fuzz_check_error_("hostile", e); }

/* What one input runs on. The host "owns" a handle until it frees it;
 * freed handles stay in `stale` to be passed again. */
typedef struct {
    const uint8_t *p;
    size_t n;
    fulmen_trainer *trainer;
    fulmen_lightning_module *module;
    fulmen_loader *loader;
    fulmen_dataset *dataset;
    fulmen_model *model;
    bool own_trainer, own_module, own_loader, own_dataset, own_model;
    fulmen_step_context *ctx; /* the running step's context, or NULL */
} world;

static world *g;

static uint8_t next(void) {
    if (g->n == 0) return 0;
    g->n--;
    return *g->p++;
}

static void free_trainer(void) {
    if (g->own_trainer) fulmen_trainer_free(g->trainer);
    g->own_trainer = false;
}
static void free_module(void) {
    if (g->own_module) fulmen_lightning_module_free(g->module);
    g->own_module = false;
}
static void free_loader(void) {
    if (g->own_loader) fulmen_loader_free(g->loader);
    g->own_loader = false;
}
static void free_dataset(void) {
    if (g->own_dataset) fulmen_dataset_free(g->dataset);
    g->own_dataset = false;
}
static void free_model(void) {
    if (g->own_model) fulmen_model_free(g->model);
    g->own_model = false;
}

/* ---- actions from another thread ---- */

typedef struct {
    uint8_t what;
    fulmen_step_context *ctx;
} thread_job;

static void *on_thread(void *arg) {
    thread_job *j = arg;
    int64_t gs = 0;
    double v = 0;
    switch (j->what % 6) {
    case 0: check_error(fulmen_trainer_global_step(g->trainer, &gs)); break;
    case 1: check_error(fulmen_trainer_fit(g->trainer, g->module, g->loader, NULL, NULL)); break;
    case 2: check_error(fulmen_step_context_log(j->ctx, "from_thread", 1.0, 0, 0)); break;
    case 3: check_error(fulmen_trainer_callback_metric(g->trainer, "loss", &v)); break;
    case 4: {
        int64_t shape[1] = {2};
        fulmen_tensor *t = NULL;
        check_error(fulmen_tensor_ones(shape, 1, FULMEN_DTYPE_F32, &t));
        fulmen_tensor_free(t);
        break;
    }
    default: check_error(fulmen_model_set_training(g->model, true)); break;
    }
    return NULL;
}

/* One hostile action, chosen by the input. Returns an error to hand back
 * from the callback, or NULL. */
static fulmen_error *act(void) {
    uint8_t op = next();
    if (op < 96) return NULL; /* most callbacks behave */
    actions++;
    int64_t gs = 0, idx[2] = {0, 1};
    double v = 0;
    fulmen_tensor *out[4] = {NULL, NULL, NULL, NULL};
    size_t count = 0;
    switch (op % 16) {
    case 0: free_trainer(); break;
    case 1: free_module(); break;
    case 2: free_loader(); break;
    case 3: free_dataset(); break;
    case 4: free_model(); break;
    case 5: check_error(fulmen_trainer_fit(g->trainer, g->module, g->loader, NULL, NULL)); break;
    case 6: check_error(fulmen_trainer_validate(g->trainer, g->module, g->loader, NULL)); break;
    case 7: check_error(fulmen_trainer_add_lr_monitor(g->trainer, "step")); break;
    case 8: check_error(fulmen_trainer_global_step(g->trainer, &gs)); break;
    case 9:
        check_error(fulmen_dataset_get(g->dataset, idx, 2, out, 4, &count));
        for (size_t i = 0; i < 4; i++) fulmen_tensor_free(out[i]);
        break;
    case 10:
    case 11: {
        thread_job j = {next(), g->ctx};
        pthread_t th;
        if (pthread_create(&th, NULL, on_thread, &j) == 0) pthread_join(th, NULL);
        break;
    }
    case 12: check_error(fulmen_trainer_callback_metric(g->trainer, "loss", &v)); break;
    case 13: check_error(fulmen_lightning_module_set_hparam(g->module, "k", "v")); break;
    case 14: return fulmen_error_new(FULMEN_CODE_CALLBACK, "the host says no");
    default: check_error(fulmen_model_set_training(g->model, (op & 1) != 0)); break;
    }
    return NULL;
}

/* ---- the module and the data source ---- */

static fulmen_error *loss_of(const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(g->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ud;
    g->ctx = ctx;
    fulmen_error *e = act();
    g->ctx = NULL;
    if (e != NULL) return e;
    e = loss_of(batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, next() < 128 ? FULMEN_LOG_ON_STEP : FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ud;
    g->ctx = ctx;
    fulmen_error *e = act();
    g->ctx = NULL;
    fulmen_tensor *loss = NULL;
    if (e == NULL) e = loss_of(batch, &loss);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    (void)ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(g->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    else fulmen_optimizer_free(opt); /* consumed: a second free is a no-op */
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    (void)hook;
    uint8_t b = next();
    if (b == 7) check_error(fulmen_hook_context_request_stop(ctx));
    if (b == 8) check_error(fulmen_hook_context_skip_rest_of_epoch(ctx)); /* refused outside on_train_batch_start */
    if (b < 200) return NULL;
    return act();
}

static fulmen_error *source_len(void *ud, size_t *len) {
    (void)ud;
    *len = 24;
    return NULL;
}

static fulmen_error *source_get(void *ud, const int64_t *idx, size_t n, fulmen_batch_builder *b) {
    (void)ud;
    (void)idx;
    fulmen_error *e = act();
    if (e != NULL) return e;
    int64_t xs[2] = {(int64_t)n, 2}, ys[1] = {(int64_t)n};
    fulmen_tensor *x = NULL, *y = NULL;
    e = fulmen_tensor_randn(xs, 2, FULMEN_DTYPE_F32, &x);
    if (e == NULL) e = fulmen_tensor_zeros(ys, 1, FULMEN_DTYPE_I64, &y);
    if (e == NULL) e = fulmen_batch_builder_push(b, x);
    if (e == NULL) e = fulmen_batch_builder_push(b, y);
    return e;
}

static void ok(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "fuzz hostile: set-up failed: %s\n", fulmen_error_message(e));
        abort();
    }
}

static void build(world *w) {
    fulmen_model *l = NULL;
    ok(fulmen_model_sequential_new(&w->model));
    ok(fulmen_model_linear_new(2, 4, true, &l));
    ok(fulmen_model_push(w->model, l));
    ok(fulmen_model_linear_new(4, 2, true, &l));
    ok(fulmen_model_push(w->model, l));
    fulmen_data_source_vtable dv;
    memset(&dv, 0, sizeof dv);
    dv.struct_size = sizeof dv;
    dv.len = source_len;
    dv.get_batch = source_get;
    ok(fulmen_dataset_from_source(&dv, &w->dataset));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 8;
    lo.shuffle = true;
    ok(fulmen_loader_new(w->dataset, &lo, &w->loader));
    fulmen_module_vtable mv;
    memset(&mv, 0, sizeof mv);
    mv.struct_size = sizeof mv;
    mv.training_step = training_step;
    mv.validation_step = validation_step;
    mv.configure_optimizers = configure_optimizers;
    mv.on_hook = on_hook;
    ok(fulmen_lightning_module_new(&mv, w->model, &w->module));
    fulmen_trainer_options *o = NULL;
    ok(fulmen_trainer_options_new(&o));
    ok(fulmen_trainer_options_set_int(o, "max_epochs", 1 + next() % 2));
    ok(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    ok(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    ok(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    ok(fulmen_trainer_options_set(o, "logger", "false"));
    ok(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", next() % 2));
    ok(fulmen_trainer_new(o, &w->trainer));
    fulmen_trainer_options_free(o);
    w->own_trainer = w->own_module = w->own_loader = w->own_dataset = w->own_model = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t before = fulmen_live_handles();
    world w;
    memset(&w, 0, sizeof w);
    w.p = data;
    w.n = size;
    g = &w;
    build(&w);
    int runs = 1 + next() % 2;
    for (int r = 0; r < runs; r++) {
        fits++;
        bool validate = next() & 1;
        check_error(fulmen_trainer_fit(w.trainer, w.module, w.loader, validate ? w.loader : NULL, NULL));
    }
    free_trainer();
    free_module();
    free_loader();
    free_dataset();
    free_model();
    g = NULL;
    if (fulmen_live_handles() != before) {
        fprintf(stderr, "fuzz hostile: %zu handles left after the host freed everything\n",
                fulmen_live_handles() - before);
        abort();
    }
    return 0;
}

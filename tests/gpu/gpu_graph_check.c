/*
 * The GPU kit's checks of graphed training steps (cuda_graphs) on cuda:0:
 * graphed fits train as eager ones (per-step losses and weights within
 * 1e-6) in 32-true, bf16-mixed and 16-mixed (the loss scaler's inf check
 * and scale update on the device) with clipping and a scheduler, calling
 * training_step only to warm up and capture; replays make no host
 * synchronization (CUDA's sync debug mode set to error around each); a
 * graphed fit resumes exactly; a step that reads a value is refused at its
 * capture; a fit that logs its loss as a tensor and validates (graphed
 * forward-only steps that log theirs) logs what the eager fit logs, with
 * validation replays that make no host synchronization either; a graphed
 * predict run keeps the eager run's predictions. It also prints the time per step of eager and graphed fits of
 * the same run (measured, not asserted).
 *
 *   gpu_graph_check [WORK_DIR]     exit 77 when CUDA is not available
 */
#define _XOPEN_SOURCE 700
#include <fulmen.h>

#include "../c/check.h"
#include "../c/fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char work[512];

#define MAX_STEPS 4096

typedef struct {
    fulmen_model *model;
    bool reads;          /* the step reads its loss (refused at a capture) */
    bool record_losses;  /* on_train_batch_end reads each loss */
    bool strict_after;   /* replays run under sync debug mode "error" */
    bool logs;           /* training_step logs its loss as a tensor; validation_step runs */
    int64_t val_calls, val_steps;
    int64_t warmup;      /* steps before the first replay */
    int64_t calls, steps;
    double losses[MAX_STEPS];
    size_t n_losses;
} graph_ud;

static fulmen_error *graph_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    graph_ud *g = ud;
    g->calls++;
    fulmen_error *e = fixture_cross_entropy(g->model, batch, out);
    double v = 0;
    if (e == NULL && g->reads) e = fulmen_tensor_item(*out, &v);
    if (e == NULL && g->logs)
        e = fulmen_step_context_log_tensor(ctx, "loss", *out, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* validation_step: the loss, logged as a tensor (mean and sum), and output. */
static fulmen_error *graph_val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                    fulmen_tensor **out) {
    graph_ud *g = ud;
    g->val_calls++;
    fulmen_error *e = fixture_cross_entropy(g->model, batch, out);
    if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "val_loss", *out, FULMEN_LOG_ON_EPOCH, 0);
    if (e == NULL)
        e = fulmen_step_context_log_tensor(ctx, "val_sum", *out, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
    return e;
}

static fulmen_error *graph_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    graph_ud *g = ud;
    /* Validation: the sanity check's 2 batches and the first epoch's first
     * warm up, its second is captured; later batches replay. */
    if (hook == FULMEN_HOOK_VALIDATION_BATCH_START && g->strict_after && g->val_steps >= g->warmup) {
        return fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 2);
    }
    if (hook == FULMEN_HOOK_VALIDATION_BATCH_END) {
        g->val_steps++;
        return g->strict_after ? fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 0) : NULL;
    }
    if (hook == FULMEN_HOOK_TRAIN_BATCH_START && g->strict_after && g->steps >= g->warmup) {
        return fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 2);
    }
    if (hook != FULMEN_HOOK_TRAIN_BATCH_END) return NULL;
    g->steps++;
    fulmen_error *e = g->strict_after ? fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 0) : NULL;
    if (e == NULL && g->record_losses && g->n_losses < MAX_STEPS) {
        fulmen_tensor *loss = NULL;
        e = fulmen_hook_context_output(ctx, &loss);
        if (e == NULL) e = fulmen_tensor_item(loss, &g->losses[g->n_losses++]);
        fulmen_tensor_free(loss);
    }
    return e;
}

/* Fused Adam (lr 0.01) with a StepLR halving it every 5 steps. */
static fulmen_error *graph_configure(void *ud, fulmen_optimizer_config *config) {
    graph_ud *g = ud;
    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = 0.01;
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *s = NULL;
    fulmen_error *e = fulmen_optimizer_adam_new(g->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_set_fused(opt, true);
    if (e == NULL) e = fulmen_scheduler_step_lr_new(opt, 5, 0.5, &s);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, s, FULMEN_INTERVAL_STEP, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
    }
    return e;
}

/* The callback metrics a fit that logs leaves: loss_step, loss_epoch,
 * val_loss, val_sum. */
static const char *const LOGGED[4] = {"loss_step", "loss_epoch", "val_loss", "val_sum"};
static double logged[4];

/* A fit on cuda:0 of `batches` batches of 64 for `epochs` epochs (with
 * `g->logs`, validating on 6 batches each epoch and reading LOGGED into
 * `logged` after it); writes the seconds it took to *seconds and the fit's
 * error to *err. */
static fulmen_model *gpu_fit(graph_ud *g, size_t batches, int64_t epochs, const char *precision, bool graphs,
                             const char *save, const char *resume, fulmen_error **err, double *seconds) {
    fulmen_dataset *ds = fixture_blobs(64 * batches, 7, 2.0f);
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 64;
    lo.shuffle = true;
    lo.seed = 3;
    lo.pin_memory = true;
    fulmen_loader *loader = NULL;
    CHECK_OK(fulmen_loader_new(ds, &lo, &loader));
    CHECK_OK(fulmen_manual_seed(13));
    g->model = fixture_mlp(64, 0);
    g->calls = g->steps = g->val_calls = g->val_steps = 0;
    g->n_losses = 0;
    g->warmup = 4; /* 3 eager steps and the capture's */
    fulmen_lightning_module *module = fixture_module_with_eval(g->model, g, graph_step, g->logs ? graph_val_step : NULL,
                                                               graph_hook, graph_configure);
    fulmen_dataset *val_ds = g->logs ? fixture_blobs(64 * 6, 8, 2.0f) : NULL;
    fulmen_loader *val = NULL;
    if (val_ds != NULL) {
        lo.shuffle = false;
        CHECK_OK(fulmen_loader_new(val_ds, &lo, &val));
    }
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cuda"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set(o, "precision", precision));
    CHECK_OK(fulmen_trainer_options_set(o, "gradient_clip_val", "0.5"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1000));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "cuda_graphs", graphs));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    *err = fulmen_trainer_fit(t, module, loader, val, resume);
    fulmen_error *synced = fulmen_device_synchronize(FULMEN_DEVICE_TYPE_CUDA, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK_OK(synced);
    CHECK_OK(fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 0));
    if (seconds != NULL) *seconds = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (*err == NULL && save != NULL) CHECK_OK(fulmen_trainer_save_checkpoint(t, module, save, false));
    for (size_t i = 0; i < 4; i++) {
        logged[i] = NAN;
        if (*err == NULL && g->logs) CHECK_OK(fulmen_trainer_callback_metric(t, LOGGED[i], &logged[i]));
    }
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_loader_free(val);
    fulmen_dataset_free(val_ds);
    return g->model;
}

static void test_graphed_as_eager(const char *precision) {
    static graph_ud eager, graphed;
    memset(&eager, 0, sizeof eager);
    memset(&graphed, 0, sizeof graphed);
    eager.record_losses = graphed.record_losses = true;
    fulmen_error *e1 = NULL, *e2 = NULL;
    fulmen_model *a = gpu_fit(&eager, 8, 2, precision, false, NULL, NULL, &e1, NULL);
    fulmen_model *b = gpu_fit(&graphed, 8, 2, precision, true, NULL, NULL, &e2, NULL);
    CHECK_OK(e1);
    CHECK_OK(e2);
    double worst = 0;
    for (size_t i = 0; i < eager.n_losses && i < graphed.n_losses; i++) {
        double d = fabs(eager.losses[i] - graphed.losses[i]);
        if (!(d <= worst)) worst = d;
    }
    double weights = fixture_max_diff(a, b);
    printf("%s graphed vs eager on cuda:0: %zu steps, max loss diff %g, max weight diff %g, %lld training_step calls\n",
           precision, graphed.n_losses, worst, weights, (long long)graphed.calls);
    CHECK(eager.n_losses == 16 && graphed.n_losses == 16);
    CHECK(worst <= 1e-6 && weights <= 1e-6);
    CHECK(graphed.calls == 4);
    fulmen_model_free(a);
    fulmen_model_free(b);
}

/* A fit that logs its loss as a tensor and validates, graphed and eager:
 * the same logged values; the graphed validation_step runs for the warm-up
 * and the capture only, and its replays (with the training replays) make
 * no host synchronization. */
static void test_graphed_logs_and_validation(const char *precision) {
    static graph_ud eager, graphed;
    memset(&eager, 0, sizeof eager);
    memset(&graphed, 0, sizeof graphed);
    eager.logs = graphed.logs = true;
    graphed.strict_after = true;
    fulmen_error *e1 = NULL, *e2 = NULL;
    double a[4], b[4];
    fulmen_model *ma = gpu_fit(&eager, 8, 2, precision, false, NULL, NULL, &e1, NULL);
    memcpy(a, logged, sizeof a);
    fulmen_model *mb = gpu_fit(&graphed, 8, 2, precision, true, NULL, NULL, &e2, NULL);
    memcpy(b, logged, sizeof b);
    CHECK_OK(e1);
    CHECK_OK(e2);
    double worst = 0;
    for (size_t i = 0; i < 4; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= worst)) worst = d;
    }
    printf("%s graphed vs eager with logged tensors and validation on cuda:0: max logged diff %g (val_loss %g / "
           "%g), %lld training_step and %lld validation_step calls (eager %lld)\n",
           precision, worst, a[2], b[2], (long long)graphed.calls, (long long)graphed.val_calls,
           (long long)eager.val_calls);
    CHECK(worst <= 1e-6);
    CHECK(graphed.calls == 4 && graphed.val_calls == 4 && eager.val_calls == 14);
    CHECK(fixture_max_diff(ma, mb) <= 1e-6);
    fulmen_model_free(ma);
    fulmen_model_free(mb);
}

/* predict_step: the logits of a batch. */
static fulmen_error *predict_logits(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                    fulmen_tensor **out) {
    (void)ctx;
    graph_ud *g = ud;
    g->calls++;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(g->model, x, out);
    return e;
}

/* The predictions of 8 batches of 64 on cuda:0 (a new MLP, the same
 * weights every time), concatenated; graphed or not. */
static fulmen_tensor *gpu_predict(graph_ud *g, bool graphs) {
    fulmen_dataset *ds = fixture_blobs(64 * 8, 9, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 64, false, 0);
    CHECK_OK(fulmen_manual_seed(13));
    g->model = fixture_mlp(64, 0);
    g->calls = 0;
    fulmen_lightning_module *module = fixture_module_predicting(g->model, g, predict_logits);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cuda"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "cuda_graphs", graphs));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_tensor *out = NULL;
    CHECK_OK(fulmen_trainer_predict(t, module, loader, NULL, &out));
    fulmen_tensor *cpu = NULL;
    if (out != NULL) CHECK_OK(fulmen_tensor_to_device(out, FULMEN_DEVICE_TYPE_CPU, 0, &cpu));
    fulmen_tensor_free(out);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_model_free(g->model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return cpu;
}

/* A graphed predict run keeps every batch's prediction (each replay's
 * copied), as the eager run's; predict_step runs 4 times. */
static void test_graphed_predict(void) {
    static graph_ud eager, graphed;
    memset(&eager, 0, sizeof eager);
    memset(&graphed, 0, sizeof graphed);
    fulmen_tensor *a = gpu_predict(&eager, false), *b = gpu_predict(&graphed, true);
    double diff = a != NULL && b != NULL ? fixture_tensor_diff(a, b) : 1e300;
    printf("graphed predict on cuda:0: max prediction diff %g, %lld predict_step calls (eager %lld)\n", diff,
           (long long)graphed.calls, (long long)eager.calls);
    CHECK(diff <= 1e-6 && graphed.calls == 4 && eager.calls == 8);
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);
}

/* Replays under sync debug mode "error": any host synchronization fails. */
static void test_replays_do_not_sync(void) {
    const char *precisions[] = {"bf16-mixed", "16-mixed"};
    for (size_t p = 0; p < 2; p++) {
        static graph_ud g;
        memset(&g, 0, sizeof g);
        g.strict_after = true;
        fulmen_error *e = NULL;
        fulmen_model_free(gpu_fit(&g, 8, 2, precisions[p], true, NULL, NULL, &e, NULL));
        printf("%s graphed replays without a host synchronization: %lld steps%s%s\n", precisions[p],
               (long long)g.steps, e == NULL ? "" : "; failed: ", e == NULL ? "" : fulmen_error_message(e));
        CHECK(e == NULL && g.steps == 16);
        fulmen_error_free(e);
    }
}

static void test_graphed_resume(void) {
    char path[640];
    snprintf(path, sizeof path, "%s/graphed.ckpt", work);
    static graph_ud g;
    memset(&g, 0, sizeof g);
    fulmen_error *e = NULL;
    fulmen_model *whole = gpu_fit(&g, 8, 2, "32-true", true, NULL, NULL, &e, NULL);
    CHECK_OK(e);
    fulmen_model_free(gpu_fit(&g, 8, 1, "32-true", true, path, NULL, &e, NULL));
    CHECK_OK(e);
    fulmen_model *resumed = gpu_fit(&g, 8, 2, "32-true", true, NULL, path, &e, NULL);
    CHECK_OK(e);
    double diff = fixture_max_diff(whole, resumed);
    printf("graphed resume on cuda:0: max |whole - resumed| = %g\n", diff);
    CHECK(diff <= 1e-6);
    fulmen_model_free(whole);
    fulmen_model_free(resumed);
}

static void test_refusal(void) {
    static graph_ud g;
    memset(&g, 0, sizeof g);
    g.reads = true;
    fulmen_error *e = NULL;
    fulmen_model_free(gpu_fit(&g, 8, 1, "32-true", true, NULL, NULL, &e, NULL));
    printf("a step that reads its loss, graphed: %s\n", e == NULL ? "not refused" : fulmen_error_message(e));
    CHECK_ERR(e, FULMEN_CODE_UNSUPPORTED, "could not be captured");
}

/* Seconds per step of eager and graphed fits of 400 steps (the first
 * epoch of 8 steps is left out as warm-up), printed. */
static void measure(void) {
    static graph_ud g;
    const char *precisions[] = {"32-true", "bf16-mixed"};
    for (size_t p = 0; p < 2; p++) {
        double t[2][2];
        for (int graphs = 0; graphs < 2; graphs++) {
            memset(&g, 0, sizeof g);
            fulmen_error *e = NULL;
            fulmen_model_free(gpu_fit(&g, 8, 1, precisions[p], graphs, NULL, NULL, &e, &t[graphs][0]));
            CHECK_OK(e);
            fulmen_model_free(gpu_fit(&g, 200, 1, precisions[p], graphs, NULL, NULL, &e, &t[graphs][1]));
            CHECK_OK(e);
        }
        double eager = (t[0][1] - t[0][0]) / 192 * 1e6, graphed = (t[1][1] - t[1][0]) / 192 * 1e6;
        printf("MLP 2-64-2, batch 64, %s, fused Adam, clipping: %.1f us/step eager, %.1f us/step graphed (%.2fx)\n",
               precisions[p], eager, graphed, eager / graphed);
    }
}

int main(int argc, char **argv) {
    snprintf(work, sizeof work, "%s/fulmen-gpu-graphs.XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (mkdtemp(work) == NULL) {
        perror("gpu_graph_check: mkdtemp");
        return 2;
    }
    size_t n = 0;
    fulmen_error *e = fulmen_device_count(FULMEN_DEVICE_TYPE_CUDA, &n);
    if (e != NULL || n == 0) {
        fulmen_error_free(e);
        printf("gpu_graph_check: CUDA is not available on this machine (fulmen %s): skipped\n", fulmen_version());
        rmdir(work);
        return 77;
    }
    test_graphed_as_eager("32-true");
    test_graphed_as_eager("bf16-mixed");
    test_graphed_as_eager("16-mixed");
    test_replays_do_not_sync();
    test_graphed_logs_and_validation("32-true");
    test_graphed_logs_and_validation("bf16-mixed");
    test_graphed_predict();
    test_graphed_resume();
    test_refusal();
    measure();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (check_failed == 0 && system(cmd) != 0) fprintf(stderr, "gpu_graph_check: could not remove %s\n", work);
    return check_finish("gpu_graph_check");
}

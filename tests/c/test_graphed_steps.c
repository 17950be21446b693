/*
 * Graphed training steps (the trainer option cuda_graphs) on the fake
 * device, whose capture records device work and replays it as a CUDA graph
 * does: a graphed fit trains as an eager one (per-step losses and weights
 * within 1e-6), calls training_step only to warm up and capture each kind
 * of step, waits for the device no more than an eager one, resumes exactly
 * from its checkpoints, and refuses what a graph cannot replay.
 */
#define _XOPEN_SOURCE 700
#include "check.h"
#include "fixture.h"
#include "npu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char work[256];

enum { STEP_PLAIN, STEP_READS, STEP_LOGS, STEP_LOGS_AT_8 };
enum { OPT_FUSED_ADAM, OPT_FUSED_SGD, OPT_ADAM };

#define MAX_STEPS 64

typedef struct {
    fulmen_model *model;
    int step_kind;
    int optimizer;
    bool scheduler;       /* a StepLR stepping every 3 steps */
    bool record_losses;   /* read each step's loss in on_train_batch_end */
    bool conv;            /* conv_bn_model rather than the MLP */
    double dropout;       /* the MLP's dropout */
    double scaler_init;   /* > 0: 16-mixed, a loss scaler from this scale (growth every 2 steps) */
    double scale;         /* the loss scale after the fit (16-mixed) */
    int64_t calls;        /* training_step calls */
    double logged;        /* the last epoch's count of steps that logged */
    double losses[MAX_STEPS];
    size_t n_losses;
} graph_ud;

static fulmen_error *graph_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    graph_ud *g = ud;
    g->calls++;
    fulmen_error *e = fixture_cross_entropy(g->model, batch, out);
    double v = 0;
    if (e == NULL && g->step_kind == STEP_READS) e = fulmen_tensor_item(*out, &v);
    int64_t idx = -1;
    if (e == NULL && g->step_kind == STEP_LOGS_AT_8) e = fulmen_step_context_batch_idx(ctx, &idx);
    if (e == NULL && (g->step_kind == STEP_LOGS || idx == 8)) {
        e = fulmen_step_context_log(ctx, "one", 1.0, FULMEN_LOG_ON_STEP, 32);
        /* Counts the steps that logged: a step logged twice shows. */
        if (e == NULL) e = fulmen_step_context_log(ctx, "logged", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 32);
    }
    return e;
}

static fulmen_error *graph_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    graph_ud *g = ud;
    if (hook != FULMEN_HOOK_TRAIN_BATCH_END || !g->record_losses || g->n_losses >= MAX_STEPS) return NULL;
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fulmen_hook_context_output(ctx, &loss);
    if (e == NULL) e = fulmen_tensor_item(loss, &g->losses[g->n_losses++]);
    fulmen_tensor_free(loss);
    return e;
}

static fulmen_error *graph_configure(void *ud, fulmen_optimizer_config *config) {
    graph_ud *g = ud;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = NULL;
    if (g->optimizer == OPT_FUSED_SGD) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(g->model, NULL, 0, &o, &opt);
    } else {
        fulmen_adam_options o = fulmen_adam_options_default();
        o.lr = 0.01;
        e = fulmen_optimizer_adam_new(g->model, NULL, 0, &o, &opt);
    }
    if (e == NULL && g->optimizer != OPT_ADAM) e = fulmen_optimizer_set_fused(opt, true);
    fulmen_scheduler *s = NULL;
    if (e == NULL && g->scheduler) e = fulmen_scheduler_step_lr_new(opt, 3, 0.5, &s);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, s, FULMEN_INTERVAL_STEP, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
    }
    return e;
}

/* Unflatten to (N, 1, 1, 2) -> Conv2d(1, 4, (1, 2)) -> BatchNorm2d(4) ->
 * Tanh -> Flatten -> Linear(4, 2): a convolution (forward and backward) and
 * BatchNorm's running statistics in the step. */
static fulmen_model *conv_bn_model(void) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    const int64_t image[3] = {1, 1, 2};
    CHECK_OK(fulmen_model_unflatten_new(1, image, 3, &l));
    CHECK_OK(fulmen_model_push(m, l));
    fulmen_conv2d_options c = fulmen_conv2d_options_default(1);
    c.kernel[1] = 2;
    CHECK_OK(fulmen_model_conv2d_new(1, 4, &c, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_batch_norm_new(4, 1e-5, 0.1, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_flatten_new(1, -1, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(4, 2, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

/* What a fit does. */
typedef struct {
    const char *accelerator;
    size_t batches;   /* full batches of 32 */
    size_t tail;      /* rows of a last, smaller batch (0: none) */
    int64_t epochs;
    const char *const (*opts)[2];
    size_t n_opts;
    const char *save; /* checkpoint written after the fit (NULL: none) */
    const char *resume;
} fit_plan;

/* Fits a new MLP (same initial weights every time) as `plan` says, with
 * `g`'s step and optimizer; returns the model, the fit's error in *err,
 * and in *reads how many times the host waited for the fake device. */
static fulmen_model *graph_fit(graph_ud *g, const fit_plan *plan, fulmen_error **err, uint64_t *reads) {
    fulmen_dataset *ds = fixture_blobs(32 * plan->batches + plan->tail, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(13));
    g->model = g->conv ? conv_bn_model() : fixture_mlp(16, g->dropout);
    g->calls = 0;
    g->n_losses = 0;
    fulmen_lightning_module *module = fixture_module_with(g->model, g, graph_step, graph_hook, graph_configure);
    fulmen_trainer_options *o = fixture_options(NULL, plan->epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", plan->accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1000));
    for (size_t i = 0; i < plan->n_opts; i++) CHECK_OK(fulmen_trainer_options_set(o, plan->opts[i][0], plan->opts[i][1]));
    if (g->scaler_init > 0) {
        fulmen_precision *p = NULL;
        CHECK_OK(fulmen_precision_new("16-mixed", &p));
        CHECK_OK(fulmen_precision_set_grad_scaler(p, g->scaler_init, 2.0, 0.5, 2));
        CHECK_OK(fulmen_trainer_options_set_precision(o, p));
        fulmen_precision_free(p);
    }
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    uint64_t before = 0, after = 0;
    CHECK_OK(fulmen_fake_device_host_reads(&before));
    *err = fulmen_trainer_fit(t, module, loader, NULL, plan->resume);
    CHECK_OK(fulmen_fake_device_host_reads(&after));
    if (reads != NULL) *reads = after - before;
    if (*err == NULL && plan->save != NULL) CHECK_OK(fulmen_trainer_save_checkpoint(t, module, plan->save, false));
    g->logged = -1;
    g->scale = 0;
    if (*err == NULL && g->scaler_init > 0) CHECK_OK(fulmen_trainer_grad_scale(t, &g->scale));
    if (*err == NULL && g->step_kind != STEP_PLAIN && g->step_kind != STEP_READS)
        CHECK_OK(fulmen_trainer_callback_metric(t, "logged", &g->logged));
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return g->model;
}

/* graph_fit that must succeed. */
static fulmen_model *fit_ok(graph_ud *g, const fit_plan *plan) {
    fulmen_error *e = NULL;
    fulmen_model *m = graph_fit(g, plan, &e, NULL);
    CHECK_OK(e);
    return m;
}

static const char *const GRAPHS[][2] = {{"cuda_graphs", "true"}};

/* Graphed and eager fits of one kind of run agree step by step; the
 * graphed one calls training_step `calls` times. */
static void expect_graphed_as_eager(const char *name, graph_ud proto, fit_plan plan, int64_t calls) {
    graph_ud eager = proto, graphed = proto;
    eager.record_losses = graphed.record_losses = true;
    fulmen_model *a = fit_ok(&eager, &plan);
    const char *opts[8][2];
    for (size_t i = 0; i < plan.n_opts; i++) {
        opts[i][0] = plan.opts[i][0];
        opts[i][1] = plan.opts[i][1];
    }
    opts[plan.n_opts][0] = "cuda_graphs";
    opts[plan.n_opts][1] = "true";
    fit_plan with = plan;
    with.opts = (const char *const (*)[2])opts;
    with.n_opts = plan.n_opts + 1;
    fulmen_model *b = fit_ok(&graphed, &with);
    double worst = 0;
    for (size_t i = 0; i < eager.n_losses && i < graphed.n_losses; i++) {
        double d = fabs(eager.losses[i] - graphed.losses[i]);
        if (!(d <= worst)) worst = d;
    }
    double weights = fixture_max_diff(a, b);
    /* 16-mixed: the same loss scale, after some steps were skipped. */
    bool scaled = proto.scaler_init == 0 || (eager.scale > 0 && eager.scale < proto.scaler_init);
    bool ok = eager.n_losses == graphed.n_losses && eager.n_losses > 0 && worst <= 1e-6 && weights <= 1e-6 &&
              graphed.calls == calls && eager.scale == graphed.scale && scaled;
    if (!ok) {
        fprintf(stderr,
                "%s: %zu / %zu steps, loss diff %g, weight diff %g, %lld training_step calls (expected %lld), loss "
                "scale %g / %g\n",
                name, eager.n_losses, graphed.n_losses, worst, weights, (long long)graphed.calls, (long long)calls,
                eager.scale, graphed.scale);
    }
    CHECK(ok);
    fulmen_model_free(a);
    fulmen_model_free(b);
}

static void test_graphed_as_eager(void) {
    graph_ud adam = {0};
    adam.optimizer = OPT_FUSED_ADAM;
    fit_plan plan = {"npu", 8, 0, 2, NULL, 0, NULL, NULL};
    /* One kind of step: 3 warm-up calls and the capture; 12 replays. */
    expect_graphed_as_eager("adam", adam, plan, 4);
    /* The smaller last batch of each epoch is another kind, which never
     * gets past its warm-up (two of them). */
    fit_plan tail = plan;
    tail.tail = 8;
    expect_graphed_as_eager("smaller last batch", adam, tail, 6);
    /* Accumulation: a window's first and second batches differ. */
    const char *const acc[][2] = {{"accumulate_grad_batches", "2"}};
    fit_plan accumulate = {"npu", 8, 0, 2, acc, 1, NULL, NULL};
    expect_graphed_as_eager("accumulate_grad_batches 2", adam, accumulate, 8);
    const char *const clip[][2] = {{"gradient_clip_val", "0.05"}};
    fit_plan clipped = {"npu", 8, 0, 2, clip, 1, NULL, NULL};
    expect_graphed_as_eager("gradient_clip_val", adam, clipped, 4);
    const char *const bf16[][2] = {{"precision", "bf16-mixed"}};
    fit_plan mixed = {"npu", 8, 0, 2, bf16, 1, NULL, NULL};
    expect_graphed_as_eager("bf16-mixed", adam, mixed, 4);
    /* A scheduler halves the learning rate every 3 steps: the replays
     * read it on the device. */
    graph_ud scheduled = adam;
    scheduled.scheduler = true;
    expect_graphed_as_eager("StepLR", scheduled, plan, 4);
    graph_ud sgd = {0};
    sgd.optimizer = OPT_FUSED_SGD;
    expect_graphed_as_eager("sgd momentum", sgd, plan, 4);
    /* A convolution and BatchNorm (its running statistics compared too),
     * in bf16-mixed; the fake device's eager fit is the CPU's. */
    graph_ud conv = sgd;
    conv.conv = true;
    expect_graphed_as_eager("conv and batch norm", conv, plan, 4);
    expect_graphed_as_eager("conv and batch norm, bf16-mixed", conv, mixed, 4);
    /* 16-mixed: the loss scaler starts at 2^24, so that the float16
     * gradients overflow, and grows every 2 clean steps, so that they
     * overflow again and again: steps skipped in the replays too, on the
     * device (the fused updates take the scaler's inf check there). */
    graph_ud fp16 = adam;
    fp16.scaler_init = 16777216.0;
    expect_graphed_as_eager("16-mixed, Adam", fp16, plan, 4);
    fp16.optimizer = OPT_FUSED_SGD;
    expect_graphed_as_eager("16-mixed, SGD momentum, clipped", fp16, clipped, 4);
    graph_ud on_cpu = conv, on_npu = conv;
    fit_plan cpu_plan = plan;
    cpu_plan.accelerator = "cpu";
    fulmen_model *a = fit_ok(&on_cpu, &cpu_plan), *b = fit_ok(&on_npu, &plan);
    CHECK(fixture_max_diff(a, b) <= 1e-6);
    fulmen_model_free(a);
    fulmen_model_free(b);
}

/* Replays wait for the device no more than eager steps: the host reads of
 * a 12-step fit are those of a 6-step one, in 32-true and in 16-mixed. */
static void test_no_host_waits(void) {
    for (int fp16 = 0; fp16 < 2; fp16++) {
        graph_ud g = {0};
        g.optimizer = OPT_FUSED_ADAM;
        g.scaler_init = fp16 ? 16777216.0 : 0;
        fulmen_error *e = NULL;
        uint64_t few = 0, many = 0;
        fit_plan six = {"npu", 6, 0, 1, GRAPHS, 1, NULL, NULL};
        fulmen_model_free(graph_fit(&g, &six, &e, &few));
        CHECK_OK(e);
        fit_plan twelve = {"npu", 12, 0, 1, GRAPHS, 1, NULL, NULL};
        fulmen_model_free(graph_fit(&g, &twelve, &e, &many));
        CHECK_OK(e);
        if (few != many)
            fprintf(stderr, "graphed%s: %llu host reads in 6 steps, %llu in 12\n", fp16 ? " 16-mixed" : "",
                    (unsigned long long)few, (unsigned long long)many);
        CHECK(few == many);
    }
}

/* A graphed fit stopped after one epoch and resumed from its checkpoint
 * ends where an uninterrupted one does: the optimizer's step counts and
 * the loop's progress were kept on the host for every replay. */
static void test_resume_exact(void) {
    for (int fp16 = 0; fp16 < 2; fp16++) {
        char path[300];
        snprintf(path, sizeof path, "%s/one-epoch-%d.ckpt", work, fp16);
        graph_ud g = {0};
        g.optimizer = OPT_FUSED_ADAM;
        g.scheduler = true;
        /* 16-mixed: the loss scale and the step counts of steps skipped on
         * the device are saved from the device. */
        g.scaler_init = fp16 ? 16777216.0 : 0;
        fit_plan whole = {"npu", 8, 0, 2, GRAPHS, 1, NULL, NULL};
        fulmen_model *uninterrupted = fit_ok(&g, &whole);
        double scale = g.scale;
        fit_plan first = {"npu", 8, 0, 1, GRAPHS, 1, path, NULL};
        fulmen_model_free(fit_ok(&g, &first));
        fit_plan rest = {"npu", 8, 0, 2, GRAPHS, 1, NULL, path};
        fulmen_model *resumed = fit_ok(&g, &rest);
        double diff = fixture_max_diff(uninterrupted, resumed);
        if (diff != 0 || g.scale != scale)
            fprintf(stderr, "graphed resume%s: max weight diff %g, loss scale %g / %g\n", fp16 ? " 16-mixed" : "", diff,
                    scale, g.scale);
        CHECK(diff == 0 && g.scale == scale);
        fulmen_model_free(uninterrupted);
        fulmen_model_free(resumed);
    }
}

/* A graphed fit of `g` with `opts` fails with `code` and `text`. */
static void expect_refused(graph_ud g, const char *accelerator, const char *const (*opts)[2], size_t n, int32_t code,
                           const char *text) {
    fit_plan plan = {accelerator, 8, 0, 1, opts, n, NULL, NULL};
    fulmen_error *e = NULL;
    fulmen_model_free(graph_fit(&g, &plan, &e, NULL));
    CHECK_ERR(e, code, text);
}

static void test_refusals(void) {
    graph_ud adam = {0};
    adam.optimizer = OPT_FUSED_ADAM;
    graph_ud unfused = adam;
    unfused.optimizer = OPT_ADAM;
    expect_refused(unfused, "npu", GRAPHS, 1, FULMEN_CODE_UNSUPPORTED, "without fused updates");
    expect_refused(adam, "cpu", GRAPHS, 1, FULMEN_CODE_UNSUPPORTED, "device graphs capture CUDA devices");
    /* 16-mixed captures with fused updates only, as every graphed step. */
    const char *const fp16[][2] = {{"cuda_graphs", "true"}, {"precision", "16-mixed"}};
    expect_refused(unfused, "npu", fp16, 2, FULMEN_CODE_UNSUPPORTED, "without fused updates");
    const char *const anomaly[][2] = {{"cuda_graphs", "true"}, {"detect_anomaly", "true"}};
    expect_refused(adam, "npu", anomaly, 2, FULMEN_CODE_UNSUPPORTED, "detect_anomaly");
    /* A value read inside the step: CUDA's own refusal, at the capture. */
    graph_ud reads = adam;
    reads.step_kind = STEP_READS;
    expect_refused(reads, "npu", GRAPHS, 1, FULMEN_CODE_UNSUPPORTED, "stream is capturing");
    graph_ud logs = adam;
    logs.step_kind = STEP_LOGS;
    expect_refused(logs, "npu", GRAPHS, 1, FULMEN_CODE_UNSUPPORTED, "logged a value while it was captured");
    const char *const steps[][2] = {{"cuda_graphs_warmup_steps", "0"}};
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_ERR(fulmen_trainer_options_set(o, steps[0][0], steps[0][1]), FULMEN_CODE_INVALID_ARGUMENT, "1..=1000");
    fulmen_trainer_options_free(o);
}

/* Fits a resumed from `path` for one more epoch (3 in all), eagerly. */
static fulmen_model *resume_eagerly(const char *path) {
    graph_ud g = {0};
    g.optimizer = OPT_FUSED_ADAM;
    fit_plan plan = {"npu", 8, 0, 3, NULL, 0, NULL, path};
    return fit_ok(&g, &plan);
}

/* With cuda_graphs_fallback a step that cannot be captured runs eagerly:
 * the fit ends as an eager one, training_step called for every step plus
 * the failed capture. A step that reads its loss fails inside the
 * capture; one that logs is refused after its capture, whose optimizer
 * step counts are put back: resumed from its checkpoint, the fit goes on
 * as the eager one resumed from its own (Adam's bias correction reads the
 * counts). */
static void expect_fallback(int step_kind) {
    char eager_ckpt[300], graphed_ckpt[300];
    snprintf(eager_ckpt, sizeof eager_ckpt, "%s/eager-%d.ckpt", work, step_kind);
    snprintf(graphed_ckpt, sizeof graphed_ckpt, "%s/fallback-%d.ckpt", work, step_kind);
    graph_ud eager = {0};
    eager.optimizer = OPT_FUSED_ADAM;
    eager.step_kind = step_kind;
    graph_ud graphed = eager;
    fit_plan plain = {"npu", 8, 0, 2, NULL, 0, eager_ckpt, NULL};
    fulmen_model *a = fit_ok(&eager, &plain);
    const char *const opts[][2] = {{"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}};
    fit_plan fallback = {"npu", 8, 0, 2, opts, 2, graphed_ckpt, NULL};
    fulmen_model *b = fit_ok(&graphed, &fallback);
    double diff = fixture_max_diff(a, b);
    if (diff > 1e-6 || graphed.calls != 17) {
        fprintf(stderr, "fallback %d: weight diff %g, %lld calls\n", step_kind, diff, (long long)graphed.calls);
    }
    CHECK(diff <= 1e-6);
    CHECK(graphed.calls == 17);
    CHECK(graphed.logged == eager.logged);
    if (step_kind == STEP_LOGS) {
        /* In one epoch the refused capture's logs were taken back: each
         * of the 8 steps logged once, the captured one too. */
        graph_ud once = eager, fell_back = eager;
        fit_plan one = {"npu", 8, 0, 1, NULL, 0, NULL, NULL};
        fulmen_model_free(fit_ok(&once, &one));
        fit_plan one_fallback = {"npu", 8, 0, 1, opts, 2, NULL, NULL};
        fulmen_model_free(fit_ok(&fell_back, &one_fallback));
        if (once.logged != 8 || fell_back.logged != 8)
            fprintf(stderr, "fallback: %g and %g steps logged, not 8\n", once.logged, fell_back.logged);
        CHECK(once.logged == 8 && fell_back.logged == 8);
    }
    fulmen_model *c = resume_eagerly(eager_ckpt), *d = resume_eagerly(graphed_ckpt);
    double resumed = fixture_max_diff(c, d);
    if (resumed > 1e-6) fprintf(stderr, "fallback %d: resumed weight diff %g\n", step_kind, resumed);
    CHECK(resumed <= 1e-6);
    fulmen_model *all[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) fulmen_model_free(all[i]);
}

/* A failed capture of one kind of step (the smaller last batch, which
 * logs) leaves the graph of another (the full batches) replaying: its
 * optimizer state tensors are those it captured. */
static void test_failed_capture_keeps_graphs(void) {
    graph_ud eager = {0};
    eager.optimizer = OPT_FUSED_ADAM;
    eager.step_kind = STEP_LOGS_AT_8;
    graph_ud graphed = eager;
    fit_plan plain = {"npu", 8, 8, 3, NULL, 0, NULL, NULL};
    fulmen_model *a = fit_ok(&eager, &plain);
    const char *const opts[][2] = {
        {"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}, {"cuda_graphs_warmup_steps", "1"}};
    fit_plan fallback = {"npu", 8, 8, 3, opts, 3, NULL, NULL};
    fulmen_model *b = fit_ok(&graphed, &fallback);
    double diff = fixture_max_diff(a, b);
    /* Full batches: 1 warm-up and the capture; the last batch: epoch 0
     * eager, epoch 1 a failed capture and its eager run, epoch 2 eager. */
    if (diff > 1e-6 || graphed.calls != 6) {
        fprintf(stderr, "failed capture: weight diff %g, %lld calls\n", diff, (long long)graphed.calls);
    }
    CHECK(diff <= 1e-6);
    CHECK(graphed.calls == 6);
    fulmen_model_free(a);
    fulmen_model_free(b);
}

/* With dropout: the refused capture drew masks (the fake device runs the
 * step), and the generator is put back, so its eager run draws what an
 * eager fit draws. */
static void test_fallback_draws_as_eager(void) {
    graph_ud eager = {0};
    eager.optimizer = OPT_FUSED_ADAM;
    eager.step_kind = STEP_LOGS;
    eager.dropout = 0.5;
    graph_ud graphed = eager;
    fit_plan plain = {"npu", 8, 0, 1, NULL, 0, NULL, NULL};
    fulmen_model *a = fit_ok(&eager, &plain);
    const char *const opts[][2] = {{"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}};
    fit_plan fallback = {"npu", 8, 0, 1, opts, 2, NULL, NULL};
    fulmen_model *b = fit_ok(&graphed, &fallback);
    double diff = fixture_max_diff(a, b);
    if (diff > 1e-6) fprintf(stderr, "fallback with dropout: weight diff %g\n", diff);
    CHECK(diff <= 1e-6);
    fulmen_model_free(a);
    fulmen_model_free(b);
}

static void test_fallback(void) {
    expect_fallback(STEP_READS);
    expect_fallback(STEP_LOGS);
    test_fallback_draws_as_eager();
    test_failed_capture_keeps_graphs();
}

int main(void) {
    snprintf(work, sizeof work, "/tmp/fulmen-graphed.XXXXXX");
    if (mkdtemp(work) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    /* Before anything else touches the device: process-wide. */
    CHECK_OK(fulmen_fake_device_register("npu", 2));
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    CHECK_OK(fulmen_accelerator_register("npu", "the fake PrivateUse1 device", &vt, false));
    test_graphed_as_eager();
    test_no_host_waits();
    test_resume_exact();
    test_refusals();
    test_fallback();
    CHECK_OK(fulmen_accelerator_unregister("npu"));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work);
    return check_finish("test_graphed_steps");
}

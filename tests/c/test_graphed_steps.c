/*
 * Graphed training, validation, test and predict steps (the trainer option
 * cuda_graphs) on the fake device, whose capture records device work and
 * replays it as a CUDA graph does: a graphed fit trains as an eager one
 * (per-step losses, logged tensors and weights within 1e-6), calls its
 * steps only to warm up and capture each kind of step, waits for the
 * device no more than an eager one, resumes exactly from its checkpoints,
 * and refuses what a graph cannot replay.
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

enum { STEP_PLAIN, STEP_READS, STEP_LOGS, STEP_LOGS_AT_8, STEP_LOGS_TENSOR };
/* What validation_step and test_step log: nothing (no such steps), the
 * loss as tensors, or a number too. */
enum { EVAL_NONE, EVAL_TENSORS, EVAL_NUMBER };
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
    int eval_kind;
    int64_t eval_calls;   /* validation_step and test_step calls */
    double eval_losses[MAX_STEPS]; /* each validation batch's output, read in on_validation_batch_end */
    size_t n_eval_losses;
    /* After the fit: loss_step, loss_epoch, loss_sum and twice
     * (STEP_LOGS_TENSOR); val_loss, val_sum and one (EVAL_NUMBER); after the
     * test run: test_loss. */
    double metrics[8];
} graph_ud;

enum { N_METRICS = 8 };
static const char *const METRICS[N_METRICS] = {"loss_step", "loss_epoch", "loss_sum", "twice",
                                               "val_loss",  "val_sum",    "one",      "test_loss"};

static fulmen_error *graph_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    graph_ud *g = ud;
    g->calls++;
    fulmen_error *e = fixture_cross_entropy(g->model, batch, out);
    double v = 0;
    if (e == NULL && g->step_kind == STEP_READS) e = fulmen_tensor_item(*out, &v);
    int64_t idx = -1;
    if (e == NULL && g->step_kind == STEP_LOGS_AT_8) e = fulmen_step_context_batch_idx(ctx, &idx);
    if (e == NULL && g->step_kind == STEP_LOGS_TENSOR) {
        /* The loss as a device tensor: logged again after every replay. */
        e = fulmen_step_context_log_tensor(ctx, "loss", *out, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
        if (e == NULL)
            e = fulmen_step_context_log_tensor(ctx, "loss_sum", *out, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
        /* A name logged twice in a step: its step value is the mean of
         * both (the batch's chunks), in a replay too. */
        fulmen_tensor *triple = NULL;
        if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "twice", *out, FULMEN_LOG_ON_STEP, 0);
        if (e == NULL) e = fulmen_tensor_mul_scalar(*out, 3.0, &triple);
        if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "twice", triple, FULMEN_LOG_ON_STEP, 0);
        fulmen_tensor_free(triple);
    }
    if (e == NULL && (g->step_kind == STEP_LOGS || idx == 8)) {
        e = fulmen_step_context_log(ctx, "one", 1.0, FULMEN_LOG_ON_STEP, 32);
        /* Counts the steps that logged: a step logged twice shows. */
        if (e == NULL) e = fulmen_step_context_log(ctx, "logged", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 32);
    }
    return e;
}

/* validation_step and test_step: the loss, logged as tensors (the test's
 * as test_loss), and the output. */
static fulmen_error *graph_eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                     fulmen_tensor **out) {
    graph_ud *g = ud;
    g->eval_calls++;
    int32_t stage = 0;
    fulmen_error *e = fulmen_step_context_stage(ctx, &stage);
    if (e == NULL) e = fixture_cross_entropy(g->model, batch, out);
    /* Counts the batches that logged: a batch logged twice shows. */
    if (e == NULL && g->eval_kind == EVAL_NUMBER)
        e = fulmen_step_context_log(ctx, "one", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
    bool test = stage == FULMEN_STAGE_TEST;
    if (e == NULL) e = fulmen_step_context_log_tensor(ctx, test ? "test_loss" : "val_loss", *out, FULMEN_LOG_ON_EPOCH, 0);
    if (e == NULL && !test)
        e = fulmen_step_context_log_tensor(ctx, "val_sum", *out, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
    return e;
}

/* Reads the output of a batch-end hook into the next of `values`. */
static fulmen_error *read_output(fulmen_hook_context *ctx, double *values, size_t *n) {
    if (*n >= MAX_STEPS) return NULL;
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fulmen_hook_context_output(ctx, &loss);
    if (e == NULL) e = fulmen_tensor_item(loss, &values[(*n)++]);
    fulmen_tensor_free(loss);
    return e;
}

static fulmen_error *graph_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    graph_ud *g = ud;
    if (!g->record_losses) return NULL;
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END) return read_output(ctx, g->losses, &g->n_losses);
    if (hook == FULMEN_HOOK_VALIDATION_BATCH_END) return read_output(ctx, g->eval_losses, &g->n_eval_losses);
    return NULL;
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
    size_t val_batches; /* batches of 32 to validate on each epoch (0: none) */
    bool test;          /* a test run on those batches after the fit */
} fit_plan;

/* Fits a new MLP (same initial weights every time) as `plan` says, with
 * `g`'s step and optimizer; returns the model, the fit's error in *err,
 * and in *reads how many times the host waited for the fake device. */
static fulmen_model *graph_fit(graph_ud *g, const fit_plan *plan, fulmen_error **err, uint64_t *reads) {
    fulmen_dataset *ds = fixture_blobs(32 * plan->batches + plan->tail, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(13));
    g->model = g->conv ? conv_bn_model() : fixture_mlp(16, g->dropout);
    g->calls = g->eval_calls = 0;
    g->n_losses = g->n_eval_losses = 0;
    fulmen_lightning_module *module = fixture_module_with_eval(
        g->model, g, graph_step, g->eval_kind != EVAL_NONE ? graph_eval_step : NULL, graph_hook, graph_configure);
    fulmen_dataset *val_ds = plan->val_batches > 0 ? fixture_blobs(32 * plan->val_batches, 8, 2.0f) : NULL;
    fulmen_loader *val = val_ds != NULL ? fixture_loader(val_ds, 32, false, 0) : NULL;
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
    *err = fulmen_trainer_fit(t, module, loader, val, plan->resume);
    for (size_t i = 0; i < N_METRICS; i++) g->metrics[i] = NAN;
    /* The fit's values, then the test run's (which replaces them). */
    for (size_t i = 0; i + 1 < N_METRICS; i++) {
        bool wanted = i < 4 ? g->step_kind == STEP_LOGS_TENSOR
                            : plan->val_batches > 0 && (i < 6 || g->eval_kind == EVAL_NUMBER);
        if (*err == NULL && wanted) CHECK_OK(fulmen_trainer_callback_metric(t, METRICS[i], &g->metrics[i]));
    }
    if (*err == NULL && plan->test) *err = fulmen_trainer_test(t, module, val, NULL);
    if (*err == NULL && plan->test)
        CHECK_OK(fulmen_trainer_callback_metric(t, METRICS[N_METRICS - 1], &g->metrics[N_METRICS - 1]));
    CHECK_OK(fulmen_fake_device_host_reads(&after));
    if (reads != NULL) *reads = after - before;
    if (*err == NULL && plan->save != NULL) CHECK_OK(fulmen_trainer_save_checkpoint(t, module, plan->save, false));
    g->logged = -1;
    g->scale = 0;
    if (*err == NULL && g->scaler_init > 0) CHECK_OK(fulmen_trainer_grad_scale(t, &g->scale));
    if (*err == NULL && (g->step_kind == STEP_LOGS || g->step_kind == STEP_LOGS_AT_8))
        CHECK_OK(fulmen_trainer_callback_metric(t, "logged", &g->logged));
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_loader_free(val);
    fulmen_dataset_free(val_ds);
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

/* The largest difference between `n` values of `a` and `b` (NaN when they
 * differ in being NaN). */
static double max_diff(const double *a, const double *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        double d = fabs(a[i] - b[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* Graphed and eager fits of one kind of run agree step by step (losses,
 * validation outputs, logged values, weights); the graphed one calls
 * training_step `calls` times and the evaluation steps `eval_calls` times
 * (-1: any). */
static void expect_graphed_as_eager_eval(const char *name, graph_ud proto, fit_plan plan, int64_t calls,
                                         int64_t eval_calls) {
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
    size_t n = eager.n_losses < graphed.n_losses ? eager.n_losses : graphed.n_losses;
    double worst = max_diff(eager.losses, graphed.losses, n);
    size_t n_eval = eager.n_eval_losses < graphed.n_eval_losses ? eager.n_eval_losses : graphed.n_eval_losses;
    double eval = max_diff(eager.eval_losses, graphed.eval_losses, n_eval);
    double metrics = max_diff(eager.metrics, graphed.metrics, N_METRICS);
    bool eval_ok = eager.n_eval_losses == graphed.n_eval_losses && eval <= 1e-6 && metrics <= 1e-6 &&
                   (eval_calls < 0 || graphed.eval_calls == eval_calls);
    double weights = fixture_max_diff(a, b);
    /* 16-mixed: the same loss scale, after some steps were skipped. */
    bool scaled = proto.scaler_init == 0 || (eager.scale > 0 && eager.scale < proto.scaler_init);
    bool ok = eager.n_losses == graphed.n_losses && eager.n_losses > 0 && worst <= 1e-6 && weights <= 1e-6 &&
              graphed.calls == calls && eager.scale == graphed.scale && scaled && eval_ok;
    if (!eval_ok)
        fprintf(stderr,
                "%s: %zu / %zu validation outputs, diff %g, logged values diff %g, %lld evaluation step calls "
                "(expected %lld)\n",
                name, eager.n_eval_losses, graphed.n_eval_losses, eval, metrics, (long long)graphed.eval_calls,
                (long long)eval_calls);
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

static void expect_graphed_as_eager(const char *name, graph_ud proto, fit_plan plan, int64_t calls) {
    expect_graphed_as_eager_eval(name, proto, plan, calls, -1);
}

static void test_graphed_as_eager(void) {
    graph_ud adam = {0};
    adam.optimizer = OPT_FUSED_ADAM;
    fit_plan plan = {"npu", 8, 0, 2, NULL, 0, NULL, NULL, 0, false};
    /* One kind of step: 3 warm-up calls and the capture; 12 replays. */
    expect_graphed_as_eager("adam", adam, plan, 4);
    /* The smaller last batch of each epoch is another kind, which never
     * gets past its warm-up (two of them). */
    fit_plan tail = plan;
    tail.tail = 8;
    expect_graphed_as_eager("smaller last batch", adam, tail, 6);
    /* Accumulation: a window's first and second batches differ. */
    const char *const acc[][2] = {{"accumulate_grad_batches", "2"}};
    fit_plan accumulate = {"npu", 8, 0, 2, acc, 1, NULL, NULL, 0, false};
    expect_graphed_as_eager("accumulate_grad_batches 2", adam, accumulate, 8);
    const char *const clip[][2] = {{"gradient_clip_val", "0.05"}};
    fit_plan clipped = {"npu", 8, 0, 2, clip, 1, NULL, NULL, 0, false};
    expect_graphed_as_eager("gradient_clip_val", adam, clipped, 4);
    const char *const bf16[][2] = {{"precision", "bf16-mixed"}};
    fit_plan mixed = {"npu", 8, 0, 2, bf16, 1, NULL, NULL, 0, false};
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

/* A step that logs its loss as a device tensor is captured: each replay
 * logs the graph's new value (the last step's, the epoch's mean and sum
 * equal the eager fit's, each step logged once). Validation and test
 * steps that log tensors are graphed too: forward-only graphs, in the
 * fit's validations and in a test run, whose outputs and logged values
 * are the eager ones. */
static void test_graphed_logs_and_evaluation(void) {
    graph_ud logs = {0};
    logs.optimizer = OPT_FUSED_ADAM;
    logs.step_kind = STEP_LOGS_TENSOR;
    fit_plan plan = {"npu", 8, 0, 2, NULL, 0, NULL, NULL, 0, false};
    expect_graphed_as_eager("logged tensors", logs, plan, 4);
    const char *const bf16[][2] = {{"precision", "bf16-mixed"}};
    fit_plan mixed = plan;
    mixed.opts = bf16;
    mixed.n_opts = 1;
    expect_graphed_as_eager("logged tensors, bf16-mixed", logs, mixed, 4);
    graph_ud eval = logs;
    eval.eval_kind = EVAL_TENSORS;
    /* 6 validation batches per epoch after the sanity check's 2, then a
     * test run of 6: validation warms up in the sanity check and epoch 0's
     * first batch and is captured at its second; the test run (a new run)
     * warms up 3 times and captures the fourth batch. */
    fit_plan validated = plan;
    validated.val_batches = 6;
    validated.test = true;
    expect_graphed_as_eager_eval("validation and test", eval, validated, 4, 8);
    fit_plan validated_mixed = mixed;
    validated_mixed.val_batches = 6;
    expect_graphed_as_eager_eval("validation, bf16-mixed", eval, validated_mixed, 4, 4);
    /* BatchNorm in eval mode reads its running statistics, which the
     * training graph updates in place. */
    graph_ud conv = eval;
    conv.conv = true;
    conv.optimizer = OPT_FUSED_SGD;
    expect_graphed_as_eager_eval("validation, conv and batch norm", conv, validated, 4, 8);
}

/* Fits of `g` as `few` and `many` say wait for the device as often. */
static void expect_same_reads(const char *what, graph_ud g, fit_plan few, fit_plan many) {
    fulmen_error *e = NULL;
    uint64_t reads_few = 0, reads_many = 0;
    fulmen_model_free(graph_fit(&g, &few, &e, &reads_few));
    CHECK_OK(e);
    fulmen_model_free(graph_fit(&g, &many, &e, &reads_many));
    CHECK_OK(e);
    if (reads_few != reads_many)
        fprintf(stderr, "%s: %llu and %llu host reads\n", what, (unsigned long long)reads_few,
                (unsigned long long)reads_many);
    CHECK(reads_few == reads_many);
}

/* Graphed validation waits for the device no more than eager steps: the
 * host reads of fits validating on 6 and 12 batches per epoch are the
 * same (the epoch's values are read at its end). */
static void test_no_host_waits_in_validation(void) {
    graph_ud g = {0};
    g.optimizer = OPT_FUSED_ADAM;
    g.step_kind = STEP_LOGS_TENSOR;
    g.eval_kind = EVAL_TENSORS;
    fit_plan six = {"npu", 6, 0, 1, GRAPHS, 1, NULL, NULL, 6, false};
    fit_plan twelve = {"npu", 6, 0, 1, GRAPHS, 1, NULL, NULL, 12, false};
    expect_same_reads("graphed validation, 6 and 12 batches", g, six, twelve);
}

/* What predict_step does: returns the logits and adds their softmax (a
 * tuple per batch), sets the prediction as a value, or returns zeros made
 * on the host. */
enum { PREDICT_TUPLE, PREDICT_VALUE, PREDICT_HOST };

typedef struct {
    fulmen_model *model;
    int kind;
    int64_t calls;
} predict_ud;

static fulmen_error *graph_predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                        fulmen_tensor **out) {
    predict_ud *p = ud;
    p->calls++;
    fulmen_tensor *x = NULL, *probs = NULL;
    fulmen_value *v = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(p->model, x, out);
    if (e == NULL && p->kind == PREDICT_TUPLE) e = fulmen_tensor_softmax(*out, 1, &probs);
    if (e == NULL && p->kind == PREDICT_TUPLE) e = fulmen_step_context_add_prediction(ctx, probs);
    if (e == NULL && p->kind == PREDICT_VALUE) e = fulmen_value_tensor(*out, &v);
    if (e == NULL && p->kind == PREDICT_VALUE) {
        e = fulmen_step_context_set_prediction(ctx, v);
        *out = NULL;
    }
    const int64_t shape[2] = {32, 2};
    if (e == NULL && p->kind == PREDICT_HOST) e = fulmen_tensor_zeros(shape, 2, FULMEN_DTYPE_F32, out);
    fulmen_value_free(v);
    fulmen_tensor_free(probs);
    return e;
}

/* Predicts 8 batches of 32 on the fake device with a new MLP (the same
 * weights every time), with `opts`; the predictions (a list of one value
 * per batch), the run's error in *err. */
static fulmen_value *predict_all(predict_ud *p, const char *const (*opts)[2], size_t n, fulmen_error **err) {
    fulmen_dataset *ds = fixture_blobs(32 * 8, 9, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, false, 0);
    CHECK_OK(fulmen_manual_seed(13));
    p->model = fixture_mlp(16, 0);
    p->calls = 0;
    fulmen_lightning_module *module = fixture_module_predicting(p->model, p, graph_predict_step);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "npu"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    for (size_t i = 0; i < n; i++) CHECK_OK(fulmen_trainer_options_set(o, opts[i][0], opts[i][1]));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_value *out = NULL;
    const fulmen_loader *loaders[1] = {loader};
    *err = fulmen_trainer_predict_batches(t, module, loaders, 1, NULL, true, &out);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_model_free(p->model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return out;
}

/* Element `i` of a tuple or list value as a CPU tensor (NULL when it is
 * not one). */
static fulmen_tensor *tensor_at(const fulmen_value *v, size_t i) {
    fulmen_value *item = NULL;
    fulmen_tensor *t = NULL, *cpu = NULL;
    fulmen_error *e = fulmen_value_item(v, i, &item);
    if (e == NULL) e = fulmen_value_get_tensor(item, &t);
    if (e == NULL) e = fulmen_tensor_to_device(t, FULMEN_DEVICE_TYPE_CPU, 0, &cpu);
    fulmen_error_free(e);
    fulmen_tensor_free(t);
    fulmen_value_free(item);
    return cpu;
}

/* The largest difference between two lists of per-batch tuples (1e300
 * when their shapes differ). */
static double predictions_diff(const fulmen_value *a, const fulmen_value *b) {
    size_t na = 0, nb = 0;
    CHECK_OK(fulmen_value_len(a, &na));
    CHECK_OK(fulmen_value_len(b, &nb));
    if (na != nb || na == 0) return 1e300;
    double worst = 0;
    for (size_t i = 0; i < na; i++) {
        fulmen_value *ta = NULL, *tb = NULL;
        CHECK_OK(fulmen_value_item(a, i, &ta));
        CHECK_OK(fulmen_value_item(b, i, &tb));
        for (size_t j = 0; j < 2; j++) {
            fulmen_tensor *x = tensor_at(ta, j), *y = tensor_at(tb, j);
            double d = x != NULL && y != NULL ? fixture_tensor_diff(x, y) : 1e300;
            if (!(d <= worst)) worst = d;
            fulmen_tensor_free(x);
            fulmen_tensor_free(y);
        }
        fulmen_value_free(ta);
        fulmen_value_free(tb);
    }
    return worst;
}

/* Predict steps are graphed too: a predict run keeps every batch's
 * prediction (returned and added tensors), each replay's copied, equal to
 * the eager run's; predict_step runs for the warm-up and the capture. A
 * prediction set as a value is refused (eager with cuda_graphs_fallback). */
static void test_graphed_predict(void) {
    predict_ud eager = {0}, graphed = {0};
    fulmen_error *e1 = NULL, *e2 = NULL;
    fulmen_value *a = predict_all(&eager, NULL, 0, &e1);
    fulmen_value *b = predict_all(&graphed, GRAPHS, 1, &e2);
    CHECK_OK(e1);
    CHECK_OK(e2);
    double diff = a != NULL && b != NULL ? predictions_diff(a, b) : 1e300;
    if (diff > 1e-6 || graphed.calls != 4)
        fprintf(stderr, "graphed predict: prediction diff %g, %lld predict_step calls\n", diff, (long long)graphed.calls);
    CHECK(diff <= 1e-6 && eager.calls == 8 && graphed.calls == 4);
    fulmen_value_free(a);
    fulmen_value_free(b);
    predict_ud value = {0};
    value.kind = PREDICT_VALUE;
    fulmen_error *e = NULL;
    fulmen_value_free(predict_all(&value, GRAPHS, 1, &e));
    CHECK_ERR(e, FULMEN_CODE_UNSUPPORTED, "set its whole prediction as a value");
    predict_ud host = {0};
    host.kind = PREDICT_HOST;
    fulmen_value_free(predict_all(&host, GRAPHS, 1, &e));
    CHECK_ERR(e, FULMEN_CODE_UNSUPPORTED, "lies on cpu, not on the graph's device");
    const char *const fallback[][2] = {{"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}};
    fulmen_value *c = predict_all(&value, fallback, 2, &e);
    CHECK_OK(e);
    size_t n = 0;
    if (c != NULL) CHECK_OK(fulmen_value_len(c, &n));
    /* 3 warm-up calls, the refused capture, then 5 eager ones. */
    CHECK(n == 8 && value.calls == 9);
    fulmen_value_free(c);
}

/* Replays wait for the device no more than eager steps: the host reads of
 * a 12-step fit are those of a 6-step one, in 32-true and in 16-mixed. */
static void test_no_host_waits(void) {
    for (int fp16 = 0; fp16 < 2; fp16++) {
        graph_ud g = {0};
        g.optimizer = OPT_FUSED_ADAM;
        g.scaler_init = fp16 ? 16777216.0 : 0;
        fit_plan six = {"npu", 6, 0, 1, GRAPHS, 1, NULL, NULL, 0, false};
        fit_plan twelve = {"npu", 12, 0, 1, GRAPHS, 1, NULL, NULL, 0, false};
        expect_same_reads(fp16 ? "graphed 16-mixed, 6 and 12 steps" : "graphed, 6 and 12 steps", g, six, twelve);
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
        fit_plan whole = {"npu", 8, 0, 2, GRAPHS, 1, NULL, NULL, 0, false};
        fulmen_model *uninterrupted = fit_ok(&g, &whole);
        double scale = g.scale;
        fit_plan first = {"npu", 8, 0, 1, GRAPHS, 1, path, NULL, 0, false};
        fulmen_model_free(fit_ok(&g, &first));
        fit_plan rest = {"npu", 8, 0, 2, GRAPHS, 1, NULL, path, 0, false};
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
    fit_plan plan = {accelerator, 8, 0, 1, opts, n, NULL, NULL, 0, false};
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
    expect_refused(logs, "npu", GRAPHS, 1, FULMEN_CODE_UNSUPPORTED, "logged a number (or a CPU tensor) while");
    /* A validation step that logs a number too. */
    graph_ud eval = adam;
    eval.eval_kind = EVAL_NUMBER;
    fit_plan validated = {"npu", 8, 0, 1, GRAPHS, 1, NULL, NULL, 6, false};
    fulmen_error *e = NULL;
    fulmen_model_free(graph_fit(&eval, &validated, &e, NULL));
    CHECK_ERR(e, FULMEN_CODE_UNSUPPORTED, "validation_step (epoch 0, global step 8, batch 1)");
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
    fit_plan plan = {"npu", 8, 0, 3, NULL, 0, NULL, path, 0, false};
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
    fit_plan plain = {"npu", 8, 0, 2, NULL, 0, eager_ckpt, NULL, 0, false};
    fulmen_model *a = fit_ok(&eager, &plain);
    const char *const opts[][2] = {{"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}};
    fit_plan fallback = {"npu", 8, 0, 2, opts, 2, graphed_ckpt, NULL, 0, false};
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
        fit_plan one = {"npu", 8, 0, 1, NULL, 0, NULL, NULL, 0, false};
        fulmen_model_free(fit_ok(&once, &one));
        fit_plan one_fallback = {"npu", 8, 0, 1, opts, 2, NULL, NULL, 0, false};
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
    fit_plan plain = {"npu", 8, 8, 3, NULL, 0, NULL, NULL, 0, false};
    fulmen_model *a = fit_ok(&eager, &plain);
    const char *const opts[][2] = {
        {"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}, {"cuda_graphs_warmup_steps", "1"}};
    fit_plan fallback = {"npu", 8, 8, 3, opts, 3, NULL, NULL, 0, false};
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
    fit_plan plain = {"npu", 8, 0, 1, NULL, 0, NULL, NULL, 0, false};
    fulmen_model *a = fit_ok(&eager, &plain);
    const char *const opts[][2] = {{"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}};
    fit_plan fallback = {"npu", 8, 0, 1, opts, 2, NULL, NULL, 0, false};
    fulmen_model *b = fit_ok(&graphed, &fallback);
    double diff = fixture_max_diff(a, b);
    if (diff > 1e-6) fprintf(stderr, "fallback with dropout: weight diff %g\n", diff);
    CHECK(diff <= 1e-6);
    fulmen_model_free(a);
    fulmen_model_free(b);
}

/* A validation step that logs a number falls back to eager steps: its
 * logged values are the eager ones, the failed capture's taken back. */
static void test_validation_fallback(void) {
    graph_ud eval = {0};
    eval.optimizer = OPT_FUSED_ADAM;
    eval.eval_kind = EVAL_NUMBER;
    const char *const fallback[][2] = {{"cuda_graphs_fallback", "true"}};
    fit_plan plan = {"npu", 8, 0, 2, fallback, 1, NULL, NULL, 6, false};
    /* The sanity check's 2 and 12 batches, and the failed capture. */
    expect_graphed_as_eager_eval("validation fallback", eval, plan, 4, 15);
    /* The failed capture's count was taken back: each of the last
     * epoch's 6 batches logged once. */
    graph_ud graphed = eval;
    const char *const opts[][2] = {{"cuda_graphs", "true"}, {"cuda_graphs_fallback", "true"}};
    fit_plan one = {"npu", 8, 0, 1, opts, 2, NULL, NULL, 6, false};
    fulmen_model_free(fit_ok(&graphed, &one));
    if (graphed.metrics[6] != 6) fprintf(stderr, "validation fallback: %g batches logged, not 6\n", graphed.metrics[6]);
    CHECK(graphed.metrics[6] == 6);
}

static void test_fallback(void) {
    test_validation_fallback();
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
    test_graphed_logs_and_evaluation();
    test_no_host_waits();
    test_no_host_waits_in_validation();
    test_graphed_predict();
    test_resume_exact();
    test_refusals();
    test_fallback();
    CHECK_OK(fulmen_accelerator_unregister("npu"));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work);
    return check_finish("test_graphed_steps");
}

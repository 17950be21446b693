/*
 * The GPU kit's checks of the optimizers and callbacks that re-evaluate or
 * copy the weights, on cuda:0: LBFGS (strong-Wolfe line search) in a host
 * loop reaching a least-squares minimum as the same loop on the CPU does, LBFGS under the trainer's
 * automatic optimization, and weight averaging (EMA and SWA, whose CUDA
 * update is a lerp): a run resumed from its checkpoint ends as an
 * uninterrupted one, and a never-updated average gives back the starting
 * weights; the batch size finder against real CUDA out-of-memory errors
 * (a 2 -> 2^20 -> 2 MLP whose activations outgrow the GPU); fused AdamW,
 * SGD and Adagrad (torch's fused=True kernels on cuda:0) within float rounding of
 * the same fused steps on the CPU; AdamW, SGD, Adagrad, RMSprop, Adamax,
 * NAdam and RAdam with the default updates (torch's foreach kernels on
 * CUDA) within float rounding of the CPU's for-loop, and, given
 * FULMEN_GPU_TORCH_OPTIM (the folder tests/gpu/torch_cuda_optim.py wrote),
 * the foreach and fused steps against PyTorch's own on cuda:0 from the
 * same weights.
 * Without a GPU
 * it says so and exits with 77 (skipped).
 *
 *   gpu_optim_check [PARENT_DIR]   (checkpoints go to a new folder in
 *                                   PARENT_DIR, default /tmp)
 */
#define _XOPEN_SOURCE 700
#include <fulmen.h>

#include "../c/check.h"
#include "../c/fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char work[512];

/* ----------------------------------------------------- LBFGS, host loop */

typedef struct {
    fulmen_model *model;
    fulmen_tensor *x, *y;
    int calls;
} closure_ud;

/* Mean squared error of y = 3x + 1 on 64 points: a convex problem with
 * one minimum, which the CPU and the GPU must both reach. */
static fulmen_error *mse_closure(void *ud, double *loss) {
    closure_ud *c = ud;
    c->calls++;
    fulmen_tensor *pred = NULL, *l = NULL;
    fulmen_error *e = fulmen_model_forward(c->model, c->x, &pred);
    if (e == NULL) e = fulmen_loss_mse(pred, c->y, FULMEN_REDUCTION_MEAN, &l);
    if (e == NULL) e = fulmen_tensor_backward(l);
    if (e == NULL) e = fulmen_tensor_item(l, loss);
    return e;
}

/* Three LBFGS steps (strong Wolfe) on the line fit, on `device_type`;
 * returns the model (on the CPU), the evaluations made and the loss the
 * fourth step starts from. */
static fulmen_model *lbfgs_run(int32_t device_type, int *evaluations, double *last) {
    float xv[64], yv[64];
    for (int i = 0; i < 64; i++) {
        xv[i] = -1.0f + (float)i * (2.0f / 63.0f);
        yv[i] = 3.0f * xv[i] + 1.0f;
    }
    const int64_t shape[2] = {64, 1};
    fulmen_tensor *x = check_f32(xv, 64, shape, 2), *y = check_f32(yv, 64, shape, 2);
    CHECK_OK(fulmen_manual_seed(3));
    closure_ud c = {NULL, NULL, NULL, 0};
    CHECK_OK(fulmen_model_linear_new(1, 1, true, &c.model));
    CHECK_OK(fulmen_tensor_to_device(x, device_type, 0, &c.x));
    CHECK_OK(fulmen_tensor_to_device(y, device_type, 0, &c.y));
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    CHECK_OK(fulmen_model_to_device(c.model, device_type, 0));
    fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
    o.strong_wolfe = true;
    o.max_iter = 10;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_lbfgs_new(c.model, NULL, 0, &o, &opt));
    for (int i = 0; i < 3; i++) CHECK_OK(fulmen_optimizer_step_closure(opt, mse_closure, &c, NULL));
    double first = 0;
    CHECK_OK(fulmen_optimizer_step_closure(opt, mse_closure, &c, &first));
    *last = first;
    *evaluations = c.calls;
    CHECK_OK(fulmen_model_to_device(c.model, FULMEN_DEVICE_TYPE_CPU, 0));
    fulmen_optimizer_free(opt);
    fulmen_tensor_free(c.x);
    fulmen_tensor_free(c.y);
    return c.model;
}

static void test_lbfgs_host_loop(void) {
    int cpu_evals = 0, gpu_evals = 0;
    double cpu_loss = 0, gpu_loss = 0;
    fulmen_model *cpu = lbfgs_run(FULMEN_DEVICE_TYPE_CPU, &cpu_evals, &cpu_loss);
    fulmen_model *gpu = lbfgs_run(FULMEN_DEVICE_TYPE_CUDA, &gpu_evals, &gpu_loss);
    double diff = fixture_max_diff(cpu, gpu);
    printf("LBFGS (strong Wolfe), 4 steps of a line fit: cpu %d evaluations, loss %.3g; cuda %d evaluations, "
           "loss %.3g; max |cpu - cuda| weight %.3g\n",
           cpu_evals, cpu_loss, gpu_evals, gpu_loss, diff);
    CHECK(gpu_evals > 4);
    CHECK(cpu_loss < 1e-8 && gpu_loss < 1e-8);
    CHECK(diff <= 1e-4);
    fulmen_model_free(cpu);
    fulmen_model_free(gpu);
}

/* ------------------------------------------------- fused updates on cuda */

/* Eight steps of AdamW (kind 0), SGD with momentum (kind 1), Adagrad
 * with lr_decay (kind 2), centered RMSprop with momentum (3), Adamax (4),
 * NAdam with decoupled weight decay (5) or RAdam (6) on a 2-32-2 MLP
 * from the same weights (seeded, or read from `init` when not NULL) and
 * batch on `device_type`, fused or with the default updates (torch's
 * default: foreach on CUDA, the for-loop on the CPU); returns the model on
 * the CPU. */
static fulmen_model *fused_run(int32_t device_type, int kind, bool fused, const char *init) {
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *m = fixture_mlp(32, 0);
    if (init != NULL) CHECK_OK(fulmen_model_load(m, init, true));
    const int64_t shape[2] = {16, 2};
    float xv[32];
    int64_t yv[16];
    for (int i = 0; i < 16; i++) {
        xv[2 * i] = (float)i / 8.0f - 1.0f;
        xv[2 * i + 1] = (float)(i % 5) / 2.0f;
        yv[i] = i % 2;
    }
    fulmen_tensor *x0 = check_f32(xv, 32, shape, 2), *y0 = NULL, *x = NULL, *y = NULL;
    const int64_t yshape[1] = {16};
    CHECK_OK(fulmen_tensor_from_data(yv, sizeof yv, FULMEN_DTYPE_I64, yshape, 1, &y0));
    CHECK_OK(fulmen_tensor_to_device(x0, device_type, 0, &x));
    CHECK_OK(fulmen_tensor_to_device(y0, device_type, 0, &y));
    CHECK_OK(fulmen_model_to_device(m, device_type, 0));
    fulmen_optimizer *opt = NULL;
    if (kind == 0) {
        fulmen_adam_options o = fulmen_adamw_options_default();
        o.lr = 0.01;
        CHECK_OK(fulmen_optimizer_adamw_new(m, NULL, 0, &o, &opt));
    } else if (kind == 1) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        CHECK_OK(fulmen_optimizer_sgd_new(m, NULL, 0, &o, &opt));
    } else if (kind == 2) {
        fulmen_adagrad_options o = fulmen_adagrad_options_default();
        o.lr = 0.05;
        o.lr_decay = 0.01;
        CHECK_OK(fulmen_optimizer_adagrad_new(m, NULL, 0, &o, &opt));
    } else if (kind == 3) {
        fulmen_rmsprop_options o = fulmen_rmsprop_options_default();
        o.momentum = 0.9;
        o.centered = true;
        CHECK_OK(fulmen_optimizer_rmsprop_new(m, NULL, 0, &o, &opt));
    } else if (kind == 4) {
        fulmen_adamax_options o = fulmen_adamax_options_default();
        o.weight_decay = 0.01;
        CHECK_OK(fulmen_optimizer_adamax_new(m, NULL, 0, &o, &opt));
    } else if (kind == 5) {
        fulmen_nadam_options o = fulmen_nadam_options_default();
        o.weight_decay = 0.01;
        o.decoupled_weight_decay = true;
        CHECK_OK(fulmen_optimizer_nadam_new(m, NULL, 0, &o, &opt));
    } else {
        fulmen_radam_options o = fulmen_radam_options_default();
        o.lr = 0.01;
        CHECK_OK(fulmen_optimizer_radam_new(m, NULL, 0, &o, &opt));
    }
    CHECK_OK(fulmen_optimizer_set_fused(opt, fused));
    for (int step = 0; step < 8; step++) {
        fulmen_tensor *logits = NULL, *loss = NULL;
        CHECK_OK(fulmen_optimizer_zero_grad(opt));
        CHECK_OK(fulmen_model_forward(m, x, &logits));
        CHECK_OK(fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, &loss));
        CHECK_OK(fulmen_tensor_backward(loss));
        CHECK_OK(fulmen_optimizer_step(opt));
        fulmen_tensor_free(logits);
        fulmen_tensor_free(loss);
    }
    CHECK_OK(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_CPU, 0));
    fulmen_optimizer_free(opt);
    fulmen_tensor_free(x0);
    fulmen_tensor_free(y0);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    return m;
}

/* Compares `kinds` runs on cuda:0 (fused or the default updates) from
 * the weights torch_cuda_optim.py saved in FULMEN_GPU_TORCH_OPTIM with
 * PyTorch's own, `<prefix>_<kind>.pt` there. */
static void compare_with_torch(const char *prefix, bool fused, int kinds, const char *const *names) {
    const char *dir = getenv("FULMEN_GPU_TORCH_OPTIM");
    if (dir == NULL) {
        printf("%s against PyTorch on cuda: FULMEN_GPU_TORCH_OPTIM not set, not compared\n", prefix);
        return;
    }
    char init[600], path[600];
    snprintf(init, sizeof init, "%s/init.pt", dir);
    int identical = 0;
    for (int kind = 0; kind < kinds; kind++) {
        fulmen_model *gpu = fused_run(FULMEN_DEVICE_TYPE_CUDA, kind, fused, init);
        fulmen_model *torch = fixture_mlp(32, 0);
        snprintf(path, sizeof path, "%s/%s_%d.pt", dir, prefix, kind);
        CHECK_OK(fulmen_model_load(torch, path, true));
        double diff = fixture_max_diff(gpu, torch);
        printf("%s %s on cuda vs PyTorch's on cuda, 8 steps: max |fulmen - torch| weight %.3g\n",
               fused ? "fused" : "foreach", names[kind], diff);
        CHECK(diff <= 1e-6);
        identical += diff == 0;
        fulmen_model_free(gpu);
        fulmen_model_free(torch);
    }
    printf("%s against PyTorch on cuda: %d of %d optimizers bit-identical\n", fused ? "fused" : "foreach", identical,
           kinds);
}

static void test_fused_updates(void) {
    const char *names[3] = {"AdamW", "SGD (momentum 0.9)", "Adagrad (lr_decay 0.01)"};
    for (int kind = 0; kind < 3; kind++) {
        fulmen_model *cpu = fused_run(FULMEN_DEVICE_TYPE_CPU, kind, true, NULL);
        fulmen_model *gpu = fused_run(FULMEN_DEVICE_TYPE_CUDA, kind, true, NULL);
        double diff = fixture_max_diff(cpu, gpu);
        printf("fused %s, 8 steps: max |cpu - cuda| weight %.3g\n", names[kind], diff);
        CHECK(diff <= 1e-4);
        fulmen_model_free(cpu);
        fulmen_model_free(gpu);
    }
    compare_with_torch("fused", true, 3, names);
}

/* The default updates of every kind with foreach updates: torch's foreach
 * kernels on CUDA (FULMEN_FOREACH_DEFAULT), within float rounding of the
 * CPU's for-loop. */
static void test_foreach_updates(void) {
    const char *names[7] = {"AdamW", "SGD (momentum 0.9)", "Adagrad (lr_decay 0.01)", "RMSprop (centered, momentum)",
                            "Adamax", "NAdam (decoupled)", "RAdam"};
    for (int kind = 0; kind < 7; kind++) {
        fulmen_model *cpu = fused_run(FULMEN_DEVICE_TYPE_CPU, kind, false, NULL);
        fulmen_model *gpu = fused_run(FULMEN_DEVICE_TYPE_CUDA, kind, false, NULL);
        double diff = fixture_max_diff(cpu, gpu);
        printf("foreach %s on cuda vs for-loop on cpu, 8 steps: max |cpu - cuda| weight %.3g\n", names[kind], diff);
        CHECK(diff <= 1e-4);
        fulmen_model_free(cpu);
        fulmen_model_free(gpu);
    }
    /* PyTorch's own steps on cuda:0 (torch_cuda_optim.py, same kinds and
     * options) from the weights it saved. */
    compare_with_torch("optim", false, 7, names);
}

/* --------------------------------------------------- the trainer on cuda */

typedef struct {
    fulmen_model *model;
    int steps;
} step_ud;

static fulmen_error *counted_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    step_ud *s = ud;
    s->steps++;
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *configure_lbfgs(void *ud, fulmen_optimizer_config *config) {
    step_ud *s = ud;
    fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
    o.max_iter = 4;
    o.lr = 0.5;
    fulmen_optimizer *opt = NULL;
    fulmen_error *made = fulmen_optimizer_lbfgs_new(s->model, NULL, 0, &o, &opt);
    return fixture_add_optimizer(config, made, opt);
}

/* A fit on cuda:0 of `epochs` (LBFGS when `lbfgs`, else SGD) with weight
 * averaging when `averaging` is not NULL, checkpoints in `<work>/<name>`,
 * resumed from `resume`; returns the model (on the CPU again). */
static fulmen_model *cuda_fit(int64_t epochs, bool lbfgs, const fulmen_weight_averaging_options *averaging,
                              const char *name, const char *resume, int *steps) {
    fulmen_dataset *ds = fixture_blobs(256, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(11));
    step_ud s = {fixture_mlp(32, 0), 0};
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = counted_step;
    vt.configure_optimizers = lbfgs ? configure_lbfgs : fixture_configure_sgd;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cuda"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "deterministic", true));
    CHECK_OK(fulmen_trainer_options_set(o, "enable_checkpointing", "true"));
    CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", "safetensors"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    if (averaging != NULL) CHECK_OK(fulmen_trainer_add_weight_averaging(t, averaging));
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", work, name);
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = dir;
    mc.filename = "{epoch}";
    mc.save_top_k = -1;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mc));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, resume));
    if (steps != NULL) *steps = s.steps;
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return s.model;
}

static void test_lbfgs_fit(void) {
    int steps = 0;
    fulmen_model *m = cuda_fit(1, true, NULL, "lbfgs", NULL, &steps);
    printf("LBFGS fit on cuda:0: %d training_step calls for 8 batches\n", steps);
    CHECK(steps > 8 && steps <= 32);
    fulmen_model_free(m);
}

static void test_weight_averaging(bool ema) {
    const char *kind = ema ? "EMA" : "SWA";
    fulmen_weight_averaging_options wa = fulmen_weight_averaging_options_default();
    wa.ema = ema;
    wa.decay = 0.5;
    char whole[64], cut[64], resumed[64], ckpt[800];
    snprintf(whole, sizeof whole, "%s-whole", kind);
    snprintf(cut, sizeof cut, "%s-cut", kind);
    snprintf(resumed, sizeof resumed, "%s-resumed", kind);
    snprintf(ckpt, sizeof ckpt, "%s/%s/epoch=0.ckpt", work, cut);
    fulmen_model *a = cuda_fit(2, false, &wa, whole, NULL, NULL);
    fulmen_model *b = cuda_fit(1, false, &wa, cut, NULL, NULL);
    fulmen_model *c = cuda_fit(2, false, &wa, resumed, ckpt, NULL);
    double diff = fixture_max_diff(a, c);
    printf("%s on cuda:0: max |whole - resumed| = %g\n", kind, diff);
    CHECK(diff == 0);
    fulmen_model_free(a);
    fulmen_model_free(b);
    fulmen_model_free(c);
    /* Never updated past its first copy: the fit ends where it started. */
    wa.update_every_n_steps = 0;
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *start = fixture_mlp(32, 0);
    snprintf(cut, sizeof cut, "%s-frozen", kind);
    fulmen_model *frozen = cuda_fit(1, false, &wa, cut, NULL, NULL);
    CHECK(fixture_max_diff(start, frozen) == 0);
    fulmen_model_free(start);
    fulmen_model_free(frozen);
}

/* ----------------------------------------- the batch size finder on cuda */

typedef struct {
    fulmen_model *model;
    int64_t largest_fit; /* the largest batch whose forward ran (its backward may still run out of memory) */
} oom_ud;

static fulmen_error *wide_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    oom_ud *o = ud;
    fulmen_tensor *x = NULL;
    int64_t dims[2] = {0, 0};
    size_t ndim = 0;
    fulmen_error *e = fixture_cross_entropy(o->model, batch, out);
    if (e == NULL) e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_tensor_shape(x, dims, 2, &ndim);
    if (e == NULL && dims[0] > o->largest_fit) o->largest_fit = dims[0];
    return e;
}

static void test_batch_size_finder_oom(void) {
    /* 2^20 hidden units: 4 MiB of activations per row, several times over
     * in backward, so a batch of tens of thousands of rows cannot fit. */
    const int64_t rows = 1 << 17;
    fulmen_dataset *ds = fixture_blobs((size_t)rows, 3, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 256, true, 1);
    CHECK_OK(fulmen_manual_seed(5));
    oom_ud o = {NULL, 0};
    fulmen_model *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&o.model));
    CHECK_OK(fulmen_model_linear_new(2, 1 << 20, true, &l));
    CHECK_OK(fulmen_model_push(o.model, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l));
    CHECK_OK(fulmen_model_push(o.model, l));
    CHECK_OK(fulmen_model_linear_new(1 << 20, 2, true, &l));
    CHECK_OK(fulmen_model_push(o.model, l));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &o;
    vt.training_step = wide_step;
    vt.configure_optimizers = fixture_configure_sgd;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, o.model, &m));
    fulmen_trainer_options *opts = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(opts, "accelerator", "cuda"));
    CHECK_OK(fulmen_trainer_options_set(opts, "devices", "1"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(opts, &t));
    fulmen_trainer_options_free(opts);
    fulmen_batch_size_finder_options bo = fulmen_batch_size_finder_options_default();
    bo.init_val = 256;
    bo.steps_per_trial = 1;
    bo.max_val = (size_t)rows;
    size_t found = 0, batches = 0;
    fulmen_error *e = fulmen_trainer_scale_batch_size(t, m, loader, NULL, &bo, &found);
    if (e != NULL) {
        fprintf(stderr, "scale_batch_size: code %d: %s\n", fulmen_error_code(e), fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    }
    CHECK_OK(fulmen_loader_len(loader, &batches));
    printf("batch size finder on cuda:0 (power): found %zu, largest forward %lld rows, %zu batches per epoch\n",
           found, (long long)o.largest_fit, batches);
    /* A size failed before the dataset's length, and the one found fit. */
    CHECK(found >= 256 && found < (size_t)rows && (int64_t)found <= o.largest_fit);
    CHECK(batches == (size_t)rows / found + ((size_t)rows % found != 0));
    /* The GPU recovers: a fit at the size found runs. */
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    bo.binsearch = true;
    o.largest_fit = 0;
    e = fulmen_trainer_scale_batch_size(t, m, loader, NULL, &bo, &found);
    if (e != NULL) {
        fprintf(stderr, "scale_batch_size (binsearch): code %d: %s\n", fulmen_error_code(e), fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    }
    printf("batch size finder on cuda:0 (binsearch): found %zu, largest forward %lld rows\n", found,
           (long long)o.largest_fit);
    CHECK(found >= 1 && found < (size_t)rows);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(o.model);
}

int main(int argc, char **argv) {
    snprintf(work, sizeof work, "%s/fulmen-gpu-optim.XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (mkdtemp(work) == NULL) {
        perror("gpu_optim_check: mkdtemp");
        return 2;
    }
    fulmen_accelerator *acc = NULL;
    bool available = false;
    CHECK_OK(fulmen_accelerator_get("cuda", &acc));
    CHECK_OK(fulmen_accelerator_is_available(acc, &available));
    fulmen_accelerator_free(acc);
    if (!available) {
        printf("gpu_optim_check: CUDA is not available on this machine (fulmen %s): skipped\n", fulmen_version());
        return 77;
    }
    test_lbfgs_host_loop();
    test_lbfgs_fit();
    test_weight_averaging(true);
    test_weight_averaging(false);
    test_batch_size_finder_oom();
    test_fused_updates();
    test_foreach_updates();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    if (check_failed == 0 && system(cmd) != 0) fprintf(stderr, "gpu_optim_check: could not remove %s\n", work);
    return check_finish("gpu_optim_check");
}

/*
 * The GPU kit's test program: fulmen's CUDA paths on a machine with an
 * NVIDIA GPU. Without one it says so and exits with 77 (skipped), so the
 * kit's CPU subset can run it anywhere.
 *
 * Covers: the cuda accelerator and Lightning's device parser ("cuda",
 * "gpu", "auto", "1", "-1", "0,"), CUDA caching-allocator statistics,
 * tensors moved to cuda:0 and back, training on cuda:0 in 32-true,
 * 16-mixed, bf16-mixed and bf16-true, the GradScaler skipping the step of a
 * real float16 overflow, batches from pinned memory (pin_memory), read
 * ahead by loader workers, DDP in a world of one with NCCL and with gloo,
 * FSDP in a world of one over NCCL against the same FSDP fit on the CPU
 * (full and sharded checkpoints, a resume from the sharded one), FSDP's
 * CPU offload against the same fit without it (clipped; a resume from
 * its sharded checkpoint),
 * an exact resume from a checkpoint on the GPU with dropout (the CUDA
 * generator's state travels in the checkpoint), the sequence layers on the
 * GPU (cuDNN's LSTM with packed lengths, the transformer encoder layer with
 * a causal mask) against the CPU, a Lightning-format checkpoint written
 * after a fit on cuda:0 (run.sh hands it to torch.load), and weights that
 * PyTorch saved from cuda:0 (FULMEN_GPU_TORCH_WEIGHTS, written by run.sh).
 *
 *   gpu_check [PARENT_DIR]   (its files go to a new folder in PARENT_DIR,
 *                             default /tmp, removed when every check
 *                             passed; the Lightning checkpoint to
 *                             PARENT_DIR/lightning-cuda, or into the new
 *                             folder without PARENT_DIR)
 */
#define _XOPEN_SOURCE 700
#include <fulmen.h>

#include "../c/check.h"
#include "../c/fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char work[512];

/* fit_on_gpu's loader pins its batches (pin_memory) and reads ahead with
 * this many workers; its trainer writes checkpoints in this format (NULL:
 * the default). */
static bool pin_batches = false;
static size_t loader_workers = 0;
static const char *checkpoint_format = NULL;

/* fixture_loader's loader over `ds` (batch 32, shuffled with seed 3), with
 * pin_memory as pin_batches says. */
static fulmen_loader *gpu_loader(fulmen_dataset *ds) {
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 32;
    o.shuffle = true;
    o.seed = 3;
    o.pin_memory = pin_batches;
    o.num_workers = loader_workers;
    fulmen_loader *l = NULL;
    CHECK_OK(fulmen_loader_new(ds, &o, &l));
    return l;
}

typedef struct {
    fulmen_model *model;
} step_ud;

/* Cross-entropy, logged as train_loss (per epoch). */
static fulmen_error *logged_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_error *e = fixture_cross_entropy(((step_ud *)ud)->model, batch, out);
    if (e != NULL) return e;
    double v = 0;
    e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* The sum of the first layer's weights, read back to the host. */
static double weight_sum(const fulmen_model *model) {
    fulmen_tensor *w = NULL, *s = NULL;
    CHECK_OK(fulmen_model_state_dict_get(model, "0.weight", &w));
    CHECK_OK(fulmen_tensor_sum(w, &s));
    double v = check_item(s);
    fulmen_tensor_free(s);
    fulmen_tensor_free(w);
    return v;
}

enum { OVERFLOW_STEP = 3, OVERFLOW_STEPS = 16 };

typedef struct {
    fulmen_model *model;
    double before;
    int changed[OVERFLOW_STEPS];
} overflow_ud;

/* Cross-entropy, times 1e6 at OVERFLOW_STEP: finite in float32, but its
 * gradients times the loss scale (65536) overflow float16 in backward. */
static fulmen_error *overflow_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    overflow_ud *o = ud;
    int64_t step = 0;
    fulmen_error *e = fulmen_step_context_global_step(ctx, &step);
    if (e == NULL) e = fixture_cross_entropy(o->model, batch, out);
    if (e == NULL && step == OVERFLOW_STEP) {
        fulmen_tensor *big = NULL;
        e = fulmen_tensor_mul_scalar(*out, 1e6, &big);
        fulmen_tensor_free(*out);
        *out = big;
    }
    return e;
}

static fulmen_error *overflow_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    overflow_ud *o = ud;
    int64_t step = 0;
    if (hook == FULMEN_HOOK_TRAIN_BATCH_START) {
        o->before = weight_sum(o->model);
    } else if (hook == FULMEN_HOOK_TRAIN_BATCH_END) {
        CHECK_OK(fulmen_hook_context_global_step(ctx, &step));
        /* global_step counts the step just taken (or skipped). */
        if (step >= 1 && step <= OVERFLOW_STEPS) o->changed[step - 1] = weight_sum(o->model) != o->before;
    }
    return NULL;
}

/* 16-mixed on cuda:0: the overflowing step's gradients are inf, the
 * GradScaler skips that optimizer step (the weights stay) and every other
 * step changes them. */
static void test_fp16_overflow(void) {
    fulmen_dataset *ds = fixture_blobs(512, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(11));
    overflow_ud o;
    memset(&o, 0, sizeof o);
    o.model = fixture_mlp(32, 0);
    fulmen_lightning_module *module = fixture_module(o.model, &o, overflow_step, overflow_hook);
    fulmen_trainer_options *opts = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(opts, "accelerator", "cuda"));
    CHECK_OK(fulmen_trainer_options_set(opts, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set(opts, "precision", "16-mixed"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(opts, &t));
    CHECK_OK(fulmen_trainer_fit(t, module, loader, NULL, NULL));
    int skipped = 0, stepped = 0;
    for (int s = 0; s < OVERFLOW_STEPS; s++) {
        if (s == OVERFLOW_STEP) skipped = !o.changed[s];
        else stepped += o.changed[s];
    }
    printf("16-mixed with a float16 overflow at step %d: skipped %d, other steps that changed the weights %d of %d\n",
           OVERFLOW_STEP, skipped, stepped, OVERFLOW_STEPS - 1);
    CHECK(skipped);
    CHECK(stepped == OVERFLOW_STEPS - 1);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(o.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
}

static fulmen_accelerator *cuda_accelerator(void) {
    fulmen_accelerator *acc = NULL;
    CHECK_OK(fulmen_accelerator_get("cuda", &acc));
    return acc;
}

static void test_devices(void) {
    fulmen_accelerator *acc = cuda_accelerator();
    size_t count = 0, n = 0;
    CHECK_OK(fulmen_accelerator_auto_device_count(acc, &count));
    CHECK(count >= 1);
    printf("cuda devices: %zu\n", count);
    int64_t ids[64];
    CHECK_OK(fulmen_accelerator_parse_devices(acc, "1", ids, 64, &n));
    CHECK(n == 1 && ids[0] == 0);
    CHECK_OK(fulmen_accelerator_parse_devices(acc, "0,", ids, 64, &n));
    CHECK(n == 1 && ids[0] == 0);
    CHECK_OK(fulmen_accelerator_parse_devices(acc, "-1", ids, 64, &n));
    CHECK(n == count);
    CHECK_OK(fulmen_accelerator_parse_devices(acc, "auto", ids, 64, &n));
    CHECK(n == count);
    fulmen_device devs[64];
    CHECK_OK(fulmen_accelerator_get_parallel_devices(acc, "1", devs, 64, &n));
    CHECK(n == 1 && devs[0].device_type == FULMEN_DEVICE_TYPE_CUDA && devs[0].index == 0);

    /* "gpu" and "auto" pick cuda when it is available. */
    const char *aliases[2] = {"gpu", "auto"};
    for (int i = 0; i < 2; i++) {
        fulmen_accelerator *a = NULL;
        char name[32];
        size_t len = 0;
        CHECK_OK(fulmen_accelerator_get(aliases[i], &a));
        CHECK_OK(fulmen_accelerator_name(a, name, sizeof name, &len));
        if (strcmp(name, "cuda") != 0) {
            fprintf(stderr, "%s resolved to %s\n", aliases[i], name);
            CHECK(0);
        }
        fulmen_accelerator_free(a);
    }

    /* The caching allocator's statistics see a tensor on cuda:0. */
    fulmen_device d0 = {FULMEN_DEVICE_TYPE_CUDA, 0};
    CHECK_OK(fulmen_accelerator_setup_device(acc, d0));
    int64_t shape[2] = {1024, 1024};
    fulmen_tensor *cpu = NULL, *gpu = NULL, *back = NULL;
    CHECK_OK(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &cpu));
    CHECK_OK(fulmen_tensor_to_device(cpu, FULMEN_DEVICE_TYPE_CUDA, 0, &gpu));
    fulmen_device_stat stats[128];
    CHECK_OK(fulmen_accelerator_device_stats(acc, d0, stats, 128, &n));
    CHECK(n > 0);
    double allocated = -1;
    for (size_t i = 0; i < n && i < 128; i++) {
        if (strstr(stats[i].name, "allocated_bytes.all.current") != NULL) allocated = stats[i].value;
    }
    printf("allocated_bytes.all.current with a 4 MiB tensor on cuda:0: %.0f\n", allocated);
    CHECK(allocated >= 4.0 * 1024 * 1024);
    CHECK_OK(fulmen_tensor_to_device(gpu, FULMEN_DEVICE_TYPE_CPU, 0, &back));
    fulmen_tensor *sum = NULL;
    CHECK_OK(fulmen_tensor_sum(back, &sum));
    CHECK_NEAR(check_item(sum), 1024.0 * 1024.0, 0);
    fulmen_tensor_free(sum);
    fulmen_tensor_free(back);
    fulmen_tensor_free(gpu);
    fulmen_tensor_free(cpu);
    CHECK_OK(fulmen_accelerator_teardown(acc));
    fulmen_accelerator_free(acc);
}

/* FSDP's checkpoints in fit_on: "full" or "sharded" (NULL: the default). */
static const char *fsdp_state_dict_type = NULL;
/* fit_on with FSDP's CPU offload, and with gradient_clip_val (NULL: none). */
static bool fsdp_cpu_offload = false;
static const char *fit_clip = NULL;

/* Fits the blobs MLP (with `dropout`) on `accelerator` ("cuda": cuda:0)
 * with `precision` and `strategy` (backend: NULL for the default) for
 * `epochs`; returns the last epoch's train_loss, or -1 when fit failed. */
static double fit_on(const char *accelerator, const char *precision, const char *strategy, const char *backend,
                     int64_t epochs, double dropout, const char *root, const char *ckpt, fulmen_model **model_out) {
    fulmen_dataset *ds = fixture_blobs(512, 7, 2.0f);
    fulmen_loader *loader = gpu_loader(ds);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *model = fixture_mlp(32, dropout);
    step_ud ud = {model};
    fulmen_lightning_module *module = fixture_module(model, &ud, logged_step, NULL);
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set(o, "precision", precision));
    CHECK_OK(fulmen_trainer_options_set(o, "strategy", strategy));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "deterministic", true));
    if (backend != NULL) CHECK_OK(fulmen_trainer_options_set(o, "process_group_backend", backend));
    if (fsdp_state_dict_type != NULL) CHECK_OK(fulmen_trainer_options_set(o, "fsdp_state_dict_type", fsdp_state_dict_type));
    if (fsdp_cpu_offload) CHECK_OK(fulmen_trainer_options_set_bool(o, "fsdp_cpu_offload", true));
    if (fit_clip != NULL) CHECK_OK(fulmen_trainer_options_set(o, "gradient_clip_val", fit_clip));
    if (checkpoint_format != NULL) {
        /* Without a logger the checkpoints go to default_root_dir/checkpoints. */
        CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", checkpoint_format));
        CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    }
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    double loss = -1;
    fulmen_error *e = fulmen_trainer_fit(t, module, loader, NULL, ckpt);
    if (e != NULL) {
        fprintf(stderr, "fit (%s, %s, %s): %s\n", precision, strategy, backend ? backend : "default",
                fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    } else {
        CHECK_OK(fulmen_trainer_callback_metric(t, "train_loss", &loss));
        /* Lightning's teardown moves the model back to the CPU. */
        fulmen_tensor *w = NULL;
        int32_t type = -1;
        int64_t index = -1;
        CHECK_OK(fulmen_model_state_dict_get(model, "0.weight", &w));
        CHECK_OK(fulmen_tensor_device(w, &type, &index));
        CHECK(type == FULMEN_DEVICE_TYPE_CPU);
        fulmen_tensor_free(w);
    }
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    if (model_out != NULL) {
        *model_out = model;
    } else {
        fulmen_model_free(model);
    }
    return loss;
}

/* fit_on on cuda:0. */
static double fit_on_gpu(const char *precision, const char *strategy, const char *backend, int64_t epochs,
                         double dropout, const char *root, const char *ckpt, fulmen_model **model_out) {
    return fit_on("cuda", precision, strategy, backend, epochs, dropout, root, ckpt, model_out);
}

static void test_precisions(void) {
    const char *precisions[4] = {"32-true", "16-mixed", "bf16-mixed", "bf16-true"};
    for (int i = 0; i < 4; i++) {
        double loss = fit_on_gpu(precisions[i], "auto", NULL, 3, 0, NULL, NULL, NULL);
        printf("precision %-10s train_loss after 3 epochs: %.4f\n", precisions[i], loss);
        CHECK(loss >= 0 && loss < 0.3);
    }
}

/* pin_memory: the loader's batches are in pinned memory, and training on
 * them (copied non_blocking) gives the same loss as from pageable memory. */
static void test_pinned_batches(void) {
    fulmen_dataset *ds = fixture_blobs(512, 7, 2.0f);
    pin_batches = true;
    fulmen_loader *l = gpu_loader(ds);
    fulmen_tensor *xy[2] = {NULL, NULL};
    size_t n = 0;
    bool pinned = false;
    CHECK_OK(fulmen_loader_batch(l, 0, 0, xy, 2, &n));
    CHECK_OK(fulmen_tensor_is_pinned(xy[0], &pinned));
    CHECK(pinned);
    fulmen_tensor_free(xy[0]);
    fulmen_tensor_free(xy[1]);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    double with_pin = fit_on_gpu("32-true", "auto", NULL, 2, 0, NULL, NULL, NULL);
    pin_batches = false;
    double without = fit_on_gpu("32-true", "auto", NULL, 2, 0, NULL, NULL, NULL);
    printf("pinned batches: batch 0 pinned %d; train_loss after 2 epochs %.6f (pageable: %.6f)\n", pinned, with_pin,
           without);
    CHECK(with_pin >= 0 && with_pin == without);
}

/* Loader workers reading ahead into pinned memory: the batches and their
 * order are those without workers, so the loss is equal. */
static void test_workers_on_gpu(void) {
    pin_batches = true;
    loader_workers = 2;
    double with_workers = fit_on_gpu("32-true", "auto", NULL, 2, 0, NULL, NULL, NULL);
    pin_batches = false;
    loader_workers = 0;
    double without = fit_on_gpu("32-true", "auto", NULL, 2, 0, NULL, NULL, NULL);
    printf("2 loader workers with pin_memory: train_loss after 2 epochs %.6f (no workers: %.6f)\n", with_workers,
           without);
    CHECK(with_workers >= 0 && with_workers == without);
}

static fulmen_tensor *on_cuda(const fulmen_tensor *t) {
    fulmen_tensor *g = NULL;
    CHECK_OK(fulmen_tensor_to_device(t, FULMEN_DEVICE_TYPE_CUDA, 0, &g));
    return g;
}

/* Runs `model` on the CPU, then on cuda:0, on the same inputs (NULL
 * entries stay NULL; entries at `cpu_only` stay on the host); returns the
 * largest difference over the outputs, and checks that backward through
 * the GPU outputs reaches the parameter `param`. */
static double cpu_vs_cuda(fulmen_model *model, const fulmen_tensor **in, size_t n_in, size_t cpu_only,
                          const char *param) {
    fulmen_tensor *cpu_out[3] = {NULL, NULL, NULL}, *gpu_out[3] = {NULL, NULL, NULL};
    size_t count = 0, gpu_count = 0;
    CHECK_OK(fulmen_model_forward_multi(model, NULL, in, n_in, cpu_out, 3, &count));
    CHECK_OK(fulmen_model_to_device(model, FULMEN_DEVICE_TYPE_CUDA, 0));
    const fulmen_tensor *gin[4] = {NULL, NULL, NULL, NULL};
    fulmen_tensor *owned[4] = {NULL, NULL, NULL, NULL};
    for (size_t i = 0; i < n_in && i < 4; i++) {
        if (in[i] == NULL || i == cpu_only) {
            gin[i] = in[i];
        } else {
            owned[i] = on_cuda(in[i]);
            gin[i] = owned[i];
        }
    }
    fulmen_error *e = fulmen_model_forward_multi(model, NULL, gin, n_in, gpu_out, 3, &gpu_count);
    double worst = 1e300;
    if (e != NULL) {
        fprintf(stderr, "forward on cuda:0: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    } else {
        CHECK(gpu_count == count);
        worst = 0;
        for (size_t i = 0; i < count && i < 3; i++) {
            double d = fixture_tensor_diff(cpu_out[i], gpu_out[i]);
            if (d > worst) worst = d;
        }
        fulmen_tensor *loss = NULL, *w = NULL, *grad = NULL;
        CHECK_OK(fulmen_tensor_sum(gpu_out[0], &loss));
        CHECK_OK(fulmen_tensor_backward(loss));
        CHECK_OK(fulmen_model_state_dict_get(model, param, &w));
        CHECK_OK(fulmen_tensor_grad(w, &grad));
        int32_t type = -1;
        int64_t index = -1;
        CHECK(grad != NULL);
        if (grad != NULL) {
            CHECK_OK(fulmen_tensor_device(grad, &type, &index));
            CHECK(type == FULMEN_DEVICE_TYPE_CUDA);
        }
        fulmen_tensor_free(grad);
        fulmen_tensor_free(w);
        fulmen_tensor_free(loss);
    }
    for (int i = 0; i < 3; i++) {
        fulmen_tensor_free(cpu_out[i]);
        fulmen_tensor_free(gpu_out[i]);
    }
    for (int i = 0; i < 4; i++) fulmen_tensor_free(owned[i]);
    return worst;
}

/* cuDNN's LSTM (2 layers, bidirectional, batch_first) with packed lengths,
 * the lengths given on the host and on the GPU, and the transformer
 * encoder layer with a causal mask: the GPU's outputs match the CPU's (to
 * TF32 precision, which cuDNN and cuBLAS may use), and backward on the GPU
 * reaches the weights. */
static void test_sequence_on_gpu(void) {
    CHECK_OK(fulmen_manual_seed(21));
    const int64_t dx[3] = {4, 7, 3}, dl[1] = {4}, lens[4] = {7, 3, 5, 1};
    fulmen_tensor *x = NULL, *lengths = NULL;
    CHECK_OK(fulmen_tensor_randn(dx, 3, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_tensor_from_data(lens, sizeof lens, FULMEN_DTYPE_I64, dl, 1, &lengths));
    for (int lengths_on_gpu = 0; lengths_on_gpu < 2; lengths_on_gpu++) {
        fulmen_rnn_options o = fulmen_rnn_options_default();
        o.num_layers = 2;
        o.bidirectional = true;
        o.batch_first = true;
        fulmen_model *lstm = NULL;
        CHECK_OK(fulmen_model_lstm_new(3, 16, &o, &lstm));
        const fulmen_tensor *in[4] = {x, NULL, NULL, lengths};
        double d = cpu_vs_cuda(lstm, in, 4, lengths_on_gpu ? 99 : 3, "weight_hh_l1_reverse");
        printf("LSTM with packed lengths (on the %s), cuda:0 vs CPU: max |diff| = %g\n",
               lengths_on_gpu ? "GPU" : "host", d);
        CHECK(d < 5e-3);
        fulmen_model_free(lstm);
    }

    fulmen_transformer_options t = fulmen_transformer_options_default();
    t.dim_feedforward = 64;
    t.dropout = 0;
    t.batch_first = true;
    t.activation = FULMEN_ACTIVATION_GELU;
    fulmen_model *enc = NULL;
    CHECK_OK(fulmen_model_transformer_encoder_layer_new(16, 4, &t, &enc));
    const int64_t ds[3] = {4, 7, 16}, dm[2] = {7, 7};
    fulmen_tensor *src = NULL, *ones = NULL, *mask = NULL;
    CHECK_OK(fulmen_tensor_randn(ds, 3, FULMEN_DTYPE_F32, &src));
    CHECK_OK(fulmen_tensor_ones(dm, 2, FULMEN_DTYPE_BOOL, &ones));
    CHECK_OK(fulmen_tensor_triu(ones, 1, &mask));
    const fulmen_tensor *in[2] = {src, mask};
    double d = cpu_vs_cuda(enc, in, 2, 99, "self_attn.in_proj_weight");
    printf("transformer encoder layer with a causal mask, cuda:0 vs CPU: max |diff| = %g\n", d);
    CHECK(d < 5e-3);
    fulmen_tensor *all[5] = {x, lengths, src, ones, mask};
    for (int i = 0; i < 5; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(enc);
}

/* A fit on cuda:0 that writes Lightning's format: the checkpoint lands in
 * PARENT_DIR/lightning-cuda for run.sh's torch.load check, and reads back
 * into a fresh model equal to the trained one. */
static void test_lightning_checkpoint(const char *parent) {
    char root[640], path[1024];
    snprintf(root, sizeof root, "%s/lightning-cuda", parent);
    checkpoint_format = "lightning";
    fulmen_model *trained = NULL;
    double loss = fit_on_gpu("bf16-mixed", "auto", NULL, 2, 0, root, NULL, &trained);
    checkpoint_format = NULL;
    /* ModelCheckpoint's default name after 2 epochs of 16 steps. */
    snprintf(path, sizeof path, "%s/checkpoints/epoch=1-step=32.ckpt", root);
    fulmen_model *fresh = fixture_mlp(32, 0);
    fulmen_error *e = fulmen_model_load(fresh, path, true);
    if (e != NULL) {
        fprintf(stderr, "loading %s: %s\n", path, fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    }
    double diff = fixture_max_diff(trained, fresh);
    printf("Lightning checkpoint after bf16-mixed on cuda:0 (train_loss %.4f): %s, read back with max |diff| %g\n",
           loss, path, diff);
    CHECK(diff == 0);
    fulmen_model_free(fresh);
    fulmen_model_free(trained);
}

/* Weights torch.save wrote from cuda:0 tensors (storages located on
 * "cuda:0"), for the blobs MLP: run.sh writes them with PyTorch and the
 * sum of every value beside them; fulmen reads them onto the host. */
static void test_torch_cuda_weights(void) {
    const char *path = getenv("FULMEN_GPU_TORCH_WEIGHTS");
    if (path == NULL || *path == '\0') {
        printf("weights saved by PyTorch from cuda:0: not given (FULMEN_GPU_TORCH_WEIGHTS): skipped\n");
        return;
    }
    char sum_path[1024];
    snprintf(sum_path, sizeof sum_path, "%s.sum", path);
    FILE *f = fopen(sum_path, "r");
    double expected = 0;
    CHECK(f != NULL && fscanf(f, "%lf", &expected) == 1);
    if (f != NULL) fclose(f);
    fulmen_model *m = fixture_mlp(32, 0);
    fulmen_error *e = fulmen_model_load(m, path, true);
    if (e != NULL) {
        fprintf(stderr, "loading %s: %s\n", path, fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    }
    double total = 0;
    size_t n = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &n));
    for (size_t i = 0; i < n; i++) {
        char name[128];
        size_t len = 0;
        fulmen_tensor *w = NULL, *s = NULL;
        CHECK_OK(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(m, name, &w));
        CHECK_OK(fulmen_tensor_sum(w, &s));
        total += check_item(s);
        fulmen_tensor_free(s);
        fulmen_tensor_free(w);
    }
    printf("weights saved by PyTorch from cuda:0: sum %.9g (PyTorch's: %.9g)\n", total, expected);
    CHECK_NEAR(total, expected, 1e-4);
    fulmen_model_free(m);
}

static void test_ddp_world_of_one(void) {
    const char *backends[2] = {"nccl", "gloo"};
    for (int i = 0; i < 2; i++) {
        double loss = fit_on_gpu("32-true", "ddp", backends[i], 2, 0, NULL, NULL, NULL);
        printf("ddp (%s, world of 1) train_loss after 2 epochs: %.4f\n", backends[i], loss);
        CHECK(loss >= 0 && loss < 0.3);
    }
}

/* FSDP over NCCL with sharded checkpoints (and the FSDP settings set
 * now): 4 epochs in one go equal 2, then a resume from the sharded
 * directory for 2 more, weight for weight; `name` names the runs' folders. */
static void check_sharded_resume(const char *name) {
    fulmen_model *whole = NULL, *resumed = NULL;
    char one[640], split[640];
    snprintf(one, sizeof one, "%s/%s-whole", work, name);
    snprintf(split, sizeof split, "%s/%s-split", work, name);
    fsdp_state_dict_type = "sharded";
    fit_on("cuda", "32-true", "fsdp", "nccl", 4, 0.3, one, NULL, &whole);
    fit_on("cuda", "32-true", "fsdp", "nccl", 2, 0.3, split, NULL, NULL);
    fit_on("cuda", "32-true", "fsdp", "nccl", 4, 0.3, split, "last", &resumed);
    fsdp_state_dict_type = NULL;
    double resume_diff = fixture_max_diff(whole, resumed);
    printf("%s (nccl) resume from a sharded checkpoint: max |whole - resumed| = %g\n", name, resume_diff);
    CHECK(resume_diff == 0);
    fulmen_model_free(whole);
    fulmen_model_free(resumed);
}

/* FSDP over NCCL in a world of one (the MLP's root a unit, its parameters
 * "sharded" into one rank's rows) trains as the same FSDP fit on the CPU
 * over gloo, and ends whole on the CPU; with sharded checkpoints, 2 epochs
 * then a resume from the sharded directory for 2 more equal 4 in one go
 * on the GPU. */
static void test_fsdp_world_of_one(void) {
    fulmen_model *gpu = NULL, *cpu = NULL;
    double on_gpu = fit_on("cuda", "32-true", "fsdp", "nccl", 2, 0, NULL, NULL, &gpu);
    double on_cpu = fit_on("cpu", "32-true", "fsdp", "gloo", 2, 0, NULL, NULL, &cpu);
    double diff = fixture_max_diff(gpu, cpu);
    printf("fsdp (nccl, world of 1) train_loss after 2 epochs: %.6f (cpu, gloo: %.6f); max |w_gpu - w_cpu| = %g\n",
           on_gpu, on_cpu, diff);
    CHECK(on_gpu >= 0 && on_gpu < 0.3);
    CHECK_NEAR(on_gpu, on_cpu, 1e-4);
    CHECK(diff < 1e-4);
    fulmen_model_free(gpu);
    fulmen_model_free(cpu);
    check_sharded_resume("fsdp");
}

/* FSDP's CPU offload over NCCL (shards in pinned host memory, their
 * gradients and SGD in host memory, clipping's norms reduced on the GPU) trains as the same fit
 * without offload, and resumes exactly from its sharded checkpoint. */
static void test_fsdp_cpu_offload(void) {
    fulmen_model *kept = NULL, *offloaded = NULL;
    fit_clip = "0.3";
    double on_gpu = fit_on("cuda", "32-true", "fsdp", "nccl", 2, 0, NULL, NULL, &kept);
    fsdp_cpu_offload = true;
    double off = fit_on("cuda", "32-true", "fsdp", "nccl", 2, 0, NULL, NULL, &offloaded);
    double diff = fixture_max_diff(kept, offloaded);
    printf("fsdp cpu_offload (nccl, world of 1) train_loss after 2 epochs: %.6f (on the GPU: %.6f); max |w - w_gpu| = "
           "%g\n",
           off, on_gpu, diff);
    CHECK(off >= 0 && off < 0.3);
    CHECK_NEAR(off, on_gpu, 1e-5);
    CHECK(diff < 1e-5);
    fulmen_model_free(kept);
    fulmen_model_free(offloaded);
    check_sharded_resume("fsdp-offload");
    fsdp_cpu_offload = false;
    fit_clip = NULL;
}

/* 4 epochs in one go equal 2 epochs, then a resume from last.ckpt for 2
 * more, weight for weight, with dropout drawn from the CUDA generator: the
 * resumed run (in this process, reseeded) draws the same masks only if the
 * checkpoint restored that generator. */
static void test_exact_resume(void) {
    char whole[640], split[640];
    snprintf(whole, sizeof whole, "%s/whole", work);
    snprintf(split, sizeof split, "%s/split", work);
    fulmen_model *a = NULL, *b = NULL, *c = NULL;
    fit_on_gpu("32-true", "auto", NULL, 4, 0.3, whole, NULL, &a);
    fit_on_gpu("32-true", "auto", NULL, 2, 0.3, split, NULL, &b);
    /* "last": the newest checkpoint under default_root_dir. */
    fit_on_gpu("32-true", "auto", NULL, 4, 0.3, split, "last", &c);
    double diff = fixture_max_diff(a, c);
    printf("exact resume on the GPU: max |whole - resumed| = %g\n", diff);
    CHECK(diff == 0);
    fulmen_model_free(a);
    fulmen_model_free(b);
    fulmen_model_free(c);
}

typedef struct {
    fulmen_model *model;
    int64_t steps_checked;
} strict_ud;

/* Cross-entropy that reads nothing back. */
static fulmen_error *quiet_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((strict_ud *)ud)->model, batch, out);
}

/* Every operation that would make the host wait for the GPU fails between
 * on_train_batch_start and on_train_batch_end: the step (forward,
 * backward, clipping, the optimizer and the next batch's copy). */
static fulmen_error *strict_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook == FULMEN_HOOK_TRAIN_BATCH_START) return fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 2);
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END) {
        ((strict_ud *)ud)->steps_checked++;
        return fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 0);
    }
    return NULL;
}

/* A fit on cuda:0 whose steps may not synchronize (SGD, fused when
 * `fused`); NULL when it ran. */
static fulmen_error *strict_fit(const char *precision, bool fused, int64_t *steps) {
    fulmen_dataset *ds = fixture_blobs(256, 7, 2.0f);
    fulmen_loader *loader = gpu_loader(ds);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *model = fixture_mlp(16, 0.1);
    strict_ud ud = {model, 0};
    fulmen_lightning_module *module = fixture_module_with(model, &ud, quiet_step, strict_hook,
                                                          fused ? fixture_configure_fused_sgd : fixture_configure_sgd);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cuda"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set(o, "precision", precision));
    CHECK_OK(fulmen_trainer_options_set(o, "gradient_clip_val", "0.5"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1000));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_error *e = fulmen_trainer_fit(t, module, loader, NULL, NULL);
    CHECK_OK(fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 0));
    *steps = ud.steps_checked;
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(model);
    return e;
}

/* The trainer's steps make no host synchronization in 32-true,
 * bf16-mixed, and 16-mixed with fused updates (pinned batches, clipping by
 * norm): CUDA's sync debug mode fails any. 16-mixed with an optimizer
 * whose updates are not fused makes one, its loss scaler's inf check
 * deciding the step on the host, and so fails. */
static void test_steps_do_not_sync(void) {
    bool pinned = pin_batches;
    pin_batches = true;
    struct {
        const char *precision;
        bool fused;
    } free_of_syncs[] = {{"32-true", false}, {"bf16-mixed", false}, {"32-true", true}, {"16-mixed", true}};
    for (size_t i = 0; i < sizeof free_of_syncs / sizeof free_of_syncs[0]; i++) {
        int64_t steps = 0;
        fulmen_error *e = strict_fit(free_of_syncs[i].precision, free_of_syncs[i].fused, &steps);
        printf("%s%s on cuda:0: %lld steps without a host synchronization%s%s\n", free_of_syncs[i].precision,
               free_of_syncs[i].fused ? " (fused SGD)" : "", (long long)steps, e == NULL ? "" : "; failed: ",
               e == NULL ? "" : fulmen_error_message(e));
        CHECK(e == NULL && steps == 16);
        fulmen_error_free(e);
    }
    int64_t steps = 0;
    fulmen_error *e = strict_fit("16-mixed", false, &steps);
    printf("16-mixed (SGD, not fused) on cuda:0: %s\n",
           e == NULL ? "no synchronization (expected one per step)" : fulmen_error_message(e));
    CHECK(e != NULL && steps == 0);
    fulmen_error_free(e);
    pin_batches = pinned;
}

int main(int argc, char **argv) {
    snprintf(work, sizeof work, "%s/fulmen-gpu-check.XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (mkdtemp(work) == NULL) {
        perror("gpu_check: mkdtemp");
        return 2;
    }

    fulmen_accelerator *acc = cuda_accelerator();
    bool available = false;
    CHECK_OK(fulmen_accelerator_is_available(acc, &available));
    fulmen_accelerator_free(acc);
    if (!available) {
        printf("gpu_check: CUDA is not available on this machine (fulmen %s): skipped\n", fulmen_version());
        rmdir(work);
        return 77;
    }
    test_devices();
    test_precisions();
    test_fp16_overflow();
    test_pinned_batches();
    test_steps_do_not_sync();
    test_ddp_world_of_one();
    test_fsdp_world_of_one();
    test_fsdp_cpu_offload();
    test_exact_resume();
    test_workers_on_gpu();
    test_sequence_on_gpu();
    test_lightning_checkpoint(argc > 1 ? argv[1] : work);
    test_torch_cuda_weights();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (check_failed == 0 && system(cmd) != 0) fprintf(stderr, "gpu_check: could not remove %s\n", work);
    return check_finish("gpu_check");
}

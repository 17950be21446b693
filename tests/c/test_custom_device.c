/*
 * A vendor's own device type: fulmen's fake PrivateUse1 device, registered
 * as "npu" with two devices (process-wide, so in a test program of its
 * own), and a custom accelerator whose get_parallel_devices names its
 * devices, as Lightning's XPUAccelerator example returns
 * torch.device("xpu", idx).
 *
 * Covers: the device type's name and count; tensors to npu:1 and back, with
 * their device reported; a model moved to npu:0 computing what it computes
 * on the CPU; fits on npu:0 through the custom accelerator equal weight for
 * weight to the same fits on the CPU (the fake device runs the CPU kernels),
 * 32-true and bf16-mixed (autocast on PrivateUse1); an exact resume with
 * dropout; the accelerator's setup on npu devices; clear errors for a
 * device type with no backend here (XPU), a device index past the count,
 * DDP on XPU devices, and a second registration under another name.
 */
#define _XOPEN_SOURCE 700
#include <fulmen.h>

#include "check.h"
#include "fixture.h"
#include "npu.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static char work[256];

static fulmen_tensor *on(const fulmen_tensor *t, int32_t type, int64_t index) {
    fulmen_tensor *out = NULL;
    CHECK_OK(fulmen_tensor_to_device(t, type, index, &out));
    return out;
}

static void expect_device(const fulmen_tensor *t, int32_t type, int64_t index) {
    int32_t got_type = -1;
    int64_t got_index = -1;
    CHECK_OK(fulmen_tensor_device(t, &got_type, &got_index));
    if (got_type != type || got_index != index) {
        fprintf(stderr, "tensor on (%d, %lld), expected (%d, %lld)\n", got_type, (long long)got_index, type,
                (long long)index);
        CHECK(0);
    } else {
        CHECK(1);
    }
}

static void test_device_type(void) {
    char name[32];
    size_t len = 0, count = 0;
    CHECK_OK(fulmen_device_type_name(FULMEN_DEVICE_TYPE_PRIVATE_USE1, name, sizeof name, &len));
    CHECK(strcmp(name, "npu") == 0 && len == 3);
    CHECK_OK(fulmen_device_type_name(FULMEN_DEVICE_TYPE_XPU, name, sizeof name, &len));
    CHECK(strcmp(name, "xpu") == 0);
    CHECK_OK(fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, &count));
    CHECK(count == 2);
    CHECK_OK(fulmen_device_count(FULMEN_DEVICE_TYPE_XPU, &count));
    CHECK(count == 0);
    CHECK_ERR(fulmen_device_count(42, &count), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_device_type");
    CHECK_ERR(fulmen_device_type_name(FULMEN_DEVICE_TYPE_CPU, name, 2, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);

    /* The registration stays: the same again is fine, anything else not. */
    CHECK_OK(fulmen_fake_device_register("npu", 2));
    CHECK_ERR(fulmen_fake_device_register("hpx", 2), FULMEN_CODE_TORCH, "already registered as npu");
    CHECK_ERR(fulmen_fake_device_register("npu", 3), FULMEN_CODE_TORCH, "already registered");
    CHECK_ERR(fulmen_fake_device_register("NPU", 2), FULMEN_CODE_INVALID_ARGUMENT, "lower-case");
    CHECK_ERR(fulmen_fake_device_register("cuda", 2), FULMEN_CODE_INVALID_ARGUMENT, "libtorch's device types");
    CHECK_ERR(fulmen_fake_device_register("hip", 2), FULMEN_CODE_INVALID_ARGUMENT, "libtorch's device types");
    CHECK_ERR(fulmen_fake_device_register("npu", 0), FULMEN_CODE_INVALID_ARGUMENT, "FULMEN_MAX_FAKE_DEVICES");
    CHECK_ERR(fulmen_fake_device_register(NULL, 1), FULMEN_CODE_NULL_ARGUMENT, NULL);
}

static void test_tensors(void) {
    int64_t shape[2] = {3, 4};
    fulmen_tensor *x = NULL, *twice = NULL, *sum = NULL;
    CHECK_OK(fulmen_manual_seed(3));
    CHECK_OK(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &x));
    fulmen_tensor *dev = on(x, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 1);
    expect_device(dev, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 1);
    CHECK_OK(fulmen_tensor_add(dev, dev, &twice));
    expect_device(twice, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 1);
    CHECK_OK(fulmen_tensor_sum(twice, &sum));
    fulmen_tensor *x_sum = NULL;
    CHECK_OK(fulmen_tensor_sum(x, &x_sum));
    CHECK_NEAR(check_item(sum), 2 * check_item(x_sum), 1e-5);
    fulmen_tensor *back = on(twice, FULMEN_DEVICE_TYPE_CPU, 0);
    expect_device(back, FULMEN_DEVICE_TYPE_CPU, 0);
    /* npu:1 to npu:0. */
    fulmen_tensor *zero = on(dev, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0);
    expect_device(zero, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0);

    /* The CPU's index is ignored, as libtorch does. */
    fulmen_tensor *cpu200 = on(x, FULMEN_DEVICE_TYPE_CPU, 200);
    fulmen_tensor_free(cpu200);
    fulmen_tensor *bad = NULL;
    CHECK_ERR(fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 2, &bad), FULMEN_CODE_UNAVAILABLE,
              "npu:2 requested but 2 npu device(s)");
    CHECK_ERR(fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_XPU, 0, &bad), FULMEN_CODE_UNAVAILABLE,
              "no xpu backend is registered");
    CHECK_ERR(fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 300, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "limit");
    CHECK(bad == NULL);
    fulmen_tensor *all[7] = {x, twice, sum, x_sum, dev, back, zero};
    for (int i = 0; i < 7; i++) fulmen_tensor_free(all[i]);
}

static void test_model_on_device(void) {
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *m = fixture_mlp(16, 0);
    int64_t shape[2] = {8, 2};
    fulmen_tensor *x = NULL, *y_cpu = NULL, *y_dev = NULL;
    CHECK_OK(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_model_forward(m, x, &y_cpu));
    CHECK_OK(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0));
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "0.weight", &w));
    expect_device(w, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0);
    fulmen_tensor *xd = on(x, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0);
    CHECK_OK(fulmen_model_forward(m, xd, &y_dev));
    expect_device(y_dev, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0);
    CHECK(fixture_tensor_diff(y_cpu, y_dev) == 0);
    CHECK_ERR(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_HPU, 0), FULMEN_CODE_UNAVAILABLE, "no hpu backend");
    fulmen_tensor *all[5] = {x, y_cpu, y_dev, w, xd};
    for (int i = 0; i < 5; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(m);
}

/* ------------------------------------------- the custom accelerator "npu" */

typedef struct {
    int setup_calls, teardown_calls;
    fulmen_device last_setup;
} npu_state;

static fulmen_error *npu_setup(void *ud, fulmen_device device) {
    npu_state *s = ud;
    s->setup_calls++;
    s->last_setup = device;
    return NULL;
}

static fulmen_error *npu_teardown(void *ud) {
    ((npu_state *)ud)->teardown_calls++;
    return NULL;
}

/* An accelerator that names the meta device, which holds no data. */
static fulmen_error *meta_devices(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    (void)ids;
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = FULMEN_DEVICE_TYPE_META;
        out[i].index = 0;
    }
    return NULL;
}

static void register_npu_accelerator(npu_state *s) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    vt.setup_device = npu_setup;
    vt.teardown = npu_teardown;
    CHECK_OK(fulmen_accelerator_register("npu", "the fake PrivateUse1 device", &vt, false));
}

/* How quiet_step logs its loss tensor (fulmen_step_context_log_tensor)
 * as "loss" (mean) and "worst" (max), and those callback metrics after
 * the fit. */
typedef struct {
    uint32_t flags;
    bool numbers; /* log the values read back (fulmen_step_context_log) */
    double loss, worst;
} fit_logging;

typedef struct {
    fulmen_model *model;
    fit_logging *logging; /* NULL: quiet_step logs nothing */
} step_ud;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_error *e = fixture_cross_entropy(((step_ud *)ud)->model, batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* Fits the blobs MLP on `accelerator` ("cpu" or "npu") with `precision`;
 * returns the model (on the CPU after the run, as Lightning leaves it). */
static bool with_throughput = false; /* fit adds a ThroughputMonitor */

static fulmen_model *fit(const char *accelerator, const char *devices, const char *precision, int64_t epochs,
                         double dropout, const char *root, const char *ckpt, double *loss) {
    fulmen_dataset *ds = fixture_blobs(256, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *model = fixture_mlp(16, dropout);
    step_ud ud = {model, NULL};
    fulmen_lightning_module *module = fixture_module(model, &ud, step, NULL);
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    CHECK_OK(fulmen_trainer_options_set(o, "precision", precision));
    if (root != NULL) CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    if (with_throughput) CHECK_OK(fulmen_trainer_add_throughput_monitor(t, 4, NULL));
    fulmen_error *e = fulmen_trainer_fit(t, module, loader, NULL, ckpt);
    if (e != NULL) {
        fprintf(stderr, "fit on %s (%s): %s\n", accelerator, precision, fulmen_error_message(e));
        fulmen_error_free(e);
        CHECK(0);
    } else if (loss != NULL) {
        CHECK_OK(fulmen_trainer_callback_metric(t, "train_loss", loss));
    }
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return model;
}

static void test_fit_on_device(void) {
    npu_state s;
    memset(&s, 0, sizeof s);
    register_npu_accelerator(&s);

    /* 32-true: what the CPU computes, weight for weight. */
    double cpu_loss = -1, npu_loss = -1;
    fulmen_model *cpu = fit("cpu", "1", "32-true", 3, 0, NULL, NULL, &cpu_loss);
    fulmen_model *npu = fit("npu", "1", "32-true", 3, 0, NULL, NULL, &npu_loss);
    double diff = fixture_max_diff(cpu, npu);
    printf("32-true on npu:0: train_loss %.6f (cpu %.6f), max |npu - cpu| weight %g\n", npu_loss, cpu_loss, diff);
    CHECK(diff == 0 && npu_loss == cpu_loss && npu_loss < 0.3);
    CHECK(s.setup_calls == 1 && s.last_setup.device_type == FULMEN_DEVICE_TYPE_PRIVATE_USE1 &&
          s.last_setup.index == 0);
    CHECK(s.teardown_calls == 1);
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(npu, "0.weight", &w));
    expect_device(w, FULMEN_DEVICE_TYPE_CPU, 0);
    fulmen_tensor_free(w);
    fulmen_model_free(cpu);
    fulmen_model_free(npu);

    /* devices="1," picks npu:1. */
    fulmen_model *one = fit("npu", "1,", "32-true", 1, 0, NULL, NULL, NULL);
    CHECK(s.last_setup.device_type == FULMEN_DEVICE_TYPE_PRIVATE_USE1 && s.last_setup.index == 1);
    fulmen_model_free(one);

    /* bf16-mixed: autocast on PrivateUse1 (the matrix products in bfloat16). */
    double bf16_loss = -1;
    fulmen_model *bf16 = fit("npu", "1", "bf16-mixed", 3, 0, NULL, NULL, &bf16_loss);
    printf("bf16-mixed on npu:0: train_loss %.6f\n", bf16_loss);
    CHECK(bf16_loss >= 0 && bf16_loss < 0.3 && bf16_loss != npu_loss);
    fulmen_model_free(bf16);

    /* Exact resume with dropout: 4 epochs equal 2, then 2 more from last. */
    char whole[320], split[320];
    snprintf(whole, sizeof whole, "%s/whole", work);
    snprintf(split, sizeof split, "%s/split", work);
    fulmen_model *a = fit("npu", "1", "32-true", 4, 0.3, whole, NULL, NULL);
    fulmen_model *b = fit("npu", "1", "32-true", 2, 0.3, split, NULL, NULL);
    fulmen_model *c = fit("npu", "1", "32-true", 4, 0.3, split, "last", NULL);
    double resumed = fixture_max_diff(a, c);
    printf("exact resume on npu:0 with dropout: max |whole - resumed| = %g\n", resumed);
    CHECK(resumed == 0);
    fulmen_model_free(a);
    fulmen_model_free(b);
    fulmen_model_free(c);

    /* c10d dispatches collectives for CPU, CUDA and PrivateUse1 tensors
     * only: DDP on XPU devices is a clear error (DDP on the npu devices,
     * through gloo or a collectives hook, is test_device_ddp's). */
    fulmen_accelerator_vtable xv;
    memset(&xv, 0, sizeof xv);
    xv.struct_size = sizeof xv;
    xv.get_parallel_devices = xpu_parallel;
    CHECK_OK(fulmen_accelerator_register("xpuacc", "names XPU devices", &xv, false));
    fulmen_dataset *ds = fixture_blobs(64, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, false, 0);
    fulmen_model *m = fixture_mlp(16, 0);
    step_ud ud = {m, NULL};
    fulmen_lightning_module *module = fixture_module(m, &ud, step, NULL);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "xpuacc"));
    CHECK_OK(fulmen_trainer_options_set(o, "strategy", "ddp"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_ERR(fulmen_trainer_fit(t, module, loader, NULL, NULL), FULMEN_CODE_UNSUPPORTED,
              "collectives on CPU, CUDA and PrivateUse1 tensors only");
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_accelerator_unregister("xpuacc"));

    /* A run on the meta device is refused before anything moves. */
    fulmen_accelerator_vtable mv;
    memset(&mv, 0, sizeof mv);
    mv.struct_size = sizeof mv;
    mv.get_parallel_devices = meta_devices;
    CHECK_OK(fulmen_accelerator_register("metaacc", "names the meta device", &mv, false));
    o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "metaacc"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_ERR(fulmen_trainer_fit(t, module, loader, NULL, NULL), FULMEN_CODE_UNSUPPORTED, "meta device holds no data");
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_accelerator_unregister("metaacc"));
    fulmen_lightning_module_free(module);
    fulmen_model_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    CHECK_OK(fulmen_accelerator_unregister("npu"));
}

/* ------------------------------------------- the capability slots */

/* Claims no bfloat16; says float16 needs no loss scaling. */
static fulmen_error *no_bf16(void *ud, int32_t dtype, bool *out) {
    (void)ud;
    *out = dtype != FULMEN_DTYPE_BF16;
    return NULL;
}

static fulmen_error *no_scaling(void *ud, bool *out) {
    (void)ud;
    *out = false;
    return NULL;
}

typedef struct {
    fulmen_model *model;
    double first_grad; /* max |grad| of 0.weight after the first backward */
} grad_ud;

static fulmen_error *grad_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((grad_ud *)ud)->model, batch, out);
}

/* on_after_backward sees the gradients before unscaling, as Lightning's. */
static fulmen_error *grad_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    grad_ud *g = ud;
    if (hook != FULMEN_HOOK_AFTER_BACKWARD || g->first_grad >= 0) return NULL;
    fulmen_tensor *w = NULL, *grad = NULL, *a = NULL, *m = NULL;
    fulmen_error *e = fulmen_model_state_dict_get(g->model, "0.weight", &w);
    if (e == NULL) e = fulmen_tensor_grad(w, &grad);
    if (e == NULL) e = fulmen_tensor_abs(grad, &a);
    if (e == NULL) e = fulmen_tensor_max(a, &m);
    if (e == NULL) e = fulmen_tensor_item(m, &g->first_grad);
    fulmen_tensor *all[4] = {w, grad, a, m};
    for (int i = 0; i < 4; i++) fulmen_tensor_free(all[i]);
    return e;
}

/* A 16-mixed fit on `acc`; returns the first gradient's largest value. */
static double first_grad_16_mixed(const char *acc) {
    fulmen_dataset *ds = fixture_blobs(64, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, false, 0);
    CHECK_OK(fulmen_manual_seed(4));
    grad_ud g = {fixture_mlp(16, 0), -1};
    fulmen_lightning_module *module = fixture_module(g.model, &g, grad_step, grad_hook);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", acc));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set(o, "precision", "16-mixed"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_fit(t, module, loader, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_model_free(g.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return g.first_grad;
}

static void test_capabilities(void) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.get_parallel_devices = npu_parallel;
    vt.supports_dtype = no_bf16;
    vt.fp16_needs_loss_scaling = no_scaling;
    CHECK_OK(fulmen_accelerator_register("npu_nobf16", "no bfloat16, float16 unscaled", &vt, false));
    /* The same slots behind a struct_size that ends before them: ignored. */
    vt.struct_size = offsetof(fulmen_accelerator_vtable, supports_dtype);
    CHECK_OK(fulmen_accelerator_register("npu_old", "a vtable from before the capability slots", &vt, false));
    vt.struct_size = offsetof(fulmen_accelerator_vtable, get_device_stats);
    CHECK_ERR(fulmen_accelerator_register("npu_short", "too short", &vt, false), FULMEN_CODE_INVALID_ARGUMENT,
              "struct_size");

    /* bf16-mixed is refused where bfloat16 is not supported; 32-true runs. */
    double loss = -1;
    fulmen_model *m = NULL;
    fulmen_dataset *ds = fixture_blobs(64, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, false, 0);
    m = fixture_mlp(16, 0);
    step_ud ud = {m, NULL};
    fulmen_lightning_module *module = fixture_module(m, &ud, step, NULL);
    const char *precisions[3] = {"bf16-mixed", "bf16-true", "32-true"};
    for (int i = 0; i < 3; i++) {
        fulmen_trainer_options *o = fixture_options(NULL, 1);
        CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "npu_nobf16"));
        CHECK_OK(fulmen_trainer_options_set(o, "precision", precisions[i]));
        fulmen_trainer *t = NULL;
        CHECK_OK(fulmen_trainer_new(o, &t));
        if (i < 2) {
            CHECK_ERR(fulmen_trainer_fit(t, module, loader, NULL, NULL), FULMEN_CODE_UNSUPPORTED,
                      "computes in bf16 there, which accelerator \"npu_nobf16\" does not support");
        } else {
            CHECK_OK(fulmen_trainer_fit(t, module, loader, NULL, NULL));
            CHECK_OK(fulmen_trainer_callback_metric(t, "train_loss", &loss));
        }
        fulmen_trainer_free(t);
        fulmen_trainer_options_free(o);
    }
    CHECK(loss > 0);
    fulmen_lightning_module_free(module);
    fulmen_model_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);

    /* 16-mixed: a GradScaler (gradients times 65536 before unscaling)
     * unless the accelerator says float16 needs none; an old vtable's
     * slots are not read. */
    double scaled = first_grad_16_mixed("npu_old"), unscaled = first_grad_16_mixed("npu_nobf16");
    printf("16-mixed first gradient: %g with loss scaling, %g without\n", scaled, unscaled);
    CHECK(unscaled > 0 && scaled / unscaled > 60000 && scaled / unscaled < 70000);
    CHECK_OK(fulmen_accelerator_unregister("npu_nobf16"));
    CHECK_OK(fulmen_accelerator_unregister("npu_old"));
}

/* A vendor generator libtorch does not know: the accelerator's
 * get_rng_state / set_rng_state put it in checkpoints; synchronize runs
 * before ThroughputMonitor reads its clock. */
typedef struct {
    uint64_t rng;
    int gets, sets, syncs;
} vendor_state;

static fulmen_error *vendor_get_rng(void *ud, fulmen_device d, uint8_t *buf, size_t capacity, size_t *len) {
    vendor_state *s = ud;
    (void)d;
    if (capacity < sizeof s->rng) return fulmen_error_new(FULMEN_CODE_OUT_OF_RANGE, "no room for the state");
    s->gets++;
    memcpy(buf, &s->rng, sizeof s->rng);
    *len = sizeof s->rng;
    return NULL;
}

static fulmen_error *vendor_set_rng(void *ud, fulmen_device d, const uint8_t *data, size_t len) {
    vendor_state *s = ud;
    (void)d;
    if (len != sizeof s->rng) return fulmen_error_new(FULMEN_CODE_FORMAT, "not a vendor generator state");
    s->sets++;
    memcpy(&s->rng, data, len);
    return NULL;
}

static fulmen_error *vendor_sync(void *ud, fulmen_device d) {
    vendor_state *s = ud;
    CHECK(d.device_type == FULMEN_DEVICE_TYPE_PRIVATE_USE1);
    s->syncs++;
    return NULL;
}

static void test_vendor_generator(void) {
    /* libtorch's own generator and synchronize for a device type. */
    uint8_t *state = malloc(FULMEN_MAX_RNG_STATE);
    size_t len = 0, small = 0;
    CHECK(state != NULL);
    CHECK_OK(fulmen_device_rng_state(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0, state, FULMEN_MAX_RNG_STATE, &len));
    CHECK(len > 0); /* the fake device's is the CPU generator's state */
    CHECK_ERR(fulmen_device_rng_state(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0, state, 4, &small), FULMEN_CODE_OUT_OF_RANGE,
              NULL);
    CHECK(small == len);
    CHECK_OK(fulmen_device_set_rng_state(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0, state, len));
    CHECK_ERR(fulmen_device_set_rng_state(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0, state, 3), FULMEN_CODE_TORCH, NULL);
    CHECK_ERR(fulmen_device_rng_state(FULMEN_DEVICE_TYPE_XPU, 0, state, FULMEN_MAX_RNG_STATE, &len),
              FULMEN_CODE_UNAVAILABLE, NULL);
    CHECK_ERR(fulmen_device_set_rng_state(FULMEN_DEVICE_TYPE_CPU, 0, state, FULMEN_MAX_RNG_STATE + 1),
              FULMEN_CODE_INVALID_ARGUMENT, "FULMEN_MAX_RNG_STATE");
    CHECK_OK(fulmen_device_synchronize(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 1));
    CHECK_OK(fulmen_device_synchronize(FULMEN_DEVICE_TYPE_CPU, 0));
    CHECK_ERR(fulmen_device_synchronize(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 2), FULMEN_CODE_UNAVAILABLE, NULL);
    /* The sync debug mode is CUDA's; without CUDA in this build it is refused. */
    CHECK_ERR(fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_PRIVATE_USE1, 2), FULMEN_CODE_UNSUPPORTED,
              "only CUDA");
    CHECK_ERR(fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 3), FULMEN_CODE_INVALID_ARGUMENT, "0 (off)");
    CHECK_ERR(fulmen_device_set_sync_debug_mode(99, 0), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    fulmen_error *debug = fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 2);
    if (debug != NULL) {
        CHECK(fulmen_error_code(debug) == FULMEN_CODE_UNSUPPORTED &&
              strstr(fulmen_error_message(debug), "not compiled with CUDA") != NULL);
        fulmen_error_free(debug);
    } else {
        CHECK_OK(fulmen_device_set_sync_debug_mode(FULMEN_DEVICE_TYPE_CUDA, 0));
    }
    free(state);

    vendor_state s = {1234, 0, 0, 0};
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    vt.synchronize = vendor_sync;
    vt.get_rng_state = vendor_get_rng;
    /* One of the pair alone is refused. */
    CHECK_ERR(fulmen_accelerator_register("npu_rng", "", &vt, false), FULMEN_CODE_INVALID_ARGUMENT, "get_rng_state");
    vt.set_rng_state = vendor_set_rng;
    CHECK_OK(fulmen_accelerator_register("npu_rng", "a vendor generator", &vt, false));
    char root[320];
    snprintf(root, sizeof root, "%s/vendor-rng", work);
    with_throughput = true;
    fulmen_model *a = fit("npu_rng", "1", "32-true", 2, 0, root, NULL, NULL);
    with_throughput = false;
    CHECK(s.gets >= 1 && s.sets == 0);
    CHECK(s.syncs >= 16); /* 8 batches an epoch, 2 epochs */
    /* The generator moves on; resuming puts it back where the checkpoint was. */
    s.rng = 99;
    fulmen_model *b = fit("npu_rng", "1", "32-true", 3, 0, root, "last", NULL);
    printf("vendor generator: %d gets, %d sets, %d synchronizations, state %llu after the resume\n", s.gets, s.sets,
           s.syncs, (unsigned long long)s.rng);
    CHECK(s.sets == 1 && s.rng == 1234);
    fulmen_model_free(a);
    fulmen_model_free(b);
    CHECK_OK(fulmen_accelerator_unregister("npu_rng"));
}

/* A training step that reads nothing back: the loss stays on the device. */
static fulmen_error *quiet_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    const step_ud *s = ud;
    fulmen_error *e = fixture_cross_entropy(s->model, batch, out);
    if (e == NULL && s->logging != NULL && s->logging->numbers) {
        uint32_t flags = s->logging->flags;
        double v = 0;
        e = fulmen_tensor_item(*out, &v);
        if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, flags, 0);
        if (e == NULL) e = fulmen_step_context_log(ctx, "worst", v, flags | FULMEN_LOG_REDUCE_MAX, 0);
    } else if (e == NULL && s->logging != NULL) {
        uint32_t flags = s->logging->flags;
        e = fulmen_step_context_log_tensor(ctx, "loss", *out, flags, 0);
        if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "worst", *out, flags | FULMEN_LOG_REDUCE_MAX, 0);
    }
    return e;
}

/* Fits `epochs` epochs of `batches` batches with quiet_step on
 * `accelerator` (devices "1", log_every_n_steps 1000) with the `n` option
 * pairs `opts` (the pair {"optimizer", "fused-sgd"} is not a trainer
 * option: it picks fixture_configure_fused_sgd over plain SGD), logging as
 * `logging` says when not NULL; returns the model, and in *reads (when not
 * NULL) how many times the host waited for the fake device during the fit. */
static fulmen_model *quiet_fit(const char *accelerator, size_t batches, int64_t epochs, const char *const (*opts)[2],
                               size_t n, fit_logging *logging, uint64_t *reads) {
    fulmen_dataset *ds = fixture_blobs(32 * batches, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(13));
    fulmen_model *model = fixture_mlp(16, 0.2);
    step_ud ud = {model, logging};
    bool fused = false;
    for (size_t i = 0; i < n; i++) fused |= strcmp(opts[i][0], "optimizer") == 0;
    fulmen_lightning_module *module =
        fixture_module_with(model, &ud, quiet_step, NULL, fused ? fixture_configure_fused_sgd : fixture_configure_sgd);
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1000));
    for (size_t i = 0; i < n; i++) {
        if (strcmp(opts[i][0], "optimizer") != 0) CHECK_OK(fulmen_trainer_options_set(o, opts[i][0], opts[i][1]));
    }
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    uint64_t before = 0, after = 0;
    CHECK_OK(fulmen_fake_device_host_reads(&before));
    CHECK_OK(fulmen_trainer_fit(t, module, loader, NULL, NULL));
    CHECK_OK(fulmen_fake_device_host_reads(&after));
    if (reads != NULL) *reads = after - before;
    if (logging != NULL) {
        CHECK_OK(fulmen_trainer_callback_metric(t, "loss", &logging->loss));
        CHECK_OK(fulmen_trainer_callback_metric(t, "worst", &logging->worst));
    }
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return model;
}

/* How many times the host waited for the device in a one-epoch fit of
 * `batches` batches on npu:0 with the `n` option pairs `opts`. */
static uint64_t host_reads_of_fit(size_t batches, const char *const (*opts)[2], size_t n) {
    uint64_t reads = 0;
    fulmen_model_free(quiet_fit("npu", batches, 1, opts, n, NULL, &reads));
    return reads;
}

/* A training step makes the host wait for nothing: a fit's count of host
 * reads does not grow with its number of steps, except under 16-mixed
 * with an optimizer whose updates are not fused, whose loss scaler reads
 * its inf check once per step (as torch's GradScaler.step does for every
 * optimizer but the fused ones); with fused updates the finding goes to
 * the kernel on the device. */
static void test_steps_do_not_wait(void) {
    const char *const plain[][2] = {{NULL, NULL}};
    const char *const clip[][2] = {{"gradient_clip_val", "0.5"}};
    const char *const bf16[][2] = {{"precision", "bf16-mixed"}};
    const char *const unchecked[][2] = {{"detect_nonfinite_loss", "false"}};
    const char *const fp16_fused[][2] = {{"precision", "16-mixed"}, {"optimizer", "fused-sgd"}};
    const char *const fp16[][2] = {{"precision", "16-mixed"}};
    struct {
        const char *const (*opts)[2];
        size_t n;
        uint64_t per_step;
    } cases[] = {{plain, 0, 0}, {clip, 1, 0}, {bf16, 1, 0}, {unchecked, 1, 0}, {fp16_fused, 2, 0}, {fp16, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t few = host_reads_of_fit(3, cases[i].opts, cases[i].n);
        uint64_t many = host_reads_of_fit(9, cases[i].opts, cases[i].n);
        if (many - few != 6 * cases[i].per_step) {
            fprintf(stderr, "case %zu: %llu host reads in 3 steps, %llu in 9\n", i, (unsigned long long)few,
                    (unsigned long long)many);
            CHECK(0);
        } else {
            CHECK(1);
        }
    }
}

/* A loss tensor logged on the epoch only, or per step, stays on the device
 * until the trainer reads values anyway (here only at the epoch's end:
 * log_every_n_steps is 1000): the fit's host reads do not grow with its
 * steps, and the values equal those of the CPU's fit, which reads each at
 * once, bit for bit (the epoch's mean and max; the last step's value). */
static void test_logged_tensors_wait_for_the_epoch_end(void) {
    const char *const none[][2] = {{NULL, NULL}};
    const uint32_t levels[] = {FULMEN_LOG_ON_EPOCH, FULMEN_LOG_ON_STEP};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        fit_logging cpu = {levels[i], false, 0, 0}, npu = cpu, few = cpu;
        uint64_t reads_few = 0, reads_many = 0;
        fulmen_model_free(quiet_fit("cpu", 9, 1, none, 0, &cpu, NULL));
        fulmen_model_free(quiet_fit("npu", 9, 1, none, 0, &npu, &reads_many));
        fulmen_model_free(quiet_fit("npu", 3, 1, none, 0, &few, &reads_few));
        if (reads_many != reads_few || npu.loss != cpu.loss || npu.worst != cpu.worst) {
            fprintf(stderr, "logged tensors (flags %u): %llu host reads in 3 steps, %llu in 9; loss %.17g / %.17g, worst %.17g / %.17g\n",
                    (unsigned)levels[i], (unsigned long long)reads_few, (unsigned long long)reads_many, npu.loss, cpu.loss,
                    npu.worst, cpu.worst);
        }
        CHECK(reads_many == reads_few);
        CHECK(npu.loss == cpu.loss && npu.worst == cpu.worst);
        CHECK(levels[i] == FULMEN_LOG_ON_STEP || npu.worst > npu.loss);
    }
    /* DP over npu:0 and npu:1: each chunk's loss on its own device, the
     * step and epoch values reduced on npu:0, equal to numbers logged. */
    const char *const dp[][2] = {{"strategy", "dp"}, {"devices", "2"}};
    fit_logging tensors = {FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, false, 0, 0}, numbers = tensors;
    numbers.numbers = true;
    fulmen_model_free(quiet_fit("npu", 5, 1, dp, 2, &tensors, NULL));
    fulmen_model_free(quiet_fit("npu", 5, 1, dp, 2, &numbers, NULL));
    if (tensors.loss != numbers.loss || tensors.worst != numbers.worst) {
        fprintf(stderr, "dp logged tensors: loss %.17g / %.17g, worst %.17g / %.17g\n", tensors.loss, numbers.loss,
                tensors.worst, numbers.worst);
    }
    CHECK(tensors.loss == numbers.loss && tensors.worst == numbers.worst && tensors.worst > tensors.loss);
}

/* On npu the next batch goes to the device while a step runs: the same
 * weights as the CPU's fits, which copy nothing ahead, where the loop
 * stops early or accumulates. */
static void test_batches_ahead(void) {
    const char *const stops[][2] = {{"max_steps", "7"}, {"accumulate_grad_batches", "3"}};
    const char *const limited[][2] = {{"limit_train_batches", "5"}, {"gradient_clip_val", "0.1"}};
    const char *const precise[][2] = {{"precision", "64-true"}};
    struct {
        const char *const (*opts)[2];
        size_t n;
    } cases[] = {{stops, 2}, {limited, 2}, {precise, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fulmen_model *cpu = quiet_fit("cpu", 8, 2, cases[i].opts, cases[i].n, NULL, NULL);
        fulmen_model *npu = quiet_fit("npu", 8, 2, cases[i].opts, cases[i].n, NULL, NULL);
        double diff = fixture_max_diff(cpu, npu);
        if (diff != 0) fprintf(stderr, "batches ahead, case %zu: max |npu - cpu| weight %g\n", i, diff);
        CHECK(diff == 0);
        fulmen_model_free(cpu);
        fulmen_model_free(npu);
    }
}

typedef struct {
    fulmen_model *model;
    int64_t bad_batch; /* the batch whose step goes wrong */
    bool nan_loss;     /* a NaN loss there (else a class target out of range) */
    int64_t steps;     /* steps run */
} bad_step_ud;

/* Cross-entropy whose loss is NaN, or whose targets lie past the classes,
 * at one batch. */
static fulmen_error *bad_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    bad_step_ud *b = ud;
    int64_t idx = -1;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &idx);
    if (e != NULL) return e;
    b->steps++;
    if (idx != b->bad_batch) return fixture_cross_entropy(b->model, batch, out);
    return b->nan_loss ? fixture_nan_loss(b->model, batch, out) : fixture_bad_target_loss(b->model, batch, out);
}

/* Fits 8 batches on `accelerator` with a bad step at batch 2 and
 * log_every_n_steps 4; expects `code` with `text`, after `steps` steps. */
static void expect_bad_fit(const char *accelerator, bool nan_loss, int32_t code, const char *text, int64_t steps) {
    fulmen_dataset *ds = fixture_blobs(32 * 8, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, false, 3);
    fulmen_model *model = fixture_mlp(16, 0);
    bad_step_ud ud = {model, 2, nan_loss, 0};
    fulmen_lightning_module *module = fixture_module(model, &ud, bad_step, NULL);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 4));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_ERR(fulmen_trainer_fit(t, module, loader, NULL, NULL), code, text);
    if (ud.steps != steps) {
        fprintf(stderr, "%s: %lld steps ran, expected %lld\n", accelerator, (long long)ud.steps, (long long)steps);
        CHECK(0);
    }
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(model);
}

/* A NaN loss and an out-of-range class target: on the CPU refused at
 * their step, on a device checked there and reported where the trainer
 * reads its values (after step 4 of log_every_n_steps 4), naming the
 * steps, with no device fault in between. */
static void test_deferred_checks(void) {
    expect_bad_fit("cpu", true, FULMEN_CODE_NON_FINITE, "no update was made", 3);
    expect_bad_fit("npu", true, FULMEN_CODE_NON_FINITE, "not finite (detect_nonfinite_loss", 4);
    expect_bad_fit("npu", true, FULMEN_CODE_NON_FINITE, "between global steps 0 and 4", 4);
    expect_bad_fit("cpu", false, FULMEN_CODE_OUT_OF_RANGE, NULL, 3);
    expect_bad_fit("npu", false, FULMEN_CODE_OUT_OF_RANGE, "class target lay outside", 4);
}

/* ------------------------------ a FLOP formula on autograd's device thread */

typedef struct {
    fulmen_model *model;
    fulmen_tensor *input;
    pthread_t measuring;
    int calls, other_thread;
} formula_use;

/* Uses the measured model: from the backward of a device, on autograd's
 * thread while the measuring thread holds the model and waits. */
static fulmen_error *uses_the_model(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                                    const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    (void)op, (void)in, (void)n_in, (void)out, (void)n_out, (void)flops;
    formula_use *u = ud;
    u->calls++;
    if (!pthread_equal(pthread_self(), u->measuring)) u->other_thread++;
    fulmen_tensor *y = NULL;
    fulmen_error *e = fulmen_model_forward(u->model, u->input, &y);
    fulmen_tensor_free(y);
    return e != NULL ? e : fulmen_error_new(FULMEN_CODE_CALLBACK, "the held model was not refused");
}

/* A formula that uses the model being measured fails the measurement with
 * INVALID_STATE instead of waiting forever for the model. */
static void test_formula_refused_the_measured_model(void) {
    fulmen_model *m = NULL, *lin = NULL, *act = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(3, 4, true, &lin));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_GELU, 0, &act));
    CHECK_OK(fulmen_model_push(m, lin));
    CHECK_OK(fulmen_model_push(m, act));
    CHECK_OK(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0));
    const int64_t shape[2] = {2, 3};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &x));
    formula_use u = {m, on(x, FULMEN_DEVICE_TYPE_PRIVATE_USE1, 0), pthread_self(), 0, 0};
    CHECK_OK(fulmen_flops_register_formula("aten::gelu_backward", uses_the_model, &u, NULL));
    uint64_t flops = 0;
    CHECK_ERR(fulmen_model_measure_flops(m, u.input, true, &flops), FULMEN_CODE_INVALID_STATE,
              "a FLOP formula cannot use a model another call holds");
    CHECK(u.calls == 1 && u.other_thread == 1);
    CHECK_OK(fulmen_flops_unregister_formula("aten::gelu_backward", NULL));
    /* The model is free again. */
    fulmen_tensor *y = NULL;
    CHECK_OK(fulmen_model_forward(m, u.input, &y));
    fulmen_tensor_free(y);
    fulmen_tensor_free(u.input);
    fulmen_tensor_free(x);
    fulmen_model_free(m);
}

int main(void) {
    snprintf(work, sizeof work, "/tmp/fulmen-custom-device.XXXXXX");
    if (mkdtemp(work) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    /* Before anything else touches the device: process-wide. */
    CHECK_OK(fulmen_fake_device_register("npu", 2));
    test_device_type();
    test_tensors();
    test_model_on_device();
    test_formula_refused_the_measured_model();
    test_fit_on_device();
    test_capabilities();
    test_vendor_generator();
    npu_state npu;
    memset(&npu, 0, sizeof npu);
    register_npu_accelerator(&npu);
    test_steps_do_not_wait();
    test_logged_tensors_wait_for_the_epoch_end();
    test_deferred_checks();
    test_batches_ahead();
    CHECK_OK(fulmen_accelerator_unregister("npu"));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work);
    return check_finish("test_custom_device");
}

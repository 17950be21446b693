/*
 * The custom-accelerator conformance program: runs a registered
 * accelerator through fulmen's device paths and trainer paths and prints
 * what passes, so that a vendor can check an accelerator over its own
 * device type (XPU, HPU, a PrivateUse1 backend, ...) on its hardware.
 *
 *   fulmen_conformance --fake-device npu
 *       registers fulmen's fake PrivateUse1 device as "npu" and a reference
 *       accelerator "npu" over it (what `make test` runs);
 *   fulmen_conformance --plugin ./libvendor.so --accelerator xpu
 *       loads a vendor's plugin, whose `fulmen_error *fulmen_conformance_setup(void)`
 *       loads its backend and registers its accelerator, then checks the
 *       accelerator named `xpu`;
 *   fulmen_conformance --accelerator cuda
 *       checks an accelerator registered already (a built-in one).
 *
 * Every section compares the accelerator's device with the CPU on the same
 * seeds (tolerance --tolerance, default 1e-3 on weights) and reports PASS,
 * FAIL (with the reason) or SKIP (what the device type does not support,
 * with libtorch's or fulmen's message). Exits 1 when a section failed.
 */
#define _XOPEN_SOURCE 700
#include <fulmen.h>

#include "../c/check.h"
#include "../c/fixture.h"
#include "../c/npu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *accelerator = NULL;
static double tolerance = 1e-3;
static fulmen_device device = {FULMEN_DEVICE_TYPE_CPU, 0};
static char work[256];
static int sections_passed = 0, sections_failed = 0, sections_skipped = 0;

/* ------------------------------------------------------------ reporting */

typedef struct {
    const char *name;
    int failed_before;
    char skip[512];
} section;

static section begin(const char *name) {
    section s = {name, check_failed, ""};
    return s;
}

static void end(section *s, const char *detail) {
    if (s->skip[0] != '\0') {
        printf("SKIP  %-18s %s\n", s->name, s->skip);
        sections_skipped++;
    } else if (check_failed > s->failed_before) {
        printf("FAIL  %-18s %s (see the messages above)\n", s->name, detail);
        sections_failed++;
    } else {
        printf("PASS  %-18s %s\n", s->name, detail);
        sections_passed++;
    }
    fflush(stdout);
}

/* Takes an error that means "fulmen or libtorch does not support this for
 * the device type" (FULMEN_CODE_UNSUPPORTED) as a skip; any other error,
 * a device that is not there included, fails the section. Returns whether
 * `e` was NULL. */
static bool ok_or_skip(section *s, fulmen_error *e, const char *what) {
    if (e == NULL) return true;
    int code = fulmen_error_code(e);
    if (code == FULMEN_CODE_UNSUPPORTED) {
        snprintf(s->skip, sizeof s->skip, "%s: %s", what, fulmen_error_message(e));
    } else {
        fprintf(stderr, "%s: %s: %s\n", s->name, what, fulmen_error_message(e));
        check_failed++;
    }
    fulmen_error_free(e);
    return false;
}

/* ------------------------------------------------ the reference accelerator */

static fulmen_error *register_reference(const char *name) {
    fulmen_error *e = fulmen_fake_device_register(name, 2);
    if (e != NULL) return e;
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    return fulmen_accelerator_register(name, "the reference accelerator over fulmen's fake device", &vt, false);
}

/* -------------------------------------------------------------- sections */

static void check_registry(void) {
    section s = begin("registry");
    fulmen_accelerator *acc = NULL;
    bool available = false;
    size_t count = 0, n = 0;
    char detail[256] = "";
    CHECK_OK(fulmen_accelerator_get(accelerator, &acc));
    CHECK_OK(fulmen_accelerator_is_available(acc, &available));
    CHECK(available);
    CHECK_OK(fulmen_accelerator_auto_device_count(acc, &count));
    CHECK(count >= 1);
    fulmen_device devs[4];
    CHECK_OK(fulmen_accelerator_get_parallel_devices(acc, "1", devs, 4, &n));
    CHECK(n == 1);
    if (n == 1) device = devs[0];
    char type[32] = "?";
    size_t len = 0;
    CHECK_OK(fulmen_device_type_name(device.device_type, type, sizeof type, &len));
    snprintf(detail, sizeof detail, "available, %zu device(s); devices=1 is %s:%lld", count, type,
             (long long)device.index);
    fulmen_accelerator_free(acc);
    end(&s, detail);
}

static void check_tensors(void) {
    section s = begin("tensors");
    int64_t shape[2] = {16, 8}, wshape[2] = {8, 4};
    fulmen_tensor *x = NULL, *w = NULL, *xd = NULL, *wd = NULL, *y = NULL, *yd = NULL;
    CHECK_OK(fulmen_manual_seed(1));
    CHECK_OK(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_tensor_randn(wshape, 2, FULMEN_DTYPE_F32, &w));
    if (ok_or_skip(&s, fulmen_tensor_to_device(x, device.device_type, device.index, &xd), "to the device")) {
        int32_t type = -1;
        int64_t index = -1;
        CHECK_OK(fulmen_tensor_device(xd, &type, &index));
        CHECK(type == device.device_type && index == device.index);
        CHECK(fixture_tensor_diff(x, xd) == 0);
        CHECK_OK(fulmen_tensor_to_device(w, device.device_type, device.index, &wd));
        CHECK_OK(fulmen_tensor_matmul(x, w, &y));
        CHECK_OK(fulmen_tensor_matmul(xd, wd, &yd));
        CHECK(fixture_tensor_diff(y, yd) <= tolerance);
    }
    fulmen_tensor *all[6] = {x, w, xd, wd, y, yd};
    for (int i = 0; i < 6; i++) fulmen_tensor_free(all[i]);
    end(&s, "round trip exact, matmul within the tolerance");
}

static void check_model(void) {
    section s = begin("model");
    CHECK_OK(fulmen_manual_seed(2));
    fulmen_model *m = fixture_mlp(16, 0);
    int64_t shape[2] = {8, 2};
    fulmen_tensor *x = NULL, *xd = NULL, *y = NULL, *yd = NULL, *loss = NULL, *w = NULL, *g = NULL;
    CHECK_OK(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &x));
    CHECK_OK(fulmen_model_forward(m, x, &y));
    if (ok_or_skip(&s, fulmen_model_to_device(m, device.device_type, device.index), "moving the model")) {
        CHECK_OK(fulmen_tensor_to_device(x, device.device_type, device.index, &xd));
        CHECK_OK(fulmen_model_forward(m, xd, &yd));
        CHECK(fixture_tensor_diff(y, yd) <= tolerance);
        CHECK_OK(fulmen_tensor_sum(yd, &loss));
        CHECK_OK(fulmen_tensor_backward(loss));
        CHECK_OK(fulmen_model_state_dict_get(m, "0.weight", &w));
        CHECK_OK(fulmen_tensor_grad(w, &g));
        int32_t type = -1;
        int64_t index = -1;
        CHECK(g != NULL);
        if (g != NULL) CHECK_OK(fulmen_tensor_device(g, &type, &index));
        CHECK(type == device.device_type);
    }
    fulmen_tensor *all[7] = {x, xd, y, yd, loss, w, g};
    for (int i = 0; i < 7; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(m);
    end(&s, "forward equals the CPU's, backward leaves gradients on the device");
}

typedef struct {
    fulmen_model *model;
} step_ud;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_error *e = fixture_cross_entropy(((step_ud *)ud)->model, batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fixture_cross_entropy(((step_ud *)ud)->model, batch, &loss);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* A fit of the blobs MLP on `acc` ("cpu" or the accelerator under test);
 * writes the model (on the CPU afterwards) and returns fit's error. */
static fulmen_error *fit(const char *acc, const char *precision, int64_t epochs, double dropout, const char *root,
                         const char *ckpt, bool validate, fulmen_model **model_out, double *loss) {
    fulmen_dataset *ds = fixture_blobs(256, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 32, true, 3);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *model = fixture_mlp(16, dropout);
    step_ud ud = {model};
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &ud;
    vt.training_step = step;
    vt.validation_step = val_step;
    vt.configure_optimizers = fixture_configure_sgd;
    fulmen_lightning_module *module = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, model, &module));
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", acc));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    CHECK_OK(fulmen_trainer_options_set(o, "precision", precision));
    if (root != NULL) CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_error *e = fulmen_trainer_fit(t, module, loader, validate ? loader : NULL, ckpt);
    if (e == NULL && loss != NULL) e = fulmen_trainer_callback_metric(t, "train_loss", loss);
    if (e == NULL && validate) e = fulmen_trainer_validate(t, module, loader, NULL);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    *model_out = model;
    return e;
}

static void check_fit(const char *precision, bool compare_with_cpu) {
    char name[32];
    snprintf(name, sizeof name, "fit %s", precision);
    section s = begin(name);
    fulmen_model *cpu = NULL, *dev = NULL;
    double cpu_loss = -1, dev_loss = -1, diff = -1;
    char detail[256] = "";
    fulmen_error *e = fit(accelerator, precision, 3, 0, NULL, NULL, true, &dev, &dev_loss);
    if (ok_or_skip(&s, e, precision)) {
        CHECK(dev_loss >= 0 && dev_loss < 0.3);
        if (compare_with_cpu) {
            CHECK_OK(fit("cpu", precision, 3, 0, NULL, NULL, true, &cpu, &cpu_loss));
            diff = fixture_max_diff(cpu, dev);
            CHECK(diff <= tolerance);
        }
        snprintf(detail, sizeof detail, "train_loss %.5f%s", dev_loss, compare_with_cpu ? "" : ", then validate");
        if (compare_with_cpu) {
            size_t n = strlen(detail);
            snprintf(detail + n, sizeof detail - n, " (cpu %.5f), max |weight - cpu's| %g, then validate", cpu_loss,
                     diff);
        }
    }
    fulmen_model_free(cpu);
    fulmen_model_free(dev);
    end(&s, detail);
}

static void check_resume(void) {
    section s = begin("exact resume");
    char whole[320], split[320], detail[128] = "";
    snprintf(whole, sizeof whole, "%s/whole", work);
    snprintf(split, sizeof split, "%s/split", work);
    fulmen_model *a = NULL, *b = NULL, *c = NULL;
    fulmen_error *e = fit(accelerator, "32-true", 4, 0.3, whole, NULL, false, &a, NULL);
    if (ok_or_skip(&s, e, "4 epochs")) {
        CHECK_OK(fit(accelerator, "32-true", 2, 0.3, split, NULL, false, &b, NULL));
        CHECK_OK(fit(accelerator, "32-true", 4, 0.3, split, "last", false, &c, NULL));
        double diff = fixture_max_diff(a, c);
        if (diff != 0) fprintf(stderr, "exact resume: the device's random state is not in the checkpoint?\n");
        CHECK(diff == 0);
        snprintf(detail, sizeof detail, "4 epochs = 2 + resumed 2 with dropout, max |diff| %g", diff);
    }
    fulmen_model_free(a);
    fulmen_model_free(b);
    fulmen_model_free(c);
    end(&s, detail);
}

static void check_device_stats(void) {
    section s = begin("device stats");
    fulmen_accelerator *acc = NULL;
    size_t n = 0;
    char detail[64] = "";
    CHECK_OK(fulmen_accelerator_get(accelerator, &acc));
    /* Asked with no room first: the count comes back with the error. */
    fulmen_error *e = fulmen_accelerator_device_stats(acc, device, NULL, 0, &n);
    if (e != NULL && fulmen_error_code(e) == FULMEN_CODE_OUT_OF_RANGE && n > 0) {
        fulmen_error_free(e);
        fulmen_device_stat *stats = calloc(n, sizeof *stats);
        size_t got = 0;
        e = stats == NULL ? NULL : fulmen_accelerator_device_stats(acc, device, stats, n, &got);
        CHECK(stats != NULL && (e != NULL || got == n));
        free(stats);
    }
    if (ok_or_skip(&s, e, "device_stats")) snprintf(detail, sizeof detail, "%zu statistic(s)", n);
    fulmen_accelerator_free(acc);
    end(&s, detail);
}

/* The blobs MLP trained 2 epochs without shuffling, with `strategy` on
 * `devices`, batch `batch` per process: under DDP every step's global
 * batch is the same set of samples as one process's with batch x world. */
static fulmen_error *fit_plain(const char *acc, const char *strategy, const char *devices, size_t batch,
                               fulmen_model **model_out) {
    fulmen_dataset *ds = fixture_blobs(256, 7, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, batch, false, 0);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *m = fixture_mlp(16, 0);
    step_ud ud = {m};
    fulmen_lightning_module *module = fixture_module(m, &ud, step, NULL);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", acc));
    CHECK_OK(fulmen_trainer_options_set(o, "strategy", strategy));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_error *e = fulmen_trainer_fit(t, module, loader, NULL, NULL);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    *model_out = m;
    return e;
}

/* DDP in a world of one, then (with two devices or more) over two
 * processes: fulmen re-executes this program for rank 1, which runs only
 * ddp_rank_one. The gradients go through the accelerator's collectives
 * hook when it has one, else through gloo (via the CPU for a PrivateUse1
 * device); the weights must equal one CPU process's with the global batch. */
static void check_ddp(void) {
    section s = begin("ddp");
    char detail[256] = "";
    fulmen_model *ref = NULL, *one = NULL, *two = NULL;
    fulmen_accelerator *acc = NULL;
    size_t count = 0;
    CHECK_OK(fulmen_accelerator_get(accelerator, &acc));
    CHECK_OK(fulmen_accelerator_auto_device_count(acc, &count));
    fulmen_accelerator_free(acc);
    CHECK_OK(fit_plain("cpu", "single_device", "1", 64, &ref));
    if (ok_or_skip(&s, fit_plain(accelerator, "ddp", "1", 64, &one), "ddp in a world of one")) {
        double d1 = fixture_max_diff(ref, one);
        CHECK(d1 <= tolerance);
        CHECK_OK(fulmen_distributed_shutdown(60));
        snprintf(detail, sizeof detail, "a world of one (max |weight - cpu's| %g)", d1);
        if (count >= 2 && ok_or_skip(&s, fit_plain(accelerator, "ddp", "2", 32, &two), "ddp over 2 processes")) {
            double d2 = fixture_max_diff(ref, two);
            CHECK(d2 <= tolerance);
            /* Waits for rank 1 and reports its failure. */
            CHECK_OK(fulmen_distributed_shutdown(120));
            snprintf(detail, sizeof detail, "a world of one and 2 processes (max |weight - cpu's| %g, %g)", d1, d2);
        }
    }
    fulmen_error_free(fulmen_distributed_shutdown(60));
    fulmen_model_free(ref);
    fulmen_model_free(one);
    fulmen_model_free(two);
    end(&s, detail);
}

/* Rank 1 of check_ddp's two-process job. */
static int ddp_rank_one(void) {
    fulmen_model *m = NULL;
    CHECK_OK(fit_plain(accelerator, "ddp", "2", 32, &m));
    CHECK_OK(fulmen_distributed_shutdown(60));
    fulmen_model_free(m);
    return check_failed == 0 ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

static int usage(void) {
    fprintf(stderr,
            "usage: fulmen_conformance --fake-device NAME | [--plugin LIB.so] --accelerator NAME [--tolerance X]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *fake = NULL, *plugin = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--fake-device") == 0) fake = argv[i + 1];
        else if (strcmp(argv[i], "--plugin") == 0) plugin = argv[i + 1];
        else if (strcmp(argv[i], "--accelerator") == 0) accelerator = argv[i + 1];
        else if (strcmp(argv[i], "--tolerance") == 0) tolerance = strtod(argv[i + 1], NULL);
        else return usage();
    }
    if (fake != NULL && (plugin != NULL || accelerator != NULL)) return usage();
    if (fake == NULL && accelerator == NULL) return usage();
    fulmen_error *e = NULL;
    if (fake != NULL) {
        accelerator = fake;
        e = register_reference(fake);
    } else if (plugin != NULL) {
        void *lib = dlopen(plugin, RTLD_NOW | RTLD_GLOBAL);
        if (lib == NULL) {
            fprintf(stderr, "fulmen_conformance: %s\n", dlerror());
            return 2;
        }
        fulmen_error *(*setup)(void) = NULL;
        *(void **)(&setup) = dlsym(lib, "fulmen_conformance_setup");
        if (setup == NULL) {
            fprintf(stderr, "fulmen_conformance: %s has no fulmen_conformance_setup\n", plugin);
            return 2;
        }
        e = setup();
    }
    if (e != NULL) {
        fprintf(stderr, "fulmen_conformance: setting up: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        return 2;
    }
    /* A rank fulmen's launcher started for check_ddp. */
    if (getenv("FULMEN_LAUNCHER_PID") != NULL) return ddp_rank_one();
    snprintf(work, sizeof work, "/tmp/fulmen-conformance.XXXXXX");
    if (mkdtemp(work) == NULL) {
        perror("fulmen_conformance: mkdtemp");
        return 2;
    }
    printf("fulmen %s conformance of accelerator \"%s\" (tolerance %g)\n", fulmen_version(), accelerator, tolerance);
    check_registry();
    check_tensors();
    check_model();
    check_fit("32-true", true);
    check_fit("bf16-mixed", false);
    check_fit("16-mixed", false);
    check_resume();
    check_device_stats();
    check_ddp();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0) fprintf(stderr, "fulmen_conformance: could not remove %s\n", work);
    printf("conformance: %d passed, %d failed, %d skipped\n", sections_passed, sections_failed, sections_skipped);
    return sections_failed == 0 ? 0 : 1;
}

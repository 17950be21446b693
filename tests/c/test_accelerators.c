/*
 * Accelerators through the C API: the registry and its built-ins (cpu,
 * cuda, mps, xla) on a machine with neither GPU nor TPU, aliases, Lightning's
 * device parser, device set-up, teardown and statistics, custom accelerators
 * implemented by the host (registered, listed, used by the trainer, replaced
 * and removed), and host vtables that fail or lie.
 */
#include "check.h"
#include "fixture.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

char *mkdtemp(char *template); /* POSIX, not declared under -std=c11 */

static char root[64];

/* ---------------------------------------------------------------- helpers */

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 2.0f); }

static fulmen_model *mlp(void) { return fixture_mlp(16, 0); }

typedef struct {
    fulmen_model *model;
    int train_calls, val_calls;
    int fail_at_step; /* training_step fails at this global step (-1: never) */
    bool fail_val;    /* validation_step fails */
} fixture;

static fulmen_error *loss_of(fixture *f, const fulmen_batch *batch, fulmen_tensor **logits, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(f->model, x, logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(*logits, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    f->train_calls++;
    int64_t step = 0;
    CHECK_OK(fulmen_step_context_global_step(ctx, &step));
    if (step == f->fail_at_step) return fulmen_error_new(FULMEN_CODE_CALLBACK, "host refused this batch");
    fulmen_tensor *logits = NULL, *loss = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e == NULL) *out = loss;
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fixture *f = ud;
    f->val_calls++;
    if (f->fail_val) return fulmen_error_new(FULMEN_CODE_CALLBACK, "host refused to validate");
    fulmen_tensor *logits = NULL, *loss = NULL, *pred = NULL, *y = NULL, *hit = NULL, *hitf = NULL, *acc = NULL;
    fulmen_error *e = loss_of(f, batch, &logits, &loss);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_tensor_argmax(logits, 1, false, &pred);
    if (e == NULL) e = fulmen_tensor_compare(pred, y, FULMEN_COMPARE_EQ, &hit);
    if (e == NULL) e = fulmen_tensor_to_dtype(hit, FULMEN_DTYPE_F32, &hitf);
    if (e == NULL) e = fulmen_tensor_mean(hitf, &acc);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_acc", check_item(acc), 0, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 7); }

/* Quiet options: no logger, checkpoint, summary or progress bar. */
static fulmen_trainer_options *quiet_options(long epochs) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    return o;
}

static fulmen_trainer *trainer_from(fulmen_trainer_options *o) {
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* A trainer on `accelerator` (NULL: default) with `devices` (NULL: default). */
static fulmen_trainer *trainer_on(const char *accelerator, const char *devices, long epochs) {
    fulmen_trainer_options *o = quiet_options(epochs);
    if (accelerator != NULL) CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    if (devices != NULL) CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    return trainer_from(o);
}

/* A trainer with strategy single_device (never starts other processes). */
static fulmen_trainer *trainer_single(const char *accelerator, const char *devices) {
    fulmen_trainer_options *o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    CHECK_OK(fulmen_trainer_options_set(o, "strategy", "single_device"));
    return trainer_from(o);
}

/* A small training task: data, loaders, model and module. */
typedef struct {
    fulmen_dataset *train, *val;
    fulmen_loader *tl, *vl;
    fixture f;
    fulmen_lightning_module *m;
} task;

static void task_init(task *k) {
    memset(k, 0, sizeof *k);
    k->train = blobs(128, 1);
    k->val = blobs(64, 2);
    k->tl = loader(k->train, 16, true);
    k->vl = loader(k->val, 32, false);
    k->f.model = mlp();
    k->f.fail_at_step = -1;
    k->m = module_for(&k->f);
}

static void task_free(task *k) {
    fulmen_lightning_module_free(k->m);
    fulmen_model_free(k->f.model);
    fulmen_loader_free(k->tl);
    fulmen_loader_free(k->vl);
    fulmen_dataset_free(k->train);
    fulmen_dataset_free(k->val);
}

static fulmen_accelerator *get_acc(const char *name) {
    fulmen_accelerator *a = NULL;
    CHECK_OK(fulmen_accelerator_get(name, &a));
    return a;
}

/* Whether the accelerator's name is `want`. */
static bool acc_named(const fulmen_accelerator *a, const char *want) {
    char buf[64];
    size_t len = 0;
    fulmen_error *e = fulmen_accelerator_name(a, buf, sizeof buf, &len);
    if (e != NULL) {
        fprintf(stderr, "fulmen_accelerator_name: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        return false;
    }
    return len == strlen(want) && strcmp(buf, want) == 0;
}

/* Finds registry entry `name`: -1 when absent. */
static int registry_find(const char *name, char *desc, size_t desc_cap, bool *available) {
    size_t n = 0;
    CHECK_OK(fulmen_accelerator_registry_len(&n));
    for (size_t i = 0; i < n; i++) {
        char nm[64];
        size_t nl = 0, dl = 0;
        bool av = false;
        CHECK_OK(fulmen_accelerator_registry_entry(i, nm, sizeof nm, &nl, desc, desc_cap, &dl, &av));
        if (strcmp(nm, name) == 0) {
            if (available != NULL) *available = av;
            return (int)i;
        }
    }
    return -1;
}

/* Whether this machine has a CUDA device: the tests were written for one
 * without; where CUDA is available they expect it where it changes the
 * answer (tests/gpu/gpu_check.c covers the CUDA paths themselves). */
static bool cuda_here = false;

/* ----------------------------------------------------------- the registry */

static void test_registry(void) {
    size_t n = 0;
    CHECK_OK(fulmen_accelerator_registry_len(&n));
    CHECK(n >= 4);
    const char *builtins[4] = {"cpu", "cuda", "mps", "xla"};
    for (int i = 0; i < 4; i++) {
        char desc[256] = "";
        bool av = !(i == 0);
        int at = registry_find(builtins[i], desc, sizeof desc, &av);
        CHECK(at >= 0);
        CHECK(strlen(desc) > 0);
        /* No macOS, no TPU here: only the CPU is available (and CUDA where
         * the machine has a GPU). */
        CHECK(av == (i == 0 || (i == 1 && cuda_here)));
    }
    char name[64], desc[256], tiny[2];
    size_t nl = 0, dl = 0;
    bool av = false;
    CHECK_ERR(fulmen_accelerator_registry_entry(n, name, sizeof name, &nl, desc, sizeof desc, &dl, &av),
              FULMEN_CODE_OUT_OF_RANGE, NULL);
    int cpu_at = registry_find("cpu", desc, sizeof desc, NULL);
    CHECK_ERR(fulmen_accelerator_registry_entry((size_t)cpu_at, tiny, sizeof tiny, &nl, desc, sizeof desc, &dl, &av),
              FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(nl == 3);
    CHECK_ERR(fulmen_accelerator_registry_len(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
}

/* ------------------------------------------------------ get and aliases */

static void test_get(void) {
    fulmen_accelerator *cpu = get_acc("cpu");
    bool av = false;
    size_t count = 0;
    CHECK(acc_named(cpu, "cpu"));
    CHECK_OK(fulmen_accelerator_is_available(cpu, &av));
    CHECK(av);
    CHECK_OK(fulmen_accelerator_auto_device_count(cpu, &count));
    CHECK(count == 1);
    char small[2];
    size_t len = 0;
    CHECK_ERR(fulmen_accelerator_name(cpu, small, sizeof small, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(len == 3);

    /* auto: xla > mps > cuda > cpu by availability, so the CPU here (CUDA
     * on a GPU machine). */
    const char *auto_pick = cuda_here ? "cuda" : "cpu";
    fulmen_accelerator *a = get_acc("auto");
    CHECK(acc_named(a, auto_pick));
    fulmen_accelerator_free(a);
    a = get_acc(" AUTO ");
    CHECK(acc_named(a, auto_pick));
    fulmen_accelerator_free(a);
    a = get_acc("CPU");
    CHECK(acc_named(a, "cpu"));
    fulmen_accelerator_free(a);

    /* gpu: neither mps nor cuda is available (cuda on a GPU machine). */
    a = NULL;
    if (cuda_here) {
        a = get_acc("gpu");
        CHECK(acc_named(a, "cuda"));
        fulmen_accelerator_free(a);
        a = NULL;
    } else {
        CHECK_ERR(fulmen_accelerator_get("gpu", &a), FULMEN_CODE_UNAVAILABLE, "no supported GPU backend");
        CHECK_ERR(fulmen_accelerator_get("gpu", &a), FULMEN_CODE_UNAVAILABLE, "available accelerators: cpu");
        CHECK(a == NULL);
    }

    /* tpu is xla, which is registered but unavailable. */
    fulmen_error *e = fulmen_accelerator_get("tpu", &a);
    if (e == NULL) {
        CHECK(acc_named(a, "xla"));
        CHECK_OK(fulmen_accelerator_is_available(a, &av));
        CHECK(!av);
        CHECK_OK(fulmen_accelerator_auto_device_count(a, &count));
        CHECK(count == 0);
        int64_t ids[4];
        size_t n = 9;
        CHECK_ERR(fulmen_accelerator_parse_devices(a, "auto", ids, 4, &n), FULMEN_CODE_UNAVAILABLE, "XLA cannot be used");
        CHECK_ERR(fulmen_accelerator_parse_devices(a, "1", ids, 4, &n), FULMEN_CODE_UNAVAILABLE, "PJRT_DEVICE");
        fulmen_device d = {FULMEN_DEVICE_TYPE_CPU, 0};
        CHECK_ERR(fulmen_accelerator_setup_device(a, d), FULMEN_CODE_UNAVAILABLE, "XLA cannot be used");
        fulmen_device_stat st[4];
        CHECK_ERR(fulmen_accelerator_device_stats(a, d, st, 4, &n), FULMEN_CODE_UNAVAILABLE, NULL);
        CHECK_OK(fulmen_accelerator_teardown(a));
        fulmen_accelerator_free(a);
    } else {
        CHECK(fulmen_error_code(e) == FULMEN_CODE_UNAVAILABLE);
        CHECK(strstr(fulmen_error_message(e), "cpu") != NULL);
        fulmen_error_free(e);
    }

    /* mps: registered, unavailable, no device. */
    a = get_acc("mps");
    CHECK(acc_named(a, "mps"));
    CHECK_OK(fulmen_accelerator_is_available(a, &av));
    CHECK(!av);
    CHECK_OK(fulmen_accelerator_auto_device_count(a, &count));
    CHECK(count == 0);
    {
        int64_t ids[4];
        size_t n = 0;
        CHECK_ERR(fulmen_accelerator_parse_devices(a, "1", ids, 4, &n), FULMEN_CODE_UNAVAILABLE, "no mps device");
        fulmen_device d = {FULMEN_DEVICE_TYPE_MPS, 0};
        CHECK_ERR(fulmen_accelerator_setup_device(a, d), FULMEN_CODE_UNAVAILABLE, "MPS is not available");
    }
    fulmen_accelerator_free(a);

    /* Unknown names list the registered ones and the aliases. */
    a = NULL;
    CHECK_ERR(fulmen_accelerator_get("npu", &a), FULMEN_CODE_INVALID_ARGUMENT, "unknown accelerator \"npu\"");
    CHECK_ERR(fulmen_accelerator_get("npu", &a), FULMEN_CODE_INVALID_ARGUMENT, "cpu, cuda, mps, xla");
    CHECK_ERR(fulmen_accelerator_get("npu", &a), FULMEN_CODE_INVALID_ARGUMENT, "auto, gpu, tpu");
    CHECK_ERR(fulmen_accelerator_get("", &a), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    CHECK_ERR(fulmen_accelerator_get("c p u", &a), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_accelerator_get(NULL, &a), FULMEN_CODE_NULL_ARGUMENT, "name");
    CHECK_ERR(fulmen_accelerator_get("cpu", NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK(a == NULL);

    /* Handles are checked. */
    CHECK_ERR(fulmen_accelerator_is_available(NULL, &av), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_accelerator_is_available((fulmen_accelerator *)small, &av), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_accelerator_free(cpu);
    CHECK_ERR(fulmen_accelerator_is_available(cpu, &av), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_accelerator_free(cpu); /* double free: no-op */
    fulmen_accelerator_free(NULL);
}

/* ------------------------------------------------------ the device parser */

static void test_parse_devices_cpu(void) {
    fulmen_accelerator *cpu = get_acc("cpu");
    int64_t ids[8];
    size_t n = 99;
    CHECK_OK(fulmen_accelerator_parse_devices(cpu, "auto", ids, 8, &n));
    CHECK(n == 1 && ids[0] == 0);
    n = 99;
    CHECK_OK(fulmen_accelerator_parse_devices(cpu, "2", ids, 8, &n));
    CHECK(n == 2 && ids[0] == 0 && ids[1] == 1);
    CHECK_OK(fulmen_accelerator_parse_devices(cpu, " 3 ", ids, 8, &n));
    CHECK(n == 3 && ids[2] == 2);
    /* CPU devices are a process count: 0, -1 and id lists are refused. */
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "0", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "an int > 0");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "-1", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "an int > 0");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "1,3", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "number of processes");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "1,", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "an int > 0");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "[0]", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "an int > 0");
    /* Garbage names the accepted forms. */
    const char *garbage[] = {"abc", "1.5", "", "two", "1,x", "[a]"};
    for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) {
        fulmen_error *e = fulmen_accelerator_parse_devices(cpu, garbage[i], ids, 8, &n);
        CHECK(e != NULL);
        if (e != NULL) {
            const char *msg = fulmen_error_message(e);
            CHECK(fulmen_error_code(e) == FULMEN_CODE_INVALID_ARGUMENT);
            CHECK(strstr(msg, "auto") != NULL && strstr(msg, "-1") != NULL && strstr(msg, "1,3") != NULL);
            fulmen_error_free(e);
        }
    }
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "-2", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "-1 selects all devices");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "99999999999999999999999", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT,
              "too large");
    /* A buffer too small writes the count and fails. */
    n = 0;
    ids[0] = ids[1] = -7;
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "4", ids, 2, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(n == 4);
    n = 0;
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "2", NULL, 0, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(n == 2);
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, NULL, ids, 8, &n), FULMEN_CODE_NULL_ARGUMENT, "devices");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "1", ids, 8, NULL), FULMEN_CODE_NULL_ARGUMENT, "n_out");
    CHECK_ERR(fulmen_accelerator_parse_devices(NULL, "1", ids, 8, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_accelerator_free(cpu);
}

static void test_parse_devices_cuda(void) {
    if (cuda_here) {
        printf("CUDA is available: its device parsing is tested by tests/gpu/gpu_check.c\n");
        return;
    }
    fulmen_accelerator *cuda = get_acc("cuda");
    bool av = true;
    size_t count = 9;
    CHECK(acc_named(cuda, "cuda"));
    CHECK_OK(fulmen_accelerator_is_available(cuda, &av));
    CHECK(!av);
    CHECK_OK(fulmen_accelerator_auto_device_count(cuda, &count));
    CHECK(count == 0);
    int64_t ids[8];
    size_t n = 0;
    /* Every value is refused, naming the (zero) available devices. */
    const char *values[] = {"auto", "1", "2", "-1", "0", "0,", "1,3", "[0]", "[0, 1]"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        fulmen_error *e = fulmen_accelerator_parse_devices(cuda, values[i], ids, 8, &n);
        CHECK(e != NULL);
        if (e != NULL) {
            const char *msg = fulmen_error_message(e);
            if (strstr(msg, "this machine has no cuda device") == NULL) {
                fprintf(stderr, "cuda devices=%s: %s\n", values[i], msg);
                CHECK(false);
            } else {
                CHECK(true);
            }
            int code = fulmen_error_code(e);
            CHECK(code == FULMEN_CODE_UNAVAILABLE || code == FULMEN_CODE_INVALID_ARGUMENT);
            fulmen_error_free(e);
        }
    }
    CHECK_ERR(fulmen_accelerator_parse_devices(cuda, "auto", ids, 8, &n), FULMEN_CODE_UNAVAILABLE, "none are available");
    CHECK_ERR(fulmen_accelerator_parse_devices(cuda, "1,", ids, 8, &n), FULMEN_CODE_UNAVAILABLE, "device 1 does not exist");
    CHECK_ERR(fulmen_accelerator_parse_devices(cuda, "0", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT,
              "devices=0 is not a valid input using the cuda accelerator");
    CHECK_ERR(fulmen_accelerator_parse_devices(cuda, "x", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "1,3");

    fulmen_device out[4];
    CHECK_ERR(fulmen_accelerator_get_parallel_devices(cuda, "1", out, 4, &n), FULMEN_CODE_UNAVAILABLE, "no cuda device");
    fulmen_device d = {FULMEN_DEVICE_TYPE_CUDA, 0};
    CHECK_ERR(fulmen_accelerator_setup_device(cuda, d), FULMEN_CODE_UNAVAILABLE, "0 CUDA device(s) are available");
    fulmen_device_stat st[8];
    CHECK_ERR(fulmen_accelerator_device_stats(cuda, d, st, 8, &n), FULMEN_CODE_UNAVAILABLE, "0 CUDA device(s)");
    fulmen_device c = {FULMEN_DEVICE_TYPE_CPU, 0};
    CHECK_ERR(fulmen_accelerator_setup_device(cuda, c), FULMEN_CODE_INVALID_ARGUMENT, "should be a CUDA device");
    CHECK_OK(fulmen_accelerator_teardown(cuda));
    fulmen_accelerator_free(cuda);
}

/* ----------------------------------- parallel devices, set-up, statistics */

static double stat_of(const fulmen_device_stat *st, size_t n, const char *name, bool *found) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(st[i].name, name) == 0) {
            *found = true;
            return st[i].value;
        }
    }
    *found = false;
    return NAN;
}

static void test_cpu_devices_and_stats(void) {
    fulmen_accelerator *cpu = get_acc("cpu");
    fulmen_device out[4];
    size_t n = 0;
    CHECK_OK(fulmen_accelerator_get_parallel_devices(cpu, "2", out, 4, &n));
    CHECK(n == 2);
    for (size_t i = 0; i < n && i < 4; i++) CHECK(out[i].device_type == FULMEN_DEVICE_TYPE_CPU && out[i].index == 0);
    CHECK_OK(fulmen_accelerator_get_parallel_devices(cpu, "auto", out, 4, &n));
    CHECK(n == 1 && out[0].device_type == FULMEN_DEVICE_TYPE_CPU);
    n = 0;
    CHECK_ERR(fulmen_accelerator_get_parallel_devices(cpu, "3", out, 2, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(n == 3);
    CHECK_ERR(fulmen_accelerator_get_parallel_devices(cpu, "1,", out, 4, &n), FULMEN_CODE_INVALID_ARGUMENT, "an int > 0");

    fulmen_device c = {FULMEN_DEVICE_TYPE_CPU, 0};
    CHECK_OK(fulmen_accelerator_setup_device(cpu, c));
    CHECK_OK(fulmen_accelerator_teardown(cpu));
    fulmen_device g = {FULMEN_DEVICE_TYPE_CUDA, 0};
    CHECK_ERR(fulmen_accelerator_setup_device(cpu, g), FULMEN_CODE_INVALID_ARGUMENT, "should be the CPU");
    fulmen_device m = {FULMEN_DEVICE_TYPE_MPS, 0};
    CHECK_ERR(fulmen_accelerator_setup_device(cpu, m), FULMEN_CODE_INVALID_ARGUMENT, "should be the CPU");
    fulmen_device bad = {42, 0};
    CHECK_ERR(fulmen_accelerator_setup_device(cpu, bad), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_device_type");
    fulmen_device neg = {FULMEN_DEVICE_TYPE_CPU, -3};
    CHECK_ERR(fulmen_accelerator_setup_device(cpu, neg), FULMEN_CODE_INVALID_ARGUMENT, "negative");

    /* Statistics, twice (cpu_percent is measured between calls). */
    for (int round = 0; round < 2; round++) {
        fulmen_device_stat st[8];
        memset(st, 0, sizeof st);
        n = 0;
        CHECK_OK(fulmen_accelerator_device_stats(cpu, c, st, 8, &n));
        CHECK(n == 4);
        bool found = false;
        double rss = stat_of(st, n, "cpu_rss_bytes", &found);
        CHECK(found && rss > 1e6);
        const char *pct[3] = {"cpu_percent", "cpu_swap_percent", "cpu_vm_percent"};
        for (int i = 0; i < 3; i++) {
            double v = stat_of(st, n, pct[i], &found);
            CHECK(found);
            CHECK(v >= 0.0 && v <= 100.0);
        }
        /* Burn some CPU between the samples. */
        volatile double x = 0;
        for (int i = 0; i < 3000000; i++) x += (double)i * 1e-9;
        (void)x;
    }
    fulmen_device_stat one[1];
    n = 0;
    CHECK_ERR(fulmen_accelerator_device_stats(cpu, c, one, 1, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(n == 4);
    CHECK_ERR(fulmen_accelerator_device_stats(cpu, c, one, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_accelerator_device_stats(cpu, bad, one, 1, &n), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_accelerator_teardown(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_stats_builder_add(NULL, "x", 1.0), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_accelerator_free(cpu);
}

/* ------------------------------------- the built-ins through the trainer */

static void test_trainer_builtins(void) {
    task k;
    task_init(&k);

    /* cpu and auto train. */
    const char *accs[3] = {"cpu", "auto", NULL};
    for (int i = 0; i < 3; i++) {
        fulmen_trainer *t = trainer_on(accs[i], i == 0 ? "1" : NULL, 2);
        CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, k.vl, NULL));
        double acc = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
        CHECK(acc > 0.9);
        fulmen_trainer_free(t);
    }

    /* cuda (without a GPU) and tpu are accepted names but fail at fit
     * time: not available. */
    int before = k.f.train_calls;
    fulmen_trainer *t = NULL;
    if (!cuda_here) {
        t = trainer_on("cuda", NULL, 1);
        CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE,
                  "\"cuda\" is not available on this machine; available accelerators: cpu");
        fulmen_trainer_free(t);
    }
    t = trainer_on("tpu", NULL, 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE, "available accelerators: ");
    fulmen_trainer_free(t);
    t = trainer_on("mps", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE, "not available");
    fulmen_trainer_free(t);
    CHECK(k.f.train_calls == before);

    /* Without a GPU, gpu fails as soon as it is set; unknown names list the
     * known ones. */
    fulmen_trainer_options *o = quiet_options(1);
    if (!cuda_here) {
        CHECK_ERR(fulmen_trainer_options_set(o, "accelerator", "gpu"), FULMEN_CODE_UNAVAILABLE,
                  "no supported GPU backend");
    }
    CHECK_ERR(fulmen_trainer_options_set(o, "accelerator", "npu"), FULMEN_CODE_INVALID_ARGUMENT, "cpu, cuda, mps, xla");
    CHECK_ERR(fulmen_trainer_options_set(o, "devices", "abc"), FULMEN_CODE_INVALID_ARGUMENT, "1,3");
    CHECK_ERR(fulmen_trainer_options_set(o, "devices", "-3"), FULMEN_CODE_INVALID_ARGUMENT, "-1 selects all devices");
    CHECK_ERR(fulmen_trainer_options_set_accelerator(o, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_trainer_options_set_accelerator(NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    /* Options are unchanged by the refusals: still the CPU by "auto". */
    t = trainer_from(o);
    CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL));
    fulmen_trainer_free(t);

    /* More than one CPU process needs ddp: single_device refuses it
     * (tests/c/test_ddp.c runs the ddp side). */
    t = trainer_single("cpu", "2");
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "strategy=\"ddp\"");
    fulmen_trainer_free(t);
    t = trainer_on("cpu", "0", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "an int > 0");
    fulmen_trainer_free(t);
    t = trainer_on("cpu", "0,1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "number of processes");
    fulmen_trainer_free(t);

    /* An accelerator handle sets the option by its name. */
    fulmen_accelerator *cpu = get_acc("cpu");
    o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set_accelerator(o, cpu));
    t = trainer_from(o);
    CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_accelerator *cuda = get_acc("cuda");
    o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set_accelerator(o, cuda));
    t = trainer_from(o);
    if (cuda_here) {
        CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL));
    } else {
        CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE, "not available");
    }
    fulmen_trainer_free(t);
    fulmen_accelerator_free(cuda);
    fulmen_accelerator_free(cpu);
    o = quiet_options(1);
    CHECK_ERR(fulmen_trainer_options_set_accelerator(o, cpu), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_trainer_options_free(o);
    task_free(&k);
}

/* ---------------------------------------------- a custom accelerator (C) */

typedef struct {
    int is_available_calls, count_calls, parse_calls, parallel_calls, setup_calls, teardown_calls, stats_calls;
    int freed;
    bool available;
    size_t count;
    fulmen_device last_setup;
    int64_t last_ids[8];
    size_t last_n;
    fulmen_stats_builder *saved_builder;
} acc_state;

static fulmen_error *my_is_available(void *ud, bool *out) {
    acc_state *s = ud;
    s->is_available_calls++;
    *out = s->available;
    return NULL;
}

static fulmen_error *my_count(void *ud, size_t *out) {
    acc_state *s = ud;
    s->count_calls++;
    *out = s->count;
    return NULL;
}

static fulmen_error *my_parallel(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    acc_state *s = ud;
    s->parallel_calls++;
    s->last_n = n;
    for (size_t i = 0; i < n; i++) {
        if (i < 8) s->last_ids[i] = ids[i];
        out[i].device_type = FULMEN_DEVICE_TYPE_CPU;
        out[i].index = 0;
    }
    return NULL;
}

static fulmen_error *my_setup(void *ud, fulmen_device device) {
    acc_state *s = ud;
    s->setup_calls++;
    s->last_setup = device;
    return NULL;
}

static fulmen_error *my_teardown(void *ud) {
    acc_state *s = ud;
    s->teardown_calls++;
    return NULL;
}

static fulmen_error *my_stats(void *ud, fulmen_device device, fulmen_stats_builder *stats) {
    acc_state *s = ud;
    s->stats_calls++;
    s->saved_builder = stats;
    fulmen_error *e = fulmen_stats_builder_add(stats, "myacc_memory_bytes", 1234.0 + (double)device.index);
    if (e == NULL) e = fulmen_stats_builder_add(stats, "myacc_utilization", 42.5);
    CHECK_ERR(fulmen_stats_builder_add(stats, NULL, 1.0), FULMEN_CODE_NULL_ARGUMENT, "name");
    return e;
}

static void my_free(void *ud) { ((acc_state *)ud)->freed++; }

static fulmen_accelerator_vtable my_vtable(acc_state *s) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.userdata_free = my_free;
    vt.is_available = my_is_available;
    vt.auto_device_count = my_count;
    vt.parse_devices = NULL; /* Lightning's GPU-style parser over 2 devices */
    vt.get_parallel_devices = my_parallel;
    vt.setup_device = my_setup;
    vt.teardown = my_teardown;
    vt.get_device_stats = my_stats;
    return vt;
}

static void test_custom_accelerator(void) {
    acc_state s;
    memset(&s, 0, sizeof s);
    s.available = true;
    s.count = 2;
    fulmen_accelerator_vtable vt = my_vtable(&s);
    CHECK_OK(fulmen_accelerator_register("myacc", "a test accelerator computing on the CPU", &vt, false));
    CHECK(s.freed == 0);

    /* Listed, available, with its description. */
    char desc[256] = "";
    bool av = false;
    CHECK(registry_find("myacc", desc, sizeof desc, &av) >= 0);
    CHECK(av);
    CHECK(strcmp(desc, "a test accelerator computing on the CPU") == 0);
    CHECK(s.is_available_calls >= 1);

    fulmen_accelerator *a = get_acc("myacc");
    CHECK(acc_named(a, "myacc"));
    fulmen_accelerator *a2 = get_acc(" MyAcc ");
    CHECK(acc_named(a2, "myacc"));
    fulmen_accelerator_free(a2);
    CHECK_OK(fulmen_accelerator_is_available(a, &av));
    CHECK(av);
    size_t count = 0;
    CHECK_OK(fulmen_accelerator_auto_device_count(a, &count));
    CHECK(count == 2);
    /* "auto" still picks the CPU (CUDA on a GPU machine): custom
     * accelerators are not in its order. */
    fulmen_accelerator *au = get_acc("auto");
    CHECK(acc_named(au, cuda_here ? "cuda" : "cpu"));
    fulmen_accelerator_free(au);

    /* The default (GPU-style) parser over the 2 devices. */
    int64_t ids[8];
    size_t n = 0;
    CHECK_OK(fulmen_accelerator_parse_devices(a, "auto", ids, 8, &n));
    CHECK(n == 2 && ids[0] == 0 && ids[1] == 1);
    CHECK_OK(fulmen_accelerator_parse_devices(a, "-1", ids, 8, &n));
    CHECK(n == 2);
    CHECK_OK(fulmen_accelerator_parse_devices(a, "1,", ids, 8, &n));
    CHECK(n == 1 && ids[0] == 1);
    CHECK_OK(fulmen_accelerator_parse_devices(a, "[1, 0]", ids, 8, &n));
    CHECK(n == 2 && ids[0] == 1 && ids[1] == 0);
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "3", ids, 8, &n), FULMEN_CODE_UNAVAILABLE, "device 2 does not exist");
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "0,5", ids, 8, &n), FULMEN_CODE_UNAVAILABLE,
              "this machine has 2 myacc device(s): [0, 1]");
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "1,1", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "unique");
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "0", ids, 8, &n), FULMEN_CODE_INVALID_ARGUMENT, "devices=0");

    /* get_parallel_devices goes through the host. */
    fulmen_device out[4];
    int calls = s.parallel_calls;
    CHECK_OK(fulmen_accelerator_get_parallel_devices(a, "1,0", out, 4, &n));
    CHECK(s.parallel_calls == calls + 1);
    CHECK(n == 2 && s.last_n == 2 && s.last_ids[0] == 1 && s.last_ids[1] == 0);
    CHECK(out[0].device_type == FULMEN_DEVICE_TYPE_CPU && out[1].device_type == FULMEN_DEVICE_TYPE_CPU);

    /* Set-up, teardown and statistics reach the host. */
    fulmen_device c = {FULMEN_DEVICE_TYPE_CPU, 0};
    CHECK_OK(fulmen_accelerator_setup_device(a, c));
    CHECK(s.setup_calls == 1);
    CHECK_OK(fulmen_accelerator_teardown(a));
    CHECK(s.teardown_calls == 1);
    fulmen_device_stat st[4];
    memset(st, 0, sizeof st);
    CHECK_OK(fulmen_accelerator_device_stats(a, c, st, 4, &n));
    CHECK(s.stats_calls == 1);
    CHECK(n == 2);
    CHECK(strcmp(st[0].name, "myacc_memory_bytes") == 0 && st[0].value == 1234.0);
    CHECK(strcmp(st[1].name, "myacc_utilization") == 0 && st[1].value == 42.5);
    CHECK_ERR(fulmen_accelerator_device_stats(a, c, st, 1, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(n == 2);
    /* The builder is borrowed: dead once the callback returned. */
    CHECK(s.saved_builder != NULL);
    CHECK_ERR(fulmen_stats_builder_add(s.saved_builder, "late", 1.0), FULMEN_CODE_INVALID_HANDLE, NULL);

    /* A trainer on it, devices "1": trains, one set-up and one teardown per fit. */
    task k;
    task_init(&k);
    for (int fit = 0; fit < 2; fit++) {
        s.setup_calls = s.teardown_calls = 0;
        fulmen_trainer *t = trainer_on("myacc", "1", 3);
        CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, k.vl, NULL));
        CHECK(s.setup_calls == 1);
        CHECK(s.teardown_calls == 1);
        CHECK(s.last_setup.device_type == FULMEN_DEVICE_TYPE_CPU);
        double acc = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
        CHECK(acc > 0.95);
        /* validate is a run of its own: one set-up, one teardown. */
        s.setup_calls = s.teardown_calls = 0;
        CHECK_OK(fulmen_trainer_validate(t, k.m, k.vl, NULL));
        CHECK(s.setup_calls == 1 && s.teardown_calls == 1);
        fulmen_trainer_free(t);
    }
    /* Through the handle, devices "1," (device id 1). */
    fulmen_trainer_options *o = quiet_options(1);
    CHECK_OK(fulmen_trainer_options_set_accelerator(o, a));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1,"));
    fulmen_trainer *t = trainer_from(o);
    s.setup_calls = s.teardown_calls = 0;
    CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL));
    CHECK(s.setup_calls == 1 && s.teardown_calls == 1);
    CHECK(s.last_n == 1 && s.last_ids[0] == 1);
    fulmen_trainer_free(t);

    /* Two devices, or "auto" (= 2 here), are more than single_device runs. */
    const char *many[2] = {"2", "auto"};
    for (int i = 0; i < 2; i++) {
        t = trainer_single("myacc", many[i]);
        s.setup_calls = 0;
        CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT,
                  "selects 2 devices of \"myacc\", but strategy \"single_device\" runs on one");
        CHECK(s.setup_calls == 0);
        fulmen_trainer_free(t);
    }
    t = trainer_on("myacc", "5,", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE, "device 5 does not exist");
    fulmen_trainer_free(t);

    /* A fit that fails in training_step still tears the accelerator down
     * (Lightning's _teardown runs on exceptions too). */
    k.f.fail_at_step = 1;
    t = trainer_on("myacc", "1", 1);
    s.setup_calls = s.teardown_calls = 0;
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_CALLBACK, "host refused this batch");
    CHECK(s.setup_calls == 1);
    CHECK(s.teardown_calls == 1);
    /* The same for validate. */
    k.f.fail_at_step = -1;
    k.f.fail_val = true;
    s.setup_calls = s.teardown_calls = 0;
    CHECK_ERR(fulmen_trainer_validate(t, k.m, k.vl, NULL), FULMEN_CODE_CALLBACK, "host refused to validate");
    CHECK(s.setup_calls == 1);
    CHECK(s.teardown_calls == 1);
    k.f.fail_val = false;
    fulmen_trainer_free(t);

    /* Duplicates are refused unless override; userdata_free is not called on refusal. */
    acc_state s2;
    memset(&s2, 0, sizeof s2);
    s2.available = true;
    s2.count = 1;
    fulmen_accelerator_vtable vt2 = my_vtable(&s2);
    CHECK_ERR(fulmen_accelerator_register("myacc", "again", &vt2, false), FULMEN_CODE_INVALID_ARGUMENT,
              "already present in the registry");
    CHECK_ERR(fulmen_accelerator_register(" MYACC ", "again", &vt2, false), FULMEN_CODE_INVALID_ARGUMENT, "already present");
    CHECK_ERR(fulmen_accelerator_register("cpu", "again", &vt2, false), FULMEN_CODE_INVALID_ARGUMENT, "already present");
    const char *reserved[4] = {"auto", "gpu", "tpu", " GPU "};
    for (int i = 0; i < 4; i++) {
        CHECK_ERR(fulmen_accelerator_register(reserved[i], "x", &vt2, true), FULMEN_CODE_INVALID_ARGUMENT, "reserved");
    }
    CHECK_ERR(fulmen_accelerator_register("my acc", "x", &vt2, false), FULMEN_CODE_INVALID_ARGUMENT, "may only hold");
    CHECK_ERR(fulmen_accelerator_register("", "x", &vt2, false), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    CHECK_ERR(fulmen_accelerator_register(NULL, "x", &vt2, false), FULMEN_CODE_NULL_ARGUMENT, "name");
    CHECK_ERR(fulmen_accelerator_register("other", "x", NULL, false), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    fulmen_accelerator_vtable small = vt2;
    small.struct_size = sizeof(size_t);
    CHECK_ERR(fulmen_accelerator_register("other", "x", &small, false), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    small.struct_size = 0;
    CHECK_ERR(fulmen_accelerator_register("other", "x", &small, false), FULMEN_CODE_INVALID_ARGUMENT,
              "sizeof(fulmen_accelerator_vtable)");
    CHECK(registry_find("other", desc, sizeof desc, NULL) < 0);
    CHECK(s2.freed == 0);
    CHECK(s.freed == 0);
    CHECK(registry_find("myacc", desc, sizeof desc, NULL) >= 0);
    CHECK(strcmp(desc, "a test accelerator computing on the CPU") == 0);

    /* Override replaces it. The old one is freed once nobody holds it:
     * the handle `a` still does. */
    CHECK_OK(fulmen_accelerator_register("myacc", "replaced", &vt2, true));
    CHECK(registry_find("myacc", desc, sizeof desc, NULL) >= 0);
    CHECK(strcmp(desc, "replaced") == 0);
    CHECK(s.freed == 0);
    CHECK(s2.freed == 0);
    CHECK_OK(fulmen_accelerator_auto_device_count(a, &count)); /* the old handle: the old accelerator */
    CHECK(count == 2);
    fulmen_accelerator_free(a);
    CHECK(s.freed == 1);
    a = get_acc("myacc");
    CHECK_OK(fulmen_accelerator_auto_device_count(a, &count));
    CHECK(count == 1);
    fulmen_accelerator_free(a);
    CHECK(s2.freed == 0);

    /* A trainer naming it uses the replacement. */
    t = trainer_on("myacc", "1", 1);
    s.setup_calls = s2.setup_calls = 0;
    CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL));
    CHECK(s.setup_calls == 0 && s2.setup_calls == 1 && s2.teardown_calls == 1);

    /* Unregister frees it (no trainer or handle holds it) exactly once. */
    CHECK_OK(fulmen_accelerator_unregister("myacc"));
    CHECK(s2.freed == 1);
    CHECK(s.freed == 1);
    CHECK(registry_find("myacc", desc, sizeof desc, NULL) < 0);
    CHECK_ERR(fulmen_accelerator_get("myacc", &a), FULMEN_CODE_INVALID_ARGUMENT, "unknown accelerator \"myacc\"");
    CHECK_ERR(fulmen_accelerator_unregister("myacc"), FULMEN_CODE_INVALID_ARGUMENT, "unknown accelerator");
    CHECK_ERR(fulmen_accelerator_unregister(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    /* The trainer that named it now fails clearly. */
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "unknown accelerator \"myacc\"");
    fulmen_trainer_free(t);
    CHECK(s2.freed == 1);

    /* Registered again after removal, then removed while a handle holds it. */
    s.freed = 0;
    CHECK_OK(fulmen_accelerator_register("myacc", NULL, &vt, false));
    CHECK(registry_find("myacc", desc, sizeof desc, NULL) >= 0);
    CHECK(strcmp(desc, "") == 0);
    a = get_acc("myacc");
    CHECK_OK(fulmen_accelerator_unregister("myacc"));
    CHECK(s.freed == 0);
    CHECK_OK(fulmen_accelerator_is_available(a, &av));
    CHECK(av);
    fulmen_accelerator_free(a);
    CHECK(s.freed == 1);
    task_free(&k);
}

/* -------------------------------------------- a vtable that fails or lies */

enum { LIE_UNAVAILABLE, LIE_AVAILABILITY_ERRORS, LIE_BAD_ID, LIE_NEGATIVE_ID, LIE_TOO_MANY, LIE_BAD_TYPE,
       LIE_NEGATIVE_INDEX, LIE_SETUP_FAILS, LIE_PARSE_FAILS, LIE_TEARDOWN_FAILS, LIE_STATS_FAIL, LIE_HONEST };

typedef struct {
    int mode;
    int freed, setup_calls, teardown_calls;
    char last_devices[64];
} liar_state;

static fulmen_error *liar_is_available(void *ud, bool *out) {
    liar_state *s = ud;
    if (s->mode == LIE_AVAILABILITY_ERRORS) return fulmen_error_new(FULMEN_CODE_IO, "cannot tell");
    *out = s->mode != LIE_UNAVAILABLE;
    return NULL;
}

static fulmen_error *liar_count(void *ud, size_t *out) {
    (void)ud;
    *out = 2;
    return NULL;
}

static fulmen_error *liar_parse(void *ud, const char *devices, int64_t *ids, size_t capacity, size_t *n_out) {
    liar_state *s = ud;
    snprintf(s->last_devices, sizeof s->last_devices, "%s", devices);
    switch (s->mode) {
    case LIE_BAD_ID:
        ids[0] = 5;
        *n_out = 1;
        return NULL;
    case LIE_NEGATIVE_ID:
        ids[0] = -1;
        *n_out = 1;
        return NULL;
    case LIE_TOO_MANY:
        *n_out = capacity + 1;
        return NULL;
    case LIE_PARSE_FAILS:
        return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "liar does not like these devices");
    default:
        ids[0] = 0;
        *n_out = 1;
        return NULL;
    }
}

static fulmen_error *liar_parallel(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    liar_state *s = ud;
    (void)ids;
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = s->mode == LIE_BAD_TYPE ? 42 : FULMEN_DEVICE_TYPE_CPU;
        out[i].index = s->mode == LIE_NEGATIVE_INDEX ? -4 : 0;
    }
    return NULL;
}

static fulmen_error *liar_setup(void *ud, fulmen_device device) {
    liar_state *s = ud;
    (void)device;
    s->setup_calls++;
    if (s->mode == LIE_SETUP_FAILS) return fulmen_error_new(FULMEN_CODE_IO, "the device is on fire");
    return NULL;
}

static fulmen_error *liar_teardown(void *ud) {
    liar_state *s = ud;
    s->teardown_calls++;
    if (s->mode == LIE_TEARDOWN_FAILS) return fulmen_error_new(FULMEN_CODE_IO, "teardown jammed");
    return NULL;
}

static fulmen_error *liar_stats(void *ud, fulmen_device device, fulmen_stats_builder *stats) {
    (void)ud;
    (void)device;
    (void)stats;
    return fulmen_error_new(FULMEN_CODE_UNAVAILABLE, "no counters today");
}

static void liar_free(void *ud) { ((liar_state *)ud)->freed++; }

static void test_lying_accelerator(void) {
    liar_state s;
    memset(&s, 0, sizeof s);
    s.mode = LIE_HONEST;
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.userdata_free = liar_free;
    vt.is_available = liar_is_available;
    vt.auto_device_count = liar_count;
    vt.parse_devices = liar_parse;
    vt.get_parallel_devices = liar_parallel;
    vt.setup_device = liar_setup;
    vt.teardown = liar_teardown;
    vt.get_device_stats = liar_stats;
    CHECK_OK(fulmen_accelerator_register("liar", "lies", &vt, false));

    task k;
    task_init(&k);

    /* Honest: it trains; the host parser sees the user's devices value. */
    fulmen_trainer *t = trainer_on("liar", "1", 1);
    CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL));
    CHECK(strcmp(s.last_devices, "1") == 0);
    CHECK(s.setup_calls == 1 && s.teardown_calls == 1);
    fulmen_trainer_free(t);
    fulmen_accelerator *a = get_acc("liar");
    int64_t ids[4];
    size_t n = 0;
    /* The host parser gets the value in a form the device parser accepts
     * ("auto", not the quoted "\"auto\"" of error messages). */
    const char *forms[][2] = {{"auto", "auto"}, {" AUTO ", "auto"}, {"-1", "-1"}, {"2", "2"}, {"1,", "1,"}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        n = 0;
        CHECK_OK(fulmen_accelerator_parse_devices(a, forms[i][0], ids, 4, &n));
        CHECK(n == 1 && ids[0] == 0);
        if (strcmp(s.last_devices, forms[i][1]) != 0) {
            fprintf(stderr, "host parse_devices got devices=[%s] for [%s]\n", s.last_devices, forms[i][0]);
        }
        CHECK(strcmp(s.last_devices, forms[i][1]) == 0);
    }

    /* is_available false: fit says it is not available. */
    s.mode = LIE_UNAVAILABLE;
    int train_calls = k.f.train_calls;
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE,
              "accelerator \"liar\" is not available on this machine");
    fulmen_trainer_free(t);
    bool av = true;
    CHECK_OK(fulmen_accelerator_is_available(a, &av));
    CHECK(!av);
    char desc[64];
    CHECK(registry_find("liar", desc, sizeof desc, &av) >= 0);
    CHECK(!av);
    /* An is_available that fails counts as unavailable. */
    s.mode = LIE_AVAILABILITY_ERRORS;
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_UNAVAILABLE, "not available");
    fulmen_trainer_free(t);

    /* parse_devices returning an id beyond auto_device_count. */
    s.mode = LIE_BAD_ID;
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_CALLBACK, "accelerator \"liar\"");
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_CALLBACK, "returned device 5");
    fulmen_trainer_free(t);
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "1", ids, 4, &n), FULMEN_CODE_CALLBACK, "liar");
    s.mode = LIE_NEGATIVE_ID;
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "1", ids, 4, &n), FULMEN_CODE_CALLBACK, "returned device -1");
    s.mode = LIE_TOO_MANY;
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "1", ids, 4, &n), FULMEN_CODE_CALLBACK, "liar");
    s.mode = LIE_PARSE_FAILS;
    CHECK_ERR(fulmen_accelerator_parse_devices(a, "1", ids, 4, &n), FULMEN_CODE_INVALID_ARGUMENT,
              "liar does not like these devices");
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "parse_devices");
    fulmen_trainer_free(t);

    /* get_parallel_devices returning an invalid device. */
    s.mode = LIE_BAD_TYPE;
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_CALLBACK, "get_parallel_devices");
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_CALLBACK, "42");
    fulmen_trainer_free(t);
    fulmen_device out[4];
    CHECK_ERR(fulmen_accelerator_get_parallel_devices(a, "1", out, 4, &n), FULMEN_CODE_CALLBACK, "liar");
    s.mode = LIE_NEGATIVE_INDEX;
    CHECK_ERR(fulmen_accelerator_get_parallel_devices(a, "1", out, 4, &n), FULMEN_CODE_CALLBACK, "negative");

    /* setup_device returning a host error: the host's code and message,
     * naming the callback; no step ran. */
    s.mode = LIE_SETUP_FAILS;
    s.setup_calls = 0;
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_IO, "the device is on fire");
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_IO, "setup_device");
    CHECK(s.setup_calls == 2);
    fulmen_trainer_free(t);
    CHECK(k.f.train_calls == train_calls);

    /* teardown failing fails the fit with the host's error; the failed run
     * does not tear down a second time. */
    s.mode = LIE_TEARDOWN_FAILS;
    s.teardown_calls = 0;
    t = trainer_on("liar", "1", 1);
    CHECK_ERR(fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL), FULMEN_CODE_IO, "teardown jammed");
    CHECK(s.teardown_calls == 1);
    fulmen_trainer_free(t);
    /* A fit failing in training_step whose teardown fails too: the step's
     * code, its message first, the teardown's attached after it. */
    k.f.fail_at_step = 1;
    s.teardown_calls = 0;
    t = trainer_on("liar", "1", 1);
    fulmen_error *both = fulmen_trainer_fit(t, k.m, k.tl, NULL, NULL);
    CHECK(both != NULL);
    if (both != NULL) {
        const char *msg = fulmen_error_message(both);
        const char *step_text = strstr(msg, "host refused this batch");
        const char *teardown_text = strstr(msg, "teardown jammed");
        CHECK(fulmen_error_code(both) == FULMEN_CODE_CALLBACK);
        CHECK(step_text != NULL && teardown_text != NULL && step_text < teardown_text);
        fulmen_error_free(both);
    }
    CHECK(s.teardown_calls == 1);
    k.f.fail_at_step = -1;
    fulmen_trainer_free(t);
    CHECK_ERR(fulmen_accelerator_teardown(a), FULMEN_CODE_IO, "teardown");

    /* Statistics errors come back. */
    s.mode = LIE_HONEST;
    fulmen_device c = {FULMEN_DEVICE_TYPE_CPU, 0};
    fulmen_device_stat st[2];
    CHECK_ERR(fulmen_accelerator_device_stats(a, c, st, 2, &n), FULMEN_CODE_UNAVAILABLE, "no counters today");
    CHECK_ERR(fulmen_accelerator_device_stats(a, c, st, 2, &n), FULMEN_CODE_UNAVAILABLE, "get_device_stats");

    fulmen_accelerator_free(a);
    CHECK(s.freed == 0);
    CHECK_OK(fulmen_accelerator_unregister("liar"));
    CHECK(s.freed == 1);

    /* A vtable with every slot NULL: available, one device, CPU, no stats. */
    fulmen_accelerator_vtable empty;
    memset(&empty, 0, sizeof empty);
    empty.struct_size = sizeof empty;
    CHECK_OK(fulmen_accelerator_register("plain", "defaults only", &empty, false));
    a = get_acc("plain");
    CHECK_OK(fulmen_accelerator_is_available(a, &av));
    CHECK(av);
    size_t count = 0;
    CHECK_OK(fulmen_accelerator_auto_device_count(a, &count));
    CHECK(count == 1);
    CHECK_OK(fulmen_accelerator_get_parallel_devices(a, "auto", out, 4, &n));
    CHECK(n == 1 && out[0].device_type == FULMEN_DEVICE_TYPE_CPU);
    n = 9;
    CHECK_OK(fulmen_accelerator_device_stats(a, c, st, 2, &n));
    CHECK(n == 0);
    fulmen_accelerator_free(a);
    t = trainer_on("plain", "auto", 2);
    CHECK_OK(fulmen_trainer_fit(t, k.m, k.tl, k.vl, NULL));
    double acc = 0;
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &acc));
    CHECK(acc > 0.9);
    fulmen_trainer_free(t);
    CHECK_OK(fulmen_accelerator_unregister("plain"));
    task_free(&k);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-acc-XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    CHECK_OK(fulmen_set_num_threads(1)); /* small models: no thread-pool overhead */
    {
        fulmen_accelerator *cuda = get_acc("cuda");
        CHECK_OK(fulmen_accelerator_is_available(cuda, &cuda_here));
        fulmen_accelerator_free(cuda);
    }
    test_registry();
    test_get();
    test_parse_devices_cpu();
    test_parse_devices_cuda();
    test_cpu_devices_and_stats();
    test_trainer_builtins();
    test_custom_accelerator();
    test_lying_accelerator();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_accelerators");
}

/*
 * Micro benchmarks of fulmen's C boundary, printed as JSON lines
 * {"micro": name, "ns_per_call": x}:
 *   tensor_handle   create a 1-element tensor handle from host data and free it
 *   checked_call    a call that validates its handle (fulmen_tensor_numel)
 *   error_path      a call that fails (NULL handle) and the error's free
 *   fit_step        one training step of Trainer.fit on a 1x1 linear model
 *                   with batch 1: hooks, the host's step callback round trip,
 *                   backward and SGD, i.e. fulmen's per-step overhead
 */
#define _POSIX_C_SOURCE 200809L

#include <fulmen.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "fulmen_micro: %s: %s\n", what, fulmen_error_message(err));
        exit(1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void report(const char *name, double seconds, long calls) {
    printf("{\"micro\": \"%s\", \"ns_per_call\": %.1f}\n", name, 1e9 * seconds / (double)calls);
}

typedef struct {
    fulmen_model *model;
} tiny;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    tiny *t = ud;
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(t->model, x, &y);
    if (e == NULL) e = fulmen_tensor_sum(y, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    tiny *t = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 1e-6;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(t->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    return e;
}

static void fit_steps(long steps) {
    int64_t shape[2] = {steps, 1};
    fulmen_tensor *x = NULL;
    check(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &x), "data");
    const fulmen_tensor *parts[1] = {x};
    fulmen_dataset *ds = NULL;
    check(fulmen_dataset_from_tensors(parts, 1, &ds), "dataset");
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 1;
    fulmen_loader *loader = NULL;
    check(fulmen_loader_new(ds, &lo, &loader), "loader");
    tiny t = {NULL};
    check(fulmen_model_linear_new(1, 1, true, &t.model), "model");
    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &t;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    check(fulmen_lightning_module_new(&vt, t.model, &m), "module");
    fulmen_trainer_options *o = NULL;
    check(fulmen_trainer_options_new(&o), "options");
    check(fulmen_trainer_options_set_int(o, "max_epochs", 2), "epochs");
    check(fulmen_trainer_options_set(o, "accelerator", "cpu"), "cpu");
    check(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false), "bar");
    check(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false), "ckpt");
    check(fulmen_trainer_options_set_bool(o, "enable_model_summary", false), "summary");
    check(fulmen_trainer_options_set(o, "logger", "false"), "logger");
    fulmen_trainer *tr = NULL;
    check(fulmen_trainer_new(o, &tr), "trainer");
    double start = now();
    check(fulmen_trainer_fit(tr, m, loader, NULL, NULL), "fit");
    report("fit_step", now() - start, 2 * steps);
    fulmen_trainer_free(tr);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_model_free(t.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
}

int main(void) {
    check(fulmen_set_num_threads(1), "threads");
    const long n = 200000;
    float value = 1.0f;
    int64_t shape[1] = {1};
    double start = now();
    for (long i = 0; i < n; i++) {
        fulmen_tensor *t = NULL;
        check(fulmen_tensor_from_data(&value, sizeof value, FULMEN_DTYPE_F32, shape, 1, &t), "tensor");
        fulmen_tensor_free(t);
    }
    report("tensor_handle", now() - start, n);

    fulmen_tensor *t = NULL;
    check(fulmen_tensor_from_data(&value, sizeof value, FULMEN_DTYPE_F32, shape, 1, &t), "tensor");
    size_t numel = 0;
    start = now();
    for (long i = 0; i < n; i++) check(fulmen_tensor_numel(t, &numel), "numel");
    report("checked_call", now() - start, n);
    start = now();
    for (long i = 0; i < n; i++) fulmen_error_free(fulmen_tensor_numel(NULL, &numel));
    report("error_path", now() - start, n);
    fulmen_tensor_free(t);

    fit_steps(20000);
    return 0;
}

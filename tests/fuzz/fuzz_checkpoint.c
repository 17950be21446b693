/*
 * Fuzz target: the checkpoint reader on mutated files. The seeds are real
 * checkpoints written by a short fit at start-up (weights, optimizer state,
 * loop progress, callback states, RNG state, hyperparameters). Each input
 * is written to a file and
 *   1. loaded into a model with `fulmen_model_load` (strict or not): on
 *      failure the model's weights must be unchanged;
 *   2. given to `fulmen_trainer_fit` as `ckpt_path` (a resume): on failure
 *      a clear error, no crash, no leaked handle.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

const char *fuzz_target_name = "checkpoint";

static void ok(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "fuzz checkpoint: set-up failed: %s\n", fulmen_error_message(e));
        abort();
    }
}

static void check_error(fulmen_error *e) { fuzz_check_error_("checkpoint", e); }

typedef struct {
    fulmen_model *model;
} module_state;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    module_state *s = ud;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(s->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    module_state *s = ud;
    fulmen_adam_options o = fulmen_adam_options_default();
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_adam_new(s->model, NULL, 0, &o, &opt);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_model *new_model(void) {
    fulmen_model *m = NULL, *l = NULL;
    ok(fulmen_model_sequential_new(&m));
    ok(fulmen_model_linear_new(2, 4, true, &l));
    ok(fulmen_model_push(m, l));
    ok(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l));
    ok(fulmen_model_push(m, l));
    ok(fulmen_model_linear_new(4, 2, true, &l));
    ok(fulmen_model_push(m, l));
    return m;
}

/* The fixed world every input runs in: data, a loader, a module, a dir. */
static struct {
    bool ready;
    char dir[64];
    module_state state;
    fulmen_loader *loader;
    fulmen_lightning_module *module;
} w;

static fulmen_trainer *new_trainer(int64_t epochs, bool checkpoints) {
    fulmen_trainer_options *o = NULL;
    ok(fulmen_trainer_options_new(&o));
    ok(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    ok(fulmen_trainer_options_set(o, "default_root_dir", w.dir));
    ok(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    ok(fulmen_trainer_options_set_bool(o, "enable_checkpointing", checkpoints));
    ok(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    ok(fulmen_trainer_options_set(o, "logger", "false"));
    fulmen_trainer *t = NULL;
    ok(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static void set_up(void) {
    if (w.ready) return;
    w.ready = true;
    snprintf(w.dir, sizeof w.dir, "%s/root", fuzz_work_dir());
    ok(fulmen_manual_seed(1));
    w.state.model = new_model();
    float xs[16] = {0, 1, 1, 0, 1, 1, 0, 0, 2, 1, 1, 2, -1, 0, 0, -1};
    int64_t ys[8] = {0, 1, 1, 0, 1, 1, 0, 0};
    int64_t xshape[2] = {8, 2}, yshape[1] = {8};
    fulmen_tensor *x = NULL, *y = NULL;
    ok(fulmen_tensor_from_data(xs, sizeof xs, FULMEN_DTYPE_F32, xshape, 2, &x));
    ok(fulmen_tensor_from_data(ys, sizeof ys, FULMEN_DTYPE_I64, yshape, 1, &y));
    const fulmen_tensor *parts[2] = {x, y};
    fulmen_dataset *ds = NULL;
    ok(fulmen_dataset_from_tensors(parts, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 4;
    ok(fulmen_loader_new(ds, &lo, &w.loader));
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &w.state;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    ok(fulmen_lightning_module_new(&vt, w.state.model, &w.module));
}

void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    set_up();
    fulmen_trainer *t = new_trainer(2, true);
    ok(fulmen_trainer_fit(t, w.module, w.loader, NULL, NULL));
    char path[512];
    size_t len = 0;
    ok(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, path, sizeof path, &len));
    fulmen_trainer_free(t);
    FILE *f = fopen(path, "rb");
    if (f == NULL) abort();
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add(buf, n);
    /* A plain weights file too. */
    char weights[128];
    snprintf(weights, sizeof weights, "%s/weights.safetensors", w.dir);
    ok(fulmen_model_save(w.state.model, weights));
    f = fopen(weights, "rb");
    if (f == NULL) abort();
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add(buf, n);
}

/* Sum of |w| over the model's tensors: a fingerprint of its weights. */
static double fingerprint(const fulmen_model *m) {
    size_t n = 0;
    double total = 0;
    ok(fulmen_model_state_dict_len(m, &n));
    for (size_t i = 0; i < n; i++) {
        char name[64];
        size_t len = 0;
        fulmen_tensor *t = NULL, *a = NULL, *s = NULL;
        double v = 0;
        ok(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        ok(fulmen_model_state_dict_get(m, name, &t));
        ok(fulmen_tensor_abs(t, &a));
        ok(fulmen_tensor_sum(a, &s));
        ok(fulmen_tensor_item(s, &v));
        total += v;
        fulmen_tensor_free(t);
        fulmen_tensor_free(a);
        fulmen_tensor_free(s);
    }
    return total;
}

static unsigned long loaded, resumed, inputs;

void fuzz_report(void) {
    printf("fuzz checkpoint: %lu inputs, %lu loaded as weights, %lu resumed a fit\n", inputs, loaded, resumed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    set_up();
    size_t before = fulmen_live_handles();
    char path[128];
    snprintf(path, sizeof path, "%s/input.ckpt", w.dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    fulmen_model *m = new_model();
    double was = fingerprint(m);
    fulmen_error *e = fulmen_model_load(m, path, size % 2 == 0);
    if (e != NULL && fingerprint(m) != was) {
        fprintf(stderr, "fuzz checkpoint: a failed load changed the model (%s)\n", fulmen_error_message(e));
        abort();
    }
    loaded += e == NULL;
    inputs++;
    check_error(e);
    fulmen_model_free(m);

    fulmen_trainer *t = new_trainer(3, false);
    e = fulmen_trainer_fit(t, w.module, w.loader, NULL, path);
    resumed += e == NULL;
    check_error(e);
    fulmen_trainer_free(t);
    unlink(path);
    if (fulmen_live_handles() != before) abort();
    return 0;
}

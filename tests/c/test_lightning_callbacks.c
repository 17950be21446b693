/*
 * ModelPruning, SpikeDetection and the prediction writer from C.
 *
 * ModelPruning: on the weights of the Python script in
 * src/callbacks/pruning_tests.rs (lr 0, so they do not move) the masks
 * after one epoch are torch.nn.utils.prune's, per parameter and global;
 * pruned weights stay 0 through the next epoch's steps; the handle's
 * arguments are copied; bad arguments, a count larger than what is left
 * and a parameter the model lacks are refused.
 * SpikeDetection: a loss 100 times larger at step 5, or a NaN loss, fails
 * the fit with FULMEN_CODE_NON_FINITE naming batch 5 and writes [4, 5] to
 * the JSON file; bad arguments are refused.
 * Prediction writer: each batch of a shuffled loader comes with its
 * samples' dataset indices (checked against the rows, sample i being
 * (i, -i, 0)), the epoch with all of them; the writer's error fails
 * predict; a call into the running trainer is refused; userdata_free runs
 * once, and not when adding fails.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    fulmen_model *model; /* first: fixture helpers read it */
    double lr;
    int64_t spike_step; /* global step whose loss is multiplied (-1: none) */
    double spike;       /* by this */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    int64_t g = 0;
    fulmen_error *e = fixture_cross_entropy(s->model, batch, out);
    if (e == NULL) e = fulmen_step_context_global_step(ctx, &g);
    if (e == NULL && g == s->spike_step) {
        fulmen_tensor *scaled = NULL;
        e = fulmen_tensor_mul_scalar(*out, s->spike, &scaled);
        if (e == NULL) *out = scaled; /* both are released with the step's tensors */
    }
    return e;
}

static fulmen_error *predict(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ud;
    (void)ctx;
    return fulmen_batch_get(batch, 0, out);
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    return fixture_add_sgd(config, s->model, s->lr, 0.0);
}

static fulmen_lightning_module *module_of(state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = step;
    vt.predict_step = predict;
    vt.configure_optimizers = configure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

/* `n` samples of `features` floats, sample i being (i, -i, 0, ...), labels i % 2. */
static fulmen_loader *counting_loader(size_t n, size_t features, size_t batch, bool shuffle, fulmen_dataset **ds) {
    float *x = calloc(n * features, sizeof(float));
    int64_t *y = malloc(n * sizeof(int64_t));
    if (x == NULL || y == NULL) exit(2);
    for (size_t i = 0; i < n; i++) {
        x[i * features] = (float)i;
        x[i * features + 1] = -(float)i;
        y[i] = (int64_t)(i % 2);
    }
    int64_t xs[2] = {(int64_t)n, (int64_t)features}, ys[1] = {(int64_t)n};
    fulmen_tensor *xt = check_f32(x, n * features, xs, 2), *yt = NULL;
    CHECK_OK(fulmen_tensor_from_data(y, n * sizeof(int64_t), FULMEN_DTYPE_I64, ys, 1, &yt));
    const fulmen_tensor *parts[2] = {xt, yt};
    CHECK_OK(fulmen_dataset_from_tensors(parts, 2, ds));
    fulmen_tensor_free(xt);
    fulmen_tensor_free(yt);
    free(x);
    free(y);
    return fixture_loader(*ds, batch, shuffle, 7);
}

static size_t numel_of(const fulmen_model *m, const char *name) {
    fulmen_tensor *t = NULL;
    size_t n = 0;
    CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
    CHECK_OK(fulmen_tensor_numel(t, &n));
    fulmen_tensor_free(t);
    return n;
}

/* The values of entry `name` (at most 64) into `v`; returns their count. */
static size_t values_of(const fulmen_model *m, const char *name, float *v) {
    fulmen_tensor *t = NULL;
    size_t n = numel_of(m, name);
    if (n > 64) exit(2);
    CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, v, n * sizeof(float)));
    fulmen_tensor_free(t);
    return n;
}

/* Whether the zeros of `name` are exactly the flat indices `want[0..k]`. */
static bool zeros_are(const fulmen_model *m, const char *name, const int *want, size_t k) {
    float v[64];
    size_t n = values_of(m, name, v), found = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] != 0.0f) continue;
        if (found >= k || want[found] != (int)i) return false;
        found++;
    }
    return found == k;
}

static size_t zeros_of(const fulmen_model *m, const char *name) {
    float v[64];
    size_t n = values_of(m, name, v), z = 0;
    for (size_t i = 0; i < n; i++) z += v[i] == 0.0f;
    return z;
}

static void set_values(fulmen_model *m, const char *name, const float *v) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
    CHECK_OK(fulmen_tensor_copy_from_host(t, v, numel_of(m, name) * sizeof(float), FULMEN_DTYPE_F32));
    fulmen_tensor_free(t);
}

/* Linear(3, 4), Linear(4, 2) with the Python script's weights. */
static fulmen_model *script_model(void) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(3, 4, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(4, 2, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    float w0[12], b0[4], w1[8], b1[2] = {0.05f, -0.02f};
    for (int i = 0; i < 12; i++) w0[i] = (float)sin(i * 1.7 + 0.3);
    for (int i = 0; i < 4; i++) b0[i] = (float)sin(i * 2.3);
    for (int i = 0; i < 8; i++) w1[i] = (float)cos(i * 0.9);
    set_values(m, "0.weight", w0);
    set_values(m, "0.bias", b0);
    set_values(m, "1.weight", w1);
    set_values(m, "1.bias", b1);
    return m;
}

static fulmen_trainer *quiet(int64_t epochs) {
    return fixture_trainer(NULL, epochs);
}

/* One epoch at lr 0 with `p`: the masks land on the unchanged weights. */
static void fit_script(fulmen_model_pruning *p, state *s, fulmen_loader *loader) {
    s->model = script_model();
    fulmen_lightning_module *m = module_of(s);
    fulmen_trainer *t = quiet(1);
    CHECK_OK(fulmen_trainer_add_model_pruning(t, p));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
}

static void test_masks_are_torchs(void) {
    fulmen_dataset *ds = NULL;
    fulmen_loader *loader = counting_loader(8, 3, 4, false, &ds);
    state s = {NULL, 0.0, -1, 1.0};
    fulmen_model_pruning *p = NULL;
    CHECK_OK(fulmen_model_pruning_new("l1_unstructured", 0.5, &p));
    const char *weight[1] = {"weight"};
    CHECK_OK(fulmen_model_pruning_set_parameter_names(p, weight, 1));
    CHECK_OK(fulmen_model_pruning_set_use_global_unstructured(p, false));
    CHECK_OK(fulmen_model_pruning_set_use_lottery_ticket_hypothesis(p, false));
    fit_script(p, &s, loader);
    const int local[6] = {0, 2, 5, 7, 9, 11};
    CHECK(zeros_are(s.model, "0.weight", local, 6));
    CHECK(zeros_of(s.model, "1.weight") == 4);
    fulmen_model_free(s.model);
    fulmen_model_pruning_free(p);

    /* global over every weight, then every bias */
    CHECK_OK(fulmen_model_pruning_new("L1_UNSTRUCTURED", 0.3, &p));
    CHECK_OK(fulmen_model_pruning_set_use_lottery_ticket_hypothesis(p, false));
    fit_script(p, &s, loader);
    const int w0[3] = {0, 9, 11}, w1[2] = {2, 5}, b0[1] = {0}, b1[2] = {0, 1};
    CHECK(zeros_are(s.model, "0.weight", w0, 3));
    CHECK(zeros_are(s.model, "1.weight", w1, 2));
    CHECK(zeros_are(s.model, "0.bias", b0, 1));
    CHECK(zeros_are(s.model, "1.bias", b1, 2));
    fulmen_model_free(s.model);

    /* a count larger than a parameter holds: torch's ValueError */
    CHECK_OK(fulmen_model_pruning_set_use_global_unstructured(p, false));
    CHECK_OK(fulmen_model_pruning_set_amount_count(p, 5));
    s.model = script_model();
    fulmen_lightning_module *m = module_of(&s);
    fulmen_trainer *t = quiet(1);
    CHECK_OK(fulmen_trainer_add_model_pruning(t, p));
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_OUT_OF_RANGE, "0.bias");
    fulmen_trainer_free(t);
    /* a parameter the model lacks */
    const char *names[2] = {"0.weight", "3.weight"};
    CHECK_OK(fulmen_model_pruning_set_parameters_to_prune(p, names, 2));
    t = quiet(1);
    CHECK_OK(fulmen_trainer_add_model_pruning(t, p));
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "3.weight");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    fulmen_model_pruning_free(p);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
}

typedef struct {
    fulmen_model *model;
    int64_t least; /* fewest weights at 0 seen after a batch of epoch 1 */
} watch;

static fulmen_error *watch_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    watch *w = ud;
    int64_t epoch = 0;
    fulmen_error *e = fulmen_hook_context_epoch(ctx, &epoch);
    if (e == NULL && hook == FULMEN_HOOK_TRAIN_BATCH_END && epoch == 1) {
        int64_t z = (int64_t)(zeros_of(w->model, "0.weight") + zeros_of(w->model, "2.weight"));
        if (z < w->least) w->least = z;
    }
    return e;
}

static void test_pruned_weights_stay_zero(void) {
    fulmen_dataset *ds = fixture_blobs(64, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 8, true, 3);
    CHECK_OK(fulmen_manual_seed(3));
    state s = {fixture_mlp(16, 0), 0.1, -1, 1.0};
    fulmen_lightning_module *m = module_of(&s);
    fulmen_model_pruning *p = NULL;
    CHECK_OK(fulmen_model_pruning_new("l1_unstructured", 0.5, &p));
    const char *weight[1] = {"weight"};
    CHECK_OK(fulmen_model_pruning_set_parameter_names(p, weight, 1));
    CHECK_OK(fulmen_model_pruning_set_verbose(p, 2));
    fulmen_trainer *t = quiet(2);
    CHECK_OK(fulmen_trainer_add_model_pruning(t, p));
    fulmen_model_pruning_free(p); /* the trainer keeps a copy */
    watch w = {s.model, 64};
    fulmen_callback_vtable vt = {sizeof vt, &w, NULL, watch_hook};
    CHECK_OK(fulmen_trainer_add_callback(t, "watch", &vt));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    /* 32 of the 64 weights pruned after epoch 0 stay 0; epoch 1 prunes 16 more */
    CHECK(w.least == 32);
    CHECK(zeros_of(s.model, "0.weight") + zeros_of(s.model, "2.weight") == 48);
    CHECK(zeros_of(s.model, "0.bias") == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
}

static void test_pruning_arguments(void) {
    fulmen_model_pruning *p = NULL;
    CHECK_ERR(fulmen_model_pruning_new("ln_structured", 0.5, &p), FULMEN_CODE_UNSUPPORTED, "structured");
    CHECK_ERR(fulmen_model_pruning_new("l2", 0.5, &p), FULMEN_CODE_INVALID_ARGUMENT, "l2");
    CHECK_ERR(fulmen_model_pruning_new("l1_unstructured", 1.5, &p), FULMEN_CODE_INVALID_ARGUMENT, "amount");
    CHECK_ERR(fulmen_model_pruning_new("l1_unstructured", NAN, &p), FULMEN_CODE_INVALID_ARGUMENT, "amount");
    CHECK_ERR(fulmen_model_pruning_new(NULL, 0.5, &p), FULMEN_CODE_NULL_ARGUMENT, "pruning_fn");
    CHECK(p == NULL);
    CHECK_OK(fulmen_model_pruning_new("random_unstructured", 0.5, &p));
    const char *bad[1] = {"gamma"}, *twice[2] = {"bias", "bias"};
    CHECK_ERR(fulmen_model_pruning_set_parameter_names(p, bad, 1), FULMEN_CODE_INVALID_ARGUMENT, "gamma");
    CHECK_ERR(fulmen_model_pruning_set_parameter_names(p, twice, 2), FULMEN_CODE_INVALID_ARGUMENT, "twice");
    CHECK_ERR(fulmen_model_pruning_set_parameter_names(p, NULL, 1), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_pruning_set_parameters_to_prune(p, NULL, (size_t)1 << 40), FULMEN_CODE_INVALID_ARGUMENT,
              "at most");
    CHECK_ERR(fulmen_model_pruning_set_amount_count(p, -1), FULMEN_CODE_INVALID_ARGUMENT, "amount");
    CHECK_ERR(fulmen_model_pruning_set_verbose(p, 3), FULMEN_CODE_INVALID_ARGUMENT, "verbose");
    CHECK_OK(fulmen_model_pruning_set_apply_pruning(p, false));
    CHECK_OK(fulmen_model_pruning_set_make_pruning_permanent(p, false));
    CHECK_OK(fulmen_model_pruning_set_prune_on_train_epoch_end(p, false));
    CHECK_ERR(fulmen_trainer_add_model_pruning(NULL, p), FULMEN_CODE_NULL_ARGUMENT, "trainer");
    fulmen_trainer *t = quiet(1);
    CHECK_ERR(fulmen_trainer_add_model_pruning(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "pruning");
    fulmen_trainer_free(t);
    fulmen_model_pruning_free(p);
    fulmen_model_pruning_free(NULL);
}

/* A fit of 2 epochs of 8 batches with SpikeDetection writing under `path`
 * (NULL: the default file under `root`), the loss times `spike` at step 5. */
static fulmen_error *spike_fit(const char *root, const char *path, double spike) {
    fulmen_dataset *ds = fixture_blobs(64, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 8, false, 0);
    CHECK_OK(fulmen_manual_seed(3));
    state s = {fixture_mlp(8, 0), 0.1, 5, spike};
    fulmen_lightning_module *m = module_of(&s);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "detect_nonfinite_loss", false));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_add_spike_detection(t, FULMEN_MODE_MIN, 10, 1, NAN, 2.0, path, true));
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return e;
}

static bool file_is(const char *path, const char *want) {
    char *text = fixture_read_text(path);
    bool same = text != NULL && strcmp(text, want) == 0;
    free(text);
    return same;
}

static void test_spike_detection(const char *root) {
    char path[600], file[700];
    snprintf(path, sizeof path, "%s/spikes/run.json", root);
    CHECK_ERR(spike_fit(root, path, 100.0), FULMEN_CODE_NON_FINITE, "Training spike detected in batch 5 (epoch 0)");
    CHECK(file_is(path, "[\n    4,\n    5\n]"));
    /* a NaN loss; the default file */
    CHECK_ERR(spike_fit(root, NULL, NAN), FULMEN_CODE_NON_FINITE, "batch 5");
    snprintf(file, sizeof file, "%s/skip_batches.json", root);
    CHECK(file_is(file, "[\n    4,\n    5\n]"));
    /* no spike: a fit that ends well writes nothing */
    snprintf(path, sizeof path, "%s/calm", root);
    CHECK_OK(spike_fit(root, path, 1.0));
    snprintf(file, sizeof file, "%s/calm/skip_batches.json", root);
    CHECK(fixture_read_text(file) == NULL);

    fulmen_trainer *t = quiet(1);
    CHECK_ERR(fulmen_trainer_add_spike_detection(t, 2, 10, 1, NAN, 2.0, NULL, true), FULMEN_CODE_INVALID_ARGUMENT,
              "mode");
    CHECK_ERR(fulmen_trainer_add_spike_detection(t, FULMEN_MODE_MAX, 0, 1, NAN, 2.0, NULL, true),
              FULMEN_CODE_INVALID_ARGUMENT, "window");
    CHECK_ERR(fulmen_trainer_add_spike_detection(t, FULMEN_MODE_MIN, 10, -1, NAN, 2.0, NULL, true),
              FULMEN_CODE_INVALID_ARGUMENT, "warmup");
    CHECK_ERR(fulmen_trainer_add_spike_detection(t, FULMEN_MODE_MIN, 10, 1, INFINITY, 2.0, NULL, true),
              FULMEN_CODE_INVALID_ARGUMENT, "atol");
    CHECK_ERR(fulmen_trainer_add_spike_detection(t, FULMEN_MODE_MIN, 10, 1, NAN, 2.0, "", true),
              FULMEN_CODE_INVALID_ARGUMENT, "empty");
    fulmen_trainer_free(t);
}

typedef struct {
    fulmen_trainer *trainer;
    int batches, epochs, freed;
    int64_t seen[64];
    size_t n_seen;
    int64_t epoch_seen[64];
    size_t n_epoch_seen;
    bool rows_match, reentry_refused, fail;
} writer;

static fulmen_error *write_batch(void *ud, const fulmen_tensor *prediction, const int64_t *indices, size_t n,
                                 const fulmen_tensor *const *batch, size_t batch_len, int64_t batch_idx,
                                 size_t dataloader_idx) {
    writer *w = ud;
    if (w->fail) return fulmen_error_new(FULMEN_CODE_IO, "the disk is full");
    int64_t g = 0;
    fulmen_error *e = fulmen_trainer_global_step(w->trainer, &g);
    w->reentry_refused = e != NULL && fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE;
    fulmen_error_free(e);
    float rows[64 * 3];
    if (prediction == NULL || n > 64 || batch_len != 2 || dataloader_idx != 0 || batch_idx != w->batches ||
        w->n_seen + n > 64) {
        w->rows_match = false;
        return NULL;
    }
    e = fulmen_tensor_copy_to(prediction, FULMEN_DTYPE_F32, rows, n * 3 * sizeof(float));
    if (e != NULL) return e;
    for (size_t r = 0; r < n; r++) {
        if (rows[3 * r] != (float)indices[r]) w->rows_match = false;
        w->seen[w->n_seen++] = indices[r];
    }
    (void)batch;
    w->batches++;
    return NULL;
}

static fulmen_error *write_epoch(void *ud, size_t dataloader_idx, const fulmen_tensor *const *predictions,
                                 size_t n_batches, const int64_t *indices, const size_t *counts) {
    writer *w = ud;
    size_t total = 0;
    w->epochs++;
    if (dataloader_idx != 0 || n_batches != 3) return fulmen_error_new(FULMEN_CODE_CALLBACK, "not 3 batches");
    for (size_t i = 0; i < n_batches; i++) {
        if (predictions[i] == NULL) return fulmen_error_new(FULMEN_CODE_CALLBACK, "a prediction is missing");
        total += counts[i];
    }
    if (total > 64) return fulmen_error_new(FULMEN_CODE_CALLBACK, "too many indices");
    for (size_t i = 0; i < total; i++) w->epoch_seen[w->n_epoch_seen++] = indices[i];
    return NULL;
}

static void free_writer(void *ud) {
    ((writer *)ud)->freed++;
}

static void test_prediction_writer(void) {
    fulmen_dataset *ds = NULL;
    fulmen_loader *loader = counting_loader(40, 3, 16, true, &ds);
    CHECK_OK(fulmen_manual_seed(3));
    fulmen_model *model = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&model));
    CHECK_OK(fulmen_model_linear_new(3, 2, true, &l));
    CHECK_OK(fulmen_model_push(model, l));
    state s = {model, 0.1, -1, 1.0};
    fulmen_lightning_module *m = module_of(&s);
    writer w;
    memset(&w, 0, sizeof w);
    w.rows_match = true;
    fulmen_trainer *t = quiet(1);
    w.trainer = t;
    /* refused: no epoch function for "epoch", an unknown interval; nothing freed */
    CHECK_ERR(fulmen_trainer_add_prediction_writer(t, "epoch", write_batch, NULL, &w, free_writer),
              FULMEN_CODE_NULL_ARGUMENT, "epoch");
    CHECK_ERR(fulmen_trainer_add_prediction_writer(t, "step", write_batch, write_epoch, &w, free_writer),
              FULMEN_CODE_INVALID_ARGUMENT, "write_interval");
    CHECK(w.freed == 0);
    CHECK_OK(fulmen_trainer_add_prediction_writer(t, "batch_and_epoch", write_batch, write_epoch, &w, free_writer));
    fulmen_tensor *out = NULL;
    CHECK_OK(fulmen_trainer_predict(t, m, loader, NULL, &out));
    fulmen_tensor_free(out);
    CHECK(w.batches == 3 && w.epochs == 1 && w.rows_match && w.reentry_refused);
    CHECK(w.n_seen == 40 && w.n_epoch_seen == 40);
    CHECK(memcmp(w.seen, w.epoch_seen, sizeof w.seen) == 0);
    bool each_once = true;
    for (int64_t i = 0; i < 40; i++) {
        int hits = 0;
        for (size_t j = 0; j < w.n_seen; j++) hits += w.seen[j] == i;
        each_once = each_once && hits == 1;
    }
    CHECK(each_once);
    bool shuffled = false;
    for (size_t j = 0; j < w.n_seen; j++) shuffled = shuffled || w.seen[j] != (int64_t)j;
    CHECK(shuffled);
    /* the writer's error fails predict */
    w.fail = true;
    CHECK_ERR(fulmen_trainer_predict(t, m, loader, NULL, &out), FULMEN_CODE_IO, "the disk is full");
    CHECK(w.freed == 0);
    fulmen_trainer_free(t);
    CHECK(w.freed == 1);
    fulmen_lightning_module_free(m);
    fulmen_model_free(model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
}

int main(void) {
    char root[] = "/tmp/fulmen-lightning-callbacks-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    test_masks_are_torchs();
    test_pruned_weights_stay_zero();
    test_pruning_arguments();
    test_spike_detection(root);
    test_prediction_writer();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_lightning_callbacks");
}

/*
 * fulmen_metric: accuracy, precision, recall, F1, AUROC, MAE, MSE and RMSE
 * on small cases worked out by hand; the bad calls; and the Lightning
 * pattern of a metric updated in validation_step, computed and logged in
 * on_validation_epoch_end (driving ModelCheckpoint), then reset.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>

static fulmen_tensor *floats(const float *v, const int64_t *shape, size_t ndim) {
    size_t n = 1;
    for (size_t i = 0; i < ndim; i++) n *= (size_t)shape[i];
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_from_data(v, n * sizeof *v, FULMEN_DTYPE_F32, shape, ndim, &t));
    return t;
}

static fulmen_tensor *labels(const int64_t *v, int64_t n) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_from_data(v, (size_t)n * sizeof *v, FULMEN_DTYPE_I64, &n, 1, &t));
    return t;
}

/* Builds `kind` over `classes` with `threshold` / `average`, feeds it
 * (preds, target) and returns the value. */
static double value_of(int32_t kind, int64_t classes, int32_t average, double threshold, const fulmen_tensor *preds,
                       const fulmen_tensor *target) {
    fulmen_metric_options o = fulmen_metric_options_default(kind, classes);
    o.average = average;
    o.threshold = threshold;
    fulmen_metric *m = NULL;
    double v = NAN;
    CHECK_OK(fulmen_metric_new(&o, &m));
    CHECK_OK(fulmen_metric_update(m, preds, target));
    CHECK_OK(fulmen_metric_compute(m, &v));
    fulmen_metric_free(m);
    return v;
}

/* Binary: probabilities [0.9, 0.2, 0.6, 0.4] for targets [1, 0, 0, 1]. */
static void test_binary(void) {
    const float p[4] = {0.9f, 0.2f, 0.6f, 0.4f};
    const int64_t shape[1] = {4}, y[4] = {1, 0, 0, 1};
    fulmen_tensor *preds = floats(p, shape, 1), *target = labels(y, 4);
    fulmen_metric_options d = fulmen_metric_options_default(FULMEN_METRIC_KIND_F1, 0);
    CHECK(d.threshold == 0.5 && d.average == FULMEN_AVERAGE_MACRO && d.thresholds == 0 && d.sync_on_compute);
    /* at 0.5: tp 1, fp 1, fn 1, tn 1 */
    CHECK(value_of(FULMEN_METRIC_KIND_ACCURACY, 0, 0, 0.5, preds, target) == 0.5);
    CHECK(value_of(FULMEN_METRIC_KIND_F1, 0, 0, 0.5, preds, target) == 0.5);
    /* at 0.3: tp 2, fp 1, fn 0, tn 1 */
    CHECK(value_of(FULMEN_METRIC_KIND_ACCURACY, 0, 0, 0.3, preds, target) == 0.75);
    CHECK_NEAR(value_of(FULMEN_METRIC_KIND_PRECISION, 0, 0, 0.3, preds, target), 2.0 / 3, 1e-12);
    CHECK(value_of(FULMEN_METRIC_KIND_RECALL, 0, 0, 0.3, preds, target) == 1.0);
    CHECK_NEAR(value_of(FULMEN_METRIC_KIND_F1, 0, 0, 0.3, preds, target), 0.8, 1e-12);
    /* AUROC: 3 of the 4 positive-negative pairs are ordered right */
    CHECK(value_of(FULMEN_METRIC_KIND_AUROC, 0, 0, 0.5, preds, target) == 0.75);
    fulmen_tensor_free(preds);
    fulmen_tensor_free(target);
}

/* Multiclass scores for 3 classes: predicted [0, 2, 2, 1], targets [0, 1, 2, 1]. */
static void test_multiclass(void) {
    const float s[12] = {3, 1, 0, 0, 1, 2, 0, 0, 5, 0, 4, 1};
    const int64_t shape[2] = {4, 3}, y[4] = {0, 1, 2, 1};
    fulmen_tensor *scores = floats(s, shape, 2), *target = labels(y, 4);
    /* per class (tp, fp, fn): 0 (1, 0, 0), 1 (1, 0, 1), 2 (1, 1, 0) */
    const int32_t k = FULMEN_METRIC_KIND_ACCURACY;
    CHECK(value_of(k, 3, FULMEN_AVERAGE_MICRO, 0.5, scores, target) == 0.75);
    CHECK_NEAR(value_of(k, 3, FULMEN_AVERAGE_MACRO, 0.5, scores, target), (1 + 0.5 + 1) / 3.0, 1e-12);
    CHECK_NEAR(value_of(k, 3, FULMEN_AVERAGE_WEIGHTED, 0.5, scores, target), (1 + 2 * 0.5 + 1) / 4.0, 1e-12);
    CHECK_NEAR(value_of(FULMEN_METRIC_KIND_PRECISION, 3, FULMEN_AVERAGE_MACRO, 0.5, scores, target), (1 + 1 + 0.5) / 3.0,
               1e-12);
    /* F1 per class: 1, 2/3, 2/3 */
    CHECK_NEAR(value_of(FULMEN_METRIC_KIND_F1, 3, FULMEN_AVERAGE_MACRO, 0.5, scores, target), (1 + 4 / 3.0) / 3.0, 1e-12);
    fulmen_tensor_free(scores);
    fulmen_tensor_free(target);
}

static void test_regression(void) {
    const float p[3] = {1, 2, 3}, t[3] = {1, 1, 5};
    const int64_t shape[1] = {3};
    fulmen_tensor *preds = floats(p, shape, 1), *target = floats(t, shape, 1);
    CHECK(value_of(FULMEN_METRIC_KIND_MEAN_ABSOLUTE_ERROR, 0, 0, 0.5, preds, target) == 1.0);
    CHECK_NEAR(value_of(FULMEN_METRIC_KIND_MEAN_SQUARED_ERROR, 0, 0, 0.5, preds, target), 5.0 / 3, 1e-12);
    CHECK_NEAR(value_of(FULMEN_METRIC_KIND_ROOT_MEAN_SQUARED_ERROR, 0, 0, 0.5, preds, target), sqrt(5.0 / 3), 1e-12);
    fulmen_tensor_free(preds);
    fulmen_tensor_free(target);
}

/* Accumulation over updates, reset, and the bad calls. */
static void test_state_and_errors(void) {
    const float p[4] = {0.9f, 0.2f, 0.6f, 0.4f};
    const int64_t shape[1] = {4}, y[4] = {1, 0, 0, 1}, y3[4] = {1, 0, 3, 1};
    fulmen_tensor *preds = floats(p, shape, 1), *target = labels(y, 4), *bad = labels(y3, 4);
    fulmen_metric_options o = fulmen_metric_options_default(FULMEN_METRIC_KIND_ACCURACY, 0);
    fulmen_metric *m = NULL;
    double v = NAN;
    CHECK_OK(fulmen_metric_new(&o, &m));
    CHECK_ERR(fulmen_metric_compute(m, &v), FULMEN_CODE_INVALID_STATE, "before any update");
    CHECK_OK(fulmen_metric_update(m, preds, target));
    CHECK_OK(fulmen_metric_update(m, preds, target));
    CHECK_OK(fulmen_metric_compute(m, &v));
    CHECK(v == 0.5);
    CHECK_ERR(fulmen_metric_update(m, preds, bad), FULMEN_CODE_INVALID_ARGUMENT, "class 3");
    CHECK_ERR(fulmen_metric_update(m, bad, target), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_OK(fulmen_metric_compute(m, &v));
    CHECK(v == 0.5); /* failed updates changed nothing */
    CHECK_OK(fulmen_metric_reset(m));
    CHECK_ERR(fulmen_metric_compute(m, &v), FULMEN_CODE_INVALID_STATE, NULL);
    CHECK_ERR(fulmen_metric_update(m, NULL, target), FULMEN_CODE_NULL_ARGUMENT, "preds");
    CHECK_ERR(fulmen_metric_compute(m, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_metric_update((fulmen_metric *)preds, preds, target), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_metric_free(m);
    CHECK_ERR(fulmen_metric_reset(m), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_metric_free(m); /* a second free is a no-op */

    fulmen_metric *none = NULL;
    o.kind = 42;
    CHECK_ERR(fulmen_metric_new(&o, &none), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_metric_kind");
    o = fulmen_metric_options_default(FULMEN_METRIC_KIND_F1, 1);
    CHECK_ERR(fulmen_metric_new(&o, &none), FULMEN_CODE_INVALID_ARGUMENT, "num_classes");
    o = fulmen_metric_options_default(FULMEN_METRIC_KIND_AUROC, 3);
    o.average = FULMEN_AVERAGE_MICRO;
    CHECK_ERR(fulmen_metric_new(&o, &none), FULMEN_CODE_INVALID_ARGUMENT, "micro");
    o = fulmen_metric_options_default(FULMEN_METRIC_KIND_AUROC, 0);
    o.thresholds = 1;
    CHECK_ERR(fulmen_metric_new(&o, &none), FULMEN_CODE_INVALID_ARGUMENT, "thresholds");
    o.thresholds = INT64_MAX;
    CHECK_ERR(fulmen_metric_new(&o, &none), FULMEN_CODE_INVALID_ARGUMENT, "thresholds");
    o = fulmen_metric_options_default(FULMEN_METRIC_KIND_ACCURACY, 0);
    o.average = 9;
    CHECK_ERR(fulmen_metric_new(&o, &none), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_average");
    CHECK_ERR(fulmen_metric_new(NULL, &none), FULMEN_CODE_NULL_ARGUMENT, NULL);
    o = fulmen_metric_options_default(FULMEN_METRIC_KIND_ACCURACY, 0);
    CHECK_ERR(fulmen_metric_new(&o, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(none == NULL);
    fulmen_tensor_free(preds);
    fulmen_tensor_free(target);
    fulmen_tensor_free(bad);
}

/* ---- in a fit: validation_step updates, on_validation_epoch_end logs ---- */

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    fulmen_metric *accuracy, *auroc;
    int64_t correct, seen;  /* counted by hand in validation_step */
    double by_hand[8];      /* correct / seen per validation run */
    double logged[8];       /* what the metric computed */
    int runs;
} fit_state;

static fulmen_error *train_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((fit_state *)ud)->model, batch, out);
}

static fulmen_error *val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fit_state *s = ud;
    (void)ctx;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *col = NULL, *prob1 = NULL, *probs = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(s->model, x, &logits);
    if (e == NULL) e = fulmen_metric_update(s->accuracy, logits, y);
    if (e == NULL) e = fulmen_tensor_softmax(logits, 1, &probs);
    if (e == NULL) e = fulmen_tensor_narrow(probs, 1, 1, 1, &col);
    if (e == NULL) e = fulmen_tensor_flatten(col, 0, -1, &prob1);
    if (e == NULL) e = fulmen_metric_update(s->auroc, prob1, y);
    if (e != NULL) return e;
    /* the same accuracy by hand */
    float l[2 * 64];
    int64_t labels_[64];
    size_t n = 0;
    CHECK_OK(fulmen_tensor_numel(y, &n));
    if (n > 64) return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "batch too large for the test");
    CHECK_OK(fulmen_tensor_copy_to(logits, FULMEN_DTYPE_F32, l, n * 2 * sizeof(float)));
    CHECK_OK(fulmen_tensor_copy_to(y, FULMEN_DTYPE_I64, labels_, n * sizeof(int64_t)));
    for (size_t i = 0; i < n; i++) s->correct += (l[2 * i + 1] > l[2 * i]) == (labels_[i] == 1);
    s->seen += (int64_t)n;
    return NULL;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fit_state *s = ud;
    if (hook != FULMEN_HOOK_VALIDATION_EPOCH_END || s->runs >= 8) return NULL;
    double acc = NAN, auc = NAN;
    fulmen_error *e = fulmen_metric_compute(s->accuracy, &acc);
    if (e == NULL) e = fulmen_metric_compute(s->auroc, &auc);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "val_acc", acc, FULMEN_LOG_PROG_BAR);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "val_auroc", auc, 0);
    if (e == NULL) e = fulmen_metric_reset(s->accuracy);
    if (e == NULL) e = fulmen_metric_reset(s->auroc);
    s->logged[s->runs] = acc;
    s->by_hand[s->runs++] = (double)s->correct / (double)s->seen;
    s->correct = s->seen = 0;
    return e;
}

static void test_in_a_fit(void) {
    char root[] = "/tmp/fulmen-metrics-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    /* Seeded: the weights do not depend on what ran before in this process. */
    CHECK_OK(fulmen_manual_seed(5));
    fit_state s = {.model = fixture_mlp(4, 0)};
    fulmen_metric_options o = fulmen_metric_options_default(FULMEN_METRIC_KIND_ACCURACY, 2);
    o.average = FULMEN_AVERAGE_MICRO;
    CHECK_OK(fulmen_metric_new(&o, &s.accuracy));
    o = fulmen_metric_options_default(FULMEN_METRIC_KIND_AUROC, 0);
    o.thresholds = 200;
    CHECK_OK(fulmen_metric_new(&o, &s.auroc));
    fulmen_dataset *train = fixture_blobs(64, 3, 1.5f), *val = fixture_blobs(40, 4, 1.5f);
    fulmen_loader *tl = fixture_loader(train, 16, true, 1), *vl = fixture_loader(val, 16, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = train_step;
    vt.validation_step = val_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    fulmen_trainer_options *opts = fixture_options(root, 3);
    CHECK_OK(fulmen_trainer_options_set_int(opts, "num_sanity_val_steps", 0));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(opts, &t));
    fulmen_model_checkpoint_options ck = fulmen_model_checkpoint_options_default();
    ck.monitor = "val_acc";
    ck.mode = FULMEN_MODE_MAX;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &ck));
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK(s.runs == 3);
    double best = -1, last = NAN, auc = NAN;
    for (int i = 0; i < s.runs; i++) {
        CHECK(s.logged[i] == s.by_hand[i]);
        if (s.logged[i] > best) best = s.logged[i];
    }
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_acc", &last));
    CHECK(last == s.logged[s.runs - 1]);
    CHECK_OK(fulmen_trainer_callback_metric(t, "val_auroc", &auc));
    printf("in a fit: val_acc %.4f, val_auroc %.4f\n", last, auc);
    CHECK(auc > 0.5 && auc <= 1.0); /* separable blobs */
    double score = NAN;
    CHECK_OK(fulmen_trainer_best_model_score(t, &score));
    CHECK(score == best);

    fulmen_trainer_free(t);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_metric_free(s.accuracy);
    fulmen_metric_free(s.auroc);
    fulmen_model_free(s.model);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
}

int main(void) {
    test_binary();
    test_multiclass();
    test_regression();
    test_state_and_errors();
    test_in_a_fit();
    return check_finish("test_metrics");
}

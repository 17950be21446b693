/*
 * fulmen_trainer_predict_batches: each batch's prediction as Lightning's
 * trainer.predict returns it (a list per loader; None for a batch that
 * returned nothing; a tuple when predict_step added tensors; a dict when
 * it named them; any nested value the step set whole), and
 * return_predictions=false keeping nothing; the same values in
 * on_predict_batch_end and a value prediction writer.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stdbool.h>
#include <string.h>

enum { RETURN_ONE = 0, RETURN_TUPLE = 1, SKIP_ODD = 2, RETURN_DICT = 3, DICT_AND_OUT = 4, NESTED = 5, NESTED_AND_OUT = 6 };

typedef struct {
    fulmen_model *model;
    int mode;
    int predict_calls;
    int add_in_training; /* code fulmen_step_context_add_prediction gave in training_step */
    int named_in_training; /* ... and fulmen_step_context_add_named_prediction */
    int mixed_codes[3];    /* a tuple then a name, a name then a tuple, a name twice */
    int nested_codes[3];   /* after a whole value: add, add named, set again */
} fixture;

/* {"logits": <logits>, "meta": (<input>, <batch_idx>, "tag")}: a nested
 * prediction set whole. */
static fulmen_error *set_nested(fixture *f, fulmen_step_context *ctx, fulmen_tensor *x, int64_t i,
                                fulmen_tensor **logits) {
    fulmen_value *vx = NULL, *vi = NULL, *vs = NULL, *meta = NULL, *vl = NULL, *k1 = NULL, *k2 = NULL, *d = NULL;
    fulmen_error *e = fulmen_model_forward(f->model, x, logits);
    if (e == NULL) e = fulmen_value_tensor(x, &vx);
    if (e == NULL) e = fulmen_value_int(i, &vi);
    if (e == NULL) e = fulmen_value_string("tag", &vs);
    const fulmen_value *items[3] = {vx, vi, vs};
    if (e == NULL) e = fulmen_value_tuple(items, 3, &meta);
    if (e == NULL) e = fulmen_value_tensor(*logits, &vl);
    if (e == NULL) e = fulmen_value_string("logits", &k1);
    if (e == NULL) e = fulmen_value_string("meta", &k2);
    const fulmen_value *keys[2] = {k1, k2}, *vals[2] = {vl, meta};
    if (e == NULL) e = fulmen_value_dict(keys, vals, 2, &d);
    if (e == NULL) e = fulmen_step_context_set_prediction(ctx, d);
    if (e == NULL) {
        f->nested_codes[0] = fixture_code(fulmen_step_context_add_prediction(ctx, x));
        f->nested_codes[1] = fixture_code(fulmen_step_context_add_named_prediction(ctx, "x", x));
        f->nested_codes[2] = fixture_code(fulmen_step_context_set_prediction(ctx, d));
    }
    fulmen_value *all[8] = {vx, vi, vs, meta, vl, k1, k2, d};
    for (int k = 0; k < 8; k++) fulmen_value_free(all[k]);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) f->add_in_training = fixture_code(fulmen_step_context_add_prediction(ctx, x));
    if (e == NULL) f->named_in_training = fixture_code(fulmen_step_context_add_named_prediction(ctx, "x", x));
    if (e == NULL) e = fixture_cross_entropy(f->model, batch, out);
    return e;
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    f->predict_calls++;
    int64_t i = 0;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    if (e == NULL && f->mode == SKIP_ODD && i % 2 == 1) return NULL;
    if (e == NULL) e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL && (f->mode == NESTED || f->mode == NESTED_AND_OUT)) {
        fulmen_tensor *logits = NULL;
        e = set_nested(f, ctx, x, i, &logits);
        if (f->mode == NESTED_AND_OUT) {
            *out = logits;
        } else {
            fulmen_tensor_free(logits);
        }
        return e;
    }
    if (e == NULL && (f->mode == RETURN_DICT || f->mode == DICT_AND_OUT)) {
        /* A dict: {"logits": ..., "input": ...}; the mixes are refused. */
        fulmen_tensor *logits = NULL;
        e = fulmen_model_forward(f->model, x, &logits);
        if (e == NULL) e = fulmen_step_context_add_named_prediction(ctx, "logits", logits);
        if (e == NULL) e = fulmen_step_context_add_named_prediction(ctx, "input", x);
        if (e == NULL) f->mixed_codes[1] = fixture_code(fulmen_step_context_add_prediction(ctx, x));
        if (e == NULL) f->mixed_codes[2] = fixture_code(fulmen_step_context_add_named_prediction(ctx, "input", x));
        if (e == NULL && f->mode == DICT_AND_OUT) *out = logits;
        return e;
    }
    if (e == NULL) e = fulmen_model_forward(f->model, x, out);
    if (e == NULL && f->mode == RETURN_TUPLE) {
        e = fulmen_step_context_add_prediction(ctx, x);
        if (e == NULL) f->mixed_codes[0] = fixture_code(fulmen_step_context_add_named_prediction(ctx, "x", x));
    }
    return e;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = fixture_configure_sgd;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

static int32_t kind_of(const fulmen_value *v) {
    int32_t k = -1;
    CHECK_OK(fulmen_value_get_kind(v, &k));
    return k;
}

static size_t len_of(const fulmen_value *v) {
    size_t n = 0;
    CHECK_OK(fulmen_value_len(v, &n));
    return n;
}

/* Item `i` of `v` (freed by the caller). */
static fulmen_value *item(const fulmen_value *v, size_t i) {
    fulmen_value *out = NULL;
    CHECK_OK(fulmen_value_item(v, i, &out));
    return out;
}

/* The shape (first two dimensions) of the tensor value `v`. */
static void shape_of(const fulmen_value *v, int64_t shape[2]) {
    fulmen_tensor *t = NULL;
    size_t ndim = 0;
    shape[0] = shape[1] = -1;
    CHECK_OK(fulmen_value_get_tensor(v, &t));
    CHECK_OK(fulmen_tensor_shape(t, shape, 2, &ndim));
    CHECK(ndim == 2);
    fulmen_tensor_free(t);
}

/* 10 samples in batches of 4: rows 4, 4, 2; each prediction a tensor of
 * shape (rows, 2). */
static void test_one_tensor_per_batch(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m,
                                      const fulmen_loader *l) {
    f->mode = RETURN_ONE;
    fulmen_value *out = NULL;
    CHECK_OK(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, &out));
    CHECK(out != NULL && kind_of(out) == FULMEN_VALUE_KIND_LIST && len_of(out) == 3);
    const int64_t rows[3] = {4, 4, 2};
    for (size_t i = 0; out != NULL && i < 3; i++) {
        fulmen_value *b = item(out, i);
        int64_t shape[2];
        CHECK(kind_of(b) == FULMEN_VALUE_KIND_TENSOR);
        shape_of(b, shape);
        CHECK(shape[0] == rows[i] && shape[1] == 2);
        fulmen_value_free(b);
    }
    fulmen_value_free(out);
}

/* A step that adds a tensor makes its batch's prediction a tuple
 * (returned, added); the concatenating predict still gives the returned
 * tensors only. */
static void test_tuples(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m, const fulmen_loader *l) {
    f->mode = RETURN_TUPLE;
    fulmen_value *out = NULL;
    CHECK_OK(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, &out));
    CHECK(out != NULL && len_of(out) == 3);
    for (size_t i = 0; out != NULL && i < 3; i++) {
        fulmen_value *b = item(out, i);
        CHECK(kind_of(b) == FULMEN_VALUE_KIND_TUPLE && len_of(b) == 2);
        fulmen_value *added = item(b, 1);
        int64_t shape[2];
        shape_of(added, shape);
        CHECK(shape[0] == (i < 2 ? 4 : 2) && shape[1] == 2);
        fulmen_value_free(added);
        fulmen_value_free(b);
    }
    fulmen_value_free(out);
    fulmen_tensor *cat = NULL;
    int64_t shape[2] = {0, 0};
    size_t ndim = 0;
    CHECK_OK(fulmen_trainer_predict(t, m, l, NULL, &cat));
    CHECK_OK(fulmen_tensor_shape(cat, shape, 2, &ndim));
    CHECK(ndim == 2 && shape[0] == 10);
    fulmen_tensor_free(cat);
}

/* A batch that returned nothing is None in its place (Lightning's list
 * keeps it); two loaders give a list of two lists. */
static void test_none_and_loaders(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m, const fulmen_loader *l,
                                  const fulmen_loader *l2) {
    f->mode = SKIP_ODD;
    const fulmen_loader *both[2] = {l, l2};
    fulmen_value *out = NULL;
    CHECK_OK(fulmen_trainer_predict_batches(t, m, both, 2, NULL, true, &out));
    CHECK(out != NULL && kind_of(out) == FULMEN_VALUE_KIND_LIST && len_of(out) == 2);
    if (out == NULL) return;
    fulmen_value *first = item(out, 0), *second = item(out, 1);
    CHECK(len_of(first) == 3 && len_of(second) == 5);
    fulmen_value *b0 = item(first, 0), *b1 = item(first, 1);
    CHECK(kind_of(b0) == FULMEN_VALUE_KIND_TENSOR && kind_of(b1) == FULMEN_VALUE_KIND_NONE);
    fulmen_value_free(b0);
    fulmen_value_free(b1);
    fulmen_value_free(first);
    fulmen_value_free(second);
    fulmen_value_free(out);
}

/* A step that names what it adds makes its batch's prediction a dict of
 * string keys, in the order added; a tuple and a dict do not mix, a name
 * comes once, and a dict step that writes *out too fails the run. */
static void test_dicts(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m, const fulmen_loader *l) {
    f->mode = RETURN_DICT;
    fulmen_value *out = NULL;
    CHECK_OK(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, &out));
    CHECK(out != NULL && len_of(out) == 3);
    for (size_t i = 0; out != NULL && i < 3; i++) {
        fulmen_value *b = item(out, i);
        CHECK(kind_of(b) == FULMEN_VALUE_KIND_DICT && len_of(b) == 2);
        const char *keys[2] = {"logits", "input"};
        const int64_t cols[2] = {2, 2};
        for (size_t k = 0; k < 2 && kind_of(b) == FULMEN_VALUE_KIND_DICT; k++) {
            fulmen_value *key = NULL, *val = NULL;
            CHECK_OK(fulmen_value_dict_entry(b, k, &key, &val));
            char name[32] = {0};
            size_t len = 0;
            CHECK_OK(fulmen_value_get_string(key, name, sizeof name, &len));
            CHECK(strcmp(name, keys[k]) == 0);
            int64_t shape[2];
            shape_of(val, shape);
            CHECK(shape[0] == (i < 2 ? 4 : 2) && shape[1] == cols[k]);
            fulmen_value_free(key);
            fulmen_value_free(val);
        }
        fulmen_value_free(b);
    }
    fulmen_value_free(out);
    CHECK(f->mixed_codes[0] == FULMEN_CODE_INVALID_STATE); /* from the tuple test */
    CHECK(f->mixed_codes[1] == FULMEN_CODE_INVALID_STATE);
    CHECK(f->mixed_codes[2] == FULMEN_CODE_INVALID_ARGUMENT);
    fulmen_tensor *cat = NULL;
    CHECK_ERR(fulmen_trainer_predict(t, m, l, NULL, &cat), FULMEN_CODE_UNSUPPORTED, "predict_batches");
    CHECK(cat == NULL);
    f->mode = DICT_AND_OUT;
    CHECK_ERR(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, &out), FULMEN_CODE_INVALID_STATE,
              "named its predictions (a dict) and returned a tensor too");
    CHECK(out == NULL);
}

/* A prediction set whole comes back as it was set, in each batch's
 * place; mixing it with added tensors or an output is refused, and predict
 * cannot concatenate it. */
static void test_nested(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m, const fulmen_loader *l) {
    f->mode = NESTED;
    fulmen_value *out = NULL;
    CHECK_OK(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, &out));
    CHECK(out != NULL && len_of(out) == 3);
    for (size_t i = 0; out != NULL && i < 3; i++) {
        fulmen_value *b = item(out, i), *logits = NULL, *meta = NULL;
        CHECK(kind_of(b) == FULMEN_VALUE_KIND_DICT && len_of(b) == 2);
        CHECK_OK(fulmen_value_dict_get(b, "logits", &logits));
        CHECK_OK(fulmen_value_dict_get(b, "meta", &meta));
        int64_t shape[2];
        shape_of(logits, shape);
        CHECK(shape[0] == (i < 2 ? 4 : 2) && shape[1] == 2);
        CHECK(kind_of(meta) == FULMEN_VALUE_KIND_TUPLE && len_of(meta) == 3);
        fulmen_value *idx = item(meta, 1), *tag = item(meta, 2);
        int64_t got = -1;
        CHECK_OK(fulmen_value_get_int(idx, &got));
        CHECK(got == (int64_t)i);
        char name[8] = {0};
        size_t len = 0;
        CHECK_OK(fulmen_value_get_string(tag, name, sizeof name, &len));
        CHECK(strcmp(name, "tag") == 0);
        fulmen_value *all[5] = {b, logits, meta, idx, tag};
        for (int k = 0; k < 5; k++) fulmen_value_free(all[k]);
    }
    fulmen_value_free(out);
    CHECK(f->nested_codes[0] == FULMEN_CODE_INVALID_STATE);
    CHECK(f->nested_codes[1] == FULMEN_CODE_INVALID_STATE);
    CHECK(f->nested_codes[2] == FULMEN_CODE_INVALID_STATE);
    fulmen_tensor *cat = NULL;
    CHECK_ERR(fulmen_trainer_predict(t, m, l, NULL, &cat), FULMEN_CODE_UNSUPPORTED, "predict_batches");
    CHECK(cat == NULL);
    f->mode = NESTED_AND_OUT;
    CHECK_ERR(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, &out), FULMEN_CODE_INVALID_STATE,
              "set its whole prediction and returned a tensor too");
    CHECK(out == NULL);
}

/* What the hook and the value writer saw. */
typedef struct {
    int hook_kinds[8];    /* kind of each on_predict_batch_end prediction */
    int n_hook;
    int start_code;       /* fulmen_hook_context_prediction in on_predict_batch_start */
    int batch_kinds[8];   /* kind of each prediction the batch writer got */
    int n_batch;
    int64_t batch_rows[8]; /* rows of its first tensor ("logits" in a dict) */
    size_t epoch_len;     /* batches in the epoch writer's list */
    int epoch_kind;       /* the list's kind */
    int epoch_item_kinds[8];
    int kept_kind;        /* a value kept past the hook */
    fulmen_value *kept;
} seen_t;

/* The rows of the first tensor of prediction `v` (a tensor, a tuple's
 * first, a dict's "logits"); -1 for None. */
static int64_t first_rows(const fulmen_value *v) {
    int32_t k = kind_of(v);
    if (k == FULMEN_VALUE_KIND_NONE) return -1;
    fulmen_value *first = NULL;
    if (k == FULMEN_VALUE_KIND_TUPLE) CHECK_OK(fulmen_value_item(v, 0, &first));
    if (k == FULMEN_VALUE_KIND_DICT) CHECK_OK(fulmen_value_dict_get(v, "logits", &first));
    int64_t shape[2] = {-1, -1};
    shape_of(first != NULL ? first : v, shape);
    fulmen_value_free(first);
    return shape[0];
}

static fulmen_error *seeing_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    seen_t *s = ud;
    fulmen_value *v = NULL;
    if (hook == FULMEN_HOOK_PREDICT_BATCH_START) {
        s->start_code = fixture_code(fulmen_hook_context_prediction(ctx, &v));
        return NULL;
    }
    if (hook != FULMEN_HOOK_PREDICT_BATCH_END) return NULL;
    fulmen_error *e = fulmen_hook_context_prediction(ctx, &v);
    if (e != NULL) return e;
    if (s->n_hook < 8) s->hook_kinds[s->n_hook++] = kind_of(v);
    if (s->kept == NULL) { /* the first one outlives the hook */
        e = fulmen_value_keep(v);
        s->kept = v;
    }
    return e;
}

static fulmen_error *value_batch(void *ud, const fulmen_value *prediction, const int64_t *indices, size_t n_indices,
                                 const fulmen_tensor *const *batch, size_t batch_len, int64_t batch_idx,
                                 size_t dataloader_idx) {
    seen_t *s = ud;
    (void)indices;
    (void)batch;
    (void)dataloader_idx;
    CHECK(n_indices == (batch_idx < 2 ? 4u : 2u) && batch_len == 2);
    if (s->n_batch < 8) {
        s->batch_kinds[s->n_batch] = kind_of(prediction);
        s->batch_rows[s->n_batch++] = first_rows(prediction);
    }
    return NULL;
}

static fulmen_error *value_epoch(void *ud, size_t dataloader_idx, const fulmen_value *predictions, size_t n_batches,
                                 const int64_t *indices, const size_t *counts) {
    seen_t *s = ud;
    (void)indices;
    CHECK(dataloader_idx == 0 && counts != NULL);
    s->epoch_kind = kind_of(predictions);
    s->epoch_len = len_of(predictions);
    CHECK(s->epoch_len == n_batches);
    for (size_t i = 0; i < n_batches && i < 8; i++) {
        fulmen_value *b = item(predictions, i);
        s->epoch_item_kinds[i] = kind_of(b);
        fulmen_value_free(b);
    }
    return NULL;
}

/* on_predict_batch_end and a value writer get each batch's whole
 * prediction: a dict, a tuple, None; the tensor writer still takes
 * tensors only. */
static void test_hook_and_writer_values(fixture *f, fulmen_lightning_module *m, const fulmen_loader *l) {
    const int modes[3] = {RETURN_DICT, RETURN_TUPLE, SKIP_ODD};
    const int want[3] = {FULMEN_VALUE_KIND_DICT, FULMEN_VALUE_KIND_TUPLE, FULMEN_VALUE_KIND_TENSOR};
    for (int r = 0; r < 3; r++) {
        seen_t s;
        memset(&s, 0, sizeof s);
        s.start_code = -1;
        fulmen_trainer *t = fixture_trainer(NULL, 1);
        fulmen_callback_vtable vt = {sizeof vt, &s, NULL, seeing_hook};
        CHECK_OK(fulmen_trainer_add_callback(t, "Seeing", &vt));
        CHECK_ERR(fulmen_trainer_add_prediction_value_writer(t, "epoch", value_batch, NULL, &s, NULL),
                  FULMEN_CODE_NULL_ARGUMENT, "epoch writer");
        CHECK_OK(fulmen_trainer_add_prediction_value_writer(t, "batch_and_epoch", value_batch, value_epoch, &s, NULL));
        f->mode = modes[r];
        fulmen_value *none = NULL;
        CHECK_OK(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, false, &none));
        CHECK(none == NULL);
        CHECK(s.start_code == FULMEN_CODE_INVALID_STATE);
        CHECK(s.n_hook == 3 && s.n_batch == 3 && s.epoch_len == 3 && s.epoch_kind == FULMEN_VALUE_KIND_LIST);
        for (int i = 0; i < 3; i++) {
            int k = (modes[r] == SKIP_ODD && i == 1) ? FULMEN_VALUE_KIND_NONE : want[r];
            CHECK(s.hook_kinds[i] == k && s.batch_kinds[i] == k && s.epoch_item_kinds[i] == k);
            CHECK(s.batch_rows[i] == (k == FULMEN_VALUE_KIND_NONE ? -1 : (i < 2 ? 4 : 2)));
        }
        CHECK(s.kept != NULL && kind_of(s.kept) == want[r]); /* kept: still readable */
        fulmen_value_free(s.kept);
        fulmen_trainer_free(t);
    }
}

/* return_predictions false: the steps run, nothing comes back. */
static void test_no_return(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m, const fulmen_loader *l) {
    f->mode = RETURN_ONE;
    f->predict_calls = 0;
    fulmen_value *junk = NULL, *out = NULL;
    CHECK_OK(fulmen_value_none(&junk));
    out = junk; /* overwritten with NULL */
    CHECK_OK(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, false, &out));
    CHECK(out == NULL && f->predict_calls == 3);
    fulmen_value_free(junk);
    CHECK_ERR(fulmen_trainer_predict_batches(t, m, &l, 0, NULL, true, &out), FULMEN_CODE_INVALID_ARGUMENT, "loaders");
    CHECK(out == NULL);
    CHECK_ERR(fulmen_trainer_predict_batches(t, m, &l, 1, NULL, true, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
}

/* Outside predict_step a prediction cannot be added. */
static void test_add_outside_predict(fixture *f, fulmen_lightning_module *m, const fulmen_loader *l) {
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(f->add_in_training == FULMEN_CODE_INVALID_STATE);
    CHECK(f->named_in_training == FULMEN_CODE_INVALID_STATE);
    fulmen_trainer_free(t);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(5));
    fixture f = {fixture_mlp(8, 0.0), RETURN_ONE, 0, 0, 0, {0, 0, 0}, {0, 0, 0}};
    fulmen_dataset *ds = fixture_blobs(10, 1, 1.0f), *ds2 = fixture_blobs(18, 2, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 4, false, 0), *l2 = fixture_loader(ds2, 4, false, 0);
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    test_one_tensor_per_batch(&f, t, m, l);
    test_tuples(&f, t, m, l);
    test_dicts(&f, t, m, l);
    test_nested(&f, t, m, l);
    test_none_and_loaders(&f, t, m, l, l2);
    test_no_return(&f, t, m, l);
    test_hook_and_writer_values(&f, m, l);
    test_add_outside_predict(&f, m, l);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_loader_free(l2);
    fulmen_dataset_free(ds);
    fulmen_dataset_free(ds2);
    fulmen_model_free(f.model);
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_predict_batches");
}

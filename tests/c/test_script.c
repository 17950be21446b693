/*
 * Tests of TorchScript models from C (fixtures from
 * scripts/make_torchscript_fixture.py): buffers in the state_dict, values
 * of every kind in and out of scripted methods, a model trained by the
 * trainer through its scripted training_step / validation_step, saved back
 * as .pt and reloaded with the same predictions; moving and casting; clear
 * errors for bad values, methods, devices and non-script models; method
 * results bounded like the host's values.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdint.h>
#include <unistd.h>

static const char *fixture_path(const char *name, char *buf, size_t cap) {
    const char *dir = getenv("FULMEN_FIXTURES");
    snprintf(buf, cap, "%s/%s", dir ? dir : "tests/fixtures", name);
    return buf;
}

static fulmen_model *load(const char *name) {
    char path[1024];
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_load_torchscript_on(fixture_path(name, path, sizeof path), FULMEN_DEVICE_TYPE_CPU, 0, &m));
    return m;
}

static fulmen_tensor *f32(const float *v, size_t n, const int64_t *shape, size_t ndim) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_from_data(v, n * sizeof(float), FULMEN_DTYPE_F32, shape, ndim, &t));
    return t;
}

static fulmen_tensor *i64(const int64_t *v, size_t n) {
    fulmen_tensor *t = NULL;
    const int64_t shape[1] = {(int64_t)n};
    CHECK_OK(fulmen_tensor_from_data(v, n * sizeof(int64_t), FULMEN_DTYPE_I64, shape, 1, &t));
    return t;
}

static double item(const fulmen_tensor *t) {
    double v = NAN;
    CHECK_OK(fulmen_tensor_item(t, &v));
    return v;
}

static fulmen_value *tensor_value(const fulmen_tensor *t) {
    fulmen_value *v = NULL;
    CHECK_OK(fulmen_value_tensor(t, &v));
    return v;
}

/* The BatchNorm's buffers are in the state_dict, in PyTorch's order. */
static void test_buffers(void) {
    fulmen_model *m = load("tabular_scripted.pt"), *bad = NULL;
    if (m == NULL) return;
    size_t n = 0, len = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &n));
    CHECK(n == 10);
    char name[64];
    CHECK_OK(fulmen_model_state_dict_name(m, 3, name, sizeof name, &len));
    CHECK(strcmp(name, "norm.running_mean") == 0);
    CHECK_OK(fulmen_model_state_dict_name(m, 5, name, sizeof name, &len));
    CHECK(strcmp(name, "norm.num_batches_tracked") == 0);
    /* casting keeps the integer buffer */
    CHECK_OK(fulmen_model_to_dtype(m, FULMEN_DTYPE_F64));
    fulmen_tensor *t = NULL;
    int32_t dt = -1;
    CHECK_OK(fulmen_model_state_dict_get(m, "norm.num_batches_tracked", &t));
    CHECK_OK(fulmen_tensor_dtype(t, &dt));
    CHECK(dt == FULMEN_DTYPE_I64);
    fulmen_tensor_free(t);
    CHECK_OK(fulmen_model_state_dict_get(m, "norm.running_var", &t));
    CHECK_OK(fulmen_tensor_dtype(t, &dt));
    CHECK(dt == FULMEN_DTYPE_F64);
    fulmen_tensor_free(t);
    CHECK_ERR(fulmen_model_to_dtype(m, FULMEN_DTYPE_I32), FULMEN_CODE_DTYPE_MISMATCH, NULL);
    CHECK_OK(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_CPU, 0));
    CHECK_ERR(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_CUDA, 99), FULMEN_CODE_UNAVAILABLE, NULL);
    CHECK_ERR(fulmen_model_to_device(m, 42, 0), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_device_type");
    /* A vendor's device type with no backend in this process. */
    CHECK_ERR(fulmen_model_to_device(m, FULMEN_DEVICE_TYPE_XPU, 0), FULMEN_CODE_UNAVAILABLE, "no xpu backend");
    char path[1024];
    fixture_path("tabular_scripted.pt", path, sizeof path);
    CHECK_ERR(fulmen_model_load_torchscript_on(path, FULMEN_DEVICE_TYPE_CUDA, 99, &bad), FULMEN_CODE_UNAVAILABLE, NULL);
    CHECK_ERR(fulmen_model_load_torchscript_on(path, FULMEN_DEVICE_TYPE_CPU, -1, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              NULL);
    CHECK(bad == NULL);
    fulmen_model_free(m);
}

/* Every kind of value goes in and comes back. */
static void test_values(void) {
    fulmen_model *m = load("values_scripted.pt");
    if (m == NULL) return;
    const int64_t shape[1] = {2};
    const float xv[2] = {1.0f, -2.0f}, yv[2] = {0.5f, 0.5f};
    fulmen_tensor *x = f32(xv, 2, shape, 1), *y = f32(yv, 2, shape, 1), *got = NULL;
    /* forward(x, None) -> (x * scale, x) */
    fulmen_value *args[5] = {tensor_value(x), NULL}, *out = NULL, *first = NULL;
    CHECK_OK(fulmen_value_none(&args[1]));
    CHECK_OK(fulmen_model_call_method(m, NULL, "forward", (const fulmen_value *const *)args, 2, &out));
    int32_t kind = -1;
    size_t len = 0;
    CHECK_OK(fulmen_value_get_kind(out, &kind));
    CHECK(kind == FULMEN_VALUE_KIND_TUPLE);
    CHECK_OK(fulmen_value_len(out, &len));
    CHECK(len == 2);
    CHECK_OK(fulmen_value_item(out, 0, &first));
    CHECK_OK(fulmen_value_get_tensor(first, &got));
    float buf[2];
    CHECK_OK(fulmen_tensor_copy_to(got, FULMEN_DTYPE_F32, buf, sizeof buf));
    CHECK(buf[0] == 2.0f && buf[1] == -4.0f);
    CHECK_ERR(fulmen_value_item(out, 2, &first), FULMEN_CODE_OUT_OF_RANGE, "index 2");
    CHECK_ERR(fulmen_value_get_int(out, &(int64_t){0}), FULMEN_CODE_DTYPE_MISMATCH, "Tuple");
    fulmen_tensor_free(got);
    fulmen_value_free(first);
    fulmen_value_free(out);
    fulmen_value_free(args[1]);
    /* forward_multi splits the tuple and takes NULL as None */
    const fulmen_tensor *ins[2] = {x, y};
    fulmen_tensor *outs[2] = {NULL, NULL};
    size_t count = 0;
    CHECK_OK(fulmen_model_forward_multi(m, NULL, ins, 2, outs, 2, &count));
    CHECK(count == 2);
    CHECK_OK(fulmen_tensor_copy_to(outs[1], FULMEN_DTYPE_F32, buf, sizeof buf));
    CHECK(buf[0] == 1.5f && buf[1] == -1.5f);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, ins, 2, outs, 1, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    /* mix(xs: List[Tensor], weights: Dict[str, float], flip, k, label) -> Dict[str, List[Tensor]] */
    fulmen_value *items[2] = {args[0], tensor_value(y)}, *key = NULL, *w = NULL;
    CHECK_OK(fulmen_value_list((const fulmen_value *const *)items, 2, &args[0]));
    fulmen_value_free(items[0]);
    fulmen_value_free(items[1]);
    CHECK_OK(fulmen_value_string("w", &key));
    CHECK_OK(fulmen_value_double(3.0, &w));
    CHECK_OK(fulmen_value_dict((const fulmen_value *const *)&key, (const fulmen_value *const *)&w, 1, &args[1]));
    CHECK_OK(fulmen_value_bool(true, &args[2]));
    CHECK_OK(fulmen_value_int(1, &args[3]));
    CHECK_OK(fulmen_value_string("out", &args[4]));
    CHECK_OK(fulmen_model_call_method(m, "", "mix", (const fulmen_value *const *)args, 5, &out));
    fulmen_value *list = NULL, *second = NULL, *k = NULL;
    CHECK_OK(fulmen_value_dict_get(out, "out", &list));
    CHECK_ERR(fulmen_value_dict_get(out, "nope", &k), FULMEN_CODE_INVALID_ARGUMENT, "\"out\"");
    CHECK_OK(fulmen_value_dict_entry(out, 0, &k, NULL));
    char s[8];
    CHECK_OK(fulmen_value_get_string(k, s, sizeof s, &len));
    CHECK(strcmp(s, "out") == 0 && len == 3);
    CHECK_ERR(fulmen_value_get_string(k, s, 2, &len), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_OK(fulmen_value_item(list, 1, &second));
    CHECK_OK(fulmen_value_get_tensor(second, &got));
    CHECK_OK(fulmen_tensor_copy_to(got, FULMEN_DTYPE_F32, buf, sizeof buf));
    CHECK(buf[0] == -2.5f && buf[1] == -2.5f); /* -(0.5 * 3 + 1) */
    fulmen_tensor_free(got);
    fulmen_value *done[] = {out, list, second, k, key, w};
    for (size_t i = 0; i < sizeof done / sizeof done[0]; i++) fulmen_value_free(done[i]);
    /* describe(n, f, ints) -> (int, float, bool, str, None, List[int]) */
    fulmen_value *d[3] = {NULL, NULL, NULL}, *ints[2] = {NULL, NULL}, *part = NULL;
    CHECK_OK(fulmen_value_int(3, &d[0]));
    CHECK_OK(fulmen_value_int(1, &d[1])); /* an int where a float is expected is refused, as in TorchScript */
    CHECK_OK(fulmen_value_int(4, &ints[0]));
    CHECK_OK(fulmen_value_int(5, &ints[1]));
    CHECK_OK(fulmen_value_list((const fulmen_value *const *)ints, 2, &d[2]));
    CHECK_ERR(fulmen_model_call_method(m, NULL, "describe", (const fulmen_value *const *)d, 3, &out), FULMEN_CODE_TORCH,
              "describe");
    fulmen_value_free(d[1]);
    CHECK_OK(fulmen_value_double(1.0, &d[1]));
    CHECK_OK(fulmen_model_call_method(m, NULL, "describe", (const fulmen_value *const *)d, 3, &out));
    int64_t iv = 0;
    double dv = 0;
    bool bv = false;
    CHECK_OK(fulmen_value_item(out, 0, &part));
    CHECK_OK(fulmen_value_get_int(part, &iv));
    CHECK(iv == 6);
    CHECK_OK(fulmen_value_get_double(part, &dv)); /* ints read as floats */
    CHECK(dv == 6.0);
    fulmen_value_free(part);
    CHECK_OK(fulmen_value_item(out, 2, &part));
    CHECK_OK(fulmen_value_get_bool(part, &bv));
    CHECK(bv);
    fulmen_value_free(part);
    CHECK_OK(fulmen_value_item(out, 4, &part));
    CHECK_OK(fulmen_value_get_kind(part, &kind));
    CHECK(kind == FULMEN_VALUE_KIND_NONE);
    fulmen_value_free(part);
    CHECK_OK(fulmen_value_item(out, 5, &part));
    CHECK_OK(fulmen_value_len(part, &len));
    CHECK(len == 3);
    fulmen_value_free(part);
    fulmen_value_free(out);
    /* errors: unknown method (lists them), too many arguments, NULLs */
    CHECK_ERR(fulmen_model_call_method(m, NULL, "nope", NULL, 0, &out), FULMEN_CODE_INVALID_ARGUMENT, "describe");
    CHECK_ERR(fulmen_model_call_method(m, NULL, "describe", NULL, 3, &out), FULMEN_CODE_NULL_ARGUMENT, "args");
    CHECK_ERR(fulmen_model_call_method(m, NULL, "describe", (const fulmen_value *const *)d, FULMEN_MAX_METHOD_ARGS + 1,
                                       &out),
              FULMEN_CODE_INVALID_ARGUMENT, "FULMEN_MAX_METHOD_ARGS");
    CHECK_ERR(fulmen_model_call_method(m, "child", "describe", (const fulmen_value *const *)d, 3, &out),
              FULMEN_CODE_INVALID_ARGUMENT, "child");
    CHECK_ERR(fulmen_model_call_method(m, NULL, NULL, NULL, 0, &out), FULMEN_CODE_NULL_ARGUMENT, "method");
    const fulmen_value *wrong[1] = {(const fulmen_value *)x};
    CHECK_ERR(fulmen_model_call_method(m, NULL, "describe", wrong, 1, &out), FULMEN_CODE_INVALID_HANDLE, "args[0]");
    /* mixed dict keys are refused */
    fulmen_value *mixed = NULL, *keys[2] = {d[0], NULL};
    CHECK_OK(fulmen_value_string("a", &keys[1]));
    CHECK_ERR(fulmen_value_dict((const fulmen_value *const *)keys, (const fulmen_value *const *)keys, 2, &mixed),
              FULMEN_CODE_INVALID_ARGUMENT, "dict keys");
    CHECK(mixed == NULL);
    fulmen_value *rest[] = {mixed, keys[1], d[0], d[1], d[2], ints[0], ints[1], args[0], args[1], args[2], args[3], args[4]};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) fulmen_value_free(rest[i]);
    /* values nest at most FULMEN_MAX_VALUE_DEPTH deep */
    fulmen_value *deep = NULL, *next = NULL;
    CHECK_OK(fulmen_value_none(&deep));
    int levels = 0;
    fulmen_error *deep_err = NULL;
    while (levels < FULMEN_MAX_VALUE_DEPTH + 5) {
        deep_err = fulmen_value_list((const fulmen_value *const *)&deep, 1, &next);
        if (deep_err != NULL) break;
        fulmen_value_free(deep);
        deep = next;
        levels++;
    }
    CHECK(levels == FULMEN_MAX_VALUE_DEPTH);
    CHECK(deep_err != NULL && fulmen_error_code(deep_err) == FULMEN_CODE_INVALID_ARGUMENT);
    fulmen_error_free(deep_err);
    fulmen_value_free(deep);
    /* a chain of lists that doubles at every level is refused before it grows */
    fulmen_value *chain = NULL, *twice[2];
    CHECK_OK(fulmen_value_int(1, &chain));
    int doublings = 0;
    fulmen_error *big = NULL;
    while (doublings < 40) {
        twice[0] = twice[1] = chain;
        fulmen_value *bigger = NULL;
        big = fulmen_value_list((const fulmen_value *const *)twice, 2, &bigger);
        if (big != NULL) break;
        fulmen_value_free(chain);
        chain = bigger;
        doublings++;
    }
    CHECK(doublings == 19); /* 2^20 leaves and their lists pass FULMEN_MAX_VALUE_NODES */
    CHECK(big != NULL && fulmen_error_code(big) == FULMEN_CODE_INVALID_ARGUMENT &&
          strstr(fulmen_error_message(big), "FULMEN_MAX_VALUE_NODES") != NULL);
    fulmen_error_free(big);
    fulmen_value_free(chain);
    /* dict keys: a repeat keeps its place and its last value; other kinds are refused */
    fulmen_value *ka = NULL, *kb = NULL, *v1 = NULL, *v2 = NULL, *v3 = NULL, *dd = NULL, *found = NULL, *same = NULL;
    CHECK_OK(fulmen_value_string("a", &ka));
    CHECK_OK(fulmen_value_string("b", &kb));
    CHECK_OK(fulmen_value_int(1, &v1));
    CHECK_OK(fulmen_value_int(2, &v2));
    CHECK_OK(fulmen_value_int(3, &v3));
    const fulmen_value *dk[3] = {ka, kb, ka}, *dvals[3] = {v1, v2, v3};
    CHECK_OK(fulmen_value_dict(dk, dvals, 3, &dd));
    CHECK_OK(fulmen_value_len(dd, &len));
    CHECK(len == 2);
    CHECK_OK(fulmen_value_dict_get(dd, "a", &found));
    int64_t gotv = 0;
    CHECK_OK(fulmen_value_get_int(found, &gotv));
    CHECK(gotv == 3);
    CHECK_ERR(fulmen_value_dict_entry(dd, 0, &same, &same), FULMEN_CODE_INVALID_ARGUMENT, "same pointer");
    const fulmen_value *tk[1] = {dd}; /* a dict as a key */
    CHECK_ERR(fulmen_value_dict(tk, dvals, 1, &same), FULMEN_CODE_INVALID_ARGUMENT, "dict keys");
    fulmen_value *dict_vals[] = {ka, kb, v1, v2, v3, dd, found};
    for (size_t i = 0; i < sizeof dict_vals / sizeof dict_vals[0]; i++) fulmen_value_free(dict_vals[i]);
    /* a native model has no methods to call or save */
    fulmen_model *lin = NULL;
    CHECK_OK(fulmen_model_linear_new(2, 2, true, &lin));
    CHECK_ERR(fulmen_model_call_method(lin, NULL, "forward", NULL, 0, &out), FULMEN_CODE_UNSUPPORTED, "Linear");
    char never_dir[] = "/tmp/fulmen-script-never-XXXXXX", never[256];
    CHECK(mkdtemp(never_dir) != NULL);
    snprintf(never, sizeof never, "%s/never.pt", never_dir);
    CHECK_ERR(fulmen_model_save_torchscript(lin, NULL, never), FULMEN_CODE_UNSUPPORTED, NULL);
    CHECK(access(never, F_OK) != 0);
    CHECK(rmdir(never_dir) == 0); /* still empty: nothing was written */
    fulmen_model_free(lin);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_model_free(m);
}

/* A method's result holds at most FULMEN_MAX_VALUE_NODES values, counted
 * as for the values a host builds: describe(n, f, ints) returns (int, float,
 * bool, str, None, ints + [n]), len(ints) + 8 values. At the bound it comes
 * back whole; one value more is refused with OUT_OF_RANGE before it is
 * copied, and the model stays usable. */
static void test_result_bound(void) {
    fulmen_model *m = load("values_scripted.pt");
    if (m == NULL) return;
    const size_t at_bound = FULMEN_MAX_VALUE_NODES - 8;
    const fulmen_value **items = malloc((at_bound + 1) * sizeof *items);
    if (items == NULL) exit(2);
    fulmen_value *one = NULL, *args[3] = {NULL, NULL, NULL}, *out = NULL, *part = NULL;
    CHECK_OK(fulmen_value_int(1, &one));
    for (size_t i = 0; i <= at_bound; i++) items[i] = one;
    CHECK_OK(fulmen_value_int(3, &args[0]));
    CHECK_OK(fulmen_value_double(1.0, &args[1]));
    CHECK_OK(fulmen_value_list(items, at_bound, &args[2]));
    CHECK_OK(fulmen_model_call_method(m, NULL, "describe", (const fulmen_value *const *)args, 3, &out));
    size_t len = 0;
    CHECK_OK(fulmen_value_item(out, 5, &part));
    CHECK_OK(fulmen_value_len(part, &len));
    CHECK(len == at_bound + 1);
    fulmen_value_free(part);
    fulmen_value_free(out);
    fulmen_value_free(args[2]);
    out = NULL;
    CHECK_OK(fulmen_value_list(items, at_bound + 1, &args[2]));
    CHECK_ERR(fulmen_model_call_method(m, NULL, "describe", (const fulmen_value *const *)args, 3, &out),
              FULMEN_CODE_OUT_OF_RANGE, "FULMEN_MAX_VALUE_NODES");
    CHECK(out == NULL);
    fulmen_value_free(args[2]);
    /* a small result after the refused one */
    CHECK_OK(fulmen_value_list(items, 2, &args[2]));
    CHECK_OK(fulmen_model_call_method(m, NULL, "describe", (const fulmen_value *const *)args, 3, &out));
    CHECK_OK(fulmen_value_item(out, 5, &part));
    CHECK_OK(fulmen_value_len(part, &len));
    CHECK(len == 3);
    fulmen_value *rest[] = {part, out, args[0], args[1], args[2], one};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) fulmen_value_free(rest[i]);
    free(items);
    fulmen_model_free(m);
}

/* The trainer drives the scripted steps: a batch becomes the `batch`
 * tuple, the dict's "loss" is the loss. */
static fulmen_error *scripted_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss, const char *method, const char *metric) {
    fulmen_value *args[2], *out, *l;
    int64_t idx = 0;
    double value = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &idx);
    if (!e) e = fulmen_value_from_batch(batch, &args[0]);
    if (!e) e = fulmen_value_int(idx, &args[1]);
    if (!e) e = fulmen_model_call_method(model, NULL, method, (const fulmen_value *const *)args, 2, &out);
    if (!e) e = fulmen_value_dict_get(out, "loss", &l);
    if (!e) e = fulmen_value_get_tensor(l, loss);
    if (!e) e = fulmen_tensor_item(*loss, &value);
    if (!e) e = fulmen_step_context_log(ctx, metric, value, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *training_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    return scripted_step(model, ctx, batch, loss, "training_step", "train_loss");
}

static fulmen_error *validation_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL; /* released when the step returns */
    return scripted_step(model, ctx, batch, &loss, "validation_step", "val_loss");
}

static fulmen_error *configure_optimizers(void *model, fulmen_optimizer_config *config) {
    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = 0.02;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_adam_new(model, NULL, 0, &o, &opt);
    if (e) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e) fulmen_optimizer_free(opt);
    return e;
}

/* A learnable rule: the class is 1 when numeric[0] + (category odd) > 0.5. */
static fulmen_loader *tabular_loader(size_t n, uint64_t seed, fulmen_tensor **keep_numeric, fulmen_tensor **keep_cat) {
    CHECK_OK(fulmen_manual_seed(seed));
    const int64_t shape[2] = {(int64_t)n, 3};
    fulmen_tensor *numeric = NULL, *cat = NULL, *target = NULL;
    CHECK_OK(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &numeric));
    float *nv = malloc(n * 3 * sizeof(float));
    int64_t *cv = malloc(n * sizeof(int64_t)), *tv = malloc(n * sizeof(int64_t));
    if (nv == NULL || cv == NULL || tv == NULL) exit(2);
    CHECK_OK(fulmen_tensor_copy_to(numeric, FULMEN_DTYPE_F32, nv, n * 3 * sizeof(float)));
    for (size_t i = 0; i < n; i++) {
        cv[i] = (int64_t)((i * 7) % 5);
        tv[i] = nv[3 * i] + (float)(cv[i] % 2) > 0.5f ? 1 : 0;
    }
    cat = i64(cv, n);
    target = i64(tv, n);
    const fulmen_tensor *cols[3] = {cat, numeric, target};
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_tensors(cols, 3, &ds));
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 32;
    o.shuffle = true;
    fulmen_loader *l = NULL;
    CHECK_OK(fulmen_loader_new(ds, &o, &l));
    fulmen_dataset_free(ds);
    fulmen_tensor_free(target);
    *keep_numeric = numeric;
    *keep_cat = cat;
    free(nv);
    free(cv);
    free(tv);
    return l;
}

static fulmen_tensor *probabilities(const fulmen_model *m, const fulmen_tensor *cat, const fulmen_tensor *numeric) {
    fulmen_value *args[2] = {tensor_value(cat), tensor_value(numeric)}, *out = NULL, *p = NULL;
    fulmen_tensor *probs = NULL;
    CHECK_OK(fulmen_model_call_method(m, NULL, "predict_step", (const fulmen_value *const *)args, 2, &out));
    CHECK_OK(fulmen_value_item(out, 0, &p));
    CHECK_OK(fulmen_value_get_tensor(p, &probs));
    fulmen_value *all[] = {args[0], args[1], out, p};
    for (size_t i = 0; i < 4; i++) fulmen_value_free(all[i]);
    return probs;
}

static double max_abs_diff(const fulmen_tensor *a, const fulmen_tensor *b) {
    fulmen_tensor *d = NULL, *ad = NULL, *mx = NULL;
    CHECK_OK(fulmen_tensor_sub(a, b, &d));
    CHECK_OK(fulmen_tensor_abs(d, &ad));
    CHECK_OK(fulmen_tensor_max(ad, &mx));
    double v = item(mx);
    fulmen_tensor_free(d);
    fulmen_tensor_free(ad);
    fulmen_tensor_free(mx);
    return v;
}

static void test_trainer_runs_scripted_steps(void) {
    fulmen_model *m = load("tabular_scripted.pt");
    if (m == NULL) return;
    fulmen_tensor *numeric = NULL, *cat = NULL, *vn = NULL, *vc = NULL;
    fulmen_loader *train = tabular_loader(512, 3, &numeric, &cat), *val = tabular_loader(128, 4, &vn, &vc);
    fulmen_module_vtable vt = {.struct_size = sizeof vt, .userdata = m, .training_step = training_step,
                               .validation_step = validation_step, .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, m, &module));
    fulmen_trainer_options *opts = NULL;
    fulmen_trainer *trainer = NULL;
    CHECK_OK(fulmen_trainer_options_new(&opts));
    const char *settings[][2] = {{"max_epochs", "6"},           {"enable_progress_bar", "false"},
                                 {"enable_model_summary", "false"}, {"enable_checkpointing", "false"},
                                 {"logger", "false"},           {"num_sanity_val_steps", "0"}};
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        CHECK_OK(fulmen_trainer_options_set(opts, settings[i][0], settings[i][1]));
    CHECK_OK(fulmen_trainer_new(opts, &trainer));
    CHECK_OK(fulmen_trainer_fit(trainer, module, train, val, NULL));
    double val_loss = 0;
    CHECK_OK(fulmen_trainer_callback_metric(trainer, "val_loss", &val_loss));
    CHECK(val_loss < 0.45); /* ln 2 = 0.69 at chance */
    /* the BatchNorm tracked every training batch: 6 epochs x 16 batches */
    fulmen_tensor *nbt = NULL;
    CHECK_OK(fulmen_model_state_dict_get(m, "norm.num_batches_tracked", &nbt));
    CHECK(item(nbt) == 96);
    fulmen_tensor_free(nbt);
    /* saved back as .pt, it predicts the same in eval mode */
    char dir[] = "/tmp/fulmen-script-XXXXXX", pt[256], sf[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(pt, sizeof pt, "%s/tuned.pt", dir);
    snprintf(sf, sizeof sf, "%s/tuned.safetensors", dir);
    CHECK_OK(fulmen_model_set_training(m, false));
    CHECK_OK(fulmen_model_save_torchscript(m, NULL, pt));
    CHECK_OK(fulmen_model_save(m, sf));
    fulmen_model *back = NULL;
    CHECK_OK(fulmen_model_load_torchscript(pt, &back));
    CHECK_OK(fulmen_model_set_training(back, false));
    fulmen_tensor *a = probabilities(m, vc, vn), *b = probabilities(back, vc, vn);
    CHECK(max_abs_diff(a, b) == 0.0);
    /* and the safetensors of its state_dict load strictly into the original script */
    fulmen_model *fresh = load("tabular_scripted.pt");
    CHECK_OK(fulmen_model_load(fresh, sf, true));
    CHECK_OK(fulmen_model_set_training(fresh, false));
    fulmen_tensor *c = probabilities(fresh, vc, vn);
    CHECK(max_abs_diff(a, c) == 0.0);
    unlink(pt);
    unlink(sf);
    rmdir(dir);
    fulmen_tensor *all[] = {numeric, cat, vn, vc, a, b, c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fulmen_tensor_free(all[i]);
    fulmen_model_free(fresh);
    fulmen_model_free(back);
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(train);
    fulmen_loader_free(val);
    fulmen_model_free(m);
}

int main(void) {
    test_buffers();
    test_values();
    test_result_bound();
    test_trainer_runs_scripted_steps();
    return check_finish("test_script");
}

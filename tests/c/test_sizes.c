/*
 * Sizes from outside are untrusted: a data source of 10^12 samples (the
 * sample order is computed per batch, never materialised), an iterator
 * that claims INT64_MAX batches, absurd `devices` counts from users and
 * from accelerator vtables, checkpoint metadata with huge or negative
 * counters, a CSV line with millions of columns, huge file-name template
 * widths and bad scalars each give a clear error or just work; none
 * aborts the process on a giant allocation or panics.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"
#include "ckpt_edit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_root[64];

/* ---- a host data source that says it holds 10^12 samples ---- */

#define HUGE_LEN 1000000000000ULL

typedef struct {
    fulmen_model *model;
    int64_t max_index;
    size_t batches;
} huge_world;

static fulmen_error *huge_len(void *ud, size_t *len) {
    (void)ud;
    *len = (size_t)HUGE_LEN;
    return NULL;
}

static fulmen_error *huge_get(void *ud, const int64_t *idx, size_t n, fulmen_batch_builder *b) {
    huge_world *w = ud;
    w->batches++;
    float *x = malloc(n * 2 * sizeof(float));
    int64_t *y = malloc(n * sizeof(int64_t));
    for (size_t i = 0; i < n; i++) {
        if (idx[i] > w->max_index) w->max_index = idx[i];
        x[2 * i] = (float)(idx[i] % 7);
        x[2 * i + 1] = (float)(idx[i] % 3);
        y[i] = idx[i] % 2;
    }
    int64_t xs[2] = {(int64_t)n, 2}, ys[1] = {(int64_t)n};
    fulmen_tensor *tx = NULL, *ty = NULL;
    fulmen_error *e = fulmen_tensor_from_data(x, n * 2 * sizeof(float), FULMEN_DTYPE_F32, xs, 2, &tx);
    if (e == NULL) e = fulmen_tensor_from_data(y, n * sizeof(int64_t), FULMEN_DTYPE_I64, ys, 1, &ty);
    if (e == NULL) e = fulmen_batch_builder_push(b, tx);
    if (e == NULL) e = fulmen_batch_builder_push(b, ty);
    free(x);
    free(y);
    return e;
}

static fulmen_error *huge_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((huge_world *)ud)->model, batch, out);
}

static void a_trillion_samples_cost_nothing_up_front(void) {
    huge_world w = {fixture_mlp(4, 0), -1, 0};
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &w;
    vt.len = huge_len;
    vt.get_batch = huge_get;
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_source(&vt, &ds));
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        fulmen_loader *l = fixture_loader(ds, 16, shuffle, 9);
        size_t n = 0;
        CHECK_OK(fulmen_loader_len(l, &n));
        CHECK(n == (size_t)(HUGE_LEN / 16));
        fulmen_trainer_options *o = fixture_options(NULL, 1);
        CHECK_OK(fulmen_trainer_options_set_int(o, "limit_train_batches", 2));
        fulmen_trainer *t = NULL;
        CHECK_OK(fulmen_trainer_new(o, &t));
        fulmen_lightning_module *m = fixture_module(w.model, &w, huge_step, NULL);
        w.batches = 0;
        CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
        CHECK(w.batches == 2);
        int64_t steps = 0;
        CHECK_OK(fulmen_trainer_global_step(t, &steps));
        CHECK(steps == 2);
        /* A batch anywhere in the epoch, by index, at the same cost. */
        fulmen_tensor *out[2] = {NULL, NULL};
        size_t count = 0;
        w.max_index = -1;
        CHECK_OK(fulmen_loader_batch(l, 3, (size_t)(HUGE_LEN / 16) - 1, out, 2, &count));
        CHECK(count == 2 && w.max_index >= 0 && (uint64_t)w.max_index < HUGE_LEN);
        if (!shuffle) CHECK(w.max_index == (int64_t)HUGE_LEN - 1);
        fulmen_tensor_free(out[0]);
        fulmen_tensor_free(out[1]);
        CHECK_ERR(fulmen_loader_batch(l, 0, (size_t)(HUGE_LEN / 16), out, 2, &count), FULMEN_CODE_OUT_OF_RANGE,
                  NULL);
        /* Shared by a billion ranks: still nothing allocated per sample. */
        fulmen_loader *shard = NULL;
        CHECK_OK(fulmen_loader_shard(l, 999999, 1000000, &shard));
        CHECK_OK(fulmen_loader_batch(shard, 0, 7, out, 2, &count));
        fulmen_tensor_free(out[0]);
        fulmen_tensor_free(out[1]);
        fulmen_loader_free(shard);
        fulmen_trainer_free(t);
        fulmen_trainer_options_free(o);
        fulmen_lightning_module_free(m);
        fulmen_loader_free(l);
    }
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
}

/* ---- an iterator that claims INT64_MAX batches ---- */

typedef struct {
    int left;
} counting_iter;

static fulmen_error *iter_next(void *ud, fulmen_batch_builder *b, bool *done) {
    counting_iter *it = ud;
    if (it->left-- <= 0) {
        *done = true;
        return NULL;
    }
    return fixture_push_random_batch(b, 4);
}

static void an_iterator_claiming_int64_max_batches(void) {
    counting_iter it = {5};
    fulmen_iterator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &it;
    vt.next = iter_next;
    vt.num_batches = INT64_MAX;
    fulmen_loader *l = NULL;
    CHECK_OK(fulmen_loader_from_iterator(&vt, &l));
    huge_world w = {fixture_mlp(4, 0), -1, 0};
    fulmen_lightning_module *m = fixture_module(w.model, &w, huge_step, NULL);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set_int(o, "limit_train_batches", 3));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    int64_t steps = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 3);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_model_free(w.model);
}

/* ---- devices ---- */

static fulmen_error *liar_count(void *ud, size_t *out) {
    (void)ud;
    *out = SIZE_MAX;
    return NULL;
}

static void absurd_device_counts(void) {
    fulmen_accelerator *cpu = NULL;
    CHECK_OK(fulmen_accelerator_get("cpu", &cpu));
    int64_t ids[4];
    size_t n = 0;
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "100000000000", ids, 4, &n), FULMEN_CODE_INVALID_ARGUMENT,
              "too large");
    CHECK_ERR(fulmen_accelerator_parse_devices(cpu, "99999999999999999999999", ids, 4, &n),
              FULMEN_CODE_INVALID_ARGUMENT, "too large");
    fulmen_accelerator_free(cpu);
    /* The trainer's options refuse it at once. */
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_ERR(fulmen_trainer_options_set(o, "devices", "100000000000"), FULMEN_CODE_INVALID_ARGUMENT, "too large");
    CHECK_ERR(fulmen_trainer_options_set_int(o, "devices", 100000000000LL), FULMEN_CODE_INVALID_ARGUMENT,
              "too large");
    fulmen_trainer_options_free(o);
    /* An accelerator whose vtable reports SIZE_MAX devices. */
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = liar_count;
    CHECK_OK(fulmen_accelerator_register("liar", "reports SIZE_MAX devices", &vt, false));
    fulmen_accelerator *liar = NULL;
    CHECK_OK(fulmen_accelerator_get("liar", &liar));
    CHECK_ERR(fulmen_accelerator_parse_devices(liar, "auto", ids, 4, &n), FULMEN_CODE_CALLBACK, "at most 65536");
    CHECK_ERR(fulmen_accelerator_parse_devices(liar, "2", ids, 4, &n), FULMEN_CODE_CALLBACK, "at most 65536");
    fulmen_accelerator_free(liar);
    CHECK_OK(fulmen_accelerator_unregister("liar"));
}

/* ---- checkpoint counters ---- */

static void checkpoint_counters_are_validated(void) {
    huge_world w = {fixture_mlp(4, 0), -1, 0};
    fulmen_lightning_module *m = fixture_module(w.model, &w, huge_step, NULL);
    fulmen_dataset *ds = fixture_blobs(16, 2, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    /* The counters are edited in a safetensors file's JSON header. */
    fulmen_trainer_options *o = fixture_options(g_root, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", "safetensors"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    char good[512];
    size_t len = 0;
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, good, sizeof good, &len));
    fulmen_trainer_free(t);
    static const char *edits[][2] = {
        {"\"num_optimizers\":\"1\"", "\"num_optimizers\":\"1000000000000\""},
        {"\"num_optimizers\":\"1\"", "\"num_optimizers\":\"-1\""},
        {"\"num_optimizers\":\"1\"", "\"num_optimizers\":\"99999999999999999999\""},
        {"\"epoch\":\"0\"", "\"epoch\":\"9223372036854775807\""},
        {"\"epoch\":\"0\"", "\"epoch\":\"-5\""},
        {"\"global_step\":\"2\"", "\"global_step\":\"-9223372036854775808\""},
        {"\"global_step\":\"2\"", "\"global_step\":\"9223372036854775807\""},
        {"\"batches_in_epoch\":\"2\"", "\"batches_in_epoch\":\"9223372036854775807\""},
    };
    char bad[600];
    snprintf(bad, sizeof bad, "%s/edited.ckpt", g_root);
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        ckpt_file c = ckpt_read(good);
        int hits = ckpt_replace(&c, edits[i][0], edits[i][1]);
        CHECK(hits == 1);
        if (hits != 1) fprintf(stderr, "  no %s in the header: %.300s\n", edits[i][0], c.header);
        ckpt_write(&c, bad);
        ckpt_free(&c);
        fulmen_trainer *r = fixture_trainer(NULL, 3);
        fulmen_error *e = fulmen_trainer_fit(r, m, l, NULL, bad);
        CHECK(fulmen_error_code(e) == FULMEN_CODE_FORMAT);
        if (fulmen_error_code(e) != FULMEN_CODE_FORMAT) {
            fprintf(stderr, "  %s: %s\n", edits[i][1], e ? fulmen_error_message(e) : "accepted");
        }
        fulmen_error_free(e);
        fulmen_trainer_free(r);
    }
    unlink(bad);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
}

/* ---- a CSV line with two million columns ---- */

static void a_csv_with_millions_of_columns(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/wide.csv", g_root);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f == NULL) return;
    const size_t cols = 2000000;
    for (size_t i = 0; i < cols; i++) fputs(i + 1 < cols ? "1," : "1\n", f);
    fclose(f);
    fulmen_csv_options o = fulmen_csv_options_default();
    o.header = 0;
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_csv(path, &o, &ds));
    size_t n = 0;
    if (ds != NULL) CHECK_OK(fulmen_dataset_len(ds, &n));
    CHECK(n == 1);
    fulmen_dataset_free(ds);
    unlink(path);
}

/* ---- file-name templates and scalars ---- */

static void wide_templates_and_bad_scalars(void) {
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    fulmen_model_checkpoint_options mo = fulmen_model_checkpoint_options_default();
    const char *templates[] = {"{epoch:999999999999d}", "{epoch:.999999999f}", "{step:0200d}"};
    for (size_t i = 0; i < 3; i++) {
        mo.filename = templates[i];
        CHECK_ERR(fulmen_trainer_add_model_checkpoint(t, &mo), FULMEN_CODE_INVALID_ARGUMENT, "at most");
    }
    fulmen_trainer_free(t);
    fulmen_tensor *x = NULL;
    int64_t shape[1] = {2};
    CHECK_ERR(fulmen_tensor_arange(0, 1e300, 1, FULMEN_DTYPE_F32, &x), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    /* libtorch's int64 length (end - start + step - sign) / step would trap
     * as INT64_MIN / -1. */
    CHECK_ERR(fulmen_tensor_arange(0, (double)INT64_MIN, -1, FULMEN_DTYPE_I64, &x), FULMEN_CODE_INVALID_ARGUMENT,
              "too long");
    CHECK_ERR(fulmen_tensor_arange(-4e18, 4e18, 2e18, FULMEN_DTYPE_I64, &x), FULMEN_CODE_INVALID_ARGUMENT, "2^61");
    CHECK_OK(fulmen_tensor_arange(-2e18, 2e18, 1e18, FULMEN_DTYPE_I64, &x));
    size_t numel = 0;
    CHECK_OK(fulmen_tensor_numel(x, &numel));
    CHECK(numel == 4);
    fulmen_tensor_free(x);
    x = NULL;
    CHECK_ERR(fulmen_tensor_full(shape, 1, NAN, FULMEN_DTYPE_I64, &x), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_scalar(INFINITY, FULMEN_DTYPE_I32, &x), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_scalar(1e30, FULMEN_DTYPE_U8, &x), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(x == NULL);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    snprintf(g_root, sizeof g_root, "/tmp/fulmen-test-sizes-XXXXXX");
    CHECK(mkdtemp(g_root) != NULL);
    a_trillion_samples_cost_nothing_up_front();
    an_iterator_claiming_int64_max_batches();
    absurd_device_counts();
    checkpoint_counters_are_validated();
    a_csv_with_millions_of_columns();
    wide_templates_and_bad_scalars();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    CHECK(system(cmd) == 0);
    return check_finish("test_sizes");
}

/*
 * Loader workers (num_workers, prefetch_factor): a fit reads the same
 * batches in the same order with workers as without, so the weights are
 * the same; a host dataset takes workers only when its vtable sets
 * any_thread, and its get_batch then runs on a worker thread, one call at
 * a time; out-of-range counts are refused; a fit that stops early
 * (limit_train_batches, an error in a batch) leaves no worker reading.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "check.h"
#include "fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((state *)ud)->model, batch, out);
}

/* A host dataset over a tensors dataset that counts its calls, the calls
 * made off the main thread and the calls that overlapped, and fails on
 * sample `fail_at` (-1: never). */
typedef struct {
    fulmen_dataset *inner;
    pthread_t main;
    atomic_int calls, off_main, inside, overlapped;
    int64_t fail_at;
    long sleep_ms; /* each call takes this long */
} source;

static fulmen_error *source_len(void *ud, size_t *n) { return fulmen_dataset_len(((source *)ud)->inner, n); }

static fulmen_error *source_get(void *ud, const int64_t *indices, size_t n, fulmen_batch_builder *b) {
    source *s = ud;
    if (atomic_fetch_add(&s->inside, 1) != 0) atomic_fetch_add(&s->overlapped, 1);
    atomic_fetch_add(&s->calls, 1);
    if (!pthread_equal(pthread_self(), s->main)) atomic_fetch_add(&s->off_main, 1);
    if (s->sleep_ms > 0) {
        struct timespec ts = {0, s->sleep_ms * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fulmen_error *e = NULL;
    for (size_t i = 0; i < n && e == NULL; i++)
        if (indices[i] == s->fail_at) e = fulmen_error_new(FULMEN_CODE_CALLBACK, "sample unreadable");
    fulmen_tensor *parts[2] = {NULL, NULL};
    size_t count = 0;
    if (e == NULL) e = fulmen_dataset_get(s->inner, indices, n, parts, 2, &count);
    for (size_t i = 0; i < count && e == NULL; i++) e = fulmen_batch_builder_push(b, parts[i]);
    atomic_fetch_sub(&s->inside, 1);
    return e;
}

static fulmen_dataset *host_dataset(source *s, bool any_thread) {
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.len = source_len;
    vt.get_batch = source_get;
    vt.any_thread = any_thread;
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_source(&vt, &ds));
    return ds;
}

static fulmen_loader *loader_with(fulmen_dataset *ds, size_t workers, size_t prefetch) {
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 8;
    o.shuffle = true;
    o.seed = 5;
    o.num_workers = workers;
    o.prefetch_factor = prefetch;
    fulmen_loader *l = NULL;
    CHECK_OK(fulmen_loader_new(ds, &o, &l));
    return l;
}

/* Fits a fresh MLP (seeded) for 2 epochs on `loader`; NULL error or the
 * fit's error code in *code. */
static const char *callback_timeout = NULL; /* the trainer's, when set */

static fulmen_model *fit_on(fulmen_loader *loader, const char *limit, int *code) {
    CHECK_OK(fulmen_manual_seed(7));
    state st = {.model = fixture_mlp(8, 0)};
    fulmen_lightning_module *m = fixture_module(st.model, &st, step, NULL);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    if (limit != NULL) CHECK_OK(fulmen_trainer_options_set(o, "limit_train_batches", limit));
    if (callback_timeout != NULL) CHECK_OK(fulmen_trainer_options_set(o, "callback_timeout", callback_timeout));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    *code = fixture_code(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    return st.model;
}

int main(void) {
    fulmen_dataset *blobs = fixture_blobs(100, 3, 2.0f);
    int code = -1;

    /* the same weights with 0, 1, 3 and 20 workers */
    fulmen_loader *plain = loader_with(blobs, 0, 2);
    fulmen_model *want = fit_on(plain, NULL, &code);
    CHECK(code == 0);
    const size_t workers[][2] = {{1, 1}, {3, 2}, {20, 4}};
    for (size_t i = 0; i < 3; i++) {
        fulmen_loader *l = loader_with(blobs, workers[i][0], workers[i][1]);
        fulmen_model *got = fit_on(l, NULL, &code);
        CHECK(code == 0);
        CHECK(fixture_max_diff(want, got) == 0.0);
        fulmen_model_free(got);
        fulmen_loader_free(l);
    }

    /* a host dataset: refused without any_thread, read on workers with it */
    source s = {.inner = blobs, .main = pthread_self(), .fail_at = -1};
    fulmen_dataset *strict = host_dataset(&s, false);
    fulmen_loader_options o = fulmen_loader_options_default();
    o.num_workers = 2;
    fulmen_loader *l = NULL;
    CHECK_ERR(fulmen_loader_new(strict, &o, &l), FULMEN_CODE_INVALID_ARGUMENT, "any_thread");
    fulmen_dataset *relaxed = host_dataset(&s, true);
    l = loader_with(relaxed, 3, 2);
    fulmen_model *host = fit_on(l, NULL, &code);
    CHECK(code == 0);
    CHECK(fixture_max_diff(want, host) == 0.0);
    CHECK(atomic_load(&s.calls) == 2 * 13);
    CHECK(atomic_load(&s.off_main) == atomic_load(&s.calls));
    CHECK(atomic_load(&s.overlapped) == 0);
    fulmen_model_free(host);
    fulmen_loader_free(l);

    /* stopping early: no call after the fit returns */
    atomic_store(&s.calls, 0);
    l = loader_with(relaxed, 4, 8);
    fulmen_model *early = fit_on(l, "2", &code);
    CHECK(code == 0);
    int after = atomic_load(&s.calls);
    CHECK(after >= 4 && after <= 2 * 13);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK(atomic_load(&s.calls) == after);
    fulmen_model_free(early);
    fulmen_loader_free(l);

    /* a worker's call is bound by the trainer's callback_timeout */
    s.sleep_ms = 30;
    callback_timeout = "0.005";
    l = loader_with(relaxed, 2, 2);
    fulmen_model *slow = fit_on(l, NULL, &code);
    CHECK(code == FULMEN_CODE_CALLBACK);
    callback_timeout = NULL;
    s.sleep_ms = 0;
    fulmen_model_free(slow);
    fulmen_loader_free(l);

    /* an unreadable sample fails the fit with the host's error, in order */
    s.fail_at = 40;
    l = loader_with(relaxed, 3, 2);
    fulmen_model *failed = fit_on(l, NULL, &code);
    CHECK(code == FULMEN_CODE_CALLBACK);
    fulmen_model_free(failed);
    fulmen_loader_free(l);

    /* bounds */
    o = fulmen_loader_options_default();
    o.num_workers = FULMEN_MAX_WORKERS + 1;
    CHECK_ERR(fulmen_loader_new(blobs, &o, &l), FULMEN_CODE_INVALID_ARGUMENT, "num_workers");
    o.num_workers = 1;
    o.prefetch_factor = 0;
    CHECK_ERR(fulmen_loader_new(blobs, &o, &l), FULMEN_CODE_INVALID_ARGUMENT, "prefetch_factor");
    o.prefetch_factor = FULMEN_MAX_PREFETCH_FACTOR + 1;
    CHECK_ERR(fulmen_loader_new(blobs, &o, &l), FULMEN_CODE_INVALID_ARGUMENT, "prefetch_factor");

    /* a vtable of the size before any_thread is still accepted */
    fulmen_data_source_vtable old;
    memset(&old, 0, sizeof old);
    old.struct_size = offsetof(fulmen_data_source_vtable, any_thread);
    old.userdata = &s;
    old.len = source_len;
    old.get_batch = source_get;
    old.any_thread = true; /* beyond struct_size: not read */
    fulmen_dataset *older = NULL;
    CHECK_OK(fulmen_dataset_from_source(&old, &older));
    o = fulmen_loader_options_default();
    o.num_workers = 1;
    CHECK_ERR(fulmen_loader_new(older, &o, &l), FULMEN_CODE_INVALID_ARGUMENT, "any_thread");

    fulmen_dataset_free(older);
    fulmen_dataset_free(strict);
    fulmen_dataset_free(relaxed);
    fulmen_model_free(want);
    fulmen_loader_free(plain);
    fulmen_dataset_free(blobs);
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_workers");
}

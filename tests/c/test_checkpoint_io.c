/*
 * Checkpoint IO plugins (Lightning's CheckpointIO / AsyncCheckpointIO): a
 * host store keeping checkpoints in memory receives every checkpoint
 * (ModelCheckpoint's, last.ckpt, fulmen_trainer_save_checkpoint; both
 * formats) and nothing is written on disk; a fit resumes from it;
 * ModelCheckpoint's older file is removed through it; a failing save is
 * the fit's error; asynchronous saves run on another thread while the
 * next steps train and their errors surface; sizes a store reports that
 * fulmen cannot trust are refused before any allocation; bad vtables are
 * refused and userdata_free runs once.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, nanosleep */

#include "check.h"
#include "fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 16

static char g_root[64];

typedef struct {
    char path[512];
    uint8_t *data;
    size_t len;
} entry;

/* A store in memory; its callbacks run one at a time (fulmen serialises
 * them), the step counter is the module's. */
typedef struct {
    entry files[MAX_FILES];
    int saves, removes, loads, size_queries, frees;
    int fail_at;  /* this save (1-based) fails; 0: none */
    int hostile;  /* load: 1 reports SIZE_MAX, 2 the limit + 1, 3 writes a byte less than it reported */
    /* The first save waits (up to a minute) until a training step runs
     * after it was requested (requested_at: the step count when the
     * trainer built it, on its thread): it ends at once when saves run in
     * the background, however late the background thread starts, and only
     * a save that blocks the steps waits the whole minute. */
    bool wait_for_a_step;
    atomic_int requested_at; /* -1 until the first save is requested */
    pthread_t main;
    int off_main_saves;
    int overlapped; /* saves during which training steps ran */
    atomic_int *steps;
} store;

typedef struct {
    fulmen_model *model;
    atomic_int steps;
} world;

static entry *find(store *s, const char *path) {
    for (int i = 0; i < MAX_FILES; i++) {
        if (s->files[i].data != NULL && strcmp(s->files[i].path, path) == 0) return &s->files[i];
    }
    return NULL;
}

static int count_files(store *s) {
    int n = 0;
    for (int i = 0; i < MAX_FILES; i++) n += s->files[i].data != NULL;
    return n;
}

static void clear_store(store *s) {
    for (int i = 0; i < MAX_FILES; i++) {
        free(s->files[i].data);
        s->files[i].data = NULL;
    }
}

static fulmen_error *io_save(void *ud, const uint8_t *bytes, size_t len, const char *path) {
    store *s = ud;
    s->saves++;
    if (!pthread_equal(pthread_self(), s->main)) s->off_main_saves++;
    int before = s->steps != NULL ? atomic_load(s->steps) : 0;
    if (s->wait_for_a_step && s->saves == 1 && s->steps != NULL) {
        int requested = atomic_load(&s->requested_at);
        if (requested >= 0) before = requested;
        struct timespec ts = {0, 10 * 1000000L};
        for (int i = 0; i < 6000 && atomic_load(s->steps) == before; i++) nanosleep(&ts, NULL);
    }
    if (s->steps != NULL && atomic_load(s->steps) > before) s->overlapped++;
    if (s->saves == s->fail_at) return fulmen_error_new(FULMEN_CODE_IO, "the store is full");
    if (strlen(path) >= sizeof s->files[0].path) return fulmen_error_new(FULMEN_CODE_IO, "path too long");
    entry *e = find(s, path);
    for (int i = 0; e == NULL && i < MAX_FILES; i++) {
        if (s->files[i].data == NULL) e = &s->files[i];
    }
    if (e == NULL) return fulmen_error_new(FULMEN_CODE_IO, "the store holds too many files");
    uint8_t *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL) return fulmen_error_new(FULMEN_CODE_OUT_OF_MEMORY, "no memory");
    memcpy(copy, bytes, len);
    free(e->data);
    snprintf(e->path, sizeof e->path, "%s", path);
    e->data = copy;
    e->len = len;
    return NULL;
}

static fulmen_error *io_load(void *ud, const char *path, uint8_t *buffer, size_t capacity, size_t *out_len) {
    store *s = ud;
    entry *e = find(s, path);
    if (e == NULL) return fulmen_error_new(FULMEN_CODE_IO, "no such checkpoint in the store");
    if (buffer == NULL) {
        s->size_queries++;
        CHECK(capacity == 0);
        if (s->hostile == 1) {
            *out_len = SIZE_MAX;
        } else if (s->hostile == 2) {
            *out_len = (size_t)FULMEN_MAX_CHECKPOINT_IO_BYTES + 1;
        } else {
            *out_len = e->len;
        }
        return NULL;
    }
    s->loads++;
    size_t n = e->len < capacity ? e->len : capacity;
    if (s->hostile == 3 && n > 0) n--;
    memcpy(buffer, e->data, n);
    *out_len = n;
    return NULL;
}

static fulmen_error *io_remove(void *ud, const char *path) {
    store *s = ud;
    s->removes++;
    entry *e = find(s, path);
    if (e != NULL) {
        free(e->data);
        e->data = NULL;
    }
    return NULL;
}

static void io_free(void *ud) { ((store *)ud)->frees++; }

static fulmen_checkpoint_io_vtable vtable_of(store *s) {
    fulmen_checkpoint_io_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.userdata_free = io_free;
    vt.save = io_save;
    vt.load = io_load;
    vt.remove = io_remove;
    return vt;
}

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    world *w = ud;
    atomic_fetch_add(&w->steps, 1);
    return fixture_cross_entropy(w->model, batch, out);
}

/* A quiet trainer (no logger) over `epochs` with `key` = `value` when
 * `key` is not NULL, `async` for async_checkpoint_io, and `s` as its store. */
static fulmen_trainer *trainer_for(store *s, long epochs, bool async, const char *key, const char *value) {
    fulmen_trainer_options *o = fixture_options(g_root, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "async_checkpoint_io", async));
    if (key != NULL) CHECK_OK(fulmen_trainer_options_set(o, key, value));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_checkpoint_io_vtable vt = vtable_of(s);
    CHECK_OK(fulmen_trainer_set_checkpoint_io(t, &vt));
    return t;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The store gets every checkpoint (none on disk), removes the older one,
 * and a new fit resumes from what it holds; in both formats. */
static void fit_and_resume_through_the_store(fulmen_loader *l, const char *format) {
    world w = {.model = fixture_mlp(8, 0)};
    atomic_init(&w.steps, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, NULL);
    store s = {.main = pthread_self()};
    char dir[256], path[300], manual[300];
    snprintf(dir, sizeof dir, "%s/store-%s/checkpoints", g_root, format);
    fulmen_trainer *t = trainer_for(&s, 3, false, "checkpoint_format", format);
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    o.save_last = true;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    /* Three epochs: epoch files 0, 1, 2 (the first two removed) and last.ckpt each time. */
    CHECK(s.saves == 6 && s.removes == 2 && count_files(&s) == 2);
    CHECK(s.off_main_saves == 0);
    snprintf(path, sizeof path, "%s/epoch=2-step=12.ckpt", dir);
    CHECK(find(&s, path) != NULL);
    snprintf(manual, sizeof manual, "%s/last.ckpt", dir);
    CHECK(find(&s, manual) != NULL);
    CHECK(!exists(dir)); /* nothing on disk */
    /* fulmen_trainer_save_checkpoint goes to the store too. */
    snprintf(manual, sizeof manual, "%s/manual.ckpt", dir);
    CHECK_OK(fulmen_trainer_save_checkpoint(t, m, manual, false));
    CHECK(find(&s, manual) != NULL && !exists(manual));
    fulmen_trainer_free(t);
    CHECK(s.frees == 1);

    /* A new trainer resumes from the stored checkpoint: step 12 -> 16. */
    fulmen_trainer *again = trainer_for(&s, 4, false, "enable_checkpointing", "false");
    CHECK_OK(fulmen_trainer_fit(again, m, l, NULL, path));
    CHECK(s.size_queries == 1 && s.loads == 1);
    int64_t gs = 0;
    CHECK_OK(fulmen_trainer_global_step(again, &gs));
    CHECK(gs == 16);
    /* A path the store lacks is the store's error. */
    snprintf(path, sizeof path, "%s/missing.ckpt", dir);
    CHECK_ERR(fulmen_trainer_fit(again, m, l, NULL, path), FULMEN_CODE_IO, "no such checkpoint in the store");
    fulmen_trainer_free(again);
    CHECK(s.frees == 2);
    clear_store(&s);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* A save the store refuses is the fit's error, with the store's code. */
static void a_failing_save_fails_the_fit(fulmen_loader *l) {
    world w = {.model = fixture_mlp(8, 0)};
    atomic_init(&w.steps, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, NULL);
    store s = {.main = pthread_self(), .fail_at = 2};
    fulmen_trainer *t = trainer_for(&s, 3, false, NULL, NULL);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_IO, "the store is full");
    CHECK(s.saves == 2);
    fulmen_trainer_free(t);
    clear_store(&s);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* on_save_checkpoint, on the trainer's thread as it builds a checkpoint:
 * the step count when the first save was requested. */
static fulmen_error *note_request(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    store *s = ud;
    int unset = -1;
    if (hook == FULMEN_HOOK_SAVE_CHECKPOINT) atomic_compare_exchange_strong(&s->requested_at, &unset, atomic_load(s->steps));
    return NULL;
}

/* async_checkpoint_io: saves run on another thread while the next steps
 * train; the fit returns once the last one is stored; a failed background
 * save is reported at the next save, or at the end of the fit. */
static void async_saves_overlap_and_report_errors(fulmen_loader *l) {
    world w = {.model = fixture_mlp(8, 0)};
    atomic_init(&w.steps, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, NULL);
    store s = {.main = pthread_self(), .wait_for_a_step = true, .steps = &w.steps};
    atomic_init(&s.requested_at, -1);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/async/checkpoints", g_root);
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = dir;
    o.save_top_k = -1; /* every epoch's file stays */
    fulmen_trainer *t = trainer_for(&s, 3, true, NULL, NULL);
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &o));
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.userdata = &s;
    cb.on_hook = note_request;
    CHECK_OK(fulmen_trainer_add_callback(t, "note_request", &cb));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(s.saves == 3 && s.off_main_saves == 3 && count_files(&s) == 3);
    CHECK(s.overlapped >= 1); /* the next epoch trained during a save */
    fulmen_trainer_free(t);
    clear_store(&s);

    /* The second save fails in the background: the third reports it. */
    store bad = {.main = pthread_self(), .fail_at = 2};
    t = trainer_for(&bad, 3, true, NULL, NULL);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_IO, "background checkpoint save failed");
    CHECK(bad.saves == 2);
    fulmen_trainer_free(t);
    clear_store(&bad);

    /* The last save fails: the end of the fit reports it. */
    store last = {.main = pthread_self(), .fail_at = 1};
    t = trainer_for(&last, 1, true, NULL, NULL);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_IO, "the store is full");
    CHECK(last.saves == 1);
    fulmen_trainer_free(t);
    clear_store(&last);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* Sizes the store reports are checked before fulmen allocates; a store
 * that writes less than it reported is an error. */
static void hostile_sizes_are_refused(fulmen_loader *l) {
    world w = {.model = fixture_mlp(8, 0)};
    atomic_init(&w.steps, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, NULL);
    store s = {.main = pthread_self()};
    char path[300];
    snprintf(path, sizeof path, "%s/hostile.ckpt", g_root);
    fulmen_trainer *t = trainer_for(&s, 1, false, "enable_checkpointing", "false");
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK_OK(fulmen_trainer_save_checkpoint(t, m, path, false));
    CHECK(find(&s, path) != NULL);
    s.hostile = 1;
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, path), FULMEN_CODE_OUT_OF_RANGE, "FULMEN_MAX_CHECKPOINT_IO_BYTES");
    s.hostile = 2;
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, path), FULMEN_CODE_OUT_OF_RANGE, "FULMEN_MAX_CHECKPOINT_IO_BYTES");
    CHECK(s.loads == 0); /* no buffer was ever asked for */
    s.hostile = 3;
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, path), FULMEN_CODE_IO, "after reporting a size");
    s.hostile = 0;
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, path));
    fulmen_trainer_free(t);
    clear_store(&s);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

/* A vtable with a NULL slot or a short struct_size is refused (its
 * userdata_free not called); a new plugin replaces the old one (freed);
 * NULL goes back to local files. */
static void vtables_are_checked(fulmen_loader *l) {
    world w = {.model = fixture_mlp(8, 0)};
    atomic_init(&w.steps, 0);
    fulmen_lightning_module *m = fixture_module(w.model, &w, step, NULL);
    store a = {.main = pthread_self()}, b = {.main = pthread_self()};
    fulmen_trainer *t = fixture_trainer(g_root, 1);
    fulmen_checkpoint_io_vtable vt = vtable_of(&a);
    vt.remove = NULL;
    CHECK_ERR(fulmen_trainer_set_checkpoint_io(t, &vt), FULMEN_CODE_INVALID_ARGUMENT, "remove");
    vt = vtable_of(&a);
    vt.struct_size = sizeof(size_t);
    CHECK_ERR(fulmen_trainer_set_checkpoint_io(t, &vt), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK(a.frees == 0);
    vt = vtable_of(&a);
    CHECK_OK(fulmen_trainer_set_checkpoint_io(t, &vt));
    vt = vtable_of(&b);
    CHECK_OK(fulmen_trainer_set_checkpoint_io(t, &vt));
    CHECK(a.frees == 1 && b.frees == 0);
    CHECK_OK(fulmen_trainer_set_checkpoint_io(t, NULL));
    CHECK(b.frees == 1);
    /* Local files again: the default checkpoint is on disk, the stores untouched. */
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(a.saves == 0 && b.saves == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    snprintf(g_root, sizeof g_root, "/tmp/fulmen-test-ckptio-XXXXXX");
    CHECK(mkdtemp(g_root) != NULL);
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 1);
    fit_and_resume_through_the_store(l, "lightning");
    fit_and_resume_through_the_store(l, "safetensors");
    a_failing_save_fails_the_fit(l);
    async_saves_overlap_and_report_errors(l);
    hostile_sizes_are_refused(l);
    vtables_are_checked(l);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    CHECK(system(cmd) == 0);
    return check_finish("test_checkpoint_io");
}

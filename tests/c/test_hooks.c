/*
 * Lightning's hooks through the C API: the exact order a host callback and
 * the module's on_hook see in fit / validate / test / predict, what a hook
 * context exposes, stopping from a hook, failing hooks, and vtable rules.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static fulmen_dataset *blobs(size_t n, uint64_t seed) { return fixture_blobs(n, seed, 2.0f); }

static fulmen_model *mlp(void) { return fixture_mlp(16, 0); }

static fulmen_loader *loader(fulmen_dataset *ds, size_t batch, bool shuffle) { return fixture_loader(ds, batch, shuffle, 7); }

/* A trainer on `root` without progress output or loggers; `kv` holds
 * NULL-terminated key/value pairs of further options. */
static fulmen_trainer *trainer_with(long epochs, const char *const *kv) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "seed", 3));
    for (; kv != NULL && kv[0] != NULL; kv += 2) CHECK_OK(fulmen_trainer_options_set(o, kv[0], kv[1]));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* ---- the recorder: one log shared by the host callback and the module ---- */

enum { WHO_CB = 0, WHO_MOD = 1, MAX_EVENTS = 512 };

typedef struct {
    int who, hook;
    int64_t epoch, step, batch_idx;
} event;

typedef struct {
    fulmen_model *model;
    event ev[MAX_EVENTS];
    int n;
    double last_loss;          /* loss of the latest training_step */
    int fail_at_step;          /* training_step fails at this global step (-1 never) */
    int stop_from_step;        /* callback requests a stop in on_train_batch_end from this step (-1 never) */
    int stop_only_at_step;     /* ... only at exactly this step (-1 never) */
    int fail_hook, fail_who;   /* hook that returns an error, from WHO_CB or WHO_MOD (-1 none) */
    int32_t fail_code;
    int cb_freed, mod_freed;
    int bad;                   /* context checks that failed inside hooks */
    char exception[512];
    char loaded[64];           /* value read back in on_load_checkpoint */
    const char *stage;         /* stage seen by the latest hook */
} rec;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    rec *r = ud;
    int64_t step = 0;
    CHECK_OK(fulmen_step_context_global_step(ctx, &step));
    if (step == r->fail_at_step) return fulmen_error_new(FULMEN_CODE_CALLBACK, "host refused this batch");
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(r->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    if (e == NULL) r->last_loss = check_item(*out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", r->last_loss, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *eval_loss(rec *r, fulmen_step_context *ctx, const fulmen_batch *batch, const char *name) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(r->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, name, check_item(loss), 0, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return eval_loss(ud, ctx, batch, "val_loss");
}

static fulmen_error *test_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return eval_loss(ud, ctx, batch, "test_loss");
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    rec *r = ud;
    (void)ctx;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(r->model, x, out);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    rec *r = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(r->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static bool is_batch_hook(int h) {
    return h == FULMEN_HOOK_TRAIN_BATCH_START || h == FULMEN_HOOK_TRAIN_BATCH_END ||
           (h >= FULMEN_HOOK_VALIDATION_BATCH_START && h <= FULMEN_HOOK_VALIDATION_BATCH_END) ||
           h == FULMEN_HOOK_TEST_BATCH_START || h == FULMEN_HOOK_TEST_BATCH_END ||
           h == FULMEN_HOOK_PREDICT_BATCH_START || h == FULMEN_HOOK_PREDICT_BATCH_END;
}

static void expect(rec *r, bool ok) {
    if (!ok) r->bad++;
}

/* Checks what the context exposes for this hook (callback side only). */
static void check_context(rec *r, int hook, fulmen_hook_context *ctx) {
    size_t len = 99;
    fulmen_tensor *t = NULL;
    fulmen_error *e = fulmen_hook_context_batch_len(ctx, &len);
    expect(r, e == NULL);
    fulmen_error_free(e);
    if (is_batch_hook(hook)) {
        expect(r, len == 2);
        e = fulmen_hook_context_batch_get(ctx, 0, &t);
        expect(r, e == NULL && t != NULL);
        fulmen_error_free(e);
        e = fulmen_hook_context_batch_get(ctx, 2, &t);
        expect(r, fulmen_error_code(e) == FULMEN_CODE_OUT_OF_RANGE);
        fulmen_error_free(e);
    } else {
        expect(r, len == 0);
        e = fulmen_hook_context_batch_get(ctx, 0, &t);
        expect(r, fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE && strstr(fulmen_error_message(e), "no batch") != NULL);
        fulmen_error_free(e);
    }
    /* output: the loss in train_batch_end (and around backward), the
     * prediction in predict_batch_end, NULL elsewhere */
    fulmen_tensor *out = (fulmen_tensor *)&len;
    e = fulmen_hook_context_output(ctx, &out);
    expect(r, e == NULL);
    fulmen_error_free(e);
    if (hook == FULMEN_HOOK_TRAIN_BATCH_END || hook == FULMEN_HOOK_BEFORE_BACKWARD || hook == FULMEN_HOOK_AFTER_BACKWARD) {
        expect(r, out != NULL && check_item(out) == r->last_loss);
    } else if (hook == FULMEN_HOOK_PREDICT_BATCH_END) {
        int64_t dims[2] = {0, 0};
        size_t nd = 0;
        e = out == NULL ? fulmen_error_new(FULMEN_CODE_CALLBACK, "no prediction") : fulmen_tensor_shape(out, dims, 2, &nd);
        expect(r, e == NULL && nd == 2 && dims[1] == 2);
        fulmen_error_free(e);
    } else {
        expect(r, out == NULL);
    }
    /* checkpoint entries only in the save / load hooks */
    char buf[64];
    size_t n = 0;
    if (hook != FULMEN_HOOK_SAVE_CHECKPOINT && hook != FULMEN_HOOK_LOAD_CHECKPOINT) {
        e = fulmen_hook_context_checkpoint_set(ctx, "k", "v");
        expect(r, fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE &&
                      strstr(fulmen_error_message(e), "on_save_checkpoint") != NULL);
        fulmen_error_free(e);
        e = fulmen_hook_context_checkpoint_get(ctx, "k", buf, sizeof buf, &n);
        expect(r, fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE);
        fulmen_error_free(e);
    }
    if (hook != FULMEN_HOOK_EXCEPTION) {
        e = fulmen_hook_context_exception(ctx, buf, sizeof buf, &n);
        expect(r, fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE);
        fulmen_error_free(e);
    }
    double v = 0;
    e = fulmen_hook_context_metric(ctx, "no_such_metric", &v);
    expect(r, fulmen_error_code(e) == FULMEN_CODE_INVALID_STATE && strstr(fulmen_error_message(e), "no_such_metric") != NULL);
    fulmen_error_free(e);
    if (hook == FULMEN_HOOK_TRAIN_EPOCH_END && strcmp(r->stage, "fit") == 0) {
        /* the epoch's training mean is known, and validation ran before */
        e = fulmen_hook_context_metric(ctx, "train_loss_epoch", &v);
        expect(r, e == NULL && v > 0);
        fulmen_error_free(e);
    }
}

static fulmen_error *on_hook(rec *r, int who, int32_t hook, fulmen_hook_context *ctx) {
    event *ev = &r->ev[r->n < MAX_EVENTS ? r->n++ : MAX_EVENTS - 1];
    ev->who = who;
    ev->hook = hook;
    CHECK_OK(fulmen_hook_context_epoch(ctx, &ev->epoch));
    CHECK_OK(fulmen_hook_context_global_step(ctx, &ev->step));
    CHECK_OK(fulmen_hook_context_batch_idx(ctx, &ev->batch_idx));
    CHECK_OK(fulmen_hook_context_stage(ctx, &r->stage));
    if (who == WHO_CB) check_context(r, hook, ctx);
    size_t n = 0;
    if (who == WHO_CB && hook == FULMEN_HOOK_EXCEPTION)
        CHECK_OK(fulmen_hook_context_exception(ctx, r->exception, sizeof r->exception, &n));
    if (who == WHO_CB && hook == FULMEN_HOOK_SAVE_CHECKPOINT) {
        char value[32];
        snprintf(value, sizeof value, "saved-at-step-%d", (int)ev->step);
        CHECK_OK(fulmen_hook_context_checkpoint_set(ctx, "recorder.note", value));
    }
    if (who == WHO_CB && hook == FULMEN_HOOK_LOAD_CHECKPOINT) { /* each callback reads back its own entries */
        char tiny[4];
        CHECK_ERR(fulmen_hook_context_checkpoint_get(ctx, "recorder.note", tiny, sizeof tiny, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
        CHECK(n == strlen("saved-at-step-4"));
        CHECK_OK(fulmen_hook_context_checkpoint_get(ctx, "recorder.note", r->loaded, sizeof r->loaded, &n));
        CHECK_ERR(fulmen_hook_context_checkpoint_get(ctx, "absent", tiny, sizeof tiny, &n), FULMEN_CODE_INVALID_ARGUMENT, "absent");
        /* the loaded entries are read-only: a set would change nothing */
        CHECK_ERR(fulmen_hook_context_checkpoint_set(ctx, "recorder.note", "x"), FULMEN_CODE_INVALID_STATE, "read-only");
    }
    if (who == WHO_CB && hook == FULMEN_HOOK_TRAIN_BATCH_END &&
        ((r->stop_from_step >= 0 && ev->step >= r->stop_from_step) || ev->step == r->stop_only_at_step))
        CHECK_OK(fulmen_hook_context_request_stop(ctx));
    if (hook == r->fail_hook && who == r->fail_who) return fulmen_error_new(r->fail_code, "hook said no");
    return NULL;
}

static fulmen_error *cb_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) { return on_hook(ud, WHO_CB, hook, ctx); }
static fulmen_error *mod_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) { return on_hook(ud, WHO_MOD, hook, ctx); }
static void cb_free(void *ud) { ((rec *)ud)->cb_freed++; }
static void mod_free(void *ud) { ((rec *)ud)->mod_freed++; }

static fulmen_module_vtable module_vtable(rec *r) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = r;
    vt.userdata_free = mod_free;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.test_step = test_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = mod_hook;
    return vt;
}

static fulmen_lightning_module *module_for(rec *r) {
    fulmen_module_vtable vt = module_vtable(r);
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, r->model, &m));
    return m;
}

static void add_recorder(fulmen_trainer *t, rec *r) {
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb;
    cb.userdata = r;
    cb.userdata_free = cb_free;
    cb.on_hook = cb_hook;
    CHECK_OK(fulmen_trainer_add_callback(t, "recorder", &cb));
}

static void rec_init(rec *r) {
    memset(r, 0, sizeof *r);
    r->model = mlp();
    r->fail_at_step = r->stop_from_step = r->stop_only_at_step = r->fail_hook = r->fail_who = -1;
    r->stage = "";
}

/* ---- expected sequences, written by hand from Lightning's loops ---- */

typedef struct {
    int hook[MAX_EVENTS];
    int n;
} seq;

static void push(seq *s, int hook) {
    if (s->n < MAX_EVENTS) s->hook[s->n++] = hook;
}

static void push_eval(seq *s, int start, int epoch_start, int batch_start, int batch_end, int epoch_end, int end, int batches) {
    push(s, start);
    push(s, epoch_start);
    for (int b = 0; b < batches; b++) {
        push(s, batch_start);
        push(s, batch_end);
    }
    push(s, epoch_end);
    push(s, end);
}

static void push_val(seq *s, int batches) {
    push_eval(s, FULMEN_HOOK_VALIDATION_START, FULMEN_HOOK_VALIDATION_EPOCH_START, FULMEN_HOOK_VALIDATION_BATCH_START,
              FULMEN_HOOK_VALIDATION_BATCH_END, FULMEN_HOOK_VALIDATION_EPOCH_END, FULMEN_HOOK_VALIDATION_END, batches);
}

static void push_train_batch(seq *s) {
    push(s, FULMEN_HOOK_TRAIN_BATCH_START);
    push(s, FULMEN_HOOK_BEFORE_ZERO_GRAD);
    push(s, FULMEN_HOOK_BEFORE_BACKWARD);
    push(s, FULMEN_HOOK_AFTER_BACKWARD);
    push(s, FULMEN_HOOK_BEFORE_OPTIMIZER_STEP);
    push(s, FULMEN_HOOK_TRAIN_BATCH_END);
}

/* Compares the recorded events with `s`, each hook seen by the callback
 * first and the module right after. Prints the first difference. */
static bool same_sequence(const rec *r, const seq *s, const char *what) {
    bool ok = r->n == 2 * s->n;
    int first_bad = -1;
    for (int i = 0; i < s->n && 2 * i + 1 < r->n; i++) {
        if (r->ev[2 * i].hook != s->hook[i] || r->ev[2 * i].who != WHO_CB || r->ev[2 * i + 1].hook != s->hook[i] ||
            r->ev[2 * i + 1].who != WHO_MOD) {
            ok = false;
            first_bad = i;
            break;
        }
    }
    if (!ok) {
        fprintf(stderr, "%s: recorded %d events, expected %d; first difference at expected #%d (%s)\n", what, r->n,
                2 * s->n, first_bad, first_bad >= 0 ? fulmen_hook_name(s->hook[first_bad]) : "-");
        for (int i = 0; i < r->n; i++)
            fprintf(stderr, "  %3d %s %s\n", i, r->ev[i].who == WHO_CB ? "cb " : "mod", fulmen_hook_name(r->ev[i].hook));
    }
    return ok;
}

static int count(const rec *r, int who, int hook) {
    int c = 0;
    for (int i = 0; i < r->n; i++) c += r->ev[i].who == who && r->ev[i].hook == hook;
    return c;
}

static const event *find(const rec *r, int who, int hook, int nth) {
    for (int i = 0; i < r->n; i++)
        if (r->ev[i].who == who && r->ev[i].hook == hook && nth-- == 0) return &r->ev[i];
    return NULL;
}

/* ---- tests ---- */

static void test_hook_names(void) {
    static const char *names[] = {
        "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
        "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start",
        "on_train_batch_end", "on_validation_start", "on_validation_end", "on_validation_epoch_start",
        "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end", "on_test_start",
        "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start", "on_test_batch_end",
        "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
        "on_predict_batch_start", "on_predict_batch_end", "on_before_backward", "on_after_backward",
        "on_before_optimizer_step", "on_before_zero_grad", "on_save_checkpoint", "on_load_checkpoint", "on_exception",
        "on_validation_model_eval", "on_validation_model_train", "on_test_model_eval", "on_test_model_train",
        "on_predict_model_eval", "on_validation_model_zero_grad", "on_before_batch_transfer",
        "transfer_batch_to_device", "on_after_batch_transfer", "prepare_data"};
    CHECK(sizeof names / sizeof names[0] == FULMEN_HOOK_PREPARE_DATA + 1);
    for (int i = 0; i <= FULMEN_HOOK_PREPARE_DATA; i++) {
        const char *got = fulmen_hook_name(i);
        CHECK(got != NULL && strcmp(got, names[i]) == 0);
    }
    CHECK(strcmp(fulmen_hook_name(-1), "") == 0);
    CHECK(strcmp(fulmen_hook_name(FULMEN_HOOK_PREPARE_DATA + 1), "") == 0);
    CHECK(strcmp(fulmen_hook_name(1000000), "") == 0);
}

/* fit: 2 epochs x 2 batches, validation of 2 batches, default ModelCheckpoint. */
static void test_fit_sequence(void) {
    fulmen_dataset *train = blobs(16, 1), *val = blobs(16, 2);
    fulmen_loader *tl = loader(train, 8, true), *vl = loader(val, 8, false);
    rec r;
    rec_init(&r);
    fulmen_lightning_module *m = module_for(&r);
    fulmen_trainer *t = trainer_with(2, NULL);
    add_recorder(t, &r);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));

    seq s = {.n = 0};
    push(&s, FULMEN_HOOK_SETUP);
    push(&s, FULMEN_HOOK_FIT_START);
    push(&s, FULMEN_HOOK_SANITY_CHECK_START);
    push_val(&s, 2);
    push(&s, FULMEN_HOOK_SANITY_CHECK_END);
    push(&s, FULMEN_HOOK_TRAIN_START);
    for (int epoch = 0; epoch < 2; epoch++) {
        push(&s, FULMEN_HOOK_TRAIN_EPOCH_START);
        push_train_batch(&s);
        push_train_batch(&s);
        push_val(&s, 2);
        push(&s, FULMEN_HOOK_TRAIN_EPOCH_END);
        push(&s, FULMEN_HOOK_SAVE_CHECKPOINT); /* default ModelCheckpoint, at the training epoch end */
    }
    push(&s, FULMEN_HOOK_TRAIN_END);
    push(&s, FULMEN_HOOK_FIT_END);
    push(&s, FULMEN_HOOK_TEARDOWN);
    CHECK(same_sequence(&r, &s, "fit"));
    CHECK(r.bad == 0);
    CHECK(strcmp(r.stage, "fit") == 0);

    /* epoch / global_step / batch_idx as each hook sees them */
    const event *e = find(&r, WHO_CB, FULMEN_HOOK_TRAIN_BATCH_START, 3); /* epoch 1, batch 1 */
    CHECK(e != NULL && e->epoch == 1 && e->step == 3 && e->batch_idx == 1);
    e = find(&r, WHO_MOD, FULMEN_HOOK_TRAIN_BATCH_END, 3);
    CHECK(e != NULL && e->epoch == 1 && e->step == 4 && e->batch_idx == 1);
    e = find(&r, WHO_CB, FULMEN_HOOK_BEFORE_OPTIMIZER_STEP, 2);
    CHECK(e != NULL && e->epoch == 1 && e->step == 2);
    e = find(&r, WHO_CB, FULMEN_HOOK_VALIDATION_BATCH_END, 3); /* sanity: 0,1; epoch 0: 2,3 */
    CHECK(e != NULL && e->epoch == 0 && e->step == 2 && e->batch_idx == 1);
    e = find(&r, WHO_CB, FULMEN_HOOK_SANITY_CHECK_START, 0);
    CHECK(e != NULL && e->step == 0 && e->batch_idx == -1);
    e = find(&r, WHO_CB, FULMEN_HOOK_TRAIN_EPOCH_END, 1);
    CHECK(e != NULL && e->epoch == 1 && e->step == 4 && e->batch_idx == -1);
    e = find(&r, WHO_CB, FULMEN_HOOK_SAVE_CHECKPOINT, 0);
    CHECK(e != NULL && e->epoch == 0 && e->step == 2);
    e = find(&r, WHO_CB, FULMEN_HOOK_TEARDOWN, 0);
    CHECK(e != NULL && e->step == 4);

    /* resuming from the checkpoint: on_load_checkpoint after setup, before
     * on_fit_start, and the entry written in on_save_checkpoint comes back */
    char path[512];
    size_t len = 0;
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, path, sizeof path, &len));
    fulmen_trainer *t2 = trainer_with(3, NULL);
    add_recorder(t2, &r);
    r.n = 0;
    CHECK_OK(fulmen_trainer_fit(t2, m, tl, vl, path));
    CHECK(r.n > 6 && r.ev[0].hook == FULMEN_HOOK_SETUP && r.ev[2].hook == FULMEN_HOOK_LOAD_CHECKPOINT &&
          r.ev[2].who == WHO_CB && r.ev[3].hook == FULMEN_HOOK_LOAD_CHECKPOINT && r.ev[3].who == WHO_MOD &&
          r.ev[4].hook == FULMEN_HOOK_FIT_START);
    CHECK(strcmp(r.loaded, "saved-at-step-4") == 0);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_EPOCH_START) == 1);
    CHECK(r.bad == 0);
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t2, &step));
    CHECK(step == 6);

    /* the callback's userdata is freed with its trainer, once */
    CHECK(r.cb_freed == 0);
    fulmen_trainer_free(t);
    CHECK(r.cb_freed == 1);
    fulmen_trainer_free(t2);
    CHECK(r.cb_freed == 2);
    fulmen_trainer_free(t2);
    CHECK(r.cb_freed == 2);
    CHECK(r.mod_freed == 0);
    fulmen_lightning_module_free(m);
    CHECK(r.mod_freed == 1);
    fulmen_model_free(r.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
}

/* validate / test / predict, 2 batches each. */
static void test_eval_sequences(void) {
    fulmen_dataset *val = blobs(16, 3);
    fulmen_loader *vl = loader(val, 8, false);
    rec r;
    rec_init(&r);
    fulmen_lightning_module *m = module_for(&r);
    fulmen_trainer *t = trainer_with(1, NULL);
    add_recorder(t, &r);

    seq s = {.n = 0};
    push(&s, FULMEN_HOOK_SETUP);
    push_val(&s, 2);
    push(&s, FULMEN_HOOK_TEARDOWN);
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK(same_sequence(&r, &s, "validate"));
    CHECK(strcmp(r.stage, "validate") == 0);

    r.n = 0;
    s.n = 0;
    push(&s, FULMEN_HOOK_SETUP);
    push_eval(&s, FULMEN_HOOK_TEST_START, FULMEN_HOOK_TEST_EPOCH_START, FULMEN_HOOK_TEST_BATCH_START,
              FULMEN_HOOK_TEST_BATCH_END, FULMEN_HOOK_TEST_EPOCH_END, FULMEN_HOOK_TEST_END, 2);
    push(&s, FULMEN_HOOK_TEARDOWN);
    CHECK_OK(fulmen_trainer_test(t, m, vl, NULL));
    CHECK(same_sequence(&r, &s, "test"));
    CHECK(strcmp(r.stage, "test") == 0);

    r.n = 0;
    s.n = 0;
    push(&s, FULMEN_HOOK_SETUP);
    push_eval(&s, FULMEN_HOOK_PREDICT_START, FULMEN_HOOK_PREDICT_EPOCH_START, FULMEN_HOOK_PREDICT_BATCH_START,
              FULMEN_HOOK_PREDICT_BATCH_END, FULMEN_HOOK_PREDICT_EPOCH_END, FULMEN_HOOK_PREDICT_END, 2);
    push(&s, FULMEN_HOOK_TEARDOWN);
    fulmen_tensor *pred = NULL;
    CHECK_OK(fulmen_trainer_predict(t, m, vl, NULL, &pred));
    CHECK(same_sequence(&r, &s, "predict"));
    CHECK(strcmp(r.stage, "predict") == 0);
    const event *e = find(&r, WHO_CB, FULMEN_HOOK_PREDICT_BATCH_END, 1);
    CHECK(e != NULL && e->batch_idx == 1);
    CHECK(r.bad == 0);
    fulmen_tensor_free(pred);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(r.model);
    fulmen_loader_free(vl);
    fulmen_dataset_free(val);
}

/* A failing training_step: on_exception with the error text, then nothing. */
static void test_on_exception(void) {
    fulmen_dataset *train = blobs(32, 4);
    fulmen_loader *tl = loader(train, 8, false);
    rec r;
    rec_init(&r);
    r.fail_at_step = 5;
    fulmen_lightning_module *m = module_for(&r);
    fulmen_trainer *t = trainer_with(3, NULL);
    add_recorder(t, &r);
    CHECK_ERR(fulmen_trainer_fit(t, m, tl, NULL, NULL), FULMEN_CODE_CALLBACK, "host refused this batch");
    CHECK(r.n >= 2 && r.ev[r.n - 2].hook == FULMEN_HOOK_EXCEPTION && r.ev[r.n - 2].who == WHO_CB &&
          r.ev[r.n - 1].hook == FULMEN_HOOK_EXCEPTION && r.ev[r.n - 1].who == WHO_MOD);
    CHECK(strstr(r.exception, "host refused this batch") != NULL);
    CHECK(strstr(r.exception, "training_step (epoch 1, global step 5, batch 1)") != NULL);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_END) == 0 && count(&r, WHO_CB, FULMEN_HOOK_TEARDOWN) == 0);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_EXCEPTION) == 1 && count(&r, WHO_MOD, FULMEN_HOOK_EXCEPTION) == 1);
    /* the batch that failed got its on_train_batch_start, not its end */
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_BATCH_START) == 6 && count(&r, WHO_CB, FULMEN_HOOK_TRAIN_BATCH_END) == 5);
    CHECK(r.bad == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(r.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

/* request_stop from on_train_batch_end; 4 batches per epoch. */
static void test_request_stop(void) {
    fulmen_dataset *train = blobs(32, 5), *val = blobs(16, 6);
    fulmen_loader *tl = loader(train, 8, false), *vl = loader(val, 8, false);
    int64_t step = -1, epoch = -1;

    /* stop right after the first step: the epoch still ends cleanly */
    rec r;
    rec_init(&r);
    r.stop_only_at_step = 1;
    fulmen_lightning_module *m = module_for(&r);
    fulmen_trainer *t = trainer_with(5, NULL);
    add_recorder(t, &r);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 1);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_BATCH_END) == 1);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_EPOCH_END) == 1 && count(&r, WHO_MOD, FULMEN_HOOK_TRAIN_EPOCH_END) == 1);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_END) == 1 && count(&r, WHO_CB, FULMEN_HOOK_FIT_END) == 1 &&
          count(&r, WHO_CB, FULMEN_HOOK_TEARDOWN) == 1);
    fulmen_trainer_free(t);

    /* a stop asked at every step from step 1 with min_epochs 2: training
     * goes on until 2 whole epochs are done (Lightning's _can_stop_early
     * counts finished epochs), then stops */
    r.n = 0;
    r.stop_only_at_step = -1;
    r.stop_from_step = 1;
    const char *min2[] = {"min_epochs", "2", NULL};
    t = trainer_with(5, min2);
    add_recorder(t, &r);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK_OK(fulmen_trainer_current_epoch(t, &epoch));
    if (step != 8) fprintf(stderr, "request_stop + min_epochs=2: global_step %d, expected 8 (2 whole epochs)\n", (int)step);
    CHECK(step == 8);
    CHECK(epoch == 2);
    CHECK(count(&r, WHO_CB, FULMEN_HOOK_TRAIN_EPOCH_START) == 2);
    fulmen_trainer_free(t);

    /* a single request (Lightning: trainer.should_stop = True stays set)
     * with min_epochs 2 ends training once 2 epochs are done */
    r.n = 0;
    r.stop_from_step = -1;
    r.stop_only_at_step = 1;
    t = trainer_with(5, min2);
    add_recorder(t, &r);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    if (step != 8) fprintf(stderr, "one request_stop + min_epochs=2: global_step %d, expected 8\n", (int)step);
    CHECK(step == 8);
    CHECK(r.bad == 0);
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_model_free(r.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
}

/* A hook returning an error stops fit with a message naming who and where. */
static void test_failing_hooks(void) {
    fulmen_dataset *train = blobs(32, 7);
    fulmen_loader *tl = loader(train, 8, false);
    rec r;
    rec_init(&r);
    fulmen_lightning_module *m = module_for(&r);
    int64_t step = -1;

    r.fail_hook = FULMEN_HOOK_TRAIN_EPOCH_START;
    r.fail_who = WHO_CB;
    r.fail_code = FULMEN_CODE_IO;
    fulmen_trainer *t = trainer_with(3, NULL);
    add_recorder(t, &r);
    fulmen_error *e = fulmen_trainer_fit(t, m, tl, NULL, NULL);
    CHECK(fulmen_error_code(e) == FULMEN_CODE_IO);
    CHECK(strstr(fulmen_error_message(e), "recorder") != NULL);
    CHECK(strstr(fulmen_error_message(e), "on_train_epoch_start") != NULL);
    CHECK(strstr(fulmen_error_message(e), "hook said no") != NULL);
    fulmen_error_free(e);
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 0);
    /* the module's own hook did not run for the failed hook, on_exception did */
    CHECK(count(&r, WHO_MOD, FULMEN_HOOK_TRAIN_EPOCH_START) == 0);
    CHECK(count(&r, WHO_MOD, FULMEN_HOOK_EXCEPTION) == 1);
    CHECK(strstr(r.exception, "hook said no") != NULL);
    fulmen_trainer_free(t);

    r.n = 0;
    r.fail_hook = FULMEN_HOOK_AFTER_BACKWARD;
    r.fail_who = WHO_MOD;
    r.fail_code = FULMEN_CODE_CALLBACK;
    t = trainer_with(3, NULL);
    add_recorder(t, &r);
    e = fulmen_trainer_fit(t, m, tl, NULL, NULL);
    CHECK(fulmen_error_code(e) == FULMEN_CODE_CALLBACK);
    CHECK(strstr(fulmen_error_message(e), "LightningModule") != NULL);
    CHECK(strstr(fulmen_error_message(e), "on_after_backward") != NULL);
    CHECK(strstr(fulmen_error_message(e), "hook said no") != NULL);
    fulmen_error_free(e);
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == 0); /* no optimizer step after the failing hook */
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_model_free(r.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

/* Callback and module vtable rules. */
static void test_vtables(void) {
    rec r;
    rec_init(&r);
    fulmen_trainer *t = trainer_with(1, NULL);
    fulmen_callback_vtable cb;
    memset(&cb, 0, sizeof cb);
    cb.struct_size = sizeof cb - 1;
    cb.userdata = &r;
    cb.userdata_free = cb_free;
    cb.on_hook = cb_hook;
    CHECK_ERR(fulmen_trainer_add_callback(t, "x", &cb), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    cb.struct_size = sizeof cb;
    cb.on_hook = NULL;
    CHECK_ERR(fulmen_trainer_add_callback(t, "x", &cb), FULMEN_CODE_INVALID_ARGUMENT, "on_hook");
    cb.on_hook = cb_hook;
    CHECK_ERR(fulmen_trainer_add_callback(t, "", &cb), FULMEN_CODE_INVALID_ARGUMENT, "name");
    CHECK_ERR(fulmen_trainer_add_callback(t, NULL, &cb), FULMEN_CODE_NULL_ARGUMENT, "name");
    CHECK_ERR(fulmen_trainer_add_callback(t, "x", NULL), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    CHECK_ERR(fulmen_trainer_add_callback(NULL, "x", &cb), FULMEN_CODE_NULL_ARGUMENT, "trainer");
    fulmen_trainer_free(t);
    CHECK(r.cb_freed == 0); /* failed adds do not take the userdata */

    /* a 0.1.0-style module vtable that ends before on_hook is accepted and
     * its (garbage) on_hook slot is never read */
    fulmen_dataset *train = blobs(16, 8);
    fulmen_loader *tl = loader(train, 8, false);
    fulmen_module_vtable vt = module_vtable(&r);
    vt.struct_size = offsetof(fulmen_module_vtable, on_hook);
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, r.model, &m));
    t = trainer_with(1, NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(r.n == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    CHECK(r.mod_freed == 1);
    vt.struct_size = offsetof(fulmen_module_vtable, on_hook) - 1;
    m = NULL;
    CHECK_ERR(fulmen_lightning_module_new(&vt, r.model, &m), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK(m == NULL && r.mod_freed == 1);
    /* a full vtable with on_hook NULL is fine too */
    vt.struct_size = sizeof vt;
    vt.on_hook = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, r.model, &m));
    t = trainer_with(1, NULL);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, NULL, NULL));
    CHECK(r.n == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    CHECK(r.mod_freed == 2);

    /* hook context accessors refuse a NULL context */
    int64_t v = 0;
    CHECK_ERR(fulmen_hook_context_epoch(NULL, &v), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_hook_context_request_stop(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);

    fulmen_model_free(r.model);
    fulmen_loader_free(tl);
    fulmen_dataset_free(train);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-hooks-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    test_hook_names();
    test_fit_sequence();
    test_eval_sequences();
    test_on_exception();
    test_request_stop();
    test_failing_hooks();
    test_vtables();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_hooks");
}

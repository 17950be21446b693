/*
 * What the trainer does with what the module's methods return, as
 * Lightning 2.6 does: a training_step that leaves *out NULL (Lightning's
 * `return None`: no backward, the optimizer step still runs and counts),
 * on_train_batch_start asking to skip the rest of the epoch (Lightning's
 * `return -1`, fulmen_hook_context_skip_rest_of_epoch), and a
 * configure_optimizers that adds no optimizer (the fit runs without one).
 * Each case checks the steps taken, global_step, the batches seen and
 * which batches changed the weights.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stdlib.h>

static char root[256];

enum { OPT_SGD, OPT_NONE, OPT_LBFGS };
enum { WEIGHTS = 16, EPOCHS_MAX = 2, BATCHES_MAX = 8 };

typedef struct {
    fulmen_model *model;   /* first member, as the fixtures expect */
    int none_every;        /* *out left NULL when batch_idx % none_every == none_every - 1 (0: never) */
    int64_t skip_epoch;    /* on_train_batch_start skips the rest of this epoch ... */
    int64_t skip_batch;    /* ... at this batch (-1: never) */
    int optimizer;         /* OPT_* */
    int steps, batch_starts, batch_ends, null_outputs, backwards, before_steps, zero_grads;
    int64_t lambda_steps;  /* the largest step LambdaLR asked its factor for */
    int refused;           /* the module's skips refused outside on_train_batch_start */
    int callback_refused;  /* a callback's skips refused */
    int epoch_end_unchanged; /* epochs whose end found the weights of their last batch start */
    float before[WEIGHTS]; /* "0.weight" at the latest batch start */
    char changed[EPOCHS_MAX][BATCHES_MAX]; /* per batch: 'c' changed, 'u' unchanged, 0 no batch end */
} host;

static void reset(host *h, fulmen_model *model) {
    memset(h, 0, sizeof *h);
    h->model = model;
    h->skip_epoch = h->skip_batch = -1;
}

/* Copies "0.weight" (Linear(2, 8): 16 values) into `dst`. */
static fulmen_error *read_weights(const fulmen_model *m, float *dst) {
    fulmen_tensor *w = NULL;
    fulmen_error *e = fulmen_model_state_dict_get(m, "0.weight", &w);
    if (e == NULL) e = fulmen_tensor_copy_to(w, FULMEN_DTYPE_F32, dst, WEIGHTS * sizeof(float));
    fulmen_tensor_free(w);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    host *h = ud;
    int64_t i = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    if (e != NULL) return e;
    h->steps++;
    if (h->none_every > 0 && i % h->none_every == h->none_every - 1) return NULL; /* no loss */
    return fixture_cross_entropy(h->model, batch, out);
}

/* LambdaLR's factor, 1: records how many times the scheduler stepped. */
static fulmen_error *constant_factor(void *ud, int64_t step, size_t group, double *out) {
    host *h = ud;
    (void)group;
    if (step > h->lambda_steps) h->lambda_steps = step;
    *out = 1.0;
    return NULL;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    host *h = ud;
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *sched = NULL;
    fulmen_error *e = NULL;
    if (h->optimizer == OPT_NONE) return NULL;
    if (h->optimizer == OPT_LBFGS) {
        fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
        o.max_iter = 2;
        e = fulmen_optimizer_lbfgs_new(h->model, NULL, 0, &o, &opt);
        return fixture_add_optimizer(config, e, opt);
    }
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    e = fulmen_optimizer_sgd_new(h->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_scheduler_lambda_lr_new(opt, constant_factor, h, NULL, &sched);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(sched);
        fulmen_optimizer_free(opt);
    }
    return e;
}

/* The module's hooks: counts, weight snapshots, and the skip. */
static fulmen_error *module_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    host *h = ud;
    int64_t epoch = -1, i = -1;
    fulmen_error *e = fulmen_hook_context_epoch(ctx, &epoch);
    if (e == NULL) e = fulmen_hook_context_batch_idx(ctx, &i);
    if (e != NULL) return e;
    switch (hook) {
        case FULMEN_HOOK_TRAIN_BATCH_START:
            h->batch_starts++;
            e = read_weights(h->model, h->before);
            if (e == NULL && epoch == h->skip_epoch && i == h->skip_batch) e = fulmen_hook_context_skip_rest_of_epoch(ctx);
            return e;
        case FULMEN_HOOK_TRAIN_BATCH_END: {
            float now[WEIGHTS];
            fulmen_tensor *loss = NULL;
            h->batch_ends++;
            e = fulmen_hook_context_output(ctx, &loss);
            if (e == NULL && loss == NULL) h->null_outputs++;
            if (e == NULL) e = read_weights(h->model, now);
            if (e == NULL && epoch >= 0 && epoch < EPOCHS_MAX && i >= 0 && i < BATCHES_MAX)
                h->changed[epoch][i] = memcmp(now, h->before, sizeof now) == 0 ? 'u' : 'c';
            return e;
        }
        case FULMEN_HOOK_TRAIN_EPOCH_END: {
            float now[WEIGHTS];
            fulmen_error *refused = fulmen_hook_context_skip_rest_of_epoch(ctx);
            if (fixture_code(refused) == FULMEN_CODE_INVALID_STATE) h->refused++;
            e = read_weights(h->model, now);
            if (e == NULL && memcmp(now, h->before, sizeof now) == 0) h->epoch_end_unchanged++;
            return e;
        }
        case FULMEN_HOOK_AFTER_BACKWARD:
            h->backwards++;
            return NULL;
        case FULMEN_HOOK_BEFORE_OPTIMIZER_STEP:
            h->before_steps++;
            return NULL;
        case FULMEN_HOOK_BEFORE_ZERO_GRAD:
            h->zero_grads++;
            return NULL;
        default:
            return NULL;
    }
}

/* A host callback that tries to skip, as only the module may. */
static fulmen_error *skipping_callback(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    host *h = ud;
    if (hook == FULMEN_HOOK_TRAIN_BATCH_START &&
        fixture_code(fulmen_hook_context_skip_rest_of_epoch(ctx)) == FULMEN_CODE_INVALID_STATE)
        h->callback_refused++;
    return NULL;
}

static fulmen_lightning_module *module_of(host *h) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = h;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = module_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, h->model, &m));
    return m;
}

/* A trainer of `epochs` epochs under `root`, no logger or checkpoint, with
 * accumulate_grad_batches `acc`. */
static fulmen_trainer *trainer_of(int64_t epochs, int64_t acc) {
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_int(o, "accumulate_grad_batches", acc));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* Fits `h` on 40 blobs in batches of 8 (5 batches per epoch, in order);
 * writes global_step to *steps and returns the fit's error. */
static fulmen_error *fit(host *h, int64_t epochs, int64_t acc, bool with_skipper, int64_t *steps) {
    fulmen_dataset *ds = fixture_blobs(40, 5, 2.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    fulmen_lightning_module *m = module_of(h);
    fulmen_trainer *t = trainer_of(epochs, acc);
    if (with_skipper) {
        fulmen_callback_vtable cb = {.struct_size = sizeof cb, .userdata = h, .on_hook = skipping_callback};
        CHECK_OK(fulmen_trainer_add_callback(t, "skipper", &cb));
    }
    fulmen_error *e = fulmen_trainer_fit(t, m, l, NULL, NULL);
    CHECK_OK(fulmen_trainer_global_step(t, steps));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    return e;
}

/* Leaving *out NULL every 3rd batch: no backward for it, and its
 * optimizer step (which finds no gradients) leaves the weights alone but
 * counts, as does its scheduler step. */
static void test_no_loss(void) {
    fulmen_model *model = fixture_mlp(8, 0);
    host h;
    reset(&h, model);
    h.none_every = 3;
    int64_t steps = -1;
    CHECK_OK(fit(&h, 2, 1, false, &steps));
    CHECK(steps == 10);
    CHECK(h.steps == 10 && h.batch_ends == 10 && h.null_outputs == 2);
    CHECK(h.backwards == 8 && h.before_steps == 10 && h.zero_grads == 10);
    CHECK(h.lambda_steps == 10);
    CHECK(memcmp(h.changed[0], "ccucc", 5) == 0);
    CHECK(memcmp(h.changed[1], "ccucc", 5) == 0);
    fulmen_model_free(model);
}

/* With accumulate_grad_batches 2 a batch without a loss that ends a
 * window still steps on the gradients of the window's first batch. */
static void test_no_loss_accumulating(void) {
    fulmen_model *model = fixture_mlp(8, 0);
    host h;
    reset(&h, model);
    h.none_every = 2; /* batches 1 and 3 */
    int64_t steps = -1;
    CHECK_OK(fit(&h, 1, 2, false, &steps));
    CHECK(steps == 3); /* windows [0, 1], [2, 3], [4] */
    CHECK(h.backwards == 3 && h.before_steps == 3 && h.zero_grads == 3);
    CHECK(memcmp(h.changed[0], "ucucc", 5) == 0);
    fulmen_model_free(model);
}

/* Skipping the rest of epoch 1 at batch 2: that batch reaches only its
 * start hooks, the epoch ends (its end hooks run), its step scheduler
 * steps once more, global_step does not count it. */
static void test_skip_rest_of_epoch(void) {
    fulmen_model *model = fixture_mlp(8, 0);
    host h;
    reset(&h, model);
    h.skip_epoch = 1;
    h.skip_batch = 2;
    int64_t steps = -1;
    CHECK_OK(fit(&h, 2, 1, true, &steps));
    CHECK(steps == 7);
    CHECK(h.batch_starts == 8 && h.steps == 7 && h.batch_ends == 7 && h.backwards == 7);
    CHECK(h.lambda_steps == 8); /* Lightning steps it for the skipped batch too */
    CHECK(memcmp(h.changed[1], "cc\0\0\0", 5) == 0);
    CHECK(h.epoch_end_unchanged == 1); /* epoch 1's: its skipped batch changed nothing */
    CHECK(h.refused == 2);             /* in on_train_epoch_end */
    CHECK(h.callback_refused == 8);    /* a callback's on_train_batch_start */
    fulmen_model_free(model);
}

/* No optimizer: every batch's step, backward and hooks run and count in
 * global_step; the weights never change. */
static void test_no_optimizer(void) {
    fulmen_model *model = fixture_mlp(8, 0);
    host h;
    reset(&h, model);
    h.optimizer = OPT_NONE;
    int64_t steps = -1;
    CHECK_OK(fit(&h, 2, 1, false, &steps));
    CHECK(steps == 10);
    CHECK(h.steps == 10 && h.backwards == 10 && h.before_steps == 10 && h.zero_grads == 10);
    CHECK(memcmp(h.changed[0], "uuuuu", 5) == 0);
    CHECK(memcmp(h.changed[1], "uuuuu", 5) == 0);
    fulmen_model_free(model);
}

/* LBFGS re-evaluates the loss during its step: a step without one fails
 * the fit (as Lightning's does), naming why, before any update. */
static void test_lbfgs_needs_a_loss(void) {
    fulmen_model *model = fixture_mlp(8, 0);
    host h;
    reset(&h, model);
    h.optimizer = OPT_LBFGS;
    h.none_every = 1;
    int64_t steps = -1;
    float before[WEIGHTS], after[WEIGHTS];
    CHECK_OK(read_weights(model, before));
    CHECK_ERR(fit(&h, 1, 1, false, &steps), FULMEN_CODE_CALLBACK, "re-evaluates the loss");
    CHECK(steps == 0 && h.steps == 1 && h.batch_ends == 0);
    CHECK_OK(read_weights(model, after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    fulmen_model_free(model);
}

/* The skip outside a hook context: NULL is refused. */
static void test_skip_arguments(void) {
    CHECK_ERR(fulmen_hook_context_skip_rest_of_epoch(NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-hook-returns-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    test_no_loss();
    test_no_loss_accumulating();
    test_skip_rest_of_epoch();
    test_no_optimizer();
    test_lbfgs_needs_a_loss();
    test_skip_arguments();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_hook_returns");
}

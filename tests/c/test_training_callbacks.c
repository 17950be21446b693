/*
 * GradientAccumulationScheduler, OnExceptionCheckpoint and weight
 * averaging: a schedule gives the same weights as the equal
 * accumulate_grad_batches, and the steps it implies; a fit that fails
 * saves on_exception.ckpt, from which a resumed fit ends with the weights
 * of an uninterrupted one; an EMA run resumed from its checkpoint (the
 * average, the trained weights and the count) ends as an uninterrupted
 * one, and a never-updated average gives back the starting weights.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>
#include <sys/stat.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int64_t fail_at;     /* global step whose training_step fails (-1: never) */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    int64_t g = 0;
    CHECK_OK(fulmen_step_context_global_step(ctx, &g));
    if (g == s->fail_at) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the host stopped here");
    return fixture_cross_entropy(s->model, batch, out);
}

/* A seeded model and its module. */
static fulmen_lightning_module *seeded(state *s, int64_t fail_at) {
    CHECK_OK(fulmen_manual_seed(11));
    s->model = fixture_mlp(8, 0);
    s->fail_at = fail_at;
    return fixture_module(s->model, s, step, NULL);
}

static fulmen_trainer *trainer_with(const char *root, int64_t epochs, int64_t accumulate) {
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set_int(o, "accumulate_grad_batches", accumulate));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

static void free_run(state *s, fulmen_lightning_module *m, fulmen_trainer *t) {
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s->model);
}

static void test_accumulation_schedule(fulmen_loader *loader) {
    /* {0: 2} for an epoch = accumulate_grad_batches 2, to the bit */
    state a, b;
    fulmen_lightning_module *ma = seeded(&a, -1), *mb = seeded(&b, -1);
    fulmen_trainer *ta = trainer_with(NULL, 1, 1), *tb = trainer_with(NULL, 1, 2);
    const int64_t e0[1] = {0}, f2[1] = {2};
    CHECK_OK(fulmen_trainer_add_gradient_accumulation_scheduler(ta, e0, f2, 1));
    CHECK_OK(fulmen_trainer_fit(ta, ma, loader, NULL, NULL));
    CHECK_OK(fulmen_trainer_fit(tb, mb, loader, NULL, NULL));
    CHECK(fixture_max_diff(a.model, b.model) == 0.0);
    int64_t steps = 0;
    CHECK_OK(fulmen_trainer_global_step(ta, &steps));
    CHECK(steps == 4); /* 8 batches, 2 per step */
    free_run(&a, ma, ta);
    free_run(&b, mb, tb);

    /* {1: 4, 3: 1}: 8 + 2 + 2 + 8 optimizer steps over 4 epochs */
    fulmen_lightning_module *m = seeded(&a, -1);
    fulmen_trainer *t = trainer_with(NULL, 4, 1);
    const int64_t epochs[2] = {1, 3}, factors[2] = {4, 1};
    CHECK_OK(fulmen_trainer_add_gradient_accumulation_scheduler(t, epochs, factors, 2));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 8 + 2 + 2 + 8);
    fulmen_trainer_free(t);

    /* refused: with accumulate_grad_batches, and bad schedules */
    t = trainer_with(NULL, 1, 2);
    CHECK_OK(fulmen_trainer_add_gradient_accumulation_scheduler(t, epochs, factors, 2));
    CHECK_ERR(fulmen_trainer_fit(t, m, loader, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "accumulate_grad_batches");
    const int64_t neg[1] = {-1}, zero[1] = {0}, twice[2] = {2, 2};
    CHECK_ERR(fulmen_trainer_add_gradient_accumulation_scheduler(t, neg, f2, 1), FULMEN_CODE_INVALID_ARGUMENT,
              "negative");
    CHECK_ERR(fulmen_trainer_add_gradient_accumulation_scheduler(t, e0, zero, 1), FULMEN_CODE_INVALID_ARGUMENT, "below 1");
    CHECK_ERR(fulmen_trainer_add_gradient_accumulation_scheduler(t, twice, factors, 2), FULMEN_CODE_INVALID_ARGUMENT,
              "twice");
    CHECK_ERR(fulmen_trainer_add_gradient_accumulation_scheduler(t, e0, f2, 0), FULMEN_CODE_INVALID_ARGUMENT, "empty");
    CHECK_ERR(fulmen_trainer_add_gradient_accumulation_scheduler(t, e0, f2, (size_t)1 << 40),
              FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_trainer_add_gradient_accumulation_scheduler(t, NULL, f2, 1), FULMEN_CODE_NULL_ARGUMENT, "epochs");
    free_run(&a, m, t);
}

static void test_on_exception(const char *root, fulmen_loader *loader) {
    char dir[600], ckpt[700];
    snprintf(dir, sizeof dir, "%s/rescue", root);
    snprintf(ckpt, sizeof ckpt, "%s/on_exception.ckpt", dir);
    /* the uninterrupted run */
    state full;
    fulmen_lightning_module *mf = seeded(&full, -1);
    fulmen_trainer *tf = trainer_with(NULL, 2, 1);
    CHECK_OK(fulmen_trainer_fit(tf, mf, loader, NULL, NULL));

    /* fails in epoch 1 at global step 11 (batch 3); the callback saves */
    state cut;
    fulmen_lightning_module *mc = seeded(&cut, 11);
    fulmen_trainer *tc = trainer_with(NULL, 2, 1);
    CHECK_OK(fulmen_trainer_add_on_exception_checkpoint(tc, dir, NULL));
    CHECK_ERR(fulmen_trainer_fit(tc, mc, loader, NULL, NULL), FULMEN_CODE_CALLBACK, "the host stopped here");
    struct stat st;
    CHECK(stat(ckpt, &st) == 0 && st.st_size > 0);
    fulmen_trainer_free(tc);

    /* resume it: the weights of the uninterrupted run */
    cut.fail_at = -1;
    tc = trainer_with(NULL, 2, 1);
    CHECK_OK(fulmen_trainer_fit(tc, mc, loader, NULL, ckpt));
    int64_t steps = 0;
    CHECK_OK(fulmen_trainer_global_step(tc, &steps));
    CHECK(steps == 16);
    CHECK(fixture_max_diff(full.model, cut.model) == 0.0);

    /* a run that succeeds writes nothing and removes a stale one (not the
     * one it resumed from, above); bad arguments */
    CHECK(remove(ckpt) == 0);
    snprintf(ckpt, sizeof ckpt, "%s/mine.ckpt", dir);
    FILE *stale = fopen(ckpt, "w");
    CHECK(stale != NULL);
    if (stale != NULL) fclose(stale);
    CHECK_OK(fulmen_trainer_add_on_exception_checkpoint(tf, dir, "mine"));
    CHECK_OK(fulmen_trainer_set_max_epochs(tf, 3)); /* one more epoch */
    CHECK_OK(fulmen_trainer_fit(tf, mf, loader, NULL, NULL));
    CHECK(stat(ckpt, &st) != 0);
    CHECK_ERR(fulmen_trainer_add_on_exception_checkpoint(tf, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "dirpath");
    CHECK_ERR(fulmen_trainer_add_on_exception_checkpoint(tf, "", NULL), FULMEN_CODE_INVALID_ARGUMENT, "folder");
    CHECK_ERR(fulmen_trainer_add_on_exception_checkpoint(tf, dir, "../up"), FULMEN_CODE_INVALID_ARGUMENT, "plain");
    CHECK_ERR(fulmen_trainer_add_on_exception_checkpoint(tf, dir, ""), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    free_run(&full, mf, tf);
    free_run(&cut, mc, tc);
}

/* A fit of `epochs` with EMA weight averaging (decay 0.5, or never updated
 * past its first copy when `frozen`), keeping a safetensors checkpoint of
 * each epoch in `<root>/<name>` ("epoch=N.ckpt") and resuming from
 * `resume`. */
static void ema_fit(fulmen_lightning_module *m, fulmen_loader *loader, int64_t epochs, bool frozen, const char *root,
                    const char *name, const char *resume) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "enable_checkpointing", "true"));
    CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", "safetensors"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_weight_averaging_options wa = fulmen_weight_averaging_options_default();
    wa.decay = 0.5;
    if (frozen) wa.update_every_n_steps = 0;
    CHECK_OK(fulmen_trainer_add_weight_averaging(t, &wa));
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = dir;
    mc.filename = "{epoch}";
    mc.save_top_k = -1;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mc));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, resume));
    fulmen_trainer_free(t);
}

static void test_weight_averaging(const char *root, fulmen_loader *loader) {
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/ema-cut/epoch=0.ckpt", root);
    state whole, cut, start, frozen;
    fulmen_lightning_module *mw = seeded(&whole, -1);
    ema_fit(mw, loader, 2, false, root, "ema-whole", NULL);
    fulmen_lightning_module *mc = seeded(&cut, -1);
    ema_fit(mc, loader, 1, false, root, "ema-cut", NULL);
    ema_fit(mc, loader, 2, false, root, "ema-resumed", ckpt);
    CHECK(fixture_max_diff(whole.model, cut.model) == 0.0);

    /* Never updated: the fit ends with the starting weights, and the
     * checkpoint's state_dict is that average. */
    fulmen_lightning_module *ms = seeded(&start, -1);
    fulmen_lightning_module *mf = seeded(&frozen, -1);
    ema_fit(mf, loader, 1, true, root, "ema-frozen", NULL);
    CHECK(fixture_max_diff(start.model, frozen.model) == 0.0);
    snprintf(ckpt, sizeof ckpt, "%s/ema-frozen/epoch=0.ckpt", root);
    CHECK_OK(fulmen_model_load(whole.model, ckpt, true));
    CHECK(fixture_max_diff(start.model, whole.model) == 0.0);

    fulmen_trainer *t = trainer_with(NULL, 1, 1);
    fulmen_weight_averaging_options bad = fulmen_weight_averaging_options_default();
    bad.decay = 1.5;
    CHECK_ERR(fulmen_trainer_add_weight_averaging(t, &bad), FULMEN_CODE_INVALID_ARGUMENT, "decay");
    bad = fulmen_weight_averaging_options_default();
    bad.update_starting_at_step = -2;
    CHECK_ERR(fulmen_trainer_add_weight_averaging(t, &bad), FULMEN_CODE_INVALID_ARGUMENT, "update_starting_at_step");
    CHECK_ERR(fulmen_trainer_add_weight_averaging(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "options");
    free_run(&whole, mw, t);
    free_run(&cut, mc, NULL);
    free_run(&start, ms, NULL);
    free_run(&frozen, mf, NULL);
}

int main(void) {
    char root[] = "/tmp/fulmen-training-callbacks-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    fulmen_dataset *ds = fixture_blobs(64, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 8, true, 3); /* 8 batches, reshuffled per epoch */
    test_accumulation_schedule(loader);
    test_on_exception(root, loader);
    test_weight_averaging(root, loader);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_training_callbacks");
}

/*
 * StochasticWeightAveraging: a model with a BatchNorm trains one epoch
 * more, forward only, whose statistics are a cumulative average from a
 * reset (num_batches_tracked counts that epoch's batches alone); a fit
 * resumed from a checkpoint (safetensors or Lightning's format) written
 * before averaging, after SWALR took over or at the end of the forward-
 * only epoch ends with the uninterrupted fit's weights; a fast_dev_run
 * skips the callback; bad options, a second callback, manual optimization and
 * lrs that fit no param group are refused, and so is a start after the
 * last epoch. (tests/interop/swa_parity.py compares every step with
 * Lightning's callback.)
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>

#define BATCHES 8 /* 64 rows, 8 per batch */

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((state *)ud)->model, batch, out);
}

/* Sequential(Linear(2, 8), BatchNorm(8), Tanh, Linear(8, 2)), seeded. */
static fulmen_lightning_module *seeded(state *s) {
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&s->model));
    CHECK_OK(fulmen_model_linear_new(2, 8, true, &l));
    CHECK_OK(fulmen_model_push(s->model, l));
    CHECK_OK(fulmen_model_batch_norm_new(8, 1e-5, 0.1, &l));
    CHECK_OK(fulmen_model_push(s->model, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(s->model, l));
    CHECK_OK(fulmen_model_linear_new(8, 2, true, &l));
    CHECK_OK(fulmen_model_push(s->model, l));
    return fixture_module(s->model, s, step, NULL);
}

static void free_run(state *s, fulmen_lightning_module *m) {
    fulmen_lightning_module_free(m);
    fulmen_model_free(s->model);
}

/* A fit of `epochs` with SWA (swa_lr 0.05 from epoch 2, 1 annealing
 * epoch, or `opts`), keeping a checkpoint per epoch in `format` under
 * root/name when `root` is set, resumed from `resume` if set. */
static fulmen_error *swa_fit_as(fulmen_lightning_module *m, fulmen_loader *loader, int64_t epochs,
                                const fulmen_stochastic_weight_averaging_options *opts, const char *root,
                                const char *name, const char *resume, const char *format) {
    fulmen_stochastic_weight_averaging_options d = fulmen_stochastic_weight_averaging_options_default(0.05);
    d.swa_epoch_start = 2;
    d.annealing_epochs = 1;
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", format));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_add_stochastic_weight_averaging(t, opts != NULL ? opts : &d));
    if (root != NULL) {
        char dir[700];
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
        mc.dirpath = dir;
        mc.filename = "{epoch}";
        mc.save_top_k = -1;
        CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mc));
    }
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, resume);
    fulmen_trainer_free(t);
    return e;
}

static fulmen_error *swa_fit(fulmen_lightning_module *m, fulmen_loader *loader, int64_t epochs,
                             const fulmen_stochastic_weight_averaging_options *opts) {
    return swa_fit_as(m, loader, epochs, opts, NULL, NULL, NULL, "safetensors");
}

/* Entry `name` of `model` as a double (a one-element tensor). */
static double scalar(const fulmen_model *model, const char *name) {
    fulmen_tensor *t = NULL;
    double v = 0;
    CHECK_OK(fulmen_model_state_dict_get(model, name, &t));
    CHECK_OK(fulmen_tensor_item(t, &v));
    fulmen_tensor_free(t);
    return v;
}

static void test_batch_norm_epoch(fulmen_loader *loader) {
    state s;
    fulmen_lightning_module *m = seeded(&s);
    CHECK_OK(swa_fit(m, loader, 3, NULL));
    /* 4 epochs ran; the statistics are the last one's alone */
    CHECK(scalar(s.model, "1.num_batches_tracked") == BATCHES);
    free_run(&s, m);
    /* a start after the last epoch would average nothing */
    fulmen_stochastic_weight_averaging_options late = fulmen_stochastic_weight_averaging_options_default(0.05);
    late.swa_epoch_start = 5;
    m = seeded(&s);
    CHECK_ERR(swa_fit(m, loader, 2, &late), FULMEN_CODE_INVALID_ARGUMENT, "after the last epoch");
    CHECK(scalar(s.model, "1.num_batches_tracked") == 0);
    free_run(&s, m);
}

static void test_resume(const char *root, fulmen_loader *loader, const char *format) {
    state whole, cut;
    fulmen_lightning_module *mw = seeded(&whole);
    CHECK_OK(swa_fit_as(mw, loader, 4, NULL, root, format, NULL, format));
    /* before averaging starts, after SWALR took over, and at the end of the
     * forward-only epoch (epoch 4: saved though it took no step) */
    const char *at[3] = {"epoch=0.ckpt", "epoch=2.ckpt", "epoch=4.ckpt"};
    for (int i = 0; i < 3; i++) {
        char ckpt[800];
        snprintf(ckpt, sizeof ckpt, "%s/%s/%s", root, format, at[i]);
        fulmen_lightning_module *mc = seeded(&cut);
        CHECK_OK(swa_fit_as(mc, loader, 4, NULL, NULL, NULL, ckpt, format));
        CHECK(fixture_max_diff(whole.model, cut.model) == 0.0);
        free_run(&cut, mc);
    }
    free_run(&whole, mw);
}

static fulmen_error *manual_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                 fulmen_tensor **out) {
    (void)ctx;
    (void)batch;
    (void)ud;
    *out = NULL;
    return NULL;
}

/* A fast_dev_run (one batch of one epoch) skips the callback. */
static void test_fast_dev_run(fulmen_loader *loader) {
    state s;
    fulmen_lightning_module *m = seeded(&s);
    fulmen_trainer_options *o = fixture_options(NULL, 3);
    CHECK_OK(fulmen_trainer_options_set(o, "fast_dev_run", "1"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_stochastic_weight_averaging_options d = fulmen_stochastic_weight_averaging_options_default(0.05);
    d.swa_epoch_start = 2;
    CHECK_OK(fulmen_trainer_add_stochastic_weight_averaging(t, &d));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(scalar(s.model, "1.num_batches_tracked") == 1);
    fulmen_trainer_free(t);
    free_run(&s, m);
}

static void test_refused(fulmen_loader *loader) {
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    fulmen_stochastic_weight_averaging_options o = fulmen_stochastic_weight_averaging_options_default(0.0);
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "swa_lrs");
    o = fulmen_stochastic_weight_averaging_options_default(0.05);
    o.swa_epoch_start = -1;
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "swa_epoch_start");
    o = fulmen_stochastic_weight_averaging_options_default(0.05);
    o.swa_epoch_start_fraction = 1.5;
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "swa_epoch_start");
    o = fulmen_stochastic_weight_averaging_options_default(0.05);
    o.annealing_epochs = -1;
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "annealing");
    o = fulmen_stochastic_weight_averaging_options_default(0.05);
    o.n_swa_lrs = 2;
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_NULL_ARGUMENT, "swa_lrs");
    double lrs[2] = {0.05, 0.01};
    o.swa_lrs = lrs;
    o.n_swa_lrs = (size_t)1 << 40; /* never read: refused before */
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "n_swa_lrs");
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "options");
    o = fulmen_stochastic_weight_averaging_options_default(0.05);
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(NULL, &o), FULMEN_CODE_NULL_ARGUMENT, "trainer");
    CHECK_OK(fulmen_trainer_add_stochastic_weight_averaging(t, &o));
    CHECK_ERR(fulmen_trainer_add_stochastic_weight_averaging(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "already");
    fulmen_trainer_free(t);

    /* two lrs for one param group, found when SWALR takes over */
    state s;
    fulmen_lightning_module *m = seeded(&s);
    o.swa_lrs = lrs;
    o.n_swa_lrs = 2;
    o.swa_epoch_start = 1;
    CHECK_ERR(swa_fit(m, loader, 2, &o), FULMEN_CODE_INVALID_ARGUMENT, "param groups");

    /* manual optimization */
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, false));
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = manual_step;
    vt.configure_optimizers = fixture_configure_sgd;
    fulmen_lightning_module *manual = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &manual));
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(manual, false));
    CHECK_ERR(swa_fit(manual, loader, 1, NULL), FULMEN_CODE_UNSUPPORTED, "automatic");
    fulmen_lightning_module_free(manual);
    free_run(&s, m);
}

int main(void) {
    char root[] = "/tmp/fulmen-swa-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    fulmen_dataset *ds = fixture_blobs(64, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 8, true, 3);
    test_batch_norm_epoch(loader);
    test_resume(root, loader, "safetensors");
    test_resume(root, loader, "lightning");
    test_fast_dev_run(loader);
    test_refused(loader);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_swa");
}

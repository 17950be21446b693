/*
 * BackboneFinetuning: the backbone is frozen when configure_optimizers
 * runs (only the trainable parameters are listed, BatchNorms included when
 * train_bn), stays untouched until the unfreeze epoch and trains after it;
 * a fit resumed from a checkpoint written before or after the unfreeze
 * ends with the weights of the uninterrupted fit; frozen BatchNorms track
 * nothing; an optimizer that already holds the backbone, a path the model
 * lacks and bad options are refused. With StochasticWeightAveraging
 * taking over after the unfreeze, a resume puts SWALR back over both
 * groups. A host's lambda_func replaces the constant factor, also from
 * the module's configure_callbacks, replacing the trainer's.
 * fulmen_model_parameters lists all or
 * the trainable parameters.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    size_t trainable;    /* parameters configure_optimizers could train */
} state;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((state *)ud)->model, batch, out);
}

/* SGD (lr 0.1, momentum 0.9) over the trainable parameters, with
 * StepLR(1, 0.5) per epoch. */
static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    state *s = ud;
    size_t n = 0;
    fulmen_error *e = fulmen_model_parameters(s->model, true, NULL, 0, &n);
    if (e == NULL || fulmen_error_code(e) != FULMEN_CODE_OUT_OF_RANGE) return e;
    fulmen_error_free(e);
    fulmen_tensor **params = calloc(n, sizeof *params);
    if (params == NULL) return fulmen_error_new(FULMEN_CODE_CALLBACK, "out of memory");
    size_t got = 0;
    e = fulmen_model_parameters(s->model, true, params, n, &got);
    s->trainable = got;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *sched = NULL;
    if (e == NULL) e = fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)params, got, &o, &opt);
    for (size_t i = 0; i < got; i++) fulmen_tensor_free(params[i]);
    free(params);
    if (e == NULL) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(opt);
    return e;
}

static fulmen_error *module_callbacks(void *ud, fulmen_callback_list *list);

/* When set, the modules `seeded` makes add a BackboneFinetuning with this
 * record's lambda_func in configure_callbacks (module_callbacks), which
 * reads it at each run's start. */
static void *module_lambda;

/* Sequential(Sequential(Linear(2, 8), BatchNorm(8), Tanh), Linear(8, 2)),
 * seeded: the backbone is "0". */
static fulmen_lightning_module *seeded(state *s, bool all_params) {
    CHECK_OK(fulmen_manual_seed(21));
    fulmen_model *backbone = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&s->model));
    CHECK_OK(fulmen_model_sequential_new(&backbone));
    CHECK_OK(fulmen_model_linear_new(2, 8, true, &l));
    CHECK_OK(fulmen_model_push(backbone, l));
    CHECK_OK(fulmen_model_batch_norm_new(8, 1e-5, 0.1, &l));
    CHECK_OK(fulmen_model_push(backbone, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(backbone, l));
    CHECK_OK(fulmen_model_push(s->model, backbone));
    CHECK_OK(fulmen_model_linear_new(8, 2, true, &l));
    CHECK_OK(fulmen_model_push(s->model, l));
    s->trainable = 0;
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = step;
    vt.configure_optimizers = all_params ? fixture_configure_sgd : configure;
    if (module_lambda != NULL) vt.configure_callbacks = module_callbacks;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

/* A fit of `epochs` with BackboneFinetuning (unfreezing at epoch 1 unless
 * `opts` says otherwise), keeping a checkpoint per epoch in `<root>/<name>`
 * when `root` is not NULL, resuming from `resume` when not NULL. */
static fulmen_error *finetune_fit(fulmen_lightning_module *m, fulmen_loader *loader, int64_t epochs,
                                  const fulmen_backbone_finetuning_options *opts, const char *root, const char *name,
                                  const char *resume) {
    fulmen_backbone_finetuning_options d = fulmen_backbone_finetuning_options_default();
    d.backbone = "0";
    d.unfreeze_backbone_at_epoch = 1;
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_add_backbone_finetuning(t, opts != NULL ? opts : &d));
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

/* The largest difference between entry `name` of `model` and `before`. */
static double moved(const fulmen_model *model, const char *name, const fulmen_tensor *before) {
    fulmen_tensor *now = NULL;
    CHECK_OK(fulmen_model_state_dict_get(model, name, &now));
    double d = fixture_tensor_diff(before, now);
    fulmen_tensor_free(now);
    return d;
}

/* A copy of entry `name` of `model`. */
static fulmen_tensor *copy_of(const fulmen_model *model, const char *name) {
    fulmen_tensor *t = NULL, *c = NULL;
    CHECK_OK(fulmen_model_state_dict_get(model, name, &t));
    CHECK_OK(fulmen_tensor_clone(t, &c));
    fulmen_tensor_free(t);
    return c;
}

static bool requires_grad(const fulmen_model *model, const char *name) {
    fulmen_tensor *t = NULL;
    bool on = false;
    CHECK_OK(fulmen_model_state_dict_get(model, name, &t));
    CHECK_OK(fulmen_tensor_requires_grad(t, &on));
    fulmen_tensor_free(t);
    return on;
}

static void free_run(state *s, fulmen_lightning_module *m) {
    fulmen_lightning_module_free(m);
    fulmen_model_free(s->model);
}

static void test_freeze_then_train(fulmen_loader *loader) {
    state s;
    fulmen_lightning_module *m = seeded(&s, false);
    fulmen_tensor *w0 = copy_of(s.model, "0.0.weight"), *bn0 = copy_of(s.model, "0.1.weight");
    /* epoch 0: the backbone's Linear is frozen, its BatchNorm trains */
    CHECK_OK(finetune_fit(m, loader, 1, NULL, NULL, NULL, NULL));
    CHECK(s.trainable == 4); /* BatchNorm weight and bias, the head's two */
    CHECK(moved(s.model, "0.0.weight", w0) == 0.0);
    CHECK(moved(s.model, "0.1.weight", bn0) > 0.0);
    CHECK(!requires_grad(s.model, "0.0.weight") && requires_grad(s.model, "1.weight"));
    free_run(&s, m);

    /* from epoch 1 on the whole backbone trains */
    m = seeded(&s, false);
    CHECK_OK(finetune_fit(m, loader, 3, NULL, NULL, NULL, NULL));
    CHECK(moved(s.model, "0.0.weight", w0) > 0.0);
    CHECK(requires_grad(s.model, "0.0.weight"));
    free_run(&s, m);

    /* train_bn off: the BatchNorm is frozen too, and tracks nothing */
    fulmen_backbone_finetuning_options o = fulmen_backbone_finetuning_options_default();
    o.backbone = "0";
    o.train_bn = false;
    m = seeded(&s, false);
    fulmen_tensor *mean0 = copy_of(s.model, "0.1.running_mean");
    CHECK_OK(finetune_fit(m, loader, 1, &o, NULL, NULL, NULL));
    CHECK(s.trainable == 2);
    CHECK(moved(s.model, "0.1.weight", bn0) == 0.0);
    CHECK(moved(s.model, "0.1.running_mean", mean0) == 0.0);
    free_run(&s, m);
    fulmen_tensor_free(w0);
    fulmen_tensor_free(bn0);
    fulmen_tensor_free(mean0);
}

static void test_resume(const char *root, fulmen_loader *loader) {
    state whole, cut;
    fulmen_lightning_module *mw = seeded(&whole, false);
    CHECK_OK(finetune_fit(mw, loader, 4, NULL, root, "whole", NULL));
    /* cut after epoch 0 (backbone frozen) and after epoch 2 (unfrozen) */
    const char *at[2] = {"epoch=0.ckpt", "epoch=2.ckpt"};
    for (int i = 0; i < 2; i++) {
        char ckpt[800];
        snprintf(ckpt, sizeof ckpt, "%s/whole/%s", root, at[i]);
        fulmen_lightning_module *mc = seeded(&cut, false);
        CHECK_OK(finetune_fit(mc, loader, 4, NULL, NULL, NULL, ckpt));
        CHECK(fixture_max_diff(whole.model, cut.model) == 0.0);
        CHECK(requires_grad(cut.model, "0.0.weight"));
        free_run(&cut, mc);
    }
    free_run(&whole, mw);
}

/* StochasticWeightAveraging added before BackboneFinetuning, taking over
 * at epoch 2 when the backbone's group is there: a resume puts SWALR back
 * over both groups. */
static fulmen_error *with_swa_fit(fulmen_lightning_module *m, fulmen_loader *loader, const char *dir,
                                  const char *resume) {
    fulmen_trainer_options *o = fixture_options(NULL, 4);
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_stochastic_weight_averaging_options swa = fulmen_stochastic_weight_averaging_options_default(0.05);
    swa.swa_epoch_start = 3;
    CHECK_OK(fulmen_trainer_add_stochastic_weight_averaging(t, &swa));
    fulmen_backbone_finetuning_options bf = fulmen_backbone_finetuning_options_default();
    bf.backbone = "0";
    bf.unfreeze_backbone_at_epoch = 1;
    CHECK_OK(fulmen_trainer_add_backbone_finetuning(t, &bf));
    if (dir != NULL) {
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

static void test_with_swa(const char *root, fulmen_loader *loader) {
    state whole, cut;
    char dir[700], ckpt[800];
    snprintf(dir, sizeof dir, "%s/with-swa", root);
    snprintf(ckpt, sizeof ckpt, "%s/epoch=2.ckpt", dir);
    fulmen_lightning_module *mw = seeded(&whole, false);
    CHECK_OK(with_swa_fit(mw, loader, dir, NULL));
    fulmen_lightning_module *mc = seeded(&cut, false);
    CHECK_OK(with_swa_fit(mc, loader, NULL, ckpt));
    CHECK(fixture_max_diff(whole.model, cut.model) == 0.0);
    free_run(&cut, mc);
    free_run(&whole, mw);
}

/* A lambda_func's record: the epochs asked for, what it answers, and how
 * often its userdata was freed. */
typedef struct {
    int64_t epochs[8];
    int calls;
    double factor;
    bool fail;
    int freed;
} lambda_record;

static fulmen_error *lambda_func(void *ud, int64_t epoch, double *out) {
    lambda_record *r = ud;
    if (r->calls < 8) r->epochs[r->calls] = epoch;
    r->calls++;
    if (r->fail) return fulmen_error_new(FULMEN_CODE_CALLBACK, "no factor today");
    *out = r->factor;
    return NULL;
}

static void lambda_free(void *ud) { ((lambda_record *)ud)->freed++; }

/* A 4-epoch fit with BackboneFinetuning (unfreezing at epoch 1) whose
 * backbone lr grows by `r`'s lambda_func. */
static fulmen_error *lambda_fit(fulmen_lightning_module *m, fulmen_loader *loader, lambda_record *r) {
    fulmen_backbone_finetuning_options o = fulmen_backbone_finetuning_options_default();
    o.backbone = "0";
    o.unfreeze_backbone_at_epoch = 1;
    o.lambda_factor = 1e6; /* ignored */
    fulmen_trainer *t = fixture_trainer(NULL, 4);
    CHECK_OK(fulmen_trainer_add_backbone_finetuning_lambda(t, &o, lambda_func, r, lambda_free));
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    CHECK(r->freed == 0);
    fulmen_trainer_free(t);
    CHECK(r->freed == 1);
    return e;
}

/* BackboneFinetuning unfreezing "0" at epoch 1, its lr growing by
 * module_lambda's lambda_func. */
static fulmen_error *module_callbacks(void *ud, fulmen_callback_list *list) {
    (void)ud;
    fulmen_backbone_finetuning_options o = fulmen_backbone_finetuning_options_default();
    o.backbone = "0";
    o.unfreeze_backbone_at_epoch = 1;
    return fulmen_callback_list_add_backbone_finetuning_lambda(list, &o, lambda_func, module_lambda, lambda_free);
}

/* The module's lambda BackboneFinetuning replaces the trainer's (factor
 * 1e6) and trains as the trainer's own factor-2 one; a second run adds a
 * new one, the first freed then. */
static void test_lambda_from_the_module(fulmen_loader *loader) {
    state constant, hosted;
    fulmen_lightning_module *mc = seeded(&constant, false);
    CHECK_OK(finetune_fit(mc, loader, 4, NULL, NULL, NULL, NULL));
    lambda_record r = {.factor = 2.0};
    module_lambda = &r;
    fulmen_lightning_module *mh = seeded(&hosted, false);
    fulmen_backbone_finetuning_options o = fulmen_backbone_finetuning_options_default();
    o.backbone = "0";
    o.unfreeze_backbone_at_epoch = 1;
    o.lambda_factor = 1e6;
    fulmen_trainer *t = fixture_trainer(NULL, 4);
    CHECK_OK(fulmen_trainer_add_backbone_finetuning(t, &o));
    CHECK_OK(fulmen_trainer_fit(t, mh, loader, NULL, NULL));
    CHECK(r.calls == 2 && r.epochs[0] == 3 && r.epochs[1] == 4 && r.freed == 0);
    CHECK(fixture_max_diff(constant.model, hosted.model) == 0.0);
    /* a second run's configure_callbacks adds a new one, at the fit's
     * limit too (nothing trains) */
    CHECK_OK(fulmen_trainer_fit(t, mh, loader, NULL, NULL));
    CHECK(r.freed == 1);
    /* one more epoch: the third run's new one has no backbone lr to go on
     * from past the unfreeze epoch (Lightning's fails there too) */
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 5));
    CHECK_ERR(fulmen_trainer_fit(t, mh, loader, NULL, NULL), FULMEN_CODE_INVALID_STATE, "backbone's lr is unknown");
    CHECK(r.freed == 2);
    fulmen_trainer_free(t);
    CHECK(r.freed == 3);
    module_lambda = NULL;
    free_run(&hosted, mh);
    free_run(&constant, mc);
}

/* lambda_func: asked for each epoch after the unfreeze, plus one, as
 * Lightning asks; a function answering 2 trains as the constant factor 2
 * does; its error, or a factor that is not finite and >= 0, fails the
 * fit; its userdata is freed with the trainer, never by a failed call. */
static void test_lambda(fulmen_loader *loader) {
    state constant, hosted;
    fulmen_lightning_module *mc = seeded(&constant, false);
    CHECK_OK(finetune_fit(mc, loader, 4, NULL, NULL, NULL, NULL));
    lambda_record r = {.factor = 2.0};
    fulmen_lightning_module *mh = seeded(&hosted, false);
    CHECK_OK(lambda_fit(mh, loader, &r));
    CHECK(r.calls == 2 && r.epochs[0] == 3 && r.epochs[1] == 4);
    CHECK(fixture_max_diff(constant.model, hosted.model) == 0.0);
    free_run(&hosted, mh);
    /* 1.5 trains otherwise */
    r = (lambda_record){.factor = 1.5};
    mh = seeded(&hosted, false);
    CHECK_OK(lambda_fit(mh, loader, &r));
    CHECK(fixture_max_diff(constant.model, hosted.model) > 0.0);
    free_run(&hosted, mh);
    free_run(&constant, mc);

    const double bad[3] = {NAN, INFINITY, -0.5};
    for (int i = 0; i < 3; i++) {
        r = (lambda_record){.factor = bad[i]};
        mh = seeded(&hosted, false);
        CHECK_ERR(lambda_fit(mh, loader, &r), FULMEN_CODE_INVALID_ARGUMENT, "lambda_func(3)");
        free_run(&hosted, mh);
    }
    r = (lambda_record){.fail = true};
    mh = seeded(&hosted, false);
    CHECK_ERR(lambda_fit(mh, loader, &r), FULMEN_CODE_CALLBACK, "no factor today");
    CHECK(r.calls == 1);
    free_run(&hosted, mh);

    /* refused calls leave the userdata to the caller */
    r = (lambda_record){.factor = 2.0};
    fulmen_backbone_finetuning_options o = fulmen_backbone_finetuning_options_default();
    fulmen_trainer *t = fixture_trainer(NULL, 1);
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning_lambda(t, &o, NULL, &r, lambda_free), FULMEN_CODE_NULL_ARGUMENT,
              "lambda_func");
    o.rounding = 99;
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning_lambda(t, &o, lambda_func, &r, lambda_free),
              FULMEN_CODE_INVALID_ARGUMENT, "rounding");
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning_lambda(t, NULL, lambda_func, &r, lambda_free),
              FULMEN_CODE_NULL_ARGUMENT, "options");
    o = fulmen_backbone_finetuning_options_default();
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning_lambda(NULL, &o, lambda_func, &r, lambda_free),
              FULMEN_CODE_NULL_ARGUMENT, "trainer");
    fulmen_trainer_free(t);
    CHECK(r.freed == 0 && r.calls == 0);
}

static void test_refused(fulmen_loader *loader) {
    state s;
    /* an optimizer over every parameter leaves none for the backbone's group */
    fulmen_lightning_module *m = seeded(&s, true);
    CHECK_ERR(finetune_fit(m, loader, 2, NULL, NULL, NULL, NULL), FULMEN_CODE_INVALID_STATE, "already in");
    free_run(&s, m);
    fulmen_backbone_finetuning_options o = fulmen_backbone_finetuning_options_default();
    m = seeded(&s, false);
    CHECK_ERR(finetune_fit(m, loader, 1, &o, NULL, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "backbone");

    fulmen_trainer *t = fixture_trainer(NULL, 1);
    o.lambda_factor = -1;
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning(t, &o), FULMEN_CODE_INVALID_ARGUMENT, "lambda_factor");
    o = fulmen_backbone_finetuning_options_default();
    o.backbone = NULL;
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning(t, &o), FULMEN_CODE_NULL_ARGUMENT, "backbone");
    CHECK_ERR(fulmen_trainer_add_backbone_finetuning(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "options");
    fulmen_trainer_free(t);

    /* fulmen_model_parameters: counts, and a buffer too small */
    size_t n = 0;
    fulmen_tensor *few[2] = {NULL, NULL};
    CHECK_ERR(fulmen_model_parameters(s.model, false, few, 2, &n), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(n == 6 && few[0] == NULL);
    CHECK_ERR(fulmen_model_parameters(s.model, false, NULL, 6, &n), FULMEN_CODE_NULL_ARGUMENT, "outs");
    CHECK_ERR(fulmen_model_parameters(NULL, false, NULL, 0, &n), FULMEN_CODE_NULL_ARGUMENT, "model");
    free_run(&s, m);
}

int main(void) {
    char root[] = "/tmp/fulmen-finetuning-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    fulmen_dataset *ds = fixture_blobs(64, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 8, true, 3);
    test_freeze_then_train(loader);
    test_resume(root, loader);
    test_with_swa(root, loader);
    test_lambda(loader);
    test_lambda_from_the_module(loader);
    test_refused(loader);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_finetuning");
}

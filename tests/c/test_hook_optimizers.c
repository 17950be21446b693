/*
 * The run's optimizers from hooks (Lightning's `trainer.optimizers` and
 * the `optimizer` argument of on_before_optimizer_step): the module reads
 * its optimizer's learning rate there and sets it to 0 before the third
 * step, so the fit ends with the weights of a fit of two steps; a
 * callback of a manual-optimization module reads the stepping optimizer
 * by its index; an LBFGS stepping with its closure can be read, not
 * changed; validate's hooks see no optimizer; on_save_checkpoint, in a
 * fit and in save_checkpoint after it, reads them.
 */
#define _XOPEN_SOURCE 700
#include "check.h"
#include "fixture.h"

#include <stdbool.h>
#include <string.h>

typedef struct {
    fulmen_model *model;
    bool freeze_after_two; /* set lr 0 before the third step */
    bool manual;           /* the step steps optimizer 1 of 2 itself */
    bool lbfgs;            /* one LBFGS, stepping with its closure */
    int before_steps;      /* on_before_optimizer_step calls that checked out */
    int bad;               /* checks that failed inside hooks */
    int validation_starts; /* validate's on_validation_start with no optimizer */
    int save_reads;        /* on_save_checkpoint calls that read lr 0.1 */
} fixture;

static int code_of(fulmen_error *e) {
    int c = fulmen_error_code(e);
    fulmen_error_free(e);
    return c;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fixture *f = ud;
    if (f->lbfgs) {
        fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
        o.max_iter = 2;
        fulmen_optimizer *opt = NULL;
        fulmen_error *made = fulmen_optimizer_lbfgs_new(f->model, NULL, 0, &o, &opt);
        return fixture_add_optimizer(config, made, opt);
    }
    fulmen_error *e = fixture_add_sgd(config, f->model, 0.1, 0.0);
    if (e == NULL && f->manual) e = fixture_add_sgd(config, f->model, 0.25, 0.0);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    fulmen_error *e = fixture_cross_entropy(f->model, batch, out);
    if (e != NULL || !f->manual) return e;
    bool made = false;
    e = fulmen_step_context_optimizer_zero_grad(ctx, 1);
    if (e == NULL) e = fulmen_step_context_manual_backward(ctx, *out);
    if (e == NULL) e = fulmen_step_context_optimizer_step(ctx, 1, &made);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fixture_cross_entropy(((fixture *)ud)->model, batch, &loss);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    fulmen_tensor_free(loss);
    return e;
}

/* on_before_optimizer_step: the hook's optimizer, its group and lr; the
 * refusals; under `freeze_after_two` lr 0 from the third step on. */
static void before_step(fixture *f, fulmen_hook_context *ctx) {
    int64_t idx = -1, step = -1;
    size_t n = 0, groups = 0;
    double lr = -1, momentum = -1;
    CHECK_OK(fulmen_hook_context_optimizer_index(ctx, &idx));
    CHECK_OK(fulmen_hook_context_global_step(ctx, &step));
    CHECK_OK(fulmen_hook_context_optimizer_count(ctx, &n));
    CHECK_OK(fulmen_hook_context_param_group_count(ctx, (size_t)idx, &groups));
    CHECK_OK(fulmen_hook_context_param_group_get(ctx, (size_t)idx, 0, "lr", &lr));
    CHECK_OK(fulmen_hook_context_param_group_get(ctx, (size_t)idx, 0, "momentum", &momentum));
    double want_lr = f->manual ? 0.25 : (f->freeze_after_two && step > 2 ? 0.0 : 0.1);
    bool ok = n == (f->manual ? 2u : 1u) && idx == (f->manual ? 1 : 0) && groups == 1 && lr == want_lr && momentum == 0;
    /* Refusals: past the optimizers, past the groups, a name SGD lacks, a
     * value out of range. */
    ok &= code_of(fulmen_hook_context_param_group_get(ctx, n, 0, "lr", &lr)) == FULMEN_CODE_OUT_OF_RANGE;
    ok &= code_of(fulmen_hook_context_param_group_get(ctx, 0, 3, "lr", &lr)) == FULMEN_CODE_OUT_OF_RANGE;
    ok &= code_of(fulmen_hook_context_param_group_get(ctx, 0, 0, "betas.0", &lr)) == FULMEN_CODE_INVALID_ARGUMENT;
    ok &= code_of(fulmen_hook_context_param_group_set(ctx, 0, 0, "lr", -1.0)) == FULMEN_CODE_INVALID_ARGUMENT;
    ok &= code_of(fulmen_hook_context_param_group_get(ctx, 0, 0, NULL, &lr)) == FULMEN_CODE_NULL_ARGUMENT;
    if (f->freeze_after_two && step == 2) CHECK_OK(fulmen_hook_context_param_group_set(ctx, 0, 0, "lr", 0.0));
    if (ok) {
        f->before_steps++;
    } else {
        f->bad++;
    }
}

/* on_before_optimizer_step inside LBFGS's closure: its groups read, a
 * change refused. */
static void before_lbfgs_step(fixture *f, fulmen_hook_context *ctx) {
    size_t n = 0;
    double lr = 0, tol = 0;
    CHECK_OK(fulmen_hook_context_optimizer_count(ctx, &n));
    CHECK_OK(fulmen_hook_context_param_group_get(ctx, 0, 0, "lr", &lr));
    CHECK_OK(fulmen_hook_context_param_group_get(ctx, 0, 0, "tolerance_grad", &tol));
    bool ok = n == 1 && lr == 1.0 && tol > 0;
    ok &= code_of(fulmen_hook_context_param_group_set(ctx, 0, 0, "lr", 0.5)) == FULMEN_CODE_INVALID_STATE;
    if (ok) {
        f->before_steps++;
    } else {
        f->bad++;
    }
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    if (hook == FULMEN_HOOK_BEFORE_OPTIMIZER_STEP && f->lbfgs) {
        before_lbfgs_step(f, ctx);
        return NULL;
    }
    if (hook == FULMEN_HOOK_BEFORE_OPTIMIZER_STEP) before_step(f, ctx);
    if (hook == FULMEN_HOOK_SAVE_CHECKPOINT) {
        size_t n = 0;
        double lr = -1;
        CHECK_OK(fulmen_hook_context_optimizer_count(ctx, &n));
        if (n == 1) CHECK_OK(fulmen_hook_context_param_group_get(ctx, 0, 0, "lr", &lr));
        if (n == 1 && lr == 0.1) {
            f->save_reads++;
        } else {
            f->bad++;
        }
    }
    if (hook == FULMEN_HOOK_VALIDATION_START) {
        size_t n = 99;
        CHECK_OK(fulmen_hook_context_optimizer_count(ctx, &n));
        if (n == 0) {
            f->validation_starts++;
        } else {
            f->bad++;
        }
    }
    return NULL;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    /* Under manual optimization the hooks inside the step reach the
     * callbacks, not the module (the module runs the step). */
    if (!f->manual) vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, !f->manual));
    return m;
}

/* Fits `f` on `l` for one epoch or `max_steps`; returns the module. */
static fulmen_lightning_module *fit(fixture *f, fulmen_loader *l, int64_t max_steps) {
    fulmen_lightning_module *m = module_for(f);
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    if (max_steps > 0) CHECK_OK(fulmen_trainer_options_set_int(o, "max_steps", max_steps));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    if (f->manual) {
        fulmen_callback_vtable cb;
        memset(&cb, 0, sizeof cb);
        cb.struct_size = sizeof cb;
        cb.userdata = f;
        cb.on_hook = on_hook;
        CHECK_OK(fulmen_trainer_add_callback(t, "reader", &cb));
    }
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    if (!f->manual) CHECK_OK(fulmen_trainer_validate(t, m, l, NULL));
    fulmen_trainer_free(t);
    return m;
}

/* A fit writing its checkpoint, then save_checkpoint after it: both
 * on_save_checkpoint hooks read the fit's optimizer. */
static void save_hooks_read_optimizers(fulmen_loader *l) {
    char root[] = "/tmp/fulmen-hook-optimizers.XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    CHECK_OK(fulmen_manual_seed(5));
    fixture f = {fixture_mlp(8, 0.0), false, false, false, 0, 0, 0, 0};
    fulmen_lightning_module *m = module_for(&f);
    fulmen_trainer_options *o = fixture_options(root, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "false"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK(f.save_reads == 1 && f.bad == 0);
    char path[600];
    snprintf(path, sizeof path, "%s/after.ckpt", root);
    CHECK_OK(fulmen_trainer_save_checkpoint(t, m, path, false));
    CHECK(f.save_reads == 2 && f.bad == 0);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

int main(void) {
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);

    /* Four steps with lr 0 from the third on: the weights of two steps. */
    CHECK_OK(fulmen_manual_seed(5));
    fixture frozen = {fixture_mlp(8, 0.0), true, false, false, 0, 0, 0, 0};
    fulmen_lightning_module *m1 = fit(&frozen, l, 0);
    CHECK(frozen.before_steps == 4 && frozen.bad == 0 && frozen.validation_starts == 1);

    CHECK_OK(fulmen_manual_seed(5));
    fixture two = {fixture_mlp(8, 0.0), false, false, false, 0, 0, 0, 0};
    fulmen_lightning_module *m2 = fit(&two, l, 2);
    CHECK(two.before_steps == 2 && two.bad == 0);
    CHECK(fixture_max_diff(frozen.model, two.model) == 0.0);

    /* Without the change, four steps move the weights further. */
    CHECK_OK(fulmen_manual_seed(5));
    fixture four = {fixture_mlp(8, 0.0), false, false, false, 0, 0, 0, 0};
    fulmen_lightning_module *m3 = fit(&four, l, 0);
    CHECK(four.before_steps == 4 && fixture_max_diff(four.model, two.model) > 1e-4);

    /* Manual optimization: a callback reads optimizer 1, the one stepping. */
    fixture manual = {fixture_mlp(8, 0.0), false, true, false, 0, 0, 0, 0};
    fulmen_lightning_module *m4 = fit(&manual, l, 0);
    CHECK(manual.before_steps == 4 && manual.bad == 0);

    /* LBFGS stepping with its closure: read at each evaluation, not changed. */
    fixture lbfgs = {fixture_mlp(8, 0.0), false, false, true, 0, 0, 0, 0};
    fulmen_lightning_module *m5 = fit(&lbfgs, l, 1);
    CHECK(lbfgs.before_steps >= 1 && lbfgs.bad == 0);
    fulmen_lightning_module_free(m5);
    fulmen_model_free(lbfgs.model);

    save_hooks_read_optimizers(l);

    /* Outside a run's hooks there is no context to ask. */
    size_t n = 0;
    CHECK_ERR(fulmen_hook_context_optimizer_count(NULL, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);

    fulmen_lightning_module *mods[4] = {m1, m2, m3, m4};
    fixture *fs[4] = {&frozen, &two, &four, &manual};
    for (int i = 0; i < 4; i++) {
        fulmen_lightning_module_free(mods[i]);
        fulmen_model_free(fs[i]->model);
    }
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_hook_optimizers");
}

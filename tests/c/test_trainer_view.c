/*
 * The trainer as a hook sees it during a run (fulmen_hook_context_trainer,
 * Lightning's self.trainer.<property> from a hook): the batch counts in
 * fit, in the sanity check and in validate, the limits, the job's ranks,
 * should_stop after a stop request, and the argument errors.
 */
#include "check.h"
#include "fixture.h"

typedef struct {
    fulmen_model *model;
    fulmen_trainer_view train_start, sanity, fit_val, train_end, validate;
    int sanity_seen, fit_val_seen, validate_seen;
    bool in_validate;
} fixture;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    fixture *f = ud;
    return fixture_cross_entropy(f->model, batch, out);
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    (void)ud;
    (void)ctx;
    (void)batch;
    return NULL;
}

static fulmen_error *view(fulmen_hook_context *ctx, fulmen_trainer_view *v) {
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    return fulmen_hook_context_trainer(ctx, v);
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    fulmen_trainer_view v;
    switch (hook) {
    case FULMEN_HOOK_TRAIN_START:
        return view(ctx, &f->train_start);
    case FULMEN_HOOK_VALIDATION_START: {
        fulmen_error *e = view(ctx, &v);
        if (e != NULL) return e;
        if (f->in_validate) {
            f->validate = v;
            f->validate_seen++;
        } else if (v.sanity_checking) {
            f->sanity = v;
            f->sanity_seen++;
        } else {
            f->fit_val = v;
            f->fit_val_seen++;
        }
        return NULL;
    }
    case FULMEN_HOOK_TRAIN_EPOCH_END:
        return fulmen_hook_context_request_stop(ctx); /* after epoch 0 */
    case FULMEN_HOOK_TRAIN_END:
        return view(ctx, &f->train_end);
    default:
        return NULL;
    }
}

/* A hook that checks the argument errors. */
static fulmen_error *bad_calls(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    if (hook != FULMEN_HOOK_TRAIN_START) return NULL;
    fulmen_trainer_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v - 1;
    CHECK(fixture_code(fulmen_hook_context_trainer(ctx, &v)) == FULMEN_CODE_INVALID_ARGUMENT);
    CHECK(fixture_code(fulmen_hook_context_trainer(ctx, NULL)) == FULMEN_CODE_NULL_ARGUMENT);
    v.struct_size = sizeof v;
    CHECK(fixture_code(fulmen_hook_context_trainer(NULL, &v)) == FULMEN_CODE_NULL_ARGUMENT);
    return NULL;
}

static fulmen_lightning_module *module_for(fixture *f, fulmen_error *(*hooks)(void *, int32_t, fulmen_hook_context *)) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = hooks;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

int main(void) {
    fulmen_dataset *tds = fixture_blobs(12, 1, 2.0f), *vds = fixture_blobs(6, 2, 2.0f);
    fulmen_loader *tl = fixture_loader(tds, 4, false, 0), *vl = fixture_loader(vds, 4, false, 0);
    fixture f = {.model = fixture_mlp(4, 0)};
    fulmen_lightning_module *m = module_for(&f, on_hook);
    fulmen_trainer_options *o = fixture_options(NULL, 3);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 1));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 7));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));

    /* on_train_start: 3 batches of 4, 2 validation batches, 3 epochs */
    fulmen_trainer_view *s = &f.train_start;
    CHECK(s->struct_size == sizeof *s);
    CHECK(s->current_epoch == 0 && s->global_step == 0 && s->max_epochs == 3);
    CHECK(s->num_training_batches == 3 && s->num_val_batches == 2);
    CHECK(s->log_every_n_steps == 7 && s->accumulate_grad_batches == 1);
    CHECK(s->global_rank == 0 && s->world_size == 1 && s->node_rank == 0 && s->num_devices == 1);
    CHECK(s->is_global_zero && !s->should_stop && !s->sanity_checking && !s->fast_dev_run);
    /* the sanity check sees its own limit; the fit's validation, all */
    CHECK(f.sanity_seen == 1 && f.sanity.sanity_checking && f.sanity.num_val_batches == 1);
    CHECK(f.fit_val_seen == 1 && !f.fit_val.sanity_checking && f.fit_val.num_val_batches == 2);
    CHECK(f.fit_val.global_step == 3);
    /* the stop asked at the end of epoch 0 */
    CHECK(f.train_end.should_stop && f.train_end.current_epoch == 1 && f.train_end.global_step == 3);

    /* validate: no training data, its own loader */
    f.in_validate = true;
    CHECK_OK(fulmen_trainer_validate(t, m, vl, NULL));
    CHECK(f.validate_seen == 1 && f.validate.num_training_batches == -1 && f.validate.num_val_batches == 2);
    CHECK(!f.validate.sanity_checking && !f.validate.should_stop);

    fulmen_lightning_module *bad = module_for(&f, bad_calls);
    fulmen_trainer *t2 = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(t2, bad, tl, NULL, NULL));
    fulmen_trainer_free(t2);
    fulmen_lightning_module_free(bad);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(tds);
    fulmen_dataset_free(vds);
    return check_finish("test_trainer_view");
}

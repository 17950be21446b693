/*
 * The trainer as a hook sees it during a run (fulmen_hook_context_trainer,
 * Lightning's self.trainer.<property> from a hook): the batch counts in
 * fit, in the sanity check and in validate, the limits, the job's ranks,
 * should_stop after a stop request, and the argument errors; the
 * per-loader counts and the EarlyStopping state from hooks.
 */
#include "check.h"
#include "fixture.h"

typedef struct {
    fulmen_model *model;
    fulmen_trainer_view train_start, sanity, fit_val, train_end, validate;
    int sanity_seen, fit_val_seen, validate_seen;
    bool in_validate;
    bool log_flat;                  /* training_step logs "flat" = 1 per epoch */
    int64_t sanity_counts[4], val_counts[4];
    size_t n_sanity, n_val, n_short; /* n_short: the count a 1-slot array got */
    double best_at_epoch_start[3];
    int64_t wait_at_end, stopped_at_end;
} fixture;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    fulmen_error *e = fixture_cross_entropy(f->model, batch, out);
    if (e == NULL && f->log_flat) e = fulmen_step_context_log(ctx, "flat", 1.0, FULMEN_LOG_ON_EPOCH, 0);
    return e;
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

/* Per-loader counts and the EarlyStopping state, read from hooks. */
static fulmen_error *counts_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    int64_t epoch = 0, one = 0;
    switch (hook) {
    case FULMEN_HOOK_SANITY_CHECK_START:
        CHECK(fixture_code(fulmen_hook_context_num_sanity_val_batches(ctx, &one, 1, &f->n_short)) ==
              FULMEN_CODE_OUT_OF_RANGE);
        return fulmen_hook_context_num_sanity_val_batches(ctx, f->sanity_counts, 4, &f->n_sanity);
    case FULMEN_HOOK_TRAIN_START:
        return fulmen_hook_context_num_val_batches(ctx, f->val_counts, 4, &f->n_val);
    case FULMEN_HOOK_TRAIN_EPOCH_START:
        CHECK_OK(fulmen_hook_context_epoch(ctx, &epoch));
        if (epoch < 0 || epoch > 2) return NULL;
        return fulmen_hook_context_early_stopping_state(ctx, NULL, NULL, &f->best_at_epoch_start[epoch]);
    case FULMEN_HOOK_TRAIN_END:
        return fulmen_hook_context_early_stopping_state(ctx, &f->wait_at_end, &f->stopped_at_end, NULL);
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
    /* no EarlyStopping in this run; a count without its out-pointer */
    CHECK(fixture_code(fulmen_hook_context_early_stopping_state(ctx, NULL, NULL, NULL)) == FULMEN_CODE_INVALID_STATE);
    int64_t c[1];
    CHECK(fixture_code(fulmen_hook_context_num_val_batches(ctx, c, 1, NULL)) == FULMEN_CODE_NULL_ARGUMENT);
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

    /* Two validation loaders (2 and 3 batches), a sanity check of 1 each,
     * an EarlyStopping on a metric that never improves: it stops after
     * epoch 1, and the hooks saw its state change. */
    fulmen_dataset *vds2 = fixture_blobs(9, 3, 2.0f);
    fulmen_loader *vl2 = fixture_loader(vds2, 4, false, 0);
    fixture g = {.model = fixture_mlp(4, 0), .log_flat = true};
    fulmen_lightning_module *m3 = module_for(&g, counts_hook);
    fulmen_trainer_options *o3 = fixture_options(NULL, 3);
    CHECK_OK(fulmen_trainer_options_set_int(o3, "num_sanity_val_steps", 1));
    fulmen_trainer *t3 = NULL;
    CHECK_OK(fulmen_trainer_new(o3, &t3));
    fulmen_trainer_options_free(o3);
    fulmen_early_stopping_options es = fulmen_early_stopping_options_default();
    es.monitor = "flat";
    es.patience = 0;
    es.check_on_train_epoch_end = 1;
    CHECK_OK(fulmen_trainer_add_early_stopping(t3, &es));
    const fulmen_loader *vals[2] = {vl, vl2};
    CHECK_OK(fulmen_trainer_fit_loaders(t3, m3, tl, vals, 2, NULL));
    CHECK(g.n_short == 2 && g.n_sanity == 2 && g.sanity_counts[0] == 1 && g.sanity_counts[1] == 1);
    CHECK(g.n_val == 2 && g.val_counts[0] == 2 && g.val_counts[1] == 3);
    CHECK(g.best_at_epoch_start[0] == INFINITY && g.best_at_epoch_start[1] == 1.0);
    CHECK(g.wait_at_end == 1 && g.stopped_at_end == 1);
    int64_t wait = -1, stopped = -1;
    CHECK_OK(fulmen_trainer_early_stopping_state(t3, &wait, &stopped, NULL));
    CHECK(wait == g.wait_at_end && stopped == g.stopped_at_end);
    fulmen_trainer_free(t3);
    fulmen_lightning_module_free(m3);
    fulmen_model_free(g.model);
    fulmen_loader_free(vl2);
    fulmen_dataset_free(vds2);

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(tds);
    fulmen_dataset_free(vds);
    return check_finish("test_trainer_view");
}

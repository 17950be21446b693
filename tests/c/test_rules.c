/*
 * Lightning's rules that fulmen enforces as errors, and one it improves:
 * an integer `val_check_interval` above the batches of an epoch fails with
 * Lightning's message (fine with check_val_every_n_epoch=none); a metric
 * logged twice with different flags fails, twice with the same flags is
 * fine; an iterator that yields fewer batches than it announced still
 * validates (and steps its last accumulation window) at the real end of
 * the epoch.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <string.h>

typedef struct {
    fulmen_model *model;
    int log_twice; /* 0: once; 1: twice, same flags; 2: twice, other flags */
    int validations;
    int val_steps;
} world;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    world *w = ud;
    fulmen_error *e = fixture_cross_entropy(w->model, batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, FULMEN_LOG_ON_STEP, 0);
    if (e == NULL && w->log_twice == 1) e = fulmen_step_context_log(ctx, "loss", v + 1, FULMEN_LOG_ON_STEP, 0);
    if (e == NULL && w->log_twice == 2) e = fulmen_step_context_log(ctx, "loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    world *w = ud;
    w->val_steps++;
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fixture_cross_entropy(w->model, batch, &loss);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, 0, 0);
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ctx;
    if (hook == FULMEN_HOOK_VALIDATION_END) ((world *)ud)->validations++;
    return NULL;
}

static fulmen_lightning_module *module_for(world *w) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = w;
    vt.training_step = step;
    vt.validation_step = val_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, w->model, &m));
    return m;
}

static void val_check_interval_beyond_the_epoch(fulmen_loader *train, fulmen_loader *val) {
    world w = {fixture_mlp(8, 0), 0, 0, 0};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_OK(fulmen_trainer_options_set(o, "val_check_interval", "10"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_ERR(fulmen_trainer_fit(t, m, train, val, NULL), FULMEN_CODE_INVALID_ARGUMENT,
              "`val_check_interval` (10) must be less than or equal to the number of the training batches (4)");
    fulmen_trainer_free(t);
    /* Counted over all epochs instead, it is fine: validation after batch 10. */
    CHECK_OK(fulmen_trainer_options_set(o, "check_val_every_n_epoch", "none"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", 3));
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_fit(t, m, train, val, NULL));
    CHECK(w.validations == 1);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_model_free(w.model);
}

static void a_metric_keeps_its_flags(fulmen_loader *train) {
    for (int mode = 1; mode <= 2; mode++) {
        world w = {fixture_mlp(8, 0), mode, 0, 0};
        fulmen_lightning_module *m = module_for(&w);
        fulmen_trainer *t = fixture_trainer(NULL, 1);
        fulmen_error *e = fulmen_trainer_fit(t, m, train, NULL, NULL);
        if (mode == 1) {
            CHECK_OK(e);
            double v = 0;
            CHECK_OK(fulmen_trainer_callback_metric(t, "loss", &v));
        } else {
            CHECK_ERR(e, FULMEN_CODE_INVALID_ARGUMENT, "\"loss\" was logged with on_step=True, on_epoch=False");
        }
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(w.model);
    }
}

/* An iterator that says 6 batches and yields 4. */
typedef struct {
    int left;
} short_iter;

static fulmen_error *short_reset(void *ud, uint64_t epoch) {
    (void)epoch;
    ((short_iter *)ud)->left = 4;
    return NULL;
}

static fulmen_error *short_next(void *ud, fulmen_batch_builder *b, bool *done) {
    short_iter *it = ud;
    if (it->left-- <= 0) {
        *done = true;
        return NULL;
    }
    return fixture_push_random_batch(b, 4);
}

static void a_short_iterator_still_validates(fulmen_loader *val) {
    short_iter it = {0};
    fulmen_iterator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &it;
    vt.reset = short_reset;
    vt.next = short_next;
    vt.num_batches = 6;
    fulmen_loader *train = NULL;
    CHECK_OK(fulmen_loader_from_iterator(&vt, &train));
    world w = {fixture_mlp(8, 0), 0, 0, 0};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_trainer_options *o = fixture_options(NULL, 2);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_OK(fulmen_trainer_options_set_int(o, "accumulate_grad_batches", 3));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_fit(t, m, train, val, NULL));
    CHECK(w.validations == 2); /* once per epoch, at the real end */
    int64_t steps = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 4); /* 4 batches, windows of 3: steps after batches 3 and 4 */
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(train);
    fulmen_model_free(w.model);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *train = fixture_loader(ds, 8, true, 4), *val = fixture_loader(ds, 16, false, 0);
    val_check_interval_beyond_the_epoch(train, val);
    a_metric_keeps_its_flags(train);
    a_short_iterator_still_validates(val);
    fulmen_loader_free(train);
    fulmen_loader_free(val);
    fulmen_dataset_free(ds);
    return check_finish("test_rules");
}

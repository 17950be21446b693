/*
 * Several evaluation loaders, as Lightning's sequential mode: fit,
 * validate, test and predict over a list of loaders; each step and batch
 * hook sees its dataloader_idx; logged names end in /dataloader_idx_N
 * (none with one loader); each loader's values equal a run on it alone.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int steps[3];        /* validation / test steps per dataloader_idx */
    int hooked[3];       /* validation batch starts per dataloader_idx */
    int bad_idx;         /* an index outside [0, 3) was seen */
} state;

static fulmen_error *train_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    size_t idx = 9;
    CHECK_OK(fulmen_step_context_dataloader_idx(ctx, &idx));
    CHECK(idx == 0);
    return fixture_cross_entropy(((state *)ud)->model, batch, out);
}

static fulmen_error *eval_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, const char *name) {
    state *s = ud;
    size_t idx = 9;
    fulmen_tensor *loss = NULL;
    fulmen_error *e = fulmen_step_context_dataloader_idx(ctx, &idx);
    if (e == NULL && idx < 3) s->steps[idx]++;
    else s->bad_idx = 1;
    if (e == NULL) e = fixture_cross_entropy(s->model, batch, &loss);
    if (e == NULL) e = fulmen_step_context_log(ctx, name, check_item(loss), FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return eval_step(ud, ctx, batch, "val_loss");
}

static fulmen_error *test_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return eval_step(ud, ctx, batch, "test_loss");
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    fulmen_tensor *x = NULL;
    (void)ctx;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(s->model, x, out);
    return e;
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    state *s = ud;
    size_t idx = 9;
    CHECK_OK(fulmen_hook_context_dataloader_idx(ctx, &idx));
    if (hook == FULMEN_HOOK_VALIDATION_BATCH_START) {
        if (idx < 3) s->hooked[idx]++;
        else s->bad_idx = 1;
    } else if (hook == FULMEN_HOOK_TRAIN_BATCH_START) {
        CHECK(idx == 0);
    }
    return NULL;
}

static double metric(const fulmen_trainer *t, const char *name) {
    double v = NAN;
    CHECK_OK(fulmen_trainer_callback_metric(t, name, &v));
    return v;
}

static bool has_metric(const fulmen_trainer *t, const char *name) {
    double v = NAN;
    fulmen_error *e = fulmen_trainer_callback_metric(t, name, &v);
    fulmen_error_free(e);
    return e == NULL;
}

static fulmen_trainer *trainer_in(const char *root, int64_t epochs, int64_t sanity) {
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", sanity));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

int main(void) {
    char root[] = "/tmp/fulmen-loaders-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    state s = {.model = fixture_mlp(4, 0)};
    fulmen_dataset *train = fixture_blobs(32, 1, 1.0f), *a = fixture_blobs(24, 2, 0.5f), *b = fixture_blobs(16, 3, 2.0f);
    fulmen_loader *tl = fixture_loader(train, 8, false, 0);
    fulmen_loader *la = fixture_loader(a, 8, false, 0), *lb = fixture_loader(b, 8, false, 0); /* 3 and 2 batches */
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = train_step;
    vt.validation_step = val_step;
    vt.test_step = test_step;
    vt.predict_step = predict_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));

    /* fit with two validation loaders: a sanity batch of each, then 3 + 2
     * batches per epoch; a checkpoint monitors loader 1's loss */
    const fulmen_loader *both[2] = {la, lb};
    fulmen_trainer *t = trainer_in(root, 2, 1);
    fulmen_model_checkpoint_options ck = fulmen_model_checkpoint_options_default();
    ck.monitor = "val_loss/dataloader_idx_1";
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &ck));
    CHECK_OK(fulmen_trainer_fit_loaders(t, m, tl, both, 2, NULL));
    CHECK(s.steps[0] == 1 + 2 * 3 && s.steps[1] == 1 + 2 * 2 && s.steps[2] == 0 && !s.bad_idx);
    CHECK(s.hooked[0] == s.steps[0] && s.hooked[1] == s.steps[1]);
    CHECK(has_metric(t, "val_loss/dataloader_idx_0") && has_metric(t, "val_loss/dataloader_idx_1"));
    CHECK(!has_metric(t, "val_loss"));
    double best = NAN;
    CHECK_OK(fulmen_trainer_best_model_score(t, &best));
    CHECK(isfinite(best));

    /* validate over both equals validate over each alone */
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, both, 2, NULL));
    double on_a = metric(t, "val_loss/dataloader_idx_0"), on_b = metric(t, "val_loss/dataloader_idx_1");
    CHECK_OK(fulmen_trainer_validate(t, m, la, NULL));
    CHECK(metric(t, "val_loss") == on_a);
    CHECK_OK(fulmen_trainer_validate(t, m, lb, NULL));
    CHECK(metric(t, "val_loss") == on_b);
    CHECK(on_a != on_b);

    /* test over a loader listed twice: two equal values */
    const fulmen_loader *twice[2] = {lb, lb};
    CHECK_OK(fulmen_trainer_test_loaders(t, m, twice, 2, NULL));
    CHECK(metric(t, "test_loss/dataloader_idx_0") == metric(t, "test_loss/dataloader_idx_1"));
    CHECK(metric(t, "test_loss/dataloader_idx_0") == on_b);

    /* predict: one output per loader, the same as predicting each alone */
    fulmen_tensor *outs[2] = {NULL, NULL}, *alone = NULL;
    CHECK_OK(fulmen_trainer_predict_loaders(t, m, both, 2, NULL, outs));
    size_t n0 = 0, n1 = 0;
    CHECK_OK(fulmen_tensor_numel(outs[0], &n0));
    CHECK_OK(fulmen_tensor_numel(outs[1], &n1));
    CHECK(n0 == 24 * 2 && n1 == 16 * 2);
    CHECK_OK(fulmen_trainer_predict(t, m, lb, NULL, &alone));
    float p1[32], p_alone[32];
    CHECK_OK(fulmen_tensor_copy_to(outs[1], FULMEN_DTYPE_F32, p1, sizeof p1));
    CHECK_OK(fulmen_tensor_copy_to(alone, FULMEN_DTYPE_F32, p_alone, sizeof p_alone));
    CHECK(memcmp(p1, p_alone, sizeof p1) == 0);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    fulmen_tensor_free(alone);

    /* one loader: no suffix */
    const fulmen_loader *one[1] = {la};
    CHECK_OK(fulmen_trainer_validate_loaders(t, m, one, 1, NULL));
    CHECK(metric(t, "val_loss") == on_a);

    /* bad lists */
    const fulmen_loader *with_null[2] = {la, NULL};
    fulmen_tensor *stale = outs[0]; /* freed above: a stale value the call must clear */
    fulmen_tensor *bad_outs[2] = {stale, stale};
    CHECK_ERR(fulmen_trainer_validate_loaders(t, m, both, 0, NULL), FULMEN_CODE_INVALID_ARGUMENT, "loaders");
    CHECK_ERR(fulmen_trainer_validate_loaders(t, m, both, FULMEN_LOADERS_MAX + 1, NULL), FULMEN_CODE_INVALID_ARGUMENT,
              NULL);
    CHECK_ERR(fulmen_trainer_test_loaders(t, m, NULL, 2, NULL), FULMEN_CODE_NULL_ARGUMENT, "loaders");
    CHECK_ERR(fulmen_trainer_test_loaders(t, m, with_null, 2, NULL), FULMEN_CODE_NULL_ARGUMENT, "loaders[1]");
    CHECK_ERR(fulmen_trainer_predict_loaders(t, m, both, 2, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "outs");
    CHECK_ERR(fulmen_trainer_predict_loaders(t, m, with_null, 2, NULL, bad_outs), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad_outs[0] == NULL && bad_outs[1] == NULL);
    CHECK_ERR(fulmen_trainer_fit_loaders(t, m, tl, NULL, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_trainer_free(t);

    /* fit with no validation loader */
    memset(s.steps, 0, sizeof s.steps);
    t = trainer_in(root, 1, 2);
    CHECK_OK(fulmen_trainer_fit_loaders(t, m, tl, NULL, 0, NULL));
    CHECK(s.steps[0] == 0 && s.steps[1] == 0);
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_loader_free(tl);
    fulmen_loader_free(la);
    fulmen_loader_free(lb);
    fulmen_dataset_free(train);
    fulmen_dataset_free(a);
    fulmen_dataset_free(b);
    fulmen_model_free(s.model);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_loaders");
}

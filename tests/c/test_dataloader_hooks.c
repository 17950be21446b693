/*
 * The module's train_dataloader / val_dataloader (a fit given no loaders)
 * and reload_dataloaders_every_n_epochs: when the hooks are called, what
 * the fit trains on, a resume, and hosts that write bad loaders.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stdint.h>

/* What the hooks share. */
typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int64_t train_calls[16], val_calls[16]; /* the epochs each hook was called for */
    int n_train, n_val;
    int64_t steps_by_epoch[16]; /* training steps run in each epoch */
    int64_t val_steps;
    int mode;             /* which misbehaviour, if any */
    fulmen_dataset *kept; /* a dataset handle a bad hook writes instead of a loader */
} state;

enum { GOOD = 0, FAILS = 1, WRITES_NOTHING = 2, WRONG_TYPE = 3, COUNT_OFF = 4, NO_VAL = 5 };

/* A loader over 32 + 16 * (epoch % 3) blob samples, 16 per batch (2, 3 or
 * 4 batches). */
static fulmen_error *epoch_loader(int64_t epoch, size_t batch, fulmen_loader **out) {
    fulmen_dataset *ds = fixture_blobs(32 + 16 * (size_t)(epoch % 3), (uint64_t)epoch + 1, 1.5f);
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = batch;
    fulmen_error *e = fulmen_loader_new(ds, &o, out);
    fulmen_dataset_free(ds); /* the loader keeps its dataset */
    return e;
}

static fulmen_error *train_dataloader(void *ud, int64_t epoch, fulmen_loader **out) {
    state *s = ud;
    if (s->n_train < 16) s->train_calls[s->n_train++] = epoch;
    if (s->mode == WRITES_NOTHING) return NULL;
    if (s->mode == WRONG_TYPE) {
        *out = (fulmen_loader *)s->kept;
        return NULL;
    }
    fulmen_error *e = epoch_loader(epoch, 16, out);
    /* A failing hook may have written a loader: fulmen takes it anyway. */
    if (e == NULL && s->mode == FAILS && epoch == 2) return fulmen_error_new(FULMEN_CODE_IO, "the shard is gone");
    return e;
}

static fulmen_error *val_dataloader(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    state *s = ud;
    if (s->n_val < 16) s->val_calls[s->n_val++] = epoch;
    if (s->mode == NO_VAL) {
        *n = 0;
        return NULL;
    }
    if (capacity < 2) return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "room for two loaders expected");
    fulmen_error *e = epoch_loader(epoch, 32, &out[0]);
    if (e == NULL) e = epoch_loader(epoch + 1, 32, &out[1]);
    *n = s->mode == COUNT_OFF ? 3 : 2;
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    state *s = ud;
    int64_t epoch = 0;
    fulmen_error *e = fulmen_step_context_epoch(ctx, &epoch);
    if (e == NULL && epoch >= 0 && epoch < 16) s->steps_by_epoch[epoch]++;
    return e != NULL ? e : fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    state *s = ud;
    fulmen_tensor *loss = NULL;
    double v = 0;
    s->val_steps++;
    fulmen_error *e = fixture_cross_entropy(s->model, batch, &loss);
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, 0, 0);
    return e;
}

static fulmen_lightning_module *module_for(state *s, bool val) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.train_dataloader = train_dataloader;
    vt.val_dataloader = val ? val_dataloader : NULL;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

/* A trainer of `epochs` epochs reloading every `every` (root: checkpoints
 * there, else none). */
static fulmen_trainer *trainer_for(const char *root, int64_t epochs, int64_t every) {
    fulmen_trainer_options *o = fixture_options(root, epochs);
    CHECK_OK(fulmen_trainer_options_set_int(o, "reload_dataloaders_every_n_epochs", every));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 1));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    return t;
}

/* Lightning's schedule: train_dataloader at the first epoch and every
 * n-th after; val_dataloader before the sanity check and every n-th
 * epoch; the epochs train on what was loaded. */
static void test_reload_schedule(void) {
    int64_t every_values[3] = {0, 1, 2};
    for (int k = 0; k < 3; k++) {
        state s = {0};
        s.model = fixture_mlp(8, 0);
        fulmen_lightning_module *m = module_for(&s, true);
        fulmen_trainer *t = trainer_for(NULL, 5, every_values[k]);
        CHECK_OK(fulmen_trainer_fit(t, m, NULL, NULL, NULL));
        int64_t every = every_values[k];
        int want = every == 0 ? 1 : (int)((5 + every - 1) / every);
        CHECK(s.n_train == want && s.n_val == want);
        int64_t loaded = 0;
        for (int64_t epoch = 0; epoch < 5; epoch++) {
            if (every > 0 && epoch % every == 0) loaded = epoch;
            /* 2, 3 or 4 batches of the loader loaded for `loaded` */
            CHECK(s.steps_by_epoch[epoch] == 2 + loaded % 3);
        }
        for (int i = 0; i < want; i++) CHECK(s.train_calls[i] == i * every && s.val_calls[i] == i * every);
        int64_t g = 0;
        CHECK_OK(fulmen_trainer_global_step(t, &g));
        CHECK(g == s.steps_by_epoch[0] + s.steps_by_epoch[1] + s.steps_by_epoch[2] + s.steps_by_epoch[3] +
                       s.steps_by_epoch[4]);
        CHECK(s.val_steps > 0);
        double metric = 0;
        CHECK_OK(fulmen_trainer_callback_metric(t, "val_loss/dataloader_idx_1", &metric));
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(s.model);
    }
}

/* Validating every 2nd epoch: the sanity check's val_dataloader call (in
 * epoch 0, which does not validate) records no reload epoch, so the first
 * validating epoch reloads, as Lightning's evaluation loop does. */
static void test_sanity_in_an_epoch_without_validation(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_lightning_module *m = module_for(&s, true);
    fulmen_trainer_options *o = fixture_options(NULL, 4);
    CHECK_OK(fulmen_trainer_options_set_int(o, "reload_dataloaders_every_n_epochs", 2));
    CHECK_OK(fulmen_trainer_options_set_int(o, "check_val_every_n_epoch", 2));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_fit(t, m, NULL, NULL, NULL));
    CHECK(s.n_val == 3 && s.val_calls[0] == 0 && s.val_calls[1] == 1 && s.val_calls[2] == 3);
    CHECK(s.n_train == 2 && s.train_calls[0] == 0 && s.train_calls[1] == 2);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
}

/* A resumed fit calls train_dataloader for the checkpoint's epoch (the
 * one that ended: Lightning's current_epoch then), then every n-th. */
static void test_resume(void) {
    char root[] = "/tmp/fulmen-dlhooks-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_lightning_module *m = module_for(&s, false);
    fulmen_trainer *t = trainer_for(root, 2, 2);
    CHECK_OK(fulmen_trainer_fit(t, m, NULL, NULL, NULL));
    fulmen_trainer_free(t);
    CHECK(s.n_train == 1 && s.train_calls[0] == 0);
    s.n_train = 0;
    memset(s.steps_by_epoch, 0, sizeof s.steps_by_epoch);
    t = trainer_for(root, 5, 2);
    CHECK_OK(fulmen_trainer_fit(t, m, NULL, NULL, "last"));
    CHECK(s.n_train == 2 && s.train_calls[0] == 1 && s.train_calls[1] == 3);
    CHECK(s.steps_by_epoch[1] == 0 && s.steps_by_epoch[2] == 3 && s.steps_by_epoch[3] == 2 &&
          s.steps_by_epoch[4] == 2);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

/* Hooks that fail or write what fulmen cannot take: the fit fails naming
 * the hook, nothing leaks, and handles that are not loaders are left. */
static void test_bad_hooks(void) {
    int modes[4] = {FAILS, WRITES_NOTHING, WRONG_TYPE, COUNT_OFF};
    int codes[4] = {FULMEN_CODE_IO, FULMEN_CODE_CALLBACK, FULMEN_CODE_CALLBACK, FULMEN_CODE_CALLBACK};
    const char *needles[4] = {"the shard is gone", "wrote no loader", "cannot take", "*n = 3"};
    for (int k = 0; k < 4; k++) {
        state s = {0};
        s.model = fixture_mlp(8, 0);
        s.mode = modes[k];
        s.kept = fixture_blobs(8, 1, 1.0f);
        fulmen_lightning_module *m = module_for(&s, true);
        fulmen_trainer *t = trainer_for(NULL, 5, 1);
        CHECK_ERR(fulmen_trainer_fit(t, m, NULL, NULL, NULL), codes[k], needles[k]);
        size_t len = 0;
        CHECK_OK(fulmen_dataset_len(s.kept, &len)); /* still the host's */
        CHECK(len == 8);
        fulmen_dataset_free(s.kept);
        fulmen_trainer_free(t);
        fulmen_lightning_module_free(m);
        fulmen_model_free(s.model);
    }
}

/* No loaders and no hook; passed loaders win over the hooks; a
 * val_dataloader giving none means no validation. */
static void test_choices(void) {
    state s = {0};
    s.model = fixture_mlp(8, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = training_step;
    vt.configure_optimizers = fixture_configure_sgd;
    fulmen_lightning_module *bare = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &bare));
    fulmen_trainer *t = trainer_for(NULL, 1, 0);
    CHECK_ERR(fulmen_trainer_fit(t, bare, NULL, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, "train_dataloader");
    fulmen_lightning_module_free(bare);

    fulmen_lightning_module *m = module_for(&s, true);
    fulmen_dataset *ds = fixture_blobs(80, 3, 1.5f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(s.n_train == 0 && s.n_val == 1 && s.steps_by_epoch[0] == 5);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);

    state q = {0};
    q.model = s.model;
    q.mode = NO_VAL;
    m = module_for(&q, true);
    t = trainer_for(NULL, 2, 1);
    CHECK_OK(fulmen_trainer_fit(t, m, NULL, NULL, NULL));
    CHECK(q.val_steps == 0 && q.n_val == 2);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);

    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_ERR(fulmen_trainer_options_set_int(o, "reload_dataloaders_every_n_epochs", -1),
              FULMEN_CODE_INVALID_ARGUMENT, "reload_dataloaders_every_n_epochs");
    fulmen_trainer_options_free(o);
}

int main(void) {
    test_reload_schedule();
    test_sanity_in_an_epoch_without_validation();
    test_resume();
    test_bad_hooks();
    test_choices();
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_dataloader_hooks");
}

/*
 * A second fit of one trainer goes on from the first one's progress, as
 * Lightning's trainer keeps its fit_loop: at its limit it trains nothing
 * (no on_train_start / on_train_end, the weights unchanged), raised with
 * fulmen_trainer_set_max_epochs / _set_max_steps it trains the epochs and
 * steps past it, from the epoch and step the first fit reached; a
 * ckpt_path replaces that progress. The setters' errors: NULL, values
 * below -1, and a call from a hook of the trainer's own fit.
 */
#include "check.h"
#include "fixture.h"

char *mkdtemp(char *template); /* POSIX, not declared under -std=c11 */
int access(const char *path, int mode);
#define F_OK 0

typedef struct {
    fulmen_model *model;
    fulmen_trainer *trainer; /* the trainer whose hooks try to change it */
    int train_starts, train_ends, epoch_starts;
    int64_t first_epoch, first_step; /* of the run's first epoch */
    int busy_code;
} fixture;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((fixture *)ud)->model, batch, out);
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    fixture *f = ud;
    if (hook == FULMEN_HOOK_TRAIN_START) {
        f->train_starts++;
        /* The running trainer is pinned: its limits cannot change now. */
        f->busy_code = fixture_code(fulmen_trainer_set_max_epochs(f->trainer, 50));
    } else if (hook == FULMEN_HOOK_TRAIN_END) {
        f->train_ends++;
    } else if (hook == FULMEN_HOOK_TRAIN_EPOCH_START) {
        if (f->epoch_starts++ == 0) {
            fulmen_trainer_view v;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            fulmen_error *e = fulmen_hook_context_trainer(ctx, &v);
            if (e != NULL) return e;
            f->first_epoch = v.current_epoch;
            f->first_step = v.global_step;
        }
    }
    return NULL;
}

static void progress(fulmen_trainer *t, int64_t *epoch, int64_t *step) {
    CHECK_OK(fulmen_trainer_current_epoch(t, epoch));
    CHECK_OK(fulmen_trainer_global_step(t, step));
}

/* Fits `t` and returns how many epochs it started. */
static int fit(fixture *f, fulmen_trainer *t, fulmen_lightning_module *m, fulmen_loader *l, const char *ckpt) {
    f->trainer = t;
    f->epoch_starts = f->train_starts = f->train_ends = 0;
    f->first_epoch = f->first_step = -1;
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, ckpt));
    return f->epoch_starts;
}

int main(void) {
    char root[] = "/tmp/fulmen-next-fit.XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    fulmen_dataset *ds = fixture_blobs(12, 1, 2.0f);
    fulmen_loader *l = fixture_loader(ds, 4, false, 0); /* 3 batches */
    fixture f = {.model = fixture_mlp(4, 0)};
    fulmen_lightning_module *m = fixture_module(f.model, &f, training_step, on_hook);
    fulmen_trainer *t = fixture_trainer(NULL, 2);
    int64_t epoch = -1, step = -1;

    CHECK(fit(&f, t, m, l, NULL) == 2);
    CHECK(f.train_starts == 1 && f.train_ends == 1 && f.first_epoch == 0 && f.first_step == 0);
    CHECK(f.busy_code == FULMEN_CODE_INVALID_STATE);
    progress(t, &epoch, &step);
    CHECK(epoch == 2 && step == 6);

    /* At its limit: nothing trains, the weights stay. */
    char weights[256];
    snprintf(weights, sizeof weights, "%s/weights.safetensors", root);
    fulmen_model *before = fixture_mlp(4, 0);
    CHECK_OK(fulmen_model_save(f.model, weights));
    CHECK_OK(fulmen_model_load(before, weights, true));
    CHECK(fit(&f, t, m, l, NULL) == 0);
    CHECK(f.train_starts == 0 && f.train_ends == 0);
    CHECK(fixture_max_diff(f.model, before) == 0.0);
    progress(t, &epoch, &step);
    CHECK(epoch == 2 && step == 6);

    /* Raised: epoch 2 onwards, from step 6. */
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 3));
    CHECK(fit(&f, t, m, l, NULL) == 1);
    CHECK(f.train_starts == 1 && f.first_epoch == 2 && f.first_step == 6);
    CHECK(fixture_max_diff(f.model, before) > 0.0);
    progress(t, &epoch, &step);
    CHECK(epoch == 3 && step == 9);

    /* A step limit counts every fit's steps: 2 more stop inside epoch 3,
     * which counts as done, so the next fit starts epoch 4. */
    CHECK_OK(fulmen_trainer_set_max_epochs(t, -1));
    CHECK_OK(fulmen_trainer_set_max_steps(t, 11));
    CHECK(fit(&f, t, m, l, NULL) == 1);
    progress(t, &epoch, &step);
    CHECK(epoch == 4 && step == 11);
    CHECK_OK(fulmen_trainer_set_max_steps(t, 12));
    CHECK(fit(&f, t, m, l, NULL) == 1);
    CHECK(f.first_epoch == 4 && f.first_step == 11);
    progress(t, &epoch, &step);
    CHECK(epoch == 5 && step == 12);

    /* A checkpoint's progress replaces the trainer's. */
    char path[256];
    snprintf(path, sizeof path, "%s/after.ckpt", root);
    CHECK_OK(fulmen_trainer_save_checkpoint(t, m, path, false));
    fulmen_trainer *fresh = fixture_trainer(NULL, 6);
    CHECK(fit(&f, fresh, m, l, path) == 1);
    CHECK(f.first_epoch == 5 && f.first_step == 12);
    progress(fresh, &epoch, &step);
    CHECK(epoch == 6 && step == 15);
    /* ... on a trainer that went further too. */
    CHECK_OK(fulmen_trainer_set_max_steps(fresh, -1));
    CHECK_OK(fulmen_trainer_set_max_epochs(fresh, 6));
    CHECK(fit(&f, fresh, m, l, path) == 1);
    CHECK(f.first_epoch == 5 && f.first_step == 12);

    /* The setters' errors leave the limits as they were. */
    CHECK_ERR(fulmen_trainer_set_max_epochs(NULL, 3), FULMEN_CODE_NULL_ARGUMENT, "trainer");
    CHECK_ERR(fulmen_trainer_set_max_steps(NULL, 3), FULMEN_CODE_NULL_ARGUMENT, "trainer");
    CHECK_ERR(fulmen_trainer_set_max_epochs(fresh, -2), FULMEN_CODE_INVALID_ARGUMENT, "max_epochs");
    CHECK_ERR(fulmen_trainer_set_max_steps(fresh, -7), FULMEN_CODE_INVALID_ARGUMENT, "max_steps");
    CHECK(fit(&f, fresh, m, l, NULL) == 0);

    /* The default loggers and ModelCheckpoint are the trainer's: the next
     * fit logs in the same version_0 and its checkpoint replaces the last
     * fit's (save_top_k 1), as Lightning's. */
    fulmen_trainer *logged = fixture_trainer(root, 2);
    char dir[512], ckpt[700];
    size_t len = 0;
    CHECK(fit(&f, logged, m, l, NULL) == 2);
    CHECK_OK(fulmen_trainer_log_dir(logged, dir, sizeof dir, &len));
    snprintf(ckpt, sizeof ckpt, "%s/checkpoints/epoch=1-step=6.ckpt", dir);
    CHECK(access(ckpt, F_OK) == 0);
    CHECK_OK(fulmen_trainer_set_max_epochs(logged, 3));
    CHECK(fit(&f, logged, m, l, NULL) == 1);
    char again[512];
    CHECK_OK(fulmen_trainer_log_dir(logged, again, sizeof again, &len));
    CHECK(strcmp(dir, again) == 0 && strstr(dir, "/lightning_logs/version_0") != NULL);
    CHECK(access(ckpt, F_OK) != 0);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoints/epoch=2-step=9.ckpt", dir);
    CHECK(access(ckpt, F_OK) == 0);
    fulmen_trainer_free(logged);

    fulmen_trainer_free(fresh);
    fulmen_trainer_free(t);
    fulmen_model_free(before);
    fulmen_lightning_module_free(m);
    fulmen_model_free(f.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_next_fit");
}

/*
 * Built-in callbacks from a LightningModule's configure_callbacks: a
 * ModelCheckpoint, an EarlyStopping and a LearningRateMonitor the module
 * adds replace the trainer's callbacks of those types (Lightning replaces
 * by type, whatever the monitor), and an invalid one fails the run; the
 * other built-ins (a GradientAccumulationScheduler, a Timer) replace the
 * trainer's too, and a second StochasticWeightAveraging is refused. A
 * prediction writer the module adds (tensors or whole values) replaces the
 * trainer's, a new one each run, each freeing its userdata once.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    fulmen_model *model;
    const char *module_dir; /* where the module's ModelCheckpoint writes */
    bool bad_monitor;       /* add an LR monitor with an invalid interval */
    int others; /* 1: accumulation by 2; 2: a Timer of 0 s; 3: two SWAs; 4: a prediction writer;
                   5: a prediction value writer; 6: a writer missing its epoch function */
} fixture;

/* What a prediction writer saw, and how often its userdata was freed. */
typedef struct {
    int batches, epochs, freed, tensors;
} written;

/* The module's writers, one per run. */
static written module_writers[4];
static int n_module_writers;

static fulmen_error *count_batch(void *ud, const fulmen_tensor *prediction, const int64_t *indices, size_t n,
                                 const fulmen_tensor *const *batch, size_t batch_len, int64_t batch_idx,
                                 size_t dataloader_idx) {
    (void)indices, (void)n, (void)batch, (void)batch_len, (void)batch_idx, (void)dataloader_idx;
    written *w = ud;
    w->batches++;
    w->tensors += prediction != NULL;
    return NULL;
}

static fulmen_error *count_epoch(void *ud, size_t dataloader_idx, const fulmen_tensor *const *predictions,
                                 size_t n_batches, const int64_t *indices, const size_t *counts) {
    (void)dataloader_idx, (void)predictions, (void)n_batches, (void)indices, (void)counts;
    ((written *)ud)->epochs++;
    return NULL;
}

static fulmen_error *count_value_batch(void *ud, const fulmen_value *prediction, const int64_t *indices, size_t n,
                                       const fulmen_tensor *const *batch, size_t batch_len, int64_t batch_idx,
                                       size_t dataloader_idx) {
    (void)indices, (void)n, (void)batch, (void)batch_len, (void)batch_idx, (void)dataloader_idx;
    written *w = ud;
    int32_t kind = -1;
    fulmen_error *e = fulmen_value_get_kind(prediction, &kind);
    w->batches++;
    w->tensors += kind == FULMEN_VALUE_KIND_TENSOR;
    return e;
}

static void count_free(void *ud) { ((written *)ud)->freed++; }

/* configure_callbacks' prediction writers (others 4 to 6). */
static fulmen_error *add_writer(int others, fulmen_callback_list *list) {
    if (n_module_writers == 4) return fulmen_error_new(FULMEN_CODE_CALLBACK, "more runs than writers");
    written *w = &module_writers[n_module_writers++];
    if (others == 4) return fulmen_callback_list_add_prediction_writer(list, "batch_and_epoch", count_batch,
                                                                       count_epoch, w, count_free);
    if (others == 5)
        return fulmen_callback_list_add_prediction_value_writer(list, NULL, count_value_batch, NULL, w, count_free);
    return fulmen_callback_list_add_prediction_writer(list, "epoch", count_batch, NULL, w, count_free);
}

/* The loss, and "flat" = 1 every epoch: it never improves. */
static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fixture *f = ud;
    fulmen_error *e = fixture_cross_entropy(f->model, batch, out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "flat", 1.0, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* The model's logits. */
static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_model_forward(((fixture *)ud)->model, x, out);
    return e;
}

static fulmen_error *configure_callbacks(void *ud, fulmen_callback_list *list) {
    fixture *f = ud;
    if (f->others >= 4) return add_writer(f->others, list);
    if (f->others == 1) {
        int64_t epochs[1] = {0}, factors[1] = {2};
        return fulmen_callback_list_add_gradient_accumulation_scheduler(list, epochs, factors, 1);
    }
    if (f->others == 2) return fulmen_callback_list_add_timer(list, "0", "step");
    if (f->others == 3) {
        fulmen_stochastic_weight_averaging_options swa = fulmen_stochastic_weight_averaging_options_default(0.05);
        fulmen_error *e = fulmen_callback_list_add_stochastic_weight_averaging(list, &swa);
        if (e == NULL) e = fulmen_callback_list_add_stochastic_weight_averaging(list, &swa);
        return e;
    }
    fulmen_early_stopping_options es = fulmen_early_stopping_options_default();
    es.monitor = "flat";
    es.patience = 0;
    es.check_on_train_epoch_end = 1;
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = f->module_dir;
    mc.filename = "m-{epoch}";
    mc.save_top_k = -1;
    fulmen_error *e = fulmen_callback_list_add_early_stopping(list, &es);
    if (e == NULL) e = fulmen_callback_list_add_model_checkpoint(list, &mc);
    if (e == NULL) e = fulmen_callback_list_add_lr_monitor(list, f->bad_monitor ? "hourly" : "epoch", false, false);
    return e;
}

static fulmen_lightning_module *module_for(fixture *f) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = training_step;
    vt.configure_optimizers = fixture_configure_sgd;
    vt.predict_step = predict_step;
    vt.configure_callbacks = configure_callbacks;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    return m;
}

static bool exists(const char *dir, const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

int main(void) {
    char dir[] = "/tmp/fulmen-configure-callbacks-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char module_dir[300], trainer_dir[300], root[300];
    snprintf(module_dir, sizeof module_dir, "%s/module", dir);
    snprintf(trainer_dir, sizeof trainer_dir, "%s/trainer", dir);
    snprintf(root, sizeof root, "%s/root", dir);

    CHECK_OK(fulmen_manual_seed(3));
    fixture f = {fixture_mlp(8, 0.0), module_dir, false, 0};
    fulmen_dataset *ds = fixture_blobs(32, 1, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    fulmen_lightning_module *m = module_for(&f);

    /* The trainer's own EarlyStopping (patient) and ModelCheckpoint (its
     * folder) on other monitors: both replaced by the module's. */
    fulmen_trainer_options *o = fixture_options(root, 6);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "csv"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_early_stopping_options es = fulmen_early_stopping_options_default();
    es.monitor = "never_logged";
    es.patience = 100;
    CHECK_OK(fulmen_trainer_add_early_stopping(t, &es));
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = trainer_dir;
    CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mc));

    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    /* The module's EarlyStopping stopped at epoch 1 (no improvement, no
     * patience); the trainer's would have failed on its missing metric. */
    int64_t wait = -1, stopped = -1;
    double best = 0;
    CHECK_OK(fulmen_trainer_early_stopping_state(t, &wait, &stopped, &best));
    CHECK(stopped == 1 && wait == 1 && best == 1.0);
    /* The module's ModelCheckpoint wrote every epoch; the trainer's none. */
    CHECK(exists(module_dir, "m-epoch=0.ckpt") && exists(module_dir, "m-epoch=1.ckpt"));
    CHECK(!exists(module_dir, "m-epoch=2.ckpt") && !exists(trainer_dir, ""));
    /* The module's LearningRateMonitor logged. */
    fulmen_value *metrics = NULL, *lr = NULL;
    CHECK_OK(fulmen_trainer_callback_metrics(t, &metrics));
    CHECK_OK(fulmen_value_dict_get(metrics, "lr-SGD", &lr));
    double v = 0;
    CHECK_OK(fulmen_value_get_double(lr, &v));
    CHECK(v > 0);
    fulmen_value_free(lr);
    fulmen_value_free(metrics);
    fulmen_trainer_free(t);

    /* The module's GradientAccumulationScheduler (2 batches a step)
     * replaces the trainer's (4): one epoch of 4 batches takes 2 steps. */
    f.others = 1;
    t = fixture_trainer(NULL, 1);
    int64_t epochs[1] = {0}, fours[1] = {4};
    CHECK_OK(fulmen_trainer_add_gradient_accumulation_scheduler(t, epochs, fours, 1));
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    int64_t steps = -1;
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 2);
    fulmen_trainer_free(t);

    /* The module's Timer of 0 seconds stops the fit after its first step. */
    f.others = 2;
    t = fixture_trainer(NULL, 3);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    CHECK_OK(fulmen_trainer_global_step(t, &steps));
    CHECK(steps == 1);
    fulmen_trainer_free(t);

    /* A second StochasticWeightAveraging in the list fails the run. */
    f.others = 3;
    t = fixture_trainer(NULL, 1);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "StochasticWeightAveraging");
    fulmen_trainer_free(t);
    f.others = 0;

    /* The module's prediction writer replaces the trainer's at the run's
     * start (whose userdata is freed then), and the next run's the one
     * before it; 32 samples in batches of 8 make 4 batches. */
    f.others = 4;
    written trainer_writer = {0};
    t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_add_prediction_writer(t, NULL, count_batch, NULL, &trainer_writer, count_free));
    fulmen_tensor *out = NULL;
    CHECK_OK(fulmen_trainer_predict(t, m, l, NULL, &out));
    fulmen_tensor_free(out);
    CHECK(trainer_writer.batches == 0 && trainer_writer.freed == 1);
    CHECK(n_module_writers == 1 && module_writers[0].batches == 4 && module_writers[0].tensors == 4);
    CHECK(module_writers[0].epochs == 1 && module_writers[0].freed == 0);
    CHECK_OK(fulmen_trainer_predict(t, m, l, NULL, &out));
    fulmen_tensor_free(out);
    CHECK(n_module_writers == 2 && module_writers[0].freed == 1 && module_writers[0].batches == 4);
    CHECK(module_writers[1].batches == 4 && module_writers[1].epochs == 1 && module_writers[1].freed == 0);
    fulmen_trainer_free(t);
    CHECK(module_writers[1].freed == 1 && trainer_writer.freed == 1);

    /* A value writer gets each batch's prediction as a tensor value. */
    f.others = 5;
    t = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_predict(t, m, l, NULL, &out));
    fulmen_tensor_free(out);
    fulmen_trainer_free(t);
    CHECK(n_module_writers == 3 && module_writers[2].batches == 4 && module_writers[2].tensors == 4);
    CHECK(module_writers[2].epochs == 0 && module_writers[2].freed == 1);

    /* A writer the module adds wrongly fails the run, its userdata not
     * taken. */
    f.others = 6;
    t = fixture_trainer(NULL, 1);
    CHECK_ERR(fulmen_trainer_predict(t, m, l, NULL, &out), FULMEN_CODE_NULL_ARGUMENT, "epoch writer is missing");
    fulmen_trainer_free(t);
    CHECK(n_module_writers == 4 && module_writers[3].freed == 0 && module_writers[3].batches == 0);
    f.others = 0;

    /* An invalid callback fails the run with its error. */
    f.bad_monitor = true;
    t = fixture_trainer(NULL, 1);
    CHECK_ERR(fulmen_trainer_fit(t, m, l, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "hourly");
    fulmen_trainer_free(t);

    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(f.model);
    CHECK(fulmen_live_handles() == 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_configure_callbacks");
}

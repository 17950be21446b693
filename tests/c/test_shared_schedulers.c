/*
 * Several schedulers on one optimizer (fulmen_optimizer_config_add_scheduler),
 * as Lightning's configure_optimizers returning two lr_scheduler configs
 * for one optimizer: a linear warm-up per step and a decay per epoch
 * compose as in torch 2.13; a resume continues exactly, in both checkpoint
 * formats; bad additions are refused and consume nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fixture.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[128];

typedef struct {
    fulmen_model *model;
    double lrs[64]; /* the lr each training step saw */
    int steps;
    int mode; /* 0: warm-up + decay; 1: the refusals, then warm-up + decay */
} world;

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_error *e = fixture_cross_entropy(((world *)ud)->model, batch, out);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", check_item(*out), FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* A host logger keeping what LearningRateMonitor("step") logs at each
 * step. As in Lightning, each scheduler has its entry: "lr-SGD" (the
 * warm-up's) and "lr-SGD-1" (the decay's), the same optimizer's lr. */
static fulmen_error *log_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                 int64_t at) {
    world *w = ud;
    (void)epoch;
    (void)at;
    double first = -1, second = -2;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "lr-SGD") == 0) first = values[i];
        else if (strcmp(names[i], "lr-SGD-1") == 0) second = values[i];
        else CHECK(strncmp(names[i], "lr-", 3) != 0);
    }
    if (first == -1) return NULL; /* a call without the monitor's entries */
    CHECK(w->mode == 1 || first == second); /* mode 1 keeps one scheduler */
    if (w->steps < 64) w->lrs[w->steps++] = first;
    return NULL;
}

static fulmen_optimizer *sgd(fulmen_model *model) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(model, NULL, 0, &o, &opt));
    return opt;
}

/* What must be refused, in the config the trainer lends, before the real
 * set-up: each failure consumes nothing. */
static void refusals(world *w, fulmen_optimizer_config *config) {
    fulmen_optimizer *opt = sgd(w->model), *other = sgd(w->model);
    fulmen_scheduler *warm = NULL, *foreign = NULL, *stepped = NULL, *plateau = NULL, *seq = NULL;
    CHECK_OK(fulmen_scheduler_linear_lr_new(opt, 0.25, 1.0, 4, &warm));
    CHECK_OK(fulmen_scheduler_step_lr_new(other, 1, 0.5, &foreign));
    CHECK_OK(fulmen_scheduler_step_lr_new(opt, 1, 0.5, &stepped));
    CHECK_OK(fulmen_scheduler_step(stepped, opt, 0.0));
    fulmen_plateau_options po = fulmen_plateau_options_default();
    CHECK_OK(fulmen_scheduler_reduce_on_plateau_new(opt, &po, &plateau));
    fulmen_scheduler *a = NULL, *b = NULL;
    CHECK_OK(fulmen_scheduler_constant_lr_new(opt, 0.5, 2, &a));
    CHECK_OK(fulmen_scheduler_exponential_lr_new(opt, 0.9, &b));
    fulmen_scheduler *parts[2] = {a, b};
    const int64_t at2[1] = {2};
    CHECK_OK(fulmen_scheduler_sequential_lr_new(opt, parts, 2, at2, 1, &seq));
    fulmen_scheduler *c = NULL, *d = NULL, *chain = NULL;
    CHECK_OK(fulmen_scheduler_constant_lr_new(opt, 0.5, 2, &c));
    CHECK_OK(fulmen_scheduler_exponential_lr_new(opt, 0.9, &d));
    fulmen_scheduler *links[2] = {c, d};
    CHECK_OK(fulmen_scheduler_chained_new(opt, links, 2, &chain));
    CHECK_OK(fulmen_scheduler_step(chain, opt, 0.0));
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, warm, FULMEN_INTERVAL_STEP, 1, NULL),
              FULMEN_CODE_INVALID_ARGUMENT, "out of range");
    CHECK_OK(fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_STEP, 1, NULL));
    size_t live = fulmen_live_handles();
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 1, warm, FULMEN_INTERVAL_STEP, 1, NULL),
              FULMEN_CODE_INVALID_ARGUMENT, "out of range");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, foreign, FULMEN_INTERVAL_STEP, 1, NULL),
              FULMEN_CODE_INVALID_ARGUMENT, "another optimizer");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, stepped, FULMEN_INTERVAL_EPOCH, 1, NULL),
              FULMEN_CODE_INVALID_STATE, "stepped");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, seq, FULMEN_INTERVAL_STEP, 1, NULL),
              FULMEN_CODE_INVALID_ARGUMENT, "SequentialLR");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, chain, FULMEN_INTERVAL_STEP, 1, NULL),
              FULMEN_CODE_INVALID_STATE, "stepped");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, plateau, FULMEN_INTERVAL_EPOCH, 1, NULL),
              FULMEN_CODE_INVALID_ARGUMENT, "monitor");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, warm, 7, 1, NULL), FULMEN_CODE_INVALID_ARGUMENT,
              "fulmen_interval");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, warm, FULMEN_INTERVAL_STEP, 0, NULL),
              FULMEN_CODE_INVALID_ARGUMENT, "frequency");
    CHECK_ERR(fulmen_optimizer_config_add_scheduler(config, 0, NULL, FULMEN_INTERVAL_STEP, 1, NULL),
              FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(fulmen_live_handles() == live);
    /* The optimizer was consumed: its schedulers still name it. */
    CHECK_OK(fulmen_optimizer_config_add_scheduler(config, 0, plateau, FULMEN_INTERVAL_EPOCH, 1, "train_loss"));
    CHECK(fulmen_live_handles() == live - 1);
    fulmen_scheduler *all[5] = {warm, foreign, stepped, seq, chain};
    for (int i = 0; i < 5; i++) fulmen_scheduler_free(all[i]);
    fulmen_optimizer_free(other);
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    world *w = ud;
    if (w->mode == 1) {
        refusals(w, config);
        return NULL;
    }
    fulmen_optimizer *opt = sgd(w->model);
    fulmen_scheduler *warm = NULL, *decay = NULL;
    fulmen_error *e = fulmen_scheduler_linear_lr_new(opt, 0.25, 1.0, 4, &warm);
    if (e == NULL) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &decay);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, warm, FULMEN_INTERVAL_STEP, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(warm);
        fulmen_scheduler_free(decay);
        fulmen_optimizer_free(opt);
        return e;
    }
    e = fulmen_optimizer_config_add_scheduler(config, 0, decay, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_scheduler_free(decay);
    return e;
}

static fulmen_lightning_module *module_for(world *w) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = w;
    vt.training_step = step;
    vt.configure_optimizers = configure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, w->model, &m));
    return m;
}

/* Fits `w` to `epochs` (checkpointing into `dir` when given, resuming from
 * `resume` when given) with checkpoints in `format` (NULL: the default). */
static void fit(world *w, fulmen_loader *l, int64_t epochs, const char *dir, const char *resume, const char *format) {
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    if (format != NULL) CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", format));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_logger_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = w;
    v.log_metrics = log_metrics;
    CHECK_OK(fulmen_trainer_add_lr_monitor(t, "step"));
    CHECK_OK(fulmen_trainer_add_logger(t, &v));
    if (dir != NULL) {
        fulmen_model_checkpoint_options mo = fulmen_model_checkpoint_options_default();
        mo.dirpath = dir;
        mo.save_last = true;
        CHECK_OK(fulmen_trainer_add_model_checkpoint(t, &mo));
    }
    fulmen_lightning_module *m = module_for(w);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, resume));
    fulmen_lightning_module_free(m);
    fulmen_trainer_free(t);
}

/* torch 2.13: SGD lr 0.1, LinearLR(0.25, 1, 4) stepped per batch and
 * StepLR(1, 0.5) per epoch, 4 batches an epoch: the lr of each batch. */
static const double TORCH_LRS[12] = {0.025,
                                     0.043750000000000004,
                                     0.06250000000000001,
                                     0.08125000000000002,
                                     0.05000000000000001,
                                     0.05000000000000001,
                                     0.05000000000000001,
                                     0.05000000000000001,
                                     0.025000000000000005,
                                     0.025000000000000005,
                                     0.025000000000000005,
                                     0.025000000000000005};

static void resumes_exactly(fulmen_loader *l, const char *format) {
    char init[256], dir[256], last[300];
    snprintf(init, sizeof init, "%s/init.safetensors", root);
    snprintf(dir, sizeof dir, "%s/%s", root, format ? format : "default");
    snprintf(last, sizeof last, "%s/last.ckpt", dir);
    world whole = {fixture_mlp(8, 0), {0}, 0, 0}, split = {fixture_mlp(8, 0), {0}, 0, 0};
    CHECK_OK(fulmen_model_save(whole.model, init));
    CHECK_OK(fulmen_model_load(split.model, init, true));
    fit(&whole, l, 3, NULL, NULL, format);
    CHECK(whole.steps == 12);
    for (int i = 0; i < 12 && i < whole.steps; i++) CHECK(whole.lrs[i] == TORCH_LRS[i]);
    fit(&split, l, 1, dir, NULL, format);
    fit(&split, l, 3, dir, last, format);
    CHECK(split.steps == 12);
    for (int i = 0; i < 12 && i < split.steps; i++) CHECK(split.lrs[i] == TORCH_LRS[i]);
    CHECK(fixture_max_diff(whole.model, split.model) == 0);
    fulmen_model_free(whole.model);
    fulmen_model_free(split.model);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/fulmen-test-shared-schedulers-XXXXXX");
    if (mkdtemp(root) == NULL) return 2;
    fulmen_dataset *ds = fixture_blobs(16, 5, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 4, true, 3);
    resumes_exactly(l, NULL);
    resumes_exactly(l, "safetensors");
    world w = {fixture_mlp(8, 0), {0}, 0, 1};
    fit(&w, l, 1, NULL, NULL, NULL);
    CHECK(w.steps == 4);
    fulmen_model_free(w.model);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_shared_schedulers");
}

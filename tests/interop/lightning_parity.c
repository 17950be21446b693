/* fulmen's side of the per-step parity test against Lightning's own Trainer
 * (tests/interop/lightning_parity.py runs the Lightning twin).
 *
 *   lightning_parity CONFIG INIT DATA_X DATA_Y SAMPLES BATCH EPOCHS LOSSES
 *                    [CKPT_DIR [RESUME [FORMAT [EVERY_N_TRAIN_STEPS]]]]
 *
 * Trains a 32-64-10 MLP (PyTorch's names: 0.weight ... 2.bias) from INIT
 * (safetensors) on the first SAMPLES rows of DATA_X / DATA_Y (raw files of
 * SAMPLES + VAL_ROWS rows of 32 float32 / one int64 label), in order, BATCH rows per batch, for EPOCHS epochs on one CPU thread, and
 * appends every training step's loss to LOSSES (one "%.17g" per line; with
 * weight averaging, every validation step's too).
 * CONFIG:
 *   steplr:   SGD (lr 0.1, momentum 0.9), StepLR (step_size 1, gamma 0.5)
 *             per epoch, gradient_clip_val 0.5 by norm;
 *   stepfreq: Adam (lr 0.01), StepLR (step_size 2, gamma 0.5) per step
 *             every 3rd batch, accumulate_grad_batches 2,
 *             gradient_clip_val 0.05 by value;
 *   plateau:  SGD (lr 0.1, momentum 0.9), ReduceLROnPlateau (factor 0.5,
 *             patience 0) per epoch on "val_loss", validated every epoch
 *             on the VAL_ROWS rows after the training rows, gradient_clip_val 1 by norm;
 *   warmup_cosine: SGD (lr 0.1, momentum 0.9), SequentialLR of LinearLR
 *             (start_factor 0.1, 5 steps) and CosineAnnealingLR (T_max 39,
 *             eta_min 0.001) at milestone 5, per step; no clipping;
 *   restarts: SGD (lr 0.1, momentum 0.9), CosineAnnealingWarmRestarts
 *             (T_0 3, T_mult 2, eta_min 0.001) per step; no clipping;
 *   cyclic:   SGD (lr 0.1, momentum 0.9), CyclicLR (0.01 to 0.1, 4 steps
 *             up, exp_range, gamma 0.99, momentum cycled 0.8 to 0.9) per
 *             step; no clipping;
 *   lambda:   SGD (lr 0.1, momentum 0.9), LambdaLR (0.95^step, a C
 *             function) per step; no clipping;
 *   onecycle: Adam (lr 0.01), OneCycleLR (max_lr 0.02, 44 steps: the
 *             whole run; beta1 cycled) per step; no clipping;
 *   chained:  SGD (lr 0.1, momentum 0.9), ChainedScheduler of ConstantLR
 *             (factor 0.1, 5 steps) and ExponentialLR (gamma 0.97) per
 *             step; no clipping;
 *   two_schedulers: SGD (lr 0.1, momentum 0.9) with two schedulers:
 *             LinearLR (start_factor 0.1, 5 steps) per step and StepLR
 *             (step_size 1, gamma 0.5) per epoch; no clipping;
 *   groups:   AdamW (lr 0.01, weight_decay 0.01) over the weights, and a
 *             second param group of the biases with weight_decay 0,
 *             betas (0.8, 0.95), eps 1e-6 and amsgrad; StepLR (step_size
 *             1, gamma 0.5) per epoch; no clipping;
 *   plateau_groups: SGD (lr 0.1, momentum 0.9) over the weights and a
 *             second param group of the biases (lr 0.2);
 *             ReduceLROnPlateau on "val_loss" (factor 0.5, patience 0,
 *             min_lr 0.07 and 0.15 per group) per epoch,
 *             validated every epoch, gradient_clip_val 1 by norm;
 *   onecycle_groups: Adam (lr 0.01) over the weights and a second param
 *             group of the biases; OneCycleLR with max_lr 0.02 and 0.05
 *             per group (44 steps, beta1 cycled) per step; no clipping;
 *   cyclic_groups: SGD (lr 0.1, momentum 0.9) over the weights and a
 *             second param group of the biases (lr 0.2); CyclicLR from
 *             0.01 / 0.02 to 0.1 / 0.05 per group (4 steps up, exp_range,
 *             gamma 0.99, momentum cycled) per step; no clipping;
 *   lbfgs:    LBFGS (lr 0.5, max_iter 4, history_size 3: a fixed step),
 *             StepLR (step_size 1, gamma 0.5) per epoch,
 *             gradient_clip_val 1 by norm (clipped inside each
 *             evaluation); every evaluation's loss is written;
 *   lbfgs_manual: as lbfgs without clipping, under manual optimization:
 *             the training step calls opt.step(closure) (zero_grad,
 *             the loss and manual_backward in the closure) and steps
 *             StepLR after the epoch's last batch;
 *   lbfgs_wolfe: LBFGS (lr 1, max_iter 5, history_size 4, the
 *             strong-Wolfe line search), StepLR (step_size 1, gamma 0.5)
 *             per epoch; no clipping;
 *   ema:      as plateau, with EMA weight averaging (decay 0.9, every
 *             2nd step from step 3, every epoch end from epoch 2):
 *             validation, and so the plateau, sees the averaged weights;
 *   swa:      as plateau, with SWA weight averaging (every step);
 *   reload: as plateau, with the data from the module's train_dataloader
 *             (the first SAMPLES - 16 * (epoch % 3) rows) and
 *             val_dataloader (the first 32 + 16 * (epoch % 3) validation
 *             rows), reloaded every 2 epochs;
 *   fused:    AdamW (lr 0.01, weight_decay 0.01) with fused updates,
 *             StepLR (step_size 1, gamma 0.5) per epoch; no clipping;
 *   fused_sgd: SGD (lr 0.1, momentum 0.9) with fused updates, StepLR
 *             (step_size 1, gamma 0.5) per epoch, gradient_clip_val 0.5
 *             by norm;
 *   fused_adagrad: Adagrad (lr 0.05, lr_decay 0.01,
 *             initial_accumulator_value 0.1) with fused updates, StepLR
 *             (step_size 1, gamma 0.5) per epoch; no clipping;
 *   backbone: as steplr, with BackboneFinetuning of the first Linear
 *             ("0", unfreezing at epoch 1; Lightning's other defaults):
 *             SGD over the parameters trainable at configure_optimizers
 *             (the last Linear's), the first Linear joining as a second
 *             param group;
 *   foreach:  AdamW (lr 0.01, weight_decay 0.01, amsgrad) with foreach
 *             updates, StepLR (step_size 1, gamma 0.5) per epoch;
 *   foreach_sgd: SGD (lr 0.1, momentum 0.9, nesterov) with foreach
 *             updates, StepLR (step_size 1, gamma 0.5) per epoch, clipping
 *             at norm 0.5;
 *   foreach_adamax, foreach_nadam, foreach_radam: Adamax, NAdam
 *             (decoupled_weight_decay) or RAdam (lr 0.01, weight_decay
 *             0.01) with foreach updates, StepLR (step_size 1, gamma 0.5)
 *             per epoch;
 *   backbone_lambda: as backbone, the backbone's lr growing by
 *             lambda_func(epoch) = 1 + (epoch % 2) / 2 instead of 2;
 *   skips:    SGD (lr 0.1, momentum 0.9), StepLR (step_size 2, gamma 0.7)
 *             per step every 3rd batch, gradient_clip_val 0.5 by norm;
 *             training_step writes no loss for every 3rd batch (batch_idx
 *             % 3 == 2: Lightning's `return None`) and on_train_batch_start
 *             skips the rest of epoch 2 at its batch 8 (Lightning's
 *             `return -1`);
 *   step_even, warmup, clip_after_first, custom_scheduler: as steplr,
 *             with the module's optimization hooks: optimizer_step
 *             stepping on even batches only (odd ones run the closure
 *             alone); optimizer_step setting the lr to
 *             min(1, (global_step + 1) / 5) * 0.1 after each of the first 5
 *             steps; configure_gradient_clipping clipping by norm 0.5 only
 *             after epoch 0 (no gradient_clip_val); lr_scheduler_step
 *             stepping the StepLR at the end of even epochs only;
 *   lr_find:  SGD (momentum 0.9), no scheduler: instead of fitting, the
 *             learning-rate range test (1e-5 to 1 over 30 steps) writes
 *             "lr loss" per step to LOSSES, then "suggestion lr".
 * CKPT_DIR: a ModelCheckpoint keeps every epoch's checkpoint there
 * (epoch=N.ckpt). RESUME: fit resumes from that checkpoint (a fulmen or a
 * Lightning one; "-" for none). FORMAT: the checkpoints' format,
 * "lightning" (the default; with the Lightning twin's attribute prefix
 * "model.") or "safetensors". EVERY_N_TRAIN_STEPS: the ModelCheckpoint
 * saves every that many optimizer steps (step=N.ckpt) instead of every
 * epoch. With FULMEN_SAVE_AFTER_FIT set in the environment, the fit is
 * followed by fulmen_trainer_save_checkpoint to that path (Lightning's
 * trainer.save_checkpoint after fit). With FULMEN_REFIT_EPOCHS=N, the fit
 * is followed by fulmen_trainer_set_max_epochs(N) and two more fits
 * without a checkpoint (Lightning's trainer.fit_loop.max_epochs = N and
 * fit again). A failed call
 * prints its error code and message and exits 1. */
#include <fulmen.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURES 32
#define CLASSES 10
#define VAL_ROWS 64

/* BackboneFinetuning's lambda_func of "backbone_lambda". */
static fulmen_error *backbone_lambda(void *ud, int64_t epoch, double *out) {
    (void)ud;
    *out = 1.0 + (double)(epoch % 2) / 2.0;
    return NULL;
}

static bool is_backbone(const char *config) {
    return strcmp(config, "backbone") == 0 || strcmp(config, "backbone_lambda") == 0;
}

/* The configurations of Adam's variants with foreach updates. */
static bool is_foreach_variant(const char *config) {
    return strcmp(config, "foreach_adamax") == 0 || strcmp(config, "foreach_nadam") == 0 ||
           strcmp(config, "foreach_radam") == 0;
}

/* Adamax, NAdam (decoupled weight decay) or RAdam, lr 0.01 and
 * weight_decay 0.01, with foreach updates. */
static fulmen_error *foreach_variant(fulmen_model *model, const char *config, fulmen_optimizer **opt) {
    fulmen_error *e;
    if (strcmp(config, "foreach_adamax") == 0) {
        fulmen_adamax_options o = fulmen_adamax_options_default();
        o.lr = 0.01;
        o.weight_decay = 0.01;
        e = fulmen_optimizer_adamax_new(model, NULL, 0, &o, opt);
    } else if (strcmp(config, "foreach_nadam") == 0) {
        fulmen_nadam_options o = fulmen_nadam_options_default();
        o.lr = 0.01;
        o.weight_decay = 0.01;
        o.decoupled_weight_decay = true;
        e = fulmen_optimizer_nadam_new(model, NULL, 0, &o, opt);
    } else {
        fulmen_radam_options o = fulmen_radam_options_default();
        o.lr = 0.01;
        o.weight_decay = 0.01;
        e = fulmen_optimizer_radam_new(model, NULL, 0, &o, opt);
    }
    if (!e) e = fulmen_optimizer_set_foreach(*opt, FULMEN_FOREACH_ON);
    if (e) {
        fulmen_optimizer_free(*opt);
        *opt = NULL;
    }
    return e;
}

#define TRY(call)                                                                                   \
    do {                                                                                            \
        fulmen_error *e_ = (call);                                                                  \
        if (e_) {                                                                                   \
            fprintf(stderr, "lightning_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_), \
                    fulmen_error_message(e_));                                                      \
            fulmen_error_free(e_);                                                                  \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* What the steps need: the model, the configuration, the losses file. */
struct job {
    fulmen_model *model;
    const char *config;
    FILE *losses;
    bool losses_off; /* the range test writes its own points */
    bool val_losses; /* validation losses are written too */
    const fulmen_batch *batch; /* lbfgs_manual: the step's batch, for its closure */
    int64_t batches_per_epoch;
    fulmen_tensor *all_x, *all_y; /* reload: every row, for the dataloader hooks */
    size_t samples, batch_size;
};

static fulmen_model *build(void) {
    fulmen_model *m, *layer;
    TRY(fulmen_model_sequential_new(&m));
    TRY(fulmen_model_linear_new(FEATURES, 64, true, &layer));
    TRY(fulmen_model_push(m, layer));
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0.0, &layer));
    TRY(fulmen_model_push(m, layer));
    TRY(fulmen_model_linear_new(64, CLASSES, true, &layer));
    TRY(fulmen_model_push(m, layer));
    return m;
}

static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    struct job *job = userdata;
    fulmen_tensor *x, *y, *logits;
    double value;
    int64_t batch_idx = 0;
    if (strcmp(job->config, "skips") == 0) {
        fulmen_error *e = fulmen_step_context_batch_idx(ctx, &batch_idx);
        if (e || batch_idx % 3 == 2) return e; /* no loss: Lightning's `return None` */
    }
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, loss);
    if (!e) e = fulmen_tensor_item(*loss, &value);
    if (!e && !job->losses_off) fprintf(job->losses, "%.17g\n", value);
    return e;
}

/* skips' on_train_batch_start: Lightning's `return -1` at batch 8 of
 * epoch 2. */
static fulmen_error *skips_hook(void *userdata, int32_t hook, fulmen_hook_context *ctx) {
    (void)userdata;
    int64_t epoch = 0, batch_idx = 0;
    if (hook != FULMEN_HOOK_TRAIN_BATCH_START) return NULL;
    fulmen_error *e = fulmen_hook_context_epoch(ctx, &epoch);
    if (!e) e = fulmen_hook_context_batch_idx(ctx, &batch_idx);
    if (!e && epoch == 2 && batch_idx == 8) e = fulmen_hook_context_skip_rest_of_epoch(ctx);
    return e;
}

/* Whether `config` is one of the optimization-hook configurations. */
static bool is_custom_optimization(const char *config) {
    return strcmp(config, "step_even") == 0 || strcmp(config, "warmup") == 0 ||
           strcmp(config, "clip_after_first") == 0 || strcmp(config, "custom_scheduler") == 0;
}

/* step_even's and warmup's optimizer_step. */
static fulmen_error *optimizer_step(void *userdata, fulmen_optimization_context *ctx, int64_t epoch,
                                    int64_t batch_idx, size_t optimizer_idx, fulmen_optimizer_closure *closure) {
    struct job *job = userdata;
    (void)epoch;
    (void)optimizer_idx;
    if (strcmp(job->config, "step_even") == 0) {
        if (batch_idx % 2 == 0) return fulmen_optimization_context_step(ctx, closure, NULL);
        return fulmen_optimizer_closure_run(closure, NULL, NULL);
    }
    int64_t global_step = 0;
    fulmen_error *e = fulmen_optimization_context_step(ctx, closure, NULL);
    if (!e) e = fulmen_optimization_context_global_step(ctx, &global_step);
    if (!e && global_step < 5) {
        double scale = fmin(1.0, (double)(global_step + 1) / 5.0);
        e = fulmen_optimization_context_set_learning_rate(ctx, 0, scale * 0.1);
    }
    return e;
}

/* clip_after_first's configure_gradient_clipping. */
static fulmen_error *clip_after_first(void *userdata, fulmen_optimization_context *ctx, size_t optimizer_idx,
                                      double clip_val, int32_t algorithm) {
    (void)userdata;
    (void)optimizer_idx;
    (void)clip_val;
    (void)algorithm;
    int64_t epoch = 0;
    fulmen_error *e = fulmen_optimization_context_epoch(ctx, &epoch);
    if (!e && epoch > 0) e = fulmen_optimization_context_clip_gradients(ctx, 0.5, FULMEN_CLIP_NORM);
    return e;
}

/* custom_scheduler's lr_scheduler_step. */
static fulmen_error *even_epoch_scheduler(void *userdata, fulmen_optimization_context *ctx, size_t scheduler_idx,
                                          const double *metric) {
    (void)userdata;
    (void)scheduler_idx;
    int64_t epoch = 0;
    fulmen_error *e = fulmen_optimization_context_epoch(ctx, &epoch);
    if (!e && epoch % 2 == 0) e = fulmen_optimization_context_scheduler_step(ctx, metric);
    return e;
}

/* lbfgs_manual's closure: zero_grad, the loss, manual_backward. */
static fulmen_error *manual_closure(void *userdata, fulmen_step_context *ctx, double *value) {
    struct job *job = userdata;
    fulmen_tensor *x, *y, *logits, *loss;
    fulmen_error *e = fulmen_step_context_optimizer_zero_grad(ctx, 0);
    if (!e) e = fulmen_batch_get(job->batch, 0, &x);
    if (!e) e = fulmen_batch_get(job->batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, &loss);
    if (!e) e = fulmen_tensor_item(loss, value);
    if (!e) fprintf(job->losses, "%.17g\n", *value);
    if (!e) e = fulmen_step_context_manual_backward(ctx, loss);
    return e;
}

/* lbfgs_manual's training step: opt.step(closure), and StepLR after the
 * epoch's last batch. */
static fulmen_error *manual_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                 fulmen_tensor **loss) {
    (void)loss;
    struct job *job = userdata;
    int64_t batch_idx = 0;
    job->batch = batch;
    fulmen_error *e = fulmen_step_context_optimizer_step_closure(ctx, 0, manual_closure, job, NULL, NULL);
    if (!e) e = fulmen_step_context_batch_idx(ctx, &batch_idx);
    if (!e && batch_idx == job->batches_per_epoch - 1) e = fulmen_step_context_scheduler_step(ctx, 0, NULL);
    return e;
}

/* reload's loader over `rows` rows from row `first`. */
static fulmen_error *rows_loader(struct job *job, int64_t first, int64_t rows, fulmen_loader **out) {
    fulmen_tensor *x = NULL, *y = NULL;
    fulmen_dataset *data = NULL;
    fulmen_error *e = fulmen_tensor_narrow(job->all_x, 0, first, rows, &x);
    if (!e) e = fulmen_tensor_narrow(job->all_y, 0, first, rows, &y);
    const fulmen_tensor *columns[2] = {x, y};
    if (!e) e = fulmen_dataset_from_tensors(columns, 2, &data);
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = job->batch_size;
    if (!e) e = fulmen_loader_new(data, &lo, out);
    fulmen_dataset_free(data);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    return e;
}

static fulmen_error *train_dataloader(void *userdata, int64_t epoch, fulmen_loader **out) {
    struct job *job = userdata;
    return rows_loader(job, 0, (int64_t)job->samples - 16 * (epoch % 3), out);
}

static fulmen_error *val_dataloader(void *userdata, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    (void)capacity;
    struct job *job = userdata;
    *n = 1;
    return rows_loader(job, (int64_t)job->samples, 32 + 16 * (epoch % 3), out);
}

static fulmen_error *validation_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch) {
    struct job *job = userdata;
    fulmen_tensor *x, *y, *logits, *loss;
    double value;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(job->model, x, &logits);
    if (!e) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, &loss);
    if (!e) e = fulmen_tensor_item(loss, &value);
    if (!e) e = fulmen_step_context_log(ctx, "val_loss", value, 0, 0);
    /* With weight averaging, validation runs on the average: its losses
     * are compared too. */
    if (!e && job->val_losses) fprintf(job->losses, "%.17g\n", value);
    return e;
}

/* LambdaLR's factor: 0.95 ** step, as Python computes it. */
static fulmen_error *decay(void *userdata, int64_t epoch, size_t group, double *out) {
    (void)userdata;
    (void)group;
    *out = pow(0.95, (double)epoch);
    return NULL;
}

/* The model's state_dict entries `a` and `b` as new handles. */
static fulmen_error *two_params(const fulmen_model *m, const char *a, const char *b, fulmen_tensor *out[2]) {
    fulmen_error *e = fulmen_model_state_dict_get(m, a, &out[0]);
    if (!e) e = fulmen_model_state_dict_get(m, b, &out[1]);
    return e;
}

/* An optimizer over the weights ("0.weight", "2.weight") with the biases in a
 * second param group of learning rate `bias_lr` (< 0: the default): kind 's'
 * SGD (lr 0.1, momentum 0.9), 'a' Adam (lr 0.01), 'w' AdamW (lr 0.01,
 * weight_decay 0.01). */
static fulmen_error *weights_then_biases(const fulmen_model *m, char kind, double bias_lr, fulmen_optimizer **opt) {
    fulmen_tensor *weights[2] = {NULL, NULL}, *biases[2] = {NULL, NULL};
    *opt = NULL;
    fulmen_error *e = two_params(m, "0.weight", "2.weight", weights);
    if (!e) e = two_params(m, "0.bias", "2.bias", biases);
    const fulmen_tensor *const *w = (const fulmen_tensor *const *)weights;
    if (!e && kind == 's') {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(NULL, w, 2, &o, opt);
    } else if (!e) {
        fulmen_adam_options o = fulmen_adam_options_default();
        o.lr = 0.01;
        o.weight_decay = kind == 'w' ? 0.01 : 0.0;
        e = kind == 'w' ? fulmen_optimizer_adamw_new(NULL, w, 2, &o, opt) : fulmen_optimizer_adam_new(NULL, w, 2, &o, opt);
    }
    if (!e) e = fulmen_optimizer_add_param_group(*opt, NULL, (const fulmen_tensor *const *)biases, 2, bias_lr);
    for (int i = 0; i < 2; i++) {
        fulmen_tensor_free(weights[i]);
        fulmen_tensor_free(biases[i]);
    }
    if (e) {
        fulmen_optimizer_free(*opt);
        *opt = NULL;
    }
    return e;
}

/* AdamW over the weights; the biases in a group of their own hyperparameters. */
static fulmen_error *adamw_groups(const fulmen_model *m, fulmen_optimizer **opt) {
    fulmen_error *e = weights_then_biases(m, 'w', -1, opt);
    const char *names[5] = {"beta1", "weight_decay", "beta2", "eps", "amsgrad"};
    const double values[5] = {0.8, 0.0, 0.95, 1e-6, 1};
    for (int i = 0; i < 5 && !e; i++) e = fulmen_optimizer_param_group_set(*opt, 1, names[i], values[i]);
    if (e) {
        fulmen_optimizer_free(*opt);
        *opt = NULL;
    }
    return e;
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    struct job *job = userdata;
    fulmen_optimizer *opt;
    fulmen_scheduler *sched;
    fulmen_error *e;
    if (strncmp(job->config, "lbfgs", 5) == 0) {
        bool wolfe = strcmp(job->config, "lbfgs_wolfe") == 0;
        fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
        o.lr = wolfe ? 1.0 : 0.5;
        o.max_iter = wolfe ? 5 : 4;
        o.history_size = wolfe ? 4 : 3;
        o.strong_wolfe = wolfe;
        e = fulmen_optimizer_lbfgs_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
    } else if (strcmp(job->config, "plateau") == 0 || strcmp(job->config, "ema") == 0 ||
               strcmp(job->config, "swa") == 0 || strcmp(job->config, "reload") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        fulmen_plateau_options p = fulmen_plateau_options_default();
        p.factor = 0.5;
        p.patience = 0;
        e = fulmen_scheduler_reduce_on_plateau_new(opt, &p, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, "val_loss");
    } else if (strcmp(job->config, "warmup_cosine") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        fulmen_scheduler *parts[2] = {NULL, NULL};
        const int64_t milestones[1] = {5};
        e = fulmen_scheduler_linear_lr_new(opt, 0.1, 1.0, 5, &parts[0]);
        if (!e) e = fulmen_scheduler_cosine_lr_new(opt, 39, 0.001, &parts[1]);
        if (!e) e = fulmen_scheduler_sequential_lr_new(opt, parts, 2, milestones, 1, &sched);
        if (e) {
            fulmen_scheduler_free(parts[0]);
            fulmen_scheduler_free(parts[1]);
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    } else if (strcmp(job->config, "chained") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        fulmen_scheduler *parts[2] = {NULL, NULL};
        e = fulmen_scheduler_constant_lr_new(opt, 0.1, 5, &parts[0]);
        if (!e) e = fulmen_scheduler_exponential_lr_new(opt, 0.97, &parts[1]);
        if (!e) e = fulmen_scheduler_chained_new(opt, parts, 2, &sched);
        if (e) {
            fulmen_scheduler_free(parts[0]);
            fulmen_scheduler_free(parts[1]);
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    } else if (strcmp(job->config, "two_schedulers") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        fulmen_scheduler *decay = NULL;
        e = fulmen_scheduler_linear_lr_new(opt, 0.1, 1.0, 5, &sched);
        if (!e) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &decay);
        if (!e) e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
        if (e) {
            fulmen_scheduler_free(sched);
            fulmen_scheduler_free(decay);
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add_scheduler(config, 0, decay, FULMEN_INTERVAL_EPOCH, 1, NULL);
        if (e) fulmen_scheduler_free(decay);
        return e;
    } else if (strcmp(job->config, "restarts") == 0 || strcmp(job->config, "cyclic") == 0 ||
               strcmp(job->config, "lambda") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        if (strcmp(job->config, "restarts") == 0) {
            e = fulmen_scheduler_cosine_warm_restarts_new(opt, 3, 2, 0.001, &sched);
        } else if (strcmp(job->config, "lambda") == 0) {
            e = fulmen_scheduler_lambda_lr_new(opt, decay, NULL, NULL, &sched);
        } else {
            fulmen_cyclic_lr_options c = fulmen_cyclic_lr_options_default(0.01, 0.1);
            c.step_size_up = 4;
            c.mode = FULMEN_CYCLIC_MODE_EXP_RANGE;
            c.gamma = 0.99;
            e = fulmen_scheduler_cyclic_lr_new(opt, &c, &sched);
        }
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    } else if (strcmp(job->config, "onecycle") == 0) {
        fulmen_adam_options o = fulmen_adam_options_default();
        o.lr = 0.01;
        e = fulmen_optimizer_adam_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        fulmen_one_cycle_options c = fulmen_one_cycle_options_default(0.02, 44);
        e = fulmen_scheduler_one_cycle_lr_new(opt, &c, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    } else if (strcmp(job->config, "lr_find") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        sched = NULL;
        e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    } else if (strcmp(job->config, "cyclic_groups") == 0) {
        e = weights_then_biases(job->model, 's', 0.2, &opt);
        if (e) return e;
        fulmen_cyclic_lr_options c = fulmen_cyclic_lr_options_default(0.01, 0.1);
        c.step_size_up = 4;
        c.mode = FULMEN_CYCLIC_MODE_EXP_RANGE;
        c.gamma = 0.99;
        const double lower[2] = {0.01, 0.02}, upper[2] = {0.1, 0.05};
        e = fulmen_scheduler_cyclic_lr_ranges_new(opt, &c, lower, 2, upper, 2, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    } else if (strcmp(job->config, "onecycle_groups") == 0) {
        e = weights_then_biases(job->model, 'a', -1, &opt);
        fulmen_one_cycle_options c = fulmen_one_cycle_options_default(0.02, 44);
        const double peaks[2] = {0.02, 0.05};
        if (!e) e = fulmen_scheduler_one_cycle_lr_max_lrs_new(opt, &c, peaks, 2, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 1, NULL);
    } else if (strcmp(job->config, "plateau_groups") == 0) {
        e = weights_then_biases(job->model, 's', 0.2, &opt);
        if (e) return e;
        fulmen_plateau_options p = fulmen_plateau_options_default();
        p.factor = 0.5;
        p.patience = 0;
        const double min_lrs[2] = {0.07, 0.15};
        e = fulmen_scheduler_reduce_on_plateau_min_lrs_new(opt, &p, min_lrs, 2, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, "val_loss");
    } else if (strcmp(job->config, "groups") == 0 || strcmp(job->config, "fused") == 0 ||
               strcmp(job->config, "fused_adagrad") == 0 || strcmp(job->config, "foreach") == 0 ||
               is_foreach_variant(job->config)) {
        if (strcmp(job->config, "groups") == 0) {
            e = adamw_groups(job->model, &opt);
        } else if (is_foreach_variant(job->config)) {
            e = foreach_variant(job->model, job->config, &opt);
        } else if (strcmp(job->config, "fused_adagrad") == 0) {
            fulmen_adagrad_options o = fulmen_adagrad_options_default();
            o.lr = 0.05;
            o.lr_decay = 0.01;
            o.initial_accumulator_value = 0.1;
            e = fulmen_optimizer_adagrad_new(job->model, NULL, 0, &o, &opt);
            if (!e) e = fulmen_optimizer_set_fused(opt, true);
            if (e) fulmen_optimizer_free(opt);
        } else {
            fulmen_adam_options o = fulmen_adamw_options_default();
            o.lr = 0.01;
            o.weight_decay = 0.01;
            o.amsgrad = strcmp(job->config, "foreach") == 0;
            e = fulmen_optimizer_adamw_new(job->model, NULL, 0, &o, &opt);
            if (!e && strcmp(job->config, "foreach") == 0) {
                e = fulmen_optimizer_set_foreach(opt, FULMEN_FOREACH_ON);
            } else if (!e) {
                e = fulmen_optimizer_set_fused(opt, true);
            }
            if (e) fulmen_optimizer_free(opt);
        }
        if (e) return e;
        e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
    } else if (strcmp(job->config, "skips") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        e = fulmen_scheduler_step_lr_new(opt, 2, 0.7, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 3, NULL);
    } else if (strcmp(job->config, "steplr") == 0 || strcmp(job->config, "fused_sgd") == 0 ||
               strcmp(job->config, "foreach_sgd") == 0 || is_backbone(job->config) ||
               is_custom_optimization(job->config)) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        o.momentum = 0.9;
        o.nesterov = strcmp(job->config, "foreach_sgd") == 0;
        if (is_backbone(job->config)) {
            /* filter(lambda p: p.requires_grad, self.parameters()) */
            fulmen_tensor *trainable[4] = {NULL, NULL, NULL, NULL};
            size_t n = 0;
            e = fulmen_model_parameters(job->model, true, trainable, 4, &n);
            if (!e) e = fulmen_optimizer_sgd_new(NULL, (const fulmen_tensor *const *)trainable, n, &o, &opt);
            for (size_t i = 0; i < n && i < 4; i++) fulmen_tensor_free(trainable[i]);
        } else {
            e = fulmen_optimizer_sgd_new(job->model, NULL, 0, &o, &opt);
        }
        if (!e && strcmp(job->config, "fused_sgd") == 0) e = fulmen_optimizer_set_fused(opt, true);
        if (!e && strcmp(job->config, "foreach_sgd") == 0) e = fulmen_optimizer_set_foreach(opt, FULMEN_FOREACH_ON);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
    } else {
        fulmen_adam_options o = fulmen_adam_options_default();
        o.lr = 0.01;
        e = fulmen_optimizer_adam_new(job->model, NULL, 0, &o, &opt);
        if (e) return e;
        e = fulmen_scheduler_step_lr_new(opt, 2, 0.7, &sched);
        if (e) {
            fulmen_optimizer_free(opt);
            return e;
        }
        e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_STEP, 3, NULL);
    }
    if (e) {
        fulmen_scheduler_free(sched);
        fulmen_optimizer_free(opt);
    }
    return e;
}

static void *read_file(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "lightning_parity: cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

static void set(fulmen_trainer_options *opts, const char *key, const char *value) {
    TRY(fulmen_trainer_options_set(opts, key, value));
}

int main(int argc, char **argv) {
    if (argc < 9 || argc > 13) {
        fprintf(stderr, "usage: lightning_parity CONFIG INIT DATA_X DATA_Y SAMPLES BATCH EPOCHS LOSSES "
                        "[CKPT_DIR [RESUME [FORMAT [EVERY_N_TRAIN_STEPS]]]]\n");
        return 2;
    }
    struct job job = {.config = argv[1]};
    bool averaging = strcmp(job.config, "ema") == 0 || strcmp(job.config, "swa") == 0;
    job.val_losses = averaging;
    bool reload = strcmp(job.config, "reload") == 0;
    bool validating = strcmp(job.config, "plateau") == 0 || strcmp(job.config, "plateau_groups") == 0 ||
                      averaging || reload;
    if (strcmp(job.config, "steplr") != 0 && strcmp(job.config, "stepfreq") != 0 &&
        strcmp(job.config, "warmup_cosine") != 0 && strcmp(job.config, "restarts") != 0 &&
        strcmp(job.config, "cyclic") != 0 && strcmp(job.config, "lambda") != 0 && strcmp(job.config, "lr_find") != 0 &&
        strcmp(job.config, "onecycle") != 0 && strcmp(job.config, "chained") != 0 &&
        strcmp(job.config, "two_schedulers") != 0 && strcmp(job.config, "groups") != 0 &&
        strcmp(job.config, "onecycle_groups") != 0 && strcmp(job.config, "cyclic_groups") != 0 &&
        strcmp(job.config, "lbfgs") != 0 && strcmp(job.config, "lbfgs_wolfe") != 0 &&
        strcmp(job.config, "lbfgs_manual") != 0 && strcmp(job.config, "fused") != 0 &&
        strcmp(job.config, "fused_sgd") != 0 && strcmp(job.config, "fused_adagrad") != 0 &&
        strcmp(job.config, "foreach") != 0 && strcmp(job.config, "foreach_sgd") != 0 &&
        !is_foreach_variant(job.config) && !is_backbone(job.config) && strcmp(job.config, "skips") != 0 &&
        !is_custom_optimization(job.config) && !validating) {
        fprintf(stderr, "lightning_parity: unknown configuration %s\n", job.config);
        return 2;
    }
    size_t samples = strtoull(argv[5], NULL, 10);
    TRY(fulmen_set_num_threads(1));
    job.model = build();
    TRY(fulmen_model_load(job.model, argv[2], true));
    job.losses = fopen(argv[8], "a");
    if (!job.losses) {
        fprintf(stderr, "lightning_parity: cannot open %s\n", argv[8]);
        return 1;
    }

    size_t rows = samples + VAL_ROWS;
    float *xs = read_file(argv[3], rows * FEATURES * sizeof(float));
    int64_t *ys = read_file(argv[4], rows * sizeof(int64_t));
    int64_t xshape[2] = {(int64_t)rows, FEATURES}, yshape[1] = {(int64_t)rows};
    fulmen_tensor *all_x, *all_y, *x, *y;
    TRY(fulmen_tensor_from_data(xs, rows * FEATURES * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &all_x));
    TRY(fulmen_tensor_from_data(ys, rows * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &all_y));
    free(xs);
    free(ys);
    TRY(fulmen_tensor_narrow(all_x, 0, 0, (int64_t)samples, &x));
    TRY(fulmen_tensor_narrow(all_y, 0, 0, (int64_t)samples, &y));
    const fulmen_tensor *columns[2] = {x, y};
    fulmen_dataset *data;
    fulmen_loader *loader;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = strtoull(argv[6], NULL, 10);
    TRY(fulmen_dataset_from_tensors(columns, 2, &data));
    TRY(fulmen_loader_new(data, &lo, &loader));
    fulmen_tensor *vx, *vy;
    fulmen_dataset *val_data;
    fulmen_loader *val_loader;
    TRY(fulmen_tensor_narrow(all_x, 0, (int64_t)samples, VAL_ROWS, &vx));
    TRY(fulmen_tensor_narrow(all_y, 0, (int64_t)samples, VAL_ROWS, &vy));
    const fulmen_tensor *val_columns[2] = {vx, vy};
    TRY(fulmen_dataset_from_tensors(val_columns, 2, &val_data));
    TRY(fulmen_loader_new(val_data, &lo, &val_loader));

    bool manual = strcmp(job.config, "lbfgs_manual") == 0;
    job.batches_per_epoch = (int64_t)((samples + lo.batch_size - 1) / lo.batch_size);
    job.all_x = all_x;
    job.all_y = all_y;
    job.samples = samples;
    job.batch_size = lo.batch_size;
    fulmen_module_vtable vt = {.struct_size = sizeof vt,
                               .userdata = &job,
                               .training_step = manual ? manual_step : training_step,
                               .validation_step = validating ? validation_step : NULL,
                               .configure_optimizers = configure_optimizers,
                               .on_hook = strcmp(job.config, "skips") == 0 ? skips_hook : NULL,
                               .train_dataloader = reload ? train_dataloader : NULL,
                               .val_dataloader = reload ? val_dataloader : NULL};
    if (strcmp(job.config, "step_even") == 0 || strcmp(job.config, "warmup") == 0) vt.optimizer_step = optimizer_step;
    if (strcmp(job.config, "clip_after_first") == 0) vt.configure_gradient_clipping = clip_after_first;
    if (strcmp(job.config, "custom_scheduler") == 0) vt.lr_scheduler_step = even_epoch_scheduler;
    fulmen_lightning_module *module;
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    TRY(fulmen_lightning_module_new(&vt, job.model, &module));
    TRY(fulmen_lightning_module_set_automatic_optimization(module, !manual));
    TRY(fulmen_trainer_options_new(&opts));
    set(opts, "max_epochs", argv[7]);
    set(opts, "accelerator", "cpu");
    set(opts, "devices", "1");
    set(opts, "enable_progress_bar", "false");
    set(opts, "enable_model_summary", "false");
    set(opts, "logger", "false");
    set(opts, "handle_signals", "false");
    set(opts, "enable_checkpointing", argc > 9 ? "true" : "false");
    if (reload) set(opts, "reload_dataloaders_every_n_epochs", "2");
    if (argc > 11) {
        set(opts, "checkpoint_format", argv[11]);
        set(opts, "checkpoint_prefix", "model.");
    }
    if (validating) {
        set(opts, "gradient_clip_val", "1");
        set(opts, "gradient_clip_algorithm", "norm");
    } else if (strcmp(job.config, "lbfgs") == 0) {
        set(opts, "gradient_clip_val", "1");
        set(opts, "gradient_clip_algorithm", "norm");
    } else if (strcmp(job.config, "steplr") == 0 || strcmp(job.config, "fused_sgd") == 0 ||
               strcmp(job.config, "foreach_sgd") == 0 || is_backbone(job.config) ||
               strcmp(job.config, "skips") == 0 ||
               (is_custom_optimization(job.config) && strcmp(job.config, "clip_after_first") != 0)) {
        set(opts, "gradient_clip_val", "0.5");
        set(opts, "gradient_clip_algorithm", "norm");
    } else if (strcmp(job.config, "stepfreq") == 0) {
        set(opts, "gradient_clip_val", "0.05");
        set(opts, "gradient_clip_algorithm", "value");
        set(opts, "accumulate_grad_batches", "2");
    }
    TRY(fulmen_trainer_new(opts, &trainer));
    if (averaging) {
        fulmen_weight_averaging_options wa = fulmen_weight_averaging_options_default();
        if (strcmp(job.config, "ema") == 0) {
            wa.decay = 0.9;
            wa.update_every_n_steps = 2;
            wa.update_starting_at_step = 3;
            wa.update_starting_at_epoch = 2;
        } else {
            wa.ema = false;
        }
        TRY(fulmen_trainer_add_weight_averaging(trainer, &wa));
    }
    if (is_backbone(job.config)) {
        fulmen_backbone_finetuning_options bf = fulmen_backbone_finetuning_options_default();
        bf.backbone = "0";
        bf.unfreeze_backbone_at_epoch = 1;
        if (strcmp(job.config, "backbone_lambda") == 0) {
            TRY(fulmen_trainer_add_backbone_finetuning_lambda(trainer, &bf, backbone_lambda, NULL, NULL));
        } else {
            TRY(fulmen_trainer_add_backbone_finetuning(trainer, &bf));
        }
    }
    if (argc > 9) {
        fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
        mc.dirpath = argv[9];
        mc.filename = "{epoch}";
        mc.save_top_k = -1;
        if (argc > 12) {
            mc.filename = "{step}";
            mc.every_n_train_steps = strtoll(argv[12], NULL, 10);
            mc.every_n_epochs = 0;
        }
        TRY(fulmen_trainer_add_model_checkpoint(trainer, &mc));
    }
    if (strcmp(job.config, "lr_find") == 0) {
        /* The range test alone; the losses file gets its points. */
        fulmen_lr_find_options lo = fulmen_lr_find_options_default();
        lo.min_lr = 1e-5;
        lo.num_training = 30;
        fulmen_lr_find_result *found = NULL;
        double lrs[64], smoothed[64], suggestion = 0;
        size_t n = 0;
        bool has = false;
        job.losses_off = true;
        TRY(fulmen_trainer_lr_find(trainer, module, loader, NULL, &lo, &found));
        TRY(fulmen_lr_find_result_points(found, lrs, smoothed, 64, &n));
        TRY(fulmen_lr_find_result_suggestion(found, 10, 1, &suggestion, &has));
        for (size_t i = 0; i < n; i++) fprintf(job.losses, "%.17g %.17g\n", lrs[i], smoothed[i]);
        if (has) fprintf(job.losses, "suggestion %.17g\n", suggestion);
        fulmen_lr_find_result_free(found);
    } else {
        /* reload: no loaders, the module's hooks give them. */
        TRY(fulmen_trainer_fit(trainer, module, reload ? NULL : loader, validating && !reload ? val_loader : NULL,
                               argc > 10 && strcmp(argv[10], "-") != 0 ? argv[10] : NULL));
        const char *refit = getenv("FULMEN_REFIT_EPOCHS");
        if (refit != NULL && refit[0] != '\0') {
            /* Lightning's trainer.fit_loop.max_epochs = N and another fit,
             * going on from this one; then a third at that limit, which
             * trains nothing. */
            TRY(fulmen_trainer_set_max_epochs(trainer, strtoll(refit, NULL, 10)));
            for (int again = 0; again < 2; again++)
                TRY(fulmen_trainer_fit(trainer, module, reload ? NULL : loader,
                                       validating && !reload ? val_loader : NULL, NULL));
        }
        const char *after = getenv("FULMEN_SAVE_AFTER_FIT");
        if (after != NULL && after[0] != '\0') TRY(fulmen_trainer_save_checkpoint(trainer, module, after, false));
    }
    fclose(job.losses);
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_loader_free(loader);
    fulmen_dataset_free(data);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(val_data);
    fulmen_tensor_free(vx);
    fulmen_tensor_free(vy);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(all_x);
    fulmen_tensor_free(all_y);
    fulmen_model_free(job.model);
    return fulmen_live_handles() == 0 ? 0 : 1;
}

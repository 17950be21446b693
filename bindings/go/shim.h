/* C side of the Go binding: builds the callback vtables whose slots are
 * the Go trampolines of callbacks.go. The userdata is a cgo.Handle. */
#ifndef FULMEN_GO_SHIM_H
#define FULMEN_GO_SHIM_H

#include <stdbool.h>
#include <stdint.h>
#include <fulmen.h>

/* Which module slots the Go module implements. */
enum {
    FULMEN_GO_TRAINING_STEP = 1,
    FULMEN_GO_VALIDATION_STEP = 2,
    FULMEN_GO_TEST_STEP = 4,
    FULMEN_GO_PREDICT_STEP = 8,
    FULMEN_GO_CONFIGURE_OPTIMIZERS = 16,
    FULMEN_GO_ON_HOOK = 32,
    FULMEN_GO_TRAIN_DATALOADER = 64,
    FULMEN_GO_VAL_DATALOADER = 128,
    FULMEN_GO_TEST_DATALOADER = 256,
    FULMEN_GO_PREDICT_DATALOADER = 512,
    FULMEN_GO_OPTIMIZER_STEP = 1024,
    FULMEN_GO_OPTIMIZER_ZERO_GRAD = 2048,
    FULMEN_GO_LR_SCHEDULER_STEP = 4096,
    FULMEN_GO_BACKWARD = 8192,
    FULMEN_GO_CONFIGURE_GRADIENT_CLIPPING = 16384,
    FULMEN_GO_VALIDATION_STEP_OUTPUT = 32768,
    FULMEN_GO_TEST_STEP_OUTPUT = 65536,
    FULMEN_GO_CONFIGURE_MODEL = 131072,
    FULMEN_GO_CONFIGURE_CALLBACKS = 262144
};

/* Which datamodule slots the Go datamodule implements (prepare_data,
 * setup and teardown always). */
enum {
    FULMEN_GO_DM_TRAIN = 1,
    FULMEN_GO_DM_VAL = 2,
    FULMEN_GO_DM_TEST = 4,
    FULMEN_GO_DM_PREDICT = 8,
    FULMEN_GO_DM_STATE = 16
};

fulmen_error *fulmen_go_datamodule_new(uintptr_t handle, unsigned slots, const char *name,
                                       fulmen_datamodule **out);

fulmen_error *fulmen_go_module_new(uintptr_t handle, unsigned slots, const fulmen_model *model,
                                   fulmen_lightning_module **out);
fulmen_error *fulmen_go_dataset_from_source(uintptr_t handle, bool any_thread, fulmen_dataset **out);
fulmen_error *fulmen_go_loader_from_iterator(uintptr_t handle, bool has_reset, int64_t num_batches,
                                             fulmen_loader **out);
fulmen_error *fulmen_go_trainer_add_callback(fulmen_trainer *trainer, const char *name, uintptr_t handle);
fulmen_error *fulmen_go_callback_list_add(fulmen_callback_list *list, const char *name, uintptr_t handle);
fulmen_error *fulmen_go_trainer_add_logger(fulmen_trainer *trainer, uintptr_t handle);
/* fulmen_trainer_set_checkpoint_io over a Go CheckpointIO. */
fulmen_error *fulmen_go_trainer_set_checkpoint_io(fulmen_trainer *trainer, uintptr_t handle);
/* collectives_name NULL: no collectives hook. */
fulmen_error *fulmen_go_accelerator_register(const char *name, const char *description, uintptr_t handle,
                                             bool has_parse_devices, bool override_existing,
                                             const char *collectives_name, bool has_synchronize,
                                             bool has_rng_state);

fulmen_error *fulmen_go_host_module_new(uintptr_t handle, size_t num_outputs, fulmen_model **out);

/* Which host optimizer slots the Go optimizer implements (step always). */
enum {
    FULMEN_GO_OPT_ZERO_GRAD = 1,
    FULMEN_GO_OPT_STATE = 2
};

/* fulmen_optimizer_host_new over a Go HostOptimizer. */
fulmen_error *fulmen_go_host_optimizer_new(uintptr_t handle, unsigned slots, const fulmen_model *model,
                                           const fulmen_tensor *const *params, size_t n_params, double lr,
                                           fulmen_optimizer **out);

/* LambdaLR (multiplicative false) or MultiplicativeLR over a Go factor. */
fulmen_error *fulmen_go_lambda_scheduler_new(fulmen_optimizer *optimizer, uintptr_t handle, bool multiplicative,
                                             fulmen_scheduler **out);

/* fulmen_trainer_add_backbone_finetuning_lambda over a Go lambda_func. */
fulmen_error *fulmen_go_add_backbone_finetuning_lambda(fulmen_trainer *trainer,
                                                       const fulmen_backbone_finetuning_options *options,
                                                       uintptr_t handle);

/* fulmen_trainer_add_prediction_writer over a Go PredictionWriter (each
 * function only when the Go writer has it). */
fulmen_error *fulmen_go_add_prediction_writer(fulmen_trainer *trainer, const char *write_interval, bool on_batch,
                                              bool on_epoch, uintptr_t handle);

/* fulmen_trainer_add_prediction_value_writer over a Go
 * PredictionValueWriter (each function only when the Go writer has it). */
fulmen_error *fulmen_go_add_prediction_value_writer(fulmen_trainer *trainer, const char *write_interval,
                                                    bool on_batch, bool on_epoch, uintptr_t handle);

/* The fulmen_callback_list_ forms of the three above, for ConfigureCallbacks. */
fulmen_error *fulmen_go_callback_list_add_backbone_finetuning_lambda(fulmen_callback_list *list,
                                                                     const fulmen_backbone_finetuning_options *options,
                                                                     uintptr_t handle);
fulmen_error *fulmen_go_callback_list_add_prediction_writer(fulmen_callback_list *list, const char *write_interval,
                                                            bool on_batch, bool on_epoch, uintptr_t handle);
fulmen_error *fulmen_go_callback_list_add_prediction_value_writer(fulmen_callback_list *list,
                                                                  const char *write_interval, bool on_batch,
                                                                  bool on_epoch, uintptr_t handle);

/* fulmen_measure_flops over a Go function. */
fulmen_error *fulmen_go_measure_flops(uintptr_t handle, uint64_t *flops);
/* fulmen_measure_flops_by_module over a Go function. */
fulmen_error *fulmen_go_measure_flops_by_module(uintptr_t handle, fulmen_flop_counts **out);
/* fulmen_flops_register_formula with the cgo.Handle of a FlopFormula. */
fulmen_error *fulmen_go_register_flop_formula(const char *op, uintptr_t handle);

/* fulmen_optimizer_step_closure over a Go closure. */
fulmen_error *fulmen_go_step_closure(fulmen_optimizer *optimizer, uintptr_t handle, double *loss);
fulmen_error *fulmen_go_step_context_closure(fulmen_step_context *ctx, size_t optimizer, uintptr_t handle, double *loss,
                                             bool *made);

#endif

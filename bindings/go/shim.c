/* Adapters between the fulmen vtables and the Go trampolines exported by
 * callbacks.go: they turn the void* userdata into the uintptr_t cgo.Handle
 * and drop the const qualifiers Go cannot express. */
#include <string.h>

#include "shim.h"
#include "_cgo_export.h"

static void free_handle(void *ud) { fulmenGoFreeHandle((uintptr_t)ud); }

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    return fulmenGoTrainingStep((uintptr_t)ud, ctx, (fulmen_batch *)batch, out);
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return fulmenGoEvalStep((uintptr_t)ud, FULMEN_STAGE_VALIDATE, ctx, (fulmen_batch *)batch);
}

static fulmen_error *test_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    return fulmenGoEvalStep((uintptr_t)ud, FULMEN_STAGE_TEST, ctx, (fulmen_batch *)batch);
}

static fulmen_error *predict_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                  fulmen_tensor **out) {
    return fulmenGoPredictStep((uintptr_t)ud, ctx, (fulmen_batch *)batch, out);
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fulmenGoConfigureOptimizers((uintptr_t)ud, config);
}

static fulmen_error *module_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    return fulmenGoModuleHook((uintptr_t)ud, hook, ctx);
}

static fulmen_error *train_dataloader(void *ud, int64_t epoch, fulmen_loader **out) {
    return fulmenGoTrainDataloader((uintptr_t)ud, epoch, out);
}

static fulmen_error *val_dataloader(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    return fulmenGoValDataloader((uintptr_t)ud, epoch, out, capacity, n);
}

static fulmen_error *test_dataloader(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    return fulmenGoModuleEvalDataloader((uintptr_t)ud, FULMEN_STAGE_TEST, epoch, out, capacity, n);
}

static fulmen_error *predict_dataloader(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    return fulmenGoModuleEvalDataloader((uintptr_t)ud, FULMEN_STAGE_PREDICT, epoch, out, capacity, n);
}

static fulmen_error *optimizer_step(void *ud, fulmen_optimization_context *ctx, int64_t epoch, int64_t batch_idx,
                                    size_t optimizer_idx, fulmen_optimizer_closure *closure) {
    return fulmenGoOptimizerStep((uintptr_t)ud, ctx, epoch, batch_idx, optimizer_idx, closure);
}

static fulmen_error *optimizer_zero_grad(void *ud, fulmen_optimization_context *ctx, int64_t epoch, int64_t batch_idx,
                                         size_t optimizer_idx) {
    return fulmenGoOptimizerZeroGrad((uintptr_t)ud, ctx, epoch, batch_idx, optimizer_idx);
}

static fulmen_error *lr_scheduler_step(void *ud, fulmen_optimization_context *ctx, size_t scheduler_idx,
                                       const double *metric) {
    return fulmenGoLrSchedulerStep((uintptr_t)ud, ctx, scheduler_idx, (double *)metric);
}

static fulmen_error *module_backward(void *ud, fulmen_optimization_context *ctx, fulmen_tensor *loss) {
    return fulmenGoBackward((uintptr_t)ud, ctx, loss);
}

static fulmen_error *configure_gradient_clipping(void *ud, fulmen_optimization_context *ctx, size_t optimizer_idx,
                                                 double clip_val, int32_t algorithm) {
    return fulmenGoConfigureGradientClipping((uintptr_t)ud, ctx, optimizer_idx, clip_val, algorithm);
}

static fulmen_error *validation_step_output(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                            fulmen_tensor **out) {
    return fulmenGoEvalStepOutput((uintptr_t)ud, FULMEN_STAGE_VALIDATE, ctx, (fulmen_batch *)batch, out);
}

static fulmen_error *test_step_output(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                      fulmen_tensor **out) {
    return fulmenGoEvalStepOutput((uintptr_t)ud, FULMEN_STAGE_TEST, ctx, (fulmen_batch *)batch, out);
}

static fulmen_error *configure_model(void *ud, int32_t device_type, int64_t device_index) {
    return fulmenGoConfigureModel((uintptr_t)ud, device_type, device_index);
}

static fulmen_error *configure_callbacks(void *ud, fulmen_callback_list *list) {
    return fulmenGoConfigureCallbacks((uintptr_t)ud, list);
}

fulmen_error *fulmen_go_module_new(uintptr_t handle, unsigned slots, const fulmen_model *model,
                                   fulmen_lightning_module **out) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    if (slots & FULMEN_GO_TRAINING_STEP) vt.training_step = training_step;
    if (slots & FULMEN_GO_VALIDATION_STEP) vt.validation_step = validation_step;
    if (slots & FULMEN_GO_TEST_STEP) vt.test_step = test_step;
    if (slots & FULMEN_GO_PREDICT_STEP) vt.predict_step = predict_step;
    if (slots & FULMEN_GO_CONFIGURE_OPTIMIZERS) vt.configure_optimizers = configure_optimizers;
    if (slots & FULMEN_GO_ON_HOOK) vt.on_hook = module_hook;
    if (slots & FULMEN_GO_TRAIN_DATALOADER) vt.train_dataloader = train_dataloader;
    if (slots & FULMEN_GO_VAL_DATALOADER) vt.val_dataloader = val_dataloader;
    if (slots & FULMEN_GO_TEST_DATALOADER) vt.test_dataloader = test_dataloader;
    if (slots & FULMEN_GO_PREDICT_DATALOADER) vt.predict_dataloader = predict_dataloader;
    if (slots & FULMEN_GO_OPTIMIZER_STEP) vt.optimizer_step = optimizer_step;
    if (slots & FULMEN_GO_OPTIMIZER_ZERO_GRAD) vt.optimizer_zero_grad = optimizer_zero_grad;
    if (slots & FULMEN_GO_LR_SCHEDULER_STEP) vt.lr_scheduler_step = lr_scheduler_step;
    if (slots & FULMEN_GO_BACKWARD) vt.backward = module_backward;
    if (slots & FULMEN_GO_CONFIGURE_GRADIENT_CLIPPING) vt.configure_gradient_clipping = configure_gradient_clipping;
    if (slots & FULMEN_GO_VALIDATION_STEP_OUTPUT) vt.validation_step_output = validation_step_output;
    if (slots & FULMEN_GO_TEST_STEP_OUTPUT) vt.test_step_output = test_step_output;
    if (slots & FULMEN_GO_CONFIGURE_MODEL) vt.configure_model = configure_model;
    if (slots & FULMEN_GO_CONFIGURE_CALLBACKS) vt.configure_callbacks = configure_callbacks;
    return fulmen_lightning_module_new(&vt, model, out);
}

static fulmen_error *dm_prepare_data(void *ud) { return fulmenGoDataModulePrepare((uintptr_t)ud); }

static fulmen_error *dm_setup(void *ud, const char *stage) {
    return fulmenGoDataModuleStage((uintptr_t)ud, 0, (char *)stage);
}

static fulmen_error *dm_teardown(void *ud, const char *stage) {
    return fulmenGoDataModuleStage((uintptr_t)ud, 1, (char *)stage);
}

static fulmen_error *dm_train(void *ud, int64_t epoch, fulmen_loader **out) {
    return fulmenGoDataModuleTrain((uintptr_t)ud, epoch, out);
}

static fulmen_error *dm_val(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    return fulmenGoDataModuleEval((uintptr_t)ud, FULMEN_STAGE_VALIDATE, epoch, out, capacity, n);
}

static fulmen_error *dm_test(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    return fulmenGoDataModuleEval((uintptr_t)ud, FULMEN_STAGE_TEST, epoch, out, capacity, n);
}

static fulmen_error *dm_predict(void *ud, int64_t epoch, fulmen_loader **out, size_t capacity, size_t *n) {
    return fulmenGoDataModuleEval((uintptr_t)ud, FULMEN_STAGE_PREDICT, epoch, out, capacity, n);
}

static fulmen_error *dm_state_dict(void *ud, const uint8_t **data, size_t *len) {
    return fulmenGoDataModuleStateDict((uintptr_t)ud, (uint8_t **)data, len);
}

static fulmen_error *dm_load_state_dict(void *ud, const uint8_t *data, size_t len) {
    return fulmenGoDataModuleLoadStateDict((uintptr_t)ud, (uint8_t *)data, len);
}

fulmen_error *fulmen_go_datamodule_new(uintptr_t handle, unsigned slots, const char *name,
                                       fulmen_datamodule **out) {
    fulmen_datamodule_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.prepare_data = dm_prepare_data;
    vt.setup = dm_setup;
    vt.teardown = dm_teardown;
    if (slots & FULMEN_GO_DM_TRAIN) vt.train_dataloader = dm_train;
    if (slots & FULMEN_GO_DM_VAL) vt.val_dataloader = dm_val;
    if (slots & FULMEN_GO_DM_TEST) vt.test_dataloader = dm_test;
    if (slots & FULMEN_GO_DM_PREDICT) vt.predict_dataloader = dm_predict;
    if (slots & FULMEN_GO_DM_STATE) {
        vt.state_dict = dm_state_dict;
        vt.load_state_dict = dm_load_state_dict;
    }
    return fulmen_datamodule_new(&vt, name, out);
}

static fulmen_error *source_len(void *ud, size_t *len_out) { return fulmenGoSourceLen((uintptr_t)ud, len_out); }

static fulmen_error *source_get_batch(void *ud, const int64_t *indices, size_t n, fulmen_batch_builder *batch) {
    return fulmenGoSourceGetBatch((uintptr_t)ud, (int64_t *)indices, n, batch);
}

fulmen_error *fulmen_go_dataset_from_source(uintptr_t handle, bool any_thread, fulmen_dataset **out) {
    fulmen_data_source_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.len = source_len;
    vt.get_batch = source_get_batch;
    vt.any_thread = any_thread;
    return fulmen_dataset_from_source(&vt, out);
}

static fulmen_error *iterator_reset(void *ud, uint64_t epoch) { return fulmenGoIteratorReset((uintptr_t)ud, epoch); }

static fulmen_error *iterator_next(void *ud, fulmen_batch_builder *batch, bool *done) {
    return fulmenGoIteratorNext((uintptr_t)ud, batch, done);
}

fulmen_error *fulmen_go_loader_from_iterator(uintptr_t handle, bool has_reset, int64_t num_batches,
                                             fulmen_loader **out) {
    fulmen_iterator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    if (has_reset) vt.reset = iterator_reset;
    vt.next = iterator_next;
    vt.num_batches = num_batches;
    return fulmen_loader_from_iterator(&vt, out);
}

static fulmen_error *callback_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    return fulmenGoCallbackHook((uintptr_t)ud, hook, ctx);
}

/* The vtable of the Go Callback behind `handle`. */
static fulmen_callback_vtable callback_vtable(uintptr_t handle) {
    fulmen_callback_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.on_hook = callback_hook;
    return vt;
}

fulmen_error *fulmen_go_callback_list_add(fulmen_callback_list *list, const char *name, uintptr_t handle) {
    fulmen_callback_vtable vt = callback_vtable(handle);
    return fulmen_callback_list_add(list, name, &vt);
}

fulmen_error *fulmen_go_trainer_add_callback(fulmen_trainer *trainer, const char *name, uintptr_t handle) {
    fulmen_callback_vtable vt = callback_vtable(handle);
    return fulmen_trainer_add_callback(trainer, name, &vt);
}

static fulmen_error *log_metrics(void *ud, const char *const *names, const double *values, size_t n, int64_t epoch,
                                 int64_t step) {
    return fulmenGoLogMetrics((uintptr_t)ud, (char **)names, (double *)values, n, epoch, step);
}

static fulmen_error *log_hyperparams(void *ud, const char *const *keys, const char *const *values, size_t n) {
    return fulmenGoLogHyperparams((uintptr_t)ud, (char **)keys, (char **)values, n);
}

static fulmen_error *logger_finalize(void *ud, const char *status) {
    return fulmenGoLoggerFinalize((uintptr_t)ud, (char *)status);
}

static fulmen_error *logger_after_save_checkpoint(void *ud, const char *path) {
    return fulmenGoLoggerAfterSaveCheckpoint((uintptr_t)ud, (char *)path);
}

fulmen_error *fulmen_go_trainer_add_logger(fulmen_trainer *trainer, uintptr_t handle) {
    fulmen_logger_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.log_metrics = log_metrics;
    vt.log_hyperparams = log_hyperparams;
    vt.finalize = logger_finalize;
    vt.after_save_checkpoint = logger_after_save_checkpoint;
    return fulmen_trainer_add_logger(trainer, &vt);
}

static fulmen_error *ckpt_io_save(void *ud, const uint8_t *bytes, size_t len, const char *path) {
    return fulmenGoCheckpointSave((uintptr_t)ud, (uint8_t *)bytes, len, (char *)path);
}

static fulmen_error *ckpt_io_load(void *ud, const char *path, uint8_t *buffer, size_t capacity, size_t *out_len) {
    return fulmenGoCheckpointLoad((uintptr_t)ud, (char *)path, buffer, capacity, out_len);
}

static fulmen_error *ckpt_io_remove(void *ud, const char *path) {
    return fulmenGoCheckpointRemove((uintptr_t)ud, (char *)path);
}

fulmen_error *fulmen_go_trainer_set_checkpoint_io(fulmen_trainer *trainer, uintptr_t handle) {
    fulmen_checkpoint_io_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.save = ckpt_io_save;
    vt.load = ckpt_io_load;
    vt.remove = ckpt_io_remove;
    return fulmen_trainer_set_checkpoint_io(trainer, &vt);
}

static fulmen_error *acc_is_available(void *ud, bool *out) { return fulmenGoAccIsAvailable((uintptr_t)ud, out); }

static fulmen_error *acc_auto_device_count(void *ud, size_t *out) {
    return fulmenGoAccAutoDeviceCount((uintptr_t)ud, out);
}

static fulmen_error *acc_parse_devices(void *ud, const char *devices, int64_t *ids, size_t capacity,
                                       size_t *n_out) {
    return fulmenGoAccParseDevices((uintptr_t)ud, (char *)devices, ids, capacity, n_out);
}

static fulmen_error *acc_get_parallel_devices(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    return fulmenGoAccParallelDevices((uintptr_t)ud, (int64_t *)ids, n, out);
}

static fulmen_error *acc_setup_device(void *ud, fulmen_device device) {
    return fulmenGoAccSetupDevice((uintptr_t)ud, device.device_type, device.index);
}

static fulmen_error *acc_teardown(void *ud) { return fulmenGoAccTeardown((uintptr_t)ud); }

static fulmen_error *acc_get_device_stats(void *ud, fulmen_device device, fulmen_stats_builder *stats) {
    return fulmenGoAccDeviceStats((uintptr_t)ud, device.device_type, device.index, stats);
}

static fulmen_error *acc_supports_dtype(void *ud, int32_t dtype, bool *out) {
    return fulmenGoAccSupportsDType((uintptr_t)ud, dtype, out);
}

static fulmen_error *acc_fp16_needs_loss_scaling(void *ud, bool *out) {
    return fulmenGoAccFP16NeedsLossScaling((uintptr_t)ud, out);
}

static fulmen_error *coll_open(void *ud, const fulmen_dist_store *store, int32_t rank, int32_t world,
                               fulmen_device device, void **group_out) {
    uintptr_t g = 0;
    fulmen_error *e = fulmenGoCollOpen((uintptr_t)ud, (fulmen_dist_store *)store, rank, world, device.device_type,
                                       device.index, &g);
    if (e == NULL) *group_out = (void *)g;
    return e;
}

static void coll_close(void *ud, void *group) {
    (void)ud;
    fulmenGoCollClose((uintptr_t)group);
}

static fulmen_error *coll_all_reduce(void *ud, void *group, fulmen_tensor *const *tensors, size_t n, int32_t op) {
    (void)ud;
    return fulmenGoCollAllReduce((uintptr_t)group, (fulmen_tensor **)tensors, n, op);
}

static fulmen_error *coll_broadcast(void *ud, void *group, fulmen_tensor *const *tensors, size_t n, int32_t root) {
    (void)ud;
    return fulmenGoCollBroadcast((uintptr_t)group, (fulmen_tensor **)tensors, n, root);
}

static fulmen_error *coll_all_gather(void *ud, void *group, const fulmen_tensor *input,
                                     fulmen_tensor *const *outputs, size_t n) {
    (void)ud;
    return fulmenGoCollAllGather((uintptr_t)group, (fulmen_tensor *)input, (fulmen_tensor **)outputs, n);
}

static fulmen_error *coll_barrier(void *ud, void *group) {
    (void)ud;
    return fulmenGoCollBarrier((uintptr_t)group);
}

static fulmen_error *coll_reduce_scatter(void *ud, void *group, const fulmen_tensor *input, fulmen_tensor *output,
                                         int32_t op) {
    (void)ud;
    return fulmenGoCollReduceScatter((uintptr_t)group, (fulmen_tensor *)input, output, op);
}

static fulmen_error *acc_synchronize(void *ud, fulmen_device device) {
    return fulmenGoAccSynchronize((uintptr_t)ud, device.device_type, device.index);
}

static fulmen_error *acc_get_rng_state(void *ud, fulmen_device device, uint8_t *buf, size_t capacity,
                                       size_t *len_out) {
    return fulmenGoAccRNGState((uintptr_t)ud, device.device_type, device.index, buf, capacity, len_out);
}

static fulmen_error *acc_set_rng_state(void *ud, fulmen_device device, const uint8_t *data, size_t len) {
    return fulmenGoAccSetRNGState((uintptr_t)ud, device.device_type, device.index, (uint8_t *)data, len);
}

fulmen_error *fulmen_go_accelerator_register(const char *name, const char *description, uintptr_t handle,
                                             bool has_parse_devices, bool override_existing,
                                             const char *collectives_name, bool has_synchronize,
                                             bool has_rng_state) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.is_available = acc_is_available;
    vt.auto_device_count = acc_auto_device_count;
    if (has_parse_devices) vt.parse_devices = acc_parse_devices;
    vt.get_parallel_devices = acc_get_parallel_devices;
    vt.setup_device = acc_setup_device;
    vt.teardown = acc_teardown;
    vt.get_device_stats = acc_get_device_stats;
    vt.supports_dtype = acc_supports_dtype;
    vt.fp16_needs_loss_scaling = acc_fp16_needs_loss_scaling;
    if (has_synchronize) vt.synchronize = acc_synchronize;
    if (has_rng_state) {
        vt.get_rng_state = acc_get_rng_state;
        vt.set_rng_state = acc_set_rng_state;
    }
    fulmen_collectives coll; /* copied by the registration */
    memset(&coll, 0, sizeof coll);
    if (collectives_name != NULL) {
        coll.struct_size = sizeof coll;
        coll.name = collectives_name;
        coll.group_new = coll_open;
        coll.group_free = coll_close;
        coll.all_reduce = coll_all_reduce;
        coll.broadcast = coll_broadcast;
        coll.all_gather = coll_all_gather;
        coll.barrier = coll_barrier;
        coll.reduce_scatter = coll_reduce_scatter;
        vt.collectives = &coll;
    }
    return fulmen_accelerator_register(name, description, &vt, override_existing);
}

static fulmen_error *host_forward(void *ud, fulmen_host_call *call, const fulmen_tensor *const *inputs, size_t n,
                                  fulmen_tensor **outs) {
    return fulmenGoHostForward((uintptr_t)ud, call, (fulmen_tensor **)inputs, n, outs);
}

fulmen_error *fulmen_go_host_module_new(uintptr_t handle, size_t num_outputs, fulmen_model **out) {
    fulmen_host_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = free_handle;
    vt.num_outputs = num_outputs;
    vt.forward = host_forward;
    return fulmen_model_host_new(&vt, out);
}

static fulmen_error *lr_lambda(void *ud, int64_t epoch, size_t group, double *out) {
    return fulmenGoLrLambda((uintptr_t)ud, epoch, group, out);
}

fulmen_error *fulmen_go_lambda_scheduler_new(fulmen_optimizer *optimizer, uintptr_t handle, bool multiplicative,
                                             fulmen_scheduler **out) {
    if (multiplicative) {
        return fulmen_scheduler_multiplicative_lr_new(optimizer, lr_lambda, (void *)handle, free_handle, out);
    }
    return fulmen_scheduler_lambda_lr_new(optimizer, lr_lambda, (void *)handle, free_handle, out);
}

static fulmen_error *backbone_lambda(void *ud, int64_t epoch, double *out) {
    return fulmenGoBackboneLambda((uintptr_t)ud, epoch, out);
}

fulmen_error *fulmen_go_add_backbone_finetuning_lambda(fulmen_trainer *trainer,
                                                       const fulmen_backbone_finetuning_options *options,
                                                       uintptr_t handle) {
    return fulmen_trainer_add_backbone_finetuning_lambda(trainer, options, backbone_lambda, (void *)handle,
                                                         free_handle);
}

static fulmen_error *write_batch(void *ud, const fulmen_tensor *prediction, const int64_t *indices, size_t n_indices,
                                 const fulmen_tensor *const *batch, size_t batch_len, int64_t batch_idx,
                                 size_t dataloader_idx) {
    return fulmenGoWriteBatch((uintptr_t)ud, (fulmen_tensor *)prediction, (int64_t *)indices, n_indices,
                              (fulmen_tensor **)batch, batch_len, batch_idx, dataloader_idx);
}

static fulmen_error *write_epoch(void *ud, size_t dataloader_idx, const fulmen_tensor *const *predictions,
                                 size_t n_batches, const int64_t *indices, const size_t *counts) {
    return fulmenGoWriteEpoch((uintptr_t)ud, dataloader_idx, (fulmen_tensor **)predictions, n_batches,
                              (int64_t *)indices, (size_t *)counts);
}

fulmen_error *fulmen_go_add_prediction_writer(fulmen_trainer *trainer, const char *write_interval, bool on_batch,
                                              bool on_epoch, uintptr_t handle) {
    return fulmen_trainer_add_prediction_writer(trainer, write_interval, on_batch ? write_batch : NULL,
                                                on_epoch ? write_epoch : NULL, (void *)handle, free_handle);
}

static fulmen_error *write_value_batch(void *ud, const fulmen_value *prediction, const int64_t *indices,
                                       size_t n_indices, const fulmen_tensor *const *batch, size_t batch_len,
                                       int64_t batch_idx, size_t dataloader_idx) {
    return fulmenGoWriteValueBatch((uintptr_t)ud, (fulmen_value *)prediction, (int64_t *)indices, n_indices,
                                   (fulmen_tensor **)batch, batch_len, batch_idx, dataloader_idx);
}

static fulmen_error *write_value_epoch(void *ud, size_t dataloader_idx, const fulmen_value *predictions,
                                       size_t n_batches, const int64_t *indices, const size_t *counts) {
    return fulmenGoWriteValueEpoch((uintptr_t)ud, dataloader_idx, (fulmen_value *)predictions, n_batches,
                                   (int64_t *)indices, (size_t *)counts);
}

fulmen_error *fulmen_go_add_prediction_value_writer(fulmen_trainer *trainer, const char *write_interval,
                                                    bool on_batch, bool on_epoch, uintptr_t handle) {
    return fulmen_trainer_add_prediction_value_writer(trainer, write_interval, on_batch ? write_value_batch : NULL,
                                                      on_epoch ? write_value_epoch : NULL, (void *)handle,
                                                      free_handle);
}

fulmen_error *fulmen_go_callback_list_add_backbone_finetuning_lambda(fulmen_callback_list *list,
                                                                     const fulmen_backbone_finetuning_options *options,
                                                                     uintptr_t handle) {
    return fulmen_callback_list_add_backbone_finetuning_lambda(list, options, backbone_lambda, (void *)handle,
                                                               free_handle);
}

fulmen_error *fulmen_go_callback_list_add_prediction_writer(fulmen_callback_list *list, const char *write_interval,
                                                            bool on_batch, bool on_epoch, uintptr_t handle) {
    return fulmen_callback_list_add_prediction_writer(list, write_interval, on_batch ? write_batch : NULL,
                                                      on_epoch ? write_epoch : NULL, (void *)handle, free_handle);
}

fulmen_error *fulmen_go_callback_list_add_prediction_value_writer(fulmen_callback_list *list,
                                                                  const char *write_interval, bool on_batch,
                                                                  bool on_epoch, uintptr_t handle) {
    return fulmen_callback_list_add_prediction_value_writer(list, write_interval, on_batch ? write_value_batch : NULL,
                                                            on_epoch ? write_value_epoch : NULL, (void *)handle,
                                                            free_handle);
}

static fulmen_error *hopt_step(void *ud, const fulmen_optimizer_step_context *ctx) {
    return fulmenGoHostOptimizerStep((uintptr_t)ud, (fulmen_optimizer_step_context *)ctx);
}

static fulmen_error *hopt_zero_grad(void *ud, bool set_to_none) {
    return fulmenGoHostOptimizerZeroGrad((uintptr_t)ud, set_to_none ? 1 : 0);
}

static fulmen_error *hopt_state_dict(void *ud, const uint8_t **data, size_t *len) {
    return fulmenGoHostOptimizerStateDict((uintptr_t)ud, (uint8_t **)data, len);
}

static fulmen_error *hopt_load_state_dict(void *ud, const uint8_t *data, size_t len) {
    return fulmenGoHostOptimizerLoadStateDict((uintptr_t)ud, (uint8_t *)data, len);
}

static void hopt_free(void *ud) { fulmenGoHostOptimizerFree((uintptr_t)ud); }

fulmen_error *fulmen_go_host_optimizer_new(uintptr_t handle, unsigned slots, const fulmen_model *model,
                                           const fulmen_tensor *const *params, size_t n_params, double lr,
                                           fulmen_optimizer **out) {
    fulmen_optimizer_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = (void *)handle;
    vt.userdata_free = hopt_free;
    vt.step = hopt_step;
    if (slots & FULMEN_GO_OPT_ZERO_GRAD) vt.zero_grad = hopt_zero_grad;
    if (slots & FULMEN_GO_OPT_STATE) {
        vt.state_dict = hopt_state_dict;
        vt.load_state_dict = hopt_load_state_dict;
    }
    return fulmen_optimizer_host_new(&vt, model, params, n_params, lr, out);
}

static fulmen_error *measured(void *ud) { return fulmenGoMeasured((uintptr_t)ud); }

fulmen_error *fulmen_go_measure_flops(uintptr_t handle, uint64_t *flops) {
    return fulmen_measure_flops(measured, (void *)handle, flops);
}

fulmen_error *fulmen_go_measure_flops_by_module(uintptr_t handle, fulmen_flop_counts **out) {
    return fulmen_measure_flops_by_module(measured, (void *)handle, out);
}

static fulmen_error *flop_formula(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                                  const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    return fulmenGoFlopFormula((uintptr_t)ud, (char *)op, (fulmen_flop_value *)in, n_in, (fulmen_flop_value *)out,
                               n_out, flops);
}

fulmen_error *fulmen_go_register_flop_formula(const char *op, uintptr_t handle) {
    return fulmen_flops_register_formula(op, flop_formula, (void *)handle, free_handle);
}

static fulmen_error *step_closure(void *ud, double *loss) { return fulmenGoClosure((uintptr_t)ud, loss); }

fulmen_error *fulmen_go_step_closure(fulmen_optimizer *optimizer, uintptr_t handle, double *loss) {
    return fulmen_optimizer_step_closure(optimizer, step_closure, (void *)handle, loss);
}

static fulmen_error *step_context_closure(void *ud, fulmen_step_context *ctx, double *loss) {
    return fulmenGoStepContextClosure((uintptr_t)ud, ctx, loss);
}

fulmen_error *fulmen_go_step_context_closure(fulmen_step_context *ctx, size_t optimizer, uintptr_t handle, double *loss,
                                             bool *made) {
    return fulmen_step_context_optimizer_step_closure(ctx, optimizer, step_context_closure, (void *)handle, loss, made);
}

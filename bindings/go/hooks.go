package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"strconv"
	"unsafe"
)

// Hook is one of Lightning's hooks (the C enum fulmen_hook). Callbacks
// receive them in Lightning's order: every Callback first (in the order
// added), then the LightningModule's ModuleFuncs.OnHook.
type Hook int32

// The hooks. String returns Lightning's method name ("on_train_epoch_end").
const (
	// HookSetup is setup(stage), at the start of Fit / Validate / Test / Predict.
	HookSetup Hook = C.FULMEN_HOOK_SETUP
	// HookTeardown is teardown(stage), at their successful end.
	HookTeardown Hook = C.FULMEN_HOOK_TEARDOWN
	// HookFitStart is on_fit_start.
	HookFitStart Hook = C.FULMEN_HOOK_FIT_START
	// HookFitEnd is on_fit_end.
	HookFitEnd Hook = C.FULMEN_HOOK_FIT_END
	// HookSanityCheckStart is on_sanity_check_start.
	HookSanityCheckStart Hook = C.FULMEN_HOOK_SANITY_CHECK_START
	// HookSanityCheckEnd is on_sanity_check_end.
	HookSanityCheckEnd Hook = C.FULMEN_HOOK_SANITY_CHECK_END
	// HookTrainStart is on_train_start.
	HookTrainStart Hook = C.FULMEN_HOOK_TRAIN_START
	// HookTrainEnd is on_train_end.
	HookTrainEnd Hook = C.FULMEN_HOOK_TRAIN_END
	// HookTrainEpochStart is on_train_epoch_start.
	HookTrainEpochStart Hook = C.FULMEN_HOOK_TRAIN_EPOCH_START
	// HookTrainEpochEnd is on_train_epoch_end.
	HookTrainEpochEnd Hook = C.FULMEN_HOOK_TRAIN_EPOCH_END
	// HookTrainBatchStart is on_train_batch_start (the batch is readable).
	HookTrainBatchStart Hook = C.FULMEN_HOOK_TRAIN_BATCH_START
	// HookTrainBatchEnd is on_train_batch_end (the batch and loss are readable).
	HookTrainBatchEnd Hook = C.FULMEN_HOOK_TRAIN_BATCH_END
	// HookValidationStart is on_validation_start.
	HookValidationStart Hook = C.FULMEN_HOOK_VALIDATION_START
	// HookValidationEnd is on_validation_end.
	HookValidationEnd Hook = C.FULMEN_HOOK_VALIDATION_END
	// HookValidationEpochStart is on_validation_epoch_start.
	HookValidationEpochStart Hook = C.FULMEN_HOOK_VALIDATION_EPOCH_START
	// HookValidationEpochEnd is on_validation_epoch_end.
	HookValidationEpochEnd Hook = C.FULMEN_HOOK_VALIDATION_EPOCH_END
	// HookValidationBatchStart is on_validation_batch_start.
	HookValidationBatchStart Hook = C.FULMEN_HOOK_VALIDATION_BATCH_START
	// HookValidationBatchEnd is on_validation_batch_end.
	HookValidationBatchEnd Hook = C.FULMEN_HOOK_VALIDATION_BATCH_END
	// HookTestStart is on_test_start.
	HookTestStart Hook = C.FULMEN_HOOK_TEST_START
	// HookTestEnd is on_test_end.
	HookTestEnd Hook = C.FULMEN_HOOK_TEST_END
	// HookTestEpochStart is on_test_epoch_start.
	HookTestEpochStart Hook = C.FULMEN_HOOK_TEST_EPOCH_START
	// HookTestEpochEnd is on_test_epoch_end.
	HookTestEpochEnd Hook = C.FULMEN_HOOK_TEST_EPOCH_END
	// HookTestBatchStart is on_test_batch_start.
	HookTestBatchStart Hook = C.FULMEN_HOOK_TEST_BATCH_START
	// HookTestBatchEnd is on_test_batch_end.
	HookTestBatchEnd Hook = C.FULMEN_HOOK_TEST_BATCH_END
	// HookPredictStart is on_predict_start.
	HookPredictStart Hook = C.FULMEN_HOOK_PREDICT_START
	// HookPredictEnd is on_predict_end.
	HookPredictEnd Hook = C.FULMEN_HOOK_PREDICT_END
	// HookPredictEpochStart is on_predict_epoch_start.
	HookPredictEpochStart Hook = C.FULMEN_HOOK_PREDICT_EPOCH_START
	// HookPredictEpochEnd is on_predict_epoch_end.
	HookPredictEpochEnd Hook = C.FULMEN_HOOK_PREDICT_EPOCH_END
	// HookPredictBatchStart is on_predict_batch_start.
	HookPredictBatchStart Hook = C.FULMEN_HOOK_PREDICT_BATCH_START
	// HookPredictBatchEnd is on_predict_batch_end (the prediction is readable).
	HookPredictBatchEnd Hook = C.FULMEN_HOOK_PREDICT_BATCH_END
	// HookBeforeBackward is on_before_backward (the loss is readable).
	HookBeforeBackward Hook = C.FULMEN_HOOK_BEFORE_BACKWARD
	// HookAfterBackward is on_after_backward: gradients are populated.
	HookAfterBackward Hook = C.FULMEN_HOOK_AFTER_BACKWARD
	// HookBeforeOptimizerStep is on_before_optimizer_step: gradients are
	// final (unscaled, before clipping).
	HookBeforeOptimizerStep Hook = C.FULMEN_HOOK_BEFORE_OPTIMIZER_STEP
	// HookBeforeZeroGrad is on_before_zero_grad.
	HookBeforeZeroGrad Hook = C.FULMEN_HOOK_BEFORE_ZERO_GRAD
	// HookSaveCheckpoint is on_save_checkpoint: add entries with
	// HookContext.CheckpointSet.
	HookSaveCheckpoint Hook = C.FULMEN_HOOK_SAVE_CHECKPOINT
	// HookLoadCheckpoint is on_load_checkpoint: read entries with
	// HookContext.CheckpointGet.
	HookLoadCheckpoint Hook = C.FULMEN_HOOK_LOAD_CHECKPOINT
	// HookException is on_exception: the run is failing
	// (HookContext.Exception has the message). It runs even when the
	// context is done, and its error is ignored.
	HookException Hook = C.FULMEN_HOOK_EXCEPTION

	// The LightningModule's only hooks: its OnHook receives them only when
	// it overrides them (LightningModule.OverrideHook), in place of
	// fulmen's default.

	// HookValidationModelEval is on_validation_model_eval (default: eval mode).
	HookValidationModelEval Hook = C.FULMEN_HOOK_VALIDATION_MODEL_EVAL
	// HookValidationModelTrain is on_validation_model_train.
	HookValidationModelTrain Hook = C.FULMEN_HOOK_VALIDATION_MODEL_TRAIN
	// HookTestModelEval is on_test_model_eval (default: eval mode).
	HookTestModelEval Hook = C.FULMEN_HOOK_TEST_MODEL_EVAL
	// HookTestModelTrain is on_test_model_train.
	HookTestModelTrain Hook = C.FULMEN_HOOK_TEST_MODEL_TRAIN
	// HookPredictModelEval is on_predict_model_eval (default: eval mode).
	HookPredictModelEval Hook = C.FULMEN_HOOK_PREDICT_MODEL_EVAL
	// HookValidationModelZeroGrad is on_validation_model_zero_grad
	// (default: the gradients set to none).
	HookValidationModelZeroGrad Hook = C.FULMEN_HOOK_VALIDATION_MODEL_ZERO_GRAD
	// HookBeforeBatchTransfer is on_before_batch_transfer (SetBatch).
	HookBeforeBatchTransfer Hook = C.FULMEN_HOOK_BEFORE_BATCH_TRANSFER
	// HookTransferBatchToDevice is transfer_batch_to_device (Device,
	// SetBatch with the moved batch).
	HookTransferBatchToDevice Hook = C.FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE
	// HookAfterBatchTransfer is on_after_batch_transfer (SetBatch).
	HookAfterBatchTransfer Hook = C.FULMEN_HOOK_AFTER_BATCH_TRANSFER
	// HookPrepareData is prepare_data, at the start of every run on
	// local rank 0 (SetPrepareDataPerNode).
	HookPrepareData Hook = C.FULMEN_HOOK_PREPARE_DATA
)

// String returns Lightning's name of the hook ("on_train_epoch_end",
// "setup"), from the library.
func (h Hook) String() string {
	if s := C.GoString(C.fulmen_hook_name(C.int32_t(h))); s != "" {
		return s
	}
	return "hook(" + strconv.Itoa(int(h)) + ")"
}

// Callback receives every hook of the trainer it is added to
// (Trainer.AddCallback), while the goroutine that called Fit / Validate /
// Test / Predict waits (each call on a goroutine of its own). Returning an error (or panicking) stops the run: the
// error the run returns wraps it, as for the step functions. Tensors it
// creates, and those HookContext returns, are scope-owned (released when
// the hook returns unless kept). A runtime.Goexit in OnHook (t.FailNow,
// t.Fatal, t.SkipNow) stops the run like an error naming the hook's
// callback: see "Callbacks and runtime.Goexit" in the package
// documentation.
type Callback interface {
	OnHook(hook Hook, ctx *HookContext) error
}

// CallbackFunc adapts a function to Callback (a runtime.Goexit in it fails
// the run, as Callback says).
type CallbackFunc func(hook Hook, ctx *HookContext) error

// OnHook calls f.
func (f CallbackFunc) OnHook(hook Hook, ctx *HookContext) error { return f(hook, ctx) }

// HookContext is what a hook sees: the trainer's state and the hook's
// data. Borrowed: valid only during the hook call.
type HookContext struct {
	h *C.fulmen_hook_context
}

func (c *HookContext) ptr() *C.fulmen_hook_context {
	if c == nil {
		gcStress()
		return nil
	}
	h := c.h
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

func (c *HookContext) end() { c.h = nil }

// Stage is the running entry point: "fit", "validate", "test" or "predict".
func (c *HookContext) Stage() (string, error) {
	var s *C.char
	if err := check(C.fulmen_hook_context_stage(c.ptr(), &s)); err != nil {
		return "", err
	}
	return C.GoString(s), nil
}

// Epoch is the current epoch (0-based).
func (c *HookContext) Epoch() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_hook_context_epoch(c.ptr(), &v))
	return int64(v), err
}

// GlobalStep is the number of optimizer steps taken so far.
func (c *HookContext) GlobalStep() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_hook_context_global_step(c.ptr(), &v))
	return int64(v), err
}

// TrainerView is the trainer as a hook sees it during a run (Lightning's
// trainer properties of the same names; -1 counts are unknown: see
// fulmen_trainer_view in fulmen/after_run.h).
type TrainerView struct {
	CurrentEpoch, GlobalStep, MaxEpochs                  int64
	NumTrainingBatches, NumValBatches                    int64
	LogEveryNSteps, AccumulateGradBatches                int64
	GlobalRank, WorldSize, NodeRank, NumDevices          int64
	ShouldStop, SanityChecking, IsGlobalZero, FastDevRun bool
}

// Trainer is what the trainer knows now (Lightning's self.trainer.<property>
// read from a hook, where the Trainer itself is busy with the run).
func (c *HookContext) Trainer() (TrainerView, error) {
	var v C.fulmen_trainer_view
	v.struct_size = C.size_t(unsafe.Sizeof(v))
	if err := check(C.fulmen_hook_context_trainer(c.ptr(), &v)); err != nil {
		return TrainerView{}, err
	}
	return TrainerView{
		CurrentEpoch: int64(v.current_epoch), GlobalStep: int64(v.global_step), MaxEpochs: int64(v.max_epochs),
		NumTrainingBatches: int64(v.num_training_batches), NumValBatches: int64(v.num_val_batches),
		LogEveryNSteps: int64(v.log_every_n_steps), AccumulateGradBatches: int64(v.accumulate_grad_batches),
		GlobalRank: int64(v.global_rank), WorldSize: int64(v.world_size), NodeRank: int64(v.node_rank),
		NumDevices: int64(v.num_devices), ShouldStop: bool(v.should_stop), SanityChecking: bool(v.sanity_checking),
		IsGlobalZero: bool(v.is_global_zero), FastDevRun: bool(v.fast_dev_run),
	}, nil
}

// BatchIdx is the batch index for batch hooks, -1 for the others.
func (c *HookContext) BatchIdx() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_hook_context_batch_idx(c.ptr(), &v))
	return int64(v), err
}

// Metric is the latest value of a logged metric (trainer.callback_metrics);
// ErrInvalidState, naming the logged ones, when it is missing.
func (c *HookContext) Metric(name string) (float64, error) {
	n := cString(name)
	defer freeCString(n)
	var v C.double
	err := check(C.fulmen_hook_context_metric(c.ptr(), n, &v))
	return float64(v), err
}

// Log logs a metric from a hook (Lightning's self.log there), with the
// hook's on_step / on_epoch defaults and allowed values: the training
// batch hooks (HookTrainBatchStart / End, HookBeforeBackward,
// HookAfterBackward, HookBeforeOptimizerStep, HookBeforeZeroGrad) log on
// step by default, the validation / test batch hooks on epoch, the start
// and epoch hooks (HookTrainEpochEnd, HookValidationStart, ...) on epoch
// only; other hooks are refused with ErrInvalidState, a level the hook
// does not allow with ErrInvalidArgument. flags are StepContext.Log's
// (LogDefault / 0: the hook's defaults). What an epoch-end hook logs,
// ModelCheckpoint and EarlyStopping can monitor.
func (c *HookContext) Log(name string, value float64, flags LogFlags) error {
	n := cString(name)
	defer freeCString(n)
	return check(C.fulmen_hook_context_log(c.ptr(), n, C.double(value), C.uint32_t(flags)))
}

// NewGroup makes a group of the job's ranks for LogSyncDist values (torch's
// new_group, Lightning's sync_dist_group) and returns its id, for
// LogGroup(id). Every rank calls it in the same hook with the same ranks,
// in the same order; a rank outside the group keeps its own synced values.
// ErrInvalidState in prepare_data and on_exception, ErrInvalidArgument for
// ranks outside the job.
func (c *HookContext) NewGroup(ranks []int) (uint32, error) {
	var id C.uint32_t
	if len(ranks) == 0 {
		return 0, check(C.fulmen_hook_context_new_group(c.ptr(), nil, 0, &id))
	}
	cr := make([]C.size_t, len(ranks))
	for i, r := range ranks {
		if r < 0 {
			return 0, &Error{Code: CodeInvalidArgument, Message: "NewGroup: rank " + strconv.Itoa(r) + " is negative"}
		}
		cr[i] = C.size_t(r)
	}
	if err := check(C.fulmen_hook_context_new_group(c.ptr(), &cr[0], C.size_t(len(cr)), &id)); err != nil {
		return 0, err
	}
	return uint32(id), nil
}

// RequestStop asks the trainer to stop after the current step (Lightning's
// trainer.should_stop = True; min_epochs / min_steps still apply).
func (c *HookContext) RequestStop() error {
	return check(C.fulmen_hook_context_request_stop(c.ptr()))
}

// SkipRestOfEpoch is Lightning's on_train_batch_start returning -1, from
// the module's own OnHook: this batch is not trained on and the epoch ends
// there (CodeInvalidState in another hook or a callback's).
func (c *HookContext) SkipRestOfEpoch() error {
	return check(C.fulmen_hook_context_skip_rest_of_epoch(c.ptr()))
}

// BatchLen is the number of tensors of the hook's batch (0 when the hook
// has none).
func (c *HookContext) BatchLen() (int, error) {
	var v C.size_t
	err := check(C.fulmen_hook_context_batch_len(c.ptr(), &v))
	return int(v), err
}

// BatchGet is tensor index of the hook's batch (scope-owned).
func (c *HookContext) BatchGet(index int) (*Tensor, error) {
	if index < 0 {
		return nil, &Error{Code: CodeOutOfRange, Message: "negative batch index " + strconv.Itoa(index)}
	}
	var out *C.fulmen_tensor
	if err := check(C.fulmen_hook_context_batch_get(c.ptr(), C.size_t(index), &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Batch returns every tensor of the hook's batch (none when it has none).
func (c *HookContext) Batch() ([]*Tensor, error) {
	n, err := c.BatchLen()
	if err != nil {
		return nil, err
	}
	ts := make([]*Tensor, n)
	for i := range ts {
		if ts[i], err = c.BatchGet(i); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// Output is the hook's output (scope-owned): the loss in
// HookTrainBatchEnd, HookBeforeBackward and HookAfterBackward, the
// prediction in HookPredictBatchEnd, what a validation / test step
// returned in their batch end; nil (and no error) when the hook has none.
func (c *HookContext) Output() (*Tensor, error) {
	var out *C.fulmen_tensor
	if err := check(C.fulmen_hook_context_output(c.ptr(), &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// SaveCheckpoint saves a checkpoint of the running fit to path when the
// hook returns (Lightning's trainer.save_checkpoint); only while fit trains,
// not in the sanity check or the checkpoint hooks (ErrInvalidState).
func (c *HookContext) SaveCheckpoint(path string, weightsOnly bool) error {
	p := cString(path)
	defer freeCString(p)
	return check(C.fulmen_hook_context_save_checkpoint(c.ptr(), p, C.bool(weightsOnly)))
}

// CheckpointSet stores value under key in the checkpoint being saved (in
// HookSaveCheckpoint only; ErrInvalidState elsewhere). The entries of every
// callback and of the module share one namespace: prefix your keys.
func (c *HookContext) CheckpointSet(key, value string) error {
	k, v := cString(key), cString(value)
	defer freeCString(k)
	defer freeCString(v)
	return check(C.fulmen_hook_context_checkpoint_set(c.ptr(), k, v))
}

// CheckpointGet reads the value stored under key in the checkpoint being
// loaded (in HookLoadCheckpoint only); ErrInvalidArgument when there is no
// such entry.
func (c *HookContext) CheckpointGet(key string) (string, error) {
	k := cString(key)
	defer freeCString(k)
	h := c.ptr()
	return readString(func(b *C.char, n C.size_t, l *C.size_t) cErr {
		return C.fulmen_hook_context_checkpoint_get(h, k, b, n, l)
	})
}

// Exception is the message of the failure, in HookException
// (ErrInvalidState elsewhere).
func (c *HookContext) Exception() (string, error) {
	h := c.ptr()
	return readString(func(b *C.char, n C.size_t, l *C.size_t) cErr {
		return C.fulmen_hook_context_exception(h, b, n, l)
	})
}

// Logger receives the metrics and hyperparameters of the runs of the
// trainer it is added to (Trainer.AddLogger), while the goroutine running
// them waits (each call on a goroutine of its own): everything the file loggers get, and the metrics of Validate and
// Test. An error (or panic) stops the run, as for the step functions;
// Finalize with a status other than "success" runs because the run is
// failing, even when the context is done, and its error is ignored.
// A runtime.Goexit in a method (t.FailNow, t.Fatal, t.SkipNow) fails it
// like an error naming the method: see "Callbacks and runtime.Goexit" in
// the package documentation.
type Logger interface {
	// LogMetrics receives metrics logged at step in epoch; epoch is -1
	// for the values Lightning logs without one (a validation or test
	// batch's step values, at the loader's batch count; LearningRateMonitor,
	// ThroughputMonitor and DeviceStatsMonitor).
	LogMetrics(metrics map[string]float64, epoch, step int64) error
	// LogHyperparams receives the module's hyperparameters
	// (LightningModule.SetHparam) when a fit starts.
	LogHyperparams(params map[string]string) error
	// Finalize ends a run: status is "success" or "failed".
	Finalize(status string) error
}

// CheckpointLogger is a Logger that also wants Lightning's
// after_save_checkpoint: AfterSaveCheckpoint gets the path of each
// checkpoint ModelCheckpoint wrote (on rank 0, before the run goes on; an
// error stops the run). A Logger without the method is not called.
type CheckpointLogger interface {
	Logger
	// AfterSaveCheckpoint receives the checkpoint file just written.
	AfterSaveCheckpoint(path string) error
}

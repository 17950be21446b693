package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"runtime/cgo"
	"sort"
	"unsafe"
)

// ModuleFuncs are the Go functions of a LightningModule. A nil function is
// "not implemented": Fit needs TrainingStep and ConfigureOptimizers,
// Validate needs ValidationStep, and so on. They run while the goroutine
// that called Fit / Validate / Test / Predict waits, each call on a
// goroutine of its own; tensors they create are scope-owned (see the
// package documentation).
// A runtime.Goexit in one (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran it like an error naming it: see "Callbacks and runtime.Goexit"
// in the package documentation.
type ModuleFuncs struct {
	// TrainingStep computes the loss of a training batch: a one-element
	// floating tensor computed from the parameters. A nil loss is
	// Lightning's `return None`: no backward for the batch (the optimizer
	// step still runs and counts in the global step).
	TrainingStep func(ctx *StepContext, batch *Batch) (*Tensor, error)
	// ValidationStep evaluates a validation batch (log metrics through ctx).
	ValidationStep func(ctx *StepContext, batch *Batch) error
	// TestStep evaluates a test batch.
	TestStep func(ctx *StepContext, batch *Batch) error
	// PredictStep returns the prediction for a batch (or nil).
	PredictStep func(ctx *StepContext, batch *Batch) (*Tensor, error)
	// ConfigureOptimizers creates the optimizers (and schedulers) and hands
	// them to cfg. Handing none is Lightning's `return None`: the fit runs
	// with no optimizer.
	ConfigureOptimizers func(cfg *OptimizerConfig) error
	// OnHook receives the module's own hooks (Lightning's
	// LightningModule.on_* methods), after every Callback's. An error or
	// panic stops the run, as for the steps. In HookTrainBatchStart,
	// ctx.SkipRestOfEpoch is Lightning's `return -1`.
	OnHook func(hook Hook, ctx *HookContext) error
	// TrainDataloader is Lightning's train_dataloader: the training data
	// of a Fit given no train loader, for epoch (see Trainer.Fit).
	// The library takes the loader returned (it is closed here; do not use
	// it again) and calls again every reload_dataloaders_every_n_epochs.
	TrainDataloader func(epoch int64) (*Loader, error)
	// ValDataloader is Lightning's val_dataloader: the validation loaders
	// of a Fit given none (none: no validation), taken as for
	// TrainDataloader.
	ValDataloader func(epoch int64) ([]*Loader, error)
	// TestDataloader is Lightning's test_dataloader: the loaders of a Test
	// given a nil loader, taken as for TrainDataloader.
	TestDataloader func(epoch int64) ([]*Loader, error)
	// PredictDataloader is Lightning's predict_dataloader: the loader of a
	// Predict given a nil loader (one), taken as for TrainDataloader.
	PredictDataloader func(epoch int64) ([]*Loader, error)
	// OptimizerStep is Lightning's optimizer_step(epoch, batch_idx,
	// optimizer, optimizer_closure) under automatic optimization, on every
	// batch that ends an accumulation window. It must run closure: alone
	// (closure.Run(), no update: Lightning's stepping every other batch)
	// or by ctx.Step(closure), which wraps the update in the precision
	// plugin; ctx.SetLearningRate warms the lr up. nil: step. With any of
	// these five hooks set, ConfigureOptimizers must add one optimizer (not
	// LBFGS).
	OptimizerStep func(ctx *OptimizationContext, epoch, batchIdx int64, optimizerIdx int, closure *OptimizerClosure) error
	// OptimizerZeroGrad is Lightning's optimizer_zero_grad, in the closure
	// at the start of an accumulation window (ctx.ZeroGrad, or nothing).
	// nil: gradients set to none.
	OptimizerZeroGrad func(ctx *OptimizationContext, epoch, batchIdx int64, optimizerIdx int) error
	// LrSchedulerStep is Lightning's lr_scheduler_step(scheduler, metric)
	// for a scheduler that is due (schedulerIdx in the flat list; metric
	// nil except for ReduceLROnPlateau): ctx.SchedulerStep, or nothing.
	// nil: step it.
	LrSchedulerStep func(ctx *OptimizationContext, schedulerIdx int, metric *float64) error
	// Backward is Lightning's backward(loss): loss is divided by
	// accumulate_grad_batches and scaled under 16-mixed; run
	// loss.Backward() (or not). nil: loss.Backward().
	Backward func(ctx *OptimizationContext, loss *Tensor) error
	// ConfigureGradientClipping is Lightning's
	// configure_gradient_clipping(optimizer, clip_val, algorithm) with the
	// trainer's settings (clipVal 0: unset), after on_before_optimizer_step
	// on unscaled gradients: ctx.ClipGradients, or nothing. nil: clip with
	// the trainer's settings.
	ConfigureGradientClipping func(ctx *OptimizationContext, optimizerIdx int, clipVal float64, algorithm ClipAlgorithm) error
	// ValidationStepOutput is ValidationStep returning what
	// HookValidationBatchEnd receives as the step's outputs
	// (HookContext.Output), or nil. Set it or ValidationStep, not both
	// (NewLightningModule refuses both).
	ValidationStepOutput func(ctx *StepContext, batch *Batch) (*Tensor, error)
	// TestStepOutput is TestStep returning what HookTestBatchEnd receives,
	// as ValidationStepOutput (not both with TestStep).
	TestStepOutput func(ctx *StepContext, batch *Batch) (*Tensor, error)
	// ConfigureModel is Lightning's configure_model: builds or changes the
	// model on the run's device, after the setup hook and before
	// ConfigureOptimizers, in every run.
	ConfigureModel func(device Device) error
	// ConfigureCallbacks is Lightning's configure_callbacks: callbacks the
	// module adds to every run when it starts (a trainer callback of the
	// same name is replaced).
	ConfigureCallbacks func(list *CallbackList) error
}

// moduleState is what the userdata handle of a module refers to.
type moduleState struct {
	funcs ModuleFuncs
}

// LightningModule is the user's model logic (ModuleFuncs) and the model it
// trains.
type LightningModule struct {
	h handle[*C.fulmen_lightning_module]
}

// NewLightningModule creates a LightningModule running funcs and training
// model (may be nil). The module shares the model, so model may be closed
// independently.
func NewLightningModule(model *Model, funcs ModuleFuncs) (*LightningModule, error) {
	var slots C.unsigned
	if funcs.TrainingStep != nil {
		slots |= C.FULMEN_GO_TRAINING_STEP
	}
	if funcs.ValidationStep != nil {
		slots |= C.FULMEN_GO_VALIDATION_STEP
	}
	if funcs.TestStep != nil {
		slots |= C.FULMEN_GO_TEST_STEP
	}
	if funcs.PredictStep != nil {
		slots |= C.FULMEN_GO_PREDICT_STEP
	}
	if funcs.ConfigureOptimizers != nil {
		slots |= C.FULMEN_GO_CONFIGURE_OPTIMIZERS
	}
	if funcs.OnHook != nil {
		slots |= C.FULMEN_GO_ON_HOOK
	}
	if funcs.TrainDataloader != nil {
		slots |= C.FULMEN_GO_TRAIN_DATALOADER
	}
	if funcs.ValDataloader != nil {
		slots |= C.FULMEN_GO_VAL_DATALOADER
	}
	if funcs.TestDataloader != nil {
		slots |= C.FULMEN_GO_TEST_DATALOADER
	}
	if funcs.PredictDataloader != nil {
		slots |= C.FULMEN_GO_PREDICT_DATALOADER
	}
	if funcs.OptimizerStep != nil {
		slots |= C.FULMEN_GO_OPTIMIZER_STEP
	}
	if funcs.OptimizerZeroGrad != nil {
		slots |= C.FULMEN_GO_OPTIMIZER_ZERO_GRAD
	}
	if funcs.LrSchedulerStep != nil {
		slots |= C.FULMEN_GO_LR_SCHEDULER_STEP
	}
	if funcs.Backward != nil {
		slots |= C.FULMEN_GO_BACKWARD
	}
	if funcs.ConfigureGradientClipping != nil {
		slots |= C.FULMEN_GO_CONFIGURE_GRADIENT_CLIPPING
	}
	if funcs.ValidationStepOutput != nil {
		slots |= C.FULMEN_GO_VALIDATION_STEP_OUTPUT
	}
	if funcs.TestStepOutput != nil {
		slots |= C.FULMEN_GO_TEST_STEP_OUTPUT
	}
	if funcs.ConfigureModel != nil {
		slots |= C.FULMEN_GO_CONFIGURE_MODEL
	}
	if funcs.ConfigureCallbacks != nil {
		slots |= C.FULMEN_GO_CONFIGURE_CALLBACKS
	}
	h := cgo.NewHandle(&moduleState{funcs: funcs})
	var out *C.fulmen_lightning_module
	err := check(C.fulmen_go_module_new(C.uintptr_t(h), slots, model.ptr(), &out))
	runtime.KeepAlive(model)
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return nil, err
	}
	m := &LightningModule{}
	m.h.store(out)
	runtime.SetFinalizer(m, (*LightningModule).Close)
	return m, nil
}

func (m *LightningModule) ptr() *C.fulmen_lightning_module {
	if m == nil {
		gcStress()
		return nil
	}
	h := m.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the module (releasing its Go functions); idempotent, and
// safe from any goroutine, also while a Fit uses the module (even from its
// own step): the library then frees it when that call returns. The error
// is always nil.
func (m *LightningModule) Close() error {
	if m == nil {
		return nil
	}
	h := m.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_lightning_module_free(h)
	runtime.SetFinalizer(m, nil)
	return nil
}

// SetHparam records a hyperparameter (Lightning's save_hyperparameters):
// written to hparams.yaml, the TensorBoard hparams view, every checkpoint,
// and given to Logger.LogHyperparams. Setting a key again replaces its
// value. Any UTF-8 key and value is kept exactly (hparams.yaml quotes and
// escapes what YAML would alter); text that is not UTF-8 is
// ErrInvalidArgument.
func (m *LightningModule) SetHparam(key, value string) error {
	k, v := cString(key), cString(value)
	defer freeCString(k)
	defer freeCString(v)
	err := check(C.fulmen_lightning_module_set_hparam(m.ptr(), k, v))
	runtime.KeepAlive(m)
	return err
}

// SetPrepareDataPerNode sets Lightning's prepare_data_per_node (default
// true) for the module's prepare_data (HookPrepareData, once overridden
// with OverrideHook): true calls it on local rank 0 of every node, false
// on global rank 0 only.
func (m *LightningModule) SetPrepareDataPerNode(perNode bool) error {
	err := check(C.fulmen_lightning_module_set_prepare_data_per_node(m.ptr(), C.bool(perNode)))
	runtime.KeepAlive(m)
	return err
}

// StepContext is the context of one step call: stage, epoch, step, batch
// index and metric logging. Borrowed: valid only during the step.
type StepContext struct {
	h *C.fulmen_step_context
}

func (c *StepContext) ptr() *C.fulmen_step_context {
	if c == nil {
		gcStress()
		return nil
	}
	h := c.h
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

func (c *StepContext) end() { c.h = nil }

// Log logs a metric, as Lightning's self.log(name, value, ...). flags
// combine LogOnStep, LogOnEpoch and LogProgBar (0: the stage's defaults);
// batchSize weights the epoch mean (0: the batch's first dimension).
func (c *StepContext) Log(name string, value float64, flags LogFlags, batchSize int64) error {
	n := cString(name)
	defer freeCString(n)
	return check(C.fulmen_step_context_log(c.ptr(), n, C.double(value), C.uint32_t(flags), C.int64_t(batchSize)))
}

// LogTensor logs the one-element tensor value as a metric, as Log does
// a number. A device tensor is not read in the step, so the step does not
// wait for its device: it is read where the trainer reads values anyway
// (the loggers every log_every_n_steps steps and after each evaluation
// batch that logs one, a progress-bar refresh, a metric read, the epoch's
// end).
func (c *StepContext) LogTensor(name string, value *Tensor, flags LogFlags, batchSize int64) error {
	n := cString(name)
	defer freeCString(n)
	err := check(C.fulmen_step_context_log_tensor(c.ptr(), n, value.ptr(), C.uint32_t(flags), C.int64_t(batchSize)))
	runtime.KeepAlive(value)
	return err
}

// LogDict logs every name and value of values with the same flags, as
// Lightning's log_dict (in name order; every name is checked before any is
// logged).
func (c *StepContext) LogDict(values map[string]float64, flags LogFlags, batchSize int64) error {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	names := C.malloc(C.size_t(len(keys)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	numbers := C.malloc(C.size_t(len(keys)+1) * C.size_t(unsafe.Sizeof(C.double(0))))
	defer C.free(names)
	defer C.free(numbers)
	ns := unsafe.Slice((**C.char)(names), len(keys))
	vs := unsafe.Slice((*C.double)(numbers), len(keys))
	for i, k := range keys {
		ns[i] = cString(k)
		vs[i] = C.double(values[k])
	}
	defer func() {
		for _, p := range ns {
			freeCString(p)
		}
	}()
	return check(C.fulmen_step_context_log_dict(c.ptr(), (**C.char)(names), (*C.double)(numbers), C.size_t(len(keys)),
		C.uint32_t(flags), C.int64_t(batchSize)))
}

// Stage is the running loop.
func (c *StepContext) Stage() (Stage, error) {
	var v C.int32_t
	err := check(C.fulmen_step_context_stage(c.ptr(), &v))
	return Stage(v), err
}

// Epoch is the current epoch (0-based).
func (c *StepContext) Epoch() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_step_context_epoch(c.ptr(), &v))
	return int64(v), err
}

// GlobalStep is the number of optimizer steps taken so far.
func (c *StepContext) GlobalStep() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_step_context_global_step(c.ptr(), &v))
	return int64(v), err
}

// BatchIdx is the index of the batch within the epoch (0-based).
func (c *StepContext) BatchIdx() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_step_context_batch_idx(c.ptr(), &v))
	return int64(v), err
}

// Batch is the ordered list of tensors given to a step (for example
// inputs then targets). Borrowed: valid only during the step.
type Batch struct {
	h *C.fulmen_batch
}

func (b *Batch) ptr() *C.fulmen_batch {
	if b == nil {
		gcStress()
		return nil
	}
	h := b.h
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

func (b *Batch) end() { b.h = nil }

// Len is the number of tensors in the batch.
func (b *Batch) Len() (int, error) {
	var v C.size_t
	err := check(C.fulmen_batch_len(b.ptr(), &v))
	return int(v), err
}

// Get is tensor index of the batch (scope-owned: released when the step
// returns unless kept).
func (b *Batch) Get(index int) (*Tensor, error) {
	var out *C.fulmen_tensor
	if err := check(C.fulmen_batch_get(b.ptr(), C.size_t(index), &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Tensors returns every tensor of the batch.
func (b *Batch) Tensors() ([]*Tensor, error) {
	n, err := b.Len()
	if err != nil {
		return nil, err
	}
	ts := make([]*Tensor, n)
	for i := range ts {
		if ts[i], err = b.Get(i); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// BatchBuilder is the batch a DataSource or Iterator fills. Borrowed:
// valid only during the callback.
type BatchBuilder struct {
	h *C.fulmen_batch_builder
}

func (b *BatchBuilder) end() { b.h = nil }

// Push appends t to the batch. The batch shares the tensor: t keeps its
// owner (a tensor created in the callback is released after it, which is
// fine).
func (b *BatchBuilder) Push(t *Tensor) error {
	gcStress()
	var h *C.fulmen_batch_builder
	if b != nil {
		h = b.h
	}
	err := check(C.fulmen_batch_builder_push(h, t.ptr()))
	runtime.KeepAlive(t)
	return err
}

// OptimizerConfig is the list of optimizers ConfigureOptimizers fills.
// Borrowed: valid only during that callback.
type OptimizerConfig struct {
	h *C.fulmen_optimizer_config
}

func (c *OptimizerConfig) end() { c.h = nil }

// EstimatedSteppingBatches is Lightning's trainer.estimated_stepping_batches:
// the optimizer steps of this fit (e.g. OneCycleLR's total steps). ok is
// false when the run is unbounded.
func (c *OptimizerConfig) EstimatedSteppingBatches() (steps int64, ok bool, err error) {
	var h *C.fulmen_optimizer_config
	if c != nil {
		h = c.h
	}
	var v C.int64_t
	if err := check(C.fulmen_optimizer_config_estimated_stepping_batches(h, &v)); err != nil {
		if errors.Is(err, ErrInvalidState) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return int64(v), true, nil
}

// Add hands opt to the trainer. On success opt is consumed (its wrapper is
// closed); on failure it is unchanged.
func (c *OptimizerConfig) Add(opt *Optimizer) error {
	return c.AddWithScheduler(opt, nil, IntervalEpoch, 1, "")
}

// AddScheduler adds sched (created for the optimizer added optimizerIndex-th,
// none of its schedulers stepped) to that optimizer: the schedulers of one
// optimizer step in torch's chainable forms, so their factors compose. The
// arguments are as for AddWithScheduler. On success sched is consumed; on
// failure it is unchanged.
func (c *OptimizerConfig) AddScheduler(optimizerIndex int, sched *Scheduler, interval Interval, frequency int64, monitor string) error {
	gcStress()
	if optimizerIndex < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "AddScheduler: negative optimizerIndex"}
	}
	var h *C.fulmen_optimizer_config
	if c != nil {
		h = c.h
	}
	var mon *C.char
	if monitor != "" {
		mon = cString(monitor)
		defer freeCString(mon)
	}
	err := check(C.fulmen_optimizer_config_add_scheduler(h, C.size_t(optimizerIndex), sched.ptr(), C.int32_t(interval), C.int64_t(frequency), mon))
	runtime.KeepAlive(sched)
	if err != nil {
		return err
	}
	sched.h.take()
	runtime.SetFinalizer(sched, nil)
	return nil
}

// SetSchedulerName names the schedulerIndex-th scheduler of the
// optimizerIndex-th optimizer (Lightning's lr_scheduler "name"):
// LearningRateMonitor logs name instead of lr-<Optimizer>; "" clears it.
func (c *OptimizerConfig) SetSchedulerName(optimizerIndex, schedulerIndex int, name string) error {
	if optimizerIndex < 0 || schedulerIndex < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "SetSchedulerName: negative index"}
	}
	var h *C.fulmen_optimizer_config
	if c != nil {
		h = c.h
	}
	var n *C.char
	if name != "" {
		n = cString(name)
		defer freeCString(n)
	}
	return check(C.fulmen_optimizer_config_set_scheduler_name(h, C.size_t(optimizerIndex), C.size_t(schedulerIndex), n))
}

// SetSchedulerStrict sets Lightning's lr_scheduler "strict": false makes a
// ReduceLROnPlateau whose metric was not logged warn and skip its step
// instead of failing the run.
func (c *OptimizerConfig) SetSchedulerStrict(optimizerIndex, schedulerIndex int, strict bool) error {
	if optimizerIndex < 0 || schedulerIndex < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "SetSchedulerStrict: negative index"}
	}
	var h *C.fulmen_optimizer_config
	if c != nil {
		h = c.h
	}
	return check(C.fulmen_optimizer_config_set_scheduler_strict(h, C.size_t(optimizerIndex), C.size_t(schedulerIndex), C.bool(strict)))
}

// AddWithScheduler hands opt and sched (created for opt; may be nil) to the
// trainer: the scheduler steps every frequency intervals, and monitor names
// the logged metric fed to ReduceLROnPlateau ("" otherwise). On success
// both are consumed (their wrappers are closed); on failure nothing is.
func (c *OptimizerConfig) AddWithScheduler(opt *Optimizer, sched *Scheduler, interval Interval, frequency int64, monitor string) error {
	gcStress()
	var h *C.fulmen_optimizer_config
	if c != nil {
		h = c.h
	}
	var mon *C.char
	if monitor != "" {
		mon = cString(monitor)
		defer freeCString(mon)
	}
	err := check(C.fulmen_optimizer_config_add(h, opt.ptr(), sched.ptr(), C.int32_t(interval), C.int64_t(frequency), mon))
	runtime.KeepAlive(opt)
	runtime.KeepAlive(sched)
	if err != nil {
		return err
	}
	opt.h.take()
	runtime.SetFinalizer(opt, nil)
	if sched != nil {
		sched.h.take()
		runtime.SetFinalizer(sched, nil)
	}
	return nil
}

// Package fulmen is the Go binding of fulmen, Lightning-style training on
// libtorch. It is a thin cgo wrapper over the C API in include/fulmen.h:
// every function calls the library and re-implements nothing.
//
// # Errors
//
// Every fallible call returns an error; library errors are *Error values
// with a stable Code. Match them with errors.Is against the sentinels
// (ErrShapeMismatch, ErrInvalidArgument, ...). An error caused by a Go
// callback (a returned error, a recovered panic as *PanicError, or a
// cancelled context.Context) wraps that cause.
//
// # Ownership
//
// Every handle type (Tensor, Model, Optimizer, Scheduler, Dataset, Loader,
// LightningModule, Trainer, TrainerOptions, Precision, Accelerator,
// Strategy, DDP) has an idempotent Close, and a finalizer as a safety net;
// close handles explicitly, the Go garbage collector does not see libtorch
// memory. Calls that consume a handle (Model.Push, Model.Add,
// OptimizerConfig.Add) close the Go wrapper on success.
//
// Tensors follow the C scope rule: a Tensor created while a callback
// (a step, configure_optimizers, a hook, a logger, a data source or
// iterator function) runs,
// on the callback's goroutine, is scope-owned: the library frees it when
// the callback returns, and the Go wrapper then reports itself closed
// (Closed returns true, calls fail with ErrNullArgument). Call Keep to take
// ownership of such a tensor beyond the callback (then Close it). Close on
// a scope-owned tensor frees it early, which is always safe. Tensors made
// outside callbacks are owned by Go. Returning a tensor from TrainingStep
// or PredictStep lends it to the library for that step only: ownership is
// unchanged (a Go-owned tensor stays yours to Close).
//
// StepContext, HookContext, Batch, BatchBuilder and OptimizerConfig are
// borrowed: valid only during the callback that received them.
//
// # Hooks, callbacks and loggers
//
// Lightning's hooks (Hook) reach a Callback added with Trainer.AddCallback
// and then ModuleFuncs.OnHook, in Lightning's order, with a HookContext to
// read the trainer's state and the hook's batch and output. Built-in
// callbacks (AddModelCheckpoint, AddEarlyStopping, AddLRMonitor, AddTimer)
// and Go loggers (AddLogger) are added to the trainer too; Fit, Validate,
// Test and Predict take CkptPath to resume from, or load, a checkpoint.
//
// # Distributed training
//
// The trainer option strategy ("ddp", ...) or TrainerOptions.SetStrategy
// with a Strategy runs Fit over several processes by itself. A host-owned
// loop joins the job with DistributedJoin, shards its data with
// Loader.Shard (reading batches with Loader.Batch), averages gradients
// with a DDP wrapper, and calls the collectives (AllReduce, Broadcast,
// AllGather, Barrier, ReduceBooleanDecision) on every rank in the same
// order; before joining they fail with ErrInvalidState.
// DistributedShutdown leaves the job.
//
// # Threads
//
// Use each handle from one goroutine at a time. Close is the exception: it
// may be called from any goroutine at any time, and only the first call
// frees the handle. Closing an object that a running call uses (a Trainer, its
// LightningModule or Loader during Fit, from another goroutine or from one
// of the fit's own callbacks) is safe: the library frees it when that call
// returns, and the call finishes on the objects it started with; new calls
// on the closed wrapper fail with ErrNullArgument. A call that changes an
// object (Fit changes its trainer and module, a setter its options)
// refuses other uses of it meanwhile with ErrInvalidState, and so does a
// callback calling back into the object running it (a DataSource's
// GetBatch calling Get on its own Dataset), instead of deadlocking.
// Callbacks run while the goroutine that called Fit, Validate, Test,
// Predict or Dataset.Get waits, each on a goroutine of its own (see
// below).
//
// # Callbacks and runtime.Goexit
//
// A Go callback (ModuleFuncs, a Callback, a Logger, a DataSource or
// Iterator, a HostForward, a StepClosure or Closure, an LRLambda or
// BackboneLambda, a CustomAccelerator or CollectiveGroup) ends by
// returning or by a panic; an error it returns and a panic become the
// error of the call that ran it. Each call of a callback runs on a new
// goroutine, locked to an OS thread that is attached to the library's
// callback (fulmen_callback_attach) while the library's thread waits:
// tensors it makes are scope-owned, its calls into the library count as
// the callback's own, and it runs with the callback's grad mode and
// autocast. So runtime.Goexit in a callback (t.FailNow, t.Fatal, t.Fatalf,
// t.SkipNow or t.Skip in a test) ends only that goroutine: the callback
// fails with a CodeCallback error "the Go callback TrainingStep called
// runtime.Goexit ...", naming it, and the call that ran it (Fit, Validate,
// Dataset.Get, ...) returns that error, as for any failing callback; the
// tensors the callback made are freed with its scope. (A t.FailNow in a
// callback still marks the test failed; the test goes on after the call
// returns. Prefer t.Error and returning an error.) The one exception is
// a callback that the library runs outside any callback scope (a
// CollectiveGroup's Close when the job ends inside one of the
// accelerator's own callbacks): it runs on the calling goroutine, and Goexit
// there cannot be stopped: it unwinds through the library's frames, so
// that call never returns and keeps its objects in use, the package frees
// the callback's tensors, ends the goroutine's OS thread and writes one
// line on stderr naming the callback.
//
// # Signals
//
// With the trainer option handle_signals (default true) the library
// handles SIGINT and SIGTERM while Fit, Validate, Test or Predict runs: the
// run stops at its next hook, HookException runs, the loggers are
// finalized, and the call returns ErrInterrupted. Go's signal handling
// (signal.Notify, or the default exit) is restored when the run ends.
package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
*/
import "C"

import "unsafe"

// DType is an element type (the C enum fulmen_dtype).
type DType int32

// Element types.
const (
	// Float32 is a 32-bit float.
	Float32 DType = C.FULMEN_DTYPE_F32
	// Float64 is a 64-bit float.
	Float64 DType = C.FULMEN_DTYPE_F64
	// Half is IEEE half precision (Go element type Float16).
	Half DType = C.FULMEN_DTYPE_F16
	// BHalf is bfloat16 (Go element type BFloat16).
	BHalf DType = C.FULMEN_DTYPE_BF16
	// Int64 is a 64-bit signed integer.
	Int64 DType = C.FULMEN_DTYPE_I64
	// Int32 is a 32-bit signed integer.
	Int32 DType = C.FULMEN_DTYPE_I32
	// Uint8 is an 8-bit unsigned integer.
	Uint8 DType = C.FULMEN_DTYPE_U8
	// Bool is a boolean, one byte per element.
	Bool DType = C.FULMEN_DTYPE_BOOL
	// Int8 is an 8-bit signed integer.
	Int8 DType = C.FULMEN_DTYPE_I8
	// Int16 is a 16-bit signed integer.
	Int16 DType = C.FULMEN_DTYPE_I16
)

var dtypeNames = map[DType]string{
	Float32: "float32", Float64: "float64", Half: "float16", BHalf: "bfloat16", Int64: "int64",
	Int32: "int32", Uint8: "uint8", Bool: "bool", Int8: "int8", Int16: "int16",
}

// String returns the dtype's name, as torch spells it.
func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return "dtype(?)"
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Float64, Int64:
		return 8
	case Float32, Int32:
		return 4
	case Half, BHalf, Int16:
		return 2
	default:
		return 1
	}
}

// DeviceType is a device kind (the C enum fulmen_device_type).
type DeviceType int32

// Device kinds.
const (
	// CPU is the host CPU.
	CPU DeviceType = C.FULMEN_DEVICE_TYPE_CPU
	// CUDA is an NVIDIA GPU.
	CUDA DeviceType = C.FULMEN_DEVICE_TYPE_CUDA
	// MPS is Apple's Metal Performance Shaders.
	MPS DeviceType = C.FULMEN_DEVICE_TYPE_MPS
	// XLA is a PJRT / XLA device.
	XLA DeviceType = C.FULMEN_DEVICE_TYPE_XLA
	// XPU is Intel's XPU backend.
	XPU DeviceType = C.FULMEN_DEVICE_TYPE_XPU
	// HPU is Habana Gaudi's HPU backend.
	HPU DeviceType = C.FULMEN_DEVICE_TYPE_HPU
	// MTIA is Meta's MTIA backend.
	MTIA DeviceType = C.FULMEN_DEVICE_TYPE_MTIA
	// IPU is Graphcore's IPU backend.
	IPU DeviceType = C.FULMEN_DEVICE_TYPE_IPU
	// Meta is the meta device: shapes and dtypes without data.
	Meta DeviceType = C.FULMEN_DEVICE_TYPE_META
	// PrivateUse1 is an out-of-tree backend under the name it registered
	// (torch.utils.rename_privateuse1_backend, "npu" say).
	PrivateUse1 DeviceType = C.FULMEN_DEVICE_TYPE_PRIVATE_USE1
)

// Device is a device kind and index.
type Device struct {
	// Type is the device kind.
	Type DeviceType
	// Index is the device index (0 for the CPU).
	Index int64
}

// Compare is an elementwise comparison (the C enum fulmen_compare).
type Compare int32

// Comparison ops.
const (
	// Eq is a == b.
	Eq Compare = C.FULMEN_COMPARE_EQ
	// Ne is a != b.
	Ne Compare = C.FULMEN_COMPARE_NE
	// Lt is a < b.
	Lt Compare = C.FULMEN_COMPARE_LT
	// Le is a <= b.
	Le Compare = C.FULMEN_COMPARE_LE
	// Gt is a > b.
	Gt Compare = C.FULMEN_COMPARE_GT
	// Ge is a >= b.
	Ge Compare = C.FULMEN_COMPARE_GE
)

// Reduction says how a loss reduces over the batch (fulmen_reduction).
type Reduction int32

// Loss reductions.
const (
	// ReductionNone gives one loss per element.
	ReductionNone Reduction = C.FULMEN_REDUCTION_NONE
	// ReductionMean averages (PyTorch's default).
	ReductionMean Reduction = C.FULMEN_REDUCTION_MEAN
	// ReductionSum sums.
	ReductionSum Reduction = C.FULMEN_REDUCTION_SUM
	// ReductionBatchMean divides the sum by the batch size (KLDivLoss only).
	ReductionBatchMean Reduction = C.FULMEN_REDUCTION_BATCH_MEAN
)

// Stage is the running loop (fulmen_stage).
type Stage int32

// Stages.
const (
	// StageTrain is the training loop of Fit.
	StageTrain Stage = C.FULMEN_STAGE_TRAIN
	// StageValidate is validation (inside Fit or Validate).
	StageValidate Stage = C.FULMEN_STAGE_VALIDATE
	// StageTest is Test.
	StageTest Stage = C.FULMEN_STAGE_TEST
	// StagePredict is Predict.
	StagePredict Stage = C.FULMEN_STAGE_PREDICT
)

// String returns the stage's name.
func (s Stage) String() string {
	switch s {
	case StageTrain:
		return "train"
	case StageValidate:
		return "validate"
	case StageTest:
		return "test"
	case StagePredict:
		return "predict"
	}
	return "stage(?)"
}

// Interval says when a scheduler steps (fulmen_interval).
type Interval int32

// Scheduler intervals.
const (
	// IntervalStep steps after every optimizer step.
	IntervalStep Interval = C.FULMEN_INTERVAL_STEP
	// IntervalEpoch steps after every training epoch (Lightning's default).
	IntervalEpoch Interval = C.FULMEN_INTERVAL_EPOCH
)

// Activation is an activation layer kind (fulmen_activation).
type Activation int32

// Activation layers.
const (
	// ReLU is nn.ReLU.
	ReLU Activation = C.FULMEN_ACTIVATION_RELU
	// LeakyReLU is nn.LeakyReLU(param) (negative slope).
	LeakyReLU Activation = C.FULMEN_ACTIVATION_LEAKY_RELU
	// GELU is nn.GELU (exact).
	GELU Activation = C.FULMEN_ACTIVATION_GELU
	// Sigmoid is nn.Sigmoid.
	Sigmoid Activation = C.FULMEN_ACTIVATION_SIGMOID
	// Tanh is nn.Tanh.
	Tanh Activation = C.FULMEN_ACTIVATION_TANH
	// SiLU is nn.SiLU.
	SiLU Activation = C.FULMEN_ACTIVATION_SILU
	// ELU is nn.ELU(param) (alpha).
	ELU Activation = C.FULMEN_ACTIVATION_ELU
	// Softmax is nn.Softmax(dim = param).
	Softmax Activation = C.FULMEN_ACTIVATION_SOFTMAX
	// LogSoftmax is nn.LogSoftmax(dim = param).
	LogSoftmax Activation = C.FULMEN_ACTIVATION_LOG_SOFTMAX
	// Identity is nn.Identity.
	Identity Activation = C.FULMEN_ACTIVATION_IDENTITY
	// Mish is nn.Mish.
	Mish Activation = C.FULMEN_ACTIVATION_MISH
	// Hardswish is nn.Hardswish.
	Hardswish Activation = C.FULMEN_ACTIVATION_HARDSWISH
	// Hardsigmoid is nn.Hardsigmoid.
	Hardsigmoid Activation = C.FULMEN_ACTIVATION_HARDSIGMOID
	// ReLU6 is nn.ReLU6.
	ReLU6 Activation = C.FULMEN_ACTIVATION_RELU6
	// GELUTanh is nn.GELU(approximate="tanh").
	GELUTanh Activation = C.FULMEN_ACTIVATION_GELU_TANH
	// SELU is nn.SELU.
	SELU Activation = C.FULMEN_ACTIVATION_SELU
	// Softplus is nn.Softplus(beta = param; 0 means 1).
	Softplus Activation = C.FULMEN_ACTIVATION_SOFTPLUS
	// LogSigmoid is nn.LogSigmoid.
	LogSigmoid Activation = C.FULMEN_ACTIVATION_LOG_SIGMOID
)

// Scaling says how CSV features are scaled (fulmen_scaling).
type Scaling int32

// CSV feature scalings.
const (
	// ScalingNone keeps values as read.
	ScalingNone Scaling = C.FULMEN_SCALING_NONE
	// ScalingDivide divides by CSVOptions.ScaleDivisor (255 for pixels).
	ScalingDivide Scaling = C.FULMEN_SCALING_DIVIDE
	// ScalingMinMax scales each column to [0, 1] by its min and max.
	ScalingMinMax Scaling = C.FULMEN_SCALING_MIN_MAX
	// ScalingStandardize scales each column to zero mean and unit variance.
	ScalingStandardize Scaling = C.FULMEN_SCALING_STANDARDIZE
)

// LogFlags combine LogOnStep, LogOnEpoch (or LogDefaultStep /
// LogDefaultEpoch), LogProgBar, LogSyncDist, LogNoLogger, LogRankZeroOnly,
// LogNoDataloaderIdx, at most one of LogReduceSum / LogReduceMax /
// LogReduceMin, and LogGroup (StepContext.Log, StepContext.LogDict,
// HookContext.Log).
type LogFlags uint32

// LogGroup is the flag bits naming the group LogSyncDist reduces over
// (Lightning's sync_dist_group), groupID from HookContext.NewGroup:
// LogSyncDist|LogGroup(id).
func LogGroup(groupID uint32) LogFlags {
	return LogFlags((groupID << C.FULMEN_LOG_GROUP_SHIFT) & C.FULMEN_LOG_GROUP_MASK)
}

// Log flags.
const (
	// LogOnStep records the value of every step.
	LogOnStep LogFlags = C.FULMEN_LOG_ON_STEP
	// LogOnEpoch records the epoch's reduction (by default the mean
	// weighted by batch size).
	LogOnEpoch LogFlags = C.FULMEN_LOG_ON_EPOCH
	// LogProgBar shows the value in the progress output.
	LogProgBar LogFlags = C.FULMEN_LOG_PROG_BAR
	// LogSyncDist averages the value over ranks first (DDP's sync_dist;
	// every rank must log the same names in the same steps).
	LogSyncDist LogFlags = C.FULMEN_LOG_SYNC_DIST
	// LogNoLogger keeps the value out of the loggers (Lightning's
	// logger=False); callback metrics and progress still see it.
	LogNoLogger LogFlags = C.FULMEN_LOG_NO_LOGGER
	// LogRankZeroOnly marks a value logged on rank 0 only: never synced.
	LogRankZeroOnly LogFlags = C.FULMEN_LOG_RANK_ZERO_ONLY
	// LogReduceSum makes the epoch value the sum of the values.
	LogReduceSum LogFlags = C.FULMEN_LOG_REDUCE_SUM
	// LogReduceMax makes the epoch value the largest value.
	LogReduceMax LogFlags = C.FULMEN_LOG_REDUCE_MAX
	// LogReduceMin makes the epoch value the smallest value.
	LogReduceMin LogFlags = C.FULMEN_LOG_REDUCE_MIN
	// LogDefaultStep leaves on_step to the step function's or hook's
	// default (Lightning's on_step=None); not with LogOnStep.
	LogDefaultStep LogFlags = C.FULMEN_LOG_DEFAULT_STEP
	// LogDefaultEpoch leaves on_epoch to the default; not with LogOnEpoch.
	LogDefaultEpoch LogFlags = C.FULMEN_LOG_DEFAULT_EPOCH
	// LogDefault leaves both levels to the defaults (as flags naming
	// neither LogOnStep nor LogOnEpoch).
	LogDefault LogFlags = C.FULMEN_LOG_DEFAULT
	// LogNoDataloaderIdx keeps the name as given with several evaluation
	// loaders (Lightning's add_dataloader_idx=False); two loaders then
	// cannot log the same name.
	LogNoDataloaderIdx LogFlags = C.FULMEN_LOG_NO_DATALOADER_IDX
)

// Version is the library version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.fulmen_version()) }

// LibtorchVersion is the libtorch version the library was built against.
func LibtorchVersion() string { return C.GoString(C.fulmen_libtorch_version()) }

// ManualSeed seeds every random generator fulmen and libtorch use, as
// Lightning's seed_everything.
func ManualSeed(seed uint64) error { return check(C.fulmen_manual_seed(C.uint64_t(seed))) }

// SetNumThreads sets the number of threads libtorch uses for intra-op
// parallelism.
func SetNumThreads(n int) error { return check(C.fulmen_set_num_threads(C.int32_t(n))) }

// NumThreads is the number of threads libtorch uses for intra-op parallelism.
func NumThreads() int { return int(C.fulmen_get_num_threads()) }

// TorchFlags reports libtorch's process-wide switches a trainer sets during
// its runs: deterministic algorithms on, whether they only warn, and
// torch.backends.cudnn.benchmark.
func TorchFlags() (deterministic, warnOnly, cudnnBenchmark bool) {
	var d, w, b C.bool
	C.fulmen_torch_flags(&d, &w, &b)
	return bool(d), bool(w), bool(b)
}

// LiveHandles is the number of live fulmen handles of every type in this
// process: a leak check for tests and long-running programs.
func LiveHandles() int { return int(C.fulmen_live_handles()) }

// Must returns v, and panics if err is not nil. It shortens examples and
// set-up code; prefer handling the error elsewhere.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// cString converts s to a C string the caller frees with freeCString.
func cString(s string) *C.char { return C.CString(s) }

// freeCString frees a string from cString.
func freeCString(p *C.char) { C.free(unsafe.Pointer(p)) }

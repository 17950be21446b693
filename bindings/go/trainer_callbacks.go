package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// AddCallback adds a Go callback named name (non-empty) to the trainer:
// it receives every hook of the trainer's runs, before the module's own
// hooks, in the order callbacks were added. The trainer holds cb until it
// is closed.
func (t *Trainer) AddCallback(name string, cb Callback) error {
	if cb == nil {
		return &Error{Code: CodeNullArgument, Message: "AddCallback: nil Callback"}
	}
	n := cString(name)
	defer freeCString(n)
	h := cgo.NewHandle(cb)
	err := check(C.fulmen_go_trainer_add_callback(t.ptr(), n, C.uintptr_t(h)))
	runtime.KeepAlive(t)
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
	}
	return err
}

// CallbackList holds the callbacks a module's ConfigureCallbacks adds to
// a run; valid during that call only.
type CallbackList struct {
	h *C.fulmen_callback_list
}

// Add adds cb under name (non-empty; a trainer callback of that name is
// replaced for the run). The run holds cb until the trainer is closed.
func (l *CallbackList) Add(name string, cb Callback) error {
	if cb == nil {
		return &Error{Code: CodeNullArgument, Message: "CallbackList.Add: nil Callback"}
	}
	if l == nil || l.h == nil {
		return listGone("Add")
	}
	n := cString(name)
	defer freeCString(n)
	h := cgo.NewHandle(cb)
	err := check(C.fulmen_go_callback_list_add(l.h, n, C.uintptr_t(h)))
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
	}
	return err
}

// AddLogger adds a Go logger to the trainer, next to its file loggers
// (the "logger" option). The trainer holds l until it is closed.
func (t *Trainer) AddLogger(l Logger) error {
	if l == nil {
		return &Error{Code: CodeNullArgument, Message: "AddLogger: nil Logger"}
	}
	h := cgo.NewHandle(l)
	err := check(C.fulmen_go_trainer_add_logger(t.ptr(), C.uintptr_t(h)))
	runtime.KeepAlive(t)
	if err != nil {
		h.Delete()
	}
	return err
}

// Mode says whether a lower or a higher monitored value is better.
type Mode int32

// Modes.
const (
	// ModeMin: lower is better (a loss).
	ModeMin Mode = C.FULMEN_MODE_MIN
	// ModeMax: higher is better (an accuracy).
	ModeMax Mode = C.FULMEN_MODE_MAX
)

// CheckTiming says when a ModelCheckpoint saves or EarlyStopping checks.
type CheckTiming int32

// Check timings.
const (
	// CheckAuto: after validation when the fit validates, else at the end of
	// the training epoch (Lightning's None).
	CheckAuto CheckTiming = -1
	// CheckAfterValidation: after each validation run.
	CheckAfterValidation CheckTiming = 0
	// CheckOnTrainEpochEnd: at the end of each training epoch.
	CheckOnTrainEpochEnd CheckTiming = 1
)

// optCString is a C copy of s, or nil for "" (to free with freeCString).
func optCString(s string) *C.char {
	if s == "" {
		return nil
	}
	return cString(s)
}

// AddModelCheckpoint adds a ModelCheckpoint; the default one
// (enable_checkpointing) is then not added. BestModelPath, LastModelPath
// and BestModelScore read the first one added.
func (t *Trainer) AddModelCheckpoint(o ModelCheckpointOptions) error {
	err := withModelCheckpointOptions(o, func(c *C.fulmen_model_checkpoint_options) cErr {
		return C.fulmen_trainer_add_model_checkpoint(t.ptr(), c)
	})
	runtime.KeepAlive(t)
	return err
}

// withModelCheckpointOptions calls f with o as C options (its strings
// valid during the call).
func withModelCheckpointOptions(o ModelCheckpointOptions, f func(*C.fulmen_model_checkpoint_options) cErr) error {
	c := o.c()
	c.dirpath = optCString(o.Dirpath)
	c.filename = optCString(o.Filename)
	c.monitor = optCString(o.Monitor)
	defer freeCString(c.dirpath)
	defer freeCString(c.filename)
	defer freeCString(c.monitor)
	return check(f(&c))
}

// withEarlyStoppingOptions calls f with o as C options (its monitor valid
// during the call).
func withEarlyStoppingOptions(o EarlyStoppingOptions, f func(*C.fulmen_early_stopping_options) cErr) error {
	c := o.c()
	c.monitor = optCString(o.Monitor)
	defer freeCString(c.monitor)
	return check(f(&c))
}

// AddModelCheckpoint adds a ModelCheckpoint that replaces the trainer's
// ModelCheckpoints (Lightning replaces callbacks of the returned types).
func (l *CallbackList) AddModelCheckpoint(o ModelCheckpointOptions) error {
	if l == nil || l.h == nil {
		return listGone("AddModelCheckpoint")
	}
	return withModelCheckpointOptions(o, func(c *C.fulmen_model_checkpoint_options) cErr {
		return C.fulmen_callback_list_add_model_checkpoint(l.h, c)
	})
}

// AddEarlyStopping adds an EarlyStopping that replaces the trainer's.
func (l *CallbackList) AddEarlyStopping(o EarlyStoppingOptions) error {
	if l == nil || l.h == nil {
		return listGone("AddEarlyStopping")
	}
	return withEarlyStoppingOptions(o, func(c *C.fulmen_early_stopping_options) cErr {
		return C.fulmen_callback_list_add_early_stopping(l.h, c)
	})
}

// AddLRMonitorWith adds a LearningRateMonitor (as Trainer.AddLRMonitorWith)
// that replaces the trainer's.
func (l *CallbackList) AddLRMonitorWith(interval string, logMomentum, logWeightDecay bool) error {
	if l == nil || l.h == nil {
		return listGone("AddLRMonitorWith")
	}
	i := optCString(interval)
	defer freeCString(i)
	return check(C.fulmen_callback_list_add_lr_monitor(l.h, i, C.bool(logMomentum), C.bool(logWeightDecay)))
}

// listGone is the error of a CallbackList used after ConfigureCallbacks
// returned.
func listGone(call string) error {
	return &Error{Code: CodeInvalidState, Message: "CallbackList." + call + ": the list is used after ConfigureCallbacks returned"}
}

// DefaultEarlyStoppingOptions are Lightning's EarlyStopping defaults
// (from the library) watching monitor.
func DefaultEarlyStoppingOptions(monitor string) EarlyStoppingOptions {
	o := earlyStoppingOptionsFromC(C.fulmen_early_stopping_options_default())
	o.Monitor = monitor
	return o
}

// AddEarlyStopping adds an EarlyStopping callback.
func (t *Trainer) AddEarlyStopping(o EarlyStoppingOptions) error {
	err := withEarlyStoppingOptions(o, func(c *C.fulmen_early_stopping_options) cErr {
		return C.fulmen_trainer_add_early_stopping(t.ptr(), c)
	})
	runtime.KeepAlive(t)
	return err
}

// AddLRMonitor adds a LearningRateMonitor logging "lr-<Optimizer>" every
// log_every_n_steps (interval "step"), at each epoch start ("epoch"), or
// both ("").
func (t *Trainer) AddLRMonitor(interval string) error {
	i := optCString(interval)
	defer freeCString(i)
	err := check(C.fulmen_trainer_add_lr_monitor(t.ptr(), i))
	runtime.KeepAlive(t)
	return err
}

// AddLRMonitorWith is AddLRMonitor that also logs "<name>-momentum"
// (momentum, or beta1 for the Adam family) and "<name>-weight_decay" when
// asked (fulmen_trainer_add_lr_monitor_with).
func (t *Trainer) AddLRMonitorWith(interval string, logMomentum, logWeightDecay bool) error {
	i := optCString(interval)
	defer freeCString(i)
	err := check(C.fulmen_trainer_add_lr_monitor_with(t.ptr(), i, C.bool(logMomentum), C.bool(logWeightDecay)))
	runtime.KeepAlive(t)
	return err
}

// AddTimer adds a Timer that stops training after duration (seconds, or
// "DD:HH:MM:SS"; "" only measures), checked every interval ("step" or
// "epoch"; "" for "step").
func (t *Trainer) AddTimer(duration, interval string) error {
	d, i := optCString(duration), optCString(interval)
	defer freeCString(d)
	defer freeCString(i)
	err := check(C.fulmen_trainer_add_timer(t.ptr(), d, i))
	runtime.KeepAlive(t)
	return err
}

func (t *Trainer) checkpointPath(which C.int32_t) (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_checkpoint_path(t.ptr(), which, b, c, n)
	})
	runtime.KeepAlive(t)
	return s, err
}

// BestModelPath is the best checkpoint of the trainer's first
// ModelCheckpoint (the one added, else the default one): by the monitored
// metric, the latest without one. ErrInvalidState when none was saved.
func (t *Trainer) BestModelPath() (string, error) {
	return t.checkpointPath(C.FULMEN_CHECKPOINT_PATH_BEST)
}

// LastModelPath is the last.ckpt of the trainer's first ModelCheckpoint
// (with SaveLast); ErrInvalidState when none was saved.
func (t *Trainer) LastModelPath() (string, error) {
	return t.checkpointPath(C.FULMEN_CHECKPOINT_PATH_LAST)
}

// BestModelScore is the best monitored value of the trainer's first
// ModelCheckpoint; ErrInvalidState when it monitors nothing or saved
// nothing.
func (t *Trainer) BestModelScore() (float64, error) {
	var v C.double
	err := check(C.fulmen_trainer_best_model_score(t.ptr(), &v))
	runtime.KeepAlive(t)
	return float64(v), err
}

// AddGradientAccumulationScheduler adds a GradientAccumulationScheduler:
// from each epoch of scheduling on, that many batches add up before an
// optimizer step (epoch 0 accumulates 1 unless listed).
func (t *Trainer) AddGradientAccumulationScheduler(scheduling map[int64]int64) error {
	defer runtime.KeepAlive(t)
	return withSchedule(scheduling, func(ep, fp *C.int64_t, n C.size_t) cErr {
		return C.fulmen_trainer_add_gradient_accumulation_scheduler(t.ptr(), ep, fp, n)
	})
}

// withSchedule calls f with scheduling as the C arrays of epochs and
// factors.
func withSchedule(scheduling map[int64]int64, f func(ep, fp *C.int64_t, n C.size_t) cErr) error {
	epochs := make([]int64, 0, len(scheduling))
	factors := make([]int64, 0, len(scheduling))
	for e, f := range scheduling {
		epochs = append(epochs, e)
		factors = append(factors, f)
	}
	var ep, fp *C.int64_t
	if len(epochs) > 0 {
		ep, fp = (*C.int64_t)(unsafe.Pointer(&epochs[0])), (*C.int64_t)(unsafe.Pointer(&factors[0]))
	}
	err := check(f(ep, fp, C.size_t(len(epochs))))
	runtime.KeepAlive(epochs)
	runtime.KeepAlive(factors)
	return err
}

// AddWeightAveraging adds weight averaging: validation inside fit sees the
// average, training ends with it in the model, and checkpoints hold it as
// Lightning's EMAWeightAveraging / WeightAveraging do.
func (t *Trainer) AddWeightAveraging(opts WeightAveragingOptions) error {
	c := opts.c()
	err := check(C.fulmen_trainer_add_weight_averaging(t.ptr(), &c))
	runtime.KeepAlive(t)
	return err
}

// DefaultBackboneFinetuningOptions are Lightning's BackboneFinetuning
// defaults, for the module at "backbone".
func DefaultBackboneFinetuningOptions() BackboneFinetuningOptions {
	c := C.fulmen_backbone_finetuning_options_default()
	o := backboneFinetuningOptionsFromC(c)
	o.Backbone = C.GoString(c.backbone) // the library's static "backbone"
	return o
}

// AddBackboneFinetuning adds BackboneFinetuning: the backbone is frozen at
// setup (build the optimizers over Model.Parameters(true)), joins every
// optimizer as a new param group at UnfreezeBackboneAtEpoch, and its lr
// then grows until it meets the first group's.
func (t *Trainer) AddBackboneFinetuning(opts BackboneFinetuningOptions) error {
	b := cString(opts.Backbone)
	defer freeCString(b)
	c := opts.toC(b)
	err := check(C.fulmen_trainer_add_backbone_finetuning(t.ptr(), &c))
	runtime.KeepAlive(t)
	return err
}

// BackboneLambda is BackboneFinetuning's lambda_func: the factor of the
// backbone's lr for an epoch (each epoch start after the unfreeze asks for
// its epoch + 1, as Lightning does). It runs while the goroutine that
// called Fit waits; an error fails the fit and is its error's cause.
// A runtime.Goexit in it (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran it like an error naming it: see "Callbacks and runtime.Goexit"
// in the package documentation.
type BackboneLambda func(epoch int64) (float64, error)

// AddBackboneFinetuningFunc adds BackboneFinetuning as AddBackboneFinetuning
// does, the backbone's lr growing by lambdaFunc(epoch + 1) at each epoch
// start after the unfreeze instead of by opts.LambdaFactor. The trainer
// holds lambdaFunc until it is closed.
func (t *Trainer) AddBackboneFinetuningFunc(opts BackboneFinetuningOptions, lambdaFunc BackboneLambda) error {
	if lambdaFunc == nil {
		return &Error{Code: CodeNullArgument, Message: "AddBackboneFinetuningFunc: nil lambda"}
	}
	b := cString(opts.Backbone)
	defer freeCString(b)
	c := opts.toC(b)
	err := withHandle(lambdaFunc, func(h C.uintptr_t) cErr {
		return C.fulmen_go_add_backbone_finetuning_lambda(t.ptr(), &c, h)
	})
	runtime.KeepAlive(t)
	return err
}

// toC is the C struct of opts, with the backbone path b (owned by the
// caller).
func (opts BackboneFinetuningOptions) toC(b *C.char) C.fulmen_backbone_finetuning_options {
	c := opts.c()
	c.backbone = b
	return c
}

//export fulmenGoBackboneLambda
func fulmenGoBackboneLambda(ud C.uintptr_t, epoch C.int64_t, out *C.double) *C.fulmen_error {
	return runCallback(func() error {
		v, err := cgo.Handle(ud).Value().(BackboneLambda)(int64(epoch))
		*out = C.double(v)
		return err
	})
}

// AddStochasticWeightAveraging adds Lightning's StochasticWeightAveraging:
// SWALR in place of the optimizer's scheduler from SWAEpochStart, an equal
// average of the weights at each epoch start, the average in the model at
// the end (and, with BatchNorms, one forward-only epoch more for their
// statistics).
func (t *Trainer) AddStochasticWeightAveraging(opts StochasticWeightAveragingOptions) error {
	defer runtime.KeepAlive(t)
	return opts.with(func(c *C.fulmen_stochastic_weight_averaging_options) cErr {
		return C.fulmen_trainer_add_stochastic_weight_averaging(t.ptr(), c)
	})
}

// with calls f with opts as C options.
func (opts StochasticWeightAveragingOptions) with(f func(*C.fulmen_stochastic_weight_averaging_options) cErr) error {
	c := opts.c()
	if n := len(opts.SWALRs); n > 0 {
		// C memory: the options struct may not point into Go's.
		lrs := (*[1 << 28]C.double)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.double(0)))))[:n:n]
		defer C.free(unsafe.Pointer(&lrs[0]))
		for i, lr := range opts.SWALRs {
			lrs[i] = C.double(lr)
		}
		c.swa_lrs, c.n_swa_lrs = &lrs[0], C.size_t(n)
	}
	return check(f(&c))
}

// AddOnExceptionCheckpoint adds an OnExceptionCheckpoint: a failed fit
// saves dirpath/filename.ckpt (filename "": "on_exception") to resume from.
func (t *Trainer) AddOnExceptionCheckpoint(dirpath, filename string) error {
	d, f := cString(dirpath), optCString(filename)
	defer freeCString(d)
	defer freeCString(f)
	err := check(C.fulmen_trainer_add_on_exception_checkpoint(t.ptr(), d, f))
	runtime.KeepAlive(t)
	return err
}

// AddDeviceStatsMonitor adds a DeviceStatsMonitor: the device's statistics
// go to the loggers around each batch when they are due. cpuStats is
// Lightning's: nil the device's own, true adds the CPU's, false logs
// nothing on a CPU.
func (t *Trainer) AddDeviceStatsMonitor(cpuStats *bool) error {
	err := check(C.fulmen_trainer_add_device_stats_monitor(t.ptr(), cpuStatsArg(cpuStats)))
	runtime.KeepAlive(t)
	return err
}

// cpuStatsArg is cpuStats as C takes it: -1 for nil, else 0 or 1.
func cpuStatsArg(cpuStats *bool) C.int32_t {
	switch {
	case cpuStats == nil:
		return -1
	case *cpuStats:
		return 1
	}
	return 0
}

// AddThroughputMonitor adds a ThroughputMonitor: batches and samples per
// second over the last windowSize batches, logged as
// "train/device/samples_per_sec" and so on (separator "": "/").
func (t *Trainer) AddThroughputMonitor(windowSize int, separator string) error {
	if windowSize < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "AddThroughputMonitor: negative window size"}
	}
	s := optCString(separator)
	defer freeCString(s)
	err := check(C.fulmen_trainer_add_throughput_monitor(t.ptr(), C.size_t(windowSize), s))
	runtime.KeepAlive(t)
	return err
}

// AddThroughputMonitorFlops is AddThroughputMonitor with FLOP metrics
// (Lightning's flops_per_batch): flopsPerBatch is the FLOPs of one batch
// on one device, availableFlops the device's peak FLOPs per second (0: no
// MFU; see AvailableFlops). It also logs "train/device/flops_per_sec",
// "train/device/mfu" and, with several ranks, "train/flops_per_sec".
func (t *Trainer) AddThroughputMonitorFlops(windowSize int, separator string, flopsPerBatch, availableFlops float64) error {
	if windowSize < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "AddThroughputMonitorFlops: negative window size"}
	}
	s := optCString(separator)
	defer freeCString(s)
	err := check(C.fulmen_trainer_add_throughput_monitor_flops(t.ptr(), C.size_t(windowSize), s, C.double(flopsPerBatch), C.double(availableFlops)))
	runtime.KeepAlive(t)
	return err
}

// AvailableFlops is the peak FLOPs per second of the CUDA device named
// deviceName for dtype ("float32", "tfloat32", "bfloat16", ...), from
// Lightning's table; 0 when the table does not know them.
func AvailableFlops(deviceName, dtype string) (float64, error) {
	n := cString(deviceName)
	defer freeCString(n)
	d := cString(dtype)
	defer freeCString(d)
	var out C.double
	err := check(C.fulmen_available_flops(n, d, &out))
	return float64(out), err
}

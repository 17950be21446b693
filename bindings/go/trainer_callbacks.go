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

// ModelCheckpointOptions are the options of Lightning's ModelCheckpoint.
// Start from DefaultModelCheckpointOptions: the zero value saves nothing.
type ModelCheckpointOptions struct {
	// Dirpath is the folder ("": <log dir>/checkpoints).
	Dirpath string
	// Filename is the name template, such as "{epoch}-{val_loss:.3f}"
	// ("": "{epoch}-{step}").
	Filename string
	// Monitor is the metric to rank by ("": keep the latest).
	Monitor string
	// Mode says whether lower or higher Monitor values are better.
	Mode Mode
	// SaveTopK is the number of best checkpoints to keep (-1 all, 0 none).
	SaveTopK int64
	// SaveLast also writes last.ckpt.
	SaveLast bool
	// EveryNTrainSteps saves every n optimizer steps (0: off).
	EveryNTrainSteps int64
	// EveryNEpochs saves every n epochs.
	EveryNEpochs int64
	// SaveWeightsOnly saves only the weights (such a checkpoint cannot
	// resume a fit).
	SaveWeightsOnly bool
	// AutoInsertMetricName writes name=value in file names.
	AutoInsertMetricName bool
	// SaveOnTrainEpochEnd says when to save.
	SaveOnTrainEpochEnd CheckTiming
}

// DefaultModelCheckpointOptions are Lightning's ModelCheckpoint defaults
// (from the library): keep the latest checkpoint, every epoch.
func DefaultModelCheckpointOptions() ModelCheckpointOptions {
	d := C.fulmen_model_checkpoint_options_default()
	return ModelCheckpointOptions{
		Mode:                 Mode(d.mode),
		SaveTopK:             int64(d.save_top_k),
		SaveLast:             bool(d.save_last),
		EveryNTrainSteps:     int64(d.every_n_train_steps),
		EveryNEpochs:         int64(d.every_n_epochs),
		SaveWeightsOnly:      bool(d.save_weights_only),
		AutoInsertMetricName: bool(d.auto_insert_metric_name),
		SaveOnTrainEpochEnd:  CheckTiming(d.save_on_train_epoch_end),
	}
}

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
	c := C.fulmen_model_checkpoint_options_default()
	c.dirpath = optCString(o.Dirpath)
	c.filename = optCString(o.Filename)
	c.monitor = optCString(o.Monitor)
	defer freeCString(c.dirpath)
	defer freeCString(c.filename)
	defer freeCString(c.monitor)
	c.mode = C.int32_t(o.Mode)
	c.save_top_k = C.int64_t(o.SaveTopK)
	c.save_last = C.bool(o.SaveLast)
	c.every_n_train_steps = C.int64_t(o.EveryNTrainSteps)
	c.every_n_epochs = C.int64_t(o.EveryNEpochs)
	c.save_weights_only = C.bool(o.SaveWeightsOnly)
	c.auto_insert_metric_name = C.bool(o.AutoInsertMetricName)
	c.save_on_train_epoch_end = C.int32_t(o.SaveOnTrainEpochEnd)
	err := check(C.fulmen_trainer_add_model_checkpoint(t.ptr(), &c))
	runtime.KeepAlive(t)
	return err
}

// EarlyStoppingOptions are the options of Lightning's EarlyStopping.
// Start from DefaultEarlyStoppingOptions.
type EarlyStoppingOptions struct {
	// Monitor is the metric to watch (required).
	Monitor string
	// MinDelta is the smallest change that counts as an improvement.
	MinDelta float64
	// Patience is the number of checks without improvement before stopping.
	Patience int64
	// Mode says whether lower or higher values are better.
	Mode Mode
	// Strict makes a missing metric an error.
	Strict bool
	// CheckFinite stops on NaN or infinite values.
	CheckFinite bool
	// StoppingThreshold stops once the metric is better than this (NaN: none).
	StoppingThreshold float64
	// DivergenceThreshold stops once the metric is worse than this (NaN: none).
	DivergenceThreshold float64
	// CheckOnTrainEpochEnd says when to check.
	CheckOnTrainEpochEnd CheckTiming
}

// DefaultEarlyStoppingOptions are Lightning's EarlyStopping defaults
// (from the library) watching monitor.
func DefaultEarlyStoppingOptions(monitor string) EarlyStoppingOptions {
	d := C.fulmen_early_stopping_options_default()
	return EarlyStoppingOptions{
		Monitor:              monitor,
		MinDelta:             float64(d.min_delta),
		Patience:             int64(d.patience),
		Mode:                 Mode(d.mode),
		Strict:               bool(d.strict),
		CheckFinite:          bool(d.check_finite),
		StoppingThreshold:    float64(d.stopping_threshold),
		DivergenceThreshold:  float64(d.divergence_threshold),
		CheckOnTrainEpochEnd: CheckTiming(d.check_on_train_epoch_end),
	}
}

// AddEarlyStopping adds an EarlyStopping callback.
func (t *Trainer) AddEarlyStopping(o EarlyStoppingOptions) error {
	c := C.fulmen_early_stopping_options_default()
	c.monitor = optCString(o.Monitor)
	defer freeCString(c.monitor)
	c.min_delta = C.double(o.MinDelta)
	c.patience = C.int64_t(o.Patience)
	c.mode = C.int32_t(o.Mode)
	c.strict = C.bool(o.Strict)
	c.check_finite = C.bool(o.CheckFinite)
	c.stopping_threshold = C.double(o.StoppingThreshold)
	c.divergence_threshold = C.double(o.DivergenceThreshold)
	c.check_on_train_epoch_end = C.int32_t(o.CheckOnTrainEpochEnd)
	err := check(C.fulmen_trainer_add_early_stopping(t.ptr(), &c))
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
	err := check(C.fulmen_trainer_add_gradient_accumulation_scheduler(t.ptr(), ep, fp, C.size_t(len(epochs))))
	runtime.KeepAlive(t)
	runtime.KeepAlive(epochs)
	runtime.KeepAlive(factors)
	return err
}

// WeightAveragingOptions are the options of weight averaging (Lightning's
// EMAWeightAveraging, or WeightAveraging's equal average when EMA is false).
type WeightAveragingOptions struct {
	// EMA keeps an exponential moving average with Decay; false averages
	// every update equally (SWA).
	EMA bool
	// Decay is the EMA decay in [0, 1].
	Decay float64
	// UseBuffers averages the buffers too; otherwise they are copied.
	UseBuffers bool
	// UpdateEveryNSteps updates after every n-th optimizer step (0: not
	// per step).
	UpdateEveryNSteps int64
	// UpdateStartingAtStep is the first step index updated (-1: the first).
	UpdateStartingAtStep int64
	// UpdateStartingAtEpoch also updates at each epoch end from this epoch
	// on (-1: never).
	UpdateStartingAtEpoch int64
}

// DefaultWeightAveragingOptions are Lightning's EMAWeightAveraging defaults.
func DefaultWeightAveragingOptions() WeightAveragingOptions {
	c := C.fulmen_weight_averaging_options_default()
	return WeightAveragingOptions{EMA: bool(c.ema), Decay: float64(c.decay), UseBuffers: bool(c.use_buffers),
		UpdateEveryNSteps: int64(c.update_every_n_steps), UpdateStartingAtStep: int64(c.update_starting_at_step),
		UpdateStartingAtEpoch: int64(c.update_starting_at_epoch)}
}

// AddWeightAveraging adds weight averaging: validation inside fit sees the
// average, training ends with it in the model, and checkpoints hold it as
// Lightning's EMAWeightAveraging / WeightAveraging do.
func (t *Trainer) AddWeightAveraging(opts WeightAveragingOptions) error {
	c := C.fulmen_weight_averaging_options{ema: C.bool(opts.EMA), decay: C.double(opts.Decay),
		use_buffers: C.bool(opts.UseBuffers), update_every_n_steps: C.int64_t(opts.UpdateEveryNSteps),
		update_starting_at_step:  C.int64_t(opts.UpdateStartingAtStep),
		update_starting_at_epoch: C.int64_t(opts.UpdateStartingAtEpoch)}
	err := check(C.fulmen_trainer_add_weight_averaging(t.ptr(), &c))
	runtime.KeepAlive(t)
	return err
}

// BackboneFinetuningOptions are the options of BackboneFinetuning
// (Lightning's, with the backbone named by its path in the model).
type BackboneFinetuningOptions struct {
	// Backbone is the backbone's dotted path in the model ("backbone",
	// "0", "encoder.layers").
	Backbone string
	// UnfreezeBackboneAtEpoch is the epoch whose start unfreezes it.
	UnfreezeBackboneAtEpoch int64
	// LambdaFactor multiplies the backbone's lr at each later epoch.
	LambdaFactor float64
	// BackboneInitialRatioLR is its first lr as a fraction of the first
	// group's.
	BackboneInitialRatioLR float64
	// BackboneInitialLR is its first lr instead (< 0: the ratio).
	BackboneInitialLR float64
	// ShouldAlign keeps its lr at most the first group's.
	ShouldAlign bool
	// TrainBN keeps the backbone's BatchNorms trainable all along.
	TrainBN bool
	// Verbose prints both lrs at each change on stderr.
	Verbose bool
	// Rounding is the number of decimals printed.
	Rounding int32
}

// DefaultBackboneFinetuningOptions are Lightning's BackboneFinetuning
// defaults, for the module at "backbone".
func DefaultBackboneFinetuningOptions() BackboneFinetuningOptions {
	c := C.fulmen_backbone_finetuning_options_default()
	return BackboneFinetuningOptions{Backbone: "backbone", UnfreezeBackboneAtEpoch: int64(c.unfreeze_backbone_at_epoch),
		LambdaFactor: float64(c.lambda_factor), BackboneInitialRatioLR: float64(c.backbone_initial_ratio_lr),
		BackboneInitialLR: float64(c.backbone_initial_lr), ShouldAlign: bool(c.should_align),
		TrainBN: bool(c.train_bn), Verbose: bool(c.verbose), Rounding: int32(c.rounding)}
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
	h := cgo.NewHandle(lambdaFunc)
	err := check(C.fulmen_go_add_backbone_finetuning_lambda(t.ptr(), &c, C.uintptr_t(h)))
	runtime.KeepAlive(t)
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
	}
	return err
}

// toC is the C struct of opts, with the backbone path b (owned by the
// caller).
func (opts BackboneFinetuningOptions) toC(b *C.char) C.fulmen_backbone_finetuning_options {
	return C.fulmen_backbone_finetuning_options{backbone: b,
		unfreeze_backbone_at_epoch: C.int64_t(opts.UnfreezeBackboneAtEpoch),
		lambda_factor:              C.double(opts.LambdaFactor),
		backbone_initial_ratio_lr:  C.double(opts.BackboneInitialRatioLR),
		backbone_initial_lr:        C.double(opts.BackboneInitialLR), should_align: C.bool(opts.ShouldAlign),
		train_bn: C.bool(opts.TrainBN), verbose: C.bool(opts.Verbose), rounding: C.int32_t(opts.Rounding)}
}

//export fulmenGoBackboneLambda
func fulmenGoBackboneLambda(ud C.uintptr_t, epoch C.int64_t, out *C.double) *C.fulmen_error {
	return runCallback(func() error {
		v, err := cgo.Handle(ud).Value().(BackboneLambda)(int64(epoch))
		*out = C.double(v)
		return err
	})
}

// StochasticWeightAveragingOptions are the options of Lightning's
// StochasticWeightAveraging.
type StochasticWeightAveragingOptions struct {
	// SWALR is the SWA lr of every param group.
	SWALR float64
	// SWALRs, when not empty, holds one SWA lr per param group instead.
	SWALRs []float64
	// SWAEpochStart is the epoch averaging starts at, counted from 1; 0
	// uses SWAEpochStartFraction.
	SWAEpochStart int64
	// SWAEpochStartFraction starts it at int(fraction * max_epochs).
	SWAEpochStartFraction float64
	// AnnealingEpochs is the number of epochs annealing to the SWA lr.
	AnnealingEpochs int64
	// LinearAnneal anneals linearly instead of by a cosine.
	LinearAnneal bool
	// AverageOnDevice keeps the average on the model's device instead of
	// the CPU.
	AverageOnDevice bool
}

// DefaultStochasticWeightAveragingOptions are Lightning's
// StochasticWeightAveraging defaults with swaLR for every param group.
func DefaultStochasticWeightAveragingOptions(swaLR float64) StochasticWeightAveragingOptions {
	c := C.fulmen_stochastic_weight_averaging_options_default(C.double(swaLR))
	return StochasticWeightAveragingOptions{SWALR: swaLR, SWAEpochStart: int64(c.swa_epoch_start),
		SWAEpochStartFraction: float64(c.swa_epoch_start_fraction), AnnealingEpochs: int64(c.annealing_epochs),
		LinearAnneal: bool(c.linear_anneal), AverageOnDevice: bool(c.average_on_device)}
}

// AddStochasticWeightAveraging adds Lightning's StochasticWeightAveraging:
// SWALR in place of the optimizer's scheduler from SWAEpochStart, an equal
// average of the weights at each epoch start, the average in the model at
// the end (and, with BatchNorms, one forward-only epoch more for their
// statistics).
func (t *Trainer) AddStochasticWeightAveraging(opts StochasticWeightAveragingOptions) error {
	c := C.fulmen_stochastic_weight_averaging_options{swa_lr: C.double(opts.SWALR),
		swa_epoch_start:          C.int64_t(opts.SWAEpochStart),
		swa_epoch_start_fraction: C.double(opts.SWAEpochStartFraction),
		annealing_epochs:         C.int64_t(opts.AnnealingEpochs), linear_anneal: C.bool(opts.LinearAnneal),
		average_on_device: C.bool(opts.AverageOnDevice)}
	if n := len(opts.SWALRs); n > 0 {
		// C memory: the options struct may not point into Go's.
		lrs := (*[1 << 28]C.double)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.double(0)))))[:n:n]
		defer C.free(unsafe.Pointer(&lrs[0]))
		for i, lr := range opts.SWALRs {
			lrs[i] = C.double(lr)
		}
		c.swa_lrs, c.n_swa_lrs = &lrs[0], C.size_t(n)
	}
	err := check(C.fulmen_trainer_add_stochastic_weight_averaging(t.ptr(), &c))
	runtime.KeepAlive(t)
	return err
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
	v := C.int32_t(-1)
	if cpuStats != nil {
		v = 0
		if *cpuStats {
			v = 1
		}
	}
	err := check(C.fulmen_trainer_add_device_stats_monitor(t.ptr(), v))
	runtime.KeepAlive(t)
	return err
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

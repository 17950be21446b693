package fulmen

/*
#include <fulmen.h>
*/
import "C"

import "runtime"

// The built-in callbacks a module's ConfigureCallbacks may add besides
// ModelCheckpoint, EarlyStopping and LearningRateMonitor: each as the
// Trainer's method of the same name makes it, replacing the trainer's
// callbacks of its type for the run (Lightning's configure_callbacks).

// AddBackboneFinetuning adds BackboneFinetuning (as
// Trainer.AddBackboneFinetuning).
func (l *CallbackList) AddBackboneFinetuning(opts BackboneFinetuningOptions) error {
	if l == nil || l.h == nil {
		return listGone("AddBackboneFinetuning")
	}
	b := cString(opts.Backbone)
	defer freeCString(b)
	c := opts.toC(b)
	return check(C.fulmen_callback_list_add_backbone_finetuning(l.h, &c))
}

// AddStochasticWeightAveraging adds StochasticWeightAveraging (as
// Trainer.AddStochasticWeightAveraging); a second one in the list is
// refused.
func (l *CallbackList) AddStochasticWeightAveraging(opts StochasticWeightAveragingOptions) error {
	if l == nil || l.h == nil {
		return listGone("AddStochasticWeightAveraging")
	}
	return opts.with(func(c *C.fulmen_stochastic_weight_averaging_options) cErr {
		return C.fulmen_callback_list_add_stochastic_weight_averaging(l.h, c)
	})
}

// AddWeightAveraging adds weight averaging (as Trainer.AddWeightAveraging).
func (l *CallbackList) AddWeightAveraging(opts WeightAveragingOptions) error {
	if l == nil || l.h == nil {
		return listGone("AddWeightAveraging")
	}
	c := opts.c()
	return check(C.fulmen_callback_list_add_weight_averaging(l.h, &c))
}

// AddGradientAccumulationScheduler adds a GradientAccumulationScheduler
// (as Trainer.AddGradientAccumulationScheduler).
func (l *CallbackList) AddGradientAccumulationScheduler(scheduling map[int64]int64) error {
	if l == nil || l.h == nil {
		return listGone("AddGradientAccumulationScheduler")
	}
	return withSchedule(scheduling, func(ep, fp *C.int64_t, n C.size_t) cErr {
		return C.fulmen_callback_list_add_gradient_accumulation_scheduler(l.h, ep, fp, n)
	})
}

// AddModelPruning adds ModelPruning with a copy of p (as
// Trainer.AddModelPruning).
func (l *CallbackList) AddModelPruning(p *ModelPruning) error {
	if l == nil || l.h == nil {
		return listGone("AddModelPruning")
	}
	err := check(C.fulmen_callback_list_add_model_pruning(l.h, p.ptr()))
	runtime.KeepAlive(p)
	return err
}

// AddTimer adds a Timer (as Trainer.AddTimer).
func (l *CallbackList) AddTimer(duration, interval string) error {
	if l == nil || l.h == nil {
		return listGone("AddTimer")
	}
	d, i := optCString(duration), optCString(interval)
	defer freeCString(d)
	defer freeCString(i)
	return check(C.fulmen_callback_list_add_timer(l.h, d, i))
}

// AddThroughputMonitor adds a ThroughputMonitor (as
// Trainer.AddThroughputMonitorFlops; 0 FLOPs: none).
func (l *CallbackList) AddThroughputMonitor(windowSize int, separator string, flopsPerBatch, availableFlops float64) error {
	if l == nil || l.h == nil {
		return listGone("AddThroughputMonitor")
	}
	if windowSize < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "AddThroughputMonitor: negative window size"}
	}
	s := optCString(separator)
	defer freeCString(s)
	return check(C.fulmen_callback_list_add_throughput_monitor(l.h, C.size_t(windowSize), s, C.double(flopsPerBatch), C.double(availableFlops)))
}

// AddDeviceStatsMonitor adds a DeviceStatsMonitor (as
// Trainer.AddDeviceStatsMonitor).
func (l *CallbackList) AddDeviceStatsMonitor(cpuStats *bool) error {
	if l == nil || l.h == nil {
		return listGone("AddDeviceStatsMonitor")
	}
	return check(C.fulmen_callback_list_add_device_stats_monitor(l.h, cpuStatsArg(cpuStats)))
}

// AddSpikeDetection adds a SpikeDetection (as Trainer.AddSpikeDetection).
func (l *CallbackList) AddSpikeDetection(opts SpikeDetectionOptions) error {
	if l == nil || l.h == nil {
		return listGone("AddSpikeDetection")
	}
	if opts.Window < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "AddSpikeDetection: negative window"}
	}
	path := optCString(opts.ExcludeBatchesPath)
	defer freeCString(path)
	return check(C.fulmen_callback_list_add_spike_detection(l.h, C.int32_t(opts.Mode), C.size_t(opts.Window),
		C.int64_t(opts.Warmup), C.double(opts.Atol), C.double(opts.Rtol), path, C.bool(opts.FiniteOnly)))
}

// AddOnExceptionCheckpoint adds an OnExceptionCheckpoint (as
// Trainer.AddOnExceptionCheckpoint).
func (l *CallbackList) AddOnExceptionCheckpoint(dirpath, filename string) error {
	if l == nil || l.h == nil {
		return listGone("AddOnExceptionCheckpoint")
	}
	d, f := cString(dirpath), optCString(filename)
	defer freeCString(d)
	defer freeCString(f)
	return check(C.fulmen_callback_list_add_on_exception_checkpoint(l.h, d, f))
}

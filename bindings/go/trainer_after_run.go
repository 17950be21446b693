package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// SaveCheckpoint is Lightning's trainer.save_checkpoint(path, weights_only)
// after Fit (or Validate, Test, Predict) returned: module's weights and,
// unless weightsOnly, what the last fit left on the trainer (optimizer and
// scheduler states, loop progress, callbacks' states and on_save_checkpoint
// entries, the random states as they are now), in the trainer's
// checkpoint_format. A Fit given the file with CkptPath continues where
// that fit ended. module must be the module of the trainer's last run
// (ErrInvalidArgument otherwise); before any run, or for a full checkpoint
// when no fit configured optimizers, ErrInvalidState. The on_save_checkpoint
// hooks run while this goroutine waits; ctx is checked at their start, as
// in Fit.
func (t *Trainer) SaveCheckpoint(ctx context.Context, module *LightningModule, path string, weightsOnly bool) error {
	p := cString(path)
	defer freeCString(p)
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_save_checkpoint(t.ptr(), module.ptr(), p, C.bool(weightsOnly))
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	return err
}

// value reads one of the trainer's values, converted to Go.
func (t *Trainer) value(get func(*C.fulmen_trainer, **C.fulmen_value) cErr) (any, error) {
	var out *C.fulmen_value
	err := check(get(t.ptr(), &out))
	runtime.KeepAlive(t)
	if err != nil {
		return nil, err
	}
	return goValue(out)
}

// metrics reads one of the trainer's metric dicts (name -> value).
func (t *Trainer) metrics(get func(*C.fulmen_trainer, **C.fulmen_value) cErr) (map[string]float64, error) {
	v, err := t.value(get)
	if err != nil {
		return nil, err
	}
	return metricsOf(v)
}

// metricsOf reads a converted dict of metrics (name -> value).
func metricsOf(v any) (map[string]float64, error) {
	d, ok := v.(Dict)
	if !ok {
		return nil, &Error{Code: CodeUnsupported, Message: fmt.Sprintf("the trainer's metrics are a %T, not a dict", v)}
	}
	m := make(map[string]float64, len(d))
	for _, e := range d {
		k, kok := e.Key.(string)
		x, xok := e.Value.(float64)
		if !kok || !xok {
			return nil, &Error{Code: CodeUnsupported, Message: fmt.Sprintf("a metric entry %v: %v is not a name and a number", e.Key, e.Value)}
		}
		m[k] = x
	}
	return m, nil
}

// EvalResults is what the last Validate or Test returned (Lightning's
// return value of trainer.validate / trainer.test): per loader, the epoch
// values logged for the loggers (each loader's own with several, names
// ending in /dataloader_idx_N) and those of the stage's start and epoch
// hooks. Empty after Fit or Predict and when every loader's limit was 0
// (the run was skipped, hooks and all).
func (t *Trainer) EvalResults() ([]map[string]float64, error) {
	v, err := t.value(func(h *C.fulmen_trainer, o **C.fulmen_value) cErr {
		return C.fulmen_trainer_eval_results(h, o)
	})
	if err != nil {
		return nil, err
	}
	items, ok := v.([]any)
	if !ok {
		return nil, &Error{Code: CodeUnsupported, Message: fmt.Sprintf("the evaluation results are a %T, not a list", v)}
	}
	results := make([]map[string]float64, 0, len(items))
	for _, item := range items {
		m, err := metricsOf(item)
		if err != nil {
			return nil, err
		}
		results = append(results, m)
	}
	return results, nil
}

// evalResultsAfter is run's error, or the results of the run it made.
func (t *Trainer) evalResultsAfter(err error) ([]map[string]float64, error) {
	if err != nil {
		return nil, err
	}
	return t.EvalResults()
}

// CallbackMetrics is Lightning's trainer.callback_metrics of the last run:
// the latest value of every logged metric (empty before any run).
func (t *Trainer) CallbackMetrics() (map[string]float64, error) {
	return t.metrics(func(h *C.fulmen_trainer, o **C.fulmen_value) cErr {
		return C.fulmen_trainer_callback_metrics(h, o)
	})
}

// LoggedMetrics is Lightning's trainer.logged_metrics of the last run: the
// latest value of every metric logged for the loggers, whether or not a
// logger is active.
func (t *Trainer) LoggedMetrics() (map[string]float64, error) {
	return t.metrics(func(h *C.fulmen_trainer, o **C.fulmen_value) cErr {
		return C.fulmen_trainer_logged_metrics(h, o)
	})
}

// ProgressBarMetrics is Lightning's trainer.progress_bar_metrics of the
// last run: the metrics logged with LogProgBar.
func (t *Trainer) ProgressBarMetrics() (map[string]float64, error) {
	return t.metrics(func(h *C.fulmen_trainer, o **C.fulmen_value) cErr {
		return C.fulmen_trainer_progress_bar_metrics(h, o)
	})
}

// EstimatedSteppingBatches is Lightning's trainer.estimated_stepping_batches
// for the last fit's training data: ok is false when the run is unbounded
// (Lightning's inf); ErrInvalidState before a fit loaded its data.
func (t *Trainer) EstimatedSteppingBatches() (steps int64, ok bool, err error) {
	var v C.int64_t
	err = check(C.fulmen_trainer_estimated_stepping_batches(t.ptr(), &v))
	runtime.KeepAlive(t)
	if err != nil {
		return 0, false, err
	}
	return int64(v), v >= 0, nil
}

// ShouldStop is Lightning's trainer.should_stop after the last fit: whether
// a hook, EarlyStopping or a Timer asked it to stop.
func (t *Trainer) ShouldStop() (bool, error) {
	var v C.bool
	err := check(C.fulmen_trainer_should_stop(t.ptr(), &v))
	runtime.KeepAlive(t)
	return bool(v), err
}

// NumTrainingBatches is Lightning's trainer.num_training_batches: the last
// fit's training batches per epoch; ok is false before a fit or for a
// source of unknown length (Lightning's inf).
func (t *Trainer) NumTrainingBatches() (n int64, ok bool, err error) {
	var v C.int64_t
	err = check(C.fulmen_trainer_num_training_batches(t.ptr(), &v))
	runtime.KeepAlive(t)
	if err != nil {
		return 0, false, err
	}
	return int64(v), v >= 0, nil
}

// countsReader is one of the C calls that write an array of counts.
type countsReader func(t *C.fulmen_trainer, out *C.int64_t, capacity C.size_t, count *C.size_t) cErr

// readCounts reads the array f writes, sized by a first call.
func (t *Trainer) readCounts(f countsReader) ([]int64, error) {
	defer runtime.KeepAlive(t)
	return readCountArray(func(o *C.int64_t, c C.size_t, n *C.size_t) cErr { return f(t.ptr(), o, c, n) })
}

// readCountArray reads the array of counts f writes: a first call with no
// room gives the count (ErrOutOfRange), a second fills it.
func readCountArray(f func(out *C.int64_t, capacity C.size_t, count *C.size_t) cErr) ([]int64, error) {
	var n C.size_t
	err := check(f(nil, 0, &n))
	if err == nil {
		return []int64{}, nil
	}
	if !errors.Is(err, ErrOutOfRange) {
		return nil, err
	}
	counts := make([]C.int64_t, int(n))
	if err := check(f(&counts[0], n, &n)); err != nil {
		return nil, err
	}
	out := make([]int64, int(n))
	for i := range out {
		out[i] = int64(counts[i])
	}
	return out, nil
}

// NumValBatches is Lightning's trainer.num_val_batches: per validation
// loader of the last fit's validation or Validate run, its batches after
// limit_val_batches; -1 for a loader of unknown length (Lightning's inf).
func (t *Trainer) NumValBatches() ([]int64, error) {
	return t.readCounts(func(p *C.fulmen_trainer, o *C.int64_t, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_num_val_batches(p, o, c, n)
	})
}

// NumTestBatches is Lightning's trainer.num_test_batches, as NumValBatches
// for the last Test run.
func (t *Trainer) NumTestBatches() ([]int64, error) {
	return t.readCounts(func(p *C.fulmen_trainer, o *C.int64_t, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_num_test_batches(p, o, c, n)
	})
}

// NumPredictBatches is Lightning's trainer.num_predict_batches, as
// NumValBatches for the last Predict run.
func (t *Trainer) NumPredictBatches() ([]int64, error) {
	return t.readCounts(func(p *C.fulmen_trainer, o *C.int64_t, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_num_predict_batches(p, o, c, n)
	})
}

// NumSanityValBatches is Lightning's trainer.num_sanity_val_batches: the
// batches of each validation loader the last fit's sanity check ran.
func (t *Trainer) NumSanityValBatches() ([]int64, error) {
	return t.readCounts(func(p *C.fulmen_trainer, o *C.int64_t, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_num_sanity_val_batches(p, o, c, n)
	})
}

// DeviceIDs is Lightning's trainer.device_ids: the index of each device a
// run uses on this node (-1 for a CPU device).
func (t *Trainer) DeviceIDs() ([]int64, error) {
	return t.readCounts(func(p *C.fulmen_trainer, o *C.int64_t, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_device_ids(p, o, c, n)
	})
}

// EarlyStoppingState is the state of a trainer's EarlyStopping callback.
type EarlyStoppingState struct {
	// WaitCount counts the evaluations without improvement since the best.
	WaitCount int64
	// StoppedEpoch is the epoch it stopped the fit in (0: it did not).
	StoppedEpoch int64
	// BestScore is the best monitored value (+-Inf before one).
	BestScore float64
}

// EarlyStoppingState is the state of the trainer's first EarlyStopping
// (Lightning's wait_count, stopped_epoch, best_score); ErrInvalidState
// without one.
func (t *Trainer) EarlyStoppingState() (EarlyStoppingState, error) {
	var w, e C.int64_t
	var b C.double
	err := check(C.fulmen_trainer_early_stopping_state(t.ptr(), &w, &e, &b))
	runtime.KeepAlive(t)
	return EarlyStoppingState{WaitCount: int64(w), StoppedEpoch: int64(e), BestScore: float64(b)}, err
}

// GradScale is the GradScaler's loss scale at the end of the last fit
// (16-mixed); ErrInvalidState without one.
func (t *Trainer) GradScale() (float64, error) {
	var v C.double
	err := check(C.fulmen_trainer_grad_scale(t.ptr(), &v))
	runtime.KeepAlive(t)
	return float64(v), err
}

// IsLastBatch is Lightning's trainer.is_last_batch after the last fit:
// whether the last batch it trained on was its epoch's last.
func (t *Trainer) IsLastBatch() (bool, error) {
	var v C.bool
	err := check(C.fulmen_trainer_is_last_batch(t.ptr(), &v))
	runtime.KeepAlive(t)
	return bool(v), err
}

// NumDevices is Lightning's trainer.num_devices: the devices a run uses on
// this node (the last run's, or before any run the options' resolved).
func (t *Trainer) NumDevices() (int, error) {
	var v C.size_t
	err := check(C.fulmen_trainer_num_devices(t.ptr(), &v))
	runtime.KeepAlive(t)
	return int(v), err
}

// NodeRank is Lightning's trainer.node_rank: this node's index in a
// distributed job (the last run's, or before any run the environment's).
func (t *Trainer) NodeRank() (int, error) {
	var v C.size_t
	err := check(C.fulmen_trainer_node_rank(t.ptr(), &v))
	runtime.KeepAlive(t)
	return int(v), err
}

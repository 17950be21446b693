package fulmen

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
)

// LRFindMode is how the learning rate grows in a range test.
type LRFindMode int32

const (
	// LRFindExponential grows it exponentially (the default).
	LRFindExponential LRFindMode = C.FULMEN_LR_FIND_MODE_EXPONENTIAL
	// LRFindLinear grows it linearly.
	LRFindLinear LRFindMode = C.FULMEN_LR_FIND_MODE_LINEAR
)

// LRFindResult is what a range test found: each step's learning rate and
// the smoothed loss after it.
type LRFindResult struct {
	// LRs are the learning rates of the steps.
	LRs []float64
	// Losses are the smoothed losses after them (NaN where a step gave none).
	Losses []float64
	h      handle[*C.fulmen_lr_find_result]
}

// LRFind is Lightning's Tuner(trainer).lr_find: a learning-rate range test
// with t's options (no loggers, checkpoints or callbacks); the module's
// weights are put back afterwards. val may be nil. Close the result.
func (t *Trainer) LRFind(ctx context.Context, module *LightningModule, train, val *Loader, o LRFindOptions) (*LRFindResult, error) {
	c := o.c()
	var out *C.fulmen_lr_find_result
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_lr_find(t.ptr(), module.ptr(), train.ptr(), val.ptr(), &c, &out)
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(train)
	runtime.KeepAlive(val)
	if err != nil {
		return nil, err
	}
	r := &LRFindResult{}
	r.h.store(out)
	runtime.SetFinalizer(r, (*LRFindResult).Close)
	var n C.size_t
	if err := check(C.fulmen_lr_find_result_points(out, nil, nil, 0, &n)); err != nil {
		r.Close()
		return nil, err
	}
	r.LRs = make([]float64, int(n))
	r.Losses = make([]float64, int(n))
	if n > 0 {
		if err := check(C.fulmen_lr_find_result_points(out, (*C.double)(&r.LRs[0]), (*C.double)(&r.Losses[0]), n, &n)); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// Suggestion is Lightning's suggestion(skipBegin, skipEnd): the learning
// rate where the loss falls fastest; ok is false with too few points.
func (r *LRFindResult) Suggestion(skipBegin, skipEnd int) (lr float64, ok bool, err error) {
	if skipBegin < 0 || skipEnd < 0 {
		return 0, false, &Error{Code: CodeInvalidArgument, Message: "Suggestion: skips must be >= 0"}
	}
	var v C.double
	var found C.bool
	var h *C.fulmen_lr_find_result
	if r != nil {
		h = r.h.load()
	}
	err = check(C.fulmen_lr_find_result_suggestion(h, C.size_t(skipBegin), C.size_t(skipEnd), &v, &found))
	runtime.KeepAlive(r)
	return float64(v), bool(found), err
}

// Close frees the result's handle; idempotent. The error is always nil.
func (r *LRFindResult) Close() error {
	if r == nil {
		return nil
	}
	if h := r.h.take(); h != nil {
		C.fulmen_lr_find_result_free(h)
		runtime.SetFinalizer(r, nil)
	}
	return nil
}

// ScaleBatchSize is Lightning's Tuner(trainer).scale_batch_size: trials at
// growing batch sizes until one runs out of memory (CodeOutOfMemory); train
// then batches by the size found, which is returned. The module's weights
// are put back afterwards. val may be nil.
func (t *Trainer) ScaleBatchSize(ctx context.Context, module *LightningModule, train, val *Loader, o BatchSizeFinderOptions) (int, error) {
	if o.InitVal < 0 || o.MaxVal < 0 {
		return 0, &Error{Code: CodeInvalidArgument, Message: "ScaleBatchSize: a negative batch size"}
	}
	c := o.c()
	var found C.size_t
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_scale_batch_size(t.ptr(), module.ptr(), train.ptr(), val.ptr(), &c, &found)
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(train)
	runtime.KeepAlive(val)
	return int(found), err
}

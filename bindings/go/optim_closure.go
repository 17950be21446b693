package fulmen

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
)

// LBFGSOptions are torch.optim.LBFGS's options.
type LBFGSOptions struct {
	// LR is the step length after the first iteration.
	LR float64
	// MaxIter is the number of iterations per step (at least 1).
	MaxIter int64
	// MaxEval is the number of loss evaluations per step; 0 is torch's
	// default, MaxIter * 5 / 4.
	MaxEval int64
	// ToleranceGrad stops a step when no gradient entry exceeds it.
	ToleranceGrad float64
	// ToleranceChange stops a step when the loss or the step changes less.
	ToleranceChange float64
	// HistorySize is the number of update pairs kept (1 to 1048576).
	HistorySize int64
	// StrongWolfe uses the strong-Wolfe line search (torch's
	// line_search_fn="strong_wolfe") instead of a fixed step.
	StrongWolfe bool
}

// DefaultLBFGSOptions are torch's LBFGS defaults.
func DefaultLBFGSOptions() LBFGSOptions {
	c := C.fulmen_lbfgs_options_default()
	return LBFGSOptions{LR: float64(c.lr), MaxIter: int64(c.max_iter), MaxEval: int64(c.max_eval),
		ToleranceGrad: float64(c.tolerance_grad), ToleranceChange: float64(c.tolerance_change),
		HistorySize: int64(c.history_size), StrongWolfe: bool(c.strong_wolfe)}
}

// NewLBFGS creates an LBFGS optimizer over model's parameters (model may be
// nil) and params, in one parameter group. It steps only with a closure:
// StepClosure, or a Trainer's automatic optimization as the only optimizer.
func NewLBFGS(model *Model, params []*Tensor, opts LBFGSOptions) (*Optimizer, error) {
	c := C.fulmen_lbfgs_options{lr: C.double(opts.LR), max_iter: C.int64_t(opts.MaxIter), max_eval: C.int64_t(opts.MaxEval),
		tolerance_grad: C.double(opts.ToleranceGrad), tolerance_change: C.double(opts.ToleranceChange),
		history_size: C.int64_t(opts.HistorySize), strong_wolfe: C.bool(opts.StrongWolfe)}
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_lbfgs_new(m, p, n, &c, o)
	})
}

// Closure computes the loss at the parameters' current values, runs its
// backward and returns the loss.
// A runtime.Goexit in it (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran it like an error naming it: see "Callbacks and runtime.Goexit"
// in the package documentation.
type Closure func() (float64, error)

// StepClosure is torch's optimizer.step(closure): the optimizer calls
// closure as often as it needs (LBFGS: up to MaxEval times, once more with
// the line search; the others once, before their update), while this goroutine waits, each time with every gradient
// reset first. The closure must not use this optimizer. Its error ends the
// step and is the returned error's cause. Returns the first evaluation's
// loss.
func (o *Optimizer) StepClosure(closure Closure) (float64, error) {
	if closure == nil {
		return 0, &Error{Code: CodeNullArgument, Message: "the closure is nil"}
	}
	h := cgo.NewHandle(closure)
	defer h.Delete()
	var first C.double
	err := withCallbacks(nil, func() *C.fulmen_error {
		return C.fulmen_go_step_closure(o.ptr(), C.uintptr_t(h), &first)
	})
	runtime.KeepAlive(o)
	return float64(first), err
}

//export fulmenGoClosure
func fulmenGoClosure(ud C.uintptr_t, loss *C.double) *C.fulmen_error {
	return runCallback(func() error {
		v, err := cgo.Handle(ud).Value().(Closure)()
		*loss = C.double(v)
		return err
	})
}

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

// NewLBFGS creates an LBFGS optimizer over model's parameters (model may be
// nil) and params, in one parameter group. It steps only with a closure:
// StepClosure, or a Trainer's automatic optimization as the only optimizer.
func NewLBFGS(model *Model, params []*Tensor, opts LBFGSOptions) (*Optimizer, error) {
	c := opts.c()
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

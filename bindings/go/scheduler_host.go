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

// CyclicMode is how CyclicLR's amplitude scales (fulmen_cyclic_mode).
type CyclicMode int32

const (
	// CyclicTriangular keeps the amplitude.
	CyclicTriangular CyclicMode = C.FULMEN_CYCLIC_MODE_TRIANGULAR
	// CyclicTriangular2 halves the amplitude every cycle.
	CyclicTriangular2 CyclicMode = C.FULMEN_CYCLIC_MODE_TRIANGULAR2
	// CyclicExpRange scales the amplitude by Gamma^step.
	CyclicExpRange CyclicMode = C.FULMEN_CYCLIC_MODE_EXP_RANGE
)

// NewCyclicLR is CyclicLR with opts (usually stepped every batch).
func NewCyclicLR(opt *Optimizer, opts CyclicLROptions) (*Scheduler, error) {
	c := opts.c()
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_cyclic_lr_new(o, &c, out)
	})
}

// NewCyclicLRRanges is NewCyclicLR with each param group's own range
// (torch's base_lr and max_lr as lists; an empty list: the options' value
// for every group).
func NewCyclicLRRanges(opt *Optimizer, opts CyclicLROptions, baseLRs, maxLRs []float64) (*Scheduler, error) {
	c := opts.c()
	lower, upper := doubles(baseLRs), doubles(maxLRs)
	s, err := makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_cyclic_lr_ranges_new(o, &c, lower, C.size_t(len(baseLRs)), upper, C.size_t(len(maxLRs)), out)
	})
	runtime.KeepAlive(baseLRs)
	runtime.KeepAlive(maxLRs)
	return s, err
}

// LRLambda is the factor of LambdaLR / MultiplicativeLR for a step (0 at
// construction) and a parameter group. It runs while the goroutine that
// steps the scheduler (in a fit, the one that called Fit) waits; an error fails that
// step and is its error's cause.
// A runtime.Goexit in it (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran it like an error naming it: see "Callbacks and runtime.Goexit"
// in the package documentation.
type LRLambda func(step int64, group int) (float64, error)

// NewLambdaLR is LambdaLR: the lr of a group is its initial lr times
// factor(step, group).
func NewLambdaLR(opt *Optimizer, factor LRLambda) (*Scheduler, error) {
	return newLambdaScheduler(opt, factor, false)
}

// NewMultiplicativeLR is MultiplicativeLR: from step 1 on, each step
// multiplies a group's lr by factor(step, group).
func NewMultiplicativeLR(opt *Optimizer, factor LRLambda) (*Scheduler, error) {
	return newLambdaScheduler(opt, factor, true)
}

func newLambdaScheduler(opt *Optimizer, factor LRLambda, multiplicative bool) (*Scheduler, error) {
	if factor == nil {
		return nil, &Error{Code: CodeNullArgument, Message: "the lr lambda is nil"}
	}
	h := cgo.NewHandle(factor)
	var out *C.fulmen_scheduler
	err := withCallbacks(nil, func() *C.fulmen_error {
		return C.fulmen_go_lambda_scheduler_new(opt.ptr(), C.uintptr_t(h), C.bool(multiplicative), &out)
	})
	runtime.KeepAlive(opt)
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return nil, err
	}
	s := &Scheduler{}
	s.h.store(out)
	runtime.SetFinalizer(s, (*Scheduler).Close)
	return s, nil
}

//export fulmenGoLrLambda
func fulmenGoLrLambda(ud C.uintptr_t, step C.int64_t, group C.size_t, out *C.double) *C.fulmen_error {
	return runCallback(func() error {
		v, err := cgo.Handle(ud).Value().(LRLambda)(int64(step), int(group))
		*out = C.double(v)
		return err
	})
}

package fulmen

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// HostOptimizer is an optimizer written in Go (torch's Optimizer subclass
// with its own step), made a fulmen Optimizer by NewHostOptimizer and
// usable wherever a built-in one is: OptimizerConfig.Add with schedulers
// (which set the lr Step reads), manual optimization, checkpoints and
// resuming. Step updates the parameters in place from their gradients,
// under no_grad; its error ends the step (and a fit) and is the returned
// error's cause. Implement HostOptimizerZeroGrad to clear gradients
// yourself (otherwise fulmen sets them to none) and HostOptimizerState to
// save state with the param groups. The methods run while the goroutine
// that steps the optimizer (in a fit, the one that called Fit) waits.
// A runtime.Goexit in them (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran them like an error naming it: see "Callbacks and
// runtime.Goexit" in the package documentation.
type HostOptimizer interface {
	Step(ctx *OptimizerStepContext) error
}

// HostOptimizerZeroGrad is a HostOptimizer with its own
// zero_grad(set_to_none); the trainer and ZeroGrad pass setToNone true.
type HostOptimizerZeroGrad interface {
	ZeroGrad(setToNone bool) error
}

// HostOptimizerState is a HostOptimizer whose state is saved with its
// param groups: StateDict's bytes (nil: nothing; at most
// MaxOptimizerState) go into checkpoints and SaveState's files, and come
// back to LoadStateDict on resume and LoadState (empty when none were
// saved).
type HostOptimizerState interface {
	StateDict() ([]byte, error)
	LoadStateDict(state []byte) error
}

// MaxOptimizerState is the most bytes a HostOptimizerState may save
// (FULMEN_MAX_OPTIMIZER_STATE).
const MaxOptimizerState = C.FULMEN_MAX_OPTIMIZER_STATE

// OptimizerStepContext is what a HostOptimizer's Step reads: the param
// groups. Valid during that Step only.
type OptimizerStepContext struct {
	c *C.fulmen_optimizer_step_context
}

// GroupCount is the number of param groups.
func (c *OptimizerStepContext) GroupCount() (int, error) {
	var n C.size_t
	err := check(C.fulmen_optimizer_step_context_group_count(c.c, &n))
	return int(n), err
}

// ParamCount is the number of parameters of group group.
func (c *OptimizerStepContext) ParamCount(group int) (int, error) {
	if group < 0 {
		return 0, &Error{Code: CodeOutOfRange, Message: "ParamCount: negative group"}
	}
	var n C.size_t
	err := check(C.fulmen_optimizer_step_context_param_count(c.c, C.size_t(group), &n))
	return int(n), err
}

// Param is parameter index of group group: it shares storage and gradient
// (Grad) with the model's parameter; update it in place (AddInPlace,
// CopyFrom, ...). Released when Step returns.
func (c *OptimizerStepContext) Param(group, index int) (*Tensor, error) {
	if group < 0 || index < 0 {
		return nil, &Error{Code: CodeOutOfRange, Message: "Param: negative group or index"}
	}
	var out *C.fulmen_tensor
	if err := check(C.fulmen_optimizer_step_context_param(c.c, C.size_t(group), C.size_t(index), &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Get is group group's "lr" (as the schedulers set it), "weight_decay",
// "momentum" or "initial_lr".
func (c *OptimizerStepContext) Get(group int, name string) (float64, error) {
	if group < 0 {
		return 0, &Error{Code: CodeOutOfRange, Message: "Get: negative group"}
	}
	cs := cString(name)
	defer freeCString(cs)
	var v C.double
	err := check(C.fulmen_optimizer_step_context_get(c.c, C.size_t(group), cs, &v))
	return float64(v), err
}

// LR is group group's learning rate.
func (c *OptimizerStepContext) LR(group int) (float64, error) { return c.Get(group, "lr") }

// hostOptimizerState is what the userdata handle of a host optimizer
// refers to.
type hostOptimizerState struct {
	impl  HostOptimizer
	state unsafe.Pointer // C copy of what StateDict last gave
}

func (s *hostOptimizerState) freeState() {
	if s.state != nil {
		C.free(s.state)
		s.state = nil
	}
}

// NewHostOptimizer makes impl an Optimizer over model's parameters (model
// may be nil) and params, one param group with learning rate lr.
func NewHostOptimizer(impl HostOptimizer, model *Model, params []*Tensor, lr float64) (*Optimizer, error) {
	if impl == nil {
		return nil, &Error{Code: CodeNullArgument, Message: "the host optimizer is nil"}
	}
	var slots C.unsigned
	if _, ok := impl.(HostOptimizerZeroGrad); ok {
		slots |= C.FULMEN_GO_OPT_ZERO_GRAD
	}
	if _, ok := impl.(HostOptimizerState); ok {
		slots |= C.FULMEN_GO_OPT_STATE
	}
	h := cgo.NewHandle(&hostOptimizerState{impl: impl})
	o, err := makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, out **C.fulmen_optimizer) cErr {
		return C.fulmen_go_host_optimizer_new(C.uintptr_t(h), slots, m, p, n, C.double(lr), out)
	})
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return nil, err
	}
	return o, nil
}

// SaveState saves the optimizer's state (optimizer.state_dict()) at path
// without a trainer: a safetensors file as fulmen's checkpoints, written
// atomically.
func (o *Optimizer) SaveState(path string) error {
	cs := cString(path)
	defer freeCString(cs)
	err := withCallbacks(nil, func() *C.fulmen_error { return C.fulmen_optimizer_save_state(o.ptr(), cs) })
	runtime.KeepAlive(o)
	return err
}

// LoadState loads a state SaveState wrote for an optimizer of this kind
// and param groups; on error nothing changes.
func (o *Optimizer) LoadState(path string) error {
	cs := cString(path)
	defer freeCString(cs)
	err := withCallbacks(nil, func() *C.fulmen_error { return C.fulmen_optimizer_load_state(o.ptr(), cs) })
	runtime.KeepAlive(o)
	return err
}

// SaveState saves the scheduler's state (scheduler.state_dict()) at path
// without a trainer.
func (s *Scheduler) SaveState(path string) error {
	cs := cString(path)
	defer freeCString(cs)
	err := check(C.fulmen_scheduler_save_state(s.ptr(), cs))
	runtime.KeepAlive(s)
	return err
}

// LoadState loads a state SaveState wrote for a scheduler of this kind;
// the optimizer's lr changes at the next step. On error nothing changes.
func (s *Scheduler) LoadState(path string) error {
	cs := cString(path)
	defer freeCString(cs)
	err := check(C.fulmen_scheduler_load_state(s.ptr(), cs))
	runtime.KeepAlive(s)
	return err
}

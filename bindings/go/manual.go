package fulmen

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"runtime/cgo"
)

// SetAutomaticOptimization sets Lightning's automatic_optimization
// (default true). Off, the trainer no longer zeroes gradients, runs
// backward, clips or steps: TrainingStep does it through its StepContext
// (ManualBackward, OptimizerStep, OptimizerZeroGrad, ToggleOptimizer,
// SchedulerStep) and may return a nil loss. Fit then refuses
// accumulate_grad_batches > 1, gradient_clip_val and strategy "dp".
func (m *LightningModule) SetAutomaticOptimization(enabled bool) error {
	err := check(C.fulmen_lightning_module_set_automatic_optimization(m.ptr(), C.bool(enabled)))
	runtime.KeepAlive(m)
	return err
}

// OptimizerCount is the number of optimizers ConfigureOptimizers added;
// the calls below number them from 0 in that order. Like every manual
// optimization call, it is ErrInvalidState outside a TrainingStep with
// automatic optimization off.
func (c *StepContext) OptimizerCount() (int, error) {
	var n C.size_t
	err := check(C.fulmen_step_context_optimizer_count(c.ptr(), &n))
	return int(n), err
}

// ManualBackward is Lightning's manual_backward(loss): backward through
// the precision plugin, with the callbacks' backward hooks.
func (c *StepContext) ManualBackward(loss *Tensor) error {
	err := check(C.fulmen_step_context_manual_backward(c.ptr(), loss.ptr()))
	runtime.KeepAlive(loss)
	return err
}

// OptimizerStep steps optimizer index (counting in GlobalStep); made is
// false when 16-mixed skipped the update for inf/NaN gradients.
func (c *StepContext) OptimizerStep(index int) (made bool, err error) {
	i, err := optimizerIndex(index)
	if err != nil {
		return false, err
	}
	var m C.bool
	err = check(C.fulmen_step_context_optimizer_step(c.ptr(), i, &m))
	return bool(m), err
}

// OptimizerStepNoWait is OptimizerStep without asking whether the update
// was made: under 16-mixed the answer waits for the device (the inf
// check), which this call never does with fused updates.
func (c *StepContext) OptimizerStepNoWait(index int) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_optimizer_step(c.ptr(), i, nil))
}

// OptimizerZeroGrad sets the gradients of optimizer index's parameters to
// none.
func (c *StepContext) OptimizerZeroGrad(index int) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_optimizer_zero_grad(c.ptr(), i))
}

// ToggleOptimizer is Lightning's toggle_optimizer: only optimizer index's
// parameters require grad until UntoggleOptimizer.
func (c *StepContext) ToggleOptimizer(index int) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_toggle_optimizer(c.ptr(), i))
}

// UntoggleOptimizer is Lightning's untoggle_optimizer.
func (c *StepContext) UntoggleOptimizer(index int) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_untoggle_optimizer(c.ptr(), i))
}

// SchedulerStep steps the scheduler of optimizer index.
func (c *StepContext) SchedulerStep(index int) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_scheduler_step(c.ptr(), i, nil))
}

// SchedulerStepMetric steps the scheduler of optimizer index with the
// metric ReduceLROnPlateau reads.
func (c *StepContext) SchedulerStepMetric(index int, metric float64) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	m := C.double(metric)
	return check(C.fulmen_step_context_scheduler_step(c.ptr(), i, &m))
}

// LRSchedulerCount is the number of schedulers over all optimizers
// (Lightning's len(self.lr_schedulers())).
func (c *StepContext) LRSchedulerCount() (int, error) {
	var n C.size_t
	err := check(C.fulmen_step_context_lr_scheduler_count(c.ptr(), &n))
	return int(n), err
}

// LRSchedulerStep steps scheduler index of Lightning's
// self.lr_schedulers() list (optimizer 0's in the order added, then
// optimizer 1's, ...).
func (c *StepContext) LRSchedulerStep(index int) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_lr_scheduler_step(c.ptr(), i, nil))
}

// LRSchedulerStepMetric steps scheduler index of self.lr_schedulers()
// with the metric ReduceLROnPlateau reads.
func (c *StepContext) LRSchedulerStepMetric(index int, metric float64) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	m := C.double(metric)
	return check(C.fulmen_step_context_lr_scheduler_step(c.ptr(), i, &m))
}

// LearningRate is the learning rate of parameter group group of optimizer
// index.
func (c *StepContext) LearningRate(index, group int) (float64, error) {
	i, err := optimizerIndex(index)
	if err != nil {
		return 0, err
	}
	g, err := optimizerIndex(group)
	if err != nil {
		return 0, err
	}
	var v C.double
	err = check(C.fulmen_step_context_learning_rate(c.ptr(), i, g, &v))
	return float64(v), err
}

// optimizerIndex converts an optimizer (or group) index, refusing a
// negative one.
func optimizerIndex(i int) (C.size_t, error) {
	if i < 0 {
		return 0, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("index %d is negative", i)}
	}
	return C.size_t(i), nil
}

// StepClosure computes the loss at the parameters' current values through
// the StepContext it is given (valid during the call only): it zeroes the
// optimizer's gradients, runs ManualBackward, and returns the loss.
// A runtime.Goexit in it (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran it like an error naming it: see "Callbacks and runtime.Goexit"
// in the package documentation.
type StepClosure func(ctx *StepContext) (float64, error)

// OptimizerStepClosure is Lightning's opt.step(closure=closure) for
// optimizer index: LBFGS calls closure as often as it needs (each call
// followed by the callbacks' on_before_optimizer_step), the others once
// before stepping as OptimizerStep does. The step's own context is in use
// until it returns (ErrInvalidState): the closure uses the one it gets.
// Counts in GlobalStep. Returns the first evaluation's loss (torch's
// return value) and whether the update was made; the closure's error
// ends the step and is the returned error's cause.
func (c *StepContext) OptimizerStepClosure(index int, closure StepClosure) (first float64, made bool, err error) {
	i, err := optimizerIndex(index)
	if err != nil {
		return 0, false, err
	}
	if closure == nil {
		return 0, false, &Error{Code: CodeNullArgument, Message: "the closure is nil"}
	}
	h := cgo.NewHandle(closure)
	defer h.Delete()
	var parent context.Context
	if call := currentCall(); call != nil {
		parent = call.ctx
	}
	var f C.double
	var m C.bool
	err = withCallbacks(parent, func() *C.fulmen_error {
		return C.fulmen_go_step_context_closure(c.ptr(), i, C.uintptr_t(h), &f, &m)
	})
	return float64(f), bool(m), err
}

//export fulmenGoStepContextClosure
func fulmenGoStepContextClosure(ud C.uintptr_t, ctx *C.fulmen_step_context, loss *C.double) *C.fulmen_error {
	return runCallback(func() error {
		v, err := cgo.Handle(ud).Value().(StepClosure)(&StepContext{h: ctx})
		*loss = C.double(v)
		return err
	})
}

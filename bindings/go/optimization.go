package fulmen

/*
#include "shim.h"
*/
import "C"

// ClipAlgorithm is how gradients are clipped (Lightning's
// gradient_clip_algorithm).
type ClipAlgorithm int32

const (
	// ClipNorm scales the gradients so their joint 2-norm is at most the value.
	ClipNorm ClipAlgorithm = C.FULMEN_CLIP_NORM
	// ClipValue clamps every gradient element into [-value, value].
	ClipValue ClipAlgorithm = C.FULMEN_CLIP_VALUE
)

// OptimizationContext is the context of one call of an optimization hook
// of the module (ModuleFuncs.OptimizerStep, OptimizerZeroGrad,
// LrSchedulerStep, Backward, ConfigureGradientClipping). Borrowed: valid
// only during that call.
type OptimizationContext struct {
	h *C.fulmen_optimization_context
}

func (c *OptimizationContext) ptr() *C.fulmen_optimization_context {
	if c == nil {
		gcStress()
		return nil
	}
	h := c.h
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

func (c *OptimizationContext) end() { c.h = nil }

// OptimizerClosure is the closure OptimizerStep gets (Lightning's
// optimizer_closure): the training step, OptimizerZeroGrad and Backward.
// Borrowed: valid only during that call.
type OptimizerClosure struct {
	h *C.fulmen_optimizer_closure
}

func (c *OptimizerClosure) ptr() *C.fulmen_optimizer_closure {
	if c == nil {
		gcStress()
		return nil
	}
	h := c.h
	gcStress()
	return h
}

func (c *OptimizerClosure) end() { c.h = nil }

// Run runs the closure alone, without stepping (Lightning's
// optimizer_closure()); ok is false when the training step returned no
// loss.
func (c *OptimizerClosure) Run() (loss float64, ok bool, err error) {
	var v C.double
	var has C.bool
	err = check(C.fulmen_optimizer_closure_run(c.ptr(), &v, &has))
	return float64(v), bool(has), err
}

// Step is Lightning's optimizer.step(closure=closure) in OptimizerStep:
// the closure, then unscale, on_before_optimizer_step,
// ConfigureGradientClipping, the update and the loss-scale update; made
// is false when 16-mixed skipped the update. Once per batch.
func (c *OptimizationContext) Step(closure *OptimizerClosure) (made bool, err error) {
	var v C.bool
	err = check(C.fulmen_optimization_context_step(c.ptr(), closure.ptr(), &v))
	return bool(v), err
}

// StepNoWait is Step without asking whether the update was made: under
// 16-mixed the answer waits for the device, which this call never does
// with fused updates.
func (c *OptimizationContext) StepNoWait(closure *OptimizerClosure) error {
	return check(C.fulmen_optimization_context_step(c.ptr(), closure.ptr(), nil))
}

// ZeroGrad is optimizer.zero_grad(set_to_none) of the hook's optimizer.
func (c *OptimizationContext) ZeroGrad(setToNone bool) error {
	return check(C.fulmen_optimization_context_zero_grad(c.ptr(), C.bool(setToNone)))
}

// ClipGradients is Lightning's clip_gradients in
// ConfigureGradientClipping (value <= 0 clips nothing).
func (c *OptimizationContext) ClipGradients(value float64, algorithm ClipAlgorithm) error {
	return check(C.fulmen_optimization_context_clip_gradients(c.ptr(), C.double(value), C.int32_t(algorithm)))
}

// SchedulerStep steps the hook's scheduler in LrSchedulerStep; metric
// (nil: none) is what a ReduceLROnPlateau steps on.
func (c *OptimizationContext) SchedulerStep(metric *float64) error {
	var m C.double
	var p *C.double
	if metric != nil {
		m = C.double(*metric)
		p = &m
	}
	return check(C.fulmen_optimization_context_scheduler_step(c.ptr(), p))
}

// LearningRate is the learning rate of parameter group group of the
// hook's optimizer.
func (c *OptimizationContext) LearningRate(group int) (float64, error) {
	g, err := optimizerIndex(group)
	if err != nil {
		return 0, err
	}
	var v C.double
	err = check(C.fulmen_optimization_context_learning_rate(c.ptr(), g, &v))
	return float64(v), err
}

// SetLearningRate sets the learning rate of parameter group group (a
// warm-up in OptimizerStep).
func (c *OptimizationContext) SetLearningRate(group int, lr float64) error {
	g, err := optimizerIndex(group)
	if err != nil {
		return err
	}
	return check(C.fulmen_optimization_context_set_learning_rate(c.ptr(), g, C.double(lr)))
}

// Epoch is Lightning's current_epoch.
func (c *OptimizationContext) Epoch() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_optimization_context_epoch(c.ptr(), &v))
	return int64(v), err
}

// GlobalStep is Lightning's global_step (this batch's step not counted
// yet).
func (c *OptimizationContext) GlobalStep() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_optimization_context_global_step(c.ptr(), &v))
	return int64(v), err
}

// ClipGradients is Lightning's clip_gradients(optimizers()[index], value,
// algorithm) in a TrainingStep with automatic optimization off: under
// 16-mixed the gradients are unscaled first (the next OptimizerStep does
// not again); value <= 0 clips nothing.
func (c *StepContext) ClipGradients(index int, value float64, algorithm ClipAlgorithm) error {
	i, err := optimizerIndex(index)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_clip_gradients(c.ptr(), i, C.double(value), C.int32_t(algorithm)))
}

//export fulmenGoOptimizerStep
func fulmenGoOptimizerStep(ud C.uintptr_t, ctx *C.fulmen_optimization_context, epoch, batchIdx C.int64_t, idx C.size_t, closure *C.fulmen_optimizer_closure) *C.fulmen_error {
	return runCallback(func() error {
		oc, cl := &OptimizationContext{h: ctx}, &OptimizerClosure{h: closure}
		defer oc.end()
		defer cl.end()
		return moduleOf(ud).funcs.OptimizerStep(oc, int64(epoch), int64(batchIdx), int(idx), cl)
	})
}

//export fulmenGoOptimizerZeroGrad
func fulmenGoOptimizerZeroGrad(ud C.uintptr_t, ctx *C.fulmen_optimization_context, epoch, batchIdx C.int64_t, idx C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		oc := &OptimizationContext{h: ctx}
		defer oc.end()
		return moduleOf(ud).funcs.OptimizerZeroGrad(oc, int64(epoch), int64(batchIdx), int(idx))
	})
}

//export fulmenGoLrSchedulerStep
func fulmenGoLrSchedulerStep(ud C.uintptr_t, ctx *C.fulmen_optimization_context, idx C.size_t, metric *C.double) *C.fulmen_error {
	return runCallback(func() error {
		oc := &OptimizationContext{h: ctx}
		defer oc.end()
		var m *float64
		if metric != nil {
			v := float64(*metric)
			m = &v
		}
		return moduleOf(ud).funcs.LrSchedulerStep(oc, int(idx), m)
	})
}

//export fulmenGoBackward
func fulmenGoBackward(ud C.uintptr_t, ctx *C.fulmen_optimization_context, loss *C.fulmen_tensor) *C.fulmen_error {
	return runCallback(func() error {
		oc := &OptimizationContext{h: ctx}
		defer oc.end()
		return moduleOf(ud).funcs.Backward(oc, newTensor(loss))
	})
}

//export fulmenGoConfigureGradientClipping
func fulmenGoConfigureGradientClipping(ud C.uintptr_t, ctx *C.fulmen_optimization_context, idx C.size_t, clipVal C.double, algorithm C.int32_t) *C.fulmen_error {
	return runCallback(func() error {
		oc := &OptimizationContext{h: ctx}
		defer oc.end()
		return moduleOf(ud).funcs.ConfigureGradientClipping(oc, int(idx), float64(clipVal), ClipAlgorithm(algorithm))
	})
}

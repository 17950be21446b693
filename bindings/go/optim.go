package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Optimizer is an optimizer with torch.optim semantics. Hand it to the
// trainer with OptimizerConfig.Add (which consumes it) or drive it
// yourself with Step and ZeroGrad.
type Optimizer struct {
	h handle[*C.fulmen_optimizer]
}

func (o *Optimizer) ptr() *C.fulmen_optimizer {
	if o == nil {
		gcStress()
		return nil
	}
	h := o.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the optimizer; idempotent. The error is always nil.
func (o *Optimizer) Close() error {
	if o == nil {
		return nil
	}
	h := o.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_optimizer_free(h)
	runtime.SetFinalizer(o, nil)
	return nil
}

// makeOptimizer runs an optimizer constructor over model (may be nil) and
// params.
func makeOptimizer(model *Model, params []*Tensor,
	f func(*C.fulmen_model, **C.fulmen_tensor, C.size_t, **C.fulmen_optimizer) cErr) (*Optimizer, error) {
	arr, n, hs := tensorArray(params)
	var out *C.fulmen_optimizer
	err := check(f(model.ptr(), arr, n, &out))
	runtime.KeepAlive(model)
	runtime.KeepAlive(params)
	runtime.KeepAlive(hs)
	if err != nil {
		return nil, err
	}
	o := &Optimizer{}
	o.h.store(out)
	runtime.SetFinalizer(o, (*Optimizer).Close)
	return o, nil
}

// NewSGD creates an SGD optimizer over model's parameters (model may be
// nil) and params.
func NewSGD(model *Model, params []*Tensor, opts SGDOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_sgd_new(m, p, n, &c, o)
	})
}

// NewAdam creates an Adam optimizer (L2 weight decay).
func NewAdam(model *Model, params []*Tensor, opts AdamOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_adam_new(m, p, n, &c, o)
	})
}

// NewAdamW creates an AdamW optimizer (decoupled weight decay).
func NewAdamW(model *Model, params []*Tensor, opts AdamOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_adamw_new(m, p, n, &c, o)
	})
}

// NewRMSprop creates an RMSprop optimizer.
func NewRMSprop(model *Model, params []*Tensor, opts RMSpropOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_rmsprop_new(m, p, n, &c, o)
	})
}

// AddParamGroup adds a parameter group (model's parameters and/or params)
// with its own learning rate; lr < 0 uses the optimizer's default.
func (o *Optimizer) AddParamGroup(model *Model, params []*Tensor, lr float64) error {
	arr, n, hs := tensorArray(params)
	err := check(C.fulmen_optimizer_add_param_group(o.ptr(), model.ptr(), arr, n, C.double(lr)))
	runtime.KeepAlive(o)
	runtime.KeepAlive(model)
	runtime.KeepAlive(params)
	runtime.KeepAlive(hs)
	return err
}

// Step updates every parameter that has a gradient (optimizer.step()); a
// HostOptimizer's Step runs while this goroutine waits.
func (o *Optimizer) Step() error {
	err := withCallbacks(nil, func() *C.fulmen_error { return C.fulmen_optimizer_step(o.ptr()) })
	runtime.KeepAlive(o)
	return err
}

// ZeroGrad clears the gradients of every parameter (a
// HostOptimizerZeroGrad's ZeroGrad(true) when it has one).
func (o *Optimizer) ZeroGrad() error {
	err := withCallbacks(nil, func() *C.fulmen_error { return C.fulmen_optimizer_zero_grad(o.ptr()) })
	runtime.KeepAlive(o)
	return err
}

// LR is the learning rate of parameter group 0.
func (o *Optimizer) LR() (float64, error) {
	var v C.double
	err := check(C.fulmen_optimizer_get_lr(o.ptr(), &v))
	runtime.KeepAlive(o)
	return float64(v), err
}

// SetLR sets the learning rate of every parameter group.
func (o *Optimizer) SetLR(lr float64) error {
	err := check(C.fulmen_optimizer_set_lr(o.ptr(), C.double(lr)))
	runtime.KeepAlive(o)
	return err
}

// SetFused turns torch's fused updates (fused=True) on or off: SGD, Adam,
// AdamW and Adagrad then update each parameter group and device with one
// libtorch kernel. The choice is saved with the state, and a loaded state sets it,
// as in torch. Other kinds are ErrUnsupported.
func (o *Optimizer) SetFused(fused bool) error {
	err := check(C.fulmen_optimizer_set_fused(o.ptr(), C.bool(fused)))
	runtime.KeepAlive(o)
	return err
}

// Fused reports whether the updates are fused.
func (o *Optimizer) Fused() (bool, error) {
	var v C.bool
	err := check(C.fulmen_optimizer_fused(o.ptr(), &v))
	runtime.KeepAlive(o)
	return bool(v), err
}

// Foreach is torch's foreach argument of every optimizer but LBFGS
// (fulmen_foreach).
type Foreach int32

// The choices: ForeachDefault is torch's foreach=None, the foreach updates
// when every parameter is on CUDA and the for-loop updates otherwise.
const (
	ForeachDefault Foreach = C.FULMEN_FOREACH_DEFAULT
	ForeachOff     Foreach = C.FULMEN_FOREACH_OFF
	ForeachOn      Foreach = C.FULMEN_FOREACH_ON
)

// SetForeach chooses torch's foreach updates: every optimizer but LBFGS
// then updates each parameter group, device and dtype with a few libtorch
// _foreach_* kernels (on the CPU with the for-loop's results, bit for bit,
// but for NAdam and RAdam, whose foreach updates differ in the last bits,
// as torch's do). An explicit choice is saved with the state, and a loaded
// state sets it, as in torch. ForeachOn is ErrUnsupported for LBFGS and
// ErrInvalidArgument while the updates are fused.
func (o *Optimizer) SetForeach(choice Foreach) error {
	err := check(C.fulmen_optimizer_set_foreach(o.ptr(), C.int32_t(choice)))
	runtime.KeepAlive(o)
	return err
}

// Foreach reports the foreach choice.
func (o *Optimizer) Foreach() (Foreach, error) {
	var v C.int32_t
	err := check(C.fulmen_optimizer_foreach(o.ptr(), &v))
	runtime.KeepAlive(o)
	return Foreach(v), err
}

// ParamGroupCount returns the number of parameter groups.
func (o *Optimizer) ParamGroupCount() (int, error) {
	var n C.size_t
	err := check(C.fulmen_optimizer_param_group_count(o.ptr(), &n))
	runtime.KeepAlive(o)
	return int(n), err
}

// ParamGroup returns group's hyperparameter name by torch's key: "lr",
// "weight_decay", "momentum" (SGD, RMSprop) or "betas.0" / "beta1" (the
// Adam family), and the kind's other constants, kept per group: "betas.1"
// / "beta2", "eps", "amsgrad", "alpha", "dampening", ...
// (fulmen_optimizer_param_group_get lists them; flags read 0 or 1).
func (o *Optimizer) ParamGroup(group int, name string) (float64, error) {
	if group < 0 {
		return 0, &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("param group %d", group)}
	}
	cname := cString(name)
	defer freeCString(cname)
	var v C.double
	err := check(C.fulmen_optimizer_param_group_get(o.ptr(), C.size_t(group), cname, &v))
	runtime.KeepAlive(o)
	return float64(v), err
}

// SetParamGroup sets group's hyperparameter name (as ParamGroup), such as
// "weight_decay" 0 for biases and norms or "eps" 1e-6 for one group;
// checked as torch's constructor checks options.
func (o *Optimizer) SetParamGroup(group int, name string, value float64) error {
	if group < 0 {
		return &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("param group %d", group)}
	}
	cname := cString(name)
	defer freeCString(cname)
	err := check(C.fulmen_optimizer_param_group_set(o.ptr(), C.size_t(group), cname, C.double(value)))
	runtime.KeepAlive(o)
	return err
}

// Scheduler is a learning-rate scheduler bound to the optimizer it was
// created for.
type Scheduler struct {
	h handle[*C.fulmen_scheduler]
}

func (s *Scheduler) ptr() *C.fulmen_scheduler {
	if s == nil {
		gcStress()
		return nil
	}
	h := s.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the scheduler; idempotent. The error is always nil.
func (s *Scheduler) Close() error {
	if s == nil {
		return nil
	}
	h := s.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_scheduler_free(h)
	runtime.SetFinalizer(s, nil)
	return nil
}

// makeScheduler runs a scheduler constructor for opt.
func makeScheduler(opt *Optimizer, f func(*C.fulmen_optimizer, **C.fulmen_scheduler) cErr) (*Scheduler, error) {
	var out *C.fulmen_scheduler
	err := check(f(opt.ptr(), &out))
	runtime.KeepAlive(opt)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{}
	s.h.store(out)
	runtime.SetFinalizer(s, (*Scheduler).Close)
	return s, nil
}

// NewStepLR multiplies the lr by gamma every stepSize steps.
func NewStepLR(opt *Optimizer, stepSize int64, gamma float64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_step_lr_new(o, C.int64_t(stepSize), C.double(gamma), out)
	})
}

// NewMultiStepLR multiplies the lr by gamma at each of milestones.
func NewMultiStepLR(opt *Optimizer, milestones []int64, gamma float64) (*Scheduler, error) {
	s, err := makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		var p *C.int64_t
		if len(milestones) > 0 {
			p = (*C.int64_t)(unsafe.Pointer(&milestones[0]))
		}
		return C.fulmen_scheduler_multi_step_lr_new(o, p, C.size_t(len(milestones)), C.double(gamma), out)
	})
	runtime.KeepAlive(milestones)
	return s, err
}

// NewExponentialLR multiplies the lr by gamma every step.
func NewExponentialLR(opt *Optimizer, gamma float64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_exponential_lr_new(o, C.double(gamma), out)
	})
}

// NewCosineAnnealingLR is CosineAnnealingLR(tMax, etaMin).
func NewCosineAnnealingLR(opt *Optimizer, tMax int64, etaMin float64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_cosine_lr_new(o, C.int64_t(tMax), C.double(etaMin), out)
	})
}

// NewLinearLR is LinearLR(startFactor, endFactor, totalIters).
func NewLinearLR(opt *Optimizer, startFactor, endFactor float64, totalIters int64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_linear_lr_new(o, C.double(startFactor), C.double(endFactor), C.int64_t(totalIters), out)
	})
}

// NewConstantLR is ConstantLR(factor, totalIters): the lr times factor for
// the first totalIters steps, then the lr itself.
func NewConstantLR(opt *Optimizer, factor float64, totalIters int64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_constant_lr_new(o, C.double(factor), C.int64_t(totalIters), out)
	})
}

// NewPolynomialLR is PolynomialLR(totalIters, power): the lr decays to 0
// over totalIters steps as (1 - step/totalIters)^power.
func NewPolynomialLR(opt *Optimizer, totalIters int64, power float64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_polynomial_lr_new(o, C.int64_t(totalIters), C.double(power), out)
	})
}

// NewSWALR is torch's SWALR(swaLRs, annealEpochs, linear, lastEpoch): each
// group's lr anneals to its SWA lr (one for all, or one per group).
func NewSWALR(opt *Optimizer, swaLRs []float64, annealEpochs int64, linear bool, lastEpoch int64) (*Scheduler, error) {
	var p *C.double
	if len(swaLRs) > 0 {
		p = (*C.double)(unsafe.Pointer(&swaLRs[0]))
	}
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_swa_lr_new(o, p, C.size_t(len(swaLRs)), C.int64_t(annealEpochs), C.bool(linear),
			C.int64_t(lastEpoch), out)
	})
}

// NewCosineAnnealingWarmRestarts is CosineAnnealingWarmRestarts(t0, tMult,
// etaMin) (SGDR).
func NewCosineAnnealingWarmRestarts(opt *Optimizer, t0, tMult int64, etaMin float64) (*Scheduler, error) {
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_cosine_warm_restarts_new(o, C.int64_t(t0), C.int64_t(tMult), C.double(etaMin), out)
	})
}

// composite makes a scheduler of schedulers (SequentialLR's or
// ChainedScheduler's parts, at most max) with newC, which gets their C
// handles. The parts are consumed on success (closing them afterwards does
// nothing) and left as they were on failure.
func composite(opt *Optimizer, what string, schedulers []*Scheduler, max int, newC func(*C.fulmen_optimizer, **C.fulmen_scheduler, C.size_t, **C.fulmen_scheduler) cErr) (*Scheduler, error) {
	n := len(schedulers)
	if n == 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: what + ": no scheduler"}
	}
	if n > max {
		return nil, &Error{Code: CodeInvalidArgument, Message: what + ": too many schedulers"}
	}
	// Go memory holding C pointers only may be passed to C.
	list := make([]*C.fulmen_scheduler, n)
	for i, s := range schedulers {
		list[i] = s.ptr()
	}
	s, err := makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return newC(o, &list[0], C.size_t(n), out)
	})
	runtime.KeepAlive(list)
	runtime.KeepAlive(schedulers)
	if err != nil {
		return nil, err
	}
	for _, part := range schedulers {
		part.h.take()
		runtime.SetFinalizer(part, nil)
	}
	return s, nil
}

// NewSequentialLR is SequentialLR(schedulers, milestones): schedulers[i]
// (all made for opt) runs from milestones[i-1] on. The schedulers are
// consumed on success (closing them afterwards does nothing) and left as
// they were on failure.
func NewSequentialLR(opt *Optimizer, schedulers []*Scheduler, milestones []int64) (*Scheduler, error) {
	s, err := composite(opt, "NewSequentialLR", schedulers, int(C.FULMEN_SEQUENTIAL_MAX),
		func(o *C.fulmen_optimizer, list **C.fulmen_scheduler, n C.size_t, out **C.fulmen_scheduler) cErr {
			var m *C.int64_t
			if len(milestones) > 0 {
				m = (*C.int64_t)(unsafe.Pointer(&milestones[0]))
			}
			return C.fulmen_scheduler_sequential_lr_new(o, list, n, m, C.size_t(len(milestones)), out)
		})
	runtime.KeepAlive(milestones)
	return s, err
}

// NewChainedScheduler is ChainedScheduler(schedulers): every scheduler (all
// made for opt, none stepped) steps at each step, from the lr the one
// before wrote, so their factors compose. The schedulers are consumed on
// success (closing them afterwards does nothing) and left as they were on
// failure.
func NewChainedScheduler(opt *Optimizer, schedulers []*Scheduler) (*Scheduler, error) {
	return composite(opt, "NewChainedScheduler", schedulers, int(C.FULMEN_CHAINED_MAX),
		func(o *C.fulmen_optimizer, list **C.fulmen_scheduler, n C.size_t, out **C.fulmen_scheduler) cErr {
			return C.fulmen_scheduler_chained_new(o, list, n, out)
		})
}

// NewOneCycleLR is OneCycleLR with opts.
func NewOneCycleLR(opt *Optimizer, opts OneCycleOptions) (*Scheduler, error) {
	c := opts.c()
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_one_cycle_lr_new(o, &c, out)
	})
}

// NewOneCycleLRMaxLRs is NewOneCycleLR with a peak learning rate per param
// group (torch's max_lr as a list; opts.MaxLR is ignored).
func NewOneCycleLRMaxLRs(opt *Optimizer, opts OneCycleOptions, maxLRs []float64) (*Scheduler, error) {
	c := opts.c()
	s, err := makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_one_cycle_lr_max_lrs_new(o, &c, doubles(maxLRs), C.size_t(len(maxLRs)), out)
	})
	runtime.KeepAlive(maxLRs)
	return s, err
}

// NewReduceLROnPlateau is ReduceLROnPlateau with opts; step it with a metric
// (or name the metric as the monitor in OptimizerConfig.AddWithScheduler).
func NewReduceLROnPlateau(opt *Optimizer, opts PlateauOptions) (*Scheduler, error) {
	c := opts.c()
	return makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_reduce_on_plateau_new(o, &c, out)
	})
}

// NewReduceLROnPlateauMinLRs is NewReduceLROnPlateau with a lower bound
// per param group (torch's min_lr as a list; opts.MinLR is ignored).
func NewReduceLROnPlateauMinLRs(opt *Optimizer, opts PlateauOptions, minLRs []float64) (*Scheduler, error) {
	c := opts.c()
	s, err := makeScheduler(opt, func(o *C.fulmen_optimizer, out **C.fulmen_scheduler) cErr {
		return C.fulmen_scheduler_reduce_on_plateau_min_lrs_new(o, &c, doubles(minLRs), C.size_t(len(minLRs)), out)
	})
	runtime.KeepAlive(minLRs)
	return s, err
}

// Step advances the scheduler one step and sets the new lr in opt, which
// must be the optimizer it was created for. metric is used by
// ReduceLROnPlateau (pass a finite value) and ignored by the others.
func (s *Scheduler) Step(opt *Optimizer, metric float64) error {
	err := withCallbacks(nil, func() *C.fulmen_error {
		return C.fulmen_scheduler_step(s.ptr(), opt.ptr(), C.double(metric))
	})
	runtime.KeepAlive(s)
	runtime.KeepAlive(opt)
	return err
}

// Closed reports whether the optimizer was closed or consumed.
func (o *Optimizer) Closed() bool { return o == nil || o.h.closed() }

// Closed reports whether the scheduler was closed or consumed.
func (s *Scheduler) Closed() bool { return s == nil || s.h.closed() }

// doubles points C at a slice's values (nil for an empty one); keep the
// slice alive across the call.
func doubles(v []float64) *C.double {
	if len(v) == 0 {
		return nil
	}
	return (*C.double)(&v[0])
}

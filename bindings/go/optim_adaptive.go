package fulmen

/*
#include <fulmen.h>
*/
import "C"

// AdagradOptions are torch.optim.Adagrad's options.
type AdagradOptions struct {
	// LR is the learning rate.
	LR float64
	// LRDecay decays the learning rate: step t uses LR / (1 + (t-1) LRDecay).
	LRDecay float64
	// WeightDecay is the L2 penalty.
	WeightDecay float64
	// InitialAccumulatorValue starts the sum of squared gradients.
	InitialAccumulatorValue float64
	// Eps is the denominator term.
	Eps float64
	// Maximize maximizes instead of minimizing.
	Maximize bool
}

// DefaultAdagradOptions are torch's Adagrad defaults.
func DefaultAdagradOptions() AdagradOptions {
	c := C.fulmen_adagrad_options_default()
	return AdagradOptions{LR: float64(c.lr), LRDecay: float64(c.lr_decay), WeightDecay: float64(c.weight_decay),
		InitialAccumulatorValue: float64(c.initial_accumulator_value), Eps: float64(c.eps), Maximize: bool(c.maximize)}
}

// NewAdagrad creates an Adagrad optimizer over model's parameters (model
// may be nil) and params.
func NewAdagrad(model *Model, params []*Tensor, opts AdagradOptions) (*Optimizer, error) {
	c := C.fulmen_adagrad_options{lr: C.double(opts.LR), lr_decay: C.double(opts.LRDecay),
		weight_decay: C.double(opts.WeightDecay), initial_accumulator_value: C.double(opts.InitialAccumulatorValue),
		eps: C.double(opts.Eps), maximize: C.bool(opts.Maximize)}
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_adagrad_new(m, p, n, &c, o)
	})
}

// AdamaxOptions are torch.optim.Adamax's options.
type AdamaxOptions struct {
	// LR is the learning rate.
	LR float64
	// Beta1 and Beta2 decay the gradient average and the infinity norm.
	Beta1, Beta2 float64
	// Eps is added to the norm.
	Eps float64
	// WeightDecay is the L2 penalty.
	WeightDecay float64
	// Maximize maximizes instead of minimizing.
	Maximize bool
}

// DefaultAdamaxOptions are torch's Adamax defaults.
func DefaultAdamaxOptions() AdamaxOptions {
	c := C.fulmen_adamax_options_default()
	return AdamaxOptions{LR: float64(c.lr), Beta1: float64(c.beta1), Beta2: float64(c.beta2), Eps: float64(c.eps),
		WeightDecay: float64(c.weight_decay), Maximize: bool(c.maximize)}
}

// NewAdamax creates an Adamax optimizer over model's parameters (model may
// be nil) and params.
func NewAdamax(model *Model, params []*Tensor, opts AdamaxOptions) (*Optimizer, error) {
	c := C.fulmen_adamax_options{lr: C.double(opts.LR), beta1: C.double(opts.Beta1), beta2: C.double(opts.Beta2),
		eps: C.double(opts.Eps), weight_decay: C.double(opts.WeightDecay), maximize: C.bool(opts.Maximize)}
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_adamax_new(m, p, n, &c, o)
	})
}

// NAdamOptions are torch.optim.NAdam's options.
type NAdamOptions struct {
	// LR is the learning rate.
	LR float64
	// Beta1 and Beta2 decay the running averages.
	Beta1, Beta2 float64
	// Eps is the denominator term.
	Eps float64
	// WeightDecay is L2, or decoupled with DecoupledWeightDecay.
	WeightDecay float64
	// MomentumDecay is the decay of the momentum schedule.
	MomentumDecay float64
	// DecoupledWeightDecay makes it NAdamW.
	DecoupledWeightDecay bool
	// Maximize maximizes instead of minimizing.
	Maximize bool
}

// DefaultNAdamOptions are torch's NAdam defaults.
func DefaultNAdamOptions() NAdamOptions {
	c := C.fulmen_nadam_options_default()
	return NAdamOptions{LR: float64(c.lr), Beta1: float64(c.beta1), Beta2: float64(c.beta2), Eps: float64(c.eps),
		WeightDecay: float64(c.weight_decay), MomentumDecay: float64(c.momentum_decay),
		DecoupledWeightDecay: bool(c.decoupled_weight_decay), Maximize: bool(c.maximize)}
}

// NewNAdam creates a NAdam optimizer over model's parameters (model may be
// nil) and params.
func NewNAdam(model *Model, params []*Tensor, opts NAdamOptions) (*Optimizer, error) {
	c := C.fulmen_nadam_options{lr: C.double(opts.LR), beta1: C.double(opts.Beta1), beta2: C.double(opts.Beta2),
		eps: C.double(opts.Eps), weight_decay: C.double(opts.WeightDecay), momentum_decay: C.double(opts.MomentumDecay),
		decoupled_weight_decay: C.bool(opts.DecoupledWeightDecay), maximize: C.bool(opts.Maximize)}
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_nadam_new(m, p, n, &c, o)
	})
}

// RAdamOptions are torch.optim.RAdam's options.
type RAdamOptions struct {
	// LR is the learning rate.
	LR float64
	// Beta1 and Beta2 decay the running averages.
	Beta1, Beta2 float64
	// Eps is the denominator term.
	Eps float64
	// WeightDecay is L2, or decoupled with DecoupledWeightDecay.
	WeightDecay float64
	// DecoupledWeightDecay makes it RAdamW.
	DecoupledWeightDecay bool
	// Maximize maximizes instead of minimizing.
	Maximize bool
}

// DefaultRAdamOptions are torch's RAdam defaults.
func DefaultRAdamOptions() RAdamOptions {
	c := C.fulmen_radam_options_default()
	return RAdamOptions{LR: float64(c.lr), Beta1: float64(c.beta1), Beta2: float64(c.beta2), Eps: float64(c.eps),
		WeightDecay: float64(c.weight_decay), DecoupledWeightDecay: bool(c.decoupled_weight_decay), Maximize: bool(c.maximize)}
}

// NewRAdam creates a RAdam optimizer over model's parameters (model may be
// nil) and params.
func NewRAdam(model *Model, params []*Tensor, opts RAdamOptions) (*Optimizer, error) {
	c := C.fulmen_radam_options{lr: C.double(opts.LR), beta1: C.double(opts.Beta1), beta2: C.double(opts.Beta2),
		eps: C.double(opts.Eps), weight_decay: C.double(opts.WeightDecay),
		decoupled_weight_decay: C.bool(opts.DecoupledWeightDecay), maximize: C.bool(opts.Maximize)}
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_radam_new(m, p, n, &c, o)
	})
}

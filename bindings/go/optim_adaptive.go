package fulmen

/*
#include <fulmen.h>
*/
import "C"

// NewAdagrad creates an Adagrad optimizer over model's parameters (model
// may be nil) and params.
func NewAdagrad(model *Model, params []*Tensor, opts AdagradOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_adagrad_new(m, p, n, &c, o)
	})
}

// NewAdamax creates an Adamax optimizer over model's parameters (model may
// be nil) and params.
func NewAdamax(model *Model, params []*Tensor, opts AdamaxOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_adamax_new(m, p, n, &c, o)
	})
}

// NewNAdam creates a NAdam optimizer over model's parameters (model may be
// nil) and params.
func NewNAdam(model *Model, params []*Tensor, opts NAdamOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_nadam_new(m, p, n, &c, o)
	})
}

// NewRAdam creates a RAdam optimizer over model's parameters (model may be
// nil) and params.
func NewRAdam(model *Model, params []*Tensor, opts RAdamOptions) (*Optimizer, error) {
	c := opts.c()
	return makeOptimizer(model, params, func(m *C.fulmen_model, p **C.fulmen_tensor, n C.size_t, o **C.fulmen_optimizer) cErr {
		return C.fulmen_optimizer_radam_new(m, p, n, &c, o)
	})
}

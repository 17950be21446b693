package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"context"
	"runtime"
)

// loaderHandles lists the C handles of loaders (a nil or closed one stays
// NULL, which the library refuses). Go memory holding C pointers only may
// be passed to C.
func loaderHandles(loaders []*Loader) ([]*C.fulmen_loader, **C.fulmen_loader) {
	if len(loaders) == 0 {
		return nil, nil
	}
	list := make([]*C.fulmen_loader, len(loaders))
	for i, l := range loaders {
		list[i] = l.ptr()
	}
	return list, &list[0]
}

// withLoaders runs call with the C list of loaders and the checkpoint
// argument, inside withCallbacks, keeping everything alive.
func (t *Trainer) withLoaders(ctx context.Context, module *LightningModule, loaders []*Loader, opts []RunOption,
	call func(first **C.fulmen_loader, n C.size_t, ckpt *C.char) *C.fulmen_error) error {
	ckpt := ckptArg(opts)
	defer freeCString(ckpt)
	list, first := loaderHandles(loaders)
	err := withCallbacks(ctx, func() *C.fulmen_error { return call(first, C.size_t(len(list)), ckpt) })
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(loaders)
	runtime.KeepAlive(list)
	return err
}

// FitLoaders is Fit validating on each of vals in turn (none: no
// validation). With several, the steps see their DataloaderIdx and logged
// names end in "/dataloader_idx_N", as in Lightning
// (fulmen_trainer_fit_loaders).
func (t *Trainer) FitLoaders(ctx context.Context, module *LightningModule, train *Loader, vals []*Loader, opts ...RunOption) error {
	err := t.withLoaders(ctx, module, vals, opts, func(first **C.fulmen_loader, n C.size_t, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_fit_loaders(t.ptr(), module.ptr(), train.ptr(), first, n, ckpt)
	})
	runtime.KeepAlive(train)
	return err
}

// ValidateLoaders is Validate over each of loaders in turn: one dict per
// loader.
func (t *Trainer) ValidateLoaders(ctx context.Context, module *LightningModule, loaders []*Loader, opts ...RunOption) ([]map[string]float64, error) {
	return t.evalResultsAfter(t.withLoaders(ctx, module, loaders, opts, func(first **C.fulmen_loader, n C.size_t, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_validate_loaders(t.ptr(), module.ptr(), first, n, ckpt)
	}))
}

// TestLoaders is Test over each of loaders in turn.
func (t *Trainer) TestLoaders(ctx context.Context, module *LightningModule, loaders []*Loader, opts ...RunOption) ([]map[string]float64, error) {
	return t.evalResultsAfter(t.withLoaders(ctx, module, loaders, opts, func(first **C.fulmen_loader, n C.size_t, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_test_loaders(t.ptr(), module.ptr(), first, n, ckpt)
	}))
}

// PredictLoaders is Predict over each of loaders in turn: one output per
// loader (nil where no step produced one).
func (t *Trainer) PredictLoaders(ctx context.Context, module *LightningModule, loaders []*Loader, opts ...RunOption) ([]*Tensor, error) {
	// The library writes C pointers (only) into this Go slice.
	outs := make([]*C.fulmen_tensor, len(loaders))
	var outp **C.fulmen_tensor
	if len(outs) > 0 {
		outp = &outs[0]
	}
	err := t.withLoaders(ctx, module, loaders, opts, func(first **C.fulmen_loader, n C.size_t, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_predict_loaders(t.ptr(), module.ptr(), first, n, ckpt, outp)
	})
	if err != nil {
		return nil, err
	}
	result := make([]*Tensor, len(outs))
	for i, o := range outs {
		result[i] = newTensor(o)
	}
	return result, nil
}

// PredictBatches is Lightning's trainer.predict: each batch's prediction
// in order (a *Tensor, nil when the step returned none, a Tuple when
// predict_step added tensors with StepContext.AddPrediction, a Dict when
// it named them with StepContext.AddNamedPrediction, or the value it set
// with StepContext.SetPrediction) in a []any;
// with several loaders, a []any holding one such []any per loader. With
// returnPredictions false nothing is kept and the result is nil.
func (t *Trainer) PredictBatches(ctx context.Context, module *LightningModule, loaders []*Loader, returnPredictions bool, opts ...RunOption) (any, error) {
	var out *C.fulmen_value
	err := t.withLoaders(ctx, module, loaders, opts, func(first **C.fulmen_loader, n C.size_t, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_predict_batches(t.ptr(), module.ptr(), first, n, ckpt, C.bool(returnPredictions), &out)
	})
	if err != nil || out == nil {
		return nil, err
	}
	return goValue(out)
}

// AddPrediction, in predict_step, adds tensor to the batch's prediction,
// which becomes a Tuple (the returned tensor, if any, first), as
// Lightning's predict_step returning a tuple; see PredictBatches.
func (c *StepContext) AddPrediction(tensor *Tensor) error {
	err := check(C.fulmen_step_context_add_prediction(c.ptr(), tensor.ptr()))
	runtime.KeepAlive(tensor)
	return err
}

// AddNamedPrediction, in predict_step, adds tensor under name to the
// batch's prediction, which becomes a Dict of the named tensors in the
// order added, as Lightning's predict_step returning a dict; a step that
// names its predictions names them all and returns no tensor (nil).
func (c *StepContext) AddNamedPrediction(name string, tensor *Tensor) error {
	n := cString(name)
	defer freeCString(n)
	err := check(C.fulmen_step_context_add_named_prediction(c.ptr(), n, tensor.ptr()))
	runtime.KeepAlive(tensor)
	return err
}

// SetPrediction sets the whole prediction of the running PredictStep to
// v, of any shape the TorchScript values take (nil, bool, ints, floats,
// strings, *Tensor, Tuple, slices, Dict, map[string]any, nested): Lightning's
// predict_step returning nested tuples and dicts. The step then adds no
// tensors and returns none; PredictBatches, HookContext.Prediction and the
// value writers get v back in the same shape (a map as a Dict, keys
// sorted); Predict cannot concatenate it.
func (c *StepContext) SetPrediction(v any) error {
	var b valueBuilder
	defer b.free()
	h, err := b.value(v, 0)
	if err != nil {
		return err
	}
	return check(C.fulmen_step_context_set_prediction(c.ptr(), h))
}

// DataloaderIdx is the evaluation loader of the running step when a run
// has several (0 with one, and in training).
func (c *StepContext) DataloaderIdx() (int, error) {
	var v C.size_t
	err := check(C.fulmen_step_context_dataloader_idx(c.ptr(), &v))
	return int(v), err
}

// DataloaderIdx is the evaluation loader of the batch in a validation,
// test or predict batch hook (0 elsewhere).
func (c *HookContext) DataloaderIdx() (int, error) {
	var v C.size_t
	err := check(C.fulmen_hook_context_dataloader_idx(c.ptr(), &v))
	return int(v), err
}

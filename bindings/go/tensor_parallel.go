package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// ParallelStyle is how a layer splits across the ranks, torch's
// ParallelStyles (fulmen_parallel_style).
type ParallelStyle int32

const (
	// Colwise is ColwiseParallel(): the output features split (a Linear's
	// weight rows and bias, an Embedding's columns), the output left split
	// along its last dimension.
	Colwise ParallelStyle = C.FULMEN_PARALLEL_STYLE_COLWISE
	// ColwiseReplicatedOutput is ColwiseParallel(output_layouts=Replicate()):
	// as Colwise, the output gathered whole on every rank.
	ColwiseReplicatedOutput ParallelStyle = C.FULMEN_PARALLEL_STYLE_COLWISE_REPLICATED_OUTPUT
	// Rowwise is RowwiseParallel(): a Linear's input features split, the
	// input split along its last dimension, the output summed whole.
	Rowwise ParallelStyle = C.FULMEN_PARALLEL_STYLE_ROWWISE
	// RowwiseReplicatedInput is RowwiseParallel(input_layouts=Replicate()):
	// as Rowwise with the input whole on every rank (an Embedding's rows
	// split).
	RowwiseReplicatedInput ParallelStyle = C.FULMEN_PARALLEL_STYLE_ROWWISE_REPLICATED_INPUT
)

// ParallelRule is one entry of a tensor-parallel plan: the dotted path of
// a Linear or Embedding layer and how it splits.
type ParallelRule struct {
	Module string
	Style  ParallelStyle
}

// TensorParallel is tensor parallelism for a Go-owned training loop
// (torch's parallelize_module over the whole joined job): the layers a
// plan names keep this rank's part of their weights, with the collectives
// inside their forward and backward. Build the optimizers over the model
// after NewTensorParallel; each step on every rank: the forward,
// loss.Backward, optionally ClipGradNorm, the optimizers' Step. Unshard
// gathers the full parameters and optimizer states to save or read,
// Reshard goes back to training. Closed without Unshard, the split layers
// refuse to run. The model keeps the wrapper reachable: it is not
// finalized while the model is in use.
type TensorParallel struct {
	h handle[*C.fulmen_tensor_parallel]
}

// NewTensorParallel splits the layers of model that plan names, after
// copying rank 0's parameters and buffers to every rank. Before
// DistributedJoin it is ErrInvalidState; a bad plan is ErrInvalidArgument
// or ErrUnsupported.
func NewTensorParallel(model *Model, plan []ParallelRule) (*TensorParallel, error) {
	modules := make([]*C.char, len(plan))
	styles := make([]C.int32_t, len(plan))
	for i, r := range plan {
		modules[i] = C.CString(r.Module)
		styles[i] = C.int32_t(r.Style)
	}
	defer func() {
		for _, m := range modules {
			C.free(unsafe.Pointer(m))
		}
	}()
	var firstModule **C.char
	var firstStyle *C.int32_t
	if len(plan) > 0 {
		firstModule, firstStyle = &modules[0], &styles[0]
	}
	var out *C.fulmen_tensor_parallel
	err := check(C.fulmen_tensor_parallel_new(model.ptr(), firstModule, firstStyle, C.size_t(len(plan)), &out))
	runtime.KeepAlive(model)
	if err != nil {
		return nil, err
	}
	tp := &TensorParallel{}
	tp.h.store(out)
	runtime.SetFinalizer(tp, (*TensorParallel).Close)
	model.parallel.Store(tp)
	return tp, nil
}

func (tp *TensorParallel) ptr() *C.fulmen_tensor_parallel {
	if tp == nil {
		gcStress()
		return nil
	}
	h := tp.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the wrapper without a collective: after Unshard the model is
// a plain model again, else its split layers refuse to run; idempotent.
// The error is always nil.
func (tp *TensorParallel) Close() error {
	if tp == nil {
		return nil
	}
	h := tp.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_tensor_parallel_free(h)
	runtime.SetFinalizer(tp, nil)
	return nil
}

// ClipGradNorm clips the gradients by their 2-norm over the whole model
// and returns the norm before clipping.
func (tp *TensorParallel) ClipGradNorm(maxNorm float64) (float64, error) {
	var total C.double
	err := check(C.fulmen_tensor_parallel_clip_grad_norm(tp.ptr(), C.double(maxNorm), &total))
	runtime.KeepAlive(tp)
	return float64(total), err
}

// Unshard gathers the full parameters into the model and the optimizers'
// states into their full shapes, on every rank (a collective): they can
// then be saved, read or loaded as plain ones until Reshard.
func (tp *TensorParallel) Unshard(optimizers ...*Optimizer) error {
	err := withOptimizers(optimizers, func(o **C.fulmen_optimizer, n C.size_t) *C.fulmen_error {
		return C.fulmen_tensor_parallel_unshard(tp.ptr(), o, n)
	})
	runtime.KeepAlive(tp)
	return err
}

// Reshard follows Unshard: every rank keeps its part of the parameters'
// and the optimizers' current values (loaded ones included), and training
// can go on.
func (tp *TensorParallel) Reshard(optimizers ...*Optimizer) error {
	err := withOptimizers(optimizers, func(o **C.fulmen_optimizer, n C.size_t) *C.fulmen_error {
		return C.fulmen_tensor_parallel_reshard(tp.ptr(), o, n)
	})
	runtime.KeepAlive(tp)
	return err
}

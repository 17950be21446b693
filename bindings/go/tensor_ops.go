package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime"
)

type cTensor = *C.fulmen_tensor
type cErr = *C.fulmen_error

// unary runs a C op with one tensor input and one tensor output.
func unary(x *Tensor, f func(cTensor, *cTensor) cErr) (*Tensor, error) {
	var out cTensor
	err := check(f(x.ptr(), &out))
	runtime.KeepAlive(x)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// binary runs a C op with two tensor inputs and one tensor output.
func binary(a, b *Tensor, f func(cTensor, cTensor, *cTensor) cErr) (*Tensor, error) {
	var out cTensor
	err := check(f(a.ptr(), b.ptr(), &out))
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// maxPieces bounds the slots tensorPieces allocates for a retry: a larger
// count (an empty tensor in 2^40 chunks) stays the op's OUT_OF_RANGE error.
const maxPieces = 1 << 24

// tensorPieces runs a C op that writes several tensors (outs, capacity,
// count_out), growing the array once when the op reports more pieces.
func tensorPieces(call func(outs *cTensor, capacity C.size_t, count *C.size_t) cErr) ([]*Tensor, error) {
	outs := make([]cTensor, 16)
	var count C.size_t
	err := check(call(&outs[0], C.size_t(len(outs)), &count))
	if grows(err, int(count), len(outs)) && count <= maxPieces {
		outs = make([]cTensor, int(count))
		err = check(call(&outs[0], C.size_t(len(outs)), &count))
	}
	if err != nil {
		return nil, err
	}
	pieces := make([]*Tensor, int(count))
	for i := range pieces {
		pieces[i] = newTensor(outs[i])
	}
	return pieces, nil
}

// checkOptional refuses a closed tensor given for an optional argument (nil
// is "left out"; a closed tensor is a mistake, not nil).
func checkOptional(t *Tensor, name string) error {
	if t != nil && t.Closed() {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("argument `%s` is a closed tensor", name)}
	}
	return nil
}

// Share is a new handle to the same tensor (storage and autograd history).
func (t *Tensor) Share() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_share(x, o) })
}

// Clone is a copy with its own storage (autograd-tracked, as torch.clone).
func (t *Tensor) Clone() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_clone(x, o) })
}

// Detach is the same data cut off from autograd.
func (t *Tensor) Detach() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_detach(x, o) })
}

// ToDType converts to another dtype.
func (t *Tensor) ToDType(dtype DType) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_to_dtype(x, C.int32_t(dtype), o) })
}

// ToDevice copies the tensor to a device.
func (t *Tensor) ToDevice(d Device) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_to_device(x, C.int32_t(d.Type), C.int64_t(d.Index), o)
	})
}

// IndexSelect selects entries along dim at the positions in the 1-D
// integer tensor index (torch.index_select).
func (t *Tensor) IndexSelect(dim int64, index *Tensor) (*Tensor, error) {
	return binary(t, index, func(x, i cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_index_select(x, C.int64_t(dim), i, o)
	})
}

// Gather gathers values along dim (torch.gather).
func (t *Tensor) Gather(dim int64, index *Tensor) (*Tensor, error) {
	return binary(t, index, func(x, i cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_gather(x, C.int64_t(dim), i, o)
	})
}

// Compare is the elementwise comparison t <op> b with broadcasting, as a
// bool tensor.
func (t *Tensor) Compare(op Compare, b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_compare(x, y, C.int32_t(op), o) })
}

// CompareScalar is the elementwise comparison t <op> value, as a bool tensor.
func (t *Tensor) CompareScalar(op Compare, value float64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_compare_scalar(x, C.double(value), C.int32_t(op), o)
	})
}

// Add is t + b, broadcasting.
func (t *Tensor) Add(b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_add(x, y, o) })
}

// Sub is t - b, broadcasting.
func (t *Tensor) Sub(b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_sub(x, y, o) })
}

// Mul is t * b elementwise, broadcasting.
func (t *Tensor) Mul(b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_mul(x, y, o) })
}

// Div is t / b elementwise (true division), broadcasting.
func (t *Tensor) Div(b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_div(x, y, o) })
}

// Pow is t ^ b elementwise, broadcasting.
func (t *Tensor) Pow(b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_pow(x, y, o) })
}

// Matmul is the matrix product with torch.matmul semantics.
func (t *Tensor) Matmul(b *Tensor) (*Tensor, error) {
	return binary(t, b, func(x, y cTensor, o *cTensor) cErr { return C.fulmen_tensor_matmul(x, y, o) })
}

// AddScalar is t + value.
func (t *Tensor) AddScalar(value float64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_add_scalar(x, C.double(value), o) })
}

// MulScalar is t * value.
func (t *Tensor) MulScalar(value float64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_mul_scalar(x, C.double(value), o) })
}

// PowScalar is t ^ exponent.
func (t *Tensor) PowScalar(exponent float64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_pow_scalar(x, C.double(exponent), o) })
}

// Clamp is clamp(t, min, max).
func (t *Tensor) Clamp(min, max float64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_clamp(x, C.double(min), C.double(max), o)
	})
}

// Neg is -t.
func (t *Tensor) Neg() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_neg(x, o) })
}

// Exp is exp(t).
func (t *Tensor) Exp() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_exp(x, o) })
}

// Log is ln(t).
func (t *Tensor) Log() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_log(x, o) })
}

// Sqrt is sqrt(t).
func (t *Tensor) Sqrt() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_sqrt(x, o) })
}

// Abs is |t|.
func (t *Tensor) Abs() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_abs(x, o) })
}

// Relu is max(t, 0).
func (t *Tensor) Relu() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_relu(x, o) })
}

// LeakyRelu is t if t > 0 else slope * t.
func (t *Tensor) LeakyRelu(slope float64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_leaky_relu(x, C.double(slope), o) })
}

// Sigmoid is the logistic sigmoid.
func (t *Tensor) Sigmoid() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_sigmoid(x, o) })
}

// Tanh is the hyperbolic tangent.
func (t *Tensor) Tanh() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_tanh(x, o) })
}

// Gelu is GELU (exact, erf form).
func (t *Tensor) Gelu() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_gelu(x, o) })
}

// Silu is SiLU (swish), t * sigmoid(t).
func (t *Tensor) Silu() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_silu(x, o) })
}

// Softmax is the softmax along dim (negative counts from the end).
func (t *Tensor) Softmax(dim int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_softmax(x, C.int64_t(dim), o) })
}

// LogSoftmax is the log-softmax along dim.
func (t *Tensor) LogSoftmax(dim int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_log_softmax(x, C.int64_t(dim), o) })
}

// Sum is the sum of all elements (0-dimensional).
func (t *Tensor) Sum() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_sum(x, o) })
}

// Mean is the mean of all elements (floating tensors only).
func (t *Tensor) Mean() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_mean(x, o) })
}

// SumDims sums over dims, keeping them as size 1 when keepdim.
func (t *Tensor) SumDims(dims []int64, keepdim bool) (*Tensor, error) {
	r, err := unary(t, func(x cTensor, o *cTensor) cErr {
		p, n := shapeArg(dims)
		return C.fulmen_tensor_sum_dims(x, p, n, C.bool(keepdim), o)
	})
	runtime.KeepAlive(dims)
	return r, err
}

// MeanDims averages over dims, keeping them as size 1 when keepdim.
func (t *Tensor) MeanDims(dims []int64, keepdim bool) (*Tensor, error) {
	r, err := unary(t, func(x cTensor, o *cTensor) cErr {
		p, n := shapeArg(dims)
		return C.fulmen_tensor_mean_dims(x, p, n, C.bool(keepdim), o)
	})
	runtime.KeepAlive(dims)
	return r, err
}

// Max is the largest element (0-dimensional).
func (t *Tensor) Max() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_max(x, o) })
}

// Min is the smallest element (0-dimensional).
func (t *Tensor) Min() (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_min(x, o) })
}

// Argmax is the indices (int64) of the largest values along dim.
func (t *Tensor) Argmax(dim int64, keepdim bool) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_argmax(x, C.int64_t(dim), C.bool(keepdim), o)
	})
}

// Argmin is the indices (int64) of the smallest values along dim.
func (t *Tensor) Argmin(dim int64, keepdim bool) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_argmin(x, C.int64_t(dim), C.bool(keepdim), o)
	})
}

// Reshape gives the same elements a new shape (-1 infers one size).
func (t *Tensor) Reshape(shape ...int64) (*Tensor, error) {
	r, err := unary(t, func(x cTensor, o *cTensor) cErr {
		p, n := shapeArg(shape)
		return C.fulmen_tensor_reshape(x, p, n, o)
	})
	runtime.KeepAlive(shape)
	return r, err
}

// View is the same storage in a new shape; fails when the layout does not
// allow a view.
func (t *Tensor) View(shape ...int64) (*Tensor, error) {
	r, err := unary(t, func(x cTensor, o *cTensor) cErr {
		p, n := shapeArg(shape)
		return C.fulmen_tensor_view(x, p, n, o)
	})
	runtime.KeepAlive(shape)
	return r, err
}

// Flatten flattens dimensions startDim..=endDim into one.
func (t *Tensor) Flatten(startDim, endDim int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_flatten(x, C.int64_t(startDim), C.int64_t(endDim), o)
	})
}

// Permute reorders dimensions (dims is a permutation of 0..ndim).
func (t *Tensor) Permute(dims ...int64) (*Tensor, error) {
	r, err := unary(t, func(x cTensor, o *cTensor) cErr {
		p, n := shapeArg(dims)
		return C.fulmen_tensor_permute(x, p, n, o)
	})
	runtime.KeepAlive(dims)
	return r, err
}

// Transpose swaps dimensions dim0 and dim1.
func (t *Tensor) Transpose(dim0, dim1 int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_transpose(x, C.int64_t(dim0), C.int64_t(dim1), o)
	})
}

// Squeeze removes dimension dim if its size is 1.
func (t *Tensor) Squeeze(dim int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_squeeze(x, C.int64_t(dim), o) })
}

// Unsqueeze inserts a dimension of size 1 at dim (-1 appends).
func (t *Tensor) Unsqueeze(dim int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr { return C.fulmen_tensor_unsqueeze(x, C.int64_t(dim), o) })
}

// Narrow is the slice start..start+length of dimension dim (a view).
func (t *Tensor) Narrow(dim, start, length int64) (*Tensor, error) {
	return unary(t, func(x cTensor, o *cTensor) cErr {
		return C.fulmen_tensor_narrow(x, C.int64_t(dim), C.int64_t(start), C.int64_t(length), o)
	})
}

// joined runs cat or stack over tensors.
func joined(tensors []*Tensor, f func(**C.fulmen_tensor, C.size_t, *cTensor) cErr) (*Tensor, error) {
	arr, n, hs := tensorArray(tensors)
	var out cTensor
	err := check(f(arr, n, &out))
	runtime.KeepAlive(hs)
	runtime.KeepAlive(tensors)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Cat concatenates tensors along the existing dimension dim.
func Cat(tensors []*Tensor, dim int64) (*Tensor, error) {
	return joined(tensors, func(a **C.fulmen_tensor, n C.size_t, o *cTensor) cErr {
		return C.fulmen_tensor_cat(a, n, C.int64_t(dim), o)
	})
}

// Stack stacks tensors (all of one shape) along a new dimension dim.
func Stack(tensors []*Tensor, dim int64) (*Tensor, error) {
	return joined(tensors, func(a **C.fulmen_tensor, n C.size_t, o *cTensor) cErr {
		return C.fulmen_tensor_stack(a, n, C.int64_t(dim), o)
	})
}

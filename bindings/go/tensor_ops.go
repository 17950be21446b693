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

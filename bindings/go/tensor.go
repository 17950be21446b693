package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Tensor is a libtorch tensor handle. See the package documentation for
// the ownership rule of tensors created inside callbacks.
type Tensor struct {
	h     handle[*C.fulmen_tensor]
	scope *scope
}

// newTensor wraps a handle the library just returned (nil stays nil).
func newTensor(h *C.fulmen_tensor) *Tensor {
	if h == nil {
		return nil
	}
	t := &Tensor{}
	t.h.store(h)
	adopt(t)
	runtime.SetFinalizer(t, (*Tensor).finalize)
	return t
}

func (t *Tensor) finalize() {
	if t.scope == nil {
		if h := t.h.take(); h != nil {
			C.fulmen_tensor_free(h)
		}
	}
}

// ptr returns the handle for a C call (nil for a nil or closed tensor).
func (t *Tensor) ptr() *C.fulmen_tensor {
	if t == nil {
		gcStress()
		return nil
	}
	h := t.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the tensor handle (other tensors sharing its storage stay
// valid). It is idempotent, and safe on a scope-owned tensor (it is then
// freed early). The error is always nil; it is there for io.Closer.
func (t *Tensor) Close() error {
	if t == nil {
		return nil
	}
	h := t.h.take()
	if h == nil {
		return nil
	}
	if t.Scoped() {
		// Take it out of the C scope first, so that the scope never sees an
		// address that a later handle could reuse.
		release(t)
		_ = check(C.fulmen_tensor_keep(h))
	}
	C.fulmen_tensor_free(h)
	runtime.SetFinalizer(t, nil)
	return nil
}

// Closed reports whether the tensor was closed, or was scope-owned and its
// callback returned.
func (t *Tensor) Closed() bool { return t == nil || t.h.closed() }

// Scoped reports whether the tensor is scope-owned: created during a
// callback and released by the library when that callback returns.
func (t *Tensor) Scoped() bool {
	if t == nil {
		return false
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	return t.scope != nil
}

// Keep takes ownership of a scope-owned tensor so that it outlives the
// callback that created it (fulmen_tensor_keep); Close it when done. It
// has no effect on a tensor Go already owns.
func (t *Tensor) Keep() error {
	h := t.ptr()
	if h == nil {
		return closedError("tensor")
	}
	err := check(C.fulmen_tensor_keep(h))
	runtime.KeepAlive(t)
	if err != nil {
		return err
	}
	release(t)
	return nil
}

// Float16 is an IEEE half-precision value as its 16-bit pattern.
type Float16 uint16

// BFloat16 is a bfloat16 value as its 16-bit pattern.
type BFloat16 uint16

// NewFloat16 converts f to half precision (round to nearest even).
func NewFloat16(f float32) Float16 { return Float16(C.fulmen_f16_from_f32(C.float(f))) }

// Float32 converts h to a float32.
func (h Float16) Float32() float32 { return float32(C.fulmen_f32_from_f16(C.uint16_t(h))) }

// NewBFloat16 converts f to bfloat16 (round to nearest even).
func NewBFloat16(f float32) BFloat16 { return BFloat16(C.fulmen_bf16_from_f32(C.float(f))) }

// Float32 converts b to a float32.
func (b BFloat16) Float32() float32 { return float32(C.fulmen_f32_from_bf16(C.uint16_t(b))) }

// Float16s converts a float32 slice to half precision.
func Float16s(fs []float32) []Float16 {
	out := make([]Float16, len(fs))
	for i, f := range fs {
		out[i] = NewFloat16(f)
	}
	return out
}

// BFloat16s converts a float32 slice to bfloat16.
func BFloat16s(fs []float32) []BFloat16 {
	out := make([]BFloat16, len(fs))
	for i, f := range fs {
		out[i] = NewBFloat16(f)
	}
	return out
}

// Element is a Go element type with a tensor dtype.
type Element interface {
	float32 | float64 | Float16 | BFloat16 | int64 | int32 | int16 | int8 | uint8 | bool
}

// DTypeOf is the dtype of the Go element type T.
func DTypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case Float16:
		return Half
	case BFloat16:
		return BHalf
	case int64:
		return Int64
	case int32:
		return Int32
	case int16:
		return Int16
	case int8:
		return Int8
	case uint8:
		return Uint8
	default:
		return Bool
	}
}

// shapeArg turns a shape into C arguments (NULL for an empty one).
func shapeArg(shape []int64) (*C.int64_t, C.size_t) {
	if len(shape) == 0 {
		return nil, 0
	}
	return (*C.int64_t)(unsafe.Pointer(&shape[0])), C.size_t(len(shape))
}

// tensorArray turns tensors into a C array of handles (Go memory holding
// only C pointers).
func tensorArray(ts []*Tensor) (**C.fulmen_tensor, C.size_t, []*C.fulmen_tensor) {
	if len(ts) == 0 {
		return nil, 0, nil
	}
	hs := make([]*C.fulmen_tensor, len(ts))
	for i, t := range ts {
		hs[i] = t.ptr()
	}
	return &hs[0], C.size_t(len(hs)), hs
}

// FromSlice creates a CPU tensor holding a copy of data with the given
// shape (a 1-D tensor of len(data) when no shape is given), of the dtype of
// T (fulmen_tensor_from_data). Float16 and BFloat16 data are their 16-bit
// patterns (see NewFloat16, Float16s).
func FromSlice[T Element](data []T, shape ...int64) (*Tensor, error) {
	if len(shape) == 0 {
		shape = []int64{int64(len(data))}
	}
	dt := DTypeOf[T]()
	p, nbytes, held := hostBytes(data)
	sp, nd := shapeArg(shape)
	var out *C.fulmen_tensor
	err := check(C.fulmen_tensor_from_data(p, C.size_t(nbytes), C.int32_t(dt), sp, nd, &out))
	runtime.KeepAlive(held)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// hostBytes is data as the C API reads host buffers (bools as bytes 0 / 1):
// its address, its size in bytes, and what to keep alive until the call
// returns.
func hostBytes[T Element](data []T) (unsafe.Pointer, int, any) {
	nbytes := len(data) * DTypeOf[T]().Size()
	if bs, ok := any(data).([]bool); ok {
		b := make([]byte, len(bs))
		for i, v := range bs {
			if v {
				b[i] = 1
			}
		}
		if len(b) == 0 {
			return nil, 0, b
		}
		return unsafe.Pointer(&b[0]), nbytes, b
	}
	if len(data) == 0 {
		return nil, 0, data
	}
	return unsafe.Pointer(&data[0]), nbytes, data
}

// Scalar creates a 0-dimensional CPU tensor holding value as dtype.
func Scalar(value float64, dtype DType) (*Tensor, error) {
	var out *C.fulmen_tensor
	if err := check(C.fulmen_tensor_scalar(C.double(value), C.int32_t(dtype), &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// filled runs one of the shape + dtype constructors.
func filled(shape []int64, f func(*C.int64_t, C.size_t, **C.fulmen_tensor) *C.fulmen_error) (*Tensor, error) {
	sp, nd := shapeArg(shape)
	var out *C.fulmen_tensor
	err := check(f(sp, nd, &out))
	runtime.KeepAlive(shape)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Zeros creates a CPU tensor of zeros.
func Zeros(dtype DType, shape ...int64) (*Tensor, error) {
	return filled(shape, func(s *C.int64_t, n C.size_t, o **C.fulmen_tensor) *C.fulmen_error {
		return C.fulmen_tensor_zeros(s, n, C.int32_t(dtype), o)
	})
}

// Ones creates a CPU tensor of ones.
func Ones(dtype DType, shape ...int64) (*Tensor, error) {
	return filled(shape, func(s *C.int64_t, n C.size_t, o **C.fulmen_tensor) *C.fulmen_error {
		return C.fulmen_tensor_ones(s, n, C.int32_t(dtype), o)
	})
}

// Full creates a CPU tensor filled with value (converted to dtype).
func Full(value float64, dtype DType, shape ...int64) (*Tensor, error) {
	return filled(shape, func(s *C.int64_t, n C.size_t, o **C.fulmen_tensor) *C.fulmen_error {
		return C.fulmen_tensor_full(s, n, C.double(value), C.int32_t(dtype), o)
	})
}

// Randn creates a CPU tensor of N(0, 1) samples from libtorch's global
// generator (seeded by ManualSeed); dtype must be floating.
func Randn(dtype DType, shape ...int64) (*Tensor, error) {
	return filled(shape, func(s *C.int64_t, n C.size_t, o **C.fulmen_tensor) *C.fulmen_error {
		return C.fulmen_tensor_randn(s, n, C.int32_t(dtype), o)
	})
}

// Rand creates a CPU tensor of U[0, 1) samples; dtype must be floating.
func Rand(dtype DType, shape ...int64) (*Tensor, error) {
	return filled(shape, func(s *C.int64_t, n C.size_t, o **C.fulmen_tensor) *C.fulmen_error {
		return C.fulmen_tensor_rand(s, n, C.int32_t(dtype), o)
	})
}

// Arange creates the 1-D CPU tensor start, start+step, ... below end.
func Arange(start, end, step float64, dtype DType) (*Tensor, error) {
	var out *C.fulmen_tensor
	if err := check(C.fulmen_tensor_arange(C.double(start), C.double(end), C.double(step), C.int32_t(dtype), &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// ToSlice copies the elements of t, converted to the dtype of T, row-major
// into a new slice (fulmen_tensor_copy_to; any device and layout).
func ToSlice[T Element](t *Tensor) ([]T, error) {
	n, err := t.Numel()
	if err != nil {
		return nil, err
	}
	dt := DTypeOf[T]()
	out := make([]T, n)
	if _, isBool := any(out).([]bool); isBool {
		b := make([]byte, n)
		if err := t.copyTo(dt, b); err != nil {
			return nil, err
		}
		bs := any(out).([]bool)
		for i, v := range b {
			bs[i] = v != 0
		}
		return out, nil
	}
	var p unsafe.Pointer
	if n > 0 {
		p = unsafe.Pointer(&out[0])
	}
	h := t.ptr()
	err = check(C.fulmen_tensor_copy_to(h, C.int32_t(dt), p, C.size_t(n*dt.Size())))
	runtime.KeepAlive(t)
	runtime.KeepAlive(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// copyTo copies the elements as dtype into dst, whose length must be the
// element count times the dtype's size.
func (t *Tensor) copyTo(dtype DType, dst []byte) error {
	var p unsafe.Pointer
	if len(dst) > 0 {
		p = unsafe.Pointer(&dst[0])
	}
	h := t.ptr()
	err := check(C.fulmen_tensor_copy_to(h, C.int32_t(dtype), p, C.size_t(len(dst))))
	runtime.KeepAlive(t)
	runtime.KeepAlive(dst)
	return err
}

// CopyTo copies the elements, converted to dtype, row-major into dst, whose
// length must be the element count times dtype.Size() (bool as 0/1 bytes,
// f16/bf16 as 16-bit patterns in native byte order).
func (t *Tensor) CopyTo(dtype DType, dst []byte) error { return t.copyTo(dtype, dst) }

// Item is the value of a one-element tensor as a float64.
func (t *Tensor) Item() (float64, error) {
	var v C.double
	err := check(C.fulmen_tensor_item(t.ptr(), &v))
	runtime.KeepAlive(t)
	return float64(v), err
}

// DType is the tensor's element type.
func (t *Tensor) DType() (DType, error) {
	var v C.int32_t
	err := check(C.fulmen_tensor_dtype(t.ptr(), &v))
	runtime.KeepAlive(t)
	return DType(v), err
}

// Ndim is the number of dimensions.
func (t *Tensor) Ndim() (int, error) {
	var v C.size_t
	err := check(C.fulmen_tensor_ndim(t.ptr(), &v))
	runtime.KeepAlive(t)
	return int(v), err
}

// Numel is the number of elements.
func (t *Tensor) Numel() (int, error) {
	var v C.size_t
	err := check(C.fulmen_tensor_numel(t.ptr(), &v))
	runtime.KeepAlive(t)
	return int(v), err
}

// Shape is the size of every dimension.
func (t *Tensor) Shape() ([]int64, error) {
	dims := make([]int64, 8)
	for {
		var nd C.size_t
		err := check(C.fulmen_tensor_shape(t.ptr(), (*C.int64_t)(unsafe.Pointer(&dims[0])), C.size_t(len(dims)), &nd))
		runtime.KeepAlive(t)
		if err == nil {
			return dims[:nd], nil
		}
		if fe, ok := err.(*Error); !ok || fe.Code != CodeOutOfRange || int(nd) <= len(dims) {
			return nil, err
		}
		dims = make([]int64, nd)
	}
}

// Device is the tensor's device.
func (t *Tensor) Device() (Device, error) {
	var typ C.int32_t
	var idx C.int64_t
	err := check(C.fulmen_tensor_device(t.ptr(), &typ, &idx))
	runtime.KeepAlive(t)
	return Device{Type: DeviceType(typ), Index: int64(idx)}, err
}

// RequiresGrad reports whether the tensor records operations for autograd.
func (t *Tensor) RequiresGrad() (bool, error) {
	var v C.bool
	err := check(C.fulmen_tensor_requires_grad(t.ptr(), &v))
	runtime.KeepAlive(t)
	return bool(v), err
}

// IsPinned reports whether the tensor is in pinned host memory (a batch of
// a loader with PinMemory where CUDA is available).
func (t *Tensor) IsPinned() (bool, error) {
	var v C.bool
	err := check(C.fulmen_tensor_is_pinned(t.ptr(), &v))
	runtime.KeepAlive(t)
	return bool(v), err
}

// SetRequiresGrad turns gradient recording on or off for a leaf tensor.
func (t *Tensor) SetRequiresGrad(on bool) error {
	err := check(C.fulmen_tensor_set_requires_grad(t.ptr(), C.bool(on)))
	runtime.KeepAlive(t)
	return err
}

// Backward runs backpropagation from a one-element tensor (a loss).
func (t *Tensor) Backward() error {
	err := check(C.fulmen_tensor_backward(t.ptr()))
	runtime.KeepAlive(t)
	return err
}

// Grad is the accumulated gradient (sharing storage with .grad), or nil
// when there is none yet.
func (t *Tensor) Grad() (*Tensor, error) {
	return unary(t, func(h *C.fulmen_tensor, o **C.fulmen_tensor) *C.fulmen_error { return C.fulmen_tensor_grad(h, o) })
}

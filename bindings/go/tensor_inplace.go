package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"math"
	"runtime"
)

// inPlace runs a C in-place op on t and keeps t alive through it.
func inPlace(t *Tensor, f func(cTensor) cErr) error {
	err := check(f(t.ptr()))
	runtime.KeepAlive(t)
	return err
}

// inPlaceWith is inPlace with a second tensor argument.
func inPlaceWith(t, other *Tensor, f func(cTensor, cTensor) cErr) error {
	err := check(f(t.ptr(), other.ptr()))
	runtime.KeepAlive(t)
	runtime.KeepAlive(other)
	return err
}

// CopyInPlace is t.copy_(src) under no_grad: src broadcast and converted
// to t's dtype and device, written into t's storage (a parameter from
// StateDictGet changes in its model).
func (t *Tensor) CopyInPlace(src *Tensor) error {
	return inPlaceWith(t, src, func(a, b cTensor) cErr { return C.fulmen_tensor_copy_(a, b) })
}

// CopyFromSlice overwrites t with host data (as many elements as t, of any
// element type, converted to t's dtype): sets a parameter from Go memory.
func CopyFromSlice[T Element](t *Tensor, data []T) error {
	p, nbytes, held := hostBytes(data)
	err := inPlace(t, func(x cTensor) cErr {
		return C.fulmen_tensor_copy_from_host(x, p, C.size_t(nbytes), C.int32_t(DTypeOf[T]()))
	})
	runtime.KeepAlive(held)
	return err
}

// FillInPlace is t.fill_(value) under no_grad (nn.init.constant_).
func (t *Tensor) FillInPlace(value float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_fill_(x, C.double(value)) })
}

// ZeroInPlace is t.zero_() under no_grad.
func (t *Tensor) ZeroInPlace() error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_zero_(x) })
}

// AddInPlace is t.add_(other, alpha=alpha) under no_grad: t += alpha * other.
func (t *Tensor) AddInPlace(other *Tensor, alpha float64) error {
	return inPlaceWith(t, other, func(a, b cTensor) cErr { return C.fulmen_tensor_add_(a, b, C.double(alpha)) })
}

// AddScalarInPlace is t.add_(value) under no_grad.
func (t *Tensor) AddScalarInPlace(value float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_add_scalar_(x, C.double(value)) })
}

// MulInPlace is t.mul_(other) under no_grad, other broadcast.
func (t *Tensor) MulInPlace(other *Tensor) error {
	return inPlaceWith(t, other, func(a, b cTensor) cErr { return C.fulmen_tensor_mul_(a, b) })
}

// MulScalarInPlace is t.mul_(value) under no_grad.
func (t *Tensor) MulScalarInPlace(value float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_mul_scalar_(x, C.double(value)) })
}

// ClampInPlace is t.clamp_(min, max) under no_grad; math.NaN() leaves a
// side open.
func (t *Tensor) ClampInPlace(min, max float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_clamp_(x, C.double(min), C.double(max)) })
}

// UniformInPlace is t.uniform_(low, high) under no_grad, from the global
// generator (ManualSeed).
func (t *Tensor) UniformInPlace(low, high float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_uniform_(x, C.double(low), C.double(high)) })
}

// NormalInPlace is t.normal_(mean, std) under no_grad, from the global
// generator.
func (t *Tensor) NormalInPlace(mean, std float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_tensor_normal_(x, C.double(mean), C.double(std)) })
}

// FanMode is which fan Kaiming initialisation preserves (fulmen_fan_mode).
type FanMode int32

// Fan modes.
const (
	// FanIn preserves the forward pass's variance.
	FanIn FanMode = C.FULMEN_FAN_MODE_FAN_IN
	// FanOut preserves the backward pass's variance.
	FanOut FanMode = C.FULMEN_FAN_MODE_FAN_OUT
)

// CalculateGain is nn.init.calculate_gain(nonlinearity, param); a NaN
// param takes the default (leaky_relu's 0.01).
func CalculateGain(nonlinearity string, param float64) (float64, error) {
	n := cString(nonlinearity)
	defer freeCString(n)
	var out C.double
	err := check(C.fulmen_init_calculate_gain(n, C.double(param), &out))
	return float64(out), err
}

// XavierUniform is nn.init.xavier_uniform_(t, gain).
func XavierUniform(t *Tensor, gain float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_init_xavier_uniform_(x, C.double(gain)) })
}

// XavierNormal is nn.init.xavier_normal_(t, gain).
func XavierNormal(t *Tensor, gain float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_init_xavier_normal_(x, C.double(gain)) })
}

// KaimingUniform is nn.init.kaiming_uniform_(t, a, mode, nonlinearity).
func KaimingUniform(t *Tensor, a float64, mode FanMode, nonlinearity string) error {
	n := cString(nonlinearity)
	defer freeCString(n)
	return inPlace(t, func(x cTensor) cErr {
		return C.fulmen_init_kaiming_uniform_(x, C.double(a), C.int32_t(mode), n)
	})
}

// KaimingNormal is nn.init.kaiming_normal_(t, a, mode, nonlinearity).
func KaimingNormal(t *Tensor, a float64, mode FanMode, nonlinearity string) error {
	n := cString(nonlinearity)
	defer freeCString(n)
	return inPlace(t, func(x cTensor) cErr {
		return C.fulmen_init_kaiming_normal_(x, C.double(a), C.int32_t(mode), n)
	})
}

// Orthogonal is nn.init.orthogonal_(t, gain).
func Orthogonal(t *Tensor, gain float64) error {
	return inPlace(t, func(x cTensor) cErr { return C.fulmen_init_orthogonal_(x, C.double(gain)) })
}

// TruncNormal is nn.init.trunc_normal_(t, mean, std, a, b).
func TruncNormal(t *Tensor, mean, std, a, b float64) error {
	return inPlace(t, func(x cTensor) cErr {
		return C.fulmen_init_trunc_normal_(x, C.double(mean), C.double(std), C.double(a), C.double(b))
	})
}

// OpenBound is a clamp bound that leaves its side open (NaN).
var OpenBound = math.NaN()

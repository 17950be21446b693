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

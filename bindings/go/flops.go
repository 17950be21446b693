package fulmen

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
)

// MeasureFlops is PyTorch's FlopCounterMode around code
// (fulmen_measure_flops): it runs code on this goroutine's thread and
// returns the FLOPs of the matrix products, convolutions and attention
// kernels it ran through fulmen, the backward passes it started included,
// counted with torch's formulas. code's error ends the measurement and is
// the returned error's cause. Measurements do not nest.
func MeasureFlops(code func() error) (uint64, error) {
	if code == nil {
		return 0, &Error{Code: CodeNullArgument, Message: "the measured function is nil"}
	}
	h := cgo.NewHandle(code)
	defer h.Delete()
	var flops C.uint64_t
	err := withCallbacks(nil, func() *C.fulmen_error {
		return C.fulmen_go_measure_flops(C.uintptr_t(h), &flops)
	})
	return uint64(flops), err
}

//export fulmenGoMeasured
func fulmenGoMeasured(ud C.uintptr_t) *C.fulmen_error {
	return runCallback(func() error {
		return cgo.Handle(ud).Value().(func() error)()
	})
}

// MeasureFlops is Lightning's measure_flops(model, lambda: model(input),
// lambda y: y.sum()) (fulmen_model_measure_flops): the FLOPs of one
// forward on input and, with backward, of the backward of its output's
// sum, as PyTorch's FlopCounterMode counts them. The model's gradients,
// buffers and the CPU's random state are left as they were.
func (m *Model) MeasureFlops(input *Tensor, backward bool) (uint64, error) {
	var flops C.uint64_t
	err := check(C.fulmen_model_measure_flops(m.ptr(), input.ptr(), C.bool(backward), &flops))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	return uint64(flops), err
}

package fulmen

// The //export trampolines of a HostOptimizer (see callbacks.go). Only
// declarations may appear in this file's preamble, as cgo requires for a
// file with //export.

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

func hostOptimizerOf(ud C.uintptr_t) *hostOptimizerState {
	return cgo.Handle(ud).Value().(*hostOptimizerState)
}

//export fulmenGoHostOptimizerStep
func fulmenGoHostOptimizerStep(ud C.uintptr_t, ctx *C.fulmen_optimizer_step_context) *C.fulmen_error {
	return runCallback(func() error {
		return hostOptimizerOf(ud).impl.Step(&OptimizerStepContext{c: ctx})
	})
}

//export fulmenGoHostOptimizerZeroGrad
func fulmenGoHostOptimizerZeroGrad(ud C.uintptr_t, setToNone C.int) *C.fulmen_error {
	return runCallback(func() error {
		return hostOptimizerOf(ud).impl.(HostOptimizerZeroGrad).ZeroGrad(setToNone != 0)
	})
}

//export fulmenGoHostOptimizerStateDict
func fulmenGoHostOptimizerStateDict(ud C.uintptr_t, data **C.uint8_t, n *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		st := hostOptimizerOf(ud)
		state, err := st.impl.(HostOptimizerState).StateDict()
		if err != nil {
			return err
		}
		st.freeState()
		*data, *n = nil, 0
		if len(state) == 0 {
			return nil
		}
		if len(state) > MaxOptimizerState {
			return &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("StateDict gave %d bytes; at most %d", len(state), MaxOptimizerState)}
		}
		// C memory, which stays valid after the call returns (until the
		// next call or the optimizer's end), as the library reads it then.
		st.state = C.CBytes(state)
		*data, *n = (*C.uint8_t)(st.state), C.size_t(len(state))
		return nil
	})
}

//export fulmenGoHostOptimizerLoadStateDict
func fulmenGoHostOptimizerLoadStateDict(ud C.uintptr_t, data *C.uint8_t, n C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		var state []byte
		if n > 0 {
			state = C.GoBytes(unsafe.Pointer(data), C.int(n))
		}
		return hostOptimizerOf(ud).impl.(HostOptimizerState).LoadStateDict(state)
	})
}

//export fulmenGoHostOptimizerFree
func fulmenGoHostOptimizerFree(ud C.uintptr_t) {
	h := cgo.Handle(ud)
	h.Value().(*hostOptimizerState).freeState()
	h.Delete()
}

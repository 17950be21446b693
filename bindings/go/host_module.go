package fulmen

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// HostCall is the module a HostForward runs for: its registered tensors,
// its children and its mode. Borrowed: valid only during the call.
type HostCall struct {
	h *C.fulmen_host_call
}

// Get is a registered tensor ("scale") or a child's ("proj.weight"), by
// state_dict name (scope-owned, like every tensor made in a callback).
func (c *HostCall) Get(name string) (*Tensor, error) {
	n := cString(name)
	defer freeCString(n)
	var out *C.fulmen_tensor
	if err := check(C.fulmen_host_call_get(c.h, n, &out)); err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// ForwardChild runs the child at path on inputs (nil: left out) and
// returns all its results (fulmen_host_call_forward_child).
func (c *HostCall) ForwardChild(path string, inputs ...*Tensor) ([]*Tensor, error) {
	return forwardMulti(path, inputs, func(p *C.char, arr **C.fulmen_tensor, n C.size_t, outs *cTensor, capacity C.size_t, count *C.size_t) cErr {
		return C.fulmen_host_call_forward_child(c.h, p, arr, n, outs, capacity, count)
	})
}

// IsTraining reports whether the module is in training mode.
func (c *HostCall) IsTraining() (bool, error) {
	var v C.bool
	err := check(C.fulmen_host_call_is_training(c.h, &v))
	return bool(v), err
}

// HostForward is a host module's forward pass: it gets the module's call
// and the inputs (nil for a left-out one) and returns exactly the module's
// number of outputs.
// A runtime.Goexit in it (t.FailNow, t.Fatal, t.SkipNow) fails the call
// that ran it like an error naming it: see "Callbacks and runtime.Goexit"
// in the package documentation.
type HostForward func(call *HostCall, inputs []*Tensor) ([]*Tensor, error)

type hostModule struct {
	forward    HostForward
	numOutputs int
}

// NewHostModule creates a module whose forward pass is forward, returning
// numOutputs tensors (fulmen_model_host_new): add children with Add and
// tensors with RegisterParameter / RegisterBuffer, and reach them through
// the HostCall. It runs as a child of a Sequential too.
func NewHostModule(numOutputs int, forward HostForward) (*Model, error) {
	if forward == nil || numOutputs < 1 {
		return nil, &Error{Code: CodeInvalidArgument, Message: "NewHostModule needs a forward and numOutputs >= 1"}
	}
	h := cgo.NewHandle(&hostModule{forward: forward, numOutputs: numOutputs})
	var out *C.fulmen_model
	if err := check(C.fulmen_go_host_module_new(C.uintptr_t(h), C.size_t(numOutputs), &out)); err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return nil, err
	}
	return newModel(out), nil
}

//export fulmenGoHostForward
func fulmenGoHostForward(ud C.uintptr_t, call *C.fulmen_host_call, inputs **C.fulmen_tensor, n C.size_t, outs **C.fulmen_tensor) *C.fulmen_error {
	return runCallback(func() error {
		m := cgo.Handle(ud).Value().(*hostModule)
		ins := make([]*Tensor, int(n))
		if n > 0 {
			for i, h := range unsafe.Slice(inputs, int(n)) {
				ins[i] = newTensor(h)
			}
		}
		results, err := m.forward(&HostCall{h: call}, ins)
		if err != nil {
			return err
		}
		if len(results) != m.numOutputs {
			return fmt.Errorf("the host forward returned %d tensors, not %d", len(results), m.numOutputs)
		}
		slots := unsafe.Slice(outs, m.numOutputs)
		for i, t := range results {
			if err := lend(t, &slots[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// RegisterParameter registers t as a trainable parameter name of the
// module at path ("" for m itself); it shares t's storage
// (fulmen_model_register_parameter).
func (m *Model) RegisterParameter(path, name string, t *Tensor) error {
	return m.register(path, name, t, true)
}

// RegisterBuffer registers t as a buffer name (saved, moved, broadcast by
// DDP; not trained) of the module at path.
func (m *Model) RegisterBuffer(path, name string, t *Tensor) error {
	return m.register(path, name, t, false)
}

func (m *Model) register(path, name string, t *Tensor, parameter bool) error {
	p := cString(path)
	defer freeCString(p)
	n := cString(name)
	defer freeCString(n)
	var err error
	if parameter {
		err = check(C.fulmen_model_register_parameter(m.ptr(), p, n, t.ptr()))
	} else {
		err = check(C.fulmen_model_register_buffer(m.ptr(), p, n, t.ptr()))
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(t)
	return err
}

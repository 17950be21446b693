package fulmen

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// FlopCounts is what a FLOP measurement counted, as PyTorch's
// FlopCounterMode keeps it (fulmen_flop_counts): in total, by module
// ("Global", then the modules in name order, named as torch names them:
// "MLP", "MLP.net.0") and by operator. Close it.
type FlopCounts struct {
	h handle[*C.fulmen_flop_counts]
}

// OperatorFlops is one operator's FLOPs ("aten::mm").
type OperatorFlops struct {
	Operator string
	Flops    uint64
}

func newFlopCounts(p *C.fulmen_flop_counts) *FlopCounts {
	c := &FlopCounts{}
	c.h.store(p)
	runtime.SetFinalizer(c, (*FlopCounts).Close)
	return c
}

func (c *FlopCounts) ptr() *C.fulmen_flop_counts {
	if c == nil {
		return nil
	}
	return c.h.load()
}

// moduleName is module as a new C string ("Global" for ""); free it.
func moduleName(module string) *C.char {
	if module == "" {
		module = "Global"
	}
	return cString(module)
}

// Total is the FLOPs counted for module ("" or "Global": for the whole
// measurement); 0 for a module that counted none.
func (c *FlopCounts) Total(module string) (uint64, error) {
	m := moduleName(module)
	defer C.free(unsafe.Pointer(m))
	var n C.uint64_t
	err := check(C.fulmen_flop_counts_total(c.ptr(), m, &n))
	runtime.KeepAlive(c)
	return uint64(n), err
}

// Modules are the modules with counts: "Global" first, then in name order.
func (c *FlopCounts) Modules() ([]string, error) {
	defer runtime.KeepAlive(c)
	var n C.size_t
	if err := check(C.fulmen_flop_counts_num_modules(c.ptr(), &n)); err != nil {
		return nil, err
	}
	out := make([]string, 0, int(n))
	for i := 0; i < int(n); i++ {
		s, err := readString(func(b *C.char, capacity C.size_t, l *C.size_t) cErr {
			return C.fulmen_flop_counts_module_name(c.ptr(), C.size_t(i), b, capacity, l)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Operators are module's operators ("" or "Global": the whole
// measurement's) with their FLOPs, in the order first counted there.
func (c *FlopCounts) Operators(module string) ([]OperatorFlops, error) {
	m := moduleName(module)
	defer C.free(unsafe.Pointer(m))
	defer runtime.KeepAlive(c)
	var n C.size_t
	if err := check(C.fulmen_flop_counts_num_operators(c.ptr(), m, &n)); err != nil {
		return nil, err
	}
	ops := make([]OperatorFlops, 0, int(n))
	for i := 0; i < int(n); i++ {
		var flops C.uint64_t
		s, err := readString(func(b *C.char, capacity C.size_t, l *C.size_t) cErr {
			return C.fulmen_flop_counts_operator(c.ptr(), m, C.size_t(i), b, capacity, l, &flops)
		})
		if err != nil {
			return nil, err
		}
		ops = append(ops, OperatorFlops{Operator: s, Flops: uint64(flops)})
	}
	return ops, nil
}

// Table is the table FlopCounterMode's get_table(depth) prints (2 is
// torch's default; a negative depth shows every module).
func (c *FlopCounts) Table(depth int) (string, error) {
	d := C.size_t(depth)
	if depth < 0 {
		d = C.SIZE_MAX
	}
	s, err := readString(func(b *C.char, capacity C.size_t, l *C.size_t) cErr {
		return C.fulmen_flop_counts_table(c.ptr(), d, b, capacity, l)
	})
	runtime.KeepAlive(c)
	return s, err
}

// Close frees the counts; idempotent. The error is always nil.
func (c *FlopCounts) Close() error {
	if c == nil {
		return nil
	}
	if h := c.h.take(); h != nil {
		C.fulmen_flop_counts_free(h)
		runtime.SetFinalizer(c, nil)
	}
	return nil
}

// MeasureFlopsByModule is MeasureFlops keeping every count
// (fulmen_measure_flops_by_module): by module and operator, as
// FlopCounterMode's get_flop_counts(). Close the counts.
func MeasureFlopsByModule(code func() error) (*FlopCounts, error) {
	if code == nil {
		return nil, &Error{Code: CodeNullArgument, Message: "the measured function is nil"}
	}
	h := cgo.NewHandle(code)
	defer h.Delete()
	var out *C.fulmen_flop_counts
	err := withCallbacks(nil, func() *C.fulmen_error {
		return C.fulmen_go_measure_flops_by_module(C.uintptr_t(h), &out)
	})
	if err != nil {
		return nil, err
	}
	return newFlopCounts(out), nil
}

// MeasureFlopsByModule is MeasureFlops keeping every count
// (fulmen_model_measure_flops_by_module). Close the counts.
func (m *Model) MeasureFlopsByModule(input *Tensor, backward bool) (*FlopCounts, error) {
	var out *C.fulmen_flop_counts
	err := check(C.fulmen_model_measure_flops_by_module(m.ptr(), input.ptr(), C.bool(backward), &out))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	if err != nil {
		return nil, err
	}
	return newFlopCounts(out), nil
}

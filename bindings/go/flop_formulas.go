package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// FlopArgKind says what a FlopArg holds (fulmen_flop_value_kind).
type FlopArgKind int32

// The kinds of FlopArg.
const (
	FlopNone   FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_NONE   // None, or an optional tensor left out
	FlopTensor FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_TENSOR // Shape, DType
	FlopInt    FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_INT    // Int
	FlopFloat  FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_FLOAT  // Float
	FlopBool   FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_BOOL   // Int, 0 or 1
	FlopString FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_STRING // Text
	FlopInts   FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_INTS   // Ints
	FlopList   FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_LIST   // Items
	FlopOther  FlopArgKind = C.FULMEN_FLOP_VALUE_KIND_OTHER  // a device, a generator, ...
)

// FlopArg is one argument or result of an operator as a FLOP formula sees
// it (fulmen_flop_value, copied): tensors by shape, everything else by
// value. Only the fields of its Kind are set.
type FlopArg struct {
	Kind  FlopArgKind
	DType DType     // a tensor's dtype, -1 for one outside fulmen's
	Shape []int64   // a tensor's sizes
	Int   int64     // an int, or a bool as 0 or 1
	Float float64   // a float
	Text  string    // a string
	Ints  []int64   // a list of ints
	Items []FlopArg // a list's or tuple's elements
}

// Numel is a tensor's element count (0 for anything else).
func (a FlopArg) Numel() uint64 {
	if a.Kind != FlopTensor {
		return 0
	}
	n := uint64(1)
	for _, d := range a.Shape {
		n *= uint64(d)
	}
	return n
}

// FlopFormula gives the FLOPs of one call of operator op with inputs
// (every argument of its schema, defaults included) that returned
// outputs. It may run on several threads at once; its error fails the
// measurement (an *Error's code kept).
type FlopFormula func(op string, inputs, outputs []FlopArg) (uint64, error)

// RegisterFlopFormula registers formula for operator op ("aten::gelu", no
// overload) for the FLOP measurements that begin from now on, replacing
// torch's formula for an operator that has one
// (fulmen_flops_register_formula: refusals and rules there; torch's
// register_flop_formula). Process-wide.
func RegisterFlopFormula(op string, formula FlopFormula) error {
	if formula == nil {
		return &Error{Code: CodeNullArgument, Message: "the FLOP formula is nil"}
	}
	cop := cString(op)
	defer freeCString(cop)
	h := cgo.NewHandle(formula)
	err := check(C.fulmen_go_register_flop_formula(cop, C.uintptr_t(h)))
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
	}
	return err
}

// UnregisterFlopFormula unregisters the formula of op and says whether one
// was registered. Measurements under way keep it to their end.
func UnregisterFlopFormula(op string) (bool, error) {
	cop := cString(op)
	defer freeCString(cop)
	var removed C.bool
	err := check(C.fulmen_flops_unregister_formula(cop, &removed))
	return bool(removed), err
}

// flopArgs copies n C values at p.
func flopArgs(p *C.fulmen_flop_value, n C.size_t) []FlopArg {
	if p == nil || n == 0 {
		return nil
	}
	values := unsafe.Slice(p, int(n))
	out := make([]FlopArg, len(values))
	for i := range values {
		v := &values[i]
		a := FlopArg{Kind: FlopArgKind(v.kind), DType: DType(v.dtype), Int: int64(v.integer), Float: float64(v.number)}
		if v.shape != nil {
			a.Shape = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(v.shape)), int(v.ndim))...)
		}
		if v.text != nil {
			a.Text = C.GoString(v.text)
		}
		if v.ints != nil {
			a.Ints = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(v.ints)), int(v.num_ints))...)
		}
		a.Items = flopArgs(v.items, v.num_items)
		out[i] = a
	}
	return out
}

//export fulmenGoFlopFormula
func fulmenGoFlopFormula(ud C.uintptr_t, op *C.char, in *C.fulmen_flop_value, nIn C.size_t,
	out *C.fulmen_flop_value, nOut C.size_t, flops *C.uint64_t) *C.fulmen_error {
	return runCallback(func() error {
		formula := cgo.Handle(ud).Value().(FlopFormula)
		n, err := formula(C.GoString(op), flopArgs(in, nIn), flopArgs(out, nOut))
		if err == nil {
			*flops = C.uint64_t(n)
		}
		return err
	})
}

package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"sort"
)

// Tuple is a TorchScript tuple: its elements in order.
type Tuple []any

// DictEntry is one key and value of a Dict.
type DictEntry struct {
	Key   any
	Value any
}

// Dict is a TorchScript dict with its entries in order (keys all strings,
// all ints, all floats or all bools).
type Dict []DictEntry

// Get is the value of the string key, and whether it exists.
func (d Dict) Get(key string) (any, bool) {
	for _, e := range d {
		if k, ok := e.Key.(string); ok && k == key {
			return e.Value, true
		}
	}
	return nil, false
}

// maxValueDepth is the deepest nesting converted (FULMEN_MAX_VALUE_DEPTH).
const maxValueDepth = C.FULMEN_MAX_VALUE_DEPTH

// valueBuilder makes C values from Go ones and frees them all at the end.
type valueBuilder struct {
	made []*C.fulmen_value
}

func (b *valueBuilder) free() {
	for _, h := range b.made {
		C.fulmen_value_free(h)
	}
}

func (b *valueBuilder) make(f func(**C.fulmen_value) cErr) (*C.fulmen_value, error) {
	var out *C.fulmen_value
	if err := check(f(&out)); err != nil {
		return nil, err
	}
	b.made = append(b.made, out)
	return out, nil
}

// items converts a sequence into C values (a Go array of C pointers).
func (b *valueBuilder) items(vs []any, depth int) ([]*C.fulmen_value, error) {
	hs := make([]*C.fulmen_value, len(vs))
	for i, v := range vs {
		h, err := b.value(v, depth+1)
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	return hs, nil
}

func valueArray(hs []*C.fulmen_value) (**C.fulmen_value, C.size_t) {
	if len(hs) == 0 {
		return nil, 0
	}
	return &hs[0], C.size_t(len(hs))
}

// value converts a Go value: nil (None), bool, int / int32 / int64, float32
// / float64, string, *Tensor, Tuple, []any, []*Tensor, []int64, []float64,
// []string (lists), Dict or map[string]any (a dict, keys sorted).
func (b *valueBuilder) value(v any, depth int) (*C.fulmen_value, error) {
	if depth > maxValueDepth {
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("a value nested deeper than %d levels", maxValueDepth)}
	}
	switch x := v.(type) {
	case nil:
		return b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_none(o) })
	case bool:
		return b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_bool(C.bool(x), o) })
	case int:
		return b.value(int64(x), depth)
	case int32:
		return b.value(int64(x), depth)
	case int64:
		return b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_int(C.int64_t(x), o) })
	case float32:
		return b.value(float64(x), depth)
	case float64:
		return b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_double(C.double(x), o) })
	case string:
		p := cString(x)
		defer freeCString(p)
		return b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_string(p, o) })
	case *Tensor:
		if x == nil || x.Closed() {
			return nil, &Error{Code: CodeInvalidArgument, Message: "a nil or closed tensor in a value (use nil for None)"}
		}
		h, err := b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_tensor(x.ptr(), o) })
		runtime.KeepAlive(x)
		return h, err
	case Tuple:
		return b.sequence([]any(x), depth, true)
	case []any:
		return b.sequence(x, depth, false)
	case []*Tensor:
		return b.sequence(anySlice(x), depth, false)
	case []int64:
		return b.sequence(anySlice(x), depth, false)
	case []float64:
		return b.sequence(anySlice(x), depth, false)
	case []string:
		return b.sequence(anySlice(x), depth, false)
	case Dict:
		keys := make([]any, len(x))
		vals := make([]any, len(x))
		for i, e := range x {
			keys[i], vals[i] = e.Key, e.Value
		}
		return b.dict(keys, vals, depth)
	case map[string]any:
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		sort.Strings(names)
		keys := make([]any, len(names))
		vals := make([]any, len(names))
		for i, k := range names {
			keys[i], vals[i] = k, x[k]
		}
		return b.dict(keys, vals, depth)
	default:
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("a %T has no TorchScript form", v)}
	}
}

func anySlice[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func (b *valueBuilder) sequence(vs []any, depth int, tuple bool) (*C.fulmen_value, error) {
	hs, err := b.items(vs, depth)
	if err != nil {
		return nil, err
	}
	arr, n := valueArray(hs)
	return b.make(func(o **C.fulmen_value) cErr {
		if tuple {
			return C.fulmen_value_tuple(arr, n, o)
		}
		return C.fulmen_value_list(arr, n, o)
	})
}

func (b *valueBuilder) dict(keys, vals []any, depth int) (*C.fulmen_value, error) {
	ks, err := b.items(keys, depth)
	if err != nil {
		return nil, err
	}
	vs, err := b.items(vals, depth)
	if err != nil {
		return nil, err
	}
	karr, n := valueArray(ks)
	varr, _ := valueArray(vs)
	return b.make(func(o **C.fulmen_value) cErr { return C.fulmen_value_dict(karr, varr, n, o) })
}

// goValue converts a C value to Go (see CallMethod) and frees it.
func goValue(h *C.fulmen_value) (any, error) {
	defer C.fulmen_value_free(h)
	var kind C.int32_t
	if err := check(C.fulmen_value_get_kind(h, &kind)); err != nil {
		return nil, err
	}
	switch kind {
	case C.FULMEN_VALUE_KIND_NONE:
		return nil, nil
	case C.FULMEN_VALUE_KIND_BOOL:
		var v C.bool
		err := check(C.fulmen_value_get_bool(h, &v))
		return bool(v), err
	case C.FULMEN_VALUE_KIND_INT:
		var v C.int64_t
		err := check(C.fulmen_value_get_int(h, &v))
		return int64(v), err
	case C.FULMEN_VALUE_KIND_DOUBLE:
		var v C.double
		err := check(C.fulmen_value_get_double(h, &v))
		return float64(v), err
	case C.FULMEN_VALUE_KIND_STRING:
		return readString(func(buf *C.char, capacity C.size_t, n *C.size_t) cErr {
			return C.fulmen_value_get_string(h, buf, capacity, n)
		})
	case C.FULMEN_VALUE_KIND_TENSOR:
		var t *C.fulmen_tensor
		if err := check(C.fulmen_value_get_tensor(h, &t)); err != nil {
			return nil, err
		}
		return newTensor(t), nil
	case C.FULMEN_VALUE_KIND_TUPLE, C.FULMEN_VALUE_KIND_LIST, C.FULMEN_VALUE_KIND_DICT:
	default:
		return nil, &Error{Code: CodeUnsupported, Message: fmt.Sprintf("a value of kind %d, which this binding does not know", int32(kind))}
	}
	var n C.size_t
	if err := check(C.fulmen_value_len(h, &n)); err != nil {
		return nil, err
	}
	if kind == C.FULMEN_VALUE_KIND_DICT {
		d := Dict{}
		for i := C.size_t(0); i < n; i++ {
			var k, v *C.fulmen_value
			if err := check(C.fulmen_value_dict_entry(h, i, &k, &v)); err != nil {
				return nil, err
			}
			key, err := goValue(k)
			if err != nil {
				C.fulmen_value_free(v)
				return nil, err
			}
			val, err := goValue(v)
			if err != nil {
				return nil, err
			}
			d = append(d, DictEntry{Key: key, Value: val})
		}
		return d, nil
	}
	items := []any{}
	for i := C.size_t(0); i < n; i++ {
		var item *C.fulmen_value
		if err := check(C.fulmen_value_item(h, i, &item)); err != nil {
			return nil, err
		}
		v, err := goValue(item)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
	}
	if kind == C.FULMEN_VALUE_KIND_TUPLE {
		return Tuple(items), nil
	}
	return items, nil
}

// CallMethod calls the scripted method of a TorchScript model
// (fulmen_model_call_method) with positional args and returns its result.
// Arguments: nil (None), bool, int / int32 / int64, float32 / float64,
// string, *Tensor, Tuple, []any / []*Tensor / []int64 / []float64 /
// []string (lists), Dict or map[string]any (dicts). Results: nil, bool,
// int64, float64, string, *Tensor, Tuple, []any (lists) and Dict.
func (m *Model) CallMethod(method string, args ...any) (any, error) {
	return m.CallMethodChild("", method, args...)
}

// CallMethodChild is CallMethod on the TorchScript child at path.
func (m *Model) CallMethodChild(path, method string, args ...any) (any, error) {
	var b valueBuilder
	defer b.free()
	hs, err := b.items(args, 0)
	if err != nil {
		return nil, err
	}
	p := cString(path)
	defer freeCString(p)
	name := cString(method)
	defer freeCString(name)
	arr, n := valueArray(hs)
	var out *C.fulmen_value
	err = check(C.fulmen_model_call_method(m.ptr(), p, name, arr, n, &out))
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	return goValue(out)
}

// Value is the batch as a Tuple of its tensors: the batch argument of a
// scripted training_step (fulmen_value_from_batch).
func (b *Batch) Value() (Tuple, error) {
	var out *C.fulmen_value
	if err := check(C.fulmen_value_from_batch(b.ptr(), &out)); err != nil {
		return nil, err
	}
	v, err := goValue(out)
	if err != nil {
		return nil, err
	}
	return v.(Tuple), nil
}

// LoadTorchScriptOn loads a TorchScript module with its tensors on device.
func LoadTorchScriptOn(path string, device Device) (*Model, error) {
	p := cString(path)
	defer freeCString(p)
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_load_torchscript_on(p, C.int32_t(device.Type), C.int64_t(device.Index), o)
	})
}

// LoadExported loads a torch.export archive (.pt2, written by
// torch.export.save or package_pt2) on the CPU. Its programs ("forward",
// "training_step", ...) share one state (parameters, buffers, by PyTorch's
// names); call them with CallMethod, with arguments nested as exported.
func LoadExported(path string) (*Model, error) {
	p := cString(path)
	defer freeCString(p)
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_load_exported(p, o)
	})
}

// LoadExportedOn loads a torch.export archive with its tensors on device.
func LoadExportedOn(path string, device Device) (*Model, error) {
	p := cString(path)
	defer freeCString(p)
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_load_exported_on(p, C.int32_t(device.Type), C.int64_t(device.Index), o)
	})
}

// AddCompiledStep adds the compiled training step in the AOTInductor
// package path (python/fulmen_export.py export_compiled_step) to the model,
// answering method: CallMethod(method, batch) then returns a Dict with
// "loss", whose backward adds the compiled gradients. One package per batch
// shape; the package is native code: add only packages you built.
func (m *Model) AddCompiledStep(path, method string) error {
	p := cString(path)
	defer freeCString(p)
	me := cString(method)
	defer freeCString(me)
	err := check(C.fulmen_model_add_compiled_step(m.ptr(), p, me))
	runtime.KeepAlive(m)
	return err
}

// ToTorchScript traces the model's forward on exampleInputs into a new
// TorchScript model in evaluation mode holding copies of the weights
// (fulmen_model_to_torchscript; Lightning's to_torchscript(method="trace")):
// save it with SaveTorchScript for PyTorch's torch.jit.load.
func (m *Model) ToTorchScript(exampleInputs ...*Tensor) (*Model, error) {
	for i, t := range exampleInputs {
		if err := checkOptional(t, fmt.Sprintf("exampleInputs[%d]", i)); err != nil {
			return nil, err
		}
	}
	arr, n, hs := tensorArray(exampleInputs)
	traced, err := makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_to_torchscript(m.ptr(), arr, n, o)
	})
	runtime.KeepAlive(hs)
	runtime.KeepAlive(exampleInputs)
	runtime.KeepAlive(m)
	return traced, err
}

// SaveTorchScript saves a TorchScript model as a .pt file that PyTorch's
// torch.jit.load reads.
func (m *Model) SaveTorchScript(file string) error {
	f := cString(file)
	defer freeCString(f)
	err := check(C.fulmen_model_save_torchscript(m.ptr(), nil, f))
	runtime.KeepAlive(m)
	return err
}

// ToDevice moves every parameter and buffer to device, in place.
func (m *Model) ToDevice(device Device) error {
	err := check(C.fulmen_model_to_device(m.ptr(), C.int32_t(device.Type), C.int64_t(device.Index)))
	runtime.KeepAlive(m)
	return err
}

// ToDType casts floating parameters and buffers to the floating dtype, in
// place (integer buffers keep theirs).
func (m *Model) ToDType(dtype DType) error {
	err := check(C.fulmen_model_to_dtype(m.ptr(), C.int32_t(dtype)))
	runtime.KeepAlive(m)
	return err
}

package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"sync/atomic"
	"unsafe"
)

// cHandle is the set of C handle types an owning wrapper holds.
type cHandle interface {
	*C.fulmen_tensor | *C.fulmen_model | *C.fulmen_optimizer | *C.fulmen_scheduler |
		*C.fulmen_dataset | *C.fulmen_loader | *C.fulmen_lightning_module |
		*C.fulmen_trainer | *C.fulmen_trainer_options | *C.fulmen_accelerator |
		*C.fulmen_strategy | *C.fulmen_precision | *C.fulmen_ddp | *C.fulmen_fsdp | *C.fulmen_tensor_parallel | *C.fulmen_metric |
		*C.fulmen_lr_find_result | *C.fulmen_scaler | *C.fulmen_model_pruning | *C.fulmen_logger |
		*C.fulmen_grad_scaler | *C.fulmen_datamodule | *C.fulmen_flop_counts
}

// cObject stands for the C object a handle points to (C memory, which the
// Go garbage collector ignores); the C types themselves are incomplete and
// cannot be type arguments of atomic.Pointer.
type cObject struct{}

// handle is the C handle an owning wrapper holds. It is read and cleared
// atomically, so that Close (or a consuming call) on one goroutine and a
// method call on another never race in Go, and the handle is taken for
// freeing exactly once. A call that loaded the handle before a Close is
// safe in C: the library pins a handle while a call uses it and defers its
// free until that call returns. A call that starts after the Close sees
// nil (ErrNullArgument, or the closed wrapper error).
type handle[P cHandle] struct {
	p atomic.Pointer[cObject]
}

// load returns the handle, nil once it was taken.
func (h *handle[P]) load() P { return P(unsafe.Pointer(h.p.Load())) }

// take clears the handle and returns what it held: the handle to the one
// caller that gets there first, nil to every later one.
func (h *handle[P]) take() P { return P(unsafe.Pointer(h.p.Swap(nil))) }

// store sets the handle of a new wrapper.
func (h *handle[P]) store(p P) { h.p.Store((*cObject)(unsafe.Pointer(p))) }

// closed reports whether the handle was taken (or never set).
func (h *handle[P]) closed() bool { return h.p.Load() == nil }

package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// ReduceOp is how CollectiveGroup.AllReduce combines the ranks' values
// (fulmen_reduce_op).
type ReduceOp int32

// The reductions.
const (
	ReduceSum     ReduceOp = C.FULMEN_REDUCE_OP_SUM
	ReduceProduct ReduceOp = C.FULMEN_REDUCE_OP_PRODUCT
	ReduceMin     ReduceOp = C.FULMEN_REDUCE_OP_MIN
	ReduceMax     ReduceOp = C.FULMEN_REDUCE_OP_MAX
)

// DistStore is the key-value store every rank of a job shares
// (fulmen_dist_store), lent to OpenCollectives: valid until the group it
// opened is closed. Ranks exchange a unique id through it.
type DistStore struct {
	h *C.fulmen_dist_store
}

// Set sets key to value.
func (s DistStore) Set(key string, value []byte) error {
	k := cString(key)
	defer freeCString(k)
	var p unsafe.Pointer
	if len(value) > 0 {
		p = C.CBytes(value)
		defer C.free(p)
	}
	return check(C.fulmen_dist_store_set(s.h, k, p, C.size_t(len(value))))
}

// Get waits for key (up to the job's timeout) and returns its value.
func (s DistStore) Get(key string) ([]byte, error) {
	k := cString(key)
	defer freeCString(k)
	capacity := 64
	for {
		buf := C.malloc(C.size_t(capacity))
		var n C.size_t
		err := check(C.fulmen_dist_store_get(s.h, k, buf, C.size_t(capacity), &n))
		if err == nil {
			out := make([]byte, int(n))
			if n > 0 {
				copy(out, unsafe.Slice((*byte)(buf), int(n)))
			}
			C.free(buf)
			return out, nil
		}
		C.free(buf)
		if e, ok := err.(*Error); !ok || e.Code != CodeOutOfRange || int(n) <= capacity {
			return nil, err
		}
		capacity = int(n)
	}
}

// Add adds delta to the counter key (0 when new) and returns its value.
func (s DistStore) Add(key string, delta int64) (int64, error) {
	k := cString(key)
	defer freeCString(k)
	var out C.int64_t
	err := check(C.fulmen_dist_store_add(s.h, k, C.int64_t(delta), &out))
	return int64(out), err
}

// Delete deletes key and reports whether it was set.
func (s DistStore) Delete(key string) (bool, error) {
	k := cString(key)
	defer freeCString(k)
	var deleted C.bool
	err := check(C.fulmen_dist_store_delete(s.h, k, &deleted))
	return bool(deleted), err
}

// CollectiveGroup is one rank's group of a custom accelerator's
// collectives library, opened by Collectives.OpenCollectives once per job
// and closed when the job ends. Its calls come one at a time, in the same
// order on every rank, from the thread running the collective (the
// trainer's, or libtorch's autograd thread for the device during backward,
// which is not a goroutine of the caller's). The tensors share storage with
// those reduced: write the results in place (CopyFromSlice, CopyInPlace).
// An error fails the collective and the run (CodeDistributed, with its
// message), and so does a runtime.Goexit in them (see "Callbacks and
// runtime.Goexit" in the package documentation), except in a Close that
// the library calls from inside one of the accelerator's own callbacks.
type CollectiveGroup interface {
	// AllReduce reduces tensors in place over the ranks with op.
	AllReduce(tensors []*Tensor, op ReduceOp) error
	// Broadcast copies rank root's tensors into every rank's.
	Broadcast(tensors []*Tensor, root int) error
	// AllGather writes rank r's input into outputs[r] for every rank.
	AllGather(input *Tensor, outputs []*Tensor) error
	// Barrier returns when every rank has called it.
	Barrier() error
	// Close closes the group when the job ends.
	Close()
}

// ReduceScatterer is what a CollectiveGroup implements when its library
// reduce-scatters. FSDP reduces its gradients with it; a group without it
// gets an AllReduce of the whole input instead (world size times the
// data). Every rank's group must make the same choice.
type ReduceScatterer interface {
	// ReduceScatter reduces input (world size x output's elements; rank
	// r's block the r-th run of them) over the ranks with op and writes
	// this rank's block to output.
	ReduceScatter(input, output *Tensor, op ReduceOp) error
}

// errNoReduceScatter is what a group without ReduceScatterer answers (not
// a failure: nothing records it as a cause).
var errNoReduceScatter = &Error{Code: CodeUnsupported, Message: "the CollectiveGroup has no ReduceScatter"}

// Collectives is the optional collectives hook of a CustomAccelerator:
// DDP on its PrivateUse1 (or CPU) devices through the vendor's own
// communication library instead of gloo (see fulmen_collectives).
type Collectives interface {
	// CollectivesName is the backend's name ("hccl": 1 to 64 characters of
	// [a-z0-9_-], not gloo, nccl, mpi, ucc or xccl), read at registration.
	CollectivesName() string
	// OpenCollectives opens this rank's group of worldSize ranks on device.
	// On an error the group is closed here (if any) and never used; the
	// join (and the run) fails with the error's code (CodeCallback for an
	// error that is not a *fulmen.Error) and message.
	OpenCollectives(store DistStore, rank, worldSize int, device Device) (CollectiveGroup, error)
}

func groupOf(g C.uintptr_t) CollectiveGroup {
	return cgo.Handle(g).Value().(CollectiveGroup)
}

func tensorsOf(list **C.fulmen_tensor, n C.size_t) []*Tensor {
	out := make([]*Tensor, int(n))
	if n > 0 {
		for i, h := range unsafe.Slice(list, int(n)) {
			out[i] = newTensor(h)
		}
	}
	return out
}

//export fulmenGoCollOpen
func fulmenGoCollOpen(ud C.uintptr_t, store *C.fulmen_dist_store, rank, world C.int32_t, typ C.int32_t,
	index C.int64_t, out *C.uintptr_t) *C.fulmen_error {
	return runCallback(func() error {
		c := acceleratorOf(ud).acc.(Collectives)
		g, err := c.OpenCollectives(DistStore{h: store}, int(rank), int(world), Device{Type: DeviceType(typ), Index: int64(index)})
		if err != nil {
			if g != nil {
				g.Close() // the library calls no Close for a group that failed to open
			}
			return err
		}
		if g == nil {
			return &Error{Code: CodeCallback, Message: "OpenCollectives returned no group"}
		}
		*out = C.uintptr_t(cgo.NewHandle(g))
		return nil
	})
}

//export fulmenGoCollClose
func fulmenGoCollClose(g C.uintptr_t) {
	h := cgo.Handle(g)
	defer h.Delete()
	// A panic or runtime.Goexit in Close is dropped: the slot has no error
	// to report.
	_ = runAttached(nil, nil, func() error {
		h.Value().(CollectiveGroup).Close()
		return nil
	})
}

//export fulmenGoCollAllReduce
func fulmenGoCollAllReduce(g C.uintptr_t, tensors **C.fulmen_tensor, n C.size_t, op C.int32_t) *C.fulmen_error {
	return runCallback(func() error { return groupOf(g).AllReduce(tensorsOf(tensors, n), ReduceOp(op)) })
}

//export fulmenGoCollBroadcast
func fulmenGoCollBroadcast(g C.uintptr_t, tensors **C.fulmen_tensor, n C.size_t, root C.int32_t) *C.fulmen_error {
	return runCallback(func() error { return groupOf(g).Broadcast(tensorsOf(tensors, n), int(root)) })
}

//export fulmenGoCollAllGather
func fulmenGoCollAllGather(g C.uintptr_t, input *C.fulmen_tensor, outputs **C.fulmen_tensor, n C.size_t) *C.fulmen_error {
	return runCallback(func() error { return groupOf(g).AllGather(newTensor(input), tensorsOf(outputs, n)) })
}

//export fulmenGoCollBarrier
func fulmenGoCollBarrier(g C.uintptr_t) *C.fulmen_error {
	return runCallback(func() error { return groupOf(g).Barrier() })
}

//export fulmenGoCollReduceScatter
func fulmenGoCollReduceScatter(g C.uintptr_t, input, output *C.fulmen_tensor, op C.int32_t) *C.fulmen_error {
	rs, ok := groupOf(g).(ReduceScatterer)
	if !ok {
		return cCallbackError(nil, errNoReduceScatter, false)
	}
	return runCallback(func() error { return rs.ReduceScatter(newTensor(input), newTensor(output), ReduceOp(op)) })
}

// DataPtr is the address of the first element of a contiguous tensor:
// device memory on a device (fulmen_tensor_data_ptr), for a collectives
// library; valid while the storage lives and the tensor is not resized.
func (t *Tensor) DataPtr() (unsafe.Pointer, error) {
	var out unsafe.Pointer
	err := check(C.fulmen_tensor_data_ptr(t.ptr(), &out))
	runtime.KeepAlive(t)
	return out, err
}

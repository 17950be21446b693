package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// Accelerator is an accelerator of the registry (Lightning's Accelerator):
// "cpu", "cuda", "mps", "xla" or a registered custom one. The registry
// keeps the accelerator; Close frees only this handle (a custom
// accelerator's Go value is released once it is unregistered and every
// handle to it is closed).
//
// Methods that may run the Go callbacks of a custom accelerator attach the
// callback's Go error or recovered panic as the cause (Unwrap) of the
// returned *Error, as Fit does. A custom accelerator's callbacks are
// serialised by the library: they must not call methods of the same
// accelerator (that would deadlock).
type Accelerator struct {
	h handle[*C.fulmen_accelerator]
}

// GetAccelerator looks an accelerator up by name: a registered name
// ("cpu", "cuda", "mps", "xla" or a custom one) or an alias ("gpu": mps if
// available, else cuda; "tpu": xla; "auto": xla > mps > cuda > cpu by
// availability). An unknown name is ErrInvalidArgument listing the
// registered ones; "gpu" without a GPU is ErrUnavailable.
func GetAccelerator(name string) (*Accelerator, error) {
	n := cString(name)
	defer freeCString(n)
	var out *C.fulmen_accelerator
	if err := withCallbacks(context.Background(), func() *C.fulmen_error {
		return C.fulmen_accelerator_get(n, &out)
	}); err != nil {
		return nil, err
	}
	a := &Accelerator{}
	a.h.store(out)
	runtime.SetFinalizer(a, (*Accelerator).Close)
	return a, nil
}

func (a *Accelerator) ptr() *C.fulmen_accelerator {
	if a == nil {
		gcStress()
		return nil
	}
	h := a.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the handle (the registry keeps the accelerator); idempotent.
// The error is always nil.
func (a *Accelerator) Close() error {
	if a == nil {
		return nil
	}
	h := a.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_accelerator_free(h)
	runtime.SetFinalizer(a, nil)
	return nil
}

// Name is the accelerator's registry name (an alias resolves to one).
func (a *Accelerator) Name() (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_accelerator_name(a.ptr(), b, c, n)
	})
	runtime.KeepAlive(a)
	return s, err
}

// IsAvailable reports whether the accelerator can be used on this machine.
func (a *Accelerator) IsAvailable() (bool, error) {
	var v C.bool
	err := withCallbacks(context.Background(), func() *C.fulmen_error {
		return C.fulmen_accelerator_is_available(a.ptr(), &v)
	})
	runtime.KeepAlive(a)
	return bool(v), err
}

// AutoDeviceCount is the number of devices devices="auto" uses (1 for the
// CPU).
func (a *Accelerator) AutoDeviceCount() (int, error) {
	var v C.size_t
	err := withCallbacks(context.Background(), func() *C.fulmen_error {
		return C.fulmen_accelerator_auto_device_count(a.ptr(), &v)
	})
	runtime.KeepAlive(a)
	return int(v), err
}

// ParseDevices parses devices as Lightning's device parser does for this
// accelerator ("auto", "N", "-1", "1,3", "[0]"; for the CPU a number of
// processes) and returns the chosen device ids (a count N gives 0..N-1).
// A malformed or refused value is ErrInvalidArgument, a device that does
// not exist ErrUnavailable, each naming what is available.
func (a *Accelerator) ParseDevices(devices string) ([]int64, error) {
	d := cString(devices)
	defer freeCString(d)
	ids := make([]int64, 8)
	for {
		var n C.size_t
		err := withCallbacks(context.Background(), func() *C.fulmen_error {
			return C.fulmen_accelerator_parse_devices(a.ptr(), d, (*C.int64_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &n)
		})
		runtime.KeepAlive(a)
		if err == nil {
			return ids[:n], nil
		}
		if !grows(err, int(n), len(ids)) {
			return nil, err
		}
		ids = make([]int64, n)
	}
}

// grows reports whether err is the OUT_OF_RANGE of a buffer of have
// elements that needs n.
func grows(err error, n, have int) bool {
	fe, ok := err.(*Error)
	return ok && fe.Code == CodeOutOfRange && n > have
}

// ParallelDevices are the libtorch devices devices selects (Lightning's
// get_parallel_devices after parse_devices).
func (a *Accelerator) ParallelDevices(devices string) ([]Device, error) {
	d := cString(devices)
	defer freeCString(d)
	buf := make([]C.fulmen_device, 8)
	for {
		var n C.size_t
		err := withCallbacks(context.Background(), func() *C.fulmen_error {
			return C.fulmen_accelerator_get_parallel_devices(a.ptr(), d, &buf[0], C.size_t(len(buf)), &n)
		})
		runtime.KeepAlive(a)
		if err == nil {
			out := make([]Device, int(n))
			for i := range out {
				out[i] = goDevice(buf[i])
			}
			return out, nil
		}
		if !grows(err, int(n), len(buf)) {
			return nil, err
		}
		buf = make([]C.fulmen_device, n)
	}
}

// SetupDevice prepares device for use (Lightning's setup_device; selects
// the CUDA device on CUDA).
func (a *Accelerator) SetupDevice(device Device) error {
	err := withCallbacks(context.Background(), func() *C.fulmen_error {
		return C.fulmen_accelerator_setup_device(a.ptr(), cDevice(device))
	})
	runtime.KeepAlive(a)
	return err
}

// Teardown releases what the accelerator holds (Lightning's teardown;
// empties the CUDA cache on CUDA).
func (a *Accelerator) Teardown() error {
	err := withCallbacks(context.Background(), func() *C.fulmen_error {
		return C.fulmen_accelerator_teardown(a.ptr())
	})
	runtime.KeepAlive(a)
	return err
}

// DeviceStats are device's statistics (Lightning's get_device_stats: on
// the CPU cpu_rss_bytes, cpu_percent, cpu_vm_percent, cpu_swap_percent; on
// CUDA the caching allocator's counters). Names are at most 63 bytes.
func (a *Accelerator) DeviceStats(device Device) (map[string]float64, error) {
	buf := make([]C.fulmen_device_stat, 16)
	for {
		var n C.size_t
		err := withCallbacks(context.Background(), func() *C.fulmen_error {
			return C.fulmen_accelerator_device_stats(a.ptr(), cDevice(device), &buf[0], C.size_t(len(buf)), &n)
		})
		runtime.KeepAlive(a)
		if err == nil {
			out := make(map[string]float64, int(n))
			for _, s := range buf[:n] {
				out[C.GoString(&s.name[0])] = float64(s.value)
			}
			return out, nil
		}
		if !grows(err, int(n), len(buf)) {
			return nil, err
		}
		buf = make([]C.fulmen_device_stat, n)
	}
}

// SetAccelerator sets the accelerator option from a handle (as Lightning
// accepts an Accelerator object); the same as Set("accelerator", its
// registry name).
func (o *TrainerOptions) SetAccelerator(a *Accelerator) error {
	err := check(C.fulmen_trainer_options_set_accelerator(o.ptr(), a.ptr()))
	runtime.KeepAlive(o)
	runtime.KeepAlive(a)
	return err
}

func cDevice(d Device) C.fulmen_device {
	return C.fulmen_device{device_type: C.int32_t(d.Type), index: C.int64_t(d.Index)}
}

func goDevice(d C.fulmen_device) Device {
	return Device{Type: DeviceType(d.device_type), Index: int64(d.index)}
}

// AcceleratorInfo is one entry of the accelerator registry.
type AcceleratorInfo struct {
	// Name is the registry name.
	Name string
	// Description is a one-line description.
	Description string
	// Available says whether it can be used on this machine.
	Available bool
}

// Registry lists the registered accelerators in registration order (the
// built-ins cpu, cuda, mps, xla first), with whether each is available
// here. The aliases auto, gpu and tpu are not entries.
func Registry() ([]AcceleratorInfo, error) {
	var n C.size_t
	if err := check(C.fulmen_accelerator_registry_len(&n)); err != nil {
		return nil, err
	}
	out := make([]AcceleratorInfo, 0, int(n))
	for i := 0; i < int(n); i++ {
		info, err := registryEntry(i)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func registryEntry(i int) (AcceleratorInfo, error) {
	name, desc := make([]byte, 64), make([]byte, 256)
	for {
		var nn, dn C.size_t
		var avail C.bool
		err := withCallbacks(context.Background(), func() *C.fulmen_error {
			return C.fulmen_accelerator_registry_entry(C.size_t(i),
				(*C.char)(unsafe.Pointer(&name[0])), C.size_t(len(name)), &nn,
				(*C.char)(unsafe.Pointer(&desc[0])), C.size_t(len(desc)), &dn, &avail)
		})
		switch {
		case err == nil:
			return AcceleratorInfo{Name: string(name[:nn]), Description: string(desc[:dn]), Available: bool(avail)}, nil
		case grows(err, int(nn)+1, len(name)):
			name = make([]byte, int(nn)+1)
		case grows(err, int(dn)+1, len(desc)):
			desc = make([]byte, int(dn)+1)
		default:
			return AcceleratorInfo{}, err
		}
	}
}

// CustomAccelerator is an accelerator implemented in Go, registered with
// RegisterAccelerator (Lightning's custom Accelerator). Its methods are
// called by the library, serialised, while the goroutine of the call that
// uses the accelerator (Fit, Validate, ... or a method of an Accelerator
// handle) waits, each call on a goroutine of its own; a returned error or a panic fails that call (CodeCallback
// unless the error is a *Error, whose code is kept) and becomes its cause.
// Implement DeviceParser as well to parse the devices option yourself;
// otherwise Lightning's GPU-style parser over AutoDeviceCount devices is
// used. Implement Collectives for DDP through the vendor's own
// communication library.
// A runtime.Goexit in a method (t.FailNow, t.Fatal, t.SkipNow) fails that
// call like an error naming the method: see "Callbacks and
// runtime.Goexit" in the package documentation.
type CustomAccelerator interface {
	// IsAvailable reports whether the accelerator can run here. An error
	// fails Accelerator.IsAvailable; elsewhere (the registry, Fit) the
	// library reads it as "not available".
	IsAvailable() (bool, error)
	// AutoDeviceCount is how many devices it has. An error fails
	// Accelerator.AutoDeviceCount; elsewhere the library reads it as 0.
	AutoDeviceCount() (int, error)
	// ParallelDevices maps parsed device ids to libtorch devices, one per
	// id (Device{Type: CPU} for an accelerator computing with CPU tensors).
	ParallelDevices(ids []int64) ([]Device, error)
	// SetupDevice prepares a device before a run.
	SetupDevice(device Device) error
	// Teardown releases resources after a run.
	Teardown() error
	// DeviceStats reports statistics of device (names up to 63 bytes).
	DeviceStats(device Device) (map[string]float64, error)
}

// DTypeSupport is the optional dtype query of a CustomAccelerator: the
// trainer refuses a precision that needs a dtype its devices do not compute
// in (without it, every dtype).
type DTypeSupport interface {
	SupportsDType(dtype DType) (bool, error)
}

// LossScalingPolicy is the optional loss-scaling answer of a
// CustomAccelerator: whether float16 training needs a GradScaler there
// (without it, true).
type LossScalingPolicy interface {
	FP16NeedsLossScaling() (bool, error)
}

// DeviceSynchronizer is the optional synchronize of a CustomAccelerator:
// it blocks until the work queued on device is done (the trainer asks
// before timing code reads a clock). Without it, the device type's backend
// does (DeviceSynchronize).
type DeviceSynchronizer interface {
	Synchronize(device Device) error
}

// RNGStateKeeper is the optional generator state of a CustomAccelerator,
// which checkpoints keep so a resumed run draws the same numbers: the
// state of the vendor's generator for device (at most MaxRNGState bytes),
// and its restoration from a checkpoint (check it). Without it, libtorch's
// default generator for the device (DeviceRNGState).
type RNGStateKeeper interface {
	RNGState(device Device) ([]byte, error)
	SetRNGState(device Device, state []byte) error
}

// MaxRNGState is the most bytes of a device generator's state.
const MaxRNGState = C.FULMEN_MAX_RNG_STATE

// DeviceSynchronize blocks until the work queued on device is done
// (torch.cuda.synchronize and its kin).
func DeviceSynchronize(device Device) error {
	return check(C.fulmen_device_synchronize(C.int32_t(device.Type), C.int64_t(device.Index)))
}

// SetSyncDebugMode makes every operation that has the host wait for a
// device of type t warn (mode 1), fail (2) or neither (0), as
// torch.cuda.set_sync_debug_mode (CUDA only; process-wide; see
// fulmen_device_set_sync_debug_mode).
func SetSyncDebugMode(t DeviceType, mode int) error {
	if mode < 0 || mode > 2 {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("SetSyncDebugMode: mode %d is not 0, 1 or 2", mode)}
	}
	return check(C.fulmen_device_set_sync_debug_mode(C.int32_t(t), C.int32_t(mode)))
}

// DeviceRNGState is the state of libtorch's default random generator for
// device (the CPU's for the CPU).
func DeviceRNGState(device Device) ([]byte, error) {
	buf := make([]byte, MaxRNGState)
	var n C.size_t
	err := check(C.fulmen_device_rng_state(C.int32_t(device.Type), C.int64_t(device.Index),
		(*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n))
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// SetDeviceRNGState restores a state DeviceRNGState returned.
func SetDeviceRNGState(device Device, state []byte) error {
	var p *C.uint8_t
	if len(state) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&state[0]))
	}
	err := check(C.fulmen_device_set_rng_state(C.int32_t(device.Type), C.int64_t(device.Index), p, C.size_t(len(state))))
	runtime.KeepAlive(state)
	return err
}

// DeviceParser is the optional ParseDevices of a CustomAccelerator.
type DeviceParser interface {
	// ParseDevices turns the devices option into device ids, each in
	// 0..AutoDeviceCount()-1 and unique. The library passes the parsed
	// option in its own text form (see the README).
	ParseDevices(devices string) ([]int64, error)
}

// RegisterAccelerator registers acc under name (trimmed, lower-cased:
// letters, digits, '_', '-', '.') with description, so the trainer accepts
// accelerator=name and GetAccelerator finds it. A registered name
// (built-in or custom) is refused with ErrInvalidArgument unless override,
// which replaces it; "auto", "gpu" and "tpu" are reserved. The library
// holds acc until it is unregistered (or replaced) and no trainer run or
// Accelerator handle uses it any more.
func RegisterAccelerator(name, description string, acc CustomAccelerator, override bool) error {
	if acc == nil {
		return &Error{Code: CodeNullArgument, Message: "RegisterAccelerator: nil CustomAccelerator"}
	}
	n, d := cString(name), cString(description)
	defer freeCString(n)
	defer freeCString(d)
	parser, hasParse := acc.(DeviceParser)
	var collName *C.char
	if c, ok := acc.(Collectives); ok {
		collName = cString(c.CollectivesName())
		defer freeCString(collName)
	}
	_, hasSync := acc.(DeviceSynchronizer)
	_, hasRNG := acc.(RNGStateKeeper)
	h := cgo.NewHandle(&customAccelerator{acc: acc, parser: parser})
	err := check(C.fulmen_go_accelerator_register(n, d, C.uintptr_t(h), C.bool(hasParse), C.bool(override), collName,
		C.bool(hasSync), C.bool(hasRNG)))
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
	}
	return err
}

// UnregisterAccelerator removes a registered accelerator (custom or
// built-in) by name; ErrInvalidArgument when no such name is registered.
func UnregisterAccelerator(name string) error {
	n := cString(name)
	defer freeCString(n)
	return check(C.fulmen_accelerator_unregister(n))
}

// customAccelerator is the Go state behind a registered accelerator's
// cgo.Handle.
type customAccelerator struct {
	acc    CustomAccelerator
	parser DeviceParser
}

func acceleratorOf(ud C.uintptr_t) *customAccelerator {
	return cgo.Handle(ud).Value().(*customAccelerator)
}

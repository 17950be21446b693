package fulmen

// #include <fulmen.h>
import "C"

import "fmt"

// DeviceTypeName is libtorch's lower-case name of a device type ("xpu";
// PrivateUse1 under the name its backend registered, "npu" say).
func DeviceTypeName(t DeviceType) (string, error) {
	return readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_device_type_name(C.int32_t(t), b, c, n)
	})
}

// DeviceCount is how many devices of type t libtorch has in this process
// (a registered backend's count for the vendor types; 0 without one).
func DeviceCount(t DeviceType) (int, error) {
	var n C.size_t
	if err := check(C.fulmen_device_count(C.int32_t(t), &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// RegisterFakeDevice registers fulmen's fake device as the PrivateUse1
// backend name with count devices: its tensors live in host memory and it
// computes what the CPU computes. It is the device custom accelerators are
// tested on. Process-wide and permanent (see fulmen_fake_device_register):
// call it once, before the first backward pass in the process.
func RegisterFakeDevice(name string, count int) error {
	if count < 0 {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("RegisterFakeDevice: count %d is negative", count)}
	}
	cs := cString(name)
	defer freeCString(cs)
	return check(C.fulmen_fake_device_register(cs, C.size_t(count)))
}

// FakeDeviceHostReads returns how many times the host has waited for the
// fake device's data in this process: scalar reads and copies into host
// memory, except non-blocking copies into pinned memory (each would
// synchronize the host with a CUDA device). A count that does not grow
// from one training step to the next shows steps that never wait for
// their device (see fulmen_fake_device_host_reads).
func FakeDeviceHostReads() (uint64, error) {
	var n C.uint64_t
	if err := check(C.fulmen_fake_device_host_reads(&n)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

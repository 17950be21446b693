package fulmen

// The //export trampolines of CheckpointIO (see checkpoint_io.go). Only
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

//export fulmenGoCheckpointSave
func fulmenGoCheckpointSave(ud C.uintptr_t, bytes *C.uint8_t, n C.size_t, path *C.char) *C.fulmen_error {
	p := C.GoString(path)
	data := make([]byte, int(n))
	if n > 0 {
		copy(data, unsafe.Slice((*byte)(unsafe.Pointer(bytes)), int(n)))
	}
	return runCallback(func() error {
		return cgo.Handle(ud).Value().(*checkpointIOHost).io.SaveCheckpoint(data, p)
	})
}

// fulmenGoCheckpointLoad answers fulmen's two calls: with buffer nil it
// loads path and reports its size, keeping the bytes; then it copies them.
//
//export fulmenGoCheckpointLoad
func fulmenGoCheckpointLoad(ud C.uintptr_t, path *C.char, buffer *C.uint8_t, capacity C.size_t, outLen *C.size_t) *C.fulmen_error {
	p := C.GoString(path)
	return runCallback(func() error {
		h := cgo.Handle(ud).Value().(*checkpointIOHost)
		h.mu.Lock()
		defer h.mu.Unlock()
		if buffer == nil {
			data, err := h.io.LoadCheckpoint(p)
			if err != nil {
				return err
			}
			h.loadingPath, h.loading = p, data
			*outLen = C.size_t(len(data))
			return nil
		}
		if h.loadingPath != p || h.loading == nil {
			return fmt.Errorf("LoadCheckpoint(%q): no size was asked first", p)
		}
		data := h.loading
		h.loadingPath, h.loading = "", nil
		n := copy(unsafe.Slice((*byte)(unsafe.Pointer(buffer)), int(capacity)), data)
		*outLen = C.size_t(n)
		return nil
	})
}

//export fulmenGoCheckpointRemove
func fulmenGoCheckpointRemove(ud C.uintptr_t, path *C.char) *C.fulmen_error {
	p := C.GoString(path)
	return runCallback(func() error {
		return cgo.Handle(ud).Value().(*checkpointIOHost).io.RemoveCheckpoint(p)
	})
}

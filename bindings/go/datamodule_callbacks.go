package fulmen

// The //export trampolines of a DataModule and of the module's
// TestDataloader / PredictDataloader (see callbacks.go). Only declarations
// may appear in this file's preamble, as cgo requires for a file with
// //export.

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// handLoaders writes the loaders a dataloader function (what) returned to
// the library's slots; the library takes every loader written, also when
// a later one is refused.
func handLoaders(what string, loaders []*Loader, out **C.fulmen_loader, capacity C.size_t, n *C.size_t) error {
	if len(loaders) > int(capacity) {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("%s returned %d loaders; at most %d", what, len(loaders), capacity)}
	}
	slots := unsafe.Slice(out, int(capacity))
	for i, l := range loaders {
		p := l.release()
		if p == nil {
			return &Error{Code: CodeCallback, Message: fmt.Sprintf("%s returned a nil or closed loader at %d", what, i)}
		}
		slots[i] = p
	}
	*n = C.size_t(len(loaders))
	return nil
}

//export fulmenGoModuleEvalDataloader
func fulmenGoModuleEvalDataloader(ud C.uintptr_t, stage C.int, epoch C.int64_t, out **C.fulmen_loader, capacity C.size_t, n *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		funcs := &moduleOf(ud).funcs
		f, what := funcs.TestDataloader, "TestDataloader"
		if Stage(stage) == StagePredict {
			f, what = funcs.PredictDataloader, "PredictDataloader"
		}
		loaders, err := f(int64(epoch))
		if err != nil {
			return err
		}
		return handLoaders(what, loaders, out, capacity, n)
	})
}

func dataModuleOf(ud C.uintptr_t) *dataModuleState {
	return cgo.Handle(ud).Value().(*dataModuleState)
}

//export fulmenGoDataModulePrepare
func fulmenGoDataModulePrepare(ud C.uintptr_t) *C.fulmen_error {
	return runCallback(func() error { return dataModuleOf(ud).dm.PrepareData() })
}

//export fulmenGoDataModuleStage
func fulmenGoDataModuleStage(ud C.uintptr_t, teardown C.int, stage *C.char) *C.fulmen_error {
	return runCallback(func() error {
		dm := dataModuleOf(ud).dm
		if teardown != 0 {
			return dm.Teardown(C.GoString(stage))
		}
		return dm.Setup(C.GoString(stage))
	})
}

//export fulmenGoDataModuleTrain
func fulmenGoDataModuleTrain(ud C.uintptr_t, epoch C.int64_t, out **C.fulmen_loader) *C.fulmen_error {
	return runCallback(func() error {
		l, err := dataModuleOf(ud).dm.(DataModuleTrain).TrainDataloader(int64(epoch))
		if err != nil {
			return err
		}
		p := l.release()
		if p == nil {
			return &Error{Code: CodeCallback, Message: "TrainDataloader returned a nil or closed loader"}
		}
		*out = p
		return nil
	})
}

//export fulmenGoDataModuleEval
func fulmenGoDataModuleEval(ud C.uintptr_t, stage C.int, epoch C.int64_t, out **C.fulmen_loader, capacity C.size_t, n *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		dm := dataModuleOf(ud).dm
		var loaders []*Loader
		var err error
		what := "ValDataloader"
		switch Stage(stage) {
		case StageTest:
			what = "TestDataloader"
			loaders, err = dm.(DataModuleTest).TestDataloader(int64(epoch))
		case StagePredict:
			what = "PredictDataloader"
			loaders, err = dm.(DataModulePredict).PredictDataloader(int64(epoch))
		default:
			loaders, err = dm.(DataModuleVal).ValDataloader(int64(epoch))
		}
		if err != nil {
			return err
		}
		return handLoaders(what, loaders, out, capacity, n)
	})
}

//export fulmenGoDataModuleStateDict
func fulmenGoDataModuleStateDict(ud C.uintptr_t, data **C.uint8_t, n *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		st := dataModuleOf(ud)
		state, err := st.dm.(DataModuleState).StateDict()
		if err != nil {
			return err
		}
		st.freeState()
		*data, *n = nil, 0
		if len(state) == 0 {
			return nil
		}
		// C memory, which stays valid after the call returns (until the
		// next call or the end of the run), as the library reads it then.
		st.state = C.CBytes(state)
		*data, *n = (*C.uint8_t)(st.state), C.size_t(len(state))
		return nil
	})
}

//export fulmenGoDataModuleLoadStateDict
func fulmenGoDataModuleLoadStateDict(ud C.uintptr_t, data *C.uint8_t, n C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		state := C.GoBytes(unsafe.Pointer(data), C.int(n))
		return dataModuleOf(ud).dm.(DataModuleState).LoadStateDict(state)
	})
}

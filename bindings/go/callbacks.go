package fulmen

// The //export trampolines that fulmen calls back into (through the
// adapters of shim.c). Each one finds its Go state from the cgo.Handle in
// the userdata, opens the Go mirror of the C tensor scope, checks the
// context of the running call, runs the host code on a goroutine attached
// to the callback (runAttached), turns a panic or a runtime.Goexit into an
// error and records the Go cause for the error the outer call returns. Only
// declarations may appear in this file's preamble, as cgo requires for a
// file with //export.

/*
#include <fulmen.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// cCallbackError turns the Go error of a callback into a fulmen error for
// C, recording it as the cause of the running call's error. A *Error keeps
// its code; anything else is CodeCallback.
func cCallbackError(call *callState, err error, record bool) *C.fulmen_error {
	if call != nil && record && call.cause == nil {
		// The first failure is the cause: what follows it (on_exception
		// hooks, a logger's finalize) runs because of it.
		call.cause = err
	}
	code := CodeCallback
	var fe *Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	msg := cString(err.Error())
	defer freeCString(msg)
	return C.fulmen_error_new(C.int32_t(code), msg)
}

// runCallback runs the body of a callback inside a Go scope, with the
// context check, panic recovery and runtime.Goexit handling of
// runAttached.
func runCallback(body func() error) *C.fulmen_error {
	return runCallbackAfter(false, body)
}

// runCallbackAfter is runCallback; failing says the callback runs because
// the call is already failing (on_exception, a logger's "failed"
// finalize): it then runs even when the context is done, and its own error
// (which the library drops) is not recorded as the cause.
func runCallbackAfter(failing bool, body func() error) *C.fulmen_error {
	sc := enterScope()
	call := currentCall()
	err := runAttached(sc, call, func() error {
		if !failing && call != nil && call.ctx != nil {
			if err := call.ctx.Err(); err != nil {
				return err
			}
		}
		return body()
	})
	exitScope(sc)
	if err != nil {
		return cCallbackError(call, err, !failing)
	}
	return nil
}

// attachedRun is one callback body that runAttached runs on a goroutine of
// its own. Runs are pooled with their channel, which carries one signal
// per run.
type attachedRun struct {
	ctx      *C.fulmen_callback_context
	sc       *scope
	call     *callState
	body     func() error
	err      error
	returned bool
	done     chan struct{}
}

var attachedRuns = sync.Pool{New: func() any { return &attachedRun{done: make(chan struct{}, 1)} }}

// runAttached runs body, the Go side of the callback that the library is
// running on this thread, on a goroutine of its own locked to another OS
// thread attached to the callback (fulmen_callback_attach), and waits for
// it. Attached, that thread works inside the callback: the tensors it makes
// join the callback's scope (sc mirrors it for that thread too), its calls
// count as the callback's own (re-entrancy, HostCall) and it runs with the
// callback's grad mode and autocast. A panic in body is returned as a
// *PanicError. A runtime.Goexit (t.FailNow, t.Fatal, t.SkipNow) ends only
// that goroutine, so the callback fails with a CodeCallback error naming
// it, and the call that ran the callback returns that error. Where the
// library opened no scope for the callback (there is nothing to attach
// to), body runs on this goroutine under guard.
func runAttached(sc *scope, call *callState, body func() error) error {
	var ctx *C.fulmen_callback_context
	if e := C.fulmen_callback_context_current(&ctx); e != nil {
		C.fulmen_error_free(e)
		return guard(sc, body)
	}
	r := attachedRuns.Get().(*attachedRun)
	r.ctx, r.sc, r.call, r.body = ctx, sc, call, body
	go r.run()
	<-r.done
	err, returned := r.err, r.returned
	*r = attachedRun{done: r.done}
	attachedRuns.Put(r)
	C.fulmen_callback_context_free(ctx)
	if !returned {
		return goexitError(trampolineName())
	}
	return err
}

// run is the goroutine of an attachedRun: it attaches its thread to the
// callback, runs the body and signals the waiting callback. The signal is
// sent by a deferred function, which runtime.Goexit runs too, without
// returned set.
func (r *attachedRun) run() {
	runtime.LockOSThread()
	if err := check(C.fulmen_callback_attach(r.ctx)); err != nil {
		runtime.UnlockOSThread()
		r.err, r.returned = err, true
		r.done <- struct{}{}
		return
	}
	tid := threadID()
	lent := lendScope(tid, r.sc, r.call)
	defer func() {
		unlendScope(tid, lent)
		if err := check(C.fulmen_callback_detach()); err != nil && r.returned && r.err == nil {
			r.err = err
		}
		// Detached, the thread holds no state of the callback: it may run
		// other goroutines again.
		runtime.UnlockOSThread()
		r.done <- struct{}{}
	}()
	r.err = recovered(r.body)
	r.returned = true
}

// goexitError is the error of a callback whose Go body called
// runtime.Goexit instead of returning.
func goexitError(name string) error {
	return &Error{Code: CodeCallback, Message: "the Go callback " + name + " called runtime.Goexit (t.FailNow, " +
		"t.Fatal, t.SkipNow) instead of returning: the callback fails with this error; return an error from " +
		"the callback instead"}
}

// guard runs f, the Go side of one callback from C, on the calling
// goroutine: runAttached uses it where the library opened no scope for the
// callback (nothing to attach to). A panic is recovered and returned as a *PanicError. runtime.Goexit
// (t.FailNow, t.Fatal, t.SkipNow) cannot be stopped or recovered: here it
// unwinds through the C frames of the call that invoked the callback,
// which never return, so guard only limits the damage (abandonCallback).
// sc is the callback's Go scope, nil when the library opens none.
func guard(sc *scope, f func() error) error {
	returned := false
	defer func() {
		// Not returned, yet no panic escaped recovered: a Goexit, even
		// one during which a deferred function panicked and recovered
		// caught it (the Goexit goes on after that).
		if !returned {
			abandonCallback(sc)
		}
	}()
	err := recovered(f)
	returned = true
	return err
}

// recovered runs f, returning a panic as a *PanicError.
func recovered(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return f()
}

// abandonCallback runs while runtime.Goexit unwinds a callback that guard
// runs on its caller's goroutine through the C call that invoked it. That
// call never returns: it keeps the objects it pinned, and its thread keeps
// its C state mid-call (the open tensor scope, no_grad or autocast, the
// re-entrancy marks). So the tensors the callback made are freed here, as
// their scope would have freed them; the goroutine stays locked to its
// thread, so that Go ends the thread with the goroutine instead of running
// other goroutines on it (a thread the library started makes Go end the
// process); and one line on stderr says what happened, for the innermost
// callback only when callbacks are nested.
func abandonCallback(sc *scope) {
	runtime.LockOSThread() // never unlocked
	quiet := false
	if sc != nil {
		registryMu.Lock()
		quiet = sc.goexit
		registryMu.Unlock()
		freeScope(sc)
	}
	tid := threadID()
	registryMu.Lock()
	if outer := scopes[tid]; outer != nil {
		outer.goexit = true
	}
	registryMu.Unlock()
	if !quiet {
		fmt.Fprintf(os.Stderr, "fulmen: runtime.Goexit (t.FailNow, t.Fatal, t.SkipNow) ended the Go callback %s: "+
			"the fulmen call running it can never return and keeps its objects in use, and its thread is ended; "+
			"return an error from the callback instead\n", trampolineName())
	}
}

// trampolineName is the name of the innermost //export trampoline on the
// goroutine's stack without its prefix ("TrainingStep" for
// fulmenGoTrainingStep).
func trampolineName() string {
	pcs := make([]uintptr, 128)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	const prefix = ".fulmenGo"
	for {
		f, more := frames.Next()
		if i := strings.LastIndex(f.Function, prefix); i >= 0 {
			name := f.Function[i+len(prefix):]
			if j := strings.IndexByte(name, '.'); j >= 0 {
				name = name[:j]
			}
			return name
		}
		if !more {
			return "(unknown)"
		}
	}
}

// lend writes t's handle to *out for the library to read when the callback
// returns. A scope-owned tensor is written as is (the scope frees it); a
// Go-owned one is shared into a new scope-owned handle, so ownership of t
// never changes.
func lend(t *Tensor, out **C.fulmen_tensor) error {
	*out = nil
	if t.Closed() {
		return nil
	}
	if t.Scoped() {
		*out = t.h.load()
		return nil
	}
	s, err := t.Share()
	if err != nil {
		return err
	}
	*out = s.h.load()
	return nil
}

// moduleOf returns the Go module state behind a userdata handle.
func moduleOf(ud C.uintptr_t) *moduleState { return cgo.Handle(ud).Value().(*moduleState) }

//export fulmenGoTrainingStep
func fulmenGoTrainingStep(ud C.uintptr_t, ctx *C.fulmen_step_context, batch *C.fulmen_batch, out **C.fulmen_tensor) *C.fulmen_error {
	return runCallback(func() error {
		sc, b := &StepContext{h: ctx}, &Batch{h: batch}
		defer sc.end()
		defer b.end()
		loss, err := moduleOf(ud).funcs.TrainingStep(sc, b)
		if err != nil {
			return err
		}
		return lend(loss, out)
	})
}

//export fulmenGoTrainDataloader
func fulmenGoTrainDataloader(ud C.uintptr_t, epoch C.int64_t, out **C.fulmen_loader) *C.fulmen_error {
	return runCallback(func() error {
		l, err := moduleOf(ud).funcs.TrainDataloader(int64(epoch))
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

//export fulmenGoValDataloader
func fulmenGoValDataloader(ud C.uintptr_t, epoch C.int64_t, out **C.fulmen_loader, capacity C.size_t, n *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		loaders, err := moduleOf(ud).funcs.ValDataloader(int64(epoch))
		if err != nil {
			return err
		}
		if len(loaders) > int(capacity) {
			return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("ValDataloader returned %d loaders; at most %d", len(loaders), capacity)}
		}
		slots := unsafe.Slice(out, int(capacity))
		for i, l := range loaders {
			p := l.release()
			if p == nil {
				return &Error{Code: CodeCallback, Message: fmt.Sprintf("ValDataloader returned a nil or closed loader at %d", i)}
			}
			slots[i] = p
		}
		*n = C.size_t(len(loaders))
		return nil
	})
}

//export fulmenGoEvalStep
func fulmenGoEvalStep(ud C.uintptr_t, stage C.int, ctx *C.fulmen_step_context, batch *C.fulmen_batch) *C.fulmen_error {
	return runCallback(func() error {
		sc, b := &StepContext{h: ctx}, &Batch{h: batch}
		defer sc.end()
		defer b.end()
		m := moduleOf(ud)
		if Stage(stage) == StageTest {
			return m.funcs.TestStep(sc, b)
		}
		return m.funcs.ValidationStep(sc, b)
	})
}

//export fulmenGoEvalStepOutput
func fulmenGoEvalStepOutput(ud C.uintptr_t, stage C.int, ctx *C.fulmen_step_context, batch *C.fulmen_batch, out **C.fulmen_tensor) *C.fulmen_error {
	return runCallback(func() error {
		sc, b := &StepContext{h: ctx}, &Batch{h: batch}
		defer sc.end()
		defer b.end()
		m := moduleOf(ud)
		step := m.funcs.ValidationStepOutput
		if Stage(stage) == StageTest {
			step = m.funcs.TestStepOutput
		}
		y, err := step(sc, b)
		if err != nil {
			return err
		}
		return lend(y, out)
	})
}

//export fulmenGoConfigureModel
func fulmenGoConfigureModel(ud C.uintptr_t, deviceType C.int32_t, deviceIndex C.int64_t) *C.fulmen_error {
	return runCallback(func() error {
		return moduleOf(ud).funcs.ConfigureModel(Device{Type: DeviceType(deviceType), Index: int64(deviceIndex)})
	})
}

//export fulmenGoConfigureCallbacks
func fulmenGoConfigureCallbacks(ud C.uintptr_t, list *C.fulmen_callback_list) *C.fulmen_error {
	return runCallback(func() error {
		l := &CallbackList{h: list}
		defer func() { l.h = nil }()
		return moduleOf(ud).funcs.ConfigureCallbacks(l)
	})
}

//export fulmenGoPredictStep
func fulmenGoPredictStep(ud C.uintptr_t, ctx *C.fulmen_step_context, batch *C.fulmen_batch, out **C.fulmen_tensor) *C.fulmen_error {
	return runCallback(func() error {
		sc, b := &StepContext{h: ctx}, &Batch{h: batch}
		defer sc.end()
		defer b.end()
		pred, err := moduleOf(ud).funcs.PredictStep(sc, b)
		if err != nil {
			return err
		}
		return lend(pred, out)
	})
}

//export fulmenGoConfigureOptimizers
func fulmenGoConfigureOptimizers(ud C.uintptr_t, config *C.fulmen_optimizer_config) *C.fulmen_error {
	return runCallback(func() error {
		cfg := &OptimizerConfig{h: config}
		defer cfg.end()
		return moduleOf(ud).funcs.ConfigureOptimizers(cfg)
	})
}

//export fulmenGoSourceLen
func fulmenGoSourceLen(ud C.uintptr_t, lenOut *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		n, err := cgo.Handle(ud).Value().(*DataSource).Len()
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("DataSource.Len returned %d", n)
		}
		*lenOut = C.size_t(n)
		return nil
	})
}

//export fulmenGoSourceGetBatch
func fulmenGoSourceGetBatch(ud C.uintptr_t, indices *C.int64_t, n C.size_t, builder *C.fulmen_batch_builder) *C.fulmen_error {
	return runCallback(func() error {
		idx := make([]int64, int(n))
		if n > 0 {
			copy(idx, unsafe.Slice((*int64)(unsafe.Pointer(indices)), int(n)))
		}
		b := &BatchBuilder{h: builder}
		defer b.end()
		return cgo.Handle(ud).Value().(*DataSource).GetBatch(idx, b)
	})
}

//export fulmenGoIteratorReset
func fulmenGoIteratorReset(ud C.uintptr_t, epoch C.uint64_t) *C.fulmen_error {
	return runCallback(func() error {
		return cgo.Handle(ud).Value().(*Iterator).Reset(uint64(epoch))
	})
}

//export fulmenGoIteratorNext
func fulmenGoIteratorNext(ud C.uintptr_t, builder *C.fulmen_batch_builder, done *C.bool) *C.fulmen_error {
	return runCallback(func() error {
		b := &BatchBuilder{h: builder}
		defer b.end()
		finished, err := cgo.Handle(ud).Value().(*Iterator).Next(b)
		if err != nil {
			return err
		}
		*done = C.bool(finished)
		return nil
	})
}

// runHook runs a Go hook function with a HookContext valid for the call.
func runHook(hook C.int32_t, ctx *C.fulmen_hook_context, f func(Hook, *HookContext) error) *C.fulmen_error {
	h := Hook(hook)
	return runCallbackAfter(h == HookException, func() error {
		hc := &HookContext{h: ctx}
		defer hc.end()
		return f(h, hc)
	})
}

//export fulmenGoModuleHook
func fulmenGoModuleHook(ud C.uintptr_t, hook C.int32_t, ctx *C.fulmen_hook_context) *C.fulmen_error {
	return runHook(hook, ctx, moduleOf(ud).funcs.OnHook)
}

//export fulmenGoCallbackHook
func fulmenGoCallbackHook(ud C.uintptr_t, hook C.int32_t, ctx *C.fulmen_hook_context) *C.fulmen_error {
	return runHook(hook, ctx, cgo.Handle(ud).Value().(Callback).OnHook)
}

// goStrings copies n C strings.
func goStrings(p **C.char, n C.size_t) []string {
	if n == 0 {
		return nil
	}
	out := make([]string, int(n))
	for i, s := range unsafe.Slice(p, int(n)) {
		out[i] = C.GoString(s)
	}
	return out
}

//export fulmenGoLogMetrics
func fulmenGoLogMetrics(ud C.uintptr_t, names **C.char, values *C.double, n C.size_t, epoch, step C.int64_t) *C.fulmen_error {
	return runCallback(func() error {
		m := make(map[string]float64, int(n))
		if n > 0 {
			vs := unsafe.Slice((*float64)(unsafe.Pointer(values)), int(n))
			for i, k := range goStrings(names, n) {
				m[k] = vs[i]
			}
		}
		return cgo.Handle(ud).Value().(Logger).LogMetrics(m, int64(epoch), int64(step))
	})
}

//export fulmenGoLogHyperparams
func fulmenGoLogHyperparams(ud C.uintptr_t, keys, values **C.char, n C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		m := make(map[string]string, int(n))
		vs := goStrings(values, n)
		for i, k := range goStrings(keys, n) {
			m[k] = vs[i]
		}
		return cgo.Handle(ud).Value().(Logger).LogHyperparams(m)
	})
}

//export fulmenGoLoggerFinalize
func fulmenGoLoggerFinalize(ud C.uintptr_t, status *C.char) *C.fulmen_error {
	s := C.GoString(status)
	return runCallbackAfter(s != "success", func() error {
		return cgo.Handle(ud).Value().(Logger).Finalize(s)
	})
}

//export fulmenGoLoggerAfterSaveCheckpoint
func fulmenGoLoggerAfterSaveCheckpoint(ud C.uintptr_t, path *C.char) *C.fulmen_error {
	p := C.GoString(path)
	return runCallback(func() error {
		if cl, ok := cgo.Handle(ud).Value().(CheckpointLogger); ok {
			return cl.AfterSaveCheckpoint(p)
		}
		return nil
	})
}

//export fulmenGoAccIsAvailable
func fulmenGoAccIsAvailable(ud C.uintptr_t, out *C.bool) *C.fulmen_error {
	return runCallback(func() error {
		v, err := acceleratorOf(ud).acc.IsAvailable()
		if err != nil {
			return err
		}
		*out = C.bool(v)
		return nil
	})
}

//export fulmenGoAccAutoDeviceCount
func fulmenGoAccAutoDeviceCount(ud C.uintptr_t, out *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		n, err := acceleratorOf(ud).acc.AutoDeviceCount()
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("CustomAccelerator.AutoDeviceCount returned %d", n)
		}
		*out = C.size_t(n)
		return nil
	})
}

//export fulmenGoAccParseDevices
func fulmenGoAccParseDevices(ud C.uintptr_t, devices *C.char, ids *C.int64_t, capacity C.size_t, nOut *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		got, err := acceleratorOf(ud).parser.ParseDevices(C.GoString(devices))
		if err != nil {
			return err
		}
		*nOut = C.size_t(len(got))
		if len(got) > int(capacity) {
			return &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("ParseDevices returned %d ids, the buffer holds %d", len(got), capacity)}
		}
		if len(got) > 0 {
			copy(unsafe.Slice((*int64)(unsafe.Pointer(ids)), len(got)), got)
		}
		return nil
	})
}

//export fulmenGoAccParallelDevices
func fulmenGoAccParallelDevices(ud C.uintptr_t, ids *C.int64_t, n C.size_t, out *C.fulmen_device) *C.fulmen_error {
	return runCallback(func() error {
		in := make([]int64, int(n))
		if n > 0 {
			copy(in, unsafe.Slice((*int64)(unsafe.Pointer(ids)), int(n)))
		}
		devs, err := acceleratorOf(ud).acc.ParallelDevices(in)
		if err != nil {
			return err
		}
		if len(devs) != len(in) {
			return fmt.Errorf("CustomAccelerator.ParallelDevices returned %d devices for %d ids", len(devs), len(in))
		}
		if n > 0 {
			dst := unsafe.Slice(out, int(n))
			for i, d := range devs {
				dst[i] = cDevice(d)
			}
		}
		return nil
	})
}

//export fulmenGoAccSetupDevice
func fulmenGoAccSetupDevice(ud C.uintptr_t, typ C.int32_t, index C.int64_t) *C.fulmen_error {
	return runCallback(func() error {
		return acceleratorOf(ud).acc.SetupDevice(Device{Type: DeviceType(typ), Index: int64(index)})
	})
}

//export fulmenGoAccSupportsDType
func fulmenGoAccSupportsDType(ud C.uintptr_t, dtype C.int32_t, out *C.bool) *C.fulmen_error {
	return runCallback(func() error {
		v := true
		if c, ok := acceleratorOf(ud).acc.(DTypeSupport); ok {
			var err error
			if v, err = c.SupportsDType(DType(dtype)); err != nil {
				return err
			}
		}
		*out = C.bool(v)
		return nil
	})
}

//export fulmenGoAccFP16NeedsLossScaling
func fulmenGoAccFP16NeedsLossScaling(ud C.uintptr_t, out *C.bool) *C.fulmen_error {
	return runCallback(func() error {
		v := true
		if c, ok := acceleratorOf(ud).acc.(LossScalingPolicy); ok {
			var err error
			if v, err = c.FP16NeedsLossScaling(); err != nil {
				return err
			}
		}
		*out = C.bool(v)
		return nil
	})
}

//export fulmenGoAccSynchronize
func fulmenGoAccSynchronize(ud C.uintptr_t, typ C.int32_t, index C.int64_t) *C.fulmen_error {
	return runCallback(func() error {
		return acceleratorOf(ud).acc.(DeviceSynchronizer).Synchronize(Device{Type: DeviceType(typ), Index: int64(index)})
	})
}

//export fulmenGoAccRNGState
func fulmenGoAccRNGState(ud C.uintptr_t, typ C.int32_t, index C.int64_t, buf *C.uint8_t, capacity C.size_t, n *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		state, err := acceleratorOf(ud).acc.(RNGStateKeeper).RNGState(Device{Type: DeviceType(typ), Index: int64(index)})
		if err != nil {
			return err
		}
		if len(state) > int(capacity) {
			return &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("RNGState returned %d bytes, over %d", len(state), int(capacity))}
		}
		if len(state) > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(state)), state)
		}
		*n = C.size_t(len(state))
		return nil
	})
}

//export fulmenGoAccSetRNGState
func fulmenGoAccSetRNGState(ud C.uintptr_t, typ C.int32_t, index C.int64_t, data *C.uint8_t, n C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		state := C.GoBytes(unsafe.Pointer(data), C.int(n))
		return acceleratorOf(ud).acc.(RNGStateKeeper).SetRNGState(Device{Type: DeviceType(typ), Index: int64(index)}, state)
	})
}

//export fulmenGoAccTeardown
func fulmenGoAccTeardown(ud C.uintptr_t) *C.fulmen_error {
	return runCallback(func() error { return acceleratorOf(ud).acc.Teardown() })
}

//export fulmenGoAccDeviceStats
func fulmenGoAccDeviceStats(ud C.uintptr_t, typ C.int32_t, index C.int64_t, builder *C.fulmen_stats_builder) *C.fulmen_error {
	return runCallback(func() error {
		stats, err := acceleratorOf(ud).acc.DeviceStats(Device{Type: DeviceType(typ), Index: int64(index)})
		if err != nil {
			return err
		}
		names := make([]string, 0, len(stats))
		for k := range stats {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			ck := cString(k)
			err := check(C.fulmen_stats_builder_add(builder, ck, C.double(stats[k])))
			freeCString(ck)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

//export fulmenGoFreeHandle
func fulmenGoFreeHandle(ud C.uintptr_t) {
	cgo.Handle(ud).Delete()
}

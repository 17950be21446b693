package fulmen

/*
#include <pthread.h>
#include <fulmen.h>
#include <stdint.h>

static uintptr_t fulmen_go_thread_id(void) { return (uintptr_t)pthread_self(); }
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
)

// The C library keeps, per OS thread, a stack of tensor scopes: every
// tensor handle created on a thread while one of its callbacks runs, or on
// a thread attached to that callback (fulmen_callback_attach), is freed
// when that callback returns, unless kept with fulmen_tensor_keep. The
// callback's thread waits in the trampoline while the Go body runs on a
// goroutine locked to another thread, attached to the callback
// (runAttached), so the binding mirrors the C scopes per thread id: the
// callback's thread and the attached one both map to the callback's scope.
// A Tensor wrapped while its thread has an open scope is scope-owned, and
// when the callback returns its handle is cleared (the library frees it),
// so Close and the finalizer never free it a second time. A goroutine that
// is not the callback's cannot run on either thread while the callback
// runs (both are locked), so the thread id decides ownership exactly as C
// does.

// threadID is the id of the OS thread running the caller.
func threadID() uintptr { return uintptr(C.fulmen_go_thread_id()) }

// scope is the Go side of one C tensor scope.
type scope struct {
	tid     uintptr
	parent  *scope
	tensors map[*Tensor]struct{}
	// goexit: a callback nested in this one ended by runtime.Goexit, which
	// is ending this one too (see abandonCallback).
	goexit bool
}

// callState is the Go side of one C call that may run Go callbacks: the
// context they check and the Go error that failed one of them.
type callState struct {
	ctx    context.Context
	cause  error
	parent *callState
}

var (
	registryMu sync.Mutex
	scopes     = map[uintptr]*scope{}
	calls      = map[uintptr]*callState{}
	openScopes atomic.Int32
)

// enterScope opens the Go mirror of the C scope the current callback runs in.
func enterScope() *scope {
	tid := threadID()
	registryMu.Lock()
	s := &scope{tid: tid, parent: scopes[tid], tensors: map[*Tensor]struct{}{}}
	scopes[tid] = s
	registryMu.Unlock()
	openScopes.Add(1)
	return s
}

// exitScope closes s: its tensors are about to be freed by the library.
func exitScope(s *scope) { closeScope(s, false) }

// freeScope closes s and frees its tensors itself: for a callback whose C
// scope never ends (runtime.Goexit abandoned the call running it).
func freeScope(s *scope) { closeScope(s, true) }

// closeScope closes s; free frees the handles its tensors held (the Go
// wrappers no longer hold them either way).
func closeScope(s *scope, free bool) {
	registryMu.Lock()
	if s.parent == nil {
		delete(scopes, s.tid)
	} else {
		scopes[s.tid] = s.parent
	}
	tensors := s.tensors
	s.tensors = nil
	var handles []*C.fulmen_tensor
	for t := range tensors {
		if h := t.h.take(); h != nil && free {
			handles = append(handles, h)
		}
		t.scope = nil
	}
	registryMu.Unlock()
	openScopes.Add(-1)
	for t := range tensors {
		runtime.SetFinalizer(t, nil)
	}
	for _, h := range handles {
		C.fulmen_tensor_free(h)
	}
}

// adopt records t in the scope of the current thread, if one is open.
func adopt(t *Tensor) {
	if openScopes.Load() == 0 {
		return
	}
	tid := threadID()
	registryMu.Lock()
	if s := scopes[tid]; s != nil {
		s.tensors[t] = struct{}{}
		t.scope = s
	}
	registryMu.Unlock()
}

// release removes t from its scope (after fulmen_tensor_keep).
func release(t *Tensor) {
	registryMu.Lock()
	if t.scope != nil && t.scope.tensors != nil {
		delete(t.scope.tensors, t)
	}
	t.scope = nil
	registryMu.Unlock()
}

// lentScope is what a thread had before lendScope gave it a callback's
// scope and call.
type lentScope struct {
	scope *scope
	call  *callState
}

// lendScope makes sc and call (either may be nil) those of thread tid, a
// thread attached to the callback they belong to, until unlendScope.
func lendScope(tid uintptr, sc *scope, call *callState) lentScope {
	registryMu.Lock()
	defer registryMu.Unlock()
	before := lentScope{scope: scopes[tid], call: calls[tid]}
	if sc != nil {
		scopes[tid] = sc
	}
	if call != nil {
		calls[tid] = call
	}
	return before
}

// unlendScope gives thread tid back what it had before lendScope.
func unlendScope(tid uintptr, before lentScope) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if before.scope == nil {
		delete(scopes, tid)
	} else {
		scopes[tid] = before.scope
	}
	if before.call == nil {
		delete(calls, tid)
	} else {
		calls[tid] = before.call
	}
}

// currentCall returns the innermost call of this thread that runs callbacks.
func currentCall() *callState {
	tid := threadID()
	registryMu.Lock()
	defer registryMu.Unlock()
	return calls[tid]
}

// withCallbacks runs a C call that may invoke Go callbacks: the goroutine is
// locked to its thread, the callbacks see ctx, and a Go error that failed a
// callback becomes the cause (Unwrap) of the returned *Error.
func withCallbacks(ctx context.Context, f func() *C.fulmen_error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := threadID()
	st := &callState{ctx: ctx}
	registryMu.Lock()
	st.parent = calls[tid]
	calls[tid] = st
	registryMu.Unlock()
	var e *C.fulmen_error
	func() {
		defer func() {
			registryMu.Lock()
			if st.parent == nil {
				delete(calls, tid)
			} else {
				calls[tid] = st.parent
			}
			registryMu.Unlock()
		}()
		e = f()
	}()
	err := check(e)
	if fe, ok := err.(*Error); ok && st.cause != nil {
		fe.cause = st.cause
	}
	return err
}

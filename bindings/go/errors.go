package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
)

// Code is a stable fulmen error code (the C enum fulmen_code).
type Code int32

// The error codes of the C API.
const (
	// CodeNullArgument: a required pointer argument was NULL (in Go, usually
	// a nil or closed wrapper).
	CodeNullArgument Code = C.FULMEN_CODE_NULL_ARGUMENT
	// CodeInvalidArgument: an argument had a value outside what the call accepts.
	CodeInvalidArgument Code = C.FULMEN_CODE_INVALID_ARGUMENT
	// CodeInvalidHandle: a handle was freed, of the wrong type, or never created by fulmen.
	CodeInvalidHandle Code = C.FULMEN_CODE_INVALID_HANDLE
	// CodeShapeMismatch: tensor shapes do not fit together.
	CodeShapeMismatch Code = C.FULMEN_CODE_SHAPE_MISMATCH
	// CodeDTypeMismatch: a tensor has a dtype the call does not accept.
	CodeDTypeMismatch Code = C.FULMEN_CODE_DTYPE_MISMATCH
	// CodeTorch: libtorch reported an error.
	CodeTorch Code = C.FULMEN_CODE_TORCH
	// CodeIO: reading or writing a file failed.
	CodeIO Code = C.FULMEN_CODE_IO
	// CodeCallback: a host (Go) callback returned an error or panicked.
	CodeCallback Code = C.FULMEN_CODE_CALLBACK
	// CodePanic: a Rust panic was caught at the C boundary.
	CodePanic Code = C.FULMEN_CODE_PANIC
	// CodeUnsupported: the feature is not supported by this build or device.
	CodeUnsupported Code = C.FULMEN_CODE_UNSUPPORTED
	// CodeUnavailable: the requested device or backend is not available.
	CodeUnavailable Code = C.FULMEN_CODE_UNAVAILABLE
	// CodeNonFinite: a loss or metric was NaN or infinite.
	CodeNonFinite Code = C.FULMEN_CODE_NON_FINITE
	// CodeFormat: a file was truncated, corrupted, or does not match.
	CodeFormat Code = C.FULMEN_CODE_FORMAT
	// CodeOutOfRange: an index or count was out of range.
	CodeOutOfRange Code = C.FULMEN_CODE_OUT_OF_RANGE
	// CodeInvalidState: the call is not valid in the object's current state.
	CodeInvalidState Code = C.FULMEN_CODE_INVALID_STATE
	// CodeDistributed: another rank failed, timed out, or disagreed.
	CodeDistributed Code = C.FULMEN_CODE_DISTRIBUTED
	// CodeInterrupted: a SIGINT or SIGTERM stopped the run (trainer option
	// handle_signals).
	CodeInterrupted Code = C.FULMEN_CODE_INTERRUPTED
	// CodeOutOfMemory: an allocation failed (device or host memory).
	CodeOutOfMemory Code = C.FULMEN_CODE_OUT_OF_MEMORY
)

var codeNames = map[Code]string{
	CodeNullArgument:    "null argument",
	CodeInvalidArgument: "invalid argument",
	CodeInvalidHandle:   "invalid handle",
	CodeShapeMismatch:   "shape mismatch",
	CodeDTypeMismatch:   "dtype mismatch",
	CodeTorch:           "torch",
	CodeIO:              "io",
	CodeCallback:        "callback",
	CodePanic:           "panic",
	CodeUnsupported:     "unsupported",
	CodeUnavailable:     "unavailable",
	CodeNonFinite:       "non-finite",
	CodeFormat:          "format",
	CodeOutOfRange:      "out of range",
	CodeInvalidState:    "invalid state",
	CodeDistributed:     "distributed",
	CodeInterrupted:     "interrupted",
	CodeOutOfMemory:     "out of memory",
}

// String returns a short lower-case name of the code.
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code %d", int32(c))
}

// Error is an error reported by the fulmen library. Compare it with
// errors.Is against the sentinels (ErrShapeMismatch, ...), which match on
// the code. When the error was caused by a Go callback (a returned error, a
// panic, a cancelled context), Unwrap returns that cause, so errors.Is and
// errors.As see through to it (for example context.Canceled or
// *PanicError).
type Error struct {
	// Code is the stable error code.
	Code Code
	// Message is the library's message.
	Message string

	cause error
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Message == "" {
		return "fulmen: " + e.Code.String()
	}
	return fmt.Sprintf("fulmen: %s (%s)", e.Message, e.Code)
}

// Is reports whether target is a *Error with the same code and either no
// message (a sentinel) or the same message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t == nil {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Unwrap returns the Go error that caused this one inside a callback, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Sentinel errors, one per code, for errors.Is.
var (
	// ErrNullArgument matches errors with CodeNullArgument.
	ErrNullArgument = &Error{Code: CodeNullArgument}
	// ErrInvalidArgument matches errors with CodeInvalidArgument.
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	// ErrInvalidHandle matches errors with CodeInvalidHandle.
	ErrInvalidHandle = &Error{Code: CodeInvalidHandle}
	// ErrShapeMismatch matches errors with CodeShapeMismatch.
	ErrShapeMismatch = &Error{Code: CodeShapeMismatch}
	// ErrDTypeMismatch matches errors with CodeDTypeMismatch.
	ErrDTypeMismatch = &Error{Code: CodeDTypeMismatch}
	// ErrTorch matches errors with CodeTorch.
	ErrTorch = &Error{Code: CodeTorch}
	// ErrIO matches errors with CodeIO.
	ErrIO = &Error{Code: CodeIO}
	// ErrCallback matches errors with CodeCallback.
	ErrCallback = &Error{Code: CodeCallback}
	// ErrPanic matches errors with CodePanic (a panic inside the library).
	ErrPanic = &Error{Code: CodePanic}
	// ErrUnsupported matches errors with CodeUnsupported.
	ErrUnsupported = &Error{Code: CodeUnsupported}
	// ErrUnavailable matches errors with CodeUnavailable.
	ErrUnavailable = &Error{Code: CodeUnavailable}
	// ErrNonFinite matches errors with CodeNonFinite.
	ErrNonFinite = &Error{Code: CodeNonFinite}
	// ErrFormat matches errors with CodeFormat.
	ErrFormat = &Error{Code: CodeFormat}
	// ErrOutOfRange matches errors with CodeOutOfRange.
	ErrOutOfRange = &Error{Code: CodeOutOfRange}
	// ErrInvalidState matches errors with CodeInvalidState.
	ErrInvalidState = &Error{Code: CodeInvalidState}
	// ErrDistributed matches errors with CodeDistributed.
	ErrDistributed = &Error{Code: CodeDistributed}
	// ErrInterrupted matches errors with CodeInterrupted.
	ErrInterrupted = &Error{Code: CodeInterrupted}
	// ErrOutOfMemory matches errors with CodeOutOfMemory.
	ErrOutOfMemory = &Error{Code: CodeOutOfMemory}
)

// PanicError is the cause of the error returned by Fit (and the other
// calls that run callbacks) when a Go callback panicked: the panic is
// recovered, reported to fulmen as CodeCallback, and attached here. Get it
// with errors.As.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements the error interface.
func (p *PanicError) Error() string { return fmt.Sprintf("panic in callback: %v", p.Value) }

// Unwrap returns the panic value when it is an error.
func (p *PanicError) Unwrap() error {
	if err, ok := p.Value.(error); ok {
		return err
	}
	return nil
}

// check converts a returned fulmen_error (freeing it) into a Go error;
// nil for success. It is the common path after every C call.
func check(e *C.fulmen_error) error {
	gcStress()
	if e == nil {
		return nil
	}
	err := &Error{Code: Code(C.fulmen_error_code(e)), Message: C.GoString(C.fulmen_error_message(e))}
	C.fulmen_error_free(e)
	return err
}

// closedError is returned by Go-side checks on a closed or consumed wrapper.
func closedError(what string) error {
	return &Error{Code: CodeNullArgument, Message: what + " is closed (or was consumed, or its callback scope ended)"}
}

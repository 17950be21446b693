package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
)

// AutocastScope is an autocast region of the calling OS thread
// (torch.autocast). Lock the goroutine to its thread
// (runtime.LockOSThread) between AutocastEnter and Exit.
type AutocastScope struct {
	h *C.fulmen_autocast_scope
}

// AutocastEnter opens an autocast region: eligible ops on deviceType run in
// dtype (Half or BHalf) until Exit. Scopes exit innermost first.
func AutocastEnter(deviceType DeviceType, dtype DType) (*AutocastScope, error) {
	var out *C.fulmen_autocast_scope
	if err := check(C.fulmen_autocast_enter(C.int32_t(deviceType), C.int32_t(dtype), &out)); err != nil {
		return nil, err
	}
	return &AutocastScope{h: out}, nil
}

// Exit closes the region and restores the previous autocast state; on
// error (ErrInvalidState: an inner scope is open, or another thread) the
// scope stays open.
func (s *AutocastScope) Exit() error {
	if s == nil || s.h == nil {
		return nil
	}
	if err := check(C.fulmen_autocast_exit(s.h)); err != nil {
		return err
	}
	s.h = nil
	return nil
}

// GradScaler is a dynamic loss scaler (torch.amp.GradScaler). Close it
// when done.
type GradScaler struct {
	h handle[*C.fulmen_grad_scaler]
}

// NewGradScaler creates a scaler (torch's defaults: 65536, 2.0, 0.5, 2000).
func NewGradScaler(initScale, growthFactor, backoffFactor float64, growthInterval int64) (*GradScaler, error) {
	var out *C.fulmen_grad_scaler
	if err := check(C.fulmen_grad_scaler_new(C.double(initScale), C.double(growthFactor), C.double(backoffFactor),
		C.int64_t(growthInterval), &out)); err != nil {
		return nil, err
	}
	g := &GradScaler{}
	g.h.store(out)
	runtime.SetFinalizer(g, (*GradScaler).Close)
	return g, nil
}

func (g *GradScaler) ptr() *C.fulmen_grad_scaler {
	if g == nil {
		gcStress()
		return nil
	}
	h := g.h.load()
	gcStress()
	return h
}

// Close frees the scaler; idempotent. The error is always nil.
func (g *GradScaler) Close() error {
	if g == nil {
		return nil
	}
	h := g.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_grad_scaler_free(h)
	runtime.SetFinalizer(g, nil)
	return nil
}

// Scale returns loss * scale.
func (g *GradScaler) Scale(loss *Tensor) (*Tensor, error) {
	var out *C.fulmen_tensor
	err := check(C.fulmen_grad_scaler_scale(g.ptr(), loss.ptr(), &out))
	runtime.KeepAlive(g)
	runtime.KeepAlive(loss)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Unscale divides the optimizer's gradients by the scale; whether any was
// inf or NaN.
func (g *GradScaler) Unscale(opt *Optimizer) (bool, error) {
	var found C.bool
	err := check(C.fulmen_grad_scaler_unscale(g.ptr(), opt.ptr(), &found))
	runtime.KeepAlive(g)
	runtime.KeepAlive(opt)
	return bool(found), err
}

// UnscaleNoWait is Unscale without reading the finding back (torch's
// unscale_, which returns nothing): the host does not wait for the device.
func (g *GradScaler) UnscaleNoWait(opt *Optimizer) error {
	err := check(C.fulmen_grad_scaler_unscale(g.ptr(), opt.ptr(), nil))
	runtime.KeepAlive(g)
	runtime.KeepAlive(opt)
	return err
}

// StepNoWait is Step without asking whether it skipped (torch's
// scaler.step): with fused updates the host then never waits for the
// device; other optimizers read the finding once, as torch's do.
func (g *GradScaler) StepNoWait(opt *Optimizer) error {
	err := check(C.fulmen_grad_scaler_step(g.ptr(), opt.ptr(), nil))
	runtime.KeepAlive(g)
	runtime.KeepAlive(opt)
	return err
}

// Step steps opt unless a gradient was inf or NaN; whether it skipped.
func (g *GradScaler) Step(opt *Optimizer) (bool, error) {
	var skipped C.bool
	err := check(C.fulmen_grad_scaler_step(g.ptr(), opt.ptr(), &skipped))
	runtime.KeepAlive(g)
	runtime.KeepAlive(opt)
	return bool(skipped), err
}

// Update backs the scale off after an inf/NaN or grows it.
func (g *GradScaler) Update() error {
	err := check(C.fulmen_grad_scaler_update(g.ptr()))
	runtime.KeepAlive(g)
	return err
}

// Scale value now.
func (g *GradScaler) GetScale() (float64, error) {
	var s C.double
	err := check(C.fulmen_grad_scaler_get_scale(g.ptr(), &s))
	runtime.KeepAlive(g)
	return float64(s), err
}

// State is the scaler's state_dict as JSON.
func (g *GradScaler) State() (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_grad_scaler_state_save(g.ptr(), b, c, n)
	})
	runtime.KeepAlive(g)
	return s, err
}

// LoadState restores a state from State.
func (g *GradScaler) LoadState(state string) error {
	s := cString(state)
	defer freeCString(s)
	err := check(C.fulmen_grad_scaler_state_load(g.ptr(), s))
	runtime.KeepAlive(g)
	return err
}

package fulmen_test

import (
	"errors"
	"runtime"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestAutocastScopesExitInnermostFirst(t *testing.T) {
	noLeaks(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	outer := must(fulmen.AutocastEnter(fulmen.CPU, fulmen.BHalf))
	inner := must(fulmen.AutocastEnter(fulmen.CPU, fulmen.Half))
	if err := outer.Exit(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Errorf("outer exit with an inner scope open: %v", err)
	}
	if err := inner.Exit(); err != nil {
		t.Fatal(err)
	}
	if err := outer.Exit(); err != nil {
		t.Fatal(err)
	}
	if _, err := fulmen.AutocastEnter(fulmen.CPU, fulmen.Float32); !errors.Is(err, fulmen.ErrDTypeMismatch) {
		t.Errorf("float32 autocast: %v", err)
	}
}

func TestGradScalerStateRoundTrip(t *testing.T) {
	noLeaks(t)
	g := must(fulmen.NewGradScaler(8, 2, 0.5, 2))
	defer g.Close()
	if err := g.Update(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Errorf("update before any step: %v", err)
	}
	state := must(g.State())
	h := must(fulmen.NewGradScaler(65536, 2, 0.5, 2000))
	defer h.Close()
	if err := h.LoadState(state); err != nil {
		t.Fatal(err)
	}
	if s := must(h.GetScale()); s != 8 {
		t.Errorf("scale after load = %v, want 8", s)
	}
	if err := h.LoadState(`{"scale": 2}`); !errors.Is(err, fulmen.ErrFormat) {
		t.Errorf("partial state: %v", err)
	}
}

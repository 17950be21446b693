package fulmen_test

import (
	"errors"
	"math"
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

// The scaler steps on finite gradients and grows, skips after an infinite
// loss and backs off, also through the calls that read nothing back.
func TestGradScalerStepsAndSkips(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	o := fulmen.DefaultSGDOptions()
	o.LR = 0.1
	opt := must(fulmen.NewSGD(model, nil, o))
	defer opt.Close()
	g := must(fulmen.NewGradScaler(8, 2, 0.5, 1))
	defer g.Close()
	x := must(fulmen.FromSlice([]float32{0.5, -1, 2, 0.25}, 2, 2))
	y := must(fulmen.FromSlice([]int64{0, 1}))
	defer x.Close()
	defer y.Close()
	// Backward of the loss times factor, scaled; every tensor closed.
	backward := func(factor float64) {
		logits := must(model.Forward(x))
		defer logits.Close()
		loss := must(fulmen.CrossEntropy(logits, y, fulmen.ReductionMean))
		defer loss.Close()
		times := must(loss.MulScalar(factor))
		defer times.Close()
		scaled := must(g.Scale(times))
		defer scaled.Close()
		ok(t, scaled.Backward())
	}
	backward(1)
	if found := must(g.Unscale(opt)); found {
		t.Error("finite gradients found inf")
	}
	if skipped := must(g.Step(opt)); skipped {
		t.Error("a finite step was skipped")
	}
	ok(t, g.Update())
	if s := must(g.GetScale()); s != 16 {
		t.Errorf("scale after a good step = %v, want 16", s)
	}
	ok(t, opt.ZeroGrad())
	backward(math.Inf(1))
	ok(t, g.UnscaleNoWait(opt))
	ok(t, g.StepNoWait(opt))
	ok(t, g.Update())
	if s := must(g.GetScale()); s != 8 {
		t.Errorf("scale after a skipped step = %v, want 8", s)
	}
}

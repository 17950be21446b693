package fulmen_test

import (
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestLBFGSStepClosure(t *testing.T) {
	noLeaks(t)
	ok(t, fulmen.ManualSeed(3))
	xs, ys := blobs(64, 1)
	x := must(fulmen.FromSlice(xs, 64, 2))
	y := must(fulmen.FromSlice(ys))
	defer x.Close()
	defer y.Close()
	m := mlp(t)
	defer m.Close()
	opts := fulmen.DefaultLBFGSOptions()
	if opts.LR != 1 || opts.MaxIter != 20 || opts.HistorySize != 100 || opts.StrongWolfe {
		t.Fatalf("defaults %+v", opts)
	}
	opts.StrongWolfe = true
	opts.MaxIter = 5
	opt := must(fulmen.NewLBFGS(m, nil, opts))
	defer opt.Close()
	calls := 0
	closure := func() (float64, error) {
		calls++
		logits, err := m.Forward(x)
		if err != nil {
			return 0, err
		}
		defer logits.Close()
		loss, err := fulmen.CrossEntropy(logits, y, fulmen.ReductionMean)
		if err != nil {
			return 0, err
		}
		defer loss.Close()
		if err := loss.Backward(); err != nil {
			return 0, err
		}
		return loss.Item()
	}
	first := must(opt.StepClosure(closure))
	if calls < 2 || calls > 6 {
		t.Fatalf("%d evaluations in a step of max_iter 5", calls)
	}
	var last float64
	for i := 0; i < 3; i++ {
		last = must(opt.StepClosure(closure))
	}
	if !(last < first/2) {
		t.Fatalf("loss %v -> %v", first, last)
	}
	if err := opt.Step(); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("LBFGS without a closure: %v", err)
	}
	stop := errors.New("stop here")
	if _, err := opt.StepClosure(func() (float64, error) { return 0, stop }); !errors.Is(err, stop) {
		t.Fatalf("a closure's error: %v", err)
	}
	if _, err := opt.StepClosure(nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil closure: %v", err)
	}
	if v := must(opt.ParamGroup(0, "max_iter")); v != 5 {
		t.Fatalf("max_iter %v", v)
	}
	opts.HistorySize = 0
	if _, err := fulmen.NewLBFGS(m, nil, opts); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("history size 0: %v", err)
	}

	// Other optimizers evaluate once, then step.
	sgd := must(fulmen.NewSGD(m, nil, fulmen.DefaultSGDOptions()))
	defer sgd.Close()
	calls = 0
	must(sgd.StepClosure(closure))
	if calls != 1 {
		t.Fatalf("SGD evaluated %d times", calls)
	}
}

// Fused SGD (torch's fused=True) trains as the default update does, within
// float rounding; LBFGS has no fused update.
func TestFusedUpdates(t *testing.T) {
	noLeaks(t)
	xs, ys := blobs(64, 1)
	x := must(fulmen.FromSlice(xs, 64, 2))
	y := must(fulmen.FromSlice(ys))
	defer x.Close()
	defer y.Close()
	var finals [2]float64
	for k, fused := range []bool{false, true} {
		ok(t, fulmen.ManualSeed(3))
		m := mlp(t)
		o := fulmen.DefaultSGDOptions()
		o.LR = 0.1
		o.Momentum = 0.9
		opt := must(fulmen.NewSGD(m, nil, o))
		ok(t, opt.SetFused(fused))
		if got := must(opt.Fused()); got != fused {
			t.Fatalf("Fused() = %v after SetFused(%v)", got, fused)
		}
		for i := 0; i < 10; i++ {
			ok(t, opt.ZeroGrad())
			logits := must(m.Forward(x))
			loss := must(fulmen.CrossEntropy(logits, y, fulmen.ReductionMean))
			ok(t, loss.Backward())
			finals[k] = must(loss.Item())
			ok(t, opt.Step())
			logits.Close()
			loss.Close()
		}
		opt.Close()
		m.Close()
	}
	if d := finals[0] - finals[1]; d > 1e-5 || d < -1e-5 {
		t.Fatalf("losses %v", finals)
	}
	m := mlp(t)
	defer m.Close()
	lbfgs := must(fulmen.NewLBFGS(m, nil, fulmen.DefaultLBFGSOptions()))
	defer lbfgs.Close()
	if err := lbfgs.SetFused(true); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("fused LBFGS: %v", err)
	}
}

// Foreach Adam (torch's foreach=True) trains as the for-loop update does,
// bit for bit on the CPU; LBFGS has no foreach update.
func TestForeachUpdates(t *testing.T) {
	noLeaks(t)
	xs, ys := blobs(64, 1)
	x := must(fulmen.FromSlice(xs, 64, 2))
	y := must(fulmen.FromSlice(ys))
	defer x.Close()
	defer y.Close()
	var finals [2]float64
	for k, choice := range []fulmen.Foreach{fulmen.ForeachOff, fulmen.ForeachOn} {
		ok(t, fulmen.ManualSeed(3))
		m := mlp(t)
		o := fulmen.DefaultAdamOptions()
		o.LR = 0.01
		opt := must(fulmen.NewAdam(m, nil, o))
		if got := must(opt.Foreach()); got != fulmen.ForeachDefault {
			t.Fatalf("Foreach() = %v before SetForeach", got)
		}
		ok(t, opt.SetForeach(choice))
		if got := must(opt.Foreach()); got != choice {
			t.Fatalf("Foreach() = %v after SetForeach(%v)", got, choice)
		}
		for i := 0; i < 10; i++ {
			ok(t, opt.ZeroGrad())
			logits := must(m.Forward(x))
			loss := must(fulmen.CrossEntropy(logits, y, fulmen.ReductionMean))
			ok(t, loss.Backward())
			finals[k] = must(loss.Item())
			ok(t, opt.Step())
			logits.Close()
			loss.Close()
		}
		opt.Close()
		m.Close()
	}
	if finals[0] != finals[1] {
		t.Fatalf("losses %v", finals)
	}
	m := mlp(t)
	defer m.Close()
	lbfgs := must(fulmen.NewLBFGS(m, nil, fulmen.DefaultLBFGSOptions()))
	defer lbfgs.Close()
	if err := lbfgs.SetForeach(fulmen.ForeachOn); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("foreach LBFGS: %v", err)
	}
}

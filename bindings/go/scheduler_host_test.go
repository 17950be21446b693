package fulmen_test

import (
	"errors"
	"math"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestHostSchedulers(t *testing.T) {
	noLeaks(t)
	m := mlp(t)
	defer m.Close()
	o := fulmen.DefaultSGDOptions()
	o.LR = 1
	o.Momentum = 0.9
	opt := must(fulmen.NewSGD(m, nil, o))
	defer opt.Close()
	near := func(what string, want float64) {
		t.Helper()
		if got := must(opt.LR()); math.Abs(got-want) > 1e-12 {
			t.Fatalf("%s: lr %v, want %v", what, got, want)
		}
	}

	// CyclicLR(0.1, 1.0, up 2, down 3): torch's triangular cycle.
	c := fulmen.DefaultCyclicLROptions(0.1, 1.0)
	if c.StepSizeUp != 2000 || c.Mode != fulmen.CyclicTriangular || !c.CycleMomentum {
		t.Fatalf("defaults %+v", c)
	}
	c.StepSizeUp, c.StepSizeDown = 2, 3
	s := must(fulmen.NewCyclicLR(opt, c))
	near("cyclic start", 0.1)
	for _, want := range []float64{0.55, 1.0, 0.7, 0.4, 0.1} {
		ok(t, s.Step(opt, math.NaN()))
		near("cyclic", want)
	}
	ok(t, s.Close())
	c.Mode = 9
	if _, err := fulmen.NewCyclicLR(opt, c); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("bad mode: %v", err)
	}
	// Each group's own range (one group here): from 0.1 to 2 in 2 steps.
	c.Mode = fulmen.CyclicTriangular
	s = must(fulmen.NewCyclicLRRanges(opt, c, []float64{0.1}, []float64{2}))
	ok(t, s.Step(opt, math.NaN()))
	near("cyclic range", 1.05)
	ok(t, s.Close())
	if _, err := fulmen.NewCyclicLRRanges(opt, c, []float64{0.1, 0.2}, nil); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("two ranges for one group: %v", err)
	}

	// LambdaLR: the lr is the initial lr (0.1: CyclicLR's base lr, recorded as torch does) times the factor.
	var seen []int64
	boom := errors.New("no factor for step 3")
	s = must(fulmen.NewLambdaLR(opt, func(step int64, group int) (float64, error) {
		seen = append(seen, step)
		if step == 3 {
			return 0, boom
		}
		return 1 / float64(step+1), nil
	}))
	near("lambda start", 0.1)
	ok(t, s.Step(opt, 0))
	ok(t, s.Step(opt, 0))
	near("lambda", 0.1/3)
	if err := s.Step(opt, 0); !errors.Is(err, boom) {
		t.Fatalf("the factor's error is not the cause: %v", err)
	}
	near("lambda after a failed step", 0.1/3)
	ok(t, s.Close())
	if len(seen) != 4 {
		t.Fatalf("factor called for %v", seen)
	}

	// MultiplicativeLR halves every step; a panicking factor is an error.
	ok(t, opt.SetLR(1))
	s = must(fulmen.NewMultiplicativeLR(opt, func(step int64, group int) (float64, error) { return 0.5, nil }))
	ok(t, s.Step(opt, 0))
	ok(t, s.Step(opt, 0))
	near("multiplicative", 0.25)
	ok(t, s.Close())
	_, err := fulmen.NewLambdaLR(opt, func(int64, int) (float64, error) { panic("at once") })
	var pe *fulmen.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("a panic in the factor: %v", err)
	}
	if _, err := fulmen.NewLambdaLR(opt, nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil factor: %v", err)
	}
}

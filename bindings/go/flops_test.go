package fulmen_test

import (
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestMeasureFlops(t *testing.T) {
	noLeaks(t)
	m := mlp(t) // Linear(2, 16), Tanh, Linear(16, 2)
	defer m.Close()
	x := must(fulmen.Ones(fulmen.Float32, 5, 2))
	defer x.Close()
	const forward = 2*5*2*16 + 2*5*16*2
	// Backward: the first weight's gradient; the second weight's and its input's.
	const backward = forward + 3*2*5*2*16
	if n, err := m.MeasureFlops(x, false); err != nil || n != forward {
		t.Fatalf("forward: %d, %v; want %d", n, err, forward)
	}
	if n, err := m.MeasureFlops(x, true); err != nil || n != backward {
		t.Fatalf("backward: %d, %v; want %d", n, err, backward)
	}
	n, err := fulmen.MeasureFlops(func() error {
		y := must(m.Forward(x))
		defer y.Close()
		s := must(y.Sum())
		defer s.Close()
		return s.Backward()
	})
	if err != nil || n != backward {
		t.Fatalf("host: %d, %v; want %d", n, err, backward)
	}
	failed := errors.New("the host failed")
	if _, err := fulmen.MeasureFlops(func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("a failing function: %v", err)
	}
	_, err = fulmen.MeasureFlops(func() error {
		_, err := fulmen.MeasureFlops(func() error { return nil })
		return err
	})
	if !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("a nested measurement: %v", err)
	}
}

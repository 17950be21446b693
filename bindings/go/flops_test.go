package fulmen_test

import (
	"errors"
	"reflect"
	"strings"
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

func TestMeasureFlopsByModule(t *testing.T) {
	noLeaks(t)
	m := mlp(t) // Linear(2, 16), Tanh, Linear(16, 2)
	defer m.Close()
	x := must(fulmen.Ones(fulmen.Float32, 5, 2))
	defer x.Close()
	const first, second = 2 * 5 * 2 * 16, 2 * 5 * 16 * 2
	c := must(m.MeasureFlopsByModule(x, true))
	defer c.Close()
	modules := must(c.Modules())
	if want := []string{"Global", "Sequential", "Sequential.0", "Sequential.2"}; !reflect.DeepEqual(modules, want) {
		t.Fatalf("modules %v, want %v", modules, want)
	}
	if n, err := c.Total(""); err != nil || n != 2*first+3*second {
		t.Fatalf("total: %d, %v", n, err)
	}
	if n, err := c.Total("Sequential.1"); err != nil || n != 0 {
		t.Fatalf("Tanh: %d, %v", n, err)
	}
	ops := must(c.Operators("Sequential.2"))
	if want := []fulmen.OperatorFlops{{"aten::addmm", second}, {"aten::mm", 2 * second}}; !reflect.DeepEqual(ops, want) {
		t.Fatalf("operators %v, want %v", ops, want)
	}
	table := must(c.Table(-1))
	if !strings.HasPrefix(table, "Module") || !strings.Contains(table, " Sequential.2 ") {
		t.Fatalf("table:\n%s", table)
	}
	host := must(fulmen.MeasureFlopsByModule(func() error {
		y := must(m.Forward(x))
		defer y.Close()
		s := must(y.Sum())
		defer s.Close()
		return s.Backward()
	}))
	defer host.Close()
	if n, err := host.Total("Sequential.0"); err != nil || n != 2*first {
		t.Fatalf("host, first layer: %d, %v", n, err)
	}
	failed := errors.New("the host failed")
	if _, err := fulmen.MeasureFlopsByModule(func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("a failing function: %v", err)
	}
}

func TestFlopFormulas(t *testing.T) {
	noLeaks(t)
	m := mlp(t) // Linear(2, 16), Tanh, Linear(16, 2)
	defer m.Close()
	x := must(fulmen.Ones(fulmen.Float32, 5, 2))
	defer x.Close()
	var seen []fulmen.FlopArg
	ok(t, fulmen.RegisterFlopFormula("aten::tanh", func(op string, in, out []fulmen.FlopArg) (uint64, error) {
		if op != "aten::tanh" {
			return 0, errors.New("called for " + op)
		}
		seen = in
		return 4 * out[0].Numel(), nil
	}))
	c := must(m.MeasureFlopsByModule(x, false))
	defer c.Close()
	if n := must(c.Total("Sequential.1")); n != 4*5*16 {
		t.Fatalf("the formula counted %d for the Tanh, want %d", n, 4*5*16)
	}
	want := []fulmen.FlopArg{{Kind: fulmen.FlopTensor, DType: fulmen.Float32, Shape: []int64{5, 16}}}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("the formula saw %+v, want %+v", seen, want)
	}
	if err := fulmen.RegisterFlopFormula("aten::tanh", func(string, []fulmen.FlopArg, []fulmen.FlopArg) (uint64, error) {
		return 0, nil
	}); err == nil || !strings.Contains(err.Error(), "registered already") {
		t.Fatalf("a second formula for aten::tanh: %v", err)
	}
	if removed, err := fulmen.UnregisterFlopFormula("aten::tanh"); err != nil || !removed {
		t.Fatalf("unregister: %v, %v", removed, err)
	}
	ok(t, fulmen.RegisterFlopFormula("aten::tanh", func(string, []fulmen.FlopArg, []fulmen.FlopArg) (uint64, error) {
		return 0, &fulmen.Error{Code: fulmen.CodeOutOfRange, Message: "no formula for this shape"}
	}))
	_, err := m.MeasureFlops(x, false)
	var fe *fulmen.Error
	if !errors.As(err, &fe) || fe.Code != fulmen.CodeOutOfRange || !strings.Contains(fe.Message, "no formula for this shape") {
		t.Fatalf("a failing formula: %v", err)
	}
	if removed, err := fulmen.UnregisterFlopFormula("aten::tanh"); err != nil || !removed {
		t.Fatalf("unregister: %v, %v", removed, err)
	}
	if err := fulmen.RegisterFlopFormula("aten::linear", func(string, []fulmen.FlopArg, []fulmen.FlopArg) (uint64, error) {
		return 0, nil
	}); err == nil {
		t.Fatal("aten::linear decomposes: refused")
	}
	if n := must(m.MeasureFlops(x, false)); n != 2*5*2*16+2*5*16*2 {
		t.Fatalf("torch's counts again: %d", n)
	}
}

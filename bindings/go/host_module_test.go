package fulmen_test

import (
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// residual is forward(x) = proj(x) * scale + x, counting calls in "steps".
func residual(t *testing.T, calls *int) *fulmen.Model {
	t.Helper()
	m := must(fulmen.NewHostModule(1, func(call *fulmen.HostCall, in []*fulmen.Tensor) ([]*fulmen.Tensor, error) {
		*calls++
		steps, err := call.Get("steps")
		if err != nil {
			return nil, err
		}
		if err := steps.AddScalarInPlace(1); err != nil {
			return nil, err
		}
		p, err := call.ForwardChild("proj", in[0])
		if err != nil {
			return nil, err
		}
		scale, err := call.Get("scale")
		if err != nil {
			return nil, err
		}
		y, err := p[0].Mul(scale)
		if err != nil {
			return nil, err
		}
		out, err := y.Add(in[0])
		return []*fulmen.Tensor{out}, err
	}))
	ok(t, m.Add("proj", must(fulmen.NewLinear(4, 4, true))))
	scale := must(fulmen.Ones(fulmen.Float32, 4))
	defer scale.Close()
	steps := must(fulmen.Zeros(fulmen.Int64, 1))
	defer steps.Close()
	ok(t, m.RegisterParameter("", "scale", scale))
	ok(t, m.RegisterBuffer("", "steps", steps))
	return m
}

func TestHostModuleForwardAndState(t *testing.T) {
	noLeaks(t)
	calls := 0
	m := residual(t, &calls)
	defer m.Close()
	names := must(m.StateDictNames())
	if !reflect.DeepEqual(names, []string{"scale", "steps", "proj.weight", "proj.bias"}) {
		t.Fatalf("state_dict %v", names)
	}
	x := must(fulmen.Randn(fulmen.Float32, 3, 4))
	defer x.Close()
	y := must(m.Forward(x))
	defer y.Close()
	if sh := must(y.Shape()); !reflect.DeepEqual(sh, []int64{3, 4}) || calls != 1 {
		t.Fatalf("shape %v after %d calls", sh, calls)
	}
	steps := must(m.StateDictGet("steps"))
	defer steps.Close()
	if v := must(steps.Item()); v != 1 {
		t.Fatalf("steps %v", v)
	}
	seq := must(fulmen.NewSequential(residual(t, &calls), must(fulmen.NewLinear(4, 2, true))))
	defer seq.Close()
	z := must(seq.Forward(x))
	defer z.Close()
	if calls != 2 {
		t.Fatalf("%d calls", calls)
	}
	if err := m.RegisterParameter("", "scale", x); err == nil {
		t.Fatal("a taken name was registered")
	}
	wrong := must(fulmen.NewHostModule(1, func(*fulmen.HostCall, []*fulmen.Tensor) ([]*fulmen.Tensor, error) {
		return nil, nil
	}))
	defer wrong.Close()
	if _, err := wrong.Forward(x); err == nil {
		t.Fatal("a forward that returned nothing succeeded")
	}
}

package fulmen_test

import (
	"errors"
	"math"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// weightedSum is sum(v[i] * i) / n, as the PyTorch reference values were taken.
func weightedSum(t *testing.T, x *fulmen.Tensor) float64 {
	t.Helper()
	d := must(x.ToDType(fulmen.Float64))
	defer d.Close()
	v := must(fulmen.ToSlice[float64](d))
	s := 0.0
	for i, e := range v {
		s += e * float64(i)
	}
	return s / float64(len(v))
}

func TestInitSameValuesAsPyTorch(t *testing.T) {
	noLeaks(t)
	m := must(fulmen.NewLinear(6, 4, true))
	defer m.Close()
	w := must(m.StateDictGet("weight"))
	defer w.Close()
	ok(t, fulmen.ManualSeed(0))
	ok(t, fulmen.XavierUniform(w, 1.5))
	if got := weightedSum(t, w); math.Abs(got-0.3169561307877302) > 1e-6 {
		t.Fatalf("xavier_uniform_: %v", got)
	}
	k := must(fulmen.Zeros(fulmen.Float32, 5, 7))
	defer k.Close()
	ok(t, fulmen.ManualSeed(3))
	ok(t, fulmen.KaimingNormal(k, 0, fulmen.FanIn, "relu"))
	if got := weightedSum(t, k); math.Abs(got-0.614377451900925) > 1e-6 {
		t.Fatalf("kaiming_normal_: %v", got)
	}
	ok(t, fulmen.KaimingUniform(k, 0.1, fulmen.FanOut, "leaky_relu"))
	ok(t, fulmen.XavierNormal(k, 1))
	ok(t, fulmen.Orthogonal(k, 1))
	ok(t, fulmen.TruncNormal(k, 0, 0.02, -0.04, 0.04))
	if g := must(fulmen.CalculateGain("tanh", math.NaN())); math.Abs(g-5.0/3.0) > 1e-12 {
		t.Fatalf("gain %v", g)
	}
	if _, err := fulmen.CalculateGain("swish", 0); err == nil {
		t.Fatal("an unknown nonlinearity has a gain")
	}
}

func TestInPlaceEmaAndHostData(t *testing.T) {
	noLeaks(t)
	m := must(fulmen.NewLinear(3, 2, true))
	defer m.Close()
	w := must(m.StateDictGet("weight"))
	defer w.Close()
	ema := must(fulmen.Zeros(fulmen.Float32, 2, 3))
	defer ema.Close()
	ok(t, fulmen.CopyFromSlice(w, []float32{1, 2, 3, 4, 5, 6}))
	ok(t, fulmen.CopyFromSlice(ema, []int64{6, 5, 4, 3, 2, 1}))
	ok(t, ema.MulScalarInPlace(0.9))
	ok(t, ema.AddInPlace(w, 0.1))
	want := []float32{5.5, 4.7, 3.9, 3.1, 2.3, 1.5}
	for i, v := range must(fulmen.ToSlice[float32](ema)) {
		if math.Abs(float64(v-want[i])) > 1e-6 {
			t.Fatalf("ema[%d] = %v", i, v)
		}
	}
	mask := must(fulmen.FromSlice([]float32{1, 0, 1}))
	defer mask.Close()
	ok(t, w.CopyInPlace(ema))
	ok(t, w.MulInPlace(mask))
	ok(t, w.ClampInPlace(fulmen.OpenBound, 3.5))
	ok(t, w.AddScalarInPlace(1))
	got := must(fulmen.ToSlice[float32](w))
	if got[1] != 1 || math.Abs(float64(got[0]-4.5)) > 1e-6 {
		t.Fatalf("weight %v", got)
	}
	ok(t, w.FillInPlace(2))
	ok(t, w.ZeroInPlace())
	ok(t, fulmen.ManualSeed(7))
	u := must(fulmen.Zeros(fulmen.Float64, 10))
	defer u.Close()
	ok(t, u.UniformInPlace(-2, 3))
	if got := weightedSum(t, u); math.Abs(got-6.243837720587275) > 1e-9 {
		t.Fatalf("uniform_: %v", got)
	}
	ok(t, u.NormalInPlace(0, 1))
	if err := fulmen.CopyFromSlice(w, []float32{1}); err == nil {
		t.Fatal("a short host buffer was accepted")
	}
	if err := u.NormalInPlace(0, -1); err == nil {
		t.Fatal("a negative std was accepted")
	}
}

func TestBuildOnMeta(t *testing.T) {
	noLeaks(t)
	build := func() (*fulmen.Model, error) {
		a, err := fulmen.NewLinear(3, 4, true)
		if err != nil {
			return nil, err
		}
		b, err := fulmen.NewLinear(4, 2, true)
		if err != nil {
			return nil, err
		}
		m, err := fulmen.NewSequential(a, b)
		if err != nil {
			return nil, err
		}
		w, err := m.StateDictGet("1.weight")
		if err != nil {
			return nil, err
		}
		defer w.Close()
		return m, fulmen.Orthogonal(w, 0.5)
	}
	ok(t, fulmen.ManualSeed(3))
	eager := must(build())
	defer eager.Close()
	ok(t, fulmen.ManualSeed(3))
	var meta *fulmen.Model
	ok(t, fulmen.BuildOnMeta(func() (err error) {
		meta, err = build()
		return err
	}))
	defer meta.Close()
	if !must(meta.HoldsMeta()) {
		t.Fatal("the model built on meta holds data")
	}
	ok(t, meta.Materialize())
	if must(meta.HoldsMeta()) {
		t.Fatal("still on meta after Materialize")
	}
	for _, name := range []string{"0.weight", "0.bias", "1.weight", "1.bias"} {
		a := must(eager.StateDictGet(name))
		b := must(meta.StateDictGet(name))
		x, y := must(fulmen.ToSlice[float32](a)), must(fulmen.ToSlice[float32](b))
		a.Close()
		b.Close()
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("%s[%d]: %v vs %v", name, i, x[i], y[i])
			}
		}
	}
	// The build's error comes back, and the scope is closed either way.
	want := errors.New("the build failed")
	if got := fulmen.BuildOnMeta(func() error { return want }); got != want {
		t.Fatalf("BuildOnMeta returned %v", got)
	}
}

package fulmen_test

import (
	"errors"
	"math"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func roundTrip[T fulmen.Element](t *testing.T, data []T, want fulmen.DType, shape ...int64) {
	t.Helper()
	x := must(fulmen.FromSlice(data, shape...))
	defer x.Close()
	if dt := must(x.DType()); dt != want {
		t.Fatalf("dtype %v, want %v", dt, want)
	}
	if n := must(x.Numel()); n != len(data) {
		t.Fatalf("numel %d, want %d", n, len(data))
	}
	back := must(fulmen.ToSlice[T](x))
	if !reflect.DeepEqual(back, data) {
		t.Fatalf("round trip of %v: %v, want %v", want, back, data)
	}
}

func TestTensorEveryDType(t *testing.T) {
	noLeaks(t)
	roundTrip(t, []float32{1.5, -2, 3, 4}, fulmen.Float32, 2, 2)
	roundTrip(t, []float64{1.5, -2, 3}, fulmen.Float64)
	roundTrip(t, []int64{1, -2, 3 << 40}, fulmen.Int64)
	roundTrip(t, []int32{1, -2, 3}, fulmen.Int32)
	roundTrip(t, []int16{1, -2, 300}, fulmen.Int16)
	roundTrip(t, []int8{1, -2, 100}, fulmen.Int8)
	roundTrip(t, []uint8{1, 2, 255}, fulmen.Uint8)
	roundTrip(t, []bool{true, false, true}, fulmen.Bool)
	roundTrip(t, fulmen.Float16s([]float32{0.5, -1, 65504}), fulmen.Half)
	roundTrip(t, fulmen.BFloat16s([]float32{0.5, -1, 3e38}), fulmen.BHalf)

	if h := fulmen.NewFloat16(1.5); h.Float32() != 1.5 || uint16(h) != 0x3e00 {
		t.Fatalf("f16 1.5 = %#x -> %v", uint16(h), h.Float32())
	}
	if b := fulmen.NewBFloat16(-2); b.Float32() != -2 || uint16(b) != 0xc000 {
		t.Fatalf("bf16 -2 = %#x -> %v", uint16(b), b.Float32())
	}
	// f16 data converted by the library to f32.
	h := must(fulmen.FromSlice(fulmen.Float16s([]float32{0.25, 8})))
	defer h.Close()
	if got := must(fulmen.ToSlice[float32](h)); !reflect.DeepEqual(got, []float32{0.25, 8}) {
		t.Fatalf("f16 as f32: %v", got)
	}
	raw := make([]byte, 4)
	ok(t, h.CopyTo(fulmen.Half, raw))
}

func TestTensorConstructors(t *testing.T) {
	noLeaks(t)
	ok(t, fulmen.ManualSeed(1))
	z := must(fulmen.Zeros(fulmen.Float32, 2, 3))
	o := must(fulmen.Ones(fulmen.Int64, 3))
	f := must(fulmen.Full(7, fulmen.Float64, 2))
	rn := must(fulmen.Randn(fulmen.Float32, 100))
	ru := must(fulmen.Rand(fulmen.Float32, 100))
	ar := must(fulmen.Arange(0, 5, 1, fulmen.Int64))
	s := must(fulmen.Scalar(2.5, fulmen.Float32))
	for _, x := range []*fulmen.Tensor{z, o, f, rn, ru, ar, s} {
		defer x.Close()
	}
	if sh := must(z.Shape()); !reflect.DeepEqual(sh, []int64{2, 3}) {
		t.Fatalf("shape %v", sh)
	}
	if nd := must(s.Ndim()); nd != 0 {
		t.Fatalf("scalar ndim %d", nd)
	}
	if v := must(s.Item()); v != 2.5 {
		t.Fatalf("item %v", v)
	}
	if got := must(fulmen.ToSlice[int64](ar)); !reflect.DeepEqual(got, []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("arange %v", got)
	}
	for _, v := range must(fulmen.ToSlice[float32](ru)) {
		if v < 0 || v >= 1 {
			t.Fatalf("rand %v", v)
		}
	}
	if d := must(z.Device()); d.Type != fulmen.CPU {
		t.Fatalf("device %v", d)
	}
	// The header says the dtype must be floating; the library reports it as a torch error.
	if _, err := fulmen.Randn(fulmen.Int64, 3); err == nil {
		t.Fatalf("randn of int64: %v", err)
	}
}

func TestTensorErrorsAndClose(t *testing.T) {
	noLeaks(t)
	_, err := fulmen.FromSlice([]float32{1, 2, 3}, 2, 2)
	if !errors.Is(err, fulmen.ErrShapeMismatch) {
		t.Fatalf("want shape mismatch, got %v", err)
	}
	var fe *fulmen.Error
	if !errors.As(err, &fe) || fe.Code != fulmen.CodeShapeMismatch || fe.Message == "" {
		t.Fatalf("errors.As: %#v", fe)
	}
	if errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatal("shape mismatch matched ErrInvalidArgument")
	}
	a := must(fulmen.FromSlice([]float32{1, 2, 3}))
	b := must(fulmen.FromSlice([]float32{1, 2}))
	if _, err := a.Add(b); !errors.Is(err, fulmen.ErrShapeMismatch) && !errors.Is(err, fulmen.ErrTorch) {
		t.Fatalf("add of 3 and 2: %v", err)
	}
	ok(t, a.Close())
	ok(t, a.Close()) // double close is a no-op
	if !a.Closed() {
		t.Fatal("closed tensor not Closed")
	}
	if _, err := a.Exp(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("op on a closed tensor: %v", err)
	}
	var nilT *fulmen.Tensor
	ok(t, nilT.Close())
	b.Close()
	_, err = fulmen.Scalar(1, fulmen.DType(99))
	if !errors.Is(err, fulmen.ErrDTypeMismatch) {
		t.Fatalf("bad dtype: %v", err)
	}
	if fulmen.CodeNonFinite.String() != "non-finite" || fulmen.ErrIO.Error() == "" {
		t.Fatal("code names")
	}
}

// vals reads and closes x, panicking on an error.
func vals(x *fulmen.Tensor, err error) []float32 {
	if err != nil {
		panic(err)
	}
	defer x.Close()
	return must(fulmen.ToSlice[float32](x))
}

func near(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-4 {
			return false
		}
	}
	return true
}

func TestTensorOps(t *testing.T) {
	noLeaks(t)
	a := must(fulmen.FromSlice([]float32{1, 2, 3, 4}, 2, 2))
	b := must(fulmen.FromSlice([]float32{0.5, -1, 2, 1}, 2, 2))
	defer a.Close()
	defer b.Close()
	cases := []struct {
		name string
		got  func() (*fulmen.Tensor, error)
		want []float32
	}{
		{"add", func() (*fulmen.Tensor, error) { return a.Add(b) }, []float32{1.5, 1, 5, 5}},
		{"sub", func() (*fulmen.Tensor, error) { return a.Sub(b) }, []float32{0.5, 3, 1, 3}},
		{"mul", func() (*fulmen.Tensor, error) { return a.Mul(b) }, []float32{0.5, -2, 6, 4}},
		{"div", func() (*fulmen.Tensor, error) { return a.Div(b) }, []float32{2, -2, 1.5, 4}},
		{"pow", func() (*fulmen.Tensor, error) { return a.Pow(b) }, []float32{1, 0.5, 9, 4}},
		{"matmul", func() (*fulmen.Tensor, error) { return a.Matmul(b) }, []float32{4.5, 1, 9.5, 1}},
		{"add_scalar", func() (*fulmen.Tensor, error) { return a.AddScalar(1) }, []float32{2, 3, 4, 5}},
		{"mul_scalar", func() (*fulmen.Tensor, error) { return a.MulScalar(2) }, []float32{2, 4, 6, 8}},
		{"pow_scalar", func() (*fulmen.Tensor, error) { return a.PowScalar(2) }, []float32{1, 4, 9, 16}},
		{"clamp", func() (*fulmen.Tensor, error) { return a.Clamp(2, 3) }, []float32{2, 2, 3, 3}},
		{"neg", func() (*fulmen.Tensor, error) { return a.Neg() }, []float32{-1, -2, -3, -4}},
		{"exp", func() (*fulmen.Tensor, error) { return b.Exp() }, []float32{1.6487213, 0.36787945, 7.389056, 2.7182817}},
		{"log", func() (*fulmen.Tensor, error) { return a.Log() }, []float32{0, 0.6931472, 1.0986123, 1.3862944}},
		{"sqrt", func() (*fulmen.Tensor, error) { return a.Sqrt() }, []float32{1, 1.4142135, 1.7320508, 2}},
		{"abs", func() (*fulmen.Tensor, error) { return b.Abs() }, []float32{0.5, 1, 2, 1}},
		{"relu", func() (*fulmen.Tensor, error) { return b.Relu() }, []float32{0.5, 0, 2, 1}},
		{"leaky_relu", func() (*fulmen.Tensor, error) { return b.LeakyRelu(0.1) }, []float32{0.5, -0.1, 2, 1}},
		{"sigmoid", func() (*fulmen.Tensor, error) { return b.Sigmoid() }, []float32{0.62245935, 0.26894143, 0.8807971, 0.7310586}},
		{"tanh", func() (*fulmen.Tensor, error) { return b.Tanh() }, []float32{0.46211717, -0.7615942, 0.9640276, 0.7615942}},
		{"gelu", func() (*fulmen.Tensor, error) { return b.Gelu() }, []float32{0.34573123, -0.15865526, 1.9544997, 0.8413447}},
		{"silu", func() (*fulmen.Tensor, error) { return b.Silu() }, []float32{0.31122968, -0.26894143, 1.7615942, 0.7310586}},
		{"softmax", func() (*fulmen.Tensor, error) { return a.Softmax(1) }, []float32{0.26894143, 0.7310586, 0.26894143, 0.7310586}},
		{"log_softmax", func() (*fulmen.Tensor, error) { return a.LogSoftmax(-1) }, []float32{-1.3132616, -0.31326166, -1.3132616, -0.31326166}},
		{"sum", func() (*fulmen.Tensor, error) { return a.Sum() }, []float32{10}},
		{"mean", func() (*fulmen.Tensor, error) { return a.Mean() }, []float32{2.5}},
		{"sum_dims", func() (*fulmen.Tensor, error) { return a.SumDims([]int64{0}, false) }, []float32{4, 6}},
		{"mean_dims", func() (*fulmen.Tensor, error) { return a.MeanDims([]int64{1}, true) }, []float32{1.5, 3.5}},
		{"max", func() (*fulmen.Tensor, error) { return b.Max() }, []float32{2}},
		{"min", func() (*fulmen.Tensor, error) { return b.Min() }, []float32{-1}},
		{"argmax", func() (*fulmen.Tensor, error) { return b.Argmax(1, false) }, []float32{0, 0}},
		{"argmin", func() (*fulmen.Tensor, error) { return b.Argmin(0, false) }, []float32{0, 0}},
		{"reshape", func() (*fulmen.Tensor, error) { return a.Reshape(4) }, []float32{1, 2, 3, 4}},
		{"view", func() (*fulmen.Tensor, error) { return a.View(-1) }, []float32{1, 2, 3, 4}},
		{"flatten", func() (*fulmen.Tensor, error) { return a.Flatten(0, -1) }, []float32{1, 2, 3, 4}},
		{"permute", func() (*fulmen.Tensor, error) { return a.Permute(1, 0) }, []float32{1, 3, 2, 4}},
		{"transpose", func() (*fulmen.Tensor, error) { return a.Transpose(0, 1) }, []float32{1, 3, 2, 4}},
		{"narrow", func() (*fulmen.Tensor, error) { return a.Narrow(1, 1, 1) }, []float32{2, 4}},
		{"clone", func() (*fulmen.Tensor, error) { return a.Clone() }, []float32{1, 2, 3, 4}},
		{"detach", func() (*fulmen.Tensor, error) { return a.Detach() }, []float32{1, 2, 3, 4}},
		{"share", func() (*fulmen.Tensor, error) { return a.Share() }, []float32{1, 2, 3, 4}},
		{"to_dtype", func() (*fulmen.Tensor, error) { return a.ToDType(fulmen.Int32) }, []float32{1, 2, 3, 4}},
		{"to_device", func() (*fulmen.Tensor, error) { return a.ToDevice(fulmen.Device{Type: fulmen.CPU}) }, []float32{1, 2, 3, 4}},
		{"compare", func() (*fulmen.Tensor, error) { return a.Compare(fulmen.Gt, b) }, []float32{1, 1, 1, 1}},
		{"compare_scalar", func() (*fulmen.Tensor, error) { return a.CompareScalar(fulmen.Le, 2) }, []float32{1, 1, 0, 0}},
		{"cat", func() (*fulmen.Tensor, error) { return fulmen.Cat([]*fulmen.Tensor{a, b}, 0) }, []float32{1, 2, 3, 4, 0.5, -1, 2, 1}},
		{"stack", func() (*fulmen.Tensor, error) { return fulmen.Stack([]*fulmen.Tensor{a, a}, 0) }, []float32{1, 2, 3, 4, 1, 2, 3, 4}},
	}
	for _, c := range cases {
		x, err := c.got()
		if got := vals(x, err); !near(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	u := must(a.Unsqueeze(0))
	defer u.Close()
	if sh := must(u.Shape()); !reflect.DeepEqual(sh, []int64{1, 2, 2}) {
		t.Fatalf("unsqueeze %v", sh)
	}
	sq := must(u.Squeeze(0))
	defer sq.Close()
	if sh := must(sq.Shape()); !reflect.DeepEqual(sh, []int64{2, 2}) {
		t.Fatalf("squeeze %v", sh)
	}
	idx := must(fulmen.FromSlice([]int64{1, 0}))
	defer idx.Close()
	if got := vals(a.IndexSelect(0, idx)); !near(got, []float32{3, 4, 1, 2}) {
		t.Fatalf("index_select %v", got)
	}
	gi := must(fulmen.FromSlice([]int64{1, 0, 0, 0}, 2, 2))
	defer gi.Close()
	if got := vals(a.Gather(1, gi)); !near(got, []float32{2, 1, 3, 3}) {
		t.Fatalf("gather %v", got)
	}
	// A transposed tensor cannot always be viewed.
	tr := must(a.Transpose(0, 1))
	defer tr.Close()
	if _, err := tr.View(4); err == nil {
		t.Fatal("view of a transposed tensor succeeded")
	}
}

func TestLossesAndAutograd(t *testing.T) {
	noLeaks(t)
	logits := must(fulmen.FromSlice([]float32{2, 0, 0, 2}, 2, 2))
	target := must(fulmen.FromSlice([]int64{0, 1}))
	probs := must(fulmen.FromSlice([]float32{1, 0, 0, 1}, 2, 2))
	for _, x := range []*fulmen.Tensor{logits, target, probs} {
		defer x.Close()
	}
	ok(t, logits.SetRequiresGrad(true))
	if rg := must(logits.RequiresGrad()); !rg {
		t.Fatal("requires_grad not set")
	}
	if g := must(logits.Grad()); g != nil {
		t.Fatal("grad before backward")
	}
	ce := must(fulmen.CrossEntropy(logits, target, fulmen.ReductionMean))
	defer ce.Close()
	if v := must(ce.Item()); math.Abs(v-0.126928) > 1e-4 {
		t.Fatalf("cross entropy %v", v)
	}
	ok(t, ce.Backward())
	g := must(logits.Grad())
	if g == nil {
		t.Fatal("no grad after backward")
	}
	if got := vals(g, nil); !near(got, []float32{-0.0596, 0.0596, 0.0596, -0.0596}) {
		t.Fatalf("grad %v", got)
	}
	ls := must(logits.LogSoftmax(1))
	defer ls.Close()
	nll := must(fulmen.NLLLoss(ls, target, fulmen.ReductionSum))
	defer nll.Close()
	if v := must(nll.Item()); math.Abs(v-2*0.126928) > 1e-4 {
		t.Fatalf("nll %v", v)
	}
	if got := vals(fulmen.MSELoss(logits, probs, fulmen.ReductionNone)); !near(got, []float32{1, 0, 0, 1}) {
		t.Fatalf("mse %v", got)
	}
	if got := vals(fulmen.L1Loss(logits, probs, fulmen.ReductionMean)); !near(got, []float32{0.5}) {
		t.Fatalf("l1 %v", got)
	}
	if got := vals(fulmen.BCEWithLogits(logits, probs, fulmen.ReductionMean)); !near(got, []float32{0.4100}) {
		t.Fatalf("bce %v", got)
	}
	if _, err := fulmen.CrossEntropy(logits, (*fulmen.Tensor)(nil), fulmen.ReductionMean); err == nil {
		t.Fatal("cross entropy with a nil target succeeded")
	}
}

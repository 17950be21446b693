package fulmen_test

import (
	"errors"
	"math"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func x23(t *testing.T) *fulmen.Tensor {
	t.Helper()
	return must(fulmen.FromSlice([]float32{3, 1, 2, 5, 4, 0}, 2, 3))
}

func TestGeneratedOpsPairsAndLists(t *testing.T) {
	noLeaks(t)
	x := x23(t)
	defer x.Close()
	values, indices, err := x.TopK(2, -1, true, true)
	if err != nil {
		t.Fatal(err)
	}
	defer values.Close()
	defer indices.Close()
	if got := must(fulmen.ToSlice[float32](values)); !reflect.DeepEqual(got, []float32{3, 2, 5, 4}) {
		t.Fatalf("topk values %v", got)
	}
	if got := must(fulmen.ToSlice[int64](indices)); !reflect.DeepEqual(got, []int64{0, 2, 0, 1}) {
		t.Fatalf("topk indices %v", got)
	}
	_, _, err = x.TopK(9, -1, true, true)
	var fe *fulmen.Error
	if !errors.As(err, &fe) || fe.Code != fulmen.CodeOutOfRange {
		t.Fatalf("topk(9): %v, want CodeOutOfRange", err)
	}

	r := must(fulmen.Arange(0, 40, 1, fulmen.Float32))
	defer r.Close()
	pieces := must(r.Split(2, 0)) // 20 pieces: more than the first guess of 16
	if len(pieces) != 20 {
		t.Fatalf("split gave %d pieces", len(pieces))
	}
	if got := must(fulmen.ToSlice[float32](pieces[19])); !reflect.DeepEqual(got, []float32{38, 39}) {
		t.Fatalf("last piece %v", got)
	}
	for _, p := range pieces {
		p.Close()
	}
	if _, err := r.Split(0, 0); err == nil {
		t.Fatal("split size 0 succeeded")
	}
}

func TestGeneratedOpsFunctions(t *testing.T) {
	noLeaks(t)
	x := x23(t)
	defer x.Close()
	e := must(fulmen.Einsum("ij,kj->ik", []*fulmen.Tensor{x, x}))
	defer e.Close()
	if got := must(fulmen.ToSlice[float32](e)); !reflect.DeepEqual(got, []float32{14, 19, 19, 41}) {
		t.Fatalf("einsum %v", got)
	}
	ones := must(fulmen.Ones(fulmen.Float32, 3, 3))
	defer ones.Close()
	lower := must(ones.Tril(0))
	defer lower.Close()
	keep := must(lower.CompareScalar(fulmen.Gt, 0.5))
	defer keep.Close()
	q := must(fulmen.Randn(fulmen.Float32, 1, 3, 4))
	defer q.Close()
	causal := must(fulmen.ScaledDotProductAttention(q, q, q, nil, 0, true, 0))
	defer causal.Close()
	masked := must(fulmen.ScaledDotProductAttention(q, q, q, keep, 0, false, 0))
	defer masked.Close()
	a := must(fulmen.ToSlice[float32](causal))
	b := must(fulmen.ToSlice[float32](masked))
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6 {
			t.Fatalf("causal and tril mask differ at %d: %v vs %v", i, a[i], b[i])
		}
	}
	if _, err := fulmen.Einsum("ij;", []*fulmen.Tensor{x}); err == nil {
		t.Fatal("a bad equation succeeded")
	}
}

func TestGeneratedLosses(t *testing.T) {
	noLeaks(t)
	logits := must(fulmen.FromSlice([]float32{1, 2, 0.5, 0.1, -1, 2, 0.3, 0.3, 0.3, 2, 1, 0}, 4, 3))
	defer logits.Close()
	target := must(fulmen.FromSlice([]int64{1, 2, -100, 0}))
	defer target.Close()
	weight := must(fulmen.FromSlice([]float32{1, 2, 0.5}))
	defer weight.Close()
	// F.cross_entropy(logits, target, weight=weight, label_smoothing=0.1) in PyTorch 2.13
	loss := must(fulmen.CrossEntropyWithOptions(logits, target, weight, -100, 0.1, fulmen.ReductionMean))
	defer loss.Close()
	if v := must(loss.Item()); math.Abs(v-0.522605) > 1e-6 {
		t.Fatalf("cross entropy %v, want 0.522605", v)
	}
	if _, err := fulmen.CrossEntropyWithOptions(logits, target, weight, -100, 2, fulmen.ReductionMean); err == nil {
		t.Fatal("label_smoothing 2 succeeded")
	}
	none := must(fulmen.CrossEntropyWithOptions(logits, target, nil, -100, 0, fulmen.ReductionNone))
	defer none.Close()
	if n := must(none.Numel()); n != 4 {
		t.Fatalf("reduction none gave %d values", n)
	}
	closed := must(fulmen.FromSlice([]float32{1, 2, 0.5}))
	closed.Close()
	if _, err := fulmen.CrossEntropyWithOptions(logits, target, closed, -100, 0, fulmen.ReductionMean); err == nil {
		t.Fatal("a closed weight was read as no weight")
	}
}

package fulmen_test

import (
	"errors"
	"math"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestMetrics(t *testing.T) {
	noLeaks(t)
	probs := must(fulmen.FromSlice([]float32{0.9, 0.2, 0.6, 0.4}, 4))
	defer probs.Close()
	target := must(fulmen.FromSlice([]int64{1, 0, 0, 1}, 4))
	defer target.Close()

	// Binary F1 at threshold 0.3: tp 2, fp 1, fn 0.
	o := fulmen.DefaultMetricOptions(fulmen.MetricF1, 0)
	if o.Threshold != 0.5 || o.Average != fulmen.AverageMacro || !o.SyncOnCompute {
		t.Fatalf("defaults %+v", o)
	}
	o.Threshold = 0.3
	f1 := must(fulmen.NewMetric(o))
	defer f1.Close()
	ok(t, f1.Update(probs, target))
	if v := must(f1.Compute()); math.Abs(v-0.8) > 1e-12 {
		t.Fatalf("F1 %v", v)
	}
	ok(t, f1.Reset())
	if _, err := f1.Compute(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("compute after reset: %v", err)
	}

	auroc := must(fulmen.NewMetric(fulmen.DefaultMetricOptions(fulmen.MetricAUROC, 0)))
	defer auroc.Close()
	ok(t, auroc.Update(probs, target))
	if v := must(auroc.Compute()); v != 0.75 {
		t.Fatalf("AUROC %v", v)
	}

	// Multiclass: predicted [0, 2, 2, 1] for targets [0, 1, 2, 1].
	scores := must(fulmen.FromSlice([]float32{3, 1, 0, 0, 1, 2, 0, 0, 5, 0, 4, 1}, 4, 3))
	defer scores.Close()
	classes := must(fulmen.FromSlice([]int64{0, 1, 2, 1}, 4))
	defer classes.Close()
	mo := fulmen.DefaultMetricOptions(fulmen.MetricAccuracy, 3)
	mo.Average = fulmen.AverageWeighted
	acc := must(fulmen.NewMetric(mo))
	defer acc.Close()
	ok(t, acc.Update(scores, classes))
	if v := must(acc.Compute()); math.Abs(v-0.75) > 1e-12 {
		t.Fatalf("weighted accuracy %v", v)
	}
	if err := acc.Update(scores, target); err != nil {
		t.Fatalf("in-range targets refused: %v", err)
	}
	bad := must(fulmen.FromSlice([]int64{0, 1, 2, 3}, 4))
	defer bad.Close()
	if err := acc.Update(scores, bad); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("class 3 of 3: %v", err)
	}

	mae := must(fulmen.NewMetric(fulmen.DefaultMetricOptions(fulmen.MetricMAE, 0)))
	p := must(fulmen.FromSlice([]float32{1, 2, 3}, 3))
	y := must(fulmen.FromSlice([]float32{1, 1, 5}, 3))
	ok(t, mae.Update(p, y))
	if v := must(mae.Compute()); v != 1 {
		t.Fatalf("MAE %v", v)
	}
	ok(t, mae.Close())
	ok(t, mae.Close())
	ok(t, p.Close())
	ok(t, y.Close())
	if _, err := fulmen.NewMetric(fulmen.DefaultMetricOptions(fulmen.MetricF1, 1)); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("one class: %v", err)
	}
}

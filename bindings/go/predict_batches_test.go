package fulmen_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// PredictBatches gives each batch's prediction in a list; a step that adds
// a tensor makes its batch's prediction a Tuple; returnPredictions false
// gives nil.
func TestPredictBatches(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 10, 4)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		PredictStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			x := must(bt.Get(0))
			if err := ctx.AddPrediction(x); err != nil {
				return nil, err
			}
			return model.Forward(x)
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	bg := context.Background()
	out := must(tr.PredictBatches(bg, m, []*fulmen.Loader{l}, true))
	batches, isList := out.([]any)
	if !isList || len(batches) != 3 {
		t.Fatalf("predictions %#v", out)
	}
	for i, b := range batches {
		tuple, isTuple := b.(fulmen.Tuple)
		if !isTuple || len(tuple) != 2 {
			t.Fatalf("batch %d: %#v", i, b)
		}
		for _, item := range tuple {
			tensor := item.(*fulmen.Tensor)
			rows := must(tensor.Shape())[0]
			if want := []int64{4, 4, 2}[i]; rows != want {
				t.Fatalf("batch %d: %d rows, want %d", i, rows, want)
			}
			ok(t, tensor.Close())
		}
	}
	if none := must(tr.PredictBatches(bg, m, []*fulmen.Loader{l}, false)); none != nil {
		t.Fatalf("returnPredictions false gave %#v", none)
	}
	if _, err := tr.PredictBatches(bg, m, nil, true); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("no loader: %v", err)
	}
}

// A predict_step that names its predictions gives a Dict per batch; a
// tuple and a dict do not mix.
func TestPredictBatchesNamed(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 10, 4)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	var mixed error
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		PredictStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			x := must(bt.Get(0))
			y, err := model.Forward(x)
			if err != nil {
				return nil, err
			}
			defer y.Close()
			if err := ctx.AddNamedPrediction("logits", y); err != nil {
				return nil, err
			}
			if err := ctx.AddNamedPrediction("input", x); err != nil {
				return nil, err
			}
			mixed = ctx.AddPrediction(x)
			return nil, nil
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	out := must(tr.PredictBatches(context.Background(), m, []*fulmen.Loader{l}, true))
	batches, isList := out.([]any)
	if !isList || len(batches) != 3 {
		t.Fatalf("predictions %#v", out)
	}
	if !errors.Is(mixed, fulmen.ErrInvalidState) {
		t.Fatalf("a tuple entry after named ones: %v", mixed)
	}
	for i, b := range batches {
		d, isDict := b.(fulmen.Dict)
		if !isDict || len(d) != 2 || d[0].Key != "logits" || d[1].Key != "input" {
			t.Fatalf("batch %d: %#v", i, b)
		}
		for _, e := range d {
			tensor := e.Value.(*fulmen.Tensor)
			if rows, want := must(tensor.Shape())[0], []int64{4, 4, 2}[i]; rows != want {
				t.Fatalf("batch %d %v: %d rows, want %d", i, e.Key, rows, want)
			}
			ok(t, tensor.Close())
		}
	}
}

// SaveLastLink makes last.ckpt a symlink to the newest checkpoint;
// EnableVersionCounter false overwrites a name that exists; a
// TrainTimeInterval with EveryNTrainSteps is refused.
func TestModelCheckpointLinkAndVersions(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 32, 8, 8) // 4 training batches per epoch
	model := mlp(t)
	defer model.Close()
	m := trainModule(t, model, nil)
	defer m.Close()
	dir := filepath.Join(t.TempDir(), "ckpt")
	o := fulmen.DefaultModelCheckpointOptions()
	if !o.EnableVersionCounter || o.SaveLastLink || o.SaveOnException || o.TrainTimeInterval != 0 {
		t.Fatalf("defaults %+v", o)
	}
	o.Dirpath = dir
	o.SaveLast = true
	o.SaveLastLink = true
	tr := quietTrainer(t, 2, "logger", "false")
	defer tr.Close()
	ok(t, tr.AddModelCheckpoint(o))
	ok(t, tr.Fit(context.Background(), m, train, nil))
	if target := must(os.Readlink(filepath.Join(dir, "last.ckpt"))); target != "epoch=1-step=8.ckpt" {
		t.Fatalf("last.ckpt links to %q", target)
	}

	dir2 := filepath.Join(t.TempDir(), "fixed")
	fixed := fulmen.DefaultModelCheckpointOptions()
	fixed.Dirpath = dir2
	fixed.Filename = "fixed"
	fixed.EnableVersionCounter = false
	for i := 0; i < 2; i++ {
		again := quietTrainer(t, 1, "logger", "false")
		ok(t, again.AddModelCheckpoint(fixed))
		ok(t, again.Fit(context.Background(), m, train, nil))
		ok(t, again.Close())
	}
	if _, err := os.Stat(filepath.Join(dir2, "fixed-v1.ckpt")); !os.IsNotExist(err) {
		t.Fatalf("a versioned name with the counter off: %v", err)
	}

	timed := fulmen.DefaultModelCheckpointOptions()
	timed.TrainTimeInterval = 1
	timed.EveryNTrainSteps = 2
	if err := tr.AddModelCheckpoint(timed); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("two triggers: %v", err)
	}
}

// The FLOP-counting ThroughputMonitor checks its values; AvailableFlops
// reads Lightning's table.
func TestThroughputMonitorFlops(t *testing.T) {
	noLeaks(t)
	tr := quietTrainer(t, 1)
	defer tr.Close()
	peak := must(fulmen.AvailableFlops("NVIDIA H100 80GB HBM3", "bfloat16"))
	if peak != 9.894e14 {
		t.Fatalf("H100 bfloat16 peak %v", peak)
	}
	if cpu := must(fulmen.AvailableFlops("cpu", "float32")); cpu != 0 {
		t.Fatalf("CPU peak %v", cpu)
	}
	ok(t, tr.AddThroughputMonitorFlops(10, "", 1e9, peak))
	if err := tr.AddThroughputMonitorFlops(10, "", -1, 0); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("negative FLOPs: %v", err)
	}
}

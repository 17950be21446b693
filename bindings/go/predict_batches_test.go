package fulmen_test

import (
	"context"
	"errors"
	"fmt"
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
	m := namedPredictions(model, &mixed)
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

// OnPredictBatchEnd (HookContext.Prediction) and a value prediction
// writer get each batch's dict as PredictBatches returns it.
func TestNamedPredictionsReachTheHookAndTheValueWriter(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 10, 4)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	m := namedPredictions(model, nil)
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	rowsOf := func(v any, key string) int64 {
		d, isDict := v.(fulmen.Dict)
		if !isDict || len(d) != 2 {
			t.Fatalf("not the dict: %#v", v)
		}
		x, found := d.Get(key)
		if !found {
			t.Fatalf("no %q in %#v", key, d)
		}
		return must(x.(*fulmen.Tensor).Shape())[0]
	}
	var hookRows, writerRows []int64
	var startErr error
	epochBatches := 0
	ok(t, tr.AddCallback("Seeing", fulmen.CallbackFunc(func(hook fulmen.Hook, ctx *fulmen.HookContext) error {
		if hook == fulmen.HookPredictBatchStart {
			_, startErr = ctx.Prediction()
		}
		if hook != fulmen.HookPredictBatchEnd {
			return nil
		}
		p, err := ctx.Prediction()
		if err == nil {
			hookRows = append(hookRows, rowsOf(p, "logits"))
		}
		return err
	})))
	ok(t, tr.AddPredictionValueWriter("batch_and_epoch", fulmen.PredictionValueWriter{
		WriteOnBatchEnd: func(p fulmen.BatchPredictionValue) error {
			writerRows = append(writerRows, rowsOf(p.Prediction, "input"))
			if len(p.BatchIndices) != int(writerRows[len(writerRows)-1]) {
				t.Errorf("batch %d: %d indices", p.BatchIdx, len(p.BatchIndices))
			}
			return nil
		},
		WriteOnEpochEnd: func(e fulmen.EpochPredictionValues) error {
			epochBatches = len(e.Predictions)
			for _, v := range e.Predictions {
				rowsOf(v, "logits")
			}
			return nil
		},
	}))
	must(tr.PredictBatches(context.Background(), m, []*fulmen.Loader{l}, false))
	if !errors.Is(startErr, fulmen.ErrInvalidState) {
		t.Errorf("Prediction in on_predict_batch_start: %v", startErr)
	}
	want := []int64{4, 4, 2}
	if fmt.Sprint(hookRows) != fmt.Sprint(want) || fmt.Sprint(writerRows) != fmt.Sprint(want) || epochBatches != 3 {
		t.Fatalf("hook rows %v, writer rows %v, epoch batches %d", hookRows, writerRows, epochBatches)
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

// namedPredictions is a module over model whose prediction is the dict
// {"logits": model(x), "input": x}; with mixed, it also records what
// adding an unnamed prediction after them gives.
func namedPredictions(model *fulmen.Model, mixed *error) *fulmen.LightningModule {
	return must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
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
			if mixed != nil {
				*mixed = ctx.AddPrediction(x)
			}
			return nil, nil
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
}

// TestPredictBatchesNestedValues: a prediction set whole, nested
// ({"logits": model(x), "meta": (x, "tag")}), comes back in its shape.
func TestPredictBatchesNestedValues(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 10, 2)
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
			whole := fulmen.Dict{{Key: "logits", Value: y}, {Key: "meta", Value: fulmen.Tuple{x, "tag"}}}
			if err := ctx.SetPrediction(whole); err != nil {
				return nil, err
			}
			mixed = ctx.AddPrediction(x)
			return nil, nil
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	out := must(tr.PredictBatches(context.Background(), m, []*fulmen.Loader{l}, true))
	batches, isList := out.([]any)
	if !isList || len(batches) != 3 {
		t.Fatalf("predictions %#v", out)
	}
	last, ok1 := batches[2].(fulmen.Dict)
	meta, ok2 := last.Get("meta")
	tuple, ok3 := meta.(fulmen.Tuple)
	if !ok1 || !ok2 || !ok3 || len(tuple) != 2 || tuple[1] != "tag" {
		t.Fatalf("the last batch's prediction %#v", batches[2])
	}
	if shape := must(tuple[0].(*fulmen.Tensor).Shape()); len(shape) != 2 || shape[0] != 2 {
		t.Errorf("meta's input of shape %v, want [2 2]", shape)
	}
	if !errors.Is(mixed, fulmen.ErrInvalidState) {
		t.Errorf("adding a tensor after SetPrediction: %v", mixed)
	}
	closeTensorsIn(batches)
}

// closeTensorsIn closes every tensor in a value PredictBatches returned.
func closeTensorsIn(v any) {
	switch x := v.(type) {
	case *fulmen.Tensor:
		x.Close()
	case []any:
		for _, e := range x {
			closeTensorsIn(e)
		}
	case fulmen.Tuple:
		closeTensorsIn([]any(x))
	case fulmen.Dict:
		for _, e := range x {
			closeTensorsIn(e.Value)
		}
	}
}

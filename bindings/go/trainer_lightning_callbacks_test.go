package fulmen_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// zeros counts the entries of the model's state_dict entry name that are 0.
func zeros(t *testing.T, model *fulmen.Model, name string) int {
	t.Helper()
	w := must(model.StateDictGet(name))
	defer w.Close()
	n := 0
	for _, v := range must(fulmen.ToSlice[float32](w)) {
		if v == 0 {
			n++
		}
	}
	return n
}

// callbackModule trains model with cross-entropy and SGD(0.1), multiplying
// the loss by 100 at global step spikeStep; its prediction is the batch's
// input.
func callbackModule(t *testing.T, model *fulmen.Model, spikeStep int64) *fulmen.LightningModule {
	t.Helper()
	return must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			if err != nil {
				return nil, err
			}
			step, err := ctx.GlobalStep()
			if err != nil || step != spikeStep {
				return loss, err
			}
			return loss.MulScalar(100)
		},
		PredictStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			return bt.Get(0)
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
}

// Global L1 pruning of half the weights after each epoch: the weights
// pruned after epoch 0 stay 0 through epoch 1's steps.
func TestModelPruningKeepsPrunedWeightsAtZero(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	m := callbackModule(t, model, -1)
	defer m.Close()
	p := must(fulmen.NewModelPruning("l1_unstructured", 0.5))
	defer p.Close()
	ok(t, p.SetParameterNames("weight"))
	ok(t, p.SetUseLotteryTicketHypothesis(false))
	tr := quietTrainer(t, 2, "logger", "false")
	defer tr.Close()
	ok(t, tr.AddModelPruning(p))
	least := 64
	ok(t, tr.AddCallback("watch", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		if h != fulmen.HookTrainBatchEnd {
			return nil
		}
		if epoch, err := ctx.Epoch(); err != nil || epoch != 1 {
			return err
		}
		if n := zeros(t, model, "0.weight") + zeros(t, model, "2.weight"); n < least {
			least = n
		}
		return nil
	})))
	ok(t, tr.Fit(context.Background(), m, tl, nil))
	if least != 32 {
		t.Fatalf("%d weights at 0 during epoch 1, want the 32 pruned after epoch 0", least)
	}
	if n := zeros(t, model, "0.weight") + zeros(t, model, "2.weight"); n != 48 {
		t.Fatalf("%d weights pruned after 2 epochs, want 48", n)
	}

	if _, err := fulmen.NewModelPruning("ln_structured", 0.5); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("structured pruning: %v", err)
	}
	if err := p.SetParameterNames("gamma"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("parameter name gamma: %v", err)
	}
	if err := p.SetAmountCount(-1); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a negative count: %v", err)
	}
	ok(t, p.SetParametersToPrune("0.weight", "9.weight"))
	bad := quietTrainer(t, 1, "logger", "false")
	defer bad.Close()
	ok(t, bad.AddModelPruning(p))
	if err := bad.Fit(context.Background(), m, tl, nil); !errors.Is(err, fulmen.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "9.weight") {
		t.Fatalf("a parameter the model lacks: %v", err)
	}
}

// A loss 100 times larger at step 5 stops the fit naming batch 5, and
// batches 4 and 5 are listed to skip.
func TestSpikeDetectionStopsTheFit(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	m := callbackModule(t, model, 5)
	defer m.Close()
	dir := t.TempDir()
	opts := fulmen.DefaultSpikeDetectionOptions()
	opts.ExcludeBatchesPath = filepath.Join(dir, "skip.json")
	tr := quietTrainer(t, 2, "logger", "false")
	defer tr.Close()
	ok(t, tr.AddSpikeDetection(opts))
	err := tr.Fit(context.Background(), m, tl, nil)
	if !errors.Is(err, fulmen.ErrNonFinite) || !strings.Contains(err.Error(), "Training spike detected in batch 5") {
		t.Fatalf("the spike: %v", err)
	}
	if text := string(must(os.ReadFile(opts.ExcludeBatchesPath))); text != "[\n    4,\n    5\n]" {
		t.Fatalf("batches to skip: %q", text)
	}
	opts.Window = 0
	if err := tr.AddSpikeDetection(opts); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("window 0: %v", err)
	}
}

// A shuffled loader: each batch's prediction (its inputs, sample i being
// (i, -i)) comes with its samples' dataset indices, and the epoch's with
// the same.
func TestPredictionWriterGetsBatchesAndTheEpoch(t *testing.T) {
	noLeaks(t)
	x := make([]float32, 0, 80)
	y := make([]int64, 0, 40)
	for i := 0; i < 40; i++ {
		x = append(x, float32(i), float32(-i))
		y = append(y, int64(i%2))
	}
	xt := must(fulmen.FromSlice(x, 40, 2))
	yt := must(fulmen.FromSlice(y))
	ds := must(fulmen.NewTensorDataset(xt, yt))
	xt.Close()
	yt.Close()
	defer ds.Close()
	loader := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: 7}))
	defer loader.Close()
	model := mlp(t)
	defer model.Close()
	m := callbackModule(t, model, -1)
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	var batches []int64
	var seen, epochSeen []int64
	epochBatches := 0
	ok(t, tr.AddPredictionWriter("batch_and_epoch", fulmen.PredictionWriter{
		WriteOnBatchEnd: func(p fulmen.BatchPrediction) error {
			batches = append(batches, p.BatchIdx)
			rows, err := fulmen.ToSlice[float32](p.Prediction)
			if err != nil {
				return err
			}
			if len(rows) != 2*len(p.BatchIndices) || len(p.Batch) != 2 {
				t.Errorf("batch %d: %d values for %d indices", p.BatchIdx, len(rows), len(p.BatchIndices))
				return nil
			}
			for r, i := range p.BatchIndices {
				if rows[2*r] != float32(i) {
					t.Errorf("batch %d row %d is sample %v, index says %d", p.BatchIdx, r, rows[2*r], i)
				}
			}
			seen = append(seen, p.BatchIndices...)
			return nil
		},
		WriteOnEpochEnd: func(e fulmen.EpochPredictions) error {
			epochBatches = len(e.Predictions)
			for _, b := range e.BatchIndices {
				epochSeen = append(epochSeen, b...)
			}
			return nil
		},
	}))
	out := must(tr.Predict(context.Background(), m, loader))
	out.Close()
	if !reflect.DeepEqual(batches, []int64{0, 1, 2}) || epochBatches != 3 || !reflect.DeepEqual(seen, epochSeen) {
		t.Fatalf("batches %v, epoch batches %d, indices %v and %v", batches, epochBatches, seen, epochSeen)
	}
	sorted := append([]int64(nil), seen...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] < sorted[b] })
	for i, v := range sorted {
		if v != int64(i) {
			t.Fatalf("indices %v are not each sample once", seen)
		}
	}

	// The writer's error fails Predict; an interval without its function
	// is refused.
	failing := quietTrainer(t, 1, "logger", "false")
	defer failing.Close()
	disk := errors.New("disk full")
	ok(t, failing.AddPredictionWriter("", fulmen.PredictionWriter{
		WriteOnBatchEnd: func(fulmen.BatchPrediction) error { return disk },
	}))
	if _, err := failing.Predict(context.Background(), m, loader); !errors.Is(err, disk) {
		t.Fatalf("the writer's error: %v", err)
	}
	if err := failing.AddPredictionWriter("epoch", fulmen.PredictionWriter{
		WriteOnBatchEnd: func(fulmen.BatchPrediction) error { return nil },
	}); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("epoch without WriteOnEpochEnd: %v", err)
	}
}

package fulmen_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// Averaging from the last of three epochs averages one model: the weights
// that epoch started from, which two epochs without SWA end with.
func TestStochasticWeightAveragingEndsOnTheAverage(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	init := filepath.Join(t.TempDir(), "init.safetensors")
	ok(t, model.Save(init))
	weights := func() []float32 {
		w := must(model.StateDictGet("2.weight"))
		defer w.Close()
		return must(fulmen.ToSlice[float32](w))
	}
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	plain := quietTrainer(t, 2)
	defer plain.Close()
	ok(t, plain.Fit(context.Background(), m, tl, nil))
	want := weights()

	ok(t, model.Load(init, true))
	opts := fulmen.DefaultStochasticWeightAveragingOptions(0.05)
	if opts.SWALR != 0.05 || opts.SWAEpochStart != 0 || opts.SWAEpochStartFraction != 0.8 ||
		opts.AnnealingEpochs != 10 || opts.LinearAnneal || opts.AverageOnDevice {
		t.Fatalf("defaults %+v", opts)
	}
	opts.SWAEpochStart = 3
	swa := quietTrainer(t, 3)
	defer swa.Close()
	ok(t, swa.AddStochasticWeightAveraging(opts))
	if err := swa.AddStochasticWeightAveraging(opts); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a second StochasticWeightAveraging: %v", err)
	}
	ok(t, swa.Fit(context.Background(), m, tl, nil))
	if got := weights(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the model does not hold the average: %v, want %v", got[:3], want[:3])
	}

	// One SWA lr per param group: two for the optimizer's one.
	opts.SWALRs = []float64{0.05, 0.01}
	opts.SWAEpochStart = 1
	bad := quietTrainer(t, 1)
	defer bad.Close()
	ok(t, bad.AddStochasticWeightAveraging(opts))
	if err := bad.Fit(context.Background(), m, tl, nil); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("two SWA lrs for one param group: %v", err)
	}
}

// SWALR anneals linearly from the lr to the SWA lr over two steps, as
// torch's (0.1, 0.075, 0.05).
func TestSWALRAnnealsToTheSWALR(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	o := fulmen.DefaultSGDOptions()
	o.LR = 0.1
	opt := must(fulmen.NewSGD(model, nil, o))
	defer opt.Close()
	s := must(fulmen.NewSWALR(opt, []float64{0.05}, 2, true, -1))
	defer s.Close()
	for i, want := range []float64{0.1, 0.07500000000000001, 0.05} {
		if i > 0 {
			ok(t, s.Step(opt, 0))
		}
		if lr := must(opt.LR()); lr != want {
			t.Fatalf("step %d: lr %v, want %v", i, lr, want)
		}
	}
	if _, err := fulmen.NewSWALR(opt, nil, 2, true, -1); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("no SWA lr: %v", err)
	}
}

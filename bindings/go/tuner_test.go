package fulmen_test

import (
	"context"
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestLRFind(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 5)
	defer tr.Close()
	o := fulmen.DefaultLRFindOptions()
	if o.MinLR != 1e-8 || o.MaxLR != 1 || o.NumTraining != 100 || o.EarlyStopThreshold != 4 {
		t.Fatalf("defaults %+v", o)
	}
	o.MinLR = 1e-4
	o.NumTraining = 20
	o.EarlyStopThreshold = 0
	r := must(tr.LRFind(context.Background(), m, tl, nil, o))
	defer r.Close()
	if len(r.LRs) != 20 || len(r.Losses) != 20 || r.LRs[0] != 1e-4 || r.LRs[19] <= r.LRs[1] {
		t.Fatalf("points %v %v", r.LRs, r.Losses)
	}
	lr, found, err := r.Suggestion(10, 1)
	if err != nil || !found || lr < r.LRs[10] {
		t.Fatalf("suggestion %v %v %v", lr, found, err)
	}
	if _, found, err := r.Suggestion(15, 10); err != nil || found {
		t.Fatalf("too few points: %v %v", found, err)
	}
	if s := must(tr.GlobalStep()); s != 0 {
		t.Fatalf("the trainer stepped %d times", s)
	}
	o.MinLR = 2
	if _, err := tr.LRFind(context.Background(), m, tl, nil, o); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("min_lr above max_lr: %v", err)
	}
}

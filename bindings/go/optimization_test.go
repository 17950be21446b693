package fulmen_test

import (
	"context"
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// maxChange is the largest absolute difference between model's parameters
// and before (copies taken earlier).
func maxChange(t *testing.T, model *fulmen.Model, before []*fulmen.Tensor) float64 {
	t.Helper()
	now := must(model.Parameters(false))
	most := 0.0
	for i, p := range now {
		d := must(p.Sub(before[i]))
		a := must(d.Abs())
		m := must(a.Max())
		v := must(m.Item())
		if v > most {
			most = v
		}
		for _, x := range []*fulmen.Tensor{d, a, m, p} {
			x.Close()
		}
	}
	return most
}

// The optimization hooks run at Lightning's points; an OptimizerStep that
// only runs the closure leaves the weights; errors reach Fit.
func TestOptimizationHooks(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 9)
	defer ds.Close()
	loader := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16}))
	defer loader.Close()
	model := mlp(t)
	defer model.Close()

	var events []byte
	var batches []int64
	step := func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
		events = append(events, 'T')
		_, loss, err := lossOf(model, b)
		return loss, err
	}
	hooks := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep:        step,
		ConfigureOptimizers: sgd(model, 0.1),
		OptimizerStep: func(ctx *fulmen.OptimizationContext, epoch, batchIdx int64, idx int, closure *fulmen.OptimizerClosure) error {
			events = append(events, 'S')
			batches = append(batches, batchIdx)
			if g, err := ctx.GlobalStep(); err != nil || g != int64(len(batches)-1) {
				t.Errorf("global step %d, %v", g, err)
			}
			if batchIdx%2 == 1 {
				// Without asking whether the update was made.
				return ctx.StepNoWait(closure)
			}
			made, err := ctx.Step(closure)
			if err == nil && !made {
				t.Errorf("the update was not made")
			}
			return err
		},
		OptimizerZeroGrad: func(ctx *fulmen.OptimizationContext, epoch, batchIdx int64, idx int) error {
			events = append(events, 'Z')
			return ctx.ZeroGrad(true)
		},
		Backward: func(ctx *fulmen.OptimizationContext, loss *fulmen.Tensor) error {
			events = append(events, 'B')
			return loss.Backward()
		},
		ConfigureGradientClipping: func(ctx *fulmen.OptimizationContext, idx int, clipVal float64, a fulmen.ClipAlgorithm) error {
			events = append(events, 'C')
			if clipVal != 0 || a != fulmen.ClipNorm {
				t.Errorf("clip %v %v without gradient_clip_val", clipVal, a)
			}
			if err := ctx.ClipGradients(1, fulmen.ClipAlgorithm(9)); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("algorithm 9: %v", err)
			}
			return nil
		},
	}))
	defer hooks.Close()
	trainer := quietTrainer(t, 1, "logger", "false")
	defer trainer.Close()
	ok(t, trainer.Fit(context.Background(), hooks, loader, nil))
	if got := string(events); got != "STZBCSTZBCSTZBCSTZBC" {
		t.Errorf("events %q", got)
	}
	if len(batches) != 4 || batches[3] != 3 {
		t.Errorf("batches %v", batches)
	}

	// Only the closure: no update, every batch still counts.
	before := must(model.Parameters(false))
	for i, p := range before {
		before[i] = must(p.Clone())
		p.Close()
	}
	skip := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep:        step,
		ConfigureOptimizers: sgd(model, 0.1),
		OptimizerStep: func(ctx *fulmen.OptimizationContext, epoch, batchIdx int64, idx int, closure *fulmen.OptimizerClosure) error {
			loss, has, err := closure.Run()
			if err == nil && (!has || loss <= 0) {
				t.Errorf("closure loss %v, %v", loss, has)
			}
			return err
		},
	}))
	defer skip.Close()
	ok(t, trainer.SetMaxEpochs(2)) // one more epoch: the last fit's is done
	ok(t, trainer.Fit(context.Background(), skip, loader, nil))
	if g := must(trainer.GlobalStep()); g != 8 {
		t.Errorf("global step %d", g)
	}
	if d := maxChange(t, model, before); d != 0 {
		t.Errorf("a skipped step moved the weights by %v", d)
	}
	for _, b := range before {
		b.Close()
	}

	// An error of the hook ends the fit; so does a step that never runs the closure.
	boom := errors.New("boom")
	failing := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep:        step,
		ConfigureOptimizers: sgd(model, 0.1),
		OptimizerStep: func(ctx *fulmen.OptimizationContext, epoch, batchIdx int64, idx int, closure *fulmen.OptimizerClosure) error {
			if batchIdx == 1 {
				return boom
			}
			_, _, err := closure.Run()
			return err
		},
	}))
	defer failing.Close()
	ok(t, trainer.SetMaxEpochs(3))
	if err := trainer.Fit(context.Background(), failing, loader, nil); !errors.Is(err, boom) {
		t.Errorf("fit: %v", err)
	}
}

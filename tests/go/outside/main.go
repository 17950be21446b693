// A program outside the repository: learns y = 3x - 1 with a Go training step.
package main

import (
	"context"
	"fmt"
	"log"
	"math"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func main() {
	if err := fulmen.ManualSeed(1); err != nil {
		log.Fatal(err)
	}
	xs, ys := make([]float32, 64), make([]float32, 64)
	for i := range xs {
		xs[i] = float32(i)/32 - 1
		ys[i] = 3*xs[i] - 1
	}
	x := fulmen.Must(fulmen.FromSlice(xs, 64, 1))
	y := fulmen.Must(fulmen.FromSlice(ys, 64, 1))
	defer x.Close()
	defer y.Close()
	ds := fulmen.Must(fulmen.NewTensorDataset(x, y))
	defer ds.Close()
	loader := fulmen.Must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: 1}))
	defer loader.Close()
	model := fulmen.Must(fulmen.NewLinear(1, 1, true))
	defer model.Close()
	module := fulmen.Must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			in, err := b.Get(0)
			if err != nil {
				return nil, err
			}
			target, err := b.Get(1)
			if err != nil {
				return nil, err
			}
			pred, err := model.Forward(in)
			if err != nil {
				return nil, err
			}
			loss, err := fulmen.MSELoss(pred, target, fulmen.ReductionMean)
			if err != nil {
				return nil, err
			}
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			return loss, ctx.Log("mse", v, fulmen.LogOnEpoch, 0)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultAdamOptions()
			o.LR = 0.1
			opt, err := fulmen.NewAdam(model, nil, o)
			if err != nil {
				return err
			}
			return cfg.Add(opt)
		},
	}))
	defer module.Close()
	opts := fulmen.Must(fulmen.NewTrainerOptions())
	defer opts.Close()
	for k, v := range map[string]string{"max_epochs": "60", "enable_progress_bar": "false", "logger": "false",
		"enable_checkpointing": "false", "enable_model_summary": "false"} {
		if err := opts.Set(k, v); err != nil {
			log.Fatal(err)
		}
	}
	trainer := fulmen.Must(fulmen.NewTrainer(opts))
	defer trainer.Close()
	if err := trainer.Fit(context.Background(), module, loader, nil); err != nil {
		log.Fatal(err)
	}
	mse := fulmen.Must(trainer.CallbackMetric("mse"))
	fmt.Printf("fulmen %s: mse after 60 epochs %.5f\n", fulmen.Version(), mse)
	if math.IsNaN(mse) || mse > 1e-2 {
		log.Fatalf("did not learn: mse %v", mse)
	}
}

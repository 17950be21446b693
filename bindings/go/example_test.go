package fulmen_test

import (
	"context"
	"fmt"
	"log"
	"math"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// Train a small classifier on two blobs with Go step functions.
func Example_train() {
	_ = fulmen.ManualSeed(0)
	xs, ys := make([]float32, 512), make([]int64, 256) // class 0 near (-2,-2), 1 near (2,2)
	for i := range ys {
		ys[i] = int64(i % 2)
		c := float64(4*ys[i] - 2)
		xs[2*i], xs[2*i+1] = float32(c+math.Sin(float64(i))), float32(c+math.Cos(float64(i)))
	}
	x, y := fulmen.Must(fulmen.FromSlice(xs, 256, 2)), fulmen.Must(fulmen.FromSlice(ys))
	data := fulmen.Must(fulmen.NewTensorDataset(x, y))
	loader := fulmen.Must(fulmen.NewLoader(data, fulmen.LoaderOptions{BatchSize: 32, Shuffle: true}))
	model := fulmen.Must(fulmen.NewSequential(fulmen.Must(fulmen.NewLinear(2, 16, true)),
		fulmen.Must(fulmen.NewActivation(fulmen.ReLU, 0)), fulmen.Must(fulmen.NewLinear(16, 2, true))))
	module := fulmen.Must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			// Tensors made here are released by fulmen when the step returns.
			logits := fulmen.Must(model.Forward(fulmen.Must(b.Get(0)))) // a panic becomes Fit's error
			loss, err := fulmen.CrossEntropy(logits, fulmen.Must(b.Get(1)), fulmen.ReductionMean)
			if err != nil {
				return nil, err
			}
			return loss, ctx.LogTensor("train_loss", loss, fulmen.LogOnEpoch, 0) // read when the epoch ends
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultSGDOptions()
			o.LR = 0.1
			return cfg.Add(fulmen.Must(fulmen.NewSGD(model, nil, o)))
		},
	}))
	opts := fulmen.Must(fulmen.NewTrainerOptions())
	_ = opts.SetInt("max_epochs", 5)
	_ = opts.SetBool("enable_progress_bar", false)
	_ = opts.SetBool("logger", false)               // no CSV / TensorBoard logs,
	_ = opts.SetBool("enable_checkpointing", false) // no checkpoint,
	_ = opts.SetBool("enable_model_summary", false) // no layer table on stderr
	trainer := fulmen.Must(fulmen.NewTrainer(opts))
	if err := trainer.Fit(context.Background(), module, loader, nil); err != nil {
		log.Fatal(err)
	}
	loss, _ := trainer.CallbackMetric("train_loss")
	fmt.Println("loss below 0.1:", loss < 0.1)
	for _, h := range []interface{ Close() error }{trainer, opts, module, model, loader, data, x, y} {
		h.Close()
	}
	// Output: loss below 0.1: true
}

package fulmen_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// ConfigureCallbacks' callbacks with Go functions: the module's prediction
// writers replace the trainer's (a new pair each run), and its
// BackboneFinetuning asks the module's lambda for each later epoch.
func TestConfigureCallbacksAddsWritersAndBackboneLambdas(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 32, 1)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	runs, moduleBatches, moduleEpochs, valueTensors, trainerBatches := 0, 0, 0, 0, 0
	var asked []int64
	var refused error
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		PredictStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			return bt.Get(0)
		},
		ConfigureOptimizers: trainableSGD(model, 0.1),
		ConfigureCallbacks: func(list *fulmen.CallbackList) error {
			runs++
			err := list.AddPredictionWriter("batch_and_epoch", fulmen.PredictionWriter{
				WriteOnBatchEnd: func(fulmen.BatchPrediction) error { moduleBatches++; return nil },
				WriteOnEpochEnd: func(e fulmen.EpochPredictions) error {
					if len(e.Predictions) == 4 {
						moduleEpochs++
					}
					return nil
				},
			})
			if err != nil {
				return err
			}
			err = list.AddPredictionValueWriter("", fulmen.PredictionValueWriter{
				WriteOnBatchEnd: func(p fulmen.BatchPredictionValue) error {
					if _, isTensor := p.Prediction.(*fulmen.Tensor); isTensor {
						valueTensors++
					}
					return nil
				},
			})
			if err != nil {
				return err
			}
			opts := fulmen.DefaultBackboneFinetuningOptions()
			opts.Backbone = "0"
			opts.UnfreezeBackboneAtEpoch = 1
			refused = list.AddBackboneFinetuningFunc(opts, nil)
			return list.AddBackboneFinetuningFunc(opts, func(epoch int64) (float64, error) {
				asked = append(asked, epoch)
				return 1.5, nil
			})
		},
	}))
	defer m.Close()
	tr := quietTrainer(t, 4, "logger", "false")
	defer tr.Close()
	ok(t, tr.AddPredictionWriter("batch", fulmen.PredictionWriter{
		WriteOnBatchEnd: func(fulmen.BatchPrediction) error { trainerBatches++; return nil },
	}))
	for i := 0; i < 2; i++ {
		out := must(tr.Predict(context.Background(), m, l))
		out.Close()
	}
	if runs != 2 || trainerBatches != 0 || moduleBatches != 8 || moduleEpochs != 2 || valueTensors != 8 {
		t.Fatalf("runs %d, trainer's writer %d batches, module's %d batches and %d epochs, %d tensor values",
			runs, trainerBatches, moduleBatches, moduleEpochs, valueTensors)
	}
	if !errors.Is(refused, fulmen.ErrNullArgument) {
		t.Fatalf("a nil lambda: %v", refused)
	}
	ok(t, tr.Fit(context.Background(), m, l, nil))
	if !reflect.DeepEqual(asked, []int64{3, 4}) {
		t.Fatalf("lambda_func asked for %v", asked)
	}
}

// A CallbackList kept past ConfigureCallbacks refuses the Go-function
// callbacks too.
func TestACallbackListKeptRefusesWriters(t *testing.T) {
	var list *fulmen.CallbackList
	err := list.AddPredictionWriter("batch", fulmen.PredictionWriter{
		WriteOnBatchEnd: func(fulmen.BatchPrediction) error { return nil },
	})
	if !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("a nil list: %v", err)
	}
}

package fulmen_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// A Fit given no loaders trains on the module's TrainDataloader and
// validates on its ValDataloader, called again every 2 epochs; the
// loaders returned are the library's (closed here); a hook's error is the
// returned error's cause.
func TestDataloaderHooks(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	var trainCalls, valCalls []int64
	var given []*fulmen.Loader
	steps := 0
	loaderOf := func(n int, seed int64) (*fulmen.Loader, error) {
		ds := blobDataset(t, n, seed)
		defer ds.Close()
		l, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16})
		given = append(given, l)
		return l, err
	}
	stop := errors.New("the data went away")
	failAt := int64(-1)
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			steps++
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			_, loss, err := lossOf(model, b)
			if err != nil {
				return err
			}
			v, err := loss.Item()
			if err != nil {
				return err
			}
			return ctx.Log("val_loss", v, 0, 0)
		},
		ConfigureOptimizers: sgd(model, 0.1),
		TrainDataloader: func(epoch int64) (*fulmen.Loader, error) {
			trainCalls = append(trainCalls, epoch)
			if epoch == failAt {
				return nil, stop
			}
			return loaderOf(32+16*int(epoch), 9)
		},
		ValDataloader: func(epoch int64) ([]*fulmen.Loader, error) {
			valCalls = append(valCalls, epoch)
			l, err := loaderOf(16, 3)
			return []*fulmen.Loader{l}, err
		},
	}))
	defer m.Close()
	tr := quietTrainer(t, 3, "logger", "false", "reload_dataloaders_every_n_epochs", "2")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, nil, nil))
	if !reflect.DeepEqual(trainCalls, []int64{0, 2}) || !reflect.DeepEqual(valCalls, []int64{0, 2}) {
		t.Fatalf("train_dataloader calls %v, val_dataloader calls %v", trainCalls, valCalls)
	}
	if steps != 2+2+4 {
		t.Fatalf("%d training steps", steps)
	}
	if v := must(tr.CallbackMetric("val_loss")); v <= 0 {
		t.Fatalf("val_loss %v", v)
	}
	for _, l := range given {
		if _, err := l.Len(); !errors.Is(err, fulmen.ErrNullArgument) {
			t.Fatalf("a loader handed to the library is still open here: %v", err)
		}
	}
	failAt = 2
	again := quietTrainer(t, 3, "logger", "false", "reload_dataloaders_every_n_epochs", "1")
	defer again.Close()
	if err := again.Fit(context.Background(), m, nil, nil); !errors.Is(err, stop) {
		t.Fatalf("a failing TrainDataloader: %v", err)
	}
}

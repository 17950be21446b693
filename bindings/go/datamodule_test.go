package fulmen_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// blobData is a DataModule with every optional part, recording its calls.
type blobData struct {
	t         *testing.T
	calls     []string
	state     []byte
	loaded    []byte
	failSetup error
}

func (d *blobData) loaders(what string, epoch int64) ([]*fulmen.Loader, error) {
	d.calls = append(d.calls, what+":"+string(rune('0'+epoch)))
	ds := blobDataset(d.t, 48, 5)
	defer ds.Close()
	l, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16})
	return []*fulmen.Loader{l}, err
}

func (d *blobData) PrepareData() error { d.calls = append(d.calls, "prepare_data"); return nil }
func (d *blobData) Setup(stage string) error {
	d.calls = append(d.calls, "setup("+stage+")")
	return d.failSetup
}
func (d *blobData) Teardown(stage string) error {
	d.calls = append(d.calls, "teardown("+stage+")")
	return nil
}
func (d *blobData) TrainDataloader(epoch int64) (*fulmen.Loader, error) {
	l, err := d.loaders("train", epoch)
	return l[0], err
}
func (d *blobData) ValDataloader(epoch int64) ([]*fulmen.Loader, error) {
	return d.loaders("val", epoch)
}
func (d *blobData) TestDataloader(epoch int64) ([]*fulmen.Loader, error) {
	return d.loaders("test", epoch)
}
func (d *blobData) PredictDataloader(epoch int64) ([]*fulmen.Loader, error) {
	return d.loaders("predict", epoch)
}
func (d *blobData) StateDict() ([]byte, error)       { return d.state, nil }
func (d *blobData) LoadStateDict(state []byte) error { d.loaded = state; return nil }

func dataModuleModule(t *testing.T, model *fulmen.Model, stepErr *error) *fulmen.LightningModule {
	evalStep := func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
		_, loss, err := lossOf(model, b)
		if err != nil {
			return err
		}
		v, err := loss.Item()
		if err != nil {
			return err
		}
		return ctx.Log("loss", v, 0, 0)
	}
	return must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			if *stepErr != nil {
				return nil, *stepErr
			}
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ValidationStep: evalStep,
		TestStep:       evalStep,
		PredictStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			logits, _, err := lossOf(model, b)
			return logits, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
}

// Lightning's order across FitDataModule, ValidateDataModule,
// TestDataModule and PredictDataModule.
func TestDataModuleCallOrder(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	var stepErr error
	m := dataModuleModule(t, model, &stepErr)
	defer m.Close()
	tr := quietTrainer(t, 2, "logger", "false", "enable_checkpointing", "false",
		"reload_dataloaders_every_n_epochs", "1", "num_sanity_val_steps", "1")
	defer tr.Close()
	d := &blobData{t: t}
	ctx := context.Background()
	ok(t, tr.FitDataModule(ctx, m, d))
	must(tr.ValidateDataModule(ctx, m, d))
	must(tr.TestDataModule(ctx, m, d))
	outs := must(tr.PredictDataModule(ctx, m, d))
	want := []string{"prepare_data", "setup(fit)", "train:0", "val:0", "train:1", "val:1", "teardown(fit)",
		"prepare_data", "setup(validate)", "val:2", "teardown(validate)",
		"prepare_data", "setup(test)", "test:2", "teardown(test)",
		"prepare_data", "setup(predict)", "predict:2", "teardown(predict)"}
	if !reflect.DeepEqual(d.calls, want) {
		t.Fatalf("calls %v\nwant  %v", d.calls, want)
	}
	if len(outs) != 1 || outs[0] == nil {
		t.Fatalf("predict outputs %v", outs)
	}
	shape := must(outs[0].Shape())
	if shape[0] != 48 {
		t.Fatalf("predict output shape %v", shape)
	}
	outs[0].Close()
}

// The state goes into the checkpoint under the Go type's name and comes
// back on resume; a failed run is torn down, a failed setup is not.
func TestDataModuleStateAndFailures(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	var stepErr error
	m := dataModuleModule(t, model, &stepErr)
	defer m.Close()
	root := t.TempDir()
	ctx := context.Background()
	first := quietTrainer(t, 1, "default_root_dir", root)
	d := &blobData{t: t, state: []byte{7, 0, 9}}
	ok(t, first.FitDataModule(ctx, m, d))
	first.Close()
	second := quietTrainer(t, 2, "default_root_dir", root)
	defer second.Close()
	resumed := &blobData{t: t}
	ok(t, second.FitDataModule(ctx, m, resumed, fulmen.CkptPath("last")))
	if !bytes.Equal(resumed.loaded, []byte{7, 0, 9}) {
		t.Fatalf("load_state_dict got %v", resumed.loaded)
	}

	stepErr = errors.New("the step broke")
	failing := &blobData{t: t}
	quiet := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false")
	defer quiet.Close()
	if err := quiet.FitDataModule(ctx, m, failing); !errors.Is(err, stepErr) {
		t.Fatalf("fit error %v", err)
	}
	if last := failing.calls[len(failing.calls)-1]; last != "teardown(fit)" {
		t.Fatalf("calls %v", failing.calls)
	}
	stepErr = nil
	noData := errors.New("no data here")
	broken := &blobData{t: t, failSetup: noData}
	if err := quiet.FitDataModule(ctx, m, broken); !errors.Is(err, noData) {
		t.Fatalf("fit error %v", err)
	}
	if !reflect.DeepEqual(broken.calls, []string{"prepare_data", "setup(fit)"}) {
		t.Fatalf("calls %v", broken.calls)
	}
}

// prepareOnlyData brings prepare_data (on global rank 0 only) and the
// stages; the module's loaders serve the run.
type prepareOnlyData struct{ calls *[]string }

func (d prepareOnlyData) PrepareData() error {
	*d.calls = append(*d.calls, "dm.prepare_data")
	return nil
}
func (d prepareOnlyData) Setup(string) error       { return nil }
func (d prepareOnlyData) Teardown(string) error    { return nil }
func (d prepareOnlyData) PrepareDataPerNode() bool { return false }

// The module's prepare_data (after the datamodule's), ConfigureModel,
// ConfigureCallbacks and a validation step's outputs, beside a
// datamodule.
func TestModuleSlotsBesideDataModule(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	var calls []string
	outputs := 0
	loaders := func(epoch int64) ([]*fulmen.Loader, error) {
		return (&blobData{t: t}).loaders("", epoch)
	}
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ValidationStepOutput: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
		TrainDataloader: func(epoch int64) (*fulmen.Loader, error) {
			l, err := loaders(epoch)
			return l[0], err
		},
		ValDataloader: loaders,
		ConfigureModel: func(device fulmen.Device) error {
			if device != (fulmen.Device{Type: fulmen.CPU}) {
				t.Errorf("configure_model on %v", device)
			}
			calls = append(calls, "configure_model")
			return nil
		},
		ConfigureCallbacks: func(list *fulmen.CallbackList) error {
			return list.Add("Noting", fulmen.CallbackFunc(func(hook fulmen.Hook, ctx *fulmen.HookContext) error {
				if hook == fulmen.HookFitStart {
					calls = append(calls, "cb.on_fit_start")
				}
				return nil
			}))
		},
		OnHook: func(hook fulmen.Hook, ctx *fulmen.HookContext) error {
			switch hook {
			case fulmen.HookPrepareData:
				calls = append(calls, "prepare_data")
			case fulmen.HookValidationBatchEnd:
				out, err := ctx.Output()
				if err != nil {
					return err
				}
				if out != nil {
					outputs++
				}
			}
			return nil
		},
	}))
	defer m.Close()
	ok(t, m.OverrideHook(fulmen.HookPrepareData, true))
	ok(t, m.SetPrepareDataPerNode(false))
	tr := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false", "num_sanity_val_steps", "0")
	defer tr.Close()
	ok(t, tr.FitDataModule(context.Background(), m, prepareOnlyData{&calls}))
	want := []string{"dm.prepare_data", "prepare_data", "configure_model", "cb.on_fit_start"}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("calls %v\nwant  %v", calls, want)
	}
	if outputs != 3 {
		t.Fatalf("%d validation batch ends saw the step's outputs, want 3", outputs)
	}
}

// The built-in callbacks ConfigureCallbacks adds replace the trainer's of
// their types: the module's EarlyStopping (no patience, a metric that never
// improves) stops the fit at epoch 1, where the trainer's, on a metric never
// logged, would fail it.
func TestConfigureCallbacksReplacesTheTrainersByType(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 32, 1)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	var atEnd fulmen.EarlyStoppingState
	var bestAtStart []float64
	var valLoaders []int64
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			if err != nil {
				return nil, err
			}
			return loss, ctx.Log("flat", 1, fulmen.LogOnEpoch, 0)
		},
		ConfigureOptimizers: sgd(model, 0.1),
		ConfigureCallbacks: func(list *fulmen.CallbackList) error {
			es := fulmen.DefaultEarlyStoppingOptions("flat")
			es.Patience = 0
			es.CheckOnTrainEpochEnd = fulmen.CheckOnTrainEpochEnd
			if err := list.AddEarlyStopping(es); err != nil {
				return err
			}
			mc := fulmen.DefaultModelCheckpointOptions()
			mc.SaveTopK = -1
			if err := list.AddModelCheckpoint(mc); err != nil {
				return err
			}
			return list.AddLRMonitorWith("epoch", false, false)
		},
		// From hooks: the module's EarlyStopping as it goes, and the
		// per-loader counts (no validation loader here).
		OnHook: func(h fulmen.Hook, ctx *fulmen.HookContext) error {
			var err error
			switch h {
			case fulmen.HookTrainStart:
				valLoaders, err = ctx.NumValBatches()
			case fulmen.HookTrainEpochStart:
				var s fulmen.EarlyStoppingState
				s, err = ctx.EarlyStoppingState()
				bestAtStart = append(bestAtStart, s.BestScore)
			case fulmen.HookTrainEnd:
				atEnd, err = ctx.EarlyStoppingState()
			}
			return err
		},
	}))
	defer m.Close()
	tr := quietTrainer(t, 5, "logger", "csv")
	defer tr.Close()
	ok(t, tr.AddEarlyStopping(fulmen.DefaultEarlyStoppingOptions("never_logged")))
	ok(t, tr.Fit(context.Background(), m, l, nil))
	s := must(tr.EarlyStoppingState())
	if s.StoppedEpoch != 1 || s.WaitCount != 1 || atEnd != s {
		t.Fatalf("early stopping state %+v, from on_train_end %+v", s, atEnd)
	}
	if len(bestAtStart) != 2 || !math.IsInf(bestAtStart[0], 1) || bestAtStart[1] != 1 || len(valLoaders) != 0 {
		t.Fatalf("best scores %v at the epochs' starts, validation loaders %v", bestAtStart, valLoaders)
	}
	if _, found := must(tr.CallbackMetrics())["lr-SGD"]; !found {
		t.Fatal("the module's LearningRateMonitor logged nothing")
	}
}

// TestConfigureCallbacksAddsTheOtherBuiltIns: the module's
// GradientAccumulationScheduler (2 batches a step) replaces the trainer's
// (4), and a second StochasticWeightAveraging in the list is refused.
func TestConfigureCallbacksAddsTheOtherBuiltIns(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 32, 1)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	var swaErr error
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
		ConfigureCallbacks: func(list *fulmen.CallbackList) error {
			swa := fulmen.DefaultStochasticWeightAveragingOptions(0.05)
			ok(t, list.AddStochasticWeightAveraging(swa))
			swaErr = list.AddStochasticWeightAveraging(swa)
			// The first SWA joins the run; it changes the lr, not the
			// step count.
			return list.AddGradientAccumulationScheduler(map[int64]int64{0: 2})
		},
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	ok(t, tr.AddGradientAccumulationScheduler(map[int64]int64{0: 4}))
	ok(t, tr.Fit(context.Background(), m, l, nil))
	if !errors.Is(swaErr, fulmen.ErrInvalidArgument) {
		t.Errorf("a second StochasticWeightAveraging: %v", swaErr)
	}
	if s := must(tr.GlobalStep()); s != 2 {
		t.Errorf("global step %d after 4 batches, want 2 (the module's accumulation of 2)", s)
	}
}

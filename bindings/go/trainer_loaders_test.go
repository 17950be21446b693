package fulmen_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// Several evaluation loaders run in turn; each gets its dataloader_idx
// and its own "/dataloader_idx_N" metrics, equal to a run on it alone.
func TestSeveralLoaders(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	a := blobDataset(t, 48, 2)
	defer a.Close()
	b := blobDataset(t, 16, 3)
	defer b.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 16}))
	defer tl.Close()
	al := must(fulmen.NewLoader(a, fulmen.LoaderOptions{BatchSize: 16}))
	defer al.Close()
	bl := must(fulmen.NewLoader(b, fulmen.LoaderOptions{BatchSize: 16}))
	defer bl.Close()
	model := mlp(t)
	defer model.Close()
	steps := map[int]int{}
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ValidationStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) error {
			steps[must(ctx.DataloaderIdx())]++
			_, loss, err := lossOf(model, bt)
			if err != nil {
				return err
			}
			return ctx.Log("val_loss", must(loss.Item()), 0, 0)
		},
		PredictStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			return model.Forward(must(bt.Get(0)))
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "num_sanity_val_steps", "0")
	defer tr.Close()
	bg := context.Background()
	ok(t, tr.FitLoaders(bg, m, tl, []*fulmen.Loader{al, bl}))
	if steps[0] != 3 || steps[1] != 1 {
		t.Fatalf("validation steps per loader %v", steps)
	}
	onB := must(tr.CallbackMetric("val_loss/dataloader_idx_1"))
	one := must(tr.Validate(bg, m, bl))
	if v := must(tr.CallbackMetric("val_loss")); v != onB {
		t.Fatalf("loader 1 alone %v, in the list %v", v, onB)
	}
	if len(one) != 1 || len(one[0]) != 1 || one[0]["val_loss"] != onB {
		t.Fatalf("validate returned %v, want [{val_loss: %v}]", one, onB)
	}
	// Lightning's list of dicts: each loader's own values.
	two := must(tr.ValidateLoaders(bg, m, []*fulmen.Loader{bl, bl}))
	if must(tr.CallbackMetric("val_loss/dataloader_idx_0")) != onB {
		t.Fatal("the same loader twice gave another value")
	}
	if len(two) != 2 || len(two[0]) != 1 || two[0]["val_loss/dataloader_idx_0"] != onB || two[1]["val_loss/dataloader_idx_1"] != onB {
		t.Fatalf("validate over two loaders returned %v", two)
	}
	if again := must(tr.EvalResults()); len(again) != 2 || again[1]["val_loss/dataloader_idx_1"] != onB {
		t.Fatalf("EvalResults after validate: %v", again)
	}
	preds := must(tr.PredictLoaders(bg, m, []*fulmen.Loader{al, bl}))
	if r := must(tr.EvalResults()); len(r) != 0 {
		t.Fatalf("EvalResults after predict: %v", r)
	}
	if len(preds) != 2 || must(preds[0].Shape())[0] != 48 || must(preds[1].Shape())[0] != 16 {
		t.Fatalf("predictions %v", preds)
	}
	for _, p := range preds {
		ok(t, p.Close())
	}
	if _, err := tr.TestLoaders(bg, m, nil); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("no loader: %v", err)
	}
	if _, err := tr.ValidateLoaders(bg, m, []*fulmen.Loader{al, nil}); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("a nil loader: %v", err)
	}
	// No validation loaders: one more epoch, trained without validating.
	ok(t, tr.SetMaxEpochs(2))
	ok(t, tr.FitLoaders(bg, m, tl, nil))
}

// A schedule changes the steps per epoch; a failed fit leaves
// on_exception.ckpt, from which it resumes to the end.
func TestScaleBatchSize(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			x := must(bt.Get(0))
			if shape := must(x.Shape()); shape[0] > 40 {
				return nil, &fulmen.Error{Code: fulmen.CodeOutOfMemory, Message: "simulated"}
			}
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1)
	defer tr.Close()
	o := fulmen.DefaultBatchSizeFinderOptions()
	if o.BinSearch || o.StepsPerTrial != 3 || o.InitVal != 2 || o.MaxVal != 8192 {
		t.Fatalf("defaults %+v", o)
	}
	if n := must(tr.ScaleBatchSize(context.Background(), m, tl, nil, o)); n != 32 {
		t.Fatalf("power: %d", n)
	}
	if n := must(tl.Len()); n != 2 {
		t.Fatalf("the loader has %d batches after the search", n)
	}
	o.BinSearch, o.Margin = true, 0
	if n := must(tr.ScaleBatchSize(context.Background(), m, tl, nil, o)); n != 40 {
		t.Fatalf("binsearch: %d", n)
	}
	o.Margin = 1
	if _, err := tr.ScaleBatchSize(context.Background(), m, tl, nil, o); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("margin 1: %v", err)
	}
}

func TestWeightAveragingEndsWithTheAverage(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	weight := func() []float32 {
		w := must(model.StateDictGet("0.weight"))
		defer w.Close()
		return must(fulmen.ToSlice[float32](w))
	}
	before := weight()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	opts := fulmen.DefaultWeightAveragingOptions()
	if !opts.EMA || opts.Decay != 0.999 || !opts.UseBuffers || opts.UpdateStartingAtStep != -1 {
		t.Fatalf("defaults %+v", opts)
	}
	// An average never updated after its first copy: training ends with
	// the weights it started from.
	opts.UpdateEveryNSteps = 0
	tr := quietTrainer(t, 1)
	defer tr.Close()
	ok(t, tr.AddWeightAveraging(opts))
	ok(t, tr.Fit(context.Background(), m, tl, nil))
	if s := must(tr.GlobalStep()); s != 8 {
		t.Fatalf("global step %d", s)
	}
	if after := weight(); !reflect.DeepEqual(after, before) {
		t.Fatalf("weights after the fit are not the average's")
	}
	opts.Decay = -1
	if err := tr.AddWeightAveraging(opts); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("decay -1: %v", err)
	}
}

func TestAccumulationScheduleAndExceptionCheckpoint(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	fail := true
	boom := errors.New("stop")
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			if fail && must(ctx.GlobalStep()) == 5 {
				return nil, boom
			}
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	dir := t.TempDir()
	tr := quietTrainer(t, 2)
	defer tr.Close()
	ok(t, tr.AddGradientAccumulationScheduler(map[int64]int64{0: 2, 1: 4}))
	ok(t, tr.AddOnExceptionCheckpoint(dir, ""))
	if err := tr.Fit(context.Background(), m, tl, nil); !errors.Is(err, boom) {
		t.Fatalf("fit: %v", err)
	}
	fail = false
	resumed := quietTrainer(t, 2)
	defer resumed.Close()
	ok(t, resumed.AddGradientAccumulationScheduler(map[int64]int64{0: 2, 1: 4}))
	ok(t, resumed.Fit(context.Background(), m, tl, nil, fulmen.CkptPath(filepath.Join(dir, "on_exception.ckpt"))))
	if s := must(resumed.GlobalStep()); s != 6 {
		t.Fatalf("global step %d after the resume, want 6", s)
	}
	if _, err := resumed.ProfilerReport(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("a report without profiling: %v", err)
	}
	profiled := quietTrainer(t, 1, "profiler", "simple")
	defer profiled.Close()
	ok(t, profiled.Fit(context.Background(), m, tl, nil))
	if r := must(profiled.ProfilerReport()); !strings.Contains(r, "[Strategy].backward") {
		t.Fatalf("report %q", r)
	}
	if err := resumed.AddGradientAccumulationScheduler(map[int64]int64{2: 0}); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("factor 0: %v", err)
	}
	if err := resumed.AddOnExceptionCheckpoint(dir, "a/b"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a filename with a slash: %v", err)
	}
}

func TestBackboneFinetuningTrainsTheBackboneFromItsEpoch(t *testing.T) {
	noLeaks(t)
	train := blobDataset(t, 64, 1)
	defer train.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8}))
	defer tl.Close()
	model := mlp(t)
	defer model.Close()
	weight := func() []float32 {
		w := must(model.StateDictGet("0.weight"))
		defer w.Close()
		return must(fulmen.ToSlice[float32](w))
	}
	before := weight()
	trainable := 0
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, bt *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, bt)
			return loss, err
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			params, err := model.Parameters(true)
			if err != nil {
				return err
			}
			defer func() {
				for _, p := range params {
					p.Close()
				}
			}()
			trainable = len(params)
			o := fulmen.DefaultSGDOptions()
			o.LR = 0.1
			opt, err := fulmen.NewSGD(nil, params, o)
			if err != nil {
				return err
			}
			if err := cfg.Add(opt); err != nil {
				opt.Close()
				return err
			}
			return nil
		},
	}))
	defer m.Close()
	opts := fulmen.DefaultBackboneFinetuningOptions()
	if opts.Backbone != "backbone" || opts.UnfreezeBackboneAtEpoch != 10 || opts.LambdaFactor != 2 || !opts.TrainBN {
		t.Fatalf("defaults %+v", opts)
	}
	opts.Backbone = "0"
	opts.UnfreezeBackboneAtEpoch = 1
	// Epoch 0: only the last Linear trains.
	first := quietTrainer(t, 1)
	defer first.Close()
	ok(t, first.AddBackboneFinetuning(opts))
	ok(t, first.Fit(context.Background(), m, tl, nil))
	if trainable != 2 || !reflect.DeepEqual(weight(), before) {
		t.Fatalf("epoch 0: %d trainable parameters, the backbone moved: %v", trainable, !reflect.DeepEqual(weight(), before))
	}
	// From epoch 1 the first Linear trains too.
	second := quietTrainer(t, 2)
	defer second.Close()
	ok(t, second.AddBackboneFinetuning(opts))
	ok(t, second.Fit(context.Background(), m, tl, nil))
	if reflect.DeepEqual(weight(), before) {
		t.Fatalf("the backbone never trained")
	}
	all := must(model.Parameters(false))
	for _, p := range all {
		p.Close()
	}
	if len(all) != 4 {
		t.Fatalf("%d parameters", len(all))
	}
	opts.LambdaFactor = -1
	if err := second.AddBackboneFinetuning(opts); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("lambda_factor -1: %v", err)
	}
	// A lambda_func: asked for each later epoch + 1; its error fails the fit.
	opts.LambdaFactor = 2
	var asked []int64
	third := quietTrainer(t, 4)
	defer third.Close()
	ok(t, third.AddBackboneFinetuningFunc(opts, func(epoch int64) (float64, error) {
		asked = append(asked, epoch)
		return 1.5, nil
	}))
	ok(t, third.Fit(context.Background(), m, tl, nil))
	if !reflect.DeepEqual(asked, []int64{3, 4}) {
		t.Fatalf("lambda_func asked for %v", asked)
	}
	failing := quietTrainer(t, 4)
	defer failing.Close()
	refused := errors.New("no factor")
	ok(t, failing.AddBackboneFinetuningFunc(opts, func(int64) (float64, error) { return 0, refused }))
	if err := failing.Fit(context.Background(), m, tl, nil); !errors.Is(err, refused) {
		t.Fatalf("a failing lambda_func: %v", err)
	}
	if err := failing.AddBackboneFinetuningFunc(opts, nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil lambda_func: %v", err)
	}
}

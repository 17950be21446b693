package fulmen_test

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// fixturePath is a file of the repository's tests/fixtures, or of the
// folder FULMEN_FIXTURES names (as for the C tests: the GPU kit runs the
// compiled tests away from the repository).
func fixturePath(name string) string {
	if dir := os.Getenv("FULMEN_FIXTURES"); dir != "" {
		return filepath.Join(dir, name)
	}
	return filepath.Join("..", "..", "tests", "fixtures", name)
}

func TestScriptValuesInAndOut(t *testing.T) {
	noLeaks(t)
	m := must(fulmen.LoadTorchScriptOn(fixturePath("values_scripted.pt"), fulmen.Device{Type: fulmen.CPU}))
	defer m.Close()
	x := must(fulmen.FromSlice([]float32{1, -2}))
	defer x.Close()
	out := must(m.CallMethod("forward", x, nil)).(fulmen.Tuple)
	scaled := out[0].(*fulmen.Tensor)
	if v := must(fulmen.ToSlice[float32](scaled)); !reflect.DeepEqual(v, []float32{2, -4}) {
		t.Fatalf("forward %v", v)
	}
	for _, v := range out {
		v.(*fulmen.Tensor).Close()
	}
	mixed := must(m.CallMethod("mix", []*fulmen.Tensor{x}, map[string]any{"w": 3.0}, false, 1, "y")).(fulmen.Dict)
	ys, found := mixed.Get("y")
	if !found {
		t.Fatalf("mix gave %v", mixed)
	}
	y := ys.([]any)[0].(*fulmen.Tensor)
	if v := must(fulmen.ToSlice[float32](y)); !reflect.DeepEqual(v, []float32{4, -5}) {
		t.Fatalf("mix %v", v)
	}
	y.Close()
	d := must(m.CallMethod("describe", 3, 1.0, []int64{4})).(fulmen.Tuple)
	want := fulmen.Tuple{int64(6), 0.5, true, "n=3", nil, []any{int64(4), int64(3)}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("describe gave %#v", d)
	}
	var fe *fulmen.Error
	if _, err := m.CallMethod("nope"); !asError(err, &fe) || fe.Code != fulmen.CodeInvalidArgument {
		t.Fatalf("unknown method: %v", err)
	}
	if _, err := m.CallMethod("describe", struct{}{}); !asError(err, &fe) || fe.Code != fulmen.CodeInvalidArgument {
		t.Fatalf("a struct argument: %v", err)
	}
	if _, err := m.CallMethod("describe", "x"); !asError(err, &fe) || fe.Code != fulmen.CodeTorch {
		t.Fatalf("a wrong type: %v", err)
	}
}

func asError(err error, target **fulmen.Error) bool {
	fe, ok := err.(*fulmen.Error)
	*target = fe
	return ok
}

// tabularDataset: category in 0..5, three numeric features, class =
// numeric[0] + (category odd) > 0.5.
func tabularDataset(t *testing.T, n int, seed int64) *fulmen.Dataset {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	cat := make([]int64, n)
	num := make([]float32, 3*n)
	target := make([]int64, n)
	for i := 0; i < n; i++ {
		cat[i] = int64(i*7) % 5
		for j := 0; j < 3; j++ {
			num[3*i+j] = float32(r.NormFloat64())
		}
		if num[3*i]+float32(cat[i]%2) > 0.5 {
			target[i] = 1
		}
	}
	ct := must(fulmen.FromSlice(cat))
	nt := must(fulmen.FromSlice(num, int64(n), 3))
	tt := must(fulmen.FromSlice(target))
	defer ct.Close()
	defer nt.Close()
	defer tt.Close()
	return must(fulmen.NewTensorDataset(ct, nt, tt))
}

func TestScriptFitRunsTheScriptedSteps(t *testing.T) {
	noLeaks(t)
	m := must(fulmen.LoadTorchScript(fixturePath("tabular_scripted.pt")))
	defer m.Close()
	step := func(method, metric string) func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
		return func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			batch, err := b.Value()
			if err != nil {
				return nil, err
			}
			idx, err := ctx.BatchIdx()
			if err != nil {
				return nil, err
			}
			out, err := m.CallMethod(method, batch, idx)
			if err != nil {
				return nil, err
			}
			l, _ := out.(fulmen.Dict).Get("loss")
			loss := l.(*fulmen.Tensor)
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			return loss, ctx.Log(metric, v, fulmen.LogOnEpoch, 0)
		}
	}
	module := must(fulmen.NewLightningModule(m, fulmen.ModuleFuncs{
		TrainingStep: step("training_step", "train_loss"),
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			_, err := step("validation_step", "val_loss")(ctx, b)
			return err
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultAdamOptions()
			o.LR = 0.02
			opt, err := fulmen.NewAdam(m, nil, o)
			if err != nil {
				return err
			}
			return cfg.Add(opt)
		},
	}))
	defer module.Close()
	trainDS, valDS := tabularDataset(t, 512, 1), tabularDataset(t, 128, 2)
	defer trainDS.Close()
	defer valDS.Close()
	lo := fulmen.DefaultLoaderOptions()
	lo.BatchSize = 32
	val := must(fulmen.NewLoader(valDS, lo))
	defer val.Close()
	lo.Shuffle = true
	train := must(fulmen.NewLoader(trainDS, lo))
	defer train.Close()
	trainer := quietTrainer(t, 6, "logger", "false", "enable_checkpointing", "false")
	defer trainer.Close()
	ok(t, trainer.Fit(context.Background(), module, train, val))
	if v := must(trainer.CallbackMetric("val_loss")); v > 0.45 {
		t.Fatalf("val_loss %v", v)
	}
	path := filepath.Join(t.TempDir(), "tuned.pt")
	ok(t, m.SetTraining(false))
	ok(t, m.SaveTorchScript(path))
	back := must(fulmen.LoadTorchScript(path))
	defer back.Close()
	ok(t, back.SetTraining(false))
	ok(t, back.ToDType(fulmen.Float64))
	ok(t, back.ToDevice(fulmen.Device{Type: fulmen.CPU}))
	nbt := must(back.StateDictGet("norm.num_batches_tracked"))
	defer nbt.Close()
	if dt := must(nbt.DType()); dt != fulmen.Int64 {
		t.Fatalf("num_batches_tracked became %v", dt)
	}
	if v := must(nbt.Item()); v != 96 {
		t.Fatalf("num_batches_tracked %v", v)
	}
}

func TestExportedProgramTrainsThroughFit(t *testing.T) {
	noLeaks(t)
	m := must(fulmen.LoadExported(fixturePath("exported_bn.pt2")))
	defer m.Close()
	r := rand.New(rand.NewSource(3))
	x := make([]float32, 64*4)
	y := make([]int64, 64)
	for i := range y {
		for j := 0; j < 4; j++ {
			x[4*i+j] = float32(r.NormFloat64())
		}
		y[i] = int64(i % 3)
	}
	xt := must(fulmen.FromSlice(x, 64, 4))
	yt := must(fulmen.FromSlice(y))
	defer xt.Close()
	defer yt.Close()
	ds := must(fulmen.NewTensorDataset(xt, yt))
	defer ds.Close()
	module := must(fulmen.NewLightningModule(m, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			batch, err := b.Value()
			if err != nil {
				return nil, err
			}
			out, err := m.CallMethod("training_step", batch)
			if err != nil {
				return nil, err
			}
			l, _ := out.(fulmen.Dict).Get("loss")
			return l.(*fulmen.Tensor), nil
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			opt, err := fulmen.NewAdam(m, nil, fulmen.DefaultAdamOptions())
			if err != nil {
				return err
			}
			return cfg.Add(opt)
		},
	}))
	defer module.Close()
	lo := fulmen.DefaultLoaderOptions()
	lo.BatchSize = 16
	train := must(fulmen.NewLoader(ds, lo))
	defer train.Close()
	trainer := quietTrainer(t, 2, "logger", "false", "enable_checkpointing", "false")
	defer trainer.Close()
	ok(t, trainer.Fit(context.Background(), module, train, nil))
	nbt := must(m.StateDictGet("bn.num_batches_tracked"))
	defer nbt.Close()
	if v := must(nbt.Item()); v != 8 {
		t.Fatalf("num_batches_tracked %v, want 8", v)
	}
	if _, err := fulmen.LoadExported(fixturePath("mlp_scripted.pt")); err == nil {
		t.Fatal("a TorchScript file loaded as an exported program")
	}
}

func TestTracedModelSavesAndLoadsBack(t *testing.T) {
	m := must(fulmen.NewSequential(
		must(fulmen.NewLinear(3, 8, true)),
		must(fulmen.NewBatchNorm(8, 1e-5, 0.1)),
		must(fulmen.NewActivation(fulmen.ReLU, 0)),
		must(fulmen.NewDropout(0.5)),
		must(fulmen.NewLinear(8, 2, true))))
	defer m.Close()
	x := must(fulmen.Randn(fulmen.Float32, 4, 3))
	defer x.Close()
	shifted := must(fulmen.Randn(fulmen.Float32, 6, 3))
	defer shifted.Close()
	must(m.Forward(shifted)).Close() // running statistics move
	traced := must(m.ToTorchScript(x))
	defer traced.Close()
	if training := must(m.IsTraining()); !training {
		t.Fatal("the model was left in evaluation mode")
	}
	if training := must(traced.IsTraining()); training {
		t.Fatal("the trace starts in training mode")
	}
	if a, b := must(traced.StateDictNames()), must(m.StateDictNames()); !reflect.DeepEqual(a, b) {
		t.Fatalf("names %v, want %v", a, b)
	}
	ok(t, m.SetTraining(false))
	path := filepath.Join(t.TempDir(), "traced.pt")
	ok(t, traced.SaveTorchScript(path))
	back := must(fulmen.LoadTorchScript(path))
	defer back.Close()
	ok(t, back.SetTraining(false))
	for _, model := range []*fulmen.Model{traced, back} {
		got, want := must(model.Forward(x)), must(m.Forward(x))
		if a, b := must(fulmen.ToSlice[float32](got)), must(fulmen.ToSlice[float32](want)); !reflect.DeepEqual(a, b) {
			t.Fatalf("traced forward %v, the model's %v", a, b)
		}
		got.Close()
		want.Close()
	}
	var fe *fulmen.Error
	if _, err := m.ToTorchScript(); !asError(err, &fe) || fe.Code != fulmen.CodeInvalidArgument {
		t.Fatalf("a trace without inputs: %v", err)
	}
	wrong := must(fulmen.Randn(fulmen.Float32, 4, 5))
	defer wrong.Close()
	if _, err := m.ToTorchScript(wrong); !asError(err, &fe) || fe.Code != fulmen.CodeShapeMismatch {
		t.Fatalf("a wrong input: %v", err)
	}
}

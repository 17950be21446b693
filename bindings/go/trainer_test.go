package fulmen_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// blobSource is a Go DataSource over blobs.
func blobSource(n int, seed int64) fulmen.DataSource {
	xs, ys := blobs(n, seed)
	return fulmen.DataSource{
		Len: func() (int, error) { return n, nil },
		GetBatch: func(idx []int64, b *fulmen.BatchBuilder) error {
			x := make([]float32, 0, 2*len(idx))
			y := make([]int64, 0, len(idx))
			for _, i := range idx {
				x = append(x, xs[2*i], xs[2*i+1])
				y = append(y, ys[i])
			}
			xt, err := fulmen.FromSlice(x, int64(len(idx)), 2)
			if err != nil {
				return err
			}
			yt, err := fulmen.FromSlice(y)
			if err != nil {
				return err
			}
			if err := b.Push(xt); err != nil {
				return err
			}
			return b.Push(yt)
		},
	}
}

// fixture records what the callbacks of a test module see.
type fixture struct {
	model                                 *fulmen.Model
	train, val, test, predict, configured int
	stages                                map[fulmen.Stage]bool
	lastEpoch, lastStep, lastBatch        int64
	leaked                                []*fulmen.Tensor // scope-owned tensors seen in steps
	kept                                  []*fulmen.Tensor
	keepLoss                              bool
}

func (f *fixture) record(t *testing.T, ctx *fulmen.StepContext) {
	stage := must(ctx.Stage())
	f.stages[stage] = true
	f.lastEpoch = must(ctx.Epoch())
	f.lastStep = must(ctx.GlobalStep())
	f.lastBatch = must(ctx.BatchIdx())
}

func (f *fixture) funcs(t *testing.T) fulmen.ModuleFuncs {
	return fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			f.train++
			f.record(t, ctx)
			logits, loss, err := lossOf(f.model, b)
			if err != nil {
				return nil, err
			}
			if !logits.Scoped() {
				t.Error("a tensor made in a step is not scope-owned")
			}
			f.leaked = append(f.leaked, logits)
			if f.keepLoss {
				// Take ownership; returning it only lends it for this step.
				if err := loss.Keep(); err != nil {
					return nil, err
				}
				f.kept = append(f.kept, loss)
			}
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			return loss, ctx.Log("train_loss", v, fulmen.LogOnStep|fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			f.val++
			f.record(t, ctx)
			logits, loss, err := lossOf(f.model, b)
			if err != nil {
				return err
			}
			acc, err := accuracy(logits, b)
			if err != nil {
				return err
			}
			if err := ctx.LogTensor("val_loss", loss, 0, 0); err != nil {
				return err
			}
			return ctx.Log("val_acc", acc, fulmen.LogProgBar, 0)
		},
		TestStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			f.test++
			f.record(t, ctx)
			_, loss, err := lossOf(f.model, b)
			if err != nil {
				return err
			}
			return ctx.Log("test_loss", must(loss.Item()), 0, 0)
		},
		PredictStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			f.predict++
			f.record(t, ctx)
			if err := ctx.Log("x", 1, 0, 0); !errors.Is(err, fulmen.ErrInvalidState) {
				t.Errorf("log in predict: %v", err)
			}
			x, err := b.Get(0)
			if err != nil {
				return nil, err
			}
			return f.model.Forward(x)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			f.configured++
			return sgd(f.model, 0.1)(cfg)
		},
	}
}

func newFixture(t *testing.T) (*fixture, *fulmen.LightningModule) {
	f := &fixture{model: mlp(t), stages: map[fulmen.Stage]bool{}}
	m := must(fulmen.NewLightningModule(f.model, f.funcs(t)))
	return f, m
}

// Fit learns the blobs from a Go data source; metrics, logs and every stage work.
func TestFitValidateTestPredict(t *testing.T) {
	noLeaks(t)
	train := must(fulmen.NewSourceDataset(blobSource(256, 1)))
	defer train.Close()
	val := blobDataset(t, 64, 2)
	defer val.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 32, Shuffle: true, Seed: 7}))
	defer tl.Close()
	vl := must(fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 32}))
	defer vl.Close()
	f, m := newFixture(t)
	defer f.model.Close()
	defer m.Close()
	tr := quietTrainer(t, 4)
	defer tr.Close()

	live := fulmen.LiveHandles()
	ok(t, tr.Fit(context.Background(), m, tl, vl))
	if got := fulmen.LiveHandles(); got != live {
		t.Fatalf("live handles %d after fit, %d before", got, live)
	}
	// 2 validation batches per epoch, and 2 more for the sanity check.
	if f.configured != 1 || f.train != 4*8 || f.val != 4*2+2 {
		t.Fatalf("calls: configure %d, train %d, val %d", f.configured, f.train, f.val)
	}
	for _, x := range f.leaked {
		if !x.Closed() || x.Scoped() {
			t.Fatal("a step tensor is still open after its step")
		}
		ok(t, x.Close()) // no-op, never a double free
	}
	if s, e := must(tr.GlobalStep()), must(tr.CurrentEpoch()); s != 32 || e != 4 {
		t.Fatalf("global step %d, epoch %d", s, e)
	}
	if f.lastEpoch != 3 || f.lastBatch != 1 {
		t.Fatalf("last epoch %d batch %d", f.lastEpoch, f.lastBatch)
	}
	acc := must(tr.CallbackMetric("val_acc"))
	if acc < 0.95 {
		t.Fatalf("val_acc %v", acc)
	}
	if l := must(tr.CallbackMetric("train_loss_epoch")); !(l > 0 && l < 0.5) {
		t.Fatalf("train_loss_epoch %v", l)
	}
	must(tr.CallbackMetric("train_loss_step"))
	if l := must(tr.CallbackMetric("val_loss")); !(l > 0 && l < 0.5) {
		t.Fatalf("val_loss (logged as a tensor) %v", l)
	}
	if _, err := tr.CallbackMetric("nope"); !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), "val_acc") {
		t.Fatalf("missing metric: %v", err)
	}
	dir := must(tr.LogDir())
	if !strings.Contains(dir, "lightning_logs/version_") {
		t.Fatalf("log dir %q", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "metrics.csv")); err != nil {
		t.Fatal(err)
	}

	must(tr.Validate(context.Background(), m, vl))
	must(tr.Test(context.Background(), m, vl))
	if l := must(tr.CallbackMetric("test_loss")); l > 0.5 {
		t.Fatalf("test_loss %v", l)
	}
	pred := must(tr.Predict(context.Background(), m, vl))
	defer pred.Close()
	if sh := must(pred.Shape()); len(sh) != 2 || sh[0] != 64 || sh[1] != 2 {
		t.Fatalf("predictions %v", sh)
	}
	if pred.Scoped() {
		t.Fatal("Predict's result is scope-owned")
	}
	if f.test != 2 || f.predict != 2 || len(f.stages) != 4 {
		t.Fatalf("test %d predict %d stages %v", f.test, f.predict, f.stages)
	}
	ok(t, m.Close())
	ok(t, m.Close())
}

// An iterator in Go: reset once per epoch, batches until done.
func TestFitIterator(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 32, 10)
	defer ds.Close()
	pos, resets := 0, 0
	it := fulmen.Iterator{
		Reset: func(epoch uint64) error { pos = 0; resets++; return nil },
		Next: func(b *fulmen.BatchBuilder) (bool, error) {
			if pos >= 32 {
				return true, nil
			}
			idx := make([]int64, 8)
			for i := range idx {
				idx[i] = int64(pos + i)
			}
			pos += 8
			ts, err := ds.Get(idx)
			if err != nil {
				return false, err
			}
			for _, x := range ts {
				if !x.Scoped() {
					t.Error("a tensor made in Next is not scope-owned")
				}
				if err := b.Push(x); err != nil {
					return false, err
				}
			}
			return false, nil
		},
	}
	l := must(fulmen.NewIteratorLoader(it))
	defer l.Close()
	f, m := newFixture(t)
	defer f.model.Close()
	defer m.Close()
	tr := quietTrainer(t, 3, "logger", "false")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, l, nil))
	if resets != 3 || f.train != 12 {
		t.Fatalf("resets %d, train steps %d", resets, f.train)
	}
	if _, err := tr.LogDir(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("log dir without a logger: %v", err)
	}
}

// A panic in a training step is an error from Fit, not a crash.
func TestFitPanic(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 5)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	steps := 0
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			steps++
			if steps == 3 {
				panic("boom at step 3")
			}
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 2, "logger", "false")
	defer tr.Close()
	live := fulmen.LiveHandles()
	err := tr.Fit(context.Background(), m, l, nil)
	if !errors.Is(err, fulmen.ErrCallback) {
		t.Fatalf("fit after a panic: %v", err)
	}
	var pe *fulmen.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom at step 3" || len(pe.Stack) == 0 {
		t.Fatalf("panic error: %#v", pe)
	}
	if !strings.Contains(err.Error(), "boom at step 3") || !strings.Contains(err.Error(), "training_step") {
		t.Fatalf("message: %v", err)
	}
	if fulmen.LiveHandles() != live {
		t.Fatal("handles leaked by the failed step")
	}
	// The module still works after the panic.
	ok(t, tr.Fit(context.Background(), m, l, nil))

	// A panic with an error value unwraps to it.
	sentinel := errors.New("typed panic")
	m2 := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep:        func(*fulmen.StepContext, *fulmen.Batch) (*fulmen.Tensor, error) { panic(sentinel) },
		ConfigureOptimizers: func(*fulmen.OptimizerConfig) error { panic("in configure") },
	}))
	defer m2.Close()
	err = tr.Fit(context.Background(), m2, l, nil)
	if !errors.As(err, &pe) || pe.Value != "in configure" {
		t.Fatalf("panic in configure_optimizers: %v", err)
	}
}

// Cancelling the context stops Fit between steps.
func TestFitContextCancel(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 6)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := 0
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(c *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			steps++
			if steps == 5 {
				cancel()
			}
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 100, "logger", "false")
	defer tr.Close()
	err := tr.Fit(ctx, m, l, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, fulmen.ErrCallback) {
		t.Fatalf("fit after cancel: %v", err)
	}
	if steps != 5 {
		t.Fatalf("%d steps ran, want 5", steps)
	}
	if s := must(tr.GlobalStep()); s != 5 {
		t.Fatalf("global step %d", s)
	}
	// A deadline that has passed stops Fit before the first step.
	dctx, dcancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer dcancel()
	<-dctx.Done()
	steps = 0
	if err := tr.Fit(dctx, m, l, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fit with an expired deadline: %v", err)
	}
	if steps != 0 {
		t.Fatalf("%d steps ran with an expired deadline", steps)
	}
}

// Errors from steps keep their code and their Go cause.
func TestFitStepErrors(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 16, 7)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	mine := errors.New("host refused this batch")
	var step func(b *fulmen.Batch) (*fulmen.Tensor, error)
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep:        func(_ *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) { return step(b) },
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	ctx := context.Background()

	step = func(*fulmen.Batch) (*fulmen.Tensor, error) { return nil, mine }
	if err := tr.Fit(ctx, m, l, nil); !errors.Is(err, mine) || !errors.Is(err, fulmen.ErrCallback) {
		t.Fatalf("go error: %v", err)
	}
	step = func(b *fulmen.Batch) (*fulmen.Tensor, error) {
		x := must(b.Get(0))
		return x.Matmul(x) // (8,2) @ (8,2)
	}
	if err := tr.Fit(ctx, m, l, nil); !errors.Is(err, fulmen.ErrShapeMismatch) && !errors.Is(err, fulmen.ErrTorch) {
		t.Fatalf("shape error in a step: %v", err)
	}
	// A nil loss is Lightning's `return None`: no backward, and the two
	// optimizer steps (which find no gradients) still count.
	step = func(*fulmen.Batch) (*fulmen.Tensor, error) { return nil, nil }
	if err := tr.Fit(ctx, m, l, nil); err != nil {
		t.Fatalf("nil loss: %v", err)
	}
	if gs := must(tr.GlobalStep()); gs != 2 {
		t.Fatalf("nil loss: global step %d, want 2", gs)
	}
	step = func(b *fulmen.Batch) (*fulmen.Tensor, error) {
		_, loss, err := lossOf(model, b)
		if err != nil {
			return nil, err
		}
		return loss.MulScalar(math.NaN())
	}
	ok(t, tr.SetMaxEpochs(2)) // one more epoch: the last fit's is done
	if err := tr.Fit(ctx, m, l, nil); !errors.Is(err, fulmen.ErrNonFinite) {
		t.Fatalf("NaN loss: %v", err)
	}
	step = func(b *fulmen.Batch) (*fulmen.Tensor, error) {
		_, loss, err := lossOf(model, b)
		if err != nil {
			return nil, err
		}
		return loss.Detach()
	}
	if err := tr.Fit(ctx, m, l, nil); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("detached loss: %v", err)
	}

	// A module without steps, and bad arguments.
	empty := must(fulmen.NewLightningModule(nil, fulmen.ModuleFuncs{}))
	defer empty.Close()
	if err := tr.Fit(ctx, empty, l, nil); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("fit without steps: %v", err)
	}
	if _, err := tr.Validate(ctx, empty, l); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("validate without a validation step: %v", err)
	}
	if err := tr.Fit(ctx, m, nil, nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("fit without a loader: %v", err)
	}
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	if err := o.Set("max_epoch", "3"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("unknown option: %v", err)
	}
	if err := o.SetFloat("limit_val_batches", 2.5); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("bad limit: %v", err)
	}
	// Typed setters, generated from the library's option table.
	if err := o.SetLogEveryNSteps(0); !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), "log_every_n_steps") {
		t.Fatalf("log_every_n_steps 0: %v", err)
	}
	if err := o.SetMaxTime(-time.Second); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("negative max_time: %v", err)
	}
	if err := o.SetLimitValBatchesFraction(2.5); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("fraction 2.5: %v", err)
	}
	ok(t, o.Set("max_epochs", "none"))
	ok(t, o.SetMaxSteps(3))
	ok(t, o.SetMaxTime(90*time.Minute))
	ok(t, o.SetLogger(false))
	ok(t, o.SetEnableCheckpointing(false))
	ok(t, o.SetBool("enable_model_summary", false))
	ok(t, o.SetEnableProgressBar(false))
	limited := must(fulmen.NewTrainer(o))
	defer limited.Close()
	step = func(b *fulmen.Batch) (*fulmen.Tensor, error) {
		_, loss, err := lossOf(model, b)
		return loss, err
	}
	ok(t, limited.Fit(ctx, m, l, nil))
	if s := must(limited.GlobalStep()); s != 3 {
		t.Fatalf("max_steps 3 ran %d", s)
	}
	def := must(fulmen.NewTrainer(nil))
	ok(t, def.Close())
	ok(t, def.Close())
}

// A kept loss is owned by Go: returning it lends it, Close frees it.
func TestKeepInsideStep(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 16, 8)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	f, m := newFixture(t)
	defer f.model.Close()
	defer m.Close()
	f.keepLoss = true
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	live := fulmen.LiveHandles()
	ok(t, tr.Fit(context.Background(), m, l, nil))
	if len(f.kept) != 2 {
		t.Fatalf("%d kept", len(f.kept))
	}
	if got := fulmen.LiveHandles(); got != live+2 {
		t.Fatalf("live handles %d, want %d", got, live+2)
	}
	for _, k := range f.kept {
		if k.Closed() || k.Scoped() {
			t.Fatal("a kept tensor was released")
		}
		if v := must(k.Item()); !(v > 0) {
			t.Fatalf("kept loss %v", v)
		}
		ok(t, k.Close())
	}
	if got := fulmen.LiveHandles(); got != live {
		t.Fatalf("live handles %d, want %d", got, live)
	}
}

// Schedulers handed over in ConfigureOptimizers step with the loop; the
// optimizer and scheduler wrappers are consumed.
func TestSchedulersInFit(t *testing.T) {
	noLeaks(t)
	train, val := blobDataset(t, 64, 6), blobDataset(t, 32, 7)
	defer train.Close()
	defer val.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 16, Shuffle: true}))
	vl := must(fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 16}))
	defer tl.Close()
	defer vl.Close()
	f := &fixture{model: mlp(t), stages: map[fulmen.Stage]bool{}}
	defer f.model.Close()
	funcs := f.funcs(t)
	var kind string
	var consumed bool
	funcs.ConfigureOptimizers = func(cfg *fulmen.OptimizerConfig) error {
		o := fulmen.DefaultSGDOptions()
		o.LR = 0.1
		opt, err := fulmen.NewSGD(f.model, nil, o)
		if err != nil {
			return err
		}
		var s *fulmen.Scheduler
		interval, monitor := fulmen.IntervalEpoch, ""
		if kind == "both" {
			// A warm-up per step and ReduceLROnPlateau per epoch on one optimizer.
			warm := must(fulmen.NewLinearLR(opt, 0.5, 1, 4))
			plateau := must(fulmen.NewReduceLROnPlateau(opt, fulmen.DefaultPlateauOptions()))
			ok(t, cfg.AddWithScheduler(opt, warm, fulmen.IntervalStep, 1, ""))
			if e := cfg.AddScheduler(1, plateau, fulmen.IntervalEpoch, 1, "val_loss"); !errors.Is(e, fulmen.ErrInvalidArgument) {
				t.Errorf("AddScheduler to a missing optimizer: %v", e)
			}
			err := cfg.AddScheduler(0, plateau, fulmen.IntervalEpoch, 1, "val_loss")
			consumed = err == nil && opt.Closed() && warm.Closed() && plateau.Closed()
			if err != nil {
				plateau.Close()
			}
			return err
		}
		if kind == "step" {
			s, err = fulmen.NewStepLR(opt, 5, 0.5)
			interval = fulmen.IntervalStep
		} else {
			s, err = fulmen.NewReduceLROnPlateau(opt, fulmen.DefaultPlateauOptions())
			monitor = "val_loss"
			if err == nil {
				if e := cfg.AddWithScheduler(opt, s, interval, 1, ""); !errors.Is(e, fulmen.ErrInvalidArgument) {
					t.Errorf("plateau without a monitor: %v", e)
				}
			}
		}
		if err == nil {
			err = cfg.AddWithScheduler(opt, s, interval, 1, monitor)
		}
		consumed = err == nil && opt.Closed() && s.Closed()
		if err != nil {
			s.Close()
			opt.Close()
		}
		return err
	}
	m := must(fulmen.NewLightningModule(f.model, funcs))
	defer m.Close()
	tr := quietTrainer(t, 3, "logger", "false")
	defer tr.Close()
	for i, k := range []string{"step", "plateau", "both"} {
		kind = k
		consumed = false
		// Each kind trains three more epochs: a fit goes on from the last.
		ok(t, tr.SetMaxEpochs(int64(3*(i+1))))
		ok(t, tr.Fit(context.Background(), m, tl, vl))
		if !consumed {
			t.Fatalf("%s: optimizer and scheduler not consumed", kind)
		}
	}
}

// Wrappers dropped without Close are freed by their finalizers.
func TestFinalizers(t *testing.T) {
	before := fulmen.LiveHandles()
	func() {
		for i := 0; i < 10; i++ {
			must(fulmen.Zeros(fulmen.Float32, 4))
		}
		must(fulmen.NewLinear(2, 2, true))
		must(fulmen.NewTrainerOptions())
	}()
	deadline := time.Now().Add(5 * time.Second)
	for fulmen.LiveHandles() != before && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := fulmen.LiveHandles(); got != before {
		t.Fatalf("live handles %d, want %d", got, before)
	}
}

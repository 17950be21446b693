package fulmen_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// trainModule is a blob classifier logging train_loss (step and epoch),
// val_loss and val_acc, with an optional OnHook.
func trainModule(t *testing.T, model *fulmen.Model, onHook func(fulmen.Hook, *fulmen.HookContext) error) *fulmen.LightningModule {
	t.Helper()
	return must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			if err != nil {
				return nil, err
			}
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			return loss, ctx.Log("train_loss", v, fulmen.LogOnStep|fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			logits, loss, err := lossOf(model, b)
			if err != nil {
				return err
			}
			acc, err := accuracy(logits, b)
			if err != nil {
				return err
			}
			if err := ctx.Log("val_loss", must(loss.Item()), 0, 0); err != nil {
				return err
			}
			return ctx.Log("val_acc", acc, 0, 0)
		},
		TestStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			_, loss, err := lossOf(model, b)
			if err != nil {
				return err
			}
			return ctx.Log("test_loss", must(loss.Item()), 0, 0)
		},
		PredictStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			return model.Forward(must(b.Get(0)))
		},
		ConfigureOptimizers: sgd(model, 0.1),
		OnHook:              onHook,
	}))
}

// loaders are a train loader of n samples and a val loader of nv, both in
// batches of bs.
func loaders(t *testing.T, n, nv, bs int) (train, val *fulmen.Loader) {
	t.Helper()
	td, vd := blobDataset(t, n, 21), blobDataset(t, nv, 22)
	train = must(fulmen.NewLoader(td, fulmen.LoaderOptions{BatchSize: bs, Shuffle: true, Seed: 1}))
	val = must(fulmen.NewLoader(vd, fulmen.LoaderOptions{BatchSize: bs}))
	td.Close() // the loaders keep the datasets alive
	vd.Close()
	t.Cleanup(func() { train.Close(); val.Close() })
	return train, val
}

// A Go callback and the module's OnHook see the hooks of a fit in
// Lightning's order, the callback first, with the hook's data.
func TestHookOrder(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 8, 4, 4) // 2 training batches, 1 validation batch
	model := mlp(t)
	defer model.Close()
	var calls []string
	var scoped []*fulmen.Tensor
	check := func(cond bool, format string, args ...any) {
		if !cond {
			t.Errorf(format, args...)
		}
	}
	cb := fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		calls = append(calls, "cb:"+h.String())
		stage := must(ctx.Stage())
		check(stage == "fit", "%v: stage %q", h, stage)
		idx := must(ctx.BatchIdx())
		n := must(ctx.BatchLen())
		out := must(ctx.Output())
		switch h {
		case fulmen.HookBeforeBackward, fulmen.HookAfterBackward:
			check(idx >= 0 && n == 0, "%v: batch %d, %d tensors", h, idx, n) // the loss, no batch
		case fulmen.HookTrainBatchStart, fulmen.HookTrainBatchEnd, fulmen.HookValidationBatchStart, fulmen.HookValidationBatchEnd:
			check(idx >= 0 && n == 2, "%v: batch %d, %d tensors", h, idx, n)
			x := must(ctx.BatchGet(0))
			sh := must(x.Shape())
			check(len(sh) == 2 && sh[0] == 4 && sh[1] == 2, "%v: batch shape %v", h, sh)
			check(x.Scoped(), "%v: a batch tensor is not scope-owned", h)
			scoped = append(scoped, x)
			if _, err := ctx.BatchGet(2); !errors.Is(err, fulmen.ErrOutOfRange) {
				t.Errorf("%v: batch tensor 2: %v", h, err)
			}
		default:
			check(idx == -1 && n == 0, "%v: batch %d, %d tensors", h, idx, n)
			if _, err := ctx.BatchGet(0); err == nil {
				t.Errorf("%v: a batch tensor without a batch", h)
			}
		}
		switch h {
		case fulmen.HookTrainBatchEnd, fulmen.HookBeforeBackward, fulmen.HookAfterBackward:
			check(out != nil, "%v: no loss", h)
			if out != nil {
				v := must(out.Item())
				check(v > 0, "%v: loss %v", h, v)
				scoped = append(scoped, out)
			}
		default:
			check(out == nil, "%v: an output", h)
		}
		if h == fulmen.HookTrainEpochEnd {
			v := must(ctx.Metric("train_loss_epoch"))
			check(v > 0, "train_loss_epoch %v", v)
			check(must(ctx.GlobalStep()) == 2 && must(ctx.Epoch()) == 0, "step %d epoch %d", must(ctx.GlobalStep()), must(ctx.Epoch()))
			tv := must(ctx.Trainer())
			check(tv.GlobalStep == 2 && tv.CurrentEpoch == 0 && tv.MaxEpochs == 1 && tv.WorldSize == 1 && tv.IsGlobalZero &&
				!tv.SanityChecking && !tv.ShouldStop && tv.NumTrainingBatches > 0, "the trainer from a hook: %+v", tv)
		}
		if h == fulmen.HookFitStart {
			if _, err := ctx.Metric("val_acc"); !errors.Is(err, fulmen.ErrInvalidState) {
				t.Errorf("a metric before any was logged: %v", err)
			}
			if err := ctx.CheckpointSet("k", "v"); !errors.Is(err, fulmen.ErrInvalidState) {
				t.Errorf("checkpoint entry outside on_save_checkpoint: %v", err)
			}
			if _, err := ctx.Exception(); !errors.Is(err, fulmen.ErrInvalidState) {
				t.Errorf("exception outside on_exception: %v", err)
			}
		}
		return nil
	})
	m := trainModule(t, model, func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		calls = append(calls, "lm:"+h.String())
		return nil
	})
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	ok(t, tr.AddCallback("recorder", cb))
	ok(t, tr.Fit(context.Background(), m, train, val))

	for _, x := range scoped {
		if !x.Closed() {
			t.Fatal("a hook tensor is open after its hook")
		}
	}
	// Every hook reaches the callback, then the module.
	var hooks []string
	for i := 0; i < len(calls); i += 2 {
		if i+1 >= len(calls) || !strings.HasPrefix(calls[i], "cb:") || calls[i+1] != "lm:"+calls[i][3:] {
			t.Fatalf("callback / module order broken at %d: %v", i, calls[i:])
		}
		hooks = append(hooks, calls[i][3:])
	}
	validation := []string{"on_validation_start", "on_validation_epoch_start", "on_validation_batch_start",
		"on_validation_batch_end", "on_validation_epoch_end", "on_validation_end"}
	batch := []string{"on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
		"on_before_optimizer_step", "on_train_batch_end"}
	var want []string
	want = append(want, "setup", "on_fit_start", "on_sanity_check_start")
	want = append(want, validation...)
	want = append(want, "on_sanity_check_end", "on_train_start", "on_train_epoch_start")
	want = append(want, batch...)
	want = append(want, batch...)
	want = append(want, validation...)
	want = append(want, "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown")
	if !reflect.DeepEqual(hooks, want) {
		t.Fatalf("hooks:\n got %v\nwant %v", hooks, want)
	}

	// Names come from the library.
	if fulmen.HookTrainEpochEnd.String() != "on_train_epoch_end" || fulmen.HookSetup.String() != "setup" ||
		fulmen.HookException.String() != "on_exception" || fulmen.Hook(99).String() != "hook(99)" {
		t.Fatal("hook names")
	}
}

// A panic or an error in a hook ends Fit with an error that wraps it;
// on_exception tells the callbacks; cancelling the context in a hook stops
// the run at the next callback.
func TestHookErrors(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 16, 8, 4)
	model := mlp(t)
	defer model.Close()
	var fail func(h fulmen.Hook, ctx *fulmen.HookContext) error
	var exception string
	var seen []fulmen.Hook
	m := trainModule(t, model, func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		if fail != nil {
			return fail(h, ctx)
		}
		return nil
	})
	defer m.Close()
	tr := quietTrainer(t, 3, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	watcher := fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		seen = append(seen, h)
		if h == fulmen.HookException {
			exception = must(ctx.Exception())
			// Its error is dropped: the run's cause stays the first failure.
			return errors.New("ignored")
		}
		return nil
	})
	ok(t, tr.AddCallback("watcher", watcher))
	ctx := context.Background()

	fail = func(h fulmen.Hook, c *fulmen.HookContext) error {
		if h == fulmen.HookTrainEpochEnd && must(c.Epoch()) == 1 {
			panic("boom in on_train_epoch_end")
		}
		return nil
	}
	live := fulmen.LiveHandles()
	err := tr.Fit(ctx, m, train, val)
	var pe *fulmen.PanicError
	if !errors.Is(err, fulmen.ErrCallback) || !errors.As(err, &pe) || pe.Value != "boom in on_train_epoch_end" {
		t.Fatalf("fit after a panic in a hook: %v", err)
	}
	if !strings.Contains(err.Error(), "on_train_epoch_end") || !strings.Contains(exception, "boom") {
		t.Fatalf("message %q, on_exception saw %q", err, exception)
	}
	if seen[len(seen)-1] != fulmen.HookException {
		t.Fatalf("last hook %v", seen[len(seen)-1])
	}
	if fulmen.LiveHandles() != live {
		t.Fatal("handles leaked by the failed hook")
	}
	if s := must(tr.GlobalStep()); s != 8 {
		t.Fatalf("global step %d after failing at the end of epoch 1", s)
	}

	// A Go error keeps its identity; a *fulmen.Error keeps its code.
	mine := errors.New("refused")
	fail = func(h fulmen.Hook, _ *fulmen.HookContext) error {
		if h == fulmen.HookTrainStart {
			return fmt.Errorf("wrapped: %w", mine)
		}
		return nil
	}
	if err := tr.Fit(ctx, m, train, val); !errors.Is(err, mine) || !errors.Is(err, fulmen.ErrCallback) {
		t.Fatalf("go error in a hook: %v", err)
	}
	fail = func(h fulmen.Hook, c *fulmen.HookContext) error {
		if h == fulmen.HookTrainStart {
			_, err := c.Metric("missing")
			return err
		}
		return nil
	}
	if err := tr.Fit(ctx, m, train, val); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("fulmen error in a hook: %v", err)
	}

	// Cancelling inside a hook stops the run at the next callback.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	after := 0
	fail = func(h fulmen.Hook, c *fulmen.HookContext) error {
		if h == fulmen.HookTrainBatchEnd && must(c.GlobalStep()) == 2 {
			cancel()
		} else if cctx.Err() != nil && h != fulmen.HookException {
			after++
		}
		return nil
	}
	exception = ""
	// A new trainer: the failed fits above left their progress on tr.
	fresh := quietTrainer(t, 3, "logger", "false", "enable_checkpointing", "false")
	defer fresh.Close()
	ok(t, fresh.AddCallback("watcher", watcher))
	err = fresh.Fit(cctx, m, train, val)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, fulmen.ErrCallback) {
		t.Fatalf("fit after a cancel in a hook: %v", err)
	}
	if after != 0 || must(fresh.GlobalStep()) != 2 || exception == "" {
		t.Fatalf("%d hooks ran after the cancel, global step %d, on_exception %q", after, must(fresh.GlobalStep()), exception)
	}

	// RequestStop ends training after the current step.
	fail = func(h fulmen.Hook, c *fulmen.HookContext) error {
		if h == fulmen.HookTrainBatchEnd && must(c.GlobalStep()) == 3 {
			return c.RequestStop()
		}
		return nil
	}
	stopping := quietTrainer(t, 3, "logger", "false", "enable_checkpointing", "false")
	defer stopping.Close()
	ok(t, stopping.Fit(ctx, m, train, val))
	if s := must(stopping.GlobalStep()); s != 3 {
		t.Fatalf("global step %d after a stop request at 3", s)
	}
	// A panic in a Callback (not the module) too.
	fail = nil
	pt := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false")
	defer pt.Close()
	ok(t, pt.AddCallback("panicky", fulmen.CallbackFunc(func(h fulmen.Hook, _ *fulmen.HookContext) error {
		if h == fulmen.HookTrainBatchEnd {
			panic(fmt.Errorf("callback %w", mine))
		}
		return nil
	})))
	if err := pt.Fit(ctx, m, train, val); !errors.As(err, &pe) || !errors.Is(err, mine) || !strings.Contains(err.Error(), "panicky.on_train_batch_end") {
		t.Fatalf("fit after a panic in a callback: %v", err)
	}
	if err := tr.AddCallback("", fulmen.CallbackFunc(func(fulmen.Hook, *fulmen.HookContext) error { return nil })); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("callback without a name: %v", err)
	}
	if err := tr.AddCallback("nil", nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil callback: %v", err)
	}
}

// stateful keeps a counter in checkpoints through on_save_checkpoint /
// on_load_checkpoint, and records the global step at on_train_start.
type stateful struct {
	saved, loaded string
	startStep     int64
	batches       int
}

func (s *stateful) OnHook(h fulmen.Hook, ctx *fulmen.HookContext) error {
	switch h {
	case fulmen.HookTrainStart:
		s.startStep = must(ctx.GlobalStep())
	case fulmen.HookTrainBatchEnd:
		s.batches++
	case fulmen.HookSaveCheckpoint:
		s.saved = fmt.Sprint(s.batches)
		return ctx.CheckpointSet("stateful.batches", s.saved)
	case fulmen.HookLoadCheckpoint:
		v, err := ctx.CheckpointGet("stateful.batches")
		if err != nil {
			return err
		}
		s.loaded = v
		if _, err := ctx.CheckpointGet("absent"); !errors.Is(err, fulmen.ErrInvalidArgument) {
			return fmt.Errorf("absent entry: %v", err)
		}
	}
	return nil
}

// ModelCheckpoint writes the best and last checkpoints; Fit with
// CkptPath resumes from one (the global step continues, callbacks get
// their entries back); Validate and Test load one.
func TestModelCheckpointResume(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 32, 16, 8) // 4 training batches per epoch
	model := mlp(t)
	defer model.Close()
	m := trainModule(t, model, nil)
	defer m.Close()
	ok(t, m.SetHparam("lr", "0.1"))
	ok(t, m.SetHparam("odd: key", "x\ny")) // any UTF-8 key and value is kept exactly
	if err := m.SetHparam("bad\xff", "x"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("hparam name not UTF-8: %v", err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	newTrainer := func(epochs int64) (*fulmen.Trainer, *stateful) {
		tr := quietTrainer(t, epochs, "default_root_dir", root)
		o := fulmen.DefaultModelCheckpointOptions()
		if o.SaveTopK != 1 || o.EveryNEpochs != 1 || !o.AutoInsertMetricName || o.SaveOnTrainEpochEnd != fulmen.CheckAuto {
			t.Fatalf("ModelCheckpoint defaults %+v", o)
		}
		o.Dirpath = dir
		o.Filename = "{epoch}-{val_acc:.3f}"
		o.Monitor = "val_loss"
		o.Mode = fulmen.ModeMin
		o.SaveLast = true
		ok(t, tr.AddModelCheckpoint(o))
		s := &stateful{}
		ok(t, tr.AddCallback("stateful", s))
		return tr, s
	}
	tr, s := newTrainer(2)
	defer tr.Close()
	if _, err := tr.BestModelPath(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("best path before fit: %v", err)
	}
	ok(t, tr.Fit(context.Background(), m, train, val))
	best, last := must(tr.BestModelPath()), must(tr.LastModelPath())
	for _, p := range []string{best, last} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("checkpoint missing: %v", err)
		}
		if filepath.Dir(p) != dir {
			t.Fatalf("checkpoint %s outside %s", p, dir)
		}
	}
	if filepath.Base(last) != "last.ckpt" || !strings.HasPrefix(filepath.Base(best), "epoch=") || !strings.Contains(best, "val_acc=") {
		t.Fatalf("best %s, last %s", best, last)
	}
	score := must(tr.BestModelScore())
	if vl := must(tr.CallbackMetric("val_loss")); math.IsNaN(score) || score > vl+1e-9 {
		t.Fatalf("best score %v, last val_loss %v", score, vl)
	}
	if s.saved == "" || s.startStep != 0 || must(tr.GlobalStep()) != 8 {
		t.Fatalf("saved %q, start step %d, global step %d", s.saved, s.startStep, must(tr.GlobalStep()))
	}
	// Keep a copy: the next fit replaces the best checkpoint (save_top_k 1).
	saved := filepath.Join(root, "saved.ckpt")
	ok(t, os.WriteFile(saved, must(os.ReadFile(best)), 0o644))
	must(tr.Validate(context.Background(), m, val, fulmen.CkptPath("best")))
	must(tr.Test(context.Background(), m, val, fulmen.CkptPath(best)))
	pred := must(tr.Predict(context.Background(), m, val, fulmen.CkptPath(last)))
	if sh := must(pred.Shape()); sh[0] != 16 {
		t.Fatalf("predictions %v", sh)
	}
	pred.Close()

	// A new trainer resumes from last.ckpt: 2 more epochs.
	tr2, s2 := newTrainer(4)
	defer tr2.Close()
	ok(t, tr2.Fit(context.Background(), m, train, val, fulmen.CkptPath("last")))
	if s2.startStep != 8 || must(tr2.GlobalStep()) != 16 || must(tr2.CurrentEpoch()) != 4 || s2.batches != 8 {
		t.Fatalf("resumed: start step %d, global step %d, epoch %d, %d batches",
			s2.startStep, must(tr2.GlobalStep()), must(tr2.CurrentEpoch()), s2.batches)
	}
	if s2.loaded != s.saved {
		t.Fatalf("callback entry: loaded %q, saved %q", s2.loaded, s.saved)
	}
	// From an explicit path, and from nothing.
	tr3, _ := newTrainer(3)
	defer tr3.Close()
	ok(t, tr3.Fit(context.Background(), m, train, val, fulmen.CkptPath(saved)))
	if s := must(tr3.GlobalStep()); s != 12 { // the best was epoch 0 or 1: 3 epochs in all
		t.Fatalf("resumed from %s: global step %d", best, s)
	}
	if err := tr3.Fit(context.Background(), m, train, val, fulmen.CkptPath(filepath.Join(root, "nope.ckpt"))); !errors.Is(err, fulmen.ErrIO) {
		t.Fatalf("missing checkpoint: %v", err)
	}
	fresh := quietTrainer(t, 1, "logger", "false")
	defer fresh.Close()
	if err := fresh.Fit(context.Background(), m, train, val, fulmen.CkptPath("best")); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("best before any fit: %v", err)
	}
}

// EarlyStopping stops a fit whose monitored metric stops improving; the LR
// monitor logs the learning rate; a Timer stops training.
func TestEarlyStoppingLRMonitorTimer(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 16, 8, 8)
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			return ctx.Log("flat", 1, 0, 0) // never improves
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	// On the CPU: the device stats checked below are the CPU's.
	tr := quietTrainer(t, 50, "logger", "false", "enable_checkpointing", "false", "accelerator", "cpu")
	defer tr.Close()
	o := fulmen.DefaultEarlyStoppingOptions("flat")
	if o.Patience != 3 || o.Mode != fulmen.ModeMin || !o.Strict || !o.CheckFinite || !math.IsNaN(o.StoppingThreshold) || !math.IsNaN(o.DivergenceThreshold) {
		t.Fatalf("EarlyStopping defaults %+v", o)
	}
	o.Patience = 2
	ok(t, tr.AddEarlyStopping(o))
	ok(t, tr.AddLRMonitorWith("epoch", true, false))
	off := false
	ok(t, tr.AddDeviceStatsMonitor(&off))
	ok(t, tr.AddThroughputMonitor(2, "|"))
	r := &recorder{}
	ok(t, tr.AddLogger(r))
	ok(t, tr.Fit(context.Background(), m, train, val))
	// The first check sets the best, two more without improvement stop.
	if e := must(tr.CurrentEpoch()); e != 3 {
		t.Fatalf("early stopping after %d epochs, want 3", e)
	}
	// The LR monitor logs to the loggers, with the momentum when asked.
	lrs := 0
	for _, m := range r.metrics {
		if lr, ok := m["lr-SGD"]; ok {
			lrs++
			if math.Abs(lr-0.1) > 1e-9 {
				t.Fatalf("lr-SGD %v", lr)
			}
			if mom, ok := m["lr-SGD-momentum"]; !ok || mom != 0 {
				t.Fatalf("lr-SGD-momentum %v %v in %v", mom, ok, m)
			}
			if _, ok := m["lr-SGD-weight_decay"]; ok {
				t.Fatalf("weight decay logged unasked: %v", m)
			}
		}
	}
	for _, m := range r.metrics {
		for k := range m {
			if strings.HasPrefix(k, "DeviceStatsMonitor.") {
				t.Fatalf("cpu_stats=false logged %s on the CPU", k)
			}
		}
	}
	rates := 0
	for _, m := range r.metrics {
		if _, ok := m["train|device|batches_per_sec"]; ok {
			rates++
		}
	}
	if rates == 0 {
		t.Fatal("no train|device|batches_per_sec logged")
	}
	if lrs != 3 {
		t.Fatalf("lr-SGD logged %d times in 3 epochs: %v", lrs, r.metrics)
	}
	if err := tr.AddEarlyStopping(fulmen.EarlyStoppingOptions{}); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("early stopping without a monitor: %v", err)
	}
	if err := tr.AddLRMonitor("sometimes"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("bad lr monitor interval: %v", err)
	}

	timed := quietTrainer(t, 50, "logger", "false", "enable_checkpointing", "false")
	defer timed.Close()
	ok(t, timed.AddTimer("0", "step"))
	ok(t, timed.Fit(context.Background(), m, train, val))
	if s := must(timed.GlobalStep()); s > 2 {
		t.Fatalf("a zero timer let %d steps run", s)
	}
	if err := timed.AddTimer("soon", ""); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("bad duration: %v", err)
	}
	ok(t, timed.AddTimer("", "epoch"))
}

// recorder is a Go Logger.
type recorder struct {
	metrics  []map[string]float64
	steps    []int64
	hparams  map[string]string
	statuses []string
	fail     error
}

func (r *recorder) LogMetrics(m map[string]float64, epoch, step int64) error {
	r.metrics = append(r.metrics, m)
	r.steps = append(r.steps, step)
	return r.fail
}

func (r *recorder) LogHyperparams(p map[string]string) error {
	r.hparams = p
	return nil
}

func (r *recorder) Finalize(status string) error {
	r.statuses = append(r.statuses, status)
	return nil
}

func (r *recorder) has(name string) bool {
	for _, m := range r.metrics {
		if _, ok := m[name]; ok {
			return true
		}
	}
	return false
}

// A Go Logger receives the metrics, the hyperparameters and the end of
// every run; its error ends the run.
func TestLogger(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 16, 8, 4)
	model := mlp(t)
	defer model.Close()
	m := trainModule(t, model, nil)
	defer m.Close()
	ok(t, m.SetHparam("lr", "0.1"))
	ok(t, m.SetHparam("width", "16"))
	tr := quietTrainer(t, 2, "log_every_n_steps", "1", "enable_checkpointing", "false")
	defer tr.Close()
	r := &recorder{}
	ok(t, tr.AddLogger(r))
	ok(t, tr.Fit(context.Background(), m, train, val))
	if !reflect.DeepEqual(r.hparams, map[string]string{"lr": "0.1", "width": "16"}) {
		t.Fatalf("hparams %v", r.hparams)
	}
	for _, name := range []string{"train_loss_step", "train_loss_epoch", "val_loss", "val_acc"} {
		if !r.has(name) {
			t.Fatalf("no %s in %v", name, r.metrics)
		}
	}
	if len(r.steps) < 8 || r.steps[0] != 0 || !reflect.DeepEqual(r.statuses, []string{"success"}) {
		t.Fatalf("steps %v, statuses %v", r.steps, r.statuses)
	}
	// The CSV and TensorBoard loggers ran too.
	dir := must(tr.LogDir())
	if _, err := os.Stat(filepath.Join(dir, "metrics.csv")); err != nil {
		t.Fatal(err)
	}
	if ev, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*")); len(ev) == 0 {
		t.Fatalf("no TensorBoard events in %s", dir)
	}
	n := len(r.metrics)
	must(tr.Test(context.Background(), m, val))
	if len(r.metrics) == n {
		t.Fatal("test metrics did not reach the logger")
	}

	// A failing logger ends the run; finalize says so.
	r.fail = errors.New("disk full")
	r.statuses = nil
	ok(t, tr.SetMaxEpochs(3)) // one more epoch: the last fit's are done
	err := tr.Fit(context.Background(), m, train, val)
	if !errors.Is(err, r.fail) || !errors.Is(err, fulmen.ErrCallback) {
		t.Fatalf("fit with a failing logger: %v", err)
	}
	if !reflect.DeepEqual(r.statuses, []string{"failed"}) {
		t.Fatalf("statuses %v", r.statuses)
	}
	if err := tr.AddLogger(nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil logger: %v", err)
	}
}

// The model summary is Lightning's table.
func TestModelSummary(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	s := must(model.Summary(1))
	for _, want := range []string{"Total params", "Trainable params", "Linear", "Tanh", "82"} {
		if !strings.Contains(s, want) {
			t.Fatalf("summary lacks %q:\n%s", want, s)
		}
	}
	if _, err := model.Summary(-1); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("negative depth: %v", err)
	}
	var closed *fulmen.Model
	if _, err := closed.Summary(1); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil model: %v", err)
	}
}

// SetFloat writes a float the library reads as a fraction (1 = all
// batches), SetInt a count; val_check_interval 0.5 validates twice an epoch.
func TestFloatOptions(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 32, 8, 4) // 8 training batches, 2 validation batches
	model := mlp(t)
	defer model.Close()
	var trainBatches, valRuns int
	m := trainModule(t, model, func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		switch h {
		case fulmen.HookTrainBatchStart:
			trainBatches++
		case fulmen.HookValidationStart:
			valRuns++
		}
		return nil
	})
	defer m.Close()
	run := func(set func(o *fulmen.TrainerOptions) error) (int, int) {
		t.Helper()
		o := must(fulmen.NewTrainerOptions())
		defer o.Close()
		for k, v := range map[string]string{"max_epochs": "1", "logger": "false", "enable_checkpointing": "false",
			"enable_progress_bar": "false", "enable_model_summary": "false", "num_sanity_val_steps": "0"} {
			ok(t, o.Set(k, v))
		}
		ok(t, set(o))
		tr := must(fulmen.NewTrainer(o))
		defer tr.Close()
		trainBatches, valRuns = 0, 0
		ok(t, tr.Fit(context.Background(), m, train, val))
		return trainBatches, valRuns
	}
	for _, c := range []struct {
		name       string
		set        func(o *fulmen.TrainerOptions) error
		batches, v int
	}{
		{"float 1", func(o *fulmen.TrainerOptions) error { return o.SetFloat("limit_train_batches", 1) }, 8, 1},
		{"int 1", func(o *fulmen.TrainerOptions) error { return o.SetInt("limit_train_batches", 1) }, 1, 1},
		{"float 0.25", func(o *fulmen.TrainerOptions) error { return o.SetFloat("limit_train_batches", 0.25) }, 2, 1},
		{"text 1.0", func(o *fulmen.TrainerOptions) error { return o.Set("limit_train_batches", "1.0") }, 8, 1},
		{"val_check_interval 0.5", func(o *fulmen.TrainerOptions) error { return o.SetFloat("val_check_interval", 0.5) }, 8, 2},
		{"val_check_interval 2", func(o *fulmen.TrainerOptions) error { return o.SetInt("val_check_interval", 2) }, 8, 4},
		{"gradient_clip_val", func(o *fulmen.TrainerOptions) error { return o.SetFloat("gradient_clip_val", 1e-3) }, 8, 1},
	} {
		if b, v := run(c.set); b != c.batches || v != c.v {
			t.Errorf("%s: %d training batches, %d validation runs; want %d, %d", c.name, b, v, c.batches, c.v)
		}
	}
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	if err := o.SetFloat("limit_train_batches", 2); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a fraction above 1: %v", err)
	}
}

// Dataset.Get fetches batches of more tensors than its first guess.
func TestDatasetGetManyTensors(t *testing.T) {
	noLeaks(t)
	calls := 0
	ds := must(fulmen.NewSourceDataset(fulmen.DataSource{
		Len: func() (int, error) { return 4, nil },
		GetBatch: func(idx []int64, b *fulmen.BatchBuilder) error {
			calls++
			for i := 0; i < 11; i++ {
				x, err := fulmen.Full(float64(i), fulmen.Float32, int64(len(idx)))
				if err != nil {
					return err
				}
				if err := b.Push(x); err != nil {
					return err
				}
			}
			return nil
		},
	}))
	defer ds.Close()
	ts := must(ds.Get([]int64{1, 2}))
	if len(ts) != 11 || calls != 2 {
		t.Fatalf("%d tensors in %d calls", len(ts), calls)
	}
	for i, x := range ts {
		if v := must(fulmen.ToSlice[float32](x)); len(v) != 2 || v[0] != float32(i) {
			t.Fatalf("tensor %d: %v", i, v)
		}
		x.Close()
	}
}

// A hook saves checkpoints itself (Lightning's trainer.save_checkpoint);
// one made in on_save_checkpoint is refused; Fit resumes from the hook's
// file.
func TestHookSavesCheckpoints(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 32, 16, 8) // 4 training batches per epoch
	model := mlp(t)
	defer model.Close()
	m := trainModule(t, model, nil)
	defer m.Close()
	root := t.TempDir()
	refused := 0
	tr := quietTrainer(t, 2, "default_root_dir", root, "logger", "false")
	ok(t, tr.AddCallback("saver", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		switch h {
		case fulmen.HookTrainEpochEnd:
			epoch, err := ctx.Epoch()
			if err != nil {
				return err
			}
			return ctx.SaveCheckpoint(filepath.Join(root, fmt.Sprintf("epoch-%d.ckpt", epoch)), false)
		case fulmen.HookSaveCheckpoint:
			if err := ctx.SaveCheckpoint(filepath.Join(root, "never.ckpt"), false); errors.Is(err, fulmen.ErrInvalidState) {
				refused++
			}
		}
		return nil
	})))
	ok(t, tr.Fit(context.Background(), m, train, nil))
	tr.Close()
	for _, name := range []string{"epoch-0.ckpt", "epoch-1.ckpt"} {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			t.Fatalf("the hook's checkpoint %s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "never.ckpt")); err == nil || refused < 2 {
		t.Fatalf("a save in on_save_checkpoint went through (refused %d times)", refused)
	}
	second := quietTrainer(t, 2, "default_root_dir", root, "logger", "false")
	defer second.Close()
	ok(t, second.Fit(context.Background(), m, train, nil, fulmen.CkptPath(filepath.Join(root, "epoch-0.ckpt"))))
	if step := must(second.GlobalStep()); step != 8 {
		t.Fatalf("resumed after epoch 0 of 4 steps: global step %d, want 8", step)
	}
}

// An epoch-end hook logs a metric ModelCheckpoint monitors (Lightning's
// self.log in on_train_epoch_end); hooks where Lightning forbids logging
// (on_fit_start) are refused.
func TestHookLogDrivesModelCheckpoint(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 32, 16, 8)
	model := mlp(t)
	defer model.Close()
	m := trainModule(t, model, nil)
	defer m.Close()
	tr := quietTrainer(t, 3, "logger", "false")
	defer tr.Close()
	scores := []float64{0.2, 0.6, 0.4}
	refused := 0
	ok(t, tr.AddCallback("scorer", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		switch h {
		case fulmen.HookTrainEpochEnd:
			epoch, err := ctx.Epoch()
			if err != nil {
				return err
			}
			return ctx.Log("f1", scores[epoch], 0)
		case fulmen.HookFitStart:
			if err := ctx.Log("f1", 1, 0); errors.Is(err, fulmen.ErrInvalidState) {
				refused++
			}
		}
		return nil
	})))
	o := fulmen.DefaultModelCheckpointOptions()
	o.Monitor = "f1"
	o.Mode = fulmen.ModeMax
	ok(t, tr.AddModelCheckpoint(o))
	ok(t, tr.Fit(context.Background(), m, train, nil))
	if best := must(tr.BestModelScore()); best != 0.6 {
		t.Fatalf("best f1 %v, want 0.6", best)
	}
	if last := must(tr.CallbackMetric("f1")); last != 0.4 || refused == 0 {
		t.Fatalf("last f1 %v (want 0.4), refusals in on_fit_start %d", last, refused)
	}
}

// ConfigureOptimizers reads the run's length (Lightning's
// estimated_stepping_batches) for a OneCycleLR that ends with the fit.
func TestEstimatedSteppingBatches(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 32, 16, 8) // 4 batches an epoch
	model := mlp(t)
	defer model.Close()
	var seen int64
	var known bool
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			steps, ok, err := cfg.EstimatedSteppingBatches()
			if err != nil {
				return err
			}
			seen, known = steps, ok
			opt, err := fulmen.NewSGD(model, nil, fulmen.DefaultSGDOptions())
			if err != nil {
				return err
			}
			sched, err := fulmen.NewOneCycleLR(opt, fulmen.DefaultOneCycleOptions(0.1, steps))
			if err != nil {
				opt.Close()
				return err
			}
			return cfg.AddWithScheduler(opt, sched, fulmen.IntervalStep, 1, "")
		},
	}))
	defer m.Close()
	tr := quietTrainer(t, 3, "logger", "false", "accumulate_grad_batches", "3")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, train, nil))
	if !known || seen != 6 { // ceil(4 / 3) * 3 epochs; OneCycleLR would fail past its last step
		t.Fatalf("estimated stepping batches %d (known %v), want 6", seen, known)
	}
}

// SkipRestOfEpoch from the module's on_train_batch_start is Lightning's
// `return -1`: the batch is not trained on, the epoch ends there and the
// next one runs in full; other hooks and Callbacks are refused.
func TestSkipRestOfEpoch(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	train, val := loaders(t, 32, 8, 8) // 4 batches per epoch
	var refused []error
	starts := 0
	m := trainModule(t, model, func(h fulmen.Hook, c *fulmen.HookContext) error {
		switch h {
		case fulmen.HookTrainBatchStart:
			starts++
			if must(c.Epoch()) == 0 && must(c.BatchIdx()) == 1 {
				return c.SkipRestOfEpoch()
			}
		case fulmen.HookTrainEpochEnd:
			refused = append(refused, c.SkipRestOfEpoch())
		}
		return nil
	})
	defer m.Close()
	tr := quietTrainer(t, 2, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	var byCallback []error
	ok(t, tr.AddCallback("skipper", fulmen.CallbackFunc(func(h fulmen.Hook, c *fulmen.HookContext) error {
		if h == fulmen.HookTrainBatchStart {
			byCallback = append(byCallback, c.SkipRestOfEpoch())
		}
		return nil
	})))
	ok(t, tr.Fit(context.Background(), m, train, val))
	// Epoch 0 trains batch 0 and stops at batch 1; epoch 1 trains all 4.
	if gs := must(tr.GlobalStep()); gs != 5 || starts != 6 {
		t.Fatalf("global step %d after %d batch starts, want 5 after 6", gs, starts)
	}
	if len(refused) != 2 || len(byCallback) != 6 {
		t.Fatalf("%d refusals in on_train_epoch_end, %d in the callback: want 2 and 6", len(refused), len(byCallback))
	}
	for _, err := range append(refused, byCallback...) {
		if !errors.Is(err, fulmen.ErrInvalidState) {
			t.Fatalf("skip outside the module's on_train_batch_start: %v", err)
		}
	}
}

package fulmen_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// stepModule is a module training model whose training step first runs
// before(step), counting steps from 1; *steps is the number of steps run.
func stepModule(t *testing.T, model *fulmen.Model, before func(step int) error) (m *fulmen.LightningModule, steps *int) {
	t.Helper()
	steps = new(int)
	m = must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			*steps++
			if err := before(*steps); err != nil {
				return nil, err
			}
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	return m, steps
}

// closedWrappers checks that the closed trainer, module and loader refuse
// new calls with the closed-wrapper error, and that closing again is a
// no-op.
func closedWrappers(t *testing.T, tr *fulmen.Trainer, m *fulmen.LightningModule, l *fulmen.Loader) {
	t.Helper()
	if _, err := tr.GlobalStep(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("GlobalStep on a closed trainer: %v", err)
	}
	if err := m.SetHparam("k", "v"); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("SetHparam on a closed module: %v", err)
	}
	if _, err := l.Len(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("Len on a closed loader: %v", err)
	}
	if err := tr.Fit(context.Background(), m, l, nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("Fit with closed objects: %v", err)
	}
	ok(t, tr.Close())
	ok(t, m.Close())
	ok(t, l.Close())
}

// Closing the trainer, the module and the training loader from another
// goroutine while Fit waits inside a training step is safe: the library
// defers the frees until the fit returns, the fit runs to its end on the
// objects it started with, and the wrappers are then closed.
func TestCloseDuringFitFromGoroutine(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 32, 8, 8) // 4 training batches per epoch
	model := mlp(t)
	defer model.Close()
	inStep, closed := make(chan struct{}), make(chan struct{})
	m, steps := stepModule(t, model, func(step int) error {
		if step != 3 {
			return nil
		}
		close(inStep)
		select {
		case <-closed:
			return nil
		case <-time.After(time.Minute):
			return errors.New("the closing goroutine did not finish")
		}
	})
	defer m.Close()
	tr := quietTrainer(t, 2, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-inStep
		tr.Close()
		m.Close()
		train.Close()
		close(closed)
	}()
	live := fulmen.LiveHandles()
	err := tr.Fit(context.Background(), m, train, nil)
	select {
	case <-inStep:
	default:
		close(inStep) // Fit failed before step 3: let the goroutine end
	}
	wg.Wait()
	ok(t, err)
	if *steps != 8 {
		t.Fatalf("%d training steps ran, want 8", *steps)
	}
	// The deferred frees ran when the fit returned.
	if got := fulmen.LiveHandles(); got != live-3 {
		t.Errorf("live handles %d after the fit, want %d (3 freed)", got, live-3)
	}
	closedWrappers(t, tr, m, train)
}

// Closing the trainer, the module and the training loader inside a
// training step of the fit that uses them is safe too; meanwhile the
// module is in use by the fit, so changing it is refused.
func TestCloseInsideStep(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 32, 8, 8)
	model := mlp(t)
	defer model.Close()
	var tr *fulmen.Trainer
	var m *fulmen.LightningModule
	m, steps := stepModule(t, model, func(step int) error {
		switch step {
		case 1:
			if err := m.SetHparam("k", "v"); !errors.Is(err, fulmen.ErrInvalidState) {
				return fmt.Errorf("SetHparam on the module of the running fit: %v", err)
			}
		case 2:
			ok(t, tr.Close())
			ok(t, m.Close())
			ok(t, train.Close())
		}
		return nil
	})
	defer m.Close()
	tr = quietTrainer(t, 2, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, train, nil))
	if *steps != 8 {
		t.Fatalf("%d training steps ran, want 8", *steps)
	}
	closedWrappers(t, tr, m, train)
}

// Close is exactly-once even when goroutines race to close a wrapper while
// another one uses it; a use that loses the race gets an error, never a
// crash.
func TestConcurrentClose(t *testing.T) {
	noLeaks(t)
	for round := 0; round < 20; round++ {
		o := must(fulmen.NewTrainerOptions())
		x := must(fulmen.Zeros(fulmen.Float32, 4))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := o.SetInt("max_epochs", int64(i+1)); err != nil &&
					!errors.Is(err, fulmen.ErrNullArgument) && !errors.Is(err, fulmen.ErrInvalidHandle) {
					t.Errorf("Set racing with Close: %v", err)
				}
				if _, err := x.Shape(); err != nil &&
					!errors.Is(err, fulmen.ErrNullArgument) && !errors.Is(err, fulmen.ErrInvalidHandle) {
					t.Errorf("Shape racing with Close: %v", err)
				}
			}
		}()
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok(t, o.Close())
				ok(t, x.Close())
			}()
		}
		wg.Wait()
		if !x.Closed() {
			t.Fatal("tensor not closed")
		}
	}
}

// A data source whose GetBatch calls Get on its own dataset gets
// ErrInvalidState from that inner call instead of a deadlock, both from
// Dataset.Get and inside a fit.
func TestDataSourceReentrant(t *testing.T) {
	noLeaks(t)
	var ds *fulmen.Dataset
	var inner []error
	src := blobSource(16, 4)
	get := src.GetBatch
	src.GetBatch = func(idx []int64, b *fulmen.BatchBuilder) error {
		_, err := ds.Get(idx)
		inner = append(inner, err)
		return get(idx, b)
	}
	ds = must(fulmen.NewSourceDataset(src))
	defer ds.Close()
	batch := must(ds.Get([]int64{0, 1, 2}))
	if len(batch) != 2 {
		t.Fatalf("batch of %d tensors", len(batch))
	}
	for _, x := range batch {
		x.Close()
	}
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	m, steps := stepModule(t, model, func(int) error { return nil })
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, l, nil))
	if *steps != 2 || len(inner) < 3 {
		t.Fatalf("%d steps, %d GetBatch calls", *steps, len(inner))
	}
	for i, err := range inner {
		if !errors.Is(err, fulmen.ErrInvalidState) {
			t.Errorf("GetBatch call %d: Get on its own dataset: %v", i, err)
		}
	}
}

// A signal during a fit (trainer option handle_signals, on by default)
// stops the run at its next hook: on_exception runs, the loggers are
// finalized, Fit returns ErrInterrupted and the process lives on. Go's
// signal handling is back afterwards.
func TestSignalDuringFit(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			noLeaks(t)
			train, _ := loaders(t, 32, 8, 8)
			model := mlp(t)
			defer model.Close()
			exceptions := 0
			m, steps := stepModule(t, model, func(step int) error {
				if step == 3 {
					return syscall.Kill(os.Getpid(), sig)
				}
				return nil
			})
			defer m.Close()
			tr := quietTrainer(t, 10, "logger", "false", "enable_checkpointing", "false")
			defer tr.Close()
			ok(t, tr.AddCallback("exceptions", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
				if h == fulmen.HookException {
					exceptions++
				}
				return nil
			})))
			rec := &recorder{}
			ok(t, tr.AddLogger(rec))
			err := tr.Fit(context.Background(), m, train, nil)
			if !errors.Is(err, fulmen.ErrInterrupted) {
				t.Fatalf("fit with a %v: %v", sig, err)
			}
			if *steps < 3 || *steps >= 40 {
				t.Fatalf("%d steps ran", *steps)
			}
			if exceptions != 1 || len(rec.statuses) != 1 || rec.statuses[0] != "failed" {
				t.Fatalf("on_exception ran %d times, logger statuses %v", exceptions, rec.statuses)
			}
			// The trainer works on.
			ok(t, tr.Fit(context.Background(), m, train, nil))

			// Go handles the signal again.
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, sig)
			defer signal.Stop(ch)
			ok(t, syscall.Kill(os.Getpid(), sig))
			select {
			case got := <-ch:
				if got != sig {
					t.Fatalf("received %v", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%v after the fit did not reach signal.Notify", sig)
			}
		})
	}
}

// With handle_signals false the library leaves signals to Go: a SIGINT
// during the fit reaches signal.Notify and the fit runs to its end.
func TestSignalsNotHandled(t *testing.T) {
	noLeaks(t)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT)
	defer signal.Stop(ch)
	train, _ := loaders(t, 32, 8, 8)
	model := mlp(t)
	defer model.Close()
	m, steps := stepModule(t, model, func(step int) error {
		if step == 2 {
			return syscall.Kill(os.Getpid(), syscall.SIGINT)
		}
		return nil
	})
	defer m.Close()
	tr := quietTrainer(t, 2, "logger", "false", "enable_checkpointing", "false", "handle_signals", "false")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, train, nil))
	if *steps != 8 {
		t.Fatalf("%d training steps ran, want 8", *steps)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the SIGINT did not reach signal.Notify")
	}
}

//go:build linux

package fulmen_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// A callback that calls runtime.Goexit (t.FailNow, t.Fatal and t.SkipNow
// do) ends only the goroutine running its body, which is attached to the
// library's callback: the call that ran the callback returns a
// CodeCallback error naming it, the tensors the callback made are freed
// with its scope, and the objects the call used are released (every case
// checks the live handles after closing them). A nested case names the
// innermost callback: the host forward, whose error fails the step.
func TestCallbackGoexit(t *testing.T) {
	cases := []struct {
		name     string
		callback string // the trampoline the error names
		setup    func(*testing.T, *goexiter) (call func() error, closeAll func())
	}{
		{"TrainingStep", "TrainingStep", func(t *testing.T, g *goexiter) (func() error, func()) {
			return goexitFit(t, fulmen.ModuleFuncs{
				TrainingStep: func(*fulmen.StepContext, *fulmen.Batch) (*fulmen.Tensor, error) {
					g.exit()
					return nil, nil
				},
			}, nil)
		}},
		{"Hook", "CallbackHook", func(t *testing.T, g *goexiter) (func() error, func()) {
			return goexitFit(t, fulmen.ModuleFuncs{}, fulmen.CallbackFunc(func(h fulmen.Hook, _ *fulmen.HookContext) error {
				if h == fulmen.HookTrainBatchStart {
					g.exit()
				}
				return nil
			}))
		}},
		{"DataSource", "SourceGetBatch", func(t *testing.T, g *goexiter) (func() error, func()) {
			ds := must(fulmen.NewSourceDataset(fulmen.DataSource{
				Len: func() (int, error) { return 4, nil },
				GetBatch: func([]int64, *fulmen.BatchBuilder) error {
					g.exit()
					return nil
				},
			}))
			get := func() error {
				batch, err := ds.Get([]int64{0, 1})
				for _, x := range batch {
					x.Close()
				}
				return err
			}
			return get, func() { ds.Close() }
		}},
		{"NestedHostForward", "HostForward", func(t *testing.T, g *goexiter) (func() error, func()) {
			host := must(fulmen.NewHostModule(1, func(*fulmen.HostCall, []*fulmen.Tensor) ([]*fulmen.Tensor, error) {
				g.exit()
				return nil, nil
			}))
			call, closeAll := goexitFit(t, fulmen.ModuleFuncs{
				TrainingStep: func(_ *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
					x, err := b.Get(0)
					if err != nil {
						return nil, err
					}
					return host.Forward(x)
				},
			}, nil)
			return call, func() { closeAll(); host.Close() }
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noLeaks(t)
			g := &goexiter{tensors: 20}
			call, closeAll := c.setup(t, g)
			err := g.run(t, call)
			closeAll()
			var fe *fulmen.Error
			if !errors.As(err, &fe) || fe.Code != fulmen.CodeCallback {
				t.Fatalf("the call returned %v, want a CodeCallback *fulmen.Error", err)
			}
			want := "the Go callback " + c.callback + " called runtime.Goexit"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error %q does not say %q", err, want)
			}
		})
	}
}

// goexitFit returns a one-epoch fit of funcs (a cross-entropy step and SGD
// where funcs has none) with cb added, and a function closing its objects.
func goexitFit(t *testing.T, funcs fulmen.ModuleFuncs, cb fulmen.Callback) (func() error, func()) {
	ds := blobDataset(t, 32, 11)
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	model := mlp(t)
	if funcs.TrainingStep == nil {
		funcs.TrainingStep = func(_ *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			return loss, err
		}
	}
	funcs.ConfigureOptimizers = sgd(model, 0.1)
	m := must(fulmen.NewLightningModule(model, funcs))
	tr := quietTrainer(t, 1, "num_sanity_val_steps", "0", "logger", "false", "enable_checkpointing", "false")
	if cb != nil {
		ok(t, tr.AddCallback("goexit", cb))
	}
	fit := func() error { return tr.Fit(context.Background(), m, l, nil) }
	return fit, func() {
		tr.Close()
		m.Close()
		model.Close()
		l.Close()
		ds.Close()
	}
}

// goexiter is a callback body that makes some tensors and calls
// runtime.Goexit.
type goexiter struct {
	tensors  int              // tensors to make first
	made     []*fulmen.Tensor // the tensors it made
	unscoped int              // how many of them were not scope-owned
	exited   bool             // it ran up to runtime.Goexit
}

func (g *goexiter) exit() {
	for i := 0; i < g.tensors; i++ {
		x := must(fulmen.Zeros(fulmen.Float32, 4))
		if !x.Scoped() {
			g.unscoped++
		}
		g.made = append(g.made, x)
	}
	g.exited = true
	runtime.Goexit()
}

// run makes call on a new goroutine and returns its error, after checking
// that it returned (before, a Goexit unwound through the library and the
// call never returned: that goroutine ended instead), that the callback
// ran, and that the tensors it made were scope-owned and are freed.
func (g *goexiter) run(t *testing.T, call func() error) error {
	t.Helper()
	done := make(chan struct{})
	returned := false
	var err error
	go func() {
		defer close(done)
		err = call()
		returned = true
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the call has not returned after 2 minutes")
	}
	if !returned {
		t.Fatal("the call never returned: runtime.Goexit ended the goroutine that made it")
	}
	if !g.exited {
		t.Fatal("the callback did not run")
	}
	if g.unscoped != 0 {
		t.Errorf("%d tensors made in the callback were not scope-owned", g.unscoped)
	}
	for _, x := range g.made {
		if !x.Closed() {
			t.Error("a tensor the callback made is still open after the call returned")
		}
	}
	return err
}

//go:build linux

package fulmen_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// A callback that calls runtime.Goexit (t.FailNow, t.Fatal and t.SkipNow
// do) cannot make the call running it return: Goexit cannot be stopped and
// unwinds through the library's frames. The binding frees the tensors the
// callback made, ends the callback's thread (its C state is mid-call) and
// says so on stderr once, naming the innermost callback. The objects of an
// abandoned call stay in use for good, so the cases run in a child
// process, which skips TestMain's final handle count.
func TestCallbackGoexit(t *testing.T) {
	if os.Getenv(goexitChildEnv) == "1" {
		goexitCases(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCallbackGoexit$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), goexitChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCallbackGoexit") {
		t.Fatalf("the child process failed (%v):\n%s", err, out)
	}
	// Every case runs twice. The nested case names its host forward only,
	// not the training step it runs in.
	for name, want := range map[string]int{"TrainingStep": 2, "CallbackHook": 2, "SourceGetBatch": 2, "HostForward": 2} {
		line := "fulmen: runtime.Goexit (t.FailNow, t.Fatal, t.SkipNow) ended the Go callback " + name + ":"
		if n := strings.Count(string(out), line); n != want {
			t.Errorf("%d lines %q in the child's output, want %d:\n%s", n, line, want, out)
		}
	}
}

// goexitCases are the child's cases: a step, a hook, a data source and a
// host forward nested in a step, each ending by runtime.Goexit.
func goexitCases(t *testing.T) {
	t.Run("TrainingStep", func(t *testing.T) {
		goexitLeaves(t, func(g *goexiter) (func() error, func()) {
			return goexitFit(t, fulmen.ModuleFuncs{
				TrainingStep: func(*fulmen.StepContext, *fulmen.Batch) (*fulmen.Tensor, error) {
					g.exit()
					return nil, nil
				},
			}, nil)
		})
	})
	t.Run("Hook", func(t *testing.T) {
		goexitLeaves(t, func(g *goexiter) (func() error, func()) {
			return goexitFit(t, fulmen.ModuleFuncs{}, fulmen.CallbackFunc(func(h fulmen.Hook, _ *fulmen.HookContext) error {
				if h == fulmen.HookTrainBatchStart {
					g.exit()
				}
				return nil
			}))
		})
	})
	t.Run("DataSource", func(t *testing.T) {
		goexitLeaves(t, func(g *goexiter) (func() error, func()) {
			ds := must(fulmen.NewSourceDataset(fulmen.DataSource{
				Len: func() (int, error) { return 4, nil },
				GetBatch: func([]int64, *fulmen.BatchBuilder) error {
					g.exit()
					return nil
				},
			}))
			get := func() error {
				_, err := ds.Get([]int64{0, 1})
				return err
			}
			return get, func() { ds.Close() }
		})
	})
	t.Run("NestedHostForward", func(t *testing.T) {
		goexitLeaves(t, func(g *goexiter) (func() error, func()) {
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
		})
	})
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

// goexiter is a callback body that makes some tensors, notes its thread and
// calls runtime.Goexit.
type goexiter struct {
	tensors  int              // tensors to make first
	made     []*fulmen.Tensor // the tensors it made
	unscoped int              // how many of them were not scope-owned
	tid      int              // the kernel id of the callback's thread
}

func (g *goexiter) exit() {
	for i := 0; i < g.tensors; i++ {
		x := must(fulmen.Zeros(fulmen.Float32, 4))
		if !x.Scoped() {
			g.unscoped++
		}
		g.made = append(g.made, x)
	}
	g.tid = syscall.Gettid()
	runtime.Goexit()
}

// goexitLeaves runs the call that setup makes twice, its callback making
// no tensor, then 20, before runtime.Goexit, and checks that both runs
// leave the same number of live handles: the 20 were freed.
func goexitLeaves(t *testing.T, setup func(*goexiter) (call func() error, closeAll func())) {
	var left [2]int
	for i, n := range []int{0, 20} {
		g := &goexiter{tensors: n}
		call, closeAll := setup(g)
		before := fulmen.LiveHandles()
		g.run(t, call)
		closeAll()
		left[i] = fulmen.LiveHandles() - before
	}
	t.Logf("the abandoned call leaves %d handles", left[0])
	if left[1] != left[0] {
		t.Errorf("with 20 tensors made in the callback %d handles are left, without them %d", left[1], left[0])
	}
}

// run makes call on a new goroutine and checks that the callback ended it
// (call never returns), that the callback's tensors are closed and that
// its thread ends.
func (g *goexiter) run(t *testing.T, call func() error) {
	t.Helper()
	done := make(chan struct{})
	returned := false
	go func() {
		defer close(done)
		err := call()
		returned = true
		t.Errorf("the call returned (%v)", err)
	}()
	<-done
	if returned {
		return
	}
	if g.tid == 0 {
		t.Fatal("the callback did not run")
	}
	for _, x := range g.made {
		if !x.Closed() {
			t.Error("a tensor of the abandoned callback is open")
		}
	}
	if g.unscoped != 0 {
		t.Errorf("%d tensors made in the callback were not scope-owned", g.unscoped)
	}
	if g.tid == os.Getpid() {
		t.Log("the callback ran on the main thread, which Go never ends: not checked")
		return
	}
	task := fmt.Sprintf("/proc/self/task/%d", g.tid)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); errors.Is(err, fs.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread of the abandoned callback (%d) still runs", g.tid)
		}
	}
}

package fulmen_test

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// TestMain fails the run when any fulmen handle is still alive at the end:
// every test closes what it creates.
func TestMain(m *testing.M) {
	code := m.Run()
	runtime.GC()
	if n := fulmen.LiveHandles(); n != 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d fulmen handles alive after the tests\n", n)
		code = 1
	}
	os.Exit(code)
}

// noLeaks checks that the test leaves as many live handles as it found.
func noLeaks(t *testing.T) {
	t.Helper()
	before := fulmen.LiveHandles()
	t.Cleanup(func() {
		if after := fulmen.LiveHandles(); after != before {
			t.Errorf("live handles: %d before, %d after", before, after)
		}
	})
}

// must returns v, panicking (failing the test) on an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ok fails the test on an error.
func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// blobs are two Gaussian blobs in 2-D: class 0 around (-2, -2), class 1
// around (2, 2).
func blobs(n int, seed int64) ([]float32, []int64) {
	r := rand.New(rand.NewSource(seed))
	x := make([]float32, 2*n)
	y := make([]int64, n)
	for i := 0; i < n; i++ {
		y[i] = int64(i % 2)
		c := float32(-2)
		if y[i] == 1 {
			c = 2
		}
		x[2*i] = c + float32(r.NormFloat64())
		x[2*i+1] = c + float32(r.NormFloat64())
	}
	return x, y
}

// blobDataset is a tensor dataset of blobs (tensors closed; the dataset
// shares their storage).
func blobDataset(t *testing.T, n int, seed int64) *fulmen.Dataset {
	t.Helper()
	x, y := blobs(n, seed)
	xt := must(fulmen.FromSlice(x, int64(n), 2))
	yt := must(fulmen.FromSlice(y))
	defer xt.Close()
	defer yt.Close()
	return must(fulmen.NewTensorDataset(xt, yt))
}

// mlp is 2-16-2 with tanh.
func mlp(t *testing.T) *fulmen.Model {
	t.Helper()
	return must(fulmen.NewSequential(
		must(fulmen.NewLinear(2, 16, true)),
		must(fulmen.NewActivation(fulmen.Tanh, 0)),
		must(fulmen.NewLinear(16, 2, true)),
	))
}

// quietTrainer has no progress bar or model summary and writes its logs
// and checkpoints under a temp dir.
func quietTrainer(t *testing.T, epochs int64, kv ...string) *fulmen.Trainer {
	t.Helper()
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	ok(t, o.SetInt("max_epochs", epochs))
	ok(t, o.Set("default_root_dir", t.TempDir()))
	ok(t, o.SetBool("enable_progress_bar", false))
	ok(t, o.SetBool("enable_model_summary", false))
	ok(t, o.SetInt("log_every_n_steps", 5))
	ok(t, o.SetInt("seed", 3))
	for i := 0; i+1 < len(kv); i += 2 {
		ok(t, o.Set(kv[i], kv[i+1]))
	}
	return must(fulmen.NewTrainer(o))
}

// lossOf is the forward pass and cross-entropy of a [x, y] batch.
func lossOf(model *fulmen.Model, b *fulmen.Batch) (logits, loss *fulmen.Tensor, err error) {
	x, err := b.Get(0)
	if err != nil {
		return nil, nil, err
	}
	y, err := b.Get(1)
	if err != nil {
		return nil, nil, err
	}
	if logits, err = model.Forward(x); err != nil {
		return nil, nil, err
	}
	loss, err = fulmen.CrossEntropy(logits, y, fulmen.ReductionMean)
	return logits, loss, err
}

// accuracy of logits against the labels of batch b.
func accuracy(logits *fulmen.Tensor, b *fulmen.Batch) (float64, error) {
	y, err := b.Get(1)
	if err != nil {
		return 0, err
	}
	pred, err := logits.Argmax(1, false)
	if err != nil {
		return 0, err
	}
	hit, err := pred.Compare(fulmen.Eq, y)
	if err != nil {
		return 0, err
	}
	hitf, err := hit.ToDType(fulmen.Float32)
	if err != nil {
		return 0, err
	}
	m, err := hitf.Mean()
	if err != nil {
		return 0, err
	}
	return m.Item()
}

// sgd hands an SGD optimizer over model to cfg.
func sgd(model *fulmen.Model, lr float64) func(cfg *fulmen.OptimizerConfig) error {
	return func(cfg *fulmen.OptimizerConfig) error { return addSGD(cfg, model, nil, lr) }
}

// trainableSGD hands cfg an SGD optimizer over model's parameters that
// require grad (what BackboneFinetuning leaves trainable).
func trainableSGD(model *fulmen.Model, lr float64) func(cfg *fulmen.OptimizerConfig) error {
	return func(cfg *fulmen.OptimizerConfig) error {
		params, err := model.Parameters(true)
		if err != nil {
			return err
		}
		defer func() {
			for _, p := range params {
				p.Close()
			}
		}()
		return addSGD(cfg, nil, params, lr)
	}
}

// addSGD adds SGD at lr over model (or params) to cfg.
func addSGD(cfg *fulmen.OptimizerConfig, model *fulmen.Model, params []*fulmen.Tensor, lr float64) error {
	o := fulmen.DefaultSGDOptions()
	o.LR = lr
	opt, err := fulmen.NewSGD(model, params, o)
	if err != nil {
		return err
	}
	if err := cfg.Add(opt); err != nil {
		opt.Close()
		return err
	}
	return nil
}

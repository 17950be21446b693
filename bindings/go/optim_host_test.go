package fulmen_test

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// plainSGD is p -= lr * grad in Go; its state is the number of steps.
type plainSGD struct {
	steps  uint64
	failAt uint64
	loaded int64
	lrs    []float64
}

var errGaveUp = errors.New("plain sgd gave up")

func (s *plainSGD) Step(ctx *fulmen.OptimizerStepContext) error {
	s.steps++
	if s.steps == s.failAt {
		return errGaveUp
	}
	groups, err := ctx.GroupCount()
	if err != nil {
		return err
	}
	for g := 0; g < groups; g++ {
		lr, err := ctx.LR(g)
		if err != nil {
			return err
		}
		s.lrs = append(s.lrs, lr)
		n, err := ctx.ParamCount(g)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			p, err := ctx.Param(g, i)
			if err != nil {
				return err
			}
			grad, err := p.Grad()
			if err != nil {
				return err
			}
			if grad != nil {
				if err := p.AddInPlace(grad, -lr); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *plainSGD) StateDict() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, s.steps), nil
}

func (s *plainSGD) LoadStateDict(state []byte) error {
	if len(state) != 8 {
		return errors.New("8 bytes expected")
	}
	s.loaded = int64(binary.LittleEndian.Uint64(state))
	return nil
}

// hostModule trains model with host (fulmen's SGD when nil), lr 0.1, and
// StepLR(1, 0.5) per epoch.
func hostModule(t *testing.T, model *fulmen.Model, host *plainSGD) *fulmen.LightningModule {
	t.Helper()
	return must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			var opt *fulmen.Optimizer
			var err error
			if host != nil {
				opt, err = fulmen.NewHostOptimizer(host, model, nil, 0.1)
			} else {
				o := fulmen.DefaultSGDOptions()
				o.LR = 0.1
				opt, err = fulmen.NewSGD(model, nil, o)
			}
			if err != nil {
				return err
			}
			s, err := fulmen.NewStepLR(opt, 1, 0.5)
			if err == nil {
				err = cfg.AddWithScheduler(opt, s, fulmen.IntervalEpoch, 1, "")
			}
			if err != nil {
				s.Close()
				opt.Close()
			}
			return err
		},
	}))
}

func seededMLP(t *testing.T) *fulmen.Model {
	t.Helper()
	ok(t, fulmen.ManualSeed(4))
	return mlp(t)
}

// maxDiff is the largest absolute difference between two models' weights.
func maxDiff(t *testing.T, a, b *fulmen.Model) float64 {
	t.Helper()
	most := 0.0
	for _, name := range must(a.StateDictNames()) {
		x, y := must(a.StateDictGet(name)), must(b.StateDictGet(name))
		d := must(x.Sub(y))
		ad := must(d.Abs())
		mx := must(ad.Max())
		if v := must(mx.Item()); v > most {
			most = v
		}
		for _, tt := range []*fulmen.Tensor{x, y, d, ad, mx} {
			tt.Close()
		}
	}
	return most
}

func TestHostOptimizerEqualsSGDAndResumes(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 5)
	defer ds.Close()
	train := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16}))
	defer train.Close()
	fit := func(model *fulmen.Model, host *plainSGD, epochs int64, save string, opts ...fulmen.RunOption) error {
		m := hostModule(t, model, host)
		defer m.Close()
		tr := quietTrainer(t, epochs, "logger", "false", "enable_checkpointing", "false")
		defer tr.Close()
		err := tr.Fit(context.Background(), m, train, nil, opts...)
		if err == nil && save != "" {
			err = tr.SaveCheckpoint(context.Background(), m, save, false)
		}
		return err
	}

	own, builtin := seededMLP(t), seededMLP(t)
	defer own.Close()
	defer builtin.Close()
	host := &plainSGD{}
	ckpt := filepath.Join(t.TempDir(), "host.ckpt")
	ok(t, fit(own, host, 2, ckpt))
	ok(t, fit(builtin, nil, 2, ""))
	if d := maxDiff(t, own, builtin); d != 0 {
		t.Fatalf("host SGD differs from fulmen's SGD by %g", d)
	}
	if host.steps != 8 || len(host.lrs) != 8 || host.lrs[0] != 0.1 || host.lrs[7] != 0.05 {
		t.Fatalf("steps %d, lrs %v", host.steps, host.lrs)
	}

	// Resuming gives the host its bytes back and the scheduler's lr.
	back := &plainSGD{loaded: -1}
	ok(t, fit(own, back, 3, "", fulmen.CkptPath(ckpt)))
	if back.loaded != 8 || len(back.lrs) != 4 || back.lrs[0] != 0.025 {
		t.Fatalf("resumed: loaded %d, lrs %v", back.loaded, back.lrs)
	}

	// A failing Step ends the fit with its error as the cause.
	failing := &plainSGD{failAt: 2}
	if err := fit(own, failing, 1, ""); !errors.Is(err, errGaveUp) {
		t.Fatalf("fit with a failing step: %v", err)
	}
}

func TestHostOptimizerStateFiles(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	if _, err := fulmen.NewHostOptimizer(nil, model, nil, 0.1); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil host optimizer: %v", err)
	}
	if _, err := fulmen.NewHostOptimizer(&plainSGD{}, model, nil, -1); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("negative lr: %v", err)
	}
	a := &plainSGD{}
	opt := must(fulmen.NewHostOptimizer(a, model, nil, 0.4))
	defer opt.Close()
	s := must(fulmen.NewStepLR(opt, 1, 0.5))
	defer s.Close()
	ok(t, opt.Step())
	ok(t, s.Step(opt, 0))
	ok(t, opt.ZeroGrad())
	dir := t.TempDir()
	ok(t, opt.SaveState(filepath.Join(dir, "opt.safetensors")))
	ok(t, s.SaveState(filepath.Join(dir, "sched.safetensors")))

	b := &plainSGD{loaded: -1}
	other := must(fulmen.NewHostOptimizer(b, model, nil, 0.9))
	defer other.Close()
	sched2 := must(fulmen.NewStepLR(other, 1, 0.5))
	defer sched2.Close()
	ok(t, other.LoadState(filepath.Join(dir, "opt.safetensors")))
	ok(t, sched2.LoadState(filepath.Join(dir, "sched.safetensors")))
	if b.loaded != 1 || must(other.LR()) != 0.2 {
		t.Fatalf("loaded %d, lr %v", b.loaded, must(other.LR()))
	}
	ok(t, sched2.Step(other, 0))
	if lr := must(other.LR()); lr != 0.1 {
		t.Fatalf("lr after the loaded scheduler's step: %v", lr)
	}
	if err := other.LoadState(filepath.Join(dir, "sched.safetensors")); !errors.Is(err, fulmen.ErrFormat) {
		t.Fatalf("a scheduler's file as an optimizer's: %v", err)
	}
}

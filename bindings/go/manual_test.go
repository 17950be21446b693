package fulmen_test

import (
	"context"
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// A manual step that zeroes, backpropagates and steps is automatic
// optimization written out: the same weights; the calls are refused in
// automatic mode.
func TestManualOptimization(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 9)
	defer ds.Close()
	loader := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16}))
	defer loader.Close()
	ok(t, fulmen.ManualSeed(4))
	manualModel := mlp(t)
	defer manualModel.Close()
	ok(t, fulmen.ManualSeed(4))
	autoModel := mlp(t)
	defer autoModel.Close()

	var rates []float64
	manual := must(fulmen.NewLightningModule(manualModel, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			if n, err := ctx.OptimizerCount(); err != nil || n != 1 {
				t.Errorf("optimizer count %d, %v", n, err)
			}
			if err := ctx.ToggleOptimizer(0); err != nil {
				return nil, err
			}
			_, loss, err := lossOf(manualModel, b)
			if err != nil {
				return nil, err
			}
			if err := ctx.OptimizerZeroGrad(0); err != nil {
				return nil, err
			}
			if err := ctx.ManualBackward(loss); err != nil {
				return nil, err
			}
			if len(rates)%2 == 1 {
				// Steps without asking whether the update was made.
				if err := ctx.OptimizerStepNoWait(0); err != nil {
					return nil, err
				}
			} else if made, err := ctx.OptimizerStep(0); err != nil || !made {
				t.Errorf("step made %v, %v", made, err)
			}
			if err := ctx.UntoggleOptimizer(0); err != nil {
				return nil, err
			}
			lr, err := ctx.LearningRate(0, 0)
			if err != nil {
				return nil, err
			}
			rates = append(rates, lr)
			// By optimizer, or by place in lr_schedulers(): the same one here.
			if n, err := ctx.LRSchedulerCount(); err != nil || n != 1 {
				t.Errorf("scheduler count %d, %v", n, err)
			}
			switch len(rates) % 3 {
			case 0:
				err = ctx.SchedulerStepMetric(0, 1.0) // StepLR ignores the metric
			case 1:
				err = ctx.LRSchedulerStep(0)
			default:
				err = ctx.LRSchedulerStepMetric(0, 1.0)
			}
			if err != nil {
				return nil, err
			}
			if err := ctx.LRSchedulerStep(1); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("scheduler 1 of 1: %v", err)
			}
			if _, err := ctx.OptimizerStep(1); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("optimizer 1 of 1: %v", err)
			}
			if err := ctx.OptimizerStepNoWait(1); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("optimizer 1 of 1, not waiting: %v", err)
			}
			if _, err := ctx.LearningRate(-1, 0); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("negative index: %v", err)
			}
			return nil, nil // no loss to return
		},
		ConfigureOptimizers: stepLR(manualModel),
	}))
	defer manual.Close()
	ok(t, manual.SetAutomaticOptimization(false))
	automatic := must(fulmen.NewLightningModule(autoModel, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			if err := ctx.SchedulerStep(0); !errors.Is(err, fulmen.ErrInvalidState) {
				t.Errorf("scheduler step in automatic mode: %v", err)
			}
			_, loss, err := lossOf(autoModel, b)
			return loss, err
		},
		ConfigureOptimizers: stepLR(autoModel),
	}))
	defer automatic.Close()
	ta, tb := quietTrainer(t, 1, "logger", "false"), quietTrainer(t, 1, "logger", "false")
	defer ta.Close()
	defer tb.Close()
	ok(t, ta.Fit(context.Background(), manual, loader, nil))
	ok(t, tb.Fit(context.Background(), automatic, loader, nil))
	if s := must(ta.GlobalStep()); s != 4 {
		t.Fatalf("global step %d", s)
	}
	if len(rates) != 4 || rates[0] != 0.1 || rates[1] != 0.1 || rates[2] != 0.05 || rates[3] != 0.05 {
		t.Fatalf("learning rates %v", rates)
	}
	if v := lastWeightDiff(t, manualModel, autoModel); v != 0 {
		t.Fatalf("weights differ from automatic optimization's by %g", v)
	}
}

// lastWeightDiff is max |a - b| over the last layer's weights ("2.weight").
func lastWeightDiff(t *testing.T, a, b *fulmen.Model) float64 {
	t.Helper()
	wa, wb := must(a.StateDictGet("2.weight")), must(b.StateDictGet("2.weight"))
	defer wa.Close()
	defer wb.Close()
	diff := must(wa.Sub(wb))
	defer diff.Close()
	abs := must(diff.Abs())
	defer abs.Close()
	d := must(abs.Max())
	defer d.Close()
	return must(d.Item())
}

// stepLR hands SGD(lr 0.1) with StepLR(2, 0.5) stepping per step to cfg.
func stepLR(model *fulmen.Model) func(cfg *fulmen.OptimizerConfig) error {
	return func(cfg *fulmen.OptimizerConfig) error {
		o := fulmen.DefaultSGDOptions()
		o.LR = 0.1
		opt, err := fulmen.NewSGD(model, nil, o)
		if err != nil {
			return err
		}
		s, err := fulmen.NewStepLR(opt, 2, 0.5)
		if err != nil {
			opt.Close()
			return err
		}
		return cfg.AddWithScheduler(opt, s, fulmen.IntervalStep, 1, "")
	}
}

// LogDict with reduce_fx flags: the epoch value is the reduction.
func TestLogDictAndReductions(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 9)
	defer ds.Close()
	loader := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16}))
	defer loader.Close()
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			i, err := ctx.BatchIdx()
			if err != nil {
				return nil, err
			}
			v := float64(i)
			err = ctx.LogDict(map[string]float64{"peak": v, "floor": -v}, fulmen.LogOnEpoch|fulmen.LogReduceMax, 0)
			if err != nil {
				return nil, err
			}
			if err := ctx.Log("n", 1, fulmen.LogOnEpoch|fulmen.LogReduceSum|fulmen.LogNoLogger, 0); err != nil {
				return nil, err
			}
			if err := ctx.LogDict(map[string]float64{"bad,name": 1}, 0, 0); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("bad name: %v", err)
			}
			_, loss, err := lossOf(model, b)
			return loss, err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false")
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, loader, nil))
	if p, f, n := must(tr.CallbackMetric("peak")), must(tr.CallbackMetric("floor")), must(tr.CallbackMetric("n")); p != 3 || f != 0 || n != 4 {
		t.Fatalf("peak %v floor %v n %v", p, f, n)
	}
}

// LBFGS stepped with a closure from a manual step: the closure runs
// through its own context as often as LBFGS asks, with the same weights as
// LBFGS under automatic optimization; the closure's error is the cause.
func TestManualLBFGSClosure(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 64, 9)
	defer ds.Close()
	loader := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 16}))
	defer loader.Close()
	ok(t, fulmen.ManualSeed(6))
	manualModel := mlp(t)
	defer manualModel.Close()
	ok(t, fulmen.ManualSeed(6))
	autoModel := mlp(t)
	defer autoModel.Close()
	lbfgs := func(model *fulmen.Model) func(cfg *fulmen.OptimizerConfig) error {
		return func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultLBFGSOptions()
			o.LR = 0.5
			opt, err := fulmen.NewLBFGS(model, nil, o)
			if err != nil {
				return err
			}
			return cfg.Add(opt)
		}
	}
	manualCalls, autoCalls := 0, 0
	stop := errors.New("stop here")
	fail := false
	manual := must(fulmen.NewLightningModule(manualModel, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			first, made, err := ctx.OptimizerStepClosure(0, func(inner *fulmen.StepContext) (float64, error) {
				manualCalls++
				if fail {
					return 0, stop
				}
				if err := inner.OptimizerZeroGrad(0); err != nil {
					return 0, err
				}
				_, loss, err := lossOf(manualModel, b)
				if err != nil {
					return 0, err
				}
				if err := inner.ManualBackward(loss); err != nil {
					return 0, err
				}
				if err := ctx.OptimizerZeroGrad(0); !errors.Is(err, fulmen.ErrInvalidState) {
					t.Errorf("the step's own context inside the closure: %v", err)
				}
				return loss.Item()
			})
			if err == nil && (!made || first <= 0) {
				t.Errorf("made %v, first loss %v", made, first)
			}
			return nil, err
		},
		ConfigureOptimizers: lbfgs(manualModel),
	}))
	defer manual.Close()
	ok(t, manual.SetAutomaticOptimization(false))
	automatic := must(fulmen.NewLightningModule(autoModel, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			autoCalls++
			_, loss, err := lossOf(autoModel, b)
			return loss, err
		},
		ConfigureOptimizers: lbfgs(autoModel),
	}))
	defer automatic.Close()
	ta, tb := quietTrainer(t, 1, "logger", "false"), quietTrainer(t, 1, "logger", "false")
	defer ta.Close()
	defer tb.Close()
	ok(t, ta.Fit(context.Background(), manual, loader, nil))
	ok(t, tb.Fit(context.Background(), automatic, loader, nil))
	if s := must(ta.GlobalStep()); s != 4 {
		t.Fatalf("global step %d", s)
	}
	if manualCalls != autoCalls || manualCalls <= 4 {
		t.Fatalf("closure calls %d, automatic evaluations %d", manualCalls, autoCalls)
	}
	if v := lastWeightDiff(t, manualModel, autoModel); v != 0 {
		t.Fatalf("weights differ from automatic LBFGS's by %g", v)
	}
	fail = true
	tc := quietTrainer(t, 1, "logger", "false")
	defer tc.Close()
	if err := tc.Fit(context.Background(), manual, loader, nil); !errors.Is(err, stop) {
		t.Fatalf("a failing closure: %v", err)
	}
}

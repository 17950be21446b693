package fulmen_test

import (
	"context"
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// The LightningModule-only hooks reach OnHook only once the module
// overrides them; on_before_batch_transfer replaces the batch, and the
// optimizer hooks name their optimizer.
func TestOverriddenModuleHooks(t *testing.T) {
	noLeaks(t)
	train, val := loaders(t, 8, 4, 4) // 2 training batches, 1 validation batch
	model := mlp(t)
	defer model.Close()
	replaced, transfers, evals := 0, 0, 0
	var optimizerIndices []int64
	var learningRates []float64
	m := trainModule(t, model, func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		switch h {
		case fulmen.HookBeforeBatchTransfer:
			transfers++
			x := must(ctx.BatchGet(0))
			y := must(ctx.BatchGet(1))
			marker, err := fulmen.Full(7, fulmen.Float32, 1)
			if err != nil {
				return err
			}
			return ctx.SetBatch([]*fulmen.Tensor{x, y, marker})
		case fulmen.HookValidationModelEval:
			evals++
		case fulmen.HookTrainBatchStart:
			if must(ctx.BatchLen()) == 3 {
				replaced++
			}
			if err := ctx.SetBatch(nil); !errors.Is(err, fulmen.ErrInvalidState) {
				t.Errorf("SetBatch in on_train_batch_start: %v", err)
			}
			if i := must(ctx.OptimizerIndex()); i != -1 {
				t.Errorf("optimizer index %d in on_train_batch_start", i)
			}
		}
		return nil
	})
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false", "enable_checkpointing", "false", "num_sanity_val_steps", "0")
	defer tr.Close()
	ok(t, tr.AddCallback("optimizers", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		if h == fulmen.HookBeforeOptimizerStep || h == fulmen.HookBeforeZeroGrad {
			optimizerIndices = append(optimizerIndices, must(ctx.OptimizerIndex()))
		}
		if h != fulmen.HookBeforeOptimizerStep || len(learningRates) > 1 {
			return nil
		}
		// The optimizer itself: its lr read, then halved for the next step.
		if n, g := must(ctx.OptimizerCount()), must(ctx.ParamGroupCount(0)); n != 1 || g != 1 {
			t.Errorf("%d optimizers with %d groups, want 1 and 1", n, g)
		}
		lr := must(ctx.ParamGroup(0, 0, "lr"))
		learningRates = append(learningRates, lr)
		if _, err := ctx.ParamGroup(1, 0, "lr"); !errors.Is(err, fulmen.ErrOutOfRange) {
			t.Errorf("optimizer 1 of 1: %v", err)
		}
		return ctx.SetParamGroup(0, 0, "lr", lr/2)
	})))
	ok(t, tr.Fit(context.Background(), m, train, val))
	if len(learningRates) != 2 || learningRates[1] != learningRates[0]/2 {
		t.Errorf("learning rates %v in on_before_optimizer_step, want the second half the first", learningRates)
	}
	if transfers != 0 || evals != 0 || replaced != 0 {
		t.Errorf("not overridden, yet the module saw %d transfers, %d evals, %d replaced batches", transfers, evals, replaced)
	}
	if len(optimizerIndices) != 4 {
		t.Errorf("optimizer indices %v, want four 0s", optimizerIndices)
	}
	for _, i := range optimizerIndices {
		if i != 0 {
			t.Errorf("optimizer indices %v, want four 0s", optimizerIndices)
		}
	}
	ok(t, m.OverrideHook(fulmen.HookBeforeBatchTransfer, true))
	ok(t, m.OverrideHook(fulmen.HookValidationModelEval, true))
	if err := m.OverrideHook(fulmen.HookFitStart, true); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("overriding on_fit_start: %v", err)
	}
	ok(t, tr.SetMaxEpochs(2)) // one more epoch: the last fit's is done
	ok(t, tr.Fit(context.Background(), m, train, val))
	if transfers != 3 || evals != 1 || replaced != 2 {
		t.Errorf("overridden: %d transfers (want 3), %d evals (want 1), %d replaced batches (want 2)", transfers, evals, replaced)
	}
}

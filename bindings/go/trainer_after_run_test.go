package fulmen_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// afterRunTrainer is a quiet trainer on the CPU without loggers or a
// ModelCheckpoint.
func afterRunTrainer(t *testing.T, epochs int64) *fulmen.Trainer {
	t.Helper()
	return quietTrainer(t, epochs, "logger", "false", "enable_checkpointing", "false", "accelerator", "cpu")
}

// SaveCheckpoint after Fit writes a file a new Fit goes on from; the
// metric maps and the queries read what the last fit left.
func TestSaveCheckpointAfterFit(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	train := blobDataset(t, 64, 1)
	defer train.Close()
	val := blobDataset(t, 32, 2)
	defer val.Close()
	tl := must(fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 8, Shuffle: true, Seed: 7}))
	defer tl.Close()
	vl := must(fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 16}))
	defer vl.Close()
	f, m := newFixture(t)
	defer f.model.Close()
	defer m.Close()
	tr := afterRunTrainer(t, 2)
	defer tr.Close()
	path := filepath.Join(t.TempDir(), "after", "state.ckpt")

	// Before any run.
	if err := tr.SaveCheckpoint(ctx, m, path, true); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("save before any run: %v", err)
	}
	if _, _, err := tr.EstimatedSteppingBatches(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("estimated_stepping_batches before a fit: %v", err)
	}
	if _, known, err := tr.NumTrainingBatches(); err != nil || known {
		t.Fatalf("num_training_batches before a fit: known %v, %v", known, err)
	}
	if d := must(tr.NumDevices()); d != 1 {
		t.Fatalf("num_devices %d", d)
	}
	if cm := must(tr.CallbackMetrics()); len(cm) != 0 {
		t.Fatalf("callback metrics before a run: %v", cm)
	}

	ok(t, tr.Fit(ctx, m, tl, vl))
	if n, known, err := tr.NumTrainingBatches(); err != nil || !known || n != 8 {
		t.Fatalf("num_training_batches %d (known %v): %v", n, known, err)
	}
	if s, bounded, err := tr.EstimatedSteppingBatches(); err != nil || !bounded || s != 16 {
		t.Fatalf("estimated_stepping_batches %d (bounded %v): %v", s, bounded, err)
	}
	if !must(tr.IsLastBatch()) || must(tr.ShouldStop()) {
		t.Fatal("is_last_batch false or should_stop true after a full fit")
	}
	if v := must(tr.NumValBatches()); len(v) != 1 || v[0] != 2 {
		t.Fatalf("num_val_batches %v", v)
	}
	if r := must(tr.NodeRank()); r != 0 {
		t.Fatalf("node_rank %d", r)
	}
	if v := must(tr.NumSanityValBatches()); len(v) != 1 || v[0] != 2 {
		t.Fatalf("num_sanity_val_batches %v", v)
	}
	if v := must(tr.NumTestBatches()); len(v) != 0 {
		t.Fatalf("num_test_batches before a test %v", v)
	}
	if v := must(tr.NumPredictBatches()); len(v) != 0 {
		t.Fatalf("num_predict_batches before a predict %v", v)
	}
	if ids := must(tr.DeviceIDs()); len(ids) != 1 || ids[0] != -1 {
		t.Fatalf("device_ids %v", ids)
	}
	if _, err := tr.GradScale(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("grad scale under 32-true: %v", err)
	}
	if _, err := tr.EarlyStoppingState(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("early stopping state without one: %v", err)
	}
	cm := must(tr.CallbackMetrics())
	if cm["val_acc"] != must(tr.CallbackMetric("val_acc")) {
		t.Fatalf("callback metrics %v", cm)
	}
	if _, has := cm["train_loss_step"]; !has {
		t.Fatalf("callback metrics without train_loss_step: %v", cm)
	}
	logged := must(tr.LoggedMetrics())
	if _, has := logged["train_loss_epoch"]; !has {
		t.Fatalf("logged metrics without train_loss_epoch: %v", logged)
	}
	if _, has := logged["train_loss"]; has {
		t.Fatalf("the bare epoch name is a callback metric only: %v", logged)
	}
	bar := must(tr.ProgressBarMetrics())
	if _, has := bar["val_acc"]; !has || len(bar) != 1 {
		t.Fatalf("progress bar metrics %v", bar)
	}

	ok(t, tr.SaveCheckpoint(ctx, m, path, false))
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	resumed := afterRunTrainer(t, 3)
	defer resumed.Close()
	ok(t, resumed.Fit(ctx, m, tl, vl, fulmen.CkptPath(path)))
	if s, e := must(resumed.GlobalStep()), must(resumed.CurrentEpoch()); s != 24 || e != 3 {
		t.Fatalf("resumed to global step %d, epoch %d", s, e)
	}

	// Another fit goes on from the last one's progress: nothing at its
	// limit, one more epoch once raised (Lightning's fit_loop.max_epochs).
	ok(t, resumed.Fit(ctx, m, tl, vl))
	if s := must(resumed.GlobalStep()); s != 24 {
		t.Fatalf("a fit at its limit trained to step %d", s)
	}
	ok(t, resumed.SetMaxEpochs(4))
	ok(t, resumed.Fit(ctx, m, tl, vl))
	if s, e := must(resumed.GlobalStep()), must(resumed.CurrentEpoch()); s != 32 || e != 4 {
		t.Fatalf("raised to 4 epochs: global step %d, epoch %d", s, e)
	}
	ok(t, resumed.SetMaxEpochs(-1))
	ok(t, resumed.SetMaxSteps(36))
	ok(t, resumed.Fit(ctx, m, tl, vl))
	if s := must(resumed.GlobalStep()); s != 36 {
		t.Fatalf("max_steps 36: global step %d", s)
	}
	if err := resumed.SetMaxSteps(-3); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("max_steps -3: %v", err)
	}

	other, om := newFixture(t)
	defer other.model.Close()
	defer om.Close()
	if err := resumed.SaveCheckpoint(ctx, om, path, true); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("save with another module: %v", err)
	}
}

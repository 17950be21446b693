package fulmen_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// eventBytes is every event file in dir, concatenated, and their count.
func eventBytes(t *testing.T, dir string) ([]byte, int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	ok(t, err)
	var all []byte
	for _, f := range files {
		all = append(all, must(os.ReadFile(f))...)
	}
	return all, len(files)
}

func readText(t *testing.T, path string) string {
	t.Helper()
	return string(must(os.ReadFile(path)))
}

// A CSV logger writes Lightning's layout and metrics.csv byte for byte.
func TestCSVLogger(t *testing.T) {
	noLeaks(t)
	save := t.TempDir()
	ok(t, os.MkdirAll(filepath.Join(save, "exp", "version_1_old"), 0o755))
	l := must(fulmen.NewCSVLogger(save))
	defer l.Close()
	ok(t, l.SetName("exp"))
	ok(t, l.SetPrefix("p"))
	ok(t, l.SetFlushLogsEveryNSteps(2))
	if err := l.SetDefaultHPMetric(false); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("default_hp_metric on a CSV logger: %v", err)
	}
	ok(t, l.LogMetrics(map[string]float64{"loss": 1.0, "epoch": 0}, 0))
	dir := must(l.LogDir())
	if want := filepath.Join(save, "exp", "version_2"); dir != want {
		t.Fatalf("log dir %s, want %s", dir, want)
	}
	if v := must(l.Version()); v != 2 {
		t.Fatalf("version %d", v)
	}
	ok(t, l.LogMetrics(map[string]float64{"val_acc": 1e-5}, 1))
	if got, want := readText(t, filepath.Join(dir, "metrics.csv")), "p-epoch,p-loss,p-val_acc,step\r\n0.0,1.0,,0\r\n,,1e-05,1\r\n"; got != want {
		t.Fatalf("metrics.csv %q, want %q", got, want)
	}
	if err := l.SetName("late"); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("set name after use: %v", err)
	}
	ok(t, l.LogHyperparams(map[string]string{"lr": "0.1", "name": "mlp"}))
	ok(t, l.Finalize("success"))
	if got := readText(t, filepath.Join(dir, "hparams.yaml")); got != "lr: 0.1\nname: \"mlp\"\n" {
		t.Fatalf("hparams.yaml %q", got)
	}
	if err := l.AddText("t", "x", 0); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("text on a CSV logger: %v", err)
	}

	named := must(fulmen.NewCSVLogger(save))
	defer named.Close()
	ok(t, named.SetName(""))
	ok(t, named.SetVersionName("run-a"))
	if d := must(named.LogDir()); d != filepath.Join(save, "run-a") {
		t.Fatalf("named version dir %s", d)
	}
	if _, err := fulmen.NewCSVLogger(""); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("empty save dir: %v", err)
	}
	bad := must(fulmen.NewCSVLogger(save))
	defer bad.Close()
	if err := bad.SetName("../out"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("name outside save dir: %v", err)
	}
	if err := bad.SetVersion(-3); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("version -3: %v", err)
	}
}

// A TensorBoard logger writes images, histograms and texts.
// A TensorBoard logger's sub_dir: its files go below the run's folder;
// refused on a CSV logger and outside the save folder.
func TestTensorBoardLoggerSubDir(t *testing.T) {
	noLeaks(t)
	save := t.TempDir()
	csv := must(fulmen.NewCSVLogger(save))
	defer csv.Close()
	if err := csv.SetSubDir("train"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("sub_dir on a CSV logger: %v", err)
	}
	l := must(fulmen.NewTensorBoardLogger(save))
	defer l.Close()
	if err := l.SetSubDir("../out"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("sub_dir ../out: %v", err)
	}
	ok(t, l.SetSubDir("train"))
	ok(t, l.LogMetrics(map[string]float64{"loss": 0.5}, 1))
	dir := must(l.LogDir())
	if want := filepath.Join(save, "lightning_logs", "version_0", "train"); dir != want {
		t.Fatalf("log dir %s, want %s", dir, want)
	}
	events := must(filepath.Glob(filepath.Join(dir, "events.out.tfevents.*")))
	if len(events) != 1 {
		t.Fatalf("event files in %s: %v", dir, events)
	}
	if err := l.SetSubDir("later"); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("sub_dir after use: %v", err)
	}
}

func TestTensorBoardLoggerMedia(t *testing.T) {
	noLeaks(t)
	save := t.TempDir()
	l := must(fulmen.NewTensorBoardLogger(save))
	defer l.Close()
	if err := l.SetFlushLogsEveryNSteps(2); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("flush on a TensorBoard logger: %v", err)
	}
	img := must(fulmen.Randn(fulmen.Float32, 3, 4, 5))
	defer img.Close()
	gray := must(fulmen.FromSlice(make([]uint8, 20), 4, 5))
	defer gray.Close()
	two := must(fulmen.Randn(fulmen.Float32, 2, 4, 5))
	defer two.Close()
	ok(t, l.LogHyperparams(map[string]string{"lr": "0.001"}))
	ok(t, l.LogMetrics(map[string]float64{"loss": 0.5}, 1))
	ok(t, l.AddImage("rgb", img, 2, ""))
	ok(t, l.AddImage("gray", gray, 2, "HW"))
	ok(t, l.AddHistogram("values", img, 3))
	ok(t, l.AddText("notes", "*hi*", 4))
	if err := l.AddImage("bad", two, 2, "CHW"); !errors.Is(err, fulmen.ErrShapeMismatch) {
		t.Fatalf("two channels: %v", err)
	}
	if err := l.AddImage("bad", img, 2, "XYZ"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("bad dataformats: %v", err)
	}
	if err := l.AddImage("bad", nil, 2, "CHW"); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("nil image: %v", err)
	}
	ok(t, l.Finalize("success"))
	dir := must(l.LogDir())
	if dir != filepath.Join(save, "lightning_logs", "version_0") {
		t.Fatalf("log dir %s", dir)
	}
	all, n := eventBytes(t, dir)
	if n != 1 {
		t.Fatalf("%d event files", n)
	}
	for _, tag := range []string{"loss", "hp_metric", "rgb", "gray", "values", "notes/text_summary", "*hi*", "\x89PNG"} {
		if !bytes.Contains(all, []byte(tag)) {
			t.Errorf("no %q in the event file", tag)
		}
	}
	if got := readText(t, filepath.Join(dir, "hparams.yaml")); got != "lr: 0.001\n" {
		t.Fatalf("hparams.yaml %q", got)
	}
}

// ckptRecorder is a Logger that also wants after_save_checkpoint.
type ckptRecorder struct {
	recorder
	saved []string
}

func (r *ckptRecorder) AfterSaveCheckpoint(path string) error {
	r.saved = append(r.saved, path)
	return nil
}

// Loggers added to a trainer get its metrics and hyperparameters, media
// from a hook, and a CheckpointLogger each checkpoint's path.
func TestTrainerFileLoggers(t *testing.T) {
	noLeaks(t)
	train, _ := loaders(t, 16, 8, 4)
	model := mlp(t)
	defer model.Close()
	m := trainModule(t, model, nil)
	defer m.Close()
	ok(t, m.SetHparam("lr", "0.1"))
	save := t.TempDir()
	csv := must(fulmen.NewCSVLogger(save))
	defer csv.Close()
	ok(t, csv.SetName("csv"))
	tb := must(fulmen.NewTensorBoardLogger(save))
	defer tb.Close()
	ok(t, tb.SetName("tb"))
	tr := quietTrainer(t, 2, "logger", "false", "log_every_n_steps", "1", "default_root_dir", save)
	defer tr.Close()
	ok(t, tr.AddFileLogger(csv))
	ok(t, tr.AddFileLogger(tb))
	rec := &ckptRecorder{}
	ok(t, tr.AddLogger(rec))
	var mediaErr error
	ok(t, tr.AddCallback("media", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		if h != fulmen.HookTrainEpochEnd {
			return nil
		}
		x, err := fulmen.Randn(fulmen.Float32, 1, 3, 3)
		if err != nil {
			return err
		}
		defer x.Close()
		step, err := ctx.GlobalStep()
		if err != nil {
			return err
		}
		mediaErr = errors.Join(ctx.AddImage("sample", x, step, "CHW"), ctx.AddHistogram("noise", x, step),
			ctx.AddText("note", "epoch done", step))
		return nil
	})))
	ok(t, tr.Fit(context.Background(), m, train, nil))
	ok(t, mediaErr)

	csvDir, tbDir := must(csv.LogDir()), must(tb.LogDir())
	if d := must(tr.LogDir()); d != csvDir {
		t.Fatalf("trainer log dir %s, the first added logger's is %s", d, csvDir)
	}
	rows := readText(t, filepath.Join(csvDir, "metrics.csv"))
	if !strings.HasPrefix(rows, "epoch,step,train_loss_epoch,train_loss_step\r\n0,0,,") {
		t.Fatalf("metrics.csv starts %q", rows[:min(len(rows), 80)])
	}
	for _, d := range []string{csvDir, tbDir} {
		if got := readText(t, filepath.Join(d, "hparams.yaml")); got != "lr: 0.1\n" {
			t.Fatalf("%s/hparams.yaml %q", d, got)
		}
	}
	all, n := eventBytes(t, tbDir)
	if n != 1 {
		t.Fatalf("%d event files", n)
	}
	for _, tag := range []string{"train_loss_step", "epoch", "sample", "noise", "note/text_summary", "_hparams_/experiment"} {
		if !bytes.Contains(all, []byte(tag)) {
			t.Errorf("no %q in the TensorBoard logger's events", tag)
		}
	}
	if len(rec.saved) != 2 || filepath.Dir(rec.saved[1]) != filepath.Join(csvDir, "checkpoints") {
		t.Fatalf("after_save_checkpoint got %v", rec.saved)
	}

	// Without a TensorBoard logger a hook's media is refused.
	plain := quietTrainer(t, 1, "logger", "csv")
	defer plain.Close()
	ok(t, plain.AddCallback("media", fulmen.CallbackFunc(func(h fulmen.Hook, ctx *fulmen.HookContext) error {
		if h == fulmen.HookTrainEpochEnd {
			mediaErr = ctx.AddText("t", "x", 0)
		}
		return nil
	})))
	ok(t, plain.Fit(context.Background(), m, train, nil))
	if !errors.Is(mediaErr, fulmen.ErrInvalidState) {
		t.Fatalf("media without TensorBoard: %v", mediaErr)
	}
}

// The MLflow logger's settings and errors without a server (the real
// server's round trip is tests/interop/mlflow_logger.py).
func TestMlflowLoggerSettingsAndErrors(t *testing.T) {
	noLeaks(t)
	if _, err := fulmen.NewMlflowLogger("https://example.com", "e"); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("https: %v", err)
	}
	if _, err := fulmen.NewMlflowLogger("file:./mlruns", "e"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("file: %v", err)
	}
	// Port 1 on the loopback: nothing listens, so the first use fails.
	l := must(fulmen.NewMlflowLogger("http://127.0.0.1:1", "exp"))
	defer l.Close()
	ok(t, l.SetRunName("r"))
	ok(t, l.SetTag("team", "fulmen"))
	ok(t, l.SetLogModel(fulmen.LogModelAll))
	ok(t, l.SetArtifactLocation("/nonexistent/artifacts"))
	ok(t, l.SetRunID(""))
	ok(t, l.SetPrefix("p"))
	if err := l.SetLogModel(7); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("log_model 7: %v", err)
	}
	if err := l.SetVersion(3); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a file setting: %v", err)
	}
	if err := l.LogMetrics(map[string]float64{"loss": 1}, 0); !errors.Is(err, fulmen.ErrIO) {
		t.Fatalf("no server: %v", err)
	}
	if _, err := l.RunID(); !errors.Is(err, fulmen.ErrIO) {
		t.Fatalf("run id without a server: %v", err)
	}
	if _, err := l.ExperimentID(); !errors.Is(err, fulmen.ErrIO) {
		t.Fatalf("experiment id without a server: %v", err)
	}
	if err := l.LogArtifact("/nonexistent", "../x"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("artifact path ..: %v", err)
	}
	ok(t, l.Finalize("success")) // never reached the server: nothing to end
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	tr := must(fulmen.NewTrainer(o))
	defer tr.Close()
	ok(t, tr.AddMlflowLogger(l))
}

// The W&B logger: settings, the run folder and file, wrong-kind calls,
// finish (W&B's own reader reads these files in tests/interop/wandb_logger.py).
func TestWandbLoggerWritesAnOfflineRun(t *testing.T) {
	noLeaks(t)
	save := t.TempDir()
	l := must(fulmen.NewWandbLogger(save, "proj"))
	defer l.Close()
	if err := l.SetID("../x"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("id ..: %v", err)
	}
	if err := l.SetSetting("colour", "x"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("unknown setting: %v", err)
	}
	ok(t, l.SetID("go-1"))
	ok(t, l.SetName("go run"))
	ok(t, l.SetSetting("job_type", "train"))
	ok(t, l.AddTag("t"))
	ok(t, l.SetPrefix("p"))
	if err := l.SetVersion(3); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a file setting: %v", err)
	}
	ok(t, l.LogHyperparams(map[string]string{"lr": "0.1"}))
	ok(t, l.LogMetrics(map[string]float64{"loss": 0.5}, 0))
	if err := l.SetName("late"); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("a setting after the start: %v", err)
	}
	if id, err := l.RunID(); err != nil || id != "go-1" {
		t.Fatalf("run id %q: %v", id, err)
	}
	dir := must(l.RunDir())
	if filepath.Dir(dir) != filepath.Join(save, "wandb") {
		t.Fatalf("run folder %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "run-go-1.wandb")); err != nil {
		t.Fatalf("the run's file: %v", err)
	}
	ok(t, l.Finalize("success"))
	ok(t, l.Finish(0))
	if err := l.LogMetrics(map[string]float64{"loss": 0.25}, 1); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("logging after finish: %v", err)
	}
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	tr := must(fulmen.NewTrainer(o))
	defer tr.Close()
	ok(t, tr.AddWandbLogger(l))
}

// The Comet logger: settings, the working folder and the archive,
// wrong-kind calls, end (comet_ml's upload code reads these archives in
// tests/interop/comet_logger.py).
func TestCometLoggerWritesAnOfflineArchive(t *testing.T) {
	noLeaks(t)
	save := t.TempDir()
	l := must(fulmen.NewCometLogger(save, "proj"))
	defer l.Close()
	if err := l.SetExperimentKey("short"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a short key: %v", err)
	}
	if err := l.SetMode("append"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("an unknown mode: %v", err)
	}
	key := "go0123456789abcdef0123456789abcd"
	ok(t, l.SetExperimentKey(key))
	ok(t, l.SetMode("create"))
	ok(t, l.SetName("go run"))
	ok(t, l.SetWorkspace("w"))
	ok(t, l.AddTag("t"))
	ok(t, l.SetPrefix("p"))
	if err := l.SetVersion(3); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a file setting: %v", err)
	}
	ok(t, l.LogHyperparams(map[string]string{"lr": "0.1"}))
	ok(t, l.LogMetrics(map[string]float64{"loss": 0.5}, 0))
	if err := l.SetName("late"); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("a setting after the start: %v", err)
	}
	if k, err := l.ExperimentKey(); err != nil || k != key {
		t.Fatalf("experiment key %q: %v", k, err)
	}
	archive := must(l.ArchivePath())
	if archive != filepath.Join(save, key+".zip") {
		t.Fatalf("archive %s", archive)
	}
	if _, err := os.Stat(filepath.Join(save, key+".partial", "messages.json")); err != nil {
		t.Fatalf("the working folder's messages: %v", err)
	}
	ok(t, l.Finalize("success"))
	ok(t, l.End())
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("the archive: %v", err)
	}
	if err := l.LogMetrics(map[string]float64{"loss": 0.25}, 1); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("logging after end: %v", err)
	}
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	tr := must(fulmen.NewTrainer(o))
	defer tr.Close()
	ok(t, tr.AddCometLogger(l))
}

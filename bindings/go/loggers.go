package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"sort"
	"unsafe"
)

// FileLogger is Lightning's CSVLogger or TensorBoardLogger (fulmen_logger):
// it writes under saveDir/name/version_N, the version being Lightning's
// next free number unless set, the folder made on first use. The Set
// methods apply before that. Use it on its own (LogMetrics with a step,
// LogHyperparams, Finalize) or add it to a Trainer (Trainer.AddFileLogger).
// Calls run one at a time (a concurrent call fails with ErrInvalidState).
type FileLogger struct {
	h handle[*C.fulmen_logger]
}

func newFileLogger(saveDir string, tensorboard bool) (*FileLogger, error) {
	d := cString(saveDir)
	defer freeCString(d)
	var out *C.fulmen_logger
	var err error
	if tensorboard {
		err = check(C.fulmen_logger_tensorboard_new(d, &out))
	} else {
		err = check(C.fulmen_logger_csv_new(d, &out))
	}
	if err != nil {
		return nil, err
	}
	l := &FileLogger{}
	l.h.store(out)
	runtime.SetFinalizer(l, (*FileLogger).Close)
	return l, nil
}

// NewCSVLogger is Lightning's CSVLogger(saveDir): metrics.csv (every column
// sorted, floats as Python writes them, rows written every 100 steps) and
// hparams.yaml, under saveDir/lightning_logs/version_N.
func NewCSVLogger(saveDir string) (*FileLogger, error) { return newFileLogger(saveDir, false) }

// NewTensorBoardLogger is Lightning's TensorBoardLogger(saveDir): event
// files (and hparams.yaml when it saves) under saveDir/lightning_logs/version_N.
func NewTensorBoardLogger(saveDir string) (*FileLogger, error) { return newFileLogger(saveDir, true) }

func (l *FileLogger) ptr() *C.fulmen_logger {
	if l == nil {
		gcStress()
		return nil
	}
	h := l.h.load()
	gcStress()
	return h
}

func (l *FileLogger) setText(text string, f func(*C.fulmen_logger, *C.char) cErr) error {
	s := cString(text)
	defer freeCString(s)
	err := check(f(l.ptr(), s))
	runtime.KeepAlive(l)
	return err
}

// SetName sets the experiment name ("": versions directly in saveDir).
func (l *FileLogger) SetName(name string) error {
	return l.setText(name, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_set_name(p, s) })
}

// SetVersion sets the version folder to version_<n> (-1: the next free number).
func (l *FileLogger) SetVersion(n int64) error {
	err := check(C.fulmen_logger_set_version(l.ptr(), C.int64_t(n)))
	runtime.KeepAlive(l)
	return err
}

// SetVersionName sets the version folder's own name (Lightning's version="name").
func (l *FileLogger) SetVersionName(folder string) error {
	return l.setText(folder, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_set_version_name(p, s) })
}

// SetPrefix puts prefix and '-' before every metric name.
func (l *FileLogger) SetPrefix(prefix string) error {
	return l.setText(prefix, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_set_prefix(p, s) })
}

// SetFlushLogsEveryNSteps (CSV): rows are written when (step + 1) % n == 0.
func (l *FileLogger) SetFlushLogsEveryNSteps(n int64) error {
	err := check(C.fulmen_logger_set_flush_logs_every_n_steps(l.ptr(), C.int64_t(n)))
	runtime.KeepAlive(l)
	return err
}

// SetDefaultHPMetric (TensorBoard): whether hyperparameters come with
// hp_metric = -1 (default true).
func (l *FileLogger) SetDefaultHPMetric(on bool) error {
	err := check(C.fulmen_logger_set_default_hp_metric(l.ptr(), C.bool(on)))
	runtime.KeepAlive(l)
	return err
}

// SetSubDir (TensorBoard) puts the files in subDir below the run's folder
// (Lightning's sub_dir; "": none); checkpoints stay in the run's folder.
func (l *FileLogger) SetSubDir(subDir string) error {
	return l.setText(subDir, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_set_sub_dir(p, s) })
}

// LogDir is the run's folder (Lightning's log_dir), made now if needed.
func (l *FileLogger) LogDir() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr { return C.fulmen_logger_log_dir(p, b, n, out) })
	runtime.KeepAlive(l)
	return s, err
}

// Version is the version number, resolved now if needed (-1 for a named version).
func (l *FileLogger) Version() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_logger_version(l.ptr(), &v))
	runtime.KeepAlive(l)
	return int64(v), err
}

// cStringArray copies strs into a C array of C strings; free releases both.
func cStringArray(strs []string) (arr **C.char, free func()) {
	mem := C.malloc(C.size_t(len(strs)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	ps := unsafe.Slice((**C.char)(mem), len(strs)+1)
	for i, s := range strs {
		ps[i] = cString(s)
	}
	ps[len(strs)] = nil
	return (**C.char)(mem), func() {
		for _, p := range ps[:len(strs)] {
			freeCString(p)
		}
		C.free(mem)
	}
}

// LogMetrics is Lightning's log_metrics(metrics, step): a CSV row (with a
// step column) or TensorBoard scalars at step, names prefixed.
func (l *FileLogger) LogMetrics(metrics map[string]float64, step int64) error {
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	names, free := cStringArray(keys)
	defer free()
	values := C.malloc(C.size_t(len(keys)+1) * C.size_t(unsafe.Sizeof(C.double(0))))
	defer C.free(values)
	vs := unsafe.Slice((*C.double)(values), len(keys)+1)
	for i, k := range keys {
		vs[i] = C.double(metrics[k])
	}
	err := check(C.fulmen_logger_log_metrics(l.ptr(), names, (*C.double)(values), C.size_t(len(keys)), C.int64_t(step)))
	runtime.KeepAlive(l)
	return err
}

// LogHyperparams is Lightning's log_hyperparams(params), values as text.
func (l *FileLogger) LogHyperparams(params map[string]string) error {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = params[k]
	}
	ks, freeKeys := cStringArray(keys)
	defer freeKeys()
	vs, freeValues := cStringArray(values)
	defer freeValues()
	err := check(C.fulmen_logger_log_hyperparams(l.ptr(), ks, vs, C.size_t(len(keys))))
	runtime.KeepAlive(l)
	return err
}

// AddImage (TensorBoard) is SummaryWriter.add_image(tag, image, step,
// dataformats): "CHW", "HWC", "HW" or another order ("" is "CHW"); 1, 3
// or 4 channels; uint8 as 0..255, other dtypes as 0..1.
func (l *FileLogger) AddImage(tag string, image *Tensor, step int64, dataformats string) error {
	t, f := cString(tag), cDataformats(dataformats)
	defer freeCString(t)
	defer freeCString(f)
	err := check(C.fulmen_logger_add_image(l.ptr(), t, image.ptr(), C.int64_t(step), f))
	runtime.KeepAlive(l)
	runtime.KeepAlive(image)
	return err
}

// AddHistogram (TensorBoard) is SummaryWriter.add_histogram(tag, values, step).
func (l *FileLogger) AddHistogram(tag string, values *Tensor, step int64) error {
	t := cString(tag)
	defer freeCString(t)
	err := check(C.fulmen_logger_add_histogram(l.ptr(), t, values.ptr(), C.int64_t(step)))
	runtime.KeepAlive(l)
	runtime.KeepAlive(values)
	return err
}

// AddText (TensorBoard) is SummaryWriter.add_text(tag, text, step).
func (l *FileLogger) AddText(tag, text string, step int64) error {
	t, x := cString(tag), cString(text)
	defer freeCString(t)
	defer freeCString(x)
	err := check(C.fulmen_logger_add_text(l.ptr(), t, x, C.int64_t(step)))
	runtime.KeepAlive(l)
	return err
}

// Save makes what was logged durable (Lightning's save()).
func (l *FileLogger) Save() error {
	err := check(C.fulmen_logger_save(l.ptr()))
	runtime.KeepAlive(l)
	return err
}

// Finalize ends the run (Lightning's finalize(status), e.g. "success").
func (l *FileLogger) Finalize(status string) error {
	return l.setText(status, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_finalize(p, s) })
}

// Close frees the logger (a CSV logger first writes the rows kept in
// memory); a Trainer it was added to keeps logging to it. Idempotent; the
// error is always nil.
func (l *FileLogger) Close() error {
	if l == nil {
		return nil
	}
	if h := l.h.take(); h != nil {
		C.fulmen_logger_free(h)
		runtime.SetFinalizer(l, nil)
	}
	return nil
}

// AddFileLogger adds a CSV or TensorBoard logger to the trainer (Lightning's
// Trainer(logger=[...])), next to the "logger" option's (set it to "false"
// to use only yours). The trainer shares it; l stays usable and may be
// closed while the trainer logs on to it.
func (t *Trainer) AddFileLogger(l *FileLogger) error {
	err := check(C.fulmen_trainer_add_file_logger(t.ptr(), l.ptr()))
	runtime.KeepAlive(t)
	runtime.KeepAlive(l)
	return err
}

// LogModel says which checkpoints an MlflowLogger uploads (Lightning's
// log_model).
type LogModel int32

// LogModel values.
const (
	// LogModelOff uploads none (log_model=False).
	LogModelOff LogModel = C.FULMEN_MLFLOW_LOG_MODEL_OFF
	// LogModelAtEnd uploads those on disk at Finalize (log_model=True).
	LogModelAtEnd LogModel = C.FULMEN_MLFLOW_LOG_MODEL_AT_END
	// LogModelAll uploads each when saved (log_model="all").
	LogModelAll LogModel = C.FULMEN_MLFLOW_LOG_MODEL_ALL
)

// MlflowLogger is Lightning's MLFlowLogger on an `mlflow server`
// (http://host:port): the experiment found or made by name and a run
// started on first use; the Set methods apply before that. LogMetrics,
// LogHyperparams, Finalize and Close are FileLogger's (its file settings
// fail with ErrInvalidArgument); add it with Trainer.AddFileLogger(&l.FileLogger)
// or Trainer.AddMlflowLogger.
type MlflowLogger struct {
	FileLogger
}

// NewMlflowLogger makes a logger of experiment ("" for "lightning_logs") at
// trackingURI ("" for MLFLOW_TRACKING_URI). https:// is ErrUnsupported.
func NewMlflowLogger(trackingURI, experiment string) (*MlflowLogger, error) {
	u, e := cString(trackingURI), cString(experiment)
	defer freeCString(u)
	defer freeCString(e)
	var out *C.fulmen_logger
	if err := check(C.fulmen_logger_mlflow_new(u, e, &out)); err != nil {
		return nil, err
	}
	l := &MlflowLogger{}
	l.h.store(out)
	runtime.SetFinalizer(l, func(m *MlflowLogger) { m.Close() })
	return l, nil
}

// SetRunName names the run (the mlflow.runName tag).
func (l *MlflowLogger) SetRunName(name string) error {
	return l.setText(name, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_mlflow_set_run_name(p, s) })
}

// SetTag sets a tag of the run (Lightning's tags).
func (l *MlflowLogger) SetTag(key, value string) error {
	k, v := cString(key), cString(value)
	defer freeCString(k)
	defer freeCString(v)
	err := check(C.fulmen_logger_mlflow_set_tag(l.ptr(), k, v))
	runtime.KeepAlive(l)
	return err
}

// SetLogModel says which checkpoints become artifacts (Lightning's log_model).
func (l *MlflowLogger) SetLogModel(mode LogModel) error {
	err := check(C.fulmen_logger_mlflow_set_log_model(l.ptr(), C.int32_t(mode)))
	runtime.KeepAlive(l)
	return err
}

// SetArtifactLocation is where a new experiment keeps its artifacts.
func (l *MlflowLogger) SetArtifactLocation(location string) error {
	return l.setText(location, func(p *C.fulmen_logger, s *C.char) cErr {
		return C.fulmen_logger_mlflow_set_artifact_location(p, s)
	})
}

// SetRunID logs into this existing run (Lightning's run_id).
func (l *MlflowLogger) SetRunID(id string) error {
	return l.setText(id, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_mlflow_set_run_id(p, s) })
}

// RunID is the run's id (Lightning's version), starting the run if needed.
func (l *MlflowLogger) RunID() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr { return C.fulmen_logger_mlflow_run_id(p, b, n, out) })
	runtime.KeepAlive(l)
	return s, err
}

// ExperimentID is the experiment's id (Lightning's name), starting the run if needed.
func (l *MlflowLogger) ExperimentID() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr {
		return C.fulmen_logger_mlflow_experiment_id(p, b, n, out)
	})
	runtime.KeepAlive(l)
	return s, err
}

// LogArtifact uploads the file at path into the run's artifact folder
// artifactPath ("" for the root).
func (l *MlflowLogger) LogArtifact(path, artifactPath string) error {
	p, a := cString(path), cString(artifactPath)
	defer freeCString(p)
	defer freeCString(a)
	err := check(C.fulmen_logger_mlflow_log_artifact(l.ptr(), p, a))
	runtime.KeepAlive(l)
	return err
}

// AddMlflowLogger adds an MLflow logger to the trainer, as AddFileLogger.
func (t *Trainer) AddMlflowLogger(l *MlflowLogger) error {
	err := t.AddFileLogger(&l.FileLogger)
	runtime.KeepAlive(l)
	return err
}

// cDataformats is dataformats as a C string, "CHW" when empty.
func cDataformats(dataformats string) *C.char {
	if dataformats == "" {
		dataformats = "CHW"
	}
	return cString(dataformats)
}

// AddImage logs image to the run's TensorBoard loggers when the hook
// returns (Lightning's self.logger.experiment.add_image in a hook), as
// FileLogger.AddImage converts it; ErrInvalidState when the run has none.
func (c *HookContext) AddImage(tag string, image *Tensor, step int64, dataformats string) error {
	t, f := cString(tag), cDataformats(dataformats)
	defer freeCString(t)
	defer freeCString(f)
	err := check(C.fulmen_hook_context_add_image(c.ptr(), t, image.ptr(), C.int64_t(step), f))
	runtime.KeepAlive(image)
	return err
}

// AddHistogram logs a histogram of values to the run's TensorBoard loggers
// when the hook returns.
func (c *HookContext) AddHistogram(tag string, values *Tensor, step int64) error {
	t := cString(tag)
	defer freeCString(t)
	err := check(C.fulmen_hook_context_add_histogram(c.ptr(), t, values.ptr(), C.int64_t(step)))
	runtime.KeepAlive(values)
	return err
}

// AddText logs a (markdown) text to the run's TensorBoard loggers when the
// hook returns.
func (c *HookContext) AddText(tag, text string, step int64) error {
	t, x := cString(tag), cString(text)
	defer freeCString(t)
	defer freeCString(x)
	return check(C.fulmen_hook_context_add_text(c.ptr(), t, x, C.int64_t(step)))
}

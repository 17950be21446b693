package fulmen

/*
#include <fulmen.h>
*/
import "C"

import "runtime"

// WandbLogger is Lightning's WandbLogger in W&B's offline mode: the run is
// written under saveDir/wandb/offline-run-<time>-<id>/ for `wandb sync`,
// started on first use; the Set methods apply before that. LogMetrics,
// LogHyperparams, Finalize and Close are FileLogger's (its file settings
// fail with ErrInvalidArgument); add it with Trainer.AddWandbLogger. The
// run ends with Finish, or when the logger is closed and no trainer holds
// it.
type WandbLogger struct {
	FileLogger
}

// NewWandbLogger makes a logger of project ("" for "lightning_logs") under
// saveDir ("" for the working directory).
func NewWandbLogger(saveDir, project string) (*WandbLogger, error) {
	d, p := cString(saveDir), cString(project)
	defer freeCString(d)
	defer freeCString(p)
	var out *C.fulmen_logger
	if err := check(C.fulmen_logger_wandb_new(d, p, &out)); err != nil {
		return nil, err
	}
	l := &WandbLogger{}
	l.h.store(out)
	runtime.SetFinalizer(l, func(w *WandbLogger) { w.Close() })
	return l, nil
}

// SetName sets the run's display name (Lightning's name).
func (l *WandbLogger) SetName(name string) error {
	return l.setText(name, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_wandb_set_name(p, s) })
}

// SetID sets the run's id (Lightning's id / version; "" for a random one).
func (l *WandbLogger) SetID(id string) error {
	return l.setText(id, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_wandb_set_id(p, s) })
}

// SetSetting sets "entity", "group", "job_type" or "notes".
func (l *WandbLogger) SetSetting(key, value string) error {
	k, v := cString(key), cString(value)
	defer freeCString(k)
	defer freeCString(v)
	err := check(C.fulmen_logger_wandb_set_setting(l.ptr(), k, v))
	runtime.KeepAlive(l)
	return err
}

// AddTag adds a tag of the run.
func (l *WandbLogger) AddTag(tag string) error {
	return l.setText(tag, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_wandb_add_tag(p, s) })
}

// RunID is the run's id (Lightning's version), starting the run if needed.
func (l *WandbLogger) RunID() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr { return C.fulmen_logger_wandb_run_id(p, b, n, out) })
	runtime.KeepAlive(l)
	return s, err
}

// RunDir is the run's folder (what `wandb sync` takes), starting the run
// if needed.
func (l *WandbLogger) RunDir() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr { return C.fulmen_logger_wandb_run_dir(p, b, n, out) })
	runtime.KeepAlive(l)
	return s, err
}

// Finish ends the run now with exitCode (wandb.finish); later logging
// fails with ErrInvalidState.
func (l *WandbLogger) Finish(exitCode int32) error {
	err := check(C.fulmen_logger_wandb_finish(l.ptr(), C.int32_t(exitCode)))
	runtime.KeepAlive(l)
	return err
}

// AddWandbLogger adds a W&B logger to the trainer, as AddFileLogger.
func (t *Trainer) AddWandbLogger(l *WandbLogger) error {
	err := t.AddFileLogger(&l.FileLogger)
	runtime.KeepAlive(l)
	return err
}

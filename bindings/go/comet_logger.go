package fulmen

/*
#include <fulmen.h>
*/
import "C"

import "runtime"

// CometLogger is Lightning's CometLogger in Comet's offline mode: the
// experiment is written as the archive offlineDir/<key>-<6 letters>.zip
// for `comet upload`, started on first use (its messages in a working
// folder until it ends); the Set methods apply before that. LogMetrics,
// LogHyperparams, Finalize and Close are FileLogger's (its file settings
// fail with ErrInvalidArgument); add it with Trainer.AddCometLogger. The
// experiment ends with End, or when the logger is closed and no trainer
// holds it.
type CometLogger struct {
	FileLogger
}

// NewCometLogger makes a logger of project ("" for none) whose archive goes
// to offlineDir ("" for the working directory).
func NewCometLogger(offlineDir, project string) (*CometLogger, error) {
	d, p := cString(offlineDir), cString(project)
	defer freeCString(d)
	defer freeCString(p)
	var out *C.fulmen_logger
	if err := check(C.fulmen_logger_comet_new(d, p, &out)); err != nil {
		return nil, err
	}
	l := &CometLogger{}
	l.h.store(out)
	runtime.SetFinalizer(l, func(c *CometLogger) { c.Close() })
	return l, nil
}

// SetName sets the experiment's name (Lightning's name).
func (l *CometLogger) SetName(name string) error {
	return l.setText(name, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_comet_set_name(p, s) })
}

// SetWorkspace sets the workspace the upload goes to ("" for the
// account's default).
func (l *CometLogger) SetWorkspace(workspace string) error {
	return l.setText(workspace, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_comet_set_workspace(p, s) })
}

// SetExperimentKey sets the experiment key: 32 to 50 letters and digits
// ("" for a random one).
func (l *CometLogger) SetExperimentKey(key string) error {
	return l.setText(key, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_comet_set_experiment_key(p, s) })
}

// SetMode sets how the upload treats the experiment: "get_or_create",
// "get" or "create".
func (l *CometLogger) SetMode(mode string) error {
	return l.setText(mode, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_comet_set_mode(p, s) })
}

// AddTag adds a tag of the experiment.
func (l *CometLogger) AddTag(tag string) error {
	return l.setText(tag, func(p *C.fulmen_logger, s *C.char) cErr { return C.fulmen_logger_comet_add_tag(p, s) })
}

// ExperimentKey is the experiment's key (Lightning's version), starting
// the experiment if needed.
func (l *CometLogger) ExperimentKey() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr {
		return C.fulmen_logger_comet_experiment_key(p, b, n, out)
	})
	runtime.KeepAlive(l)
	return s, err
}

// ArchivePath is the archive `comet upload` takes (there once the
// experiment ended), starting the experiment if needed.
func (l *CometLogger) ArchivePath() (string, error) {
	p := l.ptr()
	s, err := readString(func(b *C.char, n C.size_t, out *C.size_t) cErr {
		return C.fulmen_logger_comet_archive_path(p, b, n, out)
	})
	runtime.KeepAlive(l)
	return s, err
}

// End ends the experiment now, writing its archive; later logging fails
// with ErrInvalidState.
func (l *CometLogger) End() error {
	err := check(C.fulmen_logger_comet_end(l.ptr()))
	runtime.KeepAlive(l)
	return err
}

// AddCometLogger adds a Comet logger to the trainer, as AddFileLogger.
func (t *Trainer) AddCometLogger(l *CometLogger) error {
	err := t.AddFileLogger(&l.FileLogger)
	runtime.KeepAlive(l)
	return err
}

package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"sync"
)

// CheckpointIO is Lightning's CheckpointIO plugin: a store for the bytes
// of every checkpoint a trainer saves (ModelCheckpoint, last,
// on-exception, hpc, SaveCheckpoint; both formats), loads (ckptPath) and
// removes (ModelCheckpoint's older top-k files). Paths are those fulmen
// would use on disk; the store may map them anywhere. With the trainer
// option async_checkpoint_io, SaveCheckpoint runs on a background thread
// of the library (one call at a time either way). An error stops the run.
type CheckpointIO interface {
	// SaveCheckpoint stores data (a copy the store may keep) as path.
	SaveCheckpoint(data []byte, path string) error
	// LoadCheckpoint returns the bytes stored as path.
	LoadCheckpoint(path string) ([]byte, error)
	// RemoveCheckpoint removes path; one that is not there is no error.
	RemoveCheckpoint(path string) error
}

// checkpointIOHost is the Go state behind a trainer's plugin: the store,
// and the bytes of a load between its size query and its copy.
type checkpointIOHost struct {
	io          CheckpointIO
	mu          sync.Mutex
	loadingPath string
	loading     []byte
}

// SetCheckpointIO sends every checkpoint of the trainer through io
// (fulmen_trainer_set_checkpoint_io), replacing any plugin set before; nil
// goes back to local files. The trainer holds io until it is closed or
// the plugin is replaced.
func (t *Trainer) SetCheckpointIO(io CheckpointIO) error {
	if io == nil {
		err := check(C.fulmen_trainer_set_checkpoint_io(t.ptr(), nil))
		runtime.KeepAlive(t)
		return err
	}
	h := cgo.NewHandle(&checkpointIOHost{io: io})
	err := check(C.fulmen_go_trainer_set_checkpoint_io(t.ptr(), C.uintptr_t(h)))
	runtime.KeepAlive(t)
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
	}
	return err
}

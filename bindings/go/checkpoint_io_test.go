package fulmen_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// memoryIO is a CheckpointIO keeping checkpoints in a map.
type memoryIO struct {
	mu      sync.Mutex
	files   map[string][]byte
	saves   int
	removed []string
	failAt  int // the save of this number (1-based) fails; 0: none
}

func (m *memoryIO) SaveCheckpoint(data []byte, path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saves++
	if m.saves == m.failAt {
		return errors.New("the store is full")
	}
	m.files[path] = data
	return nil
}

func (m *memoryIO) LoadCheckpoint(path string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, found := m.files[path]
	if !found {
		return nil, errors.New(path + " is not stored")
	}
	return data, nil
}

func (m *memoryIO) RemoveCheckpoint(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removed = append(m.removed, path)
	delete(m.files, path)
	return nil
}

// Checkpoints go to the Go store, not to disk; a fit resumes from one;
// ModelCheckpoint's older file is removed through it; a failing save,
// asynchronous too, is the fit's error.
func TestCheckpointIOStoresResumesAndRemoves(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 32, 4)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	f, m := newFixture(t)
	defer f.model.Close()
	defer m.Close()
	dir := filepath.Join(t.TempDir(), "store")
	for _, async := range []string{"false", "true"} {
		store := &memoryIO{files: map[string][]byte{}}
		tr := quietTrainer(t, 3, "logger", "false", "async_checkpoint_io", async)
		o := fulmen.DefaultModelCheckpointOptions()
		o.Dirpath = dir
		ok(t, tr.AddModelCheckpoint(o))
		ok(t, tr.SetCheckpointIO(store))
		ok(t, tr.Fit(context.Background(), m, l, nil))
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("async=%s: checkpoints written to disk: %v", async, err)
		}
		// One file per epoch, the older ones removed (top 1).
		if store.saves != 3 || len(store.files) != 1 || len(store.removed) != 2 {
			t.Fatalf("async=%s: %d saves, files %v, removed %v", async, store.saves, store.files, store.removed)
		}
		var last string
		for p := range store.files {
			last = p
		}
		if !strings.HasSuffix(last, "epoch=2-step=12.ckpt") {
			t.Fatalf("async=%s: stored %q", async, last)
		}
		tr.Close()

		// Resuming from the stored checkpoint continues at step 12.
		again := quietTrainer(t, 4, "logger", "false", "enable_checkpointing", "false", "async_checkpoint_io", async)
		ok(t, again.SetCheckpointIO(store))
		ok(t, again.Fit(context.Background(), m, l, nil, fulmen.CkptPath(last)))
		if s := must(again.GlobalStep()); s != 16 {
			t.Fatalf("async=%s: resumed fit ended at step %d, want 16", async, s)
		}
		again.Close()

		// A failing save is the fit's error.
		failing := &memoryIO{files: map[string][]byte{}, failAt: 2}
		tf := quietTrainer(t, 3, "logger", "false", "async_checkpoint_io", async)
		ok(t, tf.AddModelCheckpoint(o))
		ok(t, tf.SetCheckpointIO(failing))
		err := tf.Fit(context.Background(), m, l, nil)
		if err == nil || !strings.Contains(err.Error(), "the store is full") {
			t.Fatalf("async=%s: fit with a failing store: %v", async, err)
		}
		tf.Close()
	}
}

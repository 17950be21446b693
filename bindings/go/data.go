package fulmen

/*
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"runtime/cgo"
	"strings"
	"unsafe"
)

// Dataset is a map-style dataset: samples addressed by index, handed out
// as batches. Loaders and subsets built on a dataset keep it alive, so it
// may be closed independently.
type Dataset struct {
	h handle[*C.fulmen_dataset]
}

func newDataset(h *C.fulmen_dataset) *Dataset {
	d := &Dataset{}
	d.h.store(h)
	runtime.SetFinalizer(d, (*Dataset).Close)
	return d
}

func (d *Dataset) ptr() *C.fulmen_dataset {
	if d == nil {
		gcStress()
		return nil
	}
	h := d.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the dataset handle; idempotent, and safe from any goroutine,
// also while a call uses the dataset: the library then frees it when that
// call returns. The error is always nil.
func (d *Dataset) Close() error {
	if d == nil {
		return nil
	}
	h := d.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_dataset_free(h)
	runtime.SetFinalizer(d, nil)
	return nil
}

// NewTensorDataset creates a dataset from tensors that share their first
// dimension (sample i is row i of each); it shares their storage.
func NewTensorDataset(tensors ...*Tensor) (*Dataset, error) {
	arr, n, hs := tensorArray(tensors)
	var out *C.fulmen_dataset
	err := check(C.fulmen_dataset_from_tensors(arr, n, &out))
	runtime.KeepAlive(tensors)
	runtime.KeepAlive(hs)
	if err != nil {
		return nil, err
	}
	return newDataset(out), nil
}

// CSVHeader says whether a CSV file has a header row.
type CSVHeader int32

// CSV header settings.
const (
	// CSVHeaderDetect detects a header row (the default).
	CSVHeaderDetect CSVHeader = -1
	// CSVNoHeader: the first row is data.
	CSVNoHeader CSVHeader = 0
	// CSVHasHeader: the first row is a header.
	CSVHasHeader CSVHeader = 1
)

// LoadCSV loads a .csv or .csv.gz file: features as float32 (N, F) and,
// with labels, class labels as int64 (N).
func LoadCSV(path string, opts CSVOptions) (*Dataset, error) {
	if opts.SkipRows < 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("SkipRows must be >= 0, got %d", opts.SkipRows)}
	}
	c := opts.c()
	if opts.LabelName != "" {
		c.label_name = cString(opts.LabelName)
		defer freeCString(c.label_name)
	}
	if opts.FeatureColumns != nil {
		c.feature_columns = cString(strings.Join(opts.FeatureColumns, ","))
		defer freeCString(c.feature_columns)
	}
	p := cString(path)
	defer freeCString(p)
	var out *C.fulmen_dataset
	if err := check(C.fulmen_dataset_from_csv(p, &c, &out)); err != nil {
		return nil, err
	}
	return newDataset(out), nil
}

func indexArg(indices []int64) *C.int64_t {
	if len(indices) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&indices[0]))
}

// Subset creates a dataset of the samples indices of d (which it keeps
// alive).
func (d *Dataset) Subset(indices []int64) (*Dataset, error) {
	var out *C.fulmen_dataset
	err := check(C.fulmen_dataset_subset(d.ptr(), indexArg(indices), C.size_t(len(indices)), &out))
	runtime.KeepAlive(d)
	runtime.KeepAlive(indices)
	if err != nil {
		return nil, err
	}
	return newDataset(out), nil
}

// SplitEvery splits d into every k-th sample starting at offset and the
// rest: with k = 5, a 20% holdout.
func (d *Dataset) SplitEvery(k, offset int) (every, rest *Dataset, err error) {
	var e, r *C.fulmen_dataset
	err = check(C.fulmen_dataset_split_every(d.ptr(), C.size_t(k), C.size_t(offset), &e, &r))
	runtime.KeepAlive(d)
	if err != nil {
		return nil, nil, err
	}
	return newDataset(e), newDataset(r), nil
}

// RandomSplit splits d at random into parts of lengths (counts summing to
// its length, or fractions summing to 1) with the permutation torch draws
// for seed: torch.utils.data.random_split with
// torch.Generator().manual_seed(seed). Close the parts.
func (d *Dataset) RandomSplit(lengths []float64, seed uint64) ([]*Dataset, error) {
	if len(lengths) == 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: "RandomSplit needs at least one length"}
	}
	outs := make([]*C.fulmen_dataset, len(lengths))
	var n C.size_t
	err := check(C.fulmen_dataset_random_split(d.ptr(), (*C.double)(&lengths[0]), C.size_t(len(lengths)), C.uint64_t(seed),
		&outs[0], C.size_t(len(outs)), &n))
	runtime.KeepAlive(d)
	runtime.KeepAlive(lengths)
	if err != nil {
		return nil, err
	}
	parts := make([]*Dataset, int(n))
	for i := range parts {
		parts[i] = newDataset(outs[i])
	}
	return parts, nil
}

// Len is the number of samples.
func (d *Dataset) Len() (int, error) {
	var v C.size_t
	err := check(C.fulmen_dataset_len(d.ptr(), &v))
	runtime.KeepAlive(d)
	return int(v), err
}

// Get fetches the samples indices as a batch, one tensor per dataset
// column. For a DataSource dataset it runs GetBatch while this goroutine
// waits.
func (d *Dataset) Get(indices []int64) ([]*Tensor, error) {
	out, err := fetchTensors(func(hs **C.fulmen_tensor, capacity C.size_t, count *C.size_t) *C.fulmen_error {
		return C.fulmen_dataset_get(d.ptr(), indexArg(indices), C.size_t(len(indices)), hs, capacity, count)
	})
	runtime.KeepAlive(d)
	runtime.KeepAlive(indices)
	return out, err
}

// fetchTensors calls a C function that writes up to capacity tensor handles
// and their count. Most batches have a few tensors; when there are more,
// the library reports how many and the call is made once more.
func fetchTensors(call func(hs **C.fulmen_tensor, capacity C.size_t, count *C.size_t) *C.fulmen_error) ([]*Tensor, error) {
	capacity := 8
	for attempt := 0; ; attempt++ {
		hs := make([]*C.fulmen_tensor, capacity)
		var count C.size_t
		err := withCallbacks(context.Background(), func() *C.fulmen_error {
			return call(&hs[0], C.size_t(capacity), &count)
		})
		if err != nil {
			if fe, ok := err.(*Error); ok && fe.Code == CodeOutOfRange && int(count) > capacity && attempt < 3 {
				capacity = int(count)
				continue
			}
			return nil, err
		}
		out := make([]*Tensor, int(count))
		for i := range out {
			out[i] = newTensor(hs[i])
		}
		return out, nil
	}
}

// DataSource is a map-style dataset implemented in Go. A runtime.Goexit in
// its functions (t.FailNow, t.Fatal, t.SkipNow) fails the call that ran
// them like an error naming the function: see "Callbacks and
// runtime.Goexit" in the package documentation.
type DataSource struct {
	// Len is the number of samples; called once, by NewSourceDataset.
	// Required.
	Len func() (int, error)
	// GetBatch pushes the batch of samples indices into b (for example
	// inputs, then targets, each with first dimension len(indices)).
	// Tensors it creates are released after it returns. Required.
	GetBatch func(indices []int64, b *BatchBuilder) error
	// AnyThread lets loaders with NumWorkers > 0 call GetBatch on their
	// worker threads, one call at a time, so reading overlaps training
	// (the vtable's any_thread). GetBatch then runs while a worker waits,
	// not the goroutine that called Fit: it must not depend on that
	// goroutine, and its error is not attached as the cause of Fit's (the
	// trainer's callback_timeout still applies). Without it, loaders with workers
	// refuse the dataset.
	AnyThread bool
}

// NewSourceDataset creates a dataset whose samples src provides. Its
// functions run while the goroutine that iterates the loader (the one that
// called Fit, ...) waits, or with AnyThread while a loader's worker thread
// waits, each call on a goroutine of its own.
func NewSourceDataset(src DataSource) (*Dataset, error) {
	if src.Len == nil || src.GetBatch == nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: "DataSource.Len and DataSource.GetBatch are required"}
	}
	s := src
	h := cgo.NewHandle(&s)
	var out *C.fulmen_dataset
	err := withCallbacks(context.Background(), func() *C.fulmen_error {
		return C.fulmen_go_dataset_from_source(C.uintptr_t(h), C.bool(s.AnyThread), &out)
	})
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return nil, err
	}
	return newDataset(out), nil
}

// Loader is something the trainer draws batches from: a loader over a
// dataset, or a Go Iterator.
type Loader struct {
	h handle[*C.fulmen_loader]
}

func newLoader(h *C.fulmen_loader) *Loader {
	l := &Loader{}
	l.h.store(h)
	runtime.SetFinalizer(l, (*Loader).Close)
	return l
}

func (l *Loader) ptr() *C.fulmen_loader {
	if l == nil {
		gcStress()
		return nil
	}
	h := l.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the loader; idempotent, and safe from any goroutine, also
// while a Fit uses the loader: the library then frees it when that call
// returns. The error is always nil.
func (l *Loader) Close() error {
	if l == nil {
		return nil
	}
	h := l.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_loader_free(h)
	runtime.SetFinalizer(l, nil)
	return nil
}

// release gives the loader's handle up (to the library, which takes it):
// the wrapper is closed. Nil when it was closed already.
func (l *Loader) release() *C.fulmen_loader {
	if l == nil {
		return nil
	}
	h := l.h.take()
	if h != nil {
		runtime.SetFinalizer(l, nil)
	}
	return h
}

// NewLoader creates a loader that batches ds (which it keeps alive).
func NewLoader(ds *Dataset, opts LoaderOptions) (*Loader, error) {
	if opts.BatchSize < 0 || opts.NumWorkers < 0 || opts.PrefetchFactor < 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf(
			"LoaderOptions: BatchSize %d, NumWorkers %d and PrefetchFactor %d must not be negative",
			opts.BatchSize, opts.NumWorkers, opts.PrefetchFactor)}
	}
	if opts.PrefetchFactor == 0 {
		opts.PrefetchFactor = int(C.fulmen_loader_options_default().prefetch_factor)
	}
	c := opts.c()
	var out *C.fulmen_loader
	err := check(C.fulmen_loader_new(ds.ptr(), &c, &out))
	runtime.KeepAlive(ds)
	if err != nil {
		return nil, err
	}
	return newLoader(out), nil
}

// Iterator is an iterable data source implemented in Go (like a PyTorch
// IterableDataset). A runtime.Goexit in its functions (t.FailNow, t.Fatal,
// t.SkipNow) fails the call that ran them like an error naming the
// function: see "Callbacks and runtime.Goexit" in the package
// documentation.
type Iterator struct {
	// Reset starts epoch epoch from the beginning. Optional.
	Reset func(epoch uint64) error
	// Next pushes the next batch into b, or returns done = true at the end
	// of the epoch (pushing nothing). Required.
	Next func(b *BatchBuilder) (done bool, err error)
	// NumBatches is the number of batches per epoch when known (used for
	// progress and limits); 0 or negative means unknown.
	NumBatches int
}

// NewIteratorLoader creates a loader that pulls batches from it.
func NewIteratorLoader(it Iterator) (*Loader, error) {
	if it.Next == nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: "Iterator.Next is required"}
	}
	n := int64(it.NumBatches)
	if n <= 0 {
		n = -1
	}
	s := it
	h := cgo.NewHandle(&s)
	var out *C.fulmen_loader
	err := check(C.fulmen_go_loader_from_iterator(C.uintptr_t(h), C.bool(it.Reset != nil), C.int64_t(n), &out))
	if err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return nil, err
	}
	return newLoader(out), nil
}

// Len is the number of batches per epoch; ErrUnsupported for an Iterator
// whose NumBatches is unknown.
func (l *Loader) Len() (int, error) {
	var v C.size_t
	err := check(C.fulmen_loader_len(l.ptr(), &v))
	runtime.KeepAlive(l)
	return int(v), err
}

// Shard creates a loader reading rank rank of world's share of l's dataset,
// as torch's DistributedSampler: the sample order (reshuffled per epoch
// with the loader's seed when shuffling) is padded by repeating its start
// to a multiple of world, and rank r takes samples r, r+world, ..., so
// every rank has as many batches. A rank outside 0..world-1 or a loader
// over an Iterator is ErrInvalidArgument.
func (l *Loader) Shard(rank, world int) (*Loader, error) {
	if rank < 0 || world < 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("rank %d is outside a world of %d", rank, world)}
	}
	var out *C.fulmen_loader
	err := check(C.fulmen_loader_shard(l.ptr(), C.size_t(rank), C.size_t(world), &out))
	runtime.KeepAlive(l)
	if err != nil {
		return nil, err
	}
	return newLoader(out), nil
}

// Batch fetches batch index of epoch in the order Fit would use (shuffled
// with the loader's seed and the epoch, and this rank's share for a
// Shard), for a Go-owned training loop: one tensor per dataset column. An
// index past the epoch is ErrOutOfRange, an Iterator loader
// ErrUnsupported. For a DataSource dataset it runs GetBatch while this
// goroutine waits.
func (l *Loader) Batch(epoch uint64, index int) ([]*Tensor, error) {
	if index < 0 {
		return nil, &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("batch index %d is negative", index)}
	}
	out, err := fetchTensors(func(hs **C.fulmen_tensor, capacity C.size_t, count *C.size_t) *C.fulmen_error {
		return C.fulmen_loader_batch(l.ptr(), C.uint64_t(epoch), C.size_t(index), hs, capacity, count)
	})
	runtime.KeepAlive(l)
	return out, err
}

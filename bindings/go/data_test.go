package fulmen_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestDatasets(t *testing.T) {
	noLeaks(t)
	ds := blobDataset(t, 10, 1)
	defer ds.Close()
	if n := must(ds.Len()); n != 10 {
		t.Fatalf("len %d", n)
	}
	batch := must(ds.Get([]int64{0, 3, 9}))
	if len(batch) != 2 {
		t.Fatalf("batch of %d tensors", len(batch))
	}
	if sh := must(batch[0].Shape()); !reflect.DeepEqual(sh, []int64{3, 2}) {
		t.Fatalf("x shape %v", sh)
	}
	if y := must(fulmen.ToSlice[int64](batch[1])); !reflect.DeepEqual(y, []int64{0, 1, 1}) {
		t.Fatalf("labels %v", y)
	}
	for _, b := range batch {
		b.Close()
	}
	if _, err := ds.Get([]int64{10}); !errors.Is(err, fulmen.ErrOutOfRange) && !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("index 10: %v", err)
	}
	sub := must(ds.Subset([]int64{1, 2, 3}))
	defer sub.Close()
	if n := must(sub.Len()); n != 3 {
		t.Fatalf("subset len %d", n)
	}
	every, rest, err := ds.SplitEvery(5, 0)
	ok(t, err)
	defer every.Close()
	defer rest.Close()
	if a, b := must(every.Len()), must(rest.Len()); a != 2 || b != 8 {
		t.Fatalf("split %d / %d", a, b)
	}
	if _, _, err := ds.SplitEvery(0, 0); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("split k=0: %v", err)
	}
	ok(t, ds.Close())
	ok(t, ds.Close())
	// The subset keeps its parent alive.
	if n := must(sub.Len()); n != 3 {
		t.Fatalf("subset len after parent close %d", n)
	}
	x := must(fulmen.Zeros(fulmen.Float32, 3, 2))
	y := must(fulmen.Zeros(fulmen.Int64, 4))
	defer x.Close()
	defer y.Close()
	if _, err := fulmen.NewTensorDataset(x, y); !errors.Is(err, fulmen.ErrShapeMismatch) {
		t.Fatalf("mismatched dataset: %v", err)
	}
}

func TestCSVDataset(t *testing.T) {
	noLeaks(t)
	path := filepath.Join(t.TempDir(), "d.csv")
	ok(t, os.WriteFile(path, []byte("a,b,label\n0,255,1\n51,102,0\n"), 0o644))
	o := fulmen.DefaultCSVOptions()
	if !o.HasLabels || o.LabelColumn != 0 || o.Header != fulmen.CSVHeaderDetect || o.Delimiter != ',' {
		t.Fatalf("csv defaults %+v", o)
	}
	o.LabelColumn = -1
	o.Header = fulmen.CSVHasHeader
	o.Scaling = fulmen.ScalingDivide
	o.ScaleDivisor = 255
	ds := must(fulmen.LoadCSV(path, o))
	defer ds.Close()
	b := must(ds.Get([]int64{0, 1}))
	defer b[0].Close()
	defer b[1].Close()
	if x := must(fulmen.ToSlice[float32](b[0])); !near(x, []float32{0, 1, 0.2, 0.4}) {
		t.Fatalf("features %v", x)
	}
	if y := must(fulmen.ToSlice[int64](b[1])); !reflect.DeepEqual(y, []int64{1, 0}) {
		t.Fatalf("labels %v", y)
	}
	if _, err := fulmen.LoadCSV(filepath.Join(t.TempDir(), "none.csv"), o); !errors.Is(err, fulmen.ErrIO) {
		t.Fatalf("missing csv: %v", err)
	}
}

func TestRandomSplitIsTorchs(t *testing.T) {
	noLeaks(t)
	x := must(fulmen.FromSlice([]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10))
	defer x.Close()
	ds := must(fulmen.NewTensorDataset(x))
	defer ds.Close()
	parts := must(ds.RandomSplit([]float64{0.5, 0.3, 0.2}, 7))
	for _, p := range parts {
		defer p.Close()
	}
	// torch's random_split(range(10), [0.5, 0.3, 0.2], manual_seed(7))
	b := must(parts[1].Get([]int64{0, 1, 2}))
	defer b[0].Close()
	if v := must(fulmen.ToSlice[float32](b[0])); !reflect.DeepEqual(v, []float32{7, 9, 6}) {
		t.Fatalf("second part %v", v)
	}
	if _, err := ds.RandomSplit([]float64{6, 5}, 7); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("lengths summing to 11: %v", err)
	}
}

func TestScalerFittedOnTrainScalesVal(t *testing.T) {
	noLeaks(t)
	tx := must(fulmen.FromSlice([]float32{0, 5, 10}, 3, 1))
	defer tx.Close()
	vx := must(fulmen.FromSlice([]float32{5, 15}, 2, 1))
	defer vx.Close()
	train := must(fulmen.NewTensorDataset(tx))
	defer train.Close()
	val := must(fulmen.NewTensorDataset(vx))
	defer val.Close()
	s := must(fulmen.FitScaler(train, 0, fulmen.ScalerMinMax))
	defer s.Close()
	lo, hi, err := s.Stats()
	ok(t, err)
	defer lo.Close()
	defer hi.Close()
	if v := must(fulmen.ToSlice[float64](hi)); !reflect.DeepEqual(v, []float64{10}) {
		t.Fatalf("max %v", v)
	}
	scaled := must(s.Apply(val))
	defer scaled.Close()
	b := must(scaled.Get([]int64{0, 1}))
	defer b[0].Close()
	if v := must(fulmen.ToSlice[float32](b[0])); !reflect.DeepEqual(v, []float32{0.5, 1.5}) {
		t.Fatalf("scaled %v", v)
	}
	if _, err := fulmen.FitScaler(train, 3, fulmen.ScalerStandardize); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("column 3: %v", err)
	}
}

func TestCSVColumnsByName(t *testing.T) {
	noLeaks(t)
	path := filepath.Join(t.TempDir(), "people.csv")
	ok(t, os.WriteFile(path, []byte("2,4\nage,income,city,bought\n30,1000,7,1\n40,,3,0\n"), 0o644))
	o := fulmen.DefaultCSVOptions()
	o.SkipRows = 1
	o.LabelName = "bought"
	o.FeatureColumns = []string{"income", "age"}
	if _, err := fulmen.LoadCSV(path, o); !errors.Is(err, fulmen.ErrFormat) || !strings.Contains(err.Error(), "a missing value") {
		t.Fatalf("missing value: %v", err)
	}
	ok(t, os.WriteFile(path, []byte("2,4\nage,income,city,bought\n30,1000,7,1\n40,2500,3,0\n"), 0o644))
	ds := must(fulmen.LoadCSV(path, o))
	defer ds.Close()
	b := must(ds.Get([]int64{0, 1}))
	defer b[0].Close()
	defer b[1].Close()
	if x := must(fulmen.ToSlice[float32](b[0])); !near(x, []float32{1000, 30, 2500, 40}) {
		t.Fatalf("features %v", x)
	}
	if y := must(fulmen.ToSlice[int64](b[1])); !reflect.DeepEqual(y, []int64{1, 0}) {
		t.Fatalf("labels %v", y)
	}
	o.FeatureColumns = []string{"price"}
	if _, err := fulmen.LoadCSV(path, o); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("unknown column: %v", err)
	}
	o.SkipRows = -1
	if _, err := fulmen.LoadCSV(path, o); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("negative SkipRows: %v", err)
	}
}

func TestLoaders(t *testing.T) {
	noLeaks(t)
	d := fulmen.DefaultLoaderOptions()
	if d.BatchSize != 1 || d.Shuffle || d.DropLast || d.PinMemory || d.NumWorkers != 0 || d.PrefetchFactor != 2 {
		t.Fatalf("loader defaults %+v", d)
	}
	ds := blobDataset(t, 10, 1)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4}))
	if n := must(l.Len()); n != 3 {
		t.Fatalf("loader len %d", n)
	}
	ok(t, l.Close())
	ok(t, l.Close())
	l = must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4, DropLast: true, Shuffle: true, Seed: 1}))
	defer l.Close()
	if n := must(l.Len()); n != 2 {
		t.Fatalf("drop_last loader len %d", n)
	}
	if _, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 0}); err == nil {
		t.Fatal("batch size 0 accepted")
	}
	// Workers over a tensors dataset; PrefetchFactor 0 is the default.
	workers := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4, NumWorkers: 3}))
	if n := must(workers.Len()); n != 3 {
		t.Fatalf("loader with workers: len %d", n)
	}
	ok(t, workers.Close())
	if _, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4, NumWorkers: 65}); !errors.Is(err,
		fulmen.ErrInvalidArgument) {
		t.Fatalf("65 workers: %v", err)
	}
	// PinMemory: the same batches, pinned where CUDA is available.
	pinning := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4, DropLast: true, Shuffle: true, Seed: 1,
		PinMemory: true}))
	defer pinning.Close()
	cuda := must(fulmen.GetAccelerator("cuda"))
	defer cuda.Close()
	a, p := must(l.Batch(1, 0)), must(pinning.Batch(1, 0))
	if must(p[0].IsPinned()) != must(cuda.IsAvailable()) || must(a[0].IsPinned()) {
		t.Fatal("pin_memory: pinned where CUDA is not, or not where it is")
	}
	ab, pb := make([]byte, 4*2*4), make([]byte, 4*2*4)
	ok(t, a[0].CopyTo(fulmen.Float32, ab))
	ok(t, p[0].CopyTo(fulmen.Float32, pb))
	if string(ab) != string(pb) {
		t.Fatal("pin_memory changed the batch")
	}
	for _, x := range append(a, p...) {
		ok(t, x.Close())
	}
	if _, err := l.Len(); err != nil {
		t.Fatal(err)
	}
}

// A Go data source: the tensors it creates are scope-owned.
func TestSourceDataset(t *testing.T) {
	noLeaks(t)
	xs, ys := blobs(20, 3)
	var scopedInside, closedAfter bool
	var made *fulmen.Tensor
	src := fulmen.DataSource{
		Len: func() (int, error) { return len(ys), nil },
		GetBatch: func(idx []int64, b *fulmen.BatchBuilder) error {
			x := make([]float32, 0, 2*len(idx))
			y := make([]int64, 0, len(idx))
			for _, i := range idx {
				x = append(x, xs[2*i], xs[2*i+1])
				y = append(y, ys[i])
			}
			xt, err := fulmen.FromSlice(x, int64(len(idx)), 2)
			if err != nil {
				return err
			}
			yt, err := fulmen.FromSlice(y)
			if err != nil {
				return err
			}
			scopedInside = xt.Scoped()
			made = xt
			if err := b.Push(xt); err != nil {
				return err
			}
			return b.Push(yt)
		},
	}
	ds := must(fulmen.NewSourceDataset(src))
	got := must(ds.Get([]int64{4, 5}))
	closedAfter = made.Closed()
	if !scopedInside || !closedAfter {
		t.Fatalf("scope: inside %v, closed after %v", scopedInside, closedAfter)
	}
	if got[0].Scoped() {
		t.Fatal("a tensor returned to the caller is scope-owned")
	}
	if y := must(fulmen.ToSlice[int64](got[1])); !reflect.DeepEqual(y, []int64{0, 1}) {
		t.Fatalf("labels %v", y)
	}
	got[0].Close()
	got[1].Close()
	ok(t, made.Close()) // no-op: the library freed it

	// A failing source surfaces with its code and Go cause.
	bad := errors.New("disk on fire")
	failing := must(fulmen.NewSourceDataset(fulmen.DataSource{
		Len:      func() (int, error) { return 3, nil },
		GetBatch: func([]int64, *fulmen.BatchBuilder) error { return bad },
	}))
	_, err := failing.Get([]int64{0})
	if !errors.Is(err, fulmen.ErrCallback) || !errors.Is(err, bad) {
		t.Fatalf("failing source: %v", err)
	}
	failing.Close()
	// Len failing: the dataset is not created (and the handle is released).
	_, err = fulmen.NewSourceDataset(fulmen.DataSource{
		Len:      func() (int, error) { return 0, bad },
		GetBatch: src.GetBatch,
	})
	if !errors.Is(err, bad) {
		t.Fatalf("failing len: %v", err)
	}
	if _, err := fulmen.NewSourceDataset(fulmen.DataSource{}); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("empty source: %v", err)
	}
	// Loader workers read datasets fulmen reads itself; a Go source is read
	// on the loop's goroutine unless it sets AnyThread (TestSourceWorkers).
	if _, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 2, NumWorkers: 2}); !errors.Is(err,
		fulmen.ErrInvalidArgument) {
		t.Fatalf("workers over a Go source: %v", err)
	}
	if _, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 2, NumWorkers: -1}); !errors.Is(err,
		fulmen.ErrInvalidArgument) {
		t.Fatalf("negative workers: %v", err)
	}
	ok(t, ds.Close())
}

// A Go source with AnyThread is read by the loader's worker threads, and
// gives the batches it gives without them.
func TestSourceWorkers(t *testing.T) {
	noLeaks(t)
	var calls atomic.Int64
	src := fulmen.DataSource{
		Len: func() (int, error) { return 40, nil },
		GetBatch: func(idx []int64, b *fulmen.BatchBuilder) error {
			calls.Add(1)
			v := make([]float32, len(idx))
			for i, x := range idx {
				v[i] = float32(x)
			}
			x, err := fulmen.FromSlice(v, int64(len(idx)), 1)
			if err != nil {
				return err
			}
			return b.Push(x)
		},
		AnyThread: true,
	}
	ds := must(fulmen.NewSourceDataset(src))
	defer ds.Close()
	plain := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 3, Shuffle: true, Seed: 5}))
	defer plain.Close()
	workers := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 3, Shuffle: true, Seed: 5, NumWorkers: 3}))
	defer workers.Close()
	want := batchesOf(t, plain)
	before := calls.Load()
	got := batchesOf(t, workers)
	if !reflect.DeepEqual(got, want) || len(got) != 14 {
		t.Fatalf("with workers %v, without %v", got, want)
	}
	if calls.Load()-before != 14 {
		t.Fatalf("%d GetBatch calls for 14 batches", calls.Load()-before)
	}
}

func TestIteratorLoader(t *testing.T) {
	noLeaks(t)
	if _, err := fulmen.NewIteratorLoader(fulmen.Iterator{}); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("iterator without Next: %v", err)
	}
	l := must(fulmen.NewIteratorLoader(fulmen.Iterator{
		Next: func(*fulmen.BatchBuilder) (bool, error) { return true, nil },
	}))
	if _, err := l.Len(); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("len of an unsized iterator: %v", err)
	}
	l.Close()
	l = must(fulmen.NewIteratorLoader(fulmen.Iterator{
		Next:       func(*fulmen.BatchBuilder) (bool, error) { return true, nil },
		NumBatches: 7,
	}))
	if n := must(l.Len()); n != 7 {
		t.Fatalf("len %d", n)
	}
	l.Close()
}

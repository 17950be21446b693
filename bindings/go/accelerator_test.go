package fulmen_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestAcceleratorRegistry(t *testing.T) {
	noLeaks(t)
	reg := must(fulmen.Registry())
	byName := map[string]fulmen.AcceleratorInfo{}
	for _, e := range reg {
		byName[e.Name] = e
		if e.Description == "" {
			t.Errorf("%s has no description", e.Name)
		}
	}
	if len(reg) < 4 || reg[0].Name != "cpu" {
		t.Fatalf("registry %+v: want cpu first, then cuda, mps, xla", reg)
	}
	if !byName["cpu"].Available {
		t.Error("cpu is not available")
	}
	// The test machines have no MPS or XLA device; the GPU kit runs these
	// tests where CUDA is available.
	for _, n := range []string{"cuda", "mps", "xla"} {
		e, present := byName[n]
		if !present {
			t.Errorf("%s is not in the registry", n)
		} else if e.Available != (n == "cuda" && cudaHere(t)) {
			t.Errorf("%s available: %v", n, e.Available)
		}
	}
	for _, alias := range []string{"auto", "gpu", "tpu"} {
		if _, present := byName[alias]; present {
			t.Errorf("alias %s is a registry entry", alias)
		}
	}
}

// cudaHere reports whether this machine has a CUDA device (the GPU kit
// runs these tests on one).
func cudaHere(t *testing.T) bool {
	t.Helper()
	cuda := must(fulmen.GetAccelerator("cuda"))
	defer cuda.Close()
	return must(cuda.IsAvailable())
}

func TestAcceleratorGet(t *testing.T) {
	noLeaks(t)
	// "auto" and "gpu" pick cuda where it is available.
	autoPick := "cpu"
	if cudaHere(t) {
		autoPick = "cuda"
	}
	for _, c := range []struct{ name, want string }{{"auto", autoPick}, {" CPU ", "cpu"}, {"tpu", "xla"}, {"cuda", "cuda"}} {
		a := must(fulmen.GetAccelerator(c.name))
		if got := must(a.Name()); got != c.want {
			t.Errorf("GetAccelerator(%q).Name() = %q, want %q", c.name, got, c.want)
		}
		ok(t, a.Close())
		ok(t, a.Close()) // idempotent
	}
	cpu := must(fulmen.GetAccelerator("cpu"))
	defer cpu.Close()
	if !must(cpu.IsAvailable()) || must(cpu.AutoDeviceCount()) != 1 {
		t.Error("cpu: want available with 1 auto device")
	}
	cuda := must(fulmen.GetAccelerator("cuda"))
	defer cuda.Close()
	if cudaHere(t) {
		if must(cuda.AutoDeviceCount()) < 1 {
			t.Error("cuda: available with no device")
		}
		gpu := must(fulmen.GetAccelerator("gpu"))
		if got := must(gpu.Name()); got != "cuda" {
			t.Errorf("gpu with CUDA available: %q", got)
		}
		ok(t, gpu.Close())
	} else {
		if must(cuda.IsAvailable()) || must(cuda.AutoDeviceCount()) != 0 {
			t.Error("cuda: want unavailable with 0 devices here")
		}
		if _, err := fulmen.GetAccelerator("gpu"); !errors.Is(err, fulmen.ErrUnavailable) {
			t.Errorf("gpu without a GPU: %v", err)
		}
	}

	_, err := fulmen.GetAccelerator("npu-that-does-not-exist")
	if !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), "cpu, cuda, mps, xla") {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := fulmen.GetAccelerator("a b"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}

	var closed fulmen.Accelerator
	if _, err := closed.Name(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("zero Accelerator: %v", err)
	}
}

func TestAcceleratorParseDevices(t *testing.T) {
	noLeaks(t)
	cpu := must(fulmen.GetAccelerator("cpu"))
	defer cpu.Close()
	cuda := must(fulmen.GetAccelerator("cuda"))
	defer cuda.Close()
	good := []struct {
		acc     *fulmen.Accelerator
		devices string
		want    []int64
	}{
		{cpu, "auto", []int64{0}},
		{cpu, "1", []int64{0}},
		{cpu, "3", []int64{0, 1, 2}},
		{cpu, "40", nil}, // more than the first buffer holds
	}
	for _, c := range good {
		got, err := c.acc.ParseDevices(c.devices)
		ok(t, err)
		want := c.want
		if c.devices == "40" {
			for i := int64(0); i < 40; i++ {
				want = append(want, i)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ParseDevices(%q) = %v, want %v", c.devices, got, want)
		}
	}
	bad := []struct {
		acc     *fulmen.Accelerator
		devices string
		code    *fulmen.Error
	}{
		{cpu, "0", fulmen.ErrInvalidArgument},
		{cpu, "-1", fulmen.ErrInvalidArgument},
		{cpu, "0,1", fulmen.ErrInvalidArgument},
		{cpu, "-2", fulmen.ErrInvalidArgument},
		{cpu, "two", fulmen.ErrInvalidArgument},
		{cpu, "[0, x]", fulmen.ErrInvalidArgument},
		{cuda, "0", fulmen.ErrInvalidArgument},
		{cuda, "[]", fulmen.ErrInvalidArgument},
		{cuda, "1,1", fulmen.ErrInvalidArgument},
	}
	if !cudaHere(t) {
		for _, devices := range []string{"1", "auto", "[0]"} {
			bad = append(bad, struct {
				acc     *fulmen.Accelerator
				devices string
				code    *fulmen.Error
			}{cuda, devices, fulmen.ErrUnavailable})
		}
	}
	for _, c := range bad {
		name := must(c.acc.Name())
		got, err := c.acc.ParseDevices(c.devices)
		if !errors.Is(err, c.code) {
			t.Errorf("%s ParseDevices(%q) = %v, %v; want %v", name, c.devices, got, err, c.code.Code)
		}
	}

	devs := must(cpu.ParallelDevices("2"))
	if len(devs) != 2 || devs[0] != (fulmen.Device{Type: fulmen.CPU}) || devs[1] != (fulmen.Device{Type: fulmen.CPU}) {
		t.Errorf("ParallelDevices(2) = %v", devs)
	}
	if _, err := cuda.ParallelDevices("1"); !cudaHere(t) && !errors.Is(err, fulmen.ErrUnavailable) {
		t.Errorf("cuda ParallelDevices: %v", err)
	}
}

func TestAcceleratorCPUStats(t *testing.T) {
	noLeaks(t)
	cpu := must(fulmen.GetAccelerator("cpu"))
	defer cpu.Close()
	dev := fulmen.Device{Type: fulmen.CPU}
	ok(t, cpu.SetupDevice(dev))
	if err := cpu.SetupDevice(fulmen.Device{Type: fulmen.CUDA}); err == nil {
		t.Error("cpu SetupDevice(cuda:0) succeeded")
	}
	stats := must(cpu.DeviceStats(dev))
	for _, k := range []string{"cpu_rss_bytes", "cpu_percent", "cpu_vm_percent", "cpu_swap_percent"} {
		if _, present := stats[k]; !present {
			t.Errorf("cpu stats %v lack %s", stats, k)
		}
	}
	if stats["cpu_rss_bytes"] <= 0 || stats["cpu_vm_percent"] <= 0 || stats["cpu_vm_percent"] > 100 {
		t.Errorf("implausible cpu stats %v", stats)
	}
	ok(t, cpu.Teardown())
}

// countingAccelerator is a custom accelerator computing on the CPU that
// counts its calls.
type countingAccelerator struct {
	mu                                           sync.Mutex
	available, counts, parallel, setup, teardown int
	stats, devices                               int
	setupDevice                                  fulmen.Device
	lastParallelIDs                              []int64
	panicIn                                      string
}

func (c *countingAccelerator) hit(name string, n *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*n++
	if c.panicIn == name {
		panic("boom in " + name)
	}
}

func (c *countingAccelerator) IsAvailable() (bool, error) {
	c.hit("IsAvailable", &c.available)
	return true, nil
}

func (c *countingAccelerator) AutoDeviceCount() (int, error) {
	c.hit("AutoDeviceCount", &c.counts)
	return c.devices, nil
}

func (c *countingAccelerator) ParallelDevices(ids []int64) ([]fulmen.Device, error) {
	c.hit("ParallelDevices", &c.parallel)
	c.lastParallelIDs = append([]int64(nil), ids...)
	out := make([]fulmen.Device, len(ids))
	for i := range out {
		out[i] = fulmen.Device{Type: fulmen.CPU}
	}
	return out, nil
}

func (c *countingAccelerator) SetupDevice(d fulmen.Device) error {
	c.hit("SetupDevice", &c.setup)
	c.setupDevice = d
	return nil
}

func (c *countingAccelerator) Teardown() error {
	c.hit("Teardown", &c.teardown)
	return nil
}

func (c *countingAccelerator) DeviceStats(d fulmen.Device) (map[string]float64, error) {
	c.hit("DeviceStats", &c.stats)
	return map[string]float64{"calls": float64(c.setup), "index": float64(d.Index)}, nil
}

// parsingAccelerator adds a ParseDevices of its own.
type parsingAccelerator struct {
	countingAccelerator
	seen []string
	ids  []int64
	err  error
}

func (p *parsingAccelerator) ParseDevices(devices string) ([]int64, error) {
	p.seen = append(p.seen, devices)
	return p.ids, p.err
}

// unique names per test, so a failed test cannot break the others.
var accSeq int

func accName() string {
	accSeq++
	return fmt.Sprintf("go-test-npu-%d", accSeq)
}

// fitWith trains the blob MLP for two epochs with the accelerator option
// set by acc (a handle) and extra options.
func fitWith(t *testing.T, acc *fulmen.Accelerator, kv ...string) (*fulmen.Trainer, error) {
	tr, _, err := fitDTypes(t, acc, kv...)
	return tr, err
}

// fitDTypes is fitWith, also returning the dtype of the logits the
// training steps computed.
func fitDTypes(t *testing.T, acc *fulmen.Accelerator, kv ...string) (*fulmen.Trainer, map[fulmen.DType]int, error) {
	t.Helper()
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	ok(t, o.SetInt("max_epochs", 2))
	ok(t, o.Set("default_root_dir", t.TempDir()))
	ok(t, o.SetBool("enable_progress_bar", false))
	ok(t, o.SetBool("enable_model_summary", false))
	ok(t, o.SetBool("logger", false))
	ok(t, o.SetBool("enable_checkpointing", false))
	ok(t, o.SetInt("seed", 3))
	if acc != nil {
		ok(t, o.SetAccelerator(acc))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		ok(t, o.Set(kv[i], kv[i+1]))
	}
	trainer := must(fulmen.NewTrainer(o))
	if fitWithThroughput {
		ok(t, trainer.AddThroughputMonitor(4, ""))
	}
	data := blobDataset(t, 128, 1)
	defer data.Close()
	loader := must(fulmen.NewLoader(data, fulmen.LoaderOptions{BatchSize: 16, Shuffle: true}))
	defer loader.Close()
	model := mlp(t)
	defer model.Close()
	dtypes := map[fulmen.DType]int{}
	module := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			logits, loss, err := lossOf(model, b)
			if err != nil {
				return nil, err
			}
			dtypes[must(logits.DType())]++
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			return loss, ctx.Log("train_loss", v, fulmen.LogOnEpoch, 0)
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer module.Close()
	err := trainer.Fit(context.Background(), module, loader, nil, fitRunOptions...)
	return trainer, dtypes, err
}

// fitRunOptions are given to the Fit of fitWith (a resume, say).
var fitRunOptions []fulmen.RunOption

// fitWithThroughput adds a ThroughputMonitor to the trainer of fitWith.
var fitWithThroughput bool

func TestCustomAcceleratorTrains(t *testing.T) {
	noLeaks(t)
	name := accName()
	acc := &countingAccelerator{devices: 2}
	ok(t, fulmen.RegisterAccelerator(name, "a Go test accelerator", acc, false))
	defer fulmen.UnregisterAccelerator(name)

	reg := must(fulmen.Registry())
	found := false
	for _, e := range reg {
		if e.Name == name {
			found = e.Available && e.Description == "a Go test accelerator"
		}
	}
	if !found {
		t.Fatalf("%s not listed as available in %+v", name, reg)
	}

	h := must(fulmen.GetAccelerator(strings.ToUpper(name)))
	defer h.Close()
	if must(h.Name()) != name || !must(h.IsAvailable()) || must(h.AutoDeviceCount()) != 2 {
		t.Fatal("the handle does not reach the Go accelerator")
	}
	// No ParseDevices: Lightning's GPU-style parser over AutoDeviceCount.
	if got := must(h.ParseDevices("-1")); fmt.Sprint(got) != "[0 1]" {
		t.Errorf("ParseDevices(-1) = %v", got)
	}
	if got := must(h.ParseDevices("1,")); fmt.Sprint(got) != "[1]" {
		t.Errorf("ParseDevices(1,) = %v", got)
	}
	if _, err := h.ParseDevices("[2]"); !errors.Is(err, fulmen.ErrUnavailable) {
		t.Errorf("ParseDevices([2]) with 2 devices: %v", err)
	}
	if got := must(h.ParallelDevices("[1]")); len(got) != 1 || got[0].Type != fulmen.CPU || fmt.Sprint(acc.lastParallelIDs) != "[1]" {
		t.Errorf("ParallelDevices([1]) = %v (ids %v)", got, acc.lastParallelIDs)
	}
	stats := must(h.DeviceStats(fulmen.Device{Type: fulmen.CPU, Index: 0}))
	if len(stats) != 2 || stats["calls"] != 0 {
		t.Errorf("DeviceStats = %v", stats)
	}

	*acc = countingAccelerator{devices: 2}
	trainer, err := fitWith(t, h, "devices", "1")
	defer trainer.Close()
	ok(t, err)
	if acc.setup != 1 || acc.teardown != 1 || acc.parallel != 1 {
		t.Errorf("setup %d, teardown %d, parallel %d calls in a fit; want 1 each", acc.setup, acc.teardown, acc.parallel)
	}
	if acc.setupDevice != (fulmen.Device{Type: fulmen.CPU}) {
		t.Errorf("set up %v", acc.setupDevice)
	}
	if loss := must(trainer.CallbackMetric("train_loss")); !(loss < 0.3) {
		t.Errorf("train_loss %v after a fit on %s", loss, name)
	}

	// Two devices on a single-device strategy: refused before any setup
	// (strategy "auto" would start a DDP job of two processes).
	*acc = countingAccelerator{devices: 2}
	tr2, err := fitWith(t, nil, "accelerator", name, "devices", "2", "strategy", "single_device")
	defer tr2.Close()
	if !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), `devices="2"`) {
		t.Errorf("devices=2: %v, want ErrInvalidArgument naming devices", err)
	}
	if acc.setup != 0 {
		t.Errorf("devices=2 set %d devices up", acc.setup)
	}

	// Strategy "dp" uses both devices in this process: every batch is split
	// in two, the model replicated, the losses averaged.
	*acc = countingAccelerator{devices: 2}
	tr3, err := fitWith(t, nil, "accelerator", name, "devices", "2", "strategy", "dp")
	defer tr3.Close()
	ok(t, err)
	if acc.setup != 1 {
		t.Errorf("dp set %d devices up, want the first one", acc.setup)
	}
	if loss := must(tr3.CallbackMetric("train_loss")); !(loss < 0.3) {
		t.Errorf("train_loss %v after a dp fit on %s", loss, name)
	}
}

func TestCustomAcceleratorParser(t *testing.T) {
	noLeaks(t)
	name := accName()
	acc := &parsingAccelerator{countingAccelerator: countingAccelerator{devices: 4}, ids: []int64{3}}
	ok(t, fulmen.RegisterAccelerator(name, "", acc, false))
	defer fulmen.UnregisterAccelerator(name)
	h := must(fulmen.GetAccelerator(name))
	defer h.Close()

	if got := must(h.ParseDevices("1")); fmt.Sprint(got) != "[3]" || len(acc.seen) != 1 {
		t.Errorf("ParseDevices = %v (seen %q)", got, acc.seen)
	}
	devs := must(h.ParallelDevices("1"))
	if len(devs) != 1 || fmt.Sprint(acc.lastParallelIDs) != "[3]" {
		t.Errorf("ParallelDevices = %v from ids %v", devs, acc.lastParallelIDs)
	}
	acc.seen = nil
	must(h.ParseDevices("auto"))
	must(h.ParseDevices("0,2"))
	// The library hands the parser the option in its normalised text form.
	if fmt.Sprint(acc.seen) != "[auto 0,2]" {
		t.Errorf("the Go parser saw %q for \"auto\" and \"0,2\"", acc.seen)
	}

	// Ids outside 0..AutoDeviceCount-1 or repeated are refused by the library.
	acc.ids = []int64{4}
	if _, err := h.ParseDevices("1"); !errors.Is(err, fulmen.ErrCallback) {
		t.Errorf("id 4 of 4 devices: %v", err)
	}
	acc.ids = []int64{1, 1}
	if _, err := h.ParseDevices("1"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("repeated id: %v", err)
	}
	// A *fulmen.Error keeps its code; another error is ErrCallback and the cause.
	acc.ids, acc.err = nil, &fulmen.Error{Code: fulmen.CodeUnavailable, Message: "no such NPU"}
	if _, err := h.ParseDevices("9"); !errors.Is(err, fulmen.ErrUnavailable) || !strings.Contains(err.Error(), "no such NPU") {
		t.Errorf("parser *Error: %v", err)
	}
	sentinel := errors.New("parser failed")
	acc.err = sentinel
	if _, err := h.ParseDevices("9"); !errors.Is(err, fulmen.ErrCallback) || !errors.Is(err, sentinel) {
		t.Errorf("parser error: %v", err)
	}
	acc.err = nil
	acc.ids = []int64{0}

	trainer, err := fitWith(t, h, "devices", "1")
	defer trainer.Close()
	ok(t, err)
	if acc.setup != 1 || acc.teardown != 1 {
		t.Errorf("setup %d, teardown %d", acc.setup, acc.teardown)
	}
}

func TestCustomAcceleratorPanics(t *testing.T) {
	noLeaks(t)
	name := accName()
	acc := &countingAccelerator{devices: 1}
	ok(t, fulmen.RegisterAccelerator(name, "", acc, false))
	defer fulmen.UnregisterAccelerator(name)
	h := must(fulmen.GetAccelerator(name))
	defer h.Close()

	for _, method := range []string{"ParallelDevices", "SetupDevice", "Teardown", "DeviceStats"} {
		acc.panicIn = method
		var err error
		switch method {
		case "ParallelDevices":
			_, err = h.ParallelDevices("1")
		case "SetupDevice":
			err = h.SetupDevice(fulmen.Device{Type: fulmen.CPU})
		case "Teardown":
			err = h.Teardown()
		case "DeviceStats":
			_, err = h.DeviceStats(fulmen.Device{Type: fulmen.CPU})
		}
		var pe *fulmen.PanicError
		if !errors.Is(err, fulmen.ErrCallback) || !errors.As(err, &pe) || pe.Value != "boom in "+method {
			t.Errorf("panic in %s: %v", method, err)
		}
	}

	// A panic in SetupDevice fails Fit with the panic as its cause.
	acc.panicIn = "SetupDevice"
	trainer, err := fitWith(t, h)
	defer trainer.Close()
	var pe *fulmen.PanicError
	if !errors.Is(err, fulmen.ErrCallback) || !errors.As(err, &pe) {
		t.Errorf("Fit with a panicking SetupDevice: %v", err)
	}

	// Asked directly, a panicking IsAvailable fails the call with the panic
	// as its cause; Fit reads it as "not available", the panic still being
	// the cause of its error.
	acc.panicIn = "IsAvailable"
	avail, err := h.IsAvailable()
	if avail || !errors.Is(err, fulmen.ErrCallback) || !errors.As(err, &pe) {
		t.Errorf("IsAvailable with a panic: %v, %v", avail, err)
	}
	tr2, err := fitWith(t, nil, "accelerator", name)
	defer tr2.Close()
	if !errors.Is(err, fulmen.ErrUnavailable) || !errors.As(err, &pe) {
		t.Errorf("Fit with a panicking IsAvailable: %v", err)
	}
}

// registerWatched registers a custom accelerator whose release by the library is seen
// through a finalizer of its Go value (held only by the cgo.Handle).
func registerWatched(t *testing.T, name string, override bool) (released chan struct{}, err error) {
	released = make(chan struct{})
	acc := &countingAccelerator{devices: 1}
	runtime.SetFinalizer(acc, func(*countingAccelerator) { close(released) })
	return released, fulmen.RegisterAccelerator(name, "watched", acc, override)
}

// waitReleased runs the GC until released is closed.
func waitReleased(released chan struct{}) bool {
	for i := 0; i < 50; i++ {
		runtime.GC()
		select {
		case <-released:
			return true
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}

func TestRegisterAcceleratorRefusals(t *testing.T) {
	noLeaks(t)
	name := accName()
	ok(t, fulmen.RegisterAccelerator(name, "first", &countingAccelerator{devices: 1}, false))
	defer fulmen.UnregisterAccelerator(name)

	for _, c := range []string{name, strings.ToUpper(name), "cpu", "cuda", "auto", "gpu", "tpu", "", "a b"} {
		released, err := registerWatched(t, c, false)
		if !errors.Is(err, fulmen.ErrInvalidArgument) {
			t.Errorf("RegisterAccelerator(%q): %v, want ErrInvalidArgument", c, err)
		}
		// A refused registration leaves the Go value to the binding, which
		// deletes its handle.
		if !waitReleased(released) {
			t.Errorf("RegisterAccelerator(%q) refused, but the Go value was never released", c)
		}
	}
	for _, c := range []string{"auto", "gpu", "tpu"} {
		if _, err := registerWatched(t, c, true); !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("override of %q: %v", c, err)
		}
	}
	if err := fulmen.RegisterAccelerator("x", "", nil, false); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("nil accelerator: %v", err)
	}
	if err := fulmen.UnregisterAccelerator("go-test-never-registered"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("unregistering an unknown name: %v", err)
	}

	// Override replaces (and releases) the previous one.
	released, err := registerWatched(t, name, true)
	ok(t, err)
	if d := description(t, name); d != "watched" {
		t.Errorf("after override the description is %q", d)
	}
	ok(t, fulmen.RegisterAccelerator(name, "third", &countingAccelerator{devices: 1}, true))
	if !waitReleased(released) {
		t.Error("the replaced accelerator was never released")
	}
}

func description(t *testing.T, name string) string {
	for _, e := range must(fulmen.Registry()) {
		if e.Name == name {
			return e.Description
		}
	}
	return ""
}

func TestUnregisterAcceleratorReleases(t *testing.T) {
	noLeaks(t)
	name := accName()
	released, err := registerWatched(t, name, false)
	ok(t, err)
	h := must(fulmen.GetAccelerator(name))
	ok(t, fulmen.UnregisterAccelerator(name))
	if _, err := fulmen.GetAccelerator(name); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("GetAccelerator after unregister: %v", err)
	}
	// The open handle still uses it.
	if !must(h.IsAvailable()) {
		t.Error("the handle lost its accelerator")
	}
	if waitReleased(released) {
		t.Fatal("released while a handle still uses it")
	}
	ok(t, h.Close())
	if !waitReleased(released) {
		t.Error("unregistered and closed, but the Go value was never released")
	}
	if err := fulmen.UnregisterAccelerator(name); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("second unregister: %v", err)
	}
}

func TestPrecisionBF16MixedFit(t *testing.T) {
	noLeaks(t)
	cpu := must(fulmen.GetAccelerator("cpu"))
	defer cpu.Close()
	trainer, dtypes, err := fitDTypes(t, cpu, "precision", "bf16-mixed", "devices", "1")
	defer trainer.Close()
	ok(t, err)
	// Autocast computes the linear layers in bfloat16.
	if len(dtypes) != 1 || dtypes[fulmen.BHalf] != 16 {
		t.Errorf("bf16-mixed logits dtypes %v, want 16 steps of bfloat16", dtypes)
	}
	tr32, dtypes, err := fitDTypes(t, cpu)
	defer tr32.Close()
	ok(t, err)
	if len(dtypes) != 1 || dtypes[fulmen.Float32] != 16 {
		t.Errorf("32-true logits dtypes %v", dtypes)
	}
	loss := must(trainer.CallbackMetric("train_loss"))
	if !(loss < 0.5) {
		t.Errorf("bf16-mixed train_loss %v", loss)
	}

	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	if err := o.Set("precision", "bf17"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("precision bf17: %v", err)
	}
	if err := o.Set("devices", "two"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("devices two: %v", err)
	}
	var nilAcc *fulmen.Accelerator
	if err := o.SetAccelerator(nilAcc); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("SetAccelerator(nil): %v", err)
	}
}

package fulmen_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// npuAccelerator is Lightning's XPUAccelerator example written in Go: its
// devices are PrivateUse1 devices (the fake device registered as "npu").
type npuAccelerator struct{ setup []fulmen.Device }

func (a *npuAccelerator) IsAvailable() (bool, error) { return true, nil }
func (a *npuAccelerator) AutoDeviceCount() (int, error) {
	return fulmen.DeviceCount(fulmen.PrivateUse1)
}
func (a *npuAccelerator) ParallelDevices(ids []int64) ([]fulmen.Device, error) {
	out := make([]fulmen.Device, len(ids))
	for i, id := range ids {
		out[i] = fulmen.Device{Type: fulmen.PrivateUse1, Index: id}
	}
	return out, nil
}
func (a *npuAccelerator) SetupDevice(d fulmen.Device) error {
	a.setup = append(a.setup, d)
	return nil
}
func (a *npuAccelerator) Teardown() error { return nil }
func (a *npuAccelerator) DeviceStats(fulmen.Device) (map[string]float64, error) {
	return nil, nil
}

// noBF16 is npuAccelerator without bfloat16 (DTypeSupport).
type noBF16 struct{ npuAccelerator }

func (noBF16) SupportsDType(d fulmen.DType) (bool, error) { return d != fulmen.BHalf, nil }

// vendorRNG is npuAccelerator with its own generator (RNGStateKeeper) and
// synchronize (DeviceSynchronizer), counting the calls.
type vendorRNG struct {
	npuAccelerator
	state             uint64
	gets, sets, syncs int
}

func (v *vendorRNG) RNGState(fulmen.Device) ([]byte, error) {
	v.gets++
	return []byte{byte(v.state), byte(v.state >> 8)}, nil
}
func (v *vendorRNG) SetRNGState(_ fulmen.Device, s []byte) error {
	if len(s) != 2 {
		return errors.New("not a vendor generator state")
	}
	v.sets++
	v.state = uint64(s[0]) | uint64(s[1])<<8
	return nil
}
func (v *vendorRNG) Synchronize(fulmen.Device) error { v.syncs++; return nil }

// soloCollectives is npuAccelerator with a collectives hook for a world of
// one (a vendor's group would call its library), counting the calls.
type soloCollectives struct {
	npuAccelerator
	opened, closed, allReduce, broadcast, allGather int
	storeErr                                        error
}

func (c *soloCollectives) CollectivesName() string { return "solo" }
func (c *soloCollectives) OpenCollectives(store fulmen.DistStore, rank, world int, device fulmen.Device) (fulmen.CollectiveGroup, error) {
	c.opened++
	if rank != 0 || world != 1 || device != (fulmen.Device{Type: fulmen.PrivateUse1}) {
		return nil, errors.New("the group's place is wrong")
	}
	// The ranks share a unique id through the store.
	if err := store.Set("unique-id", []byte{1, 2, 3}); err != nil {
		return nil, err
	}
	if id, err := store.Get("unique-id"); err != nil || string(id) != "\x01\x02\x03" {
		c.storeErr = errors.New("the store's value")
	}
	if n, err := store.Add("joined", 1); err != nil || n != 1 {
		c.storeErr = errors.New("the store's counter")
	}
	if deleted, err := store.Delete("joined"); err != nil || !deleted {
		c.storeErr = errors.New("the store's delete")
	}
	return soloGroup{c}, nil
}

type soloGroup struct{ c *soloCollectives }

func (g soloGroup) AllReduce(ts []*fulmen.Tensor, op fulmen.ReduceOp) error {
	g.c.allReduce++
	for _, t := range ts { // one rank: its own values, written back in place
		v, err := fulmen.ToSlice[float64](t)
		if err != nil {
			return err
		}
		if err := fulmen.CopyFromSlice(t, v); err != nil {
			return err
		}
	}
	return nil
}
func (g soloGroup) Broadcast(ts []*fulmen.Tensor, root int) error { g.c.broadcast++; return nil }
func (g soloGroup) AllGather(in *fulmen.Tensor, outs []*fulmen.Tensor) error {
	g.c.allGather++
	if len(outs) != 1 {
		return errors.New("one output per rank")
	}
	return outs[0].CopyInPlace(in)
}
func (g soloGroup) Barrier() error { return nil }
func (g soloGroup) Close()         { g.c.closed++ }

// TestCustomDevice runs customDevice in a child process: registering the
// fake device changes libtorch for the whole process, for good.
func TestCustomDevice(t *testing.T) {
	if os.Getenv("FULMEN_GO_FAKE_DEVICE_CHILD") == "1" {
		customDevice(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCustomDevice$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "FULMEN_GO_FAKE_DEVICE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCustomDevice") {
		t.Fatalf("the child process failed (%v):\n%s", err, out)
	}
}

func customDevice(t *testing.T) {
	ok(t, fulmen.RegisterFakeDevice("npu", 2))
	if name := must(fulmen.DeviceTypeName(fulmen.PrivateUse1)); name != "npu" {
		t.Fatalf("PrivateUse1 is named %q", name)
	}
	if n := must(fulmen.DeviceCount(fulmen.PrivateUse1)); n != 2 {
		t.Fatalf("%d npu devices", n)
	}
	if err := fulmen.RegisterFakeDevice("hpx", 2); !errors.Is(err, fulmen.ErrTorch) {
		t.Fatalf("a second name: %v", err)
	}
	if err := fulmen.RegisterFakeDevice("npu", -1); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("a negative count: %v", err)
	}

	// A tensor on npu:1 and back; reading a value waits for the device.
	x := must(fulmen.FromSlice([]float32{1, -2, 3}))
	defer x.Close()
	on := must(x.ToDevice(fulmen.Device{Type: fulmen.PrivateUse1, Index: 1}))
	defer on.Close()
	four := must(fulmen.FromSlice([]float32{4}))
	defer four.Close()
	one := must(four.ToDevice(fulmen.Device{Type: fulmen.PrivateUse1, Index: 1}))
	defer one.Close()
	reads := must(fulmen.FakeDeviceHostReads())
	if v := must(one.Item()); v != 4 {
		t.Fatalf("read %v from npu:1", v)
	}
	if now := must(fulmen.FakeDeviceHostReads()); now != reads+1 {
		t.Fatalf("one read counted as %d", now-reads)
	}
	if err := fulmen.SetSyncDebugMode(fulmen.PrivateUse1, 2); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("a sync debug mode for npu: %v", err)
	}
	if d := must(on.Device()); d != (fulmen.Device{Type: fulmen.PrivateUse1, Index: 1}) {
		t.Fatalf("tensor on %v", d)
	}
	if _, err := x.ToDevice(fulmen.Device{Type: fulmen.XPU}); !errors.Is(err, fulmen.ErrUnavailable) {
		t.Fatalf("to xpu without a backend: %v", err)
	}

	// The accelerator trains on npu:0 what the CPU trains, weight for weight.
	acc := &npuAccelerator{}
	ok(t, fulmen.RegisterAccelerator("npu", "the fake PrivateUse1 device", acc, false))
	defer fulmen.UnregisterAccelerator("npu")
	// The same initial weights for both (the model is drawn before fit).
	ok(t, fulmen.ManualSeed(5))
	onNpu, err := fitWith(t, nil, "accelerator", "npu", "devices", "1")
	defer onNpu.Close()
	ok(t, err)
	ok(t, fulmen.ManualSeed(5))
	onCPU, err := fitWith(t, nil, "accelerator", "cpu", "devices", "1")
	defer onCPU.Close()
	ok(t, err)
	npuLoss, cpuLoss := must(onNpu.CallbackMetric("train_loss")), must(onCPU.CallbackMetric("train_loss"))
	if npuLoss != cpuLoss || !(npuLoss < 0.3) {
		t.Fatalf("train_loss on npu %v, on the CPU %v", npuLoss, cpuLoss)
	}
	if len(acc.setup) != 1 || acc.setup[0] != (fulmen.Device{Type: fulmen.PrivateUse1}) {
		t.Fatalf("set up %v", acc.setup)
	}

	// DTypeSupport: bf16-mixed is refused on devices without bfloat16.
	ok(t, fulmen.RegisterAccelerator("npu_nobf16", "no bfloat16", &noBF16{}, false))
	defer fulmen.UnregisterAccelerator("npu_nobf16")
	refused, err := fitWith(t, nil, "accelerator", "npu_nobf16", "devices", "1", "precision", "bf16-mixed")
	defer refused.Close()
	if !errors.Is(err, fulmen.ErrUnsupported) || !strings.Contains(err.Error(), "does not support") {
		t.Fatalf("bf16-mixed without bfloat16: %v", err)
	}

	// The device's generator and synchronize through libtorch.
	npu0 := fulmen.Device{Type: fulmen.PrivateUse1}
	state := must(fulmen.DeviceRNGState(npu0))
	if len(state) == 0 {
		t.Fatal("no generator state for npu:0")
	}
	ok(t, fulmen.SetDeviceRNGState(npu0, state))
	ok(t, fulmen.DeviceSynchronize(fulmen.Device{Type: fulmen.PrivateUse1, Index: 1}))
	// A vendor generator: checkpoints keep it; a resume restores it.
	v := &vendorRNG{state: 1234}
	ok(t, fulmen.RegisterAccelerator("npu_rng", "a vendor generator", v, false))
	defer fulmen.UnregisterAccelerator("npu_rng")
	root := t.TempDir()
	fitWithThroughput = true // it synchronizes the device before reading its clock
	first, err := fitWith(t, nil, "accelerator", "npu_rng", "devices", "1", "enable_checkpointing", "true", "default_root_dir", root)
	fitWithThroughput = false
	first.Close()
	ok(t, err)
	if v.syncs < 16 { // 8 batches an epoch, 2 epochs
		t.Fatalf("Synchronize ran %d times", v.syncs)
	}
	v.state = 99
	fitRunOptions = []fulmen.RunOption{fulmen.CkptPath("last")}
	resumed, err := fitWith(t, nil, "accelerator", "npu_rng", "devices", "1", "max_epochs", "3",
		"enable_checkpointing", "true", "default_root_dir", root)
	fitRunOptions = nil
	resumed.Close()
	ok(t, err)
	if v.gets < 1 || v.sets != 1 || v.state != 1234 {
		t.Fatalf("vendor generator: %+v", *v)
	}

	// Collectives: DDP in a world of one through the accelerator's hook
	// trains what the CPU trains.
	coll := &soloCollectives{}
	ok(t, fulmen.RegisterAccelerator("npu_ddp", "with collectives", coll, false))
	defer fulmen.UnregisterAccelerator("npu_ddp")
	ok(t, fulmen.ManualSeed(5))
	onDDP, err := fitWith(t, nil, "accelerator", "npu_ddp", "devices", "1", "strategy", "ddp")
	defer onDDP.Close()
	ok(t, err)
	ok(t, fulmen.DistributedShutdown(60*time.Second))
	if ddpLoss := must(onDDP.CallbackMetric("train_loss")); ddpLoss != cpuLoss {
		t.Fatalf("train_loss with ddp on npu %v, on the CPU %v", ddpLoss, cpuLoss)
	}
	ok(t, coll.storeErr)
	if coll.opened != 1 || coll.closed != 1 || coll.allReduce < 8 || coll.broadcast < 1 || coll.allGather < 1 {
		t.Fatalf("collectives calls: %+v", *coll)
	}
	t.Logf("ddp through the accelerator's collectives: train_loss %v, %d all_reduce calls", cpuLoss, coll.allReduce)
}

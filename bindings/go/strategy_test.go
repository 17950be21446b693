package fulmen_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// Nothing here joins a distributed job in this process or starts another
// rank: the one test that joins (a world of one) runs in a fresh run of
// this test binary.

func TestStrategyNameAndUnknownNames(t *testing.T) {
	noLeaks(t)
	for name, want := range map[string]string{"ddp": "ddp", " DDP_Spawn ": "ddp_spawn", "single_device": "single_device"} {
		s := must(fulmen.NewStrategy(name))
		if got := must(s.Name()); got != want {
			t.Errorf("NewStrategy(%q).Name() = %q, want %q", name, got, want)
		}
		ok(t, s.Close())
	}
	_, err := fulmen.NewStrategy("nope")
	if !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), "ddp") {
		t.Errorf("an unknown strategy: %v", err)
	}
	if _, err := fulmen.NewStrategy("deepspeed"); !errors.Is(err, fulmen.ErrInvalidArgument) || !strings.Contains(err.Error(), "not available") {
		t.Errorf("deepspeed: %v", err)
	}
	// FSDP and its settings.
	fsdp := must(fulmen.NewStrategy("fsdp"))
	defer fsdp.Close()
	ok(t, fsdp.Set("sharding_strategy", "SHARD_GRAD_OP"))
	ok(t, fsdp.Set("auto_wrap_policy", "Linear"))
	ok(t, fsdp.Set("state_dict_type", "sharded"))
	ok(t, fsdp.Set("sharding_strategy", "HYBRID_SHARD"))
	ok(t, fsdp.Set("param_dtype", "bf16"))
	ok(t, fsdp.Set("reduce_dtype", "fp32"))
	if err := fsdp.Set("state_dict_type", "local"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("state_dict_type local: %v", err)
	}
	if err := fsdp.Set("sharding_strategy", "SHARD_ALL"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("SHARD_ALL: %v", err)
	}
}

func TestStrategySet(t *testing.T) {
	noLeaks(t)
	s := must(fulmen.NewStrategy("ddp"))
	defer s.Close()
	for _, kv := range [][2]string{
		{"find_unused_parameters", "true"}, {"find_unused_parameters", "false"},
		{"process_group_backend", "gloo"}, {"process_group_backend", "none"},
		{"timeout", "60"}, {"timeout", "2.5"}, {"bucket_cap_mb", "10"}, {"num_nodes", "1"},
	} {
		ok(t, s.Set(kv[0], kv[1]))
	}
	for _, kv := range [][2]string{
		{"colour", "red"}, {"timeout", "-1"}, {"timeout", "soon"}, {"bucket_cap_mb", "0"},
		{"num_nodes", "0"}, {"num_nodes", "1.5"}, {"find_unused_parameters", "maybe"},
		{"process_group_backend", "mpi"},
	} {
		if err := s.Set(kv[0], kv[1]); !errors.Is(err, fulmen.ErrInvalidArgument) {
			t.Errorf("Set(%q, %q): %v", kv[0], kv[1], err)
		}
		// The strategy is unchanged and still usable.
		if name := must(s.Name()); name != "ddp" {
			t.Errorf("name after a refused setting: %q", name)
		}
	}
	if err := s.Set("colour", "red"); err == nil || !strings.Contains(err.Error(), "find_unused_parameters") {
		t.Errorf("an unknown key should list the known ones: %v", err)
	}
	ok(t, s.Set("timeout", "30"))

	ok(t, s.Close())
	ok(t, s.Close()) // idempotent
	if err := s.Set("timeout", "1"); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("Set on a closed strategy: %v", err)
	}
	if _, err := s.Name(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("Name of a closed strategy: %v", err)
	}
}

func TestStrategyRegistry(t *testing.T) {
	noLeaks(t)
	entries := must(fulmen.StrategyRegistry())
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name] = true
		if e.Description == "" {
			t.Errorf("%s has no description", e.Name)
		}
		s := must(fulmen.NewStrategy(e.Name))
		if got := must(s.Name()); got != e.Name {
			t.Errorf("NewStrategy(%q).Name() = %q", e.Name, got)
		}
		ok(t, s.Close())
	}
	for _, want := range []string{"auto", "single_device", "ddp"} {
		if !names[want] {
			t.Errorf("registry %v lacks %q", entries, want)
		}
	}
}

func TestTrainerOptionsSetStrategy(t *testing.T) {
	noLeaks(t)
	s := must(fulmen.NewStrategy("ddp"))
	defer s.Close()
	ok(t, s.Set("timeout", "120"))
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	ok(t, o.SetStrategy(s))
	ok(t, o.Set("strategy", "ddp_spawn"))
	if err := o.Set("strategy", "deepspeed"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("strategy=deepspeed: %v", err)
	}
	ok(t, o.Set("strategy", "fsdp"))
	ok(t, o.Set("fsdp_sharding_strategy", "NO_SHARD"))
	if err := o.Set("strategy", "nope"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("strategy=nope: %v", err)
	}
	closed := must(fulmen.NewStrategy("ddp"))
	ok(t, closed.Close())
	if err := o.SetStrategy(closed); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("a closed strategy: %v", err)
	}
	if err := o.SetStrategy(nil); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("a nil strategy: %v", err)
	}
}

func TestFitWithSingleDeviceStrategyAndSyncDist(t *testing.T) {
	noLeaks(t)
	var group uint32
	if fulmen.LogSyncDist != 8 {
		t.Fatalf("LogSyncDist = %d", fulmen.LogSyncDist)
	}
	ds := blobDataset(t, 32, 4)
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer l.Close()
	model := mlp(t)
	defer model.Close()
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, loss, err := lossOf(model, b)
			if err != nil {
				return nil, err
			}
			v, err := loss.Item()
			if err != nil {
				return nil, err
			}
			if err := ctx.Log("loss", v, fulmen.LogOnEpoch|fulmen.LogSyncDist, 0); err != nil {
				return nil, err
			}
			return loss, ctx.Log("in_group", 3, fulmen.LogOnEpoch|fulmen.LogSyncDist|fulmen.LogReduceSum|fulmen.LogGroup(group), 0)
		},
		OnHook: func(h fulmen.Hook, ctx *fulmen.HookContext) error {
			if h != fulmen.HookSetup {
				return nil
			}
			// One process: rank 0 is the only rank a group can hold.
			if _, err := ctx.NewGroup([]int{1}); !errors.Is(err, fulmen.ErrInvalidArgument) {
				t.Errorf("NewGroup([1]) in one process: %v", err)
			}
			var err error
			group, err = ctx.NewGroup([]int{0})
			return err
		},
		ConfigureOptimizers: sgd(model, 0.1),
	}))
	defer m.Close()
	s := must(fulmen.NewStrategy("single_device"))
	defer s.Close()
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	for k, v := range map[string]string{"max_epochs": "1", "enable_progress_bar": "false", "logger": "false",
		"enable_checkpointing": "false", "enable_model_summary": "false"} {
		ok(t, o.Set(k, v))
	}
	ok(t, o.SetStrategy(s))
	tr := must(fulmen.NewTrainer(o))
	defer tr.Close()
	ok(t, tr.Fit(context.Background(), m, l, nil))
	if n := must(tr.GlobalStep()); n != 4 {
		t.Errorf("global step %d", n)
	}
	if v := must(tr.CallbackMetric("loss")); math.IsNaN(v) || math.IsInf(v, 0) {
		t.Errorf("loss %v", v)
	}
	// 4 steps of 3, summed; the group of one reduces nothing.
	if v := must(tr.CallbackMetric("in_group")); group != 1 || v != 12 {
		t.Errorf("group %d, in_group %v", group, v)
	}
	if fulmen.LogGroup(3) != 3<<16 {
		t.Errorf("LogGroup(3) = %d", fulmen.LogGroup(3))
	}
}

func TestDistributedBeforeJoining(t *testing.T) {
	noLeaks(t)
	if joined := must(fulmen.DistributedIsJoined()); joined {
		t.Fatal("joined without DistributedJoin")
	}
	if r := must(fulmen.DistributedRanks()); r != (fulmen.Ranks{Rank: 0, LocalRank: 0, WorldSize: 1}) {
		t.Errorf("ranks %+v", r)
	}
	x := must(fulmen.FromSlice([]float32{1, 2, 3}))
	defer x.Close()
	if err := fulmen.AllReduce(x, "sum"); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Errorf("AllReduce: %v", err)
	}
	if err := fulmen.AllReduce(x, "median"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("AllReduce with a bad op: %v", err)
	}
	if err := fulmen.XLAAllReduce(x, "sum"); !errors.Is(err, fulmen.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "not on cpu") {
		t.Errorf("XLAAllReduce of a CPU tensor: %v", err)
	}
	if err := fulmen.XLAAllReduce(x, "median"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("XLAAllReduce with a bad op: %v", err)
	}
	if err := fulmen.Broadcast(x, 0); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Errorf("Broadcast: %v", err)
	}
	if err := fulmen.Broadcast(x, -1); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("Broadcast from rank -1: %v", err)
	}
	if g, err := fulmen.AllGather(x); !errors.Is(err, fulmen.ErrInvalidState) || g != nil {
		t.Errorf("AllGather: %v, %v", g, err)
	}
	if err := fulmen.Barrier(); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Errorf("Barrier: %v", err)
	}
	for _, all := range []bool{true, false} {
		if _, err := fulmen.ReduceBooleanDecision(true, all); !errors.Is(err, fulmen.ErrInvalidState) {
			t.Errorf("ReduceBooleanDecision(all=%v): %v", all, err)
		}
	}
	if v := must(fulmen.ToSlice[float32](x)); !reflect.DeepEqual(v, []float32{1, 2, 3}) {
		t.Errorf("the tensor changed: %v", v)
	}
	if err := fulmen.AllReduce(nil, "sum"); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("AllReduce(nil): %v", err)
	}

	s := must(fulmen.NewStrategy("ddp"))
	defer s.Close()
	if err := fulmen.DistributedJoin(s, 0, false); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("join with 0 processes per node: %v", err)
	}
	if err := fulmen.DistributedJoin(s, -1, false); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("join with -1 processes per node: %v", err)
	}
	if must(fulmen.DistributedIsJoined()) {
		t.Fatal("joined after refused joins")
	}

	ok(t, fulmen.DistributedAbort("no job to end")) // without a job: nothing to do
	ok(t, fulmen.DistributedShutdown(time.Second))  // likewise
	ok(t, fulmen.DistributedShutdown(0))
	if err := fulmen.DistributedShutdown(-time.Second); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("a negative timeout: %v", err)
	}
}

func TestDDPNeedsAJoinedJob(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	s := must(fulmen.NewStrategy("ddp"))
	defer s.Close()
	d, err := fulmen.NewDDP(model, s)
	if !errors.Is(err, fulmen.ErrInvalidState) || d != nil {
		t.Fatalf("NewDDP before joining: %v, %v", d, err)
	}
	var none *fulmen.DDP
	if err := none.SetSync(false); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("SetSync on nil: %v", err)
	}
	if err := none.PrepareForward(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("PrepareForward on nil: %v", err)
	}
	loss := must(fulmen.FromSlice([]float32{1}))
	defer loss.Close()
	if err := none.PrepareBackward(loss); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("PrepareBackward on nil: %v", err)
	}
	ok(t, none.Close())
}

func TestFSDPNeedsAJoinedJob(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	s := must(fulmen.NewStrategy("fsdp"))
	defer s.Close()
	f, err := fulmen.NewFSDP(model, s)
	if !errors.Is(err, fulmen.ErrInvalidState) || f != nil {
		t.Fatalf("NewFSDP before joining: %v, %v", f, err)
	}
	var none *fulmen.FSDP
	if err := none.PrepareForward(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("PrepareForward on nil: %v", err)
	}
	if err := none.Unshard(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("Unshard on nil: %v", err)
	}
	ok(t, none.Close())
}

// fsdpChildVariable marks the run of this test binary that joins a world
// of one (a job stays joined for the life of a process, and the other
// tests check a process that never joined).
const fsdpChildVariable = "FULMEN_GO_TEST_FSDP_CHILD"

// maxParamDiff is the largest difference between two models' parameters.
func maxParamDiff(a, b *fulmen.Model) (float64, error) {
	pa, err := a.Parameters(false)
	if err != nil {
		return 0, err
	}
	pb, err := b.Parameters(false)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, p := range append(pa, pb...) {
			p.Close()
		}
	}()
	if len(pa) != len(pb) {
		return 0, fmt.Errorf("%d parameters against %d", len(pa), len(pb))
	}
	worst := 0.0
	for i := range pa {
		d := must(pa[i].Sub(pb[i]))
		a := must(d.Abs())
		m := must(a.Max())
		v, err := m.Item()
		d.Close()
		a.Close()
		m.Close()
		if err != nil {
			return 0, err
		}
		worst = math.Max(worst, v)
	}
	return worst, nil
}

// unshardable is what both wrappers of a world-of-one test offer.
type unshardable interface {
	Unshard(...*fulmen.Optimizer) error
	Reshard(...*fulmen.Optimizer) error
	Close() error
}

// inWorldOfOne runs body in a run of this test binary of its own (the
// test named `test`, marked by fsdpChildVariable), which may join a world
// of one, and fails t when that run fails.
func inWorldOfOne(t *testing.T, test string, body func(*testing.T)) {
	if os.Getenv(fsdpChildVariable) == "1" {
		body(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), fsdpChildVariable+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("the world-of-one run failed: %v\n%s", err, out)
	}
}

// trainBesidePlain trains model, wrapped by w, and plain (the same seeded
// mlp) on the same batches with SGD, and fails when the clip norms or,
// after w's Unshard, Reshard, Unshard and Close, the weights differ. Each
// step calls before(opt) ahead of the forward and clip() after the
// backward (the wrapper's calls, the clip returning the norm).
func trainBesidePlain(t *testing.T, model, plain *fulmen.Model, w unshardable, before func(*fulmen.Optimizer),
	clip func() float64) {
	so := fulmen.DefaultSGDOptions()
	so.LR = 0.1
	so.Momentum = 0.9
	opt := must(fulmen.NewSGD(model, nil, so))
	defer opt.Close()
	plainOpt := must(fulmen.NewSGD(plain, nil, so))
	defer plainOpt.Close()
	ds := blobDataset(t, 32, 1)
	defer ds.Close()
	loader := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 8}))
	defer loader.Close()
	step := func(m *fulmen.Model, b []*fulmen.Tensor) {
		logits := must(m.Forward(b[0]))
		loss := must(fulmen.CrossEntropy(logits, b[1], fulmen.ReductionMean))
		ok(t, loss.Backward())
		logits.Close()
		loss.Close()
	}
	for i := 0; i < must(loader.Len()); i++ {
		b := must(loader.Batch(0, i))
		before(opt)
		step(model, b)
		norm := clip()
		ok(t, opt.Step())
		ok(t, plainOpt.ZeroGrad())
		step(plain, b)
		plainNorm := must(fulmen.ClipGradNorm(plain, 0.5, 2))
		ok(t, plainOpt.Step())
		for _, x := range b {
			x.Close()
		}
		if math.Abs(norm-plainNorm) > 1e-5*plainNorm {
			t.Fatalf("step %d: clip norm %v, without the wrapper %v", i, norm, plainNorm)
		}
	}
	ok(t, w.Unshard(opt))
	if d := must(maxParamDiff(model, plain)); d > 1e-6 {
		t.Fatalf("unsharded weights differ by %v", d)
	}
	ok(t, w.Reshard(opt))
	ok(t, w.Unshard(opt))
	ok(t, w.Close()) // after Unshard: the model stays whole
	if d := must(maxParamDiff(model, plain)); d > 1e-6 {
		t.Fatalf("weights after Close differ by %v", d)
	}
}

// fsdpWorldOfOne trains the same steps with and without FSDP in a world of
// one and compares the clip norms and the weights.
func fsdpWorldOfOne(t *testing.T) {
	s := must(fulmen.NewStrategy("fsdp"))
	defer s.Close()
	ok(t, s.Set("auto_wrap_policy", "Linear"))
	ok(t, fulmen.DistributedJoin(s, 1, false))
	ok(t, fulmen.ManualSeed(3))
	model := mlp(t)
	defer model.Close()
	ok(t, fulmen.ManualSeed(3))
	plain := mlp(t)
	defer plain.Close()
	f := must(fulmen.NewFSDP(model, s))
	before := func(*fulmen.Optimizer) {
		ok(t, f.ZeroGrad(true))
		ok(t, f.PrepareForward())
	}
	trainBesidePlain(t, model, plain, f, before, func() float64 {
		ok(t, f.FinishBackward())
		return must(f.ClipGradNorm(0.5))
	})
	ok(t, fulmen.DistributedShutdown(10*time.Second))
}

func TestFSDPTrainsAsTheSameLoopWithoutIt(t *testing.T) {
	inWorldOfOne(t, "TestFSDPTrainsAsTheSameLoopWithoutIt", fsdpWorldOfOne)
}

func TestTensorParallelNeedsAJoinedJob(t *testing.T) {
	noLeaks(t)
	model := mlp(t)
	defer model.Close()
	tp, err := fulmen.NewTensorParallel(model, []fulmen.ParallelRule{{Module: "0", Style: fulmen.Colwise}})
	if !errors.Is(err, fulmen.ErrInvalidState) || tp != nil {
		t.Fatalf("NewTensorParallel before joining: %v, %v", tp, err)
	}
	var none *fulmen.TensorParallel
	if _, err := none.ClipGradNorm(1); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("ClipGradNorm on nil: %v", err)
	}
	if err := none.Unshard(); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("Unshard on nil: %v", err)
	}
	ok(t, none.Close())
}

// tensorParallelWorldOfOne trains the same steps with and without tensor
// parallelism (the layers split in one part) in a world of one and
// compares the clip norms and the weights; a bad plan is refused.
func tensorParallelWorldOfOne(t *testing.T) {
	s := must(fulmen.NewStrategy("ddp"))
	defer s.Close()
	ok(t, fulmen.DistributedJoin(s, 1, false))
	ok(t, fulmen.ManualSeed(3))
	model := mlp(t)
	defer model.Close()
	ok(t, fulmen.ManualSeed(3))
	plain := mlp(t)
	defer plain.Close()
	if _, err := fulmen.NewTensorParallel(model, []fulmen.ParallelRule{{Module: "1", Style: fulmen.Colwise}}); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Fatalf("a Tanh split: %v", err)
	}
	tp := must(fulmen.NewTensorParallel(model, []fulmen.ParallelRule{{Module: "0", Style: fulmen.Colwise}, {Module: "2", Style: fulmen.Rowwise}}))
	before := func(opt *fulmen.Optimizer) { ok(t, opt.ZeroGrad()) }
	trainBesidePlain(t, model, plain, tp, before, func() float64 { return must(tp.ClipGradNorm(0.5)) })
	ok(t, fulmen.DistributedShutdown(10*time.Second))
}

func TestTensorParallelTrainsAsTheSameLoopWithoutIt(t *testing.T) {
	inWorldOfOne(t, "TestTensorParallelTrainsAsTheSameLoopWithoutIt", tensorParallelWorldOfOne)
}

// idsOf is the sample indices in a batch of a dataset whose only tensor
// is the sample index (closing the batch's tensors).
func idsOf(t *testing.T, batch []*fulmen.Tensor) []int64 {
	t.Helper()
	if len(batch) != 1 {
		t.Fatalf("a batch of %d tensors", len(batch))
	}
	defer batch[0].Close()
	v := must(fulmen.ToSlice[float32](batch[0]))
	ids := make([]int64, len(v))
	for i, f := range v {
		ids[i] = int64(f)
	}
	return ids
}

// batchesOf is the sample indices of each batch l yields in one Predict
// run over a dataset whose only tensor is the sample index.
func batchesOf(t *testing.T, l *fulmen.Loader) [][]int64 {
	t.Helper()
	model := must(fulmen.NewLinear(1, 1, true))
	defer model.Close()
	var seen [][]int64
	m := must(fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		PredictStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			x, err := b.Get(0)
			if err != nil {
				return nil, err
			}
			v, err := fulmen.ToSlice[float32](x)
			if err != nil {
				return nil, err
			}
			ids := make([]int64, len(v))
			for i, f := range v {
				ids[i] = int64(f)
			}
			seen = append(seen, ids)
			return x, nil
		},
	}))
	defer m.Close()
	tr := quietTrainer(t, 1, "logger", "false", "strategy", "single_device")
	defer tr.Close()
	pred := must(tr.Predict(context.Background(), m, l))
	defer pred.Close()
	n := 0
	for _, b := range seen {
		n += len(b)
	}
	if got := must(pred.Numel()); got != n {
		t.Errorf("predict gave %d values for %d samples", got, n)
	}
	return seen
}

func TestLoaderShard(t *testing.T) {
	noLeaks(t)
	idx := must(fulmen.Arange(0, 10, 1, fulmen.Float32))
	defer idx.Close()
	x := must(idx.Reshape(10, 1))
	defer x.Close()
	ds := must(fulmen.NewTensorDataset(x))
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 2}))
	defer l.Close()

	// 10 samples padded to 12 by repeating the start; rank r takes r, r+3, ...
	want := map[int][][]int64{0: {{0, 3}, {6, 9}}, 1: {{1, 4}, {7, 0}}, 2: {{2, 5}, {8, 1}}}
	for rank := 0; rank < 3; rank++ {
		sh := must(l.Shard(rank, 3))
		if n := must(sh.Len()); n != 2 {
			t.Errorf("rank %d of 3: %d batches, want 2", rank, n)
		}
		if got := batchesOf(t, sh); !reflect.DeepEqual(got, want[rank]) {
			t.Errorf("rank %d of 3: %v, want %v", rank, got, want[rank])
		}
		ok(t, sh.Close())
	}
	rank1 := must(l.Shard(1, 3))
	defer rank1.Close()
	for _, c := range []struct {
		epoch uint64
		index int
		want  []int64
	}{{0, 0, []int64{1, 4}}, {0, 1, []int64{7, 0}}, {5, 1, []int64{7, 0}}} {
		if got := idsOf(t, must(rank1.Batch(c.epoch, c.index))); !reflect.DeepEqual(got, c.want) {
			t.Errorf("rank 1 of 3, epoch %d, batch %d: %v, want %v", c.epoch, c.index, got, c.want)
		}
	}
	for _, i := range []int{2, -1} {
		if b, err := rank1.Batch(0, i); !errors.Is(err, fulmen.ErrOutOfRange) || b != nil {
			t.Errorf("batch %d of 2: %v", i, err)
		}
	}

	whole := must(l.Shard(0, 1))
	if got, want := batchesOf(t, whole), batchesOf(t, l); !reflect.DeepEqual(got, want) {
		t.Errorf("a world of one: %v, want %v", got, want)
	}
	ok(t, whole.Close())

	// A shuffled loader's shards together cover every sample, in each epoch.
	shuffled := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 4, Shuffle: true, Seed: 7}))
	defer shuffled.Close()
	for epoch := uint64(0); epoch < 3; epoch++ {
		var all []int64
		for rank := 0; rank < 2; rank++ {
			sh := must(shuffled.Shard(rank, 2))
			for i := 0; i < must(sh.Len()); i++ {
				all = append(all, idsOf(t, must(sh.Batch(epoch, i)))...)
			}
			ok(t, sh.Close())
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		if !reflect.DeepEqual(all, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("epoch %d: shuffled shards cover %v", epoch, all)
		}
	}
	if a, b := idsOf(t, must(shuffled.Batch(0, 0))), idsOf(t, must(shuffled.Batch(1, 0))); reflect.DeepEqual(a, b) {
		t.Errorf("not reshuffled per epoch: %v", a)
	}

	for _, rw := range [][2]int{{3, 3}, {0, 0}, {-1, 3}, {1, -1}} {
		if sh, err := l.Shard(rw[0], rw[1]); !errors.Is(err, fulmen.ErrInvalidArgument) || sh != nil {
			t.Errorf("Shard(%d, %d): %v", rw[0], rw[1], err)
		}
	}
	it := must(fulmen.NewIteratorLoader(fulmen.Iterator{
		Next: func(*fulmen.BatchBuilder) (bool, error) { return true, nil },
	}))
	defer it.Close()
	if _, err := it.Shard(0, 2); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("sharding an iterator: %v", err)
	}
	if _, err := it.Batch(0, 0); !errors.Is(err, fulmen.ErrUnsupported) {
		t.Errorf("a batch of an iterator: %v", err)
	}
}

func TestLoaderBatchRunsDataSourceCallbacks(t *testing.T) {
	noLeaks(t)
	noSample := errors.New("no sample 4 today")
	ds := must(fulmen.NewSourceDataset(fulmen.DataSource{
		Len: func() (int, error) { return 6, nil },
		GetBatch: func(indices []int64, b *fulmen.BatchBuilder) error {
			if indices[0] == 4 {
				return noSample
			}
			x, err := fulmen.FromSlice(append([]int64(nil), indices...))
			if err != nil {
				return err
			}
			return b.Push(x)
		},
	}))
	defer ds.Close()
	l := must(fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 2}))
	defer l.Close()
	rank0 := must(l.Shard(0, 2)) // samples 0, 2, 4
	defer rank0.Close()
	b := must(rank0.Batch(0, 0))
	if len(b) != 1 {
		t.Fatalf("%d tensors", len(b))
	}
	if got := must(fulmen.ToSlice[int64](b[0])); !reflect.DeepEqual(got, []int64{0, 2}) {
		t.Errorf("batch 0 of rank 0: %v", got)
	}
	ok(t, b[0].Close())
	if _, err := rank0.Batch(0, 1); !errors.Is(err, noSample) || !errors.Is(err, fulmen.ErrCallback) {
		t.Errorf("a failing GetBatch: %v", err)
	}
}

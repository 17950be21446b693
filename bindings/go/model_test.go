package fulmen_test

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestModelLayers(t *testing.T) {
	noLeaks(t)
	conv := fulmen.DefaultConv2dOptions(3)
	if conv.Kernel != [2]int64{3, 3} || conv.Stride != [2]int64{1, 1} || !conv.Bias || conv.Groups != 1 {
		t.Fatalf("conv defaults %+v", conv)
	}
	conv.Padding = [2]int64{1, 1}
	cnn := must(fulmen.NewSequential(
		must(fulmen.NewConv2d(1, 4, conv)),
		must(fulmen.NewBatchNorm(4, 1e-5, 0.1)),
		must(fulmen.NewActivation(fulmen.ReLU, 0)),
		must(fulmen.NewMaxPool2d(2, 0, 0)),
		must(fulmen.NewAvgPool2d(2, 0, 0)),
		must(fulmen.NewFlatten(1, -1)),
		must(fulmen.NewDropout(0.1)),
		must(fulmen.NewLayerNorm([]int64{16}, 1e-5)),
		must(fulmen.NewLinear(16, 3, true)),
		must(fulmen.NewActivation(fulmen.LogSoftmax, 1)),
	))
	defer cnn.Close()
	x := must(fulmen.Randn(fulmen.Float32, 2, 1, 8, 8))
	defer x.Close()
	y := must(cnn.Forward(x))
	defer y.Close()
	if sh := must(y.Shape()); !reflect.DeepEqual(sh, []int64{2, 3}) {
		t.Fatalf("cnn output %v", sh)
	}
	// Activation checkpointing by path: the outputs are the plain ones.
	ok(t, cnn.SetActivationCheckpointing("0", true))
	if err := cnn.SetActivationCheckpointing("99", true); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("checkpointing a missing child: %v", err)
	}
	ok(t, cnn.SetActivationCheckpointing("0", false))
	ok(t, cnn.SetTraining(false))
	if must(cnn.IsTraining()) {
		t.Fatal("still training")
	}
	names := must(cnn.StateDictNames())
	want := map[string]bool{"0.weight": true, "1.running_mean": true, "1.num_batches_tracked": true, "7.weight": true, "8.bias": true}
	found := 0
	for _, n := range names {
		if want[n] {
			found++
		}
	}
	if found != len(want) {
		t.Fatalf("state dict names %v", names)
	}

	emb := must(fulmen.NewEmbedding(10, 4))
	defer emb.Close()
	ids := must(fulmen.FromSlice([]int64{1, 2, 9}))
	defer ids.Close()
	e := must(emb.Forward(ids))
	defer e.Close()
	if sh := must(e.Shape()); !reflect.DeepEqual(sh, []int64{3, 4}) {
		t.Fatalf("embedding %v", sh)
	}
	for _, k := range []fulmen.Activation{fulmen.LeakyReLU, fulmen.GELU, fulmen.Sigmoid, fulmen.SiLU, fulmen.ELU, fulmen.Softmax, fulmen.Identity} {
		a := must(fulmen.NewActivation(k, 1))
		out := must(a.Forward(x))
		out.Close()
		a.Close()
	}
	if _, err := fulmen.LoadTorchScript(filepath.Join(t.TempDir(), "missing.pt")); err == nil {
		t.Fatal("loading a missing TorchScript file succeeded")
	}
}

func TestModelNamedStateDictSaveLoad(t *testing.T) {
	noLeaks(t)
	ok(t, fulmen.ManualSeed(5))
	named := must(fulmen.NewNamed())
	defer named.Close()
	enc := must(fulmen.NewLinear(3, 2, false))
	ok(t, named.Add("encoder", enc))
	if !enc.Closed() {
		t.Fatal("child not consumed by Add")
	}
	ok(t, enc.Close()) // no-op
	head := must(fulmen.NewSequential(must(fulmen.NewLinear(2, 1, true))))
	ok(t, named.Add("head", head))
	if n := must(named.NumParameters()); n != 3*2+2+1 {
		t.Fatalf("num parameters %d", n)
	}
	if n := must(named.StateDictLen()); n != 3 {
		t.Fatalf("state dict len %d", n)
	}
	if name := must(named.StateDictName(0)); name != "encoder.weight" {
		t.Fatalf("first name %q", name)
	}
	if _, err := named.StateDictName(10); !errors.Is(err, fulmen.ErrOutOfRange) && !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("name 10: %v", err)
	}
	x := must(fulmen.Ones(fulmen.Float32, 4, 3))
	defer x.Close()
	h := must(named.ForwardChild("encoder", x))
	defer h.Close()
	out := must(named.ForwardChild("head.0", h))
	defer out.Close()
	if _, err := named.Forward(x); err == nil {
		t.Fatal("forward of a named container succeeded")
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	ok(t, named.Save(path))
	w := must(named.StateDictGet("encoder.weight"))
	defer w.Close()
	if sh := must(w.Shape()); !reflect.DeepEqual(sh, []int64{2, 3}) {
		t.Fatalf("encoder.weight %v", sh)
	}
	// A second model of the same layout, initialised differently, gives
	// the same outputs once it loads the saved weights.
	ok(t, fulmen.ManualSeed(99))
	twin := must(fulmen.NewNamed())
	defer twin.Close()
	ok(t, twin.Add("encoder", must(fulmen.NewLinear(3, 2, false))))
	ok(t, twin.Add("head", must(fulmen.NewSequential(must(fulmen.NewLinear(2, 1, true))))))
	ok(t, twin.Load(path, true))
	th := must(twin.ForwardChild("encoder", x))
	defer th.Close()
	if got, want := vals(twin.ForwardChild("head.0", th)), vals(out.Clone()); !near(got, want) {
		t.Fatalf("outputs after load: %v, want %v", got, want)
	}
	if err := named.Load(filepath.Join(t.TempDir(), "nope.safetensors"), true); !errors.Is(err, fulmen.ErrIO) {
		t.Fatalf("load of a missing file: %v", err)
	}
	other := must(fulmen.NewSequential(must(fulmen.NewLinear(5, 5, true))))
	defer other.Close()
	if err := other.Load(path, true); err == nil {
		t.Fatal("strict load of foreign weights succeeded")
	}
	// Push on a named container or of a consumed child fails and consumes nothing.
	lin := must(fulmen.NewLinear(1, 1, true))
	defer lin.Close()
	child := must(fulmen.NewLinear(1, 1, true))
	defer child.Close()
	if err := lin.Push(child); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("push into a linear layer: %v", err)
	}
	if child.Closed() {
		t.Fatal("a failed push consumed the child")
	}
	seq := must(fulmen.NewSequential())
	defer seq.Close()
	if err := seq.Push(enc); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Fatalf("push of a consumed child: %v", err)
	}
}

// A host-owned loop: forward, loss, backward, step.
func TestOptimizersManualLoop(t *testing.T) {
	noLeaks(t)
	ok(t, fulmen.ManualSeed(2))
	xs, ys := blobs(64, 1)
	x := must(fulmen.FromSlice(xs, 64, 2))
	y := must(fulmen.FromSlice(ys))
	defer x.Close()
	defer y.Close()

	sgdOpts := fulmen.DefaultSGDOptions()
	adam := fulmen.DefaultAdamOptions()
	adamw := fulmen.DefaultAdamWOptions()
	rms := fulmen.DefaultRMSpropOptions()
	if sgdOpts.LR != 1e-3 || adam.Beta2 != 0.999 || adamw.WeightDecay != 1e-2 || rms.Alpha != 0.99 {
		t.Fatalf("defaults %+v %+v %+v %+v", sgdOpts, adam, adamw, rms)
	}
	sgdOpts.LR, sgdOpts.Momentum = 0.1, 0.9
	adam.LR, adamw.LR, rms.LR = 0.05, 0.05, 0.01
	makers := map[string]func(m *fulmen.Model) (*fulmen.Optimizer, error){
		"sgd":     func(m *fulmen.Model) (*fulmen.Optimizer, error) { return fulmen.NewSGD(m, nil, sgdOpts) },
		"adam":    func(m *fulmen.Model) (*fulmen.Optimizer, error) { return fulmen.NewAdam(m, nil, adam) },
		"adamw":   func(m *fulmen.Model) (*fulmen.Optimizer, error) { return fulmen.NewAdamW(m, nil, adamw) },
		"rmsprop": func(m *fulmen.Model) (*fulmen.Optimizer, error) { return fulmen.NewRMSprop(m, nil, rms) },
		"adagrad": func(m *fulmen.Model) (*fulmen.Optimizer, error) {
			o := fulmen.DefaultAdagradOptions()
			o.LR = 0.1
			return fulmen.NewAdagrad(m, nil, o)
		},
		"adamax": func(m *fulmen.Model) (*fulmen.Optimizer, error) {
			o := fulmen.DefaultAdamaxOptions()
			o.LR = 0.05
			return fulmen.NewAdamax(m, nil, o)
		},
		"nadam": func(m *fulmen.Model) (*fulmen.Optimizer, error) {
			o := fulmen.DefaultNAdamOptions()
			o.LR = 0.05
			return fulmen.NewNAdam(m, nil, o)
		},
		"radam": func(m *fulmen.Model) (*fulmen.Optimizer, error) {
			o := fulmen.DefaultRAdamOptions()
			o.LR, o.DecoupledWeightDecay, o.WeightDecay = 0.05, true, 0.01
			return fulmen.NewRAdam(m, nil, o)
		},
	}
	for name, mk := range makers {
		m := mlp(t)
		opt := must(mk(m))
		var first, last float64
		for i := 0; i < 30; i++ {
			ok(t, opt.ZeroGrad())
			logits := must(m.Forward(x))
			loss := must(fulmen.CrossEntropy(logits, y, fulmen.ReductionMean))
			ok(t, loss.Backward())
			if i == 0 {
				norm := must(fulmen.ClipGradNorm(m, 100, 2))
				if norm <= 0 {
					t.Fatalf("%s: grad norm %v", name, norm)
				}
				ok(t, fulmen.ClipGradValue(m, 100))
			}
			ok(t, opt.Step())
			last = must(loss.Item())
			if i == 0 {
				first = last
			}
			logits.Close()
			loss.Close()
		}
		if !(last < first/2) {
			t.Errorf("%s: loss %v -> %v", name, first, last)
		}
		ok(t, opt.Close())
		ok(t, opt.Close())
		m.Close()
	}

	// Param groups over explicit tensors.
	w := must(fulmen.Zeros(fulmen.Float32, 2, 2))
	defer w.Close()
	ok(t, w.SetRequiresGrad(true))
	opt := must(fulmen.NewSGD(nil, []*fulmen.Tensor{w}, fulmen.DefaultSGDOptions()))
	defer opt.Close()
	b := must(fulmen.Zeros(fulmen.Float32, 2))
	defer b.Close()
	ok(t, b.SetRequiresGrad(true))
	ok(t, opt.AddParamGroup(nil, []*fulmen.Tensor{b}, 0.5))
	ok(t, opt.SetLR(0.25))
	if lr := must(opt.LR()); lr != 0.25 {
		t.Fatalf("lr %v", lr)
	}
	// Per-group hyperparameters: no weight decay on the biases' group.
	if n := must(opt.ParamGroupCount()); n != 2 {
		t.Fatalf("%d groups", n)
	}
	ok(t, opt.SetParamGroup(1, "weight_decay", 0))
	ok(t, opt.SetParamGroup(1, "momentum", 0.9))
	if m := must(opt.ParamGroup(1, "momentum")); m != 0.9 {
		t.Fatalf("momentum %v", m)
	}
	if _, err := opt.ParamGroup(2, "lr"); !errors.Is(err, fulmen.ErrOutOfRange) {
		t.Fatalf("group 2 of 2: %v", err)
	}
	if err := opt.SetParamGroup(-1, "lr", 0.1); !errors.Is(err, fulmen.ErrOutOfRange) {
		t.Fatalf("group -1: %v", err)
	}
	if err := opt.SetParamGroup(0, "betas.0", 0.5); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("SGD's betas.0: %v", err)
	}
	// SGD's other constants per group too; a flag is 0 or 1.
	ok(t, opt.SetParamGroup(1, "nesterov", 1))
	ok(t, opt.SetParamGroup(1, "dampening", 0))
	if v := must(opt.ParamGroup(1, "nesterov")); v != 1 {
		t.Fatalf("nesterov %v", v)
	}
	if v := must(opt.ParamGroup(0, "nesterov")); v != 0 {
		t.Fatalf("group 0's nesterov %v", v)
	}
	if err := opt.SetParamGroup(1, "maximize", 2); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("maximize 2: %v", err)
	}
}

func TestSchedulers(t *testing.T) {
	noLeaks(t)
	m := mlp(t)
	defer m.Close()
	o := fulmen.DefaultSGDOptions()
	o.LR = 1
	opt := must(fulmen.NewSGD(m, nil, o))
	defer opt.Close()
	lr := func() float64 { return must(opt.LR()) }
	steps := func(s *fulmen.Scheduler, n int, metric float64) {
		for i := 0; i < n; i++ {
			ok(t, s.Step(opt, metric))
		}
	}

	s := must(fulmen.NewStepLR(opt, 2, 0.5))
	steps(s, 2, 0)
	if math.Abs(lr()-0.5) > 1e-9 {
		t.Fatalf("step lr %v", lr())
	}
	ok(t, s.Close())
	ok(t, s.Close())

	ok(t, opt.SetLR(1))
	s = must(fulmen.NewMultiStepLR(opt, []int64{1, 3}, 0.1))
	steps(s, 3, 0)
	if math.Abs(lr()-0.01) > 1e-9 {
		t.Fatalf("multistep lr %v", lr())
	}
	s.Close()

	ok(t, opt.SetLR(1))
	s = must(fulmen.NewExponentialLR(opt, 0.5))
	steps(s, 3, 0)
	if math.Abs(lr()-0.125) > 1e-9 {
		t.Fatalf("exponential lr %v", lr())
	}
	s.Close()

	ok(t, opt.SetLR(1))
	s = must(fulmen.NewCosineAnnealingLR(opt, 4, 0))
	steps(s, 4, 0)
	if lr() > 1e-6 {
		t.Fatalf("cosine lr %v", lr())
	}
	s.Close()

	ok(t, opt.SetLR(1))
	s = must(fulmen.NewLinearLR(opt, 0.5, 1, 2))
	s.Close()

	ok(t, opt.SetLR(1))
	s = must(fulmen.NewConstantLR(opt, 0.5, 3))
	steps(s, 2, 0)
	if lr() != 0.5 {
		t.Fatalf("constant lr %v", lr())
	}
	s.Close()
	ok(t, opt.SetLR(1))
	s = must(fulmen.NewPolynomialLR(opt, 4, 2))
	steps(s, 2, 0)
	if math.Abs(lr()-0.25) > 1e-12 {
		t.Fatalf("polynomial lr %v", lr())
	}
	s.Close()
	ok(t, opt.SetLR(1))
	s = must(fulmen.NewCosineAnnealingWarmRestarts(opt, 3, 2, 0))
	steps(s, 3, 0)
	if lr() != 1 {
		t.Fatalf("warm restarts lr %v", lr())
	}
	s.Close()
	// Warm-up then cosine (torch: 0.7 after 2 steps of SequentialLR(LinearLR(0.1, 1, 3),
	// CosineAnnealingLR(6, 0.001), [3]) on lr 1); the parts are consumed on success only.
	ok(t, opt.SetLR(1))
	warm := must(fulmen.NewLinearLR(opt, 0.1, 1, 3))
	cosine := must(fulmen.NewCosineAnnealingLR(opt, 6, 0.001))
	if _, err := fulmen.NewSequentialLR(opt, []*fulmen.Scheduler{warm, cosine}, nil); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("SequentialLR without its milestone: %v", err)
	}
	if warm.Closed() || cosine.Closed() {
		t.Fatal("a failed SequentialLR consumed its parts")
	}
	s = must(fulmen.NewSequentialLR(opt, []*fulmen.Scheduler{warm, cosine}, []int64{3}))
	if !warm.Closed() || !cosine.Closed() {
		t.Fatal("SequentialLR left its parts open")
	}
	steps(s, 2, 0)
	if math.Abs(lr()-0.7) > 1e-12 {
		t.Fatalf("warm-up lr %v", lr())
	}
	s.Close()
	// ChainedScheduler (torch: ConstantLR(0.5, 3) chained with ExponentialLR(0.9) on
	// lr 1 is 0.9^3 after 3 steps); a part that stepped already is refused.
	ok(t, opt.SetLR(1))
	stepped := must(fulmen.NewStepLR(opt, 1, 0.5))
	steps(stepped, 1, 0)
	if _, err := fulmen.NewChainedScheduler(opt, []*fulmen.Scheduler{stepped}); !errors.Is(err, fulmen.ErrInvalidState) {
		t.Fatalf("ChainedScheduler of a stepped scheduler: %v", err)
	}
	if stepped.Closed() {
		t.Fatal("a failed ChainedScheduler consumed its parts")
	}
	stepped.Close()
	ok(t, opt.SetLR(1))
	constant := must(fulmen.NewConstantLR(opt, 0.5, 3))
	decay := must(fulmen.NewExponentialLR(opt, 0.9))
	s = must(fulmen.NewChainedScheduler(opt, []*fulmen.Scheduler{constant, decay}))
	if !constant.Closed() || !decay.Closed() {
		t.Fatal("ChainedScheduler left its parts open")
	}
	steps(s, 3, 0)
	if math.Abs(lr()-0.729) > 1e-15 {
		t.Fatalf("chained lr %v", lr())
	}
	s.Close()

	oc := fulmen.DefaultOneCycleOptions(1, 10)
	if oc.PctStart != 0.3 || oc.DivFactor != 25 || !oc.CycleMomentum {
		t.Fatalf("one cycle defaults %+v", oc)
	}
	s = must(fulmen.NewOneCycleLR(opt, oc))
	steps(s, 3, 0)
	s.Close()
	// One peak per param group (one group here): it starts at 2 / 25.
	s = must(fulmen.NewOneCycleLRMaxLRs(opt, oc, []float64{2}))
	if math.Abs(lr()-0.08) > 1e-15 {
		t.Fatalf("one-cycle start %v, want 0.08", lr())
	}
	s.Close()
	if _, err := fulmen.NewOneCycleLRMaxLRs(opt, oc, nil); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("no peaks: %v", err)
	}

	po := fulmen.DefaultPlateauOptions()
	if po.Factor != 0.1 || po.Patience != 10 {
		t.Fatalf("plateau defaults %+v", po)
	}
	po.Patience = 0
	ok(t, opt.SetLR(1))
	s = must(fulmen.NewReduceLROnPlateau(opt, po))
	steps(s, 3, 1)
	if lr() >= 1 {
		t.Fatalf("plateau lr %v", lr())
	}
	if err := s.Step(opt, math.NaN()); err == nil {
		t.Fatal("plateau step with NaN succeeded")
	}
	s.Close()

	// One bound per param group (one group here): the lr stops at 0.5.
	ok(t, opt.SetLR(1))
	s = must(fulmen.NewReduceLROnPlateauMinLRs(opt, po, []float64{0.5}))
	steps(s, 3, 1)
	if lr() != 0.5 {
		t.Fatalf("plateau lr %v, want its bound 0.5", lr())
	}
	s.Close()
	if _, err := fulmen.NewReduceLROnPlateauMinLRs(opt, po, []float64{0.5, 0.1}); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Fatalf("two bounds for one group: %v", err)
	}

	other := must(fulmen.NewSGD(m, nil, o))
	defer other.Close()
	s = must(fulmen.NewStepLR(opt, 1, 0.5))
	defer s.Close()
	if err := s.Step(other, 0); err == nil {
		t.Fatal("step with a foreign optimizer succeeded")
	}
}

func TestModelNewLayers(t *testing.T) {
	noLeaks(t)
	gn := must(fulmen.NewGroupNorm(2, 4, 1e-5, true))
	defer gn.Close()
	if names := must(gn.StateDictNames()); !reflect.DeepEqual(names, []string{"weight", "bias"}) {
		t.Fatalf("group norm state_dict %v", names)
	}
	rms := must(fulmen.NewRMSNorm([]int64{3}, 0, true))
	defer rms.Close()
	x := must(fulmen.FromSlice([]float32{1, 2, 3}, 1, 3))
	defer x.Close()
	y := must(rms.Forward(x))
	defer y.Close()
	if v := must(fulmen.ToSlice[float32](y)); math.Abs(float64(v[0])-0.4629101) > 1e-6 {
		t.Fatalf("rms norm %v", v)
	}
	prelu := must(fulmen.NewPReLU(1, 0.25))
	defer prelu.Close()
	un := must(fulmen.NewUnflatten(1, []int64{3, 1}))
	defer un.Close()
	z := must(un.Forward(x))
	defer z.Close()
	if s := must(z.Shape()); !reflect.DeepEqual(s, []int64{1, 3, 1}) {
		t.Fatalf("unflatten shape %v", s)
	}
	conv := must(fulmen.NewConv1d(1, 3, 3, 1, 1, 1, 1, true))
	defer conv.Close()
	co := must(conv.Forward(x)) // (C=1, L=3) -> (3, 3)
	defer co.Close()
	if s := must(co.Shape()); !reflect.DeepEqual(s, []int64{3, 3}) {
		t.Fatalf("conv1d shape %v", s)
	}
	drop := must(fulmen.NewDropout2d(0.25))
	drop.Close()
	padded := must(fulmen.NewEmbeddingPadded(4, 2, 0))
	defer padded.Close()
	w := must(padded.StateDictGet("weight"))
	defer w.Close()
	if v := must(fulmen.ToSlice[float32](w)); v[0] != 0 || v[1] != 0 {
		t.Fatalf("padding row %v, want zeros", v[:2])
	}
	act := must(fulmen.NewActivation(fulmen.Mish, 0))
	act.Close()
	if _, err := fulmen.NewUnflatten(1, []int64{-1, -1}); err == nil {
		t.Fatal("two inferred sizes succeeded")
	}
}

func closeAll(ts []*fulmen.Tensor) {
	for _, x := range ts {
		x.Close()
	}
}

func TestSequenceLayersForwardMulti(t *testing.T) {
	noLeaks(t)
	opts := fulmen.DefaultRNNOptions()
	opts.NumLayers, opts.Bidirectional, opts.BatchFirst = 2, true, true
	lstm := must(fulmen.NewLSTM(3, 4, opts))
	defer lstm.Close()
	if n := must(lstm.StateDictLen()); n != 16 {
		t.Fatalf("lstm state_dict has %d entries", n)
	}
	x := must(fulmen.Randn(fulmen.Float32, 2, 5, 3))
	defer x.Close()
	lengths := must(fulmen.FromSlice([]int64{3, 5}))
	defer lengths.Close()
	out := must(lstm.ForwardMulti(x, nil, nil, lengths))
	defer closeAll(out)
	if len(out) != 3 {
		t.Fatalf("lstm gave %d results", len(out))
	}
	if s := must(out[1].Shape()); !reflect.DeepEqual(s, []int64{4, 2, 4}) {
		t.Fatalf("h_n shape %v", s)
	}
	closed := must(fulmen.Randn(fulmen.Float32, 2, 5, 3))
	closed.Close()
	if _, err := lstm.ForwardMulti(closed); err == nil {
		t.Fatal("a closed input was read as left out")
	}
	if _, err := lstm.ForwardMulti(x, x); err == nil {
		t.Fatal("h0 without c0 was taken")
	}

	mha := must(fulmen.NewMultiheadAttention(8, 2, 0, true, true))
	defer mha.Close()
	q := must(fulmen.Randn(fulmen.Float32, 2, 3, 8))
	defer q.Close()
	attn := must(mha.ForwardMulti(q))
	defer closeAll(attn)
	if s := must(attn[1].Shape()); !reflect.DeepEqual(s, []int64{2, 3, 3}) {
		t.Fatalf("attention weights shape %v", s)
	}

	topts := fulmen.DefaultTransformerOptions()
	topts.DimFeedforward, topts.BatchFirst, topts.Activation = 16, true, fulmen.GELU
	enc := must(fulmen.NewTransformerEncoderLayer(8, 2, topts))
	defer enc.Close()
	ones := must(fulmen.Ones(fulmen.Bool, 3, 3))
	defer ones.Close()
	mask := must(ones.Triu(1))
	defer mask.Close()
	y := must(enc.ForwardMulti(q, mask))
	defer closeAll(y)
	if s := must(y[0].Shape()); !reflect.DeepEqual(s, []int64{2, 3, 8}) {
		t.Fatalf("encoder output shape %v", s)
	}
	dec := must(fulmen.NewTransformerDecoderLayer(8, 2, topts))
	defer dec.Close()
	if _, err := dec.Forward(q); err == nil {
		t.Fatal("a decoder layer ran without memory")
	}
	z := must(dec.ForwardMulti(q, q, mask))
	defer closeAll(z)
}

// Command charlm trains a GPT-style character language model on the Lee
// corpus (300 news stories, 360 kB, from the gensim package) with fulmen's
// Go binding: token and position embeddings, pre-norm transformer blocks
// with causal self-attention, a final layer norm and a linear head over the
// bytes that occur in the text. The first 90% trains, the rest validates.
// It is the Go twin of examples/c/charlm.c, with the same flags and the
// same results.
//
//	charlm -data lee_background.txt [-epochs 3] [-batch-size 32]
//	       [-context 64] [-d-model 64] [-heads 4] [-layers 2] [-dropout 0.1]
//	       [-lr 3e-3] [-seed 42] [-threads N] [-limit-batches N]
//	       [-val-batches N] [-no-shuffle] [-sample 300] [-out runs/charlm]
//	       [-init-out FILE] [-loss-log FILE]
//
// It prints the validation loss in bits per character after every epoch
// and samples text at the end. -init-out saves the initial weights and
// -loss-log writes every training step's loss, so the PyTorch twin
// (tests/interop/charlm_twin.py) can replay the run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// maxText is the largest corpus read, in bytes.
const maxText = 64 << 20

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "charlm: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// gpt is the model and what its forward pass needs.
type gpt struct {
	model     *fulmen.Model
	layers    int64
	vocab     int64
	mask      *fulmen.Tensor // bool [context, context], true above the diagonal
	positions *fulmen.Tensor // int64 0..context-1
}

// causalMask is a bool [n, n] mask, true where a query would see a later key.
func causalMask(n int64) (*fulmen.Tensor, error) {
	ones, err := fulmen.Ones(fulmen.Bool, n, n)
	if err != nil {
		return nil, err
	}
	defer ones.Close()
	return ones.Triu(1)
}

// logits of ids [B, L] (L <= context) with mask [L, L] and positions
// 0..L-1: [B, L, vocab]. Intermediate tensors are closed here.
func (g *gpt) logits(ids, mask, positions *fulmen.Tensor) (*fulmen.Tensor, error) {
	tok, err := g.model.ForwardChild("tok", ids)
	if err != nil {
		return nil, err
	}
	defer tok.Close()
	pos, err := g.model.ForwardChild("pos", positions)
	if err != nil {
		return nil, err
	}
	defer pos.Close()
	h, err := tok.Add(pos)
	if err != nil {
		return nil, err
	}
	for i := int64(0); i < g.layers; i++ {
		out, err := g.model.ForwardMultiChild(fmt.Sprintf("blocks.%d", i), h, mask)
		h.Close()
		if err != nil {
			return nil, err
		}
		h = out[0]
	}
	defer h.Close()
	normed, err := g.model.ForwardChild("ln", h)
	if err != nil {
		return nil, err
	}
	defer normed.Close()
	return g.model.ForwardChild("head", normed)
}

// loss is the mean cross-entropy (nats per character) of a [x, y] batch.
func (g *gpt) loss(b *fulmen.Batch) (*fulmen.Tensor, error) {
	x, err := b.Get(0)
	if err != nil {
		return nil, err
	}
	y, err := b.Get(1)
	if err != nil {
		return nil, err
	}
	logits, err := g.logits(x, g.mask, g.positions)
	if err != nil {
		return nil, err
	}
	flat, err := logits.Reshape(-1, g.vocab)
	if err != nil {
		return nil, err
	}
	targets, err := y.Reshape(-1)
	if err != nil {
		return nil, err
	}
	return fulmen.CrossEntropy(flat, targets, fulmen.ReductionMean)
}

func build(vocab, window, dModel, heads, layers int64, dropout float64) (*fulmen.Model, error) {
	// Made in the C example's order, so a seed gives the same weights.
	tok, err := fulmen.NewEmbedding(vocab, dModel)
	if err != nil {
		return nil, err
	}
	pos, err := fulmen.NewEmbedding(window, dModel)
	if err != nil {
		return nil, err
	}
	o := fulmen.DefaultTransformerOptions()
	o.DimFeedforward, o.Dropout, o.Activation = 4*dModel, dropout, fulmen.GELU
	o.BatchFirst, o.NormFirst = true, true
	blocks := make([]*fulmen.Model, layers)
	for i := range blocks {
		if blocks[i], err = fulmen.NewTransformerEncoderLayer(dModel, heads, o); err != nil {
			return nil, err
		}
	}
	seq, err := fulmen.NewSequential(blocks...)
	if err != nil {
		return nil, err
	}
	ln, err := fulmen.NewLayerNorm([]int64{dModel}, 1e-5)
	if err != nil {
		return nil, err
	}
	head, err := fulmen.NewLinear(dModel, vocab, true)
	if err != nil {
		return nil, err
	}
	m, err := fulmen.NewNamed()
	if err != nil {
		return nil, err
	}
	names := []string{"tok", "pos", "blocks", "ln", "head"}
	for i, child := range []*fulmen.Model{tok, pos, seq, ln, head} {
		if err := m.Add(names[i], child); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// windows cuts ids into [count, context] inputs and targets shifted by one.
func windows(ids []int64, window int64) (*fulmen.Dataset, int64, error) {
	count := int64(0)
	if len(ids) > 1 {
		count = int64(len(ids)-1) / window
	}
	if count == 0 {
		return nil, 0, fmt.Errorf("the text is shorter than one window")
	}
	cells := count * window
	x, err := fulmen.FromSlice(ids[:cells], count, window)
	if err != nil {
		return nil, 0, err
	}
	defer x.Close()
	y, err := fulmen.FromSlice(ids[1:cells+1], count, window)
	if err != nil {
		return nil, 0, err
	}
	defer y.Close()
	ds, err := fulmen.NewTensorDataset(x, y)
	return ds, count, err
}

// xorshift64* with the C example's constants: the same samples for a seed.
type rng struct{ s uint64 }

func (r *rng) uniform() float64 {
	r.s ^= r.s >> 12
	r.s ^= r.s << 25
	r.s ^= r.s >> 27
	return float64((r.s*2685821657736338717)>>11) / 9007199254740992.0
}

// sample continues prompt by n characters at temperature 0.8.
func (g *gpt) sample(alphabet []byte, index [256]int64, prompt string, n int, window int64, seed uint64) error {
	var ids []int64
	for _, c := range []byte(prompt) {
		if index[c] >= 0 {
			ids = append(ids, index[c])
		}
	}
	fmt.Print("sample: ", prompt)
	r := rng{seed*0x9E3779B97F4A7C15 + 1}
	for k := 0; k < n && len(ids) > 0; k++ {
		l := min(int64(len(ids)), window)
		next, err := g.next(ids[int64(len(ids))-l:], l)
		if err != nil {
			return err
		}
		top := next[0]
		for _, v := range next {
			top = max(top, v)
		}
		total := 0.0
		weights := make([]float64, len(next))
		for v, logit := range next {
			weights[v] = math.Exp(float64(logit-top) / 0.8)
			total += weights[v]
		}
		u, pick := r.uniform()*total, int64(len(next)-1)
		for v, w := range weights {
			if u -= w; u <= 0 {
				pick = int64(v)
				break
			}
		}
		ids = append(ids, pick)
		fmt.Printf("%c", alphabet[pick])
	}
	fmt.Println()
	return nil
}

// next is the logits of the character after the window ids (length l).
func (g *gpt) next(window []int64, l int64) ([]float32, error) {
	x, err := fulmen.FromSlice(window, 1, l)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	mask, err := causalMask(l)
	if err != nil {
		return nil, err
	}
	defer mask.Close()
	pos, err := fulmen.Arange(0, float64(l), 1, fulmen.Int64)
	if err != nil {
		return nil, err
	}
	defer pos.Close()
	logits, err := g.logits(x, mask, pos)
	if err != nil {
		return nil, err
	}
	defer logits.Close()
	last, err := logits.Narrow(1, l-1, 1)
	if err != nil {
		return nil, err
	}
	defer last.Close()
	return fulmen.ToSlice[float32](last)
}

func main() {
	data := flag.String("data", "", "a text file (the Lee corpus: lee_background.txt)")
	epochs := flag.Int64("epochs", 3, "training epochs")
	batchSize := flag.Int("batch-size", 32, "training batch size")
	window := flag.Int64("context", 64, "characters per window")
	dModel := flag.Int64("d-model", 64, "features per position")
	heads := flag.Int64("heads", 4, "attention heads")
	layers := flag.Int64("layers", 2, "transformer blocks")
	dropout := flag.Float64("dropout", 0.1, "dropout in the blocks")
	lr := flag.Float64("lr", 3e-3, "AdamW learning rate")
	seed := flag.Uint64("seed", 42, "random seed")
	threads := flag.Int("threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	limit := flag.Int64("limit-batches", 0, "train on the first N batches of each epoch (0: all)")
	valBatches := flag.Int64("val-batches", -1, "validate on the first N batches (0: none, -1: all)")
	noShuffle := flag.Bool("no-shuffle", false, "keep the training windows in order")
	sampleChars := flag.Int("sample", 300, "characters to sample at the end")
	out := flag.String("out", "runs/charlm", "output folder for logs, checkpoints and weights")
	initOut := flag.String("init-out", "", "save the initial weights here (safetensors)")
	lossLog := flag.String("loss-log", "", "write every training step's loss here")
	flag.Parse()
	if *data == "" || flag.NArg() > 0 || *window < 1 || *batchSize < 1 || *layers < 1 {
		fmt.Fprintln(os.Stderr, "usage: charlm -data lee_background.txt [-epochs N] [-batch-size N] [-context N] [-d-model N] [-heads N] [-layers N] [-dropout P] [-lr X] [-seed N] [-threads N] [-limit-batches N] [-val-batches N] [-no-shuffle] [-sample N] [-out DIR] [-init-out FILE] [-loss-log FILE]")
		os.Exit(2)
	}
	fmt.Printf("fulmen %s on libtorch %s\n", fulmen.Version(), fulmen.LibtorchVersion())
	if *threads > 0 {
		check("setting threads", fulmen.SetNumThreads(*threads))
	}
	check("seeding", fulmen.ManualSeed(*seed))

	f, err := os.Open(*data)
	check("opening the text", err)
	text, err := io.ReadAll(io.LimitReader(f, maxText+1))
	f.Close()
	check("reading the text", err)
	if len(text) > maxText {
		check("reading the text", fmt.Errorf("%s is larger than %d bytes", *data, maxText))
	}
	// The alphabet: the bytes that occur, in order; ids index it.
	var index [256]int64
	var seen [256]bool
	for _, c := range text {
		seen[c] = true
	}
	var alphabet []byte
	for b := 0; b < 256; b++ {
		index[b] = -1
		if seen[b] {
			index[b] = int64(len(alphabet))
			alphabet = append(alphabet, byte(b))
		}
	}
	ids := make([]int64, len(text))
	for i, c := range text {
		ids[i] = index[c]
	}
	nTrain := len(ids) / 10 * 9
	train, trainWindows, err := windows(ids[:nTrain], *window)
	check("training windows", err)
	defer train.Close()
	val, valWindows, err := windows(ids[nTrain:], *window)
	check("validation windows", err)
	defer val.Close()
	fmt.Printf("%d characters, %d distinct; %d training and %d validation windows of %d\n", len(text), len(alphabet),
		trainWindows, valWindows, *window)

	trainLoader, err := fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: *batchSize, Shuffle: !*noShuffle, Seed: *seed})
	check("train loader", err)
	defer trainLoader.Close()
	valLoader, err := fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 256, Seed: *seed})
	check("val loader", err)
	defer valLoader.Close()

	vocab := int64(len(alphabet))
	model, err := build(vocab, *window, *dModel, *heads, *layers, *dropout)
	check("building the model", err)
	defer model.Close()
	g := &gpt{model: model, layers: *layers, vocab: vocab}
	g.mask, err = causalMask(*window)
	check("mask", err)
	defer g.mask.Close()
	g.positions, err = fulmen.Arange(0, float64(*window), 1, fulmen.Int64)
	check("positions", err)
	defer g.positions.Close()
	nParams, err := model.NumParameters()
	check("counting parameters", err)
	fmt.Printf("GPT: %d blocks of d_model %d, %d heads, context %d; %d parameters\n", *layers, *dModel, *heads,
		*window, nParams)
	if *initOut != "" {
		check("saving the initial weights", model.Save(*initOut))
	}
	var losses *os.File
	if *lossLog != "" {
		losses, err = os.Create(*lossLog)
		check("loss log", err)
	}

	// The steps log tensors, not numbers read from them: on a GPU a read
	// (Item) would make every step wait for the device, while a logged
	// tensor is read only where the trainer reads values anyway.
	module, err := fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			loss, err := g.loss(b)
			if err != nil {
				return nil, err
			}
			if losses != nil {
				// -loss-log asks for every step's loss: read at each step.
				v, err := loss.Item()
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(losses, "%.9g\n", v)
			}
			return loss, ctx.LogTensor("train_loss", loss, fulmen.LogOnStep|fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			loss, err := g.loss(b)
			if err != nil {
				return err
			}
			bits, err := loss.MulScalar(1 / math.Ln2)
			if err != nil {
				return err
			}
			if err := ctx.LogTensor("val_loss", loss, fulmen.LogOnEpoch, 0); err != nil {
				return err
			}
			return ctx.LogTensor("val_bpc", bits, fulmen.LogOnEpoch|fulmen.LogProgBar, 0)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultAdamWOptions()
			o.LR = *lr
			opt, err := fulmen.NewAdamW(model, nil, o)
			if err != nil {
				return err
			}
			if err := cfg.Add(opt); err != nil {
				opt.Close()
				return err
			}
			return nil
		},
	})
	check("creating the module", err)
	defer module.Close()

	check("creating the output folder", os.MkdirAll(*out, 0o755))
	opts, err := fulmen.NewTrainerOptions()
	check("options", err)
	defer opts.Close()
	check("max_epochs", opts.SetInt("max_epochs", *epochs))
	check("num_sanity_val_steps", opts.SetInt("num_sanity_val_steps", 0))
	check("default_root_dir", opts.Set("default_root_dir", *out))
	check("log_every_n_steps", opts.SetInt("log_every_n_steps", 10))
	if *limit > 0 {
		check("limit_train_batches", opts.SetLimitTrainBatches(*limit))
	}
	if *valBatches >= 0 {
		check("limit_val_batches", opts.SetLimitValBatches(*valBatches))
	}
	trainer, err := fulmen.NewTrainer(opts)
	check("creating the trainer", err)
	defer trainer.Close()
	check("training", trainer.Fit(context.Background(), module, trainLoader, valLoader))
	if losses != nil {
		check("loss log", losses.Close())
	}

	if *valBatches != 0 {
		bpc, err := trainer.CallbackMetric("val_bpc")
		check("reading val_bpc", err)
		fmt.Printf("final validation: %.4f bits per character\n", bpc)
	}
	weights := filepath.Join(*out, "model.safetensors")
	check("saving the weights", model.Save(weights))
	fmt.Printf("weights: %s\n", weights)
	check("eval mode", model.SetTraining(false))
	if *sampleChars > 0 {
		check("sampling", g.sample(alphabet, index, "The ", *sampleChars, *window, *seed))
	}
}

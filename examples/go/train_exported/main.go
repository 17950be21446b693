// Command train_exported trains a model exported from PyTorch with
// torch.export (a .pt2 archive) on MNIST-5k with fulmen's Go binding. The
// model is a LightningModule written in Python
// (examples/python/export_mnist.py: a small CNN with BatchNorm and
// dropout); python/fulmen_export.py exported its training_step,
// validation_step and forward. This program loads the archive, feeds the
// batches to the exported steps through CallMethod, and lets fulmen's
// Trainer do the rest (optimizer, epochs, checkpoints, logs). Every fifth
// row is held out for validation (1,000), the rest train (4,000).
//
//	python examples/python/export_mnist.py --out mnist.pt2
//	train_exported -model mnist.pt2 -data mnist_5k.csv.gz [-epochs 3]
//	               [-batch-size 64] [-lr 2e-3] [-seed 42] [-threads N]
//	               [-out runs/train_exported]
//
// It prints the validation loss and accuracy after every epoch and the
// final ones; writes logs and checkpoints under <out>/ and the trained
// state_dict (PyTorch's names, BatchNorm statistics included) to
// <out>/model.safetensors, which the Python module loads with
// load_state_dict.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// check prints the error and exits when there is one.
func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "train_exported: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// runStep calls the exported program on the batch, (pixels, labels) as it
// was exported, and returns its "loss" and "acc" tensors. The tensors are
// scope-owned: released when the step returns.
func runStep(model *fulmen.Model, program string, b *fulmen.Batch) (*fulmen.Tensor, *fulmen.Tensor, error) {
	batch, err := b.Value()
	if err != nil {
		return nil, nil, err
	}
	out, err := model.CallMethod(program, batch)
	if err != nil {
		return nil, nil, err
	}
	result, isDict := out.(fulmen.Dict)
	if !isDict {
		return nil, nil, fmt.Errorf("%s returned %T, not {\"loss\", \"acc\"}", program, out)
	}
	loss, err := tensorEntry(result, program, "loss")
	if err != nil {
		return nil, nil, err
	}
	acc, err := tensorEntry(result, program, "acc")
	return loss, acc, err
}

// tensorEntry is the tensor under key in a step's result.
func tensorEntry(d fulmen.Dict, program, key string) (*fulmen.Tensor, error) {
	v, found := d.Get(key)
	if !found {
		return nil, fmt.Errorf("%s returned no %q", program, key)
	}
	t, isTensor := v.(*fulmen.Tensor)
	if !isTensor {
		return nil, fmt.Errorf("%s returned %T as %q, not a tensor", program, v, key)
	}
	return t, nil
}

// printEpoch prints the epoch's metrics that were logged.
func printEpoch(ctx *fulmen.HookContext) error {
	epoch, err := ctx.Epoch()
	if err != nil {
		return err
	}
	line := fmt.Sprintf("epoch %d:", epoch+1)
	for _, name := range []string{"train_loss", "val_loss", "val_acc"} {
		v, err := ctx.Metric(name)
		if errors.Is(err, fulmen.ErrInvalidState) {
			continue // not logged (yet)
		}
		if err != nil {
			return err
		}
		line += fmt.Sprintf(" %s %.4f", name, v)
	}
	fmt.Println(line)
	return nil
}

func main() {
	modelPath := flag.String("model", "", "the .pt2 archive (examples/python/export_mnist.py)")
	data := flag.String("data", "", "MNIST-5k CSV (.csv or .csv.gz): 784 pixels then the label per row")
	epochs := flag.Int64("epochs", 3, "training epochs")
	batchSize := flag.Int("batch-size", 64, "training batch size")
	lr := flag.Float64("lr", 2e-3, "Adam learning rate")
	seed := flag.Uint64("seed", 42, "random seed")
	threads := flag.Int("threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	out := flag.String("out", "runs/train_exported", "output folder for logs, checkpoints and weights")
	flag.Parse()
	if *modelPath == "" || *data == "" || *epochs < 1 || *batchSize < 1 || *lr <= 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: train_exported -model mnist.pt2 -data mnist_5k.csv.gz [-epochs N] [-batch-size N] [-lr X] [-seed N] [-threads N] [-out DIR]")
		os.Exit(2)
	}
	fmt.Printf("fulmen %s on libtorch %s\n", fulmen.Version(), fulmen.LibtorchVersion())
	if *threads > 0 {
		check("setting threads", fulmen.SetNumThreads(*threads))
	}
	check("seeding", fulmen.ManualSeed(*seed))

	// MNIST-5k: 784 pixels (0..255, scaled to [0, 1]) then the label per row.
	csv := fulmen.DefaultCSVOptions()
	csv.LabelColumn = -1
	csv.Header = fulmen.CSVNoHeader
	csv.Scaling = fulmen.ScalingDivide
	csv.ScaleDivisor = 255
	all, err := fulmen.LoadCSV(*data, csv)
	check("loading the CSV", err)
	defer all.Close()
	val, train, err := all.SplitEvery(5, 0)
	check("splitting", err)
	defer val.Close()
	defer train.Close()
	trainLoader, err := fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: *batchSize, Shuffle: true, Seed: *seed})
	check("train loader", err)
	defer trainLoader.Close()
	valLoader, err := fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 500, Seed: *seed})
	check("val loader", err)
	defer valLoader.Close()

	model, err := fulmen.LoadExported(*modelPath)
	check("loading the exported model", err)
	defer model.Close()
	nParams, err := model.NumParameters()
	check("counting parameters", err)
	nTrain, err := train.Len()
	check("train size", err)
	nVal, err := val.Len()
	check("val size", err)
	fmt.Printf("exported model %s: %d parameters; train %d samples, validation %d samples\n",
		*modelPath, nParams, nTrain, nVal)

	// The steps log tensors, not numbers read from them: on a GPU a read
	// (Item) would make every step wait for the device, while a logged
	// tensor is read only where the trainer reads values anyway.
	module, err := fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			loss, acc, err := runStep(model, "training_step", b)
			if err != nil {
				return nil, err
			}
			if err := ctx.LogTensor("train_loss", loss, fulmen.LogOnStep|fulmen.LogOnEpoch, 0); err != nil {
				return nil, err
			}
			return loss, ctx.LogTensor("train_acc", acc, fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			loss, acc, err := runStep(model, "validation_step", b)
			if err != nil {
				return err
			}
			if err := ctx.LogTensor("val_loss", loss, fulmen.LogOnEpoch|fulmen.LogProgBar, 0); err != nil {
				return err
			}
			return ctx.LogTensor("val_acc", acc, fulmen.LogOnEpoch|fulmen.LogProgBar, 0)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultAdamOptions()
			o.LR = *lr
			opt, err := fulmen.NewAdam(model, nil, o)
			if err != nil {
				return err
			}
			if err := cfg.Add(opt); err != nil {
				opt.Close()
				return err
			}
			return nil
		},
		OnHook: func(hook fulmen.Hook, ctx *fulmen.HookContext) error {
			if hook != fulmen.HookTrainEpochEnd {
				return nil
			}
			return printEpoch(ctx)
		},
	})
	check("creating the module", err)
	defer module.Close()

	check("creating the output folder", os.MkdirAll(*out, 0o755))
	opts, err := fulmen.NewTrainerOptions()
	check("options", err)
	defer opts.Close()
	check("max_epochs", opts.SetInt("max_epochs", *epochs))
	check("default_root_dir", opts.Set("default_root_dir", *out))
	check("log_every_n_steps", opts.SetInt("log_every_n_steps", 10))
	trainer, err := fulmen.NewTrainer(opts)
	check("creating the trainer", err)
	defer trainer.Close()

	// Ctrl-C stops training between steps.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	check("training", trainer.Fit(ctx, module, trainLoader, valLoader))

	acc, err := trainer.CallbackMetric("val_acc")
	check("reading val_acc", err)
	vloss, err := trainer.CallbackMetric("val_loss")
	check("reading val_loss", err)
	logDir, err := trainer.LogDir()
	check("log dir", err)
	weights := filepath.Join(*out, "model.safetensors")
	check("saving the weights", model.Save(weights))
	fmt.Printf("final validation accuracy: %.2f%% (loss %.4f)\n", 100*acc, vloss)
	fmt.Printf("logs: %s\nweights: %s\n", logDir, weights)
}

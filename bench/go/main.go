// Command fulmen_bench_go is the "fulmen-go" contender of bench/PROTOCOL.md:
// fulmen's Trainer.fit driven from Go through the cgo binding, every extra
// off (progress bar, logger, checkpoints, summary). Epochs are timed by the
// module's hook (train epoch start / end). `--ranks 2` trains with strategy
// ddp on 2 processes (fulmen's launcher re-runs this program for rank 1).
// It is the Go twin of bench/c/fulmen_bench.c.
//
//	fulmen_bench_go --workload mlp64|mlp1024|cnn --data mnist_5k.csv.gz
//	                [--epochs 5] [--warmup 1] [--threads 1] [--seed 0] [--ranks 1]
//
// Rank 0 prints one JSON line per measured epoch, then a done line, on
// stdout; errors go to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// check exits on an error.
func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "fulmen_bench_go: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// build creates the workload's model.
func build(workload string) (*fulmen.Model, error) {
	if workload == "cnn" {
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
	hidden := int64(64)
	if workload == "mlp1024" {
		hidden = 1024
	}
	return fulmen.NewSequential(
		fulmen.Must(fulmen.NewLinear(784, hidden, true)),
		fulmen.Must(fulmen.NewActivation(fulmen.ReLU, 0)),
		fulmen.Must(fulmen.NewLinear(hidden, 10, true)),
	)
}

// asImages is ds with its pixels reshaped to [N, 1, 28, 28] (for the CNN).
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
	workload := flag.String("workload", "mlp64", "model: mlp64, mlp1024 or cnn")
	data := flag.String("data", ".deps/data/mnist_5k.csv.gz", "MNIST-5k CSV: 784 pixels then the label per row")
	epochs := flag.Int64("epochs", 5, "measured epochs")
	warmup := flag.Int64("warmup", 1, "epochs run first and not reported")
	threads := flag.Int("threads", 1, "intra-op threads")
	seed := flag.Uint64("seed", 0, "random seed")
	ranks := flag.Int("ranks", 1, "processes (2: strategy ddp)")
	accelerator := flag.String("accelerator", "cpu", "cpu or cuda")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "fulmen_bench_go: unknown argument %s\n", flag.Arg(0))
		os.Exit(2)
	}
	switch *workload {
	case "mlp64", "mlp1024", "cnn":
	default:
		fmt.Fprintf(os.Stderr, "fulmen_bench_go: unknown workload %s\n", *workload)
		os.Exit(2)
	}

	check("threads", fulmen.SetNumThreads(*threads))
	check("seed", fulmen.ManualSeed(*seed))
	csv := fulmen.DefaultCSVOptions()
	csv.LabelColumn = -1
	csv.Header = fulmen.CSVNoHeader
	csv.Scaling = fulmen.ScalingDivide
	csv.ScaleDivisor = 255
	ds, err := fulmen.LoadCSV(*data, csv)
	check("data", err)
	if *workload == "cnn" {
		img, err := asImages(ds)
		check("images", err)
		ds.Close()
		ds = img
	}
	loader, err := fulmen.NewLoader(ds, fulmen.LoaderOptions{BatchSize: 64, Shuffle: true, Seed: *seed})
	check("loader", err)
	model, err := build(*workload)
	check("model", err)

	var started time.Time
	var steps int64
	module, err := fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(_ *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			steps++
			x, err := b.Get(0)
			if err != nil {
				return nil, err
			}
			y, err := b.Get(1)
			if err != nil {
				return nil, err
			}
			logits, err := model.Forward(x)
			if err != nil {
				return nil, err
			}
			return fulmen.CrossEntropy(logits, y, fulmen.ReductionMean)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultSGDOptions()
			o.LR = 0.05
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
		OnHook: func(hook fulmen.Hook, ctx *fulmen.HookContext) error {
			switch hook {
			case fulmen.HookTrainEpochStart:
				steps = 0
				started = time.Now()
			case fulmen.HookTrainEpochEnd:
				seconds := time.Since(started).Seconds()
				epoch, err := ctx.Epoch()
				if err != nil {
					return err
				}
				r, err := fulmen.DistributedRanks()
				if err != nil {
					return err
				}
				if epoch >= *warmup && r.Rank == 0 {
					fmt.Printf("{\"contender\": \"fulmen-go\", \"workload\": %q, \"epoch\": %d, \"seconds\": %.6f, \"steps\": %d}\n",
						*workload, epoch, seconds, steps)
				}
			}
			return nil
		},
	})
	check("module", err)

	opts, err := fulmen.NewTrainerOptions()
	check("options", err)
	strategy := "auto"
	if *ranks > 1 {
		strategy = "ddp"
	}
	check("max_epochs", opts.SetInt("max_epochs", *warmup+*epochs))
	check("accelerator", opts.Set("accelerator", *accelerator))
	check("devices", opts.Set("devices", fmt.Sprint(*ranks)))
	check("strategy", opts.Set("strategy", strategy))
	check("progress", opts.SetBool("enable_progress_bar", false))
	check("checkpointing", opts.SetBool("enable_checkpointing", false))
	check("summary", opts.SetBool("enable_model_summary", false))
	check("logger", opts.Set("logger", "false"))
	trainer, err := fulmen.NewTrainer(opts)
	check("trainer", err)
	check("fit", trainer.Fit(context.Background(), module, loader, nil))
	r, err := fulmen.DistributedRanks()
	check("ranks", err)
	if r.Rank == 0 {
		fmt.Printf("{\"contender\": \"fulmen-go\", \"workload\": %q, \"done\": true}\n", *workload)
	}
	trainer.Close()
	opts.Close()
	module.Close()
	model.Close()
	loader.Close()
	ds.Close()
	check("shutdown", fulmen.DistributedShutdown(120*time.Second))
}

// Command forecast forecasts the El Nino series (monthly Pacific sea
// surface temperatures 1950-2010, from the statsmodels package) one month
// ahead with an LSTM trained through fulmen's Go binding. Each sample is
// the previous -window months, standardised by the training months' mean
// and standard deviation; the LSTM's last hidden state goes through a
// linear head. The last 120 months are the validation set. It is the Go
// twin of examples/c/forecast.c, with the same flags and the same results.
//
//	forecast -data elnino.csv [-epochs 40] [-batch-size 32] [-window 24]
//	         [-hidden 32] [-lr 1e-2] [-seed 42] [-threads N]
//	         [-limit-batches N] [-no-shuffle] [-out runs/forecast]
//	         [-init-out FILE] [-loss-log FILE]
//
// It prints the validation mean absolute error (in degrees) after every
// epoch and, at the end, beside the seasonal naive forecast (the same month
// a year before), which the model must beat.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

const (
	maxMonths = 100000 // a longer series is refused
	valMonths = 120    // months held out for validation
	season    = 12     // the seasonal period
)

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "forecast: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// readSeries reads elnino.csv: a header, then "YEAR,jan,...,dec" per row.
func readSeries(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var months []float64
	sc := bufio.NewScanner(f)
	for row := 0; sc.Scan(); row++ {
		line := strings.TrimSpace(sc.Text())
		if row == 0 || line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != 1+season || len(months)+season > maxMonths {
			return nil, fmt.Errorf("%s: expected a year and 12 months per row (row %d)", path, row+1)
		}
		for _, v := range fields[1:] {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: row %d: %v", path, row+1, err)
			}
			months = append(months, x)
		}
	}
	return months, sc.Err()
}

// windows holds, for each target month in [from, to) of z, the window
// months before it: x [count, window, 1] and y [count, 1].
func windows(z []float32, from, to, window int) (*fulmen.Dataset, error) {
	count := to - from
	x := make([]float32, 0, count*window)
	y := make([]float32, 0, count)
	for t := from; t < to; t++ {
		x = append(x, z[t-window:t]...)
		y = append(y, z[t])
	}
	tx, err := fulmen.FromSlice(x, int64(count), int64(window), 1)
	if err != nil {
		return nil, err
	}
	defer tx.Close()
	ty, err := fulmen.FromSlice(y, int64(count), 1)
	if err != nil {
		return nil, err
	}
	defer ty.Close()
	return fulmen.NewTensorDataset(tx, ty)
}

// predict is the standardised next-month prediction [B, 1] of windows x.
func predict(model *fulmen.Model, x *fulmen.Tensor) (*fulmen.Tensor, error) {
	states, err := model.ForwardMultiChild("lstm", x) // output, h_n [1, B, H], c_n
	if err != nil {
		return nil, err
	}
	last, err := states[1].Squeeze(0)
	if err != nil {
		return nil, err
	}
	return model.ForwardChild("head", last)
}

func main() {
	data := flag.String("data", "", "the El Nino CSV (elnino.csv)")
	epochs := flag.Int64("epochs", 40, "training epochs")
	batchSize := flag.Int("batch-size", 32, "training batch size")
	window := flag.Int("window", 24, "months per input window (at least 12)")
	hidden := flag.Int64("hidden", 32, "LSTM hidden size")
	lr := flag.Float64("lr", 1e-2, "Adam learning rate")
	seed := flag.Uint64("seed", 42, "random seed")
	threads := flag.Int("threads", 0, "libtorch intra-op threads (0: libtorch's default)")
	limit := flag.Int64("limit-batches", 0, "train on the first N batches of each epoch (0: all)")
	noShuffle := flag.Bool("no-shuffle", false, "keep the training windows in order")
	out := flag.String("out", "runs/forecast", "output folder for logs, checkpoints and weights")
	initOut := flag.String("init-out", "", "save the initial weights here (safetensors)")
	lossLog := flag.String("loss-log", "", "write every training step's loss here")
	flag.Parse()
	if *data == "" || flag.NArg() > 0 || *window < season || *batchSize < 1 || *hidden < 1 {
		fmt.Fprintln(os.Stderr, "usage: forecast -data elnino.csv [-epochs N] [-batch-size N] [-window N>=12] [-hidden N] [-lr X] [-seed N] [-threads N] [-limit-batches N] [-no-shuffle] [-out DIR] [-init-out FILE] [-loss-log FILE]")
		os.Exit(2)
	}
	fmt.Printf("fulmen %s on libtorch %s\n", fulmen.Version(), fulmen.LibtorchVersion())
	if *threads > 0 {
		check("setting threads", fulmen.SetNumThreads(*threads))
	}
	check("seeding", fulmen.ManualSeed(*seed))

	months, err := readSeries(*data)
	check("reading the series", err)
	n := len(months)
	if n < valMonths+*window+1 {
		check("reading the series", fmt.Errorf("%d months are too few", n))
	}
	split := n - valMonths
	mean, variance := 0.0, 0.0
	for _, m := range months[:split] {
		mean += m
	}
	mean /= float64(split)
	for _, m := range months[:split] {
		variance += (m - mean) * (m - mean)
	}
	std := math.Sqrt(variance / float64(split-1))
	z := make([]float32, n)
	for i, m := range months {
		z[i] = float32((m - mean) / std)
	}
	train, err := windows(z, *window, split, *window)
	check("training windows", err)
	defer train.Close()
	val, err := windows(z, split, n, *window)
	check("validation windows", err)
	defer val.Close()
	naive := 0.0
	for i := split; i < n; i++ {
		naive += math.Abs(months[i] - months[i-season])
	}
	naive /= valMonths
	fmt.Printf("%d months; %d training and %d validation targets, windows of %d months\n", n, split-*window,
		valMonths, *window)

	trainLoader, err := fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: *batchSize, Shuffle: !*noShuffle, Seed: *seed})
	check("train loader", err)
	defer trainLoader.Close()
	valLoader, err := fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: valMonths, Seed: *seed})
	check("val loader", err)
	defer valLoader.Close()

	ro := fulmen.DefaultRNNOptions()
	ro.BatchFirst = true
	model, err := fulmen.NewNamed()
	check("model", err)
	defer model.Close()
	check("lstm", model.Add("lstm", fulmen.Must(fulmen.NewLSTM(1, *hidden, ro))))
	check("head", model.Add("head", fulmen.Must(fulmen.NewLinear(*hidden, 1, true))))
	if *initOut != "" {
		check("saving the initial weights", model.Save(*initOut))
	}
	var losses *os.File
	if *lossLog != "" {
		losses, err = os.Create(*lossLog)
		check("loss log", err)
	}

	batch := func(b *fulmen.Batch) (pred, y *fulmen.Tensor, err error) {
		x, err := b.Get(0)
		if err != nil {
			return nil, nil, err
		}
		if y, err = b.Get(1); err != nil {
			return nil, nil, err
		}
		pred, err = predict(model, x)
		return pred, y, err
	}
	module, err := fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			pred, y, err := batch(b)
			if err != nil {
				return nil, err
			}
			loss, err := fulmen.MSELoss(pred, y, fulmen.ReductionMean)
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
			// A logged tensor, not a number read from it: a read would
			// make every step wait for a GPU.
			return loss, ctx.LogTensor("train_loss", loss, fulmen.LogOnStep|fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			pred, y, err := batch(b)
			if err != nil {
				return err
			}
			mae, err := fulmen.L1Loss(pred, y, fulmen.ReductionMean)
			if err != nil {
				return err
			}
			scaled, err := mae.MulScalar(std)
			if err != nil {
				return err
			}
			return ctx.LogTensor("val_mae", scaled, fulmen.LogOnEpoch|fulmen.LogProgBar, 0)
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
	if *limit > 0 {
		check("limit_train_batches", opts.SetLimitTrainBatches(*limit))
	}
	trainer, err := fulmen.NewTrainer(opts)
	check("creating the trainer", err)
	defer trainer.Close()
	check("training", trainer.Fit(context.Background(), module, trainLoader, valLoader))
	if losses != nil {
		check("loss log", losses.Close())
	}

	mae, err := trainer.CallbackMetric("val_mae")
	check("reading val_mae", err)
	verdict := "the LSTM is better"
	if mae >= naive {
		verdict = "the LSTM is NOT better"
	}
	fmt.Printf("validation MAE: LSTM %.3f degrees, seasonal naive %.3f degrees (%s)\n", mae, naive, verdict)
	weights := filepath.Join(*out, "model.safetensors")
	check("saving the weights", model.Save(weights))
	fmt.Printf("weights: %s\n", weights)
}

// Command custom_device is Lightning's XPUAccelerator example in Go: a
// custom accelerator whose ParallelDevices returns PrivateUse1 devices
// (torch.device("npu", i)), training an MLP on MNIST-5k there. It is the
// Go twin of examples/c/custom_device.c.
//
//	custom_device -data mnist_5k.csv.gz [-epochs 2] [-precision 32-true]
//
// A vendor's real backend registers itself with libtorch when its library
// loads; this program uses fulmen's fake device instead (a PrivateUse1
// backend that keeps tensors in host memory and runs libtorch's CPU
// kernels), so it runs anywhere. Everything after RegisterFakeDevice is what
// a program does with a real one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

// npu is the accelerator: its devices are the PrivateUse1 backend's.
type npu struct{}

func (npu) IsAvailable() (bool, error) {
	n, err := fulmen.DeviceCount(fulmen.PrivateUse1)
	return n > 0, err
}

func (npu) AutoDeviceCount() (int, error) { return fulmen.DeviceCount(fulmen.PrivateUse1) }

// ParallelDevices is [torch.device("npu", i) for i in devices].
func (npu) ParallelDevices(ids []int64) ([]fulmen.Device, error) {
	out := make([]fulmen.Device, len(ids))
	for i, id := range ids {
		out[i] = fulmen.Device{Type: fulmen.PrivateUse1, Index: id}
	}
	return out, nil
}

// SetupDevice runs after fulmen made the device the thread's current one.
func (npu) SetupDevice(d fulmen.Device) error {
	fmt.Printf("setting up npu:%d\n", d.Index)
	return nil
}

func (npu) Teardown() error                                       { return nil }
func (npu) DeviceStats(fulmen.Device) (map[string]float64, error) { return nil, nil }

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "custom_device: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// forwardLoss is the logits and cross-entropy of a [pixels, labels] batch.
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

// accuracy is the fraction of the batch predicted right, as a one-element
// tensor.
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

func main() {
	data := flag.String("data", "", "MNIST-5k CSV (.csv or .csv.gz)")
	epochs := flag.Int64("epochs", 2, "training epochs")
	precision := flag.String("precision", "32-true", "precision: 32-true, bf16-mixed, 16-mixed, ...")
	flag.Parse()
	if *data == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: custom_device -data mnist_5k.csv.gz [-epochs N] [-precision P]")
		os.Exit(2)
	}

	// The stand-in for a vendor's backend: process-wide, once, first.
	check("registering the fake device", fulmen.RegisterFakeDevice("npu", 2))
	name, err := fulmen.DeviceTypeName(fulmen.PrivateUse1)
	check("device name", err)
	count, err := fulmen.DeviceCount(fulmen.PrivateUse1)
	check("device count", err)
	fmt.Printf("PrivateUse1 backend %q with %d device(s)\n", name, count)
	check("registering npu", fulmen.RegisterAccelerator("npu", "a PrivateUse1 backend named npu", npu{}, false))
	defer fulmen.UnregisterAccelerator("npu")

	check("seeding", fulmen.ManualSeed(0))
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
	trainLoader, err := fulmen.NewLoader(train, fulmen.LoaderOptions{BatchSize: 64, Shuffle: true})
	check("train loader", err)
	defer trainLoader.Close()
	valLoader, err := fulmen.NewLoader(val, fulmen.LoaderOptions{BatchSize: 500})
	check("val loader", err)
	defer valLoader.Close()

	model, err := fulmen.NewSequential(
		fulmen.Must(fulmen.NewLinear(784, 128, true)),
		fulmen.Must(fulmen.NewActivation(fulmen.ReLU, 0)),
		fulmen.Must(fulmen.NewLinear(128, 10, true)),
	)
	check("model", err)
	defer model.Close()
	module, err := fulmen.NewLightningModule(model, fulmen.ModuleFuncs{
		TrainingStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) (*fulmen.Tensor, error) {
			_, _, loss, err := forwardLoss(model, b)
			if err != nil {
				return nil, err
			}
			// A logged tensor, not a number read from it: a read would
			// make every step wait for the device.
			return loss, ctx.LogTensor("train_loss", loss, fulmen.LogOnEpoch, 0)
		},
		ValidationStep: func(ctx *fulmen.StepContext, b *fulmen.Batch) error {
			logits, labels, _, err := forwardLoss(model, b)
			if err != nil {
				return err
			}
			acc, err := accuracy(logits, labels)
			if err != nil {
				return err
			}
			return ctx.LogTensor("val_acc", acc, fulmen.LogOnEpoch, 0)
		},
		ConfigureOptimizers: func(cfg *fulmen.OptimizerConfig) error {
			o := fulmen.DefaultSGDOptions()
			o.LR = 0.1
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
	check("module", err)
	defer module.Close()

	// Trainer(accelerator="npu", devices=1): the model and every batch go
	// to npu:0, and the run computes there.
	opts, err := fulmen.NewTrainerOptions()
	check("options", err)
	defer opts.Close()
	check("max_epochs", opts.SetInt("max_epochs", *epochs))
	check("accelerator", opts.Set("accelerator", "npu"))
	check("devices", opts.Set("devices", "1"))
	check("precision", opts.Set("precision", *precision))
	check("logger", opts.SetBool("logger", false))
	check("checkpointing", opts.SetBool("enable_checkpointing", false))
	check("summary", opts.SetBool("enable_model_summary", false))
	trainer, err := fulmen.NewTrainer(opts)
	check("trainer", err)
	defer trainer.Close()
	check("training", trainer.Fit(context.Background(), module, trainLoader, valLoader))
	acc, err := trainer.CallbackMetric("val_acc")
	check("val_acc", err)
	fmt.Printf("trained on npu:0 in %s: final validation accuracy %.2f%%\n", *precision, 100*acc)
	if acc <= 0.8 {
		os.Exit(1)
	}
}

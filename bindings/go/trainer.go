package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"context"
	"runtime"
)

// TrainerOptions are trainer options, as the keyword arguments of
// Lightning's Trainer(...): a typed setter for each (SetMaxEpochs,
// SetLimitTrainBatchesFraction, SetPrecisionName, ...; see
// trainer_options_gen.go, generated from the same table as the key list of
// fulmen_trainer_options_set in fulmen/trainer.h), or Set, SetInt, SetFloat and
// SetBool by name.
//
// As in Lightning, a number written with '.' or an exponent is a fraction
// and one without is a count: for limit_*_batches, overfit_batches and
// val_check_interval, SetFloat(key, 1) (written "1.0") means all batches
// and SetInt(key, 1) (or Set(key, "1")) means one batch.
//
// By default a fit runs a sanity check of 2 validation batches, prints a
// model summary to stderr, and writes CSV and TensorBoard logs and a
// checkpoint of the latest epoch under default_root_dir (".").
type TrainerOptions struct {
	h handle[*C.fulmen_trainer_options]
}

// NewTrainerOptions creates options with Lightning's defaults.
func NewTrainerOptions() (*TrainerOptions, error) {
	var out *C.fulmen_trainer_options
	if err := check(C.fulmen_trainer_options_new(&out)); err != nil {
		return nil, err
	}
	o := &TrainerOptions{}
	o.h.store(out)
	runtime.SetFinalizer(o, (*TrainerOptions).Close)
	return o, nil
}

func (o *TrainerOptions) ptr() *C.fulmen_trainer_options {
	if o == nil {
		gcStress()
		return nil
	}
	h := o.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the options; idempotent. The error is always nil.
func (o *TrainerOptions) Close() error {
	if o == nil {
		return nil
	}
	h := o.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_trainer_options_free(h)
	runtime.SetFinalizer(o, nil)
	return nil
}

// Set sets option key from its text form ("none" where allowed). An
// unknown key or bad value is an error naming it; the options are then
// unchanged.
func (o *TrainerOptions) Set(key, value string) error {
	k, v := cString(key), cString(value)
	defer freeCString(k)
	defer freeCString(v)
	err := check(C.fulmen_trainer_options_set(o.ptr(), k, v))
	runtime.KeepAlive(o)
	return err
}

// SetInt sets an integer option.
func (o *TrainerOptions) SetInt(key string, value int64) error {
	k := cString(key)
	defer freeCString(k)
	err := check(C.fulmen_trainer_options_set_int(o.ptr(), k, C.int64_t(value)))
	runtime.KeepAlive(o)
	return err
}

// SetFloat sets a numeric option such as a batch-limit fraction or
// gradient_clip_val. The library always reads the value as a float (1 is
// "1.0": all batches); use SetInt for a count.
func (o *TrainerOptions) SetFloat(key string, value float64) error {
	k := cString(key)
	defer freeCString(k)
	err := check(C.fulmen_trainer_options_set_float(o.ptr(), k, C.double(value)))
	runtime.KeepAlive(o)
	return err
}

// SetBool sets a boolean option.
func (o *TrainerOptions) SetBool(key string, value bool) error {
	k := cString(key)
	defer freeCString(k)
	err := check(C.fulmen_trainer_options_set_bool(o.ptr(), k, C.bool(value)))
	runtime.KeepAlive(o)
	return err
}

// Trainer runs the fit / validate / test / predict loops.
type Trainer struct {
	h handle[*C.fulmen_trainer]
}

// NewTrainer creates a trainer from opts (copied; nil for the defaults).
func NewTrainer(opts *TrainerOptions) (*Trainer, error) {
	var out *C.fulmen_trainer
	err := check(C.fulmen_trainer_new(opts.ptr(), &out))
	runtime.KeepAlive(opts)
	if err != nil {
		return nil, err
	}
	t := &Trainer{}
	t.h.store(out)
	runtime.SetFinalizer(t, (*Trainer).Close)
	return t, nil
}

func (t *Trainer) ptr() *C.fulmen_trainer {
	if t == nil {
		gcStress()
		return nil
	}
	h := t.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the trainer; idempotent, and safe from any goroutine, also
// while a Fit (or Validate, ...) uses the trainer: the library then frees
// it when that call returns. The error is always nil.
func (t *Trainer) Close() error {
	if t == nil {
		return nil
	}
	h := t.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_trainer_free(h)
	runtime.SetFinalizer(t, nil)
	return nil
}

// RunOption is an option of Fit, Validate, Test and Predict.
type RunOption func(*runConfig)

type runConfig struct {
	ckptPath *string
}

// CkptPath makes Fit resume from a checkpoint, and Validate, Test and
// Predict load its weights first: a file path, "last" (the newest last (or
// any) checkpoint under default_root_dir and the ModelCheckpoint folders)
// or "best" (the best checkpoint of this trainer's previous fit).
func CkptPath(path string) RunOption {
	return func(c *runConfig) { c.ckptPath = &path }
}

// ckptArg is the C ckpt_path of opts (nil for none), to free with
// freeCString.
func ckptArg(opts []RunOption) *C.char {
	var c runConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.ckptPath == nil {
		return nil
	}
	return cString(*c.ckptPath)
}

// Fit trains module on train, validating on val (may be nil) as
// val_check_interval says when the module has a ValidationStep. A nil
// train takes the module's TrainDataloader and a nil val its
// ValDataloader when it has them (Lightning's trainer.fit(model)), called
// again every reload_dataloaders_every_n_epochs epochs. With
// CkptPath it resumes from a checkpoint (the global step and epoch
// continue). The callbacks run while this goroutine waits. ctx is checked at the
// start of every callback: once it is done, Fit stops and returns an error
// for which errors.Is(err, ctx.Err()) holds. A callback's error or
// recovered panic (*PanicError) is the cause of the returned *Error.
func (t *Trainer) Fit(ctx context.Context, module *LightningModule, train, val *Loader, opts ...RunOption) error {
	ckpt := ckptArg(opts)
	defer freeCString(ckpt)
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_fit(t.ptr(), module.ptr(), train.ptr(), val.ptr(), ckpt)
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(train)
	runtime.KeepAlive(val)
	return err
}

// Validate runs the validation loop over loader once (with CkptPath, on
// the weights of that checkpoint) and returns what Lightning's
// trainer.validate returns: one dict of epoch metrics per loader (see
// EvalResults).
func (t *Trainer) Validate(ctx context.Context, module *LightningModule, loader *Loader, opts ...RunOption) ([]map[string]float64, error) {
	ckpt := ckptArg(opts)
	defer freeCString(ckpt)
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_validate(t.ptr(), module.ptr(), loader.ptr(), ckpt)
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(loader)
	return t.evalResultsAfter(err)
}

// Test runs the test loop over loader once (with CkptPath, on the weights
// of that checkpoint) and returns its metric dicts, as Validate.
func (t *Trainer) Test(ctx context.Context, module *LightningModule, loader *Loader, opts ...RunOption) ([]map[string]float64, error) {
	ckpt := ckptArg(opts)
	defer freeCString(ckpt)
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_test(t.ptr(), module.ptr(), loader.ptr(), ckpt)
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(loader)
	return t.evalResultsAfter(err)
}

// Predict runs PredictStep over loader (with CkptPath, on the weights of
// that checkpoint) and returns the outputs concatenated along dimension 0
// (nil when no step produced one).
func (t *Trainer) Predict(ctx context.Context, module *LightningModule, loader *Loader, opts ...RunOption) (*Tensor, error) {
	ckpt := ckptArg(opts)
	defer freeCString(ckpt)
	var out *C.fulmen_tensor
	err := withCallbacks(ctx, func() *C.fulmen_error {
		return C.fulmen_trainer_predict(t.ptr(), module.ptr(), loader.ptr(), ckpt, &out)
	})
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	runtime.KeepAlive(loader)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// CallbackMetric is the latest value of a logged metric (Lightning's
// trainer.callback_metrics[name]); ErrInvalidArgument, naming the metrics
// that exist, when there is none of that name.
func (t *Trainer) CallbackMetric(name string) (float64, error) {
	n := cString(name)
	defer freeCString(n)
	var v C.double
	err := check(C.fulmen_trainer_callback_metric(t.ptr(), n, &v))
	runtime.KeepAlive(t)
	return float64(v), err
}

// GlobalStep is the number of optimizer steps of the trainer's fits so
// far (a fit goes on from the last one's progress).
func (t *Trainer) GlobalStep() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_trainer_global_step(t.ptr(), &v))
	runtime.KeepAlive(t)
	return int64(v), err
}

// CurrentEpoch is the number of epochs the trainer's fits completed so
// far: the epoch the next fit trains first.
func (t *Trainer) CurrentEpoch() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_trainer_current_epoch(t.ptr(), &v))
	runtime.KeepAlive(t)
	return int64(v), err
}

// SetMaxEpochs sets the epoch limit of the next fits (-1: none),
// Lightning's trainer.fit_loop.max_epochs = n: a finished fit trains on
// from its epoch once raised.
func (t *Trainer) SetMaxEpochs(maxEpochs int64) error {
	err := check(C.fulmen_trainer_set_max_epochs(t.ptr(), C.int64_t(maxEpochs)))
	runtime.KeepAlive(t)
	return err
}

// SetMaxSteps sets the optimizer-step limit of the next fits (-1: none),
// counting every fit's steps.
func (t *Trainer) SetMaxSteps(maxSteps int64) error {
	err := check(C.fulmen_trainer_set_max_steps(t.ptr(), C.int64_t(maxSteps)))
	runtime.KeepAlive(t)
	return err
}

// LogDir is the log folder of the last fit (.../lightning_logs/version_N);
// ErrInvalidState when no logger ran.
func (t *Trainer) LogDir() (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_log_dir(t.ptr(), b, c, n)
	})
	runtime.KeepAlive(t)
	return s, err
}

// ProfilerReport is the simple profiler's report of the last run (option
// "profiler" "simple"); ErrInvalidState without one.
func (t *Trainer) ProfilerReport() (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_trainer_profiler_report(t.ptr(), b, c, n)
	})
	runtime.KeepAlive(t)
	return s, err
}

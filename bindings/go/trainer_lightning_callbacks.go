package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"math"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// ModelPruning holds the arguments of Lightning's ModelPruning
// (fulmen_model_pruning): a pruning function and amount with Lightning's
// other defaults (every "weight" and "bias" pruned globally at the end of
// each training epoch, the lottery ticket reset, pruning permanent at the
// end of training), changed by its setters. Trainer.AddModelPruning copies
// them. Close it.
type ModelPruning struct {
	h handle[*C.fulmen_model_pruning]
}

// NewModelPruning are the arguments of a ModelPruning with pruningFn
// "l1_unstructured" or "random_unstructured" and amount the fraction in
// [0, 1] of the entries not pruned yet that each pruning removes
// (SetAmountCount gives a count instead).
func NewModelPruning(pruningFn string, amount float64) (*ModelPruning, error) {
	f := cString(pruningFn)
	defer freeCString(f)
	var out *C.fulmen_model_pruning
	if err := check(C.fulmen_model_pruning_new(f, C.double(amount), &out)); err != nil {
		return nil, err
	}
	p := &ModelPruning{}
	p.h.store(out)
	runtime.SetFinalizer(p, (*ModelPruning).Close)
	return p, nil
}

func (p *ModelPruning) ptr() *C.fulmen_model_pruning {
	if p == nil {
		return nil
	}
	return p.h.load()
}

// Close frees the arguments (callbacks added from them keep their copy);
// idempotent. The error is always nil.
func (p *ModelPruning) Close() error {
	if p == nil {
		return nil
	}
	if h := p.h.take(); h != nil {
		C.fulmen_model_pruning_free(h)
		runtime.SetFinalizer(p, nil)
	}
	return nil
}

// SetAmountCount makes each pruning remove count entries (Lightning's
// integer amount): of each parameter, or of all of them with global
// pruning.
func (p *ModelPruning) SetAmountCount(count int64) error {
	err := check(C.fulmen_model_pruning_set_amount_count(p.ptr(), C.int64_t(count)))
	runtime.KeepAlive(p)
	return err
}

// SetParameterNames sets the parameters' own names pruned in every module:
// "weight" and / or "bias" (none: both).
func (p *ModelPruning) SetParameterNames(names ...string) error {
	return p.setNames(names, false)
}

// SetParametersToPrune prunes exactly these parameters, by their
// state_dict names ("0.weight"), in this order (Lightning's
// parameters_to_prune; none: every module's parameter names).
func (p *ModelPruning) SetParametersToPrune(names ...string) error {
	return p.setNames(names, true)
}

func (p *ModelPruning) setNames(names []string, exact bool) error {
	// C memory: the list may not point into Go's.
	list := C.malloc(C.size_t(len(names)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(list)
	cs := unsafe.Slice((**C.char)(list), len(names))
	for i, n := range names {
		cs[i] = cString(n)
	}
	defer func() {
		for _, c := range cs {
			freeCString(c)
		}
	}()
	var err error
	if exact {
		err = check(C.fulmen_model_pruning_set_parameters_to_prune(p.ptr(), (**C.char)(list), C.size_t(len(names))))
	} else {
		err = check(C.fulmen_model_pruning_set_parameter_names(p.ptr(), (**C.char)(list), C.size_t(len(names))))
	}
	runtime.KeepAlive(p)
	return err
}

// SetUseGlobalUnstructured prunes over all the parameters at once (the
// default) or each by itself.
func (p *ModelPruning) SetUseGlobalUnstructured(on bool) error {
	err := check(C.fulmen_model_pruning_set_use_global_unstructured(p.ptr(), C.bool(on)))
	runtime.KeepAlive(p)
	return err
}

// SetApplyPruning says whether to prune at all (default true).
func (p *ModelPruning) SetApplyPruning(on bool) error {
	err := check(C.fulmen_model_pruning_set_apply_pruning(p.ptr(), C.bool(on)))
	runtime.KeepAlive(p)
	return err
}

// SetMakePruningPermanent stops masking at the end of training (default
// true); the weights hold the pruned values either way.
func (p *ModelPruning) SetMakePruningPermanent(on bool) error {
	err := check(C.fulmen_model_pruning_set_make_pruning_permanent(p.ptr(), C.bool(on)))
	runtime.KeepAlive(p)
	return err
}

// SetUseLotteryTicketHypothesis puts the entries kept back to their values
// at fit's setup after each pruning (default true).
func (p *ModelPruning) SetUseLotteryTicketHypothesis(on bool) error {
	err := check(C.fulmen_model_pruning_set_use_lottery_ticket_hypothesis(p.ptr(), C.bool(on)))
	runtime.KeepAlive(p)
	return err
}

// SetPruneOnTrainEpochEnd prunes at each training epoch end (true, the
// default) or at each validation end of fit.
func (p *ModelPruning) SetPruneOnTrainEpochEnd(on bool) error {
	err := check(C.fulmen_model_pruning_set_prune_on_train_epoch_end(p.ptr(), C.bool(on)))
	runtime.KeepAlive(p)
	return err
}

// SetVerbose prints nothing (0, the default), the sparsity after each
// pruning on stderr (1), or each parameter's too (2).
func (p *ModelPruning) SetVerbose(level int32) error {
	err := check(C.fulmen_model_pruning_set_verbose(p.ptr(), C.int32_t(level)))
	runtime.KeepAlive(p)
	return err
}

// AddModelPruning adds Lightning's ModelPruning with a copy of p: the
// weights get their masks at each pruning, training sees the masked
// weights and gradients at every step, and the model ends with the pruned
// weights.
func (t *Trainer) AddModelPruning(p *ModelPruning) error {
	err := check(C.fulmen_trainer_add_model_pruning(t.ptr(), p.ptr()))
	runtime.KeepAlive(t)
	runtime.KeepAlive(p)
	return err
}

// SpikeDetectionOptions are the arguments of Lightning's SpikeDetection.
type SpikeDetectionOptions struct {
	// Mode says whether a lower loss (ModeMin) or a higher one is better.
	Mode Mode
	// Window is the number of losses in the running mean.
	Window int
	// Warmup is the number of batches of each epoch never checked.
	Warmup int64
	// Atol is the absolute tolerance (NaN: unchecked).
	Atol float64
	// Rtol is the relative tolerance, times the mean (NaN: unchecked).
	Rtol float64
	// ExcludeBatchesPath is the JSON file of batches to skip (a path
	// ending in ".json"), or its folder; "": skip_batches.json in the
	// trainer's default_root_dir.
	ExcludeBatchesPath string
	// FiniteOnly makes a NaN or infinite loss a spike.
	FiniteOnly bool
}

// DefaultSpikeDetectionOptions are Lightning's defaults: min mode, a
// window of 10, one batch of warm-up, rtol 2, no atol, finite only.
func DefaultSpikeDetectionOptions() SpikeDetectionOptions {
	return SpikeDetectionOptions{Mode: ModeMin, Window: 10, Warmup: 1, Atol: math.NaN(), Rtol: 2, FiniteOnly: true}
}

// AddSpikeDetection adds Lightning's SpikeDetection: a training loss that
// is not an improvement and differs from the running mean of the last
// Window losses by at least Atol and Rtol times the mean, or a non-finite
// one with FiniteOnly, fails the fit with an error matching ErrNonFinite
// that names the batch, after its batch and the one before are written to
// the JSON file of batches to skip.
func (t *Trainer) AddSpikeDetection(opts SpikeDetectionOptions) error {
	if opts.Window < 0 {
		return &Error{Code: CodeInvalidArgument, Message: "AddSpikeDetection: negative window"}
	}
	path := optCString(opts.ExcludeBatchesPath)
	defer freeCString(path)
	err := check(C.fulmen_trainer_add_spike_detection(t.ptr(), C.int32_t(opts.Mode), C.size_t(opts.Window),
		C.int64_t(opts.Warmup), C.double(opts.Atol), C.double(opts.Rtol), path, C.bool(opts.FiniteOnly)))
	runtime.KeepAlive(t)
	return err
}

// BatchPrediction is one predict batch, as a prediction writer's
// WriteOnBatchEnd gets it. Its tensors are valid during the call only
// (Share one to keep it).
type BatchPrediction struct {
	// Prediction is what PredictStep returned (nil: nothing).
	Prediction *Tensor
	// BatchIndices are the dataset indices of the batch's samples (empty
	// when the loader cannot tell: a Go iterator).
	BatchIndices []int64
	// Batch is the batch's tensors.
	Batch []*Tensor
	// BatchIdx is the batch's index in its loader.
	BatchIdx int64
	// DataloaderIdx is the loader's index.
	DataloaderIdx int
}

// EpochPredictions are one loader's predictions of a predict epoch, as a
// prediction writer's WriteOnEpochEnd gets them; the tensors are valid
// during the call only.
type EpochPredictions struct {
	// DataloaderIdx is the loader's index.
	DataloaderIdx int
	// Predictions holds each batch's prediction in order (nil: none).
	Predictions []*Tensor
	// BatchIndices holds each batch's samples' dataset indices.
	BatchIndices [][]int64
}

// PredictionWriter is Lightning's BasePredictionWriter: WriteOnBatchEnd
// gets each batch's prediction when the interval writes batches,
// WriteOnEpochEnd each loader's predictions at the end of the epoch when
// it writes epochs. They run while the goroutine that called Predict
// waits; an error fails Predict and is its error's cause. A
// runtime.Goexit in one fails the call that ran it like an error naming
// it: see "Callbacks and runtime.Goexit" in the package documentation.
type PredictionWriter struct {
	WriteOnBatchEnd func(p BatchPrediction) error
	WriteOnEpochEnd func(e EpochPredictions) error
}

// AddPredictionWriter adds w as Lightning's BasePredictionWriter with
// writeInterval "batch" ("": the default), "epoch" or "batch_and_epoch";
// a function the interval does not use may be nil. The trainer holds w
// until it is closed.
func (t *Trainer) AddPredictionWriter(writeInterval string, w PredictionWriter) error {
	wi := optCString(writeInterval)
	defer freeCString(wi)
	err := withHandle(w, func(h C.uintptr_t) cErr {
		return C.fulmen_go_add_prediction_writer(t.ptr(), wi, C.bool(w.WriteOnBatchEnd != nil),
			C.bool(w.WriteOnEpochEnd != nil), h)
	})
	runtime.KeepAlive(t)
	return err
}

// int64s copies n C integers.
func int64s(p *C.int64_t, n int) []int64 {
	out := make([]int64, n)
	if n > 0 {
		for i, v := range unsafe.Slice(p, n) {
			out[i] = int64(v)
		}
	}
	return out
}

// batchTensors wraps a writer's n borrowed batch tensors.
func batchTensors(batch **C.fulmen_tensor, n C.size_t) []*Tensor {
	var out []*Tensor
	if n > 0 {
		for _, h := range unsafe.Slice(batch, int(n)) {
			out = append(out, newTensor(h))
		}
	}
	return out
}

// splitIndices splits an epoch's dataset indices into its n batches',
// counts[i] for batch i.
func splitIndices(indices *C.int64_t, counts *C.size_t, n int) [][]int64 {
	out := [][]int64{}
	at := 0
	for i := 0; i < n; i++ {
		k := int(unsafe.Slice(counts, n)[i])
		mine := []int64{}
		if indices != nil && k > 0 {
			mine = int64s((*C.int64_t)(unsafe.Add(unsafe.Pointer(indices), at*8)), k)
		}
		at += k
		out = append(out, mine)
	}
	return out
}

//export fulmenGoWriteBatch
func fulmenGoWriteBatch(ud C.uintptr_t, prediction *C.fulmen_tensor, indices *C.int64_t, nIndices C.size_t,
	batch **C.fulmen_tensor, batchLen C.size_t, batchIdx C.int64_t, dataloaderIdx C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		w := cgo.Handle(ud).Value().(PredictionWriter)
		p := BatchPrediction{Prediction: newTensor(prediction), BatchIdx: int64(batchIdx),
			DataloaderIdx: int(dataloaderIdx), BatchIndices: int64s(indices, int(nIndices)),
			Batch: batchTensors(batch, batchLen)}
		return w.WriteOnBatchEnd(p)
	})
}

//export fulmenGoWriteEpoch
func fulmenGoWriteEpoch(ud C.uintptr_t, dataloaderIdx C.size_t, predictions **C.fulmen_tensor, nBatches C.size_t,
	indices *C.int64_t, counts *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		w := cgo.Handle(ud).Value().(PredictionWriter)
		e := EpochPredictions{DataloaderIdx: int(dataloaderIdx), Predictions: []*Tensor{}, BatchIndices: [][]int64{}}
		if n := int(nBatches); n > 0 {
			for _, h := range unsafe.Slice(predictions, n) {
				e.Predictions = append(e.Predictions, newTensor(h))
			}
			e.BatchIndices = splitIndices(indices, counts, n)
		}
		return w.WriteOnEpochEnd(e)
	})
}

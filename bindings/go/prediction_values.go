package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
)

// BatchPredictionValue is one predict batch with its whole prediction, as
// a value prediction writer's WriteOnBatchEnd gets it. Its tensors are
// valid during the call only (Share one to keep it).
type BatchPredictionValue struct {
	// Prediction is what PredictStep made, as Lightning's writer gets it:
	// nil (nothing), a *Tensor, a Tuple of tensors (AddPrediction) or a
	// Dict of named tensors (AddNamedPrediction).
	Prediction any
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

// EpochPredictionValues are one loader's whole predictions of a predict
// epoch, as a value prediction writer's WriteOnEpochEnd gets them; the
// tensors are valid during the call only.
type EpochPredictionValues struct {
	// DataloaderIdx is the loader's index.
	DataloaderIdx int
	// Predictions holds each batch's prediction in order (as
	// BatchPredictionValue's).
	Predictions []any
	// BatchIndices holds each batch's samples' dataset indices.
	BatchIndices [][]int64
}

// PredictionValueWriter is PredictionWriter with the whole predictions,
// as Lightning's BasePredictionWriter gets them (tuples and dicts
// included). The functions run as PredictionWriter's do.
type PredictionValueWriter struct {
	WriteOnBatchEnd func(p BatchPredictionValue) error
	WriteOnEpochEnd func(e EpochPredictionValues) error
}

// AddPredictionValueWriter adds w as Lightning's BasePredictionWriter with
// writeInterval "batch" ("": the default), "epoch" or "batch_and_epoch";
// a function the interval does not use may be nil. The trainer holds w
// until it is closed.
func (t *Trainer) AddPredictionValueWriter(writeInterval string, w PredictionValueWriter) error {
	wi := optCString(writeInterval)
	defer freeCString(wi)
	err := withHandle(w, func(h C.uintptr_t) cErr {
		return C.fulmen_go_add_prediction_value_writer(t.ptr(), wi, C.bool(w.WriteOnBatchEnd != nil),
			C.bool(w.WriteOnEpochEnd != nil), h)
	})
	runtime.KeepAlive(t)
	return err
}

//export fulmenGoWriteValueBatch
func fulmenGoWriteValueBatch(ud C.uintptr_t, prediction *C.fulmen_value, indices *C.int64_t, nIndices C.size_t,
	batch **C.fulmen_tensor, batchLen C.size_t, batchIdx C.int64_t, dataloaderIdx C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		w := cgo.Handle(ud).Value().(PredictionValueWriter)
		v, err := goValue(prediction)
		if err != nil {
			return err
		}
		return w.WriteOnBatchEnd(BatchPredictionValue{Prediction: v, BatchIdx: int64(batchIdx),
			DataloaderIdx: int(dataloaderIdx), BatchIndices: int64s(indices, int(nIndices)),
			Batch: batchTensors(batch, batchLen)})
	})
}

//export fulmenGoWriteValueEpoch
func fulmenGoWriteValueEpoch(ud C.uintptr_t, dataloaderIdx C.size_t, predictions *C.fulmen_value, nBatches C.size_t,
	indices *C.int64_t, counts *C.size_t) *C.fulmen_error {
	return runCallback(func() error {
		w := cgo.Handle(ud).Value().(PredictionValueWriter)
		list, err := goValue(predictions)
		if err != nil {
			return err
		}
		items, _ := list.([]any)
		e := EpochPredictionValues{DataloaderIdx: int(dataloaderIdx), Predictions: items, BatchIndices: [][]int64{}}
		if e.Predictions == nil {
			e.Predictions = []any{}
		}
		if n := int(nBatches); n > 0 {
			e.BatchIndices = splitIndices(indices, counts, n)
		}
		return w.WriteOnEpochEnd(e)
	})
}

// Prediction is, in OnPredictBatchEnd, the batch's whole prediction as
// Lightning's hook gets outputs: nil, a *Tensor, a Tuple or a Dict of
// tensors (valid during the hook only). In other hooks it is
// ErrInvalidState.
func (c *HookContext) Prediction() (any, error) {
	var out *C.fulmen_value
	if err := check(C.fulmen_hook_context_prediction(c.ptr(), &out)); err != nil {
		return nil, err
	}
	return goValue(out)
}

package fulmen

/*
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import "runtime/cgo"

// The callbacks a module's ConfigureCallbacks may add with Go functions:
// prediction writers and BackboneFinetuning with its lambda. Each replaces
// the trainer's callbacks of its type for the run. ConfigureCallbacks runs
// at every run's start, so each run gets the ones it adds then.

// withHandle calls add with a new handle to v, deleting the handle when
// add fails (the library then does not call userdata_free).
func withHandle(v any, add func(h C.uintptr_t) cErr) error {
	h := cgo.NewHandle(v)
	err := check(add(C.uintptr_t(h)))
	if err != nil {
		h.Delete()
	}
	return err
}

// AddPredictionWriter adds w (as Trainer.AddPredictionWriter), replacing
// the trainer's prediction writers.
func (l *CallbackList) AddPredictionWriter(writeInterval string, w PredictionWriter) error {
	if l == nil || l.h == nil {
		return listGone("AddPredictionWriter")
	}
	wi := optCString(writeInterval)
	defer freeCString(wi)
	return withHandle(w, func(h C.uintptr_t) cErr {
		return C.fulmen_go_callback_list_add_prediction_writer(l.h, wi, C.bool(w.WriteOnBatchEnd != nil),
			C.bool(w.WriteOnEpochEnd != nil), h)
	})
}

// AddPredictionValueWriter adds w (as Trainer.AddPredictionValueWriter),
// replacing the trainer's prediction writers.
func (l *CallbackList) AddPredictionValueWriter(writeInterval string, w PredictionValueWriter) error {
	if l == nil || l.h == nil {
		return listGone("AddPredictionValueWriter")
	}
	wi := optCString(writeInterval)
	defer freeCString(wi)
	return withHandle(w, func(h C.uintptr_t) cErr {
		return C.fulmen_go_callback_list_add_prediction_value_writer(l.h, wi, C.bool(w.WriteOnBatchEnd != nil),
			C.bool(w.WriteOnEpochEnd != nil), h)
	})
}

// AddBackboneFinetuningFunc adds BackboneFinetuning whose backbone lr
// grows by lambdaFunc (as Trainer.AddBackboneFinetuningFunc), replacing
// the trainer's.
func (l *CallbackList) AddBackboneFinetuningFunc(opts BackboneFinetuningOptions, lambdaFunc BackboneLambda) error {
	if lambdaFunc == nil {
		return &Error{Code: CodeNullArgument, Message: "AddBackboneFinetuningFunc: nil lambda"}
	}
	if l == nil || l.h == nil {
		return listGone("AddBackboneFinetuningFunc")
	}
	b := cString(opts.Backbone)
	defer freeCString(b)
	c := opts.toC(b)
	return withHandle(lambdaFunc, func(h C.uintptr_t) cErr {
		return C.fulmen_go_callback_list_add_backbone_finetuning_lambda(l.h, &c, h)
	})
}

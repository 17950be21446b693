package fulmen

/*
#include <fulmen.h>
*/
import "C"

// What a hook reads of the run beyond Trainer(): per-loader batch counts
// and the EarlyStopping state, as the Trainer's methods of the same names
// read them after a run.

// NumValBatches is Lightning's trainer.num_val_batches from a hook: per
// validation loader of the run, its batches (-1: unknown length).
func (c *HookContext) NumValBatches() ([]int64, error) {
	return readCountArray(func(o *C.int64_t, n C.size_t, k *C.size_t) cErr {
		return C.fulmen_hook_context_num_val_batches(c.ptr(), o, n, k)
	})
}

// NumTestBatches is Lightning's trainer.num_test_batches from a hook.
func (c *HookContext) NumTestBatches() ([]int64, error) {
	return readCountArray(func(o *C.int64_t, n C.size_t, k *C.size_t) cErr {
		return C.fulmen_hook_context_num_test_batches(c.ptr(), o, n, k)
	})
}

// NumPredictBatches is Lightning's trainer.num_predict_batches from a hook.
func (c *HookContext) NumPredictBatches() ([]int64, error) {
	return readCountArray(func(o *C.int64_t, n C.size_t, k *C.size_t) cErr {
		return C.fulmen_hook_context_num_predict_batches(c.ptr(), o, n, k)
	})
}

// NumSanityValBatches is Lightning's trainer.num_sanity_val_batches from a
// hook: the batches of each validation loader the sanity check runs.
func (c *HookContext) NumSanityValBatches() ([]int64, error) {
	return readCountArray(func(o *C.int64_t, n C.size_t, k *C.size_t) cErr {
		return C.fulmen_hook_context_num_sanity_val_batches(c.ptr(), o, n, k)
	})
}

// EarlyStoppingState is the state of the run's first EarlyStopping as of
// this hook; ErrInvalidState without one.
func (c *HookContext) EarlyStoppingState() (EarlyStoppingState, error) {
	var w, e C.int64_t
	var b C.double
	err := check(C.fulmen_hook_context_early_stopping_state(c.ptr(), &w, &e, &b))
	return EarlyStoppingState{WaitCount: int64(w), StoppedEpoch: int64(e), BestScore: float64(b)}, err
}

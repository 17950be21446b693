package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// SetBatch replaces the batch in HookBeforeBatchTransfer,
// HookTransferBatchToDevice or HookAfterBatchTransfer (the hook's return
// value in Lightning); the tensors are shared, the caller keeps them.
func (c *HookContext) SetBatch(tensors []*Tensor) error {
	raw := make([]*C.fulmen_tensor, len(tensors))
	for i, t := range tensors {
		raw[i] = t.ptr()
	}
	var first **C.fulmen_tensor
	if len(raw) > 0 {
		first = (**C.fulmen_tensor)(unsafe.Pointer(&raw[0]))
	}
	err := check(C.fulmen_hook_context_set_batch(c.ptr(), first, C.size_t(len(raw))))
	runtime.KeepAlive(tensors)
	return err
}

// Device is the run's root device as a fulmen_device_type and an index
// (transfer_batch_to_device's device).
func (c *HookContext) Device() (int32, int64, error) {
	var kind C.int32_t
	var index C.int64_t
	err := check(C.fulmen_hook_context_device(c.ptr(), &kind, &index))
	return int32(kind), int64(index), err
}

// OptimizerIndex is the index (in ConfigureOptimizers' order) of the
// optimizer in HookBeforeOptimizerStep and HookBeforeZeroGrad, -1
// elsewhere.
func (c *HookContext) OptimizerIndex() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_hook_context_optimizer_index(c.ptr(), &v))
	return int64(v), err
}

// OverrideHook declares that the module's OnHook implements (overridden
// true) or no longer implements a LightningModule-only hook
// (HookValidationModelEval .. HookPrepareData) in place of
// fulmen's default.
func (m *LightningModule) OverrideHook(hook Hook, overridden bool) error {
	err := check(C.fulmen_lightning_module_override_hook(m.ptr(), C.int32_t(hook), C.bool(overridden)))
	runtime.KeepAlive(m)
	return err
}

package fulmen

/*
#include <fulmen.h>
*/
import "C"

import "runtime"

// BuildOnMeta runs build with a meta-init scope open, as PyTorch's `with
// torch.device("meta")` and Lightning's `init_module(empty_init=True)`:
// the layers made in build hold no memory until the trainer, NewFSDP,
// NewDDP or Model.Materialize gives them the values an eager build would
// have under the same seed (fulmen_meta_init_begin). The goroutine stays
// on its thread while build runs; build's error comes first.
func BuildOnMeta(build func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check(C.fulmen_meta_init_begin()); err != nil {
		return err
	}
	defer func() {
		if end := check(C.fulmen_meta_init_end()); err == nil {
			err = end
		}
	}()
	return build()
}

// Materialize gives the parameters and buffers built in BuildOnMeta their
// values, on the CPU (fulmen_model_materialize). Tensors read from the
// model before keep the meta ones: read them again.
func (m *Model) Materialize() error {
	err := check(C.fulmen_model_materialize(m.ptr()))
	runtime.KeepAlive(m)
	return err
}

// HoldsMeta reports whether a parameter or buffer is on the meta device.
func (m *Model) HoldsMeta() (bool, error) {
	var v C.bool
	err := check(C.fulmen_model_holds_meta(m.ptr(), &v))
	runtime.KeepAlive(m)
	return bool(v), err
}

package fulmen

/*
#include "shim.h"
*/
import "C"

import "runtime"

// ScalerKind is what a Scaler computes per feature.
type ScalerKind int32

const (
	// ScalerStandardize is (x - mean) / std, the population std.
	ScalerStandardize ScalerKind = C.FULMEN_SCALER_KIND_STANDARDIZE
	// ScalerMinMax is (x - min) / (max - min).
	ScalerMinMax ScalerKind = C.FULMEN_SCALER_KIND_MIN_MAX
)

// Scaler is feature scaling fitted on one dataset (the training split) and
// applied to others, with its statistics readable (fulmen_scaler).
type Scaler struct {
	h handle[*C.fulmen_scaler]
}

// FitScaler fits kind on column column (floating-point features) of d.
// Close the scaler.
func FitScaler(d *Dataset, column int, kind ScalerKind) (*Scaler, error) {
	if column < 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: "FitScaler: column must be >= 0"}
	}
	var out *C.fulmen_scaler
	err := check(C.fulmen_scaler_fit(d.ptr(), C.size_t(column), C.int32_t(kind), &out))
	runtime.KeepAlive(d)
	if err != nil {
		return nil, err
	}
	s := &Scaler{}
	s.h.store(out)
	runtime.SetFinalizer(s, (*Scaler).Close)
	return s, nil
}

func (s *Scaler) ptr() *C.fulmen_scaler {
	if s == nil {
		return nil
	}
	return s.h.load()
}

// Stats are the fitted statistics (float64, one sample's shape): the mean
// and std, or the min and max.
func (s *Scaler) Stats() (first, second *Tensor, err error) {
	var a, b *C.fulmen_tensor
	err = check(C.fulmen_scaler_stats(s.ptr(), &a, &b))
	runtime.KeepAlive(s)
	if err != nil {
		return nil, nil, err
	}
	return newTensor(a), newTensor(b), nil
}

// Apply is d with the column scaled by the fitted statistics.
func (s *Scaler) Apply(d *Dataset) (*Dataset, error) {
	var out *C.fulmen_dataset
	err := check(C.fulmen_scaler_apply(s.ptr(), d.ptr(), &out))
	runtime.KeepAlive(s)
	runtime.KeepAlive(d)
	if err != nil {
		return nil, err
	}
	return newDataset(out), nil
}

// Close frees the scaler; idempotent. The error is always nil.
func (s *Scaler) Close() error {
	if s == nil {
		return nil
	}
	if h := s.h.take(); h != nil {
		C.fulmen_scaler_free(h)
		runtime.SetFinalizer(s, nil)
	}
	return nil
}

package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
)

// Precision is a precision plugin (Lightning's MixedPrecision /
// DoublePrecision objects): one of Lightning's precision values, plus
// GradScaler settings for "16-mixed". Close it when done.
type Precision struct {
	h handle[*C.fulmen_precision]
}

// NewPrecision parses one of Lightning's precision values ("64-true",
// "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", legacy
// "64", "32", "16", "bf16"); anything else is ErrInvalidArgument listing
// them.
func NewPrecision(name string) (*Precision, error) {
	n := cString(name)
	defer freeCString(n)
	var out *C.fulmen_precision
	if err := check(C.fulmen_precision_new(n, &out)); err != nil {
		return nil, err
	}
	p := &Precision{}
	p.h.store(out)
	runtime.SetFinalizer(p, (*Precision).Close)
	return p, nil
}

func (p *Precision) ptr() *C.fulmen_precision {
	if p == nil {
		gcStress()
		return nil
	}
	h := p.h.load()
	gcStress()
	return h
}

// Close frees the plugin; idempotent. The error is always nil.
func (p *Precision) Close() error {
	if p == nil {
		return nil
	}
	h := p.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_precision_free(h)
	runtime.SetFinalizer(p, nil)
	return nil
}

// Name is the canonical precision name ("16-mixed" for "16").
func (p *Precision) Name() (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_precision_name(p.ptr(), b, c, n)
	})
	runtime.KeepAlive(p)
	return s, err
}

// SetGradScaler sets the loss scaler of a "16-mixed" plugin (torch's
// defaults: 65536, 2.0, 0.5, 2000); ErrInvalidArgument for other
// precisions or values torch refuses.
func (p *Precision) SetGradScaler(initScale, growthFactor, backoffFactor float64, growthInterval int64) error {
	err := check(C.fulmen_precision_set_grad_scaler(p.ptr(), C.double(initScale), C.double(growthFactor),
		C.double(backoffFactor), C.int64_t(growthInterval)))
	runtime.KeepAlive(p)
	return err
}

// SetPrecision uses a precision plugin (copied) for runs with these
// options, as Lightning's plugins=[...].
func (o *TrainerOptions) SetPrecision(p *Precision) error {
	err := check(C.fulmen_trainer_options_set_precision(o.ptr(), p.ptr()))
	runtime.KeepAlive(o)
	runtime.KeepAlive(p)
	return err
}

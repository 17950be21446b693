package fulmen_test

import (
	"errors"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func TestPrecisionPluginObjects(t *testing.T) {
	noLeaks(t)
	p := must(fulmen.NewPrecision("16"))
	defer p.Close()
	if name := must(p.Name()); name != "16-mixed" {
		t.Errorf("Name() = %q, want 16-mixed", name)
	}
	if _, err := fulmen.NewPrecision("fp8"); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("fp8: %v", err)
	}
	bf16 := must(fulmen.NewPrecision("bf16-mixed"))
	defer bf16.Close()
	if err := bf16.SetGradScaler(1024, 2, 0.5, 100); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("a scaler on bf16-mixed: %v", err)
	}
	if err := p.SetGradScaler(-1, 2, 0.5, 100); !errors.Is(err, fulmen.ErrInvalidArgument) {
		t.Errorf("a negative scale: %v", err)
	}
	ok(t, p.SetGradScaler(1024, 2, 0.5, 100))
	o := must(fulmen.NewTrainerOptions())
	defer o.Close()
	ok(t, o.SetPrecision(p))
	ok(t, p.Close())
	ok(t, p.Close()) // idempotent
	if err := o.SetPrecision(p); !errors.Is(err, fulmen.ErrNullArgument) {
		t.Errorf("a closed plugin: %v", err)
	}
}

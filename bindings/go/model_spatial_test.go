package fulmen_test

import (
	"reflect"
	"testing"

	fulmen "github.com/fulmen-ml/fulmen/bindings/go"
)

func shapeOf(t *testing.T, m *fulmen.Model, in ...int64) []int64 {
	t.Helper()
	x := must(fulmen.Ones(fulmen.Float32, in...))
	defer x.Close()
	y := must(m.Forward(x))
	defer y.Close()
	return must(y.Shape())
}

func TestSpatialLayers(t *testing.T) {
	noLeaks(t)
	c3 := must(fulmen.NewConv3d(2, 3, fulmen.DefaultConv3dOptions(2)))
	defer c3.Close()
	if s := shapeOf(t, c3, 1, 2, 3, 3, 3); !reflect.DeepEqual(s, []int64{1, 3, 2, 2, 2}) {
		t.Fatalf("conv3d shape %v", s)
	}
	o := fulmen.DefaultConvTransposeOptions(2, 3)
	o.Stride = [2]int64{2, 2}
	ct := must(fulmen.NewConvTranspose(2, 3, o))
	defer ct.Close()
	if s := shapeOf(t, ct, 1, 2, 3, 3); !reflect.DeepEqual(s, []int64{1, 3, 7, 7}) {
		t.Fatalf("conv transpose shape %v", s)
	}
	norm := must(fulmen.NewInstanceNorm(2, 3, 1e-5, 0.1, true, true))
	defer norm.Close()
	if n := must(norm.StateDictLen()); n != 5 {
		t.Fatalf("instance norm state_dict has %d entries", n)
	}
	avg := must(fulmen.NewAdaptiveAvgPool(2, -1))
	defer avg.Close()
	if s := shapeOf(t, avg, 1, 2, 5, 4); !reflect.DeepEqual(s, []int64{1, 2, 2, 4}) {
		t.Fatalf("adaptive avg pool shape %v", s)
	}
	mx := must(fulmen.NewAdaptiveMaxPool(3))
	defer mx.Close()
	if s := shapeOf(t, mx, 2, 7); !reflect.DeepEqual(s, []int64{2, 3}) {
		t.Fatalf("adaptive max pool shape %v", s)
	}
	up := must(fulmen.NewUpsample(nil, 2, "bilinear", true))
	defer up.Close()
	if s := shapeOf(t, up, 1, 1, 2, 3); !reflect.DeepEqual(s, []int64{1, 1, 4, 6}) {
		t.Fatalf("upsample shape %v", s)
	}
	if _, err := fulmen.NewUpsample([]int64{4}, 2, "nearest", false); err == nil {
		t.Fatal("size and scale_factor together were taken")
	}
	x := must(fulmen.Ones(fulmen.Float32, 1, 1, 3, 3))
	defer x.Close()
	y := must(x.Interpolate([]int64{3, 4}, 0, "bicubic", false))
	defer y.Close()
	if s := must(y.Shape()); !reflect.DeepEqual(s, []int64{1, 1, 3, 4}) {
		t.Fatalf("interpolate shape %v", s)
	}
}

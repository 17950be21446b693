package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// NewConv3d creates nn.Conv3d(in, out, ...) with opts.
func NewConv3d(in, out int64, opts Conv3dOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_conv3d_new(C.int64_t(in), C.int64_t(out), &c, o)
	})
}

// NewConvTranspose creates nn.ConvTranspose1d or nn.ConvTranspose2d(in,
// out, ...) by opts.Dims.
func NewConvTranspose(in, out int64, opts ConvTransposeOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_conv_transpose_new(C.int64_t(in), C.int64_t(out), &c, o)
	})
}

// NewInstanceNorm creates nn.InstanceNorm1d (dims 1) or nn.InstanceNorm2d
// (dims 2); PyTorch's defaults are eps 1e-5, momentum 0.1, no affine, no
// running statistics.
func NewInstanceNorm(dims int, numFeatures int64, eps, momentum float64, affine, trackRunningStats bool) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_instance_norm_new(C.size_t(dims), C.int64_t(numFeatures), C.double(eps),
			C.double(momentum), C.bool(affine), C.bool(trackRunningStats), o)
	})
}

// NewAdaptiveAvgPool creates nn.AdaptiveAvgPool1d / 2d (one or two output
// sizes; -1 keeps a size).
func NewAdaptiveAvgPool(outputSize ...int64) (*Model, error) {
	p, n := shapeArg(outputSize)
	m, err := makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_adaptive_avg_pool_new(p, n, o) })
	runtime.KeepAlive(outputSize)
	return m, err
}

// NewAdaptiveMaxPool creates nn.AdaptiveMaxPool1d / 2d (one or two output
// sizes; -1 keeps a size); the forward gives the maxima.
func NewAdaptiveMaxPool(outputSize ...int64) (*Model, error) {
	p, n := shapeArg(outputSize)
	m, err := makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_adaptive_max_pool_new(p, n, o) })
	runtime.KeepAlive(outputSize)
	return m, err
}

// NewUpsample creates nn.Upsample: give size (one per spatial dimension,
// or one for all) or scaleFactor (the other nil / 0); mode is "nearest",
// "linear", "bilinear", "bicubic" or "trilinear".
func NewUpsample(size []int64, scaleFactor float64, mode string, alignCorners bool) (*Model, error) {
	p, n := shapeArg(size)
	modeC := C.CString(mode)
	defer C.free(unsafe.Pointer(modeC))
	m, err := makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_upsample_new(p, n, C.double(scaleFactor), modeC, C.bool(alignCorners), o)
	})
	runtime.KeepAlive(size)
	return m, err
}

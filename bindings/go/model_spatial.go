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

// Conv3dOptions are the options of a 3-D convolution (fulmen_conv3d_options).
type Conv3dOptions struct {
	// Kernel is the kernel depth, height and width.
	Kernel [3]int64
	// Stride (default 1, 1, 1).
	Stride [3]int64
	// Padding is the zero padding (default 0, 0, 0).
	Padding [3]int64
	// Dilation (default 1, 1, 1).
	Dilation [3]int64
	// Groups (default 1).
	Groups int64
	// Bias learns a bias (default true).
	Bias bool
}

// DefaultConv3dOptions are the default options for a cubic kernel.
func DefaultConv3dOptions(kernel int64) Conv3dOptions {
	c := C.fulmen_conv3d_options_default(C.int64_t(kernel))
	o := Conv3dOptions{Groups: int64(c.groups), Bias: bool(c.bias)}
	for i := 0; i < 3; i++ {
		o.Kernel[i], o.Stride[i] = int64(c.kernel[i]), int64(c.stride[i])
		o.Padding[i], o.Dilation[i] = int64(c.padding[i]), int64(c.dilation[i])
	}
	return o
}

// NewConv3d creates nn.Conv3d(in, out, ...) with opts.
func NewConv3d(in, out int64, opts Conv3dOptions) (*Model, error) {
	c := C.fulmen_conv3d_options{groups: C.int64_t(opts.Groups), bias: C.bool(opts.Bias)}
	for i := 0; i < 3; i++ {
		c.kernel[i], c.stride[i] = C.int64_t(opts.Kernel[i]), C.int64_t(opts.Stride[i])
		c.padding[i], c.dilation[i] = C.int64_t(opts.Padding[i]), C.int64_t(opts.Dilation[i])
	}
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_conv3d_new(C.int64_t(in), C.int64_t(out), &c, o)
	})
}

// ConvTransposeOptions are the options of a transposed convolution
// (fulmen_conv_transpose_options); only the first Dims entries are read.
type ConvTransposeOptions struct {
	// Dims is 1 (ConvTranspose1d) or 2 (ConvTranspose2d).
	Dims int
	// Kernel size per spatial dimension.
	Kernel [2]int64
	// Stride (default 1).
	Stride [2]int64
	// Padding removed from each side of the output (default 0).
	Padding [2]int64
	// OutputPadding is added to one side of the output (default 0).
	OutputPadding [2]int64
	// Dilation (default 1).
	Dilation [2]int64
	// Groups (default 1).
	Groups int64
	// Bias learns a bias (default true).
	Bias bool
}

// DefaultConvTransposeOptions are the defaults for dims spatial dimensions
// and a square kernel.
func DefaultConvTransposeOptions(dims int, kernel int64) ConvTransposeOptions {
	c := C.fulmen_conv_transpose_options_default(C.size_t(dims), C.int64_t(kernel))
	o := ConvTransposeOptions{Dims: int(c.dims), Groups: int64(c.groups), Bias: bool(c.bias)}
	for i := 0; i < 2; i++ {
		o.Kernel[i], o.Stride[i], o.Padding[i] = int64(c.kernel[i]), int64(c.stride[i]), int64(c.padding[i])
		o.OutputPadding[i], o.Dilation[i] = int64(c.output_padding[i]), int64(c.dilation[i])
	}
	return o
}

// NewConvTranspose creates nn.ConvTranspose1d or nn.ConvTranspose2d(in,
// out, ...) by opts.Dims.
func NewConvTranspose(in, out int64, opts ConvTransposeOptions) (*Model, error) {
	c := C.fulmen_conv_transpose_options{dims: C.size_t(opts.Dims), groups: C.int64_t(opts.Groups),
		bias: C.bool(opts.Bias)}
	for i := 0; i < 2; i++ {
		c.kernel[i], c.stride[i], c.padding[i] = C.int64_t(opts.Kernel[i]), C.int64_t(opts.Stride[i]),
			C.int64_t(opts.Padding[i])
		c.output_padding[i], c.dilation[i] = C.int64_t(opts.OutputPadding[i]), C.int64_t(opts.Dilation[i])
	}
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

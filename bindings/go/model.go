package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Model is a tree of layers (a single layer, a sequential, or a container
// of named children) or a TorchScript module. A LightningModule or
// optimizer built on a model keeps what it needs, so the Model may be
// closed independently.
type Model struct {
	h handle[*C.fulmen_model]
	// parallel keeps the model's TensorParallel wrapper reachable while
	// the model is: a wrapper collected early would leave this rank's
	// split layers refusing to run while the other ranks wait for it.
	parallel atomic.Pointer[TensorParallel]
}

func newModel(h *C.fulmen_model) *Model {
	m := &Model{}
	m.h.store(h)
	runtime.SetFinalizer(m, (*Model).Close)
	return m
}

func (m *Model) ptr() *C.fulmen_model {
	if m == nil {
		gcStress()
		return nil
	}
	h := m.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the model handle; idempotent. The error is always nil.
func (m *Model) Close() error {
	if m == nil {
		return nil
	}
	h := m.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_model_free(h)
	runtime.SetFinalizer(m, nil)
	return nil
}

// consumed marks m as handed over to the library.
func (m *Model) consumed() {
	m.h.take()
	runtime.SetFinalizer(m, nil)
}

// makeModel runs a model constructor.
func makeModel(f func(**C.fulmen_model) cErr) (*Model, error) {
	var out *C.fulmen_model
	if err := check(f(&out)); err != nil {
		return nil, err
	}
	return newModel(out), nil
}

// NewSequential creates a sequential model (nn.Sequential) and appends
// layers to it in order. The layers are consumed: on success they belong
// to the sequential; on error every layer given is closed.
func NewSequential(layers ...*Model) (*Model, error) {
	m, err := makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_sequential_new(o) })
	if err != nil {
		closeModels(layers)
		return nil, err
	}
	for i, l := range layers {
		if err := m.Push(l); err != nil {
			closeModels(layers[i:])
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

func closeModels(ms []*Model) {
	for _, m := range ms {
		m.Close()
	}
}

// NewNamed creates an empty container of named children; run its children
// with ForwardChild.
func NewNamed() (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_named_new(o) })
}

// NewLinear creates nn.Linear(in, out, bias), initialised as PyTorch does.
func NewLinear(in, out int64, bias bool) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_linear_new(C.int64_t(in), C.int64_t(out), C.bool(bias), o)
	})
}

// NewConv2d creates nn.Conv2d(in, out, ...) with opts.
func NewConv2d(in, out int64, opts Conv2dOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_conv2d_new(C.int64_t(in), C.int64_t(out), &c, o)
	})
}

// NewConv1d creates nn.Conv1d(in, out, kernel, stride, padding, dilation,
// groups, bias) (PyTorch's defaults: 1, 0, 1, 1, true).
func NewConv1d(in, out, kernel, stride, padding, dilation, groups int64, bias bool) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_conv1d_new(C.int64_t(in), C.int64_t(out), C.int64_t(kernel), C.int64_t(stride),
			C.int64_t(padding), C.int64_t(dilation), C.int64_t(groups), C.bool(bias), o)
	})
}

// NewMaxPool2d creates nn.MaxPool2d(kernel, stride, padding) with square
// windows; stride 0 means equal to kernel.
func NewMaxPool2d(kernel, stride, padding int64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_max_pool2d_new(C.int64_t(kernel), C.int64_t(stride), C.int64_t(padding), o)
	})
}

// NewAvgPool2d creates nn.AvgPool2d(kernel, stride, padding); stride 0 =
// kernel.
func NewAvgPool2d(kernel, stride, padding int64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_avg_pool2d_new(C.int64_t(kernel), C.int64_t(stride), C.int64_t(padding), o)
	})
}

// NewBatchNorm creates nn.BatchNorm1d/2d(numFeatures, eps, momentum).
func NewBatchNorm(numFeatures int64, eps, momentum float64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_batch_norm_new(C.int64_t(numFeatures), C.double(eps), C.double(momentum), o)
	})
}

// NewLayerNorm creates nn.LayerNorm(shape, eps).
func NewLayerNorm(shape []int64, eps float64) (*Model, error) {
	m, err := makeModel(func(o **C.fulmen_model) cErr {
		p, n := shapeArg(shape)
		return C.fulmen_model_layer_norm_new(p, n, C.double(eps), o)
	})
	runtime.KeepAlive(shape)
	return m, err
}

// NewGroupNorm creates nn.GroupNorm(numGroups, numChannels, eps, affine).
func NewGroupNorm(numGroups, numChannels int64, eps float64, affine bool) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_group_norm_new(C.int64_t(numGroups), C.int64_t(numChannels), C.double(eps), C.bool(affine), o)
	})
}

// NewRMSNorm creates nn.RMSNorm(shape, eps, affine); eps 0 is the input
// dtype's machine epsilon (PyTorch's default).
func NewRMSNorm(shape []int64, eps float64, affine bool) (*Model, error) {
	m, err := makeModel(func(o **C.fulmen_model) cErr {
		p, n := shapeArg(shape)
		return C.fulmen_model_rms_norm_new(p, n, C.double(eps), C.bool(affine), o)
	})
	runtime.KeepAlive(shape)
	return m, err
}

// NewPReLU creates nn.PReLU(numParameters, init) (PyTorch's default 1, 0.25).
func NewPReLU(numParameters int64, init float64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_prelu_new(C.int64_t(numParameters), C.double(init), o)
	})
}

// NewUnflatten creates nn.Unflatten(dim, sizes).
func NewUnflatten(dim int64, sizes []int64) (*Model, error) {
	m, err := makeModel(func(o **C.fulmen_model) cErr {
		p, n := shapeArg(sizes)
		return C.fulmen_model_unflatten_new(C.int64_t(dim), p, n, o)
	})
	runtime.KeepAlive(sizes)
	return m, err
}

// NewDropout creates nn.Dropout(p).
func NewDropout(p float64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_dropout_new(C.double(p), o) })
}

// NewDropout2d creates nn.Dropout2d(p): it zeroes whole channels.
func NewDropout2d(p float64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_dropout2d_new(C.double(p), o) })
}

// NewEmbedding creates nn.Embedding(numEmbeddings, dim).
func NewEmbedding(numEmbeddings, dim int64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_embedding_new(C.int64_t(numEmbeddings), C.int64_t(dim), o)
	})
}

// NewEmbeddingPadded creates nn.Embedding(numEmbeddings, dim,
// padding_idx=paddingIdx): that row starts at zero and is never trained.
func NewEmbeddingPadded(numEmbeddings, dim, paddingIdx int64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_embedding_padded_new(C.int64_t(numEmbeddings), C.int64_t(dim), C.int64_t(paddingIdx), o)
	})
}

// NewFlatten creates nn.Flatten(startDim, endDim) (PyTorch's default 1, -1).
func NewFlatten(startDim, endDim int64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_flatten_new(C.int64_t(startDim), C.int64_t(endDim), o)
	})
}

// NewActivation creates an activation layer; param is the slope
// (LeakyReLU), alpha (ELU) or dimension (Softmax, LogSoftmax), ignored
// otherwise.
func NewActivation(kind Activation, param float64) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_activation_new(C.int32_t(kind), C.double(param), o)
	})
}

// LoadTorchScript loads a TorchScript module saved by torch.jit.save.
func LoadTorchScript(path string) (*Model, error) {
	p := cString(path)
	defer freeCString(p)
	return makeModel(func(o **C.fulmen_model) cErr { return C.fulmen_model_load_torchscript(p, o) })
}

// Push appends child to a sequential model. On success child is consumed
// (its wrapper is closed); on failure both are unchanged.
func (m *Model) Push(child *Model) error {
	err := check(C.fulmen_model_push(m.ptr(), child.ptr()))
	runtime.KeepAlive(m)
	runtime.KeepAlive(child)
	if err == nil {
		child.consumed()
	}
	return err
}

// Add adds child under name to a named container (or a sequential). On
// success child is consumed; on failure both are unchanged.
func (m *Model) Add(name string, child *Model) error {
	n := cString(name)
	defer freeCString(n)
	err := check(C.fulmen_model_add(m.ptr(), n, child.ptr()))
	runtime.KeepAlive(m)
	runtime.KeepAlive(child)
	if err == nil {
		child.consumed()
	}
	return err
}

// Forward runs the model's forward pass on input.
func (m *Model) Forward(input *Tensor) (*Tensor, error) {
	var out *C.fulmen_tensor
	err := check(C.fulmen_model_forward(m.ptr(), input.ptr(), &out))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// ForwardChild runs the child at path ("encoder" or "encoder.0") on input.
func (m *Model) ForwardChild(path string, input *Tensor) (*Tensor, error) {
	p := cString(path)
	defer freeCString(p)
	var out *C.fulmen_tensor
	err := check(C.fulmen_model_forward_child(m.ptr(), p, input.ptr(), &out))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// SetTraining sets training mode (true, model.train()) or evaluation mode
// (false, model.eval()) for the whole tree.
func (m *Model) SetTraining(training bool) error {
	err := check(C.fulmen_model_set_training(m.ptr(), C.bool(training)))
	runtime.KeepAlive(m)
	return err
}

// SetActivationCheckpointing checkpoints the forward of the module at path
// ("" for the model itself), or stops (torch.utils.checkpoint): its
// activations are not kept, and backward runs it again with the first
// run's dropout masks and autocast, so the gradients are the plain
// forward's. ErrUnsupported for a module holding a TorchScript or exported
// module.
func (m *Model) SetActivationCheckpointing(path string, enabled bool) error {
	p := cString(path)
	defer freeCString(p)
	err := check(C.fulmen_model_set_activation_checkpointing(m.ptr(), p, C.bool(enabled)))
	runtime.KeepAlive(m)
	return err
}

// IsTraining reports whether the model is in training mode.
func (m *Model) IsTraining() (bool, error) {
	var v C.bool
	err := check(C.fulmen_model_is_training(m.ptr(), &v))
	runtime.KeepAlive(m)
	return bool(v), err
}

// NumParameters is the number of scalar parameters.
func (m *Model) NumParameters() (int64, error) {
	var v C.int64_t
	err := check(C.fulmen_model_num_parameters(m.ptr(), &v))
	runtime.KeepAlive(m)
	return int64(v), err
}

// StateDictLen is the number of state_dict entries (parameters and buffers).
func (m *Model) StateDictLen() (int, error) {
	var v C.size_t
	err := check(C.fulmen_model_state_dict_len(m.ptr(), &v))
	runtime.KeepAlive(m)
	return int(v), err
}

// readString calls a C function that copies a NUL-terminated string into
// a buffer, growing the buffer when it reports FULMEN_CODE_OUT_OF_RANGE.
func readString(f func(buf *C.char, capacity C.size_t, n *C.size_t) cErr) (string, error) {
	buf := make([]byte, 256)
	for {
		var n C.size_t
		err := check(f((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n))
		if err == nil {
			return string(buf[:n]), nil
		}
		if fe, ok := err.(*Error); !ok || fe.Code != CodeOutOfRange || int(n) < len(buf) {
			return "", err
		}
		buf = make([]byte, int(n)+1)
	}
}

// StateDictName is the name of state_dict entry index (PyTorch naming,
// e.g. "0.weight").
func (m *Model) StateDictName(index int) (string, error) {
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_model_state_dict_name(m.ptr(), C.size_t(index), b, c, n)
	})
	runtime.KeepAlive(m)
	return s, err
}

// StateDictNames lists every state_dict entry name in order.
func (m *Model) StateDictNames() ([]string, error) {
	n, err := m.StateDictLen()
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		if names[i], err = m.StateDictName(i); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// Summary is the model's layer table (name, type, parameter count, and
// the "Total params" totals), as Lightning's ModelSummary prints it, down
// to maxDepth levels (1: direct children).
func (m *Model) Summary(maxDepth int) (string, error) {
	if maxDepth < 0 {
		return "", &Error{Code: CodeInvalidArgument, Message: "Summary: negative depth"}
	}
	s, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_model_summary(m.ptr(), C.size_t(maxDepth), b, c, n)
	})
	runtime.KeepAlive(m)
	return s, err
}

// StateDictGet is a new handle to the state_dict entry name, sharing
// storage with the model.
func (m *Model) StateDictGet(name string) (*Tensor, error) {
	n := cString(name)
	defer freeCString(n)
	var out *C.fulmen_tensor
	err := check(C.fulmen_model_state_dict_get(m.ptr(), n, &out))
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Parameters returns the parameters (sharing storage with the model) in
// named_parameters order; trainableOnly keeps those that require grad
// (what an optimizer should get while part of the model is frozen, as
// under BackboneFinetuning). The caller closes them.
func (m *Model) Parameters(trainableOnly bool) ([]*Tensor, error) {
	params, err := tensorPieces(func(outs *cTensor, capacity C.size_t, count *C.size_t) cErr {
		return C.fulmen_model_parameters(m.ptr(), C.bool(trainableOnly), outs, capacity, count)
	})
	runtime.KeepAlive(m)
	return params, err
}

// Save writes the state_dict as a safetensors file (atomically).
func (m *Model) Save(path string) error {
	p := cString(path)
	defer freeCString(p)
	err := check(C.fulmen_model_save(m.ptr(), p))
	runtime.KeepAlive(m)
	return err
}

// Load reads weights from a safetensors file; strict makes missing or
// unexpected names an error. On error the model is unchanged.
func (m *Model) Load(path string, strict bool) error {
	p := cString(path)
	defer freeCString(p)
	err := check(C.fulmen_model_load(m.ptr(), p, C.bool(strict)))
	runtime.KeepAlive(m)
	return err
}

// ClipGradNorm scales the gradients of m's parameters so that their joint
// norm (normType 2 for L2, math.Inf(1) for max) is at most maxNorm, and
// returns the norm before clipping.
func ClipGradNorm(m *Model, maxNorm, normType float64) (float64, error) {
	var total C.double
	err := check(C.fulmen_clip_grad_norm(m.ptr(), C.double(maxNorm), C.double(normType), &total))
	runtime.KeepAlive(m)
	return float64(total), err
}

// ClipGradValue clamps the gradients of m's parameters into [-value, value].
func ClipGradValue(m *Model, value float64) error {
	err := check(C.fulmen_clip_grad_value(m.ptr(), C.double(value)))
	runtime.KeepAlive(m)
	return err
}

// Closed reports whether the model was closed or consumed (by Push or Add).
func (m *Model) Closed() bool { return m == nil || m.h.closed() }

// NewLSTM creates nn.LSTM(inputSize, hiddenSize, ...). Forward gives the
// output sequence; ForwardMulti(x, h0, c0, lengths) gives output, h_n, c_n.
func NewLSTM(inputSize, hiddenSize int64, opts RNNOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_lstm_new(C.int64_t(inputSize), C.int64_t(hiddenSize), &c, o)
	})
}

// NewGRU creates nn.GRU(inputSize, hiddenSize, ...); ForwardMulti(x, h0,
// lengths) gives output, h_n.
func NewGRU(inputSize, hiddenSize int64, opts RNNOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_gru_new(C.int64_t(inputSize), C.int64_t(hiddenSize), &c, o)
	})
}

// NewRNN creates nn.RNN(inputSize, hiddenSize, nonlinearity) with
// Tanh or ReLU.
func NewRNN(inputSize, hiddenSize int64, nonlinearity Activation, opts RNNOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_rnn_new(C.int64_t(inputSize), C.int64_t(hiddenSize), C.int32_t(nonlinearity), &c, o)
	})
}

// NewMultiheadAttention creates nn.MultiheadAttention(embedDim, numHeads,
// dropout, bias, batch_first=batchFirst). Forward is self-attention;
// ForwardMulti(q, k, v, keyPaddingMask, attnMask) gives output and the
// weights averaged over heads.
func NewMultiheadAttention(embedDim, numHeads int64, dropout float64, bias, batchFirst bool) (*Model, error) {
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_multihead_attention_new(C.int64_t(embedDim), C.int64_t(numHeads), C.double(dropout),
			C.bool(bias), C.bool(batchFirst), o)
	})
}

// NewTransformerEncoderLayer creates nn.TransformerEncoderLayer(dModel,
// nhead, ...); ForwardMulti(src, srcMask, srcKeyPaddingMask).
func NewTransformerEncoderLayer(dModel, nhead int64, opts TransformerOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_transformer_encoder_layer_new(C.int64_t(dModel), C.int64_t(nhead), &c, o)
	})
}

// NewTransformerDecoderLayer creates nn.TransformerDecoderLayer(dModel,
// nhead, ...); ForwardMulti(tgt, memory, tgtMask, memoryMask,
// tgtKeyPaddingMask, memoryKeyPaddingMask).
func NewTransformerDecoderLayer(dModel, nhead int64, opts TransformerOptions) (*Model, error) {
	c := opts.c()
	return makeModel(func(o **C.fulmen_model) cErr {
		return C.fulmen_model_transformer_decoder_layer_new(C.int64_t(dModel), C.int64_t(nhead), &c, o)
	})
}

// ForwardMulti runs the model on several inputs (nil for a left-out
// optional one) and returns all its results (fulmen_model_forward_multi):
// an LSTM's output, h_n and c_n, attention with masks, a decoder layer
// with its memory.
func (m *Model) ForwardMulti(inputs ...*Tensor) ([]*Tensor, error) {
	return m.ForwardMultiChild("", inputs...)
}

// ForwardMultiChild is ForwardMulti on the child at path.
func (m *Model) ForwardMultiChild(path string, inputs ...*Tensor) ([]*Tensor, error) {
	pieces, err := forwardMulti(path, inputs, func(p *C.char, arr **C.fulmen_tensor, n C.size_t, outs *cTensor, capacity C.size_t, count *C.size_t) cErr {
		return C.fulmen_model_forward_multi(m.ptr(), p, arr, n, outs, capacity, count)
	})
	runtime.KeepAlive(m)
	return pieces, err
}

// forwardMulti checks inputs (nil: left out) and runs a C call with the
// signature of fulmen_model_forward_multi after its first argument.
func forwardMulti(path string, inputs []*Tensor, call func(*C.char, **C.fulmen_tensor, C.size_t, *cTensor, C.size_t, *C.size_t) cErr) ([]*Tensor, error) {
	for i, t := range inputs {
		if err := checkOptional(t, fmt.Sprintf("inputs[%d]", i)); err != nil {
			return nil, err
		}
	}
	p := cString(path)
	defer freeCString(p)
	arr, n, hs := tensorArray(inputs)
	pieces, err := tensorPieces(func(outs *cTensor, capacity C.size_t, count *C.size_t) cErr {
		return call(p, arr, n, outs, capacity, count)
	})
	runtime.KeepAlive(hs)
	runtime.KeepAlive(inputs)
	return pieces, err
}

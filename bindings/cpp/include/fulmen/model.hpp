// fulmen C++ binding: models (layer trees and TorchScript modules).
#pragma once

#include "flop_counts.hpp"
#include "tensor.hpp"
#include "value.hpp"

#include <string>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace fulmen {

/// Activation layer kinds (the C `fulmen_activation`).
enum class Activation : int32_t {
    Relu = FULMEN_ACTIVATION_RELU,
    LeakyRelu = FULMEN_ACTIVATION_LEAKY_RELU,
    Gelu = FULMEN_ACTIVATION_GELU,
    Sigmoid = FULMEN_ACTIVATION_SIGMOID,
    Tanh = FULMEN_ACTIVATION_TANH,
    Silu = FULMEN_ACTIVATION_SILU,
    Elu = FULMEN_ACTIVATION_ELU,
    Softmax = FULMEN_ACTIVATION_SOFTMAX,
    LogSoftmax = FULMEN_ACTIVATION_LOG_SOFTMAX,
    Identity = FULMEN_ACTIVATION_IDENTITY,
    Mish = FULMEN_ACTIVATION_MISH,
    Hardswish = FULMEN_ACTIVATION_HARDSWISH,
    Hardsigmoid = FULMEN_ACTIVATION_HARDSIGMOID,
    Relu6 = FULMEN_ACTIVATION_RELU6,
    GeluTanh = FULMEN_ACTIVATION_GELU_TANH,
    Selu = FULMEN_ACTIVATION_SELU,
    Softplus = FULMEN_ACTIVATION_SOFTPLUS,
    LogSigmoid = FULMEN_ACTIVATION_LOG_SIGMOID,
};

/// Options of a 2-D convolution, starting from fulmen's defaults.
struct Conv2dOptions : fulmen_conv2d_options {
    /// Defaults for a square `kernel_size` (stride 1, no padding, bias).
    explicit Conv2dOptions(int64_t kernel_size) : fulmen_conv2d_options(fulmen_conv2d_options_default(kernel_size)) {}
};

/// Options of a 3-D convolution, starting from fulmen's defaults.
struct Conv3dOptions : fulmen_conv3d_options {
    /// Defaults for a cubic `kernel_size` (stride 1, no padding, bias).
    explicit Conv3dOptions(int64_t kernel_size) : fulmen_conv3d_options(fulmen_conv3d_options_default(kernel_size)) {}
};

/// Options of a transposed convolution over `dims` (1 or 2) spatial
/// dimensions, starting from fulmen's defaults.
struct ConvTransposeOptions : fulmen_conv_transpose_options {
    /// Defaults for a square `kernel_size` (stride 1, no padding, bias).
    ConvTransposeOptions(size_t dims, int64_t kernel_size)
        : fulmen_conv_transpose_options(fulmen_conv_transpose_options_default(dims, kernel_size)) {}
};

/// Options of RNN, LSTM and GRU, default-constructed with PyTorch's
/// defaults (one layer, biases, (T, N, F), no dropout, one direction).
struct RnnOptions : fulmen_rnn_options {
    /// PyTorch's defaults.
    RnnOptions() : fulmen_rnn_options(fulmen_rnn_options_default()) {}
    /// Sets the number of stacked layers.
    RnnOptions& layers(int64_t n) {
        num_layers = n;
        return *this;
    }
    /// Input and output as (N, T, F).
    RnnOptions& batch_first_layout(bool on = true) {
        batch_first = on;
        return *this;
    }
    /// Runs each layer both ways.
    RnnOptions& both_directions(bool on = true) {
        bidirectional = on;
        return *this;
    }
};

/// Options of the transformer layers, default-constructed with PyTorch's
/// defaults (2048, dropout 0.1, ReLU, eps 1e-5, (L, N, E), post-norm, biases).
struct TransformerOptions : fulmen_transformer_options {
    /// PyTorch's defaults.
    TransformerOptions() : fulmen_transformer_options(fulmen_transformer_options_default()) {}
    /// Sets the activation of the feed-forward block (and its parameter).
    TransformerOptions& act(Activation kind, double param = 0) {
        activation = static_cast<int32_t>(kind);
        activation_param = param;
        return *this;
    }
};

/// A model: a layer, a sequential, a container of named children, or a
/// TorchScript module. Owns its `fulmen_model` handle.
class Model : public detail::Handle<fulmen_model, fulmen_model_free> {
public:
    /// An empty model object (no handle).
    Model() = default;

    /// Takes ownership of a `fulmen_model` handle.
    static Model adopt(fulmen_model* handle) noexcept { return Model(handle); }

    // ---- containers ------------------------------------------------------

    /// An empty nn.Sequential.
    static Model sequential() { return make([](fulmen_model** o) { return fulmen_model_sequential_new(o); }); }

    /// An nn.Sequential of `layers`, consumed in order (a braced list is
    /// evaluated left to right, so seeded initialisation matches Python):
    /// `sequential({linear(2, 8), relu(), linear(8, 1)})`.
    template <size_t N>
    static Model sequential(Model (&&layers)[N]) {
        Model m = sequential();
        for (Model& layer : layers) m.push(std::move(layer));
        return m;
    }

    /// An empty container of named children (run them with forward_child).
    static Model named() { return make([](fulmen_model** o) { return fulmen_model_named_new(o); }); }

    // ---- layers ----------------------------------------------------------

    /// nn.Linear(in_features, out_features, bias).
    static Model linear(int64_t in_features, int64_t out_features, bool bias = true) {
        return make([&](fulmen_model** o) { return fulmen_model_linear_new(in_features, out_features, bias, o); });
    }
    /// nn.Conv2d(in_channels, out_channels) with `options`.
    static Model conv2d(int64_t in_channels, int64_t out_channels, const Conv2dOptions& options) {
        return make([&](fulmen_model** o) { return fulmen_model_conv2d_new(in_channels, out_channels, &options, o); });
    }
    /// nn.Conv2d with a square `kernel` and default options.
    static Model conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel) {
        return conv2d(in_channels, out_channels, Conv2dOptions(kernel));
    }
    /// nn.Conv1d(in_channels, out_channels, kernel, stride, padding, dilation, groups, bias).
    static Model conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
                        int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true) {
        return make([&](fulmen_model** o) {
            return fulmen_model_conv1d_new(in_channels, out_channels, kernel, stride, padding, dilation, groups, bias, o);
        });
    }
    /// nn.MaxPool2d(kernel, stride, padding); stride 0 = kernel.
    /// nn.Conv3d(in_channels, out_channels, ...).
    static Model conv3d(int64_t in_channels, int64_t out_channels, const Conv3dOptions& options) {
        return make([&](fulmen_model** o) { return fulmen_model_conv3d_new(in_channels, out_channels, &options, o); });
    }
    /// nn.ConvTranspose1d / nn.ConvTranspose2d (by options.dims).
    static Model conv_transpose(int64_t in_channels, int64_t out_channels, const ConvTransposeOptions& options) {
        return make([&](fulmen_model** o) {
            return fulmen_model_conv_transpose_new(in_channels, out_channels, &options, o);
        });
    }
    /// nn.InstanceNorm1d (dims 1) or nn.InstanceNorm2d (dims 2).
    static Model instance_norm(size_t dims, int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                               bool affine = false, bool track_running_stats = false) {
        return make([&](fulmen_model** o) {
            return fulmen_model_instance_norm_new(dims, num_features, eps, momentum, affine, track_running_stats, o);
        });
    }
    /// nn.AdaptiveAvgPool1d / 2d (one or two sizes; -1 keeps a size).
    static Model adaptive_avg_pool(const Shape& output_size) {
        return make([&](fulmen_model** o) {
            return fulmen_model_adaptive_avg_pool_new(output_size.data(), output_size.size(), o);
        });
    }
    /// nn.AdaptiveMaxPool1d / 2d (one or two sizes; -1 keeps a size).
    static Model adaptive_max_pool(const Shape& output_size) {
        return make([&](fulmen_model** o) {
            return fulmen_model_adaptive_max_pool_new(output_size.data(), output_size.size(), o);
        });
    }
    /// nn.Upsample(size=...) with `mode` ("nearest", "linear", "bilinear", "bicubic", "trilinear").
    static Model upsample(const Shape& size, const std::string& mode = "nearest", bool align_corners = false) {
        return make([&](fulmen_model** o) {
            return fulmen_model_upsample_new(size.data(), size.size(), 0, mode.c_str(), align_corners, o);
        });
    }
    /// nn.Upsample(scale_factor=...) with `mode`.
    static Model upsample(double scale_factor, const std::string& mode = "nearest", bool align_corners = false) {
        return make([&](fulmen_model** o) {
            return fulmen_model_upsample_new(nullptr, 0, scale_factor, mode.c_str(), align_corners, o);
        });
    }
    static Model max_pool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0) {
        return make([&](fulmen_model** o) { return fulmen_model_max_pool2d_new(kernel, stride, padding, o); });
    }
    /// nn.AvgPool2d(kernel, stride, padding); stride 0 = kernel.
    static Model avg_pool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0) {
        return make([&](fulmen_model** o) { return fulmen_model_avg_pool2d_new(kernel, stride, padding, o); });
    }
    /// nn.BatchNorm1d/2d(num_features, eps, momentum).
    static Model batch_norm(int64_t num_features, double eps = 1e-5, double momentum = 0.1) {
        return make([&](fulmen_model** o) { return fulmen_model_batch_norm_new(num_features, eps, momentum, o); });
    }
    /// nn.LayerNorm(shape, eps).
    static Model layer_norm(const Shape& shape, double eps = 1e-5) {
        return make([&](fulmen_model** o) { return fulmen_model_layer_norm_new(shape.data(), shape.size(), eps, o); });
    }
    /// nn.GroupNorm(num_groups, num_channels, eps, affine).
    static Model group_norm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true) {
        return make([&](fulmen_model** o) { return fulmen_model_group_norm_new(num_groups, num_channels, eps, affine, o); });
    }
    /// nn.RMSNorm(shape, eps, elementwise_affine); eps 0 is the dtype's machine epsilon.
    static Model rms_norm(const Shape& shape, double eps = 0, bool affine = true) {
        return make([&](fulmen_model** o) {
            return fulmen_model_rms_norm_new(shape.data(), shape.size(), eps, affine, o);
        });
    }
    /// nn.PReLU(num_parameters, init).
    static Model prelu(int64_t num_parameters = 1, double init = 0.25) {
        return make([&](fulmen_model** o) { return fulmen_model_prelu_new(num_parameters, init, o); });
    }
    /// nn.Unflatten(dim, sizes).
    static Model unflatten(int64_t dim, const Shape& sizes) {
        return make([&](fulmen_model** o) { return fulmen_model_unflatten_new(dim, sizes.data(), sizes.size(), o); });
    }
    /// nn.Dropout(p).
    static Model dropout(double p = 0.5) {
        return make([&](fulmen_model** o) { return fulmen_model_dropout_new(p, o); });
    }
    /// nn.Dropout2d(p): whole channels.
    static Model dropout2d(double p = 0.5) {
        return make([&](fulmen_model** o) { return fulmen_model_dropout2d_new(p, o); });
    }
    /// nn.Embedding(num_embeddings, dim).
    static Model embedding(int64_t num_embeddings, int64_t dim) {
        return make([&](fulmen_model** o) { return fulmen_model_embedding_new(num_embeddings, dim, o); });
    }
    /// nn.Embedding(num_embeddings, dim, padding_idx): that row stays zero.
    static Model embedding(int64_t num_embeddings, int64_t dim, int64_t padding_idx) {
        return make([&](fulmen_model** o) {
            return fulmen_model_embedding_padded_new(num_embeddings, dim, padding_idx, o);
        });
    }
    /// nn.Flatten(start_dim, end_dim).
    static Model flatten(int64_t start_dim = 1, int64_t end_dim = -1) {
        return make([&](fulmen_model** o) { return fulmen_model_flatten_new(start_dim, end_dim, o); });
    }
    /// An activation layer; `param` is the slope, alpha or dimension where used.
    static Model activation(Activation kind, double param = 0) {
        return make([&](fulmen_model** o) { return fulmen_model_activation_new(static_cast<int32_t>(kind), param, o); });
    }
    /// nn.ReLU.
    static Model relu() { return activation(Activation::Relu); }
    /// nn.LeakyReLU(slope).
    static Model leaky_relu(double slope = 0.01) { return activation(Activation::LeakyRelu, slope); }
    /// nn.GELU.
    static Model gelu() { return activation(Activation::Gelu); }
    /// nn.Sigmoid.
    static Model sigmoid() { return activation(Activation::Sigmoid); }
    /// nn.Tanh.
    static Model tanh() { return activation(Activation::Tanh); }
    /// nn.SiLU.
    static Model silu() { return activation(Activation::Silu); }
    /// nn.ELU(alpha).
    static Model elu(double alpha = 1.0) { return activation(Activation::Elu, alpha); }
    /// nn.Softmax(dim).
    static Model softmax(int64_t dim) { return activation(Activation::Softmax, static_cast<double>(dim)); }
    /// nn.LogSoftmax(dim).
    static Model log_softmax(int64_t dim) { return activation(Activation::LogSoftmax, static_cast<double>(dim)); }
    /// nn.Identity.
    static Model identity() { return activation(Activation::Identity); }
    /// nn.LSTM(input_size, hidden_size, ...): forward gives the output
    /// sequence; forward_multi({&x, &h0, &c0, &lengths}) gives {output, h_n, c_n}.
    static Model lstm(int64_t input_size, int64_t hidden_size, const RnnOptions& options = RnnOptions()) {
        return make([&](fulmen_model** o) { return fulmen_model_lstm_new(input_size, hidden_size, &options, o); });
    }
    /// nn.GRU(input_size, hidden_size, ...): forward_multi({&x, &h0, &lengths}) gives {output, h_n}.
    static Model gru(int64_t input_size, int64_t hidden_size, const RnnOptions& options = RnnOptions()) {
        return make([&](fulmen_model** o) { return fulmen_model_gru_new(input_size, hidden_size, &options, o); });
    }
    /// nn.RNN(input_size, hidden_size, nonlinearity) with Activation::Tanh or Activation::Relu.
    static Model rnn(int64_t input_size, int64_t hidden_size, Activation nonlinearity = Activation::Tanh,
                     const RnnOptions& options = RnnOptions()) {
        return make([&](fulmen_model** o) {
            return fulmen_model_rnn_new(input_size, hidden_size, static_cast<int32_t>(nonlinearity), &options, o);
        });
    }
    /// nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first=...):
    /// forward is self-attention; forward_multi({&q, &k, &v, &key_padding_mask,
    /// &attn_mask}) gives {output, weights averaged over heads}.
    static Model multihead_attention(int64_t embed_dim, int64_t num_heads, double dropout = 0, bool bias = true,
                                     bool batch_first = false) {
        return make([&](fulmen_model** o) {
            return fulmen_model_multihead_attention_new(embed_dim, num_heads, dropout, bias, batch_first, o);
        });
    }
    /// nn.TransformerEncoderLayer(d_model, nhead, ...): forward_multi({&src,
    /// &src_mask, &src_key_padding_mask}).
    static Model transformer_encoder_layer(int64_t d_model, int64_t nhead,
                                           const TransformerOptions& options = TransformerOptions()) {
        return make([&](fulmen_model** o) {
            return fulmen_model_transformer_encoder_layer_new(d_model, nhead, &options, o);
        });
    }
    /// nn.TransformerDecoderLayer(d_model, nhead, ...): forward_multi({&tgt,
    /// &memory, &tgt_mask, &memory_mask, &tgt_key_padding_mask, &memory_key_padding_mask}).
    static Model transformer_decoder_layer(int64_t d_model, int64_t nhead,
                                           const TransformerOptions& options = TransformerOptions()) {
        return make([&](fulmen_model** o) {
            return fulmen_model_transformer_decoder_layer_new(d_model, nhead, &options, o);
        });
    }
    /// A TorchScript module saved by torch.jit.save (on the CPU).
    static Model load_torchscript(const std::string& path) {
        return make([&](fulmen_model** o) { return fulmen_model_load_torchscript(path.c_str(), o); });
    }
    /// A TorchScript module with its tensors on `device`.
    static Model load_torchscript(const std::string& path, Device device) {
        return make([&](fulmen_model** o) {
            return fulmen_model_load_torchscript_on(path.c_str(), static_cast<int32_t>(device.type), device.index, o);
        });
    }

    /// A torch.export archive (.pt2) on the CPU: its programs ("forward",
    /// "training_step", ...) share one state; call them with call_method.
    static Model load_exported(const std::string& path) {
        return make([&](fulmen_model** o) { return fulmen_model_load_exported(path.c_str(), o); });
    }
    /// A torch.export archive with its tensors on `device`.
    static Model load_exported(const std::string& path, Device device) {
        return make([&](fulmen_model** o) {
            return fulmen_model_load_exported_on(path.c_str(), static_cast<int32_t>(device.type), device.index, o);
        });
    }

    /// Adds the compiled training step in the AOTInductor package `path`
    /// (python/fulmen_export.py export_compiled_step), answering `method`:
    /// call_method(method, {&batch}) then returns {"loss": ...}, whose
    /// backward adds the compiled gradients. One package per batch shape.
    Model& add_compiled_step(const std::string& path, const std::string& method) {
        check(fulmen_model_add_compiled_step(get(), path.c_str(), method.c_str()));
        return *this;
    }

    // ---- building --------------------------------------------------------

    /// Appends `child` to a sequential; `child` is consumed on success
    /// (left unchanged if this throws). Returns *this for chaining.
    Model& push(Model&& child) {
        check(fulmen_model_push(get(), child.get()));
        child.release();
        return *this;
    }

    /// Adds `child` under `name` (consumed on success). Returns *this.
    Model& add(const std::string& name, Model&& child) {
        check(fulmen_model_add(get(), name.c_str(), child.get()));
        child.release();
        return *this;
    }

    // ---- running ---------------------------------------------------------

    /// The forward pass on `input`.
    Tensor forward(const Tensor& input) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_model_forward(get(), input.get(), o); });
    }
    /// The forward pass on `input` (same as forward).
    Tensor operator()(const Tensor& input) const { return forward(input); }
    /// Lightning's `measure_flops(model, lambda: model(input), lambda y:
    /// y.sum())` (fulmen_model_measure_flops): the FLOPs of one forward on
    /// `input` and, with `backward`, of the backward of its output's sum,
    /// as PyTorch's FlopCounterMode counts them. The model's gradients,
    /// buffers and the CPU's random state are left as they were.
    std::uint64_t measure_flops(const Tensor& input, bool backward = true) const {
        return detail::read<std::uint64_t>(
            [&](std::uint64_t* o) { return fulmen_model_measure_flops(get(), input.get(), backward, o); });
    }
    /// measure_flops keeping every count (fulmen_model_measure_flops_by_module):
    /// by module and operator, as FlopCounterMode's get_flop_counts().
    FlopCounts measure_flops_by_module(const Tensor& input, bool backward = true) const {
        fulmen_flop_counts* out = nullptr;
        check(fulmen_model_measure_flops_by_module(get(), input.get(), backward, &out));
        return FlopCounts::adopt(out);
    }
    /// Runs the child at `path` ("encoder" or "encoder.0") on `input`.
    Tensor forward_child(const std::string& path, const Tensor& input) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_model_forward_child(get(), path.c_str(), input.get(), o); });
    }
    /// Runs the model on several inputs (nullptr for a left-out optional
    /// one) and returns all its results (fulmen_model_forward_multi).
    std::vector<Tensor> forward_multi(std::initializer_list<const Tensor*> inputs) const {
        return forward_multi_child("", inputs);
    }
    /// forward_multi on the child at `path`.
    std::vector<Tensor> forward_multi_child(const std::string& path,
                                            std::initializer_list<const Tensor*> inputs) const {
        std::vector<const fulmen_tensor*> handles;
        handles.reserve(inputs.size());
        for (const Tensor* t : inputs) handles.push_back(Tensor::optional_handle(t, "inputs"));
        return Tensor::make_list([&](fulmen_tensor** outs, size_t capacity, size_t* count) {
            return fulmen_model_forward_multi(get(), path.c_str(), handles.data(), handles.size(), outs, capacity,
                                              count);
        });
    }
    /// Calls the scripted method `method` of a TorchScript model with
    /// positional `args` (none may be null): `call_method("training_step",
    /// {&batch, &index})`.
    Value call_method(const std::string& method, const std::vector<const Value*>& args = {}) const {
        return call_method_child("", method, args);
    }
    /// call_method on the TorchScript child at `path`.
    Value call_method_child(const std::string& path, const std::string& method,
                            const std::vector<const Value*>& args) const {
        auto hs = Value::handles(args, "args");
        return Value::adopt(detail::make<fulmen_value>([&](fulmen_value** o) {
            return fulmen_model_call_method(get(), path.c_str(), method.c_str(), hs.data(), hs.size(), o);
        }));
    }
    /// The forward traced on `example_inputs` into a new TorchScript model
    /// in evaluation mode, holding copies of the weights
    /// (fulmen_model_to_torchscript; Lightning's
    /// to_torchscript(method="trace")); save it with save_torchscript.
    Model to_torchscript(std::initializer_list<const Tensor*> example_inputs) const {
        std::vector<const fulmen_tensor*> handles;
        handles.reserve(example_inputs.size());
        for (const Tensor* t : example_inputs) handles.push_back(Tensor::optional_handle(t, "example_inputs"));
        return make([&](fulmen_model** o) {
            return fulmen_model_to_torchscript(get(), handles.data(), handles.size(), o);
        });
    }
    /// Saves a TorchScript model as a .pt file that torch.jit.load reads.
    void save_torchscript(const std::string& file) const {
        check(fulmen_model_save_torchscript(get(), nullptr, file.c_str()));
    }
    /// Moves every parameter and buffer to `device`, in place.
    Model& to(Device device) {
        check(fulmen_model_to_device(get(), static_cast<int32_t>(device.type), device.index));
        return *this;
    }
    /// Casts floating parameters and buffers to the floating `dtype`, in place.
    Model& to(DType dtype) {
        check(fulmen_model_to_dtype(get(), static_cast<int32_t>(dtype)));
        return *this;
    }
    /// Training mode (true, model.train()) or evaluation mode (false).
    Model& train(bool on = true) {
        check(fulmen_model_set_training(get(), on));
        return *this;
    }
    /// Evaluation mode (model.eval()).
    Model& eval() { return train(false); }
    /// Checkpoints the forward of the module at `path` ("" for the model
    /// itself), or stops (torch.utils.checkpoint): its activations are not
    /// kept, and backward runs it again with the first run's dropout masks
    /// and autocast, so the gradients are the plain forward's.
    Model& set_activation_checkpointing(const std::string& path, bool on = true) {
        check(fulmen_model_set_activation_checkpointing(get(), path.c_str(), on));
        return *this;
    }
    /// Whether the model is in training mode.
    bool is_training() const { return query<bool>(fulmen_model_is_training); }
    /// Gives the parameters and buffers built in a `MetaInit` scope their
    /// values, on the CPU (fulmen_model_materialize).
    Model& materialize() {
        check(fulmen_model_materialize(get()));
        return *this;
    }
    /// Whether a parameter or buffer is on the meta device.
    bool holds_meta() const { return query<bool>(fulmen_model_holds_meta); }

    // ---- parameters and state --------------------------------------------

    /// Number of scalar parameters.
    int64_t num_parameters() const { return query<int64_t>(fulmen_model_num_parameters); }
    /// The layer table (name, type, parameter count, totals) as Lightning's
    /// ModelSummary prints it, down to `max_depth` levels (1: direct children).
    std::string summary(size_t max_depth = 1) const {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) {
            return fulmen_model_summary(get(), max_depth, buf, cap, len);
        });
    }
    /// Number of state_dict entries (parameters and buffers).
    size_t state_dict_len() const { return query<size_t>(fulmen_model_state_dict_len); }
    /// The state_dict names in order ("0.weight", "0.bias", ...).
    std::vector<std::string> state_dict_names() const {
        std::vector<std::string> names(state_dict_len());
        for (size_t i = 0; i < names.size(); i++) names[i] = state_dict_name(i);
        return names;
    }
    /// The name of state_dict entry `index`.
    std::string state_dict_name(size_t index) const {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) {
            return fulmen_model_state_dict_name(get(), index, buf, cap, len);
        });
    }
    /// The state_dict entry `name` (shares storage with the model).
    Tensor state_dict_get(const std::string& name) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_model_state_dict_get(get(), name.c_str(), o); });
    }
    /// The parameters (shared with the model), in named_parameters order;
    /// `trainable_only` keeps those that require grad (what an optimizer
    /// should get while part of the model is frozen, as under
    /// BackboneFinetuning).
    std::vector<Tensor> parameters(bool trainable_only = false) const {
        return Tensor::make_list([&](fulmen_tensor** outs, size_t capacity, size_t* count) {
            return fulmen_model_parameters(get(), trainable_only, outs, capacity, count);
        });
    }
    /// Saves the state_dict as safetensors.
    void save(const std::string& path) const { check(fulmen_model_save(get(), path.c_str())); }
    /// Loads weights from safetensors; `strict` refuses missing/extra names.
    void load(const std::string& path, bool strict = true) { check(fulmen_model_load(get(), path.c_str(), strict)); }

private:
    explicit Model(fulmen_model* owned) noexcept : Handle(owned) {}

    template <class Fn>
    static Model make(Fn&& fn) {
        return Model(detail::make<fulmen_model>(std::forward<Fn>(fn)));
    }
    template <class V, class Fn>
    V query(Fn fn) const {
        return detail::read<V>([&](V* out) { return fn(get(), out); });
    }
};

namespace detail {
/// Calls the code `measure_flops` measures from fulmen_measure_flops.
template <class Fn>
struct MeasuredCall {
    Fn& fn;
    static fulmen_error* call(void* ud) noexcept {
        return guard_callback([&] { static_cast<MeasuredCall*>(ud)->fn(); });
    }
};
}  // namespace detail

/// PyTorch's FlopCounterMode around `code` (fulmen_measure_flops): runs it
/// on this thread and returns the FLOPs of the matrix products,
/// convolutions and attention kernels it ran, the backward passes it
/// started included. An exception `code` throws ends the measurement and
/// is rethrown here. Measurements do not nest on a thread.
template <class Fn>
std::uint64_t measure_flops(Fn&& code) {
    detail::MeasuredCall<Fn> call{code};
    std::uint64_t flops = 0;
    detail::clear_pending_exception();
    check(fulmen_measure_flops(&detail::MeasuredCall<Fn>::call, &call, &flops));
    return flops;
}

/// measure_flops keeping every count (fulmen_measure_flops_by_module): by
/// module and operator, as FlopCounterMode's get_flop_counts() and
/// get_table().
template <class Fn>
FlopCounts measure_flops_by_module(Fn&& code) {
    detail::MeasuredCall<Fn> call{code};
    fulmen_flop_counts* out = nullptr;
    detail::clear_pending_exception();
    check(fulmen_measure_flops_by_module(&detail::MeasuredCall<Fn>::call, &call, &out));
    return FlopCounts::adopt(out);
}

}  // namespace fulmen

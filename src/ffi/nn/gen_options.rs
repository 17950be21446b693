//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/nn.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.

/// Options of a 2-D convolution; get defaults from
/// `fulmen_conv2d_options_default` and set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_conv2d_options {
    /// Kernel height and width.
    pub kernel: [i64; 2],
    /// Stride (default 1, 1).
    pub stride: [i64; 2],
    /// Zero padding (default 0, 0).
    pub padding: [i64; 2],
    /// Dilation (default 1, 1).
    pub dilation: [i64; 2],
    /// Groups (default 1).
    pub groups: i64,
    /// Learn a bias (default true).
    pub bias: bool,
}

/// Default convolution options for a square `kernel`.
#[no_mangle]
pub extern "C" fn fulmen_conv2d_options_default(kernel: i64) -> fulmen_conv2d_options {
    fulmen_conv2d_options {
        kernel: [kernel, kernel],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
        groups: 1,
        bias: true,
    }
}

/// Options of a 3-D convolution; get defaults from
/// `fulmen_conv3d_options_default` and set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_conv3d_options {
    /// Kernel depth, height and width.
    pub kernel: [i64; 3],
    /// Stride (default 1, 1, 1).
    pub stride: [i64; 3],
    /// Zero padding (default 0, 0, 0).
    pub padding: [i64; 3],
    /// Dilation (default 1, 1, 1).
    pub dilation: [i64; 3],
    /// Groups (default 1).
    pub groups: i64,
    /// Learn a bias (default true).
    pub bias: bool,
}

/// Default 3-D convolution options for a cubic `kernel`.
#[no_mangle]
pub extern "C" fn fulmen_conv3d_options_default(kernel: i64) -> fulmen_conv3d_options {
    fulmen_conv3d_options {
        kernel: [kernel; 3],
        stride: [1; 3],
        padding: [0; 3],
        dilation: [1; 3],
        groups: 1,
        bias: true,
    }
}

/// Options of a transposed convolution; get defaults from
/// `fulmen_conv_transpose_options_default` and set what differs. Only the
/// first `dims` entries of each array are read.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_conv_transpose_options {
    /// 1 (`ConvTranspose1d`) or 2 (`ConvTranspose2d`).
    pub dims: usize,
    /// Kernel size per spatial dimension.
    pub kernel: [i64; 2],
    /// Stride (default 1).
    pub stride: [i64; 2],
    /// Padding removed from each side of the output (default 0).
    pub padding: [i64; 2],
    /// Size added to one side of the output (default 0; smaller than the
    /// stride or the dilation).
    pub output_padding: [i64; 2],
    /// Dilation (default 1).
    pub dilation: [i64; 2],
    /// Groups (default 1).
    pub groups: i64,
    /// Learn a bias (default true).
    pub bias: bool,
}

/// Default transposed-convolution options for `dims` spatial dimensions
/// and a square `kernel`.
#[no_mangle]
pub extern "C" fn fulmen_conv_transpose_options_default(dims: usize, kernel: i64) -> fulmen_conv_transpose_options {
    fulmen_conv_transpose_options {
        dims,
        kernel: [kernel; 2],
        stride: [1; 2],
        padding: [0; 2],
        output_padding: [0; 2],
        dilation: [1; 2],
        groups: 1,
        bias: true,
    }
}

/// Options of RNN, LSTM and GRU; get defaults from
/// `fulmen_rnn_options_default` and set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_rnn_options {
    /// Stacked layers (default 1, at most 1024).
    pub num_layers: i64,
    /// Learn `bias_ih` and `bias_hh` (default true).
    pub bias: bool,
    /// Input and output are `(N, T, F)` rather than `(T, N, F)` (default false).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training (default 0).
    pub dropout: f64,
    /// Run each layer both ways and concatenate (default false).
    pub bidirectional: bool,
}

/// PyTorch's defaults: one layer, biases, `(T, N, F)`, no dropout, one direction.
#[no_mangle]
pub extern "C" fn fulmen_rnn_options_default() -> fulmen_rnn_options {
    fulmen_rnn_options {
        num_layers: 1,
        bias: true,
        batch_first: false,
        dropout: 0.0,
        bidirectional: false,
    }
}

/// Options of the transformer layers; get defaults from
/// `fulmen_transformer_options_default` and set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_transformer_options {
    /// Width of the feed-forward block (default 2048).
    pub dim_feedforward: i64,
    /// Dropout (default 0.1).
    pub dropout: f64,
    /// Activation of the feed-forward block, a fulmen_activation (default
    /// FULMEN_ACTIVATION_RELU; FULMEN_ACTIVATION_GELU is PyTorch's "gelu").
    pub activation: i32,
    /// The activation's parameter, as for `fulmen_model_activation_new` (default 0).
    pub activation_param: f64,
    /// Epsilon of the layer norms (default 1e-5).
    pub layer_norm_eps: f64,
    /// Input and output are `(N, L, E)` rather than `(L, N, E)` (default false).
    pub batch_first: bool,
    /// Pre-norm: normalise before attention and feed-forward (default false).
    pub norm_first: bool,
    /// Biases in the linear layers and layer norms (default true).
    pub bias: bool,
    /// Causal self-attention: each position attends to itself and the positions
    /// before it, as PyTorch's `is_causal=True` (its `src_is_causal` /
    /// `tgt_is_causal`). The layer then takes no self-attention mask (a key
    /// padding mask is allowed); without one, and without weights, attention
    /// runs through `scaled_dot_product_attention(is_causal=True)`, whose flash
    /// and memory-efficient kernels CUDA uses (default false).
    pub causal: bool,
}

/// PyTorch's defaults: 2048, 0.1, ReLU, 1e-5, `(L, N, E)`, post-norm, biases, not causal.
#[no_mangle]
pub extern "C" fn fulmen_transformer_options_default() -> fulmen_transformer_options {
    fulmen_transformer_options {
        dim_feedforward: 2048,
        dropout: 0.1,
        activation: 0,
        activation_param: 0.0,
        layer_norm_eps: 1e-5,
        batch_first: false,
        norm_first: false,
        bias: true,
        causal: false,
    }
}

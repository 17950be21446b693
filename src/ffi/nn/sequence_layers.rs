//! Constructors of the sequence layers: RNN, LSTM, GRU, multi-head
//! attention and the transformer encoder / decoder layers. Run them with
//! `fulmen_model_forward_multi` for their extra inputs and results.
use crate::error::{Error, Result};
use crate::ffi::base::error::{fulmen_error, guard};
use crate::ffi::nn::gen_options::{
    fulmen_rnn_options, fulmen_rnn_options_default, fulmen_transformer_options, fulmen_transformer_options_default,
};
use crate::ffi::nn::model::{activation, emit_model, fulmen_model};
use crate::nn::{Module, RnnConfig, RnnKind, TransformerConfig};

/// # Safety
/// `o` must be NULL or point to a valid options struct.
unsafe fn rnn_config(input_size: i64, hidden_size: i64, o: *const fulmen_rnn_options) -> RnnConfig {
    let o = if o.is_null() { fulmen_rnn_options_default() } else { *o };
    RnnConfig {
        input_size,
        hidden_size,
        num_layers: o.num_layers,
        bias: o.bias,
        batch_first: o.batch_first,
        dropout: o.dropout,
        bidirectional: o.bidirectional,
    }
}

unsafe fn new_rnn(
    kind: RnnKind,
    input_size: i64,
    hidden_size: i64,
    options: *const fulmen_rnn_options,
    out: *mut *mut fulmen_model,
) -> Result<()> {
    emit_model(out, Module::rnn(kind, rnn_config(input_size, hidden_size, options)))
}

/// Creates `nn.LSTM(input_size, hidden_size, ...)` with `options` (NULL for
/// the defaults). Parameters `weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`,
/// `bias_hh_l0` (`_reverse` for the backward direction), `[4 * hidden, ...]`
/// in PyTorch's gate order, drawn as PyTorch draws them. `fulmen_model_forward`
/// gives the output sequence (so it can sit in a sequential);
/// `fulmen_model_forward_multi` takes h0, c0 and lengths and gives h_n, c_n.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a size not positive or too large,
/// num_layers outside 1..=1024, dropout outside [0, 1]), FULMEN_CODE_TORCH
/// (the weights cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_lstm_new(
    input_size: i64,
    hidden_size: i64,
    options: *const fulmen_rnn_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| new_rnn(RnnKind::Lstm, input_size, hidden_size, options, out))
}

/// Creates `nn.GRU(input_size, hidden_size, ...)` with `options` (NULL for
/// the defaults); weights `[3 * hidden, ...]`, named and drawn as PyTorch's.
///
/// Errors: as `fulmen_model_lstm_new`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_gru_new(
    input_size: i64,
    hidden_size: i64,
    options: *const fulmen_rnn_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| new_rnn(RnnKind::Gru, input_size, hidden_size, options, out))
}

/// Creates `nn.RNN(input_size, hidden_size, nonlinearity, ...)`:
/// `nonlinearity` is FULMEN_ACTIVATION_TANH (PyTorch's default) or
/// FULMEN_ACTIVATION_RELU; `options` NULL for the defaults.
///
/// Errors: as `fulmen_model_lstm_new`, and FULMEN_CODE_INVALID_ARGUMENT for
/// another nonlinearity.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_rnn_new(
    input_size: i64,
    hidden_size: i64,
    nonlinearity: i32,
    options: *const fulmen_rnn_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let kind = match activation(nonlinearity, 0.0) {
            Ok(crate::nn::Activation::Tanh) => RnnKind::Tanh,
            Ok(crate::nn::Activation::Relu) => RnnKind::Relu,
            _ => {
                return Err(Error::invalid(format!(
                    "rnn: nonlinearity {nonlinearity} must be FULMEN_ACTIVATION_TANH or FULMEN_ACTIVATION_RELU"
                )))
            }
        };
        new_rnn(kind, input_size, hidden_size, options, out)
    })
}

/// Creates `nn.MultiheadAttention(embed_dim, num_heads, dropout, bias,
/// batch_first=batch_first)` (query, key and value of `embed_dim`
/// features). Parameters `in_proj_weight` `[3E, E]` (Xavier-uniform),
/// `in_proj_bias`, `out_proj.weight`, `out_proj.bias` (zeros), drawn in
/// PyTorch's order. `fulmen_model_forward` is self-attention without masks;
/// `fulmen_model_forward_multi` takes key, value and masks and also gives
/// the attention weights.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (embed_dim not a positive multiple
/// of num_heads, dropout outside [0, 1]), FULMEN_CODE_TORCH.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_multihead_attention_new(
    embed_dim: i64,
    num_heads: i64,
    dropout: f64,
    bias: bool,
    batch_first: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| { emit_model(out, Module::multihead_attention(embed_dim, num_heads, dropout, bias, batch_first)) })
}

unsafe fn new_transformer(
    d_model: i64,
    nhead: i64,
    options: *const fulmen_transformer_options,
    decoder: bool,
    out: *mut *mut fulmen_model,
) -> Result<()> {
    let o = if options.is_null() { fulmen_transformer_options_default() } else { *options };
    let cfg = TransformerConfig {
        d_model,
        nhead,
        dim_feedforward: o.dim_feedforward,
        dropout: o.dropout,
        activation: activation(o.activation, o.activation_param)?,
        layer_norm_eps: o.layer_norm_eps,
        batch_first: o.batch_first,
        norm_first: o.norm_first,
        bias: o.bias,
        causal: o.causal,
    };
    let m = if decoder { Module::transformer_decoder_layer(cfg) } else { Module::transformer_encoder_layer(cfg) };
    emit_model(out, m)
}

/// Creates `nn.TransformerEncoderLayer(d_model, nhead, ...)` with `options`
/// (NULL for the defaults). Parameters `self_attn.*`, `linear1.*`,
/// `linear2.*`, `norm1.*`, `norm2.*`, drawn in PyTorch's order.
/// `fulmen_model_forward` runs it without masks; `fulmen_model_forward_multi`
/// takes `src, src_mask, src_key_padding_mask` (a causal mask: a bool
/// `[L, L]` with true above the diagonal, e.g. from `fulmen_tensor_triu`).
/// With `options.causal` the layer is causal without a mask, and a
/// `src_mask` is refused (FULMEN_CODE_INVALID_ARGUMENT when it runs).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (d_model not a positive multiple of
/// nhead, dim_feedforward not positive, dropout outside [0, 1], eps
/// negative, an unknown or softmax activation), FULMEN_CODE_TORCH.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_transformer_encoder_layer_new(
    d_model: i64,
    nhead: i64,
    options: *const fulmen_transformer_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| new_transformer(d_model, nhead, options, false, out))
}

/// Creates `nn.TransformerDecoderLayer(d_model, nhead, ...)` with `options`
/// (NULL for the defaults). Parameters `self_attn.*`, `multihead_attn.*`,
/// `linear1.*`, `linear2.*`, `norm1.*` to `norm3.*`. It needs the memory:
/// run it with `fulmen_model_forward_multi` (`tgt, memory, tgt_mask,
/// memory_mask, tgt_key_padding_mask, memory_key_padding_mask`).
/// `options.causal` makes its self-attention causal (no `tgt_mask` then).
///
/// Errors: as `fulmen_model_transformer_encoder_layer_new`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_transformer_decoder_layer_new(
    d_model: i64,
    nhead: i64,
    options: *const fulmen_transformer_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| new_transformer(d_model, nhead, options, true, out))
}

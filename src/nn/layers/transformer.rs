//! `TransformerEncoderLayer` and `TransformerDecoderLayer`, PyTorch's
//! post-norm (or `norm_first`) blocks, with its sub-module names
//! (`self_attn.in_proj_weight`, `linear1.weight`, `norm2.bias`, ...).
use super::attention::{AttentionCall, MultiheadAttention};
use super::linear::Linear;
use super::norm::LayerNorm;
use super::{part_names, part_params, Activation, Layer};
use crate::error::{Error, Result};
use crate::nn::flop_counter::ModuleScope;
use tch::Tensor;

/// Runs `f` as PyTorch's sub-module `name` of the layer, for FLOP counts
/// by module (`TransformerEncoderLayer.linear1`).
fn as_part<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let _scope = ModuleScope::child(name);
    f()
}

/// Settings of a transformer layer, as PyTorch takes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransformerConfig {
    /// Features of each position.
    pub d_model: i64,
    /// Attention heads (`d_model` must be a multiple).
    pub nhead: i64,
    /// Width of the feed-forward block.
    pub dim_feedforward: i64,
    /// Dropout after attention, inside the feed-forward block and on the
    /// attention weights, in training.
    pub dropout: f64,
    /// Activation of the feed-forward block.
    pub activation: Activation,
    /// Epsilon of the layer norms.
    pub layer_norm_eps: f64,
    /// Input and output are `(N, L, E)` rather than `(L, N, E)`.
    pub batch_first: bool,
    /// Normalise before each block (pre-norm) rather than after.
    pub norm_first: bool,
    /// Whether the linear layers and layer norms have biases.
    pub bias: bool,
    /// Causal self-attention (PyTorch's `is_causal=True`): no self-attention
    /// mask is taken; attention runs through SDPA's `is_causal`.
    pub causal: bool,
}

/// A transformer encoder layer, or with `cross_attn` a decoder layer.
#[derive(Debug)]
pub(crate) struct TransformerLayer {
    cfg: TransformerConfig,
    self_attn: MultiheadAttention,
    cross_attn: Option<MultiheadAttention>,
    linear1: Linear,
    linear2: Linear,
    norms: Vec<LayerNorm>,
    names: Vec<String>,
}

/// The masks of one attention block.
#[derive(Clone, Copy)]
struct Masks<'a> {
    attn: Option<&'a Tensor>,
    key_padding: Option<&'a Tensor>,
}

impl TransformerLayer {
    /// Draws the weights in PyTorch's order: self-attention, (cross-attention,)
    /// `linear1`, `linear2`; the norms start at ones and zeros.
    pub(crate) fn new(cfg: TransformerConfig, decoder: bool) -> Result<TransformerLayer> {
        let what = if decoder { "transformer_decoder_layer" } else { "transformer_encoder_layer" };
        let c = &cfg;
        if c.dim_feedforward <= 0 || !(0.0..=1.0).contains(&c.dropout) {
            return Err(Error::invalid(format!(
                "{what}: dim_feedforward ({}) must be positive and dropout ({}) in [0, 1]",
                c.dim_feedforward, c.dropout
            )));
        }
        if matches!(c.activation, Activation::Softmax(_) | Activation::LogSoftmax(_)) {
            return Err(Error::invalid(format!("{what}: the activation must be element-wise, not a softmax")));
        }
        let attention = || MultiheadAttention::new(c.d_model, c.nhead, c.dropout, c.bias, c.batch_first);
        let self_attn = attention().map_err(|e| e.context(what))?;
        let cross_attn = if decoder { Some(attention()?) } else { None };
        let linear1 = Linear::new(c.d_model, c.dim_feedforward, c.bias)?;
        let linear2 = Linear::new(c.dim_feedforward, c.d_model, c.bias)?;
        let norms = (0..if decoder { 3 } else { 2 })
            .map(|_| LayerNorm::with_bias(&[c.d_model], c.layer_norm_eps, true, c.bias))
            .collect::<Result<Vec<_>>>()?;
        let mut layer = TransformerLayer { cfg, self_attn, cross_attn, linear1, linear2, norms, names: Vec::new() };
        layer.names = part_names(&layer.parts());
        Ok(layer)
    }

    /// The sub-modules in PyTorch's registration order.
    fn parts(&self) -> Vec<(&'static str, &dyn Layer)> {
        let mut parts: Vec<(&'static str, &dyn Layer)> = vec![("self_attn", &self.self_attn)];
        if let Some(m) = &self.cross_attn {
            parts.push(("multihead_attn", m));
        }
        parts.push(("linear1", &self.linear1));
        parts.push(("linear2", &self.linear2));
        for (name, norm) in ["norm1", "norm2", "norm3"].into_iter().zip(&self.norms) {
            parts.push((name, norm));
        }
        parts
    }

    fn what(&self) -> &'static str {
        if self.cross_attn.is_some() {
            "transformer_decoder_layer"
        } else {
            "transformer_encoder_layer"
        }
    }

    /// PyTorch's dropout module `name` of the layer.
    fn dropout(&self, name: &str, x: Tensor, training: bool) -> Result<Tensor> {
        as_part(name, || Ok(if training && self.cfg.dropout > 0.0 { x.f_dropout(self.cfg.dropout, true)? } else { x }))
    }

    fn attention(
        &self,
        attn: &MultiheadAttention,
        x: &Tensor,
        memory: Option<&Tensor>,
        masks: Masks<'_>,
        training: bool,
    ) -> Result<Tensor> {
        let causal = self.cfg.causal && memory.is_none();
        if causal && masks.attn.is_some() {
            let mask = if self.cross_attn.is_some() { "tgt_mask" } else { "src_mask" };
            return Err(Error::invalid(format!(
                "the layer is causal (options.causal): it takes no {mask}; a key padding mask is allowed"
            )));
        }
        let kv = memory.unwrap_or(x);
        let call = AttentionCall {
            query: x,
            key: kv,
            value: kv,
            key_padding_mask: masks.key_padding,
            attn_mask: masks.attn,
            need_weights: false,
            self_attention: memory.is_none(),
            causal,
        };
        let (module, dropout) = match memory {
            None => ("self_attn", "dropout1"),
            Some(_) => ("multihead_attn", "dropout2"),
        };
        let (out, _) = as_part(module, || attn.attend(&call, training))?;
        self.dropout(dropout, out, training)
    }

    fn feed_forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let h = as_part("linear1", || self.linear1.forward(x, training))?;
        let h = self.dropout("dropout", self.cfg.activation.apply(&h)?, training)?;
        let out = as_part("linear2", || self.linear2.forward(&h, training))?;
        self.dropout(if self.cross_attn.is_some() { "dropout3" } else { "dropout2" }, out, training)
    }

    /// One residual block: `x + f(norm(x))` with `norm_first`, else `norm(x + f(x))`.
    fn block(&self, x: Tensor, norm: usize, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let name = ["norm1", "norm2", "norm3"][norm];
        let norm = |x: &Tensor| as_part(name, || self.norms[norm].forward(x, false));
        if self.cfg.norm_first {
            Ok(x.f_add(&f(&norm(&x)?)?)?)
        } else {
            norm(&x.f_add(&f(&x)?)?)
        }
    }

    /// Runs the layer: `memory` and its masks for a decoder.
    fn run(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        own: Masks<'_>,
        cross: Masks<'_>,
        training: bool,
    ) -> Result<Tensor> {
        let mut x = self.block(x.shallow_clone(), 0, |h| self.attention(&self.self_attn, h, None, own, training))?;
        let mut next = 1;
        if let (Some(attn), Some(memory)) = (&self.cross_attn, memory) {
            x = self.block(x, 1, |h| self.attention(attn, h, Some(memory), cross, training))?;
            next = 2;
        }
        self.block(x, next, |h| self.feed_forward(h, training))
    }
}

impl Layer for TransformerLayer {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let cross_attn = self.cross_attn.as_ref().map(|m| m.mapped(map)).transpose()?;
        Ok(Box::new(TransformerLayer {
            cfg: self.cfg,
            self_attn: self.self_attn.mapped(map)?,
            cross_attn,
            linear1: self.linear1.mapped(map)?,
            linear2: self.linear2.mapped(map)?,
            norms: self.norms.iter().map(|n| n.mapped(map)).collect::<Result<_>>()?,
            names: self.names.clone(),
        }))
    }

    fn type_name(&self) -> &'static str {
        if self.cross_attn.is_some() {
            "TransformerDecoderLayer"
        } else {
            "TransformerEncoderLayer"
        }
    }

    /// An encoder layer without masks; a decoder layer needs its memory
    /// (use `forward_multi`).
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        if self.cross_attn.is_some() {
            return Err(Error::invalid("transformer_decoder_layer: takes tgt and memory; run it with forward_multi"));
        }
        let none = Masks { attn: None, key_padding: None };
        self.run(x, None, none, none, training).map_err(|e| e.context(self.what()))
    }

    /// Encoder: `[src, src_mask, src_key_padding_mask]`; decoder: `[tgt,
    /// memory, tgt_mask, memory_mask, tgt_key_padding_mask,
    /// memory_key_padding_mask]`; the output only.
    fn forward_multi(&self, inputs: &[Option<&Tensor>], training: bool) -> Result<Vec<Tensor>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let decoder = self.cross_attn.is_some();
        let (most, names) = if decoder {
            (6, "tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask")
        } else {
            (3, "src, src_mask, src_key_padding_mask")
        };
        let required = if decoder { 2 } else { 1 };
        let x = match get(0) {
            Some(x) if inputs.len() <= most && (0..required).all(|i| get(i).is_some()) => x,
            _ => {
                return Err(Error::invalid(format!(
                    "{}: takes {required} to {most} inputs ({names}), the first {required} required; got {}",
                    self.what(),
                    inputs.len()
                )))
            }
        };
        let y = if decoder {
            let own = Masks { attn: get(2), key_padding: get(4) };
            let cross = Masks { attn: get(3), key_padding: get(5) };
            self.run(x, get(1), own, cross, training)
        } else {
            let own = Masks { attn: get(1), key_padding: get(2) };
            self.run(x, None, own, own, training)
        };
        Ok(vec![y.map_err(|e| e.context(self.what()))?])
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        part_params(&self.names, &self.parts())
    }
}

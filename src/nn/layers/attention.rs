//! `MultiheadAttention`, PyTorch's `nn.MultiheadAttention` with query, key
//! and value of `embed_dim` features (no `add_bias_kv`, no `add_zero_attn`).
use super::linear::Linear;
use super::{shape_of, Layer};
use crate::error::{Error, Result};
use crate::nn::init;
use tch::{Kind, Tensor};

/// Multi-head attention: `in_proj_weight` `[3E, E]`, `in_proj_bias` `[3E]`
/// and `out_proj` (a Linear), as PyTorch names and initialises them.
#[derive(Debug)]
pub(crate) struct MultiheadAttention {
    embed_dim: i64,
    num_heads: i64,
    dropout: f64,
    batch_first: bool,
    in_proj_weight: Tensor,
    in_proj_bias: Option<Tensor>,
    out_proj: Linear,
}

/// One attention call: query, key and value with optional masks.
pub(crate) struct AttentionCall<'a> {
    /// `(L, N, E)`, `(N, L, E)` with `batch_first`, or unbatched `(L, E)`.
    pub query: &'a Tensor,
    /// `(S, N, E)`, `(N, S, E)` or `(S, E)`.
    pub key: &'a Tensor,
    /// The same shape as `key`.
    pub value: &'a Tensor,
    /// `(N, S)` (or `(S)` unbatched): bool true, or `-inf`, leaves a key out.
    pub key_padding_mask: Option<&'a Tensor>,
    /// `(L, S)` or `(N * num_heads, L, S)`: bool true leaves a pair out;
    /// a float mask is added to the scores.
    pub attn_mask: Option<&'a Tensor>,
    /// Whether to return the attention weights, averaged over heads.
    pub need_weights: bool,
    /// Whether query, key and value are one tensor (one fused projection).
    pub self_attention: bool,
    /// Causal attention: position `i` attends to keys `0..=i` (SDPA's
    /// `is_causal`, aligned top-left); `attn_mask` must then be absent.
    pub causal: bool,
}

impl MultiheadAttention {
    /// PyTorch's order of draws: `out_proj` as a Linear (whose bias is then
    /// zeroed), then `in_proj_weight` Xavier-uniform; `in_proj_bias` zeros.
    pub(crate) fn new(embed_dim: i64, num_heads: i64, dropout: f64, bias: bool, batch_first: bool) -> Result<Self> {
        if embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0 {
            return Err(Error::invalid(format!(
                "multihead_attention: embed_dim ({embed_dim}) must be a positive multiple of num_heads ({num_heads})"
            )));
        }
        if !(0.0..=1.0).contains(&dropout) {
            return Err(Error::invalid(format!("multihead_attention: dropout ({dropout}) must be in [0, 1]")));
        }
        let three = embed_dim
            .checked_mul(3)
            .filter(|t| t.checked_mul(embed_dim).is_some())
            .ok_or_else(|| Error::invalid(format!("multihead_attention: embed_dim ({embed_dim}) is too large")))?;
        let out_proj = Linear::new(embed_dim, embed_dim, bias)?.with_zero_bias()?;
        let bound = (6.0 / (embed_dim + three) as f64).sqrt();
        let in_proj_weight = init::uniform(&[three, embed_dim], bound)?;
        let in_proj_bias = if bias { Some(init::zeros(&[three])?) } else { None };
        Ok(MultiheadAttention { embed_dim, num_heads, dropout, batch_first, in_proj_weight, in_proj_bias, out_proj })
    }

    /// A copy whose tensors are `map(tensor)` (see [`Layer::replicate`]).
    pub(crate) fn mapped(&self, map: &mut super::TensorMap<'_>) -> Result<Self> {
        Ok(MultiheadAttention {
            in_proj_weight: map(&self.in_proj_weight)?,
            in_proj_bias: super::map_opt(map, &self.in_proj_bias)?,
            out_proj: self.out_proj.mapped(map)?,
            ..*self
        })
    }

    fn check(&self, c: &AttentionCall<'_>) -> Result<()> {
        let e = self.embed_dim;
        let (q, k, v) = (c.query.size(), c.key.size(), c.value.size());
        let rank_ok = (q.len() == 2 || q.len() == 3) && k.len() == q.len() && v.len() == q.len();
        if !rank_ok || q.last() != Some(&e) || k.last() != Some(&e) || v.last() != Some(&e) {
            return Err(Error::shape(format!(
                "multihead_attention: query {q:?}, key {k:?} and value {v:?} must all be 3-D (or all 2-D, \
                 unbatched) and end in embed_dim = {e}"
            )));
        }
        let batch_dim = usize::from(q.len() == 3 && !self.batch_first);
        if k[..2] != v[..2] || (q.len() == 3 && q[batch_dim] != k[batch_dim]) {
            return Err(Error::shape(format!(
                "multihead_attention: key {k:?} and value {v:?} must match, and share the batch of query {q:?}"
            )));
        }
        let kind = c.query.f_kind()?;
        if !crate::tensor::dtype::is_floating(kind) || c.key.f_kind()? != kind || c.value.f_kind()? != kind {
            return Err(Error::dtype(format!(
                "multihead_attention: query, key and value must share one floating dtype, got {kind:?}, {:?}, {:?}",
                c.key.f_kind()?,
                c.value.f_kind()?
            )));
        }
        Ok(())
    }

    /// An additive float mask (or none) broadcasting to `(N, H, L, S)`,
    /// from the call's bool or float masks.
    fn merged_mask(&self, c: &AttentionCall<'_>, n: i64, l: i64, s: i64, kind: Kind) -> Result<Option<Tensor>> {
        let additive = |m: &Tensor, what: &str| -> Result<Tensor> {
            match m.f_kind()? {
                Kind::Bool => Ok(crate::tensor::device::zeros_on_device_of(&m.size(), kind, m)?
                    .f_masked_fill(m, f64::NEG_INFINITY)?),
                k if k == kind => Ok(m.shallow_clone()),
                k => Err(Error::dtype(format!("multihead_attention: {what} must be bool or {kind:?}, got {k:?}"))),
            }
        };
        let h = self.num_heads;
        let mut mask = None;
        if c.causal && c.attn_mask.is_some() {
            return Err(Error::invalid("multihead_attention: a causal call takes no attn_mask"));
        }
        if c.causal && (c.key_padding_mask.is_some() || c.need_weights) {
            // SDPA takes is_causal only without a mask, and the weights are
            // computed here: the causal mask is made for them.
            let mut m = crate::tensor::device::empty_on_device_of(&[l, s], kind, c.query)?;
            let _ = m.f_fill_(f64::NEG_INFINITY)?;
            mask = Some(m.f_triu(1)?);
        }
        if let Some(m) = c.attn_mask {
            let size = m.size();
            let m = if size == [l, s] {
                additive(m, "attn_mask")?
            } else if size == [n * h, l, s] {
                additive(m, "attn_mask")?.f_view([n, h, l, s])?
            } else {
                return Err(Error::shape(format!(
                    "multihead_attention: attn_mask of shape {size:?} must be [{l}, {s}] or [{}, {l}, {s}]",
                    n * h
                )));
            };
            mask = Some(m);
        }
        if let Some(m) = c.key_padding_mask {
            let batched = c.query.dim() == 3;
            let want: Vec<i64> = if batched { vec![n, s] } else { vec![s] };
            if m.size() != want {
                return Err(Error::shape(format!(
                    "multihead_attention: key_padding_mask of shape {} must be {want:?}",
                    shape_of(m)
                )));
            }
            let m = additive(m, "key_padding_mask")?.f_view([n, 1, 1, s])?;
            mask = Some(match mask {
                Some(a) => a.f_add(&m)?,
                None => m,
            });
        }
        Ok(mask)
    }

    /// Runs attention; returns the output (shaped as the query) and, with
    /// `need_weights`, the weights averaged over heads `(N, L, S)`.
    pub(crate) fn attend(&self, c: &AttentionCall<'_>, training: bool) -> Result<(Tensor, Option<Tensor>)> {
        self.check(c)?;
        let batched = c.query.dim() == 3;
        // The projections run in PyTorch's layout, (L, N, E) (an unbatched
        // input as (L, 1, E)), so they are the products PyTorch runs (an
        // addmm on a contiguous input, an mm on a transposed one) and count
        // as its do; everything after them runs batch first: (N, L, E).
        let seq_first = |t: &Tensor| -> Result<Tensor> {
            Ok(match (batched, self.batch_first) {
                (false, _) => t.f_unsqueeze(1)?,
                (true, true) => t.f_transpose(0, 1)?,
                (true, false) => t.shallow_clone(),
            })
        };
        let (e, h) = (self.embed_dim, self.num_heads);
        let d = e / h;
        let query = seq_first(c.query)?;
        let (l, n) = (query.size()[0], query.size()[1]);
        let b = self.in_proj_bias.as_ref();
        let (q, k, v) = if c.self_attention {
            let qkv = query.f_linear(&self.in_proj_weight, b)?.f_chunk(3, -1)?;
            (qkv[0].shallow_clone(), qkv[1].shallow_clone(), qkv[2].shallow_clone())
        } else {
            let w = self.in_proj_weight.f_chunk(3, 0)?;
            let bs = b.map(|b| b.f_chunk(3, 0)).transpose()?;
            let part = |x: &Tensor, i: usize| x.f_linear(&w[i], bs.as_ref().map(|b| &b[i]));
            (part(&query, 0)?, part(&seq_first(c.key)?, 1)?, part(&seq_first(c.value)?, 2)?)
        };
        let s = k.size()[0];
        let heads = |t: Tensor, len: i64| t.f_transpose(0, 1)?.f_reshape([n, len, h, d])?.f_transpose(1, 2);
        let (q, k, v) = (heads(q, l)?, heads(k, s)?, heads(v, s)?);
        let mask = self.merged_mask(c, n, l, s, q.f_kind()?)?;
        let p = if training { self.dropout } else { 0.0 };
        let (out, weights) = if c.need_weights {
            let scores = q.f_mul_scalar(1.0 / (d as f64).sqrt())?.f_matmul(&k.f_transpose(-2, -1)?)?;
            let scores = match &mask {
                Some(m) => scores.f_add(m)?,
                None => scores,
            };
            let mut w = scores.f_softmax(-1, None)?;
            if p > 0.0 {
                w = w.f_dropout(p, true)?;
            }
            (w.f_matmul(&v)?, Some(w.f_mean_dim(1, false, None)?))
        } else {
            // SDPA's is_causal with no mask lets CUDA pick its flash kernels.
            let is_causal = c.causal && mask.is_none();
            let mask = if is_causal { None } else { mask };
            (Tensor::f_scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), p, is_causal, None, false)?, None)
        };
        let out = self.out_proj.forward(&out.f_transpose(1, 2)?.f_reshape([n, l, e])?, training)?;
        let out = match (batched, self.batch_first) {
            (false, _) => out.f_squeeze_dim(0)?,
            (true, true) => out,
            (true, false) => out.f_transpose(0, 1)?,
        };
        let weights = match weights {
            Some(w) if !batched => Some(w.f_squeeze_dim(0)?),
            w => w,
        };
        Ok((out, weights))
    }
}

impl Layer for MultiheadAttention {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(self.mapped(map)?))
    }

    fn type_name(&self) -> &'static str {
        "MultiheadAttention"
    }

    fn num_outputs(&self) -> usize {
        2
    }

    /// Self-attention of `x` without masks; the output only.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let call = AttentionCall {
            query: x,
            key: x,
            value: x,
            key_padding_mask: None,
            attn_mask: None,
            need_weights: false,
            self_attention: true,
            causal: false,
        };
        Ok(self.attend(&call, training)?.0)
    }

    /// `[query, key, value, key_padding_mask, attn_mask]` (key defaults to
    /// query, value to key) to `[output, weights averaged over heads]`.
    fn forward_multi(&self, inputs: &[Option<&Tensor>], training: bool) -> Result<Vec<Tensor>> {
        if inputs.is_empty() || inputs.len() > 5 {
            return Err(Error::invalid(format!(
                "multihead_attention: takes 1 to 5 inputs (query, key, value, key_padding_mask, attn_mask), got {}",
                inputs.len()
            )));
        }
        let get = |i: usize| inputs.get(i).copied().flatten();
        let query = get(0).ok_or_else(|| Error::invalid("multihead_attention: the query is required"))?;
        let key = get(1).unwrap_or(query);
        let value = get(2).unwrap_or(key);
        let call = AttentionCall {
            query,
            key,
            value,
            key_padding_mask: get(3),
            attn_mask: get(4),
            need_weights: true,
            self_attention: get(1).is_none() && get(2).is_none(),
            causal: false,
        };
        let (out, weights) = self.attend(&call, training)?;
        Ok(std::iter::once(out).chain(weights).collect())
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        let mut v = vec![("in_proj_weight", &self.in_proj_weight)];
        if let Some(b) = &self.in_proj_bias {
            v.push(("in_proj_bias", b));
        }
        let dotted = |n: &str| if n == "weight" { "out_proj.weight" } else { "out_proj.bias" };
        v.extend(self.out_proj.params().into_iter().map(|(n, t)| (dotted(n), t)));
        v
    }
}

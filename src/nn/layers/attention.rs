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

    /// An additive float mask (or none) in the shapes torch's
    /// `multi_head_attention_forward` merges them to: `(1, L, S)` from a
    /// 2-D `attn_mask` (or the causal mask), `(N * H, L, S)`, and the key
    /// padding mask as `(N * H, 1, S)`, added after the `attn_mask`.
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
            mask = Some(m.f_triu(1)?.f_unsqueeze(0)?);
        }
        if let Some(m) = c.attn_mask {
            let size = m.size();
            let m = if size == [l, s] {
                additive(m, "attn_mask")?.f_unsqueeze(0)?
            } else if size == [n * h, l, s] {
                additive(m, "attn_mask")?
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
            let m = additive(m, "key_padding_mask")?
                .f_view([n, 1, 1, s])?
                .f_expand([n, h, 1, s], false)?
                .f_reshape([n * h, 1, s])?;
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
        // Every product and layout is torch's `multi_head_attention_forward`'s
        // (so the results are its bit for bit, and count as its do): the
        // sequence first, `(L, N, E)` (an unbatched input as `(L, 1, E)`),
        // the heads as `(N * H, L, E / H)` views of the projections.
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
        let (q, k, v) = self.in_projection(c, &query, &seq_first)?;
        let s = k.size()[0];
        let heads = |t: &Tensor, len: i64| t.f_view([len, n * h, d])?.f_transpose(0, 1);
        let (q, k, v) = (heads(&q, l)?, heads(&k, s)?, heads(&v, s)?);
        let mask = self.merged_mask(c, n, l, s, q.f_kind()?)?;
        let p = if training { self.dropout } else { 0.0 };
        let (out, weights) = if c.need_weights {
            let q = q.f_mul_scalar((1.0 / d as f64).sqrt())?;
            let kt = k.f_transpose(-2, -1)?;
            let scores = match &mask {
                Some(m) => m.f_baddbmm(&q, &kt, 1, 1)?,
                None => q.f_bmm(&kt)?,
            };
            let mut w = scores.f_softmax(-1, None)?;
            if p > 0.0 {
                w = w.f_dropout(p, true)?;
            }
            let out = w.f_bmm(&v)?.f_transpose(0, 1)?.f_contiguous()?.f_view([l * n, e])?;
            (out, Some(w.f_view([n, h, l, s])?.f_mean_dim(1, false, None)?))
        } else {
            let mask = match mask {
                Some(m) if m.size()[0] == 1 => Some(m.f_unsqueeze(0)?),
                Some(m) => Some(m.f_view([n, h, -1, s])?),
                None => None,
            };
            let (q, k, v) = (q.f_view([n, h, l, d])?, k.f_view([n, h, s, d])?, v.f_view([n, h, s, d])?);
            // SDPA's is_causal with no mask lets CUDA pick its flash kernels.
            let is_causal = c.causal && mask.is_none();
            let out = Tensor::f_scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), p, is_causal, None, false)?;
            (out.f_permute([2, 0, 1, 3])?.f_contiguous()?.f_view([n * l, e])?, None)
        };
        let out = self.out_proj.forward(&out, training)?.f_view([l, n, e])?;
        let out = match (batched, self.batch_first) {
            (false, _) => out.f_squeeze_dim(1)?,
            (true, true) => out.f_transpose(0, 1)?,
            (true, false) => out,
        };
        let weights = match weights {
            Some(w) if !batched => Some(w.f_squeeze_dim(0)?),
            w => w,
        };
        Ok((out, weights))
    }

    /// q, k and v projected as torch's `_in_projection_packed`: one product
    /// for all three in self-attention, one for k and v when they are one
    /// tensor, else three; a packed product is laid out contiguous per part.
    fn in_projection(
        &self,
        c: &AttentionCall<'_>,
        query: &Tensor,
        seq_first: &dyn Fn(&Tensor) -> Result<Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let e = self.embed_dim;
        let b = self.in_proj_bias.as_ref();
        // The product laid out `(parts, L, N, E)`, contiguous.
        let packed = |x: &Tensor, w: &Tensor, b: Option<&Tensor>, parts: i64| -> Result<Tensor> {
            let proj = x.f_linear(w, b)?.f_unflatten(-1, [parts, e])?.f_unsqueeze(0)?.f_transpose(0, -2)?;
            Ok(proj.f_squeeze_dim(-2)?.f_contiguous()?)
        };
        if c.self_attention {
            let p = packed(query, &self.in_proj_weight, b, 3)?;
            return Ok((p.f_select(0, 0)?, p.f_select(0, 1)?, p.f_select(0, 2)?));
        }
        if std::ptr::eq(c.key, c.value) {
            let w = self.in_proj_weight.f_split_with_sizes([e, 2 * e], 0)?;
            let bs = b.map(|b| b.f_split_with_sizes([e, 2 * e], 0)).transpose()?;
            let q = query.f_linear(&w[0], bs.as_ref().map(|b| &b[0]))?;
            let kv = packed(&seq_first(c.key)?, &w[1], bs.as_ref().map(|b| &b[1]), 2)?;
            return Ok((q, kv.f_select(0, 0)?, kv.f_select(0, 1)?));
        }
        let w = self.in_proj_weight.f_chunk(3, 0)?;
        let bs = b.map(|b| b.f_chunk(3, 0)).transpose()?;
        let part = |x: &Tensor, i: usize| x.f_linear(&w[i], bs.as_ref().map(|b| &b[i]));
        Ok((part(query, 0)?, part(&seq_first(c.key)?, 1)?, part(&seq_first(c.value)?, 2)?))
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
            self_attention: std::ptr::eq(query, key) && std::ptr::eq(key, value),
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

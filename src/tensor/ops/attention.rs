//! Scaled dot-product attention, as `F.scaled_dot_product_attention`.
use super::checks::broadcast_shapes;
use crate::error::{Error, Result};
use tch::{Kind, Tensor};

/// `softmax(q kᵀ · scale + mask) v` over the last two dimensions of
/// `query` (…, L, E), `key` (…, S, E) and `value` (…, S, Ev). `attn_mask`
/// (optional) broadcasts to (…, L, S): bool (true keeps) or additive float.
/// `is_causal` masks keys after each query (no `attn_mask` then).
/// `dropout_p` drops attention weights (training only: pass 0 in eval).
/// `scale` 0 means `1 / sqrt(E)`.
pub fn scaled_dot_product_attention(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: f64,
) -> Result<Tensor> {
    let (q, k, v) = (query.size(), key.size(), value.size());
    if q.len() < 2 || k.len() < 2 || v.len() < 2 {
        return Err(Error::shape(format!("attention: query {q:?}, key {k:?}, value {v:?} need 2 or more dimensions")));
    }
    let last = |s: &[i64], back: usize| s[s.len() - back];
    if last(&q, 1) != last(&k, 1) || last(&k, 2) != last(&v, 2) {
        return Err(Error::shape(format!(
            "attention: query {q:?} and key {k:?} must share the last size, key and value {v:?} the sequence size"
        )));
    }
    let mut scores = broadcast_shapes(&q[..q.len() - 2], &k[..k.len() - 2])?;
    scores.extend([last(&q, 2), last(&k, 2)]);
    broadcast_shapes(&k[..k.len() - 2], &v[..v.len() - 2])?;
    if !(0.0..1.0).contains(&dropout_p) {
        return Err(Error::invalid(format!("attention: dropout_p = {dropout_p}, must be in [0, 1)")));
    }
    if !scale.is_finite() {
        return Err(Error::invalid(format!("attention: scale = {scale}, must be finite")));
    }
    if let Some(m) = attn_mask {
        if is_causal {
            return Err(Error::invalid("attention: give either attn_mask or is_causal, not both"));
        }
        if broadcast_shapes(&m.size(), &scores).map_or(true, |s| s != scores) {
            return Err(Error::shape(format!(
                "attention: attn_mask {:?} does not broadcast to the scores {scores:?}",
                m.size()
            )));
        }
        let kind = m.f_kind()?;
        if kind != Kind::Bool && kind != query.f_kind()? {
            return Err(Error::dtype(format!(
                "attention: attn_mask must be bool or {:?}, got {kind:?}",
                query.f_kind()?
            )));
        }
    }
    let scale = if scale == 0.0 { None } else { Some(scale) };
    Ok(Tensor::f_scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, false)?)
}

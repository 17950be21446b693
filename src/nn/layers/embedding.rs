//! `Embedding`: a lookup table of `num_embeddings` vectors of size `dim`.
use super::{shape_of, Layer};
use crate::error::{Error, ErrorCode, Result};
use crate::nn::init;
use crate::tensor::deferred::{defer, deferring, CheckKind};
use tch::{Kind, Tensor};

/// An embedding index outside the table, found in a training loop.
const INDEX_OUT_OF_RANGE: CheckKind =
    CheckKind { code: ErrorCode::OutOfRange, what: "embedding: an index lay outside the table" };

/// An embedding table, weight drawn from `N(0, 1)` like PyTorch's.
#[derive(Debug)]
pub(crate) struct Embedding {
    num_embeddings: i64,
    padding_idx: Option<i64>,
    weight: Tensor,
}

impl Embedding {
    /// Weight `[num_embeddings, dim]`; with `padding_idx` (negative counts
    /// from the end) that row starts at zero and gets no gradient, as
    /// PyTorch's `Embedding(..., padding_idx=)`.
    pub(crate) fn new(num_embeddings: i64, dim: i64, padding_idx: Option<i64>) -> Result<Embedding> {
        if num_embeddings <= 0 || dim <= 0 {
            return Err(Error::invalid(format!(
                "embedding: num_embeddings ({num_embeddings}) and dim ({dim}) must be positive"
            )));
        }
        let padding_idx = match padding_idx {
            Some(p) if p < -num_embeddings || p >= num_embeddings => {
                return Err(Error::new(
                    ErrorCode::OutOfRange,
                    format!("embedding: padding_idx {p} outside [-{num_embeddings}, {num_embeddings})"),
                ))
            }
            Some(p) if p < 0 => Some(p + num_embeddings),
            other => other,
        };
        // Drawn whole, then the padding row zeroed, as PyTorch does.
        let weight = init::random(&[num_embeddings, dim], move |w| {
            let _ = w.shallow_clone().f_normal_(0.0, 1.0)?;
            if let Some(p) = padding_idx {
                let _ = w.f_select(0, p)?.f_zero_()?;
            }
            Ok(())
        })?;
        Ok(Embedding { num_embeddings, padding_idx, weight })
    }
}

impl Layer for Embedding {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Embedding {
            num_embeddings: self.num_embeddings,
            padding_idx: self.padding_idx,
            weight: map(&self.weight)?,
        }))
    }

    fn type_name(&self) -> &'static str {
        "Embedding"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let kind = x.f_kind()?;
        if kind != Kind::Int64 && kind != Kind::Int {
            return Err(Error::dtype(format!("embedding: indices must be int64 or int32, got {kind:?}")));
        }
        let mut ids = x.shallow_clone();
        if x.numel() > 0 && deferring(x) {
            // Read later by the trainer; meanwhile a bad index reads row 0,
            // so the kernel cannot assert.
            let bad = x.f_lt(0)?.f_logical_or(&x.f_ge(self.num_embeddings)?)?;
            defer(INDEX_OUT_OF_RANGE, &bad)?;
            ids = x.f_masked_fill(&bad, 0)?;
        } else if x.numel() > 0 {
            // An out-of-range index would be a device-side assert on CUDA.
            let lo = x.f_min()?.f_int64_value(&[])?;
            let hi = x.f_max()?.f_int64_value(&[])?;
            if lo < 0 || hi >= self.num_embeddings {
                return Err(Error::new(
                    ErrorCode::OutOfRange,
                    format!(
                        "embedding: indices of shape {} range over [{lo}, {hi}], table has {} rows",
                        shape_of(x),
                        self.num_embeddings
                    ),
                ));
            }
        }
        Ok(Tensor::f_embedding(&self.weight, &ids, self.padding_idx.unwrap_or(-1), false, false)?)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        vec![("weight", &self.weight)]
    }
}

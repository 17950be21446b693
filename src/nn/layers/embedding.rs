//! `Embedding`: a lookup table of `num_embeddings` vectors of size `dim`.
use super::tensor_parallel::{sized, ParallelStyle, SplitDims, TpSlot};
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
    /// Its place in a tensor-parallel model (`tensor_parallel.rs`).
    tp: Option<TpSlot>,
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
        Ok(Embedding { num_embeddings, padding_idx, weight, tp: None })
    }
}

impl Embedding {
    /// The lookup with this rank's rows of the table: the indices it holds
    /// look up their rows, the others give zeros, and the sum over the
    /// ranks is the whole lookup (torch's `RowwiseParallel` on an
    /// Embedding, its `MaskPartial` placement).
    fn rowwise(&self, tp: &TpSlot, ids: &Tensor) -> Result<Tensor> {
        let (first, rows) = tp.span();
        let outside = ids.f_lt(first)?.f_logical_or(&ids.f_ge(first + rows)?)?;
        let local = ids.f_sub_scalar(first)?.f_masked_fill(&outside, 0)?;
        let padding = self.padding_idx.filter(|p| (first..first + rows).contains(p)).map_or(-1, |p| p - first);
        let found = Tensor::f_embedding(&self.weight, &local, padding, false, false)?;
        tp.reduce_out(&found.f_masked_fill(&outside.f_unsqueeze(-1)?, 0.0)?)
    }
}

impl Layer for Embedding {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Embedding {
            num_embeddings: self.num_embeddings,
            padding_idx: self.padding_idx,
            weight: map(&self.weight)?,
            tp: None,
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
        let split = match &self.tp {
            Some(tp) if tp.split("Embedding")? => Some(tp),
            _ => None,
        };
        match split {
            None => Ok(Tensor::f_embedding(&self.weight, &ids, self.padding_idx.unwrap_or(-1), false, false)?),
            Some(tp) if tp.style.is_colwise() => tp.colwise_output(Tensor::f_embedding(
                &self.weight,
                &ids,
                self.padding_idx.unwrap_or(-1),
                false,
                false,
            )?),
            Some(tp) => self.rowwise(tp, &ids),
        }
    }

    fn tensor_parallel(&self) -> Option<&TpSlot> {
        self.tp.as_ref()
    }

    fn set_tensor_parallel(&mut self, slot: Option<TpSlot>) -> Result<SplitDims> {
        let Some(s) = slot else {
            self.tp = None;
            return Ok(Vec::new());
        };
        let (dim, size) = match s.style {
            ParallelStyle::Colwise | ParallelStyle::ColwiseReplicatedOutput => (1, self.weight.size()[1]),
            ParallelStyle::RowwiseReplicatedInput => (0, self.num_embeddings),
            ParallelStyle::Rowwise => {
                return Err(Error::invalid(
                    "tensor parallel: an Embedding's indices are whole on every rank; split its rows with \
                     RowwiseParallel(input_layouts=Replicate())",
                ))
            }
        };
        self.tp = Some(sized(s, size));
        Ok(vec![("weight", Some(dim))])
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        vec![("weight", &self.weight)]
    }
}

//! How a parameter is cut across the ranks of a sharded model: along one
//! dimension, `ceil(size / world)` entries of it per rank as `torch.chunk`
//! cuts (FSDP's padded rows along dimension 0; tensor parallelism's
//! columns or rows of a weight, the last ranks' parts shorter).

/// A sharded parameter's full shape and the cut: dimension `dim`, of which
/// rank `r` holds the entries from `r * per_rank`, `per_rank` of them or
/// fewer at the end: with `padded` (FSDP) each rank's part has `per_rank`
/// entries, zeros past the end; without (tensor parallelism, DTensor's
/// `Shard`) the last ranks' parts are shorter, or empty.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cut {
    pub shape: Vec<i64>,
    pub dim: usize,
    pub per_rank: i64,
    pub padded: bool,
}

/// Entries `first .. first + len` of dimension `dim` of a tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    pub dim: usize,
    pub first: i64,
    pub len: i64,
}

impl Cut {
    /// What rank `rank` holds (padding included).
    pub(crate) fn span(&self, rank: usize) -> Span {
        let first = (rank as i64).saturating_mul(self.per_rank);
        let len = match self.padded {
            true => self.per_rank,
            false => self.per_rank.min(self.shape.get(self.dim).copied().unwrap_or(0) - first).max(0),
        };
        Span { dim: self.dim, first, len }
    }

    /// Whether a tensor of `size` is shaped as rank `rank`'s part (an
    /// optimizer state of the parameter, as the rank holds it).
    pub(crate) fn is_part_shaped(&self, size: &[i64], rank: usize) -> bool {
        let len = self.span(rank).len;
        !self.shape.is_empty()
            && size.len() == self.shape.len()
            && size.iter().zip(&self.shape).enumerate().all(|(d, (s, full))| match d == self.dim {
                true => *s == len,
                false => s == full,
            })
    }
}

//! How a parameter is cut across the ranks of a sharded model: along one
//! dimension, an equal length of it per rank (FSDP's padded rows along
//! dimension 0; tensor parallelism's columns or rows of a weight).

/// A sharded parameter's full shape and the cut: dimension `dim`, of which
/// each rank holds `per_rank` entries (rank `r` from `r * per_rank`; under
/// FSDP the last ranks' parts may reach past the end, padded).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cut {
    pub shape: Vec<i64>,
    pub dim: usize,
    pub per_rank: i64,
}

/// Entries `first .. first + len` of dimension `dim` of a tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    pub dim: usize,
    pub first: i64,
    pub len: i64,
}

impl Cut {
    /// What rank `rank` holds.
    pub(crate) fn span(&self, rank: usize) -> Span {
        Span { dim: self.dim, first: rank as i64 * self.per_rank, len: self.per_rank }
    }

    /// Whether a tensor of `size` is shaped as one rank's part (an
    /// optimizer state of the parameter, as the rank holds it).
    pub(crate) fn is_part_shaped(&self, size: &[i64]) -> bool {
        !self.shape.is_empty()
            && size.len() == self.shape.len()
            && size.iter().zip(&self.shape).enumerate().all(|(d, (s, full))| match d == self.dim {
                true => *s == self.per_rank,
                false => s == full,
            })
    }
}

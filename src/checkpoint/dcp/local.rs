//! A rank-local read of a sharded checkpoint: a rank of a sharded model
//! reads only the rows it holds of each sharded parameter and of the
//! optimizer states shaped as one, so a model bigger than one device
//! resumes without ever being whole on one.
use super::tree::PathItem;
use std::collections::HashMap;

/// What one rank holds of the model's sharded parameters.
pub(crate) struct LocalRows {
    /// Each sharded parameter's full shape and the rows of its padded
    /// dimension 0 each rank holds, by the model's name for it.
    params: HashMap<String, (Vec<i64>, i64)>,
    /// This rank's index among the ranks the parameters are sharded across.
    shard_rank: usize,
    /// The prefix of the model's names in checkpoints (`"model."`).
    prefix: String,
}

/// Rows `first .. first + rows` of a tensor's dimension 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RowRange {
    pub first: i64,
    pub rows: i64,
}

impl LocalRows {
    /// The rows `shard_rank` holds of `params` (name, full shape, rows per
    /// rank); checkpoints name them with `prefix`.
    pub(crate) fn new(params: Vec<(String, Vec<i64>, i64)>, shard_rank: usize, prefix: &str) -> Self {
        LocalRows {
            params: params.into_iter().map(|(n, shape, rows)| (n, (shape, rows))).collect(),
            shard_rank,
            prefix: prefix.to_string(),
        }
    }

    /// The sharded parameter a checkpoint names `key`: the run's prefix
    /// taken off, else the name as it is, else (a checkpoint written under
    /// another prefix) the name without its first dotted components.
    fn param(&self, key: &str) -> Option<&(Vec<i64>, i64)> {
        if let Some(p) = key.strip_prefix(&self.prefix).and_then(|k| self.params.get(k)) {
            return Some(p);
        }
        let mut rest = key;
        loop {
            if let Some(p) = self.params.get(rest) {
                return Some(p);
            }
            rest = rest.split_once('.')?.1;
        }
    }

    /// The rows this rank reads of the tensor at `path` of full `size`: a
    /// model entry (`model` / `state_dict`) that is a sharded parameter,
    /// or an optimizer's per-parameter state of one, of the parameter's
    /// full shape. `None`: the tensor is read whole.
    pub(crate) fn rows_of(&self, path: &[PathItem], size: &[i64]) -> Option<RowRange> {
        let key = match path {
            [PathItem::Key(m), PathItem::Key(fqn)] if m == "model" || m == "state_dict" => fqn,
            [PathItem::Key(o), PathItem::Key(s), PathItem::Key(fqn), PathItem::Key(_)]
                if o.starts_with("optimizer_") && s == "state" =>
            {
                fqn
            }
            _ => return None,
        };
        let (shape, rows) = self.param(key)?;
        (shape.as_slice() == size).then(|| RowRange { first: self.shard_rank as i64 * rows, rows: *rows })
    }
}

//! A rank-local read of a sharded checkpoint: a rank of a sharded model
//! reads only the part it holds of each sharded parameter and of the
//! optimizer states shaped as one, so a model bigger than one device
//! resumes without ever being whole on one.
use super::cut::{Cut, Span};
use super::tree::PathItem;
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};

/// What one rank holds of the model's sharded parameters.
pub(crate) struct LocalRows {
    /// Each sharded parameter's cut, by each of the model's names for it
    /// (a tied parameter has several).
    params: HashMap<String, Cut>,
    /// Every name of the model's state (split or not).
    names: HashSet<String>,
    /// This rank's index among the ranks the parameters are sharded across.
    shard_rank: usize,
    /// The prefix of the model's names in checkpoints (`"model."`).
    prefix: String,
}

impl LocalRows {
    /// The parts `shard_rank` holds of `params` (name and cut; a tied
    /// parameter once per name) of a model whose state has `names`;
    /// checkpoints name them with `prefix`.
    pub(crate) fn new(
        params: Vec<(String, Cut)>,
        names: impl IntoIterator<Item = String>,
        shard_rank: usize,
        prefix: &str,
    ) -> Self {
        LocalRows {
            params: params.into_iter().collect(),
            names: names.into_iter().collect(),
            shard_rank,
            prefix: prefix.to_string(),
        }
    }

    /// The sharded parameter a checkpoint names `key`: the run's prefix
    /// taken off, else the name as it is; only when neither is a name of
    /// the model (a checkpoint written under another prefix, as
    /// `weights_for` reads one), the name without its first dotted
    /// component. `None`: not a sharded parameter.
    fn param(&self, key: &str) -> Option<&Cut> {
        let stripped = key.strip_prefix(&self.prefix).filter(|_| !self.prefix.is_empty());
        if let Some(k) = [stripped, Some(key)].into_iter().flatten().find(|k| self.names.contains(*k)) {
            return self.params.get(k);
        }
        key.split_once('.').and_then(|(_, rest)| self.params.get(rest))
    }

    /// The part this rank reads of the tensor at `path` of full `size`: a
    /// model entry (`model` / `state_dict`) that is a sharded parameter,
    /// or an optimizer's per-parameter state of one, of the parameter's
    /// full shape. `None`: the tensor is read whole. A model entry named
    /// as a sharded parameter but of another shape is refused (another
    /// model's checkpoint), before anything is read.
    pub(crate) fn span_of(&self, path: &[PathItem], size: &[i64]) -> Result<Option<Span>> {
        let (key, model) = match path {
            [PathItem::Key(m), PathItem::Key(fqn)] if m == "model" || m == "state_dict" => (fqn, true),
            [PathItem::Key(o), PathItem::Key(s), PathItem::Key(fqn), PathItem::Key(_)]
                if o.starts_with("optimizer_") && s == "state" =>
            {
                (fqn, false)
            }
            _ => return Ok(None),
        };
        let Some(cut) = self.param(key) else { return Ok(None) };
        if cut.shape.is_empty() {
            return Ok(None);
        }
        if cut.shape.as_slice() != size {
            if model {
                return Err(Error::format(format!(
                    "the checkpoint's {key:?} has shape {size:?}, the model's parameter has {:?}",
                    cut.shape
                )));
            }
            return Ok(None);
        }
        Ok(Some(cut.span(self.shard_rank)))
    }
}

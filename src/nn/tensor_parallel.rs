//! The module tree's side of tensor parallelism: a layer found by its path
//! is split across the ranks (`layers/tensor_parallel.rs`), and the tree
//! says whether any of its layers is.
use super::layers::tensor_parallel::TpSlot;
use super::module::{Module, Node};
use crate::error::{Error, ErrorCode, Result};
use tch::Tensor;

/// A parameter of a split layer: its dotted name, the tensor, and the
/// dimension it splits along (`None`: whole on every rank).
pub(crate) type SplitParam = (String, Tensor, Option<i64>);

impl Module {
    /// Splits the layer at `path` as `slot` says (`None`: whole again) and
    /// returns its parameters with the dimension each splits along.
    pub(crate) fn set_tensor_parallel(&mut self, path: &str, slot: Option<TpSlot>) -> Result<Vec<SplitParam>> {
        let m = self.child_mut(path)?;
        let type_name = m.type_name();
        let Node::Layer(layer) = &mut m.node else {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "tensor parallel: {path:?} is a {type_name}, not a layer; name its Linear and Embedding layers \
                     one by one"
                ),
            ));
        };
        let dims = layer.set_tensor_parallel(slot)?;
        let params = layer.params();
        Ok(dims
            .into_iter()
            .filter_map(|(name, dim)| {
                let (_, t) = params.iter().find(|(n, _)| *n == name)?;
                let full = if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
                Some((full, t.shallow_clone(), dim))
            })
            .collect())
    }

    /// Whether this module or one below it is split across ranks.
    pub(crate) fn is_tensor_parallel(&self) -> bool {
        match &self.node {
            Node::Layer(l) => l.tensor_parallel().is_some(),
            _ => self.child_modules().iter().any(|(_, c)| c.is_tensor_parallel()),
        }
    }
}

//! Built-in leaf layers. Each one holds its parameters and buffers under
//! PyTorch's attribute names and runs with the `f_` (fallible) tch ops.
use crate::error::Result;
use tch::Tensor;

pub mod activation;
pub mod conv;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod group_norm;
pub mod linear;
pub mod norm;
pub mod pool;
pub mod prelu;

pub use activation::Activation;

/// What every built-in layer provides to the module tree.
pub(crate) trait Layer: Send + std::fmt::Debug {
    /// PyTorch's class name, for messages ("Linear", "BatchNorm").
    fn type_name(&self) -> &'static str;
    /// Runs the layer; `training` is the owning module's mode.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor>;
    /// Own parameters in registration order, with their attribute names.
    fn params(&self) -> Vec<(&'static str, &Tensor)> {
        Vec::new()
    }
    /// Own buffers in registration order, with their attribute names.
    fn buffers(&self) -> Vec<(&'static str, &Tensor)> {
        Vec::new()
    }
    /// A copy of the layer whose parameters and buffers are `map(tensor)`
    /// (DataParallel's replicas: `map` moves a tensor to a device, keeping
    /// autograd's link to the original).
    fn replicate(&self, map: &mut TensorMap<'_>) -> Result<Box<dyn Layer>>;
}

/// How [`Layer::replicate`] turns each tensor into the replica's.
pub(crate) type TensorMap<'a> = dyn FnMut(&Tensor) -> Result<Tensor> + 'a;

/// Maps an optional tensor with `map`.
pub(crate) fn map_opt(map: &mut TensorMap<'_>, t: &Option<Tensor>) -> Result<Option<Tensor>> {
    t.as_ref().map(map).transpose()
}

/// Formats a shape for error messages.
pub(crate) fn shape_of(x: &Tensor) -> String {
    format!("{:?}", x.size())
}

//! Built-in leaf layers. Each one holds its parameters and buffers under
//! PyTorch's attribute names and runs with the `f_` (fallible) tch ops.
use crate::error::Result;
use tch::Tensor;

pub mod activation;
pub mod attention;
pub mod conv;
pub mod conv_transpose;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod group_norm;
pub mod instance_norm;
pub mod linear;
pub mod norm;
pub mod pool;
pub mod prelu;
pub(crate) mod rank_ops;
pub mod rnn;
pub(crate) mod sync_batch_norm;
pub mod tensor_parallel;
pub mod transformer;
pub mod upsample;

pub use activation::Activation;

/// What every built-in layer provides to the module tree.
pub(crate) trait Layer: Send + std::fmt::Debug {
    /// PyTorch's class name, for messages ("Linear", "BatchNorm").
    fn type_name(&self) -> &'static str;
    /// Runs the layer; `training` is the owning module's mode.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor>;
    /// Runs the layer on several inputs (`None` where an optional input is
    /// left out) and returns all its results, as PyTorch's `forward` with
    /// extra arguments and tuple results does. By default: one input, one
    /// result.
    fn forward_multi(&self, inputs: &[Option<&Tensor>], training: bool) -> Result<Vec<Tensor>> {
        match inputs {
            [Some(x)] => Ok(vec![self.forward(x, training)?]),
            _ => Err(crate::error::Error::invalid(format!(
                "{} takes exactly one input, got {} (left-out inputs included)",
                self.type_name(),
                inputs.len()
            ))),
        }
    }
    /// How many results `forward_multi` gives (known before it runs).
    fn num_outputs(&self) -> usize {
        1
    }
    /// Own parameters in registration order, with their attribute names
    /// (dotted for the parts of a composite layer: "self_attn.in_proj_weight").
    fn params(&self) -> Vec<(&str, &Tensor)> {
        Vec::new()
    }
    /// Own buffers in registration order, with their attribute names.
    fn buffers(&self) -> Vec<(&str, &Tensor)> {
        Vec::new()
    }
    /// A copy of the layer whose parameters and buffers are `map(tensor)`
    /// (DataParallel's replicas: `map` moves a tensor to a device, keeping
    /// autograd's link to the original).
    fn replicate(&self, map: &mut TensorMap<'_>) -> Result<Box<dyn Layer>>;
    /// Called after the layer's tensors moved to another device or dtype in
    /// place (PyTorch's `_apply`), for a layer that rearranges them there.
    fn after_convert(&self) {}
    /// Sets PyTorch's `track_running_stats` on a `_BatchNorm` and returns
    /// true; other layers return false.
    fn set_track_running_stats(&mut self, _on: bool) -> bool {
        false
    }
    /// Makes a `_BatchNorm` a SyncBatchNorm over the ranks `sum` adds
    /// over (`None`: a plain BatchNorm again) and returns true; other
    /// layers return false.
    fn set_rank_sum(&mut self, _sum: Option<std::sync::Arc<dyn sync_batch_norm::RankSum>>) -> bool {
        false
    }
    /// Splits the layer across the ranks of a tensor-parallel model as
    /// `slot`'s style says (`None`: whole again) and returns the dimension
    /// each of its parameters splits along, by attribute name; the caller
    /// gives the parameters their parts. Only `Linear` and `Embedding`
    /// split (`Unsupported` for the others).
    fn set_tensor_parallel(&mut self, slot: Option<tensor_parallel::TpSlot>) -> Result<tensor_parallel::SplitDims> {
        match slot {
            None => Ok(Vec::new()),
            Some(s) => Err(crate::error::Error::new(
                crate::error::ErrorCode::Unsupported,
                format!(
                    "tensor parallel: a {} layer cannot take {} (Linear and Embedding layers can)",
                    self.type_name(),
                    s.style.name()
                ),
            )),
        }
    }
    /// Its place in a tensor-parallel model, when it has one.
    fn tensor_parallel(&self) -> Option<&tensor_parallel::TpSlot> {
        None
    }
    /// Sets a `_BatchNorm`'s momentum (`None`: torch's cumulative
    /// average) and returns the one it had; other layers return `None`.
    fn swap_momentum(&mut self, _momentum: Option<f64>) -> Option<Option<f64>> {
        None
    }
}

/// How [`Layer::replicate`] turns each tensor into the replica's.
pub(crate) type TensorMap<'a> = dyn FnMut(&Tensor) -> Result<Tensor> + 'a;

/// Maps an optional tensor with `map`.
pub(crate) fn map_opt(map: &mut TensorMap<'_>, t: &Option<Tensor>) -> Result<Option<Tensor>> {
    t.as_ref().map(map).transpose()
}

/// "part.name" for every parameter of a composite layer's `parts` (its
/// PyTorch sub-modules, each under its attribute name), in order.
pub(crate) fn part_names(parts: &[(&str, &dyn Layer)]) -> Vec<String> {
    parts.iter().flat_map(|(p, l)| l.params().into_iter().map(move |(n, _)| format!("{p}.{n}"))).collect()
}

/// Pairs the names from [`part_names`] with the parts' parameters.
pub(crate) fn part_params<'a>(names: &'a [String], parts: &[(&str, &'a dyn Layer)]) -> Vec<(&'a str, &'a Tensor)> {
    let tensors = parts.iter().flat_map(|(_, l)| l.params().into_iter().map(|(_, t)| t));
    names.iter().map(String::as_str).zip(tensors).collect()
}

/// Formats a shape for error messages.
pub(crate) fn shape_of(x: &Tensor) -> String {
    format!("{:?}", x.size())
}

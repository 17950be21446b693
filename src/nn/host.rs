//! Modules whose forward pass the host writes (a C callback), and
//! parameters and buffers the host registers on any module: the way a
//! custom `nn.Module` is written outside Python.
use super::module::{is_floating, memory_overlaps, param_identity, Module, Slot};
use crate::error::{Error, Result};
use tch::Tensor;

/// A forward pass written by the host. It runs with the module it belongs
/// to (its registered tensors and children) and the inputs (`None` for a
/// left-out one), and returns exactly [`HostForward::num_outputs`] tensors.
pub trait HostForward: Send + Sync + std::fmt::Debug {
    /// How many tensors the forward returns (known before it runs).
    fn num_outputs(&self) -> usize;
    /// Runs the forward pass.
    fn forward(&self, module: &Module, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>>;
}

impl Module {
    /// A named container whose forward pass is `forward`: children are
    /// added with `add`, tensors with `register_parameter` /
    /// `register_buffer`, and `forward` reaches them through the module.
    pub fn host(forward: std::sync::Arc<dyn HostForward>) -> Module {
        let mut m = Module::named();
        m.host = Some(forward);
        m
    }

    /// `register_parameter(name, tensor)`: a trainable leaf sharing
    /// `tensor`'s storage (detached, `requires_grad`), listed in the
    /// state_dict after the module's own parameters, moved, synced by DDP
    /// and trained by optimizers built on the model afterwards. A
    /// TorchScript module refuses (`Unsupported`): its tensors are its
    /// script's, which `save_torchscript` writes. A tensor that already is
    /// a parameter of this module's tree is tied (see
    /// [`Module::register_parameter_at`]).
    pub fn register_parameter(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        self.register_parameter_at("", name, tensor)
    }

    /// `register_buffer(name, tensor)`: state that is not trained (running
    /// statistics, masks, counters), sharing `tensor`'s storage (detached),
    /// listed in the state_dict after the module's own buffers, moved and
    /// broadcast by DDP. A tensor that already is a buffer of this
    /// module's tree is tied, as for parameters.
    pub fn register_buffer(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        self.register_buffer_at("", name, tensor)
    }

    /// `register_parameter` on the descendant at the dotted `path` ("" for
    /// this module). When `tensor` already is a parameter anywhere in this
    /// module's tree (the same storage address, shape, strides and dtype:
    /// the host registered the same tensor twice, or one it read from the
    /// model), the new name holds that very parameter, as PyTorch's one
    /// `Parameter` under two names: `parameters()` lists it once (under
    /// its first name), the state_dict under both, and moves, casts and
    /// loads keep both names one tensor. A tensor that shares a
    /// parameter's or buffer's memory otherwise (another view of it, or a
    /// buffer registered as a parameter) is refused (`InvalidArgument`).
    pub fn register_parameter_at(&mut self, path: &str, name: &str, tensor: &Tensor) -> Result<()> {
        self.register_at(path, name, tensor, Slot::Param)
    }

    /// `register_buffer` on the descendant at `path`, tying a tensor that
    /// already is a buffer of this module's tree as
    /// [`Module::register_parameter_at`] ties parameters.
    pub fn register_buffer_at(&mut self, path: &str, name: &str, tensor: &Tensor) -> Result<()> {
        self.register_at(path, name, tensor, Slot::Buffer)
    }

    fn register_at(&mut self, path: &str, name: &str, tensor: &Tensor, slot: Slot) -> Result<()> {
        self.child(path)?.check_new_name(name)?;
        let kind = tensor.f_kind()?;
        if slot == Slot::Param && !is_floating(kind) {
            return Err(Error::dtype(format!(
                "register_parameter: {name:?} is {kind:?}; parameters are floating-point"
            )));
        }
        let t = match self.tied_tensor(tensor, slot)? {
            Some(existing) => existing,
            None if slot == Slot::Param => tensor.f_detach()?.f_set_requires_grad(true)?,
            None => tensor.f_detach()?,
        };
        self.child_mut(path)?.own.push((name.to_owned(), t, slot));
        Ok(())
    }

    /// The tensor of this module's tree that `tensor` is, in `slot` (a
    /// shallow clone: the same tensor); `None` when `tensor` is none of
    /// them. Sharing memory with one without being it (a view with another
    /// start, shape, strides or dtype), or being one in the other slot, is
    /// refused: the two would be updated and loaded as two tensors.
    fn tied_tensor(&self, tensor: &Tensor, slot: Slot) -> Result<Option<Tensor>> {
        let Some(id) = param_identity(tensor) else { return Ok(None) };
        let mut same: Option<(String, Tensor, Slot)> = None;
        let mut overlapping: Option<(String, Slot)> = None;
        self.visit("", &mut |n, t, s| match param_identity(t) {
            Some(other) if other == id && same.is_none() => same = Some((n, t.shallow_clone(), s)),
            Some(other) if other != id && overlapping.is_none() && memory_overlaps(&other, &id) => {
                overlapping = Some((n, s))
            }
            _ => {}
        });
        let what = |k: Slot| if k == Slot::Param { "parameter" } else { "buffer" };
        if let Some((existing, s)) = overlapping {
            return Err(Error::invalid(format!(
                "register_{}: the tensor is another view (start, shape, strides or dtype) of the memory of the {} \
                 {existing:?} of this model; register that tensor itself to tie the two names",
                what(slot),
                what(s)
            )));
        }
        let Some((existing, t, s)) = same else { return Ok(None) };
        if s != slot {
            return Err(Error::invalid(format!(
                "register_{}: the tensor is the {} {existing:?} of this model; \
                 a tensor is a parameter or a buffer, not both",
                what(slot),
                what(s)
            )));
        }
        Ok(Some(t))
    }

    fn check_new_name(&self, name: &str) -> Result<()> {
        if matches!(self.node, super::module::Node::Script(_) | super::module::Node::Exported(_)) {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                "a TorchScript or exported module's tensors are its program's: register them in Python before exporting",
            ));
        }
        if name.is_empty() || name.contains('.') {
            return Err(Error::invalid(format!("register: name {name:?} must be non-empty and contain no '.'")));
        }
        let mut taken = false;
        self.visit_direct(&mut |n, _, _| taken |= n == name);
        if taken || self.child_names().iter().any(|c| c == name) {
            return Err(Error::invalid(format!(
                "register: the {} already has a parameter, buffer or child named {name:?}",
                self.type_name()
            )));
        }
        Ok(())
    }
}

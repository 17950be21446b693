//! Modules whose forward pass the host writes (a C callback), and
//! parameters and buffers the host registers on any module: the way a
//! custom `nn.Module` is written outside Python.
use super::module::{is_floating, Module, Slot};
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
    /// script's, which `save_torchscript` writes.
    pub fn register_parameter(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        self.check_new_name(name)?;
        let kind = tensor.f_kind()?;
        if !is_floating(kind) {
            return Err(Error::dtype(format!(
                "register_parameter: {name:?} is {kind:?}; parameters are floating-point"
            )));
        }
        let p = tensor.f_detach()?.f_set_requires_grad(true)?;
        self.own.push((name.to_owned(), p, Slot::Param));
        Ok(())
    }

    /// `register_buffer(name, tensor)`: state that is not trained (running
    /// statistics, masks, counters), sharing `tensor`'s storage (detached),
    /// listed in the state_dict after the module's own buffers, moved and
    /// broadcast by DDP.
    pub fn register_buffer(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        self.check_new_name(name)?;
        let b = tensor.f_detach()?;
        self.own.push((name.to_owned(), b, Slot::Buffer));
        Ok(())
    }

    fn check_new_name(&self, name: &str) -> Result<()> {
        if matches!(self.node, super::module::Node::Script(_)) {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                "a TorchScript module's tensors are its script's: register them in Python before scripting",
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

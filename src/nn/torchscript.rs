//! TorchScript modules exported from Python, run and trained through
//! `tch::CModule`, with PyTorch's dotted parameter names.
use super::module::{check_device, is_floating, Module};
use crate::error::{Error, Result, ResultExt};
use std::path::{Path, PathBuf};
use tch::{CModule, Device, Kind, Tensor};

/// A loaded TorchScript module and its parameters (the very tensors the
/// script uses, so gradients reach them).
pub(crate) struct ScriptModule {
    module: CModule,
    params: Vec<(String, Tensor)>,
    source: PathBuf,
}

impl std::fmt::Debug for ScriptModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptModule").field("source", &self.source).field("parameters", &self.params.len()).finish()
    }
}

impl ScriptModule {
    fn refresh(&mut self) -> Result<()> {
        self.params = self.module.named_parameters()?;
        Ok(())
    }

    pub(crate) fn params(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.params.iter().map(|(n, t)| (n.as_str(), t))
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.module.forward_ts(&[x]).ctx(format!("TorchScript forward ({})", self.source.display()))
    }

    pub(crate) fn set_training(&mut self, on: bool) -> Result<()> {
        if on {
            self.module.f_set_train()?;
        } else {
            self.module.f_set_eval()?;
        }
        Ok(())
    }

    /// libtorch's `Module::to`: casts every parameter and buffer (integer
    /// buffers included) when a kind is given.
    pub(crate) fn to(&mut self, device: Option<Device>, kind: Option<Kind>) -> Result<()> {
        let first = self.params.first().map(|(_, t)| (t.device(), t.kind()));
        let (cur_dev, cur_kind) = first.unwrap_or((Device::Cpu, Kind::Float));
        let device = device.unwrap_or(cur_dev);
        let kind = kind.unwrap_or(cur_kind);
        if !is_floating(kind) {
            return Err(Error::dtype(format!("TorchScript module: cannot cast to {kind:?}")));
        }
        check_device(device)?;
        let module = &mut self.module;
        // `CModule::to` has no fallible variant; it panics on a libtorch error.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| module.to(device, kind, false))).map_err(|_| {
            Error::new(
                crate::error::ErrorCode::Torch,
                format!("TorchScript module: moving to {device:?} / {kind:?} failed"),
            )
        })?;
        self.refresh()
    }
}

impl Module {
    /// Loads a TorchScript file saved from Python (`torch.jit.save`) onto
    /// `device`. Parameters keep PyTorch's dotted names ("l1.weight");
    /// `forward` runs the script's forward; `set_training` toggles its
    /// train/eval mode. The module starts in training mode. Buffers of the
    /// script are not visible (tch exposes only parameters).
    pub fn load_torchscript(path: &Path, device: Device) -> Result<Module> {
        check_device(device)?;
        if !path.is_file() {
            return Err(Error::io(format!("TorchScript file {} not found", path.display())));
        }
        let module = CModule::load_on_device(path, device).map_err(|e| {
            Error::format(format!("{} is not a loadable TorchScript file: {}", path.display(), Error::from(e).message))
        })?;
        let mut script = ScriptModule { module, params: Vec::new(), source: path.to_path_buf() };
        script.refresh()?;
        script.set_training(true)?;
        Ok(Module::from_script(script))
    }
}

//! DataParallel's replicas (Lightning's `dp`, the strategy in `dp.rs`):
//! one process, the model replicated on every device, each batch split
//! along dimension 0, the step run once per chunk with the replica of the
//! chunk's device, losses averaged and predictions gathered on the first
//! device (as `torch.nn.DataParallel`'s scatter / replicate / gather).
//!
//! The replicas run one after the other on the trainer's thread; on CUDA
//! their kernels are queued asynchronously, so the devices still overlap.
use crate::error::{Error, ErrorCode, Result};
use crate::nn::Module;
use crate::tensor::device::{self as devices, Device};
use crate::trainer::{LightningModule, SharedModel};
use tch::Tensor;

/// DP state of a run.
pub(crate) struct DpRun {
    /// The devices; the first holds the model and receives the outputs.
    devices: Vec<Device>,
    /// The module's model, set by [`DpRun::setup_model`].
    model: Option<SharedModel>,
}

impl DpRun {
    /// DP over `devices` (at least one).
    pub fn new(devices: Vec<Device>) -> DpRun {
        DpRun { devices, model: None }
    }

    /// Takes the module's model and checks it can be replicated.
    pub fn setup_model(&mut self, module: &dyn LightningModule) -> Result<()> {
        let Some(model) = module.model() else {
            return Err(Error::state(
                "dp needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        if model.lock().unwrap_or_else(|p| p.into_inner()).is_tensor_parallel() {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                "dp of a tensor-parallel model: its replicas would compute with one rank's parts as whole layers; \
                 unshard and free its fulmen_tensor_parallel wrapper first",
            ));
        }
        if let Some(device) = self.devices.get(1) {
            let m = model.lock().unwrap_or_else(|p| p.into_inner());
            tch::no_grad(|| m.replicate(*device))?;
        }
        self.model = Some(model);
        Ok(())
    }

    /// Runs `step` once per chunk of `batch`; chunk `j` (on device `j`) runs
    /// with the model's replica for device `j` in place of the model.
    pub fn run<T>(&self, batch: &[Tensor], step: &mut dyn FnMut(&[Tensor]) -> Result<T>) -> Result<Vec<T>> {
        let model = self.model.as_ref().ok_or_else(|| Error::state("dp: the model was not set up"))?;
        let chunks = scatter(batch, &self.devices)?;
        let mut out = Vec::with_capacity(chunks.len());
        for (j, chunk) in chunks.iter().enumerate() {
            if j == 0 {
                out.push(step(chunk)?);
                continue;
            }
            let replica = model.lock().unwrap_or_else(|p| p.into_inner()).replicate(self.devices[j])?;
            let swap = Swapped::new(model, replica);
            let r = step(chunk);
            drop(swap);
            out.push(r.map_err(|e| e.context(format!("dp replica on {:?}", self.devices[j])))?);
        }
        Ok(out)
    }

    /// The mean of the chunks' losses, on the first device.
    pub fn gather_loss(&self, losses: Vec<Tensor>) -> Result<Tensor> {
        if losses.len() == 1 {
            return Ok(losses.into_iter().next().unwrap_or_default());
        }
        let root = self.devices[0];
        let on_root = losses
            .iter()
            .map(|l| {
                if l.numel() != 1 {
                    return Err(Error::shape(format!("dp: a training_step returned a loss of shape {:?}", l.size())));
                }
                devices::to_device(&l.f_reshape([])?, root, false)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::f_stack(&on_root, 0)?.f_mean(None)?)
    }

    /// The chunks' predictions concatenated along dimension 0 on the first
    /// device; `None` when no chunk produced one.
    pub fn gather_outputs(&self, outputs: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
        if outputs.len() == 1 {
            return Ok(outputs.into_iter().next().flatten());
        }
        let given: Vec<Tensor> = outputs.iter().flatten().map(Tensor::shallow_clone).collect();
        if given.is_empty() {
            return Ok(None);
        }
        if given.len() != outputs.len() {
            return Err(Error::invalid("dp: predict_step returned an output for some chunks of a batch but not all"));
        }
        let root = self.devices[0];
        let on_root = given.iter().map(|t| devices::to_device(t, root, false)).collect::<Result<Vec<_>>>()?;
        Ok(Some(Tensor::f_cat(&on_root, 0).map_err(|e| {
            Error::new(ErrorCode::ShapeMismatch, format!("dp: predictions of the chunks cannot be concatenated: {e}"))
        })?))
    }
}

/// Splits every tensor of `batch` along dimension 0 into at most
/// `devices.len()` chunks (`Tensor.chunk`'s sizes) and moves chunk `j` to
/// device `j`; 0-d tensors are copied to every chunk.
pub(crate) fn scatter(batch: &[Tensor], devices: &[Device]) -> Result<Vec<Vec<Tensor>>> {
    let sizes: Vec<i64> = batch.iter().filter(|t| t.dim() > 0).map(|t| t.size()[0]).collect();
    let Some(&n) = sizes.first() else {
        return Err(Error::shape("dp splits a batch along dimension 0, but it has no tensor with a dimension"));
    };
    if sizes.iter().any(|s| *s != n) {
        return Err(Error::shape(format!(
            "dp splits every batch tensor along dimension 0, but their sizes differ: {sizes:?}"
        )));
    }
    if n == 0 {
        return Err(Error::shape("dp cannot split an empty batch"));
    }
    let parts = devices.len().min(n as usize) as i64;
    let split = batch
        .iter()
        .map(|t| Ok(if t.dim() > 0 { t.f_chunk(parts, 0)? } else { Vec::new() }))
        .collect::<Result<Vec<Vec<Tensor>>>>()?;
    let count = split.iter().map(Vec::len).max().unwrap_or(1);
    (0..count)
        .map(|j| {
            batch
                .iter()
                .zip(&split)
                .map(|(t, parts)| {
                    let piece = if t.dim() > 0 { &parts[j] } else { t };
                    devices::to_device(piece, devices[j], false)
                })
                .collect()
        })
        .collect()
}

/// A replica swapped into the shared model; the model comes back on drop
/// (also when the step fails or panics).
struct Swapped<'a> {
    model: &'a SharedModel,
    other: Module,
}

impl<'a> Swapped<'a> {
    fn new(model: &'a SharedModel, mut replica: Module) -> Swapped<'a> {
        std::mem::swap(&mut *model.lock().unwrap_or_else(|p| p.into_inner()), &mut replica);
        Swapped { model, other: replica }
    }
}

impl Drop for Swapped<'_> {
    fn drop(&mut self) {
        std::mem::swap(&mut *self.model.lock().unwrap_or_else(|p| p.into_inner()), &mut self.other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn scatter_splits_like_chunk_and_copies_scalars() {
        let x = Tensor::arange(10, (tch::Kind::Float, tch::Device::Cpu)).reshape([5, 2]);
        let y = Tensor::arange(5, (tch::Kind::Int64, tch::Device::Cpu));
        let s = Tensor::from(3.0f32);
        let parts = scatter(&[x, y, s], &[Device::Cpu; 4]).unwrap();
        let sizes: Vec<i64> = parts.iter().map(|p| p[0].size()[0]).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        assert_eq!(parts[2][1].int64_value(&[0]), 4);
        assert_eq!(parts[1][2].double_value(&[]), 3.0);
        let bad = scatter(
            &[Tensor::zeros([3], tch::kind::FLOAT_CPU), Tensor::zeros([4], tch::kind::FLOAT_CPU)],
            &[Device::Cpu, Device::Cpu],
        );
        assert_eq!(bad.unwrap_err().code, ErrorCode::ShapeMismatch);
    }

    #[test]
    fn replicas_send_gradients_to_the_model_and_are_swapped_back() {
        let mut seq = Module::sequential();
        seq.push(Module::linear(3, 2, true).unwrap()).unwrap();
        let model: SharedModel = Arc::new(Mutex::new(seq));
        let dp = DpRun { devices: vec![Device::Cpu; 2], model: Some(model.clone()) };
        let x = Tensor::ones([4, 3], tch::kind::FLOAT_CPU);
        let mut seen = Vec::new();
        let losses = dp
            .run(&[x.shallow_clone()], &mut |chunk| {
                let m = model.lock().unwrap();
                seen.push(chunk[0].size()[0]);
                Ok(m.forward(&chunk[0])?.sum(None))
            })
            .unwrap();
        assert_eq!(seen, vec![2, 2]);
        dp.gather_loss(losses).unwrap().backward();
        // d(mean of two sums)/dW: each chunk contributes 2 rows of ones, halved.
        let w = model.lock().unwrap().parameters()[0].grad();
        assert!((w.double_value(&[0, 0]) - 2.0).abs() < 1e-6, "{w:?}");
        let weight_ptr = model.lock().unwrap().parameters()[0].data_ptr();
        let mut calls = 0;
        let failing = dp.run(&[x], &mut |_| -> Result<()> {
            calls += 1;
            if calls == 2 {
                return Err(Error::invalid("step failed"));
            }
            Ok(())
        });
        assert!(failing.unwrap_err().message.contains("dp replica"));
        let m = model.lock().unwrap();
        assert_eq!(m.parameters()[0].data_ptr(), weight_ptr);
        assert_eq!(m.parameters()[0].grad().double_value(&[0, 0]), 2.0);
    }
}

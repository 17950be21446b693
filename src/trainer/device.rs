//! The accelerator, device and precision of a run: chosen from the
//! options (Lightning's `accelerator`, `devices`, `precision`), applied to
//! the model and to every batch.
use super::module::LightningModule;
use crate::accelerators::Accelerator;
use crate::error::{Error, Result};
use crate::precision::{AutocastGuard, PrecisionPlugin};
use crate::tensor::device::{Device, DeviceType};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tch::Tensor;

/// Where and how a run computes.
pub struct Placement {
    /// The accelerator.
    pub accelerator: Arc<dyn Accelerator>,
    /// The one device of this run.
    pub device: Device,
    /// The precision plugin.
    pub precision: PrecisionPlugin,
    /// Set by the run's first teardown: the device is released once.
    torn_down: AtomicBool,
}

/// Checks `precision` against what the accelerator computes in (its
/// `supports_dtype`), and drops the loss scaler of `16-mixed` where float16
/// needs none (unless the options configured one).
fn capable(acc: &dyn Accelerator, precision: PrecisionPlugin, scaler_configured: bool) -> Result<PrecisionPlugin> {
    let p = precision.precision();
    acc.check_precision(&p.to_string())?;
    let kinds = [Some(p.param_kind()), p.autocast_kind()];
    for kind in kinds.into_iter().flatten() {
        if !acc.supports_dtype(kind)? {
            return Err(crate::error::Error::new(
                crate::error::ErrorCode::Unsupported,
                format!(
                    "precision {p} computes in {} there, which accelerator {:?} does not support (its supports_dtype)",
                    crate::tensor::DType::from_kind(kind).map(|d| d.name()).unwrap_or("that dtype"),
                    acc.name()
                ),
            ));
        }
    }
    if precision.scaler().is_some() && !scaler_configured && !acc.fp16_needs_loss_scaling()? {
        return Ok(PrecisionPlugin::without_scaler(p));
    }
    Ok(precision)
}

impl Placement {
    /// The run's placement on `device` of `acc` with `precision` (and
    /// loss-scaler settings for `16-mixed`); sets the device up.
    pub fn on(
        acc: Arc<dyn Accelerator>,
        device: Device,
        precision: &str,
        grad_scaler: Option<crate::precision::GradScalerSettings>,
    ) -> Result<Placement> {
        let precision = match grad_scaler {
            Some(settings) => PrecisionPlugin::with_scaler(
                crate::precision::Precision::parse(precision)?,
                crate::precision::GradScaler::with_settings(settings)?,
            )?,
            None => PrecisionPlugin::parse(precision)?,
        };
        if let Device::Other(DeviceType::Meta, _) = device {
            return Err(crate::error::Error::new(
                crate::error::ErrorCode::Unsupported,
                "the meta device holds no data: a run cannot compute there",
            ));
        }
        if let Device::Other(..) = device {
            // A device of a type tch cannot name (a vendor's backend): it
            // must be registered, and becomes this thread's current one
            // before the accelerator's own setup.
            device.check_available()?;
            device.set_current()?;
        }
        let mut precision = capable(&*acc, precision, grad_scaler.is_some())?;
        acc.setup_device(device)?;
        precision.place_on(device)?;
        Ok(Placement { accelerator: acc, device, precision, torn_down: AtomicBool::new(false) })
    }

    /// Moves the module's model to the device (materialized first where it
    /// was built on the meta device) and casts it for `*-true` precisions;
    /// on failure the device is torn down again.
    pub fn prepare_model(&self, module: &dyn LightningModule) -> Result<()> {
        self.move_model(module).map_err(|e| self.teardown_after(module, e))
    }

    fn move_model(&self, module: &dyn LightningModule) -> Result<()> {
        if let Some(m) = module.model() {
            let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
            // A model built on the meta device gets its values first.
            m.materialize().map_err(|e| e.context("materializing the model built on the meta device"))?;
            m.to_device(self.device)?;
        }
        self.cast(module)
    }

    /// Casts the module's model for `*-true` precisions where it is (FSDP
    /// then moves it to the device unit by unit as it shards it); on
    /// failure the device is torn down again.
    pub fn cast_model(&self, module: &dyn LightningModule) -> Result<()> {
        self.cast(module).map_err(|e| self.teardown_after(module, e))
    }

    fn cast(&self, module: &dyn LightningModule) -> Result<()> {
        if let Some(m) = module.model() {
            if self.precision.precision().casts_model() {
                m.lock().unwrap_or_else(|p| p.into_inner()).to_kind(self.precision.param_kind())?;
            }
        }
        Ok(())
    }

    /// Ends the device's pending lazy graph and starts it (XLA's step
    /// marker; nothing elsewhere). Every rank calls it before rank 0 alone
    /// reads the model for a checkpoint: a graph holding XLA's collectives
    /// must run on every rank, or the reading rank waits for the others
    /// (Lightning's XLAStrategy marks a step before saving too).
    pub fn cut_graph(&self) -> Result<()> {
        self.accelerator.mark_step(self.device)
    }

    /// The batch on the device, floating inputs cast for `*-true`.
    pub fn prepare_batch(&self, batch: Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.accelerator.mark_step(self.device)?;
        let casts = self.precision.precision().casts_model();
        if self.device == Device::Cpu && !casts {
            return Ok(batch);
        }
        batch
            .into_iter()
            .map(|t| {
                let t = if Device::of(&t)? == self.device {
                    t
                } else {
                    // non_blocking to a GPU, as Lightning's batch_to: a copy from
                    // pinned memory overlaps, one from pageable memory is synchronous.
                    let non_blocking = self.device.is_cuda();
                    crate::tensor::device::to_device(&t, self.device, non_blocking)?
                };
                if casts {
                    self.precision.convert_input(&t)
                } else {
                    Ok(t)
                }
            })
            .collect()
    }

    /// Autocast for `*-mixed` precisions around a step, else nothing.
    pub fn forward_context(&self) -> Result<Option<AutocastGuard>> {
        self.precision.forward_context(self.device)
    }

    /// Lightning's `strategy.teardown`: the model back on the CPU, then the
    /// device released (`accelerator.teardown`). Once per run: a later call
    /// (a failed run after a failing teardown) does nothing.
    pub fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        if self.torn_down.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let moved = self.model_to_cpu(module);
        moved.and(self.accelerator.teardown())
    }

    /// Tears down after the run failed with `err`: `err` stays the error
    /// reported (its code and message first), a failing teardown's own
    /// error is attached to it rather than hiding it.
    pub fn teardown_after(&self, module: &dyn LightningModule, err: Error) -> Error {
        match self.teardown(module) {
            Ok(()) => err,
            Err(later) => err.then_failed("the teardown", &later),
        }
    }

    /// The module's model back on the CPU, its dtype kept (Lightning's
    /// `lightning_module.cpu()` at teardown), so that the host reads and
    /// feeds it with CPU tensors after the run.
    fn model_to_cpu(&self, module: &dyn LightningModule) -> Result<()> {
        if self.device == Device::Cpu {
            return Ok(());
        }
        // The last step's graph runs before its results are copied.
        self.accelerator.mark_step(self.device)?;
        if let Some(m) = module.model() {
            m.lock().unwrap_or_else(|p| p.into_inner()).to_device(Device::Cpu)?;
        }
        Ok(())
    }
}

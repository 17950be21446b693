//! The precision plugin the trainer calls around a step (Lightning's
//! `Precision` / `MixedPrecision` / `HalfPrecision` / `DoublePrecision`).
use super::autocast::AutocastGuard;
use super::grad_scaler::{GradScaler, StepMade};
use super::mode::Precision;
use crate::error::{Error, ErrorCode, Result};
use crate::optim::Optimizer;
use crate::tensor::device::Device;
use crate::tensor::device::DeviceType;
use crate::tensor::dtype::is_floating;
use crate::trainer::ClipAlgorithm;
use tch::{Kind, Tensor};

/// The optimizer index the single-optimizer methods use with the scaler.
const DEFAULT_OPTIMIZER: usize = 0;

/// Ties a [`Precision`] to what it needs at each step: autocast regions,
/// input conversion, and for `16-mixed` a [`GradScaler`].
///
/// The trainer's strategy calls it as Lightning's strategies call their
/// precision plugin: `convert_input` the batch; forward inside
/// `forward_context`; [`PrecisionPlugin::backward`] (scaled for
/// `16-mixed`); [`PrecisionPlugin::unscale_gradients`] before the
/// `on_before_optimizer_step` hook and [`PrecisionPlugin::clip_gradients`];
/// [`PrecisionPlugin::optimizer_step`] steps every optimizer whose
/// gradients are finite and updates the scale. `unscale_and_check` /
/// `should_skip_step` / `update` do the same for one optimizer, for Rust
/// programs that own their loop.
#[derive(Debug)]
pub struct PrecisionPlugin {
    precision: Precision,
    scaler: Option<GradScaler>,
}

/// The autocast device type of a device: its own type, where libtorch has
/// autocast for it.
fn autocast_device(device: Device) -> Result<DeviceType> {
    let kind = device.kind();
    if kind.in_tch() || super::autocast::is_available(kind) {
        Ok(kind)
    } else {
        Err(Error::new(
            ErrorCode::Unsupported,
            format!("mixed precision: libtorch has no autocast for {} devices", kind.name()),
        ))
    }
}

/// Casts a floating tensor to `kind`; other tensors are returned as they are.
fn cast_floating(tensor: &Tensor, kind: Kind) -> Result<Tensor> {
    if is_floating(tensor.kind()) && tensor.kind() != kind {
        Ok(tensor.f_to_kind(kind)?)
    } else {
        Ok(tensor.shallow_clone())
    }
}

impl PrecisionPlugin {
    /// The plugin for `precision`; `16-mixed` gets a scaler with torch's
    /// defaults.
    pub fn new(precision: Precision) -> Self {
        let scaler = precision.uses_grad_scaler().then(GradScaler::new);
        PrecisionPlugin { precision, scaler }
    }

    /// The plugin for a precision string (see [`Precision::parse`]).
    pub fn parse(precision: &str) -> Result<Self> {
        Ok(Self::new(Precision::parse(precision)?))
    }

    /// The plugin for `precision` without a loss scaler (`16-mixed` on a
    /// device whose float16 needs none).
    pub fn without_scaler(precision: Precision) -> Self {
        PrecisionPlugin { precision, scaler: None }
    }

    /// `16-mixed` with a custom scaler; other precisions take none.
    pub fn with_scaler(precision: Precision, scaler: GradScaler) -> Result<Self> {
        if !precision.uses_grad_scaler() {
            return Err(Error::invalid(format!("precision {precision} does not use loss scaling; only 16-mixed does")));
        }
        Ok(PrecisionPlugin { precision, scaler: Some(scaler) })
    }

    /// The precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The loss scaler (`16-mixed` only).
    pub fn scaler(&self) -> Option<&GradScaler> {
        self.scaler.as_ref()
    }

    /// The loss scaler, mutable: for several optimizers, call its
    /// `unscale` / `should_skip_step` with each optimizer's index.
    pub fn scaler_mut(&mut self) -> Option<&mut GradScaler> {
        self.scaler.as_mut()
    }

    /// The dtype the trainer casts the model's floating parameters to
    /// (`nn::VarStore::set_kind`); fp32 for the mixed precisions.
    pub fn param_kind(&self) -> Kind {
        self.precision.param_kind()
    }

    /// For the mixed precisions, an autocast region on `device`'s type to
    /// hold while running forward (and the loss); `None` otherwise.
    pub fn forward_context(&self, device: Device) -> Result<Option<AutocastGuard>> {
        match self.precision.autocast_kind() {
            Some(kind) => Ok(Some(AutocastGuard::enter(autocast_device(device)?, kind)?)),
            None => Ok(None),
        }
    }

    /// Casts a floating input to the parameter dtype for `64-true`,
    /// `16-true` and `bf16-true`; unchanged otherwise (autocast casts inside
    /// the mixed precisions). Non-floating tensors are never cast.
    pub fn convert_input(&self, input: &Tensor) -> Result<Tensor> {
        if self.precision.casts_model() {
            cast_floating(input, self.param_kind())
        } else {
            Ok(input.shallow_clone())
        }
    }

    /// Casts a floating output back to float32 (Lightning Fabric's
    /// `convert_output`); non-floating tensors are unchanged.
    pub fn convert_output(&self, output: &Tensor) -> Result<Tensor> {
        if self.precision == Precision::Full {
            return Ok(output.shallow_clone());
        }
        cast_floating(output, Kind::Float)
    }

    /// The loss to call backward on: multiplied by the scale for `16-mixed`,
    /// unchanged otherwise.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor> {
        match &self.scaler {
            Some(scaler) => scaler.scale(loss),
            None => Ok(loss.shallow_clone()),
        }
    }

    /// Lightning's `Precision.backward`: backward of `loss`, multiplied by
    /// the scale for `16-mixed`.
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        crate::tensor::device::note_backward();
        Ok(self.scale_loss(loss)?.f_backward()?)
    }

    /// `16-mixed`: divides every optimizer's gradients by the scale and
    /// records, per optimizer (by position), whether one is inf or NaN, as
    /// torch's `scaler.unscale_(optimizer)` before clipping. Other
    /// precisions: nothing.
    pub fn unscale_gradients(&mut self, optimizers: &[&mut dyn Optimizer]) -> Result<()> {
        let Some(scaler) = self.scaler.as_mut() else { return Ok(()) };
        for (j, opt) in optimizers.iter().enumerate() {
            scaler.unscale_on_device(j, &opt.param_tensors())?;
        }
        Ok(())
    }

    /// As [`PrecisionPlugin::unscale_gradients`], skipping the optimizers
    /// already unscaled (or stepped) since the last update: a
    /// `clip_gradients` before a manual step unscales, the step then does
    /// not again.
    pub fn unscale_gradients_once(&mut self, optimizers: &[&mut dyn Optimizer]) -> Result<()> {
        let Some(scaler) = self.scaler.as_mut() else { return Ok(()) };
        for (j, opt) in optimizers.iter().enumerate() {
            if !scaler.is_unscaled(j) {
                scaler.unscale_on_device(j, &opt.param_tensors())?;
            }
        }
        Ok(())
    }

    /// Lightning's `Precision.clip_gradients`: clips every optimizer's
    /// gradients to `value` by norm (2-norm, per optimizer) or by value.
    pub fn clip_gradients(
        &self,
        optimizers: &[&mut dyn Optimizer],
        value: f64,
        algorithm: ClipAlgorithm,
    ) -> Result<()> {
        for opt in optimizers {
            self.clip_params(&opt.param_tensors(), value, algorithm)?;
        }
        Ok(())
    }

    /// Clips the gradients of `params` together (by their total norm, or
    /// each entry by value).
    pub fn clip_params(&self, params: &[Tensor], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        match algorithm {
            ClipAlgorithm::Norm => {
                crate::tensor::grad::clip_grad_norm_on_device(params, value, 2.0)?;
            }
            ClipAlgorithm::Value => crate::tensor::grad::clip_grad_value(params, value)?,
        }
        Ok(())
    }

    /// Whether the plugin scales the loss (`16-mixed`).
    pub fn has_scaler(&self) -> bool {
        self.scaler.is_some()
    }

    /// Lightning's `Precision.optimizer_step` for every optimizer of a
    /// step: each one steps unless (`16-mixed`) its gradients hold an inf
    /// or NaN (unscaled first if [`PrecisionPlugin::unscale_gradients`] was
    /// not called), then the scale is updated once. As torch's
    /// `GradScaler.step`, an optimizer whose fused updates take the finding
    /// ([`Optimizer::supports_amp_scaling`]) gets it on the device, so that
    /// nothing is read on the host; the others wait for the device to tell
    /// the host whether to step. Returns whether each update was made.
    pub fn optimizer_step(&mut self, optimizers: &mut [&mut dyn Optimizer]) -> Result<Vec<StepMade>> {
        let mut made = Vec::with_capacity(optimizers.len());
        for (j, opt) in optimizers.iter_mut().enumerate() {
            let name = opt.name();
            let context = move |e: Error| e.context(format!("optimizer {name} step"));
            made.push(match self.scaler.as_mut() {
                Some(scaler) => scaler.step(j, &mut **opt).map_err(context)?,
                None => {
                    opt.step().map_err(context)?;
                    StepMade::Known(true)
                }
            });
        }
        self.update()?;
        Ok(made)
    }

    /// Drops what the loss scaler recorded of the current iteration (which
    /// optimizers were unscaled or stepped), as after an update: a step that
    /// failed half-way (a refused capture) starts the next one afresh.
    pub fn forget_iteration(&mut self) {
        if let Some(scaler) = &mut self.scaler {
            scaler.forget_iteration();
        }
    }

    /// Keeps the loss scaler's numbers on `device` (the run's), so that a
    /// step reads none on the host; other precisions: nothing.
    pub fn place_on(&mut self, device: Device) -> Result<()> {
        match &mut self.scaler {
            Some(scaler) => scaler.place_on(device),
            None => Ok(()),
        }
    }

    /// `16-mixed`: divides the gradients of `params` by the scale (before
    /// clipping, once per step) and returns whether any is inf/NaN. Other
    /// precisions: does nothing and returns `false`.
    pub fn unscale_and_check(&mut self, params: &[Tensor]) -> Result<bool> {
        match &mut self.scaler {
            Some(scaler) => scaler.unscale(DEFAULT_OPTIMIZER, params),
            None => Ok(false),
        }
    }

    /// Whether to skip the optimizer step (`16-mixed` with an inf/NaN
    /// gradient); unscales `params` first when `unscale_and_check` was not
    /// called this step. Always `false` for the other precisions.
    pub fn should_skip_step(&mut self, params: &[Tensor]) -> Result<bool> {
        match &mut self.scaler {
            Some(scaler) => scaler.should_skip_step(DEFAULT_OPTIMIZER, params),
            None => Ok(false),
        }
    }

    /// Adjusts the loss scale after the step decision (`16-mixed`); a no-op
    /// otherwise.
    pub fn update(&mut self) -> Result<()> {
        match &mut self.scaler {
            Some(scaler) => scaler.update(),
            None => Ok(()),
        }
    }

    /// The state to checkpoint: the scaler's for `16-mixed` (see
    /// [`GradScaler::state_dict`]; a read that waits for the device), empty
    /// otherwise.
    pub fn state_dict(&self) -> Result<Vec<(String, f64)>> {
        self.scaler.as_ref().map_or(Ok(Vec::new()), GradScaler::state_dict)
    }

    /// Restores a checkpointed state. An empty state is ignored (nothing was
    /// saved, e.g. by another precision), as is any state for precisions
    /// without a scaler (as Lightning).
    pub fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        match &mut self.scaler {
            Some(scaler) if !state.is_empty() => scaler.load_state_dict(state),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::autocast;

    #[test]
    fn mixed_bf16_step_on_cpu() {
        let mut plugin = PrecisionPlugin::parse("bf16-mixed").unwrap();
        assert!(plugin.scaler().is_none());
        assert_eq!(plugin.param_kind(), Kind::Float);
        let w = Tensor::randn([2, 3], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let x = Tensor::randn([4, 3], (Kind::Float, tch::Device::Cpu));
        let x = plugin.convert_input(&x).unwrap();
        assert_eq!(x.kind(), Kind::Float);
        let loss = {
            let _ctx = plugin.forward_context(crate::tensor::device::Device::Cpu).unwrap();
            let y = x.f_linear::<Tensor>(&w, None).unwrap();
            assert_eq!(y.kind(), Kind::BFloat16);
            y.to_kind(Kind::Float).square().mean(Kind::Float)
        };
        assert!(!autocast::is_enabled(DeviceType::Cpu).unwrap());
        plugin.scale_loss(&loss).unwrap().backward();
        assert!(!plugin.unscale_and_check(&[w.shallow_clone()]).unwrap());
        assert!(!plugin.should_skip_step(&[w.shallow_clone()]).unwrap());
        plugin.update().unwrap();
        assert!(plugin.state_dict().unwrap().is_empty());
        assert!(plugin.load_state_dict(&[("scale".into(), 2.0)]).is_ok());
        assert!(plugin
            .forward_context(crate::tensor::device::Device::Other(DeviceType::Meta, 0))
            .unwrap_err()
            .message
            .contains("no autocast"));
    }

    #[test]
    fn mixed_16_step_with_scaler_on_cpu() {
        let mut plugin = PrecisionPlugin::new(Precision::Mixed16);
        let w = Tensor::ones([1, 2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let x = Tensor::from_slice(&[1.0f32, 2.0]).reshape([1, 2]);
        let step = |plugin: &mut PrecisionPlugin| {
            let mut g = w.grad();
            if g.defined() {
                let _ = g.zero_();
            }
            let loss = {
                let _ctx = plugin.forward_context(crate::tensor::device::Device::Cpu).unwrap().unwrap();
                let y = x.f_linear::<Tensor>(&w, None).unwrap();
                assert_eq!(y.kind(), Kind::Half);
                y.to_kind(Kind::Float).sum(Kind::Float)
            };
            let scaled = plugin.scale_loss(&loss).unwrap();
            assert_eq!(scaled.double_value(&[]), 3.0 * plugin.scaler().unwrap().get_scale().unwrap());
            scaled.backward();
            let found_inf = plugin.unscale_and_check(&[w.shallow_clone()]).unwrap();
            let skip = plugin.should_skip_step(&[w.shallow_clone()]).unwrap();
            assert_eq!(found_inf, skip);
            plugin.update().unwrap();
            skip
        };
        // The first steps overflow for real, as fp16 training does: the
        // weight gradient x * scale is computed in fp16, and 2 * 65536 or
        // 2 * 32768 exceed fp16's max (65504). Those steps are skipped and
        // the scale halves each time, as torch's GradScaler does; at 16384
        // the gradients fit and come back unscaled.
        assert!(step(&mut plugin));
        assert_eq!(plugin.scaler().unwrap().get_scale().unwrap(), 32768.0);
        assert!(step(&mut plugin));
        assert_eq!(plugin.scaler().unwrap().get_scale().unwrap(), 16384.0);
        assert!(!step(&mut plugin));
        assert_eq!(Vec::<f32>::try_from(w.grad().reshape([-1])).unwrap(), vec![1.0, 2.0]);
        assert_eq!(plugin.scaler().unwrap().growth_tracker().unwrap(), 1);

        let _ = w.grad().fill_(f64::NAN);
        assert!(plugin.should_skip_step(&[w.shallow_clone()]).unwrap());
        plugin.update().unwrap();
        let state = plugin.state_dict().unwrap();
        assert_eq!(state[0], ("scale".to_string(), 8192.0));
        let mut fresh = PrecisionPlugin::parse("16").unwrap();
        fresh.load_state_dict(&state).unwrap();
        assert_eq!(fresh.state_dict().unwrap(), state);
        fresh.load_state_dict(&[]).unwrap();
        assert_eq!(fresh.scaler().unwrap().get_scale().unwrap(), 8192.0);
        assert!(fresh.scaler_mut().is_some());
    }

    #[test]
    fn true_precisions_convert_inputs() {
        let x = Tensor::randn([2, 2], (Kind::Float, tch::Device::Cpu));
        let ids = Tensor::from_slice(&[1i64, 2]);
        for (name, kind) in [("bf16-true", Kind::BFloat16), ("16-true", Kind::Half), ("64-true", Kind::Double)] {
            let plugin = PrecisionPlugin::parse(name).unwrap();
            assert_eq!(plugin.param_kind(), kind);
            let converted = plugin.convert_input(&x).unwrap();
            assert_eq!(converted.kind(), kind, "{name}");
            assert_eq!(plugin.convert_input(&ids).unwrap().kind(), Kind::Int64);
            assert_eq!(plugin.convert_output(&converted).unwrap().kind(), Kind::Float);
            assert!(plugin.forward_context(crate::tensor::device::Device::Cpu).unwrap().is_none());
            assert!(plugin.scaler().is_none());
        }
        let full = PrecisionPlugin::new(Precision::Full);
        assert_eq!(full.convert_input(&x).unwrap().kind(), Kind::Float);
        assert_eq!(full.convert_output(&ids).unwrap().kind(), Kind::Int64);
        assert!(PrecisionPlugin::with_scaler(Precision::Full, GradScaler::new()).is_err());
        assert!(PrecisionPlugin::with_scaler(Precision::Mixed16, GradScaler::new()).is_ok());
        assert!(PrecisionPlugin::parse("transformer-engine").is_err());
    }

    /// Under 16-mixed a fused optimizer gets the scaler's finding on the
    /// device (torch's `found_inf`); an unfused one is told on the host.
    /// Both skip the same steps and leave the same weights and scale.
    #[test]
    fn fused_optimizers_take_the_finding_on_the_device() {
        use crate::optim::{Adam, AdamOptions};
        let run = |fused: bool| {
            let mut plugin = PrecisionPlugin::new(Precision::Mixed16);
            plugin.place_on(crate::tensor::device::Device::Cpu).unwrap();
            let w = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
            let mut adam = Adam::new(vec![w.shallow_clone()], AdamOptions { lr: 0.1, ..Default::default() }).unwrap();
            adam.set_fused(fused).unwrap();
            let mut made = Vec::new();
            for step in 0..4 {
                let loss = (&w * &w).sum(Kind::Float);
                plugin.backward(&loss).unwrap();
                if step == 1 {
                    let _ = w.grad().get(0).fill_(f64::NAN);
                }
                plugin.unscale_gradients(&[&mut adam]).unwrap();
                let outcome = plugin.optimizer_step(&mut [&mut adam]).unwrap();
                assert_eq!(matches!(outcome[0], StepMade::OnDevice(_)), fused);
                made.push(outcome[0].read().unwrap());
                adam.zero_grad();
            }
            let scale = plugin.scaler().unwrap().get_scale().unwrap();
            let steps = adam.state_dict().unwrap().into_iter().find(|(k, _)| k == "state.0.step").unwrap().1;
            (made, Vec::<f32>::try_from(&w).unwrap(), scale, steps.double_value(&[]))
        };
        let (on_device, on_host) = (run(true), run(false));
        assert_eq!(on_device.0, vec![true, false, true, true]);
        assert_eq!(on_device.2, 32768.0);
        assert_eq!(on_device.3, 3.0);
        assert_eq!((on_device.0, on_device.2, on_device.3), (on_host.0, on_host.2, on_host.3));
        // Fused and for-loop Adam differ in the last bits only.
        for (a, b) in on_device.1.iter().zip(&on_host.1) {
            assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
        }
    }
}

//! Dynamic loss scaling for `16-mixed`, with the rules of torch's
//! `GradScaler` (`torch/amp/grad_scaler.py` and `_amp_update_scale_`).
//!
//! Per iteration: `scale(loss)` before backward; `unscale(opt, params)`
//! (optional, before clipping, at most once per step) divides the gradients
//! by the scale and records whether any was inf/NaN; then either
//! `should_skip_step(opt, params)` (unscaling first if needed) tells the
//! host whether to skip the optimizer step, or, for optimizers whose fused
//! updates take it ([`crate::optim::Optimizer::supports_amp_scaling`]),
//! `found_inf_for_step(opt, params)` hands them the finding on the device;
//! `update()` then backs the scale off after an inf/NaN, or grows it after
//! `growth_interval` clean steps.
//!
//! As torch's, the scale (float32) and the growth tracker (int32) live on
//! the device once it is known ([`GradScaler::place_on`], or the first
//! unscale's gradients), and so do the findings: unscaling, the fused
//! steps and the update read nothing on the host. Only `should_skip_step`,
//! `unscale`'s returned flag and the getters wait for the device.
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// Where one optimizer is in the current iteration (torch's `OptState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Gradients were unscaled; `found_inf` is known.
    Unscaled,
    /// The step decision was taken.
    Stepped,
}

/// The per-optimizer state of an iteration.
#[derive(Debug)]
struct OptimizerState {
    stage: Stage,
    /// 1 when a gradient held an inf or NaN (float32, 0-dim, on the
    /// scale's device).
    found_inf: Tensor,
}

/// Combines this rank's inf/NaN finding with the other ranks' (under a
/// sharded strategy each rank checks its shards only, and every rank must
/// skip the same steps: torch's `ShardedGradScaler`).
#[derive(Clone)]
pub struct FoundInfSync(pub std::sync::Arc<dyn Fn(bool) -> Result<bool> + Send + Sync>);

impl std::fmt::Debug for FoundInfSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FoundInfSync")
    }
}

/// Whether an optimizer's update was made: known on the host, or, for a
/// fused step under `16-mixed`'s loss scaler, on the device until asked
/// ([`StepMade::read`] waits for the device then).
#[derive(Debug)]
pub enum StepMade {
    /// Known on the host.
    Known(bool),
    /// The loss scaler's finding (float32, 0-dim): the update was made when
    /// it holds 0.
    OnDevice(Tensor),
}

impl StepMade {
    /// Whether the update was made (reading the device's finding).
    pub fn read(&self) -> Result<bool> {
        match self {
            StepMade::Known(made) => Ok(*made),
            StepMade::OnDevice(found_inf) => Ok(crate::checkpoint::numbers::one_value(found_inf)? == 0.0),
        }
    }
}

/// The scale and growth tracker on their device (torch's `_scale`,
/// float32, and `_growth_tracker`, int32).
#[derive(Debug)]
struct OnDevice {
    device: Device,
    scale: Tensor,
    growth_tracker: Tensor,
}

/// Dynamic loss scaler (torch's `GradScaler`).
#[derive(Debug)]
pub struct GradScaler {
    /// The scale while no device holds it (then the device's is the truth).
    scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
    /// The growth tracker while no device holds it.
    growth_tracker: i64,
    on_device: Option<OnDevice>,
    /// Keyed by optimizer index; cleared by `update()`.
    optimizers: BTreeMap<usize, OptimizerState>,
    /// Set by a sharded strategy: every unscale's finding is the job's.
    found_inf_sync: Option<FoundInfSync>,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler {
            scale: Self::INIT_SCALE,
            growth_factor: Self::GROWTH_FACTOR,
            backoff_factor: Self::BACKOFF_FACTOR,
            growth_interval: Self::GROWTH_INTERVAL,
            growth_tracker: 0,
            on_device: None,
            optimizers: BTreeMap::new(),
            found_inf_sync: None,
        }
    }
}

/// Rounds to the float32 the scale is stored in.
fn as_f32(v: f64) -> f64 {
    v as f32 as f64
}

/// A loss scaler's settings (torch's `GradScaler(init_scale,
/// growth_factor, backoff_factor, growth_interval)`); the default is
/// torch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScalerSettings {
    /// The first scale.
    pub init_scale: f64,
    /// The factor the scale grows by after `growth_interval` clean steps.
    pub growth_factor: f64,
    /// The factor the scale shrinks by after an inf/NaN gradient.
    pub backoff_factor: f64,
    /// Clean steps between growths.
    pub growth_interval: i64,
}

impl Default for GradScalerSettings {
    fn default() -> Self {
        GradScalerSettings {
            init_scale: GradScaler::INIT_SCALE,
            growth_factor: GradScaler::GROWTH_FACTOR,
            backoff_factor: GradScaler::BACKOFF_FACTOR,
            growth_interval: GradScaler::GROWTH_INTERVAL,
        }
    }
}

impl GradScalerSettings {
    /// Checks the settings as [`GradScaler::with_settings`] does.
    pub fn check(&self) -> Result<()> {
        check_settings(self.init_scale, self.growth_factor, self.backoff_factor, self.growth_interval)
    }
}

impl GradScaler {
    /// torch's default initial scale, 2^16.
    /// cbindgen:ignore
    pub const INIT_SCALE: f64 = 65536.0;
    /// torch's default growth factor.
    /// cbindgen:ignore
    pub const GROWTH_FACTOR: f64 = 2.0;
    /// torch's default backoff factor.
    /// cbindgen:ignore
    pub const BACKOFF_FACTOR: f64 = 0.5;
    /// torch's default number of clean steps between growths.
    /// cbindgen:ignore
    pub const GROWTH_INTERVAL: i64 = 2000;
    /// Names of the exported state, as torch's `GradScaler.state_dict()`.
    pub const STATE_KEYS: [&'static str; 5] =
        ["scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"];

    /// A scaler with torch's defaults: scale 65536, growth 2.0, backoff
    /// 0.5, interval 2000.
    pub fn new() -> Self {
        Self::default()
    }

    /// A scaler with explicit settings (torch requires growth_factor > 1 and
    /// backoff_factor < 1; fulmen also requires a positive finite scale, a
    /// backoff > 0 and an interval > 0).
    pub fn with_settings(settings: GradScalerSettings) -> Result<Self> {
        settings.check()?;
        Ok(GradScaler {
            scale: as_f32(settings.init_scale),
            growth_factor: settings.growth_factor,
            backoff_factor: settings.backoff_factor,
            growth_interval: settings.growth_interval,
            ..Self::default()
        })
    }

    /// Makes every unscale's inf/NaN finding go through `sync` (a sharded
    /// strategy's: any rank's finding is every rank's), or no more. The
    /// exchange reads the finding on the host.
    pub fn set_found_inf_sync(&mut self, sync: Option<FoundInfSync>) {
        self.found_inf_sync = sync;
    }

    /// Keeps the scale and the growth tracker on `device` from now on
    /// (torch's `_lazy_init_scale_growth_tracker`); the trainer calls it
    /// with the run's device. Where they were on another device they move
    /// (a read that waits for it).
    pub fn place_on(&mut self, device: Device) -> Result<()> {
        if self.on_device.as_ref().is_some_and(|d| d.device == device) {
            return Ok(());
        }
        let (scale, tracker) = (self.get_scale()?, self.growth_tracker()?);
        let on = |v: f64, kind: Kind| -> Result<Tensor> {
            crate::tensor::device::to_device(
                &Tensor::f_from_slice(&[v])?.f_to_kind(kind)?.f_reshape([0i64; 0])?,
                device,
                false,
            )
        };
        self.on_device =
            Some(OnDevice { device, scale: on(scale, Kind::Float)?, growth_tracker: on(tracker as f64, Kind::Int)? });
        Ok(())
    }

    /// The device state, made on `like`'s device when there is none yet.
    fn device_state(&mut self, like: &Tensor) -> Result<&OnDevice> {
        if self.on_device.is_none() {
            self.place_on(Device::of(like)?)?;
        }
        self.on_device.as_ref().ok_or_else(|| Error::state("GradScaler: the scale has no device"))
    }

    /// The current scale (a read that waits for the device holding it).
    pub fn get_scale(&self) -> Result<f64> {
        match &self.on_device {
            Some(d) => crate::checkpoint::numbers::one_value(&d.scale),
            None => Ok(self.scale),
        }
    }

    /// Clean steps since the last growth or backoff (a read that waits for
    /// the device holding it).
    pub fn growth_tracker(&self) -> Result<i64> {
        match &self.on_device {
            Some(d) => Ok(crate::checkpoint::numbers::one_value(&d.growth_tracker)? as i64),
            None => Ok(self.growth_tracker),
        }
    }

    /// `loss * scale`, as a float32 0-dim scale on the loss's device (so a
    /// 0-dim fp16 loss is promoted to float32 instead of overflowing).
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor> {
        let scale = match &self.on_device {
            Some(d) => crate::tensor::device::to_device_of(&d.scale, loss)?,
            None => crate::tensor::device::scalar_on_device_of(self.scale, Kind::Float, loss)?,
        };
        Ok(loss.f_mul(&scale)?)
    }

    /// Divides the gradients of `params` (those that have one) by the
    /// scale in place and records whether any of them held an inf or NaN,
    /// on the device; returns that finding (a read that waits for the
    /// device: [`GradScaler::unscale_on_device`] does not). At most once
    /// per optimizer between `update()`s, and not after the step decision
    /// (torch's errors). fp16 gradients are refused: `16-mixed` keeps fp32
    /// master weights.
    pub fn unscale(&mut self, optimizer: usize, params: &[Tensor]) -> Result<bool> {
        self.unscale_on_device(optimizer, params)?;
        self.found_inf(optimizer).unwrap_or(Ok(false))
    }

    /// [`GradScaler::unscale`] without reading the finding on the host
    /// (torch's `scaler.unscale_(optimizer)`).
    pub fn unscale_on_device(&mut self, optimizer: usize, params: &[Tensor]) -> Result<()> {
        match self.optimizers.get(&optimizer).map(|s| s.stage) {
            Some(Stage::Unscaled) => {
                return Err(Error::state(format!(
                    "unscale: already called on optimizer {optimizer} since the last update()"
                )))
            }
            Some(Stage::Stepped) => {
                return Err(Error::state(format!("unscale: called on optimizer {optimizer} after its step")))
            }
            None => {}
        }
        let grads: Vec<Tensor> = params.iter().map(Tensor::grad).filter(Tensor::defined).collect();
        let mut found_inf = match grads.first() {
            Some(first) => {
                let state = self.device_state(first)?;
                unscale_grads(&grads, &state.scale)?
            }
            None => self.no_inf()?,
        };
        if let Some(sync) = &self.found_inf_sync {
            let mine = crate::checkpoint::numbers::one_value(&found_inf)? != 0.0;
            let _ = found_inf.f_fill_(if (sync.0)(mine)? { 1.0 } else { 0.0 })?;
        }
        self.optimizers.insert(optimizer, OptimizerState { stage: Stage::Unscaled, found_inf });
        Ok(())
    }

    /// A finding of "no inf" on the scale's device (the host's CPU when no
    /// device holds the scale yet).
    fn no_inf(&self) -> Result<Tensor> {
        Ok(match &self.on_device {
            Some(d) => d.scale.f_zeros_like()?,
            None => Tensor::f_zeros([], (Kind::Float, tch::Device::Cpu))?,
        })
    }

    /// The inf/NaN result of the last unscale of `optimizer` in this
    /// iteration, if it was unscaled (a read that waits for the device).
    pub fn found_inf(&self, optimizer: usize) -> Option<Result<bool>> {
        self.optimizers.get(&optimizer).map(|s| Ok(crate::checkpoint::numbers::one_value(&s.found_inf)? != 0.0))
    }

    /// Whether `optimizer` was unscaled (or stepped) since the last
    /// `update()`.
    pub fn is_unscaled(&self, optimizer: usize) -> bool {
        self.optimizers.contains_key(&optimizer)
    }

    /// torch's `scaler.step` decision: unscales `params` if that was not
    /// done yet, and returns `true` when the optimizer step must be skipped
    /// because a gradient held an inf or NaN (a read that waits for the
    /// device, as torch's for optimizers without fused updates). Once per
    /// optimizer per iteration.
    pub fn should_skip_step(&mut self, optimizer: usize, params: &[Tensor]) -> Result<bool> {
        let found_inf = self.found_inf_for_step(optimizer, params)?;
        Ok(crate::checkpoint::numbers::one_value(&found_inf)? != 0.0)
    }

    /// torch's `scaler.step` for an optimizer whose fused updates take the
    /// finding (`_step_supports_amp_scaling`): unscales `params` if that was
    /// not done yet and returns the finding on the device (float32, 0-dim, 1
    /// when the step must be skipped), for
    /// [`crate::optim::Optimizer::step_scaled`]. Once per optimizer per
    /// iteration; nothing is read on the host.
    pub fn found_inf_for_step(&mut self, optimizer: usize, params: &[Tensor]) -> Result<Tensor> {
        match self.optimizers.get(&optimizer).map(|s| s.stage) {
            Some(Stage::Stepped) => {
                return Err(Error::state(format!(
                    "step: already called on optimizer {optimizer} since the last update()"
                )))
            }
            Some(Stage::Unscaled) => {}
            None => self.unscale_on_device(optimizer, params)?,
        }
        let state = self
            .optimizers
            .get_mut(&optimizer)
            .ok_or_else(|| Error::state(format!("step: optimizer {optimizer} has no inf check")))?;
        state.stage = Stage::Stepped;
        Ok(state.found_inf.shallow_clone())
    }

    /// torch's `scaler.step(optimizer)` for the optimizer at index
    /// `optimizer`: unscales its gradients if that was not done yet, then
    /// either hands an optimizer whose fused updates take it
    /// ([`crate::optim::Optimizer::supports_amp_scaling`]) the inf check on
    /// the device, which skips an overflowing step there, or (any other)
    /// steps it unless the check, read on the host, found an inf or NaN.
    pub fn step(&mut self, optimizer: usize, opt: &mut dyn crate::optim::Optimizer) -> Result<StepMade> {
        let params = opt.param_tensors();
        if opt.supports_amp_scaling() {
            let found_inf = self.found_inf_for_step(optimizer, &params)?;
            opt.step_scaled(&found_inf)?;
            return Ok(StepMade::OnDevice(found_inf));
        }
        let skip = self.should_skip_step(optimizer, &params)?;
        if !skip {
            opt.step()?;
        }
        Ok(StepMade::Known(!skip))
    }

    /// Drops the records of the current iteration (which optimizers were
    /// unscaled or stepped, and their findings) without updating the scale.
    pub fn forget_iteration(&mut self) {
        self.optimizers.clear();
    }

    /// Adjusts the scale from this iteration's inf checks (torch's
    /// `_amp_update_scale_`, on the device): after any inf/NaN,
    /// `scale *= backoff_factor` and the tracker resets; otherwise the
    /// tracker counts up and, on reaching `growth_interval`,
    /// `scale *= growth_factor` (if finite) and the tracker resets. Fails
    /// when no optimizer was unscaled since the last update.
    pub fn update(&mut self) -> Result<()> {
        if self.optimizers.is_empty() {
            return Err(Error::state("update: no inf checks were recorded prior to update()"));
        }
        let findings = std::mem::take(&mut self.optimizers);
        let Some(d) = self.on_device.as_mut() else {
            // No gradient was unscaled yet, so no device holds the scale:
            // the findings are the host's (none, or a sharded job's
            // exchange), and so is the update; the scale goes to the device
            // of the first gradients.
            let mut found_inf = false;
            for s in findings.values() {
                found_inf |= crate::checkpoint::numbers::one_value(&s.found_inf)? != 0.0;
            }
            self.update_on_host(found_inf);
            return Ok(());
        };
        let mut values = findings.values();
        let Some(first) = values.next() else {
            return Err(Error::state("update: no inf checks were recorded prior to update()"));
        };
        let mut combined = crate::tensor::device::to_device_of(&first.found_inf, &d.scale)?;
        for s in values {
            combined = combined.f_add(&crate::tensor::device::to_device_of(&s.found_inf, &d.scale)?)?;
        }
        let _ = d.scale.f_internal_amp_update_scale_(
            &d.growth_tracker,
            &combined,
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval,
        )?;
        Ok(())
    }

    /// `_amp_update_scale_` on the host's numbers.
    fn update_on_host(&mut self, found_inf: bool) {
        if found_inf {
            self.scale = as_f32(self.scale * self.backoff_factor);
            self.growth_tracker = 0;
        } else if self.growth_tracker + 1 == self.growth_interval {
            let grown = (self.scale * self.growth_factor) as f32;
            if grown.is_finite() {
                self.scale = f64::from(grown);
            }
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
        }
    }

    /// The state as torch names it: `scale`, `growth_factor`,
    /// `backoff_factor`, `growth_interval`, `_growth_tracker` (a read that
    /// waits for the device).
    pub fn state_dict(&self) -> Result<Vec<(String, f64)>> {
        let values = [
            self.get_scale()?,
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval as f64,
            self.growth_tracker()? as f64,
        ];
        Ok(Self::STATE_KEYS.iter().zip(values).map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// Restores a state saved by [`GradScaler::state_dict`]; every key is
    /// required and checked. Nothing changes on error. Clears the
    /// iteration's per-optimizer records.
    pub fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        if state.is_empty() {
            return Err(Error::invalid(
                "GradScaler state is empty, possibly because it was saved without loss scaling",
            ));
        }
        let get = |key: &str| {
            state.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v).ok_or_else(|| {
                Error::format(format!("GradScaler state has no {key:?}; expected {}", Self::STATE_KEYS.join(", ")))
            })
        };
        let integer = |key: &str| -> Result<i64> {
            let v = get(key)?;
            if v.fract() != 0.0 || !v.is_finite() || v < 0.0 || v > i32::MAX as f64 {
                return Err(Error::format(format!("GradScaler state {key:?} = {v} is not a non-negative integer")));
            }
            Ok(v as i64)
        };
        let (scale, growth, backoff) = (get("scale")?, get("growth_factor")?, get("backoff_factor")?);
        let (interval, tracker) = (integer("growth_interval")?, integer("_growth_tracker")?);
        check_settings(scale, growth, backoff, interval).map_err(|e| Error::format(e.message))?;
        if let Some(d) = self.on_device.as_mut() {
            // Into the device's tensors (a captured update keeps reading
            // them), both or neither.
            let before = d.scale.f_detach_copy()?;
            let _ = d.scale.f_fill_(as_f32(scale))?;
            if let Err(e) = d.growth_tracker.f_fill_(tracker) {
                let _ = d.scale.f_copy_(&before);
                return Err(e.into());
            }
        }
        self.scale = as_f32(scale);
        self.growth_factor = growth;
        self.backoff_factor = backoff;
        self.growth_interval = interval;
        self.growth_tracker = tracker;
        self.optimizers.clear();
        Ok(())
    }
}

/// Checks scaler settings.
fn check_settings(scale: f64, growth: f64, backoff: f64, interval: i64) -> Result<()> {
    if !(scale.is_finite() && scale > 0.0 && (scale as f32).is_finite()) {
        return Err(Error::invalid(format!("GradScaler: scale {scale} must be a positive finite float32")));
    }
    if !(growth.is_finite() && growth > 1.0) {
        return Err(Error::invalid(format!("GradScaler: growth_factor {growth} must be > 1.0")));
    }
    if !(backoff > 0.0 && backoff < 1.0) {
        return Err(Error::invalid(format!("GradScaler: backoff_factor {backoff} must be in (0, 1)")));
    }
    if interval <= 0 {
        return Err(Error::invalid(format!("GradScaler: growth_interval {interval} must be > 0")));
    }
    Ok(())
}

/// torch's `_unscale_grads_`: per device of `grads` (all defined), one
/// `_amp_foreach_non_finite_check_and_unscale_` per dtype that multiplies
/// them by the float32 `1 / scale` in place and sets that device's finding
/// when one held an inf or NaN; returns the findings added up on the
/// scale's device. Nothing is read on the host.
fn unscale_grads(grads: &[Tensor], scale: &Tensor) -> Result<Tensor> {
    if let Some(g) = grads.iter().find(|g| g.kind() == Kind::Half) {
        return Err(Error::dtype(format!(
            "unscale: attempting to unscale FP16 gradients (shape {:?}); 16-mixed keeps fp32 master weights, \
             so the model must not be cast to fp16",
            g.size()
        )));
    }
    let _no_grad = tch::no_grad_guard();
    // torch's `self._scale.double().reciprocal().float()`, in float32 on MPS
    // (no float64 there), as torch's.
    let inv_scale = if Device::of(scale)?.kind() == crate::tensor::device::DeviceType::Mps {
        scale.f_reciprocal()?
    } else {
        scale.f_to_kind(Kind::Double)?.f_reciprocal()?.f_to_kind(Kind::Float)?
    };
    let mut groups: Vec<((Device, Kind), Vec<Tensor>)> = Vec::new();
    for g in grads {
        let key = (Device::of(g)?, g.kind());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(g.shallow_clone()),
            None => groups.push((key, vec![g.shallow_clone()])),
        }
    }
    let mut per_device: Vec<(Device, Tensor, Tensor)> = Vec::new();
    for ((device, _), list) in &groups {
        if !per_device.iter().any(|(d, _, _)| d == device) {
            let found = crate::tensor::device::to_device(&scale.f_zeros_like()?, *device, false)?;
            let inv = crate::tensor::device::to_device(&inv_scale, *device, false)?;
            per_device.push((*device, found, inv));
        }
        let (_, found, inv) = per_device.iter().find(|(d, _, _)| d == device).expect("just added");
        let ptrs: Vec<*mut libc::c_void> = list.iter().map(|t| t.as_ptr() as *mut libc::c_void).collect();
        // SAFETY: `ptrs` holds `list.len()` live tensors, `found` and `inv`
        // are live 0-dim float32 tensors on the list's device.
        crate::shim::call("GradScaler unscale", |err, len| unsafe {
            crate::shim::fulmen_cxx_amp_unscale(
                ptrs.as_ptr(),
                ptrs.len(),
                found.as_ptr() as *const libc::c_void,
                inv.as_ptr() as *const libc::c_void,
                err,
                len,
            )
        })?;
    }
    let mut total: Option<Tensor> = None;
    for (_, found, _) in &per_device {
        let here = crate::tensor::device::to_device_of(found, scale)?;
        total = Some(match total {
            // Held at 1: the fused kernels skip a step only on exactly 1.
            Some(t) => t.f_add(&here)?.f_clamp_max(1.0)?,
            None => here,
        });
    }
    total.ok_or_else(|| Error::state("unscale: no gradients"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parameter whose gradient is `grad * scale` after a backward of a
    /// scaled loss `sum(p * grad)`.
    fn param_with_grad(scaler: &GradScaler, grad: &[f32]) -> Tensor {
        let p = Tensor::zeros([grad.len() as i64], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let loss = (&p * Tensor::from_slice(grad)).sum(Kind::Float);
        scaler.scale(&loss).unwrap().backward();
        p
    }

    fn grad_values(p: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(p.grad()).unwrap()
    }

    #[test]
    fn scales_and_unscales() {
        let mut s = GradScaler::new();
        assert_eq!(s.get_scale().unwrap(), 65536.0);
        let loss = Tensor::from(1.5f32);
        assert_eq!(s.scale(&loss).unwrap().double_value(&[]), 98304.0);
        // A 0-dim fp16 loss is promoted to float32, not overflowed.
        let half = Tensor::from(2.0f32).to_kind(Kind::Half);
        let scaled = s.scale(&half).unwrap();
        assert_eq!((scaled.kind(), scaled.double_value(&[])), (Kind::Float, 131072.0));

        let p = param_with_grad(&s, &[1.0, -2.0, 0.25]);
        assert_eq!(grad_values(&p), vec![65536.0, -131072.0, 16384.0]);
        assert!(!s.unscale(0, &[p.shallow_clone()]).unwrap());
        assert_eq!(grad_values(&p), vec![1.0, -2.0, 0.25]);
        assert_eq!(s.found_inf(0).map(Result::unwrap), Some(false));
        let err = s.unscale(0, &[p.shallow_clone()]).unwrap_err();
        assert!(err.message.contains("already called on optimizer 0"), "{}", err.message);
        // The step decision does not unscale again.
        assert!(!s.should_skip_step(0, &[p.shallow_clone()]).unwrap());
        assert_eq!(grad_values(&p), vec![1.0, -2.0, 0.25]);
        assert!(s.should_skip_step(0, &[p.shallow_clone()]).is_err());
        assert!(s.unscale(0, &[p.shallow_clone()]).unwrap_err().message.contains("after its step"));
        s.update().unwrap();
        assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (65536.0, 1));
        assert!(s.update().unwrap_err().message.contains("no inf checks were recorded"));
    }

    #[test]
    fn another_ranks_inf_skips_this_ranks_step() {
        let mut s = GradScaler::new();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&calls);
        // The job's finding: another rank's shard overflowed.
        s.set_found_inf_sync(Some(FoundInfSync(std::sync::Arc::new(move |mine: bool| {
            assert!(!mine);
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(true)
        }))));
        let finite = param_with_grad(&s, &[1.0, 2.0]);
        assert!(s.should_skip_step(0, &[finite.shallow_clone()]).unwrap());
        s.update().unwrap();
        assert_eq!((s.get_scale().unwrap(), calls.load(std::sync::atomic::Ordering::SeqCst)), (32768.0, 1));
        // A failing exchange is the unscale's error.
        s.set_found_inf_sync(Some(FoundInfSync(std::sync::Arc::new(|_| Err(Error::distributed("rank 1 is gone"))))));
        let e = s.unscale(0, &[param_with_grad(&s, &[1.0])]).unwrap_err();
        assert!(e.message.contains("rank 1 is gone"), "{e}");
    }

    #[test]
    fn inf_gradient_skips_the_step_and_halves_the_scale() {
        let mut s = GradScaler::new();
        let good = param_with_grad(&s, &[1.0, 2.0]);
        let bad = param_with_grad(&s, &[1.0, 2.0]);
        // Inject an inf into one gradient, as an fp16 overflow would.
        let _ = bad.grad().get(1).fill_(f64::INFINITY);
        let no_grad = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let params = [good.shallow_clone(), bad.shallow_clone(), no_grad];
        assert!(s.unscale(0, &params).unwrap());
        assert_eq!(s.found_inf(0).map(Result::unwrap), Some(true));
        assert!(s.should_skip_step(0, &params).unwrap());
        s.update().unwrap();
        assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (32768.0, 0));
        // NaN works the same, through should_skip_step's own unscale.
        let nan = param_with_grad(&s, &[1.0]);
        let _ = nan.grad().fill_(f64::NAN);
        assert!(s.should_skip_step(3, &[nan]).unwrap());
        s.update().unwrap();
        assert_eq!(s.get_scale().unwrap(), 16384.0);
    }

    #[test]
    fn growth_after_interval_and_multiple_optimizers() {
        let mut s = GradScaler::new();
        let p = param_with_grad(&s, &[1.0]);
        for step in 1..=2000 {
            let _ = p.grad().fill_(1.0);
            assert!(!s.should_skip_step(0, &[p.shallow_clone()]).unwrap());
            s.update().unwrap();
            if step < 2000 {
                assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (65536.0, step));
            }
        }
        assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (131072.0, 0));
        // With two optimizers, an inf in either backs off.
        let q = param_with_grad(&s, &[1.0]);
        let _ = q.grad().fill_(f64::INFINITY);
        assert!(!s.should_skip_step(0, &[p.shallow_clone()]).unwrap());
        assert!(s.should_skip_step(1, &[q]).unwrap());
        s.update().unwrap();
        assert_eq!(s.get_scale().unwrap(), 65536.0);
    }

    #[test]
    fn growth_stops_at_float32_max() {
        let mut s = GradScaler::with_settings(GradScalerSettings {
            init_scale: f32::MAX as f64,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 1,
        })
        .unwrap();
        let p = param_with_grad(&GradScaler::new(), &[1.0]);
        let _ = p.grad().fill_(1.0);
        s.unscale(0, &[p]).unwrap();
        s.update().unwrap();
        assert_eq!(s.get_scale().unwrap(), f32::MAX as f64);
    }

    #[test]
    fn refuses_fp16_gradients() {
        let mut s = GradScaler::new();
        let p = Tensor::zeros([2], (Kind::Half, tch::Device::Cpu)).set_requires_grad(true);
        (&p * 2.0).sum(Kind::Half).backward();
        let err = s.unscale(0, &[p]).unwrap_err();
        assert!(err.message.contains("unscale FP16 gradients"), "{}", err.message);
    }

    #[test]
    fn state_round_trip_and_validation() {
        let mut s = GradScaler::with_settings(GradScalerSettings {
            init_scale: 1024.0,
            growth_factor: 4.0,
            backoff_factor: 0.25,
            growth_interval: 10,
        })
        .unwrap();
        let p = param_with_grad(&s, &[1.0]);
        s.unscale(0, &[p]).unwrap();
        s.update().unwrap();
        let state = s.state_dict().unwrap();
        let names: Vec<&str> = state.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, GradScaler::STATE_KEYS);
        assert_eq!(state.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![1024.0, 4.0, 0.25, 10.0, 1.0]);
        let mut t = GradScaler::new();
        t.load_state_dict(&state).unwrap();
        assert_eq!(t.state_dict().unwrap(), state);
        assert_eq!((t.get_scale().unwrap(), t.growth_tracker().unwrap()), (1024.0, 1));

        assert!(t.load_state_dict(&[]).unwrap_err().message.contains("empty"));
        let missing: Vec<(String, f64)> = state.iter().filter(|(k, _)| k != "scale").cloned().collect();
        assert!(t.load_state_dict(&missing).unwrap_err().message.contains("no \"scale\""));
        let mut bad = state.clone();
        bad[4].1 = 1.5;
        assert!(t.load_state_dict(&bad).unwrap_err().message.contains("not a non-negative integer"));
        let mut bad = state.clone();
        bad[1].1 = 0.5;
        assert!(t.load_state_dict(&bad).unwrap_err().message.contains("growth_factor"));
        assert_eq!(t.state_dict().unwrap(), state, "a failed load changes nothing");
        assert!(GradScaler::with_settings(GradScalerSettings {
            init_scale: 0.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 1
        })
        .is_err());
        assert!(GradScaler::with_settings(GradScalerSettings {
            init_scale: 1.0,
            growth_factor: 2.0,
            backoff_factor: 1.5,
            growth_interval: 1
        })
        .is_err());
        assert!(GradScaler::with_settings(GradScalerSettings {
            init_scale: 1.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 0
        })
        .is_err());
    }

    /// Once placed, the scale and the tracker live in device tensors that
    /// the update changes in place (a captured step keeps reading them);
    /// a loaded state goes into them.
    #[test]
    fn the_numbers_live_on_the_device() {
        let mut s = GradScaler::new();
        s.place_on(Device::Cpu).unwrap();
        let scale = s.on_device.as_ref().unwrap().scale.shallow_clone();
        let p = param_with_grad(&s, &[1.0, f32::INFINITY]);
        s.unscale_on_device(0, &[p.shallow_clone()]).unwrap();
        let found = s.found_inf_for_step(0, &[p]).unwrap();
        assert_eq!(found.double_value(&[]), 1.0);
        assert!(s.found_inf_for_step(0, &[]).unwrap_err().message.contains("already called"));
        s.update().unwrap();
        assert_eq!(scale.double_value(&[]), 32768.0, "updated in place");
        assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (32768.0, 0));
        let mut state = s.state_dict().unwrap();
        state[0].1 = 1024.0;
        state[4].1 = 7.0;
        s.load_state_dict(&state).unwrap();
        assert_eq!(scale.double_value(&[]), 1024.0);
        assert_eq!(s.growth_tracker().unwrap(), 7);
        // An optimizer without gradients finds nothing.
        let no_grad = Tensor::zeros([1], (Kind::Float, tch::Device::Cpu));
        assert_eq!(s.found_inf_for_step(2, &[no_grad]).unwrap().double_value(&[]), 0.0);
        s.update().unwrap();
        assert_eq!(s.growth_tracker().unwrap(), 8);
    }

    /// Iterations without gradients leave the scale where no device holds
    /// it (the first gradients' device gets it), updated on the host.
    #[test]
    fn without_gradients_the_scale_stays_unplaced() {
        let mut s = GradScaler::with_settings(GradScalerSettings { growth_interval: 2, ..Default::default() }).unwrap();
        let no_grad = Tensor::zeros([1], (Kind::Float, tch::Device::Cpu));
        for _ in 0..2 {
            s.unscale_on_device(0, &[no_grad.shallow_clone()]).unwrap();
            s.update().unwrap();
        }
        assert!(s.on_device.is_none());
        assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (131072.0, 0));
        let p = param_with_grad(&s, &[1.0]);
        assert!(!s.unscale(0, &[p]).unwrap());
        assert!(s.on_device.is_some());
        s.update().unwrap();
        assert_eq!((s.get_scale().unwrap(), s.growth_tracker().unwrap()), (131072.0, 1));
    }
}

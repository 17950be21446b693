//! Lightning 2.6's weight averaging callbacks: `EMAWeightAveraging` (an
//! exponential moving average of the weights) and `WeightAveraging`
//! (stochastic weight averaging: their equal average), over torch's
//! `AveragedModel` with `use_buffers=True` by default. The averaged copy
//! is updated after optimizer steps (and epochs) as the options say,
//! validation runs with it, training ends with its values in the model,
//! and checkpoints hold it as their `state_dict`, the trained weights as
//! `current_model_state` and the count as `averaging_state`.
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::tensor::device::Device;
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::SharedModel;
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

/// When and how the average is updated (Lightning's `EMAWeightAveraging`
/// arguments; `decay` `None` is `WeightAveraging`'s equal average).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightAveragingOptions {
    /// The EMA decay in [0, 1] (default 0.999); `None` averages every
    /// update equally (SWA).
    pub decay: Option<f64>,
    /// Average the buffers too (BatchNorm statistics; default true);
    /// otherwise they are copied from the model at each update.
    pub use_buffers: bool,
    /// Update after every n-th optimizer step (step index divisible by it;
    /// default 1; 0 never updates per step).
    pub update_every_n_steps: i64,
    /// Update per step only from this step index on (default none).
    pub update_starting_at_step: Option<i64>,
    /// Also update at the end of every epoch from this one on (default
    /// none).
    pub update_starting_at_epoch: Option<i64>,
}

impl Default for WeightAveragingOptions {
    fn default() -> Self {
        WeightAveragingOptions {
            decay: Some(0.999),
            use_buffers: true,
            update_every_n_steps: 1,
            update_starting_at_step: None,
            update_starting_at_epoch: None,
        }
    }
}

impl WeightAveragingOptions {
    /// Checks the options as Lightning and torch do.
    pub fn validate(&self) -> Result<()> {
        if let Some(d) = self.decay {
            if !(0.0..=1.0).contains(&d) {
                return Err(Error::invalid(format!("weight averaging: decay {d} is not in [0, 1]")));
            }
        }
        if self.update_every_n_steps < 0 {
            return Err(Error::invalid("weight averaging: update_every_n_steps must be >= 0"));
        }
        if self.update_starting_at_step.is_some_and(|s| s < 0) || self.update_starting_at_epoch.is_some_and(|e| e < 0) {
            return Err(Error::invalid("weight averaging: a starting step or epoch must be >= 0"));
        }
        Ok(())
    }
}

/// The callback. Its averaged copy lives on the model's device.
pub struct WeightAveraging {
    opts: WeightAveragingOptions,
    /// The averaged state_dict (parameters and buffers by name); `None`
    /// outside fit.
    average: Option<Vec<(String, Tensor)>>,
    /// Models averaged so far (torch's `n_averaged`).
    n_averaged: i64,
    latest_update_step: i64,
    latest_update_epoch: i64,
    /// Whether the model holds the average now (inside validation).
    swapped: bool,
}

impl WeightAveraging {
    /// The callback with `opts` (checked).
    pub fn new(opts: WeightAveragingOptions) -> Result<Self> {
        opts.validate()?;
        Ok(WeightAveraging {
            opts,
            average: None,
            n_averaged: 0,
            latest_update_step: 0,
            latest_update_epoch: -1,
            swapped: false,
        })
    }

    /// Lightning's `should_update` of `EMAWeightAveraging`.
    fn should_update(&self, step_idx: Option<i64>, epoch_idx: Option<i64>) -> bool {
        let o = &self.opts;
        if let Some(step) = step_idx {
            let started = o.update_starting_at_step.is_none_or(|s| step >= s);
            if started && o.update_every_n_steps > 0 && step % o.update_every_n_steps == 0 {
                return true;
            }
        }
        epoch_idx.is_some_and(|e| o.update_starting_at_epoch.is_some_and(|s| e >= s))
    }

    /// A copy of the model's state_dict (torch's `deepcopy` of the module:
    /// the names of a tied tensor share one copy).
    fn copy_of(model: &SharedModel) -> Result<Vec<(String, Tensor)>> {
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        crate::nn::copy_state_tied(&m.state_dict(), &mut crate::optim::deep_copy)
    }

    /// torch's `AveragedModel.update_parameters`.
    fn update(&mut self, model: &SharedModel) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        // Which entries are parameters matters only when buffers are copied.
        let params: std::collections::HashSet<String> = if self.opts.use_buffers {
            Default::default()
        } else {
            m.named_parameters().into_iter().map(|(k, _)| k).collect()
        };
        let current = m.state_dict();
        if current.len() != average.len() {
            return Err(Error::state("weight averaging: the model's state_dict changed during fit"));
        }
        // A tied tensor is averaged once (its later names share the copy).
        let repeated = crate::nn::repeated_entries(&current);
        for (((name, avg), (_, cur)), _) in average.iter().zip(&current).zip(&repeated).filter(|(_, r)| !**r) {
            let mut avg = avg.shallow_clone();
            let cur = cur.f_detach()?;
            let averaged = self.opts.use_buffers || params.contains(name);
            if self.n_averaged == 0 || !averaged {
                avg.f_copy_(&cur)?;
                continue;
            }
            let next = match self.opts.decay {
                // decay * ema + (1 - decay) * current, torch's get_ema_avg_fn.
                Some(d) => cur.f_mul_scalar(1.0 - d)?.f_add(&avg.f_mul_scalar(d)?)?,
                None => swa_step(&avg, &cur, self.n_averaged)?,
            };
            avg.f_copy_(&next)?;
        }
        self.n_averaged += 1;
        Ok(())
    }

    /// Exchanges the model's values with the average's (validation).
    fn swap(&mut self, model: &SharedModel) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        let current = m.state_dict();
        let repeated = crate::nn::repeated_entries(&current);
        for (((_, avg), (_, cur)), _) in average.iter().zip(&current).zip(&repeated).filter(|(_, r)| !**r) {
            let tmp = crate::optim::deep_copy(avg)?;
            avg.shallow_clone().f_copy_(cur)?;
            cur.shallow_clone().f_copy_(&tmp)?;
        }
        self.swapped = !self.swapped;
        Ok(())
    }

    /// Copies the average into the model (the end of training).
    fn copy_to_model(&self, model: &SharedModel) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        let current = m.state_dict();
        let repeated = crate::nn::repeated_entries(&current);
        for (((_, avg), (_, cur)), _) in average.iter().zip(&current).zip(&repeated).filter(|(_, r)| !**r) {
            cur.shallow_clone().f_copy_(avg)?;
        }
        Ok(())
    }
}

/// torch's `get_swa_avg_fn` on the CPU: `avg + (cur - avg) / (n + 1)` with
/// `n` a long tensor; elsewhere its foreach form, `lerp` by `1 / (n + 1)`
/// (a float32 reciprocal), for floating tensors. Integer buffers (such as
/// BatchNorm's `num_batches_tracked`) take the CPU form on every device,
/// where torch's foreach form refuses them.
fn swa_step(avg: &Tensor, cur: &Tensor, n: i64) -> Result<Tensor> {
    let count = Tensor::f_from_slice(&[n + 1])?.f_reshape([0i64; 0])?;
    if Device::of(avg)? != Device::Cpu && avg.is_floating_point() {
        let weight = count.f_reciprocal()?.f_double_value(&[])?;
        return Ok(avg.f_lerp(cur, weight)?);
    }
    let count = crate::tensor::device::to_device_of(&count, avg)?;
    Ok(avg.f_add(&cur.f_sub(avg)?.f_div(&count)?)?)
}

impl Callback for WeightAveraging {
    fn name(&self) -> String {
        if self.opts.decay.is_some() { "EMAWeightAveraging" } else { "WeightAveraging" }.to_string()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        let Some(model) = ctx.model.clone() else { return Ok(()) };
        match ctx.hook {
            Hook::Setup if ctx.stage == "fit" => {
                self.average = Some(Self::copy_of(&model)?);
                self.n_averaged = 0;
                self.swapped = false;
            }
            Hook::TrainBatchEnd => {
                let step = ctx.state.global_step;
                if step > self.latest_update_step && self.should_update(Some(step - 1), None) {
                    self.update(&model)?;
                    self.latest_update_step = step;
                }
            }
            Hook::TrainEpochEnd => {
                let epoch = ctx.state.epoch;
                if epoch > self.latest_update_epoch && self.should_update(None, Some(epoch)) {
                    self.update(&model)?;
                    self.latest_update_epoch = epoch;
                }
            }
            Hook::ValidationEpochStart if ctx.stage == "fit" && !self.swapped => self.swap(&model)?,
            Hook::ValidationEpochEnd if ctx.stage == "fit" && self.swapped => self.swap(&model)?,
            // A failure inside validation: the trained weights go back
            // into the model before anything (OnExceptionCheckpoint) saves.
            Hook::Exception if self.swapped => {
                // Best effort: the run's own error is the one reported,
                // and the callbacks after this one must still run.
                let _ = self.swap(&model);
            }
            Hook::TrainEnd => self.copy_to_model(&model)?,
            Hook::Teardown if ctx.stage == "fit" => self.average = None,
            _ => {}
        }
        Ok(())
    }

    fn state_dict(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("latest_update_step".to_string(), self.latest_update_step.to_string())])
    }

    fn load_state_dict(&mut self, state: &BTreeMap<String, String>) -> Result<()> {
        if let Some(v) = state.get("latest_update_step") {
            self.latest_update_step =
                v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    Error::format(format!("weight averaging: latest_update_step {v:?} is not a count"))
                })?;
        }
        Ok(())
    }

    fn lightning_state_key(&self) -> Option<String> {
        Some(self.name())
    }

    fn on_save_tensors(&mut self, ck: &mut Checkpoint) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let current = std::mem::take(&mut ck.state_dict);
        ck.state_dict =
            average.iter().map(|(k, t)| Ok((k.clone(), crate::optim::deep_copy(t)?))).collect::<Result<_>>()?;
        ck.current_model_state = Some(current);
        ck.averaging_state =
            vec![("n_averaged".to_string(), Tensor::f_from_slice(&[self.n_averaged])?.f_reshape([0i64; 0])?)];
        Ok(())
    }

    fn on_load_tensors(&mut self, ck: &Checkpoint, model: &SharedModel, prefix: &str) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
        let names = m.state_dict().into_iter().map(|(k, _)| k).collect();
        let saved_average = ck.weights_for(&names, prefix);
        let _guard = tch::no_grad_guard();
        let by_name: BTreeMap<&str, &Tensor> = saved_average.iter().map(|(k, t)| (k.as_str(), t)).collect();
        let current = ck.current_model_state.as_ref().map(|c| ck.named_for(c, &names, prefix));
        // Without a current state (not written by weight averaging) both
        // start from the state_dict, which the model already holds.
        for (name, avg) in average {
            let t = by_name.get(name.as_str()).ok_or_else(|| {
                Error::format(format!("weight averaging: the checkpoint's state_dict lacks {name:?}"))
            })?;
            avg.shallow_clone().f_copy_(&crate::tensor::device::to_device_of(&t.f_to_kind(avg.kind())?, avg)?)?;
        }
        if let Some(current) = current {
            m.load_state_dict(&current, true)?;
            let n =
                ck.averaging_state.iter().find(|(k, _)| k == "n_averaged").ok_or_else(|| {
                    Error::format("weight averaging: the checkpoint's averaging_state lacks n_averaged")
                })?;
            let n = n.1.f_to_kind(Kind::Int64)?.f_reshape([1i64])?.f_int64_value(&[0])?;
            if n < 0 {
                return Err(Error::format(format!("weight averaging: n_averaged {n} is negative")));
            }
            self.n_averaged = n;
        }
        Ok(())
    }
}

//! Lightning's `StochasticWeightAveraging` callback: from an epoch on, the
//! learning rate anneals to an SWA lr (torch's `SWALR`, in place of the
//! run's scheduler), every epoch start adds the weights to an equal
//! average, and training ends with the average in the model. A model
//! with BatchNorms trains one epoch more, forward only, to recompute
//! their statistics for the averaged weights.
//!
//! One departure: Lightning's BatchNorm epoch ends with an optimizer step
//! on the previous epoch's leftover gradients (its accumulation window
//! closes at the last batch), which moves the weights off the average
//! after their statistics were taken. Here that epoch takes no step, so
//! the model ends with exactly the averaged weights.
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::optim::scheduler::{AnnealStrategy, SwaLr};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::{Interval, OptimizerConfig, SchedulerConfig, SharedModel};
use std::collections::{BTreeMap, HashSet};
use tch::Tensor;

/// The name of the callback's state in checkpoints (Lightning's).
const STATE_KEY: &str = "StochasticWeightAveraging";

/// The most SWA lrs (one per param group) the options may list.
pub(crate) const MAX_SWA_LRS: usize = 4096;

/// When averaging starts (Lightning's `swa_epoch_start`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SwaStart {
    /// From this epoch, counted from 1 (>= 1).
    Epoch(i64),
    /// From epoch `int(fraction * max_epochs)`, the fraction in [0, 1].
    Fraction(f64),
}

/// The callback's arguments; the defaults are Lightning's but for
/// `swa_lrs`, which has none.
#[derive(Debug, Clone, PartialEq)]
pub struct StochasticWeightAveragingOptions {
    /// The SWA lr of every param group (one value), or of each.
    pub swa_lrs: Vec<f64>,
    /// When averaging starts (default: 0.8 of max_epochs).
    pub swa_epoch_start: SwaStart,
    /// Epochs of annealing to the SWA lrs (default 10).
    pub annealing_epochs: i64,
    /// Cosine (default) or linear annealing.
    pub annealing_strategy: AnnealStrategy,
    /// Keep the average on the CPU (default, Lightning's `device="cpu"`);
    /// otherwise on the model's device (`device=None`).
    pub average_on_cpu: bool,
}

impl StochasticWeightAveragingOptions {
    /// Lightning's defaults with `swa_lrs`.
    pub fn new(swa_lrs: Vec<f64>) -> Self {
        StochasticWeightAveragingOptions {
            swa_lrs,
            swa_epoch_start: SwaStart::Fraction(0.8),
            annealing_epochs: 10,
            annealing_strategy: AnnealStrategy::Cos,
            average_on_cpu: true,
        }
    }

    /// Lightning's checks.
    pub fn validate(&self) -> Result<()> {
        match self.swa_epoch_start {
            SwaStart::Epoch(e) if e < 1 => {
                return Err(Error::invalid(format!("swa_epoch_start should be a >0 integer, got {e}")))
            }
            SwaStart::Fraction(f) if !(0.0..=1.0).contains(&f) => {
                return Err(Error::invalid(format!("swa_epoch_start should be a float between 0 and 1, got {f}")))
            }
            _ => {}
        }
        if self.swa_lrs.is_empty() || self.swa_lrs.len() > MAX_SWA_LRS {
            return Err(Error::invalid(format!("swa_lrs: give 1 to {MAX_SWA_LRS} learning rates")));
        }
        if let Some(lr) = self.swa_lrs.iter().find(|lr| !(lr.is_finite() && **lr > 0.0)) {
            return Err(Error::invalid(format!("swa_lrs should be positive floats, got {lr}")));
        }
        if self.annealing_epochs < 0 {
            return Err(Error::invalid(format!("annealing_epochs must be >= 0, got {}", self.annealing_epochs)));
        }
        Ok(())
    }
}

/// The callback.
pub struct StochasticWeightAveraging {
    opts: StochasticWeightAveragingOptions,
    /// The first averaging epoch (0-based), once fit starts.
    swa_start: i64,
    /// The last averaging epoch (0-based; `None`: no epoch limit).
    swa_end: Option<i64>,
    /// The model's state_dict when fit set up, its parameters averaged
    /// since (Lightning's deep copy of the module).
    average: Option<Vec<(String, Tensor)>>,
    /// The parameters' names among the average's entries.
    params: HashSet<String>,
    contains_batch_norm: bool,
    /// Whether SWALR drives the optimizer.
    initialized: bool,
    n_averaged: i64,
    latest_update_epoch: i64,
    /// BatchNorm momenta put aside during the statistics epoch.
    momenta: Option<Vec<Option<f64>>>,
    /// Off for a fast_dev_run, whose one epoch averages nothing.
    active: bool,
}

impl StochasticWeightAveraging {
    /// The callback with `opts` (checked).
    pub fn new(opts: StochasticWeightAveragingOptions) -> Result<Self> {
        opts.validate()?;
        Ok(StochasticWeightAveraging {
            opts,
            swa_start: 0,
            swa_end: None,
            average: None,
            params: HashSet::new(),
            contains_batch_norm: false,
            initialized: false,
            n_averaged: 0,
            latest_update_epoch: -1,
            momenta: None,
            active: true,
        })
    }

    /// Whether `epoch` lies in the averaging epochs.
    fn averaging(&self, epoch: i64) -> bool {
        self.swa_start <= epoch && self.swa_end.is_none_or(|end| epoch <= end)
    }

    fn on_setup(&mut self, model: &SharedModel) -> Result<()> {
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        let on = if self.opts.average_on_cpu { Some(tch::Device::Cpu) } else { None };
        // The names of a tied tensor share one copy, as in torch's deepcopy.
        self.average = Some(crate::nn::copy_state_tied(&m.state_dict(), &mut |t| {
            let copy = crate::optim::deep_copy(t)?;
            Ok(match on {
                Some(d) => copy.f_to_device(d)?,
                None => copy,
            })
        })?);
        self.params = m.named_parameters().into_iter().map(|(k, _)| k).collect();
        self.initialized = false;
        self.n_averaged = 0;
        self.latest_update_epoch = -1;
        self.momenta = None;
        self.active = true;
        Ok(())
    }

    fn on_fit_start(&mut self, ctx: &mut HookContext) -> Result<()> {
        if ctx.state.manual_optimization {
            return Err(Error::unsupported(
                "StochasticWeightAveraging needs automatic optimization (its SWALR steps the optimizer's lr)",
            ));
        }
        if ctx.state.fast_dev_run {
            self.active = false;
            return Ok(());
        }
        let optimizers = ctx.optimizers.as_deref().unwrap_or_default();
        if optimizers.len() != 1 {
            return Err(Error::invalid("StochasticWeightAveraging works with 1 optimizer"));
        }
        if optimizers[0].schedulers.len() > 1 {
            return Err(Error::invalid("StochasticWeightAveraging is not supported for more than 1 lr_scheduler"));
        }
        self.lrs_for(optimizers[0].optimizer.param_groups().len())?;
        let max_epochs = ctx.state.max_epochs;
        let start = match self.opts.swa_epoch_start {
            SwaStart::Epoch(e) => e,
            SwaStart::Fraction(f) => {
                let m = max_epochs.ok_or_else(|| {
                    Error::invalid(
                        "StochasticWeightAveraging with swa_epoch_start as a fraction needs max_epochs; give an epoch",
                    )
                })?;
                (m as f64 * f) as i64
            }
        };
        self.swa_start = (start - 1).max(0);
        self.swa_end = max_epochs.map(|m| m - 1);
        if let Some(end) = self.swa_end.filter(|end| self.swa_start > *end) {
            // Lightning would end such a fit with the weights of its setup.
            return Err(Error::invalid(format!(
                "StochasticWeightAveraging: swa_epoch_start {start} is after the last epoch ({})",
                end + 1
            )));
        }
        let model = ctx.model.clone().ok_or_else(|| Error::state("StochasticWeightAveraging: no model"))?;
        self.contains_batch_norm = model.lock().unwrap_or_else(|p| p.into_inner()).has_batch_norm()?;
        if self.contains_batch_norm {
            // One epoch more, forward only, for the BatchNorm statistics.
            ctx.state.max_epochs = max_epochs.map(|m| m + 1);
        }
        Ok(())
    }

    /// The SWA lr of each of `groups` param groups (one given for all, or
    /// one per group).
    fn lrs_for(&self, groups: usize) -> Result<Vec<f64>> {
        match self.opts.swa_lrs.len() {
            1 => Ok(vec![self.opts.swa_lrs[0]; groups]),
            n if n == groups => Ok(self.opts.swa_lrs.clone()),
            n => Err(Error::invalid(format!(
                "StochasticWeightAveraging: {n} swa_lrs for the optimizer's {groups} param groups"
            ))),
        }
    }

    /// Puts SWALR in the place of the optimizer's scheduler (Lightning's
    /// initialization at its first averaging epoch, or a resume's).
    fn install_scheduler(&mut self, configs: &mut [OptimizerConfig], max_epochs: Option<i64>) -> Result<()> {
        let cfg = configs.first_mut().ok_or_else(|| Error::state("StochasticWeightAveraging: no optimizer"))?;
        let lrs = self.lrs_for(cfg.optimizer.param_groups().len())?;
        for (g, lr) in cfg.optimizer.param_groups_mut().iter_mut().zip(&lrs) {
            g.initial_lr = Some(*lr);
        }
        let last_epoch = match self.opts.annealing_strategy {
            AnnealStrategy::Cos => max_epochs.unwrap_or(-1),
            AnnealStrategy::Linear => -1,
        };
        let swa = SwaLr::new(
            cfg.optimizer.as_mut(),
            &lrs,
            self.opts.annealing_epochs,
            self.opts.annealing_strategy,
            last_epoch,
        )?;
        let swa = SchedulerConfig {
            scheduler: Box::new(swa),
            interval: Interval::Epoch,
            frequency: 1,
            monitor: None,
            name: None,
            strict: true,
        };
        match cfg.schedulers.first_mut() {
            Some(old) => {
                if old.interval != Interval::Epoch || old.frequency != 1 {
                    eprintln!(
                        "StochasticWeightAveraging is only supported every epoch; replacing {} (every {} {:?})",
                        old.scheduler.name(),
                        old.frequency,
                        old.interval
                    );
                }
                *old = swa;
            }
            None => cfg.schedulers.push(swa),
        }
        self.initialized = true;
        Ok(())
    }

    /// torch's `update_parameters` of the equal average.
    fn update(&mut self, model: &SharedModel) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        let current: BTreeMap<String, Tensor> = m.named_parameters().into_iter().collect();
        for (name, avg) in average.iter().filter(|(k, _)| self.params.contains(k)) {
            let cur = current
                .get(name)
                .ok_or_else(|| Error::state(format!("StochasticWeightAveraging: the model lost parameter {name:?}")))?;
            let cur = crate::tensor::device::to_device_of(&cur.f_detach()?, avg)?;
            let next = if self.n_averaged == 0 {
                cur
            } else {
                // avg + (cur - avg) / (n + 1), the count a long tensor.
                let count = Tensor::f_from_slice(&[self.n_averaged + 1])?.f_reshape([0i64; 0])?;
                let count = crate::tensor::device::to_device_of(&count, avg)?;
                avg.f_add(&cur.f_sub(avg)?.f_div(&count)?)?
            };
            avg.shallow_clone().f_copy_(&next)?;
        }
        self.n_averaged += 1;
        Ok(())
    }

    /// Copies the averaged parameters into the model (buffers stay).
    fn transfer(&self, model: &SharedModel) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let m = model.lock().unwrap_or_else(|p| p.into_inner());
        let _guard = tch::no_grad_guard();
        let by_name: BTreeMap<&str, &Tensor> = average.iter().map(|(k, t)| (k.as_str(), t)).collect();
        for (name, p) in m.named_parameters() {
            if let Some(avg) = by_name.get(name.as_str()) {
                p.f_detach()?.f_copy_(&crate::tensor::device::to_device_of(avg, &p)?)?;
            }
        }
        Ok(())
    }

    fn on_train_epoch_start(&mut self, ctx: &mut HookContext, model: &SharedModel) -> Result<()> {
        let epoch = ctx.state.epoch;
        if !self.initialized && self.averaging(epoch) {
            if epoch != self.swa_start {
                eprintln!("StochasticWeightAveraging is initializing after swa_start without any checkpoint data");
            }
            let max_epochs = ctx.state.max_epochs;
            let configs = ctx.optimizers.as_deref_mut().ok_or_else(|| Error::state("no optimizers in this hook"))?;
            self.install_scheduler(configs, max_epochs)?;
        }
        if self.averaging(epoch) && epoch > self.latest_update_epoch {
            self.update(model)?;
            self.latest_update_epoch = epoch;
        }
        if self.swa_end.is_some_and(|end| epoch == end + 1) {
            self.transfer(model)?;
            let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
            self.momenta = Some(m.reset_batch_norms()?);
            ctx.state.skip_backward = true;
        }
        Ok(())
    }

    fn on_train_end(&mut self, ctx: &mut HookContext, model: &SharedModel) -> Result<()> {
        let last = ctx.state.epoch - 1;
        match self.swa_end {
            Some(end) if self.contains_batch_norm && last == end + 1 => {
                ctx.state.max_epochs = ctx.state.max_epochs.map(|m| m - 1);
                if let Some(momenta) = self.momenta.take() {
                    model.lock().unwrap_or_else(|p| p.into_inner()).restore_batch_norm_momenta(&momenta)?;
                }
            }
            Some(end) if last == end => self.transfer(model)?,
            None => self.transfer(model)?,
            _ => {}
        }
        Ok(())
    }
}

impl Callback for StochasticWeightAveraging {
    fn name(&self) -> String {
        STATE_KEY.to_string()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        let Some(model) = ctx.model.clone() else { return Ok(()) };
        if !self.active && ctx.hook != Hook::Setup {
            return Ok(());
        }
        match ctx.hook {
            Hook::Setup if ctx.stage == "fit" => self.on_setup(&model)?,
            Hook::FitStart => self.on_fit_start(ctx)?,
            Hook::TrainEpochStart => self.on_train_epoch_start(ctx, &model)?,
            Hook::TrainEnd => self.on_train_end(ctx, &model)?,
            // A failure inside the statistics epoch: the momenta come back.
            Hook::Exception => {
                if let Some(momenta) = self.momenta.take() {
                    let _ = model.lock().unwrap_or_else(|p| p.into_inner()).restore_batch_norm_momenta(&momenta);
                }
            }
            Hook::Teardown if ctx.stage == "fit" => self.average = None,
            _ => {}
        }
        Ok(())
    }

    fn state_dict(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("n_averaged".to_string(), self.n_averaged.to_string()),
            ("latest_update_epoch".to_string(), self.latest_update_epoch.to_string()),
            ("swalr".to_string(), self.initialized.to_string()),
        ])
    }

    fn load_state_dict(&mut self, state: &BTreeMap<String, String>) -> Result<()> {
        let int = |key: &str, min: i64| -> Result<i64> {
            let v = state.get(key).ok_or_else(|| Error::format(format!("StochasticWeightAveraging: no {key}")))?;
            v.parse::<i64>()
                .ok()
                .filter(|n| *n >= min && *n <= crate::checkpoint::MAX_COUNTER)
                .ok_or_else(|| Error::format(format!("StochasticWeightAveraging: {key} {v:?} is not a count >= {min}")))
        };
        let n_averaged = int("n_averaged", 0)?;
        let latest_update_epoch = int("latest_update_epoch", -1)?;
        let swalr = match state.get("swalr").map(String::as_str) {
            Some("true") => true,
            Some("false") => false,
            other => return Err(Error::format(format!("StochasticWeightAveraging: swalr {other:?} is not a flag"))),
        };
        self.n_averaged = n_averaged;
        self.latest_update_epoch = latest_update_epoch;
        // SWALR goes back in restore_schedulers, before the checkpoint's
        // scheduler state (its own) loads into it.
        self.initialized = swalr;
        Ok(())
    }

    fn restore_schedulers(&mut self, optimizers: &mut [OptimizerConfig]) -> Result<()> {
        if !self.initialized {
            return Ok(());
        }
        if optimizers.len() != 1 || optimizers[0].schedulers.len() > 1 {
            return Err(Error::invalid("StochasticWeightAveraging works with 1 optimizer and at most 1 lr_scheduler"));
        }
        // The epoch limit matters only to the state, which the checkpoint's
        // scheduler state replaces.
        self.install_scheduler(optimizers, None)
    }

    fn lightning_state_key(&self) -> Option<String> {
        Some(STATE_KEY.to_string())
    }

    fn on_save_tensors(&mut self, ck: &mut Checkpoint) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let copy = average.iter().map(|(k, t)| Ok((k.clone(), crate::optim::deep_copy(t)?))).collect::<Result<_>>()?;
        ck.callback_tensors.insert(STATE_KEY.to_string(), copy);
        Ok(())
    }

    fn on_load_tensors(&mut self, ck: &Checkpoint, model: &SharedModel, prefix: &str) -> Result<()> {
        let Some(average) = &self.average else { return Ok(()) };
        let Some(saved) = ck.callback_tensors.get(STATE_KEY) else {
            if self.n_averaged > 0 {
                return Err(Error::format(format!(
                    "StochasticWeightAveraging: the checkpoint counts {} averaged models but holds no average",
                    self.n_averaged
                )));
            }
            return Ok(());
        };
        // Named as the model names them (a Lightning file's names carry
        // the module's attribute).
        let names = model.lock().unwrap_or_else(|p| p.into_inner()).state_dict().into_iter().map(|(k, _)| k).collect();
        let saved = ck.named_for(saved, &names, prefix);
        let by_name: BTreeMap<&str, &Tensor> = saved.iter().map(|(k, t)| (k.as_str(), t)).collect();
        let _guard = tch::no_grad_guard();
        for (name, avg) in average {
            let t = by_name.get(name.as_str()).ok_or_else(|| {
                Error::format(format!("StochasticWeightAveraging: the checkpoint's average lacks {name:?}"))
            })?;
            if t.size() != avg.size() {
                return Err(Error::format(format!(
                    "StochasticWeightAveraging: the checkpoint's average {name:?} has shape {:?}, the model's {:?}",
                    t.size(),
                    avg.size()
                )));
            }
            avg.shallow_clone().f_copy_(&crate::tensor::device::to_device_of(&t.f_to_kind(avg.kind())?, avg)?)?;
        }
        Ok(())
    }
}

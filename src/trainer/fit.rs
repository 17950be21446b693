//! The fit loop: training epochs with optimizer steps, scheduler steps,
//! validation after each epoch, logging and progress output.
use super::context::{Stage, StepContext};
use super::metrics::MetricStore;
use super::module::{Interval, OptimizerConfig};
use super::source::BatchSource;
use super::{batch_size_of, progress, set_mode, LightningModule, Trainer};
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::loggers::CsvLogger;
use std::collections::BTreeMap;
use std::time::Instant;
use tch::Tensor;

/// Checks the value a training_step returned before it is used.
fn check_loss(loss: &Tensor, detect_nonfinite: bool, at: &str) -> Result<f64> {
    if loss.numel() != 1 {
        return Err(Error::shape(format!("{at}: the loss must have one element, got shape {:?}", loss.size())));
    }
    if !crate::tensor::dtype::is_floating(loss.f_kind()?) {
        return Err(Error::dtype(format!("{at}: the loss must be floating, got {:?}", loss.kind())));
    }
    if !loss.requires_grad() {
        return Err(Error::state(format!(
            "{at}: the loss does not require grad (was it computed from the model's parameters?)"
        )));
    }
    let value = loss.f_double_value(&vec![0; loss.dim()])?;
    if detect_nonfinite && !value.is_finite() {
        return Err(Error::new(ErrorCode::NonFinite, format!("{at}: the loss is {value}; no update was made")));
    }
    Ok(value)
}

fn step_schedulers(
    configs: &mut [OptimizerConfig],
    interval: Interval,
    count: i64,
    metrics: &BTreeMap<String, f64>,
) -> Result<()> {
    for cfg in configs.iter_mut() {
        let opt = &mut cfg.optimizer;
        if let Some(s) = cfg.scheduler.as_mut() {
            if s.interval != interval || count % s.frequency.max(1) != 0 {
                continue;
            }
            let metric = match &s.monitor {
                Some(name) => Some(*metrics.get(name).ok_or_else(|| {
                    Error::state(format!(
                        "scheduler {} monitors `{name}`, which was not logged; logged: {:?}",
                        s.scheduler.name(),
                        metrics.keys().collect::<Vec<_>>()
                    ))
                })?),
                None => None,
            };
            s.scheduler.step(opt.as_mut(), metric).ctx(format!("{} scheduler step", s.scheduler.name()))?;
        }
    }
    Ok(())
}

impl Trainer {
    /// Trains `module` on `train`, validating on `val` after each epoch when
    /// the module has a validation step (Lightning's `trainer.fit`).
    pub fn fit(
        &mut self,
        module: &mut dyn LightningModule,
        train: &dyn BatchSource,
        val: Option<&dyn BatchSource>,
    ) -> Result<()> {
        if let Some(s) = self.opts.seed {
            crate::seed_everything(s);
        }
        self.global_step = 0;
        self.current_epoch = 0;
        self.callback_metrics.clear();
        let mut optimizers = module.configure_optimizers().ctx("configure_optimizers")?;
        if optimizers.is_empty() {
            return Err(Error::state("configure_optimizers returned no optimizer"));
        }
        let mut logger =
            if self.opts.enable_csv_logger { Some(CsvLogger::create(&self.opts.default_root_dir)?) } else { None };
        self.log_dir = logger.as_ref().map(|l| l.dir().to_path_buf());
        let result = self.fit_epochs(module, train, val, &mut optimizers, &mut logger);
        let flushed = logger.as_ref().map_or(Ok(()), |l| l.flush());
        result.and(flushed)
    }

    fn fit_epochs(
        &mut self,
        module: &mut dyn LightningModule,
        train: &dyn BatchSource,
        val: Option<&dyn BatchSource>,
        optimizers: &mut [OptimizerConfig],
        logger: &mut Option<CsvLogger>,
    ) -> Result<()> {
        let max_epochs = self.opts.epoch_limit();
        let max_steps = self.opts.max_steps;
        let limit = self.opts.limit_train_batches.apply(train.num_batches());
        let validate = val.filter(|_| module.has_validation_step());
        let mut epoch: i64 = 0;
        while max_epochs.is_none_or(|m| epoch < m) && (max_steps < 0 || self.global_step < max_steps) {
            let started = Instant::now();
            let mut store = MetricStore::default();
            let (mut loss_sum, mut batches) = (0.0, 0usize);
            set_mode(module, true)?;
            for (i, batch) in train.batches(epoch as u64)?.enumerate() {
                if limit.is_some_and(|n| i >= n) || (max_steps >= 0 && self.global_step >= max_steps) {
                    break;
                }
                let batch = batch.ctx(format!("loading training batch {i} of epoch {epoch}"))?;
                let at = format!("training_step (epoch {epoch}, global step {}, batch {i})", self.global_step);
                let mut ctx = StepContext {
                    stage: Stage::Train,
                    epoch,
                    global_step: self.global_step,
                    batch_idx: i as i64,
                    batch_size: batch_size_of(&batch),
                    metrics: &mut store,
                };
                let loss = module.training_step(&mut ctx, &batch).map_err(|e| e.context(&at))?;
                loss_sum += check_loss(&loss, self.opts.detect_nonfinite_loss, &at)?;
                for cfg in optimizers.iter_mut() {
                    cfg.optimizer.zero_grad();
                }
                loss.f_backward().ctx(format!("{at}: backward"))?;
                for cfg in optimizers.iter_mut() {
                    cfg.optimizer.step().ctx(format!("{at}: optimizer {} step", cfg.optimizer.name()))?;
                }
                let step_index = self.global_step;
                self.global_step += 1;
                batches += 1;
                self.callback_metrics.extend(store.callback_metrics.iter().map(|(k, v)| (k.clone(), *v)));
                step_schedulers(optimizers, Interval::Step, self.global_step, &self.callback_metrics)?;
                let step_values = store.take_step_values();
                if (step_index + 1) % self.opts.log_every_n_steps == 0 {
                    if let Some(l) = logger.as_mut() {
                        l.log_metrics(&step_values, epoch, step_index);
                    }
                }
            }
            let mut epoch_metrics = store.end_epoch();
            self.callback_metrics.extend(store.callback_metrics);
            if let Some(v) = validate {
                let (m, _) = self.run_eval(Stage::Validate, module, v, epoch)?;
                epoch_metrics.extend(m);
            }
            if let Some(l) = logger.as_mut() {
                l.log_metrics(&epoch_metrics, epoch, (self.global_step - 1).max(0));
                l.flush()?;
            }
            step_schedulers(optimizers, Interval::Epoch, epoch + 1, &self.callback_metrics)?;
            if self.opts.enable_progress_bar {
                let mut shown = epoch_metrics.clone();
                if batches > 0 {
                    shown.insert("loss".into(), loss_sum / batches as f64);
                }
                progress::epoch_line(epoch, max_epochs, batches, started.elapsed(), &shown);
            }
            epoch += 1;
            self.current_epoch = epoch;
            if batches == 0 {
                break;
            }
        }
        set_mode(module, true)?;
        Ok(())
    }
}

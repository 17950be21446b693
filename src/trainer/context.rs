//! The step context handed to every step function.
use super::metrics::{FxLogOptions, LogFlags, LogSite, MetricStore, EVAL_BATCH_LOGGING, TRAIN_BATCH_LOGGING};
use crate::error::{Error, Result};
use tch::Tensor;

/// Which loop is running.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The training loop of `fit`.
    Train = 0,
    /// Validation (inside `fit` or `validate`).
    Validate = 1,
    /// `test`.
    Test = 2,
    /// `predict`.
    Predict = 3,
}

impl Stage {
    /// Lightning's default flags for `self.log` in this stage.
    pub fn default_flags(self) -> LogFlags {
        match self {
            Stage::Train => LogFlags { on_step: true, ..LogFlags::default() },
            _ => LogFlags { on_epoch: true, ..LogFlags::default() },
        }
    }

    /// Lightning's `_FxValidator` entry of the stage's step function;
    /// `None` for predict_step, which cannot log.
    pub fn log_options(self) -> Option<FxLogOptions> {
        match self {
            Stage::Train => Some(TRAIN_BATCH_LOGGING),
            Stage::Validate | Stage::Test => Some(EVAL_BATCH_LOGGING),
            Stage::Predict => None,
        }
    }

    /// Lightning's name of the stage's step function.
    pub fn fx_name(self) -> &'static str {
        match self {
            Stage::Train => "training_step",
            Stage::Validate => "validation_step",
            Stage::Test => "test_step",
            Stage::Predict => "predict_step",
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Train => "train",
            Stage::Validate => "validate",
            Stage::Test => "test",
            Stage::Predict => "predict",
        }
    }
}

/// What a step function can read and do: where the loop is, logging, and
/// (manual optimization) the run's optimizers.
pub struct StepContext<'a> {
    /// The running loop.
    pub stage: Stage,
    /// Current epoch (0-based).
    pub epoch: i64,
    /// Optimizer steps taken so far in this fit.
    pub global_step: i64,
    /// Index of the batch within the epoch (0-based).
    pub batch_idx: i64,
    /// Number of samples in the batch (first dimension of its first tensor).
    pub batch_size: i64,
    /// The evaluation loader this batch comes from when a run has several
    /// (Lightning's `dataloader_idx`); `None` with one loader and in
    /// training. Logged names then end in `/dataloader_idx_N`.
    pub dataloader_idx: Option<usize>,
    pub(crate) metrics: &'a mut MetricStore,
    /// The run's optimizers in a manual-optimization training step.
    pub(crate) manual: Option<&'a mut (dyn super::manual::ManualControl + 'a)>,
    /// Tensors a predict step added to its prediction, which then is a
    /// tuple (what it returned first, then these) or, named, a dict.
    pub(crate) extra_outputs: AddedPredictions,
}

/// What a predict step added to its prediction: tensors, and their names
/// when it named them (a dict; empty for a tuple).
#[derive(Debug, Default)]
pub struct AddedPredictions {
    /// The tensors, in the order added.
    pub tensors: Vec<tch::Tensor>,
    /// Their names, one per tensor, or none.
    pub names: Vec<String>,
    /// The whole prediction as a value ([`StepContext::set_prediction`]),
    /// in place of tensors.
    pub value: Option<crate::nn::Value>,
}

/// Checks a metric name: non-empty, no comma, quote or newline (it becomes
/// a CSV column and a TensorBoard tag).
pub(crate) fn check_metric_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['\n', '\r', ',', '"']) {
        return Err(Error::invalid(format!(
            "metric name {name:?} must be non-empty and hold no comma, quote or newline"
        )));
    }
    Ok(())
}

impl StepContext<'_> {
    /// Adds `tensor` to this predict step's prediction, which becomes a
    /// tuple: the tensor the step returns (if any), then the added ones in
    /// order. Only in predict_step (`InvalidState` elsewhere).
    pub fn add_prediction(&mut self, tensor: tch::Tensor) -> Result<()> {
        self.check_predicting()?;
        self.check_no_value()?;
        if !self.extra_outputs.names.is_empty() {
            return Err(Error::state("this predict_step named its predictions (a dict): add this one with a name too"));
        }
        self.extra_outputs.tensors.push(tensor);
        Ok(())
    }

    /// Adds `tensor` to this predict step's prediction under `name`: the
    /// prediction is then a dict of the named tensors, in the order added
    /// (Lightning's `predict_step` returning a dict). A step that names its
    /// predictions adds them all so and writes no output of its own. Only
    /// in predict_step (`InvalidState` elsewhere); `name` non-empty and not
    /// added before (`InvalidArgument`).
    pub fn add_named_prediction(&mut self, name: &str, tensor: tch::Tensor) -> Result<()> {
        self.check_predicting()?;
        self.check_no_value()?;
        let added = &mut self.extra_outputs;
        if added.names.len() != added.tensors.len() {
            return Err(Error::state(
                "this predict_step added unnamed predictions (a tuple): a prediction is a tuple or a dict, not both",
            ));
        }
        if name.is_empty() {
            return Err(Error::invalid("a prediction's name must not be empty"));
        }
        if added.names.iter().any(|n| n == name) {
            return Err(Error::invalid(format!("this predict_step added a prediction named {name:?} already")));
        }
        added.names.push(name.to_string());
        added.tensors.push(tensor);
        Ok(())
    }

    /// Sets this predict step's whole prediction to `value`, of any shape
    /// (Lightning's `predict_step` returning nested tuples, lists, dicts,
    /// tensors, numbers and strings). The step then adds no tensors and
    /// writes no output. Only in predict_step (`InvalidState` elsewhere,
    /// and after a tensor was added or a value set).
    pub fn set_prediction(&mut self, value: crate::nn::Value) -> Result<()> {
        self.check_predicting()?;
        self.check_no_value()?;
        if !self.extra_outputs.tensors.is_empty() {
            return Err(Error::state("this predict_step added tensors to its prediction: it cannot also set it whole"));
        }
        self.extra_outputs.value = Some(value);
        Ok(())
    }

    fn check_no_value(&self) -> Result<()> {
        if self.extra_outputs.value.is_some() {
            return Err(Error::state("this predict_step set its whole prediction already"));
        }
        Ok(())
    }

    fn check_predicting(&self) -> Result<()> {
        if self.stage != Stage::Predict {
            return Err(Error::state(format!(
                "predictions can be added only in predict_step, not in {}",
                self.stage.name()
            )));
        }
        Ok(())
    }

    /// Logs a metric, as Lightning's `self.log(name, value, ...)`. `flags`
    /// `None` uses the stage's defaults; `batch_size` 0 uses the batch's.
    /// In barebones mode the value is dropped (a warning, once per run).
    pub fn log(&mut self, name: &str, value: f64, flags: Option<LogFlags>, batch_size: i64) -> Result<()> {
        self.log_value(name, LoggedValue::Number(value), flags, batch_size)
    }

    /// [`StepContext::log`] of a one-element tensor, which stays the
    /// caller's. A device tensor is not read in the step
    /// ([`MetricStore::log_tensor_from`]).
    pub fn log_tensor(&mut self, name: &str, value: &Tensor, flags: Option<LogFlags>, batch_size: i64) -> Result<()> {
        self.log_value(name, LoggedValue::Tensor(value), flags, batch_size)
    }

    fn log_value(&mut self, name: &str, value: LoggedValue, flags: Option<LogFlags>, batch_size: i64) -> Result<()> {
        check_metric_name(name)?;
        if batch_size < 0 {
            return Err(Error::invalid(format!("batch_size {batch_size} is negative")));
        }
        if self.stage == Stage::Predict {
            return Err(Error::state("metrics cannot be logged from predict_step"));
        }
        if let LoggedValue::Tensor(t) = value {
            super::device_metrics::check_loggable(t)?;
        }
        if super::run_settings::barebones_drops_log() {
            return Ok(());
        }
        let flags = flags.unwrap_or_else(|| self.stage.default_flags());
        let bs = if batch_size > 0 { batch_size } else { self.batch_size.max(1) };
        let site = LogSite { fx: self.stage.fx_name(), dataloader_idx: self.dataloader_idx };
        match value {
            LoggedValue::Number(v) => self.metrics.log_from(site, name, v, flags, bs as f64),
            LoggedValue::Tensor(t) => self.metrics.log_tensor_from(site, name, t, flags, bs as f64),
        }
        .map(|_| ())
    }
}

/// What a step logs: a number, or a one-element tensor.
#[derive(Clone, Copy)]
enum LoggedValue<'a> {
    Number(f64),
    Tensor(&'a Tensor),
}

//! Logged metrics: per-step values, per-epoch means weighted by batch size,
//! and the callback metrics readable after a run (Lightning's semantics).
use super::device_metrics::{self, DeviceValue};
use super::metric_map::MetricMap;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use tch::Tensor;

/// How an epoch's values of a metric combine, and the collective a synced
/// value goes through (Lightning's `reduce_fx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReduceFx {
    /// Mean weighted by batch size (the default).
    #[default]
    Mean,
    /// Sum of the values.
    Sum,
    /// Largest value.
    Max,
    /// Smallest value.
    Min,
}

impl ReduceFx {
    /// Lightning's name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceFx::Mean => "mean",
            ReduceFx::Sum => "sum",
            ReduceFx::Max => "max",
            ReduceFx::Min => "min",
        }
    }

    /// Combines two values (not for Mean, which is weighted).
    fn combine(self, a: f64, b: f64) -> f64 {
        match self {
            ReduceFx::Max => a.max(b),
            ReduceFx::Min => a.min(b),
            _ => a + b,
        }
    }
}

/// How a value logged with sync_dist is reduced: the collective, and the
/// group of ranks it runs over (0: the whole job; `n`: the `n`-th group
/// made with `new_group` in the run, Lightning's `sync_dist_group`).
pub type SyncOp = (ReduceFx, u32);

/// Reduces values over ranks in place with an operation over a group (one
/// collective per call; a rank outside the group leaves them).
pub type Reducer<'a> = &'a dyn Fn(&mut [f64], ReduceFx, u32) -> Result<()>;

/// Where a metric is aggregated and shown (Lightning's `self.log`
/// arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFlags {
    /// Record the value of each step.
    pub on_step: bool,
    /// Record the reduction over the epoch.
    pub on_epoch: bool,
    /// Show it in the progress output.
    pub prog_bar: bool,
    /// Reduce it over ranks before it is recorded (DDP).
    pub sync_dist: bool,
    /// Send it to the loggers (false: callback metrics and progress only).
    pub logger: bool,
    /// Logged from rank 0 only: never synchronized.
    pub rank_zero_only: bool,
    /// How the epoch's values combine (and the sync collective).
    pub reduce_fx: ReduceFx,
    /// With several evaluation loaders, name the metric
    /// `name/dataloader_idx_N` (Lightning's `add_dataloader_idx`).
    pub add_dataloader_idx: bool,
    /// The group a synced value is reduced over (Lightning's
    /// `sync_dist_group`): 0 for the whole job, `n` for the `n`-th group
    /// the run made with `new_group`.
    pub sync_dist_group: u32,
}

impl Default for LogFlags {
    /// Nothing recorded yet: neither on_step nor on_epoch; to the loggers;
    /// mean.
    fn default() -> Self {
        LogFlags {
            on_step: false,
            on_epoch: false,
            prog_bar: false,
            sync_dist: false,
            logger: true,
            rank_zero_only: false,
            reduce_fx: ReduceFx::Mean,
            add_dataloader_idx: true,
            sync_dist_group: 0,
        }
    }
}

impl LogFlags {
    /// The flags as `on_step=True, on_epoch=False, ...` for messages.
    pub fn describe(&self) -> String {
        let b = |v: bool| if v { "True" } else { "False" };
        format!(
            "on_step={}, on_epoch={}, prog_bar={}, sync_dist={}, logger={}, rank_zero_only={}, reduce_fx={:?}, \
             add_dataloader_idx={}, sync_dist_group={}",
            b(self.on_step),
            b(self.on_epoch),
            b(self.prog_bar),
            b(self.sync_dist),
            b(self.logger),
            b(self.rank_zero_only),
            self.reduce_fx.name(),
            b(self.add_dataloader_idx),
            self.sync_dist_group
        )
    }

    /// The collective a synced value goes through, and its group; None
    /// when not synced.
    pub(crate) fn sync_op(&self) -> Option<SyncOp> {
        (self.sync_dist && !self.rank_zero_only).then_some((self.reduce_fx, self.sync_dist_group))
    }
}

/// Lightning's `_FxValidator` entry of a function that may log: the
/// on_step / on_epoch values it allows and what an unset one resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FxLogOptions {
    /// The on_step values allowed.
    pub allowed_on_step: &'static [bool],
    /// The on_epoch values allowed.
    pub allowed_on_epoch: &'static [bool],
    /// on_step when the call leaves it unset (Lightning's `None`).
    pub default_on_step: bool,
    /// on_epoch when the call leaves it unset.
    pub default_on_epoch: bool,
}

const BOTH: &[bool] = &[false, true];

/// training_step and the training batch hooks (on_train_batch_start / end,
/// on_before / after_backward, on_before_optimizer_step,
/// on_before_zero_grad): either level, on_step by default.
pub(crate) const TRAIN_BATCH_LOGGING: FxLogOptions =
    FxLogOptions { allowed_on_step: BOTH, allowed_on_epoch: BOTH, default_on_step: true, default_on_epoch: false };

/// validation_step / test_step and their batch hooks: either level,
/// on_epoch by default.
pub(crate) const EVAL_BATCH_LOGGING: FxLogOptions =
    FxLogOptions { allowed_on_step: BOTH, allowed_on_epoch: BOTH, default_on_step: false, default_on_epoch: true };

/// The start and epoch hooks that may log (on_train_start,
/// on_train_epoch_start / end, on_validation_start, ...): on_epoch only.
pub(crate) const EPOCH_LOGGING: FxLogOptions = FxLogOptions {
    allowed_on_step: &[false],
    allowed_on_epoch: &[true],
    default_on_step: false,
    default_on_epoch: true,
};

/// Python's spelling of a bool.
fn py_bool(v: bool) -> &'static str {
    if v {
        "True"
    } else {
        "False"
    }
}

/// Python's spelling of a tuple of bools: `(False,)`, `(False, True)`.
fn py_tuple(values: &[bool]) -> String {
    match values {
        [one] => format!("({},)", py_bool(*one)),
        _ => format!("({})", values.iter().map(|v| py_bool(*v)).collect::<Vec<_>>().join(", ")),
    }
}

impl FxLogOptions {
    /// Lightning's `check_logging_and_get_default_levels` for `fx`: the
    /// unset levels take their defaults, then both must be allowed and
    /// not both false (`InvalidArgument` with Lightning's message).
    pub fn resolve(&self, fx: &str, on_step: Option<bool>, on_epoch: Option<bool>) -> Result<(bool, bool)> {
        let on_step = on_step.unwrap_or(self.default_on_step);
        let on_epoch = on_epoch.unwrap_or(self.default_on_epoch);
        for (what, value, allowed) in
            [("on_step", on_step, self.allowed_on_step), ("on_epoch", on_epoch, self.allowed_on_epoch)]
        {
            if !allowed.contains(&value) {
                return Err(Error::invalid(format!(
                    "You can't `self.log({what}={})` inside `{fx}`, must be one of {}.",
                    py_bool(value),
                    py_tuple(allowed)
                )));
            }
        }
        if !on_step && !on_epoch {
            return Err(Error::invalid(format!(
                "`self.log(on_step=False, on_epoch=False)` is not useful (in `{fx}`)."
            )));
        }
        Ok((on_step, on_epoch))
    }
}

/// Where a value is logged from: the step function or hook (Lightning's
/// `fx`) and the evaluation loader, when the run has several.
#[derive(Debug, Clone, Copy)]
pub struct LogSite<'a> {
    /// Lightning's name of the function ("validation_step",
    /// "on_train_batch_end").
    pub fx: &'a str,
    /// The loader of the batch (`None` with one loader and in training).
    pub dataloader_idx: Option<usize>,
}

#[derive(Debug, Clone, Default)]
struct EpochAccumulator {
    /// Mean: the weighted sum; otherwise the running reduction.
    value: f64,
    /// The running value instead, on a device, once a device tensor was
    /// logged under the name ([`super::device_metrics`]).
    device: Option<DeviceValue>,
    /// Mean: the sum of batch sizes.
    weight: f64,
    /// Values seen.
    count: usize,
    reduce: ReduceFx,
    prog_bar: bool,
    on_step: bool,
    /// The evaluation loader that logged it (`None`: training, or one
    /// loader).
    loader: Option<usize>,
    /// Where the name forks (before the loader suffix fulmen added).
    base_len: usize,
}

/// Metrics of one run (fit, validate, test).
#[derive(Debug, Default, Clone)]
pub struct MetricStore {
    step: MetricMap,
    epoch: BTreeMap<String, EpochAccumulator>,
    /// Latest value of every metric: epoch reductions and step values.
    pub callback_metrics: MetricMap,
    /// Metrics shown in the progress output.
    pub progress_metrics: MetricMap,
    /// Names logged with sync_dist, with their collective and group.
    sync: BTreeMap<String, SyncOp>,
    /// Names logged with logger=False.
    unlogged: BTreeSet<String>,
    /// The flags each name was first logged with in this epoch.
    flags: BTreeMap<String, LogFlags>,
    /// While a batch is split over DP replicas: per step key, the weighted
    /// sum (or running reduction), the weight and the number of values
    /// logged for it.
    split: Option<BTreeMap<String, SplitValue>>,
    /// Names logged with add_dataloader_idx off, by the loader that first
    /// logged them.
    loaders: BTreeMap<String, usize>,
    /// Step keys whose value was already reduced over ranks (logged from a
    /// hook): the next [`MetricStore::sync_step`] leaves them.
    presynced: BTreeSet<String>,
    /// An evaluation's store: step values stay out of the callback
    /// metrics (Lightning: "callback metrics don't take `_step` forked
    /// metrics" outside training).
    evaluating: bool,
    /// The loader of each value the last epoch end returned, for those
    /// logged with one.
    ended_loaders: BTreeMap<String, usize>,
    /// The step key of each name logged per step (`x_step` when forked).
    step_keys: BTreeMap<String, String>,
    /// The name of each step key (the reverse of `step_keys`).
    step_names: BTreeMap<String, String>,
    /// Values recorded so far (a captured step must record none).
    records: u64,
    /// While a step is captured in a device graph: the device tensors it
    /// logs, recorded after each replay instead ([`MetricStore::relog`]).
    capturing: Option<Vec<CapturedLog>>,
}

/// A device tensor a captured step logged: the graph writes it at each
/// replay, and [`MetricStore::relog`] logs a copy of it then, as the step
/// logged it.
pub(crate) struct CapturedLog {
    /// Where it was logged from.
    fx: String,
    loader: Option<usize>,
    name: String,
    value: Tensor,
    flags: LogFlags,
    batch_size: f64,
}

impl Clone for CapturedLog {
    /// Shares the tensor.
    fn clone(&self) -> Self {
        CapturedLog { fx: self.fx.clone(), name: self.name.clone(), value: self.value.shallow_clone(), ..*self }
    }
}

impl std::fmt::Debug for CapturedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CapturedLog({:?} on {:?})", self.name, self.value.device())
    }
}

/// A value to record: a number, or a tensor from
/// [`device_metrics::as_logged`].
#[derive(Clone, Copy)]
enum Logged<'a> {
    Host(f64),
    Device(&'a Tensor),
}

impl Logged<'_> {
    /// The value, owning its tensor.
    fn to_owned(self) -> StepValue {
        match self {
            Logged::Host(v) => StepValue::Host(v),
            Logged::Device(t) => StepValue::Device(DeviceValue(t.shallow_clone())),
        }
    }
}

/// A step value to record.
#[derive(Debug, Clone)]
enum StepValue {
    Host(f64),
    Device(DeviceValue),
}

/// The values a step key got from the chunks of a batch split over DP
/// replicas so far, with their batch sizes.
type SplitValue = Vec<(StepValue, f64)>;

impl StepValue {
    /// The value, borrowing its tensor.
    fn as_logged(&self) -> Logged<'_> {
        match self {
            StepValue::Host(v) => Logged::Host(*v),
            StepValue::Device(t) => Logged::Device(&t.0),
        }
    }
}

/// The step value of a split batch's chunks so far: one chunk's own value,
/// else the mean weighted by batch size (or the reduction) of all, as the
/// host computes it, on the device when any came from one.
fn split_value(chunks: &[(StepValue, f64)], reduce: ReduceFx) -> Result<StepValue> {
    if let [(only, _)] = chunks {
        return Ok(only.as_logged().to_owned());
    }
    let (mut value, mut device, mut weight) = (0.0, None, 0.0);
    for (count, (v, bs)) in chunks.iter().enumerate() {
        add_to_running(&mut value, &mut device, count, reduce, v.as_logged(), *bs)?;
        weight += bs;
    }
    Ok(match (reduce, device) {
        (ReduceFx::Mean, _) if weight <= 0.0 => chunks[chunks.len() - 1].0.as_logged().to_owned(),
        (ReduceFx::Mean, Some(d)) => StepValue::Device(DeviceValue(device_metrics::divide(&d.0, weight)?)),
        (ReduceFx::Mean, None) => StepValue::Host(value / weight),
        (_, Some(d)) => StepValue::Device(d),
        (_, None) => StepValue::Host(value),
    })
}

/// Adds `logged` to a running reduction of `count` values so far, as the
/// host adds a number (the weighted sum for a mean, else the reduction
/// started by the first value): in `value`, or on the device in `device`
/// once a device value joined it (a later number then joins it there).
fn add_to_running(
    value: &mut f64,
    device: &mut Option<DeviceValue>,
    count: usize,
    reduce: ReduceFx,
    logged: Logged,
    batch_size: f64,
) -> Result<()> {
    let (current, v) = match (logged, device.take()) {
        (Logged::Host(v), None) => {
            match reduce {
                ReduceFx::Mean => *value += v * batch_size,
                _ if count == 0 => *value = v,
                r => *value = r.combine(*value, v),
            }
            return Ok(());
        }
        // A number joins device values on their device.
        (Logged::Host(v), Some(c)) => {
            let v = c.0.f_full_like(v)?;
            (Some(c.0), v)
        }
        (Logged::Device(t), current) => (current.map(|d| d.0), t.shallow_clone()),
    };
    *device = Some(DeviceValue(device_metrics::accumulate(current, *value, count, reduce, &v, batch_size)?));
    Ok(())
}

/// The name a value logged both per step and per epoch gets for one of
/// them (`which`: "step" or "epoch"): the fork goes after the first
/// `base_len` bytes of `name`, before the loader suffix fulmen added, as
/// Lightning forks it (`loss_step`, `loss_epoch/dataloader_idx_1`).
fn forked(name: &str, base_len: usize, which: &str) -> String {
    let (base, suffix) = name.split_at(base_len.min(name.len()));
    format!("{base}_{which}{suffix}")
}

impl MetricStore {
    /// The store of a validation, test or sanity-check run: its step
    /// values go to the loggers and the logged and progress metrics, never
    /// to the callback metrics.
    pub fn evaluation() -> Self {
        MetricStore { evaluating: true, ..Default::default() }
    }

    /// The evaluation loader the value `key` of the last epoch end came
    /// from (`None` when logged without one: training, one loader).
    pub fn loader_of(&self, key: &str) -> Option<usize> {
        self.ended_loaders.get(key).copied()
    }

    /// How many values were recorded so far, in all.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records one logged value. A name keeps the flags it was first
    /// logged with in the epoch: logging it again with other flags is an
    /// error, as in Lightning ("twice ... with different arguments").
    pub fn log(&mut self, name: &str, value: f64, flags: LogFlags, batch_size: f64) -> Result<()> {
        self.record(name, name.len(), Logged::Host(value), flags, batch_size)
    }

    /// The name a step key was logged under (the key itself when the name
    /// was not forked).
    fn name_of_step<'k>(&'k self, key: &'k str) -> &'k str {
        self.step_names.get(key).map_or(key, String::as_str)
    }

    /// [`MetricStore::log`] of `name`, whose first `base_len` bytes are the
    /// name the user gave (the rest, a loader suffix fulmen added).
    fn record(&mut self, name: &str, base_len: usize, logged: Logged, flags: LogFlags, batch_size: f64) -> Result<()> {
        self.records += 1;
        match self.flags.get(name) {
            Some(first) if *first != flags => {
                return Err(Error::invalid(format!(
                    "metric {name:?} was logged with {} and now with {}: a name must be logged with the same flags \
                     every time (as Lightning's `self.log` twice with different arguments)",
                    first.describe(),
                    flags.describe()
                )))
            }
            Some(_) => {}
            None => {
                self.flags.insert(name.to_string(), flags);
            }
        }
        let both = flags.on_step && flags.on_epoch;
        if let Some(op) = flags.sync_op() {
            self.sync.entry(name.to_string()).or_insert(op);
        }
        if !flags.logger {
            self.unlogged.insert(name.to_string());
        }
        // A step value reduced over ranks is read now (the ranks reduce
        // numbers); other device values stay pending in the step's maps
        // until something reads them.
        let logged = match logged {
            Logged::Device(t) if flags.on_step && flags.sync_op().is_some() => Logged::Host(t.f_double_value(&[])?),
            other => other,
        };
        if flags.on_step {
            let key = if both { forked(name, base_len, "step") } else { name.to_string() };
            if !self.step_keys.contains_key(name) {
                self.step_keys.insert(name.to_string(), key.clone());
                self.step_names.insert(key.clone(), name.to_string());
            }
            self.record_step(key, logged, flags, batch_size)?;
        }
        if flags.on_epoch {
            let acc = self
                .epoch
                .entry(name.to_string())
                .or_insert_with(|| EpochAccumulator { base_len, ..Default::default() });
            acc.reduce = flags.reduce_fx;
            add_to_running(&mut acc.value, &mut acc.device, acc.count, flags.reduce_fx, logged, batch_size)?;
            if flags.reduce_fx == ReduceFx::Mean {
                acc.weight += batch_size;
            }
            acc.count += 1;
            acc.prog_bar |= flags.prog_bar;
            acc.on_step |= both;
        }
        Ok(())
    }

    /// Records the step value of `key`: a number or a device tensor left
    /// pending, in a split batch the weighted mean (or the reduction) of
    /// its chunks' values so far, on the host or on the device as they
    /// came.
    fn record_step(&mut self, key: String, logged: Logged, flags: LogFlags, batch_size: f64) -> Result<()> {
        let value = match self.split.as_mut() {
            Some(split) => {
                let chunks = split.entry(key.clone()).or_default();
                chunks.push((logged.to_owned(), batch_size));
                split_value(chunks, flags.reduce_fx)?
            }
            None => logged.to_owned(),
        };
        let maps = [
            Some(&mut self.step),
            (!self.evaluating).then_some(&mut self.callback_metrics),
            flags.prog_bar.then_some(&mut self.progress_metrics),
        ];
        for map in maps.into_iter().flatten() {
            match &value {
                StepValue::Host(v) => map.insert(key.clone(), *v),
                StepValue::Device(d) => map.insert_pending(key.clone(), &d.0),
            }
        }
        Ok(())
    }

    /// Records a value logged from `site`: with several loaders the name
    /// gets `/dataloader_idx_N` unless `flags.add_dataloader_idx` is off,
    /// in which case two loaders may not log the same name (Lightning's
    /// "twice ... with different arguments"). Returns the name recorded.
    pub fn log_from(
        &mut self,
        site: LogSite,
        name: &str,
        value: f64,
        flags: LogFlags,
        batch_size: f64,
    ) -> Result<String> {
        self.log_value_from(site, name, Logged::Host(value), flags, batch_size)
    }

    /// [`MetricStore::log_from`] of a one-element tensor. A device tensor
    /// is not read now: its epoch value is reduced on its device and read
    /// at the epoch's end with the others (one copy per device), and its
    /// step value (a split batch's: reduced over its chunks on the device)
    /// stays pending in the step, callback and progress metrics
    /// ([`MetricMap`]) until read. A step value reduced over ranks now
    /// (sync_dist) and a CPU tensor are read now.
    pub fn log_tensor_from(
        &mut self,
        site: LogSite,
        name: &str,
        value: &Tensor,
        flags: LogFlags,
        batch_size: f64,
    ) -> Result<String> {
        if value.device() == tch::Device::Cpu {
            device_metrics::check_loggable(value)?;
            let v = value.f_double_value(&vec![0; value.dim()])?;
            return self.log_value_from(site, name, Logged::Host(v), flags, batch_size);
        }
        // A captured step's tensor is kept as it is, and copied after each
        // replay ([`MetricStore::relog`]), not inside the graph too.
        let value = match self.capturing {
            Some(_) => value.shallow_clone(),
            None => device_metrics::as_logged(value)?,
        };
        self.log_value_from(site, name, Logged::Device(&value), flags, batch_size)
    }

    /// [`MetricStore::log_from`] of a number or a tensor.
    fn log_value_from(
        &mut self,
        site: LogSite,
        name: &str,
        value: Logged,
        flags: LogFlags,
        batch_size: f64,
    ) -> Result<String> {
        if flags.add_dataloader_idx && name.contains("/dataloader_idx_") {
            return Err(Error::invalid(format!(
                "You called `self.log` with the key `{name}` but it should not contain information about \
                 `dataloader_idx` when `add_dataloader_idx=True` (FULMEN_LOG_NO_DATALOADER_IDX unset)"
            )));
        }
        let key = match site.dataloader_idx {
            Some(i) if flags.add_dataloader_idx => format!("{name}/dataloader_idx_{i}"),
            Some(i) => {
                let first = *self.loaders.entry(name.to_string()).or_insert(i);
                if first != i {
                    return Err(Error::invalid(format!(
                        "You called `self.log({name}, ...)` twice in `{}` with different arguments (from \
                         dataloader_idx {first} and {i} with add_dataloader_idx=False). This is not allowed",
                        site.fx
                    )));
                }
                name.to_string()
            }
            None => name.to_string(),
        };
        if let (Some(logs), Logged::Device(t)) = (self.capturing.as_mut(), value) {
            logs.push(CapturedLog {
                fx: site.fx.to_string(),
                loader: site.dataloader_idx,
                name: name.to_string(),
                value: t.shallow_clone(),
                flags,
                batch_size,
            });
            return Ok(key);
        }
        // The fork goes before the suffix added here, not one in the name.
        self.record(&key, name.len(), value, flags, batch_size)?;
        if let (Some(acc), Some(_)) = (self.epoch.get_mut(&key), site.dataloader_idx) {
            acc.loader = site.dataloader_idx;
        }
        Ok(key)
    }

    /// Starts the capture of a step in a device graph: until
    /// [`MetricStore::end_capture`] the device tensors it logs are kept
    /// apart, to be recorded after each replay ([`MetricStore::relog`]);
    /// numbers and CPU tensors are recorded as always (the graph would not
    /// log them again: a capture refuses a step that recorded any).
    pub(crate) fn begin_capture(&mut self) {
        self.capturing = Some(Vec::new());
    }

    /// Ends a capture: the device tensors its step logged.
    pub(crate) fn end_capture(&mut self) -> Vec<CapturedLog> {
        self.capturing.take().unwrap_or_default()
    }

    /// Logs what a captured step logged, after a replay wrote it: a copy of
    /// each tensor (the next replay overwrites the graph's), as the step's
    /// own logs would have, in its order and as one batch (a name logged
    /// twice gets the values' weighted mean, as in [`MetricStore::begin_split`]).
    pub(crate) fn relog(&mut self, logs: &[CapturedLog]) -> Result<()> {
        self.begin_split();
        let logged = logs.iter().try_for_each(|log| {
            let value = device_metrics::as_logged(&log.value)?;
            let site = LogSite { fx: &log.fx, dataloader_idx: log.loader };
            self.log_value_from(site, &log.name, Logged::Device(&value), log.flags, log.batch_size).map(|_| ())
        });
        self.end_split();
        logged
    }

    /// Replaces the step value just logged under `name` with `flags` by
    /// `value`, already reduced over ranks: [`MetricStore::sync_step`]
    /// then leaves it.
    pub fn set_synced_step(&mut self, name: &str, flags: LogFlags, value: f64) {
        if !flags.on_step {
            return;
        }
        let Some(key) = self.step_keys.get(name).cloned() else { return };
        self.step.insert(key.clone(), value);
        if !self.evaluating {
            self.callback_metrics.insert(key.clone(), value);
        }
        if flags.prog_bar {
            self.progress_metrics.insert(key.clone(), value);
        }
        self.presynced.insert(key);
    }

    /// Starts a batch split over DP replicas: until [`MetricStore::end_split`]
    /// a step value logged by several chunks is their mean weighted by the
    /// chunks' batch sizes, or their sum / max / min (epoch reductions
    /// see every chunk anyway).
    pub fn begin_split(&mut self) {
        self.split = Some(BTreeMap::new());
    }

    /// Ends a split batch.
    pub fn end_split(&mut self) {
        self.split = None;
    }

    /// Reduces the step values logged with sync_dist over ranks with
    /// `reduce` (one collective per operation in use) and records them.
    pub fn sync_step(&mut self, reduce: Reducer) -> Result<()> {
        let keys: Vec<String> = self
            .step
            .keys()
            .filter(|k| self.sync.contains_key(self.name_of_step(k)) && !self.presynced.contains(*k))
            .cloned()
            .collect();
        let mut values: Vec<f64> = keys.iter().map(|k| self.step[k]).collect();
        reduce_by_op(&mut values, |i| self.sync.get(self.name_of_step(&keys[i])).copied(), reduce)?;
        for (k, v) in keys.into_iter().zip(values) {
            self.step.insert(k.clone(), v);
            if self.progress_metrics.contains_key(&k) {
                self.progress_metrics.insert(k.clone(), v);
            }
            if !self.evaluating {
                self.callback_metrics.insert(k, v);
            }
        }
        Ok(())
    }

    /// Takes the step values logged since the last call for the loggers
    /// (not those logged with logger=False).
    pub fn take_step_values(&mut self) -> MetricMap {
        self.presynced.clear();
        let mut step = std::mem::take(&mut self.step);
        step.retain(|k| !self.unlogged.contains(self.name_of_step(k)));
        step
    }

    /// Ends an epoch: reduces the accumulators, records them as callback
    /// metrics and returns those for the loggers (named `x_epoch` when `x`
    /// was also logged per step); fails when a device value cannot be read.
    pub fn end_epoch(&mut self) -> Result<BTreeMap<String, f64>> {
        self.end_epoch_synced(&|_, _, _| Ok(()))
    }

    /// [`MetricStore::end_epoch`], with the epoch values of sync_dist
    /// metrics reduced over ranks by `reduce` as Lightning does: a mean as
    /// the sum of weighted sums over the sum of batch sizes, the others
    /// with their own operation.
    pub fn end_epoch_synced(&mut self, reduce: Reducer) -> Result<BTreeMap<String, f64>> {
        let mut done: Vec<(String, EpochAccumulator)> = std::mem::take(&mut self.epoch)
            .into_iter()
            .filter(|(_, a)| a.count > 0 && (a.reduce != ReduceFx::Mean || a.weight > 0.0))
            .collect();
        // The values reduced on a device come back in one read per device.
        let on_device: Vec<usize> = (0..done.len()).filter(|i| done[*i].1.device.is_some()).collect();
        if !on_device.is_empty() {
            let read = {
                let tensors: Vec<&Tensor> =
                    on_device.iter().filter_map(|i| done[*i].1.device.as_ref().map(|d| &d.0)).collect();
                device_metrics::read_all(&tensors)?
            };
            for (i, v) in on_device.into_iter().zip(read) {
                done[i].1.value = v;
                done[i].1.device = None;
            }
        }
        let group_of = |name: &str| self.sync.get(name).map(|s| s.1);
        let means: Vec<usize> = (0..done.len())
            .filter(|i| done[*i].1.reduce == ReduceFx::Mean && group_of(&done[*i].0).is_some())
            .collect();
        if !means.is_empty() {
            let mut sums: Vec<f64> = means.iter().flat_map(|i| [done[*i].1.value, done[*i].1.weight]).collect();
            reduce_by_op(&mut sums, |j| group_of(&done[means[j / 2]].0).map(|g| (ReduceFx::Sum, g)), reduce)?;
            for (k, i) in means.iter().enumerate() {
                done[*i].1.value = sums[2 * k];
                done[*i].1.weight = sums[2 * k + 1];
            }
        }
        let mut values: Vec<f64> = done.iter().map(|(_, a)| a.value).collect();
        let op_of = |i: usize| {
            let (name, a) = &done[i];
            group_of(name).filter(|_| a.reduce != ReduceFx::Mean).map(|g| (a.reduce, g))
        };
        reduce_by_op(&mut values, op_of, reduce)?;
        for ((_, a), v) in done.iter_mut().zip(values) {
            a.value = v;
        }
        let mut out = BTreeMap::new();
        self.ended_loaders.clear();
        for (name, acc) in done {
            let value = if acc.reduce == ReduceFx::Mean { acc.value / acc.weight } else { acc.value };
            let key = if acc.on_step { forked(&name, acc.base_len, "epoch") } else { name.clone() };
            self.callback_metrics.insert(key.clone(), value);
            self.callback_metrics.insert(name.clone(), value);
            if acc.prog_bar {
                self.progress_metrics.insert(key.clone(), value);
            }
            if !self.unlogged.contains(&name) {
                if let Some(d) = acc.loader {
                    self.ended_loaders.insert(key.clone(), d);
                }
                out.insert(key, value);
            }
        }
        Ok(out)
    }
}

/// Reduces over ranks each entry of `values` whose `op_of(i)` names an
/// operation and group, with `reduce`: one collective per group and
/// operation in use, in a fixed order (groups ascending; mean, sum, max,
/// min) so every rank makes the same calls.
pub(crate) fn reduce_by_op(values: &mut [f64], op_of: impl Fn(usize) -> Option<SyncOp>, reduce: Reducer) -> Result<()> {
    let groups: BTreeSet<u32> = (0..values.len()).filter_map(|i| op_of(i).map(|s| s.1)).collect();
    for group in groups {
        for op in [ReduceFx::Mean, ReduceFx::Sum, ReduceFx::Max, ReduceFx::Min] {
            let picked: Vec<usize> = (0..values.len()).filter(|i| op_of(*i) == Some((op, group))).collect();
            if picked.is_empty() {
                continue;
            }
            let mut chosen: Vec<f64> = picked.iter().map(|i| values[*i]).collect();
            reduce(&mut chosen, op, group)?;
            for (i, v) in picked.into_iter().zip(chosen) {
                values[i] = v;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_mean_is_weighted_by_batch_size() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_epoch: true, ..Default::default() };
        m.log("acc", 1.0, f, 30.0).unwrap();
        m.log("acc", 0.0, f, 10.0).unwrap();
        let e = m.end_epoch().unwrap();
        assert_eq!(e["acc"], 0.75);
        assert_eq!(m.callback_metrics["acc"], 0.75);
    }

    #[test]
    fn epoch_values_reduced_on_a_device_equal_the_hosts() {
        // Values alternate between numbers and tensors (a CPU tensor stands
        // in for a device's: the store keeps it as one), starting with
        // either; the epoch values equal those of numbers alone, bit for bit.
        let values = [(0.1f32, 3.0), (2.5e-3, 7.0), (-1.0 / 3.0, 2.0), (7.25, 5.0), (f32::NAN, 1.0)];
        for reduce in [ReduceFx::Mean, ReduceFx::Sum, ReduceFx::Max, ReduceFx::Min] {
            let f = LogFlags { on_epoch: true, reduce_fx: reduce, ..Default::default() };
            // NaN poisons a mean and a sum: those stop before it.
            let n = if matches!(reduce, ReduceFx::Max | ReduceFx::Min) { values.len() } else { values.len() - 1 };
            let (mut host, mut mixed) = (MetricStore::default(), MetricStore::default());
            for (i, (v, w)) in values[..n].iter().enumerate() {
                host.log("a", f64::from(*v), f, *w).unwrap();
                host.log("b", f64::from(*v), f, *w).unwrap();
                let t = device_metrics::as_logged(&Tensor::from(*v)).unwrap();
                let (first, second) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
                mixed.record(first, 1, Logged::Device(&t), f, *w).unwrap();
                mixed.record(second, 1, Logged::Host(f64::from(*v)), f, *w).unwrap();
            }
            assert!(mixed.epoch["a"].device.is_some() && mixed.epoch["b"].device.is_some());
            let (want, got) = (host.end_epoch().unwrap(), mixed.end_epoch().unwrap());
            for name in ["a", "b"] {
                assert_eq!(got[name].to_bits(), want[name].to_bits(), "{reduce:?} {name}");
            }
        }
    }

    #[test]
    fn step_and_epoch_get_suffixes() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: true, on_epoch: true, prog_bar: true, ..Default::default() };
        m.log("loss", 2.0, f, 1.0).unwrap();
        m.log("loss", 4.0, f, 1.0).unwrap();
        assert_eq!(m.take_step_values()["loss_step"], 4.0);
        let e = m.end_epoch().unwrap();
        assert_eq!(e["loss_epoch"], 3.0);
        assert_eq!(m.callback_metrics["loss"], 3.0);
        assert_eq!(m.progress_metrics["loss_epoch"], 3.0);
    }

    #[test]
    fn sync_dist_values_go_through_the_reduction() {
        let mut m = MetricStore::default();
        let synced = LogFlags { on_step: true, on_epoch: true, sync_dist: true, ..Default::default() };
        let summed = LogFlags { reduce_fx: ReduceFx::Sum, ..synced };
        let local = LogFlags { on_step: true, on_epoch: true, ..Default::default() };
        let zero_only = LogFlags { rank_zero_only: true, reduce_fx: ReduceFx::Sum, ..synced };
        // Two ranks that log the same values: sums double, means stay.
        let two_ranks = |v: &mut [f64], op: ReduceFx, _group: u32| {
            if op == ReduceFx::Sum {
                v.iter_mut().for_each(|x| *x *= 2.0);
            }
            Ok(())
        };
        m.log("loss", 2.0, synced, 1.0).unwrap();
        m.log("count", 3.0, summed, 1.0).unwrap();
        m.log("acc", 0.5, local, 1.0).unwrap();
        m.log("mine", 7.0, zero_only, 1.0).unwrap();
        m.sync_step(&two_ranks).unwrap();
        let step = m.take_step_values();
        assert_eq!((step["loss_step"], step["count_step"], step["acc_step"], step["mine_step"]), (2.0, 6.0, 0.5, 7.0));
        assert_eq!(m.callback_metrics["count_step"], 6.0);
        m.log("loss", 4.0, synced, 3.0).unwrap();
        m.log("count", 5.0, summed, 1.0).unwrap();
        m.log("mine", 1.0, zero_only, 1.0).unwrap();
        let e = m.end_epoch_synced(&two_ranks).unwrap();
        // (2*1 + 4*3) / 4 on both ranks; (3 + 5) * 2; rank 0's own sum.
        assert_eq!((e["loss_epoch"], e["count_epoch"], e["acc_epoch"], e["mine_epoch"]), (3.5, 16.0, 0.5, 8.0));
    }

    #[test]
    fn each_group_reduces_its_own_values_in_a_fixed_order() {
        let mut m = MetricStore::default();
        let job = LogFlags { on_step: true, on_epoch: true, sync_dist: true, ..Default::default() };
        let pair = LogFlags { sync_dist_group: 2, ..job };
        let pair_max = LogFlags { reduce_fx: ReduceFx::Max, ..pair };
        let other = LogFlags { sync_dist_group: 1, reduce_fx: ReduceFx::Sum, ..job };
        // Group 2 doubles its sums, group 1 triples them, the job adds 100.
        let calls = std::cell::RefCell::new(Vec::new());
        let reduce = |v: &mut [f64], op: ReduceFx, group: u32| {
            calls.borrow_mut().push((group, op, v.len()));
            let f = |x: f64| match (group, op) {
                (2, ReduceFx::Sum) => x * 2.0,
                (1, _) => x * 3.0,
                (0, _) => x + 100.0,
                _ => x,
            };
            v.iter_mut().for_each(|x| *x = f(*x));
            Ok(())
        };
        m.log("a", 1.0, job, 1.0).unwrap();
        m.log("b", 2.0, pair, 1.0).unwrap();
        m.log("c", 3.0, pair_max, 1.0).unwrap();
        m.log("d", 4.0, other, 1.0).unwrap();
        m.sync_step(&reduce).unwrap();
        let step = m.take_step_values();
        assert_eq!((step["a_step"], step["b_step"], step["c_step"], step["d_step"]), (101.0, 2.0, 3.0, 12.0));
        let step_calls =
            vec![(0, ReduceFx::Mean, 1), (1, ReduceFx::Sum, 1), (2, ReduceFx::Mean, 1), (2, ReduceFx::Max, 1)];
        assert_eq!(*calls.borrow(), step_calls);
        calls.borrow_mut().clear();
        let e = m.end_epoch_synced(&reduce).unwrap();
        // Means as sums of (value x weight, weight) in their own group.
        assert_eq!((e["a_epoch"], e["b_epoch"], e["c_epoch"], e["d_epoch"]), (101.0 / 101.0, 2.0, 3.0, 12.0));
        let epoch_calls =
            vec![(0, ReduceFx::Sum, 2), (2, ReduceFx::Sum, 2), (1, ReduceFx::Sum, 1), (2, ReduceFx::Max, 1)];
        assert_eq!(*calls.borrow(), epoch_calls);
    }

    #[test]
    fn reduce_fx_max_min_and_logger_false() {
        let mut m = MetricStore::default();
        let max = LogFlags { on_epoch: true, reduce_fx: ReduceFx::Max, ..Default::default() };
        let min = LogFlags { on_step: true, on_epoch: true, reduce_fx: ReduceFx::Min, logger: false, ..max };
        for v in [3.0, -1.0, 8.0, 2.0] {
            m.log("peak", v, max, 1.0).unwrap();
            m.log("low", v, min, 5.0).unwrap();
        }
        assert!(m.take_step_values().is_empty()); // low has logger=False
        assert_eq!(m.callback_metrics["low_step"], 2.0);
        let e = m.end_epoch().unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e["peak"], 8.0);
        assert_eq!((m.callback_metrics["low_epoch"], m.callback_metrics["low"]), (-1.0, -1.0));
        let err = m.log("peak", 1.0, LogFlags { reduce_fx: ReduceFx::Sum, ..max }, 1.0).unwrap_err();
        assert!(err.message.contains("reduce_fx=\"max\""), "{}", err.message);
    }

    #[test]
    fn fx_options_resolve_as_lightnings_validator() {
        assert_eq!(TRAIN_BATCH_LOGGING.resolve("on_train_batch_end", None, None).unwrap(), (true, false));
        assert_eq!(EVAL_BATCH_LOGGING.resolve("on_validation_batch_end", None, None).unwrap(), (false, true));
        assert_eq!(EVAL_BATCH_LOGGING.resolve("validation_step", Some(true), None).unwrap(), (true, true));
        assert_eq!(EPOCH_LOGGING.resolve("on_train_epoch_end", None, Some(true)).unwrap(), (false, true));
        let e = EPOCH_LOGGING.resolve("on_train_epoch_end", Some(true), None).unwrap_err();
        assert_eq!(
            e.message,
            "You can't `self.log(on_step=True)` inside `on_train_epoch_end`, must be one of (False,)."
        );
        let e = EPOCH_LOGGING.resolve("on_train_start", None, Some(false)).unwrap_err();
        assert!(e.message.contains("self.log(on_epoch=False)` inside `on_train_start`, must be one of (True,)"));
        let e = TRAIN_BATCH_LOGGING.resolve("on_after_backward", Some(false), None).unwrap_err();
        assert!(e.message.contains("`self.log(on_step=False, on_epoch=False)` is not useful"), "{}", e.message);
    }

    #[test]
    fn dataloader_suffix_and_add_dataloader_idx_off() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_epoch: true, ..Default::default() };
        let site = |i| LogSite { fx: "validation_step", dataloader_idx: Some(i) };
        assert_eq!(m.log_from(site(1), "loss", 1.0, f, 1.0).unwrap(), "loss/dataloader_idx_1");
        let bare = LogFlags { add_dataloader_idx: false, ..f };
        assert_eq!(m.log_from(site(0), "acc", 1.0, bare, 1.0).unwrap(), "acc");
        m.log_from(site(0), "acc", 3.0, bare, 1.0).unwrap();
        let e = m.log_from(site(1), "acc", 1.0, bare, 1.0).unwrap_err();
        assert!(e.message.contains("twice in `validation_step`"), "{}", e.message);
        let e = m.log_from(site(0), "x/dataloader_idx_0", 1.0, f, 1.0).unwrap_err();
        assert!(e.message.contains("add_dataloader_idx=True"), "{}", e.message);
        assert_eq!(m.end_epoch().unwrap()["acc"], 2.0);
    }

    #[test]
    fn an_evaluation_forks_names_before_the_loader_suffix_and_keeps_steps_out_of_callbacks() {
        let mut m = MetricStore::evaluation();
        let both = LogFlags { on_step: true, on_epoch: true, prog_bar: true, ..Default::default() };
        let site = |i| LogSite { fx: "validation_step", dataloader_idx: Some(i) };
        m.log_from(site(0), "loss", 1.0, both, 2.0).unwrap();
        m.log_from(site(1), "loss", 3.0, both, 1.0).unwrap();
        m.log_from(site(1), "plain", 5.0, LogFlags { on_epoch: true, ..Default::default() }, 1.0).unwrap();
        let steps = m.take_step_values();
        assert_eq!((steps["loss_step/dataloader_idx_0"], steps["loss_step/dataloader_idx_1"]), (1.0, 3.0));
        assert!(m.callback_metrics.is_empty());
        assert_eq!(m.progress_metrics["loss_step/dataloader_idx_1"], 3.0);
        let e = m.end_epoch().unwrap();
        assert_eq!(
            e.keys().collect::<Vec<_>>(),
            ["loss_epoch/dataloader_idx_0", "loss_epoch/dataloader_idx_1", "plain/dataloader_idx_1"]
        );
        assert_eq!(
            (m.loader_of("loss_epoch/dataloader_idx_0"), m.loader_of("plain/dataloader_idx_1")),
            (Some(0), Some(1))
        );
        assert_eq!(m.callback_metrics["loss/dataloader_idx_1"], 3.0);
        assert!(m.callback_metrics.keys().all(|k| !k.contains("_step")));
        // A name the user gave with a loader's suffix forks at its end, as
        // in Lightning; a name ending in `_step` that is not forked keeps
        // its flags (logger=False).
        let own = LogFlags { add_dataloader_idx: false, ..both };
        assert_eq!(m.log_from(site(3), "x/dataloader_idx_3", 1.0, own, 1.0).unwrap(), "x/dataloader_idx_3");
        let quiet = LogFlags { on_step: true, logger: false, ..Default::default() };
        m.log("acc_step", 2.0, quiet, 1.0).unwrap();
        m.log("acc", 3.0, LogFlags { on_step: true, ..Default::default() }, 1.0).unwrap();
        let steps = m.take_step_values();
        assert_eq!(steps.keys().collect::<Vec<_>>(), ["acc", "x/dataloader_idx_3_step"]);
    }

    #[test]
    fn a_presynced_step_value_is_not_reduced_again() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: true, sync_dist: true, reduce_fx: ReduceFx::Sum, ..Default::default() };
        let doubled = |v: &mut [f64], _: ReduceFx, _: u32| {
            v.iter_mut().for_each(|x| *x *= 2.0);
            Ok(())
        };
        m.log("hook", 3.0, f, 1.0).unwrap();
        m.set_synced_step("hook", f, 6.0);
        m.log("step", 1.0, f, 1.0).unwrap();
        m.sync_step(&doubled).unwrap();
        let s = m.take_step_values();
        assert_eq!((s["hook"], s["step"]), (6.0, 2.0));
        m.log("hook", 3.0, f, 1.0).unwrap();
        m.sync_step(&doubled).unwrap();
        assert_eq!(m.take_step_values()["hook"], 6.0);
    }

    #[test]
    fn a_split_batch_logs_the_weighted_mean_of_its_chunks() {
        let mut m = MetricStore::default();
        let f = LogFlags { on_step: true, on_epoch: true, ..Default::default() };
        m.begin_split();
        m.log("loss", 1.0, f, 3.0).unwrap();
        m.log("loss", 3.0, f, 1.0).unwrap();
        m.end_split();
        assert_eq!(m.take_step_values()["loss_step"], 1.5);
        m.log("loss", 7.0, f, 4.0).unwrap();
        assert_eq!(m.take_step_values()["loss_step"], 7.0);
        assert_eq!(m.end_epoch().unwrap()["loss_epoch"], (3.0 + 3.0 + 28.0) / 8.0);
        let sum = LogFlags { on_step: true, reduce_fx: ReduceFx::Sum, ..Default::default() };
        m.begin_split();
        m.log("n", 3.0, sum, 3.0).unwrap();
        m.log("n", 1.0, sum, 1.0).unwrap();
        m.end_split();
        assert_eq!(m.take_step_values()["n"], 4.0);
    }

    #[test]
    fn device_step_values_stay_pending_until_read_and_equal_the_hosts() {
        // A CPU tensor recorded as a device value stands in for a device's.
        let t = |v: f64| device_metrics::as_logged(&Tensor::from(v)).unwrap();
        let shown = LogFlags { on_step: true, on_epoch: true, prog_bar: true, ..Default::default() };
        let (mut host, mut lazy) = (MetricStore::default(), MetricStore::default());
        for (v, bs) in [(0.1, 3.0), (2.5e-3, 7.0)] {
            host.log("loss", v, shown, bs).unwrap();
            lazy.record("loss", 4, Logged::Device(&t(v)), shown, bs).unwrap();
        }
        // Nothing read yet: the step, callback and progress values wait.
        assert!(!lazy.callback_metrics.is_settled() && !lazy.progress_metrics.is_settled());
        assert_eq!(lazy.callback_metrics.get("loss_step"), None);
        assert_eq!(lazy.callback_metrics.read("loss_step").unwrap(), Some(2.5e-3));
        let mut step = lazy.take_step_values();
        assert!(!step.is_settled());
        step.settle().unwrap();
        assert_eq!(*step, *host.take_step_values());
        lazy.callback_metrics.settle().unwrap();
        lazy.progress_metrics.settle().unwrap();
        let (want, got) = (host.end_epoch().unwrap(), lazy.end_epoch().unwrap());
        assert_eq!(got["loss_epoch"].to_bits(), want["loss_epoch"].to_bits());
        assert_eq!(*lazy.callback_metrics, *host.callback_metrics);
        assert_eq!(*lazy.progress_metrics, *host.progress_metrics);

        // A split batch: one chunk's own value, else the weighted mean (or
        // the reduction) of numbers and tensors as they came, as the host's.
        for reduce in [ReduceFx::Mean, ReduceFx::Sum, ReduceFx::Max] {
            let f = LogFlags { on_step: true, reduce_fx: reduce, ..Default::default() };
            let (mut host, mut lazy) = (MetricStore::default(), MetricStore::default());
            host.begin_split();
            lazy.begin_split();
            for (i, (v, bs)) in [(0.1, 3.0), (1.0 / 3.0, 1.0), (-2.5, 5.0)].into_iter().enumerate() {
                host.log("x", v, f, bs).unwrap();
                let value = t(v);
                let logged = if i == 1 { Logged::Host(v) } else { Logged::Device(&value) };
                lazy.record("x", 1, logged, f, bs).unwrap();
                let mut got = lazy.step.clone();
                got.settle().unwrap();
                assert_eq!(got["x"].to_bits(), host.step["x"].to_bits(), "{reduce:?} after {} chunks", i + 1);
            }
        }
    }
}

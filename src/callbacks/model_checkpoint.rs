//! ModelCheckpoint: saves checkpoints when a monitored metric improves (top
//! k), every n steps or epochs, and a `last` copy, as Lightning's.
use super::filename::format_name;
use super::monitor::Mode;
use crate::checkpoint::numbers::{self, Infinity};
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Checkpoint file extension (Lightning's, whichever `checkpoint_format` fills it).
pub const EXTENSION: &str = ".ckpt";

/// Options, with Lightning's defaults from [`Default`].
#[derive(Debug, Clone)]
pub struct ModelCheckpointOptions {
    /// Folder; `None` = `<log dir>/checkpoints` (or `<root>/checkpoints`).
    pub dirpath: Option<PathBuf>,
    /// Name template (default `{epoch}-{step}`).
    pub filename: Option<String>,
    /// Metric to rank checkpoints by; `None` keeps the latest ones.
    pub monitor: Option<String>,
    /// Min or max.
    pub mode: Mode,
    /// How many best checkpoints to keep (-1 all, 0 none; default 1).
    pub save_top_k: i64,
    /// Also save `last.ckpt` whenever a checkpoint is saved.
    pub save_last: bool,
    /// Save every n optimizer steps (0: off).
    pub every_n_train_steps: i64,
    /// Save every n epochs (default 1; 0: off).
    pub every_n_epochs: i64,
    /// Save only the model's weights.
    pub save_weights_only: bool,
    /// Write `name=value` in file names (default true).
    pub auto_insert_metric_name: bool,
    /// Save at the end of training epochs instead of after validation;
    /// `None` decides as Lightning does.
    pub save_on_train_epoch_end: Option<bool>,
    /// Save when this many seconds of training passed since the last
    /// time-triggered save (checked at each training batch end); `None`:
    /// off. Excludes `every_n_train_steps`, and `every_n_epochs` other
    /// than 0 or its default 1 (then off), as Lightning's.
    pub train_time_interval: Option<f64>,
    /// On a failure during fit, save a checkpoint (and `last`), as
    /// Lightning's `save_on_exception`.
    pub save_on_exception: bool,
    /// A name that exists gets a `-v1`, `-v2`... suffix (default true);
    /// false overwrites it.
    pub enable_version_counter: bool,
    /// With `save_last`, `last.ckpt` is a symlink to the newest checkpoint
    /// saved (Lightning's `save_last="link"`; a copy where the filesystem
    /// refuses symlinks).
    pub save_last_link: bool,
}

impl Default for ModelCheckpointOptions {
    fn default() -> Self {
        ModelCheckpointOptions {
            dirpath: None,
            filename: None,
            monitor: None,
            mode: Mode::Min,
            save_top_k: 1,
            save_last: false,
            every_n_train_steps: 0,
            every_n_epochs: 1,
            save_weights_only: false,
            auto_insert_metric_name: true,
            save_on_train_epoch_end: None,
            train_time_interval: None,
            save_on_exception: false,
            enable_version_counter: true,
            save_last_link: false,
        }
    }
}

/// The ModelCheckpoint callback.
pub struct ModelCheckpoint {
    opts: ModelCheckpointOptions,
    dirpath: Option<PathBuf>,
    /// Saved checkpoints with their monitored scores.
    best_k_models: BTreeMap<String, f64>,
    /// Path of the best checkpoint so far.
    pub best_model_path: String,
    /// Its score.
    pub best_model_score: Option<f64>,
    /// Path of the last checkpoint written.
    pub last_model_path: String,
    last_global_step_saved: i64,
    /// The last file this callback wrote (Lightning's `_last_checkpoint_saved`).
    last_checkpoint_saved: String,
    /// When the time trigger last fired (or training began).
    last_time_checked: Option<Instant>,
}

impl ModelCheckpoint {
    /// Creates the callback after checking the options.
    pub fn new(opts: ModelCheckpointOptions) -> Result<Self> {
        if opts.save_top_k < -1 {
            return Err(Error::invalid(format!("save_top_k must be >= -1, got {}", opts.save_top_k)));
        }
        if opts.every_n_train_steps < 0 || opts.every_n_epochs < 0 {
            return Err(Error::invalid("every_n_train_steps and every_n_epochs must be >= 0"));
        }
        if opts.monitor.is_none() && opts.save_top_k > 1 {
            return Err(Error::invalid(format!(
                "ModelCheckpoint(save_top_k={}, monitor=None) is not valid: there is no metric to rank the checkpoints",
                opts.save_top_k
            )));
        }
        check_time_interval(&opts)?;
        if let Some(template) = &opts.filename {
            // A bad template fails now, not at the first save.
            format_name(template, &BTreeMap::new(), opts.auto_insert_metric_name)?;
        }
        Ok(ModelCheckpoint {
            dirpath: opts.dirpath.clone(),
            opts,
            best_k_models: BTreeMap::new(),
            best_model_path: String::new(),
            best_model_score: None,
            last_model_path: String::new(),
            last_global_step_saved: -1,
            last_checkpoint_saved: String::new(),
            last_time_checked: None,
        })
    }

    /// The options.
    pub fn options(&self) -> &ModelCheckpointOptions {
        &self.opts
    }

    /// The folder checkpoints go to (known once fit has started).
    pub fn dirpath(&self) -> Option<&Path> {
        self.dirpath.as_deref()
    }

    fn save_on_train_epoch_end(&self, ctx: &HookContext) -> bool {
        if let Some(v) = self.opts.save_on_train_epoch_end {
            return v;
        }
        // Time-based validation: saves wait for the validation end.
        if ctx.state.val_check_by_time {
            return false;
        }
        if ctx.state.check_val_every_n_epoch != Some(1) {
            return false;
        }
        ctx.state.num_val_batches == 0 || ctx.state.val_once_per_epoch
    }

    /// Whether this save is left out: in a fast_dev_run or sanity check,
    /// or when the step is the one saved last, unless the epoch ran forward
    /// only (StochasticWeightAveraging's BatchNorm epoch, whose end holds
    /// the averaged model though it took no step).
    fn skip(&self, ctx: &HookContext) -> bool {
        ctx.state.fast_dev_run
            || ctx.state.sanity_checking
            || (self.last_global_step_saved == ctx.state.global_step && !ctx.state.skip_backward)
    }

    fn metrics_for_name(ctx: &HookContext) -> Result<BTreeMap<String, f64>> {
        let mut m = ctx.state.callback_metrics.snapshot()?;
        m.insert("epoch".into(), ctx.state.epoch as f64);
        m.insert("step".into(), ctx.state.global_step as f64);
        Ok(m)
    }

    /// The file the next save writes: the template's name, with a `-vN`
    /// suffix while that name is taken by a file this callback did not
    /// write. Under DDP rank 0's disk answers for every rank (Lightning's
    /// `file_exists` broadcast), so the ranks choose the same name even
    /// where their folders differ (a node that cannot see rank 0's files).
    fn path_for(&self, ctx: &HookContext, template: &str) -> Result<PathBuf> {
        let dir = self.dirpath.as_ref().ok_or_else(|| Error::state("ModelCheckpoint has no folder yet"))?;
        let name = format_name(template, &Self::metrics_for_name(ctx)?, self.opts.auto_insert_metric_name)?;
        let mut path = dir.join(format!("{name}{EXTENSION}"));
        if !self.opts.enable_version_counter {
            return Ok(path);
        }
        let mut version = 1;
        loop {
            let key = path.to_string_lossy();
            let taken_here =
                path.exists() && !self.best_k_models.contains_key(key.as_ref()) && key != self.last_model_path;
            let taken = match ctx.rank_zero_decides {
                Some(decide) => decide(taken_here).map_err(|e| e.context("ModelCheckpoint's file name decision"))?,
                None => taken_here,
            };
            if !taken {
                return Ok(path);
            }
            path = dir.join(format!("{name}-v{version}{EXTENSION}"));
            version += 1;
        }
    }

    fn save(&mut self, ctx: &mut HookContext) -> Result<()> {
        let template = self.opts.filename.clone().unwrap_or_else(|| "{epoch}-{step}".to_string());
        match self.opts.monitor.clone() {
            Some(monitor) => self.save_top_k(ctx, &monitor, &template)?,
            None => self.save_latest(ctx, &template)?,
        }
        self.save_last(ctx)?;
        self.last_global_step_saved = ctx.state.global_step;
        Ok(())
    }

    /// Asks for a checkpoint at `path` and remembers it as the last written.
    fn request_save(&mut self, ctx: &mut HookContext, path: &Path) {
        ctx.state.save_requests.push((path.to_path_buf(), self.opts.save_weights_only));
        ctx.state.checkpoint_notices.push(path.to_path_buf());
        self.last_checkpoint_saved = path.to_string_lossy().to_string();
    }

    /// Lightning's `_save_last_checkpoint`: `last.ckpt` saved, or with
    /// `save_last_link` a link to the last checkpoint written (when there
    /// is one and `save_top_k` is not 0).
    fn save_last(&mut self, ctx: &mut HookContext) -> Result<()> {
        if !self.opts.save_last {
            return Ok(());
        }
        let path = self
            .dirpath
            .as_ref()
            .map(|d| d.join(format!("last{EXTENSION}")))
            .ok_or_else(|| Error::state("ModelCheckpoint has no folder yet"))?;
        self.last_model_path = path.to_string_lossy().to_string();
        let target = PathBuf::from(&self.last_checkpoint_saved);
        if self.opts.save_last_link && self.opts.save_top_k != 0 && !self.last_checkpoint_saved.is_empty() {
            if target != path {
                ctx.state.link_requests.push((target, path));
            }
        } else {
            self.request_save(ctx, &path);
        }
        Ok(())
    }

    /// Lightning's `on_exception` with `save_on_exception`: a checkpoint
    /// named by the template (no version suffix) and `last`.
    fn save_on_exception(&mut self, ctx: &mut HookContext) -> Result<()> {
        let template = self.opts.filename.clone().unwrap_or_else(|| "{epoch}-{step}".to_string());
        let dir = self.dirpath.clone().ok_or_else(|| Error::state("ModelCheckpoint has no folder yet"))?;
        let name = format_name(&template, &Self::metrics_for_name(ctx)?, self.opts.auto_insert_metric_name)?;
        let path = dir.join(format!("{name}{EXTENSION}"));
        self.request_save(ctx, &path);
        self.last_global_step_saved = ctx.state.global_step;
        self.save_last(ctx)
    }

    /// Whether the time trigger fires now (moving its clock on when it
    /// does). Under DDP rank 0's clock decides for every rank (Lightning
    /// broadcasts it), so the ranks save together: FSDP gathers on every
    /// rank for each save.
    fn time_due(&mut self, ctx: &HookContext) -> Result<bool> {
        let Some(interval) = self.opts.train_time_interval else { return Ok(false) };
        let now = Instant::now();
        let here = self.last_time_checked.is_some_and(|t| now.duration_since(t).as_secs_f64() >= interval);
        let due = match ctx.rank_zero_decides {
            Some(decide) => decide(here).map_err(|e| e.context("ModelCheckpoint's train_time_interval decision"))?,
            None => here,
        };
        if due {
            self.last_time_checked = Some(now);
        }
        Ok(due)
    }

    /// Lightning's `_should_remove_checkpoint`, stricter: the previous file
    /// is removed only when it is not the current one, not the checkpoint
    /// this fit resumed from, and a `.ckpt` file directly in this
    /// callback's folder (by real path). Returns the path to remove.
    fn should_remove(&self, ctx: &HookContext, previous: &str, current: &Path) -> Option<PathBuf> {
        let prev = Path::new(previous);
        if previous.is_empty() || prev == current {
            return None;
        }
        if ctx.state.ckpt_path.as_deref().is_some_and(|r| same_file(r, prev)) {
            return None;
        }
        let dir = self.dirpath.as_deref()?;
        if ctx.state.checkpoint_plugin {
            return in_store_folder(dir, prev);
        }
        in_folder(dir, prev)
    }

    /// Asks the run to remove `previous` when [`Self::should_remove`] allows it.
    fn remove_previous(&self, ctx: &mut HookContext, previous: &str, current: &Path) {
        if let Some(path) = self.should_remove(ctx, previous, current) {
            ctx.state.remove_requests.push(path);
        }
    }

    fn save_latest(&mut self, ctx: &mut HookContext, template: &str) -> Result<()> {
        if self.opts.save_top_k == 0 {
            return Ok(());
        }
        let path = self.path_for(ctx, template)?;
        let key = path.to_string_lossy().to_string();
        if self.opts.save_top_k == 1 && !self.best_model_path.is_empty() && self.best_model_path != key {
            let previous = self.best_model_path.clone();
            self.remove_previous(ctx, &previous, &path);
            self.best_k_models.remove(&previous);
        }
        self.request_save(ctx, &path);
        self.best_k_models.insert(key.clone(), ctx.state.global_step as f64);
        self.best_model_path = key;
        Ok(())
    }

    fn save_top_k(&mut self, ctx: &mut HookContext, monitor: &str, template: &str) -> Result<()> {
        let current = ctx
            .metric(monitor)
            .map_err(|e| e.context(format!("ModelCheckpoint(monitor={monitor:?}) could not find the metric")))?;
        let mode = self.opts.mode;
        // A NaN score ranks as the worst possible.
        let current = if current.is_nan() { mode.worst() } else { current };
        let k = self.opts.save_top_k;
        if k == 0 {
            return Ok(());
        }
        // Lightning's check_monitor_top_k: while fewer than k are kept a
        // checkpoint is saved; then one better than the worst kept is
        // saved when every rank says so (a metric logged without sync_dist
        // differs between the ranks, which must still make the same saves:
        // they meet in each one). Every rank asks at every save, even
        // while filling, so that ranks whose kept lists differ (a folder
        // another node cannot see when resuming) still meet.
        let keep = if k == -1 {
            true
        } else {
            let wanted = (self.best_k_models.len() as i64) < k
                || self.worst_kept().is_some_and(|(_, w)| mode.better(current, w));
            match ctx.all_ranks_decide {
                Some(decide) => decide(wanted).map_err(|e| e.context("ModelCheckpoint's save_top_k decision"))?,
                None => wanted,
            }
        };
        if !keep {
            return Ok(());
        }
        let path = self.path_for(ctx, template)?;
        let key = path.to_string_lossy().to_string();
        self.request_save(ctx, &path);
        self.best_k_models.insert(key, current);
        if k > 0 && self.best_k_models.len() as i64 > k {
            if let Some((p, _)) = self.worst_kept() {
                self.best_k_models.remove(&p);
                self.remove_previous(ctx, &p, &path);
            }
        }
        if let Some((p, s)) = self.best_kept() {
            self.best_model_path = p;
            self.best_model_score = Some(s);
        }
        Ok(())
    }

    fn best_kept(&self) -> Option<(String, f64)> {
        let mode = self.opts.mode;
        self.best_k_models.iter().fold(None, |acc: Option<(String, f64)>, (p, s)| match acc {
            Some((_, b)) if !mode.better(*s, b) => acc,
            _ => Some((p.clone(), *s)),
        })
    }

    fn worst_kept(&self) -> Option<(String, f64)> {
        let mode = self.opts.mode;
        self.best_k_models.iter().fold(None, |acc: Option<(String, f64)>, (p, s)| match acc {
            Some((_, w)) if !mode.better(w, *s) => acc,
            _ => Some((p.clone(), *s)),
        })
    }
}

impl Callback for ModelCheckpoint {
    fn name(&self) -> String {
        format!("ModelCheckpoint{{monitor={:?}}}", self.opts.monitor.as_deref().unwrap_or(""))
    }

    fn kind(&self) -> String {
        "ModelCheckpoint".into()
    }

    fn monitors(&self) -> bool {
        true
    }

    fn lightning_state_key(&self) -> Option<String> {
        let o = &self.opts;
        Some(format!(
            "ModelCheckpoint{{'monitor': {}, 'mode': '{}', 'every_n_train_steps': {}, 'every_n_epochs': {}, \
             'train_time_interval': {}}}",
            crate::checkpoint::lightning::py_repr_opt(o.monitor.as_deref()),
            o.mode.as_str(),
            o.every_n_train_steps,
            self.effective_every_n_epochs(),
            o.train_time_interval.map_or_else(|| "None".to_string(), py_timedelta_repr)
        ))
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::Setup if ctx.stage == "fit" && self.dirpath.is_none() => {
                // Lightning's save_dir/name/version: the run folder, not a
                // TensorBoard logger's sub_dir below it.
                let base = ctx.state.run_dir.clone().unwrap_or_else(|| ctx.state.root_dir.clone());
                self.dirpath = Some(base.join("checkpoints"));
            }
            Hook::TrainStart => self.last_time_checked = Some(Instant::now()),
            Hook::TrainBatchEnd => {
                let n = self.opts.every_n_train_steps;
                let step_due = n > 0 && ctx.state.global_step > 0 && ctx.state.global_step % n == 0;
                // As Lightning, the time trigger's clock moves on even when
                // the save is then skipped.
                let time_due = self.time_due(ctx)?;
                if (step_due || time_due) && !self.skip(ctx) {
                    self.save(ctx)?;
                }
            }
            Hook::Exception if ctx.stage == "fit" && self.should_save_on_exception(ctx) => {
                self.save_on_exception(ctx)?
            }
            Hook::TrainEpochEnd if self.save_on_train_epoch_end(ctx) && self.epoch_trigger(ctx) => self.save(ctx)?,
            Hook::ValidationEnd
                if ctx.stage == "fit" && !self.save_on_train_epoch_end(ctx) && self.epoch_trigger(ctx) =>
            {
                self.save(ctx)?
            }
            _ => {}
        }
        Ok(())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn state_dict(&self) -> BTreeMap<String, String> {
        let mut s = BTreeMap::new();
        s.insert("monitor".into(), self.opts.monitor.clone().unwrap_or_default());
        s.insert("mode".into(), self.opts.mode.as_str().into());
        s.insert("best_model_path".into(), self.best_model_path.clone());
        s.insert("best_model_score".into(), self.best_model_score.map(|v| v.to_string()).unwrap_or_default());
        s.insert("last_model_path".into(), self.last_model_path.clone());
        s.insert("dirpath".into(), self.dirpath.as_ref().map(|d| d.to_string_lossy().to_string()).unwrap_or_default());
        s.insert("best_k_models".into(), best_k_text(&self.best_k_models));
        s
    }

    /// Restores the bookkeeping; a NaN score (or one that is no number) is
    /// a `Format` error and changes nothing.
    fn load_state_dict(&mut self, state: &BTreeMap<String, String>) -> Result<()> {
        let get = |k: &str| state.get(k).cloned().unwrap_or_default();
        // The mode the scores were ranked in (the state's own, when it says).
        let mode = match state.get("mode") {
            Some(m) if !m.is_empty() => {
                Mode::parse(m).map_err(|e| Error::format(format!("ModelCheckpoint state: {}", e.message)))?
            }
            _ => self.opts.mode,
        };
        let score = get("best_model_score");
        let mut best_model_score = if score.is_empty() {
            None
        } else {
            Some(numbers::parse(&score, Infinity::Allowed, "ModelCheckpoint state: best_model_score")?)
        };
        let mut last_model_path = get("last_model_path");
        // Lightning keeps the top-k bookkeeping only when the folder is the same.
        let dir = get("dirpath");
        let dirpath = match &self.dirpath {
            None if !dir.is_empty() => Some(PathBuf::from(&dir)),
            d => d.clone(),
        };
        let mut best_k_models = None;
        if dirpath.as_ref().map(|d| d.to_string_lossy().to_string()) == Some(dir) {
            let all = read_best_k(&get("best_k_models"), mode)?;
            // Only checkpoints inside this folder are this callback's to manage.
            let dir = dirpath.clone().unwrap_or_default();
            best_k_models = Some(all.into_iter().filter(|(p, _)| in_folder(&dir, Path::new(p)).is_some()).collect());
        } else {
            // Another folder's bookkeeping (Lightning keeps only best_model_path).
            best_model_score = None;
            last_model_path.clear();
        }
        self.best_model_path = get("best_model_path");
        self.best_model_score = best_model_score;
        self.last_model_path = last_model_path;
        self.dirpath = dirpath;
        if let Some(b) = best_k_models {
            self.best_k_models = b;
        }
        Ok(())
    }
}

/// The ranked checkpoints as a state keeps them (`best_k_models`): JSON of
/// path to score, an infinite score (an infinite metric, or a NaN one
/// ranked as the worst) as the string "inf" or "-inf", which a JSON number
/// cannot hold.
pub(crate) fn best_k_text(ranked: &BTreeMap<String, f64>) -> String {
    let scores = ranked.iter().map(|(p, s)| {
        let score = if s.is_finite() { serde_json::Value::from(*s) } else { serde_json::Value::String(s.to_string()) };
        (p.clone(), score)
    });
    serde_json::Value::Object(scores.collect()).to_string()
}

/// Reads what [`best_k_text`] wrote: numbers, "inf" or "-inf", and null
/// (how states written before kept an infinite score: read as the worst
/// of `mode`, where a NaN metric ranks); NaN, or anything else, is a
/// `Format` error.
pub(crate) fn read_best_k(text: &str, mode: Mode) -> Result<BTreeMap<String, f64>> {
    let all: BTreeMap<String, serde_json::Value> = serde_json::from_str(text)
        .map_err(|e| Error::format(format!("ModelCheckpoint state: best_k_models is malformed: {e}")))?;
    all.into_iter()
        .map(|(p, s)| {
            let what = format!("ModelCheckpoint state: best_k_models[{p:?}]");
            let score = match &s {
                serde_json::Value::Number(n) => {
                    n.as_f64().ok_or_else(|| Error::format(format!("{what} {n} is not a number")))?
                }
                serde_json::Value::String(t) => numbers::parse(t, Infinity::Allowed, &what)?,
                serde_json::Value::Null => mode.worst(),
                other => return Err(Error::format(format!("{what} {other} is not a score"))),
            };
            Ok((p, score))
        })
        .collect()
}

/// The file `path` names when it is a `.ckpt` file directly in folder
/// `dir` (comparing real paths: `..`, `.` and symlinked folders cannot
/// lead elsewhere), as the real path to remove; `None` otherwise.
fn in_folder(dir: &Path, path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    if !name.to_string_lossy().ends_with(EXTENSION) {
        return None;
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir_real = std::fs::canonicalize(dir).ok()?;
    (std::fs::canonicalize(parent).ok()? == dir_real).then(|| dir_real.join(name))
}

/// [`in_folder`] for checkpoints a checkpoint IO plugin stores (not on
/// disk), by the text of the path: a `.ckpt` file directly in `dir`, with
/// no `..` in it.
fn in_store_folder(dir: &Path, path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let inside = name.to_string_lossy().ends_with(EXTENSION)
        && path.parent() == Some(dir)
        && !path.components().any(|c| c == std::path::Component::ParentDir);
    inside.then(|| path.to_path_buf())
}

/// Whether two paths name the same file (same inode when both exist,
/// else the same text).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

impl ModelCheckpoint {
    /// Whether an epoch-end trigger should save now.
    fn epoch_trigger(&self, ctx: &HookContext) -> bool {
        let n = self.effective_every_n_epochs();
        !self.skip(ctx) && self.opts.every_n_train_steps == 0 && n > 0 && (ctx.state.epoch + 1) % n == 0
    }

    /// `every_n_epochs` as it acts: 0 with `train_time_interval` (its
    /// default 1 then stands for Lightning's unset).
    fn effective_every_n_epochs(&self) -> i64 {
        if self.opts.train_time_interval.is_some() {
            0
        } else {
            self.opts.every_n_epochs
        }
    }

    /// Lightning's `_should_save_on_exception`.
    fn should_save_on_exception(&self, ctx: &HookContext) -> bool {
        self.opts.save_on_exception
            && !ctx.state.fast_dev_run
            && !ctx.state.sanity_checking
            && self.last_global_step_saved != ctx.state.global_step
            && self.dirpath.is_some()
    }
}

/// Checks `train_time_interval`: a finite number of seconds >= 0, not
/// with `every_n_train_steps`, nor with `every_n_epochs` other than 0 or
/// its default 1 (Lightning's triggers are mutually exclusive).
fn check_time_interval(opts: &ModelCheckpointOptions) -> Result<()> {
    let Some(t) = opts.train_time_interval else { return Ok(()) };
    if !t.is_finite() || t < 0.0 {
        return Err(Error::invalid(format!("train_time_interval must be a finite number of seconds >= 0, got {t}")));
    }
    if opts.every_n_train_steps > 0 || opts.every_n_epochs > 1 {
        return Err(Error::invalid(format!(
            "Combination of parameters every_n_train_steps={}, every_n_epochs={} and train_time_interval={t}s \
             should be mutually exclusive",
            opts.every_n_train_steps, opts.every_n_epochs
        )));
    }
    Ok(())
}

/// Python's `repr` of `datetime.timedelta(seconds=secs)` (rounded to the
/// microsecond as Python does), as Lightning's state key writes it.
pub(crate) fn py_timedelta_repr(secs: f64) -> String {
    let micros = (secs * 1e6).round_ties_even() as i64;
    let (days, rest) = (micros.div_euclid(86_400_000_000), micros.rem_euclid(86_400_000_000));
    let (seconds, micro) = (rest / 1_000_000, rest % 1_000_000);
    let parts: Vec<String> = [("days", days), ("seconds", seconds), ("microseconds", micro)]
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if parts.is_empty() {
        "datetime.timedelta(0)".to_string()
    } else {
        format!("datetime.timedelta({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timedelta_repr_as_python() {
        assert_eq!(py_timedelta_repr(0.0), "datetime.timedelta(0)");
        assert_eq!(py_timedelta_repr(1.5), "datetime.timedelta(seconds=1, microseconds=500000)");
        assert_eq!(py_timedelta_repr(90000.0), "datetime.timedelta(days=1, seconds=3600)");
        assert_eq!(py_timedelta_repr(1e-6), "datetime.timedelta(microseconds=1)");
    }

    #[test]
    fn time_interval_excludes_the_other_triggers() {
        let with = |steps: i64, epochs: i64, t: f64| {
            ModelCheckpoint::new(ModelCheckpointOptions {
                every_n_train_steps: steps,
                every_n_epochs: epochs,
                train_time_interval: Some(t),
                ..Default::default()
            })
        };
        assert!(with(0, 1, 2.0).is_ok() && with(0, 0, 0.0).is_ok());
        for (steps, epochs, t) in [(1, 1, 2.0), (0, 2, 2.0), (0, 1, -1.0), (0, 1, f64::NAN)] {
            let e = with(steps, epochs, t).err().expect("refused");
            assert_eq!(e.code, crate::error::ErrorCode::InvalidArgument, "{}", e.message);
        }
        let mc = with(0, 1, 1.5).unwrap();
        assert!(mc.lightning_state_key().unwrap().ends_with(
            "'every_n_epochs': 0, 'train_time_interval': datetime.timedelta(seconds=1, microseconds=500000)}"
        ));
    }
}

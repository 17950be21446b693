//! Lightning's `WandbLogger` in W&B's offline mode: a run folder
//! `save_dir/wandb/offline-run-<time>-<id>/` holding `run-<id>.wandb`, the
//! transaction log `wandb sync` uploads, with the run's settings, its
//! config (hyperparameters), a history row and summary update per
//! `log_metrics` (with `trainer/global_step` as Lightning's logger adds
//! it, and `_step`, `_runtime`, `_timestamp` as `wandb.log` adds them),
//! and the exit record when the run ends.
use super::records::{Body, Item, MetricDef, Record, RunInfo};
use super::transaction_log::TransactionLog;
use crate::error::{Error, Result};
use crate::loggers::csv::{prefixed, python_float};
use crate::loggers::shared::{NamedLogger, SharedLogger};
use crate::loggers::tensorboard::writer::hostname;
use crate::loggers::{Logger, RunStatus};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The writer named in the file's header.
const PRODUCER: &str = concat!("fulmen-", env!("CARGO_PKG_VERSION"));
/// The header's `min_consumer`, as wandb 0.31's writer fills it in.
const MIN_CONSUMER: &str = "0.70.0";
/// The step metric Lightning's logger defines and logs.
pub const GLOBAL_STEP: &str = "trainer/global_step";
/// The longest run id accepted.
const MAX_ID: usize = 64;
/// The keys `wandb.log` adds to every row; a metric of one of these names
/// is dropped, as W&B's own values take their place.
const RESERVED: [&str; 3] = ["_step", "_runtime", "_timestamp"];

/// A W&B logger with Lightning's settings; the run starts on first use.
pub struct WandbLogger {
    save_dir: PathBuf,
    info: RunInfo,
    prefix: String,
    run: Option<OpenRun>,
}

/// A started run.
struct OpenRun {
    /// The run's id, every record's `stream_id`.
    id: String,
    dir: PathBuf,
    log: TransactionLog,
    /// The last record's number.
    num: i64,
    /// The next history row's `_step`.
    step: i64,
    start: Instant,
    /// The exit code the run ends with (the last finalize's, or finish's).
    exit_code: i32,
    /// Whether the exit record is written.
    finished: bool,
}

impl WandbLogger {
    /// A logger of project `project` ("" for Lightning's
    /// "lightning_logs") writing under `save_dir` ("" for ".").
    pub fn new(save_dir: &str, project: &str) -> Result<Self> {
        if project.contains(['/', '\\', '#', '?', '%', ':', '\0']) || project == "." || project == ".." {
            return Err(Error::invalid(format!(
                "W&B project {project:?}: a project name holds none of / \\ # ? % : (and is not . or ..)"
            )));
        }
        let info = RunInfo {
            project: if project.is_empty() { "lightning_logs".into() } else { project.into() },
            ..RunInfo::default()
        };
        let save_dir = PathBuf::from(if save_dir.is_empty() { "." } else { save_dir });
        Ok(WandbLogger { save_dir, info, prefix: String::new(), run: None })
    }

    fn check_unopened(&self, what: &str) -> Result<()> {
        if self.run.is_some() {
            return Err(Error::state(format!(
                "cannot set {what}: the W&B logger's run {} started (set it before the first use)",
                self.info.run_id
            )));
        }
        Ok(())
    }

    /// The run's display name (Lightning's `name`).
    pub fn set_name(&mut self, name: &str) -> Result<()> {
        self.check_unopened("the name")?;
        self.info.display_name = name.to_string();
        Ok(())
    }

    /// The run's id (Lightning's `id` / `version`; "" for a new random
    /// one): letters, digits, `-` and `_`, at most 64.
    pub fn set_id(&mut self, id: &str) -> Result<()> {
        self.check_unopened("the run id")?;
        if id.len() > MAX_ID || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(Error::invalid(format!(
                "run id {id:?}: expected at most {MAX_ID} letters, digits, '-' or '_'"
            )));
        }
        self.info.run_id = id.to_string();
        Ok(())
    }

    /// One of `wandb.init`'s run settings: "entity", "group", "job_type"
    /// or "notes".
    pub fn set_setting(&mut self, key: &str, value: &str) -> Result<()> {
        self.check_unopened(key)?;
        let field = match key {
            "entity" => &mut self.info.entity,
            "group" => &mut self.info.group,
            "job_type" => &mut self.info.job_type,
            "notes" => &mut self.info.notes,
            other => {
                return Err(Error::invalid(format!(
                    "W&B setting {other:?}: expected \"entity\", \"group\", \"job_type\" or \"notes\""
                )))
            }
        };
        *field = value.to_string();
        Ok(())
    }

    /// Adds a tag of the run (`wandb.init(tags=...)`); a tag given twice
    /// is kept once.
    pub fn add_tag(&mut self, tag: &str) -> Result<()> {
        self.check_unopened("a tag")?;
        if tag.is_empty() {
            return Err(Error::invalid("a tag is empty"));
        }
        if !self.info.tags.iter().any(|t| t == tag) {
            self.info.tags.push(tag.to_string());
        }
        Ok(())
    }

    /// Put with `-` before every metric name (Lightning's `prefix`).
    pub fn set_prefix(&mut self, prefix: &str) -> Result<()> {
        self.check_unopened("the prefix")?;
        self.prefix = prefix.to_string();
        Ok(())
    }

    /// The run, started on first use: its folder made, its file opened
    /// with the header, the run and Lightning's two metric definitions.
    fn open(&mut self) -> Result<&mut OpenRun> {
        if self.run.is_none() {
            let given = (!self.info.run_id.is_empty()).then(|| self.info.run_id.clone());
            let root = self.save_dir.join("wandb");
            std::fs::create_dir_all(&root).map_err(|e| Error::io(format!("creating {}: {e}", root.display())))?;
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            let stamp = local_stamp(now.as_secs() as i64);
            let mut attempt = 0;
            let (dir, id) = loop {
                let id = given.clone().unwrap_or_else(new_run_id);
                let dir = root.join(format!("offline-run-{stamp}-{id}"));
                match std::fs::create_dir(&dir) {
                    Ok(()) => break (dir, id),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && given.is_none() && attempt < 100 => {
                        attempt += 1
                    }
                    Err(e) => return Err(Error::io(format!("creating {}: {e}", dir.display()))),
                }
            };
            let mut info = self.info.clone();
            info.run_id = id;
            info.host = hostname();
            info.start_time = (now.as_secs() as i64, now.subsec_nanos() as i32);
            match start_run(&dir, &info) {
                Ok(run) => {
                    point_latest_run(&root, &dir);
                    self.info = info;
                    self.run = Some(run);
                }
                Err(e) => {
                    // The folder is this call's own: nothing half-made stays
                    // for `wandb sync` to trip on.
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
            }
        }
        Ok(self.run.as_mut().expect("opened above"))
    }

    /// The started run, for writing (a finished run refuses).
    fn started(&mut self) -> Result<&mut OpenRun> {
        let run = self.open()?;
        if run.finished {
            return Err(Error::state(format!("the W&B run {} is finished; make a new logger", run.id)));
        }
        Ok(run)
    }

    /// The run's id (Lightning's `version`), starting the run if the
    /// logger was not used yet.
    pub fn run_id(&mut self) -> Result<String> {
        self.open()?;
        Ok(self.info.run_id.clone())
    }

    /// The run's folder (what `wandb sync` takes), starting the run if
    /// the logger was not used yet.
    pub fn run_folder(&mut self) -> Result<PathBuf> {
        Ok(self.open()?.dir.clone())
    }

    /// Logs `metrics` (with `epoch` when given and not among them) and
    /// `trainer/global_step` = `step`, as Lightning's `log_metrics`: one
    /// history row and the summary's update.
    pub fn log_metrics_at(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        let mut items: Vec<Item> = metrics.iter().map(|(k, v)| (prefixed(&self.prefix, k), json_float(*v))).collect();
        if let Some(epoch) = epoch.filter(|_| !metrics.contains_key("epoch")) {
            items.push((prefixed(&self.prefix, "epoch"), epoch.to_string()));
        }
        items.retain(|(k, _)| k != GLOBAL_STEP && !RESERVED.contains(&k.as_str()));
        items.push((GLOBAL_STEP.into(), step.to_string()));
        let run = self.started()?;
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        items.push(("_step".into(), run.step.to_string()));
        items.push(("_runtime".into(), json_float(run.start.elapsed().as_secs_f64())));
        items.push(("_timestamp".into(), json_float(wall)));
        let step_num = run.step;
        run.write(Body::Summary(items.clone()))?;
        run.write(Body::History { items, step: step_num })?;
        run.step += 1;
        Ok(())
    }

    /// Records hyperparameters in the run's config (Lightning's
    /// `log_hyperparams`: `config.update(params)`).
    pub fn log_config(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        let items: Vec<Item> = params.iter().map(|(k, v)| (k.clone(), json_value(v))).collect();
        self.started()?.write(Body::Config(items))
    }

    /// Ends the run now (`wandb.finish(exit_code)`): the exit record is
    /// written and the file made durable; later logging is refused; a
    /// second finish does nothing. A logger never used starts and ends
    /// an empty run.
    pub fn finish(&mut self, exit_code: i32) -> Result<()> {
        if self.run.as_ref().is_some_and(|r| r.finished) {
            return Ok(());
        }
        let run = self.started()?;
        run.exit_code = exit_code;
        run.end()
    }
}

/// Makes the run's `files/` and its `.wandb` file in `dir`, and writes the
/// header, the run and Lightning's two metric definitions.
fn start_run(dir: &Path, info: &RunInfo) -> Result<OpenRun> {
    let files = dir.join("files");
    std::fs::create_dir(&files).map_err(|e| Error::io(format!("creating {}: {e}", files.display())))?;
    let log = TransactionLog::create(&dir.join(format!("run-{}.wandb", info.run_id)))?;
    let mut run = OpenRun {
        id: info.run_id.clone(),
        dir: dir.to_path_buf(),
        log,
        num: 0,
        step: 0,
        start: Instant::now(),
        exit_code: 0,
        finished: false,
    };
    run.write(Body::Header { producer: PRODUCER.into(), min_consumer: MIN_CONSUMER.into() })?;
    run.write(Body::Run(info.clone()))?;
    run.write(Body::Metric(MetricDef { name: GLOBAL_STEP.into(), ..MetricDef::default() }))?;
    let every =
        MetricDef { glob_name: "*".into(), step_metric: GLOBAL_STEP.into(), step_sync: true, ..MetricDef::default() };
    run.write(Body::Metric(every))?;
    run.log.flush(false)?;
    Ok(run)
}

/// Points `root/latest-run` at the run folder, as wandb does (a relative
/// link, which `wandb leet` and `wandb sync` read without a path); best
/// effort, as wandb's. Only a link or nothing is replaced: a folder or file
/// of that name is left alone.
fn point_latest_run(root: &Path, dir: &Path) {
    let link = root.join("latest-run");
    if std::fs::symlink_metadata(&link).is_ok_and(|m| !m.file_type().is_symlink()) {
        return;
    }
    let _ = crate::fs_safe::replace_with_link(dir, &link);
}

impl OpenRun {
    /// Appends the next record.
    fn write(&mut self, body: Body) -> Result<()> {
        self.num += 1;
        let record = Record { num: self.num, body, stream_id: self.id.clone() };
        use crate::loggers::tensorboard::proto::Message;
        self.log.append(&record.encode())
    }

    /// Writes the exit record once and makes the file durable.
    fn end(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let runtime = self.start.elapsed().as_secs().min(i32::MAX as u64) as i32;
        self.write(Body::Exit { code: self.exit_code, runtime })?;
        self.log.flush(true)
    }
}

impl Drop for WandbLogger {
    /// The run ends with the logger, as wandb ends a run when its process
    /// exits: code 1 if the last finalize was "failed" or "killed", else 0.
    fn drop(&mut self) {
        if let Some(run) = self.run.as_mut() {
            let _ = run.end();
        }
    }
}

/// A float as Python's `json.dumps` writes it: `repr`, with `NaN`,
/// `Infinity` and `-Infinity`.
pub fn json_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        python_float(v)
    }
}

/// A hyperparameter's text as a JSON value: a plain number, `true` or
/// `false` as itself (as hparams.yaml has them), anything else a string.
pub fn json_value(text: &str) -> String {
    if crate::loggers::yaml::value(text) == text {
        text.to_string()
    } else {
        serde_json::Value::String(text.to_string()).to_string()
    }
}

/// Eight lowercase letters and digits, as wandb's run ids.
fn new_run_id() -> String {
    crate::loggers::random_text(8, b"abcdefghijklmnopqrstuvwxyz0123456789")
}

/// `YYYYMMDD_HHMMSS` of `secs` in local time, as wandb names run folders.
fn local_stamp(secs: i64) -> String {
    // SAFETY: `tm` is plain data (integers and a pointer), valid zeroed.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    // SAFETY: both pointers are valid for the call; localtime_r keeps
    // neither and is thread-safe.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return format!("{secs}");
    }
    format!(
        "{:04}{:02}{:02}_{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

impl Logger for WandbLogger {
    fn name(&self) -> &str {
        self.kind_name()
    }

    fn log_dir(&self) -> Option<&Path> {
        None
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        self.log_metrics_at(metrics, epoch, step)
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        self.log_config(params)
    }

    fn save(&mut self) -> Result<()> {
        match self.run.as_mut() {
            Some(run) if !run.finished => run.log.flush(false),
            _ => Ok(()),
        }
    }

    /// Makes the file durable and keeps the outcome for the exit record
    /// (the last finalize decides: "failed" or "killed" exit code 1, else
    /// 0); the run goes on, as Lightning's logger leaves it open until the
    /// process ends.
    fn finalize(&mut self, status: &str) -> Result<()> {
        let failed = RunStatus::parse(status)? != RunStatus::Finished;
        match self.run.as_mut() {
            Some(run) if !run.finished => {
                run.exit_code = i32::from(failed);
                run.log.flush(true)
            }
            _ => Ok(()),
        }
    }

    /// `save_dir` (Lightning's `trainer.log_dir` with a W&B logger first),
    /// after starting the run so its id names the checkpoint folder.
    fn resolve_log_dir(&mut self) -> Result<Option<PathBuf>> {
        self.open()?;
        Ok(Some(self.save_dir.clone()))
    }

    /// `save_dir/project/run_id`, where ModelCheckpoint writes.
    fn run_dir(&self) -> Option<PathBuf> {
        self.run.as_ref().map(|_| self.save_dir.join(&self.info.project).join(&self.info.run_id))
    }
}

/// A W&B logger shared by a handle and the trainers it was added to.
pub type SharedWandbLogger = SharedLogger<WandbLogger>;

impl NamedLogger for WandbLogger {
    fn kind_name(&self) -> &'static str {
        "wandb"
    }
}

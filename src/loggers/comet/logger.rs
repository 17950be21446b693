//! Lightning's `CometLogger` in Comet's offline mode: an experiment whose
//! messages (hyperparameters, metrics with their step and epoch, other
//! values) stream to `messages.json` in a working folder under the offline
//! directory, archived at the end as `<key>-<suffix>.zip`, the file
//! `comet upload` sends.
use super::archive::{write_archive, ExperimentMeta};
use super::messages::{self, Source, MAX_KEY};
use crate::error::{Error, Result};
use crate::loggers::logger::now_ms;
use crate::loggers::shared::{NamedLogger, SharedLogger};
use crate::loggers::{Logger, RunStatus};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// What the experiment says it was created from (Lightning's logger
/// says "pytorch-lightning").
pub(crate) const CREATED_FROM: &str = "fulmen";
/// The messages file inside the working folder and the archive.
pub(crate) const MESSAGES_FILE: &str = "messages.json";
/// The experiment's metadata inside the working folder and the archive.
pub(crate) const EXPERIMENT_FILE: &str = "experiment.json";

/// How `comet upload` treats the experiment (comet_ml's `mode`, the
/// archive's `resume_strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Appends to the experiment of that key if the server has one, else
    /// creates it (comet_ml's default).
    GetOrCreate,
    /// Appends to an existing experiment of that key.
    Get,
    /// Creates a new experiment.
    Create,
}

impl Mode {
    /// comet_ml's name of the mode.
    pub fn text(self) -> &'static str {
        match self {
            Mode::GetOrCreate => "get_or_create",
            Mode::Get => "get",
            Mode::Create => "create",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        match text {
            "" | "get_or_create" => Ok(Mode::GetOrCreate),
            "get" => Ok(Mode::Get),
            "create" => Ok(Mode::Create),
            other => {
                Err(Error::invalid(format!("Comet mode {other:?}: expected \"get_or_create\", \"get\" or \"create\"")))
            }
        }
    }
}

/// A Comet logger with Lightning's settings; the experiment starts on
/// first use.
pub struct CometLogger {
    offline_dir: PathBuf,
    project: Option<String>,
    workspace: Option<String>,
    name: String,
    /// The key given, or "" for a new random one.
    key: String,
    mode: Mode,
    tags: Vec<String>,
    prefix: String,
    run: Option<OpenExperiment>,
}

/// A started experiment.
struct OpenExperiment {
    meta: ExperimentMeta,
    /// `<offline dir>/<key>-<6 letters>.zip` (mode "create": `<key>.zip`),
    /// as comet_ml names it; written when the experiment ends.
    archive: PathBuf,
    /// The archive's path with `.partial` for `.zip`: the messages as they
    /// are logged.
    work: PathBuf,
    messages: BufWriter<File>,
    /// The next message's `message_id`.
    next_id: u64,
    curr_step: Option<i64>,
    curr_epoch: Value,
    /// The last value of every parameter logged, so one logged again
    /// unchanged is not written twice (as comet_ml).
    params: HashMap<String, Value>,
    /// Set after a failed write: later lines would follow a torn one.
    broken: bool,
    /// Bytes of `messages.json` written, and their CRC-32 (the archive's
    /// record of it, without reading the file again).
    written: u64,
    crc: crc32fast::Hasher,
    /// Whether the archive is written.
    ended: bool,
}

/// A name that also names a folder: not empty, no `/`, `\` or NUL, not
/// `.` or `..`.
fn check_folder_name(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.contains(['/', '\\', '\0']) || value == "." || value == ".." {
        return Err(Error::invalid(format!(
            "Comet {what} {value:?}: expected a name without / or \\ (and not . or ..)"
        )));
    }
    Ok(())
}

impl CometLogger {
    /// A logger of project `project` ("" for none: Comet's
    /// "Uncategorized") whose archive goes to `offline_dir` ("" for
    /// ".").
    pub fn new(offline_dir: &str, project: &str) -> Result<Self> {
        let project = if project.is_empty() {
            None
        } else {
            check_folder_name("project", project)?;
            Some(project.to_string())
        };
        Ok(CometLogger {
            offline_dir: PathBuf::from(if offline_dir.is_empty() { "." } else { offline_dir }),
            project,
            workspace: None,
            name: String::new(),
            key: String::new(),
            mode: Mode::GetOrCreate,
            tags: Vec::new(),
            prefix: String::new(),
            run: None,
        })
    }

    fn check_unopened(&self, what: &str) -> Result<()> {
        if let Some(run) = &self.run {
            return Err(Error::state(format!(
                "cannot set {what}: the Comet experiment {} started (set it before the first use)",
                run.meta.key
            )));
        }
        Ok(())
    }

    /// The experiment's name (Lightning's `name`); "" for none.
    pub fn set_name(&mut self, name: &str) -> Result<()> {
        self.check_unopened("the name")?;
        self.name = name.to_string();
        Ok(())
    }

    /// The workspace the upload goes to (Lightning's `workspace`); "" for
    /// the account's default.
    pub fn set_workspace(&mut self, workspace: &str) -> Result<()> {
        self.check_unopened("the workspace")?;
        self.workspace = (!workspace.is_empty()).then(|| workspace.to_string());
        Ok(())
    }

    /// The experiment's key (Lightning's `experiment_key`): 32 to 50
    /// ASCII letters and digits, as Comet requires; "" for a new random
    /// one.
    pub fn set_experiment_key(&mut self, key: &str) -> Result<()> {
        self.check_unopened("the experiment key")?;
        let valid = key.bytes().all(|b| b.is_ascii_alphanumeric()) && (32..=50).contains(&key.len());
        if !key.is_empty() && !valid {
            return Err(Error::invalid(format!("experiment key {key:?}: expected 32 to 50 letters and digits")));
        }
        self.key = key.to_string();
        Ok(())
    }

    /// How the upload treats the experiment (Lightning's `mode`):
    /// "get_or_create" (or ""), "get" or "create".
    pub fn set_mode(&mut self, mode: &str) -> Result<()> {
        self.check_unopened("the mode")?;
        self.mode = Mode::parse(mode)?;
        Ok(())
    }

    /// Adds a tag of the experiment; a tag given twice is kept once.
    pub fn add_tag(&mut self, tag: &str) -> Result<()> {
        self.check_unopened("a tag")?;
        if tag.is_empty() {
            return Err(Error::invalid("a tag is empty"));
        }
        if !self.tags.iter().any(|t| t == tag) {
            self.tags.push(tag.to_string());
        }
        Ok(())
    }

    /// Put with `_` before every metric name (Lightning's `prefix`, which
    /// comet_ml joins with `_`).
    pub fn set_prefix(&mut self, prefix: &str) -> Result<()> {
        self.check_unopened("the prefix")?;
        self.prefix = prefix.to_string();
        Ok(())
    }

    /// The experiment, started on first use: its working folder made with
    /// the metadata, and the first messages (that it is offline, its name,
    /// what created it) written.
    fn open(&mut self) -> Result<&mut OpenExperiment> {
        if self.run.is_none() {
            let run = self.start()?;
            self.run = Some(run);
        }
        Ok(self.run.as_mut().expect("opened above"))
    }

    fn start(&self) -> Result<OpenExperiment> {
        std::fs::create_dir_all(&self.offline_dir)
            .map_err(|e| Error::io(format!("creating {}: {e}", self.offline_dir.display())))?;
        let given = !self.key.is_empty();
        // A given key in mode "create" names the archive alone: taken is an
        // error. Otherwise a new key or suffix is drawn for a taken name.
        let fixed = given && self.mode == Mode::Create;
        let mut attempt = 0;
        let (key, archive, work) = loop {
            let key = if given { self.key.clone() } else { crate::loggers::random_text(32, b"0123456789abcdef") };
            let stem = match self.mode {
                Mode::Create => key.clone(),
                _ => format!(
                    "{key}-{}",
                    crate::loggers::random_text(6, b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
                ),
            };
            let work = self.offline_dir.join(format!("{stem}.partial"));
            let archive = self.offline_dir.join(format!("{stem}.zip"));
            let taken = if std::fs::symlink_metadata(&archive).is_ok() {
                Error::io(format!("{} exists: an experiment of that key was archived there", archive.display()))
            } else {
                match std::fs::create_dir(&work) {
                    Ok(()) => break (key, archive, work),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Error::io(format!("creating {}: {e}", work.display()))
                    }
                    Err(e) => return Err(Error::io(format!("creating {}: {e}", work.display()))),
                }
            };
            attempt += 1;
            if fixed || attempt >= 100 {
                return Err(taken);
            }
        };
        let meta = ExperimentMeta {
            key,
            project: self.project.clone(),
            workspace: self.workspace.clone(),
            start_ms: now_ms(),
            stop_ms: None,
            tags: self.tags.clone(),
            mode: self.mode,
            key_given: given,
        };
        let started = (|| {
            crate::fs_safe::write_atomic(&work.join(EXPERIMENT_FILE), meta.to_json().as_bytes())?;
            let file = crate::fs_safe::create_new(&work.join(MESSAGES_FILE))
                .map_err(|e| Error::io(format!("creating {}: {e}", work.join(MESSAGES_FILE).display())))?;
            let mut run = OpenExperiment {
                meta: meta.clone(),
                archive,
                work: work.clone(),
                messages: BufWriter::new(file),
                next_id: 1,
                curr_step: None,
                curr_epoch: Value::Null,
                params: HashMap::new(),
                broken: false,
                written: 0,
                crc: crc32fast::Hasher::new(),
                ended: false,
            };
            run.other("offline_experiment", Value::Bool(true))?;
            if !self.name.is_empty() {
                run.other("Name", Value::String(messages::truncated(&self.name, messages::MAX_VALUE)))?;
            }
            run.other("Created from", Value::String(CREATED_FROM.into()))?;
            run.flush(false)?;
            Ok(run)
        })();
        if started.is_err() {
            // The folder is this call's own: nothing half-made stays.
            let _ = std::fs::remove_dir_all(&work);
        }
        started
    }

    /// The started experiment, for writing (an ended one refuses).
    fn started(&mut self) -> Result<&mut OpenExperiment> {
        let run = self.open()?;
        if run.ended {
            return Err(Error::state(format!("the Comet experiment {} ended; make a new logger", run.meta.key)));
        }
        if run.broken {
            return Err(Error::io(format!(
                "the Comet experiment {}'s messages could not be written earlier; nothing more is appended",
                run.meta.key
            )));
        }
        Ok(run)
    }

    /// The experiment's key (Lightning's `version`), starting the
    /// experiment if the logger was not used yet.
    pub fn experiment_key(&mut self) -> Result<String> {
        Ok(self.open()?.meta.key.clone())
    }

    /// The archive `comet upload` takes: where it will be until the
    /// experiment ends, and is after. Starts the experiment if the logger
    /// was not used yet.
    pub fn archive_path(&mut self) -> Result<PathBuf> {
        Ok(self.open()?.archive.clone())
    }

    /// Logs `metrics` at `step` in `epoch`, as Lightning's `log_metrics`
    /// through comet_ml: `curr_step` and `curr_epoch` when they change,
    /// then one metric message per name (sorted, prefixed with `_`). A
    /// metric named "epoch" is taken as the epoch, as Lightning takes it.
    pub fn log_metrics_at(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        let epoch_metric = metrics.get("epoch").map(|v| match *v {
            v if v.fract() == 0.0 && v.abs() < 9.0e15 => Value::from(v as i64),
            v => messages::metric_value(v),
        });
        let epoch = epoch.map(Value::from).or(epoch_metric);
        let names: Vec<(String, f64)> =
            metrics.iter().filter(|(k, _)| k.as_str() != "epoch").map(|(k, v)| (self.prefixed(k), *v)).collect();
        let run = self.started()?;
        let now = now_ms();
        run.parameter("curr_step", Value::from(step), Some(step), Source::Auto, now)?;
        run.curr_step = Some(step);
        if let Some(epoch) = epoch {
            run.curr_epoch = epoch.clone();
            run.parameter("curr_epoch", epoch, run.curr_step, Source::Auto, now)?;
        }
        for (name, value) in names {
            let id = run.take_id();
            let epoch = run.curr_epoch.clone();
            run.write_line(&messages::metric(id, now, &name, messages::metric_value(value), run.curr_step, epoch))?;
        }
        Ok(())
    }

    fn prefixed(&self, name: &str) -> String {
        let full = if self.prefix.is_empty() { name.to_string() } else { format!("{}_{name}", self.prefix) };
        messages::truncated(&full, MAX_KEY)
    }

    /// Logs hyperparameters as the experiment's parameters (Lightning's
    /// `log_hyperparams`), sorted by name; one logged before with the same
    /// value is not written again.
    pub fn log_parameters(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        let run = self.started()?;
        let now = now_ms();
        for (k, v) in params.iter().filter(|(k, _)| !k.is_empty()) {
            let name = messages::truncated(k, MAX_KEY);
            run.parameter(&name, messages::param_value(v), run.curr_step, Source::Manual, now)?;
        }
        Ok(())
    }

    /// Ends the experiment now (comet_ml's `end()`): its metadata gets the
    /// stop time, the messages and metadata are archived as
    /// [`CometLogger::archive_path`], and the working folder is
    /// removed; later logging is refused, a second end does nothing. A
    /// logger never used starts and ends an empty experiment. The archive's
    /// path is returned.
    pub fn end(&mut self) -> Result<PathBuf> {
        let run = self.open()?;
        if !run.ended {
            run.end()?;
        }
        Ok(run.archive.clone())
    }
}

impl OpenExperiment {
    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Appends one line; a failure leaves the experiment refusing more.
    fn write_line(&mut self, line: &str) -> Result<()> {
        let result = self.messages.write_all(line.as_bytes()).and_then(|()| self.messages.write_all(b"\n"));
        result.map_err(|e| {
            self.broken = true;
            Error::io(format!("writing {}: {e}", self.work.join(MESSAGES_FILE).display()))
        })?;
        self.crc.update(line.as_bytes());
        self.crc.update(b"\n");
        self.written += line.len() as u64 + 1;
        Ok(())
    }

    fn other(&mut self, key: &str, value: Value) -> Result<()> {
        let id = self.take_id();
        self.write_line(&messages::log_other(id, key, value))
    }

    /// Writes parameter `name` = `value` unless it holds that value
    /// already.
    fn parameter(&mut self, name: &str, value: Value, step: Option<i64>, source: Source, now: i64) -> Result<()> {
        if self.params.get(name) == Some(&value) {
            return Ok(());
        }
        let id = self.take_id();
        self.write_line(&messages::parameter(id, now, name, value.clone(), step, source))?;
        self.params.insert(name.to_string(), value);
        Ok(())
    }

    /// Hands the messages to the OS, and with `durable` to the disk.
    fn flush(&mut self, durable: bool) -> Result<()> {
        let path = self.work.join(MESSAGES_FILE);
        let io = |e: std::io::Error| Error::io(format!("writing {}: {e}", path.display()));
        self.messages.flush().map_err(io)?;
        if durable {
            self.messages.get_ref().sync_all().map_err(io)?;
        }
        Ok(())
    }

    /// Archives the experiment and removes its working folder.
    fn end(&mut self) -> Result<()> {
        if self.broken {
            return Err(Error::io(format!(
                "the Comet experiment {}'s messages are incomplete; its folder {} is left as it is",
                self.meta.key,
                self.work.display()
            )));
        }
        self.flush(true)?;
        let mut meta = self.meta.clone();
        meta.stop_ms = Some(now_ms().max(meta.start_ms));
        let messages = self.work.join(MESSAGES_FILE);
        write_archive(&self.archive, &meta, &messages, self.written, self.crc.clone().finalize())?;
        // Only this experiment's own two files and folder.
        let _ = std::fs::remove_file(self.work.join(MESSAGES_FILE));
        let _ = std::fs::remove_file(self.work.join(EXPERIMENT_FILE));
        let _ = std::fs::remove_dir(&self.work);
        self.meta = meta;
        self.ended = true;
        Ok(())
    }
}

impl Drop for CometLogger {
    /// The experiment ends with the logger, as comet_ml ends it when its
    /// process exits.
    fn drop(&mut self) {
        if let Some(run) = self.run.as_mut().filter(|r| !r.ended) {
            let _ = run.end();
        }
    }
}

impl Logger for CometLogger {
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
        self.log_parameters(params)
    }

    fn save(&mut self) -> Result<()> {
        match self.run.as_mut() {
            Some(run) if !run.ended && !run.broken => run.flush(false),
            _ => Ok(()),
        }
    }

    /// Makes the messages durable; the experiment goes on, as Lightning's
    /// logger only flushes it here and leaves it open until the process
    /// ends.
    fn finalize(&mut self, status: &str) -> Result<()> {
        RunStatus::parse(status)?;
        match self.run.as_mut() {
            Some(run) if !run.ended && !run.broken => run.flush(true),
            _ => Ok(()),
        }
    }

    /// The offline directory (Lightning's `trainer.log_dir` with a Comet
    /// logger first), after starting the experiment so its key names the
    /// checkpoint folder.
    fn resolve_log_dir(&mut self) -> Result<Option<PathBuf>> {
        self.open()?;
        Ok(Some(self.offline_dir.clone()))
    }

    /// `offline_dir/<project>/<key>` (Lightning's `save_dir/name/version`;
    /// "None" for no project, as Lightning writes it), where
    /// ModelCheckpoint writes.
    fn run_dir(&self) -> Option<PathBuf> {
        let run = self.run.as_ref()?;
        Some(self.offline_dir.join(self.project.as_deref().unwrap_or("None")).join(&run.meta.key))
    }
}

/// A Comet logger shared by a handle and the trainers it was added to.
pub type SharedCometLogger = SharedLogger<CometLogger>;

impl NamedLogger for CometLogger {
    fn kind_name(&self) -> &'static str {
        "comet"
    }
}

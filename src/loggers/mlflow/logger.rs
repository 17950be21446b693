//! Lightning's `MLFlowLogger` on an MLflow tracking server's REST API:
//! the experiment found or created by name, a run started on first use
//! (or an existing run resumed by id), metrics with steps, params, tags,
//! checkpoints as artifacts, and the run's status at the end.
use super::rest::{RunInfo, Tracking};
use crate::error::{Error, Result};
use crate::loggers::layout::check_relative;
use crate::loggers::shared::{NamedLogger, SharedLogger};
use crate::loggers::{Logger, RunStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which checkpoints become artifacts of the run (Lightning's `log_model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogModel {
    /// None (`log_model=False`, the default).
    #[default]
    Off,
    /// Those still on disk when the run ends (`log_model=True`).
    AtEnd,
    /// Each as soon as it is saved (`log_model="all"`).
    All,
}

/// How long one request may wait for the server.
const TIMEOUT: Duration = Duration::from_secs(60);
/// Lightning's cut of a hyperparameter's text.
const PARAM_LENGTH: usize = 250;

/// An MLflow logger with Lightning's settings; talks to the server from
/// its first use on.
pub struct MlflowLogger {
    tracking_uri: Option<String>,
    experiment_name: String,
    run_name: Option<String>,
    tags: BTreeMap<String, String>,
    log_model: LogModel,
    prefix: String,
    artifact_location: Option<String>,
    run_id: Option<String>,
    opened: Option<(Tracking, RunInfo)>,
    /// Checkpoints saved and not uploaded yet (`LogModel::AtEnd`).
    pending: Vec<PathBuf>,
    /// Checkpoints uploaded, with their modification time then (a file
    /// saved again under the same name, `last.ckpt`, goes again).
    uploaded: BTreeSet<(PathBuf, Option<std::time::SystemTime>)>,
}

impl MlflowLogger {
    /// A logger of experiment `experiment_name` ("" for Lightning's
    /// "lightning_logs") on the server at `tracking_uri` (`None`:
    /// `MLFLOW_TRACKING_URI` when first used).
    pub fn new(tracking_uri: Option<&str>, experiment_name: &str) -> Result<Self> {
        if let Some(uri) = tracking_uri {
            super::http::Endpoint::parse(uri)?;
        }
        Ok(MlflowLogger {
            tracking_uri: tracking_uri.map(str::to_string),
            experiment_name: if experiment_name.is_empty() { "lightning_logs".into() } else { experiment_name.into() },
            run_name: None,
            tags: BTreeMap::new(),
            log_model: LogModel::Off,
            prefix: String::new(),
            artifact_location: None,
            run_id: None,
            opened: None,
            pending: Vec::new(),
            uploaded: BTreeSet::new(),
        })
    }

    fn check_unopened(&self, what: &str) -> Result<()> {
        match &self.opened {
            Some((_, run)) => Err(Error::state(format!(
                "cannot set {what}: the MLflow logger already logs to run {} (set it before the first use)",
                run.run_id
            ))),
            None => Ok(()),
        }
    }

    /// The run's name (the `mlflow.runName` tag).
    pub fn set_run_name(&mut self, name: &str) -> Result<()> {
        self.check_unopened("the run name")?;
        self.run_name = (!name.is_empty()).then(|| name.to_string());
        Ok(())
    }

    /// A tag of the run (Lightning's `tags`), over fulmen's defaults.
    pub fn set_tag(&mut self, key: &str, value: &str) -> Result<()> {
        self.check_unopened("a tag")?;
        if key.is_empty() {
            return Err(Error::invalid("a tag's key is empty"));
        }
        self.tags.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// Which checkpoints are uploaded.
    pub fn set_log_model(&mut self, mode: LogModel) -> Result<()> {
        self.check_unopened("log_model")?;
        self.log_model = mode;
        Ok(())
    }

    /// Put with `-` before every metric name.
    pub fn set_prefix(&mut self, prefix: &str) -> Result<()> {
        self.check_unopened("the prefix")?;
        self.prefix = prefix.to_string();
        Ok(())
    }

    /// Where a new experiment keeps its artifacts (Lightning's
    /// `artifact_location`); unused when the experiment exists.
    pub fn set_artifact_location(&mut self, location: &str) -> Result<()> {
        self.check_unopened("the artifact location")?;
        self.artifact_location = (!location.is_empty()).then(|| location.to_string());
        Ok(())
    }

    /// Logs to this existing run instead of starting one (Lightning's
    /// `run_id`).
    pub fn set_run_id(&mut self, run_id: &str) -> Result<()> {
        self.check_unopened("the run id")?;
        self.run_id = (!run_id.is_empty()).then(|| run_id.to_string());
        Ok(())
    }

    /// The server and run, reached on first use: the run given by id, or
    /// a new run in the experiment (made if missing).
    fn open(&mut self) -> Result<&(Tracking, RunInfo)> {
        if self.opened.is_none() {
            let uri = match &self.tracking_uri {
                Some(u) => u.clone(),
                None => std::env::var("MLFLOW_TRACKING_URI").ok().filter(|u| !u.is_empty()).ok_or_else(|| {
                    Error::invalid("the MLflow logger has no tracking URI: give one or set MLFLOW_TRACKING_URI")
                })?,
            };
            let tracking = Tracking::new(&uri, TIMEOUT)?;
            let run = match &self.run_id {
                Some(id) => tracking.get_run(id)?.0,
                None => {
                    let experiment = self.experiment(&tracking)?;
                    tracking.create_run(&experiment, self.run_name.as_deref(), &self.run_tags())?
                }
            };
            self.opened = Some((tracking, run));
        }
        Ok(self.opened.as_ref().expect("opened above"))
    }

    /// The experiment's id, made when missing (a deleted one is refused,
    /// as the server refuses runs in it).
    fn experiment(&self, tracking: &Tracking) -> Result<String> {
        for _ in 0..2 {
            if let Some((id, deleted)) = tracking.experiment_by_name(&self.experiment_name)? {
                if deleted {
                    return Err(Error::state(format!(
                        "MLflow experiment {:?} (id {id}) is deleted: restore it or choose another name",
                        self.experiment_name
                    )));
                }
                return Ok(id);
            }
            if let Some(id) = tracking.create_experiment(&self.experiment_name, self.artifact_location.as_deref())? {
                return Ok(id);
            }
        }
        Err(Error::io(format!("MLflow experiment {:?}: neither found nor created", self.experiment_name)))
    }

    /// The tags of a new run: what MLflow's client adds (`mlflow.user`,
    /// `mlflow.source.name`, `mlflow.source.type`), `mlflow.runName`, then
    /// the logger's own over them.
    fn run_tags(&self) -> Vec<(String, String)> {
        let mut tags = BTreeMap::new();
        if let Some(user) = ["USER", "LOGNAME", "USERNAME"].iter().find_map(|k| std::env::var(k).ok()) {
            tags.insert("mlflow.user".to_string(), user);
        }
        if let Some(program) = std::env::args().next() {
            tags.insert("mlflow.source.name".to_string(), program);
        }
        tags.insert("mlflow.source.type".to_string(), "LOCAL".to_string());
        if let Some(name) = &self.run_name {
            tags.insert("mlflow.runName".to_string(), name.clone());
        }
        tags.extend(self.tags.clone());
        tags.into_iter().collect()
    }

    /// The experiment's id (Lightning's `name`), reaching the server if
    /// the logger was not used yet.
    pub fn experiment_id(&mut self) -> Result<String> {
        Ok(self.open()?.1.experiment_id.clone())
    }

    /// The run's id (Lightning's `version`), starting the run if the
    /// logger was not used yet.
    pub fn run_id(&mut self) -> Result<String> {
        Ok(self.open()?.1.run_id.clone())
    }

    /// Logs `metrics` at `step` (Lightning's `log_metrics`): names get the
    /// prefix and lose the characters MLflow refuses, as Lightning strips
    /// them.
    pub fn log_metrics_at(&mut self, metrics: &BTreeMap<String, f64>, step: i64) -> Result<()> {
        let rows: Vec<(String, f64, i64)> = metrics
            .iter()
            .map(|(k, v)| {
                let key = if self.prefix.is_empty() { k.clone() } else { format!("{}-{k}", self.prefix) };
                (metric_key(&key), *v, step)
            })
            .collect();
        let (tracking, run) = self.open()?;
        tracking.log_batch(&run.run_id, &rows, &[])
    }

    /// Logs `path` under `artifact_path` (a relative folder, "" for the
    /// run's root) among the run's artifacts.
    pub fn log_artifact(&mut self, path: &Path, artifact_path: &str) -> Result<()> {
        check_relative("artifact_path", artifact_path)?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::invalid(format!("{} names no file", path.display())))?;
        if !path.is_file() {
            return Err(Error::io(format!("{} is not a file", path.display())));
        }
        let dir = artifact_path.trim_matches('/');
        let rel = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
        let (tracking, run) = self.open()?;
        tracking.upload(&run.artifact_uri, &rel, path)
    }

    /// A checkpoint as Lightning logs it: under a folder named for the
    /// file's stem; one uploaded before and unchanged since, or not a file
    /// (a sharded checkpoint's folder, a path a CheckpointIO store keeps),
    /// is skipped as Lightning skips them.
    fn upload_checkpoint(&mut self, path: &Path) -> Result<()> {
        if !path.is_file() {
            return Ok(());
        }
        let key = (path.to_path_buf(), std::fs::metadata(path).and_then(|m| m.modified()).ok());
        if self.uploaded.contains(&key) {
            return Ok(());
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("checkpoint").to_string();
        self.log_artifact(path, &stem)?;
        self.uploaded.insert(key);
        Ok(())
    }
}

/// Lightning's key cleaning: characters other than letters, digits, `_`,
/// `/`, `.`, space and `-` removed.
fn metric_key(key: &str) -> String {
    key.chars().filter(|c| c.is_ascii_alphanumeric() || "_/. -".contains(*c)).collect()
}

/// MLflow's run status for Lightning's `finalize(status)`.
/// MLflow's name of how a run ended.
fn run_status(status: &str) -> Result<&'static str> {
    Ok(match RunStatus::parse(status)? {
        RunStatus::Finished => "FINISHED",
        RunStatus::Failed => "FAILED",
        RunStatus::Killed => "KILLED",
    })
}

impl Logger for MlflowLogger {
    fn name(&self) -> &str {
        self.kind_name()
    }

    fn log_dir(&self) -> Option<&Path> {
        None
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        let mut all = metrics.clone();
        if let Some(epoch) = epoch {
            all.entry("epoch".to_string()).or_insert(epoch as f64);
        }
        self.log_metrics_at(&all, step)
    }

    /// Lightning's `log_hyperparams`: every value cut to 250 characters.
    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        let rows: Vec<(String, String)> =
            params.iter().map(|(k, v)| (k.clone(), v.chars().take(PARAM_LENGTH).collect())).collect();
        let (tracking, run) = self.open()?;
        tracking.log_batch(&run.run_id, &[], &rows)
    }

    fn save(&mut self) -> Result<()> {
        Ok(())
    }

    /// Uploads the checkpoints `log_model=True` keeps for the end, then
    /// ends the run whatever the uploads did (their first error
    /// reported); a logger never used does nothing, as Lightning's.
    fn finalize(&mut self, status: &str) -> Result<()> {
        let status = run_status(status)?;
        if self.opened.is_none() {
            return Ok(());
        }
        let mut first = Ok(());
        for path in std::mem::take(&mut self.pending) {
            first = first.and(self.upload_checkpoint(&path));
        }
        let (tracking, run) = self.open()?;
        let ended = tracking.end_run(&run.run_id, status);
        first.and(ended)
    }

    fn reads_checkpoints(&self) -> bool {
        self.log_model == LogModel::All
    }

    fn after_save_checkpoint(&mut self, path: &Path) -> Result<()> {
        match self.log_model {
            LogModel::Off => Ok(()),
            LogModel::All => self.upload_checkpoint(path),
            LogModel::AtEnd => {
                if !self.pending.iter().any(|p| p == path) {
                    self.pending.push(path.to_path_buf());
                }
                Ok(())
            }
        }
    }
}

/// An MLflow logger shared by a handle and the trainers it was added to.
pub type SharedMlflowLogger = SharedLogger<MlflowLogger>;

impl NamedLogger for MlflowLogger {
    fn kind_name(&self) -> &'static str {
        "mlflow"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn keys_statuses_and_settings() {
        assert_eq!(metric_key("val/acc:top-1 (%)"), "val/acctop-1 ");
        assert_eq!(run_status("success").unwrap(), "FINISHED");
        assert_eq!(run_status("failed").unwrap(), "FAILED");
        assert_eq!(run_status("oops").unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(MlflowLogger::new(Some("https://h"), "e").err().unwrap().code, ErrorCode::Unsupported);
        let mut l = MlflowLogger::new(Some("http://127.0.0.1:9"), "").unwrap();
        assert_eq!(l.experiment_name, "lightning_logs");
        assert_eq!(l.set_tag("", "x").unwrap_err().code, ErrorCode::InvalidArgument);
        l.set_run_name("r").unwrap();
        let tags = l.run_tags();
        assert!(tags.contains(&("mlflow.runName".to_string(), "r".to_string())));
        assert!(tags.contains(&("mlflow.source.type".to_string(), "LOCAL".to_string())));
        // Never used: finalize talks to no server.
        l.finalize("success").unwrap();
        // A port nothing listens on: the first use is an I/O error naming the server.
        let e = l.log_metrics_at(&BTreeMap::from([("a".to_string(), 1.0)]), 0).unwrap_err();
        assert_eq!(e.code, ErrorCode::Io, "{}", e.message);
        assert!(e.message.contains("127.0.0.1:9"), "{}", e.message);
        assert_eq!(l.log_artifact(Path::new("/nonexistent/x"), "../up").unwrap_err().code, ErrorCode::InvalidArgument);
    }
}

//! A CSV or TensorBoard logger configured as Lightning's `CSVLogger` /
//! `TensorBoardLogger(save_dir, name, version, prefix, ...)`, usable by a
//! host loop on its own (`log_metrics(metrics, step)`, `log_hyperparams`,
//! `finalize`) and as one of a trainer's loggers. As in Lightning, the
//! folder is made on first use (its version resolved then); settings
//! change only before that.
use super::csv::CsvLogger;
use super::layout::{check_relative, Layout, Version};
use super::logger::Logger;
use super::shared::{NamedLogger, SharedLogger};
use super::tensorboard::{Media, TensorBoardLogger};
use crate::error::{Error, Result, ResultExt};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which files a [`FileLogger`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileLoggerKind {
    /// `metrics.csv` and `hparams.yaml` (Lightning's `CSVLogger`).
    Csv,
    /// Event files (Lightning's `TensorBoardLogger`).
    TensorBoard,
}

impl FileLoggerKind {
    /// "csv" or "tensorboard".
    pub fn name(self) -> &'static str {
        match self {
            FileLoggerKind::Csv => "csv",
            FileLoggerKind::TensorBoard => "tensorboard",
        }
    }
}

/// The logger once its folder exists.
enum Opened {
    Csv(CsvLogger),
    TensorBoard(TensorBoardLogger),
}

impl Opened {
    fn logger(&mut self) -> &mut dyn Logger {
        match self {
            Opened::Csv(l) => l as &mut dyn Logger,
            Opened::TensorBoard(l) => l as &mut dyn Logger,
        }
    }
}

/// A CSV or TensorBoard logger with Lightning's settings.
pub struct FileLogger {
    kind: FileLoggerKind,
    layout: Layout,
    prefix: String,
    flush_every: u64,
    default_hp_metric: bool,
    /// TensorBoard: a folder below the run's for the files (Lightning's
    /// `sub_dir`); empty: none.
    sub_dir: String,
    /// The logger, its log folder (the run folder, or `sub_dir` below it)
    /// and its version, once made.
    opened: Option<(Opened, PathBuf, Version)>,
    /// The run folder (`save_dir/name/version`), once made.
    run_folder: Option<PathBuf>,
}

impl FileLogger {
    /// A logger writing under `save_dir` with Lightning's defaults: name
    /// "lightning_logs", the next free version, no prefix.
    pub fn new(kind: FileLoggerKind, save_dir: &str) -> Result<Self> {
        if save_dir.is_empty() {
            return Err(Error::invalid("save_dir is empty"));
        }
        Ok(FileLogger {
            kind,
            layout: Layout::new(Path::new(save_dir)),
            prefix: String::new(),
            flush_every: super::csv::DEFAULT_FLUSH_EVERY,
            default_hp_metric: true,
            sub_dir: String::new(),
            opened: None,
            run_folder: None,
        })
    }

    /// Which files it writes.
    pub fn kind(&self) -> FileLoggerKind {
        self.kind
    }

    /// Refuses a change of settings once the folder exists.
    fn check_unopened(&self, what: &str) -> Result<()> {
        match &self.opened {
            Some((_, dir, _)) => Err(Error::state(format!(
                "cannot set {what}: the {} logger already writes to {} (set it before the first use)",
                self.kind.name(),
                dir.display()
            ))),
            None => Ok(()),
        }
    }

    /// Refuses a setting of the other kind of logger.
    fn check_kind(&self, kind: FileLoggerKind, what: &str) -> Result<()> {
        if self.kind != kind {
            return Err(Error::invalid(format!(
                "{what} is a setting of the {} logger, this one is a {} logger",
                kind.name(),
                self.kind.name()
            )));
        }
        Ok(())
    }

    /// The experiment name (`None` or empty: versions directly in
    /// `save_dir`); a relative path below `save_dir`.
    pub fn set_name(&mut self, name: Option<&str>) -> Result<()> {
        self.check_unopened("the name")?;
        let name = name.unwrap_or("");
        check_relative("name", name)?;
        self.layout.name = name.to_string();
        Ok(())
    }

    /// The version: a number (`version_N`), a folder name, or the next free
    /// number ([`Version::Next`]).
    pub fn set_version(&mut self, version: Version) -> Result<()> {
        self.check_unopened("the version")?;
        if let Version::Name(s) = &version {
            check_relative("version", s)?;
        }
        self.layout.version = version;
        Ok(())
    }

    /// Put with `-` before every metric name.
    pub fn set_prefix(&mut self, prefix: &str) -> Result<()> {
        self.check_unopened("the prefix")?;
        self.prefix = prefix.to_string();
        Ok(())
    }

    /// CSV: rows are written when `(step + 1) % n == 0` (at least 1).
    pub fn set_flush_logs_every_n_steps(&mut self, n: i64) -> Result<()> {
        self.check_kind(FileLoggerKind::Csv, "flush_logs_every_n_steps")?;
        self.check_unopened("flush_logs_every_n_steps")?;
        self.flush_every = u64::try_from(n)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::invalid(format!("flush_logs_every_n_steps must be at least 1, not {n}")))?;
        Ok(())
    }

    /// TensorBoard: whether hyperparameters come with `hp_metric = -1`.
    pub fn set_default_hp_metric(&mut self, on: bool) -> Result<()> {
        self.check_kind(FileLoggerKind::TensorBoard, "default_hp_metric")?;
        self.check_unopened("default_hp_metric")?;
        self.default_hp_metric = on;
        Ok(())
    }

    /// TensorBoard: the files go to `sub_dir` below the run folder
    /// (Lightning's `sub_dir`; `None` or empty: none), a relative path
    /// below it. Checkpoints stay in the run folder, as Lightning's.
    pub fn set_sub_dir(&mut self, sub_dir: Option<&str>) -> Result<()> {
        self.check_kind(FileLoggerKind::TensorBoard, "sub_dir")?;
        self.check_unopened("sub_dir")?;
        let sub_dir = sub_dir.unwrap_or("");
        check_relative("sub_dir", sub_dir)?;
        self.sub_dir = sub_dir.to_string();
        Ok(())
    }

    /// The logger, its folder made (and its version resolved) on first use.
    fn open(&mut self) -> Result<&mut Opened> {
        if self.opened.is_none() {
            let (run, version) = self.layout.create()?;
            let dir = if self.sub_dir.is_empty() {
                run.clone()
            } else {
                let d = run.join(&self.sub_dir);
                std::fs::create_dir_all(&d).ctx(format!("creating {}", d.display()))?;
                d
            };
            let logger = match self.kind {
                FileLoggerKind::Csv => {
                    Opened::Csv(CsvLogger::create(&dir)?.with_prefix(&self.prefix).with_flush_every(self.flush_every)?)
                }
                FileLoggerKind::TensorBoard => Opened::TensorBoard(
                    TensorBoardLogger::create(&dir)?
                        .with_prefix(&self.prefix)
                        .with_default_hp_metric(self.default_hp_metric),
                ),
            };
            self.opened = Some((logger, dir, version));
            self.run_folder = Some(run);
        }
        match &mut self.opened {
            Some((logger, _, _)) => Ok(logger),
            None => Err(Error::state("logger not opened")),
        }
    }

    /// The log folder (`save_dir/name/version_N`, with a TensorBoard
    /// logger's `sub_dir` below it: Lightning's `log_dir`), made now if
    /// needed.
    pub fn folder(&mut self) -> Result<PathBuf> {
        self.open()?;
        Ok(self.opened.as_ref().map(|(_, d, _)| d.clone()).unwrap_or_default())
    }

    /// The version, resolved (and the folder made) now if needed.
    pub fn version(&mut self) -> Result<Version> {
        self.open()?;
        Ok(self.opened.as_ref().map_or(Version::Next, |(_, _, v)| v.clone()))
    }

    /// Lightning's `logger.log_metrics(metrics, step)`: CSV, one row
    /// (with `step`, written when `(step + 1) % flush_logs_every_n_steps`
    /// is 0); TensorBoard, one scalar per metric at `step`. Names get the
    /// prefix.
    pub fn log_metrics_at(&mut self, metrics: &BTreeMap<String, f64>, step: i64) -> Result<()> {
        match self.open()? {
            Opened::Csv(l) => l.log_row(metrics, step),
            Opened::TensorBoard(l) => l.log_scalars(metrics, step),
        }
    }

    /// TensorBoard: an image, histogram or text under `tag` at `step`.
    pub fn add_media_at(&mut self, tag: &str, media: &Media, step: i64) -> Result<()> {
        if self.kind != FileLoggerKind::TensorBoard {
            return Err(Error::invalid(format!(
                "tag {tag:?}: images, histograms and texts go to a TensorBoard logger, this one is a {} logger",
                self.kind.name()
            )));
        }
        match self.open()? {
            Opened::TensorBoard(l) => l.write_media(tag, media, step),
            Opened::Csv(_) => Ok(()),
        }
    }
}

impl Logger for FileLogger {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn log_dir(&self) -> Option<&Path> {
        self.opened.as_ref().map(|(_, d, _)| d.as_path())
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, epoch: Option<i64>, step: i64) -> Result<()> {
        self.open()?.logger().log_metrics(metrics, epoch, step)
    }

    fn log_hyperparams(&mut self, params: &BTreeMap<String, String>) -> Result<()> {
        self.open()?.logger().log_hyperparams(params)
    }

    /// Saves (making the folder on first use, as Lightning's `save`).
    fn save(&mut self) -> Result<()> {
        self.open()?.logger().save()
    }

    /// Ends the run. A CSV logger never used does nothing (Lightning);
    /// a TensorBoard logger saves on "success" (its `hparams.yaml`).
    fn finalize(&mut self, status: &str) -> Result<()> {
        if self.opened.is_none() && (self.kind == FileLoggerKind::Csv || status != "success") {
            return Ok(());
        }
        self.open()?.logger().finalize(status)
    }

    fn resolve_log_dir(&mut self) -> Result<Option<PathBuf>> {
        self.folder().map(Some)
    }

    fn run_dir(&self) -> Option<PathBuf> {
        self.run_folder.clone().filter(|_| !self.sub_dir.is_empty())
    }

    fn accepts_media(&self) -> bool {
        self.kind == FileLoggerKind::TensorBoard
    }

    fn add_media(&mut self, tag: &str, media: &Media, step: i64) -> Result<()> {
        self.add_media_at(tag, media, step)
    }
}

impl Drop for FileLogger {
    /// Writes the CSV rows not yet saved (errors cannot be reported here;
    /// `finalize` reports them).
    fn drop(&mut self) {
        if let Some((Opened::Csv(l), _, _)) = &mut self.opened {
            let _ = l.save();
        }
    }
}

/// A [`FileLogger`] shared by a host's handle and the trainers it was
/// added to; each call locks it.
pub type SharedFileLogger = SharedLogger<FileLogger>;

impl NamedLogger for FileLogger {
    fn kind_name(&self) -> &'static str {
        self.kind.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::test_dirs::TempDir;

    fn m(items: &[(&str, f64)]) -> BTreeMap<String, f64> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn csv_layout_and_settings() {
        let d = TempDir::new("file-logger-csv");
        let save = d.to_str().unwrap();
        std::fs::create_dir_all(d.join("exp/version_2")).unwrap();
        let mut l = FileLogger::new(FileLoggerKind::Csv, save).unwrap();
        l.set_name(Some("exp")).unwrap();
        l.set_prefix("p").unwrap();
        l.set_flush_logs_every_n_steps(1).unwrap();
        assert!(Logger::log_dir(&l).is_none(), "no folder before the first use");
        assert_eq!(l.set_default_hp_metric(false).unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(l.set_flush_logs_every_n_steps(0).unwrap_err().code, ErrorCode::InvalidArgument);
        l.log_metrics_at(&m(&[("loss", 0.5)]), 0).unwrap();
        assert_eq!(Logger::log_dir(&l), Some(d.join("exp/version_3").as_path()));
        assert_eq!(l.version().unwrap(), Version::Number(3));
        let text = std::fs::read_to_string(d.join("exp/version_3/metrics.csv")).unwrap();
        assert_eq!(text, "p-loss,step\r\n0.5,0\r\n", "flushed at once with n = 1");
        assert_eq!(l.set_name(Some("other")).unwrap_err().code, ErrorCode::InvalidState);
        let text_media = super::super::tensorboard::media::text("t");
        assert_eq!(l.add_media_at("x", &text_media, 0).unwrap_err().code, ErrorCode::InvalidArgument);
        drop(l);
        let mut later = FileLogger::new(FileLoggerKind::Csv, save).unwrap();
        later.log_metrics_at(&m(&[("loss", 0.25)]), 1).unwrap();
        let dir = later.folder().unwrap();
        assert_eq!(dir, d.join("lightning_logs/version_0"));
        assert!(!dir.join("metrics.csv").exists(), "written every 100 steps by default");
        drop(later);
        let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
        assert_eq!(text, "loss,step\r\n0.25,1\r\n", "dropping saves the rows not yet written");

        let mut named = FileLogger::new(FileLoggerKind::Csv, save).unwrap();
        named.set_name(None).unwrap();
        named.set_version(Version::Name("run-a".into())).unwrap();
        assert_eq!(named.folder().unwrap(), d.join("run-a"));
        assert_eq!(named.set_version(Version::Name("../x".into())).unwrap_err().code, ErrorCode::InvalidState);
        let mut bad = FileLogger::new(FileLoggerKind::Csv, save).unwrap();
        assert_eq!(bad.set_version(Version::Name("../x".into())).unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(bad.set_name(Some("/abs")).unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(FileLogger::new(FileLoggerKind::Csv, "").err().unwrap().code, ErrorCode::InvalidArgument);
        // A CSV logger never used makes no folder at finalize.
        let mut unused = FileLogger::new(FileLoggerKind::Csv, save).unwrap();
        unused.set_version(Version::Number(9)).unwrap();
        unused.finalize("success").unwrap();
        assert!(!d.join("lightning_logs/version_9").exists());
    }

    #[test]
    fn tensorboard_sub_dir_is_below_the_run_folder() {
        let d = TempDir::new("file-logger-sub-dir");
        let mut l = FileLogger::new(FileLoggerKind::TensorBoard, d.to_str().unwrap()).unwrap();
        assert_eq!(l.set_sub_dir(Some("../x")).unwrap_err().code, ErrorCode::InvalidArgument);
        l.set_sub_dir(Some("train")).unwrap();
        assert!(Logger::run_dir(&l).is_none(), "no folder before the first use");
        assert_eq!(l.folder().unwrap(), d.join("lightning_logs/version_0/train"));
        assert_eq!(Logger::run_dir(&l), Some(d.join("lightning_logs/version_0")));
        assert_eq!(l.set_sub_dir(None).unwrap_err().code, ErrorCode::InvalidState);
        let mut plain = FileLogger::new(FileLoggerKind::TensorBoard, d.to_str().unwrap()).unwrap();
        plain.set_sub_dir(Some("")).unwrap();
        assert_eq!(plain.folder().unwrap(), d.join("lightning_logs/version_1"));
        assert!(Logger::run_dir(&plain).is_none(), "the run folder is the log folder");
        let mut csv = FileLogger::new(FileLoggerKind::Csv, d.to_str().unwrap()).unwrap();
        assert_eq!(csv.set_sub_dir(Some("train")).unwrap_err().code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn shared_tensorboard_logger() {
        let d = TempDir::new("file-logger-tb");
        let mut l = FileLogger::new(FileLoggerKind::TensorBoard, d.to_str().unwrap()).unwrap();
        l.set_version(Version::Number(4)).unwrap();
        assert_eq!(l.set_flush_logs_every_n_steps(5).unwrap_err().code, ErrorCode::InvalidArgument);
        let mut shared = SharedFileLogger::new(l);
        assert!(shared.accepts_media());
        let mut other = shared.clone();
        assert_eq!(other.resolve_log_dir().unwrap(), Some(d.join("lightning_logs/version_4")));
        shared.log_metrics(&m(&[("a", 1.0)]), Some(0), 1).unwrap();
        shared.add_media("t", &super::super::tensorboard::media::text("x"), 1).unwrap();
        shared.finalize("success").unwrap();
        assert!(d.join("lightning_logs/version_4/hparams.yaml").exists());
        let events: Vec<_> = std::fs::read_dir(d.join("lightning_logs/version_4"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("events.out.tfevents."))
            .collect();
        assert_eq!(events.len(), 1);
    }
}

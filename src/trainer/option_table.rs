//! The trainer's options in one table: key, kind of value, default,
//! documentation and parser. [`TrainerOptions::set`] reads it, and
//! `tools/codegen/options.rs` generates from it the key list in
//! `fulmen_trainer_options_set`'s header comment and the typed setters of
//! the C++ and Go bindings (`tests/options_drift.rs` fails when a
//! committed copy drifts).
use super::options::{
    barebones_refusal, BatchLimit, ClipAlgorithm, Deterministic, LoggerChoice, ProfilerKind, TrainerOptions,
    ValCheckInterval,
};
use crate::callbacks::timer::parse_duration;
use crate::error::{Error, Result};
use crate::parse::{is_float_text, is_none, parse_bool, parse_int, parse_number, parse_opt_int};
use std::path::PathBuf;
use std::time::Duration;

/// The kind of value an option takes; it picks the typed setters that the
/// bindings generate and the type named in the documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A boolean.
    Bool,
    /// An integer.
    Int,
    /// An integer, or "none".
    OptionalInt,
    /// A number, or "none".
    OptionalNumber,
    /// A whole number of batches, or a fraction of them written as a float.
    CountOrFraction,
    /// A boolean, or a whole number of batches.
    BoolOrCount,
    /// A duration: seconds, or "DD:HH:MM:SS".
    Duration,
    /// A duration, or "none".
    OptionalDuration,
    /// A boolean, or text naming what to turn on.
    BoolOrText,
    /// Text.
    Text,
}

impl OptionKind {
    /// How the documentation names the values this kind takes.
    pub fn describe(self) -> &'static str {
        match self {
            OptionKind::Bool => "bool",
            OptionKind::Int => "integer",
            OptionKind::OptionalInt => "integer or \"none\"",
            OptionKind::OptionalNumber => "number or \"none\"",
            OptionKind::CountOrFraction => "batch count, or fraction written with '.'",
            OptionKind::BoolOrCount => "bool or batch count",
            OptionKind::Duration => "seconds or \"DD:HH:MM:SS\"",
            OptionKind::OptionalDuration => "seconds, \"DD:HH:MM:SS\" or \"none\"",
            OptionKind::BoolOrText => "bool or text",
            OptionKind::Text => "text",
        }
    }
}

/// One trainer option.
pub struct TrainerOption {
    /// The key, as Lightning's `Trainer(...)` keyword argument.
    pub key: &'static str,
    /// The kind of value.
    pub kind: OptionKind,
    /// The default, in the text form `set` accepts.
    pub default: &'static str,
    /// What the option does (one sentence or a few; no trailing period).
    pub doc: &'static str,
    /// Parses `value` into the options (the key is passed for messages).
    apply: fn(&mut TrainerOptions, &str, &str) -> Result<()>,
}

/// Sets one field from a parser `fn(key, value) -> Result<T>`.
macro_rules! field {
    ($field:ident, $parse:expr) => {
        |o: &mut TrainerOptions, k: &str, v: &str| -> Result<()> {
            o.$field = $parse(k, v)?;
            Ok(())
        }
    };
}

/// Sets one setting of the options' strategy (`StrategySpec::set`).
macro_rules! strategy_setting {
    ($name:literal) => {
        |o: &mut TrainerOptions, _k: &str, v: &str| o.strategy.set($name, v)
    };
}

fn limit(key: &str, v: &str) -> Result<BatchLimit> {
    let v = v.trim();
    if is_float_text(v) {
        let f = parse_number(key, v)?;
        if !(0.0..=1.0).contains(&f) {
            return Err(Error::invalid(format!(
                "option {key}: a fraction must be in [0.0, 1.0], got {v}; give a whole number for a count"
            )));
        }
        return Ok(if f == 1.0 { BatchLimit::All } else { BatchLimit::Fraction(f) });
    }
    let n = parse_int(key, v)?;
    if n < 0 {
        return Err(Error::invalid(format!("option {key}: {n} batches is negative")));
    }
    Ok(BatchLimit::Count(n as usize))
}

fn val_check_interval(key: &str, v: &str) -> Result<ValCheckInterval> {
    if v.contains(':') {
        return val_check_time(v).map(ValCheckInterval::Time);
    }
    if is_float_text(v) {
        return Ok(ValCheckInterval::Fraction(parse_number(key, v)?));
    }
    let n = parse_int(key, v)?;
    if n < 1 {
        return Err(Error::invalid(format!("option {key}: {n} batches must be >= 1")));
    }
    Ok(ValCheckInterval::Batches(n as usize))
}

/// Lightning's `_parse_time_interval_seconds` of a "DD:HH:MM:SS" string
/// (each part a whole number; negative parts are refused here).
fn val_check_time(v: &str) -> Result<Duration> {
    let parts: Vec<&str> = v.split(':').collect();
    if parts.len() != 4 {
        return Err(Error::invalid(format!(
            "Invalid time format for `val_check_interval`: {v:?}. Expected 'DD:HH:MM:SS'."
        )));
    }
    let mut n = [0u64; 4];
    for (slot, part) in n.iter_mut().zip(&parts) {
        *slot = part.trim().parse::<u64>().map_err(|_| {
            Error::invalid(format!(
                "Non-integer component in `val_check_interval` string: {v:?}. Use 'DD:HH:MM:SS' with whole \
                 numbers >= 0."
            ))
        })?;
    }
    parse_duration(&format!("{}:{}:{}:{}", n[0], n[1], n[2], n[3])).map_err(|e| e.context("option val_check_interval"))
}

/// `deterministic`: a boolean, or "warn" (on, warnings instead of errors).
fn deterministic(key: &str, v: &str) -> Result<Deterministic> {
    if v == "warn" {
        return Ok(Deterministic::Warn);
    }
    match parse_bool(key, v) {
        Ok(true) => Ok(Deterministic::On),
        Ok(false) => Ok(Deterministic::Off),
        Err(_) => Err(Error::invalid(format!("option {key}: {v:?} is not true, false or \"warn\""))),
    }
}

/// `benchmark`: a boolean, or "none" (Lightning's default `None`).
fn benchmark(key: &str, v: &str) -> Result<Option<bool>> {
    if is_none(v) {
        return Ok(None);
    }
    parse_bool(key, v)
        .map(Some)
        .map_err(|_| Error::invalid(format!("option {key}: {v:?} is not true, false or \"none\"")))
}

/// `barebones=true` turns off what Lightning's barebones mode turns off;
/// `validate` then refuses turning any of them, or an opt-in feature, on.
fn barebones(o: &mut TrainerOptions, key: &str, v: &str) -> Result<()> {
    o.barebones = parse_bool(key, v)?;
    if o.barebones {
        o.enable_checkpointing = false;
        o.logger = LoggerChoice { csv: false, tensorboard: false };
        o.enable_progress_bar = false;
        o.enable_model_summary = false;
        o.num_sanity_val_steps = 0;
    }
    Ok(())
}

/// `log_every_n_steps`; in barebones mode only 0 (no logging) is taken,
/// and it leaves the value as it is.
fn log_every_n_steps(o: &mut TrainerOptions, key: &str, v: &str) -> Result<()> {
    let n = parse_int(key, v)?;
    if o.barebones {
        if n != 0 {
            return Err(barebones_refusal(&format!("log_every_n_steps={n}"), "Logging can impact raw speed"));
        }
        return Ok(());
    }
    o.log_every_n_steps = n;
    Ok(())
}

fn optional_duration(key: &str, v: &str) -> Result<Option<Duration>> {
    if is_none(v) {
        return Ok(None);
    }
    parse_duration(v).map(Some).map_err(|e| e.context(format!("option {key}")))
}

/// `callback_timeout`: as a duration, with 0 meaning no limit too.
fn callback_timeout(key: &str, v: &str) -> Result<Option<Duration>> {
    Ok(optional_duration(key, v)?.filter(|d| !d.is_zero()))
}

fn optional_number(key: &str, v: &str) -> Result<Option<f64>> {
    if is_none(v) {
        Ok(None)
    } else {
        parse_number(key, v).map(Some)
    }
}

fn clip_algorithm(key: &str, v: &str) -> Result<ClipAlgorithm> {
    match v {
        "norm" => Ok(ClipAlgorithm::Norm),
        "value" => Ok(ClipAlgorithm::Value),
        _ => Err(Error::invalid(format!("option {key}: {v:?} is not \"norm\" or \"value\""))),
    }
}

fn profiler(key: &str, v: &str) -> Result<ProfilerKind> {
    match v {
        "" | "none" => Ok(ProfilerKind::Off),
        "simple" => Ok(ProfilerKind::Simple),
        "pytorch" => Ok(ProfilerKind::PyTorch),
        _ => Err(Error::invalid(format!("option {key}: {v:?} is not \"simple\", \"pytorch\" or \"none\""))),
    }
}

fn checkpoint_format(o: &mut TrainerOptions, key: &str, v: &str) -> Result<()> {
    o.checkpoint_format = crate::checkpoint::CheckpointFormat::parse(v)
        .ok_or_else(|| Error::invalid(format!("option {key}: {v:?} is not \"safetensors\" or \"lightning\"")))?;
    Ok(())
}

fn checkpoint_prefix(key: &str, v: &str) -> Result<String> {
    if !v.is_empty() && (!v.ends_with('.') || v.starts_with('.') || v.contains("..")) {
        return Err(Error::invalid(format!(
            "option {key}: {v:?} is not an attribute path ending with '.' (such as \"model.\")"
        )));
    }
    Ok(v.to_string())
}

fn fast_dev_run(key: &str, v: &str) -> Result<i64> {
    match parse_bool(key, v) {
        Ok(b) => Ok(i64::from(b)),
        Err(_) => parse_int(key, v)
            .map_err(|_| Error::invalid(format!("option {key}: {v:?} is not a boolean or a batch count"))),
    }
}

/// `cuda_graphs_warmup_steps`: 1 to 1000 (a capture needs the lazy state
/// one eager step makes).
fn warmup_steps(key: &str, v: &str) -> Result<i64> {
    let n = parse_int(key, v)?;
    if !(1..=1000).contains(&n) {
        return Err(Error::invalid(format!("option {key}: must lie in 1..=1000, got {n}")));
    }
    Ok(n)
}

fn seed(key: &str, v: &str) -> Result<Option<u64>> {
    if is_none(v) {
        return Ok(None);
    }
    v.trim()
        .parse::<u64>()
        .map(Some)
        .map_err(|_| Error::invalid(format!("option {key}: {v:?} is not a non-negative integer")))
}

fn root_dir(key: &str, v: &str) -> Result<PathBuf> {
    if v.is_empty() {
        return Err(Error::invalid(format!("option {key}: empty path")));
    }
    Ok(PathBuf::from(v))
}

fn logger(key: &str, v: &str) -> Result<LoggerChoice> {
    if let Ok(b) = parse_bool(key, v) {
        return Ok(LoggerChoice { csv: b, tensorboard: b });
    }
    let mut c = LoggerChoice { csv: false, tensorboard: false };
    for part in v.split(',').map(str::trim) {
        match part {
            "csv" => c.csv = true,
            "tensorboard" => c.tensorboard = true,
            _ => {
                return Err(Error::invalid(format!(
                    "option {key}: {part:?} is not true, false, \"csv\" or \"tensorboard\""
                )))
            }
        }
    }
    Ok(c)
}

fn set_accelerator(o: &mut TrainerOptions, _key: &str, v: &str) -> Result<()> {
    crate::accelerators::registry::resolve(v)?;
    o.accelerator = v.to_string();
    Ok(())
}

fn set_devices(o: &mut TrainerOptions, _key: &str, v: &str) -> Result<()> {
    o.devices = v.to_string();
    Ok(())
}

fn set_precision(o: &mut TrainerOptions, _key: &str, v: &str) -> Result<()> {
    o.precision = v.to_string();
    o.grad_scaler = None;
    Ok(())
}

/// A strategy by name keeps the node count, timeout and backend set so far.
fn set_strategy(o: &mut TrainerOptions, _key: &str, v: &str) -> Result<()> {
    let mut spec = crate::strategies::lookup(v)?;
    let old = &o.strategy;
    spec.num_nodes = old.num_nodes;
    spec.timeout = old.timeout;
    spec.process_group_backend.clone_from(&old.process_group_backend);
    o.strategy = spec;
    Ok(())
}

/// Every trainer option, in Lightning's `Trainer(...)` order where it has
/// one.
pub const TRAINER_OPTIONS: &[TrainerOption] = &[
    TrainerOption {
        key: "accelerator",
        kind: OptionKind::Text,
        default: "auto",
        doc: "\"auto\", \"cpu\", \"cuda\", \"gpu\", \"mps\", \"xla\", \"tpu\" or a registered accelerator's name",
        apply: set_accelerator,
    },
    TrainerOption {
        key: "strategy",
        kind: OptionKind::Text,
        default: "auto",
        doc: "a registered strategy with default settings: \"auto\", \"single_device\", \"ddp\", \"ddp_spawn\", \
              \"ddp_find_unused_parameters_true\", \"dp\", \"xla\", ...; the node count, timeout and backend \
              set so far are kept",
        apply: set_strategy,
    },
    TrainerOption {
        key: "devices",
        kind: OptionKind::Text,
        default: "auto",
        doc: "\"auto\", a count (\"1\", \"-1\" = all) or a list of indices (\"0,2\", \"[1]\")",
        apply: set_devices,
    },
    TrainerOption {
        key: "num_nodes",
        kind: OptionKind::Int,
        default: "1",
        doc: "machines in a distributed job",
        apply: strategy_setting!("num_nodes"),
    },
    TrainerOption {
        key: "precision",
        kind: OptionKind::Text,
        default: "32-true",
        doc: "\"32-true\", \"16-mixed\", \"bf16-mixed\", \"64-true\", \"16-true\", \"bf16-true\", or legacy \"32\", \
              \"16\", \"bf16\", \"64\"",
        apply: set_precision,
    },
    TrainerOption {
        key: "logger",
        kind: OptionKind::BoolOrText,
        default: "true",
        doc: "true (CSV and TensorBoard), false, \"csv\", \"tensorboard\" or \"csv,tensorboard\"",
        apply: field!(logger, logger),
    },
    TrainerOption {
        key: "fast_dev_run",
        kind: OptionKind::BoolOrCount,
        default: "false",
        doc: "run only this many batches of each loop (true = 1), without loggers or checkpoints",
        apply: field!(fast_dev_run, fast_dev_run),
    },
    TrainerOption {
        key: "max_epochs",
        kind: OptionKind::OptionalInt,
        default: "none",
        doc: "stop after this many epochs; -1 = no limit; none with max_steps -1 means 1000",
        apply: field!(max_epochs, parse_opt_int),
    },
    TrainerOption {
        key: "min_epochs",
        kind: OptionKind::OptionalInt,
        default: "none",
        doc: "train at least this many epochs before an early stop takes effect",
        apply: field!(min_epochs, parse_opt_int),
    },
    TrainerOption {
        key: "max_steps",
        kind: OptionKind::Int,
        default: "-1",
        doc: "stop after this many optimizer steps; -1 = no limit",
        apply: field!(max_steps, parse_int),
    },
    TrainerOption {
        key: "min_steps",
        kind: OptionKind::OptionalInt,
        default: "none",
        doc: "take at least this many optimizer steps before an early stop takes effect",
        apply: field!(min_steps, parse_opt_int),
    },
    TrainerOption {
        key: "max_time",
        kind: OptionKind::OptionalDuration,
        default: "none",
        doc: "stop training after this long (\"none\" = no limit)",
        apply: field!(max_time, optional_duration),
    },
    TrainerOption {
        key: "limit_train_batches",
        kind: OptionKind::CountOrFraction,
        default: "1.0",
        doc: "batches per training epoch: 1.0 = all, 0.25 = a quarter, 10 = ten",
        apply: field!(limit_train_batches, limit),
    },
    TrainerOption {
        key: "limit_val_batches",
        kind: OptionKind::CountOrFraction,
        default: "1.0",
        doc: "batches per validation run (0 turns validation off)",
        apply: field!(limit_val_batches, limit),
    },
    TrainerOption {
        key: "limit_test_batches",
        kind: OptionKind::CountOrFraction,
        default: "1.0",
        doc: "batches per test run",
        apply: field!(limit_test_batches, limit),
    },
    TrainerOption {
        key: "limit_predict_batches",
        kind: OptionKind::CountOrFraction,
        default: "1.0",
        doc: "batches per predict run",
        apply: field!(limit_predict_batches, limit),
    },
    TrainerOption {
        key: "overfit_batches",
        kind: OptionKind::CountOrFraction,
        default: "0",
        doc: "train and validate on this many (or this fraction of the) training batches; 0 = off",
        apply: field!(overfit_batches, limit),
    },
    TrainerOption {
        key: "val_check_interval",
        kind: OptionKind::CountOrFraction,
        default: "1.0",
        doc: "validate after this fraction of an epoch, or after every this many training batches; or, given as \
              \"DD:HH:MM:SS\", once that much wall time passed since training started or the last validation \
              ended, checked after each training batch (the epoch's end then validates only when the time is up; \
              with check_val_every_n_epoch n, only in every n-th epoch; ignored by fast_dev_run)",
        apply: field!(val_check_interval, val_check_interval),
    },
    TrainerOption {
        key: "check_val_every_n_epoch",
        kind: OptionKind::OptionalInt,
        default: "1",
        doc: "validate every n epochs; none counts val_check_interval batches across epochs",
        apply: field!(check_val_every_n_epoch, parse_opt_int),
    },
    TrainerOption {
        key: "num_sanity_val_steps",
        kind: OptionKind::Int,
        default: "2",
        doc: "validation batches run before training as a sanity check; -1 = all",
        apply: field!(num_sanity_val_steps, parse_int),
    },
    TrainerOption {
        key: "log_every_n_steps",
        kind: OptionKind::Int,
        default: "50",
        doc: "optimizer steps between writes of step metrics to the loggers; with barebones only 0 is accepted",
        apply: log_every_n_steps,
    },
    TrainerOption {
        key: "enable_checkpointing",
        kind: OptionKind::Bool,
        default: "true",
        doc: "add a ModelCheckpoint saving the latest epoch when none is given",
        apply: field!(enable_checkpointing, parse_bool),
    },
    TrainerOption {
        key: "checkpoint_format",
        kind: OptionKind::Text,
        default: "lightning",
        doc: "file format of the checkpoints the trainer writes: \"lightning\" (Lightning's torch.save dict, \
              which torch.load and Lightning's Trainer read) or \"safetensors\" (fulmen's own, which any \
              safetensors reader opens); either is read back, whatever is written",
        apply: checkpoint_format,
    },
    TrainerOption {
        key: "checkpoint_prefix",
        kind: OptionKind::Text,
        default: "",
        doc: "LightningModule attribute holding the network in Lightning checkpoints, with its dot (\"model.\"): \
              written before each state_dict name and removed when reading; empty writes the names as they are \
              and, when reading, removes the attribute prefix that makes the names fit the model",
        apply: field!(checkpoint_prefix, checkpoint_prefix),
    },
    TrainerOption {
        key: "enable_progress_bar",
        kind: OptionKind::Bool,
        default: "true",
        doc: "show progress on stderr",
        apply: field!(enable_progress_bar, parse_bool),
    },
    TrainerOption {
        key: "enable_model_summary",
        kind: OptionKind::Bool,
        default: "true",
        doc: "print the layer table when fit starts",
        apply: field!(enable_model_summary, parse_bool),
    },
    TrainerOption {
        key: "use_distributed_sampler",
        kind: OptionKind::Bool,
        default: "true",
        doc: "under DDP, give each rank its shard of every DataLoader (torch's DistributedSampler, padded, reshuffled \
              per epoch); false: every rank reads the loaders as they are, as Lightning's use_distributed_sampler",
        apply: field!(use_distributed_sampler, parse_bool),
    },
    TrainerOption {
        key: "reload_dataloaders_every_n_epochs",
        kind: OptionKind::Int,
        default: "0",
        doc: "call the module's train_dataloader / val_dataloader again every n epochs; 0: once (loaders passed to \
              fit are never reloaded)",
        apply: field!(reload_dataloaders_every_n_epochs, parse_int),
    },
    TrainerOption {
        key: "accumulate_grad_batches",
        kind: OptionKind::Int,
        default: "1",
        doc: "accumulate gradients over this many batches per optimizer step",
        apply: field!(accumulate_grad_batches, parse_int),
    },
    TrainerOption {
        key: "gradient_clip_val",
        kind: OptionKind::OptionalNumber,
        default: "none",
        doc: "clip gradients at this value; none = no clipping",
        apply: field!(gradient_clip_val, optional_number),
    },
    TrainerOption {
        key: "gradient_clip_algorithm",
        kind: OptionKind::Text,
        default: "norm",
        doc: "\"norm\" (scale so the joint 2-norm is at most the value) or \"value\" (clamp each element)",
        apply: field!(gradient_clip_algorithm, clip_algorithm),
    },
    TrainerOption {
        key: "profiler",
        kind: OptionKind::Text,
        default: "none",
        doc: "\"simple\": the wall time of every hook, step, backward, optimizer step and batch fetch, reported at \
              the end of each run on stderr and by fulmen_trainer_profiler_report (Lightning's SimpleProfiler); \
              \"pytorch\": that, and libtorch's own profiler over the run, whose Chrome trace goes to \
              <log dir>/<stage>.pt.trace.json (<stage>-rank<N> under DDP) with the hooks as named scopes, and \
              whose longest operators the report lists (Lightning's PyTorchProfiler)",
        apply: field!(profiler, profiler),
    },
    TrainerOption {
        key: "deterministic",
        kind: OptionKind::BoolOrText,
        default: "false",
        doc: "true: libtorch's deterministic algorithms during the run, an op without a deterministic \
              implementation fails; \"warn\": the same, but such an op warns and runs \
              (torch.use_deterministic_algorithms(True, warn_only=True)); false leaves the setting as it is \
              (process-wide, restored after the run)",
        apply: field!(deterministic, deterministic),
    },
    TrainerOption {
        key: "benchmark",
        kind: OptionKind::BoolOrText,
        default: "none",
        doc: "torch.backends.cudnn.benchmark during the run (process-wide, restored after): cuDNN times its \
              convolution algorithms per input shape and keeps the fastest; \"none\" leaves it as it is, or off \
              when deterministic is on (with deterministic and true, a warning says PyTorch then ignores \
              determinism for cuDNN); no effect on the CPU or without cuDNN",
        apply: field!(benchmark, benchmark),
    },
    TrainerOption {
        key: "inference_mode",
        kind: OptionKind::Bool,
        default: "true",
        doc: "evaluate without autograd",
        apply: field!(inference_mode, parse_bool),
    },
    TrainerOption {
        key: "cuda_graphs",
        kind: OptionKind::Bool,
        default: "false",
        doc: "capture each kind of training step (batch shapes and dtypes, accumulation) in a CUDA graph after \
              cuda_graphs_warmup_steps eager runs, and replay it: the batch is copied into the graph's inputs and \
              forward, backward, clipping and the update run as one launch (at most 8 graphs); validation, \
              test and predict steps likewise in forward-only graphs (per stage, loader and batch shapes; at most \
              8 more). \
              The steps and the hooks between backward and the update run at the capture only, their device work \
              at every replay; the device tensors a step logs are logged again after each replay; a step's \
              returned tensor is the graph's output, overwritten by the next replay (a predict step's tensors are \
              copied). Refused with \
              FULMEN_CODE_UNSUPPORTED: other devices than CUDA (and the tests' fake device), several devices, \
              manual optimization, optimization hooks, detect_anomaly, optimizers other than fused SGD, Adam and \
              AdamW, and a step that reads a value or logs a number or a CPU tensor (a step value logged \
              with sync_dist is read after each replay); gradients stay allocated (zeroed in place), \
              and changing hyperparameters other than the learning rate, or the model's parameters and buffers, \
              after a capture fails the run; a predict step that sets its prediction as a value or returns host \
              tensors is refused (a blocking copy to the host fails the capture itself)",
        apply: field!(cuda_graphs, parse_bool),
    },
    TrainerOption {
        key: "cuda_graphs_warmup_steps",
        kind: OptionKind::Int,
        default: "3",
        doc: "eager runs of each kind of step before cuda_graphs captures it (at least 1: lazy state such as \
              optimizer buffers must exist before a capture)",
        apply: field!(cuda_graphs_warmup_steps, warmup_steps),
    },
    TrainerOption {
        key: "cuda_graphs_fallback",
        kind: OptionKind::Bool,
        default: "false",
        doc: "with cuda_graphs, a kind of step that cannot be captured (its capture failed, or 8 graphs exist) \
              runs eagerly from then on, with one warning, instead of failing the run; on CUDA a failed capture \
              still fails it (torch's CUDA generator stays marked as capturing after one)",
        apply: field!(cuda_graphs_fallback, parse_bool),
    },
    TrainerOption {
        key: "detect_anomaly",
        kind: OptionKind::Bool,
        default: "false",
        doc: "autograd's anomaly mode during the run: a NaN gradient fails backward, naming the operation",
        apply: field!(detect_anomaly, parse_bool),
    },
    TrainerOption {
        key: "barebones",
        kind: OptionKind::Bool,
        default: "false",
        doc: "Lightning's barebones mode, to measure the trainer's own overhead: turns off checkpointing, the \
              loggers, the progress bar, the model summary and the sanity check, drops the module's log calls \
              (with one warning per run); while on, turning any of those on, setting log_every_n_steps other \
              than 0, fast_dev_run, detect_anomaly or a profiler, or adding a logger, fails with Lightning's \
              error (options set before it are turned off, not refused; turning it off keeps them off)",
        apply: barebones,
    },
    TrainerOption {
        key: "default_root_dir",
        kind: OptionKind::Text,
        default: ".",
        doc: "folder for logs and checkpoints",
        apply: field!(default_root_dir, root_dir),
    },
    TrainerOption {
        key: "seed",
        kind: OptionKind::OptionalInt,
        default: "none",
        doc: "seed everything at the start of each fit / validate / test / predict (a non-negative integer)",
        apply: field!(seed, seed),
    },
    TrainerOption {
        key: "detect_nonfinite_loss",
        kind: OptionKind::Bool,
        default: "true",
        doc: "end the run with an error when a training loss is NaN or infinite: on the CPU before that step's update; on an accelerator the check stays on the device and is read with the trainer's other values (every log_every_n_steps steps, epoch ends, checkpoints, the run's end), so steps never wait for the device; the error then names the steps it happened between, whose updates were made (the ranks of a job agree at each reading: a NaN on one rank stops every rank there)",
        apply: field!(detect_nonfinite_loss, parse_bool),
    },
    TrainerOption {
        key: "callback_timeout",
        kind: OptionKind::OptionalDuration,
        default: "none",
        doc: "a host callback that runs longer fails the run with FULMEN_CODE_CALLBACK when it returns, since \
              fulmen cannot interrupt host code; \"none\" or 0 = no limit",
        apply: field!(callback_timeout, callback_timeout),
    },
    TrainerOption {
        key: "handle_signals",
        kind: OptionKind::Bool,
        default: "true",
        doc: "SIGINT / SIGTERM stop a run as described at the top of this header; false leaves the process's \
              signal handlers alone",
        apply: field!(handle_signals, parse_bool),
    },
    TrainerOption {
        key: "async_checkpoint_io",
        kind: OptionKind::Bool,
        default: "false",
        doc: "save checkpoints on a background thread (Lightning's AsyncCheckpointIO): the checkpoint is \
              serialized at once, written (or handed to the checkpoint IO plugin) meanwhile; the next save and the \
              end of the run wait for it and report its error",
        apply: field!(async_checkpoint_io, parse_bool),
    },
    TrainerOption {
        key: "slurm_auto_requeue",
        kind: OptionKind::Bool,
        default: "false",
        doc: "under SLURM (SLURM_JOB_ID set, job name not \"bash\" / \"interactive\"): SIGUSR1 saves \
              default_root_dir/hpc_ckpt_<n>.ckpt at the next batch, epoch or validation end, runs `scontrol requeue <job id>` and stops the \
              fit with FULMEN_CODE_INTERRUPTED; fit without ckpt_path resumes from the highest hpc_ckpt_<n>.ckpt \
              (Lightning's SLURMEnvironment auto_requeue)",
        apply: field!(slurm_auto_requeue, parse_bool),
    },
    TrainerOption {
        key: "process_group_backend",
        kind: OptionKind::Text,
        default: "none",
        doc: "\"gloo\", \"nccl\", a custom accelerator's collectives hook, or \"none\" = by device (gloo on CPU, \
              nccl on CUDA, the accelerator's hook when it has one)",
        apply: strategy_setting!("process_group_backend"),
    },
    TrainerOption {
        key: "sync_batchnorm",
        kind: OptionKind::Bool,
        default: "false",
        doc: "strategies \"ddp\", \"ddp_spawn\" and \"fsdp\": every BatchNorm normalises over the whole job's \
              batch while fitting, its statistics and their gradients summed over the ranks (torch's \
              SyncBatchNorm); the model's BatchNorms are plain again after the fit; one-process strategies ignore \
              it, as Lightning does",
        apply: strategy_setting!("sync_batchnorm"),
    },
    TrainerOption {
        key: "fsdp_sharding_strategy",
        kind: OptionKind::Text,
        default: "FULL_SHARD",
        doc: "strategy \"fsdp\": FULL_SHARD (parameters freed after each unit's forward and gathered again for its \
              backward), SHARD_GRAD_OP (gathered parameters kept until the backward ends), NO_SHARD (nothing \
              sharded, gradients averaged), HYBRID_SHARD (FULL_SHARD among the ranks of each of num_nodes nodes, \
              the nodes replicas whose gradient shards are averaged) or _HYBRID_SHARD_ZERO2 (the same with \
              SHARD_GRAD_OP within the node)",
        apply: strategy_setting!("sharding_strategy"),
    },
    TrainerOption {
        key: "fsdp_auto_wrap_policy",
        kind: OptionKind::Text,
        default: "none",
        doc: "strategy \"fsdp\": comma-separated module class names (\"TransformerEncoderLayer\", \"Sequential\", \
              \"HostModule\", ...) whose every instance is a sharding unit; the root module owns the rest",
        apply: strategy_setting!("auto_wrap_policy"),
    },
    TrainerOption {
        key: "fsdp_min_num_params",
        kind: OptionKind::Text,
        default: "none",
        doc: "strategy \"fsdp\": a module whose parameters not yet in a unit number at least this many becomes a \
              unit (torch's size_based_auto_wrap_policy); \"none\" = the class list alone",
        apply: strategy_setting!("min_num_params"),
    },
    TrainerOption {
        key: "fsdp_activation_checkpointing_policy",
        kind: OptionKind::Text,
        default: "none",
        doc: "strategy \"fsdp\": comma-separated module class names whose every instance below the root runs \
              its forward as a checkpoint (Lightning's activation_checkpointing_policy): its activations are not \
              kept, and backward runs the forward again (the same dropout masks and autocast) to get them; a \
              class that names no module is refused",
        apply: strategy_setting!("activation_checkpointing_policy"),
    },
    TrainerOption {
        key: "fsdp_param_dtype",
        kind: OptionKind::Text,
        default: "none",
        doc: "strategy \"fsdp\": torch's MixedPrecisionPolicy.param_dtype (\"bf16\", \"fp16\", \"fp32\" or \"none\"): \
              each unit's parameters are gathered in it and its forward and backward compute in it (its floating \
              inputs cast to it), while the shards the optimizers step stay in the parameters' own dtype; refused \
              under NO_SHARD",
        apply: strategy_setting!("param_dtype"),
    },
    TrainerOption {
        key: "fsdp_reduce_dtype",
        kind: OptionKind::Text,
        default: "none",
        doc: "strategy \"fsdp\": torch's MixedPrecisionPolicy.reduce_dtype: the dtype gradients are \
              reduce-scattered in before they land in the shards (\"none\" = fsdp_param_dtype's)",
        apply: strategy_setting!("reduce_dtype"),
    },
    TrainerOption {
        key: "fsdp_forward_prefetch",
        kind: OptionKind::Bool,
        default: "false",
        doc: "strategy \"fsdp\": torch FSDP's forward_prefetch: each unit's forward starts gathering the unit \
              that ran after it in the last forward, so the gather overlaps the computation (one more unit's \
              parameters held at a time)",
        apply: strategy_setting!("forward_prefetch"),
    },
    TrainerOption {
        key: "fsdp_backward_prefetch",
        kind: OptionKind::Text,
        default: "BACKWARD_PRE",
        doc: "strategy \"fsdp\": torch FSDP's backward_prefetch: \"BACKWARD_PRE\" = each unit's backward \
              starts gathering the unit whose backward comes next (as FSDP2 does), so the gather overlaps the \
              computation; \"none\" = each unit is gathered when its backward begins",
        apply: strategy_setting!("backward_prefetch"),
    },
    TrainerOption {
        key: "fsdp_sync_module_states",
        kind: OptionKind::Bool,
        default: "true",
        doc: "strategy \"fsdp\": torch FSDP's sync_module_states: before sharding, the ranks check that they \
              hold the same parameters and take rank 0's parameters and buffers; false = no collective before \
              the first gather and every rank must start from the same values (as FSDP2's fully_shard, which a \
              job shared with PyTorch FSDP2 ranks needs)",
        apply: strategy_setting!("sync_module_states"),
    },
    TrainerOption {
        key: "fsdp_reduce_scatter_unused_params",
        kind: OptionKind::Bool,
        default: "false",
        doc: "strategy \"fsdp\": FSDP2's set_reduce_scatter_unused_params(True): a unit's reduce-scatter \
              carries exactly the gradients of its parameters that have or require one (zeros for one a rank \
              lacks, a frozen parameter without one left out), each of which then gets one, zeros where no rank \
              had one, and the root and units fed the data reduce at the end of each backward, as FSDP2 sends \
              and orders them (a job shared with PyTorch FSDP2 ranks needs it; every rank must agree on which \
              parameters require grad); false = one more element per parameter says whether any rank had a \
              gradient, a parameter no rank had one for keeps none, and every unit reduces as soon as its \
              gradients are there",
        apply: strategy_setting!("reduce_scatter_unused_params"),
    },
    TrainerOption {
        key: "fsdp_cpu_offload",
        kind: OptionKind::Bool,
        default: "false",
        doc: "strategy \"fsdp\": Lightning's cpu_offload (torch's CPUOffloadPolicy): the parameter shards, \
              their gradients and the optimizer states live in the host's memory (the shards pinned under CUDA) \
              and the optimizers step there; each gather copies a unit's shards to the device and each reduce-scatter's \
              result comes back, so the device holds only gathered units, activations and buffers (refused with \
              NO_SHARD)",
        apply: strategy_setting!("cpu_offload"),
    },
    TrainerOption {
        key: "fsdp_state_dict_type",
        kind: OptionKind::Text,
        default: "full",
        doc: "strategy \"fsdp\": \"full\" = checkpoints hold the whole state, gathered from every rank and \
              written by rank 0; \"sharded\" = each checkpoint is a torch.distributed.checkpoint directory \
              (every rank writes its shards, rank 0 .metadata and meta.pt), as Lightning's FSDP strategies write; \
              it resumes on any number of ranks",
        apply: strategy_setting!("state_dict_type"),
    },
    TrainerOption {
        key: "tensor_parallel_plan",
        kind: OptionKind::Text,
        default: "none",
        doc: "strategy \"model_parallel\": the layers to split across the ranks, \"path=style, ...\" (what \
              parallelize_module's plan says; Linear and Embedding layers), each style one of colwise \
              (ColwiseParallel()), colwise_replicated_output (ColwiseParallel(output_layouts=Replicate())), rowwise \
              (RowwiseParallel()) and rowwise_replicated_input (RowwiseParallel(input_layouts=Replicate()))",
        apply: strategy_setting!("tensor_parallel_plan"),
    },
    TrainerOption {
        key: "data_parallel_size",
        kind: OptionKind::Text,
        default: "auto",
        doc: "strategy \"model_parallel\": Lightning's data_parallel_size, \"auto\" (num_nodes) or a count; fulmen \
              runs 1 (every rank in the tensor-parallel group) and refuses more",
        apply: strategy_setting!("data_parallel_size"),
    },
    TrainerOption {
        key: "tensor_parallel_size",
        kind: OptionKind::Text,
        default: "auto",
        doc: "strategy \"model_parallel\": Lightning's tensor_parallel_size, \"auto\" (the ranks per data-parallel \
              replica) or a count, which must be the world size",
        apply: strategy_setting!("tensor_parallel_size"),
    },
    TrainerOption {
        key: "save_distributed_checkpoint",
        kind: OptionKind::Bool,
        default: "true",
        doc: "strategy \"model_parallel\": Lightning's save_distributed_checkpoint; true = each checkpoint is a \
              torch.distributed.checkpoint directory (every rank writes its parts of the split parameters and \
              their optimizer states, rank 0 .metadata and meta.pt; the model's states under \"state_dict\"), as \
              Lightning's ModelParallelStrategy writes; it resumes on any number of ranks, each reading only its \
              parts; false = one file, gathered whole and written by rank 0 (what a checkpoint_io plugin or a \
              weight-averaging callback's state needs: sharded directories refuse them)",
        apply: strategy_setting!("save_distributed_checkpoint"),
    },
    TrainerOption {
        key: "ddp_timeout",
        kind: OptionKind::Duration,
        default: "1800",
        doc: "limit on the rendezvous and on every collective of a distributed job",
        apply: strategy_setting!("timeout"),
    },
];

/// The option with this key.
pub fn find(key: &str) -> Option<&'static TrainerOption> {
    TRAINER_OPTIONS.iter().find(|o| o.key == key)
}

/// Every key, comma-separated (for error messages).
pub fn keys() -> String {
    TRAINER_OPTIONS.iter().map(|o| o.key).collect::<Vec<_>>().join(", ")
}

impl TrainerOptions {
    /// Sets option `key` from its text form, as Lightning's `Trainer(...)`
    /// keyword argument. An unknown key or a bad value is an error naming
    /// it, and then nothing changes.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let option = find(key)
            .ok_or_else(|| Error::invalid(format!("unknown trainer option {key:?}; known options: {}", keys())))?;
        let mut next = self.clone();
        let v = if option.key == "default_root_dir" { value } else { value.trim() };
        (option.apply)(&mut next, option.key, v)?;
        next.validate().map_err(|e| e.context(format!("option {key}")))?;
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for o in TRAINER_OPTIONS {
            assert!(seen.insert(o.key), "{} twice", o.key);
        }
    }

    /// Each documented default, set on default options, changes nothing.
    #[test]
    fn documented_defaults_are_the_defaults() {
        let reference = format!("{:?}", TrainerOptions::default());
        for o in TRAINER_OPTIONS {
            let mut opts = TrainerOptions::default();
            opts.set(o.key, o.default).unwrap_or_else(|e| panic!("{}: {e}", o.key));
            assert_eq!(format!("{opts:?}"), reference, "default of {}", o.key);
        }
    }

    #[test]
    fn a_bad_value_changes_nothing_and_names_the_option() {
        let mut opts = TrainerOptions::default();
        opts.set("max_epochs", "3").unwrap();
        let e = opts.set("log_every_n_steps", "0").unwrap_err();
        assert!(e.message.contains("log_every_n_steps"), "{e}");
        let e = opts.set("max_epoch", "3").unwrap_err();
        assert!(e.message.contains("known options") && e.message.contains("ddp_timeout"), "{e}");
        assert_eq!(opts.max_epochs, Some(3));
        assert_eq!(opts.log_every_n_steps, 50);
    }

    #[test]
    fn counts_and_fractions_as_lightning() {
        let mut opts = TrainerOptions::default();
        opts.set("limit_train_batches", "1").unwrap();
        assert_eq!(opts.limit_train_batches, BatchLimit::Count(1));
        opts.set("limit_train_batches", "1.0").unwrap();
        assert_eq!(opts.limit_train_batches, BatchLimit::All);
        opts.set("limit_train_batches", "0.5").unwrap();
        assert_eq!(opts.limit_train_batches, BatchLimit::Fraction(0.5));
        assert!(opts.set("limit_train_batches", "1.5").is_err());
        opts.set("fast_dev_run", "yes").unwrap();
        assert_eq!(opts.fast_dev_run, 1);
        opts.set("fast_dev_run", "4").unwrap();
        assert_eq!(opts.fast_dev_run, 4);
        opts.set("callback_timeout", "0").unwrap();
        assert_eq!(opts.callback_timeout, None);
        opts.set("ddp_timeout", "2.5").unwrap();
        assert_eq!(opts.strategy.timeout, Duration::from_millis(2500));
    }
}

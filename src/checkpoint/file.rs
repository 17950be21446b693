//! The checkpoint container and its validation.
use crate::error::{Error, Result};
use crate::nn::{read_safetensors_bytes, write_safetensors};
use crate::trainer::loop_progress::FitProgress;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tch::Tensor;

/// Version of the checkpoint layout written by this library.
pub const FORMAT_VERSION: &str = "1";

const FORMAT_KEY: &str = "fulmen.checkpoint";
const MODEL_PREFIX: &str = "state_dict.";
const OPTIMIZER_PREFIX: &str = "optimizer_states.";
const CURRENT_PREFIX: &str = "current_model_state.";
const AVERAGING_PREFIX: &str = "averaging_state.";
const CALLBACK_TENSORS_PREFIX: &str = "callback_tensors.";
const RNG_CPU: &str = "rng_states.cpu";
const RNG_CUDA: &str = "rng_states.cuda";
const RNG_DEVICE: &str = "rng_states.device";
const PROGRESS_KEY: &str = "loop_progress";
const DATAMODULE_KEY: &str = "datamodule";

/// The largest epoch, step or batch count a checkpoint may hold (2^53:
/// every count stays exact as the f64 loggers write).
pub const MAX_COUNTER: i64 = 1 << 53;

/// The most optimizers a checkpoint may hold.
pub const MAX_OPTIMIZERS: i64 = 1 << 16;

/// The most bytes a datamodule's state may have in a checkpoint
/// (FULMEN_MAX_DATAMODULE_STATE).
pub const MAX_DATAMODULE_STATE: usize = 1 << 20;

/// The most datamodule states a checkpoint may hold.
pub const MAX_DATAMODULE_STATES: usize = 64;

/// The largest metadata a checkpoint may carry, leaving room in the
/// safetensors header for the tensor table.
pub const MAX_METADATA_BYTES: usize = crate::nn::MAX_HEADER_BYTES / 2;

/// Everything a checkpoint holds.
#[derive(Default)]
pub struct Checkpoint {
    /// Epoch the checkpoint was taken in (0-based).
    pub epoch: i64,
    /// Optimizer steps taken when it was saved.
    pub global_step: i64,
    /// Training batches that stepped (the loggers' step; `global_step`
    /// but with manual optimization).
    pub batches_stepped: i64,
    /// Training batches already done in `epoch` (0 at an epoch end when
    /// `epoch_finished`).
    pub batches_in_epoch: i64,
    /// Whether `epoch` was complete (resuming starts the next one).
    pub epoch_finished: bool,
    /// Scheduler steps the loop took, in all and in `epoch` (Lightning's
    /// scheduler progress; (0, 0) in checkpoints that predate it).
    pub scheduler_steps: (i64, i64),
    /// `zero_grad` calls beyond one per optimizer step, in all and in
    /// `epoch`: the closure evaluations of an optimizer that re-evaluates
    /// the loss (LBFGS), which Lightning's optimizer progress counts.
    pub extra_zero_grads: (i64, i64),
    /// The trained weights when the state_dict holds averaged ones (weight
    /// averaging; Lightning's `current_model_state`).
    pub current_model_state: Option<Vec<(String, Tensor)>>,
    /// The averaging's own tensors (Lightning's `averaging_state`:
    /// `n_averaged`).
    pub averaging_state: Vec<(String, Tensor)>,
    /// Tensors of a callback's state by its state key (the averaged model
    /// of StochasticWeightAveraging, Lightning's `average_model_state`).
    pub callback_tensors: BTreeMap<String, Vec<(String, Tensor)>>,
    /// Validation batches run in `epoch`, and in its last validation
    /// (written in Lightning's format only).
    pub val_batches: (i64, i64),
    /// The model's state_dict (PyTorch names).
    pub state_dict: Vec<(String, Tensor)>,
    /// Each optimizer's state, in configure_optimizers order.
    pub optimizer_states: Vec<Vec<(String, Tensor)>>,
    /// Every scheduler's state, optimizer by optimizer, in the order they
    /// step.
    pub scheduler_states: Vec<Vec<(String, f64)>>,
    /// The optimizer of each scheduler state (empty when
    /// `schedulers_listed`: a Lightning checkpoint does not say).
    pub scheduler_owners: Vec<usize>,
    /// Precision plugin state (loss scaler), as named numbers.
    pub precision_state: Vec<(String, f64)>,
    /// Callback states by callback name.
    pub callbacks: BTreeMap<String, BTreeMap<String, String>>,
    /// Hyperparameters as text.
    pub hparams: BTreeMap<String, String>,
    /// Entries added by `on_save_checkpoint` hooks, per callback name
    /// ("LightningModule" for the module's own).
    pub extra: BTreeMap<String, BTreeMap<String, String>>,
    /// The datamodules' states by their names (Lightning's
    /// `checkpoint[datamodule.__class__.__qualname__]`): the bytes a
    /// datamodule's `state_dict` gave, at most [`MAX_DATAMODULE_STATE`]
    /// each.
    pub datamodule_states: BTreeMap<String, Vec<u8>>,
    /// Whether only the weights were saved.
    pub weights_only: bool,
    /// libtorch's CPU generator state (dropout and other random ops), so
    /// a resumed run draws the same numbers.
    pub rng_state: Option<Tensor>,
    /// The CUDA generator's state of the device the run trained on, when
    /// that was a GPU (torch.cuda.get_rng_state).
    pub cuda_rng_state: Option<Tensor>,
    /// The generator state of the device the run trained on when that was
    /// neither the CPU nor CUDA (an XPU, a PrivateUse1 backend): libtorch's
    /// default generator there, or a custom accelerator's `get_rng_state`.
    pub device_rng_state: Option<Tensor>,
    /// Each optimizer's kind ("sgd", "adam", ...), which Lightning's format
    /// needs to write torch's entries for it.
    pub optimizer_kinds: Vec<String>,
    /// How the run counts batches, which Lightning's loop progress needs.
    pub loop_info: LoopInfo,
    /// The fit loop's progress as the run kept it (none in checkpoints
    /// written before it was kept: their counters above imply it).
    pub progress: Option<FitProgress>,
    /// Lightning's `state_key` of each callback that has a Lightning
    /// counterpart, by the callback's key in `callbacks`.
    pub lightning_keys: BTreeMap<String, String>,
    /// Whether `scheduler_states` lists the schedulers in order (a
    /// Lightning checkpoint) instead of one entry per optimizer.
    pub schedulers_listed: bool,
    /// Whether the tensors of a sharded model's parameters, and of the
    /// optimizer states shaped as one, hold only this rank's rows (a
    /// rank-local read of a sharded checkpoint directory): they load into
    /// the model as it is sharded, never gathered whole.
    pub local_rows: bool,
    /// Per optimizer of a Lightning checkpoint: the entries a scheduler
    /// keeps in its param groups (OneCycleLR's `max_lr`, `min_lr`, momentum
    /// range), each with its per-group values.
    pub scheduler_group_entries: Vec<Vec<(String, Vec<f64>)>>,
}

/// How a run counts batches (for Lightning's loop progress).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopInfo {
    /// Training batches per epoch.
    pub num_train_batches: i64,
    /// `accumulate_grad_batches`.
    pub accumulate_grad_batches: i64,
    /// Whether the module steps its optimizers itself.
    pub manual_optimization: bool,
}

/// The file format of checkpoints a trainer writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CheckpointFormat {
    /// fulmen's safetensors file (tensors, plus the rest as JSON metadata).
    Safetensors,
    /// Lightning's `torch.save` dict, which `torch.load` and Lightning's
    /// `Trainer.fit(ckpt_path=...)` read (the default, as a `.ckpt` is
    /// expected to open with `torch.load`).
    #[default]
    Lightning,
}

impl CheckpointFormat {
    /// Parses "safetensors" or "lightning".
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "safetensors" => Some(CheckpointFormat::Safetensors),
            "lightning" => Some(CheckpointFormat::Lightning),
            _ => None,
        }
    }
}

/// The model weights of a safetensors file read as plain tensors
/// (`tensors`, `meta`): a full fulmen checkpoint's `state_dict.` entries,
/// unprefixed; any other file's tensors (a state_dict, a weights-only
/// checkpoint) as they are.
pub fn checkpoint_weights(tensors: Vec<(String, Tensor)>, meta: &HashMap<String, String>) -> Vec<(String, Tensor)> {
    let full = meta.contains_key(FORMAT_KEY) && meta.get("weights_only").map(String::as_str) != Some("true");
    if !full {
        return tensors;
    }
    tensors.into_iter().filter_map(|(k, t)| Some((k.strip_prefix(MODEL_PREFIX)?.to_string(), t))).collect()
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn parse<T: serde::de::DeserializeOwned>(meta: &HashMap<String, String>, key: &str, path: &Path) -> Result<T> {
    let text =
        meta.get(key).ok_or_else(|| Error::format(format!("{}: checkpoint metadata lacks `{key}`", path.display())))?;
    serde_json::from_str(text)
        .map_err(|e| Error::format(format!("{}: checkpoint metadata `{key}` is malformed: {e}", path.display())))
}

impl Checkpoint {
    /// The state_dict named as the model (whose names are `model`) names
    /// its entries: `prefix` removed from the names that have it, or, when
    /// `prefix` is empty, the attribute prefix (such as a LightningModule's
    /// `model.`) whose removal makes the names fit.
    pub fn weights_for(&self, model: &std::collections::HashSet<String>, prefix: &str) -> Vec<(String, Tensor)> {
        self.named_for(&self.state_dict, model, prefix)
    }

    /// `weights` (a state_dict of this checkpoint) named as `weights_for`
    /// names the state_dict.
    pub fn named_for(
        &self,
        weights: &[(String, Tensor)],
        model: &std::collections::HashSet<String>,
        prefix: &str,
    ) -> Vec<(String, Tensor)> {
        let weights = weights.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
        if prefix.is_empty() {
            return crate::nn::without_module_prefix(weights, model);
        }
        weights
            .into_iter()
            .map(|(k, t): (String, Tensor)| match k.strip_prefix(prefix) {
                Some(rest) => (rest.to_string(), t),
                None => (k, t),
            })
            .collect()
    }

    /// Writes the checkpoint in `format` (Lightning's with the state_dict's
    /// names prefixed by `prefix`), atomically.
    pub fn save_as(&self, path: &Path, format: CheckpointFormat, prefix: &str) -> Result<()> {
        match format {
            CheckpointFormat::Safetensors => self.save(path),
            CheckpointFormat::Lightning => {
                let value = super::lightning::to_lightning(self, prefix)?;
                super::torch_save::save(path, &value)
            }
        }
    }

    /// The bytes [`Checkpoint::save_as`] would write at `path`, in memory
    /// (what a checkpoint IO plugin receives; `path` names it in errors).
    pub fn to_bytes(&self, format: CheckpointFormat, prefix: &str, path: &Path) -> Result<Vec<u8>> {
        match format {
            CheckpointFormat::Safetensors => {
                let (tensors, meta) = self.safetensors_parts(path)?;
                crate::nn::safetensors_bytes(&tensors, Some(meta), &path.display().to_string())
            }
            CheckpointFormat::Lightning => {
                let value = super::lightning::to_lightning(self, prefix)?;
                super::torch_save::to_bytes(&value)
            }
        }
    }

    /// Writes the checkpoint to `path` (through `<path>.tmp` and a rename).
    /// A weights-only checkpoint holds just the state_dict, unprefixed, so
    /// `safetensors.torch.load_file` gives a plain PyTorch state_dict.
    pub fn save(&self, path: &Path) -> Result<()> {
        let (tensors, meta) = self.safetensors_parts(path)?;
        write_safetensors(path, &tensors, Some(meta))
    }

    /// The tensors and metadata of the safetensors layout (`path` names the
    /// checkpoint in errors).
    #[allow(clippy::type_complexity)]
    fn safetensors_parts(&self, path: &Path) -> Result<(Vec<(String, Tensor)>, HashMap<String, String>)> {
        let mut meta = HashMap::new();
        meta.insert(FORMAT_KEY.to_string(), FORMAT_VERSION.to_string());
        meta.insert("epoch".into(), self.epoch.to_string());
        meta.insert("global_step".into(), self.global_step.to_string());
        meta.insert("hparams".into(), json(&self.hparams));
        if !self.datamodule_states.is_empty() {
            let hex: BTreeMap<&String, String> =
                self.datamodule_states.iter().map(|(k, v)| (k, hex_encode(v))).collect();
            meta.insert(DATAMODULE_KEY.into(), json(&hex));
        }
        if self.weights_only {
            meta.insert("weights_only".into(), "true".into());
            let tensors: Vec<(String, Tensor)> =
                self.state_dict.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
            return Ok((tensors, meta));
        }
        meta.insert("weights_only".into(), "false".into());
        meta.insert("batches_in_epoch".into(), self.batches_in_epoch.to_string());
        meta.insert("batches_that_stepped".into(), self.batches_stepped.to_string());
        meta.insert("epoch_finished".into(), self.epoch_finished.to_string());
        meta.insert("scheduler_steps".into(), json(&[self.scheduler_steps.0, self.scheduler_steps.1]));
        meta.insert("extra_zero_grads".into(), json(&[self.extra_zero_grads.0, self.extra_zero_grads.1]));
        if let Some(p) = &self.progress {
            meta.insert(PROGRESS_KEY.into(), json(p));
        }
        meta.insert("num_optimizers".into(), self.optimizer_states.len().to_string());
        meta.insert("lr_schedulers".into(), json(&self.scheduler_states));
        meta.insert("lr_scheduler_owners".into(), json(&self.scheduler_owners));
        meta.insert("precision".into(), json(&self.precision_state));
        meta.insert("callbacks".into(), json(&self.callbacks));
        meta.insert("extra".into(), json(&self.extra));
        check_metadata_size(&meta, &self.extra, path)?;
        let mut tensors = Vec::new();
        for (k, t) in &self.state_dict {
            tensors.push((format!("{MODEL_PREFIX}{k}"), t.shallow_clone()));
        }
        for (i, state) in self.optimizer_states.iter().enumerate() {
            for (k, t) in state {
                tensors.push((format!("{OPTIMIZER_PREFIX}{i}.{k}"), t.shallow_clone()));
            }
        }
        for (k, t) in self.current_model_state.iter().flatten() {
            tensors.push((format!("{CURRENT_PREFIX}{k}"), t.shallow_clone()));
        }
        for (k, t) in &self.averaging_state {
            tensors.push((format!("{AVERAGING_PREFIX}{k}"), t.shallow_clone()));
        }
        for (key, entries) in &self.callback_tensors {
            if key.contains('/') {
                return Err(Error::invalid(format!("checkpoint: callback state key {key:?} contains '/'")));
            }
            for (k, t) in entries {
                tensors.push((format!("{CALLBACK_TENSORS_PREFIX}{key}/{k}"), t.shallow_clone()));
            }
        }
        if let Some(r) = &self.rng_state {
            tensors.push((RNG_CPU.to_string(), r.shallow_clone()));
        }
        if let Some(r) = &self.cuda_rng_state {
            tensors.push((RNG_CUDA.to_string(), r.shallow_clone()));
        }
        if let Some(r) = &self.device_rng_state {
            tensors.push((RNG_DEVICE.to_string(), r.shallow_clone()));
        }
        Ok((tensors, meta))
    }

    /// Reads only the weights of a checkpoint (fulmen's or Lightning's),
    /// as a checkpoint holding just its state_dict: a Lightning file's
    /// optimizer, scheduler and loop entries are not interpreted, so a run
    /// that needs the weights alone (validate, test, predict) reads any.
    pub fn load_weights(path: &Path) -> Result<Checkpoint> {
        Checkpoint::load_weights_local(path, None)
    }

    /// [`Checkpoint::load_weights`]; a sharded checkpoint directory read
    /// rank-locally with `local` (see [`Checkpoint::load_local`]).
    pub(crate) fn load_weights_local(path: &Path, local: Option<&super::dcp::LocalRows>) -> Result<Checkpoint> {
        if super::dcp::is_sharded_dir(path) {
            let mut ck = Checkpoint::weights_of(&super::dcp::load(path, true, local)?, path)?;
            ck.local_rows = local.is_some();
            return Ok(ck);
        }
        if super::torch_save::sniff(path)? != Some(super::torch_save::TorchFile::Archive) {
            return Checkpoint::load(path);
        }
        let value = super::torch_save::load(path)?;
        Checkpoint::weights_of(&value, path)
    }

    /// [`Checkpoint::load_weights`] of a checkpoint's bytes in memory (from
    /// a checkpoint IO plugin; `path` names it in errors).
    pub fn weights_from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
        if !super::torch_zip::looks_like_zip(&bytes[..bytes.len().min(4)]) {
            return Checkpoint::from_bytes(bytes, path);
        }
        let value = super::torch_save::read_bytes(bytes, &path.display().to_string())?;
        Checkpoint::weights_of(&value, path)
    }

    /// The state_dict of a Lightning checkpoint read as `value`.
    fn weights_of(value: &super::torch_save::Value, path: &Path) -> Result<Checkpoint> {
        if !super::lightning::is_lightning(value) {
            return Err(not_lightning(path));
        }
        let what = path.display().to_string();
        let state_dict = super::torch_save::state_dict_of(value, &what)?;
        let datamodule_states = super::lightning::datamodule_states(value, &what)?;
        Ok(Checkpoint { state_dict, datamodule_states, ..Default::default() })
    }

    /// Reads a checkpoint. A truncated or corrupted file, or one that is
    /// not a fulmen checkpoint, is a `Format` error naming the file.
    pub fn load(path: &Path) -> Result<Checkpoint> {
        Checkpoint::load_local(path, None)
    }

    /// [`Checkpoint::load`]; a sharded checkpoint directory read
    /// rank-locally with `local`: the tensors of the sharded parameters, and
    /// the optimizer states shaped as one, hold this rank's rows only
    /// (`local_rows` says so). Other files are read whole.
    pub(crate) fn load_local(path: &Path, local: Option<&super::dcp::LocalRows>) -> Result<Checkpoint> {
        if super::dcp::is_sharded_dir(path) {
            let value = super::dcp::load(path, false, local)?;
            if !super::lightning::is_lightning(&value) {
                return Err(not_lightning(path));
            }
            let mut ck = super::lightning::from_lightning(&value, &path.display().to_string())?;
            ck.local_rows = local.is_some();
            return Ok(ck);
        }
        let bytes = crate::fs_safe::read_regular(path)?;
        Checkpoint::from_bytes(&bytes, path)
    }

    /// [`Checkpoint::load`] of a checkpoint's bytes in memory (from a
    /// checkpoint IO plugin; `path` names it in errors).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
        let head = &bytes[..bytes.len().min(4)];
        if super::torch_zip::looks_like_zip(head) {
            let value = super::torch_save::read_bytes(bytes, &path.display().to_string())?;
            if !super::lightning::is_lightning(&value) {
                return Err(not_lightning(path));
            }
            return super::lightning::from_lightning(&value, &path.display().to_string());
        }
        if super::torch_save::looks_like_pickle(head) {
            return Err(super::torch_save::legacy_error(path));
        }
        let (tensors, meta) = read_safetensors_bytes(bytes, &path.display().to_string())?;
        match meta.get(FORMAT_KEY).map(String::as_str) {
            Some(FORMAT_VERSION) => {}
            Some(v) => {
                return Err(Error::format(format!(
                    "{}: checkpoint format {v} is not supported (this fulmen reads {FORMAT_VERSION})",
                    path.display()
                )))
            }
            None => {
                return Err(Error::format(format!(
                    "{} is a safetensors file but not a fulmen checkpoint",
                    path.display()
                )))
            }
        }
        let int_in = |key: &str, max: i64| -> Result<i64> {
            let v = meta.get(key).and_then(|v| v.parse::<i64>().ok()).ok_or_else(|| {
                Error::format(format!("{}: checkpoint metadata `{key}` is missing or not an integer", path.display()))
            })?;
            if !(0..=max).contains(&v) {
                return Err(Error::format(format!(
                    "{}: checkpoint metadata `{key}` = {v} is outside 0..={max}",
                    path.display()
                )));
            }
            Ok(v)
        };
        let int = |key: &str| int_in(key, MAX_COUNTER);
        let mut ck = Checkpoint {
            epoch: int("epoch")?,
            global_step: int("global_step")?,
            hparams: parse(&meta, "hparams", path)?,
            weights_only: meta.get("weights_only").map(String::as_str) == Some("true"),
            ..Default::default()
        };
        if meta.contains_key(DATAMODULE_KEY) {
            ck.datamodule_states = datamodule_states_of(&parse(&meta, DATAMODULE_KEY, path)?, path)?;
        }
        if ck.weights_only {
            ck.state_dict = tensors;
            return Ok(ck);
        }
        ck.batches_in_epoch = int("batches_in_epoch")?;
        // Older checkpoints (automatic optimization only) lack it.
        ck.batches_stepped =
            if meta.contains_key("batches_that_stepped") { int("batches_that_stepped")? } else { ck.global_step };
        ck.epoch_finished = meta.get("epoch_finished").map(String::as_str) == Some("true");
        if meta.contains_key("scheduler_steps") {
            let [total, epoch]: [i64; 2] = parse(&meta, "scheduler_steps", path)?;
            if !(0..=MAX_COUNTER).contains(&total) || !(0..=total).contains(&epoch) {
                return Err(Error::format(format!(
                    "{}: checkpoint metadata `scheduler_steps` is out of range",
                    path.display()
                )));
            }
            ck.scheduler_steps = (total, epoch);
        }
        if meta.contains_key("extra_zero_grads") {
            let [total, epoch]: [i64; 2] = parse(&meta, "extra_zero_grads", path)?;
            if !(0..=MAX_COUNTER).contains(&total) || !(0..=total).contains(&epoch) {
                return Err(Error::format(format!(
                    "{}: checkpoint metadata `extra_zero_grads` is out of range",
                    path.display()
                )));
            }
            ck.extra_zero_grads = (total, epoch);
        }
        // Checkpoints written before the loop progress was kept lack it.
        if meta.contains_key(PROGRESS_KEY) {
            let p: FitProgress = parse(&meta, PROGRESS_KEY, path)?;
            if !p.counts_within(MAX_COUNTER) {
                return Err(Error::format(format!(
                    "{}: checkpoint metadata `{PROGRESS_KEY}` has a count out of range",
                    path.display()
                )));
            }
            ck.progress = Some(p);
        }
        let n_opt = int_in("num_optimizers", MAX_OPTIMIZERS)? as usize;
        let states: Vec<Vec<(String, f64)>> = parse(&meta, "lr_schedulers", path)?;
        ck.precision_state = parse(&meta, "precision", path)?;
        ck.callbacks = parse(&meta, "callbacks", path)?;
        ck.extra = parse(&meta, "extra", path)?;
        if meta.contains_key("lr_scheduler_owners") {
            let owners: Vec<usize> = parse(&meta, "lr_scheduler_owners", path)?;
            if owners.len() != states.len() || owners.iter().any(|o| *o >= n_opt) || !owners.is_sorted() {
                return Err(Error::format(format!(
                    "{}: checkpoint metadata `lr_scheduler_owners` ({} entries) does not fit {} scheduler \
                     states of {n_opt} optimizers",
                    path.display(),
                    owners.len(),
                    states.len()
                )));
            }
            (ck.scheduler_states, ck.scheduler_owners) = (states, owners);
        } else {
            // Older checkpoints: one state per optimizer, empty for none.
            if states.len() > n_opt {
                return Err(Error::format(format!(
                    "{}: {} scheduler states for {n_opt} optimizers",
                    path.display(),
                    states.len()
                )));
            }
            for (i, state) in states.into_iter().enumerate().filter(|(_, s)| !s.is_empty()) {
                ck.scheduler_states.push(state);
                ck.scheduler_owners.push(i);
            }
        }
        ck.optimizer_states = (0..n_opt).map(|_| Vec::new()).collect();
        for (name, t) in tensors {
            if name == RNG_CPU {
                ck.rng_state = Some(t);
            } else if name == RNG_CUDA {
                ck.cuda_rng_state = Some(t);
            } else if name == RNG_DEVICE {
                ck.device_rng_state = Some(t);
            } else if let Some(k) = name.strip_prefix(MODEL_PREFIX) {
                ck.state_dict.push((k.to_string(), t));
            } else if let Some(k) = name.strip_prefix(CURRENT_PREFIX) {
                ck.current_model_state.get_or_insert_with(Vec::new).push((k.to_string(), t));
            } else if let Some(k) = name.strip_prefix(AVERAGING_PREFIX) {
                ck.averaging_state.push((k.to_string(), t));
            } else if let Some(rest) = name.strip_prefix(CALLBACK_TENSORS_PREFIX) {
                let (key, k) = rest
                    .split_once('/')
                    .ok_or_else(|| Error::format(format!("{}: bad callback tensor name {name:?}", path.display())))?;
                ck.callback_tensors.entry(key.to_string()).or_default().push((k.to_string(), t));
            } else if let Some(rest) = name.strip_prefix(OPTIMIZER_PREFIX) {
                let (i, k) = rest
                    .split_once('.')
                    .ok_or_else(|| Error::format(format!("{}: bad optimizer tensor name {name:?}", path.display())))?;
                let i: usize = i
                    .parse()
                    .map_err(|_| Error::format(format!("{}: bad optimizer tensor name {name:?}", path.display())))?;
                let slot = ck.optimizer_states.get_mut(i).ok_or_else(|| {
                    Error::format(format!("{}: tensor {name:?} names optimizer {i} of {n_opt}", path.display()))
                })?;
                slot.push((k.to_string(), t));
            } else {
                return Err(Error::format(format!("{}: unexpected tensor {name:?} in a checkpoint", path.display())));
            }
        }
        check_optimizer_numbers(&ck.optimizer_states, path)?;
        Ok(ck)
    }
}

/// Refuses optimizer states whose hyperparameters or steps (the one-number
/// entries `param_groups.G.KEY` and `state.I.step`) are NaN or infinite,
/// before any optimizer loads them: a `Format` error naming the entry and
/// the file.
fn check_optimizer_numbers(states: &[Vec<(String, Tensor)>], path: &Path) -> Result<()> {
    for (i, state) in states.iter().enumerate() {
        for (name, t) in state {
            let number = (name.starts_with("param_groups.") && !name.ends_with(".params"))
                || (name.starts_with("state.") && name.ends_with(".step"));
            if number && t.numel() == 1 {
                let v = super::numbers::one_value(t)?;
                super::numbers::finite(v, &format!("{}: optimizer_states.{i}.{name}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// The error for a `torch.save` file that is not a Lightning checkpoint.
fn not_lightning(path: &Path) -> Error {
    Error::format(format!(
        "{} is a torch.save file but not a Lightning checkpoint (no `pytorch-lightning_version`; a state_dict?): it \
         cannot be a ckpt_path; fulmen_model_load reads its weights",
        path.display()
    ))
}

/// Lower-case hexadecimal text of `bytes`.
fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The bytes of hexadecimal text, `None` when it is not.
fn hex_decode(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
    let b = text.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    b.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// The datamodule states of fulmen's metadata (name to hexadecimal
/// bytes), each checked against [`MAX_DATAMODULE_STATE`] before it is
/// decoded.
fn datamodule_states_of(hex: &BTreeMap<String, String>, path: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    if hex.len() > MAX_DATAMODULE_STATES {
        return Err(Error::format(format!(
            "{}: checkpoint metadata `{DATAMODULE_KEY}` holds {} states, at most {MAX_DATAMODULE_STATES}",
            path.display(),
            hex.len()
        )));
    }
    hex.iter()
        .map(|(name, text)| {
            let bytes = (text.len() <= 2 * MAX_DATAMODULE_STATE).then(|| hex_decode(text)).flatten();
            let bytes = bytes.ok_or_else(|| {
                Error::format(format!(
                    "{}: checkpoint metadata `{DATAMODULE_KEY}` entry {name:?} is not hexadecimal bytes of at most \
                     {MAX_DATAMODULE_STATE}",
                    path.display()
                ))
            })?;
            Ok((name.clone(), bytes))
        })
        .collect()
}

/// Refuses metadata a reader could not load back, naming the largest
/// `on_save_checkpoint` entry when the hooks' entries are the cause.
fn check_metadata_size(
    meta: &HashMap<String, String>,
    extra: &BTreeMap<String, BTreeMap<String, String>>,
    path: &Path,
) -> Result<()> {
    let total: usize = meta.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total <= MAX_METADATA_BYTES {
        return Ok(());
    }
    let largest = extra
        .iter()
        .flat_map(|(owner, entries)| entries.iter().map(move |(k, v)| (owner, k, k.len() + v.len())))
        .max_by_key(|(_, _, n)| *n);
    let hint = match largest {
        Some((owner, key, n)) => format!("; the largest on_save_checkpoint entry is {owner} / {key:?} ({n} bytes)"),
        None => String::new(),
    };
    Err(Error::invalid(format!(
        "{}: checkpoint metadata would be {total} bytes, more than the {MAX_METADATA_BYTES} a checkpoint can \
         carry and load back{hint}",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dirs::TempDir;

    /// A datamodule's state round trips through both formats (also in a
    /// weights-only file); metadata that is not hexadecimal, or longer than
    /// the limit, is refused before it is decoded.
    #[test]
    fn datamodule_states_round_trip_and_are_bounded() {
        let dir = TempDir::new("ckpt-datamodule");
        let path = dir.join("dm.ckpt");
        let mut states = BTreeMap::new();
        states.insert("BlobData".to_string(), vec![0u8, 1, 0xab, 0xff]);
        for weights_only in [false, true] {
            let ck = Checkpoint {
                datamodule_states: states.clone(),
                weights_only,
                rng_state: Some(Tensor::from_slice(&[1u8])),
                ..Default::default()
            };
            ck.save(&path).unwrap();
            assert_eq!(Checkpoint::load(&path).unwrap().datamodule_states, states);
            ck.save_as(&path, CheckpointFormat::Lightning, "").unwrap();
            assert_eq!(Checkpoint::load(&path).unwrap().datamodule_states, states);
            assert_eq!(Checkpoint::load_weights(&path).unwrap().datamodule_states, states);
        }
        assert_eq!(hex_decode(&hex_encode(&[7, 0, 200])), Some(vec![7, 0, 200]));
        assert_eq!(hex_decode("0g"), None);
        assert_eq!(hex_decode("abc"), None);
        let mut bad = BTreeMap::new();
        bad.insert("Big".to_string(), "00".repeat(MAX_DATAMODULE_STATE + 1));
        let e = datamodule_states_of(&bad, &path).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::Format);
        bad.insert("Big".to_string(), "zz".to_string());
        assert!(datamodule_states_of(&bad, &path).is_err());
        assert!(crate::checkpoint::lightning::is_reserved_key("state_dict"));
        assert!(!crate::checkpoint::lightning::is_reserved_key("BlobData"));
    }

    #[test]
    fn generator_states_round_trip() {
        let dir = TempDir::new("ckpt-rng");
        let path = dir.join("rng.ckpt");
        let cpu = Tensor::from_slice(&[1u8, 2, 3]);
        let cuda = Tensor::from_slice(&[9u8, 8, 7, 6]);
        let device = Tensor::from_slice(&[5u8, 4]);
        let ck = Checkpoint {
            rng_state: Some(cpu.shallow_clone()),
            cuda_rng_state: Some(cuda.shallow_clone()),
            device_rng_state: Some(device.shallow_clone()),
            ..Default::default()
        };
        ck.save(&path).unwrap();
        let back = Checkpoint::load(&path).unwrap();
        assert_eq!(back.rng_state.unwrap(), cpu);
        assert_eq!(back.cuda_rng_state.unwrap(), cuda);
        assert_eq!(back.device_rng_state.unwrap(), device);
        // A checkpoint from a CPU run has no CUDA state.
        let plain = Checkpoint { rng_state: Some(cpu), ..Default::default() };
        plain.save(&path).unwrap();
        assert!(Checkpoint::load(&path).unwrap().cuda_rng_state.is_none());
    }

    /// Several schedulers per optimizer: the flat list and each one's
    /// optimizer round trip; a checkpoint of the older layout (one state
    /// per optimizer, empty for none) reads into the flat one; owners that
    /// do not fit are refused.
    #[test]
    fn scheduler_owners_round_trip_and_older_files_read() {
        use crate::nn::{read_safetensors, write_safetensors};
        let dir = TempDir::new("ckpt-owners");
        let path = dir.join("owners.ckpt");
        let state = |x: f64| vec![("last_epoch".to_string(), x)];
        let ck = Checkpoint {
            optimizer_states: vec![Vec::new(), Vec::new(), Vec::new()],
            scheduler_states: vec![state(1.0), state(2.0), state(3.0)],
            scheduler_owners: vec![0, 0, 2],
            rng_state: Some(Tensor::from_slice(&[1u8, 2])),
            ..Default::default()
        };
        ck.save(&path).unwrap();
        let back = Checkpoint::load(&path).unwrap();
        assert_eq!(back.scheduler_states, ck.scheduler_states);
        assert_eq!(back.scheduler_owners, ck.scheduler_owners);
        let (tensors, meta) = read_safetensors(&path).unwrap();
        let rewrite = |edit: &dyn Fn(&mut HashMap<String, String>)| {
            let mut m = meta.clone();
            edit(&mut m);
            write_safetensors(&path, &tensors, Some(m)).unwrap();
            Checkpoint::load(&path)
        };
        let older = rewrite(&|m| {
            m.remove("lr_scheduler_owners");
            m.insert("lr_schedulers".into(), json(&[state(1.0), Vec::new(), state(3.0)]));
        })
        .unwrap();
        assert_eq!(older.scheduler_states, vec![state(1.0), state(3.0)]);
        assert_eq!(older.scheduler_owners, vec![0, 2]);
        for owners in ["[0,0]", "[0,0,3]", "[2,0,0]", "[0,0,-1]", "{}"] {
            let e = rewrite(&|m| {
                m.insert("lr_scheduler_owners".into(), owners.into());
            })
            .err()
            .unwrap_or_else(|| panic!("owners {owners} accepted"));
            assert_eq!(e.code, crate::error::ErrorCode::Format, "{owners}: {}", e.message);
        }
    }
}

//! An optimizer's or a scheduler's state in a file of its own, saved and
//! loaded without a trainer (`torch.save(optimizer.state_dict(), path)` and
//! back). Safetensors as fulmen's checkpoints: the optimizer's entries
//! named as a checkpoint's `optimizer_states.0.*`, a scheduler's numbers as
//! 0-dim float64 tensors `lr_scheduler.*` (exact, infinities included),
//! the kind and format in the metadata. Written atomically and read as a
//! regular file only (`crate::fs_safe`).
use super::{LrScheduler, Optimizer};
use crate::checkpoint::FORMAT_VERSION;
use crate::error::{Error, Result};
use crate::nn::{read_safetensors, write_safetensors};
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;

/// Metadata key of an optimizer state file (its value: the format).
const OPTIMIZER_KEY: &str = "fulmen.optimizer_state";
/// Metadata key of a scheduler state file (its value: the format).
const SCHEDULER_KEY: &str = "fulmen.scheduler_state";
/// Metadata key of the optimizer's or scheduler's kind.
const KIND_KEY: &str = "kind";
/// Tensor name prefix of an optimizer's entries (as in a checkpoint).
const OPTIMIZER_PREFIX: &str = "optimizer_states.0.";
/// Tensor name prefix of a scheduler's numbers.
const SCHEDULER_PREFIX: &str = "lr_scheduler.";

/// The metadata of a state file written as `what` ("optimizer" or
/// "scheduler") of `kind`.
fn metadata(key: &str, kind: &str) -> HashMap<String, String> {
    HashMap::from([(key.to_string(), FORMAT_VERSION.to_string()), (KIND_KEY.to_string(), kind.to_string())])
}

/// Reads a state file: its tensors with `prefix` removed, after checking
/// that its metadata says it is a state file (`key`) of `kind`.
fn read(path: &Path, key: &str, what: &str, kind: &str, prefix: &str) -> Result<Vec<(String, Tensor)>> {
    let (tensors, meta) = read_safetensors(path)?;
    let at = path.display();
    match meta.get(key).map(String::as_str) {
        Some(FORMAT_VERSION) => {}
        Some(v) => {
            return Err(Error::format(format!(
                "{at}: {what} state format {v} is not supported (this fulmen reads {FORMAT_VERSION})"
            )))
        }
        None => return Err(Error::format(format!("{at} is a safetensors file but not a fulmen {what} state"))),
    }
    match meta.get(KIND_KEY) {
        Some(k) if k == kind => {}
        Some(k) => {
            return Err(Error::format(format!("{at} holds the state of a {k} {what}, not of this {kind} {what}")))
        }
        None => return Err(Error::format(format!("{at}: the {what} state names no kind"))),
    }
    tensors
        .into_iter()
        .map(|(name, t)| match name.strip_prefix(prefix) {
            Some(k) => Ok((k.to_string(), t)),
            None => Err(Error::format(format!("{at}: unexpected tensor {name:?} in a {what} state"))),
        })
        .collect()
}

/// Saves `opt`'s state (`state_dict`) at `path`.
pub fn save_optimizer(opt: &dyn Optimizer, path: &Path) -> Result<()> {
    let tensors: Vec<(String, Tensor)> =
        opt.state_dict()?.into_iter().map(|(k, t)| (format!("{OPTIMIZER_PREFIX}{k}"), t)).collect();
    write_safetensors(path, &tensors, Some(metadata(OPTIMIZER_KEY, opt.name())))
}

/// Loads into `opt` a state [`save_optimizer`] wrote for an optimizer of
/// its kind and parameter groups; on error `opt` is unchanged.
pub fn load_optimizer(opt: &mut dyn Optimizer, path: &Path) -> Result<()> {
    let state = read(path, OPTIMIZER_KEY, "optimizer", opt.name(), OPTIMIZER_PREFIX)?;
    opt.load_state_dict(&state).map_err(|e| e.context(path.display()))
}

/// Saves `s`'s state (`state_dict`) at `path`.
pub fn save_scheduler(s: &dyn LrScheduler, path: &Path) -> Result<()> {
    let tensors = s
        .state_dict()
        .into_iter()
        .map(|(k, v)| Ok((format!("{SCHEDULER_PREFIX}{k}"), super::state::scalar(v)?)))
        .collect::<Result<Vec<_>>>()?;
    write_safetensors(path, &tensors, Some(metadata(SCHEDULER_KEY, s.name())))
}

/// Loads into `s` a state [`save_scheduler`] wrote for a scheduler of its
/// kind; on error `s` is unchanged. The optimizer's lrs are not written
/// (as torch's `load_state_dict`): the scheduler's next step writes them.
pub fn load_scheduler(s: &mut dyn LrScheduler, path: &Path) -> Result<()> {
    let at = path.display();
    let tensors = read(path, SCHEDULER_KEY, "scheduler", s.name(), SCHEDULER_PREFIX)?;
    let mut state = Vec::with_capacity(tensors.len());
    for (k, t) in tensors {
        if t.numel() != 1 {
            return Err(Error::format(format!("{at}: scheduler entry {k:?} holds {} numbers, not one", t.numel())));
        }
        state.push((k, crate::checkpoint::numbers::one_value(&t)?));
    }
    s.load_state_dict(&state).map_err(|e| e.context(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::optim::test_util::Model;
    use crate::optim::{Adam, AdamOptions, ReduceLrOnPlateau, Sgd, SgdOptions, StepLr};

    /// A fresh folder of the test's own and the state file's path in it.
    fn temp(tag: &str) -> (crate::test_dirs::TempDir, std::path::PathBuf) {
        let dir = crate::test_dirs::TempDir::new(&format!("state-file-{tag}"));
        let path = dir.join("state.safetensors");
        (dir, path)
    }

    #[test]
    fn optimizer_state_round_trips_and_continues_bit_for_bit() {
        let (a, b) = (Model::new(tch::Kind::Float), Model::new(tch::Kind::Float));
        let mut opt_a = Adam::new(a.params(), AdamOptions { lr: 0.05, ..Default::default() }).unwrap();
        a.run(&mut opt_a, 3);
        b.w.detach().copy_(&a.w);
        let (_dir, path) = temp("adam");
        save_optimizer(&opt_a, &path).unwrap();
        let mut opt_b = Adam::new(b.params(), AdamOptions { lr: 0.9, ..Default::default() }).unwrap();
        load_optimizer(&mut opt_b, &path).unwrap();
        assert_eq!(a.run(&mut opt_a, 3), b.run(&mut opt_b, 3));

        // Another kind's state is refused, and changes nothing.
        let mut sgd = Sgd::new(b.params(), SgdOptions { lr: 0.2, ..Default::default() }).unwrap();
        let e = load_optimizer(&mut sgd, &path).unwrap_err();
        assert_eq!(e.code, ErrorCode::Format);
        assert!(e.message.contains("adam"), "{}", e.message);
        assert_eq!(sgd.lr(), 0.2);
        // A scheduler cannot read an optimizer's file.
        let mut s = StepLr::new(&mut sgd, 2, 0.5).unwrap();
        assert_eq!(load_scheduler(&mut s, &path).unwrap_err().code, ErrorCode::Format);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(load_optimizer(&mut opt_b, &path).unwrap_err().code, ErrorCode::Io);
    }

    #[test]
    fn scheduler_state_round_trips_with_infinities() {
        let m = Model::new(tch::Kind::Float);
        let mut opt = Sgd::new(m.params(), SgdOptions { lr: 1.0, ..Default::default() }).unwrap();
        let mut s = ReduceLrOnPlateau::new(&mut opt, Default::default()).unwrap();
        let (_dir, path) = temp("plateau");
        // Fresh: `best` is +inf, which the file keeps exactly.
        save_scheduler(&s, &path).unwrap();
        let fresh = s.state_dict();
        s.step(&mut opt, Some(0.5)).unwrap();
        assert_ne!(s.state_dict(), fresh);
        load_scheduler(&mut s, &path).unwrap();
        assert_eq!(s.state_dict(), fresh);

        let mut step = StepLr::new(&mut opt, 2, 0.5).unwrap();
        for _ in 0..3 {
            step.step(&mut opt, None).unwrap();
        }
        save_scheduler(&step, &path).unwrap();
        let mut other = StepLr::new(&mut opt, 2, 0.5).unwrap();
        load_scheduler(&mut other, &path).unwrap();
        assert_eq!(other.state_dict(), step.state_dict());
        // The wrong kind and a file that is no state are refused.
        assert_eq!(load_scheduler(&mut s, &path).unwrap_err().code, ErrorCode::Format);
        std::fs::write(&path, b"not a state").unwrap();
        assert_eq!(load_scheduler(&mut other, &path).unwrap_err().code, ErrorCode::Format);
        std::fs::remove_file(&path).unwrap();
    }
}

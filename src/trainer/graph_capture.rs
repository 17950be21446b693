//! What graphed training steps ([`super::graphed_step`]) and graphed
//! evaluation steps ([`super::graphed_eval`]) share: the kinds of step a
//! run captures and where each stands (warming up, captured, eager for
//! good), the batch's static input tensors, and a capture that keeps the
//! step's logged tensors and deferred checks to repeat after each replay.
use super::metrics::{CapturedLog, MetricStore};
use super::run::Run;
use crate::error::{Error, ErrorCode, Result};
use crate::strategies::StrategyKind;
use crate::tensor::deferred::{self, CheckKind};
use crate::tensor::device::Device;
use crate::tensor::graph::DeviceGraph;
use tch::{Kind, Tensor};

/// Most kinds of step a run captures, for training and for evaluation
/// each (each graph keeps its own memory).
pub(super) const MAX_GRAPHS: usize = 8;

/// A `cuda_graphs` refusal.
pub(super) fn refused(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::Unsupported, format!("cuda_graphs: {why}"))
}

/// Each batch tensor's shape, dtype and device: what a graph's static
/// inputs fix.
pub(super) type Signature = Vec<(Vec<i64>, Kind, Device)>;

/// The signature of `tensors`.
pub(super) fn signature(tensors: &[Tensor]) -> Result<Signature> {
    tensors.iter().map(|t| Ok((t.size(), t.f_kind()?, Device::of(t)?))).collect()
}

/// Where a kind of step stands.
enum Slot<C> {
    /// Run eagerly this many times so far.
    Warming(usize),
    Captured(Box<C>),
    /// Eager for good (`cuda_graphs_fallback` after a refusal).
    Eager,
}

/// What to do with a step, by its kind.
pub(super) enum Turn {
    /// Run it eagerly (warming up, or eager for good).
    Eager,
    /// Replay the graph captured at this slot.
    Replay(usize),
    /// Capture it at this slot.
    Capture(usize),
    /// It needs a new graph at this slot, and [`MAX_GRAPHS`] exist.
    Full(usize),
}

/// The kinds of step a run met, each with its warm-up count or graph `C`.
pub(super) struct Slots<K, C> {
    warmup: usize,
    fallback: bool,
    /// The key of the fallback's warning (once per run).
    warning: &'static str,
    slots: Vec<(K, Slot<C>)>,
}

impl<K: PartialEq, C> Slots<K, C> {
    /// Slots that capture a kind after `warmup` eager runs (at least 1);
    /// `fallback` turns a refused kind eager instead of failing, with a
    /// warning once per run and `warning` key.
    pub fn new(warmup: i64, fallback: bool, warning: &'static str) -> Self {
        Slots { warmup: warmup.max(1) as usize, fallback, warning, slots: Vec::new() }
    }

    /// What to do with a step of kind `key` (a warm-up run is counted).
    pub fn turn(&mut self, key: K) -> Turn {
        let index = match self.slots.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.slots.push((key, Slot::Warming(0)));
                self.slots.len() - 1
            }
        };
        let captured = self.slots.iter().filter(|(_, s)| matches!(s, Slot::Captured(_))).count();
        match &mut self.slots[index].1 {
            Slot::Eager => Turn::Eager,
            Slot::Warming(n) if *n < self.warmup => {
                *n += 1;
                Turn::Eager
            }
            Slot::Captured(_) => Turn::Replay(index),
            Slot::Warming(_) if captured >= MAX_GRAPHS => Turn::Full(index),
            Slot::Warming(_) => Turn::Capture(index),
        }
    }

    /// The graph captured at `index` (from [`Turn::Replay`]).
    pub fn graph(&self, index: usize) -> Option<&C> {
        match &self.slots.get(index)?.1 {
            Slot::Captured(c) => Some(c),
            _ => None,
        }
    }

    /// Keeps the graph captured at `index`.
    pub fn set_captured(&mut self, index: usize, graph: C) {
        self.slots[index].1 = Slot::Captured(Box::new(graph));
    }

    /// A step that cannot be captured: with `cuda_graphs_fallback` its kind
    /// runs eagerly from now on, with a warning (once per run), and `Ok`;
    /// else `why`.
    pub fn give_up(&mut self, index: usize, run: &mut Run, why: Error) -> Result<()> {
        if !self.fallback {
            return Err(why);
        }
        run.warn_once(
            self.warning,
            &format!("{}; this kind of step runs eagerly from now on (cuda_graphs_fallback)", why.message),
        );
        self.slots[index].1 = Slot::Eager;
        Ok(())
    }

    /// [`Slots::give_up`] after a failed capture: an error of the step that
    /// is not a refusal, or on CUDA one of the capture itself (torch's
    /// generator stays marked as capturing), ends the run anyway.
    pub fn give_up_after(&mut self, index: usize, run: &mut Run, failed: Failed) -> Result<()> {
        let cuda = matches!(run.strategy.root_device(), Device::Cuda(_));
        if failed.error.code != ErrorCode::Unsupported || (failed.in_capture && cuda) {
            return Err(failed.error);
        }
        self.give_up(index, run, failed.error)
    }
}

/// A new tensor holding a copy of `t` (no autograd history).
pub(super) fn copy_tensor(t: &Tensor) -> Result<Tensor> {
    let _guard = tch::no_grad_guard();
    let mut copy = t.f_empty_like()?;
    copy.f_copy_(t)?;
    Ok(copy)
}

/// The tensors a graph reads its batch from.
pub(super) struct StaticInputs(Vec<Tensor>);

impl StaticInputs {
    /// New tensors holding a copy of `batch`.
    pub fn copy_of(batch: &[Tensor]) -> Result<StaticInputs> {
        Ok(StaticInputs(batch.iter().map(copy_tensor).collect::<Result<Vec<_>>>()?))
    }

    /// The tensors.
    pub fn tensors(&self) -> &[Tensor] {
        &self.0
    }

    /// Copies `batch` into the tensors (same signature), under no_grad.
    fn load(&self, batch: &[Tensor]) -> Result<()> {
        for (input, t) in self.0.iter().zip(batch) {
            let mut input = input.shallow_clone();
            input.f_copy_(t)?;
        }
        Ok(())
    }
}

/// A captured step's graph, with what each replay repeats on the host:
/// its deferred checks and its logged tensors.
pub(super) struct Replayable {
    graph: DeviceGraph,
    inputs: StaticInputs,
    /// The deferred checks the step made, deferred again after each replay.
    checks: Vec<(CheckKind, Tensor)>,
    /// The device tensors the step logged, logged again after each replay.
    logs: Vec<CapturedLog>,
}

/// A capture's graph and what its step returned.
pub(super) struct CaptureOut<T> {
    pub replayable: Replayable,
    pub out: T,
}

/// A step that was not captured.
pub(super) struct Failed {
    pub error: Error,
    /// Whether the device's capture itself failed (on CUDA torch's
    /// generator then stays marked as capturing: no eager step may follow).
    pub in_capture: bool,
}

/// Captures `work` (a step on `inputs`, logging into `store`) on the run's
/// device, then `check`s what the run did and what the step returned. Its device tensors logged are
/// kept to log after each replay; a number or CPU tensor logged is
/// refused, since a replay would not log it again. On a failure what the
/// step logged is taken back (the store as it was) and the device's
/// generator put back (on the fake device the step ran), so that an
/// eager run of it logs once and draws what an eager step draws; the
/// caller puts back the rest. An error the step itself returned that is
/// not torch's (the host's own) is passed on as it is: an eager run would
/// fail with it too.
pub(super) fn capture<T>(
    run: &mut Run,
    store: &mut MetricStore,
    inputs: StaticInputs,
    at: &dyn Fn() -> String,
    work: impl FnOnce(&mut Run, &mut MetricStore, &[Tensor]) -> Result<T>,
    check: impl FnOnce(&Run, &T) -> Result<()>,
) -> std::result::Result<CaptureOut<T>, Failed> {
    let device = run.strategy.root_device();
    let logged_before = store.clone();
    let rng = device.rng_state().ok();
    let records = store.records();
    store.begin_capture();
    let captured = DeviceGraph::capture(device, || deferred::collect(|| work(run, store, inputs.tensors())));
    let logs = store.end_capture();
    let result = match captured {
        Err(e) if e.code != ErrorCode::Torch && e.code != ErrorCode::Unsupported => {
            Err(Failed { error: e, in_capture: true })
        }
        Err(e) => {
            let why = if e.message.starts_with(&at()) { e.message } else { format!("{}: {}", at(), e.message) };
            Err(Failed { error: refused(format!("the step could not be captured: {why}")), in_capture: true })
        }
        Ok(_) if store.records() != records => Err(Failed {
            error: refused(format!(
                "{}: the step logged a number (or a CPU tensor) while it was captured, which a replay would not \
                 log again: log a device tensor (fulmen_step_context_log_tensor), which each replay logs anew",
                at()
            )),
            in_capture: false,
        }),
        Ok(c) => check(run, &c.1 .0).map(|()| c).map_err(|error| Failed { error, in_capture: false }),
    };
    match result {
        Ok((graph, (out, checks))) => Ok(CaptureOut { replayable: Replayable { graph, inputs, checks, logs }, out }),
        Err(failed) => {
            *store = logged_before;
            // Best effort: the capture's own error is the one to report.
            if let Some(state) = &rng {
                let _ = device.set_rng_state(state);
            }
            Err(failed)
        }
    }
}

impl Replayable {
    /// Replays the step on `batch`: the batch is copied into the static
    /// inputs, the graph launched (the host does not wait), its checks
    /// deferred and its tensors logged into `store`.
    pub fn replay(&self, batch: &[Tensor], store: &mut MetricStore, at: &dyn Fn() -> String) -> Result<()> {
        // Without autograd: the fake device's replay dispatches its
        // recorded operations again.
        let _guard = tch::no_grad_guard();
        self.inputs.load(batch)?;
        self.graph.replay().map_err(|e| e.context(at()))?;
        for (kind, flag) in &self.checks {
            deferred::defer(*kind, flag)?;
        }
        store.relog(&self.logs).map_err(|e| e.context(at()))
    }
}

/// What any graphed step needs of the run (training or evaluation): one
/// device that captures graphs, no replicas, shards or offloading
/// (`strategy`: the strategy asked for).
pub(super) fn check_one_device(run: &Run, strategy: StrategyKind) -> Result<()> {
    DeviceGraph::supported_on(run.strategy.root_device()).map_err(|e| refused(e.message))?;
    let single = matches!(strategy, StrategyKind::Auto | StrategyKind::SingleDevice);
    if !single || run.strategy.world_size() > 1 || run.strategy.num_devices() > 1 || run.strategy.is_data_parallel() {
        return Err(refused(
            "a graphed step runs on one device (the single_device strategy): DDP's gradient all-reduce, FSDP's \
             shards and DP's replicas are not captured",
        ));
    }
    if run.strategy.offloads_parameters() {
        return Err(refused("parameters offloaded to the host are not captured"));
    }
    Ok(())
}

/// The address of each tensor of the module's model (parameters and
/// buffers; none for a module without one): a graph reads and writes the
/// tensors it captured.
pub(super) fn model_addresses(run: &Run) -> Vec<usize> {
    let Some(model) = run.module.model() else { return Vec::new() };
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    m.visit_tensors(&mut |t| out.push(t.data_ptr() as usize));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_warms_up_then_is_captured_and_replayed() {
        let mut slots: Slots<u32, ()> = Slots::new(2, false, "t");
        assert!(matches!(slots.turn(7), Turn::Eager));
        assert!(matches!(slots.turn(7), Turn::Eager));
        // Another kind counts its own warm-up.
        assert!(matches!(slots.turn(8), Turn::Eager));
        assert!(matches!(slots.turn(7), Turn::Capture(0)));
        // Not captured yet (the capture failed, say): asked again.
        assert!(matches!(slots.turn(7), Turn::Capture(0)));
        slots.set_captured(0, ());
        assert!(matches!(slots.turn(7), Turn::Replay(0)));
        assert!(slots.graph(0).is_some() && slots.graph(1).is_none() && slots.graph(9).is_none());
    }

    #[test]
    fn a_warmup_of_zero_still_runs_one_eager_step() {
        let mut slots: Slots<u32, ()> = Slots::new(0, false, "t");
        assert!(matches!(slots.turn(1), Turn::Eager));
        assert!(matches!(slots.turn(1), Turn::Capture(0)));
    }

    #[test]
    fn kinds_beyond_the_most_graphs_are_full() {
        let mut slots: Slots<usize, ()> = Slots::new(1, true, "t");
        for k in 0..MAX_GRAPHS {
            assert!(matches!(slots.turn(k), Turn::Eager));
            assert!(matches!(slots.turn(k), Turn::Capture(i) if i == k));
            slots.set_captured(k, ());
        }
        assert!(matches!(slots.turn(MAX_GRAPHS), Turn::Eager));
        assert!(matches!(slots.turn(MAX_GRAPHS), Turn::Full(i) if i == MAX_GRAPHS));
        assert!(matches!(slots.turn(0), Turn::Replay(0)));
    }
}

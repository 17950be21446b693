//! Graphed training steps (the trainer option `cuda_graphs`): each kind of
//! step runs eagerly `cuda_graphs_warmup_steps` times (lazy state such as
//! the optimizer's buffers is made then), is captured once in a device
//! graph ([`crate::tensor::graph`]) with the batch copied into static input
//! tensors, and is replayed from then on: the batch is copied into those
//! tensors and the whole step (training_step's device work, backward,
//! clipping, the optimizer's update) runs as one graph launch, with no host
//! code between its kernels.
//!
//! A kind of step is told apart by the batch's shapes, dtypes and devices
//! and by what the loop does with it (whether it steps, starts an
//! accumulation window, the accumulation); each gets its own graph, up to
//! [`graph_capture::MAX_GRAPHS`]. What the host does inside a step (training_step's own
//! code, the hooks between backward and the update) runs at the capture
//! only; its device work is what replays. So a step must leave everything
//! that changes on the device: a log or a value read inside it is refused
//! at the capture, as is anything a replay would not update (optimizers
//! other than the fused ones, several devices), but a device tensor it
//! logs is logged again after each replay ([`super::graph_capture`]). Under 16-mixed the loss
//! scaler's work is device work too (the fused updates take its inf check
//! there), so it replays with the step.
//! Gradients stay allocated (zeroed in place), since the graph writes into
//! them; the learning rate is read on the device
//! ([`crate::optim::graphed`]); the other hyperparameters, the parameters
//! and their gradients are checked before every replay to be those the
//! capture saw.
//!
//! `cuda_graphs_fallback` turns a step that cannot be captured (a failed
//! capture, a kind beyond [`graph_capture::MAX_GRAPHS`]) into an eager one, with a
//! warning, instead of an error; on CUDA a failed capture still ends the
//! run, since torch's CUDA generator stays marked as capturing after it.
use super::automatic::{automatic_step, TrainBatch};
use super::graph_capture::{self, model_addresses, refused, Failed, Replayable, Signature, Slots, StaticInputs, Turn};
use super::loop_progress::OptimizerProgress;
use super::metrics::MetricStore;
use super::run::Run;
use crate::error::{Error, Result};
use tch::Tensor;

/// What tells one captured step from another.
#[derive(Debug, Clone, PartialEq)]
struct StepKey {
    tensors: Signature,
    stepped: bool,
    first_of_window: bool,
    /// Whether its zero_grad counts in the loop's progress.
    zero_grad_counted: bool,
    /// The accumulation the loss is divided by.
    accumulate: i64,
    skip_backward: bool,
}

impl StepKey {
    fn of(run: &Run, batch: &TrainBatch, stepped: bool) -> Result<StepKey> {
        let accumulate = run.state.accumulate_grad_batches.max(1);
        Ok(StepKey {
            tensors: graph_capture::signature(batch.tensors)?,
            stepped,
            first_of_window: batch.first_of_window,
            zero_grad_counted: batch.index % accumulate as usize == 0,
            accumulate,
            skip_backward: run.state.skip_backward,
        })
    }
}

/// A captured step and what its replays need.
struct Captured {
    replayable: Replayable,
    /// What the step returned (its values change with each replay).
    loss: Option<Tensor>,
    /// Per optimizer, the parameters whose step count the capture counted.
    counted: Vec<Vec<usize>>,
    /// What the capture added to the loop's optimizer progress.
    progress: OptimizerProgress,
}

/// What a replay checks is as the capture saw it: each optimizer's
/// parameters and gradients (by address), its state tensors and its
/// hyperparameters other than the learning rate, and the model's
/// parameters and buffers.
#[derive(Debug, PartialEq)]
struct Captures {
    tensors: Vec<Vec<(usize, usize)>>,
    /// Per optimizer, its state tensors' addresses.
    state: Vec<Vec<usize>>,
    hypers: Vec<Vec<Vec<f64>>>,
    model: Vec<usize>,
}

impl Captures {
    fn of(run: &mut Run) -> Captures {
        Captures {
            tensors: run.optimizers.iter().map(|cfg| tensor_addresses(cfg.optimizer.param_groups())).collect(),
            state: run
                .optimizers
                .iter_mut()
                .map(|cfg| cfg.optimizer.graphed().map(|g| g.state_addresses()).unwrap_or_default())
                .collect(),
            hypers: run.optimizers.iter().map(|cfg| hypers_of(cfg.optimizer.param_groups())).collect(),
            model: model_addresses(run),
        }
    }
}

/// The address of each parameter and of its gradient (0: none).
fn tensor_addresses(groups: &[crate::optim::ParamGroup]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for p in groups.iter().flat_map(|g| g.params.iter()) {
        let grad = p.grad();
        out.push((p.data_ptr() as usize, if grad.defined() { grad.data_ptr() as usize } else { 0 }));
    }
    out
}

/// Each group's hyperparameters that a replay takes as captured (all
/// but the learning rate).
fn hypers_of(groups: &[crate::optim::ParamGroup]) -> Vec<Vec<f64>> {
    groups.iter().map(|g| [g.weight_decay, g.momentum].into_iter().chain(g.extras.iter().copied()).collect()).collect()
}

/// The graphed steps of one fit.
pub(crate) struct GraphedSteps {
    slots: Slots<StepKey, Captured>,
    checked: bool,
    /// What the first capture saw (compared before each replay).
    captures: Option<Captures>,
}

impl GraphedSteps {
    /// The graphed steps `opts` ask for (`None` with `cuda_graphs` off).
    pub fn when(opts: &super::TrainerOptions) -> Option<GraphedSteps> {
        opts.cuda_graphs.then(|| GraphedSteps {
            slots: Slots::new(opts.cuda_graphs_warmup_steps, opts.cuda_graphs_fallback, "cuda_graphs_fallback"),
            checked: false,
            captures: None,
        })
    }
}

/// What a graphed training run needs of the run, checked at its first step.
fn check_capturable(run: &mut Run, opts: &super::TrainerOptions) -> Result<()> {
    graph_capture::check_one_device(run, opts.strategy.kind)?;
    // 16-mixed's loss scaler captures with the step: the optimizers
    // (fused, checked below) take its inf check on the device, and the scale
    // is updated there.
    if run.state.manual_optimization {
        return Err(refused(
            "manual optimization steps from the host's own code; graphs capture automatic optimization",
        ));
    }
    if run.opt_hooks.is_some() {
        return Err(refused(
            "the module overrides optimization hooks (optimizer_step, backward, optimizer_zero_grad, \
             configure_gradient_clipping), which run host code in every step",
        ));
    }
    if opts.detect_anomaly {
        return Err(refused("detect_anomaly reads every gradient on the host"));
    }
    for (i, cfg) in run.optimizers.iter_mut().enumerate() {
        let name = cfg.optimizer.name();
        if cfg.optimizer.needs_closure() {
            return Err(refused(format!("optimizer {i} ({name}) re-evaluates the loss from the host")));
        }
        match cfg.optimizer.graphed() {
            Some(g) => g.support().map_err(|e| refused(format!("optimizer {i}: {}", e.message)))?,
            None => return Err(refused(format!("optimizer {i} ({name}) keeps its state on the host"))),
        }
    }
    Ok(())
}

/// Before every step of a graphed run: learning rates changed on the host
/// reach the device.
fn prepare_optimizers(run: &mut Run) -> Result<()> {
    for cfg in run.optimizers.iter_mut() {
        if let Some(mut g) = cfg.optimizer.graphed() {
            g.prepare()?;
        }
    }
    Ok(())
}

fn step_counts(run: &mut Run) -> Vec<Vec<f64>> {
    run.optimizers.iter_mut().map(|cfg| cfg.optimizer.graphed().map(|g| g.step_counts()).unwrap_or_default()).collect()
}

/// One training batch under automatic optimization, graphed when
/// `cuda_graphs` is on (else [`automatic_step`] itself).
pub(super) fn train_step(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
    stepped: bool,
) -> Result<Option<Tensor>> {
    let Some(mut graphs) = run.graphs.take() else {
        return automatic_step(run, opts, store, batch, stepped);
    };
    let out = graphs.step(run, opts, store, batch, stepped);
    run.graphs = Some(graphs);
    out
}

/// The end of a graphed fit: the graphs go, and the optimizers pass their
/// learning rates by value again.
pub(super) fn end(run: &mut Run) {
    run.eval_graphs = None;
    if run.graphs.take().is_some() {
        for cfg in run.optimizers.iter_mut() {
            if let Some(mut g) = cfg.optimizer.graphed() {
                g.end();
            }
        }
    }
}

impl GraphedSteps {
    fn step(
        &mut self,
        run: &mut Run,
        opts: &super::TrainerOptions,
        store: &mut MetricStore,
        batch: &TrainBatch,
        stepped: bool,
    ) -> Result<Option<Tensor>> {
        if !self.checked {
            check_capturable(run, opts)?;
            self.checked = true;
        }
        prepare_optimizers(run)?;
        let index = match self.slots.turn(StepKey::of(run, batch, stepped)?) {
            Turn::Eager => return automatic_step(run, opts, store, batch, stepped),
            Turn::Replay(index) => {
                self.check_unchanged(run, batch)?;
                let captured = self.slots.graph(index).ok_or_else(|| Error::state("cuda_graphs: no graph here"))?;
                return captured.replay(run, store, batch, true);
            }
            Turn::Full(index) => {
                let why = refused(format!(
                    "{} at batch {} needs a new graph, and {} kinds of step (batch shapes, accumulation) are \
                     captured already",
                    (batch.at)(),
                    batch.index,
                    graph_capture::MAX_GRAPHS
                ));
                self.slots.give_up(index, run, why)?;
                return automatic_step(run, opts, store, batch, stepped);
            }
            Turn::Capture(index) => index,
        };
        match capture(run, opts, store, batch, stepped) {
            Ok(c) => {
                if self.captures.is_none() {
                    self.captures = Some(Captures::of(run));
                }
                // The capture did the step's host work; its device work is
                // this first replay.
                let out = c.replay(run, store, batch, false);
                self.slots.set_captured(index, c);
                out
            }
            Err(failed) => {
                self.slots.give_up_after(index, run, failed)?;
                automatic_step(run, opts, store, batch, stepped)
            }
        }
    }

    /// Refuses a replay when what it would read or write is no longer what
    /// the capture saw.
    fn check_unchanged(&self, run: &mut Run, batch: &TrainBatch) -> Result<()> {
        let Some(seen) = &self.captures else { return Ok(()) };
        let now = Captures::of(run);
        if now.tensors != seen.tensors || now.state != seen.state || now.model != seen.model {
            return Err(Error::state(format!(
                "cuda_graphs: {}: a parameter, gradient or buffer of the model or a state tensor of an optimizer \
                 was replaced, added or released (set to none, a state loaded) since the step was captured; the \
                 graph would use the old tensors",
                (batch.at)()
            )));
        }
        if now.hypers != seen.hypers {
            return Err(Error::state(format!(
                "cuda_graphs: {}: an optimizer hyperparameter other than the learning rate (momentum, betas, \
                 weight decay, ...) changed since the step was captured, and a replay uses the captured value; \
                 schedulers may change the learning rate only (cycle_momentum off)",
                (batch.at)()
            )));
        }
        Ok(())
    }
}

/// Captures a step on a copy of `batch` (its static inputs). Refused when
/// the step or a hook inside it logged a number: the graph would not log it
/// again. A failed capture puts back what its step changed on the host.
fn capture(
    run: &mut Run,
    opts: &super::TrainerOptions,
    store: &mut MetricStore,
    batch: &TrainBatch,
    stepped: bool,
) -> std::result::Result<Captured, Failed> {
    let inputs = StaticInputs::copy_of(batch.tensors).map_err(|error| Failed { error, in_capture: false })?;
    let hook_logs = run.state.batch_hook_logs.len();
    let before = run.progress;
    let counts = step_counts(run);
    let work = |run: &mut Run, store: &mut MetricStore, tensors: &[Tensor]| {
        let train = TrainBatch { tensors, index: batch.index, first_of_window: batch.first_of_window, at: batch.at };
        automatic_step(run, opts, store, &train, stepped)
    };
    let hooks_logged_nothing = |run: &Run, _: &Option<Tensor>| {
        if run.state.batch_hook_logs.len() == hook_logs {
            return Ok(());
        }
        Err(refused(format!(
            "{}: a hook logged a number while the step was captured, which a replay would not log again (log from \
             on_train_batch_end, or leave cuda_graphs off)",
            (batch.at)()
        )))
    };
    let captured = match graph_capture::capture(run, store, inputs, batch.at, work, hooks_logged_nothing) {
        Ok(c) => c,
        Err(failed) => {
            // (The store and the generator are back already.) Nothing of
            // the failed capture ran on the device: its host counts go back.
            run.progress = before;
            for (cfg, counts) in run.optimizers.iter_mut().zip(&counts) {
                if let Some(mut g) = cfg.optimizer.graphed() {
                    g.restore_step_counts(counts);
                }
            }
            run.state.batch_hook_logs.truncate(hook_logs);
            // A step that failed between its unscale and the scale update
            // left the scaler mid-iteration.
            run.strategy.precision_mut().forget_iteration();
            return Err(failed);
        }
    };
    let counted = step_counts(run)
        .iter()
        .zip(&counts)
        .map(|(after, before)| {
            after.iter().enumerate().filter(|(i, a)| before.get(*i).is_none_or(|b| *a != b)).map(|(i, _)| i).collect()
        })
        .collect();
    Ok(Captured {
        replayable: captured.replayable,
        loss: captured.out,
        counted,
        progress: run.progress.optimizer.since(&before.optimizer),
    })
}

impl Captured {
    /// Replays the step on `batch`; `count` does the host's part of a step
    /// too (not for the first replay, whose host part was the capture).
    fn replay(
        &self,
        run: &mut Run,
        store: &mut MetricStore,
        batch: &TrainBatch,
        count: bool,
    ) -> Result<Option<Tensor>> {
        self.replayable.replay(batch.tensors, store, batch.at)?;
        if count {
            run.progress.optimizer.advance(&self.progress);
            for (cfg, counted) in run.optimizers.iter_mut().zip(&self.counted) {
                if let Some(mut g) = cfg.optimizer.graphed() {
                    g.replayed(counted);
                }
            }
        }
        Ok(self.loss.as_ref().map(Tensor::shallow_clone))
    }
}

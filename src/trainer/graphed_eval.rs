//! Graphed evaluation steps (the trainer option `cuda_graphs`): each kind
//! of validation or test step (the stage, the loader, the batch's shapes,
//! dtypes and devices) runs eagerly `cuda_graphs_warmup_steps` times, is
//! captured once in a forward-only device graph with the batch copied into
//! static input tensors, and is replayed from then on, in fit's
//! validations and in validate and test runs alike. As in a graphed
//! training step ([`super::graphed_step`]), the step's host code runs at
//! the capture only: its device tensors logged are logged again after each
//! replay, and a number logged or a value read inside it is refused. The
//! step's output is the graph's, overwritten by the next replay. Before
//! each replay the model's parameters and buffers are checked to be those
//! the run's first evaluation capture read (every graph reads the same
//! model). predict_step always runs eagerly.
use super::context::Stage;
use super::eval_loop::{module_step, StepOutputs};
use super::graph_capture::{self, model_addresses, refused, Replayable, Signature, Slots, StaticInputs, Turn};
use super::metrics::MetricStore;
use super::run::Run;
use crate::error::{Error, Result};
use crate::strategies::StrategyKind;
use tch::Tensor;

/// What tells one captured evaluation step from another.
#[derive(Debug, PartialEq)]
struct EvalKey {
    stage: Stage,
    dataloader_idx: Option<usize>,
    tensors: Signature,
}

/// A captured evaluation step.
struct Captured {
    replayable: Replayable,
    /// What the step returned (its values change with each replay).
    output: Option<Tensor>,
}

/// The graphed evaluation steps of one run.
pub(crate) struct GraphedEval {
    slots: Slots<EvalKey, Captured>,
    /// The strategy asked for (checked with the run's devices at the first
    /// step).
    strategy: StrategyKind,
    checked: bool,
    /// The model's tensors the first capture read (compared before each
    /// replay).
    model: Option<Vec<usize>>,
}

impl GraphedEval {
    /// The graphed evaluation steps `opts` ask for (`None` with
    /// `cuda_graphs` off).
    pub fn when(opts: &super::TrainerOptions) -> Option<GraphedEval> {
        opts.cuda_graphs.then(|| GraphedEval {
            slots: Slots::new(opts.cuda_graphs_warmup_steps, opts.cuda_graphs_fallback, "cuda_graphs_fallback_eval"),
            strategy: opts.strategy.kind,
            checked: false,
            model: None,
        })
    }
}

/// One validation or test batch `i`: the module's step ([`module_step`]),
/// graphed when `cuda_graphs` is on.
pub(super) fn eval_step(
    run: &mut Run,
    stage: Stage,
    store: &mut MetricStore,
    batch: &[Tensor],
    i: usize,
    dataloader_idx: Option<usize>,
) -> Result<StepOutputs> {
    let Some(mut graphs) = run.eval_graphs.take() else {
        return module_step(run, stage, store, batch, i, dataloader_idx);
    };
    let out = graphs.step(run, stage, store, batch, i, dataloader_idx);
    run.eval_graphs = Some(graphs);
    out
}

impl GraphedEval {
    fn step(
        &mut self,
        run: &mut Run,
        stage: Stage,
        store: &mut MetricStore,
        batch: &[Tensor],
        i: usize,
        dataloader_idx: Option<usize>,
    ) -> Result<StepOutputs> {
        if !self.checked {
            graph_capture::check_one_device(run, self.strategy)?;
            self.checked = true;
        }
        let (epoch, global_step) = (run.state.epoch, run.state.global_step);
        let name = if stage == Stage::Test { "test_step" } else { "validation_step" };
        let at = || super::eval_loop::batch_at(name, epoch, global_step, i, dataloader_idx);
        let key = EvalKey { stage, dataloader_idx, tensors: graph_capture::signature(batch)? };
        let index = match self.slots.turn(key) {
            Turn::Eager => return module_step(run, stage, store, batch, i, dataloader_idx),
            Turn::Replay(index) => {
                if self.model.as_ref().is_some_and(|seen| *seen != model_addresses(run)) {
                    return Err(Error::state(format!(
                        "cuda_graphs: {}: a parameter or buffer of the model was replaced, added or released since \
                         the step was captured; the graph would read the old tensors",
                        at()
                    )));
                }
                let captured = self.slots.graph(index).ok_or_else(|| Error::state("cuda_graphs: no graph here"))?;
                captured.replayable.replay(batch, store, &at)?;
                return Ok((vec![captured.output.as_ref().map(Tensor::shallow_clone)], Vec::new()));
            }
            Turn::Full(index) => {
                let why = refused(format!(
                    "{} needs a new graph, and {} kinds of evaluation step (stages, loaders, batch shapes) are \
                     captured already",
                    at(),
                    graph_capture::MAX_GRAPHS
                ));
                self.slots.give_up(index, run, why)?;
                return module_step(run, stage, store, batch, i, dataloader_idx);
            }
            Turn::Capture(index) => index,
        };
        let inputs = StaticInputs::copy_of(batch)?;
        let work = |run: &mut Run, store: &mut MetricStore, tensors: &[Tensor]| {
            let (mut outs, _) = module_step(run, stage, store, tensors, i, dataloader_idx)?;
            Ok(outs.pop().flatten())
        };
        match graph_capture::capture(run, store, inputs, &at, work, |_| Ok(())) {
            Ok(c) => {
                if self.model.is_none() {
                    self.model = Some(model_addresses(run));
                }
                // The capture did the step's host work; its device work is
                // this first replay.
                c.replayable.replay(batch, store, &at)?;
                let output = c.out.as_ref().map(Tensor::shallow_clone);
                self.slots.set_captured(index, Captured { replayable: c.replayable, output: c.out });
                Ok((vec![output], Vec::new()))
            }
            Err(failed) => {
                self.slots.give_up_after(index, run, failed)?;
                module_step(run, stage, store, batch, i, dataloader_idx)
            }
        }
    }
}

//! Graphed evaluation steps (the trainer option `cuda_graphs`): each kind
//! of validation, test or predict step (the stage, the loader, the batch's
//! shapes, dtypes and devices) runs eagerly `cuda_graphs_warmup_steps`
//! times, is captured once in a forward-only device graph with the batch
//! copied into static input tensors, and is replayed from then on, in
//! fit's validations and in validate, test and predict runs alike. As in a
//! graphed training step ([`super::graphed_step`]), the step's host code
//! runs at the capture only: its device tensors logged are logged again
//! after each replay, and a number logged or a value read inside it is
//! refused. A validation or test step's output is the graph's, overwritten
//! by the next replay (it goes to the batch-end hooks only); a predict
//! step's tensors (returned and added) are copied after each replay, since
//! predictions are kept; one that sets its prediction as a value or
//! returns tensors on the host is refused (a blocking copy to the host
//! inside the step fails the capture itself, which on CUDA ends the run). Before each replay the model's
//! parameters and buffers are checked to be those the run's first
//! evaluation capture read (every graph reads the same model).
use super::context::{AddedPredictions, Stage};
use super::eval_loop::{module_step, StepOutputs};
use super::graph_capture::{self, model_addresses, refused, Replayable, Signature, Slots, StaticInputs, Turn};
use super::metrics::MetricStore;
use super::run::Run;
use crate::error::{Error, Result};
use crate::strategies::StrategyKind;
use crate::tensor::device::Device;
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
    stage: Stage,
    /// What the step returned (its values change with each replay).
    output: Option<Tensor>,
    /// What a predict step added (the same).
    added: AddedPredictions,
}

impl Captured {
    /// What the last replay gave: a predict step's tensors copied, the
    /// others as the graph holds them.
    fn outputs(&self) -> Result<StepOutputs> {
        let predict = self.stage == Stage::Predict;
        let give = |t: &Tensor| if predict { graph_capture::copy_tensor(t) } else { Ok(t.shallow_clone()) };
        let output = self.output.as_ref().map(give).transpose()?;
        if !predict {
            return Ok((vec![output], Vec::new()));
        }
        let tensors = self.added.tensors.iter().map(give).collect::<Result<Vec<_>>>()?;
        Ok((vec![output], vec![AddedPredictions { tensors, names: self.added.names.clone(), value: None }]))
    }
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

/// One validation, test or predict batch `i`: the module's step
/// ([`module_step`]), graphed when `cuda_graphs` is on.
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
        let at = || super::eval_loop::batch_at(stage.fx_name(), epoch, global_step, i, dataloader_idx);
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
                return captured.outputs();
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
            let (mut outs, mut added) = module_step(run, stage, store, tensors, i, dataloader_idx)?;
            Ok((outs.pop().flatten(), added.pop().unwrap_or_default()))
        };
        // What a replay gives again must be the graph's work: device
        // tensors, not a value the host built or tensors on the host.
        let replayable = |run: &Run, (output, added): &(Option<Tensor>, AddedPredictions)| {
            if added.value.is_some() {
                return Err(refused(format!(
                    "{}: predict_step set its whole prediction as a value, which a replay cannot make again (the \
                     value is kept as the host built it): return or add tensors",
                    at()
                )));
            }
            let device = run.strategy.root_device();
            for t in output.iter().chain(&added.tensors) {
                if Device::of(t)? != device {
                    return Err(refused(format!(
                        "{}: the step's output lies on {}, not on the graph's device {}, and would not change in a \
                         replay: return device tensors (the predictions stay on the device)",
                        at(),
                        Device::of(t)?.name(),
                        device.name()
                    )));
                }
            }
            Ok(())
        };
        match graph_capture::capture(run, store, inputs, &at, work, replayable) {
            Ok(c) => {
                if self.model.is_none() {
                    self.model = Some(model_addresses(run));
                }
                // The capture did the step's host work; its device work is
                // this first replay.
                c.replayable.replay(batch, store, &at)?;
                let (output, added) = c.out;
                let captured = Captured { replayable: c.replayable, stage, output, added };
                let outputs = captured.outputs();
                self.slots.set_captured(index, captured);
                outputs
            }
            Err(failed) => {
                self.slots.give_up_after(index, run, failed)?;
                module_step(run, stage, store, batch, i, dataloader_idx)
            }
        }
    }
}

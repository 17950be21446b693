//! Tensor parallelism inside a layer (torch's `ColwiseParallel` and
//! `RowwiseParallel` from `torch.distributed.tensor.parallel`, Megatron's
//! column- and row-parallel layers): a `Linear` or `Embedding` keeps this
//! rank's part of its weight and computes its part of the result, with the
//! collectives of `rank_ops.rs` where the layouts meet. The strategy side
//! (which layers, the parameters' values) is `src/strategies/model_parallel/`.
use super::rank_ops::{across, chunk_span, RankComm, Step};
use crate::error::{Error, ErrorCode, Result};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use tch::Tensor;

/// How a layer is split across the ranks (torch's `ParallelStyle`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelStyle {
    /// `ColwiseParallel()`: the output features split (a Linear's weight
    /// rows, an Embedding's columns); the input is whole on every rank and
    /// the output stays split along its last dimension.
    Colwise,
    /// `ColwiseParallel(output_layouts=Replicate())`: as `Colwise`, with
    /// the output gathered whole on every rank.
    ColwiseReplicatedOutput,
    /// `RowwiseParallel()`: a Linear's input features split (its weight's
    /// columns; the bias whole); the input comes split along its last
    /// dimension (a `Colwise` layer's output) and the output is summed
    /// whole on every rank.
    Rowwise,
    /// `RowwiseParallel(input_layouts=Replicate())`: as `Rowwise`, the
    /// input whole on every rank (each takes its part); for an Embedding
    /// the table's rows split, each rank looking up the indices it holds.
    RowwiseReplicatedInput,
}

impl ParallelStyle {
    /// torch's spelling, for messages.
    pub fn name(self) -> &'static str {
        match self {
            ParallelStyle::Colwise => "ColwiseParallel()",
            ParallelStyle::ColwiseReplicatedOutput => "ColwiseParallel(output_layouts=Replicate())",
            ParallelStyle::Rowwise => "RowwiseParallel()",
            ParallelStyle::RowwiseReplicatedInput => "RowwiseParallel(input_layouts=Replicate())",
        }
    }

    /// Parses fulmen's spelling of a style: "colwise",
    /// "colwise_replicated_output", "rowwise", "rowwise_replicated_input"
    /// (any case).
    pub fn parse(text: &str) -> Result<ParallelStyle> {
        match text.trim().to_ascii_lowercase().as_str() {
            "colwise" => Ok(ParallelStyle::Colwise),
            "colwise_replicated_output" => Ok(ParallelStyle::ColwiseReplicatedOutput),
            "rowwise" => Ok(ParallelStyle::Rowwise),
            "rowwise_replicated_input" => Ok(ParallelStyle::RowwiseReplicatedInput),
            _ => Err(Error::invalid(format!(
                "{text:?} is not a parallel style (colwise, colwise_replicated_output, rowwise, \
                 rowwise_replicated_input)"
            ))),
        }
    }

    /// Whether the layer's output features are split.
    pub fn is_colwise(self) -> bool {
        matches!(self, ParallelStyle::Colwise | ParallelStyle::ColwiseReplicatedOutput)
    }
}

/// The parameters are this rank's parts.
pub(crate) const SHARDED: u8 = 0;
/// The parameters hold their full values (gathered to be saved or read):
/// the layer computes as a plain one.
pub(crate) const WHOLE: u8 = 1;
/// The tensor-parallel wrapper was freed while the parameters were parts.
pub(crate) const RELEASED: u8 = 2;

/// A layer's place in a tensor-parallel model.
#[derive(Debug, Clone)]
pub(crate) struct TpSlot {
    pub style: ParallelStyle,
    pub comm: Arc<dyn RankComm>,
    /// [`SHARDED`], [`WHOLE`] or [`RELEASED`], shared by the model's layers.
    pub phase: Arc<AtomicU8>,
    /// The full size of the features the layer splits (a Linear's output
    /// or input features, an Embedding's columns or rows); the layer sets
    /// it when it takes the slot.
    pub split_size: i64,
}

impl TpSlot {
    /// Whether the layer computes on its parts (else as a plain layer);
    /// an error after the wrapper was freed with the parameters split.
    pub(crate) fn split(&self, layer: &str) -> Result<bool> {
        match self.phase.load(Ordering::Acquire) {
            SHARDED => Ok(true),
            WHOLE => Ok(false),
            _ => Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "{layer}: this layer holds one rank's part of a tensor-parallel model whose wrapper was freed \
                     (unshard it before freeing the wrapper to keep the full model)"
                ),
            )),
        }
    }

    /// Identity forward, gradients summed over the ranks (an input every
    /// rank holds whole, feeding split weights).
    pub(crate) fn copy_in(&self, x: &Tensor) -> Result<Tensor> {
        across(&self.comm, x, Step::Identity, Step::Sum)
    }

    /// Summed over the ranks, gradients as they are (partial results).
    pub(crate) fn reduce_out(&self, x: &Tensor) -> Result<Tensor> {
        across(&self.comm, x, Step::Sum, Step::Identity)
    }

    /// `x / world` in forward, its gradient as it is: a tensor every rank
    /// holds whole made one of the terms [`TpSlot::reduce_out`] sums
    /// (DTensor's `Replicate` to `Partial`; its gradient is the whole
    /// one, as DTensor's redistribution leaves it).
    pub(crate) fn partition(&self, x: &Tensor) -> Result<Tensor> {
        across(&self.comm, x, Step::Partition, Step::Identity)
    }

    /// Gathered along the last dimension, gradients split again.
    pub(crate) fn gather_last(&self, x: &Tensor) -> Result<Tensor> {
        across(&self.comm, x, Step::GatherLast(self.split_size), Step::SplitLast(self.split_size))
    }

    /// This rank's part of the last dimension, gradients gathered.
    pub(crate) fn split_last(&self, x: &Tensor) -> Result<Tensor> {
        across(&self.comm, x, Step::SplitLast(self.split_size), Step::GatherLast(self.split_size))
    }

    /// This rank's span of the split features: (first, length), as
    /// `torch.chunk` cuts them (the last ranks' parts shorter when the
    /// size does not divide, as DTensor's).
    pub(crate) fn span(&self) -> (i64, i64) {
        chunk_span(self.split_size, self.comm.rank(), self.comm.world_size())
    }

    /// The output of a `Colwise` layer's split result: gathered for
    /// `ColwiseReplicatedOutput`.
    pub(crate) fn colwise_output(&self, y: Tensor) -> Result<Tensor> {
        match self.style {
            ParallelStyle::ColwiseReplicatedOutput => self.gather_last(&y),
            _ => Ok(y),
        }
    }
}

/// The dimension each of a layer's parameters splits along under a style
/// (`None`: every rank holds it whole), by attribute name.
pub(crate) type SplitDims = Vec<(&'static str, Option<i64>)>;

/// `slot` for a layer whose split features number `size`.
pub(crate) fn sized(mut slot: TpSlot, size: i64) -> TpSlot {
    slot.split_size = size;
    slot
}

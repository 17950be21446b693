//! DistributedDataParallel as torch 2.13 does it, once, for the trainer's
//! DDP strategy and for host-owned loops (`fulmen_ddp`): the same
//! collectives in the same order as `torch.nn.parallel.DistributedDataParallel`,
//! so fulmen ranks and Python ranks can train one model together.
//!
//! Construction: the trainable parameters' shapes are checked across ranks,
//! then rank 0's parameters (all of them, frozen ones too) and then its
//! buffers are broadcast, and the Reducer is built with torch's first
//! bucket assignment. Each forward: `prepare_for_forward` (when the
//! backward synchronizes), bucket rebuilding (with grad enabled), then the
//! buffers' broadcast when the previous forward synchronized. After the
//! forward: the Reducer is armed for backward.
use super::group::ProcessGroup;
use super::reducer::{BucketPlan, Reducer};
use crate::error::{Error, ErrorCode, Result};
use crate::nn::Module;
use std::sync::Arc;
use tch::Tensor;

/// torch's default bucket cap (`bucket_cap_mb=None`): 25 MiB.
pub const DEFAULT_BUCKET_CAP_MB: f64 = 25.0;
/// torch's `_DEFAULT_FIRST_BUCKET_BYTES`: 1 MiB.
const DEFAULT_FIRST_BUCKET_BYTES: i64 = 1024 * 1024;

/// DDP's constructor arguments that change what ranks exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct DdpOptions {
    /// `find_unused_parameters`: walk the graph from the outputs each step
    /// and mark parameters it does not reach as ready.
    pub find_unused_parameters: bool,
    /// `bucket_cap_mb`; `None` is torch's default (25 MiB, with a first
    /// bucket of 1 MiB when the graph is searched for unused parameters).
    pub bucket_cap_mb: Option<f64>,
    /// `broadcast_buffers`: rank 0's buffers (BatchNorm statistics) are
    /// copied to every rank at construction and before forwards.
    pub broadcast_buffers: bool,
    /// Lightning's `sync_batchnorm`: every BatchNorm normalises over the
    /// whole job's batch while fitting (torch's SyncBatchNorm).
    pub sync_batchnorm: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            find_unused_parameters: false,
            bucket_cap_mb: None,
            broadcast_buffers: true,
            sync_batchnorm: false,
        }
    }
}

impl DdpOptions {
    /// torch's initial bucket limits (`_BucketCapacityConfig`): one bucket
    /// for everything unless unused parameters are searched for; then the
    /// user's cap, or 1 MiB first and 25 MiB after by default.
    fn bucket_plan(&self) -> Result<BucketPlan> {
        let cap_mb = self.bucket_cap_mb.unwrap_or(DEFAULT_BUCKET_CAP_MB);
        if !(cap_mb.is_finite() && cap_mb > 0.0 && cap_mb * 1024.0 * 1024.0 < i64::MAX as f64) {
            return Err(Error::invalid(format!("DDP: bucket_cap_mb {cap_mb} is not a positive size")));
        }
        let cap = (cap_mb * 1024.0 * 1024.0) as i64;
        let first = if self.bucket_cap_mb.is_none() { DEFAULT_FIRST_BUCKET_BYTES } else { cap };
        let limits = if !self.find_unused_parameters {
            vec![i64::MAX]
        } else if first < cap {
            vec![first, cap]
        } else {
            vec![cap]
        };
        Ok(BucketPlan { limits, cap, first })
    }
}

/// One model wrapped for DDP in a process group.
pub struct Ddp {
    group: Arc<ProcessGroup>,
    reducer: Reducer,
    options: DdpOptions,
    buffers: Vec<Tensor>,
    /// torch's `require_forward_param_sync`: the last forward synchronized,
    /// so the next one broadcasts the buffers.
    require_forward_param_sync: bool,
    /// torch's `require_backward_grad_sync` (false inside `no_sync`).
    require_backward_grad_sync: bool,
}

impl Ddp {
    /// Wraps `model` (already on this rank's device) as torch's
    /// `DistributedDataParallel(model)` does: checks the trainable
    /// parameters' shapes across ranks, copies rank 0's parameters then
    /// buffers to every rank, and hooks gradient averaging. A model built
    /// on the meta device is materialized first, in host memory.
    pub fn new(group: Arc<ProcessGroup>, model: &Module, options: DdpOptions) -> Result<Ddp> {
        let plan = options.bucket_plan()?;
        if model.is_tensor_parallel() {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "DDP of a tensor-parallel model: its split parameters differ on every rank and must not be \
                 averaged; unshard and free its fulmen_tensor_parallel wrapper first",
            ));
        }
        if options.find_unused_parameters && model.checkpoints_any() {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "DDP with find_unused_parameters: the model checkpoints activations, so the search for unused \
                 parameters cannot see the parameters inside a checkpointed module, and their gradients, made when \
                 its forward runs again in backward, would be reduced twice (torch fails the same way with a \
                 reentrant checkpoint); use strategy \"ddp\" or turn activation checkpointing off",
            ));
        }
        // A model built on the meta device gets its values where it is
        // built (a host loop's: in host memory) before rank 0's are sent.
        model.materialize().map_err(|e| e.context("materializing the model built on the meta device"))?;
        let params = model.parameters();
        let trainable: Vec<Tensor> = params.iter().filter(|p| p.requires_grad()).map(Tensor::shallow_clone).collect();
        if trainable.is_empty() {
            return Err(Error::invalid(
                "DDP: the model has no parameter that requires grad (DistributedDataParallel refuses such a module)",
            ));
        }
        let buffers: Vec<Tensor> = model.named_buffers().into_iter().map(|(_, t)| t).collect();
        group.verify_params(&trainable)?;
        let mut state = params;
        if options.broadcast_buffers {
            state.extend(buffers.iter().map(Tensor::shallow_clone));
        }
        group.broadcast_coalesced(&state, 0)?;
        let reducer = Reducer::new(Arc::clone(&group), &trainable, options.find_unused_parameters, &plan)?;
        Ok(Ddp { group, reducer, options, buffers, require_forward_param_sync: true, require_backward_grad_sync: true })
    }

    /// torch's `no_sync()` while `sync` is false: backward passes then only
    /// accumulate gradients locally; the first synchronized backward after
    /// averages the sum.
    pub fn set_sync(&mut self, sync: bool) {
        self.require_backward_grad_sync = sync;
    }

    /// DDP's `_pre_forward`, before running the model; `grad_enabled` as
    /// `torch.is_grad_enabled()` (false for evaluation forwards).
    pub fn pre_forward(&mut self, grad_enabled: bool) -> Result<()> {
        if grad_enabled && self.require_backward_grad_sync {
            self.reducer.prepare_for_forward()?;
        }
        if grad_enabled {
            self.reducer.rebuild_buckets()?;
        }
        if self.require_forward_param_sync && self.options.broadcast_buffers && !self.buffers.is_empty() {
            self.group.broadcast_coalesced(&self.buffers, 0)?;
        }
        Ok(())
    }

    /// Lightning's `prepare_for_backward` before a manual backward of
    /// `loss` (manual optimization may run several per forward): buckets
    /// rebuilt when due, then the backward armed as by `post_forward`.
    pub fn prepare_manual_backward(&mut self, loss: &Tensor) -> Result<()> {
        if self.require_backward_grad_sync {
            self.reducer.rebuild_buckets()?;
        }
        self.post_forward(std::slice::from_ref(loss), true)
    }

    /// DDP's `_post_forward`, with the forward's `outputs` (the loss): arms
    /// the coming backward to average gradients when it synchronizes.
    pub fn post_forward(&mut self, outputs: &[Tensor], grad_enabled: bool) -> Result<()> {
        if grad_enabled && self.require_backward_grad_sync {
            self.require_forward_param_sync = true;
            let searched: Vec<Tensor> = if self.options.find_unused_parameters {
                outputs.iter().map(Tensor::shallow_clone).collect()
            } else {
                Vec::new()
            };
            self.reducer.prepare_for_backward(&searched)
        } else {
            self.require_forward_param_sync = false;
            Ok(())
        }
    }
}

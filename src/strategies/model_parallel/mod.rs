//! Model parallelism (Lightning's `ModelParallelStrategy`): one process
//! per device as for DDP, the layers the plan names split across every
//! rank with tensor parallelism (`tensor_parallel.rs`, torch's
//! `parallelize_module`), every rank reading the same batches; gradient
//! clipping by the whole model's norm; checkpoints written as
//! torch.distributed.checkpoint directories of every rank's parts
//! (Lightning's `save_distributed_checkpoint=True`, read back rank-locally)
//! or gathered whole on every rank and written by rank 0 (resume splits
//! them again); the model whole again after the run.
mod settings;
mod tensor_parallel;

pub use settings::ModelParallelOptions;
pub(crate) use settings::KEYS;
pub use tensor_parallel::TensorParallel;

use super::ddp::{gathered_checkpoint_methods, job_methods_common, join_job};
use super::strategy::Strategy;
use crate::accelerators::Accelerator;
use crate::distributed::{self, DistContext};
use crate::error::{Error, Result};
use crate::nn::ParallelStyle;
use crate::optim::Optimizer;
use crate::tensor::device::Device;
use crate::trainer::device::Placement;
use crate::trainer::{ClipAlgorithm, LightningModule, OptimizerConfig, TrainerOptions};
use std::sync::{Arc, Mutex, MutexGuard};
use tch::Tensor;

/// The model_parallel state of a run.
pub(crate) struct ModelParallelStrategy {
    placement: Placement,
    ctx: Arc<DistContext>,
    plan: Vec<(String, ParallelStyle)>,
    /// Checkpoints as sharded directories, each rank writing its parts.
    save_distributed: bool,
    /// The model while it is split.
    split: Mutex<Option<TensorParallel>>,
    /// The run failed: the group is gone, nothing may be gathered.
    failed: bool,
}

/// Locks `m`, taking the value of a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ModelParallelStrategy {
    /// Joins the distributed job as DDP does and checks the settings
    /// against it.
    pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: &[Device], opts: &TrainerOptions) -> Result<Self> {
        let (mut placement, ctx) = join_job(acc, list, opts, false)?;
        let settings = &opts.strategy.model_parallel;
        settings.check(ctx.world_size(), opts.strategy.num_nodes)?;
        if let Some(scaler) = placement.precision.scaler_mut() {
            // 16-mixed: each rank checks the gradients of its parts; any
            // rank's inf or NaN skips the step on every rank.
            let group = Arc::clone(&ctx.group);
            let sync = move |found_inf: bool| group.reduce_decision(found_inf, false);
            scaler.set_found_inf_sync(Some(crate::precision::grad_scaler::FoundInfSync(Arc::new(sync))));
        }
        Ok(ModelParallelStrategy {
            placement,
            ctx,
            plan: settings.plan.clone(),
            save_distributed: settings.save_distributed_checkpoint,
            split: Mutex::new(None),
            failed: false,
        })
    }

    /// The split model, locked (`None` before wrapping and after the run).
    fn split(&self) -> MutexGuard<'_, Option<TensorParallel>> {
        lock(&self.split)
    }

    /// Refuses to gather after the run failed.
    fn check_alive(&self) -> Result<()> {
        if self.failed {
            return Err(Error::state(
                "the model_parallel run failed and its process group is gone: the model holds this rank's parts and \
                 cannot be gathered into a checkpoint",
            ));
        }
        Ok(())
    }

    /// Runs `f` on the split model (nothing before wrapping).
    fn with_split(&self, f: impl FnOnce(&mut TensorParallel) -> Result<()>) -> Result<()> {
        self.split().as_mut().map_or(Ok(()), f)
    }

    /// The split parameters and where this rank's parts lie, as a sharded
    /// checkpoint needs them (`None` while the model is not split, or is
    /// gathered whole: a save is then gathered, a read whole).
    fn shards(&self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        let Some(tp) = self.split().as_ref().and_then(|tp| tp.shards()) else { return Ok(None) };
        Ok(Some(crate::checkpoint::dcp::Sharding {
            group: Arc::clone(&self.ctx.group),
            params: tp,
            model_key: "state_dict",
            shard_rank: self.ctx.group.rank(),
            writes_shards: true,
        }))
    }

    /// The model whole again and let go (a collective unless it is whole).
    fn unwrap(&self) -> Result<()> {
        if self.failed {
            return Ok(());
        }
        let Some(mut tp) = self.split().take() else { return Ok(()) };
        tp.gather_params(false)
    }
}

impl Strategy for ModelParallelStrategy {
    job_methods_common!();

    /// Every rank reads the whole loader: the ranks of a tensor-parallel
    /// group compute on the same batches (one data-parallel replica).
    fn shard<'a>(&self, source: &'a dyn crate::trainer::BatchSource, _use_sampler: bool) -> super::Sharded<'a> {
        super::Sharded::Borrowed(source)
    }

    /// Splits the model on the device for every run (a model split by a
    /// previous run is made whole first).
    fn wrap_model(&mut self, module: &dyn LightningModule, _training: bool) -> Result<()> {
        let Some(model) = module.model() else {
            return Err(Error::state(
                "model_parallel needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        self.unwrap()?;
        let tp = TensorParallel::new(Arc::clone(&self.ctx), model, &self.plan)
            .map_err(|e| e.context("splitting the model (model_parallel)"))?;
        *self.split() = Some(tp);
        Ok(())
    }

    /// By value: each part's entries; by norm: the norm over the whole
    /// model, as torch's `clip_grad_norm_` on DTensors.
    fn clip_gradients(&mut self, configs: &mut [OptimizerConfig], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        let params: Vec<Tensor> = configs.iter().flat_map(|c| c.optimizer.param_tensors()).collect();
        self.clip_params(&params, value, algorithm)
    }

    fn clip_params(&self, params: &[Tensor], value: f64, algorithm: ClipAlgorithm) -> Result<()> {
        match (algorithm, self.split().as_ref()) {
            (ClipAlgorithm::Norm, Some(tp)) => tp.clip_norm(params, value).map(drop),
            _ => self.placement.precision.clip_params(params, value, algorithm),
        }
    }

    fn closure_refusal(&self) -> Option<&'static str> {
        Some(
            "an optimizer that re-evaluates the loss in its step does not run under strategy \"model_parallel\" \
             (each rank holds a part of the split parameters): use ddp or one device",
        )
    }

    gathered_checkpoint_methods!();

    fn unshard_params(&mut self) -> Result<()> {
        self.check_alive()?;
        self.with_split(|tp| tp.gather_params(true))
    }

    fn reshard_params(&mut self, configs: &mut [OptimizerConfig], restored: bool) -> Result<()> {
        self.with_split(|tp| {
            tp.cut_params(restored)?;
            if restored {
                for c in configs.iter_mut() {
                    tp.cut_optimizer_state(c.optimizer.as_mut())?;
                }
            }
            Ok(())
        })
    }

    /// With `save_distributed_checkpoint`: a sharded directory, every rank
    /// its parts. After the fit (the model whole again) a checkpoint is
    /// one file, as with it off.
    fn sharded_checkpoint(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        if !self.save_distributed {
            return Ok(None);
        }
        self.shards()
    }

    /// A sharded directory is read rank-locally whichever way this run
    /// saves: each rank reads its parts only.
    fn local_shards(&mut self) -> Result<Option<crate::checkpoint::dcp::Sharding>> {
        self.shards()
    }

    fn optimizer_state_for_checkpoint(&self, optimizer: &dyn Optimizer) -> Result<Vec<(String, Tensor)>> {
        match self.split().as_ref() {
            Some(tp) => tp.full_optimizer_state(optimizer),
            None => optimizer.state_dict(),
        }
    }

    /// Each optimizer's state gathered into the full shapes and loaded back
    /// once the model is whole ([`Strategy::teardown`] follows).
    fn teardown_optimizers(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.check_alive()?;
        let Some(mut tp) = self.split().take() else { return Ok(()) };
        let mut opts: Vec<&mut dyn Optimizer> = configs.iter_mut().map(|c| c.optimizer.as_mut() as _).collect();
        tp.unshard(&mut opts)
    }

    fn teardown(&self, module: &dyn LightningModule) -> Result<()> {
        let unwrapped = self.unwrap();
        let torn = self.placement.teardown(module);
        unwrapped.and(torn)
    }

    fn fail(&mut self, e: Error) -> Error {
        let e = self.ctx.fail(e);
        self.failed = true;
        // The group is broken: the wrapper goes without gathering, and the
        // split layers refuse to run.
        drop(self.split().take());
        distributed::abort();
        e
    }
}

//! XLA (Lightning's `XLAStrategy`): one process per XLA device, joined and
//! launched as for DDP. As Lightning's, the model is not wrapped: rank 0's
//! parameters and buffers are copied to every rank when a fit starts, and
//! the gradients are averaged over the ranks after backward, before
//! `on_before_optimizer_step` and clipping see them (torch_xla's
//! `xm.reduce_gradients` in Lightning's `XLAPrecision`).
//!
//! The gradients are averaged one flat buffer per dtype. Where XLA's own
//! collectives reach every rank (TPUs from v4 on: one chip per process),
//! the average joins the step's graph, as `xm.reduce_gradients` does
//! (`accelerators::xla_collectives`). Elsewhere (PJRT's CPU device, where
//! every process is a PJRT job of its own; TPU v2 and v3) it goes through
//! the job's gloo group on host copies, as does the one broadcast of the
//! parameters: c10d cannot reduce XLA tensors.
use super::ddp::{job_methods, join_job};
use super::strategy::Strategy;
use crate::accelerators::{xla_collectives, Accelerator};
use crate::distributed::{self, DistContext, ReduceOp};
use crate::error::{Error, Result};
use crate::tensor::device::{self as devices, Device};
use crate::trainer::device::Placement;
use crate::trainer::{LightningModule, OptimizerConfig, TrainerOptions};
use std::sync::Arc;
use tch::{Kind, Tensor};

/// Refuses `strategy="xla"` (or `"single_xla"`, named `strategy`) on an
/// accelerator other than xla (checked before `devices` picks a strategy).
pub(crate) fn check_accelerator(acc: &dyn Accelerator, strategy: &str) -> Result<()> {
    if acc.name() != "xla" {
        return Err(Error::invalid(format!(
            "strategy {strategy:?} runs on the xla accelerator, not {:?}: set accelerator=\"xla\" (or \"tpu\")",
            acc.name()
        )));
    }
    Ok(())
}

/// The XLA strategy's state: the job, the parameters (their TensorImpls)
/// whose gradients were averaged since the last backward, and whether
/// gradients are averaged in XLA's graph (decided at the first average).
pub(crate) struct XlaStrategy {
    placement: Placement,
    ctx: Arc<DistContext>,
    reduced: std::collections::HashSet<usize>,
    in_graph: Option<bool>,
}

/// The XLA strategy over `list`: one rank per device, `list[LOCAL_RANK]`.
pub(crate) fn connect(acc: Arc<dyn Accelerator>, list: &[Device], opts: &TrainerOptions) -> Result<XlaStrategy> {
    // On TPUs each process sees only its own chip, as xla:0 (the
    // topology variables the backend's start sets, torch_xla's xmp.spawn's).
    let per_process: Vec<Device>;
    let list = if crate::accelerators::xla_runtime::pjrt_is_tpu() && list.len() > 1 {
        crate::accelerators::xla_runtime::plan_tpu_processes(list.len(), opts.strategy.num_nodes);
        per_process = vec![Device::new(devices::DeviceType::Xla, 0); list.len()];
        &per_process
    } else {
        list
    };
    let (placement, ctx) = join_job(acc, list, opts, true)?;
    Ok(XlaStrategy { placement, ctx, reduced: Default::default(), in_graph: None })
}

/// `tensors`, each tensor once (by TensorImpl: a parameter in two
/// optimizers or groups, a tied parameter's names).
fn distinct<'a>(tensors: impl Iterator<Item = &'a Tensor>) -> Result<Vec<Tensor>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for t in tensors {
        if seen.insert(devices::impl_identity(t)?) {
            out.push(t.shallow_clone());
        }
    }
    Ok(out)
}

/// Applies `op` to `tensors` (on `device`) one flat buffer per dtype,
/// copied back into each tensor after: on the device, or `on_host` through
/// a copy on the CPU.
fn by_flat_buffer(tensors: &[Tensor], device: Device, on_host: bool, op: &dyn Fn(&Tensor) -> Result<()>) -> Result<()> {
    let mut kinds: Vec<Kind> = Vec::new();
    for t in tensors {
        let k = t.f_kind()?;
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    tch::no_grad(|| {
        for kind in kinds {
            let group: Vec<&Tensor> = tensors.iter().filter(|t| t.kind() == kind).collect();
            let flat = Tensor::f_cat(&group.iter().map(|t| t.reshape([-1])).collect::<Vec<_>>(), 0)?;
            let back = if on_host {
                let host = devices::to_device(&flat, Device::Cpu, false)?;
                op(&host)?;
                devices::to_device(&host, device, false)?
            } else {
                op(&flat)?;
                flat
            };
            let mut at = 0i64;
            for t in group {
                let n = t.numel() as i64;
                t.shallow_clone().f_copy_(&back.f_narrow(0, at, n)?.f_view_as(t)?)?;
                at += n;
            }
        }
        Ok(())
    })
}

impl XlaStrategy {
    /// Whether gradients are averaged in XLA's graph: where XLA's
    /// collectives reach every rank, on every rank (the ranks agree once,
    /// through gloo, so that all of them take the same path).
    fn averages_in_graph(&mut self) -> Result<bool> {
        if let Some(decided) = self.in_graph {
            return Ok(decided);
        }
        let world = self.ctx.world_size();
        // A rank that cannot tell (its backend failed) votes for gloo
        // rather than leave the others waiting in the vote.
        let here = matches!(xla_collectives::unusable_reason(world), Ok(None));
        let mut everywhere = [f64::from(u8::from(here))];
        self.ctx.group.reduce_values(&mut everywhere, ReduceOp::Min).map_err(|e| self.ctx.explain(e))?;
        let decided = everywhere[0] > 0.0;
        self.in_graph = Some(decided);
        Ok(decided)
    }

    /// Averages the gradients of `configs`' parameters over the ranks,
    /// each once after a backward (the first of unscaling, clipping and
    /// stepping does it; a later backward makes them due again). A
    /// parameter without a gradient here but with one on another rank gets
    /// zeros first, as DDP's reducer gives it. Every rank makes the same
    /// calls in the same order, so the collectives match.
    fn reduce_gradients(&mut self, configs: &[OptimizerConfig]) -> Result<()> {
        if self.ctx.world_size() <= 1 {
            return Ok(());
        }
        let mut params = Vec::new();
        let all = configs.iter().flat_map(|c| c.optimizer.param_groups()).flat_map(|g| g.params.iter());
        for p in distinct(all)? {
            if self.reduced.insert(devices::impl_identity(&p)?) {
                params.push(p);
            }
        }
        if params.is_empty() {
            return Ok(());
        }
        let defined: Vec<f64> = params.iter().map(|p| f64::from(u8::from(p.grad().defined()))).collect();
        let mut anywhere = defined.clone();
        self.ctx.group.reduce_values(&mut anywhere, ReduceOp::Max).map_err(|e| self.ctx.explain(e))?;
        let mut grads = Vec::new();
        for (p, (&here, &somewhere)) in params.iter().zip(defined.iter().zip(&anywhere)) {
            if somewhere == 0.0 {
                continue;
            }
            if here == 0.0 {
                let zeros = p.f_zeros_like()?;
                crate::tensor::grad::set_grad(p, Some(&zeros))?;
            }
            grads.push(p.grad());
        }
        let device = self.placement.device;
        let done = if self.averages_in_graph()? {
            let world = self.ctx.world_size();
            by_flat_buffer(&grads, device, false, &|flat| xla_collectives::all_reduce(flat, ReduceOp::Mean, world))
        } else {
            let group = Arc::clone(&self.ctx.group);
            by_flat_buffer(&grads, device, true, &|host| group.all_reduce(&[host.shallow_clone()], ReduceOp::Mean))
        };
        done.map_err(|e| self.ctx.explain(e))
    }
}

impl Strategy for XlaStrategy {
    job_methods!();

    fn closure_refusal(&self) -> Option<&'static str> {
        Some("the xla strategy averages gradients once per step, before the optimizer steps")
    }

    /// For fitting, every rank starts from rank 0's parameters and buffers
    /// (torch_xla's `broadcast_master_param`).
    fn wrap_model(&mut self, module: &dyn LightningModule, training: bool) -> Result<()> {
        self.reduced.clear();
        if !training || self.ctx.world_size() <= 1 {
            return Ok(());
        }
        let Some(model) = module.model() else {
            return Err(Error::state(
                "xla needs a LightningModule with a model (pass one to fulmen_lightning_module_new)",
            ));
        };
        let state = distinct(model.lock().unwrap_or_else(|p| p.into_inner()).state_dict().iter().map(|(_, t)| t))?;
        let group = Arc::clone(&self.ctx.group);
        by_flat_buffer(&state, self.placement.device, true, &|host| group.broadcast(&[host.shallow_clone()], 0))
            .map_err(|e| self.ctx.explain(e))
    }

    fn unscale_gradients(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.reduce_gradients(configs)?;
        self.placement.precision.unscale_gradients(&super::strategy::optimizers_of(configs))
    }

    fn unscale_gradients_once(&mut self, configs: &mut [OptimizerConfig]) -> Result<()> {
        self.reduce_gradients(configs)?;
        self.placement.precision.unscale_gradients_once(&super::strategy::optimizers_of(configs))
    }

    fn optimizer_step(&mut self, configs: &mut [OptimizerConfig]) -> Result<Vec<crate::precision::StepMade>> {
        self.reduce_gradients(configs)?;
        self.placement.precision.optimizer_step(&mut super::strategy::optimizers_of(configs))
    }

    /// A batch's forward: its backward makes every gradient due again.
    fn pre_forward(&mut self, _sync: bool) -> Result<()> {
        self.reduced.clear();
        Ok(())
    }

    /// A manual backward changes the gradients: they are due again.
    fn prepare_manual_backward(&mut self, _loss: &Tensor) -> Result<()> {
        self.reduced.clear();
        Ok(())
    }

    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        self.reduced.clear();
        self.placement.precision.backward(loss)
    }

    fn fail(&mut self, e: Error) -> Error {
        let e = self.ctx.fail(e);
        distributed::abort();
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_buffer_per_dtype_reaches_every_tensor_on_the_device_or_through_the_host() {
        let a = Tensor::from_slice(&[1.0f32, 2.0]).reshape([2, 1]);
        let b = Tensor::from_slice(&[3i64, 4, 5]);
        let c = Tensor::from_slice(&[6.0f32]);
        let seen = std::sync::Mutex::new(Vec::new());
        for on_host in [false, true] {
            seen.lock().unwrap().clear();
            let double = |flat: &Tensor| -> Result<()> {
                seen.lock().unwrap().push((flat.kind(), flat.size()));
                let _ = flat.shallow_clone().f_mul_scalar_(2)?;
                Ok(())
            };
            by_flat_buffer(&[a.shallow_clone(), b.shallow_clone(), c.shallow_clone()], Device::Cpu, on_host, &double)
                .unwrap();
            assert_eq!(*seen.lock().unwrap(), vec![(Kind::Float, vec![3]), (Kind::Int64, vec![3])]);
        }
        assert_eq!(Vec::<f32>::try_from(&a.reshape([-1])).unwrap(), [4.0, 8.0]);
        assert_eq!(Vec::<i64>::try_from(&b).unwrap(), [12, 16, 20]);
        assert_eq!(Vec::<f32>::try_from(&c).unwrap(), [24.0]);
    }
}

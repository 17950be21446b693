//! Recomputing BatchNorm statistics, as torch's `swa_utils.update_bn` and
//! Lightning's StochasticWeightAveraging do after averaging weights: the
//! running statistics start over as a cumulative average of the batches
//! that follow, then the momenta come back; and BatchNorms made
//! SyncBatchNorms for a distributed fit.
use super::layers::sync_batch_norm::RankSum;
use super::module::{Module, Node};
use crate::error::Result;
use std::sync::Arc;

impl Module {
    /// Makes every BatchNorm of the tree a SyncBatchNorm over the ranks
    /// `sum` adds over (`None`: plain BatchNorms again).
    pub(crate) fn set_batch_norm_sync(&mut self, sum: Option<Arc<dyn RankSum>>) {
        let _ = self.walk_flat_mut("", &mut |_, m| {
            if let Node::Layer(l) = &mut m.node {
                l.set_rank_sum(sum.clone());
            }
            Ok(())
        });
    }

    /// Whether any module of the tree is one of torch's `_BatchNorm`s.
    pub(crate) fn has_batch_norm(&mut self) -> Result<bool> {
        let mut found = false;
        self.walk_flat_mut("", &mut |_, m| {
            found |= m.is_batch_norm();
            Ok(())
        })?;
        Ok(found)
    }

    /// Every BatchNorm's running mean to 0, variance to 1 and batch count
    /// to 0, and its momentum to `None` (a cumulative average); returns
    /// the momenta they had, in `modules()` order.
    pub(crate) fn reset_batch_norms(&mut self) -> Result<Vec<Option<f64>>> {
        let mut momenta = Vec::new();
        let _guard = tch::no_grad_guard();
        self.walk_flat_mut("", &mut |_, m| {
            let Node::Layer(l) = &mut m.node else { return Ok(()) };
            if l.type_name() != "BatchNorm" {
                return Ok(());
            }
            for (name, t) in l.buffers() {
                let mut t = t.shallow_clone();
                match name {
                    "running_var" => drop(t.f_fill_(1.0)?),
                    _ => drop(t.f_zero_()?),
                }
            }
            momenta.extend(l.swap_momentum(None));
            Ok(())
        })?;
        Ok(momenta)
    }

    /// Gives the BatchNorms back the momenta [`Module::reset_batch_norms`]
    /// returned (in the same order; extra entries are ignored).
    pub(crate) fn restore_batch_norm_momenta(&mut self, momenta: &[Option<f64>]) -> Result<()> {
        let mut next = momenta.iter();
        self.walk_flat_mut("", &mut |_, m| {
            if let Node::Layer(l) = &mut m.node {
                if l.type_name() == "BatchNorm" {
                    if let Some(v) = next.next() {
                        l.swap_momentum(*v);
                    }
                }
            }
            Ok(())
        })
    }
}

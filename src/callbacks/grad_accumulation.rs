//! GradientAccumulationScheduler: the number of batches whose gradients
//! add up before each optimizer step, changed at chosen epochs (Lightning's
//! callback of that name).
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::BTreeMap;

/// The most entries a schedule takes.
pub const MAX_SCHEDULE: usize = 1024;

/// The GradientAccumulationScheduler callback.
#[derive(Debug, Clone)]
pub struct GradientAccumulationScheduler {
    /// Epoch -> accumulation factor from that epoch on (epoch 0 included).
    scheduling: BTreeMap<i64, i64>,
}

impl GradientAccumulationScheduler {
    /// `scheduling`: (epoch, factor) pairs; epochs >= 0 and distinct,
    /// factors >= 1. Epoch 0 gets factor 1 unless given, as Lightning.
    pub fn new(scheduling: &[(i64, i64)]) -> Result<Self> {
        if scheduling.is_empty() {
            return Err(Error::invalid("GradientAccumulationScheduler: the schedule is empty"));
        }
        if scheduling.len() > MAX_SCHEDULE {
            return Err(Error::invalid(format!(
                "GradientAccumulationScheduler: {} entries, at most {MAX_SCHEDULE}",
                scheduling.len()
            )));
        }
        let mut map = BTreeMap::new();
        for &(epoch, factor) in scheduling {
            if epoch < 0 {
                return Err(Error::invalid(format!("GradientAccumulationScheduler: epoch {epoch} is negative")));
            }
            if factor < 1 {
                return Err(Error::invalid(format!(
                    "GradientAccumulationScheduler: the factor {factor} of epoch {epoch} is below 1"
                )));
            }
            if map.insert(epoch, factor).is_some() {
                return Err(Error::invalid(format!("GradientAccumulationScheduler: epoch {epoch} given twice")));
            }
        }
        map.entry(0).or_insert(1);
        Ok(GradientAccumulationScheduler { scheduling: map })
    }

    /// The factor for `epoch`.
    pub fn factor(&self, epoch: i64) -> i64 {
        self.scheduling.range(..=epoch).next_back().map_or(1, |(_, f)| *f)
    }
}

impl Callback for GradientAccumulationScheduler {
    fn name(&self) -> String {
        "GradientAccumulationScheduler".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::TrainStart if ctx.state.manual_optimization => Err(Error::invalid(
                "a GradientAccumulationScheduler does not work with manual optimization: accumulate in the \
                 training_step (as Lightning)",
            )),
            Hook::TrainStart if ctx.state.accumulate_grad_batches != 1 => Err(Error::invalid(format!(
                "accumulate_grad_batches is {} in the trainer options and a GradientAccumulationScheduler is \
                 added: keep one of them",
                ctx.state.accumulate_grad_batches
            ))),
            Hook::TrainEpochStart => {
                ctx.state.accumulate_grad_batches = self.factor(ctx.state.epoch);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_by_epoch_as_lightning() {
        let s = GradientAccumulationScheduler::new(&[(4, 2), (8, 4)]).unwrap();
        let got: Vec<i64> = (0..10).map(|e| s.factor(e)).collect();
        assert_eq!(got, [1, 1, 1, 1, 2, 2, 2, 2, 4, 4]);
        let s = GradientAccumulationScheduler::new(&[(0, 3), (2, 1)]).unwrap();
        assert_eq!((s.factor(0), s.factor(1), s.factor(5)), (3, 3, 1));
        for bad in [&[][..], &[(-1, 2)], &[(1, 0)], &[(1, 2), (1, 3)]] {
            assert!(GradientAccumulationScheduler::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn refused_with_manual_optimization_or_a_trainer_factor() {
        let mut s = GradientAccumulationScheduler::new(&[(3, 2)]).unwrap();
        let mut state = crate::trainer::hooks::TrainerState {
            accumulate_grad_batches: 1,
            manual_optimization: true,
            ..Default::default()
        };
        let err = s.on_hook(&mut HookContext::new(Hook::TrainStart, "fit", &mut state)).unwrap_err();
        assert!(err.message.contains("manual optimization"), "{err:?}");
        state.manual_optimization = false;
        state.accumulate_grad_batches = 2;
        assert!(s.on_hook(&mut HookContext::new(Hook::TrainStart, "fit", &mut state)).is_err());
        state.accumulate_grad_batches = 1;
        s.on_hook(&mut HookContext::new(Hook::TrainStart, "fit", &mut state)).unwrap();
        state.epoch = 4;
        s.on_hook(&mut HookContext::new(Hook::TrainEpochStart, "fit", &mut state)).unwrap();
        assert_eq!(state.accumulate_grad_batches, 2);
    }
}

//! `torch.optim.swa_utils.SWALR`: anneals every group's lr to its SWA lr
//! over `anneal_epochs` steps (cosine or linear), then holds it.
use super::{AnnealStrategy, Base, Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// The SWA scheduler. Each step moves the lr from the value the previous
/// step's fraction implies towards the group's SWA lr, so the lr it
/// starts from is whatever the optimizer holds when it is built.
#[derive(Debug, Clone)]
pub struct SwaLr {
    base: Base,
    /// Each group's SWA lr (torch keeps it as the group's `swa_lr`).
    swa_lrs: Vec<f64>,
    anneal_epochs: i64,
    strategy: AnnealStrategy,
    /// torch's `_step_count`: steps taken, the constructor's included.
    step_count: i64,
}

/// The most annealing epochs accepted (any real schedule is far below).
const MAX_ANNEAL_EPOCHS: i64 = 1 << 40;

impl SwaLr {
    /// torch's `SWALR(optimizer, swa_lr, anneal_epochs, anneal_strategy,
    /// last_epoch)`: `swa_lrs` holds one lr for every group, or one for
    /// all. With `last_epoch` -1 the groups' `initial_lr` is recorded where
    /// unset; otherwise every group must have one already (as torch
    /// requires when resuming). The constructor's step leaves the lr as it
    /// is unless `anneal_epochs` is 0.
    pub fn new(
        opt: &mut dyn Optimizer,
        swa_lrs: &[f64],
        anneal_epochs: i64,
        strategy: AnnealStrategy,
        last_epoch: i64,
    ) -> Result<Self> {
        let groups = opt.param_groups().len();
        let swa_lrs = match swa_lrs.len() {
            1 => vec![swa_lrs[0]; groups],
            n if n == groups => swa_lrs.to_vec(),
            n => {
                return Err(Error::invalid(format!(
                    "SWALR: {n} swa_lrs for {groups} param groups (give one, or one per group)"
                )))
            }
        };
        if let Some(bad) = swa_lrs.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
            return Err(Error::invalid(format!("SWALR: swa_lr {bad} is not a finite lr >= 0")));
        }
        if !(0..=MAX_ANNEAL_EPOCHS).contains(&anneal_epochs) {
            return Err(Error::invalid(format!("SWALR: anneal_epochs must be >= 0, got {anneal_epochs}")));
        }
        if last_epoch < -1 {
            return Err(Error::invalid(format!("SWALR: last_epoch must be >= -1, got {last_epoch}")));
        }
        let mut base = if last_epoch == -1 {
            Base::attach(opt)
        } else {
            let initial: Option<Vec<f64>> = opt.param_groups().iter().map(|g| g.initial_lr).collect();
            let base_lrs = initial.ok_or_else(|| {
                Error::invalid("SWALR: a last_epoch other than -1 needs every param group's initial_lr set")
            })?;
            Base { last_epoch, base_lrs, last_lr: Vec::new() }
        };
        base.last_epoch = last_epoch;
        let mut s = SwaLr { base, swa_lrs, anneal_epochs, strategy, step_count: 0 };
        s.advance(opt)?;
        Ok(s)
    }

    /// torch's `anneal_func`.
    fn anneal(&self, t: f64) -> f64 {
        match self.strategy {
            AnnealStrategy::Cos => (1.0 - (std::f64::consts::PI * t).cos()) / 2.0,
            AnnealStrategy::Linear => t,
        }
    }

    /// torch's `step()`: the counters move on and `get_lr` is written.
    fn advance(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        self.base.check_groups_exact(opt, "swa_lr")?;
        let mut step = self.step_count;
        if self.anneal_epochs == 0 {
            step = step.max(1);
        }
        let span = self.anneal_epochs.max(1) as f64;
        let prev_alpha = self.anneal((((step - 1) as f64) / span).clamp(0.0, 1.0));
        let alpha = self.anneal(((step as f64) / span).clamp(0.0, 1.0));
        let lrs = opt
            .param_groups()
            .iter()
            .zip(&self.swa_lrs)
            .map(|(g, swa)| {
                let prev = if prev_alpha == 1.0 { *swa } else { (g.lr - prev_alpha * swa) / (1.0 - prev_alpha) };
                swa * alpha + prev * (1.0 - alpha)
            })
            .collect();
        self.step_count += 1;
        self.base.last_epoch += 1;
        self.base.apply(opt, lrs);
        Ok(())
    }
}

impl LrScheduler for SwaLr {
    fn name(&self) -> &'static str {
        "swa_lr"
    }

    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        self.advance(opt)
    }

    fn fresh(&self) -> bool {
        self.step_count <= 1
    }

    fn last_lr(&self) -> Vec<f64> {
        self.base.last_lr.clone()
    }

    fn state_dict(&self) -> Vec<(String, f64)> {
        let mut out = self.base.state();
        out.push(("step_count".to_string(), self.step_count as f64));
        out.push(("anneal_epochs".to_string(), self.anneal_epochs as f64));
        out.push(("anneal_cos".to_string(), f64::from(u8::from(self.strategy == AnnealStrategy::Cos))));
        out.extend(self.swa_lrs.iter().enumerate().map(|(i, v)| (format!("swa_lrs.{i}"), *v)));
        out
    }

    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let l = Lookup::new("swa_lr", state)?;
        let base = self.base.load(&l)?;
        let step_count = l.int("step_count")?;
        if step_count < 1 {
            return Err(l.bad("step_count", step_count as f64));
        }
        let anneal_epochs = l.int("anneal_epochs")?;
        if !(0..=MAX_ANNEAL_EPOCHS).contains(&anneal_epochs) {
            return Err(l.bad("anneal_epochs", anneal_epochs as f64));
        }
        let strategy = if l.flag("anneal_cos")? { AnnealStrategy::Cos } else { AnnealStrategy::Linear };
        let swa_lrs = (0..self.swa_lrs.len()).map(|i| l.get(&format!("swa_lrs.{i}"))).collect::<Result<Vec<_>>>()?;
        l.finish()?;
        *self = SwaLr { base, swa_lrs, anneal_epochs, strategy, step_count };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::Sgd;
    use tch::{Kind, Tensor};

    /// SGD with groups of lr 0.1 and 0.3, `initial_lr` 0.05 and 0.02 (as
    /// Lightning's SWA callback sets them) when `initial`.
    fn optimizer(initial: bool) -> Sgd {
        let mut opt = super::super::tests::opt();
        let b = Tensor::zeros([1], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        opt.add_param_group(vec![b], Some(0.3)).unwrap();
        if initial {
            for (g, lr) in opt.param_groups_mut().iter_mut().zip([0.05, 0.02]) {
                g.initial_lr = Some(lr);
            }
        }
        opt
    }

    fn run(strategy: AnnealStrategy, anneal: i64, last_epoch: i64) -> (Vec<Vec<f64>>, SwaLr) {
        let mut opt = optimizer(true);
        let mut s = SwaLr::new(&mut opt, &[0.05, 0.02], anneal, strategy, last_epoch).unwrap();
        let mut lrs = vec![opt.param_groups().iter().map(|g| g.lr).collect::<Vec<_>>()];
        for _ in 0..6 {
            s.step(&mut opt, None).unwrap();
            lrs.push(opt.param_groups().iter().map(|g| g.lr).collect());
        }
        (lrs, s)
    }

    /// torch 2.13's lrs (`repr` of every group's lr after the constructor
    /// and each of six steps).
    #[test]
    fn lrs_equal_torch() {
        let (cos, s) = run(AnnealStrategy::Cos, 3, 7);
        assert_eq!(
            cos[..4],
            [
                [0.1, 0.3],
                [0.08750000000000001, 0.22999999999999998],
                [0.06250000000000001, 0.09000000000000002],
                [0.05, 0.02]
            ]
        );
        assert_eq!(cos[6], [0.05, 0.02]);
        assert_eq!(s.base.last_epoch, 14);
        assert_eq!(s.base.base_lrs, [0.05, 0.02]);
        let (linear, s) = run(AnnealStrategy::Linear, 4, -1);
        assert_eq!(
            linear[..5],
            [
                [0.1, 0.3],
                [0.08750000000000001, 0.22999999999999998],
                [0.07500000000000001, 0.16],
                [0.06250000000000001, 0.09],
                [0.05, 0.02]
            ]
        );
        assert_eq!(s.base.last_epoch, 6);
        let (none, _) = run(AnnealStrategy::Cos, 0, 5);
        assert!(none.iter().all(|l| *l == [0.05, 0.02]));
        let (one, _) = run(AnnealStrategy::Linear, 1, -1);
        assert_eq!(one[..2], [[0.1, 0.3], [0.05, 0.02]]);
    }

    #[test]
    fn state_round_trips_and_refuses_others() {
        let (_, s) = run(AnnealStrategy::Cos, 3, 7);
        let mut opt = optimizer(true);
        let mut other = SwaLr::new(&mut opt, &[0.5], 1, AnnealStrategy::Linear, -1).unwrap();
        other.load_state_dict(&s.state_dict()).unwrap();
        assert_eq!(other.state_dict(), s.state_dict());
        let mut bad = s.state_dict();
        bad.push(("gamma".into(), 0.5));
        assert!(other.load_state_dict(&bad).is_err());
        assert_eq!(other.state_dict(), s.state_dict(), "a refused state changes nothing");
    }

    #[test]
    fn refuses_bad_arguments() {
        let mut opt = optimizer(false);
        assert!(SwaLr::new(&mut opt, &[0.1, 0.2, 0.3], 1, AnnealStrategy::Cos, -1).is_err());
        assert!(SwaLr::new(&mut opt, &[-0.1], 1, AnnealStrategy::Cos, -1).is_err());
        assert!(SwaLr::new(&mut opt, &[0.1], -1, AnnealStrategy::Cos, -1).is_err());
        let e = SwaLr::new(&mut opt, &[0.1], 1, AnnealStrategy::Cos, 3).unwrap_err();
        assert!(e.to_string().contains("initial_lr"), "{e}");
        assert_eq!(opt.param_groups()[0].lr, 0.1, "a refused constructor changes no lr");
    }
}

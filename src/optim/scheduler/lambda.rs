//! LambdaLR and MultiplicativeLR, `torch.optim.lr_scheduler`, with the
//! factor computed by a function of the step and the group (in C, a host
//! callback).
use super::{Base, Lookup, LrScheduler};
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// The factor for step `epoch` of parameter group `group`.
pub type LrLambda = Box<dyn FnMut(i64, usize) -> Result<f64> + Send>;

/// LambdaLR (`lr = initial_lr * f(epoch)`) or, multiplicative,
/// MultiplicativeLR (`lr = lr * f(epoch)` from step 1 on).
pub struct LambdaLr {
    base: Base,
    f: LrLambda,
    multiplicative: bool,
}

impl std::fmt::Debug for LambdaLr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LambdaLr").field("base", &self.base).field("multiplicative", &self.multiplicative).finish()
    }
}

impl LambdaLr {
    /// LambdaLR: writes `initial_lr * f(0, group)` into every group.
    pub fn new(opt: &mut dyn Optimizer, f: LrLambda) -> Result<Self> {
        Self::create(opt, f, false)
    }

    /// MultiplicativeLR: each step multiplies the lr by `f(epoch, group)`.
    pub fn multiplicative(opt: &mut dyn Optimizer, f: LrLambda) -> Result<Self> {
        Self::create(opt, f, true)
    }

    fn create(opt: &mut dyn Optimizer, f: LrLambda, multiplicative: bool) -> Result<Self> {
        let base = Base::attach(opt);
        let mut s = LambdaLr { base, f, multiplicative };
        s.apply_step(opt, 0)?;
        Ok(s)
    }

    /// The factor of `epoch` for `group`; a NaN or infinite one is refused.
    fn factor(&mut self, epoch: i64, group: usize) -> Result<f64> {
        let v = (self.f)(epoch, group)?;
        if !v.is_finite() {
            return Err(Error::invalid(format!("lr_lambda returned {v} for step {epoch}, group {group}")));
        }
        Ok(v)
    }

    /// torch's `get_lr` at `epoch` (all factors computed before any lr
    /// changes, so a failing callback changes nothing).
    fn apply_step(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        let current: Vec<f64> = opt.param_groups().iter().map(|g| g.lr).collect();
        let mut lrs = Vec::with_capacity(current.len());
        for (i, lr) in current.iter().enumerate() {
            lrs.push(if !self.multiplicative {
                self.base.base_lrs[i] * self.factor(epoch, i)?
            } else if epoch > 0 {
                lr * self.factor(epoch, i)?
            } else {
                *lr
            });
        }
        self.base.last_epoch = epoch;
        self.base.apply(opt, lrs);
        Ok(())
    }

    fn kind(&self) -> &'static str {
        if self.multiplicative {
            "multiplicative_lr"
        } else {
            "lambda_lr"
        }
    }
}

impl LrScheduler for LambdaLr {
    fn name(&self) -> &'static str {
        self.kind()
    }

    fn step(&mut self, opt: &mut dyn Optimizer, _metric: Option<f64>) -> Result<()> {
        self.base.check_groups_exact(opt, self.kind())?;
        self.apply_step(opt, self.base.last_epoch + 1)
    }

    fn jump_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        self.base.check_groups_exact(opt, self.kind())?;
        self.apply_step(opt, epoch)
    }

    /// torch's form is absolute (MultiplicativeLR's already reads the
    /// current lr): a chained step is a plain one. The first step of a
    /// fresh scheduler writes what its constructor computed (LambdaLR) or
    /// leaves the lr (MultiplicativeLR), without calling the function again.
    fn chain_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        if epoch == 0 && self.base.last_epoch == 0 {
            self.base.check_groups_exact(opt, self.kind())?;
            let lrs = if self.multiplicative {
                opt.param_groups().iter().map(|g| g.lr).collect()
            } else {
                self.base.last_lr.clone()
            };
            self.base.apply(opt, lrs);
            return Ok(());
        }
        self.jump_to(opt, epoch)
    }

    fn last_lr(&self) -> Vec<f64> {
        self.base.last_lr.clone()
    }

    fn state_dict(&self) -> Vec<(String, f64)> {
        // As torch: the function is not saved, only the counter and lrs.
        self.base.state()
    }

    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<()> {
        let l = Lookup::new(self.kind(), state)?;
        let base = self.base.load(&l)?;
        l.finish()?;
        self.base = base;
        Ok(())
    }
}

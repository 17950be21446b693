//! Which optimizers a host loop's `unshard` gathered (FSDP's and tensor
//! parallelism's): their `reshard` must be given the same ones, whose
//! states are whole until it cuts them again.
use crate::error::{Error, Result};
use crate::optim::Optimizer;

/// The addresses of the optimizers an `unshard` gathered.
#[derive(Debug, Default)]
pub(crate) struct GatheredOptimizers(Vec<usize>);

/// An optimizer's address, naming it while it lives.
fn address_of(o: &dyn Optimizer) -> usize {
    o as *const dyn Optimizer as *const () as usize
}

impl GatheredOptimizers {
    /// Records `optimizers` as the ones gathered.
    pub(crate) fn record(&mut self, optimizers: &[&mut dyn Optimizer]) {
        self.0 = optimizers.iter().map(|o| address_of(&**o)).collect();
    }

    /// Forgets them (they were cut again).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// Refuses `optimizers` unless they are the gathered ones, in any
    /// order; `reshard` and `unshard` name the C functions for the message.
    pub(crate) fn check(&self, optimizers: &[&mut dyn Optimizer], reshard: &str, unshard: &str) -> Result<()> {
        let mut given: Vec<usize> = optimizers.iter().map(|o| address_of(&**o)).collect();
        let mut gathered = self.0.clone();
        given.sort_unstable();
        gathered.sort_unstable();
        if given != gathered {
            return Err(Error::invalid(format!(
                "{reshard}: pass the optimizers given to {unshard} ({} of them), whose states are whole now",
                gathered.len()
            )));
        }
        Ok(())
    }
}

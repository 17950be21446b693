//! Giving a model built on the meta device its values
//! ([`super::meta_init`]): PyTorch's `to_empty(device="cpu")` followed by
//! `reset_parameters()`, with the values of the eager build.
use super::meta_init;
use super::Module;
use crate::error::Result;
use crate::tensor::device::{assign, impl_identity};
use std::collections::HashMap;
use tch::Tensor;

impl Module {
    /// Whether any parameter or buffer lives on the meta device.
    pub fn holds_meta(&self) -> bool {
        let mut any = false;
        self.visit_tensors(&mut |t| any |= meta_init::is_meta(t));
        any
    }

    /// Replaces every meta parameter and buffer by the CPU tensor its
    /// recorded values make (tied names stay one tensor). Fails on a meta
    /// tensor without recorded values, keeping the tensors replaced so far.
    pub fn materialize(&self) -> Result<()> {
        self.materialize_where(&|_| true).map(drop)
    }

    /// [`Module::materialize`] for the meta tensors `pick` selects; returns
    /// the new tensors by the TensorImpl of the meta ones they replace.
    pub(crate) fn materialize_where(&self, pick: &dyn Fn(&Tensor) -> bool) -> Result<HashMap<usize, Tensor>> {
        let mut made: HashMap<usize, Tensor> = HashMap::new();
        let mut result = Ok(());
        self.visit("", &mut |name, t, _| {
            if result.is_err() || !meta_init::is_meta(t) || !pick(t) {
                return;
            }
            result = (|| {
                let key = impl_identity(t)?;
                let new = match made.get(&key) {
                    Some(n) => n.shallow_clone(),
                    None => {
                        let n = meta_init::materialize(t, &name)?;
                        made.insert(key, n.shallow_clone());
                        n
                    }
                };
                assign(t, &new)
            })();
        });
        if !made.is_empty() {
            self.after_convert();
            meta_init::forget_unused();
        }
        result.map(|()| made)
    }
}

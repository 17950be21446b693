//! Loading a `state_dict` (named tensors) into a module, all or nothing.
use super::module::Module;
use crate::error::{Error, Result};
use std::collections::HashMap;
use tch::Tensor;

/// Keys that did not match in a non-strict load, as PyTorch reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Keys of the module that the state dict did not have.
    pub missing: Vec<String>,
    /// Keys of the state dict that the module does not have.
    pub unexpected: Vec<String>,
}

impl Module {
    /// Copies `sd` into this module's parameters and buffers (`copy_` under
    /// `no_grad`, across devices if needed). A shape or dtype mismatch fails
    /// (`ShapeMismatch` / `DtypeMismatch`, naming the key); with `strict`,
    /// missing or unexpected keys fail (`Format`, listing them). Everything is
    /// checked before anything is copied: on error the module is unchanged.
    /// A meta tensor keeps a copy of its value for when the model is
    /// materialized ([`super::meta_init`]).
    pub fn load_state_dict(&mut self, sd: &[(String, Tensor)], strict: bool) -> Result<LoadReport> {
        let mut given: HashMap<&str, &Tensor> = HashMap::with_capacity(sd.len());
        for (name, t) in sd {
            if given.insert(name.as_str(), t).is_some() {
                return Err(Error::invalid(format!("load_state_dict: key {name:?} appears twice")));
            }
        }
        let own = self.state_dict();
        let mut report = LoadReport::default();
        let mut pairs = Vec::with_capacity(own.len());
        for (name, dst) in &own {
            let Some(src) = given.get(name.as_str()) else {
                report.missing.push(name.clone());
                continue;
            };
            if src.size() != dst.size() {
                return Err(Error::shape(format!(
                    "load_state_dict: size mismatch for {name}: checkpoint has shape {:?}, \
                     the module has {:?}",
                    src.size(),
                    dst.size()
                )));
            }
            let (sk, dk) = (src.f_kind()?, dst.f_kind()?);
            if sk != dk {
                return Err(Error::dtype(format!(
                    "load_state_dict: dtype mismatch for {name}: checkpoint has {sk:?}, \
                     the module has {dk:?} (shape {:?})",
                    dst.size()
                )));
            }
            pairs.push((dst, *src));
        }
        let own_names: std::collections::HashSet<&str> = own.iter().map(|(n, _)| n.as_str()).collect();
        report.unexpected =
            sd.iter().filter(|(n, _)| !own_names.contains(n.as_str())).map(|(n, _)| n.clone()).collect();
        if strict && (!report.missing.is_empty() || !report.unexpected.is_empty()) {
            return Err(Error::format(format!(
                "load_state_dict (strict): missing keys {:?}, unexpected keys {:?}",
                report.missing, report.unexpected
            )));
        }
        // (A meta tensor records the copy: the values it takes when the
        // model is materialized.)
        for (dst, src) in pairs {
            crate::tensor::inplace::copy_(dst, src)?;
        }
        Ok(report)
    }
}

//! A model's weights from and to files of any format fulmen knows: a
//! safetensors state_dict, a fulmen checkpoint, or a `torch.save` file (a
//! state_dict `.pt` / `.pth`, or a Lightning `.ckpt`), told apart by their
//! contents; written as safetensors, or as `torch.save` for `.pt`, `.pth`
//! and `.bin` paths.
use super::safetensors_io::{read_safetensors, write_safetensors};
use super::{LoadReport, Module};
use crate::checkpoint::torch_save;
use crate::error::Result;
use std::collections::HashSet;
use std::path::Path;
use tch::Tensor;

/// Whether `path` names a `torch.save` file by its extension.
fn is_torch_save_path(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("pt" | "pth" | "bin"))
}

/// The named tensors of a weights file of any known format.
fn read_weights(path: &Path) -> Result<Vec<(String, Tensor)>> {
    match torch_save::sniff(path)? {
        Some(torch_save::TorchFile::Archive) => {
            let value = torch_save::load(path)?;
            return torch_save::state_dict_of(&value, &path.display().to_string());
        }
        Some(torch_save::TorchFile::LegacyPickle) => return Err(torch_save::legacy_error(path)),
        None => {}
    }
    let (tensors, meta) = read_safetensors(path)?;
    Ok(crate::checkpoint::checkpoint_weights(tensors, &meta))
}

/// When none of `given`'s names is the model's, the first name component
/// (a LightningModule's attribute, such as `model.`) whose removal makes
/// the most of them match is removed from the names that have it; the
/// others stay as they are (and are unexpected to a strict load).
pub(crate) fn without_module_prefix(given: Vec<(String, Tensor)>, model: &HashSet<String>) -> Vec<(String, Tensor)> {
    if given.iter().any(|(n, _)| model.contains(n)) {
        return given;
    }
    let mut matches: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (n, _) in &given {
        if let Some((prefix, rest)) = n.split_once('.') {
            if model.contains(rest) {
                *matches.entry(prefix).or_default() += 1;
            }
        }
    }
    let Some(best) = matches.into_iter().max_by_key(|(p, c)| (*c, std::cmp::Reverse(*p))).map(|(p, _)| p.to_string())
    else {
        return given;
    };
    given
        .into_iter()
        .map(|(n, t)| match n.strip_prefix(&best).and_then(|r| r.strip_prefix('.')) {
            Some(rest) => (rest.to_string(), t),
            None => (n, t),
        })
        .collect()
}

impl Module {
    /// Loads weights from a file of any known format (see the module's
    /// doc); a Lightning checkpoint's `model.`-style attribute prefix is
    /// removed when the names then fit. On any error the module is
    /// unchanged.
    pub fn load_weights(&mut self, path: &Path, strict: bool) -> Result<LoadReport> {
        let given = read_weights(path)?;
        let names: HashSet<String> = self.state_dict().into_iter().map(|(n, _)| n).collect();
        let given = without_module_prefix(given, &names);
        self.load_state_dict(&given, strict).map_err(|e| e.context(format!("loading {}", path.display())))
    }

    /// Saves the state_dict: as `torch.save` for a `.pt`, `.pth` or `.bin`
    /// path (`torch.load(weights_only=True)` reads it), else as
    /// safetensors. Atomic.
    pub fn save_weights(&self, path: &Path) -> Result<()> {
        if is_torch_save_path(path) {
            torch_save::save(path, &torch_save::state_dict_value(&self.state_dict()))
        } else {
            write_safetensors(path, &self.state_dict(), None)
        }
    }
}

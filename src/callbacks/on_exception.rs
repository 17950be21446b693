//! OnExceptionCheckpoint: saves a checkpoint when the run fails (an error
//! in a step, hook or data source, SIGINT / SIGTERM), as Lightning's
//! callback of that name, so the run can resume from where it stopped.
use crate::error::{Error, Result};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::path::PathBuf;

/// The OnExceptionCheckpoint callback.
#[derive(Debug, Clone)]
pub struct OnExceptionCheckpoint {
    path: PathBuf,
}

impl OnExceptionCheckpoint {
    /// Saves `<dirpath>/<filename>.ckpt` (filename default "on_exception")
    /// on a failure during fit, replacing an earlier one.
    pub fn new(dirpath: PathBuf, filename: Option<&str>) -> Result<Self> {
        let filename = filename.unwrap_or("on_exception");
        if filename.is_empty() || filename.contains(['/', '\0']) || filename == "." || filename == ".." {
            return Err(Error::invalid(format!(
                "OnExceptionCheckpoint: the filename {filename:?} must be a plain file name"
            )));
        }
        if dirpath.as_os_str().is_empty() {
            return Err(Error::invalid("OnExceptionCheckpoint: the folder is empty"));
        }
        Ok(OnExceptionCheckpoint { path: dirpath.join(format!("{filename}.ckpt")) })
    }

    /// Where the checkpoint goes.
    pub fn ckpt_path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Callback for OnExceptionCheckpoint {
    fn name(&self) -> String {
        "OnExceptionCheckpoint".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        // Only a fit has a training state worth resuming.
        if ctx.stage != "fit" {
            return Ok(());
        }
        match ctx.hook {
            Hook::Exception => ctx.state.save_requests.push((self.path.clone(), false)),
            // As Lightning, a fit that ends well removes a checkpoint left by
            // an earlier failure (not the one it resumed from).
            Hook::Teardown if self.path.is_file() => ctx.state.remove_requests.push(self.path.clone()),
            _ => {}
        }
        Ok(())
    }
}

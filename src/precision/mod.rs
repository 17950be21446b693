//! Precision plugins, as Lightning's: the `precision` setting, autocast
//! regions on any device type, dynamic loss scaling for `16-mixed`, and the
//! plugin the trainer calls around each step.
pub mod autocast;
pub mod grad_scaler;
pub mod mode;
pub mod plugin;

pub use autocast::AutocastGuard;
pub use grad_scaler::{GradScaler, GradScalerSettings, StepMade};
pub use mode::{Precision, VALID_PRECISIONS};
pub use plugin::PrecisionPlugin;

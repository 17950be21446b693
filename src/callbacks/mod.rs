//! Built-in callbacks, as Lightning's: ModelCheckpoint, EarlyStopping,
//! LearningRateMonitor, Timer, ModelSummary and the progress bar.
pub mod early_stopping;
pub mod filename;
pub mod lr_monitor;
pub mod model_checkpoint;
pub mod model_summary;
pub mod monitor;
pub mod progress_bar;
pub mod timer;

pub use early_stopping::{EarlyStopping, EarlyStoppingOptions};
pub use lr_monitor::LearningRateMonitor;
pub use model_checkpoint::{ModelCheckpoint, ModelCheckpointOptions};
pub use model_summary::ModelSummary;
pub use monitor::Mode;
pub use progress_bar::ProgressBar;
pub use timer::Timer;

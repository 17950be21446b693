//! Built-in callbacks, as Lightning's: ModelCheckpoint, EarlyStopping,
//! LearningRateMonitor, Timer, ModelSummary, GradientAccumulationScheduler,
//! OnExceptionCheckpoint, DeviceStatsMonitor, ThroughputMonitor, weight
//! averaging (EMA, SWA), StochasticWeightAveraging, BackboneFinetuning,
//! ModelPruning, SpikeDetection, the prediction writer
//! (BasePredictionWriter) and the progress bar.
pub mod backbone_finetuning;
#[cfg(test)]
mod backbone_finetuning_tests;
pub mod device_stats;
pub mod early_stopping;
pub mod filename;
pub mod flops_table;
pub mod grad_accumulation;
pub mod lr_monitor;
pub mod model_checkpoint;
pub mod model_summary;
pub mod monitor;
pub mod on_exception;
pub mod prediction_writer;
pub mod progress_bar;
pub mod pruning;
#[cfg(test)]
mod pruning_tests;
pub mod spike;
pub mod stochastic_weight_avg;
pub mod throughput;
pub mod timer;
pub mod weight_averaging;

pub use backbone_finetuning::{BackboneFinetuning, BackboneFinetuningOptions, BackboneLambda};
pub use device_stats::DeviceStatsMonitor;
pub use early_stopping::{EarlyStopping, EarlyStoppingOptions, EarlyStoppingState};
pub use grad_accumulation::GradientAccumulationScheduler;
pub use lr_monitor::LearningRateMonitor;
pub use model_checkpoint::{ModelCheckpoint, ModelCheckpointOptions};
pub use model_summary::ModelSummary;
pub use monitor::Mode;
pub use on_exception::OnExceptionCheckpoint;
pub use prediction_writer::{PredictionWriter, WriteInterval};
pub use progress_bar::ProgressBar;
pub use pruning::{ModelPruning, ModelPruningOptions, PruningAmount, PruningMethod};
pub use spike::{SpikeDetection, SpikeDetectionOptions};
pub use stochastic_weight_avg::{StochasticWeightAveraging, StochasticWeightAveragingOptions, SwaStart};
pub use throughput::ThroughputMonitor;
pub use timer::Timer;
pub use weight_averaging::{WeightAveraging, WeightAveragingOptions};

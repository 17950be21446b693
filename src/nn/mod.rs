//! Neural-network modules: a tree of layers named as in `torch.nn`, state
//! dicts, safetensors I/O and TorchScript loading.
mod activation_checkpoint;
#[cfg(test)]
mod activation_checkpoint_tests;
mod batch_norm_stats;
mod compiled_step;
mod exported;
pub(crate) mod flop_counter;
#[cfg(test)]
mod flop_counter_tests;
mod flop_formulas;
#[cfg(test)]
mod flop_formulas_tests;
mod flop_table;
mod freeze;
mod host;
pub mod init;
pub mod init_fns;
pub mod layers;
mod materialize;
pub mod meta_init;
#[cfg(test)]
mod meta_init_tests;
mod module;
mod safetensors_io;
mod script_value;
mod shard_hook;
mod state_dict;
mod tensor_parallel;
mod torchscript;
mod trace;
#[cfg(test)]
mod trace_tests;
mod weights_io;
pub(crate) use exported::{exported_parent, InnerUnit, ModuleTree};
pub(crate) use shard_hook::{ShardHook, ShardLink};
pub(crate) use weights_io::without_module_prefix;

#[cfg(test)]
mod script_tests;
#[cfg(test)]
mod tests;

pub use flop_counter::{measure_flops, measure_model_flops, FlopCounts};
pub use flop_formulas::{register_flop_formula, unregister_flop_formula, FlopArg, FlopFormula};
pub use host::HostForward;
pub use layers::conv::ConvConfig;
pub use layers::conv_transpose::ConvTransposeConfig;
pub use layers::rnn::{RnnConfig, RnnKind};
pub use layers::tensor_parallel::ParallelStyle;
pub use layers::transformer::TransformerConfig;
pub use layers::Activation;
pub use module::Module;
pub(crate) use module::{copy_state_tied, move_in_place, param_identity, repeated_entries, ParamId, Slot};
pub use safetensors_io::{
    read_safetensors, read_safetensors_bytes, safetensors_bytes, write_safetensors, MAX_HEADER_BYTES,
};
pub(crate) use script_value::NodeBudget;
pub use script_value::{Value, ValueKind, MAX_VALUE_DEPTH, MAX_VALUE_NODES};
pub use state_dict::LoadReport;
pub use torchscript::MAX_METHOD_ARGS;
pub use trace::MAX_TRACE_INPUTS;

//! Models: layers, containers, host modules, initialisation, state
//! (`fulmen/nn.h`). `gen_options` is generated from
//! `src/ffi/options_table.rs`.
#[rustfmt::skip]
pub mod gen_options;
pub mod host_module;
pub mod init;
pub mod meta_init;
pub mod model;
pub mod model_params;
pub mod sequence_layers;
pub mod spatial_layers;

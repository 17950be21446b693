//! The C API. This layer converts and validates; the logic lives in the
//! Rust core. Every exported function runs inside a panic boundary.
//!
//! One folder per area, each the source of its header
//! `include/fulmen/<area>.h` (`tools/headers/split.rs`).
//! `options_table` declares the option structs (`fulmen_*_options`) that
//! each area's `gen_options.rs` is generated from.
#![allow(non_camel_case_types)]
pub mod after_run;
pub mod base;
pub mod callback_list;
pub mod callbacks;
pub mod data;
pub mod devices;
pub mod distributed;
pub mod flops;
pub mod loggers;
pub mod losses;
pub mod metrics;
pub mod module;
pub mod nn;
pub mod optim;
pub mod options_table;
pub mod prediction;
pub mod schedulers;
pub mod script;
pub mod tensor;
pub mod tensor_ops;
pub mod trainer;
pub mod value;

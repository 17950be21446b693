//! The C API. This layer converts and validates; the logic lives in the
//! Rust core. Every exported function runs inside a panic boundary.
#![allow(non_camel_case_types)]
pub mod accelerator;
pub mod batch;
pub mod callback;
pub mod callbacks;
pub mod callbacks_training;
pub mod context;
pub mod data;
pub mod distributed;
pub mod error;
pub mod handle;
pub mod hooks;
pub mod host_module;
pub mod init;
pub mod logger;
pub mod manual;
pub mod metrics;
pub mod model;
pub mod module;
pub mod optim;
pub mod optim_adaptive;
pub mod optim_groups;
pub mod precision;
pub mod runtime;
pub mod scaler;
pub mod scheduler;
pub mod scheduler_host;
pub mod script;
pub mod sequence_layers;
pub mod spatial_layers;
pub mod strategy;
pub mod tensor;
pub mod trainer;
pub mod trainer_loaders;
pub mod tuner;
pub mod value;

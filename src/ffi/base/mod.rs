//! Conventions every exported function shares: errors and the panic boundary,
//! handles, host callbacks and the threads lent to them, process-wide settings.
pub mod callback;
pub mod callback_context;
pub mod error;
pub mod handle;
pub mod runtime;

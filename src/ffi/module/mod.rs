//! The LightningModule as a vtable: its steps, their context, manual
//! optimization, and the LightningDataModule (`fulmen/module.h`).
pub mod context;
pub mod datamodule;
pub mod lightning_module;
pub mod manual;
pub mod manual_closure;
pub mod module_data;
pub mod optimization;

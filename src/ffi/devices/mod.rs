//! Devices and accelerators, built-in and custom (`fulmen/devices.h`).
pub mod accelerator;
pub mod device_types;

//! Accelerators, as Lightning's: the [`Accelerator`] interface, the
//! built-in `cpu`, `cuda`, `mps` and `xla`, the `devices` parser, and the
//! registry that resolves names, the aliases `gpu` / `tpu`, and `auto`.
pub mod accelerator;
pub mod cpu;
pub mod cuda;
pub(crate) mod cxx;
pub mod devices;
pub mod mps;
pub mod proc_stats;
pub mod registry;
pub mod tpu_topology;
pub mod xla;
pub mod xla_collectives;
pub mod xla_runtime;

pub use accelerator::Accelerator;
pub use cpu::CpuAccelerator;
pub use cuda::CudaAccelerator;
pub use devices::{DevicesSpec, ParsedDevices};
pub use mps::MpsAccelerator;
pub use registry::{AcceleratorInfo, Registry};
pub use xla::XlaAccelerator;

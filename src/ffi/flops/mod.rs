//! FLOP counting, as PyTorch's `FlopCounterMode` counts (Lightning's
//! `measure_flops`): measurements, the counts they keep by module and
//! operator, and formulas of the host's own (`fulmen/flops.h`).
pub mod counts;
pub mod formulas;
pub mod measure;

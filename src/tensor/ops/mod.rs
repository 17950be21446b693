//! Tensor ops of the core, one function per C op (see [`table`]): they
//! check their arguments, then call libtorch (the in-place ones through
//! [`crate::tensor::inplace`]).
pub mod activation;
pub mod attention;
pub mod checks;
pub mod inplace;
pub mod loss;
pub mod math;
pub mod reduce;
pub mod resize;
pub mod select;
pub mod shape;
pub mod table;

pub use activation::*;
pub use attention::*;
pub use inplace::*;
pub use loss::*;
pub use math::*;
pub use reduce::*;
pub use resize::*;
pub use select::*;
pub use shape::*;

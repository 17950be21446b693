//! Element types fulmen accepts at its boundary and their libtorch kinds.
use crate::error::{Error, Result};
use tch::Kind;

/// Element type of a tensor, as the C API numbers it (`fulmen_dtype`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// 32-bit float.
    F32 = 0,
    /// 64-bit float.
    F64 = 1,
    /// IEEE half precision.
    F16 = 2,
    /// bfloat16.
    BF16 = 3,
    /// 64-bit signed integer.
    I64 = 4,
    /// 32-bit signed integer.
    I32 = 5,
    /// 8-bit unsigned integer.
    U8 = 6,
    /// Boolean, one byte per element (0 or 1).
    Bool = 7,
    /// 8-bit signed integer.
    I8 = 8,
    /// 16-bit signed integer.
    I16 = 9,
}

const ALL: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::Bool,
    DType::I8,
    DType::I16,
];

impl DType {
    /// The dtype with C number `v`.
    pub fn from_i32(v: i32) -> Result<Self> {
        ALL.into_iter()
            .find(|d| *d as i32 == v)
            .ok_or_else(|| Error::dtype(format!("{v} is not a fulmen_dtype (0..=9)")))
    }

    /// The libtorch kind.
    pub fn kind(self) -> Kind {
        match self {
            DType::F32 => Kind::Float,
            DType::F64 => Kind::Double,
            DType::F16 => Kind::Half,
            DType::BF16 => Kind::BFloat16,
            DType::I64 => Kind::Int64,
            DType::I32 => Kind::Int,
            DType::U8 => Kind::Uint8,
            DType::Bool => Kind::Bool,
            DType::I8 => Kind::Int8,
            DType::I16 => Kind::Int16,
        }
    }

    /// The fulmen dtype of a libtorch kind.
    pub fn from_kind(kind: Kind) -> Result<Self> {
        ALL.into_iter()
            .find(|d| d.kind() == kind)
            .ok_or_else(|| Error::dtype(format!("libtorch dtype {kind:?} has no fulmen_dtype")))
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::U8 | DType::Bool | DType::I8 => 1,
        }
    }

    /// Lower-case name ("f32", "bf16", ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
        }
    }

    /// Whether the dtype is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

/// Whether a libtorch kind is a floating-point type.
pub fn is_floating(kind: Kind) -> bool {
    matches!(kind, Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16)
}

//! Comparing monitored metrics: min or max mode.
use crate::error::{Error, Result};

/// Whether a lower or a higher metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Lower is better (losses).
    Min,
    /// Higher is better (accuracies).
    Max,
}

impl Mode {
    /// Reads "min" or "max".
    pub fn parse(s: &str) -> Result<Mode> {
        match s {
            "min" => Ok(Mode::Min),
            "max" => Ok(Mode::Max),
            _ => Err(Error::invalid(format!("mode must be \"min\" or \"max\", got {s:?}"))),
        }
    }

    /// Lightning's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Min => "min",
            Mode::Max => "max",
        }
    }

    /// Whether `a` is strictly better than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Mode::Min => a < b,
            Mode::Max => a > b,
        }
    }

    /// The worst possible value (the start of a search for the best).
    pub fn worst(self) -> f64 {
        match self {
            Mode::Min => f64::INFINITY,
            Mode::Max => f64::NEG_INFINITY,
        }
    }
}

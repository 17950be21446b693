//! The rule every number read from a checkpoint follows, whatever its file
//! format and whatever state it belongs to (a scheduler's, an optimizer's,
//! a callback's, the loss scaler's): a finite number, or, only for a best
//! score (which torch and Lightning start at their mode's worst, an
//! infinity, and set to an infinite metric), an infinity. NaN never: a NaN
//! learning rate read on resume would train the model to NaN weights.
use crate::error::{Error, Result};

/// Whether a value may be infinite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Infinity {
    /// Finite numbers only.
    Refused,
    /// `inf` and `-inf` too: a best score.
    Allowed,
}

/// `v` when it is finite; otherwise a `Format` error naming `what` (the
/// key, and the file where the caller knows it).
pub fn finite(v: f64, what: &str) -> Result<f64> {
    finite_or(v, Infinity::Refused, what)
}

/// `v` when it is finite, or infinite where `infinity` allows it; NaN is
/// a `Format` error naming `what`.
pub fn finite_or(v: f64, infinity: Infinity, what: &str) -> Result<f64> {
    if v.is_finite() || (v.is_infinite() && infinity == Infinity::Allowed) {
        return Ok(v);
    }
    let expected = match infinity {
        Infinity::Refused => "a finite number",
        Infinity::Allowed => "a number (a score may be infinite, never NaN)",
    };
    Err(Error::format(format!("{what} is {v}, where a checkpoint must hold {expected}")))
}

/// A number a state keeps as text (the callbacks' states), by the same
/// rule; text that is not a number is a `Format` error too.
pub fn parse(text: &str, infinity: Infinity, what: &str) -> Result<f64> {
    let v = text.trim().parse::<f64>().map_err(|_| Error::format(format!("{what} {text:?} is not a number")))?;
    finite_or(v, infinity, what)
}

/// The value of a one-element tensor (any shape, any real dtype, any
/// device: copied to the CPU first, since some have no float64) as f64;
/// callers check the element count and apply the rule above.
pub fn one_value(t: &tch::Tensor) -> Result<f64> {
    let on_cpu = t.f_reshape([1i64])?.f_to_device(tch::Device::Cpu)?;
    Ok(on_cpu.f_to_kind(tch::Kind::Double)?.f_double_value(&[0])?)
}

/// Refuses a list of `len` entries where at most `max` belong, before any
/// entry is read (a hostile file's list costs nothing to refuse).
pub fn check_len(len: usize, max: usize, what: &str) -> Result<()> {
    if len > max {
        return Err(Error::format(format!("{what} holds {len} entries where at most {max} belong")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn only_finite_numbers_and_infinite_scores_pass() {
        assert_eq!(finite(0.5, "x").unwrap(), 0.5);
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let e = finite(v, "lr_schedulers[0].base_lrs[0]").unwrap_err();
            assert_eq!(e.code, ErrorCode::Format);
            assert!(e.message.contains("lr_schedulers[0].base_lrs[0]"), "{}", e.message);
        }
        for v in [f64::INFINITY, f64::NEG_INFINITY, -2.5] {
            assert_eq!(finite_or(v, Infinity::Allowed, "best").unwrap(), v);
        }
        assert_eq!(finite_or(f64::NAN, Infinity::Allowed, "best").unwrap_err().code, ErrorCode::Format);
        assert_eq!(parse(" 0.25", Infinity::Refused, "t").unwrap(), 0.25);
        assert_eq!(parse("-inf", Infinity::Allowed, "t").unwrap(), f64::NEG_INFINITY);
        for text in ["NaN", "nan", "inf", "-inf", "", "x"] {
            assert_eq!(parse(text, Infinity::Refused, "t").unwrap_err().code, ErrorCode::Format, "{text}");
        }
        assert_eq!(parse("NaN", Infinity::Allowed, "t").unwrap_err().code, ErrorCode::Format);
        assert!(check_len(3, 3, "l").is_ok());
        assert!(check_len(4, 3, "l").unwrap_err().message.contains("4 entries"));
    }
}

//! Option values given as text, parsed alike by every part that takes
//! them (trainer options, strategy settings).
use crate::error::{Error, Result};

/// A boolean option: "true"/"false", "1"/"0", "yes"/"no", "on"/"off", in
/// any case, surrounding blanks ignored.
pub fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!("option {key}: {value:?} is not a boolean (true/false)"))),
    }
}

/// An integer option.
pub fn parse_int(key: &str, value: &str) -> Result<i64> {
    value.trim().parse::<i64>().map_err(|_| Error::invalid(format!("option {key}: {value:?} is not an integer")))
}

/// An integer option that "none" (any case) unsets.
pub fn parse_opt_int(key: &str, value: &str) -> Result<Option<i64>> {
    if is_none(value) {
        Ok(None)
    } else {
        parse_int(key, value).map(Some)
    }
}

/// A numeric option (integer or float text).
pub fn parse_number(key: &str, value: &str) -> Result<f64> {
    value.trim().parse::<f64>().map_err(|_| Error::invalid(format!("option {key}: {value:?} is not a number")))
}

/// Whether the text is "none" (any case, blanks ignored): an unset option.
pub fn is_none(value: &str) -> bool {
    value.trim().eq_ignore_ascii_case("none")
}

/// A number written with a '.' or an exponent is a float (a fraction);
/// otherwise an integer (a count), as Lightning tells 1.0 from 1.
pub fn is_float_text(value: &str) -> bool {
    value.contains(['.', 'e', 'E'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_in_every_spelling() {
        for t in ["1", "true", "TRUE", " yes ", "On"] {
            assert!(parse_bool("k", t).unwrap(), "{t}");
        }
        for f in ["0", "false", "No", "OFF"] {
            assert!(!parse_bool("k", f).unwrap(), "{f}");
        }
        assert!(parse_bool("k", "2").unwrap_err().message.contains("option k"));
    }

    #[test]
    fn numbers_and_none() {
        assert_eq!(parse_int("k", " 7 ").unwrap(), 7);
        assert!(parse_int("k", "7.0").is_err());
        assert_eq!(parse_opt_int("k", "None").unwrap(), None);
        assert_eq!(parse_number("k", "1e-3").unwrap(), 1e-3);
        assert!(is_float_text("1.0") && is_float_text("1e2") && !is_float_text("10"));
    }
}

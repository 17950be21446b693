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
}

//! YAML scalars for `hparams.yaml` that every YAML parser (1.1 as PyYAML,
//! 1.2 as others) reads back as the exact text written: plain only when
//! nothing can misread it, otherwise double-quoted with every character a
//! parser could alter escaped.

/// Words YAML 1.1 resolves to booleans or null when plain.
const RESERVED: [&str; 9] = ["y", "n", "yes", "no", "true", "false", "on", "off", "null"];

/// A key or string value: plain when it is an identifier (`lr`,
/// `model.depth`, `batch-size`) that no schema reads as anything but a
/// string, double-quoted otherwise.
pub fn quoted(text: &str) -> String {
    let mut chars = text.chars();
    let identifier = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !RESERVED.iter().any(|w| w.eq_ignore_ascii_case(text));
    if identifier {
        text.to_string()
    } else {
        double_quoted(text)
    }
}

/// A hyperparameter value: integers, decimals that read back as the same
/// text, `true` and `false` plain (so they load as numbers and booleans, as
/// Lightning's hparams.yaml has them); everything else double-quoted.
pub fn value(text: &str) -> String {
    if text == "true" || text == "false" || is_plain_int(text) || is_plain_decimal(text) {
        text.to_string()
    } else {
        double_quoted(text)
    }
}

/// `-?(0|[1-9][0-9]*)` that fits an i64 (no leading zero: YAML 1.1 reads
/// `010` as octal).
fn is_plain_int(t: &str) -> bool {
    let digits = t.strip_prefix('-').unwrap_or(t);
    let ok =
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    ok && t.parse::<i64>().is_ok()
}

/// `-?(0|[1-9][0-9]*)\.[0-9]+` whose shortest float text is itself (so a
/// parser's float prints back the same).
fn is_plain_decimal(t: &str) -> bool {
    let body = t.strip_prefix('-').unwrap_or(t);
    let Some((int, frac)) = body.split_once('.') else { return false };
    let int_ok = !int.is_empty() && int.bytes().all(|b| b.is_ascii_digit()) && (int == "0" || !int.starts_with('0'));
    let frac_ok = !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit());
    int_ok && frac_ok && t.parse::<f64>().is_ok_and(|v| v.is_finite() && format!("{v:?}") == t)
}

/// A YAML double-quoted scalar: `\` and `"` escaped, every character that
/// YAML does not print as itself (C0 and C1 controls, DEL, line and
/// paragraph separators, byte-order mark, non-characters) as an escape.
pub fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\0' => out.push_str("\\0"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02X}", c as u32))
            }
            '\u{FEFF}' | '\u{FFFE}' | '\u{FFFF}' => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Hostile keys and values: YAML indicators, controls, separators.
    fn hostile() -> Vec<String> {
        let mut v: Vec<String> = [
            "# comment",
            "[list]",
            "&anchor",
            "*alias",
            "- item",
            "!tag",
            "{map}",
            "key: value",
            "|",
            ">",
            "%",
            "@",
            "`",
            "'single'",
            "\"double\"",
            "back\\slash",
            "",
            " lead",
            "trail ",
            "yes",
            "No",
            "ON",
            "~",
            "null",
            "NULL",
            "y",
            "010",
            "0x1F",
            "1e5",
            "1.5e-3",
            ".inf",
            "-.inf",
            ".NaN",
            "2001-12-14",
            "12:30:45",
            "<<",
            "=",
            "true",
            "false",
            "1_000",
            "+1",
            "0.10",
            "\u{2028}",
            "a\u{2029}b",
            "\u{85}",
            "\u{feff}bom",
            "tab\t",
            "line\nbreak",
            "cr\r",
            "nul\0byte",
            "\u{7f}",
            "\u{9f}",
            "\u{1b}[31m",
            "é ü 漢字 🚀",
            "\u{fffe}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend((0u32..0x20).map(|c| format!("c{}", char::from_u32(c).unwrap())));
        v
    }

    #[test]
    fn every_key_and_value_round_trips_through_a_yaml_parser() {
        let items = hostile();
        let mut text = String::new();
        for (i, s) in items.iter().enumerate() {
            text.push_str(&format!("{}: {}\n", quoted(&format!("{s}{i}")), value(s)));
            text.push_str(&format!("{}: {}\n", quoted(s), value(&i.to_string())));
        }
        let parsed: BTreeMap<String, serde_yaml::Value> = serde_yaml::from_str(&text).unwrap();
        for (i, s) in items.iter().enumerate() {
            let v = &parsed[&format!("{s}{i}")];
            let back = match v {
                serde_yaml::Value::String(x) => x.clone(),
                serde_yaml::Value::Number(n) => n.to_string(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                other => panic!("{s:?} read back as {other:?}"),
            };
            assert_eq!(&back, s, "value {s:?} written as {}", value(s));
            assert_eq!(parsed[s.as_str()], serde_yaml::Value::Number(i.into()), "key {s:?}");
        }
    }

    #[test]
    fn numbers_and_identifiers_stay_plain() {
        assert_eq!(value("0.001"), "0.001");
        assert_eq!(value("64"), "64");
        assert_eq!(value("-3"), "-3");
        assert_eq!(value("true"), "true");
        assert_eq!(value("adam"), "\"adam\"");
        assert_eq!(value("010"), "\"010\"");
        assert_eq!(value("0.10"), "\"0.10\"");
        assert_eq!(quoted("lr"), "lr");
        assert_eq!(quoted("model.depth"), "model.depth");
        assert_eq!(quoted("yes"), "\"yes\"");
        assert_eq!(quoted("#x"), "\"#x\"");
    }
}

//! Checkpoint file names from templates such as `"{epoch}-{val_loss:.3f}"`,
//! as Lightning's ModelCheckpoint formats them: with
//! `auto_insert_metric_name` each field becomes `name=value`
//! (`epoch=3-val_loss=0.123`); a metric that was not logged formats as 0.
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The widest field (and the most digits) a file-name template may ask for.
const MAX_FIELD: usize = 128;

/// Formats one value with a Python-style spec (`.3f`, `.2e`, `03d`, `g`).
fn format_value(v: f64, spec: &str, is_int: bool) -> Result<String> {
    if spec.is_empty() {
        return Ok(if is_int { format!("{}", v as i64) } else { format!("{v}") });
    }
    let (body, kind) = match spec.chars().last() {
        Some(c @ ('f' | 'e' | 'd' | 'g')) => (&spec[..spec.len() - 1], c),
        _ => (spec, 'g'),
    };
    let zero = body.starts_with('0');
    let (width, precision) = match body.split_once('.') {
        Some((w, p)) => (w, Some(p)),
        None => (body, None),
    };
    let bad = || Error::invalid(format!("unsupported format spec {spec:?} in a checkpoint filename"));
    let width: usize = if width.is_empty() { 0 } else { width.parse().map_err(|_| bad())? };
    let precision: Option<usize> = match precision {
        Some(p) => Some(p.parse().map_err(|_| bad())?),
        None => None,
    };
    // A file name holds at most 255 bytes: wider fields cannot be used.
    if width > MAX_FIELD || precision.is_some_and(|p| p > MAX_FIELD) {
        return Err(Error::invalid(format!(
            "format spec {spec:?} in a checkpoint filename: width and precision must be at most {MAX_FIELD}"
        )));
    }
    let text = match kind {
        'f' => format!("{:.*}", precision.unwrap_or(6), v),
        'e' => {
            let s = format!("{:.*e}", precision.unwrap_or(6), v);
            // Python writes the exponent with a sign and two digits.
            match s.split_once('e') {
                Some((m, e)) => {
                    let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
                    format!("{m}e{sign}{digits:0>2}")
                }
                None => s,
            }
        }
        'd' => format!("{}", v as i64),
        _ => match precision {
            Some(p) => format!("{:.*}", p, v),
            None => format!("{v}"),
        },
    };
    Ok(if text.len() >= width {
        text
    } else if zero {
        let (sign, digits) = text.strip_prefix('-').map_or(("", text.as_str()), |d| ("-", d));
        format!("{sign}{digits:0>w$}", w = width - sign.len())
    } else {
        format!("{text:>width$}")
    })
}

/// Formats `template` with `metrics` (which should hold `epoch` and `step`).
pub fn format_name(template: &str, metrics: &BTreeMap<String, f64>, auto_insert_metric_name: bool) -> Result<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| Error::invalid(format!("unclosed '{{' in checkpoint filename {template:?}")))?
            + open;
        let field = &rest[open + 1..close];
        let (name, spec) = field.split_once(':').unwrap_or((field, ""));
        if name.is_empty() {
            return Err(Error::invalid(format!("empty field in checkpoint filename {template:?}")));
        }
        let value = metrics.get(name).copied().unwrap_or(0.0);
        let is_int = name == "epoch" || name == "step";
        if auto_insert_metric_name {
            out.push_str(name);
            out.push('=');
        }
        out.push_str(&format_value(value, spec, is_int)?);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out.replace('/', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> BTreeMap<String, f64> {
        BTreeMap::from([("epoch".into(), 3.0), ("step".into(), 120.0), ("val_loss".into(), 0.123456)])
    }

    #[test]
    fn lightning_default_and_metric_templates() {
        assert_eq!(format_name("{epoch}-{step}", &m(), true).unwrap(), "epoch=3-step=120");
        assert_eq!(format_name("{epoch}-{val_loss:.3f}", &m(), true).unwrap(), "epoch=3-val_loss=0.123");
        assert_eq!(format_name("best-{epoch:02d}", &m(), false).unwrap(), "best-03");
        assert_eq!(format_name("{val_loss:.2e}", &m(), false).unwrap(), "1.23e-01");
        assert_eq!(format_name("{missing}", &m(), true).unwrap(), "missing=0");
        assert!(format_name("{epoch", &m(), true).is_err());
        for huge in
            ["{epoch:999999999999d}", "{val_loss:.999999999f}", "{epoch:129d}", "{val_loss:.18446744073709551615f}"]
        {
            let e = format_name(huge, &m(), true).unwrap_err();
            assert_eq!(e.code, crate::error::ErrorCode::InvalidArgument, "{huge}");
        }
        assert_eq!(format_name("{epoch:03d}", &m(), false).unwrap(), "003");
    }
}

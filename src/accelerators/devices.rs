//! The `devices` argument, parsed as Lightning's device parser does
//! (`lightning/fabric/utilities/device_parser.py`), and the parsed result.
use crate::error::{Error, ErrorCode, Result};

/// What the user asked for with `devices`, before an accelerator checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevicesSpec {
    /// `"auto"`: as many as the accelerator's `auto_device_count`.
    Auto,
    /// `-1` / `"-1"`: every available device.
    All,
    /// `N` / `"N"`: a number of devices (GPUs `0..N`, or CPU processes).
    Count(usize),
    /// `[1, 3]` / `"1,3"` / `"1,"`: explicit device ids.
    Indices(Vec<usize>),
}

/// A `devices` value an accelerator accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedDevices {
    /// A number of processes or devices (CPU processes, or XLA cores).
    Count(usize),
    /// Explicit device ids, in the order given.
    Indices(Vec<usize>),
}

impl ParsedDevices {
    /// How many devices (and so processes) this selects.
    pub fn len(&self) -> usize {
        match self {
            ParsedDevices::Count(n) => *n,
            ParsedDevices::Indices(ids) => ids.len(),
        }
    }

    /// Whether nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The largest device or process count fulmen accepts (a bound on what
/// parsing `devices` may allocate; far above any real machine or node).
pub const MAX_DEVICES: usize = 1 << 16;

fn count(value: &dyn std::fmt::Display, n: usize) -> Result<DevicesSpec> {
    if n > MAX_DEVICES {
        return Err(Error::invalid(format!(
            "devices={value} is not valid: the count is too large (at most {MAX_DEVICES} devices or processes)"
        )));
    }
    Ok(DevicesSpec::Count(n))
}

const FORMS: &str =
    "expected \"auto\", a positive count N, -1 for all devices, or device ids as a list \"[1, 3]\" or \"1,3\" / \"1,\"";

impl DevicesSpec {
    /// Parses the user's `devices` value as a string, as Lightning's
    /// `_normalize_parse_gpu_string_input`: `"auto"`, `"-1"` (all), `"N"` (a
    /// count), `"1,3"` or `"1,"` (ids, because of the comma) and `"[1, 3]"`
    /// (ids). `"0"` parses as `Count(0)`, which every accelerator rejects.
    pub fn parse(value: &str) -> Result<DevicesSpec> {
        let text = value.trim();
        if text.eq_ignore_ascii_case("auto") {
            return Ok(DevicesSpec::Auto);
        }
        if text == "-1" {
            return Ok(DevicesSpec::All);
        }
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return parse_id_list(value, inner);
        }
        if text.contains(',') {
            return parse_id_list(value, text);
        }
        if let Some(rest) = text.strip_prefix('-') {
            if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::invalid(format!(
                    "devices={value:?} is not valid: -1 selects all devices, other negative values are not allowed"
                )));
            }
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            let n = text.parse::<usize>().map_err(|_| {
                Error::invalid(format!(
                    "devices={value:?} is not valid: the count is too large (at most {MAX_DEVICES} devices or processes)"
                ))
            })?;
            return count(&format!("{value:?}"), n);
        }
        Err(Error::invalid(format!("devices={value:?} is not valid: {FORMS}")))
    }

    /// The integer form: `-1` is all devices, `N >= 0` a count.
    pub fn from_int(value: i64) -> Result<DevicesSpec> {
        match value {
            -1 => Ok(DevicesSpec::All),
            v if v >= 0 => count(&v, usize::try_from(v).unwrap_or(usize::MAX)),
            v => Err(Error::invalid(format!(
                "devices={v} is not valid: -1 selects all devices, other negative values are not allowed"
            ))),
        }
    }

    /// How the value reads in messages (`"auto"`, `-1`, `2`, `[1, 3]`).
    pub fn describe(&self) -> String {
        match self {
            DevicesSpec::Auto => "\"auto\"".to_string(),
            DevicesSpec::All => "-1".to_string(),
            DevicesSpec::Count(n) => n.to_string(),
            DevicesSpec::Indices(ids) => format!("{ids:?}"),
        }
    }
}

impl DevicesSpec {
    /// The value as text that [`DevicesSpec::parse`] reads back: "auto",
    /// "-1", a count "N", or ids "0,2" ("1," for a single id).
    pub fn to_text(&self) -> String {
        match self {
            DevicesSpec::Auto => "auto".to_string(),
            DevicesSpec::All => "-1".to_string(),
            DevicesSpec::Count(n) => n.to_string(),
            DevicesSpec::Indices(ids) if ids.len() == 1 => format!("{},", ids[0]),
            DevicesSpec::Indices(ids) => ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","),
        }
    }
}

/// Parses comma-separated ids, skipping empty items (`"1,"` is `[1]`).
fn parse_id_list(original: &str, list: &str) -> Result<DevicesSpec> {
    let mut ids = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let id = item.parse::<usize>().map_err(|_| {
            Error::invalid(format!(
                "devices={original:?} is not valid: device id {item:?} is not a non-negative integer ({FORMS})"
            ))
        })?;
        ids.push(id);
    }
    Ok(DevicesSpec::Indices(ids))
}

/// Lightning's `_check_unique`: device ids must not repeat.
pub fn check_unique(accelerator: &str, ids: &[usize]) -> Result<()> {
    for (i, id) in ids.iter().enumerate() {
        if ids[..i].contains(id) {
            return Err(Error::invalid(format!(
                "devices={ids:?} for the {accelerator} accelerator: device ids must be unique, {id} appears twice"
            )));
        }
    }
    Ok(())
}

/// Lightning's `_parse_gpu_ids` + `_sanitize_gpu_ids` for an accelerator
/// whose devices are numbered `0..available`: `"auto"` and `-1` select all,
/// `N` selects `0..N`, a list selects those ids; ids must be unique and
/// exist, and 0 devices or an empty list is an error.
pub fn parse_indexed_devices(accelerator: &str, spec: &DevicesSpec, available: usize) -> Result<ParsedDevices> {
    if available > MAX_DEVICES {
        return Err(Error::new(
            ErrorCode::Unavailable,
            format!("the {accelerator} accelerator reports {available} devices; fulmen accepts at most {MAX_DEVICES}"),
        ));
    }
    let have = describe_available(accelerator, available);
    let ids: Vec<usize> = match spec {
        DevicesSpec::Count(0) => {
            return Err(Error::invalid(format!(
            "devices=0 is not a valid input using the {accelerator} accelerator: ask for at least one device ({have})"
        )))
        }
        DevicesSpec::Indices(ids) if ids.is_empty() => {
            return Err(Error::invalid(format!(
            "devices=[] is not a valid input using the {accelerator} accelerator: list at least one device id ({have})"
        )))
        }
        DevicesSpec::Auto | DevicesSpec::All => (0..available).collect(),
        DevicesSpec::Count(n) => (0..*n).collect(),
        DevicesSpec::Indices(ids) => ids.clone(),
    };
    if ids.is_empty() {
        return Err(Error::new(
            ErrorCode::Unavailable,
            format!(
                "devices={} requested for the {accelerator} accelerator but none are available ({have})",
                spec.describe()
            ),
        ));
    }
    check_unique(accelerator, &ids)?;
    if let Some(missing) = ids.iter().find(|id| **id >= available) {
        return Err(Error::new(
            ErrorCode::Unavailable,
            format!(
                "devices={} for the {accelerator} accelerator: device {missing} does not exist ({have})",
                spec.describe()
            ),
        ));
    }
    Ok(ParsedDevices::Indices(ids))
}

/// Lightning's `_parse_cpu_cores`: CPU devices are a number of processes,
/// a positive int (or its string); `"auto"` is 1.
pub fn parse_process_count(accelerator: &str, spec: &DevicesSpec) -> Result<ParsedDevices> {
    match spec {
        DevicesSpec::Auto => Ok(ParsedDevices::Count(1)),
        DevicesSpec::Count(n) if *n > 0 => Ok(ParsedDevices::Count(*n)),
        other => Err(Error::invalid(format!(
            "devices={} is not valid for the {accelerator} accelerator: its devices are a number of processes, \
             an int > 0 (or \"auto\" for 1); device ids and -1 are not accepted",
            other.describe()
        ))),
    }
}

/// `"N device(s) available: [0, 1]"` or `"no device is available"`.
fn describe_available(accelerator: &str, available: usize) -> String {
    if available == 0 {
        format!("this machine has no {accelerator} device")
    } else {
        format!("this machine has {available} {accelerator} device(s): {:?}", (0..available).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[usize]) -> DevicesSpec {
        DevicesSpec::Indices(v.to_vec())
    }

    #[test]
    fn parses_every_accepted_form() {
        assert_eq!(DevicesSpec::parse("auto").unwrap(), DevicesSpec::Auto);
        assert_eq!(DevicesSpec::parse(" AUTO ").unwrap(), DevicesSpec::Auto);
        assert_eq!(DevicesSpec::parse("-1").unwrap(), DevicesSpec::All);
        assert_eq!(DevicesSpec::parse("2").unwrap(), DevicesSpec::Count(2));
        assert_eq!(DevicesSpec::parse(" 1 ").unwrap(), DevicesSpec::Count(1));
        assert_eq!(DevicesSpec::parse("0").unwrap(), DevicesSpec::Count(0));
        assert_eq!(DevicesSpec::parse("1,3").unwrap(), ids(&[1, 3]));
        assert_eq!(DevicesSpec::parse("1, 3").unwrap(), ids(&[1, 3]));
        assert_eq!(DevicesSpec::parse("1,").unwrap(), ids(&[1]));
        assert_eq!(DevicesSpec::parse("[0, 2]").unwrap(), ids(&[0, 2]));
        assert_eq!(DevicesSpec::parse("[1]").unwrap(), ids(&[1]));
        assert_eq!(DevicesSpec::parse("[]").unwrap(), ids(&[]));
        assert_eq!(DevicesSpec::from_int(-1).unwrap(), DevicesSpec::All);
        assert_eq!(DevicesSpec::from_int(3).unwrap(), DevicesSpec::Count(3));
    }

    #[test]
    fn rejects_malformed_values_with_the_accepted_forms() {
        for bad in ["", "abc", "1.5", "1,x", "two", "-1,2", "[a]"] {
            let err = DevicesSpec::parse(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument, "{bad}");
            assert!(err.message.contains("auto") && err.message.contains("1,3"), "{bad}: {}", err.message);
        }
        let err = DevicesSpec::parse("-2").unwrap_err();
        assert!(err.message.contains("-1 selects all devices"), "{}", err.message);
        assert!(DevicesSpec::from_int(-3).unwrap_err().message.contains("-1 selects all devices"));
        assert!(DevicesSpec::parse("99999999999999999999999").unwrap_err().message.contains("too large"));
        for huge in ["100000000000", "65537"] {
            let err = DevicesSpec::parse(huge).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument, "{huge}");
            assert!(err.message.contains("too large"), "{huge}: {}", err.message);
        }
        assert!(DevicesSpec::from_int(100_000_000_000).unwrap_err().message.contains("too large"));
        assert_eq!(DevicesSpec::parse("65536").unwrap(), DevicesSpec::Count(MAX_DEVICES));
    }

    #[test]
    fn indexed_devices_follow_lightning() {
        let p = |s: &str, n: usize| parse_indexed_devices("cuda", &DevicesSpec::parse(s).unwrap(), n);
        assert_eq!(p("auto", 4).unwrap(), ParsedDevices::Indices(vec![0, 1, 2, 3]));
        assert_eq!(p("-1", 2).unwrap(), ParsedDevices::Indices(vec![0, 1]));
        assert_eq!(p("2", 4).unwrap(), ParsedDevices::Indices(vec![0, 1]));
        assert_eq!(p("1", 4).unwrap(), ParsedDevices::Indices(vec![0]));
        assert_eq!(p("1,", 4).unwrap(), ParsedDevices::Indices(vec![1]));
        assert_eq!(p("3,1", 4).unwrap(), ParsedDevices::Indices(vec![3, 1]));
        assert_eq!(p("3,1", 4).unwrap().len(), 2);

        let err = p("0", 4).unwrap_err();
        assert!(err.message.contains("devices=0 is not a valid input using the cuda accelerator"), "{}", err.message);
        assert!(err.message.contains("4 cuda device(s): [0, 1, 2, 3]"), "{}", err.message);
        assert!(p("[]", 4).unwrap_err().message.contains("devices=[]"));
        let err = p("1,1", 4).unwrap_err();
        assert!(err.message.contains("must be unique, 1 appears twice"), "{}", err.message);
        let err = p("0,5", 2).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(
            err.message.contains("device 5 does not exist (this machine has 2 cuda device(s): [0, 1])"),
            "{}",
            err.message
        );
        let err = p("3", 2).unwrap_err();
        assert!(err.message.contains("device 2 does not exist"), "{}", err.message);
        let err = p("auto", 0).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("none are available (this machine has no cuda device)"), "{}", err.message);
    }

    #[test]
    fn cpu_devices_are_a_process_count() {
        let p = |s: &str| parse_process_count("cpu", &DevicesSpec::parse(s).unwrap());
        assert_eq!(p("auto").unwrap(), ParsedDevices::Count(1));
        assert_eq!(p("3").unwrap(), ParsedDevices::Count(3));
        for bad in ["0", "-1", "1,3", "1,", "[0]"] {
            let err = p(bad).unwrap_err();
            assert!(err.message.contains("an int > 0"), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn unique_check() {
        assert!(check_unique("cuda", &[0, 1, 2]).is_ok());
        assert!(check_unique("cuda", &[2, 0, 2]).is_err());
    }
}

//! The lines of an offline experiment's `messages.json`, as comet_ml's
//! offline streamer writes them: one compact JSON object per line
//! (`{"payload": {...}, "type": "..."}`, keys sorted), each payload
//! numbered by `message_id` from 1.
use serde_json::{json, Map, Value};

/// The longest parameter, metric or other name comet_ml keeps
/// (`MAXIMAL_KEY_LENGTH`).
pub(crate) const MAX_KEY: usize = 100;
/// The longest text value comet_ml keeps (`MAXIMAL_VALUE_LENGTH`).
pub(crate) const MAX_VALUE: usize = 1000;
/// What comet_ml puts at the end of a text it cut.
const TRUNCATED: &str = " [truncated]";

/// Where a parameter came from (comet_ml's `source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Logged by the user (`log_hyperparams`).
    Manual,
    /// Logged by the logger itself (`curr_step`, `curr_epoch`).
    Auto,
}

impl Source {
    fn text(self) -> &'static str {
        match self {
            Source::Manual => "manual",
            Source::Auto => "auto-logged",
        }
    }
}

/// `text` cut to `max` characters as comet_ml cuts names and values: the
/// first `max - 12` characters and " [truncated]".
pub fn truncated(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(TRUNCATED.chars().count());
    let mut out: String = text.chars().take(keep).collect();
    out.push_str(TRUNCATED);
    out
}

/// A metric's value: a finite number as itself; NaN and the infinities as
/// the strings "NaN", "Infinity" and "-Infinity" (comet_ml writes NaN as
/// null, which its own upload's schema then refuses).
pub fn metric_value(v: f64) -> Value {
    match serde_json::Number::from_f64(v) {
        Some(n) => Value::Number(n),
        None if v.is_nan() => Value::String("NaN".into()),
        None => Value::String(if v > 0.0 { "Infinity" } else { "-Infinity" }.into()),
    }
}

/// A hyperparameter's text as comet_ml types a value: a plain number,
/// `true` or `false` as itself, anything else a string cut to
/// [`MAX_VALUE`] characters.
pub fn param_value(text: &str) -> Value {
    // Plain as hparams.yaml writes it: a number or boolean JSON reads too.
    let plain = crate::loggers::yaml::value(text) == text;
    match serde_json::from_str::<Value>(text) {
        Ok(v) if plain => v,
        _ => Value::String(truncated(text, MAX_VALUE)),
    }
}

/// A step or epoch: a number, or null before one is known.
fn counter(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::from)
}

/// One line: `payload` with its `message_id` (and `local_timestamp` in
/// milliseconds when given) under `type`.
fn line(kind: &str, mut payload: Map<String, Value>, id: u64, timestamp: Option<i64>) -> String {
    payload.insert("message_id".into(), Value::from(id));
    if let Some(t) = timestamp {
        payload.insert("local_timestamp".into(), Value::from(t));
    }
    let mut outer = Map::new();
    outer.insert("payload".into(), Value::Object(payload));
    outer.insert("type".into(), Value::String(kind.into()));
    Value::Object(outer).to_string()
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A `log_other` message: `key` = `value` (the "Others" tab).
pub fn log_other(id: u64, key: &str, value: Value) -> String {
    line("log_other", object(json!({ "key": truncated(key, MAX_KEY), "value": value })), id, None)
}

/// A `parameter_msg`: parameter `name` = `value` at `step` from `source`.
pub fn parameter(id: u64, timestamp: i64, name: &str, value: Value, step: Option<i64>, source: Source) -> String {
    let param = json!({ "paramName": name, "paramValue": value, "source": source.text(), "step": counter(step) });
    line("parameter_msg", object(json!({ "param": param })), id, Some(timestamp))
}

/// A `metric_msg`: metric `name` = `value` at `step` in `epoch` (null
/// before one is known).
pub fn metric(id: u64, timestamp: i64, name: &str, value: Value, step: Option<i64>, epoch: Value) -> String {
    let metric = json!({ "epoch": epoch, "metricName": name, "metricValue": value, "step": counter(step) });
    line("metric_msg", object(json!({ "metric": metric })), id, Some(timestamp))
}

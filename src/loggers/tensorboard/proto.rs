//! Hand-written protobuf (proto3) encoding of the few messages an event file
//! needs: `tensorflow.Event`, `Summary`, `Summary.Value`, `SummaryMetadata`,
//! its `PluginData`, the hparams plugin's `HParamsPluginData` and what it
//! holds, and `google.protobuf.Value`. Fields at their proto3 default are
//! left out, except members of a `oneof`, which are written when set, as
//! Python's `SerializeToString` does; fields go out in field-number order.

/// Wire type of varint fields (ints, enums, bools).
const VARINT: u32 = 0;
/// Wire type of 64-bit fields (double).
const FIXED64: u32 = 1;
/// Wire type of length-delimited fields (strings, bytes, messages).
const LEN: u32 = 2;
/// Wire type of 32-bit fields (float).
const FIXED32: u32 = 5;

/// A protobuf message that can append its encoding to a buffer.
pub trait Message {
    /// Appends the encoded message (without a length prefix) to `buf`.
    fn encode_to(&self, buf: &mut Vec<u8>);

    /// The encoded message.
    fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        self.encode_to(&mut buf);
        buf
    }
}

/// Appends `v` as a base-128 varint.
fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn put_key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(buf, u64::from((field << 3) | wire));
}

/// Appends a varint field (int32/int64/enum/bool; negatives as 10 bytes).
fn put_int(buf: &mut Vec<u8>, field: u32, v: i64) {
    put_key(buf, field, VARINT);
    put_varint(buf, v as u64);
}

fn put_double(buf: &mut Vec<u8>, field: u32, v: f64) {
    put_key(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_float(buf: &mut Vec<u8>, field: u32, v: f32) {
    put_key(buf, field, FIXED32);
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    put_key(buf, field, LEN);
    put_varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

fn put_message(buf: &mut Vec<u8>, field: u32, m: &impl Message) {
    put_bytes(buf, field, &m.encode());
}

/// Proto3 implicit presence: a string field is written only when non-empty.
fn put_str_opt(buf: &mut Vec<u8>, field: u32, v: &str) {
    if !v.is_empty() {
        put_bytes(buf, field, v.as_bytes());
    }
}

/// `tensorflow.Event`: one record of an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the Unix epoch (field 1).
    pub wall_time: f64,
    /// Global step (field 2).
    pub step: i64,
    /// The `what` oneof.
    pub what: EventWhat,
}

/// The `what` oneof of `tensorflow.Event`.
#[derive(Debug, Clone, PartialEq)]
pub enum EventWhat {
    /// `file_version` (field 3), e.g. `"brain.Event:2"`.
    FileVersion(String),
    /// `summary` (field 5).
    Summary(Summary),
}

impl Message for Event {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        if self.wall_time != 0.0 {
            put_double(buf, 1, self.wall_time);
        }
        if self.step != 0 {
            put_int(buf, 2, self.step);
        }
        match &self.what {
            EventWhat::FileVersion(v) => put_bytes(buf, 3, v.as_bytes()),
            EventWhat::Summary(s) => put_message(buf, 5, s),
        }
    }
}

/// `tensorflow.Summary`: a list of tagged values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    /// `value` (field 1, repeated).
    pub value: Vec<SummaryValue>,
}

impl Message for Summary {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        for v in &self.value {
            put_message(buf, 1, v);
        }
    }
}

/// `tensorflow.Summary.Value`: a tag with a scalar or plugin metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryValue {
    /// `tag` (field 1).
    pub tag: String,
    /// `simple_value` (field 2, in the `value` oneof).
    pub simple_value: Option<f32>,
    /// `metadata` (field 9).
    pub metadata: Option<SummaryMetadata>,
}

impl Message for SummaryValue {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, &self.tag);
        if let Some(v) = self.simple_value {
            put_float(buf, 2, v);
        }
        if let Some(m) = &self.metadata {
            put_message(buf, 9, m);
        }
    }
}

/// `tensorflow.SummaryMetadata`, with only its plugin data.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryMetadata {
    /// `plugin_data` (field 1).
    pub plugin_data: PluginData,
}

impl Message for SummaryMetadata {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_message(buf, 1, &self.plugin_data);
    }
}

/// `tensorflow.SummaryMetadata.PluginData`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PluginData {
    /// `plugin_name` (field 1), e.g. `"hparams"`.
    pub plugin_name: String,
    /// `content` (field 2): the plugin's own serialized message.
    pub content: Vec<u8>,
}

impl Message for PluginData {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, &self.plugin_name);
        if !self.content.is_empty() {
            put_bytes(buf, 2, &self.content);
        }
    }
}

/// `tensorboard.hparams.HParamsPluginData`.
#[derive(Debug, Clone, PartialEq)]
pub struct HParamsPluginData {
    /// `version` (field 1); torch writes 0.
    pub version: i32,
    /// The `data` oneof.
    pub data: HParamsData,
}

/// The `data` oneof of `HParamsPluginData`.
#[derive(Debug, Clone, PartialEq)]
pub enum HParamsData {
    /// `experiment` (field 2).
    Experiment(Experiment),
    /// `session_start_info` (field 3).
    SessionStartInfo(SessionStartInfo),
    /// `session_end_info` (field 4).
    SessionEndInfo(SessionEndInfo),
}

impl Message for HParamsPluginData {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        if self.version != 0 {
            put_int(buf, 1, i64::from(self.version));
        }
        match &self.data {
            HParamsData::Experiment(m) => put_message(buf, 2, m),
            HParamsData::SessionStartInfo(m) => put_message(buf, 3, m),
            HParamsData::SessionEndInfo(m) => put_message(buf, 4, m),
        }
    }
}

/// `tensorboard.hparams.Experiment`: the hparams and metrics of the table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Experiment {
    /// `hparam_infos` (field 4, repeated).
    pub hparam_infos: Vec<HParamInfo>,
    /// `metric_infos` (field 5, repeated).
    pub metric_infos: Vec<MetricInfo>,
}

impl Message for Experiment {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        for h in &self.hparam_infos {
            put_message(buf, 4, h);
        }
        for m in &self.metric_infos {
            put_message(buf, 5, m);
        }
    }
}

/// `tensorboard.hparams.DataType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// `DATA_TYPE_STRING`.
    String = 1,
    /// `DATA_TYPE_BOOL`.
    Bool = 2,
    /// `DATA_TYPE_FLOAT64`.
    Float64 = 3,
}

/// `tensorboard.hparams.HParamInfo` (name and type; no domain).
#[derive(Debug, Clone, PartialEq)]
pub struct HParamInfo {
    /// `name` (field 1).
    pub name: String,
    /// `type` (field 4).
    pub data_type: DataType,
}

impl Message for HParamInfo {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, &self.name);
        put_int(buf, 4, self.data_type as i64);
    }
}

/// `tensorboard.hparams.MetricInfo`, with only its `MetricName`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricInfo {
    /// `name.group` (`MetricName` field 1).
    pub group: String,
    /// `name.tag` (`MetricName` field 2): the scalar's tag.
    pub tag: String,
}

/// `tensorboard.hparams.MetricName`.
struct MetricName<'a> {
    group: &'a str,
    tag: &'a str,
}

impl Message for MetricName<'_> {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, self.group);
        put_str_opt(buf, 2, self.tag);
    }
}

impl Message for MetricInfo {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_message(buf, 1, &MetricName { group: &self.group, tag: &self.tag });
    }
}

/// `tensorboard.hparams.SessionStartInfo`: one run's hparam values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionStartInfo {
    /// `hparams` (field 1, `map<string, google.protobuf.Value>`).
    pub hparams: Vec<(String, ProtoValue)>,
}

/// One entry of a protobuf map<string, google.protobuf.Value>.
struct MapEntry<'a> {
    key: &'a str,
    value: &'a ProtoValue,
}

impl Message for MapEntry<'_> {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, self.key);
        put_message(buf, 2, self.value);
    }
}

impl Message for SessionStartInfo {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        for (key, value) in &self.hparams {
            put_message(buf, 1, &MapEntry { key, value });
        }
    }
}

/// `tensorboard.hparams.Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `STATUS_UNKNOWN`.
    Unknown = 0,
    /// `STATUS_SUCCESS`.
    Success = 1,
    /// `STATUS_FAILURE`.
    Failure = 2,
    /// `STATUS_RUNNING`.
    Running = 3,
}

/// `tensorboard.hparams.SessionEndInfo`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEndInfo {
    /// `status` (field 1).
    pub status: Status,
}

impl Message for SessionEndInfo {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        if self.status != Status::Unknown {
            put_int(buf, 1, self.status as i64);
        }
    }
}

/// `google.protobuf.Value` (the kinds an hparam can have).
#[derive(Debug, Clone, PartialEq)]
pub enum ProtoValue {
    /// `number_value` (field 2).
    Number(f64),
    /// `string_value` (field 3).
    String(String),
    /// `bool_value` (field 4).
    Bool(bool),
}

impl Message for ProtoValue {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        match self {
            ProtoValue::Number(v) => put_double(buf, 2, *v),
            ProtoValue::String(s) => put_bytes(buf, 3, s.as_bytes()),
            ProtoValue::Bool(b) => put_int(buf, 4, i64::from(*b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut buf = Vec::new();
        put_varint(&mut buf, 300);
        assert_eq!(buf, [0xAC, 0x02]);
        buf.clear();
        put_int(&mut buf, 2, -1);
        assert_eq!(buf.len(), 11);
    }

    #[test]
    fn file_version_event() {
        let e = Event { wall_time: 0.0, step: 0, what: EventWhat::FileVersion("brain.Event:2".into()) };
        let mut expected = vec![0x1A, 13];
        expected.extend_from_slice(b"brain.Event:2");
        assert_eq!(e.encode(), expected);
    }

    #[test]
    fn scalar_zero_is_written() {
        // simple_value is in a oneof, so 0.0 must still be on the wire.
        let v = SummaryValue { tag: "a".into(), simple_value: Some(0.0), metadata: None };
        assert_eq!(v.encode(), [0x0A, 1, b'a', 0x15, 0, 0, 0, 0]);
    }

    #[test]
    fn hparam_values() {
        assert_eq!(ProtoValue::Bool(false).encode(), [0x20, 0]);
        assert_eq!(ProtoValue::String(String::new()).encode(), [0x1A, 0]);
        let mut n = vec![0x11];
        n.extend_from_slice(&0.5f64.to_le_bytes());
        assert_eq!(ProtoValue::Number(0.5).encode(), n);
        let ssi = SessionStartInfo { hparams: vec![("lr".into(), ProtoValue::Bool(true))] };
        assert_eq!(ssi.encode(), [0x0A, 8, 0x0A, 2, b'l', b'r', 0x12, 2, 0x20, 1]);
    }
}

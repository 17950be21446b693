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
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends a field's key (its number and wire type).
pub(crate) fn put_key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(buf, u64::from((field << 3) | wire));
}

/// Appends a varint field (int32/int64/enum/bool; negatives as 10 bytes).
pub(crate) fn put_int(buf: &mut Vec<u8>, field: u32, v: i64) {
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

/// Appends a length-delimited field (string, bytes).
pub(crate) fn put_bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    put_key(buf, field, LEN);
    put_varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

/// Appends a message field (length-delimited).
pub(crate) fn put_message(buf: &mut Vec<u8>, field: u32, m: &impl Message) {
    put_bytes(buf, field, &m.encode());
}

/// Proto3 implicit presence: a string field is written only when non-empty.
pub(crate) fn put_str_opt(buf: &mut Vec<u8>, field: u32, v: &str) {
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

/// `tensorflow.Summary.Value`: a tag with a scalar, an image, a
/// histogram or a tensor (one of them, the `value` oneof), and metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryValue {
    /// `tag` (field 1).
    pub tag: String,
    /// `simple_value` (field 2).
    pub simple_value: Option<f32>,
    /// `image` (field 4).
    pub image: Option<SummaryImage>,
    /// `histo` (field 5).
    pub histo: Option<HistogramProto>,
    /// `tensor` (field 8).
    pub tensor: Option<TensorProto>,
    /// `metadata` (field 9).
    pub metadata: Option<SummaryMetadata>,
}

impl Message for SummaryValue {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, &self.tag);
        if let Some(v) = self.simple_value {
            put_float(buf, 2, v);
        }
        if let Some(m) = &self.image {
            put_message(buf, 4, m);
        }
        if let Some(m) = &self.histo {
            put_message(buf, 5, m);
        }
        if let Some(m) = &self.tensor {
            put_message(buf, 8, m);
        }
        if let Some(m) = &self.metadata {
            put_message(buf, 9, m);
        }
    }
}

/// `tensorflow.Summary.Image`: an encoded (PNG) image and its size.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryImage {
    /// `height` (field 1).
    pub height: i32,
    /// `width` (field 2).
    pub width: i32,
    /// `colorspace` (field 3): 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA.
    pub colorspace: i32,
    /// `encoded_image_string` (field 4).
    pub encoded: Vec<u8>,
}

impl Message for SummaryImage {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        for (field, v) in [(1, self.height), (2, self.width), (3, self.colorspace)] {
            if v != 0 {
                put_int(buf, field, i64::from(v));
            }
        }
        if !self.encoded.is_empty() {
            put_bytes(buf, 4, &self.encoded);
        }
    }
}

/// `tensorflow.HistogramProto`: bucket `i` counts the values up to
/// `bucket_limit[i]` (above the previous limit).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramProto {
    /// `min` (field 1).
    pub min: f64,
    /// `max` (field 2).
    pub max: f64,
    /// `num` (field 3).
    pub num: f64,
    /// `sum` (field 4).
    pub sum: f64,
    /// `sum_squares` (field 5).
    pub sum_squares: f64,
    /// `bucket_limit` (field 6, packed).
    pub bucket_limit: Vec<f64>,
    /// `bucket` (field 7, packed).
    pub bucket: Vec<f64>,
}

/// Appends a packed `repeated double` field (nothing when empty).
fn put_packed_doubles(buf: &mut Vec<u8>, field: u32, values: &[f64]) {
    if values.is_empty() {
        return;
    }
    put_key(buf, field, LEN);
    put_varint(buf, (values.len() * 8) as u64);
    for v in values {
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

impl Message for HistogramProto {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        let scalars = [self.min, self.max, self.num, self.sum, self.sum_squares];
        for (field, v) in (1u32..).zip(scalars) {
            // Proto3: a double at its default (+0.0) is left out.
            if v != 0.0 || v.is_sign_negative() {
                put_double(buf, field, v);
            }
        }
        put_packed_doubles(buf, 6, &self.bucket_limit);
        put_packed_doubles(buf, 7, &self.bucket);
    }
}

/// `tensorflow.DataType.DT_STRING`.
pub(crate) const DT_STRING: i64 = 7;

/// `tensorflow.TensorProto` holding strings: a 1-D string tensor, as
/// torch's `summary.text` writes one.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TensorProto {
    /// `string_val` (field 8): the strings, shape `[len]`.
    pub strings: Vec<Vec<u8>>,
}

impl Message for TensorProto {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_int(buf, 1, DT_STRING);
        // tensor_shape (2) { dim (2) { size (1) } }
        let mut dim = Vec::new();
        if !self.strings.is_empty() {
            put_int(&mut dim, 1, self.strings.len() as i64);
        }
        let mut shape = Vec::new();
        put_bytes(&mut shape, 2, &dim);
        put_bytes(buf, 2, &shape);
        for s in &self.strings {
            put_bytes(buf, 8, s);
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
        let v = SummaryValue { tag: "a".into(), simple_value: Some(0.0), ..Default::default() };
        assert_eq!(v.encode(), [0x0A, 1, b'a', 0x15, 0, 0, 0, 0]);
    }

    #[test]
    fn media_messages() {
        // Bytes of the same messages serialized by Python's protobuf.
        let h = HistogramProto { min: 1.0, bucket_limit: vec![1.0, 2.0], bucket: vec![0.0, 3.0], ..Default::default() };
        let mut want = vec![0x09];
        want.extend_from_slice(&1.0f64.to_le_bytes());
        want.extend_from_slice(&[0x32, 16]);
        want.extend(1.0f64.to_le_bytes().into_iter().chain(2.0f64.to_le_bytes()));
        want.extend_from_slice(&[0x3A, 16]);
        want.extend(0.0f64.to_le_bytes().into_iter().chain(3.0f64.to_le_bytes()));
        assert_eq!(h.encode(), want);
        let t = TensorProto { strings: vec![b"hi".to_vec()] };
        assert_eq!(t.encode(), [0x08, 7, 0x12, 4, 0x12, 2, 0x08, 1, 0x42, 2, b'h', b'i']);
        let i = SummaryImage { height: 2, width: 3, colorspace: 3, encoded: vec![9] };
        assert_eq!(i.encode(), [0x08, 2, 0x10, 3, 0x18, 3, 0x22, 1, 9]);
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

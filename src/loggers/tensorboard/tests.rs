//! Reads event files back (TFRecord framing, CRCs, and the protobufs decoded
//! by a minimal parser) to check what the logger wrote.
use super::record::read_record;
use super::writer::FILE_VERSION;
use super::TensorBoardLogger;
use crate::error::ErrorCode;
use crate::loggers::logger::{next_version_dir, Logger};
use crate::test_dirs::TempDir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A decoded protobuf field value.
#[derive(Debug, Clone)]
enum Wire {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(Vec<u8>),
    Fixed32([u8; 4]),
}

fn varint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

/// All fields of a message, in wire order.
fn fields(bytes: &[u8]) -> Vec<(u32, Wire)> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < bytes.len() {
        let key = varint(bytes, &mut pos);
        let field = (key >> 3) as u32;
        let value = match key & 7 {
            0 => Wire::Varint(varint(bytes, &mut pos)),
            1 => {
                pos += 8;
                Wire::Fixed64(bytes[pos - 8..pos].try_into().unwrap())
            }
            2 => {
                let len = varint(bytes, &mut pos) as usize;
                pos += len;
                Wire::Bytes(bytes[pos - len..pos].to_vec())
            }
            5 => {
                pos += 4;
                Wire::Fixed32(bytes[pos - 4..pos].try_into().unwrap())
            }
            w => panic!("unexpected wire type {w}"),
        };
        out.push((field, value));
    }
    out
}

fn bytes_of(w: &Wire) -> &[u8] {
    match w {
        Wire::Bytes(b) => b,
        other => panic!("expected bytes, got {other:?}"),
    }
}

fn text_of(w: &Wire) -> String {
    String::from_utf8(bytes_of(w).to_vec()).unwrap()
}

fn field(msg: &[(u32, Wire)], n: u32) -> Option<&Wire> {
    msg.iter().find(|(f, _)| *f == n).map(|(_, w)| w)
}

/// One summary value as read back.
#[derive(Debug, Clone, PartialEq)]
struct ReadValue {
    tag: String,
    simple_value: Option<f32>,
    plugin: Option<(String, Vec<u8>)>,
    /// The image (4), histogram (5) or tensor (8) field, its number and bytes.
    media: Option<(u32, Vec<u8>)>,
}

/// One event as read back.
#[derive(Debug, Clone)]
struct ReadEvent {
    wall_time: f64,
    step: i64,
    file_version: Option<String>,
    values: Vec<ReadValue>,
}

fn decode_event(bytes: &[u8]) -> ReadEvent {
    let msg = fields(bytes);
    let wall_time = match field(&msg, 1) {
        Some(Wire::Fixed64(b)) => f64::from_le_bytes(*b),
        _ => 0.0,
    };
    let step = match field(&msg, 2) {
        Some(Wire::Varint(v)) => *v as i64,
        _ => 0,
    };
    let file_version = field(&msg, 3).map(text_of);
    let mut values = Vec::new();
    if let Some(summary) = field(&msg, 5) {
        for (f, v) in fields(bytes_of(summary)) {
            assert_eq!(f, 1);
            let value = fields(bytes_of(&v));
            let simple_value = match field(&value, 2) {
                Some(Wire::Fixed32(b)) => Some(f32::from_le_bytes(*b)),
                _ => None,
            };
            let plugin = field(&value, 9).map(|m| {
                let pd = fields(bytes_of(field(&fields(bytes_of(m)), 1).unwrap()));
                (text_of(field(&pd, 1).unwrap()), field(&pd, 2).map_or(Vec::new(), |c| bytes_of(c).to_vec()))
            });
            let media = [4u32, 5, 8].into_iter().find_map(|n| field(&value, n).map(|w| (n, bytes_of(w).to_vec())));
            values.push(ReadValue { tag: text_of(field(&value, 1).unwrap()), simple_value, plugin, media });
        }
    }
    ReadEvent { wall_time, step, file_version, values }
}

/// Every event of the file, checking the framing and CRCs.
fn read_events(path: &Path) -> Vec<ReadEvent> {
    let bytes = std::fs::read(path).unwrap();
    let mut rest = bytes.as_slice();
    let mut events = Vec::new();
    while let Some((data, tail)) = read_record(rest).unwrap() {
        events.push(decode_event(data));
        rest = tail;
    }
    events
}

fn params() -> BTreeMap<String, String> {
    [("lr", "0.001"), ("batch_size", "64"), ("optimizer", "adam"), ("shuffle", "true")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Logs a small run into `root`'s next version folder; returns the logger.
fn write_run(root: &Path) -> TensorBoardLogger {
    let dir = next_version_dir(root).unwrap();
    let mut logger = TensorBoardLogger::create(&dir).unwrap();
    logger.log_hyperparams(&params()).unwrap();
    for step in 0..5i64 {
        let metrics: BTreeMap<String, f64> = [("train_loss".to_string(), 1.0 / (step + 1) as f64)].into();
        logger.log_metrics(&metrics, Some(step / 2), step).unwrap();
    }
    let val: BTreeMap<String, f64> = [("val_loss".to_string(), 0.25), ("val_acc".to_string(), 0.0)].into();
    logger.log_metrics(&val, Some(1), 4).unwrap();
    logger.save().unwrap();
    logger.finalize("success").unwrap();
    logger
}

#[test]
fn file_layout_and_first_event() {
    let root = TempDir::new("tb-layout");
    let logger = write_run(&root);
    let dir = root.join("lightning_logs/version_0");
    assert_eq!(logger.log_dir(), Some(dir.as_path()));
    assert_eq!(logger.name(), "tensorboard");
    let path = logger.event_file();
    assert_eq!(path.parent(), Some(dir.as_path()));
    let name = path.file_name().unwrap().to_str().unwrap();
    let parts: Vec<&str> = name.split('.').collect();
    assert_eq!(&parts[..3], ["events", "out", "tfevents"], "{name}");
    assert_eq!(parts[3].len(), 10);
    assert!(parts[3].parse::<u64>().unwrap() > 1_600_000_000);
    assert_eq!(parts[parts.len() - 2], std::process::id().to_string());
    assert!(parts[parts.len() - 1].parse::<u64>().is_ok());
    let events = read_events(path);
    assert_eq!(events[0].file_version.as_deref(), Some(FILE_VERSION));
    assert!(events[0].wall_time > 1.6e9);
    assert!(events.iter().all(|e| e.wall_time >= events[0].wall_time));
}

#[test]
fn scalars_read_back() {
    let root = TempDir::new("tb-scalars");
    let logger = write_run(&root);
    let events = read_events(logger.event_file());
    let scalars: Vec<(i64, String, f32)> = events
        .iter()
        .flat_map(|e| e.values.iter().filter_map(move |v| Some((e.step, v.tag.clone(), v.simple_value?))))
        .collect();
    let series = |tag: &str| -> Vec<(i64, f32)> {
        scalars.iter().filter(|(_, t, _)| t == tag).map(|(s, _, v)| (*s, *v)).collect()
    };
    assert_eq!(series("hp_metric"), [(0, -1.0)]);
    assert_eq!(series("train_loss"), (0..5).map(|s| (s, 1.0 / (s + 1) as f32)).collect::<Vec<_>>());
    assert_eq!(series("val_loss"), [(4, 0.25)]);
    assert_eq!(series("val_acc"), [(4, 0.0)]);
    assert_eq!(series("epoch"), [(0, 0.0), (1, 0.0), (2, 1.0), (3, 1.0), (4, 2.0), (4, 1.0)]);
    // One event per logging call, all of the call's scalars in it.
    let last = events.last().unwrap();
    let tags: Vec<&str> = last.values.iter().map(|v| v.tag.as_str()).collect();
    assert_eq!(tags, ["epoch", "val_acc", "val_loss"]);
}

#[test]
fn hparams_read_back() {
    let root = TempDir::new("tb-hparams");
    let logger = write_run(&root);
    let events = read_events(logger.event_file());
    let plugin: Vec<(String, Vec<u8>)> = events
        .iter()
        .flat_map(|e| e.values.iter())
        .filter_map(|v| {
            let (name, content) = v.plugin.clone()?;
            assert_eq!(name, "hparams");
            Some((v.tag.clone(), content))
        })
        .collect();
    let tags: Vec<&str> = plugin.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tags, ["_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"]);

    // HParamsPluginData: version absent (0), then the oneof member.
    let exp = fields(&plugin[0].1);
    assert_eq!(exp.len(), 1);
    let exp = fields(bytes_of(field(&exp, 2).unwrap()));
    let infos: Vec<(String, u64)> = exp
        .iter()
        .filter(|(f, _)| *f == 4)
        .map(|(_, w)| {
            let info = fields(bytes_of(w));
            let Some(Wire::Varint(t)) = field(&info, 4) else { panic!("no type") };
            (text_of(field(&info, 1).unwrap()), *t)
        })
        .collect();
    let expected = [("batch_size", 3), ("lr", 3), ("optimizer", 1), ("shuffle", 2)];
    assert_eq!(infos, expected.map(|(n, t)| (n.to_string(), t)));
    let metric = fields(bytes_of(field(&exp, 5).unwrap()));
    let name = fields(bytes_of(field(&metric, 1).unwrap()));
    assert_eq!(text_of(field(&name, 2).unwrap()), "hp_metric");

    let ssi = fields(&plugin[1].1);
    let ssi = fields(bytes_of(field(&ssi, 3).unwrap()));
    let mut hparams = BTreeMap::new();
    for (f, entry) in &ssi {
        assert_eq!(*f, 1);
        let entry = fields(bytes_of(entry));
        let value = fields(bytes_of(field(&entry, 2).unwrap()));
        let shown = match &value[0] {
            (2, Wire::Fixed64(b)) => format!("number {}", f64::from_le_bytes(*b)),
            (3, w) => format!("string {}", text_of(w)),
            (4, Wire::Varint(b)) => format!("bool {b}"),
            other => panic!("unexpected value {other:?}"),
        };
        hparams.insert(text_of(field(&entry, 1).unwrap()), shown);
    }
    let expected =
        [("batch_size", "number 64"), ("lr", "number 0.001"), ("optimizer", "string adam"), ("shuffle", "bool 1")];
    assert_eq!(hparams, expected.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());

    let sei = fields(&plugin[2].1);
    let sei = fields(bytes_of(field(&sei, 4).unwrap()));
    assert!(matches!(field(&sei, 1), Some(Wire::Varint(1))));
}

#[test]
fn no_hparams_summaries_when_hp_metric_is_off() {
    // Lightning writes the hparams summaries only with a metric.
    let root = TempDir::new("tb-nohp");
    let mut logger = TensorBoardLogger::create(&root).unwrap().with_default_hp_metric(false);
    logger.log_hyperparams(&params()).unwrap();
    logger.log_metrics(&BTreeMap::new(), Some(0), 0).unwrap();
    logger.finalize("success").unwrap();
    let events = read_events(logger.event_file());
    assert_eq!(events.len(), 1);
    let yaml = std::fs::read_to_string(root.join("hparams.yaml")).unwrap();
    assert_eq!(yaml, "batch_size: 64\nlr: 0.001\noptimizer: \"adam\"\nshuffle: true\n");
    // No parameters with the metric on: hp_metric and the three summaries.
    let root = TempDir::new("tb-emptyhp");
    let mut logger = TensorBoardLogger::create(&root).unwrap();
    logger.log_hyperparams(&BTreeMap::new()).unwrap();
    logger.finalize("success").unwrap();
    assert_eq!(read_events(logger.event_file()).len(), 5);
    assert_eq!(std::fs::read_to_string(root.join("hparams.yaml")).unwrap(), "{}\n");
}

#[test]
fn prefix_and_writes_after_close() {
    let root = TempDir::new("tb-prefix");
    let mut logger = TensorBoardLogger::create(&root).unwrap().with_prefix("train");
    logger.log_metrics(&[("loss".to_string(), 0.5)].into(), Some(2), 7).unwrap();
    logger.log_hyperparams(&params()).unwrap();
    let first = logger.event_file().to_path_buf();
    logger.finalize("failed").unwrap();
    assert!(!root.join("hparams.yaml").exists(), "only a successful finalize saves hparams.yaml");
    let tags: Vec<String> = read_events(&first).iter().flat_map(|e| e.values.iter().map(|v| v.tag.clone())).collect();
    assert_eq!(&tags[..3], ["train-epoch", "train-loss", "train-hp_metric"]);
    // torch's SummaryWriter opens a new event file when written to after close.
    logger.log_scalars(&[("late".to_string(), 1.0)].into(), 8).unwrap();
    assert_ne!(logger.event_file(), first.as_path());
    logger.finalize("success").unwrap();
    let events = read_events(logger.event_file());
    assert_eq!(events[1].values[0].tag, "train-late");
    assert_eq!(events[1].step, 8);
}

#[test]
fn media_read_back() {
    use crate::loggers::tensorboard::media;
    let root = TempDir::new("tb-media");
    let mut logger = TensorBoardLogger::create(&root).unwrap().with_prefix("ignored");
    let img = tch::Tensor::from_slice(&[0.0f32, 0.25, 0.5, 1.0]).reshape([1, 2, 2]);
    logger.add_media("sample", &media::image(&img, "CHW").unwrap(), 3).unwrap();
    logger.add_media("weights", &media::histogram(&tch::Tensor::from_slice(&[1.0f32, 2.0])).unwrap(), 4).unwrap();
    logger.add_media("notes", &media::text("hi"), 5).unwrap();
    logger.finalize("success").unwrap();
    let events = read_events(logger.event_file());
    let got: Vec<(i64, String, u32)> = events
        .iter()
        .flat_map(|e| e.values.iter().filter_map(move |v| Some((e.step, v.tag.clone(), v.media.as_ref()?.0))))
        .collect();
    let want = [(3, "sample", 4), (4, "weights", 5), (5, "notes/text_summary", 8)];
    assert_eq!(got, want.map(|(s, t, f)| (s, t.to_string(), f)));
    let text = events.iter().flat_map(|e| &e.values).find(|v| v.tag == "notes/text_summary").unwrap();
    assert_eq!(text.plugin.as_ref().unwrap().0, "text");
    let tensor = fields(&text.media.as_ref().unwrap().1);
    assert_eq!(text_of(field(&tensor, 8).unwrap()), "hi");
    let image = events.iter().flat_map(|e| &e.values).find(|v| v.tag == "sample").unwrap();
    let image = fields(&image.media.as_ref().unwrap().1);
    assert!(matches!(field(&image, 1), Some(Wire::Varint(2))));
    assert!(matches!(field(&image, 3), Some(Wire::Varint(3))));
    assert!(bytes_of(field(&image, 4).unwrap()).starts_with(b"\x89PNG"));
}

#[test]
fn closed_logger_and_io_errors() {
    let root = TempDir::new("tb-errors");
    let mut logger = TensorBoardLogger::create(&root).unwrap();
    logger.finalize("failed").unwrap();
    logger.finalize("failed").unwrap();
    logger.save().unwrap();
    let blocker = root.join("not_a_dir");
    std::fs::write(&blocker, b"").unwrap();
    let err = TensorBoardLogger::create(&blocker).err().unwrap();
    assert_eq!(err.code, ErrorCode::Io);
    assert!(err.message.contains("not_a_dir"), "{}", err.message);
}

#[test]
fn two_loggers_in_one_folder_get_two_files() {
    let root = TempDir::new("tb-two");
    let a = TensorBoardLogger::create(&root).unwrap();
    let b = TensorBoardLogger::create(&root).unwrap();
    assert_ne!(a.event_file(), b.event_file());
}

/// Writes a run under `$FULMEN_TB_OUT` for `scripts/check_tensorboard.py`.
#[test]
#[ignore]
fn write_run_for_tensorboard() {
    let root = PathBuf::from(std::env::var("FULMEN_TB_OUT").expect("set FULMEN_TB_OUT"));
    let logger = write_run(&root);
    println!("{}", logger.event_file().display());
}

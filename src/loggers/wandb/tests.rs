use super::logger::{json_float, json_value};
use super::transaction_log::{chunk_crc, TransactionLog, BLOCK, FIRST, FULL, HEADER, LAST, MIDDLE};
use super::WandbLogger;
use crate::error::ErrorCode;
use crate::loggers::Logger;
use crate::test_dirs::TempDir;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads a `.wandb` file back as LevelDB's log reader does, checking the
/// file header, every chunk's CRC and type sequence, and that a block's
/// tail shorter than a header is zeros.
fn read_records(path: &Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap();
    assert_eq!(&data[..HEADER], b":W&B\xe1\xbe\x00");
    let (mut pos, mut out, mut pending): (usize, Vec<Vec<u8>>, Option<Vec<u8>>) = (HEADER, Vec::new(), None);
    while pos < data.len() {
        let left = BLOCK - pos % BLOCK;
        if left < HEADER {
            assert!(data[pos..pos + left.min(data.len() - pos)].iter().all(|&b| b == 0));
            pos += left;
            continue;
        }
        let crc = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap());
        let n = u16::from_le_bytes(data[pos + 4..pos + 6].try_into().unwrap()) as usize;
        let kind = data[pos + 6];
        let chunk = &data[pos + HEADER..pos + HEADER + n];
        assert!(n <= left - HEADER, "a chunk crosses a block");
        assert_eq!(crc, chunk_crc(kind, chunk));
        pos += HEADER + n;
        match (kind, pending.take()) {
            (FULL, None) => out.push(chunk.to_vec()),
            (FIRST, None) => pending = Some(chunk.to_vec()),
            (MIDDLE, Some(mut p)) => {
                p.extend_from_slice(chunk);
                pending = Some(p);
            }
            (LAST, Some(mut p)) => {
                p.extend_from_slice(chunk);
                out.push(p);
            }
            other => panic!("chunk type {} after {:?}", other.0, other.1.map(|p| p.len())),
        }
    }
    assert!(pending.is_none(), "a record is cut");
    out
}

#[test]
fn chunk_crc_is_zlibs_crc32_of_type_then_data() {
    // zlib.crc32(b"abc", zlib.crc32(b"\x01")), zlib.crc32(b"", zlib.crc32(b"\x04"))
    assert_eq!(chunk_crc(FULL, b"abc"), 0x539d20a9);
    assert_eq!(chunk_crc(LAST, b""), 0xd56f2b94);
}

#[test]
fn records_split_across_blocks_and_tails_padded_read_back() {
    let d = TempDir::new("wandb-log");
    let path = d.join("run-x.wandb");
    let mut log = TransactionLog::create(&path).unwrap();
    // Sizes that end a block exactly, leave a tail shorter than a header,
    // leave exactly a header's room (an empty FIRST chunk) and span
    // several blocks.
    let first = BLOCK - 2 * HEADER;
    let sizes = [first, 10, BLOCK - 2 * HEADER - 10 - 3, 1, 5, BLOCK - 2 * HEADER - 20, 3 * BLOCK + 17, 0, 9];
    let records: Vec<Vec<u8>> =
        sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect()).collect();
    for r in &records {
        log.append(r).unwrap();
    }
    log.flush(true).unwrap();
    assert_eq!(read_records(&path), records);
    // The third block ends with the empty FIRST chunk of the long record.
    let data = std::fs::read(&path).unwrap();
    let tail = 3 * BLOCK - HEADER;
    assert_eq!(&data[tail + 4..tail + HEADER], &[0, 0, FIRST]);
    assert_eq!(TransactionLog::create(&path).err().unwrap().code, ErrorCode::Io, "an existing file is never reused");
}

#[test]
fn json_values_as_pythons() {
    assert_eq!(json_float(0.5), "0.5");
    assert_eq!(json_float(1.0), "1.0");
    assert_eq!(json_float(1e-7), "1e-07");
    assert_eq!(json_float(f64::NAN), "NaN");
    assert_eq!(json_float(f64::NEG_INFINITY), "-Infinity");
    assert_eq!(json_value("0.1"), "0.1");
    assert_eq!(json_value("32"), "32");
    assert_eq!(json_value("true"), "true");
    assert_eq!(json_value("adam"), "\"adam\"");
    assert_eq!(json_value("a \"q\"\n"), "\"a \\\"q\\\"\\n\"");
    assert_eq!(json_value("1e5"), "\"1e5\"");
}

#[test]
fn settings_ids_and_the_run_folder() {
    let d = TempDir::new("wandb-logger");
    let mut l = WandbLogger::new(d.to_str().unwrap(), "").unwrap();
    assert_eq!(l.set_id("../x").unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(l.set_id(&"a".repeat(65)).unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(l.set_setting("colour", "x").unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(l.add_tag("").unwrap_err().code, ErrorCode::InvalidArgument);
    l.set_id("run_1").unwrap();
    l.set_setting("group", "g").unwrap();
    l.add_tag("t").unwrap();
    l.set_prefix("p").unwrap();
    assert_eq!(l.run_dir(), None);
    assert_eq!(l.resolve_log_dir().unwrap().as_deref(), Some(Path::new(d.to_str().unwrap())));
    assert_eq!(l.run_dir(), Some(d.join("lightning_logs").join("run_1")));
    let folder = l.run_folder().unwrap();
    let name = folder.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("offline-run-") && name.ends_with("-run_1"), "{name}");
    assert_eq!(folder.parent().unwrap(), d.join("wandb"));
    assert_eq!(std::fs::read_link(d.join("wandb/latest-run")).unwrap(), Path::new(&name), "a relative link");
    assert!(folder.join("files").is_dir());
    assert_eq!(l.set_name("late").unwrap_err().code, ErrorCode::InvalidState);
    l.log_metrics(&BTreeMap::from([("loss".to_string(), 0.25)]), Some(0), 3).unwrap();
    l.log_hyperparams(&BTreeMap::from([("lr".to_string(), "0.1".to_string())])).unwrap();
    l.finalize("failed").unwrap();
    assert_eq!(l.finalize("odd").unwrap_err().code, ErrorCode::InvalidArgument);
    let file = folder.join("run-run_1.wandb");
    // Header, run, two metric definitions, summary and history, config.
    assert_eq!(read_records(&file).len(), 7);
    drop(l);
    let records = read_records(&file);
    assert_eq!(records.len(), 8, "the exit record when the logger ends");
    // The exit record: num 8, exit {exit_code 1, runtime 0}, _info.
    let exit = &records[7];
    assert_eq!(&exit[..2], &[0x08, 8]);
    assert_eq!(&exit[2..6], &[0x92, 0x01, 2, 0x08]);
    assert_eq!(exit[6], 1);
}

#[test]
fn a_finished_run_refuses_logging_and_ids_differ() {
    let d = TempDir::new("wandb-finish");
    let mut a = WandbLogger::new(d.to_str().unwrap(), "proj").unwrap();
    let mut b = WandbLogger::new(d.to_str().unwrap(), "proj").unwrap();
    let (ia, ib) = (a.run_id().unwrap(), b.run_id().unwrap());
    assert_ne!(ia, ib);
    assert_eq!(ia.len(), 8);
    assert!(ia.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "{ia}");
    a.finish(0).unwrap();
    a.finish(0).unwrap();
    let e = a.log_metrics_at(&BTreeMap::new(), None, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
    assert!(a.run_folder().unwrap().join(format!("run-{ia}.wandb")).is_file(), "the folder of a finished run");
}

#[test]
fn projects_w_and_b_refuses_are_refused() {
    for bad in ["a/b", "..", ".", "x:y", "50%", "a#b", "q?", "back\\slash"] {
        let e = WandbLogger::new("", bad).err().expect(bad);
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}: {}", e.message);
    }
    WandbLogger::new("", "my-project_1.v2").unwrap();
}

#[test]
fn reserved_keys_are_w_and_bs_and_the_last_finalize_decides_the_exit_code() {
    let d = TempDir::new("wandb-reserved");
    let mut l = WandbLogger::new(d.to_str().unwrap(), "p").unwrap();
    l.set_id("r").unwrap();
    let metrics = BTreeMap::from([("_step".to_string(), 99.0), ("loss".to_string(), 1.0)]);
    l.log_metrics_at(&metrics, None, 0).unwrap();
    l.finalize("failed").unwrap();
    l.finalize("success").unwrap();
    let folder = l.run_folder().unwrap();
    drop(l);
    let records = read_records(&folder.join("run-r.wandb"));
    // Header, run, 2 metrics, summary, history, exit.
    assert_eq!(records.len(), 7);
    let count = |needle: &[u8]| records[5].windows(needle.len()).filter(|w| *w == needle).count();
    // nested_key (field 2) "_step", and value_json (field 16) "99.0".
    assert_eq!(count(b"\x12\x05_step"), 1, "one _step item, W&B's");
    assert_eq!(count(b"\x82\x01\x0499.0"), 0, "the metric named _step is dropped");
    assert_eq!(count(b"\x82\x01\x031.0"), 1, "the loss is there");
    let exit = &records[6];
    // num 7, exit {} (code 0 and runtime 0 left out), _info.
    assert_eq!(&exit[..4], &[0x08, 7, 0x92, 0x01]);
    assert_eq!(exit[4], 0, "exit code 0 after a successful last finalize");
}

#[test]
fn a_run_that_cannot_start_can_be_retried() {
    let d = TempDir::new("wandb-retry");
    // save_dir/wandb is a file: the start fails, and the id stays unset so
    // the retry draws a fresh one.
    std::fs::write(d.join("wandb"), "a file").unwrap();
    let mut l = WandbLogger::new(d.to_str().unwrap(), "p").unwrap();
    assert_eq!(l.run_id().unwrap_err().code, ErrorCode::Io);
    std::fs::remove_file(d.join("wandb")).unwrap();
    let id = l.run_id().unwrap();
    assert_eq!(id.len(), 8);
    assert_eq!(std::fs::read_dir(d.join("wandb")).unwrap().count(), 2, "one run folder and latest-run");
}

#[test]
fn latest_run_follows_the_newest_run_and_spares_what_is_not_a_link() {
    let d = TempDir::new("wandb-latest");
    let save = d.to_str().unwrap();
    let mut a = WandbLogger::new(save, "p").unwrap();
    let mut b = WandbLogger::new(save, "p").unwrap();
    let (fa, fb) = (a.run_folder().unwrap(), b.run_folder().unwrap());
    let link = std::fs::read_link(d.join("wandb/latest-run")).unwrap();
    assert_eq!(link, Path::new(fb.file_name().unwrap()));
    assert_ne!(fa, fb);
    // A folder named latest-run is the user's: kept.
    let e = TempDir::new("wandb-latest-dir");
    std::fs::create_dir_all(e.join("wandb/latest-run")).unwrap();
    std::fs::write(e.join("wandb/latest-run/keep"), "mine").unwrap();
    let mut c = WandbLogger::new(e.to_str().unwrap(), "p").unwrap();
    c.run_id().unwrap();
    assert_eq!(std::fs::read_to_string(e.join("wandb/latest-run/keep")).unwrap(), "mine");
    let names: Vec<_> = std::fs::read_dir(e.join("wandb")).unwrap().map(|x| x.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "the run and the user's folder, no leftover link: {names:?}");
}

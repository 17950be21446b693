//! torch.save archives: round trips, a file written by PyTorch, and hostile
//! pickles refused with `Format` errors.
use super::*;
use crate::error::ErrorCode;
use crate::test_dirs::TempDir;
use tch::{Device, Kind};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

#[test]
fn round_trip_of_values_and_dtypes() {
    let w = Tensor::arange(6, (Kind::Float, Device::Cpu)).reshape([2, 3]);
    let mut tensors = vec![("w".to_string(), w.shallow_clone()), ("wt".to_string(), w.tr())];
    for kind in [
        Kind::Double,
        Kind::Half,
        Kind::BFloat16,
        Kind::Int64,
        Kind::Int,
        Kind::Int16,
        Kind::Int8,
        Kind::Uint8,
        Kind::Bool,
    ] {
        tensors.push((format!("{kind:?}"), Tensor::arange(4, (Kind::Int64, Device::Cpu)).to_kind(kind)));
    }
    tensors.push(("scalar".into(), Tensor::from(2.5f32)));
    tensors.push(("empty".into(), Tensor::zeros([0, 3], (Kind::Float, Device::Cpu))));
    // Views: a narrowed one (an offset, not contiguous), and one contiguous
    // with a free stride on its size-1 dimension ([3, 1] strided [1, 3]).
    tensors.push(("narrowed".into(), w.narrow(1, 1, 2)));
    let column = Tensor::arange(3, (Kind::Float, Device::Cpu)).reshape([1, 3]).tr();
    assert!(column.is_contiguous() && column.stride() == [1, 3]);
    tensors.push(("column".into(), column));
    let meta = Value::Dict(vec![
        (Value::Str("epoch".into()), Value::Int(3)),
        (Value::Str("big".into()), Value::Int(-(1i64 << 40))),
        (Value::Str("lr".into()), Value::Float(0.125)),
        (Value::Str("flags".into()), Value::List(vec![Value::Bool(true), Value::Bool(false), Value::None])),
        (Value::Str("betas".into()), Value::Tuple(vec![Value::Float(0.9), Value::Float(0.999)])),
        (Value::Int(0), Value::Str("int key".into())),
    ]);
    let value = Value::Dict(vec![
        (Value::Str("state_dict".into()), state_dict_value(&tensors)),
        (Value::Str("meta".into()), meta),
    ]);
    let bytes = to_bytes(&value).unwrap();
    // The file, streamed, is the same archive.
    let dir = TempDir::new("torch-save-round-trip");
    let path = dir.join("values.pt");
    save(&path, &value).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let back = read_bytes(&bytes, "round trip").unwrap();
    let sd = state_dict_of(&back, "round trip").unwrap();
    assert_eq!(sd.len(), tensors.len());
    for ((a, x), (b, y)) in tensors.iter().zip(&sd) {
        assert_eq!(a, b);
        assert_eq!(x.kind(), y.kind(), "{a}");
        assert_eq!(x.size(), y.size(), "{a}");
        assert!(x.to_kind(Kind::Double).equal(&y.to_kind(Kind::Double)), "{a}");
    }
    let meta = back.get("meta").unwrap();
    assert!(matches!(meta.get("epoch"), Some(Value::Int(3))));
    assert!(matches!(meta.get("big"), Some(Value::Int(v)) if *v == -(1i64 << 40)));
    assert!(matches!(meta.get("lr"), Some(Value::Float(v)) if *v == 0.125));
    assert!(matches!(meta.get("betas"), Some(Value::Tuple(t)) if t.len() == 2));
    assert!(
        matches!(meta.get("flags"), Some(Value::List(l)) if matches!(l[..], [Value::Bool(true), Value::Bool(false), Value::None]))
    );
}

/// `tests/fixtures/torch_save_mlp.pt`: `torch.save(model.state_dict())` of
/// PyTorch's `Sequential(Linear(2, 8), Tanh(), Linear(8, 2))`, with the
/// values it was checked against in `torch_save_mlp.safetensors`
/// (scripts/make_torch_save_fixture.py).
#[test]
fn reads_a_file_written_by_pytorch() {
    let value = load(&fixture("torch_save_mlp.pt")).unwrap();
    let sd = state_dict_of(&value, "fixture").unwrap();
    let names: Vec<&str> = sd.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
    let (want, _) = crate::nn::read_safetensors(&fixture("torch_save_mlp.safetensors")).unwrap();
    for (n, t) in &sd {
        let u = &want.iter().find(|(m, _)| m == n).unwrap().1;
        assert!(t.equal(u), "{n}");
    }
}

fn archive_with_pickle(pickle: &[u8], storages: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = ZipWriter::new(Vec::new(), "archive");
    zip.add("data.pkl", pickle).unwrap();
    for (k, b) in storages {
        zip.add(&format!("data/{k}"), b).unwrap();
    }
    zip.finish().unwrap()
}

fn refused(pickle: &[u8], storages: &[(&str, &[u8])], says: &str) {
    let e = read_bytes(&archive_with_pickle(pickle, storages), "hostile").unwrap_err();
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    assert!(e.message.contains(says), "{} (wanted {says:?})", e.message);
}

/// A tensor pickle: _rebuild_tensor_v2(storage(FloatStorage, "0", numel),
/// offset, size, stride, False, OrderedDict()).
fn tensor_pickle(numel: u8, offset: u8, size: &[u8], stride: &[u8]) -> Vec<u8> {
    let mut p = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK".to_vec();
    p.push(numel);
    p.extend_from_slice(b"tQK");
    p.push(offset);
    p.push(b'(');
    for s in size {
        p.push(b'K');
        p.push(*s);
    }
    p.extend_from_slice(b"t(");
    for s in stride {
        p.push(b'K');
        p.push(*s);
    }
    p.extend_from_slice(b"t\x89ccollections\nOrderedDict\n)RtR.");
    p
}

#[test]
fn hostile_pickles_are_refused() {
    // A call of os.system is never made: the global is refused.
    refused(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueR.", &[], "os.system is outside the safe subset");
    refused(b"\x80\x02\x8c\x08builtins\x8c\x04eval\x93.", &[], "builtins.eval");
    // Objects built by NEWOBJ / BUILD, and other opcodes, are refused.
    refused(b"\x80\x02ccollections\nOrderedDict\n)\x81.", &[], "opcode 0x81");
    refused(b"\x80\x02}Nb.", &[], "BUILD of something other");
    // A string claiming 4 GiB in a tiny file: truncated, nothing allocated.
    refused(b"\x80\x02X\xff\xff\xff\xff.", &[], "truncated");
    refused(b"\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\x7f.", &[], "truncated");
    // Nesting past the bound.
    let mut deep = b"\x80\x02".to_vec();
    deep.extend(std::iter::repeat_n(b"]"[0], 70));
    deep.extend(std::iter::repeat_n(b"a"[0], 69));
    deep.push(b'.');
    refused(&deep, &[], "nested deeper");
    // A tuple reused through the memo many times counts each time.
    let mut wide = b"\x80\x02(".to_vec();
    wide.extend(std::iter::repeat_n(b"N"[0], 5000));
    wide.extend_from_slice(b"tq\x00(");
    for _ in 0..5000 {
        wide.extend_from_slice(b"h\x00");
    }
    wide.extend_from_slice(b"t.");
    refused(&wide, &[], "more than");
    // A list that contains itself: refused.
    refused(b"\x80\x02]q\x00h\x00a.", &[], "not a list");
    // A finished list is shared (SequentialLR's state shares `_last_lr`),
    // and cannot be filled after that.
    refused(b"\x80\x02(]q\x00K\x01ah\x00K\x02at.", &[], "not a list");
    // Stack misuse.
    refused(b"\x80\x02a.", &[], "stack underflow");
    refused(b"\x80\x02NN.", &[], "left on the stack");
    refused(b"\x80\x02", &[], "truncated");
    // Tensors: numel against the record, views against the storage.
    let data = [0u8; 16];
    refused(&tensor_pickle(5, 0, &[4], &[1]), &[("0", &data)], "holds 16 bytes");
    refused(&tensor_pickle(4, 1, &[4], &[1]), &[("0", &data)], "reaches past its storage");
    refused(&tensor_pickle(4, 0, &[2, 2], &[3, 1]), &[("0", &data)], "reaches past its storage");
    refused(&tensor_pickle(4, 0, &[4], &[1]), &[], "has no record");
    // A well-formed one reads.
    let ok = read_bytes(&archive_with_pickle(&tensor_pickle(4, 0, &[2, 2], &[2, 1]), &[("0", &data)]), "ok").unwrap();
    assert!(matches!(ok, Value::Tensor(t) if t.size() == [2, 2]));
}

#[test]
fn review_cases() {
    let data = [0u8; 16];
    // Counter({...}) (MultiStepLR's milestones) reads as a dict.
    let counter = b"\x80\x02ccollections\nCounter\n}(K\x03K\x01u\x85R.";
    let v = read_bytes(&archive_with_pickle(counter, &[]), "counter").unwrap();
    assert!(matches!(v, Value::Dict(d) if d.len() == 1));
    // Dtypes and devices (in hyperparameters) read as strings; the
    // tutorial layout {'model_state_dict': ...} gives its state_dict.
    let hp = b"\x80\x02}(X\x05\x00\x00\x00dtypectorch\nbfloat16\nX\x06\x00\x00\x00devicectorch\ndevice\nX\x04\x00\x00\x00cudaK\x01\x86RX\x10\x00\x00\x00model_state_dict}u.";
    let v = read_bytes(&archive_with_pickle(hp, &[]), "hparams").unwrap();
    assert!(matches!(v.get("dtype"), Some(Value::Str(s)) if s == "torch.bfloat16"));
    assert!(matches!(v.get("device"), Some(Value::Str(s)) if s == "cuda:1"));
    assert!(state_dict_of(&v, "hparams").unwrap().is_empty());
    refused(b"\x80\x02ctorch\nempty\n.", &[], "torch.empty is outside");
    // A key twice is refused (Python would keep the last, fulmen says so).
    refused(b"\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00aK\x02u.", &[], "twice");
    // A string reused through tuples counts its bytes each time.
    let mut strings = b"\x80\x02X\x00\x00\x01\x00".to_vec();
    strings.extend(std::iter::repeat_n(b'a', 65536));
    strings.extend_from_slice(b"q\x00(");
    strings.extend(std::iter::repeat_n(*b"h\x00", 4000).flatten());
    strings.extend_from_slice(b"t.");
    refused(&strings, &[], "values for a pickle of");
    // A stride-0 view of one element is a view, not a copy; sizes whose
    // product overflows are refused.
    let one = 1.5f32.to_le_bytes();
    let mut p = tensor_pickle(1, 0, &[], &[]);
    let at = p.windows(4).position(|w| w == b"(t(t").unwrap();
    p.splice(at..at + 4, b"(J\x00\x00\x00\x40t(K\x00t".iter().copied());
    let big = read_bytes(&archive_with_pickle(&p, &[("0", &one)]), "view").unwrap();
    assert!(matches!(&big, Value::Tensor(t) if t.size() == [1 << 30] && t.stride() == [0]));
    let mut p = tensor_pickle(1, 0, &[], &[]);
    let at = p.windows(4).position(|w| w == b"(t(t").unwrap();
    p.splice(at..at + 4, b"(\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40K\x04K\x00t(K\x00K\x00K\x00t".iter().copied());
    refused(&p, &[("0", &one)], "more elements than 2^63");
    // The same storage read with two sizes.
    let two = b"\x80\x02(ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00(K\x01t(K\x01t\x89ccollections\nOrderedDict\n)RtRctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00(K\x01t(K\x01t\x89ccollections\nOrderedDict\n)RtRl.";
    refused(two, &[("0", &data)], "two sizes");
}

#[test]
fn zip_records_that_repeat_or_overlap_are_refused() {
    let mut w = ZipWriter::new(Vec::new(), "a");
    w.add("data.pkl", b"\x80\x02N.").unwrap();
    let mut bytes = w.finish().unwrap();
    // A second directory entry naming the same record: refused before any
    // record is checked twice.
    let cd_start = bytes.len() - 22 - (46 + "a/data.pkl".len());
    let entry = bytes[cd_start..bytes.len() - 22].to_vec();
    let end = bytes.split_off(bytes.len() - 22);
    bytes.extend_from_slice(&entry);
    let mut end = end;
    end[8..10].copy_from_slice(&2u16.to_le_bytes());
    end[10..12].copy_from_slice(&2u16.to_le_bytes());
    end[12..16].copy_from_slice(&((2 * entry.len()) as u32).to_le_bytes());
    bytes.extend_from_slice(&end);
    let e = read_bytes(&bytes, "twice").unwrap_err();
    assert!(e.message.contains("appears twice"), "{}", e.message);
}

#[test]
fn not_an_archive_says_what_it_is() {
    let e = read_bytes(b"PK\x03\x04 but nothing else", "stub").unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("not a readable torch.save archive"), "{}", e.message);
}

#[test]
fn a_torchscript_module_is_named_as_one() {
    let e = load(&fixture("mlp_scripted.pt")).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("is a TorchScript module") && e.message.contains("load_torchscript"), "{}", e.message);
}

#[test]
fn a_finished_list_read_twice_is_shared() {
    // ([1], [1]) with the list memoized once and read back with BINGET.
    let bytes = archive_with_pickle(b"\x80\x02(]q\x00K\x01ah\x00t.", &[]);
    let v = read_bytes(&bytes, "test").unwrap();
    let Value::Tuple(items) = v else { panic!("not a tuple: {v:?}") };
    assert_eq!(items.len(), 2);
    for item in &items {
        assert!(matches!(item, Value::List(l) if matches!(l.as_slice(), [Value::Int(1)])), "{item:?}");
    }
}

#[test]
fn bytes_and_sets_as_torch_save_writes_them() {
    // torch.save({'b': b'ab\xffc', 's': {1, 2}}): protocol 2's
    // _codecs.encode(text, 'latin1') and __builtin__.set([...]).
    let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00bq\x01c_codecs\nencode\nq\x02X\x05\x00\x00\x00ab\xc3\xbfcq\x03X\x06\x00\x00\x00latin1q\x04\x86q\x05Rq\x06X\x01\x00\x00\x00sq\x07c__builtin__\nset\nq\x08]q\x09(K\x01K\x02e\x85q\x0aRq\x0bu.";
    let v = read_bytes(&archive_with_pickle(p, &[]), "python").unwrap();
    assert!(matches!(v.get("b"), Some(Value::Bytes(b)) if b == b"ab\xffc"));
    assert!(matches!(v.get("s"), Some(Value::Set(s)) if matches!(s[..], [Value::Int(1), Value::Int(2)])));
    // Protocol 3+ opcodes: SHORT_BINBYTES, BINBYTES, EMPTY_SET + ADDITEMS, FROZENSET.
    let p = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00(C\x02hiB\x01\x00\x00\x00!\x8f(K\x07\x90(K\x08\x91t.";
    let v = read_bytes(&archive_with_pickle(p, &[]), "opcodes").unwrap();
    let Value::Tuple(t) = v else { panic!("not a tuple") };
    assert!(matches!(&t[0], Value::Bytes(b) if b == b"hi"));
    assert!(matches!(&t[1], Value::Bytes(b) if b == b"!"));
    assert!(matches!(&t[2], Value::Set(s) if matches!(s[..], [Value::Int(7)])));
    assert!(matches!(&t[3], Value::Set(s) if matches!(s[..], [Value::Int(8)])));
    // Written back as torch.save writes them, and read again.
    let value = Value::Dict(vec![
        (Value::Str("b".into()), Value::Bytes(vec![0, 0x7f, 0x80, 0xff])),
        (Value::Str("e".into()), Value::Bytes(Vec::new())),
        (Value::Str("s".into()), Value::Set(vec![Value::Str("x".into()), Value::Int(3)])),
    ]);
    let bytes = to_bytes(&value).unwrap();
    // The file, streamed, is the same archive.
    let dir = TempDir::new("torch-save-bytes-sets");
    let path = dir.join("bytes_sets.pt");
    save(&path, &value).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let back = read_bytes(&bytes, "round trip").unwrap();
    assert!(matches!(back.get("b"), Some(Value::Bytes(b)) if b == &[0, 0x7f, 0x80, 0xff]));
    assert!(matches!(back.get("e"), Some(Value::Bytes(b)) if b.is_empty()));
    assert!(matches!(back.get("s"), Some(Value::Set(s)) if s.len() == 2));
    // An unhashable set item is not written.
    assert!(to_bytes(&Value::Set(vec![Value::List(Vec::new())])).is_err());
}

#[test]
fn hostile_bytes_and_sets_are_refused() {
    // What torch.load(weights_only=True) refuses, fulmen refuses.
    refused(b"\x80\x02c__builtin__\nfrozenset\n)R.", &[], "frozenset is outside");
    refused(b"\x80\x02c__builtin__\nbytes\n)R.", &[], "bytes is outside");
    // Lengths past the data: truncated, nothing allocated.
    refused(b"\x80\x04B\xff\xff\xff\xff.", &[], "truncated");
    refused(b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7f.", &[], "truncated");
    // _codecs.encode with another codec, or a character beyond latin-1.
    refused(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00utf-8\x86R.", &[], "latin1");
    refused(b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00\xc4\x80X\x06\x00\x00\x00latin1\x86R.", &[], "beyond latin-1");
    // ADDITEMS to a list, APPENDS to a set.
    refused(b"\x80\x04](K\x01\x90.", &[], "not a set");
    refused(b"\x80\x04\x8f(K\x01e.", &[], "not a list");
    // A set that contains itself.
    refused(b"\x80\x04\x8fq\x00(h\x00\x90.", &[], "not a set");
}

#[test]
fn memo_bombs_are_refused_early() {
    // 8 Mi MEMOIZEs of one None: refused as the memo fills (at byte
    // 3 + 2^20 + 1, its 2^20 + 1st entry), long before 8 Mi are held.
    let mut bomb = b"\x80\x04N".to_vec();
    bomb.extend(std::iter::repeat_n(0x94u8, 8 << 20));
    bomb.extend_from_slice(b"0N.");
    refused(&bomb, &[], "at byte 1048580: the memo would hold more than 1048576 entries");
    // LONG_BINPUT with large, distinct keys: the same bound.
    let mut puts = b"\x80\x02N".to_vec();
    for k in 0..=(1u32 << 20) {
        puts.push(b'r');
        puts.extend_from_slice(&(k << 11 | 0x7ff).to_le_bytes());
    }
    puts.extend_from_slice(b"0N.");
    refused(&puts, &[], "the memo would hold more than");
    // A key of 2^32 - 1 is a key like any other: nothing is sized by it.
    let v = read_bytes(&archive_with_pickle(b"\x80\x02K\x07r\xff\xff\xff\xff0j\xff\xff\xff\xff.", &[]), "key").unwrap();
    assert!(matches!(v, Value::Int(7)), "{v:?}");
    // GET of a key never put; DUP is outside the safe subset.
    refused(b"\x80\x02j\x00\x00\x00\x80.", &[], "memo key 2147483648 unknown");
    refused(b"\x80\x02N2.", &[], "opcode 0x32");
}

#[test]
fn the_stack_is_bounded_and_long_lists_are_written_in_batches() {
    // A pickle of 2^20 + 1 bare Nones: refused as the stack fills, not held.
    let mut nones = b"\x80\x02".to_vec();
    nones.extend(std::iter::repeat_n(b'N', (1 << 20) + 1));
    nones.push(b'.');
    refused(&nones, &[], "more than 1048576 items on the stack at once");
    // A list and a dict longer than that, written by fulmen, read back:
    // they are written in batches of 1000, as Python's pickler does.
    let n = (1 << 20) + 5;
    let list = Value::List((0..n).map(Value::Int).collect());
    let dict = Value::Dict((0..3000).map(|i| (Value::Int(i), Value::Int(-i))).collect());
    for v in [list, dict] {
        let back = read_bytes(&to_bytes(&v).unwrap(), "batched").unwrap();
        assert_eq!(format!("{back:?}"), format!("{v:?}"));
    }
}

#[test]
fn open_marks_and_aliases_are_bounded() {
    // MARKs never closed: refused at the bound, not held by the million.
    let mut marks = b"\x80\x02".to_vec();
    marks.extend(std::iter::repeat_n(b'(', 1 << 20));
    marks.push(b'.');
    refused(&marks, &[], "MARKs open at once");
    // Tuples nested to 60 levels, a MARK each, still read.
    let mut nested = b"\x80\x02".to_vec();
    nested.extend(std::iter::repeat_n(b'(', 60));
    nested.extend(std::iter::repeat_n(b't', 60));
    nested.push(b'.');
    assert!(matches!(read_bytes(&archive_with_pickle(&nested, &[]), "nested").unwrap(), Value::Tuple(_)));
    // A list of 1000 values appended to another 20 000 times through the
    // memo: each use counts its 1000 values, so the copies it would expand
    // into are refused before they are made.
    let mut alias = b"\x80\x02](".to_vec();
    alias.extend(std::iter::repeat_n(b'N', 1000));
    alias.extend_from_slice(b"eq\x00](");
    alias.extend(std::iter::repeat_n(*b"h\x00", 20_000).flatten());
    alias.extend_from_slice(b"e\x86.");
    refused(&alias, &[], "values for a pickle of");
}

#[test]
fn a_memo_key_given_again_moves_to_the_new_value() {
    // ([], [1], [1]): key 0 first names the empty list, then the second
    // one, which BINGET gives back.
    let v = read_bytes(&archive_with_pickle(b"\x80\x04(]\x94]q\x00K\x01ah\x00t.", &[]), "again").unwrap();
    let Value::Tuple(items) = v else { panic!("not a tuple: {v:?}") };
    assert!(matches!(&items[0], Value::List(l) if l.is_empty()), "{items:?}");
    for item in &items[1..] {
        assert!(matches!(item, Value::List(l) if matches!(l.as_slice(), [Value::Int(1)])), "{item:?}");
    }
    // Many keys of one list, each given again to another: every key
    // follows its own value.
    let mut p = b"\x80\x04(]".to_vec();
    p.extend(std::iter::repeat_n(0x94u8, 1000));
    p.extend_from_slice(b"]K\x02a");
    for k in 0..1000u32 {
        p.push(b'r');
        p.extend_from_slice(&k.to_le_bytes());
    }
    p.extend_from_slice(b"j\x00\x00\x00\x00j\xe7\x03\x00\x00t.");
    let v = read_bytes(&archive_with_pickle(&p, &[]), "moved").unwrap();
    let Value::Tuple(items) = v else { panic!("not a tuple: {v:?}") };
    assert_eq!(items.len(), 4);
    assert!(matches!(&items[0], Value::List(l) if l.is_empty()));
    for item in &items[1..] {
        assert!(matches!(item, Value::List(l) if matches!(l.as_slice(), [Value::Int(2)])), "{item:?}");
    }
}

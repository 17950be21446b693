//! torch.save archives: round trips, a file written by PyTorch, and hostile
//! pickles refused with `Format` errors.
use super::*;
use crate::error::ErrorCode;
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
    let back = read_bytes(&to_bytes(&value).unwrap(), "round trip").unwrap();
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
    let mut zip = ZipWriter::new("archive");
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
    // A list referenced twice could make a cycle: refused.
    refused(b"\x80\x02]q\x00h\x00a.", &[], "referenced twice");
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
fn not_an_archive_says_what_it_is() {
    let e = read_bytes(b"PK\x03\x04 but nothing else", "stub").unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("not a readable torch.save archive"), "{}", e.message);
}

//! Tests of the module tree, state dicts, safetensors and TorchScript.
use super::*;
use crate::error::ErrorCode;
use crate::test_dirs::TempDir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

pub(super) fn names(v: &[(String, Tensor)]) -> Vec<String> {
    v.iter().map(|(n, _)| n.clone()).collect()
}

pub(super) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn bn() -> Module {
    Module::batch_norm(3, 1e-5, 0.1, true, true).unwrap()
}

fn nested() -> Module {
    let mut enc = Module::sequential();
    enc.push(Module::conv2d(3, 4, [3, 3], [1, 1], [1, 1], [1, 1], 1, true).unwrap()).unwrap();
    enc.push(Module::batch_norm(4, 1e-5, 0.1, true, true).unwrap()).unwrap();
    enc.push(Module::activation(Activation::Relu)).unwrap();
    enc.push(Module::flatten(1, -1)).unwrap();
    let mut m = Module::named();
    m.add("encoder", enc).unwrap();
    m.add("head", Module::linear(4 * 5 * 5, 2, true).unwrap()).unwrap();
    m
}

fn assert_send<T: Send>() {}

#[test]
fn module_is_send() {
    let _rng = super::init::test_rng_lock();
    assert_send::<Module>();
}

#[test]
fn sequential_names_match_pytorch() {
    let _rng = super::init::test_rng_lock();
    let mut m = Module::sequential();
    m.push(Module::linear(4, 3, true).unwrap()).unwrap();
    m.push(bn()).unwrap();
    let expected =
        ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"];
    assert_eq!(names(&m.state_dict()), expected);
    assert_eq!(names(&m.named_parameters()), ["0.weight", "0.bias", "1.weight", "1.bias"]);
    assert_eq!(names(&m.named_buffers()), ["1.running_mean", "1.running_var", "1.num_batches_tracked"]);
    assert_eq!(m.num_parameters(), 4 * 3 + 3 + 3 + 3);
    let nbt = &m.state_dict()[6].1;
    assert_eq!(nbt.kind(), Kind::Int64);
    assert_eq!(nbt.size(), Vec::<i64>::new());
}

#[test]
fn nested_names_match_pytorch() {
    let _rng = super::init::test_rng_lock();
    let m = nested();
    let expected = [
        "encoder.0.weight",
        "encoder.0.bias",
        "encoder.1.weight",
        "encoder.1.bias",
        "encoder.1.running_mean",
        "encoder.1.running_var",
        "encoder.1.num_batches_tracked",
        "head.weight",
        "head.bias",
    ];
    assert_eq!(names(&m.state_dict()), expected);
    assert_eq!(
        names(&m.named_parameters()),
        ["encoder.0.weight", "encoder.0.bias", "encoder.1.weight", "encoder.1.bias", "head.weight", "head.bias"]
    );
    for p in m.parameters() {
        assert!(p.requires_grad() && p.is_leaf());
    }
    // Layers without optional tensors register nothing, like PyTorch.
    let mut s = Module::sequential();
    s.push(Module::linear(2, 2, false).unwrap()).unwrap();
    s.push(Module::batch_norm(2, 1e-5, 0.1, false, false).unwrap()).unwrap();
    s.push(Module::layer_norm(&[2], 1e-5, true).unwrap()).unwrap();
    s.push(Module::embedding(5, 2).unwrap()).unwrap();
    assert_eq!(names(&s.state_dict()), ["0.weight", "2.weight", "2.bias", "3.weight"]);
}

#[test]
fn container_paths_and_errors() {
    let _rng = super::init::test_rng_lock();
    let mut m = nested();
    assert_eq!(m.child("encoder.1").unwrap().type_name(), "BatchNorm");
    assert_eq!(m.child_names(), ["encoder", "head"]);
    assert_eq!(m.child("encoder.9").unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(m.child("head.x").unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(m.add("head", Module::flatten(0, -1)).is_err());
    assert!(m.add("a.b", Module::flatten(0, -1)).is_err());
    assert!(m.add("", Module::flatten(0, -1)).is_err());
    assert!(m.push(Module::flatten(0, -1)).is_err());
    let mut leaf = Module::linear(2, 2, true).unwrap();
    assert!(leaf.add("x", Module::flatten(0, -1)).is_err());
    let x = Tensor::randn([2, 3, 5, 5], (Kind::Float, Device::Cpu));
    let err = m.forward(&x).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    assert!(err.message.contains("forward_child"), "{}", err.message);
    let h = m.forward_child("encoder", &x).unwrap();
    assert_eq!(h.size(), [2, 100]);
    assert_eq!(m.forward_child("head", &h).unwrap().size(), [2, 2]);
    // Bad shapes are errors, not panics, and name the child.
    let err = m.forward_child("head", &x).unwrap_err();
    assert_eq!(err.code, ErrorCode::ShapeMismatch);
    let err = m.forward_child("encoder", &Tensor::zeros([2, 5], (Kind::Float, Device::Cpu)));
    assert!(err.unwrap_err().message.contains("Sequential child 0"));
    m.child_mut("encoder").unwrap().set_training(false).unwrap();
    assert!(!m.child("encoder.1").unwrap().is_training());
    assert!(m.child("head").unwrap().is_training());
}

#[test]
fn layer_forward_shapes() {
    let _rng = super::init::test_rng_lock();
    let opts = (Kind::Float, Device::Cpu);
    let img = Tensor::randn([2, 3, 8, 8], opts);
    let conv = Module::conv2d(3, 6, [3, 3], [2, 2], [1, 1], [1, 1], 3, true).unwrap();
    assert_eq!(conv.forward(&img).unwrap().size(), [2, 6, 4, 4]);
    assert_eq!(conv.forward(&img.get(0)).unwrap().size(), [6, 4, 4]);
    assert!(Module::conv2d(3, 4, [3, 3], [1, 1], [0, 0], [1, 1], 3, true).is_err());
    let mp = Module::max_pool2d([2, 2], [2, 2], [0, 0]).unwrap();
    assert_eq!(mp.forward(&img).unwrap().size(), [2, 3, 4, 4]);
    let ap = Module::avg_pool2d([3, 3], [1, 1], [1, 1]).unwrap();
    assert_eq!(ap.forward(&img).unwrap().size(), [2, 3, 8, 8]);
    assert!(Module::max_pool2d([2, 2], [2, 2], [2, 0]).is_err());
    let lin = Module::linear(8, 5, true).unwrap();
    assert_eq!(lin.forward(&img).unwrap().size(), [2, 3, 8, 5]);
    let ln = Module::layer_norm(&[8, 8], 1e-5, true).unwrap();
    assert_eq!(ln.forward(&img).unwrap().size(), [2, 3, 8, 8]);
    assert!(ln.forward(&Tensor::randn([2, 4], opts)).is_err());
    let b = Module::batch_norm(3, 1e-5, 0.1, true, true).unwrap();
    assert_eq!(b.forward(&img).unwrap().size(), [2, 3, 8, 8]);
    assert_eq!(b.forward(&Tensor::randn([4, 3], opts)).unwrap().size(), [4, 3]);
    assert!(b.forward(&Tensor::randn([4, 5], opts)).is_err());
    assert!(b.forward(&Tensor::randn([1, 3], opts)).is_err()); // one value per channel
    let fl = Module::flatten(1, -1);
    assert_eq!(fl.forward(&img).unwrap().size(), [2, 192]);
    assert!(Module::flatten(5, 6).forward(&img).is_err());
    let emb = Module::embedding(10, 4).unwrap();
    let idx = Tensor::from_slice(&[1i64, 2, 9, 0, 3, 3]).reshape([2, 3]);
    assert_eq!(emb.forward(&idx).unwrap().size(), [2, 3, 4]);
    assert_eq!(emb.forward(&(idx.shallow_clone() + 1)).unwrap_err().code, ErrorCode::OutOfRange);
    assert_eq!(emb.forward(&img).unwrap_err().code, ErrorCode::DtypeMismatch);
    let x = Tensor::from_slice(&[-2.0f32, -0.5, 0.0, 1.5]);
    let expect = |a: Activation, v: &[f32]| {
        let y = Module::activation(a).forward(&x).unwrap();
        let want = Tensor::from_slice(v);
        assert!(y.allclose(&want, 1e-5, 1e-6, false), "{a:?}: {y:?}");
    };
    expect(Activation::Relu, &[0.0, 0.0, 0.0, 1.5]);
    expect(Activation::LeakyRelu(0.1), &[-0.2, -0.05, 0.0, 1.5]);
    expect(Activation::Elu(1.0), &[(-2.0f32).exp_m1(), (-0.5f32).exp_m1(), 0.0, 1.5]);
    expect(Activation::Identity, &[-2.0, -0.5, 0.0, 1.5]);
    expect(Activation::Tanh, &[(-2.0f32).tanh(), (-0.5f32).tanh(), 0.0, 1.5f32.tanh()]);
    let sm = Module::activation(Activation::Softmax(1)).forward(&img).unwrap();
    assert!(sm.sum_dim_intlist(1, false, Kind::Float).allclose(&Tensor::ones([2, 8, 8], opts), 1e-5, 1e-5, false));
    for a in [Activation::Gelu, Activation::Sigmoid, Activation::Silu, Activation::LogSoftmax(-1)] {
        assert_eq!(Module::activation(a).forward(&img).unwrap().size(), [2, 3, 8, 8]);
    }
    assert!(Module::activation(Activation::Softmax(7)).forward(&img).is_err());
    // An empty Sequential is the identity.
    assert!(Module::sequential().forward(&x).unwrap().equal(&x));
}

#[test]
fn dropout_only_in_training() {
    let _rng = super::init::test_rng_lock();
    let mut d = Module::dropout(0.5).unwrap();
    let x = Tensor::ones([1000], (Kind::Float, Device::Cpu));
    let y = d.forward(&x).unwrap();
    let zeros = y.eq(0.0).sum(Kind::Int64).int64_value(&[]);
    assert!(zeros > 350 && zeros < 650, "{zeros} zeros");
    assert!(y.max().double_value(&[]) == 2.0);
    d.set_training(false).unwrap();
    assert!(d.forward(&x).unwrap().equal(&x));
    assert!(Module::dropout(1.5).is_err());
}

#[test]
fn batch_norm_train_and_eval() {
    let _rng = super::init::test_rng_lock();
    let mut m = Module::sequential();
    m.push(Module::batch_norm(2, 1e-5, 0.1, true, true).unwrap()).unwrap();
    let x = Tensor::from_slice(&[1.0f32, 10.0, 3.0, 20.0, 5.0, 30.0]).reshape([3, 2]);
    let y = m.forward(&x).unwrap();
    // Batch statistics: each column has mean 0, biased var 1.
    let mean = y.mean_dim(0, false, Kind::Float);
    assert!(mean.abs().max().double_value(&[]) < 1e-5);
    let sd = m.state_dict();
    let rm = &sd[2].1;
    let rv = &sd[3].1;
    // running = 0.9 * init + 0.1 * batch (unbiased variance)
    assert!(rm.allclose(&Tensor::from_slice(&[0.3f32, 2.0]), 1e-5, 1e-6, false), "{rm:?}");
    assert!(rv.allclose(&Tensor::from_slice(&[0.9f32 + 0.4, 0.9 + 10.0]), 1e-5, 1e-5, false), "{rv:?}");
    assert_eq!(sd[4].1.int64_value(&[]), 1);
    m.set_training(false).unwrap();
    let y = m.forward(&x).unwrap();
    let want = (&x - rm) / (rv + 1e-5).sqrt();
    assert!(y.allclose(&want, 1e-5, 1e-5, false));
    assert_eq!(sd[4].1.int64_value(&[]), 1, "eval must not count batches");
    // 4-D input in training mode.
    let b2 = Module::batch_norm(3, 1e-5, 0.1, true, true).unwrap();
    let img = Tensor::randn([4, 3, 5, 5], (Kind::Float, Device::Cpu)) * 3 + 2;
    let y = b2.forward(&img).unwrap();
    let cm = y.mean_dim([0i64, 2, 3].as_slice(), false, Kind::Float);
    assert!(cm.abs().max().double_value(&[]) < 1e-4);
}

#[test]
fn to_kind_and_device_keep_leaves() {
    let _rng = super::init::test_rng_lock();
    let mut m = nested();
    let before = m.parameters();
    m.to_kind(Kind::Double).unwrap();
    for (n, t) in m.state_dict() {
        let want = if n.ends_with("num_batches_tracked") { Kind::Int64 } else { Kind::Double };
        assert_eq!(t.kind(), want, "{n}");
    }
    for (p, q) in m.parameters().iter().zip(before.iter()) {
        assert!(p.is_leaf() && p.requires_grad());
        assert_eq!(q.kind(), Kind::Double, "old handles see the change (same tensor)");
    }
    let x = Tensor::randn([1, 3, 5, 5], (Kind::Double, Device::Cpu));
    let h = m.forward_child("encoder", &x).unwrap();
    assert_eq!(m.forward_child("head", &h).unwrap().kind(), Kind::Double);
    m.to_device(crate::tensor::device::Device::Cpu).unwrap();
    assert_eq!(m.to_kind(Kind::Int64).unwrap_err().code, ErrorCode::DtypeMismatch);
    if !tch::Cuda::is_available() {
        assert_eq!(m.to_device(crate::tensor::device::Device::Cuda(0)).unwrap_err().code, ErrorCode::Unavailable);
    }
}

#[test]
fn safetensors_round_trip() {
    let _rng = super::init::test_rng_lock();
    let dir = TempDir::new("nn-rt");
    let path = dir.join("model.safetensors");
    tch::manual_seed(1);
    let mut a = nested();
    // Run once in training so running stats differ from the init.
    let x = Tensor::randn([4, 3, 5, 5], (Kind::Float, Device::Cpu));
    let _ = a.forward_child("encoder", &x).unwrap();
    a.set_training(false).unwrap();
    let meta = [("epoch".to_string(), "3".to_string())].into_iter().collect();
    a.save_safetensors(&path, Some(meta)).unwrap();
    assert!(!dir.join("model.safetensors.tmp").exists());
    let (_, md) = read_safetensors(&path).unwrap();
    assert_eq!(md.get("epoch").map(String::as_str), Some("3"));
    tch::manual_seed(2);
    let mut b = nested();
    b.set_training(false).unwrap();
    let out = |m: &Module| {
        let h = m.forward_child("encoder", &x).unwrap();
        m.forward_child("head", &h).unwrap()
    };
    assert!(!out(&a).allclose(&out(&b), 1e-6, 1e-6, false));
    let report = b.load_safetensors(&path, true).unwrap();
    assert_eq!(report, LoadReport::default());
    assert!(out(&a).equal(&out(&b)));
    for ((na, ta), (nb, tb)) in a.state_dict().iter().zip(b.state_dict().iter()) {
        assert_eq!(na, nb);
        assert!(ta.equal(tb), "{na}");
    }
    for p in b.parameters() {
        assert!(p.is_leaf() && p.requires_grad());
    }
}

#[test]
fn safetensors_dtypes() {
    let _rng = super::init::test_rng_lock();
    let dir = TempDir::new("nn-dt");
    let path = dir.join("all.safetensors");
    let base = Tensor::from_slice(&[0.0f64, 1.0, 2.5, -3.0, 4.0, 1.0]).reshape([2, 3]);
    let kinds = [
        Kind::Float,
        Kind::Double,
        Kind::Half,
        Kind::BFloat16,
        Kind::Int64,
        Kind::Int,
        Kind::Int16,
        Kind::Int8,
        Kind::Uint8,
        Kind::Bool,
    ];
    let tensors: Vec<(String, Tensor)> = kinds.iter().map(|k| (format!("{k:?}"), base.abs().to_kind(*k))).collect();
    write_safetensors(&path, &tensors, None).unwrap();
    let (back, md) = read_safetensors(&path).unwrap();
    assert!(md.is_empty());
    assert_eq!(back.len(), tensors.len());
    for (name, t) in &tensors {
        let (_, b) = back.iter().find(|(n, _)| n == name).unwrap();
        assert_eq!(b.kind(), t.kind(), "{name}");
        assert!(b.equal(t), "{name}");
    }
    // Views (a transpose, a narrowed column), an empty tensor, metadata:
    // each tensor's bytes stream in the header's order.
    let views = vec![
        ("t".to_string(), base.tr()),
        ("col".to_string(), base.narrow(1, 1, 1)),
        ("empty".to_string(), Tensor::zeros([0, 3], (Kind::Float, Device::Cpu))),
        ("b".to_string(), base.to_kind(Kind::Int8)),
    ];
    let meta: HashMap<String, String> = [("k".to_string(), "v".to_string())].into();
    write_safetensors(&path, &views, Some(meta.clone())).unwrap();
    let (back, md) = read_safetensors(&path).unwrap();
    assert_eq!(md, meta);
    for (name, t) in &views {
        let (_, b) = back.iter().find(|(n, _)| n == name).unwrap();
        assert!(b.equal(&t.contiguous()), "{name}");
    }
    let dup = vec![("a".to_string(), base.shallow_clone()), ("a".to_string(), base.shallow_clone())];
    assert!(write_safetensors(&path, &dup, None).is_err());
    let missing = read_safetensors(&dir.join("nope.safetensors")).unwrap_err();
    assert_eq!(missing.code, ErrorCode::Io);
}

#[test]
fn load_errors_leave_model_unchanged() {
    let _rng = super::init::test_rng_lock();
    let dir = TempDir::new("nn-err");
    let mut m = Module::sequential();
    m.push(Module::linear(4, 3, true).unwrap()).unwrap();
    m.push(bn()).unwrap();
    let snapshot: Vec<Tensor> = m.state_dict().iter().map(|(_, t)| t.copy()).collect();
    let unchanged = |m: &Module| m.state_dict().iter().zip(snapshot.iter()).all(|((_, a), b)| a.equal(b));
    let other = {
        let mut o = Module::sequential();
        o.push(Module::linear(4, 3, true).unwrap()).unwrap();
        o.push(bn()).unwrap();
        o.state_dict()
    };
    // Missing key: strict fails, non-strict loads the rest and reports it.
    let partial: Vec<_> =
        other.iter().filter(|(n, _)| n != "0.bias").map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
    let err = m.load_state_dict(&partial, true).unwrap_err();
    assert_eq!(err.code, ErrorCode::Format);
    assert!(err.message.contains("0.bias"), "{}", err.message);
    assert!(unchanged(&m));
    // Unexpected key.
    let mut extra: Vec<_> = other.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
    extra.push(("2.weight".into(), Tensor::zeros([1], (Kind::Float, Device::Cpu))));
    let err = m.load_state_dict(&extra, true).unwrap_err();
    assert!(err.message.contains("2.weight"), "{}", err.message);
    assert!(unchanged(&m));
    // Wrong shape: fails even non-strict, names key and shapes; nothing copied
    // although "0.weight" comes first and is fine.
    let mut bad: Vec<_> = other.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
    bad[3].1 = Tensor::zeros([4], (Kind::Float, Device::Cpu));
    let err = m.load_state_dict(&bad, false).unwrap_err();
    assert_eq!(err.code, ErrorCode::ShapeMismatch);
    assert!(
        err.message.contains("1.bias") && err.message.contains("[4]") && err.message.contains("[3]"),
        "{}",
        err.message
    );
    assert!(unchanged(&m));
    // Wrong dtype.
    let mut bad: Vec<_> = other.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
    bad[1].1 = bad[1].1.to_kind(Kind::Double);
    assert_eq!(m.load_state_dict(&bad, false).unwrap_err().code, ErrorCode::DtypeMismatch);
    assert!(unchanged(&m));
    // Truncated and garbage files.
    let path = dir.join("m.safetensors");
    write_safetensors(&path, &other, None).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let err = m.load_safetensors(&cut, true).unwrap_err();
    assert_eq!(err.code, ErrorCode::Format);
    assert!(err.message.contains("cut.safetensors"), "{}", err.message);
    std::fs::write(&cut, &bytes[..5]).unwrap();
    assert_eq!(m.load_safetensors(&cut, true).unwrap_err().code, ErrorCode::Format);
    std::fs::write(&cut, b"\x10\0\0\0\0\0\0\0not json at all!").unwrap();
    assert_eq!(m.load_safetensors(&cut, true).unwrap_err().code, ErrorCode::Format);
    assert!(unchanged(&m));
    // Non-strict with a missing key loads the rest.
    let report = m.load_state_dict(&partial, false).unwrap();
    assert_eq!(report.missing, ["0.bias"]);
    assert!(report.unexpected.is_empty());
    assert!(m.state_dict()[0].1.equal(&other[0].1));
    assert!(m.state_dict()[1].1.equal(&snapshot[1]));
}

#[test]
fn init_bounds_follow_pytorch() {
    let _rng = super::init::test_rng_lock();
    let lin = Module::linear(100, 50, true).unwrap();
    let bound = 1.0 / 10.0;
    for p in lin.parameters() {
        let m = p.abs().max().double_value(&[]);
        assert!(m <= bound && m > 0.8 * bound, "{m}");
    }
    let conv = Module::conv2d(4, 8, [3, 3], [1, 1], [0, 0], [1, 1], 2, true).unwrap();
    let bound = 1.0 / ((2 * 3 * 3) as f64).sqrt();
    for p in conv.parameters() {
        assert!(p.abs().max().double_value(&[]) <= bound);
    }
    assert_eq!(conv.parameters()[0].size(), [8, 2, 3, 3]);
    let ln = Module::layer_norm(&[6], 1e-5, true).unwrap();
    let ps = ln.parameters();
    assert!(ps[0].equal(&Tensor::ones([6], (Kind::Float, Device::Cpu))));
    assert!(ps[1].equal(&Tensor::zeros([6], (Kind::Float, Device::Cpu))));
    tch::manual_seed(3);
    let a = Module::linear(3, 3, true).unwrap().parameters();
    tch::manual_seed(3);
    let b = Module::linear(3, 3, true).unwrap().parameters();
    assert!(a[0].equal(&b[0]) && a[1].equal(&b[1]));
}

#[test]
fn init_equals_pytorch_under_same_seed() {
    let _rng = super::init::test_rng_lock();
    // torch.manual_seed(0); torch.nn.Linear(4, 3) in PyTorch 2.13.
    let w = [
        -0.0037434f32,
        0.2682218,
        -0.4115226,
        -0.3679695,
        -0.1925772,
        0.1340787,
        -0.0099066,
        0.3964447,
        -0.044372,
        0.1323063,
        -0.1511065,
        -0.0982827,
    ];
    let b = [-0.47767425f32, -0.33114105, -0.20611155];
    tch::manual_seed(0);
    let p = Module::linear(4, 3, true).unwrap().parameters();
    assert!(p[0].allclose(&Tensor::from_slice(&w).reshape([3, 4]), 0.0, 1e-6, false));
    assert!(p[1].allclose(&Tensor::from_slice(&b), 0.0, 1e-7, false));
}

fn reference() -> (Tensor, Tensor) {
    let text = std::fs::read_to_string(fixture("mlp_reference.txt")).unwrap();
    let rows: Vec<Vec<f32>> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    let flat = |r: &[Vec<f32>]| r.iter().flatten().copied().collect::<Vec<f32>>();
    let x = Tensor::from_slice(&flat(&rows[..2])).reshape([2, 4]);
    let y = Tensor::from_slice(&flat(&rows[2..])).reshape([2, 3]);
    (x, y)
}

#[test]
fn torchscript_fixture_forward_names_and_training() {
    let _rng = super::init::test_rng_lock();
    let mut m = Module::load_torchscript(&fixture("mlp_scripted.pt"), Device::Cpu).unwrap();
    assert_eq!(names(&m.named_parameters()), ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]);
    assert_eq!(m.num_parameters(), 4 * 8 + 8 + 8 * 3 + 3);
    assert!(m.is_training());
    let (x, y_ref) = reference();
    let y = m.forward(&x).unwrap();
    assert!(y.allclose(&y_ref, 1e-5, 1e-6, false), "{y:?} vs {y_ref:?}");
    // Same weights as the safetensors file Python wrote.
    let (py, md) = read_safetensors(&fixture("mlp_scripted.safetensors")).unwrap();
    assert_eq!(md.get("source").map(String::as_str), Some("pytorch"));
    for (n, t) in m.named_parameters() {
        let (_, p) = py.iter().find(|(k, _)| *k == n).unwrap();
        assert!(t.equal(p), "{n}");
    }
    // A few SGD steps by hand reduce the loss and change the parameters.
    let target = Tensor::from_slice(&[1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5]).reshape([2, 3]);
    let before: Vec<Tensor> = m.parameters().iter().map(|p| p.detach().copy()).collect();
    let loss_of = |m: &Module| (m.forward(&x).unwrap() - &target).square().mean(Kind::Float);
    let first = loss_of(&m).double_value(&[]);
    for _ in 0..20 {
        let loss = loss_of(&m);
        for mut p in m.parameters() {
            p.zero_grad();
        }
        loss.backward();
        tch::no_grad(|| {
            for p in m.parameters() {
                let g = p.grad();
                assert!(g.defined());
                let _ = p.shallow_clone().f_sub_(&(g * 0.1)).unwrap();
            }
        });
    }
    let last = loss_of(&m).double_value(&[]);
    assert!(last < first * 0.9, "loss {first} -> {last}");
    for (p, b) in m.parameters().iter().zip(before.iter()) {
        assert!(!p.equal(b));
    }
    m.set_training(false).unwrap();
    assert!(!m.is_training());
    m.set_training(true).unwrap();
    // Round trip through fulmen's own safetensors writer.
    let dir = TempDir::new("nn-ts");
    let path = dir.join("trained.safetensors");
    m.save_safetensors(&path, None).unwrap();
    let mut fresh = Module::load_torchscript(&fixture("mlp_scripted.pt"), Device::Cpu).unwrap();
    fresh.load_safetensors(&path, true).unwrap();
    assert!(fresh.forward(&x).unwrap().equal(&m.forward(&x).unwrap()));
    // The script inside a named container gets a prefix.
    let mut outer = Module::named();
    outer.add("net", fresh).unwrap();
    assert_eq!(names(&outer.named_parameters())[0], "net.l1.weight");
    outer.to_kind(Kind::Double).unwrap();
    let y = outer.forward_child("net", &x.to_kind(Kind::Double)).unwrap();
    assert_eq!(y.kind(), Kind::Double);
    assert!(outer.parameters().iter().all(|p| p.kind() == Kind::Double && p.requires_grad()));
}

#[test]
fn torchscript_bad_files() {
    let _rng = super::init::test_rng_lock();
    let err = Module::load_torchscript(Path::new("/nonexistent/x.pt"), Device::Cpu).unwrap_err();
    assert_eq!(err.code, ErrorCode::Io);
    let dir = TempDir::new("nn-badts");
    let p = dir.join("bad.pt");
    std::fs::write(&p, b"definitely not a zip").unwrap();
    let err = Module::load_torchscript(&p, Device::Cpu).unwrap_err();
    assert_eq!(err.code, ErrorCode::Format);
    assert!(err.message.contains("bad.pt"));
}

#[test]
fn python_weights_load_into_sequential() {
    let _rng = super::init::test_rng_lock();
    let mut m = Module::sequential();
    m.push(Module::linear(4, 8, true).unwrap()).unwrap();
    m.push(Module::activation(Activation::Relu)).unwrap();
    m.push(Module::linear(8, 3, true).unwrap()).unwrap();
    let report = m.load_safetensors(&fixture("mlp_seq.safetensors"), true).unwrap();
    assert!(report.missing.is_empty() && report.unexpected.is_empty());
    let (x, y_ref) = reference();
    assert!(m.forward(&x).unwrap().allclose(&y_ref, 1e-5, 1e-6, false));
    // The scripted module's names do not fit a Sequential: strict load fails.
    let err = m.load_safetensors(&fixture("mlp_scripted.safetensors"), true).unwrap_err();
    assert_eq!(err.code, ErrorCode::Format);
    assert!(err.message.contains("mlp_scripted.safetensors"));
}

/// Writes files under `$FULMEN_PY_CHECK_OUT` for a by-hand check with
/// Python (see `scripts/check_fulmen_safetensors.py`): run with `--ignored`.
#[test]
#[ignore]
fn write_files_for_python_check() {
    let _rng = super::init::test_rng_lock();
    let dir = PathBuf::from(std::env::var("FULMEN_PY_CHECK_OUT").expect("set FULMEN_PY_CHECK_OUT"));
    std::fs::create_dir_all(&dir).unwrap();
    tch::manual_seed(0);
    let lin = Module::linear(4, 3, true).unwrap();
    let conv = Module::conv2d(3, 4, [3, 3], [1, 1], [1, 1], [1, 1], 1, true).unwrap();
    let emb = Module::embedding(5, 2).unwrap();
    let mut init = Vec::new();
    for (tag, m) in [("linear", &lin), ("conv", &conv), ("embedding", &emb)] {
        for (n, t) in m.named_parameters() {
            init.push((format!("{tag}.{n}"), t));
        }
    }
    write_safetensors(&dir.join("init_seed0.safetensors"), &init, None).unwrap();
    tch::manual_seed(5);
    let mut m = nested();
    let x = Tensor::randn([4, 3, 5, 5], (Kind::Float, Device::Cpu));
    let _ = m.forward_child("encoder", &x).unwrap();
    m.set_training(false).unwrap();
    let h = m.forward_child("encoder", &x).unwrap();
    let y = m.forward_child("head", &h).unwrap();
    let meta = [("format".to_string(), "pt".to_string())].into_iter().collect();
    m.save_safetensors(&dir.join("nested.safetensors"), Some(meta)).unwrap();
    let io = vec![("x".to_string(), x), ("y".to_string(), y)];
    write_safetensors(&dir.join("nested_io.safetensors"), &io, None).unwrap();
}

/// A Sequential(Linear(3, 2)) with `p` registered twice, as "a" and "b".
fn tied_model(p: &Tensor) -> Module {
    let mut m = Module::sequential();
    m.push(Module::linear(3, 2, true).unwrap()).unwrap();
    m.register_parameter("a", p).unwrap();
    m.register_parameter("b", p).unwrap();
    m
}

fn state(m: &Module, name: &str) -> Tensor {
    m.state_dict().into_iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn a_tensor_registered_twice_is_one_tied_parameter() {
    use crate::optim::{Adam, AdamOptions, Optimizer, Sgd, SgdOptions};
    let _rng = super::init::test_rng_lock();
    let p = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
    let mut m = tied_model(&p);
    // As PyTorch: the state_dict names both, parameters() lists it once.
    assert_eq!(names(&m.state_dict()), ["a", "b", "0.weight", "0.bias"]);
    assert_eq!(names(&m.named_parameters()), ["a", "0.weight", "0.bias"]);
    assert_eq!(m.num_parameters(), 3 + 6 + 2);
    assert_eq!(state(&m, "a").data_ptr(), state(&m, "b").data_ptr());
    // One leaf: a loss over both names gives it both gradients, and the
    // optimizers built on the model accept it.
    let mut sgd = Sgd::new(m.parameters(), SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    (state(&m, "a") * state(&m, "b")).sum(Kind::Float).backward();
    sgd.step().unwrap();
    let want = Tensor::from_slice(&[0.8f32, 1.6, 2.4]);
    assert!(state(&m, "a").allclose(&want, 1e-6, 1e-6, false), "{:?}", state(&m, "a"));
    assert!(state(&m, "b").equal(&state(&m, "a")));
    let mut adam = Adam::new(m.parameters(), AdamOptions::default()).unwrap();
    adam.zero_grad();
    (state(&m, "b") * 2.0).sum(Kind::Float).backward();
    adam.step().unwrap();
    assert!(state(&m, "b").equal(&state(&m, "a")) && !state(&m, "a").allclose(&want, 1e-6, 1e-6, false));
    // Registering it again under a child ties it there too; a layer's own
    // parameter ties as well.
    m.register_parameter_at("0", "c", &p).unwrap();
    let w = state(&m, "0.weight");
    m.register_parameter("w", &w).unwrap();
    // Each comes once, under its first name in state_dict order (a
    // module's own tensors before its children's).
    assert_eq!(names(&m.named_parameters()), ["a", "w", "0.bias"]);
    assert_eq!(names(&m.state_dict()), ["a", "b", "w", "0.weight", "0.bias", "0.c"]);
    assert_eq!(m.num_parameters(), 3 + 6 + 2);
    // Copies of the state (weight averaging's) keep the names tied.
    let sd = m.state_dict();
    assert_eq!(repeated_entries(&sd), [false, true, false, true, false, true]);
    let copy = copy_state_tied(&sd, &mut |t| Ok(t.detach_copy())).unwrap();
    assert_eq!(copy[0].1.data_ptr(), copy[1].1.data_ptr());
    assert_eq!(copy[2].1.data_ptr(), copy[3].1.data_ptr());
    assert_ne!(copy[0].1.data_ptr(), sd[0].1.data_ptr());
    assert_ne!(copy[0].1.data_ptr(), copy[2].1.data_ptr());
    assert_eq!(state(&m, "0.c").data_ptr(), state(&m, "a").data_ptr());
    // A cast keeps the names one tensor.
    m.to_kind(Kind::Double).unwrap();
    assert_eq!(state(&m, "a").kind(), Kind::Double);
    assert_eq!(state(&m, "a").data_ptr(), state(&m, "b").data_ptr());
    m.to_kind(Kind::Float).unwrap();
    // Saved and loaded, both names hold the saved value in one tensor.
    let saved = state(&m, "a").detach_copy();
    let dir = crate::test_dirs::TempDir::new("tied-params");
    for file in ["tied.safetensors", "tied.pt"] {
        let path = dir.join(file);
        m.save_weights(&path).unwrap();
        let mut back = tied_model(&Tensor::zeros([3], (Kind::Float, Device::Cpu)));
        back.register_parameter_at("0", "c", &state(&back, "a")).unwrap();
        let w = state(&back, "0.weight");
        back.register_parameter("w", &w).unwrap();
        back.load_weights(&path, true).unwrap();
        for name in ["a", "b", "0.c"] {
            assert!(state(&back, name).equal(&saved), "{file}: {name}");
        }
        assert_eq!(state(&back, "a").data_ptr(), state(&back, "b").data_ptr(), "{file}");
        assert!(state(&back, "w").equal(&state(&back, "0.weight")), "{file}");
        assert_eq!(back.parameters().len(), 3, "{file}");
    }
}

#[test]
fn registering_an_alias_of_another_kind_is_refused() {
    let _rng = super::init::test_rng_lock();
    let q = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
    let mut m = Module::named();
    m.register_parameter("q", &q).unwrap();
    // Another view of the same memory (the transpose of a square) is not
    // the same parameter; nor is a flat view, or a part of it starting
    // further on.
    for view in [q.transpose(0, 1), q.view([-1]), q.narrow(0, 1, 1), q.narrow(1, 1, 1)] {
        let err = m.register_parameter("qt", &view).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
        assert!(err.message.contains("another view"), "{}", err.message);
    }
    // A parameter is not also a buffer.
    let err = m.register_buffer("qb", &q).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert!(err.message.contains("the parameter \"q\""), "{}", err.message);
    // Buffers tie as parameters do.
    let mask = Tensor::from_slice(&[1i64, 0, 1]);
    m.register_buffer("m1", &mask).unwrap();
    m.register_buffer("m2", &mask).unwrap();
    assert_eq!(names(&m.named_buffers()), ["m1"]);
    assert_eq!(names(&m.state_dict()), ["q", "m1", "m2"]);
    assert_eq!(state(&m, "m1").data_ptr(), state(&m, "m2").data_ptr());
    // A copy (other memory) is a parameter of its own.
    m.register_parameter("q2", &q.detach_copy()).unwrap();
    assert_eq!(names(&m.named_parameters()), ["q", "q2"]);
}

#[test]
fn a_move_set_data_cannot_make_gives_new_tensors_and_keeps_ties() {
    // Meta tensors, like XLA's, cannot take a CPU tensor's data in place
    // (`set_data`): the model's handles get new leaf tensors instead, one
    // per tensor, so a tied parameter stays one.
    use crate::tensor::device::{impl_identity, Device, DeviceType};
    let _rng = super::init::test_rng_lock();
    let p = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
    let mut m = tied_model(&p);
    let meta = Device::new(DeviceType::Meta, 0);
    m.to_device(meta).unwrap();
    for (name, t) in m.state_dict() {
        assert_eq!(Device::of(&t).unwrap(), meta, "{name}");
        assert!(t.requires_grad(), "{name}");
    }
    assert_eq!(impl_identity(&state(&m, "a")).unwrap(), impl_identity(&state(&m, "b")).unwrap());
    assert_ne!(impl_identity(&state(&m, "a")).unwrap(), impl_identity(&p).unwrap());
    // Other handles of the old tensor keep it.
    assert_eq!(Device::of(&p).unwrap(), Device::Cpu);
    assert_eq!(Vec::<f32>::try_from(&p).unwrap(), [1.0, 2.0, 3.0]);
}

#[test]
fn a_torchscript_module_moved_by_new_tensors_holds_them_in_its_slots() {
    // The script's own slots, which its methods read, get the new tensors
    // too, not only fulmen's handles.
    use crate::tensor::device::{impl_identity, Device, DeviceType};
    let _rng = super::init::test_rng_lock();
    let mut m = Module::load_torchscript(&fixture("mlp_scripted.pt"), tch::Device::Cpu).unwrap();
    let meta = Device::new(DeviceType::Meta, 0);
    m.to_device(meta).unwrap();
    let slots = m.script().unwrap().slots().unwrap();
    assert_eq!(slots.len(), 4);
    for ((name, slot, _), (n, t)) in slots.iter().zip(m.named_parameters()) {
        assert_eq!(name, &n);
        assert_eq!(Device::of(slot).unwrap(), meta, "{n}");
        assert_eq!(impl_identity(slot).unwrap(), impl_identity(&t).unwrap(), "{n}");
    }
}

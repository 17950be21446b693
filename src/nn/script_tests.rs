//! Tests of TorchScript modules: buffers, methods over every kind of value,
//! modes, casts and saving back (fixtures from scripts/make_torchscript_fixture.py).
use super::tests::{fixture, names};
use super::*;
use crate::error::ErrorCode;
use crate::test_dirs::TempDir;
use tch::{Device, Kind, Tensor};

fn tabular() -> Module {
    Module::load_torchscript(&fixture("tabular_scripted.pt"), Device::Cpu).unwrap()
}

fn batch() -> (Tensor, Tensor, Tensor) {
    let category = Tensor::from_slice(&[0i64, 1, 4, 2, 3, 1]);
    let numeric = Tensor::arange(18, (Kind::Float, Device::Cpu)).reshape([6, 3]).sin() * 3.0 + 1.0;
    let target = Tensor::from_slice(&[0i64, 1, 1, 0, 1, 0]);
    (category, numeric, target)
}

fn tensor_of(v: &Value) -> &Tensor {
    match v {
        Value::Tensor(t) => t,
        other => panic!("expected a tensor, got {other:?}"),
    }
}

#[test]
fn torchscript_buffers_are_state_in_pytorch_order() {
    let _rng = init::test_rng_lock();
    let m = tabular();
    let sd = names(&m.state_dict());
    assert_eq!(
        sd,
        [
            "embedding.weight",
            "norm.weight",
            "norm.bias",
            "norm.running_mean",
            "norm.running_var",
            "norm.num_batches_tracked",
            "body.0.weight",
            "body.0.bias",
            "body.3.weight",
            "body.3.bias"
        ]
    );
    assert_eq!(names(&m.named_buffers()), ["norm.running_mean", "norm.running_var", "norm.num_batches_tracked"]);
    assert_eq!(m.num_parameters(), 5 * 4 + 3 + 3 + 32 * 7 + 32 + 2 * 32 + 2);
    // Training-mode forwards update the script's own running statistics,
    // which the state_dict tensors are.
    let (c, x, _) = batch();
    let out = m.forward_multi(&[Some(&c), Some(&x)]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].size(), [6, 2]);
    let sd = m.state_dict();
    let get = |n: &str| sd.iter().find(|(k, _)| k == n).unwrap().1.shallow_clone();
    assert_eq!(get("norm.num_batches_tracked").int64_value(&[]), 1);
    let expected = x.mean_dim(0, false, Kind::Float) * 0.1;
    assert!(get("norm.running_mean").allclose(&expected, 1e-5, 1e-6, false));
}

#[test]
fn torchscript_modes_casts_and_save_round_trip() {
    let _rng = init::test_rng_lock();
    let mut m = tabular();
    let (c, x, _) = batch();
    for _ in 0..3 {
        m.forward_multi(&[Some(&c), Some(&x)]).unwrap();
    }
    m.set_training(false).unwrap();
    let y1 = m.forward_multi(&[Some(&c), Some(&x)]).unwrap().remove(0);
    let y2 = m.forward_multi(&[Some(&c), Some(&x)]).unwrap().remove(0);
    assert!(y1.equal(&y2), "eval mode is deterministic (dropout off)");
    let dir = TempDir::new("nn-script-save");
    let path = dir.join("tuned.pt");
    m.save_torchscript(&path).unwrap();
    let back = Module::load_torchscript(&path, Device::Cpu).unwrap();
    for ((n, a), (_, b)) in m.state_dict().iter().zip(back.state_dict().iter()) {
        assert!(a.equal(b), "{n}");
    }
    let mut back = back;
    back.set_training(false).unwrap();
    assert!(back.forward_multi(&[Some(&c), Some(&x)]).unwrap()[0].equal(&y1));
    // A cast keeps integer buffers and the parameters' identity.
    let before = m.parameters();
    m.to_kind(Kind::Double).unwrap();
    let sd = m.state_dict();
    let kind = |n: &str| sd.iter().find(|(k, _)| k == n).unwrap().1.kind();
    assert_eq!(kind("norm.num_batches_tracked"), Kind::Int64);
    assert_eq!(kind("norm.running_var"), Kind::Double);
    assert!(m.parameters().iter().zip(&before).all(|(a, b)| a.kind() == Kind::Double && a.data_ptr() == b.data_ptr()));
    let y = m.forward_multi(&[Some(&c), Some(&x.to_kind(Kind::Double))]).unwrap().remove(0);
    assert!(y.to_kind(Kind::Float).allclose(&y1, 1e-5, 1e-6, false));
    // Saving into a folder that does not exist fails cleanly.
    let err = m.save_torchscript(&dir.join("missing/x.pt")).unwrap_err();
    assert_eq!(err.code, ErrorCode::Io);
    // Only TorchScript modules have methods: nothing is written.
    let never = dir.join("never.pt");
    let err = Module::linear(2, 2, true).unwrap().save_torchscript(&never).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    assert!(!never.exists());
}

#[test]
fn torchscript_steps_train_the_model() {
    let _rng = init::test_rng_lock();
    let m = tabular();
    let (c, x, t) = batch();
    let batch = Value::Tuple(vec![Value::Tensor(c), Value::Tensor(x), Value::Tensor(t)]);
    let mut losses = Vec::new();
    for step in 0..30 {
        let out = m.call_method("training_step", &[batch.shallow_clone(), Value::Int(step)]).unwrap();
        let Value::Dict(entries) = out else { panic!("a dict") };
        let keys: Vec<&str> =
            entries.iter().map(|(k, _)| if let Value::Str(s) = k { s.as_str() } else { "?" }).collect();
        assert_eq!(keys, ["loss", "acc"]);
        let loss = tensor_of(&entries[0].1);
        losses.push(loss.double_value(&[]));
        for mut p in m.parameters() {
            p.zero_grad();
        }
        loss.backward();
        tch::no_grad(|| {
            for p in m.parameters() {
                let _ = p.shallow_clone().f_sub_(&(p.grad() * 0.1)).unwrap();
            }
        });
    }
    assert!(losses[29] < losses[0] * 0.7, "{losses:?}");
    let names = m.method_names().unwrap();
    for want in ["forward", "training_step", "validation_step", "predict_step"] {
        assert!(names.iter().any(|n| n == want), "{names:?}");
    }
}

#[test]
fn torchscript_methods_take_and_return_every_kind_of_value() {
    let _rng = init::test_rng_lock();
    let m = Module::load_torchscript(&fixture("values_scripted.pt"), Device::Cpu).unwrap();
    assert_eq!(names(&m.state_dict()), ["scale", "calls"]);
    assert_eq!(m.num_outputs().unwrap(), 2);
    let x = Tensor::from_slice(&[1.0f32, -2.0]);
    let y = Tensor::from_slice(&[0.5f32, 0.5]);
    let out = m.forward_multi(&[Some(&x), None]).unwrap();
    assert!(out[0].equal(&(&x * 2.0)) && out[1].equal(&x));
    let out = m.forward_multi(&[Some(&x), Some(&y)]).unwrap();
    assert!(out[1].equal(&(&x + &y)));
    assert_eq!(m.named_buffers()[0].1.int64_value(&[]), 2);
    // Lists, dicts, bools, ints and strings in; a dict of lists out.
    let xs = Value::List(vec![Value::Tensor(x.shallow_clone()), Value::Tensor(y.shallow_clone())]);
    let weights = Value::Dict(vec![(Value::Str("w".into()), Value::Double(3.0))]);
    let args = [xs, weights, Value::Bool(true), Value::Int(1), Value::Str("out".into())];
    let Value::Dict(out) = m.call_method("mix", &args).unwrap() else { panic!("a dict") };
    assert!(matches!(&out[0].0, Value::Str(s) if s == "out"));
    let Value::List(items) = &out[0].1 else { panic!("a list") };
    assert!(tensor_of(&items[0]).equal(&(-(&x * 3.0 + 1.0))));
    assert!(tensor_of(&items[1]).equal(&(-(&y * 3.0 + 1.0))));
    // Scalars, None and int lists out.
    let ints = Value::List(vec![Value::Int(4), Value::Int(5)]);
    let Value::Tuple(t) = m.call_method("describe", &[Value::Int(3), Value::Double(1.0), ints]).unwrap() else {
        panic!("a tuple")
    };
    assert!(matches!(t[0], Value::Int(6)));
    assert!(matches!(t[1], Value::Double(d) if d == 0.5));
    assert!(matches!(t[2], Value::Bool(true)));
    assert!(matches!(&t[3], Value::Str(s) if s == "n=3"));
    assert!(matches!(t[4], Value::None));
    assert!(matches!(&t[5], Value::List(l) if matches!(l[..], [Value::Int(4), Value::Int(5), Value::Int(3)])));
    // Errors: wrong argument types, unknown methods, depth, mixed dict keys.
    let err = m.call_method("describe", &[Value::Str("x".into())]).unwrap_err();
    assert_eq!(err.code, ErrorCode::Torch, "{}", err.message);
    let err = m.call_method("nope", &[]).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert!(err.message.contains("describe"), "{}", err.message);
    let mut deep = Value::None;
    for _ in 0..=MAX_VALUE_DEPTH + 1 {
        deep = Value::List(vec![deep]);
    }
    assert_eq!(m.call_method("describe", &[deep]).unwrap_err().code, ErrorCode::InvalidArgument);
    let mixed = Value::Dict(vec![(Value::Str("a".into()), Value::Int(1)), (Value::Int(2), Value::Int(3))]);
    assert_eq!(m.call_method("describe", &[mixed]).unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(m.call_method("forward", &[Value::Tensor(x)]).unwrap_err().code, ErrorCode::Torch);
}

#[test]
fn torchscript_summary_shows_its_children() {
    let m = tabular();
    let s = crate::callbacks::ModelSummary::of(&m, 1).unwrap();
    let rows: Vec<(&str, &str, i64)> = s.rows.iter().map(|r| (r.name.as_str(), r.kind.as_str(), r.params)).collect();
    assert_eq!(rows, [("embedding", "Embedding", 20), ("norm", "BatchNorm1d", 6), ("body", "Sequential", 322)]);
    let deeper = crate::callbacks::ModelSummary::of(&m, 2).unwrap();
    assert!(deeper.rows.iter().any(|r| r.name == "body.0" && r.kind == "Linear" && r.params == 32 * 7 + 32));
    assert_eq!(s.total, m.num_parameters());
}

#[test]
fn torchscript_is_read_only_from_regular_files() {
    let dir = crate::test_dirs::TempDir::new("script-special");
    crate::test_dirs::assert_special_files_refused(&dir, |p| Module::load_torchscript(p, Device::Cpu));
    let e = Module::load_torchscript(&dir.join("missing.pt"), Device::Cpu).unwrap_err();
    assert_eq!(e.code, ErrorCode::Io);
    assert!(e.message.contains("missing.pt") && e.message.contains("not found"), "{}", e.message);
    // A regular file that is not TorchScript, and one cut short.
    let e = Module::load_torchscript(&fixture("mlp_scripted.safetensors"), Device::Cpu).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    let whole = std::fs::read(fixture("tabular_scripted.pt")).unwrap();
    let cut = dir.join("cut.pt");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    assert_eq!(Module::load_torchscript(&cut, Device::Cpu).unwrap_err().code, ErrorCode::Format);
}

#[test]
fn node_budget_counts_every_path_up_to_the_bound() {
    // A list holding the same list twice counts it twice: 1 + 2 * 3 values.
    let inner = Value::List(vec![Value::Int(1), Value::Int(2)]);
    let outer = Value::List(vec![inner.shallow_clone(), inner]);
    let mut host = NodeBudget::for_host();
    host.take(MAX_VALUE_NODES - 7).unwrap();
    outer.count_into(&mut host).unwrap();
    let err = Value::None.count_into(&mut host).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert!(err.message.contains("FULMEN_MAX_VALUE_NODES"), "{}", err.message);
    let mut result = NodeBudget::for_result();
    assert_eq!(result.take(usize::MAX).unwrap_err().code, ErrorCode::OutOfRange);
    result.take(MAX_VALUE_NODES).unwrap();
    assert_eq!(result.take(1).unwrap_err().code, ErrorCode::OutOfRange);
}

#[test]
fn torchscript_results_are_bounded_like_arguments() {
    let m = Module::load_torchscript(&fixture("values_scripted.pt"), Device::Cpu).unwrap();
    // describe(n, f, ints) returns (int, float, bool, str, None, ints + [n]):
    // len(ints) + 8 values.
    let describe = |len: usize| {
        let ints = Value::List((0..len).map(|i| Value::Int(i as i64)).collect());
        m.call_method("describe", &[Value::Int(3), Value::Double(1.0), ints])
    };
    let Value::Tuple(t) = describe(MAX_VALUE_NODES - 8).unwrap() else { panic!("a tuple") };
    assert!(matches!(&t[5], Value::List(l) if l.len() == MAX_VALUE_NODES - 7));
    drop(t);
    let err = describe(MAX_VALUE_NODES - 7).unwrap_err();
    assert_eq!(err.code, ErrorCode::OutOfRange, "{}", err.message);
    assert!(err.message.contains("a method result holding more than FULMEN_MAX_VALUE_NODES"), "{}", err.message);
    assert!(matches!(describe(1).unwrap(), Value::Tuple(t) if t.len() == 6));
}

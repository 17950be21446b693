//! Tests of exported programs (fixtures from scripts/make_exported_fixture.py,
//! results from PyTorch in tests/fixtures/exported_reference.json).
use super::json::Json;
use crate::checkpoint::torch_zip::{ZipReader, ZipWriter};
use crate::error::ErrorCode;
use crate::nn::{Module, Value};
use crate::test_dirs::TempDir;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn reference() -> Json {
    serde_json::from_slice(&std::fs::read(fixture("exported_reference.json")).unwrap()).unwrap()
}

fn floats(v: &Json) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn ints(v: &Json) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).reshape([-1])).unwrap()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}[{k}]: {g} vs PyTorch's {w}");
    }
}

fn batch(r: &Json) -> (Tensor, Tensor) {
    let x = Tensor::from_slice(&floats(&r["x"])).to_kind(Kind::Float).reshape([-1, 4]);
    let y = Tensor::from_slice(&ints(&r["y"]));
    (x, y)
}

fn dict_get<'a>(v: &'a Value, key: &str) -> &'a Value {
    let Value::Dict(items) = v else { panic!("not a dict: {v:?}") };
    items.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v).unwrap()
}

fn tensor(v: &Value) -> &Tensor {
    match v {
        Value::Tensor(t) => t,
        other => panic!("not a tensor: {other:?}"),
    }
}

#[test]
fn a_training_step_program_trains_as_pytorch_does() {
    let r = reference();
    let m = Module::load_exported(&fixture("exported_bn.pt2"), Device::Cpu).unwrap();
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    let want: Vec<String> = r["state_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().into()).collect();
    assert_eq!(names, want, "state_dict names and order");
    assert_eq!(m.named_parameters().len(), 6);
    assert_eq!(m.method_names().unwrap(), ["forward", "training_step"]);

    let (x, y) = batch(&r);
    let out = m.call_method("training_step", &[Value::List(vec![Value::Tensor(x), Value::Tensor(y)])]).unwrap();
    let loss = tensor(dict_get(&out, "loss"));
    assert_close(&values(loss), &[r["loss"].as_f64().unwrap()], "loss");
    assert_close(&values(tensor(dict_get(&out, "logits"))), &floats(&r["logits"]), "logits");
    loss.backward();
    for (n, p) in m.named_parameters() {
        assert!(p.grad().defined() && p.grad().abs().sum(Kind::Double).double_value(&[]) > 0.0, "{n} has no gradient");
    }
    let state: std::collections::HashMap<String, Tensor> = m.state_dict().into_iter().collect();
    assert_close(&values(&state["bn.running_mean"]), &floats(&r["running_mean"]), "running_mean");
    assert_close(&values(&state["bn.running_var"]), &floats(&r["running_var"]), "running_var");
    assert_eq!(state["bn.num_batches_tracked"].int64_value(&[]), 1);
}

#[test]
fn the_eval_program_shares_the_state_and_takes_another_batch_size() {
    let r = reference();
    let m = Module::load_exported(&fixture("exported_bn.pt2"), Device::Cpu).unwrap();
    let rows = r["eval_x_rows"].as_i64().unwrap();
    let (x, _) = batch(&r);
    let out = m.forward(&x.narrow(0, 0, rows)).unwrap();
    assert_eq!(out.size(), [rows, 3]);
    assert_close(&values(&out), &floats(&r["eval_out"]), "eval forward");
    // A parameter changed through the model reaches every program.
    let p = m.named_parameters().into_iter().find(|(n, _)| n == "l2.bias").unwrap().1;
    let _ = tch::no_grad(|| p.shallow_clone().f_add_(&Tensor::from(1.0f32)).unwrap());
    let moved = m.forward(&x.narrow(0, 0, rows)).unwrap();
    assert_close(&values(&(moved - 1.0)), &floats(&r["eval_out"]), "forward after an update");
}

#[test]
fn tied_weights_are_one_parameter_under_two_names() {
    let r = reference();
    let m = Module::load_exported(&fixture("exported_tied.pt2"), Device::Cpu).unwrap();
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["emb.weight", "head.weight"]);
    assert_eq!(m.named_parameters().len(), 1, "a tied weight is listed once");
    let tokens = Tensor::from_slice(&ints(&r["tokens"])).reshape([2, 5]);
    let out = m.forward(&tokens).unwrap();
    assert_close(&values(&out), &floats(&r["tied_out"]), "tied forward");
    out.sum(Kind::Float).backward();
    assert!(m.parameters()[0].grad().defined());
}

/// The fixture with `edit` applied to the JSON of program `program`.
fn edited(dir: &TempDir, program: &str, edit: impl FnOnce(&mut Json)) -> PathBuf {
    let mut edit = Some(edit);
    let bytes = std::fs::read(fixture("exported_bn.pt2")).unwrap();
    let zip = ZipReader::new(&bytes, "fixture").unwrap();
    let mut out = ZipWriter::new(Vec::new(), "edited");
    let mut names: Vec<&str> = zip.names().collect();
    names.sort();
    for name in names {
        let data = zip.record(name).unwrap();
        if name == format!("models/{program}.json") {
            let mut doc: Json = serde_json::from_slice(data).unwrap();
            if let Some(edit) = edit.take() {
                edit(&mut doc);
            }
            out.add(name, &serde_json::to_vec(&doc).unwrap()).unwrap();
        } else {
            out.add(name, data).unwrap();
        }
    }
    dir.write("edited.pt2", &out.finish().unwrap())
}

fn nodes(doc: &mut Json) -> &mut Vec<Json> {
    doc["graph_module"]["graph"]["nodes"].as_array_mut().unwrap()
}

#[test]
fn broken_archives_are_refused_with_what_is_wrong() {
    let dir = TempDir::new("exported-broken");
    let load = |p: &Path| Module::load_exported(p, Device::Cpu).unwrap_err();

    let unknown = edited(&dir, "forward", |d| nodes(d)[0]["target"] = "torch.ops.aten.no_such_op.default".into());
    let e = load(&unknown);
    assert_eq!(e.code, ErrorCode::Unsupported, "{}", e.message);
    assert!(e.message.contains("aten::no_such_op"), "{}", e.message);

    let early = edited(&dir, "forward", |d| {
        let n = nodes(d);
        n.swap(0, 1);
    });
    let e = load(&early);
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    assert!(e.message.contains("before anything defines it"), "{}", e.message);

    let hop = edited(&dir, "training_step", |d| nodes(d)[0]["target"] = "torch.ops.higher_order.cond".into());
    assert!(load(&hop).message.contains("higher-order"));

    let lying = edited(&dir, "forward", |d| {
        nodes(d)[0]["inputs"][0]["arg"] = serde_json::json!({"as_custom_obj": {"name": "g", "class_fqn": "x"}});
    });
    assert_eq!(load(&lying).code, ErrorCode::Unsupported);

    let bytes = std::fs::read(fixture("exported_bn.pt2")).unwrap();
    let cut = dir.write("cut.pt2", &bytes[..bytes.len() / 2]);
    assert_eq!(load(&cut).code, ErrorCode::Format);
    let e = load(&fixture("mlp_scripted.pt"));
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    crate::test_dirs::assert_special_files_refused(&dir, |p| Module::load_exported(p, Device::Cpu));
}

#[test]
fn a_stored_tensor_larger_than_its_file_is_refused_before_it_is_made() {
    let dir = TempDir::new("exported-sizes");
    let bytes = std::fs::read(fixture("exported_tied.pt2")).unwrap();
    let zip = ZipReader::new(&bytes, "fixture").unwrap();
    let mut out = ZipWriter::new(Vec::new(), "edited");
    let mut names: Vec<&str> = zip.names().collect();
    names.sort();
    for name in names {
        let data = zip.record(name).unwrap();
        if name.ends_with("_weights_config.json") {
            let mut doc: Json = serde_json::from_slice(data).unwrap();
            doc["config"]["emb.weight"]["tensor_meta"]["sizes"][0] = serde_json::json!({"as_int": 1i64 << 40});
            out.add(name, &serde_json::to_vec(&doc).unwrap()).unwrap();
        } else {
            out.add(name, data).unwrap();
        }
    }
    let path = dir.write("huge.pt2", &out.finish().unwrap());
    let e = Module::load_exported(&path, Device::Cpu).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
    assert!(e.message.contains("emb.weight"), "{}", e.message);
}

#[test]
fn a_no_grad_block_keeps_gradients_out_of_what_it_computes() {
    let r = reference();
    let m = Module::load_exported(&fixture("exported_nograd.pt2"), Device::Cpu).unwrap();
    let x = Tensor::from_slice(&floats(&r["nograd_x"])).to_kind(Kind::Float).reshape([3, 4]);
    let out = m.forward_multi(&[Some(&x)]).unwrap();
    assert!(!out[1].requires_grad(), "what the no_grad block computed needs no gradient");
    assert!(crate::tensor::runtime::grad_enabled(), "the grad mode is restored after the call");
    assert_close(&values(&out[0]), &[r["nograd_loss"].as_f64().unwrap()], "loss");
    out[0].backward();
    let w = m.named_parameters().into_iter().find(|(n, _)| n == "l.weight").unwrap().1;
    assert_close(&values(&w.grad()), &floats(&r["nograd_weight_grad"]), "weight gradient");
}

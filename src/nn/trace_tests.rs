//! Tests of `Module::to_torchscript`: traced fulmen layers, host modules and
//! multi-result layers give the model's evaluation-mode results, hold copies
//! under the state_dict's names (tied ones tied), save and load back, and
//! refuse what a trace cannot hold.
use super::tests::names;
use super::*;
use crate::error::{ErrorCode, Result};
use crate::test_dirs::TempDir;
use std::sync::Arc;
use tch::{Device, Kind, Tensor};

/// Linear, BatchNorm (running statistics), ReLU, Dropout, Linear.
fn mlp() -> Module {
    let mut m = Module::sequential();
    m.push(Module::linear(4, 8, true).unwrap()).unwrap();
    m.push(Module::batch_norm(8, 1e-5, 0.1, true, true).unwrap()).unwrap();
    m.push(Module::activation(Activation::Relu)).unwrap();
    m.push(Module::dropout(0.5).unwrap()).unwrap();
    m.push(Module::linear(8, 3, true).unwrap()).unwrap();
    m
}

fn batch() -> Tensor {
    Tensor::arange(20, (Kind::Float, Device::Cpu)).reshape([5, 4]).sin()
}

#[test]
fn a_traced_model_gives_the_evaluation_forward_and_holds_copies() {
    let _rng = init::test_rng_lock();
    let mut m = mlp();
    let x = batch();
    // Running statistics away from their start, so evaluation mode shows.
    let _ = m.forward(&(&x * 3.0 + 1.0)).unwrap();
    let mut traced = m.to_torchscript(&[x.shallow_clone()]).unwrap();
    assert!(m.is_training(), "the model is put back in training mode");
    assert!(!traced.is_training(), "the trace starts in evaluation mode");
    assert_eq!(traced.type_name(), "ScriptModule");
    assert_eq!(names(&traced.state_dict()), names(&m.state_dict()));
    m.set_training(false).unwrap();
    let want = m.forward(&x).unwrap();
    let other = batch().cos();
    assert!(traced.forward(&x).unwrap().allclose(&want, 1e-6, 1e-6, false));
    assert!(traced.forward(&other).unwrap().allclose(&m.forward(&other).unwrap(), 1e-6, 1e-6, false));
    // Copies: the model's weights and statistics change, the trace's not.
    for ((name, mine), (_, theirs)) in m.state_dict().iter().zip(traced.state_dict()) {
        assert!(mine.equal(&theirs), "{name}");
        assert_ne!(mine.data_ptr(), theirs.data_ptr(), "{name} is a copy");
        assert_eq!(mine.requires_grad(), theirs.requires_grad(), "{name}");
    }
    m.set_training(true).unwrap();
    let _ = m.forward(&(&x - 2.0)).unwrap();
    let _ = tch::no_grad(|| m.parameters()[0].f_add_(&Tensor::from(1.0f32))).unwrap();
    assert!(traced.forward(&x).unwrap().allclose(&want, 1e-6, 1e-6, false));
    // A trace in training mode is still the evaluation graph (no dropout).
    traced.set_training(true).unwrap();
    assert!(traced.forward(&x).unwrap().allclose(&want, 1e-6, 1e-6, false));
}

#[test]
fn a_traced_model_saves_as_torchscript_and_loads_back() {
    let _rng = init::test_rng_lock();
    let mut m = mlp();
    let x = batch();
    let traced = m.to_torchscript(&[x.shallow_clone()]).unwrap();
    let dir = TempDir::new("trace");
    let path = dir.join("mlp.pt");
    traced.save_torchscript(&path).unwrap();
    let loaded = Module::load_torchscript(&path, Device::Cpu).unwrap();
    assert_eq!(names(&loaded.state_dict()), names(&m.state_dict()));
    assert!(loaded.forward(&x).unwrap().allclose(&traced.forward(&x).unwrap(), 0.0, 0.0, false));
}

/// A host module: an Embedding child and its weight registered again as
/// the output head ("head", tied), returning logits and the embeddings.
#[derive(Debug)]
struct TiedLm;

impl HostForward for TiedLm {
    fn num_outputs(&self) -> usize {
        2
    }

    fn forward(&self, module: &Module, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ids = inputs[0].expect("ids");
        let h = module.forward_child("emb", ids)?;
        let head = module.state_dict().into_iter().find(|(n, _)| n == "head").expect("head").1;
        let logits = h.matmul(&head.tr());
        Ok(vec![logits, h])
    }
}

fn tied_lm() -> Module {
    let mut m = Module::host(Arc::new(TiedLm));
    m.add("emb", Module::embedding(10, 4).unwrap()).unwrap();
    let w = m.state_dict()[0].1.shallow_clone();
    m.register_parameter("head", &w).unwrap();
    m
}

#[test]
fn a_host_module_traces_with_its_results_and_tied_weights() {
    let _rng = init::test_rng_lock();
    let mut m = tied_lm();
    let ids = Tensor::from_slice(&[1i64, 4, 9, 0, 3, 3]).reshape([2, 3]);
    let traced = m.to_torchscript(&[ids.shallow_clone()]).unwrap();
    let want = m.forward_multi(&[Some(&ids)]).unwrap();
    let got = traced.forward_multi(&[Some(&ids)]).unwrap();
    assert_eq!(got.len(), 2);
    for (g, w) in got.iter().zip(&want) {
        assert!(g.allclose(w, 1e-6, 1e-6, false));
    }
    let sd = traced.state_dict();
    assert_eq!(names(&sd), names(&m.state_dict()));
    assert_eq!(sd[0].1.data_ptr(), sd[1].1.data_ptr(), "head and emb.weight stay one tensor");
    assert_ne!(sd[0].1.data_ptr(), m.state_dict()[0].1.data_ptr());
    let other = Tensor::from_slice(&[7i64, 7, 2]).reshape([1, 3]);
    let got = traced.forward_multi(&[Some(&other)]).unwrap();
    assert!(got[0].allclose(&m.forward_multi(&[Some(&other)]).unwrap()[0], 1e-6, 1e-6, false));
}

#[test]
fn an_lstm_traces_with_its_states() {
    let _rng = init::test_rng_lock();
    let cfg = RnnConfig {
        input_size: 3,
        hidden_size: 5,
        num_layers: 2,
        bias: true,
        batch_first: true,
        dropout: 0.0,
        bidirectional: true,
    };
    let mut m = Module::rnn(RnnKind::Lstm, cfg).unwrap();
    let x = Tensor::arange(24, (Kind::Float, Device::Cpu)).reshape([2, 4, 3]).cos();
    let traced = m.to_torchscript(&[x.shallow_clone()]).unwrap();
    let want = m.forward_multi(&[Some(&x)]).unwrap();
    let got = traced.forward_multi(&[Some(&x)]).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(g.allclose(w, 1e-6, 1e-6, false));
    }
}

/// A host module whose forward draws fresh noise: its trace cannot give
/// the same results again.
#[derive(Debug)]
struct Noisy;

impl HostForward for Noisy {
    fn num_outputs(&self) -> usize {
        1
    }

    fn forward(&self, _module: &Module, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = inputs[0].expect("x");
        Ok(vec![x + Tensor::randn(x.size(), (Kind::Float, Device::Cpu))])
    }
}

#[test]
fn what_a_trace_cannot_hold_is_refused_and_the_model_is_left_as_it_was() {
    let _rng = init::test_rng_lock();
    let mut m = mlp();
    let err = m.to_torchscript(&[]).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    let many: Vec<Tensor> = (0..=MAX_TRACE_INPUTS).map(|_| batch()).collect();
    assert_eq!(m.to_torchscript(&many).unwrap_err().code, ErrorCode::InvalidArgument);
    // The forward's own error, and the model back in training mode.
    let err = m.to_torchscript(&[Tensor::zeros([2, 5], (Kind::Float, Device::Cpu))]).unwrap_err();
    assert_eq!(err.code, ErrorCode::ShapeMismatch, "{err}");
    assert!(m.is_training());
    // The failed trace left no tracing state behind.
    assert!(m.to_torchscript(&[batch()]).is_ok());
    let err = Module::host(Arc::new(Noisy)).to_torchscript(&[batch()]).unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported, "{err}");
    assert!(err.message.contains("differs from the model's"), "{err}");
    let mut meta = {
        let _scope = meta_init::MetaInitScope::new().unwrap();
        mlp()
    };
    let err = meta.to_torchscript(&[batch()]).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState, "{err}");
}

//! Activation checkpointing on one process: a checkpointed forward's loss
//! and gradients equal the plain forward's bit for bit (dropout, autocast,
//! nesting, inputs without gradients), and failures of the second forward
//! come back from backward as errors.
use super::host::HostForward;
use super::module::Module;
use crate::nn::Activation;
use crate::precision::autocast::AutocastGuard;
use crate::tensor::device::DeviceType;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tch::{Kind, Tensor};

fn block() -> Module {
    let mut b = Module::sequential();
    b.push(Module::linear(4, 8, true).unwrap()).unwrap();
    b.push(Module::dropout(0.3).unwrap()).unwrap();
    b.push(Module::activation(Activation::Tanh)).unwrap();
    b.push(Module::linear(8, 4, true).unwrap()).unwrap();
    b
}

/// `Sequential(Linear(3, 4), block, block, Linear(4, 1))` from one seed,
/// with the modules at `checkpointed` checkpointed.
fn model(checkpointed: &[&str]) -> Module {
    tch::manual_seed(7);
    let mut m = Module::sequential();
    m.push(Module::linear(3, 4, true).unwrap()).unwrap();
    m.push(block()).unwrap();
    m.push(block()).unwrap();
    m.push(Module::linear(4, 1, true).unwrap()).unwrap();
    for path in checkpointed {
        m.set_activation_checkpointing(path, true).unwrap();
    }
    m
}

/// The loss and every parameter's gradient after one forward and backward
/// from the same generator state.
fn step(m: &Module, x: &Tensor) -> (f64, Vec<Tensor>) {
    tch::manual_seed(3);
    let loss = m.forward(x).unwrap().square().mean(Kind::Float);
    loss.f_backward().unwrap();
    let grads = m.parameters().iter().map(|p| p.grad().copy()).collect();
    (loss.double_value(&[]), grads)
}

fn assert_same(what: &str, a: &(f64, Vec<Tensor>), b: &(f64, Vec<Tensor>)) {
    assert_eq!(a.0.to_bits(), b.0.to_bits(), "{what}: loss {} vs {}", a.0, b.0);
    assert_eq!(a.1.len(), b.1.len());
    for (i, (ga, gb)) in a.1.iter().zip(&b.1).enumerate() {
        assert!(ga.defined() && gb.defined(), "{what}: parameter {i} has no gradient");
        assert!(ga.equal(gb), "{what}: parameter {i}'s gradient differs");
    }
}

fn input() -> Tensor {
    tch::manual_seed(5);
    Tensor::randn([6, 3], (Kind::Float, tch::Device::Cpu))
}

#[test]
fn checkpointed_blocks_give_the_plain_gradients_with_dropout() {
    let _rng = crate::nn::init::test_rng_lock();
    let x = input();
    let plain = step(&model(&[]), &x);
    assert_same("blocks", &step(&model(&["1", "2"]), &x), &plain);
    // Nested: a block and a layer inside it.
    assert_same("nested", &step(&model(&["1", "1.0", "2.3"]), &x), &plain);
    // The first layer, whose input needs no gradient: its parameters
    // still get theirs.
    assert_same("first layer", &step(&model(&["0"]), &x), &plain);
}

#[test]
fn checkpointed_blocks_run_again_under_the_first_runs_autocast() {
    let _rng = crate::nn::init::test_rng_lock();
    let x = input();
    let under_bf16 = |m: &Module| {
        let guard = AutocastGuard::enter(DeviceType::Cpu, Kind::BFloat16).unwrap();
        tch::manual_seed(3);
        let loss = m.forward(&x).unwrap().to_kind(Kind::Float).square().mean(Kind::Float);
        drop(guard);
        // Backward outside autocast, as the trainer runs it.
        loss.f_backward().unwrap();
        let grads: Vec<Tensor> = m.parameters().iter().map(|p| p.grad().copy()).collect();
        (loss.double_value(&[]), grads)
    };
    let plain = under_bf16(&model(&[]));
    assert_same("bf16-mixed", &under_bf16(&model(&["1", "2"])), &plain);
}

#[test]
fn without_gradients_a_checkpointed_forward_runs_once_plainly() {
    let _rng = crate::nn::init::test_rng_lock();
    let x = input();
    let mut m = model(&["1", "2"]);
    m.set_training(false).unwrap();
    let mut plain = model(&[]);
    plain.set_training(false).unwrap();
    let a = tch::no_grad(|| m.forward(&x).unwrap());
    let b = tch::no_grad(|| plain.forward(&x).unwrap());
    assert!(!a.requires_grad());
    assert!(a.equal(&b));
}

/// `x * w`, failing from its `fail_from`-th call on.
#[derive(Debug)]
struct Scale {
    calls: AtomicUsize,
    fail_from: usize,
}

impl HostForward for Scale {
    fn num_outputs(&self) -> usize {
        1
    }
    fn forward(&self, module: &Module, inputs: &[Option<&Tensor>]) -> crate::Result<Vec<Tensor>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_from {
            return Err(crate::Error::invalid("the host forward refuses to run again"));
        }
        let w = module.named_parameters().into_iter().find(|(n, _)| n == "w").unwrap().1;
        Ok(vec![inputs[0].unwrap() * w])
    }
}

fn scaled(fail_from: usize) -> (Module, Arc<Scale>) {
    let host = Arc::new(Scale { calls: AtomicUsize::new(0), fail_from });
    let mut h = Module::host(host.clone());
    h.register_parameter("w", &Tensor::from_slice(&[2.0f32, 3.0, 4.0])).unwrap();
    let mut m = Module::sequential();
    m.push(h).unwrap();
    m.set_activation_checkpointing("0", true).unwrap();
    (m, host)
}

#[test]
fn a_failing_second_forward_fails_backward_with_its_message() {
    let _rng = crate::nn::init::test_rng_lock();
    let (m, host) = scaled(2);
    let loss = m.forward(&input()).unwrap().sum(Kind::Float);
    let e = loss.f_backward().unwrap_err().to_string();
    assert!(e.contains("refuses to run again"), "{e}");
    assert_eq!(host.calls.load(Ordering::SeqCst), 2);
    // The model goes on: a forward without gradients runs.
    let (ok, _) = scaled(usize::MAX);
    let y = ok.forward(&input()).unwrap();
    assert_eq!(y.size(), [6, 3]);
}

/// A strategy's mark checkpoints `forward` and `forward_multi` alike: the
/// host forward runs again in backward.
#[test]
fn a_strategy_mark_checkpoints_both_forwards() {
    let _rng = crate::nn::init::test_rng_lock();
    let (mut m, host) = scaled(usize::MAX);
    m.set_activation_checkpointing("0", false).unwrap();
    m.child_mut("0").unwrap().checkpointed_by_strategy = true;
    m.forward(&input()).unwrap().sum(Kind::Float).f_backward().unwrap();
    assert_eq!(host.calls.load(Ordering::SeqCst), 2, "forward");
    let x = input();
    let out = m.forward_multi(&[Some(&x)]).unwrap();
    out[0].sum(Kind::Float).f_backward().unwrap();
    assert_eq!(host.calls.load(Ordering::SeqCst), 4, "forward_multi");
}

#[test]
fn an_input_changed_after_the_forward_fails_backward() {
    let _rng = crate::nn::init::test_rng_lock();
    let (m, host) = scaled(usize::MAX);
    let mut x = input();
    let loss = m.forward(&x).unwrap().sum(Kind::Float);
    let _ = x.f_add_(&Tensor::from(1.0f32)).unwrap();
    let e = loss.f_backward().unwrap_err().to_string();
    assert!(e.contains("modified by an inplace operation"), "{e}");
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);
    // Dropped with the graph: the copy of the module goes with it.
    drop(loss);
    assert_eq!(Arc::strong_count(&host), 2);
}

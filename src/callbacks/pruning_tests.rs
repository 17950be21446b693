//! ModelPruning's masks against torch.nn.utils.prune's on the same weights,
//! the weights and gradients it masks in place, the lottery ticket reset
//! and Lightning's checks. The pruned indices expected are PyTorch 2.13's,
//! printed by this script (the model's first and second Linear are
//! `m[0]` and `m[2]` there, "0." and "1." here):
//!
//! ```python
//! import math, torch, torch.nn as nn, torch.nn.utils.prune as prune
//! def net():
//!     m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
//!     with torch.no_grad():
//!         m[0].weight.copy_(torch.tensor([math.sin(i * 1.7 + 0.3) for i in range(12)]).view(4, 3))
//!         m[0].bias.copy_(torch.tensor([math.sin(i * 2.3) for i in range(4)]))
//!         m[2].weight.copy_(torch.tensor([math.cos(i * 0.9) for i in range(8)]).view(2, 4))
//!         m[2].bias.copy_(torch.tensor([0.05, -0.02]))
//!     return m
//! def zeros(mask): return [i for i, v in enumerate(mask.reshape(-1).tolist()) if v == 0]
//! m = net()
//! prune.l1_unstructured(m[0], "weight", amount=0.5)         # [0, 2, 5, 7, 9, 11]
//! prune.l1_unstructured(m[0], "weight", amount=2)           # [0, 2, 3, 4, 5, 7, 9, 11]
//! m = net()
//! params = [(m[0], "weight"), (m[2], "weight"), (m[0], "bias"), (m[2], "bias")]
//! prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=0.3)
//! # [[0, 9, 11], [2, 5], [0], [0, 1]]
//! prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=5)
//! # [[0, 2, 5, 7, 9, 11], [1, 2, 5], [0, 3], [0, 1]]
//! m = net(); torch.manual_seed(42)
//! prune.random_unstructured(m[0], "weight", amount=0.25)    # [3, 8, 10]
//! prune.random_unstructured(m[0], "weight", amount=0.5)     # [0, 2, 3, 5, 8, 9, 10]
//! m = net(); torch.manual_seed(7)
//! params = [(m[0], "weight"), (m[2], "weight")]
//! prune.global_unstructured(params, pruning_method=prune.RandomUnstructured, amount=0.5)
//! # [[0, 2, 3, 7, 9, 10, 11], [2, 4, 6]]
//! ```
use super::pruning::{prune_flat, ModelPruning, ModelPruningOptions, PruningAmount, PruningMethod};
use crate::error::{ErrorCode, Result};
use crate::nn::Module;
use crate::trainer::hooks::{Callback, Hook, HookContext, TrainerState};
use crate::trainer::SharedModel;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tch::{Kind, Tensor};

/// The script's model: Linear(3, 4) and Linear(4, 2) with its weights.
fn model() -> SharedModel {
    let mut m = Module::sequential();
    m.push(Module::linear(3, 4, true).unwrap()).unwrap();
    m.push(Module::linear(4, 2, true).unwrap()).unwrap();
    let values: [(&str, Vec<f32>); 4] = [
        ("0.weight", (0..12).map(|i| (i as f64 * 1.7 + 0.3).sin() as f32).collect()),
        ("0.bias", (0..4).map(|i| (i as f64 * 2.3).sin() as f32).collect()),
        ("1.weight", (0..8).map(|i| (i as f64 * 0.9).cos() as f32).collect()),
        ("1.bias", vec![0.05, -0.02]),
    ];
    let params: BTreeMap<String, Tensor> = m.named_parameters().into_iter().collect();
    let _guard = tch::no_grad_guard();
    for (name, v) in values {
        let p = &params[name];
        p.detach().copy_(&Tensor::from_slice(&v).reshape(p.size()));
    }
    Arc::new(Mutex::new(m))
}

fn param(model: &SharedModel, name: &str) -> Tensor {
    let params: BTreeMap<String, Tensor> = model.lock().unwrap().named_parameters().into_iter().collect();
    params[name].shallow_clone()
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.detach().to_kind(Kind::Double).reshape([-1i64])).unwrap()
}

/// The flat indices of the zeros of `t`.
fn zeros(t: &Tensor) -> Vec<i64> {
    values(t).iter().enumerate().filter(|(_, v)| **v == 0.0).map(|(i, _)| i as i64).collect()
}

fn hook_with(cb: &mut ModelPruning, hook: Hook, model: &SharedModel, sanity_checking: bool) -> Result<()> {
    let mut state = TrainerState { sanity_checking, ..Default::default() };
    let mut ctx = HookContext::new(hook, "fit", &mut state);
    ctx.model = Some(model.clone());
    cb.on_hook(&mut ctx)
}

fn hook(cb: &mut ModelPruning, hook: Hook, model: &SharedModel) -> Result<()> {
    hook_with(cb, hook, model, false)
}

/// Lightning's options without the lottery ticket reset.
fn options(method: PruningMethod, amount: PruningAmount, global: bool, names: &[&str]) -> ModelPruningOptions {
    let mut o = ModelPruningOptions::new(method, amount);
    o.use_global_unstructured = global;
    o.use_lottery_ticket_hypothesis = false;
    o.parameter_names = names.iter().map(|n| n.to_string()).collect();
    o
}

fn targets(model: &SharedModel, names: &[&str]) -> Vec<(String, Tensor)> {
    names.iter().map(|n| (n.to_string(), param(model, n))).collect()
}

#[test]
fn local_l1_masks_are_torchs() {
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    let before = values(&param(&m, "0.weight"));
    let opts = options(PruningMethod::L1Unstructured, PruningAmount::Fraction(0.5), false, &["weight"]);
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    assert_eq!(cb.parameter_names(), ["0.weight", "1.weight"]);
    hook(&mut cb, Hook::TrainEpochEnd, &m).unwrap();
    assert_eq!(zeros(cb.mask("0.weight").unwrap()), [0, 2, 5, 7, 9, 11]);
    // The weights themselves are pruned; the others keep their values.
    let after = values(&param(&m, "0.weight"));
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        assert_eq!(*a, if [0, 2, 5, 7, 9, 11].contains(&i) { 0.0 } else { *b }, "entry {i}");
    }
    // A second pruning takes a count among the entries left.
    cb.prune(&targets(&m, &["0.weight"]), PruningAmount::Count(2)).unwrap();
    assert_eq!(zeros(cb.mask("0.weight").unwrap()), [0, 2, 3, 4, 5, 7, 9, 11]);
    // More than are left is torch's ValueError.
    let e = cb.prune(&targets(&m, &["0.weight"]), PruningAmount::Count(5)).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange, "{}", e.message);
    assert!(e.message.contains("0.weight"), "{}", e.message);
}

#[test]
fn global_l1_masks_are_torchs() {
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    let opts = options(PruningMethod::L1Unstructured, PruningAmount::Fraction(0.3), true, &[]);
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    // Lightning's order: every weight, then every bias.
    let names = ["0.weight", "1.weight", "0.bias", "1.bias"];
    assert_eq!(cb.parameter_names(), names);
    hook(&mut cb, Hook::TrainEpochEnd, &m).unwrap();
    let masks = |cb: &ModelPruning| names.iter().map(|n| zeros(cb.mask(n).unwrap())).collect::<Vec<_>>();
    assert_eq!(masks(&cb), [vec![0, 9, 11], vec![2, 5], vec![0], vec![0, 1]]);
    cb.prune(&targets(&m, &names), PruningAmount::Count(5)).unwrap();
    assert_eq!(masks(&cb), [vec![0, 2, 5, 7, 9, 11], vec![1, 2, 5], vec![0, 3], vec![0, 1]]);
}

#[test]
fn random_masks_are_torchs_for_the_same_seed() {
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    let opts = options(PruningMethod::RandomUnstructured, PruningAmount::Fraction(0.25), false, &["weight"]);
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    tch::manual_seed(42);
    cb.prune(&targets(&m, &["0.weight"]), PruningAmount::Fraction(0.25)).unwrap();
    assert_eq!(zeros(cb.mask("0.weight").unwrap()), [3, 8, 10]);
    cb.prune(&targets(&m, &["0.weight"]), PruningAmount::Fraction(0.5)).unwrap();
    assert_eq!(zeros(cb.mask("0.weight").unwrap()), [0, 2, 3, 5, 8, 9, 10]);

    let m = model();
    let opts = options(PruningMethod::RandomUnstructured, PruningAmount::Fraction(0.5), true, &["weight"]);
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    tch::manual_seed(7);
    hook(&mut cb, Hook::TrainEpochEnd, &m).unwrap();
    assert_eq!(zeros(cb.mask("0.weight").unwrap()), [0, 2, 3, 7, 9, 10, 11]);
    assert_eq!(zeros(cb.mask("1.weight").unwrap()), [2, 4, 6]);
}

#[test]
fn fractions_round_half_to_even_as_python() {
    let scores = Tensor::from_slice(&[0.5f32, -0.1, 0.3, 0.2, -0.4]);
    let ones = scores.ones_like();
    // round(0.5 * 5) is 2 in Python.
    let mask = prune_flat(PruningMethod::L1Unstructured, PruningAmount::Fraction(0.5), &scores, &ones, "x").unwrap();
    assert_eq!(zeros(&mask), [1, 3]);
    // round(0.7 * 5) is 4; amount 0 keeps all.
    let mask = prune_flat(PruningMethod::L1Unstructured, PruningAmount::Fraction(0.7), &scores, &ones, "x").unwrap();
    assert_eq!(zeros(&mask), [1, 2, 3, 4]);
    let mask = prune_flat(PruningMethod::L1Unstructured, PruningAmount::Count(0), &scores, &ones, "x").unwrap();
    assert!(zeros(&mask).is_empty());
}

#[test]
fn training_sees_masked_weights_and_gradients() {
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    let mut opts = options(PruningMethod::L1Unstructured, PruningAmount::Fraction(0.5), false, &[]);
    opts.parameters_to_prune = vec!["0.weight".into()];
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    hook(&mut cb, Hook::TrainEpochEnd, &m).unwrap();
    let pruned = zeros(cb.mask("0.weight").unwrap());
    // A backward gives the pruned entries gradients; the optimizer step
    // must not see them (torch's weight_orig gets none).
    let x = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 0.25, 1.5, -1.0]).reshape([2, 3]);
    let y = m.lock().unwrap().forward(&x).unwrap().sum(Kind::Float);
    y.backward();
    let w = param(&m, "0.weight");
    assert!(values(&w.grad()).iter().all(|g| *g != 0.0), "every entry has a gradient before the hook");
    hook(&mut cb, Hook::BeforeOptimizerStep, &m).unwrap();
    assert_eq!(zeros(&w.grad()), pruned);
    // Momentum or weight decay moving a pruned entry: masked after the batch.
    tch::no_grad(|| {
        let _ = w.detach().fill_(0.75);
    });
    hook(&mut cb, Hook::TrainBatchEnd, &m).unwrap();
    assert_eq!(zeros(&w), pruned);
    // The end of training makes it permanent: the weights stay pruned,
    // the masks go.
    hook(&mut cb, Hook::TrainEnd, &m).unwrap();
    assert!(cb.mask("0.weight").is_none());
    assert_eq!(zeros(&w), pruned);
}

#[test]
fn lottery_ticket_puts_the_kept_weights_back() {
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    let first = values(&param(&m, "0.weight"));
    let mut opts = options(PruningMethod::L1Unstructured, PruningAmount::Fraction(0.5), false, &["weight"]);
    opts.use_lottery_ticket_hypothesis = true;
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    // Training moves the weights; the masks rank the trained ones.
    let w = param(&m, "0.weight");
    tch::no_grad(|| {
        let _ = w.detach().g_add_(&Tensor::from_slice(&[0.5f32]));
    });
    let trained = values(&w);
    hook(&mut cb, Hook::TrainEpochEnd, &m).unwrap();
    let mut order: Vec<usize> = (0..12).collect();
    order.sort_by(|a, b| trained[*a].abs().total_cmp(&trained[*b].abs()));
    let mut want: Vec<i64> = order[..6].iter().map(|i| *i as i64).collect();
    want.sort();
    assert_eq!(zeros(cb.mask("0.weight").unwrap()), want);
    for (i, v) in values(&w).iter().enumerate() {
        assert_eq!(*v, if want.contains(&(i as i64)) { 0.0 } else { first[i] }, "entry {i}");
    }
}

#[test]
fn validation_end_prunes_when_asked_but_not_in_the_sanity_check() {
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    let mut opts = options(PruningMethod::L1Unstructured, PruningAmount::Count(3), false, &[]);
    opts.parameters_to_prune = vec!["0.bias".into()];
    opts.prune_on_train_epoch_end = false;
    let mut cb = ModelPruning::new(opts).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    hook(&mut cb, Hook::TrainEpochEnd, &m).unwrap();
    hook_with(&mut cb, Hook::ValidationEpochEnd, &m, true).unwrap();
    assert!(cb.mask("0.bias").is_none());
    hook(&mut cb, Hook::ValidationEpochEnd, &m).unwrap();
    assert_eq!(zeros(cb.mask("0.bias").unwrap()).len(), 3);
    // "1.bias" has 2 entries: torch refuses a count of 3.
    let e = ModelPruning::new(options(PruningMethod::L1Unstructured, PruningAmount::Count(3), false, &["bias"]))
        .and_then(|mut cb| {
            hook(&mut cb, Hook::Setup, &m)?;
            hook(&mut cb, Hook::TrainEpochEnd, &m)
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange, "{}", e.message);
}

#[test]
fn lightnings_checks() {
    let l1 = PruningMethod::L1Unstructured;
    assert_eq!(PruningMethod::parse("L1_Unstructured").unwrap(), l1);
    assert_eq!(PruningMethod::parse("ln_structured").unwrap_err().code, ErrorCode::Unsupported);
    assert_eq!(PruningMethod::parse("l2").unwrap_err().code, ErrorCode::InvalidArgument);
    let refused = |o: ModelPruningOptions| ModelPruning::new(o).err().map(|e| e.code);
    let bad = ErrorCode::InvalidArgument;
    assert_eq!(refused(ModelPruningOptions::new(l1, PruningAmount::Fraction(1.5))), Some(bad));
    assert_eq!(refused(ModelPruningOptions::new(l1, PruningAmount::Fraction(f64::NAN))), Some(bad));
    assert_eq!(refused(ModelPruningOptions::new(l1, PruningAmount::Count(-1))), Some(bad));
    let mut o = ModelPruningOptions::new(l1, PruningAmount::Fraction(0.5));
    o.parameter_names = vec!["gamma".into()];
    assert_eq!(refused(o.clone()), Some(bad));
    o.parameter_names = vec!["weight".into(), "weight".into()];
    assert_eq!(refused(o.clone()), Some(bad));
    o.parameter_names.clear();
    o.verbose = 3;
    assert_eq!(refused(o.clone()), Some(bad));
    o.verbose = 0;
    assert_eq!(refused(o.clone()), None);
    // Names the model lacks are refused at fit's setup.
    let _rng = crate::nn::init::test_rng_lock();
    let m = model();
    o.parameters_to_prune = vec!["1.weight".into(), "2.weight".into()];
    let mut cb = ModelPruning::new(o.clone()).unwrap();
    let e = hook(&mut cb, Hook::Setup, &m).unwrap_err();
    assert!(e.code == bad && e.message.contains("2.weight"), "{}", e.message);
    o.parameters_to_prune = vec!["1.weight".into(), "0.bias".into()];
    let mut cb = ModelPruning::new(o).unwrap();
    hook(&mut cb, Hook::Setup, &m).unwrap();
    assert_eq!(cb.parameter_names(), ["1.weight", "0.bias"]);
}

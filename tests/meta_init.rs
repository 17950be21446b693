//! Models built on the meta device equal their eager builds under the same
//! seed, bit for bit, and leave the generator where the eager build does.
//! The layers draw from libtorch's global generator, so these run in their
//! own process (this test binary), one at a time.
use fulmen::nn::init_fns::{self, FanMode};
use fulmen::nn::meta_init::MetaInitScope;
use fulmen::nn::{Activation, Module, RnnConfig, RnnKind, TransformerConfig};
use fulmen::tensor::device::{Device, DeviceType};
use fulmen::tensor::inplace;
use std::sync::{Mutex, MutexGuard};
use tch::{Kind, Tensor};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn test_rng_lock() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn is_meta(t: &Tensor) -> bool {
    Device::of(t).unwrap() == Device::Other(DeviceType::Meta, 0)
}

/// A model with a layer of each kind that makes tensors, some of them
/// given other values by the host afterwards.
fn every_layer() -> Module {
    let mut m = Module::named();
    m.add("embed", Module::embedding_padded(11, 8, 3).unwrap()).unwrap();
    m.add("conv", Module::conv2d(2, 4, [3, 3], [1, 1], [1, 1], [1, 1], 1, true).unwrap()).unwrap();
    m.add("bn", Module::batch_norm(4, 1e-5, 0.1, true, true).unwrap()).unwrap();
    m.add("ln", Module::layer_norm(&[8], 1e-5, true).unwrap()).unwrap();
    m.add("prelu", Module::prelu(1, 0.25).unwrap()).unwrap();
    let rnn = RnnConfig {
        input_size: 8,
        hidden_size: 6,
        num_layers: 2,
        bias: true,
        batch_first: true,
        dropout: 0.0,
        bidirectional: true,
    };
    m.add("lstm", Module::rnn(RnnKind::Lstm, rnn).unwrap()).unwrap();
    let layer = TransformerConfig {
        d_model: 8,
        nhead: 2,
        dim_feedforward: 16,
        dropout: 0.0,
        activation: Activation::Gelu,
        layer_norm_eps: 1e-5,
        batch_first: true,
        norm_first: true,
        bias: true,
        causal: false,
    };
    m.add("block", Module::transformer_encoder_layer(layer).unwrap()).unwrap();
    m.add("head", Module::linear(8, 5, true).unwrap()).unwrap();
    // The host's own initialisation, as GPT-2's scaled projections.
    let named = m.named_parameters();
    let get = |n: &str| named.iter().find(|(k, _)| k == n).unwrap().1.shallow_clone();
    init_fns::kaiming_uniform_(&get("head.weight"), 0.0, FanMode::FanOut, "relu").unwrap();
    inplace::mul_scalar_(&get("head.weight"), 0.5).unwrap();
    init_fns::orthogonal_(&get("lstm.weight_hh_l0"), 1.0).unwrap();
    init_fns::trunc_normal_(&get("embed.weight"), 0.0, 0.02, -0.04, 0.04).unwrap();
    inplace::zero_(&get("head.bias")).unwrap();
    inplace::add_scalar_(&get("head.bias"), 0.125).unwrap();
    m
}

fn same_state(a: &Module, b: &Module) {
    let (sa, sb) = (a.state_dict(), b.state_dict());
    assert_eq!(sa.len(), sb.len());
    for ((na, ta), (nb, tb)) in sa.iter().zip(&sb) {
        assert_eq!(na, nb);
        assert!(!is_meta(tb), "{nb}");
        assert_eq!(ta.kind(), tb.kind(), "{na}");
        assert_eq!(ta.requires_grad(), tb.requires_grad(), "{na}");
        assert!(ta.equal(tb), "{na} differs");
    }
}

#[test]
fn a_model_built_on_meta_materializes_to_the_eager_build_bit_for_bit() {
    let _rng = test_rng_lock();
    tch::manual_seed(5);
    let eager = every_layer();
    let after_eager = Tensor::f_rand([4], (Kind::Float, tch::Device::Cpu)).unwrap();
    tch::manual_seed(5);
    let meta = {
        let _scope = MetaInitScope::new().unwrap();
        every_layer()
    };
    // The generator went as far as the eager build took it.
    let after_meta = Tensor::f_rand([4], (Kind::Float, tch::Device::Cpu)).unwrap();
    assert!(after_eager.equal(&after_meta));
    assert!(meta.holds_meta());
    for (n, t) in meta.state_dict() {
        assert!(is_meta(&t), "{n}");
    }
    let state = fulmen::tensor::runtime::cpu_rng_state().unwrap();
    meta.materialize().unwrap();
    assert!(!meta.holds_meta());
    assert!(fulmen::tensor::runtime::cpu_rng_state().unwrap().equal(&state));
    same_state(&eager, &meta);
}

#[test]
fn a_cast_meta_model_materializes_in_its_new_dtype() {
    let _rng = test_rng_lock();
    tch::manual_seed(9);
    let mut eager = Module::linear(6, 3, true).unwrap();
    eager.to_kind(Kind::BFloat16).unwrap();
    tch::manual_seed(9);
    let mut meta = {
        let _scope = MetaInitScope::new().unwrap();
        Module::linear(6, 3, true).unwrap()
    };
    meta.to_kind(Kind::BFloat16).unwrap();
    meta.materialize().unwrap();
    same_state(&eager, &meta);
}

#[test]
fn values_do_not_depend_on_the_order_parts_are_materialized_in() {
    let _rng = test_rng_lock();
    let build = || {
        tch::manual_seed(13);
        let _scope = MetaInitScope::new().unwrap();
        every_layer()
    };
    let (whole, by_parts) = (build(), build());
    let state = fulmen::tensor::runtime::cpu_rng_state().unwrap();
    whole.materialize().unwrap();
    // The last layer first, the first last.
    let mut names = by_parts.child_names();
    names.reverse();
    for name in &names {
        by_parts.child(name).unwrap().materialize().unwrap();
    }
    assert!(!by_parts.holds_meta());
    same_state(&whole, &by_parts);
    assert!(fulmen::tensor::runtime::cpu_rng_state().unwrap().equal(&state));
}

#[test]
fn weights_loaded_into_a_meta_model_are_its_values() {
    let _rng = test_rng_lock();
    let trained = Module::linear(3, 2, true).unwrap();
    let mut meta = {
        let _scope = MetaInitScope::new().unwrap();
        Module::linear(3, 2, true).unwrap()
    };
    meta.load_state_dict(&trained.state_dict(), true).unwrap();
    assert!(meta.holds_meta());
    meta.materialize().unwrap();
    same_state(&trained, &meta);
}

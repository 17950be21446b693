//! Models built on the meta device: the records and the refusals (the
//! values drawn from the generator, compared with eager builds and across
//! materialization orders, run in their own process: `tests/meta_init.rs`,
//! since other tests here draw from the same generator).
use super::init::test_rng_lock;
use super::init_fns;
use super::meta_init::{self, is_meta, MetaInitScope};
use super::Module;
use crate::error::ErrorCode;
use crate::tensor::inplace;
use tch::{Kind, Tensor};

#[test]
fn tied_names_stay_one_tensor() {
    let _rng = test_rng_lock();
    let _scope = MetaInitScope::new().unwrap();
    let w = super::init::uniform(&[3, 2], 0.5).unwrap();
    let mut m = Module::named();
    m.register_parameter("a", &w).unwrap();
    m.register_parameter("b", &w).unwrap();
    m.materialize().unwrap();
    let s = m.state_dict();
    let id = |t: &Tensor| crate::tensor::device::impl_identity(t).unwrap();
    assert_eq!(id(&s[0].1), id(&s[1].1));
    assert!(!is_meta(&s[0].1));
}

#[test]
fn what_cannot_be_recorded_is_refused() {
    let _rng = test_rng_lock();
    // A model moved to the meta device has no values to make.
    let mut m = Module::linear(4, 2, true).unwrap();
    m.to_device(crate::tensor::device::Device::Other(crate::tensor::device::DeviceType::Meta, 0)).unwrap();
    let e = m.materialize().unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("weight") && e.message.contains("no recorded values"), "{}", e.message);
    // A change that keeps old values needs recorded ones; a whole-tensor
    // one gives them.
    let w = m.named_parameters()[0].1.shallow_clone();
    assert_eq!(inplace::mul_scalar_(&w, 2.0).unwrap_err().code, ErrorCode::InvalidState);
    init_fns::xavier_uniform_(&w, 1.0).unwrap();
    inplace::mul_scalar_(&w, 2.0).unwrap();
    // A view's change would not reach its base.
    let row = w.f_select(0, 0).unwrap();
    let e = inplace::zero_(&row).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{}", e.message);
    // A meta operand has nothing to give.
    let b = m.named_parameters()[1].1.shallow_clone();
    let other = Tensor::f_ones([2], (Kind::Float, tch::Device::Cpu)).unwrap();
    assert_eq!(inplace::copy_(&other, &b).unwrap_err().code, ErrorCode::Unsupported);
    inplace::copy_(&b, &other).unwrap();
    m.materialize().unwrap();
    assert!(m.named_parameters()[1].1.equal(&other));
    // An unbalanced end.
    assert_eq!(meta_init::end().unwrap_err().code, ErrorCode::InvalidState);
    // Outside a scope, layers hold data.
    assert!(!Module::linear(2, 2, false).unwrap().holds_meta());
}

#[test]
fn a_copy_is_taken_as_the_source_was() {
    let _rng = test_rng_lock();
    let _scope = MetaInitScope::new().unwrap();
    let w = super::init::zeros(&[3]).unwrap();
    let src = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
    inplace::copy_(&w, &src).unwrap();
    inplace::add_(&w, &src, 1.0).unwrap();
    inplace::fill_(&src, 9.0).unwrap();
    let mut m = Module::named();
    m.register_parameter("w", &w).unwrap();
    m.materialize().unwrap();
    assert_eq!(Vec::<f32>::try_from(&m.named_parameters()[0].1).unwrap(), [2.0, 4.0, 6.0]);
}

#[test]
fn the_record_forgets_the_tensors_no_one_holds() {
    let _rng = test_rng_lock();
    // Models built and dropped: the record stays small.
    for _ in 0..200 {
        let _scope = MetaInitScope::new().unwrap();
        drop(Module::linear(4, 4, true).unwrap());
    }
    assert!(meta_init::recorded() <= 2 * 32 + 2, "{} records", meta_init::recorded());
    // A materialized model's records go with its meta tensors.
    let m = {
        let _scope = MetaInitScope::new().unwrap();
        Module::linear(4, 4, true).unwrap()
    };
    m.materialize().unwrap();
    assert_eq!(meta_init::recorded(), 0);
}

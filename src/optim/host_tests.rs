//! A host optimizer written in Rust through [`HostRule`]: plain SGD equals
//! the built-in SGD bit for bit, its state round-trips with the groups, a
//! hostile state is refused without changing anything, and a failed
//! `zero_grad` surfaces at the next step.
use super::*;
use crate::optim::test_util::Model;
use crate::optim::{Sgd, SgdOptions};
use std::sync::{Arc, Mutex};

/// SGD without momentum as host code: `p -= lr * grad`; its state is the
/// number of steps taken (8 bytes, little-endian).
#[derive(Default)]
struct HostSgd {
    steps: Arc<Mutex<u64>>,
    lrs: Arc<Mutex<Vec<f64>>>,
    fail_zero_grad: bool,
    has_zero_grad: bool,
}

impl HostRule for HostSgd {
    fn step(&mut self, groups: &[ParamGroup]) -> Result<()> {
        for g in groups {
            self.lrs.lock().unwrap().push(g.lr);
            for p in &g.params {
                let grad = p.grad();
                if grad.defined() {
                    crate::tensor::scaled::add_(&mut p.shallow_clone(), &grad, -g.lr)?;
                }
            }
        }
        *self.steps.lock().unwrap() += 1;
        Ok(())
    }
    fn has_zero_grad(&self) -> bool {
        self.has_zero_grad
    }
    fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        assert!(set_to_none);
        if self.fail_zero_grad {
            return Err(Error::new(ErrorCode::Callback, "zero_grad refused"));
        }
        Ok(())
    }
    fn state(&self) -> Result<Vec<u8>> {
        Ok(self.steps.lock().unwrap().to_le_bytes().to_vec())
    }
    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let b: [u8; 8] = bytes.try_into().map_err(|_| Error::format(format!("{} bytes, not 8", bytes.len())))?;
        *self.steps.lock().unwrap() = u64::from_le_bytes(b);
        Ok(())
    }
}

fn host(m: &Model, lr: f64, rule: HostSgd) -> HostOptimizer {
    HostOptimizer::new(m.params(), lr, move || Box::new(rule)).unwrap()
}

#[test]
fn host_sgd_equals_builtin_sgd_bit_for_bit() {
    let (a, b) = (Model::new(tch::Kind::Float), Model::new(tch::Kind::Float));
    let mut own = host(&a, 0.05, HostSgd::default());
    let mut sgd = Sgd::new(b.params(), SgdOptions { lr: 0.05, ..Default::default() }).unwrap();
    assert_eq!(a.run(&mut own, 6), b.run(&mut sgd, 6));
    a.assert_v_untouched();
    assert!(!a.w.grad().defined(), "fulmen cleared the gradients when the host has no zero_grad");
}

#[test]
fn scheduler_lr_reaches_the_host() {
    let m = Model::new(tch::Kind::Float);
    let rule = HostSgd::default();
    let lrs = rule.lrs.clone();
    let mut opt = host(&m, 1.0, rule);
    let mut s = crate::optim::StepLr::new(&mut opt, 1, 0.5).unwrap();
    for _ in 0..3 {
        m.train_step(&mut opt);
        crate::optim::LrScheduler::step(&mut s, &mut opt, None).unwrap();
    }
    assert_eq!(*lrs.lock().unwrap(), vec![1.0, 0.5, 0.25]);
}

#[test]
fn state_round_trips_with_the_groups() {
    let (a, b) = (Model::new(tch::Kind::Float), Model::new(tch::Kind::Float));
    let mut opt = host(&a, 0.1, HostSgd::default());
    opt.add_param_group(
        vec![tch::Tensor::zeros([3], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true)],
        Some(0.3),
    )
    .unwrap();
    a.run(&mut opt, 2);
    crate::optim::group_hyper::set(&mut opt, 0, "momentum", 0.9).unwrap();
    let dict = opt.state_dict().unwrap();
    let bytes = dict.iter().find(|(k, _)| k == HOST_STATE_KEY).map(|(_, t)| Vec::<u8>::try_from(t).unwrap());
    assert_eq!(bytes, Some(2u64.to_le_bytes().to_vec()));

    let rule = HostSgd::default();
    let steps = rule.steps.clone();
    let mut other = host(&b, 0.7, rule);
    other
        .add_param_group(
            vec![tch::Tensor::zeros([3], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true)],
            None,
        )
        .unwrap();
    other.load_state_dict(&dict).unwrap();
    assert_eq!(*steps.lock().unwrap(), 2);
    assert_eq!(other.param_groups()[0].lr, 0.1);
    assert_eq!(other.param_groups()[1].lr, 0.3);
    assert_eq!(crate::optim::group_hyper::get(&other, 0, "momentum").unwrap(), 0.9);
}

#[test]
fn hostile_state_is_refused_and_changes_nothing() {
    let m = Model::new(tch::Kind::Float);
    let rule = HostSgd::default();
    let steps = rule.steps.clone();
    let mut opt = host(&m, 0.1, rule);
    let good = opt.state_dict().unwrap();
    let with = |t: tch::Tensor| {
        let mut d: Vec<(String, tch::Tensor)> = good.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
        d.retain(|(k, _)| k != HOST_STATE_KEY);
        d.push((HOST_STATE_KEY.to_string(), t));
        d
    };
    *steps.lock().unwrap() = 5;
    for bad in [
        tch::Tensor::zeros([2, 4], (tch::Kind::Uint8, tch::Device::Cpu)),
        tch::Tensor::zeros([8], (tch::Kind::Float, tch::Device::Cpu)),
    ] {
        assert_eq!(opt.load_state_dict(&with(bad)).unwrap_err().code, ErrorCode::Format);
    }
    // The host refuses 3 bytes: the groups keep their values too.
    let mut d = with(tch::Tensor::zeros([3], (tch::Kind::Uint8, tch::Device::Cpu)));
    for (k, t) in d.iter_mut() {
        if k.as_str() == "param_groups.0.lr" {
            *t = crate::optim::state::scalar(0.9).unwrap();
        }
    }
    assert_eq!(opt.load_state_dict(&d).unwrap_err().code, ErrorCode::Format);
    assert_eq!(opt.param_groups()[0].lr, 0.1);
    assert_eq!(*steps.lock().unwrap(), 5);
    let mut dup = with(tch::Tensor::zeros([8], (tch::Kind::Uint8, tch::Device::Cpu)));
    dup.push((HOST_STATE_KEY.to_string(), tch::Tensor::zeros([8], (tch::Kind::Uint8, tch::Device::Cpu))));
    assert_eq!(opt.load_state_dict(&dup).unwrap_err().code, ErrorCode::Format);
}

#[test]
fn failed_zero_grad_ends_the_next_step() {
    let m = Model::new(tch::Kind::Float);
    let mut opt = host(&m, 0.1, HostSgd { fail_zero_grad: true, has_zero_grad: true, ..Default::default() });
    m.backward();
    opt.step().unwrap();
    opt.zero_grad();
    let e = opt.step().unwrap_err();
    assert_eq!(e.code, ErrorCode::Callback);
    assert!(e.message.contains("zero_grad refused"), "{}", e.message);
    assert!(opt.take_error().is_none(), "reported once");
    opt.zero_grad();
    assert_eq!(opt.take_error().map(|e| e.code), Some(ErrorCode::Callback));
}

#[test]
fn bad_learning_rate_is_refused_before_the_rule_is_made() {
    let m = Model::new(tch::Kind::Float);
    let mut made = false;
    let r = HostOptimizer::new(m.params(), -1.0, || {
        made = true;
        Box::new(HostSgd::default())
    });
    assert_eq!(r.unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(!made);
}

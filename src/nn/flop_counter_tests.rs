//! Tests of [`super::flop_counter`]: torch's formulas on known shapes.
use super::flop_counter::{measure_flops, measure_model_flops};
use super::{Activation, Module};
use crate::error::ErrorCode;
use crate::tensor::device::{empty_on_device_of, to_device, Device as MetaDevice, DeviceType};
use tch::{Device, Kind, Tensor};

fn mlp() -> Module {
    let mut m = Module::sequential();
    m.push(Module::linear(8, 16, true).unwrap()).unwrap();
    m.push(Module::batch_norm(16, 1e-5, 0.1, true, true).unwrap()).unwrap();
    m.push(Module::activation(Activation::Relu)).unwrap();
    m.push(Module::linear(16, 4, false).unwrap()).unwrap();
    m
}

#[test]
fn matrix_products_count_two_flops_per_multiply_add() {
    let (_, c) = measure_flops(|| {
        let a = Tensor::ones([3, 5], (Kind::Float, Device::Cpu));
        let b = Tensor::ones([5, 7], (Kind::Float, Device::Cpu));
        let _ = a.matmul(&b);
        let _ = Tensor::ones([2, 3, 5], (Kind::Float, Device::Cpu))
            .bmm(&Tensor::ones([2, 5, 4], (Kind::Float, Device::Cpu)));
        Ok(())
    })
    .unwrap();
    assert_eq!(c.by_operator.get("aten::mm"), Some(&(3 * 7 * 2 * 5)));
    assert_eq!(c.by_operator.get("aten::bmm"), Some(&(2 * 3 * 4 * 2 * 5)));
    assert_eq!(c.total, 3 * 7 * 2 * 5 + 2 * 3 * 4 * 2 * 5);
}

#[test]
fn a_model_counts_its_forward_and_backward_without_touching_its_state() {
    let m = mlp();
    let x = Tensor::ones([32, 8], (Kind::Float, Device::Cpu));
    let forward = 32 * 16 * 2 * 8 + 32 * 4 * 2 * 16;
    assert_eq!(measure_model_flops(&m, &x, false).unwrap().total, forward);
    let before: Vec<Tensor> = m.state_dict().into_iter().map(|(_, t)| t.copy()).collect();
    let c = measure_model_flops(&m, &x, true).unwrap();
    // The first layer's input needs no gradient: only its weight's.
    assert_eq!(c.total, forward + 32 * 16 * 2 * 8 + 2 * 32 * 4 * 2 * 16);
    for ((name, now), was) in m.state_dict().into_iter().zip(before) {
        assert!(now.equal(&was), "{name} changed");
    }
    assert!(m.parameters().iter().all(|p| !p.grad().defined()), "no gradient is written");
}

#[test]
fn an_input_that_needs_a_gradient_gets_one_as_backward_gives_it() {
    let m = mlp();
    let x = Tensor::ones([32, 8], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let forward = 32 * 16 * 2 * 8 + 32 * 4 * 2 * 16;
    let c = measure_model_flops(&m, &x, true).unwrap();
    assert_eq!(c.total, 3 * forward);
    assert!(!x.grad().defined(), "no gradient is written");
}

#[test]
fn convolutions_count_by_output_positions() {
    let m = Module::conv2d(3, 4, [3, 3], [1, 1], [1, 1], [1, 1], 1, true).unwrap();
    let x = Tensor::ones([2, 3, 6, 6], (Kind::Float, Device::Cpu));
    let forward = 6 * 6 * 9 * 2 * 4 * 3 * 2;
    assert_eq!(measure_model_flops(&m, &x, false).unwrap().total, forward);
    let c = measure_model_flops(&m, &x, true).unwrap();
    assert_eq!(c.by_operator.get("aten::convolution_backward"), Some(&forward));
}

/// An empty float tensor of `shape` on the meta device (no memory).
fn meta(shape: &[i64]) -> Tensor {
    let seed = Tensor::zeros([1], (Kind::Float, Device::Cpu));
    let seed = to_device(&seed, MetaDevice::new(DeviceType::Meta, 0), false).unwrap();
    empty_on_device_of(shape, Kind::Float, &seed).unwrap()
}

#[test]
fn the_meta_device_counts_without_computing_and_overflow_is_an_error() {
    let (_, c) = measure_flops(|| {
        let a = meta(&[1 << 20, 1 << 20]);
        let _ = a.f_mm(&a)?;
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(c.total, 1u64 << 61);
    let e = measure_flops(|| {
        // 2^10 * 2^20 * 2^20 * 2 * 2^20 = 2^71.
        let a = meta(&[1 << 10, 1 << 20, 1 << 20]);
        let _ = a.f_bmm(&a)?;
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange, "{}", e.message);
}

#[test]
fn measurements_do_not_nest_and_a_failed_one_ends() {
    let e = measure_flops(|| measure_flops(|| Ok(()))).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
    let e = measure_flops(|| {
        let _ =
            Tensor::ones([2, 3], (Kind::Float, Device::Cpu)).f_mm(&Tensor::ones([4, 5], (Kind::Float, Device::Cpu)))?;
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::ShapeMismatch, "{}", e.message);
    assert_eq!(measure_flops(|| Ok(())).unwrap().1.total, 0);
}

#[test]
fn threads_measure_apart() {
    let count = |n: i64| {
        std::thread::spawn(move || {
            measure_flops(|| {
                for _ in 0..50 {
                    let a = Tensor::ones([n, n], (Kind::Float, Device::Cpu));
                    let _ = a.f_mm(&a)?;
                }
                Ok(())
            })
            .unwrap()
            .1
            .total
        })
    };
    let (a, b) = (count(4), count(6));
    assert_eq!(a.join().unwrap(), 50 * 2 * 4 * 4 * 4);
    assert_eq!(b.join().unwrap(), 50 * 2 * 6 * 6 * 6);
}

#[test]
fn counts_by_module_follow_the_modules_open_in_forward_and_backward() {
    let m = mlp();
    let x = Tensor::ones([32, 8], (Kind::Float, Device::Cpu));
    let c = measure_model_flops(&m, &x, true).unwrap();
    let first = 32 * 16 * 2 * 8;
    let last = 32 * 4 * 2 * 16;
    let ops = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    // The first layer's backward computes its weight's gradient only; the
    // last one's its weight's and its input's.
    assert_eq!(c.by_module["Sequential.0"], ops(&[("aten::addmm", first), ("aten::mm", first)]));
    assert_eq!(c.by_module["Sequential.3"], ops(&[("aten::mm", 3 * last)]));
    assert_eq!(c.by_module["Sequential"], c.by_operator, "the root holds everything");
    assert_eq!(c.by_module.len(), 3, "BatchNorm and ReLU count nothing: {:?}", c.by_module.keys());
    assert_eq!(c.module_total("Global").unwrap(), c.total);
    assert_eq!(c.module_total("Sequential.3").unwrap(), 3 * last);
    assert_eq!(c.module_total("Sequential.1").unwrap(), 0);
}

#[test]
fn operators_outside_any_module_count_for_global_only() {
    let m = mlp();
    let (_, c) = measure_flops(|| {
        let y = m.forward(&Tensor::ones([2, 8], (Kind::Float, Device::Cpu)))?;
        let _ = y.matmul(&Tensor::ones([4, 3], (Kind::Float, Device::Cpu)));
        Ok(())
    })
    .unwrap();
    let outside = 2 * 3 * 2 * 4;
    assert_eq!(c.total, c.module_total("Sequential").unwrap() + outside);
    assert_eq!(c.by_module["Sequential.3"]["aten::mm"], 2 * 4 * 2 * 16);
}

#[test]
fn a_checkpointed_module_counts_its_recomputation_and_backward() {
    let mut m = mlp();
    m.set_activation_checkpointing("0", true).unwrap();
    let x = Tensor::ones([32, 8], (Kind::Float, Device::Cpu));
    // A gradient the host holds is handed back untouched.
    let weight = m.parameters().remove(0);
    let held = Tensor::full([16, 8], 3.0, (Kind::Float, Device::Cpu));
    crate::tensor::grad::set_grad(&weight, Some(&held)).unwrap();
    let c = measure_model_flops(&m, &x, true).unwrap();
    assert!(weight.grad().equal(&Tensor::full([16, 8], 3.0, (Kind::Float, Device::Cpu))));
    assert!(m.parameters()[1..].iter().all(|p| !p.grad().defined()), "no gradient is written");
    let first = 32 * 16 * 2 * 8;
    let ops = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    // Its forward runs again in backward, then its weight's gradient.
    assert_eq!(c.by_module["Sequential.0"], ops(&[("aten::addmm", 2 * first), ("aten::mm", first)]));
    assert_eq!(c.by_module["Sequential"], c.by_operator);
}

//! Tests of [`super::flop_formulas`]. Formulas are process-wide and tests
//! run in parallel: each test registers operators no other test measures.
use super::flop_counter::measure_flops;
use super::flop_formulas::{register_flop_formula, unregister_flop_formula, FlopArg};
use crate::error::{ErrorCode, Result};
use crate::tensor::DType;
use std::sync::{Arc, Mutex};
use tch::{Device, Kind, Tensor};

fn ones(shape: &[i64]) -> Tensor {
    Tensor::ones(shape, (Kind::Float, Device::Cpu))
}

#[test]
fn host_formulas_count_their_operators_and_replace_torchs() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    register_flop_formula(
        "aten::hardswish",
        Arc::new(move |op: &str, ins: &[FlopArg], outs: &[FlopArg]| -> Result<u64> {
            log.lock().unwrap().push((op.to_owned(), ins.to_vec(), outs.to_vec()));
            Ok(3 * ins[0].shape().unwrap().iter().product::<i64>() as u64)
        }),
    )
    .unwrap();
    register_flop_formula("aten::baddbmm", Arc::new(|_: &str, _: &[FlopArg], _: &[FlopArg]| Ok(7))).unwrap();
    let run = || {
        measure_flops(|| {
            let _ = ones(&[4, 5]).hardswish();
            let _ = ones(&[2, 3, 4]).baddbmm(&ones(&[2, 3, 5]), &ones(&[2, 5, 4]), 1, 1);
            Ok(())
        })
        .unwrap()
        .1
    };
    let c = run();
    assert_eq!(c.by_operator.get("aten::hardswish"), Some(&60));
    assert_eq!(c.by_operator.get("aten::baddbmm"), Some(&7), "the host's formula replaces torch's");
    let tensor = |shape: Vec<i64>| FlopArg::Tensor { shape, dtype: Some(DType::F32) };
    assert_eq!(
        *seen.lock().unwrap(),
        vec![("aten::hardswish".to_owned(), vec![tensor(vec![4, 5])], vec![tensor(vec![4, 5])])]
    );
    assert!(unregister_flop_formula("aten::hardswish").unwrap());
    assert!(unregister_flop_formula("aten::baddbmm").unwrap());
    assert!(!unregister_flop_formula("aten::baddbmm").unwrap(), "nothing left to unregister");
    let c = run();
    assert_eq!(c.by_operator.get("aten::hardswish"), None);
    assert_eq!(c.by_operator.get("aten::baddbmm"), Some(&(2 * 3 * 4 * 2 * 5)), "torch's formula again");
}

#[test]
fn formulas_see_every_argument_of_the_schema() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    for op in ["aten::searchsorted", "aten::logit", "aten::block_diag"] {
        let log = seen.clone();
        register_flop_formula(
            op,
            Arc::new(move |op: &str, ins: &[FlopArg], outs: &[FlopArg]| -> Result<u64> {
                log.lock().unwrap().push((op.to_owned(), ins.to_vec(), outs.to_vec()));
                Ok(1)
            }),
        )
        .unwrap();
    }
    let (_, c) = measure_flops(|| {
        let sorted = Tensor::arange(10, (Kind::Int64, Device::Cpu));
        let values = Tensor::from_slice(&[3i64, 7]);
        let _ = values.searchsorted(&sorted, false, true, "right", None::<Tensor>);
        let _ = ones(&[3]).logit(Some(0.25));
        let _ = Tensor::block_diag(&[ones(&[2, 2]), ones(&[1, 3])]);
        Ok(())
    })
    .unwrap();
    for op in ["aten::searchsorted", "aten::logit", "aten::block_diag"] {
        assert!(unregister_flop_formula(op).unwrap());
    }
    assert_eq!(c.total, 3);
    let long = |shape: Vec<i64>| FlopArg::Tensor { shape, dtype: Some(DType::I64) };
    let float = |shape: Vec<i64>| FlopArg::Tensor { shape, dtype: Some(DType::F32) };
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[0].1,
        vec![
            long(vec![10]),
            long(vec![2]),
            FlopArg::Bool(false),
            FlopArg::Bool(true),
            FlopArg::Str("right".into()),
            FlopArg::None
        ]
    );
    assert_eq!(seen[0].2, vec![long(vec![2])]);
    assert_eq!(seen[1].1, vec![float(vec![3]), FlopArg::Float(0.25)]);
    assert_eq!(seen[2].1, vec![FlopArg::List(vec![float(vec![2, 2]), float(vec![1, 3])])]);
    assert_eq!(seen[2].2, vec![float(vec![3, 5])]);
}

#[test]
fn targets_are_checked_when_registered() {
    let none = || Arc::new(|_: &str, _: &[FlopArg], _: &[FlopArg]| Ok(0));
    for (op, code, says) in [
        ("aten::linear", ErrorCode::InvalidArgument, "decomposes"),
        ("aten::no_such_operator", ErrorCode::InvalidArgument, "no operator"),
        ("aten::add.Tensor", ErrorCode::InvalidArgument, "without an overload"),
        ("gelu", ErrorCode::InvalidArgument, "without an overload"),
    ] {
        let e = register_flop_formula(op, none()).unwrap_err();
        assert_eq!(e.code, code, "{op}: {}", e.message);
        assert!(e.message.contains(says), "{op}: {}", e.message);
    }
    register_flop_formula("aten::hardtanh", none()).unwrap();
    let e = register_flop_formula("aten::hardtanh", none()).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{}", e.message);
    assert!(unregister_flop_formula("aten::hardtanh").unwrap());
}

#[test]
fn a_failing_or_panicking_formula_fails_the_measurement() {
    register_flop_formula(
        "aten::hardsigmoid",
        Arc::new(|_: &str, _: &[FlopArg], _: &[FlopArg]| -> Result<u64> {
            Err(crate::error::Error::new(ErrorCode::OutOfRange, "too big"))
        }),
    )
    .unwrap();
    register_flop_formula(
        "aten::hardshrink",
        Arc::new(|_: &str, _: &[FlopArg], _: &[FlopArg]| -> Result<u64> { panic!("formula bug") }),
    )
    .unwrap();
    let e = measure_flops(|| {
        let _ = ones(&[2]).hardsigmoid();
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert_eq!(e.message, "the FLOP formula registered for aten::hardsigmoid failed: too big");
    let e = measure_flops(|| {
        let _ = ones(&[2]).hardshrink();
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::Panic, "{}", e.message);
    assert!(unregister_flop_formula("aten::hardsigmoid").unwrap());
    assert!(unregister_flop_formula("aten::hardshrink").unwrap());
    // The thread measures again.
    assert!(measure_flops(|| Ok(())).is_ok());
}

#[test]
fn a_measurement_keeps_the_formulas_it_began_with() {
    let token = Arc::new(());
    let held = token.clone();
    register_flop_formula(
        "aten::softshrink",
        Arc::new(move |_: &str, _: &[FlopArg], _: &[FlopArg]| {
            let _ = &held;
            Ok(5)
        }),
    )
    .unwrap();
    assert_eq!(Arc::strong_count(&token), 2);
    let (_, c) = measure_flops(|| {
        assert!(unregister_flop_formula("aten::softshrink").unwrap());
        assert_eq!(Arc::strong_count(&token), 2, "the measurement holds the formula");
        let _ = ones(&[2]).softshrink();
        Ok(())
    })
    .unwrap();
    assert_eq!(c.total, 5);
    assert_eq!(Arc::strong_count(&token), 1, "dropped with the measurement");
    // A formula registered during a measurement waits for the next one.
    let (_, c) = measure_flops(|| {
        register_flop_formula("aten::softshrink", Arc::new(|_: &str, _: &[FlopArg], _: &[FlopArg]| Ok(5)))?;
        let _ = ones(&[2]).softshrink();
        Ok(())
    })
    .unwrap();
    assert!(unregister_flop_formula("aten::softshrink").unwrap());
    assert_eq!(c.total, 0);
}

#[test]
fn an_operator_that_returns_nothing_is_counted_and_a_failed_one_is_not() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    register_flop_formula(
        "aten::_linalg_check_errors",
        Arc::new(move |_: &str, ins: &[FlopArg], outs: &[FlopArg]| -> Result<u64> {
            log.lock().unwrap().push((ins.to_vec(), outs.to_vec()));
            Ok(9)
        }),
    )
    .unwrap();
    let (_, c) = measure_flops(|| {
        let ok = Tensor::zeros([2], (Kind::Int, Device::Cpu));
        Tensor::f_internal_linalg_check_errors(&ok, "inv", false)?;
        // A failing call (a singular matrix's info) counts nothing.
        let failing = Tensor::from_slice(&[0i32, 2]);
        assert!(Tensor::f_internal_linalg_check_errors(&failing, "inv", false).is_err());
        Ok(())
    })
    .unwrap();
    assert!(unregister_flop_formula("aten::_linalg_check_errors").unwrap());
    assert_eq!(c.total, 9);
    let seen = seen.lock().unwrap();
    let int = |shape: Vec<i64>| FlopArg::Tensor { shape, dtype: Some(DType::I32) };
    assert_eq!(seen[0].0, vec![int(vec![2]), FlopArg::Str("inv".into()), FlopArg::Bool(false)]);
    assert_eq!(seen[0].1, Vec::<FlopArg>::new());
}

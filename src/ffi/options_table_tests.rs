//! The generated option structs: their `*_default` functions give torch's
//! defaults, and each field reaches its place in the core's options.
use crate::error::ErrorCode;
use crate::ffi::optim::gen_options::*;
use crate::ffi::schedulers::gen_options::*;
use crate::optim::{
    AdagradOptions, AdamOptions, AdamaxOptions, AnnealStrategy, CyclicLrOptions, CyclicMode, LbfgsOptions,
    NAdamOptions, OneCycleOptions, PlateauMode, PlateauOptions, RAdamOptions, RmsPropOptions, SgdOptions,
    ThresholdMode,
};

#[test]
fn every_default_converts_back_to_the_core_default() {
    assert_eq!(SgdOptions::from(fulmen_sgd_options_default()), SgdOptions::default());
    assert_eq!(AdamOptions::from(fulmen_adam_options_default()), AdamOptions::default());
    assert_eq!(AdamOptions::from(fulmen_adamw_options_default()), AdamOptions::adamw());
    assert_eq!(RmsPropOptions::from(fulmen_rmsprop_options_default()), RmsPropOptions::default());
    assert_eq!(AdagradOptions::from(fulmen_adagrad_options_default()), AdagradOptions::default());
    assert_eq!(AdamaxOptions::from(fulmen_adamax_options_default()), AdamaxOptions::default());
    assert_eq!(NAdamOptions::from(fulmen_nadam_options_default()), NAdamOptions::default());
    assert_eq!(RAdamOptions::from(fulmen_radam_options_default()), RAdamOptions::default());
    assert_eq!(LbfgsOptions::from(fulmen_lbfgs_options_default()), LbfgsOptions::default());
    assert_eq!(OneCycleOptions::from(fulmen_one_cycle_options_default(0.1, 100)), OneCycleOptions::new(0.1, 100));
    assert_eq!(PlateauOptions::from(fulmen_plateau_options_default()), PlateauOptions::default());
    let cyclic = CyclicLrOptions::try_from(fulmen_cyclic_lr_options_default(0.01, 0.1)).expect("the default converts");
    assert_eq!(cyclic, CyclicLrOptions::new(0.01, 0.1));
}

#[test]
fn the_c_defaults_are_torchs() {
    let sgd = fulmen_sgd_options_default();
    assert_eq!((sgd.lr, sgd.momentum, sgd.nesterov), (1e-3, 0.0, false));
    let adam = fulmen_adam_options_default();
    assert_eq!((adam.beta1, adam.beta2, adam.eps, adam.weight_decay), (0.9, 0.999, 1e-8, 0.0));
    assert_eq!(fulmen_adamw_options_default().weight_decay, 1e-2);
    let adamax = fulmen_adamax_options_default();
    assert_eq!((adamax.lr, adamax.beta1, adamax.beta2), (2e-3, 0.9, 0.999));
    let nadam = fulmen_nadam_options_default();
    assert_eq!((nadam.beta1, nadam.beta2, nadam.momentum_decay), (0.9, 0.999, 4e-3));
    let lbfgs = fulmen_lbfgs_options_default();
    assert_eq!((lbfgs.max_iter, lbfgs.max_eval, lbfgs.history_size), (20, 0, 100));
    let cycle = fulmen_one_cycle_options_default(0.5, 40);
    assert_eq!((cycle.max_lr, cycle.total_steps, cycle.pct_start), (0.5, 40, 0.3));
    assert!(!cycle.linear_anneal && cycle.cycle_momentum);
    let plateau = fulmen_plateau_options_default();
    assert!(!plateau.mode_max && !plateau.threshold_abs);
    assert_eq!((plateau.patience, plateau.factor), (10, 0.1));
    let cyclic = fulmen_cyclic_lr_options_default(0.01, 0.1);
    assert_eq!((cyclic.step_size_up, cyclic.step_size_down, cyclic.mode), (2000, 0, 0));
}

#[test]
fn each_field_reaches_its_core_field() {
    let mut adam = fulmen_adam_options_default();
    (adam.beta1, adam.beta2) = (0.5, 0.75);
    assert_eq!(AdamOptions::from(adam).betas, (0.5, 0.75));
    let mut nadam = fulmen_nadam_options_default();
    (nadam.beta1, nadam.beta2) = (0.25, 0.5);
    assert_eq!(NAdamOptions::from(nadam).betas, (0.25, 0.5));
    let mut lbfgs = fulmen_lbfgs_options_default();
    lbfgs.max_eval = 7;
    assert_eq!(LbfgsOptions::from(lbfgs).max_eval, Some(7));
    let mut cycle = fulmen_one_cycle_options_default(0.5, 40);
    cycle.linear_anneal = true;
    assert_eq!(OneCycleOptions::from(cycle).anneal_strategy, AnnealStrategy::Linear);
    let mut plateau = fulmen_plateau_options_default();
    (plateau.mode_max, plateau.threshold_abs) = (true, true);
    let core = PlateauOptions::from(plateau);
    assert_eq!((core.mode, core.threshold_mode), (PlateauMode::Max, ThresholdMode::Abs));
    let mut cyclic = fulmen_cyclic_lr_options_default(0.01, 0.1);
    (cyclic.step_size_down, cyclic.mode) = (5, CyclicMode::ExpRange as i32);
    let core = CyclicLrOptions::try_from(cyclic).expect("a valid mode converts");
    assert_eq!((core.step_size_down, core.mode), (Some(5), CyclicMode::ExpRange));
}

#[test]
fn an_unknown_cyclic_mode_is_refused() {
    let mut cyclic = fulmen_cyclic_lr_options_default(0.01, 0.1);
    cyclic.mode = 7;
    let err = CyclicLrOptions::try_from(cyclic).expect_err("mode 7 is not a fulmen_cyclic_mode");
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert!(err.message.contains("fulmen_cyclic_mode"), "{}", err.message);
}

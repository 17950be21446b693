//! The generated option structs: their `*_default` functions give torch's
//! and Lightning's defaults, each field reaches its place in the core's
//! options, and a value the C API refuses is refused with its message.
use crate::callbacks::{BackboneFinetuningOptions, StochasticWeightAveragingOptions, SwaStart, WeightAveragingOptions};
use crate::data::DataLoaderOptions;
use crate::error::ErrorCode;
use crate::ffi::callbacks::gen_options::*;
use crate::ffi::data::gen_options::*;
use crate::ffi::metrics::gen_options::*;
use crate::ffi::nn::gen_options::*;
use crate::ffi::optim::gen_options::*;
use crate::ffi::schedulers::gen_options::*;
use crate::ffi::trainer::gen_options::*;
use crate::metrics::{Average, MetricKind, MetricOptions};
use crate::optim::{
    AdagradOptions, AdamOptions, AdamaxOptions, AnnealStrategy, CyclicLrOptions, CyclicMode, LbfgsOptions,
    NAdamOptions, OneCycleOptions, PlateauMode, PlateauOptions, RAdamOptions, RmsPropOptions, SgdOptions,
    ThresholdMode,
};
use crate::tuner::{BatchSizeMode, BatchSizeOptions, LrFindMode, LrFindOptions};

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

#[test]
fn the_other_defaults_convert_back_to_the_core_defaults() {
    assert_eq!(DataLoaderOptions::from(fulmen_loader_options_default()), DataLoaderOptions::default());
    assert_eq!(BatchSizeOptions::from(fulmen_batch_size_finder_options_default()), BatchSizeOptions::default());
    let lr_find = LrFindOptions::try_from(fulmen_lr_find_options_default()).expect("the default converts");
    assert_eq!(lr_find, LrFindOptions::default());
    let metric = MetricOptions::try_from(fulmen_metric_options_default(MetricKind::Auroc as i32, 3)).expect("converts");
    assert_eq!(metric, MetricOptions::new(MetricKind::Auroc, 3));
    let averaging = WeightAveragingOptions::try_from(fulmen_weight_averaging_options_default()).expect("converts");
    assert_eq!(averaging, WeightAveragingOptions::default());
    let swa = fulmen_stochastic_weight_averaging_options_default(0.05).to_core(vec![0.05]).expect("converts");
    assert_eq!(swa, StochasticWeightAveragingOptions::new(vec![0.05]));
    let backbone = fulmen_backbone_finetuning_options_default().to_core("backbone".into());
    assert_eq!(backbone, BackboneFinetuningOptions::default());
}

#[test]
fn the_callbacks_defaults_are_lightnings() {
    let checkpoint = fulmen_model_checkpoint_options_default();
    assert!(checkpoint.dirpath.is_null() && checkpoint.filename.is_null() && checkpoint.monitor.is_null());
    assert_eq!((checkpoint.mode, checkpoint.save_top_k, checkpoint.every_n_epochs), (0, 1, 1));
    assert_eq!(checkpoint.save_on_train_epoch_end, -1);
    let core = checkpoint.to_core(None, None, Some("val_loss".into())).expect("the default converts");
    assert_eq!((core.monitor.as_deref(), core.save_top_k, core.save_on_train_epoch_end), (Some("val_loss"), 1, None));
    let stopping = fulmen_early_stopping_options_default();
    assert!(stopping.monitor.is_null());
    assert!(stopping.stopping_threshold.is_nan() && stopping.divergence_threshold.is_nan());
    assert_eq!((stopping.patience, stopping.mode, stopping.check_on_train_epoch_end), (3, 0, -1));
    let core = stopping.to_core("val_loss".into()).expect("the default converts");
    assert_eq!((core.stopping_threshold, core.divergence_threshold, core.check_on_train_epoch_end), (None, None, None));
    let averaging = fulmen_weight_averaging_options_default();
    assert!(averaging.ema && averaging.use_buffers);
    assert_eq!(
        (averaging.decay, averaging.update_starting_at_step, averaging.update_starting_at_epoch),
        (0.999, -1, -1)
    );
    let backbone = fulmen_backbone_finetuning_options_default();
    // SAFETY: the default points at a static NUL-terminated string.
    let path = unsafe { std::ffi::CStr::from_ptr(backbone.backbone) };
    assert_eq!(path.to_str(), Ok("backbone"));
    assert_eq!((backbone.backbone_initial_lr, backbone.rounding), (-1.0, 12));
    let swa = fulmen_stochastic_weight_averaging_options_default(0.05);
    assert!(swa.swa_lrs.is_null() && !swa.linear_anneal && !swa.average_on_device);
    assert_eq!((swa.swa_lr, swa.n_swa_lrs, swa.swa_epoch_start), (0.05, 0, 0));
    assert_eq!((swa.swa_epoch_start_fraction, swa.annealing_epochs), (0.8, 10));
}

#[test]
fn the_layer_data_and_tuner_defaults_are_torchs_and_lightnings() {
    let conv = fulmen_conv2d_options_default(3);
    assert_eq!((conv.kernel, conv.stride, conv.padding, conv.dilation), ([3, 3], [1, 1], [0, 0], [1, 1]));
    assert!(conv.groups == 1 && conv.bias);
    let conv3d = fulmen_conv3d_options_default(5);
    assert_eq!((conv3d.kernel, conv3d.stride, conv3d.padding), ([5; 3], [1; 3], [0; 3]));
    let transpose = fulmen_conv_transpose_options_default(1, 4);
    assert_eq!((transpose.dims, transpose.kernel, transpose.output_padding), (1, [4, 4], [0, 0]));
    let rnn = fulmen_rnn_options_default();
    assert!(rnn.num_layers == 1 && rnn.bias && !rnn.batch_first && !rnn.bidirectional);
    let transformer = fulmen_transformer_options_default();
    assert_eq!((transformer.dim_feedforward, transformer.dropout, transformer.layer_norm_eps), (2048, 0.1, 1e-5));
    let csv = fulmen_csv_options_default();
    assert!(csv.has_labels && csv.label_name.is_null() && csv.feature_columns.is_null());
    assert_eq!((csv.label_column, csv.header, csv.delimiter as u8, csv.scale_divisor), (0, -1, b',', 1.0));
    let loader = fulmen_loader_options_default();
    assert_eq!((loader.batch_size, loader.num_workers, loader.prefetch_factor), (1, 0, 2));
    let lr_find = fulmen_lr_find_options_default();
    assert_eq!((lr_find.min_lr, lr_find.num_training, lr_find.mode, lr_find.early_stop_threshold), (1e-8, 100, 0, 4.0));
    let finder = fulmen_batch_size_finder_options_default();
    assert!(!finder.binsearch);
    assert_eq!((finder.init_val, finder.max_trials, finder.max_val), (2, 25, 8192));
}

#[test]
fn the_other_fields_reach_their_core_fields() {
    let mut finder = fulmen_batch_size_finder_options_default();
    finder.binsearch = true;
    assert_eq!(BatchSizeOptions::from(finder).mode, BatchSizeMode::BinSearch);
    let mut lr_find = fulmen_lr_find_options_default();
    (lr_find.mode, lr_find.early_stop_threshold) = (1, 0.0);
    let core = LrFindOptions::try_from(lr_find).expect("a valid mode converts");
    assert_eq!((core.mode, core.early_stop_threshold), (LrFindMode::Linear, None));
    let mut metric = fulmen_metric_options_default(MetricKind::F1 as i32, 4);
    metric.average = Average::Weighted as i32;
    assert_eq!(MetricOptions::try_from(metric).expect("converts").average, Average::Weighted);
    let mut averaging = fulmen_weight_averaging_options_default();
    (averaging.ema, averaging.update_starting_at_step, averaging.update_starting_at_epoch) = (false, 10, 2);
    let core = WeightAveragingOptions::try_from(averaging).expect("valid starts convert");
    assert_eq!((core.decay, core.update_starting_at_step, core.update_starting_at_epoch), (None, Some(10), Some(2)));
    let mut swa = fulmen_stochastic_weight_averaging_options_default(0.05);
    (swa.swa_epoch_start, swa.linear_anneal, swa.average_on_device) = (3, true, true);
    let core = swa.to_core(vec![0.05, 0.1]).expect("a positive start converts");
    assert_eq!((core.swa_epoch_start, core.swa_lrs.len(), core.average_on_cpu), (SwaStart::Epoch(3), 2, false));
    let mut backbone = fulmen_backbone_finetuning_options_default();
    backbone.backbone_initial_lr = 0.01;
    assert_eq!(backbone.to_core("encoder".into()).backbone_initial_lr, Some(0.01));
    let mut stopping = fulmen_early_stopping_options_default();
    (stopping.mode, stopping.stopping_threshold, stopping.check_on_train_epoch_end) = (1, 0.9, 1);
    let core = stopping.to_core("acc".into()).expect("valid values convert");
    assert_eq!((core.stopping_threshold, core.check_on_train_epoch_end), (Some(0.9), Some(true)));
    assert_eq!(crate::ffi::callbacks::standard::mode_code(core.mode), 1);
}

/// The error of a refused conversion: its code is INVALID_ARGUMENT and its
/// message has `text`.
fn assert_refused<T: std::fmt::Debug>(r: crate::error::Result<T>, text: &str) {
    let err = r.expect_err(text);
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{}", err.message);
    assert!(err.message.contains(text), "{}", err.message);
}

#[test]
fn values_the_c_api_refuses_are_refused_with_their_message() {
    let mut metric = fulmen_metric_options_default(99, 0);
    assert_eq!(metric.kind, 99, "the default keeps the kind it was given");
    assert_refused(MetricOptions::try_from(metric), "99 is not a fulmen_metric_kind");
    metric.kind = MetricKind::Accuracy as i32;
    metric.average = 5;
    assert_refused(MetricOptions::try_from(metric), "5 is not a fulmen_average");
    let mut lr_find = fulmen_lr_find_options_default();
    lr_find.mode = 2;
    assert_refused(LrFindOptions::try_from(lr_find), "2 is not a fulmen_lr_find_mode (0 or 1)");
    let mut averaging = fulmen_weight_averaging_options_default();
    averaging.update_starting_at_epoch = -2;
    assert_refused(WeightAveragingOptions::try_from(averaging), "update_starting_at_epoch -2: -1 for none, or >= 0");
    let mut swa = fulmen_stochastic_weight_averaging_options_default(0.05);
    swa.swa_epoch_start = -1;
    assert_refused(swa.to_core(vec![0.05]), "swa_epoch_start must be >= 0 (0: the fraction), got -1");
    let mut checkpoint = fulmen_model_checkpoint_options_default();
    checkpoint.mode = 2;
    assert_refused(checkpoint.to_core(None, None, None), "mode must be 0 (min) or 1 (max), got 2");
    checkpoint.mode = 0;
    checkpoint.save_on_train_epoch_end = 3;
    assert_refused(checkpoint.to_core(None, None, None), "save_on_train_epoch_end must be -1 (auto), 0 or 1, got 3");
    let mut stopping = fulmen_early_stopping_options_default();
    stopping.check_on_train_epoch_end = -5;
    assert_refused(stopping.to_core("loss".into()), "check_on_train_epoch_end must be -1 (auto), 0 or 1, got -5");
}

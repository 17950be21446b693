//! The metrics against torchmetrics 1.9 (constants from its Binary* /
//! Multiclass* classes and MeanAbsoluteError / MeanSquaredError over the
//! same data, fed in two updates of 12 samples).
use super::*;
use tch::{Device, Kind, Tensor};

fn f32s(v: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(v).reshape(shape)
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_slice(v)
}

/// Builds the metric, updates it with both halves and computes.
fn run(opts: MetricOptions, preds: &Tensor, target: &Tensor) -> f64 {
    let mut m = build(opts).unwrap();
    let n = target.size()[0];
    m.update(&preds.narrow(0, 0, n / 2), &target.narrow(0, 0, n / 2)).unwrap();
    m.update(&preds.narrow(0, n / 2, n - n / 2), &target.narrow(0, n / 2, n - n / 2)).unwrap();
    let local = m.compute_local().unwrap();
    // The summed-state path (a world of one) gives the same value.
    let reduce = |_: &mut [f64]| Ok(());
    if m.summable_state().unwrap().is_some() {
        assert_eq!(compute(m.as_ref(), Some(&reduce)).unwrap(), local);
    }
    local
}

fn near(name: &str, got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-6, "{name}: got {got}, want {want}");
}

fn opts(kind: MetricKind, classes: i64) -> MetricOptions {
    MetricOptions::new(kind, classes)
}

#[test]
fn binary_scores_match_torchmetrics() {
    let (p, t) = (f32s(&BL, &[24]), i64s(&BT));
    use MetricKind::*;
    for (kind, want, want_t03) in [
        (Accuracy, BIN_ACC, BIN_ACC_T03),
        (Precision, BIN_PREC, BIN_PREC_T03),
        (Recall, BIN_REC, BIN_REC_T03),
        (F1, BIN_F1, BIN_F1_T03),
    ] {
        near(kind.name(), run(opts(kind, 0), &p, &t), want);
        // Probabilities are taken as they are; a float target of 0/1 too.
        let o = MetricOptions { threshold: 0.3, ..opts(kind, 0) };
        near(kind.name(), run(o, &p.sigmoid(), &t.to_kind(Kind::Float)), want_t03);
    }
}

#[test]
fn multiclass_scores_match_torchmetrics() {
    let (p, t) = (f32s(&ML, &[24, 4]), i64s(&MT));
    use MetricKind::*;
    let table = [
        (Accuracy, [MC_ACC_MICRO, MC_ACC_MACRO, MC_ACC_WEIGHTED]),
        (Precision, [MC_PREC_MICRO, MC_PREC_MACRO, MC_PREC_WEIGHTED]),
        (Recall, [MC_REC_MICRO, MC_REC_MACRO, MC_REC_WEIGHTED]),
        (F1, [MC_F1_MICRO, MC_F1_MACRO, MC_F1_WEIGHTED]),
    ];
    for (kind, wants) in table {
        for (average, want) in [Average::Micro, Average::Macro, Average::Weighted].into_iter().zip(wants) {
            let o = MetricOptions { average, ..opts(kind, 4) };
            near(&format!("{} {average:?}", kind.name()), run(o, &p, &t), want);
            // Predicted classes instead of scores give the same.
            near(kind.name(), run(o, &p.argmax(1, false), &t), want);
        }
    }
}

#[test]
fn auroc_matches_torchmetrics() {
    let (bp, bt) = (f32s(&BL, &[24]), i64s(&BT));
    near("binary", run(opts(MetricKind::Auroc, 0), &bp, &bt), BIN_AUROC);
    let binned = MetricOptions { thresholds: 11, ..opts(MetricKind::Auroc, 0) };
    near("binary binned", run(binned, &bp, &bt), BIN_AUROC_B11);
    let (mp, mt) = (f32s(&ML, &[24, 4]), i64s(&MT));
    let macro_ = opts(MetricKind::Auroc, 4);
    near("macro", run(macro_, &mp, &mt), MC_AUROC_MACRO);
    let weighted = MetricOptions { average: Average::Weighted, ..macro_ };
    near("weighted", run(weighted, &mp, &mt), MC_AUROC_WEIGHTED);
    near("binned", run(MetricOptions { thresholds: 7, ..macro_ }, &mp, &mt), MC_AUROC_B7);
    near("binned weighted", run(MetricOptions { thresholds: 7, ..weighted }, &mp, &mt), MC_AUROC_B7_W);
    // The exact curve cannot be summed over ranks.
    let mut m = build(macro_).unwrap();
    m.update(&mp, &mt).unwrap();
    let reduce = |_: &mut [f64]| Ok(());
    assert_eq!(compute(m.as_ref(), Some(&reduce)).unwrap_err().code, crate::ErrorCode::Unsupported);
    let local = MetricOptions { sync_on_compute: false, ..macro_ };
    let mut m = build(local).unwrap();
    m.update(&mp, &mt).unwrap();
    near("no sync", compute(m.as_ref(), Some(&reduce)).unwrap(), MC_AUROC_MACRO);
}

#[test]
fn exact_auroc_keeps_copies() {
    // A host refilling its tensors in place after update changes nothing.
    let mut p = Tensor::from_slice(&[0.9f32, 0.2, 0.6, 0.4]);
    let mut t = Tensor::from_slice(&[1i64, 0, 0, 1]);
    let mut m = build(opts(MetricKind::Auroc, 0)).unwrap();
    m.update(&p, &t).unwrap();
    let _ = p.fill_(0.5);
    let _ = t.fill_(0);
    assert_eq!(m.compute_local().unwrap(), 0.75);
}

#[test]
fn regression_matches_torchmetrics() {
    let (p, t) = (f32s(&RP, &[24]), f32s(&RT, &[24]));
    near("mae", run(opts(MetricKind::MeanAbsoluteError, 0), &p, &t), MAE);
    near("mse", run(opts(MetricKind::MeanSquaredError, 0), &p, &t), MSE);
    near("rmse", run(opts(MetricKind::RootMeanSquaredError, 0), &p, &t), RMSE);
}

#[test]
fn states_sum_over_ranks_and_reset() {
    // Two "ranks" each see half; summing their states gives the whole.
    let (p, t) = (f32s(&ML, &[24, 4]), i64s(&MT));
    let o = MetricOptions { average: Average::Weighted, ..opts(MetricKind::F1, 4) };
    let mut a = build(o).unwrap();
    let mut b = build(o).unwrap();
    a.update(&p.narrow(0, 0, 10), &t.narrow(0, 0, 10)).unwrap();
    b.update(&p.narrow(0, 10, 14), &t.narrow(0, 10, 14)).unwrap();
    let other = b.summable_state().unwrap().unwrap();
    let add = |v: &mut [f64]| {
        v.iter_mut().zip(&other).for_each(|(x, y)| *x += y);
        Ok(())
    };
    near("summed", compute(a.as_ref(), Some(&add)).unwrap(), MC_F1_WEIGHTED);
    a.reset();
    assert_eq!(a.compute_local().unwrap_err().code, crate::ErrorCode::InvalidState);
}

#[test]
fn bad_inputs_are_refused() {
    use MetricKind::*;
    assert!(build(opts(Accuracy, 1)).is_err());
    assert!(build(opts(Accuracy, MAX_CLASSES + 1)).is_err());
    assert!(build(MetricOptions { threshold: 1.5, ..opts(F1, 0) }).is_err());
    assert!(build(MetricOptions { average: Average::Micro, ..opts(Auroc, 3) }).is_err());
    assert!(build(MetricOptions { thresholds: 1, ..opts(Auroc, 0) }).is_err());
    assert!(build(MetricOptions { thresholds: MAX_THRESHOLDS, ..opts(Auroc, MAX_CLASSES) }).is_err());
    let mut m = build(opts(Accuracy, 3)).unwrap();
    let scores = Tensor::zeros([4, 3], (Kind::Float, Device::Cpu));
    // A class outside [0, 3), a shape that does not fit, a fractional class.
    assert!(m.update(&scores, &i64s(&[0, 1, 2, 3])).unwrap_err().message.contains("class 3"));
    assert!(m.update(&scores, &i64s(&[0, 1, 2])).is_err());
    let frac = Tensor::from_slice(&[0.0f32, 0.5, 1.0, 2.0]);
    assert!(m.update(&scores, &frac).unwrap_err().message.contains("not class indices"));
    let mut b = build(opts(Accuracy, 0)).unwrap();
    assert!(b.update(&i64s(&[0, 2]), &i64s(&[0, 1])).is_err());
    let mut r = build(opts(MeanSquaredError, 0)).unwrap();
    assert!(r.update(&f32s(&[1.0, 2.0], &[2]), &f32s(&[1.0], &[1])).is_err());
    assert_eq!(r.compute_local().unwrap_err().code, crate::ErrorCode::InvalidState);
}

const BL: [f32; 24] = [
    -1.6, 0.8, 1.8, -2.8, -0.3, 0.6, -1.3, -1.8, -1.7, -2.4, -0.2, 2.7, -2.6, 0.2, -2.8, 1.0, -1.7, -1.1, -4.1, -0.7,
    2.2, 1.0, 2.8, 2.8,
];
const BT: [i64; 24] = [1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 0];
const ML: [f32; 96] = [
    0.2, 0.27, -0.77, 1.2, -1.86, -2.58, -0.87, -0.92, -1.33, 1.8, 0.7, -0.22, -1.22, -0.58, -1.56, 0.89, -3.39, 0.61,
    0.86, 0.46, -0.19, -1.44, 2.63, 1.47, -0.6, -0.26, 1.14, 1.48, -1.24, 0.24, 0.75, 2.13, -0.81, 1.24, 1.59, -1.66,
    0.19, -0.03, -0.61, 0.8, 0.58, 2.87, -1.82, 2.66, 0.76, -0.24, 0.69, -1.73, -1.69, -0.47, 0.94, 0.14, -0.88, -0.73,
    0.96, 0.91, -1.22, 1.73, -1.82, 0.76, -0.65, 0.92, 0.42, 1.78, 0.85, 0.2, 0.84, -1.1, -0.34, -1.19, -3.2, -1.12,
    2.18, -2.31, -0.5, 0.83, 0.19, -2.27, -1.37, 1.91, 0.39, -0.22, 1.73, -1.7, 3.13, -0.8, 1.21, 0.11, 0.1, -0.82,
    -0.62, 0.08, 1.09, -1.63, -0.8, 0.2,
];
const MT: [i64; 24] = [0, 1, 1, 1, 2, 0, 0, 2, 2, 2, 0, 2, 0, 2, 2, 2, 2, 0, 1, 1, 2, 2, 1, 1];
const RP: [f32; 24] = [
    1.007, 0.978, -0.463, -1.707, -0.867, -1.223, -1.14, 3.788, 0.61, -0.906, -0.881, -0.861, -0.674, -3.021, 0.401,
    -1.06, -1.132, -1.834, -0.526, 1.148, -0.281, -0.69, 1.481, -0.048,
];
const RT: [f32; 24] = [
    0.471, 0.648, 1.332, -0.295, -0.014, -0.575, 0.399, -0.5, -0.649, 0.96, 0.345, -0.579, -0.233, 2.355, -0.183, 1.73,
    -0.744, -2.28, 1.349, 0.964, 0.911, -0.22, 0.078, 0.254,
];
const BIN_ACC: f64 = 0.7083333134651184;
const BIN_ACC_T03: f64 = 0.6666666865348816;
const BIN_PREC: f64 = 0.699999988079071;
const BIN_PREC_T03: f64 = 0.6153846383094788;
const BIN_REC: f64 = 0.6363636255264282;
const BIN_REC_T03: f64 = 0.7272727489471436;
const BIN_F1: f64 = 0.6666666865348816;
const BIN_F1_T03: f64 = 0.6666666865348816;
const MC_ACC_MICRO: f64 = 0.25;
const MC_ACC_MACRO: f64 = 0.16829004883766174;
const MC_ACC_WEIGHTED: f64 = 0.25;
const MC_PREC_MICRO: f64 = 0.25;
const MC_PREC_MACRO: f64 = 0.261904776096344;
const MC_PREC_WEIGHTED: f64 = 0.3948413133621216;
const MC_REC_MICRO: f64 = 0.25;
const MC_REC_MACRO: f64 = 0.16829004883766174;
const MC_REC_WEIGHTED: f64 = 0.25;
const MC_F1_MICRO: f64 = 0.25;
const MC_F1_MACRO: f64 = 0.19957265257835388;
const MC_F1_WEIGHTED: f64 = 0.3004985749721527;
const BIN_AUROC: f64 = 0.7167832255363464;
const BIN_AUROC_B11: f64 = 0.6888111233711243;
const MC_AUROC_MACRO: f64 = 0.3481956720352173;
const MC_AUROC_WEIGHTED: f64 = 0.49920397996902466;
const MC_AUROC_B7: f64 = 0.3409717381000519;
const MC_AUROC_B7_W: f64 = 0.48009365797042847;
const MAE: f64 = 1.3118748664855957;
const MSE: f64 = 3.2910797595977783;
const RMSE: f64 = 1.8141334056854248;

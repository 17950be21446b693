//! Feature scaling fitted on one dataset (the training split) and applied
//! to others, so validation, test and new data are scaled with the
//! training statistics (scikit-learn's `StandardScaler` / `MinMaxScaler`
//! `fit` then `transform`), with the statistics readable.
use std::sync::Arc;

use tch::{Kind, Tensor};

use super::dataset::Dataset;
use crate::error::{Error, Result};

/// Samples read per batch while fitting.
const FIT_CHUNK: usize = 4096;

/// What a [`Scaler`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalerKind {
    /// `(x - mean) / std`, the population std (scikit-learn's
    /// StandardScaler); a constant feature becomes 0.
    Standardize,
    /// `(x - min) / (max - min)`; a constant feature becomes 0.
    MinMax,
}

/// A scaling fitted on one column of a dataset: per feature (every element
/// of a sample's column), `x' = (x - shift) * scale`. Plain numbers, so it
/// is shared freely between threads.
#[derive(Debug, Clone)]
pub struct Scaler {
    kind: ScalerKind,
    column: usize,
    /// One sample's column shape.
    shape: Vec<i64>,
    /// Mean or min per feature.
    first: Vec<f64>,
    /// Std or max per feature.
    second: Vec<f64>,
    /// 1 / spread per feature (0 for a constant one).
    scale: Vec<f64>,
}

/// Column `column` of a batch, checked to hold floating-point features.
fn float_column(batch: &[Tensor], column: usize) -> Result<&Tensor> {
    let t = batch
        .get(column)
        .ok_or_else(|| Error::invalid(format!("column {column} is not in the dataset's {} columns", batch.len())))?;
    if !t.is_floating_point() {
        return Err(Error::dtype(format!("column {column} holds {:?}, not floating-point features", t.kind())));
    }
    Ok(t)
}

fn numbers(t: &Tensor) -> Result<Vec<f64>> {
    Ok(Vec::<f64>::try_from(t.f_to_kind(Kind::Double)?.f_flatten(0, -1)?)?)
}

impl Scaler {
    /// Fits `kind` on column `column` of `dataset` (every sample, read in
    /// batches): mean and population std, or min and max, per feature.
    pub fn fit(dataset: &dyn Dataset, column: usize, kind: ScalerKind) -> Result<Scaler> {
        let n = dataset.len();
        if n == 0 {
            return Err(Error::invalid("cannot fit a scaler on an empty dataset"));
        }
        let chunks =
            || (0..n).step_by(FIT_CHUNK).map(move |s| (s as i64..(s + FIT_CHUNK).min(n) as i64).collect::<Vec<_>>());
        let (first, second) = match kind {
            ScalerKind::Standardize => {
                let mut sum: Option<Tensor> = None;
                for idx in chunks() {
                    let x = float_column(&dataset.get_batch(&idx)?, column)?.f_to_kind(Kind::Double)?;
                    let s = x.f_sum_dim_intlist(0, false, Kind::Double)?;
                    sum = Some(match sum {
                        Some(acc) => acc.f_add(&s)?,
                        None => s,
                    });
                }
                let mean = sum.ok_or_else(|| Error::state("no samples"))?.f_div_scalar(n as f64)?;
                let mut sq: Option<Tensor> = None;
                for idx in chunks() {
                    let d = float_column(&dataset.get_batch(&idx)?, column)?.f_to_kind(Kind::Double)?.f_sub(&mean)?;
                    let s = d.f_mul(&d)?.f_sum_dim_intlist(0, false, Kind::Double)?;
                    sq = Some(match sq {
                        Some(acc) => acc.f_add(&s)?,
                        None => s,
                    });
                }
                let std = sq.ok_or_else(|| Error::state("no samples"))?.f_div_scalar(n as f64)?.f_sqrt()?;
                (mean, std)
            }
            ScalerKind::MinMax => {
                let (mut lo, mut hi): (Option<Tensor>, Option<Tensor>) = (None, None);
                for idx in chunks() {
                    let x = float_column(&dataset.get_batch(&idx)?, column)?.f_to_kind(Kind::Double)?;
                    let (l, h) = (x.f_amin(0, false)?, x.f_amax(0, false)?);
                    lo = Some(match lo {
                        Some(acc) => acc.f_minimum(&l)?,
                        None => l,
                    });
                    hi = Some(match hi {
                        Some(acc) => acc.f_maximum(&h)?,
                        None => h,
                    });
                }
                (lo.ok_or_else(|| Error::state("no samples"))?, hi.ok_or_else(|| Error::state("no samples"))?)
            }
        };
        let spread = match kind {
            ScalerKind::Standardize => second.shallow_clone(),
            ScalerKind::MinMax => second.f_sub(&first)?,
        };
        // A constant (or non-finite) feature gets scale 0: it becomes 0.
        let usable = spread.f_gt(0.0)?.f_logical_and(&spread.f_isfinite()?)?;
        let scale = spread.f_reciprocal()?.f_where_self(&usable, &spread.f_zeros_like()?)?;
        Ok(Scaler {
            kind,
            column,
            shape: first.size(),
            first: numbers(&first)?,
            second: numbers(&second)?,
            scale: numbers(&scale)?,
        })
    }

    /// The kind fitted.
    pub fn kind(&self) -> ScalerKind {
        self.kind
    }

    /// The column it scales.
    pub fn column(&self) -> usize {
        self.column
    }

    /// The statistics, shaped as one sample's column (float64): mean and
    /// std, or min and max.
    pub fn stats(&self) -> Result<(Tensor, Tensor)> {
        let shaped = |v: &[f64]| -> Result<Tensor> { Ok(Tensor::f_from_slice(v)?.f_reshape(&self.shape)?) };
        Ok((shaped(&self.first)?, shaped(&self.second)?))
    }

    /// Scales a batch's column as fitted, keeping its dtype.
    pub fn transform(&self, x: &Tensor) -> Result<Tensor> {
        let kind = x.kind();
        if x.size().get(1..) != Some(self.shape.as_slice()) {
            return Err(Error::shape(format!(
                "the scaler was fitted on samples of shape {:?}, this column's are {:?}",
                self.shape,
                x.size().get(1..).unwrap_or(&[])
            )));
        }
        let shift = Tensor::f_from_slice(&self.first)?.f_reshape(&self.shape)?;
        let scale = Tensor::f_from_slice(&self.scale)?.f_reshape(&self.shape)?;
        let y = x.f_to_kind(Kind::Double)?.f_sub(&shift)?.f_mul(&scale)?;
        Ok(y.f_to_kind(kind)?)
    }

    /// `dataset` with its column scaled as fitted (computed batch by batch
    /// when read).
    pub fn apply(self: &Arc<Self>, dataset: Arc<dyn Dataset>) -> ScaledDataset {
        ScaledDataset { scaler: Arc::clone(self), dataset }
    }
}

/// A dataset whose one column a [`Scaler`] scales as it is read.
pub struct ScaledDataset {
    scaler: Arc<Scaler>,
    dataset: Arc<dyn Dataset>,
}

impl Dataset for ScaledDataset {
    fn len(&self) -> usize {
        self.dataset.len()
    }

    fn get_batch(&self, indices: &[i64]) -> Result<Vec<Tensor>> {
        let mut batch = self.dataset.get_batch(indices)?;
        let c = self.scaler.column;
        let scaled = self.scaler.transform(float_column(&batch, c)?)?;
        batch[c] = scaled;
        Ok(batch)
    }
    fn reads_on_any_thread(&self) -> bool {
        self.dataset.reads_on_any_thread()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TensorDataset;

    fn dataset(rows: &[[f32; 2]]) -> Arc<dyn Dataset> {
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let x = Tensor::from_slice(&flat).reshape([rows.len() as i64, 2]);
        let y = Tensor::arange(rows.len() as i64, (Kind::Int64, tch::Device::Cpu));
        Arc::new(TensorDataset::new(vec![x, y]).unwrap())
    }

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
    }

    #[test]
    fn fitted_on_train_applied_to_val() {
        // Column 0: 0, 5, 10 (mean 5, population std sqrt(50/3)); column 1 constant.
        let train = dataset(&[[0., 3.], [5., 3.], [10., 3.]]);
        let s = Arc::new(Scaler::fit(train.as_ref(), 0, ScalerKind::Standardize).unwrap());
        let (mean, std) = s.stats().unwrap();
        assert_eq!(values(&mean), [5.0, 3.0]);
        assert!((values(&std)[0] - (50f64 / 3.0).sqrt()).abs() < 1e-12 && values(&std)[1] == 0.0);
        // New data is scaled with the training statistics.
        let val = s.apply(dataset(&[[5., 3.], [15., 7.]]));
        let b = val.get_batch(&[0, 1]).unwrap();
        let got = values(&b[0]);
        assert!(got[0].abs() < 1e-7 && (got[2] - 10.0 / (50f64 / 3.0).sqrt()).abs() < 1e-6);
        assert_eq!((got[1], got[3]), (0.0, 0.0)); // constant in training
        assert_eq!(b[0].kind(), Kind::Float);
        assert_eq!(values(&b[1]), [0.0, 1.0]); // labels untouched
        let mm = Scaler::fit(train.as_ref(), 0, ScalerKind::MinMax).unwrap();
        let (lo, hi) = mm.stats().unwrap();
        assert_eq!((values(&lo), values(&hi)), (vec![0.0, 3.0], vec![10.0, 3.0]));
        assert!(Scaler::fit(train.as_ref(), 1, ScalerKind::MinMax).unwrap_err().message.contains("Int64"));
        assert!(Scaler::fit(train.as_ref(), 5, ScalerKind::MinMax).is_err());
    }
}

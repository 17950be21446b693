//! Feature scaling applied to a row-major `[rows, cols]` buffer.
use crate::error::{Error, Result};

/// How [`load_csv`](super::load_csv) scales the feature columns.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Scaling {
    /// Leave the values as read.
    #[default]
    None,
    /// Divide every value by this (finite, non-zero) number, e.g. 255 for pixels.
    Divide(f64),
    /// Per feature column, `(x - min) / (max - min)` over this file; a
    /// constant column becomes 0.
    MinMax,
    /// Per feature column, `(x - mean) / std` (population std) over this
    /// file; a constant column becomes 0.
    Standardize,
}

impl Scaling {
    /// Checks the parameters (a `Divide` by 0 or a non-finite number is invalid).
    pub(crate) fn validate(&self) -> Result<()> {
        match *self {
            Scaling::Divide(d) if !d.is_finite() || d == 0.0 => {
                Err(Error::invalid(format!("Scaling::Divide({d}): the divisor must be finite and non-zero")))
            }
            _ => Ok(()),
        }
    }

    /// Scales `values`, `cols` values per row, in place.
    pub(crate) fn apply(&self, values: &mut [f32], cols: usize) -> Result<()> {
        self.validate()?;
        if cols == 0 || values.is_empty() {
            return Ok(());
        }
        match *self {
            Scaling::None => {}
            Scaling::Divide(d) => values.iter_mut().for_each(|x| *x = (f64::from(*x) / d) as f32),
            Scaling::MinMax => {
                let mut lo = vec![f32::INFINITY; cols];
                let mut hi = vec![f32::NEG_INFINITY; cols];
                for row in values.chunks_exact(cols) {
                    for ((l, h), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(row) {
                        *l = l.min(x);
                        *h = h.max(x);
                    }
                }
                let affine: Vec<(f64, f64)> = lo
                    .iter()
                    .zip(&hi)
                    .map(|(&l, &h)| {
                        let range = f64::from(h) - f64::from(l);
                        if range > 0.0 {
                            (f64::from(l), 1.0 / range)
                        } else {
                            (f64::from(l), 0.0)
                        }
                    })
                    .collect();
                shift_scale(values, &affine);
            }
            Scaling::Standardize => {
                let rows = (values.len() / cols) as f64;
                let mut sum = vec![0f64; cols];
                for row in values.chunks_exact(cols) {
                    for (s, &x) in sum.iter_mut().zip(row) {
                        *s += f64::from(x);
                    }
                }
                let mean: Vec<f64> = sum.iter().map(|s| s / rows).collect();
                let mut sq = vec![0f64; cols];
                for row in values.chunks_exact(cols) {
                    for ((s, m), &x) in sq.iter_mut().zip(&mean).zip(row) {
                        let d = f64::from(x) - m;
                        *s += d * d;
                    }
                }
                let affine: Vec<(f64, f64)> = mean
                    .iter()
                    .zip(&sq)
                    .map(|(&m, &s)| {
                        let std = (s / rows).sqrt();
                        if std > 0.0 && std.is_finite() {
                            (m, 1.0 / std)
                        } else {
                            (m, 0.0)
                        }
                    })
                    .collect();
                shift_scale(values, &affine);
            }
        }
        Ok(())
    }
}

/// `x = (x - shift) * scale` per column.
fn shift_scale(values: &mut [f32], affine: &[(f64, f64)]) {
    for row in values.chunks_exact_mut(affine.len()) {
        for (x, &(shift, scale)) in row.iter_mut().zip(affine) {
            *x = if scale == 0.0 { 0.0 } else { ((f64::from(*x) - shift) * scale) as f32 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn modes() {
        // Two columns: [0, 5, 10] and the constant [3, 3, 3].
        let base = [0f32, 3., 5., 3., 10., 3.];
        let mut v = base;
        Scaling::None.apply(&mut v, 2).unwrap();
        assert_eq!(v, base);
        let mut v = base;
        Scaling::Divide(10.0).apply(&mut v, 2).unwrap();
        assert!(close(&v, &[0., 0.3, 0.5, 0.3, 1.0, 0.3]));
        let mut v = base;
        Scaling::MinMax.apply(&mut v, 2).unwrap();
        assert!(close(&v, &[0., 0., 0.5, 0., 1., 0.]), "{v:?}");
        let mut v = base;
        Scaling::Standardize.apply(&mut v, 2).unwrap();
        let s = (50f32 / 3.).sqrt();
        assert!(close(&v, &[-5. / s, 0., 0., 0., 5. / s, 0.]), "{v:?}");
        assert!(v.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn bad_divisor() {
        let mut v = [1f32];
        assert!(Scaling::Divide(0.0).apply(&mut v, 1).is_err());
        assert!(Scaling::Divide(f64::NAN).validate().is_err());
    }
}

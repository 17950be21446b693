//! Resizing: `F.interpolate`.
use super::checks::checked_numel;
use crate::error::{Error, Result};
use tch::Tensor;

/// The interpolation modes of `F.interpolate` that fulmen runs, with the
/// number of spatial dimensions each takes (`None`: 1 to 3).
const MODES: [(&str, Option<usize>); 5] =
    [("nearest", None), ("linear", Some(1)), ("bilinear", Some(2)), ("bicubic", Some(2)), ("trilinear", Some(3))];

/// `x` (N, C, spatial...) with 1 to 3 spatial dimensions resized to `size`
/// (one size per spatial dimension, or one for all) or by `scale_factor`
/// (give exactly one; `size` empty and `scale_factor` 0 mean not given),
/// with `mode` "nearest", "linear" (1-D), "bilinear" / "bicubic" (2-D) or
/// "trilinear" (3-D), as `F.interpolate`. `align_corners` is for the
/// linear and cubic modes only.
pub fn interpolate(x: &Tensor, size: &[i64], scale_factor: f64, mode: &str, align_corners: bool) -> Result<Tensor> {
    check_interpolate(size, scale_factor, mode, align_corners)?;
    let spatial = x.dim().saturating_sub(2);
    if !(1..=3).contains(&spatial) {
        return Err(Error::shape(format!(
            "interpolate: input of shape {:?} must be (N, C, L), (N, C, H, W) or (N, C, D, H, W)",
            x.size()
        )));
    }
    let wants = MODES.iter().find(|(m, _)| *m == mode).and_then(|(_, d)| *d);
    if wants.is_some_and(|d| d != spatial) || (size.len() > 1 && size.len() != spatial) {
        return Err(Error::shape(format!(
            "interpolate: mode {mode:?} with size {size:?} does not fit the {spatial} spatial dimensions of {:?}",
            x.size()
        )));
    }
    let input = &x.size()[2..];
    let (out, scales): (Vec<i64>, Option<f64>) = if !size.is_empty() {
        ((0..spatial).map(|i| size[if size.len() == 1 { 0 } else { i }]).collect(), None)
    } else {
        let out: Vec<f64> = input.iter().map(|&d| (d as f64 * scale_factor).floor()).collect();
        if out.iter().any(|&o| !(1.0..=i64::MAX as f64 / 2.0).contains(&o)) {
            return Err(Error::shape(format!(
                "interpolate: scale_factor {scale_factor} turns {input:?} into an empty or too large size"
            )));
        }
        (out.into_iter().map(|o| o as i64).collect(), Some(scale_factor))
    };
    let mut result = x.size()[..2].to_vec();
    result.extend(&out);
    checked_numel(&result, "interpolate")?;
    let (s, o) = (scales, out.as_slice());
    Ok(match (mode, spatial) {
        ("nearest", 1) => x.f_upsample_nearest1d(o, s)?,
        ("nearest", 2) => x.f_upsample_nearest2d(o, s, s)?,
        ("nearest", _) => x.f_upsample_nearest3d(o, s, s, s)?,
        ("linear", _) => x.f_upsample_linear1d(o, align_corners, s)?,
        ("bilinear", _) => x.f_upsample_bilinear2d(o, align_corners, s, s)?,
        ("bicubic", _) => x.f_upsample_bicubic2d(o, align_corners, s, s)?,
        _ => x.f_upsample_trilinear3d(o, align_corners, s, s, s)?,
    })
}

/// The checks of [`interpolate`] that do not depend on the input: a known
/// mode, align_corners only where it means something, exactly one of a
/// positive `size` (1 to 3 sizes) and a positive finite `scale_factor`.
pub fn check_interpolate(size: &[i64], scale_factor: f64, mode: &str, align_corners: bool) -> Result<()> {
    if !MODES.iter().any(|(m, _)| *m == mode) {
        let names: Vec<&str> = MODES.iter().map(|(m, _)| *m).collect();
        return Err(Error::invalid(format!("interpolate: mode {mode:?} is not one of {names:?}")));
    }
    if align_corners && mode == "nearest" {
        return Err(Error::invalid("interpolate: align_corners is for the linear and cubic modes, not nearest"));
    }
    if size.is_empty() == (scale_factor == 0.0) {
        return Err(Error::invalid("interpolate: give either size or scale_factor (not both, not neither)"));
    }
    if size.len() > 3 || size.iter().any(|&s| s <= 0) {
        return Err(Error::invalid(format!("interpolate: size {size:?} must hold 1 to 3 positive sizes")));
    }
    if size.is_empty() && !(scale_factor.is_finite() && scale_factor > 0.0) {
        return Err(Error::invalid(format!("interpolate: scale_factor {scale_factor} must be positive and finite")));
    }
    Ok(())
}

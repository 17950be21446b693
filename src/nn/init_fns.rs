//! `torch.nn.init` on existing tensors (parameters, buffers), under no_grad
//! and from the global generator, drawing exactly as PyTorch 2.13 does: the
//! same seed gives the same values. `uniform_`, `normal_`, `constant_`,
//! `zeros_` and `ones_` are the tensor's own in-place ops
//! (`crate::tensor::inplace`).
use super::meta_init;
use crate::error::{Error, Result};
use crate::tensor::inplace;
use tch::Tensor;

/// Which fan Kaiming initialisation preserves (`fulmen_fan_mode`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanMode {
    /// `mode="fan_in"`: the forward pass's variance.
    FanIn = 0,
    /// `mode="fan_out"`: the backward pass's variance.
    FanOut = 1,
}

impl FanMode {
    /// Reads the C value.
    pub fn from_i32(v: i32) -> Result<FanMode> {
        match v {
            0 => Ok(FanMode::FanIn),
            1 => Ok(FanMode::FanOut),
            _ => Err(Error::invalid(format!("{v} is not a fulmen_fan_mode (0 fan_in, 1 fan_out)"))),
        }
    }
}

/// `nn.init._calculate_fan_in_and_fan_out`: (fan_in, fan_out) of a weight
/// of at least 2 dimensions.
pub fn fans(t: &Tensor) -> Result<(i64, i64)> {
    let size = t.size();
    if size.len() < 2 {
        return Err(Error::shape(format!(
            "fan in and fan out cannot be computed for a tensor of {} dimension(s) (shape {size:?})",
            size.len()
        )));
    }
    let overflow = || Error::shape(format!("fan in and fan out of shape {size:?} overflow"));
    let receptive = size[2..].iter().try_fold(1i64, |a, &d| a.checked_mul(d)).ok_or_else(overflow)?;
    Ok((size[1].checked_mul(receptive).ok_or_else(overflow)?, size[0].checked_mul(receptive).ok_or_else(overflow)?))
}

/// `nn.init.calculate_gain(nonlinearity, param)`: linear, conv1d / 2d / 3d,
/// conv_transpose1d / 2d / 3d and sigmoid 1; tanh 5/3; relu sqrt(2);
/// leaky_relu sqrt(2 / (1 + slope^2)) (`param` the slope, 0.01 when
/// `None`); selu 3/4.
pub fn calculate_gain(nonlinearity: &str, param: Option<f64>) -> Result<f64> {
    match nonlinearity {
        "linear" | "conv1d" | "conv2d" | "conv3d" | "conv_transpose1d" | "conv_transpose2d" | "conv_transpose3d"
        | "sigmoid" => Ok(1.0),
        "tanh" => Ok(5.0 / 3.0),
        "relu" => Ok(2f64.sqrt()),
        "leaky_relu" => {
            let slope = param.unwrap_or(0.01);
            if !slope.is_finite() {
                return Err(Error::invalid(format!("calculate_gain: negative slope {slope} is not finite")));
            }
            Ok((2.0 / (1.0 + slope * slope)).sqrt())
        }
        "selu" => Ok(0.75),
        other => Err(Error::invalid(format!(
            "calculate_gain: unsupported nonlinearity {other:?} (linear, conv1d, conv2d, conv3d, \
             conv_transpose1d/2d/3d, sigmoid, tanh, relu, leaky_relu, selu)"
        ))),
    }
}

fn check_gain(gain: f64, what: &str) -> Result<()> {
    if !gain.is_finite() {
        return Err(Error::invalid(format!("{what}: gain {gain} is not finite")));
    }
    Ok(())
}

/// `nn.init.xavier_uniform_(t, gain)`: U(-a, a) with
/// a = gain * sqrt(6 / (fan_in + fan_out)).
/// A meta tensor records it ([`super::meta_init`]).
pub fn xavier_uniform_(t: &Tensor, gain: f64) -> Result<()> {
    meta_init::change(t, "xavier_uniform_", true, true, move |x| xavier_uniform_on(x, gain))
}

/// `xavier_uniform_` on a tensor that holds data.
fn xavier_uniform_on(t: &Tensor, gain: f64) -> Result<()> {
    check_gain(gain, "xavier_uniform_")?;
    let (fan_in, fan_out) = fans(t)?;
    let std = gain * (2.0 / (fan_in + fan_out) as f64).sqrt();
    let a = 3f64.sqrt() * std;
    inplace::uniform_(t, -a, a)
}

/// `nn.init.xavier_normal_(t, gain)`: N(0, std^2) with
/// std = gain * sqrt(2 / (fan_in + fan_out)).
/// A meta tensor records it ([`super::meta_init`]).
pub fn xavier_normal_(t: &Tensor, gain: f64) -> Result<()> {
    meta_init::change(t, "xavier_normal_", true, true, move |x| xavier_normal_on(x, gain))
}

/// `xavier_normal_` on a tensor that holds data.
fn xavier_normal_on(t: &Tensor, gain: f64) -> Result<()> {
    check_gain(gain, "xavier_normal_")?;
    let (fan_in, fan_out) = fans(t)?;
    inplace::normal_(t, 0.0, gain * (2.0 / (fan_in + fan_out) as f64).sqrt())
}

/// The std of Kaiming initialisation; `None` for a tensor with no elements
/// (PyTorch then leaves it as it is).
fn kaiming_std(t: &Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<Option<f64>> {
    if t.size().contains(&0) {
        return Ok(None);
    }
    let (fan_in, fan_out) = fans(t)?;
    let fan = if mode == FanMode::FanIn { fan_in } else { fan_out };
    let gain = calculate_gain(nonlinearity, Some(a))?;
    Ok(Some(gain / (fan as f64).sqrt()))
}

/// `nn.init.kaiming_uniform_(t, a, mode, nonlinearity)`: U(-b, b) with
/// b = gain * sqrt(3 / fan); `a` is leaky_relu's negative slope. A tensor
/// with no elements is left alone, as in PyTorch.
/// A meta tensor records it ([`super::meta_init`]).
pub fn kaiming_uniform_(t: &Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<()> {
    let nonlinearity = nonlinearity.to_owned();
    meta_init::change(t, "kaiming_uniform_", true, true, move |x| kaiming_uniform_on(x, a, mode, &nonlinearity))
}

/// `kaiming_uniform_` on a tensor that holds data.
fn kaiming_uniform_on(t: &Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<()> {
    match kaiming_std(t, a, mode, nonlinearity)? {
        Some(std) => {
            let bound = 3f64.sqrt() * std;
            inplace::uniform_(t, -bound, bound)
        }
        None => Ok(()),
    }
}

/// `nn.init.kaiming_normal_(t, a, mode, nonlinearity)`: N(0, std^2) with
/// std = gain / sqrt(fan).
/// A meta tensor records it ([`super::meta_init`]).
pub fn kaiming_normal_(t: &Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<()> {
    let nonlinearity = nonlinearity.to_owned();
    meta_init::change(t, "kaiming_normal_", true, true, move |x| kaiming_normal_on(x, a, mode, &nonlinearity))
}

/// `kaiming_normal_` on a tensor that holds data.
fn kaiming_normal_on(t: &Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<()> {
    match kaiming_std(t, a, mode, nonlinearity)? {
        Some(std) => inplace::normal_(t, 0.0, std),
        None => Ok(()),
    }
}

/// Most rounds of rejection sampling in `trunc_normal_` before it gives up
/// (an interval far in a tail, where PyTorch would loop for ever).
pub const TRUNC_NORMAL_MAX_ROUNDS: usize = 10_000;

/// `nn.init.trunc_normal_(t, mean, std, a, b)`: N(mean, std^2) truncated
/// to [a, b] by PyTorch 2.13's rejection sampling (normal proposals when
/// the interval holds more than 30% of the mass, uniform proposals on
/// [a, b] otherwise), so the same seed gives the same values.
/// A meta tensor records it ([`super::meta_init`]).
pub fn trunc_normal_(t: &Tensor, mean: f64, std: f64, a: f64, b: f64) -> Result<()> {
    meta_init::change(t, "trunc_normal_", true, true, move |x| trunc_normal_on(x, mean, std, a, b))
}

/// `trunc_normal_` on a tensor that holds data.
fn trunc_normal_on(t: &Tensor, mean: f64, std: f64, a: f64, b: f64) -> Result<()> {
    for (name, v) in [("mean", mean), ("std", std), ("a", a), ("b", b)] {
        if !v.is_finite() {
            return Err(Error::invalid(format!("trunc_normal_: {name} {v} is not finite")));
        }
    }
    if std <= 0.0 || a >= b {
        return Err(Error::invalid(format!("trunc_normal_: needs std > 0 and a < b, got std {std}, [{a}, {b}]")));
    }
    inplace::floating(t, "trunc_normal_")?;
    let kind = t.f_kind()?;
    let cdf = |x: f64| (1.0 + libm_erf(x / 2f64.sqrt())) / 2.0;
    let mass = cdf((b - mean) / std) - cdf((a - mean) / std);
    let any = |m: &Tensor| -> Result<bool> { Ok(m.f_any()?.f_int64_value(&[])? != 0) };
    let gave_up =
        || Error::invalid(format!("trunc_normal_: no sample in [{a}, {b}] after {TRUNC_NORMAL_MAX_ROUNDS} rounds"));
    tch::no_grad(|| -> Result<()> {
        let mut x = t.shallow_clone();
        if mass > 0.3 {
            // the bounds as the tensor's dtype holds them
            let lo = Tensor::from(a).f_to_kind(kind)?.f_double_value(&[])?;
            let hi = Tensor::from(b).f_to_kind(kind)?.f_double_value(&[])?;
            let _ = x.f_normal_(mean, std)?;
            let mut result = x.shallow_clone();
            let mut replaced = false;
            for round in 0.. {
                let mask = result.f_lt(lo)?.f_logical_or(&result.f_gt(hi)?)?;
                if !any(&mask)? {
                    break;
                }
                if round == TRUNC_NORMAL_MAX_ROUNDS {
                    return Err(gave_up());
                }
                let mut fresh = result.f_empty_like()?;
                let _ = fresh.f_normal_(mean, std)?;
                result = fresh.f_where_self(&mask, &result)?;
                replaced = true;
            }
            if replaced {
                x.f_copy_(&result)?;
            }
            return Ok(());
        }
        let mode = a.max(mean.min(b));
        let log_peak = -0.5 * ((mode - mean) / std).powi(2);
        let mut candidates = x.f_empty_like()?;
        let mut accept = x.f_empty_like()?;
        let log_pdf = |c: &mut Tensor| -> Result<()> {
            let _ =
                c.f_sub_scalar_(mean)?.f_div_scalar_(std)?.f_pow_(2)?.f_mul_scalar_(-0.5)?.f_sub_scalar_(log_peak)?;
            Ok(())
        };
        let _ = x.f_uniform_(a, b)?;
        candidates.f_copy_(&x)?;
        log_pdf(&mut candidates)?;
        let mut pending = accept.f_uniform_(0.0, 1.0)?.f_log_()?.f_gt_tensor(&candidates)?;
        if !any(&pending)? {
            return Ok(());
        }
        let mut result = x.shallow_clone();
        for round in 0.. {
            let _ = candidates.f_uniform_(a, b)?;
            result = candidates.f_where_self(&pending, &result)?;
            log_pdf(&mut candidates)?;
            let again = accept.f_uniform_(0.0, 1.0)?.f_log_()?.f_gt_tensor(&candidates)?;
            pending = again.f_where_self(&pending, &pending)?;
            if !any(&pending)? {
                break;
            }
            if round + 1 == TRUNC_NORMAL_MAX_ROUNDS {
                return Err(gave_up());
            }
        }
        x.f_copy_(&result)?;
        Ok(())
    })
}

extern "C" {
    /// The C library's `erf` (the one Python's `math.erf` calls).
    fn erf(x: f64) -> f64;
}

/// `math.erf`.
fn libm_erf(x: f64) -> f64 {
    // SAFETY: a pure libm function of a double.
    unsafe { erf(x) }
}

/// `nn.init.orthogonal_(t, gain)`: the Q of a QR decomposition of a normal
/// matrix (rows = size(0), columns = the rest), signs fixed by R's
/// diagonal, times `gain`.
/// A meta tensor records it ([`super::meta_init`]).
pub fn orthogonal_(t: &Tensor, gain: f64) -> Result<()> {
    meta_init::change(t, "orthogonal_", true, true, move |x| orthogonal_on(x, gain))
}

/// `orthogonal_` on a tensor that holds data.
fn orthogonal_on(t: &Tensor, gain: f64) -> Result<()> {
    check_gain(gain, "orthogonal_")?;
    let size = t.size();
    if size.len() < 2 {
        return Err(Error::shape(format!("orthogonal_: needs at least 2 dimensions, got shape {size:?}")));
    }
    if t.numel() == 0 {
        return Ok(());
    }
    inplace::floating(t, "orthogonal_")?;
    let kind = t.f_kind()?;
    let rows = size[0];
    let cols = t.numel() as i64 / rows;
    tch::no_grad(|| -> Result<()> {
        let mut flat = crate::tensor::device::zeros_on_device_of(&[rows, cols], kind, t)?;
        let _ = flat.f_normal_(0.0, 1.0)?;
        if rows < cols {
            let _ = flat.f_t_()?;
        }
        let (mut q, r) = Tensor::f_linalg_qr(&flat, "reduced")?;
        let ph = r.f_diag(0)?.f_sign()?;
        let _ = q.f_mul_(&ph)?;
        if rows < cols {
            let _ = q.f_t_()?;
        }
        t.f_view_as(&q)?.f_copy_(&q)?;
        let _ = t.shallow_clone().f_mul_scalar_(gain)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use tch::{Device, Kind};

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "got {got}, PyTorch 2.13 {want}");
    }

    #[test]
    fn gains_are_pytorch_s() {
        close(calculate_gain("leaky_relu", None).unwrap(), 1.4141428569978354);
        close(calculate_gain("leaky_relu", Some(0.2)).unwrap(), 1.3867504905630728);
        close(calculate_gain("tanh", None).unwrap(), 5.0 / 3.0);
    }

    #[test]
    fn orthogonal_rows_are_orthonormal_and_truncation_holds() {
        let _rng = super::super::init::test_rng_lock();
        let w = Tensor::empty([4, 9], (Kind::Double, Device::Cpu));
        orthogonal_(&w, 1.0).unwrap();
        let eye = Tensor::eye(4, (Kind::Double, Device::Cpu));
        assert!(w.matmul(&w.tr()).allclose(&eye, 1e-9, 1e-9, false));
        let t = Tensor::empty([5000], (Kind::Float, Device::Cpu));
        trunc_normal_(&t, 0.0, 1.0, -0.5, 0.25).unwrap();
        assert!(t.min().double_value(&[]) >= -0.5 && t.max().double_value(&[]) <= 0.25);
    }

    #[test]
    fn clear_errors() {
        let v = Tensor::empty([3], (Kind::Float, Device::Cpu));
        assert_eq!(xavier_uniform_(&v, 1.0).unwrap_err().code, ErrorCode::ShapeMismatch);
        let w = Tensor::empty([3, 2], (Kind::Float, Device::Cpu));
        assert_eq!(kaiming_uniform_(&w, 0.0, FanMode::FanIn, "swish").unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(trunc_normal_(&w, 0.0, 1.0, 2.0, 1.0).unwrap_err().code, ErrorCode::InvalidArgument);
        assert_eq!(xavier_normal_(&w, f64::NAN).unwrap_err().code, ErrorCode::InvalidArgument);
        let ints = Tensor::zeros([3, 2], (Kind::Int64, Device::Cpu));
        assert_eq!(orthogonal_(&ints, 1.0).unwrap_err().code, ErrorCode::DtypeMismatch);
        assert_eq!(xavier_uniform_(&ints, 1.0).unwrap_err().code, ErrorCode::DtypeMismatch);
        assert!(FanMode::from_i32(2).is_err());
        // an interval so far in a tail that no sample lands: an error, not a hang
        let err = trunc_normal_(&Tensor::empty([2], (Kind::Float, Device::Cpu)), 0.0, 1.0, 30.0, 1e7).unwrap_err();
        assert!(err.message.contains("rounds"), "{}", err.message);
        // zero-element tensors are left alone, as in PyTorch
        let empty = Tensor::empty([0, 3], (Kind::Float, Device::Cpu));
        kaiming_normal_(&empty, 0.0, FanMode::FanIn, "relu").unwrap();
    }
}

//! Numbers as torch's Python optimizers mix them: Python floats and 0-dim
//! tensors. LBFGS's step length, Hessian scale and line search keep some
//! values as floats and others as tensors of the parameters' dtype, and
//! each mixed operation rounds as the tensor op Python dispatches to. [`Num`]
//! does the same operations, so the results are the same bits.
use crate::error::Result;
use tch::Tensor;

/// A Python float (or int) or a 0-dim tensor.
#[derive(Debug)]
pub(crate) enum Num {
    /// A Python number, as f64.
    F(f64),
    /// A 0-dim tensor.
    T(Tensor),
}

impl Clone for Num {
    fn clone(&self) -> Self {
        match self {
            Num::F(v) => Num::F(*v),
            // Values are never changed in place: sharing is what Python does.
            Num::T(t) => Num::T(t.shallow_clone()),
        }
    }
}

/// A comparison, as Python's operators.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn floats(self, a: f64, b: f64) -> bool {
        match self {
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }

    /// The comparison with its operands swapped (`a < b` is `b > a`).
    fn swapped(self) -> Self {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
        }
    }

    fn tensor_scalar(self, a: &Tensor, b: f64) -> Result<bool> {
        let r = match self {
            Cmp::Lt => a.f_lt(b)?,
            Cmp::Le => a.f_le(b)?,
            Cmp::Gt => a.f_gt(b)?,
            Cmp::Ge => a.f_ge(b)?,
        };
        truth(&r)
    }

    fn tensors(self, a: &Tensor, b: &Tensor) -> Result<bool> {
        let r = match self {
            Cmp::Lt => a.f_lt_tensor(b)?,
            Cmp::Le => a.f_le_tensor(b)?,
            Cmp::Gt => a.f_gt_tensor(b)?,
            Cmp::Ge => a.f_ge_tensor(b)?,
        };
        truth(&r)
    }
}

/// `bool(t)` of a one-element tensor.
pub(crate) fn truth(t: &Tensor) -> Result<bool> {
    Ok(t.f_reshape([1i64])?.f_int64_value(&[0])? != 0)
}

impl Num {
    /// The value as f64 (`float(x)`; a tensor's `item()`).
    pub fn value(&self) -> Result<f64> {
        match self {
            Num::F(v) => Ok(*v),
            Num::T(t) => Ok(t.f_reshape([1i64])?.f_double_value(&[0])?),
        }
    }

    /// `a + b`.
    pub fn add(&self, b: &Num) -> Result<Num> {
        Ok(match (self, b) {
            (Num::F(x), Num::F(y)) => Num::F(x + y),
            (Num::T(t), Num::F(y)) => Num::T(t.f_add_scalar(*y)?),
            (Num::F(x), Num::T(t)) => Num::T(t.f_add_scalar(*x)?),
            (Num::T(a), Num::T(b)) => Num::T(a.f_add(b)?),
        })
    }

    /// `a - b` (`float - tensor` is torch's `rsub`: `-t + x` rounds the
    /// same).
    pub fn sub(&self, b: &Num) -> Result<Num> {
        Ok(match (self, b) {
            (Num::F(x), Num::F(y)) => Num::F(x - y),
            (Num::T(t), Num::F(y)) => Num::T(t.f_sub_scalar(*y)?),
            (Num::F(x), Num::T(t)) => Num::T(t.f_rsub_scalar(*x)?),
            (Num::T(a), Num::T(b)) => Num::T(a.f_sub(b)?),
        })
    }

    /// `a * b`.
    pub fn mul(&self, b: &Num) -> Result<Num> {
        Ok(match (self, b) {
            (Num::F(x), Num::F(y)) => Num::F(x * y),
            (Num::T(t), Num::F(y)) => Num::T(t.f_mul_scalar(*y)?),
            (Num::F(x), Num::T(t)) => Num::T(t.f_mul_scalar(*x)?),
            (Num::T(a), Num::T(b)) => Num::T(a.f_mul(b)?),
        })
    }

    /// `a / b` (`float / tensor` is `tensor.reciprocal() * float` in torch).
    pub fn div(&self, b: &Num) -> Result<Num> {
        Ok(match (self, b) {
            (Num::F(x), Num::F(y)) => Num::F(x / y),
            (Num::T(t), Num::F(y)) => Num::T(t.f_div_scalar(*y)?),
            (Num::F(x), Num::T(t)) => Num::T(t.f_reciprocal()?.f_mul_scalar(*x)?),
            (Num::T(a), Num::T(b)) => Num::T(a.f_div(b)?),
        })
    }

    /// `abs(a)`.
    pub fn abs(&self) -> Result<Num> {
        Ok(match self {
            Num::F(x) => Num::F(x.abs()),
            Num::T(t) => Num::T(t.f_abs()?),
        })
    }

    /// `a <op> b`: a tensor operand makes it the tensor comparison (the
    /// float is cast to the tensor's dtype).
    pub fn cmp(&self, op: Cmp, b: &Num) -> Result<bool> {
        match (self, b) {
            (Num::F(x), Num::F(y)) => Ok(op.floats(*x, *y)),
            (Num::T(t), Num::F(y)) => op.tensor_scalar(t, *y),
            (Num::F(x), Num::T(t)) => op.swapped().tensor_scalar(t, *x),
            (Num::T(a), Num::T(b)) => op.tensors(a, b),
        }
    }
}

/// Python's `max(a, b)`: `b` when `b > a`, else `a`.
/// Python's `x ** y` on floats: libm's `pow`. With a constant exponent
/// Rust's `powf` / `powi` let LLVM rewrite `x ** 0.5` into `sqrt(x)` and
/// `x ** 2` into `x * x`, correctly rounded where glibc's `pow` may be one
/// ulp off (`(1 - 0.999 ** 1270) ** 0.5`), so the exponent is hidden from
/// the optimizer.
pub(crate) fn py_pow(x: f64, y: f64) -> f64 {
    x.powf(std::hint::black_box(y))
}

pub(crate) fn py_max(a: &Num, b: &Num) -> Result<Num> {
    Ok(if b.cmp(Cmp::Gt, a)? { b.clone() } else { a.clone() })
}

/// Python's `min(a, b)`: `b` when `b < a`, else `a`.
pub(crate) fn py_min(a: &Num, b: &Num) -> Result<Num> {
    Ok(if b.cmp(Cmp::Lt, a)? { b.clone() } else { a.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn t(v: f32) -> Num {
        Num::T(Tensor::from_slice(&[v]).reshape([0i64; 0]))
    }

    #[test]
    fn mixed_operations_keep_tensors_and_their_dtype() {
        let x = Num::F(0.1);
        let y = t(3.0);
        let sum = x.add(&y).unwrap();
        assert!(matches!(&sum, Num::T(s) if s.kind() == Kind::Float));
        assert_eq!(sum.value().unwrap(), (0.1f32 + 3.0f32) as f64);
        // float / tensor is the reciprocal times the float.
        let q = Num::F(1.0).div(&t(3.0)).unwrap();
        assert_eq!(q.value().unwrap(), (1.0f32 / 3.0f32) as f64);
        assert_eq!(Num::F(1.0).sub(&t(0.25)).unwrap().value().unwrap(), 0.75);
        // A float compared with a tensor is cast to its dtype first.
        assert!(!Num::F(0.1).cmp(Cmp::Lt, &t(0.1)).unwrap());
        assert!(Num::F(0.1).cmp(Cmp::Le, &t(0.1)).unwrap());
        assert!(Num::F(0.1).cmp(Cmp::Gt, &Num::F(0.05)).unwrap());
    }

    #[test]
    fn pow_is_pythons_not_the_correctly_rounded_shortcut() {
        // Python: (1 - 0.999 ** 1270) ** 0.5 (Adam's bias correction) and
        // 6.736356487348907 ** 2, where sqrt and x * x round otherwise.
        let bc = 1.0 - py_pow(0.999, 1270.0);
        assert_eq!(bc, 0.7193467685933388);
        assert_eq!(py_pow(bc, 0.5), 0.8481431297801916);
        assert_ne!(bc.sqrt(), 0.8481431297801916);
        assert_eq!(py_pow(6.736356487348907, 2.0), 45.3784987246477);
        assert_ne!(6.736356487348907f64 * 6.736356487348907, 45.3784987246477);
    }

    #[test]
    fn min_and_max_return_the_first_on_ties_as_python() {
        let a = Num::F(1.0);
        let b = t(1.0);
        assert!(matches!(py_min(&a, &b).unwrap(), Num::F(_)));
        assert!(matches!(py_max(&b, &a).unwrap(), Num::T(_)));
        assert!(matches!(py_min(&a, &t(0.5)).unwrap(), Num::T(_)));
        assert!(matches!(py_max(&a, &t(0.5)).unwrap(), Num::F(_)));
    }
}

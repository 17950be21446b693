//! The strong-Wolfe line search of `torch.optim.LBFGS` (`_strong_wolfe`
//! and `_cubic_interpolate`, ported from minFunc through torch/optim's
//! Lua code), with the same mix of floats and tensors so each trial step
//! is the one torch tries.
use super::py_num::{py_max, py_min, Cmp, Num};
use super::state::deep_copy;
use crate::error::{Error, Result};
use tch::Tensor;

/// Minimizer of the cubic through `(x1, f1)` and `(x2, f2)` with slopes
/// `g1` and `g2`, kept in `bounds` (the interval between the points when
/// `None`); the middle of the bounds when the cubic has no minimum.
fn cubic_interpolate(
    x1: &Num,
    f1: f64,
    g1: &Num,
    x2: &Num,
    f2: f64,
    g2: &Num,
    bounds: Option<(&Num, &Num)>,
) -> Result<Num> {
    let (lo, hi) = match bounds {
        Some((lo, hi)) => (lo.clone(), hi.clone()),
        None if x1.cmp(Cmp::Le, x2)? => (x1.clone(), x2.clone()),
        None => (x2.clone(), x1.clone()),
    };
    let three_df = Num::F(3.0 * (f1 - f2));
    let d1 = g1.add(g2)?.sub(&three_df.div(&x1.sub(x2)?)?)?;
    let d1_squared = match &d1 {
        Num::T(t) => Num::T(t.f_pow_tensor_scalar(2)?),
        Num::F(v) => Num::F(super::py_num::py_pow(*v, 2.0)),
    };
    let d2_square = d1_squared.sub(&g1.mul(g2)?)?;
    if d2_square.cmp(Cmp::Ge, &Num::F(0.0))? {
        let d2 = match &d2_square {
            Num::T(t) => Num::T(t.f_sqrt()?),
            Num::F(v) => Num::F(v.sqrt()),
        };
        let two_d2 = Num::F(2.0).mul(&d2)?;
        let min_pos = if x1.cmp(Cmp::Le, x2)? {
            let ratio = g2.add(&d2)?.sub(&d1)?.div(&g2.sub(g1)?.add(&two_d2)?)?;
            x2.sub(&x2.sub(x1)?.mul(&ratio)?)?
        } else {
            let ratio = g1.add(&d2)?.sub(&d1)?.div(&g1.sub(g2)?.add(&two_d2)?)?;
            x1.sub(&x1.sub(x2)?.mul(&ratio)?)?
        };
        py_min(&py_max(&min_pos, &lo)?, &hi)
    } else {
        lo.add(&hi)?.div(&Num::F(2.0))
    }
}

/// One point of the search: step, loss, gradient and directional
/// derivative.
#[derive(Debug)]
struct Point {
    t: Num,
    f: f64,
    g: Tensor,
    gtd: Num,
}

impl Clone for Point {
    fn clone(&self) -> Self {
        // As Python's lists: the same gradient tensor, never changed in place.
        Point { t: self.t.clone(), f: self.f, g: self.g.shallow_clone(), gtd: self.gtd.clone() }
    }
}

/// What the search found: the loss and gradient at the accepted step, the
/// step, and the number of evaluations it made.
pub(crate) struct Found {
    pub loss: f64,
    pub flat_grad: Tensor,
    pub t: Num,
    pub evals: i64,
}

/// `_strong_wolfe(obj_func, x, t, d, f, g, gtd, max_ls=max_ls)` with torch's
/// defaults `c1 = 1e-4`, `c2 = 0.9`, `tolerance_change = 1e-9`. `eval(t)`
/// returns the loss and flat gradient at `x + t * d` (leaving the
/// parameters at `x`).
pub(crate) fn strong_wolfe(
    eval: &mut dyn FnMut(&Num) -> Result<(f64, Tensor)>,
    t: Num,
    d: &Tensor,
    f: f64,
    g: &Tensor,
    gtd: &Num,
    max_ls: i64,
) -> Result<Found> {
    const C1: f64 = 1e-4;
    const C2: f64 = 0.9;
    const TOLERANCE_CHANGE: f64 = 1e-9;
    let d_norm = Num::T(d.f_abs()?.f_max()?);
    let g = deep_copy(g)?;
    let dot = |g: &Tensor| -> Result<Num> { Ok(Num::T(g.f_dot(d)?)) };
    // f + c1 * t * gtd, the sufficient-decrease bound at step t.
    let armijo = |t: &Num| -> Result<Num> { Num::F(f).add(&Num::F(C1).mul(t)?.mul(gtd)?) };
    // abs(gtd_new) <= -c2 * gtd, the curvature condition.
    let curvature = |gtd_new: &Num| -> Result<bool> { gtd_new.abs()?.cmp(Cmp::Le, &Num::F(-C2).mul(gtd)?) };
    let mut t = t;
    let (mut f_new, mut g_new) = eval(&t)?;
    let mut evals = 1;
    let mut gtd_new = dot(&g_new)?;
    let mut prev = Point { t: Num::F(0.0), f, g: g.shallow_clone(), gtd: gtd.clone() };
    let mut done = false;
    let mut ls_iter = 0;
    // The bracket: one point when the first conditions hold, else two.
    let mut bracket: Vec<Point> = Vec::new();
    while ls_iter < max_ls {
        if Num::F(f_new).cmp(Cmp::Gt, &armijo(&t)?)? || (ls_iter > 1 && f_new >= prev.f) {
            bracket = vec![prev.clone(), Point { t: t.clone(), f: f_new, g: deep_copy(&g_new)?, gtd: gtd_new.clone() }];
            break;
        }
        if curvature(&gtd_new)? {
            bracket = vec![Point { t: t.clone(), f: f_new, g: g_new.shallow_clone(), gtd: gtd_new.clone() }];
            done = true;
            break;
        }
        if gtd_new.cmp(Cmp::Ge, &Num::F(0.0))? {
            bracket = vec![prev.clone(), Point { t: t.clone(), f: f_new, g: deep_copy(&g_new)?, gtd: gtd_new.clone() }];
            break;
        }
        // Interpolate a longer step.
        let min_step = t.add(&Num::F(0.01).mul(&t.sub(&prev.t)?)?)?;
        let max_step = t.mul(&Num::F(10.0))?;
        let tmp = t.clone();
        t = cubic_interpolate(&prev.t, prev.f, &prev.gtd, &t, f_new, &gtd_new, Some((&min_step, &max_step)))?;
        prev = Point { t: tmp, f: f_new, g: deep_copy(&g_new)?, gtd: gtd_new.clone() };
        (f_new, g_new) = eval(&t)?;
        evals += 1;
        gtd_new = dot(&g_new)?;
        ls_iter += 1;
    }
    if ls_iter == max_ls {
        // torch leaves both slopes as they were: the zoom below does not
        // run (it needs ls_iter < max_ls), so they are never read.
        let first = Point { t: Num::F(0.0), f, g: g.shallow_clone(), gtd: gtd.clone() };
        bracket = vec![first, Point { t: t.clone(), f: f_new, g: g_new.shallow_clone(), gtd: gtd_new.clone() }];
    }
    if bracket.is_empty() {
        return Err(Error::state("strong-Wolfe line search: no step was tried (max_eval reached)"));
    }
    // Zoom: shrink the bracket until a point meets the conditions.
    let mut insuf_progress = false;
    let (mut low, mut high) = low_high(&bracket);
    while !done && ls_iter < max_ls {
        let (b0, b1) = (&bracket[0], &bracket[1]);
        if b1.t.sub(&b0.t)?.abs()?.mul(&d_norm)?.cmp(Cmp::Lt, &Num::F(TOLERANCE_CHANGE))? {
            break;
        }
        t = cubic_interpolate(&b0.t, b0.f, &b0.gtd, &b1.t, b1.f, &b1.gtd, None)?;
        // Too close to an end: move to 0.1 of the bracket from it.
        let top = py_max(&b0.t, &b1.t)?;
        let bottom = py_min(&b0.t, &b1.t)?;
        let eps = Num::F(0.1).mul(&top.sub(&bottom)?)?;
        if py_min(&top.sub(&t)?, &t.sub(&bottom)?)?.cmp(Cmp::Lt, &eps)? {
            if insuf_progress || t.cmp(Cmp::Ge, &top)? || t.cmp(Cmp::Le, &bottom)? {
                t = if t.sub(&top)?.abs()?.cmp(Cmp::Lt, &t.sub(&bottom)?.abs()?)? {
                    top.sub(&eps)?
                } else {
                    bottom.add(&eps)?
                };
                insuf_progress = false;
            } else {
                insuf_progress = true;
            }
        } else {
            insuf_progress = false;
        }
        (f_new, g_new) = eval(&t)?;
        evals += 1;
        gtd_new = dot(&g_new)?;
        ls_iter += 1;
        if Num::F(f_new).cmp(Cmp::Gt, &armijo(&t)?)? || f_new >= bracket[low].f {
            // Not enough decrease, or not below the lowest point.
            bracket[high] = Point { t: t.clone(), f: f_new, g: deep_copy(&g_new)?, gtd: gtd_new.clone() };
            (low, high) = low_high(&bracket);
        } else {
            if curvature(&gtd_new)? {
                done = true;
            } else if gtd_new.mul(&bracket[high].t.sub(&bracket[low].t)?)?.cmp(Cmp::Ge, &Num::F(0.0))? {
                // The old high becomes the new low.
                bracket[high] = bracket[low].clone();
            }
            bracket[low] = Point { t: t.clone(), f: f_new, g: deep_copy(&g_new)?, gtd: gtd_new.clone() };
        }
    }
    let best = &bracket[low];
    Ok(Found { loss: best.f, flat_grad: best.g.shallow_clone(), t: best.t.clone(), evals })
}

/// The positions of the lower and higher loss in a bracket (torch's
/// `(0, 1) if f[0] <= f[-1] else (1, 0)`; `(0, 1)` for one point).
fn low_high(bracket: &[Point]) -> (usize, usize) {
    match bracket {
        [a, .., b] if a.f > b.f => (1, 0),
        [_, _, ..] => (0, 1),
        _ => (0, 1),
    }
}

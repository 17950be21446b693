//! torch.optim's foreach updates of Adam's variants: `_multi_tensor_adamax`,
//! `_multi_tensor_nadam` and `_multi_tensor_radam` through
//! `csrc/foreach_adam_variants.cpp`. torch's Adamax foreach update equals
//! its for-loop one on the CPU; NAdam's and RAdam's order their operations
//! differently (NAdam divides the square root by the bias correction's,
//! RAdam folds the step into a reciprocal), so their results differ from
//! the for-loop updates' in the last bits, as torch's do.
use super::adamax::AdamaxOptions;
use super::fused::{buffer_buckets, count_steps, grad_rows, next_steps, ptrs};
use super::nadam::NAdamOptions;
use super::py_num::py_pow;
use super::radam::RAdamOptions;
use super::state::{Core, GroupOptions, ParamState};
use crate::error::Result;
use crate::shim::{self, call};

/// torch's `_multi_tensor_adamax` over every group, not capturable; the
/// steps count once their call succeeded.
pub(crate) fn adamax_step(core: &mut Core, defaults: &AdamaxOptions) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let (beta1, beta2) = o.betas;
        let buckets = buffer_buckets(&mut core.state, rows, &["exp_avg", "exp_inf"])?;
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            // torch: `(lr / (1 - beta1 ** step)) * -1`.
            let step_sizes: Vec<f64> =
                next_steps(&core.state, ids).iter().map(|&t| -(o.lr / (1.0 - beta1.powf(t)))).collect();
            let [params, grads, exp_avgs, exp_infs] = [0, 1, 2, 3].map(|j| ptrs(&lists[j]));
            // SAFETY: every list holds `n` live tensors and `step_sizes` `n`
            // numbers for the call's length.
            call("foreach Adamax update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_adamax(
                    params.as_ptr(),
                    grads.as_ptr(),
                    exp_avgs.as_ptr(),
                    exp_infs.as_ptr(),
                    step_sizes.as_ptr(),
                    n,
                    beta1,
                    beta2,
                    o.weight_decay,
                    o.eps,
                    o.maximize,
                    err,
                    len,
                )
            })?;
            count_steps(&mut core.state, ids);
        }
    }
    Ok(())
}

/// NAdam's momentum coefficient `mu` at step `t`, as torch computes it.
pub(super) fn nadam_mu(beta1: f64, momentum_decay: f64, t: f64) -> f64 {
    beta1 * (1.0 - 0.5 * 0.96f64.powf(t * momentum_decay))
}

/// torch's `mu_product *= mu` on its float32 0-dim tensor.
pub(super) fn nadam_mu_product(mu_product: f64, mu: f64) -> f64 {
    f64::from((mu_product as f32) * (mu as f32))
}

/// torch's `_multi_tensor_nadam` over every group, not capturable: the
/// momentum products are computed here as torch's float32 tensors hold
/// them, and join the state with the step counts once their call
/// succeeded.
pub(crate) fn nadam_step(core: &mut Core, defaults: &NAdamOptions) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let (beta1, beta2) = o.betas;
        let buckets = buffer_buckets(&mut core.state, rows, &["exp_avg", "exp_avg_sq"])?;
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let steps = next_steps(&core.state, ids);
            let mut bias_correction2_sqrts = Vec::with_capacity(n);
            let mut grad_step_sizes = Vec::with_capacity(n);
            let mut exp_avg_step_sizes = Vec::with_capacity(n);
            let mut mu_products = Vec::with_capacity(n);
            for (&i, &t) in ids.iter().zip(&steps) {
                let before = core.state[i].as_ref().and_then(|st| st.scalars.get("mu_product").copied());
                let mu = nadam_mu(beta1, o.momentum_decay, t);
                let mu_next = nadam_mu(beta1, o.momentum_decay, t + 1.0);
                let mu_product = nadam_mu_product(before.unwrap_or(1.0), mu);
                bias_correction2_sqrts.push(py_pow(1.0 - beta2.powf(t), 0.5));
                grad_step_sizes.push(-(o.lr * (1.0 - mu) / (1.0 - mu_product)));
                exp_avg_step_sizes.push(-(o.lr * mu_next / (1.0 - mu_product * mu_next)));
                mu_products.push(mu_product);
            }
            let [params, grads, exp_avgs, exp_avg_sqs] = [0, 1, 2, 3].map(|j| ptrs(&lists[j]));
            // SAFETY: every list holds `n` live tensors and the three number
            // lists `n` numbers for the call's length.
            call("foreach NAdam update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_nadam(
                    params.as_ptr(),
                    grads.as_ptr(),
                    exp_avgs.as_ptr(),
                    exp_avg_sqs.as_ptr(),
                    bias_correction2_sqrts.as_ptr(),
                    grad_step_sizes.as_ptr(),
                    exp_avg_step_sizes.as_ptr(),
                    n,
                    o.lr,
                    beta1,
                    beta2,
                    o.weight_decay,
                    o.eps,
                    o.decoupled_weight_decay,
                    o.maximize,
                    err,
                    len,
                )
            })?;
            for (&i, mu_product) in ids.iter().zip(mu_products) {
                let st = core.state[i].get_or_insert_with(ParamState::default);
                st.scalars.insert("mu_product", mu_product);
            }
            count_steps(&mut core.state, ids);
        }
    }
    Ok(())
}

/// RAdam's scalars of one parameter at step `t`, as torch's non-capturable
/// `_multi_tensor_radam` computes them in Python floats:
/// `(bias_correction2, unrect_step_size)`.
pub(super) fn radam_scalars(lr: f64, beta1: f64, beta2: f64, t: f64) -> (f64, f64) {
    let rho_inf = 2.0 / (1.0 - beta2) - 1.0;
    let rho_t = rho_inf - 2.0 * t * beta2.powf(t) / (1.0 - beta2.powf(t));
    let rect = if rho_t > 5.0 {
        py_pow((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t), 0.5)
    } else {
        0.0
    };
    let unrectified = if rect > 0.0 { 0.0 } else { 1.0 };
    let bias_correction1 = 1.0 - beta1.powf(t);
    // torch's `* -1`, an exact negation (-0.0 when the product is 0).
    let unrect_step_size = -(lr * unrectified / bias_correction1);
    let bias_correction2 = -(py_pow(1.0 - beta2.powf(t), 0.5) * (lr * rect / bias_correction1));
    (bias_correction2, unrect_step_size)
}

/// torch's `_multi_tensor_radam` over every group, not capturable; the
/// steps count once their call succeeded.
pub(crate) fn radam_step(core: &mut Core, defaults: &RAdamOptions) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let (beta1, beta2) = o.betas;
        let buckets = buffer_buckets(&mut core.state, rows, &["exp_avg", "exp_avg_sq"])?;
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let (bias_correction2s, unrect_step_sizes): (Vec<f64>, Vec<f64>) =
                next_steps(&core.state, ids).iter().map(|&t| radam_scalars(o.lr, beta1, beta2, t)).unzip();
            let [params, grads, exp_avgs, exp_avg_sqs] = [0, 1, 2, 3].map(|j| ptrs(&lists[j]));
            // SAFETY: every list holds `n` live tensors and both number
            // lists `n` numbers for the call's length.
            call("foreach RAdam update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_radam(
                    params.as_ptr(),
                    grads.as_ptr(),
                    exp_avgs.as_ptr(),
                    exp_avg_sqs.as_ptr(),
                    bias_correction2s.as_ptr(),
                    unrect_step_sizes.as_ptr(),
                    n,
                    o.lr,
                    beta1,
                    beta2,
                    o.weight_decay,
                    o.eps,
                    o.decoupled_weight_decay,
                    o.maximize,
                    err,
                    len,
                )
            })?;
            count_steps(&mut core.state, ids);
        }
    }
    Ok(())
}

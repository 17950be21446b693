//! torch.optim's foreach updates (`foreach=True`, and torch's default when
//! every parameter is on CUDA): `_multi_tensor_sgd`, `_multi_tensor_adam`,
//! `_multi_tensor_adagrad` and `_multi_tensor_rmsprop` through
//! `csrc/foreach.cpp` (Adamax, NAdam and RAdam: `foreach_adam_variants.rs`), a few libtorch `_foreach_*` kernels per
//! param group, device and dtype where the for-loop updates launch several
//! per parameter. On the CPU libtorch runs them tensor by tensor, so the
//! results equal the for-loop updates'; on CUDA they are torch's foreach
//! results.
use super::adagrad::AdagradOptions;
use super::adam::AdamOptions;
use super::fused::{
    adagrad_sum, adam_buffer_names, buffer_buckets, count_steps, grad_rows, keep_sums, next_steps, ptrs, Buckets,
};
use super::py_num::py_pow;
use super::rmsprop::RmsPropOptions;
use super::sgd::SgdOptions;
use super::state::{Core, GroupOptions, ParamState};
use crate::error::{Error, Result};
use crate::shim::{self, call};
use libc::c_void;
use tch::{Device, Tensor};

/// Whether optimizer `kind` has foreach updates.
pub(crate) fn has_foreach(kind: &str) -> bool {
    matches!(kind, "sgd" | "adam" | "adamw" | "adagrad" | "rmsprop" | "adamax" | "nadam" | "radam")
}

/// torch's refusal of `fused=True` with `foreach=True`.
pub(crate) fn both_on(kind: &str) -> Error {
    Error::invalid(format!("{kind}: fused and foreach updates cannot both be on (torch refuses them together too)"))
}

/// `Optimizer::set_foreach` of the kinds with foreach updates.
pub(crate) fn set_foreach(core: &mut Core, kind: &str, foreach: Option<bool>) -> Result<()> {
    if foreach == Some(true) && core.fused {
        return Err(both_on(kind));
    }
    core.foreach = foreach;
    Ok(())
}

/// Whether a step runs the foreach updates: as chosen, else torch's
/// default (every parameter on CUDA).
pub(crate) fn uses_foreach(core: &Core) -> bool {
    core.foreach
        .unwrap_or_else(|| core.groups.iter().flat_map(|g| &g.params).all(|p| matches!(p.device(), Device::Cuda(_))))
}

/// torch's `_multi_tensor_sgd` over every group. Parameters without a
/// momentum buffer get the kernel's clone of their gradient once their
/// call succeeded.
pub(crate) fn sgd_step(core: &mut Core, defaults: &SgdOptions) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let mut buckets = Buckets::default();
        for (i, p, grad) in rows {
            buckets.push(i, vec![p, grad]);
        }
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let (params, grads) = (ptrs(&lists[0]), ptrs(&lists[1]));
            let buffers: Vec<*mut c_void> = ids
                .iter()
                .map(|&i| {
                    let buffer = core.state[i].as_ref().and_then(|st| st.buffers.get("momentum_buffer"));
                    buffer.map_or(std::ptr::null_mut(), |b| b.as_ptr() as *mut c_void)
                })
                .collect();
            let buffers_ptr = if g.momentum != 0.0 { buffers.as_ptr() } else { std::ptr::null() };
            let mut created = vec![std::ptr::null_mut::<c_void>(); n];
            // SAFETY: every list holds `n` live tensors (or NULLs where a
            // buffer is missing) for the call's length; `created` has `n`
            // slots the shim fills only on success.
            call("foreach SGD update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_sgd(
                    params.as_ptr(),
                    grads.as_ptr(),
                    buffers_ptr,
                    created.as_mut_ptr(),
                    n,
                    g.weight_decay,
                    g.momentum,
                    g.lr,
                    o.dampening,
                    o.nesterov,
                    o.maximize,
                    err,
                    len,
                )
            })?;
            for (&i, b) in ids.iter().zip(created) {
                if !b.is_null() {
                    // SAFETY: a heap `at::Tensor*` the shim handed over.
                    let b = unsafe { Tensor::from_ptr(b.cast()) };
                    core.state[i].get_or_insert_with(ParamState::default).buffers.insert("momentum_buffer", b);
                }
            }
        }
    }
    Ok(())
}

/// torch's `_multi_tensor_adam` (`decoupled`: AdamW) over every group, not
/// capturable: the bias corrections are computed per parameter from its
/// step as torch computes them in Python floats. The steps count once
/// their call succeeded.
pub(crate) fn adam_step(core: &mut Core, defaults: &AdamOptions, decoupled: bool) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let (beta1, beta2) = (g.momentum, o.betas.1);
        let buckets = buffer_buckets(&mut core.state, rows, adam_buffer_names(o.amsgrad))?;
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let steps = next_steps(&core.state, ids);
            // torch: `(lr / bc) * -1`, the same number negated.
            let step_sizes: Vec<f64> = steps.iter().map(|&t| -(g.lr / (1.0 - beta1.powf(t)))).collect();
            let bias_correction2_sqrts: Vec<f64> = steps.iter().map(|&t| py_pow(1.0 - beta2.powf(t), 0.5)).collect();
            let [params, grads, exp_avgs, exp_avg_sqs] = [0, 1, 2, 3].map(|j| ptrs(&lists[j]));
            let max = lists.get(4).map(|l| ptrs(l));
            let max_ptr = max.as_ref().map_or(std::ptr::null(), |m| m.as_ptr());
            // SAFETY: every list holds `n` live tensors and both scalar
            // lists `n` numbers for the call's length.
            call("foreach Adam update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_adam(
                    params.as_ptr(),
                    grads.as_ptr(),
                    exp_avgs.as_ptr(),
                    exp_avg_sqs.as_ptr(),
                    max_ptr,
                    step_sizes.as_ptr(),
                    bias_correction2_sqrts.as_ptr(),
                    n,
                    g.lr,
                    beta1,
                    beta2,
                    g.weight_decay,
                    o.eps,
                    o.maximize,
                    decoupled,
                    err,
                    len,
                )
            })?;
            count_steps(&mut core.state, ids);
        }
    }
    Ok(())
}

/// torch's `_multi_tensor_adagrad` over every group (dense gradients). A
/// parameter's sum starts at `initial_accumulator_value` on its first step
/// with a gradient, as in the for-loop update, and joins the state with
/// its step count once its call succeeded.
pub(crate) fn adagrad_step(core: &mut Core, defaults: &AdagradOptions) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let mut buckets = Buckets::default();
        for (i, p, grad) in rows {
            let sum = adagrad_sum(&core.state, i, &p, o.initial_accumulator_value)?;
            buckets.push(i, vec![p, grad, sum]);
        }
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let minus_clrs: Vec<f64> =
                next_steps(&core.state, ids).iter().map(|&t| -g.lr / (1.0 + (t - 1.0) * o.lr_decay)).collect();
            let [params, grads, sums] = [0, 1, 2].map(|j| ptrs(&lists[j]));
            // SAFETY: every list holds `n` live tensors and `minus_clrs` `n`
            // numbers for the call's length.
            call("foreach Adagrad update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_adagrad(
                    params.as_ptr(),
                    grads.as_ptr(),
                    sums.as_ptr(),
                    minus_clrs.as_ptr(),
                    n,
                    g.weight_decay,
                    o.eps,
                    o.maximize,
                    err,
                    len,
                )
            })?;
            keep_sums(&mut core.state, ids, &lists[2]);
            count_steps(&mut core.state, ids);
        }
    }
    Ok(())
}

/// torch's `_multi_tensor_rmsprop` over every group; the steps count once
/// their call succeeded.
pub(crate) fn rmsprop_step(core: &mut Core, defaults: &RmsPropOptions) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let groups = grad_rows(core);
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let with_momentum = g.momentum > 0.0;
        let names: Vec<&'static str> = std::iter::once("square_avg")
            .chain(o.centered.then_some("grad_avg"))
            .chain(with_momentum.then_some("momentum_buffer"))
            .collect();
        let buckets = buffer_buckets(&mut core.state, rows, &names)?;
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let [params, grads, square_avgs] = [0, 1, 2].map(|j| ptrs(&lists[j]));
            let grad_avgs = o.centered.then(|| ptrs(&lists[3]));
            let momentum_buffers = with_momentum.then(|| ptrs(&lists[lists.len() - 1]));
            let ptr_of = |l: &Option<Vec<*mut c_void>>| l.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
            // SAFETY: every list holds `n` live tensors for the call's length.
            call("foreach RMSprop update", |err, len| unsafe {
                shim::fulmen_cxx_foreach_rmsprop(
                    params.as_ptr(),
                    grads.as_ptr(),
                    square_avgs.as_ptr(),
                    ptr_of(&grad_avgs),
                    ptr_of(&momentum_buffers),
                    n,
                    g.lr,
                    o.alpha,
                    o.eps,
                    g.weight_decay,
                    g.momentum,
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

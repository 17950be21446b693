//! torch.optim's fused updates (`fused=True`: `_fused_adam`,
//! `_fused_adamw`, `_fused_sgd`, `_fused_adagrad`): one libtorch kernel per parameter group,
//! device and dtype over all its parameters, where the for-loop updates
//! launch several per parameter. They give torch's fused results, which
//! differ from the for-loop updates in the last bits (torch's do too).
use super::adagrad::AdagradOptions;
use super::adam::AdamOptions;
use super::sgd::SgdOptions;
use super::state::{Core, DeviceStep, GroupOptions, ParamState};
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use crate::tensor::device::DeviceType;
use libc::c_void;
use tch::{Device, Kind, Tensor};

/// The tensors of one kernel call, list by list, for one device and dtype
/// (torch's `_group_tensors_by_device_and_dtype`), with the state index of
/// each row's parameter.
#[derive(Default)]
pub(super) struct Buckets {
    keys: Vec<(Device, Kind)>,
    /// Per bucket, the lists (parameters first), each one tensor per row.
    pub lists: Vec<Vec<Vec<Tensor>>>,
    /// Per bucket, the state index of each row's parameter.
    pub ids: Vec<Vec<usize>>,
}

impl Buckets {
    /// Adds the row of tensors of the parameter at state index `id` (the
    /// parameter first).
    pub fn push(&mut self, id: usize, row: Vec<Tensor>) {
        let key = (row[0].device(), row[0].kind());
        let b = match self.keys.iter().position(|k| *k == key) {
            Some(b) => b,
            None => {
                self.keys.push(key);
                self.lists.push((0..row.len()).map(|_| Vec::new()).collect());
                self.ids.push(Vec::new());
                self.keys.len() - 1
            }
        };
        self.ids[b].push(id);
        for (list, t) in self.lists[b].iter_mut().zip(row) {
            list.push(t);
        }
    }
}

/// The `at::Tensor*` of each tensor of `list`, as the shim takes them.
pub(super) fn ptrs(list: &[Tensor]) -> Vec<*mut c_void> {
    list.iter().map(|t| t.as_ptr() as *mut c_void).collect()
}

/// Adam's state buffers: `exp_avg`, `exp_avg_sq`, and `max_exp_avg_sq`
/// with `amsgrad` (the fused and foreach updates' lists after the
/// parameter and gradient).
pub(super) fn adam_buffer_names(amsgrad: bool) -> &'static [&'static str] {
    if amsgrad {
        &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
    } else {
        &["exp_avg", "exp_avg_sq"]
    }
}

/// The state buffers `names` of a parameter, created as zeros when missing.
pub(super) fn buffers(st: &mut ParamState, p: &Tensor, names: &[&'static str]) -> Result<Vec<Tensor>> {
    names.iter().map(|n| Ok(st.buffer_or_zeros(n, p)?.shallow_clone())).collect()
}

/// One group's rows (each parameter with a gradient, its gradient, then
/// its state buffers `names`, created as zeros when missing), bucketed by
/// device and dtype.
pub(super) fn buffer_buckets(
    state: &mut [Option<ParamState>],
    rows: Vec<(usize, Tensor, Tensor)>,
    names: &[&'static str],
) -> Result<Buckets> {
    let mut buckets = Buckets::default();
    for (i, p, grad) in rows {
        let st = state[i].get_or_insert_with(ParamState::default);
        let row = buffers(st, &p, names)?;
        buckets.push(i, [p, grad].into_iter().chain(row).collect());
    }
    Ok(buckets)
}

/// The step each parameter at state index `ids` takes now (its count + 1).
pub(super) fn next_steps(state: &[Option<ParamState>], ids: &[usize]) -> Vec<f64> {
    ids.iter().map(|&i| state[i].as_ref().map_or(0.0, |st| st.step) + 1.0).collect()
}

/// Adagrad's sum of the parameter at state index `i`: its state's, or a
/// new one at `initial` (kept by [`keep_sums`] once its update succeeded).
pub(super) fn adagrad_sum(state: &[Option<ParamState>], i: usize, p: &Tensor, initial: f64) -> Result<Tensor> {
    match state[i].as_ref().and_then(|st| st.buffers.get("sum")) {
        Some(s) => Ok(s.shallow_clone()),
        None => Ok(p.f_full_like(initial)?),
    }
}

/// Puts the sums of a successful Adagrad update into the state of the
/// parameters at `ids` that had none.
pub(super) fn keep_sums(state: &mut [Option<ParamState>], ids: &[usize], sums: &[Tensor]) {
    for (&i, sum) in ids.iter().zip(sums) {
        let st = state[i].get_or_insert_with(ParamState::default);
        st.buffers.entry("sum").or_insert_with(|| sum.shallow_clone());
    }
}

/// Counts one step of each parameter at state index `ids` (after its
/// kernel call succeeded).
pub(super) fn count_steps(state: &mut [Option<ParamState>], ids: &[usize]) {
    for &i in ids {
        if let Some(st) = state[i].as_mut() {
            st.step += 1.0;
        }
    }
}

/// The step count of the parameter at state index `i` as the fused
/// kernels take it: a float32 tensor on the parameter's device holding the
/// steps done, which the shim adds 1 to before the kernel, as torch's
/// `_foreach_add_(device_state_steps, 1)`. The tensor kept from the last
/// successful call ([`keep_device_steps`]) is taken out of the state and
/// reused while it holds the state's count on the parameter's device (no
/// new tensor nor host-to-device copy per parameter and step); a new one
/// is made otherwise. A failed call drops what it took, except a count the
/// device alone knows ([`DeviceStep::exact`] false), which stays.
pub(super) fn take_device_step(state: &mut [Option<ParamState>], i: usize, p: &Tensor) -> Result<Tensor> {
    let (count, kept) = match state[i].as_mut() {
        Some(st) => {
            let kept = st.device_step.take();
            if let Some(d) = kept.as_ref().filter(|d| !d.exact) {
                st.device_step = Some(DeviceStep { tensor: d.tensor.shallow_clone(), count: d.count, exact: false });
            }
            (st.step, kept)
        }
        None => (0.0, None),
    };
    match kept {
        Some(d) if (d.count == count || !d.exact) && same_device(&d.tensor, p)? => Ok(d.tensor),
        // A count known on the device only moves with its parameter.
        Some(d) if !d.exact => Ok(crate::tensor::device::to_device_of(&d.tensor, p)?),
        _ => crate::tensor::device::scalar_on_device_of(count, Kind::Float, p),
    }
}

/// Whether two tensors are on one device (tch cannot tell vendors' devices
/// apart: libtorch is asked).
fn same_device(a: &Tensor, b: &Tensor) -> Result<bool> {
    use crate::tensor::device::Device as On;
    Ok(On::of(a)? == On::of(b)?)
}

/// Keeps the step tensors of a successful fused call in the state of the
/// parameters at `ids`, with their counts (after [`count_steps`]); `exact`
/// is false when a loss scaler's device finding may have skipped the step
/// (the tensors hold the true counts).
pub(super) fn keep_device_steps(state: &mut [Option<ParamState>], ids: &[usize], steps: &[Tensor], exact: bool) {
    for (&i, t) in ids.iter().zip(steps) {
        if let Some(st) = state[i].as_mut() {
            st.device_step = Some(DeviceStep { tensor: t.shallow_clone(), count: st.step, exact });
        }
    }
}

/// The refusal of a loss scaler's device finding by an optimizer whose
/// fused updates are off.
pub(crate) fn unscaled_kind(kind: &str) -> Error {
    Error::new(
        ErrorCode::Unsupported,
        format!("{kind} without fused updates cannot take a loss scaler's finding on the device: turn them on (fused)"),
    )
}

/// A step that counts on the host (no loss scaler's finding) first reads
/// back the counts earlier scaled steps left on the device.
fn settle_unless_scaled(core: &mut Core, found_inf: Option<&Tensor>) -> Result<()> {
    if found_inf.is_none() {
        core.settle_steps()?;
    }
    Ok(())
}

/// The `at::Tensor*` of a loss scaler's finding, or NULL.
fn found_inf_ptr(found_inf: Option<&Tensor>) -> *const c_void {
    found_inf.map_or(std::ptr::null(), |t| t.as_ptr() as *const c_void)
}

/// What torch's `_device_dtype_check_for_fused` checks: floating
/// parameters on a device of `_get_fused_kernels_supported_devices` (CPU,
/// CUDA, MPS, XPU, HPU, MTIA and the PrivateUse1 backend, whose own
/// kernels or fallback run the update).
pub(crate) fn check_fusable(kind: &str, params: &[Tensor]) -> Result<()> {
    for p in params {
        let floating = matches!(p.kind(), Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double);
        // tch reads devices it does not name (XLA's) as MPS: ask libtorch.
        let on = crate::tensor::device::Device::of(p)?;
        let device = matches!(
            on.kind(),
            DeviceType::Cpu
                | DeviceType::Cuda
                | DeviceType::Mps
                | DeviceType::Xpu
                | DeviceType::Hpu
                | DeviceType::Mtia
                | DeviceType::PrivateUse1
        );
        if !floating || !device {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "{kind} with fused updates needs floating parameters on the CPU, CUDA, MPS, XPU, HPU, MTIA or a \
                     PrivateUse1 device, got {:?} on {}",
                    p.kind(),
                    on.name()
                ),
            ));
        }
    }
    Ok(())
}

/// `Optimizer::set_fused` of the kinds with fused updates: turning them on
/// checks every parameter first.
pub(crate) fn set_fused(core: &mut Core, kind: &str, fused: bool) -> Result<()> {
    if fused {
        if core.foreach == Some(true) {
            return Err(super::foreach::both_on(kind));
        }
        check_groups(kind, core)?;
    }
    core.fused = fused;
    Ok(())
}

/// Checks every group before any is updated (a state loaded with `fused`
/// set was not checked against the parameters).
fn check_groups(kind: &str, core: &Core) -> Result<()> {
    core.groups.iter().try_for_each(|g| check_fusable(kind, &g.params))
}

/// Checks the groups, then lists each group's parameters that have a
/// gradient ([`grad_rows`]).
fn rows_with_grads(kind: &str, core: &mut Core) -> Result<Vec<Vec<(usize, Tensor, Tensor)>>> {
    check_groups(kind, core)?;
    Ok(grad_rows(core))
}

/// Each group's parameters that have a gradient, with their state index
/// and gradient (the walk of `Core::for_each_grad`, without the
/// per-parameter update).
pub(super) fn grad_rows(core: &mut Core) -> Vec<Vec<(usize, Tensor, Tensor)>> {
    core.sync_state_len();
    let mut index = 0;
    let mut out = Vec::with_capacity(core.groups.len());
    for g in &core.groups {
        let mut rows = Vec::new();
        for p in &g.params {
            let grad = p.grad();
            if grad.defined() {
                rows.push((index, p.shallow_clone(), grad));
            }
            index += 1;
        }
        out.push(rows);
    }
    out
}

/// torch's `_fused_adam` (`decoupled`: `_fused_adamw`) over every group;
/// with `found_inf` (a loss scaler's finding on the device, torch's
/// `optimizer.found_inf`) the kernels skip the update on the device when it
/// holds 1, and take back the step counts there.
pub(crate) fn adam_step(
    core: &mut Core,
    defaults: &AdamOptions,
    decoupled: bool,
    found_inf: Option<&Tensor>,
) -> Result<()> {
    settle_unless_scaled(core, found_inf)?;
    let kind = if decoupled { "adamw" } else { "adam" };
    let _guard = tch::no_grad_guard();
    let groups = rows_with_grads(kind, core)?;
    for (gi, (g, rows)) in core.groups.iter().zip(groups).enumerate() {
        let o = defaults.of_group(g);
        let lr_tensor = super::graphed::lr_tensor_ptr(&core.device_lrs, gi);
        let mut buckets = Buckets::default();
        for (i, p, grad) in rows {
            let st = core.state[i].get_or_insert_with(ParamState::default);
            let buffers = buffers(st, &p, adam_buffer_names(o.amsgrad))?;
            // The step counts in the state once the kernel succeeded.
            let step = take_device_step(&mut core.state, i, &p)?;
            let [exp_avg, exp_avg_sq] = [&buffers[0], &buffers[1]].map(Tensor::shallow_clone);
            let max = buffers.get(2).map(Tensor::shallow_clone);
            buckets.push(i, [p, grad, exp_avg, exp_avg_sq, step].into_iter().chain(max).collect());
        }
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let [params, grads, exp_avgs, exp_avg_sqs, steps] = [0, 1, 2, 3, 4].map(|j| ptrs(&lists[j]));
            let max = lists.get(5).map(|l| ptrs(l));
            let max_ptr = max.as_ref().map_or(std::ptr::null(), |m| m.as_ptr());
            // SAFETY: every list holds `n` live tensors for the call's length.
            call("fused Adam update", |err, len| unsafe {
                shim::fulmen_cxx_fused_adam(
                    params.as_ptr(),
                    grads.as_ptr(),
                    exp_avgs.as_ptr(),
                    exp_avg_sqs.as_ptr(),
                    max_ptr,
                    steps.as_ptr(),
                    n,
                    g.lr,
                    lr_tensor,
                    g.momentum,
                    o.betas.1,
                    g.weight_decay,
                    o.eps,
                    o.amsgrad,
                    o.maximize,
                    decoupled,
                    found_inf_ptr(found_inf),
                    err,
                    len,
                )
            })?;
            count_steps(&mut core.state, ids);
            keep_device_steps(&mut core.state, ids, &lists[4], found_inf.is_none());
            core.unsettled_steps |= found_inf.is_some();
        }
    }
    Ok(())
}

/// torch's `_fused_sgd` over every group; `found_inf` as
/// [`adam_step`]'s. A first step with momentum skipped by it leaves zeroed
/// momentum buffers (torch's leaves them uninitialised).
pub(crate) fn sgd_step(core: &mut Core, defaults: &SgdOptions, found_inf: Option<&Tensor>) -> Result<()> {
    settle_unless_scaled(core, found_inf)?;
    let _guard = tch::no_grad_guard();
    let groups = rows_with_grads("sgd", core)?;
    for (gi, (g, rows)) in core.groups.iter().zip(groups).enumerate() {
        let o = defaults.of_group(g);
        let lr_tensor = super::graphed::lr_tensor_ptr(&core.device_lrs, gi);
        let with_momentum = g.momentum != 0.0;
        let has_buffer = |i: usize| core.state[i].as_ref().is_some_and(|st| st.buffers.contains_key("momentum_buffer"));
        // torch: the first step (no buffer yet) lets the kernel fill the buffers.
        let first = with_momentum && rows.iter().all(|(i, _, _)| !has_buffer(*i));
        if with_momentum && !first && rows.iter().any(|(i, _, _)| !has_buffer(*i)) {
            return Err(Error::state(
                "fused SGD: some parameters of a group have a momentum buffer and others not (torch's fused \
                 update cannot step them together)",
            ));
        }
        let mut buckets = Buckets::default();
        // On the first step the kernel fills new buffers, which join the
        // state only once it succeeded.
        let mut new_buffers = Vec::new();
        for (i, p, grad) in rows {
            let mut row = vec![p, grad];
            if with_momentum {
                let buffer = match core.state[i].as_ref() {
                    Some(st) if !first => st.buffers["momentum_buffer"].shallow_clone(),
                    _ => {
                        let b = if found_inf.is_some() { row[1].f_zeros_like()? } else { row[1].f_empty_like()? };
                        new_buffers.push((i, b.shallow_clone()));
                        b
                    }
                };
                row.push(buffer);
            }
            buckets.push(i, row);
        }
        for lists in &buckets.lists {
            let n = lists[0].len();
            let (params, grads) = (ptrs(&lists[0]), ptrs(&lists[1]));
            let buffers = lists.get(2).map(|l| ptrs(l));
            let buffers_ptr = buffers.as_ref().map_or(std::ptr::null(), |b| b.as_ptr());
            // SAFETY: every list holds `n` live tensors for the call's length.
            call("fused SGD update", |err, len| unsafe {
                shim::fulmen_cxx_fused_sgd(
                    params.as_ptr(),
                    grads.as_ptr(),
                    buffers_ptr,
                    n,
                    g.weight_decay,
                    g.momentum,
                    g.lr,
                    lr_tensor,
                    o.dampening,
                    o.nesterov,
                    o.maximize,
                    first,
                    found_inf_ptr(found_inf),
                    err,
                    len,
                )
            })?;
        }
        for (i, b) in new_buffers {
            core.state[i].get_or_insert_with(ParamState::default).buffers.insert("momentum_buffer", b);
        }
    }
    Ok(())
}

/// torch's `_fused_adagrad` over every group. A parameter's sum starts at
/// `initial_accumulator_value` on its first step with a gradient, as in
/// the for-loop update; each kernel call's parameters get their new sums
/// and step counts once that call succeeded, so a failed call leaves the
/// state of the parameters it did not update as it was.
/// `found_inf` as [`adam_step`]'s.
pub(crate) fn adagrad_step(core: &mut Core, defaults: &AdagradOptions, found_inf: Option<&Tensor>) -> Result<()> {
    settle_unless_scaled(core, found_inf)?;
    let _guard = tch::no_grad_guard();
    let groups = rows_with_grads("adagrad", core)?;
    for (g, rows) in core.groups.iter().zip(groups) {
        let o = defaults.of_group(g);
        let mut buckets = Buckets::default();
        for (i, p, grad) in rows {
            let sum = adagrad_sum(&core.state, i, &p, o.initial_accumulator_value)?;
            let step = take_device_step(&mut core.state, i, &p)?;
            buckets.push(i, vec![p, grad, sum, step]);
        }
        for (lists, ids) in buckets.lists.iter().zip(&buckets.ids) {
            let n = lists[0].len();
            let [params, grads, sums, steps] = [0, 1, 2, 3].map(|j| ptrs(&lists[j]));
            // SAFETY: every list holds `n` live tensors for the call's length.
            call("fused Adagrad update", |err, len| unsafe {
                shim::fulmen_cxx_fused_adagrad(
                    params.as_ptr(),
                    grads.as_ptr(),
                    sums.as_ptr(),
                    steps.as_ptr(),
                    n,
                    g.lr,
                    o.lr_decay,
                    g.weight_decay,
                    o.eps,
                    o.maximize,
                    found_inf_ptr(found_inf),
                    err,
                    len,
                )
            })?;
            keep_sums(&mut core.state, ids, &lists[2]);
            count_steps(&mut core.state, ids);
            keep_device_steps(&mut core.state, ids, &lists[3], found_inf.is_none());
            core.unsettled_steps |= found_inf.is_some();
        }
    }
    Ok(())
}

//! The optimizer side of graphed training steps (the trainer's
//! `cuda_graphs`): a captured step replays its update kernels with the
//! arguments of its capture, so what changes from step to step must live
//! on the device. torch's fused updates keep their step counts there; the
//! learning rate goes there too (torch's tensor `lr`, float32), written by
//! the host before a step when a scheduler changed it. Replays do the
//! device's part of a step; [`Core::graph_replayed`] does the host's.
use super::state::Core;
use crate::error::{Error, ErrorCode, Result};
use libc::c_void;
use tch::{Kind, Tensor};

/// A group's learning rate on its parameters' device, with the value it
/// holds.
#[derive(Debug)]
pub(crate) struct DeviceLr {
    value: f64,
    tensor: Tensor,
}

/// The optimizer kinds whose step a device graph can capture.
const CAPTURABLE: &[&str] = &["sgd", "adam", "adamw"];

/// An optimizer's steps inside device graphs (see the module doc); the
/// trainer calls [`GraphedUpdates::prepare`] before every step of a
/// graphed run, and [`GraphedUpdates::replayed`] after each replay.
pub trait GraphedUpdates {
    /// Whether a device graph can capture a step: torch's fused SGD, Adam
    /// and AdamW (one kernel per group, step counts and learning rate read
    /// on the device); `Unsupported` says why not.
    fn support(&self) -> Result<()>;
    /// Writes each group's learning rate into its device tensor (made on
    /// the first call) where the host's value changed. From the first call
    /// on, the fused updates read the rate there.
    fn prepare(&mut self) -> Result<()>;
    /// Each parameter's step count (0 before its first step), to find
    /// which ones a captured step counted.
    fn step_counts(&self) -> Vec<f64>;
    /// The addresses of the device tensors a captured update reads and
    /// writes besides the parameters and gradients (state buffers, step
    /// counts, learning rates), in a fixed order: a replay after one was
    /// replaced would write freed memory.
    fn state_addresses(&self) -> Vec<usize>;
    /// The host's part of a replayed step: the step counts of the
    /// parameters at `counted` (those its capture counted) go up by one,
    /// as the device's copies did.
    fn replayed(&mut self, counted: &[usize]);
    /// Puts the step counts back to `counts` (from
    /// [`GraphedUpdates::step_counts`]) after a capture that failed: it
    /// counted on the host what never ran on the device, whose copies of
    /// the counts (kept, so that captured graphs still find them) hold the
    /// counts of before.
    fn restore_step_counts(&mut self, counts: &[f64]);
    /// Back to learning rates passed by value (the graphs are gone).
    fn end(&mut self);
}

/// [`GraphedUpdates`] of an optimizer built on [`Core`], of kind `kind`.
pub(crate) struct CoreGraph<'a> {
    pub core: &'a mut Core,
    pub kind: &'static str,
}

impl GraphedUpdates for CoreGraph<'_> {
    fn support(&self) -> Result<()> {
        let kind = self.kind;
        if self.core.fused && CAPTURABLE.contains(&kind) {
            return Ok(());
        }
        let why = if CAPTURABLE.contains(&kind) {
            format!("{kind} without fused updates keeps its step counts on the host: turn them on (fused)")
        } else {
            format!("{kind} keeps state on the host that a replay would not update")
        };
        Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "a device graph cannot capture this optimizer's step: {why}; SGD, Adam and AdamW with fused updates \
                 can"
            ),
        ))
    }

    fn prepare(&mut self) -> Result<()> {
        let core = &mut *self.core;
        let lrs = core.device_lrs.get_or_insert_with(Vec::new);
        lrs.resize_with(core.groups.len(), || None);
        for (g, slot) in core.groups.iter().zip(lrs.iter_mut()) {
            let Some(p) = g.params.first() else {
                *slot = None;
                continue;
            };
            // Made on the group's device once; parameters do not move during
            // a fit (and a replay would refuse moved ones).
            match slot {
                Some(d) => {
                    if d.value != g.lr {
                        let _ = d.tensor.f_fill_(g.lr)?;
                        d.value = g.lr;
                    }
                }
                None => {
                    let tensor = crate::tensor::device::scalar_on_device_of(g.lr, Kind::Float, p)?;
                    *slot = Some(DeviceLr { value: g.lr, tensor });
                }
            }
        }
        Ok(())
    }

    fn step_counts(&self) -> Vec<f64> {
        self.core.state.iter().map(|st| st.as_ref().map_or(0.0, |st| st.step)).collect()
    }

    fn replayed(&mut self, counted: &[usize]) {
        for &i in counted {
            if let Some(st) = self.core.state.get_mut(i).and_then(Option::as_mut) {
                st.step += 1.0;
                if let Some(d) = st.device_step.as_mut() {
                    d.count += 1.0;
                }
            }
        }
    }

    fn state_addresses(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for st in self.core.state.iter().flatten() {
            out.extend(st.buffers.values().map(|t| t.data_ptr() as usize));
            out.extend(st.device_step.iter().map(|d| d.tensor.data_ptr() as usize));
        }
        for lr in self.core.device_lrs.iter().flatten().flatten() {
            out.push(lr.tensor.data_ptr() as usize);
        }
        out
    }

    fn restore_step_counts(&mut self, counts: &[f64]) {
        for (i, st) in self.core.state.iter_mut().enumerate() {
            let Some(st) = st.as_mut() else { continue };
            let before = counts.get(i).copied().unwrap_or(0.0);
            if st.step != before {
                st.step = before;
                if let Some(d) = st.device_step.as_mut() {
                    d.count = before;
                }
            }
        }
    }

    fn end(&mut self) {
        self.core.device_lrs = None;
    }
}

/// The `at::Tensor*` of group `group`'s device learning rate, or NULL when
/// it is passed by value.
pub(super) fn lr_tensor_ptr(device_lrs: &Option<Vec<Option<DeviceLr>>>, group: usize) -> *const c_void {
    match device_lrs.as_ref().and_then(|l| l.get(group)).and_then(Option::as_ref) {
        Some(d) => d.tensor.as_ptr() as *const c_void,
        None => std::ptr::null(),
    }
}

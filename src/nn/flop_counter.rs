//! FLOP counting, as `torch.utils.flop_counter.FlopCounterMode` counts
//! (Lightning's `measure_flops`): the matrix multiplications, convolutions
//! and attention kernels a piece of code runs on the calling thread, and in
//! the backward passes it starts, each counted with torch's formula from
//! its shapes (`csrc/flops.cpp`). Tensors on the meta device are counted
//! without computing, where libtorch has meta kernels for their operators.
use super::module::Module;
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::shim::{self, call};
use libc::{c_char, c_void};
use std::collections::BTreeMap;
use std::ffi::CStr;
use tch::Tensor;

/// What a measurement counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlopCounts {
    /// Every operator's FLOPs added up (`get_total_flops()`).
    pub total: u64,
    /// FLOPs by operator name ("aten::mm"), the operators that counted
    /// any (`get_flop_counts()["Global"]`).
    pub by_operator: BTreeMap<String, u64>,
}

/// Ends a measurement on drop, so a failing or panicking `f` leaves none
/// running.
struct Measuring {
    ended: bool,
}

impl Measuring {
    fn begin() -> Result<Measuring> {
        // SAFETY: the shim writes at most `len` bytes of message.
        call("measuring FLOPs", |err, len| unsafe { shim::fulmen_cxx_flops_begin(err, len) }).map_err(|e| {
            if e.message.contains("measured already") {
                Error::new(ErrorCode::InvalidState, e.message)
            } else {
                e
            }
        })?;
        Ok(Measuring { ended: false })
    }

    /// Ends the measurement: its counts, and whether one left 64 bits.
    fn finish(&mut self) -> Result<(FlopCounts, bool)> {
        self.ended = true;
        let mut counts = FlopCounts::default();
        let mut overflow = 0;
        // SAFETY: `on_count` gets `counts` back as its context, on this
        // thread, before the call returns.
        call("measuring FLOPs", |err, len| unsafe {
            shim::fulmen_cxx_flops_end(on_count, std::ptr::from_mut(&mut counts).cast(), &mut overflow, err, len)
        })?;
        Ok((counts, overflow != 0))
    }

    fn end(mut self) -> Result<FlopCounts> {
        let too_many = || Error::new(ErrorCode::OutOfRange, "the FLOP count exceeds 2^64 - 1");
        let (mut counts, overflow) = self.finish()?;
        if overflow {
            return Err(too_many());
        }
        counts.total = counts.by_operator.values().try_fold(0u64, |a, &b| a.checked_add(b)).ok_or_else(too_many)?;
        counts.by_operator.retain(|_, n| *n > 0);
        Ok(counts)
    }
}

impl Drop for Measuring {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.finish();
        }
    }
}

/// Receives one operator's count from the shim.
unsafe extern "C" fn on_count(ctx: *mut c_void, name: *const c_char, flops: u64) {
    // SAFETY: `ctx` is the `FlopCounts` `end` passed; `name` a C string
    // valid for this call.
    let counts = unsafe { &mut *ctx.cast::<FlopCounts>() };
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    counts.by_operator.insert(name, flops);
}

/// Runs `f` and counts the FLOPs of what it runs on this thread (and of the
/// backward passes it starts), as `FlopCounterMode` does around it.
/// Threads measure apart; a measurement inside another on the same thread
/// is `InvalidState` (torch's mode is not re-entrant either). A count past
/// 2^64 - 1 is `OutOfRange`.
pub fn measure_flops<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, FlopCounts)> {
    let measuring = Measuring::begin()?;
    let out = f()?;
    Ok((out, measuring.end()?))
}

/// Lightning's `measure_flops(model, lambda: model(x), lambda y: y.sum())`:
/// the FLOPs of one forward of `model` on `input`, and with `backward` of
/// the backward of its output's sum (to every leaf that needs a gradient:
/// the trainable parameters, and the input when it needs one). The
/// model's gradients are not touched (the backward returns them, as
/// `torch.autograd.grad` does), and its buffers (BatchNorm statistics) and
/// the CPU's random state are put back, so a measurement changes nothing
/// a later step computes. A CUDA generator advances as after a forward with
/// dropout.
pub fn measure_model_flops(model: &Module, input: &Tensor, backward: bool) -> Result<FlopCounts> {
    let state = Untouched::take(model)?;
    let (_, counts) = measure_flops(|| {
        let y = model.forward(input)?;
        if backward {
            // `.backward()` reaches every leaf that needs a gradient: the
            // trainable parameters, and the input when it needs one.
            let mut leaves: Vec<Tensor> = model.parameters().into_iter().filter(Tensor::requires_grad).collect();
            if input.requires_grad() {
                leaves.push(input.shallow_clone());
            }
            let loss = y.f_sum(y.kind())?;
            if !leaves.is_empty() && loss.requires_grad() {
                Tensor::f_run_backward(&[loss], &leaves, false, false)?;
            }
        }
        Ok(())
    })?;
    state.restore()?;
    Ok(counts)
}

/// A model's buffers and the CPU's random state, put back by `restore` or,
/// on an early return or a panic, when dropped.
struct Untouched {
    buffers: Vec<(Tensor, Tensor)>,
    rng: Tensor,
    restored: bool,
}

impl Untouched {
    fn take(model: &Module) -> Result<Untouched> {
        let buffers = model.named_buffers().into_iter().map(|(_, b)| (b.shallow_clone(), b.detach().copy())).collect();
        let rng = crate::tensor::runtime::cpu_rng_state().ctx("the random state")?;
        Ok(Untouched { buffers, rng, restored: false })
    }

    fn put_back(&mut self) -> Result<()> {
        self.restored = true;
        tch::no_grad(|| -> Result<()> {
            for (live, saved) in &self.buffers {
                live.shallow_clone().f_copy_(saved)?;
            }
            Ok(())
        })?;
        crate::tensor::runtime::set_cpu_rng_state(&self.rng).ctx("restoring the random state")
    }

    fn restore(mut self) -> Result<()> {
        self.put_back()
    }
}

impl Drop for Untouched {
    fn drop(&mut self) {
        if !self.restored {
            let _ = self.put_back();
        }
    }
}

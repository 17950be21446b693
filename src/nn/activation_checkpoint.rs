//! Activation checkpointing (torch.utils.checkpoint, Lightning's
//! `activation_checkpointing_policy`): a module marked for it runs its
//! forward without keeping the activations inside it, and backward runs
//! that forward again, with gradients, to get them. The second run uses a
//! shallow copy of the module taken at the first (the same parameter
//! tensors, so their gradients accumulate where the optimizer reads them),
//! with the generators' states and autocast's settings of the first run put
//! back (csrc/checkpoint.cpp): dropout draws the same masks, autocast casts
//! the same ops, and the gradients equal those of a plain forward.
use super::module::Module;
use crate::error::{Error, ErrorCode, Result};
use crate::shim;
use libc::{c_char, c_int, c_void, size_t};
use std::sync::Mutex;
use tch::Tensor;

/// What the checkpoint runs twice: the module's forward on its inputs
/// (`None` for a left-out optional one).
struct Recompute {
    module: Module,
    /// Which of the module's inputs were given (the shim sees those only).
    given: Vec<bool>,
    /// `forward` (one input, one output) rather than `forward_multi`.
    single: bool,
}

impl Recompute {
    fn run(&self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        if tensors.len() != self.given.iter().filter(|g| **g).count() {
            return Err(Error::state("a checkpointed forward got another number of inputs than it was made for"));
        }
        let mut it = tensors.iter();
        let inputs: Vec<Option<&Tensor>> = self.given.iter().map(|g| if *g { it.next() } else { None }).collect();
        if self.single {
            let x = inputs
                .first()
                .copied()
                .flatten()
                .ok_or_else(|| Error::state("a checkpointed forward lost its input"))?;
            return Ok(vec![self.module.forward_inner(x)?]);
        }
        self.module.forward_multi_inner(&inputs)
    }
}

/// Runs `module`'s forward on `inputs` as a checkpoint (plainly when
/// gradients are off); `single` for [`Module::forward`].
pub(crate) fn run(module: &Module, inputs: &[Option<&Tensor>], single: bool) -> Result<Vec<Tensor>> {
    let recompute =
        Recompute { module: module.checkpoint_copy()?, given: inputs.iter().map(Option::is_some).collect(), single };
    let ctx = Box::into_raw(Box::new(Mutex::new(recompute))).cast::<c_void>();
    let ptrs: Vec<*const c_void> = inputs.iter().flatten().map(|t| t.as_ptr() as *const c_void).collect();
    let mut outputs: Vec<Tensor> = Vec::new();
    let sink = (&mut outputs as *mut Vec<Tensor>).cast::<c_void>();
    // SAFETY: `ctx` is the Box above, released by `release` exactly once
    // (the shim's contract); the inputs outlive the call; `sink` is
    // `outputs`, alive through the call.
    shim::call("activation checkpointing", |err, len| unsafe {
        shim::fulmen_cxx_checkpoint(forward, ctx, release, ptrs.as_ptr(), ptrs.len(), emit, sink, err, len)
    })?;
    Ok(outputs)
}

/// The shim's forward: `ctx` is the `Mutex<Recompute>`.
unsafe extern "C" fn forward(
    ctx: *mut c_void,
    inputs: *const *const c_void,
    n: size_t,
    outputs: *mut c_void,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    let recompute = &*(ctx as *const Mutex<Recompute>);
    let tensors = shim::forward_inputs(inputs, n);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let r = recompute.lock().map_err(|_| Error::state("a checkpointed forward panicked before"))?;
        r.run(&tensors)
    }))
    .unwrap_or_else(|_| Err(Error::new(ErrorCode::Panic, "a checkpointed forward panicked")));
    let pushed = result.and_then(|outs| shim::push_forward_outputs(outputs, &outs));
    match pushed {
        Ok(()) => 0,
        Err(e) => {
            shim::write_error(err, err_len, &e.to_string());
            1
        }
    }
}

/// The shim's release of `ctx`.
unsafe extern "C" fn release(ctx: *mut c_void) {
    let _ = std::panic::catch_unwind(|| drop(Box::from_raw(ctx as *mut Mutex<Recompute>)));
}

/// The shim's output sink: `sink` is the caller's `Vec<Tensor>`.
unsafe extern "C" fn emit(sink: *mut c_void, output: *const c_void) {
    let outputs = &mut *(sink as *mut Vec<Tensor>);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        outputs.push(Tensor::clone_from_ptr(output.cast_mut().cast()));
    }));
}

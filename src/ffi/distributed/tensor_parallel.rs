//! Tensor parallelism for host-owned loops (`fulmen_tensor_parallel`):
//! the layers a plan names split across the joined job's ranks, the host
//! driving forward, backward and its optimizers.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::distributed::collectives::refuse_in_slot;
use crate::ffi::distributed::fsdp::{borrow_optimizers, with_optimizers};
use crate::ffi::distributed::job::joined;
use crate::ffi::nn::model::fulmen_model;
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::nn::ParallelStyle;
use crate::strategies::model_parallel::TensorParallel;
use libc::c_char;
use std::sync::Arc;

/// How a layer splits across the ranks, torch's `ParallelStyle`s (in C,
/// `fulmen_parallel_style`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelStyleCode {
    /// `ColwiseParallel()`: the output features split (a Linear's weight
    /// rows and bias, an Embedding's columns); the input whole on every
    /// rank, the output left split along its last dimension (for a
    /// ROWWISE layer next).
    Colwise = 0,
    /// `ColwiseParallel(output_layouts=Replicate())`: as COLWISE, the
    /// output gathered whole on every rank.
    ColwiseReplicatedOutput = 1,
    /// `RowwiseParallel()`: a Linear's input features split (its weight's
    /// columns; the bias whole); the input split along its last dimension
    /// (a COLWISE layer's output), the output summed whole on every rank.
    Rowwise = 2,
    /// `RowwiseParallel(input_layouts=Replicate())`: as ROWWISE with the
    /// input whole on every rank (each rank takes its part); for an
    /// Embedding, the table's rows split.
    RowwiseReplicatedInput = 3,
}

impl ParallelStyleCode {
    fn to_core(v: i32) -> Result<ParallelStyle> {
        Ok(match v {
            0 => ParallelStyle::Colwise,
            1 => ParallelStyle::ColwiseReplicatedOutput,
            2 => ParallelStyle::Rowwise,
            3 => ParallelStyle::RowwiseReplicatedInput,
            _ => {
                return Err(Error::invalid(format!(
                    "{v} is not a fulmen_parallel_style (0 colwise, 1 colwise with a replicated output, 2 rowwise, \
                     3 rowwise with a replicated input)"
                )))
            }
        })
    }
}

/// A model whose planned layers are split across the job's ranks (torch's
/// `parallelize_module`). Free with `fulmen_tensor_parallel_free`.
pub struct fulmen_tensor_parallel {
    inner: TensorParallel,
}

impl Handle for fulmen_tensor_parallel {
    const C_NAME: &'static str = "fulmen_tensor_parallel";
}

/// Reads the plan: `count` module paths and styles.
///
/// # Safety
/// `modules` and `styles` are NULL (with `count` 0) or point to `count`
/// entries each.
unsafe fn read_plan(
    modules: *const *const c_char,
    styles: *const i32,
    count: usize,
) -> Result<Vec<(String, ParallelStyle)>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if modules.is_null() || styles.is_null() {
        let arg = if modules.is_null() { "modules" } else { "styles" };
        return Err(Error::new(ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    let modules = std::slice::from_raw_parts(modules, count);
    let styles = std::slice::from_raw_parts(styles, count);
    modules
        .iter()
        .zip(styles)
        .enumerate()
        .map(|(i, (&m, &s))| {
            let path = str_arg(m, &format!("modules[{i}]"))?.to_owned();
            let style = ParallelStyleCode::to_core(s).map_err(|e| e.context(format!("styles[{i}]")))?;
            Ok((path, style))
        })
        .collect()
}

/// torch's `parallelize_module(model, mesh, plan)` over the whole joined
/// job (the tensor-parallel dimension of Lightning's
/// `ModelParallelStrategy`): the layers at the `count` dotted paths in
/// `modules` (Linear and Embedding layers) split across the ranks as
/// `styles` (`fulmen_parallel_style` values) say. First checks that every
/// rank has the same plan and parameters, and copies rank 0's parameters
/// and buffers to every rank; then each rank keeps its part of the split
/// parameters (as `torch.chunk` and DTensor's `Shard` cut: `ceil(size /
/// world)` entries each, the last ranks' parts shorter or empty when the
/// size does not divide), and their layers compute with the collectives inside the
/// forward and backward, so every rank must run the same forwards and
/// backwards. The model (on this rank's device) runs as before; build the
/// optimizers over `fulmen_model_parameters(model)` after this call: they
/// step the parts. Parameters left whole (the other layers, a ROWWISE
/// layer's bias) get the same gradients on every rank when the batch is
/// the same on every rank, as tensor parallelism needs.
///
/// Each training step, on every rank: the forward, backward, optionally
/// `fulmen_tensor_parallel_clip_grad_norm`, the optimizers' step. To save
/// or read the full model, `fulmen_tensor_parallel_unshard`.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (an
/// empty plan, a path twice, a style out of range, ROWWISE on an
/// Embedding; ranks with other
/// plans; no module at a path), FULMEN_CODE_UNSUPPORTED (a path that names another kind of layer or a
/// container; a model on the meta device), FULMEN_CODE_INVALID_STATE (not
/// joined; the model is split already or sharded by FSDP; called from
/// inside a collectives slot), FULMEN_CODE_DISTRIBUTED (ranks disagree on
/// the parameters, another rank's call failed, timeout). On error no
/// layer is split, but the model may hold rank 0's values.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_parallel_new(
    model: *mut fulmen_model,
    modules: *const *const c_char,
    styles: *const i32,
    count: usize,
    out: *mut *mut fulmen_tensor_parallel,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let plan = read_plan(modules, styles, count)?;
        let m = Arc::clone(&handle::borrow_mut(model, "model")?.inner);
        let ctx = joined()?;
        let inner = TensorParallel::new(ctx, m, &plan)?;
        out.write(handle::into_raw(fulmen_tensor_parallel { inner }));
        Ok(())
    })
}

/// `clip_grad_norm_(model.parameters(), max_norm)` on the tensor-parallel
/// model: every gradient scaled so that the 2-norm over the whole model
/// (the split parameters' parts on every rank, the others counted once) is
/// at most `max_norm`. Writes the total norm before clipping to
/// `*total_norm` (may be NULL). After backward, on every rank.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`max_norm` negative or NaN),
/// FULMEN_CODE_INVALID_STATE (the model is unsharded; inside a
/// collectives slot), FULMEN_CODE_DISTRIBUTED.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_parallel_clip_grad_norm(
    tp: *mut fulmen_tensor_parallel,
    max_norm: f64,
    total_norm: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let total = handle::borrow_mut(tp, "tp")?.inner.clip_grad_norm(max_norm)?;
        if !total_norm.is_null() {
            write_out(total_norm, "total_norm", total)?;
        }
        Ok(())
    })
}

/// Gathers the full split parameters into the model and the states of
/// `optimizers` (`count` handles built over the model's parameters; NULL
/// with 0) into their full shapes, on every rank (a collective); the
/// gradients are dropped. The model then computes as the plain model on
/// every rank, and it and the optimizers can be saved, read or loaded as
/// plain ones (`fulmen_model_save` on rank 0, ...), until
/// `fulmen_tensor_parallel_reshard`. Already unsharded: nothing happens.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT (an
/// optimizer listed twice), FULMEN_CODE_INVALID_STATE (an optimizer
/// handle in use; inside a collectives slot), FULMEN_CODE_DISTRIBUTED.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_parallel_unshard(
    tp: *mut fulmen_tensor_parallel,
    optimizers: *const *mut fulmen_optimizer,
    count: usize,
) -> *mut fulmen_error {
    guard!(|| {
        refuse_in_slot(crate::ffi::base::error::function_name!())?;
        let mut t = handle::borrow_mut(tp, "tp")?;
        let mut opts = borrow_optimizers(optimizers, count)?;
        with_optimizers(&mut opts, |o| t.inner.unshard(o))
    })
}

/// After `fulmen_tensor_parallel_unshard`: every rank keeps its part of
/// the split parameters' current values (those loaded since included) and
/// of the states of `optimizers` (pass the ones given to unshard); the
/// gradients are dropped and the layers split again. Local: no collective.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the model is not unsharded; an
/// optimizer handle in use), FULMEN_CODE_NULL_ARGUMENT,
/// FULMEN_CODE_INVALID_ARGUMENT (an optimizer listed twice; not the
/// optimizers given to unshard), FULMEN_CODE_SHAPE_MISMATCH (a split parameter was
/// given another shape; the model stays unsharded).
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_parallel_reshard(
    tp: *mut fulmen_tensor_parallel,
    optimizers: *const *mut fulmen_optimizer,
    count: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(tp, "tp")?;
        let mut opts = borrow_optimizers(optimizers, count)?;
        with_optimizers(&mut opts, |o| t.inner.reshard(o))
    })
}

/// Frees the wrapper without a collective. After
/// `fulmen_tensor_parallel_unshard` the model is a plain model again (the
/// usual end of a run: unshard, then free); otherwise its split layers keep
/// this rank's parts and their forward fails (FULMEN_CODE_INVALID_STATE).
/// NULL or freed: no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_tensor_parallel_free(tp: *mut fulmen_tensor_parallel) {
    handle::free(tp);
}

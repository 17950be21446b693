//! `fulmen_model`: building, running, naming, saving and loading models.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle, Shared};
use crate::ffi::nn::gen_options::fulmen_conv2d_options;
use crate::ffi::tensor::handle::{emit, emit_list, fulmen_tensor, i64_list, opt_tensor_arg, tensor_arg};
use crate::nn::{Activation, Module};
use crate::trainer::SharedModel;
use std::ffi::c_char;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// A model: a tree of layers (a single layer, a sequential, or a container
/// of named children), or a TorchScript module. Free with
/// `fulmen_model_free`; a LightningModule built on it keeps it alive.
pub struct fulmen_model {
    pub(crate) inner: SharedModel,
}

impl Handle for fulmen_model {
    const C_NAME: &'static str = "fulmen_model";
}

thread_local! {
    /// The models this thread holds locked (a host forward callback runs
    /// while its model is locked).
    static LOCKED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The models the callback thread this thread is attached to held
    /// locked when its callback began (`fulmen_callback_attach`).
    static LOCKED_BY_CALLER: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
    /// How many host FLOP formula calls this thread is inside.
    static IN_FLOP_FORMULA: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as running a host FLOP formula for its lifetime: a
/// model another call holds is then refused instead of waited for. A
/// backward's formulas run on autograd's threads while the measuring
/// thread, which may hold the measured model, waits for that backward, so
/// waiting there could never end.
pub(crate) struct InFlopFormula(());

impl InFlopFormula {
    /// Enters a formula call.
    pub(crate) fn enter() -> InFlopFormula {
        IN_FLOP_FORMULA.with(|d| d.set(d.get() + 1));
        InFlopFormula(())
    }
}

impl Drop for InFlopFormula {
    fn drop(&mut self) {
        let _ = IN_FLOP_FORMULA.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The models held locked for this thread's work: its own, and those of
/// the callback thread it is attached to.
pub(crate) fn locked_models() -> Vec<usize> {
    let mut all = LOCKED.with(|l| l.borrow().clone());
    LOCKED_BY_CALLER.with(|l| all.extend_from_slice(&l.borrow()));
    all
}

/// Sets the models the callback thread this thread is attached to holds
/// (empty when it detaches).
pub(crate) fn set_caller_locks(keys: Vec<usize>) {
    // At thread exit the list may be gone already: nothing to clear then.
    let _ = LOCKED_BY_CALLER.try_with(|l| *l.borrow_mut() = keys);
}

/// A locked model; unlocks when dropped.
pub(crate) struct ModelGuard<'a> {
    guard: MutexGuard<'a, Module>,
    key: usize,
}

impl std::ops::Deref for ModelGuard<'_> {
    type Target = Module;
    fn deref(&self) -> &Module {
        &self.guard
    }
}

impl std::ops::DerefMut for ModelGuard<'_> {
    fn deref_mut(&mut self) -> &mut Module {
        &mut self.guard
    }
}

impl Drop for ModelGuard<'_> {
    fn drop(&mut self) {
        LOCKED.with(|l| {
            let mut l = l.borrow_mut();
            if let Some(i) = l.iter().rposition(|k| *k == self.key) {
                l.remove(i);
            }
        });
    }
}

/// Locks a shared model (a poisoned lock still holds a usable model). A
/// call from a host forward callback into the model it runs for (on the
/// same thread) is refused with FULMEN_CODE_INVALID_STATE instead of
/// deadlocking; so is a call from a host FLOP formula into a model another
/// call holds (the measurement holding the model it measures).
pub(crate) fn lock(m: &SharedModel) -> Result<ModelGuard<'_>> {
    let key = Arc::as_ptr(m) as usize;
    let held = |l: &std::cell::RefCell<Vec<usize>>| l.borrow().contains(&key);
    if LOCKED.with(held) || LOCKED_BY_CALLER.with(held) {
        return Err(Error::state(
            "the model is running a host forward callback on this thread or on the callback thread it is \
             attached to (a re-entrant call); inside the callback use the fulmen_host_call it was given",
        ));
    }
    let guard = if IN_FLOP_FORMULA.with(|d| d.get() > 0) {
        match m.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(Error::state(
                    "a FLOP formula cannot use a model another call holds, such as the model being measured \
                     (from autograd's threads the wait would never end)",
                ))
            }
        }
    } else {
        m.lock().unwrap_or_else(|p| p.into_inner())
    };
    LOCKED.with(|l| l.borrow_mut().push(key));
    Ok(ModelGuard { guard, key })
}

/// Borrows the shared model behind a handle.
pub(crate) unsafe fn model_arg<'a>(p: *const fulmen_model, arg: &str) -> Result<Shared<'a, SharedModel>> {
    Ok(handle::borrow(p, arg)?.map(|h| &h.inner))
}

pub(crate) unsafe fn emit_model(out: *mut *mut fulmen_model, m: Result<Module>) -> Result<()> {
    check_out(out, "out")?;
    let m = m?;
    out.write(handle::into_raw(fulmen_model { inner: Arc::new(Mutex::new(m)) }));
    Ok(())
}

/// Creates an empty sequential model (`nn.Sequential`): children run in
/// order and are named "0", "1", ...
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_sequential_new(out: *mut *mut fulmen_model) -> *mut fulmen_error {
    guard!(|| emit_model(out, Ok(Module::sequential())))
}

/// Creates an empty container of named children (an `nn.Module` with
/// attributes); run its children with `fulmen_model_forward_child`.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_named_new(out: *mut *mut fulmen_model) -> *mut fulmen_error {
    guard!(|| emit_model(out, Ok(Module::named())))
}

/// Creates `nn.Linear(in_features, out_features, bias)`, initialised as
/// PyTorch does from the global generator.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a size is not positive),
/// FULMEN_CODE_TORCH (the weights cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_linear_new(
    in_features: i64,
    out_features: i64,
    bias: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| emit_model(out, Module::linear(in_features, out_features, bias)))
}

/// Creates `nn.Conv2d(in_channels, out_channels, ...)` with `options`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a channel count, kernel, stride,
/// dilation or groups not positive, a negative padding, or channels not
/// divisible by groups), FULMEN_CODE_TORCH (the weights cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_conv2d_new(
    in_channels: i64,
    out_channels: i64,
    options: *const fulmen_conv2d_options,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        if options.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "argument `options` is NULL"));
        }
        let o = *options;
        emit_model(
            out,
            Module::conv2d(in_channels, out_channels, o.kernel, o.stride, o.padding, o.dilation, o.groups, o.bias),
        )
    })
}

/// Creates `nn.Conv1d(in_channels, out_channels, kernel, stride, padding,
/// dilation, groups, bias)` over `(N, C, L)` or `(C, L)` input (PyTorch's
/// defaults: stride 1, padding 0, dilation 1, groups 1, bias true); weight
/// `[out, in / groups, kernel]` and bias drawn as PyTorch draws them.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a channel count, kernel, stride,
/// dilation or groups not positive, a negative padding, or channels not
/// divisible by groups), FULMEN_CODE_TORCH (the weights cannot be allocated).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fulmen_model_conv1d_new(
    in_channels: i64,
    out_channels: i64,
    kernel: i64,
    stride: i64,
    padding: i64,
    dilation: i64,
    groups: i64,
    bias: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        emit_model(out, Module::conv1d(in_channels, out_channels, kernel, stride, padding, dilation, groups, bias))
    })
}

/// Creates `nn.MaxPool2d(kernel, stride, padding)` with square windows;
/// `stride` 0 means "equal to kernel", as PyTorch's default.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (kernel or stride not positive, padding
/// negative or above half the kernel).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_max_pool2d_new(
    kernel: i64,
    stride: i64,
    padding: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    let s = if stride == 0 { kernel } else { stride };
    guard!(|| emit_model(out, Module::max_pool2d([kernel; 2], [s; 2], [padding; 2])))
}

/// Creates `nn.AvgPool2d(kernel, stride, padding)`; `stride` 0 = kernel.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (kernel or stride not positive, padding
/// negative or above half the kernel).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_avg_pool2d_new(
    kernel: i64,
    stride: i64,
    padding: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    let s = if stride == 0 { kernel } else { stride };
    guard!(|| emit_model(out, Module::avg_pool2d([kernel; 2], [s; 2], [padding; 2])))
}

/// Creates `nn.BatchNorm1d/2d(num_features, eps, momentum)` with affine
/// parameters and running statistics (buffers `running_mean`,
/// `running_var`, `num_batches_tracked`).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (num_features not positive, eps
/// negative or NaN, momentum outside [0, 1]), FULMEN_CODE_TORCH (the parameters
/// cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_batch_norm_new(
    num_features: i64,
    eps: f64,
    momentum: f64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| { emit_model(out, Module::batch_norm(num_features, eps, momentum, true, true)) })
}

/// Creates `nn.LayerNorm(shape[0..ndim], eps)` with affine parameters.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (ndim 0, a dimension not positive, eps
/// negative or NaN), FULMEN_CODE_TORCH (the parameters cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_layer_norm_new(
    shape: *const i64,
    ndim: usize,
    eps: f64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let s = i64_list(shape, ndim, "shape")?;
        emit_model(out, Module::layer_norm(s, eps, true))
    })
}

/// Creates `nn.GroupNorm(num_groups, num_channels, eps, affine)` over
/// dimension 1 of `(N, C, ...)` input; `affine` adds `weight` (ones) and
/// `bias` (zeros) of `num_channels` (PyTorch's defaults: eps 1e-5, affine).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`num_channels` not a positive
/// multiple of a positive `num_groups`, or a negative or NaN eps).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_group_norm_new(
    num_groups: i64,
    num_channels: i64,
    eps: f64,
    affine: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| emit_model(out, Module::group_norm(num_groups, num_channels, eps, affine)))
}

/// Creates `nn.RMSNorm(shape[0..ndim], eps, elementwise_affine)`: `x /
/// sqrt(mean(x^2) + eps) * weight` over the trailing dimensions; `eps` 0
/// means PyTorch's default (the input dtype's machine epsilon); `affine`
/// adds `weight` (ones).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an empty or non-positive shape, or
/// a negative or NaN eps).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_rms_norm_new(
    shape: *const i64,
    ndim: usize,
    eps: f64,
    affine: bool,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let s = i64_list(shape, ndim, "shape")?;
        emit_model(out, Module::rms_norm(s, (eps != 0.0).then_some(eps), affine))
    })
}

/// Creates `nn.PReLU(num_parameters, init)`: parameter `weight` of
/// `num_parameters` slopes (1, or the channel count), all `init` (PyTorch's
/// defaults: 1, 0.25).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`num_parameters` not positive or
/// `init` not finite), FULMEN_CODE_TORCH (the weight cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_prelu_new(
    num_parameters: i64,
    init: f64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| emit_model(out, Module::prelu(num_parameters, init)))
}

/// Creates `nn.Unflatten(dim, sizes[0..nsizes])`: dimension `dim` split
/// into `sizes` (one may be -1).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (no sizes, a size below -1, or
/// more than one -1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_unflatten_new(
    dim: i64,
    sizes: *const i64,
    nsizes: usize,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let s = i64_list(sizes, nsizes, "sizes")?;
        emit_model(out, Module::unflatten(dim, s))
    })
}

/// Creates `nn.Dropout(p)`: zeroes elements with probability `p` in
/// training mode only.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (p outside [0, 1]).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_dropout_new(p: f64, out: *mut *mut fulmen_model) -> *mut fulmen_error {
    guard!(|| emit_model(out, Module::dropout(p)))
}

/// Creates `nn.Dropout2d(p)`: zeroes whole channels of `(N, C, H, W)`
/// input (a 3-D input is `(N, C, L)`, as PyTorch 2.13 reads it) with
/// probability `p`, scaling the others by `1 / (1 - p)`, in training mode
/// only. A forward on another rank fails with FULMEN_CODE_SHAPE_MISMATCH.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (p outside [0, 1]).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_dropout2d_new(p: f64, out: *mut *mut fulmen_model) -> *mut fulmen_error {
    guard!(|| emit_model(out, Module::dropout2d(p)))
}

/// Creates `nn.Embedding(num_embeddings, dim)`; its input is integer ids.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a size is not positive),
/// FULMEN_CODE_TORCH (the table cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_embedding_new(
    num_embeddings: i64,
    dim: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| emit_model(out, Module::embedding(num_embeddings, dim)))
}

/// Creates `nn.Embedding(num_embeddings, dim, padding_idx=padding_idx)`:
/// row `padding_idx` (negative counts from the end) starts at zero and
/// gets no gradient, so it stays zero (the padding token of a batch of
/// sequences).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (a size is not positive),
/// FULMEN_CODE_OUT_OF_RANGE (`padding_idx` outside [-num_embeddings,
/// num_embeddings)), FULMEN_CODE_TORCH (the table cannot be allocated).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_embedding_padded_new(
    num_embeddings: i64,
    dim: i64,
    padding_idx: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| { emit_model(out, Module::embedding_padded(num_embeddings, dim, padding_idx)) })
}

/// Creates `nn.Flatten(start_dim, end_dim)` (PyTorch's default is 1, -1).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_flatten_new(
    start_dim: i64,
    end_dim: i64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| emit_model(out, Ok(Module::flatten(start_dim, end_dim))))
}

/// Activation layers (`fulmen_activation`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationKind {
    /// `nn.ReLU`.
    Relu = 0,
    /// `nn.LeakyReLU(param)` (negative slope).
    LeakyRelu = 1,
    /// `nn.GELU` (exact).
    Gelu = 2,
    /// `nn.Sigmoid`.
    Sigmoid = 3,
    /// `nn.Tanh`.
    Tanh = 4,
    /// `nn.SiLU`.
    Silu = 5,
    /// `nn.ELU(param)` (alpha).
    Elu = 6,
    /// `nn.Softmax(dim = param)`.
    Softmax = 7,
    /// `nn.LogSoftmax(dim = param)`.
    LogSoftmax = 8,
    /// `nn.Identity`.
    Identity = 9,
    /// `nn.Mish`.
    Mish = 10,
    /// `nn.Hardswish`.
    Hardswish = 11,
    /// `nn.Hardsigmoid`.
    Hardsigmoid = 12,
    /// `nn.ReLU6`.
    Relu6 = 13,
    /// `nn.GELU(approximate="tanh")`.
    GeluTanh = 14,
    /// `nn.SELU`.
    Selu = 15,
    /// `nn.Softplus(beta = param)` (threshold 20; param 0 means beta 1).
    Softplus = 16,
    /// `nn.LogSigmoid`.
    LogSigmoid = 17,
}

pub(crate) fn activation(kind: i32, param: f64) -> Result<Activation> {
    let dim = || -> Result<i64> {
        if param.fract() != 0.0 {
            return Err(Error::invalid(format!("softmax dim must be a whole number, got {param}")));
        }
        Ok(param as i64)
    };
    Ok(match kind {
        0 => Activation::Relu,
        1 => Activation::LeakyRelu(param),
        2 => Activation::Gelu,
        3 => Activation::Sigmoid,
        4 => Activation::Tanh,
        5 => Activation::Silu,
        6 => Activation::Elu(param),
        7 => Activation::Softmax(dim()?),
        8 => Activation::LogSoftmax(dim()?),
        9 => Activation::Identity,
        10 => Activation::Mish,
        11 => Activation::Hardswish,
        12 => Activation::Hardsigmoid,
        13 => Activation::Relu6,
        14 => Activation::GeluTanh,
        15 => Activation::Selu,
        16 => {
            let beta = if param == 0.0 { 1.0 } else { param };
            if !beta.is_finite() {
                return Err(Error::invalid(format!("softplus beta must be finite, got {param}")));
            }
            Activation::Softplus(beta)
        }
        17 => Activation::LogSigmoid,
        k => return Err(Error::invalid(format!("{k} is not a fulmen_activation (0..=17)"))),
    })
}

/// Creates an activation layer; `param` is the slope (LeakyReLU), alpha
/// (ELU), beta (Softplus, 0 for 1) or dimension (Softmax, LogSoftmax),
/// ignored otherwise.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (kind is not a fulmen_activation, a
/// Softmax / LogSoftmax dimension is not a whole number, or a Softplus beta
/// is not finite).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_activation_new(
    kind: i32,
    param: f64,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| emit_model(out, activation(kind, param).map(Module::activation)))
}

/// Loads a TorchScript module saved by `torch.jit.save` (CPU). Its
/// parameters keep PyTorch's dotted names and train like built-in layers.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path is not UTF-8), FULMEN_CODE_IO (no
/// file at path, or not a regular file: a device, a FIFO, a socket or a
/// directory), FULMEN_CODE_FORMAT (not a loadable TorchScript file),
/// FULMEN_CODE_TORCH (its parameters or mode cannot be read or set).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_load_torchscript(
    path: *const c_char,
    out: *mut *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let p = str_arg(path, "path")?;
        emit_model(out, Module::load_torchscript(Path::new(p), tch::Device::Cpu))
    })
}

/// Takes the module out of a child handle to move it into a container.
unsafe fn take_child(child: *mut fulmen_model) -> Result<Module> {
    let owned = handle::take_owned(child, "child", |c| {
        if Arc::strong_count(&c.inner) != 1 {
            return Err(Error::state("`child` is in use by a LightningModule and cannot be moved into another model"));
        }
        Ok(())
    })?;
    match Arc::try_unwrap(owned.inner) {
        Ok(m) => Ok(m.into_inner().unwrap_or_else(|p| p.into_inner())),
        Err(_) => Err(Error::state("`child` is shared")),
    }
}

/// Appends `child` to a sequential model. On success the child handle is
/// consumed (do not use or free it); on failure both are unchanged.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (model is not a sequential, child is
/// model itself, or a child added by name already holds the next index);
/// FULMEN_CODE_INVALID_STATE also when child is used by a LightningModule.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_push(model: *mut fulmen_model, child: *mut fulmen_model) -> *mut fulmen_error {
    guard!(|| {
        let m = model_arg(model, "model")?;
        if std::ptr::eq(model, child) {
            return Err(Error::invalid("a model cannot contain itself"));
        }
        let mut g = lock(&m)?;
        if g.type_name() != "Sequential" {
            return Err(Error::invalid(format!("fulmen_model_push needs a sequential model, got a {}", g.type_name())));
        }
        let c = take_child(child)?;
        g.push(c)
    })
}

/// Adds `child` to a named container (or a sequential) under `name`, like
/// assigning an attribute of an `nn.Module`. On success the child handle is
/// consumed; on failure both are unchanged.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (name not UTF-8, empty, holding '.' or
/// already used; model is a leaf; child is model itself);
/// FULMEN_CODE_INVALID_STATE also when child is used by a LightningModule.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_add(
    model: *mut fulmen_model,
    name: *const c_char,
    child: *mut fulmen_model,
) -> *mut fulmen_error {
    guard!(|| {
        let m = model_arg(model, "model")?;
        let name = str_arg(name, "name")?;
        if std::ptr::eq(model, child) {
            return Err(Error::invalid("a model cannot contain itself"));
        }
        let mut g = lock(&m)?;
        if g.child_names().iter().any(|n| n == name) {
            return Err(Error::invalid(format!("the model already has a child named {name:?}")));
        }
        if name.is_empty() || name.contains('.') {
            return Err(Error::invalid(format!("child name {name:?} must be non-empty and hold no '.'")));
        }
        handle::check(child, "child")?;
        if !g.holds_children() {
            return Err(Error::invalid(format!("cannot add children to a {}", g.type_name())));
        }
        let c = take_child(child)?;
        g.add(name, c)
    })
}

/// Runs the model's forward pass on `input`. A sequential runs its children
/// in order; a named container has no forward of its own.
///
/// Errors: FULMEN_CODE_SHAPE_MISMATCH (the input's shape does not fit a layer),
/// FULMEN_CODE_DTYPE_MISMATCH (a dtype a layer does not take, e.g. float ids
/// for an Embedding), FULMEN_CODE_OUT_OF_RANGE (an Embedding id outside the
/// table: inside a Trainer's run on an accelerator the call succeeds, reading
/// row 0 for it, and the run fails at its next reading of values; a Softmax
/// dimension out of range), FULMEN_CODE_UNSUPPORTED (a named
/// container, which has no forward), FULMEN_CODE_TORCH (another libtorch error,
/// e.g. in a TorchScript forward).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_forward(
    model: *const fulmen_model,
    input: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let m = model_arg(model, "model")?;
        let x = tensor_arg(input, "input")?;
        let y = lock(&m)?.forward(&x)?;
        emit(out, y)
    })
}

/// Runs the child at `path` ("encoder" or "encoder.0") on `input`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path is not UTF-8 or names no child),
/// FULMEN_CODE_SHAPE_MISMATCH (the input's shape does not fit a layer),
/// FULMEN_CODE_DTYPE_MISMATCH (a dtype a layer does not take, e.g. float ids
/// for an Embedding), FULMEN_CODE_OUT_OF_RANGE (an Embedding id outside the
/// table: inside a Trainer's run on an accelerator the call succeeds, reading
/// row 0 for it, and the run fails at its next reading of values; a Softmax
/// dimension out of range), FULMEN_CODE_UNSUPPORTED (a named
/// container, which has no forward), FULMEN_CODE_TORCH (another libtorch error,
/// e.g. in a TorchScript forward).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_forward_child(
    model: *const fulmen_model,
    path: *const c_char,
    input: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let m = model_arg(model, "model")?;
        let p = str_arg(path, "path")?;
        let x = tensor_arg(input, "input")?;
        let y = lock(&m)?.forward_child(p, &x)?;
        emit(out, y)
    })
}

/// The most inputs `fulmen_model_forward_multi` takes.
pub const FULMEN_MAX_FORWARD_INPUTS: usize = 16;

/// Runs the module at `path` (NULL or "" for the model itself) on several
/// inputs and writes all its results, as a PyTorch `forward` with extra
/// arguments and tuple results. `inputs[i]` may be NULL for a left-out
/// optional input. What each layer takes and gives:
/// - RNN / GRU: `input, h0, lengths` to `output, h_n`; LSTM: `input, h0,
///   c0, lengths` to `output, h_n, c_n`. `lengths` (int64 or int32, one per
///   sequence, 1..=T) runs the batch packed: outputs past a sequence's end
///   are zero and `h_n` is its state at its last step.
/// - MultiheadAttention: `query, key, value, key_padding_mask, attn_mask`
///   (key defaults to query, value to key) to `output, weights` (averaged
///   over heads). Bool masks: true leaves a key out; float masks are added.
/// - TransformerEncoderLayer: `src, src_mask, src_key_padding_mask`;
///   TransformerDecoderLayer: `tgt, memory, tgt_mask, memory_mask,
///   tgt_key_padding_mask, memory_key_padding_mask`; to `output`.
/// - Every other module: one input to one output.
///
/// The number of results is known before the module runs: it goes to
/// `*count_out`, and when it exceeds `capacity` the call fails before
/// running. The caller owns the new handles in `outs[0..*count_out]`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path names no child, more than
/// FULMEN_MAX_FORWARD_INPUTS inputs, a required input left out, or a count
/// the module does not take), FULMEN_CODE_OUT_OF_RANGE (more results than
/// `capacity`; lengths outside 1..=T), FULMEN_CODE_SHAPE_MISMATCH,
/// FULMEN_CODE_DTYPE_MISMATCH (inputs or masks that do not fit),
/// FULMEN_CODE_UNSUPPORTED (a named container), FULMEN_CODE_TORCH.
/// Thread rules: as `fulmen_model_forward` (the model is locked for the call).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_forward_multi(
    model: *const fulmen_model,
    path: *const c_char,
    inputs: *const *const fulmen_tensor,
    n_inputs: usize,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let m = model_arg(model, "model")?;
        let path = if path.is_null() { "" } else { str_arg(path, "path")? };
        let guard = lock(&m)?;
        forward_multi_into(&guard, path, inputs, n_inputs, outs, capacity, count_out)
    })
}

/// Names the child at `path` in an error from it ("" is the model itself).
pub(crate) fn in_child(e: Error, path: &str) -> Error {
    if path.is_empty() {
        e
    } else {
        e.context(format!("child {path}"))
    }
}

/// The body of `fulmen_model_forward_multi` on a module already borrowed:
/// reads the inputs, runs the descendant at `path` and writes its results.
///
/// # Safety
/// Pointers as `fulmen_model_forward_multi` documents them.
pub(crate) unsafe fn forward_multi_into(
    module: &Module,
    path: &str,
    inputs: *const *const fulmen_tensor,
    n_inputs: usize,
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> Result<()> {
    check_out(count_out, "count_out")?;
    if n_inputs > FULMEN_MAX_FORWARD_INPUTS {
        return Err(Error::invalid(format!(
            "forward_multi: {n_inputs} inputs, at most FULMEN_MAX_FORWARD_INPUTS ({FULMEN_MAX_FORWARD_INPUTS})"
        )));
    }
    if n_inputs > 0 && inputs.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "argument `inputs` is NULL"));
    }
    let held =
        (0..n_inputs).map(|i| opt_tensor_arg(*inputs.add(i), &format!("inputs[{i}]"))).collect::<Result<Vec<_>>>()?;
    let refs: Vec<Option<&tch::Tensor>> = held.iter().map(|t| t.as_deref()).collect();
    let child = module.child(path)?;
    let run = || {
        let _flops = module.child_flop_scopes(path);
        child.forward_multi(&refs).map_err(|e| in_child(e, path))
    };
    emit_list(outs, capacity, count_out, child.num_outputs()?, run)
}

/// Sets training mode (`true`, as `model.train()`) or evaluation mode
/// (`false`, as `model.eval()`) for the whole tree.
///
/// Errors: FULMEN_CODE_TORCH (a TorchScript module's mode cannot be set).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_set_training(model: *mut fulmen_model, training: bool) -> *mut fulmen_error {
    guard!(|| lock(&*model_arg(model, "model")?)?.set_training(training))
}

/// Checkpoints the forward of the module at `path` (NULL or "" for the
/// model itself) when `enabled`, or stops (torch's `torch.utils.checkpoint`
/// around that module's forward): its activations are not kept, and
/// backward runs its forward again, with the first run's generator states
/// (dropout's masks) and autocast, to get them. The gradients are those of
/// the plain forward; the memory of the module's activations is traded for
/// a second forward. Nested checkpoints work; a module inside a unit of
/// strategy "fsdp" may be checkpointed this way too
/// (`fsdp_activation_checkpointing_policy` does it by class), and under
/// strategy "ddp"; a fit under "ddp_find_unused_parameters_true" of a
/// model with a checkpointed module fails with FULMEN_CODE_UNSUPPORTED
/// (that search cannot see inside it). The setting stays with the model
/// (checkpoint files do not hold it).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`path` names no module or is not
/// UTF-8), FULMEN_CODE_UNSUPPORTED (the module holds a TorchScript or
/// exported module, whose copies for the second forward would be deep).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_set_activation_checkpointing(
    model: *mut fulmen_model,
    path: *const c_char,
    enabled: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let m = model_arg(model, "model")?;
        let path = if path.is_null() { "" } else { str_arg(path, "path")? };
        let mut guard = lock(&m)?;
        guard.set_activation_checkpointing(path, enabled)
    })
}

/// Writes whether the model is in training mode.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_is_training(model: *const fulmen_model, out: *mut bool) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", lock(&*model_arg(model, "model")?)?.is_training()))
}

/// Writes the number of scalar parameters (all trainable tensors' elements).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_num_parameters(model: *const fulmen_model, out: *mut i64) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", lock(&*model_arg(model, "model")?)?.num_parameters()))
}

/// Writes the number of entries of the model's state_dict (parameters and
/// buffers).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_state_dict_len(model: *const fulmen_model, out: *mut usize) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", lock(&*model_arg(model, "model")?)?.state_dict().len()) })
}

/// Copies the name of state_dict entry `index` (PyTorch's naming, e.g.
/// "0.weight", "bn.running_mean") NUL-terminated into `buf` of `capacity`
/// bytes and writes its length (without the NUL) to `*len_out`. When
/// `capacity` is too small, fails with FULMEN_CODE_OUT_OF_RANGE after
/// writing only `*len_out`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`index` past the state_dict, or
/// `capacity` too small, see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_state_dict_name(
    model: *const fulmen_model,
    index: usize,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let sd = lock(&*model_arg(model, "model")?)?.state_dict();
        let (name, _) = sd.get(index).ok_or_else(|| {
            Error::new(ErrorCode::OutOfRange, format!("index {index} >= state_dict size {}", sd.len()))
        })?;
        copy_str(name, buf, capacity, len_out)
    })
}

/// Copies `s` NUL-terminated into a caller buffer (shared by name getters).
pub(crate) unsafe fn copy_str(s: &str, buf: *mut c_char, capacity: usize, len_out: *mut usize) -> Result<()> {
    check_out(len_out, "len_out")?;
    len_out.write(s.len());
    if capacity < s.len() + 1 {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!("buffer of {capacity} bytes cannot hold {} bytes and a NUL", s.len()),
        ));
    }
    check_out(buf, "buf")?;
    std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, s.len());
    *buf.add(s.len()) = 0;
    Ok(())
}

/// Writes a new handle to the state_dict entry `name` (a parameter or
/// buffer; it shares storage with the model, so in-place changes show).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (name is not UTF-8 or not in the
/// state_dict).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_state_dict_get(
    model: *const fulmen_model,
    name: *const c_char,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let n = str_arg(name, "name")?;
        let sd = lock(&*model_arg(model, "model")?)?.state_dict();
        match sd.into_iter().find(|(k, _)| k == n) {
            Some((_, t)) => emit(out, t),
            None => Err(Error::invalid(format!("the model has no parameter or buffer named {n:?}"))),
        }
    })
}

/// Saves the state_dict (PyTorch names): for a path ending in `.pt`, `.pth`
/// or `.bin` as a `torch.save` file (`torch.load(path, weights_only=True)`
/// gives the state_dict), otherwise as a safetensors file. Written to a
/// temporary file and renamed so a crash never leaves a partial file; one
/// tensor at a time is copied to the host, and `torch.save` files past
/// 4 GiB use zip64 as PyTorch's writer does.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path is not UTF-8),
/// FULMEN_CODE_IO (the file cannot be written),
/// FULMEN_CODE_DTYPE_MISMATCH (a dtype the format cannot hold),
/// FULMEN_CODE_INVALID_STATE (the model was built on the meta device and
/// not materialized: nothing is written),
/// FULMEN_CODE_TORCH (a tensor cannot be copied to the host).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_save(model: *const fulmen_model, path: *const c_char) -> *mut fulmen_error {
    guard!(|| {
        let p = str_arg(path, "path")?;
        lock(&*model_arg(model, "model")?)?.save_weights(Path::new(p))
    })
}

/// Loads weights from a file, told apart by its contents: a safetensors
/// state_dict (PyTorch's `safetensors.torch.save_file(model.state_dict(),
/// path)`), a fulmen checkpoint (its weights), or a `torch.save` file: a
/// state_dict (`torch.save(model.state_dict(), path)`) or a Lightning
/// checkpoint (its `state_dict`; a LightningModule attribute prefix such as
/// `model.` is removed when the names then fit). `torch.save` files are
/// read without Python and only within what `torch.load(weights_only=True)`
/// accepts; anything else in them is refused, never run. `strict`: missing
/// or unexpected names are an error. Shapes must match. On error the model
/// is unchanged.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (path is not UTF-8), FULMEN_CODE_IO
/// (the file cannot be read, or is not a regular file: a device, a FIFO, a
/// socket or a directory, refused without reading or waiting on it),
/// FULMEN_CODE_FORMAT (neither a valid
/// safetensors file nor a readable `torch.save` archive; a pickle outside
/// the safe subset; with strict, missing or unexpected names), FULMEN_CODE_SHAPE_MISMATCH (a
/// tensor's shape differs from the model's), FULMEN_CODE_DTYPE_MISMATCH (a
/// tensor's dtype differs from the model's or is not supported),
/// FULMEN_CODE_TORCH (a copy fails).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_load(
    model: *mut fulmen_model,
    path: *const c_char,
    strict: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let p = str_arg(path, "path")?;
        lock(&*model_arg(model, "model")?)?.load_weights(Path::new(p), strict).map(|_| ())
    })
}

/// Frees a model handle. NULL or an already freed handle is a no-op. A
/// LightningModule or optimizer built on the model keeps what it needs.
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_free(model: *mut fulmen_model) {
    handle::free(model);
}

/// Copies the model's layer table (name, type, parameter count, totals), as
/// Lightning's ModelSummary prints it, down to `max_depth` levels (1: direct
/// children) into `buf` as for `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (buf too small, see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_model_summary(
    model: *const fulmen_model,
    max_depth: usize,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let m = model_arg(model, "model")?;
        let text = crate::callbacks::ModelSummary::of(&*lock(&m)?, max_depth)?.render();
        copy_str(&text, buf, capacity, len_out)
    })
}

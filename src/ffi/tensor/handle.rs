//! The `fulmen_tensor` handle, step scopes that release the tensors a step
//! callback creates, and the helpers every tensor function uses.
use crate::error::{Error, Result};
use crate::ffi::base::callback_context::{self, CallbackShared};
use crate::ffi::base::error::fulmen_error;
use crate::ffi::base::error::guard_named;
use crate::ffi::base::handle::{self, Handle, Shared};
use std::cell::RefCell;
use std::sync::Arc;
use tch::Tensor;

/// A tensor (libtorch `at::Tensor`). Created by fulmen calls; freed with
/// `fulmen_tensor_free`, or automatically when created inside a step
/// callback (on its thread, or on a thread attached to it) and not kept
/// with `fulmen_tensor_keep`.
pub struct fulmen_tensor {
    pub(crate) tensor: Tensor,
}

impl Handle for fulmen_tensor {
    const C_NAME: &'static str = "fulmen_tensor";
}

/// A handle made inside a scope: its address, serial and how to free it.
pub(crate) type Scoped = (usize, u64, unsafe fn(usize, u64));

/// One open scope of this thread: the handles made in it on this thread,
/// and, once a thread has asked for the callback's context, what threads
/// attached to it share.
struct Frame {
    made: Vec<Scoped>,
    shared: Option<Arc<CallbackShared>>,
}

impl Frame {
    /// Drops `p` from the frame: the host owns it now.
    fn forget(&mut self, p: usize) {
        self.made.retain(|(q, _, _)| *q != p);
        if let Some(shared) = &self.shared {
            shared.forget(p);
        }
    }
}

thread_local! {
    static SCOPES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// While alive, every tensor or value handle created on this thread, or on
/// a thread attached to the callback it covers (`fulmen_callback_attach`),
/// is recorded and freed when the scope ends, unless the host kept or freed
/// it. The trainer opens one around each host callback.
pub struct TensorScope {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl TensorScope {
    /// Opens a scope on the current thread.
    pub fn enter() -> Self {
        SCOPES.with(|s| s.borrow_mut().push(Frame { made: Vec::new(), shared: None }));
        TensorScope { _not_send: std::marker::PhantomData }
    }
}

impl Drop for TensorScope {
    fn drop(&mut self) {
        let Some(frame) = SCOPES.with(|s| s.borrow_mut().pop()) else { return };
        let mut created = frame.made;
        if let Some(shared) = frame.shared {
            // Waits for the calls attached threads are making, then refuses
            // theirs: what they made is released with the rest.
            created.extend(shared.end());
        }
        for (p, serial, release) in created {
            // SAFETY: `release` is `take_serial` of the handle's type, which
            // ignores handles the host already freed, even when their
            // address now holds a newer handle.
            unsafe { release(p, serial) };
        }
    }
}

unsafe fn release<T: Handle>(p: usize, serial: u64) {
    drop(handle::take_serial(p as *mut T, serial));
}

/// How many scopes are open on this thread (callbacks running on it).
pub(crate) fn scope_depth() -> usize {
    SCOPES.try_with(|s| s.borrow().len()).unwrap_or(0)
}

/// The callback running on this thread (its innermost scope), as threads
/// attached to it share it; `None` when no callback runs here.
pub(crate) fn current_callback() -> Result<Option<Arc<CallbackShared>>> {
    SCOPES.with(|s| {
        let mut s = s.borrow_mut();
        let Some(top) = s.last_mut() else { return Ok(None) };
        if top.shared.is_none() {
            top.shared = Some(Arc::new(CallbackShared::here()?));
        }
        Ok(top.shared.clone())
    })
}

/// Hands a value to C as a new handle, recorded in the current scope: the
/// innermost one of this thread, else that of the callback this thread is
/// attached to; none outside callbacks (the host owns it).
pub fn new_scoped<T: Handle>(value: T) -> *mut T {
    let (p, serial) = handle::into_raw_with_serial(value);
    let made: Scoped = (p as usize, serial, release::<T>);
    let here = SCOPES.with(|s| match s.borrow_mut().last_mut() {
        Some(top) => {
            top.made.push(made);
            true
        }
        None => false,
    });
    if !here {
        callback_context::record_attached(made);
    }
    p
}

/// Hands a tensor to C as a new handle, recorded in the current scope.
pub fn new_handle(tensor: Tensor) -> *mut fulmen_tensor {
    new_scoped(fulmen_tensor { tensor })
}

/// Removes a handle from every open scope (this thread's, and that of the
/// callback it is attached to): the host owns it from now on.
pub fn keep<T>(p: *mut T) {
    let p = p as usize;
    SCOPES.with(|s| {
        for frame in s.borrow_mut().iter_mut() {
            frame.forget(p);
        }
    });
    callback_context::forget_attached(p);
}

/// Borrows the tensor behind a handle.
///
/// # Safety
/// `p` must be NULL or a pointer obtained from fulmen.
pub unsafe fn tensor_arg<'a>(p: *const fulmen_tensor, arg: &str) -> Result<Shared<'a, Tensor>> {
    Ok(handle::borrow(p, arg)?.map(|h| &h.tensor))
}

/// Reads an array of tensor handles.
///
/// # Safety
/// `ptrs` must be NULL or valid for `n` reads.
pub unsafe fn tensor_list<'a>(
    ptrs: *const *const fulmen_tensor,
    n: usize,
    arg: &str,
) -> Result<Vec<Shared<'a, Tensor>>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if ptrs.is_null() {
        return Err(Error::new(crate::error::ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    (0..n).map(|i| tensor_arg(*ptrs.add(i), &format!("{arg}[{i}]"))).collect()
}

/// Reads an array argument of `n` items (NULL allowed when `n` is 0).
///
/// # Safety
/// `ptr` must be NULL or valid for `n` reads.
pub unsafe fn slice_arg<'a, T>(ptr: *const T, n: usize, arg: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::new(crate::error::ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    Ok(std::slice::from_raw_parts(ptr, n))
}

/// Reads an `int64_t` array argument (NULL allowed when `n` is 0).
///
/// # Safety
/// `ptr` must be NULL or valid for `n` reads.
pub unsafe fn i64_list<'a>(ptr: *const i64, n: usize, arg: &str) -> Result<&'a [i64]> {
    slice_arg(ptr, n, arg)
}

/// Borrows the tensor behind a handle that may be NULL (none).
///
/// # Safety
/// `p` must be NULL or a pointer obtained from fulmen.
pub unsafe fn opt_tensor_arg<'a>(p: *const fulmen_tensor, arg: &str) -> Result<Option<Shared<'a, Tensor>>> {
    if p.is_null() {
        return Ok(None);
    }
    tensor_arg(p, arg).map(Some)
}

/// Checks the two out-pointers of an op with two results: both set, and
/// not the same.
pub fn check_out_pair(
    a: *mut *mut fulmen_tensor,
    a_name: &str,
    b: *mut *mut fulmen_tensor,
    b_name: &str,
) -> Result<()> {
    handle::check_out(a, a_name)?;
    handle::check_out(b, b_name)?;
    if a == b {
        return Err(Error::invalid(format!("outputs `{a_name}` and `{b_name}` are the same pointer")));
    }
    Ok(())
}

/// Writes two new tensor handles (pointers checked by [`check_out_pair`]).
///
/// # Safety
/// `a` and `b` must be valid for a write.
pub unsafe fn emit_pair(
    a: *mut *mut fulmen_tensor,
    first: Tensor,
    b: *mut *mut fulmen_tensor,
    second: Tensor,
) -> Result<()> {
    a.write(new_handle(first));
    b.write(new_handle(second));
    Ok(())
}

/// Writes the pieces of an op with several results: `count` (known before
/// they are made) goes to `*count_out`; when it exceeds `capacity` the call
/// fails with OUT_OF_RANGE and nothing else is made or written.
///
/// # Safety
/// `count_out` must be valid for a write (checked non-NULL), `outs` NULL
/// or valid for `capacity` writes.
pub unsafe fn emit_list(
    outs: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
    count: usize,
    make: impl FnOnce() -> Result<Vec<Tensor>>,
) -> Result<()> {
    if count > capacity {
        count_out.write(count);
        return Err(Error::new(
            crate::error::ErrorCode::OutOfRange,
            format!("the op makes {count} tensors, `capacity` is {capacity}"),
        ));
    }
    if count > 0 && outs.is_null() {
        return Err(Error::new(crate::error::ErrorCode::NullArgument, "output `outs` is NULL"));
    }
    let pieces = make()?;
    if pieces.len() != count {
        return Err(Error::state(format!("the op made {} tensors, {count} were expected", pieces.len())));
    }
    for (i, t) in pieces.into_iter().enumerate() {
        outs.add(i).write(new_handle(t));
    }
    count_out.write(count);
    Ok(())
}

/// Writes a new tensor handle through `out`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn emit(out: *mut *mut fulmen_tensor, tensor: Tensor) -> Result<()> {
    handle::check_out(out, "out")?;
    out.write(new_handle(tensor));
    Ok(())
}

/// Body of a function `x -> out`.
///
/// # Safety
/// Pointers as for [`tensor_arg`] and [`emit`].
pub unsafe fn unary(
    func: &'static str,
    x: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
    op: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> *mut fulmen_error {
    guard_named(func, || {
        handle::check_out(out, "out")?;
        let y = op(&*tensor_arg(x, "x")?)?;
        emit(out, y)
    })
}

/// Body of a function `(a, b) -> out` over two tensors.
///
/// # Safety
/// Pointers as for [`tensor_arg`] and [`emit`].
pub unsafe fn binary(
    func: &'static str,
    a: *const fulmen_tensor,
    b: *const fulmen_tensor,
    out: *mut *mut fulmen_tensor,
    op: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor>,
) -> *mut fulmen_error {
    guard_named(func, || {
        handle::check_out(out, "out")?;
        let y = op(&*tensor_arg(a, "a")?, &*tensor_arg(b, "b")?)?;
        emit(out, y)
    })
}

pub use crate::tensor::ops::checks::{broadcast_shapes, check_broadcast};

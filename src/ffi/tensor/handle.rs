//! The `fulmen_tensor` handle, step scopes that release the tensors a step
//! callback creates, and the helpers every tensor function uses.
use crate::error::{Error, Result};
use crate::ffi::error::{fulmen_error, guard};
use crate::ffi::handle::{self, Handle, Shared};
use std::cell::RefCell;
use tch::Tensor;

/// A tensor (libtorch `at::Tensor`). Created by fulmen calls; freed with
/// `fulmen_tensor_free`, or automatically when created inside a step
/// callback and not kept with `fulmen_tensor_keep`.
pub struct fulmen_tensor {
    pub(crate) tensor: Tensor,
}

impl Handle for fulmen_tensor {
    const C_NAME: &'static str = "fulmen_tensor";
}

thread_local! {
    static SCOPES: RefCell<Vec<Vec<(*mut fulmen_tensor, u64)>>> = const { RefCell::new(Vec::new()) };
}

/// While alive, every tensor handle created on this thread is recorded and
/// freed when the scope ends, unless the host kept or freed it. The trainer
/// opens one around each host step callback.
pub struct TensorScope {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl TensorScope {
    /// Opens a scope on the current thread.
    pub fn enter() -> Self {
        SCOPES.with(|s| s.borrow_mut().push(Vec::new()));
        TensorScope { _not_send: std::marker::PhantomData }
    }
}

impl Drop for TensorScope {
    fn drop(&mut self) {
        let created = SCOPES.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        for (p, serial) in created {
            // SAFETY: `take_serial` ignores handles the host already freed,
            // even when their address now holds a newer handle.
            drop(unsafe { handle::take_serial(p, serial) });
        }
    }
}

/// Hands a tensor to C as a new handle, recorded in the current scope.
pub fn new_handle(tensor: Tensor) -> *mut fulmen_tensor {
    let (p, serial) = handle::into_raw_with_serial(fulmen_tensor { tensor });
    SCOPES.with(|s| {
        if let Some(top) = s.borrow_mut().last_mut() {
            top.push((p, serial));
        }
    });
    p
}

/// Removes a handle from every open scope: the host owns it from now on.
pub fn keep(p: *mut fulmen_tensor) {
    SCOPES.with(|s| {
        for scope in s.borrow_mut().iter_mut() {
            scope.retain(|(q, _)| *q != p);
        }
    });
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

/// Reads an `int64_t` array argument (NULL allowed when `n` is 0).
///
/// # Safety
/// `ptr` must be NULL or valid for `n` reads.
pub unsafe fn i64_list<'a>(ptr: *const i64, n: usize, arg: &str) -> Result<&'a [i64]> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::new(crate::error::ErrorCode::NullArgument, format!("argument `{arg}` is NULL")));
    }
    Ok(std::slice::from_raw_parts(ptr, n))
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
    guard(func, || {
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
    guard(func, || {
        handle::check_out(out, "out")?;
        let y = op(&*tensor_arg(a, "a")?, &*tensor_arg(b, "b")?)?;
        emit(out, y)
    })
}

/// Result shape of broadcasting `a` with `b`, or a shape error naming both.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() { 1 } else { a[i - (n - a.len())] };
        let db = if i < n - b.len() { 1 } else { b[i - (n - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::shape(format!(
                    "shapes {a:?} and {b:?} do not broadcast (dimension {i}: {da} vs {db})"
                )))
            }
        };
    }
    Ok(out)
}

/// Checks that `a` and `b` broadcast together.
pub fn check_broadcast(a: &Tensor, b: &Tensor) -> Result<()> {
    broadcast_shapes(&a.size(), &b.size()).map(|_| ())
}

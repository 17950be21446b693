//! The module's `train_dataloader` / `val_dataloader` /
//! `test_dataloader` / `predict_dataloader` (Lightning's dataloader hooks,
//! also a datamodule's): loaders the host creates for a run given none,
//! which fulmen takes and frees.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{host_result, HostCallTimer};
use crate::ffi::base::error::fulmen_error;
use crate::ffi::base::handle;
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::lightning_module::HostModule;
use crate::ffi::tensor::TensorScope;
use crate::ffi::trainer::loaders::FULMEN_LOADERS_MAX;
use crate::trainer::BatchSource;
use std::ffi::c_void;

const _: () = assert!(FULMEN_LOADERS_MAX == crate::trainer::LOADERS_MAX);

/// The module's `train_dataloader` (see `fulmen_module_vtable`).
pub type fulmen_train_dataloader_fn =
    unsafe extern "C" fn(userdata: *mut c_void, epoch: i64, out: *mut *mut fulmen_loader) -> *mut fulmen_error;

/// The module's `val_dataloader` (see `fulmen_module_vtable`).
pub type fulmen_val_dataloader_fn = unsafe extern "C" fn(
    userdata: *mut c_void,
    epoch: i64,
    out: *mut *mut fulmen_loader,
    capacity: usize,
    n: *mut usize,
) -> *mut fulmen_error;

/// Runs a dataloader hook in a tensor scope, under the trainer's
/// `callback_timeout`; takes every non-NULL loader of `slots` afterwards,
/// whether the hook failed or not.
fn call_and_take(
    name: &str,
    slots: &mut [*mut fulmen_loader],
    call: impl FnOnce(*mut *mut fulmen_loader) -> *mut fulmen_error,
) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let timer = HostCallTimer::start();
    let err = {
        let _scope = TensorScope::enter();
        call(slots.as_mut_ptr())
    };
    let taken = take_loaders(name, slots);
    host_result(err, || name.to_string())?;
    timer.check(|| name.to_string())?;
    taken
}

/// Takes the loaders written to `slots` (NULLs skipped): all at once, or,
/// when one cannot be taken (not a live loader, in use, listed twice),
/// an error after freeing every one that is a loader, as
/// `fulmen_loader_free` would.
fn take_loaders(name: &str, slots: &[*mut fulmen_loader]) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let written: Vec<*mut fulmen_loader> = slots.iter().copied().filter(|p| !p.is_null()).collect();
    // SAFETY: the registry checks each pointer before it is read.
    match unsafe { handle::take_owned_all(&written, "out", |_, _| Ok(())) } {
        Ok(all) => Ok(all.into_iter().map(|l| l.inner).collect()),
        Err(e) => {
            for p in written {
                // SAFETY: as above; a pointer that is no live loader is left.
                drop(unsafe { handle::take(p) });
            }
            Err(Error::new(ErrorCode::Callback, format!("{name} wrote a loader fulmen cannot take: {}", e.message)))
        }
    }
}

/// Calls the host's `train_dataloader` for `epoch`.
pub(crate) fn train_dataloader(m: &mut HostModule, epoch: i64) -> Result<Box<dyn BatchSource + Send>> {
    let f = m.train_dataloader.ok_or_else(|| Error::state("the module has no train_dataloader"))?;
    call_train("train_dataloader", f, m.userdata.ptr(), epoch)
}

/// Calls the host's `val_dataloader` for `epoch`.
pub(crate) fn val_dataloader(m: &mut HostModule, epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let f = m.val_dataloader.ok_or_else(|| Error::state("the module has no val_dataloader"))?;
    call_eval("val_dataloader", f, m.userdata.ptr(), epoch)
}

/// Calls the host's `test_dataloader`.
pub(crate) fn test_dataloader(m: &mut HostModule, epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let f = m.test_dataloader.ok_or_else(|| Error::state("the module has no test_dataloader"))?;
    call_eval("test_dataloader", f, m.userdata.ptr(), epoch)
}

/// Calls the host's `predict_dataloader`.
pub(crate) fn predict_dataloader(m: &mut HostModule, epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let f = m.predict_dataloader.ok_or_else(|| Error::state("the module has no predict_dataloader"))?;
    call_eval("predict_dataloader", f, m.userdata.ptr(), epoch)
}

/// Calls a host hook of `train_dataloader`'s shape (`name` in errors) with
/// `ud`; the one loader it wrote.
pub(crate) fn call_train(
    name: &str,
    f: fulmen_train_dataloader_fn,
    ud: *mut c_void,
    epoch: i64,
) -> Result<Box<dyn BatchSource + Send>> {
    let mut slot = [std::ptr::null_mut()];
    // SAFETY: the host's function with its own userdata, on this thread.
    let mut taken = call_and_take(name, &mut slot, |out| unsafe { f(ud, epoch, out) })?;
    taken.pop().ok_or_else(|| Error::new(ErrorCode::Callback, format!("{name} wrote no loader to *out")))
}

/// Calls a host hook of `val_dataloader`'s shape (`name` in errors) with
/// `ud`; the loaders it wrote, `*n` of them.
pub(crate) fn call_eval(
    name: &str,
    f: fulmen_val_dataloader_fn,
    ud: *mut c_void,
    epoch: i64,
) -> Result<Vec<Box<dyn BatchSource + Send>>> {
    let mut slots = [std::ptr::null_mut(); FULMEN_LOADERS_MAX];
    let mut n = usize::MAX;
    // SAFETY: the host's function with its own userdata, on this thread;
    // `out` has FULMEN_LOADERS_MAX slots.
    let taken = call_and_take(name, &mut slots, |out| unsafe { f(ud, epoch, out, FULMEN_LOADERS_MAX, &mut n) })?;
    if n == usize::MAX {
        return Err(Error::new(ErrorCode::Callback, format!("{name} wrote no count to *n")));
    }
    let in_place = n <= FULMEN_LOADERS_MAX && slots[..n].iter().all(|p| !p.is_null());
    if !in_place || taken.len() != n {
        return Err(Error::new(
            ErrorCode::Callback,
            format!("{name} wrote *n = {n} but {} loaders to out[0..{FULMEN_LOADERS_MAX}]", taken.len()),
        ));
    }
    Ok(taken)
}

//! Autocast regions on any device type, through the C++ shim of
//! `csrc/autocast.cpp` (tch only toggles the legacy CUDA switch).
//!
//! [`AutocastGuard`] does what `torch.autocast`'s `__enter__` / `__exit__`
//! do: remember the previous state, enable autocast with a dtype for the
//! device type, increment the nesting depth; on drop, clear the cast cache
//! when the outermost region exits and restore the previous state. Autocast
//! state is per thread, so the guard is neither `Send` nor `Sync`.
use crate::error::{Error, Result};
use crate::shim::{self, call};
use crate::tensor::device::DeviceType;
use libc::c_int;
use std::marker::PhantomData;
use tch::Kind;

/// The `c10::DeviceType` value of a fulmen device type.
fn c10_device(device: DeviceType) -> c_int {
    device.c10()
}

/// The `c10::ScalarType` value of an autocast dtype (fp16 or bf16, the
/// dtypes `torch.autocast` supports).
fn c10_autocast_dtype(kind: Kind) -> Result<c_int> {
    match kind {
        Kind::Half => Ok(5),
        Kind::BFloat16 => Ok(15),
        other => Err(Error::dtype(format!("autocast supports float16 and bfloat16, not {other:?}"))),
    }
}

/// The tch kind of a `c10::ScalarType` value autocast may hold.
fn kind_of_c10(value: c_int) -> Result<Kind> {
    match value {
        5 => Ok(Kind::Half),
        6 => Ok(Kind::Float),
        7 => Ok(Kind::Double),
        15 => Ok(Kind::BFloat16),
        v => Err(Error::dtype(format!("autocast dtype has c10::ScalarType {v}, which fulmen does not map"))),
    }
}

/// Whether libtorch supports autocast on `device` at all.
pub fn is_available(device: DeviceType) -> bool {
    let mut out: c_int = 0;
    // SAFETY: `out` and the error buffer are valid.
    let ok = call("autocast is_available", |err, len| unsafe {
        shim::fulmen_cxx_autocast_is_available(c10_device(device), &mut out, err, len)
    });
    ok.is_ok() && out != 0
}

/// Whether autocast is enabled for `device` on this thread.
pub fn is_enabled(device: DeviceType) -> Result<bool> {
    let mut out: c_int = 0;
    // SAFETY: `out` and the error buffer are valid.
    call("autocast is_enabled", |err, len| unsafe {
        shim::fulmen_cxx_autocast_is_enabled(c10_device(device), &mut out, err, len)
    })?;
    Ok(out != 0)
}

/// The dtype autocast uses for `device` on this thread.
pub fn dtype(device: DeviceType) -> Result<Kind> {
    kind_of_c10(raw_dtype(device)?)
}

fn raw_dtype(device: DeviceType) -> Result<c_int> {
    let mut out: c_int = 0;
    // SAFETY: `out` and the error buffer are valid.
    call("autocast get_dtype", |err, len| unsafe {
        shim::fulmen_cxx_autocast_get_dtype(c10_device(device), &mut out, err, len)
    })?;
    Ok(out)
}

fn set_enabled(device: DeviceType, enabled: bool) -> Result<()> {
    // SAFETY: the error buffer is valid.
    call("autocast set_enabled", |err, len| unsafe {
        shim::fulmen_cxx_autocast_set_enabled(c10_device(device), c_int::from(enabled), err, len)
    })
}

fn set_raw_dtype(device: DeviceType, dtype: c_int) -> Result<()> {
    // SAFETY: the error buffer is valid.
    call("autocast set_dtype", |err, len| unsafe {
        shim::fulmen_cxx_autocast_set_dtype(c10_device(device), dtype, err, len)
    })
}

fn cache_enabled() -> Result<bool> {
    let mut out: c_int = 0;
    // SAFETY: `out` and the error buffer are valid.
    call("autocast is_cache_enabled", |err, len| unsafe {
        shim::fulmen_cxx_autocast_is_cache_enabled(&mut out, err, len)
    })?;
    Ok(out != 0)
}

fn set_cache_enabled(enabled: bool) -> Result<()> {
    // SAFETY: the error buffer is valid.
    call("autocast set_cache_enabled", |err, len| unsafe {
        shim::fulmen_cxx_autocast_set_cache_enabled(c_int::from(enabled), err, len)
    })
}

fn nesting(increment: bool) -> Result<i32> {
    let mut out: c_int = 0;
    // SAFETY: `out` and the error buffer are valid.
    call("autocast nesting", |err, len| unsafe {
        if increment {
            shim::fulmen_cxx_autocast_increment_nesting(&mut out, err, len)
        } else {
            shim::fulmen_cxx_autocast_decrement_nesting(&mut out, err, len)
        }
    })?;
    Ok(out)
}

/// An autocast region on one device type of the current thread; the
/// previous autocast state comes back when it drops.
#[derive(Debug)]
pub struct AutocastGuard {
    device: DeviceType,
    prev_enabled: bool,
    prev_dtype: c_int,
    prev_cache_enabled: bool,
    /// Autocast state is thread-local: keep the guard on its thread.
    _thread_bound: PhantomData<*const ()>,
}

impl AutocastGuard {
    /// Enters an autocast region running eligible ops on `device` in
    /// `dtype` (`Kind::Half` or `Kind::BFloat16`), as
    /// `torch.autocast(device, dtype)`.
    pub fn enter(device: DeviceType, dtype: Kind) -> Result<AutocastGuard> {
        Self::enter_with(device, dtype, true)
    }

    /// Enters a region with autocast enabled or explicitly disabled
    /// (`torch.autocast(..., enabled=False)` turns it off inside a region).
    pub fn enter_with(device: DeviceType, dtype: Kind, enabled: bool) -> Result<AutocastGuard> {
        let fast = c10_autocast_dtype(dtype)?;
        if !is_available(device) {
            return Err(Error::new(
                crate::error::ErrorCode::Unsupported,
                format!("autocast is not available for {device:?} in this libtorch"),
            ));
        }
        let guard = AutocastGuard {
            device,
            prev_enabled: is_enabled(device)?,
            prev_dtype: raw_dtype(device)?,
            prev_cache_enabled: cache_enabled()?,
            _thread_bound: PhantomData,
        };
        set_enabled(device, enabled)?;
        if let Err(e) = set_raw_dtype(device, fast).and_then(|()| nesting(true)) {
            // The nesting depth was not incremented, so Drop must not run:
            // put the switch and dtype back by hand.
            let _ = set_enabled(device, guard.prev_enabled);
            let _ = set_raw_dtype(device, guard.prev_dtype);
            std::mem::forget(guard);
            return Err(e);
        }
        Ok(guard)
    }

    /// The device type this region covers.
    pub fn device(&self) -> DeviceType {
        self.device
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // torch.autocast.__exit__: clear the cache when leaving the outermost
        // region, then restore. These calls only fail for device types
        // enter() already validated, so errors are ignored here.
        if let Ok(0) = nesting(false) {
            let _ = call("autocast clear_cache", |err, len| {
                // SAFETY: the error buffer is valid.
                unsafe { shim::fulmen_cxx_autocast_clear_cache(err, len) }
            });
        }
        let _ = set_enabled(self.device, self.prev_enabled);
        let _ = set_raw_dtype(self.device, self.prev_dtype);
        let _ = set_cache_enabled(self.prev_cache_enabled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Tensor};

    #[test]
    fn bf16_autocast_on_cpu_casts_linear_and_restores_state() {
        assert!(is_available(DeviceType::Cpu));
        let before_dtype = dtype(DeviceType::Cpu).unwrap();
        assert!(!is_enabled(DeviceType::Cpu).unwrap());
        let x = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([2, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let b = Tensor::zeros([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        {
            let _guard = AutocastGuard::enter(DeviceType::Cpu, Kind::BFloat16).unwrap();
            assert!(is_enabled(DeviceType::Cpu).unwrap());
            assert_eq!(dtype(DeviceType::Cpu).unwrap(), Kind::BFloat16);
            let y = x.f_linear(&w, Some(&b)).unwrap();
            assert_eq!(y.kind(), Kind::BFloat16);
            assert_eq!(w.kind(), Kind::Float);
            // Gradients flow back to the fp32 weights in fp32.
            y.f_to_kind(Kind::Float).unwrap().sum(Kind::Float).backward();
            assert_eq!(w.grad().kind(), Kind::Float);
            {
                let _off = AutocastGuard::enter_with(DeviceType::Cpu, Kind::BFloat16, false).unwrap();
                assert_eq!(x.f_linear(&w, Some(&b)).unwrap().kind(), Kind::Float);
            }
            assert!(is_enabled(DeviceType::Cpu).unwrap());
            assert_eq!(x.f_linear(&w, Some(&b)).unwrap().kind(), Kind::BFloat16);
        }
        assert!(!is_enabled(DeviceType::Cpu).unwrap());
        assert_eq!(dtype(DeviceType::Cpu).unwrap(), before_dtype);
        assert_eq!(x.f_linear(&w, Some(&b)).unwrap().kind(), Kind::Float);
    }

    #[test]
    fn fp16_autocast_on_cpu() {
        let x = Tensor::randn([2, 3], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([5, 3], (Kind::Float, Device::Cpu));
        let guard = AutocastGuard::enter(DeviceType::Cpu, Kind::Half).unwrap();
        assert_eq!(guard.device(), DeviceType::Cpu);
        assert_eq!(x.f_linear::<Tensor>(&w, None).unwrap().kind(), Kind::Half);
        drop(guard);
        assert!(!is_enabled(DeviceType::Cpu).unwrap());
    }

    #[test]
    fn rejects_unsupported_dtypes() {
        let err = AutocastGuard::enter(DeviceType::Cpu, Kind::Float).unwrap_err();
        assert!(err.message.contains("float16 and bfloat16"), "{}", err.message);
        assert!(!is_enabled(DeviceType::Cpu).unwrap());
    }
}

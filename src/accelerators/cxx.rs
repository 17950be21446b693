//! The accelerator queries of `csrc/accelerators.cpp` (CUDA devices and
//! memory).
use crate::error::{Error, Result};
use crate::shim::{self, call};
use libc::size_t;

/// Whether the CUDA part of the shim was compiled (libtorch has CUDA).
pub(crate) fn cuda_compiled() -> bool {
    // SAFETY: takes no arguments and cannot fail.
    unsafe { shim::fulmen_cxx_cuda_compiled() != 0 }
}

/// A CUDA device index as the shim takes it.
fn cuda_index(index: usize) -> Result<i64> {
    i64::try_from(index).map_err(|_| Error::invalid(format!("CUDA device index {index} is too large")))
}

/// `torch.cuda.set_device(index)` on the calling thread.
pub(crate) fn cuda_set_device(index: usize) -> Result<()> {
    let index = cuda_index(index)?;
    // SAFETY: the error buffer is valid for its length.
    call("cuda set_device", |err, len| unsafe { shim::fulmen_cxx_cuda_set_device(index, err, len) })
}

/// `torch.cuda.set_sync_debug_mode(mode)`: 0 off, 1 warn, 2 error at each
/// operation that makes the host wait for a CUDA device.
pub(crate) fn cuda_set_sync_debug_mode(mode: i32) -> Result<()> {
    // SAFETY: the error buffer is valid for its length.
    call("cuda set_sync_debug_mode", |err, len| unsafe { shim::fulmen_cxx_cuda_set_sync_debug_mode(mode, err, len) })
}

/// `torch.cuda.empty_cache()`.
pub(crate) fn cuda_empty_cache() -> Result<()> {
    // SAFETY: the error buffer is valid for its length.
    call("cuda empty_cache", |err, len| unsafe { shim::fulmen_cxx_cuda_empty_cache(err, len) })
}

/// `torch.cuda.get_rng_state(index)`: the default CUDA generator's state
/// (a uint8 tensor on the CPU).
pub(crate) fn cuda_rng_state(index: usize) -> Result<tch::Tensor> {
    let index = cuda_index(index)?;
    let mut out: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: `out` receives a heap `at::Tensor*`, which `from_ptr` owns.
    call("get CUDA RNG state", |err, len| unsafe { shim::fulmen_cxx_cuda_rng_get_state(index, &mut out, err, len) })?;
    Ok(unsafe { tch::Tensor::from_ptr(out.cast()) })
}

/// `torch.cuda.set_rng_state(state, index)`.
pub(crate) fn set_cuda_rng_state(index: usize, state: &tch::Tensor) -> Result<()> {
    let index = cuda_index(index)?;
    // SAFETY: `as_ptr` is the `at::Tensor*` tch holds; the shim only reads it.
    call("set CUDA RNG state", |err, len| unsafe {
        shim::fulmen_cxx_cuda_rng_set_state(index, state.as_ptr().cast(), err, len)
    })
}

/// `torch.cuda.memory_stats(index)`: the caching allocator's statistics.
pub(crate) fn cuda_memory_stats(index: usize) -> Result<Vec<(String, f64)>> {
    let index = cuda_index(index)?;
    let mut needed: size_t = 0;
    // SAFETY: a NULL buffer of length 0 only asks for the size; `needed` and
    // the error buffer are valid.
    call("cuda memory_stats", |err, len| unsafe {
        shim::fulmen_cxx_cuda_memory_stats(index, std::ptr::null_mut(), 0, &mut needed, err, len)
    })?;
    // The statistics may grow between the two calls; retry with more room.
    for _ in 0..4 {
        let mut buf = vec![0u8; needed.max(1) + 256];
        let buf_len = buf.len();
        let mut again: size_t = 0;
        // SAFETY: `buf` is valid for `buf_len` bytes; `again` and the error
        // buffer are valid.
        call("cuda memory_stats", |err, len| unsafe {
            shim::fulmen_cxx_cuda_memory_stats(index, buf.as_mut_ptr().cast(), buf_len, &mut again, err, len)
        })?;
        if again <= buf_len {
            let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
            return parse_stat_lines(&String::from_utf8_lossy(&buf[..end]));
        }
        needed = again;
    }
    Err(Error::state("cuda memory_stats: the statistics kept growing while being read"))
}

/// Parses the shim's `"<name> <value>\n"` lines.
fn parse_stat_lines(text: &str) -> Result<Vec<(String, f64)>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (name, value) = line
                .rsplit_once(' ')
                .ok_or_else(|| Error::format(format!("cuda memory_stats: malformed line {line:?}")))?;
            let value: f64 =
                value.parse().map_err(|_| Error::format(format!("cuda memory_stats: malformed value in {line:?}")))?;
            Ok((name.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn stat_lines_parse() {
        let stats = parse_stat_lines("allocated_bytes.all.current 512\nnum_ooms 0\n").unwrap();
        assert_eq!(stats, vec![("allocated_bytes.all.current".to_string(), 512.0), ("num_ooms".to_string(), 0.0)]);
        assert!(parse_stat_lines("garbage").is_err());
    }

    #[test]
    fn cuda_shim_reports_not_compiled_on_cpu_libtorch() {
        if cuda_compiled() {
            return;
        }
        let err = cuda_set_device(0).unwrap_err();
        assert_eq!(err.code, ErrorCode::Unsupported);
        assert!(err.message.contains("not compiled with CUDA"), "{}", err.message);
        assert!(cuda_memory_stats(0).unwrap_err().message.contains("not compiled with CUDA"));
        assert!(cuda_empty_cache().is_err());
    }
}

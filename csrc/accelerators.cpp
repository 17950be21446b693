// Device queries of fulmen's accelerators (src/accelerators/cxx.rs) that tch
// does not expose: CUDA device selection and caching-allocator statistics
// (torch_xla's backend is csrc/xla_runtime.cpp's).
//
// The CUDA part is compiled only when build.rs defines FULMEN_WITH_CUDA (it
// does so when <libtorch>/lib/libtorch_cuda.so exists and the CUDA runtime
// headers are found); otherwise those functions return
// FULMEN_CXX_UNSUPPORTED with a "not compiled with CUDA" message.
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "fulmen_cxx.h"

#ifdef FULMEN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace {

#ifdef FULMEN_WITH_CUDA
c10::DeviceIndex checked_cuda_index(int64_t index) {
  int64_t count = static_cast<int64_t>(c10::cuda::device_count());
  TORCH_CHECK(index >= 0 && index < count, "CUDA device ", index, " requested but ", count,
              " CUDA device(s) are available");
  return static_cast<c10::DeviceIndex>(index);
}

// Appends torch.cuda.memory_stats-style lines "<name> <value>\n".
void append_stat(std::ostringstream& out, const std::string& name, const c10::CachingAllocator::Stat& stat) {
  out << name << ".current " << stat.current << "\n";
  out << name << ".peak " << stat.peak << "\n";
  out << name << ".allocated " << stat.allocated << "\n";
  out << name << ".freed " << stat.freed << "\n";
}

void append_stat_array(std::ostringstream& out, const std::string& name,
                       const c10::CachingAllocator::StatArray& stats) {
  static const char* pools[] = {"all", "small_pool", "large_pool"};
  for (size_t i = 0; i < stats.size() && i < 3; ++i) {
    append_stat(out, name + "." + pools[i], stats[i]);
  }
}
#endif

#ifndef FULMEN_WITH_CUDA
int not_compiled_with_cuda(char* err, size_t err_len) {
  fulmen_cxx::write_message(
      "fulmen was not compiled with CUDA: the libtorch it was built against has no libtorch_cuda "
      "(or the CUDA runtime headers were not found at build time)",
      err, err_len);
  return FULMEN_CXX_UNSUPPORTED;
}
#endif

}  // namespace

extern "C" {

// 1 when the CUDA part of this shim was compiled, else 0.
int fulmen_cxx_cuda_compiled(void) {
#ifdef FULMEN_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

// torch.cuda.set_sync_debug_mode: at each operation that makes the host
// wait for a CUDA device, 0 nothing, 1 a warning, 2 an error. Process-wide.
int fulmen_cxx_cuda_set_sync_debug_mode(int mode, char* err, size_t err_len) {
#ifdef FULMEN_WITH_CUDA
  FULMEN_CXX_TRY
  TORCH_CHECK(mode >= 0 && mode <= 2, "sync debug mode ", mode, " is not 0, 1 or 2");
  c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(mode));
  FULMEN_CXX_CATCH(err, err_len)
#else
  (void)mode;
  return not_compiled_with_cuda(err, err_len);
#endif
}

// Makes CUDA device `index` current on the calling thread (torch.cuda.set_device).
int fulmen_cxx_cuda_set_device(int64_t index, char* err, size_t err_len) {
#ifdef FULMEN_WITH_CUDA
  FULMEN_CXX_TRY
  c10::cuda::set_device(checked_cuda_index(index));
  FULMEN_CXX_CATCH(err, err_len)
#else
  (void)index;
  return not_compiled_with_cuda(err, err_len);
#endif
}

// Releases the unused cached blocks of the CUDA caching allocator
// (torch.cuda.empty_cache).
int fulmen_cxx_cuda_empty_cache(char* err, size_t err_len) {
#ifdef FULMEN_WITH_CUDA
  FULMEN_CXX_TRY
  c10::cuda::CUDACachingAllocator::emptyCache();
  FULMEN_CXX_CATCH(err, err_len)
#else
  return not_compiled_with_cuda(err, err_len);
#endif
}

// The state of CUDA device `index`'s default generator
// (torch.cuda.get_rng_state(index)) as a new uint8 tensor, handed over as a
// heap `at::Tensor*`.
int fulmen_cxx_cuda_rng_get_state(int64_t index, void** out, char* err, size_t err_len) {
#ifdef FULMEN_WITH_CUDA
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "cuda_rng_get_state: out is NULL");
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(checked_cuda_index(index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  *out = new at::Tensor(gen.get_state());
  FULMEN_CXX_CATCH(err, err_len)
#else
  (void)index;
  (void)out;
  return not_compiled_with_cuda(err, err_len);
#endif
}

// Restores CUDA device `index`'s default generator from `state` (an
// `at::Tensor*` borrowed from the caller; torch.cuda.set_rng_state).
int fulmen_cxx_cuda_rng_set_state(int64_t index, const void* state, char* err, size_t err_len) {
#ifdef FULMEN_WITH_CUDA
  FULMEN_CXX_TRY
  const at::Tensor& t = *static_cast<const at::Tensor*>(state);
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(checked_cuda_index(index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
  FULMEN_CXX_CATCH(err, err_len)
#else
  (void)index;
  (void)state;
  return not_compiled_with_cuda(err, err_len);
#endif
}

// Writes the caching-allocator statistics of CUDA device `index` into `buf`
// as lines "<name> <integer>\n", named as torch.cuda.memory_stats names them
// ("allocated_bytes.all.current", "num_ooms", ...), NUL-terminated. *needed
// receives the size the text needs including its NUL; when buf_len is
// smaller, nothing is written and the call still succeeds (call again with a
// larger buffer).
int fulmen_cxx_cuda_memory_stats(int64_t index, char* buf, size_t buf_len, size_t* needed, char* err,
                                 size_t err_len) {
#ifdef FULMEN_WITH_CUDA
  FULMEN_CXX_TRY
  TORCH_CHECK(needed != nullptr, "cuda_memory_stats: needed is NULL");
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(checked_cuda_index(index));
  std::ostringstream out;
  append_stat_array(out, "active", stats.active);
  append_stat_array(out, "active_bytes", stats.active_bytes);
  append_stat_array(out, "allocated_bytes", stats.allocated_bytes);
  append_stat_array(out, "allocation", stats.allocation);
  append_stat_array(out, "inactive_split", stats.inactive_split);
  append_stat_array(out, "inactive_split_bytes", stats.inactive_split_bytes);
  out << "max_split_size " << stats.max_split_size << "\n";
  out << "num_alloc_retries " << stats.num_alloc_retries << "\n";
  out << "num_device_alloc " << stats.num_device_alloc << "\n";
  out << "num_device_free " << stats.num_device_free << "\n";
  out << "num_ooms " << stats.num_ooms << "\n";
  out << "num_sync_all_streams " << stats.num_sync_all_streams << "\n";
  append_stat(out, "oversize_allocations", stats.oversize_allocations);
  append_stat(out, "oversize_segments", stats.oversize_segments);
  append_stat_array(out, "requested_bytes", stats.requested_bytes);
  append_stat_array(out, "reserved_bytes", stats.reserved_bytes);
  append_stat_array(out, "segment", stats.segment);
  std::string text = out.str();
  *needed = text.size() + 1;
  if (buf != nullptr && buf_len >= text.size() + 1) {
    std::memcpy(buf, text.c_str(), text.size() + 1);
  }
  FULMEN_CXX_CATCH(err, err_len)
#else
  (void)index;
  (void)buf;
  (void)buf_len;
  if (needed != nullptr) {
    *needed = 0;
  }
  return not_compiled_with_cuda(err, err_len);
#endif
}

}  // extern "C"

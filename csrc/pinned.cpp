// Pinned (page-locked) host memory for batches bound for a GPU:
// `Tensor::pin_memory()` and `is_pinned()` without the device argument,
// which tch passes and libtorch deprecates (with a warning per call).
#include "fulmen_cxx.h"

#include <ATen/core/Tensor.h>

extern "C" {

// *out = 1 when `t` (an `at::Tensor*`) is in pinned memory, else 0.
int fulmen_cxx_is_pinned(const void* t, int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "is_pinned: out is NULL");
  *out = static_cast<const at::Tensor*>(t)->is_pinned() ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = a copy of `t` in pinned memory, a new heap `at::Tensor*`.
int fulmen_cxx_pin_memory(const void* t, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "pin_memory: out is NULL");
  *out = new at::Tensor(static_cast<const at::Tensor*>(t)->pin_memory());
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

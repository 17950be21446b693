// XLA's own all-reduce (src/accelerators/xla_collectives.rs): torch_xla's
// kernel of c10d's functional `_c10d_functional::all_reduce`, called
// through c10's dispatcher, so no Python runs. The reduction joins the
// device's lazy graph and runs with it, across every device of the PJRT
// job (torch_xla's kernel reduces over all replicas; the group name is
// not read), as `xm.all_reduce` does.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <string>

#include "fulmen_cxx.h"

extern "C" {

// Reduces `t` (an `at::Tensor*` on an XLA device) in place over the XLA
// job's devices with `op` ("sum", "mul", "min" or "max", torch_xla's
// names), then multiplies it by `scale` (1 leaves it). Lazy: the result is
// computed when the device's graph runs. FULMEN_CXX_UNSUPPORTED when this
// libtorch has no functional all-reduce or no XLA kernel registered for it.
int fulmen_cxx_xla_all_reduce(void* t, const char* op, double scale, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(t != nullptr && op != nullptr, "xla all_reduce: NULL argument");
  at::Tensor& x = *static_cast<at::Tensor*>(t);
  TORCH_CHECK(x.device().type() == c10::DeviceType::XLA, "xla all_reduce: the tensor is on ", x.device(),
              ", not an XLA device");
  auto handle = c10::Dispatcher::singleton().findSchema(c10::OperatorName("_c10d_functional::all_reduce", ""));
  if (!handle.has_value() || !handle->hasKernelForDispatchKey(c10::DispatchKey::XLA)) {
    fulmen_cxx::write_message(
        handle.has_value()
            ? "xla all_reduce: torch_xla registered no XLA kernel for _c10d_functional::all_reduce"
            : "xla all_reduce: this libtorch has no _c10d_functional::all_reduce (built without distributed)",
        err, err_len);
    return FULMEN_CXX_UNSUPPORTED;
  }
  torch::jit::Stack stack;
  stack.emplace_back(x);
  stack.emplace_back(std::string(op));
  stack.emplace_back(std::string());
  handle->callBoxed(&stack);
  TORCH_CHECK(stack.size() == 1 && stack[0].isTensor(), "xla all_reduce: the kernel returned no tensor");
  at::Tensor reduced = stack[0].toTensor();
  at::NoGradGuard no_grad;
  x.copy_(scale == 1.0 ? reduced : reduced.mul(scale));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

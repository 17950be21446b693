// What fully sharded data parallel (src/strategies/fsdp/) needs below tch:
// the storage under a unit's gathered parameters freed after use and
// allocated again before the backward needs it (torch's FSDP does the same
// with `untyped_storage().resize_()`), a hook telling fulmen when the
// gradient of a unit's output arrives, and a parameter's `.grad` set or
// cleared.
#include "fulmen_cxx.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>

namespace {

// A Rust hook's context, dropped (once) with the last copy of the hook.
struct HookContext {
  HookContext(void (*fire_fn)(void*), void* context, void (*drop_fn)(void*))
      : fire(fire_fn), ctx(context), drop(drop_fn) {}
  HookContext(const HookContext&) = delete;
  HookContext& operator=(const HookContext&) = delete;
  ~HookContext() { drop(ctx); }
  void (*fire)(void*);
  void* ctx;
  void (*drop)(void*);
};

// A Rust hook run after a gradient is accumulated into a leaf's `.grad`.
struct PostAccumulate : torch::autograd::PostAccumulateGradHook {
  explicit PostAccumulate(std::shared_ptr<HookContext> context) : hook(std::move(context)) {}
  void operator()(const torch::autograd::Variable&) override { hook->fire(hook->ctx); }
  std::shared_ptr<HookContext> hook;
};

}  // namespace

extern "C" {

// Resizes the storage under `t` (an `at::Tensor*`) to `nbytes` in place:
// 0 frees its memory; another size allocates fresh, uninitialised memory
// with the storage's own allocator. Every tensor viewing the storage sees
// the change; the caller keeps their views inside the new size.
int fulmen_cxx_storage_resize(const void* t, size_t nbytes, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const at::Tensor& tensor = *static_cast<const at::Tensor*>(t);
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  TORCH_CHECK(impl != nullptr, "storage_resize: the tensor has no storage");
  TORCH_CHECK(impl->resizable(), "storage_resize: the storage is not resizable");
  if (nbytes == impl->nbytes()) {
    return FULMEN_CXX_OK;
  }
  if (nbytes == 0) {
    impl->set_data_ptr_noswap(c10::DataPtr(nullptr, impl->device()));
  } else {
    c10::Allocator* alloc = impl->allocator();
    TORCH_CHECK(alloc != nullptr, "storage_resize: the storage has no allocator");
    // The caching allocators allocate on the current device.
    c10::DeviceGuard guard(impl->device());
    impl->set_data_ptr_noswap(alloc->allocate(nbytes));
  }
  impl->set_nbytes(nbytes);
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = the size in bytes of the storage under `t`.
int fulmen_cxx_storage_nbytes(const void* t, size_t* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "storage_nbytes: out is NULL");
  *out = static_cast<const at::Tensor*>(t)->storage().nbytes();
  FULMEN_CXX_CATCH(err, err_len)
}

// Calls `fire(ctx)` each time the gradient of `t` is computed in a
// backward pass (torch's `Tensor.register_hook`, the gradient unchanged).
// `drop(ctx)` runs exactly once: when the hook is destroyed with `t`'s
// graph, or before this returns an error. `t` must require grad.
int fulmen_cxx_register_grad_hook(const void* t, void (*fire)(void*), void* ctx, void (*drop)(void*), char* err,
                                  size_t err_len) {
  std::shared_ptr<HookContext> hook;
  try {
    hook = std::make_shared<HookContext>(fire, ctx, drop);
  } catch (...) {
    drop(ctx);
    fulmen_cxx::write_message("register_grad_hook: out of memory", err, err_len);
    return FULMEN_CXX_ERROR;
  }
  FULMEN_CXX_TRY
  const at::Tensor& tensor = *static_cast<const at::Tensor*>(t);
  TORCH_CHECK(tensor.requires_grad(), "register_grad_hook: the tensor does not require grad");
  tensor.register_hook([hook](const at::Tensor&) { hook->fire(hook->ctx); });
  FULMEN_CXX_CATCH(err, err_len)
}

// Calls `fire(ctx)` after each backward pass accumulated a gradient into
// the `.grad` of the leaf `t` (torch's register_post_accumulate_grad_hook;
// `t` has one such hook, which replaces any earlier). `drop(ctx)` runs
// exactly once: when the hook is replaced or cleared, or before this
// returns an error. `fire` NULL clears the hook (`ctx` and `drop` unused).
// A leaf that does not require grad yet keeps the hook for when it does.
int fulmen_cxx_set_post_accumulate_hook(const void* t, void (*fire)(void*), void* ctx, void (*drop)(void*), char* err,
                                        size_t err_len) {
  std::shared_ptr<HookContext> hook;
  if (fire != nullptr) {
    try {
      hook = std::make_shared<HookContext>(fire, ctx, drop);
    } catch (...) {
      drop(ctx);
      fulmen_cxx::write_message("set_post_accumulate_hook: out of memory", err, err_len);
      return FULMEN_CXX_ERROR;
    }
  }
  FULMEN_CXX_TRY
  const at::Tensor& tensor = *static_cast<const at::Tensor*>(t);
  if (hook == nullptr) {
    torch::autograd::impl::set_post_acc_grad_hooks(tensor, nullptr);
    return FULMEN_CXX_OK;
  }
  TORCH_CHECK(tensor.is_leaf(), "set_post_accumulate_hook: the tensor is not a leaf");
  torch::autograd::impl::set_post_acc_grad_hooks(tensor, std::make_unique<PostAccumulate>(std::move(hook)));
  FULMEN_CXX_CATCH(err, err_len)
}

// Sets the `.grad` of `t` to `grad` (an `at::Tensor*`; NULL clears it, as
// `zero_grad(set_to_none=True)` does).
int fulmen_cxx_set_grad(const void* t, const void* grad, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const at::Tensor& tensor = *static_cast<const at::Tensor*>(t);
  if (grad == nullptr) {
    tensor.mutable_grad().reset();
  } else {
    tensor.mutable_grad() = *static_cast<const at::Tensor*>(grad);
  }
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

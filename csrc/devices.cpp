// Tensors on any libtorch device type. tch names only the CPU, CUDA, MPS
// and Vulkan (its Tensor::device() reports every other type as MPS), so the
// moves to and the queries of XPU, HPU, MTIA, IPU, Meta and PrivateUse1
// devices go through here. Devices cross as (c10::DeviceType code, index).
#include "fulmen_cxx.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_has_compatible_shallow_copy_type.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <mutex>

namespace {

c10::Device device_from(int type, int64_t index) {
  TORCH_CHECK(type >= 0 && type < static_cast<int>(c10::COMPILE_TIME_MAX_DEVICE_TYPES), type,
              " is not a libtorch device type");
  auto t = static_cast<c10::DeviceType>(type);
  TORCH_CHECK(c10::isValidDeviceType(t), type, " is not a libtorch device type");
  TORCH_CHECK(index >= -1 && index <= INT8_MAX, "device index ", index, " is out of range");
  return c10::Device(t, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

extern "C" {

// *out = t.to(device(type, index), non_blocking): a new heap at::Tensor*.
int fulmen_cxx_tensor_to_device(const void* t, int type, int64_t index, int non_blocking, void** out, char* err,
                                size_t err_len) {
  FULMEN_CXX_TRY
  const auto& src = *static_cast<const at::Tensor*>(t);
  *out = new at::Tensor(src.to(device_from(type, index), non_blocking != 0));
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = a new tensor of `shape` (`ndim` sizes, each >= 0) on the device
// of `device_like` with the dtype of `dtype_like`, made there directly (no
// copy through the CPU): uninitialised, or zeros with `zeroed`. A new heap
// at::Tensor*.
int fulmen_cxx_tensor_new_on_device_of(const void* device_like, const void* dtype_like, const int64_t* shape,
                                       size_t ndim, int zeroed, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const auto& d = *static_cast<const at::Tensor*>(device_like);
  const auto& k = *static_cast<const at::Tensor*>(dtype_like);
  TORCH_CHECK(ndim <= 64 && (ndim == 0 || shape != nullptr), "a shape of ", ndim, " dimensions");
  at::IntArrayRef sizes(shape, ndim);
  auto options = at::TensorOptions().device(d.device()).dtype(k.scalar_type());
  *out = new at::Tensor(zeroed != 0 ? at::zeros(sizes, options) : at::empty(sizes, options));
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = what makes `t` one tensor among its handles: the address of its
// first element (*is_data = 1), or, where that cannot be read (no storage,
// a null data pointer as on the meta device, or a data pointer libtorch
// refuses to give, as for torch_xla's functionalized tensors), the address
// of its TensorImpl (*is_data = 0); 0 for an undefined tensor. With
// `by_impl`, always the TensorImpl's address (the handles of one tensor,
// not the views of one storage).
int fulmen_cxx_tensor_identity(const void* t, int by_impl, uintptr_t* out, int* is_data, char* err,
                               size_t err_len) {
  FULMEN_CXX_TRY
  const auto& x = *static_cast<const at::Tensor*>(t);
  *out = 0;
  *is_data = 0;
  if (x.defined()) {
    auto* impl = x.unsafeGetTensorImpl();
    uintptr_t data = 0;
    // Meta tensors: a null data pointer plus the offset, not an address.
    if (by_impl == 0 && impl->has_storage() && !x.is_meta() && x.device().type() != c10::DeviceType::XLA) {
      try {
        data = reinterpret_cast<uintptr_t>(x.data_ptr());
      } catch (const c10::Error&) {
        data = 0;
      }
    }
    *is_data = data != 0 ? 1 : 0;
    *out = data != 0 ? data : reinterpret_cast<uintptr_t>(impl);
    // A meta tensor is its storage (shared with its detached copies) at
    // its offset.
    if (by_impl == 0 && x.is_meta() && impl->has_storage()) {
      *out = reinterpret_cast<uintptr_t>(x.storage().unsafeGetStorageImpl()) +
             static_cast<uintptr_t>(x.storage_offset()) * x.element_size();
    }
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Makes the handle `dst` hold `src` (its TensorImpl replaced: PyTorch's
// `module._parameters[name] = Parameter(...)` where `param.data = ...`
// cannot change the tensor's type, as between the CPU and XLA).
int fulmen_cxx_tensor_assign(void* dst, const void* src, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *static_cast<at::Tensor*>(dst) = *static_cast<const at::Tensor*>(src);
  FULMEN_CXX_CATCH(err, err_len)
}

// How many handles hold `t`'s TensorImpl (`use_count`), whether it is a
// view of another tensor, its StorageImpl (0 without storage) and how many
// TensorImpls hold that.
int fulmen_cxx_tensor_sharing(const void* t, size_t* use_count, int* is_view, uintptr_t* storage,
                              size_t* storage_count, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const auto& x = *static_cast<const at::Tensor*>(t);
  *use_count = x.defined() ? x.use_count() : 0;
  *is_view = x.defined() && x.is_view() ? 1 : 0;
  const bool stored = x.defined() && x.unsafeGetTensorImpl()->has_storage();
  *storage = stored ? reinterpret_cast<uintptr_t>(x.storage().unsafeGetStorageImpl()) : 0;
  *storage_count = stored ? x.storage().use_count() : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Whether `param.data = data` can keep the tensor (libtorch's
// `_has_compatible_shallow_copy_type`).
int fulmen_cxx_tensor_set_data_compatible(const void* t, const void* data, int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const auto& a = *static_cast<const at::Tensor*>(t);
  const auto& b = *static_cast<const at::Tensor*>(data);
  // The dispatched op set_data itself asks, which a backend may override
  // (TensorImpl's own answer knows no PrivateUse1).
  *out = at::_has_compatible_shallow_copy_type(a, b) ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// The device `t` is on (its c10 type code and index; -1 for none).
int fulmen_cxx_tensor_device(const void* t, int* type, int64_t* index, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto d = static_cast<const at::Tensor*>(t)->device();
  *type = static_cast<int>(d.type());
  *index = static_cast<int64_t>(d.index());
  FULMEN_CXX_CATCH(err, err_len)
}

// The lower-case name of a device type ("xpu"; PrivateUse1 under its
// registered name, "privateuseone" before one is registered), NUL-terminated.
int fulmen_cxx_device_type_name(int type, char* buf, size_t buf_len, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  fulmen_cxx::write_message(c10::DeviceTypeName(device_from(type, -1).type(), true), buf, buf_len);
  FULMEN_CXX_CATCH(err, err_len)
}

// How many devices of `type` a registered backend reports (0 without one).
int fulmen_cxx_device_count(int type, int64_t* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto t = device_from(type, -1).type();
  *out = c10::impl::hasDeviceGuardImpl(t) ? c10::impl::getDeviceGuardImpl(t)->deviceCount() : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Makes (type, index) the calling thread's current device of its type.
int fulmen_cxx_device_set_current(int type, int64_t index, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto d = device_from(type, index);
  TORCH_CHECK(c10::impl::hasDeviceGuardImpl(d.type()), "no backend is registered for ",
              c10::DeviceTypeName(d.type(), true));
  c10::impl::getDeviceGuardImpl(d.type())->setDevice(d);
  FULMEN_CXX_CATCH(err, err_len)
}

// Blocks until the work queued on device (type, index) is done.
int fulmen_cxx_device_synchronize(int type, int64_t index, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto d = device_from(type, index);
  TORCH_CHECK(c10::impl::hasDeviceGuardImpl(d.type()), "no backend is registered for ",
              c10::DeviceTypeName(d.type(), true));
  c10::impl::getDeviceGuardImpl(d.type())->synchronizeDevice(d.index());
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = the state of libtorch's default generator for device (type,
// index), a uint8 CPU tensor (a new heap at::Tensor*).
int fulmen_cxx_device_rng_state(int type, int64_t index, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto gen = at::globalContext().defaultGenerator(device_from(type, index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  *out = new at::Tensor(gen.get_state());
  FULMEN_CXX_CATCH(err, err_len)
}

// Restores a state fulmen_cxx_device_rng_state returned.
int fulmen_cxx_device_set_rng_state(int type, int64_t index, const void* state, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto gen = at::globalContext().defaultGenerator(device_from(type, index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(*static_cast<const at::Tensor*>(state));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

// Autocast controls for fulmen's mixed precision (src/precision/autocast.rs).
//
// tch only exposes the legacy CUDA autocast switch; these functions expose
// the per-device-type API of ATen (`at::autocast::*(at::DeviceType)`), which
// torch.autocast's __enter__/__exit__ use. Device types and dtypes are passed
// as the integer values of `c10::DeviceType` and `c10::ScalarType`. Autocast
// state is thread-local: each call acts on the calling thread.
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "fulmen_cxx.h"

namespace {

c10::DeviceType device_type_from(int value) {
  TORCH_CHECK(value >= 0 && value < static_cast<int>(c10::COMPILE_TIME_MAX_DEVICE_TYPES),
              "autocast: ", value, " is not a c10::DeviceType");
  auto type = static_cast<c10::DeviceType>(value);
  TORCH_CHECK(at::autocast::is_autocast_available(type), "autocast is not available for device type ",
              c10::DeviceTypeName(type, true));
  return type;
}

c10::ScalarType scalar_type_from(int value) {
  TORCH_CHECK(value >= 0 && value < static_cast<int>(c10::ScalarType::NumOptions), "autocast: ", value,
              " is not a c10::ScalarType");
  return static_cast<c10::ScalarType>(value);
}

}  // namespace

extern "C" {

// *out = 1 when libtorch supports autocast on `device_type`, else 0.
int fulmen_cxx_autocast_is_available(int device_type, int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "autocast_is_available: out is NULL");
  *out = 0;
  if (device_type >= 0 && device_type < static_cast<int>(c10::COMPILE_TIME_MAX_DEVICE_TYPES)) {
    *out = at::autocast::is_autocast_available(static_cast<c10::DeviceType>(device_type)) ? 1 : 0;
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = whether autocast is enabled for `device_type` on this thread.
int fulmen_cxx_autocast_is_enabled(int device_type, int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "autocast_is_enabled: out is NULL");
  *out = at::autocast::is_autocast_enabled(device_type_from(device_type)) ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Enables (enabled != 0) or disables autocast for `device_type`.
int fulmen_cxx_autocast_set_enabled(int device_type, int enabled, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::autocast::set_autocast_enabled(device_type_from(device_type), enabled != 0);
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = the c10::ScalarType autocast uses for `device_type`.
int fulmen_cxx_autocast_get_dtype(int device_type, int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "autocast_get_dtype: out is NULL");
  *out = static_cast<int>(at::autocast::get_autocast_dtype(device_type_from(device_type)));
  FULMEN_CXX_CATCH(err, err_len)
}

// Sets the c10::ScalarType autocast uses for `device_type`.
int fulmen_cxx_autocast_set_dtype(int device_type, int scalar_type, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::autocast::set_autocast_dtype(device_type_from(device_type), scalar_type_from(scalar_type));
  FULMEN_CXX_CATCH(err, err_len)
}

// Increments the autocast nesting depth; *out = the new depth.
int fulmen_cxx_autocast_increment_nesting(int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  int depth = at::autocast::increment_nesting();
  if (out != nullptr) {
    *out = depth;
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Decrements the autocast nesting depth; *out = the new depth.
int fulmen_cxx_autocast_decrement_nesting(int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  int depth = at::autocast::decrement_nesting();
  if (out != nullptr) {
    *out = depth;
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Clears the cache of casted weights (done when the outermost region exits).
int fulmen_cxx_autocast_clear_cache(char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::autocast::clear_cache();
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = whether the autocast weight cache is enabled.
int fulmen_cxx_autocast_is_cache_enabled(int* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "autocast_is_cache_enabled: out is NULL");
  *out = at::autocast::is_autocast_cache_enabled() ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Enables or disables the autocast weight cache.
int fulmen_cxx_autocast_set_cache_enabled(int enabled, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::autocast::set_autocast_cache_enabled(enabled != 0);
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

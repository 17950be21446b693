// Shared helpers of fulmen's C++ shims (csrc/*.cpp).
//
// Every shim function is `extern "C"`, returns an int status and never lets
// a C++ exception escape: FULMEN_CXX_TRY / FULMEN_CXX_CATCH wrap the body,
// and the message of a caught exception is copied (truncated, always
// NUL-terminated) into the caller's `err` buffer of `err_len` bytes.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

// Status codes shared with src/shim/mod.rs. A c10 error of a typed kind
// keeps its kind as a status; any other error is FULMEN_CXX_ERROR, its
// message classified on the Rust side as tch's errors are.
#define FULMEN_CXX_OK 0
#define FULMEN_CXX_ERROR 1
#define FULMEN_CXX_UNSUPPORTED 2  // also c10::NotImplementedError
#define FULMEN_CXX_OUT_OF_MEMORY 3  // c10::OutOfMemoryError
#define FULMEN_CXX_OUT_OF_RANGE 4  // c10::IndexError
#define FULMEN_CXX_INVALID_ARGUMENT 5  // c10::ValueError
#define FULMEN_CXX_DTYPE_MISMATCH 6  // c10::TypeError
#define FULMEN_CXX_DISTRIBUTED 7  // c10::DistError
#define FULMEN_CXX_INVALID_STATE 8  // fulmen_cxx::StateError

extern "C" {
// A host collectives group, as src/distributed/collectives.rs hands it to
// csrc/distributed.cpp. Tensors cross as `at::Tensor*`; reduce ops as
// 0 sum, 1 product, 2 min, 3 max. Each call returns FULMEN_CXX_OK or writes
// a message to `err`. `release` frees `ctx` (called once).
struct fulmen_cxx_collectives {
  void* ctx;
  int (*all_reduce)(void* ctx, void* const* tensors, size_t n, int op, char* err, size_t err_len);
  int (*broadcast)(void* ctx, void* const* tensors, size_t n, int root, char* err, size_t err_len);
  int (*all_gather)(void* ctx, const void* input, void* const* outputs, size_t n, char* err, size_t err_len);
  int (*barrier)(void* ctx, char* err, size_t err_len);
  // FULMEN_CXX_UNSUPPORTED when the library has no reduce-scatter.
  int (*reduce_scatter)(void* ctx, const void* input, void* output, int op, char* err, size_t err_len);
  void (*release)(void* ctx);
};

// A Rust forward (a checkpointed one, or the one a trace records): reads
// the `n` tensors of `inputs` (`at::Tensor*`, borrowed for the call),
// pushes each output with fulmen_cxx_tensor_list_push on `outputs`;
// returns FULMEN_CXX_OK or writes a message to `err`.
typedef int (*fulmen_cxx_forward_fn)(void* ctx, const void* const* inputs, size_t n, void* outputs, char* err,
                                     size_t err_len);
}

namespace fulmen_cxx {

// Copies `msg` into `err` (at most err_len - 1 bytes, then a NUL).
inline void write_message(const std::string& msg, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) {
    return;
  }
  size_t n = msg.size() < err_len - 1 ? msg.size() : err_len - 1;
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// The status of a c10 error: its typed kind where it has one.
// A shim's refusal of a call the caller's state forbids (a measurement
// under way already, a name registered already): FULMEN_CXX_INVALID_STATE.
struct StateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A shim's refusal of the caller's arguments: FULMEN_CXX_INVALID_ARGUMENT.
struct ArgumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline int status_of(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return FULMEN_CXX_OUT_OF_MEMORY;
  if (dynamic_cast<const c10::IndexError*>(&e) != nullptr) return FULMEN_CXX_OUT_OF_RANGE;
  if (dynamic_cast<const c10::ValueError*>(&e) != nullptr) return FULMEN_CXX_INVALID_ARGUMENT;
  if (dynamic_cast<const c10::TypeError*>(&e) != nullptr) return FULMEN_CXX_DTYPE_MISMATCH;
  if (dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr) return FULMEN_CXX_UNSUPPORTED;
  if (dynamic_cast<const c10::DistError*>(&e) != nullptr) return FULMEN_CXX_DISTRIBUTED;
  return FULMEN_CXX_ERROR;
}

// Keeps the first lines of a libtorch message, dropping the C++ backtrace.
inline std::string short_message(const char* what) {
  std::string text(what == nullptr ? "unknown C++ exception" : what);
  size_t cut = text.find("\nException raised from");
  if (cut != std::string::npos) {
    text.resize(cut);
  }
  return text;
}

// Whether a FLOP measurement is under way on this thread (csrc/flops.cpp).
bool flops_measuring();

// Sets the paths of the modules (relative to the innermost module scope,
// outermost first) whose forward the program instruction running on this
// thread belongs to, for FLOP counting by module; NULL for none. Returns
// the previous setting, to be put back.
const std::vector<std::string>* flops_program_modules(const std::vector<std::string>* paths);

// Sets the TorchScript module (a `torch::jit::Module*`) this thread runs
// as the outermost one, for naming its submodules in FLOP counts by
// module; NULL for none. Returns the previous setting, to be put back.
const void* flops_script_root(const void* module);

// A FLOP-counting setting of this thread (flops_program_modules,
// flops_script_root) changed only while a measurement is under way, and
// put back when this goes.
template <class T>
class FlopsSetting {
 public:
  explicit FlopsSetting(T (*set)(T)) : set_(set), on_(flops_measuring()), saved_(on_ ? set(T{}) : T{}) {}
  FlopsSetting(const FlopsSetting&) = delete;
  FlopsSetting& operator=(const FlopsSetting&) = delete;
  ~FlopsSetting() {
    if (on_) set_(saved_);
  }
  // Sets `value` while measuring.
  void operator=(T value) {
    if (on_) set_(value);
  }

 private:
  T (*set_)(T);
  bool on_;
  T saved_;
};

// The FLOP counter's state of a thread (its open module scopes, the
// autograd nodes it runs, its graph executor optimization), lent to the
// threads attached to a callback with the libtorch state.
struct FlopThreadState {
  std::vector<std::string> scopes;
  std::vector<size_t> backward;
  bool graph_optimize = true;
};
FlopThreadState flops_thread_state();
void set_flops_thread_state(const FlopThreadState& state);

}  // namespace fulmen_cxx

#define FULMEN_CXX_TRY try {
#define FULMEN_CXX_CATCH(err, err_len)                                            \
  return FULMEN_CXX_OK;                                                           \
  }                                                                               \
  catch (const c10::Error& e) {                                                   \
    fulmen_cxx::write_message(fulmen_cxx::short_message(e.what_without_backtrace()), err, err_len); \
    return fulmen_cxx::status_of(e);                                              \
  }                                                                               \
  catch (const fulmen_cxx::StateError& e) {                                       \
    fulmen_cxx::write_message(e.what(), err, err_len);                            \
    return FULMEN_CXX_INVALID_STATE;                                              \
  }                                                                               \
  catch (const fulmen_cxx::ArgumentError& e) {                                    \
    fulmen_cxx::write_message(e.what(), err, err_len);                            \
    return FULMEN_CXX_INVALID_ARGUMENT;                                           \
  }                                                                               \
  catch (const std::exception& e) {                                               \
    fulmen_cxx::write_message(fulmen_cxx::short_message(e.what()), err, err_len); \
    return FULMEN_CXX_ERROR;                                                      \
  }                                                                               \
  catch (...) {                                                                   \
    fulmen_cxx::write_message("unknown C++ exception", err, err_len);            \
    return FULMEN_CXX_ERROR;                                                      \
  }

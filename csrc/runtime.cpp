// Process-wide libtorch settings tch does not expose: deterministic
// algorithms (and their warn-only mode), cuDNN's benchmark flag, autograd's anomaly mode and the CPU generator's state (for
// exact resume); and a thread's libtorch thread-local state, lent to
// threads attached to a callback.
#include "fulmen_cxx.h"

#include <memory>

#include <ATen/Context.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include "torch_version.hpp"

namespace {

// What fulmen_cxx_tls_capture captures.
struct ThreadState {
  at::ThreadLocalState torch;
  fulmen_cxx::FlopThreadState flops;
  // Whether the thread was tracing a model (csrc/trace.cpp): the tracer's
  // state is the thread's own and records into one graph, so it is not
  // lent; a thread joining such a callback is refused instead.
  bool tracing = false;
};

}  // namespace

extern "C" {

// The version of the libtorch headers this shim was compiled against
// ("2.13.0"), a static string.
const char* fulmen_cxx_torch_version(void) { return TORCH_VERSION; }

// at::globalContext().setDeterministicAlgorithms(on, warn_only = false).
int fulmen_cxx_set_deterministic(int on, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::globalContext().setDeterministicAlgorithms(on != 0, false);
  FULMEN_CXX_CATCH(err, err_len)
}

// Whether deterministic algorithms are on.
int fulmen_cxx_deterministic(void) {
  try {
    return at::globalContext().deterministicAlgorithms() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// at::globalContext().setDeterministicAlgorithms(on, warn_only)
// (torch.use_deterministic_algorithms(on, warn_only=...)).
int fulmen_cxx_set_deterministic_mode(int on, int warn_only, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::globalContext().setDeterministicAlgorithms(on != 0, warn_only != 0);
  FULMEN_CXX_CATCH(err, err_len)
}

// Whether deterministic algorithms only warn (warn_only=True).
int fulmen_cxx_deterministic_warn_only(void) {
  try {
    return at::globalContext().deterministicAlgorithmsWarnOnly() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// torch.backends.cudnn.benchmark = on (a process-wide flag; only cuDNN
// convolutions read it).
int fulmen_cxx_set_cudnn_benchmark(int on, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  at::globalContext().setBenchmarkCuDNN(on != 0);
  FULMEN_CXX_CATCH(err, err_len)
}

// torch.backends.cudnn.benchmark.
int fulmen_cxx_cudnn_benchmark(void) {
  try {
    return at::globalContext().benchmarkCuDNN() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// torch.autograd.set_detect_anomaly(on, check_nan=True): backward records
// where each node was made and fails on a NaN gradient, naming it.
int fulmen_cxx_set_anomaly(int on, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  torch::autograd::AnomalyMode::set_enabled(on != 0, true);
  FULMEN_CXX_CATCH(err, err_len)
}

// Whether anomaly mode is on.
int fulmen_cxx_anomaly(void) {
  try {
    return torch::autograd::AnomalyMode::is_enabled() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// Whether autograd records on this thread (torch.is_grad_enabled()).
int fulmen_cxx_grad_enabled(void) {
  try {
    return c10::GradMode::is_enabled() ? 1 : 0;
  } catch (...) {
    return 1;
  }
}

// The default CPU generator's state as a new uint8 tensor, handed over as
// a heap `at::Tensor*` (the representation torch-sys uses for tensors).
int fulmen_cxx_cpu_rng_get_state(void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state();
  *out = new at::Tensor(state);
  FULMEN_CXX_CATCH(err, err_len)
}

// Restores the default CPU generator from a state tensor `state` (an
// `at::Tensor*` borrowed from the caller).
int fulmen_cxx_cpu_rng_set_state(const void* state, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const at::Tensor& t = *static_cast<const at::Tensor*>(state);
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
  FULMEN_CXX_CATCH(err, err_len)
}

// The calling thread's libtorch thread-local state (grad mode, inference
// mode, autocast and the other local dispatch keys, autocast dtypes,
// saved-tensor hooks, profiler callbacks), as at::launch carries it to
// another thread, with the FLOP counter's (open module scopes and autograd
// nodes, the graph executor's optimization): a heap
// `ThreadState*`, freed with fulmen_cxx_tls_free.
int fulmen_cxx_tls_capture(void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "tls_capture: out is NULL");
  *out = new ThreadState{at::ThreadLocalState(), fulmen_cxx::flops_thread_state(), torch::jit::tracer::isTracing()};
  FULMEN_CXX_CATCH(err, err_len)
}

// Frees a state made by fulmen_cxx_tls_capture or fulmen_cxx_tls_apply
// without applying it (NULL: nothing). Touches no thread-local variable,
// so it may run while a thread exits.
void fulmen_cxx_tls_free(void* state) { delete static_cast<ThreadState*>(state); }

// Makes `state` (from fulmen_cxx_tls_capture, only read) the calling
// thread's thread-local state; the state it replaces goes to *previous, a
// heap state for fulmen_cxx_tls_restore on this thread.
int fulmen_cxx_tls_apply(const void* state, void** previous, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(state != nullptr && previous != nullptr, "tls_apply: NULL argument");
  auto before = std::make_unique<ThreadState>(ThreadState{at::ThreadLocalState(), fulmen_cxx::flops_thread_state()});
  const auto& lent = *static_cast<const ThreadState*>(state);
  if (lent.tracing) {
    throw fulmen_cxx::StateError(
        "the callback runs inside a trace (fulmen_model_to_torchscript), whose ops are recorded only on the "
        "tracing thread: run the forward's ops on the callback's own thread");
  }
  at::ThreadLocalState::setThreadLocalState(lent.torch);
  fulmen_cxx::set_flops_thread_state(lent.flops);
  *previous = before.release();
  FULMEN_CXX_CATCH(err, err_len)
}

// Makes `previous` (from fulmen_cxx_tls_apply on this thread) the calling
// thread's thread-local state again, and frees it.
int fulmen_cxx_tls_restore(void* previous, char* err, size_t err_len) {
  std::unique_ptr<ThreadState> owned(static_cast<ThreadState*>(previous));
  FULMEN_CXX_TRY
  TORCH_CHECK(owned != nullptr, "tls_restore: NULL argument");
  at::ThreadLocalState::setThreadLocalState(owned->torch);
  fulmen_cxx::set_flops_thread_state(owned->flops);
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

// libtorch's own profiler (Kineto) for src/trainer/torch_profiler.rs: start
// it on the calling thread, open and close named scopes (RecordFunction,
// as `torch.profiler.record_function`), stop it writing a Chrome trace and
// handing every event's name and duration back.
#include "fulmen_cxx.h"

#include <set>
#include <stdexcept>
#include <string>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/api.h>

namespace {

namespace profiler_impl = torch::profiler::impl;

std::set<profiler_impl::ActivityType> activities(int cuda) {
  std::set<profiler_impl::ActivityType> out{profiler_impl::ActivityType::CPU};
  if (cuda) {
    out.insert(profiler_impl::ActivityType::CUDA);
  }
  return out;
}

profiler_impl::ProfilerConfig config() { return profiler_impl::ProfilerConfig(profiler_impl::ProfilerState::KINETO); }

}  // namespace

extern "C" {

// Starts the profiler (CPU operators, and CUDA kernels when `cuda`); an
// error when one is already running in this process.
int fulmen_cxx_profiler_start(int cuda, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  if (profiler_impl::profilerEnabled()) {
    throw std::runtime_error("libtorch's profiler is already running in this process");
  }
  torch::autograd::profiler::prepareProfiler(config(), activities(cuda));
  torch::autograd::profiler::enableProfiler(config(), activities(cuda));
  FULMEN_CXX_CATCH(err, err_len)
}

// Opens a user scope named `name` (NULL when none could be opened); close
// it with fulmen_cxx_profiler_scope_end.
void* fulmen_cxx_profiler_scope_begin(const char* name) {
  try {
    auto* scope = new at::RecordFunction(at::RecordScope::USER_SCOPE);
    if (scope->isActive()) {
      scope->before(name);
    }
    return scope;
  } catch (...) {
    return nullptr;
  }
}

// Closes a scope fulmen_cxx_profiler_scope_begin opened (NULL is a no-op).
void fulmen_cxx_profiler_scope_end(void* scope) {
  try {
    delete static_cast<at::RecordFunction*>(scope);
  } catch (...) {
  }
}

// Stops the profiler; writes its Chrome trace to `path` (unless NULL) and
// calls on_event(ctx, name, duration in ns) for every event it recorded.
int fulmen_cxx_profiler_stop(const char* path, void (*on_event)(void*, const char*, uint64_t), void* ctx, char* err,
                             size_t err_len) {
  FULMEN_CXX_TRY
  auto result = torch::autograd::profiler::disableProfiler();
  if (!result) {
    throw std::runtime_error("libtorch's profiler was not running");
  }
  if (path != nullptr) {
    result->save(path);
  }
  for (const auto& event : result->events()) {
    on_event(ctx, event.name().c_str(), event.durationNs());
  }
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

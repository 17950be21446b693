// c10d backends for devices that neither gloo nor NCCL reduce: one over a
// custom accelerator's collectives hook (calls into the host through
// src/distributed/collectives.rs), and one that stages device tensors
// through the CPU for gloo (the default when an accelerator has no hook).
// Used by csrc/distributed.cpp when it builds a process group.
#pragma once

#include "fulmen_cxx.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstddef>
#include <string>

namespace fulmen_cxx {

// A backend named `name` whose collectives call the host's `hooks`; once
// made, it owns `hooks.ctx` (released with the backend). If this throws,
// the caller still owns it.
c10::intrusive_ptr<c10d::Backend> host_backend(int rank, int size, const fulmen_cxx_collectives& hooks,
                                               const std::string& name);

// A backend that copies device tensors to the CPU, runs `cpu`'s collective
// on them and copies the results back.
c10::intrusive_ptr<c10d::Backend> staged_backend(int rank, int size, c10::intrusive_ptr<c10d::Backend> cpu,
                                                 std::chrono::milliseconds timeout);

}  // namespace fulmen_cxx

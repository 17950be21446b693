// CUDA graphs of whole training steps, for src/tensor/graph.rs: a step's
// device work captured once on a side stream (torch.cuda.graph's recipe:
// synchronize, capture on a stream of the pool, come back) and replayed
// on the current stream. A graph is a heap `CudaStepGraph` handed out as
// `void*`; its memory pool (the tensors the capture made) lives as long as
// the graph.
//
// Compiled only where build.rs defines FULMEN_WITH_CUDA; elsewhere every
// call answers that this build has no CUDA. The fake device has its own
// capture (csrc/fake_device.cpp, section 6).
#include "fulmen_cxx.h"

#include <cstdint>
#include <optional>

#ifdef FULMEN_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

#ifdef FULMEN_WITH_CUDA
struct CudaStepGraph {
  explicit CudaStepGraph(c10::DeviceIndex device) : device(device) {}
  c10::DeviceIndex device;
  at::cuda::CUDAGraph graph;
  // The capture's stream, current between begin and end.
  std::optional<c10::cuda::CUDAStreamGuard> capturing;
  bool captured = false;
};
#endif

constexpr const char* kNoCuda = "CUDA graphs need a build with CUDA (libtorch with CUDA and its runtime headers)";

}  // namespace

extern "C" {

// *out = a new, empty graph for CUDA device `index`.
int fulmen_cxx_cuda_graph_new(int64_t index, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "cuda graph: out is NULL");
#ifdef FULMEN_WITH_CUDA
  TORCH_CHECK(index >= 0 && index < c10::cuda::device_count(), "cuda graph: no CUDA device ", index);
  *out = new CudaStepGraph(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
  TORCH_CHECK(false, kNoCuda);
#endif
  FULMEN_CXX_CATCH(err, err_len)
}

// Starts capturing this thread's work on the graph's device: waits for the
// device (nothing of before may run inside), then makes a stream of the
// pool current and begins the capture there, in CUDA's thread-local mode
// (as torch.compile's graphs): the loader's threads may go on allocating
// pinned memory meanwhile, and the autograd engine's device thread, which
// runs backward on the capture stream, is captured with it.
int fulmen_cxx_cuda_graph_begin(void* graph, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(graph != nullptr, "cuda graph: NULL");
#ifdef FULMEN_WITH_CUDA
  auto* g = static_cast<CudaStepGraph*>(graph);
  TORCH_CHECK(!g->captured && !g->capturing.has_value(), "cuda graph: already captured");
  c10::cuda::CUDAGuard on(g->device);
  c10::cuda::device_synchronize();
  g->capturing.emplace(c10::cuda::getStreamFromPool(false, g->device));
  try {
    g->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  } catch (...) {
    g->capturing.reset();
    throw;
  }
#else
  TORCH_CHECK(false, kNoCuda);
#endif
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends the capture and instantiates the graph; the stream current before
// begin is current again, and waits for the capture stream.
int fulmen_cxx_cuda_graph_end(void* graph, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(graph != nullptr, "cuda graph: NULL");
#ifdef FULMEN_WITH_CUDA
  auto* g = static_cast<CudaStepGraph*>(graph);
  TORCH_CHECK(g->capturing.has_value(), "cuda graph: no capture is running");
  c10::cuda::CUDAGuard on(g->device);
  struct Leave {
    CudaStepGraph* g;
    ~Leave() { g->capturing.reset(); }
  } leave{g};
  g->graph.capture_end();
  g->captured = true;
#else
  TORCH_CHECK(false, kNoCuda);
#endif
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends a capture that failed (its error is the caller's to report); the
// graph cannot be replayed after it. When the capture was invalidated,
// CUDAGraph::capture_end throws before it hands the memory pool back, so
// that is done here; the CUDA generator stays marked as capturing, which
// is why a failed CUDA capture ends the run (no eager fallback).
void fulmen_cxx_cuda_graph_abort(void* graph) {
#ifdef FULMEN_WITH_CUDA
  auto* g = static_cast<CudaStepGraph*>(graph);
  if (g == nullptr || !g->capturing.has_value()) return;
  try {
    c10::cuda::CUDAGuard on(g->device);
    try {
      g->graph.capture_end();
    } catch (...) {
      // The capture was invalidated by what failed in it: its error
      // stands. The stream left capture mode in cudaStreamEndCapture.
      auto pool = g->graph.pool();
      c10::cuda::CUDACachingAllocator::endAllocateToPool(g->device, pool);
      c10::cuda::CUDACachingAllocator::releasePool(g->device, pool);
    }
  } catch (...) {
    // Nothing may leave a void extern "C" function.
  }
  g->capturing.reset();
#else
  (void)graph;
#endif
}

// Replays the captured work on the current stream, without waiting for it.
int fulmen_cxx_cuda_graph_replay(void* graph, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(graph != nullptr, "cuda graph: NULL");
#ifdef FULMEN_WITH_CUDA
  auto* g = static_cast<CudaStepGraph*>(graph);
  TORCH_CHECK(g->captured, "cuda graph: nothing was captured");
  c10::cuda::CUDAGuard on(g->device);
  g->graph.replay();
#else
  TORCH_CHECK(false, kNoCuda);
#endif
  FULMEN_CXX_CATCH(err, err_len)
}

void fulmen_cxx_cuda_graph_free(void* graph) {
#ifdef FULMEN_WITH_CUDA
  delete static_cast<CudaStepGraph*>(graph);
#else
  (void)graph;
#endif
}

}  // extern "C"

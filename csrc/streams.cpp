// Copies of the next batch on a side stream, for src/trainer/prefetch.rs:
// while the device runs a step on its current stream, the next batch is
// copied (and cast) on a stream of the backend's pool; the step that uses
// it first makes its stream wait for the copy (an event) and tells the
// caching allocator that the batch is used there (record_stream), so its
// memory is not handed out again before that stream is done with it. This
// is torch's own pattern (`with torch.cuda.stream(s): x.cuda(non_blocking=
// True)`, then `wait_stream` and `record_stream`).
//
// Written against c10's device-generic stream and event interface, but
// used on CUDA only: a backend's streams are useless here without its
// record_stream, which other backends may lack. Elsewhere `enter` answers
// "no side stream" and the copy runs on the current stream.
#include "fulmen_cxx.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {

// The side stream in use between enter and leave, and the stream it
// replaced.
struct SideStream {
  c10::Stream previous;
  c10::Stream side;
};

// A finished side-stream copy: the event recorded after it.
struct CopyDone {
  c10::Event event;
  c10::Device device;
};

}  // namespace

extern "C" {

// The side stream of each CUDA device, taken from the pool once per
// process: the caching allocator keeps a block for the stream it was
// allocated on, so one stream (not the pool's 32 in turn) keeps the
// batches' cached memory to a few batches.
static std::mutex& side_streams_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
static std::unordered_map<c10::DeviceIndex, c10::Stream>& side_streams() {
  static auto* streams = new std::unordered_map<c10::DeviceIndex, c10::Stream>();
  return *streams;
}

// Makes this device's side stream (CUDA device `index`) this thread's
// current stream there; *out = a handle for fulmen_cxx_side_stream_leave,
// or NULL (and nothing changed) when the device type is not CUDA or has
// no backend. The copies queued on it must read host memory only: the
// side stream does not wait for the current one.
int fulmen_cxx_side_stream_enter(int device_type, int64_t index, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "side stream: out is NULL");
  *out = nullptr;
  const auto type = static_cast<c10::DeviceType>(device_type);
  if (type != c10::DeviceType::CUDA || !c10::impl::hasDeviceGuardImpl(type)) {
    return FULMEN_CXX_OK;
  }
  TORCH_CHECK(index >= 0 && index <= INT8_MAX, "side stream: device index ", index, " is out of range");
  const c10::Device device(type, static_cast<c10::DeviceIndex>(index));
  const auto* impl = c10::impl::getDeviceGuardImpl(type);
  c10::Stream side = [&] {
    std::lock_guard<std::mutex> lock(side_streams_mutex());
    auto found = side_streams().find(device.index());
    if (found != side_streams().end()) return found->second;
    const c10::Stream made = impl->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
    side_streams().emplace(device.index(), made);
    return made;
  }();
  auto handle = std::make_unique<SideStream>(SideStream{impl->getStream(device), side});
  impl->exchangeStream(side);
  *out = handle.release();
  FULMEN_CXX_CATCH(err, err_len)
}

// Puts back the stream `enter` replaced and frees `handle`; *done = the
// copy's event for fulmen_cxx_side_stream_wait. On an error the stream is
// put back, `handle` freed and *done NULL.
int fulmen_cxx_side_stream_leave(void* handle, void** done, char* err, size_t err_len) {
  const std::unique_ptr<SideStream> s(static_cast<SideStream*>(handle));
  FULMEN_CXX_TRY
  TORCH_CHECK(s != nullptr && done != nullptr, "side stream: NULL argument");
  *done = nullptr;
  const auto* impl = c10::impl::getDeviceGuardImpl(s->side.device_type());
  impl->exchangeStream(s->previous);
  c10::Event event(s->side.device_type());
  event.record(s->side);
  *done = new CopyDone{std::move(event), s->side.device()};
  FULMEN_CXX_CATCH(err, err_len)
}

// Makes the current stream of the copy's device wait for it, marks each
// of the `n` tensors (`at::Tensor*`) as used on that stream, and frees
// `done`.
int fulmen_cxx_side_stream_wait(void* done, void* const* tensors, size_t n, char* err, size_t err_len) {
  const std::unique_ptr<CopyDone> d(static_cast<CopyDone*>(done));
  FULMEN_CXX_TRY
  TORCH_CHECK(d != nullptr && (tensors != nullptr || n == 0), "side stream: NULL argument");
  const auto* impl = c10::impl::getDeviceGuardImpl(d->device.type());
  const c10::Stream current = impl->getStream(d->device);
  d->event.block(current);
  for (size_t i = 0; i < n; i++) {
    const auto* t = static_cast<const at::Tensor*>(tensors[i]);
    if (t->defined() && t->device() == d->device) {
      t->record_stream(current);
    }
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Frees a copy's event without waiting for it (a batch never used).
void fulmen_cxx_side_stream_drop(void* done) { delete static_cast<CopyDone*>(done); }

}  // extern "C"

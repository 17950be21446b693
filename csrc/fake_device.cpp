// A fake device for tests and for the custom-accelerator conformance kit:
// a minimal PrivateUse1 backend, as PyTorch's OpenReg example, that keeps
// tensor data in host memory. A handful of kernels are its own (allocation,
// copies, views, batch norm); every other op runs through libtorch's
// at::native::cpu_fallback (arguments copied to the CPU, the CPU kernel run,
// results copied back; convolutions run the CPU's on host aliases). Its
// random numbers come from the CPU generator, which is therefore its default
// generator.
//
// Nothing registers at load: fulmen_cxx_fake_device_register does it all,
// once per process, and refuses when another PrivateUse1 backend is there.
// Registering names PrivateUse1 for the whole process and cannot be undone.
//
// It also captures and replays work as a CUDA graph does (section 6), so
// that the trainer's graphed steps are tested without a GPU.
#include "fulmen_cxx.h"

#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>  // KERNEL_PRIVATEUSEONE, pulls ATen.h
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include <unordered_map>
#include <unordered_set>

namespace fake_device {
namespace {

std::atomic<c10::DeviceIndex> g_device_count{1};
// Times the host waited for a fake device's data: scalar reads (`.item()`)
// and blocking copies into host memory. A CUDA device syncs the host at
// each; fulmen's tests count them to show a step makes none.
std::atomic<uint64_t> g_host_reads{0};
// Set while an op runs through the CPU fallback: its copies to the host are
// how this fake device computes, not reads a real device would make.
thread_local int t_in_fallback = 0;
thread_local c10::DeviceIndex t_current = 0;
constexpr auto kPU1 = c10::DeviceType::PrivateUse1;

// ---- graph capture state (section 6 uses it; the kernels check it) ---------
// While set, the device work of every thread is recorded, not done (as a
// CUDA stream capture in its global mode): each recorded op replays later on
// the same tensors.
std::atomic<bool> g_capturing{false};
std::mutex& g_record_mu = *new std::mutex();
std::vector<std::function<void()>>* g_recording = nullptr;  // under g_record_mu
// The allocations made during the capture (its temporaries and outputs),
// which the capture may write: nothing outside it can have seen them.
std::unordered_set<void*>& g_fresh = *new std::unordered_set<void*>();  // under g_record_mu

// Whether this call is device work to record: a capture is running and the
// call is not the fallback's own copying.
bool recording() { return t_in_fallback == 0 && g_capturing.load(); }

void record(std::function<void()> replay) {
  std::lock_guard<std::mutex> l(g_record_mu);
  TORCH_CHECK(g_recording != nullptr, "fake device: no capture is running");
  g_recording->push_back(std::move(replay));
}

// Whether `t`'s memory was allocated during the running capture, or it
// holds none (an op's empty `out=` tensor, which the op sizes and fills:
// nothing existing before could be changed through it).
bool fresh(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone() || !t.has_storage()) return false;
  if (t.storage().nbytes() == 0) return true;
  std::lock_guard<std::mutex> l(g_record_mu);
  return g_fresh.count(t.storage().data_ptr().get()) != 0;
}

// CUDA's refusal of a host wait inside a capture, in its words.
[[noreturn]] void refuse_in_capture(const char* what) {
  TORCH_CHECK(false, "operation not permitted when stream is capturing (the fake device's graph capture: ", what,
              " waits for the device, which a captured graph cannot do)");
}

struct InFallback {
  InFallback() { ++t_in_fallback; }
  ~InFallback() { --t_in_fallback; }
  InFallback(const InFallback&) = delete;
  InFallback& operator=(const InFallback&) = delete;
};

void check_index(c10::DeviceIndex i) {
  TORCH_CHECK(i >= 0 && i < g_device_count.load(), "fake device: invalid device index ", int(i),
              " (", int(g_device_count.load()), " fake device(s))");
}

// ---- 1. device guard: current device per thread, one default stream --------
struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kPU1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kPU1, t_current); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kPU1, "fake device guard got ", d);
    if (d.index() >= 0) { check_index(d.index()); t_current = d.index(); }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) t_current = d.index();
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return g_device_count.load(); }
  // Events: all work is synchronous, so record/block are no-ops.
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

// ---- 2. allocator: host memory tagged as npu:<current> ----------------------
// The bytes this process's fake devices hold, and the most they may hold
// (FULMEN_FAKE_DEVICE_MEMORY_LIMIT, read at registration; 0: no limit), so
// a test can show that a run fits a device smaller than its model.
std::atomic<size_t> g_live_bytes{0};
std::atomic<size_t> g_limit_bytes{0};
std::mutex& g_sizes_mu = *new std::mutex();
std::unordered_map<void*, size_t>& g_sizes = *new std::unordered_map<void*, size_t>();

void npu_free(void* p) {
  if (g_capturing.load()) {
    std::lock_guard<std::mutex> l(g_record_mu);
    if (g_capturing.load()) g_fresh.erase(p);
  }
  {
    std::lock_guard<std::mutex> l(g_sizes_mu);
    auto it = g_sizes.find(p);
    if (it != g_sizes.end()) {
      g_live_bytes -= it->second;
      g_sizes.erase(it);
    }
  }
  c10::free_cpu(p);
}
struct NpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    // Counted before the check, so threads allocating at once cannot
    // pass the limit together.
    size_t limit = g_limit_bytes.load();
    size_t live = g_live_bytes.fetch_add(n);
    if (limit != 0 && live + n > limit) {
      g_live_bytes -= n;
      // Named as a vendor's backend names its device ("NPU out of memory").
      TORCH_CHECK_WITH(OutOfMemoryError, false, c10::get_privateuse1_backend(), " out of memory (the fake device): ", n,
                       " bytes asked while ", live, " of its ", limit,
                       " bytes (FULMEN_FAKE_DEVICE_MEMORY_LIMIT) are in use");
    }
    void* p = nullptr;
    try {
      p = c10::alloc_cpu(n);
    } catch (...) {
      g_live_bytes -= n;
      throw;
    }
    if (p == nullptr) {
      g_live_bytes -= n;
    } else {
      std::lock_guard<std::mutex> l(g_sizes_mu);
      g_sizes[p] = n;
    }
    if (p != nullptr && g_capturing.load()) {
      // Checked again under the lock: a capture ending meanwhile clears
      // the set, which must not keep this address for the next capture.
      std::lock_guard<std::mutex> l(g_record_mu);
      if (g_capturing.load()) g_fresh.insert(p);
    }
    return {p, p, &npu_free, c10::Device(kPU1, t_current)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &npu_free; }
  void copy_data(void* dst, const void* src, size_t n) const override { default_copy_data(dst, src, n); }
};
// Never destroyed (as every object libtorch points to here): a tensor freed
// at exit must not reach a destroyed allocator.
NpuAllocator& g_alloc = *new NpuAllocator();

// "Pinned" host memory for pin_memory(): plain host memory whose pointers we
// remember, so is_pinned() answers true for them.
std::mutex& g_pinned_mu = *new std::mutex();
std::unordered_set<void*>& g_pinned = *new std::unordered_set<void*>();
void pinned_free(void* p) {
  { std::lock_guard<std::mutex> l(g_pinned_mu); g_pinned.erase(p); }
  c10::free_cpu(p);
}
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = c10::alloc_cpu(n);
    { std::lock_guard<std::mutex> l(g_pinned_mu); g_pinned.insert(p); }
    return {p, p, &pinned_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dst, const void* src, size_t n) const override { default_copy_data(dst, src, n); }
};
PinnedAllocator& g_pinned_alloc = *new PinnedAllocator();

// ---- 3. hooks: generator, pinned memory, device count -----------------------
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return g_device_count.load(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { check_index(d); t_current = d; }
  c10::DeviceIndex getCurrentDevice() const override { return t_current; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = t_current; setCurrentDevice(d); return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  // The fake device draws its random numbers on the CPU (cpu_fallback runs the
  // CPU kernels with the CPU default generator), so its default generator IS
  // the CPU one: seeding "npu" seeds what dropout/randn on npu really use.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::make_generator<at::CPUGeneratorImpl>();
  }
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(kPU1, t_current); }
  bool isPinnedPtr(const void* p) const override {
    std::lock_guard<std::mutex> l(g_pinned_mu);
    return g_pinned.count(const_cast<void*>(p)) != 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_alloc; }
  void resizePrivateUse1Bytes(const c10::Storage& s, size_t n) const override {
    c10::DataPtr fresh = g_alloc.allocate(n);
    size_t keep = std::min(n, s.nbytes());
    if (keep) std::memcpy(fresh.get(), s.data(), keep);
    s.set_data_ptr_noswap(std::move(fresh));
    s.set_nbytes(n);
  }
};

// ---- 4. kernels ------------------------------------------------------------
at::Tensor npu_empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin, std::optional<c10::MemoryFormat> fmt) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided, "fake device: only strided tensors");
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, &g_alloc, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), fmt);
}
at::Tensor npu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided, "fake device: only strided tensors");
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, &g_alloc,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}
// A CPU tensor aliasing the host memory of an npu (or CPU) tensor.
at::Tensor as_cpu(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
}
// self -> dst, for CPU<->npu and npu<->npu (dtype conversion included).
at::Tensor npu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.is_cpu() || self.is_privateuseone(), "fake device: cannot copy from ", self.device());
  TORCH_CHECK(dst.is_cpu() || dst.is_privateuseone(), "fake device: cannot copy to ", dst.device());
  // Into pinned host memory, a non-blocking copy does not wait (CUDA's
  // rule); any other copy out of the device does.
  const bool waits = self.is_privateuseone() && dst.is_cpu() && !(non_blocking && dst.is_pinned());
  if (recording()) {
    if (waits) refuse_in_capture("a copy into host memory (other than a non-blocking one into pinned memory)");
    if (self.is_cpu() && !self.is_pinned()) refuse_in_capture("a copy from pageable host memory");
    auto copy = [self, dst, non_blocking] {
      InFallback in;
      at::Tensor d = as_cpu(dst);
      at::native::copy_(d, as_cpu(self), non_blocking);
    };
    // Into the capture's own memory the copy is done now too, so that
    // later ops of the capture see its values.
    if (fresh(dst)) copy();
    record(copy);
    return dst;
  }
  if (t_in_fallback == 0 && waits) {
    g_host_reads++;
  }
  at::Tensor d = as_cpu(dst);
  at::native::copy_(d, as_cpu(self), non_blocking);
  return dst;
}
at::Tensor npu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return npu_copy_from(self, dst, false);
}
// View ops must stay views (cpu_fallback would return copies).
at::Tensor npu_as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}
at::Tensor npu_view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }
at::Tensor npu_reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}
const at::Tensor& npu_resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> fmt) {
  return at::native::resize_(self, size, fmt);  // reallocates with the storage's allocator
}
at::Scalar npu_local_scalar_dense(const at::Tensor& self) {
  if (g_capturing.load()) refuse_in_capture("reading a value (.item())");
  g_host_reads++;
  return at::native::_local_scalar_dense_cpu(self);
}
at::Tensor& npu_set_source_Storage(at::Tensor& self, c10::Storage src) { return at::native::set_(self, src); }
at::Tensor& npu_set_source_Storage_offset(at::Tensor& self, c10::Storage src, int64_t off, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, src, off, size, stride);
}
at::Tensor& npu_set_source_Tensor(at::Tensor& self, const at::Tensor& src) {
  return at::native::set_tensor_(self, src);
}
// libtorch 2.13's TensorImpl::has_compatible_shallow_copy_type() knows no
// PrivateUse1, so Variable::set_data (nn::Module::to, tch's set_data) between
// CPU and npu fails unless the backend overrides this op.
bool npu_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto ok = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  return ok(self) && ok(from);
}
// native_batch_norm's schema does not mark running_mean/var as mutated, so
// cpu_fallback would update CPU copies and drop them (BatchNorm's running
// stats would stay at their initial values). The data is host memory, so run
// the CPU kernel on CPU aliases instead: the update lands in the npu tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_on_host(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  InFallback in;
  auto opt = [](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (t.has_value() && t->defined()) return as_cpu(*t);
    return std::nullopt;
  };
  auto [out, mean, invstd] = at::native_batch_norm(as_cpu(input), opt(weight), opt(bias), opt(running_mean),
                                                   opt(running_var), training, momentum, eps);
  const auto d = input.device();
  return {out.to(d), mean.to(d), invstd.to(d)};
}

// ---- capture helpers: a captured op runs on scratch copies of the device
// tensors that existed before the capture, so that its outputs get their
// shapes (and the capture's own tensors their values) while nothing that
// existed before changes (a CUDA capture records work without doing it);
// the replay then runs it on the real tensors.
at::Tensor scratch_copy(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone() || fresh(t)) return t;
  InFallback in;
  at::Tensor c = t.is_non_overlapping_and_dense() ? at::empty_strided(t.sizes(), t.strides(), t.options())
                                                  : at::empty(t.sizes(), t.options());
  as_cpu(c).copy_(as_cpu(t));
  return c;
}
std::optional<at::Tensor> scratch_copy(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return t;
  return scratch_copy(*t);
}
c10::IValue scratch_copy(const c10::IValue& v) {
  if (v.isTensor()) return scratch_copy(v.toTensor());
  if (v.isList()) {
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) out.push_back(scratch_copy(c10::IValue(list.get(i))));
    return out;
  }
  return v;
}
// Copies a replay's fresh output into the tensor the capture handed out.
void copy_into(const c10::IValue& recorded, const c10::IValue& fresh) {
  if (recorded.isTensor() && fresh.isTensor()) {
    const at::Tensor& r = recorded.toTensor();
    const at::Tensor& f = fresh.toTensor();
    if (!r.defined() || !f.defined()) return;
    TORCH_CHECK(r.sizes() == f.sizes(), "fake device: a replayed op's output has shape ", f.sizes(),
                " where its capture's had ", r.sizes());
    InFallback in;
    as_cpu(r).copy_(as_cpu(f));
    return;
  }
  if (recorded.isList() && fresh.isList()) {
    auto a = recorded.toList(), b = fresh.toList();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) copy_into(c10::IValue(a.get(i)), c10::IValue(b.get(i)));
  }
}
void copy_into(const at::Tensor& recorded, const at::Tensor& fresh) {
  copy_into(c10::IValue(recorded), c10::IValue(fresh));
}
// The argument a return writes through (`Tensor(a!)`), or -1.
int written_argument(const c10::FunctionSchema& s, size_t ret) {
  const auto* r = s.returns()[ret].alias_info();
  if (r == nullptr || !r->isWrite()) return -1;
  for (size_t j = 0; j < s.arguments().size(); ++j) {
    const auto* a = s.arguments()[j].alias_info();
    if (a != nullptr && a->isWrite() && a->beforeSets() == r->beforeSets()) return static_cast<int>(j);
  }
  return -1;
}

// native_batch_norm's schema does not mark running_mean/var as mutated, so
// cpu_fallback would update CPU copies and drop them (BatchNorm's running
// stats would stay at their initial values). The data is host memory, so run
// the CPU kernel on CPU aliases instead: the update lands in the npu tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  if (!recording()) {
    return batch_norm_on_host(input, weight, bias, running_mean, running_var, training, momentum, eps);
  }
  auto result = batch_norm_on_host(input, weight, bias, scratch_copy(running_mean), scratch_copy(running_var),
                                   training, momentum, eps);
  auto [out, mean, invstd] = result;
  record([=] {
    auto [o, m, i] = batch_norm_on_host(input, weight, bias, running_mean, running_var, training, momentum, eps);
    copy_into(out, o);
    copy_into(mean, m);
    copy_into(invstd, i);
  });
  return result;
}

// Convolutions reach a backend other than the CPU's and CUDA's as
// convolution_overrideable, whose CPU kernel only raises "not implemented":
// run the CPU convolution on CPU aliases instead (nothing is written but
// the fresh outputs, so a capture runs it on the real inputs and records it).
at::Tensor on_device_of(const at::Tensor& cpu, const at::Tensor& like) {
  return cpu.defined() ? cpu.to(like.device()) : cpu;
}
at::Tensor convolution_on_host(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                               c10::IntArrayRef output_padding, int64_t groups) {
  InFallback in;
  std::optional<at::Tensor> b;
  if (bias.has_value() && bias->defined()) b = as_cpu(*bias);
  return on_device_of(at::convolution(as_cpu(input), as_cpu(weight), b, stride, padding, dilation, transposed,
                                      output_padding, groups),
                      input);
}
at::Tensor npu_convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                        c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                        c10::IntArrayRef output_padding, int64_t groups) {
  at::Tensor out = convolution_on_host(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                       groups);
  if (recording()) {
    std::vector<int64_t> st(stride.begin(), stride.end()), pa(padding.begin(), padding.end()),
        di(dilation.begin(), dilation.end()), op(output_padding.begin(), output_padding.end());
    record([=] { copy_into(out, convolution_on_host(input, weight, bias, st, pa, di, transposed, op, groups)); });
  }
  return out;
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_on_host(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  InFallback in;
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(as_cpu(grad_output), as_cpu(input), as_cpu(weight), bias_sizes,
                                               stride, padding, dilation, transposed, output_padding, groups,
                                               output_mask);
  return {on_device_of(gi, input), on_device_of(gw, input), on_device_of(gb, input)};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  auto result = convolution_backward_on_host(grad_output, input, weight, stride, padding, dilation, transposed,
                                             output_padding, groups, output_mask);
  if (recording()) {
    auto [gi, gw, gb] = result;
    std::vector<int64_t> st(stride.begin(), stride.end()), pa(padding.begin(), padding.end()),
        di(dilation.begin(), dilation.end()), op(output_padding.begin(), output_padding.end());
    record([=] {
      auto [i, w, b] = convolution_backward_on_host(grad_output, input, weight, st, pa, di, transposed, op, groups,
                                                    output_mask);
      copy_into(gi, i);
      copy_into(gw, w);
      copy_into(gb, b);
    });
  }
  return result;
}

// An op through the fallback while a capture runs: done on scratch copies
// for its outputs, recorded with its real arguments. A return that writes
// through an argument is that argument (resized as the op resized its copy).
void capture_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  torch::jit::drop(*stack, n);
  for (const auto& a : args) stack->push_back(scratch_copy(a));
  {
    InFallback in;
    at::native::cpu_fallback(op, stack);
  }
  const size_t r = schema.returns().size();
  const size_t first = stack->size() - r;
  std::vector<c10::IValue> outs(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  for (size_t i = 0; i < r; ++i) {
    const int j = written_argument(schema, i);
    if (j < 0) continue;
    if (args[j].isTensor() && outs[i].isTensor()) {
      const at::Tensor& original = args[j].toTensor();
      if (original.defined() && original.sizes() != outs[i].toTensor().sizes()) {
        at::native::resize_(original, outs[i].toTensor().sizes(), std::nullopt);
      }
    }
    (*stack)[first + i] = args[j];
    outs[i] = c10::IValue();
  }
  c10::OperatorHandle handle = op;
  record([handle, args, outs] {
    InFallback in;
    torch::jit::Stack replay(args.begin(), args.end());
    at::native::cpu_fallback(handle, &replay);
    for (size_t i = 0; i < outs.size() && i < replay.size(); ++i) copy_into(outs[i], replay[i]);
  });
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (recording()) {
    capture_boxed(op, stack);
    return;
  }
  InFallback in;
  at::native::cpu_fallback(op, stack);
}

void register_kernels(torch::Library& m) {
  m.impl("empty.memory_format", npu_empty_memory_format);
  m.impl("empty_strided", npu_empty_strided);
  m.impl("_copy_from", npu_copy_from);
  m.impl("_copy_from_and_resize", npu_copy_from_and_resize);
  m.impl("as_strided", npu_as_strided);
  m.impl("view", npu_view);
  m.impl("_reshape_alias", npu_reshape_alias);
  m.impl("resize_", npu_resize_);
  m.impl("_local_scalar_dense", npu_local_scalar_dense);
  m.impl("set_.source_Tensor", npu_set_source_Tensor);
  m.impl("set_.source_Storage", npu_set_source_Storage);
  m.impl("_has_compatible_shallow_copy_type", npu_has_compatible_shallow_copy_type);
  m.impl("native_batch_norm", npu_native_batch_norm);
  m.impl("convolution_overrideable", npu_convolution_overrideable);
  m.impl("convolution_backward_overrideable", npu_convolution_backward_overrideable);
  m.impl("set_.source_Storage_storage_offset", npu_set_source_Storage_offset);
  // Structured ops' functional forms otherwise reach npu through libtorch's
  // CompositeExplicitAutogradNonFunctional wrapper, which calls the .out op
  // with an output of the final shape; CPU mse_loss.out then warns on every
  // call ("An output with one or more elements was resized"). Send the
  // functional op straight to the CPU fallback (OpenReg's "FALLBACK SINGLE").
  m.impl("mse_loss", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}
void register_fallback(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// ---- 5. autocast: nothing is registered for AutocastPrivateUse1 in libtorch,
// so without this every op fails once autocast is enabled for the device.
// The casts are those of libtorch's CPU autocast (the fallback runs CPU
// kernels): matrix products and convolutions in the lower precision, losses
// and reductions that need the range in float32.
void register_autocast_fallthrough(torch::Library& m) { m.fallback(torch::CppFunction::makeFallthrough()); }
void register_autocast(torch::Library& m) {
  KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose2d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose3d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(prelu, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss2d, fp32)
  KERNEL_PRIVATEUSEONE(cross_entropy_loss, fp32)
  KERNEL_PRIVATEUSEONE(l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(smooth_l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(huber_loss, fp32)
  KERNEL_PRIVATEUSEONE(kl_div, fp32)
  KERNEL_PRIVATEUSEONE(binary_cross_entropy_with_logits, fp32)
  KERNEL_PRIVATEUSEONE(soft_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(margin_ranking_loss, fp32)
  KERNEL_PRIVATEUSEONE(hinge_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(poisson_nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(prod, fp32)
  KERNEL_PRIVATEUSEONE(cdist, fp32)
}

}  // namespace
}  // namespace fake_device

namespace {

std::mutex g_register_mu;
bool g_registered = false;
// Set when a registration failed after it had changed libtorch: later
// calls report it rather than a misleading conflict.
std::string* g_failed = nullptr;

// The registrations, kept for the life of the process (libtorch cannot
// take a backend back): never destroyed, reachable from here.
torch::Library* g_libraries[4] = {nullptr, nullptr, nullptr, nullptr};

torch::Library& library(size_t slot, const char* ns, c10::DispatchKey key) {
  g_libraries[slot] = new torch::Library(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
  return *g_libraries[slot];
}

void register_everything(const char* name) {
  using namespace fake_device;
  c10::register_privateuse1_backend(name);
  static c10::impl::DeviceGuardImplRegistrar guard_registrar(kPU1, new GuardImpl());
  c10::SetAllocator(kPU1, &g_alloc);
  if (const char* limit = std::getenv("FULMEN_FAKE_DEVICE_MEMORY_LIMIT")) {
    g_limit_bytes = static_cast<size_t>(std::strtoull(limit, nullptr, 10));
  }
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  register_kernels(library(0, "aten", c10::DispatchKey::PrivateUse1));
  register_fallback(library(1, "_", c10::DispatchKey::PrivateUse1));
  register_autocast_fallthrough(library(2, "_", c10::DispatchKey::AutocastPrivateUse1));
  register_autocast(library(3, "aten", c10::DispatchKey::AutocastPrivateUse1));
}

}  // namespace

extern "C" {

// Registers the fake device under `name` (PrivateUse1's name, e.g. "npu")
// with `count` devices; a second call with the same name and count does
// nothing, any other is refused. Every check that can refuse runs before
// libtorch is changed.
int fulmen_cxx_fake_device_register(const char* name, int64_t count, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  using namespace fake_device;
  std::lock_guard<std::mutex> lock(g_register_mu);
  TORCH_CHECK(g_failed == nullptr, "an earlier registration of the fake device failed midway: ", *g_failed);
  TORCH_CHECK(name != nullptr && *name != '\0', "the fake device needs a name");
  TORCH_CHECK(count >= 1 && count <= 64, "the fake device count must lie in 1..=64, got ", count);
  if (g_registered) {
    TORCH_CHECK(c10::get_privateuse1_backend(true) == name && g_device_count.load() == count,
                "the fake device is already registered as ", c10::get_privateuse1_backend(true), " with ",
                int(g_device_count.load()), " device(s)");
    return FULMEN_CXX_OK;
  }
  TORCH_CHECK(!c10::is_privateuse1_backend_registered() && !c10::impl::hasDeviceGuardImpl(kPU1) &&
                  !at::isPrivateUse1HooksRegistered(),
              "another PrivateUse1 backend is registered in this process (",
              c10::get_privateuse1_backend(true), "): the fake device cannot take its place");
  g_device_count = static_cast<c10::DeviceIndex>(count);
  try {
    register_everything(name);
  } catch (const c10::Error& e) {
    g_failed = new std::string(fulmen_cxx::short_message(e.what_without_backtrace()));
    throw;
  } catch (const std::exception& e) {
    g_failed = new std::string(e.what());
    throw;
  }
  g_registered = true;
  FULMEN_CXX_CATCH(err, err_len)
}

// ---- 6. graph capture, as a CUDA graph: between begin and end every
// thread's work on the fake devices is recorded instead of done (host waits
// are refused as CUDA refuses them); a replay does the recorded work again
// on the same tensors. A graph is a heap FakeGraph handed out as `void*`.
struct FakeGraph {
  std::vector<std::function<void()>> work;
};

// Starts a capture; one at a time per process.
int fulmen_cxx_fake_graph_begin(char* err, size_t err_len) {
  FULMEN_CXX_TRY
  using namespace fake_device;
  {
    std::lock_guard<std::mutex> registered(g_register_mu);
    TORCH_CHECK(g_registered, "the fake device is not registered: it has no graphs");
  }
  std::lock_guard<std::mutex> l(g_record_mu);
  TORCH_CHECK(!g_capturing.load() && g_recording == nullptr, "fake device: a graph capture is already running");
  g_recording = new std::vector<std::function<void()>>();
  g_capturing = true;
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends the capture: *out = the graph, for fulmen_cxx_fake_graph_replay
// and fulmen_cxx_fake_graph_free.
int fulmen_cxx_fake_graph_end(void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  using namespace fake_device;
  TORCH_CHECK(out != nullptr, "fake graph: out is NULL");
  std::lock_guard<std::mutex> l(g_record_mu);
  TORCH_CHECK(g_capturing.load() && g_recording != nullptr, "fake device: no graph capture is running");
  g_capturing = false;
  std::unique_ptr<std::vector<std::function<void()>>> work(g_recording);
  g_recording = nullptr;
  g_fresh.clear();
  *out = new FakeGraph{std::move(*work)};
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends a capture that failed, dropping what it recorded; nothing when none runs.
void fulmen_cxx_fake_graph_abort() {
  using namespace fake_device;
  std::lock_guard<std::mutex> l(g_record_mu);
  g_capturing = false;
  delete g_recording;
  g_recording = nullptr;
  g_fresh.clear();
}

// Does a captured graph's work again, in its order.
int fulmen_cxx_fake_graph_replay(void* graph, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(graph != nullptr, "fake graph: NULL");
  TORCH_CHECK(!fake_device::g_capturing.load(), "fake device: a graph cannot replay during a capture");
  for (auto& work : static_cast<FakeGraph*>(graph)->work) work();
  FULMEN_CXX_CATCH(err, err_len)
}

void fulmen_cxx_fake_graph_free(void* graph) { delete static_cast<FakeGraph*>(graph); }

// *out = how many times the host waited for the fake devices' data since
// the process started (see g_host_reads).
int fulmen_cxx_fake_device_host_reads(uint64_t* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr, "host_reads: out is NULL");
  *out = fake_device::g_host_reads.load();
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

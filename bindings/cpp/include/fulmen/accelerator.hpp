// fulmen C++ binding: accelerators (Lightning's Accelerator): the registry,
// the built-in ones (cpu, cuda, mps, xla) and custom accelerators
// implemented in C++ (CustomAccelerator, register_accelerator).
#pragma once

#include "collectives.hpp"
#include "error.hpp"
#include "handle.hpp"
#include "tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fulmen {

/// libtorch's lower-case name of a device type ("xpu"; PrivateUse1 under
/// the name its backend registered, "npu" say).
inline std::string device_type_name(DeviceType type) {
    return detail::read_string([&](char* buf, size_t cap, size_t* len) {
        return fulmen_device_type_name(static_cast<int32_t>(type), buf, cap, len);
    });
}

/// How many devices of `type` libtorch has in this process (a registered
/// backend's count for the vendor types; 0 without one).
inline size_t device_count(DeviceType type) {
    size_t out = 0;
    check(fulmen_device_count(static_cast<int32_t>(type), &out));
    return out;
}

/// Blocks until the work queued on `device` is done (torch.cuda.synchronize
/// and its kin).
inline void device_synchronize(Device device) {
    check(fulmen_device_synchronize(static_cast<int32_t>(device.type), device.index));
}

/// Makes every operation that has the host wait for a device of `type`
/// warn (`mode` 1), fail (2) or neither (0), as torch.cuda.set_sync_debug_mode
/// (CUDA only; process-wide; see `fulmen_device_set_sync_debug_mode`).
inline void set_sync_debug_mode(DeviceType type, int32_t mode) {
    check(fulmen_device_set_sync_debug_mode(static_cast<int32_t>(type), mode));
}

/// The state of libtorch's default random generator for `device`.
inline std::vector<uint8_t> device_rng_state(Device device) {
    std::vector<uint8_t> state(FULMEN_MAX_RNG_STATE);
    size_t len = 0;
    check(fulmen_device_rng_state(static_cast<int32_t>(device.type), device.index, state.data(), state.size(), &len));
    state.resize(len);
    return state;
}

/// Restores a state device_rng_state returned.
inline void set_device_rng_state(Device device, const std::vector<uint8_t>& state) {
    check(fulmen_device_set_rng_state(static_cast<int32_t>(device.type), device.index, state.data(), state.size()));
}

/// Registers fulmen's fake device as the PrivateUse1 backend `name` with
/// `count` devices (process-wide and permanent, before the first backward
/// pass in the process; see `fulmen_fake_device_register`): the device
/// custom accelerators are tested on.
inline void register_fake_device(const std::string& name, size_t count) {
    check(fulmen_fake_device_register(name.c_str(), count));
}

/// How many times the host has waited for the fake device's data in this
/// process: scalar reads and copies into host memory, except non-blocking
/// copies into pinned memory (see `fulmen_fake_device_host_reads`). A count
/// that does not grow over training steps shows steps that never wait for
/// their device.
inline uint64_t fake_device_host_reads() {
    uint64_t n = 0;
    check(fulmen_fake_device_host_reads(&n));
    return n;
}

namespace detail {

inline fulmen_device to_c_device(Device d) noexcept { return fulmen_device{static_cast<int32_t>(d.type), d.index}; }
inline Device from_c_device(fulmen_device d) noexcept { return Device{static_cast<DeviceType>(d.device_type), d.index}; }

/// Runs a C call that may run custom-accelerator callbacks: a stale
/// callback exception is forgotten first, and one recorded by a callback
/// whose error fulmen swallowed (is_available, auto_device_count) is not
/// left behind for an unrelated later call.
template <class Call>
void run_accelerator_call(Call&& call) {
    clear_pending_exception();
    fulmen_error* err = call();
    if (err == nullptr) clear_pending_exception();
    check(err);
}

/// Reads a list through the C pattern `fn(buf, capacity, &n)` that writes
/// `n` even when the buffer is too small (failing with
/// FULMEN_CODE_OUT_OF_RANGE), growing the buffer once.
template <class T, class Fn>
std::vector<T> read_list(Fn&& fn, size_t initial = 16) {
    std::vector<T> buf(initial == 0 ? 1 : initial);
    size_t n = 0;
    clear_pending_exception();
    fulmen_error* err = fn(buf.data(), buf.size(), &n);
    if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_OUT_OF_RANGE && n > buf.size() &&
        !pending_exception()) {
        fulmen_error_free(err);
        buf.resize(n);
        n = 0;
        err = fn(buf.data(), buf.size(), &n);
    }
    if (err == nullptr) clear_pending_exception();
    check(err);
    buf.resize(n);
    return buf;
}

}  // namespace detail

/// One registry entry (`fulmen_accelerator_registry_entry`).
struct AcceleratorInfo {
    std::string name;         ///< The registered name ("cpu", "cuda", ...).
    std::string description;  ///< What it is.
    bool available = false;   ///< Whether it can be used on this machine.
};

/// An accelerator from the registry (Lightning's Accelerator): a
/// registered name ("cpu", "cuda", "mps", "xla", or a custom one) or an
/// alias ("auto", "gpu", "tpu") resolved on this machine. Move-only; the
/// handle keeps the accelerator alive (a custom one is destroyed only once
/// it left the registry and every handle and trainer using it is gone).
class Accelerator : public detail::Handle<fulmen_accelerator, fulmen_accelerator_free> {
public:
    /// An empty accelerator (no handle).
    Accelerator() = default;

    /// The C handle, still owned by this object (get() next to the static get(name)).
    using Handle::get;

    /// Looks `name` up: a registered name or an alias ("auto": xla > mps >
    /// cuda > cpu by availability; "gpu": mps if available, else cuda;
    /// "tpu": xla). Throws Error for an unknown name (listing the known
    /// ones) and for "gpu" when no GPU is available.
    static Accelerator get(const std::string& name) {
        fulmen_accelerator* out = nullptr;
        detail::run_accelerator_call([&] { return fulmen_accelerator_get(name.c_str(), &out); });
        return Accelerator(out);
    }

    /// Takes ownership of a `fulmen_accelerator` handle.
    static Accelerator adopt(fulmen_accelerator* handle) noexcept { return Accelerator(handle); }

    /// The registry name ("cpu" for get("auto") on a CPU-only machine).
    std::string name() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_accelerator_name(get(), buf, cap, len); });
    }

    /// Whether it can be used on this machine.
    bool is_available() const {
        bool out = false;
        detail::run_accelerator_call([&] { return fulmen_accelerator_is_available(get(), &out); });
        return out;
    }

    /// How many devices `devices="auto"` uses (1 for the CPU).
    size_t auto_device_count() const {
        size_t out = 0;
        detail::run_accelerator_call([&] { return fulmen_accelerator_auto_device_count(get(), &out); });
        return out;
    }

    /// The device ids `devices` selects, as Lightning's device parser
    /// ("auto", "N", "-1", "1,3", "[0]"; for the CPU a process count N,
    /// giving 0..N-1). Throws Error for rejected values.
    std::vector<int64_t> parse_devices(const std::string& devices) const {
        return detail::read_list<int64_t>([&](int64_t* ids, size_t cap, size_t* n) {
            return fulmen_accelerator_parse_devices(get(), devices.c_str(), ids, cap, n);
        });
    }

    /// The libtorch devices `devices` selects (Lightning's get_parallel_devices).
    std::vector<Device> parallel_devices(const std::string& devices) const {
        std::vector<fulmen_device> raw = detail::read_list<fulmen_device>([&](fulmen_device* out, size_t cap, size_t* n) {
            return fulmen_accelerator_get_parallel_devices(get(), devices.c_str(), out, cap, n);
        });
        std::vector<Device> out;
        out.reserve(raw.size());
        for (const fulmen_device& d : raw) out.push_back(detail::from_c_device(d));
        return out;
    }

    /// Prepares `device` for use (Lightning's setup_device).
    void setup_device(Device device) const {
        detail::run_accelerator_call([&] { return fulmen_accelerator_setup_device(get(), detail::to_c_device(device)); });
    }

    /// Releases what the accelerator holds (Lightning's teardown).
    void teardown() const {
        detail::run_accelerator_call([&] { return fulmen_accelerator_teardown(get()); });
    }

    /// `device`'s statistics (Lightning's get_device_stats; on the CPU
    /// cpu_rss_bytes, cpu_percent, cpu_vm_percent, cpu_swap_percent).
    std::map<std::string, double> device_stats(Device device) const {
        std::vector<fulmen_device_stat> raw =
            detail::read_list<fulmen_device_stat>([&](fulmen_device_stat* out, size_t cap, size_t* n) {
                return fulmen_accelerator_device_stats(get(), detail::to_c_device(device), out, cap, n);
            }, 32);
        std::map<std::string, double> out;
        for (const fulmen_device_stat& s : raw) {
            const void* nul = std::memchr(s.name, '\0', sizeof s.name);
            size_t len = nul != nullptr ? static_cast<size_t>(static_cast<const char*>(nul) - s.name) : sizeof s.name;
            out[std::string(s.name, len)] = s.value;
        }
        return out;
    }

private:
    explicit Accelerator(fulmen_accelerator* owned) noexcept : Handle(owned) {}
};

/// The registered accelerators, in registry order (built-ins first).
inline std::vector<AcceleratorInfo> registry() {
    size_t n = 0;
    detail::run_accelerator_call([&] { return fulmen_accelerator_registry_len(&n); });
    std::vector<AcceleratorInfo> out;
    out.reserve(n);
    for (size_t i = 0; i < n; i++) {
        AcceleratorInfo info;
        bool available = false;
        auto entry = [&](char* name, size_t name_cap, size_t* name_len, char* desc, size_t desc_cap,
                         size_t* desc_len) {
            return fulmen_accelerator_registry_entry(i, name, name_cap, name_len, desc, desc_cap, desc_len, &available);
        };
        std::vector<char> name(64), desc(256);
        size_t name_len = 0, desc_len = 0;
        detail::clear_pending_exception();
        fulmen_error* err = entry(name.data(), name.size(), &name_len, desc.data(), desc.size(), &desc_len);
        if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_OUT_OF_RANGE &&
            (name_len >= name.size() || desc_len >= desc.size())) {
            fulmen_error_free(err);
            name.resize(std::max(name.size(), name_len + 1));
            desc.resize(std::max(desc.size(), desc_len + 1));
            err = entry(name.data(), name.size(), &name_len, desc.data(), desc.size(), &desc_len);
        }
        if (err == nullptr) detail::clear_pending_exception();
        check(err);
        info.name.assign(name.data(), name_len);
        info.description.assign(desc.data(), desc_len);
        info.available = available;
        out.push_back(std::move(info));
    }
    return out;
}

/// A custom accelerator implemented in C++ (Lightning's Accelerator
/// subclass). Derive from it, override what differs from the defaults and
/// hand it to register_accelerator, which owns it from then on: fulmen
/// destroys it exactly once, when it left the registry (unregistered or
/// replaced) and no Accelerator handle or trainer uses it any more.
///
/// fulmen serialises the calls; they run on the thread using the
/// accelerator (the one calling Trainer::fit, Accelerator::..., registry()).
/// An exception thrown here becomes a fulmen error, and the original
/// exception is rethrown, unchanged, by the fulmen call that ran it
/// (Accelerator::is_available included; the registry and a run's device
/// choice read a throwing is_available as false and a throwing
/// auto_device_count as 0 devices). A teardown that throws after a run
/// failed does not hide the run's failure: Trainer::fit then throws a
/// fulmen::Error with the run's code and message, the teardown's attached
/// after it. Do not call the accelerator registry from these methods.
class CustomAccelerator {
public:
    CustomAccelerator() = default;
    virtual ~CustomAccelerator() = default;
    CustomAccelerator(const CustomAccelerator&) = delete;
    CustomAccelerator& operator=(const CustomAccelerator&) = delete;

    /// Whether it can run here (Trainer refuses an unavailable one).
    virtual bool is_available() = 0;
    /// How many devices it has (devices="auto" and the default parser's range).
    virtual size_t auto_device_count() = 0;
    /// Parses `devices` ("auto", "2", "0,1", "-1", ...) into device ids in
    /// [0, auto_device_count()). Optional: used only when the type handed to
    /// register_accelerator (or a base of it) declares it, or when
    /// custom_parse_devices() returns true; otherwise fulmen uses
    /// Lightning's GPU-style parser over auto_device_count() devices.
    virtual std::vector<int64_t> parse_devices(const std::string& devices) {
        throw Error(FULMEN_CODE_UNSUPPORTED, "CustomAccelerator::parse_devices is not overridden (\"" + devices + "\")");
    }
    /// Set to true to have parse_devices called when the accelerator is
    /// registered through a `std::unique_ptr<CustomAccelerator>` (whose
    /// static type does not show the override).
    virtual bool custom_parse_devices() const { return false; }
    /// Maps device ids to libtorch devices, one per id. Default: the CPU
    /// for every id (an accelerator computing with CPU tensors).
    virtual std::vector<Device> parallel_devices(const std::vector<int64_t>& ids) {
        return std::vector<Device>(ids.size(), Device::cpu());
    }
    /// Prepares a device before training. Default: nothing.
    virtual void setup_device(Device /*device*/) {}
    /// Releases resources after a run. Default: nothing.
    virtual void teardown() {}
    /// Device statistics (name -> value; names over 63 bytes are
    /// truncated by fulmen). Default: none.
    virtual std::map<std::string, double> device_stats(Device /*device*/) { return {}; }
    /// Whether the devices compute in `dtype`; the trainer refuses a
    /// precision that needs one they do not. Default: every dtype.
    virtual bool supports_dtype(DType /*dtype*/) { return true; }
    /// Whether float16 training needs loss scaling there (a GradScaler
    /// for 16-mixed). Default: true.
    virtual bool fp16_needs_loss_scaling() { return true; }
    /// Blocks until the work queued on `device` is done (the trainer asks
    /// before timing code reads a clock). Default: the device type's
    /// backend. Called only when the type handed to register_accelerator
    /// declares it (as parse_devices); the same holds for the generator
    /// pair below.
    virtual void synchronize(Device device) { device_synchronize(device); }
    /// The state of `device`'s random generator, which checkpoints keep
    /// (at most FULMEN_MAX_RNG_STATE bytes). Default: libtorch's default
    /// generator for the device.
    virtual std::vector<uint8_t> rng_state(Device device) { return device_rng_state(device); }
    /// Restores a state rng_state returned (read from a checkpoint: check
    /// it). Default: libtorch's default generator.
    virtual void set_rng_state(Device device, const std::vector<uint8_t>& state) { set_device_rng_state(device, state); }
    /// The name of the accelerator's own collectives backend ("hccl": 1 to
    /// 64 characters of [a-z0-9_-], not gloo, nccl, mpi, ucc or xccl), read
    /// once at registration. Not empty: DDP on its PrivateUse1 (or CPU)
    /// devices calls open_collectives (see fulmen_collectives). Default:
    /// empty, gloo (through the CPU for PrivateUse1 devices).
    virtual std::string collectives_name() const { return {}; }
    /// Opens this rank's group of `world_size` ranks on `device`, once per
    /// job; `store` stays valid while the group lives. An exception fails
    /// the join (and the run) and is rethrown by the call that joined.
    virtual std::unique_ptr<CollectiveGroup> open_collectives(const DistStore& /*store*/, int /*rank*/,
                                                              int /*world_size*/, Device /*device*/) {
        throw Error(FULMEN_CODE_UNSUPPORTED, "CustomAccelerator::open_collectives is not overridden");
    }
};

namespace detail {

/// Trampolines from `fulmen_accelerator_vtable` to a CustomAccelerator.
struct AcceleratorTrampolines {
    static CustomAccelerator& self(void* ud) noexcept { return *static_cast<CustomAccelerator*>(ud); }
    static void free_accelerator(void* p) noexcept { delete static_cast<CustomAccelerator*>(p); }
    static fulmen_error* is_available(void* ud, bool* out) noexcept {
        return guard_callback([&] { *out = self(ud).is_available(); });
    }
    static fulmen_error* auto_device_count(void* ud, size_t* out) noexcept {
        return guard_callback([&] { *out = self(ud).auto_device_count(); });
    }
    static fulmen_error* parse_devices(void* ud, const char* devices, int64_t* ids, size_t capacity,
                                       size_t* n_out) noexcept {
        return guard_callback([&] {
            std::vector<int64_t> parsed = self(ud).parse_devices(devices != nullptr ? devices : "");
            *n_out = parsed.size();
            for (size_t i = 0; i < parsed.size() && i < capacity; i++) ids[i] = parsed[i];
        });
    }
    static fulmen_error* parallel_devices(void* ud, const int64_t* ids, size_t n, fulmen_device* out) noexcept {
        return guard_callback([&] {
            std::vector<Device> devices = self(ud).parallel_devices(std::vector<int64_t>(ids, ids + n));
            if (devices.size() != n) {
                throw Error(FULMEN_CODE_CALLBACK, "CustomAccelerator::parallel_devices returned " +
                                                      std::to_string(devices.size()) + " devices for " +
                                                      std::to_string(n) + " ids");
            }
            for (size_t i = 0; i < n; i++) out[i] = to_c_device(devices[i]);
        });
    }
    static fulmen_error* setup_device(void* ud, fulmen_device device) noexcept {
        return guard_callback([&] { self(ud).setup_device(from_c_device(device)); });
    }
    static fulmen_error* teardown(void* ud) noexcept {
        return guard_callback([&] { self(ud).teardown(); });
    }
    static fulmen_error* device_stats(void* ud, fulmen_device device, fulmen_stats_builder* stats) noexcept {
        return guard_callback([&] {
            for (const auto& [name, value] : self(ud).device_stats(from_c_device(device))) {
                check(fulmen_stats_builder_add(stats, name.c_str(), value));
            }
        });
    }
    static fulmen_error* supports_dtype(void* ud, int32_t dtype, bool* out) noexcept {
        return guard_callback([&] { *out = self(ud).supports_dtype(static_cast<DType>(dtype)); });
    }
    static fulmen_error* fp16_needs_loss_scaling(void* ud, bool* out) noexcept {
        return guard_callback([&] { *out = self(ud).fp16_needs_loss_scaling(); });
    }
    static fulmen_error* synchronize(void* ud, fulmen_device device) noexcept {
        return guard_callback([&] { self(ud).synchronize(from_c_device(device)); });
    }
    static fulmen_error* get_rng_state(void* ud, fulmen_device device, uint8_t* buf, size_t capacity,
                                       size_t* len) noexcept {
        return guard_callback([&] {
            std::vector<uint8_t> state = self(ud).rng_state(from_c_device(device));
            if (state.size() > capacity) {
                throw Error(FULMEN_CODE_OUT_OF_RANGE, "CustomAccelerator::rng_state returned " +
                                                          std::to_string(state.size()) + " bytes, over " +
                                                          std::to_string(capacity));
            }
            std::copy(state.begin(), state.end(), buf);
            *len = state.size();
        });
    }
    static fulmen_error* set_rng_state(void* ud, fulmen_device device, const uint8_t* data, size_t len) noexcept {
        return guard_callback([&] {
            self(ud).set_rng_state(from_c_device(device), std::vector<uint8_t>(data, data + len));
        });
    }
    /// Tensors sharing storage with borrowed handles.
    static std::vector<Tensor> shared(fulmen_tensor* const* handles, size_t n) {
        std::vector<Tensor> out;
        out.reserve(n);
        for (size_t i = 0; i < n; i++) {
            out.push_back(Tensor::make([&](fulmen_tensor** o) { return fulmen_tensor_share(handles[i], o); }));
        }
        return out;
    }
    static CollectiveGroup& group(void* g) noexcept { return *static_cast<CollectiveGroup*>(g); }
    static fulmen_error* group_new(void* ud, const fulmen_dist_store* store, int32_t rank, int32_t world,
                                   fulmen_device device, void** out) noexcept {
        return guard_callback([&] {
            std::unique_ptr<CollectiveGroup> g = self(ud).open_collectives(DistStore(store), rank, world,
                                                                           from_c_device(device));
            if (!g) throw Error(FULMEN_CODE_CALLBACK, "CustomAccelerator::open_collectives returned no group");
            *out = g.release();
        });
    }
    static void group_free(void* /*ud*/, void* g) noexcept { delete static_cast<CollectiveGroup*>(g); }
    static fulmen_error* all_reduce(void* /*ud*/, void* g, fulmen_tensor* const* tensors, size_t n,
                                    int32_t op) noexcept {
        return guard_callback([&] {
            std::vector<Tensor> list = shared(tensors, n);
            group(g).all_reduce(list, static_cast<ReduceOp>(op));
        });
    }
    static fulmen_error* broadcast(void* /*ud*/, void* g, fulmen_tensor* const* tensors, size_t n,
                                   int32_t root) noexcept {
        return guard_callback([&] {
            std::vector<Tensor> list = shared(tensors, n);
            group(g).broadcast(list, root);
        });
    }
    static fulmen_error* all_gather(void* /*ud*/, void* g, const fulmen_tensor* input, fulmen_tensor* const* outputs,
                                    size_t n) noexcept {
        return guard_callback([&] {
            fulmen_tensor* in = const_cast<fulmen_tensor*>(input);
            std::vector<Tensor> ins = shared(&in, 1), outs = shared(outputs, n);
            group(g).all_gather(ins[0], outs);
        });
    }
    static fulmen_error* barrier(void* /*ud*/, void* g) noexcept {
        return guard_callback([&] { group(g).barrier(); });
    }
    // A group without reduce_scatter answers UNSUPPORTED (not an exception
    // of the host's: nothing is kept as a failure's cause).
    static fulmen_error* reduce_scatter(void* /*ud*/, void* g, const fulmen_tensor* input, fulmen_tensor* output,
                                        int32_t op) noexcept {
        bool done = false;
        fulmen_error* e = guard_callback([&] {
            fulmen_tensor* in = const_cast<fulmen_tensor*>(input);
            std::vector<Tensor> ins = shared(&in, 1), outs = shared(&output, 1);
            done = group(g).reduce_scatter(ins[0], outs[0], static_cast<ReduceOp>(op));
        });
        if (e != nullptr || done) return e;
        return fulmen_error_new(FULMEN_CODE_UNSUPPORTED, "the CollectiveGroup has no reduce_scatter");
    }
    /// The collectives slots under `name` (which must outlive the registration call).
    static fulmen_collectives collectives(const std::string& name) noexcept {
        fulmen_collectives c{};
        c.struct_size = sizeof c;
        c.name = name.c_str();
        c.group_new = &group_new;
        c.group_free = &group_free;
        c.all_reduce = &all_reduce;
        c.broadcast = &broadcast;
        c.all_gather = &all_gather;
        c.barrier = &barrier;
        c.reduce_scatter = &reduce_scatter;
        return c;
    }
    static fulmen_accelerator_vtable vtable(CustomAccelerator* acc, bool custom_parse, bool custom_sync,
                                            bool custom_rng) noexcept {
        fulmen_accelerator_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = acc;
        vt.userdata_free = &free_accelerator;
        vt.is_available = &is_available;
        vt.auto_device_count = &auto_device_count;
        vt.parse_devices = custom_parse ? &parse_devices : nullptr;  // NULL: Lightning's parser
        vt.get_parallel_devices = &parallel_devices;
        vt.setup_device = &setup_device;
        vt.teardown = &teardown;
        vt.get_device_stats = &device_stats;
        vt.supports_dtype = &supports_dtype;
        vt.fp16_needs_loss_scaling = &fp16_needs_loss_scaling;
        // NULL unless overridden: fulmen's own defaults then (libtorch's,
        // skipped with a warning where a backend has none).
        vt.synchronize = custom_sync ? &synchronize : nullptr;
        vt.get_rng_state = custom_rng ? &get_rng_state : nullptr;
        vt.set_rng_state = custom_rng ? &set_rng_state : nullptr;
        return vt;
    }
};

/// Whether `T` (or a base between it and CustomAccelerator) declares parse_devices.
template <class T>
constexpr bool declares_parse_devices() {
    return !std::is_same_v<decltype(&T::parse_devices), decltype(&CustomAccelerator::parse_devices)>;
}

/// Whether `T` (or a base between it and CustomAccelerator) declares synchronize.
template <class T>
constexpr bool declares_synchronize() {
    return !std::is_same_v<decltype(&T::synchronize), decltype(&CustomAccelerator::synchronize)>;
}

/// Whether `T` (or a base between it and CustomAccelerator) declares
/// rng_state or set_rng_state.
template <class T>
constexpr bool declares_rng_state() {
    return !std::is_same_v<decltype(&T::rng_state), decltype(&CustomAccelerator::rng_state)> ||
           !std::is_same_v<decltype(&T::set_rng_state), decltype(&CustomAccelerator::set_rng_state)>;
}

}  // namespace detail

/// Registers `accelerator` under `name` (trimmed, lower-cased) so that
/// TrainerOptions accept `accelerator=name`. fulmen owns it from then on.
/// A registered name is refused unless `override_existing` (which replaces
/// it); "auto", "gpu" and "tpu" are reserved. On refusal the accelerator is
/// destroyed and Error is thrown.
template <class T, class = std::enable_if_t<std::is_base_of_v<CustomAccelerator, T>>>
void register_accelerator(const std::string& name, const std::string& description, std::unique_ptr<T> accelerator,
                          bool override_existing = false) {
    if (!accelerator) throw Error(FULMEN_CODE_NULL_ARGUMENT, "register_accelerator: the accelerator is null");
    CustomAccelerator* acc = accelerator.get();
    const bool custom_parse = detail::declares_parse_devices<T>() || acc->custom_parse_devices();
    fulmen_accelerator_vtable vt = detail::AcceleratorTrampolines::vtable(
        acc, custom_parse, detail::declares_synchronize<T>(), detail::declares_rng_state<T>());
    const std::string collectives_name = acc->collectives_name();
    fulmen_collectives collectives = detail::AcceleratorTrampolines::collectives(collectives_name);
    if (!collectives_name.empty()) vt.collectives = &collectives;  // copied by the registration
    // On failure fulmen does not call userdata_free: `accelerator` deletes it.
    detail::run_accelerator_call(
        [&] { return fulmen_accelerator_register(name.c_str(), description.c_str(), &vt, override_existing); });
    accelerator.release();  // fulmen owns it now and calls userdata_free once
}

/// Removes a registered accelerator (custom or built-in) by name. A custom
/// one is destroyed now, or when the last Accelerator handle or trainer
/// using it is gone.
inline void unregister_accelerator(const std::string& name) {
    detail::run_accelerator_call([&] { return fulmen_accelerator_unregister(name.c_str()); });
}

}  // namespace fulmen

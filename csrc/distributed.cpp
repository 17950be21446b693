// libtorch's c10d for fulmen: a process group (TCPStore -> PrefixStore
// chain as Python's init_process_group builds it -> ProcessGroupGloo, or
// ProcessGroupNCCL on CUDA builds), its collectives, and the c10d::Reducer
// that averages gradients during backward() as DistributedDataParallel does.
//
// Compiled only with gloo headers (FULMEN_WITH_GLOO, set by build.rs); without
// them every entry point answers FULMEN_CXX_UNSUPPORTED with a clear message.
// Tensors cross as `at::Tensor*`, the representation torch-sys uses.
#include "fulmen_cxx.h"

#include <cstdint>

#ifdef FULMEN_WITH_GLOO
#include "collectives.hpp"
#include "torch_version.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#ifdef FULMEN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

// A process group with the store it rendezvoused through (and the master
// address its gloo device was chosen for, which its subgroups reuse).
struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::chrono::milliseconds timeout;
  std::string master;
};

// A Reducer over a model's parameters, bound to one group.
struct DdpReducer {
  std::shared_ptr<c10d::Reducer> reducer;
  std::vector<at::Tensor> params;
};

std::vector<at::Tensor> borrow(void* const* tensors, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(*static_cast<const at::Tensor*>(tensors[i]));
  }
  return out;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The gloo transport device Python picks: GLOO_SOCKET_IFNAME's interface,
// loopback for a loopback master, else the host's own address.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    std::string first(ifname);
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (is_loopback(master)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

void wait(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  if (!work->wait(timeout)) {
    throw std::runtime_error("collective did not finish within the timeout");
  }
}

// The keys of the group `name` in the job's store, as Python's groups have
// them: "default_pg/<name>/".
c10::intrusive_ptr<c10d::Store> group_store(const c10::intrusive_ptr<c10d::Store>& tcp, const std::string& name) {
  auto base = c10::make_intrusive<c10d::PrefixStore>("default_pg", tcp);
  return c10::make_intrusive<c10d::PrefixStore>(name + "/", base);
}

// Gives `pg` a gloo backend for CPU tensors (its default), meeting under
// the group's "cpu/" keys.
c10::intrusive_ptr<c10d::ProcessGroupGloo> attach_gloo(const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                                                       const c10::intrusive_ptr<c10d::Store>& group, int rank,
                                                       int world, std::chrono::milliseconds timeout,
                                                       const std::string& master) {
  auto cpu = c10::make_intrusive<c10d::PrefixStore>("cpu/", group);
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(gloo_device(master));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(cpu, rank, world, opts);
  gloo->setSequenceNumberForGroup();
  pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  return gloo;
}

#ifdef FULMEN_WITH_NCCL
// Gives `pg` an NCCL backend for CUDA tensors (its default), meeting under
// the group's "cuda/" keys.
void attach_nccl(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const c10::intrusive_ptr<c10d::Store>& group,
                 int rank, int world, std::chrono::milliseconds timeout) {
  auto cuda = c10::make_intrusive<c10d::PrefixStore>("cuda/", group);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(cuda, rank, world, opts);
  nccl->setSequenceNumberForGroup();
  pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
}
#endif

const char* const kNoNccl = "the nccl backend needs a libtorch with CUDA and the NCCL headers at build time";

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case 0:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case 1:
      return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case 2:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case 3:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    default:
      throw std::invalid_argument("unknown reduce op " + std::to_string(op));
  }
}

}  // namespace
#endif

#ifdef FULMEN_WITH_GLOO
// TCPStore counts the ranks that arrived in its key "init/" without its
// "/" key prefix (TCPStore::waitForWorkers through the private
// incrementValueBy), out of reach of the public add(). Python ranks count
// themselves there, so fulmen does too: this names that member (an explicit
// instantiation may name a private member), to count and read as
// waitForWorkers does without blocking in it.
namespace {
struct IncrementValueBy {
  using type = int64_t (c10d::TCPStore::*)(const std::string&, int64_t);
  friend type member(IncrementValueBy);
};
template <typename Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type member(Tag) { return M; }
};
template struct Expose<IncrementValueBy, &c10d::TCPStore::incrementValueBy>;

int64_t count_init(c10d::TCPStore& store, int64_t delta) {
  return (store.*member(IncrementValueBy{}))("init/", delta);
}
}  // namespace
#endif

extern "C" {

// Which backends this build has: bit 0 gloo, bit 1 NCCL.
int fulmen_cxx_dist_backends(void) {
  int bits = 0;
#ifdef FULMEN_WITH_GLOO
  bits |= 1;
#endif
#ifdef FULMEN_WITH_NCCL
  bits |= 2;
#endif
  return bits;
}

#ifdef FULMEN_WITH_GLOO

// Connects to (rank 0: also serves, unless `all_clients`) the TCPStore at
// addr:port and counts this rank in its "init/" key, as TCPStore's own
// waitForWorkers does, without waiting for the others: the caller polls
// fulmen_cxx_store_joined so it can give up early. `connect_ms` bounds this
// call (a client retries until then); `timeout_ms` becomes the store's
// timeout afterwards. On success *out owns the store (fulmen_cxx_store_free).
int fulmen_cxx_store_new(const char* addr, int port, int rank, int world, int all_clients, int64_t connect_ms,
                         int64_t timeout_ms, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = all_clients == 0 && rank == 0;
  o.numWorkers = world;
  o.waitWorkers = false;
  o.multiTenant = true;
  o.timeout = std::chrono::milliseconds(connect_ms);
  auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(addr), o);
  tcp->setTimeout(std::chrono::milliseconds(timeout_ms));
  count_init(*tcp, 1);
  *out = new c10::intrusive_ptr<c10d::Store>(tcp);
  FULMEN_CXX_CATCH(err, err_len)
}

// Writes how many ranks have counted themselves in the store so far.
int fulmen_cxx_store_joined(void* store, int64_t* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  *out = count_init(*static_cast<c10d::TCPStore*>(held.get()), 0);
  FULMEN_CXX_CATCH(err, err_len)
}

// Frees a store made by fulmen_cxx_store_new (NULL is ignored).
void fulmen_cxx_store_free(void* store) {
  try {
    delete static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  } catch (...) {
  }
}

// A new reference to the store under the key prefix `prefix` (the
// namespace a collectives hook gets); free with fulmen_cxx_store_free.
int fulmen_cxx_store_prefixed(void* store, const char* prefix, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  c10::intrusive_ptr<c10d::Store> prefixed = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), held);
  *out = new c10::intrusive_ptr<c10d::Store>(prefixed);
  FULMEN_CXX_CATCH(err, err_len)
}

// Sets `key` to `len` bytes of `data`.
int fulmen_cxx_store_set(void* store, const char* key, const uint8_t* data, size_t len, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  held->set(std::string(key), std::vector<uint8_t>(data, data + len));
  FULMEN_CXX_CATCH(err, err_len)
}

// Waits (up to the store's timeout) for `key` and copies its value into
// buf[0..capacity]; *len gets its size. A value larger than `capacity` is
// not copied (*len still written) and the call returns FULMEN_CXX_UNSUPPORTED.
int fulmen_cxx_store_get(void* store, const char* key, uint8_t* buf, size_t capacity, size_t* len, char* err,
                         size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  auto value = held->get(std::string(key));
  *len = value.size();
  if (value.size() > capacity) {
    fulmen_cxx::write_message("the value of \"" + std::string(key) + "\" has " + std::to_string(value.size()) +
                                  " bytes, the buffer holds " + std::to_string(capacity),
                              err, err_len);
    return FULMEN_CXX_UNSUPPORTED;
  }
  if (!value.empty()) {
    std::memcpy(buf, value.data(), value.size());
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Writes whether `key` is set (without waiting).
int fulmen_cxx_store_check(void* store, const char* key, int* present, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  *present = held->check({std::string(key)}) ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Adds `delta` to the counter `key` (created at 0) and writes the new value.
int fulmen_cxx_store_add(void* store, const char* key, int64_t delta, int64_t* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  *out = held->add(std::string(key), delta);
  FULMEN_CXX_CATCH(err, err_len)
}

// Deletes `key`; writes whether it existed.
int fulmen_cxx_store_delete(void* store, const char* key, int* deleted, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto& held = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  *deleted = held->deleteKey(std::string(key)) ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Creates the default process group "0" with `backend` ("gloo", "nccl",
// or a collectives hook's name) over a store every rank has joined;
// `timeout_ms` bounds the backend's rendezvous and every collective.
// `device_type` (a c10::DeviceType code) is the type of the devices the run
// trains on: when it is neither the CPU nor CUDA, its tensors go to `hooks`
// (a host collectives group) or, when `hooks` is NULL, through the CPU to
// gloo. With `hooks` on CPU devices the hook replaces gloo. The shim owns
// `hooks->ctx` from the call on, on failure too. On success *out owns the
// group (free with fulmen_cxx_pg_free); the store stays the caller's.
int fulmen_cxx_pg_new(void* store, int rank, int world, int64_t timeout_ms, const char* addr, const char* backend,
                      int device_index, int device_type, const fulmen_cxx_collectives* hooks, void** out, char* err,
                      size_t err_len) {
  // The hooks' context is this call's from the start: released exactly
  // once, by the guard until the backend owns it.
  struct HooksGuard {
    const fulmen_cxx_collectives* hooks;
    ~HooksGuard() {
      if (hooks != nullptr) {
        hooks->release(hooks->ctx);
      }
    }
  } guard{hooks};
  FULMEN_CXX_TRY
  std::string master(addr);
  std::string name(backend);
  c10::intrusive_ptr<c10d::Backend> host;
  if (hooks != nullptr) {
    host = fulmen_cxx::host_backend(rank, world, *hooks, name);
    guard.hooks = nullptr;
  }
  auto timeout = std::chrono::milliseconds(timeout_ms);
  auto type = static_cast<c10::DeviceType>(device_type);
  c10::intrusive_ptr<c10d::Store> tcp = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
  // The key namespace of Python's init_process_group, so Python ranks of
  // the same torch version can share the group.
  auto group = group_store(tcp, "0");
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(group, rank, world);
  auto add_gloo = [&]() { return attach_gloo(pg, group, rank, world, timeout, master); };
  bool other_device = type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA;
  if (host) {
    if (type == c10::DeviceType::CPU) {
      pg->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
    } else {
      TORCH_CHECK(other_device, "a collectives hook serves devices other than CUDA");
      add_gloo();
    }
    pg->setBackend(type, c10d::ProcessGroup::BackendType::CUSTOM, host);
  } else if (name == "gloo") {
    auto gloo = add_gloo();
    if (other_device) {
      pg->setBackend(type, c10d::ProcessGroup::BackendType::CUSTOM,
                     fulmen_cxx::staged_backend(rank, world, gloo, timeout));
    }
  } else if (name == "nccl") {
    (void)device_index;
#ifdef FULMEN_WITH_NCCL
    attach_nccl(pg, group, rank, world, timeout);
#else
    fulmen_cxx::write_message(kNoNccl, err, err_len);
    return FULMEN_CXX_UNSUPPORTED;
#endif
  } else {
    throw std::invalid_argument("unknown process group backend \"" + name +
                                "\" (expected gloo, nccl, or the name of an accelerator's collectives hook)");
  }
  pg->setGroupName("0");
  *out = new Group{tcp, pg, timeout, master};
  FULMEN_CXX_CATCH(err, err_len)
}

// Creates the subgroup `name` of `parent`'s job (Python's new_group): its
// `world` members meet in the parent's store under "default_pg/<name>/",
// as Python's groups do, this process being member `rank`, with `backend`
// ("gloo" or "nccl"; a collectives hook's groups have none). Only the
// members call it, every one with the same name. On success *out owns the
// subgroup (free with fulmen_cxx_pg_free).
int fulmen_cxx_pg_subgroup(void* parent, const char* name, int rank, int world, const char* backend, void** out,
                           char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* p = static_cast<Group*>(parent);
  std::string kind(backend);
  std::string group_name(name);
  auto group = group_store(p->store, group_name);
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(group, rank, world);
  if (kind == "gloo") {
    attach_gloo(pg, group, rank, world, p->timeout, p->master);
  } else if (kind == "nccl") {
#ifdef FULMEN_WITH_NCCL
    attach_nccl(pg, group, rank, world, p->timeout);
#else
    fulmen_cxx::write_message(kNoNccl, err, err_len);
    return FULMEN_CXX_UNSUPPORTED;
#endif
  } else {
    fulmen_cxx::write_message("subgroups are made with the gloo or nccl backend, not with \"" + kind +
                                  "\" (an accelerator's collectives hook)",
                              err, err_len);
    return FULMEN_CXX_UNSUPPORTED;
  }
  pg->setGroupName(group_name);
  *out = new Group{p->store, pg, p->timeout, p->master};
  FULMEN_CXX_CATCH(err, err_len)
}

// Frees a group made by fulmen_cxx_pg_new (NULL is ignored).
void fulmen_cxx_pg_free(void* group) {
  try {
    delete static_cast<Group*>(group);
  } catch (...) {
  }
}

// All-reduces `n` tensors in place with `op` (0 sum, 1 product, 2 min, 3 max).
int fulmen_cxx_pg_allreduce(void* group, void* const* tensors, size_t n, int op, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  auto list = borrow(tensors, n);
  c10d::AllreduceOptions opts;
  opts.reduceOp = reduce_op(op);
  opts.timeout = g->timeout;
  wait(g->pg->allreduce(list, opts), g->timeout);
  FULMEN_CXX_CATCH(err, err_len)
}

// Broadcasts `n` tensors in place from rank `root`.
int fulmen_cxx_pg_broadcast(void* group, void* const* tensors, size_t n, int root, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  auto list = borrow(tensors, n);
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = g->timeout;
  wait(g->pg->broadcast(list, opts), g->timeout);
  FULMEN_CXX_CATCH(err, err_len)
}

// Broadcasts tensors from `root` in coalesced buffers (DDP's
// _sync_module_states); the tensors may require grad.
int fulmen_cxx_pg_broadcast_coalesced(void* group, void* const* tensors, size_t n, int root, char* err,
                                      size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> detached;
  for (auto& t : borrow(tensors, n)) {
    detached.push_back(t.detach());
  }
  c10d::broadcast_coalesced(g->pg, detached, 250 * 1024 * 1024, root);
  FULMEN_CXX_CATCH(err, err_len)
}

// Gathers `input` from every rank into `outputs` (world_size tensors of the
// same shape, written in place).
int fulmen_cxx_pg_allgather(void* group, const void* input, void* const* outputs, size_t n, char* err,
                            size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  std::vector<std::vector<at::Tensor>> out{borrow(outputs, n)};
  std::vector<at::Tensor> in{*static_cast<const at::Tensor*>(input)};
  c10d::AllgatherOptions opts;
  opts.timeout = g->timeout;
  wait(g->pg->allgather(out, in, opts), g->timeout);
  FULMEN_CXX_CATCH(err, err_len)
}

// A collective started and not yet waited for, with the group's timeout.
struct PendingWork {
  c10::intrusive_ptr<c10d::Work> work;
  std::chrono::milliseconds timeout;
};

// Starts gathering every rank's `input` into `output` (world_size times its
// elements, rank-major), one flat collective (torch's all_gather_into_tensor),
// without waiting: on success *out owns the work (fulmen_cxx_work_wait, then
// fulmen_cxx_work_free); `input` and `output` must live until it is waited.
int fulmen_cxx_pg_allgather_flat_start(void* group, const void* input, void* output, void** out, char* err,
                                       size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  at::Tensor in = *static_cast<const at::Tensor*>(input);
  at::Tensor o = *static_cast<const at::Tensor*>(output);
  c10d::AllgatherOptions opts;
  opts.timeout = g->timeout;
  auto work = g->pg->_allgather_base(o, in, opts);
  *out = new PendingWork{std::move(work), g->timeout};
  FULMEN_CXX_CATCH(err, err_len)
}

// Waits for a started collective (or its timeout); its error if it failed.
int fulmen_cxx_work_wait(void* work, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* w = static_cast<PendingWork*>(work);
  wait(w->work, w->timeout);
  FULMEN_CXX_CATCH(err, err_len)
}

// Whether a started collective finished (successfully or not) without
// waiting for it.
int fulmen_cxx_work_is_completed(void* work, int* done, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *done = static_cast<PendingWork*>(work)->work->isCompleted() ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// Frees a started collective's handle (waited for first by the caller).
void fulmen_cxx_work_free(void* work) {
  try {
    delete static_cast<PendingWork*>(work);
  } catch (...) {
  }
}

// Reduces `input` (world_size times `output`'s elements, rank-major) over
// the ranks with `op` and leaves this rank's part in `output` (torch's
// reduce_scatter_tensor).
int fulmen_cxx_pg_reduce_scatter_flat(void* group, const void* input, void* output, int op, char* err,
                                      size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  at::Tensor in = *static_cast<const at::Tensor*>(input);
  at::Tensor out = *static_cast<const at::Tensor*>(output);
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = reduce_op(op);
  opts.timeout = g->timeout;
  wait(g->pg->_reduce_scatter_base(out, in, opts), g->timeout);
  FULMEN_CXX_CATCH(err, err_len)
}

// Waits until every rank reaches the barrier (or the timeout passes).
int fulmen_cxx_pg_barrier(void* group, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  c10d::BarrierOptions opts;
  opts.timeout = g->timeout;
  wait(g->pg->barrier(opts), g->timeout);
  FULMEN_CXX_CATCH(err, err_len)
}

// Checks that every rank has parameters of the same count, shapes and
// dtypes as rank 0 (DDP's _verify_param_shape_across_processes).
int fulmen_cxx_pg_verify_params(void* group, void* const* params, size_t n, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  c10d::verify_params_across_processes(g->pg, borrow(params, n), std::nullopt);
  FULMEN_CXX_CATCH(err, err_len)
}

// A Reducer over `n` parameters, first bucketed with the `n_limits` size
// limits `limits` (the last repeats; torch's _compute_bucket_assignment_by_size),
// rebuilt later with `bucket_cap_bytes` and `first_bucket_bytes` as
// DistributedDataParallel does; `find_unused` as its find_unused_parameters.
int fulmen_cxx_reducer_new(void* group, void* const* params, size_t n, int find_unused, const int64_t* limits,
                           size_t n_limits, int64_t bucket_cap_bytes, int64_t first_bucket_bytes, void** out,
                           char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* g = static_cast<Group*>(group);
  auto list = borrow(params, n);
  std::vector<size_t> sizes;
  for (size_t i = 0; i < n_limits; ++i) {
    sizes.push_back(static_cast<size_t>(limits[i]));
  }
  auto [buckets, per_bucket_limits] =
      c10d::compute_bucket_assignment_by_size(list, sizes, std::vector<bool>(list.size(), false));
  (void)per_bucket_limits;
  std::reverse(buckets.begin(), buckets.end());
  auto reducer = std::make_shared<c10d::Reducer>(
      list, buckets, g->pg, std::vector<bool>(list.size(), false), bucket_cap_bytes, find_unused != 0,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{}, first_bucket_bytes,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 10
      // batched_grad_copy (2.13) keeps its default, false; 2.11 lacks it;
      // 2.9 lacks bucket_bytes_cap_list too.
      ,
      /*bucket_bytes_cap_list=*/std::vector<int64_t>{}
#endif
  );
  *out = new DdpReducer{reducer, list};
  FULMEN_CXX_CATCH(err, err_len)
}

// Frees a Reducer (NULL is ignored).
void fulmen_cxx_reducer_free(void* reducer) {
  try {
    delete static_cast<DdpReducer*>(reducer);
  } catch (...) {
  }
}

// Before a forward pass whose backward reduces (DDP's _pre_forward).
int fulmen_cxx_reducer_prepare_forward(void* reducer, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  static_cast<DdpReducer*>(reducer)->reducer->prepare_for_forward();
  FULMEN_CXX_CATCH(err, err_len)
}

// Rebuilds the buckets in the order gradients became ready, once after the
// first synchronized backward (a broadcast among ranks when it does);
// writes whether it did.
int fulmen_cxx_reducer_rebuild_buckets(void* reducer, int* rebuilt, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *rebuilt = static_cast<DdpReducer*>(reducer)->reducer->rebuild_buckets() ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// After the forward pass, before backward(): arms the autograd hooks so the
// coming backward averages gradients across ranks. `outputs` (may be empty)
// let find_unused_parameters mark parameters the graph does not reach.
int fulmen_cxx_reducer_prepare_backward(void* reducer, void* const* outputs, size_t n, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto* r = static_cast<DdpReducer*>(reducer);
  r->reducer->prepare_for_backward(borrow(outputs, n));
  FULMEN_CXX_CATCH(err, err_len)
}

#else  // no gloo headers at build time

static int no_distributed(char* err, size_t err_len) {
  fulmen_cxx::write_message(
      "this fulmen was built without the gloo headers, so it has no c10d process groups "
      "(scripts/fetch-libtorch.sh installs them, or set FULMEN_GLOO_INCLUDE)",
      err, err_len);
  return FULMEN_CXX_UNSUPPORTED;
}

int fulmen_cxx_store_new(const char*, int, int, int, int, int64_t, int64_t, void**, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_store_joined(void*, int64_t*, char* err, size_t err_len) { return no_distributed(err, err_len); }
void fulmen_cxx_store_free(void*) {}
int fulmen_cxx_store_prefixed(void*, const char*, void**, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_store_set(void*, const char*, const uint8_t*, size_t, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_store_get(void*, const char*, uint8_t*, size_t, size_t*, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_store_add(void*, const char*, int64_t, int64_t*, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_store_check(void*, const char*, int*, char* err, size_t err_len) { return no_distributed(err, err_len); }
int fulmen_cxx_store_delete(void*, const char*, int*, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_new(void*, int, int, int64_t, const char*, const char*, int, int, const fulmen_cxx_collectives* hooks,
                      void**, char* err, size_t err_len) {
  if (hooks != nullptr) {
    hooks->release(hooks->ctx);
  }
  return no_distributed(err, err_len);
}
void fulmen_cxx_pg_free(void*) {}
int fulmen_cxx_pg_subgroup(void*, const char*, int, int, const char*, void**, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_allreduce(void*, void* const*, size_t, int, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_broadcast(void*, void* const*, size_t, int, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_broadcast_coalesced(void*, void* const*, size_t, int, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_allgather(void*, const void*, void* const*, size_t, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_allgather_flat_start(void*, const void*, void*, void**, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_work_wait(void*, char* err, size_t err_len) { return no_distributed(err, err_len); }
int fulmen_cxx_work_is_completed(void*, int*, char* err, size_t err_len) { return no_distributed(err, err_len); }
void fulmen_cxx_work_free(void*) {}
int fulmen_cxx_pg_reduce_scatter_flat(void*, const void*, void*, int, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_pg_barrier(void*, char* err, size_t err_len) { return no_distributed(err, err_len); }
int fulmen_cxx_pg_verify_params(void*, void* const*, size_t, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
int fulmen_cxx_reducer_new(void*, void* const*, size_t, int, const int64_t*, size_t, int64_t, int64_t, void**,
                           char* err, size_t err_len) {
  return no_distributed(err, err_len);
}
void fulmen_cxx_reducer_free(void*) {}
int fulmen_cxx_reducer_prepare_forward(void*, char* err, size_t err_len) { return no_distributed(err, err_len); }
int fulmen_cxx_reducer_rebuild_buckets(void*, int*, char* err, size_t err_len) { return no_distributed(err, err_len); }
int fulmen_cxx_reducer_prepare_backward(void*, void* const*, size_t, char* err, size_t err_len) {
  return no_distributed(err, err_len);
}

#endif

}  // extern "C"

// fulmen C++ binding: distributed training for host-owned loops: joining
// the job, the collectives of Lightning's strategy (all_reduce, broadcast,
// all_gather, barrier, reduce_boolean_decision), DDP gradient averaging
// for a model (Ddp), and a model sharded across the ranks (Fsdp).
// Trainer::fit with strategy "ddp" or "fsdp" does all of this itself.
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "model.hpp"
#include "optim.hpp"
#include "strategy.hpp"
#include "tensor.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace fulmen {

/// The process group of a distributed job. Every rank must make the same
/// collective calls in the same order; a collective fails with
/// FULMEN_CODE_INVALID_STATE before join() and with
/// FULMEN_CODE_DISTRIBUTED when another rank fails or the strategy's
/// timeout passes.
namespace distributed {

/// Where this process is in the job.
struct Ranks {
    size_t rank = 0;        ///< The global rank (0 .. world_size - 1).
    size_t local_rank = 0;  ///< The rank on this node.
    size_t world_size = 1;  ///< The number of processes of the job.
};

/// Joins the distributed job with `strategy`'s settings (backend, timeout,
/// num_nodes) and `processes_per_node` processes on each node: under
/// torchrun or SLURM their environment says where rank 0 is; otherwise
/// fulmen starts local ranks 1.. by re-executing this program with the same
/// arguments and `LOCAL_RANK` set, and this process is rank 0. A process
/// that already joined gets the same job back. `cuda` picks nccl when the
/// strategy names no backend.
inline void join(const Strategy& strategy, size_t processes_per_node, bool cuda = false) {
    check(fulmen_distributed_join(strategy.get(), processes_per_node, cuda));
}

/// Whether this process has joined a distributed job.
inline bool is_joined() { return detail::read<bool>([](bool* o) { return fulmen_distributed_is_joined(o); }); }

/// This process's ranks and the world size (rank 0 of 1 when not joined).
inline Ranks ranks() {
    Ranks r;
    check(fulmen_distributed_ranks(&r.rank, &r.local_rank, &r.world_size));
    return r;
}

/// Reduces `tensor` in place over all ranks with `op`: "sum", "mean" (sum
/// divided by the world size), "min", "max" or "product".
inline void all_reduce(Tensor& tensor, const std::string& op) {
    check(fulmen_distributed_all_reduce(tensor.get(), op.c_str()));
}

/// Reduces `tensor` (on an XLA device) in place over all ranks with `op`
/// inside the step's XLA graph (torch_xla's `xm.all_reduce`): every rank
/// makes the same calls in a step. Needs one XLA device per process and
/// one per rank in XLA's job (TPUs from v4 on); throws Error otherwise.
inline void xla_all_reduce(Tensor& tensor, const std::string& op) {
    check(fulmen_distributed_xla_all_reduce(tensor.get(), op.c_str()));
}

/// Copies `tensor` from rank `root` into `tensor` on every rank.
inline void broadcast(Tensor& tensor, size_t root = 0) { check(fulmen_distributed_broadcast(tensor.get(), root)); }

/// Every rank's `tensor` stacked along a new first dimension (of size
/// world_size). Every rank passes the same shape and dtype.
inline Tensor all_gather(const Tensor& tensor) {
    return Tensor::make([&](fulmen_tensor** o) { return fulmen_distributed_all_gather(tensor.get(), o); });
}

/// Waits until every rank reaches the barrier (throws after the timeout).
inline void barrier() { check(fulmen_distributed_barrier()); }

/// Lightning's reduce_boolean_decision: true when every rank's `decision`
/// is true (`all`), or when any rank's is (`!all`).
inline bool reduce_boolean_decision(bool decision, bool all = true) {
    return detail::read<bool>([&](bool* o) { return fulmen_distributed_reduce_boolean_decision(decision, all, o); });
}

/// Leaves the job. On rank 0 of fulmen's own launcher this waits up to
/// `timeout_s` seconds for the ranks it started to exit and throws Error
/// (FULMEN_CODE_DISTRIBUTED) naming the first that failed or still runs.
/// Without a job it does nothing.
inline void shutdown(double timeout_s) { check(fulmen_distributed_shutdown(timeout_s)); }

/// Ends the job after a failure of this rank's own code: `reason` is
/// recorded in the job's store, the ranks fulmen's launcher started from
/// this process are killed, and this process leaves the job. The other
/// ranks' collectives then throw Error (FULMEN_CODE_DISTRIBUTED) reading
/// "rank N failed: <reason>" (once this process exits or frees its last
/// Ddp / Fsdp). Without a job it does nothing.
inline void abort(const std::string& reason) { check(fulmen_distributed_abort(reason.c_str())); }

}  // namespace distributed

/// DDP for a host-owned loop (torch's DistributedDataParallel): a model
/// whose gradients are averaged over the joined job's ranks during
/// backward. Each training step calls prepare_forward(), the forward,
/// prepare_backward(loss), then loss.backward(), on every rank (Python
/// ranks running DistributedDataParallel included); steps that only
/// accumulate run between set_sync(false) and set_sync(true). Move-only;
/// freeing it leaves the model as it is.
class Ddp : public detail::Handle<fulmen_ddp, fulmen_ddp_free> {
public:
    /// An empty DDP object (no handle).
    Ddp() = default;

    /// Wraps `model` in the joined job as DistributedDataParallel does:
    /// checks that every rank has the same trainable parameters, copies rank
    /// 0's parameters and then its buffers to all ranks, and hooks gradient
    /// averaging (with `strategy`'s find_unused_parameters, bucket_cap_mb
    /// and broadcast_buffers). Throws Error (FULMEN_CODE_INVALID_STATE) before
    /// distributed::join.
    Ddp(Model& model, const Strategy& strategy)
        : Handle(detail::make<fulmen_ddp>([&](fulmen_ddp** out) {
              return fulmen_ddp_new(model.get(), strategy.get(), out);
          })) {}

    /// Takes ownership of a `fulmen_ddp` handle.
    static Ddp adopt(fulmen_ddp* handle) noexcept { return Ddp(handle); }

    /// torch's `no_sync()`: while `sync` is false, backward passes only
    /// accumulate gradients locally; the next synchronized step averages
    /// the sum. Steps call prepare_forward and prepare_backward either way.
    void set_sync(bool sync) { check(fulmen_ddp_set_sync(get(), sync)); }

    /// Call before every forward pass of the model, as DistributedDataParallel's
    /// forward does (prepares averaging, broadcasts rank 0's buffers).
    void prepare_forward() { check(fulmen_ddp_prepare_forward(get())); }

    /// Call after the forward pass, before `loss.backward()`: that backward
    /// then averages the gradients over ranks.
    void prepare_backward(const Tensor& loss) { check(fulmen_ddp_prepare_backward(get(), loss.get())); }

private:
    explicit Ddp(fulmen_ddp* owned) noexcept : Handle(owned) {}
};

namespace detail {
/// The C handles of a list of optimizers.
inline std::vector<fulmen_optimizer*> handles_of(const std::vector<std::reference_wrapper<Optimizer>>& list) {
    std::vector<fulmen_optimizer*> out;
    out.reserve(list.size());
    for (Optimizer& o : list) out.push_back(o.get());
    return out;
}
}  // namespace detail

/// FSDP for a host-owned loop (torch's `fully_shard`): the model's
/// parameters, gradients and optimizer states sharded across the joined
/// job's ranks. Build the optimizers over the model after constructing it;
/// each training step, on every rank: zero the gradients (the optimizer's
/// zero_grad before prepare_forward, or zero_grad() here at any point),
/// prepare_forward(), the forward, loss.backward(), finish_backward(),
/// optionally clip_grad_norm(), then the optimizers' step. Between steps
/// the parameters hold this rank's rows: unshard() gathers them (and the
/// optimizers' states) to save or read, reshard() goes back to training.
/// Move-only; freeing it without unshard() leaves the model with this
/// rank's shards.
class Fsdp : public detail::Handle<fulmen_fsdp, fulmen_fsdp_free> {
public:
    /// An empty FSDP object (no handle).
    Fsdp() = default;

    /// Shards `model` with `strategy`'s FSDP settings (sharding_strategy,
    /// auto_wrap_policy, min_num_params, activation_checkpointing_policy,
    /// param_dtype, reduce_dtype), after copying rank 0's parameters and
    /// buffers to every rank. Throws Error (FULMEN_CODE_INVALID_STATE)
    /// before distributed::join or for a model already sharded.
    Fsdp(Model& model, const Strategy& strategy)
        : Handle(detail::make<fulmen_fsdp>([&](fulmen_fsdp** out) {
              return fulmen_fsdp_new(model.get(), strategy.get(), out);
          })) {}

    /// Takes ownership of a `fulmen_fsdp` handle.
    static Fsdp adopt(fulmen_fsdp* handle) noexcept { return Fsdp(handle); }

    /// torch's `no_sync()`: while `sync` is false, backward passes
    /// accumulate full-sized gradients without communication; the next
    /// step with `sync` true averages the sum into the shards.
    void set_sync(bool sync) { check(fulmen_fsdp_set_sync(get(), sync)); }

    /// Call before every forward pass of the model (evaluation ones too).
    void prepare_forward() { check(fulmen_fsdp_prepare_forward(get())); }

    /// Call after backward, before clipping and the optimizers' step: the
    /// gradients averaged into the shards.
    void finish_backward() { check(fulmen_fsdp_finish_backward(get())); }

    /// Clips the gradients by their 2-norm over every rank's shards;
    /// returns the norm before clipping.
    double clip_grad_norm(double max_norm) {
        double total = 0;
        check(fulmen_fsdp_clip_grad_norm(get(), max_norm, &total));
        return total;
    }

    /// `model.zero_grad()`, right at any point of a step.
    void zero_grad(bool set_to_none = true) { check(fulmen_fsdp_zero_grad(get(), set_to_none)); }

    /// Gathers the full parameters into the model and the optimizers'
    /// states into their full shapes, on every rank (a collective).
    void unshard(const std::vector<std::reference_wrapper<Optimizer>>& optimizers = {}) {
        auto handles = detail::handles_of(optimizers);
        detail::clear_pending_exception();
        check(fulmen_fsdp_unshard(get(), handles.data(), handles.size()));
    }

    /// After unshard(): every rank keeps its rows of the parameters' and
    /// the optimizers' current values, and training can go on.
    void reshard(const std::vector<std::reference_wrapper<Optimizer>>& optimizers = {}) {
        auto handles = detail::handles_of(optimizers);
        detail::clear_pending_exception();
        check(fulmen_fsdp_reshard(get(), handles.data(), handles.size()));
    }

private:
    explicit Fsdp(fulmen_fsdp* owned) noexcept : Handle(owned) {}
};

/// How a layer splits across the ranks, torch's `ParallelStyle`s
/// (`fulmen_parallel_style`).
enum class ParallelStyle : int32_t {
    /// `ColwiseParallel()`: output features split, the output left split.
    Colwise = FULMEN_PARALLEL_STYLE_COLWISE,
    /// `ColwiseParallel(output_layouts=Replicate())`: the output gathered.
    ColwiseReplicatedOutput = FULMEN_PARALLEL_STYLE_COLWISE_REPLICATED_OUTPUT,
    /// `RowwiseParallel()`: input features split, the input comes split.
    Rowwise = FULMEN_PARALLEL_STYLE_ROWWISE,
    /// `RowwiseParallel(input_layouts=Replicate())`: the input whole (an
    /// Embedding's rows split).
    RowwiseReplicatedInput = FULMEN_PARALLEL_STYLE_ROWWISE_REPLICATED_INPUT,
};

/// Tensor parallelism for a host-owned loop (torch's `parallelize_module`
/// over the whole joined job): the Linear and Embedding layers a plan
/// names keep this rank's part of their weights, with the collectives in
/// their forward and backward. Build the optimizers over the model after
/// constructing it; each step on every rank: forward, backward, optionally
/// clip_grad_norm(), the optimizers' step. unshard() gathers the full
/// parameters and optimizer states to save or read, reshard() goes back to
/// training. Move-only; freed without unshard(), the split layers refuse to
/// run.
class TensorParallel : public detail::Handle<fulmen_tensor_parallel, fulmen_tensor_parallel_free> {
public:
    /// An empty object (no handle).
    TensorParallel() = default;

    /// Splits the layers of `model` that `plan` names (dotted path, style),
    /// after copying rank 0's parameters and buffers to every rank. Throws
    /// Error (FULMEN_CODE_INVALID_STATE before distributed::join;
    /// FULMEN_CODE_INVALID_ARGUMENT or FULMEN_CODE_UNSUPPORTED for a bad
    /// plan).
    TensorParallel(Model& model, const std::vector<std::pair<std::string, ParallelStyle>>& plan)
        : Handle(detail::make<fulmen_tensor_parallel>([&](fulmen_tensor_parallel** out) {
              std::vector<const char*> modules;
              std::vector<int32_t> styles;
              for (const auto& [path, style] : plan) {
                  modules.push_back(path.c_str());
                  styles.push_back(static_cast<int32_t>(style));
              }
              return fulmen_tensor_parallel_new(model.get(), modules.data(), styles.data(), plan.size(), out);
          })) {}

    /// Takes ownership of a `fulmen_tensor_parallel` handle.
    static TensorParallel adopt(fulmen_tensor_parallel* handle) noexcept { return TensorParallel(handle); }

    /// Clips the gradients by their 2-norm over the whole model; returns
    /// the norm before clipping.
    double clip_grad_norm(double max_norm) {
        double total = 0;
        check(fulmen_tensor_parallel_clip_grad_norm(get(), max_norm, &total));
        return total;
    }

    /// Gathers the full parameters into the model and the optimizers'
    /// states into their full shapes, on every rank (a collective).
    void unshard(const std::vector<std::reference_wrapper<Optimizer>>& optimizers = {}) {
        auto handles = detail::handles_of(optimizers);
        detail::clear_pending_exception();
        check(fulmen_tensor_parallel_unshard(get(), handles.data(), handles.size()));
    }

    /// After unshard(): every rank keeps its part of the parameters' and
    /// the optimizers' current values, and training can go on.
    void reshard(const std::vector<std::reference_wrapper<Optimizer>>& optimizers = {}) {
        auto handles = detail::handles_of(optimizers);
        detail::clear_pending_exception();
        check(fulmen_tensor_parallel_reshard(get(), handles.data(), handles.size()));
    }

private:
    explicit TensorParallel(fulmen_tensor_parallel* owned) noexcept : Handle(owned) {}
};

}  // namespace fulmen

// The c10d backends of collectives.hpp. Both complete each collective
// before returning (the host's hook returns when its result is in the
// tensors), so their Work objects are finished futures holding the tensors,
// which is what the DDP Reducer's default communication hook reads.
#include "fulmen_cxx.h"

#ifdef FULMEN_WITH_GLOO
#include "collectives.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <stdexcept>
#include <utility>
#include <vector>

namespace fulmen_cxx {
namespace {

// A collective that has already completed, with its result tensors.
class DoneWork final : public c10d::Work {
 public:
  explicit DoneWork(std::vector<at::Tensor> result)
      : result_(std::move(result)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(c10::IValue(result_));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

c10::intrusive_ptr<c10d::Work> done(std::vector<at::Tensor> result) {
  return c10::make_intrusive<DoneWork>(std::move(result));
}

int host_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return 0;
    case c10d::ReduceOp::PRODUCT:
      return 1;
    case c10d::ReduceOp::MIN:
      return 2;
    case c10d::ReduceOp::MAX:
      return 3;
    default:
      throw std::invalid_argument("a collectives hook reduces with sum, product, min or max, not reduce op " +
                                  std::to_string(static_cast<int>(op.op_)));
  }
}

// The tensors as the hook's contract has them: dense, row-major blocks.
std::vector<void*> pointers(std::vector<at::Tensor>& tensors) {
  std::vector<void*> out;
  out.reserve(tensors.size());
  for (auto& t : tensors) {
    TORCH_CHECK(t.is_contiguous(), "a collectives hook takes contiguous tensors");
    out.push_back(&t);
  }
  return out;
}

// all_gather's outputs: one per rank, each like the input.
void check_like(const at::Tensor& input, const std::vector<at::Tensor>& outputs) {
  for (const auto& o : outputs) {
    TORCH_CHECK(o.sizes() == input.sizes() && o.scalar_type() == input.scalar_type() && o.device() == input.device(),
                "all_gather: every output must have the input's shape, dtype and device");
  }
}

// One output tensor per rank, as views of the flat output of _allgather_base.
std::vector<at::Tensor> rank_views(at::Tensor& output, const at::Tensor& input, int size) {
  TORCH_CHECK(output.is_contiguous() && output.numel() == input.numel() * size,
              "all_gather: the output holds ", output.numel(), " elements, not ", size, " x ", input.numel());
  std::vector<at::Tensor> views;
  for (int r = 0; r < size; ++r) {
    views.push_back(output.view(-1).narrow(0, r * input.numel(), input.numel()).view(input.sizes()));
  }
  return views;
}

class HostBackend final : public c10d::Backend {
 public:
  HostBackend(int rank, int size, const fulmen_cxx_collectives& hooks, std::string name)
      : c10d::Backend(rank, size), hooks_(hooks), name_(std::move(name)) {}
  ~HostBackend() override { hooks_.release(hooks_.ctx); }
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  const std::string getBackendName() const override { return name_; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    int op = host_op(opts.reduceOp);
    auto list = pointers(tensors);
    call("all_reduce", [&](char* err, size_t len) {
      return hooks_.all_reduce(hooks_.ctx, list.data(), list.size(), op, err, len);
    });
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(opts.rootTensor == 0, "broadcast: a collectives hook takes the root rank's first tensor");
    auto list = pointers(tensors);
    auto root = static_cast<int>(opts.rootRank);
    call("broadcast", [&](char* err, size_t len) {
      return hooks_.broadcast(hooks_.ctx, list.data(), list.size(), root, err, len);
    });
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& /*opts*/) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "all_gather: a collectives hook gathers one tensor");
    TORCH_CHECK(outputs[0].size() == static_cast<size_t>(getSize()), "all_gather: ", outputs[0].size(),
                " outputs for ", getSize(), " ranks");
    gather(inputs[0], outputs[0]);
    return done(outputs[0]);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& /*opts*/) override {
    auto views = rank_views(output, input, getSize());
    gather(input, views);
    return done({output});
  }

  // reduce_scatter_tensor (FSDP's gradients) through the hook's
  // reduce_scatter; without one, through its all_reduce: the whole input
  // reduced on every rank, this rank's block kept.
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(output.is_contiguous() && input.numel() == output.numel() * getSize(),
                "reduce_scatter: the input holds ", input.numel(), " elements, not ", getSize(), " x ",
                output.numel());
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "reduce_scatter: the input is ", input.scalar_type(),
                ", the output ", output.scalar_type());
    int op = host_op(opts.reduceOp);
    at::Tensor flat = input.contiguous();
    bool scattered = call("reduce_scatter", [&](char* err, size_t len) {
      return hooks_.reduce_scatter(hooks_.ctx, &flat, &output, op, err, len);
    }, true);
    if (scattered) {
      return done({output});
    }
    std::vector<at::Tensor> whole{flat.clone()};
    c10d::AllreduceOptions reduce;
    reduce.reduceOp = opts.reduceOp;
    allreduce(whole, reduce);
    c10::NoGradGuard no_grad;
    output.copy_(whole[0].view(-1).narrow(0, getRank() * output.numel(), output.numel()).view(output.sizes()));
    return done({output});
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override {
    call("barrier", [&](char* err, size_t len) { return hooks_.barrier(hooks_.ctx, err, len); });
    return done({});
  }

 private:
  void gather(at::Tensor& input, std::vector<at::Tensor>& outputs) {
    check_like(input, outputs);
    std::vector<at::Tensor> in{input};
    pointers(in);
    auto list = pointers(outputs);
    call("all_gather", [&](char* err, size_t len) {
      return hooks_.all_gather(hooks_.ctx, &input, list.data(), list.size(), err, len);
    });
  }

  // Runs one hook call and turns its failure into an exception; with
  // `optional`, FULMEN_CXX_UNSUPPORTED (the library has no such
  // collective) returns false instead. The Rust side serialises the calls
  // under the accelerator's lock, which also refuses a slot's re-entrant
  // collective instead of deadlocking.
  template <typename F>
  bool call(const char* what, F f, bool optional = false) {
    char err[1024] = {0};
    int status = f(err, sizeof err);
    if (optional && status == FULMEN_CXX_UNSUPPORTED) {
      return false;
    }
    if (status != FULMEN_CXX_OK) {
      throw std::runtime_error("c10d backend \"" + name_ + "\" " + what + ": " + err);
    }
    return true;
  }

  fulmen_cxx_collectives hooks_;
  std::string name_;
};

at::Tensor on_cpu(const at::Tensor& t) { return t.device().is_cpu() ? t : t.to(at::kCPU); }

std::vector<at::Tensor> on_cpu(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const auto& t : list) {
    out.push_back(on_cpu(t));
  }
  return out;
}

// Writes the CPU results back into the device tensors they were copied from.
void copy_back(std::vector<at::Tensor>& device, const std::vector<at::Tensor>& host) {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < device.size(); ++i) {
    if (!device[i].is_same(host[i])) {
      device[i].copy_(host[i]);
    }
  }
}

class StagedBackend final : public c10d::Backend {
 public:
  StagedBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> cpu, std::chrono::milliseconds timeout)
      : c10d::Backend(rank, size), cpu_(std::move(cpu)), timeout_(timeout) {}

  const std::string getBackendName() const override { return cpu_->getBackendName() + " (staged through the CPU)"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    auto host = on_cpu(tensors);
    finish(cpu_->allreduce(host, opts));
    copy_back(tensors, host);
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    auto host = on_cpu(tensors);
    finish(cpu_->broadcast(host, opts));
    copy_back(tensors, host);
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    auto host_in = on_cpu(inputs);
    std::vector<std::vector<at::Tensor>> host_out;
    for (const auto& list : outputs) {
      host_out.push_back(on_cpu(list));
    }
    finish(cpu_->allgather(host_out, host_in, opts));
    for (size_t i = 0; i < outputs.size(); ++i) {
      copy_back(outputs[i], host_out[i]);
    }
    return done(outputs.empty() ? std::vector<at::Tensor>{} : outputs[0]);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return flat(output, input, [&](at::Tensor& o, at::Tensor& i) { return cpu_->_allgather_base(o, i, opts); });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    return flat(output, input, [&](at::Tensor& o, at::Tensor& i) { return cpu_->_reduce_scatter_base(o, i, opts); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    finish(cpu_->barrier(opts));
    return done({});
  }

 private:
  void finish(const c10::intrusive_ptr<c10d::Work>& work) {
    if (!work->wait(timeout_)) {
      throw std::runtime_error("collective did not finish within the timeout");
    }
  }

  // A collective from one flat input into one flat output (`run` on the
  // CPU copies), the result copied back to the device.
  template <typename F>
  c10::intrusive_ptr<c10d::Work> flat(at::Tensor& output, at::Tensor& input, F run) {
    auto host_in = on_cpu(input);
    auto host_out = on_cpu(output);
    finish(run(host_out, host_in));
    std::vector<at::Tensor> dev{output};
    copy_back(dev, {host_out});
    return done({output});
  }

  c10::intrusive_ptr<c10d::Backend> cpu_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> host_backend(int rank, int size, const fulmen_cxx_collectives& hooks,
                                               const std::string& name) {
  return c10::make_intrusive<HostBackend>(rank, size, hooks, name);
}

c10::intrusive_ptr<c10d::Backend> staged_backend(int rank, int size, c10::intrusive_ptr<c10d::Backend> cpu,
                                                 std::chrono::milliseconds timeout) {
  return c10::make_intrusive<StagedBackend>(rank, size, std::move(cpu), timeout);
}

}  // namespace fulmen_cxx
#endif

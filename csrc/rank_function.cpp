// A differentiable step across the ranks of a job: an autograd node whose
// forward and backward are Rust functions over the job's process group
// (src/nn/layers/rank_ops.rs). SyncBatchNorm sums over the ranks both
// ways; tensor parallelism's layers copy in (identity, then a sum of the
// gradients), reduce out (a sum, then identity), gather and split along
// the last dimension.
#include "fulmen_cxx.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

extern "C" {
// Writes a new `at::Tensor*` to `out`: the forward (`backward` 0) of `in`
// (an `at::Tensor*`, borrowed), or the backward (`backward` 1) of the
// output's gradient `in`; returns FULMEN_CXX_OK or writes a message to
// `err`.
typedef int (*fulmen_cxx_rank_fn)(void* ctx, int backward, const void* in, void** out, char* err, size_t err_len);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The Rust steps and their context, released once with the last reference.
struct RankStep : torch::CustomClassHolder {
  RankStep(fulmen_cxx_rank_fn f, void* c, void (*d)(void*)) : fn(f), ctx(c), drop(d) {}
  RankStep(const RankStep&) = delete;
  RankStep& operator=(const RankStep&) = delete;
  ~RankStep() override { drop(ctx); }
  fulmen_cxx_rank_fn fn;
  void* ctx;
  void (*drop)(void*);

  at::Tensor operator()(const at::Tensor& t, bool backward) const {
    void* out = nullptr;
    char err[1024] = {0};
    TORCH_CHECK(fn(ctx, backward ? 1 : 0, &t, &out, err, sizeof err) == FULMEN_CXX_OK && out != nullptr, err);
    std::unique_ptr<at::Tensor> owned(static_cast<at::Tensor*>(out));
    return *owned;
  }
};

struct AcrossRanks : torch::autograd::Function<AcrossRanks> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<RankStep> step) {
    at::Tensor y = (*step)(x, false);
    ctx->saved_data["step"] = c10::IValue::make_capsule(step);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto step = c10::static_intrusive_pointer_cast<RankStep>(ctx->saved_data["step"].toCapsule());
    // The input's gradient, then the `RankStep` argument's.
    return {(*step)(grads[0], true), at::Tensor()};
  }
};

}  // namespace

extern "C" {

// *out = a new `at::Tensor*`: `fn(ctx, 0, x)` for `x` (borrowed),
// differentiably: its gradient is `fn(ctx, 1, grad)` (every rank's backward
// must reach it, in the same order, when `fn` communicates). `drop(ctx)`
// runs exactly once, when neither the call nor the graph needs `fn` any
// more.
int fulmen_cxx_across_ranks(fulmen_cxx_rank_fn fn, void* ctx, void (*drop)(void*), const void* x, void** out,
                            char* err, size_t err_len) {
  c10::intrusive_ptr<RankStep> op;
  try {
    op = c10::make_intrusive<RankStep>(fn, ctx, drop);
  } catch (...) {
    drop(ctx);
    fulmen_cxx::write_message("across_ranks: out of memory", err, err_len);
    return FULMEN_CXX_ERROR;
  }
  FULMEN_CXX_TRY
  TORCH_CHECK(x != nullptr && out != nullptr, "across_ranks: NULL");
  variable_list y = AcrossRanks::apply(*static_cast<const at::Tensor*>(x), op);
  op.reset();
  *out = new at::Tensor(std::move(y[0]));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

// A differentiable all-reduce (sum) for SyncBatchNorm
// (src/nn/layers/sync_batch_norm.rs): the forward sums a tensor over the
// ranks, and so does the backward with its gradient (the sum is its own
// adjoint). The sum itself is a Rust function on the job's process group,
// run in place on a copy.
#include "fulmen_cxx.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

extern "C" {
// Sums `t` (an `at::Tensor*`, contiguous) over the ranks in place; returns
// FULMEN_CXX_OK or writes a message to `err`.
typedef int (*fulmen_cxx_sum_fn)(void* ctx, const void* t, char* err, size_t err_len);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The Rust sum and its context, released once with the last reference.
struct Sum : torch::CustomClassHolder {
  Sum(fulmen_cxx_sum_fn f, void* c, void (*d)(void*)) : fn(f), ctx(c), drop(d) {}
  Sum(const Sum&) = delete;
  Sum& operator=(const Sum&) = delete;
  ~Sum() override { drop(ctx); }
  fulmen_cxx_sum_fn fn;
  void* ctx;
  void (*drop)(void*);

  at::Tensor operator()(const at::Tensor& t) const {
    at::Tensor copy = t.contiguous().clone();
    char err[1024] = {0};
    TORCH_CHECK(fn(ctx, &copy, err, sizeof err) == FULMEN_CXX_OK, err);
    return copy;
  }
};

struct SummedOverRanks : torch::autograd::Function<SummedOverRanks> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<Sum> sum) {
    at::Tensor y = (*sum)(x);
    ctx->saved_data["sum"] = c10::IValue::make_capsule(sum);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto sum = c10::static_intrusive_pointer_cast<Sum>(ctx->saved_data["sum"].toCapsule());
    // The input's gradient, then the `Sum` argument's.
    return {(*sum)(grads[0]), at::Tensor()};
  }
};

}  // namespace

extern "C" {

// *out = a new `at::Tensor*`: `x` (borrowed) summed over the ranks by
// `sum(ctx, ...)`, differentiably: its gradient is the gradient summed over
// the ranks the same way (every rank's backward must reach it, in the same
// order). `drop(ctx)` runs exactly once, when neither the call nor the
// graph needs `sum` any more.
int fulmen_cxx_sum_over_ranks(fulmen_cxx_sum_fn sum, void* ctx, void (*drop)(void*), const void* x, void** out,
                              char* err, size_t err_len) {
  c10::intrusive_ptr<Sum> op;
  try {
    op = c10::make_intrusive<Sum>(sum, ctx, drop);
  } catch (...) {
    drop(ctx);
    fulmen_cxx::write_message("sum_over_ranks: out of memory", err, err_len);
    return FULMEN_CXX_ERROR;
  }
  FULMEN_CXX_TRY
  TORCH_CHECK(x != nullptr && out != nullptr, "sum_over_ranks: NULL");
  variable_list y = SummedOverRanks::apply(*static_cast<const at::Tensor*>(x), op);
  op.reset();
  *out = new at::Tensor(std::move(y[0]));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

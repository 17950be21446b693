// torch.optim's fused updates (`fused=True`): one libtorch kernel per
// parameter group and device over all its parameters, as torch's
// `_fused_adam` / `_fused_sgd` / `_fused_adagrad` call them. Each list is `n` `at::Tensor*`
// of one device and dtype; an empty list is passed as NULL. `found_inf`
// (NULL, or an `at::Tensor*`: a float32 0-dim tensor) is torch's
// GradScaler's finding for fused optimizers: when it holds 1 the kernel
// leaves everything as it was, and the step counts added to first are
// taken back on the device, so no host reads whether the step happened.
#include "fulmen_cxx.h"
#include "optim_lists.hpp"

#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/_fused_adagrad.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>

using fulmen_optim::list;

namespace {
// The scaler's finding on the parameters' device (torch's
// `found_inf.to(device)`), or none.
std::optional<at::Tensor> found_inf_on(const void* found_inf, const std::vector<at::Tensor>& params) {
  if (found_inf == nullptr || params.empty()) return std::nullopt;
  return static_cast<const at::Tensor*>(found_inf)->to(params[0].device());
}

// torch's `_foreach_sub_(device_state_steps, [found_inf] * len)`: a skipped
// step is not counted.
void uncount_skipped(std::vector<at::Tensor>& steps, const std::optional<at::Tensor>& found_inf) {
  if (found_inf.has_value() && !steps.empty()) {
    at::_foreach_sub_(steps, std::vector<at::Tensor>(steps.size(), *found_inf));
  }
}
// Runs the update `kernel` after its step counts `steps` were counted (1
// added); when it throws, the counts are taken back first, since a count
// the device alone knows stays in the state after a failed call.
template <typename Kernel>
void counted_unless_thrown(std::vector<at::Tensor>& steps, Kernel kernel) {
  try {
    kernel();
  } catch (...) {
    if (!steps.empty()) at::_foreach_sub_(steps, 1.0);
    throw;
  }
}
}  // namespace

extern "C" {

// torch._fused_adam_ (AdamW: torch._fused_adamw_ when `decoupled`); the
// steps are float32 tensors on the parameters' device holding the steps
// done, 1 added here first as torch adds it. `lr_tensor` (an `at::Tensor*`
// on the parameters' device, or NULL for `lr`) is torch's tensor lr, read
// by the kernel on the device, so a captured graph sees its changes.
int fulmen_cxx_fused_adam(void* const* params, void* const* grads, void* const* exp_avgs, void* const* exp_avg_sqs,
                          void* const* max_exp_avg_sqs, void* const* steps, size_t n, double lr,
                          const void* lr_tensor, double beta1, double beta2, double weight_decay, double eps,
                          bool amsgrad, bool maximize, bool decoupled, const void* found_inf, char* err,
                          size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), g = list(grads, n), m = list(exp_avgs, n), v = list(exp_avg_sqs, n);
  auto vmax = list(max_exp_avg_sqs, n), s = list(steps, n);
  const auto fi = found_inf_on(found_inf, p);
  at::_foreach_add_(s, 1.0);
  counted_unless_thrown(s, [&] {
    if (lr_tensor != nullptr) {
      const auto& lr_t = *static_cast<const at::Tensor*>(lr_tensor);
      if (decoupled) {
        at::_fused_adamw_(p, g, m, v, vmax, s, lr_t, beta1, beta2, weight_decay, eps, amsgrad, maximize, {}, fi);
      } else {
        at::_fused_adam_(p, g, m, v, vmax, s, lr_t, beta1, beta2, weight_decay, eps, amsgrad, maximize, {}, fi);
      }
    } else if (decoupled) {
      at::_fused_adamw_(p, g, m, v, vmax, s, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, {}, fi);
    } else {
      at::_fused_adam_(p, g, m, v, vmax, s, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, {}, fi);
    }
  });
  uncount_skipped(s, fi);
  FULMEN_CXX_CATCH(err, err_len)
}

// torch._fused_sgd_; `momentum_buffers` NULL without momentum; `lr_tensor`
// as fulmen_cxx_fused_adam's.
int fulmen_cxx_fused_sgd(void* const* params, void* const* grads, void* const* momentum_buffers, size_t n,
                         double weight_decay, double momentum, double lr, const void* lr_tensor, double dampening,
                         bool nesterov, bool maximize, bool is_first_step, const void* found_inf, char* err,
                         size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), g = list(grads, n), b = list(momentum_buffers, n);
  const auto fi = found_inf_on(found_inf, p);
  if (lr_tensor != nullptr) {
    const auto& lr_t = *static_cast<const at::Tensor*>(lr_tensor);
    at::_fused_sgd_(p, g, b, weight_decay, momentum, lr_t, dampening, nesterov, maximize, is_first_step, {}, fi);
  } else {
    at::_fused_sgd_(p, g, b, weight_decay, momentum, lr, dampening, nesterov, maximize, is_first_step, {}, fi);
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// torch._fused_adagrad_; the steps are float32 tensors on the parameters'
// device holding the steps done, 1 added here first as torch adds it.
int fulmen_cxx_fused_adagrad(void* const* params, void* const* grads, void* const* state_sums, void* const* steps,
                             size_t n, double lr, double lr_decay, double weight_decay, double eps, bool maximize,
                             const void* found_inf, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), g = list(grads, n), s = list(state_sums, n), k = list(steps, n);
  const auto fi = found_inf_on(found_inf, p);
  at::_foreach_add_(k, 1.0);
  counted_unless_thrown(k, [&] { at::_fused_adagrad_(p, g, s, k, lr, lr_decay, weight_decay, eps, maximize, {}, fi); });
  uncount_skipped(k, fi);
  FULMEN_CXX_CATCH(err, err_len)
}

// torch's GradScaler unscale (`_amp_foreach_non_finite_check_and_unscale_`):
// multiplies the `n` gradients (one device) by `inv_scale` in place and sets
// `found_inf` (float32, 0-dim, that device) to 1 when one held an inf or
// NaN, on the device: nothing is read on the host.
int fulmen_cxx_amp_unscale(void* const* grads, size_t n, const void* found_inf, const void* inv_scale, char* err,
                           size_t err_len) {
  FULMEN_CXX_TRY
  auto g = list(grads, n);
  auto fi = *static_cast<const at::Tensor*>(found_inf);
  at::_amp_foreach_non_finite_check_and_unscale_(g, fi, *static_cast<const at::Tensor*>(inv_scale));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

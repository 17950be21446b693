// The tensor lists of the fused and foreach optimizer updates
// (fused.cpp, foreach.cpp, foreach_adam_variants.cpp) and the gradient
// preparation torch's `_multi_tensor_*` updates share.
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_neg.h>

namespace fulmen_optim {
// The `n` tensors behind `n` `at::Tensor*` (empty for NULL).
inline std::vector<at::Tensor> list(void* const* p, size_t n) {
  std::vector<at::Tensor> out;
  if (p == nullptr) return out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++) out.push_back(*static_cast<const at::Tensor*>(p[i]));
  return out;
}

// `n` numbers as a scalar list.
inline std::vector<at::Scalar> scalars(const double* v, size_t n) { return std::vector<at::Scalar>(v, v + n); }

// torch's maximize and L2 weight decay on the gradients: a new list when
// either applies (maximize's negation is reused for the decay).
inline std::vector<at::Tensor> decayed(std::vector<at::Tensor> grads, const std::vector<at::Tensor>& params,
                                double weight_decay, bool maximize) {
  if (maximize) grads = at::_foreach_neg(grads);
  if (weight_decay != 0) {
    if (maximize) {
      at::_foreach_add_(grads, params, weight_decay);
    } else {
      grads = at::_foreach_add(grads, params, weight_decay);
    }
  }
  return grads;
}

// The gradients of the Adam family: L2 decay as decayed(), or, decoupled,
// the parameters multiplied by `1 - lr * weight_decay` first.
inline std::vector<at::Tensor> adam_family_grads(void* const* grads, std::vector<at::Tensor>& params, size_t n,
                                                 double lr, double weight_decay, bool decoupled, bool maximize) {
  auto g = decayed(list(grads, n), params, decoupled ? 0.0 : weight_decay, maximize);
  if (decoupled && weight_decay != 0) at::_foreach_mul_(params, 1 - lr * weight_decay);
  return g;
}

// The Adam family's running averages: `exp_avgs` lerp towards the
// gradients by `1 - beta1`, `exp_avg_sqs` decay by `beta2` and gain
// `(1 - beta2) * grad^2`, as torch's `_multi_tensor_*` updates.
inline void update_moments(std::vector<at::Tensor>& exp_avgs, std::vector<at::Tensor>& exp_avg_sqs,
                           const std::vector<at::Tensor>& grads, double beta1, double beta2) {
  at::_foreach_lerp_(exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
}
}  // namespace fulmen_optim

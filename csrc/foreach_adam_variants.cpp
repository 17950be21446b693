// torch.optim's foreach updates of Adam's variants (`foreach=True`,
// torch's default on CUDA): `_multi_tensor_adamax`, `_multi_tensor_nadam`
// and `_multi_tensor_radam` (NAdamW and RAdamW with decoupled weight decay)
// of torch 2.13, op for op, over the `n` parameters of one param group,
// device and dtype. Each list is `n` `at::Tensor*`. The scalars torch
// computes as Python floats per parameter come computed.
#include "fulmen_cxx.h"
#include "optim_lists.hpp"

#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_abs.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_maximum.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_reciprocal.h>
#include <ATen/ops/_foreach_sqrt.h>

using fulmen_optim::adam_family_grads;
using fulmen_optim::decayed;
using fulmen_optim::list;
using fulmen_optim::scalars;
using fulmen_optim::update_moments;

extern "C" {

// torch's `_multi_tensor_adamax`, not capturable: `step_sizes` holds each
// parameter's `-lr / (1 - beta1^t)`, `t` its step counted already.
int fulmen_cxx_foreach_adamax(void* const* params, void* const* grads, void* const* exp_avgs, void* const* exp_infs,
                              const double* step_sizes, size_t n, double beta1, double beta2, double weight_decay,
                              double eps, bool maximize, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), m = list(exp_avgs, n), inf = list(exp_infs, n);
  auto g = decayed(list(grads, n), p, weight_decay, maximize);
  at::_foreach_lerp_(m, g, 1 - beta1);
  at::_foreach_mul_(inf, beta2);
  if (!maximize && weight_decay == 0) {
    g = at::_foreach_abs(g);  // the gradients themselves: a copy
  } else {
    at::_foreach_abs_(g);  // the list decayed() made
  }
  at::_foreach_add_(g, eps);
  at::_foreach_maximum_(inf, g);
  at::_foreach_addcdiv_(p, m, inf, scalars(step_sizes, n));
  FULMEN_CXX_CATCH(err, err_len)
}

// torch's `_multi_tensor_nadam`, not capturable (the caller keeps the
// `mu_product`s): `bias_correction2_sqrts` holds each parameter's
// `(1 - beta2^t)^0.5`, `grad_step_sizes` its
// `-lr * (1 - mu) / (1 - mu_product)` and `exp_avg_step_sizes` its
// `-lr * mu_next / (1 - mu_product * mu_next)`.
int fulmen_cxx_foreach_nadam(void* const* params, void* const* grads, void* const* exp_avgs, void* const* exp_avg_sqs,
                             const double* bias_correction2_sqrts, const double* grad_step_sizes,
                             const double* exp_avg_step_sizes, size_t n, double lr, double beta1, double beta2,
                             double weight_decay, double eps, bool decoupled, bool maximize, char* err,
                             size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), m = list(exp_avgs, n), v = list(exp_avg_sqs, n);
  auto g = adam_family_grads(grads, p, n, lr, weight_decay, decoupled, maximize);
  update_moments(m, v, g, beta1, beta2);
  auto denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, scalars(bias_correction2_sqrts, n));
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(p, g, denom, scalars(grad_step_sizes, n));
  at::_foreach_addcdiv_(p, m, denom, scalars(exp_avg_step_sizes, n));
  FULMEN_CXX_CATCH(err, err_len)
}

// torch's `_multi_tensor_radam`, not capturable: `bias_correction2s` holds
// each parameter's `(1 - beta2^t)^0.5 * (lr * rect / (1 - beta1^t)) * -1`
// (-0.0 while not rectified) and `unrect_step_sizes` its
// `(lr * u / (1 - beta1^t)) * -1`, `u` 1 while not rectified, else 0.
int fulmen_cxx_foreach_radam(void* const* params, void* const* grads, void* const* exp_avgs, void* const* exp_avg_sqs,
                             const double* bias_correction2s, const double* unrect_step_sizes, size_t n, double lr,
                             double beta1, double beta2, double weight_decay, double eps, bool decoupled,
                             bool maximize, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), m = list(exp_avgs, n), v = list(exp_avg_sqs, n);
  auto g = adam_family_grads(grads, p, n, lr, weight_decay, decoupled, maximize);
  update_moments(m, v, g, beta1, beta2);
  auto buffer = at::_foreach_sqrt(v);
  at::_foreach_add_(buffer, eps);
  at::_foreach_div_(buffer, scalars(bias_correction2s, n));
  at::_foreach_reciprocal_(buffer);
  at::_foreach_add_(buffer, scalars(unrect_step_sizes, n));
  at::_foreach_addcmul_(p, m, buffer);
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

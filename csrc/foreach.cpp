// torch.optim's foreach updates (`foreach=True`, torch's default on CUDA):
// `_multi_tensor_sgd`, `_multi_tensor_adam` (AdamW: decoupled weight
// decay), `_multi_tensor_adagrad` and `_multi_tensor_rmsprop` of torch
// 2.13, op for op, over the `n` parameters of one param group, device and
// dtype (Adamax, NAdam and RAdam: foreach_adam_variants.cpp). Each list
// is `n` `at::Tensor*`; an absent list is NULL. The scalars torch computes
// as Python floats per parameter (step sizes, bias corrections, Adagrad's
// decayed learning rates) come computed.
#include "fulmen_cxx.h"
#include "optim_lists.hpp"

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_maximum.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_neg.h>
#include <ATen/ops/_foreach_sqrt.h>

using fulmen_optim::adam_family_grads;
using fulmen_optim::decayed;
using fulmen_optim::list;
using fulmen_optim::scalars;
using fulmen_optim::update_moments;

extern "C" {

// torch's `_multi_tensor_sgd`. `momentum_buffers` is NULL without
// momentum; otherwise its entries are NULL for parameters without a buffer
// yet, whose new buffer (a clone of the gradient) is written, as a new
// `at::Tensor*` the caller owns, to the same entry of `new_buffers` (NULL
// elsewhere), and only when the whole update succeeded. As torch, Nesterov
// momentum adds to the gradients in place when neither maximize nor weight
// decay made new ones.
int fulmen_cxx_foreach_sgd(void* const* params, void* const* grads, void* const* momentum_buffers, void** new_buffers,
                           size_t n, double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                           bool maximize, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n);
  auto g = decayed(list(grads, n), p, weight_decay, maximize);
  std::vector<at::Tensor> created(n);
  if (momentum != 0) {
    bool all = true;
    for (size_t i = 0; i < n; i++) all = all && momentum_buffers[i] != nullptr;
    std::vector<at::Tensor> bufs;
    if (all) {
      bufs = list(momentum_buffers, n);
      at::_foreach_mul_(bufs, momentum);
      at::_foreach_add_(bufs, g, 1 - dampening);
    } else {
      for (size_t i = 0; i < n; i++) {
        if (momentum_buffers[i] == nullptr) {
          created[i] = g[i].detach().clone();
          bufs.push_back(created[i]);
        } else {
          at::Tensor buf = *static_cast<const at::Tensor*>(momentum_buffers[i]);
          buf.mul_(momentum).add_(g[i], 1 - dampening);
          bufs.push_back(buf);
        }
      }
    }
    if (nesterov) {
      at::_foreach_add_(g, bufs, momentum);
    } else {
      g = bufs;
    }
  }
  at::_foreach_add_(p, g, -lr);
  if (new_buffers != nullptr) {
    // Every handle is allocated before any is handed over, so an
    // allocation failure leaks none.
    std::vector<std::unique_ptr<at::Tensor>> out(n);
    for (size_t i = 0; i < n; i++) {
      if (created[i].defined()) out[i] = std::make_unique<at::Tensor>(created[i]);
    }
    for (size_t i = 0; i < n; i++) new_buffers[i] = out[i].release();
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// torch's `_multi_tensor_adam` (`decoupled`: AdamW's weight decay), not
// capturable: `step_sizes` holds each parameter's `-lr / (1 - beta1^t)` and
// `bias_correction2_sqrts` its `(1 - beta2^t)^0.5`, `t` its step counted
// already. `max_exp_avg_sqs` is NULL without amsgrad.
int fulmen_cxx_foreach_adam(void* const* params, void* const* grads, void* const* exp_avgs, void* const* exp_avg_sqs,
                            void* const* max_exp_avg_sqs, const double* step_sizes,
                            const double* bias_correction2_sqrts, size_t n, double lr, double beta1, double beta2,
                            double weight_decay, double eps, bool maximize, bool decoupled, char* err,
                            size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), m = list(exp_avgs, n), v = list(exp_avg_sqs, n), vmax = list(max_exp_avg_sqs, n);
  auto g = adam_family_grads(grads, p, n, lr, weight_decay, decoupled, maximize);
  update_moments(m, v, g, beta1, beta2);
  std::vector<at::Tensor> denom;
  if (max_exp_avg_sqs != nullptr) {
    at::_foreach_maximum_(vmax, v);
    denom = at::_foreach_sqrt(vmax);
  } else {
    denom = at::_foreach_sqrt(v);
  }
  at::_foreach_div_(denom, scalars(bias_correction2_sqrts, n));
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(p, m, denom, scalars(step_sizes, n));
  FULMEN_CXX_CATCH(err, err_len)
}

// torch's `_multi_tensor_adagrad` (dense gradients): `minus_clrs` holds
// each parameter's `-lr / (1 + (t - 1) * lr_decay)`, `t` its step counted
// already.
int fulmen_cxx_foreach_adagrad(void* const* params, void* const* grads, void* const* state_sums,
                               const double* minus_clrs, size_t n, double weight_decay, double eps, bool maximize,
                               char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), sums = list(state_sums, n);
  auto g = decayed(list(grads, n), p, weight_decay, maximize);
  at::_foreach_addcmul_(sums, g, g, 1);
  auto std = at::_foreach_sqrt(sums);
  at::_foreach_add_(std, eps);
  std::vector<at::Tensor> numerator;
  if (weight_decay != 0 || maximize) {
    at::_foreach_mul_(g, scalars(minus_clrs, n));  // the list decayed() made
    numerator = g;
  } else {
    numerator = at::_foreach_mul(g, scalars(minus_clrs, n));
  }
  at::_foreach_addcdiv_(p, numerator, std);
  FULMEN_CXX_CATCH(err, err_len)
}

// torch's `_multi_tensor_rmsprop`: `grad_avgs` is NULL unless centered,
// `momentum_buffers` NULL unless momentum > 0.
int fulmen_cxx_foreach_rmsprop(void* const* params, void* const* grads, void* const* square_avgs,
                               void* const* grad_avgs, void* const* momentum_buffers, size_t n, double lr, double alpha,
                               double eps, double weight_decay, double momentum, bool maximize, char* err,
                               size_t err_len) {
  FULMEN_CXX_TRY
  auto p = list(params, n), sq = list(square_avgs, n), ga = list(grad_avgs, n), mb = list(momentum_buffers, n);
  auto g = decayed(list(grads, n), p, weight_decay, maximize);
  at::_foreach_mul_(sq, alpha);
  at::_foreach_addcmul_(sq, g, g, 1 - alpha);
  std::vector<at::Tensor> avg;
  if (grad_avgs != nullptr) {
    at::_foreach_lerp_(ga, g, 1 - alpha);
    avg = at::_foreach_addcmul(sq, ga, ga, -1);
    at::_foreach_sqrt_(avg);
  } else {
    avg = at::_foreach_sqrt(sq);
  }
  at::_foreach_add_(avg, eps);
  if (momentum_buffers != nullptr) {
    at::_foreach_mul_(mb, momentum);
    at::_foreach_addcdiv_(mb, g, avg);
    at::_foreach_add_(p, mb, -lr);
  } else {
    at::_foreach_addcdiv_(p, g, avg, -lr);
  }
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

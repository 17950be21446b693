// Compiled training steps, for src/nn/compiled_step.rs: an AOTInductor
// package (the joint forward and backward of a training_step, compiled
// ahead of time) run through libtorch's AOTIModelPackageLoader, and the
// loss it returns tied to the gradients it computed, so that the trainer's
// own backward (scaled, accumulated, hooked by DDP) puts them on the
// parameters.
//
// A loader is a heap `AOTIModelPackageLoader` handed out as `void*` by
// fulmen_cxx_aoti_load and freed by fulmen_cxx_aoti_free.
#include "fulmen_cxx.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::inductor::AOTIModelPackageLoader& loader(void* p) {
  return *static_cast<torch::inductor::AOTIModelPackageLoader*>(p);
}

// loss, with a backward that hands each parameter its precomputed
// gradient times the incoming one: backward(loss * s) adds s * grad to
// param.grad, as backward through the eager graph would.
struct LossWithGradients : public torch::autograd::Function<LossWithGradients> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& loss, at::TensorList params,
                            std::vector<at::Tensor> grads) {
    ctx->saved_data["grads"] = c10::IValue(grads);
    ctx->saved_data["n"] = static_cast<int64_t>(params.size());
    return loss.detach().clone();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto grads = ctx->saved_data["grads"].toTensorVector();
    const at::Tensor& g = grad_outputs[0];
    variable_list out;
    out.reserve(grads.size() + 2);
    out.emplace_back();  // the loss
    for (const at::Tensor& grad : grads) {
      out.push_back(g.defined() ? grad * g.to(grad.scalar_type()) : at::Tensor());
    }
    out.emplace_back();  // the gradients themselves
    return out;
  }
};

}  // namespace

extern "C" {

// Loads the model `model_name` of the AOTInductor package at `path` for
// the device index `device_index` (-1: the package's own).
int fulmen_cxx_aoti_load(const char* path, const char* model_name, int device_index, void** out, char* err,
                         size_t err_len) {
  FULMEN_CXX_TRY
  auto l = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
      path, model_name, false, 1, static_cast<c10::DeviceIndex>(device_index));
  *out = l.release();
  FULMEN_CXX_CATCH(err, err_len)
}

void fulmen_cxx_aoti_free(void* p) { delete static_cast<torch::inductor::AOTIModelPackageLoader*>(p); }

// Calls on_pair(ctx, key, value) for each metadata entry of the package.
int fulmen_cxx_aoti_metadata(void* p, void (*on_pair)(void*, const char*, const char*), void* ctx, char* err,
                             size_t err_len) {
  FULMEN_CXX_TRY
  for (const auto& kv : loader(p).get_metadata()) {
    on_pair(ctx, kv.first.c_str(), kv.second.c_str());
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Runs the package on inputs[0..n_inputs] (borrowed `at::Tensor*`) without
// autograd; writes n_outputs new `at::Tensor*` into outputs, refused when
// the package returns another number of values.
int fulmen_cxx_aoti_run(void* p, const void* const* inputs, size_t n_inputs, void** outputs, size_t n_outputs,
                        char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::vector<at::Tensor> in;
  in.reserve(n_inputs);
  for (size_t k = 0; k < n_inputs; ++k) {
    in.push_back(*static_cast<const at::Tensor*>(inputs[k]));
  }
  std::vector<at::Tensor> result;
  {
    at::NoGradGuard no_grad;
    result = loader(p).run(in);
  }
  if (result.size() != n_outputs) {
    throw std::runtime_error("the compiled step returned " + std::to_string(result.size()) + " tensors, its metadata says " +
                             std::to_string(n_outputs));
  }
  std::vector<std::unique_ptr<at::Tensor>> made;
  for (auto& t : result) {
    made.push_back(std::make_unique<at::Tensor>(std::move(t)));
  }
  for (size_t k = 0; k < n_outputs; ++k) {
    outputs[k] = made[k].release();
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// A new `at::Tensor*`: `loss` whose backward adds grad_output * grads[k] to
// params[k] (all borrowed, n each).
int fulmen_cxx_loss_with_gradients(const void* loss, const void* const* params, const void* const* grads, size_t n,
                                   void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::vector<at::Tensor> ps, gs;
  ps.reserve(n);
  gs.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    ps.push_back(*static_cast<const at::Tensor*>(params[k]));
    gs.push_back(*static_cast<const at::Tensor*>(grads[k]));
  }
  at::Tensor result = LossWithGradients::apply(*static_cast<const at::Tensor*>(loss), at::TensorList(ps), gs);
  *out = new at::Tensor(std::move(result));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

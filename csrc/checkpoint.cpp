// Activation checkpointing (src/nn/activation_checkpoint.rs): a module's
// forward runs without keeping its activations, and backward runs it again
// with gradients to get them, as torch.utils.checkpoint does. The forward
// is a Rust function called twice; between the two calls the generators'
// states and the autocast settings of the first are put back, so dropout
// draws the same masks and autocast casts the same ops.
#include "fulmen_cxx.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <ATen/SequenceNumber.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <mutex>
#include <utility>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The Rust forward and its context, released once with the last reference
// (the graph's node, or the call that made it when no graph was built).
struct Forward : torch::CustomClassHolder {
  Forward(fulmen_cxx_forward_fn f, void* c, void (*d)(void*)) : fn(f), ctx(c), drop(d) {}
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;
  ~Forward() override { drop(ctx); }
  fulmen_cxx_forward_fn fn;
  void* ctx;
  void (*drop)(void*);

  // Runs the forward on `inputs` (the trailing placeholder left out).
  variable_list operator()(const variable_list& inputs, size_t n) const {
    std::vector<const void*> borrowed;
    borrowed.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      borrowed.push_back(&inputs[i]);
    }
    variable_list outputs;
    char err[1024] = {0};
    int status = fn(ctx, borrowed.data(), n, &outputs, err, sizeof err);
    TORCH_CHECK(status == FULMEN_CXX_OK, err);
    return outputs;
  }
};

// A device type's autocast switch and dtype.
struct AutocastSetting {
  c10::DeviceType type;
  bool enabled;
  at::ScalarType dtype;
};

// What the first forward ran under, to run the second under the same.
struct Recorded : torch::CustomClassHolder {
  c10::intrusive_ptr<Forward> forward;
  std::vector<std::pair<c10::Device, at::Tensor>> rng;
  std::vector<AutocastSetting> autocast;
};

// The device types whose autocast settings are kept: the CPU's and those
// of the inputs.
std::vector<c10::DeviceType> autocast_types(const variable_list& inputs) {
  std::vector<c10::DeviceType> types{c10::DeviceType::CPU};
  for (const auto& t : inputs) {
    if (t.defined()) {
      c10::DeviceType d = t.device().type();
      bool known = false;
      for (auto k : types) known = known || k == d;
      if (!known && at::autocast::is_autocast_available(d)) types.push_back(d);
    }
  }
  return types;
}

// The default generators of the CPU and of the inputs' other devices.
std::vector<c10::Device> generator_devices(const variable_list& inputs) {
  std::vector<c10::Device> devices{c10::Device(c10::DeviceType::CPU)};
  for (const auto& t : inputs) {
    if (t.defined() && !t.is_cpu() && !t.is_meta()) {
      bool known = false;
      for (const auto& k : devices) known = known || k == t.device();
      if (!known) devices.push_back(t.device());
    }
  }
  return devices;
}

at::Generator generator_of(const c10::Device& d) {
  return at::globalContext().defaultGenerator(d);
}

std::vector<std::pair<c10::Device, at::Tensor>> take_rng(const std::vector<c10::Device>& devices) {
  std::vector<std::pair<c10::Device, at::Tensor>> out;
  for (const auto& d : devices) {
    at::Generator g = generator_of(d);
    std::lock_guard<std::mutex> lock(g.mutex());
    out.emplace_back(d, g.get_state());
  }
  return out;
}

void put_rng(const std::vector<std::pair<c10::Device, at::Tensor>>& states) {
  for (const auto& s : states) {
    at::Generator g = generator_of(s.first);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(s.second);
  }
}

std::vector<AutocastSetting> take_autocast(const std::vector<c10::DeviceType>& types) {
  std::vector<AutocastSetting> out;
  for (auto t : types) {
    out.push_back({t, at::autocast::is_autocast_enabled(t), at::autocast::get_autocast_dtype(t)});
  }
  return out;
}

void put_autocast(const std::vector<AutocastSetting>& settings) {
  for (const auto& s : settings) {
    at::autocast::set_autocast_enabled(s.type, s.enabled);
    at::autocast::set_autocast_dtype(s.type, s.dtype);
  }
}

// Puts the recorded generator states and autocast settings in place for
// its lifetime, and the ones it found back at its end (torch's fork_rng
// and autocast around the recomputation).
class Replay {
 public:
  explicit Replay(const Recorded& r)
      : rng_(take_rng(devices_of(r))), autocast_(take_autocast(types_of(r))), any_autocast_(false) {
    for (const auto& s : r.autocast) any_autocast_ = any_autocast_ || s.enabled;
    put_rng(r.rng);
    put_autocast(r.autocast);
    if (any_autocast_) at::autocast::increment_nesting();
  }
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;
  ~Replay() {
    try {
      if (any_autocast_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
      put_autocast(autocast_);
      put_rng(rng_);
    } catch (...) {
      // A destructor must not throw; the states were valid when taken.
    }
  }

 private:
  static std::vector<c10::Device> devices_of(const Recorded& r) {
    std::vector<c10::Device> d;
    for (const auto& s : r.rng) d.push_back(s.first);
    return d;
  }
  static std::vector<c10::DeviceType> types_of(const Recorded& r) {
    std::vector<c10::DeviceType> t;
    for (const auto& s : r.autocast) t.push_back(s.type);
    return t;
  }
  std::vector<std::pair<c10::Device, at::Tensor>> rng_;
  std::vector<AutocastSetting> autocast_;
  bool any_autocast_;
};

// The autograd node: the forward keeps its inputs only; the backward runs
// the forward again with gradients and backpropagates through it, which
// accumulates the parameters' gradients and gives the inputs'. The last
// input is a 0-element placeholder that requires grad, so the outputs
// require grad (and the backward runs) even when no input does: the
// parameters inside still get their gradients.
struct Checkpointed : torch::autograd::Function<Checkpointed> {
  static variable_list forward(AutogradContext* ctx, at::TensorList given, c10::intrusive_ptr<Recorded> rec) {
    variable_list inputs(given.begin(), given.end());
    size_t n = inputs.size() - 1;
    variable_list real(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(n));
    rec->rng = take_rng(generator_devices(real));
    rec->autocast = take_autocast(autocast_types(real));
    variable_list outputs = (*rec->forward)(inputs, n);
    variable_list plain;
    for (const auto& o : outputs) {
      TORCH_CHECK(o.defined(), "a checkpointed forward returned an undefined tensor");
      if (!at::isFloatingType(o.scalar_type()) && !at::isComplexType(o.scalar_type())) plain.push_back(o);
    }
    if (!plain.empty()) ctx->mark_non_differentiable(plain);
    ctx->save_for_backward(real);
    ctx->saved_data["recorded"] = c10::IValue::make_capsule(rec);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto rec = c10::static_intrusive_pointer_cast<Recorded>(ctx->saved_data["recorded"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    variable_list inputs;
    for (const auto& t : saved) {
      if (!t.defined()) {
        inputs.push_back(t);
        continue;
      }
      at::Tensor d = t.detach();
      d.requires_grad_(t.requires_grad());
      inputs.push_back(d);
    }
    variable_list outputs;
    {
      at::AutoGradMode grad(true);
      Replay replay(*rec);
      variable_list with_placeholder = inputs;
      with_placeholder.push_back(at::Tensor());
      outputs = (*rec->forward)(with_placeholder, inputs.size());
    }
    TORCH_CHECK(outputs.size() == grads.size(), "the checkpointed forward returned ", outputs.size(),
                " tensors when run again for backward, ", grads.size(), " the first time");
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) {
      torch::autograd::backward(roots, root_grads);
    }
    variable_list out;
    for (const auto& t : inputs) {
      out.push_back(t.defined() && t.requires_grad() ? t.grad() : at::Tensor());
    }
    // The placeholder's, then the `Recorded` argument's.
    out.push_back(at::Tensor());
    out.push_back(at::Tensor());
    return out;
  }
};

}  // namespace

extern "C" {

// Appends a copy of `t` (an `at::Tensor*`) to `list`, the outputs of a
// checkpointed forward.
int fulmen_cxx_tensor_list_push(void* list, const void* t, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(list != nullptr && t != nullptr, "tensor_list_push: NULL");
  static_cast<variable_list*>(list)->push_back(*static_cast<const at::Tensor*>(t));
  FULMEN_CXX_CATCH(err, err_len)
}

// Runs `forward(ctx, ...)` on the `n` tensors of `inputs` (`at::Tensor*`,
// borrowed) as a checkpointed forward: with gradients enabled it keeps only
// the inputs, and the backward runs `forward` again. Hands each output
// (`at::Tensor*`, borrowed for the call) to `emit(sink, output)`.
// `drop(ctx)` runs exactly once, when the graph no longer needs `forward`
// (or before this returns when no graph was built). With gradients
// disabled `forward` runs once, plainly.
int fulmen_cxx_checkpoint(fulmen_cxx_forward_fn forward, void* ctx, void (*drop)(void*), const void* const* inputs,
                          size_t n, void (*emit)(void* sink, const void* output), void* sink, char* err,
                          size_t err_len) {
  c10::intrusive_ptr<Recorded> rec;
  try {
    rec = c10::make_intrusive<Recorded>();
    rec->forward = c10::make_intrusive<Forward>(forward, ctx, drop);
  } catch (...) {
    if (!rec || !rec->forward) drop(ctx);
    fulmen_cxx::write_message("checkpoint: out of memory", err, err_len);
    return FULMEN_CXX_ERROR;
  }
  FULMEN_CXX_TRY
  TORCH_CHECK(emit != nullptr, "checkpoint: emit is NULL");
  variable_list in;
  in.reserve(n + 1);
  for (size_t i = 0; i < n; ++i) {
    in.push_back(*static_cast<const at::Tensor*>(inputs[i]));
  }
  variable_list outputs;
  if (at::GradMode::is_enabled()) {
    in.push_back(at::empty({0}, at::TensorOptions().dtype(at::kFloat)).requires_grad_(true));
    // Names the autograd node for observers, as Python's custom Functions
    // do: FLOP counts by module find the node's module by this number.
    at::RecordFunction record(at::RecordScope::FUNCTION);
    if (record.isActive()) {
      record.before("fulmen::checkpoint", c10::ArrayRef<const c10::IValue>{}, at::sequence_number::peek());
    }
    // A TensorList, which autograd takes as inputs (a vector is not).
    outputs = Checkpointed::apply(at::TensorList(in), rec);
  } else {
    outputs = (*rec->forward)(in, n);
  }
  rec.reset();
  for (const auto& o : outputs) {
    emit(sink, &o);
  }
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

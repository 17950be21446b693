// A model's forward traced into a TorchScript module, as torch.jit.trace
// traces an nn.Module (Lightning's to_torchscript(method="trace")), for
// src/nn/trace.rs: the model's parameters and buffers become the
// attributes of a module tree named as its state_dict, libtorch's tracer
// records the ops of one forward (fulmen's own layers, host callbacks and
// scripts alike) with those tensors read through `self`, and the graph
// becomes the module's `forward`.
#include "fulmen_cxx.h"

#include <map>
#include <string>
#include <vector>

#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/script.h>

namespace {

// The module tree being built: one module per dotted path ("" the root).
class TracedTree {
 public:
  TracedTree(const char* const* paths, const char* const* classes, size_t n)
      : cu_(std::make_shared<torch::jit::CompilationUnit>()) {
    for (size_t i = 0; i < n; ++i) {
      TORCH_CHECK(paths[i] != nullptr && classes[i] != nullptr, "trace: a module path or class is NULL");
      classes_[paths[i]] = classes[i];
    }
    modules_.emplace("", make(""));
  }

  torch::jit::Module& root() { return modules_.at(""); }

  // Registers the tensor at the dotted `name` on its module, made (with
  // its parents) on first use.
  void add_tensor(const std::string& name, const at::Tensor& t, bool buffer) {
    size_t dot = name.rfind('.');
    torch::jit::Module& owner = dot == std::string::npos ? root() : module_at(name.substr(0, dot));
    std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    TORCH_CHECK(!leaf.empty(), "trace: the state name \"", name, "\" has an empty part");
    if (buffer) {
      owner.register_buffer(leaf, t);
    } else {
      owner.register_parameter(leaf, t, /*is_buffer=*/false);
    }
  }

 private:
  torch::jit::Module make(const std::string& path) {
    auto found = classes_.find(path);
    std::string cls = found == classes_.end() ? "Module" : found->second;
    torch::jit::Module m(c10::QualifiedName("__torch__.fulmen." + cls), cu_, /*shouldMangle=*/true);
    // Module::train and torch's ScriptModule.train() set this on every module.
    m.register_attribute("training", c10::BoolType::get(), false);
    return m;
  }

  torch::jit::Module& module_at(const std::string& path) {
    auto found = modules_.find(path);
    if (found != modules_.end()) {
      return found->second;
    }
    size_t dot = path.rfind('.');
    torch::jit::Module& parent = dot == std::string::npos ? root() : module_at(path.substr(0, dot));
    std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
    TORCH_CHECK(!leaf.empty(), "trace: the module path \"", path, "\" has an empty part");
    torch::jit::Module child = make(path);
    parent.register_module(leaf, child);
    return modules_.emplace(path, child).first->second;
  }

  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  std::map<std::string, std::string> classes_;
  std::map<std::string, torch::jit::Module> modules_;
};

}  // namespace

extern "C" {

// Traces `forward(ctx, ...)` on the `n_inputs` tensors of `inputs`
// (`at::Tensor*`, borrowed) with gradients off into a new TorchScript
// module (`torch::jit::Module*` in *out, freed by fulmen_cxx_script_free)
// whose attributes are the `n_state` tensors of `tensors` (borrowed,
// registered as they are: the caller points the slots at copies after)
// under the dotted `names`, buffers where `is_buffer[i]`, on modules of the
// classes `classes[i]` at `paths[i]` (others "Module"). The forward's
// outputs become one tensor or a tuple. A failing forward's message is its
// own; FULMEN_CXX_INVALID_STATE when this thread traces already.
int fulmen_cxx_script_trace(const char* const* paths, const char* const* classes, size_t n_modules,
                            const char* const* names, const void* const* tensors, const int* is_buffer,
                            size_t n_state, const void* const* inputs, size_t n_inputs, fulmen_cxx_forward_fn forward,
                            void* ctx, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  TORCH_CHECK(out != nullptr && forward != nullptr, "trace: NULL argument");
  TORCH_CHECK(n_inputs > 0 && inputs != nullptr, "trace: no example input");
  if (torch::jit::tracer::isTracing()) {
    throw fulmen_cxx::StateError("a model is being traced on this thread already: a trace cannot start inside another");
  }
  torch::NoGradGuard no_grad;
  TracedTree tree(paths, classes, n_modules);
  for (size_t i = 0; i < n_state; ++i) {
    TORCH_CHECK(names[i] != nullptr && tensors[i] != nullptr, "trace: a state entry is NULL");
    tree.add_tensor(names[i], *static_cast<const at::Tensor*>(tensors[i]), is_buffer[i] != 0);
  }
  torch::jit::Stack stack;
  for (size_t i = 0; i < n_inputs; ++i) {
    TORCH_CHECK(inputs[i] != nullptr, "trace: example input ", i, " is NULL");
    stack.emplace_back(*static_cast<const at::Tensor*>(inputs[i]));
  }
  auto run = [&](torch::jit::Stack args) -> torch::jit::Stack {
    std::vector<const void*> ptrs;
    ptrs.reserve(args.size());
    for (const auto& a : args) {
      ptrs.push_back(&a.toTensor());  // args outlives the call
    }
    std::vector<at::Tensor> outputs;
    char message[1024] = {0};
    if (forward(ctx, ptrs.data(), ptrs.size(), &outputs, message, sizeof message) != FULMEN_CXX_OK) {
      throw fulmen_cxx::StateError(message);
    }
    TORCH_CHECK(!outputs.empty(), "trace: the forward returned no tensor");
    if (outputs.size() == 1) {
      return {outputs[0]};
    }
    std::vector<c10::IValue> items(outputs.begin(), outputs.end());
    return {c10::ivalue::Tuple::create(std::move(items))};
  };
  auto no_name = [](const at::Tensor&) { return std::string(); };
  torch::jit::Module& root = tree.root();
  // A throw from `run` (the forward's own error) abandons the trace.
  std::shared_ptr<torch::jit::Graph> graph =
      torch::jit::tracer::trace(std::move(stack), run, no_name, /*strict=*/true, /*force_outplace=*/false, &root)
          .first->graph;
  auto fn = root._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*root.type()->name(), "forward"), graph);
  root.type()->addMethod(fn);
  *out = new torch::jit::Module(root);
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

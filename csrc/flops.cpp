// FLOP counting for src/nn/flop_counter.rs: the operators a thread runs
// (and the backward passes it starts) are observed through RecordFunction
// and counted with torch.utils.flop_counter's formulas, as its
// FlopCounterMode (Lightning's measure_flops) counts them.
//
// FlopCounterMode is a TorchDispatchMode: it sees the operators that reach
// the Python dispatch key (below autograd), decomposes those that have a
// CompositeImplicitAutograd kernel and are not in its registry, and does not
// see what an operator it runs calls inside. RecordFunction sees every
// dispatcher call, nested ones too, so an operator is counted here only
// when every operator open around it on its thread decomposes (has a
// CompositeImplicitAutograd kernel and no formula): the operators torch's
// mode sees.
//
// Counts by module follow the mode's ModuleTracker: an operator counts for
// "Global" and for every module whose forward is open around it, named
// from the root's class by the state_dict paths ("MLP", "MLP.net",
// "MLP.net.0"). The modules open on a thread are the scopes fulmen's own
// module tree pushes (fulmen_cxx_flops_scope_push), the nn_module_stack of
// the exported program's instruction running (flops_program_modules), and
// TorchScript's module hierarchy (the graph executor's optimization is off
// on the measuring thread, so the interpreter keeps it). A backward
// operator counts for the modules of the forward operator whose autograd
// node it runs in: nodes are matched to their forward by sequence number.
//
// Hosts register formulas of their own by operator (torch's
// register_flop_formula / the mode's custom_mapping): a measurement takes
// the registry as it stands when it begins, as the mode copies torch's
// registry when it is made; a host formula replaces the built-in one of its
// operator, and an operator that decomposes is not counted (its parts are),
// as the mode decomposes it before looking for a formula.
#include "fulmen_cxx.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include "torch_version.hpp"

extern "C" {

// The kinds of a fulmen_cxx_flop_value (src/shim/flops.rs's `flop_kind`
// numbers them alike): None, a tensor (`shape`, `ndim`, `dtype` a
// fulmen_dtype or -1), an int (`integer`), a float (`number`), a bool
// (`integer` 0 or 1), a string (`text`), a list of ints (`ints`,
// `num_ints`), a list or tuple (`items`, `num_items`), anything else.
enum FulmenCxxFlopKind : int32_t {
  kFlopNone = 0,
  kFlopTensor = 1,
  kFlopInt = 2,
  kFlopFloat = 3,
  kFlopBool = 4,
  kFlopString = 5,
  kFlopInts = 6,
  kFlopList = 7,
  kFlopOther = 8,
};

// One argument or result of an operator as a host formula sees it
// (src/shim/flops.rs declares the same layout), of a FulmenCxxFlopKind.
// Valid during the call only.
struct fulmen_cxx_flop_value {
  int32_t kind;
  int32_t dtype;
  const int64_t* shape;
  size_t ndim;
  int64_t integer;
  double number;
  const char* text;
  const int64_t* ints;
  size_t num_ints;
  const fulmen_cxx_flop_value* items;
  size_t num_items;
};

// A host formula: writes the FLOPs of operator `op` called with `inputs`
// (every argument of its schema, defaults included) that returned `outputs`
// to *flops and returns 0, or returns a fulmen error code with its message
// in `err`.
typedef int (*fulmen_cxx_flop_formula_fn)(void* ctx, const char* op, const fulmen_cxx_flop_value* inputs,
                                          size_t num_inputs, const fulmen_cxx_flop_value* outputs, size_t num_outputs,
                                          uint64_t* flops, char* err, size_t err_len);

}  // extern "C"

namespace {

// A formula a host registered, its context dropped with the last
// measurement holding it.
struct HostFormula {
  fulmen_cxx_flop_formula_fn fn = nullptr;
  void* ctx = nullptr;
  void (*drop)(void*) = nullptr;
  HostFormula(fulmen_cxx_flop_formula_fn f, void* c, void (*d)(void*)) : fn(f), ctx(c), drop(d) {}
  HostFormula(const HostFormula&) = delete;
  HostFormula& operator=(const HostFormula&) = delete;
  ~HostFormula() {
    if (drop != nullptr) drop(ctx);
  }
};

using Formulas = std::map<std::string, std::shared_ptr<HostFormula>>;

// The formulas hosts registered, by operator name ("aten::gelu"). Never
// destroyed: a host's drop function is not called during the process's exit.
std::mutex g_formulas_mu;
Formulas& registry() {
  static auto* formulas = new Formulas();
  return *formulas;
}

// What counting needs to know of an operator's overload.
struct OpInfo {
  // Whether torch's mode would see the calls inside it: it has a
  // CompositeImplicitAutograd kernel (decomposed before the mode, or by it).
  bool decomposes = true;
  // How many arguments and results its schema has: a boxed call (from
  // TorchScript's interpreter) shows the whole stack, its arguments last
  // before the call and its results last after it.
  size_t arguments = SIZE_MAX;
  size_t returns = SIZE_MAX;
};

// Counts of one measurement, by operator ("aten::mm"). It travels with
// the measuring thread's state (ThreadLocalDebugInfo) to the threads that
// thread's work continues on (autograd's device threads), so measurements
// on different threads stay apart.
struct Session : c10::DebugInfoBase {
  std::mutex mu;
  std::map<std::string, uint64_t> by_op;
  // Counts by module name, then operator.
  std::map<std::string, std::map<std::string, uint64_t>> by_module;
  // When each count was first added to ("" for by_op), as torch's dicts
  // keep their keys in that order.
  std::map<std::pair<std::string, std::string>, uint64_t> first_added;
  // The sets of open modules operators ran in, by id; 0 is none.
  std::vector<std::vector<std::string>> module_sets{{}};
  // The module set of each autograd node's forward operator, by (forward
  // thread, sequence number).
  std::map<std::pair<uint64_t, int64_t>, size_t> node_sets;
  // The measuring thread's graph executor optimization, put back at the end.
  bool graph_optimize = true;
  bool overflow = false;
  std::unordered_map<std::string, OpInfo> ops;  // by operator name with overload
  at::CallbackHandle handle = 0;
  // The host formulas registered when the measurement began.
  Formulas formulas;
  // The first host formula's failure: its fulmen error code (0: none) and message.
  int formula_code = 0;
  std::string formula_error;
  // Ended, though still in the thread's debug information (its pop failed
  // while other information lay above it): counts nothing, and the next
  // measurement on the thread pops it first.
  std::atomic<bool> closed{false};
};

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
constexpr std::string_view kSessionName = "FULMEN_FLOP_COUNTER";
const c10::DebugInfoKind kSession(&kSessionName);
#else
// Before 2.13 the slots are a fixed set: the one PyTorch keeps for its tests.
const c10::DebugInfoKind kSession = c10::DebugInfoKind::TEST_INFO_2;
#endif

// The measurement under way on this thread, if any.
Session* current_session() {
  auto* s = dynamic_cast<Session*>(c10::ThreadLocalDebugInfo::get(kSession));
  return s != nullptr && !s->closed.load() ? s : nullptr;
}

// The operators open on this thread: true for one whose inner calls torch's
// mode would not see.
thread_local std::vector<bool> t_open;

// The full names of the module scopes open on this thread, outermost first.
thread_local std::vector<std::string> t_scopes;
// The module paths of the exported program instruction running on this
// thread, relative to the innermost scope.
thread_local const std::vector<std::string>* t_program = nullptr;
// The module sets of the autograd nodes running on this thread, innermost last.
thread_local std::vector<size_t> t_backward;
// The TorchScript module running as the outermost one on this thread.
thread_local const torch::jit::Module* t_script_root = nullptr;

std::string joined(const std::string& base, const std::string& name) {
  return base.empty() ? name : base + "." + name;
}

// The submodule `name` of `m`, if it has one.
std::optional<torch::jit::Module> child_module(const torch::jit::Module& m, const std::string& name) {
  if (!m.hasattr(name)) return std::nullopt;
  c10::IValue v = m.attr(name);
  if (!v.isModule()) return std::nullopt;
  return v.toModule();
}

// The path below `m` of the submodule TorchScript's hierarchy calls `name`:
// `name` itself, or, for an item of a ModuleList or ModuleDict (which have
// no forward, so the hierarchy leaves them out), "container.name". Moves
// `m` to it; resets it when the path cannot be found.
std::string submodule_path(std::optional<torch::jit::Module>& m, const std::string& name) {
  if (!m) return name;
  if (auto child = child_module(*m, name)) {
    m = child;
    return name;
  }
  for (const auto& item : m->named_children()) {
    if (item.value.find_method("forward")) continue;
    if (auto child = child_module(item.value, name)) {
      m = child;
      return item.name + "." + name;
    }
  }
  m.reset();
  return name;
}

// The modules open around an operator running now on this thread, outside
// any autograd node.
std::vector<std::string> open_modules() {
  std::vector<std::string> names = t_scopes;
  std::string base = t_scopes.empty() ? std::string() : t_scopes.back();
  if (t_program != nullptr) {
    for (const std::string& p : *t_program) names.push_back(joined(base, p));
    return names;
  }
  // TorchScript: "TOP(Class)::forward", then "child(Class)::forward", ...
  // An optimized graph's operators say "TOP()::<forward op>": no modules.
  std::vector<std::string> frames = torch::jit::currentModuleHierarchy();
  std::optional<torch::jit::Module> at;
  if (t_script_root != nullptr) at = *t_script_root;
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::string& f = frames[i];
    size_t open = f.find('('), close = f.find(')', open == std::string::npos ? 0 : open);
    if (open == std::string::npos || close == std::string::npos) break;
    std::string instance = f.substr(0, open), cls = f.substr(open + 1, close - open - 1);
    if (i == 0) {
      if (instance != "TOP" || cls.empty()) break;
      if (base.empty()) {
        base = cls;
        names.push_back(base);
      }
      continue;
    }
    // A method of the same module, or a TorchScript function it calls
    // ("CALL_FUNCTION::relu(...)", F.relu): no module of its own.
    if (instance == "SELF" || instance.find("::") != std::string::npos) continue;
    base = joined(base, submodule_path(at, instance));
    names.push_back(base);
  }
  return names;
}

// The id of `names` among the session's module sets (the caller holds its lock).
size_t intern(Session& s, std::vector<std::string> names) {
  if (names.empty()) return 0;
  if (s.module_sets.back() == names) return s.module_sets.size() - 1;
  for (size_t i = 1; i < s.module_sets.size(); ++i) {
    if (s.module_sets[i] == names) return i;
  }
  s.module_sets.push_back(std::move(names));
  return s.module_sets.size() - 1;
}

using Shape = std::vector<int64_t>;

// A product that remembers whether it left 64 bits.
struct Count {
  uint64_t value = 0;
  bool overflow = false;
  static Count of(uint64_t v) { return Count{v, false}; }
  Count times(int64_t x) const {
    Count out = *this;
    uint64_t r = 0;
    if (x < 0 || __builtin_mul_overflow(value, static_cast<uint64_t>(x), &r)) {
      out.overflow = true;
      out.value = 0;
    } else {
      out.value = r;
    }
    return out;
  }
  Count times(const Count& o) const {
    Count out = o.overflow ? Count{0, true} : times(static_cast<int64_t>(o.value));
    if (o.value > static_cast<uint64_t>(INT64_MAX)) out = Count{0, true};
    out.overflow = out.overflow || overflow;
    return out;
  }
  Count plus(const Count& o) const {
    Count out{0, overflow || o.overflow};
    if (__builtin_add_overflow(value, o.value, &out.value)) {
      out.overflow = true;
    }
    return out;
  }
};

Count prod(const Shape& s, size_t from) {
  Count c = Count::of(1);
  for (size_t i = from; i < s.size(); ++i) {
    c = c.times(s[i]);
  }
  return c;
}

// The argument values an operator's formula reads, taken at its start
// (RecordFunction's inputs are valid only then).
struct OpContext : at::ObserverContext {
  bool pushed = false;
  bool counted = false;
  bool backward_pushed = false;
  size_t modules = 0;  // the module set it counts for
  std::string name;
  std::shared_ptr<HostFormula> host;  // the host's formula, if it has one
  size_t returns = SIZE_MAX;  // how many results its schema has
  int unwinding = 0;          // the exceptions in flight when it started
  std::vector<c10::IValue> inputs;
};

bool has_formula(const std::string& name) {
  static const char* const NAMES[] = {
      "aten::mm",
      "aten::addmm",
      "aten::bmm",
      "aten::baddbmm",
      "aten::_scaled_mm",
      "aten::convolution",
      "aten::_convolution",
      "aten::cudnn_convolution",
      "aten::convolution_overrideable",
      "aten::_slow_conv2d_forward",
      "aten::convolution_backward",
      "aten::_scaled_dot_product_efficient_attention",
      "aten::_scaled_dot_product_flash_attention",
      "aten::_scaled_dot_product_cudnn_attention",
      "aten::_scaled_dot_product_efficient_attention_backward",
      "aten::_scaled_dot_product_flash_attention_backward",
      "aten::_scaled_dot_product_cudnn_attention_backward",
      "aten::_flash_attention_forward",
      "aten::_efficient_attention_forward",
      "aten::_flash_attention_backward",
      "aten::_efficient_attention_backward",
  };
  for (const char* n : NAMES) {
    if (name == n) return true;
  }
  return false;
}

Shape shape_of(const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().defined()) {
    return v.toTensor().sizes().vec();
  }
  return {};
}

Shape arg(const std::vector<c10::IValue>& in, size_t i) { return i < in.size() ? shape_of(in[i]) : Shape{}; }

bool has_tensor(const std::vector<c10::IValue>& in, size_t i) {
  return i < in.size() && in[i].isTensor() && in[i].toTensor().defined();
}

bool flag(const std::vector<c10::IValue>& in, size_t i) { return i < in.size() && in[i].isBool() && in[i].toBool(); }

// bmm_flop((b, m, k), (b, k, n)) = b * m * n * 2 * k.
Count bmm(Count b, int64_t m, int64_t k, int64_t n) { return b.times(m).times(n).times(2).times(k); }

Count mm_shapes(const Shape& a, const Shape& b) {
  if (a.size() != 2 || b.size() != 2) return Count::of(0);
  return bmm(Count::of(1), a[0], a[1], b[1]);
}

Count bmm_shapes(const Shape& a, const Shape& b) {
  if (a.size() != 3 || b.size() != 3) return Count::of(0);
  return bmm(Count::of(1).times(a[0]), a[1], a[2], b[2]);
}

// conv_flop_count(x_shape, w_shape, out_shape, transposed).
Count conv_count(const Shape& x, const Shape& w, const Shape& out, bool transposed) {
  const Shape& conv = transposed ? x : out;
  if (x.empty() || w.size() < 2 || conv.size() < 2) return Count::of(0);
  return prod(conv, 2).times(prod(w, 2)).times(x[0]).times(w[0]).times(w[1]).times(2);
}

Shape transpose01(const Shape& s) {
  if (s.size() < 2) return s;
  Shape t = s;
  std::swap(t[0], t[1]);
  return t;
}

// sdpa_flop_count(query, key, value): [b, h_q, s_q, d_q] x [b, h_kv, s_k, d] x [b, h_kv, s_k, d_v].
Count sdpa_count(const Shape& q, const Shape& k, const Shape& v) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return Count::of(0);
  Count bh = Count::of(1).times(q[0]).times(q[1]);
  return bmm(bh, q[2], q[3], k[2]).plus(bmm(bh, q[2], k[2], v[3]));
}

Count sdpa_backward_count(const Shape& g, const Shape& q, const Shape& k, const Shape& v) {
  if (g.size() != 4 || q.size() != 4 || k.size() != 4 || v.size() != 4) return Count::of(0);
  Count bh = Count::of(1).times(q[0]).times(q[1]);
  int64_t s_q = q[2], d_q = q[3], s_k = k[2], d_v = v[3];
  return bmm(bh, s_q, d_q, s_k)
      .plus(bmm(bh, s_q, d_v, s_k))
      .plus(bmm(bh, s_k, s_q, d_v))
      .plus(bmm(bh, s_q, s_k, d_q))
      .plus(bmm(bh, d_q, s_q, s_k));
}

// The lengths of a jagged batch's sequences from its offsets, as (length,
// how many sequences have it) runs: on a meta tensor, which holds no
// values, every sequence has the longest length (one run, however many
// sequences the tensor claims).
std::vector<std::pair<int64_t, int64_t>> lengths(const c10::IValue& offsets, const c10::IValue& max_len) {
  const at::Tensor& o = offsets.toTensor();
  std::vector<std::pair<int64_t, int64_t>> out;
  if (o.dim() != 1 || o.size(0) < 2) return out;
  if (o.is_meta()) {
    out.emplace_back(max_len.isInt() ? max_len.toInt() : 0, o.size(0) - 1);
    return out;
  }
  at::Tensor d = o.diff().to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = d.data_ptr<int64_t>();
  for (int64_t i = 0; i < d.numel(); ++i) out.emplace_back(p[i], 1);
  return out;
}

// _flash_attention_* and _efficient_attention_*: one count per sequence of
// a jagged batch (`cu` the offsets), else the shapes as they are.
Count attention(const std::vector<c10::IValue>& in, size_t q, size_t cu_q, size_t cu_k, size_t max_q, size_t max_k,
                bool four_dim, bool backward) {
  Shape qs = arg(in, q), ks = arg(in, q + 1), vs = arg(in, q + 2);
  Shape gs = backward ? arg(in, 0) : Shape{};
  // An undefined tensor (None in Python) boxes as a tensor too.
  bool jagged = has_tensor(in, cu_q) && has_tensor(in, cu_k);
  if (!jagged) {
    return backward ? sdpa_backward_count(gs, qs, ks, vs) : sdpa_count(qs, ks, vs);
  }
  size_t need = four_dim ? 4 : 3;
  if (qs.size() != need || ks.size() != need || vs.size() != need) return Count::of(0);
  size_t h = need - 2, d = need - 1;
  c10::IValue none;
  auto lq = lengths(in[cu_q], max_q < in.size() ? in[max_q] : none);
  auto lk = lengths(in[cu_k], max_k < in.size() ? in[max_k] : none);
  Count total = Count::of(0);
  for (size_t i = 0; i < lq.size() && i < lk.size(); ++i) {
    int64_t len_q = lq[i].first, len_k = lk[i].first;
    Shape q1{1, qs[h], len_q, qs[d]}, k1{1, ks[h], len_k, ks[d]}, v1{1, vs[h], len_k, vs[d]};
    Count one = backward ? sdpa_backward_count(q1, q1, k1, v1) : sdpa_count(q1, k1, v1);
    total = total.plus(one.times(std::min(lq[i].second, lk[i].second)));
  }
  return total;
}

// torch.utils.flop_counter's formula for operator `name`.
Count formula(const std::string& name, const std::vector<c10::IValue>& in, const std::vector<c10::IValue>& out) {
  if (name == "aten::mm" || name == "aten::_scaled_mm") return mm_shapes(arg(in, 0), arg(in, 1));
  if (name == "aten::addmm") return mm_shapes(arg(in, 1), arg(in, 2));
  if (name == "aten::bmm") return bmm_shapes(arg(in, 0), arg(in, 1));
  if (name == "aten::baddbmm") return bmm_shapes(arg(in, 1), arg(in, 2));
  if (name == "aten::convolution_backward") {
    Shape g = arg(in, 0), x = arg(in, 1), w = arg(in, 2);
    bool transposed = flag(in, 7);
    std::vector<bool> mask;
    if (in.size() > 10 && in[10].isBoolList()) {
      for (bool b : in[10].toBoolList()) mask.push_back(b);
    }
    Count total = Count::of(0);
    if (!mask.empty() && mask[0] && !out.empty()) {
      total = total.plus(conv_count(g, w, shape_of(out[0]), !transposed));
    }
    if (mask.size() > 1 && mask[1] && out.size() > 1) {
      Shape gw = transpose01(shape_of(out[1]));
      total = total.plus(transposed ? conv_count(transpose01(g), transpose01(x), gw, false)
                                     : conv_count(transpose01(x), transpose01(g), gw, false));
    }
    return total;
  }
  if (name.find("conv") != std::string::npos) {
    return conv_count(arg(in, 0), arg(in, 1), out.empty() ? Shape{} : shape_of(out[0]), flag(in, 6));
  }
  if (name == "aten::_flash_attention_forward") return attention(in, 0, 3, 4, 5, 6, false, false);
  if (name == "aten::_efficient_attention_forward") return attention(in, 0, 4, 5, 6, 7, true, false);
  if (name == "aten::_flash_attention_backward") return attention(in, 1, 6, 7, 8, 9, false, true);
  if (name == "aten::_efficient_attention_backward") return attention(in, 1, 6, 7, 8, 9, true, true);
  if (name.size() > 9 && name.compare(name.size() - 9, 9, "_backward") == 0) {
    return sdpa_backward_count(arg(in, 0), arg(in, 1), arg(in, 2), arg(in, 3));
  }
  return sdpa_count(arg(in, 0), arg(in, 1), arg(in, 2));
}

// The storage behind the views of one formula call's values.
struct Views {
  std::deque<std::vector<int64_t>> ints;
  std::deque<std::vector<fulmen_cxx_flop_value>> lists;
  std::deque<std::string> texts;
};

// A libtorch dtype as the C API numbers it (fulmen_dtype), -1 for one it has not.
int32_t fulmen_dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return 0;
    case c10::ScalarType::Double: return 1;
    case c10::ScalarType::Half: return 2;
    case c10::ScalarType::BFloat16: return 3;
    case c10::ScalarType::Long: return 4;
    case c10::ScalarType::Int: return 5;
    case c10::ScalarType::Byte: return 6;
    case c10::ScalarType::Bool: return 7;
    case c10::ScalarType::Char: return 8;
    case c10::ScalarType::Short: return 9;
    default: return -1;
  }
}

// Lists nested deeper than this are "anything else" to a host formula.
constexpr int kMaxViewDepth = 8;

// A host formula's view of `v`, its storage in `keep`.
fulmen_cxx_flop_value view(const c10::IValue& v, Views& keep, int depth) {
  fulmen_cxx_flop_value out{};
  out.kind = kFlopOther;
  out.dtype = -1;
  if (v.isNone()) {
    out.kind = kFlopNone;
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      out.kind = kFlopNone;  // an optional tensor left out boxes as an undefined one
    } else if (!t.is_nested()) {
      auto& dims = keep.ints.emplace_back(t.sizes().vec());
      out.kind = kFlopTensor;
      out.dtype = fulmen_dtype_of(t.scalar_type());
      out.shape = dims.data();
      out.ndim = dims.size();
    }
  } else if (v.isBool()) {
    out.kind = kFlopBool;
    out.integer = v.toBool() ? 1 : 0;
  } else if (v.isInt()) {
    out.kind = kFlopInt;
    out.integer = v.toInt();
  } else if (v.isDouble()) {
    out.kind = kFlopFloat;
    out.number = v.toDouble();
  } else if (v.isString()) {
    out.kind = kFlopString;
    out.text = keep.texts.emplace_back(v.toStringRef()).c_str();
  } else if (v.isIntList()) {
    auto& xs = keep.ints.emplace_back(v.toIntVector());
    out.kind = kFlopInts;
    out.ints = xs.data();
    out.num_ints = xs.size();
  } else if ((v.isList() || v.isTuple()) && depth < kMaxViewDepth) {
    std::vector<fulmen_cxx_flop_value> items;
    if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) items.push_back(view(e, keep, depth + 1));
    } else {
      for (const c10::IValue& e : v.toTupleRef().elements()) items.push_back(view(e, keep, depth + 1));
    }
    auto& stored = keep.lists.emplace_back(std::move(items));
    out.kind = kFlopList;
    out.items = stored.data();
    out.num_items = stored.size();
  }
  return out;
}

// Calls the host's formula for operator `op`: its FLOPs, or nothing after
// recording its failure in the session (the first one is reported).
std::optional<uint64_t> host_count(Session& s, const HostFormula& f, const std::string& op,
                                   const std::vector<c10::IValue>& in, const std::vector<c10::IValue>& out) {
  Views keep;
  std::vector<fulmen_cxx_flop_value> ins, outs;
  for (const c10::IValue& v : in) ins.push_back(view(v, keep, 0));
  for (const c10::IValue& v : out) outs.push_back(view(v, keep, 0));
  char err[1024] = {0};
  uint64_t flops = 0;
  int code = f.fn(f.ctx, op.c_str(), ins.data(), ins.size(), outs.data(), outs.size(), &flops, err, sizeof err);
  if (code == 0) return flops;
  err[sizeof err - 1] = 0;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.formula_code == 0) {
    s.formula_code = code;
    s.formula_error = err;
  }
  return std::nullopt;
}

// The OpInfo of the operator `fn` calls; a user scope decomposes.
OpInfo op_info(Session& s, const at::RecordFunction& fn) {
  auto op = fn.operator_name();
  if (!op) return OpInfo{};  // not an operator (a user scope)
  std::string key = op->name + "." + op->overload_name;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.ops.find(key);
    if (it != s.ops.end()) return it->second;
  }
  OpInfo info;
  auto handle = c10::Dispatcher::singleton().findOp(*op);
  info.decomposes = handle && handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
  if (handle && handle->hasSchema()) {
    info.arguments = handle->schema().arguments().size();
    info.returns = handle->schema().returns().size();
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.ops.emplace(key, info);
  return info;
}

// The last `n` values of `all` (all of them when it holds fewer).
std::vector<c10::IValue> last(c10::ArrayRef<c10::IValue> all, size_t n) {
  size_t from = all.size() > n ? all.size() - n : 0;
  return std::vector<c10::IValue>(all.begin() + from, all.end());
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  auto ctx = std::make_unique<OpContext>();
  try {
    Session* session = current_session();
    if (session == nullptr) return ctx;
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
      // An autograd node: what runs in it counts for its forward's modules.
      size_t id = 0;
      {
        std::lock_guard<std::mutex> lock(session->mu);
        auto it = session->node_sets.find({fn.forwardThreadId(), fn.seqNr()});
        if (it != session->node_sets.end()) id = it->second;
      }
      t_backward.push_back(id);
      ctx->backward_pushed = true;
      return ctx;
    }
    bool hidden = false;
    for (bool opaque : t_open) hidden = hidden || opaque;
    std::string name = fn.name();
    // The session's formulas do not change while it runs: read unlocked.
    auto host = session->formulas.find(name);
    bool registered = host != session->formulas.end();
    OpInfo info = op_info(*session, fn);
    // The mode decomposes an operator before it looks for its formula.
    bool counted = registered ? !info.decomposes : has_formula(name);
    t_open.push_back(counted || !info.decomposes);
    ctx->pushed = true;
    bool makes_node = fn.seqNr() >= 0;
    if ((counted && !hidden) || makes_node) {
      std::vector<std::string> names = t_backward.empty() ? open_modules() : std::vector<std::string>{};
      std::lock_guard<std::mutex> lock(session->mu);
      ctx->modules = t_backward.empty() ? intern(*session, std::move(names)) : t_backward.back();
      // The last operator to start with a sequence number is the one whose
      // node takes it (or one inside it).
      if (makes_node) session->node_sets[{fn.threadId(), fn.seqNr()}] = ctx->modules;
    }
    if (counted && !hidden) {
      ctx->counted = true;
      if (registered) ctx->host = host->second;
      ctx->name = std::move(name);
      ctx->inputs = last(fn.inputs(), info.arguments);
      ctx->returns = info.returns;
      ctx->unwinding = std::uncaught_exceptions();
    }
  } catch (...) {
    ctx->counted = false;
  }
  return ctx;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* c) {
  auto* ctx = static_cast<OpContext*>(c);
  if (ctx != nullptr && ctx->pushed && !t_open.empty()) t_open.pop_back();
  if (ctx != nullptr && ctx->backward_pushed && !t_backward.empty()) t_backward.pop_back();
  // An operator that failed (it unwinds, or returns nothing though its
  // schema has results) is not counted, as the mode counts only what ran;
  // one whose schema returns nothing (`_fused_adam_`) is.
  if (ctx == nullptr || !ctx->counted) return;
  if (std::uncaught_exceptions() > ctx->unwinding || (fn.outputs().empty() && ctx->returns != 0)) return;
  try {
    Session* session = current_session();
    if (session == nullptr) return;
    Count n;
    {
      // The formula may read a jagged batch's offsets, a host's may call
      // libtorch: not observed.
      at::RecordFunctionGuard off(false);
      if (ctx->host) {
        std::optional<uint64_t> counted =
            host_count(*session, *ctx->host, ctx->name, ctx->inputs, last(fn.outputs(), ctx->returns));
        if (!counted) return;
        n = Count::of(*counted);
      } else {
        n = formula(ctx->name, ctx->inputs, last(fn.outputs(), ctx->returns));
      }
    }
    std::lock_guard<std::mutex> lock(session->mu);
    auto add = [&](uint64_t& slot, const std::string& module) {
      session->first_added.emplace(std::make_pair(module, ctx->name), session->first_added.size());
      if (n.overflow || __builtin_add_overflow(slot, n.value, &slot)) session->overflow = true;
    };
    add(session->by_op[ctx->name], std::string());
    if (ctx->modules < session->module_sets.size()) {
      for (const std::string& module : session->module_sets[ctx->modules]) {
        add(session->by_module[module][ctx->name], module);
      }
    }
  } catch (...) {
    // Counting never fails the operator.
  }
}

}  // namespace

extern "C" {

// Starts counting the FLOPs of the operators this thread runs (and the
// backward passes it starts); an error while this thread measures already.
int fulmen_cxx_flops_begin(char* err, size_t err_len) {
  FULMEN_CXX_TRY
  if (current_session() != nullptr) {
    throw fulmen_cxx::StateError("FLOPs are being measured already on this thread (measurements do not nest)");
  }
  auto* stale = dynamic_cast<Session*>(c10::ThreadLocalDebugInfo::get(kSession));
  if (stale != nullptr) {
    // An earlier measurement whose pop failed (see fulmen_cxx_flops_end).
    try {
      c10::ThreadLocalDebugInfo::_pop(kSession);
    } catch (const c10::Error&) {
      throw std::runtime_error(
          "an earlier FLOP measurement on this thread could not end: libtorch state the measured code left "
          "(a profiler started and not stopped) still lies above it");
    }
  }
  auto session = std::make_shared<Session>();
  {
    std::lock_guard<std::mutex> lock(g_formulas_mu);
    session->formulas = registry();
  }
  c10::ThreadLocalDebugInfo::_push(kSession, session);
  try {
    session->handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(on_start, on_end)
            .needsInputs(true)
            .needsOutputs(true)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } catch (...) {
    c10::ThreadLocalDebugInfo::_pop(kSession);
    throw;
  }
  // TorchScript's optimized graphs lose the module hierarchy (and run the
  // operators torch's eager mode runs anyway): off on this thread meanwhile.
  session->graph_optimize = torch::jit::getGraphExecutorOptimize();
  torch::jit::setGraphExecutorOptimize(false);
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends the measurement fulmen_cxx_flops_begin started on this thread:
// calls on_count(ctx, NULL, operator, flops) for every operator counted,
// then on_count(ctx, module, operator, flops) for every module's (each
// module's operators in the order they were first counted), and sets
// *overflow when a count left 64 bits. When a host formula failed, counts
// nothing and sets *formula_code to its error code (else 0), its message in
// `formula_err` (`formula_err_len` bytes, NUL-terminated).
int fulmen_cxx_flops_end(void (*on_count)(void*, const char*, const char*, uint64_t), void* ctx, int* overflow,
                         int* formula_code, char* formula_err, size_t formula_err_len, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Session* open = current_session();
  if (open == nullptr) {
    throw std::runtime_error("no FLOP measurement is under way on this thread");
  }
  // Nothing more is counted, even when the pop below fails.
  at::removeCallback(open->handle);
  open->closed.store(true);
  torch::jit::setGraphExecutorOptimize(open->graph_optimize);
  // Fails when the measured code left libtorch debug information of its
  // own above the measurement's (a profiler started and not stopped).
  auto session = std::dynamic_pointer_cast<Session>(c10::ThreadLocalDebugInfo::_pop(kSession));
  if (!session) {
    throw std::runtime_error("the FLOP measurement's state was replaced by the measured code");
  }
  std::lock_guard<std::mutex> lock(session->mu);
  *overflow = session->overflow ? 1 : 0;
  *formula_code = session->formula_code;
  if (session->formula_code != 0) {
    fulmen_cxx::write_message(session->formula_error, formula_err, formula_err_len);
    return FULMEN_CXX_OK;
  }
  // Each module's operators in the order they were first counted.
  auto in_order = [&](const std::string& module, const std::map<std::string, uint64_t>& ops) {
    std::vector<std::pair<uint64_t, const std::string*>> order;
    for (const auto& [name, n] : ops) order.emplace_back(session->first_added[{module, name}], &name);
    std::sort(order.begin(), order.end());
    for (const auto& [_, name] : order) {
      on_count(ctx, module.empty() ? nullptr : module.c_str(), name->c_str(), ops.at(*name));
    }
  };
  in_order(std::string(), session->by_op);
  for (const auto& [module, ops] : session->by_module) in_order(module, ops);
  FULMEN_CXX_CATCH(err, err_len)
}

// Registers the host formula `fn` (called with `ctx`) for operator `op`
// ("aten::gelu"), for the measurements that begin from now on. Owns `ctx`
// on success only, and calls `drop(ctx)` once when the formula is
// unregistered and no measurement holds it any more, on whichever thread
// lets go of it last (autograd's threads included). An error when `op` is
// no operator of libtorch's dispatcher, when every overload of it that is
// not an `out=` variant decomposes (torch's mode would never count it), or
// when a formula is
// registered for it already.
int fulmen_cxx_flops_register(const char* op, fulmen_cxx_flop_formula_fn fn, void* ctx, void (*drop)(void*),
                              char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::string name(op);
  // Whether the overloads that return new tensors decompose, and those
  // that write into `out` ones (which models rarely call).
  bool found = false, functional_decompose = true, out_decompose = true, has_functional = false;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& o : dispatcher.getAllOpNames()) {
    if (o.name != name) continue;
    found = true;
    auto handle = dispatcher.findOp(o);
    // An `out=` variant writes into a keyword-only argument.
    bool out_variant = false;
    if (handle && handle->hasSchema()) {
      for (const c10::Argument& a : handle->schema().arguments()) {
        out_variant = out_variant || (a.kwarg_only() && a.alias_info() != nullptr && a.alias_info()->isWrite());
      }
    }
    bool d = handle && handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    has_functional = has_functional || !out_variant;
    (out_variant ? out_decompose : functional_decompose) &= d;
  }
  bool all_decompose = has_functional ? functional_decompose : out_decompose;
  if (!found) {
    throw fulmen_cxx::ArgumentError("no operator " + name +
                             " is registered with libtorch's dispatcher (a custom operator's library must be "
                             "loaded before its formula is registered)");
  }
  if (all_decompose) {
    throw fulmen_cxx::ArgumentError(name +
                             " decomposes into other operators (a CompositeImplicitAutograd kernel) before FLOP "
                             "counting sees it, as in torch's FlopCounterMode, so its formula would never be "
                             "called: register formulas for the operators it runs");
  }
  // `drop` is armed once the registry holds the formula: until then `ctx`
  // stays the caller's.
  auto formula = std::make_shared<HostFormula>(fn, ctx, nullptr);
  std::lock_guard<std::mutex> lock(g_formulas_mu);
  auto [at, inserted] = registry().emplace(name, formula);
  if (!inserted) {
    throw fulmen_cxx::StateError("a FLOP formula for " + name + " is registered already: unregister it first");
  }
  formula->drop = drop;
  FULMEN_CXX_CATCH(err, err_len)
}

// Unregisters the host formula of operator `op`, if any (*removed says
// whether there was one). Measurements under way keep it to their end.
int fulmen_cxx_flops_unregister(const char* op, int* removed, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::shared_ptr<HostFormula> gone;
  {
    std::lock_guard<std::mutex> lock(g_formulas_mu);
    auto at = registry().find(op);
    if (at != registry().end()) {
      gone = std::move(at->second);
      registry().erase(at);
    }
  }
  *removed = gone ? 1 : 0;
  // `gone` is dropped here, outside the lock: its drop function may call
  // back into the registry.
  FULMEN_CXX_CATCH(err, err_len)
}

// Opens the scope of module `name` on this thread while it measures: the
// root's class when no scope is open, else a child's path below the
// innermost scope.
int fulmen_cxx_flops_scope_push(const char* name, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::string full = t_scopes.empty() ? std::string(name) : joined(t_scopes.back(), name);
  t_scopes.push_back(std::move(full));
  FULMEN_CXX_CATCH(err, err_len)
}

// Closes the innermost scope fulmen_cxx_flops_scope_push opened.
void fulmen_cxx_flops_scope_pop(void) noexcept {
  if (!t_scopes.empty()) t_scopes.pop_back();
}

}  // extern "C"

namespace fulmen_cxx {

bool flops_measuring() { return current_session() != nullptr; }

const std::vector<std::string>* flops_program_modules(const std::vector<std::string>* paths) {
  const std::vector<std::string>* old = t_program;
  t_program = paths;
  return old;
}

const void* flops_script_root(const void* module) {
  const torch::jit::Module* old = t_script_root;
  t_script_root = static_cast<const torch::jit::Module*>(module);
  return old;
}

FlopThreadState flops_thread_state() {
  return FlopThreadState{t_scopes, t_backward, torch::jit::getGraphExecutorOptimize()};
}

void set_flops_thread_state(const FlopThreadState& state) {
  t_scopes = state.scopes;
  t_backward = state.backward;
  torch::jit::setGraphExecutorOptimize(state.graph_optimize);
}

}  // namespace fulmen_cxx

// torch.export programs, for src/nn/exported/: an instruction list over
// ATen operators, built node by node from the graph src/nn/exported/
// parses, and run through the dispatcher (autograd included) on a table of
// value slots.
//
// A program is a heap `Program` handed out as `void*` by
// fulmen_cxx_ep_new and freed by fulmen_cxx_ep_free. Building: for each
// node, fulmen_cxx_ep_op (or fulmen_cxx_ep_builtin), its arguments with
// fulmen_cxx_ep_arg, its results with fulmen_cxx_ep_out, then
// fulmen_cxx_ep_end, which checks the arguments against the operator's
// schema and fills defaults. fulmen_cxx_ep_outputs names the slots a run
// returns. A built program is read-only: runs may share it.
#include "fulmen_cxx.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

extern "C" {
// One argument of a node, as src/shim/exported.rs lays it out. `kind`
// says which fields count (see ArgKind).
struct fulmen_cxx_ep_arg {
  int32_t kind;
  int64_t i;
  double f;
  const char* s;
  size_t s_len;
  const int64_t* ints;
  const double* floats;
  size_t n;
};

// A call of the run's hook before one instruction (src/shim/exported.rs
// `EpEvent`): the slots whose tensors it is handed.
struct fulmen_cxx_ep_event {
  int64_t before;
  const int64_t* slots;
  size_t n_slots;
};

// The run's hook: event index, the tensors (owned by the hook), their count.
typedef int (*fulmen_cxx_ep_hook)(void* ctx, size_t event, void** tensors, size_t n);
}

namespace {

// The argument kinds of src/shim/exported.rs `ArgKind`.
enum ArgKind : int32_t {
  kNone = 0,
  kSlot = 1,          // i: a slot (a tensor, or a symbolic number)
  kInt = 2,           // i
  kFloat = 3,         // f
  kBool = 4,          // i (0 or 1)
  kString = 5,        // s, s_len
  kInts = 6,          // ints[0..n]
  kFloats = 7,        // floats[0..n]
  kBools = 8,         // ints[0..n] (0 or 1)
  kTensors = 9,       // ints[0..n]: slots
  kOptTensors = 10,   // ints[0..n]: slots, -1 for None
  kSymInts = 11,      // ints[0..2n]: pairs (is a slot, slot or value)
  kDtype = 12,        // i: a c10::ScalarType
  kLayout = 13,       // i: a c10::Layout
  kMemoryFormat = 14, // i: a c10::MemoryFormat
  kDevice = 15,       // the device the program runs on
};

// Python's operators on symbolic numbers, then the steps of an inlined
// subgraph: set the grad mode (saving the old one), restore it, pass a
// value on (src/nn/exported/graph.rs `target` and SET_GRAD...).
enum Builtin : int32_t {
  kAdd = 0, kSub, kMul, kFloorDiv, kTrueDiv, kMod, kNeg, kEq, kNe, kLt, kLe, kGt, kGe, kMax, kMin, kNot,
  kSetGrad, kRestoreGrad, kIdentity,
  kBuiltinCount
};

// How many arguments and results a builtin takes.
size_t builtin_arity(int32_t code) {
  switch (code) {
    case kNeg: case kNot: case kSetGrad: case kIdentity: return 1;
    case kRestoreGrad: return 0;
    default: return 2;
  }
}

size_t builtin_results(int32_t code) { return code == kSetGrad || code == kRestoreGrad ? 0 : 1; }

// How one argument is made at run time.
struct Arg {
  enum Mode { kConst, kFromSlot, kSlotList, kOptSlotList, kSymIntList, kRunDevice } mode = kConst;
  c10::IValue constant;
  int64_t slot = -1;
  std::vector<int64_t> slots;       // lists; for kSymIntList the values
  std::vector<bool> from_slot;      // kSymIntList: which values are slots
  bool wrap_number = false;         // a number where the schema wants a Tensor
  int64_t enum_limit = 0;           // > 0: an int that must lie in [0, enum_limit)
  bool given = false;
};

// Where one result goes: nowhere, a slot, or the items of a list into slots.
struct Out {
  int kind = 0;  // 0 drop, 1 slot, 2 list into slots
  std::vector<int64_t> slots;
};

struct Instr {
  std::optional<c10::OperatorHandle> op;
  int32_t builtin = -1;
  std::string name;
  std::vector<Arg> args;
  std::vector<Out> outs;
  std::vector<int64_t> drops;
  size_t next_positional = 0;
  // The paths of the modules whose forward the node ran in (its
  // nn_module_stack), outermost first: for FLOP counts by module.
  std::vector<std::string> modules;
};

struct Program {
  int64_t n_slots = 0;
  size_t n_inputs = 0;
  std::vector<Instr> instrs;
  std::vector<int64_t> outputs;
  bool open = false;  // a node is being built
};

Program& program(void* p) { return *static_cast<Program*>(p); }
const Program& cprogram(const void* p) { return *static_cast<const Program*>(p); }

void check_slot(const Program& p, int64_t slot) {
  if (slot < 0 || slot >= p.n_slots) {
    throw std::out_of_range("slot " + std::to_string(slot) + " outside 0.." + std::to_string(p.n_slots));
  }
}

Instr& current(Program& p) {
  if (!p.open || p.instrs.empty()) {
    throw std::logic_error("no node is being built");
  }
  return p.instrs.back();
}

// For a ScalarType, Layout or MemoryFormat argument (optional or not), the
// number of valid values; 0 for any other type. An int outside them would
// reach libtorch as an invalid enum.
int64_t enum_limit(const c10::Argument& a) {
  c10::TypePtr t = a.real_type();
  if (auto opt = t->cast<c10::OptionalType>()) {
    t = opt->getElementType();
  }
  switch (t->kind()) {
    case c10::TypeKind::ScalarTypeType: return static_cast<int64_t>(c10::ScalarType::NumOptions);
    case c10::TypeKind::LayoutType: return static_cast<int64_t>(c10::Layout::NumOptions);
    case c10::TypeKind::MemoryFormatType: return static_cast<int64_t>(c10::MemoryFormat::NumOptions);
    default: return 0;
  }
}

void check_enum(const c10::IValue& v, int64_t limit, const std::string& what) {
  if (limit > 0 && v.isInt() && (v.toInt() < 0 || v.toInt() >= limit)) {
    throw std::invalid_argument(what + ": " + std::to_string(v.toInt()) + " is not a valid dtype, layout or memory format");
  }
}

bool schema_wants_tensor(const c10::Argument& a) {
  const c10::TypePtr& t = a.real_type();
  if (t->kind() == c10::TypeKind::TensorType) {
    return true;
  }
  if (auto opt = t->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::TensorType;
  }
  return false;
}

// A Python number as PyTorch passes it where a Tensor is expected: a
// zero-dimensional "wrapped number", which type promotion treats as a scalar.
at::Tensor wrapped_number(const c10::IValue& v) {
  at::Tensor t;
  if (v.isInt()) {
    t = c10::scalar_to_tensor(c10::Scalar(v.toInt()));
  } else if (v.isDouble()) {
    t = c10::scalar_to_tensor(c10::Scalar(v.toDouble()));
  } else if (v.isBool()) {
    t = c10::scalar_to_tensor(c10::Scalar(v.toBool()));
  } else {
    return v.toTensor();
  }
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

Arg make_arg(const Program& p, const fulmen_cxx_ep_arg& a) {
  Arg out;
  out.given = true;
  auto list_of = [&](size_t n) {
    if (n > 0 && a.ints == nullptr) {
      throw std::invalid_argument("a list argument without items");
    }
    return std::vector<int64_t>(a.ints, a.ints + n);
  };
  switch (a.kind) {
    case kNone: out.constant = c10::IValue(); break;
    case kSlot:
      check_slot(p, a.i);
      out.mode = Arg::kFromSlot;
      out.slot = a.i;
      break;
    case kInt: out.constant = c10::IValue(a.i); break;
    case kFloat: out.constant = c10::IValue(a.f); break;
    case kBool: out.constant = c10::IValue(a.i != 0); break;
    case kString: out.constant = c10::IValue(std::string(a.s == nullptr ? "" : a.s, a.s == nullptr ? 0 : a.s_len)); break;
    case kInts: out.constant = c10::IValue(list_of(a.n)); break;
    case kFloats: {
      if (a.n > 0 && a.floats == nullptr) {
        throw std::invalid_argument("a list argument without items");
      }
      out.constant = c10::IValue(std::vector<double>(a.floats, a.floats + a.n));
      break;
    }
    case kBools: {
      c10::List<bool> items;
      for (int64_t v : list_of(a.n)) {
        items.push_back(v != 0);
      }
      out.constant = c10::IValue(items);
      break;
    }
    case kTensors:
    case kOptTensors: {
      out.mode = a.kind == kTensors ? Arg::kSlotList : Arg::kOptSlotList;
      out.slots = list_of(a.n);
      for (int64_t s : out.slots) {
        if (!(a.kind == kOptTensors && s == -1)) {
          check_slot(p, s);
        }
      }
      break;
    }
    case kSymInts: {
      std::vector<int64_t> pairs = list_of(a.n * 2);
      out.mode = Arg::kSymIntList;
      for (size_t k = 0; k < a.n; ++k) {
        bool slot = pairs[2 * k] != 0;
        if (slot) {
          check_slot(p, pairs[2 * k + 1]);
        }
        out.from_slot.push_back(slot);
        out.slots.push_back(pairs[2 * k + 1]);
      }
      break;
    }
    case kDtype: out.constant = c10::IValue(static_cast<c10::ScalarType>(a.i)); break;
    case kLayout: out.constant = c10::IValue(static_cast<c10::Layout>(a.i)); break;
    case kMemoryFormat: out.constant = c10::IValue(static_cast<c10::MemoryFormat>(a.i)); break;
    case kDevice: out.mode = Arg::kRunDevice; break;
    default: throw std::invalid_argument("unknown argument kind " + std::to_string(a.kind));
  }
  return out;
}

const c10::IValue& read_slot(const std::vector<c10::IValue>& slots, int64_t s, const Instr& in) {
  const c10::IValue& v = slots[static_cast<size_t>(s)];
  if (v.isNone()) {
    // Only reached when a graph uses a value after its last recorded use.
    throw std::logic_error(in.name + ": an input slot is empty");
  }
  return v;
}

c10::IValue materialise(const Arg& a, const std::vector<c10::IValue>& slots, const Instr& in, c10::Device device) {
  switch (a.mode) {
    case Arg::kConst: return a.wrap_number ? c10::IValue(wrapped_number(a.constant)) : a.constant;
    case Arg::kFromSlot: {
      const c10::IValue& v = read_slot(slots, a.slot, in);
      check_enum(v, a.enum_limit, in.name);
      return a.wrap_number && !v.isTensor() ? c10::IValue(wrapped_number(v)) : v;
    }
    case Arg::kSlotList: {
      std::vector<at::Tensor> items;
      items.reserve(a.slots.size());
      for (int64_t s : a.slots) {
        items.push_back(read_slot(slots, s, in).toTensor());
      }
      return c10::IValue(items);
    }
    case Arg::kOptSlotList: {
      c10::List<std::optional<at::Tensor>> items;
      for (int64_t s : a.slots) {
        if (s == -1) {
          items.push_back(std::nullopt);
        } else {
          items.push_back(read_slot(slots, s, in).toTensor());
        }
      }
      return c10::IValue(items);
    }
    case Arg::kSymIntList: {
      std::vector<int64_t> items;
      items.reserve(a.slots.size());
      for (size_t k = 0; k < a.slots.size(); ++k) {
        items.push_back(a.from_slot[k] ? read_slot(slots, a.slots[k], in).toInt() : a.slots[k]);
      }
      return c10::IValue(items);
    }
    case Arg::kRunDevice: return c10::IValue(device);
  }
  throw std::logic_error("unknown argument mode");
}

double as_double(const c10::IValue& v) {
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isBool()) return v.toBool() ? 1.0 : 0.0;
  return v.toDouble();
}

[[noreturn]] void overflow() { throw std::overflow_error("integer overflow"); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw std::domain_error("integer division by zero");
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Python's operator `code` on the numbers in `args`.
c10::IValue run_builtin(int32_t code, const std::vector<c10::IValue>& args) {
  if (code == kNeg || code == kNot) {
    if (args.size() != 1) throw std::invalid_argument("a unary operator takes one argument");
    const c10::IValue& a = args[0];
    if (code == kNot) return c10::IValue(!(as_double(a) != 0.0));
    return a.isInt() ? c10::IValue(checked_sub(0, a.toInt())) : c10::IValue(-as_double(a));
  }
  if (args.size() != 2) throw std::invalid_argument("a binary operator takes two arguments");
  const c10::IValue& a = args[0];
  const c10::IValue& b = args[1];
  bool ints = (a.isInt() || a.isBool()) && (b.isInt() || b.isBool());
  auto as_int = [](const c10::IValue& v) { return v.isBool() ? static_cast<int64_t>(v.toBool()) : v.toInt(); };
  double x = as_double(a), y = as_double(b);
  switch (code) {
    case kAdd: return ints ? c10::IValue(checked_add(as_int(a), as_int(b))) : c10::IValue(x + y);
    case kSub: return ints ? c10::IValue(checked_sub(as_int(a), as_int(b))) : c10::IValue(x - y);
    case kMul: return ints ? c10::IValue(checked_mul(as_int(a), as_int(b))) : c10::IValue(x * y);
    case kFloorDiv: return ints ? c10::IValue(floor_div(as_int(a), as_int(b))) : c10::IValue(std::floor(x / y));
    case kTrueDiv: return c10::IValue(x / y);
    case kMod: {
      if (ints) {
        int64_t d = as_int(b);
        if (d == -1) return c10::IValue(static_cast<int64_t>(0));
        return c10::IValue(as_int(a) - floor_div(as_int(a), d) * d);
      }
      return c10::IValue(x - std::floor(x / y) * y);
    }
    case kEq: return c10::IValue(x == y);
    case kNe: return c10::IValue(x != y);
    case kLt: return c10::IValue(x < y);
    case kLe: return c10::IValue(x <= y);
    case kGt: return c10::IValue(x > y);
    case kGe: return c10::IValue(x >= y);
    case kMax: return ints ? c10::IValue(std::max(as_int(a), as_int(b))) : c10::IValue(std::max(x, y));
    case kMin: return ints ? c10::IValue(std::min(as_int(a), as_int(b))) : c10::IValue(std::min(x, y));
    default: throw std::invalid_argument("unknown operator " + std::to_string(code));
  }
}

void store_outputs(const Instr& in, std::vector<c10::IValue>& stack, std::vector<c10::IValue>& slots) {
  if (stack.size() < in.outs.size()) {
    throw std::runtime_error(in.name + " returned " + std::to_string(stack.size()) + " values, the graph names " +
                             std::to_string(in.outs.size()));
  }
  for (size_t k = 0; k < in.outs.size(); ++k) {
    const Out& o = in.outs[k];
    if (o.kind == 1) {
      slots[static_cast<size_t>(o.slots[0])] = std::move(stack[k]);
    } else if (o.kind == 2) {
      auto items = stack[k].toList();
      if (items.size() != o.slots.size()) {
        throw std::runtime_error(in.name + " returned a list of " + std::to_string(items.size()) +
                                 " values, the graph names " + std::to_string(o.slots.size()));
      }
      for (size_t j = 0; j < o.slots.size(); ++j) {
        if (o.slots[j] >= 0) {
          slots[static_cast<size_t>(o.slots[j])] = items.get(j);
        }
      }
    }
  }
}

}  // namespace

extern "C" {

int fulmen_cxx_ep_new(int64_t n_slots, size_t n_inputs, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  if (n_slots < 0 || static_cast<uint64_t>(n_slots) < n_inputs) {
    throw std::invalid_argument("fewer slots than inputs");
  }
  auto p = std::make_unique<Program>();
  p->n_slots = n_slots;
  p->n_inputs = n_inputs;
  *out = p.release();
  FULMEN_CXX_CATCH(err, err_len)
}

void fulmen_cxx_ep_free(void* p) { delete static_cast<Program*>(p); }

// Starts a node calling the ATen operator `name` (e.g. "aten::linear") with
// overload `overload` ("" for the default one). Refused when this process
// has no such operator.
int fulmen_cxx_ep_op(void* prog, const char* name, const char* overload, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  if (p.open) {
    throw std::logic_error("the previous node was not ended");
  }
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  std::string full = std::string(name) + (overload[0] != '\0' ? std::string(".") + overload : std::string());
  if (!op) {
    throw std::invalid_argument("no operator " + full +
                                " in this process (a custom operator not registered here, or one only Python has)");
  }
  for (const auto& a : op->schema().arguments()) {
    if (a.real_type()->kind() == c10::TypeKind::StorageType) {
      throw std::invalid_argument("operator " + full + " takes a raw storage, which a program may not reach");
    }
  }
  Instr in;
  in.op = *op;
  in.name = full;
  in.args.resize(op->schema().arguments().size());
  p.instrs.push_back(std::move(in));
  p.open = true;
  FULMEN_CXX_CATCH(err, err_len)
}

// Starts a node applying Python's operator `code` (a `Builtin`) to numbers.
int fulmen_cxx_ep_builtin(void* prog, int32_t code, const char* name, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  if (p.open) {
    throw std::logic_error("the previous node was not ended");
  }
  if (code < 0 || code >= kBuiltinCount) {
    throw std::invalid_argument("unknown operator code " + std::to_string(code));
  }
  Instr in;
  in.builtin = code;
  in.name = name;
  p.instrs.push_back(std::move(in));
  p.open = true;
  FULMEN_CXX_CATCH(err, err_len)
}

// Adds an argument to the node being built: the next positional one when
// `keyword` is NULL, else the one the schema names `keyword`.
int fulmen_cxx_ep_arg(void* prog, const char* keyword, const fulmen_cxx_ep_arg* a, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  Instr& in = current(p);
  Arg arg = make_arg(p, *a);
  if (!in.op) {
    if (keyword != nullptr) {
      throw std::invalid_argument(in.name + " takes no keyword arguments");
    }
    in.args.push_back(std::move(arg));
    return FULMEN_CXX_OK;
  }
  const auto& schema = in.op->schema();
  size_t at = in.next_positional;
  if (keyword != nullptr) {
    auto found = schema.argumentIndexWithName(keyword);
    if (!found) {
      throw std::invalid_argument(in.name + " has no argument named " + keyword);
    }
    at = *found;
  } else {
    in.next_positional += 1;
  }
  if (at >= in.args.size()) {
    throw std::invalid_argument(in.name + " takes " + std::to_string(in.args.size()) + " arguments, given more");
  }
  if (in.args[at].given) {
    throw std::invalid_argument(in.name + ": argument " + schema.arguments()[at].name() + " given twice");
  }
  in.args[at] = std::move(arg);
  FULMEN_CXX_CATCH(err, err_len)
}

// Names where the node's result `index` goes: `kind` 0 nowhere, 1 the slot
// slots[0], 2 the items of a returned list into slots[0..n] (-1: dropped).
int fulmen_cxx_ep_out(void* prog, int32_t kind, const int64_t* slots, size_t n, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  Instr& in = current(p);
  Out o;
  o.kind = kind;
  if (kind == 1 && n != 1) {
    throw std::invalid_argument("a single result names one slot");
  }
  if (kind < 0 || kind > 2) {
    throw std::invalid_argument("unknown result kind " + std::to_string(kind));
  }
  if (kind != 0) {
    o.slots.assign(slots, slots + n);
    for (int64_t s : o.slots) {
      if (!(kind == 2 && s == -1)) {
        check_slot(p, s);
      }
      if (s >= 0 && static_cast<size_t>(s) < p.n_inputs) {
        throw std::invalid_argument(in.name + " writes over a graph input");
      }
    }
  }
  in.outs.push_back(std::move(o));
  FULMEN_CXX_CATCH(err, err_len)
}

// Ends the node being built: arguments left out take the schema's default
// (None for an optional one; a missing required one is refused), numbers
// given for Tensor arguments become wrapped numbers, and the results must
// fit the schema's. `drops` are the slots no later node reads.
int fulmen_cxx_ep_end(void* prog, const int64_t* drops, size_t n_drops, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  Instr& in = current(p);
  for (size_t k = 0; k < n_drops; ++k) {
    check_slot(p, drops[k]);
    if (static_cast<size_t>(drops[k]) >= p.n_inputs) {
      in.drops.push_back(drops[k]);
    }
  }
  if (in.op) {
    const auto& schema = in.op->schema();
    const auto& params = schema.arguments();
    for (size_t k = 0; k < params.size(); ++k) {
      Arg& a = in.args[k];
      if (!a.given) {
        if (params[k].default_value()) {
          a.constant = *params[k].default_value();
        } else if (params[k].real_type()->kind() == c10::TypeKind::OptionalType) {
          a.constant = c10::IValue();
        } else {
          throw std::invalid_argument(in.name + ": required argument " + params[k].name() + " not given");
        }
        a.given = true;
      }
      bool number = a.mode == Arg::kFromSlot ||
                    (a.mode == Arg::kConst && (a.constant.isInt() || a.constant.isDouble() || a.constant.isBool()));
      a.wrap_number = number && schema_wants_tensor(params[k]);
      a.enum_limit = enum_limit(params[k]);
      if (a.mode == Arg::kConst) {
        check_enum(a.constant, a.enum_limit, in.name + " argument " + params[k].name());
      }
    }
    const auto& returns = schema.returns();
    if (in.outs.size() > returns.size()) {
      throw std::invalid_argument(in.name + " returns " + std::to_string(returns.size()) + " values, the graph names " +
                                  std::to_string(in.outs.size()));
    }
  } else {
    size_t want = builtin_arity(in.builtin);
    if (in.args.size() != want) {
      throw std::invalid_argument(in.name + " takes " + std::to_string(want) + " arguments, given " +
                                  std::to_string(in.args.size()));
    }
    size_t results = builtin_results(in.builtin);
    if (in.outs.size() != results || (results == 1 && in.outs[0].kind != 1)) {
      throw std::invalid_argument(in.name + " returns " + std::to_string(results) + " values");
    }
  }
  p.open = false;
  FULMEN_CXX_CATCH(err, err_len)
}

// The slots a run returns, in order.
int fulmen_cxx_ep_outputs(void* prog, const int64_t* slots, size_t n, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  if (p.open) {
    throw std::logic_error("the last node was not ended");
  }
  for (size_t k = 0; k < n; ++k) {
    check_slot(p, slots[k]);
  }
  p.outputs.assign(slots, slots + n);
  FULMEN_CXX_CATCH(err, err_len)
}

// Runs the program on `inputs[0..n_inputs]` (borrowed `at::Tensor*`, in the
// graph's input order) on the device (type, index) of
// src/nn/torchscript.rs `device_code`; writes one new `c10::IValue*` per
// output into `outputs` (the caller frees them with fulmen_cxx_value_free).
// `events[0..n_events]` (sorted by `before`, each at most the number of
// instructions) call `hook(hook_ctx, k, tensors, n)` before instruction
// `before` of event k (after the last one for the number of
// instructions), with a new `at::Tensor*` for each of its slots holding a
// tensor (NULL for the others), which the hook owns; a hook returning
// non-zero fails the run (the hook keeps its own error).
int fulmen_cxx_ep_run(const void* prog, const void* const* inputs, size_t n_inputs, int device_type,
                      int device_index, const fulmen_cxx_ep_event* events, size_t n_events, fulmen_cxx_ep_hook hook,
                      void* hook_ctx, void** outputs, size_t n_outputs, char* err, size_t err_len) {
  std::vector<std::unique_ptr<c10::IValue>> made;
  FULMEN_CXX_TRY
  const Program& p = cprogram(prog);
  if (n_inputs != p.n_inputs || n_outputs != p.outputs.size()) {
    throw std::invalid_argument("the program takes " + std::to_string(p.n_inputs) + " inputs and returns " +
                                std::to_string(p.outputs.size()) + " values");
  }
  if (n_events > 0 && hook == nullptr) {
    throw std::invalid_argument("events without a hook");
  }
  for (size_t k = 0; k < n_events; ++k) {
    const fulmen_cxx_ep_event& e = events[k];
    if (e.before < 0 || static_cast<size_t>(e.before) > p.instrs.size() ||
        (k > 0 && e.before < events[k - 1].before) || (e.n_slots > 0 && e.slots == nullptr)) {
      throw std::invalid_argument("event " + std::to_string(k) + " is out of order or out of range");
    }
    for (size_t j = 0; j < e.n_slots; ++j) {
      if (e.slots[j] < 0 || e.slots[j] >= p.n_slots) {
        throw std::invalid_argument("event " + std::to_string(k) + " names a slot out of range");
      }
    }
  }
  c10::Device device(c10::DeviceType::CPU);
  switch (device_type) {
    case 0: break;
    case 1: device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)); break;
    case 2: device = c10::Device(c10::DeviceType::MPS); break;
    case 3: device = c10::Device(c10::DeviceType::Vulkan); break;
    default: device = c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_index)); break;
  }
  // Grad-mode regions (torch.no_grad in the program) change the mode; it
  // is restored here whatever happens.
  c10::AutoGradMode restore_grad_mode(c10::GradMode::is_enabled());
  std::vector<bool> grad_modes;
  std::vector<c10::IValue> slots(static_cast<size_t>(p.n_slots));
  for (size_t k = 0; k < n_inputs; ++k) {
    slots[k] = *static_cast<const at::Tensor*>(inputs[k]);
  }
  size_t next_event = 0;
  // Fires the events due before instruction `at`.
  auto fire_events = [&](size_t at) {
    for (; next_event < n_events && static_cast<size_t>(events[next_event].before) == at; ++next_event) {
      const fulmen_cxx_ep_event& e = events[next_event];
      std::vector<std::unique_ptr<at::Tensor>> held;
      held.reserve(e.n_slots);
      for (size_t j = 0; j < e.n_slots; ++j) {
        const c10::IValue& v = slots[static_cast<size_t>(e.slots[j])];
        held.push_back(v.isTensor() ? std::make_unique<at::Tensor>(v.toTensor()) : nullptr);
      }
      std::vector<void*> handed(held.size());
      for (size_t j = 0; j < held.size(); ++j) {
        handed[j] = held[j].release();
      }
      if (hook(hook_ctx, next_event, handed.data(), handed.size()) != 0) {
        throw std::runtime_error("a sharding hook failed");
      }
    }
  };
  // While FLOPs are measured, each instruction names its modules.
  fulmen_cxx::FlopsSetting<const std::vector<std::string>*> modules(&fulmen_cxx::flops_program_modules);
  torch::jit::Stack stack;
  for (size_t at = 0; at < p.instrs.size(); ++at) {
    // A sharding hook's work belongs to no instruction's modules.
    modules = nullptr;
    fire_events(at);
    const Instr& in = p.instrs[at];
    modules = &in.modules;
    stack.clear();
    try {
      for (const Arg& a : in.args) {
        stack.push_back(materialise(a, slots, in, device));
      }
      if (in.op) {
        in.op->callBoxed(stack);
      } else if (in.builtin == kSetGrad) {
        grad_modes.push_back(c10::GradMode::is_enabled());
        c10::GradMode::set_enabled(stack[0].toBool());
        stack.clear();
      } else if (in.builtin == kRestoreGrad) {
        if (grad_modes.empty()) {
          throw std::logic_error("a grad mode restored that was never set");
        }
        c10::GradMode::set_enabled(grad_modes.back());
        grad_modes.pop_back();
      } else if (in.builtin == kIdentity) {
        stack.resize(1);
      } else {
        c10::IValue r = run_builtin(in.builtin, stack);
        stack.assign(1, std::move(r));
      }
    } catch (const c10::Error& e) {
      throw std::runtime_error(in.name + ": " + fulmen_cxx::short_message(e.what_without_backtrace()));
    } catch (const std::exception& e) {
      throw std::runtime_error(in.name + ": " + e.what());
    }
    store_outputs(in, stack, slots);
    for (int64_t s : in.drops) {
      slots[static_cast<size_t>(s)] = c10::IValue();
    }
  }
  modules = nullptr;
  fire_events(p.instrs.size());
  for (size_t k = 0; k < n_outputs; ++k) {
    made.push_back(std::make_unique<c10::IValue>(slots[static_cast<size_t>(p.outputs[k])]));
  }
  for (size_t k = 0; k < n_outputs; ++k) {
    outputs[k] = made[k].release();
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// Names the modules instruction `index` ran in (`paths[0..n]`, outermost
// first), for FLOP counts by module.
int fulmen_cxx_ep_modules(void* prog, size_t index, const char* const* paths, size_t n, char* err,
                          size_t err_len) {
  FULMEN_CXX_TRY
  Program& p = program(prog);
  if (index >= p.instrs.size()) {
    throw std::out_of_range("instruction " + std::to_string(index) + " out of range");
  }
  std::vector<std::string> modules;
  modules.reserve(n);
  for (size_t k = 0; k < n; ++k) modules.emplace_back(paths[k]);
  p.instrs[index].modules = std::move(modules);
  FULMEN_CXX_CATCH(err, err_len)
}

// Whether instruction `index` may return a value sharing memory with an
// argument: an operator whose schema marks a result as an alias (views,
// `t`, `detach`; also `_unsafe_view`, a view its schema does not mark),
// or the identity step of an inlined subgraph. 1 or 0; -1 for an index
// past the program.
int fulmen_cxx_ep_aliases(const void* prog, size_t index) noexcept {
  const Program& p = cprogram(prog);
  if (index >= p.instrs.size()) {
    return -1;
  }
  const Instr& in = p.instrs[index];
  if (!in.op) {
    return in.builtin == kIdentity ? 1 : 0;
  }
  const c10::FunctionSchema& schema = in.op->schema();
  if (schema.name() == "aten::_unsafe_view") {
    return 1;
  }
  for (const c10::Argument& r : schema.returns()) {
    if (r.alias_info() != nullptr) {
      return 1;
    }
  }
  return 0;
}

// A view of `t` that shares its storage but not its version counter nor
// autograd history (`variable_data`): a buffer handed to a program whose
// new value is copied in after the call, while autograd may still hold it.
void* fulmen_cxx_ep_alias(const void* t) noexcept {
  return new (std::nothrow) at::Tensor(static_cast<const at::Tensor*>(t)->variable_data());
}

}  // extern "C"

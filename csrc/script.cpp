// TorchScript modules and the values their methods take and return, for
// src/nn/torchscript.rs and src/nn/script_value.rs: what tch's `CModule`
// does not reach (buffers, any method with any argument types, saving to
// memory) on a `torch::jit::Module` of fulmen's own.
//
// Modules and values are heap objects handed out as `void*`: a module from
// fulmen_cxx_script_load (freed by fulmen_cxx_script_free), a value
// (`c10::IValue`) from the fulmen_cxx_value_* constructors, readers and
// fulmen_cxx_script_call (freed by fulmen_cxx_value_free). Tensors cross as
// heap `at::Tensor*` that share the module's storage.
#include "fulmen_cxx.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/script.h>

namespace {

torch::jit::Module& module(void* p) { return *static_cast<torch::jit::Module*>(p); }
const torch::jit::Module& cmodule(const void* p) { return *static_cast<const torch::jit::Module*>(p); }
const c10::IValue& value(const void* p) { return *static_cast<const c10::IValue*>(p); }

// 0 CPU, 1 CUDA, 2 MPS, 3 Vulkan (src/nn/torchscript.rs `device_code`).
c10::Device device_of(int type, int index) {
  switch (type) {
    case 0: return c10::Device(c10::DeviceType::CPU);
    case 1: return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
    case 2: return c10::Device(c10::DeviceType::MPS);
    case 3: return c10::Device(c10::DeviceType::Vulkan);
    default: throw std::invalid_argument("unknown device type " + std::to_string(type));
  }
}

// The most specific type all `items` share (Any when they share none), so
// that a list of tensors is a `List[Tensor]` as a script method expects.
c10::TypePtr common_type(const std::vector<c10::IValue>& items) {
  if (items.empty()) {
    return c10::AnyType::get();
  }
  c10::TypePtr t = c10::unshapedType(items[0].type());
  for (size_t i = 1; i < items.size(); ++i) {
    auto u = c10::unifyTypes(t, c10::unshapedType(items[i].type()));
    if (!u) {
      return c10::AnyType::get();
    }
    t = *u;
  }
  return t;
}

std::vector<c10::IValue> gather(void* const* items, size_t n) {
  std::vector<c10::IValue> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(value(items[i]));
  }
  return out;
}

void visit_state(const torch::jit::Module& m, const std::string& prefix,
                 void (*on_tensor)(void*, const char*, void*, int), void* ctx) {
  for (const auto& item : m.named_parameters(false)) {
    on_tensor(ctx, (prefix + item.name).c_str(), new at::Tensor(item.value), 0);
  }
  for (const auto& item : m.named_buffers(false)) {
    on_tensor(ctx, (prefix + item.name).c_str(), new at::Tensor(item.value), 1);
  }
  for (const auto& child : m.named_children()) {
    visit_state(child.value, prefix + child.name + ".", on_tensor, ctx);
  }
}

// The class name of a module's type ("Linear" for
// __torch__.torch.nn.modules.linear.Linear).
std::string class_name(const torch::jit::Module& m) {
  auto name = m.type()->name();
  return name ? name->name() : std::string("Module");
}

void visit_children(const torch::jit::Module& m, const std::string& prefix, int depth,
                    void (*on_child)(void*, const char*, const char*), void* ctx) {
  if (depth <= 0) {
    return;
  }
  for (const auto& child : m.named_children()) {
    const std::string path = prefix + child.name;
    on_child(ctx, path.c_str(), class_name(child.value).c_str());
    visit_children(child.value, path + ".", depth - 1, on_child, ctx);
  }
}

// The first `size` bytes of an open file, read with pread (the file's
// offset is left alone); a read past them, or one the file no longer has,
// comes back short, which the archive reader reports as an error.
class FdReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  FdReader(int fd, uint64_t size) : fd_(fd), size_(size) {}
  size_t size() const override { return static_cast<size_t>(size_); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos));
    size_t done = 0;
    while (done < want) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(buf) + done, want - done, static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  int fd_;
  uint64_t size_;
};

}  // namespace

extern "C" {

// *out = torch::jit::load of the first `size` bytes of the open file `fd`
// (the caller checked it is a regular file of that size) with its tensors
// on the given device.
int fulmen_cxx_script_load(int fd, uint64_t size, int device_type, int device_index, void** out, char* err,
                           size_t err_len) {
  FULMEN_CXX_TRY
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> reader = std::make_shared<FdReader>(fd, size);
  auto m = torch::jit::load(std::move(reader), device_of(device_type, device_index));
  *out = new torch::jit::Module(std::move(m));
  FULMEN_CXX_CATCH(err, err_len)
}

void fulmen_cxx_script_free(void* m) { delete static_cast<torch::jit::Module*>(m); }

// Calls on_tensor(ctx, name, tensor, is_buffer) for every parameter and
// buffer in PyTorch's state_dict order (per module: its parameters, its
// buffers, then its children), with dotted names; each tensor is a new
// `at::Tensor*` (the receiver owns it) sharing the module's storage.
int fulmen_cxx_script_state(const void* m, void (*on_tensor)(void*, const char*, void*, int), void* ctx, char* err,
                            size_t err_len) {
  FULMEN_CXX_TRY
  visit_state(cmodule(m), "", on_tensor, ctx);
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = module.clone(inplace = true): new module objects of the same
// structure and mode that share the original's tensors (no copy) until
// fulmen_cxx_script_set_tensor points them elsewhere.
int fulmen_cxx_script_clone(const void* m, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *out = new torch::jit::Module(cmodule(m).clone(/*inplace=*/true));
  FULMEN_CXX_CATCH(err, err_len)
}

// Points the parameter or buffer at the dotted `name` ("body.0.weight")
// to `tensor` (a DataParallel replica's broadcast copy).
int fulmen_cxx_script_set_tensor(void* m, const char* name, const void* tensor, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::string path(name);
  torch::jit::Module cur = module(m);
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
    cur = cur.attr(path.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
  cur.setattr(path.substr(start), *static_cast<const at::Tensor*>(tensor));
  FULMEN_CXX_CATCH(err, err_len)
}

// module.train(on) for the module and all its submodules.
int fulmen_cxx_script_set_training(void* m, int on, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  module(m).train(on != 0);
  FULMEN_CXX_CATCH(err, err_len)
}

// Serialises the module as torch.jit.save does, into a new buffer of
// *len bytes at *bytes, freed with fulmen_cxx_bytes_free.
int fulmen_cxx_script_save(const void* m, char** bytes, size_t* len, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::ostringstream stream;
  cmodule(m).save(stream);
  std::string data = stream.str();
  char* copy = new char[data.size() == 0 ? 1 : data.size()];
  std::memcpy(copy, data.data(), data.size());
  *bytes = copy;
  *len = data.size();
  FULMEN_CXX_CATCH(err, err_len)
}

void fulmen_cxx_bytes_free(char* bytes) { delete[] bytes; }

// Calls on_child(ctx, dotted path, class name) for the module's children
// down to `depth` levels, in tree order.
int fulmen_cxx_script_children(const void* m, int depth, void (*on_child)(void*, const char*, const char*), void* ctx,
                               char* err, size_t err_len) {
  FULMEN_CXX_TRY
  visit_children(cmodule(m), "", depth, on_child, ctx);
  FULMEN_CXX_CATCH(err, err_len)
}

// Calls on_name(ctx, name) for every method of the module.
int fulmen_cxx_script_methods(const void* m, void (*on_name)(void*, const char*), void* ctx, char* err,
                              size_t err_len) {
  FULMEN_CXX_TRY
  for (const auto& method : cmodule(m).get_methods()) {
    on_name(ctx, method.name().c_str());
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// *found = whether the module has a method `name`.
int fulmen_cxx_script_has_method(const void* m, const char* name, int* found, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *found = cmodule(m).find_method(name).has_value() ? 1 : 0;
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = how many results `method` returns: the size of a tuple return
// type, else 1.
int fulmen_cxx_script_num_returns(const void* m, const char* method, size_t* out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto found = cmodule(m).find_method(method);
  if (!found) {
    throw std::invalid_argument(std::string("the module has no method ") + method);
  }
  const auto& returns = found->function().getSchema().returns();
  *out = 1;
  if (returns.size() == 1) {
    if (auto tuple = returns[0].type()->cast<c10::TupleType>()) {
      *out = tuple->elements().size();
    }
  }
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = module.<method>(*args), a new value.
int fulmen_cxx_script_call(void* m, const char* method, void* const* args, size_t n, void** out, char* err,
                           size_t err_len) {
  FULMEN_CXX_TRY
  auto found = module(m).find_method(method);
  if (!found) {
    throw std::invalid_argument(std::string("the module has no method ") + method);
  }
  // While FLOPs are measured, the module names its submodules.
  fulmen_cxx::FlopsSetting<const void*> root(&fulmen_cxx::flops_script_root);
  root = &module(m);
  *out = new c10::IValue((*found)(gather(args, n)));
  FULMEN_CXX_CATCH(err, err_len)
}

// The scalar and tensor constructors return NULL when allocation fails.
void* fulmen_cxx_value_none() noexcept { return new (std::nothrow) c10::IValue(); }
void* fulmen_cxx_value_bool(int v) noexcept { return new (std::nothrow) c10::IValue(v != 0); }
void* fulmen_cxx_value_int(int64_t v) noexcept { return new (std::nothrow) c10::IValue(v); }
void* fulmen_cxx_value_double(double v) noexcept { return new (std::nothrow) c10::IValue(v); }
void* fulmen_cxx_value_string(const char* s, size_t len) noexcept {
  try {
    return new c10::IValue(std::string(s, len));
  } catch (...) {
    return nullptr;
  }
}
void* fulmen_cxx_value_tensor(const void* t) noexcept {
  return new (std::nothrow) c10::IValue(*static_cast<const at::Tensor*>(t));
}
void fulmen_cxx_value_free(void* v) { delete static_cast<c10::IValue*>(v); }

// *out = a tuple of copies of items[0..n].
int fulmen_cxx_value_tuple(void* const* items, size_t n, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *out = new c10::IValue(c10::ivalue::Tuple::create(gather(items, n)));
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = a list of copies of items[0..n], typed by their common type.
int fulmen_cxx_value_list(void* const* items, size_t n, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto elems = gather(items, n);
  c10::impl::GenericList list(common_type(elems));
  list.reserve(elems.size());
  for (auto& e : elems) {
    list.push_back(std::move(e));
  }
  *out = new c10::IValue(std::move(list));
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = a dict {keys[i]: values[i]}, typed by the keys' and values' common
// types; a repeated key keeps its last value.
int fulmen_cxx_value_dict(void* const* keys, void* const* values, size_t n, void** out, char* err,
                          size_t err_len) {
  FULMEN_CXX_TRY
  auto ks = gather(keys, n);
  auto vs = gather(values, n);
  auto key_type = common_type(ks);
  if (n > 0 && key_type->kind() == c10::TypeKind::AnyType) {
    throw std::invalid_argument("dict keys must all be strings, all ints, all floats or all bools");
  }
  c10::impl::GenericDict dict(n == 0 ? c10::StringType::get() : key_type, common_type(vs));
  for (size_t i = 0; i < n; ++i) {
    dict.insert_or_assign(ks[i], vs[i]);
  }
  *out = new c10::IValue(std::move(dict));
  FULMEN_CXX_CATCH(err, err_len)
}

// The kind of a value: 0 None, 1 Tensor, 2 float, 3 int, 4 bool, 5 str,
// 6 tuple, 7 list, 8 dict, -1 anything else (objects, devices, ...).
int fulmen_cxx_value_kind(const void* v) {
  const auto& x = value(v);
  if (x.isNone()) return 0;
  if (x.isTensor()) return 1;
  if (x.isDouble()) return 2;
  if (x.isInt()) return 3;
  if (x.isBool()) return 4;
  if (x.isString()) return 5;
  if (x.isTuple()) return 6;
  if (x.isList()) return 7;
  if (x.isGenericDict()) return 8;
  return -1;
}

// The type name of a value, as TorchScript prints it (for messages).
int fulmen_cxx_value_type_name(const void* v, char* buf, size_t len) noexcept {
  try {
    fulmen_cxx::write_message(value(v).tagKind(), buf, len);
  } catch (...) {
    fulmen_cxx::write_message("unknown", buf, len);
  }
  return 0;
}

bool fulmen_cxx_value_to_bool(const void* v) { return value(v).toBool(); }
int64_t fulmen_cxx_value_to_int(const void* v) { return value(v).toInt(); }
double fulmen_cxx_value_to_double(const void* v) { return value(v).toDouble(); }

// The bytes of a str value (valid while the value lives).
const char* fulmen_cxx_value_to_string(const void* v, size_t* len) {
  const auto& s = value(v).toStringRef();
  *len = s.size();
  return s.data();
}

// A new `at::Tensor*` of a Tensor value (NULL when allocation fails).
void* fulmen_cxx_value_to_tensor(const void* v) noexcept { return new (std::nothrow) at::Tensor(value(v).toTensor()); }

// Number of elements of a tuple or list, or of entries of a dict.
size_t fulmen_cxx_value_len(const void* v) {
  const auto& x = value(v);
  if (x.isTuple()) return x.toTupleRef().elements().size();
  if (x.isList()) return x.toListRef().size();
  if (x.isGenericDict()) return x.toGenericDict().size();
  return 0;
}

// Writes new values for the n elements of a tuple or list into out[0..n],
// or for a dict its keys into out[0..n] and its values into extra[0..n].
int fulmen_cxx_value_items(const void* v, void** out, void** extra, size_t n, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  const auto& x = value(v);
  if (fulmen_cxx_value_len(v) != n) {
    throw std::invalid_argument("fulmen_cxx_value_items: length changed");
  }
  if (x.isTuple()) {
    const auto& elems = x.toTupleRef().elements();
    for (size_t i = 0; i < n; ++i) out[i] = new c10::IValue(elems[i]);
  } else if (x.isList()) {
    auto elems = x.toListRef();
    for (size_t i = 0; i < n; ++i) out[i] = new c10::IValue(elems[i]);
  } else if (x.isGenericDict()) {
    size_t i = 0;
    for (const auto& entry : x.toGenericDict()) {
      out[i] = new c10::IValue(entry.key());
      extra[i] = new c10::IValue(entry.value());
      ++i;
    }
  }
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

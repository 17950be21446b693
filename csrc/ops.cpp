// Tensor ops that tch's API lacks: those with a scalar factor (`add_(other,
// alpha)`, `addcmul_(t1, t2, value)`, `addcdiv_(t1, t2, value)`), one
// libtorch kernel each, exactly as torch.optim calls them; and
// `torch.gradient` over coordinates, as Lightning's LR finder calls it.
#include "fulmen_cxx.h"

#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/gradient.h>
#include <ATen/ops/randperm.h>

namespace {
at::Tensor& tensor(void* p) { return *static_cast<at::Tensor*>(p); }
const at::Tensor& ctensor(const void* p) { return *static_cast<const at::Tensor*>(p); }
}  // namespace

extern "C" {

// a.add_(b, alpha)
int fulmen_cxx_add_(void* a, const void* b, double alpha, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  tensor(a).add_(ctensor(b), alpha);
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = a.add(b, alpha), a new heap `at::Tensor*`.
int fulmen_cxx_add(const void* a, const void* b, double alpha, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  *out = new at::Tensor(ctensor(a).add(ctensor(b), alpha));
  FULMEN_CXX_CATCH(err, err_len)
}

// a.addcmul_(t1, t2, value)
int fulmen_cxx_addcmul_(void* a, const void* t1, const void* t2, double value, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  tensor(a).addcmul_(ctensor(t1), ctensor(t2), value);
  FULMEN_CXX_CATCH(err, err_len)
}

// a.addcdiv_(t1, t2, value)
int fulmen_cxx_addcdiv_(void* a, const void* t1, const void* t2, double value, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  tensor(a).addcdiv_(ctensor(t1), ctensor(t2), value);
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = torch.randperm(n, generator=torch.Generator().manual_seed(seed)):
// the permutation torch.utils.data.random_split draws.
int fulmen_cxx_randperm(int64_t n, uint64_t seed, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  *out = new at::Tensor(at::randperm(n, gen, at::TensorOptions().dtype(at::kLong)));
  FULMEN_CXX_CATCH(err, err_len)
}

// *out = torch.gradient(values, spacing=[coords])[0] for 1-D tensors.
int fulmen_cxx_gradient(const void* values, const void* coords, void** out, char* err, size_t err_len) {
  FULMEN_CXX_TRY
  std::vector<at::Tensor> spacing{ctensor(coords)};
  auto g = at::gradient(ctensor(values), spacing);
  *out = new at::Tensor(g.at(0));
  FULMEN_CXX_CATCH(err, err_len)
}

}  // extern "C"

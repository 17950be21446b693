// fulmen C++ binding: FLOP formulas of the host's own, by operator
// (fulmen_flops_register_formula; torch's register_flop_formula).
#pragma once

#include "error.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fulmen {

/// One argument or result of an operator as a FLOP formula sees it
/// (fulmen_flop_value, copied): tensors by shape, everything else by value.
/// Only the fields of its `kind` are set.
struct FlopArg {
    /// What it holds (FULMEN_FLOP_VALUE_KIND_*).
    fulmen_flop_value_kind kind = FULMEN_FLOP_VALUE_KIND_NONE;
    /// A tensor's fulmen_dtype, -1 for a dtype outside it.
    int dtype = -1;
    /// A tensor's sizes.
    std::vector<std::int64_t> shape;
    /// An int, or a bool as 0 or 1.
    std::int64_t integer = 0;
    /// A float.
    double number = 0;
    /// A string.
    std::string text;
    /// A list of ints.
    std::vector<std::int64_t> ints;
    /// A list's or tuple's elements.
    std::vector<FlopArg> items;

    /// Whether it is a tensor.
    bool is_tensor() const noexcept { return kind == FULMEN_FLOP_VALUE_KIND_TENSOR; }
    /// A tensor's element count (1 for a scalar tensor, 0 for anything else).
    std::uint64_t numel() const noexcept {
        if (!is_tensor()) return 0;
        std::uint64_t n = 1;
        for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
        return n;
    }

    /// Copies a C value and what it points to.
    static FlopArg from(const fulmen_flop_value& v) {
        FlopArg a;
        a.kind = v.kind;
        a.dtype = v.dtype;
        if (v.shape != nullptr) a.shape.assign(v.shape, v.shape + v.ndim);
        a.integer = v.integer;
        a.number = v.number;
        if (v.text != nullptr) a.text = v.text;
        if (v.ints != nullptr) a.ints.assign(v.ints, v.ints + v.num_ints);
        for (size_t i = 0; v.items != nullptr && i < v.num_items; ++i) a.items.push_back(from(v.items[i]));
        return a;
    }
};

/// A FLOP formula: the FLOPs of one call of operator `op` with `inputs`
/// (every argument of its schema, defaults included) that returned
/// `outputs`. It may run on several threads at once; an exception it
/// throws fails the measurement with its message (a fulmen::Error's code
/// kept, FULMEN_CODE_CALLBACK otherwise).
using FlopFormula = std::function<std::uint64_t(const std::string& op, const std::vector<FlopArg>& inputs,
                                                const std::vector<FlopArg>& outputs)>;

namespace detail {
/// The C trampoline of a registered FlopFormula (its userdata).
inline fulmen_error* call_flop_formula(void* ud, const char* op, const fulmen_flop_value* in, size_t n_in,
                                       const fulmen_flop_value* out, size_t n_out, std::uint64_t* flops) noexcept {
    try {
        std::vector<FlopArg> ins, outs;
        for (size_t i = 0; i < n_in; ++i) ins.push_back(FlopArg::from(in[i]));
        for (size_t i = 0; i < n_out; ++i) outs.push_back(FlopArg::from(out[i]));
        *flops = (*static_cast<FlopFormula*>(ud))(op, ins, outs);
        return nullptr;
    } catch (const Error& e) {
        return fulmen_error_new(static_cast<int32_t>(e.code()), e.what());
    } catch (const std::exception& e) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, e.what());
    } catch (...) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "unknown C++ exception in a FLOP formula");
    }
}

inline void free_flop_formula(void* ud) noexcept { delete static_cast<FlopFormula*>(ud); }
}  // namespace detail

/// Registers `formula` for operator `op` ("aten::gelu", no overload) for
/// the FLOP measurements that begin from now on, replacing torch's formula
/// for an operator that has one (fulmen_flops_register_formula: refusals
/// and rules there). Process-wide.
inline void register_flop_formula(const std::string& op, FlopFormula formula) {
    auto owned = std::make_unique<FlopFormula>(std::move(formula));
    check(fulmen_flops_register_formula(op.c_str(), &detail::call_flop_formula, owned.get(),
                                        &detail::free_flop_formula));
    owned.release();  // fulmen frees it with free_flop_formula
}

/// Unregisters the formula of `op`; whether one was registered.
/// Measurements under way keep it to their end.
inline bool unregister_flop_formula(const std::string& op) {
    bool removed = false;
    check(fulmen_flops_unregister_formula(op.c_str(), &removed));
    return removed;
}

}  // namespace fulmen

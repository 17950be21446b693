// fulmen C++ binding: FLOP counts by module and operator, as PyTorch's
// FlopCounterMode keeps them (fulmen_flop_counts).
#pragma once

#include "handle.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// What a FLOP measurement counted (`Model::measure_flops_by_module`,
/// `measure_flops_by_module`): in total, by module ("Global", then the
/// modules in name order, named as FlopCounterMode names them: "MLP",
/// "MLP.net.0") and by operator.
class FlopCounts : public detail::Handle<fulmen_flop_counts, fulmen_flop_counts_free> {
public:
    /// Empty counts (no handle).
    FlopCounts() = default;
    /// Takes ownership of a C handle.
    static FlopCounts adopt(fulmen_flop_counts* owned) noexcept { return FlopCounts(owned); }

    /// The FLOPs counted for `module` ("Global", the default, for all): 0
    /// for a module that counted none.
    std::uint64_t total(const std::string& module = "Global") const {
        return detail::read<std::uint64_t>(
            [&](std::uint64_t* o) { return fulmen_flop_counts_total(get(), module.c_str(), o); });
    }
    /// The modules with counts: "Global" first, then in name order.
    std::vector<std::string> modules() const {
        size_t n = detail::read<size_t>([&](size_t* o) { return fulmen_flop_counts_num_modules(get(), o); });
        std::vector<std::string> out;
        out.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            out.push_back(detail::read_string([&](char* buf, size_t cap, size_t* len) {
                return fulmen_flop_counts_module_name(get(), i, buf, cap, len);
            }));
        }
        return out;
    }
    /// The operators of `module` ("aten::mm") with their FLOPs, in the
    /// order they were first counted there.
    std::vector<std::pair<std::string, std::uint64_t>> operators(const std::string& module = "Global") const {
        size_t n = detail::read<size_t>(
            [&](size_t* o) { return fulmen_flop_counts_num_operators(get(), module.c_str(), o); });
        std::vector<std::pair<std::string, std::uint64_t>> out;
        out.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            std::uint64_t flops = 0;
            std::string name = detail::read_string([&](char* buf, size_t cap, size_t* len) {
                return fulmen_flop_counts_operator(get(), module.c_str(), i, buf, cap, len, &flops);
            });
            out.emplace_back(std::move(name), flops);
        }
        return out;
    }
    /// The table FlopCounterMode's `get_table(depth)` prints (2 is torch's
    /// default; SIZE_MAX for every module).
    std::string table(size_t depth = 2) const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_flop_counts_table(get(), depth, buf, cap, len); });
    }

private:
    explicit FlopCounts(fulmen_flop_counts* owned) noexcept : Handle(owned) {}
};

}  // namespace fulmen

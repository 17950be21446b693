// fulmen C++ binding: strategies (Lightning's Strategy objects, e.g.
// DDPStrategy(find_unused_parameters=True)): the registry and a strategy
// with its settings.
#pragma once

#include "error.hpp"
#include "handle.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace fulmen {

/// One registry entry (`fulmen_strategy_registry_entry`).
struct StrategyInfo {
    std::string name;         ///< The registered name ("ddp", "single_device", ...).
    std::string description;  ///< What it does.
};

/// A strategy from the registry with its settings (Lightning's Strategy
/// objects): "auto" (ddp when several devices or processes are asked for,
/// else single_device), "single_device", "ddp" (one process per device;
/// started by torchrun, SLURM, or fulmen re-executing the host program),
/// "ddp_spawn", "ddp_find_unused_parameters_true",
/// "ddp_find_unused_parameters_false". Move-only; TrainerOptions::set_strategy
/// copies it.
class Strategy : public detail::Handle<fulmen_strategy, fulmen_strategy_free> {
public:
    /// An empty strategy object (no handle).
    Strategy() = default;

    /// The strategy registered as `name` (trimmed, case-insensitive) with
    /// its default settings; throws Error listing the registered names for
    /// an unknown one.
    explicit Strategy(const std::string& name)
        : Handle(detail::make<fulmen_strategy>([&](fulmen_strategy** out) {
              return fulmen_strategy_new(name.c_str(), out);
          })) {}

    /// Takes ownership of a `fulmen_strategy` handle.
    static Strategy adopt(fulmen_strategy* handle) noexcept { return Strategy(handle); }

    /// Sets a setting from a string, number or bool (as text: "gloo", 60,
    /// 2.5, true); chains. Keys: `find_unused_parameters` (bool),
    /// `process_group_backend` ("gloo", "nccl", "none" = gloo on CPU, nccl
    /// on CUDA), `timeout` (seconds: rendezvous and every collective;
    /// default 1800), `bucket_cap_mb` (default 25), `num_nodes` (default
    /// 1); for "fsdp": `sharding_strategy` (FULL_SHARD, SHARD_GRAD_OP,
    /// NO_SHARD), `auto_wrap_policy` (comma-separated class names),
    /// `min_num_params`, `activation_checkpointing_policy` (comma-separated
    /// class names whose forwards are checkpointed), `state_dict_type`
    /// ("full" or "sharded"). A bad key or value
    /// throws Error (FULMEN_CODE_INVALID_ARGUMENT; FULMEN_CODE_UNSUPPORTED
    /// for a value fulmen does not have yet) and changes nothing.
    template <class V>
    Strategy& set(const std::string& key, const V& value) & {
        apply(key, value);
        return *this;
    }
    /// Sets a setting on a temporary and passes it on: Strategy("ddp").set(...).set(...).
    template <class V>
    Strategy&& set(const std::string& key, const V& value) && {
        apply(key, value);
        return std::move(*this);
    }

    /// The registry name ("ddp" for Strategy("DDP")).
    std::string name() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_strategy_name(get(), buf, cap, len); });
    }

private:
    explicit Strategy(fulmen_strategy* owned) noexcept : Handle(owned) {}

    template <class V>
    void apply(const std::string& key, const V& value) {
        std::string text;
        if constexpr (std::is_same_v<V, bool>) {
            text = value ? "true" : "false";
        } else if constexpr (std::is_arithmetic_v<V>) {
            std::ostringstream out;
            if constexpr (std::is_floating_point_v<V>) out.precision(std::numeric_limits<V>::max_digits10);
            out << +value;
            text = out.str();
        } else {
            static_assert(std::is_convertible_v<const V&, std::string_view>,
                          "strategy settings are strings, numbers or bools");
            text = std::string(std::string_view(value));
        }
        check(fulmen_strategy_set(get(), key.c_str(), text.c_str()));
    }
};

/// The registered strategies, in registry order.
inline std::vector<StrategyInfo> strategy_registry() {
    size_t n = detail::read<size_t>([](size_t* o) { return fulmen_strategy_registry_len(o); });
    std::vector<StrategyInfo> out;
    out.reserve(n);
    for (size_t i = 0; i < n; i++) {
        std::vector<char> name(64), desc(256);
        size_t name_len = 0, desc_len = 0;
        auto entry = [&] {
            return fulmen_strategy_registry_entry(i, name.data(), name.size(), &name_len, desc.data(), desc.size(),
                                                  &desc_len);
        };
        fulmen_error* err = entry();
        // The name is copied first: each too-small buffer shows up in its own call.
        for (int attempt = 0; attempt < 2 && err != nullptr && fulmen_error_code(err) == FULMEN_CODE_OUT_OF_RANGE &&
                              (name_len >= name.size() || desc_len >= desc.size());
             attempt++) {
            fulmen_error_free(err);
            name.resize(std::max(name.size(), name_len + 1));
            desc.resize(std::max(desc.size(), desc_len + 1));
            err = entry();
        }
        check(err);
        out.push_back(StrategyInfo{std::string(name.data(), name_len), std::string(desc.data(), desc_len)});
    }
    return out;
}

}  // namespace fulmen

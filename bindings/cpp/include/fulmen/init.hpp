// fulmen C++ binding: torch.nn.init on existing tensors (fulmen_init_*).
// uniform_, normal_, constant_ (fill_), zeros_ (zero_) are Tensor methods.
#pragma once

#include "tensor.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace fulmen {

/// Which fan Kaiming initialisation preserves (the C `fulmen_fan_mode`).
enum class FanMode : int32_t {
    FanIn = FULMEN_FAN_MODE_FAN_IN,
    FanOut = FULMEN_FAN_MODE_FAN_OUT,
};

/// A meta-init scope of the calling thread (RAII), as PyTorch's `with
/// torch.device("meta")` and Lightning's `init_module(empty_init=True)`:
/// the layers made while it lives hold no memory; the trainer, `Fsdp`,
/// `Ddp` or `Model::materialize` give them the values an eager build
/// would have (fulmen_meta_init_begin). Scopes nest; destroy them on the
/// thread that made them, innermost first.
class MetaInit {
public:
    MetaInit() { check(fulmen_meta_init_begin()); }
    MetaInit(const MetaInit&) = delete;
    MetaInit& operator=(const MetaInit&) = delete;
    ~MetaInit() { fulmen_error_free(fulmen_meta_init_end()); }
};

namespace init {

/// nn.init.calculate_gain(nonlinearity, param); NaN param: the default.
inline double calculate_gain(const std::string& nonlinearity,
                             double param = std::numeric_limits<double>::quiet_NaN()) {
    return detail::read<double>([&](double* o) { return fulmen_init_calculate_gain(nonlinearity.c_str(), param, o); });
}
/// nn.init.xavier_uniform_(t, gain).
inline const Tensor& xavier_uniform_(const Tensor& t, double gain = 1.0) {
    check(fulmen_init_xavier_uniform_(t.get(), gain));
    return t;
}
/// nn.init.xavier_normal_(t, gain).
inline const Tensor& xavier_normal_(const Tensor& t, double gain = 1.0) {
    check(fulmen_init_xavier_normal_(t.get(), gain));
    return t;
}
/// nn.init.kaiming_uniform_(t, a, mode, nonlinearity).
inline const Tensor& kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                                      const std::string& nonlinearity = "leaky_relu") {
    check(fulmen_init_kaiming_uniform_(t.get(), a, static_cast<int32_t>(mode), nonlinearity.c_str()));
    return t;
}
/// nn.init.kaiming_normal_(t, a, mode, nonlinearity).
inline const Tensor& kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                                     const std::string& nonlinearity = "leaky_relu") {
    check(fulmen_init_kaiming_normal_(t.get(), a, static_cast<int32_t>(mode), nonlinearity.c_str()));
    return t;
}
/// nn.init.orthogonal_(t, gain).
inline const Tensor& orthogonal_(const Tensor& t, double gain = 1.0) {
    check(fulmen_init_orthogonal_(t.get(), gain));
    return t;
}
/// nn.init.trunc_normal_(t, mean, std, a, b).
inline const Tensor& trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0,
                                   double b = 2.0) {
    check(fulmen_init_trunc_normal_(t.get(), mean, std, a, b));
    return t;
}

}  // namespace init
}  // namespace fulmen

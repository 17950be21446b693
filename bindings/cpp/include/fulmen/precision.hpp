// fulmen C++ binding: precision plugins as objects (Lightning's
// MixedPrecision / DoublePrecision), with loss-scaler settings.
#pragma once

#include "error.hpp"
#include "handle.hpp"

#include <cstdint>
#include <string>

namespace fulmen {

/// A precision plugin: one of Lightning's precision values ("64-true",
/// "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", legacy
/// "64", "32", "16", "bf16"), plus GradScaler settings for "16-mixed".
class Precision : public detail::Handle<fulmen_precision, fulmen_precision_free> {
public:
    /// Parses `name`; throws Error listing the valid values otherwise.
    explicit Precision(const std::string& name)
        : Handle(detail::make<fulmen_precision>([&](fulmen_precision** out) {
              return fulmen_precision_new(name.c_str(), out);
          })) {}

    /// The canonical name ("16-mixed" for "16").
    std::string name() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_precision_name(get(), buf, cap, len); });
    }

    /// Sets the loss scaler of a "16-mixed" plugin (torch's defaults:
    /// 65536, 2.0, 0.5, 2000); throws for other precisions or bad values.
    Precision& grad_scaler(double init_scale, double growth_factor = 2.0, double backoff_factor = 0.5,
                           int64_t growth_interval = 2000) {
        check(fulmen_precision_set_grad_scaler(get(), init_scale, growth_factor, backoff_factor, growth_interval));
        return *this;
    }
};

}  // namespace fulmen

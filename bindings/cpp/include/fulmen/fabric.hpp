// fulmen C++ binding: pieces for host-written loops, as Lightning Fabric's:
// an autocast scope (torch.autocast) and a loss scaler (torch.amp.GradScaler).
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "optim.hpp"
#include "tensor.hpp"

#include <cstdint>
#include <string>

namespace fulmen {

/// An autocast region of the calling thread (RAII): eligible ops on
/// `device_type` run in `dtype` (FULMEN_DTYPE_F16 or FULMEN_DTYPE_BF16)
/// until it is destroyed. Destroy scopes innermost first.
class AutocastScope {
public:
    AutocastScope(int32_t device_type, int32_t dtype) { check(fulmen_autocast_enter(device_type, dtype, &scope_)); }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;
    /// Exits the region; throws Error when it cannot (an inner scope open).
    void exit() {
        if (scope_ != nullptr) {
            check(fulmen_autocast_exit(scope_));
            scope_ = nullptr;
        }
    }
    ~AutocastScope() {
        if (scope_ != nullptr) {
            fulmen_error_free(fulmen_autocast_exit(scope_));
        }
    }

private:
    fulmen_autocast_scope* scope_ = nullptr;
};

/// A dynamic loss scaler (torch.amp.GradScaler; defaults 65536, 2.0, 0.5, 2000).
class GradScaler : public detail::Handle<fulmen_grad_scaler, fulmen_grad_scaler_free> {
public:
    explicit GradScaler(double init_scale = 65536.0, double growth_factor = 2.0, double backoff_factor = 0.5,
                        int64_t growth_interval = 2000)
        : Handle(detail::make<fulmen_grad_scaler>([&](fulmen_grad_scaler** out) {
              return fulmen_grad_scaler_new(init_scale, growth_factor, backoff_factor, growth_interval, out);
          })) {}

    /// loss * scale.
    Tensor scale(const Tensor& loss) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_grad_scaler_scale(get(), loss.get(), o); });
    }
    /// Unscales the optimizer's gradients; whether any was inf or NaN.
    bool unscale(Optimizer& optimizer) {
        bool found_inf = false;
        check(fulmen_grad_scaler_unscale(get(), optimizer.get(), &found_inf));
        return found_inf;
    }
    /// unscale(optimizer) without reading the finding back (torch's
    /// `unscale_`, which returns nothing): the host does not wait for the
    /// device.
    void unscale_no_wait(Optimizer& optimizer) { check(fulmen_grad_scaler_unscale(get(), optimizer.get(), nullptr)); }
    /// Steps the optimizer unless a gradient was inf/NaN; whether it skipped.
    bool step(Optimizer& optimizer) {
        bool skipped = false;
        check(fulmen_grad_scaler_step(get(), optimizer.get(), &skipped));
        return skipped;
    }
    /// step(optimizer) without asking whether it skipped (torch's
    /// `scaler.step`): with fused updates the host then never waits for
    /// the device; other optimizers read the finding once, as torch's do.
    void step_no_wait(Optimizer& optimizer) { check(fulmen_grad_scaler_step(get(), optimizer.get(), nullptr)); }
    /// Backs off or grows the scale.
    void update() { check(fulmen_grad_scaler_update(get())); }
    /// The current scale.
    double get_scale() const {
        double s = 0;
        check(fulmen_grad_scaler_get_scale(get(), &s));
        return s;
    }
    /// The state_dict as JSON.
    std::string state() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_grad_scaler_state_save(get(), buf, cap, len); });
    }
    /// Restores a state from state().
    void load_state(const std::string& state) { check(fulmen_grad_scaler_state_load(get(), state.c_str())); }
};

}  // namespace fulmen

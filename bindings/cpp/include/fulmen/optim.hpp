// fulmen C++ binding: optimizers, learning-rate schedulers, gradient clipping.
#pragma once

#include "model.hpp"

#include <functional>
#include <limits>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// SGD options, default-constructed with torch's defaults.
struct SgdOptions : fulmen_sgd_options {
    /// torch.optim.SGD defaults (lr 1e-3).
    SgdOptions() : fulmen_sgd_options(fulmen_sgd_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit SgdOptions(double learning_rate) : SgdOptions() { lr = learning_rate; }
};

/// Adam options, default-constructed with torch's Adam defaults.
struct AdamOptions : fulmen_adam_options {
    /// torch.optim.Adam defaults (lr 1e-3).
    AdamOptions() : fulmen_adam_options(fulmen_adam_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit AdamOptions(double learning_rate) : AdamOptions() { lr = learning_rate; }

protected:
    explicit AdamOptions(const fulmen_adam_options& o) : fulmen_adam_options(o) {}
};

/// AdamW options, default-constructed with torch's AdamW defaults.
struct AdamWOptions : AdamOptions {
    /// torch.optim.AdamW defaults (weight decay 1e-2).
    AdamWOptions() : AdamOptions(fulmen_adamw_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit AdamWOptions(double learning_rate) : AdamWOptions() { lr = learning_rate; }
};

/// RMSprop options, default-constructed with torch's defaults.
struct RmspropOptions : fulmen_rmsprop_options {
    /// torch.optim.RMSprop defaults (lr 1e-2).
    RmspropOptions() : fulmen_rmsprop_options(fulmen_rmsprop_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit RmspropOptions(double learning_rate) : RmspropOptions() { lr = learning_rate; }
};

/// Adagrad options, default-constructed with torch's defaults.
struct AdagradOptions : fulmen_adagrad_options {
    /// torch.optim.Adagrad defaults (lr 1e-2).
    AdagradOptions() : fulmen_adagrad_options(fulmen_adagrad_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit AdagradOptions(double learning_rate) : AdagradOptions() { lr = learning_rate; }
};

/// LBFGS options, default-constructed with torch's defaults.
struct LbfgsOptions : fulmen_lbfgs_options {
    /// torch.optim.LBFGS defaults (lr 1, max_iter 20, history_size 100, no
    /// line search; max_eval 0: max_iter * 5 / 4).
    LbfgsOptions() : fulmen_lbfgs_options(fulmen_lbfgs_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit LbfgsOptions(double learning_rate) : LbfgsOptions() { lr = learning_rate; }
};

/// Adamax options, default-constructed with torch's defaults.
struct AdamaxOptions : fulmen_adamax_options {
    /// torch.optim.Adamax defaults (lr 2e-3).
    AdamaxOptions() : fulmen_adamax_options(fulmen_adamax_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit AdamaxOptions(double learning_rate) : AdamaxOptions() { lr = learning_rate; }
};

/// NAdam options, default-constructed with torch's defaults.
struct NAdamOptions : fulmen_nadam_options {
    /// torch.optim.NAdam defaults (lr 2e-3).
    NAdamOptions() : fulmen_nadam_options(fulmen_nadam_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit NAdamOptions(double learning_rate) : NAdamOptions() { lr = learning_rate; }
};

/// RAdam options, default-constructed with torch's defaults.
struct RAdamOptions : fulmen_radam_options {
    /// torch.optim.RAdam defaults (lr 1e-3).
    RAdamOptions() : fulmen_radam_options(fulmen_radam_options_default()) {}
    /// Defaults with learning rate `learning_rate`.
    explicit RAdamOptions(double learning_rate) : RAdamOptions() { lr = learning_rate; }
};

/// OneCycleLR options with torch's defaults for a peak lr and cycle length.
struct OneCycleOptions : fulmen_one_cycle_options {
    /// Defaults for a peak lr `peak_lr` over `steps` steps.
    OneCycleOptions(double peak_lr, int64_t steps)
        : fulmen_one_cycle_options(fulmen_one_cycle_options_default(peak_lr, steps)) {}
};

/// CyclicLR options with torch's defaults between `base_lr` and `max_lr`.
struct CyclicLrOptions : fulmen_cyclic_lr_options {
    /// Defaults (step_size_up 2000, triangular, momentum cycled 0.8 - 0.9).
    CyclicLrOptions(double base_lr, double max_lr)
        : fulmen_cyclic_lr_options(fulmen_cyclic_lr_options_default(base_lr, max_lr)) {}
};

/// The factor of LambdaLR / MultiplicativeLR for a step and a parameter
/// group; an exception fails the scheduler step (and is rethrown there).
using LrLambda = std::function<double(int64_t step, size_t group)>;

/// torch's `foreach` (the C `fulmen_foreach`): Default is torch's
/// `foreach=None`, the foreach updates when every parameter is on CUDA.
enum class Foreach : int32_t {
    Default = FULMEN_FOREACH_DEFAULT,
    Off = FULMEN_FOREACH_OFF,
    On = FULMEN_FOREACH_ON,
};

namespace detail {
/// Calls a C++ LrLambda from fulmen.
struct LrLambdaBox {
    LrLambda fn;
    static fulmen_error* call(void* ud, int64_t step, size_t group, double* out) noexcept {
        return guard_callback([&] { *out = static_cast<LrLambdaBox*>(ud)->fn(step, group); });
    }
    static void free(void* ud) noexcept { delete static_cast<LrLambdaBox*>(ud); }
};

/// Calls a closure of `Optimizer::step` from fulmen_optimizer_step_closure.
template <class Fn>
struct ClosureCall {
    Fn& fn;
    static fulmen_error* call(void* ud, double* loss) noexcept {
        return guard_callback([&] { *loss = static_cast<ClosureCall*>(ud)->fn(); });
    }
};
}  // namespace detail

/// The parameter groups a HostOptimizer's step reads (borrowed: valid
/// during that step only).
class OptimizerStepContext {
public:
    /// Wraps the C context of one step.
    explicit OptimizerStepContext(const fulmen_optimizer_step_context* ctx) noexcept : ctx_(ctx) {}

    /// The number of parameter groups.
    size_t group_count() const {
        return detail::read<size_t>([&](size_t* o) { return fulmen_optimizer_step_context_group_count(ctx_, o); });
    }
    /// The number of parameters of group `group`.
    size_t param_count(size_t group) const {
        return detail::read<size_t>(
            [&](size_t* o) { return fulmen_optimizer_step_context_param_count(ctx_, group, o); });
    }
    /// Parameter `index` of group `group`: shares storage and gradient with
    /// the model's parameter; update it in place (`add_`, `copy_`, ...).
    Tensor param(size_t group, size_t index) const {
        return Tensor::adopt(detail::make<fulmen_tensor>(
            [&](fulmen_tensor** o) { return fulmen_optimizer_step_context_param(ctx_, group, index, o); }));
    }
    /// Group `group`'s "lr" (as the schedulers set it), "weight_decay",
    /// "momentum" or "initial_lr".
    double get(size_t group, const std::string& name) const {
        return detail::read<double>(
            [&](double* o) { return fulmen_optimizer_step_context_get(ctx_, group, name.c_str(), o); });
    }
    /// Group `group`'s learning rate.
    double lr(size_t group) const { return get(group, "lr"); }

private:
    const fulmen_optimizer_step_context* ctx_;
};

/// An optimizer written in C++ (torch's `Optimizer` subclass with its own
/// `step`): derive, override `step`, and make a fulmen optimizer of it with
/// `Optimizer::host`, usable wherever a built-in one is (configure
/// optimizers, schedulers, checkpoints, resume). `step` runs under no_grad;
/// an exception it (or another override) throws fails the call that ran
/// it and is rethrown there.
class HostOptimizer {
public:
    virtual ~HostOptimizer() = default;

    /// `optimizer.step()`: updates the parameters from their gradients.
    virtual void step(OptimizerStepContext& ctx) = 0;
    /// Whether `zero_grad` is overridden (otherwise fulmen sets every
    /// gradient to none itself).
    virtual bool has_zero_grad() const { return false; }
    /// `optimizer.zero_grad(set_to_none)`, when `has_zero_grad`.
    virtual void zero_grad(bool /*set_to_none*/) {}
    /// The state saved with the param groups, as bytes (empty: none; at
    /// most FULMEN_MAX_OPTIMIZER_STATE).
    virtual std::vector<uint8_t> state_dict() { return {}; }
    /// Restores what `state_dict` gave (empty when nothing was saved).
    virtual void load_state_dict(const std::vector<uint8_t>& /*state*/) {}

private:
    friend class Optimizer;
    std::vector<uint8_t> state_;  // what state_dict last gave, read by fulmen
};

namespace detail {
/// Calls a HostOptimizer from fulmen (the userdata: a heap shared_ptr).
struct HostOptimizerCalls {
    static HostOptimizer& self(void* ud) { return **static_cast<std::shared_ptr<HostOptimizer>*>(ud); }
    static fulmen_error* step(void* ud, const fulmen_optimizer_step_context* ctx) noexcept {
        return guard_callback([&] {
            OptimizerStepContext c(ctx);
            self(ud).step(c);
        });
    }
    static fulmen_error* zero_grad(void* ud, bool set_to_none) noexcept {
        return guard_callback([&] { self(ud).zero_grad(set_to_none); });
    }
    static fulmen_error* state_dict(void* ud, const uint8_t** data, size_t* len, std::vector<uint8_t>& keep) noexcept {
        return guard_callback([&] {
            keep = self(ud).state_dict();
            *data = keep.data();
            *len = keep.size();
        });
    }
    static fulmen_error* load_state_dict(void* ud, const uint8_t* data, size_t len) noexcept {
        return guard_callback([&] {
            self(ud).load_state_dict(len == 0 ? std::vector<uint8_t>() : std::vector<uint8_t>(data, data + len));
        });
    }
    static void free(void* ud) noexcept { delete static_cast<std::shared_ptr<HostOptimizer>*>(ud); }
};
}  // namespace detail

/// ReduceLROnPlateau options, default-constructed with torch's defaults.
struct PlateauOptions : fulmen_plateau_options {
    /// torch's ReduceLROnPlateau defaults.
    PlateauOptions() : fulmen_plateau_options(fulmen_plateau_options_default()) {}
};

/// An optimizer (torch.optim semantics). Owns its `fulmen_optimizer` handle.
class Optimizer : public detail::Handle<fulmen_optimizer, fulmen_optimizer_free> {
public:
    /// An empty optimizer object (no handle).
    Optimizer() = default;

    /// Takes ownership of a `fulmen_optimizer` handle.
    static Optimizer adopt(fulmen_optimizer* handle) noexcept { return Optimizer(handle); }

    /// SGD over `model`'s parameters (and `extra` tensors).
    static Optimizer sgd(const Model& model, const SgdOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_sgd_new, model.get(), extra, o);
    }
    /// SGD over the tensors `params`.
    static Optimizer sgd(const TensorList& params, const SgdOptions& o = {}) {
        return create(fulmen_optimizer_sgd_new, nullptr, params, o);
    }
    /// Adam over `model`'s parameters (and `extra` tensors).
    static Optimizer adam(const Model& model, const AdamOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_adam_new, model.get(), extra, o);
    }
    /// Adam over the tensors `params`.
    static Optimizer adam(const TensorList& params, const AdamOptions& o = {}) {
        return create(fulmen_optimizer_adam_new, nullptr, params, o);
    }
    /// AdamW over `model`'s parameters (and `extra` tensors).
    static Optimizer adamw(const Model& model, const AdamOptions& o = AdamWOptions(), const TensorList& extra = {}) {
        return create(fulmen_optimizer_adamw_new, model.get(), extra, o);
    }
    /// AdamW over the tensors `params`.
    static Optimizer adamw(const TensorList& params, const AdamOptions& o = AdamWOptions()) {
        return create(fulmen_optimizer_adamw_new, nullptr, params, o);
    }
    /// RMSprop over `model`'s parameters (and `extra` tensors).
    static Optimizer rmsprop(const Model& model, const RmspropOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_rmsprop_new, model.get(), extra, o);
    }
    /// RMSprop over the tensors `params`.
    static Optimizer rmsprop(const TensorList& params, const RmspropOptions& o = {}) {
        return create(fulmen_optimizer_rmsprop_new, nullptr, params, o);
    }

    /// Adagrad over `model`'s parameters (and `extra` tensors).
    static Optimizer adagrad(const Model& model, const AdagradOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_adagrad_new, model.get(), extra, o);
    }
    /// Adagrad over the tensors `params`.
    static Optimizer adagrad(const TensorList& params, const AdagradOptions& o = {}) {
        return create(fulmen_optimizer_adagrad_new, nullptr, params, o);
    }
    /// Adamax over `model`'s parameters (and `extra` tensors).
    static Optimizer adamax(const Model& model, const AdamaxOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_adamax_new, model.get(), extra, o);
    }
    /// Adamax over the tensors `params`.
    static Optimizer adamax(const TensorList& params, const AdamaxOptions& o = {}) {
        return create(fulmen_optimizer_adamax_new, nullptr, params, o);
    }
    /// NAdam over `model`'s parameters (and `extra` tensors).
    static Optimizer nadam(const Model& model, const NAdamOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_nadam_new, model.get(), extra, o);
    }
    /// NAdam over the tensors `params`.
    static Optimizer nadam(const TensorList& params, const NAdamOptions& o = {}) {
        return create(fulmen_optimizer_nadam_new, nullptr, params, o);
    }
    /// RAdam over `model`'s parameters (and `extra` tensors).
    static Optimizer radam(const Model& model, const RAdamOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_radam_new, model.get(), extra, o);
    }
    /// RAdam over the tensors `params`.
    static Optimizer radam(const TensorList& params, const RAdamOptions& o = {}) {
        return create(fulmen_optimizer_radam_new, nullptr, params, o);
    }

    /// LBFGS over `model`'s parameters (and `extra` tensors); it steps only
    /// with a closure (`step(closure)`, or the trainer's automatic
    /// optimization as the only optimizer).
    static Optimizer lbfgs(const Model& model, const LbfgsOptions& o = {}, const TensorList& extra = {}) {
        return create(fulmen_optimizer_lbfgs_new, model.get(), extra, o);
    }
    /// LBFGS over the tensors `params`.
    static Optimizer lbfgs(const TensorList& params, const LbfgsOptions& o = {}) {
        return create(fulmen_optimizer_lbfgs_new, nullptr, params, o);
    }

    /// An optimizer whose step is `impl`'s (shared: fulmen keeps it alive
    /// as long as the optimizer) over `model`'s parameters (and `extra`
    /// tensors), one param group with learning rate `lr`.
    static Optimizer host(std::shared_ptr<HostOptimizer> impl, const Model& model, double lr,
                          const TensorList& extra = {}) {
        return make_host(std::move(impl), model.get(), extra, lr);
    }
    /// A host optimizer over the tensors `params`.
    static Optimizer host(std::shared_ptr<HostOptimizer> impl, const TensorList& params, double lr) {
        return make_host(std::move(impl), nullptr, params, lr);
    }

    /// Saves the state (`state_dict()`) at `path`, without a trainer.
    void save_state(const std::string& path) const { check(fulmen_optimizer_save_state(get(), path.c_str())); }
    /// Loads a state `save_state` wrote for an optimizer of this kind and
    /// groups; on error nothing changes.
    void load_state(const std::string& path) {
        detail::clear_pending_exception();
        check(fulmen_optimizer_load_state(get(), path.c_str()));
    }

    /// Adds a parameter group of `model`'s parameters; `lr` < 0 keeps the default.
    Optimizer& add_param_group(const Model& model, double lr = -1) { return add_group(model.get(), {}, lr); }
    /// Adds a parameter group of tensors; `lr` < 0 keeps the default.
    Optimizer& add_param_group(const TensorList& params, double lr = -1) { return add_group(nullptr, params, lr); }

    /// Updates every parameter that has a gradient.
    void step() { check(fulmen_optimizer_step(get())); }
    /// torch's `fused=True` for SGD, Adam, AdamW and Adagrad: one libtorch kernel
    /// per param group and device (saved with the state, as in torch).
    Optimizer& set_fused(bool fused = true) {
        check(fulmen_optimizer_set_fused(get(), fused));
        return *this;
    }
    /// Whether the updates are fused.
    bool fused() const { return detail::read<bool>([&](bool* o) { return fulmen_optimizer_fused(get(), o); }); }
    /// torch's `foreach` for every kind but LBFGS: a few libtorch
    /// `_foreach_*` kernels per param group and device (an explicit choice
    /// is saved with the state, as in torch).
    Optimizer& set_foreach(Foreach choice) {
        check(fulmen_optimizer_set_foreach(get(), static_cast<int32_t>(choice)));
        return *this;
    }
    /// The foreach choice.
    Foreach foreach() const {
        return static_cast<Foreach>(
            detail::read<int32_t>([&](int32_t* o) { return fulmen_optimizer_foreach(get(), o); }));
    }
    /// torch's `step(closure)`: `closure` computes the loss at the current
    /// parameters, runs its backward and returns the loss (a `double`);
    /// the optimizer calls it as often as it needs (LBFGS: up to max_eval
    /// times, once more with the line search), each time with every
    /// gradient reset first. It must not use
    /// this optimizer; an exception it throws ends the step and is
    /// rethrown here. Returns the first evaluation's loss.
    template <class Fn>
    double step(Fn&& closure) {
        detail::ClosureCall<Fn> call{closure};
        double first = 0;
        detail::clear_pending_exception();
        check(fulmen_optimizer_step_closure(get(), &detail::ClosureCall<Fn>::call, &call, &first));
        return first;
    }
    /// Clears every parameter's gradient.
    void zero_grad() { check(fulmen_optimizer_zero_grad(get())); }
    /// The learning rate of parameter group 0.
    double lr() const { return detail::read<double>([&](double* o) { return fulmen_optimizer_get_lr(get(), o); }); }
    /// Sets the learning rate of every group.
    void set_lr(double lr) { check(fulmen_optimizer_set_lr(get(), lr)); }

    /// The number of parameter groups.
    size_t param_group_count() const {
        return detail::read<size_t>([&](size_t* o) { return fulmen_optimizer_param_group_count(get(), o); });
    }
    /// Group `group`'s hyperparameter `name` by torch's key: "lr",
    /// "weight_decay", "momentum" (SGD, RMSprop) or "betas.0" / "beta1"
    /// (the Adam family), and the kind's other constants, kept per group:
    /// "betas.1" / "beta2", "eps", "amsgrad", "alpha", "dampening", ...
    /// (fulmen_optimizer_param_group_get lists them; flags read 0 or 1).
    double param_group(size_t group, const std::string& name) const {
        return detail::read<double>(
            [&](double* o) { return fulmen_optimizer_param_group_get(get(), group, name.c_str(), o); });
    }
    /// Sets group `group`'s hyperparameter `name` (as `param_group`), such
    /// as "weight_decay" 0 for biases and norms or "eps" 1e-6 for one group;
    /// checked as torch's constructor checks options.
    Optimizer& set_param_group(size_t group, const std::string& name, double value) {
        check(fulmen_optimizer_param_group_set(get(), group, name.c_str(), value));
        return *this;
    }

private:
    explicit Optimizer(fulmen_optimizer* owned) noexcept : Handle(owned) {}

    template <class CFn, class Opts>
    static Optimizer create(CFn fn, const fulmen_model* model, const TensorList& params, const Opts& o) {
        std::vector<const fulmen_tensor*> h = detail::handles(params);
        return Optimizer(detail::make<fulmen_optimizer>(
            [&](fulmen_optimizer** out) { return fn(model, h.data(), h.size(), &o, out); }));
    }
    static Optimizer make_host(std::shared_ptr<HostOptimizer> impl, const fulmen_model* model,
                               const TensorList& params, double lr) {
        if (!impl) throw Error(FULMEN_CODE_NULL_ARGUMENT, "Optimizer::host: impl is null");
        std::vector<const fulmen_tensor*> h = detail::handles(params);
        auto box = std::make_unique<std::shared_ptr<HostOptimizer>>(std::move(impl));
        fulmen_optimizer_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = box.get();
        vt.userdata_free = &detail::HostOptimizerCalls::free;
        vt.step = &detail::HostOptimizerCalls::step;
        if ((*box)->has_zero_grad()) vt.zero_grad = &detail::HostOptimizerCalls::zero_grad;
        vt.state_dict = &state_dict_cb;
        vt.load_state_dict = &detail::HostOptimizerCalls::load_state_dict;
        Optimizer out(detail::make<fulmen_optimizer>(
            [&](fulmen_optimizer** o) { return fulmen_optimizer_host_new(&vt, model, h.data(), h.size(), lr, o); }));
        box.release();  // fulmen owns it now and calls userdata_free once
        return out;
    }
    static fulmen_error* state_dict_cb(void* ud, const uint8_t** data, size_t* len) noexcept {
        HostOptimizer& self = detail::HostOptimizerCalls::self(ud);
        return detail::HostOptimizerCalls::state_dict(ud, data, len, self.state_);
    }
    Optimizer& add_group(const fulmen_model* model, const TensorList& params, double lr) {
        std::vector<const fulmen_tensor*> h = detail::handles(params);
        check(fulmen_optimizer_add_param_group(get(), model, h.data(), h.size(), lr));
        return *this;
    }
};

/// A learning-rate scheduler bound to the optimizer it was made for.
class Scheduler : public detail::Handle<fulmen_scheduler, fulmen_scheduler_free> {
public:
    /// An empty scheduler object (no handle).
    Scheduler() = default;

    /// Takes ownership of a `fulmen_scheduler` handle.
    static Scheduler adopt(fulmen_scheduler* handle) noexcept { return Scheduler(handle); }

    /// StepLR: lr *= gamma every `step_size` steps.
    static Scheduler step_lr(Optimizer& opt, int64_t step_size, double gamma = 0.1) {
        return make([&](fulmen_scheduler** o) { return fulmen_scheduler_step_lr_new(opt.get(), step_size, gamma, o); });
    }
    /// MultiStepLR: lr *= gamma at each milestone.
    static Scheduler multi_step_lr(Optimizer& opt, const std::vector<int64_t>& milestones, double gamma = 0.1) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_multi_step_lr_new(opt.get(), milestones.data(), milestones.size(), gamma, o);
        });
    }
    /// ExponentialLR: lr *= gamma every step.
    static Scheduler exponential_lr(Optimizer& opt, double gamma) {
        return make([&](fulmen_scheduler** o) { return fulmen_scheduler_exponential_lr_new(opt.get(), gamma, o); });
    }
    /// CosineAnnealingLR(t_max, eta_min).
    static Scheduler cosine_lr(Optimizer& opt, int64_t t_max, double eta_min = 0) {
        return make([&](fulmen_scheduler** o) { return fulmen_scheduler_cosine_lr_new(opt.get(), t_max, eta_min, o); });
    }
    /// LinearLR(start_factor, end_factor, total_iters).
    static Scheduler linear_lr(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_linear_lr_new(opt.get(), start_factor, end_factor, total_iters, o);
        });
    }
    /// ConstantLR: lr * factor for the first `total_iters` steps, then lr.
    static Scheduler constant_lr(Optimizer& opt, double factor = 1.0 / 3, int64_t total_iters = 5) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_constant_lr_new(opt.get(), factor, total_iters, o);
        });
    }
    /// PolynomialLR: lr * (1 - step / total_iters)^power, down to 0.
    static Scheduler polynomial_lr(Optimizer& opt, int64_t total_iters = 5, double power = 1.0) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_polynomial_lr_new(opt.get(), total_iters, power, o);
        });
    }
    /// SWALR(swa_lrs, anneal_epochs, linear, last_epoch): anneals each
    /// group's lr to its SWA lr (one for all, or one per group).
    static Scheduler swa_lr(Optimizer& opt, const std::vector<double>& swa_lrs, int64_t anneal_epochs = 10,
                            bool linear_anneal = false, int64_t last_epoch = -1) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_swa_lr_new(opt.get(), swa_lrs.data(), swa_lrs.size(), anneal_epochs,
                                               linear_anneal, last_epoch, o);
        });
    }
    /// CosineAnnealingWarmRestarts(t_0, t_mult, eta_min) (SGDR).
    static Scheduler cosine_warm_restarts(Optimizer& opt, int64_t t_0, int64_t t_mult = 1, double eta_min = 0) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_cosine_warm_restarts_new(opt.get(), t_0, t_mult, eta_min, o);
        });
    }
    /// SequentialLR: `schedulers[i]` (all made for `opt`) runs from
    /// `milestones[i - 1]`; they are consumed on success (left as they were
    /// on failure).
    static Scheduler sequential_lr(Optimizer& opt, std::vector<Scheduler>&& schedulers,
                                   const std::vector<int64_t>& milestones) {
        std::vector<fulmen_scheduler*> h;
        h.reserve(schedulers.size());
        for (auto& s : schedulers) h.push_back(s.get());
        Scheduler out = make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_sequential_lr_new(opt.get(), h.data(), h.size(), milestones.data(), milestones.size(),
                                                      o);
        });
        for (auto& s : schedulers) s.release();
        return out;
    }
    /// ChainedScheduler: every one of `schedulers` (all made for `opt`,
    /// none stepped) steps at each step, from the lr the one before wrote,
    /// so their factors compose; they are consumed on success (left as
    /// they were on failure).
    static Scheduler chained(Optimizer& opt, std::vector<Scheduler>&& schedulers) {
        std::vector<fulmen_scheduler*> h;
        h.reserve(schedulers.size());
        for (auto& s : schedulers) h.push_back(s.get());
        Scheduler out =
            make([&](fulmen_scheduler** o) { return fulmen_scheduler_chained_new(opt.get(), h.data(), h.size(), o); });
        for (auto& s : schedulers) s.release();
        return out;
    }
    /// OneCycleLR with `options`.
    static Scheduler one_cycle_lr(Optimizer& opt, const OneCycleOptions& options) {
        return make([&](fulmen_scheduler** o) { return fulmen_scheduler_one_cycle_lr_new(opt.get(), &options, o); });
    }
    /// OneCycleLR with a peak learning rate per param group (torch's
    /// `max_lr` as a list; `options.max_lr` is ignored).
    static Scheduler one_cycle_lr(Optimizer& opt, const OneCycleOptions& options, const std::vector<double>& max_lrs) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_one_cycle_lr_max_lrs_new(opt.get(), &options, max_lrs.data(), max_lrs.size(), o);
        });
    }
    /// CyclicLR with `options` (usually stepped every batch).
    static Scheduler cyclic_lr(Optimizer& opt, const CyclicLrOptions& options) {
        return make([&](fulmen_scheduler** o) { return fulmen_scheduler_cyclic_lr_new(opt.get(), &options, o); });
    }
    /// CyclicLR with each param group's own range (torch's `base_lr` and
    /// `max_lr` as lists; an empty list: the options' value for every group).
    static Scheduler cyclic_lr(Optimizer& opt, const CyclicLrOptions& options, const std::vector<double>& base_lrs,
                               const std::vector<double>& max_lrs) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_cyclic_lr_ranges_new(opt.get(), &options, base_lrs.data(), base_lrs.size(),
                                                         max_lrs.data(), max_lrs.size(), o);
        });
    }
    /// LambdaLR: lr = initial_lr * factor(step, group).
    static Scheduler lambda_lr(Optimizer& opt, LrLambda factor) {
        return with_lambda(fulmen_scheduler_lambda_lr_new, opt, std::move(factor));
    }
    /// MultiplicativeLR: from step 1 on, lr *= factor(step, group).
    static Scheduler multiplicative_lr(Optimizer& opt, LrLambda factor) {
        return with_lambda(fulmen_scheduler_multiplicative_lr_new, opt, std::move(factor));
    }
    /// ReduceLROnPlateau with `options`; step it with a metric.
    static Scheduler reduce_on_plateau(Optimizer& opt, const PlateauOptions& options = {}) {
        return make([&](fulmen_scheduler** o) { return fulmen_scheduler_reduce_on_plateau_new(opt.get(), &options, o); });
    }
    /// ReduceLROnPlateau with a lower bound per param group (torch's
    /// `min_lr` as a list; `options.min_lr` is ignored).
    static Scheduler reduce_on_plateau(Optimizer& opt, const PlateauOptions& options, const std::vector<double>& min_lrs) {
        return make([&](fulmen_scheduler** o) {
            return fulmen_scheduler_reduce_on_plateau_min_lrs_new(opt.get(), &options, min_lrs.data(), min_lrs.size(), o);
        });
    }

    /// Saves the state (`state_dict()`) at `path`, without a trainer.
    void save_state(const std::string& path) const { check(fulmen_scheduler_save_state(get(), path.c_str())); }
    /// Loads a state `save_state` wrote for a scheduler of this kind; the
    /// optimizer's lr changes at the next step. On error nothing changes.
    void load_state(const std::string& path) { check(fulmen_scheduler_load_state(get(), path.c_str())); }

    /// Advances one step, setting the new lr in `opt` (the one it was made
    /// for); `metric` feeds ReduceLROnPlateau and is ignored otherwise.
    void step(Optimizer& opt, double metric = std::numeric_limits<double>::quiet_NaN()) {
        detail::clear_pending_exception();
        check(fulmen_scheduler_step(get(), opt.get(), metric));
    }

private:
    explicit Scheduler(fulmen_scheduler* owned) noexcept : Handle(owned) {}

    template <class Fn>
    static Scheduler make(Fn&& fn) {
        return Scheduler(detail::make<fulmen_scheduler>(std::forward<Fn>(fn)));
    }

    template <class New>
    static Scheduler with_lambda(New create, Optimizer& opt, LrLambda factor) {
        auto box = std::make_unique<detail::LrLambdaBox>(detail::LrLambdaBox{std::move(factor)});
        detail::clear_pending_exception();
        Scheduler s = make([&](fulmen_scheduler** o) {
            return create(opt.get(), &detail::LrLambdaBox::call, box.get(), &detail::LrLambdaBox::free, o);
        });
        box.release();  // fulmen owns it now and calls userdata_free once
        return s;
    }
};

/// Scales `model`'s gradients to a joint norm of at most `max_norm`;
/// returns the norm before clipping (norm_type INFINITY for max-norm).
inline double clip_grad_norm(Model& model, double max_norm, double norm_type = 2.0) {
    double total = 0;
    check(fulmen_clip_grad_norm(model.get(), max_norm, norm_type, &total));
    return total;
}

/// Clamps `model`'s gradients into [-value, value].
inline void clip_grad_value(Model& model, double value) { check(fulmen_clip_grad_value(model.get(), value)); }

}  // namespace fulmen

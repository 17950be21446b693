// fulmen C++ binding: LightningModule from lambdas, trainer options, trainer.
#pragma once

#include "accelerator.hpp"
#include "checkpoint_io.hpp"
#include "data.hpp"
#include "datamodule.hpp"
#include "hooks.hpp"
#include "loggers.hpp"
#include "optim.hpp"
#include "precision.hpp"
#include "strategy.hpp"
#include "trainer_options.hpp"
#include "value.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace fulmen {

/// Weight averaging options, default-constructed as Lightning's
/// EMAWeightAveraging (decay 0.999, every step, buffers averaged); `ema`
/// false averages equally (SWA).
struct WeightAveragingOptions : fulmen_weight_averaging_options {
    /// Lightning's EMAWeightAveraging defaults.
    WeightAveragingOptions() : fulmen_weight_averaging_options(fulmen_weight_averaging_options_default()) {}
};

/// BackboneFinetuning options, default-constructed with Lightning's
/// (unfreeze at epoch 10, lr factor 2, initial ratio 0.1, aligned, BatchNorms
/// trained); the backbone's path is given to add_backbone_finetuning.
struct BackboneFinetuningOptions : fulmen_backbone_finetuning_options {
    /// Lightning's BackboneFinetuning defaults.
    BackboneFinetuningOptions()
        : fulmen_backbone_finetuning_options(fulmen_backbone_finetuning_options_default()) {}
};

/// BackboneFinetuning's `lambda_func`: the factor of the backbone's lr for
/// an epoch (each epoch start after the unfreeze asks for its epoch + 1,
/// as Lightning does); an exception fails the fit (and is rethrown there).
using BackboneLambda = std::function<double(int64_t epoch)>;

namespace detail {
/// Calls a C++ BackboneLambda from fulmen.
struct BackboneLambdaBox {
    BackboneLambda fn;
    static fulmen_error* call(void* ud, int64_t epoch, double* out) noexcept {
        return guard_callback([&] { *out = static_cast<BackboneLambdaBox*>(ud)->fn(epoch); });
    }
    static void free(void* ud) noexcept { delete static_cast<BackboneLambdaBox*>(ud); }
};
}  // namespace detail

/// StochasticWeightAveraging options, default-constructed with Lightning's
/// (from 0.8 of max_epochs, 10 cosine annealing epochs, the average on the
/// CPU) and the SWA lr of every param group; per-group lrs are given to
/// add_stochastic_weight_averaging.
struct StochasticWeightAveragingOptions : fulmen_stochastic_weight_averaging_options {
    /// Lightning's StochasticWeightAveraging defaults with `swa_lr`.
    explicit StochasticWeightAveragingOptions(double swa_lr)
        : fulmen_stochastic_weight_averaging_options(fulmen_stochastic_weight_averaging_options_default(swa_lr)) {}
};

/// The arguments of Lightning's ModelPruning (a `fulmen_model_pruning`):
/// `pruning_fn` "l1_unstructured" or "random_unstructured" and `amount`
/// the fraction of the entries left that each pruning removes, the rest
/// Lightning's defaults (every "weight" and "bias", global, at each
/// training epoch end, the lottery ticket reset, permanent at the end).
/// The setters chain; Trainer::add_model_pruning copies the arguments.
class ModelPruning : public detail::Handle<fulmen_model_pruning, fulmen_model_pruning_free> {
public:
    /// Lightning's defaults with `pruning_fn` and a fractional `amount`.
    ModelPruning(const std::string& pruning_fn, double amount)
        : Handle(detail::make<fulmen_model_pruning>([&](fulmen_model_pruning** o) {
              return fulmen_model_pruning_new(pruning_fn.c_str(), amount, o);
          })) {}
    /// Each pruning removes `count` entries (Lightning's integer `amount`).
    ModelPruning& amount_count(int64_t count) {
        check(fulmen_model_pruning_set_amount_count(get(), count));
        return *this;
    }
    /// The parameters' own names pruned in every module: "weight" and / or
    /// "bias" (empty: both).
    ModelPruning& parameter_names(const std::vector<std::string>& names) {
        std::vector<const char*> c = c_names(names);
        check(fulmen_model_pruning_set_parameter_names(get(), c.data(), c.size()));
        return *this;
    }
    /// Exactly these parameters, by their state_dict names ("0.weight"),
    /// in this order (Lightning's `parameters_to_prune`; empty: the default).
    ModelPruning& parameters_to_prune(const std::vector<std::string>& names) {
        std::vector<const char*> c = c_names(names);
        check(fulmen_model_pruning_set_parameters_to_prune(get(), c.data(), c.size()));
        return *this;
    }
    /// Prune over all the parameters at once (default) or each by itself.
    ModelPruning& use_global_unstructured(bool on) {
        check(fulmen_model_pruning_set_use_global_unstructured(get(), on));
        return *this;
    }
    /// Whether to prune at all (default true).
    ModelPruning& apply_pruning(bool on) {
        check(fulmen_model_pruning_set_apply_pruning(get(), on));
        return *this;
    }
    /// Stop masking at the end of training (default true).
    ModelPruning& make_pruning_permanent(bool on) {
        check(fulmen_model_pruning_set_make_pruning_permanent(get(), on));
        return *this;
    }
    /// Put the kept entries back to their first values after each pruning
    /// (default true).
    ModelPruning& use_lottery_ticket_hypothesis(bool on) {
        check(fulmen_model_pruning_set_use_lottery_ticket_hypothesis(get(), on));
        return *this;
    }
    /// Prune at each training epoch end (default) or each validation end.
    ModelPruning& prune_on_train_epoch_end(bool on) {
        check(fulmen_model_pruning_set_prune_on_train_epoch_end(get(), on));
        return *this;
    }
    /// 0 silent, 1 the sparsity on stderr after each pruning, 2 per parameter too.
    ModelPruning& verbose(int32_t level) {
        check(fulmen_model_pruning_set_verbose(get(), level));
        return *this;
    }

private:
    static std::vector<const char*> c_names(const std::vector<std::string>& names) {
        std::vector<const char*> c;
        c.reserve(names.size());
        for (const std::string& n : names) c.push_back(n.c_str());
        return c;
    }
};

/// One predict batch, as a prediction writer's batch function gets it.
struct BatchPrediction {
    /// What predict_step returned (nullopt: nothing).
    std::optional<Tensor> prediction;
    /// The dataset indices of the batch's samples (empty when the loader
    /// cannot tell: a host iterator).
    std::vector<int64_t> batch_indices;
    /// The batch.
    std::vector<Tensor> batch;
    /// The batch's index in its loader.
    int64_t batch_idx = 0;
    /// The loader's index.
    size_t dataloader_idx = 0;
};

/// One loader's predictions of a predict epoch, as a prediction writer's
/// epoch function gets them.
struct EpochPredictions {
    /// The loader's index.
    size_t dataloader_idx = 0;
    /// Each batch's prediction in order (nullopt: none).
    std::vector<std::optional<Tensor>> predictions;
    /// Each batch's samples' dataset indices (empty when unknown).
    std::vector<std::vector<int64_t>> batch_indices;
};

/// Lightning's `write_on_batch_end`; an exception fails predict (and is
/// rethrown there).
using WriteOnBatchEnd = std::function<void(const BatchPrediction&)>;
/// Lightning's `write_on_epoch_end`, once per loader; an exception fails
/// predict (and is rethrown there).
using WriteOnEpochEnd = std::function<void(const EpochPredictions&)>;

/// One predict batch with its whole prediction, as a value prediction
/// writer's batch function gets it.
struct BatchPredictionValue {
    /// The prediction: None, a tensor, or the tuple or dict of tensors
    /// predict_step made.
    Value prediction;
    /// The dataset indices of the batch's samples (empty when unknown).
    std::vector<int64_t> batch_indices;
    /// The batch.
    std::vector<Tensor> batch;
    /// The batch's index in its loader.
    int64_t batch_idx = 0;
    /// The loader's index.
    size_t dataloader_idx = 0;
};

/// One loader's whole predictions of a predict epoch, as a value
/// prediction writer's epoch function gets them.
struct EpochPredictionValues {
    /// The loader's index.
    size_t dataloader_idx = 0;
    /// Each batch's prediction in order (as BatchPredictionValue's).
    std::vector<Value> predictions;
    /// Each batch's samples' dataset indices (empty when unknown).
    std::vector<std::vector<int64_t>> batch_indices;
};

/// `write_on_batch_end` with the whole prediction; an exception fails
/// predict (and is rethrown there).
using WriteValueOnBatchEnd = std::function<void(const BatchPredictionValue&)>;
/// `write_on_epoch_end` with the whole predictions, once per loader.
using WriteValuesOnEpochEnd = std::function<void(const EpochPredictionValues&)>;

namespace detail {
/// Splits the dataset indices of an epoch's batches, `counts[i]` each.
inline std::vector<std::vector<int64_t>> split_indices(const int64_t* indices, const size_t* counts, size_t n) {
    std::vector<std::vector<int64_t>> out;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        std::vector<int64_t> mine;
        if (indices != nullptr) mine.assign(indices + at, indices + at + counts[i]);
        at += counts[i];
        out.push_back(std::move(mine));
    }
    return out;
}

/// Calls a C++ value prediction writer from fulmen.
struct PredictionValueWriterBox {
    WriteValueOnBatchEnd on_batch;
    WriteValuesOnEpochEnd on_epoch;

    static fulmen_error* batch(void* ud, const fulmen_value* prediction, const int64_t* indices, size_t n_indices,
                               const fulmen_tensor* const* batch, size_t batch_len, int64_t batch_idx,
                               size_t dataloader_idx) noexcept {
        return guard_callback([&] {
            BatchPredictionValue p;
            // Lent for the call: kept, so the C++ object owns it.
            p.prediction = Value::adopt(const_cast<fulmen_value*>(prediction));
            if (indices != nullptr) p.batch_indices.assign(indices, indices + n_indices);
            for (size_t i = 0; i < batch_len; i++) {
                p.batch.push_back(Tensor::make([&](fulmen_tensor** o) { return fulmen_tensor_share(batch[i], o); }));
            }
            p.batch_idx = batch_idx;
            p.dataloader_idx = dataloader_idx;
            static_cast<PredictionValueWriterBox*>(ud)->on_batch(p);
        });
    }
    static fulmen_error* epoch(void* ud, size_t dataloader_idx, const fulmen_value* predictions, size_t n_batches,
                               const int64_t* indices, const size_t* counts) noexcept {
        return guard_callback([&] {
            EpochPredictionValues e;
            e.dataloader_idx = dataloader_idx;
            Value list = Value::adopt(const_cast<fulmen_value*>(predictions));
            for (size_t i = 0; i < n_batches; i++) e.predictions.push_back(list[i]);
            e.batch_indices = split_indices(indices, counts, n_batches);
            static_cast<PredictionValueWriterBox*>(ud)->on_epoch(e);
        });
    }
    static void free(void* ud) noexcept { delete static_cast<PredictionValueWriterBox*>(ud); }
};

/// Calls a C++ prediction writer from fulmen.
struct PredictionWriterBox {
    WriteOnBatchEnd on_batch;
    WriteOnEpochEnd on_epoch;

    static Tensor share(const fulmen_tensor* t) {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_tensor_share(t, o); });
    }
    static fulmen_error* batch(void* ud, const fulmen_tensor* prediction, const int64_t* indices, size_t n_indices,
                               const fulmen_tensor* const* batch, size_t batch_len, int64_t batch_idx,
                               size_t dataloader_idx) noexcept {
        return guard_callback([&] {
            BatchPrediction p;
            if (prediction != nullptr) p.prediction = share(prediction);
            if (indices != nullptr) p.batch_indices.assign(indices, indices + n_indices);
            for (size_t i = 0; i < batch_len; i++) p.batch.push_back(share(batch[i]));
            p.batch_idx = batch_idx;
            p.dataloader_idx = dataloader_idx;
            static_cast<PredictionWriterBox*>(ud)->on_batch(p);
        });
    }
    static fulmen_error* epoch(void* ud, size_t dataloader_idx, const fulmen_tensor* const* predictions,
                               size_t n_batches, const int64_t* indices, const size_t* counts) noexcept {
        return guard_callback([&] {
            EpochPredictions e;
            e.dataloader_idx = dataloader_idx;
            for (size_t i = 0; i < n_batches; i++) {
                if (predictions[i] != nullptr) {
                    e.predictions.emplace_back(share(predictions[i]));
                } else {
                    e.predictions.emplace_back(std::nullopt);
                }
            }
            e.batch_indices = split_indices(indices, counts, n_batches);
            static_cast<PredictionWriterBox*>(ud)->on_epoch(e);
        });
    }
    static void free(void* ud) noexcept { delete static_cast<PredictionWriterBox*>(ud); }
};

/// Adds the writer in `box` through `add`, a C adder called as
/// `add(interval, on_batch, on_epoch, userdata, userdata_free)`: the
/// trainer's or a configure_callbacks list's. Empty functions go as NULL.
template <class BatchFn, class EpochFn, class Box, class Add>
void add_writer_box(Add add, const std::string& write_interval, Box box_value) {
    auto box = std::make_unique<Box>(std::move(box_value));
    BatchFn on_batch = nullptr;
    EpochFn on_epoch = nullptr;
    if (box->on_batch) on_batch = &Box::batch;
    if (box->on_epoch) on_epoch = &Box::epoch;
    check(add(write_interval.c_str(), on_batch, on_epoch, box.get(), &Box::free));
    box.release();  // fulmen owns it now and calls userdata_free once
}

/// Adds a prediction writer of tensors through `add` (see add_writer_box).
template <class Add>
void add_prediction_writer(Add add, const std::string& write_interval, WriteOnBatchEnd write_on_batch_end,
                           WriteOnEpochEnd write_on_epoch_end) {
    add_writer_box<fulmen_prediction_batch_fn, fulmen_prediction_epoch_fn>(
        add, write_interval, PredictionWriterBox{std::move(write_on_batch_end), std::move(write_on_epoch_end)});
}

/// Adds a prediction writer of whole values through `add`.
template <class Add>
void add_prediction_value_writer(Add add, const std::string& write_interval, WriteValueOnBatchEnd write_on_batch_end,
                                 WriteValuesOnEpochEnd write_on_epoch_end) {
    add_writer_box<fulmen_prediction_value_batch_fn, fulmen_prediction_value_epoch_fn>(
        add, write_interval,
        PredictionValueWriterBox{std::move(write_on_batch_end), std::move(write_on_epoch_end)});
}

/// Adds BackboneFinetuning with `lambda_func` through `add`, called as
/// `add(options, call, userdata, userdata_free)`.
template <class Add>
void add_backbone_lambda(Add add, const std::string& backbone, BackboneLambda lambda_func,
                         BackboneFinetuningOptions options) {
    options.backbone = backbone.c_str();
    auto box = std::make_unique<BackboneLambdaBox>(BackboneLambdaBox{std::move(lambda_func)});
    check(add(&options, &BackboneLambdaBox::call, box.get(), &BackboneLambdaBox::free));
    box.release();  // fulmen owns it now and calls userdata_free once
}
}  // namespace detail

/// Options of the batch size finder, default-constructed with Lightning's
/// (power mode, 3 steps per trial from 2, at most 25 trials, 5% margin in
/// binsearch, at most 8192).
struct BatchSizeFinderOptions : fulmen_batch_size_finder_options {
    /// Lightning's defaults.
    BatchSizeFinderOptions() : fulmen_batch_size_finder_options(fulmen_batch_size_finder_options_default()) {}
};

/// Options of a learning-rate range test, default-constructed with
/// Lightning's (1e-8 to 1 over 100 steps, exponential, stop at 4x).
struct LrFindOptions : fulmen_lr_find_options {
    /// Lightning's defaults.
    LrFindOptions() : fulmen_lr_find_options(fulmen_lr_find_options_default()) {}
};

/// What a range test found: each step's learning rate and smoothed loss.
class LrFindResult : public detail::Handle<fulmen_lr_find_result, fulmen_lr_find_result_free> {
public:
    /// An empty result (no handle).
    LrFindResult() = default;
    /// Takes ownership of a `fulmen_lr_find_result` handle.
    static LrFindResult adopt(fulmen_lr_find_result* handle) noexcept { return LrFindResult(handle); }
    /// The learning rate of each step.
    std::vector<double> lrs() const { return points().first; }
    /// The smoothed loss after each step.
    std::vector<double> losses() const { return points().second; }
    /// Lightning's suggestion: the learning rate where the loss falls
    /// fastest (nullopt with too few points).
    std::optional<double> suggestion(size_t skip_begin = 10, size_t skip_end = 1) const {
        double lr = 0;
        bool found = false;
        check(fulmen_lr_find_result_suggestion(get(), skip_begin, skip_end, &lr, &found));
        return found ? std::optional<double>(lr) : std::nullopt;
    }

private:
    explicit LrFindResult(fulmen_lr_find_result* h) noexcept : Handle(h) {}
    std::pair<std::vector<double>, std::vector<double>> points() const {
        size_t n = 0;
        check(fulmen_lr_find_result_points(get(), nullptr, nullptr, 0, &n));
        std::vector<double> lrs(n), losses(n);
        if (n > 0) check(fulmen_lr_find_result_points(get(), lrs.data(), losses.data(), n, &n));
        return {lrs, losses};
    }
};

/// Which loop is running (the C `fulmen_stage`).
enum class Stage : int32_t {
    Train = FULMEN_STAGE_TRAIN,
    Validate = FULMEN_STAGE_VALIDATE,
    Test = FULMEN_STAGE_TEST,
    Predict = FULMEN_STAGE_PREDICT,
};

/// When a scheduler steps (the C `fulmen_interval`).
enum class Interval : int32_t {
    Step = FULMEN_INTERVAL_STEP,
    Epoch = FULMEN_INTERVAL_EPOCH,
};

/// How clip_gradients clips (Lightning's gradient_clip_algorithm).
enum class ClipAlgorithm : int32_t {
    /// Scale the gradients so their joint 2-norm is at most the value.
    Norm = FULMEN_CLIP_NORM,
    /// Clamp every gradient element into [-value, value].
    Value = FULMEN_CLIP_VALUE,
};

/// Flags of StepContext::log, combined with `|`.
struct Log {
    static constexpr uint32_t on_step = FULMEN_LOG_ON_STEP;      ///< Record every step's value.
    static constexpr uint32_t on_epoch = FULMEN_LOG_ON_EPOCH;    ///< Record the epoch's reduction (mean by default).
    static constexpr uint32_t prog_bar = FULMEN_LOG_PROG_BAR;    ///< Show in the progress output.
    static constexpr uint32_t sync_dist = FULMEN_LOG_SYNC_DIST;  ///< Reduce over ranks first (DDP's sync_dist).
    static constexpr uint32_t no_logger = FULMEN_LOG_NO_LOGGER;  ///< Keep out of the loggers (logger=False).
    static constexpr uint32_t rank_zero_only = FULMEN_LOG_RANK_ZERO_ONLY;  ///< Logged on rank 0 only: never synced.
    static constexpr uint32_t reduce_sum = FULMEN_LOG_REDUCE_SUM;  ///< reduce_fx="sum".
    static constexpr uint32_t reduce_max = FULMEN_LOG_REDUCE_MAX;  ///< reduce_fx="max".
    static constexpr uint32_t reduce_min = FULMEN_LOG_REDUCE_MIN;  ///< reduce_fx="min".
    /// on_step left to the step function's or hook's default (on_step=None).
    static constexpr uint32_t default_step = FULMEN_LOG_DEFAULT_STEP;
    /// on_epoch left to the default (on_epoch=None).
    static constexpr uint32_t default_epoch = FULMEN_LOG_DEFAULT_EPOCH;
    /// Both levels left to the defaults (as flags naming neither level).
    static constexpr uint32_t defaults = FULMEN_LOG_DEFAULT;
    /// No `/dataloader_idx_N` suffix with several loaders (add_dataloader_idx=False).
    static constexpr uint32_t no_dataloader_idx = FULMEN_LOG_NO_DATALOADER_IDX;
    /// The flag bits naming the group sync_dist reduces over (Lightning's
    /// sync_dist_group), `group` an id from HookContext::new_group:
    /// `Log::sync_dist | Log::group(g)`.
    static constexpr uint32_t group(uint32_t group_id) {
        return (group_id << FULMEN_LOG_GROUP_SHIFT) & FULMEN_LOG_GROUP_MASK;
    }
};

/// The batch a step callback receives (borrowed: valid during the call).
class Batch {
public:
    /// Wraps the borrowed C batch.
    explicit Batch(const fulmen_batch* batch) noexcept : batch_(batch) {}
    /// Number of tensors (e.g. 2 for inputs and targets).
    size_t size() const { return detail::read<size_t>([&](size_t* o) { return fulmen_batch_len(batch_, o); }); }
    /// The batch as a tuple Value (the `batch` of a scripted training_step).
    Value to_value() const { return Value::from_batch(batch_); }
    /// Tensor `index`, as a new owning Tensor.
    Tensor get(size_t index) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_batch_get(batch_, index, o); });
    }
    /// Tensor `index` (same as get).
    Tensor operator[](size_t index) const { return get(index); }
    /// The C batch.
    const fulmen_batch* c_batch() const noexcept { return batch_; }

private:
    const fulmen_batch* batch_;
};

/// The context of one step call: stage, counters and metric logging
/// (borrowed: valid during the call).
class StepContext {
public:
    /// Wraps the borrowed C context.
    explicit StepContext(fulmen_step_context* ctx) noexcept : ctx_(ctx) {}
    /// Logs a metric (flags from fulmen::Log; batch_size 0 = the batch's).
    void log(const std::string& name, double value, uint32_t flags = 0, int64_t batch_size = 0) {
        check(fulmen_step_context_log(ctx_, name.c_str(), value, flags, batch_size));
    }
    /// Logs the one-element tensor `value` as a metric (the handle stays
    /// this Tensor's). A device tensor is not read in the step, so the
    /// step does not wait for its device: it is read where the trainer
    /// reads values anyway (the loggers every log_every_n_steps steps and
    /// after each evaluation batch that logs one, a progress-bar refresh,
    /// a metric read, the epoch's end).
    void log(const std::string& name, const Tensor& value, uint32_t flags = 0, int64_t batch_size = 0) {
        check(fulmen_step_context_log_tensor(ctx_, name.c_str(), value.get(), flags, batch_size));
    }
    /// Logs every (name, value) of `values` with the same flags, as
    /// Lightning's log_dict (all names are checked before any is logged).
    void log_dict(const std::map<std::string, double>& values, uint32_t flags = 0, int64_t batch_size = 0) {
        std::vector<const char*> names;
        std::vector<double> numbers;
        names.reserve(values.size());
        numbers.reserve(values.size());
        for (const auto& [name, value] : values) {
            names.push_back(name.c_str());
            numbers.push_back(value);
        }
        check(fulmen_step_context_log_dict(ctx_, names.data(), numbers.data(), names.size(), flags, batch_size));
    }
    /// The running stage.
    Stage stage() const { return static_cast<Stage>(query<int32_t>(fulmen_step_context_stage)); }
    /// The current epoch (0-based).
    int64_t epoch() const { return query<int64_t>(fulmen_step_context_epoch); }
    /// Optimizer steps taken so far.
    int64_t global_step() const { return query<int64_t>(fulmen_step_context_global_step); }
    /// The batch index within the epoch (0-based).
    int64_t batch_idx() const { return query<int64_t>(fulmen_step_context_batch_idx); }
    /// The evaluation loader of the batch when a run has several (0 with
    /// one, and in training); logged names then end in /dataloader_idx_N.
    size_t dataloader_idx() const { return query<size_t>(fulmen_step_context_dataloader_idx); }
    /// In predict_step: adds `t` to the batch's prediction, which becomes
    /// a tuple (the returned tensor, if any, first), as Lightning's
    /// predict_step returning a tuple; see Trainer::predict_batches.
    void add_prediction(const Tensor& t) { check(fulmen_step_context_add_prediction(ctx_, t.get())); }
    /// In predict_step, adds `t` under `name`: the batch's prediction is
    /// then a dict of the named tensors in the order added (Lightning's
    /// `predict_step` returning a dict); such a step names them all and
    /// returns no tensor.
    void add_prediction(const std::string& name, const Tensor& t) {
        check(fulmen_step_context_add_named_prediction(ctx_, name.c_str(), t.get()));
    }
    /// Sets this predict step's whole prediction to `value`, of any shape
    /// (Lightning's `predict_step` returning nested tuples, lists and dicts
    /// of tensors, numbers and strings); such a step adds no tensors and
    /// returns none. Trainer::predict_batches gives it back as it was set.
    void set_prediction(const Value& value) { check(fulmen_step_context_set_prediction(ctx_, value.get())); }

    // ---- manual optimization (LightningModule::set_automatic_optimization(false)) ----

    /// Number of optimizers configure_optimizers added (indices below).
    size_t optimizer_count() const { return query<size_t>(fulmen_step_context_optimizer_count); }
    /// Lightning's manual_backward(loss), through the precision plugin.
    void manual_backward(const Tensor& loss) { check(fulmen_step_context_manual_backward(ctx_, loss.get())); }
    /// Steps optimizer `index` (counts in global_step); false when 16-mixed
    /// skipped the update for inf/NaN gradients.
    bool optimizer_step(size_t index) {
        bool made = false;
        check(fulmen_step_context_optimizer_step(ctx_, index, &made));
        return made;
    }
    /// optimizer_step(index) without asking whether the update was made:
    /// under 16-mixed, answering that waits for the device (the inf
    /// check), which this call never does with fused updates.
    void optimizer_step_no_wait(size_t index) { check(fulmen_step_context_optimizer_step(ctx_, index, nullptr)); }
    /// Lightning's `opt.step(closure=closure)` for optimizer `index`:
    /// `closure(StepContext&)` zeroes the gradients, computes the loss,
    /// runs manual_backward through the context it is given (this one is
    /// in use until the step returns) and returns the loss; LBFGS calls it
    /// as often as it needs, the others once. Counts in global_step.
    /// Returns the first evaluation's loss (torch's return value).
    template <class Fn>
    double optimizer_step(size_t index, Fn&& closure) {
        StepClosureCall<Fn> call{closure};
        double first = 0;
        check(fulmen_step_context_optimizer_step_closure(ctx_, index, &StepClosureCall<Fn>::call, &call, &first, nullptr));
        return first;
    }
    /// Sets optimizer `index`'s gradients to none.
    void optimizer_zero_grad(size_t index) { check(fulmen_step_context_optimizer_zero_grad(ctx_, index)); }
    /// Lightning's toggle_optimizer: only optimizer `index`'s parameters
    /// require grad until untoggle_optimizer.
    void toggle_optimizer(size_t index) { check(fulmen_step_context_toggle_optimizer(ctx_, index)); }
    /// Lightning's untoggle_optimizer.
    void untoggle_optimizer(size_t index) { check(fulmen_step_context_untoggle_optimizer(ctx_, index)); }
    /// Steps optimizer `index`'s scheduler (`metric` for ReduceLROnPlateau).
    void scheduler_step(size_t index, std::optional<double> metric = std::nullopt) {
        check(fulmen_step_context_scheduler_step(ctx_, index, metric ? &*metric : nullptr));
    }
    /// Number of schedulers over all optimizers (Lightning's
    /// `len(self.lr_schedulers())`).
    size_t lr_scheduler_count() const { return query<size_t>(fulmen_step_context_lr_scheduler_count); }
    /// Steps scheduler `index` of Lightning's `self.lr_schedulers()` list
    /// (optimizer 0's in the order added, then optimizer 1's, ...).
    void lr_scheduler_step(size_t index, std::optional<double> metric = std::nullopt) {
        check(fulmen_step_context_lr_scheduler_step(ctx_, index, metric ? &*metric : nullptr));
    }
    /// Learning rate of parameter group `group` of optimizer `index`.
    double learning_rate(size_t index, size_t group = 0) const {
        return detail::read<double>([&](double* out) { return fulmen_step_context_learning_rate(ctx_, index, group, out); });
    }
    /// Lightning's clip_gradients(optimizers()[index], value, algorithm):
    /// unscales first under 16-mixed (the next optimizer_step does not
    /// again), then clips; value <= 0 clips nothing.
    void clip_gradients(size_t index, double value, ClipAlgorithm algorithm = ClipAlgorithm::Norm) {
        check(fulmen_step_context_clip_gradients(ctx_, index, value, static_cast<int32_t>(algorithm)));
    }

    /// The C context.
    fulmen_step_context* get() const noexcept { return ctx_; }

private:
    /// Calls the closure of `optimizer_step(index, closure)` with a
    /// StepContext over the context fulmen gives it.
    template <class Fn>
    struct StepClosureCall {
        Fn& fn;
        static fulmen_error* call(void* ud, fulmen_step_context* ctx, double* loss) noexcept {
            return detail::guard_callback([&] {
                StepContext inner(ctx);
                *loss = static_cast<StepClosureCall*>(ud)->fn(inner);
            });
        }
    };
    template <class V, class Fn>
    V query(Fn fn) const {
        return detail::read<V>([&](V* out) { return fn(ctx_, out); });
    }
    fulmen_step_context* ctx_;
};

/// The optimizer list configure_optimizers fills (borrowed).
class OptimizerConfig {
public:
    /// Wraps the borrowed C config.
    explicit OptimizerConfig(fulmen_optimizer_config* config) noexcept : config_(config) {}

    /// Lightning's `trainer.estimated_stepping_batches`: the optimizer
    /// steps of this fit (e.g. OneCycleLR's total_steps); nullopt when the
    /// run is unbounded.
    std::optional<int64_t> estimated_stepping_batches() const {
        int64_t steps = 0;
        fulmen_error* err = fulmen_optimizer_config_estimated_stepping_batches(config_, &steps);
        if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_INVALID_STATE) {
            fulmen_error_free(err);
            return std::nullopt;
        }
        check(err);
        return steps;
    }

    /// Hands an optimizer to the trainer (consumed on success).
    OptimizerConfig& add(Optimizer&& optimizer) {
        check(fulmen_optimizer_config_add(config_, optimizer.get(), nullptr, static_cast<int32_t>(Interval::Epoch), 1, nullptr));
        optimizer.release();
        return *this;
    }

    /// Hands an optimizer and its scheduler to the trainer (both consumed on
    /// success); `monitor` names the metric fed to ReduceLROnPlateau.
    OptimizerConfig& add(Optimizer&& optimizer, Scheduler&& scheduler, Interval interval = Interval::Epoch,
                         int64_t frequency = 1, const std::string& monitor = {}) {
        check(fulmen_optimizer_config_add(config_, optimizer.get(), scheduler.get(), static_cast<int32_t>(interval),
                                          frequency, detail::c_str_or_null(monitor)));
        optimizer.release();
        scheduler.release();
        return *this;
    }

    /// Adds another scheduler (made for it, none stepped) to the optimizer
    /// added `optimizer_index`-th; the schedulers of one optimizer step in
    /// torch's chainable forms, so their factors compose. Consumed on
    /// success only.
    OptimizerConfig& add_scheduler(size_t optimizer_index, Scheduler&& scheduler, Interval interval = Interval::Epoch,
                                   int64_t frequency = 1, const std::string& monitor = {}) {
        check(fulmen_optimizer_config_add_scheduler(config_, optimizer_index, scheduler.get(),
                                                    static_cast<int32_t>(interval), frequency,
                                                    detail::c_str_or_null(monitor)));
        scheduler.release();
        return *this;
    }

    /// Names a scheduler (Lightning's lr_scheduler "name"): LearningRateMonitor
    /// logs `name` instead of `lr-<Optimizer>`; empty clears the name.
    OptimizerConfig& set_scheduler_name(size_t optimizer_index, size_t scheduler_index, const std::string& name) {
        check(fulmen_optimizer_config_set_scheduler_name(config_, optimizer_index, scheduler_index,
                                                         detail::c_str_or_null(name)));
        return *this;
    }

    /// Lightning's lr_scheduler "strict": false makes a ReduceLROnPlateau whose
    /// metric was not logged warn and skip instead of failing the run.
    OptimizerConfig& set_scheduler_strict(size_t optimizer_index, size_t scheduler_index, bool strict) {
        check(fulmen_optimizer_config_set_scheduler_strict(config_, optimizer_index, scheduler_index, strict));
        return *this;
    }

    /// The C config.
    fulmen_optimizer_config* get() const noexcept { return config_; }

private:
    fulmen_optimizer_config* config_;
};

/// The closure optimizer_step gets (Lightning's optimizer_closure):
/// training_step, optimizer_zero_grad and backward (borrowed: valid
/// during the call).
class OptimizerClosure {
public:
    /// Wraps the borrowed C closure.
    explicit OptimizerClosure(fulmen_optimizer_closure* closure) noexcept : closure_(closure) {}
    /// Runs the closure alone (no step); the loss, or nullopt when
    /// training_step returned none.
    std::optional<double> operator()() {
        double loss = 0;
        bool has_loss = false;
        check(fulmen_optimizer_closure_run(closure_, &loss, &has_loss));
        if (!has_loss) return std::nullopt;
        return loss;
    }
    /// The C closure.
    fulmen_optimizer_closure* get() const noexcept { return closure_; }

private:
    fulmen_optimizer_closure* closure_;
};

/// The context of an optimization hook of the module (borrowed: valid
/// during the call).
class OptimizationContext {
public:
    /// Wraps the borrowed C context.
    explicit OptimizationContext(fulmen_optimization_context* ctx) noexcept : ctx_(ctx) {}
    /// Lightning's current_epoch.
    int64_t epoch() const {
        return detail::read<int64_t>([&](int64_t* o) { return fulmen_optimization_context_epoch(ctx_, o); });
    }
    /// Lightning's global_step (this batch's step not counted yet).
    int64_t global_step() const {
        return detail::read<int64_t>([&](int64_t* o) { return fulmen_optimization_context_global_step(ctx_, o); });
    }
    /// In optimizer_step: optimizer.step(closure=closure), wrapped by the
    /// precision plugin; false when the update was not made (16-mixed).
    bool step(OptimizerClosure& closure) {
        bool made = false;
        check(fulmen_optimization_context_step(ctx_, closure.get(), &made));
        return made;
    }
    /// step(closure) without asking whether the update was made: under
    /// 16-mixed the answer waits for the device, which this call never
    /// does with fused updates.
    void step_no_wait(OptimizerClosure& closure) { check(fulmen_optimization_context_step(ctx_, closure.get(), nullptr)); }
    /// optimizer.zero_grad(set_to_none) of the hook's optimizer.
    void zero_grad(bool set_to_none = true) { check(fulmen_optimization_context_zero_grad(ctx_, set_to_none)); }
    /// In configure_gradient_clipping: Lightning's clip_gradients.
    void clip_gradients(double value, ClipAlgorithm algorithm = ClipAlgorithm::Norm) {
        check(fulmen_optimization_context_clip_gradients(ctx_, value, static_cast<int32_t>(algorithm)));
    }
    /// In lr_scheduler_step: steps the scheduler (`metric` for
    /// ReduceLROnPlateau).
    void scheduler_step(std::optional<double> metric = std::nullopt) {
        check(fulmen_optimization_context_scheduler_step(ctx_, metric ? &*metric : nullptr));
    }
    /// Learning rate of parameter group `group` of the hook's optimizer.
    double learning_rate(size_t group = 0) const {
        return detail::read<double>([&](double* o) { return fulmen_optimization_context_learning_rate(ctx_, group, o); });
    }
    /// Sets the learning rate of parameter group `group` (a warm-up).
    void set_learning_rate(size_t group, double lr) {
        check(fulmen_optimization_context_set_learning_rate(ctx_, group, lr));
    }
    /// The C context.
    fulmen_optimization_context* get() const noexcept { return ctx_; }

private:
    fulmen_optimization_context* ctx_;
};

/// The callbacks a module's configure_callbacks adds to a run (a borrowed
/// fulmen_callback_list, valid during that call only).
class CallbackList {
public:
    /// Wraps the list fulmen passes to configure_callbacks.
    explicit CallbackList(fulmen_callback_list* list) noexcept : list_(list) {}
    /// Adds `callback` under `name` (a trainer callback of that name is
    /// replaced for the run); fulmen owns it from then on.
    CallbackList& add(const std::string& name, std::unique_ptr<Callback> callback) {
        if (!callback) throw Error(FULMEN_CODE_NULL_ARGUMENT, "CallbackList::add: the callback is null");
        fulmen_callback_vtable vt = detail::CallbackTrampolines::vtable(callback.get());
        check(fulmen_callback_list_add(list_, name.c_str(), &vt));
        callback.release();  // fulmen owns it now and calls userdata_free once
        return *this;
    }
    /// Adds a callback calling `fn(hook, ctx)` for every hook.
    CallbackList& add(const std::string& name, HookFn fn) {
        return add(name, std::make_unique<Callback>(std::move(fn)));
    }
    /// Adds a ModelCheckpoint, replacing the trainer's ModelCheckpoints
    /// (Lightning replaces callbacks of the returned types).
    CallbackList& add_model_checkpoint(const ModelCheckpointOptions& options = ModelCheckpointOptions()) {
        fulmen_model_checkpoint_options o = options.c_options();
        check(fulmen_callback_list_add_model_checkpoint(list_, &o));
        return *this;
    }
    /// Adds an EarlyStopping, replacing the trainer's.
    CallbackList& add_early_stopping(const EarlyStoppingOptions& options) {
        fulmen_early_stopping_options o = options.c_options();
        check(fulmen_callback_list_add_early_stopping(list_, &o));
        return *this;
    }
    /// Adds a LearningRateMonitor (as Trainer::add_lr_monitor), replacing
    /// the trainer's.
    CallbackList& add_lr_monitor(const std::optional<std::string>& logging_interval = std::nullopt,
                                 bool log_momentum = false, bool log_weight_decay = false) {
        const char* interval = logging_interval ? logging_interval->c_str() : nullptr;
        check(fulmen_callback_list_add_lr_monitor(list_, interval, log_momentum, log_weight_decay));
        return *this;
    }
    /// Adds BackboneFinetuning of the module at `backbone` (as
    /// Trainer::add_backbone_finetuning), replacing the trainer's.
    CallbackList& add_backbone_finetuning(const std::string& backbone, BackboneFinetuningOptions options = {}) {
        options.backbone = backbone.c_str();
        check(fulmen_callback_list_add_backbone_finetuning(list_, &options));
        return *this;
    }
    /// Adds BackboneFinetuning whose backbone lr follows `lambda_func` (as
    /// Trainer::add_backbone_finetuning with a lambda), replacing the
    /// trainer's.
    CallbackList& add_backbone_finetuning(const std::string& backbone, BackboneLambda lambda_func,
                                          BackboneFinetuningOptions options = {}) {
        detail::add_backbone_lambda(
            [this](auto... args) { return fulmen_callback_list_add_backbone_finetuning_lambda(list_, args...); },
            backbone, std::move(lambda_func), options);
        return *this;
    }
    /// Adds a prediction writer (as Trainer::add_prediction_writer),
    /// replacing the trainer's prediction writers; configure_callbacks
    /// runs at every run's start, so each run gets the writer it adds.
    CallbackList& add_prediction_writer(const std::string& write_interval, WriteOnBatchEnd write_on_batch_end,
                                        WriteOnEpochEnd write_on_epoch_end = {}) {
        detail::add_prediction_writer(
            [this](auto... args) { return fulmen_callback_list_add_prediction_writer(list_, args...); },
            write_interval, std::move(write_on_batch_end), std::move(write_on_epoch_end));
        return *this;
    }
    /// Adds a prediction writer of whole values (as
    /// Trainer::add_prediction_value_writer), replacing the trainer's.
    CallbackList& add_prediction_value_writer(const std::string& write_interval,
                                              WriteValueOnBatchEnd write_on_batch_end,
                                              WriteValuesOnEpochEnd write_on_epoch_end = {}) {
        detail::add_prediction_value_writer(
            [this](auto... args) { return fulmen_callback_list_add_prediction_value_writer(list_, args...); },
            write_interval, std::move(write_on_batch_end), std::move(write_on_epoch_end));
        return *this;
    }
    /// Adds StochasticWeightAveraging (as
    /// Trainer::add_stochastic_weight_averaging), replacing the trainer's.
    CallbackList& add_stochastic_weight_averaging(StochasticWeightAveragingOptions options,
                                                  const std::vector<double>& swa_lrs = {}) {
        options.swa_lrs = swa_lrs.empty() ? nullptr : swa_lrs.data();
        options.n_swa_lrs = swa_lrs.size();
        check(fulmen_callback_list_add_stochastic_weight_averaging(list_, &options));
        return *this;
    }
    /// Adds weight averaging (as Trainer::add_weight_averaging).
    CallbackList& add_weight_averaging(const WeightAveragingOptions& options = {}) {
        check(fulmen_callback_list_add_weight_averaging(list_, &options));
        return *this;
    }
    /// Adds a GradientAccumulationScheduler (as
    /// Trainer::add_gradient_accumulation_scheduler).
    CallbackList& add_gradient_accumulation_scheduler(const std::map<int64_t, int64_t>& scheduling) {
        std::vector<int64_t> epochs, factors;
        for (const auto& [epoch, factor] : scheduling) {
            epochs.push_back(epoch);
            factors.push_back(factor);
        }
        check(fulmen_callback_list_add_gradient_accumulation_scheduler(list_, epochs.data(), factors.data(),
                                                                        epochs.size()));
        return *this;
    }
    /// Adds ModelPruning with a copy of `pruning`'s arguments.
    CallbackList& add_model_pruning(const ModelPruning& pruning) {
        check(fulmen_callback_list_add_model_pruning(list_, pruning.get()));
        return *this;
    }
    /// Adds a Timer (as Trainer::add_timer).
    CallbackList& add_timer(const std::optional<std::string>& duration, const std::string& interval = "step") {
        check(fulmen_callback_list_add_timer(list_, duration ? duration->c_str() : nullptr, interval.c_str()));
        return *this;
    }
    /// Adds a ThroughputMonitor (as Trainer::add_throughput_monitor_flops;
    /// 0 FLOPs: none).
    CallbackList& add_throughput_monitor(size_t window_size = 100,
                                         const std::optional<std::string>& separator = std::nullopt,
                                         double flops_per_batch = 0.0, double available_flops = 0.0) {
        check(fulmen_callback_list_add_throughput_monitor(list_, window_size, separator ? separator->c_str() : nullptr,
                                                           flops_per_batch, available_flops));
        return *this;
    }
    /// Adds a DeviceStatsMonitor (as Trainer::add_device_stats_monitor).
    CallbackList& add_device_stats_monitor(std::optional<bool> cpu_stats = std::nullopt) {
        check(fulmen_callback_list_add_device_stats_monitor(list_, cpu_stats ? (*cpu_stats ? 1 : 0) : -1));
        return *this;
    }
    /// Adds a SpikeDetection (as Trainer::add_spike_detection).
    CallbackList& add_spike_detection(Mode mode = Mode::Min, size_t window = 10, int64_t warmup = 1,
                                      std::optional<double> atol = std::nullopt, std::optional<double> rtol = 2.0,
                                      const std::optional<std::string>& exclude_batches_path = std::nullopt,
                                      bool finite_only = true) {
        const double none = std::numeric_limits<double>::quiet_NaN();
        check(fulmen_callback_list_add_spike_detection(
            list_, static_cast<int32_t>(mode), window, warmup, atol ? *atol : none, rtol ? *rtol : none,
            exclude_batches_path ? exclude_batches_path->c_str() : nullptr, finite_only));
        return *this;
    }
    /// Adds an OnExceptionCheckpoint (as Trainer::add_on_exception_checkpoint).
    CallbackList& add_on_exception_checkpoint(const std::string& dirpath,
                                              const std::optional<std::string>& filename = std::nullopt) {
        check(fulmen_callback_list_add_on_exception_checkpoint(list_, dirpath.c_str(),
                                                                filename ? filename->c_str() : nullptr));
        return *this;
    }

private:
    fulmen_callback_list* list_;
};

/// The step functions of a LightningModule (empty members are "not implemented").
struct Steps {
    /// Returns the loss of a training batch (required for fit).
    std::function<Tensor(StepContext&, const Batch&)> training_step;
    /// Evaluates a validation batch (log metrics through the context).
    std::function<void(StepContext&, const Batch&)> validation_step;
    /// Evaluates a test batch.
    std::function<void(StepContext&, const Batch&)> test_step;
    /// Returns the prediction of a batch, or nullopt.
    std::function<std::optional<Tensor>(StepContext&, const Batch&)> predict_step;
    /// Adds the optimizers (and schedulers) (required for fit).
    std::function<void(OptimizerConfig&)> configure_optimizers;
    /// The module's own hooks (any Hook), called after every callback's.
    HookFn on_hook;
    /// Lightning's train_dataloader: the training data of a fit given no
    /// train loader, for an epoch (see fulmen_module_vtable).
    std::function<Loader(int64_t epoch)> train_dataloader;
    /// Lightning's val_dataloader: the validation loaders of a fit given
    /// none, for an epoch (none: no validation).
    std::function<std::vector<Loader>(int64_t epoch)> val_dataloader;
    /// Lightning's test_dataloader: the loaders of a test given none.
    std::function<std::vector<Loader>(int64_t epoch)> test_dataloader;
    /// Lightning's predict_dataloader: the loader of a predict given none.
    std::function<std::vector<Loader>(int64_t epoch)> predict_dataloader;
    /// Lightning's optimizer_step(epoch, batch_idx, optimizer, closure):
    /// must run the closure, alone (`closure()`, no update) or by
    /// `ctx.step(closure)` (see fulmen_module_vtable). Empty: step.
    std::function<void(OptimizationContext&, int64_t epoch, int64_t batch_idx, size_t optimizer_idx,
                       OptimizerClosure& closure)>
        optimizer_step;
    /// Lightning's optimizer_zero_grad. Empty: gradients set to none.
    std::function<void(OptimizationContext&, int64_t epoch, int64_t batch_idx, size_t optimizer_idx)>
        optimizer_zero_grad;
    /// Lightning's lr_scheduler_step(scheduler, metric). Empty: step it.
    std::function<void(OptimizationContext&, size_t scheduler_idx, std::optional<double> metric)> lr_scheduler_step;
    /// Lightning's backward(loss) on the (divided, scaled) loss. Empty:
    /// loss.backward().
    std::function<void(OptimizationContext&, const Tensor& loss)> backward;
    /// Lightning's configure_gradient_clipping(optimizer, clip_val,
    /// algorithm) with the trainer's settings (clip_val 0: unset). Empty:
    /// clip with them.
    std::function<void(OptimizationContext&, size_t optimizer_idx, double clip_val, ClipAlgorithm algorithm)>
        configure_gradient_clipping;
    /// validation_step returning what on_validation_batch_end receives as
    /// the step's outputs (HookContext::output), or nullopt. Set it or
    /// validation_step, not both (the module is refused).
    std::function<std::optional<Tensor>(StepContext&, const Batch&)> validation_step_output;
    /// test_step returning what on_test_batch_end receives, as
    /// validation_step_output (not both with test_step).
    std::function<std::optional<Tensor>(StepContext&, const Batch&)> test_step_output;
    /// Lightning's configure_model: builds or changes the model on the
    /// run's device, after the setup hook and before configure_optimizers,
    /// in every run.
    std::function<void(Device)> configure_model;
    /// Lightning's configure_callbacks: callbacks the module adds to every
    /// run when it starts (a trainer callback of the same name is
    /// replaced).
    std::function<void(CallbackList&)> configure_callbacks;
};

namespace detail {

/// Trampolines from the C module vtable to the Steps members. Exceptions
/// never cross the C ABI: they become C errors and are rethrown unchanged
/// by the Trainer call that ran the step.
struct ModuleTrampolines {
    /// userdata_free: destroys the Steps (and what the lambdas captured).
    static void free_steps(void* p) noexcept { delete static_cast<Steps*>(p); }

    /// Writes a step's tensor to `*out` as a new, unkept handle: the step's
    /// scope frees it after fulmen has taken its value, while the caller's
    /// Tensor (kept, like every wrapper) is freed by its destructor.
    static void hand_out(const Tensor& t, fulmen_tensor** out) {
        if (t.get() == nullptr) return;  // no loss (manual optimization, or a skipped batch)
        *out = detail::make<fulmen_tensor>([&](fulmen_tensor** o) { return fulmen_tensor_share(t.get(), o); });
    }

    /// Calls Steps::training_step and hands its loss to fulmen.
    static fulmen_error* training_step(void* ud, fulmen_step_context* c, const fulmen_batch* b, fulmen_tensor** out) {
        return guard_callback([&] {
            StepContext ctx(c);
            hand_out(static_cast<Steps*>(ud)->training_step(ctx, Batch(b)), out);
        });
    }
    /// Calls Steps::validation_step.
    static fulmen_error* validation_step(void* ud, fulmen_step_context* c, const fulmen_batch* b) {
        return guard_callback([&] {
            StepContext ctx(c);
            static_cast<Steps*>(ud)->validation_step(ctx, Batch(b));
        });
    }
    /// Calls Steps::test_step.
    static fulmen_error* test_step(void* ud, fulmen_step_context* c, const fulmen_batch* b) {
        return guard_callback([&] {
            StepContext ctx(c);
            static_cast<Steps*>(ud)->test_step(ctx, Batch(b));
        });
    }
    /// Calls Steps::predict_step and hands its output (if any) to fulmen.
    static fulmen_error* predict_step(void* ud, fulmen_step_context* c, const fulmen_batch* b, fulmen_tensor** out) {
        return output_step(&Steps::predict_step, ud, c, b, out);
    }
    /// Calls Steps::validation_step_output.
    static fulmen_error* validation_step_output(void* ud, fulmen_step_context* c, const fulmen_batch* b,
                                                fulmen_tensor** out) {
        return output_step(&Steps::validation_step_output, ud, c, b, out);
    }
    /// Calls Steps::test_step_output.
    static fulmen_error* test_step_output(void* ud, fulmen_step_context* c, const fulmen_batch* b,
                                          fulmen_tensor** out) {
        return output_step(&Steps::test_step_output, ud, c, b, out);
    }
    /// Calls a step of `ud`'s Steps that may return a tensor, handing it out.
    static fulmen_error* output_step(std::function<std::optional<Tensor>(StepContext&, const Batch&)> Steps::*step,
                                     void* ud, fulmen_step_context* c, const fulmen_batch* b, fulmen_tensor** out) {
        return guard_callback([&] {
            StepContext ctx(c);
            std::optional<Tensor> y = (static_cast<Steps*>(ud)->*step)(ctx, Batch(b));
            if (y) hand_out(*y, out);
        });
    }
    /// Calls Steps::configure_model with the run's device.
    static fulmen_error* configure_model(void* ud, int32_t device_type, int64_t device_index) {
        return guard_callback(
            [&] { static_cast<Steps*>(ud)->configure_model(Device{static_cast<DeviceType>(device_type), device_index}); });
    }
    /// Calls Steps::configure_callbacks.
    static fulmen_error* configure_callbacks(void* ud, fulmen_callback_list* list) {
        return guard_callback([&] {
            CallbackList callbacks(list);
            static_cast<Steps*>(ud)->configure_callbacks(callbacks);
        });
    }
    /// Calls Steps::configure_optimizers.
    static fulmen_error* configure_optimizers(void* ud, fulmen_optimizer_config* c) {
        return guard_callback([&] {
            OptimizerConfig config(c);
            static_cast<Steps*>(ud)->configure_optimizers(config);
        });
    }

    /// Calls Steps::train_dataloader and hands its loader to fulmen.
    static fulmen_error* train_dataloader(void* ud, int64_t epoch, fulmen_loader** out) {
        return guard_callback([&] { *out = static_cast<Steps*>(ud)->train_dataloader(epoch).release(); });
    }
    /// Calls Steps::val_dataloader and hands its loaders to fulmen.
    static fulmen_error* val_dataloader(void* ud, int64_t epoch, fulmen_loader** out, size_t capacity, size_t* n) {
        return hand_loaders("val_dataloader", static_cast<Steps*>(ud)->val_dataloader, epoch, out, capacity, n);
    }
    /// Calls Steps::test_dataloader and hands its loaders to fulmen.
    static fulmen_error* test_dataloader(void* ud, int64_t epoch, fulmen_loader** out, size_t capacity, size_t* n) {
        return hand_loaders("test_dataloader", static_cast<Steps*>(ud)->test_dataloader, epoch, out, capacity, n);
    }
    /// Calls Steps::predict_dataloader and hands its loaders to fulmen.
    static fulmen_error* predict_dataloader(void* ud, int64_t epoch, fulmen_loader** out, size_t capacity,
                                            size_t* n) {
        return hand_loaders("predict_dataloader", static_cast<Steps*>(ud)->predict_dataloader, epoch, out, capacity,
                            n);
    }
    /// Hands the loaders of an evaluation dataloader hook (`what`) to fulmen.
    static fulmen_error* hand_loaders(const char* what, const std::function<std::vector<Loader>(int64_t)>& hook,
                                      int64_t epoch, fulmen_loader** out, size_t capacity, size_t* n) {
        return guard_callback([&] {
            std::vector<Loader> loaders = hook(epoch);
            if (loaders.size() > capacity) {
                throw Error(FULMEN_CODE_INVALID_ARGUMENT, std::string(what) + " gave " +
                                                              std::to_string(loaders.size()) + " loaders; at most " +
                                                              std::to_string(capacity));
            }
            for (size_t i = 0; i < loaders.size(); i++) out[i] = loaders[i].release();
            *n = loaders.size();
        });
    }

    /// Calls Steps::optimizer_step.
    static fulmen_error* optimizer_step(void* ud, fulmen_optimization_context* c, int64_t epoch, int64_t batch_idx,
                                        size_t optimizer_idx, fulmen_optimizer_closure* cl) {
        return guard_callback([&] {
            OptimizationContext ctx(c);
            OptimizerClosure closure(cl);
            static_cast<Steps*>(ud)->optimizer_step(ctx, epoch, batch_idx, optimizer_idx, closure);
        });
    }
    /// Calls Steps::optimizer_zero_grad.
    static fulmen_error* optimizer_zero_grad(void* ud, fulmen_optimization_context* c, int64_t epoch,
                                             int64_t batch_idx, size_t optimizer_idx) {
        return guard_callback([&] {
            OptimizationContext ctx(c);
            static_cast<Steps*>(ud)->optimizer_zero_grad(ctx, epoch, batch_idx, optimizer_idx);
        });
    }
    /// Calls Steps::lr_scheduler_step.
    static fulmen_error* lr_scheduler_step(void* ud, fulmen_optimization_context* c, size_t scheduler_idx,
                                           const double* metric) {
        return guard_callback([&] {
            OptimizationContext ctx(c);
            std::optional<double> m;
            if (metric != nullptr) m = *metric;
            static_cast<Steps*>(ud)->lr_scheduler_step(ctx, scheduler_idx, m);
        });
    }
    /// Calls Steps::backward with the loss shared into a Tensor.
    static fulmen_error* backward(void* ud, fulmen_optimization_context* c, fulmen_tensor* loss) {
        return guard_callback([&] {
            OptimizationContext ctx(c);
            Tensor t = Tensor::make([&](fulmen_tensor** o) { return fulmen_tensor_share(loss, o); });
            static_cast<Steps*>(ud)->backward(ctx, t);
        });
    }
    /// Calls Steps::configure_gradient_clipping.
    static fulmen_error* configure_gradient_clipping(void* ud, fulmen_optimization_context* c, size_t optimizer_idx,
                                                     double clip_val, int32_t algorithm) {
        return guard_callback([&] {
            OptimizationContext ctx(c);
            static_cast<Steps*>(ud)->configure_gradient_clipping(ctx, optimizer_idx, clip_val,
                                                                 static_cast<ClipAlgorithm>(algorithm));
        });
    }

    /// Calls Steps::on_hook.
    static fulmen_error* on_hook(void* ud, int32_t hook, fulmen_hook_context* c) {
        return dispatch_hook(hook, c, [&](Hook h, HookContext& ctx) { static_cast<Steps*>(ud)->on_hook(h, ctx); });
    }

    /// The C vtable for `steps` (slots of empty members stay NULL).
    static fulmen_module_vtable vtable(Steps* steps) {
        fulmen_module_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = steps;
        vt.userdata_free = &free_steps;
        if (steps->training_step) vt.training_step = &training_step;
        if (steps->validation_step) vt.validation_step = &validation_step;
        if (steps->test_step) vt.test_step = &test_step;
        if (steps->predict_step) vt.predict_step = &predict_step;
        if (steps->configure_optimizers) vt.configure_optimizers = &configure_optimizers;
        if (steps->on_hook) vt.on_hook = &on_hook;
        if (steps->train_dataloader) vt.train_dataloader = &train_dataloader;
        if (steps->val_dataloader) vt.val_dataloader = &val_dataloader;
        if (steps->test_dataloader) vt.test_dataloader = &test_dataloader;
        if (steps->predict_dataloader) vt.predict_dataloader = &predict_dataloader;
        if (steps->optimizer_step) vt.optimizer_step = &optimizer_step;
        if (steps->optimizer_zero_grad) vt.optimizer_zero_grad = &optimizer_zero_grad;
        if (steps->lr_scheduler_step) vt.lr_scheduler_step = &lr_scheduler_step;
        if (steps->backward) vt.backward = &backward;
        if (steps->configure_gradient_clipping) vt.configure_gradient_clipping = &configure_gradient_clipping;
        if (steps->validation_step_output) vt.validation_step_output = &validation_step_output;
        if (steps->test_step_output) vt.test_step_output = &test_step_output;
        if (steps->configure_model) vt.configure_model = &configure_model;
        if (steps->configure_callbacks) vt.configure_callbacks = &configure_callbacks;
        return vt;
    }
};

}  // namespace detail

/// The user's model logic: step lambdas and the model they train. Owns its
/// `fulmen_lightning_module` handle; freeing it destroys the lambdas once.
class LightningModule : public detail::Handle<fulmen_lightning_module, fulmen_lightning_module_free> {
public:
    class Builder;

    /// An empty module object (no handle).
    LightningModule() = default;

    /// A module training `model` (shared; may be nullptr) with `steps`.
    LightningModule(const Model* model, Steps steps) : Handle(create(model, std::move(steps))) {}

    /// A module training `model` (shared) with `steps`.
    LightningModule(const Model& model, Steps steps) : LightningModule(&model, std::move(steps)) {}

    /// Takes ownership of a `fulmen_lightning_module` handle.
    static LightningModule adopt(fulmen_lightning_module* handle) noexcept { return LightningModule(handle); }

    /// Starts a fluent builder for a module training `model`.
    static Builder builder(const Model& model);
    /// Refused: step lambdas would outlive a temporary model.
    static Builder builder(const Model&& model) = delete;

    /// Records a hyperparameter (Lightning's save_hyperparameters): written
    /// to hparams.yaml, TensorBoard, every checkpoint and host loggers.
    /// Setting a key again replaces its value. Any UTF-8 key and value is
    /// kept exactly (text that is not UTF-8 throws FULMEN_CODE_INVALID_ARGUMENT).
    LightningModule& set_hparam(const std::string& key, const std::string& value) {
        check(fulmen_lightning_module_set_hparam(get(), key.c_str(), value.c_str()));
        return *this;
    }
    /// Lightning's automatic_optimization (default true); false leaves
    /// backward and the optimizer steps to training_step (StepContext's
    /// manual_backward, optimizer_step, ...).
    LightningModule& set_automatic_optimization(bool enabled) {
        check(fulmen_lightning_module_set_automatic_optimization(get(), enabled));
        return *this;
    }
    /// Lightning's prepare_data_per_node (default true) for the module's
    /// prepare_data (Hook::PrepareData, once overridden): true calls it on
    /// local rank 0 of every node, false on global rank 0 only.
    LightningModule& set_prepare_data_per_node(bool per_node) {
        check(fulmen_lightning_module_set_prepare_data_per_node(get(), per_node));
        return *this;
    }
    /// Declares that the module's on_hook implements (or no longer
    /// implements) a LightningModule-only hook (Hook::ValidationModelEval
    /// .. Hook::PrepareData) in place of fulmen's default.
    LightningModule& override_hook(Hook hook, bool overridden = true) {
        check(fulmen_lightning_module_override_hook(get(), static_cast<int32_t>(hook), overridden));
        return *this;
    }
    /// Records a string literal hyperparameter.
    LightningModule& set_hparam(const std::string& key, const char* value) { return set_hparam(key, std::string(value)); }
    /// Records a numeric or bool hyperparameter (as text: 0.001, 64, true).
    template <class V, class = std::enable_if_t<std::is_arithmetic_v<V>>>
    LightningModule& set_hparam(const std::string& key, V value) {
        std::ostringstream text;
        if constexpr (std::is_same_v<V, bool>) {
            text << (value ? "true" : "false");
        } else if constexpr (std::is_floating_point_v<V>) {
            text.precision(std::numeric_limits<V>::digits10);
            text << value;
        } else {
            text << +value;
        }
        return set_hparam(key, text.str());
    }

private:
    explicit LightningModule(fulmen_lightning_module* owned) noexcept : Handle(owned) {}

    static fulmen_lightning_module* create(const Model* model, Steps steps) {
        auto state = std::make_unique<Steps>(std::move(steps));
        fulmen_module_vtable vt = detail::ModuleTrampolines::vtable(state.get());
        fulmen_lightning_module* m = detail::make<fulmen_lightning_module>([&](fulmen_lightning_module** o) {
            return fulmen_lightning_module_new(&vt, model != nullptr ? model->get() : nullptr, o);
        });
        state.release();  // fulmen owns it now and calls userdata_free once
        return m;
    }
};

/// Fluent construction of a LightningModule from lambdas.
class LightningModule::Builder {
public:
    /// A builder for a module training `model` (nullptr: none).
    explicit Builder(const Model* model) : model_(model) {}
    /// Sets training_step: (StepContext&, const Batch&) -> Tensor loss (an
    /// empty Tensor{} for none: with manual optimization, or Lightning's
    /// `return None`, which skips the batch's backward).
    template <class F>
    Builder& training_step(F&& f) { steps_.training_step = std::forward<F>(f); return *this; }
    /// Sets validation_step: (StepContext&, const Batch&) -> void.
    template <class F>
    Builder& validation_step(F&& f) { steps_.validation_step = std::forward<F>(f); return *this; }
    /// Sets test_step: (StepContext&, const Batch&) -> void.
    template <class F>
    Builder& test_step(F&& f) { steps_.test_step = std::forward<F>(f); return *this; }
    /// Sets predict_step: (StepContext&, const Batch&) -> std::optional<Tensor>.
    template <class F>
    Builder& predict_step(F&& f) { steps_.predict_step = std::forward<F>(f); return *this; }
    /// Sets validation_step_output: (StepContext&, const Batch&) ->
    /// std::optional<Tensor>, the outputs on_validation_batch_end receives.
    template <class F>
    Builder& validation_step_output(F&& f) { steps_.validation_step_output = std::forward<F>(f); return *this; }
    /// Sets test_step_output: (StepContext&, const Batch&) ->
    /// std::optional<Tensor>, the outputs on_test_batch_end receives.
    template <class F>
    Builder& test_step_output(F&& f) { steps_.test_step_output = std::forward<F>(f); return *this; }
    /// Sets configure_model: (Device) -> void.
    template <class F>
    Builder& configure_model(F&& f) { steps_.configure_model = std::forward<F>(f); return *this; }
    /// Sets configure_callbacks: (CallbackList&) -> void.
    template <class F>
    Builder& configure_callbacks(F&& f) { steps_.configure_callbacks = std::forward<F>(f); return *this; }
    /// Sets configure_optimizers: (OptimizerConfig&) -> void.
    template <class F>
    Builder& configure_optimizers(F&& f) { steps_.configure_optimizers = std::forward<F>(f); return *this; }
    /// Sets the module's hooks: (Hook, HookContext&) -> void.
    template <class F>
    Builder& on_hook(F&& f) { steps_.on_hook = std::forward<F>(f); return *this; }
    /// Sets train_dataloader: (int64_t epoch) -> Loader, for a fit given no
    /// train loader; called again every reload_dataloaders_every_n_epochs.
    template <class F>
    Builder& train_dataloader(F&& f) { steps_.train_dataloader = std::forward<F>(f); return *this; }
    /// Sets val_dataloader: (int64_t epoch) -> std::vector<Loader>, for a
    /// fit given no validation loader.
    template <class F>
    Builder& val_dataloader(F&& f) { steps_.val_dataloader = std::forward<F>(f); return *this; }
    /// Sets test_dataloader: (int64_t epoch) -> std::vector<Loader>, for a
    /// test given no loader.
    template <class F>
    Builder& test_dataloader(F&& f) { steps_.test_dataloader = std::forward<F>(f); return *this; }
    /// Sets predict_dataloader: (int64_t epoch) -> std::vector<Loader> (one
    /// loader), for a predict given no loader.
    template <class F>
    Builder& predict_dataloader(F&& f) { steps_.predict_dataloader = std::forward<F>(f); return *this; }
    /// Sets optimizer_step: (OptimizationContext&, int64_t epoch, int64_t
    /// batch_idx, size_t optimizer_idx, OptimizerClosure&) -> void; it must
    /// run the closure (alone, or by ctx.step(closure)).
    template <class F>
    Builder& optimizer_step(F&& f) { steps_.optimizer_step = std::forward<F>(f); return *this; }
    /// Sets optimizer_zero_grad: (OptimizationContext&, int64_t epoch,
    /// int64_t batch_idx, size_t optimizer_idx) -> void.
    template <class F>
    Builder& optimizer_zero_grad(F&& f) { steps_.optimizer_zero_grad = std::forward<F>(f); return *this; }
    /// Sets lr_scheduler_step: (OptimizationContext&, size_t scheduler_idx,
    /// std::optional<double> metric) -> void.
    template <class F>
    Builder& lr_scheduler_step(F&& f) { steps_.lr_scheduler_step = std::forward<F>(f); return *this; }
    /// Sets backward: (OptimizationContext&, const Tensor& loss) -> void.
    template <class F>
    Builder& backward(F&& f) { steps_.backward = std::forward<F>(f); return *this; }
    /// Sets configure_gradient_clipping: (OptimizationContext&, size_t
    /// optimizer_idx, double clip_val, ClipAlgorithm) -> void.
    template <class F>
    Builder& configure_gradient_clipping(F&& f) {
        steps_.configure_gradient_clipping = std::forward<F>(f);
        return *this;
    }
    /// Makes the module (the builder's steps are moved into it).
    LightningModule build() { return LightningModule(model_, std::move(steps_)); }

private:
    const Model* model_;
    Steps steps_;
};

inline LightningModule::Builder LightningModule::builder(const Model& model) { return Builder(&model); }

/// The peak FLOPs per second of the CUDA device named `device_name` for
/// `dtype` ("float32", "tfloat32", "bfloat16", ...), from Lightning's
/// table; 0 when unknown.
inline double available_flops(const std::string& device_name, const std::string& dtype) {
    double out = 0.0;
    check(fulmen_available_flops(device_name.c_str(), dtype.c_str(), &out));
    return out;
}

/// Trainer options, as Lightning's Trainer(...) keyword arguments: a typed
/// setter for each (`opts.max_epochs(5).precision("bf16-mixed")`, see
/// trainer_options.hpp, generated from the same table as the key list of
/// fulmen_trainer_options_set in fulmen.h), or set(key, value) by name. An
/// integer is a count of batches (1 = one batch), a floating value a
/// fraction (0.5, 1.0 = all batches), as in Lightning.
class TrainerOptions : public detail::Handle<fulmen_trainer_options, fulmen_trainer_options_free>,
                       public detail::TrainerOptionSetters<TrainerOptions> {
public:
    using TrainerOptionSetters::accelerator;
    using TrainerOptionSetters::precision;

    /// Lightning's defaults.
    TrainerOptions() : Handle(detail::make<fulmen_trainer_options>(fulmen_trainer_options_new)) {}

    /// Takes ownership of a `fulmen_trainer_options` handle.
    static TrainerOptions adopt(fulmen_trainer_options* handle) noexcept { return TrainerOptions(handle); }

    /// Sets `key` to a string, integer, floating or bool value; chains. A
    /// floating value always reads as a fraction (1.0 -> "1.0", all
    /// batches), an integer as a count (1 -> "1", one batch).
    template <class V>
    TrainerOptions& set(const std::string& key, const V& value) & {
        apply(key, value);
        return *this;
    }
    /// Sets `key` on a temporary and passes it on: TrainerOptions().set(...).set(...).
    template <class V>
    TrainerOptions&& set(const std::string& key, const V& value) && {
        apply(key, value);
        return std::move(*this);
    }

    /// Sets the `accelerator` option from a handle (as Lightning accepts an
    /// Accelerator object); the same as set("accelerator", acc.name()).
    TrainerOptions& accelerator(const Accelerator& acc) & {
        check(fulmen_trainer_options_set_accelerator(get(), acc.get()));
        return *this;
    }
    /// Sets the accelerator on a temporary and passes it on.
    TrainerOptions&& accelerator(const Accelerator& acc) && {
        check(fulmen_trainer_options_set_accelerator(get(), acc.get()));
        return std::move(*this);
    }

    /// Uses a precision plugin (copied), as Lightning's `plugins=[...]`.
    TrainerOptions& precision(const Precision& p) & {
        check(fulmen_trainer_options_set_precision(get(), p.get()));
        return *this;
    }
    /// Sets the precision plugin on a temporary and passes it on.
    TrainerOptions&& precision(const Precision& p) && {
        check(fulmen_trainer_options_set_precision(get(), p.get()));
        return std::move(*this);
    }

    /// Uses a strategy with its settings (copied), as Lightning's
    /// `Trainer(strategy=DDPStrategy(...))`; set("strategy", name) picks one
    /// with default settings.
    TrainerOptions& set_strategy(const Strategy& s) & {
        check(fulmen_trainer_options_set_strategy(get(), s.get()));
        return *this;
    }
    /// Sets the strategy on a temporary and passes it on.
    TrainerOptions&& set_strategy(const Strategy& s) && {
        check(fulmen_trainer_options_set_strategy(get(), s.get()));
        return std::move(*this);
    }

private:
    explicit TrainerOptions(fulmen_trainer_options* owned) noexcept : Handle(owned) {}

    template <class V>
    void apply(const std::string& key, const V& value) {
        if constexpr (std::is_same_v<V, bool>) {
            check(fulmen_trainer_options_set_bool(get(), key.c_str(), value));
        } else if constexpr (std::is_integral_v<V>) {
            check(fulmen_trainer_options_set_int(get(), key.c_str(), static_cast<int64_t>(value)));
        } else if constexpr (std::is_floating_point_v<V>) {
            check(fulmen_trainer_options_set_float(get(), key.c_str(), static_cast<double>(value)));
        } else {
            static_assert(std::is_convertible_v<const V&, std::string_view>, "option values are strings, numbers or bools");
            const std::string text{std::string_view(value)};
            check(fulmen_trainer_options_set(get(), key.c_str(), text.c_str()));
        }
    }
};

/// A checkpoint to start from: "last", "best" or a file path; nullopt = none.
using CkptPath = std::optional<std::string>;

/// What validate and test return: one dict {name: value} per loader
/// (Lightning's list of dicts).
using EvalResults = std::vector<std::map<std::string, double>>;

/// The trainer: runs fit / validate / test / predict over loaders.
class Trainer : public detail::Handle<fulmen_trainer, fulmen_trainer_free> {
public:
    /// A trainer with Lightning's default options.
    Trainer() : Handle(create(nullptr)) {}
    /// A trainer with `options` (copied).
    explicit Trainer(const TrainerOptions& options) : Handle(create(options.get())) {}

    /// Takes ownership of a `fulmen_trainer` handle.
    static Trainer adopt(fulmen_trainer* handle) noexcept { return Trainer(handle); }

    /// Lightning's `trainer.fit(model)`: trains `module` on its
    /// train_dataloader, validating on its val_dataloader when it has one;
    /// they are called again every reload_dataloaders_every_n_epochs.
    void fit(LightningModule& module, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_fit(get(), module.get(), nullptr, nullptr, c_path(ckpt_path)); });
    }
    /// Trains `module` on `train` without validation. A step or hook that
    /// throws ends fit, which rethrows that same exception. `ckpt_path`
    /// resumes from a checkpoint: a file path, "last" (the newest last /
    /// any checkpoint of this root dir) or "best" (this trainer's previous
    /// fit's best); nullopt starts afresh.
    void fit(LightningModule& module, const Loader& train, const CkptPath& ckpt_path = std::nullopt) {
        fit(module, train, nullptr, ckpt_path);
    }
    /// Trains `module` on `train`, validating on `val` (val_check_interval).
    void fit(LightningModule& module, const Loader& train, const Loader& val, const CkptPath& ckpt_path = std::nullopt) {
        fit(module, train, &val, ckpt_path);
    }
    /// Trains `module` on `train`, validating on `val` unless it is nullptr.
    void fit(LightningModule& module, const Loader& train, const Loader* val, const CkptPath& ckpt_path = std::nullopt) {
        run([&] {
            return fulmen_trainer_fit(get(), module.get(), train.get(), val != nullptr ? val->get() : nullptr,
                                      c_path(ckpt_path));
        });
    }
    /// Lightning's `Tuner(trainer).lr_find`: a learning-rate range test
    /// with this trainer's options (no loggers, checkpoints or callbacks);
    /// the module's weights are put back afterwards. `val` may be nullptr.
    LrFindResult lr_find(LightningModule& module, const Loader& train, const Loader* val = nullptr,
                         const LrFindOptions& options = {}) {
        fulmen_lr_find_result* out = nullptr;
        run([&] {
            return fulmen_trainer_lr_find(get(), module.get(), train.get(), val != nullptr ? val->get() : nullptr,
                                          &options, &out);
        });
        return LrFindResult::adopt(out);
    }
    /// Lightning's `Tuner(trainer).scale_batch_size`: trials at growing
    /// batch sizes until one runs out of memory (FULMEN_CODE_OUT_OF_MEMORY);
    /// `train` then batches by the size found, which is returned. The
    /// module's weights are put back afterwards. `val` may be nullptr.
    size_t scale_batch_size(LightningModule& module, Loader& train, const Loader* val = nullptr,
                            const BatchSizeFinderOptions& options = {}) {
        size_t found = 0;
        run([&] {
            return fulmen_trainer_scale_batch_size(get(), module.get(), train.get(),
                                                   val != nullptr ? val->get() : nullptr, &options, &found);
        });
        return found;
    }
    /// Runs the validation loop once; `ckpt_path` ("best", "last" or a
    /// path) first loads a checkpoint's weights. Returns what Lightning's
    /// `trainer.validate` returns (eval_results()), as every validate and
    /// test overload does.
    EvalResults validate(LightningModule& module, const Loader& loader, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_validate(get(), module.get(), loader.get(), c_path(ckpt_path)); });
        return eval_results();
    }
    /// Runs the test loop once; `ckpt_path` as for validate.
    EvalResults test(LightningModule& module, const Loader& loader, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_test(get(), module.get(), loader.get(), c_path(ckpt_path)); });
        return eval_results();
    }
    /// Runs predict_step over `loader`: the outputs concatenated along
    /// dimension 0, or nullopt when no step produced one; `ckpt_path` as
    /// for validate.
    std::optional<Tensor> predict(LightningModule& module, const Loader& loader, const CkptPath& ckpt_path = std::nullopt) {
        fulmen_tensor* out = nullptr;
        run([&] { return fulmen_trainer_predict(get(), module.get(), loader.get(), c_path(ckpt_path), &out); });
        if (out == nullptr) return std::nullopt;
        return Tensor::adopt(out);
    }

    /// Lightning's `trainer.validate(model)`: the validation loop over the
    /// loaders of the module's val_dataloader.
    EvalResults validate(LightningModule& module, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_validate(get(), module.get(), nullptr, c_path(ckpt_path)); });
        return eval_results();
    }
    /// Lightning's `trainer.test(model)`: the test loop over the loaders of
    /// the module's test_dataloader.
    EvalResults test(LightningModule& module, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_test(get(), module.get(), nullptr, c_path(ckpt_path)); });
        return eval_results();
    }

    // ---- a LightningDataModule (prepare_data, setup, its loaders) ------

    /// Lightning's `trainer.fit(model, datamodule=data)`.
    void fit(LightningModule& module, DataModule& data, const CkptPath& ckpt_path = std::nullopt) {
        run([&] {
            return fulmen_trainer_fit_datamodule(get(), module.get(), nullptr, nullptr, data.get(), c_path(ckpt_path));
        });
    }
    /// Lightning's `trainer.validate(model, datamodule=data)`.
    EvalResults validate(LightningModule& module, DataModule& data, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_validate_datamodule(get(), module.get(), nullptr, data.get(), c_path(ckpt_path)); });
        return eval_results();
    }
    /// Lightning's `trainer.test(model, datamodule=data)`.
    EvalResults test(LightningModule& module, DataModule& data, const CkptPath& ckpt_path = std::nullopt) {
        run([&] { return fulmen_trainer_test_datamodule(get(), module.get(), nullptr, data.get(), c_path(ckpt_path)); });
        return eval_results();
    }
    /// Lightning's `trainer.predict(model, datamodule=data)`: each loader's
    /// outputs concatenated along dimension 0 (nullopt: none).
    std::vector<std::optional<Tensor>> predict(LightningModule& module, DataModule& data,
                                               const CkptPath& ckpt_path = std::nullopt) {
        std::vector<fulmen_tensor*> outs(FULMEN_LOADERS_MAX, nullptr);
        size_t n = 0;
        run([&] {
            return fulmen_trainer_predict_datamodule(get(), module.get(), nullptr, data.get(), c_path(ckpt_path),
                                                     outs.data(), outs.size(), &n);
        });
        std::vector<std::optional<Tensor>> result;
        for (size_t i = 0; i < n; i++) {
            if (outs[i] == nullptr) {
                result.emplace_back(std::nullopt);
            } else {
                result.emplace_back(Tensor::adopt(outs[i]));
            }
        }
        return result;
    }

    // ---- several evaluation loaders, run in turn (dataloader_idx) ------

    /// Trains on `train`, validating on each of `vals` in turn (may be
    /// empty); with several, logged names end in /dataloader_idx_N.
    void fit(LightningModule& module, const Loader& train, const std::vector<const Loader*>& vals,
             const CkptPath& ckpt_path = std::nullopt) {
        std::vector<const fulmen_loader*> h = loader_handles(vals);
        run([&] {
            return fulmen_trainer_fit_loaders(get(), module.get(), train.get(), h.data(), h.size(), c_path(ckpt_path));
        });
    }
    /// Validates on each of `loaders` in turn.
    EvalResults validate(LightningModule& module, const std::vector<const Loader*>& loaders,
                  const CkptPath& ckpt_path = std::nullopt) {
        std::vector<const fulmen_loader*> h = loader_handles(loaders);
        run([&] { return fulmen_trainer_validate_loaders(get(), module.get(), h.data(), h.size(), c_path(ckpt_path)); });
        return eval_results();
    }
    /// Tests on each of `loaders` in turn.
    EvalResults test(LightningModule& module, const std::vector<const Loader*>& loaders,
              const CkptPath& ckpt_path = std::nullopt) {
        std::vector<const fulmen_loader*> h = loader_handles(loaders);
        run([&] { return fulmen_trainer_test_loaders(get(), module.get(), h.data(), h.size(), c_path(ckpt_path)); });
        return eval_results();
    }
    /// Lightning's trainer.predict: each batch's prediction in order (a
    /// Tensor, None, or a tuple when predict_step added tensors) in a
    /// list; with several loaders a list of one such list per loader. An
    /// empty Value when `return_predictions` is false (nothing is kept).
    Value predict_batches(LightningModule& module, const std::vector<const Loader*>& loaders,
                          bool return_predictions = true, const CkptPath& ckpt_path = std::nullopt) {
        std::vector<const fulmen_loader*> h = loader_handles(loaders);
        fulmen_value* out = nullptr;
        run([&] {
            return fulmen_trainer_predict_batches(get(), module.get(), h.data(), h.size(), c_path(ckpt_path),
                                                  return_predictions, &out);
        });
        return Value::adopt(out);
    }
    /// Predicts on each of `loaders` in turn: one output per loader
    /// (nullopt where no step produced one).
    std::vector<std::optional<Tensor>> predict(LightningModule& module, const std::vector<const Loader*>& loaders,
                                               const CkptPath& ckpt_path = std::nullopt) {
        std::vector<const fulmen_loader*> h = loader_handles(loaders);
        std::vector<fulmen_tensor*> outs(h.size(), nullptr);
        run([&] {
            return fulmen_trainer_predict_loaders(get(), module.get(), h.data(), h.size(), c_path(ckpt_path),
                                                  outs.data());
        });
        std::vector<std::optional<Tensor>> result;
        for (fulmen_tensor* o : outs) {
            if (o == nullptr) {
                result.emplace_back(std::nullopt);
            } else {
                result.emplace_back(Tensor::adopt(o));
            }
        }
        return result;
    }

    // ---- callbacks and loggers (owned by the trainer once added) ------

    /// Adds a callback named `name` (which keys its state in checkpoints);
    /// its hooks run before the LightningModule's, in the order added.
    Trainer& add_callback(const std::string& name, std::unique_ptr<Callback> callback) {
        if (!callback) throw Error(FULMEN_CODE_NULL_ARGUMENT, "add_callback: the callback is null");
        fulmen_callback_vtable vt = detail::CallbackTrampolines::vtable(callback.get());
        check(fulmen_trainer_add_callback(get(), name.c_str(), &vt));
        callback.release();  // fulmen owns it now and calls userdata_free once
        return *this;
    }
    /// Adds a callback calling `fn(hook, ctx)` for every hook.
    Trainer& add_callback(const std::string& name, HookFn fn) {
        return add_callback(name, std::make_unique<Callback>(std::move(fn)));
    }
    /// Adds a ModelCheckpoint (the default one is then not added).
    Trainer& add_model_checkpoint(const ModelCheckpointOptions& options = ModelCheckpointOptions()) {
        fulmen_model_checkpoint_options o = options.c_options();
        check(fulmen_trainer_add_model_checkpoint(get(), &o));
        return *this;
    }
    /// Adds an EarlyStopping callback.
    Trainer& add_early_stopping(const EarlyStoppingOptions& options) {
        fulmen_early_stopping_options o = options.c_options();
        check(fulmen_trainer_add_early_stopping(get(), &o));
        return *this;
    }
    /// Adds a LearningRateMonitor logging `lr-<Optimizer>` every
    /// log_every_n_steps ("step"), at each epoch start ("epoch"), or both
    /// (nullopt), with `<name>-momentum` and `<name>-weight_decay` if asked.
    Trainer& add_lr_monitor(const std::optional<std::string>& logging_interval = std::nullopt,
                            bool log_momentum = false, bool log_weight_decay = false) {
        check(fulmen_trainer_add_lr_monitor_with(get(), c_path(logging_interval), log_momentum, log_weight_decay));
        return *this;
    }
    /// Adds a DeviceStatsMonitor logging the device's statistics around
    /// each batch when the loggers are due; `cpu_stats` as Lightning's
    /// (nullopt: the device's own; true: add the CPU's; false: none on a CPU).
    Trainer& add_device_stats_monitor(std::optional<bool> cpu_stats = std::nullopt) {
        check(fulmen_trainer_add_device_stats_monitor(get(), cpu_stats ? (*cpu_stats ? 1 : 0) : -1));
        return *this;
    }
    /// Adds a ThroughputMonitor: batches and samples per second over the
    /// last `window_size` batches, logged as train/device/samples_per_sec
    /// and so on (`separator` nullopt: "/").
    Trainer& add_throughput_monitor(size_t window_size = 100,
                                    const std::optional<std::string>& separator = std::nullopt) {
        check(fulmen_trainer_add_throughput_monitor(get(), window_size, c_path(separator)));
        return *this;
    }
    /// add_throughput_monitor with FLOP metrics: `flops_per_batch` FLOPs
    /// per batch on one device, `available_flops` the device's peak FLOPs
    /// per second (0: no mfu; see fulmen::available_flops); logs
    /// train/device/flops_per_sec, train/device/mfu and so on.
    Trainer& add_throughput_monitor_flops(double flops_per_batch, double available_flops = 0.0,
                                          size_t window_size = 100,
                                          const std::optional<std::string>& separator = std::nullopt) {
        check(fulmen_trainer_add_throughput_monitor_flops(get(), window_size, c_path(separator), flops_per_batch,
                                                          available_flops));
        return *this;
    }
    /// Adds a GradientAccumulationScheduler: from each epoch of
    /// `scheduling` on, that many batches add up before an optimizer step.
    Trainer& add_gradient_accumulation_scheduler(const std::map<int64_t, int64_t>& scheduling) {
        std::vector<int64_t> epochs, factors;
        for (const auto& [epoch, factor] : scheduling) {
            epochs.push_back(epoch);
            factors.push_back(factor);
        }
        check(fulmen_trainer_add_gradient_accumulation_scheduler(get(), epochs.data(), factors.data(), epochs.size()));
        return *this;
    }
    /// Adds weight averaging (EMA or SWA): validation inside fit sees the
    /// average, training ends with it in the model, and checkpoints hold
    /// it as Lightning's EMAWeightAveraging / WeightAveraging do.
    Trainer& add_weight_averaging(const WeightAveragingOptions& options = {}) {
        check(fulmen_trainer_add_weight_averaging(get(), &options));
        return *this;
    }
    /// Adds BackboneFinetuning of the module at `backbone` ("backbone",
    /// "0", "encoder.layers"): frozen at setup (build the optimizers over
    /// model.parameters(true)), unfrozen into every optimizer as a new
    /// param group at `unfreeze_backbone_at_epoch`, its lr then growing
    /// until it meets the first group's.
    Trainer& add_backbone_finetuning(const std::string& backbone, BackboneFinetuningOptions options = {}) {
        options.backbone = backbone.c_str();
        check(fulmen_trainer_add_backbone_finetuning(get(), &options));
        return *this;
    }
    /// Adds BackboneFinetuning as above, the backbone's lr growing by
    /// `lambda_func(epoch + 1)` at each epoch start after the unfreeze
    /// (Lightning's `lambda_func`) instead of `options.lambda_factor`.
    Trainer& add_backbone_finetuning(const std::string& backbone, BackboneLambda lambda_func,
                                     BackboneFinetuningOptions options = {}) {
        detail::add_backbone_lambda(
            [this](auto... args) { return fulmen_trainer_add_backbone_finetuning_lambda(get(), args...); }, backbone,
            std::move(lambda_func), options);
        return *this;
    }
    /// Adds Lightning's StochasticWeightAveraging: SWALR in place of the
    /// optimizer's scheduler from `swa_epoch_start`, an equal average of
    /// the weights at each epoch start, the average in the model at the
    /// end (and, with BatchNorms, one forward-only epoch more for their
    /// statistics). `swa_lrs`: one lr per param group instead of
    /// `options.swa_lr` (empty: that one for all).
    Trainer& add_stochastic_weight_averaging(StochasticWeightAveragingOptions options,
                                             const std::vector<double>& swa_lrs = {}) {
        options.swa_lrs = swa_lrs.empty() ? nullptr : swa_lrs.data();
        options.n_swa_lrs = swa_lrs.size();
        check(fulmen_trainer_add_stochastic_weight_averaging(get(), &options));
        return *this;
    }
    /// Adds Lightning's ModelPruning with a copy of `pruning`'s arguments:
    /// at each pruning the weights get their new masks, training sees the
    /// masked weights and gradients at every step, and the model ends with
    /// the pruned weights.
    Trainer& add_model_pruning(const ModelPruning& pruning) {
        check(fulmen_trainer_add_model_pruning(get(), pruning.get()));
        return *this;
    }
    /// Adds Lightning's SpikeDetection (its defaults): a training loss that
    /// is not an improvement and differs from the running mean of the last
    /// `window` losses by at least `atol` and `rtol` times the mean (each
    /// unchecked when nullopt), or a non-finite one with `finite_only`,
    /// fails the fit with FULMEN_CODE_NON_FINITE naming the batch, and its
    /// batch and the one before are written to `exclude_batches_path`
    /// (nullopt: `<default_root_dir>/skip_batches.json`).
    Trainer& add_spike_detection(Mode mode = Mode::Min, size_t window = 10, int64_t warmup = 1,
                                 std::optional<double> atol = std::nullopt, std::optional<double> rtol = 2.0,
                                 const std::optional<std::string>& exclude_batches_path = std::nullopt,
                                 bool finite_only = true) {
        const double none = std::numeric_limits<double>::quiet_NaN();
        check(fulmen_trainer_add_spike_detection(get(), static_cast<int32_t>(mode), window, warmup,
                                                 atol ? *atol : none, rtol ? *rtol : none,
                                                 c_path(exclude_batches_path), finite_only));
        return *this;
    }
    /// Adds Lightning's BasePredictionWriter: during predict,
    /// `write_on_batch_end` gets each batch's prediction ("batch" or
    /// "batch_and_epoch") and `write_on_epoch_end` each loader's
    /// predictions at the epoch's end ("epoch" or "batch_and_epoch"), with
    /// the samples' dataset indices. A function the interval does not use
    /// may be empty. The trainer owns them from then on.
    Trainer& add_prediction_writer(const std::string& write_interval, WriteOnBatchEnd write_on_batch_end,
                                   WriteOnEpochEnd write_on_epoch_end = {}) {
        detail::add_prediction_writer(
            [this](auto... args) { return fulmen_trainer_add_prediction_writer(get(), args...); }, write_interval,
            std::move(write_on_batch_end), std::move(write_on_epoch_end));
        return *this;
    }
    /// add_prediction_writer with the whole predictions, as Lightning's
    /// BasePredictionWriter gets them: each batch's a Value (None, its
    /// tensor, or the tuple or dict of tensors predict_step made).
    Trainer& add_prediction_value_writer(const std::string& write_interval, WriteValueOnBatchEnd write_on_batch_end,
                                         WriteValuesOnEpochEnd write_on_epoch_end = {}) {
        detail::add_prediction_value_writer(
            [this](auto... args) { return fulmen_trainer_add_prediction_value_writer(get(), args...); },
            write_interval, std::move(write_on_batch_end), std::move(write_on_epoch_end));
        return *this;
    }
    /// Adds an OnExceptionCheckpoint: a failed fit saves
    /// `<dirpath>/<filename>.ckpt` (filename nullopt: "on_exception").
    Trainer& add_on_exception_checkpoint(const std::string& dirpath,
                                         const std::optional<std::string>& filename = std::nullopt) {
        check(fulmen_trainer_add_on_exception_checkpoint(get(), dirpath.c_str(), c_path(filename)));
        return *this;
    }
    /// Adds a Timer stopping training after `duration` (seconds, or
    /// "DD:HH:MM:SS"; nullopt only measures), checked every "step" or "epoch".
    Trainer& add_timer(const std::optional<std::string>& duration, const std::string& interval = "step") {
        check(fulmen_trainer_add_timer(get(), c_path(duration), interval.c_str()));
        return *this;
    }
    /// Sends every checkpoint the trainer saves, loads or removes through
    /// `io` (Lightning's CheckpointIO plugin), replacing any set before;
    /// nullptr goes back to local files. The trainer owns it from then on.
    Trainer& set_checkpoint_io(std::unique_ptr<CheckpointIO> io) {
        if (!io) {
            check(fulmen_trainer_set_checkpoint_io(get(), nullptr));
            return *this;
        }
        auto box = std::make_unique<detail::CheckpointIOBox>();
        box->io = std::move(io);
        fulmen_checkpoint_io_vtable vt = detail::CheckpointIOBox::vtable(box.get());
        check(fulmen_trainer_set_checkpoint_io(get(), &vt));
        box.release();  // the trainer owns it now and calls userdata_free once
        return *this;
    }
    /// Adds a logger implemented in C++ (receives every metric the file
    /// loggers get, and those of validate / test runs).
    Trainer& add_logger(Logger logger) {
        auto owned = std::make_unique<Logger>(std::move(logger));
        fulmen_logger_vtable vt = detail::LoggerTrampolines::vtable(owned.get());
        check(fulmen_trainer_add_logger(get(), &vt));
        owned.release();  // fulmen owns it now and calls userdata_free once
        return *this;
    }

    /// Adds a CSV or TensorBoard logger (Lightning's `Trainer(logger=[...])`),
    /// next to the `logger` option's file loggers (set it to false to use
    /// only yours). The trainer shares it: `logger` stays usable, and may
    /// be destroyed while the trainer logs on to it.
    Trainer& add_file_logger(const FileLogger& logger) {
        check(fulmen_trainer_add_file_logger(get(), logger.get()));
        return *this;
    }

    /// The latest value of a logged metric (trainer.callback_metrics[name]).
    double callback_metric(const std::string& name) const {
        return detail::read<double>([&](double* o) { return fulmen_trainer_callback_metric(get(), name.c_str(), o); });
    }
    /// Optimizer steps of the trainer's fits so far (a fit goes on from the
    /// last one's progress).
    int64_t global_step() const {
        return detail::read<int64_t>([&](int64_t* o) { return fulmen_trainer_global_step(get(), o); });
    }
    /// Epochs the trainer's fits completed so far: the epoch the next fit
    /// trains first.
    int64_t current_epoch() const {
        return detail::read<int64_t>([&](int64_t* o) { return fulmen_trainer_current_epoch(get(), o); });
    }
    /// The epoch limit of the next fits (-1: none), Lightning's
    /// `trainer.fit_loop.max_epochs = n`: a finished fit trains on from
    /// its epoch once raised.
    Trainer& set_max_epochs(int64_t max_epochs) {
        check(fulmen_trainer_set_max_epochs(get(), max_epochs));
        return *this;
    }
    /// The optimizer-step limit of the next fits (-1: none), counting
    /// every fit's steps.
    Trainer& set_max_steps(int64_t max_steps) {
        check(fulmen_trainer_set_max_steps(get(), max_steps));
        return *this;
    }
    /// The last fit's log folder (.../lightning_logs/version_N).
    std::string log_dir() const {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) { return fulmen_trainer_log_dir(get(), buf, cap, len); });
    }
    /// The simple profiler's report of the last run (option profiler
    /// "simple"); throws Error (FULMEN_CODE_INVALID_STATE) without one.
    std::string profiler_report() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_trainer_profiler_report(get(), buf, cap, len); });
    }
    /// The best or last checkpoint path of the trainer's first
    /// ModelCheckpoint (the user's, else the default one); throws Error
    /// (FULMEN_CODE_INVALID_STATE) when none was saved.
    std::string checkpoint_path(CheckpointPath which) const {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) {
            return fulmen_trainer_checkpoint_path(get(), static_cast<int32_t>(which), buf, cap, len);
        });
    }
    /// checkpoint_path(CheckpointPath::Best).
    std::string best_model_path() const { return checkpoint_path(CheckpointPath::Best); }
    /// checkpoint_path(CheckpointPath::Last).
    std::string last_model_path() const { return checkpoint_path(CheckpointPath::Last); }
    /// The best monitored score of the ModelCheckpoint; throws Error
    /// (FULMEN_CODE_INVALID_STATE) when it monitors or saved nothing.
    double best_model_score() const {
        return detail::read<double>([&](double* o) { return fulmen_trainer_best_model_score(get(), o); });
    }

    // ---- after a run ---------------------------------------------------

    /// Lightning's `trainer.save_checkpoint(path, weights_only)` after fit
    /// (or validate, test, predict): `module`'s weights and, unless
    /// `weights_only`, what the last fit left (optimizer and scheduler
    /// states, loop progress, callbacks' states and on_save_checkpoint
    /// entries), in the trainer's checkpoint_format; fit(..., path) goes on
    /// from there. `module` must be the last run's module (Error
    /// FULMEN_CODE_INVALID_ARGUMENT); before any run, or for a full
    /// checkpoint without a fit, Error FULMEN_CODE_INVALID_STATE. An
    /// on_save_checkpoint hook that throws ends the call, which rethrows it.
    void save_checkpoint(LightningModule& module, const std::string& path, bool weights_only = false) {
        run([&] { return fulmen_trainer_save_checkpoint(get(), module.get(), path.c_str(), weights_only); });
    }
    /// What the last validate or test returned (Lightning's return value
    /// of `trainer.validate` / `trainer.test`): per loader, the epoch
    /// values logged for the loggers (each loader's own with several) and
    /// those of the stage's start and epoch hooks; empty after fit or
    /// predict and when every loader's limit was 0.
    EvalResults eval_results() const {
        Value list = Value::adopt(
            detail::make<fulmen_value>([&](fulmen_value** o) { return fulmen_trainer_eval_results(get(), o); }));
        EvalResults out;
        for (size_t i = 0, n = list.size(); i < n; i++) out.push_back(to_metrics(list[i]));
        return out;
    }
    /// Lightning's `trainer.callback_metrics` of the last run: every logged
    /// metric's latest value.
    std::map<std::string, double> callback_metrics() const {
        return metrics([](const fulmen_trainer* t, fulmen_value** o) { return fulmen_trainer_callback_metrics(t, o); });
    }
    /// Lightning's `trainer.logged_metrics` of the last run: the latest
    /// value of every metric logged for the loggers (loggers or not).
    std::map<std::string, double> logged_metrics() const {
        return metrics([](const fulmen_trainer* t, fulmen_value** o) { return fulmen_trainer_logged_metrics(t, o); });
    }
    /// Lightning's `trainer.progress_bar_metrics` of the last run.
    std::map<std::string, double> progress_bar_metrics() const {
        return metrics(
            [](const fulmen_trainer* t, fulmen_value** o) { return fulmen_trainer_progress_bar_metrics(t, o); });
    }
    /// Lightning's `trainer.estimated_stepping_batches` for the last fit's
    /// data; nullopt when unbounded (Lightning's inf); Error
    /// FULMEN_CODE_INVALID_STATE before a fit loaded its data.
    std::optional<int64_t> estimated_stepping_batches() const {
        int64_t n = detail::read<int64_t>(
            [&](int64_t* o) { return fulmen_trainer_estimated_stepping_batches(get(), o); });
        if (n < 0) return std::nullopt;
        return n;
    }
    /// Lightning's `trainer.should_stop` after the last fit.
    bool should_stop() const {
        return detail::read<bool>([&](bool* o) { return fulmen_trainer_should_stop(get(), o); });
    }
    /// Lightning's `trainer.num_training_batches`: the last fit's training
    /// batches per epoch; nullopt before a fit or for a source of unknown
    /// length (Lightning's inf).
    std::optional<int64_t> num_training_batches() const {
        int64_t n = detail::read<int64_t>([&](int64_t* o) { return fulmen_trainer_num_training_batches(get(), o); });
        if (n < 0) return std::nullopt;
        return n;
    }
    /// Lightning's `trainer.num_val_batches`: per validation loader of the
    /// last fit's validation or validate run, its batches (nullopt: a
    /// loader of unknown length).
    std::vector<std::optional<int64_t>> num_val_batches() const {
        return optional_counts(read_counts(fulmen_trainer_num_val_batches));
    }
    /// Lightning's `trainer.num_test_batches`, as num_val_batches for the last test run.
    std::vector<std::optional<int64_t>> num_test_batches() const {
        return optional_counts(read_counts(fulmen_trainer_num_test_batches));
    }
    /// Lightning's `trainer.num_predict_batches`, for the last predict run.
    std::vector<std::optional<int64_t>> num_predict_batches() const {
        return optional_counts(read_counts(fulmen_trainer_num_predict_batches));
    }
    /// Lightning's `trainer.num_sanity_val_batches`: the batches of each
    /// validation loader the last fit's sanity check ran.
    std::vector<std::optional<int64_t>> num_sanity_val_batches() const {
        return optional_counts(read_counts(fulmen_trainer_num_sanity_val_batches));
    }
    /// Lightning's `trainer.device_ids`: each device's index (-1 for a CPU).
    std::vector<int64_t> device_ids() const { return read_counts(fulmen_trainer_device_ids); }
    /// The state of the trainer's first EarlyStopping (Lightning's
    /// wait_count, stopped_epoch, best_score); throws
    /// FULMEN_CODE_INVALID_STATE without one.
    using EarlyStoppingState = fulmen::EarlyStoppingState;
    /// The state of the trainer's first EarlyStopping.
    EarlyStoppingState early_stopping_state() const {
        EarlyStoppingState s;
        check(fulmen_trainer_early_stopping_state(get(), &s.wait_count, &s.stopped_epoch, &s.best_score));
        return s;
    }
    /// The GradScaler's loss scale at the end of the last fit (16-mixed);
    /// throws FULMEN_CODE_INVALID_STATE without one.
    double grad_scale() const {
        return detail::read<double>([&](double* o) { return fulmen_trainer_grad_scale(get(), o); });
    }
    /// Lightning's `trainer.is_last_batch` after the last fit.
    bool is_last_batch() const {
        return detail::read<bool>([&](bool* o) { return fulmen_trainer_is_last_batch(get(), o); });
    }
    /// Lightning's `trainer.num_devices`: devices a run uses on this node.
    size_t num_devices() const {
        return detail::read<size_t>([&](size_t* o) { return fulmen_trainer_num_devices(get(), o); });
    }
    /// Lightning's `trainer.node_rank`: this node's index in the job.
    size_t node_rank() const {
        return detail::read<size_t>([&](size_t* o) { return fulmen_trainer_node_rank(get(), o); });
    }

private:
    /// Reads an array of counts a C call on the trainer writes.
    template <class F>
    std::vector<int64_t> read_counts(F f) const {
        return detail::read_counts([&](int64_t* out, size_t cap, size_t* n) { return f(get(), out, cap, n); });
    }
    static std::vector<std::optional<int64_t>> optional_counts(const std::vector<int64_t>& counts) {
        return detail::optional_counts(counts);
    }

    explicit Trainer(fulmen_trainer* owned) noexcept : Handle(owned) {}

    /// Reads one of the trainer's metric dicts (name -> value) through
    /// `fn(trainer, &out)`.
    template <class Fn>
    std::map<std::string, double> metrics(Fn fn) const {
        return to_metrics(Value::adopt(detail::make<fulmen_value>([&](fulmen_value** o) { return fn(get(), o); })));
    }

    /// A dict value {name: float} as a map.
    static std::map<std::string, double> to_metrics(const Value& dict) {
        std::map<std::string, double> out;
        for (size_t i = 0, n = dict.size(); i < n; i++) {
            std::pair<Value, Value> e = dict.entry(i);
            out.emplace(e.first.to_string(), e.second.to_double());
        }
        return out;
    }

    static const char* c_path(const std::optional<std::string>& p) noexcept { return p ? p->c_str() : nullptr; }

    /// The C handles of `loaders` (a nullptr stays NULL: the call refuses it).
    static std::vector<const fulmen_loader*> loader_handles(const std::vector<const Loader*>& loaders) {
        std::vector<const fulmen_loader*> h;
        h.reserve(loaders.size());
        for (const Loader* l : loaders) h.push_back(l != nullptr ? l->get() : nullptr);
        return h;
    }

    static fulmen_trainer* create(const fulmen_trainer_options* options) {
        return detail::make<fulmen_trainer>([&](fulmen_trainer** o) { return fulmen_trainer_new(options, o); });
    }
    template <class Call>
    static void run(Call&& call) {
        detail::clear_pending_exception();
        fulmen_error* err = call();
        // An exception of a callback whose error fulmen swallowed in a run
        // that succeeded is not left behind for a later call.
        if (err == nullptr) detail::clear_pending_exception();
        check(err);
    }
};

}  // namespace fulmen

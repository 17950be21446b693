// fulmen C++ binding: Lightning's hooks, callbacks (host and built-in) and
// host loggers.
#pragma once

#include "tensor.hpp"
#include "value.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fulmen {

/// The hooks, in Lightning's names (the C `fulmen_hook`). Callbacks receive
/// them in Lightning's order: every callback first (in the order added),
/// then the LightningModule.
enum class Hook : int32_t {
    Setup = FULMEN_HOOK_SETUP,                                   ///< setup(stage)
    Teardown = FULMEN_HOOK_TEARDOWN,                             ///< teardown(stage)
    FitStart = FULMEN_HOOK_FIT_START,                            ///< on_fit_start
    FitEnd = FULMEN_HOOK_FIT_END,                                ///< on_fit_end
    SanityCheckStart = FULMEN_HOOK_SANITY_CHECK_START,           ///< on_sanity_check_start
    SanityCheckEnd = FULMEN_HOOK_SANITY_CHECK_END,               ///< on_sanity_check_end
    TrainStart = FULMEN_HOOK_TRAIN_START,                        ///< on_train_start
    TrainEnd = FULMEN_HOOK_TRAIN_END,                            ///< on_train_end
    TrainEpochStart = FULMEN_HOOK_TRAIN_EPOCH_START,             ///< on_train_epoch_start
    TrainEpochEnd = FULMEN_HOOK_TRAIN_EPOCH_END,                 ///< on_train_epoch_end
    TrainBatchStart = FULMEN_HOOK_TRAIN_BATCH_START,             ///< on_train_batch_start
    TrainBatchEnd = FULMEN_HOOK_TRAIN_BATCH_END,                 ///< on_train_batch_end (output: the loss)
    ValidationStart = FULMEN_HOOK_VALIDATION_START,              ///< on_validation_start
    ValidationEnd = FULMEN_HOOK_VALIDATION_END,                  ///< on_validation_end
    ValidationEpochStart = FULMEN_HOOK_VALIDATION_EPOCH_START,   ///< on_validation_epoch_start
    ValidationEpochEnd = FULMEN_HOOK_VALIDATION_EPOCH_END,       ///< on_validation_epoch_end
    ValidationBatchStart = FULMEN_HOOK_VALIDATION_BATCH_START,   ///< on_validation_batch_start
    ValidationBatchEnd = FULMEN_HOOK_VALIDATION_BATCH_END,       ///< on_validation_batch_end
    TestStart = FULMEN_HOOK_TEST_START,                          ///< on_test_start
    TestEnd = FULMEN_HOOK_TEST_END,                              ///< on_test_end
    TestEpochStart = FULMEN_HOOK_TEST_EPOCH_START,               ///< on_test_epoch_start
    TestEpochEnd = FULMEN_HOOK_TEST_EPOCH_END,                   ///< on_test_epoch_end
    TestBatchStart = FULMEN_HOOK_TEST_BATCH_START,               ///< on_test_batch_start
    TestBatchEnd = FULMEN_HOOK_TEST_BATCH_END,                   ///< on_test_batch_end
    PredictStart = FULMEN_HOOK_PREDICT_START,                    ///< on_predict_start
    PredictEnd = FULMEN_HOOK_PREDICT_END,                        ///< on_predict_end
    PredictEpochStart = FULMEN_HOOK_PREDICT_EPOCH_START,         ///< on_predict_epoch_start
    PredictEpochEnd = FULMEN_HOOK_PREDICT_EPOCH_END,             ///< on_predict_epoch_end
    PredictBatchStart = FULMEN_HOOK_PREDICT_BATCH_START,         ///< on_predict_batch_start
    PredictBatchEnd = FULMEN_HOOK_PREDICT_BATCH_END,             ///< on_predict_batch_end (output: the prediction)
    BeforeBackward = FULMEN_HOOK_BEFORE_BACKWARD,                ///< on_before_backward (output: the loss)
    AfterBackward = FULMEN_HOOK_AFTER_BACKWARD,                  ///< on_after_backward (output: the loss)
    BeforeOptimizerStep = FULMEN_HOOK_BEFORE_OPTIMIZER_STEP,     ///< on_before_optimizer_step
    BeforeZeroGrad = FULMEN_HOOK_BEFORE_ZERO_GRAD,               ///< on_before_zero_grad
    SaveCheckpoint = FULMEN_HOOK_SAVE_CHECKPOINT,                ///< on_save_checkpoint (checkpoint_set)
    LoadCheckpoint = FULMEN_HOOK_LOAD_CHECKPOINT,                ///< on_load_checkpoint (checkpoint_get)
    Exception = FULMEN_HOOK_EXCEPTION,                           ///< on_exception (exception_message)
    // The LightningModule's only, when it overrides them
    // (LightningModule::override_hook); fulmen's default runs otherwise.
    ValidationModelEval = FULMEN_HOOK_VALIDATION_MODEL_EVAL,         ///< on_validation_model_eval
    ValidationModelTrain = FULMEN_HOOK_VALIDATION_MODEL_TRAIN,       ///< on_validation_model_train
    TestModelEval = FULMEN_HOOK_TEST_MODEL_EVAL,                     ///< on_test_model_eval
    TestModelTrain = FULMEN_HOOK_TEST_MODEL_TRAIN,                   ///< on_test_model_train
    PredictModelEval = FULMEN_HOOK_PREDICT_MODEL_EVAL,               ///< on_predict_model_eval
    ValidationModelZeroGrad = FULMEN_HOOK_VALIDATION_MODEL_ZERO_GRAD, ///< on_validation_model_zero_grad
    BeforeBatchTransfer = FULMEN_HOOK_BEFORE_BATCH_TRANSFER,         ///< on_before_batch_transfer (set_batch)
    TransferBatchToDevice = FULMEN_HOOK_TRANSFER_BATCH_TO_DEVICE,    ///< transfer_batch_to_device (device, set_batch)
    AfterBatchTransfer = FULMEN_HOOK_AFTER_BATCH_TRANSFER,           ///< on_after_batch_transfer (set_batch)
    PrepareData = FULMEN_HOOK_PREPARE_DATA,                          ///< prepare_data (local rank 0 of each node)
};

/// Lightning's name of `hook` ("on_train_epoch_end"); "" for a value that
/// is not a Hook.
inline std::string_view hook_name(Hook hook) { return fulmen_hook_name(static_cast<int32_t>(hook)); }

/// What a hook sees: trainer state and the hook's data (borrowed: valid
/// only during the hook call).
/// The trainer as a hook sees it during a run (HookContext::trainer()).
using TrainerView = fulmen_trainer_view;

/// EarlyStopping's state (Lightning's `wait_count`, `stopped_epoch`,
/// `best_score`): Trainer::early_stopping_state after a run,
/// HookContext::early_stopping_state during one.
struct EarlyStoppingState {
    int64_t wait_count = 0;     ///< Evaluations without improvement since the best.
    int64_t stopped_epoch = 0;  ///< The epoch it stopped the fit in (0: it did not).
    double best_score = 0;      ///< The best monitored value (+-inf before one).
};

class HookContext {
public:
    /// Wraps the borrowed C context of a call of `hook`.
    HookContext(Hook hook, fulmen_hook_context* ctx) noexcept : hook_(hook), ctx_(ctx) {}

    /// The hook being called.
    Hook hook() const noexcept { return hook_; }
    /// The running entry point: "fit", "validate", "test" or "predict".
    std::string_view stage() const {
        return detail::read<const char*>([&](const char** o) { return fulmen_hook_context_stage(ctx_, o); });
    }
    /// The current epoch (0-based).
    int64_t epoch() const { return query<int64_t>(fulmen_hook_context_epoch); }
    /// Optimizer steps taken so far.
    int64_t global_step() const { return query<int64_t>(fulmen_hook_context_global_step); }
    /// What the trainer knows now (Lightning's `self.trainer.<property>`
    /// from a hook: num_training_batches, num_val_batches, max_epochs,
    /// should_stop, sanity_checking, world_size, ...).
    TrainerView trainer() const {
        TrainerView v{};
        v.struct_size = sizeof v;
        check(fulmen_hook_context_trainer(ctx_, &v));
        return v;
    }
    /// The batch index for batch hooks, -1 for the others.
    int64_t batch_idx() const { return query<int64_t>(fulmen_hook_context_batch_idx); }
    /// The evaluation loader of the batch in a validation / test / predict
    /// batch hook (0 elsewhere).
    size_t dataloader_idx() const { return query<size_t>(fulmen_hook_context_dataloader_idx); }

    /// The latest value of a logged metric; throws Error
    /// (FULMEN_CODE_INVALID_STATE, naming the logged ones) when missing.
    double metric(const std::string& name) const {
        return detail::read<double>([&](double* o) { return fulmen_hook_context_metric(ctx_, name.c_str(), o); });
    }
    /// The latest value of a logged metric, or nullopt when it was not logged.
    std::optional<double> find_metric(const std::string& name) const {
        double v = 0;
        fulmen_error* err = fulmen_hook_context_metric(ctx_, name.c_str(), &v);
        if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_INVALID_STATE) {
            fulmen_error_free(err);
            return std::nullopt;
        }
        check(err);
        return v;
    }

    /// Logs a metric from a hook (Lightning's `self.log` there), with the
    /// hook's on_step / on_epoch defaults and allowed values: training
    /// batch hooks on step by default, validation / test batch hooks on
    /// epoch, start and epoch hooks on epoch only; other hooks throw
    /// (FULMEN_CODE_INVALID_STATE). `flags` are StepContext::log's
    /// (Log::defaults / 0: the hook's defaults). What an epoch-end hook
    /// logs, ModelCheckpoint and EarlyStopping can monitor.
    void log(const std::string& name, double value, uint32_t flags = 0) {
        check(fulmen_hook_context_log(ctx_, name.c_str(), value, flags));
    }

    /// Makes a group of the job's `ranks` for sync_dist logs (torch's
    /// `new_group`, Lightning's sync_dist_group) and returns its id, for
    /// `Log::group(id)`. Every rank calls it in the same hook with the same
    /// ranks, in the same order; a rank outside the group keeps its own
    /// synced values. Throws in prepare_data and on_exception
    /// (FULMEN_CODE_INVALID_STATE) and for ranks outside the job.
    uint32_t new_group(const std::vector<size_t>& ranks) {
        uint32_t id = 0;
        check(fulmen_hook_context_new_group(ctx_, ranks.data(), ranks.size(), &id));
        return id;
    }

    /// Asks the trainer to stop after the current step (Lightning's
    /// `trainer.should_stop = True`; min_epochs / min_steps still apply).
    void request_stop() { check(fulmen_hook_context_request_stop(ctx_)); }
    /// Lightning's on_train_batch_start returning -1, from the module's own
    /// on_hook: this batch is not trained on and the epoch ends there
    /// (throws FULMEN_CODE_INVALID_STATE in another hook or a callback's).
    void skip_rest_of_epoch() { check(fulmen_hook_context_skip_rest_of_epoch(ctx_)); }

    /// Number of tensors of the hook's batch (0 when the hook has none).
    size_t batch_size() const { return query<size_t>(fulmen_hook_context_batch_len); }
    /// Tensor `index` of the hook's batch, as a new owning Tensor.
    Tensor batch(size_t index) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_hook_context_batch_get(ctx_, index, o); });
    }
    /// Replaces the batch in Hook::BeforeBatchTransfer,
    /// TransferBatchToDevice or AfterBatchTransfer (the hook's return value
    /// in Lightning); the tensors are shared.
    void set_batch(const std::vector<const Tensor*>& tensors) {
        std::vector<const fulmen_tensor*> raw;
        raw.reserve(tensors.size());
        for (const Tensor* t : tensors) raw.push_back(t == nullptr ? nullptr : t->get());
        check(fulmen_hook_context_set_batch(ctx_, raw.data(), raw.size()));
    }
    /// The run's root device as a (fulmen_device_type, index) pair
    /// (transfer_batch_to_device's `device`).
    std::pair<int32_t, int64_t> device() const {
        int32_t type = 0;
        int64_t index = 0;
        check(fulmen_hook_context_device(ctx_, &type, &index));
        return {type, index};
    }
    /// The optimizer's index in Hook::BeforeOptimizerStep and
    /// BeforeZeroGrad (configure_optimizers' order), -1 elsewhere.
    int64_t optimizer_index() const { return query<int64_t>(fulmen_hook_context_optimizer_index); }
    /// Lightning's `trainer.num_val_batches` from a hook: per validation
    /// loader of the run, its batches (nullopt: unknown length).
    std::vector<std::optional<int64_t>> num_val_batches() const { return counts(fulmen_hook_context_num_val_batches); }
    /// Lightning's `trainer.num_test_batches` from a hook.
    std::vector<std::optional<int64_t>> num_test_batches() const { return counts(fulmen_hook_context_num_test_batches); }
    /// Lightning's `trainer.num_predict_batches` from a hook.
    std::vector<std::optional<int64_t>> num_predict_batches() const {
        return counts(fulmen_hook_context_num_predict_batches);
    }
    /// Lightning's `trainer.num_sanity_val_batches` from a hook.
    std::vector<std::optional<int64_t>> num_sanity_val_batches() const {
        return counts(fulmen_hook_context_num_sanity_val_batches);
    }
    /// The run's first EarlyStopping as of this hook; throws
    /// FULMEN_CODE_INVALID_STATE without one.
    EarlyStoppingState early_stopping_state() const {
        EarlyStoppingState s;
        check(fulmen_hook_context_early_stopping_state(ctx_, &s.wait_count, &s.stopped_epoch, &s.best_score));
        return s;
    }
    /// The run's optimizers (Lightning's `len(trainer.optimizers)`): those
    /// configure_optimizers added, 0 in validate / test / predict.
    size_t optimizer_count() const { return query<size_t>(fulmen_hook_context_optimizer_count); }
    /// The parameter groups of the run's optimizer `optimizer`.
    size_t param_group_count(size_t optimizer) const {
        return detail::read<size_t>(
            [&](size_t* o) { return fulmen_hook_context_param_group_count(ctx_, optimizer, o); });
    }
    /// Hyperparameter `name` ("lr", "momentum", "betas.0"...) of group
    /// `group` of the run's optimizer `optimizer`: Lightning's
    /// `optimizer.param_groups[group][name]`.
    double param_group(size_t optimizer, size_t group, const std::string& name) const {
        return detail::read<double>([&](double* o) {
            return fulmen_hook_context_param_group_get(ctx_, optimizer, group, name.c_str(), o);
        });
    }
    /// Sets hyperparameter `name` of group `group` of the run's optimizer
    /// `optimizer` for the next steps (checked as Optimizer::set_param_group).
    void set_param_group(size_t optimizer, size_t group, const std::string& name, double value) {
        check(fulmen_hook_context_param_group_set(ctx_, optimizer, group, name.c_str(), value));
    }

    /// The hook's output: the loss (train batch end, before / after
    /// backward), the prediction (predict batch end) or what a validation /
    /// test step returned (their batch end); nullopt otherwise.
    std::optional<Tensor> output() const {
        Tensor t = Tensor::make([&](fulmen_tensor** o) { return fulmen_hook_context_output(ctx_, o); });
        if (!t) return std::nullopt;
        return t;
    }

    /// In on_predict_batch_end: the batch's whole prediction, as Lightning's
    /// hook gets `outputs`: None, its tensor, or the tuple or dict of
    /// tensors predict_step made. Throws Error (FULMEN_CODE_INVALID_STATE)
    /// in other hooks.
    Value prediction() const {
        return Value::adopt(detail::make<fulmen_value>([&](fulmen_value** o) {
            return fulmen_hook_context_prediction(ctx_, o);
        }));
    }

    /// Saves a checkpoint of the running fit to `path` when the hook
    /// returns (Lightning's `trainer.save_checkpoint`); only while fit
    /// trains, not in the sanity check or the checkpoint hooks.
    void save_checkpoint(const std::string& path, bool weights_only = false) {
        check(fulmen_hook_context_save_checkpoint(ctx_, path.c_str(), weights_only));
    }

    /// Logs an image to the run's TensorBoard loggers when the hook returns
    /// (Lightning's `self.logger.experiment.add_image(tag, img, step,
    /// dataformats)`): "CHW", "HWC", "HW" or another order; 1, 3 or 4
    /// channels; uint8 as 0..255, other dtypes as 0..1. Throws Error
    /// (FULMEN_CODE_INVALID_STATE) when the run has no TensorBoard logger.
    void add_image(const std::string& tag, const Tensor& image, int64_t step, const std::string& dataformats = "CHW") {
        check(fulmen_hook_context_add_image(ctx_, tag.c_str(), image.get(), step, dataformats.c_str()));
    }
    /// Logs a histogram of `values` (torch's add_histogram, default buckets).
    void add_histogram(const std::string& tag, const Tensor& values, int64_t step) {
        check(fulmen_hook_context_add_histogram(ctx_, tag.c_str(), values.get(), step));
    }
    /// Logs a (markdown) text under "<tag>/text_summary".
    void add_text(const std::string& tag, const std::string& text, int64_t step) {
        check(fulmen_hook_context_add_text(ctx_, tag.c_str(), text.c_str(), step));
    }

    /// In Hook::SaveCheckpoint: stores `value` under `key` in the checkpoint.
    void checkpoint_set(const std::string& key, const std::string& value) {
        check(fulmen_hook_context_checkpoint_set(ctx_, key.c_str(), value.c_str()));
    }
    /// In Hook::LoadCheckpoint: the value stored under `key` (throws Error,
    /// FULMEN_CODE_INVALID_ARGUMENT, when the checkpoint has no such key).
    std::string checkpoint_get(const std::string& key) const {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) {
            return fulmen_hook_context_checkpoint_get(ctx_, key.c_str(), buf, cap, len);
        });
    }
    /// In Hook::Exception: the message of the failure ending the run.
    std::string exception_message() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_hook_context_exception(ctx_, buf, cap, len); });
    }

    /// The C context.
    fulmen_hook_context* get() const noexcept { return ctx_; }

private:
    template <class Fn>
    std::vector<std::optional<int64_t>> counts(Fn fn) const {
        return detail::optional_counts(
            detail::read_counts([&](int64_t* out, size_t cap, size_t* n) { return fn(ctx_, out, cap, n); }));
    }
    template <class V, class Fn>
    V query(Fn fn) const {
        return detail::read<V>([&](V* out) { return fn(ctx_, out); });
    }
    Hook hook_;
    fulmen_hook_context* ctx_;
};

/// A hook function: receives every hook with its context.
using HookFn = std::function<void(Hook, HookContext&)>;

/// A trainer callback (Lightning's Callback). Build one from a lambda,
/// `Callback([](fulmen::Hook h, fulmen::HookContext& ctx) { ... })`, or
/// derive from it and override on_hook. Hand it to Trainer::add_callback,
/// which owns it from then on.
class Callback {
public:
    /// A callback that ignores every hook (override on_hook).
    Callback() = default;
    /// A callback calling `fn` for every hook.
    explicit Callback(HookFn fn) : fn_(std::move(fn)) {}
    virtual ~Callback() = default;
    Callback(const Callback&) = delete;
    Callback& operator=(const Callback&) = delete;

    /// Called for every hook on the thread running the trainer. An
    /// exception thrown here stops the run and comes back, unchanged, from
    /// the Trainer call (except in Hook::Exception, where it is dropped so
    /// the original failure is reported, as fulmen does).
    virtual void on_hook(Hook hook, HookContext& ctx) {
        if (fn_) fn_(hook, ctx);
    }

private:
    HookFn fn_;
};

/// Whether a smaller or larger monitored value is better.
enum class Mode : int32_t {
    Min = FULMEN_MODE_MIN,  ///< lower is better
    Max = FULMEN_MODE_MAX,  ///< higher is better
};

/// Options of Trainer::add_model_checkpoint, with Lightning's ModelCheckpoint
/// defaults (from `fulmen_model_checkpoint_options_default`).
struct ModelCheckpointOptions {
    std::string dirpath;               ///< Folder; "" = <log dir>/checkpoints.
    std::string filename;              ///< Template like "{epoch}-{val_loss:.3f}"; "" = "{epoch}-{step}".
    std::string monitor;               ///< Metric to rank by; "" = keep the latest.
    Mode mode = Mode::Min;             ///< Which direction is better.
    int64_t save_top_k;                ///< Best checkpoints to keep (-1 all, 0 none).
    bool save_last;                    ///< Also write last.ckpt.
    int64_t every_n_train_steps;       ///< Save every n optimizer steps (0: off).
    int64_t every_n_epochs;            ///< Save every n epochs.
    bool save_weights_only;            ///< Save only the weights.
    bool auto_insert_metric_name;      ///< name=value in file names.
    std::optional<bool> save_on_train_epoch_end;  ///< nullopt: auto; false: after validation; true: epoch end.
    double train_time_interval;        ///< Save when this many seconds of training passed (0: off).
    bool save_on_exception;            ///< On a failure in fit, save a checkpoint and last.
    bool enable_version_counter;       ///< -v1, -v2... for names that exist; false overwrites.
    bool save_last_link;               ///< With save_last, last.ckpt links to the newest checkpoint.

    /// Lightning's defaults.
    ModelCheckpointOptions() : ModelCheckpointOptions(fulmen_model_checkpoint_options_default()) {}
    /// Defaults, ranking by `monitor_name` in `better` direction.
    explicit ModelCheckpointOptions(std::string monitor_name, Mode better = Mode::Min) : ModelCheckpointOptions() {
        monitor = std::move(monitor_name);
        mode = better;
    }

    /// The C options; the strings point into this object.
    fulmen_model_checkpoint_options c_options() const noexcept {
        fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
        o.dirpath = detail::c_str_or_null(dirpath);
        o.filename = detail::c_str_or_null(filename);
        o.monitor = detail::c_str_or_null(monitor);
        o.mode = static_cast<int32_t>(mode);
        o.save_top_k = save_top_k;
        o.save_last = save_last;
        o.every_n_train_steps = every_n_train_steps;
        o.every_n_epochs = every_n_epochs;
        o.save_weights_only = save_weights_only;
        o.auto_insert_metric_name = auto_insert_metric_name;
        o.save_on_train_epoch_end = save_on_train_epoch_end ? (*save_on_train_epoch_end ? 1 : 0) : -1;
        o.train_time_interval = train_time_interval;
        o.save_on_exception = save_on_exception;
        o.enable_version_counter = enable_version_counter;
        o.save_last_link = save_last_link;
        return o;
    }

private:
    explicit ModelCheckpointOptions(const fulmen_model_checkpoint_options& d)
        : save_top_k(d.save_top_k),
          save_last(d.save_last),
          every_n_train_steps(d.every_n_train_steps),
          every_n_epochs(d.every_n_epochs),
          save_weights_only(d.save_weights_only),
          auto_insert_metric_name(d.auto_insert_metric_name),
          train_time_interval(d.train_time_interval),
          save_on_exception(d.save_on_exception),
          enable_version_counter(d.enable_version_counter),
          save_last_link(d.save_last_link) {}
};

/// Options of Trainer::add_early_stopping, with Lightning's EarlyStopping
/// defaults (from `fulmen_early_stopping_options_default`).
struct EarlyStoppingOptions {
    std::string monitor;                       ///< Metric to watch (required).
    Mode mode = Mode::Min;                     ///< Which direction is better.
    double min_delta;                          ///< Smallest change that counts as an improvement.
    int64_t patience;                          ///< Checks without improvement before stopping.
    bool strict;                               ///< A missing metric is an error.
    bool check_finite;                         ///< Stop on NaN or infinite values.
    std::optional<double> stopping_threshold;  ///< Stop once better than this.
    std::optional<double> divergence_threshold;  ///< Stop once worse than this.
    std::optional<bool> check_on_train_epoch_end;  ///< nullopt: auto; false: after validation; true: epoch end.

    /// Defaults, watching `monitor_name` in `better` direction.
    explicit EarlyStoppingOptions(std::string monitor_name, Mode better = Mode::Min)
        : EarlyStoppingOptions(fulmen_early_stopping_options_default()) {
        monitor = std::move(monitor_name);
        mode = better;
    }

    /// The C options; the monitor string points into this object.
    fulmen_early_stopping_options c_options() const noexcept {
        constexpr double none = std::numeric_limits<double>::quiet_NaN();
        fulmen_early_stopping_options o = fulmen_early_stopping_options_default();
        o.monitor = detail::c_str_or_null(monitor);
        o.mode = static_cast<int32_t>(mode);
        o.min_delta = min_delta;
        o.patience = patience;
        o.strict = strict;
        o.check_finite = check_finite;
        o.stopping_threshold = stopping_threshold.value_or(none);
        o.divergence_threshold = divergence_threshold.value_or(none);
        o.check_on_train_epoch_end = check_on_train_epoch_end ? (*check_on_train_epoch_end ? 1 : 0) : -1;
        return o;
    }

private:
    explicit EarlyStoppingOptions(const fulmen_early_stopping_options& d)
        : min_delta(d.min_delta), patience(d.patience), strict(d.strict), check_finite(d.check_finite) {}
};

/// Which checkpoint path of the trainer's ModelCheckpoint to read.
enum class CheckpointPath : int32_t {
    Best = FULMEN_CHECKPOINT_PATH_BEST,  ///< best by the monitored metric (the latest without one)
    Last = FULMEN_CHECKPOINT_PATH_LAST,  ///< last.ckpt (with save_last)
};

/// A logger implemented in C++ (empty members are skipped). The trainer
/// calls it on the thread running fit / validate / test, and owns it once
/// added (Trainer::add_logger).
struct Logger {
    /// Metrics (name -> value) at `step` in `epoch` (-1 for the values
    /// Lightning logs without one: a validation or test batch's step values,
    /// LearningRateMonitor's, ThroughputMonitor's, DeviceStatsMonitor's).
    std::function<void(const std::map<std::string, double>& metrics, int64_t epoch, int64_t step)> log_metrics;
    /// Hyperparameters as text (LightningModule::set_hparam).
    std::function<void(const std::map<std::string, std::string>& hparams)> log_hyperparams;
    /// The run ended: "success", "failed" or "interrupted".
    std::function<void(const std::string& status)> finalize;
    /// ModelCheckpoint wrote the checkpoint `path` (Lightning's
    /// after_save_checkpoint), on rank 0.
    std::function<void(const std::string& path)> after_save_checkpoint;
};

namespace detail {

/// Runs `body` and turns any exception into a C error without recording
/// it for rethrow: for calls whose error fulmen drops (on_exception,
/// finalize("failed")), so the exception that failed the run is the one
/// rethrown, unchanged.
template <class Body>
fulmen_error* guard_dropped_callback(Body&& body) noexcept {
    try {
        std::forward<Body>(body)();
        return nullptr;
    } catch (const Error& e) {
        return fulmen_error_new(e.code(), e.what());
    } catch (const std::exception& e) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, e.what());
    } catch (...) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "unknown C++ exception in a callback");
    }
}

/// Calls `fn(hook, ctx)` for a C hook call, guarding exceptions.
template <class Fn>
fulmen_error* dispatch_hook(int32_t hook, fulmen_hook_context* c, Fn&& fn) noexcept {
    auto body = [&] {
        HookContext ctx(static_cast<Hook>(hook), c);
        fn(ctx.hook(), ctx);
    };
    if (hook == FULMEN_HOOK_EXCEPTION) return guard_dropped_callback(body);
    return guard_callback(body);
}

/// Trampolines from `fulmen_callback_vtable` to a Callback.
struct CallbackTrampolines {
    static void free_callback(void* p) noexcept { delete static_cast<Callback*>(p); }
    static fulmen_error* on_hook(void* ud, int32_t hook, fulmen_hook_context* c) noexcept {
        return dispatch_hook(hook, c, [&](Hook h, HookContext& ctx) { static_cast<Callback*>(ud)->on_hook(h, ctx); });
    }
    static fulmen_callback_vtable vtable(Callback* cb) noexcept {
        fulmen_callback_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = cb;
        vt.userdata_free = &free_callback;
        vt.on_hook = &on_hook;
        return vt;
    }
};

/// Trampolines from `fulmen_logger_vtable` to a Logger.
struct LoggerTrampolines {
    static void free_logger(void* p) noexcept { delete static_cast<Logger*>(p); }
    static fulmen_error* log_metrics(void* ud, const char* const* names, const double* values, size_t n, int64_t epoch,
                                     int64_t step) noexcept {
        return guard_callback([&] {
            std::map<std::string, double> m;
            for (size_t i = 0; i < n; i++) m.emplace(names[i], values[i]);
            static_cast<Logger*>(ud)->log_metrics(m, epoch, step);
        });
    }
    static fulmen_error* log_hyperparams(void* ud, const char* const* keys, const char* const* values,
                                         size_t n) noexcept {
        return guard_callback([&] {
            std::map<std::string, std::string> m;
            for (size_t i = 0; i < n; i++) m.emplace(keys[i], values[i]);
            static_cast<Logger*>(ud)->log_hyperparams(m);
        });
    }
    static fulmen_error* finalize(void* ud, const char* status) noexcept {
        auto body = [&] { static_cast<Logger*>(ud)->finalize(status != nullptr ? status : ""); };
        const bool success = status != nullptr && std::string_view(status) == "success";
        return success ? guard_callback(body) : guard_dropped_callback(body);
    }
    static fulmen_error* after_save_checkpoint(void* ud, const char* path) noexcept {
        return guard_callback([&] { static_cast<Logger*>(ud)->after_save_checkpoint(path != nullptr ? path : ""); });
    }
    static fulmen_logger_vtable vtable(Logger* logger) noexcept {
        fulmen_logger_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = logger;
        vt.userdata_free = &free_logger;
        if (logger->log_metrics) vt.log_metrics = &log_metrics;
        if (logger->log_hyperparams) vt.log_hyperparams = &log_hyperparams;
        if (logger->finalize) vt.finalize = &finalize;
        if (logger->after_save_checkpoint) vt.after_save_checkpoint = &after_save_checkpoint;
        return vt;
    }
};

}  // namespace detail

}  // namespace fulmen

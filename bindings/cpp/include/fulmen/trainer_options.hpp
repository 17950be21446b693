// Generated from src/trainer/option_table.rs by tools/codegen/options.rs; do not edit (regenerate with `make header`).
#ifndef FULMEN_TRAINER_OPTIONS_HPP
#define FULMEN_TRAINER_OPTIONS_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace fulmen::detail {

/// A typed setter for every trainer option, mixed into fulmen::TrainerOptions:
/// `opts.max_epochs(5).limit_train_batches(0.25).precision("bf16-mixed")`.
/// Each sets the option of its name as fulmen_trainer_options_set does and
/// chains; a bad value throws fulmen::Error (FULMEN_CODE_INVALID_ARGUMENT) and
/// leaves the options unchanged. Counts and fractions follow the value's C++
/// type: an integer is a count of batches, a floating value a fraction.
template <class Self>
class TrainerOptionSetters {
public:
    /// `accelerator` (text; default auto): "auto", "cpu", "cuda", "gpu", "mps", "xla", "tpu" or a
    /// registered accelerator's name.
    Self& accelerator(std::string_view v) & { return put("accelerator", v); }
    /// Sets `accelerator` on a temporary and passes it on.
    Self&& accelerator(std::string_view v) && { return std::move(put("accelerator", v)); }

    /// `strategy` (text; default auto): a registered strategy with default settings: "auto",
    /// "single_device", "ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "dp", "xla", ...;
    /// the node count, timeout and backend set so far are kept.
    Self& strategy(std::string_view v) & { return put("strategy", v); }
    /// Sets `strategy` on a temporary and passes it on.
    Self&& strategy(std::string_view v) && { return std::move(put("strategy", v)); }

    /// `devices` (text; default auto): "auto", a count ("1", "-1" = all) or a list of indices
    /// ("0,2", "[1]").
    Self& devices(std::string_view v) & { return put("devices", v); }
    /// Sets `devices` on a temporary and passes it on.
    Self&& devices(std::string_view v) && { return std::move(put("devices", v)); }

    /// `num_nodes` (integer; default 1): machines in a distributed job.
    Self& num_nodes(int64_t v) & { return put("num_nodes", v); }
    /// Sets `num_nodes` on a temporary and passes it on.
    Self&& num_nodes(int64_t v) && { return std::move(put("num_nodes", v)); }

    /// `precision` (text; default 32-true): "32-true", "16-mixed", "bf16-mixed", "64-true",
    /// "16-true", "bf16-true", or legacy "32", "16", "bf16", "64".
    Self& precision(std::string_view v) & { return put("precision", v); }
    /// Sets `precision` on a temporary and passes it on.
    Self&& precision(std::string_view v) && { return std::move(put("precision", v)); }

    /// `logger` (bool or text; default true): true (CSV and TensorBoard), false, "csv",
    /// "tensorboard" or "csv,tensorboard".
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    Self& logger(B v) & { return put("logger", v); }
    /// Sets `logger` on a temporary and passes it on.
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    Self&& logger(B v) && { return std::move(put("logger", v)); }
    /// Sets `logger` from text.
    Self& logger(std::string_view v) & { return put("logger", v); }
    /// Sets `logger` from text on a temporary and passes it on.
    Self&& logger(std::string_view v) && { return std::move(put("logger", v)); }

    /// `fast_dev_run` (bool or batch count; default false): run only this many batches of each loop
    /// (true = 1), without loggers or checkpoints.
    template <class N, std::enable_if_t<std::is_integral_v<N>, int> = 0>
    Self& fast_dev_run(N v) & { return put("fast_dev_run", v); }
    /// Sets `fast_dev_run` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_integral_v<N>, int> = 0>
    Self&& fast_dev_run(N v) && { return std::move(put("fast_dev_run", v)); }

    /// `max_epochs` (integer or "none"; default none): stop after this many epochs; -1 = no limit;
    /// none with max_steps -1 means 1000.
    Self& max_epochs(std::optional<int64_t> v) & { return put("max_epochs", v); }
    /// Sets `max_epochs` on a temporary and passes it on.
    Self&& max_epochs(std::optional<int64_t> v) && { return std::move(put("max_epochs", v)); }

    /// `min_epochs` (integer or "none"; default none): train at least this many epochs before an
    /// early stop takes effect.
    Self& min_epochs(std::optional<int64_t> v) & { return put("min_epochs", v); }
    /// Sets `min_epochs` on a temporary and passes it on.
    Self&& min_epochs(std::optional<int64_t> v) && { return std::move(put("min_epochs", v)); }

    /// `max_steps` (integer; default -1): stop after this many optimizer steps; -1 = no limit.
    Self& max_steps(int64_t v) & { return put("max_steps", v); }
    /// Sets `max_steps` on a temporary and passes it on.
    Self&& max_steps(int64_t v) && { return std::move(put("max_steps", v)); }

    /// `min_steps` (integer or "none"; default none): take at least this many optimizer steps
    /// before an early stop takes effect.
    Self& min_steps(std::optional<int64_t> v) & { return put("min_steps", v); }
    /// Sets `min_steps` on a temporary and passes it on.
    Self&& min_steps(std::optional<int64_t> v) && { return std::move(put("min_steps", v)); }

    /// `max_time` (seconds, "DD:HH:MM:SS" or "none"; default none): stop training after this long
    /// ("none" = no limit).
    template <class Rep, class Period>
    Self& max_time(std::chrono::duration<Rep, Period> v) & { return put("max_time", seconds(v)); }
    /// Sets `max_time` on a temporary and passes it on.
    template <class Rep, class Period>
    Self&& max_time(std::chrono::duration<Rep, Period> v) && { return std::move(put("max_time", seconds(v))); }
    /// Unsets `max_time` ("none").
    Self& max_time(std::nullopt_t) & { return put("max_time", "none"); }
    /// Unsets `max_time` on a temporary and passes it on.
    Self&& max_time(std::nullopt_t) && { return std::move(put("max_time", "none")); }

    /// `limit_train_batches` (batch count, or fraction written with '.'; default 1.0): batches per
    /// training epoch: 1.0 = all, 0.25 = a quarter, 10 = ten.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self& limit_train_batches(N v) & { return put("limit_train_batches", v); }
    /// Sets `limit_train_batches` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self&& limit_train_batches(N v) && { return std::move(put("limit_train_batches", v)); }

    /// `limit_val_batches` (batch count, or fraction written with '.'; default 1.0): batches per
    /// validation run (0 turns validation off).
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self& limit_val_batches(N v) & { return put("limit_val_batches", v); }
    /// Sets `limit_val_batches` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self&& limit_val_batches(N v) && { return std::move(put("limit_val_batches", v)); }

    /// `limit_test_batches` (batch count, or fraction written with '.'; default 1.0): batches per
    /// test run.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self& limit_test_batches(N v) & { return put("limit_test_batches", v); }
    /// Sets `limit_test_batches` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self&& limit_test_batches(N v) && { return std::move(put("limit_test_batches", v)); }

    /// `limit_predict_batches` (batch count, or fraction written with '.'; default 1.0): batches
    /// per predict run.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self& limit_predict_batches(N v) & { return put("limit_predict_batches", v); }
    /// Sets `limit_predict_batches` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self&& limit_predict_batches(N v) && { return std::move(put("limit_predict_batches", v)); }

    /// `overfit_batches` (batch count, or fraction written with '.'; default 0): train and validate
    /// on this many (or this fraction of the) training batches; 0 = off.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self& overfit_batches(N v) & { return put("overfit_batches", v); }
    /// Sets `overfit_batches` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self&& overfit_batches(N v) && { return std::move(put("overfit_batches", v)); }

    /// `val_check_interval` (batch count, or fraction written with '.'; default 1.0): validate
    /// after this fraction of an epoch, or after every this many training batches; or, given as
    /// "DD:HH:MM:SS", once that much wall time passed since training started or the last validation
    /// ended, checked after each training batch (the epoch's end then validates only when the time
    /// is up; with check_val_every_n_epoch n, only in every n-th epoch; ignored by fast_dev_run).
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self& val_check_interval(N v) & { return put("val_check_interval", v); }
    /// Sets `val_check_interval` on a temporary and passes it on.
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    Self&& val_check_interval(N v) && { return std::move(put("val_check_interval", v)); }

    /// `check_val_every_n_epoch` (integer or "none"; default 1): validate every n epochs; none
    /// counts val_check_interval batches across epochs.
    Self& check_val_every_n_epoch(std::optional<int64_t> v) & { return put("check_val_every_n_epoch", v); }
    /// Sets `check_val_every_n_epoch` on a temporary and passes it on.
    Self&& check_val_every_n_epoch(std::optional<int64_t> v) && { return std::move(put("check_val_every_n_epoch", v)); }

    /// `num_sanity_val_steps` (integer; default 2): validation batches run before training as a
    /// sanity check; -1 = all.
    Self& num_sanity_val_steps(int64_t v) & { return put("num_sanity_val_steps", v); }
    /// Sets `num_sanity_val_steps` on a temporary and passes it on.
    Self&& num_sanity_val_steps(int64_t v) && { return std::move(put("num_sanity_val_steps", v)); }

    /// `log_every_n_steps` (integer; default 50): optimizer steps between writes of step metrics to
    /// the loggers; with barebones only 0 is accepted.
    Self& log_every_n_steps(int64_t v) & { return put("log_every_n_steps", v); }
    /// Sets `log_every_n_steps` on a temporary and passes it on.
    Self&& log_every_n_steps(int64_t v) && { return std::move(put("log_every_n_steps", v)); }

    /// `enable_checkpointing` (bool; default true): add a ModelCheckpoint saving the latest epoch
    /// when none is given.
    Self& enable_checkpointing(bool v) & { return put("enable_checkpointing", v); }
    /// Sets `enable_checkpointing` on a temporary and passes it on.
    Self&& enable_checkpointing(bool v) && { return std::move(put("enable_checkpointing", v)); }

    /// `checkpoint_format` (text; default lightning): file format of the checkpoints the trainer
    /// writes: "lightning" (Lightning's torch.save dict, which torch.load and Lightning's Trainer
    /// read) or "safetensors" (fulmen's own, which any safetensors reader opens); either is read
    /// back, whatever is written.
    Self& checkpoint_format(std::string_view v) & { return put("checkpoint_format", v); }
    /// Sets `checkpoint_format` on a temporary and passes it on.
    Self&& checkpoint_format(std::string_view v) && { return std::move(put("checkpoint_format", v)); }

    /// `checkpoint_prefix` (text; default ): LightningModule attribute holding the network in
    /// Lightning checkpoints, with its dot ("model."): written before each state_dict name and
    /// removed when reading; empty writes the names as they are and, when reading, removes the
    /// attribute prefix that makes the names fit the model.
    Self& checkpoint_prefix(std::string_view v) & { return put("checkpoint_prefix", v); }
    /// Sets `checkpoint_prefix` on a temporary and passes it on.
    Self&& checkpoint_prefix(std::string_view v) && { return std::move(put("checkpoint_prefix", v)); }

    /// `enable_progress_bar` (bool; default true): show progress on stderr.
    Self& enable_progress_bar(bool v) & { return put("enable_progress_bar", v); }
    /// Sets `enable_progress_bar` on a temporary and passes it on.
    Self&& enable_progress_bar(bool v) && { return std::move(put("enable_progress_bar", v)); }

    /// `enable_model_summary` (bool; default true): print the layer table when fit starts.
    Self& enable_model_summary(bool v) & { return put("enable_model_summary", v); }
    /// Sets `enable_model_summary` on a temporary and passes it on.
    Self&& enable_model_summary(bool v) && { return std::move(put("enable_model_summary", v)); }

    /// `use_distributed_sampler` (bool; default true): under DDP, give each rank its shard of every
    /// DataLoader (torch's DistributedSampler, padded, reshuffled per epoch); false: every rank
    /// reads the loaders as they are, as Lightning's use_distributed_sampler.
    Self& use_distributed_sampler(bool v) & { return put("use_distributed_sampler", v); }
    /// Sets `use_distributed_sampler` on a temporary and passes it on.
    Self&& use_distributed_sampler(bool v) && { return std::move(put("use_distributed_sampler", v)); }

    /// `reload_dataloaders_every_n_epochs` (integer; default 0): call the module's train_dataloader
    /// / val_dataloader again every n epochs; 0: once (loaders passed to fit are never reloaded).
    Self& reload_dataloaders_every_n_epochs(int64_t v) & { return put("reload_dataloaders_every_n_epochs", v); }
    /// Sets `reload_dataloaders_every_n_epochs` on a temporary and passes it on.
    Self&& reload_dataloaders_every_n_epochs(int64_t v) && { return std::move(put("reload_dataloaders_every_n_epochs", v)); }

    /// `accumulate_grad_batches` (integer; default 1): accumulate gradients over this many batches
    /// per optimizer step.
    Self& accumulate_grad_batches(int64_t v) & { return put("accumulate_grad_batches", v); }
    /// Sets `accumulate_grad_batches` on a temporary and passes it on.
    Self&& accumulate_grad_batches(int64_t v) && { return std::move(put("accumulate_grad_batches", v)); }

    /// `gradient_clip_val` (number or "none"; default none): clip gradients at this value; none =
    /// no clipping.
    Self& gradient_clip_val(std::optional<double> v) & { return put("gradient_clip_val", v); }
    /// Sets `gradient_clip_val` on a temporary and passes it on.
    Self&& gradient_clip_val(std::optional<double> v) && { return std::move(put("gradient_clip_val", v)); }

    /// `gradient_clip_algorithm` (text; default norm): "norm" (scale so the joint 2-norm is at most
    /// the value) or "value" (clamp each element).
    Self& gradient_clip_algorithm(std::string_view v) & { return put("gradient_clip_algorithm", v); }
    /// Sets `gradient_clip_algorithm` on a temporary and passes it on.
    Self&& gradient_clip_algorithm(std::string_view v) && { return std::move(put("gradient_clip_algorithm", v)); }

    /// `profiler` (text; default none): "simple": the wall time of every hook, step, backward,
    /// optimizer step and batch fetch, reported at the end of each run on stderr and by
    /// fulmen_trainer_profiler_report (Lightning's SimpleProfiler); "pytorch": that, and libtorch's
    /// own profiler over the run, whose Chrome trace goes to <log dir>/<stage>.pt.trace.json
    /// (<stage>-rank<N> under DDP) with the hooks as named scopes, and whose longest operators the
    /// report lists (Lightning's PyTorchProfiler).
    Self& profiler(std::string_view v) & { return put("profiler", v); }
    /// Sets `profiler` on a temporary and passes it on.
    Self&& profiler(std::string_view v) && { return std::move(put("profiler", v)); }

    /// `deterministic` (bool or text; default false): true: libtorch's deterministic algorithms
    /// during the run, an op without a deterministic implementation fails; "warn": the same, but
    /// such an op warns and runs (torch.use_deterministic_algorithms(True, warn_only=True)); false
    /// leaves the setting as it is (process-wide, restored after the run).
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    Self& deterministic(B v) & { return put("deterministic", v); }
    /// Sets `deterministic` on a temporary and passes it on.
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    Self&& deterministic(B v) && { return std::move(put("deterministic", v)); }
    /// Sets `deterministic` from text.
    Self& deterministic(std::string_view v) & { return put("deterministic", v); }
    /// Sets `deterministic` from text on a temporary and passes it on.
    Self&& deterministic(std::string_view v) && { return std::move(put("deterministic", v)); }

    /// `benchmark` (bool or text; default none): torch.backends.cudnn.benchmark during the run
    /// (process-wide, restored after): cuDNN times its convolution algorithms per input shape and
    /// keeps the fastest; "none" leaves it as it is, or off when deterministic is on (with
    /// deterministic and true, a warning says PyTorch then ignores determinism for cuDNN); no
    /// effect on the CPU or without cuDNN.
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    Self& benchmark(B v) & { return put("benchmark", v); }
    /// Sets `benchmark` on a temporary and passes it on.
    template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
    Self&& benchmark(B v) && { return std::move(put("benchmark", v)); }
    /// Sets `benchmark` from text.
    Self& benchmark(std::string_view v) & { return put("benchmark", v); }
    /// Sets `benchmark` from text on a temporary and passes it on.
    Self&& benchmark(std::string_view v) && { return std::move(put("benchmark", v)); }

    /// `inference_mode` (bool; default true): evaluate without autograd.
    Self& inference_mode(bool v) & { return put("inference_mode", v); }
    /// Sets `inference_mode` on a temporary and passes it on.
    Self&& inference_mode(bool v) && { return std::move(put("inference_mode", v)); }

    /// `cuda_graphs` (bool; default false): capture each kind of training step (batch shapes and
    /// dtypes, accumulation) in a CUDA graph after cuda_graphs_warmup_steps eager runs, and replay
    /// it: the batch is copied into the graph's inputs and forward, backward, clipping and the
    /// update run as one launch (at most 8 graphs); validation, test and predict steps likewise in
    /// forward-only graphs (per stage, loader and batch shapes; at most 8 more). The steps and the
    /// hooks between backward and the update run at the capture only, their device work at every
    /// replay; the device tensors a step logs are logged again after each replay; a step's returned
    /// tensor is the graph's output, overwritten by the next replay (a predict step's tensors are
    /// copied). Refused with FULMEN_CODE_UNSUPPORTED: other devices than CUDA (and the tests' fake
    /// device), several devices, manual optimization, optimization hooks, detect_anomaly,
    /// optimizers other than fused SGD, Adam and AdamW, and a step that reads a value or logs a
    /// number or a CPU tensor (a step value logged with sync_dist is read after each replay);
    /// gradients stay allocated (zeroed in place), and changing hyperparameters other than the
    /// learning rate, or the model's parameters and buffers, after a capture fails the run; a
    /// predict step that sets its prediction as a value or returns host tensors is refused (a
    /// blocking copy to the host fails the capture itself).
    Self& cuda_graphs(bool v) & { return put("cuda_graphs", v); }
    /// Sets `cuda_graphs` on a temporary and passes it on.
    Self&& cuda_graphs(bool v) && { return std::move(put("cuda_graphs", v)); }

    /// `cuda_graphs_warmup_steps` (integer; default 3): eager runs of each kind of step before
    /// cuda_graphs captures it (at least 1: lazy state such as optimizer buffers must exist before
    /// a capture).
    Self& cuda_graphs_warmup_steps(int64_t v) & { return put("cuda_graphs_warmup_steps", v); }
    /// Sets `cuda_graphs_warmup_steps` on a temporary and passes it on.
    Self&& cuda_graphs_warmup_steps(int64_t v) && { return std::move(put("cuda_graphs_warmup_steps", v)); }

    /// `cuda_graphs_fallback` (bool; default false): with cuda_graphs, a kind of step that cannot
    /// be captured (its capture failed, or 8 graphs exist) runs eagerly from then on, with one
    /// warning, instead of failing the run; on CUDA a failed capture still fails it (torch's CUDA
    /// generator stays marked as capturing after one).
    Self& cuda_graphs_fallback(bool v) & { return put("cuda_graphs_fallback", v); }
    /// Sets `cuda_graphs_fallback` on a temporary and passes it on.
    Self&& cuda_graphs_fallback(bool v) && { return std::move(put("cuda_graphs_fallback", v)); }

    /// `detect_anomaly` (bool; default false): autograd's anomaly mode during the run: a NaN
    /// gradient fails backward, naming the operation.
    Self& detect_anomaly(bool v) & { return put("detect_anomaly", v); }
    /// Sets `detect_anomaly` on a temporary and passes it on.
    Self&& detect_anomaly(bool v) && { return std::move(put("detect_anomaly", v)); }

    /// `barebones` (bool; default false): Lightning's barebones mode, to measure the trainer's own
    /// overhead: turns off checkpointing, the loggers, the progress bar, the model summary and the
    /// sanity check, drops the module's log calls (with one warning per run); while on, turning any
    /// of those on, setting log_every_n_steps other than 0, fast_dev_run, detect_anomaly or a
    /// profiler, or adding a logger, fails with Lightning's error (options set before it are turned
    /// off, not refused; turning it off keeps them off).
    Self& barebones(bool v) & { return put("barebones", v); }
    /// Sets `barebones` on a temporary and passes it on.
    Self&& barebones(bool v) && { return std::move(put("barebones", v)); }

    /// `default_root_dir` (text; default .): folder for logs and checkpoints.
    Self& default_root_dir(std::string_view v) & { return put("default_root_dir", v); }
    /// Sets `default_root_dir` on a temporary and passes it on.
    Self&& default_root_dir(std::string_view v) && { return std::move(put("default_root_dir", v)); }

    /// `seed` (integer or "none"; default none): seed everything at the start of each fit /
    /// validate / test / predict (a non-negative integer).
    Self& seed(std::optional<int64_t> v) & { return put("seed", v); }
    /// Sets `seed` on a temporary and passes it on.
    Self&& seed(std::optional<int64_t> v) && { return std::move(put("seed", v)); }

    /// `detect_nonfinite_loss` (bool; default true): end the run with an error when a training loss
    /// is NaN or infinite: on the CPU before that step's update; on an accelerator the check stays
    /// on the device and is read with the trainer's other values (every log_every_n_steps steps,
    /// epoch ends, checkpoints, the run's end), so steps never wait for the device; the error then
    /// names the steps it happened between, whose updates were made (the ranks of a job agree at
    /// each reading: a NaN on one rank stops every rank there).
    Self& detect_nonfinite_loss(bool v) & { return put("detect_nonfinite_loss", v); }
    /// Sets `detect_nonfinite_loss` on a temporary and passes it on.
    Self&& detect_nonfinite_loss(bool v) && { return std::move(put("detect_nonfinite_loss", v)); }

    /// `callback_timeout` (seconds, "DD:HH:MM:SS" or "none"; default none): a host callback that
    /// runs longer fails the run with FULMEN_CODE_CALLBACK when it returns, since fulmen cannot
    /// interrupt host code; "none" or 0 = no limit.
    template <class Rep, class Period>
    Self& callback_timeout(std::chrono::duration<Rep, Period> v) & { return put("callback_timeout", seconds(v)); }
    /// Sets `callback_timeout` on a temporary and passes it on.
    template <class Rep, class Period>
    Self&& callback_timeout(std::chrono::duration<Rep, Period> v) && { return std::move(put("callback_timeout", seconds(v))); }
    /// Unsets `callback_timeout` ("none").
    Self& callback_timeout(std::nullopt_t) & { return put("callback_timeout", "none"); }
    /// Unsets `callback_timeout` on a temporary and passes it on.
    Self&& callback_timeout(std::nullopt_t) && { return std::move(put("callback_timeout", "none")); }

    /// `handle_signals` (bool; default true): SIGINT / SIGTERM stop a run as described at the top
    /// of this header; false leaves the process's signal handlers alone.
    Self& handle_signals(bool v) & { return put("handle_signals", v); }
    /// Sets `handle_signals` on a temporary and passes it on.
    Self&& handle_signals(bool v) && { return std::move(put("handle_signals", v)); }

    /// `async_checkpoint_io` (bool; default false): save checkpoints on a background thread
    /// (Lightning's AsyncCheckpointIO): the checkpoint is serialized at once, written (or handed to
    /// the checkpoint IO plugin) meanwhile; the next save and the end of the run wait for it and
    /// report its error.
    Self& async_checkpoint_io(bool v) & { return put("async_checkpoint_io", v); }
    /// Sets `async_checkpoint_io` on a temporary and passes it on.
    Self&& async_checkpoint_io(bool v) && { return std::move(put("async_checkpoint_io", v)); }

    /// `slurm_auto_requeue` (bool; default false): under SLURM (SLURM_JOB_ID set, job name not
    /// "bash" / "interactive"): SIGUSR1 saves default_root_dir/hpc_ckpt_<n>.ckpt at the next batch,
    /// epoch or validation end, runs `scontrol requeue <job id>` and stops the fit with
    /// FULMEN_CODE_INTERRUPTED; fit without ckpt_path resumes from the highest hpc_ckpt_<n>.ckpt
    /// (Lightning's SLURMEnvironment auto_requeue).
    Self& slurm_auto_requeue(bool v) & { return put("slurm_auto_requeue", v); }
    /// Sets `slurm_auto_requeue` on a temporary and passes it on.
    Self&& slurm_auto_requeue(bool v) && { return std::move(put("slurm_auto_requeue", v)); }

    /// `process_group_backend` (text; default none): "gloo", "nccl", a custom accelerator's
    /// collectives hook, or "none" = by device (gloo on CPU, nccl on CUDA, the accelerator's hook
    /// when it has one).
    Self& process_group_backend(std::string_view v) & { return put("process_group_backend", v); }
    /// Sets `process_group_backend` on a temporary and passes it on.
    Self&& process_group_backend(std::string_view v) && { return std::move(put("process_group_backend", v)); }

    /// `sync_batchnorm` (bool; default false): strategies "ddp", "ddp_spawn" and "fsdp": every
    /// BatchNorm normalises over the whole job's batch while fitting, its statistics and their
    /// gradients summed over the ranks (torch's SyncBatchNorm); the model's BatchNorms are plain
    /// again after the fit; one-process strategies ignore it, as Lightning does.
    Self& sync_batchnorm(bool v) & { return put("sync_batchnorm", v); }
    /// Sets `sync_batchnorm` on a temporary and passes it on.
    Self&& sync_batchnorm(bool v) && { return std::move(put("sync_batchnorm", v)); }

    /// `fsdp_sharding_strategy` (text; default FULL_SHARD): strategy "fsdp": FULL_SHARD (parameters
    /// freed after each unit's forward and gathered again for its backward), SHARD_GRAD_OP
    /// (gathered parameters kept until the backward ends), NO_SHARD (nothing sharded, gradients
    /// averaged), HYBRID_SHARD (FULL_SHARD among the ranks of each of num_nodes nodes, the nodes
    /// replicas whose gradient shards are averaged) or _HYBRID_SHARD_ZERO2 (the same with
    /// SHARD_GRAD_OP within the node).
    Self& fsdp_sharding_strategy(std::string_view v) & { return put("fsdp_sharding_strategy", v); }
    /// Sets `fsdp_sharding_strategy` on a temporary and passes it on.
    Self&& fsdp_sharding_strategy(std::string_view v) && { return std::move(put("fsdp_sharding_strategy", v)); }

    /// `fsdp_auto_wrap_policy` (text; default none): strategy "fsdp": comma-separated module class
    /// names ("TransformerEncoderLayer", "Sequential", "HostModule", ...) whose every instance is a
    /// sharding unit; the root module owns the rest.
    Self& fsdp_auto_wrap_policy(std::string_view v) & { return put("fsdp_auto_wrap_policy", v); }
    /// Sets `fsdp_auto_wrap_policy` on a temporary and passes it on.
    Self&& fsdp_auto_wrap_policy(std::string_view v) && { return std::move(put("fsdp_auto_wrap_policy", v)); }

    /// `fsdp_min_num_params` (text; default none): strategy "fsdp": a module whose parameters not
    /// yet in a unit number at least this many becomes a unit (torch's
    /// size_based_auto_wrap_policy); "none" = the class list alone.
    Self& fsdp_min_num_params(std::string_view v) & { return put("fsdp_min_num_params", v); }
    /// Sets `fsdp_min_num_params` on a temporary and passes it on.
    Self&& fsdp_min_num_params(std::string_view v) && { return std::move(put("fsdp_min_num_params", v)); }

    /// `fsdp_activation_checkpointing_policy` (text; default none): strategy "fsdp":
    /// comma-separated module class names whose every instance below the root runs its forward as a
    /// checkpoint (Lightning's activation_checkpointing_policy): its activations are not kept, and
    /// backward runs the forward again (the same dropout masks and autocast) to get them; a class
    /// that names no module is refused.
    Self& fsdp_activation_checkpointing_policy(std::string_view v) & { return put("fsdp_activation_checkpointing_policy", v); }
    /// Sets `fsdp_activation_checkpointing_policy` on a temporary and passes it on.
    Self&& fsdp_activation_checkpointing_policy(std::string_view v) && { return std::move(put("fsdp_activation_checkpointing_policy", v)); }

    /// `fsdp_param_dtype` (text; default none): strategy "fsdp": torch's
    /// MixedPrecisionPolicy.param_dtype ("bf16", "fp16", "fp32" or "none"): each unit's parameters
    /// are gathered in it and its forward and backward compute in it (its floating inputs cast to
    /// it), while the shards the optimizers step stay in the parameters' own dtype; refused under
    /// NO_SHARD.
    Self& fsdp_param_dtype(std::string_view v) & { return put("fsdp_param_dtype", v); }
    /// Sets `fsdp_param_dtype` on a temporary and passes it on.
    Self&& fsdp_param_dtype(std::string_view v) && { return std::move(put("fsdp_param_dtype", v)); }

    /// `fsdp_reduce_dtype` (text; default none): strategy "fsdp": torch's
    /// MixedPrecisionPolicy.reduce_dtype: the dtype gradients are reduce-scattered in before they
    /// land in the shards ("none" = fsdp_param_dtype's).
    Self& fsdp_reduce_dtype(std::string_view v) & { return put("fsdp_reduce_dtype", v); }
    /// Sets `fsdp_reduce_dtype` on a temporary and passes it on.
    Self&& fsdp_reduce_dtype(std::string_view v) && { return std::move(put("fsdp_reduce_dtype", v)); }

    /// `fsdp_forward_prefetch` (bool; default false): strategy "fsdp": torch FSDP's
    /// forward_prefetch: each unit's forward starts gathering the unit that ran after it in the
    /// last forward, so the gather overlaps the computation (one more unit's parameters held at a
    /// time).
    Self& fsdp_forward_prefetch(bool v) & { return put("fsdp_forward_prefetch", v); }
    /// Sets `fsdp_forward_prefetch` on a temporary and passes it on.
    Self&& fsdp_forward_prefetch(bool v) && { return std::move(put("fsdp_forward_prefetch", v)); }

    /// `fsdp_backward_prefetch` (text; default BACKWARD_PRE): strategy "fsdp": torch FSDP's
    /// backward_prefetch: "BACKWARD_PRE" = each unit's backward starts gathering the unit whose
    /// backward comes next (as FSDP2 does), so the gather overlaps the computation; "none" = each
    /// unit is gathered when its backward begins.
    Self& fsdp_backward_prefetch(std::string_view v) & { return put("fsdp_backward_prefetch", v); }
    /// Sets `fsdp_backward_prefetch` on a temporary and passes it on.
    Self&& fsdp_backward_prefetch(std::string_view v) && { return std::move(put("fsdp_backward_prefetch", v)); }

    /// `fsdp_sync_module_states` (bool; default true): strategy "fsdp": torch FSDP's
    /// sync_module_states: before sharding, the ranks check that they hold the same parameters and
    /// take rank 0's parameters and buffers; false = no collective before the first gather and
    /// every rank must start from the same values (as FSDP2's fully_shard, which a job shared with
    /// PyTorch FSDP2 ranks needs).
    Self& fsdp_sync_module_states(bool v) & { return put("fsdp_sync_module_states", v); }
    /// Sets `fsdp_sync_module_states` on a temporary and passes it on.
    Self&& fsdp_sync_module_states(bool v) && { return std::move(put("fsdp_sync_module_states", v)); }

    /// `fsdp_reduce_scatter_unused_params` (bool; default false): strategy "fsdp": FSDP2's
    /// set_reduce_scatter_unused_params(True): a unit's reduce-scatter carries exactly the
    /// gradients of its parameters that have or require one (zeros for one a rank lacks, a frozen
    /// parameter without one left out), each of which then gets one, zeros where no rank had one,
    /// and the root and units fed the data reduce at the end of each backward, as FSDP2 sends and
    /// orders them (a job shared with PyTorch FSDP2 ranks needs it; every rank must agree on which
    /// parameters require grad); false = one more element per parameter says whether any rank had a
    /// gradient, a parameter no rank had one for keeps none, and every unit reduces as soon as its
    /// gradients are there.
    Self& fsdp_reduce_scatter_unused_params(bool v) & { return put("fsdp_reduce_scatter_unused_params", v); }
    /// Sets `fsdp_reduce_scatter_unused_params` on a temporary and passes it on.
    Self&& fsdp_reduce_scatter_unused_params(bool v) && { return std::move(put("fsdp_reduce_scatter_unused_params", v)); }

    /// `fsdp_cpu_offload` (bool; default false): strategy "fsdp": Lightning's cpu_offload (torch's
    /// CPUOffloadPolicy): the parameter shards, their gradients and the optimizer states live in
    /// the host's memory (the shards pinned under CUDA) and the optimizers step there; each gather
    /// copies a unit's shards to the device and each reduce-scatter's result comes back, so the
    /// device holds only gathered units, activations and buffers (refused with NO_SHARD).
    Self& fsdp_cpu_offload(bool v) & { return put("fsdp_cpu_offload", v); }
    /// Sets `fsdp_cpu_offload` on a temporary and passes it on.
    Self&& fsdp_cpu_offload(bool v) && { return std::move(put("fsdp_cpu_offload", v)); }

    /// `fsdp_state_dict_type` (text; default full): strategy "fsdp": "full" = checkpoints hold the
    /// whole state, gathered from every rank and written by rank 0; "sharded" = each checkpoint is
    /// a torch.distributed.checkpoint directory (every rank writes its shards, rank 0 .metadata and
    /// meta.pt), as Lightning's FSDP strategies write; it resumes on any number of ranks.
    Self& fsdp_state_dict_type(std::string_view v) & { return put("fsdp_state_dict_type", v); }
    /// Sets `fsdp_state_dict_type` on a temporary and passes it on.
    Self&& fsdp_state_dict_type(std::string_view v) && { return std::move(put("fsdp_state_dict_type", v)); }

    /// `tensor_parallel_plan` (text; default none): strategy "model_parallel": the layers to split
    /// across the ranks, "path=style, ..." (what parallelize_module's plan says; Linear and
    /// Embedding layers), each style one of colwise (ColwiseParallel()), colwise_replicated_output
    /// (ColwiseParallel(output_layouts=Replicate())), rowwise (RowwiseParallel()) and
    /// rowwise_replicated_input (RowwiseParallel(input_layouts=Replicate())).
    Self& tensor_parallel_plan(std::string_view v) & { return put("tensor_parallel_plan", v); }
    /// Sets `tensor_parallel_plan` on a temporary and passes it on.
    Self&& tensor_parallel_plan(std::string_view v) && { return std::move(put("tensor_parallel_plan", v)); }

    /// `data_parallel_size` (text; default auto): strategy "model_parallel": Lightning's
    /// data_parallel_size, "auto" (num_nodes) or a count; fulmen runs 1 (every rank in the
    /// tensor-parallel group) and refuses more.
    Self& data_parallel_size(std::string_view v) & { return put("data_parallel_size", v); }
    /// Sets `data_parallel_size` on a temporary and passes it on.
    Self&& data_parallel_size(std::string_view v) && { return std::move(put("data_parallel_size", v)); }

    /// `tensor_parallel_size` (text; default auto): strategy "model_parallel": Lightning's
    /// tensor_parallel_size, "auto" (the ranks per data-parallel replica) or a count, which must be
    /// the world size.
    Self& tensor_parallel_size(std::string_view v) & { return put("tensor_parallel_size", v); }
    /// Sets `tensor_parallel_size` on a temporary and passes it on.
    Self&& tensor_parallel_size(std::string_view v) && { return std::move(put("tensor_parallel_size", v)); }

    /// `save_distributed_checkpoint` (bool; default true): strategy "model_parallel": Lightning's
    /// save_distributed_checkpoint; true = each checkpoint is a torch.distributed.checkpoint
    /// directory (every rank writes its parts of the split parameters and their optimizer states,
    /// rank 0 .metadata and meta.pt; the model's states under "state_dict"), as Lightning's
    /// ModelParallelStrategy writes; it resumes on any number of ranks, each reading only its
    /// parts; false = one file, gathered whole and written by rank 0 (what a checkpoint_io plugin
    /// or a weight-averaging callback's state needs: sharded directories refuse them).
    Self& save_distributed_checkpoint(bool v) & { return put("save_distributed_checkpoint", v); }
    /// Sets `save_distributed_checkpoint` on a temporary and passes it on.
    Self&& save_distributed_checkpoint(bool v) && { return std::move(put("save_distributed_checkpoint", v)); }

    /// `ddp_timeout` (seconds or "DD:HH:MM:SS"; default 1800): limit on the rendezvous and on every
    /// collective of a distributed job.
    template <class Rep, class Period>
    Self& ddp_timeout(std::chrono::duration<Rep, Period> v) & { return put("ddp_timeout", seconds(v)); }
    /// Sets `ddp_timeout` on a temporary and passes it on.
    template <class Rep, class Period>
    Self&& ddp_timeout(std::chrono::duration<Rep, Period> v) && { return std::move(put("ddp_timeout", seconds(v))); }

private:
    Self& self() noexcept { return static_cast<Self&>(*this); }
    template <class V>
    Self& put(const char* key, const V& v) { return self().set(key, v); }
    template <class V>
    Self& put(const char* key, const std::optional<V>& v) { return v ? self().set(key, *v) : self().set(key, "none"); }
    template <class Rep, class Period>
    static double seconds(std::chrono::duration<Rep, Period> d) { return std::chrono::duration<double>(d).count(); }
};

}  // namespace fulmen::detail

#endif  // FULMEN_TRAINER_OPTIONS_HPP

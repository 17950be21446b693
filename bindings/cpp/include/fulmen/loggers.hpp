// fulmen C++ binding: Lightning's CSVLogger, TensorBoardLogger (FileLogger),
// MLFlowLogger (MlflowLogger), WandbLogger (WandbLogger) and CometLogger
// (CometLogger) as handles, for
// a loop of one's own or added to a Trainer (Trainer::add_file_logger).
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "tensor.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// A CSV or TensorBoard logger (fulmen_logger): `save_dir/name/version_N`
/// with Lightning's next free version, made on first use; the settings
/// (name, version, prefix, flush_logs_every_n_steps, default_hp_metric)
/// apply before that and chain:
/// `FileLogger::csv("logs").name("exp").prefix("train")`.
class FileLogger : public detail::Handle<fulmen_logger, fulmen_logger_free> {
public:
    /// An empty logger object (no handle).
    FileLogger() = default;

    /// Lightning's CSVLogger(save_dir): metrics.csv and hparams.yaml.
    static FileLogger csv(const std::string& save_dir) {
        return FileLogger(
            detail::make<fulmen_logger>([&](fulmen_logger** o) { return fulmen_logger_csv_new(save_dir.c_str(), o); }));
    }
    /// Lightning's TensorBoardLogger(save_dir): event files.
    static FileLogger tensorboard(const std::string& save_dir) {
        return FileLogger(detail::make<fulmen_logger>(
            [&](fulmen_logger** o) { return fulmen_logger_tensorboard_new(save_dir.c_str(), o); }));
    }

    /// The experiment name (nullopt or "": versions directly in save_dir).
    FileLogger& name(const std::optional<std::string>& name) & {
        check(fulmen_logger_set_name(get(), name ? name->c_str() : nullptr));
        return *this;
    }
    /// Sets the name on a temporary and passes it on.
    FileLogger&& name(const std::optional<std::string>& n) && { return std::move(name(n)); }
    /// The version `version_<n>` (-1: the next free number).
    FileLogger& version(int64_t n) & {
        check(fulmen_logger_set_version(get(), n));
        return *this;
    }
    /// Sets the version on a temporary and passes it on.
    FileLogger&& version(int64_t n) && { return std::move(version(n)); }
    /// The version folder's own name (Lightning's `version="name"`).
    FileLogger& version(const std::string& folder) & {
        check(fulmen_logger_set_version_name(get(), folder.c_str()));
        return *this;
    }
    /// Sets the version folder on a temporary and passes it on.
    FileLogger&& version(const std::string& folder) && { return std::move(version(folder)); }
    /// The prefix put with '-' before every metric name.
    FileLogger& prefix(const std::string& p) & {
        check(fulmen_logger_set_prefix(get(), p.c_str()));
        return *this;
    }
    /// Sets the prefix on a temporary and passes it on.
    FileLogger&& prefix(const std::string& p) && { return std::move(prefix(p)); }
    /// CSV: rows are written when (step + 1) % n == 0 (default 100).
    FileLogger& flush_logs_every_n_steps(int64_t n) & {
        check(fulmen_logger_set_flush_logs_every_n_steps(get(), n));
        return *this;
    }
    /// Sets flush_logs_every_n_steps on a temporary and passes it on.
    FileLogger&& flush_logs_every_n_steps(int64_t n) && { return std::move(flush_logs_every_n_steps(n)); }
    /// TensorBoard: hyperparameters come with hp_metric = -1 (default true).
    FileLogger& default_hp_metric(bool on) & {
        check(fulmen_logger_set_default_hp_metric(get(), on));
        return *this;
    }
    /// Sets default_hp_metric on a temporary and passes it on.
    FileLogger&& default_hp_metric(bool on) && { return std::move(default_hp_metric(on)); }
    /// TensorBoard: the files go to `sub_dir` below the run's folder
    /// (Lightning's sub_dir; nullopt or "": none); checkpoints stay in the
    /// run's folder.
    FileLogger& sub_dir(const std::optional<std::string>& dir) & {
        check(fulmen_logger_set_sub_dir(get(), dir ? dir->c_str() : nullptr));
        return *this;
    }
    /// Sets sub_dir on a temporary and passes it on.
    FileLogger&& sub_dir(const std::optional<std::string>& dir) && { return std::move(sub_dir(dir)); }

    /// The run's folder (Lightning's log_dir), made now if needed.
    std::string log_dir() {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) { return fulmen_logger_log_dir(get(), buf, cap, len); });
    }
    /// The version number, resolved now if needed; -1 for a named version.
    int64_t version_number() {
        return detail::read<int64_t>([&](int64_t* o) { return fulmen_logger_version(get(), o); });
    }

    /// Lightning's log_metrics(metrics, step): a CSV row, or TensorBoard
    /// scalars, names prefixed.
    void log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
        std::vector<const char*> names;
        std::vector<double> values;
        for (const auto& [k, v] : metrics) {
            names.push_back(k.c_str());
            values.push_back(v);
        }
        check(fulmen_logger_log_metrics(get(), names.data(), values.data(), names.size(), step));
    }
    /// Lightning's log_hyperparams(params), values as text.
    void log_hyperparams(const std::map<std::string, std::string>& params) {
        std::vector<const char*> keys;
        std::vector<const char*> values;
        for (const auto& [k, v] : params) {
            keys.push_back(k.c_str());
            values.push_back(v.c_str());
        }
        check(fulmen_logger_log_hyperparams(get(), keys.data(), values.data(), keys.size()));
    }
    /// TensorBoard: SummaryWriter.add_image(tag, image, step, dataformats).
    void add_image(const std::string& tag, const Tensor& image, int64_t step, const std::string& dataformats = "CHW") {
        check(fulmen_logger_add_image(get(), tag.c_str(), image.get(), step, dataformats.c_str()));
    }
    /// TensorBoard: SummaryWriter.add_histogram(tag, values, step).
    void add_histogram(const std::string& tag, const Tensor& values, int64_t step) {
        check(fulmen_logger_add_histogram(get(), tag.c_str(), values.get(), step));
    }
    /// TensorBoard: SummaryWriter.add_text(tag, text, step).
    void add_text(const std::string& tag, const std::string& text, int64_t step) {
        check(fulmen_logger_add_text(get(), tag.c_str(), text.c_str(), step));
    }
    /// Makes what was logged durable (Lightning's save()).
    void save() { check(fulmen_logger_save(get())); }
    /// Ends the run (Lightning's finalize(status)).
    void finalize(const std::string& status = "success") { check(fulmen_logger_finalize(get(), status.c_str())); }

protected:
    /// Adopts an owned handle.
    explicit FileLogger(fulmen_logger* owned) noexcept : Handle(owned) {}
};

/// How many checkpoints an MlflowLogger uploads (Lightning's log_model).
enum class LogModel : int32_t {
    Off = FULMEN_MLFLOW_LOG_MODEL_OFF,        ///< None (log_model=False).
    AtEnd = FULMEN_MLFLOW_LOG_MODEL_AT_END,  ///< Those on disk at finalize (log_model=True).
    All = FULMEN_MLFLOW_LOG_MODEL_ALL,        ///< Each when saved (log_model="all").
};

/// Lightning's MLFlowLogger on an `mlflow server` (http://host:port): the
/// experiment found or made by name and a run started on first use; the
/// settings apply before that and chain:
/// `MlflowLogger("http://127.0.0.1:5000", "exp").run_name("r").log_model(LogModel::All)`.
/// log_metrics, log_hyperparams, finalize and Trainer::add_file_logger
/// are FileLogger's; its file settings throw (FULMEN_CODE_INVALID_ARGUMENT).
class MlflowLogger : public FileLogger {
public:
    /// An empty logger object (no handle).
    MlflowLogger() = default;
    /// A logger of `experiment` ("" for "lightning_logs") at `tracking_uri`
    /// ("" for MLFLOW_TRACKING_URI).
    MlflowLogger(const std::string& tracking_uri, const std::string& experiment)
        : FileLogger(detail::make<fulmen_logger>([&](fulmen_logger** o) {
              return fulmen_logger_mlflow_new(tracking_uri.c_str(), experiment.c_str(), o);
          })) {}

    /// The run's name (the mlflow.runName tag).
    MlflowLogger& run_name(const std::string& name) & {
        check(fulmen_logger_mlflow_set_run_name(get(), name.c_str()));
        return *this;
    }
    /// Sets the run name on a temporary and passes it on.
    MlflowLogger&& run_name(const std::string& name) && { return std::move(run_name(name)); }
    /// A tag of the run (Lightning's tags).
    MlflowLogger& tag(const std::string& key, const std::string& value) & {
        check(fulmen_logger_mlflow_set_tag(get(), key.c_str(), value.c_str()));
        return *this;
    }
    /// Sets a tag on a temporary and passes it on.
    MlflowLogger&& tag(const std::string& key, const std::string& value) && { return std::move(tag(key, value)); }
    /// Which checkpoints become artifacts (Lightning's log_model).
    MlflowLogger& log_model(LogModel mode) & {
        check(fulmen_logger_mlflow_set_log_model(get(), static_cast<int32_t>(mode)));
        return *this;
    }
    /// Sets log_model on a temporary and passes it on.
    MlflowLogger&& log_model(LogModel mode) && { return std::move(log_model(mode)); }
    /// Where a new experiment keeps its artifacts (artifact_location).
    MlflowLogger& artifact_location(const std::string& location) & {
        check(fulmen_logger_mlflow_set_artifact_location(get(), location.c_str()));
        return *this;
    }
    /// Sets artifact_location on a temporary and passes it on.
    MlflowLogger&& artifact_location(const std::string& l) && { return std::move(artifact_location(l)); }
    /// Logs into this existing run (Lightning's run_id).
    MlflowLogger& run_id(const std::string& id) & {
        check(fulmen_logger_mlflow_set_run_id(get(), id.c_str()));
        return *this;
    }
    /// Sets run_id on a temporary and passes it on.
    MlflowLogger&& run_id(const std::string& id) && { return std::move(run_id(id)); }

    /// The run's id (Lightning's version), starting the run if needed.
    std::string run_id() {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_logger_mlflow_run_id(get(), buf, cap, len); });
    }
    /// The experiment's id (Lightning's name), starting the run if needed.
    std::string experiment_id() {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_logger_mlflow_experiment_id(get(), buf, cap, len); });
    }
    /// Uploads the file at `path` into the run's artifact folder `artifact_path`.
    void log_artifact(const std::string& path, const std::string& artifact_path = "") {
        check(fulmen_logger_mlflow_log_artifact(get(), path.c_str(), artifact_path.c_str()));
    }
};

/// Lightning's WandbLogger in W&B's offline mode: the run written under
/// `save_dir/wandb/offline-run-<time>-<id>/` for `wandb sync`, started on
/// first use; the settings apply before that and chain:
/// `WandbLogger("logs", "proj").name("r").tag("baseline")`.
/// log_metrics, log_hyperparams, finalize and Trainer::add_file_logger
/// are FileLogger's (its file settings throw FULMEN_CODE_INVALID_ARGUMENT);
/// the run ends with finish() or when the last holder frees it.
class WandbLogger : public FileLogger {
public:
    /// An empty logger object (no handle).
    WandbLogger() = default;
    /// A logger of `project` ("" for "lightning_logs") under `save_dir`
    /// ("" for the working directory).
    WandbLogger(const std::string& save_dir, const std::string& project)
        : FileLogger(detail::make<fulmen_logger>([&](fulmen_logger** o) {
              return fulmen_logger_wandb_new(save_dir.c_str(), project.c_str(), o);
          })) {}

    /// The run's display name (Lightning's name).
    WandbLogger& name(const std::string& name) & {
        check(fulmen_logger_wandb_set_name(get(), name.c_str()));
        return *this;
    }
    /// Sets the name on a temporary and passes it on.
    WandbLogger&& name(const std::string& n) && { return std::move(name(n)); }
    /// The run's id (Lightning's id / version; "" for a random one).
    WandbLogger& id(const std::string& id) & {
        check(fulmen_logger_wandb_set_id(get(), id.c_str()));
        return *this;
    }
    /// Sets the id on a temporary and passes it on.
    WandbLogger&& id(const std::string& i) && { return std::move(id(i)); }
    /// A run setting: "entity", "group", "job_type" or "notes".
    WandbLogger& setting(const std::string& key, const std::string& value) & {
        check(fulmen_logger_wandb_set_setting(get(), key.c_str(), value.c_str()));
        return *this;
    }
    /// Sets a setting on a temporary and passes it on.
    WandbLogger&& setting(const std::string& k, const std::string& v) && { return std::move(setting(k, v)); }
    /// A tag of the run.
    WandbLogger& tag(const std::string& tag) & {
        check(fulmen_logger_wandb_add_tag(get(), tag.c_str()));
        return *this;
    }
    /// Adds a tag on a temporary and passes it on.
    WandbLogger&& tag(const std::string& t) && { return std::move(tag(t)); }

    /// The run's id (Lightning's version), starting the run if needed.
    std::string run_id() {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_logger_wandb_run_id(get(), buf, cap, len); });
    }
    /// The run's folder (what `wandb sync` takes), starting the run if needed.
    std::string run_dir() {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_logger_wandb_run_dir(get(), buf, cap, len); });
    }
    /// Ends the run now with `exit_code` (wandb.finish); later logging throws.
    void finish(int32_t exit_code = 0) { check(fulmen_logger_wandb_finish(get(), exit_code)); }
};

/// Lightning's CometLogger in Comet's offline mode: the experiment written
/// as the archive `offline_dir/<key>-<6 letters>.zip` for `comet upload`,
/// started on first use (its messages in a working folder until it ends);
/// the settings apply before that and chain:
/// `CometLogger("logs", "proj").name("r").tag("baseline")`.
/// log_metrics, log_hyperparams, finalize and Trainer::add_file_logger
/// are FileLogger's (its file settings throw FULMEN_CODE_INVALID_ARGUMENT);
/// the experiment ends with end() or when the last holder frees it.
class CometLogger : public FileLogger {
public:
    /// An empty logger object (no handle).
    CometLogger() = default;
    /// A logger of `project` ("" for none) whose archive goes to
    /// `offline_dir` ("" for the working directory).
    CometLogger(const std::string& offline_dir, const std::string& project)
        : FileLogger(detail::make<fulmen_logger>([&](fulmen_logger** o) {
              return fulmen_logger_comet_new(offline_dir.c_str(), project.c_str(), o);
          })) {}

    /// The experiment's name (Lightning's name).
    CometLogger& name(const std::string& name) & {
        check(fulmen_logger_comet_set_name(get(), name.c_str()));
        return *this;
    }
    /// Sets the name on a temporary and passes it on.
    CometLogger&& name(const std::string& n) && { return std::move(name(n)); }
    /// The workspace the upload goes to ("" for the account's default).
    CometLogger& workspace(const std::string& workspace) & {
        check(fulmen_logger_comet_set_workspace(get(), workspace.c_str()));
        return *this;
    }
    /// Sets the workspace on a temporary and passes it on.
    CometLogger&& workspace(const std::string& w) && { return std::move(workspace(w)); }
    /// The experiment key: 32 to 50 letters and digits ("" for a random one).
    CometLogger& experiment_key(const std::string& key) & {
        check(fulmen_logger_comet_set_experiment_key(get(), key.c_str()));
        return *this;
    }
    /// Sets the key on a temporary and passes it on.
    CometLogger&& experiment_key(const std::string& k) && { return std::move(experiment_key(k)); }
    /// How the upload treats the experiment: "get_or_create", "get" or "create".
    CometLogger& mode(const std::string& mode) & {
        check(fulmen_logger_comet_set_mode(get(), mode.c_str()));
        return *this;
    }
    /// Sets the mode on a temporary and passes it on.
    CometLogger&& mode(const std::string& m) && { return std::move(mode(m)); }
    /// A tag of the experiment.
    CometLogger& tag(const std::string& tag) & {
        check(fulmen_logger_comet_add_tag(get(), tag.c_str()));
        return *this;
    }
    /// Adds a tag on a temporary and passes it on.
    CometLogger&& tag(const std::string& t) && { return std::move(tag(t)); }

    /// The experiment's key (Lightning's version), starting it if needed.
    std::string key() {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) {
            return fulmen_logger_comet_experiment_key(get(), buf, cap, len);
        });
    }
    /// The archive `comet upload` takes (there once the experiment ended),
    /// starting the experiment if needed.
    std::string archive_path() {
        return detail::read_string([&](char* buf, size_t cap, size_t* len) {
            return fulmen_logger_comet_archive_path(get(), buf, cap, len);
        });
    }
    /// Ends the experiment now, writing its archive; later logging throws.
    void end() { check(fulmen_logger_comet_end(get())); }
};

}  // namespace fulmen

// fulmen C++ binding: torchmetrics-style metrics (accuracy, precision,
// recall, F1, AUROC, MAE, MSE, RMSE) that accumulate over an epoch.
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "tensor.hpp"

#include <cstdint>

namespace fulmen {

/// What a Metric computes (fulmen_metric_kind).
enum class MetricKind : int32_t {
    accuracy = FULMEN_METRIC_KIND_ACCURACY,
    precision = FULMEN_METRIC_KIND_PRECISION,
    recall = FULMEN_METRIC_KIND_RECALL,
    f1 = FULMEN_METRIC_KIND_F1,
    auroc = FULMEN_METRIC_KIND_AUROC,
    mae = FULMEN_METRIC_KIND_MEAN_ABSOLUTE_ERROR,
    mse = FULMEN_METRIC_KIND_MEAN_SQUARED_ERROR,
    rmse = FULMEN_METRIC_KIND_ROOT_MEAN_SQUARED_ERROR,
};

/// How per-class scores combine (fulmen_average).
enum class Average : int32_t {
    micro = FULMEN_AVERAGE_MICRO,
    macro = FULMEN_AVERAGE_MACRO,
    weighted = FULMEN_AVERAGE_WEIGHTED,
};

/// Metric options with torchmetrics' defaults for a kind and a class count
/// (0: a binary task).
struct MetricOptions : fulmen_metric_options {
    /// Defaults for `kind` over `num_classes` classes (0: binary).
    explicit MetricOptions(MetricKind kind, int64_t num_classes = 0)
        : fulmen_metric_options(fulmen_metric_options_default(static_cast<int32_t>(kind), num_classes)) {}
    /// Sets the multiclass averaging.
    MetricOptions& with_average(Average a) {
        average = static_cast<int32_t>(a);
        return *this;
    }
};

/// A metric's state: update with each batch, compute at the epoch's end
/// (summed over the ranks of a distributed job), reset for the next.
class Metric : public detail::Handle<fulmen_metric, fulmen_metric_free> {
public:
    /// An empty metric object (no handle).
    Metric() = default;
    /// A metric built from `options`.
    explicit Metric(const MetricOptions& options)
        : Handle(detail::make<fulmen_metric>([&](fulmen_metric** o) { return fulmen_metric_new(&options, o); })) {}

    /// Adds a batch of predictions and targets.
    void update(const Tensor& preds, const Tensor& target) {
        check(fulmen_metric_update(get(), preds.get(), target.get()));
    }
    /// The value over everything since the last reset (a collective in a
    /// distributed job with sync_on_compute).
    double compute() {
        return detail::read<double>([&](double* out) { return fulmen_metric_compute(get(), out); });
    }
    /// Forgets the accumulated state.
    void reset() { check(fulmen_metric_reset(get())); }
};

}  // namespace fulmen

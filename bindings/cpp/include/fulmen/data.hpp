// fulmen C++ binding: datasets, host data sources and iterators, loaders.
#pragma once

#include "tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// How CSV features are scaled (the C `fulmen_scaling`).
enum class Scaling : int32_t {
    None = FULMEN_SCALING_NONE,
    Divide = FULMEN_SCALING_DIVIDE,
    MinMax = FULMEN_SCALING_MIN_MAX,
    Standardize = FULMEN_SCALING_STANDARDIZE,
};

/// CSV options, default-constructed with fulmen's defaults (labels in
/// column 0, header detected, ',', no scaling). The names it is given are
/// kept with it (copies share them).
struct CsvOptions : fulmen_csv_options {
    /// fulmen's CSV defaults.
    CsvOptions() : fulmen_csv_options(fulmen_csv_options_default()) {}
    /// Sets the feature scaling (and the divisor for Scaling::Divide).
    CsvOptions& scale(Scaling how, double divisor = 1.0) {
        scaling = static_cast<int32_t>(how);
        scale_divisor = divisor;
        return *this;
    }
    /// Skips the first `lines` lines (scikit-learn's count line).
    CsvOptions& skip(size_t lines) {
        skip_rows = lines;
        return *this;
    }
    /// The label column by its header name.
    CsvOptions& label(std::string name) {
        label_text_ = std::make_shared<const std::string>(std::move(name));
        has_labels = true;
        label_name = label_text_->c_str();
        return *this;
    }
    /// The feature columns, by header name or index ("2"), in this order.
    CsvOptions& features(const std::vector<std::string>& columns) {
        std::string joined;
        for (const std::string& c : columns) joined += (joined.empty() ? "" : ",") + c;
        features_text_ = std::make_shared<const std::string>(std::move(joined));
        feature_columns = features_text_->c_str();
        return *this;
    }

private:
    std::shared_ptr<const std::string> label_text_, features_text_;
};

/// Loader options, default-constructed with torch's DataLoader defaults.
struct LoaderOptions : fulmen_loader_options {
    /// Batch size 1, no shuffle, seed 0, keep the last batch, no workers.
    LoaderOptions() : fulmen_loader_options(fulmen_loader_options_default()) {}
    /// Defaults with `batch` samples per batch, optionally shuffled by `seed`.
    explicit LoaderOptions(size_t batch, bool shuffled = false, uint64_t shuffle_seed = 0) : LoaderOptions() {
        batch_size = batch;
        shuffle = shuffled;
        seed = shuffle_seed;
    }
    /// `n` worker threads reading batches ahead, each up to `prefetch`.
    LoaderOptions& workers(size_t n, size_t prefetch = 2) {
        num_workers = n;
        prefetch_factor = prefetch;
        return *this;
    }
};

/// A read-only view of sample indices (what a data source is asked for).
class Indices {
public:
    /// A view of `n` indices at `data`.
    Indices(const int64_t* data, size_t n) noexcept : data_(data), size_(n) {}
    /// A view of a vector's indices.
    Indices(const std::vector<int64_t>& v) noexcept : data_(v.data()), size_(v.size()) {}
    /// Number of indices.
    size_t size() const noexcept { return size_; }
    /// Pointer to the first index.
    const int64_t* data() const noexcept { return data_; }
    /// Index `i`.
    int64_t operator[](size_t i) const noexcept { return data_[i]; }
    /// Iteration start.
    const int64_t* begin() const noexcept { return data_; }
    /// Iteration end.
    const int64_t* end() const noexcept { return data_ + size_; }

private:
    const int64_t* data_;
    size_t size_;
};

/// A batch being built by a data source or iterator callback (borrowed).
class BatchBuilder {
public:
    /// Wraps the borrowed C builder.
    explicit BatchBuilder(fulmen_batch_builder* builder) noexcept : builder_(builder) {}
    /// Appends a tensor (shared; the Tensor keeps its own handle).
    BatchBuilder& push(const Tensor& t) {
        check(fulmen_batch_builder_push(builder_, t.get()));
        return *this;
    }
    /// The C builder.
    fulmen_batch_builder* get() const noexcept { return builder_; }

private:
    fulmen_batch_builder* builder_;
};

/// A map-style dataset implemented by the host.
struct DataSource {
    /// Number of samples (called once, when the dataset is made).
    std::function<size_t()> len;
    /// Pushes the samples `indices` as one batch (e.g. inputs then targets).
    std::function<void(Indices indices, BatchBuilder& batch)> get_batch;
    /// true: `get_batch` may run on a loader's worker thread (num_workers >
    /// 0), one call at a time; an exception it throws there reaches fit as
    /// a fulmen::Error with its message; the trainer's callback_timeout
    /// bounds it as on the loop's thread; random draws from torch's
    /// generator there come in an order that varies. false: loaders with
    /// workers refuse this dataset.
    bool any_thread = false;
};

/// An iterable data source implemented by the host (an IterableDataset).
struct IteratorSource {
    /// Starts epoch `epoch` from the beginning (optional).
    std::function<void(uint64_t epoch)> reset;
    /// Pushes the next batch and returns true, or returns false at the end.
    std::function<bool(BatchBuilder& batch)> next;
    /// Batches per epoch, or -1 when unknown.
    int64_t num_batches = -1;
};

namespace detail {

/// Trampolines from the C data vtables to the std::function members.
struct DataTrampolines {
    /// userdata_free: destroys the source and what its lambdas captured.
    template <class State>
    static void free_state(void* p) noexcept {
        delete static_cast<State*>(p);
    }
    /// Calls DataSource::len.
    static fulmen_error* len(void* ud, size_t* out) {
        return guard_callback([&] { *out = static_cast<DataSource*>(ud)->len(); });
    }
    /// Calls DataSource::get_batch.
    static fulmen_error* get_batch(void* ud, const int64_t* idx, size_t n, fulmen_batch_builder* b) {
        return guard_callback([&] {
            BatchBuilder builder(b);
            static_cast<DataSource*>(ud)->get_batch(Indices(idx, n), builder);
        });
    }
    /// Calls IteratorSource::reset.
    static fulmen_error* reset(void* ud, uint64_t epoch) {
        return guard_callback([&] { static_cast<IteratorSource*>(ud)->reset(epoch); });
    }
    /// Calls IteratorSource::next; false means the epoch is done.
    static fulmen_error* next(void* ud, fulmen_batch_builder* b, bool* done) {
        return guard_callback([&] {
            BatchBuilder builder(b);
            *done = !static_cast<IteratorSource*>(ud)->next(builder);
        });
    }
};

}  // namespace detail

/// A map-style dataset. Owns its `fulmen_dataset` handle.
class Dataset : public detail::Handle<fulmen_dataset, fulmen_dataset_free> {
public:
    /// The most tensors Dataset::get and Loader::batch read from one batch.
    static constexpr size_t max_batch_tensors = 64;

    /// An empty dataset object (no handle).
    Dataset() = default;

    /// Takes ownership of a `fulmen_dataset` handle.
    static Dataset adopt(fulmen_dataset* handle) noexcept { return Dataset(handle); }

    /// Tensors sharing their first dimension: sample i is row i of each.
    static Dataset from_tensors(const TensorList& tensors) {
        std::vector<const fulmen_tensor*> h = detail::handles(tensors);
        return make([&](fulmen_dataset** o) { return fulmen_dataset_from_tensors(h.data(), h.size(), o); });
    }
    /// A .csv or .csv.gz file: features F32 (N, F) and, with labels, I64 (N).
    static Dataset from_csv(const std::string& path, const CsvOptions& options = {}) {
        return make([&](fulmen_dataset** o) { return fulmen_dataset_from_csv(path.c_str(), &options, o); });
    }
    /// A dataset whose samples the host's callbacks provide (both required).
    static Dataset from_source(DataSource source) {
        auto state = std::make_unique<DataSource>(std::move(source));
        fulmen_data_source_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = state.get();
        vt.userdata_free = &detail::DataTrampolines::free_state<DataSource>;
        vt.len = state->len ? &detail::DataTrampolines::len : nullptr;
        vt.get_batch = state->get_batch ? &detail::DataTrampolines::get_batch : nullptr;
        vt.any_thread = state->any_thread;
        detail::clear_pending_exception();
        Dataset ds = make([&](fulmen_dataset** o) { return fulmen_dataset_from_source(&vt, o); });
        state.release();  // fulmen owns it now and calls userdata_free once
        return ds;
    }

    /// Number of samples.
    size_t len() const { return detail::read<size_t>([&](size_t* o) { return fulmen_dataset_len(get(), o); }); }
    /// Number of samples (same as len).
    size_t size() const { return len(); }

    /// The samples `indices` as a batch (e.g. {inputs, targets}).
    std::vector<Tensor> get(Indices indices) const {
        std::vector<fulmen_tensor*> raw(max_batch_tensors, nullptr);
        size_t count = 0;
        detail::clear_pending_exception();
        check(fulmen_dataset_get(get(), indices.data(), indices.size(), raw.data(), raw.size(), &count));
        return adopt_all(raw, count);
    }
    /// The samples `indices` as a new dataset (keeping this one alive).
    Dataset subset(Indices indices) const {
        return make([&](fulmen_dataset** o) { return fulmen_dataset_subset(get(), indices.data(), indices.size(), o); });
    }
    /// Every `k`-th sample from `offset` (first) and the rest (second).
    std::pair<Dataset, Dataset> split_every(size_t k, size_t offset = 0) const {
        fulmen_dataset* every = nullptr;
        fulmen_dataset* rest = nullptr;
        check(fulmen_dataset_split_every(get(), k, offset, &every, &rest));
        return {Dataset(every), Dataset(rest)};
    }
    /// Random parts of `lengths` (counts, or fractions summing to 1) with
    /// the permutation torch draws for `seed` (torch's random_split).
    std::vector<Dataset> random_split(const std::vector<double>& lengths, uint64_t seed) const {
        std::vector<fulmen_dataset*> raw(lengths.size(), nullptr);
        size_t count = 0;
        check(fulmen_dataset_random_split(get(), lengths.data(), lengths.size(), seed, raw.data(), raw.size(), &count));
        std::vector<Dataset> parts;
        parts.reserve(count);
        for (size_t i = 0; i < count; ++i) parts.push_back(Dataset(raw[i]));
        return parts;
    }

    using Handle::get;

private:
    explicit Dataset(fulmen_dataset* owned) noexcept : Handle(owned) {}

    template <class Fn>
    static Dataset make(Fn&& fn) {
        return Dataset(detail::make<fulmen_dataset>(std::forward<Fn>(fn)));
    }
    static std::vector<Tensor> adopt_all(const std::vector<fulmen_tensor*>& raw, size_t count) {
        std::vector<Tensor> out;
        out.reserve(count);
        for (size_t i = 0; i < count; i++) out.push_back(Tensor::adopt(raw[i]));
        return out;
    }
};

/// Something the trainer draws batches from: batches over a dataset, or a
/// host iterator. Owns its `fulmen_loader` handle.
/// What a Scaler computes per feature (the C `fulmen_scaler_kind`).
enum class ScalerKind : int32_t {
    Standardize = FULMEN_SCALER_KIND_STANDARDIZE,
    MinMax = FULMEN_SCALER_KIND_MIN_MAX,
};

/// Feature scaling fitted on one dataset (the training split) and applied
/// to others, with its statistics readable.
class Scaler : public detail::Handle<fulmen_scaler, fulmen_scaler_free> {
public:
    /// An empty scaler (no handle).
    Scaler() = default;
    /// Fits `kind` on column `column` (floating-point features) of `dataset`.
    static Scaler fit(const Dataset& dataset, size_t column, ScalerKind kind = ScalerKind::Standardize) {
        fulmen_scaler* out = nullptr;
        check(fulmen_scaler_fit(dataset.get(), column, static_cast<int32_t>(kind), &out));
        return Scaler(out);
    }
    /// The fitted statistics (float64, one sample's shape): mean and std,
    /// or min and max.
    std::pair<Tensor, Tensor> stats() const {
        fulmen_tensor* first = nullptr;
        fulmen_tensor* second = nullptr;
        check(fulmen_scaler_stats(get(), &first, &second));
        return {Tensor::adopt(first), Tensor::adopt(second)};
    }
    /// `dataset` with the column scaled by the fitted statistics.
    Dataset apply(const Dataset& dataset) const {
        fulmen_dataset* out = nullptr;
        check(fulmen_scaler_apply(get(), dataset.get(), &out));
        return Dataset::adopt(out);
    }

private:
    explicit Scaler(fulmen_scaler* owned) noexcept : Handle(owned) {}
};

class Loader : public detail::Handle<fulmen_loader, fulmen_loader_free> {
public:
    /// An empty loader object (no handle).
    Loader() = default;

    /// Batches over `dataset` (kept alive by the loader).
    explicit Loader(const Dataset& dataset, const LoaderOptions& options = {})
        : Handle(detail::make<fulmen_loader>([&](fulmen_loader** o) { return fulmen_loader_new(dataset.get(), &options, o); })) {}

    /// Batches of `batch_size` over `dataset`, shuffled by `seed` if asked.
    Loader(const Dataset& dataset, size_t batch_size, bool shuffle = false, uint64_t seed = 0)
        : Loader(dataset, LoaderOptions(batch_size, shuffle, seed)) {}

    /// Takes ownership of a `fulmen_loader` handle.
    static Loader adopt(fulmen_loader* handle) noexcept { return Loader(handle); }

    /// A loader pulling batches from host callbacks (`next` required).
    static Loader from_iterator(IteratorSource source) {
        auto state = std::make_unique<IteratorSource>(std::move(source));
        fulmen_iterator_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = state.get();
        vt.userdata_free = &detail::DataTrampolines::free_state<IteratorSource>;
        vt.reset = state->reset ? &detail::DataTrampolines::reset : nullptr;
        vt.next = state->next ? &detail::DataTrampolines::next : nullptr;
        vt.num_batches = state->num_batches;
        Loader l(detail::make<fulmen_loader>([&](fulmen_loader** o) { return fulmen_loader_from_iterator(&vt, o); }));
        state.release();  // fulmen owns it now and calls userdata_free once
        return l;
    }

    /// Batches per epoch (throws FULMEN_CODE_UNSUPPORTED for an iterator of
    /// unknown length).
    size_t len() const { return detail::read<size_t>([&](size_t* o) { return fulmen_loader_len(get(), o); }); }

    /// Batch `index` of `epoch` in the order fit would use (shuffled with
    /// the loader's seed and the epoch, this rank's share for a shard), for
    /// a host-owned loop. Throws Error: FULMEN_CODE_OUT_OF_RANGE for an
    /// index past the epoch, FULMEN_CODE_UNSUPPORTED for a host iterator;
    /// a DataSource callback's exception is rethrown unchanged.
    std::vector<Tensor> batch(uint64_t epoch, size_t index) const {
        std::vector<fulmen_tensor*> raw(Dataset::max_batch_tensors, nullptr);
        size_t count = 0;
        detail::clear_pending_exception();
        check(fulmen_loader_batch(get(), epoch, index, raw.data(), raw.size(), &count));
        std::vector<Tensor> out;
        out.reserve(count);
        for (size_t i = 0; i < count; i++) out.push_back(Tensor::adopt(raw[i]));
        return out;
    }

    /// A new loader reading rank `rank` of `world`'s share of this loader's
    /// dataset, as torch's DistributedSampler: the sample order (reshuffled
    /// per epoch with the loader's seed when shuffling) is padded by
    /// repeating its start to a multiple of `world`, and rank r takes
    /// samples r, r + world, ..., so every rank has as many batches. Throws
    /// Error for `rank >= world` and for a loader over a host iterator.
    Loader shard(size_t rank, size_t world) const {
        return Loader(detail::make<fulmen_loader>([&](fulmen_loader** o) { return fulmen_loader_shard(get(), rank, world, o); }));
    }

private:
    explicit Loader(fulmen_loader* owned) noexcept : Handle(owned) {}
};

}  // namespace fulmen

// fulmen C++ binding: Lightning's LightningDataModule as a base class with
// virtual methods (fulmen_datamodule), which Trainer::fit / validate / test
// / predict take in place of loaders.
#pragma once

#include "data.hpp"
#include "error.hpp"
#include "handle.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// The data of a run apart from the module: derive from it and override
/// what the data needs. Lightning's order: prepare_data (once per node, on
/// local rank 0; see prepare_data_per_node), setup(stage) before the module's setup hook, the
/// dataloaders when the loops want them, teardown(stage) at the end (also
/// after a failed run). A dataloader counts only when its has_* says so;
/// the module's own is used otherwise. Exceptions thrown here fail the run
/// and are rethrown by the Trainer call. Not copyable or movable: fulmen
/// calls back into this object.
class DataModule {
public:
    /// A datamodule whose state is saved in checkpoints under `name`
    /// (Lightning's class name).
    explicit DataModule(std::string name = "LightningDataModule") : name_(std::move(name)) {}
    virtual ~DataModule() { fulmen_datamodule_free(handle_); }
    DataModule(const DataModule&) = delete;
    DataModule& operator=(const DataModule&) = delete;

    /// Lightning's prepare_data (downloads, files every process reads).
    virtual void prepare_data() {}
    /// Lightning's prepare_data_per_node: true (the default) calls
    /// prepare_data on local rank 0 of every node, false on global rank 0
    /// only (data on storage every node shares).
    virtual bool prepare_data_per_node() const { return true; }
    /// Lightning's setup(stage): "fit", "validate", "test" or "predict".
    virtual void setup(const std::string& /*stage*/) {}
    /// Lightning's teardown(stage).
    virtual void teardown(const std::string& /*stage*/) {}

    /// Whether train_dataloader is implemented.
    virtual bool has_train_dataloader() const { return false; }
    /// The training data for `epoch`.
    virtual Loader train_dataloader(int64_t /*epoch*/) { throw missing("train_dataloader"); }
    /// Whether val_dataloader is implemented.
    virtual bool has_val_dataloader() const { return false; }
    /// The validation loaders for `epoch` (none: no validation).
    virtual std::vector<Loader> val_dataloader(int64_t /*epoch*/) { throw missing("val_dataloader"); }
    /// Whether test_dataloader is implemented.
    virtual bool has_test_dataloader() const { return false; }
    /// The test loaders (at least one).
    virtual std::vector<Loader> test_dataloader(int64_t /*epoch*/) { throw missing("test_dataloader"); }
    /// Whether predict_dataloader is implemented.
    virtual bool has_predict_dataloader() const { return false; }
    /// The predict loaders (at least one).
    virtual std::vector<Loader> predict_dataloader(int64_t /*epoch*/) { throw missing("predict_dataloader"); }

    /// Lightning's state_dict, as bytes (empty: nothing saved).
    virtual std::vector<uint8_t> state_dict() { return {}; }
    /// Lightning's load_state_dict, with what state_dict gave.
    virtual void load_state_dict(const std::vector<uint8_t>& /*state*/) {}

    /// The name its state is saved under.
    const std::string& name() const noexcept { return name_; }

    /// The C handle, made at the first call (after construction, so the
    /// has_* overrides count). Owned by this object.
    fulmen_datamodule* get() {
        if (handle_ == nullptr) {
            fulmen_datamodule_vtable vt = vtable();
            handle_ = detail::make<fulmen_datamodule>(
                [&](fulmen_datamodule** o) { return fulmen_datamodule_new(&vt, name_.c_str(), o); });
            check(fulmen_datamodule_set_prepare_data_per_node(handle_, prepare_data_per_node()));
        }
        return handle_;
    }

private:
    static Error missing(const char* what) {
        return Error(FULMEN_CODE_INVALID_STATE, std::string("the datamodule has no ") + what);
    }

    static DataModule* self(void* ud) { return static_cast<DataModule*>(ud); }

    static fulmen_error* prepare_data_cb(void* ud) {
        return detail::guard_callback([&] { self(ud)->prepare_data(); });
    }
    static fulmen_error* setup_cb(void* ud, const char* stage) {
        return detail::guard_callback([&] { self(ud)->setup(stage); });
    }
    static fulmen_error* teardown_cb(void* ud, const char* stage) {
        return detail::guard_callback([&] { self(ud)->teardown(stage); });
    }
    static fulmen_error* train_cb(void* ud, int64_t epoch, fulmen_loader** out) {
        return detail::guard_callback([&] { *out = self(ud)->train_dataloader(epoch).release(); });
    }
    /// Hands the loaders `make` gives to fulmen (`what` names it in errors).
    template <class Make>
    static fulmen_error* hand_loaders(const char* what, fulmen_loader** out, size_t capacity, size_t* n, Make&& make) {
        return detail::guard_callback([&] {
            std::vector<Loader> loaders = make();
            if (loaders.size() > capacity) {
                throw Error(FULMEN_CODE_INVALID_ARGUMENT, std::string(what) + " gave " +
                                                              std::to_string(loaders.size()) + " loaders; at most " +
                                                              std::to_string(capacity));
            }
            for (size_t i = 0; i < loaders.size(); i++) out[i] = loaders[i].release();
            *n = loaders.size();
        });
    }
    static fulmen_error* val_cb(void* ud, int64_t epoch, fulmen_loader** out, size_t capacity, size_t* n) {
        return hand_loaders("val_dataloader", out, capacity, n, [&] { return self(ud)->val_dataloader(epoch); });
    }
    static fulmen_error* test_cb(void* ud, int64_t epoch, fulmen_loader** out, size_t capacity, size_t* n) {
        return hand_loaders("test_dataloader", out, capacity, n, [&] { return self(ud)->test_dataloader(epoch); });
    }
    static fulmen_error* predict_cb(void* ud, int64_t epoch, fulmen_loader** out, size_t capacity, size_t* n) {
        return hand_loaders("predict_dataloader", out, capacity, n,
                            [&] { return self(ud)->predict_dataloader(epoch); });
    }
    static fulmen_error* state_dict_cb(void* ud, const uint8_t** data, size_t* len) {
        return detail::guard_callback([&] {
            DataModule* d = self(ud);
            d->state_ = d->state_dict();
            *data = d->state_.data();
            *len = d->state_.size();
        });
    }
    static fulmen_error* load_state_dict_cb(void* ud, const uint8_t* data, size_t len) {
        return detail::guard_callback([&] { self(ud)->load_state_dict(std::vector<uint8_t>(data, data + len)); });
    }

    fulmen_datamodule_vtable vtable() {
        fulmen_datamodule_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = this;
        vt.prepare_data = &prepare_data_cb;
        vt.setup = &setup_cb;
        vt.teardown = &teardown_cb;
        if (has_train_dataloader()) vt.train_dataloader = &train_cb;
        if (has_val_dataloader()) vt.val_dataloader = &val_cb;
        if (has_test_dataloader()) vt.test_dataloader = &test_cb;
        if (has_predict_dataloader()) vt.predict_dataloader = &predict_cb;
        vt.state_dict = &state_dict_cb;
        vt.load_state_dict = &load_state_dict_cb;
        return vt;
    }

    std::string name_;
    fulmen_datamodule* handle_ = nullptr;
    std::vector<uint8_t> state_;  // what state_dict last gave, read by fulmen
};

}  // namespace fulmen

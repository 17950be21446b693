// CheckpointIO: a C++ store receives every checkpoint as bytes (nothing on
// disk), a fit resumes from it, ModelCheckpoint's older file is removed
// through it, and a throwing save (asynchronous too) fails the fit.
#include "common.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

using fulmen::Batch;
using fulmen::LightningModule;
using fulmen::Loader;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen_test::FulmenTest;

namespace {

/// What a MemoryIO saw; shared with the test, which outlives the trainer's copy.
struct Store {
    std::mutex mutex;
    std::map<std::string, std::vector<std::uint8_t>> files;
    std::vector<std::string> removed;
    int saves = 0;
    int fail_at = 0;  ///< this save (1-based) throws; 0: none
};

class MemoryIO : public fulmen::CheckpointIO {
public:
    explicit MemoryIO(std::shared_ptr<Store> store) : store_(std::move(store)) {}
    void save(const std::uint8_t* data, std::size_t size, const std::string& path) override {
        std::lock_guard<std::mutex> lock(store_->mutex);
        if (++store_->saves == store_->fail_at) throw std::runtime_error("the store is full");
        store_->files[path] = std::vector<std::uint8_t>(data, data + size);
    }
    std::vector<std::uint8_t> load(const std::string& path) override {
        std::lock_guard<std::mutex> lock(store_->mutex);
        auto it = store_->files.find(path);
        if (it == store_->files.end()) throw std::runtime_error(path + " is not stored");
        return it->second;
    }
    void remove(const std::string& path) override {
        std::lock_guard<std::mutex> lock(store_->mutex);
        store_->removed.push_back(path);
        store_->files.erase(path);
    }

private:
    std::shared_ptr<Store> store_;
};

LightningModule module_for(const Model& model) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext&, const Batch& batch) {
            return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
        })
        .configure_optimizers([&model](OptimizerConfig& config) { config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1))); })
        .build();
}

class CheckpointIOTest : public FulmenTest {};

TEST_F(CheckpointIOTest, StoresResumesRemovesAndFails) {
    fulmen::Dataset ds = fulmen_test::blobs(32, 5);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    LightningModule module = module_for(model);
    for (bool async : {false, true}) {
        const std::string dir = (fulmen_test::scratch() / (async ? "io-async" : "io-sync")).string();
        auto store = std::make_shared<Store>();
        fulmen::ModelCheckpointOptions ck;
        ck.dirpath = dir;
        {
            Trainer trainer(fulmen_test::quiet_options(3).set("logger", false).set("async_checkpoint_io", async));
            trainer.add_model_checkpoint(ck);
            trainer.set_checkpoint_io(std::make_unique<MemoryIO>(store));
            trainer.fit(module, train);
        }
        EXPECT_FALSE(std::filesystem::exists(dir)) << "checkpoints written to disk";
        ASSERT_EQ(store->files.size(), 1u);
        EXPECT_EQ(store->saves, 3);
        EXPECT_EQ(store->removed.size(), 2u);
        const std::string last = store->files.begin()->first;
        EXPECT_EQ(last, dir + "/epoch=2-step=12.ckpt");

        Trainer again(fulmen_test::quiet_options(4)
                          .set("logger", false)
                          .set("enable_checkpointing", false)
                          .set("async_checkpoint_io", async));
        again.set_checkpoint_io(std::make_unique<MemoryIO>(store));
        again.fit(module, train, last);
        EXPECT_EQ(again.global_step(), 16);

        auto failing = std::make_shared<Store>();
        failing->fail_at = 2;
        Trainer bad(fulmen_test::quiet_options(3).set("logger", false).set("async_checkpoint_io", async));
        bad.add_model_checkpoint(ck);
        bad.set_checkpoint_io(std::make_unique<MemoryIO>(failing));
        try {
            bad.fit(module, train);
            ADD_FAILURE() << "a failing store did not fail the fit";
        } catch (const std::exception& e) {
            EXPECT_NE(std::string(e.what()).find("the store is full"), std::string::npos) << e.what();
        }
    }
}

}  // namespace

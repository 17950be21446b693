// fulmen::DataModule: Lightning's call order through fit / validate / test /
// predict, its state through a checkpoint, and exceptions from its methods.
#include "common.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using fulmen::Batch;
using fulmen::Dataset;
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

/// Records every call; `state` is what state_dict gives.
class BlobData : public fulmen::DataModule {
public:
    BlobData() : fulmen::DataModule("BlobData") {}

    void prepare_data() override { calls.push_back("prepare_data"); }
    void setup(const std::string& stage) override {
        calls.push_back("setup(" + stage + ")");
        if (fail_setup) throw std::runtime_error("no data here");
    }
    void teardown(const std::string& stage) override { calls.push_back("teardown(" + stage + ")"); }
    bool has_train_dataloader() const override { return true; }
    Loader train_dataloader(int64_t epoch) override {
        calls.push_back("train:" + std::to_string(epoch));
        return Loader(data, 16);
    }
    bool has_val_dataloader() const override { return true; }
    std::vector<Loader> val_dataloader(int64_t epoch) override {
        calls.push_back("val:" + std::to_string(epoch));
        std::vector<Loader> v;
        v.emplace_back(data, 16);
        return v;
    }
    bool has_test_dataloader() const override { return true; }
    std::vector<Loader> test_dataloader(int64_t epoch) override {
        calls.push_back("test:" + std::to_string(epoch));
        std::vector<Loader> v;
        v.emplace_back(data, 16);
        return v;
    }
    bool has_predict_dataloader() const override { return true; }
    std::vector<Loader> predict_dataloader(int64_t epoch) override {
        calls.push_back("predict:" + std::to_string(epoch));
        std::vector<Loader> v;
        v.emplace_back(data, 16);
        return v;
    }
    std::vector<uint8_t> state_dict() override { return state; }
    void load_state_dict(const std::vector<uint8_t>& s) override { loaded = s; }

    Dataset data = fulmen_test::blobs(48, 7);
    std::vector<std::string> calls;
    std::vector<uint8_t> state;
    std::optional<std::vector<uint8_t>> loaded;
    bool fail_setup = false;
};

LightningModule module_for(const Model& model, bool* fail_step) {
    return LightningModule::builder(model)
        .training_step([&model, fail_step](StepContext&, const Batch& batch) {
            if (*fail_step) throw std::logic_error("the step broke");
            return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
        })
        .validation_step([&model](StepContext& ctx, const Batch& batch) {
            ctx.log("val_loss", fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]).item());
        })
        .test_step([&model](StepContext& ctx, const Batch& batch) {
            ctx.log("test_loss", fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]).item());
        })
        .predict_step([&model](StepContext&, const Batch& batch) -> std::optional<Tensor> {
            return model.forward(batch[0]);
        })
        .configure_optimizers([&model](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
        })
        .build();
}

using Calls = std::vector<std::string>;

}  // namespace

TEST_F(FulmenTest, DataModuleCallOrder) {
    Model model = fulmen_test::mlp();
    bool fail_step = false;
    LightningModule module = module_for(model, &fail_step);
    BlobData data;
    Trainer trainer(fulmen_test::quiet_options(2)
                        .set("reload_dataloaders_every_n_epochs", int64_t{1})
                        .set("num_sanity_val_steps", int64_t{1})
                        .set("enable_checkpointing", false)
                        .set("logger", false));
    trainer.fit(module, data);
    EXPECT_EQ(data.calls, (Calls{"prepare_data", "setup(fit)", "train:0", "val:0", "train:1", "val:1",
                                 "teardown(fit)"}));
    data.calls.clear();
    trainer.validate(module, data);
    trainer.test(module, data);
    std::vector<std::optional<Tensor>> out = trainer.predict(module, data);
    EXPECT_EQ(data.calls, (Calls{"prepare_data", "setup(validate)", "val:2", "teardown(validate)", "prepare_data",
                                 "setup(test)", "test:2", "teardown(test)", "prepare_data", "setup(predict)",
                                 "predict:2", "teardown(predict)"}));
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].has_value());
    EXPECT_EQ(out[0]->shape().at(0), 48);
}

TEST_F(FulmenTest, DataModuleStateThroughCheckpoint) {
    Model model = fulmen_test::mlp();
    bool fail_step = false;
    LightningModule module = module_for(model, &fail_step);
    std::string root = fulmen_test::fresh_dir("datamodule-state");
    BlobData data;
    data.state = {1, 2, 0, 255};
    {
        Trainer trainer(fulmen_test::quiet_options(1).set("default_root_dir", root));
        trainer.fit(module, data);
    }
    EXPECT_FALSE(data.loaded.has_value());
    BlobData resumed;
    Trainer trainer(fulmen_test::quiet_options(2).set("default_root_dir", root));
    trainer.fit(module, resumed, "last");
    ASSERT_TRUE(resumed.loaded.has_value());
    EXPECT_EQ(*resumed.loaded, (std::vector<uint8_t>{1, 2, 0, 255}));
}

TEST_F(FulmenTest, DataModuleExceptions) {
    Model model = fulmen_test::mlp();
    bool fail_step = true;
    LightningModule module = module_for(model, &fail_step);
    Trainer trainer(fulmen_test::quiet_options(1).set("enable_checkpointing", false).set("logger", false));
    BlobData data;
    // A failing step: the exception comes back unchanged, after teardown.
    EXPECT_THROW(trainer.fit(module, data), std::logic_error);
    EXPECT_EQ(data.calls.back(), "teardown(fit)");
    // A failing setup: no teardown.
    fail_step = false;
    BlobData broken;
    broken.fail_setup = true;
    EXPECT_THROW(trainer.fit(module, broken), std::runtime_error);
    EXPECT_EQ(broken.calls, (Calls{"prepare_data", "setup(fit)"}));
}

namespace {

/// Brings only prepare_data (on global rank 0 only) and the stages: the
/// module's loaders serve the run.
class PrepareOnlyData : public fulmen::DataModule {
public:
    explicit PrepareOnlyData(Calls* calls) : calls_(calls) {}
    void prepare_data() override { calls_->push_back("dm.prepare_data"); }
    bool prepare_data_per_node() const override { return false; }

private:
    Calls* calls_;
};

}  // namespace

// The module's prepare_data (after the datamodule's), configure_model,
// configure_callbacks and a validation step's outputs, beside a datamodule.
TEST_F(FulmenTest, ModuleSlotsBesideDataModule) {
    Model model = fulmen_test::mlp();
    Dataset data = fulmen_test::blobs(48, 7);
    Calls calls;
    int outputs = 0;
    LightningModule module =
        LightningModule::builder(model)
            .training_step([&model](StepContext&, const Batch& batch) {
                return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            })
            .validation_step_output([&model](StepContext&, const Batch& batch) -> std::optional<Tensor> {
                return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            })
            .configure_optimizers([&model](OptimizerConfig& config) {
                config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
            })
            .train_dataloader([&data](int64_t) { return Loader(data, 16); })
            .val_dataloader([&data](int64_t) {
                std::vector<Loader> v;
                v.emplace_back(data, 16);
                return v;
            })
            .configure_model([&calls](fulmen::Device device) {
                EXPECT_EQ(device, fulmen::Device::cpu());
                calls.push_back("configure_model");
            })
            .configure_callbacks([&calls](fulmen::CallbackList& list) {
                list.add("Noting", [&calls](fulmen::Hook hook, fulmen::HookContext&) {
                    if (hook == fulmen::Hook::FitStart) calls.push_back("cb.on_fit_start");
                });
            })
            .on_hook([&calls, &outputs](fulmen::Hook hook, fulmen::HookContext& ctx) {
                if (hook == fulmen::Hook::PrepareData) calls.push_back("prepare_data");
                if (hook == fulmen::Hook::ValidationBatchEnd && ctx.output().has_value()) outputs++;
            })
            .build();
    module.override_hook(fulmen::Hook::PrepareData).set_prepare_data_per_node(false);
    PrepareOnlyData dm(&calls);
    Trainer trainer(fulmen_test::quiet_options(1)
                        .set("num_sanity_val_steps", int64_t{0})
                        .set("enable_checkpointing", false)
                        .set("logger", false));
    trainer.fit(module, dm);
    EXPECT_EQ(calls, (Calls{"dm.prepare_data", "prepare_data", "configure_model", "cb.on_fit_start"}));
    EXPECT_EQ(outputs, 3);
}

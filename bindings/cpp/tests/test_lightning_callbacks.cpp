// ModelPruning, SpikeDetection and the prediction writer from C++.
#include "common.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

using fulmen::Batch;
using fulmen::Dataset;
using fulmen::Hook;
using fulmen::HookContext;
using fulmen::LightningModule;
using fulmen::Loader;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen_test::error_code;
using fulmen_test::FulmenTest;

namespace {

/// A module over `model`: cross-entropy, SGD(0.1), the loss multiplied
/// by 100 at global step `spike_step`; its prediction is the batch's input.
LightningModule module_of(const Model& model, int64_t spike_step = -1) {
    return LightningModule::builder(model)
        .training_step([&model, spike_step](StepContext& ctx, const Batch& batch) {
            Tensor loss = fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            if (ctx.global_step() == spike_step) return loss * 100.0;
            return loss;
        })
        .predict_step([](StepContext&, const Batch& batch) -> std::optional<Tensor> { return batch[0]; })
        .configure_optimizers([&model](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
        })
        .build();
}

/// Entries of `t` that are exactly 0.
size_t zeros(const Tensor& t) {
    size_t n = 0;
    for (float v : t.to_vector<float>()) n += v == 0.0f ? 1 : 0;
    return n;
}

}  // namespace

class LightningCallbacksTest : public FulmenTest {};

TEST_F(LightningCallbacksTest, ModelPruningKeepsPrunedWeightsAtZeroWhileTraining) {
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();  // 0.weight and 2.weight: 32 entries each
    LightningModule module = module_of(model);
    Trainer trainer(fulmen_test::quiet_options(2).set("logger", false));
    fulmen::ModelPruning pruning("l1_unstructured", 0.5);
    pruning.parameter_names({"weight"}).use_lottery_ticket_hypothesis(false);
    trainer.add_model_pruning(pruning);
    size_t least = 64;
    trainer.add_callback("watch", [&](Hook h, HookContext& ctx) {
        if (h == Hook::TrainBatchEnd && ctx.epoch() == 1) {
            least = std::min(least, zeros(model.state_dict_get("0.weight")) + zeros(model.state_dict_get("2.weight")));
        }
    });
    trainer.fit(module, train);
    // Half of the 64 weights after epoch 0 stay 0 through epoch 1's steps;
    // epoch 1's end prunes half of the 32 left.
    EXPECT_EQ(least, 32u);
    EXPECT_EQ(zeros(model.state_dict_get("0.weight")) + zeros(model.state_dict_get("2.weight")), 48u);
    EXPECT_EQ(zeros(model.state_dict_get("0.bias")), 0u);
}

TEST_F(LightningCallbacksTest, ModelPruningRefusesWhatLightningRefuses) {
    EXPECT_EQ(error_code([] { fulmen::ModelPruning("ln_structured", 0.5); }), FULMEN_CODE_UNSUPPORTED);
    EXPECT_EQ(error_code([] { fulmen::ModelPruning("l1_unstructured", 1.5); }), FULMEN_CODE_INVALID_ARGUMENT);
    fulmen::ModelPruning p("random_unstructured", 0.2);
    EXPECT_EQ(error_code([&] { p.parameter_names({"gamma"}); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { p.verbose(3); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { p.amount_count(-1); }), FULMEN_CODE_INVALID_ARGUMENT);
    // A parameter the model lacks: refused when the fit sets up.
    p.parameters_to_prune({"0.weight", "7.weight"});
    Dataset ds = fulmen_test::blobs(16, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    LightningModule module = module_of(model);
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    trainer.add_model_pruning(p);
    EXPECT_EQ(error_code([&] { trainer.fit(module, train); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(LightningCallbacksTest, SpikeDetectionStopsTheFitNamingTheBatch) {
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    LightningModule module = module_of(model, 5);
    std::string dir = fulmen_test::fresh_dir("spike");
    Trainer trainer(fulmen_test::quiet_options(2).set("logger", false));
    trainer.add_spike_detection(fulmen::Mode::Min, 10, 1, std::nullopt, 2.0, dir);
    std::string message = fulmen_test::error_message([&] { trainer.fit(module, train); });
    EXPECT_NE(message.find("Training spike detected in batch 5"), std::string::npos) << message;
    std::ifstream f(dir + "/skip_batches.json");
    std::stringstream text;
    text << f.rdbuf();
    EXPECT_EQ(text.str(), "[\n    4,\n    5\n]");
    // Again: the spike's code (the list now names both spikes' batches).
    EXPECT_EQ(error_code([&] { trainer.fit(module, train); }), FULMEN_CODE_NON_FINITE);
    EXPECT_EQ(error_code([&] { trainer.add_spike_detection(fulmen::Mode::Min, 0); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(LightningCallbacksTest, PredictionWriterGetsEachBatchAndTheEpoch) {
    // Sample i is (i, -i): a prediction's rows (the inputs) name their samples.
    std::vector<float> xs;
    std::vector<int64_t> ys;
    for (int i = 0; i < 40; i++) {
        xs.insert(xs.end(), {static_cast<float>(i), static_cast<float>(-i)});
        ys.push_back(i % 2);
    }
    Dataset ds = Dataset::from_tensors({Tensor::from_vector(xs, {40, 2}), Tensor::from_vector(ys)});
    Loader shuffled(ds, 16, true, 7);
    Model model = fulmen_test::mlp();
    LightningModule module = module_of(model);
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    std::vector<int64_t> seen_batches;
    std::vector<int64_t> seen_samples;
    size_t epoch_batches = 0;
    std::vector<int64_t> epoch_samples;
    trainer.add_prediction_writer(
        "batch_and_epoch",
        [&](const fulmen::BatchPrediction& p) {
            seen_batches.push_back(p.batch_idx);
            ASSERT_TRUE(p.prediction.has_value());
            std::vector<float> rows = p.prediction->to_vector<float>();
            ASSERT_EQ(rows.size(), 2 * p.batch_indices.size());
            for (size_t r = 0; r < p.batch_indices.size(); r++) {
                EXPECT_EQ(rows[2 * r], static_cast<float>(p.batch_indices[r]));
            }
            seen_samples.insert(seen_samples.end(), p.batch_indices.begin(), p.batch_indices.end());
            EXPECT_EQ(p.batch.size(), 2u);
        },
        [&](const fulmen::EpochPredictions& e) {
            EXPECT_EQ(e.dataloader_idx, 0u);
            epoch_batches = e.predictions.size();
            for (const auto& b : e.batch_indices) epoch_samples.insert(epoch_samples.end(), b.begin(), b.end());
        });
    trainer.predict(module, shuffled);
    EXPECT_EQ(seen_batches, (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(epoch_batches, 3u);
    EXPECT_EQ(epoch_samples, seen_samples);
    std::vector<int64_t> sorted = seen_samples;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 40; i++) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);

    // An exception in the writer comes back from predict unchanged.
    Trainer failing(fulmen_test::quiet_options(1).set("logger", false));
    failing.add_prediction_writer("batch", [](const fulmen::BatchPrediction&) { throw std::runtime_error("disk"); });
    EXPECT_THROW(failing.predict(module, shuffled), std::runtime_error);
    // "epoch" needs the epoch function.
    EXPECT_EQ(error_code([&] { failing.add_prediction_writer("epoch", [](const fulmen::BatchPrediction&) {}); }),
              FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([&] { failing.add_prediction_writer("step", [](const fulmen::BatchPrediction&) {}); }),
              FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(LightningCallbacksTest, ConfigureCallbacksReplacesTheTrainersByType) {
    Dataset ds = fulmen_test::blobs(32, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    // "flat" never improves: the module's EarlyStopping (no patience) stops
    // the fit at epoch 1; the trainer's, on a metric never logged, would
    // fail it, so it must be gone.
    fulmen::EarlyStoppingState at_end;
    std::vector<double> best_at_start;
    size_t val_loaders = 99;
    LightningModule module =
        LightningModule::builder(model)
            .training_step([&model](StepContext& ctx, const Batch& batch) {
                ctx.log("flat", 1.0, fulmen::Log::on_epoch);
                return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            })
            .configure_optimizers([&model](OptimizerConfig& config) {
                config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
            })
            .configure_callbacks([](fulmen::CallbackList& list) {
                fulmen::EarlyStoppingOptions es("flat");
                es.patience = 0;
                es.check_on_train_epoch_end = true;
                list.add_early_stopping(es).add_lr_monitor("epoch");
                fulmen::ModelCheckpointOptions mc;
                mc.save_top_k = -1;
                list.add_model_checkpoint(mc);
            })
            // From hooks: the module's EarlyStopping as it goes, and the
            // per-loader counts (no validation loader here).
            .on_hook([&](Hook h, HookContext& ctx) {
                if (h == Hook::TrainEpochStart) best_at_start.push_back(ctx.early_stopping_state().best_score);
                if (h == Hook::TrainEnd) at_end = ctx.early_stopping_state();
                if (h == Hook::TrainStart) val_loaders = ctx.num_val_batches().size();
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(5).set("logger", "csv"));
    trainer.add_early_stopping(fulmen::EarlyStoppingOptions("never_logged"));
    trainer.fit(module, train);
    Trainer::EarlyStoppingState s = trainer.early_stopping_state();
    EXPECT_EQ(s.stopped_epoch, 1);
    EXPECT_EQ(s.wait_count, 1);
    EXPECT_EQ(at_end.stopped_epoch, 1);
    EXPECT_EQ(at_end.wait_count, 1);
    EXPECT_EQ(best_at_start, std::vector<double>({std::numeric_limits<double>::infinity(), 1.0}));
    EXPECT_EQ(val_loaders, 0u);
    EXPECT_GT(trainer.callback_metrics().count("lr-SGD"), 0u);
}

// The other built-ins from configure_callbacks: the module's
// GradientAccumulationScheduler (2 batches a step) replaces the trainer's
// (4), and a second StochasticWeightAveraging in the list is refused.
TEST_F(LightningCallbacksTest, ConfigureCallbacksAddsTheOtherBuiltIns) {
    Dataset ds = fulmen_test::blobs(32, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    int second_swa = 0;
    LightningModule module =
        LightningModule::builder(model)
            .training_step([&model](StepContext&, const Batch& batch) {
                return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            })
            .configure_optimizers([&model](OptimizerConfig& config) {
                config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
            })
            .configure_callbacks([&](fulmen::CallbackList& list) {
                fulmen::StochasticWeightAveragingOptions swa(0.05);
                list.add_stochastic_weight_averaging(swa);
                second_swa = error_code([&] { list.add_stochastic_weight_averaging(swa); });
                list.add_gradient_accumulation_scheduler({{0, 2}});
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(1));
    trainer.add_gradient_accumulation_scheduler({{0, 4}});
    trainer.fit(module, train);
    EXPECT_EQ(second_swa, FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(trainer.global_step(), 2);
}

// configure_callbacks' callbacks with C++ functions: the module's
// prediction writers replace the trainer's (a new one each run), and its
// BackboneFinetuning asks the module's lambda for each later epoch.
TEST_F(LightningCallbacksTest, ConfigureCallbacksAddsWritersAndBackboneLambdas) {
    Dataset ds = fulmen_test::blobs(32, 1);
    Loader loader(ds, 8);
    Model model = fulmen_test::mlp();
    int runs = 0, module_batches = 0, module_epochs = 0, value_tensors = 0, trainer_batches = 0;
    std::vector<int64_t> asked;
    LightningModule module =
        LightningModule::builder(model)
            .training_step([&model](StepContext&, const Batch& batch) {
                return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            })
            .predict_step([&model](StepContext&, const Batch& batch) -> std::optional<Tensor> {
                return model.forward(batch[0]);
            })
            .configure_optimizers([&model](OptimizerConfig& config) {
                std::vector<Tensor> params = model.parameters(true);
                fulmen::TensorList list(params.begin(), params.end());
                config.add(Optimizer::sgd(list, fulmen::SgdOptions(0.1)));
            })
            .configure_callbacks([&](fulmen::CallbackList& list) {
                runs++;
                list.add_prediction_writer(
                    "batch_and_epoch", [&](const fulmen::BatchPrediction&) { module_batches++; },
                    [&](const fulmen::EpochPredictions& e) { module_epochs += e.predictions.size() == 4; });
                list.add_prediction_value_writer("batch", [&](const fulmen::BatchPredictionValue& p) {
                    value_tensors += p.prediction.kind() == fulmen::ValueKind::Tensor;
                });
                fulmen::BackboneFinetuningOptions o;
                o.unfreeze_backbone_at_epoch = 1;
                list.add_backbone_finetuning("0", [&](int64_t epoch) {
                    asked.push_back(epoch);
                    return 1.5;
                }, o);
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(4).set("logger", false));
    trainer.add_prediction_writer("batch", [&](const fulmen::BatchPrediction&) { trainer_batches++; });
    trainer.predict(module, loader);
    trainer.predict(module, loader);
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(trainer_batches, 0);
    EXPECT_EQ(module_batches, 8);
    EXPECT_EQ(module_epochs, 2);
    // both writers run: the value writer is of the same kind, yet the list
    // keeps every callback it adds, as Lightning keeps a module's list
    EXPECT_EQ(value_tensors, 8);
    trainer.fit(module, loader);
    EXPECT_EQ(asked, (std::vector<int64_t>{3, 4}));
}

// LightningModule from lambdas, the trainer, and exceptions thrown by callbacks.
#include "common.hpp"

#include <chrono>
#include <map>
#include <memory>
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

/// Counts destructor calls of the state the step lambdas capture.
struct DestructionCounter {
    explicit DestructionCounter(int* count) : count_(count) {}
    DestructionCounter(const DestructionCounter&) = delete;
    DestructionCounter& operator=(const DestructionCounter&) = delete;
    ~DestructionCounter() { ++*count_; }
    int* count_;
};

/// Cross-entropy of the model on a batch [inputs, labels].
Tensor batch_loss(const Model& model, const Batch& batch) {
    return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
}

/// Fraction of correct predictions on a batch.
double batch_accuracy(const Model& model, const Batch& batch) {
    return model.forward(batch[0]).argmax(1).eq(batch[1]).to(fulmen::DType::F32).mean().item();
}

/// A module over `model` with all four steps and SGD(lr).
LightningModule::Builder full_module(const Model& model, double lr = 0.1) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext& ctx, const Batch& batch) {
            Tensor loss = batch_loss(model, batch);
            ctx.log("train_loss", loss.item(), fulmen::Log::on_step | fulmen::Log::on_epoch);
            return loss;
        })
        .validation_step([&model](StepContext& ctx, const Batch& batch) {
            ctx.log("val_loss", batch_loss(model, batch));  // a tensor, read at the epoch's end
            ctx.log("val_acc", batch_accuracy(model, batch), fulmen::Log::prog_bar);
        })
        .test_step([&model](StepContext& ctx, const Batch& batch) { ctx.log("test_acc", batch_accuracy(model, batch)); })
        .predict_step([&model](StepContext&, const Batch& batch) -> std::optional<Tensor> {
            return model.forward(batch[0]).softmax(1);
        })
        .configure_optimizers([&model, lr](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, fulmen::SgdOptions(lr)));
        });
}

/// Runs one fit whose training_step throws `error` at global step 2 and
/// checks that fit rethrows it, with the type it was thrown as.
template <class E>
void expect_fit_rethrows(const E& error) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 8);
    LightningModule module = full_module(model)
                                 .training_step([&](StepContext& ctx, const Batch& batch) {
                                     if (ctx.global_step() == 2) throw error;
                                     return batch_loss(model, batch);
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(2).set("logger", false));
    EXPECT_THROW(trainer.fit(module, train), E);
    EXPECT_EQ(trainer.global_step(), 2);  // the parameters keep the last completed update
}

}  // namespace

class TrainerTest : public FulmenTest {};

TEST_F(TrainerTest, FitValidateTestPredictFromLambdas) {
    Dataset train_ds = fulmen_test::blobs(256, 1);
    Dataset val_ds = fulmen_test::blobs(64, 2);
    Loader train(train_ds, 32, true, 7);
    Loader val(val_ds, 32);
    Model model = fulmen_test::mlp();
    LightningModule module = full_module(model).build();
    Trainer trainer(fulmen_test::quiet_options(4));

    trainer.fit(module, train, val);
    EXPECT_EQ(trainer.global_step(), 32);
    EXPECT_EQ(trainer.current_epoch(), 4);
    EXPECT_GT(trainer.callback_metric("val_acc"), 0.95);
    EXPECT_LT(trainer.callback_metric("train_loss_epoch"), 0.5);
    EXPECT_GT(trainer.callback_metric("val_loss"), 0.0);
    EXPECT_LT(trainer.callback_metric("val_loss"), 0.5);
    EXPECT_NE(trainer.log_dir().find("lightning_logs/version_"), std::string::npos);
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(trainer.log_dir()) / "metrics.csv"));
    try {
        trainer.callback_metric("nope");
        ADD_FAILURE() << "unknown metric accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("val_acc"), std::string::npos);
    }

    trainer.validate(module, val);
    trainer.test(module, val);
    EXPECT_GT(trainer.callback_metric("test_acc"), 0.95);
    std::optional<Tensor> pred = trainer.predict(module, val);
    ASSERT_TRUE(pred.has_value());
    EXPECT_EQ(pred->shape(), (fulmen::Shape{64, 2}));
    EXPECT_NEAR(pred->sum().item(), 64.0, 1e-3);
}

TEST_F(TrainerTest, SeveralEvaluationLoaders) {
    Dataset train_ds = fulmen_test::blobs(64, 1);
    Dataset a_ds = fulmen_test::blobs(48, 2);
    Dataset b_ds = fulmen_test::blobs(16, 3);
    Loader train(train_ds, 16), a(a_ds, 16), b(b_ds, 16);
    Model model = fulmen_test::mlp();
    std::vector<int> steps(2, 0);
    LightningModule module = full_module(model)
                                 .validation_step([&](StepContext& ctx, const Batch& batch) {
                                     steps.at(ctx.dataloader_idx())++;
                                     ctx.log("val_loss", batch_loss(model, batch).item());
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("num_sanity_val_steps", 0));
    trainer.fit(module, train, {&a, &b});
    EXPECT_EQ(steps, (std::vector<int>{3, 1}));
    double on_a = trainer.callback_metric("val_loss/dataloader_idx_0");
    double on_b = trainer.callback_metric("val_loss/dataloader_idx_1");
    fulmen::EvalResults one = trainer.validate(module, b);
    EXPECT_DOUBLE_EQ(trainer.callback_metric("val_loss"), on_b);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0], (std::map<std::string, double>{{"val_loss", on_b}}));
    // Lightning's list of dicts: each loader's own values.
    fulmen::EvalResults two = trainer.validate(module, {&b, &a});
    EXPECT_DOUBLE_EQ(trainer.callback_metric("val_loss/dataloader_idx_1"), on_a);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0], (std::map<std::string, double>{{"val_loss/dataloader_idx_0", on_b}}));
    EXPECT_EQ(two[1], (std::map<std::string, double>{{"val_loss/dataloader_idx_1", on_a}}));
    EXPECT_EQ(trainer.eval_results(), two);
    fulmen::EvalResults tested = trainer.test(module, {&a, &b});
    EXPECT_GE(trainer.callback_metric("test_acc/dataloader_idx_1"), 0.0);
    ASSERT_EQ(tested.size(), 2u);
    EXPECT_EQ(tested[1].at("test_acc/dataloader_idx_1"), trainer.callback_metric("test_acc/dataloader_idx_1"));
    EXPECT_EQ(tested[0].count("test_acc/dataloader_idx_1"), 0u);
    std::vector<std::optional<Tensor>> preds = trainer.predict(module, {&a, &b});
    ASSERT_EQ(preds.size(), 2u);
    EXPECT_EQ(preds[0]->shape(), (fulmen::Shape{48, 2}));
    EXPECT_EQ(preds[1]->shape(), (fulmen::Shape{16, 2}));
    EXPECT_TRUE(trainer.eval_results().empty());  // predict returns no metrics
    EXPECT_THROW(trainer.validate(module, std::vector<const Loader*>{}), fulmen::Error);
    EXPECT_THROW(trainer.test(module, {&a, nullptr}), fulmen::Error);
}

TEST_F(TrainerTest, ScaleBatchSizeStopsAtTheFirstOutOfMemory) {
    // Batches of more than 40 rows "run out of memory": power mode doubles
    // 2, 4, ..., 64, fails there and keeps 32; the loader batches by it.
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    std::vector<float> before = model.state_dict_get("0.weight").to_vector<float>();
    LightningModule module = full_module(model)
                                 .training_step([&](StepContext&, const Batch& batch) {
                                     if (batch[0].shape()[0] > 40) throw fulmen::Error(FULMEN_CODE_OUT_OF_MEMORY, "oom");
                                     return batch_loss(model, batch);
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    fulmen::BatchSizeFinderOptions o;
    EXPECT_FALSE(o.binsearch);
    EXPECT_EQ(trainer.scale_batch_size(module, train, nullptr, o), 32u);
    EXPECT_EQ(train.len(), 2u);
    EXPECT_EQ(model.state_dict_get("0.weight").to_vector<float>(), before);
    o.binsearch = true;
    o.margin = 0;
    EXPECT_EQ(trainer.scale_batch_size(module, train, nullptr, o), 40u);
}

TEST_F(TrainerTest, BackboneFinetuningTrainsTheBackboneFromItsEpoch) {
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    std::vector<float> before = model.state_dict_get("0.weight").to_vector<float>();
    size_t trainable = 0;
    LightningModule module = full_module(model)
                                 .configure_optimizers([&](OptimizerConfig& config) {
                                     std::vector<Tensor> params = model.parameters(true);
                                     trainable = params.size();
                                     fulmen::TensorList list(params.begin(), params.end());
                                     config.add(Optimizer::sgd(list, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    fulmen::BackboneFinetuningOptions o;
    EXPECT_EQ(o.unfreeze_backbone_at_epoch, 10);
    EXPECT_EQ(o.lambda_factor, 2.0);
    o.unfreeze_backbone_at_epoch = 1;
    // Epoch 0: only the last Linear trains.
    Trainer first(fulmen_test::quiet_options(1).set("logger", false));
    first.add_backbone_finetuning("0", o);
    first.fit(module, train);
    EXPECT_EQ(trainable, 2u);
    EXPECT_EQ(model.state_dict_get("0.weight").to_vector<float>(), before);
    EXPECT_EQ(model.parameters().size(), 4u);
    // From epoch 1 the first Linear trains too.
    Trainer second(fulmen_test::quiet_options(2).set("logger", false));
    second.add_backbone_finetuning("0", o);
    second.fit(module, train);
    EXPECT_NE(model.state_dict_get("0.weight").to_vector<float>(), before);
    EXPECT_EQ(model.parameters(true).size(), 4u);
    o.lambda_factor = -1;
    EXPECT_THROW(second.add_backbone_finetuning("0", o), fulmen::Error);
}

TEST_F(TrainerTest, BackboneFinetuningAsksTheLambdaForEachLaterEpoch) {
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    LightningModule module = full_module(model)
                                 .configure_optimizers([&](OptimizerConfig& config) {
                                     std::vector<Tensor> params = model.parameters(true);
                                     fulmen::TensorList list(params.begin(), params.end());
                                     config.add(Optimizer::sgd(list, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    fulmen::BackboneFinetuningOptions o;
    o.unfreeze_backbone_at_epoch = 1;
    std::vector<int64_t> asked;
    Trainer trainer(fulmen_test::quiet_options(4).set("logger", false));
    trainer.add_backbone_finetuning("0", [&](int64_t epoch) {
        asked.push_back(epoch);
        return 1.5;
    }, o);
    trainer.fit(module, train);
    EXPECT_EQ(asked, (std::vector<int64_t>{3, 4}));
    // An exception in the lambda fails the fit and is rethrown there.
    Model again = fulmen_test::mlp();
    LightningModule other = full_module(again)
                                .configure_optimizers([&](OptimizerConfig& config) {
                                    std::vector<Tensor> params = again.parameters(true);
                                    fulmen::TensorList list(params.begin(), params.end());
                                    config.add(Optimizer::sgd(list, fulmen::SgdOptions(0.1)));
                                })
                                .build();
    Trainer failing(fulmen_test::quiet_options(4).set("logger", false));
    failing.add_backbone_finetuning("0", [](int64_t) -> double { throw std::runtime_error("no factor"); }, o);
    EXPECT_THROW(failing.fit(other, train), std::runtime_error);
}

TEST_F(TrainerTest, WeightAveragingEndsWithTheAverage) {
    // An average that is never updated after its first copy: training
    // ends with the weights the fit started from.
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    std::vector<float> before = model.state_dict_get("0.weight").to_vector<float>();
    LightningModule module = full_module(model).build();
    fulmen::WeightAveragingOptions o;
    EXPECT_TRUE(o.ema);
    EXPECT_EQ(o.decay, 0.999);
    o.update_every_n_steps = 0;
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    trainer.add_weight_averaging(o);
    trainer.fit(module, train);
    EXPECT_EQ(trainer.global_step(), 8);
    EXPECT_EQ(model.state_dict_get("0.weight").to_vector<float>(), before);
    o.decay = 1.5;
    EXPECT_THROW(trainer.add_weight_averaging(o), fulmen::Error);
}

TEST_F(TrainerTest, StochasticWeightAveragingEndsOnTheAverage) {
    // Averaging from the last of three epochs averages one model: the
    // weights that epoch started from, which two epochs without SWA end with.
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);
    Model model = fulmen_test::mlp();
    std::string init = (fulmen_test::scratch() / "swa-init.safetensors").string();
    model.save(init);
    LightningModule module = full_module(model).build();
    Trainer plain(fulmen_test::quiet_options(2).set("logger", false));
    plain.fit(module, train);
    std::vector<float> want = model.state_dict_get("0.weight").to_vector<float>();
    model.load(init);
    fulmen::StochasticWeightAveragingOptions o(0.05);
    EXPECT_EQ(o.swa_epoch_start_fraction, 0.8);
    EXPECT_EQ(o.annealing_epochs, 10);
    o.swa_epoch_start = 3;
    Trainer swa(fulmen_test::quiet_options(3).set("logger", false));
    swa.add_stochastic_weight_averaging(o);
    EXPECT_THROW(swa.add_stochastic_weight_averaging(o), fulmen::Error);
    swa.fit(module, train);
    EXPECT_EQ(model.state_dict_get("0.weight").to_vector<float>(), want);
    // Two SWA lrs for the optimizer's one param group.
    o.swa_epoch_start = 1;
    Trainer bad(fulmen_test::quiet_options(1).set("logger", false));
    bad.add_stochastic_weight_averaging(o, {0.05, 0.01});
    EXPECT_THROW(bad.fit(module, train), fulmen::Error);
}

TEST_F(TrainerTest, AccumulationScheduleAndExceptionCheckpoint) {
    Dataset ds = fulmen_test::blobs(64, 1);
    Loader train(ds, 8);  // 8 batches
    Model model = fulmen_test::mlp();
    bool fail = true;
    LightningModule module = full_module(model)
                                 .training_step([&](StepContext& ctx, const Batch& batch) {
                                     if (fail && ctx.global_step() == 5) throw std::runtime_error("stop");
                                     return batch_loss(model, batch);
                                 })
                                 .build();
    std::filesystem::path dir = fulmen_test::scratch() / "on-exception";
    Trainer trainer(fulmen_test::quiet_options(2).set("logger", false));
    trainer.add_gradient_accumulation_scheduler({{0, 2}, {1, 4}}).add_on_exception_checkpoint(dir.string());
    EXPECT_THROW(trainer.fit(module, train), std::runtime_error);  // epoch 0: 4 steps; epoch 1 stops in its 2nd
    EXPECT_TRUE(std::filesystem::exists(dir / "on_exception.ckpt"));
    fail = false;
    Trainer resumed(fulmen_test::quiet_options(2).set("logger", false));
    resumed.add_gradient_accumulation_scheduler({{0, 2}, {1, 4}});
    resumed.fit(module, train, (dir / "on_exception.ckpt").string());
    EXPECT_EQ(resumed.global_step(), 4 + 2);
    EXPECT_THROW(resumed.profiler_report(), fulmen::Error);  // not profiled
    Trainer profiled(fulmen_test::quiet_options(1).set("logger", false).set("profiler", "simple"));
    profiled.fit(module, train);
    EXPECT_NE(profiled.profiler_report().find("[Strategy].training_step"), std::string::npos);
    EXPECT_THROW(resumed.add_gradient_accumulation_scheduler({{-1, 2}}), fulmen::Error);
}

TEST_F(TrainerTest, SaveCheckpointAfterFitAndWhatTheTrainerKnows) {
    Dataset train_ds = fulmen_test::blobs(64, 1);
    Dataset val_ds = fulmen_test::blobs(32, 2);
    Loader train(train_ds, 8, true, 7);  // 8 batches
    Loader val(val_ds, 16);              // 2 batches
    Model model = fulmen_test::mlp();
    LightningModule module = full_module(model).build();
    auto options = [](int64_t epochs) {
        return fulmen_test::quiet_options(epochs)
            .set("logger", false)
            .set("enable_checkpointing", false)
            .set("accelerator", "cpu");
    };
    std::string path = (fulmen_test::scratch() / "after-fit" / "state.ckpt").string();
    Trainer trainer(options(2));

    // Before any run.
    EXPECT_EQ(fulmen_test::error_code([&] { trainer.save_checkpoint(module, path, true); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(fulmen_test::error_code([&] { (void)trainer.estimated_stepping_batches(); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_FALSE(trainer.num_training_batches().has_value());
    EXPECT_TRUE(trainer.callback_metrics().empty());
    EXPECT_EQ(trainer.num_devices(), 1u);

    trainer.fit(module, train, val);
    EXPECT_EQ(trainer.num_training_batches().value_or(-1), 8);
    EXPECT_EQ(trainer.estimated_stepping_batches().value_or(-1), 16);
    EXPECT_TRUE(trainer.is_last_batch());
    EXPECT_FALSE(trainer.should_stop());
    std::vector<std::optional<int64_t>> val_batches = trainer.num_val_batches();
    ASSERT_EQ(val_batches.size(), 1u);
    EXPECT_EQ(val_batches[0].value_or(-1), 2);
    EXPECT_EQ(trainer.node_rank(), 0u);
    std::vector<std::optional<int64_t>> sanity = trainer.num_sanity_val_batches();
    ASSERT_EQ(sanity.size(), 1u);
    EXPECT_EQ(sanity[0].value_or(-1), 2);  // num_sanity_val_steps 2, the loader's 2
    EXPECT_TRUE(trainer.num_test_batches().empty());
    EXPECT_TRUE(trainer.num_predict_batches().empty());
    EXPECT_EQ(trainer.device_ids(), std::vector<int64_t>{-1});
    EXPECT_EQ(fulmen_test::error_code([&] { (void)trainer.grad_scale(); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(fulmen_test::error_code([&] { (void)trainer.early_stopping_state(); }), FULMEN_CODE_INVALID_STATE);
    std::map<std::string, double> cb = trainer.callback_metrics();
    EXPECT_EQ(cb.at("val_acc"), trainer.callback_metric("val_acc"));
    EXPECT_EQ(cb.count("train_loss_step"), 1u);
    std::map<std::string, double> logged = trainer.logged_metrics();
    EXPECT_EQ(logged.count("train_loss_epoch"), 1u);
    EXPECT_EQ(logged.count("train_loss"), 0u);  // the bare epoch name is a callback metric only
    std::map<std::string, double> bar = trainer.progress_bar_metrics();
    EXPECT_EQ(bar.size(), 1u);
    EXPECT_EQ(bar.count("val_acc"), 1u);

    trainer.save_checkpoint(module, path);
    EXPECT_TRUE(std::filesystem::exists(path));
    Trainer resumed(options(3));
    resumed.fit(module, train, val, path);
    EXPECT_EQ(resumed.global_step(), 24);
    EXPECT_EQ(resumed.current_epoch(), 3);

    // Another fit goes on from the last one's progress: nothing at its
    // limit, one more epoch once raised (Lightning's fit_loop.max_epochs).
    resumed.fit(module, train, val);
    EXPECT_EQ(resumed.global_step(), 24);
    resumed.set_max_epochs(4).fit(module, train, val);
    EXPECT_EQ(resumed.global_step(), 32);
    EXPECT_EQ(resumed.current_epoch(), 4);
    resumed.set_max_epochs(-1).set_max_steps(36).fit(module, train, val);
    EXPECT_EQ(resumed.global_step(), 36);
    EXPECT_EQ(fulmen_test::error_code([&] { resumed.set_max_steps(-3); }), FULMEN_CODE_INVALID_ARGUMENT);

    Model other_model = fulmen_test::mlp();
    LightningModule other = full_module(other_model).build();
    EXPECT_EQ(fulmen_test::error_code([&] { resumed.save_checkpoint(other, path, true); }),
              FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(TrainerTest, LearningRateRangeTest) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 3);
    Loader train(ds, 8);
    LightningModule module = full_module(model).build();
    Trainer trainer(fulmen_test::quiet_options(5).set("logger", false));
    fulmen::LrFindOptions options;
    options.min_lr = 1e-4;
    options.num_training = 20;
    options.early_stop_threshold = 0;
    fulmen::LrFindResult found = trainer.lr_find(module, train, nullptr, options);
    std::vector<double> lrs = found.lrs(), losses = found.losses();
    ASSERT_EQ(lrs.size(), 20u);
    ASSERT_EQ(losses.size(), 20u);
    EXPECT_DOUBLE_EQ(lrs.front(), 1e-4);
    EXPECT_GT(lrs.back(), lrs[1]);
    std::optional<double> lr = found.suggestion();
    ASSERT_TRUE(lr.has_value());
    EXPECT_GE(*lr, lrs[10]);
    EXPECT_FALSE(found.suggestion(15, 10).has_value());
    EXPECT_EQ(trainer.global_step(), 0);
    options.min_lr = 2;  // above max_lr
    EXPECT_THROW(trainer.lr_find(module, train, nullptr, options), fulmen::Error);
}

TEST_F(TrainerTest, StepContextCountersAndStages) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 3);
    Loader loader(ds, 8);
    std::vector<fulmen::Stage> stages;
    int64_t last_epoch = -1, last_step = -1, last_batch = -1;
    LightningModule module = full_module(model)
                                 .training_step([&](StepContext& ctx, const Batch& batch) {
                                     stages.push_back(ctx.stage());
                                     last_epoch = ctx.epoch();
                                     last_step = ctx.global_step();
                                     last_batch = ctx.batch_idx();
                                     EXPECT_EQ(batch.size(), 2u);
                                     return batch_loss(model, batch);
                                 })
                                 .predict_step([&](StepContext& ctx, const Batch&) -> std::optional<Tensor> {
                                     stages.push_back(ctx.stage());
                                     EXPECT_THROW(ctx.log("x", 1.0), fulmen::Error);  // no logging in predict
                                     return std::nullopt;
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(2).set("logger", false));
    trainer.fit(module, loader);
    EXPECT_EQ(last_epoch, 1);
    EXPECT_EQ(last_step, 7);
    EXPECT_EQ(last_batch, 3);
    EXPECT_EQ(stages.front(), fulmen::Stage::Train);
    EXPECT_FALSE(trainer.predict(module, loader).has_value());  // no step produced an output
    EXPECT_EQ(stages.back(), fulmen::Stage::Predict);
    try {
        trainer.log_dir();
        ADD_FAILURE() << "log_dir without a logger";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
    }
}

TEST_F(TrainerTest, StdExceptionInTrainingStepComesBackUnchanged) {
    expect_fit_rethrows(std::out_of_range("batch index past the end"));
    expect_fit_rethrows(std::string("not even an exception class"));
}

TEST_F(TrainerTest, FulmenErrorInTrainingStepKeepsItsCode) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(16, 5);
    Loader train(ds, 8);
    LightningModule module = full_module(model)
                                 .training_step([](StepContext&, const Batch&) -> Tensor {
                                     throw fulmen::Error(FULMEN_CODE_IO, "sensor offline");
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    try {
        trainer.fit(module, train);
        ADD_FAILURE() << "fit succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_IO);
        EXPECT_STREQ(e.what(), "sensor offline");
    }
}

TEST_F(TrainerTest, LibraryErrorsInsideAStepKeepTheirCode) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(16, 5);
    Loader train(ds, 8);
    LightningModule module = full_module(model)
                                 .training_step([&](StepContext&, const Batch& batch) {
                                     return model.forward(batch[0]).matmul(batch[0].reshape({-1, 1, 1}));
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    try {
        trainer.fit(module, train);
        ADD_FAILURE() << "fit succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_SHAPE_MISMATCH) << e.what();
    }
    // a fit failing inside fulmen (not in a callback) throws fulmen::Error
    LightningModule no_optim = LightningModule::builder(model)
                                   .training_step([&](StepContext&, const Batch& batch) { return batch_loss(model, batch); })
                                   .build();
    try {
        trainer.fit(no_optim, train);
        ADD_FAILURE() << "fit without configure_optimizers succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
    }
    EXPECT_THROW(trainer.validate(no_optim, train), fulmen::Error);  // no validation_step
}

TEST_F(TrainerTest, ExceptionsFromOtherCallbacksToo) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(16, 6);
    Loader loader(ds, 8);
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    LightningModule bad_val = full_module(model)
                                  .validation_step([](StepContext&, const Batch&) { throw std::domain_error("val"); })
                                  .build();
    EXPECT_THROW(trainer.fit(bad_val, loader, loader), std::domain_error);
    EXPECT_THROW(trainer.validate(bad_val, loader), std::domain_error);
    LightningModule bad_rest = full_module(model)
                                   .test_step([](StepContext&, const Batch&) { throw std::underflow_error("test"); })
                                   .predict_step([](StepContext&, const Batch&) -> std::optional<Tensor> { throw 42; })
                                   .configure_optimizers([](OptimizerConfig&) { throw std::overflow_error("optim"); })
                                   .build();
    EXPECT_THROW(trainer.test(bad_rest, loader), std::underflow_error);
    EXPECT_THROW(trainer.predict(bad_rest, loader), int);
    EXPECT_THROW(trainer.fit(bad_rest, loader), std::overflow_error);
    trainer.fit(bad_val, loader);  // a stale exception never leaks into a later call
}

TEST_F(TrainerTest, UserdataIsFreedExactlyOnce) {
    int destroyed = 0;
    {
        Model model = fulmen_test::mlp();
        Dataset ds = fulmen_test::blobs(16, 7);
        Loader loader(ds, 8);
        auto counter = std::make_shared<DestructionCounter>(&destroyed);
        LightningModule module = full_module(model)
                                     .test_step([counter, &model](StepContext& ctx, const Batch& batch) {
                                         ctx.log("test_acc", batch_accuracy(model, batch));
                                     })
                                     .build();
        counter.reset();
        Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
        trainer.fit(module, loader);
        trainer.test(module, loader);
        LightningModule moved = std::move(module);
        EXPECT_EQ(destroyed, 0);
        fulmen_lightning_module* raw = moved.release();
        EXPECT_EQ(destroyed, 0);
        LightningModule again = LightningModule::adopt(raw);
    }
    EXPECT_EQ(destroyed, 1);

    // a module that fails to be created frees the lambdas itself, once
    destroyed = 0;
    {
        auto counter = std::make_shared<DestructionCounter>(&destroyed);
        fulmen::Steps steps;
        steps.test_step = [counter](StepContext&, const Batch&) {};
        counter.reset();
        Tensor not_a_model = Tensor::ones({1});
        Model wrong = Model::adopt(reinterpret_cast<fulmen_model*>(not_a_model.get()));
        try {
            LightningModule(wrong, std::move(steps));
            ADD_FAILURE() << "a module over a tensor handle was created";
        } catch (const fulmen::Error& e) {
            EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_HANDLE);
        }
        wrong.release();  // not ours to free
    }
    EXPECT_EQ(destroyed, 1);
}

TEST_F(TrainerTest, TensorsStoredOutsideAStepStayValid) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(16, 8);
    Loader loader(ds, 8);
    std::vector<Tensor> kept;
    LightningModule module = full_module(model)
                                 .training_step([&](StepContext&, const Batch& batch) {
                                     kept.push_back(batch[1]);
                                     Tensor loss = batch_loss(model, batch);
                                     kept.push_back(loss.detach());
                                     return loss;
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    size_t live_before = fulmen::live_handles();
    trainer.fit(module, loader);
    ASSERT_EQ(kept.size(), 4u);
    EXPECT_EQ(fulmen::live_handles(), live_before + kept.size());  // nothing else outlived the steps
    EXPECT_EQ(kept[0].shape(), (fulmen::Shape{8}));
    EXPECT_GT(kept[1].item(), 0.0);
}

TEST_F(TrainerTest, SchedulersThroughConfigureOptimizers) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(64, 9);
    Dataset val_ds = fulmen_test::blobs(32, 10);
    Loader train(train_ds, 16, true);
    Loader val(val_ds, 16);
    double lr_seen = 0;
    LightningModule step_lr = full_module(model)
                                  .configure_optimizers([&](OptimizerConfig& config) {
                                      Optimizer opt = Optimizer::sgd(model, fulmen::SgdOptions(0.1));
                                      fulmen::Scheduler s = fulmen::Scheduler::step_lr(opt, 5, 0.5);
                                      config.add(std::move(opt), std::move(s), fulmen::Interval::Step);
                                  })
                                  .build();
    Trainer trainer(fulmen_test::quiet_options(3).set("logger", false));
    trainer.fit(step_lr, train, val);
    LightningModule plateau = full_module(model)
                                  .configure_optimizers([&](OptimizerConfig& config) {
                                      Optimizer opt = Optimizer::sgd(model, fulmen::SgdOptions(0.1));
                                      lr_seen = opt.lr();
                                      fulmen::Scheduler s = fulmen::Scheduler::reduce_on_plateau(opt);
                                      EXPECT_THROW(config.add(std::move(opt), std::move(s)), fulmen::Error);  // needs a monitor
                                      EXPECT_TRUE(opt && s);  // nothing consumed on failure
                                      config.add(std::move(opt), std::move(s), fulmen::Interval::Epoch, 1, "val_loss");
                                      EXPECT_FALSE(opt || s);
                                  })
                                  .build();
    trainer.set_max_epochs(6);  // three more epochs: the last fit's are done
    trainer.fit(plateau, train, val);
    EXPECT_EQ(lr_seen, 0.1);
    // Two schedulers on one optimizer: a warm-up per step, ReduceLROnPlateau per epoch.
    LightningModule both = full_module(model)
                               .configure_optimizers([&](OptimizerConfig& config) {
                                   Optimizer opt = Optimizer::sgd(model, fulmen::SgdOptions(0.1));
                                   fulmen::Scheduler warm = fulmen::Scheduler::linear_lr(opt, 0.5, 1.0, 4);
                                   fulmen::Scheduler s = fulmen::Scheduler::reduce_on_plateau(opt);
                                   config.add(std::move(opt), std::move(warm), fulmen::Interval::Step);
                                   EXPECT_THROW(config.add_scheduler(1, std::move(s)), fulmen::Error);  // no optimizer 1
                                   EXPECT_TRUE(s);  // nothing consumed on failure
                                   config.add_scheduler(0, std::move(s), fulmen::Interval::Epoch, 1, "val_loss");
                                   EXPECT_FALSE(s);
                               })
                               .build();
    trainer.set_max_epochs(9);
    trainer.fit(both, train, val);
    EXPECT_EQ(trainer.current_epoch(), 9);
}

TEST_F(TrainerTest, ManualOptimizationFromTheStepContext) {
    Dataset ds = fulmen_test::blobs(64, 9);
    Loader train(ds, 16);
    fulmen::manual_seed(4);
    Model manual_model = fulmen_test::mlp();
    fulmen::manual_seed(4);
    Model auto_model = fulmen_test::mlp();
    std::vector<double> rates;
    LightningModule manual =
        LightningModule::builder(manual_model)
            .training_step([&](StepContext& ctx, const Batch& batch) {
                EXPECT_EQ(ctx.optimizer_count(), 1u);
                ctx.toggle_optimizer(0);  // one optimizer: nothing to switch off
                Tensor loss = batch_loss(manual_model, batch);
                ctx.optimizer_zero_grad(0);
                ctx.manual_backward(loss);
                if (rates.size() % 2 == 1) {
                    ctx.optimizer_step_no_wait(0);  // not asking whether the update was made
                } else {
                    EXPECT_TRUE(ctx.optimizer_step(0));
                }
                ctx.untoggle_optimizer(0);
                rates.push_back(ctx.learning_rate(0));
                // By optimizer, or by place in lr_schedulers(): the same one here.
                EXPECT_EQ(ctx.lr_scheduler_count(), 1u);
                if (rates.size() % 2 == 0) {
                    ctx.scheduler_step(0);
                } else {
                    ctx.lr_scheduler_step(0);
                }
                EXPECT_EQ(fulmen_test::error_code([&] { ctx.lr_scheduler_step(1); }), FULMEN_CODE_INVALID_ARGUMENT);
                EXPECT_EQ(fulmen_test::error_code([&] { ctx.optimizer_step(1); }), FULMEN_CODE_INVALID_ARGUMENT);
                EXPECT_EQ(fulmen_test::error_code([&] { ctx.optimizer_step_no_wait(1); }), FULMEN_CODE_INVALID_ARGUMENT);
                return Tensor{};  // no loss to return
            })
            .configure_optimizers([&](OptimizerConfig& config) {
                Optimizer opt = Optimizer::sgd(manual_model, fulmen::SgdOptions(0.1));
                fulmen::Scheduler s = fulmen::Scheduler::step_lr(opt, 2, 0.5);
                config.add(std::move(opt), std::move(s), fulmen::Interval::Step);
            })
            .build();
    manual.set_automatic_optimization(false);
    LightningModule automatic = LightningModule::builder(auto_model)
                                    .training_step([&](StepContext& ctx, const Batch& batch) {
                                        EXPECT_EQ(fulmen_test::error_code([&] { ctx.optimizer_count(); }),
                                                  FULMEN_CODE_INVALID_STATE);
                                        return batch_loss(auto_model, batch);
                                    })
                                    .configure_optimizers([&](OptimizerConfig& config) {
                                        Optimizer opt = Optimizer::sgd(auto_model, fulmen::SgdOptions(0.1));
                                        fulmen::Scheduler s = fulmen::Scheduler::step_lr(opt, 2, 0.5);
                                        config.add(std::move(opt), std::move(s), fulmen::Interval::Step);
                                    })
                                    .build();
    Trainer a(fulmen_test::quiet_options(1).set("logger", false));
    Trainer b(fulmen_test::quiet_options(1).set("logger", false));
    a.fit(manual, train);
    b.fit(automatic, train);
    EXPECT_EQ(a.global_step(), 4);
    EXPECT_EQ(rates, (std::vector<double>{0.1, 0.1, 0.05, 0.05}));  // StepLR(2, 0.5)
    Tensor wa = manual_model.state_dict_get("2.weight"), wb = auto_model.state_dict_get("2.weight");
    EXPECT_EQ((wa - wb).abs().max().item(), 0.0);  // the same updates as automatic optimization
}

TEST_F(TrainerTest, DataloaderHooksAreReloaded) {
    // fit(module) trains on the module's train_dataloader, validates on its
    // val_dataloader, and calls them again every 2 epochs.
    Model model = fulmen_test::mlp();
    std::vector<int64_t> train_calls, val_calls;
    int64_t steps = 0;
    LightningModule module =
        LightningModule::builder(model)
            .training_step([&](StepContext&, const Batch& batch) {
                steps++;
                return batch_loss(model, batch);
            })
            .validation_step([&](StepContext& ctx, const Batch& batch) {
                ctx.log("val_loss", batch_loss(model, batch).item());
            })
            .configure_optimizers([&](OptimizerConfig& c) { c.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1))); })
            .train_dataloader([&](int64_t epoch) {
                train_calls.push_back(epoch);
                return Loader(fulmen_test::blobs(32 + 16 * epoch, 9), 16);
            })
            .val_dataloader([&](int64_t epoch) {
                val_calls.push_back(epoch);
                std::vector<Loader> loaders;
                loaders.emplace_back(fulmen_test::blobs(16, 3), 16);
                return loaders;
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(3).set("logger", false).set("reload_dataloaders_every_n_epochs", 2));
    trainer.fit(module);
    EXPECT_EQ(train_calls, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(val_calls, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(steps, 2 + 2 + 4);  // 32, 32, then 64 samples of 16
    EXPECT_GT(trainer.callback_metric("val_loss"), 0.0);
    // A hook that throws ends fit with its own exception.
    struct Gone {};
    LightningModule failing = LightningModule::builder(model)
                                  .training_step([&](StepContext&, const Batch& b) { return batch_loss(model, b); })
                                  .configure_optimizers([&](OptimizerConfig& c) { c.add(Optimizer::sgd(model)); })
                                  .train_dataloader([&](int64_t) -> Loader { throw Gone{}; })
                                  .build();
    Trainer again(fulmen_test::quiet_options(1).set("logger", false));
    EXPECT_THROW(again.fit(failing), Gone);
}

TEST_F(TrainerTest, ManualLbfgsStepsWithAClosure) {
    // opt.step(closure) from a manual training step: the closure runs
    // through its own context, as often as LBFGS asks; the same weights
    // as LBFGS under automatic optimization.
    Dataset ds = fulmen_test::blobs(64, 9);
    Loader train(ds, 16);
    fulmen::manual_seed(6);
    Model manual_model = fulmen_test::mlp();
    fulmen::manual_seed(6);
    Model auto_model = fulmen_test::mlp();
    int manual_calls = 0, auto_calls = 0;
    auto lbfgs = [](Model& m) { return Optimizer::lbfgs(m, fulmen::LbfgsOptions(0.5)); };
    LightningModule manual = LightningModule::builder(manual_model)
                                 .training_step([&](StepContext& ctx, const Batch& batch) {
                                     std::vector<double> evaluated;
                                     double first = ctx.optimizer_step(0, [&](StepContext& inner) {
                                         manual_calls++;
                                         inner.optimizer_zero_grad(0);
                                         Tensor loss = batch_loss(manual_model, batch);
                                         inner.manual_backward(loss);
                                         // the step's own context is in use meanwhile
                                         EXPECT_EQ(fulmen_test::error_code([&] { ctx.optimizer_zero_grad(0); }),
                                                   FULMEN_CODE_INVALID_STATE);
                                         evaluated.push_back(loss.item());
                                         return evaluated.back();
                                     });
                                     EXPECT_EQ(first, evaluated.at(0));  // torch's return value
                                     return Tensor{};
                                 })
                                 .configure_optimizers([&](OptimizerConfig& c) { c.add(lbfgs(manual_model)); })
                                 .build();
    manual.set_automatic_optimization(false);
    LightningModule automatic = LightningModule::builder(auto_model)
                                    .training_step([&](StepContext&, const Batch& batch) {
                                        auto_calls++;
                                        return batch_loss(auto_model, batch);
                                    })
                                    .configure_optimizers([&](OptimizerConfig& c) { c.add(lbfgs(auto_model)); })
                                    .build();
    Trainer a(fulmen_test::quiet_options(1).set("logger", false));
    Trainer b(fulmen_test::quiet_options(1).set("logger", false));
    a.fit(manual, train);
    b.fit(automatic, train);
    EXPECT_EQ(a.global_step(), 4);
    EXPECT_EQ(manual_calls, auto_calls);
    EXPECT_GT(manual_calls, 4);
    Tensor wa = manual_model.state_dict_get("2.weight"), wb = auto_model.state_dict_get("2.weight");
    EXPECT_EQ((wa - wb).abs().max().item(), 0.0);
}

TEST_F(TrainerTest, LogDictAndReductions) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 9);
    Loader train(ds, 16);
    LightningModule module =
        full_module(model)
            .training_step([&](StepContext& ctx, const Batch& batch) {
                double v = static_cast<double>(ctx.batch_idx());
                ctx.log_dict({{"peak", v}, {"floor", -v}}, fulmen::Log::on_epoch | fulmen::Log::reduce_max);
                ctx.log("n", 1.0, fulmen::Log::on_epoch | fulmen::Log::reduce_sum | fulmen::Log::no_logger);
                ctx.log("mine", v, fulmen::Log::on_epoch | fulmen::Log::sync_dist | fulmen::Log::rank_zero_only);
                EXPECT_EQ(fulmen_test::error_code([&] { ctx.log("x", v, fulmen::Log::reduce_min | fulmen::Log::reduce_max); }),
                          FULMEN_CODE_INVALID_ARGUMENT);
                return batch_loss(model, batch);
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    trainer.fit(module, train);
    EXPECT_EQ(trainer.callback_metric("peak"), 3.0);
    EXPECT_EQ(trainer.callback_metric("floor"), 0.0);
    EXPECT_EQ(trainer.callback_metric("n"), 4.0);
    EXPECT_EQ(trainer.callback_metric("mine"), 1.5);
}

TEST_F(TrainerTest, IteratorLoaderFromLambdas) {
    Dataset ds = fulmen_test::blobs(32, 10);
    int64_t pos = 0;
    int resets = 0;
    bool fail = false;
    fulmen::IteratorSource source;
    source.reset = [&](uint64_t) {
        pos = 0;
        resets++;
    };
    source.next = [&](fulmen::BatchBuilder& b) {
        if (fail && pos >= 8) throw std::runtime_error("the stream broke");
        if (pos >= 32) return false;
        std::vector<int64_t> idx;
        for (int64_t i = 0; i < 8; i++) idx.push_back(pos + i);
        pos += 8;
        for (const Tensor& t : ds.get(idx)) b.push(t);
        return true;
    };
    Loader loader = Loader::from_iterator(std::move(source));
    try {
        loader.len();
        ADD_FAILURE() << "an iterator of unknown length has a len";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_UNSUPPORTED);
    }
    Model model = fulmen_test::mlp();
    LightningModule module = full_module(model).build();
    Trainer trainer(fulmen_test::quiet_options(3).set("logger", false));
    trainer.fit(module, loader);
    EXPECT_EQ(resets, 3);
    EXPECT_EQ(trainer.global_step(), 12);
    fail = true;
    trainer.set_max_epochs(4);  // the next fit goes on with epoch 3
    try {
        trainer.fit(module, loader);
        ADD_FAILURE() << "fit succeeded";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "the stream broke");
        EXPECT_EQ(dynamic_cast<const fulmen::Error*>(&e), nullptr);  // the original, not a wrapper
    }
}

TEST_F(TrainerTest, TrainerOptionsByName) {
    fulmen::TrainerOptions o;
    o.set("max_epochs", 3).set("max_steps", int64_t{5}).set("limit_train_batches", 0.5).set("logger", false);
    o.set("seed", "none").set("default_root_dir", fulmen_test::scratch().string()).set("max_epochs", "none");
    try {
        o.set("max_epoch", 3);
        ADD_FAILURE() << "unknown key accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("max_epochs"), std::string::npos);
    }
    EXPECT_THROW(o.set("limit_val_batches", 2.5), fulmen::Error);
    EXPECT_THROW(o.set("max_epochs", "three"), fulmen::Error);
    Trainer defaults;
    Trainer from_options(o);
    fulmen::TrainerOptions moved = fulmen::TrainerOptions().set("max_steps", 2);
    Trainer limited(moved);

    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 11);
    Loader loader(ds, 8);
    LightningModule module = full_module(model).build();
    Trainer by_steps(fulmen_test::quiet_options(100).set("max_steps", 5).set("logger", false));
    by_steps.fit(module, loader);
    EXPECT_EQ(by_steps.global_step(), 5);
    Trainer by_fraction(fulmen_test::quiet_options(1).set("limit_train_batches", 0.5).set("logger", false));
    by_fraction.fit(module, loader);
    EXPECT_EQ(by_fraction.global_step(), 4);
}

TEST_F(TrainerTest, TypedOptionSetters) {
    using namespace std::chrono_literals;
    fulmen::TrainerOptions o;
    o.max_epochs(3).max_time(90s).callback_timeout(std::nullopt).deterministic(false).ddp_timeout(2min);
    o.gradient_clip_val(0.5).gradient_clip_val(std::nullopt).fast_dev_run(false).precision("32-true");
    try {
        o.log_every_n_steps(0);
        ADD_FAILURE() << "log_every_n_steps 0 accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("log_every_n_steps"), std::string::npos);
    }
    EXPECT_THROW(o.limit_val_batches(2.5), fulmen::Error);
    EXPECT_THROW(o.max_time(-1s), fulmen::Error);

    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 11);
    Loader loader(ds, 8);
    LightningModule module = full_module(model).build();
    // An integer is a count of batches, a floating value a fraction.
    Trainer by_count(fulmen_test::quiet_options(1).limit_train_batches(1).logger(false));
    by_count.fit(module, loader);
    EXPECT_EQ(by_count.global_step(), 1);
    Trainer by_fraction(fulmen_test::quiet_options(1).limit_train_batches(0.25).logger(false));
    by_fraction.fit(module, loader);
    EXPECT_EQ(by_fraction.global_step(), 2);
    Trainer by_steps(fulmen_test::quiet_options(100).max_steps(3).max_epochs(std::nullopt).logger(false));
    by_steps.fit(module, loader);
    EXPECT_EQ(by_steps.global_step(), 3);
}

TEST_F(TrainerTest, ModuleFromAnotherTranslationUnit) {
    int freed = 0;
    {
        Model model = fulmen_test::mlp();
        Dataset ds = fulmen_test::blobs(64, 12);
        Loader loader(ds, 16, true);
        LightningModule module = fulmen_test::module_from_second_tu(model, &freed);
        Trainer trainer(fulmen_test::quiet_options(5).set("logger", false));
        trainer.fit(module, loader, loader);
        EXPECT_GT(trainer.callback_metric("val_acc"), 0.9);
    }
    EXPECT_EQ(freed, 1);
}

TEST_F(TrainerTest, VersionAndThreads) {
    EXPECT_EQ(fulmen::version(), FULMEN_VERSION_STRING);
    EXPECT_FALSE(fulmen::libtorch_version().empty());
    int32_t before = fulmen::num_threads();
    fulmen::set_num_threads(1);
    EXPECT_EQ(fulmen::num_threads(), 1);
    fulmen::set_num_threads(before);
    EXPECT_THROW(fulmen::set_num_threads(0), fulmen::Error);
}

TEST_F(TrainerTest, AbiCheck) {
    EXPECT_TRUE(fulmen::detail::abi_startup_check);
    EXPECT_NO_THROW(fulmen::check_abi());
    EXPECT_EQ(fulmen::abi_version(), static_cast<uint32_t>(FULMEN_ABI_VERSION));
    try {
        fulmen::check(fulmen_abi_check(FULMEN_ABI_VERSION + 1000));
        FAIL() << "a header of the next series was accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_UNSUPPORTED);
        EXPECT_NE(std::string(e.what()).find("the ABIs differ"), std::string::npos) << e.what();
    }
}

TEST_F(TrainerTest, PredictBatchesAsLightningsList) {
    Dataset ds = fulmen_test::blobs(10, 2);
    Loader loader(ds, 4);
    Model model = fulmen_test::mlp();
    LightningModule module = full_module(model)
                                 .predict_step([&model](StepContext& ctx, const Batch& batch) -> std::optional<Tensor> {
                                     ctx.add_prediction(batch[0]);
                                     return model.forward(batch[0]);
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    fulmen::Value out = trainer.predict_batches(module, {&loader});
    ASSERT_EQ(out.kind(), fulmen::ValueKind::List);
    ASSERT_EQ(out.size(), 3u);
    fulmen::Value last = out[2];
    ASSERT_EQ(last.kind(), fulmen::ValueKind::Tuple);
    EXPECT_EQ(last[0].to_tensor().shape(), (fulmen::Shape{2, 2}));
    EXPECT_EQ(last[1].to_tensor().shape(), (fulmen::Shape{2, 2}));
    fulmen::Value none = trainer.predict_batches(module, {&loader}, false);
    EXPECT_FALSE(static_cast<bool>(none));
}

// A module whose prediction is the dict {"logits": model(x), "input": x}
// (adding an unnamed one, or a name twice, throws).
static LightningModule named_predictions(Model& model) {
    return full_module(model)
        .predict_step([&model](StepContext& ctx, const Batch& batch) -> std::optional<Tensor> {
            ctx.add_prediction("logits", model.forward(batch[0]));
            ctx.add_prediction("input", batch[0]);
            EXPECT_THROW(ctx.add_prediction(batch[0]), fulmen::Error);
            EXPECT_THROW(ctx.add_prediction("input", batch[0]), fulmen::Error);
            return std::nullopt;
        })
        .build();
}

TEST_F(TrainerTest, PredictBatchesNamedAreDicts) {
    Dataset ds = fulmen_test::blobs(10, 2);
    Loader loader(ds, 4);
    Model model = fulmen_test::mlp();
    LightningModule module = named_predictions(model);
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    fulmen::Value out = trainer.predict_batches(module, {&loader});
    ASSERT_EQ(out.size(), 3u);
    fulmen::Value last = out[2];
    ASSERT_EQ(last.kind(), fulmen::ValueKind::Dict);
    ASSERT_EQ(last.size(), 2u);
    EXPECT_EQ(last.entry(0).first.to_string(), "logits");
    EXPECT_EQ(last.at("input").to_tensor().shape(), (fulmen::Shape{2, 2}));
}

// A prediction set whole, nested: {"logits": model(x), "meta": (x, "tag")}
// comes back as it was set.
TEST_F(TrainerTest, PredictBatchesNestedValues) {
    Dataset ds = fulmen_test::blobs(10, 2);
    Loader loader(ds, 4);
    Model model = fulmen_test::mlp();
    LightningModule module =
        full_module(model)
            .predict_step([&model](StepContext& ctx, const Batch& batch) -> std::optional<Tensor> {
                fulmen::Value x = fulmen::Value::of_tensor(batch[0]), tag = fulmen::Value::of_string("tag");
                fulmen::Value meta = fulmen::Value::tuple({&x, &tag});
                fulmen::Value logits = fulmen::Value::of_tensor(model.forward(batch[0]));
                fulmen::Value whole = fulmen::Value::dict({{"logits", &logits}, {"meta", &meta}});
                ctx.set_prediction(whole);
                EXPECT_THROW(ctx.add_prediction(batch[0]), fulmen::Error);
                return std::nullopt;
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    fulmen::Value out = trainer.predict_batches(module, {&loader});
    ASSERT_EQ(out.size(), 3u);
    fulmen::Value meta = out[2].at("meta");
    ASSERT_EQ(meta.kind(), fulmen::ValueKind::Tuple);
    EXPECT_EQ(meta[0].to_tensor().shape(), (fulmen::Shape{2, 2}));
    EXPECT_EQ(meta[1].to_string(), "tag");
    EXPECT_EQ(out[0].at("logits").to_tensor().shape(), (fulmen::Shape{4, 2}));
}

TEST_F(TrainerTest, NamedPredictionsReachTheHookAndTheValueWriter) {
    Dataset ds = fulmen_test::blobs(10, 2);
    Loader loader(ds, 4);
    Model model = fulmen_test::mlp();
    LightningModule module = named_predictions(model);
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    std::vector<int64_t> hook_rows, writer_rows;
    size_t epoch_batches = 0;
    trainer.add_callback("Seeing", [&](fulmen::Hook hook, fulmen::HookContext& ctx) {
        if (hook == fulmen::Hook::PredictBatchStart) {
            EXPECT_THROW(ctx.prediction(), fulmen::Error);
        }
        if (hook != fulmen::Hook::PredictBatchEnd) return;
        fulmen::Value p = ctx.prediction();
        ASSERT_EQ(p.kind(), fulmen::ValueKind::Dict);
        hook_rows.push_back(p.at("logits").to_tensor().shape()[0]);
        EXPECT_FALSE(ctx.output().has_value());  // a dict has no one tensor
    });
    trainer.add_prediction_value_writer(
        "batch_and_epoch",
        [&](const fulmen::BatchPredictionValue& p) {
            ASSERT_EQ(p.prediction.kind(), fulmen::ValueKind::Dict);
            EXPECT_EQ(p.prediction.entry(1).first.to_string(), "input");
            writer_rows.push_back(p.prediction.at("input").to_tensor().shape()[0]);
            EXPECT_EQ(p.batch_indices.size(), static_cast<size_t>(writer_rows.back()));
        },
        [&](const fulmen::EpochPredictionValues& e) {
            epoch_batches = e.predictions.size();
            for (const fulmen::Value& v : e.predictions) EXPECT_EQ(v.kind(), fulmen::ValueKind::Dict);
            EXPECT_EQ(e.batch_indices.size(), e.predictions.size());
        });
    trainer.predict_batches(module, {&loader}, false);
    EXPECT_EQ(hook_rows, (std::vector<int64_t>{4, 4, 2}));
    EXPECT_EQ(writer_rows, (std::vector<int64_t>{4, 4, 2}));
    EXPECT_EQ(epoch_batches, 3u);
}

TEST_F(TrainerTest, ThroughputMonitorWithFlops) {
    Trainer trainer(fulmen_test::quiet_options(1));
    trainer.add_throughput_monitor_flops(1e9, fulmen::available_flops("NVIDIA A100-SXM4-40GB", "bfloat16"));
    EXPECT_EQ(fulmen::available_flops("NVIDIA A100-SXM4-40GB", "bfloat16"), 312e12);
    EXPECT_EQ(fulmen::available_flops("cpu", "float32"), 0.0);
    EXPECT_THROW(trainer.add_throughput_monitor_flops(-1.0), fulmen::Error);
}

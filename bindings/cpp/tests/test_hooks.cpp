// Hooks (callbacks from lambdas and classes, LightningModule hooks), the
// built-in callbacks (ModelCheckpoint, EarlyStopping, LR monitor, Timer),
// checkpoint resume, host loggers, hyperparameters and the model summary.
#include "common.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using fulmen::Batch;
using fulmen::Callback;
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
using fulmen_test::FulmenTest;

namespace {

Tensor batch_loss(const Model& model, const Batch& batch) {
    return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
}

/// A module with training and validation steps (logging train_loss and
/// val_loss) and SGD(lr).
LightningModule::Builder simple_module(const Model& model, double lr = 0.1) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext& ctx, const Batch& batch) {
            Tensor loss = batch_loss(model, batch);
            ctx.log("train_loss", loss.item(), fulmen::Log::on_step | fulmen::Log::on_epoch);
            return loss;
        })
        .validation_step([&model](StepContext& ctx, const Batch& batch) {
            ctx.log("val_loss", batch_loss(model, batch).item(), fulmen::Log::on_epoch);
        })
        .test_step([&model](StepContext& ctx, const Batch& batch) { ctx.log("test_loss", batch_loss(model, batch).item()); })
        .predict_step([&model](StepContext&, const Batch& batch) -> std::optional<Tensor> { return model.forward(batch[0]); })
        .configure_optimizers([&model, lr](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, fulmen::SgdOptions(lr)));
        });
}

/// Counts destructor calls.
struct DestructionCounter {
    explicit DestructionCounter(int* count) : count_(count) {}
    DestructionCounter(const DestructionCounter&) = delete;
    DestructionCounter& operator=(const DestructionCounter&) = delete;
    ~DestructionCounter() { ++*count_; }
    int* count_;
};

std::vector<std::string> names(std::initializer_list<Hook> hooks) {
    std::vector<std::string> out;
    for (Hook h : hooks) out.emplace_back(fulmen::hook_name(h));
    return out;
}

/// Quiet options without loggers or checkpoints, under the scratch folder.
fulmen::TrainerOptions bare_options(int64_t epochs) {
    return fulmen_test::quiet_options(epochs).set("logger", false).set("enable_checkpointing", false);
}

}  // namespace

class HookTest : public FulmenTest {};

TEST_F(HookTest, HookNames) {
    EXPECT_EQ(fulmen::hook_name(Hook::Setup), "setup");
    EXPECT_EQ(fulmen::hook_name(Hook::TrainEpochEnd), "on_train_epoch_end");
    EXPECT_EQ(fulmen::hook_name(Hook::BeforeOptimizerStep), "on_before_optimizer_step");
    EXPECT_EQ(fulmen::hook_name(Hook::Exception), "on_exception");
    EXPECT_EQ(fulmen::hook_name(static_cast<Hook>(99)), "");
}

TEST_F(HookTest, LambdaCallbackSeesHooksInLightningOrder) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(16, 1);
    Dataset val_ds = fulmen_test::blobs(8, 2);
    Loader train(train_ds, 8);  // 2 batches
    Loader val(val_ds, 8);      // 1 batch
    std::vector<std::string> seen;           // the callback's hooks
    std::vector<std::string> interleaved;    // callback and module, as called
    std::vector<int64_t> batch_end_idx;
    std::vector<double> batch_end_loss;
    int64_t steps_at_train_end = -1;
    std::string stage;
    LightningModule module = simple_module(model)
                                 .on_hook([&](Hook h, HookContext&) {
                                     interleaved.push_back("module:" + std::string(fulmen::hook_name(h)));
                                 })
                                 .build();
    Trainer trainer(bare_options(1));
    trainer.add_callback("recorder", [&](Hook h, HookContext& ctx) {
        seen.emplace_back(fulmen::hook_name(h));
        interleaved.push_back("callback:" + std::string(fulmen::hook_name(h)));
        EXPECT_EQ(ctx.hook(), h);
        stage = ctx.stage();
        switch (h) {
            case Hook::TrainBatchEnd: {
                batch_end_idx.push_back(ctx.batch_idx());
                EXPECT_EQ(ctx.batch_size(), 2u);
                EXPECT_EQ(ctx.batch(0).shape(), (fulmen::Shape{8, 2}));
                std::optional<Tensor> loss = ctx.output();
                ASSERT_TRUE(loss.has_value());
                batch_end_loss.push_back(loss->item());
                EXPECT_EQ(ctx.metric("train_loss_step"), loss->item());
                break;
            }
            case Hook::TrainEpochStart:
                EXPECT_EQ(ctx.batch_idx(), -1);
                EXPECT_EQ(ctx.batch_size(), 0u);
                EXPECT_FALSE(ctx.output().has_value());
                EXPECT_THROW(ctx.batch(0), fulmen::Error);
                EXPECT_EQ(ctx.epoch(), 0);
                break;
            case Hook::TrainEnd: {
                steps_at_train_end = ctx.global_step();
                fulmen::TrainerView v = ctx.trainer();
                EXPECT_EQ(v.global_step, steps_at_train_end);
                EXPECT_GT(v.num_training_batches, 0);
                EXPECT_EQ(v.world_size, 1);
                EXPECT_TRUE(v.is_global_zero);
                EXPECT_FALSE(v.sanity_checking);
                break;
            }
            case Hook::FitStart:
                try {
                    ctx.checkpoint_set("k", "v");
                    ADD_FAILURE() << "checkpoint_set outside on_save_checkpoint";
                } catch (const fulmen::Error& e) {
                    EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
                }
                EXPECT_THROW(ctx.exception_message(), fulmen::Error);
                EXPECT_FALSE(ctx.find_metric("val_loss").has_value());
                break;
            default:
                break;
        }
    });
    trainer.fit(module, train, val);

    const std::vector<std::string> validation = names({Hook::ValidationStart, Hook::ValidationEpochStart,
                                                       Hook::ValidationBatchStart, Hook::ValidationBatchEnd,
                                                       Hook::ValidationEpochEnd, Hook::ValidationEnd});
    const std::vector<std::string> batch = names({Hook::TrainBatchStart, Hook::BeforeZeroGrad, Hook::BeforeBackward,
                                                  Hook::AfterBackward, Hook::BeforeOptimizerStep, Hook::TrainBatchEnd});
    std::vector<std::string> expected = names({Hook::Setup, Hook::FitStart, Hook::SanityCheckStart});
    expected.insert(expected.end(), validation.begin(), validation.end());
    for (const std::string& h : names({Hook::SanityCheckEnd, Hook::TrainStart, Hook::TrainEpochStart})) expected.push_back(h);
    expected.insert(expected.end(), batch.begin(), batch.end());
    expected.insert(expected.end(), batch.begin(), batch.end());
    expected.insert(expected.end(), validation.begin(), validation.end());
    for (const std::string& h : names({Hook::TrainEpochEnd, Hook::TrainEnd, Hook::FitEnd, Hook::Teardown})) {
        expected.push_back(h);
    }
    EXPECT_EQ(seen, expected);

    // every hook reaches the callback first, then the module
    ASSERT_EQ(interleaved.size(), 2 * expected.size());
    for (size_t i = 0; i < expected.size(); i++) {
        EXPECT_EQ(interleaved[2 * i], "callback:" + expected[i]);
        EXPECT_EQ(interleaved[2 * i + 1], "module:" + expected[i]);
    }
    EXPECT_EQ(batch_end_idx, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(batch_end_loss.size(), 2u);
    EXPECT_EQ(steps_at_train_end, 2);
    EXPECT_EQ(stage, "fit");

    // test and predict run their own hooks
    seen.clear();
    trainer.test(module, val);
    EXPECT_EQ(seen, names({Hook::Setup, Hook::TestStart, Hook::TestEpochStart, Hook::TestBatchStart,
                           Hook::TestBatchEnd, Hook::TestEpochEnd, Hook::TestEnd, Hook::Teardown}));
    EXPECT_EQ(stage, "test");
    seen.clear();
    EXPECT_TRUE(trainer.predict(module, val).has_value());
    EXPECT_EQ(std::count(seen.begin(), seen.end(), "on_predict_batch_end"), 1);
    EXPECT_EQ(stage, "predict");
}

// skip_rest_of_epoch from the module's on_train_batch_start is Lightning's
// `return -1`: the batch is not trained on, the epoch ends there and the
// next one runs in full; other hooks and callbacks are refused.
TEST_F(HookTest, ModuleSkipsTheRestOfAnEpoch) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 4);
    Loader train(ds, 8);  // 4 batches
    int starts = 0, refused = 0, callback_refused = 0;
    LightningModule module = simple_module(model)
                                 .on_hook([&](Hook h, HookContext& ctx) {
                                     if (h == Hook::TrainBatchStart) {
                                         starts++;
                                         if (ctx.epoch() == 0 && ctx.batch_idx() == 1) ctx.skip_rest_of_epoch();
                                     } else if (h == Hook::TrainEpochEnd) {
                                         EXPECT_EQ(fulmen_test::error_code([&] { ctx.skip_rest_of_epoch(); }),
                                                   FULMEN_CODE_INVALID_STATE);
                                         refused++;
                                     }
                                 })
                                 .build();
    Trainer trainer(bare_options(2));
    trainer.add_callback("skipper", [&](Hook h, HookContext& ctx) {
        if (h != Hook::TrainBatchStart) return;
        EXPECT_EQ(fulmen_test::error_code([&] { ctx.skip_rest_of_epoch(); }), FULMEN_CODE_INVALID_STATE);
        callback_refused++;
    });
    trainer.fit(module, train);
    // Epoch 0 trains batch 0 and stops at batch 1; epoch 1 trains all 4.
    EXPECT_EQ(trainer.global_step(), 5);
    EXPECT_EQ(starts, 6);
    EXPECT_EQ(refused, 2);
    EXPECT_EQ(callback_refused, 6);
}

TEST_F(HookTest, CallbackClassWithVirtualOnHook) {
    struct StopAtStep : Callback {
        explicit StopAtStep(int64_t step, int* destroyed) : step_(step), counter_(destroyed) {}
        void on_hook(Hook hook, HookContext& ctx) override {
            if (hook == Hook::TrainBatchEnd && ctx.global_step() >= step_) ctx.request_stop();
        }
        int64_t step_;
        DestructionCounter counter_;
    };
    int destroyed = 0;
    {
        Model model = fulmen_test::mlp();
        Dataset ds = fulmen_test::blobs(64, 3);
        Loader train(ds, 8);
        LightningModule module = simple_module(model).build();
        Trainer trainer(bare_options(10));
        trainer.add_callback("stop_at_3", std::make_unique<StopAtStep>(3, &destroyed));
        trainer.fit(module, train);
        EXPECT_EQ(trainer.global_step(), 3);
        EXPECT_EQ(destroyed, 0);
    }
    EXPECT_EQ(destroyed, 1);  // the trainer destroyed the callback, once

    // a callback refused by fulmen is destroyed once, by the binding
    destroyed = 0;
    {
        Trainer trainer(bare_options(1));
        try {
            trainer.add_callback("", std::make_unique<StopAtStep>(1, &destroyed));
            ADD_FAILURE() << "a callback without a name was added";
        } catch (const fulmen::Error& e) {
            EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        }
        EXPECT_EQ(destroyed, 1);
        EXPECT_THROW(trainer.add_callback("null", std::unique_ptr<Callback>()), fulmen::Error);
    }
    EXPECT_EQ(destroyed, 1);
}

TEST_F(HookTest, ExceptionInAHookComesBackFromFit) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 4);
    Loader train(ds, 8);
    std::string failure;
    int exception_hooks = 0;
    {
        LightningModule module = simple_module(model).build();
        Trainer trainer(bare_options(3));
        trainer.add_callback("thrower", [](Hook h, HookContext& ctx) {
            if (h == Hook::TrainEpochEnd && ctx.epoch() == 1) throw std::logic_error("epoch 1 is cursed");
        });
        trainer.add_callback("watcher", [&](Hook h, HookContext& ctx) {
            if (h != Hook::Exception) return;
            exception_hooks++;
            failure = ctx.exception_message();
            throw std::runtime_error("on_exception fails too");  // dropped: the original is reported
        });
        try {
            trainer.fit(module, train);
            ADD_FAILURE() << "fit succeeded";
        } catch (const std::logic_error& e) {
            EXPECT_STREQ(e.what(), "epoch 1 is cursed");
        }
        EXPECT_EQ(exception_hooks, 1);
        EXPECT_NE(failure.find("epoch 1 is cursed"), std::string::npos) << failure;
        EXPECT_EQ(trainer.global_step(), 8);  // two epochs of 4 steps completed
    }
    // the module's hooks too, with a fulmen::Error's code kept
    LightningModule module = simple_module(model)
                                 .on_hook([](Hook h, HookContext&) {
                                     if (h == Hook::BeforeOptimizerStep) throw fulmen::Error(FULMEN_CODE_IO, "disk full");
                                 })
                                 .build();
    Trainer trainer(bare_options(1));
    try {
        trainer.fit(module, train);
        ADD_FAILURE() << "fit succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_IO);
        EXPECT_STREQ(e.what(), "disk full");
    }
    EXPECT_EQ(trainer.global_step(), 0);
    // a failure inside fulmen stays a fulmen::Error even when on_exception throws
    LightningModule no_optim = LightningModule::builder(model)
                                   .training_step([&](StepContext&, const Batch& b) { return batch_loss(model, b); })
                                   .on_hook([](Hook h, HookContext&) {
                                       if (h == Hook::Exception) throw std::runtime_error("ignored");
                                   })
                                   .build();
    try {
        trainer.fit(no_optim, train);
        ADD_FAILURE() << "fit without configure_optimizers succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
    }
}

TEST_F(HookTest, ModelCheckpointBestAndLastExistOnDisk) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(64, 5);
    Dataset val_ds = fulmen_test::blobs(32, 6);
    Loader train(train_ds, 16, true, 1);
    Loader val(val_ds, 16);
    LightningModule module = simple_module(model).build();
    const std::string dir = fulmen_test::fresh_dir("ckpt-best-last");
    fulmen::ModelCheckpointOptions ck("val_loss");
    ck.dirpath = dir;
    ck.filename = "{epoch}-{val_loss:.3f}";
    ck.save_last = true;
    ck.save_top_k = 2;
    Trainer trainer(bare_options(3));
    trainer.add_model_checkpoint(ck);
    try {
        trainer.best_model_path();
        ADD_FAILURE() << "a best path before fit";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
    }
    EXPECT_THROW(trainer.best_model_score(), fulmen::Error);
    trainer.fit(module, train, val);

    const std::string best = trainer.best_model_path();
    const std::string last = trainer.last_model_path();
    EXPECT_EQ(best, trainer.checkpoint_path(fulmen::CheckpointPath::Best));
    EXPECT_TRUE(std::filesystem::is_regular_file(best)) << best;
    EXPECT_TRUE(std::filesystem::is_regular_file(last)) << last;
    EXPECT_EQ(std::filesystem::path(best).parent_path(), std::filesystem::path(dir));
    EXPECT_EQ(std::filesystem::path(last).filename(), "last.ckpt");
    EXPECT_NE(best.find("val_loss="), std::string::npos) << best;
    size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.path().extension() == ".ckpt";
    EXPECT_EQ(files, 3u);  // top 2 and last.ckpt
    const double score = trainer.best_model_score();
    EXPECT_LE(score, trainer.callback_metric("val_loss") + 1e-9);  // lower is better, and this is the best

    // "best" loads those weights for evaluation
    trainer.validate(module, val, "best");
    EXPECT_NEAR(trainer.callback_metric("val_loss"), score, 1e-6);
    trainer.test(module, val, last);
    EXPECT_TRUE(trainer.predict(module, val, std::string("best")).has_value());
    try {
        trainer.validate(module, val, dir + "/missing.ckpt");
        ADD_FAILURE() << "a missing checkpoint loaded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_IO);
    }
    EXPECT_THROW(trainer.add_model_checkpoint(fulmen::ModelCheckpointOptions("val_loss", static_cast<fulmen::Mode>(7))),
                 fulmen::Error);
}

TEST_F(HookTest, FitFromTheLastCheckpointResumes) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(64, 7);
    Loader train(train_ds, 16, true, 2);  // 4 steps an epoch
    LightningModule module = simple_module(model).build();
    const std::string root = fulmen_test::fresh_dir("resume");
    auto options = [&](int64_t epochs) {
        return fulmen_test::quiet_options(epochs).set("default_root_dir", root).set("logger", false);
    };
    std::string saved_note, loaded_note;
    auto notes = [&](Hook h, HookContext& ctx) {
        if (h == Hook::SaveCheckpoint) ctx.checkpoint_set("note", "step " + std::to_string(ctx.global_step()));
        if (h == Hook::LoadCheckpoint) {
            loaded_note = ctx.checkpoint_get("note");
            EXPECT_THROW(ctx.checkpoint_get("absent"), fulmen::Error);
        }
    };

    std::string last;
    {
        Trainer first(options(2));
        fulmen::ModelCheckpointOptions ck;
        ck.save_last = true;
        first.add_model_checkpoint(ck);
        first.add_callback("notes", notes);
        first.fit(module, train);
        EXPECT_EQ(first.global_step(), 8);
        last = first.last_model_path();
        EXPECT_TRUE(std::filesystem::is_regular_file(last)) << last;
    }
    EXPECT_TRUE(loaded_note.empty());

    int64_t step_at_train_start = -1;
    int64_t first_epoch = -1;
    Trainer second(options(4));
    second.add_callback("notes", notes);
    second.add_callback("probe", [&](Hook h, HookContext& ctx) {
        if (h == Hook::TrainStart) step_at_train_start = ctx.global_step();
        if (h == Hook::TrainEpochStart && first_epoch < 0) first_epoch = ctx.epoch();
    });
    second.fit(module, train, last);
    EXPECT_EQ(step_at_train_start, 8);  // global_step continues
    EXPECT_EQ(first_epoch, 2);
    EXPECT_EQ(second.global_step(), 16);
    EXPECT_EQ(second.current_epoch(), 4);
    EXPECT_EQ(loaded_note, "step 8");

    // "last" finds the newest checkpoint of the root dir
    Trainer third(options(5));
    third.fit(module, train, "last");
    EXPECT_EQ(third.global_step(), 20);
    Trainer fourth(options(1));
    try {
        fourth.fit(module, train, "best");  // this trainer has no previous fit
        ADD_FAILURE() << "\"best\" without a previous fit";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
    }
}

TEST_F(HookTest, AHookSavesCheckpointsAndFitResumesFromThem) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(64, 7);
    Loader train(train_ds, 16, true, 2);  // 4 steps an epoch
    LightningModule module = simple_module(model).build();
    const std::string root = fulmen_test::fresh_dir("host-save");
    auto options = [&](int64_t epochs) {
        return fulmen_test::quiet_options(epochs).set("default_root_dir", root).set("logger", false);
    };
    int refused = 0;
    Trainer first(options(2));
    first.add_callback("saver", [&](Hook h, HookContext& ctx) {
        if (h == Hook::TrainEpochEnd) ctx.save_checkpoint(root + "/epoch-" + std::to_string(ctx.epoch()) + ".ckpt");
        if (h == Hook::SaveCheckpoint) {
            try {
                ctx.save_checkpoint(root + "/never.ckpt");
            } catch (const fulmen::Error& e) {
                refused += e.code() == FULMEN_CODE_INVALID_STATE;
            }
        }
    });
    first.fit(module, train);
    EXPECT_TRUE(std::filesystem::is_regular_file(root + "/epoch-0.ckpt"));
    EXPECT_TRUE(std::filesystem::is_regular_file(root + "/epoch-1.ckpt"));
    EXPECT_FALSE(std::filesystem::exists(root + "/never.ckpt"));
    EXPECT_GE(refused, 2);
    Trainer second(options(2));
    second.fit(module, train, root + "/epoch-0.ckpt");
    EXPECT_EQ(second.global_step(), 8);  // resumed after epoch 0: one more epoch
}

TEST_F(HookTest, AnEpochEndHookLogsWhatModelCheckpointMonitors) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(64, 7);
    Loader train(train_ds, 16, true, 2);
    LightningModule module = simple_module(model).build();
    const std::string root = fulmen_test::fresh_dir("hook-log");
    Trainer trainer(fulmen_test::quiet_options(3).set("default_root_dir", root).set("logger", false));
    const double scores[3] = {0.2, 0.6, 0.4};
    trainer.add_callback("scorer", [&](Hook h, HookContext& ctx) {
        if (h == Hook::TrainEpochEnd) ctx.log("f1", scores[ctx.epoch()]);
        // Lightning forbids logging in on_fit_start (on_train_batch_end may log).
        if (h == Hook::FitStart) {
            EXPECT_THROW(ctx.log("f1", 1.0), fulmen::Error);
        }
    });
    fulmen::ModelCheckpointOptions ck("f1", fulmen::Mode::Max);
    trainer.add_model_checkpoint(ck);
    trainer.fit(module, train);
    EXPECT_DOUBLE_EQ(trainer.best_model_score(), 0.6);
    EXPECT_DOUBLE_EQ(trainer.callback_metric("f1"), 0.4);
}

TEST_F(HookTest, ConfigureOptimizersSeesTheRunLength) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(64, 7);
    Loader train(train_ds, 16, true, 2);  // 4 batches an epoch
    std::optional<int64_t> seen;
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&model](StepContext&, const Batch& batch) { return batch_loss(model, batch); })
                                 .configure_optimizers([&](OptimizerConfig& config) {
                                     seen = config.estimated_stepping_batches();
                                     Optimizer opt = Optimizer::sgd(model, fulmen::SgdOptions(0.1));
                                     fulmen::Scheduler s = fulmen::Scheduler::one_cycle_lr(opt, fulmen::OneCycleOptions(0.1, *seen));
                                     config.add(std::move(opt), std::move(s), fulmen::Interval::Step);
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(2).set("logger", false).set("max_steps", 5));
    trainer.fit(module, train);
    ASSERT_TRUE(seen.has_value());
    EXPECT_EQ(*seen, 5);  // min(4 * 2, max_steps 5)
    EXPECT_EQ(trainer.global_step(), 5);
}

TEST_F(HookTest, EarlyStoppingStopsEarly) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 8);
    Loader train(ds, 8);
    Loader val(ds, 16);
    LightningModule module = simple_module(model)
                                 .validation_step([](StepContext& ctx, const Batch&) {
                                     ctx.log("plateau", 1.0, fulmen::Log::on_epoch);  // never improves
                                 })
                                 .build();
    Trainer trainer(bare_options(50));
    fulmen::EarlyStoppingOptions es("plateau");
    es.patience = 2;
    trainer.add_early_stopping(es);
    trainer.fit(module, train, val);
    EXPECT_EQ(trainer.current_epoch(), 3);  // first check sets the best, two more without improvement
    EXPECT_EQ(trainer.global_step(), 12);

    // a missing monitor is an error when strict
    Trainer strict(bare_options(5));
    strict.add_early_stopping(fulmen::EarlyStoppingOptions("not_logged"));
    EXPECT_THROW(strict.fit(module, train, val), fulmen::Error);
    // a threshold stops at once
    fulmen::EarlyStoppingOptions reached("plateau", fulmen::Mode::Max);
    reached.stopping_threshold = 0.5;
    Trainer quick(bare_options(50));
    quick.add_early_stopping(reached);
    quick.fit(module, train, val);
    EXPECT_EQ(quick.current_epoch(), 1);
    EXPECT_THROW(Trainer().add_early_stopping(fulmen::EarlyStoppingOptions("")), fulmen::Error);
}

TEST_F(HookTest, LoggerLambdasReceiveMetricsAndHyperparameters) {
    int destroyed = 0;
    std::vector<std::map<std::string, double>> logged;
    std::vector<int64_t> steps;
    std::map<std::string, std::string> hparams;
    std::vector<std::string> statuses;
    {
        Model model = fulmen_test::mlp();
        Dataset ds = fulmen_test::blobs(32, 9);
        Loader train(ds, 8);
        Loader val(ds, 16);
        LightningModule module = simple_module(model).build();
        module.set_hparam("lr", 0.1).set_hparam("layers", "2-16-2").set_hparam("batch_size", 8).set_hparam("shuffle", false);
        module.set_hparam("a: b", "x\ny");  // any UTF-8 key and value is kept exactly
        try {
            module.set_hparam("bad\xff", "x");
            ADD_FAILURE() << "a hyperparameter name that is not UTF-8 accepted";
        } catch (const fulmen::Error& e) {
            EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        }
        // On the CPU: the device stats checked below are the CPU's.
        Trainer trainer(bare_options(2).set("log_every_n_steps", 1).set("accelerator", "cpu"));
        auto counter = std::make_shared<DestructionCounter>(&destroyed);
        fulmen::Logger logger;
        logger.log_metrics = [&, counter](const std::map<std::string, double>& m, int64_t, int64_t step) {
            logged.push_back(m);
            steps.push_back(step);
        };
        logger.log_hyperparams = [&](const std::map<std::string, std::string>& h) { hparams = h; };
        logger.finalize = [&](const std::string& status) { statuses.push_back(status); };
        trainer.add_logger(std::move(logger));
        counter.reset();
        trainer.add_lr_monitor("epoch", false, true).add_device_stats_monitor().add_throughput_monitor(2);
        trainer.fit(module, train, val);

        EXPECT_EQ(hparams, (std::map<std::string, std::string>{{"a: b", "x\ny"},
                                                               {"batch_size", "8"},
                                                               {"layers", "2-16-2"},
                                                               {"lr", "0.1"},
                                                               {"shuffle", "false"}}));
        EXPECT_EQ(statuses, (std::vector<std::string>{"success"}));
        auto has = [&](const std::string& name) {
            return std::any_of(logged.begin(), logged.end(), [&](const auto& m) { return m.count(name) > 0; });
        };
        EXPECT_TRUE(has("train_loss_step"));
        EXPECT_TRUE(has("train_loss_epoch"));
        EXPECT_TRUE(has("val_loss"));
        EXPECT_TRUE(has("lr-SGD"));
        EXPECT_TRUE(has("lr-SGD-weight_decay"));
        EXPECT_TRUE(has("DeviceStatsMonitor.on_train_batch_end/cpu_percent"));
        EXPECT_TRUE(has("train/device/samples_per_sec"));
        EXPECT_FALSE(has("lr-SGD-momentum"));
        EXPECT_EQ(*std::max_element(steps.begin(), steps.end()), 7);
        for (const auto& m : logged) {
            if (m.count("lr-SGD") != 0) {
                EXPECT_DOUBLE_EQ(m.at("lr-SGD"), 0.1);
            }
        }

        // validate / test metrics reach it too
        logged.clear();
        trainer.test(module, val);
        EXPECT_TRUE(has("test_loss"));
        EXPECT_EQ(destroyed, 0);

        // an exception in the logger comes back from fit; the failed
        // run's finalize is still called
        Trainer failing(bare_options(1));
        fulmen::Logger bad;
        bad.log_metrics = [](const std::map<std::string, double>&, int64_t, int64_t) {
            throw std::length_error("metrics sink full");
        };
        bad.finalize = [&](const std::string& status) {
            statuses.push_back(status);
            throw std::runtime_error("dropped");
        };
        failing.add_logger(std::move(bad));
        EXPECT_THROW(failing.fit(module, train, val), std::length_error);
        EXPECT_EQ(statuses.back(), "failed");
    }
    EXPECT_EQ(destroyed, 1);
}

TEST_F(HookTest, TimerAndLrMonitorOptions) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 10);
    Loader train(ds, 8);
    LightningModule module = simple_module(model).build();
    Trainer timed(bare_options(100));
    timed.add_timer(std::string("00:00:00:00"), "step");
    timed.fit(module, train);
    EXPECT_LE(timed.global_step(), 1);
    // As Lightning, a LearningRateMonitor needs a logger.
    Trainer unlogged(bare_options(1));
    unlogged.add_lr_monitor();
    EXPECT_THROW(unlogged.fit(module, train), fulmen::Error);
    Trainer measuring(fulmen_test::quiet_options(1));
    measuring.add_timer(std::nullopt).add_lr_monitor();
    measuring.fit(module, train);
    EXPECT_EQ(measuring.global_step(), 8);
    Trainer bad;
    EXPECT_THROW(bad.add_timer(std::string("soon")), fulmen::Error);
    EXPECT_THROW(bad.add_timer(std::string("5"), "fortnight"), fulmen::Error);
    EXPECT_THROW(bad.add_lr_monitor("hourly"), fulmen::Error);
}

TEST_F(HookTest, FloatOptionsAreFractionsIntegersAreCounts) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(16, 11);
    Dataset val_ds = fulmen_test::blobs(32, 12);
    Loader train(train_ds, 8);
    Loader val(val_ds, 8);  // 4 batches
    int val_steps = 0;
    LightningModule module = simple_module(model)
                                 .validation_step([&](StepContext&, const Batch&) { val_steps++; })
                                 .build();
    auto run = [&](fulmen::TrainerOptions options) {
        val_steps = 0;
        Trainer trainer(options.set("num_sanity_val_steps", 0));
        trainer.fit(module, train, val);
        return val_steps;
    };
    EXPECT_EQ(run(bare_options(1).set("limit_val_batches", 1)), 1);
    EXPECT_EQ(run(bare_options(1).set("limit_val_batches", 1.0)), 4);
    EXPECT_EQ(run(bare_options(1).set("limit_val_batches", 0.5)), 2);
    EXPECT_EQ(run(bare_options(1).set("limit_val_batches", 0.5f)), 2);
    // the sanity check runs num_sanity_val_steps batches before training
    val_steps = 0;
    Trainer sanity(bare_options(1));
    std::vector<Hook> sanity_hooks;
    sanity.add_callback("s", [&](Hook h, HookContext&) {
        if (h == Hook::SanityCheckStart || h == Hook::SanityCheckEnd) sanity_hooks.push_back(h);
    });
    sanity.fit(module, train, val);
    EXPECT_EQ(val_steps, 2 + 4);
    EXPECT_EQ(sanity_hooks, (std::vector<Hook>{Hook::SanityCheckStart, Hook::SanityCheckEnd}));
}

TEST_F(HookTest, DefaultRootDirGetsLogsAndACheckpoint) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 13);
    Loader train(ds, 8);
    LightningModule module = simple_module(model).build();
    const std::string root = fulmen_test::fresh_dir("defaults");
    Trainer trainer(fulmen_test::quiet_options(1).set("default_root_dir", root));
    trainer.fit(module, train, train);
    const std::filesystem::path log_dir = trainer.log_dir();
    EXPECT_TRUE(std::filesystem::exists(log_dir / "metrics.csv"));
    EXPECT_TRUE(std::filesystem::exists(log_dir / "hparams.yaml"));
    const std::string best = trainer.best_model_path();  // the default ModelCheckpoint
    EXPECT_TRUE(std::filesystem::is_regular_file(best)) << best;
    EXPECT_EQ(best.rfind(root, 0), 0u) << best;
    Trainer csv_only(fulmen_test::quiet_options(1).set("default_root_dir", root).set("logger", "csv"));
    csv_only.fit(module, train);
}

TEST_F(HookTest, ModelSummaryText) {
    Model model = fulmen_test::mlp();
    const std::string text = model.summary();
    EXPECT_NE(text.find("Total params"), std::string::npos) << text;
    EXPECT_NE(text.find("Trainable params"), std::string::npos) << text;
    EXPECT_NE(text.find("Linear"), std::string::npos) << text;
    EXPECT_NE(text.find("82"), std::string::npos) << text;  // 2*16+16 + 16*2+2
    Model nested = Model::sequential({fulmen_test::mlp(), Model::linear(2, 2)});
    EXPECT_GT(nested.summary(2).size(), nested.summary(1).size());
}

// The LightningModule-only hooks reach the module's on_hook only once it
// overrides them; on_before_batch_transfer can replace the batch, and the
// optimizer hooks name their optimizer.
TEST_F(HookTest, OverriddenModuleHooksAndOptimizerIndex) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(16, 4);
    Loader train(ds, 8);  // 2 batches
    std::vector<std::string> module_hooks;
    std::vector<int64_t> optimizer_indices;
    std::vector<double> learning_rates;
    size_t replaced = 0;
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&](StepContext&, const Batch& batch) {
                                     if (batch.size() == 3) replaced++;
                                     return batch_loss(model, batch);
                                 })
                                 .validation_step([](StepContext&, const Batch&) {})
                                 .configure_optimizers([&model](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                 })
                                 .on_hook([&](Hook h, HookContext& ctx) {
                                     module_hooks.emplace_back(fulmen::hook_name(h));
                                     if (h == Hook::BeforeBatchTransfer) {
                                         Tensor x = ctx.batch(0), y = ctx.batch(1);
                                         Tensor marker = Tensor::full({1}, 7.0);
                                         ctx.set_batch({&x, &y, &marker});
                                     } else if (h == Hook::TrainBatchEnd) {
                                         EXPECT_EQ(ctx.optimizer_index(), -1);
                                         EXPECT_EQ(fulmen_test::error_code([&] { ctx.set_batch({}); }),
                                                   FULMEN_CODE_INVALID_STATE);
                                     }
                                 })
                                 .build();
    Trainer trainer(bare_options(1).set("num_sanity_val_steps", int64_t{0}));
    trainer.add_callback("optimizers", [&](Hook h, HookContext& ctx) {
        if (h == Hook::BeforeOptimizerStep || h == Hook::BeforeZeroGrad) optimizer_indices.push_back(ctx.optimizer_index());
        if (h != Hook::BeforeOptimizerStep) return;
        // The optimizer itself: its lr read, then halved for the next step.
        EXPECT_EQ(ctx.optimizer_count(), 1u);
        EXPECT_EQ(ctx.param_group_count(0), 1u);
        double lr = ctx.param_group(0, 0, "lr");
        learning_rates.push_back(lr);
        ctx.set_param_group(0, 0, "lr", lr / 2);
        EXPECT_EQ(fulmen_test::error_code([&] { ctx.param_group(1, 0, "lr"); }), FULMEN_CODE_OUT_OF_RANGE);
    });
    trainer.fit(module, train, train);
    EXPECT_EQ(learning_rates, std::vector<double>({0.1, 0.05}));
    // Not overridden: the module sees none of them.
    EXPECT_EQ(std::count(module_hooks.begin(), module_hooks.end(), "on_before_batch_transfer"), 0);
    EXPECT_EQ(replaced, 0u);
    EXPECT_EQ(optimizer_indices, std::vector<int64_t>({0, 0, 0, 0}));
    module.override_hook(Hook::BeforeBatchTransfer).override_hook(Hook::ValidationModelEval);
    EXPECT_EQ(fulmen_test::error_code([&] { module.override_hook(Hook::FitStart); }), FULMEN_CODE_INVALID_ARGUMENT);
    module_hooks.clear();
    trainer.set_max_epochs(2);  // the next fit goes on with epoch 1
    trainer.fit(module, train, train);
    EXPECT_EQ(replaced, 2u);
    // 2 training and 2 validation batches.
    EXPECT_EQ(std::count(module_hooks.begin(), module_hooks.end(), "on_before_batch_transfer"), 4);
    EXPECT_EQ(std::count(module_hooks.begin(), module_hooks.end(), "on_validation_model_eval"), 1);
    EXPECT_EQ(std::count(module_hooks.begin(), module_hooks.end(), "on_validation_model_train"), 0);
}

TEST_F(HookTest, ModelCheckpointLinkVersionsAndExceptionSave) {
    Model model = fulmen_test::mlp();
    Dataset train_ds = fulmen_test::blobs(32, 5);
    Loader train(train_ds, 8);
    LightningModule module = simple_module(model).build();
    fulmen::ModelCheckpointOptions defaults;
    EXPECT_TRUE(defaults.enable_version_counter);
    EXPECT_FALSE(defaults.save_last_link || defaults.save_on_exception);
    EXPECT_EQ(defaults.train_time_interval, 0.0);

    const std::string dir = fulmen_test::fresh_dir("ckpt-link");
    fulmen::ModelCheckpointOptions ck;
    ck.dirpath = dir;
    ck.save_last = true;
    ck.save_last_link = true;
    Trainer linked(bare_options(2));
    linked.add_model_checkpoint(ck);
    linked.fit(module, train);
    const std::filesystem::path last = std::filesystem::path(dir) / "last.ckpt";
    ASSERT_TRUE(std::filesystem::is_symlink(last));
    EXPECT_EQ(std::filesystem::read_symlink(last), std::filesystem::path("epoch=1-step=8.ckpt"));

    const std::string dir2 = fulmen_test::fresh_dir("ckpt-overwrite");
    fulmen::ModelCheckpointOptions fixed;
    fixed.dirpath = dir2;
    fixed.filename = "fixed";
    fixed.enable_version_counter = false;
    for (int i = 0; i < 2; i++) {
        Trainer again(bare_options(1));
        again.add_model_checkpoint(fixed);
        again.fit(module, train);
    }
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir2) / "fixed.ckpt"));
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir2) / "fixed-v1.ckpt"));

    fulmen::ModelCheckpointOptions timed;
    timed.train_time_interval = 1.0;
    timed.every_n_train_steps = 2;
    Trainer refused(bare_options(1));
    EXPECT_THROW(refused.add_model_checkpoint(timed), fulmen::Error);
}

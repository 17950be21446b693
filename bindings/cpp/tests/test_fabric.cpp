// Fabric-style pieces for host loops: AutocastScope (torch.autocast) and
// GradScaler (torch.amp.GradScaler) from C++.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
#include <string>
#include <vector>

using fulmen::AutocastScope;
using fulmen::DType;
using fulmen::GradScaler;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::Tensor;
using fulmen_test::FulmenTest;

class FabricTest : public FulmenTest {};

TEST_F(FabricTest, AutocastScopesRunOpsInTheirDtypeAndExitInnermostFirst) {
    Model model = fulmen_test::mlp();
    Tensor x = Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, {1, 2});
    {
        AutocastScope outer(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_BF16);
        EXPECT_EQ(model(x).dtype(), DType::BF16);  // linear layers autocast to bf16
        AutocastScope inner(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_BF16);
        EXPECT_EQ(fulmen_test::error_code([&] { outer.exit(); }), FULMEN_CODE_INVALID_STATE);
        inner.exit();
        outer.exit();
        EXPECT_EQ(model(x).dtype(), DType::F32);
    }
    EXPECT_EQ(fulmen_test::error_code([] { AutocastScope bad(FULMEN_DEVICE_TYPE_CPU, FULMEN_DTYPE_F32); }),
              FULMEN_CODE_DTYPE_MISMATCH);
}

TEST_F(FabricTest, GradScalerScalesStepsSkipsAndKeepsItsState) {
    Model model = fulmen_test::mlp();
    Optimizer opt = Optimizer::sgd(model, fulmen::SgdOptions(0.1));
    GradScaler scaler(8.0, 2.0, 0.5, 1);
    EXPECT_EQ(fulmen_test::error_code([&] { scaler.update(); }), FULMEN_CODE_INVALID_STATE);
    Tensor x = Tensor::from_vector(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f}, {2, 2});
    Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1});
    Tensor loss = fulmen::loss::cross_entropy(model(x), y);
    Tensor scaled = scaler.scale(loss);
    EXPECT_DOUBLE_EQ(scaled.item(), loss.item() * 8.0);
    scaled.backward();
    EXPECT_FALSE(scaler.unscale(opt));
    EXPECT_FALSE(scaler.step(opt));  // finite gradients: stepped
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 16.0);  // grows after growth_interval (1) good steps

    // An infinite loss: the step is skipped and the scale backs off.
    opt.zero_grad();
    Tensor worse = fulmen::loss::cross_entropy(model(x), y) * std::numeric_limits<double>::infinity();
    scaler.scale(worse).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 8.0);

    // The calls that do not read the finding back: skipped again, backs off.
    opt.zero_grad();
    scaler.scale(fulmen::loss::cross_entropy(model(x), y) * std::numeric_limits<double>::infinity()).backward();
    scaler.unscale_no_wait(opt);
    scaler.step_no_wait(opt);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 4.0);

    GradScaler other;
    other.load_state(scaler.state());
    EXPECT_EQ(other.get_scale(), 4.0);
    EXPECT_EQ(fulmen_test::error_code([&] { other.load_state(R"({"scale": 2})"); }), FULMEN_CODE_FORMAT);
}

// Lightning's lr_scheduler "name" and "strict" from C++: LearningRateMonitor
// logs the scheduler's name instead of lr-SGD, strict is accepted, a
// scheduler index out of range throws (strict's effect on a plateau
// scheduler is tests/c/test_callbacks.c's).
TEST_F(FabricTest, SchedulerNameAndStrict) {
    Model model = fulmen_test::mlp();
    fulmen::Dataset ds = fulmen_test::blobs(32, 4);
    fulmen::Loader train(ds, 8);
    int bad_index = 0;
    fulmen::LightningModule module =
        fulmen::LightningModule::builder(model)
            .training_step([&](fulmen::StepContext&, const fulmen::Batch& batch) {
                return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            })
            .configure_optimizers([&](fulmen::OptimizerConfig& config) {
                Optimizer opt = Optimizer::sgd(model, fulmen::SgdOptions(0.1));
                fulmen::Scheduler sched = fulmen::Scheduler::step_lr(opt, 1, 0.5);
                config.add(std::move(opt), std::move(sched));
                config.set_scheduler_name(0, 0, "warmup");
                bad_index = fulmen_test::error_code([&] { config.set_scheduler_name(0, 1, "x"); });
                config.set_scheduler_strict(0, 0, false);
            })
            .build();
    std::vector<std::string> names;
    fulmen::Logger logger;
    logger.log_metrics = [&](const std::map<std::string, double>& metrics, int64_t, int64_t) {
        for (const auto& kv : metrics) names.push_back(kv.first);
    };
    fulmen::Trainer trainer(fulmen_test::quiet_options(2).set("logger", false).set("enable_checkpointing", false));
    trainer.add_lr_monitor("epoch");
    trainer.add_logger(std::move(logger));
    trainer.fit(module, train);
    EXPECT_EQ(bad_index, FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_NE(std::find(names.begin(), names.end(), "warmup"), names.end());
    EXPECT_EQ(std::find(names.begin(), names.end(), "lr-SGD"), names.end());
}

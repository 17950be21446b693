// The module's optimization hooks (optimizer_step, optimizer_zero_grad,
// lr_scheduler_step, backward, configure_gradient_clipping) from lambdas.
#include "common.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using fulmen::Batch;
using fulmen::ClipAlgorithm;
using fulmen::Dataset;
using fulmen::LightningModule;
using fulmen::Loader;
using fulmen::Model;
using fulmen::OptimizationContext;
using fulmen::Optimizer;
using fulmen::OptimizerClosure;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen_test::FulmenTest;

namespace {

/// Largest absolute difference between the parameters of `model` and
/// `before` (copies taken earlier).
double max_change(const Model& model, const std::vector<Tensor>& before) {
    std::vector<Tensor> now = model.parameters();
    double most = 0;
    for (size_t i = 0; i < now.size(); i++) most = std::max(most, (now[i] - before[i]).abs().max().item());
    return most;
}

std::vector<Tensor> copies(const Model& model) {
    std::vector<Tensor> out;
    for (const Tensor& p : model.parameters()) out.push_back(p.clone());
    return out;
}

LightningModule::Builder sgd_module(const Model& model) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext&, const Batch& batch) {
            return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
        })
        .configure_optimizers([&model](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
        });
}

}  // namespace

class CustomOptimizationTest : public FulmenTest {};

TEST_F(CustomOptimizationTest, HooksRunInLightningsOrderWithTheirArguments) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 16);
    std::string events;
    std::vector<int64_t> batch_ids;
    double clip_seen = -1;
    LightningModule module =
        sgd_module(model)
            .optimizer_step([&](OptimizationContext& ctx, int64_t, int64_t batch_idx, size_t idx,
                                OptimizerClosure& closure) {
                EXPECT_EQ(idx, 0u);
                batch_ids.push_back(batch_idx);
                events += 'S';
                if (batch_idx % 2 == 1) {
                    ctx.step_no_wait(closure);  // not asking whether the update was made
                } else {
                    EXPECT_TRUE(ctx.step(closure));
                }
                events += 'E';
            })
            .optimizer_zero_grad([&](OptimizationContext& ctx, int64_t, int64_t, size_t) {
                events += 'Z';
                ctx.zero_grad(false);
            })
            .backward([&](OptimizationContext&, const Tensor& loss) {
                events += 'B';
                loss.backward();
            })
            .configure_gradient_clipping([&](OptimizationContext& ctx, size_t, double clip_val, ClipAlgorithm a) {
                events += 'C';
                clip_seen = clip_val;
                EXPECT_EQ(a, ClipAlgorithm::Norm);
                ctx.clip_gradients(clip_val, a);
            })
            .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false).set("gradient_clip_val", 0.5));
    trainer.fit(module, train);
    EXPECT_EQ(trainer.global_step(), 4);
    EXPECT_EQ(events, "SZBCESZBCESZBCESZBCE");
    EXPECT_EQ(batch_ids, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(clip_seen, 0.5);
}

TEST_F(CustomOptimizationTest, ASkippedStepLeavesTheWeights) {
    Model model = fulmen_test::mlp();
    std::vector<Tensor> before = copies(model);
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 16);
    int closures = 0;
    LightningModule module = sgd_module(model)
                                 .optimizer_step([&](OptimizationContext&, int64_t, int64_t, size_t,
                                                     OptimizerClosure& closure) {
                                     std::optional<double> loss = closure();
                                     EXPECT_TRUE(loss.has_value());
                                     closures++;
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    trainer.fit(module, train);
    EXPECT_EQ(trainer.global_step(), 4);
    EXPECT_EQ(closures, 4);
    EXPECT_EQ(max_change(model, before), 0.0);
}

TEST_F(CustomOptimizationTest, ExceptionsAndMisuseReachTheCaller) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 16);
    LightningModule throws = sgd_module(model)
                                 .optimizer_step([&](OptimizationContext&, int64_t, int64_t batch_idx, size_t,
                                                     OptimizerClosure& closure) {
                                     if (batch_idx == 1) throw std::out_of_range("no second batch");
                                     closure();
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    EXPECT_THROW(trainer.fit(throws, train), std::out_of_range);

    // clipping belongs to configure_gradient_clipping: refused in optimizer_step
    LightningModule misuse = sgd_module(model)
                                 .optimizer_step([&](OptimizationContext& ctx, int64_t, int64_t, size_t,
                                                     OptimizerClosure& closure) {
                                     ctx.clip_gradients(1.0);
                                     ctx.step(closure);
                                 })
                                 .build();
    try {
        trainer.fit(misuse, train);
        ADD_FAILURE() << "clip_gradients in optimizer_step accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_STATE);
        EXPECT_NE(std::string(e.what()).find("configure_gradient_clipping"), std::string::npos);
    }
}

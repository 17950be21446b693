// Helper threads inside a callback: a training step that computes its loss
// on a std::thread holding an AttachedScope trains; in a validation step
// (no_grad) the attached thread's forward records no graph and an
// unattached thread's does; a context outside callbacks, a context whose
// step has returned and a detach without attach throw
// FULMEN_CODE_INVALID_STATE.
#include "common.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using fulmen::AttachedScope;
using fulmen::Batch;
using fulmen::CallbackContext;
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

class CallbackContextTest : public FulmenTest {};

TEST_F(CallbackContextTest, AttachedHelperThreadsWorkInsideTheStep) {
    Dataset ds = fulmen_test::blobs(64, 3);
    Loader train(ds, 16, true, 1);
    Loader val(ds, 32);
    Model model = fulmen_test::mlp();
    int steps = 0;
    std::vector<std::string> helper_errors;
    std::vector<bool> attached_grad, unattached_grad;
    std::optional<CallbackContext> stale;
    LightningModule module =
        LightningModule::builder(model)
            .training_step([&](StepContext&, const Batch& batch) {
                CallbackContext ctx = CallbackContext::current();
                std::optional<Tensor> loss;
                std::thread helper([&] {
                    try {
                        AttachedScope attached(ctx);
                        loss = fulmen::loss::cross_entropy(model(batch[0]), batch[1]);
                    } catch (const std::exception& e) {
                        helper_errors.push_back(e.what());
                    }
                });
                helper.join();
                steps++;
                if (!stale) stale.emplace(std::move(ctx));
                if (!loss) throw std::runtime_error("the helper thread made no loss");
                return std::move(*loss);
            })
            .validation_step([&](StepContext&, const Batch& batch) {
                CallbackContext ctx = CallbackContext::current();
                std::thread helper([&] {
                    try {
                        {
                            AttachedScope attached(ctx);
                            attached_grad.push_back(model(batch[0]).requires_grad());
                        }
                        unattached_grad.push_back(model(batch[0]).requires_grad());
                    } catch (const std::exception& e) {
                        helper_errors.push_back(e.what());
                    }
                });
                helper.join();
            })
            .configure_optimizers(
                [&](OptimizerConfig& config) { config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1))); })
            .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false));
    trainer.fit(module, train, val);
    for (const std::string& e : helper_errors) ADD_FAILURE() << "on the helper thread: " << e;
    EXPECT_EQ(steps, 4);
    EXPECT_EQ(trainer.global_step(), 4);
    ASSERT_FALSE(attached_grad.empty());
    ASSERT_EQ(attached_grad.size(), unattached_grad.size());
    for (size_t i = 0; i < attached_grad.size(); i++) {
        EXPECT_FALSE(attached_grad[i]) << "the attached thread ran without the step's no_grad";
        EXPECT_TRUE(unattached_grad[i]) << "an unattached thread has its own grad mode";
    }

    // The first step's context outlives it and attaches no more.
    ASSERT_TRUE(stale.has_value());
    EXPECT_EQ(fulmen_test::error_code([&] { stale->attach(); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_NE(fulmen_test::error_message([&] { stale->attach(); }).find("has returned"), std::string::npos);
    EXPECT_EQ(fulmen_test::error_code([] { CallbackContext::current(); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(fulmen_test::error_code([] { CallbackContext::detach(); }), FULMEN_CODE_INVALID_STATE);
}

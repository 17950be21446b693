// A second translation unit including the header: the binary links only if
// every definition in the header-only binding is inline (the ODR check).
#include <fulmen/fulmen.hpp>

#include "common.hpp"

#include <memory>

namespace fulmen_test {

fulmen::Tensor tensor_from_second_tu(float value) {
    return fulmen::Tensor::full({2}, static_cast<double>(value));
}

fulmen::LightningModule module_from_second_tu(const fulmen::Model& model, int* freed) {
    struct Token {
        explicit Token(int* f) : freed(f) {}
        Token(const Token&) = delete;
        Token& operator=(const Token&) = delete;
        ~Token() { ++*freed; }
        int* freed;
    };
    auto token = std::make_shared<Token>(freed);
    fulmen::Steps steps;
    steps.training_step = [&model, token](fulmen::StepContext&, const fulmen::Batch& batch) {
        return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
    };
    steps.validation_step = [&model](fulmen::StepContext& ctx, const fulmen::Batch& batch) {
        fulmen::Tensor hit = model.forward(batch[0]).argmax(1).eq(batch[1]);
        ctx.log("val_acc", hit.to(fulmen::DType::F32).mean().item(), fulmen::Log::on_epoch);
    };
    steps.configure_optimizers = [&model](fulmen::OptimizerConfig& config) {
        config.add(fulmen::Optimizer::adam(model, fulmen::AdamOptions(0.05)));
    };
    return fulmen::LightningModule(model, std::move(steps));
}

}  // namespace fulmen_test

class OdrTest : public fulmen_test::FulmenTest {};

TEST_F(OdrTest, SecondUnitSeesTheSameLibraryState) {
    fulmen::Tensor t = fulmen::Tensor::arange(0, 4);
    EXPECT_EQ(fulmen::live_handles(), 1u);
    EXPECT_EQ(t.sum().item(), 6.0);
}

/// Checks once more, after every test, that no handle is left alive.
class LeakCheckEnvironment : public ::testing::Environment {
public:
    void TearDown() override {
        EXPECT_EQ(fulmen::live_handles(), 0u);
        std::error_code ignored;
        std::filesystem::remove_all(fulmen_test::scratch(), ignored);
    }
};

static ::testing::Environment* const leak_check = ::testing::AddGlobalTestEnvironment(new LeakCheckEnvironment);

// fulmen::HostOptimizer: SGD written in C++ equals fulmen's SGD in a fit, a
// scheduler sets the lr its step reads, its state goes through a checkpoint
// and the state files, and an exception from its step ends the fit.
#include "common.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
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
using fulmen::OptimizerStepContext;
using fulmen::Scheduler;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen_test::FulmenTest;

namespace {

/// p -= lr * grad; its state is the number of steps it took.
class PlainSgd : public fulmen::HostOptimizer {
public:
    void step(OptimizerStepContext& ctx) override {
        steps++;
        if (steps == fail_at) throw std::range_error("plain sgd gave up");
        for (size_t g = 0; g < ctx.group_count(); g++) {
            double lr = ctx.lr(g);
            lrs.push_back(lr);
            for (size_t i = 0; i < ctx.param_count(g); i++) {
                Tensor p = ctx.param(g, i);
                if (auto grad = p.grad()) p.add_(*grad, -lr);
            }
        }
    }
    std::vector<uint8_t> state_dict() override {
        std::vector<uint8_t> out(sizeof steps);
        std::memcpy(out.data(), &steps, sizeof steps);
        return out;
    }
    void load_state_dict(const std::vector<uint8_t>& state) override {
        if (state.size() != sizeof loaded) throw std::invalid_argument("bad state size");
        std::memcpy(&loaded, state.data(), sizeof loaded);
    }

    int64_t steps = 0;
    int64_t fail_at = 0;
    int64_t loaded = -1;
    std::vector<double> lrs;
};

/// A module training `model` with `host` (fulmen's SGD when null), lr 0.1,
/// and StepLR(1, 0.5) per epoch when `step_lr`.
LightningModule module_with(const Model& model, std::shared_ptr<PlainSgd> host, bool step_lr) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext&, const Batch& batch) {
            return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
        })
        .configure_optimizers([&model, host, step_lr](OptimizerConfig& config) {
            Optimizer opt = host ? Optimizer::host(host, model, 0.1) : Optimizer::sgd(model, fulmen::SgdOptions(0.1));
            if (step_lr) {
                Scheduler s = Scheduler::step_lr(opt, 1, 0.5);
                config.add(std::move(opt), std::move(s));
            } else {
                config.add(std::move(opt));
            }
        })
        .build();
}

double max_diff(const Model& a, const Model& b) {
    std::vector<Tensor> pa = a.parameters(), pb = b.parameters();
    double most = 0;
    for (size_t i = 0; i < pa.size(); i++) most = std::max(most, (pa[i] - pb[i]).abs().max().item());
    return most;
}

}  // namespace

class HostOptimizerTest : public FulmenTest {};

TEST_F(HostOptimizerTest, EqualsBuiltinSgdAndReadsTheSchedulersLr) {
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 16);
    fulmen::manual_seed(4);
    Model own = fulmen_test::mlp();
    fulmen::manual_seed(4);
    Model builtin = fulmen_test::mlp();
    auto host = std::make_shared<PlainSgd>();
    LightningModule m_own = module_with(own, host, true);
    LightningModule m_builtin = module_with(builtin, nullptr, true);
    Trainer(fulmen_test::quiet_options(2).set("logger", false).set("enable_checkpointing", false)).fit(m_own, train);
    Trainer(fulmen_test::quiet_options(2).set("logger", false).set("enable_checkpointing", false))
        .fit(m_builtin, train);
    EXPECT_EQ(max_diff(own, builtin), 0.0);
    EXPECT_EQ(host->steps, 8);
    EXPECT_EQ(host->lrs, (std::vector<double>{0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05}));
}

TEST_F(HostOptimizerTest, StateGoesThroughACheckpointAndTheStateFiles) {
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 16);
    Model model = fulmen_test::mlp();
    std::string dir = fulmen_test::fresh_dir("host-optimizer");
    std::string ckpt = dir + "/host.ckpt";
    auto first = std::make_shared<PlainSgd>();
    LightningModule m1 = module_with(model, first, true);
    Trainer t1(fulmen_test::quiet_options(1).set("logger", false).set("enable_checkpointing", false));
    t1.fit(m1, train);
    t1.save_checkpoint(m1, ckpt);
    auto second = std::make_shared<PlainSgd>();
    LightningModule m2 = module_with(model, second, true);
    Trainer(fulmen_test::quiet_options(2).set("logger", false).set("enable_checkpointing", false))
        .fit(m2, train, ckpt);
    EXPECT_EQ(second->loaded, 4);
    EXPECT_EQ(second->lrs, (std::vector<double>{0.05, 0.05, 0.05, 0.05}));

    // Without a trainer: an optimizer's and a scheduler's state files.
    auto a = std::make_shared<PlainSgd>();
    Optimizer opt = Optimizer::host(a, model, 0.4);
    Scheduler sched = Scheduler::step_lr(opt, 1, 0.5);
    opt.step();
    sched.step(opt);
    opt.save_state(dir + "/opt.safetensors");
    sched.save_state(dir + "/sched.safetensors");
    auto b = std::make_shared<PlainSgd>();
    Optimizer other = Optimizer::host(b, model, 0.9);
    Scheduler other_sched = Scheduler::step_lr(other, 1, 0.5);
    other.load_state(dir + "/opt.safetensors");
    other_sched.load_state(dir + "/sched.safetensors");
    EXPECT_EQ(b->loaded, 1);
    EXPECT_EQ(other.lr(), 0.2);
    other_sched.step(other);
    EXPECT_EQ(other.lr(), 0.1);
    // Another kind's state is refused; nothing changed.
    Optimizer sgd = Optimizer::sgd(model);
    sgd.save_state(dir + "/sgd.safetensors");
    EXPECT_EQ(fulmen_test::error_code([&] { other.load_state(dir + "/sgd.safetensors"); }), FULMEN_CODE_FORMAT);
    EXPECT_EQ(other.lr(), 0.1);
}

TEST_F(HostOptimizerTest, AnExceptionFromStepEndsTheFit) {
    Dataset ds = fulmen_test::blobs(64, 5);
    Loader train(ds, 16);
    Model model = fulmen_test::mlp();
    auto host = std::make_shared<PlainSgd>();
    host->fail_at = 2;
    LightningModule m = module_with(model, host, false);
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false).set("enable_checkpointing", false));
    EXPECT_THROW(trainer.fit(m, train), std::range_error);
    EXPECT_EQ(host->steps, 2);
    EXPECT_THROW(Optimizer::host(nullptr, model, 0.1), fulmen::Error);
    EXPECT_EQ(fulmen_test::error_code([&] { Optimizer::host(std::make_shared<PlainSgd>(), model, -1.0); }),
              FULMEN_CODE_INVALID_ARGUMENT);
}

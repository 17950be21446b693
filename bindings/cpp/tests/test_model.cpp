// Models, optimizers, schedulers, datasets and loaders through the C++ binding.
#include "common.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <stdexcept>

using fulmen::Dataset;
using fulmen::DType;
using fulmen::Loader;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::Scheduler;
using fulmen::Shape;
using fulmen::Tensor;
using fulmen_test::FulmenTest;

class ModelTest : public FulmenTest {};
class OptimTest : public FulmenTest {};
class DataTest : public FulmenTest {};

namespace {

/// tests/fixtures of the repository (run-tests.sh sets FULMEN_FIXTURES).
std::filesystem::path fixtures() {
    const char* dir = std::getenv("FULMEN_FIXTURES");
    return dir != nullptr ? dir : "tests/fixtures";
}

/// The 2x4 input and 2x3 output of tests/fixtures/mlp_reference.txt.
std::pair<std::vector<float>, std::vector<float>> reference() {
    std::ifstream in(fixtures() / "mlp_reference.txt");
    std::string comment;
    std::getline(in, comment);
    std::vector<float> x(8), y(6);
    for (float& v : x) in >> v;
    for (float& v : y) in >> v;
    return {x, y};
}

}  // namespace

TEST_F(ModelTest, SequentialForwardAndState) {
    Model m = fulmen_test::mlp();
    EXPECT_EQ(m.num_parameters(), 2 * 16 + 16 + 16 * 2 + 2);
    EXPECT_EQ(m.state_dict_names(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
    EXPECT_EQ(m.state_dict_get("0.weight").shape(), (Shape{16, 2}));
    EXPECT_EQ(m.forward(Tensor::randn({5, 2})).shape(), (Shape{5, 2}));
    EXPECT_EQ(m(Tensor::randn({1, 2})).shape(), (Shape{1, 2}));
    EXPECT_TRUE(m.is_training());
    EXPECT_FALSE(m.eval().is_training());
    EXPECT_TRUE(m.train().is_training());
}

TEST_F(ModelTest, MeasureFlopsAsFlopCounterMode) {
    Model m = fulmen_test::mlp();  // Linear(2, 16), Linear(16, 2)
    Tensor x = Tensor::ones({5, 2});
    const std::uint64_t forward = 2 * 5 * 2 * 16 + 2 * 5 * 16 * 2;
    EXPECT_EQ(m.measure_flops(x, false), forward);
    // Backward: the first weight's gradient; the second weight's and its input's.
    EXPECT_EQ(m.measure_flops(x), forward + 3 * 2 * 5 * 2 * 16);
    EXPECT_EQ(fulmen::measure_flops([&] { m.forward(x).sum().backward(); }), forward + 3 * 2 * 5 * 2 * 16);
    EXPECT_THROW(fulmen::measure_flops([] { throw std::runtime_error("the host failed"); }), std::runtime_error);
    EXPECT_THROW(fulmen::measure_flops([] { fulmen::measure_flops([] {}); }), fulmen::Error);
    EXPECT_EQ(fulmen::measure_flops([] {}), 0u);
}

TEST_F(ModelTest, MeasuresFlopsByModuleAsFlopCounterMode) {
    Model m = fulmen_test::mlp();  // Linear(2, 16), ReLU, Linear(16, 2)
    Tensor x = Tensor::ones({5, 2});
    const std::uint64_t first = 2 * 5 * 2 * 16, second = 2 * 5 * 16 * 2;
    fulmen::FlopCounts c = m.measure_flops_by_module(x);
    EXPECT_EQ(c.modules(), (std::vector<std::string>{"Global", "Sequential", "Sequential.0", "Sequential.2"}));
    EXPECT_EQ(c.total(), 2 * first + 3 * second);
    EXPECT_EQ(c.total("Sequential.0"), 2 * first);
    EXPECT_EQ(c.total("Sequential.1"), 0u);
    using Ops = std::vector<std::pair<std::string, std::uint64_t>>;
    EXPECT_EQ(c.operators("Sequential.2"), (Ops{{"aten::addmm", second}, {"aten::mm", 2 * second}}));
    EXPECT_EQ(c.table().rfind("Module", 0), 0u);
    EXPECT_NE(c.table(SIZE_MAX).find(" Sequential.2 "), std::string::npos);
    fulmen::FlopCounts host = fulmen::measure_flops_by_module([&] { m.forward(x).sum().backward(); });
    EXPECT_EQ(host.operators("Sequential.0"), c.operators("Sequential.0"));
    EXPECT_THROW(fulmen::measure_flops_by_module([] { throw std::runtime_error("the host failed"); }),
                 std::runtime_error);
}

TEST_F(ModelTest, HostFlopFormulasCountTheirOperators) {
    Model m = Model::sequential({Model::linear(2, 4), Model::activation(fulmen::Activation::Gelu)});
    Tensor x = Tensor::ones({5, 2});
    std::vector<fulmen::FlopArg> seen;
    fulmen::register_flop_formula("aten::gelu", [&](const std::string& op, const std::vector<fulmen::FlopArg>& in,
                                                    const std::vector<fulmen::FlopArg>&) -> std::uint64_t {
        EXPECT_EQ(op, "aten::gelu");
        seen = in;
        return 8 * in.at(0).numel();
    });
    fulmen::FlopCounts c = m.measure_flops_by_module(x, false);
    EXPECT_EQ(c.total("Sequential.1"), 8u * 5 * 4);
    ASSERT_EQ(seen.size(), 2u);  // self, approximate="none"
    EXPECT_EQ(seen[0].shape, (std::vector<std::int64_t>{5, 4}));
    EXPECT_EQ(seen[1].kind, FULMEN_FLOP_VALUE_KIND_STRING);
    EXPECT_EQ(seen[1].text, "none");
    EXPECT_THROW(fulmen::register_flop_formula("aten::gelu", nullptr), fulmen::Error);  // registered already
    EXPECT_TRUE(fulmen::unregister_flop_formula("aten::gelu"));
    EXPECT_FALSE(fulmen::unregister_flop_formula("aten::gelu"));
    // An exception fails the measurement with its message.
    fulmen::register_flop_formula("aten::gelu", [](const std::string&, const std::vector<fulmen::FlopArg>&,
                                                   const std::vector<fulmen::FlopArg>&) -> std::uint64_t {
        throw std::runtime_error("no formula for this shape");
    });
    try {
        m.measure_flops(x, false);
        ADD_FAILURE() << "the formula's exception was lost";
    } catch (const fulmen::Error& e) {
        EXPECT_NE(std::string(e.what()).find("no formula for this shape"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fulmen::unregister_flop_formula("aten::gelu"));
    EXPECT_THROW(fulmen::register_flop_formula("aten::linear", nullptr), fulmen::Error);  // decomposes
    EXPECT_EQ(m.measure_flops(x, false), 2u * 5 * 2 * 4);
}

TEST_F(ModelTest, ActivationCheckpointingKeepsTheOutputs) {
    Model m = fulmen_test::mlp();
    Tensor x = Tensor::randn({3, 2});
    Tensor plain = m.forward(x);
    m.set_activation_checkpointing("0").set_activation_checkpointing("2");
    EXPECT_EQ(m.forward(x).to_vector<float>(), plain.to_vector<float>());
    EXPECT_THROW(m.set_activation_checkpointing("7"), fulmen::Error);
    m.set_activation_checkpointing("0", false).set_activation_checkpointing("2", false);
}

TEST_F(ModelTest, PushConsumesOnlyOnSuccess) {
    Model seq = Model::sequential();
    Model layer = Model::linear(3, 4);
    seq.push(std::move(layer));
    EXPECT_FALSE(layer);  // consumed
    Model not_a_sequential = Model::linear(4, 4);
    Model child = Model::relu();
    EXPECT_THROW(not_a_sequential.push(std::move(child)), fulmen::Error);
    EXPECT_TRUE(child);  // still ours after a failure
    seq.push(std::move(child)).push(Model::linear(4, 1));
    EXPECT_EQ(seq.forward(Tensor::ones({2, 3})).shape(), (Shape{2, 1}));
}

TEST_F(ModelTest, NamedChildren) {
    Model net = Model::named();
    net.add("encoder", Model::sequential({Model::linear(4, 3), Model::gelu()})).add("head", Model::linear(3, 2));
    EXPECT_EQ(net.state_dict_name(0), "encoder.0.weight");
    Tensor x = Tensor::randn({2, 4});
    Tensor h = net.forward_child("encoder", x);
    EXPECT_EQ(h.shape(), (Shape{2, 3}));
    EXPECT_EQ(net.forward_child("head", h).shape(), (Shape{2, 2}));
    EXPECT_EQ(net.forward_child("encoder.0", x).shape(), (Shape{2, 3}));
    EXPECT_THROW(net.forward(x), fulmen::Error);  // a named container has no forward
}

TEST_F(ModelTest, EveryLayerFactory) {
    fulmen::Conv2dOptions c(3);
    c.padding[0] = c.padding[1] = 1;
    Model cnn = Model::sequential({Model::conv2d(1, 4, c), Model::batch_norm(4), Model::relu(), Model::max_pool2d(2),
                                  Model::conv2d(4, 4, 1), Model::avg_pool2d(2), Model::flatten(), Model::dropout(0.1),
                                  Model::linear(16, 8), Model::layer_norm({8}), Model::leaky_relu(0.2), Model::silu(),
                                  Model::elu(), Model::sigmoid(), Model::tanh(), Model::identity(), Model::softmax(1),
                                  Model::activation(fulmen::Activation::Identity)});
    EXPECT_EQ(cnn.forward(Tensor::randn({2, 1, 8, 8})).shape(), (Shape{2, 8}));
    EXPECT_NEAR(cnn.forward(Tensor::randn({2, 1, 8, 8})).sum().item(), 2.0, 1e-5);
    Model emb = Model::sequential({Model::embedding(10, 3), Model::log_softmax(-1)});
    EXPECT_EQ(emb.forward(Tensor::from_vector(std::vector<int64_t>{1, 2, 9})).shape(), (Shape{3, 3}));
    EXPECT_EQ(cnn.state_dict_names()[2], "1.weight");
    EXPECT_EQ(cnn.state_dict_names()[4], "1.running_mean");
}

TEST_F(ModelTest, SaveAndLoadWeights) {
    std::string path = (fulmen_test::scratch() / "mlp.safetensors").string();
    Model a = fulmen_test::mlp();
    a.save(path);
    Model b = fulmen_test::mlp();
    Tensor x = Tensor::randn({4, 2});
    EXPECT_NE(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
    b.load(path);
    EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
    Model other = Model::sequential({Model::linear(2, 3)});
    EXPECT_THROW(other.load(path, true), fulmen::Error);
    try {
        Model::sequential().load("/no/such/weights.safetensors");
        ADD_FAILURE() << "load of a missing file succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_IO);
    }
}

TEST_F(ModelTest, TorchScript) {
    auto [in, ref] = reference();
    Model ts = Model::load_torchscript((fixtures() / "mlp_scripted.pt").string());
    EXPECT_EQ(ts.state_dict_names(), (std::vector<std::string>{"l1.weight", "l1.bias", "l2.weight", "l2.bias"}));
    std::vector<float> got = ts.forward(Tensor::from_vector(in, {2, 4})).to_vector<float>();
    for (size_t i = 0; i < ref.size(); i++) EXPECT_NEAR(got[i], ref[i], 1e-5);
    try {
        Model::load_torchscript("/no/such/model.pt");
        ADD_FAILURE() << "loading a missing TorchScript file succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_IO);
    }
}

TEST_F(OptimTest, ManualLoopWithEveryOptimizer) {
    auto fit = [](auto make_optimizer) {
        Tensor w = Tensor::zeros({3});
        w.set_requires_grad();
        Optimizer opt = make_optimizer(w);
        for (int i = 0; i < 200; i++) {
            opt.zero_grad();
            ((w - 3.0) * (w - 3.0)).sum().backward();
            opt.step();
        }
        return w.mean().item();
    };
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::sgd({w}, fulmen::SgdOptions(0.1)); }), 3.0, 1e-3);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::adam({w}, fulmen::AdamOptions(0.1)); }), 3.0, 0.05);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::adamw({w}, fulmen::AdamWOptions(0.1)); }), 3.0, 0.1);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::rmsprop({w}, fulmen::RmspropOptions(0.05)); }), 3.0, 0.1);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::adagrad({w}, fulmen::AdagradOptions(0.5)); }), 3.0, 0.1);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::adamax({w}, fulmen::AdamaxOptions(0.1)); }), 3.0, 0.1);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::nadam({w}, fulmen::NAdamOptions(0.1)); }), 3.0, 0.1);
    EXPECT_NEAR(fit([](const Tensor& w) { return Optimizer::radam({w}, fulmen::RAdamOptions(0.1)); }), 3.0, 0.1);
    Model m = fulmen_test::mlp();
    EXPECT_EQ(Optimizer::nadam(m).lr(), 2e-3);
    EXPECT_EQ(Optimizer::adagrad(m, fulmen::AdagradOptions(0.3)).lr(), 0.3);
    EXPECT_EQ(Optimizer::adamax(m).lr(), 2e-3);
    EXPECT_EQ(Optimizer::radam(m).lr(), 1e-3);
}

TEST_F(OptimTest, FusedUpdates) {
    // AdamW with torch's fused kernel stays within float rounding of the
    // default update; LBFGS has no fused update.
    Tensor a = Tensor::zeros({4}), b = Tensor::zeros({4});
    a.set_requires_grad();
    b.set_requires_grad();
    Optimizer plain = Optimizer::adamw({a}, fulmen::AdamWOptions(0.1));
    Optimizer fused = Optimizer::adamw({b}, fulmen::AdamWOptions(0.1));
    fused.set_fused();
    EXPECT_TRUE(fused.fused());
    EXPECT_FALSE(plain.fused());
    for (int i = 0; i < 5; i++) {
        for (auto* pair : {&a, &b}) {
            ((*pair - 3.0) * (*pair - 3.0)).sum().backward();
        }
        plain.step();
        fused.step();
        plain.zero_grad();
        fused.zero_grad();
    }
    EXPECT_LT((a - b).abs().max().item(), 1e-6);
    EXPECT_GT(b.mean().item(), 0.3);
    Optimizer lbfgs = Optimizer::lbfgs({a});
    EXPECT_EQ(fulmen_test::error_code([&] { lbfgs.set_fused(); }), FULMEN_CODE_UNSUPPORTED);
}

TEST_F(OptimTest, ForeachUpdates) {
    // Adam with torch's foreach kernels: on the CPU the for-loop's values,
    // bit for bit; LBFGS has no foreach update.
    Tensor a = Tensor::zeros({4}), b = Tensor::zeros({4});
    a.set_requires_grad();
    b.set_requires_grad();
    Optimizer plain = Optimizer::adam({a}, fulmen::AdamOptions(0.1));
    Optimizer foreach = Optimizer::adam({b}, fulmen::AdamOptions(0.1));
    EXPECT_EQ(foreach.foreach(), fulmen::Foreach::Default);
    foreach.set_foreach(fulmen::Foreach::On);
    EXPECT_EQ(foreach.foreach(), fulmen::Foreach::On);
    for (int i = 0; i < 5; i++) {
        for (auto* pair : {&a, &b}) {
            ((*pair - 3.0) * (*pair - 3.0)).sum().backward();
        }
        plain.step();
        foreach.step();
        plain.zero_grad();
        foreach.zero_grad();
    }
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
    EXPECT_GT(b.mean().item(), 0.3);
    Optimizer lbfgs = Optimizer::lbfgs({a});
    EXPECT_EQ(fulmen_test::error_code([&] { lbfgs.set_foreach(fulmen::Foreach::On); }), FULMEN_CODE_UNSUPPORTED);
}

TEST_F(OptimTest, StepWithAClosure) {
    // LBFGS with the strong-Wolfe line search solves a quadratic in a few
    // evaluations; every evaluation starts with the gradients reset.
    Tensor w = Tensor::zeros({3});
    w.set_requires_grad();
    fulmen::LbfgsOptions o;
    o.strong_wolfe = true;
    EXPECT_EQ(o.max_iter, 20);
    Optimizer opt = Optimizer::lbfgs({w}, o);
    int calls = 0;
    auto closure = [&] {
        calls++;
        Tensor loss = ((w - 3.0) * (w - 3.0)).sum();
        loss.backward();
        return loss.item();
    };
    EXPECT_EQ(opt.step(closure), 27.0);
    EXPECT_GT(calls, 1);
    EXPECT_NEAR(w.mean().item(), 3.0, 1e-4);
    EXPECT_EQ(opt.param_group(0, "line_search_fn"), 1.0);
    EXPECT_THROW(opt.step(), fulmen::Error);  // LBFGS needs its closure
    // A closure's exception ends the step and comes back as it was thrown.
    struct Stop {};
    EXPECT_THROW(opt.step([]() -> double { throw Stop{}; }), Stop);
    // Other optimizers evaluate once, then step.
    Optimizer sgd = Optimizer::sgd({w}, fulmen::SgdOptions(0.1));
    calls = 0;
    sgd.step(closure);
    EXPECT_EQ(calls, 1);
}

TEST_F(OptimTest, OptionsDefaultsLrAndGroups) {
    EXPECT_EQ(fulmen::SgdOptions().lr, 1e-3);
    EXPECT_EQ(fulmen::AdamOptions().weight_decay, 0.0);
    EXPECT_EQ(fulmen::AdamWOptions().weight_decay, 1e-2);
    EXPECT_EQ(fulmen::RmspropOptions().lr, 1e-2);
    Model m = fulmen_test::mlp();
    Optimizer opt = Optimizer::sgd(m, fulmen::SgdOptions(0.5));
    EXPECT_EQ(opt.lr(), 0.5);
    opt.set_lr(0.25);
    EXPECT_EQ(opt.lr(), 0.25);
    Tensor extra = Tensor::zeros({2});
    extra.set_requires_grad();
    opt.add_param_group({extra}, 0.01).add_param_group(Model::linear(1, 1));
    EXPECT_EQ(opt.param_group_count(), 3u);
    EXPECT_EQ(opt.param_group(1, "lr"), 0.01);
    opt.set_param_group(2, "weight_decay", 0.0).set_param_group(1, "momentum", 0.9);
    EXPECT_EQ(opt.param_group(1, "momentum"), 0.9);
    EXPECT_EQ(opt.param_group(0, "momentum"), 0.0);
    try {
        opt.param_group(3, "lr");
        FAIL() << "group 3 of 3 was read";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_OUT_OF_RANGE);
    }
    EXPECT_THROW(opt.set_param_group(0, "betas.0", 0.5), fulmen::Error);
    Optimizer adam = Optimizer::adam(m);
    adam.set_param_group(0, "beta1", 0.8);
    EXPECT_EQ(adam.param_group(0, "betas.0"), 0.8);
    // betas[1], eps and the flags per group too, checked as torch's options.
    adam.set_param_group(0, "beta2", 0.95).set_param_group(0, "eps", 1e-6).set_param_group(0, "amsgrad", 1);
    EXPECT_EQ(adam.param_group(0, "betas.1"), 0.95);
    EXPECT_EQ(adam.param_group(0, "eps"), 1e-6);
    EXPECT_EQ(adam.param_group(0, "amsgrad"), 1.0);
    EXPECT_THROW(adam.set_param_group(0, "beta2", 1.0), fulmen::Error);
    EXPECT_THROW(adam.set_param_group(0, "amsgrad", 0.5), fulmen::Error);
    EXPECT_EQ(adam.param_group(0, "beta2"), 0.95);
    Optimizer adamw = Optimizer::adamw(m);
    Optimizer rms = Optimizer::rmsprop(m);
    EXPECT_EQ(adamw.lr(), 1e-3);
    EXPECT_EQ(rms.lr(), 1e-2);
    EXPECT_EQ(adam.lr(), 1e-3);
}

TEST_F(OptimTest, GradientClipping) {
    Model m = Model::sequential({Model::linear(2, 1)});
    fulmen::loss::mse(m.forward(Tensor::ones({4, 2})), Tensor::full({4, 1}, 100.0)).backward();
    double before = fulmen::clip_grad_norm(m, 1.0);
    EXPECT_GT(before, 1.0);
    EXPECT_NEAR(fulmen::clip_grad_norm(m, 1.0), 1.0, 1e-4);
    fulmen::clip_grad_value(m, 0.01);
    std::optional<Tensor> g = m.state_dict_get("0.weight").grad();
    ASSERT_TRUE(g.has_value());
    EXPECT_LE(g->abs().max().item(), 0.01 + 1e-9);
    EXPECT_LE(fulmen::clip_grad_norm(m, 10.0, std::numeric_limits<double>::infinity()), 0.01 + 1e-9);
}

TEST_F(OptimTest, Schedulers) {
    Tensor w = Tensor::zeros({1});
    w.set_requires_grad();
    Optimizer opt = Optimizer::sgd({w}, fulmen::SgdOptions(1.0));
    Scheduler step = Scheduler::step_lr(opt, 1, 0.5);
    step.step(opt);
    EXPECT_DOUBLE_EQ(opt.lr(), 0.5);

    auto lr_after = [](auto make, int steps) {
        Tensor p = Tensor::zeros({1});
        p.set_requires_grad();
        Optimizer o = Optimizer::sgd({p}, fulmen::SgdOptions(1.0));
        Scheduler s = make(o);
        for (int i = 0; i < steps; i++) s.step(o, 1.0);
        return o.lr();
    };
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::multi_step_lr(o, {2}, 0.1); }, 2), 0.1);
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::exponential_lr(o, 0.5); }, 2), 0.25);
    EXPECT_NEAR(lr_after([](Optimizer& o) { return Scheduler::cosine_lr(o, 4, 0.0); }, 4), 0.0, 1e-12);
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::linear_lr(o, 0.5, 1.0, 2); }, 2), 1.0);
    // SWALR, linear over 2 epochs: 1.0, 0.525, then the SWA lr.
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::swa_lr(o, {0.05}, 2, true); }, 1), 0.525);
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::swa_lr(o, {0.05}, 2, true); }, 3), 0.05);
    fulmen::OneCycleOptions oc(1.0, 10);
    EXPECT_LT(lr_after([&](Optimizer& o) { return Scheduler::one_cycle_lr(o, oc); }, 9), 0.01);
    // One peak per param group (one group here): it starts at 2 / 25.
    EXPECT_NEAR(lr_after([&](Optimizer& o) { return Scheduler::one_cycle_lr(o, oc, {2.0}); }, 0), 0.08, 1e-15);
    EXPECT_THROW(lr_after([&](Optimizer& o) { return Scheduler::one_cycle_lr(o, oc, {}); }, 0), fulmen::Error);
    fulmen::PlateauOptions po;
    po.patience = 0;
    EXPECT_DOUBLE_EQ(lr_after([&](Optimizer& o) { return Scheduler::reduce_on_plateau(o, po); }, 3), 0.01);
    // One bound per param group (here one group): the lr stops at 0.5.
    EXPECT_DOUBLE_EQ(lr_after([&](Optimizer& o) { return Scheduler::reduce_on_plateau(o, po, {0.5}); }, 3), 0.5);
    EXPECT_THROW(lr_after([&](Optimizer& o) { return Scheduler::reduce_on_plateau(o, po, {0.5, 0.1}); }, 1),
                 fulmen::Error);
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::constant_lr(o, 0.5, 3); }, 2), 0.5);
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::constant_lr(o, 0.5, 3); }, 3), 1.0);
    EXPECT_NEAR(lr_after([](Optimizer& o) { return Scheduler::polynomial_lr(o, 4, 2.0); }, 2), 0.25, 1e-12);
    EXPECT_DOUBLE_EQ(lr_after([](Optimizer& o) { return Scheduler::cosine_warm_restarts(o, 3, 2); }, 3), 1.0);
    // CyclicLR(0.1, 1.0, step_size_up 2): up to the peak in 2 steps, down in 2 more.
    fulmen::CyclicLrOptions cyc(0.1, 1.0);
    cyc.step_size_up = 2;
    EXPECT_NEAR(lr_after([&](Optimizer& o) { return Scheduler::cyclic_lr(o, cyc); }, 1), 0.55, 1e-12);
    EXPECT_NEAR(lr_after([&](Optimizer& o) { return Scheduler::cyclic_lr(o, cyc); }, 2), 1.0, 1e-12);
    EXPECT_NEAR(lr_after([&](Optimizer& o) { return Scheduler::cyclic_lr(o, cyc); }, 4), 0.1, 1e-12);
    // Each group's own range (one group here): from 0.1 to 2 in 2 steps.
    EXPECT_NEAR(lr_after([&](Optimizer& o) { return Scheduler::cyclic_lr(o, cyc, {0.1}, {2.0}); }, 1), 1.05, 1e-12);
    EXPECT_THROW(lr_after([&](Optimizer& o) { return Scheduler::cyclic_lr(o, cyc, {0.1, 0.2}, {}); }, 0), fulmen::Error);
    // LambdaLR / MultiplicativeLR call the C++ function with the step and group.
    auto halving = [](Optimizer& o) { return Scheduler::lambda_lr(o, [](int64_t t, size_t) { return 1.0 / (1 + t); }); };
    EXPECT_DOUBLE_EQ(lr_after(halving, 3), 0.25);
    auto mult = [](Optimizer& o) { return Scheduler::multiplicative_lr(o, [](int64_t, size_t) { return 0.5; }); };
    EXPECT_DOUBLE_EQ(lr_after(mult, 3), 0.125);
    {
        // An exception in the function reaches the caller of step (and at construction, of lambda_lr).
        struct Boom : std::runtime_error {
            using std::runtime_error::runtime_error;
        };
        Scheduler s = Scheduler::lambda_lr(opt, [](int64_t t, size_t) -> double {
            if (t == 2) throw Boom("no factor for step 2");
            return 1.0;
        });
        s.step(opt);
        EXPECT_THROW(s.step(opt), Boom);
        EXPECT_THROW(Scheduler::lambda_lr(opt, [](int64_t, size_t) -> double { throw Boom("at once"); }), Boom);
    }
    // Warm-up then cosine: torch 2.13's SequentialLR(LinearLR(0.1, 1, 3), CosineAnnealingLR(6, 0.001), [3])
    // on lr 1 gives 0.7 after 2 steps and 1.0 after 3; the parts are consumed.
    auto warmup_cosine = [](Optimizer& o) {
        std::vector<Scheduler> parts;
        parts.push_back(Scheduler::linear_lr(o, 0.1, 1.0, 3));
        parts.push_back(Scheduler::cosine_lr(o, 6, 0.001));
        Scheduler s = Scheduler::sequential_lr(o, std::move(parts), {3});
        EXPECT_TRUE(parts.empty() || !parts[0]);
        return s;
    };
    EXPECT_NEAR(lr_after(warmup_cosine, 2), 0.7, 1e-12);
    EXPECT_NEAR(lr_after(warmup_cosine, 3), 1.0, 1e-12);
    {
        std::vector<Scheduler> parts;
        parts.push_back(Scheduler::linear_lr(opt, 0.1, 1.0, 3));
        EXPECT_THROW(Scheduler::sequential_lr(opt, std::move(parts), {3}), fulmen::Error);  // one milestone too many
        EXPECT_TRUE(parts.size() == 1 && parts[0]);                                      // not consumed
    }
    // ChainedScheduler: torch 2.13's ConstantLR(0.5, 3) chained with ExponentialLR(0.9) on lr 1
    // gives 0.5 * 0.9^2 after 2 steps and 0.9^3 after 3, when the constant factor ends.
    auto chained = [](Optimizer& o) {
        std::vector<Scheduler> parts;
        parts.push_back(Scheduler::constant_lr(o, 0.5, 3));
        parts.push_back(Scheduler::exponential_lr(o, 0.9));
        Scheduler s = Scheduler::chained(o, std::move(parts));
        EXPECT_TRUE(parts.empty() || !parts[0]);
        return s;
    };
    EXPECT_DOUBLE_EQ(lr_after(chained, 2), 0.5 * 0.9 * 0.9);
    EXPECT_NEAR(lr_after(chained, 3), 0.729, 1e-15);
    {
        std::vector<Scheduler> parts;
        parts.push_back(Scheduler::step_lr(opt, 1));
        parts[0].step(opt);
        EXPECT_THROW(Scheduler::chained(opt, std::move(parts)), fulmen::Error);  // a part already stepped
        EXPECT_TRUE(parts.size() == 1 && parts[0]);                              // not consumed
    }
    Scheduler wrong = Scheduler::step_lr(opt, 1);
    Optimizer other = Optimizer::sgd({w});
    EXPECT_THROW(wrong.step(other), fulmen::Error);
}

TEST_F(DataTest, TensorDatasetGetSubsetSplit) {
    Tensor x = Tensor::arange(0, 20).reshape({10, 2});
    Tensor y = Tensor::arange(0, 10, 1, DType::I64);
    Dataset ds = Dataset::from_tensors({x, y});
    EXPECT_EQ(ds.len(), 10u);
    std::vector<Tensor> batch = ds.get(std::vector<int64_t>{3, 1});
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[0].to_vector<float>(), (std::vector<float>{6, 7, 2, 3}));
    EXPECT_EQ(batch[1].to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
    Dataset sub = ds.subset(std::vector<int64_t>{0, 9});
    EXPECT_EQ(sub.size(), 2u);
    auto [every, rest] = ds.split_every(5);
    EXPECT_EQ(every.len(), 2u);
    EXPECT_EQ(rest.len(), 8u);
    EXPECT_EQ(every.get(std::vector<int64_t>{0, 1})[1].to_vector<int64_t>(), (std::vector<int64_t>{0, 5}));
    try {
        ds.get(std::vector<int64_t>{10});
        ADD_FAILURE() << "out-of-range index accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_OUT_OF_RANGE);
    }
    Loader loader(ds, 4);
    EXPECT_EQ(loader.len(), 3u);
    fulmen::LoaderOptions lo(4, true, 7);
    lo.drop_last = true;
    EXPECT_EQ(Loader(ds, lo).len(), 2u);
    // pin_memory: the same batches, pinned where CUDA is available.
    EXPECT_FALSE(fulmen::LoaderOptions().pin_memory);
    fulmen::LoaderOptions pin(4, true, 7);
    pin.pin_memory = true;
    bool cuda = fulmen::Accelerator::get("cuda").is_available();
    Loader plain_loader(ds, fulmen::LoaderOptions(4, true, 7)), pinning(ds, pin);
    auto a = plain_loader.batch(1, 0), p = pinning.batch(1, 0);
    EXPECT_EQ(p[0].is_pinned(), cuda);
    EXPECT_FALSE(a[0].is_pinned());
    EXPECT_EQ(a[0].to_vector<float>(), p[0].to_vector<float>());
}

TEST_F(DataTest, CsvDataset) {
    std::string path = (fulmen_test::scratch() / "tiny.csv").string();
    std::ofstream(path) << "a,b,label\n0,10,1\n5,20,0\n10,30,1\n";
    fulmen::CsvOptions o;
    o.label_column = -1;
    o.scale(fulmen::Scaling::MinMax);
    Dataset ds = Dataset::from_csv(path, o);
    ASSERT_EQ(ds.len(), 3u);
    std::vector<Tensor> all = ds.get(std::vector<int64_t>{0, 1, 2});
    EXPECT_EQ(all[0].to_vector<float>(), (std::vector<float>{0, 0, 0.5, 0.5, 1, 1}));
    EXPECT_EQ(all[1].to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
}

TEST_F(DataTest, CsvColumnsByName) {
    std::string path = (fulmen_test::scratch() / "people.csv").string();
    std::ofstream(path) << "2,4\nage,income,city,bought\n30,1000,7,1\n40,2500,3,0\n";
    fulmen::CsvOptions o;
    {
        // The names outlive the options they were given to (copies share them).
        fulmen::CsvOptions named;
        named.skip(1).label("bought").features({"income", "age"});
        o = named;
    }
    Dataset ds = Dataset::from_csv(path, o);
    std::vector<Tensor> all = ds.get(std::vector<int64_t>{0, 1});
    EXPECT_EQ(all[0].to_vector<float>(), (std::vector<float>{1000, 30, 2500, 40}));
    EXPECT_EQ(all[1].to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
    try {
        Dataset::from_csv(path, fulmen::CsvOptions(o).features({"price"}));
        ADD_FAILURE() << "an unknown column was accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT) << e.what();
    }
}

TEST_F(DataTest, RandomSplitIsTorchs) {
    std::vector<float> xs(10);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
    Dataset ds = Dataset::from_tensors({Tensor::from_vector(xs, {10})});
    std::vector<Dataset> parts = ds.random_split({0.5, 0.3, 0.2}, 7);
    ASSERT_EQ(parts.size(), 3u);
    // torch.utils.data.random_split(range(10), [0.5, 0.3, 0.2], generator=torch.Generator().manual_seed(7))
    EXPECT_EQ(parts[0].get(std::vector<int64_t>{0, 1, 2, 3, 4})[0].to_vector<float>(),
              (std::vector<float>{5, 0, 3, 4, 1}));
    EXPECT_EQ(parts[2].len(), 2u);
    EXPECT_THROW(ds.random_split({6, 5}, 7), fulmen::Error);
}

TEST_F(DataTest, ScalerFittedOnTrainScalesVal) {
    Dataset train = Dataset::from_tensors({Tensor::from_vector(std::vector<float>{0, 5, 10}, {3, 1})});
    Dataset val = Dataset::from_tensors({Tensor::from_vector(std::vector<float>{5, 15}, {2, 1})});
    fulmen::Scaler scaler = fulmen::Scaler::fit(train, 0, fulmen::ScalerKind::MinMax);
    auto [lo, hi] = scaler.stats();
    EXPECT_EQ(lo.to_vector<double>(), (std::vector<double>{0}));
    EXPECT_EQ(hi.to_vector<double>(), (std::vector<double>{10}));
    Dataset scaled = scaler.apply(val);
    EXPECT_EQ(scaled.get(std::vector<int64_t>{0, 1})[0].to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));
}

TEST_F(DataTest, HostDataSource) {
    int freed = 0;
    struct Counter {
        explicit Counter(int* f) : freed(f) {}
        Counter(const Counter&) = delete;
        Counter& operator=(const Counter&) = delete;
        ~Counter() { ++*freed; }
        int* freed;
    };
    auto counter = std::make_shared<Counter>(&freed);
    {
        Dataset ds = Dataset::from_source({
            [counter] { return size_t{6}; },
            [counter](fulmen::Indices idx, fulmen::BatchBuilder& b) {
                std::vector<float> x(idx.begin(), idx.end());
                if (x.size() == 1 && x[0] == 5) throw std::invalid_argument("sample 5 is cursed");
                b.push(Tensor::from_vector(x)).push(Tensor::from_vector(x) * 10);
            },
        });
        counter.reset();
        EXPECT_EQ(freed, 0);
        EXPECT_EQ(ds.len(), 6u);
        std::vector<Tensor> b = ds.get(std::vector<int64_t>{1, 2});
        EXPECT_EQ(b[1].to_vector<float>(), (std::vector<float>{10, 20}));
        EXPECT_THROW(ds.get(std::vector<int64_t>{5}), std::invalid_argument);
        Dataset sub = ds.subset(std::vector<int64_t>{4});
        EXPECT_EQ(sub.get(std::vector<int64_t>{0})[0].item(), 4.0);
    }
    EXPECT_EQ(freed, 1);  // the lambdas' state was destroyed exactly once
}

TEST_F(DataTest, LoaderWorkers) {
    Tensor x = Tensor::randn({20, 2}), y = Tensor::zeros({20}).to(fulmen::DType::I64);
    Dataset tensors = Dataset::from_tensors({x, y});
    fulmen::Loader plain(tensors, fulmen::LoaderOptions(4, true, 3));
    fulmen::Loader ahead(tensors, fulmen::LoaderOptions(4, true, 3).workers(2, 1));
    EXPECT_EQ(ahead.len(), plain.len());
    // A host source needs any_thread for workers; with it, batches by index
    // are the same.
    fulmen::DataSource source{[] { return size_t{20}; },
                              [&](fulmen::Indices idx, fulmen::BatchBuilder& b) {
                                  for (Tensor& t : tensors.get(std::vector<int64_t>(idx.begin(), idx.end()))) b.push(t);
                              }};
    Dataset strict = Dataset::from_source(source);
    try {
        fulmen::Loader(strict, fulmen::LoaderOptions(4).workers(2));
        ADD_FAILURE() << "workers over a source without any_thread";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("any_thread"), std::string::npos) << e.what();
    }
    source.any_thread = true;
    fulmen::Loader relaxed(Dataset::from_source(source), fulmen::LoaderOptions(4, true, 3).workers(3));
    EXPECT_EQ(relaxed.len(), 5u);
    EXPECT_THROW(fulmen::Loader(tensors, fulmen::LoaderOptions(4).workers(65)), fulmen::Error);
}

TEST_F(DataTest, HostDataSourceErrorsAtCreation) {
    EXPECT_THROW(Dataset::from_source({[]() -> size_t { throw std::length_error("no length"); }, [](auto, auto&) {}}),
                 std::length_error);
    try {
        Dataset::from_source({{}, [](fulmen::Indices, fulmen::BatchBuilder&) {}});
        ADD_FAILURE() << "a source without len was accepted";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
    }
}

namespace {

class LayerTest : public FulmenTest {};

TEST_F(LayerTest, NormsPReLUUnflattenAndActivations) {
    using fulmen::Model;
    Model gn = Model::group_norm(2, 4);
    EXPECT_EQ(gn.state_dict_names(), (std::vector<std::string>{"weight", "bias"}));
    EXPECT_EQ(gn.forward(Tensor::randn({3, 4, 5})).shape(), (Shape{3, 4, 5}));
    Model rms = Model::rms_norm({3});
    Tensor y = rms.forward(Tensor::from_vector(std::vector<float>{1, 2, 3}, {1, 3}));
    EXPECT_NEAR(y.to_vector<float>()[0], 0.4629101f, 1e-6);
    Model prelu = Model::prelu(2);
    EXPECT_EQ(prelu.state_dict_get("weight").to_vector<float>(), (std::vector<float>{0.25f, 0.25f}));
    EXPECT_EQ(Model::unflatten(1, {2, -1}).forward(Tensor::zeros({2, 6})).shape(), (Shape{2, 2, 3}));
    EXPECT_EQ(Model::conv1d(2, 3, 3, 2, 1).forward(Tensor::zeros({1, 2, 5})).shape(), (Shape{1, 3, 3}));
    EXPECT_EQ(Model::dropout2d(0.25).eval().forward(Tensor::ones({1, 2, 2, 2})).sum().item(), 8.0);
    Model padded = Model::embedding(4, 2, 0);
    EXPECT_EQ(padded.state_dict_get("weight").narrow(0, 0, 1).to_vector<float>(), (std::vector<float>{0, 0}));
    Model mish = Model::activation(fulmen::Activation::Mish);
    EXPECT_NEAR(mish.forward(Tensor::from_vector(std::vector<float>{0.5f})).item(), 0.3752452, 1e-6);
}

TEST_F(LayerTest, SequenceLayersRunWithSeveralInputs) {
    using fulmen::Model;
    fulmen::manual_seed(0);
    Model lstm = Model::lstm(3, 4, fulmen::RnnOptions().layers(2).both_directions().batch_first_layout());
    EXPECT_EQ(lstm.state_dict_len(), 16u);
    EXPECT_EQ(lstm.state_dict_name(4), "weight_ih_l0_reverse");
    Tensor x = Tensor::randn({2, 5, 3});
    Tensor lengths = Tensor::from_vector(std::vector<int64_t>{3, 5});
    std::vector<Tensor> out = lstm.forward_multi({&x, nullptr, nullptr, &lengths});
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].shape(), (Shape{2, 5, 8}));
    EXPECT_EQ(out[1].shape(), (Shape{4, 2, 4}));
    // Outputs past a sequence's length are zero.
    EXPECT_EQ(out[0].narrow(0, 0, 1).narrow(1, 3, 2).abs().sum().item(), 0.0);
    EXPECT_EQ(lstm.forward(x).shape(), (Shape{2, 5, 8}));
    Tensor empty = std::move(x);
    EXPECT_THROW(lstm.forward_multi({&x}), fulmen::Error);  // a moved-from Tensor is not "left out"

    Model gru = Model::gru(3, 4);
    EXPECT_EQ(gru.forward_multi({&empty}).size(), 2u);
    EXPECT_EQ(Model::rnn(2, 3, fulmen::Activation::Relu).forward(Tensor::zeros({4, 2})).shape(), (Shape{4, 3}));

    Model mha = Model::multihead_attention(8, 2, 0.0, true, true);
    Tensor q = Tensor::randn({2, 3, 8}), kv = Tensor::randn({2, 5, 8});
    std::vector<Tensor> attn = mha.forward_multi({&q, &kv, &kv});
    EXPECT_EQ(attn[0].shape(), (Shape{2, 3, 8}));
    EXPECT_EQ(attn[1].shape(), (Shape{2, 3, 5}));
    EXPECT_NEAR(attn[1].sum().item(), 6.0, 1e-4);  // each query's weights sum to 1

    fulmen::TransformerOptions opts;
    opts.dim_feedforward = 16;
    opts.batch_first = true;
    opts.act(fulmen::Activation::Gelu);
    Model enc = Model::transformer_encoder_layer(8, 2, opts.act(fulmen::Activation::Gelu));
    Tensor mask = Tensor::ones({3, 3}).triu(1).to(fulmen::DType::Bool);
    EXPECT_EQ(enc.forward_multi({&q, &mask})[0].shape(), (Shape{2, 3, 8}));
    Model dec = Model::transformer_decoder_layer(8, 2, opts);
    EXPECT_EQ(dec.state_dict_len(), 18u);
    EXPECT_EQ(dec.forward_multi({&q, &kv, &mask})[0].shape(), (Shape{2, 3, 8}));
    try {
        dec.forward(q);
        ADD_FAILURE() << "a decoder layer ran without memory";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
    }
}

TEST_F(LayerTest, SpatialLayers) {
    using fulmen::Model;
    EXPECT_EQ(Model::conv3d(2, 3, fulmen::Conv3dOptions(2)).forward(Tensor::zeros({1, 2, 3, 3, 3})).shape(),
              (Shape{1, 3, 2, 2, 2}));
    fulmen::ConvTransposeOptions ct(2, 3);
    ct.stride[0] = ct.stride[1] = 2;
    EXPECT_EQ(Model::conv_transpose(2, 3, ct).forward(Tensor::zeros({1, 2, 3, 3})).shape(), (Shape{1, 3, 7, 7}));
    Model norm = Model::instance_norm(2, 3, 1e-5, 0.1, true, true);
    EXPECT_EQ(norm.state_dict_len(), 5u);
    EXPECT_EQ(Model::adaptive_avg_pool({2, -1}).forward(Tensor::ones({1, 2, 5, 4})).shape(), (Shape{1, 2, 2, 4}));
    EXPECT_EQ(Model::adaptive_max_pool({3}).forward(Tensor::ones({2, 7})).shape(), (Shape{2, 3}));
    EXPECT_EQ(Model::upsample(2.0, "bilinear", true).forward(Tensor::ones({1, 1, 2, 3})).shape(), (Shape{1, 1, 4, 6}));
    EXPECT_EQ(Model::upsample(Shape{5}).forward(Tensor::ones({1, 2, 3})).shape(), (Shape{1, 2, 5}));
    EXPECT_EQ(Tensor::ones({1, 1, 3, 3}).interpolate({3, 4}, 0, "bicubic").shape(), (Shape{1, 1, 3, 4}));
    EXPECT_THROW(Model::upsample(2.0, "area"), fulmen::Error);
}

}  // namespace

TEST_F(OptimTest, Metrics) {
    // Binary: probabilities for targets [1, 0, 0, 1]; at 0.3 tp 2, fp 1, fn 0, tn 1.
    Tensor probs = Tensor::from_vector(std::vector<float>{0.9f, 0.2f, 0.6f, 0.4f});
    Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 0, 0, 1});
    fulmen::MetricOptions f1_options(fulmen::MetricKind::f1);
    f1_options.threshold = 0.3;
    fulmen::Metric f1(f1_options);
    f1.update(probs, target);
    EXPECT_NEAR(f1.compute(), 0.8, 1e-12);
    f1.update(probs, target);  // accumulates: the same rates
    EXPECT_NEAR(f1.compute(), 0.8, 1e-12);
    f1.reset();
    EXPECT_THROW(f1.compute(), fulmen::Error);  // nothing since the reset

    fulmen::Metric auroc(fulmen::MetricOptions(fulmen::MetricKind::auroc));
    auroc.update(probs, target);
    EXPECT_DOUBLE_EQ(auroc.compute(), 0.75);

    // Multiclass scores: predicted [0, 2, 2, 1] for targets [0, 1, 2, 1].
    Tensor scores = Tensor::from_vector(std::vector<float>{3, 1, 0, 0, 1, 2, 0, 0, 5, 0, 4, 1}, {4, 3});
    Tensor classes = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 1});
    fulmen::Metric macro(fulmen::MetricOptions(fulmen::MetricKind::accuracy, 3));
    macro.update(scores, classes);
    EXPECT_NEAR(macro.compute(), 2.5 / 3, 1e-12);
    fulmen::Metric micro(fulmen::MetricOptions(fulmen::MetricKind::accuracy, 3).with_average(fulmen::Average::micro));
    micro.update(scores, classes);
    EXPECT_DOUBLE_EQ(micro.compute(), 0.75);
    EXPECT_THROW(micro.update(scores, target.reshape({2, 2})), fulmen::Error);

    fulmen::Metric mse(fulmen::MetricOptions(fulmen::MetricKind::mse));
    mse.update(Tensor::from_vector(std::vector<float>{1, 2, 3}), Tensor::from_vector(std::vector<float>{1, 1, 5}));
    EXPECT_NEAR(mse.compute(), 5.0 / 3, 1e-12);
    EXPECT_THROW(fulmen::Metric(fulmen::MetricOptions(fulmen::MetricKind::f1, 1)), fulmen::Error);
}

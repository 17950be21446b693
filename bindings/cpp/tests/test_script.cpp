// TorchScript models through the C++ binding: buffers, values in and out of
// scripted methods, a fit driven by the scripted training_step, saving back.
#include "common.hpp"

#include <filesystem>

using fulmen::Batch;
using fulmen::Dataset;
using fulmen::Loader;
using fulmen::Model;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Value;
using fulmen::ValueKind;
using fulmen_test::FulmenTest;

namespace {

std::string fixture(const char* name) {
    const char* dir = std::getenv("FULMEN_FIXTURES");
    return (std::filesystem::path(dir != nullptr ? dir : "tests/fixtures") / name).string();
}

/// category in 0..5, three numeric features, class = numeric[0] + (category odd) > 0.5.
Dataset tabular(int64_t n) {
    std::vector<int64_t> cat(n), target(n);
    Tensor numeric = Tensor::randn({n, 3});
    std::vector<float> nv = numeric.to_vector<float>();
    for (int64_t i = 0; i < n; i++) {
        cat[i] = (i * 7) % 5;
        target[i] = nv[3 * i] + static_cast<float>(cat[i] % 2) > 0.5f ? 1 : 0;
    }
    return Dataset::from_tensors({Tensor::from_vector(cat), numeric, Tensor::from_vector(target)});
}

}  // namespace

class ScriptTest : public FulmenTest {};

TEST_F(ScriptTest, ValuesInAndOut) {
    Model m = Model::load_torchscript(fixture("values_scripted.pt"), fulmen::Device::cpu());
    EXPECT_EQ(m.state_dict_names(), (std::vector<std::string>{"scale", "calls"}));
    Tensor x = Tensor::from_vector(std::vector<float>{1.0f, -2.0f});
    Value vx = Value::of_tensor(x), none = Value::none();
    Value out = m.call_method("forward", {&vx, &none});
    EXPECT_EQ(out.kind(), ValueKind::Tuple);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].to_tensor().to_vector<float>(), (std::vector<float>{2.0f, -4.0f}));
    Value list = Value::list({&vx}), w = Value::of_double(3.0), weights = Value::dict({{"w", &w}});
    Value flip = Value::of_bool(false), k = Value::of_int(1), label = Value::of_string("y");
    Value mixed = m.call_method("mix", {&list, &weights, &flip, &k, &label});
    EXPECT_EQ(mixed.entry(0).first.to_string(), "y");
    EXPECT_EQ(mixed.at("y")[0].to_tensor().to_vector<float>(), (std::vector<float>{4.0f, -5.0f}));
    Value n = Value::of_int(3), f = Value::of_double(1.0), ints = Value::list({&k});
    Value d = m.call_method("describe", {&n, &f, &ints});
    EXPECT_EQ(d[0].to_int(), 6);
    EXPECT_EQ(d[1].to_double(), 0.5);
    EXPECT_TRUE(d[2].to_bool());
    EXPECT_EQ(d[4].kind(), ValueKind::None);
    try {
        m.call_method("nope");
        ADD_FAILURE() << "an unknown method ran";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("describe"), std::string::npos);
    }
    Value moved = std::move(n);
    EXPECT_THROW(m.call_method("describe", {&n, &f, &ints}), fulmen::Error);
    EXPECT_THROW(Value::tuple({nullptr}), fulmen::Error);
}

TEST_F(ScriptTest, FitRunsTheScriptedSteps) {
    Model m = Model::load_torchscript(fixture("tabular_scripted.pt"));
    EXPECT_EQ(m.state_dict_len(), 10u);
    Dataset train_ds = tabular(512), val_ds = tabular(128);
    auto step = [&m](const char* method, StepContext& ctx, const Batch& batch) {
        Value b = batch.to_value(), idx = Value::of_int(ctx.batch_idx());
        Tensor loss = m.call_method(method, {&b, &idx}).at("loss").to_tensor();
        ctx.log(std::string(method) == "training_step" ? "train_loss" : "val_loss", loss.item());
        return loss;
    };
    fulmen::LightningModule module =
        fulmen::LightningModule::builder(m)
            .training_step([&](StepContext& ctx, const Batch& batch) { return step("training_step", ctx, batch); })
            .validation_step([&](StepContext& ctx, const Batch& batch) { step("validation_step", ctx, batch); })
            .configure_optimizers([&](fulmen::OptimizerConfig& config) {
                config.add(fulmen::Optimizer::adam(m, fulmen::AdamOptions(0.02)));
            })
            .build();
    fulmen::Trainer trainer(fulmen_test::quiet_options(6).set("logger", false));
    trainer.fit(module, Loader(train_ds, 32, true), Loader(val_ds, 32));
    EXPECT_LT(trainer.callback_metric("val_loss"), 0.45);
    EXPECT_EQ(m.state_dict_get("norm.num_batches_tracked").item(), 96.0);
    auto path = fulmen_test::scratch() / "tuned.pt";
    m.eval().save_torchscript(path.string());
    Model back = Model::load_torchscript(path.string());
    back.eval();
    Tensor c = Tensor::from_vector(std::vector<int64_t>{0, 3}), x = Tensor::randn({2, 3});
    Value vc = Value::of_tensor(c), vx = Value::of_tensor(x);
    EXPECT_EQ(m.call_method("predict_step", {&vc, &vx})[0].to_tensor().to_vector<float>(),
              back.call_method("predict_step", {&vc, &vx})[0].to_tensor().to_vector<float>());
    back.to(fulmen::DType::F64);
    EXPECT_EQ(back.state_dict_get("norm.num_batches_tracked").dtype(), fulmen::DType::I64);
    EXPECT_THROW(Model::linear(2, 2).save_torchscript(path.string()), fulmen::Error);
}

TEST_F(ScriptTest, ExportedProgramTrainsThroughFit) {
    Model m = Model::load_exported(fixture("exported_bn.pt2"));
    EXPECT_EQ(m.state_dict_len(), 9u);
    Tensor x = Tensor::randn({64, 4});
    std::vector<float> xv = x.to_vector<float>();
    std::vector<int64_t> y(64);
    for (size_t i = 0; i < y.size(); i++) {
        y[i] = xv[4 * i] > 0.5f ? 2 : xv[4 * i] > -0.5f ? 1 : 0;
    }
    Dataset ds = Dataset::from_tensors({x, Tensor::from_vector(y)});
    fulmen::LightningModule module =
        fulmen::LightningModule::builder(m)
            .training_step([&](StepContext& ctx, const Batch& batch) {
                Value b = batch.to_value();
                Tensor loss = m.call_method("training_step", {&b}).at("loss").to_tensor();
                ctx.log("train_loss", loss.item());
                return loss;
            })
            .configure_optimizers([&](fulmen::OptimizerConfig& config) {
                config.add(fulmen::Optimizer::adam(m, fulmen::AdamOptions(0.02)));
            })
            .build();
    fulmen::Trainer trainer(fulmen_test::quiet_options(3).set("logger", false));
    trainer.fit(module, Loader(ds, 16));
    EXPECT_EQ(m.state_dict_get("bn.num_batches_tracked").item(), 12.0);
    EXPECT_EQ(m.forward(Tensor::randn({5, 4})).shape(), (std::vector<int64_t>{5, 3}));
    EXPECT_THROW(m.call_method("validation_step", {}), fulmen::Error);
    EXPECT_THROW(Model::load_exported(fixture("mlp_scripted.pt")), fulmen::Error);
}

TEST_F(ScriptTest, TracedModelSavesAndLoadsBack) {
    Model m = Model::sequential({Model::linear(3, 8), Model::batch_norm(8), Model::activation(fulmen::Activation::Relu),
                                 Model::dropout(0.5), Model::linear(8, 2)});
    Tensor x = Tensor::randn({4, 3});
    (void)m.forward(Tensor::randn({6, 3}));  // running statistics move
    Model traced = m.to_torchscript({&x});
    EXPECT_TRUE(m.is_training());
    EXPECT_FALSE(traced.is_training());
    EXPECT_EQ(traced.state_dict_names(), m.state_dict_names());
    m.eval();
    EXPECT_EQ(traced.forward(x).to_vector<float>(), m.forward(x).to_vector<float>());
    auto path = fulmen_test::scratch() / "traced.pt";
    traced.save_torchscript(path.string());
    Model back = Model::load_torchscript(path.string());
    back.eval();
    Tensor other = Tensor::randn({2, 3});
    EXPECT_EQ(back.forward(other).to_vector<float>(), m.forward(other).to_vector<float>());
    try {
        m.to_torchscript({});
        ADD_FAILURE() << "a trace without inputs succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
    }
    Tensor wrong = Tensor::randn({4, 5});
    EXPECT_THROW(m.to_torchscript({&wrong}), fulmen::Error);
}

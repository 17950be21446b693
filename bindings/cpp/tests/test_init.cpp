// In-place changes and nn.init on a model's parameters through the C++ binding.
#include "common.hpp"

#include <cmath>

using fulmen::Model;
using fulmen::Tensor;
using fulmen_test::FulmenTest;

class InitTest : public FulmenTest {};

namespace {

/// sum(v[i] * i) / n, as the PyTorch reference values were taken.
double weighted_sum(const Tensor& t) {
    std::vector<double> v = t.to(fulmen::DType::F64).to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < v.size(); i++) s += v[i] * static_cast<double>(i);
    return s / static_cast<double>(v.size());
}

}  // namespace

TEST_F(InitTest, SameValuesAsPyTorch) {
    Model m = Model::linear(6, 4);
    Tensor w = m.state_dict_get("weight");
    fulmen::manual_seed(0);
    fulmen::init::xavier_uniform_(w, 1.5);
    EXPECT_NEAR(weighted_sum(w), 0.3169561307877302, 1e-6);
    Tensor k = Tensor::zeros({8, 3, 3, 3});
    fulmen::manual_seed(2);
    fulmen::init::kaiming_uniform_(k, 0.1, fulmen::FanMode::FanOut, "leaky_relu");
    EXPECT_NEAR(weighted_sum(k), -2.0887617610418667, 1e-6);
    Tensor o = Tensor::zeros({3, 7});
    fulmen::manual_seed(5);
    fulmen::init::orthogonal_(o, 2.0);
    EXPECT_NEAR(weighted_sum(o), -0.19455409049987793, 1e-6);
    Tensor t = Tensor::zeros({1000});
    fulmen::manual_seed(4);
    fulmen::init::trunc_normal_(t, 0.5, 2.0, -1.0, 3.0);
    EXPECT_NEAR(weighted_sum(t), 433.26829408571126, 1e-4);
    EXPECT_NEAR(fulmen::init::calculate_gain("relu"), std::sqrt(2.0), 1e-12);
    EXPECT_THROW(fulmen::init::xavier_normal_(m.state_dict_get("bias")), fulmen::Error);
}

TEST_F(InitTest, EmaAndHostData) {
    Model m = Model::linear(3, 2), shadow = Model::linear(3, 2);
    Tensor w = m.state_dict_get("weight"), ema = shadow.state_dict_get("weight");
    w.copy_from(std::vector<float>{1, 2, 3, 4, 5, 6});
    ema.copy_from(std::vector<int64_t>{6, 5, 4, 3, 2, 1});
    ema.mul_(0.9).add_(w, 0.1);
    std::vector<float> got = ema.to_vector<float>(), want{5.5f, 4.7f, 3.9f, 3.1f, 2.3f, 1.5f};
    for (size_t i = 0; i < want.size(); i++) EXPECT_NEAR(got[i], want[i], 1e-6);
    w.copy_(ema).mul_(Tensor::from_vector(std::vector<float>{1, 0, 1})).clamp_(NAN, 3.5).add_(1.0);
    got = w.to_vector<float>();
    want = {4.5f, 1.0f, 4.5f, 4.1f, 1.0f, 2.5f};
    for (size_t i = 0; i < want.size(); i++) EXPECT_NEAR(got[i], want[i], 1e-6);
    m.state_dict_get("bias").fill_(0.5).zero_();
    EXPECT_EQ(m.state_dict_get("bias").to_vector<float>(), (std::vector<float>{0, 0}));
    fulmen::manual_seed(7);
    Tensor u = Tensor::zeros({10}, fulmen::DType::F64);
    u.uniform_(-2, 3);
    EXPECT_NEAR(weighted_sum(u), 6.243837720587275, 1e-9);
    EXPECT_THROW(w.copy_from(std::vector<float>{1, 2}), fulmen::Error);
    EXPECT_THROW(w.normal_(0, -1), fulmen::Error);
}

TEST_F(InitTest, BuiltOnTheMetaDevice) {
    auto build = [] {
        Model m = Model::sequential();
        m.push(Model::linear(3, 4)).push(Model::linear(4, 2));
        fulmen::init::orthogonal_(m.state_dict_get("1.weight"), 0.5);
        return m;
    };
    fulmen::manual_seed(3);
    Model eager = build();
    fulmen::manual_seed(3);
    Model meta = [&] {
        fulmen::MetaInit scope;
        return build();
    }();
    EXPECT_TRUE(meta.holds_meta());
    EXPECT_THROW(meta.state_dict_get("0.bias").to_vector<float>(), fulmen::Error); // no values yet
    meta.materialize();
    EXPECT_FALSE(meta.holds_meta());
    for (const char* name : {"0.weight", "0.bias", "1.weight", "1.bias"}) {
        EXPECT_EQ(meta.state_dict_get(name).to_vector<float>(), eager.state_dict_get(name).to_vector<float>()) << name;
    }
}

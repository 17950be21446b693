// Modules defined in C++: a forward lambda over a registered parameter, a
// registered buffer and a child, alone and inside a Sequential, trained.
#include "common.hpp"

using fulmen::HostCall;
using fulmen::Model;
using fulmen::Tensor;
using fulmen_test::FulmenTest;

class HostModuleTest : public FulmenTest {};

namespace {

/// forward(x) = proj(x) * scale + x, counting calls in the "steps" buffer.
Model residual(int* calls) {
    Model m = fulmen::host_module(1, [calls](HostCall& call, const std::vector<const Tensor*>& in) {
        ++*calls;
        call.get("steps").add_(1.0);
        Tensor p = std::move(call.forward_child("proj", {in.at(0)}).at(0));
        std::vector<Tensor> out;
        out.push_back(p * call.get("scale") + *in.at(0));
        return out;
    });
    m.add("proj", Model::linear(4, 4));
    fulmen::register_parameter(m, "scale", Tensor::ones({4}));
    fulmen::register_buffer(m, "steps", Tensor::zeros({1}, fulmen::DType::I64));
    return m;
}

}  // namespace

TEST_F(HostModuleTest, ForwardStateAndTraining) {
    int calls = 0;
    Model m = residual(&calls);
    EXPECT_EQ(m.state_dict_names(), (std::vector<std::string>{"scale", "steps", "proj.weight", "proj.bias"}));
    EXPECT_EQ(m.num_parameters(), 24);
    Tensor x = Tensor::randn({3, 4});
    fulmen::Optimizer opt = fulmen::Optimizer::sgd(m, fulmen::SgdOptions(0.1));
    double first = 0, last = 0;
    for (int i = 0; i < 20; i++) {
        opt.zero_grad();
        Tensor loss = (m.forward(x) * m.forward(x)).mean();
        (i == 0 ? first : last) = loss.item();
        loss.backward();
        opt.step();
    }
    EXPECT_LT(last, first * 0.5);
    EXPECT_EQ(calls, 40);
    EXPECT_EQ(m.state_dict_get("steps").item(), 40.0);
    EXPECT_NE(m.state_dict_get("scale").to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
    Model seq = Model::sequential({residual(&calls), Model::relu(), Model::linear(4, 2)});
    EXPECT_EQ(seq.forward(x).shape(), (fulmen::Shape{3, 2}));
    EXPECT_THROW(fulmen::register_parameter(m, "scale", Tensor::ones({1})), fulmen::Error);
    Model wrong = fulmen::host_module(1, [](HostCall&, const std::vector<const Tensor*>&) {
        return std::vector<Tensor>{};
    });
    EXPECT_THROW(wrong.forward(x), fulmen::Error);
}

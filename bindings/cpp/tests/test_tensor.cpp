// Errors, moved-from objects and tensors through the C++ binding.
#include "common.hpp"

#include <cmath>
#include <stdexcept>
#include <type_traits>

using fulmen::DType;
using fulmen::Shape;
using fulmen::Tensor;
using fulmen_test::FulmenTest;

namespace {

/// Runs `f`, expecting a fulmen::Error with `code`; returns its message.
template <class F>
std::string expect_error(F&& f, fulmen::Code code) {
    try {
        f();
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no fulmen::Error thrown";
    return {};
}

template <class T>
void expect_round_trip(const std::vector<T>& values, DType dtype) {
    Tensor t = Tensor::from_vector(values, {2, static_cast<int64_t>(values.size() / 2)});
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.numel(), values.size());
    EXPECT_EQ(t.shape(), (Shape{2, static_cast<int64_t>(values.size() / 2)}));
    std::vector<T> back = t.to_vector<T>();
    ASSERT_EQ(back.size(), values.size());
    for (size_t i = 0; i < values.size(); i++) {
        if constexpr (std::is_same_v<T, fulmen::Half> || std::is_same_v<T, fulmen::BFloat16>) {
            EXPECT_EQ(back[i].bits, values[i].bits);
        } else {
            EXPECT_EQ(back[i], values[i]);
        }
    }
}

}  // namespace

class ErrorTest : public FulmenTest {};
class TensorTest : public FulmenTest {};

TEST_F(ErrorTest, CheckThrowsWithCodeAndMessageAndFreesTheError) {
    EXPECT_NO_THROW(fulmen::check(nullptr));
    std::string msg = expect_error([] { fulmen::check(fulmen_error_new(FULMEN_CODE_IO, "disk gone")); }, FULMEN_CODE_IO);
    EXPECT_EQ(msg, "disk gone");
    static_assert(std::is_base_of_v<std::runtime_error, fulmen::Error>);
}

TEST_F(ErrorTest, FailingCallsThrowTheirCode) {
    Tensor a = Tensor::ones({2, 3});
    Tensor b = Tensor::ones({2, 3});
    std::string msg = expect_error([&] { a.matmul(b); }, FULMEN_CODE_SHAPE_MISMATCH);
    EXPECT_NE(msg.find("inner dimensions"), std::string::npos) << msg;
    expect_error([&] { Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}); }, FULMEN_CODE_SHAPE_MISMATCH);
    Tensor float_index = Tensor::zeros({1});
    expect_error([&] { a.index_select(0, float_index); }, FULMEN_CODE_DTYPE_MISMATCH);
    expect_error([] { fulmen::Dataset::from_csv("/no/such/file.csv"); }, FULMEN_CODE_IO);
}

TEST_F(ErrorTest, MovedFromObjectsAreEmptyAndThrowNullArgument) {
    Tensor a = Tensor::ones({3});
    Tensor b = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_TRUE(b);
    expect_error([&] { a.numel(); }, FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(b.numel(), 3u);

    fulmen::Model m = fulmen::Model::linear(2, 2);
    fulmen::Model m2 = std::move(m);
    expect_error([&] { m.num_parameters(); }, FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(m2.num_parameters(), 6);

    Tensor c;
    c = std::move(b);  // move assignment frees nothing twice
    EXPECT_EQ(c.numel(), 3u);
}

TEST_F(ErrorTest, ReleaseAndAdoptHandOverOwnership) {
    Tensor a = Tensor::full({2}, 7.0);
    fulmen_tensor* raw = a.release();
    EXPECT_FALSE(a);
    double v = 0;
    fulmen_tensor* first = nullptr;
    fulmen::check(fulmen_tensor_sum(raw, &first));
    fulmen::check(fulmen_tensor_item(first, &v));
    EXPECT_EQ(v, 14.0);
    fulmen_tensor_free(first);
    Tensor back = Tensor::adopt(raw);
    EXPECT_EQ(back.sum().item(), 14.0);
}

TEST_F(TensorTest, FromVectorRoundTripsEveryDType) {
    expect_round_trip<float>({1.5f, -2, 3, 4}, DType::F32);
    expect_round_trip<double>({1.25, -2, 3, 4e10}, DType::F64);
    expect_round_trip<int64_t>({1, -2, 3, int64_t{1} << 40}, DType::I64);
    expect_round_trip<int32_t>({1, -2, 3, 1 << 30}, DType::I32);
    expect_round_trip<int16_t>({1, -2, 3, 30000}, DType::I16);
    expect_round_trip<int8_t>({1, -2, 3, 127}, DType::I8);
    expect_round_trip<uint8_t>({1, 2, 3, 255}, DType::U8);
    expect_round_trip<fulmen::Half>({1.5f, -2.0f, 0.25f, 65504.0f}, DType::F16);
    expect_round_trip<fulmen::BFloat16>({1.5f, -2.0f, 0.25f, 3.0e38f}, DType::BF16);

    Tensor flags = Tensor::from_vector(std::vector<bool>{true, false, true});
    EXPECT_EQ(flags.dtype(), DType::Bool);
    EXPECT_EQ(flags.to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

TEST_F(TensorTest, HalfAndBFloat16ConvertThroughTheLibrary) {
    EXPECT_EQ(fulmen::Half(1.5f).to_float(), 1.5f);
    EXPECT_EQ(fulmen::Half(1.0f).bits, 0x3C00);
    EXPECT_EQ(fulmen::BFloat16(1.0f).bits, 0x3F80);
    EXPECT_EQ(static_cast<float>(fulmen::BFloat16::from_bits(0x4000)), 2.0f);
    Tensor h = Tensor::from_vector(std::vector<fulmen::Half>{0.5f, 1.0f}).to(DType::F32);
    EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{0.5f, 1.0f}));
    Tensor f = Tensor::from_vector(std::vector<float>{0.5f, 1.0f});
    EXPECT_EQ(f.to_vector<fulmen::Half>()[1].bits, 0x3C00);  // converted on copy-out
}

TEST_F(TensorTest, FromDataAndFactories) {
    const int32_t raw[6] = {1, 2, 3, 4, 5, 6};
    Tensor t = Tensor::from_data(raw, {2, 3});
    EXPECT_EQ(t.dtype(), DType::I32);
    EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

    EXPECT_EQ(Tensor::zeros({2, 2}).to_vector<float>(), std::vector<float>(4, 0.0f));
    EXPECT_EQ(Tensor::ones({3}, DType::I64).to_vector<int64_t>(), std::vector<int64_t>(3, 1));
    EXPECT_EQ(Tensor::full({2}, 2.5, DType::F64).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
    EXPECT_EQ(Tensor::arange(0, 5).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
    EXPECT_EQ(Tensor::arange(1, 2, 0.5, DType::F64).to_vector<double>(), (std::vector<double>{1.0, 1.5}));
    Tensor s = Tensor::scalar(3.0, DType::I32);
    EXPECT_EQ(s.ndim(), 0u);
    EXPECT_EQ(s.item(), 3.0);

    fulmen::manual_seed(1);
    std::vector<float> r1 = Tensor::rand({100}).to_vector<float>();
    for (float v : r1) EXPECT_TRUE(v >= 0.0f && v < 1.0f);
    fulmen::manual_seed(1);
    EXPECT_EQ(Tensor::rand({100}).to_vector<float>(), r1);  // seeded
    Tensor n = Tensor::randn({1000}, DType::F64);
    EXPECT_NEAR(n.mean().item(), 0.0, 0.2);
    EXPECT_EQ(n.device(), fulmen::Device::cpu());
    EXPECT_EQ(n.to(fulmen::Device::cpu()).numel(), 1000u);
}

TEST_F(TensorTest, ArithmeticOperators) {
    Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3});
    Tensor b = Tensor::from_vector(std::vector<float>{4, 5, 6});
    EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{5, 7, 9}));
    EXPECT_EQ((b - a).to_vector<float>(), (std::vector<float>{3, 3, 3}));
    EXPECT_EQ((a * b).to_vector<float>(), (std::vector<float>{4, 10, 18}));
    EXPECT_EQ((b / a).to_vector<float>(), (std::vector<float>{4, 2.5, 2}));
    EXPECT_EQ((a + 1).to_vector<float>(), (std::vector<float>{2, 3, 4}));
    EXPECT_EQ((a - 1).to_vector<float>(), (std::vector<float>{0, 1, 2}));
    EXPECT_EQ((a * 2).to_vector<float>(), (std::vector<float>{2, 4, 6}));
    EXPECT_EQ((a / 2).to_vector<float>(), (std::vector<float>{0.5, 1, 1.5}));
    EXPECT_EQ((a / 2).dtype(), DType::F32);
    EXPECT_EQ((1 + a).to_vector<float>(), (std::vector<float>{2, 3, 4}));
    EXPECT_EQ((10 - a).to_vector<float>(), (std::vector<float>{9, 8, 7}));
    EXPECT_EQ((2 * a).to_vector<float>(), (std::vector<float>{2, 4, 6}));
    EXPECT_EQ((6 / a).to_vector<float>(), (std::vector<float>{6, 3, 2}));
    EXPECT_EQ((-a).to_vector<float>(), (std::vector<float>{-1, -2, -3}));
    EXPECT_EQ(a.pow(2).to_vector<float>(), (std::vector<float>{1, 4, 9}));
    EXPECT_EQ(a.pow(a).to_vector<float>(), (std::vector<float>{1, 4, 27}));
    EXPECT_EQ(a.clamp(1.5, 2.5).to_vector<float>(), (std::vector<float>{1.5, 2, 2.5}));
    EXPECT_EQ(a.neg().abs().to_vector<float>(), (std::vector<float>{1, 2, 3}));
    EXPECT_NEAR(a.exp().log().sum().item(), 6.0, 1e-5);
    EXPECT_EQ(Tensor::full({2}, 9).sqrt().to_vector<float>(), (std::vector<float>{3, 3}));
    Tensor m = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
    EXPECT_EQ(m.matmul(m).to_vector<float>(), (std::vector<float>{7, 10, 15, 22}));
}

TEST_F(TensorTest, Activations) {
    Tensor x = Tensor::from_vector(std::vector<float>{-1, 0, 2});
    EXPECT_EQ(x.relu().to_vector<float>(), (std::vector<float>{0, 0, 2}));
    EXPECT_NEAR(x.leaky_relu(0.1).to_vector<float>()[0], -0.1f, 1e-6);
    EXPECT_NEAR(x.sigmoid().to_vector<float>()[1], 0.5f, 1e-6);
    EXPECT_NEAR(x.tanh().to_vector<float>()[1], 0.0f, 1e-6);
    EXPECT_NEAR(x.gelu().to_vector<float>()[2], 1.9545f, 1e-3);
    EXPECT_NEAR(x.silu().to_vector<float>()[2], 2.0f / (1.0f + std::exp(-2.0f)), 1e-5);
    EXPECT_NEAR(x.softmax(0).sum().item(), 1.0, 1e-6);
    EXPECT_NEAR(x.log_softmax(-1).exp().sum().item(), 1.0, 1e-6);
}

TEST_F(TensorTest, Comparisons) {
    Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3});
    Tensor b = Tensor::from_vector(std::vector<float>{3, 2, 1});
    EXPECT_EQ(a.eq(b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
    EXPECT_EQ(a.ne(b).to_vector<bool>(), (std::vector<bool>{true, false, true}));
    EXPECT_EQ(a.lt(b).to_vector<bool>(), (std::vector<bool>{true, false, false}));
    EXPECT_EQ(a.le(b).to_vector<bool>(), (std::vector<bool>{true, true, false}));
    EXPECT_EQ(a.gt(b).to_vector<bool>(), (std::vector<bool>{false, false, true}));
    EXPECT_EQ(a.ge(b).to_vector<bool>(), (std::vector<bool>{false, true, true}));
    EXPECT_EQ(a.gt(1.5).dtype(), DType::Bool);
    EXPECT_EQ(a.gt(1.5).to_vector<bool>(), (std::vector<bool>{false, true, true}));
    EXPECT_EQ(a.eq(2).to_vector<bool>(), (std::vector<bool>{false, true, false}));
    EXPECT_EQ(a.ne(2).to_vector<bool>(), (std::vector<bool>{true, false, true}));
    EXPECT_EQ(a.lt(2).to_vector<bool>(), (std::vector<bool>{true, false, false}));
    EXPECT_EQ(a.le(2).to_vector<bool>(), (std::vector<bool>{true, true, false}));
    EXPECT_EQ(a.ge(2).to_vector<bool>(), (std::vector<bool>{false, true, true}));
}

TEST_F(TensorTest, Reductions) {
    Tensor m = Tensor::from_vector(std::vector<float>{1, 5, 3, 4, 2, 6}, {2, 3});
    EXPECT_EQ(m.sum().item(), 21.0);
    EXPECT_EQ(m.mean().item(), 3.5);
    EXPECT_EQ(m.sum({1}).to_vector<float>(), (std::vector<float>{9, 12}));
    EXPECT_EQ(m.mean({0}, true).shape(), (Shape{1, 3}));
    EXPECT_EQ(m.max().item(), 6.0);
    EXPECT_EQ(m.min().item(), 1.0);
    EXPECT_EQ(m.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(m.argmin(1, true).shape(), (Shape{2, 1}));
    EXPECT_EQ(m.argmax(1).dtype(), DType::I64);
}

TEST_F(TensorTest, ShapeOps) {
    Tensor t = Tensor::arange(0, 6).reshape({2, 3});
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.view({3, 2}).shape(), (Shape{3, 2}));
    EXPECT_EQ(t.reshape({-1}).shape(), (Shape{6}));
    EXPECT_EQ(t.transpose(0, 1).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
    EXPECT_EQ(t.permute({1, 0}).shape(), (Shape{3, 2}));
    EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3}));
    EXPECT_EQ(t.unsqueeze(0).squeeze(0).shape(), (Shape{2, 3}));
    EXPECT_EQ(t.unsqueeze(-1).flatten().shape(), (Shape{6}));
    EXPECT_EQ(t.unsqueeze(0).flatten(1, 2).shape(), (Shape{1, 6}));
    EXPECT_EQ(t.narrow(1, 1, 2).to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
}

TEST_F(TensorTest, CatStackAndIndexing) {
    Tensor a = Tensor::ones({2, 2});
    Tensor b = Tensor::zeros({1, 2});
    EXPECT_EQ(fulmen::cat({a, b}, 0).shape(), (Shape{3, 2}));
    std::vector<Tensor> parts;
    parts.push_back(Tensor::ones({2}));
    parts.push_back(Tensor::zeros({2}));
    EXPECT_EQ(fulmen::stack(parts, 1).shape(), (Shape{2, 2}));
    EXPECT_EQ(fulmen::cat(parts).to_vector<float>(), (std::vector<float>{1, 1, 0, 0}));
    EXPECT_EQ(fulmen::stack({a, a}).shape(), (Shape{2, 2, 2}));

    Tensor t = Tensor::arange(0, 6).reshape({2, 3});
    Tensor idx = Tensor::from_vector(std::vector<int64_t>{2, 0});
    EXPECT_EQ(t.index_select(1, idx).to_vector<float>(), (std::vector<float>{2, 0, 5, 3}));
    Tensor g = Tensor::from_vector(std::vector<int64_t>{1, 2}, {2, 1});
    EXPECT_EQ(t.gather(1, g).to_vector<float>(), (std::vector<float>{1, 5}));
}

TEST_F(TensorTest, Losses) {
    using fulmen::Reduction;
    Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3});
    Tensor y = Tensor::from_vector(std::vector<float>{1, 4, 0});
    EXPECT_NEAR(fulmen::loss::mse(x, y).item(), (0 + 4 + 9) / 3.0, 1e-6);
    EXPECT_NEAR(fulmen::loss::mse(x, y, Reduction::Sum).item(), 13.0, 1e-6);
    EXPECT_EQ(fulmen::loss::l1(x, y, Reduction::None).to_vector<float>(), (std::vector<float>{0, 2, 3}));
    Tensor logits = Tensor::zeros({2, 4});
    Tensor cls = Tensor::from_vector(std::vector<int64_t>{1, 3});
    EXPECT_NEAR(fulmen::loss::cross_entropy(logits, cls).item(), std::log(4.0), 1e-6);
    EXPECT_NEAR(fulmen::loss::nll(logits.log_softmax(1), cls).item(), std::log(4.0), 1e-6);
    Tensor half = Tensor::full({3}, 0.5);
    EXPECT_NEAR(fulmen::loss::bce_with_logits(Tensor::zeros({3}), half).item(), std::log(2.0), 1e-6);
}

TEST_F(TensorTest, AutogradAndCopies) {
    Tensor w = Tensor::from_vector(std::vector<float>{1, -2, 3});
    w.set_requires_grad();
    EXPECT_TRUE(w.requires_grad());
    EXPECT_FALSE(w.grad().has_value());
    (w * w).sum().backward();
    std::optional<Tensor> g = w.grad();
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->to_vector<float>(), (std::vector<float>{2, -4, 6}));
    EXPECT_FALSE(w.detach().requires_grad());

    Tensor shared = w.detach().share();
    Tensor copy = w.detach().clone();
    EXPECT_EQ(copy.to_vector<float>(), w.to_vector<float>());
    EXPECT_EQ(w.to(DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(shared.numel(), 3u);
}

TEST_F(TensorTest, TensorsFromAnotherTranslationUnit) {
    Tensor t = fulmen_test::tensor_from_second_tu(4.0f);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{4.0f, 4.0f}));
}

// The generated tensor ops through the C++ binding: methods, free
// functions, pairs, lists (growing past the first 16 slots), defaults.
#include "common.hpp"

#include <cmath>

using fulmen::DType;
using fulmen::Shape;
using fulmen::Tensor;
using fulmen_test::FulmenTest;

namespace {

class TensorOpsTest : public FulmenTest {};

Tensor x23() { return Tensor::from_vector(std::vector<float>{3, 1, 2, 5, 4, 0}, {2, 3}); }

TEST_F(TensorOpsTest, PairsAndDefaults) {
    auto [values, indices] = x23().topk(2);
    EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{3, 2, 5, 4}));
    EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 0, 1}));
    auto [maxima, where_max] = x23().max_dim(0, true);
    EXPECT_EQ(maxima.shape(), (Shape{1, 3}));
    EXPECT_EQ(where_max.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0}));
    try {
        x23().topk(7);
        ADD_FAILURE() << "topk(7) of 3 columns succeeded";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_OUT_OF_RANGE);
    }
}

TEST_F(TensorOpsTest, ListsGrowPastTheFirstGuess) {
    std::vector<Tensor> pieces = Tensor::arange(0, 40).split(2);
    ASSERT_EQ(pieces.size(), 20u);
    EXPECT_EQ(pieces[19].to_vector<float>(), (std::vector<float>{38, 39}));
    std::vector<Tensor> rows = x23().unbind();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[1].to_vector<float>(), (std::vector<float>{5, 4, 0}));
    EXPECT_EQ(x23().chunk(4, 1).size(), 3u);
}

TEST_F(TensorOpsTest, CausalMaskTwoWays) {
    Tensor q = Tensor::randn({2, 4, 8});
    Tensor k = Tensor::randn({2, 4, 8});
    Tensor v = Tensor::randn({2, 4, 8});
    Tensor causal = fulmen::scaled_dot_product_attention(q, k, v, nullptr, 0.0, true);
    Tensor keep = Tensor::ones({4, 4}).tril().gt(0.5);
    Tensor masked = fulmen::scaled_dot_product_attention(q, k, v, &keep);
    EXPECT_LT((causal - masked).abs().max().item(), 1e-6);
    // By hand: scores masked with -inf where the mask is false.
    Tensor scores = q.matmul(k.transpose(1, 2)) * (1.0 / std::sqrt(8.0));
    Tensor weights = scores.masked_fill(keep.logical_not(), -INFINITY).softmax(-1);
    EXPECT_LT((weights.matmul(v) - causal).abs().max().item(), 1e-5);
}

TEST_F(TensorOpsTest, FunctionsAndElementwise) {
    Tensor x = x23();
    EXPECT_EQ(fulmen::einsum("ij,kj->ik", {x, x}).to_vector<float>(), (std::vector<float>{14, 19, 19, 41}));
    EXPECT_EQ(fulmen::linspace(0, 1, 5).to_vector<float>(), (std::vector<float>{0, 0.25, 0.5, 0.75, 1}));
    EXPECT_EQ(fulmen::where(x.gt(2.0), x, x.neg()).to_vector<float>(), (std::vector<float>{3, -1, -2, 5, 4, -0.0f}));
    EXPECT_EQ(x.cumsum(1).to_vector<float>(), (std::vector<float>{3, 4, 6, 5, 9, 9}));
    EXPECT_EQ(x.flip({1}).to_vector<float>(), (std::vector<float>{2, 1, 3, 0, 4, 5}));
    EXPECT_EQ(x.repeat({1, 2}).shape(), (Shape{2, 6}));
    EXPECT_EQ(x.unflatten(1, {3, 1}).shape(), (Shape{2, 3, 1}));
    Tensor labels = Tensor::from_vector(std::vector<int64_t>{2, 0});
    EXPECT_EQ(labels.one_hot(3).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
    EXPECT_NEAR(x.var({1}).to_vector<float>()[1], 7.0f, 1e-6);
    EXPECT_NEAR(x.softplus().to_vector<float>()[0], std::log1p(std::exp(3.0)), 1e-5);
}

TEST_F(TensorOpsTest, LossesWithTorchOptions) {
    Tensor logits = Tensor::from_vector(std::vector<float>{1, 2, 0.5, 0.1, -1, 2, 0.3, 0.3, 0.3, 2, 1, 0}, {4, 3});
    Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 2, -100, 0});
    Tensor weight = Tensor::from_vector(std::vector<float>{1, 2, 0.5});
    // F.cross_entropy(logits, target, weight=weight, label_smoothing=0.1) in PyTorch 2.13
    EXPECT_NEAR(fulmen::loss::cross_entropy_with_options(logits, target, &weight, -100, 0.1).item(), 0.522605, 1e-6);
    Tensor q = Tensor::from_vector(std::vector<float>{0.2, 0.8, 1, 0}, {2, 2}).log_softmax(1);
    Tensor p = Tensor::from_vector(std::vector<float>{0.3, 0.7, 0.5, 0.5}, {2, 2});
    EXPECT_NEAR(fulmen::loss::kl_div(q, p, false, fulmen::Reduction::BatchMean).item(), 0.0633691, 1e-6);
    EXPECT_NEAR(fulmen::loss::huber(p, p * 2.0).item(), fulmen::loss::mse(p, p * 2.0).item() / 2, 1e-7);
    // A moved-from Tensor is not a left-out optional argument.
    Tensor gone = std::move(weight);
    try {
        fulmen::loss::cross_entropy_with_options(logits, target, &weight, -100, 0.1);
        ADD_FAILURE() << "an empty Tensor was read as no weight";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
    }
}

}  // namespace

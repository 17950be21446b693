// Strategies (the registry, settings, TrainerOptions), the distributed
// functions before a job is joined, Ddp, Fsdp, and Loader::shard /
// Loader::batch. Nothing here joins a job in this process: the one test
// that joins (a world of one) runs in a fresh run of this binary.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using fulmen::Batch;
using fulmen::Dataset;
using fulmen::Ddp;
using fulmen::Fsdp;
using fulmen::ParallelStyle;
using fulmen::TensorParallel;
using fulmen::LightningModule;
using fulmen::Loader;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Strategy;
using fulmen::StrategyInfo;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen::TrainerOptions;
using fulmen_test::error_code;
using fulmen_test::error_message;
using fulmen_test::FulmenTest;

namespace {

/// A dataset of `n` samples whose only tensor is the sample index (F32, (n, 1)).
Dataset index_dataset(int64_t n) { return Dataset::from_tensors({Tensor::arange(0, static_cast<double>(n)).reshape({n, 1})}); }

/// The sample indices in a batch of an index_dataset.
std::vector<int64_t> ids_of(const std::vector<Tensor>& batch) {
    EXPECT_EQ(batch.size(), 1u);
    std::vector<int64_t> ids;
    if (batch.empty()) return ids;
    for (float v : batch[0].to_vector<float>()) ids.push_back(static_cast<int64_t>(v));
    return ids;
}

/// The sample indices of each batch `loader` yields in one predict run.
std::vector<std::vector<int64_t>> batches_of(const Loader& loader) {
    Model model = Model::linear(1, 1);
    std::vector<std::vector<int64_t>> seen;
    LightningModule module = LightningModule::builder(model)
                                 .predict_step([&](StepContext&, const Batch& batch) -> std::optional<Tensor> {
                                     std::vector<int64_t> ids;
                                     for (float v : batch[0].to_vector<float>()) ids.push_back(static_cast<int64_t>(v));
                                     seen.push_back(ids);
                                     return batch[0];
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false).set("strategy", "single_device"));
    std::optional<Tensor> all = trainer.predict(module, loader);
    size_t n = 0;
    for (const auto& b : seen) n += b.size();
    EXPECT_EQ(all.has_value() ? all->numel() : 0u, n);  // predict concatenates every batch
    return seen;
}

}  // namespace

class StrategyTest : public FulmenTest {};

TEST_F(StrategyTest, NameRoundTripsAndUnknownNamesAreErrors) {
    EXPECT_EQ(Strategy("ddp").name(), "ddp");
    EXPECT_EQ(Strategy(" DDP_Spawn ").name(), "ddp_spawn");  // trimmed, case-insensitive
    EXPECT_EQ(Strategy("single_device").name(), "single_device");
    EXPECT_EQ(error_code([] { Strategy("nope"); }), FULMEN_CODE_INVALID_ARGUMENT);
    std::string message = error_message([] { Strategy("nope"); });
    EXPECT_NE(message.find("ddp"), std::string::npos) << message;  // lists the registered names
    EXPECT_EQ(error_code([] { Strategy("deepspeed"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_NE(error_message([] { Strategy("deepspeed"); }).find("not available"), std::string::npos);
    // FSDP and its settings.
    Strategy fsdp = Strategy("fsdp")
                        .set("sharding_strategy", "SHARD_GRAD_OP")
                        .set("auto_wrap_policy", "Linear")
                        .set("state_dict_type", "sharded")
                        .set("sharding_strategy", "HYBRID_SHARD")
                        .set("param_dtype", "bf16")
                        .set("reduce_dtype", "fp32");
    EXPECT_EQ(fsdp.name(), "fsdp");
    EXPECT_EQ(error_code([] { Strategy("fsdp").set("sharding_strategy", "SHARD_ALL"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([] { Strategy("fsdp").set("param_dtype", "int8"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([] { Strategy("fsdp").set("auto_wrap_policy", "a.b"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([] { Strategy("fsdp").set("state_dict_type", "local"); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(StrategyTest, SettingsAcceptGoodValuesAndRefuseBadOnes) {
    Strategy s("ddp");
    s.set("find_unused_parameters", "true")
        .set("find_unused_parameters", false)
        .set("process_group_backend", "gloo")
        .set("process_group_backend", std::string("none"))
        .set("timeout", 60)
        .set("timeout", 2.5)
        .set("bucket_cap_mb", 10.0)
        .set("num_nodes", size_t{1});
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"colour", "red"},          {"timeout", "-1"},    {"timeout", "soon"},
        {"bucket_cap_mb", "0"},     {"num_nodes", "0"},   {"num_nodes", "1.5"},
        {"find_unused_parameters", "maybe"},               {"process_group_backend", "mpi"},
    };
    for (const auto& [key, value] : bad) {
        EXPECT_EQ(error_code([&] { s.set(key, value); }), FULMEN_CODE_INVALID_ARGUMENT) << key << "=" << value;
        EXPECT_EQ(s.name(), "ddp");  // the strategy is unchanged and still usable
    }
    EXPECT_NE(error_message([&] { s.set("colour", "red"); }).find("find_unused_parameters"), std::string::npos);
    s.set("timeout", "30");  // still accepts settings after refusals

    // Chained on a temporary, then moved into a variable.
    Strategy t = Strategy("ddp_find_unused_parameters_true").set("num_nodes", 2).set("timeout", 5);
    EXPECT_EQ(t.name(), "ddp_find_unused_parameters_true");

    // A moved-from (empty) strategy fails cleanly.
    Strategy moved = std::move(t);
    EXPECT_FALSE(static_cast<bool>(t));  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(error_code([&] { (void)t.name(); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([&] { t.set("timeout", 1); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(moved.name(), "ddp_find_unused_parameters_true");
}

TEST_F(StrategyTest, RegistryListsTheBuiltIns) {
    std::vector<StrategyInfo> entries = fulmen::strategy_registry();
    auto has = [&](const std::string& name) {
        return std::any_of(entries.begin(), entries.end(), [&](const StrategyInfo& e) { return e.name == name; });
    };
    EXPECT_TRUE(has("ddp"));
    EXPECT_TRUE(has("single_device"));
    EXPECT_TRUE(has("auto"));
    for (const StrategyInfo& e : entries) {
        EXPECT_FALSE(e.description.empty()) << e.name;
        EXPECT_EQ(Strategy(e.name).name(), e.name);  // every entry can be made
    }
}

TEST_F(StrategyTest, TrainerOptionsTakeAStrategy) {
    Strategy ddp = Strategy("ddp").set("timeout", 120);
    TrainerOptions options;
    options.set_strategy(ddp).set("strategy", "ddp_spawn");
    TrainerOptions chained = TrainerOptions().set_strategy(Strategy("single_device")).set("max_epochs", 1);
    EXPECT_EQ(error_code([] { TrainerOptions().set("strategy", "deepspeed"); }), FULMEN_CODE_INVALID_ARGUMENT);
    TrainerOptions().set("strategy", "fsdp").set("fsdp_sharding_strategy", "NO_SHARD");
    EXPECT_EQ(error_code([] { TrainerOptions().set("strategy", "nope"); }), FULMEN_CODE_INVALID_ARGUMENT);
    Strategy empty;
    EXPECT_EQ(error_code([&] { options.set_strategy(empty); }), FULMEN_CODE_NULL_ARGUMENT);

    // A single-device strategy object trains in this process.
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 4);
    Loader train(ds, 8);
    uint32_t group = 0;
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&](StepContext& ctx, const Batch& batch) {
                                     Tensor loss = fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
                                     ctx.log("loss", loss.item(), fulmen::Log::on_epoch | fulmen::Log::sync_dist);
                                     ctx.log("in_group", 3.0,
                                             fulmen::Log::on_epoch | fulmen::Log::sync_dist | fulmen::Log::reduce_sum |
                                                 fulmen::Log::group(group));
                                     return loss;
                                 })
                                 .on_hook([&](fulmen::Hook h, fulmen::HookContext& ctx) {
                                     if (h != fulmen::Hook::Setup) return;
                                     // One process: rank 0 is the only rank a group can hold.
                                     EXPECT_EQ(error_code([&] { ctx.new_group({1}); }), FULMEN_CODE_INVALID_ARGUMENT);
                                     group = ctx.new_group({0});
                                 })
                                 .configure_optimizers([&](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("logger", false).set_strategy(Strategy("single_device")));
    trainer.fit(module, train);
    EXPECT_EQ(trainer.global_step(), 4);
    EXPECT_TRUE(std::isfinite(trainer.callback_metric("loss")));
    EXPECT_EQ(group, 1u);
    EXPECT_EQ(trainer.callback_metric("in_group"), 12.0);  // 4 steps of 3, summed; the group of one reduces nothing
}

TEST_F(StrategyTest, LogFlagsIncludeSyncDist) {
    EXPECT_EQ(fulmen::Log::sync_dist, 8u);
    EXPECT_EQ(fulmen::Log::on_step | fulmen::Log::on_epoch | fulmen::Log::prog_bar | fulmen::Log::sync_dist, 15u);
    EXPECT_EQ(fulmen::Log::group(3), 3u << 16);
}

class DistributedTest : public FulmenTest {};

TEST_F(DistributedTest, BeforeJoiningOnlyLocalQueriesWork) {
    namespace dist = fulmen::distributed;
    EXPECT_FALSE(dist::is_joined());
    dist::Ranks r = dist::ranks();
    EXPECT_EQ(r.rank, 0u);
    EXPECT_EQ(r.local_rank, 0u);
    EXPECT_EQ(r.world_size, 1u);

    Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3});
    EXPECT_EQ(error_code([&] { dist::all_reduce(t, "sum"); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(error_code([&] { dist::all_reduce(t, "median"); }), FULMEN_CODE_INVALID_ARGUMENT);
    // XLA's all-reduce takes XLA tensors only (none here).
    EXPECT_EQ(error_code([&] { dist::xla_all_reduce(t, "sum"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { dist::xla_all_reduce(t, "median"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { dist::broadcast(t, 0); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(error_code([&] { dist::all_gather(t); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(error_code([] { dist::barrier(); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(error_code([] { dist::reduce_boolean_decision(true); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(error_code([] { dist::reduce_boolean_decision(false, false); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // untouched

    Tensor empty;
    EXPECT_EQ(error_code([&] { dist::all_reduce(empty, "sum"); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([] { dist::join(Strategy("ddp"), 0); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_FALSE(dist::is_joined());

    dist::abort("no job to end");  // without a job: nothing to do
    dist::shutdown(1.0);           // likewise
    dist::shutdown(0.0);
    EXPECT_EQ(error_code([] { dist::shutdown(-1.0); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_FALSE(dist::is_joined());
}

TEST_F(DistributedTest, DdpNeedsAJoinedJob) {
    Model model = fulmen_test::mlp();
    Strategy ddp("ddp");
    EXPECT_EQ(error_code([&] { Ddp d(model, ddp); }), FULMEN_CODE_INVALID_STATE);
    Ddp none;
    EXPECT_FALSE(static_cast<bool>(none));
    EXPECT_EQ(error_code([&] { none.prepare_forward(); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([&] { none.prepare_backward(Tensor::full({1}, 1.0)); }), FULMEN_CODE_NULL_ARGUMENT);
}

TEST_F(DistributedTest, FsdpNeedsAJoinedJob) {
    Model model = fulmen_test::mlp();
    Strategy fsdp("fsdp");
    EXPECT_EQ(error_code([&] { Fsdp f(model, fsdp); }), FULMEN_CODE_INVALID_STATE);
    Fsdp none;
    EXPECT_FALSE(static_cast<bool>(none));
    EXPECT_EQ(error_code([&] { none.prepare_forward(); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([&] { none.unshard(); }), FULMEN_CODE_NULL_ARGUMENT);
}

// The largest difference between two models' parameters.
static double max_param_diff(const Model& a, const Model& b) {
    std::vector<Tensor> pa = a.parameters(), pb = b.parameters();
    double worst = pa.size() == pb.size() ? 0.0 : 1e9;
    for (size_t i = 0; i < pa.size() && i < pb.size(); i++) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item());
    return worst;
}

// Trains `model`, wrapped by `w` (Fsdp or TensorParallel), and `plain`
// (the same seeded mlp) on the same batches with SGD; each step calls
// before(opt) ahead of the forward and clip() after the backward (the
// wrapper's calls, the clip returning the norm). 0 when the clip norms
// and, after w's unshard, reshard, unshard and release, the weights match.
template <typename Wrapper, typename Before, typename Clip>
static int train_beside_plain(Model& model, Model& plain, Wrapper& w, Before before, Clip clip) {
    fulmen::SgdOptions so;
    so.lr = 0.1;
    so.momentum = 0.9;
    Optimizer opt = Optimizer::sgd(model, so), plain_opt = Optimizer::sgd(plain, so);
    Loader loader(fulmen_test::blobs(32, 1), 8);
    for (size_t i = 0; i < loader.len(); i++) {
        std::vector<Tensor> b = loader.batch(0, i);
        before(opt);
        fulmen::loss::cross_entropy(model(b[0]), b[1]).backward();
        double norm = clip();
        plain_opt.zero_grad();
        fulmen::loss::cross_entropy(plain(b[0]), b[1]).backward();
        double plain_norm = fulmen::clip_grad_norm(plain, 0.5);
        opt.step();
        plain_opt.step();
        if (std::abs(norm - plain_norm) > 1e-5 * plain_norm) return 10;
    }
    w.unshard({opt});
    if (max_param_diff(model, plain) > 1e-6) return 11;
    w.reshard({opt});
    w.unshard({opt});
    w = Wrapper();  // freed after unshard: the model stays whole
    if (max_param_diff(model, plain) > 1e-6) return 12;
    return 0;
}

// In a world of one (joined in a process of its own: gtest's threadsafe
// death-test style runs the body in a fresh run of this binary), a loop on
// Fsdp makes the updates of the same loop without it.
static int fsdp_world_of_one() {
    Strategy s("fsdp");
    s.set("auto_wrap_policy", "Linear");
    fulmen::distributed::join(s, 1);
    fulmen::manual_seed(3);
    Model model = fulmen_test::mlp();
    fulmen::manual_seed(3);
    Model plain = fulmen_test::mlp();
    Fsdp fsdp(model, s);
    auto before = [&](Optimizer&) {
        fsdp.zero_grad();
        fsdp.prepare_forward();
    };
    auto clip = [&] {
        fsdp.finish_backward();
        return fsdp.clip_grad_norm(0.5);
    };
    int failed = train_beside_plain(model, plain, fsdp, before, clip);
    if (failed != 0) return failed;
    fulmen::distributed::shutdown(10);
    return 0;
}

TEST_F(DistributedTest, FsdpTrainsAsTheSameLoopWithoutIt) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(std::_Exit(fsdp_world_of_one()), ::testing::ExitedWithCode(0), "");
}

// A model without parameters is refused with a clear error, not a crash
// (c10d's check of the ranks' parameters reads the first one).
static int fsdp_without_parameters() {
    Strategy s("fsdp");
    fulmen::distributed::join(s, 1);
    Model relu = Model::activation(fulmen::Activation::Relu);
    if (error_code([&] { Fsdp f(relu, s); }) != FULMEN_CODE_INVALID_ARGUMENT) return 10;
    fulmen::distributed::shutdown(10);
    return 0;
}

TEST_F(DistributedTest, FsdpRefusesAModelWithoutParameters) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(std::_Exit(fsdp_without_parameters()), ::testing::ExitedWithCode(0), "");
}

TEST_F(DistributedTest, TensorParallelNeedsAJoinedJob) {
    Model model = fulmen_test::mlp();
    EXPECT_EQ(error_code([&] { TensorParallel t(model, {{"0", ParallelStyle::Colwise}}); }), FULMEN_CODE_INVALID_STATE);
    TensorParallel none;
    EXPECT_FALSE(static_cast<bool>(none));
    EXPECT_EQ(error_code([&] { none.clip_grad_norm(1.0); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([&] { none.unshard(); }), FULMEN_CODE_NULL_ARGUMENT);
}

// In a world of one, a loop on TensorParallel (its layers split in one
// part, the collectives over one rank) makes the updates of the same loop
// without it; a bad plan is refused.
static int tensor_parallel_world_of_one() {
    Strategy s("ddp");
    fulmen::distributed::join(s, 1);
    fulmen::manual_seed(3);
    Model model = fulmen_test::mlp();
    fulmen::manual_seed(3);
    Model plain = fulmen_test::mlp();
    if (error_code([&] { TensorParallel t(model, {{"1", ParallelStyle::Colwise}}); }) != FULMEN_CODE_UNSUPPORTED)
        return 9;
    TensorParallel tp(model, {{"0", ParallelStyle::Colwise}, {"2", ParallelStyle::Rowwise}});
    auto before = [](Optimizer& opt) { opt.zero_grad(); };
    int failed = train_beside_plain(model, plain, tp, before, [&] { return tp.clip_grad_norm(0.5); });
    if (failed != 0) return failed;
    fulmen::distributed::shutdown(10);
    return 0;
}

TEST_F(DistributedTest, TensorParallelTrainsAsTheSameLoopWithoutIt) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(std::_Exit(tensor_parallel_world_of_one()), ::testing::ExitedWithCode(0), "");
}

class ShardTest : public FulmenTest {};

TEST_F(ShardTest, ReadsOneRanksShareLikeDistributedSampler) {
    Dataset ds = index_dataset(10);
    Loader loader(ds, 2);
    EXPECT_EQ(loader.len(), 5u);

    // 10 samples padded to 12 by repeating the start; rank r takes r, r + 3, ...
    Loader rank1 = loader.shard(1, 3);
    EXPECT_EQ(rank1.len(), 2u);
    EXPECT_EQ(ids_of(rank1.batch(0, 0)), (std::vector<int64_t>{1, 4}));
    EXPECT_EQ(ids_of(rank1.batch(0, 1)), (std::vector<int64_t>{7, 0}));
    EXPECT_EQ(ids_of(rank1.batch(5, 1)), (std::vector<int64_t>{7, 0}));  // unshuffled: every epoch alike
    EXPECT_EQ(error_code([&] { rank1.batch(0, 2); }), FULMEN_CODE_OUT_OF_RANGE);
    EXPECT_EQ(batches_of(rank1), (std::vector<std::vector<int64_t>>{{1, 4}, {7, 0}}));  // what the trainer reads
    EXPECT_EQ(batches_of(loader.shard(0, 3)), (std::vector<std::vector<int64_t>>{{0, 3}, {6, 9}}));
    EXPECT_EQ(batches_of(loader.shard(2, 3)), (std::vector<std::vector<int64_t>>{{2, 5}, {8, 1}}));
    EXPECT_EQ(batches_of(loader.shard(0, 1)), batches_of(loader));  // a world of one is the whole loader

    // A shuffled loader's shards together cover every sample, in each epoch.
    Loader shuffled(ds, 4, true, 7);
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        std::vector<int64_t> all;
        for (size_t r = 0; r < 2; r++) {
            Loader part = shuffled.shard(r, 2);
            for (size_t i = 0; i < part.len(); i++) {
                std::vector<int64_t> ids = ids_of(part.batch(epoch, i));
                all.insert(all.end(), ids.begin(), ids.end());
            }
        }
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})) << "epoch " << epoch;
    }
    EXPECT_NE(ids_of(shuffled.batch(0, 0)), ids_of(shuffled.batch(1, 0)));  // reshuffled per epoch

    EXPECT_EQ(error_code([&] { loader.shard(3, 3); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { loader.shard(0, 0); }), FULMEN_CODE_INVALID_ARGUMENT);
    fulmen::IteratorSource source;
    source.next = [](fulmen::BatchBuilder&) { return false; };
    Loader iterator = Loader::from_iterator(std::move(source));
    EXPECT_EQ(error_code([&] { iterator.shard(0, 2); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { iterator.batch(0, 0); }), FULMEN_CODE_UNSUPPORTED);
}

TEST_F(ShardTest, LoaderBatchRunsDataSourceCallbacks) {
    fulmen::DataSource source;
    source.len = [] { return size_t{6}; };
    source.get_batch = [](fulmen::Indices indices, fulmen::BatchBuilder& batch) {
        if (indices[0] == 4) throw std::out_of_range("no sample 4 today");
        batch.push(Tensor::from_vector(std::vector<int64_t>(indices.begin(), indices.end())));
    };
    Dataset ds = Dataset::from_source(std::move(source));
    Loader loader(ds, 2);
    Loader rank0 = loader.shard(0, 2);  // samples 0, 2, 4
    std::vector<Tensor> first = rank0.batch(0, 0);
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
    EXPECT_THROW(rank0.batch(0, 1), std::out_of_range);  // the callback's exception, unchanged
    EXPECT_EQ(loader.batch(0, 1)[0].to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
}

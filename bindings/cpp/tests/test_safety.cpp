// Handles in use: objects destroyed while a fit uses them (inside one of its
// steps, or from another thread), a data source calling back into its own
// dataset, and SIGINT / SIGTERM during a fit.
#include "common.hpp"

#include <chrono>
#include <csignal>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>

using fulmen::Batch;
using fulmen::Dataset;
using fulmen::LightningModule;
using fulmen::Loader;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen_test::error_code;
using fulmen_test::FulmenTest;

namespace {

class SafetyTest : public FulmenTest {};

/// A module over `model` whose training step runs `before(step)` first
/// (steps counted from 1) and then returns the cross-entropy loss.
template <class Before>
LightningModule step_module(const Model& model, Before before) {
    return LightningModule::builder(model)
        .training_step([&model, before, step = 0](StepContext&, const Batch& batch) mutable {
            before(++step);
            return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
        })
        .configure_optimizers([&model](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
        })
        .build();
}

/// Options for a quiet fit of `epochs` without logs or checkpoints.
fulmen::TrainerOptions bare_options(int64_t epochs) {
    return fulmen_test::quiet_options(epochs).set("logger", false).set("enable_checkpointing", false);
}

/// Counts the signals a host handler receives.
volatile sig_atomic_t host_signals = 0;
void count_signal(int) { host_signals = host_signals + 1; }

/// Installs count_signal for `sig` for the scope; puts the previous
/// handler back after.
class HostHandler {
public:
    explicit HostHandler(int sig) : sig_(sig) {
        struct sigaction mine {};
        mine.sa_handler = count_signal;
        sigemptyset(&mine.sa_mask);
        host_signals = 0;
        EXPECT_EQ(sigaction(sig_, &mine, &saved_), 0);
    }
    HostHandler(const HostHandler&) = delete;
    HostHandler& operator=(const HostHandler&) = delete;
    ~HostHandler() { sigaction(sig_, &saved_, nullptr); }

    /// Whether count_signal is the installed handler of the signal.
    bool installed() const {
        struct sigaction now {};
        sigaction(sig_, nullptr, &now);
        return now.sa_handler == count_signal;
    }

private:
    int sig_;
    struct sigaction saved_ {};
};

}  // namespace

// Destroying the trainer, the module and the training loader inside a step
// of the fit that uses them frees them when the fit returns; the fit runs
// to its end on the objects it started with. Meanwhile the module is in use
// by the fit: changing it is refused.
TEST_F(SafetyTest, DestroyingObjectsInsideAStepLetsFitFinish) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 3);
    std::optional<Loader> train(std::in_place, ds, 8);  // 4 batches per epoch
    std::optional<LightningModule> module;
    std::optional<Trainer> trainer;
    int steps = 0;
    module.emplace(step_module(model, [&](int step) {
        steps = step;
        if (step == 1) {
            EXPECT_EQ(error_code([&] { module->set_hparam("k", "v"); }), FULMEN_CODE_INVALID_STATE);
        }
        if (step == 2) {
            trainer.reset();
            module.reset();
            train.reset();
        }
    }));
    trainer.emplace(bare_options(2));
    size_t live = fulmen::live_handles();
    trainer->fit(*module, *train);
    EXPECT_EQ(steps, 8);
    EXPECT_FALSE(trainer.has_value());
    EXPECT_EQ(fulmen::live_handles(), live - 3);  // the deferred frees ran when fit returned
}

// The same from another thread while fit waits inside a training step.
TEST_F(SafetyTest, DestroyingObjectsFromAnotherThreadLetsFitFinish) {
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 4);
    std::optional<Loader> train(std::in_place, ds, 8);
    std::promise<void> in_step, destroyed;
    std::shared_future<void> in_step_f = in_step.get_future().share();
    std::future<void> destroyed_f = destroyed.get_future();
    bool signalled = false;
    int steps = 0;
    std::optional<LightningModule> module(std::in_place, step_module(model, [&](int step) {
        steps = step;
        if (step != 3) return;
        signalled = true;
        in_step.set_value();
        if (destroyed_f.wait_for(std::chrono::minutes(1)) != std::future_status::ready) {
            throw std::runtime_error("the destroying thread did not finish");
        }
    }));
    std::optional<Trainer> trainer(std::in_place, bare_options(2));
    std::thread destroyer([&] {
        in_step_f.wait();
        trainer.reset();
        module.reset();
        train.reset();
        destroyed.set_value();
    });
    size_t live = fulmen::live_handles();
    try {
        trainer->fit(*module, *train);
    } catch (...) {
        if (!signalled) in_step.set_value();
        destroyer.join();
        throw;
    }
    if (!signalled) in_step.set_value();
    destroyer.join();
    EXPECT_EQ(steps, 8);
    EXPECT_EQ(fulmen::live_handles(), live - 3);
}

// A data source whose get_batch calls get on its own dataset gets
// FULMEN_CODE_INVALID_STATE from that inner call instead of a deadlock,
// from Dataset::get and inside a fit.
TEST_F(SafetyTest, DataSourceCallingItsOwnDatasetGetsInvalidState) {
    std::vector<fulmen::Code> inner;
    Dataset ds;
    fulmen::DataSource source;
    source.len = [] { return size_t{16}; };
    source.get_batch = [&](fulmen::Indices indices, fulmen::BatchBuilder& batch) {
        try {
            ds.get(indices);
            inner.push_back(static_cast<fulmen::Code>(0));
        } catch (const fulmen::Error& e) {
            inner.push_back(e.code());
        }
        std::vector<float> x;
        std::vector<int64_t> y;
        for (int64_t i : indices) {
            float c = (i % 2) != 0 ? 2.0f : -2.0f;
            x.insert(x.end(), {c, c});
            y.push_back(i % 2);
        }
        batch.push(Tensor::from_vector(x, {static_cast<int64_t>(indices.size()), 2}));
        batch.push(Tensor::from_vector(y));
    };
    ds = Dataset::from_source(source);
    std::vector<Tensor> batch = ds.get(std::vector<int64_t>{0, 1, 2});
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[0].shape(), (std::vector<int64_t>{3, 2}));
    ASSERT_EQ(inner.size(), 1u);
    EXPECT_EQ(inner[0], FULMEN_CODE_INVALID_STATE);

    Model model = fulmen_test::mlp();
    Loader train(ds, 8);
    int steps = 0;
    LightningModule module = step_module(model, [&](int step) { steps = step; });
    Trainer trainer(bare_options(1));
    trainer.fit(module, train);
    EXPECT_EQ(steps, 2);
    EXPECT_GE(inner.size(), 3u);
    for (fulmen::Code code : inner) EXPECT_EQ(code, FULMEN_CODE_INVALID_STATE);
}

// SIGINT or SIGTERM during a fit (trainer option handle_signals, on by
// default) stops the run at its next hook: on_exception runs, the loggers
// are finalized, and fit throws Error with FULMEN_CODE_INTERRUPTED. The
// host's handler is back afterwards.
TEST_F(SafetyTest, SignalDuringFitThrowsInterrupted) {
    for (int sig : {SIGINT, SIGTERM}) {
        SCOPED_TRACE(sig == SIGINT ? "SIGINT" : "SIGTERM");
        HostHandler host(sig);
        Model model = fulmen_test::mlp();
        Dataset ds = fulmen_test::blobs(32, 5);
        Loader train(ds, 8);
        int steps = 0;
        LightningModule module = step_module(model, [&](int step) {
            steps = step;
            if (step == 3) std::raise(sig);
        });
        Trainer trainer(bare_options(10));
        int exceptions = 0;
        trainer.add_callback("exceptions", [&](fulmen::Hook h, fulmen::HookContext&) {
            if (h == fulmen::Hook::Exception) exceptions++;
        });
        std::vector<std::string> statuses;
        fulmen::Logger logger;
        logger.finalize = [&](const std::string& status) { statuses.push_back(status); };
        trainer.add_logger(std::move(logger));
        try {
            trainer.fit(module, train);
            ADD_FAILURE() << "fit was not interrupted";
        } catch (const fulmen::Error& e) {
            EXPECT_EQ(e.code(), FULMEN_CODE_INTERRUPTED) << e.what();
        }
        EXPECT_GE(steps, 3);
        EXPECT_LT(steps, 40);
        EXPECT_EQ(exceptions, 1);
        EXPECT_EQ(statuses, (std::vector<std::string>{"failed"}));
        EXPECT_EQ(host_signals, 0);  // fulmen took the signal

        // The trainer works on, and the host's handler is back.
        trainer.fit(module, train);
        EXPECT_TRUE(host.installed());
        std::raise(sig);
        EXPECT_EQ(host_signals, 1);
    }
}

// With handle_signals false fulmen leaves signals to the host: the host's
// handler receives a SIGINT raised in a step and the fit runs to its end.
TEST_F(SafetyTest, HandleSignalsFalseLeavesSignalsToTheHost) {
    HostHandler host(SIGINT);
    Model model = fulmen_test::mlp();
    Dataset ds = fulmen_test::blobs(32, 6);
    Loader train(ds, 8);
    int steps = 0;
    LightningModule module = step_module(model, [&](int step) {
        steps = step;
        if (step == 2) std::raise(SIGINT);
    });
    Trainer trainer(bare_options(2).set("handle_signals", false));
    trainer.fit(module, train);
    EXPECT_EQ(steps, 8);
    EXPECT_EQ(host_signals, 1);
    EXPECT_TRUE(host.installed());
}

namespace {
struct SwallowedFailure : std::exception {
    const char* what() const noexcept override { return "device probe failed"; }
};
struct StepFailure : std::exception {
    const char* what() const noexcept override { return "step boom"; }
};

/// The C error capture_exception makes for `e`, thrown and caught.
template <class E>
fulmen_error* captured(E e) {
    try {
        throw e;
    } catch (...) {
        return fulmen::detail::capture_exception();
    }
}
}  // namespace

// Several callbacks threw during one call: check() rethrows the one whose
// message fulmen's error carries, not one fulmen swallowed, and a
// fulmen::Error when the error carries several.
TEST(CallbackExceptions, TheCauseIsTheOneFulmensErrorCarries) {
    fulmen::detail::clear_pending_exception();
    fulmen_error_free(captured(SwallowedFailure{}));
    fulmen_error_free(captured(StepFailure{}));
    EXPECT_THROW(fulmen::check(fulmen_error_new(FULMEN_CODE_CALLBACK, "training_step (epoch 0, step 0): step boom")),
                 StepFailure);
    EXPECT_FALSE(fulmen::detail::pending_exception());

    fulmen_error_free(captured(StepFailure{}));
    fulmen_error_free(captured(SwallowedFailure{}));
    try {
        fulmen::check(fulmen_error_new(FULMEN_CODE_CALLBACK, "step boom; then the teardown failed too: device probe failed"));
        ADD_FAILURE() << "check did not throw";
    } catch (const fulmen::Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_CALLBACK);
        EXPECT_STREQ(e.what(), "step boom; then the teardown failed too: device probe failed");
    }

    // One exception is rethrown as it is, whatever fulmen's message.
    fulmen_error_free(captured(StepFailure{}));
    EXPECT_THROW(fulmen::check(fulmen_error_new(FULMEN_CODE_CALLBACK, "reworded")), StepFailure);
}

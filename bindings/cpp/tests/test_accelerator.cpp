// Accelerators: the registry, the built-in CPU accelerator and Lightning's
// device parser, custom accelerators implemented in C++ (ownership,
// exceptions, training end to end), and the precision option.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using fulmen::Accelerator;
using fulmen::AcceleratorInfo;
using fulmen::Batch;
using fulmen::CustomAccelerator;
using fulmen::Device;
using fulmen::DeviceType;
using fulmen::Error;
using fulmen::LightningModule;
using fulmen::Loader;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::Precision;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen::TrainerOptions;
using fulmen_test::error_code;
using fulmen_test::error_message;
using fulmen_test::FulmenTest;

namespace {

/// The registry entry `name` (a copy: registry() returns a temporary).
std::optional<AcceleratorInfo> find_entry(const std::vector<AcceleratorInfo>& entries, const std::string& name) {
    auto it = std::find_if(entries.begin(), entries.end(), [&](const AcceleratorInfo& e) { return e.name == name; });
    if (it == entries.end()) return std::nullopt;
    return *it;
}

/// What a Counting accelerator saw; outlives it (fulmen owns the accelerator).
struct Calls {
    int is_available = 0;
    int auto_device_count = 0;
    int parallel_devices = 0;
    int setup_device = 0;
    int teardown = 0;
    int device_stats = 0;
    int destroyed = 0;
    std::vector<Device> setup_devices;
    std::vector<std::vector<int64_t>> parallel_ids;
};

/// A custom accelerator computing on the CPU with two "devices", counting
/// every call. parse_devices is not overridden: Lightning's parser runs.
struct Counting : CustomAccelerator {
    explicit Counting(Calls* c, size_t devices = 2) : calls(c), n_devices(devices) {}
    ~Counting() override { calls->destroyed++; }
    bool is_available() override {
        calls->is_available++;
        return true;
    }
    size_t auto_device_count() override {
        calls->auto_device_count++;
        return n_devices;
    }
    std::vector<Device> parallel_devices(const std::vector<int64_t>& ids) override {
        calls->parallel_devices++;
        calls->parallel_ids.push_back(ids);
        return std::vector<Device>(ids.size(), Device::cpu());
    }
    void setup_device(Device device) override {
        calls->setup_device++;
        calls->setup_devices.push_back(device);
    }
    void teardown() override { calls->teardown++; }
    std::map<std::string, double> device_stats(Device device) override {
        calls->device_stats++;
        return {{"calls", static_cast<double>(calls->device_stats)}, {"index", static_cast<double>(device.index)}};
    }
    Calls* calls;
    size_t n_devices;
};

/// Only counts its destruction (for registration refusals).
struct Minimal : CustomAccelerator {
    explicit Minimal(int* d) : destroyed(d) {}
    ~Minimal() override { ++*destroyed; }
    bool is_available() override { return true; }
    size_t auto_device_count() override { return 1; }
    int* destroyed;
};

/// Overrides parse_devices: every value selects `ids`.
struct FixedParser : CustomAccelerator {
    explicit FixedParser(std::vector<int64_t> i) : ids(std::move(i)) {}
    bool is_available() override { return true; }
    size_t auto_device_count() override { return 4; }
    std::vector<int64_t> parse_devices(const std::string& devices) override {
        seen.push_back(devices);
        return ids;
    }
    std::vector<int64_t> ids;
    std::vector<std::string> seen;
};

/// Throws from chosen methods.
struct Throwing : CustomAccelerator {
    bool is_available() override {
        if (throw_available) throw std::runtime_error("is_available broke");
        return true;
    }
    size_t auto_device_count() override {
        if (throw_count) throw std::logic_error("auto_device_count broke");
        return 1;
    }
    void setup_device(Device) override { throw std::out_of_range("setup_device broke"); }
    std::map<std::string, double> device_stats(Device) override {
        throw fulmen::Error(FULMEN_CODE_UNSUPPORTED, "no stats here");
    }
    bool throw_available = false;
    bool throw_count = false;
};

/// Registers under a name for the scope of a test, unregistering after
/// (a failing assertion must not leave an entry behind in the process-wide
/// registry).
struct Registration {
    explicit Registration(std::string n) : name(std::move(n)) {}
    ~Registration() {
        try {
            fulmen::unregister_accelerator(name);
        } catch (const fulmen::Error&) {
        }
    }
    std::string name;
};

/// Trains the 2-16-2 MLP on two blobs for `epochs` with `options`; returns
/// the trainer's last train_loss.
double train_blobs(TrainerOptions options) {
    Model model = fulmen_test::mlp();
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&model](StepContext& ctx, const Batch& batch) {
                                     Tensor loss = fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
                                     ctx.log("train_loss", loss.item(), fulmen::Log::on_step | fulmen::Log::on_epoch);
                                     return loss;
                                 })
                                 .configure_optimizers([&model](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    fulmen::Dataset data = fulmen_test::blobs(64, 7);
    Loader loader(data, 16, true);
    Trainer trainer(options.set("logger", false).set("enable_checkpointing", false));
    trainer.fit(module, loader);
    EXPECT_EQ(trainer.global_step(), 8);
    return trainer.callback_metric("train_loss");
}

}  // namespace

class AcceleratorTest : public FulmenTest {};

// Whether this machine has a CUDA device (the GPU kit runs these tests on
// one).
static bool cuda_here() { return Accelerator::get("cuda").is_available(); }

TEST_F(AcceleratorTest, RegistryHoldsTheBuiltins) {
    std::vector<AcceleratorInfo> entries = fulmen::registry();
    ASSERT_GE(entries.size(), 4u);
    const char* builtins[] = {"cpu", "cuda", "mps", "xla"};
    for (size_t i = 0; i < 4; i++) {
        EXPECT_EQ(entries[i].name, builtins[i]);
        EXPECT_FALSE(entries[i].description.empty()) << builtins[i];
    }
    EXPECT_TRUE(find_entry(entries, "cpu")->available);
    // The test machines have no MPS or XLA device; the GPU kit runs these
    // tests where CUDA is available.
    EXPECT_EQ(find_entry(entries, "cuda")->available, cuda_here());
    EXPECT_FALSE(find_entry(entries, "mps")->available);
    EXPECT_FALSE(find_entry(entries, "xla")->available);
    EXPECT_NE(find_entry(entries, "xla")->description.find("tpu"), std::string::npos);
    EXPECT_FALSE(find_entry(entries, "auto").has_value());  // aliases are not entries
}

TEST_F(AcceleratorTest, AutoResolvesToTheCpuWithoutCuda) {
    Accelerator a = Accelerator::get("auto");
    // "auto" and "gpu" pick cuda where it is available (the GPU kit).
    const std::string auto_pick = cuda_here() ? "cuda" : "cpu";
    EXPECT_EQ(a.name(), auto_pick);
    EXPECT_TRUE(a.is_available());
    EXPECT_GE(a.auto_device_count(), 1u);
    EXPECT_EQ(Accelerator::get("  CPU ").name(), "cpu");
    EXPECT_EQ(Accelerator::get("tpu").name(), "xla");
    Accelerator cuda = Accelerator::get("cuda");  // registered, available or not
    EXPECT_EQ(cuda.name(), "cuda");
    EXPECT_EQ(cuda.is_available(), cuda_here());
    if (cuda_here()) {
        EXPECT_GE(cuda.auto_device_count(), 1u);
        EXPECT_EQ(Accelerator::get("gpu").name(), "cuda");
    } else {
        EXPECT_EQ(cuda.auto_device_count(), 0u);
        EXPECT_EQ(error_code([] { Accelerator::get("gpu"); }), FULMEN_CODE_UNAVAILABLE);
    }
    std::string unknown = error_message([] { Accelerator::get("npu"); });
    EXPECT_NE(unknown.find("cpu, cuda, mps, xla"), std::string::npos) << unknown;
    EXPECT_EQ(error_code([] { Accelerator::get("npu"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([] { Accelerator::get(""); }), FULMEN_CODE_INVALID_ARGUMENT);

    Accelerator moved = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from handle is empty
    EXPECT_EQ(error_code([&] { a.name(); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(moved.name(), auto_pick);
}

TEST_F(AcceleratorTest, CpuDeviceParser) {
    Accelerator cpu = Accelerator::get("cpu");
    EXPECT_EQ(cpu.parse_devices("auto"), (std::vector<int64_t>{0}));
    EXPECT_EQ(cpu.parse_devices("1"), (std::vector<int64_t>{0}));
    EXPECT_EQ(cpu.parse_devices("3"), (std::vector<int64_t>{0, 1, 2}));
    std::vector<int64_t> many = cpu.parse_devices("40");  // more than the first buffer holds
    ASSERT_EQ(many.size(), 40u);
    EXPECT_EQ(many.back(), 39);
    for (const char* bad : {"0", "-1", "1,3", "[0]", "-2", "x"}) {
        EXPECT_EQ(error_code([&] { cpu.parse_devices(bad); }), FULMEN_CODE_INVALID_ARGUMENT) << bad;
    }
    EXPECT_NE(error_message([&] { cpu.parse_devices("1,3"); }).find("number of processes"), std::string::npos);

    std::vector<Device> devices = cpu.parallel_devices("2");
    ASSERT_EQ(devices.size(), 2u);
    EXPECT_EQ(devices[0], Device::cpu());
    EXPECT_EQ(devices[1], Device::cpu());
    EXPECT_EQ(cpu.parallel_devices("33").size(), 33u);
    EXPECT_EQ(error_code([&] { cpu.parallel_devices("0"); }), FULMEN_CODE_INVALID_ARGUMENT);

    if (cuda_here()) return;  // the refusals below are those of a machine without CUDA
    Accelerator cuda = Accelerator::get("cuda");
    EXPECT_EQ(error_code([&] { cuda.parse_devices("auto"); }), FULMEN_CODE_UNAVAILABLE);
    EXPECT_EQ(error_code([&] { cuda.parse_devices("1,"); }), FULMEN_CODE_UNAVAILABLE);
    EXPECT_EQ(error_code([&] { cuda.parse_devices("0"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { cuda.parse_devices("x"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { cuda.parallel_devices("1"); }), FULMEN_CODE_UNAVAILABLE);
}

TEST_F(AcceleratorTest, CpuSetupTeardownAndStats) {
    Accelerator cpu = Accelerator::get("cpu");
    cpu.setup_device(Device::cpu());
    cpu.teardown();
    EXPECT_EQ(error_code([&] { cpu.setup_device(Device::cuda(0)); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { cpu.setup_device(Device{static_cast<DeviceType>(42), 0}); }),
              FULMEN_CODE_INVALID_ARGUMENT);

    std::map<std::string, double> stats = cpu.device_stats(Device::cpu());
    for (const char* key : {"cpu_rss_bytes", "cpu_percent", "cpu_vm_percent", "cpu_swap_percent"}) {
        ASSERT_EQ(stats.count(key), 1u) << key;
        EXPECT_TRUE(std::isfinite(stats[key])) << key;
        EXPECT_GE(stats[key], 0.0) << key;
    }
    EXPECT_GT(stats["cpu_rss_bytes"], 1e6);
    EXPECT_LE(stats["cpu_vm_percent"], 100.0);

    if (cuda_here()) return;  // the refusals below are those of a machine without CUDA
    Accelerator cuda = Accelerator::get("cuda");
    EXPECT_EQ(error_code([&] { cuda.device_stats(Device::cuda(0)); }), FULMEN_CODE_UNAVAILABLE);
    EXPECT_EQ(error_code([&] { cuda.setup_device(Device::cuda(0)); }), FULMEN_CODE_UNAVAILABLE);
}

TEST_F(AcceleratorTest, CustomAcceleratorTrainsEndToEnd) {
    Calls calls;
    {
        Registration reg("cpp-counting");
        fulmen::register_accelerator("CPP-Counting", "counts its calls", std::make_unique<Counting>(&calls));

        std::optional<AcceleratorInfo> entry = find_entry(fulmen::registry(), "cpp-counting");
        ASSERT_TRUE(entry.has_value());
        EXPECT_EQ(entry->description, "counts its calls");
        EXPECT_TRUE(entry->available);

        Accelerator acc = Accelerator::get("cpp-counting");
        EXPECT_EQ(acc.name(), "cpp-counting");
        EXPECT_TRUE(acc.is_available());
        EXPECT_EQ(acc.auto_device_count(), 2u);
        // Lightning's GPU-style parser over auto_device_count() devices.
        EXPECT_EQ(acc.parse_devices("auto"), (std::vector<int64_t>{0, 1}));
        EXPECT_EQ(acc.parse_devices("-1"), (std::vector<int64_t>{0, 1}));
        EXPECT_EQ(acc.parse_devices("1,"), (std::vector<int64_t>{1}));
        EXPECT_EQ(error_code([&] { acc.parse_devices("3"); }), FULMEN_CODE_UNAVAILABLE);
        EXPECT_EQ(error_code([&] { acc.parse_devices("0"); }), FULMEN_CODE_INVALID_ARGUMENT);
        calls.parallel_ids.clear();
        EXPECT_EQ(acc.parallel_devices("2"), (std::vector<Device>{Device::cpu(), Device::cpu()}));
        ASSERT_EQ(calls.parallel_ids.size(), 1u);
        EXPECT_EQ(calls.parallel_ids[0], (std::vector<int64_t>{0, 1}));
        std::map<std::string, double> stats = acc.device_stats(Device::cpu());
        EXPECT_EQ(stats, (std::map<std::string, double>{{"calls", 1.0}, {"index", 0.0}}));
        EXPECT_EQ(calls.setup_device, 0);
        EXPECT_EQ(calls.teardown, 0);

        double loss = train_blobs(fulmen_test::quiet_options(2).set("accelerator", "cpp-counting").set("devices", "1"));
        EXPECT_TRUE(std::isfinite(loss));
        EXPECT_LT(loss, 0.5);
        EXPECT_EQ(calls.setup_device, 1);
        EXPECT_EQ(calls.teardown, 1);
        ASSERT_EQ(calls.setup_devices.size(), 1u);
        EXPECT_EQ(calls.setup_devices[0], Device::cpu());

        // The same through TrainerOptions::accelerator(handle).
        train_blobs(fulmen_test::quiet_options(2).accelerator(acc).set("devices", "1"));
        EXPECT_EQ(calls.setup_device, 2);
        EXPECT_EQ(calls.teardown, 2);

        // Two devices on a single-device strategy: refused before set-up
        // (strategy "auto" would start a DDP job of two processes).
        Model model = fulmen_test::mlp();
        fulmen::Dataset data = fulmen_test::blobs(16, 1);
        LightningModule module = LightningModule::builder(model)
                                     .training_step([&model](StepContext&, const Batch& batch) {
                                         return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
                                     })
                                     .configure_optimizers([&model](OptimizerConfig& config) {
                                         config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                     })
                                     .build();
        Trainer two(fulmen_test::quiet_options(1)
                        .set("accelerator", "cpp-counting")
                        .set("devices", "2")
                        .set("strategy", "single_device")
                        .set("logger", false));
        std::string msg;
        try {
            two.fit(module, Loader(data, 8));
            ADD_FAILURE() << "devices=2 trained";
        } catch (const fulmen::Error& e) {
            EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT) << e.what();
            msg = e.what();
        }
        EXPECT_NE(msg.find("devices=\"2\""), std::string::npos) << msg;
        EXPECT_EQ(calls.setup_device, 2);
        EXPECT_EQ(calls.destroyed, 0);

        // Strategy "dp" uses both devices in this process: every batch is
        // split in two, the model replicated, the losses averaged.
        double dp_loss = train_blobs(fulmen_test::quiet_options(2)
                                         .set("accelerator", "cpp-counting")
                                         .set("devices", "2")
                                         .set("strategy", "dp"));
        EXPECT_TRUE(std::isfinite(dp_loss));
        EXPECT_LT(dp_loss, 0.5);
        EXPECT_EQ(calls.setup_device, 3);  // the first device holds the model
    }
    // Registration's destructor unregistered it; nothing holds it any more.
    EXPECT_EQ(calls.destroyed, 1);
    EXPECT_FALSE(find_entry(fulmen::registry(), "cpp-counting").has_value());
    EXPECT_EQ(error_code([] { Accelerator::get("cpp-counting"); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(AcceleratorTest, CustomParseDevices) {
    Registration reg("cpp-fixed");
    auto owned = std::make_unique<FixedParser>(std::vector<int64_t>{3, 1});
    FixedParser* parser = owned.get();
    fulmen::register_accelerator("cpp-fixed", "", std::move(owned));  // static type shows the override
    Accelerator acc = Accelerator::get("cpp-fixed");
    EXPECT_EQ(acc.parse_devices("2"), (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(acc.parallel_devices("2"), (std::vector<Device>{Device::cpu(), Device::cpu()}));  // default slot
    EXPECT_EQ(acc.device_stats(Device::cpu()), (std::map<std::string, double>{}));
    // fulmen checks the syntax first and hands the host its normalised form.
    EXPECT_EQ(error_code([&] { acc.parse_devices("anything-goes"); }), FULMEN_CODE_INVALID_ARGUMENT);
    parser->seen.clear();
    acc.parse_devices("2");
    acc.parse_devices("1,3");
    acc.parse_devices("-1");
    acc.parse_devices("auto");
    // fulmen passes the value in its normalised text form.
    EXPECT_EQ(parser->seen, (std::vector<std::string>{"2", "1,3", "-1", "auto"}));

    // Ids outside [0, auto_device_count()) or repeated are the accelerator's bug.
    parser->ids = {7};
    EXPECT_EQ(error_code([&] { acc.parse_devices("1"); }), FULMEN_CODE_CALLBACK);
    parser->ids = {1, 1};
    EXPECT_EQ(error_code([&] { acc.parse_devices("1"); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(AcceleratorTest, TypeErasedRegistrationUsesTheDefaultParserUnlessAsked) {
    struct Erased : FixedParser {
        explicit Erased(bool custom) : FixedParser({2}), custom(custom) {}
        bool custom_parse_devices() const override { return custom; }
        bool custom;
    };
    Registration a("cpp-erased-default"), b("cpp-erased-custom");
    std::unique_ptr<CustomAccelerator> plain = std::make_unique<Erased>(false);
    std::unique_ptr<CustomAccelerator> asked = std::make_unique<Erased>(true);
    fulmen::register_accelerator("cpp-erased-default", "", std::move(plain));
    fulmen::register_accelerator("cpp-erased-custom", "", std::move(asked));
    EXPECT_EQ(Accelerator::get("cpp-erased-default").parse_devices("1"), (std::vector<int64_t>{0}));
    EXPECT_EQ(Accelerator::get("cpp-erased-custom").parse_devices("1"), (std::vector<int64_t>{2}));
}

TEST_F(AcceleratorTest, DuplicateAndReservedRegistrationsAreRefused) {
    int first = 0, second = 0, replacement = 0, refused = 0;
    {
        Registration reg("cpp-dup");
        fulmen::register_accelerator("cpp-dup", "first", std::make_unique<Minimal>(&first));
        EXPECT_EQ(error_code([&] { fulmen::register_accelerator("cpp-dup", "second", std::make_unique<Minimal>(&second)); }),
                  FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_EQ(second, 1);  // refused: the binding destroyed it
        EXPECT_EQ(first, 0);
        EXPECT_EQ(find_entry(fulmen::registry(), "cpp-dup")->description, "first");
        EXPECT_NE(error_message([&] { fulmen::register_accelerator(" CPP-DUP ", "", std::make_unique<Minimal>(&second)); })
                      .find("already present"),
                  std::string::npos);
        EXPECT_EQ(second, 2);

        // override_existing replaces it: the old one is destroyed once.
        fulmen::register_accelerator("cpp-dup", "replacement", std::make_unique<Minimal>(&replacement), true);
        EXPECT_EQ(first, 1);
        EXPECT_EQ(replacement, 0);
        EXPECT_EQ(find_entry(fulmen::registry(), "cpp-dup")->description, "replacement");

        for (const char* reserved : {"auto", "gpu", "TPU"}) {
            std::string msg = error_message(
                [&] { fulmen::register_accelerator(reserved, "", std::make_unique<Minimal>(&refused), true); });
            EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
        }
        EXPECT_EQ(refused, 3);
        EXPECT_EQ(error_code([&] { fulmen::register_accelerator("cpu", "", std::make_unique<Minimal>(&refused)); }),
                  FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_EQ(error_code([&] { fulmen::register_accelerator("c p u", "", std::make_unique<Minimal>(&refused)); }),
                  FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_EQ(error_code([&] { fulmen::register_accelerator("", "", std::make_unique<Minimal>(&refused)); }),
                  FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_EQ(refused, 6);
        EXPECT_EQ(error_code([&] { fulmen::register_accelerator("cpp-null", "", std::unique_ptr<Minimal>()); }),
                  FULMEN_CODE_NULL_ARGUMENT);
        EXPECT_TRUE(find_entry(fulmen::registry(), "cpu")->available);  // the built-in is untouched
    }
    EXPECT_EQ(first, 1);
    EXPECT_EQ(second, 2);
    EXPECT_EQ(replacement, 1);
    EXPECT_EQ(refused, 6);
}

TEST_F(AcceleratorTest, UnregisterDestroysOnceWhenNothingUsesIt) {
    int destroyed = 0;
    fulmen::register_accelerator("cpp-gone", "", std::make_unique<Minimal>(&destroyed));
    fulmen::unregister_accelerator("cpp-gone");
    EXPECT_EQ(destroyed, 1);
    EXPECT_EQ(error_code([] { fulmen::unregister_accelerator("cpp-gone"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(destroyed, 1);

    // A handle keeps it alive past unregister; freeing the handle destroys it.
    int held = 0;
    fulmen::register_accelerator("cpp-held", "", std::make_unique<Minimal>(&held));
    {
        Accelerator acc = Accelerator::get("cpp-held");
        fulmen::unregister_accelerator("cpp-held");
        EXPECT_EQ(held, 0);
        EXPECT_EQ(acc.name(), "cpp-held");
        EXPECT_EQ(acc.parse_devices("1"), (std::vector<int64_t>{0}));
    }
    EXPECT_EQ(held, 1);
}

TEST_F(AcceleratorTest, ExceptionsInCustomAcceleratorsAreRethrown) {
    Registration reg("cpp-throwing");
    auto owned = std::make_unique<Throwing>();
    Throwing* t = owned.get();
    fulmen::register_accelerator("cpp-throwing", "", std::move(owned));
    Accelerator acc = Accelerator::get("cpp-throwing");

    EXPECT_THROW(acc.setup_device(Device::cpu()), std::out_of_range);
    EXPECT_EQ(error_code([&] { acc.device_stats(Device::cpu()); }), FULMEN_CODE_UNSUPPORTED);

    // fit rethrows the original exception of setup_device.
    Model model = fulmen_test::mlp();
    fulmen::Dataset data = fulmen_test::blobs(16, 1);
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&model](StepContext&, const Batch& batch) {
                                     return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
                                 })
                                 .configure_optimizers([&model](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    Trainer trainer(fulmen_test::quiet_options(1).set("accelerator", "cpp-throwing").set("logger", false));
    EXPECT_THROW(trainer.fit(module, Loader(data, 8)), std::out_of_range);

    // A throwing auto_device_count reads as 0 devices; the parser's
    // failure then rethrows the original exception.
    t->throw_count = true;
    EXPECT_THROW(acc.parse_devices("auto"), std::logic_error);
    t->throw_count = false;

    // Asked directly, a throwing is_available rethrows its exception; the
    // registry reads it as "unavailable" without failing, and the exception
    // is not left behind for an unrelated later error.
    t->throw_available = true;
    try {
        acc.is_available();
        ADD_FAILURE() << "a throwing is_available returned";
    } catch (const fulmen::Error& e) {
        ADD_FAILURE() << "fulmen::Error instead of the original exception: " << e.what();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "is_available broke");
    }
    EXPECT_FALSE(find_entry(fulmen::registry(), "cpp-throwing")->available);
    EXPECT_EQ(error_code([] { Accelerator::get("npu"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_THROW(Tensor::zeros({2}).reshape({3}), fulmen::Error);
    t->throw_available = false;
    EXPECT_TRUE(acc.is_available());
}

/// Computes on the CPU; its teardown throws while armed.
struct TeardownThrows : CustomAccelerator {
    explicit TeardownThrows(int* calls) : teardowns(calls) {}
    bool is_available() override { return true; }
    size_t auto_device_count() override { return 1; }
    void teardown() override {
        ++*teardowns;
        if (armed) throw fulmen::Error(FULMEN_CODE_UNAVAILABLE, "teardown boom");
    }
    int* teardowns;
    bool armed = true;
};

TEST_F(AcceleratorTest, FailingTeardownDoesNotHideTheStepsException) {
    Registration reg("cpp-teardown-boom");
    int teardowns = 0;
    auto owned = std::make_unique<TeardownThrows>(&teardowns);
    TeardownThrows* acc = owned.get();
    fulmen::register_accelerator("cpp-teardown-boom", "", std::move(owned));
    Model model = fulmen_test::mlp();
    fulmen::Dataset data = fulmen_test::blobs(16, 1);
    bool step_throws = true;
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&](StepContext&, const Batch& batch) {
                                     if (step_throws) throw std::runtime_error("step boom");
                                     return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
                                 })
                                 .configure_optimizers([&model](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    Loader loader(data, 8);
    auto options = [] {
        return fulmen_test::quiet_options(1)
            .set("accelerator", "cpp-teardown-boom")
            .set("logger", false)
            .set("enable_checkpointing", false);
    };

    // The step throws, then the teardown: the step's code and message,
    // the teardown's attached after it.
    {
        Trainer trainer(options());
        try {
            trainer.fit(module, loader);
            ADD_FAILURE() << "fit succeeded";
        } catch (const fulmen::Error& e) {
            const std::string what = e.what();
            EXPECT_EQ(e.code(), FULMEN_CODE_CALLBACK) << what;
            const size_t step = what.find("step boom"), teardown = what.find("teardown boom");
            ASSERT_NE(step, std::string::npos) << what;
            ASSERT_NE(teardown, std::string::npos) << what;
            EXPECT_LT(step, teardown) << what;
        }
        EXPECT_EQ(teardowns, 1);
    }
    // Only the step throws: its exception comes back unchanged.
    acc->armed = false;
    {
        Trainer trainer(options());
        try {
            trainer.fit(module, loader);
            ADD_FAILURE() << "fit succeeded";
        } catch (const fulmen::Error& e) {
            ADD_FAILURE() << "fulmen::Error instead of the step's exception: " << e.what();
        } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "step boom");
        }
        EXPECT_EQ(teardowns, 2);
    }
    // Only the teardown throws (after a run that succeeded): its exception
    // comes back unchanged, and the device is torn down once.
    acc->armed = true;
    step_throws = false;
    {
        Trainer trainer(options());
        try {
            trainer.fit(module, loader);
            ADD_FAILURE() << "fit succeeded";
        } catch (const fulmen::Error& e) {
            EXPECT_EQ(e.code(), FULMEN_CODE_UNAVAILABLE);
            EXPECT_STREQ(e.what(), "teardown boom");
        }
        EXPECT_EQ(teardowns, 3);
    }
}

TEST_F(AcceleratorTest, TrainerAcceleratorOptions) {
    Accelerator cpu = Accelerator::get("cpu");
    TrainerOptions options;
    options.accelerator(cpu).set("devices", "auto");
    Accelerator empty;
    EXPECT_EQ(error_code([&] { options.accelerator(empty); }), FULMEN_CODE_NULL_ARGUMENT);
    EXPECT_EQ(error_code([&] { options.set("precision", "8-mixed"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(error_code([&] { options.set("devices", "two"); }), FULMEN_CODE_INVALID_ARGUMENT);

    // Unavailable accelerators are refused when the run starts.
    Model model = fulmen_test::mlp();
    fulmen::Dataset data = fulmen_test::blobs(16, 1);
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&model](StepContext&, const Batch& batch) {
                                     return fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
                                 })
                                 .configure_optimizers([&model](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
                                 })
                                 .build();
    if (!cuda_here()) {
        Trainer on_cuda(fulmen_test::quiet_options(1).set("accelerator", "cuda").set("logger", false));
        EXPECT_EQ(error_code([&] { on_cuda.fit(module, Loader(data, 8)); }), FULMEN_CODE_UNAVAILABLE);
    }
    // Several devices need a distributed strategy ("auto" would start a DDP job).
    Trainer four_cpus(fulmen_test::quiet_options(1)
                          .accelerator(cpu)
                          .set("devices", 4)
                          .set("strategy", "single_device")
                          .set("logger", false));
    EXPECT_EQ(error_code([&] { four_cpus.fit(module, Loader(data, 8)); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(AcceleratorTest, Bf16MixedPrecisionTrains) {
    double full = train_blobs(fulmen_test::quiet_options(2).set("accelerator", "cpu").set("devices", 1));
    double mixed = train_blobs(fulmen_test::quiet_options(2)
                                   .accelerator(Accelerator::get("cpu"))
                                   .set("devices", "1")
                                   .set("precision", "bf16-mixed"));
    EXPECT_TRUE(std::isfinite(mixed));
    EXPECT_LT(mixed, 0.5);
    EXPECT_NEAR(mixed, full, 0.1);
}

TEST_F(AcceleratorTest, PrecisionPluginObjects) {
    EXPECT_EQ(Precision("16").name(), "16-mixed");
    EXPECT_EQ(Precision("bf16-true").name(), "bf16-true");
    try {
        Precision bad("fp8");
        FAIL() << "fp8 was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), FULMEN_CODE_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("bf16-mixed"), std::string::npos);
    }
    Precision bf16("bf16-mixed");
    EXPECT_THROW(bf16.grad_scaler(1024.0), Error);  // only 16-mixed scales the loss
    Precision fp16("16-mixed");
    EXPECT_THROW(fp16.grad_scaler(-1.0), Error);
    fp16.grad_scaler(1024.0, 2.0, 0.5, 100);
    double loss = train_blobs(fulmen_test::quiet_options(2).precision(fp16));
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_LT(loss, 0.5);
}

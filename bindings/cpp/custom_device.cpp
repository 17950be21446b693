// A vendor's device type from C++: Lightning's XPUAccelerator example over
// fulmen's fake PrivateUse1 device, registered as "npu". A program of its
// own, run by run-tests.sh: registering the fake device changes libtorch
// for the whole process, for good. Exits non-zero on the first mismatch.
#include <fulmen/fulmen.hpp>

#include <cstdlib>
#include <stdlib.h>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
    if (!ok) {
        std::cerr << "custom_device: " << what << "\n";
        failures++;
    }
}

// get_parallel_devices returns torch.device("npu", i), as the XPU example
// returns torch.device("xpu", i).
class NpuAccelerator : public fulmen::CustomAccelerator {
public:
    explicit NpuAccelerator(std::vector<fulmen::Device>* setups) : setups_(setups) {}
    bool is_available() override { return true; }
    size_t auto_device_count() override { return fulmen::device_count(fulmen::DeviceType::PrivateUse1); }
    std::vector<fulmen::Device> parallel_devices(const std::vector<int64_t>& ids) override {
        std::vector<fulmen::Device> out;
        for (int64_t id : ids) out.push_back(fulmen::Device::private_use1(id));
        return out;
    }
    void setup_device(fulmen::Device device) override { setups_->push_back(device); }

private:
    std::vector<fulmen::Device>* setups_;
};

// The same devices without bfloat16.
class NoBf16Accelerator : public NpuAccelerator {
public:
    using NpuAccelerator::NpuAccelerator;
    bool supports_dtype(fulmen::DType dtype) override { return dtype != fulmen::DType::BF16; }
};

// A world of one's collectives (each rank would call its library here):
// counts the calls, and checks the store in open_collectives.
struct Calls {
    int opened = 0, closed = 0, all_reduce = 0, broadcast = 0, all_gather = 0;
};

class SoloGroup : public fulmen::CollectiveGroup {
public:
    explicit SoloGroup(Calls* calls) : calls_(calls) {}
    ~SoloGroup() override { calls_->closed++; }
    void all_reduce(std::vector<fulmen::Tensor>& tensors, fulmen::ReduceOp) override {
        calls_->all_reduce++;
        for (auto& t : tensors) t.copy_from(t.to_vector<double>());  // one rank: its own values
    }
    void broadcast(std::vector<fulmen::Tensor>&, int root) override {
        calls_->broadcast++;
        expect(root == 0, "broadcast from rank " + std::to_string(root));
    }
    void all_gather(const fulmen::Tensor& input, std::vector<fulmen::Tensor>& outputs) override {
        calls_->all_gather++;
        expect(outputs.size() == 1, "all_gather outputs for one rank");
        outputs.at(0).copy_(input);
    }
    void barrier() override {}

private:
    Calls* calls_;
};

class NpuWithCollectives : public NpuAccelerator {
public:
    NpuWithCollectives(std::vector<fulmen::Device>* setups, Calls* calls) : NpuAccelerator(setups), calls_(calls) {}
    std::string collectives_name() const override { return "solo"; }
    std::unique_ptr<fulmen::CollectiveGroup> open_collectives(const fulmen::DistStore& store, int rank,
                                                              int world_size, fulmen::Device device) override {
        calls_->opened++;
        expect(rank == 0 && world_size == 1 && device == fulmen::Device::private_use1(0), "the group's place");
        store.set("unique-id", std::vector<uint8_t>{1, 2, 3});
        expect(store.get("unique-id") == std::vector<uint8_t>{1, 2, 3}, "the store's value");
        expect(store.add("joined", 1) == 1 && store.remove("joined"), "the store's counter");
        return std::make_unique<SoloGroup>(calls_);
    }

private:
    Calls* calls_;
};

// Counts the generator-state and synchronize calls, keeping the defaults.
class CountingNpu : public NpuAccelerator {
public:
    using NpuAccelerator::NpuAccelerator;
    int gets = 0, syncs = 0;
    std::vector<uint8_t> rng_state(fulmen::Device device) override {
        gets++;
        return NpuAccelerator::rng_state(device);
    }
    void synchronize(fulmen::Device device) override {
        syncs++;
        NpuAccelerator::synchronize(device);
    }
};

// Trains a 2-16-2 MLP on two blobs on `accelerator`; returns the last
// epoch's loss. With `root`, checkpoints go there and a ThroughputMonitor
// runs.
double fit_on(const std::string& accelerator, const std::string& precision = "32-true",
              const std::string& strategy = "auto", const std::string& root = "") {
    using namespace fulmen;
    manual_seed(7);
    Tensor x = Tensor::randn({128, 2});
    Tensor y = x.sum({1}).compare(0.0, Compare::Gt).to(DType::I64);
    Loader train(Dataset::from_tensors({x, y}), 16, /*shuffle=*/true);
    Model model = Model::sequential({Model::linear(2, 16), Model::tanh(), Model::linear(16, 2)});
    LightningModule module = LightningModule::builder(model)
                                 .training_step([&](StepContext& ctx, const Batch& batch) {
                                     Tensor loss = loss::cross_entropy(model(batch[0]), batch[1]);
                                     ctx.log("train_loss", loss.item(), Log::on_epoch);
                                     return loss;
                                 })
                                 .configure_optimizers([&](OptimizerConfig& config) {
                                     config.add(Optimizer::sgd(model, SgdOptions(0.1)));
                                 })
                                 .build();
    Trainer trainer(TrainerOptions()
                        .max_epochs(3)
                        .enable_progress_bar(false)
                        .enable_model_summary(false)
                        .logger(false)
                        .enable_checkpointing(!root.empty())
                        .set("default_root_dir", root.empty() ? std::string(".") : root)
                        .set("accelerator", accelerator)
                        .set("devices", "1")
                        .set("strategy", strategy)
                        .set("precision", precision));
    if (!root.empty()) trainer.add_throughput_monitor();
    trainer.fit(module, train);
    return trainer.callback_metric("train_loss");
}

}  // namespace

int main() {
    using namespace fulmen;
    try {
        register_fake_device("npu", 2);
        expect(device_type_name(DeviceType::PrivateUse1) == "npu", "PrivateUse1 is not named npu");
        expect(device_count(DeviceType::PrivateUse1) == 2, "not 2 npu devices");
        expect(device_count(DeviceType::Xpu) == 0, "xpu devices without a backend");

        Tensor t = Tensor::ones({2, 3}).to(Device::private_use1(1));
        expect(t.device() == Device::private_use1(1), "the tensor is not on npu:1");
        expect((t + t).sum().to(Device::cpu()).item() == 12.0, "npu arithmetic");
        // Reading a value back waits for the device: counted once.
        const uint64_t reads = fake_device_host_reads();
        expect(t.sum().item() == 6.0, "npu sum");
        expect(fake_device_host_reads() == reads + 1, "a read counted other than once");
        try {
            set_sync_debug_mode(DeviceType::PrivateUse1, 2);
            expect(false, "a sync debug mode for npu was accepted");
        } catch (const Error& e) {
            expect(e.code() == FULMEN_CODE_UNSUPPORTED, std::string("sync debug mode for npu: ") + e.what());
        }

        std::vector<Device> setups;
        register_accelerator("npu", "the fake PrivateUse1 device", std::make_unique<NpuAccelerator>(&setups));
        const double on_npu = fit_on("npu");
        const double on_cpu = fit_on("cpu");
        expect(on_npu == on_cpu, "train_loss on npu " + std::to_string(on_npu) + " vs " + std::to_string(on_cpu));
        expect(on_npu < 0.5, "train_loss " + std::to_string(on_npu));
        expect(setups.size() == 1 && setups[0] == Device::private_use1(0), "setup_device was not given npu:0");
        unregister_accelerator("npu");

        // supports_dtype: bf16-mixed is refused on devices without bfloat16.
        register_accelerator("npu_nobf16", "no bfloat16", std::make_unique<NoBf16Accelerator>(&setups));
        try {
            fit_on("npu_nobf16", "bf16-mixed");
            expect(false, "bf16-mixed ran on devices without bfloat16");
        } catch (const Error& e) {
            expect(e.code() == FULMEN_CODE_UNSUPPORTED, std::string("bf16-mixed refused with ") + e.what());
        }
        unregister_accelerator("npu_nobf16");

        // The device's generator and synchronize, through the accelerator.
        const std::vector<uint8_t> state = device_rng_state(Device::private_use1(0));
        expect(!state.empty(), "no generator state for npu:0");
        set_device_rng_state(Device::private_use1(0), state);
        device_synchronize(Device::private_use1(1));
        auto counting = std::make_unique<CountingNpu>(&setups);
        CountingNpu* seen = counting.get();
        register_accelerator("npu_counting", "counts", std::move(counting));
        char root[] = "/tmp/fulmen-cpp-custom-device-XXXXXX";
        expect(mkdtemp(root) != nullptr, "mkdtemp");
        fit_on("npu_counting", "32-true", "auto", root);
        expect(seen->gets >= 1 && seen->syncs >= 24, "rng_state / synchronize calls: " + std::to_string(seen->gets) +
                                                         " / " + std::to_string(seen->syncs));
        unregister_accelerator("npu_counting");
        if (std::system((std::string("rm -rf ") + root).c_str()) != 0) std::cerr << "custom_device: could not remove " << root << "\n";

        // DDP in a world of one through the accelerator's collectives.
        Calls calls;
        register_accelerator("npu_ddp", "with collectives", std::make_unique<NpuWithCollectives>(&setups, &calls));
        const double on_ddp = fit_on("npu_ddp", "32-true", "ddp");
        expect(on_ddp == on_cpu, "ddp train_loss " + std::to_string(on_ddp) + " vs " + std::to_string(on_cpu));
        distributed::shutdown(60);
        expect(calls.opened == 1 && calls.closed == 1, "the group was not opened and closed once");
        expect(calls.all_reduce >= 8 && calls.broadcast >= 1 && calls.all_gather >= 1,
               "collectives calls: " + std::to_string(calls.all_reduce) + " all_reduce, " +
                   std::to_string(calls.broadcast) + " broadcast, " + std::to_string(calls.all_gather) + " all_gather");
        unregister_accelerator("npu_ddp");
        std::cout << "custom_device: train_loss on npu:0 " << on_npu << " (cpu " << on_cpu << "), with ddp through "
                  << "the accelerator's collectives " << on_ddp << " (" << calls.all_reduce << " all_reduce calls)\n";
    } catch (const Error& e) {
        std::cerr << "custom_device: " << e.what() << "\n";
        return 1;
    }
    return failures == 0 ? 0 : 1;
}

// Train a model exported from PyTorch with torch.export (a .pt2 archive)
// on MNIST-5k with fulmen's C++ binding. The model is a LightningModule
// written in Python (examples/python/export_mnist.py: a small CNN with
// BatchNorm and dropout); python/fulmen_export.py exported its
// training_step, validation_step and forward. This program loads the
// archive, feeds the batches to the exported steps through call_method,
// and lets fulmen's Trainer do the rest (optimizer, epochs, checkpoints,
// logs). Every fifth row is held out for validation (1,000), the rest
// train (4,000).
//
//   python examples/python/export_mnist.py --out mnist.pt2
//   train_exported --model mnist.pt2 --data mnist_5k.csv.gz [--epochs 3]
//                  [--batch-size 64] [--lr 2e-3] [--seed 42] [--threads N]
//                  [--out runs/train_exported]
//
// Prints the validation loss and accuracy after every epoch and the final
// ones; writes logs and checkpoints under <out>/ and the trained
// state_dict (PyTorch's names, BatchNorm statistics included) to
// <out>/model.safetensors, which the Python module loads with
// load_state_dict.
#include <fulmen/fulmen.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace {

using namespace fulmen;

/// Command-line settings.
struct Args {
    std::string model;
    std::string data;
    std::string out = "runs/train_exported";
    int64_t epochs = 3;
    size_t batch_size = 64;
    double lr = 2e-3;
    uint64_t seed = 42;
    int32_t threads = 0;
};

constexpr const char* usage =
    "usage: train_exported --model mnist.pt2 --data mnist_5k.csv.gz [--epochs N] [--batch-size N] [--lr X] "
    "[--seed N] [--threads N] [--out DIR]";

/// Parses argv; throws std::invalid_argument on a bad command line.
Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        const std::string opt = argv[i];
        if (i + 1 >= argc) throw std::invalid_argument(opt + " needs a value");
        const std::string v = argv[++i];
        if (opt == "--model") a.model = v;
        else if (opt == "--data") a.data = v;
        else if (opt == "--out") a.out = v;
        else if (opt == "--epochs") a.epochs = std::stoll(v);
        else if (opt == "--batch-size") a.batch_size = std::stoul(v);
        else if (opt == "--lr") a.lr = std::stod(v);
        else if (opt == "--seed") a.seed = std::stoull(v);
        else if (opt == "--threads") a.threads = std::stoi(v);
        else throw std::invalid_argument("unknown option " + opt);
    }
    if (a.model.empty() || a.data.empty() || a.epochs < 1 || a.batch_size < 1 || a.lr <= 0) {
        throw std::invalid_argument(usage);
    }
    return a;
}

/// MNIST-5k: 784 pixels (scaled to [0, 1]) then the label per row, no header.
Dataset load_mnist(const std::string& path) {
    CsvOptions csv;
    csv.label_column = -1;
    csv.header = 0;
    csv.scale(Scaling::Divide, 255.0);
    return Dataset::from_csv(path, csv);
}

/// What an exported step returns: {"loss": ..., "acc": ...}.
struct StepResult {
    Tensor loss;
    Tensor acc;
};

/// Calls the exported program `program` on the batch.
StepResult run_step(const Model& model, const std::string& program, const Batch& batch) {
    Value args = batch.to_value();  // (pixels, labels), as the program was exported
    Value out = model.call_method(program, {&args});
    return {out.at("loss").to_tensor(), out.at("acc").to_tensor()};
}

/// The LightningModule: the exported steps do the work, the host logs and
/// optimizes. The steps log tensors, not numbers read from them: on a GPU
/// a read (`item()`) would make every step wait for the device, while a
/// logged tensor is read only where the trainer reads values anyway.
LightningModule module_for(const Model& model, double lr) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext& ctx, const Batch& batch) {
            StepResult r = run_step(model, "training_step", batch);
            ctx.log("train_loss", r.loss, Log::on_step | Log::on_epoch);
            ctx.log("train_acc", r.acc, Log::on_epoch);
            return std::move(r.loss);
        })
        .validation_step([&model](StepContext& ctx, const Batch& batch) {
            StepResult r = run_step(model, "validation_step", batch);
            ctx.log("val_loss", r.loss, Log::on_epoch | Log::prog_bar);
            ctx.log("val_acc", r.acc, Log::on_epoch | Log::prog_bar);
        })
        .configure_optimizers([&model, lr](OptimizerConfig& config) {
            config.add(Optimizer::adam(model, AdamOptions(lr)));
        })
        .on_hook([](Hook hook, HookContext& ctx) {
            if (hook != Hook::TrainEpochEnd) return;
            std::printf("epoch %lld:", static_cast<long long>(ctx.epoch() + 1));
            for (const char* name : {"train_loss", "val_loss", "val_acc"}) {
                if (std::optional<double> v = ctx.find_metric(name)) std::printf(" %s %.4f", name, *v);
            }
            std::printf("\n");
            std::fflush(stdout);
        })
        .build();
}

int run(const Args& args) {
    std::cout << "fulmen " << version() << " on libtorch " << libtorch_version() << "\n";
    if (args.threads > 0) set_num_threads(args.threads);
    manual_seed(args.seed);

    Dataset all = load_mnist(args.data);
    auto [val, train] = all.split_every(5);
    Loader train_loader(train, args.batch_size, /*shuffle=*/true, args.seed);
    Loader val_loader(val, 500);

    Model model = Model::load_exported(args.model);
    std::cout << "exported model " << args.model << ": " << model.num_parameters() << " parameters; train "
              << train.len() << " samples, validation " << val.len() << " samples" << std::endl;
    LightningModule module = module_for(model, args.lr);

    std::filesystem::create_directories(args.out);
    Trainer trainer(TrainerOptions()
                        .set("max_epochs", args.epochs)
                        .set("default_root_dir", args.out)
                        .set("log_every_n_steps", 10));
    trainer.fit(module, train_loader, val_loader);

    const std::string weights = args.out + "/model.safetensors";
    model.save(weights);
    std::printf("final validation accuracy: %.2f%% (loss %.4f)\n", 100.0 * trainer.callback_metric("val_acc"),
                trainer.callback_metric("val_loss"));
    std::cout << "logs: " << trainer.log_dir() << "\nweights: " << weights << "\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse(argc, argv));
    } catch (const fulmen::Error& e) {
        std::cerr << "train_exported: " << e.what() << " (code " << e.code() << ")\n";
        return 1;
    } catch (const std::invalid_argument& e) {
        std::cerr << "train_exported: " << e.what() << "\n";
        return 2;
    } catch (const std::out_of_range& e) {
        std::cerr << "train_exported: a number out of range: " << e.what() << "\n";
        return 2;
    }
}

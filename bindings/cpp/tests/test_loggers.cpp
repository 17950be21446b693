// FileLogger: Lightning's CSVLogger and TensorBoardLogger as handles (the
// layout, prefix, flush_logs_every_n_steps, metrics.csv as Lightning writes
// it, images / histograms / texts, errors), added to a Trainer with media
// from a hook, and a host Logger's after_save_checkpoint.
#include "common.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using fulmen::Batch;
using fulmen::FileLogger;
using fulmen::Hook;
using fulmen::HookContext;
using fulmen::LightningModule;
using fulmen::Model;
using fulmen::Optimizer;
using fulmen::OptimizerConfig;
using fulmen::StepContext;
using fulmen::Tensor;
using fulmen::Trainer;
using fulmen_test::FulmenTest;

namespace {

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The bytes of every event file in `dir`, and how many there are.
std::pair<std::string, int> events(const std::filesystem::path& dir) {
    std::string all;
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
            all += read_file(e.path());
            n++;
        }
    }
    return {all, n};
}

LightningModule module_for(const Model& model) {
    return LightningModule::builder(model)
        .training_step([&model](StepContext& ctx, const Batch& batch) {
            Tensor loss = fulmen::loss::cross_entropy(model.forward(batch[0]), batch[1]);
            ctx.log("train_loss", loss.item(), fulmen::Log::on_step);
            return loss;
        })
        .configure_optimizers([&model](OptimizerConfig& config) { config.add(Optimizer::sgd(model, fulmen::SgdOptions(0.1))); })
        .build();
}

}  // namespace

class LoggerTest : public FulmenTest {};

// A TensorBoard logger's sub_dir: its files go below the run's folder;
// refused on a CSV logger and outside the save folder.
TEST_F(LoggerTest, TensorBoardSubDirHoldsTheFiles) {
    const std::string save = fulmen_test::fresh_dir("tb-sub-dir");
    FileLogger csv = FileLogger::csv(save);
    EXPECT_EQ(fulmen_test::error_code([&] { csv.sub_dir("train"); }), FULMEN_CODE_INVALID_ARGUMENT);
    FileLogger logger = FileLogger::tensorboard(save);
    EXPECT_EQ(fulmen_test::error_code([&] { logger.sub_dir("../out"); }), FULMEN_CODE_INVALID_ARGUMENT);
    logger.sub_dir("train");
    logger.log_metrics({{"loss", 0.5}}, 1);
    const std::filesystem::path dir = logger.log_dir();
    EXPECT_EQ(dir, std::filesystem::path(save) / "lightning_logs" / "version_0" / "train");
    size_t events = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    }
    EXPECT_EQ(events, 1u);
    EXPECT_EQ(fulmen_test::error_code([&] { logger.sub_dir("later"); }), FULMEN_CODE_INVALID_STATE);
}

TEST_F(LoggerTest, CsvLoggerWritesLightningsFile) {
    const std::string save = fulmen_test::fresh_dir("csv-logger");
    std::filesystem::create_directories(std::filesystem::path(save) / "exp" / "version_2_old");
    FileLogger logger = FileLogger::csv(save).name("exp").prefix("p").flush_logs_every_n_steps(2);
    EXPECT_EQ(fulmen_test::error_code([&] { logger.default_hp_metric(false); }), FULMEN_CODE_INVALID_ARGUMENT);
    logger.log_metrics({{"loss", 1.0}, {"epoch", 0.0}}, 0);
    const std::filesystem::path dir = logger.log_dir();
    EXPECT_EQ(dir, std::filesystem::path(save) / "exp" / "version_3");
    EXPECT_EQ(logger.version_number(), 3);
    EXPECT_FALSE(std::filesystem::exists(dir / "metrics.csv"));  // (0 + 1) % 2 != 0
    logger.log_metrics({{"val_acc", 1e-5}}, 1);
    EXPECT_EQ(read_file(dir / "metrics.csv"), "p-epoch,p-loss,p-val_acc,step\r\n0.0,1.0,,0\r\n,,1e-05,1\r\n");
    EXPECT_EQ(fulmen_test::error_code([&] { logger.name("other"); }), FULMEN_CODE_INVALID_STATE);
    logger.log_hyperparams({{"lr", "0.1"}, {"name", "mlp"}});
    logger.finalize();
    EXPECT_EQ(read_file(dir / "hparams.yaml"), "lr: 0.1\nname: \"mlp\"\n");
    EXPECT_EQ(fulmen_test::error_code([&] { logger.add_text("t", "x", 0); }), FULMEN_CODE_INVALID_ARGUMENT);

    FileLogger named = FileLogger::csv(save).name(std::nullopt).version(std::string("run-a"));
    EXPECT_EQ(std::filesystem::path(named.log_dir()), std::filesystem::path(save) / "run-a");
    EXPECT_EQ(named.version_number(), -1);
    FileLogger fixed = FileLogger::csv(save).version(7);
    EXPECT_EQ(std::filesystem::path(fixed.log_dir()), std::filesystem::path(save) / "lightning_logs" / "version_7");
    EXPECT_EQ(fulmen_test::error_code([] { FileLogger::csv(""); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(fulmen_test::error_code([&] { FileLogger::csv(save).name("../out"); }), FULMEN_CODE_INVALID_ARGUMENT);
}

TEST_F(LoggerTest, TensorBoardMedia) {
    const std::string save = fulmen_test::fresh_dir("tb-logger");
    FileLogger tb = FileLogger::tensorboard(save).name("tb");
    EXPECT_EQ(fulmen_test::error_code([&] { tb.flush_logs_every_n_steps(3); }), FULMEN_CODE_INVALID_ARGUMENT);
    tb.log_hyperparams({{"lr", "0.001"}});
    tb.log_metrics({{"loss", 0.5}}, 1);
    tb.add_image("rgb", Tensor::randn({3, 4, 5}), 2);
    tb.add_image("hwc", Tensor::from_vector(std::vector<uint8_t>(4 * 5 * 4, 200), {4, 5, 4}), 2, "HWC");
    tb.add_histogram("values", Tensor::randn({100}), 3);
    tb.add_text("notes", "*hi*", 4);
    EXPECT_EQ(fulmen_test::error_code([&] { tb.add_image("bad", Tensor::randn({2, 4, 5}), 2); }), FULMEN_CODE_SHAPE_MISMATCH);
    EXPECT_EQ(fulmen_test::error_code([&] { tb.add_image("bad", Tensor::randn({4, 5}), 2, "WHC"); }), FULMEN_CODE_SHAPE_MISMATCH);
    EXPECT_EQ(fulmen_test::error_code([&] { tb.add_image("bad", Tensor::randn({4, 5}), 2, "HQ"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(fulmen_test::error_code([&] { tb.add_histogram("e", Tensor::zeros({0}), 3); }), FULMEN_CODE_INVALID_ARGUMENT);
    tb.finalize();
    const std::filesystem::path dir = tb.log_dir();
    EXPECT_EQ(dir, std::filesystem::path(save) / "tb" / "version_0");
    auto [bytes, files] = events(dir);
    EXPECT_EQ(files, 1);
    for (const char* tag : {"loss", "hp_metric", "rgb", "hwc", "values", "notes/text_summary", "*hi*", "\x89PNG"}) {
        EXPECT_NE(bytes.find(tag), std::string::npos) << tag;
    }
    EXPECT_EQ(read_file(dir / "hparams.yaml"), "lr: 0.001\n");
}

TEST_F(LoggerTest, TrainerLogsToAddedLoggersAndMediaFromHooks) {
    Model model = fulmen_test::mlp();
    fulmen::Dataset ds = fulmen_test::blobs(32, 5);
    fulmen::Loader train(ds, 8);
    LightningModule module = module_for(model);
    module.set_hparam("lr", "0.1");
    const std::string save = fulmen_test::fresh_dir("trainer-loggers");
    FileLogger csv = FileLogger::csv(save).name("csv");
    FileLogger tb = FileLogger::tensorboard(save).name("tb");
    std::vector<std::string> saved;
    fulmen::Logger host;
    host.after_save_checkpoint = [&](const std::string& path) { saved.push_back(path); };

    Trainer trainer(fulmen_test::quiet_options(2).set("default_root_dir", save).set("logger", false).set("log_every_n_steps", 1));
    trainer.add_file_logger(csv).add_file_logger(tb).add_logger(std::move(host));
    trainer.add_callback("media", [](Hook h, HookContext& ctx) {
        if (h != Hook::TrainEpochEnd) return;
        ctx.add_image("sample", Tensor::randn({1, 3, 3}), ctx.global_step());
        ctx.add_histogram("noise", Tensor::randn({16}), ctx.global_step());
        ctx.add_text("note", "epoch done", ctx.global_step());
    });
    trainer.fit(module, train);

    const std::filesystem::path csv_dir = csv.log_dir(), tb_dir = tb.log_dir();
    EXPECT_EQ(std::filesystem::path(trainer.log_dir()), csv_dir);  // the first added logger's folder
    const std::string rows = read_file(csv_dir / "metrics.csv");
    EXPECT_EQ(rows.rfind("epoch,step,train_loss\r\n0,0,", 0), 0u) << rows;
    EXPECT_EQ(read_file(csv_dir / "hparams.yaml"), "lr: 0.1\n");
    EXPECT_EQ(read_file(tb_dir / "hparams.yaml"), "lr: 0.1\n");
    auto [bytes, files] = events(tb_dir);
    EXPECT_EQ(files, 1);
    for (const char* tag : {"train_loss", "epoch", "sample", "noise", "note/text_summary", "_hparams_/experiment"}) {
        EXPECT_NE(bytes.find(tag), std::string::npos) << tag;
    }
    // after_save_checkpoint once per checkpoint of the default ModelCheckpoint.
    ASSERT_EQ(saved.size(), 2u);
    EXPECT_EQ(std::filesystem::path(saved[1]).parent_path(), csv_dir / "checkpoints");

    // Without a TensorBoard logger, a hook's add_text throws INVALID_STATE.
    fulmen::Code code = static_cast<fulmen::Code>(0);
    Trainer csv_only(fulmen_test::quiet_options(1).set("default_root_dir", save).set("logger", "csv"));
    csv_only.add_callback("media", [&](Hook h, HookContext& ctx) {
        if (h == Hook::TrainEpochEnd) code = fulmen_test::error_code([&] { ctx.add_text("t", "x", 0); });
    });
    csv_only.fit(module, train);
    EXPECT_EQ(code, FULMEN_CODE_INVALID_STATE);
}

// The MLflow logger's settings and errors without a server (the real
// server's round trip is tests/interop/mlflow_logger.py).
TEST_F(LoggerTest, MlflowLoggerSettingsAndErrors) {
    using fulmen::LogModel;
    using fulmen::MlflowLogger;
    EXPECT_EQ(fulmen_test::error_code([] { MlflowLogger("https://example.com", "e"); }), FULMEN_CODE_UNSUPPORTED);
    EXPECT_EQ(fulmen_test::error_code([] { MlflowLogger("file:./mlruns", "e"); }), FULMEN_CODE_INVALID_ARGUMENT);
    // Port 1 on the loopback: nothing listens, so the first use fails.
    MlflowLogger l = MlflowLogger("http://127.0.0.1:1", "exp").run_name("r").tag("team", "fulmen").log_model(LogModel::All);
    l.artifact_location("/nonexistent/artifacts").prefix("p");
    EXPECT_EQ(fulmen_test::error_code([&] { l.version(3); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(fulmen_test::error_code([&] { l.log_metrics({{"loss", 1.0}}, 0); }), FULMEN_CODE_IO);
    EXPECT_EQ(fulmen_test::error_code([&] { (void)l.run_id(); }), FULMEN_CODE_IO);
    EXPECT_EQ(fulmen_test::error_code([&] { l.finalize("bogus"); }), FULMEN_CODE_INVALID_ARGUMENT);
    l.finalize();  // never reached the server: nothing to end
    fulmen::FileLogger csv = fulmen::FileLogger::csv(fulmen_test::fresh_dir("mlflow-csv"));
    EXPECT_EQ(fulmen_test::error_code([&] { fulmen::check(fulmen_logger_mlflow_set_run_id(csv.get(), "x")); }),
              FULMEN_CODE_INVALID_ARGUMENT);
}

// The Comet logger: settings, the working folder and the archive,
// wrong-kind calls, end (comet_ml's upload code reads these archives in
// tests/interop/comet_logger.py).
TEST_F(LoggerTest, CometLoggerWritesAnOfflineArchive) {
    using fulmen::CometLogger;
    const std::string save = fulmen_test::fresh_dir("comet-logger");
    EXPECT_EQ(fulmen_test::error_code([&] { CometLogger(save, "p").experiment_key("short"); }),
              FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(fulmen_test::error_code([&] { CometLogger(save, "p").mode("append"); }), FULMEN_CODE_INVALID_ARGUMENT);
    const std::string key = "cpp0123456789abcdef0123456789abc";
    CometLogger l = CometLogger(save, "proj").name("cpp run").experiment_key(key).mode("create").workspace("w").tag("t");
    l.prefix("p");
    EXPECT_EQ(fulmen_test::error_code([&] { l.version(3); }), FULMEN_CODE_INVALID_ARGUMENT);
    l.log_hyperparams({{"lr", "0.1"}});
    l.log_metrics({{"loss", 0.5}}, 0);
    EXPECT_EQ(fulmen_test::error_code([&] { l.name("late"); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(l.key(), key);
    const std::filesystem::path archive = l.archive_path();
    EXPECT_EQ(archive, std::filesystem::path(save) / (key + ".zip"));
    EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(save) / (key + ".partial") / "messages.json"));
    l.finalize();
    l.end();
    EXPECT_TRUE(std::filesystem::is_regular_file(archive));
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(save) / (key + ".partial")));
    EXPECT_EQ(fulmen_test::error_code([&] { l.log_metrics({{"loss", 0.25}}, 1); }), FULMEN_CODE_INVALID_STATE);
    fulmen::FileLogger csv = fulmen::FileLogger::csv(fulmen_test::fresh_dir("comet-csv"));
    EXPECT_EQ(fulmen_test::error_code([&] { fulmen::check(fulmen_logger_comet_set_name(csv.get(), "x")); }),
              FULMEN_CODE_INVALID_ARGUMENT);
}

// The W&B logger: settings, the run folder and file, wrong-kind calls,
// finish (W&B's own reader reads these files in tests/interop/wandb_logger.py).
TEST_F(LoggerTest, WandbLoggerWritesAnOfflineRun) {
    using fulmen::WandbLogger;
    const std::string save = fulmen_test::fresh_dir("wandb-logger");
    EXPECT_EQ(fulmen_test::error_code([&] { WandbLogger(save, "p").id("../x"); }), FULMEN_CODE_INVALID_ARGUMENT);
    EXPECT_EQ(fulmen_test::error_code([&] { WandbLogger(save, "p").setting("colour", "x"); }),
              FULMEN_CODE_INVALID_ARGUMENT);
    WandbLogger l = WandbLogger(save, "proj").name("cpp run").id("cpp-1").setting("group", "g").tag("t");
    l.prefix("p");
    EXPECT_EQ(fulmen_test::error_code([&] { l.version(3); }), FULMEN_CODE_INVALID_ARGUMENT);
    l.log_hyperparams({{"lr", "0.1"}});
    l.log_metrics({{"loss", 0.5}}, 0);
    EXPECT_EQ(fulmen_test::error_code([&] { l.name("late"); }), FULMEN_CODE_INVALID_STATE);
    EXPECT_EQ(l.run_id(), "cpp-1");
    const std::string dir = l.run_dir();
    EXPECT_EQ(std::filesystem::path(dir).parent_path(), std::filesystem::path(save) / "wandb");
    EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(dir) / "run-cpp-1.wandb"));
    l.finalize();
    l.finish(0);
    EXPECT_EQ(fulmen_test::error_code([&] { l.log_metrics({{"loss", 0.25}}, 1); }), FULMEN_CODE_INVALID_STATE);
    fulmen::FileLogger csv = fulmen::FileLogger::csv(fulmen_test::fresh_dir("wandb-csv"));
    EXPECT_EQ(fulmen_test::error_code([&] { fulmen::check(fulmen_logger_wandb_set_id(csv.get(), "x")); }),
              FULMEN_CODE_INVALID_ARGUMENT);
}

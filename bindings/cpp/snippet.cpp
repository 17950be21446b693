// Learn y = 3x - 1 from noisy samples with a LightningModule made of lambdas.
#include <fulmen/fulmen.hpp>

#include <iostream>

int main() {
    using namespace fulmen;
    manual_seed(0);
    Tensor x = Tensor::rand({256, 1});
    Tensor y = x * 3.0 - 1.0 + Tensor::randn({256, 1}) * 0.05;
    Loader train(Dataset::from_tensors({x, y}), 32, /*shuffle=*/true);

    Model model = Model::sequential({Model::linear(1, 1)});
    LightningModule module = LightningModule::builder(model)
        .training_step([&](StepContext& ctx, const Batch& batch) {
            Tensor loss = loss::mse(model(batch[0]), batch[1]);
            ctx.log("train_loss", loss, Log::on_epoch);  // read when the epoch ends
            return loss;  // any exception thrown here comes back from fit()
        })
        .configure_optimizers([&](OptimizerConfig& config) {
            config.add(Optimizer::sgd(model, SgdOptions(0.5)));
        })
        .build();

    Trainer trainer(TrainerOptions()
                        .max_epochs(30)
                        .enable_progress_bar(false)
                        .logger(false)
                        .enable_checkpointing(false));
    try {
        trainer.fit(module, train);
    } catch (const Error& e) {
        std::cerr << "training failed: " << e.what() << " (code " << e.code() << ")\n";
        return 1;
    }
    std::cout << "loss " << trainer.callback_metric("train_loss") << ", w = "
              << model.state_dict_get("0.weight").item() << ", b = "
              << model.state_dict_get("0.bias").item() << "\n";
}

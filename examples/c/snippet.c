/* Learn y = 3x - 1 from noisy samples with fulmen's trainer, from C. */
#include <fulmen.h>
#include <stdio.h>

#define TRY(call) do { fulmen_error *e_ = (call); if (e_) { fprintf(stderr, "%s\n", fulmen_error_message(e_)); \
    fulmen_error_free(e_); return 1; } } while (0)

static fulmen_error *training_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    fulmen_tensor *x, *y, *pred;  /* released when the step returns */
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (!e) e = fulmen_batch_get(batch, 1, &y);
    if (!e) e = fulmen_model_forward(model, x, &pred);
    if (!e) e = fulmen_loss_mse(pred, y, FULMEN_REDUCTION_MEAN, loss);
    /* the epoch's mean, kept on the loss's device until the epoch ends */
    if (!e) e = fulmen_step_context_log_tensor(ctx, "train_loss", *loss, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *model, fulmen_optimizer_config *config) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.5;
    fulmen_optimizer *sgd;
    fulmen_error *e = fulmen_optimizer_sgd_new(model, NULL, 0, &o, &sgd);
    return e ? e : fulmen_optimizer_config_add(config, sgd, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
}

int main(void) {
    int64_t shape[2] = {256, 1};
    fulmen_tensor *x, *noise, *y3, *y, *yn, *target;
    TRY(fulmen_manual_seed(0));
    TRY(fulmen_tensor_rand(shape, 2, FULMEN_DTYPE_F32, &x));
    TRY(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &noise));
    TRY(fulmen_tensor_mul_scalar(x, 3.0, &y3));
    TRY(fulmen_tensor_add_scalar(y3, -1.0, &y));
    TRY(fulmen_tensor_mul_scalar(noise, 0.05, &yn));
    TRY(fulmen_tensor_add(y, yn, &target));
    const fulmen_tensor *columns[2] = {x, target};
    fulmen_dataset *data;
    fulmen_loader *loader;
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 32;
    lo.shuffle = true;
    TRY(fulmen_dataset_from_tensors(columns, 2, &data));
    TRY(fulmen_loader_new(data, &lo, &loader));

    fulmen_model *model;
    TRY(fulmen_model_linear_new(1, 1, true, &model));
    fulmen_module_vtable vt = {.struct_size = sizeof vt, .userdata = model, .training_step = training_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module;
    TRY(fulmen_lightning_module_new(&vt, model, &module));
    fulmen_trainer_options *opts;
    fulmen_trainer *trainer;
    TRY(fulmen_trainer_options_new(&opts));
    TRY(fulmen_trainer_options_set(opts, "max_epochs", "30"));
    TRY(fulmen_trainer_options_set(opts, "enable_progress_bar", "false"));
    TRY(fulmen_trainer_options_set(opts, "enable_model_summary", "false"));
    TRY(fulmen_trainer_options_set(opts, "enable_checkpointing", "false"));
    TRY(fulmen_trainer_options_set(opts, "logger", "false"));
    TRY(fulmen_trainer_new(opts, &trainer));
    TRY(fulmen_trainer_fit(trainer, module, loader, NULL, NULL));

    double loss, w[1], b[1];
    fulmen_tensor *weight, *bias;
    TRY(fulmen_trainer_callback_metric(trainer, "train_loss", &loss));
    TRY(fulmen_model_state_dict_get(model, "weight", &weight));
    TRY(fulmen_model_state_dict_get(model, "bias", &bias));
    TRY(fulmen_tensor_copy_to(weight, FULMEN_DTYPE_F64, w, sizeof w));
    TRY(fulmen_tensor_copy_to(bias, FULMEN_DTYPE_F64, b, sizeof b));
    printf("loss %.5f, w = %.3f, b = %.3f\n", loss, w[0], b[0]);

    fulmen_tensor *all[] = {x, noise, y3, y, yn, target, weight, bias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fulmen_tensor_free(all[i]);
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(data);
    if (fulmen_live_handles() != 0) return 1; /* everything was freed */
    return (w[0] > 2.8 && w[0] < 3.2 && b[0] > -1.2 && b[0] < -0.8) ? 0 : 1;
}

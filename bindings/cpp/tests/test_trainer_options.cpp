// Generated from src/trainer/option_table.rs by tools/codegen/options.rs; do not edit (regenerate with `make header`).
// Calls every typed trainer-option setter with the option's default (and,
// for optional values, with a value first), then builds a trainer.
#include <fulmen/fulmen.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>

TEST(TrainerOptionSetters, EverySetterTakesItsDefault) {
fulmen::TrainerOptions o;
    o.accelerator("auto");
    o.strategy("auto");
    o.devices("auto");
    o.num_nodes(1);
    o.precision("32-true");
    o.logger("csv");
    o.logger(true);
    o.fast_dev_run(0);
    o.fast_dev_run(false);
    o.max_epochs(1);
    o.max_epochs(std::nullopt);
    o.min_epochs(1);
    o.min_epochs(std::nullopt);
    o.max_steps(-1);
    o.min_steps(1);
    o.min_steps(std::nullopt);
    o.max_time(std::chrono::milliseconds(90000));
    o.max_time(std::nullopt);
    o.limit_train_batches(1.0);
    o.limit_val_batches(1.0);
    o.limit_test_batches(1.0);
    o.limit_predict_batches(1.0);
    o.overfit_batches(0);
    o.val_check_interval(1.0);
    o.check_val_every_n_epoch(1);
    o.num_sanity_val_steps(2);
    o.log_every_n_steps(50);
    o.enable_checkpointing(true);
    o.checkpoint_format("lightning");
    o.checkpoint_prefix("");
    o.enable_progress_bar(true);
    o.enable_model_summary(true);
    o.use_distributed_sampler(true);
    o.reload_dataloaders_every_n_epochs(0);
    o.accumulate_grad_batches(1);
    o.gradient_clip_val(1);
    o.gradient_clip_val(std::nullopt);
    o.gradient_clip_algorithm("norm");
    o.profiler("none");
    o.deterministic("warn");
    o.deterministic(false);
    o.benchmark("true");
    o.benchmark("none");
    o.inference_mode(true);
    o.cuda_graphs(false);
    o.cuda_graphs_warmup_steps(3);
    o.cuda_graphs_fallback(false);
    o.detect_anomaly(false);
    o.barebones(false);
    o.default_root_dir(".");
    o.seed(1);
    o.seed(std::nullopt);
    o.detect_nonfinite_loss(true);
    o.callback_timeout(std::chrono::milliseconds(90000));
    o.callback_timeout(std::nullopt);
    o.handle_signals(true);
    o.async_checkpoint_io(false);
    o.slurm_auto_requeue(false);
    o.process_group_backend("none");
    o.sync_batchnorm(false);
    o.fsdp_sharding_strategy("FULL_SHARD");
    o.fsdp_auto_wrap_policy("none");
    o.fsdp_min_num_params("none");
    o.fsdp_activation_checkpointing_policy("none");
    o.fsdp_param_dtype("none");
    o.fsdp_reduce_dtype("none");
    o.fsdp_forward_prefetch(false);
    o.fsdp_backward_prefetch("BACKWARD_PRE");
    o.fsdp_sync_module_states(true);
    o.fsdp_reduce_scatter_unused_params(false);
    o.fsdp_cpu_offload(false);
    o.fsdp_state_dict_type("full");
    o.tensor_parallel_plan("none");
    o.data_parallel_size("auto");
    o.tensor_parallel_size("auto");
    o.save_distributed_checkpoint(true);
    o.ddp_timeout(std::chrono::seconds(1800));
    fulmen::Trainer trainer(o);
    EXPECT_TRUE(static_cast<bool>(trainer));
}

// fulmen C++ binding: a thin, header-only C++17 layer over fulmen.h.
//
// Usage:
//
//   #include <fulmen/fulmen.hpp>
//
//   fulmen::Model model = fulmen::Model::sequential({
//       fulmen::Model::linear(2, 16), fulmen::Model::tanh(), fulmen::Model::linear(16, 2)});
//   fulmen::LightningModule module = fulmen::LightningModule::builder(model)
//       .training_step([&](fulmen::StepContext& ctx, const fulmen::Batch& batch) {
//           fulmen::Tensor loss = fulmen::loss::cross_entropy(model(batch[0]), batch[1]);
//           ctx.log("train_loss", loss.item());
//           return loss;
//       })
//       .configure_optimizers([&](fulmen::OptimizerConfig& config) {
//           config.add(fulmen::Optimizer::sgd(model, fulmen::SgdOptions(0.1)));
//       })
//       .build();
//   fulmen::Trainer trainer(fulmen::TrainerOptions().set("max_epochs", 5));
//   trainer.fit(module, fulmen::Loader(dataset, 32, true));
//
// Accelerators: Accelerator::get("cpu"), registry(), register_accelerator
// (a CustomAccelerator), TrainerOptions::accelerator / set("devices", ...).
//
// Strategies: Strategy("ddp").set("timeout", 60), strategy_registry(),
// TrainerOptions::set_strategy / set("strategy", "ddp"). Host-owned loops:
// distributed::join / all_reduce / barrier / ..., Ddp for gradient
// averaging, Loader::shard for a rank's share of the data and
// Loader::batch to read it.
//
// Link with -lfulmen (the C library); nothing here re-implements its work.
// A program checks at start-up that the library it loads serves the header
// it was compiled with (abi.hpp: check_abi, FULMEN_NO_STARTUP_ABI_CHECK).
//
// Errors: every failing call throws fulmen::Error (a std::runtime_error with
// code(), a fulmen_code). An exception thrown by a C++ callback (step, data
// source, iterator) is caught at the C boundary and rethrown, unchanged, by
// the fulmen call that ran the callback (e.g. Trainer::fit). Hooks reach
// Callback objects (from lambdas, Trainer::add_callback) and the module's
// on_hook; Logger lambdas receive metrics (Trainer::add_logger); FileLogger
// is Lightning's CSVLogger / TensorBoardLogger (Trainer::add_file_logger).
//
// Ownership: each class owns one C handle (move-only, freed by its
// destructor; get() / release() / adopt() for interop with fulmen.h). Every
// Tensor is kept out of callback scopes (fulmen_tensor_keep), so a Tensor
// made inside a step may be stored and outlive it. Batch, StepContext,
// BatchBuilder and OptimizerConfig are borrowed views, valid only during
// the callback that receives them.
//
// Helper threads: inside a callback, CallbackContext::current() names it;
// a helper thread holding an AttachedScope over it works inside the
// callback (its fulmen calls count as the callback's, with the callback's
// grad mode and autocast) until the scope ends (callback_context.hpp).
#pragma once

#include <fulmen.h>

#include "abi.hpp"
#include "accelerator.hpp"
#include "callback_context.hpp"
#include "checkpoint_io.hpp"
#include "collectives.hpp"
#include "data.hpp"
#include "datamodule.hpp"
#include "distributed.hpp"
#include "error.hpp"
#include "fabric.hpp"
#include "flop_counts.hpp"
#include "flop_formulas.hpp"
#include "handle.hpp"
#include "hooks.hpp"
#include "host_module.hpp"
#include "init.hpp"
#include "loggers.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "optim.hpp"
#include "precision.hpp"
#include "strategy.hpp"
#include "tensor.hpp"
#include "trainer.hpp"
#include "value.hpp"

#include <cstdint>
#include <string>

namespace fulmen {

/// The library version, "MAJOR.MINOR.PATCH".
inline std::string version() { return fulmen_version(); }

/// The libtorch version fulmen was built against.
inline std::string libtorch_version() { return fulmen_libtorch_version(); }

/// Seeds every random generator (Lightning's seed_everything).
inline void manual_seed(uint64_t seed) { check(fulmen_manual_seed(seed)); }

/// Sets libtorch's intra-op thread count.
inline void set_num_threads(int32_t n) { check(fulmen_set_num_threads(n)); }

/// libtorch's intra-op thread count.
inline int32_t num_threads() { return fulmen_get_num_threads(); }

/// libtorch's process-wide switches a trainer sets during its runs.
struct TorchFlags {
    bool deterministic = false;    ///< deterministic algorithms on
    bool warn_only = false;        ///< they only warn
    bool cudnn_benchmark = false;  ///< torch.backends.cudnn.benchmark
};

/// The current libtorch switches (fulmen_torch_flags).
inline TorchFlags torch_flags() {
    TorchFlags f;
    fulmen_torch_flags(&f.deterministic, &f.warn_only, &f.cudnn_benchmark);
    return f;
}

/// Number of live fulmen handles of every type (a leak check).
inline size_t live_handles() { return fulmen_live_handles(); }

}  // namespace fulmen

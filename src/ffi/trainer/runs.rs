//! `fulmen_trainer_options` and `fulmen_trainer`: Lightning's Trainer.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle, Shared};
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::lightning_module::fulmen_lightning_module;
use crate::ffi::nn::model::copy_str;
use crate::ffi::tensor::handle::{emit, fulmen_tensor};
use crate::trainer::{BatchSource, LightningModule, Trainer, TrainerOptions};
use std::ffi::c_char;

/// Trainer options set by name, as Lightning's `Trainer(...)` keyword
/// arguments. Free with `fulmen_trainer_options_free`.
pub struct fulmen_trainer_options {
    pub(crate) opts: TrainerOptions,
}

impl Handle for fulmen_trainer_options {
    const C_NAME: &'static str = "fulmen_trainer_options";
}

/// A trainer. Free with `fulmen_trainer_free`.
pub struct fulmen_trainer {
    pub(crate) inner: Trainer,
}

impl Handle for fulmen_trainer {
    const C_NAME: &'static str = "fulmen_trainer";
}

/// Creates trainer options with Lightning's defaults: max_epochs 1000 when
/// neither max_epochs nor max_steps is set, 2 sanity-check validation
/// batches, log_every_n_steps 50, progress bar, model summary, CSV and
/// TensorBoard loggers and a checkpoint of the latest epoch, all under
/// default_root_dir "."; accelerator and devices "auto", precision
/// "32-true".
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_new(out: *mut *mut fulmen_trainer_options) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        out.write(handle::into_raw(fulmen_trainer_options { opts: TrainerOptions::default() }));
        Ok(())
    })
}

/// Sets option `key` from its text form, as Lightning's `Trainer(...)`
/// keyword arguments. Numbers written with '.' or an exponent are floats
/// (fractions), without them integers (counts): `limit_train_batches` "1.0"
/// is every batch, "1" is one batch. Booleans are true/false, 1/0, yes/no
/// or on/off, in any case. The keys (kind of value; default):
// Generated from src/trainer/option_table.rs by tools/codegen/options.rs: begin
/// - `accelerator` (text; default auto): "auto", "cpu", "cuda", "gpu",
///   "mps", "xla", "tpu" or a registered accelerator's name.
/// - `strategy` (text; default auto): a registered strategy with default
///   settings: "auto", "single_device", "ddp", "ddp_spawn",
///   "ddp_find_unused_parameters_true", "dp", "xla", ...; the node count,
///   timeout and backend set so far are kept.
/// - `devices` (text; default auto): "auto", a count ("1", "-1" = all) or a
///   list of indices ("0,2", "[1]").
/// - `num_nodes` (integer; default 1): machines in a distributed job.
/// - `precision` (text; default 32-true): "32-true", "16-mixed",
///   "bf16-mixed", "64-true", "16-true", "bf16-true", or legacy "32", "16",
///   "bf16", "64".
/// - `logger` (bool or text; default true): true (CSV and TensorBoard),
///   false, "csv", "tensorboard" or "csv,tensorboard".
/// - `fast_dev_run` (bool or batch count; default false): run only this
///   many batches of each loop (true = 1), without loggers or checkpoints.
/// - `max_epochs` (integer or "none"; default none): stop after this many
///   epochs; -1 = no limit; none with max_steps -1 means 1000.
/// - `min_epochs` (integer or "none"; default none): train at least this
///   many epochs before an early stop takes effect.
/// - `max_steps` (integer; default -1): stop after this many optimizer
///   steps; -1 = no limit.
/// - `min_steps` (integer or "none"; default none): take at least this many
///   optimizer steps before an early stop takes effect.
/// - `max_time` (seconds, "DD:HH:MM:SS" or "none"; default none): stop
///   training after this long ("none" = no limit).
/// - `limit_train_batches` (batch count, or fraction written with '.';
///   default 1.0): batches per training epoch: 1.0 = all, 0.25 = a quarter,
///   10 = ten.
/// - `limit_val_batches` (batch count, or fraction written with '.';
///   default 1.0): batches per validation run (0 turns validation off).
/// - `limit_test_batches` (batch count, or fraction written with '.';
///   default 1.0): batches per test run.
/// - `limit_predict_batches` (batch count, or fraction written with '.';
///   default 1.0): batches per predict run.
/// - `overfit_batches` (batch count, or fraction written with '.'; default
///   0): train and validate on this many (or this fraction of the) training
///   batches; 0 = off.
/// - `val_check_interval` (batch count, or fraction written with '.';
///   default 1.0): validate after this fraction of an epoch, or after every
///   this many training batches; or, given as "DD:HH:MM:SS", once that much
///   wall time passed since training started or the last validation ended,
///   checked after each training batch (the epoch's end then validates only
///   when the time is up; with check_val_every_n_epoch n, only in every
///   n-th epoch; ignored by fast_dev_run).
/// - `check_val_every_n_epoch` (integer or "none"; default 1): validate
///   every n epochs; none counts val_check_interval batches across epochs.
/// - `num_sanity_val_steps` (integer; default 2): validation batches run
///   before training as a sanity check; -1 = all.
/// - `log_every_n_steps` (integer; default 50): optimizer steps between
///   writes of step metrics to the loggers; with barebones only 0 is
///   accepted.
/// - `enable_checkpointing` (bool; default true): add a ModelCheckpoint
///   saving the latest epoch when none is given.
/// - `checkpoint_format` (text; default lightning): file format of the
///   checkpoints the trainer writes: "lightning" (Lightning's torch.save
///   dict, which torch.load and Lightning's Trainer read) or "safetensors"
///   (fulmen's own, which any safetensors reader opens); either is read
///   back, whatever is written.
/// - `checkpoint_prefix` (text; default ): LightningModule attribute
///   holding the network in Lightning checkpoints, with its dot ("model."):
///   written before each state_dict name and removed when reading; empty
///   writes the names as they are and, when reading, removes the attribute
///   prefix that makes the names fit the model.
/// - `enable_progress_bar` (bool; default true): show progress on stderr.
/// - `enable_model_summary` (bool; default true): print the layer table
///   when fit starts.
/// - `use_distributed_sampler` (bool; default true): under DDP, give each
///   rank its shard of every DataLoader (torch's DistributedSampler,
///   padded, reshuffled per epoch); false: every rank reads the loaders as
///   they are, as Lightning's use_distributed_sampler.
/// - `reload_dataloaders_every_n_epochs` (integer; default 0): call the
///   module's train_dataloader / val_dataloader again every n epochs; 0:
///   once (loaders passed to fit are never reloaded).
/// - `accumulate_grad_batches` (integer; default 1): accumulate gradients
///   over this many batches per optimizer step.
/// - `gradient_clip_val` (number or "none"; default none): clip gradients
///   at this value; none = no clipping.
/// - `gradient_clip_algorithm` (text; default norm): "norm" (scale so the
///   joint 2-norm is at most the value) or "value" (clamp each element).
/// - `profiler` (text; default none): "simple": the wall time of every
///   hook, step, backward, optimizer step and batch fetch, reported at the
///   end of each run on stderr and by fulmen_trainer_profiler_report
///   (Lightning's SimpleProfiler); "pytorch": that, and libtorch's own
///   profiler over the run, whose Chrome trace goes to <log
///   dir>/<stage>.pt.trace.json (<stage>-rank<N> under DDP) with the hooks
///   as named scopes, and whose longest operators the report lists
///   (Lightning's PyTorchProfiler).
/// - `deterministic` (bool or text; default false): true: libtorch's
///   deterministic algorithms during the run, an op without a deterministic
///   implementation fails; "warn": the same, but such an op warns and runs
///   (torch.use_deterministic_algorithms(True, warn_only=True)); false
///   leaves the setting as it is (process-wide, restored after the run).
/// - `benchmark` (bool or text; default none):
///   torch.backends.cudnn.benchmark during the run (process-wide, restored
///   after): cuDNN times its convolution algorithms per input shape and
///   keeps the fastest; "none" leaves it as it is, or off when
///   deterministic is on (with deterministic and true, a warning says
///   PyTorch then ignores determinism for cuDNN); no effect on the CPU or
///   without cuDNN.
/// - `inference_mode` (bool; default true): evaluate without autograd.
/// - `cuda_graphs` (bool; default false): capture each kind of training
///   step (batch shapes and dtypes, accumulation) in a CUDA graph after
///   cuda_graphs_warmup_steps eager runs, and replay it: the batch is
///   copied into the graph's inputs and forward, backward, clipping and the
///   update run as one launch (at most 8 graphs); validation, test and
///   predict steps likewise in forward-only graphs (per stage, loader and
///   batch shapes; at most 8 more). The steps and the hooks between
///   backward and the update run at the capture only, their device work at
///   every replay; the device tensors a step logs are logged again after
///   each replay; a step's returned tensor is the graph's output,
///   overwritten by the next replay (a predict step's tensors are copied).
///   Refused with FULMEN_CODE_UNSUPPORTED: other devices than CUDA (and the
///   tests' fake device), several devices, manual optimization,
///   optimization hooks, detect_anomaly, optimizers other than fused SGD,
///   Adam and AdamW, and a step that reads a value or logs a number or a
///   CPU tensor (a step value logged with sync_dist is read after each
///   replay); gradients stay allocated (zeroed in place), and changing
///   hyperparameters other than the learning rate, or the model's
///   parameters and buffers, after a capture fails the run; a predict step
///   that sets its prediction as a value or returns host tensors is refused
///   (a blocking copy to the host fails the capture itself).
/// - `cuda_graphs_warmup_steps` (integer; default 3): eager runs of each
///   kind of step before cuda_graphs captures it (at least 1: lazy state
///   such as optimizer buffers must exist before a capture).
/// - `cuda_graphs_fallback` (bool; default false): with cuda_graphs, a kind
///   of step that cannot be captured (its capture failed, or 8 graphs
///   exist) runs eagerly from then on, with one warning, instead of failing
///   the run; on CUDA a failed capture still fails it (torch's CUDA
///   generator stays marked as capturing after one).
/// - `detect_anomaly` (bool; default false): autograd's anomaly mode during
///   the run: a NaN gradient fails backward, naming the operation.
/// - `barebones` (bool; default false): Lightning's barebones mode, to
///   measure the trainer's own overhead: turns off checkpointing, the
///   loggers, the progress bar, the model summary and the sanity check,
///   drops the module's log calls (with one warning per run); while on,
///   turning any of those on, setting log_every_n_steps other than 0,
///   fast_dev_run, detect_anomaly or a profiler, or adding a logger, fails
///   with Lightning's error (options set before it are turned off, not
///   refused; turning it off keeps them off).
/// - `default_root_dir` (text; default .): folder for logs and checkpoints.
/// - `seed` (integer or "none"; default none): seed everything at the start
///   of each fit / validate / test / predict (a non-negative integer).
/// - `detect_nonfinite_loss` (bool; default true): end the run with an
///   error when a training loss is NaN or infinite: on the CPU before that
///   step's update; on an accelerator the check stays on the device and is
///   read with the trainer's other values (every log_every_n_steps steps,
///   epoch ends, checkpoints, the run's end), so steps never wait for the
///   device; the error then names the steps it happened between, whose
///   updates were made (the ranks of a job agree at each reading: a NaN on
///   one rank stops every rank there).
/// - `callback_timeout` (seconds, "DD:HH:MM:SS" or "none"; default none): a
///   host callback that runs longer fails the run with FULMEN_CODE_CALLBACK
///   when it returns, since fulmen cannot interrupt host code; "none" or 0
///   = no limit.
/// - `handle_signals` (bool; default true): SIGINT / SIGTERM stop a run as
///   described at the top of this header; false leaves the process's signal
///   handlers alone.
/// - `async_checkpoint_io` (bool; default false): save checkpoints on a
///   background thread (Lightning's AsyncCheckpointIO): the checkpoint is
///   serialized at once, written (or handed to the checkpoint IO plugin)
///   meanwhile; the next save and the end of the run wait for it and report
///   its error.
/// - `slurm_auto_requeue` (bool; default false): under SLURM (SLURM_JOB_ID
///   set, job name not "bash" / "interactive"): SIGUSR1 saves
///   default_root_dir/hpc_ckpt_<n>.ckpt at the next batch, epoch or
///   validation end, runs `scontrol requeue <job id>` and stops the fit
///   with FULMEN_CODE_INTERRUPTED; fit without ckpt_path resumes from the
///   highest hpc_ckpt_<n>.ckpt (Lightning's SLURMEnvironment auto_requeue).
/// - `process_group_backend` (text; default none): "gloo", "nccl", a custom
///   accelerator's collectives hook, or "none" = by device (gloo on CPU,
///   nccl on CUDA, the accelerator's hook when it has one).
/// - `sync_batchnorm` (bool; default false): strategies "ddp", "ddp_spawn"
///   and "fsdp": every BatchNorm normalises over the whole job's batch
///   while fitting, its statistics and their gradients summed over the
///   ranks (torch's SyncBatchNorm); the model's BatchNorms are plain again
///   after the fit; one-process strategies ignore it, as Lightning does.
/// - `fsdp_sharding_strategy` (text; default FULL_SHARD): strategy "fsdp":
///   FULL_SHARD (parameters freed after each unit's forward and gathered
///   again for its backward), SHARD_GRAD_OP (gathered parameters kept until
///   the backward ends), NO_SHARD (nothing sharded, gradients averaged),
///   HYBRID_SHARD (FULL_SHARD among the ranks of each of num_nodes nodes,
///   the nodes replicas whose gradient shards are averaged) or
///   _HYBRID_SHARD_ZERO2 (the same with SHARD_GRAD_OP within the node).
/// - `fsdp_auto_wrap_policy` (text; default none): strategy "fsdp":
///   comma-separated module class names ("TransformerEncoderLayer",
///   "Sequential", "HostModule", ...) whose every instance is a sharding
///   unit; the root module owns the rest.
/// - `fsdp_min_num_params` (text; default none): strategy "fsdp": a module
///   whose parameters not yet in a unit number at least this many becomes a
///   unit (torch's size_based_auto_wrap_policy); "none" = the class list
///   alone.
/// - `fsdp_activation_checkpointing_policy` (text; default none): strategy
///   "fsdp": comma-separated module class names whose every instance below
///   the root runs its forward as a checkpoint (Lightning's
///   activation_checkpointing_policy): its activations are not kept, and
///   backward runs the forward again (the same dropout masks and autocast)
///   to get them; a class that names no module is refused.
/// - `fsdp_param_dtype` (text; default none): strategy "fsdp": torch's
///   MixedPrecisionPolicy.param_dtype ("bf16", "fp16", "fp32" or "none"):
///   each unit's parameters are gathered in it and its forward and backward
///   compute in it (its floating inputs cast to it), while the shards the
///   optimizers step stay in the parameters' own dtype; refused under
///   NO_SHARD.
/// - `fsdp_reduce_dtype` (text; default none): strategy "fsdp": torch's
///   MixedPrecisionPolicy.reduce_dtype: the dtype gradients are
///   reduce-scattered in before they land in the shards ("none" =
///   fsdp_param_dtype's).
/// - `fsdp_forward_prefetch` (bool; default false): strategy "fsdp": torch
///   FSDP's forward_prefetch: each unit's forward starts gathering the unit
///   that ran after it in the last forward, so the gather overlaps the
///   computation (one more unit's parameters held at a time).
/// - `fsdp_backward_prefetch` (text; default BACKWARD_PRE): strategy
///   "fsdp": torch FSDP's backward_prefetch: "BACKWARD_PRE" = each unit's
///   backward starts gathering the unit whose backward comes next (as FSDP2
///   does), so the gather overlaps the computation; "none" = each unit is
///   gathered when its backward begins.
/// - `fsdp_sync_module_states` (bool; default true): strategy "fsdp": torch
///   FSDP's sync_module_states: before sharding, the ranks check that they
///   hold the same parameters and take rank 0's parameters and buffers;
///   false = no collective before the first gather and every rank must
///   start from the same values (as FSDP2's fully_shard, which a job shared
///   with PyTorch FSDP2 ranks needs).
/// - `fsdp_reduce_scatter_unused_params` (bool; default false): strategy
///   "fsdp": FSDP2's set_reduce_scatter_unused_params(True): a unit's
///   reduce-scatter carries exactly the gradients of its parameters that
///   have or require one (zeros for one a rank lacks, a frozen parameter
///   without one left out), each of which then gets one, zeros where no
///   rank had one, and the root and units fed the data reduce at the end of
///   each backward, as FSDP2 sends and orders them (a job shared with
///   PyTorch FSDP2 ranks needs it; every rank must agree on which
///   parameters require grad); false = one more element per parameter says
///   whether any rank had a gradient, a parameter no rank had one for keeps
///   none, and every unit reduces as soon as its gradients are there.
/// - `fsdp_cpu_offload` (bool; default false): strategy "fsdp": Lightning's
///   cpu_offload (torch's CPUOffloadPolicy): the parameter shards, their
///   gradients and the optimizer states live in the host's memory (the
///   shards pinned under CUDA) and the optimizers step there; each gather
///   copies a unit's shards to the device and each reduce-scatter's result
///   comes back, so the device holds only gathered units, activations and
///   buffers (refused with NO_SHARD).
/// - `fsdp_state_dict_type` (text; default full): strategy "fsdp": "full" =
///   checkpoints hold the whole state, gathered from every rank and written
///   by rank 0; "sharded" = each checkpoint is a
///   torch.distributed.checkpoint directory (every rank writes its shards,
///   rank 0 .metadata and meta.pt), as Lightning's FSDP strategies write;
///   it resumes on any number of ranks.
/// - `tensor_parallel_plan` (text; default none): strategy
///   "model_parallel": the layers to split across the ranks, "path=style,
///   ..." (what parallelize_module's plan says; Linear and Embedding
///   layers), each style one of colwise (ColwiseParallel()),
///   colwise_replicated_output
///   (ColwiseParallel(output_layouts=Replicate())), rowwise
///   (RowwiseParallel()) and rowwise_replicated_input
///   (RowwiseParallel(input_layouts=Replicate())).
/// - `data_parallel_size` (text; default auto): strategy "model_parallel":
///   Lightning's data_parallel_size, "auto" (num_nodes) or a count; fulmen
///   runs 1 (every rank in the tensor-parallel group) and refuses more.
/// - `tensor_parallel_size` (text; default auto): strategy
///   "model_parallel": Lightning's tensor_parallel_size, "auto" (the ranks
///   per data-parallel replica) or a count, which must be the world size.
/// - `save_distributed_checkpoint` (bool; default true): strategy
///   "model_parallel": Lightning's save_distributed_checkpoint; true = each
///   checkpoint is a torch.distributed.checkpoint directory (every rank
///   writes its parts of the split parameters and their optimizer states,
///   rank 0 .metadata and meta.pt; the model's states under "state_dict"),
///   as Lightning's ModelParallelStrategy writes; it resumes on any number
///   of ranks, each reading only its parts; false = one file, gathered
///   whole and written by rank 0 (what a checkpoint_io plugin or a
///   weight-averaging callback's state needs: sharded directories refuse
///   them).
/// - `ddp_timeout` (seconds or "DD:HH:MM:SS"; default 1800): limit on the
///   rendezvous and on every collective of a distributed job.
// Generated: end
///
/// An unknown key or a bad value is FULMEN_CODE_INVALID_ARGUMENT naming
/// it; the options are then unchanged.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown key, bad value, or key or
/// value not UTF-8), FULMEN_CODE_UNAVAILABLE (accelerator "gpu" when neither
/// CUDA nor MPS is available).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        let (k, v) = (str_arg(key, "key")?, str_arg(value, "value")?);
        o.opts.set(k, v)
    })
}

/// Sets an integer option (see `fulmen_trainer_options_set`).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown key, key not UTF-8, or a value
/// the key does not take).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_int(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: i64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        o.opts.set(str_arg(key, "key")?, &value.to_string())
    })
}

/// Sets a numeric option such as a batch-limit fraction.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown key, key not UTF-8, or a value
/// the key does not take).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_float(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: f64,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        o.opts.set(str_arg(key, "key")?, &format!("{value:?}"))
    })
}

/// Sets a boolean option.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (unknown key, key not UTF-8, or a value
/// the key does not take).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_bool(
    options: *mut fulmen_trainer_options,
    key: *const c_char,
    value: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        o.opts.set(str_arg(key, "key")?, if value { "true" } else { "false" })
    })
}

/// Frees trainer options. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_free(options: *mut fulmen_trainer_options) {
    handle::free(options);
}

/// Creates a trainer from `options` (copied; NULL for the defaults).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_new(
    options: *const fulmen_trainer_options,
    out: *mut *mut fulmen_trainer,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let opts = if options.is_null() {
            TrainerOptions::default()
        } else {
            handle::borrow(options, "options")?.opts.clone()
        };
        let inner = Trainer::new(opts)?;
        out.write(handle::into_raw(fulmen_trainer { inner }));
        Ok(())
    })
}

pub(crate) unsafe fn loader<'a>(p: *const fulmen_loader, arg: &str) -> Result<Shared<'a, dyn BatchSource + Send>> {
    Ok(handle::borrow(p, arg)?.map(|h| h.inner.as_ref()))
}

/// Borrows fit's `train` loader; NULL takes the module's
/// `train_dataloader` (`None`), and is refused when it has none.
pub(crate) unsafe fn train_arg<'a>(
    train: *const fulmen_loader,
    module: &dyn crate::trainer::LightningModule,
) -> Result<Option<Shared<'a, dyn BatchSource + Send>>> {
    if !train.is_null() {
        return loader(train, "train").map(Some);
    }
    if !module.has_train_dataloader() {
        return Err(Error::new(
            ErrorCode::NullArgument,
            "argument `train` is NULL and the module has no train_dataloader",
        ));
    }
    Ok(None)
}

/// Whether a run given `loader` takes the module's dataloader hook
/// (`hook`): `loader` NULL and the module has it. NULL without the hook is
/// the NULL-argument error, naming the hook.
fn from_module(loader: *const fulmen_loader, has_hook: bool, hook: &str) -> Result<bool> {
    match (loader.is_null(), has_hook) {
        (false, _) => Ok(false),
        (true, true) => Ok(true),
        (true, false) => {
            Err(Error::new(ErrorCode::NullArgument, format!("argument `loader` is NULL and the module has no {hook}")))
        }
    }
}

pub(crate) unsafe fn ckpt<'a>(p: *const c_char) -> Result<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        str_arg(p, "ckpt_path").map(Some)
    }
}

/// Trains `module` on `train`, validating on `val` (may be NULL) as
/// `val_check_interval` says when the module has a validation_step.
/// `train` NULL takes the module's `train_dataloader` and `val` NULL its
/// `val_dataloader` when it has them (Lightning's `trainer.fit(model)`),
/// called again every `reload_dataloaders_every_n_epochs` epochs; loaders
/// passed here are never reloaded.
/// `ckpt_path` (may be NULL) resumes from a checkpoint: a file path (a
/// fulmen checkpoint or a Lightning `.ckpt`, told apart by content; see the
/// `checkpoint_format` and `checkpoint_prefix` options), a sharded
/// checkpoint directory (`torch.distributed.checkpoint`'s, holding
/// `.metadata` and Lightning's `meta.pt`; see `fsdp_state_dict_type` and
/// `save_distributed_checkpoint`, it resumes under any strategy and world
/// size), "last" (the newest
/// last/any checkpoint of this root dir) or "best" (the best checkpoint of
/// this trainer's previous fit). Without `ckpt_path`, another fit on the
/// same trainer goes on from the loop's progress the last fit left (its
/// epoch and global step, whatever the model and the runs since), as
/// Lightning's trainer keeps its `fit_loop`: on the module's current
/// weights, with optimizers configure_optimizers makes anew; a fit whose
/// progress is at `max_epochs` or `max_steps` trains nothing (no
/// on_train_start / on_train_end; a warning says why) until
/// `fulmen_trainer_set_max_epochs` / `fulmen_trainer_set_max_steps`
/// raise the limit; a fit that failed inside an epoch goes on at that
/// epoch's first batch. A `ckpt_path` replaces that progress with the
/// checkpoint's. The `logger` option's loggers and the default
/// ModelCheckpoint are the trainer's: every fit logs in one `version_N`
/// folder and keeps its top-k checkpoints together. Callbacks run on the
/// calling thread. A failing callback stops training with an error naming
/// the callback, epoch and step; the parameters keep the last completed
/// update.
///
/// Errors: FULMEN_CODE_CALLBACK or the code a host callback returned (a step,
/// hook, callback, logger or data source failed, or ran past callback_timeout);
/// FULMEN_CODE_INVALID_ARGUMENT (ckpt_path not UTF-8, devices or strategy that
/// do not fit the machine, val_check_interval above the training batches);
/// FULMEN_CODE_UNAVAILABLE (accelerator or devices not available here);
/// FULMEN_CODE_UNSUPPORTED (a precision or backend the device lacks, a
/// scheduler whose state Lightning's format cannot carry yet);
/// FULMEN_CODE_IO (ckpt_path names no file, nor a regular file or a sharded checkpoint directory, a log or
/// checkpoint cannot be written); FULMEN_CODE_FORMAT (a corrupt checkpoint, or one that does not
/// match the run); FULMEN_CODE_SHAPE_MISMATCH, FULMEN_CODE_DTYPE_MISMATCH (a
/// loss that is not a floating scalar, checkpoint weights that do not fit);
/// FULMEN_CODE_NON_FINITE (a NaN or infinite loss); FULMEN_CODE_DISTRIBUTED
/// (the rendezvous, a collective or another rank failed);
/// FULMEN_CODE_INTERRUPTED (SIGINT / SIGTERM); FULMEN_CODE_TORCH (libtorch
/// failed); FULMEN_CODE_INVALID_STATE also when configure_optimizers gave no
/// optimizer, the loss does not require grad, or ckpt_path "best" /
/// "last" finds no checkpoint; FULMEN_CODE_NULL_ARGUMENT also when `train`
/// is NULL and the module has no `train_dataloader`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_fit(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    train: *const fulmen_loader,
    val: *const fulmen_loader,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let tr = train_arg(train, &m.inner)?;
        let v = if val.is_null() { None } else { Some(loader(val, "val")?) };
        let vals: Option<Vec<&dyn BatchSource>> = v.as_deref().map(|v| vec![v as &dyn BatchSource]);
        t.inner.fit_data(&mut m.inner, tr.as_deref().map(|t| t as &dyn BatchSource), vals.as_deref(), ckpt(ckpt_path)?)
    })
}

/// Runs the validation loop over `loader` once; `ckpt_path` (may be NULL)
/// first loads the weights of a checkpoint ("best", "last" or a path).
/// `loader` NULL takes the loaders of the module's `val_dataloader`
/// (Lightning's `trainer.validate(model)`), called after the setup hooks.
/// What Lightning returns, the epoch metrics per loader, is read after it
/// with `fulmen_trainer_eval_results`. A limit_val_batches of 0 skips the
/// loop and its hooks.
///
/// Errors: FULMEN_CODE_CALLBACK or the code a host callback returned (a step,
/// hook, callback, logger or data source failed, or ran past callback_timeout);
/// FULMEN_CODE_INVALID_ARGUMENT (ckpt_path not UTF-8, devices or strategy that
/// do not fit the machine); FULMEN_CODE_UNAVAILABLE (accelerator or devices not
/// available here); FULMEN_CODE_UNSUPPORTED (a precision or backend the device
/// lacks); FULMEN_CODE_IO (ckpt_path names no file, or it cannot be read);
/// FULMEN_CODE_FORMAT (a corrupt checkpoint, or one whose names do not match
/// the model); FULMEN_CODE_SHAPE_MISMATCH, FULMEN_CODE_DTYPE_MISMATCH
/// (checkpoint weights that do not fit); FULMEN_CODE_DISTRIBUTED (a collective
/// or another rank failed); FULMEN_CODE_INTERRUPTED (SIGINT / SIGTERM);
/// FULMEN_CODE_TORCH (libtorch failed); FULMEN_CODE_INVALID_STATE also when the
/// module has no validation_step, or ckpt_path "best" / "last" finds no
/// checkpoint; FULMEN_CODE_NULL_ARGUMENT also when `loader` is NULL and
/// the module has no val_dataloader.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_validate(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        if from_module(loader, m.inner.has_val_dataloader(), "val_dataloader")? {
            return t.inner.validate_from_module(&mut m.inner, ckpt(ckpt_path)?).map(|_| ());
        }
        t.inner.validate(&mut m.inner, &*self::loader(loader, "loader")?, ckpt(ckpt_path)?).map(|_| ())
    })
}

/// Runs the test loop over `loader` once; `ckpt_path` as for validate.
/// `loader` NULL takes the loaders of the module's `test_dataloader`.
/// Its results are read with `fulmen_trainer_eval_results`.
///
/// Errors: FULMEN_CODE_CALLBACK or the code a host callback returned (a step,
/// hook, callback, logger or data source failed, or ran past callback_timeout);
/// FULMEN_CODE_INVALID_ARGUMENT (ckpt_path not UTF-8, devices or strategy that
/// do not fit the machine); FULMEN_CODE_UNAVAILABLE (accelerator or devices not
/// available here); FULMEN_CODE_UNSUPPORTED (a precision or backend the device
/// lacks); FULMEN_CODE_IO (ckpt_path names no file, or it cannot be read);
/// FULMEN_CODE_FORMAT (a corrupt checkpoint, or one whose names do not match
/// the model); FULMEN_CODE_SHAPE_MISMATCH, FULMEN_CODE_DTYPE_MISMATCH
/// (checkpoint weights that do not fit); FULMEN_CODE_DISTRIBUTED (a collective
/// or another rank failed); FULMEN_CODE_INTERRUPTED (SIGINT / SIGTERM);
/// FULMEN_CODE_TORCH (libtorch failed); FULMEN_CODE_INVALID_STATE also when the
/// module has no test_step, or ckpt_path "best" / "last" finds no checkpoint;
/// FULMEN_CODE_NULL_ARGUMENT also when `loader` is NULL and the module has
/// no test_dataloader.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_test(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    ckpt_path: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        if from_module(loader, m.inner.has_test_dataloader(), "test_dataloader")? {
            return t.inner.test_from_module(&mut m.inner, ckpt(ckpt_path)?).map(|_| ());
        }
        t.inner.test(&mut m.inner, &*self::loader(loader, "loader")?, ckpt(ckpt_path)?).map(|_| ())
    })
}

/// Runs predict_step over `loader` and writes the outputs concatenated
/// along dimension 0 to `*out` (NULL when no step produced an output);
/// `ckpt_path` as for validate. `loader` NULL takes the loader of the
/// module's `predict_dataloader` (which must give one).
///
/// Errors: FULMEN_CODE_CALLBACK or the code a host callback returned (a step,
/// hook, callback, logger or data source failed, or ran past callback_timeout);
/// FULMEN_CODE_INVALID_ARGUMENT (ckpt_path not UTF-8, devices or strategy that
/// do not fit the machine); FULMEN_CODE_UNAVAILABLE (accelerator or devices not
/// available here); FULMEN_CODE_UNSUPPORTED (a precision or backend the device
/// lacks, or a predict_step that named its predictions: a dict is not
/// concatenated, `fulmen_trainer_predict_batches` returns it);
/// FULMEN_CODE_IO (ckpt_path names no file, or it cannot be read);
/// FULMEN_CODE_FORMAT (a corrupt checkpoint, or one whose names do not match
/// the model); FULMEN_CODE_SHAPE_MISMATCH (checkpoint weights that do not fit,
/// outputs that cannot be concatenated), FULMEN_CODE_DTYPE_MISMATCH (checkpoint
/// weights of another dtype); FULMEN_CODE_DISTRIBUTED (a collective or another
/// rank failed); FULMEN_CODE_INTERRUPTED (SIGINT / SIGTERM); FULMEN_CODE_TORCH
/// (libtorch failed); FULMEN_CODE_INVALID_STATE also when the module has no
/// predict_step, when a step named its predictions and wrote `*out` too, or
/// when ckpt_path "best" / "last" finds no checkpoint;
/// FULMEN_CODE_NULL_ARGUMENT also when `loader` is NULL and the module has
/// no predict_dataloader; FULMEN_CODE_INVALID_ARGUMENT when its
/// predict_dataloader gives more than one loader.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_predict(
    trainer: *mut fulmen_trainer,
    module: *mut fulmen_lightning_module,
    loader: *const fulmen_loader,
    ckpt_path: *const c_char,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let mut t = handle::borrow_mut(trainer, "trainer")?;
        let mut m = handle::borrow_mut(module, "module")?;
        let result = if from_module(loader, m.inner.has_predict_dataloader(), "predict_dataloader")? {
            let mut outputs = t.inner.predict_from_module(&mut m.inner, ckpt(ckpt_path)?)?;
            if outputs.len() != 1 {
                return Err(Error::invalid(format!(
                    "predict_dataloader gave {} loaders; fulmen_trainer_predict writes one output \
                     (fulmen_trainer_predict_datamodule writes one per loader)",
                    outputs.len()
                )));
            }
            outputs.pop().flatten()
        } else {
            t.inner.predict(&mut m.inner, &*self::loader(loader, "loader")?, ckpt(ckpt_path)?)?
        };
        match result {
            Some(p) => emit(out, p),
            None => {
                out.write(std::ptr::null_mut());
                Ok(())
            }
        }
    })
}

/// Writes the latest value of a logged metric (Lightning's
/// `trainer.callback_metrics[name]`); FULMEN_CODE_INVALID_ARGUMENT names
/// the metrics that exist when `name` is not one of them. A device value
/// a run that failed mid-epoch left unread is read here.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (name is not UTF-8 or not a logged
/// metric), the device's error when reading such a value fails.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_callback_metric(
    trainer: *const fulmen_trainer,
    name: *const c_char,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let t = handle::borrow(trainer, "trainer")?;
        let n = str_arg(name, "name")?;
        let m = t.inner.callback_metrics();
        let v = m.read(n)?.ok_or_else(|| Error::invalid(format!("no metric {n:?}; logged: {:?}", m.names())))?;
        write_out(out, "out", v)
    })
}

/// Writes Lightning's `trainer.global_step`: the optimizer steps of the
/// trainer's fits so far (a fit goes on from the last one's count; a
/// `ckpt_path` sets it to the checkpoint's).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_global_step(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.global_step()) })
}

/// Writes Lightning's `trainer.current_epoch`: the epochs the trainer's
/// fits completed so far (the epoch the next fit trains first).
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_current_epoch(
    trainer: *const fulmen_trainer,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| { write_out(out, "out", handle::borrow(trainer, "trainer")?.inner.current_epoch()) })
}

/// Copies the trainer's log folder (`.../lightning_logs/version_N`, one
/// for every run of the trainer, as Lightning's `trainer.log_dir`) into
/// `buf` as for `fulmen_model_state_dict_name`;
/// FULMEN_CODE_INVALID_STATE when no logger ran.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no logger ran, see above),
/// FULMEN_CODE_OUT_OF_RANGE (buf too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_log_dir(
    trainer: *const fulmen_trainer,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let t = handle::borrow(trainer, "trainer")?;
        let d = t.inner.log_dir().ok_or_else(|| Error::new(ErrorCode::InvalidState, "no logger has run"))?;
        copy_str(&d.to_string_lossy(), buf, capacity, len_out)
    })
}

/// Copies the simple profiler's report of the last run (trainer option
/// `profiler` "simple": a table of the wall time of each hook and action)
/// into `buf` as for `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no profiled run yet),
/// FULMEN_CODE_OUT_OF_RANGE (buf too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_profiler_report(
    trainer: *const fulmen_trainer,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let t = handle::borrow(trainer, "trainer")?;
        let r = t.inner.profiler_report().ok_or_else(|| {
            Error::new(ErrorCode::InvalidState, "no profiled run: set the trainer option profiler to \"simple\"")
        })?;
        copy_str(r, buf, capacity, len_out)
    })
}

/// Which path of the trainer's ModelCheckpoint to read (`fulmen_checkpoint_path`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointPath {
    /// The best checkpoint (by the monitored metric; the latest without one).
    Best = 0,
    /// The `last.ckpt` copy (with save_last).
    Last = 1,
}

/// Copies the best or last checkpoint path of the trainer's first
/// ModelCheckpoint (the user's, else the default one) into `buf` as for
/// `fulmen_model_state_dict_name`; FULMEN_CODE_INVALID_STATE when there is
/// none yet. `which` is a `fulmen_checkpoint_path`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (which is not 0 or 1),
/// FULMEN_CODE_INVALID_STATE (no ModelCheckpoint, or nothing saved yet),
/// FULMEN_CODE_OUT_OF_RANGE (buf too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_checkpoint_path(
    trainer: *const fulmen_trainer,
    which: i32,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let t = handle::borrow(trainer, "trainer")?;
        let cb = t
            .inner
            .checkpoint_callback()
            .ok_or_else(|| Error::new(ErrorCode::InvalidState, "the trainer has no ModelCheckpoint"))?;
        let path = match which {
            0 => &cb.best_model_path,
            1 => &cb.last_model_path,
            w => return Err(Error::invalid(format!("{w} is not a fulmen_checkpoint_path (0 best, 1 last)"))),
        };
        if path.is_empty() {
            return Err(Error::new(ErrorCode::InvalidState, "no checkpoint has been saved yet"));
        }
        copy_str(path, buf, capacity, len_out)
    })
}

/// Writes the best monitored score of the trainer's ModelCheckpoint;
/// FULMEN_CODE_INVALID_STATE when it monitors nothing or saved nothing.
///
/// Errors: FULMEN_CODE_INVALID_STATE (no monitored checkpoint saved, see
/// above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_best_model_score(
    trainer: *const fulmen_trainer,
    out: *mut f64,
) -> *mut fulmen_error {
    guard!(|| {
        let t = handle::borrow(trainer, "trainer")?;
        let score = t.inner.checkpoint_callback().and_then(|c| c.best_model_score);
        write_out(
            out,
            "out",
            score.ok_or_else(|| Error::new(ErrorCode::InvalidState, "no monitored checkpoint has been saved"))?,
        )
    })
}

/// Frees a trainer (and the callbacks and loggers added to it). NULL or an
/// already freed handle is a no-op. Freeing a trainer whose fit (or any
/// other call) is running, from one of its callbacks or another thread,
/// is deferred until that call returns.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_free(trainer: *mut fulmen_trainer) {
    handle::free(trainer);
}

/// Sets the `accelerator` option from a handle (as Lightning accepts an
/// Accelerator object); same as setting its registry name.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_accelerator(
    options: *mut fulmen_trainer_options,
    accelerator: *const crate::ffi::devices::accelerator::fulmen_accelerator,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        let a = handle::borrow(accelerator, "accelerator")?;
        o.opts.accelerator = a.inner.name().to_string();
        Ok(())
    })
}

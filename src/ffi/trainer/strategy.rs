//! `fulmen_strategy`: a strategy from the registry ("auto",
//! "single_device", "ddp", ...) with its settings, as Lightning's
//! `Trainer(strategy=DDPStrategy(...))`.
use crate::error::{Error, ErrorCode};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::nn::model::copy_str;
use crate::ffi::trainer::runs::fulmen_trainer_options;
use crate::strategies::{self, StrategySpec};
use std::ffi::c_char;

/// A strategy with its settings. Free with `fulmen_strategy_free`.
pub struct fulmen_strategy {
    pub(crate) spec: StrategySpec,
}

impl Handle for fulmen_strategy {
    const C_NAME: &'static str = "fulmen_strategy";
}

/// Creates a strategy from a registered name: "auto" (ddp when several
/// devices or processes are asked for, else single_device),
/// "single_device", "ddp" (one process per device; started by torchrun,
/// SLURM, or fulmen re-executing the host program), "ddp_spawn",
/// "ddp_find_unused_parameters_true", "ddp_find_unused_parameters_false",
/// "dp" (one process; the model replicated on every device, each batch
/// split along dimension 0 and the step run once per chunk), "xla" (one
/// process per XLA device; needs the xla accelerator). An unknown name is an error listing the registered ones.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown or non-UTF-8 name).
#[no_mangle]
pub unsafe extern "C" fn fulmen_strategy_new(name: *const c_char, out: *mut *mut fulmen_strategy) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let spec = strategies::lookup(str_arg(name, "name")?)?;
        out.write(handle::into_raw(fulmen_strategy { spec }));
        Ok(())
    })
}

/// Sets a setting from text, as torch's DistributedDataParallel and
/// Lightning's DDPStrategy arguments: `find_unused_parameters` and
/// `broadcast_buffers` (booleans: true/false, 1/0, yes/no, on/off; default
/// false and true), `process_group_backend` ("gloo", "nccl", "none" = gloo
/// on CPU, nccl on CUDA, the accelerator's collectives hook when it has
/// one; or the name of that hook), `timeout` (seconds or "DD:HH:MM:SS": rendezvous and every
/// collective; default 1800), `bucket_cap_mb` (MiB; default "none":
/// torch's 25 with a first bucket of 1), `num_nodes` (default 1); for
/// "fsdp" the trainer options of the same names without their `fsdp_`
/// prefix (see `fulmen_trainer_options_set`): `sharding_strategy`
/// (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD,
/// _HYBRID_SHARD_ZERO2), `auto_wrap_policy` (comma-separated module class
/// names), `min_num_params` (a count or "none"),
/// `activation_checkpointing_policy` (comma-separated module class names
/// whose forwards are checkpointed), `state_dict_type` ("full" or
/// "sharded"), `param_dtype` and `reduce_dtype` ("bf16", "fp16", "fp32"
/// or "none"), `forward_prefetch` (boolean, default false),
/// `backward_prefetch` ("BACKWARD_PRE", the default, or "none"),
/// `sync_module_states` (boolean, default true),
/// `reduce_scatter_unused_params` (boolean, default false; with
/// `sync_module_states` false, what a job shared with PyTorch FSDP2 ranks
/// needs) and `cpu_offload` (boolean, default false: shards, gradients and
/// optimizer states in the host's memory); for "model_parallel"
/// `tensor_parallel_plan` ("path=style, ...", styles colwise,
/// colwise_replicated_output, rowwise, rowwise_replicated_input),
/// `data_parallel_size` and `tensor_parallel_size` ("auto" or a count;
/// fulmen runs 1 and the world size), `save_distributed_checkpoint`
/// (boolean, default true: sharded checkpoint directories). A bad key or value is
/// FULMEN_CODE_INVALID_ARGUMENT and changes nothing.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an unknown key, a bad value, a
/// string not UTF-8), FULMEN_CODE_UNSUPPORTED (a value fulmen does not
/// have: `backward_prefetch` BACKWARD_POST).
#[no_mangle]
pub unsafe extern "C" fn fulmen_strategy_set(
    strategy: *mut fulmen_strategy,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut s = handle::borrow_mut(strategy, "strategy")?;
        let (k, v) = (str_arg(key, "key")?, str_arg(value, "value")?);
        let mut spec = s.spec.clone();
        spec.set(k, v)?;
        s.spec = spec;
        Ok(())
    })
}

/// Copies the strategy's registry name into `buf` as for
/// `fulmen_model_state_dict_name`.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`buf` too small; `*len_out` is still
/// written).
#[no_mangle]
pub unsafe extern "C" fn fulmen_strategy_name(
    strategy: *const fulmen_strategy,
    buf: *mut c_char,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| copy_str(&handle::borrow(strategy, "strategy")?.spec.name, buf, capacity, len_out))
}

/// Uses `strategy` (copied) for runs with these options.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_trainer_options_set_strategy(
    options: *mut fulmen_trainer_options,
    strategy: *const fulmen_strategy,
) -> *mut fulmen_error {
    guard!(|| {
        let mut o = handle::borrow_mut(options, "options")?;
        o.opts.strategy = handle::borrow(strategy, "strategy")?.spec.clone();
        Ok(())
    })
}

/// Frees a strategy. NULL or an already freed handle is a no-op.
#[no_mangle]
pub unsafe extern "C" fn fulmen_strategy_free(strategy: *mut fulmen_strategy) {
    handle::free(strategy);
}

/// Writes the number of registered strategies.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_strategy_registry_len(out: *mut usize) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", strategies::list().len()))
}

/// Copies the name and description of registry entry `index` into the two
/// buffers (as for `fulmen_model_state_dict_name`).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`index` not below the registry's
/// length, or a buffer too small).
#[no_mangle]
pub unsafe extern "C" fn fulmen_strategy_registry_entry(
    index: usize,
    name: *mut c_char,
    name_capacity: usize,
    name_len: *mut usize,
    description: *mut c_char,
    description_capacity: usize,
    description_len: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        let list = strategies::list();
        let e = list
            .get(index)
            .ok_or_else(|| Error::new(ErrorCode::OutOfRange, format!("registry entry {index} of {}", list.len())))?;
        copy_str(e.name, name, name_capacity, name_len)?;
        copy_str(e.description, description, description_capacity, description_len)
    })
}

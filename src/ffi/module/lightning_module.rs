//! `fulmen_lightning_module`: the host's step functions as a vtable, and
//! the optimizer configuration its `configure_optimizers` fills.
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{host_result, read_vtable, HostCallTimer, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, opt_str, str_arg};
use crate::ffi::base::handle::{self, check_out, Handle};
use crate::ffi::callback_list::fulmen_callback_list;
use crate::ffi::callbacks::hooks::{call_host_hook, fulmen_hook_context, fulmen_hook_fn};
use crate::ffi::data::batch::{fulmen_batch, with_temp_handle};
use crate::ffi::data::datasets::fulmen_loader;
use crate::ffi::module::context::fulmen_step_context;
use crate::ffi::module::module_data::{fulmen_train_dataloader_fn, fulmen_val_dataloader_fn};
use crate::ffi::module::optimization::{
    fulmen_optimization_context, fulmen_optimizer_closure, HostOptimization, OptimizationSlots,
};
use crate::ffi::nn::model::{fulmen_model, model_arg};
use crate::ffi::optim::optimizers::fulmen_optimizer;
use crate::ffi::schedulers::scheduler::fulmen_scheduler;
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::ffi::tensor::TensorScope;
use crate::trainer::{
    BatchSource, Callback, Hook, HookContext, Interval, LightningModule, OptimizationHooks, OptimizerConfig,
    OptimizerSetup, SchedulerConfig, SharedModel, StepContext,
};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::rc::Rc;
use tch::Tensor;

/// A step that returns a tensor (training: the loss; predict: the output).
pub type fulmen_step_fn = unsafe extern "C" fn(
    userdata: *mut c_void,
    ctx: *mut fulmen_step_context,
    batch: *const fulmen_batch,
    out: *mut *mut fulmen_tensor,
) -> *mut fulmen_error;

/// A step that only logs (validation, test).
pub type fulmen_eval_step_fn = unsafe extern "C" fn(
    userdata: *mut c_void,
    ctx: *mut fulmen_step_context,
    batch: *const fulmen_batch,
) -> *mut fulmen_error;

/// The host's LightningModule. Set `struct_size` to
/// `sizeof(fulmen_module_vtable)`; NULL slots are "not implemented".
/// Every callback runs on the thread that called fit / validate / test /
/// predict. Tensors a callback creates are released when it returns,
/// except those kept with `fulmen_tensor_keep`; the `ctx` and `batch`
/// arguments are valid only during the call.
#[repr(C)]
pub struct fulmen_module_vtable {
    /// `sizeof(fulmen_module_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when the LightningModule is freed; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Computes the loss of a training batch into `*out` (a one-element
    /// floating tensor computed from the parameters). Required for fit.
    /// fulmen reads `*out` and does not take it: a tensor made in the step
    /// is released with the step's other tensors, a kept one stays the
    /// host's to free. Leaving `*out` NULL is Lightning's `return None`:
    /// the batch gets no backward (a warning says so once per fit), yet at
    /// the end of an accumulation window the optimizer step still runs on
    /// what gradients there are (none of this batch) and counts in
    /// `global_step`; refused under DDP (as in Lightning) and with LBFGS.
    /// With automatic optimization off
    /// (`fulmen_lightning_module_set_automatic_optimization`) the step runs
    /// backward and the optimizer steps itself through `ctx` and may leave
    /// `*out` NULL (a loss written there only shows in the progress).
    pub training_step: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_step_context,
            batch: *const fulmen_batch,
            out: *mut *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    >,
    /// Evaluates a validation batch (log metrics through `ctx`).
    pub validation_step: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_step_context,
            batch: *const fulmen_batch,
        ) -> *mut fulmen_error,
    >,
    /// Evaluates a test batch.
    pub test_step: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_step_context,
            batch: *const fulmen_batch,
        ) -> *mut fulmen_error,
    >,
    /// Writes the prediction for a batch to `*out` (or leaves it NULL).
    pub predict_step: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_step_context,
            batch: *const fulmen_batch,
            out: *mut *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    >,
    /// Creates the optimizers (and schedulers) with
    /// `fulmen_optimizer_config_add`. Required for fit. Adding none is
    /// Lightning's `return None`: the fit runs with no optimizer (a warning
    /// says so), every batch's training_step, backward and hooks still run
    /// and count in `global_step`, and the weights do not change.
    pub configure_optimizers:
        Option<unsafe extern "C" fn(userdata: *mut c_void, config: *mut fulmen_optimizer_config) -> *mut fulmen_error>,
    /// The module's own hooks (any `fulmen_hook`), called after every
    /// callback's. May be NULL. Added in 0.1; older, smaller vtables
    /// without this field are accepted. In on_train_batch_start,
    /// `fulmen_hook_context_skip_rest_of_epoch` is Lightning's `return -1`.
    pub on_hook: Option<
        unsafe extern "C" fn(userdata: *mut c_void, hook: i32, ctx: *mut fulmen_hook_context) -> *mut fulmen_error,
    >,
    /// Lightning's `train_dataloader`: writes to `*out` a new loader of
    /// the training data for `epoch`. Called by a fit given no train loader
    /// (NULL), when it starts (for epoch 0; a resumed fit: for the
    /// checkpoint's epoch, Lightning's `current_epoch` then), and again at
    /// the start of every `reload_dataloaders_every_n_epochs`-th epoch
    /// after the one it was called for. fulmen takes
    /// the loader written, even when the call fails, and frees it when it
    /// is replaced or the fit ends: the host must not free it. May be NULL.
    /// Added in 0.2; older, smaller vtables without it are accepted.
    pub train_dataloader: Option<
        unsafe extern "C" fn(userdata: *mut c_void, epoch: i64, out: *mut *mut fulmen_loader) -> *mut fulmen_error,
    >,
    /// Lightning's `val_dataloader`: writes up to `capacity`
    /// (FULMEN_LOADERS_MAX) new loaders of validation data for `epoch` to
    /// `out[0..*n]` and their count to `*n` (0: no validation). Called by a
    /// fit given no validation loader (NULL, or `n_val` 0), before the
    /// sanity check (for the epoch `train_dataloader` was called for) or
    /// the first epoch that validates, and again at the start of an epoch
    /// that validates `reload_dataloaders_every_n_epochs` or more epochs
    /// after the one it was called for (a sanity check's call in an epoch
    /// that does not validate counts as long ago, as in Lightning). fulmen takes the loaders written as for `train_dataloader`.
    /// May be NULL. Added in 0.2.
    pub val_dataloader: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            epoch: i64,
            out: *mut *mut fulmen_loader,
            capacity: usize,
            n: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Evaluates a validation batch as `validation_step` and writes what it
    /// returns (Lightning's return value, the `outputs` of
    /// on_validation_batch_end, readable there with
    /// `fulmen_hook_context_output`) to `*out`, or leaves it NULL; read as
    /// `training_step`'s `*out`. Set it or `validation_step`, not both
    /// (FULMEN_CODE_INVALID_ARGUMENT from `fulmen_lightning_module_new`).
    /// May be NULL. Added in 0.3; older, smaller vtables are accepted.
    pub validation_step_output: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_step_context,
            batch: *const fulmen_batch,
            out: *mut *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    >,
    /// `test_step` with an output, as `validation_step_output` (the
    /// `outputs` of on_test_batch_end). May be NULL. Added in 0.3.
    pub test_step_output: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_step_context,
            batch: *const fulmen_batch,
            out: *mut *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `configure_model`: builds or changes the model in every
    /// run (fit, validate, test, predict), after the setup hooks and
    /// before configure_optimizers (and before a ckpt_path's weights
    /// load), given the run's device (`fulmen_device_type` and index) to
    /// create its tensors on. The strategy then places the model again
    /// (moving what is elsewhere to the device, and for fit wrapping it
    /// under DDP). May be NULL. Added in 0.3.
    pub configure_model:
        Option<unsafe extern "C" fn(userdata: *mut c_void, device_type: i32, device_index: i64) -> *mut fulmen_error>,
    /// Lightning's `configure_callbacks`: adds callbacks with
    /// `fulmen_callback_list_add`, called when every run starts (before
    /// the setup hooks). They join the trainer's callbacks for this run and
    /// the later ones; a trainer callback with the name of one added is
    /// replaced (Lightning replaces callbacks of the same type), and
    /// ModelCheckpoints still run last. May be NULL. Added in 0.3.
    pub configure_callbacks:
        Option<unsafe extern "C" fn(userdata: *mut c_void, callbacks: *mut fulmen_callback_list) -> *mut fulmen_error>,
    /// Lightning's `test_dataloader`: writes up to `capacity`
    /// (FULMEN_LOADERS_MAX) new loaders of test data to `out[0..*n]` and
    /// their count to `*n` (at least 1), as `val_dataloader`; `epoch` is
    /// the trainer's current epoch. Called by a test given no loader
    /// (`fulmen_trainer_test` with `loader` NULL), after the setup hooks.
    /// fulmen takes the loaders written as for `train_dataloader`. May be
    /// NULL. Added in 0.3; older, smaller vtables without it are accepted.
    pub test_dataloader: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            epoch: i64,
            out: *mut *mut fulmen_loader,
            capacity: usize,
            n: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `predict_dataloader`: as `test_dataloader`, for a
    /// predict given no loader. May be NULL. Added in 0.3.
    pub predict_dataloader: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            epoch: i64,
            out: *mut *mut fulmen_loader,
            capacity: usize,
            n: *mut usize,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `optimizer_step(epoch, batch_idx, optimizer,
    /// optimizer_closure)` under automatic optimization, called on every
    /// batch that ends an accumulation window (`batch_idx` in the epoch,
    /// `optimizer_idx` 0: the hooks run with one optimizer). It must run
    /// `closure` (training_step, `optimizer_zero_grad`, `backward`): alone
    /// with `fulmen_optimizer_closure_run` (no update: Lightning's
    /// stepping every other batch), or by stepping with
    /// `fulmen_optimization_context_step(ctx, closure, ...)`, which wraps
    /// the update in the precision plugin (unscale,
    /// `on_before_optimizer_step`, `configure_gradient_clipping`, step,
    /// loss-scale update) as Lightning's `optimizer.step(closure=...)`;
    /// `fulmen_optimization_context_set_learning_rate` changes the lr (a
    /// warm-up). Returning without running the closure fails the fit
    /// (FULMEN_CODE_CALLBACK). The batch counts in `global_step` either
    /// way. May be NULL (step). Added in 0.3, as the four slots after it.
    ///
    /// With any of these five slots set, configure_optimizers must add one
    /// optimizer (FULMEN_CODE_INVALID_ARGUMENT otherwise, as Lightning's
    /// automatic optimization has one; none: only `backward` is called),
    /// not LBFGS (FULMEN_CODE_UNSUPPORTED). With automatic optimization
    /// off none of them is called.
    pub optimizer_step: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_optimization_context,
            epoch: i64,
            batch_idx: i64,
            optimizer_idx: usize,
            closure: *mut fulmen_optimizer_closure,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `optimizer_zero_grad(epoch, batch_idx, optimizer)`,
    /// inside the closure at the start of an accumulation window, after
    /// `on_before_zero_grad`: zero with
    /// `fulmen_optimization_context_zero_grad` (or not). May be NULL (set
    /// the gradients to none).
    pub optimizer_zero_grad: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_optimization_context,
            epoch: i64,
            batch_idx: i64,
            optimizer_idx: usize,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `lr_scheduler_step(scheduler, metric)`, for each
    /// scheduler when its interval and frequency make it due
    /// (`scheduler_idx` in the flat list: optimizer 0's schedulers in the
    /// order added). `metric` points to the monitored value of a
    /// ReduceLROnPlateau, NULL for the others. Step it with
    /// `fulmen_optimization_context_scheduler_step` (or not). May be NULL
    /// (step it).
    pub lr_scheduler_step: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_optimization_context,
            scheduler_idx: usize,
            metric: *const f64,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `backward(loss)`, inside the closure between
    /// `on_before_backward` and `on_after_backward`: `loss` is the
    /// training_step's loss divided by `accumulate_grad_batches` and, under
    /// `16-mixed`, multiplied by the loss scale; the host runs backward
    /// itself (`fulmen_tensor_backward`). Borrowed for the call. May be
    /// NULL (backward of `loss`).
    pub backward: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_optimization_context,
            loss: *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    >,
    /// Lightning's `configure_gradient_clipping(optimizer,
    /// gradient_clip_val, gradient_clip_algorithm)`, on every step after
    /// `on_before_optimizer_step`, with the trainer's `gradient_clip_val`
    /// (0 when unset) and `gradient_clip_algorithm` (FULMEN_CLIP_NORM or
    /// FULMEN_CLIP_VALUE), on gradients already unscaled: clip with
    /// `fulmen_optimization_context_clip_gradients` (or not). May be NULL
    /// (clip with the trainer's settings).
    pub configure_gradient_clipping: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            ctx: *mut fulmen_optimization_context,
            optimizer_idx: usize,
            clip_val: f64,
            algorithm: i32,
        ) -> *mut fulmen_error,
    >,
}

/// The user's model logic: step functions, optimizer set-up, and the model
/// they train. Free with `fulmen_lightning_module_free`.
pub struct fulmen_lightning_module {
    pub(crate) inner: HostModule,
}

impl Handle for fulmen_lightning_module {
    const C_NAME: &'static str = "fulmen_lightning_module";
}

/// The list of optimizers `configure_optimizers` fills. Borrowed: valid
/// only during that callback.
pub struct fulmen_optimizer_config {
    pub(crate) configs: Vec<OptimizerConfig>,
    /// Each config's optimizer `id` (for the schedulers added later).
    pub(crate) optimizer_ids: Vec<u64>,
    /// What the trainer knows of the run.
    pub(crate) setup: OptimizerSetup,
}

impl Handle for fulmen_optimizer_config {
    const C_NAME: &'static str = "fulmen_optimizer_config";
}

/// The host module as a core LightningModule.
pub struct HostModule {
    pub(crate) userdata: Userdata,
    training_step: Option<fulmen_step_fn>,
    validation_step: Option<fulmen_eval_step_fn>,
    test_step: Option<fulmen_eval_step_fn>,
    predict_step: Option<fulmen_step_fn>,
    configure_optimizers: Option<unsafe extern "C" fn(*mut c_void, *mut fulmen_optimizer_config) -> *mut fulmen_error>,
    on_hook: Option<fulmen_hook_fn>,
    pub(crate) train_dataloader: Option<fulmen_train_dataloader_fn>,
    pub(crate) val_dataloader: Option<fulmen_val_dataloader_fn>,
    validation_step_output: Option<fulmen_step_fn>,
    test_step_output: Option<fulmen_step_fn>,
    configure_model: Option<unsafe extern "C" fn(*mut c_void, i32, i64) -> *mut fulmen_error>,
    configure_callbacks: Option<unsafe extern "C" fn(*mut c_void, *mut fulmen_callback_list) -> *mut fulmen_error>,
    /// The LightningModule-only hooks `on_hook` implements.
    overridden: Vec<Hook>,
    pub(crate) test_dataloader: Option<fulmen_val_dataloader_fn>,
    pub(crate) predict_dataloader: Option<fulmen_val_dataloader_fn>,
    model: Option<SharedModel>,
    hparams: BTreeMap<String, String>,
    automatic_optimization: bool,
    prepare_data_per_node: bool,
    optimization: OptimizationSlots,
}

fn host_error(name: &str, err: *mut fulmen_error) -> Result<()> {
    host_result(err, || name.to_string())
}

impl HostModule {
    /// Calls a step callback with temporary ctx and batch handles inside a
    /// tensor scope; returns the tensor it wrote to `out`, if any.
    fn call_step(
        &self,
        name: &str,
        ctx: &mut StepContext,
        batch: &[Tensor],
        f: impl FnOnce(
            *mut c_void,
            *mut fulmen_step_context,
            *const fulmen_batch,
            *mut *mut fulmen_tensor,
        ) -> *mut fulmen_error,
    ) -> Result<Option<Tensor>> {
        let _scope = TensorScope::enter();
        let ctx_ptr = std::ptr::from_mut(ctx).cast::<StepContext<'static>>();
        let batch_value = fulmen_batch { tensors: batch.iter().map(Tensor::shallow_clone).collect() };
        let mut out: *mut fulmen_tensor = std::ptr::null_mut();
        let timer = HostCallTimer::start();
        let (_, (_, err)) = with_temp_handle(batch_value, |b| {
            with_temp_handle(fulmen_step_context { ctx: ctx_ptr }, |c| f(self.userdata.ptr(), c, b, &mut out))
        });
        host_error(name, err)?;
        timer.check(|| name.to_string())?;
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: `out` is checked to be a live tensor handle before use.
        let t = unsafe { tensor_arg(out, "out") }.map_err(|e| {
            Error::new(ErrorCode::Callback, format!("{name} wrote an invalid tensor to *out: {}", e.message))
        })?;
        Ok(Some(t.shallow_clone()))
    }
}

impl LightningModule for HostModule {
    fn model(&self) -> Option<SharedModel> {
        self.model.clone()
    }

    fn training_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        let f = self.training_step.ok_or_else(|| Error::state("the module has no training_step"))?;
        self.call_step("training_step", ctx, batch, |u, c, b, o| unsafe { f(u, c, b, o) })
    }

    fn automatic_optimization(&self) -> bool {
        self.automatic_optimization
    }

    fn optimization_hooks(&self) -> Option<Rc<dyn OptimizationHooks>> {
        if !self.optimization.any() {
            return None;
        }
        Some(Rc::new(HostOptimization { userdata: self.userdata.ptr(), slots: self.optimization }))
    }

    fn has_validation_step(&self) -> bool {
        self.validation_step.is_some() || self.validation_step_output.is_some()
    }

    fn validation_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        match self.validation_step_output {
            Some(f) => self.call_step("validation_step", ctx, batch, |u, c, b, o| unsafe { f(u, c, b, o) }),
            None => self.validation_step(ctx, batch).map(|()| None),
        }
    }

    fn test_step_output(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        match self.test_step_output {
            Some(f) => self.call_step("test_step", ctx, batch, |u, c, b, o| unsafe { f(u, c, b, o) }),
            None => self.test_step(ctx, batch).map(|()| None),
        }
    }

    fn overrides(&self, hook: Hook) -> bool {
        self.on_hook.is_some() && self.overridden.contains(&hook)
    }

    fn has_configure_model(&self) -> bool {
        self.configure_model.is_some()
    }

    fn prepare_data_per_node(&self) -> bool {
        self.prepare_data_per_node
    }

    fn configure_model(&mut self, device: crate::tensor::device::Device) -> Result<()> {
        let Some(f) = self.configure_model else { return Ok(()) };
        let d = crate::tensor::device::DeviceSpec::from_device(device);
        let timer = HostCallTimer::start();
        let _scope = TensorScope::enter();
        host_error("configure_model", unsafe { f(self.userdata.ptr(), d.kind as i32, d.index) })?;
        timer.check(|| "configure_model".to_string())
    }

    fn configure_callbacks(&mut self) -> Result<Vec<Box<dyn Callback>>> {
        let Some(f) = self.configure_callbacks else { return Ok(Vec::new()) };
        let _scope = TensorScope::enter();
        let (list, err) =
            with_temp_handle(fulmen_callback_list { callbacks: Vec::new() }, |l| unsafe { f(self.userdata.ptr(), l) });
        host_error("configure_callbacks", err)?;
        Ok(list.callbacks)
    }

    fn validation_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<()> {
        let f = self.validation_step.ok_or_else(|| Error::state("the module has no validation_step"))?;
        self.call_step("validation_step", ctx, batch, |u, c, b, _| unsafe { f(u, c, b) }).map(|_| ())
    }

    fn has_test_step(&self) -> bool {
        self.test_step.is_some() || self.test_step_output.is_some()
    }

    fn test_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<()> {
        let f = self.test_step.ok_or_else(|| Error::state("the module has no test_step"))?;
        self.call_step("test_step", ctx, batch, |u, c, b, _| unsafe { f(u, c, b) }).map(|_| ())
    }

    fn predict_step(&mut self, ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        let f = self.predict_step.ok_or_else(|| Error::state("the module has no predict_step"))?;
        self.call_step("predict_step", ctx, batch, |u, c, b, o| unsafe { f(u, c, b, o) })
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match self.on_hook {
            Some(f) => call_host_hook(f, self.userdata.ptr(), "LightningModule", ctx),
            None => Ok(()),
        }
    }

    fn hparams(&self) -> BTreeMap<String, String> {
        self.hparams.clone()
    }

    fn has_train_dataloader(&self) -> bool {
        self.train_dataloader.is_some()
    }

    fn train_dataloader(&mut self, epoch: i64) -> Result<Box<dyn BatchSource + Send>> {
        crate::ffi::module::module_data::train_dataloader(self, epoch)
    }

    fn has_val_dataloader(&self) -> bool {
        self.val_dataloader.is_some()
    }

    fn val_dataloader(&mut self, epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
        crate::ffi::module::module_data::val_dataloader(self, epoch)
    }

    fn has_test_dataloader(&self) -> bool {
        self.test_dataloader.is_some()
    }

    fn test_dataloader(&mut self, epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
        crate::ffi::module::module_data::test_dataloader(self, epoch)
    }

    fn has_predict_dataloader(&self) -> bool {
        self.predict_dataloader.is_some()
    }

    fn predict_dataloader(&mut self, epoch: i64) -> Result<Vec<Box<dyn BatchSource + Send>>> {
        crate::ffi::module::module_data::predict_dataloader(self, epoch)
    }

    fn configure_optimizers(&mut self, setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        let f = self.configure_optimizers.ok_or_else(|| Error::state("the module has no configure_optimizers"))?;
        let _scope = TensorScope::enter();
        let (cfg, err) = with_temp_handle(
            fulmen_optimizer_config { configs: Vec::new(), optimizer_ids: Vec::new(), setup: *setup },
            |c| unsafe { f(self.userdata.ptr(), c) },
        );
        host_error("configure_optimizers", err)?;
        Ok(cfg.configs)
    }
}

/// Creates a LightningModule from the host's `vtable` (copied) training
/// `model` (may be NULL; the module shares it, so the host may free its own
/// handle). On failure `userdata_free` is not called.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`struct_size` smaller than the
/// 0.1.0 vtable).
#[no_mangle]
pub unsafe extern "C" fn fulmen_lightning_module_new(
    vtable: *const fulmen_module_vtable,
    model: *const fulmen_model,
    out: *mut *mut fulmen_lightning_module,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        // Vtables are append-only: accept the 0.1.0 layout, which ends
        // before `on_hook`, and read newer slots only when present.
        let v1_size = std::mem::offset_of!(fulmen_module_vtable, on_hook);
        let v = &read_vtable(vtable, v1_size, "fulmen_module_vtable")?;
        // Slots past the host's `struct_size` were copied as NULL.
        let (on_hook, train_dataloader, val_dataloader) = (v.on_hook, v.train_dataloader, v.val_dataloader);
        if (v.validation_step.is_some() && v.validation_step_output.is_some())
            || (v.test_step.is_some() && v.test_step_output.is_some())
        {
            return Err(Error::invalid(
                "fulmen_module_vtable: set validation_step or validation_step_output (and test_step or \
                 test_step_output), not both",
            ));
        }
        let model = if model.is_null() { None } else { Some(model_arg(model, "model")?.clone()) };
        let inner = HostModule {
            userdata: Userdata::new(v.userdata, v.userdata_free),
            training_step: v.training_step,
            validation_step: v.validation_step,
            test_step: v.test_step,
            predict_step: v.predict_step,
            configure_optimizers: v.configure_optimizers,
            on_hook,
            train_dataloader,
            val_dataloader,
            validation_step_output: v.validation_step_output,
            test_step_output: v.test_step_output,
            configure_model: v.configure_model,
            configure_callbacks: v.configure_callbacks,
            overridden: Vec::new(),
            test_dataloader: v.test_dataloader,
            predict_dataloader: v.predict_dataloader,
            model,
            hparams: BTreeMap::new(),
            automatic_optimization: true,
            prepare_data_per_node: true,
            optimization: OptimizationSlots {
                optimizer_step: v.optimizer_step,
                optimizer_zero_grad: v.optimizer_zero_grad,
                lr_scheduler_step: v.lr_scheduler_step,
                backward: v.backward,
                configure_gradient_clipping: v.configure_gradient_clipping,
            },
        };
        out.write(handle::into_raw(fulmen_lightning_module { inner }));
        Ok(())
    })
}

/// Frees a LightningModule and calls its `userdata_free`. NULL or an
/// already freed handle is a no-op. Freeing a module a fit is using
/// returns at once; the module (and `userdata_free`) goes when that fit
/// returns, on its thread.
#[no_mangle]
pub unsafe extern "C" fn fulmen_lightning_module_free(module: *mut fulmen_lightning_module) {
    handle::free(module);
}

/// Records a hyperparameter (Lightning's `save_hyperparameters`): written
/// to `hparams.yaml`, the TensorBoard hparams view and every checkpoint.
/// Setting a key again replaces its value. Any UTF-8 key and value is
/// kept exactly (hparams.yaml quotes and escapes what YAML would alter).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` or `value` not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_lightning_module_set_hparam(
    module: *mut fulmen_lightning_module,
    key: *const c_char,
    value: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let mut m = handle::borrow_mut(module, "module")?;
        let (k, v) = (str_arg(key, "key")?, str_arg(value, "value")?);
        m.inner.hparams.insert(k.to_string(), v.to_string());
        Ok(())
    })
}

/// Sets Lightning's `automatic_optimization` (default true). Off, the
/// trainer no longer zeroes gradients, runs backward, clips or steps:
/// `training_step` does it with `fulmen_step_context_manual_backward`,
/// `fulmen_step_context_optimizer_step` / `_zero_grad`, `_toggle_optimizer`
/// and `_scheduler_step`, over the optimizers `configure_optimizers` added
/// (by index, in order). Schedulers are not stepped by the trainer either,
/// every optimizer step counts in `global_step`, and the loggers' step
/// counts batches. The hooks that fire inside the step
/// (`on_before_backward`, `on_after_backward`, `on_before_optimizer_step`)
/// reach the callbacks, not the module's own `on_hook` (the module is
/// the code running). As in Lightning, fit then refuses
/// `accumulate_grad_batches` > 1 and `gradient_clip_val`; strategy "dp" is
/// refused too. Not while a fit uses the module.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_lightning_module_set_automatic_optimization(
    module: *mut fulmen_lightning_module,
    enabled: bool,
) -> *mut fulmen_error {
    guard!(|| {
        handle::borrow_mut(module, "module")?.inner.automatic_optimization = enabled;
        Ok(())
    })
}

/// Sets Lightning's `prepare_data_per_node` (default true) for the
/// module's `prepare_data` (FULMEN_HOOK_PREPARE_DATA, when the module
/// overrides it): true calls it on local rank 0 of every node, false on
/// global rank 0 only. Not while a run uses the module.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_lightning_module_set_prepare_data_per_node(
    module: *mut fulmen_lightning_module,
    per_node: bool,
) -> *mut fulmen_error {
    guard!(|| {
        handle::borrow_mut(module, "module")?.inner.prepare_data_per_node = per_node;
        Ok(())
    })
}

/// Declares that the module's `on_hook` implements (`overridden` true) or
/// no longer implements a LightningModule-only hook (Lightning's
/// overriding a method): FULMEN_HOOK_VALIDATION_MODEL_EVAL,
/// _VALIDATION_MODEL_TRAIN, _TEST_MODEL_EVAL, _TEST_MODEL_TRAIN,
/// _PREDICT_MODEL_EVAL, _VALIDATION_MODEL_ZERO_GRAD,
/// _BEFORE_BATCH_TRANSFER, _TRANSFER_BATCH_TO_DEVICE,
/// _AFTER_BATCH_TRANSFER, _PREPARE_DATA. Only the module receives these
/// hooks, and only when it overrides them: it then does what fulmen's
/// default did (the model's eval / train mode, its gradients set to none,
/// the batch moved to the device with `fulmen_hook_context_set_batch`;
/// nothing for prepare_data). A module that does
/// not override them keeps fulmen's defaults, and its `on_hook` never
/// sees them. Not while a run uses the module.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`hook` is not one of those),
/// FULMEN_CODE_INVALID_STATE (the module has no `on_hook`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_lightning_module_override_hook(
    module: *mut fulmen_lightning_module,
    hook: i32,
    overridden: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let h = Hook::from_i32(hook).filter(|h| h.module_only()).ok_or_else(|| {
            Error::invalid(format!(
                "{hook} is not a LightningModule-only fulmen_hook (FULMEN_HOOK_VALIDATION_MODEL_EVAL .. \
                 FULMEN_HOOK_PREPARE_DATA)"
            ))
        })?;
        let mut m = handle::borrow_mut(module, "module")?;
        if m.inner.on_hook.is_none() {
            return Err(Error::state(format!("{}: the module has no on_hook to implement it", h.name())));
        }
        m.inner.overridden.retain(|x| *x != h);
        if overridden {
            m.inner.overridden.push(h);
        }
        Ok(())
    })
}

/// When a scheduler steps (`fulmen_interval`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerInterval {
    /// After every optimizer step.
    Step = 0,
    /// After every training epoch (Lightning's default).
    Epoch = 1,
}

/// Writes Lightning's `trainer.estimated_stepping_batches`: the optimizer
/// steps this fit will take, `ceil(batches per epoch /
/// accumulate_grad_batches) * max_epochs` at most max_steps (this rank's
/// shard under DDP), e.g. for OneCycleLR's `total_steps`. Runs on the
/// thread of configure_optimizers.
///
/// Errors: FULMEN_CODE_INVALID_STATE (the run is unbounded: no max_steps,
/// and max_epochs -1 or a data source of unknown length).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_config_estimated_stepping_batches(
    config: *const fulmen_optimizer_config,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let c = handle::borrow(config, "config")?;
        let steps = c.setup.estimated_stepping_batches.ok_or_else(|| {
            Error::state("the number of steps is unbounded: set max_steps, or max_epochs with a sized data source")
        })?;
        out.write(steps);
        Ok(())
    })
}

/// A scheduler's stepping rule from C arguments (`scheduler` checked
/// against the optimizer whose `id` is `optimizer`).
unsafe fn scheduler_rule(
    scheduler: *mut fulmen_scheduler,
    optimizer: u64,
    interval: i32,
    frequency: i64,
    monitor: *const c_char,
) -> Result<(Interval, i64, Option<String>)> {
    let interval = match interval {
        0 => Interval::Step,
        1 => Interval::Epoch,
        i => return Err(Error::invalid(format!("{i} is not a fulmen_interval (0 step, 1 epoch)"))),
    };
    if frequency < 1 {
        return Err(Error::invalid(format!("frequency must be >= 1, got {frequency}")));
    }
    let monitor = if monitor.is_null() { None } else { Some(str_arg(monitor, "monitor")?.to_string()) };
    if !scheduler.is_null() {
        let s = handle::borrow(scheduler, "scheduler")?;
        if s.optimizer != optimizer {
            return Err(Error::invalid("`scheduler` was created for another optimizer"));
        }
        if s.inner.reduce_on_plateau() && monitor.is_none() {
            return Err(Error::invalid("ReduceLROnPlateau needs `monitor`: the name of a logged metric"));
        }
    }
    Ok((interval, frequency, monitor))
}

/// Hands `optimizer` (and optionally `scheduler`, created for it) to the
/// trainer. `interval` is a `fulmen_interval`; the scheduler steps every
/// `frequency` intervals; `monitor` names the logged metric fed to
/// ReduceLROnPlateau (NULL otherwise). On success both handles are
/// consumed: do not use or free them. On failure nothing is consumed.
/// More schedulers of the same optimizer: `fulmen_optimizer_config_add_scheduler`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`interval` not a fulmen_interval,
/// `frequency` < 1, `monitor` not UTF-8, `scheduler` made for another
/// optimizer, ReduceLROnPlateau without `monitor`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_config_add(
    config: *mut fulmen_optimizer_config,
    optimizer: *mut fulmen_optimizer,
    scheduler: *mut fulmen_scheduler,
    interval: i32,
    frequency: i64,
    monitor: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check(config, "config")?;
        let id = handle::borrow(optimizer, "optimizer")?.id;
        let (interval, frequency, monitor) = scheduler_rule(scheduler, id, interval, frequency, monitor)?;
        let mut cfg = handle::borrow_mut(config, "config")?;
        // Both handles are moved, or neither (a handle in use is refused).
        let sched_arg = (!scheduler.is_null()).then_some((scheduler, "scheduler"));
        let (opt, sched) = handle::take_owned_pair(optimizer, "optimizer", sched_arg)?;
        let scheduler = sched.map(|s| SchedulerConfig {
            scheduler: s.inner,
            interval,
            frequency,
            monitor,
            name: None,
            strict: true,
        });
        cfg.configs.push(OptimizerConfig::new(opt.inner, scheduler));
        cfg.optimizer_ids.push(id);
        Ok(())
    })
}

/// Adds another `scheduler` to the optimizer added `optimizer_index`-th
/// (from 0) by `fulmen_optimizer_config_add`, as Lightning's
/// configure_optimizers may return several `lr_scheduler` configs for one
/// optimizer (a warm-up per step and ReduceLROnPlateau per epoch). The
/// scheduler must have been made for that optimizer before it was added,
/// and none of its schedulers may have stepped. As in torch, the
/// schedulers of one optimizer then step in their chainable forms, so
/// their factors compose: the lr goes back to the initial lr and each
/// scheduler's first step is replayed in the order they were added. A
/// SequentialLR cannot share an optimizer. The arguments are as for
/// `fulmen_optimizer_config_add`; `scheduler` is consumed on success only.
///
/// Errors: FULMEN_CODE_NULL_ARGUMENT, FULMEN_CODE_INVALID_ARGUMENT
/// (`optimizer_index` out of range, `interval`, `frequency`, `monitor` as
/// for fulmen_optimizer_config_add, `scheduler` made for another
/// optimizer, a SequentialLR among them), FULMEN_CODE_INVALID_STATE (a
/// scheduler in use or already stepped, or made before the optimizer's
/// param groups changed).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_config_add_scheduler(
    config: *mut fulmen_optimizer_config,
    optimizer_index: usize,
    scheduler: *mut fulmen_scheduler,
    interval: i32,
    frequency: i64,
    monitor: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        handle::check(scheduler, "scheduler")?;
        let id = {
            let cfg = handle::borrow(config, "config")?;
            let n = cfg.configs.len();
            *cfg.optimizer_ids.get(optimizer_index).ok_or_else(|| {
                Error::invalid(format!("optimizer_index {optimizer_index} is out of range: {n} optimizers added"))
            })?
        };
        let (interval, frequency, monitor) = scheduler_rule(scheduler, id, interval, frequency, monitor)?;
        let mut cfg = handle::borrow_mut(config, "config")?;
        // Checked before the scheduler is taken: a failure consumes nothing.
        let entry = &cfg.configs[optimizer_index];
        let s = handle::take_owned(scheduler, "scheduler", |s| {
            entry.check_added(s.inner.as_ref()).map_err(|e| e.context(format!("optimizer {optimizer_index}")))
        })?;
        cfg.configs[optimizer_index].add_scheduler(SchedulerConfig {
            scheduler: s.inner,
            interval,
            frequency,
            monitor,
            name: None,
            strict: true,
        })
    })
}

/// The `scheduler_index`-th scheduler (from 0, in the order added) of the
/// optimizer added `optimizer_index`-th to `config`.
fn scheduler_at(
    cfg: &mut fulmen_optimizer_config,
    optimizer_index: usize,
    scheduler_index: usize,
) -> Result<&mut SchedulerConfig> {
    let n = cfg.configs.len();
    let entry = cfg.configs.get_mut(optimizer_index).ok_or_else(|| {
        Error::invalid(format!("optimizer_index {optimizer_index} is out of range: {n} optimizers added"))
    })?;
    let m = entry.schedulers.len();
    entry.schedulers.get_mut(scheduler_index).ok_or_else(|| {
        Error::invalid(format!(
            "scheduler_index {scheduler_index} is out of range: optimizer {optimizer_index} has {m} schedulers"
        ))
    })
}

/// Names a scheduler, as Lightning's lr_scheduler config `"name"`:
/// LearningRateMonitor then logs `<name>` (with `/pgN` per param group when
/// there are several) instead of `lr-<Optimizer>`. NULL clears the name.
/// The scheduler is the `scheduler_index`-th (from 0, in the order added)
/// of the optimizer added `optimizer_index`-th.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an index out of range, `name`
/// empty or not UTF-8).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_config_set_scheduler_name(
    config: *mut fulmen_optimizer_config,
    optimizer_index: usize,
    scheduler_index: usize,
    name: *const c_char,
) -> *mut fulmen_error {
    guard!(|| {
        let name = opt_str(name, "name")?;
        if name.as_deref() == Some("") {
            return Err(Error::invalid("argument `name` is empty"));
        }
        let mut cfg = handle::borrow_mut(config, "config")?;
        scheduler_at(&mut cfg, optimizer_index, scheduler_index)?.name = name;
        Ok(())
    })
}

/// Sets a scheduler's `strict`, as Lightning's lr_scheduler config
/// `"strict"` (default true): when its ReduceLROnPlateau's monitored
/// metric was not logged, a strict scheduler fails the run with
/// FULMEN_CODE_INVALID_STATE, a non-strict one prints a warning and skips
/// that step. Other schedulers ignore it. The indices are as for
/// `fulmen_optimizer_config_set_scheduler_name`.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (an index out of range).
#[no_mangle]
pub unsafe extern "C" fn fulmen_optimizer_config_set_scheduler_strict(
    config: *mut fulmen_optimizer_config,
    optimizer_index: usize,
    scheduler_index: usize,
    strict: bool,
) -> *mut fulmen_error {
    guard!(|| {
        let mut cfg = handle::borrow_mut(config, "config")?;
        scheduler_at(&mut cfg, optimizer_index, scheduler_index)?.strict = strict;
        Ok(())
    })
}

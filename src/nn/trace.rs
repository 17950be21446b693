//! A model's forward traced into a TorchScript module, as Lightning's
//! `LightningModule.to_torchscript(method="trace")` runs `torch.jit.trace`:
//! what a C, C++ or Go program trained, shipped as a `.pt` file that
//! PyTorch's `torch.jit.load` and libtorch's C++ API run without the
//! program (its host callbacks included: their ops are recorded).
use super::module::{copy_state_tied, Module, Node, Slot};
use super::torchscript::ScriptModule;
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::shim::{self, call};
use libc::{c_char, c_int, c_void, size_t};
use std::ffi::CString;
use std::path::PathBuf;
use tch::Tensor;

/// The most example inputs a trace takes.
pub const MAX_TRACE_INPUTS: usize = 16;

/// The relative and absolute tolerance within which the traced forward
/// must give the model's own results on the example inputs (torch.jit.trace's
/// `check_tolerance`).
const CHECK_TOLERANCE: f64 = 1e-5;

/// What the traced forward reads and leaves for the caller.
struct Tracing<'a> {
    module: &'a Module,
    /// The forward's own error, returned as it is.
    error: Option<Error>,
    /// The forward's results, for the check after the trace.
    outputs: Vec<Tensor>,
}

/// The forward the shim traces: `ctx` is the `Tracing`.
unsafe extern "C" fn traced_forward(
    ctx: *mut c_void,
    inputs: *const *const c_void,
    n: size_t,
    outputs: *mut c_void,
    err: *mut c_char,
    err_len: size_t,
) -> c_int {
    let tracing = &mut *(ctx as *mut Tracing<'_>);
    let tensors = shim::forward_inputs(inputs, n);
    let module = tracing.module;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let refs: Vec<Option<&Tensor>> = tensors.iter().map(Some).collect();
        module.forward_multi(&refs)
    }))
    .unwrap_or_else(|_| Err(Error::new(ErrorCode::Panic, "the traced forward panicked")));
    let pushed = result.and_then(|outs| {
        shim::push_forward_outputs(outputs, &outs)?;
        tracing.outputs = outs;
        Ok(())
    });
    match pushed {
        Ok(()) => 0,
        Err(e) => {
            shim::write_error(err, err_len, &e.message);
            tracing.error = Some(e);
            1
        }
    }
}

/// The class each module of the tree gets in the traced module
/// ("Sequential", "Linear", ...; "Module" for a script's or an exported
/// program's own), by dotted path ("" the root).
fn module_classes(m: &Module, path: &str, out: &mut Vec<(CString, CString)>) -> Result<()> {
    let class = match &m.node {
        Node::Script(_) | Node::Exported(_) => "Module",
        _ => m.type_name(),
    };
    let c_path = CString::new(path).map_err(|_| Error::invalid(format!("module path {path:?} contains a NUL byte")))?;
    out.push((c_path, CString::new(class).expect("type names hold no NUL")));
    if let Node::Sequential(children) | Node::Named(children) = &m.node {
        for (name, child) in children {
            let child_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            module_classes(child, &child_path, out)?;
        }
    }
    Ok(())
}

/// Whether every result of the trace equals the forward's within
/// [`CHECK_TOLERANCE`]; the first that does not, described.
fn check_results(traced: &[Tensor], eager: &[Tensor]) -> Result<()> {
    if traced.len() != eager.len() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!("the traced forward returns {} tensors, the model's {}", traced.len(), eager.len()),
        ));
    }
    for (i, (t, e)) in traced.iter().zip(eager).enumerate() {
        let same = t.size() == e.size()
            && t.kind() == e.kind()
            && t.f_allclose(e, CHECK_TOLERANCE, CHECK_TOLERANCE, true).ctx("comparing the traced results")?;
        if !same {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "the traced forward's result {i} ({:?}, {:?}) differs from the model's ({:?}, {:?}) on the \
                     example inputs: the forward depends on something the trace cannot record (values read on \
                     the host, ops run on another thread)",
                    t.size(),
                    t.kind(),
                    e.size(),
                    e.kind()
                ),
            ));
        }
    }
    Ok(())
}

impl Module {
    /// The forward traced on `example_inputs` into a TorchScript module
    /// (Lightning's `to_torchscript(method="trace")`): the model is put in
    /// evaluation mode and traced with gradients off, then put back in its
    /// mode. The result holds copies of the parameters and buffers under
    /// their state_dict names (tied ones stay tied), its `forward` is the
    /// recorded graph (one tensor, or a tuple for several results), and it
    /// is in evaluation mode; it runs the ops this forward ran, so control
    /// flow that depends on values is frozen as it went. Refused: no input
    /// or more than [`MAX_TRACE_INPUTS`], a model on the meta device, and a
    /// trace whose forward does not give the model's results again on the
    /// example inputs.
    pub fn to_torchscript(&mut self, example_inputs: &[Tensor]) -> Result<Module> {
        if example_inputs.is_empty() || example_inputs.len() > MAX_TRACE_INPUTS {
            return Err(Error::invalid(format!(
                "to_torchscript: {} example inputs, from 1 to {MAX_TRACE_INPUTS}",
                example_inputs.len()
            )));
        }
        if self.holds_meta() {
            return Err(Error::state(
                "to_torchscript: the model holds tensors on the meta device, which have no values: materialize it \
                 first (fulmen_model_materialize)",
            ));
        }
        let was_training = self.is_training();
        self.set_training(false)?;
        let traced = self.trace_in_eval(example_inputs);
        let restored = self.set_training(was_training);
        let traced = traced?;
        restored?;
        Ok(traced)
    }

    fn trace_in_eval(&self, inputs: &[Tensor]) -> Result<Module> {
        let _no_grad = tch::no_grad_guard();
        let mut classes = Vec::new();
        module_classes(self, "", &mut classes)?;
        let mut state: Vec<(CString, Tensor, c_int)> = Vec::new();
        let mut bad_name = None;
        self.visit("", &mut |name, t, slot| match CString::new(name) {
            Ok(n) => state.push((n, t.shallow_clone(), (slot == Slot::Buffer) as c_int)),
            Err(e) => bad_name = Some(e),
        });
        if let Some(e) = bad_name {
            return Err(Error::invalid(format!("a state name contains a NUL byte: {e}")));
        }
        let paths: Vec<*const c_char> = classes.iter().map(|(p, _)| p.as_ptr()).collect();
        let class_names: Vec<*const c_char> = classes.iter().map(|(_, c)| c.as_ptr()).collect();
        let names: Vec<*const c_char> = state.iter().map(|(n, _, _)| n.as_ptr()).collect();
        let tensors: Vec<*const c_void> = state.iter().map(|(_, t, _)| t.as_ptr() as *const c_void).collect();
        let buffers: Vec<c_int> = state.iter().map(|(_, _, b)| *b).collect();
        let input_ptrs: Vec<*const c_void> = inputs.iter().map(|t| t.as_ptr() as *const c_void).collect();
        let mut tracing = Tracing { module: self, error: None, outputs: Vec::new() };
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: every array lives for the call with the lengths given;
        // `tracing` outlives it; `raw` receives a module this function owns.
        let status = call("tracing the model's forward", |err, len| unsafe {
            shim::fulmen_cxx_script_trace(
                paths.as_ptr(),
                class_names.as_ptr(),
                paths.len(),
                names.as_ptr(),
                tensors.as_ptr(),
                buffers.as_ptr(),
                names.len(),
                input_ptrs.as_ptr(),
                input_ptrs.len(),
                traced_forward,
                &mut tracing as *mut Tracing<'_> as *mut c_void,
                &mut raw,
                err,
                len,
            )
        });
        if let Some(e) = tracing.error.take() {
            return Err(e.context("to_torchscript: the traced forward failed"));
        }
        status?;
        let source = PathBuf::from(format!("traced {}", self.type_name()));
        // SAFETY: a module the shim made for this call, owned by no one else.
        let mut script = unsafe { ScriptModule::from_raw(raw, source) }?;
        // The slots hold the model's own tensors: point them at copies.
        let own: Vec<(String, Tensor)> = script.slots()?.into_iter().map(|(n, t, _)| (n, t)).collect();
        let copies = copy_state_tied(&own, &mut |t| Ok(t.f_detach_copy()?.set_requires_grad(t.requires_grad())))?;
        script.set_tensors(&copies)?;
        script.set_training(false)?;
        let mut traced = Module::from_script(script);
        traced.set_training(false)?;
        let refs: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
        check_results(&traced.forward_multi(&refs)?, &tracing.outputs)?;
        Ok(traced)
    }
}

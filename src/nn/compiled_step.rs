//! Compiled training steps: the joint forward and backward of a
//! training_step, compiled ahead of time by AOTInductor for one batch shape
//! (`python/fulmen_export.py` `export_compiled_step`), run through
//! `csrc/compiled_step.cpp`. The step takes the model's parameters and
//! buffers by name and the batch, and returns the new buffers, the loss
//! and one gradient per parameter; the loss comes back tied to those
//! gradients, so the trainer's own backward (scaled, accumulated, seen by
//! DDP's hooks) adds them to the parameters. A package is native code:
//! load only packages you built.
use super::module::Module;
use super::Value;
use crate::error::{Error, ErrorCode, Result};
use crate::shim::{self, call};
use libc::{c_char, c_void};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::{Kind, Tensor};

/// The metadata format this reader understands.
const FORMAT: &str = "compiled_step/1";

/// An owned `AOTIModelPackageLoader*`.
struct RawLoader(*mut c_void);

// SAFETY: a loaded package runs from any thread; fulmen calls it with the
// model locked.
unsafe impl Send for RawLoader {}
// SAFETY: as above.
unsafe impl Sync for RawLoader {}

impl Drop for RawLoader {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { shim::fulmen_cxx_aoti_free(self.0) }
    }
}

/// One compiled step of a model.
pub(crate) struct CompiledStep {
    raw: RawLoader,
    /// The method name it answers (`fulmen_model_call_method`).
    pub(crate) method: String,
    params: Vec<String>,
    buffers: Vec<String>,
    mutated: Vec<String>,
    batch: Vec<(Kind, Vec<i64>)>,
    source: PathBuf,
}

impl std::fmt::Debug for CompiledStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledStep").field("method", &self.method).field("source", &self.source).finish()
    }
}

unsafe extern "C" fn on_pair(ctx: *mut c_void, key: *const c_char, value: *const c_char) {
    // SAFETY: `ctx` is the map handed to the shim in `metadata`.
    let out = &mut *(ctx as *mut HashMap<String, String>);
    out.insert(
        CStr::from_ptr(key).to_string_lossy().into_owned(),
        CStr::from_ptr(value).to_string_lossy().into_owned(),
    );
}

fn kind_named(name: &str) -> Result<Kind> {
    Ok(match name {
        "float32" => Kind::Float,
        "float64" => Kind::Double,
        "float16" => Kind::Half,
        "bfloat16" => Kind::BFloat16,
        "int64" => Kind::Int64,
        "int32" => Kind::Int,
        "int16" => Kind::Int16,
        "int8" => Kind::Int8,
        "uint8" => Kind::Uint8,
        "bool" => Kind::Bool,
        other => return Err(Error::format(format!("a batch dtype {other:?}"))),
    })
}

fn names(meta: &HashMap<String, String>, key: &str) -> Result<Vec<String>> {
    let text = meta.get(key).ok_or_else(|| Error::format(format!("no {key} in its metadata")))?;
    serde_json::from_str(text).map_err(|e| Error::format(format!("{key}: {e}")))
}

fn batch_shapes(meta: &HashMap<String, String>) -> Result<Vec<(Kind, Vec<i64>)>> {
    let text =
        meta.get("fulmen.batch_shapes").ok_or_else(|| Error::format("no fulmen.batch_shapes in its metadata"))?;
    let items: Vec<(String, Vec<i64>)> =
        serde_json::from_str(text).map_err(|e| Error::format(format!("fulmen.batch_shapes: {e}")))?;
    items.into_iter().map(|(k, s)| Ok((kind_named(&k)?, s))).collect()
}

/// The tensors of `v`, depth first (tuples and lists in order, dicts by
/// sorted key), as PyTorch's pytree flattens a batch.
fn leaves<'a>(v: &'a Value, out: &mut Vec<&'a Tensor>) -> Result<()> {
    match v {
        Value::Tensor(t) => out.push(t),
        Value::Tuple(items) | Value::List(items) => {
            for i in items {
                leaves(i, out)?;
            }
        }
        Value::Dict(items) => {
            // PyTorch's pytree flattens a dict by its sorted keys.
            let mut sorted: Vec<&(Value, Value)> = items.iter().collect();
            sorted.sort_by(|(a, _), (b, _)| match (a, b) {
                (Value::Str(a), Value::Str(b)) => a.cmp(b),
                (Value::Int(a), Value::Int(b)) => a.cmp(b),
                _ => std::cmp::Ordering::Equal,
            });
            for (_, i) in sorted {
                leaves(i, out)?;
            }
        }
        other => {
            return Err(Error::invalid(format!(
                "a compiled step takes tensors (in tuples, lists and dicts), got a {}",
                other.kind_name()
            )))
        }
    }
    Ok(())
}

/// The model of the package at `path` to load: the one named `method`,
/// else its only one.
fn package_model(path: &Path, method: &str) -> Result<String> {
    let bytes = crate::fs_safe::read_regular(path)?;
    let what = path.display().to_string();
    let zip = crate::checkpoint::torch_zip::ZipReader::new(&bytes, &what)
        .map_err(|e| Error::format(format!("{what} is not an AOTInductor package: {}", e.message)))?;
    let mut models: Vec<String> = zip
        .names()
        .filter_map(|n| n.strip_prefix("data/aotinductor/")?.split('/').next().map(str::to_owned))
        .filter(|n| !n.is_empty())
        .collect();
    models.sort();
    models.dedup();
    if models.iter().any(|m| m == method) {
        return Ok(method.to_owned());
    }
    match models.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(Error::format(format!("{what} is not an AOTInductor package (no data/aotinductor/)"))),
        many => Err(Error::format(format!("{what} holds the compiled models {many:?}, none named {method:?}"))),
    }
}

impl CompiledStep {
    /// Loads the package at `path` (its model `method`) for `device`.
    fn load(path: &Path, method: &str, device: tch::Device) -> Result<CompiledStep> {
        crate::fs_safe::regular_metadata(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        let cpath = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| Error::invalid("the package path contains a NUL byte"))?;
        let model = package_model(path, method)?;
        let cname = CString::new(model).map_err(|_| Error::invalid("the model name contains a NUL byte"))?;
        let index = match device {
            tch::Device::Cuda(i) => i as libc::c_int,
            _ => -1,
        };
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and an out pointer.
        call("loading a compiled step", |err, len| unsafe {
            shim::fulmen_cxx_aoti_load(cpath.as_ptr(), cname.as_ptr(), index, &mut raw, err, len)
        })
        .map_err(|e| Error::format(format!("{} is not a loadable compiled step: {}", path.display(), e.message)))?;
        let raw = RawLoader(raw);
        let mut meta: HashMap<String, String> = HashMap::new();
        // SAFETY: a live loader; the callback fills `meta`.
        call("reading a compiled step's metadata", |err, len| unsafe {
            shim::fulmen_cxx_aoti_metadata(raw.0, on_pair, &mut meta as *mut _ as *mut c_void, err, len)
        })?;
        let what = path.display();
        match meta.get("fulmen.format").map(String::as_str) {
            Some(FORMAT) => {}
            other => {
                return Err(Error::format(format!(
                    "{what}: not a compiled step of python/fulmen_export.py (format {other:?}, expected {FORMAT})"
                )))
            }
        }
        let step = CompiledStep {
            raw,
            method: method.to_owned(),
            params: names(&meta, "fulmen.parameters").map_err(|e| e.context(&what))?,
            buffers: names(&meta, "fulmen.buffers").map_err(|e| e.context(&what))?,
            mutated: names(&meta, "fulmen.mutated_buffers").map_err(|e| e.context(&what))?,
            batch: batch_shapes(&meta).map_err(|e| e.context(&what))?,
            source: path.to_path_buf(),
        };
        let loss_index: usize = meta
            .get("fulmen.loss_index")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::format(format!("{what}: no fulmen.loss_index in its metadata")))?;
        if loss_index != step.mutated.len() || step.mutated.iter().any(|m| !step.buffers.contains(m)) {
            return Err(Error::format(format!("{what}: its outputs are not [mutated buffers, loss, gradients]")));
        }
        Ok(step)
    }

    /// Whether the batch leaves have the dtypes and shapes it was compiled for.
    fn takes(&self, batch: &[&Tensor]) -> bool {
        batch.len() == self.batch.len()
            && batch.iter().zip(&self.batch).all(|(t, (k, s))| t.kind() == *k && t.size() == *s)
    }

    fn shapes(&self) -> String {
        self.batch.iter().map(|(k, s)| format!("{k:?}{s:?}")).collect::<Vec<_>>().join(", ")
    }

    /// Runs the step on `batch` with the module's tensors: writes the new
    /// buffers, returns {"loss": the loss tied to the gradients}.
    fn run(&self, module: &Module, batch: &[&Tensor]) -> Result<Value> {
        let state: HashMap<String, Tensor> = module.state_dict().into_iter().collect();
        let get = |n: &String| {
            state.get(n).ok_or_else(|| Error::state(format!("the model has no tensor {n} the compiled step takes")))
        };
        let params = self.params.iter().map(get).collect::<Result<Vec<_>>>()?;
        // The compiled code indexes its inputs as contiguous tensors.
        let mut held: Vec<Tensor> = params.iter().map(|t| t.detach().contiguous()).collect();
        for b in &self.buffers {
            held.push(get(b)?.contiguous());
        }
        held.extend(batch.iter().map(|t| t.contiguous()));
        let inputs: Vec<*const c_void> = held.iter().map(|t| t.as_ptr() as *const c_void).collect();
        let n_out = self.mutated.len() + 1 + self.params.len();
        let mut raw: Vec<*mut c_void> = vec![std::ptr::null_mut(); n_out];
        // SAFETY: a live loader, live input tensors, room for each output.
        call(&format!("compiled {} ({})", self.method, self.source.display()), |err, len| unsafe {
            shim::fulmen_cxx_aoti_run(self.raw.0, inputs.as_ptr(), inputs.len(), raw.as_mut_ptr(), n_out, err, len)
        })?;
        // SAFETY: each is a new `at::Tensor*` whose ownership passes here.
        let outputs: Vec<Tensor> = raw.into_iter().map(|p| unsafe { Tensor::from_ptr(p.cast()) }).collect();
        for (name, new) in self.mutated.iter().zip(&outputs) {
            let mut target = get(name)?.shallow_clone();
            tch::no_grad(|| target.f_copy_(new))
                .map_err(|e| Error::new(ErrorCode::Torch, format!("writing buffer {name}: {e}")))?;
        }
        let loss = &outputs[self.mutated.len()];
        let grads = &outputs[self.mutated.len() + 1..];
        let p_ptrs: Vec<*const c_void> = params.iter().map(|t| t.as_ptr() as *const c_void).collect();
        let g_ptrs: Vec<*const c_void> = grads.iter().map(|t| t.as_ptr() as *const c_void).collect();
        let mut tied: *mut c_void = std::ptr::null_mut();
        // SAFETY: live tensors, as many gradients as parameters, an out pointer.
        call("tying the loss to its gradients", |err, len| unsafe {
            shim::fulmen_cxx_loss_with_gradients(
                loss.as_ptr() as *const c_void,
                p_ptrs.as_ptr(),
                g_ptrs.as_ptr(),
                p_ptrs.len(),
                &mut tied,
                err,
                len,
            )
        })?;
        // SAFETY: a new `at::Tensor*` whose ownership passes to the Tensor.
        let loss = unsafe { Tensor::from_ptr(tied.cast()) };
        Ok(Value::Dict(vec![(Value::Str("loss".into()), Value::Tensor(loss))]))
    }
}

impl Module {
    /// Adds the compiled training step in the AOTInductor package at `path`
    /// (its model `method`, as `export_compiled_step` writes it) to this
    /// model: `call_method(method, [batch])` then runs it for batches of
    /// the shapes it was compiled for, and returns {"loss": ...} whose
    /// backward adds the compiled gradients to the parameters. Several
    /// packages may answer one method, one per batch shape (a smaller last
    /// batch). Every parameter and buffer it names must be the model's.
    pub fn add_compiled_step(&mut self, path: &Path, method: &str) -> Result<()> {
        let device = self.state_dict().first().map_or(tch::Device::Cpu, |(_, t)| t.device());
        let step = CompiledStep::load(path, method, device)?;
        let state: HashMap<String, Tensor> = self.state_dict().into_iter().collect();
        let known: Vec<String> = self.named_parameters().into_iter().map(|(n, _)| n).collect();
        for p in &step.params {
            if !known.contains(p) {
                return Err(Error::invalid(format!(
                    "{}: the compiled step trains a parameter {p} the model does not have (its parameters: {known:?})",
                    path.display()
                )));
            }
        }
        if let Some(b) = step.buffers.iter().find(|b| !state.contains_key(*b)) {
            return Err(Error::invalid(format!("{}: the model has no buffer {b}", path.display())));
        }
        if let Some(missing) = known.iter().find(|n| !step.params.contains(n)) {
            return Err(Error::invalid(format!(
                "{}: the compiled step does not train the model's parameter {missing}",
                path.display()
            )));
        }
        self.compiled.push(Arc::new(step));
        Ok(())
    }

    /// Runs the compiled step answering `method` for the batch in `args`;
    /// `None` when no compiled step answers `method`.
    pub(crate) fn call_compiled(&self, method: &str, args: &[Value]) -> Option<Result<Value>> {
        let steps: Vec<&Arc<CompiledStep>> = self.compiled.iter().filter(|c| c.method == method).collect();
        if steps.is_empty() {
            return None;
        }
        let mut batch = Vec::new();
        for a in args {
            if let Err(e) = leaves(a, &mut batch) {
                return Some(Err(e));
            }
        }
        Some(match steps.iter().find(|s| s.takes(&batch)) {
            Some(s) => s.run(self, &batch),
            None => {
                let got = batch.iter().map(|t| format!("{:?}{:?}", t.kind(), t.size())).collect::<Vec<_>>().join(", ");
                let have = steps.iter().map(|s| format!("[{}]", s.shapes())).collect::<Vec<_>>().join(" or ");
                Err(Error::shape(format!(
                    "{method}: compiled for batches of {have}, got [{got}]; compile a step for this shape too \
                     (a smaller last batch), or drop the last batch"
                )))
            }
        })
    }
}

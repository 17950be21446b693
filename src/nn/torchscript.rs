//! TorchScript modules exported from Python, run and trained through the
//! C++ shim (`csrc/script.cpp`): parameters and buffers with PyTorch's
//! dotted names, any method on any values, saving back to a `.pt` file.
use super::module::Module;
use super::script_value::{CxxValue, Value};
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::shim::{self, call};
use libc::{c_char, c_int, c_void};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use tch::{Device, Tensor};

/// The most arguments a method call takes.
pub const MAX_METHOD_ARGS: usize = 64;

/// An owned `torch::jit::Module*` of the shim.
struct RawModule(*mut c_void);

// SAFETY: a `torch::jit::Module` has no thread affinity; fulmen uses it
// from one thread at a time (a `Module` is behind a lock when shared).
unsafe impl Send for RawModule {}

impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { shim::fulmen_cxx_script_free(self.0) }
    }
}

/// A loaded TorchScript module, its parameters and buffers (the very
/// tensors the script uses, so gradients and in-place updates reach them).
pub(crate) struct ScriptModule {
    raw: RawModule,
    state: Vec<(String, Tensor, bool)>,
    source: PathBuf,
}

impl std::fmt::Debug for ScriptModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptModule").field("source", &self.source).field("tensors", &self.state.len()).finish()
    }
}

unsafe extern "C" fn on_state_tensor(ctx: *mut c_void, name: *const c_char, t: *mut c_void, buffer: c_int) {
    // SAFETY: `ctx` is the Vec handed to the shim below; `t` is a new
    // `at::Tensor*` that `from_ptr` takes over.
    let out = &mut *(ctx as *mut Vec<(String, Tensor, bool)>);
    let name = CStr::from_ptr(name).to_string_lossy().into_owned();
    out.push((name, Tensor::from_ptr(t.cast()), buffer != 0));
}

unsafe extern "C" fn on_method_name(ctx: *mut c_void, name: *const c_char) {
    // SAFETY: `ctx` is the Vec handed to the shim in `method_names`.
    let out = &mut *(ctx as *mut Vec<String>);
    out.push(CStr::from_ptr(name).to_string_lossy().into_owned());
}

unsafe extern "C" fn on_child(ctx: *mut c_void, path: *const c_char, kind: *const c_char) {
    // SAFETY: `ctx` is the Vec handed to the shim in `children`.
    let out = &mut *(ctx as *mut Vec<(String, String)>);
    out.push((
        CStr::from_ptr(path).to_string_lossy().into_owned(),
        CStr::from_ptr(kind).to_string_lossy().into_owned(),
    ));
}

/// The shim's device code: (type, index) with 0 CPU, 1 CUDA, 2 MPS, 3 Vulkan.
pub(crate) fn device_code(device: Device) -> (c_int, c_int) {
    match device {
        Device::Cpu => (0, 0),
        Device::Cuda(i) => (1, i as c_int),
        Device::Mps => (2, 0),
        Device::Vulkan => (3, 0),
    }
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::invalid(format!("method name {name:?} contains a NUL byte")))
}

impl ScriptModule {
    /// Takes ownership of a `torch::jit::Module*` the shim made (a traced
    /// one), named `source` in messages, and reads its tensors.
    ///
    /// # Safety
    /// `raw` is a live module from the shim, owned by no one else.
    pub(crate) unsafe fn from_raw(raw: *mut c_void, source: PathBuf) -> Result<ScriptModule> {
        let mut script = ScriptModule { raw: RawModule(raw), state: Vec::new(), source };
        script.refresh()?;
        Ok(script)
    }

    /// Points each slot, by its dotted name, at the tensor given for it,
    /// then reads the slots again.
    pub(crate) fn set_tensors(&mut self, tensors: &[(String, Tensor)]) -> Result<()> {
        for (name, t) in tensors {
            self.point_slot(name, t)?;
        }
        self.refresh()
    }

    /// Points the script's slot at the dotted `name` to `t`.
    fn point_slot(&self, name: &str, t: &Tensor) -> Result<()> {
        let cname = c_name(name)?;
        // SAFETY: a live module, a NUL-terminated name, a live tensor.
        call("pointing a TorchScript slot at a tensor", |err, len| unsafe {
            shim::fulmen_cxx_script_set_tensor(self.raw.0, cname.as_ptr(), t.as_ptr() as *const c_void, err, len)
        })
    }

    fn refresh(&mut self) -> Result<()> {
        self.state = self.slots()?;
        Ok(())
    }

    /// The tensors in the script's own slots, with their names and "is a
    /// buffer", in state_dict order.
    pub(crate) fn slots(&self) -> Result<Vec<(String, Tensor, bool)>> {
        let mut state: Vec<(String, Tensor, bool)> = Vec::new();
        let ctx = &mut state as *mut _ as *mut c_void;
        // SAFETY: a live module; the callback pushes into `state`.
        call("reading the TorchScript module's tensors", |err, len| unsafe {
            shim::fulmen_cxx_script_state(self.raw.0, on_state_tensor, ctx, err, len)
        })?;
        Ok(state)
    }

    /// Parameters and buffers with a flag "is a buffer", in state_dict order.
    pub(crate) fn state(&self) -> impl Iterator<Item = (&str, &Tensor, bool)> {
        self.state.iter().map(|(n, t, b)| (n.as_str(), t, *b))
    }

    /// The module's children down to `depth` levels: (dotted path, class
    /// name), in tree order.
    pub(crate) fn children(&self, depth: usize) -> Result<Vec<(String, String)>> {
        let mut out: Vec<(String, String)> = Vec::new();
        let ctx = &mut out as *mut _ as *mut c_void;
        let depth = c_int::try_from(depth).unwrap_or(c_int::MAX);
        // SAFETY: a live module; the callback pushes into `out`.
        call("listing the TorchScript module's children", |err, len| unsafe {
            shim::fulmen_cxx_script_children(self.raw.0, depth, on_child, ctx, err, len)
        })?;
        Ok(out)
    }

    /// The names of the module's methods ("forward", "training_step", ...).
    pub(crate) fn method_names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = Vec::new();
        let ctx = &mut names as *mut _ as *mut c_void;
        // SAFETY: a live module; the callback pushes into `names`.
        call("listing the TorchScript module's methods", |err, len| unsafe {
            shim::fulmen_cxx_script_methods(self.raw.0, on_method_name, ctx, err, len)
        })?;
        Ok(names)
    }

    fn check_method(&self, method: &str) -> Result<CString> {
        let name = c_name(method)?;
        let mut found: c_int = 0;
        // SAFETY: a live module and a NUL-terminated name.
        call("looking up a method", |err, len| unsafe {
            shim::fulmen_cxx_script_has_method(self.raw.0, name.as_ptr(), &mut found, err, len)
        })?;
        if found == 0 {
            return Err(Error::invalid(format!(
                "the TorchScript module ({}) has no method {method:?}; it has {:?}",
                self.source.display(),
                self.method_names().unwrap_or_default()
            )));
        }
        Ok(name)
    }

    /// Calls `method` with `args` (positional, after `self`) and returns
    /// its result. Arguments are checked against the method's signature.
    pub(crate) fn call(&self, method: &str, args: &[Value]) -> Result<Value> {
        if args.len() > MAX_METHOD_ARGS {
            return Err(Error::invalid(format!("{} arguments, at most {MAX_METHOD_ARGS}", args.len())));
        }
        let name = self.check_method(method)?;
        let held = args.iter().map(Value::to_cxx).collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*mut c_void> = held.iter().map(|v| v.0).collect();
        let mut out = CxxValue(std::ptr::null_mut());
        // SAFETY: a live module, live argument values, an out pointer.
        call(&format!("TorchScript {method} ({})", self.source.display()), |err, len| unsafe {
            shim::fulmen_cxx_script_call(self.raw.0, name.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut out.0, err, len)
        })?;
        Value::from_cxx(&out)
    }

    /// How many results `method` returns: a tuple's size, else 1.
    pub(crate) fn num_returns(&self, method: &str) -> Result<usize> {
        let name = self.check_method(method)?;
        let mut n = 0usize;
        // SAFETY: a live module, a NUL-terminated name, an out pointer.
        call("reading a method's signature", |err, len| unsafe {
            shim::fulmen_cxx_script_num_returns(self.raw.0, name.as_ptr(), &mut n, err, len)
        })?;
        Ok(n)
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.call("forward", &[Value::Tensor(x.shallow_clone())])?
            .into_tensor("TorchScript forward")
            .map_err(|e| e.context("the module's forward returns more than a tensor: use forward_multi or call_method"))
    }

    /// `forward` on several tensors (`None` for a left-out one); a tuple of
    /// tensors comes back as its elements (a list, whose length the
    /// signature does not tell, is refused: use `call_method`).
    pub(crate) fn forward_multi(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let args: Vec<Value> =
            inputs.iter().map(|x| x.map_or(Value::None, |t| Value::Tensor(t.shallow_clone()))).collect();
        match self.call("forward", &args)? {
            Value::Tuple(items) => {
                items.into_iter().enumerate().map(|(i, v)| v.into_tensor(&format!("forward result {i}"))).collect()
            }
            Value::List(_) => Err(Error::new(
                ErrorCode::Unsupported,
                "the TorchScript forward returns a list, whose length its signature does not tell: use call_method",
            )),
            other => Ok(vec![other.into_tensor("forward result")?]),
        }
    }

    pub(crate) fn set_training(&mut self, on: bool) -> Result<()> {
        // SAFETY: a live module.
        call("setting the TorchScript module's mode", |err, len| unsafe {
            shim::fulmen_cxx_script_set_training(self.raw.0, on as c_int, err, len)
        })
    }

    /// A replica (DataParallel's `replicate`): a clone of the script whose
    /// parameters and buffers are `map` of this module's, so gradients of
    /// the replica's parameters flow back here.
    pub(crate) fn replicate(&self, map: &mut crate::nn::layers::TensorMap<'_>) -> Result<ScriptModule> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live module and an out pointer.
        call("cloning the TorchScript module", |err, len| unsafe {
            shim::fulmen_cxx_script_clone(self.raw.0, &mut raw, err, len)
        })?;
        let mut replica = ScriptModule { raw: RawModule(raw), state: Vec::new(), source: self.source.clone() };
        let mapped = self
            .state
            .iter()
            .map(|(name, t, _)| Ok((name.clone(), map(t)?)))
            .collect::<Result<Vec<(String, Tensor)>>>()?;
        replica.set_tensors(&mapped)?;
        Ok(replica)
    }

    /// Sets the script's own slots to the tensors its state handles hold
    /// (after a move gave those handles new tensors, which libtorch's
    /// `set_data` could not do in place).
    pub(crate) fn write_state_back(&self) -> Result<()> {
        self.state.iter().try_for_each(|(name, t, _)| self.point_slot(name, t))
    }

    /// The module serialised as `torch.jit.save` writes it.
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut bytes: *mut c_char = std::ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: a live module; the shim hands back a buffer freed below.
        call("serialising the TorchScript module", |err, len| unsafe {
            shim::fulmen_cxx_script_save(self.raw.0, &mut bytes, &mut n, err, len)
        })?;
        // SAFETY: `bytes` holds `n` bytes until freed.
        let out = unsafe { std::slice::from_raw_parts(bytes as *const u8, n) }.to_vec();
        unsafe { shim::fulmen_cxx_bytes_free(bytes) };
        Ok(out)
    }
}

impl Module {
    /// Loads a TorchScript file saved from Python (`torch.jit.save`) with
    /// its tensors on `device`. Parameters and buffers keep PyTorch's
    /// dotted names ("l1.weight", "bn.running_mean") and state_dict order;
    /// `forward` runs the script's forward, `call_method` any method;
    /// `set_training` toggles its train/eval mode. It starts in training mode.
    pub fn load_torchscript(path: &Path, device: Device) -> Result<Module> {
        use std::os::fd::AsRawFd;
        crate::tensor::device::Device::from_tch(device).check_available()?;
        // libtorch reads the file opened here, through its descriptor, never
        // past the size it had when opened: not a path it would open again.
        let file = crate::fs_safe::open_regular(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::io(format!("TorchScript file {} not found", path.display())),
            _ => Error::io(format!("reading {}: {e}", path.display())),
        })?;
        let (dtype, index) = device_code(device);
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: a descriptor `file` keeps open for the call, the size the
        // shim reads at most, and an out pointer.
        call("loading TorchScript", |err, len| unsafe {
            shim::fulmen_cxx_script_load(file.file().as_raw_fd(), file.size(), dtype, index, &mut raw, err, len)
        })
        .map_err(|e| Error::format(format!("{} is not a loadable TorchScript file: {}", path.display(), e.message)))?;
        let raw = RawModule(raw);
        let now = file.file().metadata().map_err(|e| Error::io(format!("reading {}: {e}", path.display())))?;
        if now.len() != file.size() {
            return Err(Error::io(format!(
                "reading {}: the file changed size while it was read ({} bytes when opened, {} now)",
                path.display(),
                file.size(),
                now.len()
            )));
        }
        let mut script = ScriptModule { raw, state: Vec::new(), source: path.to_path_buf() };
        script.refresh()?;
        script.set_training(true)?;
        Ok(Module::from_script(script))
    }

    /// Calls the TorchScript method `method` of this module with positional
    /// `args`: `forward`, `training_step` or any other scripted method.
    pub fn call_method(&self, method: &str, args: &[Value]) -> Result<Value> {
        if let Some(result) = self.call_compiled(method, args) {
            return result;
        }
        if let super::module::Node::Exported(e) = &self.node {
            return e.call(method, args);
        }
        self.script()?.call(method, args)
    }

    /// The names of a TorchScript module's methods, or an exported
    /// model's programs.
    pub fn method_names(&self) -> Result<Vec<String>> {
        if let super::module::Node::Exported(e) = &self.node {
            return Ok(e.method_names());
        }
        self.script()?.method_names()
    }

    /// Saves a TorchScript module, with its current parameters, buffers and
    /// mode, as a `.pt` file that `torch.jit.load` reads. Written to a
    /// temporary file and renamed, so a crash never leaves a partial file.
    pub fn save_torchscript(&self, path: &Path) -> Result<()> {
        let bytes = self.script()?.to_bytes()?;
        crate::fs_safe::write_atomic(path, &bytes).ctx(format!("saving TorchScript to {}", path.display()))
    }

    /// A TorchScript module's children down to `depth` levels as (dotted
    /// path, class name, parameters); `None` for a module of fulmen's own.
    pub(crate) fn script_children(&self, depth: usize) -> Result<Option<Vec<(String, String, i64)>>> {
        let super::module::Node::Script(s) = &self.node else { return Ok(None) };
        let rows = s
            .children(depth)?
            .into_iter()
            .map(|(path, kind)| {
                let prefix = format!("{path}.");
                let params = s
                    .state()
                    .filter(|(n, _, buffer)| !buffer && n.starts_with(&prefix))
                    .map(|(_, t, _)| t.numel() as i64)
                    .sum::<i64>();
                (path, kind, params)
            })
            .collect();
        Ok(Some(rows))
    }

    pub(crate) fn script(&self) -> Result<&ScriptModule> {
        match &self.node {
            super::module::Node::Script(s) => Ok(s),
            _ => Err(Error::new(
                ErrorCode::Unsupported,
                format!("a {} is not a TorchScript module: only those have methods to call or save", self.type_name()),
            )),
        }
    }
}

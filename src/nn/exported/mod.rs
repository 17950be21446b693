//! Programs exported with `torch.export` (`.pt2` archives) as models: one
//! shared state (parameters, buffers) by PyTorch's names, and programs
//! ("forward", "training_step", ...) interpreted over ATen operators with
//! autograd, called like TorchScript methods.
mod archive;
mod graph;
mod json;
mod program;
mod pytree;
mod units;

use super::module::Module;
use super::Value;
use crate::error::{Error, ErrorCode, Result};
use graph::{InputRole, OutputRole};
use program::Program;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::{Device, Tensor};
pub(crate) use units::{parent as exported_parent, InnerUnit, ModuleTree};
use units::{parent, UnitEvents};

/// A loaded `.pt2`: its programs and the state they share.
pub(crate) struct ExportedModule {
    programs: Arc<Vec<Program>>,
    /// (name, tensor, is a buffer), in PyTorch's state_dict order.
    state: Vec<(String, Tensor, bool)>,
    /// Where each name is in `state`.
    index: HashMap<String, usize>,
    /// Lifted constants and non-persistent buffers, by name.
    constants: HashMap<String, Tensor>,
    source: PathBuf,
    /// Sharding units whose modules are inside the programs (FSDP), and
    /// when each program's runs call their hooks (one per program).
    inner: Vec<InnerUnit>,
    inner_events: Vec<UnitEvents>,
    /// Where the inner units compute: the programs run there (the state's
    /// first tensor may be a shard in host memory).
    compute_device: Option<crate::tensor::device::Device>,
}

impl std::fmt::Debug for ExportedModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportedModule").field("source", &self.source).field("tensors", &self.state.len()).finish()
    }
}

/// One module's (parameters, buffers) by name.
type ModuleTensors = (Vec<(String, Tensor)>, Vec<(String, Tensor)>);

/// PyTorch's state_dict order: module by module (in tree order), its
/// parameters, then its buffers; names of modules the call graph does not
/// list come last, in their own order.
fn state_dict_order(
    params: Vec<(String, Tensor)>,
    buffers: Vec<(String, Tensor)>,
    modules: &[String],
) -> Vec<(String, Tensor, bool)> {
    let mut by_module: HashMap<String, ModuleTensors> = HashMap::new();
    let mut order: Vec<String> = modules.to_vec();
    for (list, is_buffer) in [(params, false), (buffers, true)] {
        for (n, t) in list {
            let m = parent(&n).to_owned();
            let entry = by_module.entry(m.clone()).or_insert_with(|| {
                order.push(m.clone());
                (Vec::new(), Vec::new())
            });
            if is_buffer {
                entry.1.push((n, t));
            } else {
                entry.0.push((n, t));
            }
        }
    }
    let mut out = Vec::new();
    for m in order {
        if let Some((p, b)) = by_module.remove(&m) {
            out.extend(p.into_iter().map(|(n, t)| (n, t, false)));
            out.extend(b.into_iter().map(|(n, t)| (n, t, true)));
        }
    }
    out
}

fn module_paths(doc: &json::Json) -> Vec<String> {
    doc.get("graph_module")
        .and_then(|m| m.get("module_call_graph"))
        .and_then(|c| c.as_array())
        .map(|calls| calls.iter().filter_map(|c| c.get("fqn")?.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

impl ExportedModule {
    /// Reads and compiles every program of the archive in `bytes`.
    fn read(bytes: &[u8], source: &Path) -> Result<ExportedModule> {
        let what = source.display().to_string();
        let files = archive::read(bytes, &what)?;
        let mut params: Vec<(String, Tensor)> = Vec::new();
        let mut buffers: Vec<(String, Tensor)> = Vec::new();
        let mut constants: HashMap<String, Tensor> = HashMap::new();
        let mut modules: Vec<String> = Vec::new();
        let mut seen_modules: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut seen_params: HashMap<String, usize> = HashMap::new();
        let mut seen_buffers: HashMap<String, usize> = HashMap::new();
        let mut programs = Vec::new();
        for f in &files {
            let graph = archive::graph_of(f)?;
            for m in module_paths(&f.doc) {
                if seen_modules.insert(m.clone()) {
                    modules.push(m);
                }
            }
            let stored: HashMap<&str, &Tensor> = f.weights.iter().map(|(n, t, _)| (n.as_str(), t)).collect();
            for (_, role) in &graph.inputs {
                let (name, list, seen) = match role {
                    InputRole::Parameter(n) => (n, &mut params, &mut seen_params),
                    InputRole::Buffer(n) if stored.contains_key(n.as_str()) => (n, &mut buffers, &mut seen_buffers),
                    _ => continue,
                };
                let t = stored.get(name.as_str()).ok_or_else(|| {
                    Error::format(format!("{what}: program {} reads {name}, which the archive does not store", f.name))
                })?;
                match seen.get(name).map(|k| &list[*k]) {
                    Some((_, have)) if have.size() != t.size() || have.kind() != t.kind() => {
                        return Err(Error::format(format!(
                            "{what}: programs disagree on {name}: {:?} {:?} and {:?} {:?}",
                            have.size(),
                            have.kind(),
                            t.size(),
                            t.kind()
                        )))
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(name.clone(), list.len());
                        list.push((name.clone(), t.shallow_clone()));
                    }
                }
            }
            for (n, t) in &f.constants {
                constants.entry(n.clone()).or_insert_with(|| t.shallow_clone());
            }
            programs.push(Program::compile(&f.name, graph)?);
        }
        let state = state_dict_order(params, buffers, &modules);
        let index = state.iter().enumerate().map(|(k, (n, _, _))| (n.clone(), k)).collect();
        Ok(ExportedModule {
            programs: Arc::new(programs),
            state,
            index,
            constants,
            source: source.to_path_buf(),
            inner: Vec::new(),
            inner_events: Vec::new(),
            compute_device: None,
        })
    }

    /// The modules the programs ran in and those holding parameters.
    pub(crate) fn module_tree(&self) -> ModuleTree {
        let classes: Vec<(String, String)> =
            self.programs.iter().flat_map(|p| p.layout.classes.iter().cloned()).collect();
        ModuleTree::new(&classes, self.state.iter().filter(|(_, _, b)| !b).map(|(n, _, _)| n.as_str()))
    }

    /// Makes `units` the sharding units inside the programs, computing on
    /// `device` (none: runs call no hook, on the state's device).
    pub(crate) fn set_inner_units(&mut self, units: Vec<InnerUnit>, device: Option<crate::tensor::device::Device>) {
        self.inner_events = match units.is_empty() {
            true => Vec::new(),
            false => self.programs.iter().map(|p| UnitEvents::plan(p, &units)).collect(),
        };
        self.compute_device = device.filter(|_| !units.is_empty());
        self.inner = units;
    }

    /// Parameters and buffers with a flag "is a buffer", in state_dict order.
    pub(crate) fn state(&self) -> impl Iterator<Item = (&str, &Tensor, bool)> {
        self.state.iter().map(|(n, t, b)| (n.as_str(), t, *b))
    }

    /// The names of the programs.
    pub(crate) fn method_names(&self) -> Vec<String> {
        self.programs.iter().map(|p| p.name.clone()).collect()
    }

    fn program(&self, name: &str) -> Result<&Program> {
        Ok(&self.programs[self.program_index(name)?])
    }

    /// The index of the program `name` in `programs`.
    fn program_index(&self, name: &str) -> Result<usize> {
        self.programs.iter().position(|p| p.name == name).ok_or_else(|| {
            Error::invalid(format!(
                "the exported model ({}) has no program {name:?}; it has {:?}",
                self.source.display(),
                self.method_names()
            ))
        })
    }

    fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.index.get(name).map(|k| &self.state[*k].1)
    }

    /// The device the programs run on: the inner units' compute device
    /// when units sit inside, else the one the model's tensors are on (the
    /// CPU when it has none), asked of libtorch: tch reads the devices it
    /// does not name as MPS.
    fn device(&self) -> Result<crate::tensor::device::Device> {
        if let Some(d) = self.compute_device {
            return Ok(d);
        }
        match self.state.first() {
            Some((_, t, _)) => crate::tensor::device::Device::of(t),
            None => Ok(crate::tensor::device::Device::Cpu),
        }
    }

    /// Runs the program `method` on positional `args`: mutated buffers are
    /// written back, the user outputs come back nested as exported.
    pub(crate) fn call(&self, method: &str, args: &[Value]) -> Result<Value> {
        if args.len() > super::MAX_METHOD_ARGS {
            return Err(Error::invalid(format!("{} arguments, at most {}", args.len(), super::MAX_METHOD_ARGS)));
        }
        let k = self.program_index(method)?;
        let (p, events) = (&self.programs[k], self.inner_events.get(k));
        let _root = super::flop_counter::ModuleScope::root(|| Some(p.root_class.clone()));
        let user = p.user_inputs(args)?;
        let device = self.device()?;
        let mut inputs = Vec::with_capacity(p.inputs.len());
        let mut user_order = Vec::new();
        for role in &p.inputs {
            let t = match role {
                InputRole::Parameter(n) => self.tensor(n).map(Tensor::shallow_clone),
                // Buffers go in as aliases with their own version counter:
                // new values are copied in after the call while autograd
                // may still hold the old ones.
                InputRole::Buffer(n) => match self.tensor(n) {
                    Some(t) => Some(alias(t)?),
                    None => self.constant(n, device)?,
                },
                InputRole::Constant(n) => self.constant(n, device)?,
                InputRole::User(Some(n)) => {
                    user_order.push(n.clone());
                    user.get(n).map(Tensor::shallow_clone)
                }
                InputRole::User(None) => None,
            };
            inputs.push(t.ok_or_else(|| {
                Error::format(format!("{}: the program reads {role:?}, which the archive does not hold", p.name))
            })?);
        }
        let code = device.tch().map(super::torchscript::device_code).ok_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                format!("exported programs run on the CPU, CUDA or MPS, not on {}", device.name()),
            )
        })?;
        let outputs = match events {
            Some(events) => events.run(p, &inputs, code, &self.inner)?,
            None => p.run(&inputs, code, None)?,
        };
        let mut results = Vec::new();
        for (v, role) in outputs {
            match role {
                OutputRole::User | OutputRole::Loss => results.push(v),
                OutputRole::BufferMutation(n) => {
                    let new = v.into_tensor(&format!("the new value of buffer {n}"))?;
                    let target = self.tensor(&n).or_else(|| self.constants.get(&n));
                    let mut target = target
                        .ok_or_else(|| Error::format(format!("{}: mutates an unknown buffer {n}", p.name)))?
                        .shallow_clone();
                    tch::no_grad(|| target.f_copy_(&new))
                        .map_err(|e| Error::new(ErrorCode::Torch, format!("writing buffer {n}: {e}")))?;
                }
                OutputRole::UserInputMutation(n) => {
                    let new = v.into_tensor(&format!("the new value of input {n}"))?;
                    let mut target = user
                        .get(&n)
                        .ok_or_else(|| Error::format(format!("{}: mutates an unknown input {n}", p.name)))?
                        .shallow_clone();
                    tch::no_grad(|| target.f_copy_(&new))
                        .map_err(|e| Error::new(ErrorCode::Torch, format!("writing input {n}: {e}")))?;
                }
            }
        }
        p.nest(results)
    }

    fn constant(&self, name: &str, device: crate::tensor::device::Device) -> Result<Option<Tensor>> {
        let Some(t) = self.constants.get(name) else { return Ok(None) };
        if crate::tensor::device::Device::of(t)? == device {
            return Ok(Some(t.shallow_clone()));
        }
        crate::tensor::device::to_device(t, device, false)
            .map(Some)
            .map_err(|e| Error::new(e.code, format!("moving {name}: {}", e.message)))
    }

    /// How many values `method` returns at its top level.
    pub(crate) fn num_returns(&self, method: &str) -> Result<usize> {
        Ok(self.program(method)?.num_returns())
    }

    /// A replica whose tensors are `map` of this module's (DataParallel).
    pub(crate) fn replicate(&self, map: &mut crate::nn::layers::TensorMap<'_>) -> Result<ExportedModule> {
        let state = self.state.iter().map(|(n, t, b)| Ok((n.clone(), map(t)?, *b))).collect::<Result<Vec<_>>>()?;
        Ok(ExportedModule {
            programs: self.programs.clone(),
            state,
            index: self.index.clone(),
            constants: self.constants.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect(),
            source: self.source.clone(),
            inner: Vec::new(),
            inner_events: Vec::new(),
            compute_device: None,
        })
    }
}

/// `t.variable_data()`: the same storage, its own version counter, no history.
fn alias(t: &Tensor) -> Result<Tensor> {
    // SAFETY: a live tensor; the shim returns a new `at::Tensor*` or NULL.
    let raw = unsafe { crate::shim::fulmen_cxx_ep_alias(t.as_ptr() as *const libc::c_void) };
    if raw.is_null() {
        return Err(Error::new(ErrorCode::OutOfMemory, "aliasing a buffer"));
    }
    // SAFETY: a new `at::Tensor*` whose ownership passes to the Tensor.
    Ok(unsafe { Tensor::from_ptr(raw.cast()) })
}

impl Module {
    /// Loads a `.pt2` archive written by `torch.export.save` (one program,
    /// called "forward") or by `package_pt2` with named programs
    /// ("training_step", "validation_step", "forward", ...), with its
    /// tensors on `device`. The programs share one state by name, in
    /// PyTorch's state_dict order; tied weights are one tensor. Every
    /// operator is resolved at load: one this process lacks is refused
    /// with its name.
    pub fn load_exported(path: &Path, device: Device) -> Result<Module> {
        crate::tensor::device::Device::from_tch(device).check_available()?;
        let bytes = crate::fs_safe::read_regular(path)?;
        let exported = ExportedModule::read(&bytes, path)?;
        let mut m = Module::from_exported(exported);
        if device != Device::Cpu {
            m.to_device(crate::tensor::device::Device::from_tch(device))?;
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests;

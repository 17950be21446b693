//! The accelerator registry (Lightning's `AcceleratorRegistry`): names,
//! descriptions and implementations, with the built-ins pre-registered, the
//! aliases `gpu` and `tpu`, and `auto`.
use super::accelerator::Accelerator;
use super::cpu::CpuAccelerator;
use super::cuda::CudaAccelerator;
use super::mps::MpsAccelerator;
use super::xla::XlaAccelerator;
use crate::error::{Error, ErrorCode, Result};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Names resolved by [`Registry::get`] rather than registered.
pub const ALIASES: [&str; 3] = ["auto", "gpu", "tpu"];

/// The order in which `auto` tries accelerators before falling back to `cpu`.
pub const AUTO_ORDER: [&str; 3] = ["xla", "mps", "cuda"];

/// One registered accelerator, as [`Registry::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceleratorInfo {
    /// The registry name.
    pub name: String,
    /// A one-line description.
    pub description: String,
    /// Whether it can be used on this machine.
    pub available: bool,
}

/// A registered accelerator.
#[derive(Clone)]
struct Entry {
    name: String,
    description: String,
    accelerator: Arc<dyn Accelerator>,
}

/// A set of named accelerators. The process-wide one is [`global`]; the
/// free functions of this module act on it.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Vec<Entry>,
    /// Accelerators replaced or removed, to be dropped by the caller once
    /// the global registry's lock is released.
    retired: Vec<Arc<dyn Accelerator>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| (&e.name, &e.description))).finish()
    }
}

/// Lower-cases and trims a name; rejects empty names and odd characters.
fn normalize(name: &str) -> Result<String> {
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return Err(Error::invalid("accelerator name is empty"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        return Err(Error::invalid(format!(
            "accelerator name {name:?} may only hold letters, digits, '_', '-' and '.'"
        )));
    }
    Ok(name)
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding `cpu`, `cuda`, `mps` and `xla`.
    pub fn with_builtins() -> Self {
        let builtins: [(&str, &str, Arc<dyn Accelerator>); 4] = [
            ("cpu", "The host CPU; devices are a number of processes", Arc::new(CpuAccelerator::new())),
            ("cuda", "NVIDIA GPUs through libtorch's CUDA backend", Arc::new(CudaAccelerator::new())),
            ("mps", "Apple silicon GPUs through Metal Performance Shaders", Arc::new(MpsAccelerator::new())),
            ("xla", "TPUs and other PJRT devices through an XLA backend (alias tpu)", Arc::new(XlaAccelerator::new())),
        ];
        let entries = builtins
            .into_iter()
            .map(|(name, description, accelerator)| Entry {
                name: name.to_string(),
                description: description.to_string(),
                accelerator,
            })
            .collect();
        Registry { entries, retired: Vec::new() }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.name == name)
    }

    /// Adds `accelerator` under `name` (trimmed, lower-cased). A name that
    /// is already registered is refused unless `override_existing`, which
    /// replaces it. The aliases `auto`, `gpu` and `tpu` cannot be registered.
    pub fn register(
        &mut self,
        name: &str,
        description: &str,
        accelerator: Arc<dyn Accelerator>,
        override_existing: bool,
    ) -> Result<()> {
        let name = normalize(name)?;
        if ALIASES.contains(&name.as_str()) {
            return Err(Error::invalid(format!(
                "accelerator name {name:?} is reserved: auto, gpu and tpu are resolved by the registry"
            )));
        }
        let entry = Entry { name: name.clone(), description: description.to_string(), accelerator };
        match self.position(&name) {
            Some(_) if !override_existing => Err(Error::invalid(format!(
                "accelerator {name:?} is already present in the registry; register it with override to replace it"
            ))),
            Some(i) => {
                let old = std::mem::replace(&mut self.entries[i], entry);
                self.retired.push(old.accelerator);
                Ok(())
            }
            None => {
                self.entries.push(entry);
                Ok(())
            }
        }
    }

    /// Removes a registered accelerator.
    pub fn remove(&mut self, name: &str) -> Result<()> {
        let name = normalize(name)?;
        let i = self.position(&name).ok_or_else(|| self.unknown(&name))?;
        let old = self.entries.remove(i);
        self.retired.push(old.accelerator);
        Ok(())
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    /// Every registered accelerator with its description and availability.
    pub fn list(&self) -> Vec<AcceleratorInfo> {
        self.entries
            .iter()
            .map(|e| AcceleratorInfo {
                name: e.name.clone(),
                description: e.description.clone(),
                available: e.accelerator.is_available(),
            })
            .collect()
    }

    fn unknown(&self, name: &str) -> Error {
        Error::invalid(format!(
            "unknown accelerator {name:?}; known accelerators: {}, and the aliases {}",
            self.names().join(", "),
            ALIASES.join(", ")
        ))
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    fn available(&self, name: &str) -> Option<&Entry> {
        self.entry(name).filter(|e| e.accelerator.is_available())
    }

    /// The registered name `name` stands for: itself, or what an alias
    /// resolves to on this machine. `auto` picks the first available of
    /// xla, mps, cuda, else cpu; `gpu` picks mps if available, else cuda if
    /// available, else fails (as Lightning's "No supported gpu backend
    /// found"); `tpu` is `xla`. Unknown names fail listing the known ones.
    pub fn resolve(&self, name: &str) -> Result<String> {
        let name = normalize(name)?;
        match name.as_str() {
            "auto" => AUTO_ORDER
                .iter()
                .find_map(|n| self.available(n))
                .or_else(|| self.entry("cpu"))
                .map(|e| e.name.clone())
                .ok_or_else(|| {
                    Error::state("accelerator \"auto\": no accelerator is available and \"cpu\" was removed")
                }),
            "gpu" => ["mps", "cuda"].iter().find_map(|n| self.available(n)).map(|e| e.name.clone()).ok_or_else(|| {
                Error::new(
                    ErrorCode::Unavailable,
                    format!(
                        "accelerator \"gpu\": no supported GPU backend found (neither mps nor cuda is available); \
                         available accelerators: {}",
                        self.available_names().join(", ")
                    ),
                )
            }),
            "tpu" => self.entry("xla").map(|e| e.name.clone()).ok_or_else(|| self.unknown("tpu")),
            _ => self.entry(&name).map(|e| e.name.clone()).ok_or_else(|| self.unknown(&name)),
        }
    }

    /// The accelerator registered under `name` (or what an alias resolves
    /// to, see [`Registry::resolve`]), available here or not.
    pub fn get(&self, name: &str) -> Result<Arc<dyn Accelerator>> {
        let resolved = self.resolve(name)?;
        self.entry(&resolved).map(|e| Arc::clone(&e.accelerator)).ok_or_else(|| self.unknown(&resolved))
    }

    /// Like [`Registry::get`], but fails when the accelerator is not
    /// available on this machine, naming those that are.
    pub fn get_available(&self, name: &str) -> Result<Arc<dyn Accelerator>> {
        let accelerator = self.get(name)?;
        if accelerator.is_available() {
            return Ok(accelerator);
        }
        Err(Error::new(
            ErrorCode::Unavailable,
            format!(
                "accelerator {:?} is not available on this machine; available accelerators: {}",
                name.trim(),
                self.available_names().join(", ")
            ),
        ))
    }

    /// The names of the registered accelerators available here.
    pub fn available_names(&self) -> Vec<String> {
        self.entries.iter().filter(|e| e.accelerator.is_available()).map(|e| e.name.clone()).collect()
    }
}

/// The process-wide registry, created with the built-ins on first use.
pub fn global() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Registry::with_builtins()))
}

fn lock() -> MutexGuard<'static, Registry> {
    global().lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A copy of the global registry, so availability checks (which may call
/// into host code for custom accelerators) run without holding its lock.
fn snapshot() -> Registry {
    lock().clone()
}

/// [`Registry::register`] on the global registry.
pub fn register(
    name: &str,
    description: &str,
    accelerator: Arc<dyn Accelerator>,
    override_existing: bool,
) -> Result<()> {
    change(|r| r.register(name, description, accelerator, override_existing))
}

/// [`Registry::remove`] on the global registry.
pub fn remove(name: &str) -> Result<()> {
    change(|r| r.remove(name))
}

/// Applies `f` to the global registry, then drops the accelerators it
/// retired without the lock: a host's userdata_free may use the registry.
fn change(f: impl FnOnce(&mut Registry) -> Result<()>) -> Result<()> {
    let (result, retired) = {
        let mut r = lock();
        let result = f(&mut r);
        (result, std::mem::take(&mut r.retired))
    };
    drop(retired);
    result
}

/// [`Registry::list`] on the global registry.
pub fn list() -> Vec<AcceleratorInfo> {
    snapshot().list()
}

/// [`Registry::get`] on the global registry.
pub fn get(name: &str) -> Result<Arc<dyn Accelerator>> {
    snapshot().get(name)
}

/// [`Registry::get_available`] on the global registry.
pub fn get_available(name: &str) -> Result<Arc<dyn Accelerator>> {
    snapshot().get_available(name)
}

/// [`Registry::resolve`] on the global registry.
pub fn resolve(name: &str) -> Result<String> {
    snapshot().resolve(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accelerators::devices::{DevicesSpec, ParsedDevices};
    use crate::tensor::device::Device;

    /// A custom accelerator, as a vendor would register.
    struct Fake {
        name: &'static str,
        available: bool,
    }

    impl Accelerator for Fake {
        fn name(&self) -> &str {
            self.name
        }
        fn is_available(&self) -> bool {
            self.available
        }
        fn auto_device_count(&self) -> usize {
            2
        }
        fn parse_devices(&self, devices: &DevicesSpec) -> Result<ParsedDevices> {
            crate::accelerators::devices::parse_indexed_devices(self.name, devices, 2)
        }
        fn get_parallel_devices(&self, parsed: &ParsedDevices) -> Result<Vec<Device>> {
            Ok(vec![Device::Cpu; parsed.len()])
        }
        fn setup_device(&self, _device: Device) -> Result<()> {
            Ok(())
        }
        fn teardown(&self) -> Result<()> {
            Ok(())
        }
        fn get_device_stats(&self, _device: Device) -> Result<Vec<(String, f64)>> {
            Ok(vec![("fake".to_string(), 1.0)])
        }
    }

    fn fake(name: &'static str, available: bool) -> Arc<dyn Accelerator> {
        Arc::new(Fake { name, available })
    }

    #[test]
    fn builtins_are_listed_and_auto_is_cpu_here() {
        let names: Vec<String> = list().into_iter().map(|i| i.name).collect();
        for n in ["cpu", "cuda", "mps", "xla"] {
            assert!(names.iter().any(|x| x == n), "{names:?}");
        }
        let infos = Registry::with_builtins().list();
        assert_eq!(
            infos[0],
            AcceleratorInfo { name: "cpu".into(), description: infos[0].description.clone(), available: true }
        );
        assert!(infos.iter().all(|i| !i.description.is_empty()));
        assert!(infos.iter().filter(|i| i.name != "cpu").all(|i| !i.available));
        assert_eq!(get("auto").unwrap().name(), "cpu");
        assert_eq!(resolve(" Auto ").unwrap(), "cpu");
        assert_eq!(get("CPU").unwrap().name(), "cpu");
        assert_eq!(get("tpu").unwrap().name(), "xla");
        assert_eq!(get("cuda").unwrap().name(), "cuda");
        assert!(get_available("cpu").is_ok());
    }

    #[test]
    fn unavailable_and_unknown_names_error_clearly() {
        let err = get("gpu").unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("no supported GPU backend found"), "{}", err.message);
        assert!(err.message.contains("available accelerators: cpu"), "{}", err.message);
        let err = get_available("cuda").unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(err.message.contains("\"cuda\" is not available on this machine; available accelerators: cpu"));
        let err = get("npu-that-does-not-exist").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
        assert!(err.message.contains("known accelerators: cpu, cuda, mps, xla"), "{}", err.message);
        assert!(err.message.contains("aliases auto, gpu, tpu"), "{}", err.message);
        assert!(get("").is_err());
        assert!(get("a b").unwrap_err().message.contains("may only hold"));
    }

    #[test]
    fn duplicates_need_override() {
        register("test-vendor-npu", "a test accelerator", fake("test-vendor-npu", true), false).unwrap();
        let err = register("Test-Vendor-NPU", "again", fake("test-vendor-npu", true), false).unwrap_err();
        assert!(err.message.contains("already present in the registry"), "{}", err.message);
        register("test-vendor-npu", "replaced", fake("test-vendor-npu", false), true).unwrap();
        let info = list().into_iter().find(|i| i.name == "test-vendor-npu").unwrap();
        assert_eq!((info.description.as_str(), info.available), ("replaced", false));
        let npu = get("test-vendor-npu").unwrap();
        assert_eq!(npu.parse_devices(&DevicesSpec::parse("1,").unwrap()).unwrap(), ParsedDevices::Indices(vec![1]));
        remove("test-vendor-npu").unwrap();
        assert!(get("test-vendor-npu").is_err());
        assert!(remove("test-vendor-npu").is_err());
        for alias in ALIASES {
            assert!(register(alias, "x", fake("x", true), true).unwrap_err().message.contains("reserved"));
        }
        let mut local = Registry::with_builtins();
        assert!(local.register("cpu", "dup", fake("cpu", true), false).is_err());
    }

    #[test]
    fn aliases_follow_availability() {
        let mut r = Registry::with_builtins();
        r.register("cuda", "fake cuda", fake("cuda", true), true).unwrap();
        assert_eq!(r.resolve("gpu").unwrap(), "cuda");
        assert_eq!(r.resolve("auto").unwrap(), "cuda");
        r.register("mps", "fake mps", fake("mps", true), true).unwrap();
        assert_eq!(r.resolve("gpu").unwrap(), "mps");
        assert_eq!(r.resolve("auto").unwrap(), "mps");
        r.register("xla", "fake xla", fake("xla", true), true).unwrap();
        assert_eq!(r.resolve("auto").unwrap(), "xla");
        assert_eq!(r.resolve("tpu").unwrap(), "xla");
        assert_eq!(r.get("auto").unwrap().get_device_stats(Device::Cpu).unwrap()[0].0, "fake");
        let mut empty = Registry::new();
        assert!(empty.resolve("auto").is_err());
        empty.register("cpu", "cpu", fake("cpu", true), false).unwrap();
        assert_eq!(empty.resolve("auto").unwrap(), "cpu");
        assert!(format!("{empty:?}").contains("cpu"));
    }
}

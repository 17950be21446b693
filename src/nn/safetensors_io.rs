//! Reading and writing named tensors as safetensors files, atomically
//! (write `<path>.tmp`, fsync, rename).
use super::module::Module;
use super::state_dict::LoadReport;
use crate::error::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

fn dtype_of(kind: Kind) -> Option<Dtype> {
    Some(match kind {
        Kind::Bool => Dtype::BOOL,
        Kind::Uint8 => Dtype::U8,
        Kind::Int8 => Dtype::I8,
        Kind::Int16 => Dtype::I16,
        Kind::Int => Dtype::I32,
        Kind::Int64 => Dtype::I64,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Float => Dtype::F32,
        Kind::Double => Dtype::F64,
        _ => return None,
    })
}

fn kind_of(dtype: Dtype) -> Option<Kind> {
    Some(match dtype {
        Dtype::BOOL => Kind::Bool,
        Dtype::U8 => Kind::Uint8,
        Dtype::I8 => Kind::Int8,
        Dtype::I16 => Kind::Int16,
        Dtype::I32 => Kind::Int,
        Dtype::I64 => Kind::Int64,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
        Dtype::F32 => Kind::Float,
        Dtype::F64 => Kind::Double,
        _ => return None,
    })
}

/// A tensor's bytes, copied to the host, ready for serialisation.
struct HostView {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &HostView {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn host_view(name: &str, t: &Tensor) -> Result<HostView> {
    let kind = t.f_kind()?;
    let dtype = dtype_of(kind)
        .ok_or_else(|| Error::dtype(format!("safetensors: tensor {name} has unsupported dtype {kind:?}")))?;
    let host = tch::no_grad(|| t.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous())?;
    let numel = host.numel();
    let mut data = vec![0u8; numel * kind.elt_size_in_bytes()];
    host.f_copy_data_u8(&mut data, numel)?;
    let shape = host.size().iter().map(|&d| d as usize).collect();
    Ok(HostView { dtype, shape, data })
}

/// `<path>.tmp`, next to `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Writes `bytes` to `path` atomically: `<path>.tmp`, fsync, rename, and a
/// best-effort fsync of the folder.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(format!("writing {}: {e}", path.display())));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Writes named tensors (any device; copied to the host) as a safetensors
/// file with optional string metadata, atomically. Names must be unique.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let mut seen = HashSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if !seen.insert(name.as_str()) {
            return Err(Error::invalid(format!(
                "write_safetensors {}: duplicate tensor name {name:?}",
                path.display()
            )));
        }
        views.push((name.as_str(), host_view(name, t)?));
    }
    let bytes = safetensors::tensor::serialize(views.iter().map(|(n, v)| (*n, v)), &metadata)
        .map_err(|e| Error::format(format!("serialising {}: {e:?}", path.display())))?;
    write_atomic(path, &bytes)
}

/// Reads a safetensors file: the tensors (CPU, in file order) and the
/// metadata. A truncated or corrupt file is a `Format` error naming it.
#[allow(clippy::type_complexity)]
pub fn read_safetensors(path: &Path) -> Result<(Vec<(String, Tensor)>, HashMap<String, String>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(format!("reading {}: {e}", path.display())))?;
    let corrupt = |what: String| {
        Error::format(format!("{} is not a valid safetensors file (truncated or corrupt?): {what}", path.display()))
    };
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(format!("{e:?}")))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| corrupt(format!("{e:?}")))?;
    let mut infos: Vec<(String, (usize, usize))> =
        meta.tensors().into_iter().map(|(n, i)| (n, i.data_offsets)).collect();
    infos.sort_by_key(|(n, off)| (*off, n.clone()));
    let mut out = Vec::with_capacity(infos.len());
    for (name, _) in infos {
        let view = st.tensor(&name).map_err(|e| corrupt(format!("{e:?}")))?;
        let kind = kind_of(view.dtype()).ok_or_else(|| {
            Error::dtype(format!("{}: tensor {name} has unsupported dtype {:?}", path.display(), view.dtype()))
        })?;
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let t = Tensor::f_from_data_size(view.data(), &shape, kind)?;
        out.push((name, t));
    }
    let metadata = meta.metadata().clone().unwrap_or_default();
    Ok((out, metadata))
}

impl Module {
    /// Saves the `state_dict` as safetensors (atomic write).
    pub fn save_safetensors(&self, path: &Path, metadata: Option<HashMap<String, String>>) -> Result<()> {
        write_safetensors(path, &self.state_dict(), metadata)
    }

    /// Loads a safetensors file into the module (see `load_state_dict`); on
    /// any error the module is unchanged.
    pub fn load_safetensors(&mut self, path: &Path, strict: bool) -> Result<LoadReport> {
        let (tensors, _) = read_safetensors(path)?;
        self.load_state_dict(&tensors, strict).map_err(|e| e.context(format!("loading {}", path.display())))
    }
}

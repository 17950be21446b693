//! Reading and writing named tensors as safetensors files, atomically
//! (a uniquely named temporary file, fsync, rename: `fs_safe`).
use super::module::Module;
use super::state_dict::LoadReport;
use crate::error::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;
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

pub(crate) use crate::fs_safe::write_atomic;

/// The largest safetensors header readers accept (the `safetensors`
/// crate's and Python package's limit).
pub const MAX_HEADER_BYTES: usize = 100_000_000;

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
    let header = bytes.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    if header > MAX_HEADER_BYTES as u64 {
        return Err(Error::invalid(format!(
            "{}: the safetensors header (names and metadata) would be {header} bytes; readers refuse more than \
             {MAX_HEADER_BYTES}, so the file could not be loaded back",
            path.display()
        )));
    }
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
    if let Some(kind) = crate::checkpoint::file_kind::describe(&bytes[..bytes.len().min(256)]) {
        return Err(Error::format(format!(
            "{} is not a safetensors file (nor a torch.save or Lightning file): it is {kind}",
            path.display()
        )));
    }
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
        let shape = view
            .shape()
            .iter()
            .map(|&d| i64::try_from(d))
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(|_| corrupt(format!("tensor {name} has a dimension above 2^63")))?;
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

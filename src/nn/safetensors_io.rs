//! Reading and writing named tensors as safetensors files, atomically
//! (a uniquely named temporary file, fsync, rename: `fs_safe`), the tensors
//! streamed to the file one at a time.
use super::module::Module;
use super::state_dict::LoadReport;
use crate::error::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
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

/// A tensor's dtype and shape, for the header: its bytes are not read
/// here (the header is laid out first, and each tensor's bytes are then
/// copied to the host and written one at a time).
struct LazyView {
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
}

impl View for &LazyView {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

fn lazy_view(name: &str, t: &Tensor) -> Result<LazyView> {
    let kind = t.f_kind()?;
    let dtype = dtype_of(kind)
        .ok_or_else(|| Error::dtype(format!("safetensors: tensor {name} has unsupported dtype {kind:?}")))?;
    let shape = t.size().iter().map(|&d| d as usize).collect();
    Ok(LazyView { dtype, shape, len: t.numel() * kind.elt_size_in_bytes() })
}

/// A tensor's bytes: a contiguous host copy of it alone.
fn host_bytes(t: &Tensor, len: usize) -> Result<Vec<u8>> {
    let kind = t.f_kind()?;
    let numel = t.numel();
    if numel * kind.elt_size_in_bytes() != len {
        return Err(Error::state("safetensors: a tensor changed size while it was saved"));
    }
    super::meta_init::refuse_meta(t, "safetensors")?;
    let mut data = vec![0u8; len];
    if numel > 0 {
        let host = tch::no_grad(|| t.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous())?;
        host.f_copy_data_u8(&mut data, numel)?;
    }
    Ok(data)
}

/// Where the header puts each tensor: (start offset, index in `tensors`).
fn layout(header: &[u8], names: &HashMap<&str, usize>) -> Result<Vec<(u64, usize)>> {
    let bad = |why: String| Error::state(format!("safetensors: the header written does not read back: {why}"));
    let value: serde_json::Value = serde_json::from_slice(header).map_err(|e| bad(e.to_string()))?;
    let entries = value.as_object().ok_or_else(|| bad("not an object".into()))?;
    let mut order = Vec::with_capacity(names.len());
    for (name, info) in entries.iter().filter(|(k, _)| *k != "__metadata__") {
        let index = *names.get(name.as_str()).ok_or_else(|| bad(format!("unknown tensor {name:?}")))?;
        let start = info["data_offsets"][0].as_u64().ok_or_else(|| bad(format!("no offsets for {name:?}")))?;
        order.push((start, index));
    }
    if order.len() != names.len() {
        return Err(bad(format!("{} tensors of {}", order.len(), names.len())));
    }
    order.sort_unstable();
    Ok(order)
}

/// The largest safetensors header readers accept (the `safetensors`
/// crate's and Python package's limit).
pub const MAX_HEADER_BYTES: usize = 100_000_000;

/// Writes named tensors (any device; copied to the host one at a time) as
/// a safetensors file with optional string metadata, atomically, streaming
/// each tensor's bytes to the file (the file is never held whole in
/// memory). Names must be unique.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let what = path.display().to_string();
    crate::fs_safe::write_atomic_with(path, |file| {
        let out = write_safetensors_to(std::io::BufWriter::with_capacity(1 << 20, file), &what, tensors, metadata)?;
        out.into_inner().map_err(|e| Error::io(format!("writing {what}: {}", e.error())))?;
        Ok(())
    })
}

/// The bytes [`write_safetensors`] would write, in memory (`what` names
/// them in errors).
pub fn safetensors_bytes(
    tensors: &[(String, Tensor)],
    metadata: Option<HashMap<String, String>>,
    what: &str,
) -> Result<Vec<u8>> {
    write_safetensors_to(Vec::new(), what, tensors, metadata)
}

/// The length and header of a file with no tensor, only `metadata`: the
/// `safetensors` crate lays that header out as `{},"__metadata__":...}`,
/// which no reader (itself included) accepts. Padded with spaces to a
/// multiple of 8 bytes, as the crate pads.
fn empty_head(metadata: &Option<HashMap<String, String>>, what: &str) -> Result<Vec<u8>> {
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        let m = m.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        header.insert("__metadata__".to_string(), serde_json::Value::Object(m));
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(header))
        .map_err(|e| Error::format(format!("serialising {what}: {e}")))?;
    text.resize(text.len().div_ceil(8) * 8, b' ');
    let mut head = (text.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(&text);
    Ok(head)
}

/// Writes named tensors as safetensors to `out`, one tensor's bytes at a
/// time; `what` names the destination in errors.
fn write_safetensors_to<W: Write>(
    mut out: W,
    what: &str,
    tensors: &[(String, Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<W> {
    let mut names = HashMap::with_capacity(tensors.len());
    let mut views = Vec::with_capacity(tensors.len());
    for (i, (name, t)) in tensors.iter().enumerate() {
        if names.insert(name.as_str(), i).is_some() {
            return Err(Error::invalid(format!("write_safetensors {what}: duplicate tensor name {name:?}")));
        }
        views.push((name.as_str(), lazy_view(name, t)?));
    }
    // The crate lays out the header (its order and padding); the views
    // give no bytes, so this is the 8-byte length and the header alone.
    let head = if views.is_empty() {
        empty_head(&metadata, what)?
    } else {
        safetensors::tensor::serialize(views.iter().map(|(n, v)| (*n, v)), &metadata)
            .map_err(|e| Error::format(format!("serialising {what}: {e:?}")))?
    };
    let header = head.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    if header > MAX_HEADER_BYTES as u64 {
        return Err(Error::invalid(format!(
            "{what}: the safetensors header (names and metadata) would be {header} bytes; readers refuse more than \
             {MAX_HEADER_BYTES}, so the file could not be loaded back"
        )));
    }
    let order = layout(&head[8..], &names)?;
    let io = |e: std::io::Error| Error::io(format!("writing {what}: {e}"));
    out.write_all(&head).map_err(io)?;
    for (_, i) in &order {
        let bytes = host_bytes(&tensors[*i].1, views[*i].1.len)?;
        out.write_all(&bytes).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(out)
}

/// Reads a safetensors file: the tensors (CPU, in file order) and the
/// metadata. A truncated or corrupt file is a `Format` error naming it.
#[allow(clippy::type_complexity)]
pub fn read_safetensors(path: &Path) -> Result<(Vec<(String, Tensor)>, HashMap<String, String>)> {
    let bytes = crate::fs_safe::read_regular(path)?;
    read_safetensors_bytes(&bytes, &path.display().to_string())
}

/// [`read_safetensors`] of bytes in memory (`what` names them in errors).
#[allow(clippy::type_complexity)]
pub fn read_safetensors_bytes(bytes: &[u8], what: &str) -> Result<(Vec<(String, Tensor)>, HashMap<String, String>)> {
    let corrupt =
        |why: String| Error::format(format!("{what} is not a valid safetensors file (truncated or corrupt?): {why}"));
    if let Some(kind) = crate::checkpoint::file_kind::describe(&bytes[..bytes.len().min(256)]) {
        return Err(Error::format(format!(
            "{what} is not a safetensors file (nor a torch.save or Lightning file): it is {kind}"
        )));
    }
    let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(format!("{e:?}")))?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("{e:?}")))?;
    let mut infos: Vec<(String, (usize, usize))> =
        meta.tensors().into_iter().map(|(n, i)| (n, i.data_offsets)).collect();
    infos.sort_by_key(|(n, off)| (*off, n.clone()));
    let mut out = Vec::with_capacity(infos.len());
    for (name, _) in infos {
        let view = st.tensor(&name).map_err(|e| corrupt(format!("{e:?}")))?;
        let kind = kind_of(view.dtype())
            .ok_or_else(|| Error::dtype(format!("{what}: tensor {name} has unsupported dtype {:?}", view.dtype())))?;
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

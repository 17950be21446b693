//! `torch.save` files (`.pt`, `.pth`, Lightning's `.ckpt`): a zip archive
//! holding a pickle and one record per tensor storage. fulmen reads and
//! writes the subset `torch.load(weights_only=True)` accepts, without
//! Python: see `pickle_read` for what is refused.
use super::pickle_read::{self, StorageRef, Storages};
use super::pickle_write;
use super::torch_zip::{ZipReader, ZipWriter};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use tch::Tensor;

use super::torch_zip::looks_like_zip;

/// A value of the safe subset. Dicts keep their order (Python's dict and
/// OrderedDict alike).
#[derive(Debug)]
pub enum Value {
    /// None.
    None,
    /// A bool.
    Bool(bool),
    /// An int (64 bits).
    Int(i64),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// A bytes object.
    Bytes(Vec<u8>),
    /// A set or frozenset (its items in the order the file has them).
    Set(Vec<Value>),
    /// A list.
    List(Vec<Value>),
    /// A tuple (also a torch.Size).
    Tuple(Vec<Value>),
    /// A dict or OrderedDict, in order.
    Dict(Vec<(Value, Value)>),
    /// A tensor (on the CPU once read).
    Tensor(Tensor),
}

impl Value {
    /// The value under string key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(entries) => {
                entries.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v)
            }
            _ => None,
        }
    }
}

/// What the file at `path` is by its first bytes, when it is a `torch.save`
/// file: its zip archive (PyTorch 1.6 and later), or the older bare pickle,
/// which fulmen does not read.
pub fn sniff(path: &Path) -> Result<Option<TorchFile>> {
    use std::io::Read;
    let mut head = [0u8; 4];
    let io = |e: std::io::Error| Error::io(format!("reading {}: {e}", path.display()));
    let mut f = crate::fs_safe::open_regular(path).map_err(io)?;
    let n = f.read(&mut head).map_err(io)?;
    Ok(if looks_like_zip(&head[..n]) {
        Some(TorchFile::Archive)
    } else if looks_like_pickle(&head[..n]) {
        Some(TorchFile::LegacyPickle)
    } else {
        None
    })
}

/// Whether `head` starts a pickle of protocol 2 to 5 (a legacy
/// `torch.save` file).
pub fn looks_like_pickle(head: &[u8]) -> bool {
    head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1])
}

/// The kinds of `torch.save` file [`sniff`] tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TorchFile {
    /// A zip archive (`torch.save` since PyTorch 1.6).
    Archive,
    /// A bare pickle (`_use_new_zipfile_serialization=False`, or PyTorch
    /// before 1.6).
    LegacyPickle,
}

/// The error for a legacy (bare pickle) `torch.save` file.
pub fn legacy_error(path: &Path) -> Error {
    Error::format(format!(
        "{} is a legacy torch.save file (a bare pickle, not the zip archive PyTorch writes since 1.6): fulmen reads \
         only the archive; save it again with torch.save's default format",
        path.display()
    ))
}

/// The storages of one archive, read once each.
struct ArchiveStorages<'a> {
    zip: &'a ZipReader<'a>,
    read: HashMap<String, Rc<Tensor>>,
    what: &'a str,
}

impl Storages for ArchiveStorages<'_> {
    fn storage(&mut self, s: &StorageRef) -> Result<Rc<Tensor>> {
        if let Some(t) = self.read.get(&s.key) {
            if t.kind() != s.kind {
                return Err(Error::format(format!("{}: storage {} is read as two dtypes", self.what, s.key)));
            }
            return Ok(Rc::clone(t));
        }
        let bytes = self
            .zip
            .record(&format!("data/{}", s.key))
            .ok_or_else(|| Error::format(format!("{}: storage {} has no record", self.what, s.key)))?;
        let want = s.numel.checked_mul(s.kind.elt_size_in_bytes() as u64);
        if want != Some(bytes.len() as u64) {
            return Err(Error::format(format!(
                "{}: storage {} holds {} bytes, not {} elements of {:?}",
                self.what,
                s.key,
                bytes.len(),
                s.numel,
                s.kind
            )));
        }
        let t = Rc::new(Tensor::f_from_data_size(bytes, &[s.numel as i64], s.kind)?);
        self.read.insert(s.key.clone(), Rc::clone(&t));
        Ok(t)
    }
}

/// Reads a `torch.save` archive from `bytes` (`what` names it in errors).
pub fn read_bytes(bytes: &[u8], what: &str) -> Result<Value> {
    let zip = ZipReader::new(bytes, what)?;
    if let Some(order) = zip.record("byteorder") {
        if order != b"little" {
            return Err(Error::format(format!(
                "{what}: byte order {:?} is not supported",
                String::from_utf8_lossy(order)
            )));
        }
    }
    if zip.record("constants.pkl").is_some() {
        return Err(super::torch_zip::torchscript_error(what));
    }
    let pickle = zip.record("data.pkl").ok_or_else(|| Error::format(format!("{what}: the archive has no data.pkl")))?;
    let mut storages = ArchiveStorages { zip: &zip, read: HashMap::new(), what };
    pickle_read::read(pickle, &mut storages, what)
}

/// Reads the `torch.save` file at `path`.
pub fn load(path: &Path) -> Result<Value> {
    let bytes = crate::fs_safe::read_regular(path)?;
    read_bytes(&bytes, &path.display().to_string())
}

/// Writes the archive `torch.save(value)` would write to `out`: the
/// pickle, then each tensor's storage, copied to the host one at a time.
fn write_archive<W: std::io::Write>(value: &Value, out: W) -> Result<W> {
    let written = pickle_write::write(value)?;
    let mut zip = ZipWriter::new(out, "archive");
    zip.add("data.pkl", &written.pickle)?;
    zip.add(".format_version", b"1")?;
    zip.add(".storage_alignment", b"64")?;
    zip.add("byteorder", b"little")?;
    for (key, tensor, numel) in &written.storages {
        pickle_write::with_host_bytes(tensor, *numel, |bytes| zip.add(&format!("data/{key}"), bytes))?;
    }
    zip.add("version", b"3\n")?;
    zip.finish()
}

/// The archive `torch.save(value)` would write, in memory.
pub fn to_bytes(value: &Value) -> Result<Vec<u8>> {
    write_archive(value, Vec::new())
}

/// Writes `value` as a `torch.save` file at `path`, atomically, streaming
/// the tensors' bytes to the file (a checkpoint is never held whole in
/// memory; above 4 GiB the archive takes zip64 fields, as PyTorch's does).
pub fn save(path: &Path, value: &Value) -> Result<()> {
    crate::fs_safe::write_atomic_with(path, |file| {
        let out = write_archive(value, std::io::BufWriter::with_capacity(1 << 20, file))
            .map_err(|e| e.context(format!("writing {}", path.display())))?;
        out.into_inner().map_err(|e| Error::io(format!("writing {}: {}", path.display(), e.error())))?;
        Ok(())
    })
}

/// A state_dict value (name -> tensor, in order).
pub fn state_dict_value(tensors: &[(String, Tensor)]) -> Value {
    Value::Dict(tensors.iter().map(|(k, t)| (Value::Str(k.clone()), Value::Tensor(t.shallow_clone()))).collect())
}

/// The named tensors of a state_dict: the file's top-level dict, or its
/// `state_dict` entry when it has one (a Lightning checkpoint), or its
/// `model_state_dict` entry (PyTorch's tutorial layout). Entries that are
/// not tensors are an error naming them.
pub fn state_dict_of(value: &Value, what: &str) -> Result<Vec<(String, Tensor)>> {
    let dict = value.get("state_dict").or_else(|| value.get("model_state_dict")).unwrap_or(value);
    let Value::Dict(entries) = dict else {
        return Err(Error::format(format!("{what} holds no state_dict (its top level is not a dict)")));
    };
    entries
        .iter()
        .map(|(k, v)| match (k, v) {
            (Value::Str(name), Value::Tensor(t)) => Ok((name.clone(), t.shallow_clone())),
            (Value::Str(name), _) => Err(Error::format(format!("{what}: state_dict entry {name:?} is not a tensor"))),
            _ => Err(Error::format(format!("{what}: a state_dict key is not a string"))),
        })
        .collect()
}

#[cfg(test)]
mod tests;

//! A `.pt2` archive (torch.export.save, or package_pt2 with named
//! programs): which programs it holds, their graphs' JSON and their
//! weights and constants, read into tensors. Every size the archive claims
//! is checked against the bytes it holds before anything is allocated.
use super::graph;
use super::json::{self, Json};
use crate::checkpoint::torch_zip::ZipReader;
use crate::error::{Error, Result};
use std::collections::HashMap;
use tch::{Kind, Tensor};

/// One program of the archive.
pub(crate) struct ProgramFiles {
    /// "forward" for the single program torch.export.save writes.
    pub(crate) name: String,
    pub(crate) doc: Json,
    /// Parameters and buffers by name, as the program stores them.
    pub(crate) weights: Vec<(String, Tensor, bool)>,
    /// Lifted tensor constants by name.
    pub(crate) constants: Vec<(String, Tensor)>,
}

/// The torch dtype of a serialized dtype code.
fn kind_of(code: i64) -> Result<Kind> {
    Ok(match code {
        1 => Kind::Uint8,
        2 => Kind::Int8,
        3 => Kind::Int16,
        4 => Kind::Int,
        5 => Kind::Int64,
        6 => Kind::Half,
        7 => Kind::Float,
        8 => Kind::Double,
        9 => Kind::ComplexHalf,
        10 => Kind::ComplexFloat,
        11 => Kind::ComplexDouble,
        12 => Kind::Bool,
        13 => Kind::BFloat16,
        _ => return Err(Error::format(format!("dtype code {code} is not supported"))),
    })
}

fn concrete_ints(v: &Json, what: &str) -> Result<Vec<i64>> {
    json::array(v, what)?
        .iter()
        .map(|x| match json::union(x, what)? {
            ("as_int", n) => json::int(n, what),
            _ => Err(Error::format(format!("{what}: a stored tensor with a symbolic size"))),
        })
        .collect()
}

/// What a stored tensor's meta says: dtype, sizes, strides, offset.
struct StoredMeta {
    kind: Kind,
    sizes: Vec<i64>,
    strides: Vec<i64>,
    offset: i64,
}

fn stored_meta(meta: &Json, name: &str) -> Result<StoredMeta> {
    let bad = |why: String| Error::format(format!("stored tensor {name}: {why}"));
    let kind = kind_of(json::int(json::field(meta, "dtype")?, "dtype")?)?;
    let sizes = concrete_ints(json::field(meta, "sizes")?, "sizes")?;
    let strides = concrete_ints(json::field(meta, "strides")?, "strides")?;
    let offset = match json::union(json::field(meta, "storage_offset")?, "storage_offset")? {
        ("as_int", n) => json::int(n, "storage_offset")?,
        _ => return Err(bad("a symbolic storage offset".into())),
    };
    if json::int(json::field(meta, "layout")?, "layout")? != 7 {
        return Err(bad("not a strided (dense) tensor".into()));
    }
    if sizes.len() != strides.len() || sizes.len() > 64 {
        return Err(bad(format!("{} sizes and {} strides", sizes.len(), strides.len())));
    }
    if sizes.iter().chain(&strides).any(|&v| v < 0) || offset < 0 {
        return Err(bad("a negative size, stride or offset".into()));
    }
    Ok(StoredMeta { kind, sizes, strides, offset })
}

/// The view `m` describes over `storage` (a 1-D tensor of `m.kind` holding
/// the file's elements), checked first: it may neither reach past the
/// storage nor hold more elements than the storage does (a stride-0 view
/// of a few bytes claiming 2^40 elements would be allocated in full by the
/// first operator that copies it).
fn stored_view(storage: &Tensor, m: &StoredMeta, name: &str) -> Result<Tensor> {
    let bad = |why: String| Error::format(format!("stored tensor {name}: {why}"));
    let stored = storage.size()[0] as i128;
    let mut numel: i128 = 1;
    let mut last: i128 = i128::from(m.offset);
    for (s, st) in m.sizes.iter().zip(&m.strides) {
        numel = numel.saturating_mul(i128::from(*s));
        last = last.saturating_add(i128::from(s.saturating_sub(1).max(0)).saturating_mul(i128::from(*st)));
    }
    if numel > stored {
        return Err(bad(format!("{numel} elements claimed, the file holds {stored}")));
    }
    if numel > 0 && last >= stored {
        return Err(bad(format!("its view reaches element {last}, the file holds {stored}")));
    }
    storage.f_as_strided(&m.sizes, &m.strides, m.offset).map(|t| t.detach()).map_err(|e| bad(format!("{e}")))
}

/// Reads the tensors a `*_config.json` lists from `folder`: (name, tensor,
/// is a parameter). Names sharing a file and a view share one tensor.
fn read_tensors(zip: &ZipReader<'_>, folder: &str, config: &[u8]) -> Result<Vec<(String, Tensor, bool)>> {
    let doc: Json = serde_json::from_slice(config).map_err(|e| Error::format(format!("{folder} config: {e}")))?;
    let entries = json::field(&doc, "config")?
        .as_object()
        .ok_or_else(|| Error::format(format!("{folder} config is not an object")))?;
    let mut out = Vec::new();
    // One storage per file, and one tensor per (file, view): names tied to
    // one weight share it, and no file is copied twice.
    let mut storages: HashMap<String, Tensor> = HashMap::new();
    let mut made: HashMap<(String, String), Tensor> = HashMap::new();
    for (name, entry) in entries {
        let path = json::string(json::field(entry, "path_name")?, "path_name")?;
        if json::field(entry, "use_pickle").ok().and_then(Json::as_bool) == Some(true) {
            return Err(Error::unsupported(format!(
                "stored tensor {name} is pickled (a tensor subclass); only plain tensors are read"
            )));
        }
        let meta = json::field(entry, "tensor_meta")?;
        let is_param = json::field(entry, "is_param").ok().and_then(Json::as_bool).unwrap_or(false);
        let key = (path.clone(), meta.to_string());
        let tensor = match made.get(&key) {
            Some(t) => t.shallow_clone(),
            None => {
                if path.contains('/') || path.starts_with('.') {
                    return Err(Error::format(format!("stored tensor {name}: a bad file name {path:?}")));
                }
                let m = stored_meta(meta, name)?;
                let storage = match storages.get(&path) {
                    Some(s) if s.kind() == m.kind => s.shallow_clone(),
                    Some(_) => return Err(Error::format(format!("stored tensor {name}: {path} read as two dtypes"))),
                    None => {
                        let bytes = zip
                            .record(&format!("{folder}/{path}"))
                            .ok_or_else(|| Error::format(format!("stored tensor {name}: no file {folder}/{path}")))?;
                        let elem = m.kind.elt_size_in_bytes();
                        let n = bytes.len() / elem;
                        let s = Tensor::from_data_size(&bytes[..n * elem], &[n as i64], m.kind);
                        storages.insert(path.clone(), s.shallow_clone());
                        s
                    }
                };
                let mut t = stored_view(&storage, &m, name)?;
                let grad = json::field(meta, "requires_grad").ok().and_then(Json::as_bool).unwrap_or(false);
                if is_param && grad && t.is_floating_point() {
                    t = t.set_requires_grad(true);
                }
                made.insert(key, t.shallow_clone());
                t
            }
        };
        out.push((name.clone(), tensor, is_param));
    }
    Ok(out)
}

/// Reads every program of the archive in `bytes` (`what` names the file).
pub(crate) fn read(bytes: &[u8], what: &str) -> Result<Vec<ProgramFiles>> {
    let zip = ZipReader::new(bytes, what)
        .map_err(|e| Error::format(format!("{what} is not a readable .pt2 archive: {}", e.message)))?;
    match zip.record("archive_format") {
        Some(b"pt2") => {}
        _ => return Err(Error::format(format!("{what} is not a torch.export archive (no archive_format pt2)"))),
    }
    if let Some(order) = zip.record("byteorder") {
        if order != b"little" {
            return Err(Error::unsupported(format!("{what} stores its tensors big-endian")));
        }
    }
    let mut names: Vec<String> = zip
        .names()
        .filter_map(|n| n.strip_prefix("models/").and_then(|n| n.strip_suffix(".json")))
        .filter(|n| !n.contains('/'))
        .map(str::to_owned)
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(Error::format(format!("{what} holds no exported program (models/*.json)")));
    }
    names
        .into_iter()
        .map(|stem| {
            let doc: Json = serde_json::from_slice(zip.record(&format!("models/{stem}.json")).unwrap_or_default())
                .map_err(|e| Error::format(format!("{what}: program {stem}: {e}")))?;
            let config = |kind: &str| zip.record(&format!("data/{kind}/{stem}_{kind}_config.json"));
            let weights = match config("weights") {
                Some(c) => read_tensors(&zip, "data/weights", c)?,
                None => Vec::new(),
            };
            let constants = match config("constants") {
                Some(c) => read_tensors(&zip, "data/constants", c)?.into_iter().map(|(n, t, _)| (n, t)).collect(),
                None => Vec::new(),
            };
            let name = if stem == "model" { "forward".to_owned() } else { stem };
            Ok(ProgramFiles { name, doc, weights, constants })
        })
        .collect::<Result<Vec<_>>>()
        .map_err(|e: Error| e.context(what))
}

/// A check that the graph module of a program parses, for messages that
/// name the program.
pub(crate) fn graph_of(p: &ProgramFiles) -> Result<graph::Graph> {
    graph::read(&p.doc).map_err(|e| e.context(format!("program {}", p.name)))
}

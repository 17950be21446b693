//! The `.metadata` file of a `torch.distributed.checkpoint` directory: which
//! entries the checkpoint holds (a tensor's dtype, full size and chunks; or
//! a pickled value), where each chunk's bytes lie (file, offset, length),
//! and each entry's path in the nested state. Read through the safe pickle
//! reader (its dataclasses and nothing else beyond the weights subset);
//! written as torch 2.x writes it, so `dcp.load` reads fulmen's.
use super::tree::PathItem;
use crate::checkpoint::pickle_read::{read_dcp_metadata, CLASS_KEY, STATE_KEY};
use crate::checkpoint::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::HashMap;
use tch::Kind;

/// The file name of the metadata in a checkpoint directory.
pub(crate) const METADATA_FILE: &str = ".metadata";

/// Where an item's bytes lie: a file of the directory, an offset, a length.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Location {
    pub file: String,
    pub offset: u64,
    pub length: u64,
}

/// One stored piece of a tensor: its place in the full tensor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Chunk {
    pub offsets: Vec<i64>,
    pub sizes: Vec<i64>,
    pub at: Location,
}

/// What the checkpoint holds under one name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Entry {
    /// A tensor of `kind` and full `size`, stored as `chunks`.
    Tensor { kind: Kind, size: Vec<i64>, chunks: Vec<Chunk> },
    /// Any other value, stored as its own `torch.save` archive.
    Bytes(Location),
}

/// A checkpoint directory's metadata: its entries in order, each with
/// its path in the nested state.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Metadata {
    pub entries: Vec<(String, Entry, Vec<PathItem>)>,
}

/// The dtypes a sharded checkpoint's tensors may have, by torch's name.
const DTYPES: &[(&str, Kind)] = &[
    ("float32", Kind::Float),
    ("float64", Kind::Double),
    ("float16", Kind::Half),
    ("bfloat16", Kind::BFloat16),
    ("int64", Kind::Int64),
    ("int32", Kind::Int),
    ("int16", Kind::Int16),
    ("int8", Kind::Int8),
    ("uint8", Kind::Uint8),
    ("bool", Kind::Bool),
];

fn kind_of(name: &str) -> Option<Kind> {
    let short = name.strip_prefix("torch.").unwrap_or(name);
    let alias = match short {
        "float" => "float32",
        "double" => "float64",
        "half" => "float16",
        "long" => "int64",
        "int" => "int32",
        "short" => "int16",
        other => other,
    };
    DTYPES.iter().find(|(n, _)| *n == alias).map(|(_, k)| *k)
}

fn dtype_name(kind: Kind) -> Result<&'static str> {
    DTYPES
        .iter()
        .find(|(_, k)| *k == kind)
        .map(|(n, _)| *n)
        .ok_or_else(|| Error::dtype(format!("a sharded checkpoint cannot hold tensors of {kind:?}")))
}

// ---- reading ----

fn bad(what: &str, why: impl std::fmt::Display) -> Error {
    Error::format(format!("{what}: {why}"))
}

/// The fields of a dataclass read as a dict, checked to be `class`.
fn object<'v>(v: &'v Value, class: &str, what: &str) -> Result<&'v Value> {
    match v.get(CLASS_KEY) {
        Some(Value::Str(c)) if c == class => Ok(v),
        Some(Value::Str(c)) => Err(bad(what, format!("a {c} where a {class} belongs"))),
        _ => Err(bad(what, format!("{v:.60?} where a {class} belongs"))),
    }
}

fn ints(v: Option<&Value>, what: &str, field: &str) -> Result<Vec<i64>> {
    match v {
        Some(Value::Tuple(items)) | Some(Value::List(items)) => items
            .iter()
            .map(|x| match x {
                Value::Int(i) if *i >= 0 => Ok(*i),
                _ => Err(bad(what, format!("{field} holds something other than sizes"))),
            })
            .collect(),
        _ => Err(bad(what, format!("{field} is missing or not a tuple"))),
    }
}

fn text<'v>(v: Option<&'v Value>, what: &str, field: &str) -> Result<&'v str> {
    match v {
        Some(Value::Str(s)) => Ok(s),
        _ => Err(bad(what, format!("{field} is missing or not a string"))),
    }
}

fn count(v: Option<&Value>, what: &str, field: &str) -> Result<u64> {
    match v {
        Some(Value::Int(i)) if *i >= 0 => Ok(*i as u64),
        _ => Err(bad(what, format!("{field} is missing or not a count"))),
    }
}

fn dict<'v>(v: Option<&'v Value>, what: &str, field: &str) -> Result<&'v [(Value, Value)]> {
    match v {
        Some(Value::Dict(entries)) => Ok(entries),
        _ => Err(bad(what, format!("{field} is missing or not a dict"))),
    }
}

/// A tensor's dtype from its `TensorProperties` (a tuple state, as torch
/// pickles it, or its fields).
fn properties_kind(v: &Value, what: &str) -> Result<Kind> {
    let p = object(v, "TensorProperties", what)?;
    let dtype = match (p.get(STATE_KEY), p.get("dtype")) {
        (Some(Value::Tuple(state)), _) => state.first(),
        (_, Some(d)) => Some(d),
        _ => None,
    };
    let name = match dtype {
        Some(Value::Str(s)) => s.as_str(),
        _ => return Err(bad(what, "a tensor's properties name no dtype")),
    };
    kind_of(name).ok_or_else(|| bad(what, format!("tensors of {name} are not read")))
}

/// Reads the `.metadata` bytes (`what` names the file in errors). Every
/// tensor chunk must have its storage entry, every name its path.
pub(crate) fn read(bytes: &[u8], what: &str) -> Result<Metadata> {
    let top = read_dcp_metadata(bytes, what)?;
    let top = object(&top, "Metadata", what)?;
    if let Some(Value::Str(v)) = top.get("version") {
        if v.split('.').next() != Some("1") {
            return Err(bad(what, format!("metadata version {v} is not read (this fulmen reads 1.x)")));
        }
    }
    // Where each chunk (by name and offsets) or value (by name) lies.
    let mut places: HashMap<(String, Option<Vec<i64>>), Location> = HashMap::new();
    for (index, info) in dict(top.get("storage_data"), what, "storage_data")? {
        let index = object(index, "MetadataIndex", what)?;
        let fqn = text(index.get("fqn"), what, "MetadataIndex.fqn")?.to_string();
        let offsets = match index.get("offset") {
            None | Some(Value::None) => None,
            v => Some(ints(v, what, "MetadataIndex.offset")?),
        };
        let info = object(info, "_StorageInfo", what)?;
        match info.get("transform_descriptors") {
            None | Some(Value::None) => {}
            Some(Value::List(t)) | Some(Value::Tuple(t)) if t.is_empty() => {}
            Some(_) => {
                return Err(Error::unsupported(format!(
                    "{what}: entry {fqn:?} is stored through a transform (compression or an extension); fulmen reads \
                     plain torch.save items only"
                )))
            }
        }
        let file = text(info.get("relative_path"), what, "_StorageInfo.relative_path")?.to_string();
        if file.is_empty() || file.contains('/') || file.contains('\\') || file == "." || file == ".." {
            return Err(bad(what, format!("storage file {file:?} is not a plain file name in the directory")));
        }
        let at = Location {
            file,
            offset: count(info.get("offset"), what, "_StorageInfo.offset")?,
            length: count(info.get("length"), what, "_StorageInfo.length")?,
        };
        places.insert((fqn, offsets), at);
    }
    let mut paths: HashMap<&str, Vec<PathItem>> = HashMap::new();
    if let Some(Value::Dict(planner)) = top.get("planner_data") {
        for (k, v) in planner {
            let (Value::Str(fqn), Value::Tuple(items)) = (k, v) else {
                return Err(bad(what, "planner_data maps a name to something other than a path"));
            };
            let path = items
                .iter()
                .map(|x| match x {
                    Value::Str(s) => Ok(PathItem::Key(s.clone())),
                    Value::Int(i) if *i >= 0 => Ok(PathItem::Index(*i as u64)),
                    _ => Err(bad(what, format!("the path of {fqn:?} holds something other than keys and indices"))),
                })
                .collect::<Result<Vec<_>>>()?;
            paths.insert(fqn.as_str(), path);
        }
    }
    let mut entries = Vec::new();
    for (k, v) in dict(top.get("state_dict_metadata"), what, "state_dict_metadata")? {
        let Value::Str(fqn) = k else { return Err(bad(what, "an entry name is not a string")) };
        // Without planner_data (a checkpoint saved unflattened), a name is
        // a top-level key.
        let path = paths.remove(fqn.as_str()).unwrap_or_else(|| vec![PathItem::Key(fqn.clone())]);
        let entry = match v.get(CLASS_KEY) {
            Some(Value::Str(c)) if c == "BytesStorageMetadata" => {
                let at = places
                    .remove(&(fqn.clone(), None))
                    .ok_or_else(|| bad(what, format!("entry {fqn:?} has no storage")))?;
                Entry::Bytes(at)
            }
            _ => {
                let t = object(v, "TensorStorageMetadata", what)?;
                let kind = properties_kind(
                    t.get("properties").ok_or_else(|| bad(what, format!("tensor {fqn:?} has no properties")))?,
                    what,
                )?;
                let size = ints(t.get("size"), what, "TensorStorageMetadata.size")?;
                let chunks = match t.get("chunks") {
                    Some(Value::List(c)) => c,
                    _ => return Err(bad(what, format!("tensor {fqn:?} lists no chunks"))),
                };
                let chunks = chunks
                    .iter()
                    .map(|c| {
                        let c = object(c, "ChunkStorageMetadata", what)?;
                        let offsets = ints(c.get("offsets"), what, "ChunkStorageMetadata.offsets")?;
                        let sizes = ints(c.get("sizes"), what, "ChunkStorageMetadata.sizes")?;
                        let at = places
                            .remove(&(fqn.clone(), Some(offsets.clone())))
                            .ok_or_else(|| bad(what, format!("a chunk of {fqn:?} at {offsets:?} has no storage")))?;
                        Ok(Chunk { offsets, sizes, at })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Entry::Tensor { kind, size, chunks }
            }
        };
        entries.push((fqn.clone(), entry, path));
    }
    Ok(Metadata { entries })
}

// ---- writing ----

/// A pickle (protocol 2) written opcode by opcode.
struct Pickler {
    out: Vec<u8>,
}

/// A field of a dataclass: its name and what writes its value.
type Field<'a> = (&'a str, &'a mut dyn FnMut(&mut Pickler));

/// Items per SETITEMS or APPENDS, as Python's pickler batches them.
const BATCH: usize = 1000;

impl Pickler {
    fn global(&mut self, module: &str, name: &str) {
        crate::checkpoint::pickle_write::put_global(&mut self.out, module, name);
    }
    /// A string ([`write`] checked every name fits BINUNICODE's 4 GiB).
    fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
    }
    fn int(&mut self, v: i64) {
        self.out.extend_from_slice(&[0x8a, 8]);
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn none(&mut self) {
        self.out.push(b'N');
    }
    fn mark(&mut self) {
        self.out.push(b'(');
    }
    /// `torch.Size(values)`.
    fn size(&mut self, values: &[i64]) {
        self.global("torch", "Size");
        self.mark();
        for v in values {
            self.int(*v);
        }
        self.out.extend_from_slice(b"t\x85R");
    }
    /// `cls.__new__(cls)` of a metadata dataclass; its fields follow as a
    /// dict (see [`Pickler::fields`]).
    fn new_object(&mut self, module: &str, class: &str) {
        self.global(module, class);
        self.out.extend_from_slice(b")\x81");
    }
    /// BUILD with a dict of fields, each written by its closure.
    fn fields(&mut self, fields: &mut [Field<'_>]) {
        self.out.push(b'}');
        self.mark();
        for (name, write) in fields.iter_mut() {
            self.str(name);
            write(self);
        }
        self.out.extend_from_slice(b"ub");
    }
    /// A dict whose items `write` writes, key then value, `n` of them.
    fn dict(&mut self, n: usize, mut write: impl FnMut(&mut Pickler, usize)) {
        self.out.push(b'}');
        for start in (0..n).step_by(BATCH) {
            self.mark();
            for i in start..n.min(start + BATCH) {
                write(self, i);
            }
            self.out.push(b'u');
        }
    }
}

const META_MODULE: &str = "torch.distributed.checkpoint.metadata";

fn write_properties(p: &mut Pickler, kind: Kind) -> Result<()> {
    let dtype = dtype_name(kind)?;
    p.new_object(META_MODULE, "TensorProperties");
    // Its tuple state: (dtype, layout, requires_grad, memory format, pin_memory).
    p.mark();
    p.global("torch", dtype);
    p.global("torch.serialization", "_get_layout");
    p.str("torch.strided");
    p.out.extend_from_slice(b"\x85R\x89");
    p.global(META_MODULE, "_MEM_FORMAT_ENCODING");
    p.int(0);
    p.out.extend_from_slice(b"\x85R\x89tb");
    Ok(())
}

fn write_index(p: &mut Pickler, fqn: &str, offsets: Option<&[i64]>) {
    p.new_object(META_MODULE, "MetadataIndex");
    let index = offsets.map(|_| 0);
    p.fields(&mut [
        ("fqn", &mut |p: &mut Pickler| p.str(fqn)),
        ("offset", &mut |p: &mut Pickler| match offsets {
            Some(o) => p.size(o),
            None => p.none(),
        }),
        ("index", &mut |p: &mut Pickler| match index {
            Some(i) => p.int(i),
            None => p.none(),
        }),
    ]);
}

fn write_location(p: &mut Pickler, at: &Location) {
    p.new_object("torch.distributed.checkpoint.filesystem", "_StorageInfo");
    p.fields(&mut [
        ("relative_path", &mut |p: &mut Pickler| p.str(&at.file)),
        ("offset", &mut |p: &mut Pickler| p.int(at.offset as i64)),
        ("length", &mut |p: &mut Pickler| p.int(at.length as i64)),
    ]);
}

/// The `.metadata` bytes of `meta`; `save_id` tells this save from others.
pub(crate) fn write(meta: &Metadata, save_id: &str) -> Result<Vec<u8>> {
    let mut p = Pickler { out: vec![0x80, 2] };
    let too_long = |s: &str| u32::try_from(s.len()).is_err();
    for (fqn, e, path) in &meta.entries {
        let file_too_long = match e {
            Entry::Tensor { kind, chunks, .. } => {
                dtype_name(*kind)?;
                chunks.iter().any(|c| too_long(&c.at.file))
            }
            Entry::Bytes(at) => too_long(&at.file),
        };
        let key_too_long = path.iter().any(|i| matches!(i, PathItem::Key(k) if too_long(k)));
        if too_long(fqn) || file_too_long || key_too_long {
            return Err(Error::invalid("a sharded checkpoint's name above 4 GiB"));
        }
    }
    p.new_object(META_MODULE, "Metadata");
    let entries = &meta.entries;
    p.fields(&mut [
        ("state_dict_metadata", &mut |p: &mut Pickler| {
            p.dict(entries.len(), |p, i| {
                let (fqn, entry, _) = &entries[i];
                p.str(fqn);
                match entry {
                    Entry::Bytes(_) => p.new_object(META_MODULE, "BytesStorageMetadata"),
                    Entry::Tensor { kind, size, chunks } => {
                        p.new_object(META_MODULE, "TensorStorageMetadata");
                        p.fields(&mut [
                            ("properties", &mut |p: &mut Pickler| {
                                let _ = write_properties(p, *kind);
                            }),
                            ("size", &mut |p: &mut Pickler| p.size(size)),
                            ("chunks", &mut |p: &mut Pickler| {
                                p.out.push(b']');
                                for batch in chunks.chunks(BATCH) {
                                    p.mark();
                                    for c in batch {
                                        p.new_object(META_MODULE, "ChunkStorageMetadata");
                                        p.fields(&mut [
                                            ("offsets", &mut |p: &mut Pickler| p.size(&c.offsets)),
                                            ("sizes", &mut |p: &mut Pickler| p.size(&c.sizes)),
                                        ]);
                                    }
                                    p.out.push(b'e');
                                }
                            }),
                        ]);
                    }
                }
            })
        }),
        ("planner_data", &mut |p: &mut Pickler| {
            p.dict(entries.len(), |p, i| {
                let (fqn, _, path) = &entries[i];
                p.str(fqn);
                p.mark();
                for item in path {
                    match item {
                        PathItem::Key(k) => p.str(k),
                        PathItem::Index(n) => p.int(*n as i64),
                    }
                }
                p.out.push(b't');
            })
        }),
        ("storage_data", &mut |p: &mut Pickler| {
            let places: Vec<(&str, Option<&[i64]>, &Location)> = entries
                .iter()
                .flat_map(|(fqn, e, _)| -> Vec<(&str, Option<&[i64]>, &Location)> {
                    match e {
                        Entry::Bytes(at) => vec![(fqn.as_str(), None, at)],
                        Entry::Tensor { chunks, .. } => {
                            chunks.iter().map(|c| (fqn.as_str(), Some(c.offsets.as_slice()), &c.at)).collect()
                        }
                    }
                })
                .collect();
            p.dict(places.len(), |p, i| {
                let (fqn, offsets, at) = places[i];
                write_index(p, fqn, offsets);
                write_location(p, at);
            })
        }),
        ("storage_meta", &mut |p: &mut Pickler| {
            p.new_object(META_MODULE, "StorageMeta");
            p.fields(&mut [
                ("checkpoint_id", &mut |p: &mut Pickler| p.none()),
                ("save_id", &mut |p: &mut Pickler| p.str(save_id)),
                ("load_id", &mut |p: &mut Pickler| p.none()),
                ("modules", &mut |p: &mut Pickler| p.out.push(b']')),
            ]);
        }),
        ("version", &mut |p: &mut Pickler| p.str("1.0.0")),
    ]);
    p.out.push(b'.');
    Ok(p.out)
}

//! Reads the pickle of a `torch.save` file, limited to what
//! `torch.load(weights_only=True)` accepts: dicts and OrderedDicts, lists,
//! tuples, sets and frozensets, strings, bytes, numbers, booleans, None and
//! tensors. Any other global,
//! any other call and any other opcode is refused with a `Format` error and
//! never run. Nothing is allocated in proportion to a number in the file:
//! strings are bounded by the bytes left, the memo is a map (a key of 2^32
//! costs what a key of 0 does), and a bound on the values made (shared
//! tuples, lists and dicts counted each time they are used, each memo entry
//! and MARK counted too) and on nesting keeps a small file from describing
//! a huge or deep tree. What the reader holds meanwhile is bounded as well:
//! at most [`MAX_MEMO`] memo entries and [`MAX_MARKS`] open MARKs.
use super::torch_save::Value;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use tch::{Kind, Tensor};

/// Most values a file may describe (each reuse of a memoized tuple counts
/// its values again; 8 bytes of a string count as one value); fewer for a
/// small file, see [`value_budget`].
const MAX_VALUES: u64 = 20_000_000;

/// The values a pickle of `len` bytes may make: a real pickle spends about
/// a byte or more per value it does not share.
fn value_budget(len: usize) -> u64 {
    MAX_VALUES.min((len as u64).saturating_mul(16).saturating_add(1024))
}
/// Deepest nesting of containers.
const MAX_DEPTH: u32 = 64;
/// Most memo entries held at once. PyTorch's pickles memoize about a dozen
/// objects per tensor (its key, storage tuple, size and stride tuples...),
/// so this serves some 80 000 tensors, or 20 000 parameters with Adam's
/// state; a memo this full takes about 120 MB. A memo bomb (MEMOIZE after
/// MEMOIZE of one value) is refused there.
const MAX_MEMO: usize = 1 << 20;
/// Most items on the stack at once. Python's pickler (and fulmen's) writes
/// containers in batches of 1000 items, so real pickles stay far below
/// this; a pickle of millions of bare values is refused here instead of
/// holding them all (some 48 bytes each).
const MAX_STACK: usize = 1 << 20;
/// Most MARKs open at once: each stands for a container being built, and
/// real pickles open at most a couple per level of nesting.
const MAX_MARKS: usize = 4 * MAX_DEPTH as usize;

/// A storage a tensor is a view of: its dtype, record key and element count.
#[derive(Clone, Debug)]
pub(super) struct StorageRef {
    pub kind: Kind,
    pub key: String,
    pub numel: u64,
}

/// The callables the safe subset allows.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Global {
    OrderedDict,
    Counter,
    RebuildTensorV2,
    RebuildParameter,
    Size,
    Storage(Kind),
    /// A dtype such as `torch.bfloat16` (read as the string "torch.bfloat16").
    Dtype(&'static str),
    /// `torch.device`, called with ("cuda", 0) or ("cpu",).
    Device,
    /// `_codecs.encode(text, "latin1")`: bytes as pickle protocol 2 writes them.
    CodecsEncode,
    /// `set(list)` (protocol 2). `torch.load(weights_only=True)` refuses
    /// `frozenset` and `bytes` as globals, and so does fulmen.
    Set,
    /// A dataclass of `torch.distributed.checkpoint`'s metadata, made by
    /// NEWOBJ and filled by BUILD (read as a dict with a `__class__` entry);
    /// only in a `.metadata` file.
    DcpClass(&'static str),
    /// `torch.serialization._get_layout("torch.strided")` (read as the string).
    Layout,
    /// `_MEM_FORMAT_ENCODING(n)` (read as the number).
    MemFormat,
    /// `pathlib.PosixPath(parts...)` (read as the path's text).
    PathLike,
}

/// What a pickle may hold beyond plain values and tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Profile {
    /// What `torch.load(weights_only=True)` accepts.
    Weights,
    /// That, plus the dataclasses of a `torch.distributed.checkpoint`
    /// `.metadata` file (which `torch.load` never reads).
    DcpMetadata,
}

/// The dataclasses a `.metadata` file is made of, by module.
const DCP_CLASSES: &[(&str, &str)] = &[
    ("torch.distributed.checkpoint.metadata", "Metadata"),
    ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "TensorProperties"),
    ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    ("torch.distributed.checkpoint.metadata", "StorageMeta"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
];

/// The globals a `.metadata` file may name beyond the weights subset.
fn dcp_global(module: &str, name: &str) -> Option<Global> {
    if let Some((_, class)) = DCP_CLASSES.iter().find(|(m, c)| *m == module && *c == name) {
        return Some(Global::DcpClass(class));
    }
    match (module, name) {
        ("torch.serialization", "_get_layout") => Some(Global::Layout),
        ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING") => Some(Global::MemFormat),
        ("pathlib", "PosixPath" | "PurePosixPath" | "Path" | "WindowsPath" | "PureWindowsPath") => {
            Some(Global::PathLike)
        }
        _ => None,
    }
}

/// The dtype names `torch.load(weights_only=True)` accepts as globals.
const DTYPES: &[&str] = &[
    "float32",
    "float",
    "float64",
    "double",
    "float16",
    "half",
    "bfloat16",
    "complex64",
    "cfloat",
    "complex128",
    "cdouble",
    "int64",
    "long",
    "int32",
    "int",
    "int16",
    "short",
    "int8",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "float8_e4m3fn",
    "float8_e5m2",
];

fn global(module: &str, name: &str, profile: Profile) -> Result<Global> {
    if profile == Profile::DcpMetadata {
        if let Some(g) = dcp_global(module, name) {
            return Ok(g);
        }
    }
    let storage = |k| Ok(Global::Storage(k));
    if let Some(dtype) = DTYPES.iter().find(|d| module == "torch" && **d == name) {
        return Ok(Global::Dtype(dtype));
    }
    match (module, name) {
        ("collections", "OrderedDict") => Ok(Global::OrderedDict),
        ("collections", "Counter") => Ok(Global::Counter),
        ("torch._utils", "_rebuild_tensor_v2") => Ok(Global::RebuildTensorV2),
        ("torch._utils", "_rebuild_parameter") => Ok(Global::RebuildParameter),
        ("torch", "Size") => Ok(Global::Size),
        ("torch", "device") => Ok(Global::Device),
        ("_codecs", "encode") => Ok(Global::CodecsEncode),
        ("builtins" | "__builtin__", "set") => Ok(Global::Set),
        ("torch", "FloatStorage") => storage(Kind::Float),
        ("torch", "DoubleStorage") => storage(Kind::Double),
        ("torch", "HalfStorage") => storage(Kind::Half),
        ("torch", "BFloat16Storage") => storage(Kind::BFloat16),
        ("torch", "LongStorage") => storage(Kind::Int64),
        ("torch", "IntStorage") => storage(Kind::Int),
        ("torch", "ShortStorage") => storage(Kind::Int16),
        ("torch", "CharStorage") => storage(Kind::Int8),
        ("torch", "ByteStorage") => storage(Kind::Uint8),
        ("torch", "BoolStorage") => storage(Kind::Bool),
        _ => Err(Error::format(format!(
            "global {module}.{name} is outside the safe subset (dicts, lists, tuples, sets, numbers, strings, \
             bytes and tensors); it is not loaded"
        ))),
    }
}

/// A value during unpickling. Lists and dicts are owned by the stack (they
/// are filled in place); tuples and tensors are shared cheaply, and so are
/// lists and dicts the memo holds once they are finished (`Shared`).
#[derive(Clone, Debug)]
enum Item {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<Vec<Item>>, Shape),
    List(Vec<Item>, Shape),
    /// A set or frozenset, in the order its items came (filled in place by
    /// ADDITEMS, as a list by APPENDS).
    Set(Vec<Item>, Shape),
    Dict(Vec<(Item, Item)>, Shape),
    /// A finished list, set or dict the memo holds, so BINGET can give it again
    /// (as SequentialLR's state shares `_last_lr`); it is not filled any more.
    Shared(Rc<Item>, Shape),
    Tensor(Rc<Tensor>),
    Global(Global),
    Storage(Rc<StorageRef>),
}

/// How many values a container holds in all, and how deep it nests.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    values: u64,
    depth: u32,
}

impl Item {
    fn shape(&self) -> Shape {
        match self {
            Item::Tuple(_, s) | Item::List(_, s) | Item::Set(_, s) | Item::Dict(_, s) | Item::Shared(_, s) => *s,
            Item::Str(s) => Shape { values: 1 + s.len() as u64 / 8, depth: 0 },
            Item::Bytes(b) => Shape { values: 1 + b.len() as u64 / 8, depth: 0 },
            _ => Shape { values: 1, depth: 0 },
        }
    }
}

/// Turns storages into tensors (the caller reads the archive's records).
pub(super) trait Storages {
    /// The flat tensor of a storage (shared by the tensors that view it).
    fn storage(&mut self, s: &StorageRef) -> Result<Rc<Tensor>>;
}

struct Reader<'a, S: Storages> {
    data: &'a [u8],
    at: usize,
    stack: Vec<Item>,
    marks: Vec<usize>,
    memo: HashMap<u32, Item>,
    /// Memo keys of the lists and dicts still being filled, by their place
    /// on the stack (a set: a key given again elsewhere leaves in one step).
    pending: BTreeMap<usize, HashSet<u32>>,
    /// The place of each of those keys.
    pending_at: HashMap<u32, usize>,
    /// Memo keys of finished lists and dicts.
    shared: HashMap<u32, Item>,
    made: u64,
    budget: u64,
    storages: &'a mut S,
    what: &'a str,
    profile: Profile,
}

/// Unpickles `data` (the `data.pkl` record) into a [`Value`].
pub(super) fn read<S: Storages>(data: &[u8], storages: &mut S, what: &str) -> Result<Value> {
    read_as(data, storages, what, Profile::Weights)
}

/// A storage reference where none belongs (a `.metadata` file's pickle).
struct NoStorages;

impl Storages for NoStorages {
    fn storage(&mut self, s: &StorageRef) -> Result<Rc<Tensor>> {
        Err(Error::format(format!("storage {} in a pickle that holds no tensors", s.key)))
    }
}

/// Unpickles a `torch.distributed.checkpoint` `.metadata` file: the
/// weights subset plus its dataclasses, each read as a dict of its fields
/// with a `"__class__"` entry naming it (and `"__state__"` holding a tuple
/// state, as `TensorProperties` pickles itself).
pub(super) fn read_dcp_metadata(data: &[u8], what: &str) -> Result<Value> {
    read_as(data, &mut NoStorages, what, Profile::DcpMetadata)
}

fn read_as<S: Storages>(data: &[u8], storages: &mut S, what: &str, profile: Profile) -> Result<Value> {
    let mut r = Reader {
        data,
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        pending: BTreeMap::new(),
        pending_at: HashMap::new(),
        shared: HashMap::new(),
        made: 0,
        budget: value_budget(data.len()),
        storages,
        what,
        profile,
    };
    let top = r.run()?;
    to_value(top)
}

impl<S: Storages> Reader<'_, S> {
    fn bad(&self, why: impl std::fmt::Display) -> Error {
        Error::format(format!("{}: pickle at byte {}: {why}", self.what, self.at))
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.data.len()).ok_or_else(|| self.bad("truncated"))?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default()))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }
    fn line(&mut self) -> Result<String> {
        let rest = &self.data[self.at..];
        let n = rest.iter().position(|b| *b == b'\n').ok_or_else(|| self.bad("unterminated line"))?;
        let s = std::str::from_utf8(&rest[..n]).map_err(|_| self.bad("a name is not UTF-8"))?.to_owned();
        self.at += n + 1;
        Ok(s)
    }
    fn string(&mut self, n: u64) -> Result<Item> {
        let n = usize::try_from(n).map_err(|_| self.bad("string too long"))?;
        let not_utf8 = self.bad("a string is not UTF-8");
        let s = std::str::from_utf8(self.take(n)?).map_err(|_| not_utf8)?;
        Ok(Item::Str(Rc::from(s)))
    }

    /// Counts `n` values against the bound.
    fn spend(&mut self, n: u64) -> Result<()> {
        self.made = self.made.saturating_add(n);
        if self.made > self.budget {
            return Err(self.bad(format!(
                "more than {} values for a pickle of {} bytes",
                self.budget,
                self.data.len()
            )));
        }
        Ok(())
    }

    /// Pushes `item`, counting its values against the bound.
    fn push(&mut self, item: Item) -> Result<()> {
        let s = item.shape();
        self.spend(s.values)?;
        if s.depth > MAX_DEPTH {
            return Err(self.bad(format!("containers nested deeper than {MAX_DEPTH}")));
        }
        if self.stack.len() >= MAX_STACK {
            return Err(self.bad(format!("more than {MAX_STACK} items on the stack at once")));
        }
        self.stack.push(item);
        Ok(())
    }
    fn pop(&mut self) -> Result<Item> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.bad("stack underflow"));
        }
        let item = self.stack.pop().ok_or_else(|| self.bad("stack underflow"))?;
        let at = self.stack.len();
        Ok(match self.pending.remove(&at) {
            Some(keys) => self.finish(item, keys),
            None => item,
        })
    }

    /// MARK: counted as a value, at most [`MAX_MARKS`] open at once.
    fn mark(&mut self) -> Result<()> {
        if self.marks.len() >= MAX_MARKS {
            return Err(self.bad(format!("more than {MAX_MARKS} MARKs open at once")));
        }
        self.spend(1)?;
        self.marks.push(self.stack.len());
        Ok(())
    }

    /// A memoized list or dict leaves the stack finished: the memo keeps it
    /// (shared) for later BINGETs.
    fn finish(&mut self, item: Item, keys: HashSet<u32>) -> Item {
        let shape = item.shape();
        let shared = Item::Shared(Rc::new(item), shape);
        for k in keys {
            self.pending_at.remove(&k);
            self.shared.insert(k, shared.clone());
        }
        shared
    }
    fn top(&mut self) -> Result<&mut Item> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.bad("stack underflow"));
        }
        let bad = self.bad("stack underflow");
        self.stack.last_mut().ok_or(bad)
    }
    /// The items since the last MARK, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Item>> {
        let m = self.marks.pop().ok_or_else(|| self.bad("no MARK"))?;
        Ok(self.take_from(m))
    }

    /// The top `n` items (the caller checked they are above the mark).
    fn take_top(&mut self, n: usize) -> Vec<Item> {
        let m = self.stack.len() - n;
        self.take_from(m)
    }

    /// The items from stack place `m` on, memoized lists, sets and dicts
    /// among them finished (a TUPLE1 of a memoized list, as protocol 2
    /// writes `set([...])`'s arguments).
    fn take_from(&mut self, m: usize) -> Vec<Item> {
        let mut items = self.stack.split_off(m);
        for (at, keys) in self.pending.split_off(&m) {
            if let Some(slot) = items.get_mut(at - m) {
                let item = std::mem::replace(slot, Item::None);
                *slot = self.finish(item, keys);
            }
        }
        items
    }

    fn tuple(&mut self, items: Vec<Item>) -> Result<()> {
        let s = container_shape(items.iter().map(Item::shape));
        self.push(Item::Tuple(Rc::new(items), s))
    }

    fn memo_get(&mut self, key: u32) -> Result<()> {
        // A shared list or dict counts its values again, as a tuple does.
        if let Some(item) = self.shared.get(&key).cloned() {
            return self.push(item);
        }
        // Still on the stack: it is finished from here on (a later APPEND
        // or SETITEM to it, as a list that contains itself needs, is refused).
        if let Some(at) = self.pending_at.get(&key).copied() {
            let keys = self.pending.remove(&at).unwrap_or_default();
            if let Some(slot) = self.stack.get_mut(at) {
                let item = std::mem::replace(slot, Item::None);
                let shared = self.finish(item, keys);
                self.stack[at] = shared.clone();
                return self.push(shared);
            }
        }
        let item = self.memo.get(&key).cloned().ok_or_else(|| self.bad(format!("memo key {key} unknown")))?;
        self.push(item)
    }
    /// Entries in the memo: each key is in one of its three maps.
    fn memo_len(&self) -> usize {
        self.memo.len() + self.shared.len() + self.pending_at.len()
    }

    /// PUT, BINPUT, LONG_BINPUT, MEMOIZE: each counts as a value, and the
    /// memo holds at most [`MAX_MEMO`] entries.
    fn memo_put(&mut self, key: u32) -> Result<()> {
        self.spend(1)?;
        self.shared.remove(&key);
        self.memo.remove(&key);
        if let Some(at) = self.pending_at.remove(&key) {
            if let Some(keys) = self.pending.get_mut(&at) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.pending.remove(&at);
                }
            }
        }
        if self.memo_len() >= MAX_MEMO {
            return Err(self.bad(format!("the memo would hold more than {MAX_MEMO} entries")));
        }
        // Lists and dicts are filled after this: the memo gets them when
        // they leave the stack.
        let at = self.stack.len().checked_sub(1).ok_or_else(|| self.bad("MEMOIZE on an empty stack"))?;
        let item = match self.top()? {
            Item::List(..) | Item::Set(..) | Item::Dict(..) => {
                self.pending.entry(at).or_default().insert(key);
                self.pending_at.insert(key, at);
                return Ok(());
            }
            other => other.clone(),
        };
        self.memo.insert(key, item);
        Ok(())
    }

    fn append(&mut self, items: Vec<Item>) -> Result<()> {
        let bad = self.bad("APPEND to something that is not a list");
        self.extend(items, false, bad)
    }
    fn add_items(&mut self, items: Vec<Item>) -> Result<()> {
        let bad = self.bad("ADDITEMS to something that is not a set");
        self.extend(items, true, bad)
    }
    /// Adds `items` to the list (or, with `set`, the set) on top.
    fn extend(&mut self, items: Vec<Item>, set: bool, bad: Error) -> Result<()> {
        match (self.top()?, set) {
            (Item::List(v, s), false) | (Item::Set(v, s), true) => {
                for it in items {
                    *s = grow(*s, it.shape());
                    v.push(it);
                }
                check_shape(*s).map_err(|w| self.bad(w))
            }
            _ => Err(bad),
        }
    }
    fn set_items(&mut self, items: Vec<Item>) -> Result<()> {
        if items.len() % 2 != 0 {
            return Err(self.bad("SETITEMS with an odd number of items"));
        }
        let bad = self.bad("SETITEM on something that is not a dict");
        match self.top()? {
            Item::Dict(v, s) => {
                let mut it = items.into_iter();
                while let (Some(k), Some(val)) = (it.next(), it.next()) {
                    *s = grow(grow(*s, k.shape()), val.shape());
                    v.push((k, val));
                }
                check_shape(*s).map_err(|w| self.bad(w))
            }
            _ => Err(bad),
        }
    }

    fn reduce(&mut self) -> Result<()> {
        let args = self.pop()?;
        let callable = self.pop()?;
        let Item::Tuple(args, _) = args else { return Err(self.bad("REDUCE arguments are not a tuple")) };
        let item = match callable {
            Item::Global(Global::OrderedDict) if args.is_empty() => {
                Item::Dict(Vec::new(), Shape { values: 1, depth: 1 })
            }
            // Counter() or Counter({...}) (MultiStepLR's milestones): a dict.
            Item::Global(Global::Counter) if args.is_empty() => Item::Dict(Vec::new(), Shape { values: 1, depth: 1 }),
            Item::Global(Global::Counter) => match args.first().map(unshared) {
                Some(d @ Item::Dict(..)) if args.len() == 1 => d.clone(),
                _ => return Err(self.bad("Counter takes at most one dict")),
            },
            Item::Global(Global::Device) => match args.as_slice() {
                [Item::Str(kind)] => Item::Str(Rc::clone(kind)),
                [Item::Str(kind), Item::Int(i)] => Item::Str(Rc::from(format!("{kind}:{i}"))),
                _ => return Err(self.bad("torch.device takes a type and an optional index")),
            },
            Item::Global(Global::Size) => match args.first() {
                Some(Item::Tuple(t, s)) if args.len() == 1 => Item::Tuple(Rc::clone(t), *s),
                _ => return Err(self.bad("torch.Size takes one tuple")),
            },
            Item::Global(Global::RebuildTensorV2) => Item::Tensor(Rc::new(self.rebuild_tensor(&args)?)),
            Item::Global(Global::RebuildParameter) => match args.first() {
                Some(Item::Tensor(t)) => Item::Tensor(Rc::clone(t)),
                _ => return Err(self.bad("_rebuild_parameter takes a tensor")),
            },
            Item::Global(Global::CodecsEncode) => match args.as_slice() {
                [Item::Str(text), Item::Str(codec)] if &**codec == "latin1" || &**codec == "latin-1" => {
                    let bytes: Option<Vec<u8>> = text.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
                    let bytes = bytes.ok_or_else(|| self.bad("_codecs.encode: a character beyond latin-1"))?;
                    Item::Bytes(Rc::from(bytes))
                }
                _ => return Err(self.bad("_codecs.encode takes a string and \"latin1\"")),
            },
            Item::Global(Global::Layout) => match args.as_slice() {
                [Item::Str(name)] => Item::Str(Rc::clone(name)),
                _ => return Err(self.bad("_get_layout takes a name")),
            },
            Item::Global(Global::MemFormat) => match args.as_slice() {
                [Item::Int(n)] => Item::Int(*n),
                _ => return Err(self.bad("_MEM_FORMAT_ENCODING takes a number")),
            },
            Item::Global(Global::PathLike) => {
                let parts: Option<Vec<&str>> =
                    args.iter().map(|a| if let Item::Str(s) = a { Some(&**s) } else { None }).collect();
                let parts = parts.ok_or_else(|| self.bad("a path made of something other than strings"))?;
                Item::Str(Rc::from(parts.join("/")))
            }
            Item::Global(Global::Set) => {
                let items: Vec<Item> = match args.as_slice() {
                    [] => Vec::new(),
                    [one] => match unshared(one) {
                        Item::List(v, _) | Item::Set(v, _) => v.clone(),
                        Item::Tuple(t, _) => t.to_vec(),
                        _ => return Err(self.bad("set takes a list")),
                    },
                    _ => return Err(self.bad("set takes at most one list")),
                };
                let s = container_shape(items.iter().map(Item::shape));
                Item::Set(items, s)
            }
            other => return Err(self.bad(format!("calling {other:?} is outside the safe subset"))),
        };
        self.push(item)
    }

    /// NEWOBJ of a `.metadata` dataclass with no arguments: a dict holding
    /// only its `__class__`, which BUILD fills.
    fn new_object(&mut self) -> Result<()> {
        let args = self.pop()?;
        let class = self.pop()?;
        match (class, args) {
            (Item::Global(Global::DcpClass(name)), Item::Tuple(a, _)) if a.is_empty() => {
                let entry = (Item::Str(Rc::from(CLASS_KEY)), Item::Str(Rc::from(name)));
                self.push(Item::Dict(vec![entry], Shape { values: 3, depth: 1 }))
            }
            (other, _) => Err(self.bad(format!("NEWOBJ of {other:?} is outside the safe subset"))),
        }
    }

    /// BUILD: a `.metadata` dataclass takes its fields (a dict state) or
    /// its tuple state (`__state__`); an OrderedDict's attributes (a
    /// state_dict's `_metadata`) are accepted and dropped, as nothing
    /// reads them. Anything else is refused.
    fn build(&mut self) -> Result<()> {
        let state = self.pop()?;
        let bad = self.bad("BUILD of something other than a dict's attributes or a checkpoint dataclass");
        let target = self.top()?;
        let object = matches!(target, Item::Dict(v, _) if v.first().is_some_and(|(k, _)| matches!(k, Item::Str(s) if &**s == CLASS_KEY)));
        match (&mut *target, unshared(&state)) {
            (Item::Dict(v, s), Item::Dict(fields, _)) if object => {
                for (k, x) in fields {
                    *s = grow(grow(*s, k.shape()), x.shape());
                    v.push((k.clone(), x.clone()));
                }
            }
            (Item::Dict(v, s), Item::Tuple(..)) if object => {
                *s = grow(*s, state.shape());
                v.push((Item::Str(Rc::from(STATE_KEY)), state.clone()));
            }
            (Item::Dict(..), Item::Dict(..)) => return Ok(()),
            _ => return Err(bad),
        }
        let s = target.shape();
        check_shape(s).map_err(|w| self.bad(w))
    }

    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    /// hooks[, metadata])`: a view of the storage, checked to lie inside it.
    fn rebuild_tensor(&mut self, args: &[Item]) -> Result<Tensor> {
        let (Some(Item::Storage(s)), Some(Item::Int(offset)), Some(Item::Tuple(size, _)), Some(Item::Tuple(stride, _))) =
            (args.first(), args.get(1), args.get(2), args.get(3))
        else {
            return Err(self.bad("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...)"));
        };
        let ints = |t: &[Item]| -> Option<Vec<i64>> {
            t.iter().map(|i| if let Item::Int(v) = i { Some(*v) } else { None }).collect()
        };
        let (size, stride) = match (ints(size), ints(stride)) {
            (Some(a), Some(b)) if a.len() == b.len() => (a, b),
            _ => return Err(self.bad("a tensor's size and stride are not matching lists of integers")),
        };
        // The largest element index the view reaches must lie in the storage.
        let mut last: i64 = *offset;
        let mut empty = false;
        for (d, st) in size.iter().zip(&stride) {
            if *d < 0 || *st < 0 {
                return Err(self.bad("a negative size or stride"));
            }
            empty |= *d == 0;
            last = (d - 1)
                .max(0)
                .checked_mul(*st)
                .and_then(|x| x.checked_add(last))
                .ok_or_else(|| self.bad("size overflows"))?;
        }
        if *offset < 0 || (!empty && last as u64 >= s.numel) {
            return Err(self.bad(format!("a tensor of size {size:?} reaches past its storage of {} elements", s.numel)));
        }
        if size.iter().try_fold(1i64, |n, d| n.checked_mul(*d)).is_none() {
            return Err(self.bad(format!("a tensor of size {size:?} has more elements than 2^63")));
        }
        let base = self.storages.storage(s)?;
        if base.numel() as u64 != s.numel {
            return Err(self.bad(format!("storage {} is read with two sizes", s.key)));
        }
        if empty {
            return Ok(Tensor::f_zeros(&size, (s.kind, tch::Device::Cpu))?);
        }
        // A view, as torch.load gives: no copy in proportion to its size.
        Ok(base.f_as_strided(&size, &stride, *offset)?)
    }

    fn persistent_load(&mut self) -> Result<()> {
        let pid = self.pop()?;
        let Item::Tuple(t, _) = pid else { return Err(self.bad("a persistent id that is not a tuple")) };
        match t.as_slice() {
            [Item::Str(tag), Item::Global(Global::Storage(kind)), Item::Str(key), Item::Str(_location), Item::Int(numel)]
                if &**tag == "storage" && *numel >= 0 =>
            {
                let s = StorageRef { kind: *kind, key: key.to_string(), numel: *numel as u64 };
                self.push(Item::Storage(Rc::new(s)))
            }
            _ => Err(self.bad("a persistent id other than a storage")),
        }
    }

    fn run(&mut self) -> Result<Item> {
        loop {
            let op = self.byte()?;
            match op {
                0x80 => {
                    let p = self.byte()?;
                    if p > 5 {
                        return Err(self.bad(format!("pickle protocol {p}")));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME length: frames are read as one stream
                }
                b'.' => {
                    let top = self.pop()?;
                    if !self.stack.is_empty() || !self.marks.is_empty() {
                        return Err(self.bad("values left on the stack at STOP"));
                    }
                    return Ok(top);
                }
                b'(' => self.mark()?,
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'N' => self.push(Item::None)?,
                0x88 => self.push(Item::Bool(true))?,
                0x89 => self.push(Item::Bool(false))?,
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Item::Int(i64::from(v)))?
                }
                b'K' => {
                    let v = self.byte()?;
                    self.push(Item::Int(i64::from(v)))?
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Item::Int(i64::from(v)))?
                }
                0x8a => {
                    let n = usize::from(self.byte()?);
                    if n > 8 {
                        return Err(self.bad("an integer beyond 64 bits"));
                    }
                    let b = self.take(n)?;
                    let mut v: i64 = if b.last().is_some_and(|x| x & 0x80 != 0) { -1 } else { 0 };
                    for (i, x) in b.iter().enumerate() {
                        v &= !(0xFF << (8 * i));
                        v |= i64::from(*x) << (8 * i);
                    }
                    self.push(Item::Int(v))?
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.take(8)?.try_into().unwrap_or_default());
                    self.push(Item::Float(v))?
                }
                b'X' => {
                    let n = self.u32()?;
                    let s = self.string(u64::from(n))?;
                    self.push(s)?
                }
                0x8c => {
                    let n = self.byte()?;
                    let s = self.string(u64::from(n))?;
                    self.push(s)?
                }
                0x8d => {
                    let n = self.u64()?;
                    let s = self.string(n)?;
                    self.push(s)?
                }
                b'C' | b'B' | 0x8e => {
                    let n = match op {
                        b'C' => u64::from(self.byte()?),
                        b'B' => u64::from(self.u32()?),
                        _ => self.u64()?,
                    };
                    let n = usize::try_from(n).map_err(|_| self.bad("bytes too long"))?;
                    let b = Rc::from(self.take(n)?);
                    self.push(Item::Bytes(b))?
                }
                0x8f => self.push(Item::Set(Vec::new(), Shape { values: 1, depth: 1 }))?,
                0x90 => {
                    let items = self.pop_mark()?;
                    self.add_items(items)?
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    let s = container_shape(items.iter().map(Item::shape));
                    self.push(Item::Set(items, s))?
                }
                b']' => self.push(Item::List(Vec::new(), Shape { values: 1, depth: 1 }))?,
                b'}' => self.push(Item::Dict(Vec::new(), Shape { values: 1, depth: 1 }))?,
                b')' => self.tuple(Vec::new())?,
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.bad("stack underflow"));
                    }
                    let items = self.take_top(n);
                    self.tuple(items)?
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.tuple(items)?
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Item::List(Vec::new(), Shape { values: 1, depth: 1 }))?;
                    self.append(items)?
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Item::Dict(Vec::new(), Shape { values: 1, depth: 1 }))?;
                    self.set_items(items)?
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = global(&module, &name, self.profile).map_err(|e| self.bad(e.message))?;
                    self.push(Item::Global(g))?
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Item::Str(m), Item::Str(n)) = (module, name) else {
                        return Err(self.bad("STACK_GLOBAL needs two strings"));
                    };
                    let g = global(&m, &n, self.profile).map_err(|e| self.bad(e.message))?;
                    self.push(Item::Global(g))?
                }
                b'R' => self.reduce()?,
                0x81 if self.profile == Profile::DcpMetadata => self.new_object()?,
                b'b' => self.build()?,
                b'Q' => self.persistent_load()?,
                b'q' => {
                    let k = self.byte()?;
                    self.memo_put(u32::from(k))?
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?
                }
                0x94 => {
                    let k = u32::try_from(self.memo_len()).map_err(|_| self.bad("memo too large"))?;
                    self.memo_put(k)?
                }
                b'h' => {
                    let k = self.byte()?;
                    self.memo_get(u32::from(k))?
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(k)?
                }
                other => return Err(self.bad(format!("opcode 0x{other:02x} is outside the safe subset"))),
            }
        }
    }
}

/// The entry naming the dataclass a `.metadata` dict was read from.
pub(super) const CLASS_KEY: &str = "__class__";
/// The entry holding a dataclass's tuple state.
pub(super) const STATE_KEY: &str = "__state__";

/// The list or dict a shared item holds (any other item as it is).
fn unshared(item: &Item) -> &Item {
    match item {
        Item::Shared(inner, _) => inner,
        other => other,
    }
}

fn container_shape(children: impl Iterator<Item = Shape>) -> Shape {
    children.fold(Shape { values: 1, depth: 1 }, grow)
}

fn grow(s: Shape, child: Shape) -> Shape {
    Shape { values: s.values.saturating_add(child.values), depth: s.depth.max(child.depth.saturating_add(1)) }
}

fn check_shape(s: Shape) -> std::result::Result<(), String> {
    if s.values > MAX_VALUES {
        Err(format!("more than {MAX_VALUES} values"))
    } else if s.depth > MAX_DEPTH {
        Err(format!("containers nested deeper than {MAX_DEPTH}"))
    } else {
        Ok(())
    }
}

/// The finished value (its size and depth are bounded by the reader).
fn to_value(item: Item) -> Result<Value> {
    Ok(match item {
        Item::None => Value::None,
        Item::Bool(b) => Value::Bool(b),
        Item::Int(i) => Value::Int(i),
        Item::Float(f) => Value::Float(f),
        Item::Str(s) => Value::Str(s.to_string()),
        Item::Bytes(b) => Value::Bytes(b.to_vec()),
        Item::Set(v, _) => Value::Set(v.into_iter().map(to_value).collect::<Result<_>>()?),
        Item::Tuple(t, _) => Value::Tuple(t.iter().cloned().map(to_value).collect::<Result<_>>()?),
        Item::List(v, _) => Value::List(v.into_iter().map(to_value).collect::<Result<_>>()?),
        Item::Dict(v, _) => {
            let mut seen = std::collections::HashSet::new();
            for (k, _) in &v {
                if let Item::Str(s) = k {
                    if !seen.insert(Rc::clone(s)) {
                        return Err(Error::format(format!("a dict has the key {s:?} twice")));
                    }
                }
            }
            Value::Dict(v.into_iter().map(|(k, v)| Ok((to_value(k)?, to_value(v)?))).collect::<Result<_>>()?)
        }
        Item::Shared(inner, _) => to_value(Rc::try_unwrap(inner).unwrap_or_else(|rc| (*rc).clone()))?,
        Item::Tensor(t) => Value::Tensor(t.shallow_clone()),
        Item::Global(Global::Dtype(name)) => Value::Str(format!("torch.{name}")),
        Item::Global(_) | Item::Storage(_) => {
            return Err(Error::format("a pickle left a bare global or storage where a value belongs"))
        }
    })
}

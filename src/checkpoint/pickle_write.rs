//! Writes a [`Value`] as the pickle of a `torch.save` file (protocol 2,
//! what `torch.save` writes): tensors as `_rebuild_tensor_v2` of a storage
//! whose bytes go to their own record, which the caller stores.
use super::torch_save::Value;
use crate::error::{Error, Result};
use tch::{Device, Kind, Tensor};

/// The pickle bytes and the storages' records (key, tensor, elements), in
/// order. A storage's tensor is the value's own, detached, on its device:
/// the caller copies each to the host as it writes it, one at a time, with
/// the contiguous strides the pickle records ([`with_host_bytes`]).
pub(super) struct Written {
    pub pickle: Vec<u8>,
    pub storages: Vec<(String, Tensor, usize)>,
}

/// The strides of a contiguous tensor of `size`, as torch computes them.
/// Items per APPENDS or SETITEMS, as Python's pickler batches them.
const BATCH: usize = 1000;

fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; size.len()];
    for i in (0..size.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(size[i + 1].max(1));
    }
    strides
}

/// Calls `f` with the bytes of a storage's tensor (which the pickle
/// recorded with `numel` elements): a contiguous host copy, made for this
/// tensor alone, so a checkpoint's tensors are on the host one at a time
/// and no other thread's write to a tensor can reach bytes being written.
pub(super) fn with_host_bytes<R>(t: &Tensor, numel: usize, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    if t.numel() != numel {
        return Err(Error::state(format!(
            "torch.save: a tensor changed size while it was saved ({numel} elements, now {})",
            t.numel()
        )));
    }
    crate::nn::meta_init::refuse_meta(t, "torch.save")?;
    let kind = t.f_kind()?;
    let mut bytes = vec![0u8; numel * kind.elt_size_in_bytes()];
    if numel > 0 {
        let host = tch::no_grad(|| t.f_to_device(Device::Cpu)?.f_contiguous())?;
        host.f_copy_data_u8(&mut bytes, numel)?;
    }
    f(&bytes)
}

/// Pickles `value`.
pub(super) fn write(value: &Value) -> Result<Written> {
    let mut w = Writer { out: vec![0x80, 2], storages: Vec::new() };
    w.value(value, 0)?;
    w.out.push(b'.');
    Ok(Written { pickle: w.out, storages: w.storages })
}

struct Writer {
    out: Vec<u8>,
    storages: Vec<(String, Tensor, usize)>,
}

/// Deepest nesting written (what the reader accepts).
const MAX_DEPTH: usize = 64;

fn storage_name(kind: Kind) -> Result<&'static str> {
    Ok(match kind {
        Kind::Float => "FloatStorage",
        Kind::Double => "DoubleStorage",
        Kind::Half => "HalfStorage",
        Kind::BFloat16 => "BFloat16Storage",
        Kind::Int64 => "LongStorage",
        Kind::Int => "IntStorage",
        Kind::Int16 => "ShortStorage",
        Kind::Int8 => "CharStorage",
        Kind::Uint8 => "ByteStorage",
        Kind::Bool => "BoolStorage",
        other => return Err(Error::dtype(format!("torch.save: tensors of {other:?} are not written"))),
    })
}

/// GLOBAL `module.name` (protocol 2's text form).
pub(super) fn put_global(out: &mut Vec<u8>, module: &str, name: &str) {
    out.push(b'c');
    out.extend_from_slice(module.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
}

impl Writer {
    fn global(&mut self, module: &str, name: &str) {
        put_global(&mut self.out, module, name);
    }

    fn str(&mut self, s: &str) -> Result<()> {
        let n = u32::try_from(s.len()).map_err(|_| Error::invalid("torch.save: a string above 4 GiB"))?;
        self.out.push(b'X');
        self.out.extend_from_slice(&n.to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn int(&mut self, v: i64) {
        if let Ok(small) = i32::try_from(v) {
            self.out.push(b'J');
            self.out.extend_from_slice(&small.to_le_bytes());
        } else {
            self.out.extend_from_slice(&[0x8a, 8]);
            self.out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn int_tuple(&mut self, values: &[i64]) {
        self.out.push(b'(');
        for v in values {
            self.int(*v);
        }
        self.out.push(b't');
    }

    fn empty_ordered_dict(&mut self) {
        self.global("collections", "OrderedDict");
        self.out.extend_from_slice(b")R");
    }

    fn tensor(&mut self, t: &Tensor) -> Result<()> {
        let t = t.f_detach()?;
        let kind = t.f_kind()?;
        let storage = storage_name(kind)?;
        let numel = t.numel();
        let size = t.size();
        let stride = contiguous_strides(&size);
        let key = self.storages.len().to_string();
        self.storages.push((key.clone(), t, numel));
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.out.push(b'(');
        // The persistent id ('storage', torch.<Kind>Storage, key, 'cpu', numel).
        self.out.push(b'(');
        self.str("storage")?;
        self.global("torch", storage);
        self.str(&key)?;
        self.str("cpu")?;
        self.int(numel as i64);
        self.out.extend_from_slice(b"tQ");
        self.int(0);
        self.int_tuple(&size);
        self.int_tuple(&stride);
        self.out.push(0x89); // requires_grad False
        self.empty_ordered_dict(); // backward hooks
        self.out.extend_from_slice(b"tR");
        Ok(())
    }

    /// APPENDS of `items` to the list on the stack, in batches of
    /// [`BATCH`] as Python's pickler writes them, so a reader's stack holds
    /// one batch at a time.
    fn appends(&mut self, items: &[Value], depth: usize) -> Result<()> {
        for batch in items.chunks(BATCH) {
            self.out.push(b'(');
            for it in batch {
                self.value(it, depth + 1)?;
            }
            self.out.push(b'e');
        }
        Ok(())
    }

    fn value(&mut self, v: &Value, depth: usize) -> Result<()> {
        if depth >= MAX_DEPTH {
            return Err(Error::invalid(format!("torch.save: values nested deeper than {MAX_DEPTH}")));
        }
        match v {
            Value::None => self.out.push(b'N'),
            Value::Bool(b) => self.out.push(if *b { 0x88 } else { 0x89 }),
            Value::Int(i) => self.int(*i),
            Value::Float(f) => {
                self.out.push(b'G');
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) => self.str(s)?,
            // As protocol 2 writes them (what torch.save writes):
            // _codecs.encode(latin-1 text, "latin1") and set([...]).
            Value::Bytes(b) => {
                self.global("_codecs", "encode");
                self.out.push(b'(');
                let text: String = b.iter().map(|x| char::from(*x)).collect();
                self.str(&text)?;
                self.str("latin1")?;
                self.out.extend_from_slice(b"tR");
            }
            Value::Set(items) => {
                if items.iter().any(|k| matches!(k, Value::List(_) | Value::Dict(_) | Value::Set(_) | Value::Tensor(_)))
                {
                    return Err(Error::invalid(
                        "torch.save: a set's items must be hashable (not a list, dict, set or tensor)",
                    ));
                }
                self.global("__builtin__", "set");
                self.out.extend_from_slice(b"(]");
                self.appends(items, depth)?;
                self.out.extend_from_slice(b"tR");
            }
            Value::Tuple(items) => {
                self.out.push(b'(');
                for it in items {
                    self.value(it, depth + 1)?;
                }
                self.out.push(b't');
            }
            Value::List(items) => {
                self.out.push(b']');
                self.appends(items, depth)?;
            }
            Value::Dict(entries) => {
                self.out.push(b'}');
                for batch in entries.chunks(BATCH) {
                    self.out.push(b'(');
                    for (k, val) in batch {
                        if matches!(k, Value::List(_) | Value::Dict(_) | Value::Set(_) | Value::Tensor(_)) {
                            return Err(Error::invalid(
                                "torch.save: a dict key must be hashable (not a list, dict, set or tensor)",
                            ));
                        }
                        self.value(k, depth + 1)?;
                        self.value(val, depth + 1)?;
                    }
                    self.out.push(b'u');
                }
            }
            Value::Tensor(t) => self.tensor(t)?,
        }
        Ok(())
    }
}

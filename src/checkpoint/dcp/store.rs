//! The data files of a sharded checkpoint directory: each rank's
//! `__<rank>_0.distcp`, a run of `torch.save` archives (one per tensor
//! chunk or pickled value) whose offsets and lengths the `.metadata` file
//! records; read back piece by piece, never more than the file holds.
use super::cut::Span;
use super::metadata::{Chunk, Location};
use crate::checkpoint::torch_save::{self, Value};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};

/// The data file rank `rank` writes.
pub(crate) fn rank_file(rank: usize) -> String {
    format!("__{rank}_0.distcp")
}

/// Whether `name` is a data file of a sharded checkpoint (`__<n>_<m>.distcp`).
pub(crate) fn is_data_file(name: &str) -> bool {
    let Some(stem) = name.strip_prefix("__").and_then(|s| s.strip_suffix(".distcp")) else { return false };
    let mut parts = stem.split('_');
    let digits = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    digits(parts.next()) && digits(parts.next()) && parts.next().is_none()
}

/// Writes `pieces` (each a value to `torch.save`) one after another into
/// `path`, atomically; returns each piece's offset and length.
pub(crate) fn write_pieces(path: &Path, pieces: &[&Value]) -> Result<Vec<(u64, u64)>> {
    let mut places = Vec::with_capacity(pieces.len());
    crate::fs_safe::write_atomic_with(path, |file| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut at = 0u64;
        for piece in pieces {
            let bytes = torch_save::to_bytes(piece)?;
            out.write_all(&bytes).map_err(|e| Error::io(format!("writing {}: {e}", path.display())))?;
            places.push((at, bytes.len() as u64));
            at += bytes.len() as u64;
        }
        out.flush().map_err(|e| Error::io(format!("writing {}: {e}", path.display())))?;
        Ok(())
    })?;
    Ok(places)
}

/// The data files of one checkpoint directory, opened as they are needed.
pub(crate) struct DataFiles {
    dir: PathBuf,
    open: HashMap<String, crate::fs_safe::RegularFile>,
    /// The bytes of each file the items read so far lie in: (end, owner)
    /// by offset, never overlapping. torch's writer stores every item in
    /// bytes of its own; metadata that points two items at the same bytes
    /// could make a small file fill any amount of memory, and is refused.
    claimed: HashMap<String, BTreeMap<u64, (u64, String)>>,
}

impl DataFiles {
    /// The files of `dir`.
    pub(crate) fn new(dir: &Path) -> Self {
        DataFiles { dir: dir.to_path_buf(), open: HashMap::new(), claimed: HashMap::new() }
    }

    /// Claims the bytes of `items` (checked to lie in their files) for
    /// `owner`, one entry of the metadata: they must not overlap each other
    /// nor another entry's. An entry read again claims the same bytes.
    fn claim(&mut self, owner: &str, items: &[&Location]) -> Result<()> {
        let mut mine: Vec<(&str, u64, u64)> =
            items.iter().filter(|l| l.length > 0).map(|l| (l.file.as_str(), l.offset, l.offset + l.length)).collect();
        mine.sort_unstable();
        let shared = |file: &str, at: u64| {
            Error::format(format!("{owner}: its bytes at {at} of {file} are another item's as well"))
        };
        if let Some(w) = mine.windows(2).find(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2) {
            return Err(shared(w[1].0, w[1].1));
        }
        for (file, lo, hi) in mine {
            let ranges = self.claimed.entry(file.to_string()).or_default();
            // The claimed ranges are disjoint: their ends grow with their
            // starts, so only those just before `hi` can reach past `lo`.
            for (start, (end, who)) in ranges.range(..hi).rev() {
                if *end <= lo {
                    break;
                }
                if (*start, *end, who.as_str()) != (lo, hi, owner) {
                    return Err(shared(file, lo));
                }
            }
            ranges.insert(lo, (hi, owner.to_string()));
        }
        Ok(())
    }

    /// The `torch.save` archive at `at`, the value of the entry `fqn`,
    /// read (its bytes claimed, see [`DataFiles::claim`]).
    pub(crate) fn entry_value(&mut self, fqn: &str, at: &Location) -> Result<Value> {
        self.check(at)?;
        self.claim(&format!("{}: {fqn:?}", self.dir.display()), &[at])?;
        self.value(at)
    }

    fn file(&mut self, name: &str) -> Result<&crate::fs_safe::RegularFile> {
        if !self.open.contains_key(name) {
            let path = self.dir.join(name);
            let f = crate::fs_safe::open_regular(&path)
                .map_err(|e| Error::io(format!("opening {}: {e}", path.display())))?;
            self.open.insert(name.to_string(), f);
        }
        Ok(&self.open[name])
    }

    /// Checks that `at` lies inside its file.
    pub(crate) fn check(&mut self, at: &Location) -> Result<()> {
        let dir = self.dir.display().to_string();
        let f = self.file(&at.file)?;
        match at.offset.checked_add(at.length) {
            Some(end) if end <= f.size() => Ok(()),
            _ => Err(Error::format(format!(
                "{dir}: an item at {} + {} bytes lies past the end of {} ({} bytes)",
                at.offset,
                at.length,
                at.file,
                f.size()
            ))),
        }
    }

    /// The `torch.save` archive at `at`, read.
    pub(crate) fn value(&mut self, at: &Location) -> Result<Value> {
        self.check(at)?;
        let what = format!("{}/{} at byte {}", self.dir.display(), at.file, at.offset);
        let len = usize::try_from(at.length).map_err(|_| Error::format(format!("{what}: item too large")))?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).map_err(|_| {
            Error::new(crate::error::ErrorCode::OutOfMemory, format!("{what}: {len} bytes cannot be allocated"))
        })?;
        buf.resize(len, 0);
        let f = self.file(&at.file)?;
        f.file().read_exact_at(&mut buf, at.offset).map_err(|e| Error::io(format!("reading {what}: {e}")))?;
        torch_save::read_bytes(&buf, &what)
    }

    /// Checks the chunks of the tensor `fqn` of `kind` and `size`: they
    /// must lie inside the tensor, not overlap, cover it exactly, and their
    /// stored bytes (checked against the files, and no other item's) must
    /// be at least the tensor's, so nothing is allocated for a size the
    /// files do not hold.
    fn check_chunks(&mut self, what: &str, kind: Kind, size: &[i64], chunks: &[Chunk]) -> Result<()> {
        let bad = |why: String| Error::format(format!("{what}: {why}"));
        let numel = volume(size).ok_or_else(|| bad(format!("size {size:?} overflows")))?;
        if chunks.len() > MAX_CHUNKS {
            return Err(bad(format!("more than {MAX_CHUNKS} chunks")));
        }
        let mut covered = 0u64;
        let mut stored = 0u64;
        for c in chunks {
            if c.offsets.len() != size.len() || c.sizes.len() != size.len() {
                return Err(bad(format!("a chunk at {:?} of {:?} does not match its rank", c.offsets, c.sizes)));
            }
            let inside =
                c.offsets.iter().zip(&c.sizes).zip(size).all(|((o, s), d)| o.checked_add(*s).is_some_and(|e| e <= *d));
            if !inside {
                return Err(bad(format!("a chunk at {:?} of {:?} lies outside {size:?}", c.offsets, c.sizes)));
            }
            covered = covered.saturating_add(volume(&c.sizes).unwrap_or(u64::MAX));
            self.check(&c.at)?;
            stored = stored.saturating_add(c.at.length);
        }
        for (i, a) in chunks.iter().enumerate() {
            for b in &chunks[i + 1..] {
                let overlap = (0..size.len())
                    .all(|d| a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d]);
                if overlap && volume(&a.sizes) != Some(0) && volume(&b.sizes) != Some(0) {
                    return Err(bad(format!("chunks at {:?} and {:?} overlap", a.offsets, b.offsets)));
                }
            }
        }
        let items: Vec<&Location> = chunks.iter().map(|c| &c.at).collect();
        self.claim(what, &items)?;
        if covered != numel {
            return Err(bad(format!("its chunks hold {covered} of its {numel} elements")));
        }
        let bytes = numel.saturating_mul(kind.elt_size_in_bytes() as u64);
        if bytes > stored {
            return Err(bad(format!("{bytes} bytes of tensor, but its chunks store only {stored}")));
        }
        Ok(())
    }

    /// The chunk `c` of a tensor read: a tensor of its sizes.
    fn chunk(&mut self, what: &str, c: &Chunk) -> Result<Tensor> {
        let Value::Tensor(t) = self.value(&c.at)? else {
            return Err(Error::format(format!("{what}: the chunk at {:?} is not a tensor", c.offsets)));
        };
        if t.size() != c.sizes {
            return Err(Error::format(format!(
                "{what}: the chunk at {:?} holds {:?}, not {:?}",
                c.offsets,
                t.size(),
                c.sizes
            )));
        }
        Ok(t)
    }

    /// The full tensor `fqn` of `kind` and `size`, put together from its
    /// chunks (checked first, see [`DataFiles::check_chunks`]).
    pub(crate) fn tensor(&mut self, fqn: &str, kind: Kind, size: &[i64], chunks: &[Chunk]) -> Result<Tensor> {
        let what = format!("{}: tensor {fqn:?}", self.dir.display());
        self.check_chunks(&what, kind, size, chunks)?;
        let full = Tensor::f_zeros(size, (kind, tch::Device::Cpu))?;
        for c in chunks {
            if volume(&c.sizes) == Some(0) {
                continue;
            }
            let t = self.chunk(&what, c)?;
            let mut view = full.shallow_clone();
            for (d, (o, s)) in c.offsets.iter().zip(&c.sizes).enumerate() {
                view = view.f_narrow(d as i64, *o, *s)?;
            }
            tch::no_grad(|| view.f_copy_(&t.f_to_kind(kind)?))?;
        }
        Ok(full)
    }

    /// The entries `span` says of the tensor `fqn` of `kind` and `size`
    /// (a 0-dim tensor counts as one entry of dimension 0), zero past its
    /// end: `size` with `span.len` at `span.dim`, what one rank of a
    /// sharded model holds of it. Only the chunks that overlap the span are
    /// read, one at a time.
    pub(crate) fn span(&mut self, fqn: &str, kind: Kind, size: &[i64], chunks: &[Chunk], span: Span) -> Result<Tensor> {
        let what = format!("{}: tensor {fqn:?}", self.dir.display());
        self.check_chunks(&what, kind, size, chunks)?;
        let full: Vec<i64> = if size.is_empty() { vec![1] } else { size.to_vec() };
        if span.first < 0 || span.len < 0 || span.dim >= full.len() {
            return Err(Error::invalid(format!(
                "{what}: entries {} + {} of dimension {}",
                span.first, span.len, span.dim
            )));
        }
        let mut shape = full.clone();
        shape[span.dim] = span.len;
        let out = Tensor::f_zeros(&shape, (kind, tch::Device::Cpu))?;
        let (dim, end) = (span.dim as i64, span.first.saturating_add(span.len));
        for c in chunks {
            if volume(&c.sizes) == Some(0) {
                continue;
            }
            // A 0-dim tensor's one chunk is entry 0.
            let (offsets, sizes) =
                if size.is_empty() { (vec![0], vec![1]) } else { (c.offsets.clone(), c.sizes.clone()) };
            let (c0, n0) = (offsets[span.dim], sizes[span.dim]);
            let (lo, hi) = (c0.max(span.first), (c0 + n0).min(end));
            if lo >= hi {
                continue;
            }
            let t = self.chunk(&what, c)?;
            let t = if size.is_empty() { t.f_reshape([1])? } else { t };
            let mut view = out.f_narrow(dim, lo - span.first, hi - lo)?;
            for (d, (o, s)) in offsets.iter().zip(&sizes).enumerate().filter(|(d, _)| *d != span.dim) {
                view = view.f_narrow(d as i64, *o, *s)?;
            }
            let piece = t.f_narrow(dim, lo - c0, hi - lo)?;
            tch::no_grad(|| view.f_copy_(&piece.f_to_kind(kind)?))?;
        }
        Ok(out)
    }
}

/// The elements of a tensor of `size` (`None` when it overflows).
fn volume(size: &[i64]) -> Option<u64> {
    size.iter().try_fold(1u64, |n, d| n.checked_mul(u64::try_from(*d).ok()?))
}

/// The most chunks one tensor may be stored as (one per rank in practice).
const MAX_CHUNKS: usize = 1 << 14;

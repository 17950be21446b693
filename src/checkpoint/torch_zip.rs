//! The zip container of `torch.save` files: uncompressed ("stored") records
//! under one top-level folder. Reading checks every size and offset against
//! the file before using it (a record can never claim more bytes than the
//! file holds) and each record's CRC-32; compressed or encrypted records are
//! refused. Writing lays records out as PyTorch does, each record's data
//! aligned to 64 bytes.
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;

const LOCAL: u32 = 0x0403_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
const END64: u32 = 0x0606_4b50;
const END64_LOCATOR: u32 = 0x0706_4b50;
/// Records' data start at multiples of this (PyTorch's alignment).
const ALIGN: usize = 64;
/// Most records an archive may hold (the central directory is bounded by
/// the file anyway; this bounds the index).
const MAX_RECORDS: usize = 1 << 20;

/// Whether `bytes` start like a zip file (a `torch.save` archive).
pub fn looks_like_zip(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == LOCAL
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A read archive: the file's bytes and where each record's data lies.
#[derive(Debug)]
pub struct ZipReader<'a> {
    bytes: &'a [u8],
    records: HashMap<String, Range<usize>>,
    /// The top-level folder every record sits in.
    prefix: String,
}

impl<'a> ZipReader<'a> {
    /// Indexes the archive in `bytes`; `what` names it in errors.
    pub fn new(bytes: &'a [u8], what: &str) -> Result<Self> {
        let bad = |why: &str| Error::format(format!("{what} is not a readable torch.save archive: {why}"));
        let (entries, cd_offset, cd_size) = Self::directory(bytes).ok_or_else(|| bad("no zip directory"))?;
        if entries > MAX_RECORDS as u64 {
            return Err(bad("too many records"));
        }
        let cd_end = cd_offset
            .checked_add(cd_size)
            .filter(|e| *e <= bytes.len() as u64)
            .ok_or_else(|| bad("directory out of range"))?;
        let mut at = cd_offset as usize;
        let mut records: HashMap<String, (Range<usize>, u32)> = HashMap::new();
        let mut prefix: Option<String> = None;
        for _ in 0..entries {
            if at as u64 >= cd_end || u32_at(bytes, at) != Some(CENTRAL) {
                return Err(bad("broken directory entry"));
            }
            let field = |off: usize| u32_at(bytes, at + off).ok_or_else(|| bad("truncated directory"));
            let flags = u16_at(bytes, at + 8).ok_or_else(|| bad("truncated directory"))?;
            let method = u16_at(bytes, at + 10).ok_or_else(|| bad("truncated directory"))?;
            let crc = field(16)?;
            let mut csize = u64::from(field(20)?);
            let mut usize_ = u64::from(field(24)?);
            let name_len = usize::from(u16_at(bytes, at + 28).ok_or_else(|| bad("truncated directory"))?);
            let extra_len = usize::from(u16_at(bytes, at + 30).ok_or_else(|| bad("truncated directory"))?);
            let comment_len = usize::from(u16_at(bytes, at + 32).ok_or_else(|| bad("truncated directory"))?);
            let mut local = u64::from(field(42)?);
            let name = bytes.get(at + 46..at + 46 + name_len).ok_or_else(|| bad("truncated name"))?;
            let name = std::str::from_utf8(name).map_err(|_| bad("a record name is not UTF-8"))?.to_owned();
            let extra = bytes
                .get(at + 46 + name_len..at + 46 + name_len + extra_len)
                .ok_or_else(|| bad("truncated extra field"))?;
            // zip64: the sizes and offset that overflowed 32 bits, in order.
            if csize == 0xFFFF_FFFF || usize_ == 0xFFFF_FFFF || local == 0xFFFF_FFFF {
                let mut values = zip64_values(extra).into_iter();
                let mut next = |v: &mut u64| -> Result<()> {
                    if *v == 0xFFFF_FFFF {
                        *v = values.next().ok_or_else(|| bad("missing zip64 sizes"))?;
                    }
                    Ok(())
                };
                next(&mut usize_)?;
                next(&mut csize)?;
                next(&mut local)?;
            }
            if flags & 1 != 0 {
                return Err(bad(&format!("record {name} is encrypted")));
            }
            if method != 0 || csize != usize_ {
                if is_torchscript_record(&name) {
                    return Err(torchscript_error(what));
                }
                return Err(bad(&format!("record {name} is compressed (torch.save stores records uncompressed)")));
            }
            let data = Self::data_range(bytes, local, usize_)
                .ok_or_else(|| bad(&format!("record {name} lies outside the file")))?;
            let top = name.split('/').next().unwrap_or_default().to_owned();
            match &prefix {
                None => prefix = Some(top),
                Some(p) if *p != top => return Err(bad("records under more than one top-level folder")),
                Some(_) => {}
            }
            if records.contains_key(&name) {
                return Err(bad(&format!("record {name} appears twice")));
            }
            records.insert(name, (data, crc));
            at += 46 + name_len + extra_len + comment_len;
        }
        let prefix = prefix.ok_or_else(|| bad("the archive is empty"))?;
        // Records may not share bytes, so checking them reads each byte once.
        let mut ranges: Vec<&Range<usize>> = records.values().map(|(r, _)| r).collect();
        ranges.sort_by_key(|r| (r.start, r.end));
        if ranges.windows(2).any(|w| w[1].start < w[0].end) {
            return Err(bad("records overlap"));
        }
        for (name, (data, crc)) in &records {
            // A CRC of 0 is torch.save's "no checksums" option, which torch.load accepts.
            if *crc != 0 && crc32fast::hash(&bytes[data.clone()]) != *crc {
                return Err(bad(&format!("record {name} fails its CRC check (corrupt file)")));
            }
        }
        let records = records.into_iter().map(|(name, (data, _))| (name, data)).collect();
        Ok(ZipReader { bytes, records, prefix })
    }

    /// (entries, central directory offset, size), through zip64 if needed.
    fn directory(b: &[u8]) -> Option<(u64, u64, u64)> {
        // The end record is in the last 64 KiB + 22 bytes (its comment).
        let lowest = b.len().saturating_sub(22 + 65_535);
        let end = (lowest..=b.len().checked_sub(22)?).rev().find(|&i| u32_at(b, i) == Some(END))?;
        let entries = u64::from(u16_at(b, end + 10)?);
        let size = u64::from(u32_at(b, end + 12)?);
        let offset = u64::from(u32_at(b, end + 16)?);
        if entries != 0xFFFF && size != 0xFFFF_FFFF && offset != 0xFFFF_FFFF {
            return Some((entries, offset, size));
        }
        let locator = end.checked_sub(20)?;
        if u32_at(b, locator) != Some(END64_LOCATOR) {
            return None;
        }
        let end64 = usize::try_from(u64_at(b, locator + 8)?).ok()?;
        if u32_at(b, end64) != Some(END64) {
            return None;
        }
        Some((u64_at(b, end64 + 32)?, u64_at(b, end64 + 48)?, u64_at(b, end64 + 40)?))
    }

    /// Where a record's data lies, from its local header.
    fn data_range(b: &[u8], local: u64, size: u64) -> Option<Range<usize>> {
        let local = usize::try_from(local).ok()?;
        if u32_at(b, local) != Some(LOCAL) {
            return None;
        }
        let name_len = usize::from(u16_at(b, local + 26)?);
        let extra_len = usize::from(u16_at(b, local + 28)?);
        let start = local.checked_add(30 + name_len + extra_len)?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        (end <= b.len()).then_some(start..end)
    }

    /// The names of every record, relative to the top-level folder.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let prefix = format!("{}/", self.prefix);
        self.records.keys().filter_map(move |k| k.strip_prefix(prefix.as_str()))
    }

    /// The data of record `name` (relative to the top-level folder), if any.
    pub fn record(&self, name: &str) -> Option<&'a [u8]> {
        let range = self.records.get(&format!("{}/{name}", self.prefix))?;
        Some(&self.bytes[range.clone()])
    }
}

/// Whether a record name is one only TorchScript archives have (their
/// `code/` sources and `constants.pkl`).
pub fn is_torchscript_record(name: &str) -> bool {
    name.split('/').nth(1).is_some_and(|part| part == "code" || part == "constants.pkl")
}

/// The error for a TorchScript archive given where `torch.save` tensors
/// were expected (`what` names the file).
pub fn torchscript_error(what: &str) -> Error {
    Error::format(format!(
        "{what} is a TorchScript module (torch.jit.save), not a torch.save file of tensors: load it with \
         fulmen_model_load_torchscript"
    ))
}

/// The 64-bit values of a zip64 extra field (id 1), in order.
fn zip64_values(extra: &[u8]) -> Vec<u64> {
    let mut at = 0;
    while let (Some(id), Some(len)) = (u16_at(extra, at), u16_at(extra, at + 2)) {
        let body = extra.get(at + 4..at + 4 + usize::from(len)).unwrap_or_default();
        if id == 1 {
            return body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
        }
        at += 4 + usize::from(len);
    }
    Vec::new()
}

/// Sizes and offsets at or above this are written through zip64 fields.
const ZIP64_AT: u64 = 0xFFFF_FFFF;
/// Records at or above this count need a zip64 end of directory.
const ZIP64_RECORDS: u64 = 0xFFFF;

/// One record's central directory facts.
struct Entry {
    name: String,
    crc: u32,
    size: u64,
    offset: u64,
}

/// Writes an archive to `out` as it goes: records in order, each record's
/// data aligned to 64 bytes, then the central directory. Sizes, offsets
/// and counts past 32 (16) bits are written through zip64 fields, as
/// PyTorch's writer does for files above 4 GiB.
pub struct ZipWriter<W: Write> {
    out: W,
    pos: u64,
    entries: Vec<Entry>,
    prefix: String,
    /// [`ZIP64_AT`], lower in tests so small archives take the zip64 path.
    zip64_at: u64,
}

impl<W: Write> ZipWriter<W> {
    /// An archive written to `out`, whose records go under the folder
    /// `prefix` ("" for none: records at the archive's top).
    pub fn new(out: W, prefix: &str) -> Self {
        ZipWriter { out, pos: 0, entries: Vec::new(), prefix: prefix.to_owned(), zip64_at: ZIP64_AT }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(|e| Error::io(format!("writing the archive: {e}")))?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Appends record `name` (under the prefix) holding `data`.
    pub fn add(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.header(name, data.len() as u64, crc32fast::hash(data))?;
        self.put(data)
    }

    /// Appends record `name` holding the `size` bytes `data` gives, whose
    /// CRC-32 is `crc`, copied as they are read (nothing held whole in
    /// memory); fewer or more bytes than `size` is an error.
    pub fn add_from(&mut self, name: &str, size: u64, crc: u32, data: &mut impl std::io::Read) -> Result<()> {
        self.header(name, size, crc)?;
        let mut limited = std::io::Read::take(&mut *data, size);
        let copied = std::io::copy(&mut limited, &mut self.out)
            .map_err(|e| Error::io(format!("writing the archive's {name}: {e}")))?;
        self.pos += copied;
        let mut more = [0u8; 1];
        let longer = data.read(&mut more).map_err(|e| Error::io(format!("reading {name}: {e}")))? > 0;
        if copied != size || longer {
            return Err(Error::io(format!("{name} changed while it was archived (expected {size} bytes)")));
        }
        Ok(())
    }

    /// Writes the local header of record `name` of `size` bytes with
    /// CRC-32 `crc`, and notes the record for the directory.
    fn header(&mut self, name: &str, size: u64, crc: u32) -> Result<()> {
        let name = if self.prefix.is_empty() { name.to_owned() } else { format!("{}/{name}", self.prefix) };
        if name.len() > usize::from(u16::MAX) {
            return Err(Error::invalid(format!("a record name of {} bytes", name.len())));
        }
        let offset = self.pos;
        // A large record's local header carries both sizes in a zip64 field.
        let mut zip64 = Vec::new();
        if size >= self.zip64_at {
            zip64.extend_from_slice(&1u16.to_le_bytes());
            zip64.extend_from_slice(&16u16.to_le_bytes());
            zip64.extend_from_slice(&size.to_le_bytes());
            zip64.extend_from_slice(&size.to_le_bytes());
        }
        // Pad through an extra field so the data starts at a multiple of ALIGN.
        let header_end = offset + 30 + name.len() as u64 + zip64.len() as u64 + 4;
        let pad = (ALIGN as u64 - header_end % ALIGN as u64) % ALIGN as u64;
        let small = |v: u64| if v >= self.zip64_at { u32::MAX } else { v as u32 };
        let mut local = Vec::with_capacity(30 + name.len() + zip64.len() + 4 + pad as usize);
        local.extend_from_slice(&LOCAL.to_le_bytes());
        local.extend_from_slice(&(if zip64.is_empty() { 20u16 } else { 45 }).to_le_bytes()); // needed
        local.extend_from_slice(&0x0800u16.to_le_bytes()); // UTF-8 names
        local.extend_from_slice(&0u16.to_le_bytes()); // stored
        local.extend_from_slice(&0u16.to_le_bytes()); // time
        local.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
        local.extend_from_slice(&crc.to_le_bytes());
        local.extend_from_slice(&small(size).to_le_bytes());
        local.extend_from_slice(&small(size).to_le_bytes());
        local.extend_from_slice(&(name.len() as u16).to_le_bytes());
        local.extend_from_slice(&((zip64.len() as u64 + 4 + pad) as u16).to_le_bytes());
        local.extend_from_slice(name.as_bytes());
        local.extend_from_slice(&zip64);
        local.extend_from_slice(b"FB");
        local.extend_from_slice(&(pad as u16).to_le_bytes());
        local.resize(local.len() + pad as usize, b'Z');
        self.put(&local)?;
        self.entries.push(Entry { name, crc, size, offset });
        Ok(())
    }

    /// Writes the central directory and hands back the writer.
    pub fn finish(mut self) -> Result<W> {
        let cd_offset = self.pos;
        let entries = std::mem::take(&mut self.entries);
        for e in &entries {
            let mut zip64 = Vec::new();
            for v in [e.size, e.size, e.offset] {
                if v >= self.zip64_at {
                    zip64.extend_from_slice(&v.to_le_bytes());
                }
            }
            let mut h = Vec::with_capacity(46 + e.name.len() + 4 + zip64.len());
            let needed: u16 = if zip64.is_empty() { 20 } else { 45 };
            h.extend_from_slice(&CENTRAL.to_le_bytes());
            h.extend_from_slice(&needed.to_le_bytes()); // made by
            h.extend_from_slice(&needed.to_le_bytes()); // needed
            h.extend_from_slice(&0x0800u16.to_le_bytes()); // UTF-8 names
            h.extend_from_slice(&0u16.to_le_bytes()); // stored
            h.extend_from_slice(&0u16.to_le_bytes()); // time
            h.extend_from_slice(&0x21u16.to_le_bytes()); // date 1980-01-01
            h.extend_from_slice(&e.crc.to_le_bytes());
            let small = |v: u64| if v >= self.zip64_at { u32::MAX } else { v as u32 };
            h.extend_from_slice(&small(e.size).to_le_bytes());
            h.extend_from_slice(&small(e.size).to_le_bytes());
            h.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            let extra = if zip64.is_empty() { 0 } else { 4 + zip64.len() as u16 };
            h.extend_from_slice(&extra.to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // comment
            h.extend_from_slice(&0u16.to_le_bytes()); // disk
            h.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
            h.extend_from_slice(&0u32.to_le_bytes()); // external attributes
            h.extend_from_slice(&small(e.offset).to_le_bytes());
            h.extend_from_slice(e.name.as_bytes());
            if !zip64.is_empty() {
                h.extend_from_slice(&1u16.to_le_bytes());
                h.extend_from_slice(&(zip64.len() as u16).to_le_bytes());
                h.extend_from_slice(&zip64);
            }
            self.put(&h)?;
        }
        let cd_size = self.pos - cd_offset;
        let count = entries.len() as u64;
        let big = count >= ZIP64_RECORDS || cd_size >= self.zip64_at || cd_offset >= self.zip64_at;
        let mut tail = Vec::new();
        if big {
            let end64 = self.pos;
            tail.extend_from_slice(&END64.to_le_bytes());
            tail.extend_from_slice(&44u64.to_le_bytes()); // size of the rest
            tail.extend_from_slice(&45u16.to_le_bytes()); // made by
            tail.extend_from_slice(&45u16.to_le_bytes()); // needed
            tail.extend_from_slice(&[0; 8]); // disk numbers
            tail.extend_from_slice(&count.to_le_bytes());
            tail.extend_from_slice(&count.to_le_bytes());
            tail.extend_from_slice(&cd_size.to_le_bytes());
            tail.extend_from_slice(&cd_offset.to_le_bytes());
            tail.extend_from_slice(&END64_LOCATOR.to_le_bytes());
            tail.extend_from_slice(&0u32.to_le_bytes()); // disk
            tail.extend_from_slice(&end64.to_le_bytes());
            tail.extend_from_slice(&1u32.to_le_bytes()); // disks
        }
        let (count16, size32, offset32) =
            if big { (u16::MAX, u32::MAX, u32::MAX) } else { (count as u16, cd_size as u32, cd_offset as u32) };
        tail.extend_from_slice(&END.to_le_bytes());
        tail.extend_from_slice(&[0; 4]); // disk numbers
        tail.extend_from_slice(&count16.to_le_bytes());
        tail.extend_from_slice(&count16.to_le_bytes());
        tail.extend_from_slice(&size32.to_le_bytes());
        tail.extend_from_slice(&offset32.to_le_bytes());
        tail.extend_from_slice(&0u16.to_le_bytes()); // comment
        self.put(&tail)?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_copied_from_a_reader_reads_back() {
        let data = vec![3u8; 5000];
        let mut w = ZipWriter::new(Vec::new(), "archive");
        w.add_from("big", data.len() as u64, crc32fast::hash(&data), &mut &data[..]).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(ZipReader::new(&bytes, "test").unwrap().record("big").unwrap(), &data[..]);
        // A reader giving fewer or more bytes than announced is an error.
        let mut w = ZipWriter::new(Vec::new(), "");
        assert!(w.add_from("short", 6000, 0, &mut &data[..]).is_err());
        let mut w = ZipWriter::new(Vec::new(), "");
        assert!(w.add_from("long", 4000, 0, &mut &data[..]).is_err());
        // Without a prefix the record sits at the archive's top.
        let mut w = ZipWriter::new(Vec::new(), "");
        w.add("top.json", b"{}").unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(&bytes[30..38], b"top.json");
    }

    #[test]
    fn round_trip_aligned_and_checked() {
        let mut w = ZipWriter::new(Vec::new(), "archive");
        w.add("data.pkl", b"pickle").unwrap();
        w.add("data/0", &[7u8; 100]).unwrap();
        let bytes = w.finish().unwrap();
        assert!(looks_like_zip(&bytes));
        let r = ZipReader::new(&bytes, "test").unwrap();
        assert_eq!(r.record("data.pkl").unwrap(), b"pickle");
        let d = r.record("data/0").unwrap();
        assert_eq!(d, &[7u8; 100][..]);
        assert_eq!((d.as_ptr() as usize - bytes.as_ptr() as usize) % ALIGN, 0);
        assert!(r.record("missing").is_none());
        // A flipped data byte fails the CRC; a cut file has no directory.
        let mut corrupt = bytes.clone();
        let at = d.as_ptr() as usize - bytes.as_ptr() as usize;
        corrupt[at] ^= 1;
        assert!(ZipReader::new(&corrupt, "test").unwrap_err().message.contains("CRC"));
        assert!(ZipReader::new(&bytes[..bytes.len() - 30], "test").is_err());
    }

    #[test]
    fn sizes_beyond_the_file_are_refused() {
        let mut w = ZipWriter::new(Vec::new(), "a");
        w.add("x", b"0123456789").unwrap();
        let mut bytes = w.finish().unwrap();
        // The central directory's sizes claim 4 GiB - 2.
        let cd = bytes.len() - 22 - (46 + 3);
        bytes[cd + 20..cd + 28].copy_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFE, 0xFF, 0xFF, 0xFF]);
        let e = ZipReader::new(&bytes, "test").unwrap_err();
        assert!(e.message.contains("outside the file"), "{}", e.message);
    }

    #[test]
    fn zip64_fields_read_back() {
        // Every size, offset and the count through zip64, as past 4 GiB.
        let mut w = ZipWriter::new(Vec::new(), "archive");
        w.zip64_at = 8;
        w.add("data.pkl", b"pickle").unwrap();
        w.add("data/0", &[7u8; 100]).unwrap();
        w.add("version", b"3").unwrap();
        let bytes = w.finish().unwrap();
        assert!(bytes.windows(4).any(|b| b == END64.to_le_bytes()));
        let r = ZipReader::new(&bytes, "test").unwrap();
        assert_eq!(r.record("data.pkl").unwrap(), b"pickle");
        let d = r.record("data/0").unwrap();
        assert_eq!(d, &[7u8; 100][..]);
        assert_eq!((d.as_ptr() as usize - bytes.as_ptr() as usize) % ALIGN, 0);
        assert_eq!(r.record("version").unwrap(), b"3");
    }
}

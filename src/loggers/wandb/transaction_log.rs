//! The `.wandb` transaction log: W&B's variant of LevelDB's log format.
//! A 7-byte file header (`:W&B`, magic 0xBEE1, version 0), then records
//! in 32 KiB blocks, each chunk behind a 7-byte header (CRC-32 of the
//! chunk type and data, data length, chunk type); a record that does not
//! fit the block's rest is split into FIRST / MIDDLE / LAST chunks, and a
//! block's tail shorter than a header is zero-filled, as `wandb sync`
//! reads it.
use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The file header's identifier.
const IDENT: &[u8; 4] = b":W&B";
/// The file header's magic number (`crc32("Weights & Biases") & 0xffff`).
const MAGIC: u16 = 0xBEE1;
/// The format version.
const VERSION: u8 = 0;
/// Bytes of a block.
pub(crate) const BLOCK: usize = 32 * 1024;
/// Bytes of a chunk header (and of the file header).
pub(crate) const HEADER: usize = 7;

/// A chunk holding a whole record.
pub(crate) const FULL: u8 = 1;
/// The first chunk of a split record.
pub(crate) const FIRST: u8 = 2;
/// A chunk inside a split record.
pub(crate) const MIDDLE: u8 = 3;
/// The last chunk of a split record.
pub(crate) const LAST: u8 = 4;

/// The CRC-32 (IEEE, zlib's) of a chunk: of its type byte, then its data.
pub fn chunk_crc(kind: u8, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc32fast::hash(&[kind]));
    h.update(data);
    h.finalize()
}

/// Appends records to a new `.wandb` file.
pub struct TransactionLog {
    path: PathBuf,
    out: BufWriter<File>,
    /// Bytes written so far (the offset in the file).
    offset: usize,
    /// Whether a write failed: the block offsets after it are unknown, so
    /// nothing more is appended (a reader would lose every later record).
    broken: bool,
}

impl TransactionLog {
    /// Creates `path` (which must not exist) and writes the file header.
    pub fn create(path: &Path) -> Result<Self> {
        let file =
            crate::fs_safe::create_new(path).map_err(|e| Error::io(format!("creating {}: {e}", path.display())))?;
        let mut log = TransactionLog { path: path.to_path_buf(), out: BufWriter::new(file), offset: 0, broken: false };
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(IDENT);
        header.extend_from_slice(&MAGIC.to_le_bytes());
        header.push(VERSION);
        log.write(&header)?;
        Ok(log)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Err(e) = self.out.write_all(bytes) {
            self.broken = true;
            return Err(Error::io(format!("writing {}: {e}", self.path.display())));
        }
        self.offset += bytes.len();
        Ok(())
    }

    /// Appends one record (an encoded `wandb_internal.Record`); after a
    /// failed write every append fails.
    pub fn append(&mut self, record: &[u8]) -> Result<()> {
        if self.broken {
            return Err(Error::io(format!(
                "{}: an earlier write failed, so records cannot be framed after it",
                self.path.display()
            )));
        }
        let mut rest = record;
        let mut first = true;
        loop {
            let left = BLOCK - self.offset % BLOCK;
            if left < HEADER {
                self.write(&[0u8; HEADER][..left])?;
                continue;
            }
            let room = left - HEADER;
            let n = rest.len().min(room);
            let last = n == rest.len();
            let kind = match (first, last) {
                (true, true) => FULL,
                (true, false) => FIRST,
                (false, false) => MIDDLE,
                (false, true) => LAST,
            };
            let (data, tail) = rest.split_at(n);
            let mut header = Vec::with_capacity(HEADER);
            header.extend_from_slice(&chunk_crc(kind, data).to_le_bytes());
            header.extend_from_slice(&(n as u16).to_le_bytes());
            header.push(kind);
            self.write(&header)?;
            self.write(data)?;
            rest = tail;
            first = false;
            if last {
                return Ok(());
            }
        }
    }

    /// Hands what was appended to the OS; with `durable`, to the disk.
    pub fn flush(&mut self, durable: bool) -> Result<()> {
        let ctx = |e: std::io::Error| Error::io(format!("writing {}: {e}", self.path.display()));
        self.out.flush().map_err(ctx)?;
        if durable {
            self.out.get_ref().sync_data().map_err(ctx)?;
        }
        Ok(())
    }
}

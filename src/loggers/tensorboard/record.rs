//! TFRecord framing, the container of event files: each record is
//! `u64 length (LE) | masked CRC-32C of the length bytes | data | masked
//! CRC-32C of the data`, both CRCs little-endian u32.
use super::crc32c::masked_crc32c;
use crate::error::{Error, Result};
use std::io::{self, Write};

/// Bytes a record adds around its data.
pub const OVERHEAD: usize = 8 + 4 + 4;

/// Writes one framed record holding `data`.
pub fn write_record(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    w.write_all(&len)?;
    w.write_all(&masked_crc32c(&len).to_le_bytes())?;
    w.write_all(data)?;
    w.write_all(&masked_crc32c(data).to_le_bytes())
}

/// Splits the first record off `bytes`, checking both CRCs: the record's
/// data and the bytes after it, or `None` when `bytes` is empty. A
/// truncated or corrupted record is a `Format` error.
pub fn read_record(bytes: &[u8]) -> Result<Option<(&[u8], &[u8])>> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let header = bytes.get(..12).ok_or_else(|| Error::format("truncated TFRecord header"))?;
    let (len_bytes, len_crc) = header.split_at(8);
    if u32::from_le_bytes([len_crc[0], len_crc[1], len_crc[2], len_crc[3]]) != masked_crc32c(len_bytes) {
        return Err(Error::format("TFRecord length CRC mismatch"));
    }
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(len_bytes);
    let len = usize::try_from(u64::from_le_bytes(len8)).map_err(|_| Error::format("TFRecord length too large"))?;
    let end = len.checked_add(OVERHEAD).ok_or_else(|| Error::format("TFRecord length too large"))?;
    let record = bytes.get(..end).ok_or_else(|| Error::format(format!("truncated TFRecord of {len} bytes")))?;
    let (data, crc) = record[12..].split_at(len);
    if u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) != masked_crc32c(data) {
        return Err(Error::format("TFRecord data CRC mismatch"));
    }
    Ok(Some((data, &bytes[end..])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        let payloads: [&[u8]; 3] = [b"hello", b"", &[7u8; 300]];
        for p in payloads {
            write_record(&mut buf, p).unwrap();
        }
        assert_eq!(buf.len(), 5 + 300 + 3 * OVERHEAD);
        let mut rest = buf.as_slice();
        for p in payloads {
            let (data, tail) = read_record(rest).unwrap().unwrap();
            assert_eq!(data, p);
            rest = tail;
        }
        assert!(read_record(rest).unwrap().is_none());
    }

    #[test]
    fn known_framing() {
        // Length 0: the header CRC is the masked CRC of eight zero bytes.
        let mut buf = Vec::new();
        write_record(&mut buf, b"").unwrap();
        assert_eq!(buf.len(), OVERHEAD);
        assert_eq!(&buf[..8], [0u8; 8]);
        assert_eq!(&buf[8..12], masked_crc32c(&[0u8; 8]).to_le_bytes());
        assert_eq!(&buf[12..], masked_crc32c(b"").to_le_bytes());
    }

    #[test]
    fn corruption_is_detected() {
        let mut buf = Vec::new();
        write_record(&mut buf, b"payload").unwrap();
        let mut bad = buf.clone();
        bad[13] ^= 1;
        assert_eq!(read_record(&bad).unwrap_err().code, ErrorCode::Format);
        let mut bad = buf.clone();
        bad[0] ^= 1;
        assert_eq!(read_record(&bad).unwrap_err().code, ErrorCode::Format);
        assert_eq!(read_record(&buf[..buf.len() - 1]).unwrap_err().code, ErrorCode::Format);
        assert_eq!(read_record(&buf[..5]).unwrap_err().code, ErrorCode::Format);
    }
}

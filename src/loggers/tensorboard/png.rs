//! A PNG encoder for 8-bit RGB and RGBA images (what TensorBoard's image
//! dashboard reads): signature, IHDR, zlib-compressed IDAT, IEND.
use crate::error::{Error, Result};
use flate2::write::ZlibEncoder;
use flate2::Compression;
use std::io::Write;

/// The 8 bytes every PNG file starts with.
pub(crate) const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n'];

/// IDAT data per chunk (the format allows up to 2^31 - 1 bytes).
const IDAT_CHUNK: usize = 1 << 20;

/// Appends a chunk: length, type, data, CRC-32 of type and data.
fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Encodes `pixels` (rows top to bottom, `channels` bytes per pixel, 3 for
/// RGB or 4 for RGBA) as a PNG file.
pub fn encode(width: u32, height: u32, channels: u8, pixels: &[u8]) -> Result<Vec<u8>> {
    let color_type = match channels {
        3 => 2u8,
        4 => 6u8,
        c => return Err(Error::invalid(format!("a PNG image needs 3 or 4 channels, not {c}"))),
    };
    let row = width as usize * usize::from(channels);
    if width == 0 || height == 0 || width > i32::MAX as u32 || height > i32::MAX as u32 {
        return Err(Error::invalid(format!("image size {width}x{height} is outside 1 to 2^31 - 1")));
    }
    if pixels.len() != row * height as usize {
        return Err(Error::invalid(format!(
            "{} pixel bytes for a {width}x{height} image of {channels} channels",
            pixels.len()
        )));
    }
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    for line in pixels.chunks(row) {
        // Filter type 0 (none) before each row.
        z.write_all(&[0])?;
        z.write_all(line)?;
    }
    let idat = z.finish()?;
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // Bit depth 8, the colour type, deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, color_type, 0, 0, 0]);
    let mut out = SIGNATURE.to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    for part in idat.chunks(IDAT_CHUNK) {
        chunk(&mut out, b"IDAT", part);
    }
    chunk(&mut out, b"IEND", &[]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::ZlibDecoder;
    use std::io::Read;

    /// The chunks of a PNG file, checking their CRCs.
    fn chunks(png: &[u8]) -> Vec<(String, Vec<u8>)> {
        assert_eq!(png[..8], SIGNATURE);
        let mut rest = &png[8..];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let body = &rest[4..8 + len];
            let crc = u32::from_be_bytes(rest[8 + len..12 + len].try_into().unwrap());
            assert_eq!(crc, crc32fast::hash(body));
            out.push((String::from_utf8(body[..4].to_vec()).unwrap(), body[4..].to_vec()));
            rest = &rest[12 + len..];
        }
        out
    }

    #[test]
    fn round_trip() {
        let pixels: Vec<u8> = (0..2 * 3 * 4).map(|i| (i * 10) as u8).collect();
        let png = encode(3, 2, 4, &pixels).unwrap();
        let c = chunks(&png);
        let names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["IHDR", "IDAT", "IEND"]);
        assert_eq!(c[0].1, [0, 0, 0, 3, 0, 0, 0, 2, 8, 6, 0, 0, 0]);
        let mut raw = Vec::new();
        ZlibDecoder::new(&c[1].1[..]).read_to_end(&mut raw).unwrap();
        let mut want = vec![0u8];
        want.extend_from_slice(&pixels[..12]);
        want.push(0);
        want.extend_from_slice(&pixels[12..]);
        assert_eq!(raw, want);
    }

    #[test]
    fn refuses_bad_shapes() {
        assert!(encode(2, 2, 2, &[0; 8]).is_err());
        assert!(encode(0, 2, 3, &[]).is_err());
        assert!(encode(2, 2, 3, &[0; 11]).is_err());
    }
}

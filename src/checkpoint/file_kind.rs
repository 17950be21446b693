//! What a file that fulmen cannot read is, from its first bytes, so an
//! error can say "a TorchScript archive" or "a text file" instead of only
//! "not a safetensors file".

/// A short description of the file whose first bytes are `head`, or
/// `None` when it starts as a safetensors file does (an 8-byte header
/// length, then `{`).
pub fn describe(head: &[u8]) -> Option<String> {
    if head.is_empty() {
        return Some("an empty file".into());
    }
    if head.len() >= 9 && head[8] == b'{' {
        return None;
    }
    let kind = if super::torch_zip::looks_like_zip(head) {
        "a zip archive (a torch.save file or a TorchScript module?)"
    } else if head.starts_with(&[0x1f, 0x8b]) {
        "a gzip-compressed file"
    } else if super::torch_save::looks_like_pickle(head) {
        "a bare pickle (a legacy torch.save file?)"
    } else if head.starts_with(b"\x89HDF\r\n\x1a\n") {
        "an HDF5 file (Keras weights?)"
    } else if head.starts_with(b"\x93NUMPY") {
        "a NumPy .npy array"
    } else if let Some(text) = text_start(head) {
        return Some(format!("a text file beginning {text:?}"));
    } else {
        let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
        return Some(format!("a file of an unknown kind (first bytes {})", hex.join(" ")));
    };
    Some(kind.into())
}

/// The first line of `head` (up to 40 characters) when it reads as text.
fn text_start(head: &[u8]) -> Option<String> {
    let sample = &head[..head.len().min(256)];
    let text = match std::str::from_utf8(sample) {
        Ok(t) => t,
        // A multi-byte character cut at the end of the sample.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&sample[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    if text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        return None;
    }
    Some(text.lines().next().unwrap_or_default().chars().take(40).collect())
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn tells_common_files_apart() {
        let mut safetensors = 2u64.to_le_bytes().to_vec();
        safetensors.extend_from_slice(b"{}");
        assert_eq!(describe(&safetensors), None);
        assert_eq!(describe(b"").unwrap(), "an empty file");
        assert!(describe(b"PK\x03\x04rest").unwrap().contains("zip archive"));
        assert!(describe(&[0x1f, 0x8b, 8, 0]).unwrap().contains("gzip"));
        assert!(describe(&[0x80, 0x02, b'}']).unwrap().contains("legacy torch.save"));
        assert!(describe(b"\x89HDF\r\n\x1a\n....").unwrap().contains("HDF5"));
        assert!(describe(b"\x93NUMPY\x01\x00").unwrap().contains("NumPy"));
        assert_eq!(describe(b"label,pixel0,pixel1\n5,0,0\n").unwrap(), "a text file beginning \"label,pixel0,pixel1\"");
        assert!(describe(&[0, 1, 2, 250, 251, 3, 4, 5, 6]).unwrap().contains("00 01 02 fa fb 03 04 05"));
    }
}

//! Images, histograms and texts for TensorBoard, built from tensors as
//! torch's `SummaryWriter.add_image`, `add_histogram` (with its default
//! `bins="tensorflow"`) and `add_text` build them.
use super::png;
use super::proto::{HistogramProto, PluginData, Summary, SummaryImage, SummaryMetadata, SummaryValue, TensorProto};
use crate::error::{Error, Result};
use std::sync::OnceLock;
use tch::{Device, Kind, Tensor};

/// What `add_text` stores under `tag + TEXT_SUFFIX`.
pub const TEXT_SUFFIX: &str = "/text_summary";
/// The text plugin's name.
pub const TEXT_PLUGIN: &str = "text";

/// One image, histogram or text, converted and ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub enum Media {
    /// An image (PNG).
    Image(SummaryImage),
    /// A histogram of values.
    Histogram(HistogramProto),
    /// A text (markdown in TensorBoard's text dashboard).
    Text(String),
}

impl Media {
    /// The summary holding it under `tag` (a text's tag gets
    /// `/text_summary`, as torch writes it).
    pub fn summary(&self, tag: &str) -> Summary {
        let value = match self {
            Media::Image(i) => SummaryValue { tag: tag.to_string(), image: Some(i.clone()), ..Default::default() },
            Media::Histogram(h) => SummaryValue { tag: tag.to_string(), histo: Some(h.clone()), ..Default::default() },
            Media::Text(t) => SummaryValue {
                tag: format!("{tag}{TEXT_SUFFIX}"),
                tensor: Some(TensorProto { strings: vec![t.as_bytes().to_vec()] }),
                metadata: Some(SummaryMetadata {
                    plugin_data: PluginData { plugin_name: TEXT_PLUGIN.to_string(), content: Vec::new() },
                }),
                ..Default::default()
            },
        };
        Summary { value: vec![value] }
    }
}

/// The axes of H, W and C (`None` for a 2-D image) in `dataformats`
/// ("CHW", "HWC", "HW" or any order of those letters, any case).
fn axes(dataformats: &str) -> Result<(usize, usize, Option<usize>)> {
    let f = dataformats.to_ascii_uppercase();
    let find = |c: char| f.find(c);
    let distinct = f.chars().all(|c| f.matches(c).count() == 1);
    match (f.len(), find('H'), find('W'), find('C')) {
        (3, Some(h), Some(w), Some(c)) if distinct => Ok((h, w, Some(c))),
        (2, Some(h), Some(w), None) if distinct => Ok((h, w, None)),
        (4, ..) => Err(Error::invalid(format!(
            "dataformats {dataformats:?}: a batch of images (4-D) is not supported; log each image"
        ))),
        _ => Err(Error::invalid(format!(
            "dataformats {dataformats:?} is not an order of \"CHW\" or \"HW\" (e.g. \"CHW\", \"HWC\", \"HW\")"
        ))),
    }
}

/// torch's `image(tag, tensor, dataformats=...)`: the tensor in the given
/// layout becomes HWC, a uint8 tensor is taken as 0..255 and any other as
/// 0..1 (times 255 in f32, clipped to 0..255, truncated); one channel is
/// repeated to RGB; 3 (RGB) or 4 (RGBA) channels stay. Encoded as PNG.
pub fn image(t: &Tensor, dataformats: &str) -> Result<Media> {
    let (h, w, c) = axes(dataformats)?;
    let dims = t.size();
    if dims.len() != dataformats.len() {
        return Err(Error::shape(format!(
            "an image of dataformats {dataformats:?} needs {} dimensions, the tensor has shape {dims:?}",
            dataformats.len()
        )));
    }
    let hwc = match c {
        Some(c) => t.f_permute([h as i64, w as i64, c as i64])?,
        None => t.f_permute([h as i64, w as i64])?.f_unsqueeze(-1)?,
    };
    let size = hwc.size();
    let (height, width, channels) = (size[0], size[1], size[2]);
    if !matches!(channels, 1 | 3 | 4) {
        return Err(Error::shape(format!(
            "an image needs 1, 3 or 4 channels, the tensor of shape {dims:?} ({dataformats}) has {channels}"
        )));
    }
    let (Ok(hgt), Ok(wid)) = (u32::try_from(height), u32::try_from(width)) else {
        return Err(Error::shape(format!("image size {height}x{width} is too large")));
    };
    if hgt == 0 || wid == 0 {
        return Err(Error::shape(format!("an image needs at least one pixel, the tensor has shape {dims:?}")));
    }
    let cpu = hwc.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous()?;
    let bytes: Vec<u8> = if cpu.kind() == Kind::Uint8 {
        Vec::<u8>::try_from(&cpu.f_reshape([-1])?)?
    } else {
        let v = Vec::<f32>::try_from(&cpu.f_to_kind(Kind::Float)?.f_reshape([-1])?)?;
        // numpy's `(x * 255).clip(0, 255).astype(uint8)` in f32.
        v.into_iter().map(|x| (x * 255.0f32).clamp(0.0, 255.0) as u8).collect()
    };
    let pixels = if channels == 1 { bytes.iter().flat_map(|&g| [g, g, g]).collect() } else { bytes };
    let out_channels: u8 = if channels == 4 { 4 } else { 3 };
    let encoded = png::encode(wid, hgt, out_channels, &pixels)?;
    Ok(Media::Image(SummaryImage {
        height: hgt as i32,
        width: wid as i32,
        colorspace: i32::from(out_channels),
        encoded,
    }))
}

/// torch's default bucket edges (`bins="tensorflow"`): 0 and ±1e-12
/// growing by a factor 1.1 up to 1e20, computed as torch computes them.
pub fn tensorflow_bins() -> &'static [f64] {
    static EDGES: OnceLock<Vec<f64>> = OnceLock::new();
    EDGES.get_or_init(|| {
        let mut pos = Vec::new();
        let mut v = 1e-12f64;
        while v < 1e20 {
            pos.push(v);
            v *= 1.1;
        }
        let mut edges: Vec<f64> = pos.iter().rev().map(|v| -v).collect();
        edges.push(0.0);
        edges.extend_from_slice(&pos);
        edges
    })
}

/// torch's `make_histogram(values, bins)`: counts per bucket of `edges`
/// (numpy's half-open buckets, the last closed; values outside and NaN
/// are not counted), trimmed to the buckets from the one before the first
/// non-empty to the last non-empty, with min, max, count, sum and sum of
/// squares over every value.
pub fn histogram_of(values: &[f64], edges: &[f64]) -> Result<HistogramProto> {
    if values.is_empty() {
        return Err(Error::invalid("a histogram needs at least one value, the tensor is empty"));
    }
    if edges.len() < 2 {
        return Err(Error::invalid("a histogram needs at least two bucket edges"));
    }
    let (first, last) = (edges[0], edges[edges.len() - 1]);
    let mut counts = vec![0u64; edges.len() - 1];
    for &v in values {
        if v.is_nan() || v < first || v > last {
            continue;
        }
        let above = edges.partition_point(|e| *e <= v);
        let bin = if above == edges.len() { counts.len() - 1 } else { above - 1 };
        counts[bin] += 1;
    }
    let (Some(start), Some(last_nz)) = (counts.iter().position(|&n| n > 0), counts.iter().rposition(|&n| n > 0)) else {
        return Err(Error::invalid(format!("no value of the histogram lies within its buckets [{first:e}, {last:e}]")));
    };
    let end = last_nz + 1;
    let bucket: Vec<f64> = if start > 0 {
        counts[start - 1..end].iter().map(|&n| n as f64).collect()
    } else {
        std::iter::once(0.0).chain(counts[..end].iter().map(|&n| n as f64)).collect()
    };
    let bucket_limit = edges[start..=end].to_vec();
    let nan = values.iter().any(|v| v.is_nan());
    let fold = |init: f64, f: fn(f64, f64) -> f64| if nan { f64::NAN } else { values.iter().copied().fold(init, f) };
    Ok(HistogramProto {
        min: fold(f64::INFINITY, f64::min),
        max: fold(f64::NEG_INFINITY, f64::max),
        num: values.len() as f64,
        sum: values.iter().sum(),
        sum_squares: values.iter().map(|v| v * v).sum(),
        bucket_limit,
        bucket,
    })
}

/// torch's `add_histogram(tag, values)`: every value of `t` as f64, in
/// torch's default buckets.
pub fn histogram(t: &Tensor) -> Result<Media> {
    let flat = t.f_detach()?.f_to_device(Device::Cpu)?.f_to_kind(Kind::Double)?.f_reshape([-1])?;
    let values = Vec::<f64>::try_from(&flat)?;
    Ok(Media::Histogram(histogram_of(&values, tensorflow_bins())?))
}

/// torch's `add_text(tag, text)`.
pub fn text(s: &str) -> Media {
    Media::Text(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn bins_are_torchs() {
        let e = tensorflow_bins();
        assert_eq!(e.len(), 2 * 774 + 1);
        assert_eq!(e[774], 0.0);
        assert_eq!(e[775], 1e-12);
        assert_eq!(e[776], 1.1000000000000002e-12);
        assert!(e.windows(2).all(|w| w[0] < w[1]));
        assert!(*e.last().unwrap() < 1e20 && *e.last().unwrap() * 1.1 >= 1e20);
    }

    #[test]
    fn histogram_as_torch_writes_it() {
        // torch: add_histogram("h", tensor([0.0, 1.0, -2.5, 3.0])).
        let h = histogram(&Tensor::from_slice(&[0.0f32, 1.0, -2.5, 3.0])).unwrap();
        let Media::Histogram(h) = h else { panic!() };
        assert_eq!((h.min, h.max, h.num, h.sum, h.sum_squares), (-2.5, 3.0, 4.0, 1.5, 16.25));
        assert_eq!(h.bucket_limit.len(), h.bucket.len());
        assert_eq!(h.bucket_limit[0], -2.6170109961884593);
        assert_eq!(h.bucket_limit[1], -2.379100905625872);
        assert_eq!(*h.bucket_limit.last().unwrap(), 3.1665833053880363);
        assert_eq!(h.bucket[..2], [0.0, 1.0]);
        assert_eq!(h.bucket.iter().sum::<f64>(), 4.0);
        assert_eq!(h.bucket[h.bucket.len() - 1], 1.0);
        // 0.0 counts in [0, 1e-12).
        let zero = h.bucket_limit.iter().position(|&l| l == 1e-12).unwrap();
        assert_eq!(h.bucket[zero], 1.0);
    }

    #[test]
    fn histogram_edges_cases() {
        let edges = [0.0, 1.0, 2.0, 3.0];
        let h = histogram_of(&[0.0, 3.0, 3.0, 5.0, f64::NAN], &edges).unwrap();
        // The first bucket holds a value: a 0 bucket comes first.
        assert_eq!(h.bucket, [0.0, 1.0, 0.0, 2.0]);
        assert_eq!(h.bucket_limit, [0.0, 1.0, 2.0, 3.0]);
        assert!(h.min.is_nan() && h.max.is_nan() && h.sum.is_nan());
        assert_eq!(h.num, 5.0);
        let h = histogram_of(&[1.5], &edges).unwrap();
        assert_eq!((h.bucket, h.bucket_limit), (vec![0.0, 1.0], vec![1.0, 2.0]));
        let e = histogram_of(&[], &edges).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        let e = histogram_of(&[9.0, f64::INFINITY], &edges).unwrap_err();
        assert!(e.message.contains("within"), "{}", e.message);
    }

    fn png_of(m: &Media) -> &SummaryImage {
        match m {
            Media::Image(i) => i,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn images_in_every_layout() {
        // 1x2x3 CHW float: one channel, repeated to RGB.
        let t = Tensor::from_slice(&[0.0f32, 0.5, 1.0, 2.0, -1.0, f32::NAN]).reshape([1, 2, 3]);
        let i = image(&t, "CHW").unwrap();
        let img = png_of(&i);
        assert_eq!((img.height, img.width, img.colorspace), (2, 3, 3));
        assert_eq!(img.encoded[..8], png::SIGNATURE);
        let same = image(&t.reshape([2, 3]), "hw").unwrap();
        assert_eq!(same, i);
        let hwc = image(&t.reshape([2, 3, 1]), "HWC").unwrap();
        assert_eq!(hwc, i);
        let rgba = Tensor::zeros([2, 2, 4], (Kind::Uint8, Device::Cpu));
        assert_eq!(png_of(&image(&rgba, "HWC").unwrap()).colorspace, 4);
        for (shape, f, code) in [
            (vec![2i64, 2, 2], "HWC", ErrorCode::ShapeMismatch),
            (vec![2, 2], "CHW", ErrorCode::ShapeMismatch),
            (vec![1, 2, 2], "CHH", ErrorCode::InvalidArgument),
            (vec![1, 2, 2], "XYZ", ErrorCode::InvalidArgument),
            (vec![1, 1, 2, 2], "NCHW", ErrorCode::InvalidArgument),
            (vec![3, 0, 2], "CHW", ErrorCode::ShapeMismatch),
        ] {
            let t = Tensor::zeros(shape.as_slice(), (Kind::Float, Device::Cpu));
            assert_eq!(image(&t, f).unwrap_err().code, code, "{shape:?} {f}");
        }
    }

    #[test]
    fn text_summary() {
        let s = text("hello **world**").summary("notes");
        assert_eq!(s.value[0].tag, "notes/text_summary");
        assert_eq!(s.value[0].tensor.as_ref().unwrap().strings, [b"hello **world**".to_vec()]);
        assert_eq!(s.value[0].metadata.as_ref().unwrap().plugin_data.plugin_name, "text");
    }
}

//! The C arguments of an image, histogram or text, converted to the
//! `Media` a TensorBoard logger writes: one conversion for the logger
//! handles and for hooks.
use crate::error::{Error, Result};
use crate::ffi::base::error::str_arg;
use crate::ffi::tensor::handle::{fulmen_tensor, tensor_arg};
use crate::loggers::tensorboard::media;
use crate::loggers::Media;
use std::ffi::c_char;

/// A non-empty `tag`.
unsafe fn tag_arg<'a>(tag: *const c_char) -> Result<&'a str> {
    let t = str_arg(tag, "tag")?;
    if t.is_empty() {
        return Err(Error::invalid("argument `tag` is empty"));
    }
    Ok(t)
}

/// `dataformats`, "CHW" when NULL.
unsafe fn dataformats_arg<'a>(dataformats: *const c_char) -> Result<&'a str> {
    if dataformats.is_null() {
        Ok("CHW")
    } else {
        str_arg(dataformats, "dataformats")
    }
}

/// `tag` and the PNG of `image` laid out as `dataformats`.
pub(crate) unsafe fn image_args<'a>(
    tag: *const c_char,
    image: *const fulmen_tensor,
    dataformats: *const c_char,
) -> Result<(&'a str, Media)> {
    let tag = tag_arg(tag)?;
    let image = tensor_arg(image, "image")?;
    Ok((tag, media::image(&image, dataformats_arg(dataformats)?)?))
}

/// `tag` and the histogram of every value of `values`.
pub(crate) unsafe fn histogram_args<'a>(tag: *const c_char, values: *const fulmen_tensor) -> Result<(&'a str, Media)> {
    let tag = tag_arg(tag)?;
    let values = tensor_arg(values, "values")?;
    Ok((tag, media::histogram(&values)?))
}

/// `tag` and the markdown `text`.
pub(crate) unsafe fn text_args<'a>(tag: *const c_char, text: *const c_char) -> Result<(&'a str, Media)> {
    let tag = tag_arg(tag)?;
    Ok((tag, media::text(str_arg(text, "text")?)))
}

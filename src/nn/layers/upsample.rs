//! `Upsample`: `F.interpolate` as a layer.
use super::Layer;
use crate::error::Result;
use crate::tensor::ops;
use tch::Tensor;

/// Resizes its input to `size` or by `scale_factor` with `mode`, as
/// PyTorch's `nn.Upsample` (see [`ops::interpolate`]).
#[derive(Debug, Clone)]
pub(crate) struct Upsample {
    size: Vec<i64>,
    scale_factor: f64,
    mode: String,
    align_corners: bool,
}

impl Upsample {
    /// Checks what does not depend on the input (see [`ops::check_interpolate`]).
    pub(crate) fn new(size: &[i64], scale_factor: f64, mode: &str, align_corners: bool) -> Result<Upsample> {
        ops::check_interpolate(size, scale_factor, mode, align_corners).map_err(|e| e.context("upsample"))?;
        Ok(Upsample { size: size.to_vec(), scale_factor, mode: mode.to_owned(), align_corners })
    }
}

impl Layer for Upsample {
    fn replicate(&self, _map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        Ok(Box::new(self.clone()))
    }

    fn type_name(&self) -> &'static str {
        "Upsample"
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        ops::interpolate(x, &self.size, self.scale_factor, &self.mode, self.align_corners)
    }
}

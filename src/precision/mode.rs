//! The `precision` setting, parsed from Lightning's strings.
use crate::error::{Error, Result};
use crate::tensor::device::DeviceType;
use tch::Kind;

/// How a model trains: parameter dtype, autocast, loss scaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// `"64-true"`: everything in float64.
    Double,
    /// `"32-true"`: everything in float32 (the default).
    Full,
    /// `"16-mixed"`: fp32 weights, fp16 autocast, dynamic loss scaling.
    Mixed16,
    /// `"bf16-mixed"`: fp32 weights, bf16 autocast, no loss scaling.
    MixedBf16,
    /// `"16-true"`: weights and inputs in fp16.
    True16,
    /// `"bf16-true"`: weights and inputs in bf16.
    TrueBf16,
}

/// The values [`Precision::parse`] accepts, as Lightning lists them.
pub const VALID_PRECISIONS: [&str; 10] =
    ["64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64", "32", "16", "bf16"];

impl Precision {
    /// Parses Lightning's precision strings: `64-true`, `32-true`,
    /// `16-mixed`, `bf16-mixed`, `16-true`, `bf16-true`, and the legacy
    /// `64`, `32`, `16` (16-mixed), `bf16` (bf16-mixed). Anything else
    /// (`transformer-engine`, `bnb-...`, `8-true`) is an error listing the
    /// valid values.
    pub fn parse(value: &str) -> Result<Precision> {
        match value.trim() {
            "64-true" | "64" => Ok(Precision::Double),
            "32-true" | "32" => Ok(Precision::Full),
            "16-mixed" | "16" => Ok(Precision::Mixed16),
            "bf16-mixed" | "bf16" => Ok(Precision::MixedBf16),
            "16-true" => Ok(Precision::True16),
            "bf16-true" => Ok(Precision::TrueBf16),
            _ => Err(Error::invalid(format!(
                "precision {value:?} is invalid; allowed precision values: {}",
                VALID_PRECISIONS.join(", ")
            ))),
        }
    }

    /// Lightning's warning for the legacy spellings `16` and `bf16`
    /// (`None` for every other value).
    pub fn legacy_warning(value: &str) -> Option<String> {
        let canonical = match value.trim() {
            "16" => "16-mixed",
            "bf16" => "bf16-mixed",
            _ => return None,
        };
        Some(format!(
            "precision={:?} is supported for historical reasons but its usage is discouraged; \
             set it to {canonical:?} instead",
            value.trim()
        ))
    }

    /// The canonical name (`"16-mixed"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Double => "64-true",
            Precision::Full => "32-true",
            Precision::Mixed16 => "16-mixed",
            Precision::MixedBf16 => "bf16-mixed",
            Precision::True16 => "16-true",
            Precision::TrueBf16 => "bf16-true",
        }
    }

    /// The dtype of the model's floating parameters (fp32 master weights
    /// for the mixed precisions).
    pub fn param_kind(self) -> Kind {
        match self {
            Precision::Double => Kind::Double,
            Precision::Full | Precision::Mixed16 | Precision::MixedBf16 => Kind::Float,
            Precision::True16 => Kind::Half,
            Precision::TrueBf16 => Kind::BFloat16,
        }
    }

    /// The autocast dtype of a mixed precision, `None` otherwise.
    pub fn autocast_kind(self) -> Option<Kind> {
        match self {
            Precision::Mixed16 => Some(Kind::Half),
            Precision::MixedBf16 => Some(Kind::BFloat16),
            _ => None,
        }
    }

    /// Whether the model and inputs are cast (`*-true` other than 32).
    pub fn casts_model(self) -> bool {
        self.param_kind() != Kind::Float
    }

    /// Whether dynamic loss scaling is used (`16-mixed`).
    pub fn uses_grad_scaler(self) -> bool {
        self == Precision::Mixed16
    }

    /// Lightning's fallback for a device type: `16-mixed` on the CPU becomes
    /// `bf16-mixed` with a warning ("AMP with fp16 is not supported on
    /// CPU"); everything else is kept. fulmen's plugin can run fp16 autocast
    /// on the CPU too; the trainer decides whether to apply this.
    pub fn lightning_fallback(self, device: DeviceType) -> (Precision, Option<String>) {
        if self == Precision::Mixed16 && device == DeviceType::Cpu {
            return (
                Precision::MixedBf16,
                Some(
                    "precision=\"16-mixed\" on the cpu accelerator: AMP with fp16 is not supported on CPU, \
                     using precision=\"bf16-mixed\" instead"
                        .to_string(),
                ),
            );
        }
        (self, None)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Precision::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lightning_strings() {
        let cases = [
            ("64-true", Precision::Double),
            ("64", Precision::Double),
            ("32-true", Precision::Full),
            ("32", Precision::Full),
            ("16-mixed", Precision::Mixed16),
            ("16", Precision::Mixed16),
            ("bf16-mixed", Precision::MixedBf16),
            ("bf16", Precision::MixedBf16),
            ("16-true", Precision::True16),
            ("bf16-true", Precision::TrueBf16),
            (" 32-true ", Precision::Full),
        ];
        for (s, p) in cases {
            assert_eq!(Precision::parse(s).unwrap(), p, "{s}");
            assert_eq!(Precision::parse(p.name()).unwrap(), p);
        }
        assert_eq!("bf16".parse::<Precision>().unwrap().to_string(), "bf16-mixed");
        assert!(Precision::legacy_warning("16").unwrap().contains("\"16-mixed\" instead"));
        assert!(Precision::legacy_warning("16-mixed").is_none());
    }

    #[test]
    fn rejects_others_listing_valid_values() {
        for bad in ["transformer-engine", "transformer-engine-float16", "bnb-int8", "8-true", "16-MIXED", "", "half"] {
            let err = Precision::parse(bad).unwrap_err();
            assert!(err.message.contains(&format!("precision {bad:?} is invalid")), "{}", err.message);
            assert!(
                err.message.contains("64-true, 32-true, 16-mixed, bf16-mixed, 16-true, bf16-true"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn kinds_and_flags() {
        assert_eq!(Precision::Mixed16.param_kind(), Kind::Float);
        assert_eq!(Precision::Mixed16.autocast_kind(), Some(Kind::Half));
        assert_eq!(Precision::MixedBf16.autocast_kind(), Some(Kind::BFloat16));
        assert_eq!(Precision::TrueBf16.param_kind(), Kind::BFloat16);
        assert_eq!(Precision::Double.param_kind(), Kind::Double);
        assert!(
            Precision::True16.casts_model() && !Precision::Full.casts_model() && !Precision::MixedBf16.casts_model()
        );
        assert!(Precision::Mixed16.uses_grad_scaler() && !Precision::MixedBf16.uses_grad_scaler());
        assert_eq!(Precision::Mixed16.lightning_fallback(DeviceType::Cpu).0, Precision::MixedBf16);
        assert_eq!(Precision::Mixed16.lightning_fallback(DeviceType::Cuda), (Precision::Mixed16, None));
    }
}

//! Peak FLOPs of known CUDA devices, as Lightning's `get_available_flops`
//! (fabric's `_CUDA_FLOPS` table and its parsing of device names); the
//! CPU and unknown devices have none.

/// (chip, dtype, peak FLOPs per second) from Lightning 2.6's table.
const CUDA_FLOPS: &[(&str, &str, f64)] = &[
    ("h200 sxm1", "float64", 3.400000e13),
    ("h200 sxm1", "float32", 6.700000e13),
    ("h200 sxm1", "tfloat32", 9.900000e14),
    ("h200 sxm1", "bfloat16", 2.000000e15),
    ("h200 sxm1", "float16", 2.000000e15),
    ("h200 sxm1", "int8", 4.000000e15),
    ("h200 nvl1", "float64", 3.000000e13),
    ("h200 nvl1", "float32", 6.000000e13),
    ("h200 nvl1", "tfloat32", 8.400000e14),
    ("h200 nvl1", "bfloat16", 1.700000e15),
    ("h200 nvl1", "float16", 1.700000e15),
    ("h200 nvl1", "int8", 3.300000e15),
    ("h100 nvl", "float64", 6.700000e13),
    ("h100 nvl", "float32", 1.338000e14),
    ("h100 nvl", "tfloat32", 9.894000e14),
    ("h100 nvl", "bfloat16", 1.978800e15),
    ("h100 nvl", "float16", 1.978800e15),
    ("h100 nvl", "int8", 3.957800e15),
    ("h100 sxm", "float64", 3.350000e13),
    ("h100 sxm", "float32", 6.690000e13),
    ("h100 sxm", "tfloat32", 4.947000e14),
    ("h100 sxm", "bfloat16", 9.894000e14),
    ("h100 sxm", "float16", 9.894000e14),
    ("h100 sxm", "int8", 1.978900e15),
    ("h100 pcie", "float64", 2.560000e13),
    ("h100 pcie", "float32", 5.120000e13),
    ("h100 pcie", "tfloat32", 3.780000e14),
    ("h100 pcie", "bfloat16", 7.560000e14),
    ("h100 pcie", "float16", 7.560000e14),
    ("h100 pcie", "int8", 1.513000e15),
    ("rtx 4090", "float32", 8.260000e13),
    ("rtx 4090", "tfloat32", 8.260000e13),
    ("rtx 4090", "bfloat16", 8.260000e13),
    ("rtx 4090", "float16", 8.260000e13),
    ("rtx 4090", "int8", 6.606000e14),
    ("rtx 4090", "int4", 1.321200e15),
    ("rtx 4080", "float32", 4.870000e13),
    ("rtx 4080", "tfloat32", 4.870000e13),
    ("rtx 4080", "bfloat16", 4.870000e13),
    ("rtx 4080", "float16", 4.870000e13),
    ("rtx 4080", "int8", 3.899000e14),
    ("rtx 4080", "int4", 7.798000e14),
    ("rtx 4080 super", "float32", 5.220000e13),
    ("rtx 4080 super", "tfloat32", 5.220000e13),
    ("rtx 4080 super", "bfloat16", 5.220000e13),
    ("rtx 4080 super", "float16", 5.220000e13),
    ("rtx 4080 super", "int8", 4.176000e14),
    ("rtx 4080 super", "int4", 8.352000e14),
    ("l4", "float32", 3.030000e13),
    ("l4", "tfloat32", 6.000000e13),
    ("l4", "bfloat16", 1.210000e14),
    ("l4", "float16", 1.210000e14),
    ("l4", "int8", 2.420000e14),
    ("l4", "int4", 4.840000e14),
    ("l40", "float32", 9.050000e13),
    ("l40", "tfloat32", 9.050000e13),
    ("l40", "bfloat16", 1.810000e14),
    ("l40", "float16", 1.810000e14),
    ("l40", "int8", 3.620000e14),
    ("l40", "int4", 7.240000e14),
    ("a100", "float64", 9.700000e12),
    ("a100", "float32", 1.950000e13),
    ("a100", "tfloat32", 1.560000e14),
    ("a100", "bfloat16", 3.120000e14),
    ("a100", "float16", 3.120000e14),
    ("a100", "int8", 6.240000e14),
    ("a6000", "float32", 3.870000e13),
    ("a6000", "tfloat32", 7.740000e13),
    ("a6000", "bfloat16", 3.870000e13),
    ("a6000", "float16", 3.870000e13),
    ("a6000", "int8", 3.097000e14),
    ("a6000", "int4", 6.193000e14),
    ("a40", "float32", 3.740000e13),
    ("a40", "tfloat32", 7.480000e13),
    ("a40", "bfloat16", 3.740000e13),
    ("a40", "float16", 3.740000e13),
    ("a40", "int8", 2.993000e14),
    ("a40", "int4", 5.987000e14),
    ("a10g", "float32", 3.120000e13),
    ("a10g", "tfloat32", 6.250000e13),
    ("a10g", "bfloat16", 1.250000e14),
    ("a10g", "float16", 1.250000e14),
    ("a10g", "int8", 2.500000e14),
    ("a10g", "int4", 5.000000e14),
    ("rtx 3090 ti", "float32", 4.000000e13),
    ("rtx 3090 ti", "tfloat32", 4.000000e13),
    ("rtx 3090 ti", "bfloat16", 4.000000e13),
    ("rtx 3090 ti", "float16", 4.000000e13),
    ("rtx 3090 ti", "int8", 3.200000e14),
    ("rtx 3090 ti", "int4", 6.400000e14),
    ("rtx 3090", "float32", 3.560000e13),
    ("rtx 3090", "tfloat32", 3.560000e13),
    ("rtx 3090", "bfloat16", 3.560000e13),
    ("rtx 3090", "float16", 3.560000e13),
    ("rtx 3090", "int8", 2.840000e14),
    ("rtx 3090", "int4", 5.680000e14),
    ("rtx 3080 ti", "float32", 3.410000e13),
    ("rtx 3080 ti", "tfloat32", 3.410000e13),
    ("rtx 3080 ti", "bfloat16", 3.410000e13),
    ("rtx 3080 ti", "float16", 3.410000e13),
    ("rtx 3080 ti", "int8", 2.728000e14),
    ("rtx 3080 ti", "int4", 5.466000e14),
    ("rtx 3080", "float32", 2.980000e13),
    ("rtx 3080", "tfloat32", 2.980000e13),
    ("rtx 3080", "bfloat16", 2.980000e13),
    ("rtx 3080", "float16", 2.980000e13),
    ("rtx 3080", "int8", 2.380000e14),
    ("rtx 3080", "int4", 4.760000e14),
    ("rtx 3070", "float32", 2.030000e13),
    ("rtx 3070", "tfloat32", 2.030000e13),
    ("rtx 3070", "bfloat16", 2.030000e13),
    ("rtx 3070", "float16", 2.030000e13),
    ("rtx 3070", "int8", 1.626000e14),
    ("rtx 3070", "int4", 3.252000e14),
    ("t4", "float32", 8.100000e12),
    ("t4", "float16", 6.500000e13),
    ("t4", "int8", 1.300000e14),
    ("t4", "int4", 2.600000e14),
    ("quadro rtx 5000", "float32", 1.120000e13),
    ("quadro rtx 5000", "float16", 8.920000e13),
    ("rtx 2080 super", "float32", 1.120000e13),
    ("rtx 2080 super", "float16", 2.230000e13),
    ("rtx 2080 super", "int8", 1.784000e14),
    ("rtx 2080 super", "int4", 3.568000e14),
    ("rtx 2080 ti", "float32", 1.420000e13),
    ("rtx 2080 ti", "float16", 2.850000e13),
    ("rtx 2080 ti", "int8", 2.277000e14),
    ("rtx 2080 ti", "int4", 4.554000e14),
    ("rtx 2080", "float32", 1.060000e13),
    ("rtx 2080", "float16", 2.120000e13),
    ("rtx 2080", "int8", 1.696000e14),
    ("rtx 2080", "int4", 3.391000e14),
    ("rtx 2070 super", "float32", 9.100000e12),
    ("rtx 2070 super", "float16", 1.810000e13),
    ("rtx 2070 super", "int8", 1.450000e14),
    ("rtx 2070 super", "int4", 2.900000e14),
    ("titan rtx", "float32", 1.630000e13),
    ("titan rtx", "float16", 3.260000e13),
    ("titan rtx", "int8", 2.610000e14),
    ("titan rtx", "int4", 5.220000e14),
    ("v100 sxm", "float64", 7.800000e12),
    ("v100 sxm", "float32", 1.570000e13),
    ("v100 sxm", "float16", 1.250000e14),
    ("v100 pcie", "float64", 7.000000e12),
    ("v100 pcie", "float32", 1.400000e13),
    ("v100 pcie", "float16", 1.120000e14),
    ("v100s pcie", "float64", 8.200000e12),
    ("v100s pcie", "float32", 1.640000e13),
    ("v100s pcie", "float16", 1.300000e14),
];

/// Lightning's chip key for a CUDA device name (`torch.cuda.get_device_name`).
fn chip_of(device_name: &str) -> Option<String> {
    let chip = device_name.to_lowercase();
    let has = |s: &str| chip.contains(s);
    let key = if has("h200") {
        if has("sxm1") {
            "h200 sxm1".to_string()
        } else if has("nvl1") {
            "h200 nvl1".to_string()
        } else {
            chip.clone()
        }
    } else if has("h100") {
        if has("hbm3") {
            "h100 sxm".to_string()
        } else if has("nvl") {
            "h100 nvl".to_string()
        } else if has("pcie") || has("hbm2e") {
            "h100 pcie".to_string()
        } else {
            chip.clone()
        }
    } else if has("l4") {
        if has("tesla") { "l40" } else { "l4" }.to_string()
    } else if has("geforce rtx") {
        let number = chip.split(' ').nth(3)?;
        let extra = if has("super") {
            " super"
        } else if has("ti") {
            " ti"
        } else {
            ""
        };
        format!("rtx {number}{extra}")
    } else {
        let plain = [
            ("a6000", "a6000"),
            ("a100", "a100"),
            ("a40", "a40"),
            ("a10g", "a10g"),
            ("t4", "t4"),
            ("quadro rtx 5000", "quadro rtx 5000"),
            ("titan rtx", "titan rtx"),
            ("v100-sxm", "v100 sxm"),
            ("v100-pcie", "v100 pcie"),
            ("v100s-pcie", "v100s pcie"),
        ];
        plain.iter().find(|(needle, _)| has(needle)).map(|(_, key)| key.to_string())?
    };
    Some(key)
}

/// The peak FLOPs per second of the CUDA device named `device_name` for
/// `dtype` ("float64", "float32", "tfloat32", "bfloat16", "float16",
/// "int8", "int4"), as Lightning's `get_available_flops`; `None` for a
/// device or dtype the table does not know.
pub fn available_flops(device_name: &str, dtype: &str) -> Option<f64> {
    let chip = chip_of(device_name)?;
    CUDA_FLOPS.iter().find(|(c, d, _)| *c == chip && *d == dtype).map(|(_, _, f)| *f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_lightning() {
        assert_eq!(available_flops("NVIDIA H100 80GB HBM3", "bfloat16"), Some(9.894e14));
        assert_eq!(available_flops("NVIDIA A100-SXM4-80GB", "float32"), Some(1.95e13));
        assert_eq!(available_flops("NVIDIA GeForce RTX 4080 SUPER", "float16"), Some(5.22e13));
        assert_eq!(available_flops("NVIDIA GeForce RTX 3090 Ti", "float32"), Some(4.0e13));
        assert_eq!(available_flops("NVIDIA L4", "float32"), Some(3.03e13));
        assert_eq!(available_flops("Tesla T4", "bfloat16"), None);
        assert_eq!(available_flops("NVIDIA H200", "bfloat16"), None);
        assert_eq!(available_flops("NVIDIA GeForce RTX", "float32"), None);
        assert_eq!(available_flops("cpu", "float32"), None);
    }
}

//! The tensor ops of the C API, written once. `tests/ops_drift.rs`
//! generates from this table the C functions (`src/ffi/tensor/gen_*.rs`,
//! then `fulmen.h` through cbindgen), the C++ methods and functions and
//! the Go methods and functions; each calls the core function of the same
//! name in `crate::tensor::ops`. Adding an op is one entry here plus its
//! core function, then `make header`.

/// How a parameter crosses the C boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `const fulmen_tensor *`, required.
    Tensor,
    /// `const fulmen_tensor *`, NULL for none.
    OptTensor,
    /// `const fulmen_tensor *const *`, with a `size_t <name>_len`.
    Tensors,
    /// `int64_t`.
    I64,
    /// `double`.
    F64,
    /// `bool`.
    Bool,
    /// `const int64_t *` with a `size_t <name>_len` (NULL when 0).
    Dims,
    /// NUL-terminated UTF-8 `const char *`.
    Str,
    /// `int32_t` holding a `fulmen_dtype`.
    DType,
}

/// One parameter: its name, kind and the C++ default (none when `""`).
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Name in C, C++ and Go (lower snake case).
    pub name: &'static str,
    /// How it crosses the boundary.
    pub kind: ParamKind,
    /// Default value in the C++ binding, written as in C++ (`DType` values
    /// by member name, e.g. `F32`); empty for none.
    pub default: &'static str,
}

/// What an op writes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// One new tensor through `out`.
    One,
    /// Two new tensors through two out-pointers with these names.
    Pair(&'static str, &'static str),
    /// Several new tensors: `outs[0..capacity]` and `*count_out`.
    List,
}

/// One op of the C API.
#[derive(Debug, Clone, Copy)]
pub struct TensorOp {
    /// The C function is `fulmen_tensor_<name>`; the core function has
    /// the same name (`where_` for `where`).
    pub name: &'static str,
    /// Generated file and core module it belongs to.
    pub group: &'static str,
    /// Parameters in order. A first tensor named `x` makes the op a method
    /// in C++ and Go.
    pub params: &'static [Param],
    /// What it returns.
    pub output: Output,
    /// What it computes (one sentence or two).
    pub doc: &'static str,
    /// The `Errors:` sentence of the header, without the prefix.
    pub errors: &'static str,
}

impl TensorOp {
    /// Whether the C++ and Go bindings make this op a method of its first
    /// tensor `x`.
    pub fn is_method(&self) -> bool {
        self.params.first().is_some_and(|p| p.name == "x" && p.kind == ParamKind::Tensor)
    }

    /// Name of the core function in `crate::tensor::ops`.
    pub fn core_name(&self) -> String {
        if self.name == "where" {
            "where_".into()
        } else {
            self.name.into()
        }
    }
}

const fn p(name: &'static str, kind: ParamKind, default: &'static str) -> Param {
    Param { name, kind, default }
}
const fn t(name: &'static str) -> Param {
    p(name, ParamKind::Tensor, "")
}
const fn i(name: &'static str, default: &'static str) -> Param {
    p(name, ParamKind::I64, default)
}
const fn f(name: &'static str, default: &'static str) -> Param {
    p(name, ParamKind::F64, default)
}
const fn b(name: &'static str, default: &'static str) -> Param {
    p(name, ParamKind::Bool, default)
}
const fn dims(name: &'static str) -> Param {
    p(name, ParamKind::Dims, "")
}

const X: Param = t("x");
const UNARY: &[Param] = &[X];
const WITH_OTHER: &[Param] = &[X, t("other")];
const REDUCE_DIMS: &[Param] = &[X, dims("dims"), b("keepdim", "false")];
const STATISTIC: &[Param] = &[X, dims("dims"), b("unbiased", "true"), b("keepdim", "false")];
const SORTING: &[Param] = &[X, i("dim", "-1"), b("descending", "false"), b("stable", "false")];
const ALONG_DIM: &[Param] = &[X, i("dim", "")];
const SCATTER: &[Param] = &[X, i("dim", ""), t("index"), t("src")];
const VALUES_INDICES: Output = Output::Pair("values", "indices");

const TORCH: &str = "FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on different devices)";
const BROADCAST: &str = "FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on different devices)";
const DIM: &str =
    "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype)";
const DIMS: &str = "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype)";
const FLOAT_DIMS: &str = "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating point), FULMEN_CODE_TORCH (libtorch failed)";
const SCATTER_ERRORS: &str = "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or an index value outside [0, size of `dim`)), FULMEN_CODE_SHAPE_MISMATCH (ranks differ, or `index` is larger than `src`, or than `x` outside `dim`), FULMEN_CODE_DTYPE_MISMATCH (`index` is not i64 or i32), FULMEN_CODE_TORCH (libtorch failed, e.g. `src` of another dtype than `x`)";

macro_rules! op {
    ($name:literal, $group:literal, $params:expr, $output:expr, $doc:literal, $errors:expr) => {
        TensorOp { name: $name, group: $group, params: $params, output: $output, doc: $doc, errors: $errors }
    };
}

/// Every generated tensor op, in header order.
pub const TENSOR_OPS: &[TensorOp] = &[
    // ---- selection and masking
    op!("where", "select", &[t("condition"), t("x"), t("y")], Output::One,
        "`out = condition ? x : y` elementwise (`torch.where`), broadcasting the three; `condition` is a bool tensor.",
        "FULMEN_CODE_DTYPE_MISMATCH (`condition` is not bool), FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. `x` and `y` of different dtypes or devices)"),
    op!("masked_fill", "select", &[X, t("mask"), f("value", "")], Output::One,
        "`x` with `value` wherever the bool tensor `mask` (broadcast to `x`'s shape) is true (`Tensor.masked_fill`): the attention mask op.",
        "FULMEN_CODE_DTYPE_MISMATCH (`mask` is not bool), FULMEN_CODE_SHAPE_MISMATCH (`mask` does not broadcast to `x`), FULMEN_CODE_TORCH (libtorch failed, e.g. `value` does not fit an integer dtype)"),
    op!("tril", "select", &[X, i("diagonal", "0")], Output::One,
        "Lower triangle of the last two dimensions: entries above diagonal `diagonal` (0 the main one, positive above it) set to 0.",
        "FULMEN_CODE_SHAPE_MISMATCH (`x` has fewer than 2 dimensions), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("triu", "select", &[X, i("diagonal", "0")], Output::One,
        "Upper triangle of the last two dimensions: entries below diagonal `diagonal` set to 0.",
        "FULMEN_CODE_SHAPE_MISMATCH (`x` has fewer than 2 dimensions), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("topk", "select", &[X, i("k", ""), i("dim", "-1"), b("largest", "true"), b("sorted", "true")], VALUES_INDICES,
        "The `k` largest (or, with `largest` false, smallest) entries along `dim` and their i64 positions (`torch.topk`).",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `k` outside [0, size of `dim`]), FULMEN_CODE_INVALID_ARGUMENT (`values` and `indices` are the same pointer), FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor)"),
    op!("sort", "select", SORTING, VALUES_INDICES,
        "Entries sorted along `dim` and their original i64 positions (`torch.sort`); `stable` keeps the order of equal entries.",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_INVALID_ARGUMENT (`values` and `indices` are the same pointer), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("argsort", "select", SORTING, Output::One,
        "The i64 positions that sort `x` along `dim` (`torch.argsort`).", DIM),
    op!("max_dim", "select", &[X, i("dim", ""), b("keepdim", "false")], VALUES_INDICES,
        "Largest entries along `dim` and their i64 positions (`torch.max(x, dim)`).",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_SHAPE_MISMATCH (`dim` is empty), FULMEN_CODE_INVALID_ARGUMENT (`values` and `indices` are the same pointer), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("min_dim", "select", &[X, i("dim", ""), b("keepdim", "false")], VALUES_INDICES,
        "Smallest entries along `dim` and their i64 positions (`torch.min(x, dim)`).",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_SHAPE_MISMATCH (`dim` is empty), FULMEN_CODE_INVALID_ARGUMENT (`values` and `indices` are the same pointer), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("maximum", "select", WITH_OTHER, Output::One,
        "Elementwise larger of `x` and `other`, broadcasting (`torch.maximum`; NaN wins).", BROADCAST),
    op!("minimum", "select", WITH_OTHER, Output::One,
        "Elementwise smaller of `x` and `other`, broadcasting (`torch.minimum`; NaN wins).", BROADCAST),
    op!("scatter", "select", SCATTER, Output::One,
        "A copy of `x` with `src`'s values written along `dim` at the positions in `index` (`Tensor.scatter`).", SCATTER_ERRORS),
    op!("scatter_add", "select", SCATTER, Output::One,
        "A copy of `x` with `src`'s values added along `dim` at the positions in `index` (`Tensor.scatter_add`).", SCATTER_ERRORS),
    op!("one_hot", "select", &[X, i("num_classes", "-1")], Output::One,
        "One-hot i64 encoding of the i64 class indices `x`, a new last dimension of `num_classes` (-1: the largest index plus one) (`F.one_hot`).",
        "FULMEN_CODE_DTYPE_MISMATCH (`x` is not i64), FULMEN_CODE_OUT_OF_RANGE (an index outside [0, num_classes)), FULMEN_CODE_INVALID_ARGUMENT (`num_classes` below -1, or -1 with no index), FULMEN_CODE_SHAPE_MISMATCH (the result has too many elements), FULMEN_CODE_TORCH (libtorch failed, e.g. out of memory)"),
    // ---- shapes and splits
    op!("expand", "shape", &[X, dims("size")], Output::One,
        "A view of `x` broadcast to `size` without copying (`Tensor.expand`): size-1 dimensions stretch, -1 keeps a size, new dimensions go in front.",
        "FULMEN_CODE_SHAPE_MISMATCH (`size` has fewer dimensions than `x`, or a size that does not match), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("repeat", "shape", &[X, dims("repeats")], Output::One,
        "`x` tiled `repeats[i]` times along each dimension, copying (`Tensor.repeat`); extra leading entries add dimensions.",
        "FULMEN_CODE_SHAPE_MISMATCH (fewer entries than `x` has dimensions, or too many elements), FULMEN_CODE_INVALID_ARGUMENT (a negative count), FULMEN_CODE_TORCH (libtorch failed, e.g. out of memory)"),
    op!("flip", "shape", &[X, dims("dims")], Output::One,
        "`x` reversed along each dimension in `dims` (`torch.flip`).", DIMS),
    op!("roll", "shape", &[X, dims("shifts"), dims("dims")], Output::One,
        "`x` shifted cyclically by `shifts[i]` along `dims[i]`; with no dims, the flattened tensor by its one shift (`torch.roll`).",
        "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (shift and dimension counts differ), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("unflatten", "shape", &[X, i("dim", ""), dims("sizes")], Output::One,
        "Dimension `dim` of `x` split into the dimensions `sizes`, one of which may be -1 (`Tensor.unflatten`).",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_SHAPE_MISMATCH (`sizes` empty, with more than one -1, or not multiplying to the size of `dim`), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("chunk", "shape", &[X, i("chunks", ""), i("dim", "0")], Output::List,
        "`x` cut along `dim` into at most `chunks` views of equal size, the last possibly smaller (`torch.chunk`).",
        "FULMEN_CODE_INVALID_ARGUMENT (`chunks` not positive), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count: then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("split", "shape", &[X, i("split_size", ""), i("dim", "0")], Output::List,
        "`x` cut along `dim` into views of `split_size`, the last possibly smaller (`torch.split`).",
        "FULMEN_CODE_INVALID_ARGUMENT (`split_size` not positive), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count: then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("split_sizes", "shape", &[X, dims("sizes"), i("dim", "0")], Output::List,
        "`x` cut along `dim` into views of the given sizes, which sum to the size of `dim` (`torch.split` with a list).",
        "FULMEN_CODE_SHAPE_MISMATCH (a negative size, or sizes not summing to the size of `dim`), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count: then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("unbind", "shape", &[X, i("dim", "0")], Output::List,
        "The slices of `x` along `dim`, that dimension removed (`torch.unbind`).",
        "FULMEN_CODE_SHAPE_MISMATCH (`x` is 0-dimensional), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or `capacity` below the count: then only `*count_out` is written), FULMEN_CODE_TORCH (libtorch failed)"),
    // ---- scans and reductions
    op!("cumsum", "reduce", ALONG_DIM, Output::One,
        "Running sum along `dim` (`torch.cumsum`); integers and bools accumulate in i64.", DIM),
    op!("cumprod", "reduce", ALONG_DIM, Output::One,
        "Running product along `dim` (`torch.cumprod`); integers and bools accumulate in i64.", DIM),
    op!("logsumexp", "reduce", REDUCE_DIMS, Output::One,
        "`log(sum(exp(x)))` over `dims` (all dimensions when `dims_len` is 0), computed stably (`torch.logsumexp`).", FLOAT_DIMS),
    op!("amax", "reduce", REDUCE_DIMS, Output::One,
        "Largest value over `dims` (all dimensions when `dims_len` is 0) (`torch.amax`).",
        "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_SHAPE_MISMATCH (a reduced dimension is empty), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("amin", "reduce", REDUCE_DIMS, Output::One,
        "Smallest value over `dims` (all dimensions when `dims_len` is 0) (`torch.amin`).",
        "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_SHAPE_MISMATCH (a reduced dimension is empty), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("var", "reduce", STATISTIC, Output::One,
        "Variance over `dims` (all dimensions when `dims_len` is 0); `unbiased` divides by N - 1 (`torch.var`).", FLOAT_DIMS),
    op!("std", "reduce", STATISTIC, Output::One,
        "Standard deviation over `dims` (all dimensions when `dims_len` is 0); `unbiased` divides by N - 1 (`torch.std`).", FLOAT_DIMS),
    op!("all", "reduce", UNARY, Output::One,
        "Whether every element is non-zero, as a 0-dimensional bool tensor (`torch.all`).", TORCH),
    op!("any", "reduce", UNARY, Output::One,
        "Whether any element is non-zero, as a 0-dimensional bool tensor (`torch.any`).", TORCH),
    // ---- elementwise math and logic
    op!("sin", "math", UNARY, Output::One, "Sine, elementwise.", TORCH),
    op!("cos", "math", UNARY, Output::One, "Cosine, elementwise.", TORCH),
    op!("rsqrt", "math", UNARY, Output::One, "`1 / sqrt(x)`, elementwise.", TORCH),
    op!("reciprocal", "math", UNARY, Output::One, "`1 / x`, elementwise.", TORCH),
    op!("floor", "math", UNARY, Output::One, "Rounds down, elementwise.", TORCH),
    op!("ceil", "math", UNARY, Output::One, "Rounds up, elementwise.", TORCH),
    op!("round", "math", UNARY, Output::One, "Rounds to the nearest integer, halves to even, elementwise.", TORCH),
    op!("sign", "math", UNARY, Output::One, "-1, 0 or 1 by the sign of each element.", TORCH),
    op!("log1p", "math", UNARY, Output::One, "`log(1 + x)`, accurate near 0, elementwise.", TORCH),
    op!("expm1", "math", UNARY, Output::One, "`exp(x) - 1`, accurate near 0, elementwise.", TORCH),
    op!("erf", "math", UNARY, Output::One, "Gauss error function, elementwise.", TORCH),
    op!("square", "math", UNARY, Output::One, "`x * x`, elementwise.", TORCH),
    op!("logical_and", "math", WITH_OTHER, Output::One,
        "Elementwise logical and (non-zero is true) as a bool tensor, broadcasting.", BROADCAST),
    op!("logical_or", "math", WITH_OTHER, Output::One,
        "Elementwise logical or (non-zero is true) as a bool tensor, broadcasting.", BROADCAST),
    op!("logical_xor", "math", WITH_OTHER, Output::One,
        "Elementwise logical exclusive or (non-zero is true) as a bool tensor, broadcasting.", BROADCAST),
    op!("logical_not", "math", UNARY, Output::One,
        "Elementwise logical not (non-zero is true) as a bool tensor.", TORCH),
    op!("einsum", "math", &[p("equation", ParamKind::Str, ""), p("tensors", ParamKind::Tensors, "")], Output::One,
        "Einstein summation of `tensors[0..tensors_len]` by `equation`, e.g. \"bij,bjk->bik\" (`torch.einsum`).",
        "FULMEN_CODE_INVALID_ARGUMENT (no tensors, or `equation` not UTF-8 or holding other characters than letters, ',', '->' and '...'), FULMEN_CODE_TORCH (libtorch refused the equation or the shapes)"),
    op!("linspace", "math", &[f("start", ""), f("end", ""), i("steps", ""), p("dtype", ParamKind::DType, "F32")], Output::One,
        "`steps` evenly spaced CPU values from `start` to `end`, both included (`torch.linspace`).",
        "FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype), FULMEN_CODE_INVALID_ARGUMENT (non-finite bounds or negative `steps`), FULMEN_CODE_TORCH (libtorch failed, e.g. a bool dtype or out of memory)"),
    // ---- activations
    op!("softplus", "activation", &[X, f("beta", "1.0"), f("threshold", "20.0")], Output::One,
        "`log(1 + exp(beta * x)) / beta`, and `x` where `beta * x` exceeds `threshold` (`F.softplus`).",
        "FULMEN_CODE_INVALID_ARGUMENT (`beta` zero or not finite), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("mish", "activation", UNARY, Output::One, "`x * tanh(softplus(x))` (`F.mish`).", TORCH),
    op!("hardswish", "activation", UNARY, Output::One, "`x * relu6(x + 3) / 6` (`F.hardswish`).", TORCH),
    op!("hardsigmoid", "activation", UNARY, Output::One, "`relu6(x + 3) / 6` (`F.hardsigmoid`).", TORCH),
    op!("relu6", "activation", UNARY, Output::One, "`min(max(x, 0), 6)` (`F.relu6`).", TORCH),
    op!("elu", "activation", &[X, f("alpha", "1.0")], Output::One,
        "`x` above 0, else `(exp(x) - 1) * alpha` (`F.elu`).", TORCH),
    op!("selu", "activation", UNARY, Output::One, "ELU scaled by the self-normalising constants (`F.selu`).", TORCH),
    op!("glu", "activation", &[X, i("dim", "-1")], Output::One,
        "Gated linear unit: with `a, b` the halves of `dim`, `a * sigmoid(b)` (`F.glu`).",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_SHAPE_MISMATCH (the size of `dim` is odd), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("gelu_tanh", "activation", UNARY, Output::One,
        "GELU with the tanh approximation (`F.gelu(x, approximate=\"tanh\")`, GPT-2's).", TORCH),
    op!("prelu", "activation", &[X, t("weight")], Output::One,
        "`x` above 0, else `weight * x`, `weight` holding one slope or one per channel (dimension 1) (`F.prelu`).",
        "FULMEN_CODE_SHAPE_MISMATCH (`weight` holds neither 1 nor channel-count values), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("logsigmoid", "activation", UNARY, Output::One, "`log(sigmoid(x))`, computed stably (`F.logsigmoid`).", TORCH),
    // ---- attention
    op!("scaled_dot_product_attention", "attention",
        &[t("query"), t("key"), t("value"), p("attn_mask", ParamKind::OptTensor, "nullptr"), f("dropout_p", "0.0"), b("is_causal", "false"), f("scale", "0.0")],
        Output::One,
        "`softmax(query keyᵀ · scale + mask) value` over `query` (…, L, E), `key` (…, S, E), `value` (…, S, Ev) (`F.scaled_dot_product_attention`). `attn_mask` (NULL for none) broadcasts to (…, L, S): bool (true attends) or additive of `query`'s dtype. `is_causal` lets each query attend to keys up to its own position. `dropout_p` drops weights (pass 0 in eval). `scale` 0 means `1 / sqrt(E)`.",
        "FULMEN_CODE_SHAPE_MISMATCH (fewer than 2 dimensions, sizes that do not match, or a mask that does not broadcast), FULMEN_CODE_DTYPE_MISMATCH (a mask neither bool nor of `query`'s dtype), FULMEN_CODE_INVALID_ARGUMENT (`dropout_p` outside [0, 1), a non-finite `scale`, or both a mask and `is_causal`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)"),
];

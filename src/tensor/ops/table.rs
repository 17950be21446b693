//! The tensor ops of the C API, written once. `tools/codegen/ops.rs`
//! generates from this table the C functions
//! (`src/ffi/{tensor_ops,losses}/gen_*.rs`, then their headers through
//! cbindgen), the C++ methods and functions and
//! the Go methods and functions; each calls the core function of the same
//! name in `crate::tensor::ops`. Adding an op is one entry here plus its
//! core function, then `make header`; an op that changes its first tensor
//! in place (`Output::InPlace`) goes the same way.

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
    /// `int32_t` holding a `fulmen_reduction`.
    Reduction,
    /// `const void *` with a `size_t <len>` byte count and an `int32_t dtype`
    /// holding the `fulmen_dtype` of its elements: row-major host data, as
    /// many elements as the op's first tensor, read into a CPU tensor of
    /// that shape. C++ takes a `std::vector<T>`, Go a `[]T` (the dtype of
    /// `T`).
    HostData,
}

/// One parameter: its name, kind and the C++ default (none when `""`).
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Name in C, C++ and Go (lower snake case).
    pub name: &'static str,
    /// How it crosses the boundary.
    pub kind: ParamKind,
    /// Default value in the C++ binding, written as in C++ (`DType` and
    /// `Reduction` values by member name, e.g. `F32`, `Mean`); empty for
    /// none.
    pub default: &'static str,
    /// Name of the C length parameter of a `Tensors`, `Dims` or `HostData`
    /// parameter; empty for `<name>_len`.
    pub len: &'static str,
}

impl Param {
    /// Name of the C length parameter that follows this one.
    pub fn len_name(&self) -> String {
        if self.len.is_empty() {
            format!("{}_len", self.name)
        } else {
            self.len.into()
        }
    }
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
    /// Nothing new: the first tensor is changed in place and the C function
    /// returns only its error (C++ returns the tensor, Go the error).
    InPlace,
}

/// One op of the C API.
#[derive(Debug, Clone, Copy)]
pub struct TensorOp {
    /// `tensor` or `loss`: the C function is `fulmen_<family>_<name>`;
    /// losses are functions of `fulmen::loss` in C++.
    pub family: &'static str,
    /// The C function's last part; the core function has the same name
    /// (`where_` for `where`).
    pub name: &'static str,
    /// Generated file and core module it belongs to.
    pub group: &'static str,
    /// Parameters in order.
    pub params: &'static [Param],
    /// What it returns.
    pub output: Output,
    /// Whether the C++ and Go bindings make it a method of its first
    /// parameter, a tensor (Go makes an op with `HostData` a generic
    /// function instead).
    pub method: bool,
    /// What it computes (one sentence or two).
    pub doc: &'static str,
    /// The `Errors:` sentence of the header, without the prefix.
    pub errors: &'static str,
}

impl TensorOp {
    /// The C function's name.
    pub fn c_name(&self) -> String {
        format!("fulmen_{}_{}", self.family, self.name)
    }

    /// Whether the C++ and Go bindings make this op a method of its first
    /// tensor.
    pub fn is_method(&self) -> bool {
        self.method
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
    Param { name, kind, default, len: "" }
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
/// `param` with its C length parameter named `len` (not `<name>_len`).
const fn len_named(param: Param, len: &'static str) -> Param {
    Param { len, ..param }
}
/// Whether an op taking `params` is a method: its first parameter is a
/// tensor.
const fn leads_with_tensor(params: &[Param]) -> bool {
    matches!(params.first(), Some(Param { kind: ParamKind::Tensor, .. }))
}

const X: Param = t("x");
const UNARY: &[Param] = &[X];
const BINARY: &[Param] = &[t("a"), t("b")];
const WITH_OTHER: &[Param] = &[X, t("other")];
const REDUCE_DIMS: &[Param] = &[X, dims("dims"), b("keepdim", "false")];
const STATISTIC: &[Param] = &[X, dims("dims"), b("unbiased", "true"), b("keepdim", "false")];
const SORTING: &[Param] = &[X, i("dim", "-1"), b("descending", "false"), b("stable", "false")];
const ALONG_DIM: &[Param] = &[X, i("dim", "")];
const SCATTER: &[Param] = &[X, i("dim", ""), t("index"), t("src")];
const OVER_DIMS: &[Param] = &[X, len_named(dims("dims"), "ndims"), b("keepdim", "false")];
const ARG_EXTREMUM: &[Param] = &[X, i("dim", ""), b("keepdim", "false")];
const NEW_SHAPE: &[Param] = &[X, len_named(dims("shape"), "ndim")];
const JOIN: &[Param] = &[len_named(p("tensors", ParamKind::Tensors, ""), "n"), i("dim", "0")];
const VALUES_INDICES: Output = Output::Pair("values", "indices");
const TENSOR: Param = t("tensor");

const TORCH: &str = "FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on different devices)";
const BROADCAST: &str = "FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype or tensors on different devices)";
const DIM: &str =
    "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype)";
const DIMS: &str = "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH (libtorch failed, e.g. an unsupported dtype)";
const FLOAT_DIMS: &str = "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating point), FULMEN_CODE_TORCH (libtorch failed)";
const TORCH_OOM: &str = "FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY";
const NOT_BOOL: &str = "FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor)";
const ARITHMETIC: &str = "FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)";
const NOT_INTEGER: &str = "FULMEN_CODE_DTYPE_MISMATCH (an i64 or i32 tensor), FULMEN_CODE_TORCH (libtorch failed, e.g. another integer or bool tensor)";
const SOFTMAX_ERRORS: &str = "FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY";
const EXTREMUM_ERRORS: &str = "FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY";
const ARG_EXTREMUM_ERRORS: &str = "FULMEN_CODE_SHAPE_MISMATCH (the tensor is empty), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch failed, e.g. a bool tensor)";
const DIM_ONLY: &str = "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range)";
const UNWRITABLE: &str = "FULMEN_CODE_TORCH (the tensor cannot be written)";
const NOT_FITTING: &str = "FULMEN_CODE_SHAPE_MISMATCH (shapes that do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. dtypes that do not fit)";
const SCATTER_ERRORS: &str = "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or an index value outside [0, size of `dim`)), FULMEN_CODE_SHAPE_MISMATCH (ranks differ, or `index` is larger than `src`, or than `x` outside `dim`), FULMEN_CODE_DTYPE_MISMATCH (`index` is not i64 or i32), FULMEN_CODE_TORCH (libtorch failed, e.g. `src` of another dtype than `x`)";

/// A tensor op; a method of its first parameter when that is a tensor.
macro_rules! op {
    ($name:literal, $group:literal, $params:expr, $output:expr, $doc:literal, $errors:expr) => {
        TensorOp {
            family: "tensor",
            name: $name,
            group: $group,
            params: $params,
            output: $output,
            method: leads_with_tensor($params),
            doc: $doc,
            errors: $errors,
        }
    };
}

/// A tensor op that the bindings make a free function although a tensor
/// comes first.
macro_rules! free_op {
    ($name:literal, $group:literal, $params:expr, $output:expr, $doc:literal, $errors:expr) => {
        TensorOp {
            family: "tensor",
            name: $name,
            group: $group,
            params: $params,
            output: $output,
            method: false,
            doc: $doc,
            errors: $errors,
        }
    };
}

macro_rules! loss {
    ($name:literal, $params:expr, $doc:literal, $errors:expr) => {
        TensorOp {
            family: "loss",
            name: $name,
            group: "loss",
            params: $params,
            output: Output::One,
            method: false,
            doc: $doc,
            errors: $errors,
        }
    };
}

const fn opt(name: &'static str) -> Param {
    p(name, ParamKind::OptTensor, "nullptr")
}
const REDUCTION: Param = p("reduction", ParamKind::Reduction, "Mean");
const PAIR_LOSS: &[Param] = &[t("input"), t("target"), REDUCTION];
const LOSS_ERRORS: &str = "FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating), FULMEN_CODE_SHAPE_MISMATCH (their shapes differ), FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction, or is BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)";
const CLASS_ERRORS: &str = "FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction, or is BATCH_MEAN), FULMEN_CODE_DTYPE_MISMATCH (`logits` not floating, or class targets not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s shape does not fit `logits`), FULMEN_CODE_OUT_OF_RANGE (a class target outside [0, C); inside a Trainer's run on an accelerator the call succeeds, ignoring such a target, and the run fails at its next reading of values, see `detect_nonfinite_loss`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)";
const CLASS_OPTION_ERRORS: &str = "FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction, or is BATCH_MEAN; `label_smoothing` outside [0, 1]), FULMEN_CODE_DTYPE_MISMATCH (logits or weight not floating, or class targets not i64, i32 or u8), FULMEN_CODE_SHAPE_MISMATCH (`target`'s shape does not fit the logits, or `weight` is not of shape [C]), FULMEN_CODE_OUT_OF_RANGE (a class target outside [0, C) other than `ignore_index`; inside a Trainer's run on an accelerator the call succeeds, ignoring such a target, and the run fails at its next reading of values, see `detect_nonfinite_loss`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)";
const PAIR_LABEL_ERRORS: &str = "FULMEN_CODE_DTYPE_MISMATCH (inputs not floating), FULMEN_CODE_SHAPE_MISMATCH (shapes that do not fit), FULMEN_CODE_INVALID_ARGUMENT (a target other than 1 or -1, a bad `margin`, or `reduction` not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed)";

/// Every generated tensor op, in header order.
pub const TENSOR_OPS: &[TensorOp] = &[
    // ---- arithmetic
    op!("add", "math", BINARY, Output::One, "`out = a + b`, broadcasting as PyTorch does.", ARITHMETIC),
    op!("sub", "math", BINARY, Output::One, "`out = a - b`, broadcasting.",
        "FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices or two bool tensors)"),
    op!("mul", "math", BINARY, Output::One, "`out = a * b` elementwise, broadcasting.", ARITHMETIC),
    op!("div", "math", BINARY, Output::One, "`out = a / b` elementwise (true division), broadcasting.", ARITHMETIC),
    op!("pow", "math", BINARY, Output::One, "`out = a ^ b` elementwise, broadcasting.",
        "FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices or integers to negative integer powers)"),
    op!("add_scalar", "math", &[X, f("value", "")], Output::One, "`out = x + value`.", TORCH_OOM),
    op!("mul_scalar", "math", &[X, f("value", "")], Output::One, "`out = x * value`.", TORCH_OOM),
    op!("pow_scalar", "math", &[X, f("exponent", "")], Output::One, "`out = x ^ exponent`.", TORCH_OOM),
    op!("clamp", "math", &[X, f("min", ""), f("max", "")], Output::One, "`out = clamp(x, min, max)`.",
        "FULMEN_CODE_INVALID_ARGUMENT (`min` or `max` is NaN, or `min` > `max`), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY"),
    op!("neg", "math", UNARY, Output::One, "`out = -x`.", NOT_BOOL),
    op!("exp", "math", UNARY, Output::One, "`out = exp(x)`.", TORCH_OOM),
    op!("log", "math", UNARY, Output::One, "`out = ln(x)`.", TORCH_OOM),
    op!("sqrt", "math", UNARY, Output::One, "`out = sqrt(x)`.", TORCH_OOM),
    op!("abs", "math", UNARY, Output::One, "`out = |x|`.", TORCH_OOM),
    op!("matmul", "math", BINARY, Output::One,
        "Matrix product with `torch.matmul` semantics (vectors, matrices, batched). The inner dimensions must agree.",
        "FULMEN_CODE_DTYPE_MISMATCH (the dtypes differ, or i64/i32 where libtorch has no kernel, e.g. on CUDA), FULMEN_CODE_SHAPE_MISMATCH (a 0-dimensional tensor, inner dimensions that differ, or batch dimensions that do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)"),
    // ---- selection and masking
    free_op!("where", "select", &[t("condition"), t("x"), t("y")], Output::One,
        "`out = condition ? x : y` elementwise (`torch.where`), broadcasting the three; `condition` is a bool tensor.",
        "FULMEN_CODE_DTYPE_MISMATCH (`condition` is not bool), FULMEN_CODE_SHAPE_MISMATCH (shapes do not broadcast), FULMEN_CODE_TORCH (libtorch failed, e.g. `x` and `y` of different dtypes or devices)"),
    op!("masked_fill", "select", &[X, t("mask"), f("value", "")], Output::One,
        "`x` with `value` wherever the bool tensor `mask` is true, `x` and `mask` broadcast together (`torch.masked_fill`): the attention mask op.",
        "FULMEN_CODE_DTYPE_MISMATCH (`mask` is not bool), FULMEN_CODE_SHAPE_MISMATCH (`x` and `mask` do not broadcast, or the result has too many elements), FULMEN_CODE_TORCH (libtorch failed, e.g. `value` does not fit an integer dtype)"),
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
        "FULMEN_CODE_DTYPE_MISMATCH (`x` is not i64), FULMEN_CODE_OUT_OF_RANGE (an index outside [0, num_classes)), FULMEN_CODE_INVALID_ARGUMENT (`num_classes` below -1, or -1 with no index), FULMEN_CODE_SHAPE_MISMATCH (the result has too many elements), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY"),
    // ---- shapes and splits
    op!("reshape", "shape", NEW_SHAPE, Output::One,
        "Same elements in a new shape (`-1` infers one size); copies if needed.",
        "FULMEN_CODE_SHAPE_MISMATCH (the element count does not fit `shape`, or more than one -1 or another negative size), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY (copying)"),
    op!("view", "shape", NEW_SHAPE, Output::One,
        "Same storage in a new shape; fails when the layout does not allow a view.",
        "FULMEN_CODE_SHAPE_MISMATCH (the element count does not fit `shape`, or more than one -1 or another negative size), FULMEN_CODE_TORCH (the layout does not allow a view)"),
    op!("flatten", "shape", &[X, i("start_dim", "0"), i("end_dim", "-1")], Output::One,
        "Flattens dimensions `start_dim..=end_dim` into one.",
        "FULMEN_CODE_OUT_OF_RANGE (`start_dim` or `end_dim` out of range), FULMEN_CODE_INVALID_ARGUMENT (`start_dim` comes after `end_dim`)"),
    op!("permute", "shape", &[X, len_named(dims("dims"), "ndims")], Output::One,
        "Reorders dimensions: `dims` is a permutation of `0..ndim`.",
        "FULMEN_CODE_SHAPE_MISMATCH (`ndims` is not the tensor's number of dimensions), FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice)"),
    op!("transpose", "shape", &[X, i("dim0", ""), i("dim1", "")], Output::One,
        "Swaps dimensions `dim0` and `dim1`.", "FULMEN_CODE_OUT_OF_RANGE (`dim0` or `dim1` out of range)"),
    op!("squeeze", "shape", ALONG_DIM, Output::One,
        "Removes dimension `dim` if its size is 1 (otherwise returns the same shape).", DIM_ONLY),
    op!("unsqueeze", "shape", ALONG_DIM, Output::One, "Inserts a dimension of size 1 at `dim` (`-1` appends).", DIM_ONLY),
    op!("narrow", "shape", &[X, i("dim", ""), i("start", ""), i("length", "")], Output::One,
        "The slice `start..start+length` of dimension `dim` (a view).",
        "FULMEN_CODE_OUT_OF_RANGE (`dim` out of range, or the slice does not lie inside the dimension), FULMEN_CODE_SHAPE_MISMATCH (a 0-dimensional tensor)"),
    op!("cat", "shape", JOIN, Output::One,
        "Concatenates `tensors[0..n]` along the existing dimension `dim`; all other dimensions must match.",
        "FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_SHAPE_MISMATCH (ranks, or sizes outside `dim`, differ), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch failed, e.g. 0-dimensional tensors or tensors on different devices)"),
    op!("stack", "shape", JOIN, Output::One,
        "Stacks `tensors[0..n]` (all of one shape) along a new dimension `dim`.",
        "FULMEN_CODE_INVALID_ARGUMENT (`n` is 0), FULMEN_CODE_SHAPE_MISMATCH (shapes differ), FULMEN_CODE_OUT_OF_RANGE (`dim` out of range), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)"),
    op!("expand", "shape", &[X, dims("size")], Output::One,
        "A view of `x` broadcast to `size` without copying (`Tensor.expand`): size-1 dimensions stretch, -1 keeps a size, new dimensions go in front.",
        "FULMEN_CODE_SHAPE_MISMATCH (`size` has fewer dimensions than `x`, or a size that does not match), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("interpolate", "shape", &[X, dims("size"), f("scale_factor", "0"), p("mode", ParamKind::Str, "\"nearest\""), b("align_corners", "false")], Output::One,
        "`x` (N, C, spatial...) with 1 to 3 spatial dimensions resized to `size` (one size per spatial dimension, or one for all) or by `scale_factor` (give exactly one: `size_len` 0 or `scale_factor` 0 leaves it out), with `mode` \"nearest\", \"linear\" (1-D), \"bilinear\" or \"bicubic\" (2-D) or \"trilinear\" (3-D) (`F.interpolate`; `align_corners` for the linear and cubic modes).",
        "FULMEN_CODE_INVALID_ARGUMENT (an unknown mode, both or neither of size and scale_factor, a size not positive, a scale not positive and finite, align_corners with nearest), FULMEN_CODE_SHAPE_MISMATCH (an input that is not 3-D to 5-D, a mode for another number of spatial dimensions, an empty or too large result), FULMEN_CODE_TORCH (libtorch failed)"),
    op!("repeat", "shape", &[X, dims("repeats")], Output::One,
        "`x` tiled `repeats[i]` times along each dimension, copying (`Tensor.repeat`); extra leading entries add dimensions.",
        "FULMEN_CODE_SHAPE_MISMATCH (fewer entries than `x` has dimensions, or too many elements), FULMEN_CODE_INVALID_ARGUMENT (a negative count), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY"),
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
    op!("sum", "reduce", UNARY, Output::One, "Sum of all elements (a 0-dimensional tensor).", TORCH_OOM),
    op!("mean", "reduce", UNARY, Output::One, "Mean of all elements (floating tensors only).",
        "FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY"),
    op!("sum_dims", "reduce", OVER_DIMS, Output::One, "Sum over `dims[0..ndims]`, keeping them as size 1 when `keepdim`.",
        "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY"),
    op!("mean_dims", "reduce", OVER_DIMS, Output::One, "Mean over `dims[0..ndims]`, keeping them as size 1 when `keepdim`.",
        "FULMEN_CODE_DTYPE_MISMATCH (`x` is not floating), FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH (libtorch failed) or FULMEN_CODE_OUT_OF_MEMORY"),
    op!("max", "reduce", UNARY, Output::One, "Largest element (0-dimensional). The tensor must not be empty.", EXTREMUM_ERRORS),
    op!("min", "reduce", UNARY, Output::One, "Smallest element (0-dimensional). The tensor must not be empty.", EXTREMUM_ERRORS),
    op!("argmax", "reduce", ARG_EXTREMUM, Output::One, "Indices (i64) of the largest values along `dim`.", ARG_EXTREMUM_ERRORS),
    op!("argmin", "reduce", ARG_EXTREMUM, Output::One, "Indices (i64) of the smallest values along `dim`.", ARG_EXTREMUM_ERRORS),
    op!("cumsum", "reduce", ALONG_DIM, Output::One,
        "Running sum along `dim` (`torch.cumsum`); integers and bools accumulate in i64.", DIM),
    op!("cumprod", "reduce", ALONG_DIM, Output::One,
        "Running product along `dim` (`torch.cumprod`); integers and bools accumulate in i64.", DIM),
    op!("logsumexp", "reduce", REDUCE_DIMS, Output::One,
        "`log(sum(exp(x)))` over `dims` (all dimensions when `dims_len` is 0), computed stably (`torch.logsumexp`; integer and bool input is read as f32, as torch reads it).",
        "FULMEN_CODE_OUT_OF_RANGE (a dimension out of range), FULMEN_CODE_INVALID_ARGUMENT (a dimension given twice), FULMEN_CODE_TORCH (libtorch failed)"),
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
        "FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype), FULMEN_CODE_INVALID_ARGUMENT (non-finite bounds or negative `steps`), FULMEN_CODE_TORCH (libtorch failed, e.g. a bool dtype) or FULMEN_CODE_OUT_OF_MEMORY"),
    // ---- activations
    op!("relu", "activation", UNARY, Output::One, "`out = max(x, 0)`.", NOT_BOOL),
    op!("leaky_relu", "activation", &[X, f("slope", "0.01")], Output::One, "`out = x if x > 0 else slope * x`.", TORCH_OOM),
    op!("sigmoid", "activation", UNARY, Output::One, "Logistic sigmoid.", TORCH_OOM),
    op!("tanh", "activation", UNARY, Output::One, "Hyperbolic tangent.", TORCH_OOM),
    op!("gelu", "activation", UNARY, Output::One, "GELU (exact, erf form).", NOT_INTEGER),
    op!("silu", "activation", UNARY, Output::One, "SiLU (swish): `x * sigmoid(x)`.", NOT_INTEGER),
    op!("softmax", "activation", ALONG_DIM, Output::One, "Softmax along `dim` (negative counts from the end).", SOFTMAX_ERRORS),
    op!("log_softmax", "activation", ALONG_DIM, Output::One, "Log-softmax along `dim` (negative counts from the end).", SOFTMAX_ERRORS),
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
    free_op!("scaled_dot_product_attention", "attention",
        &[t("query"), t("key"), t("value"), p("attn_mask", ParamKind::OptTensor, "nullptr"), f("dropout_p", "0.0"), b("is_causal", "false"), f("scale", "0.0")],
        Output::One,
        "`softmax(query keyᵀ · scale + mask) value` over `query` (…, L, E), `key` (…, S, E), `value` (…, S, Ev) (`F.scaled_dot_product_attention`). `attn_mask` (NULL for none) broadcasts to (…, L, S): bool (true attends) or additive of `query`'s dtype. `is_causal` lets each query attend to keys up to its own position. `dropout_p` drops weights (pass 0 in eval). `scale` 0 means `1 / sqrt(E)`.",
        "FULMEN_CODE_SHAPE_MISMATCH (fewer than 2 dimensions, sizes that do not match, or a mask that does not broadcast), FULMEN_CODE_DTYPE_MISMATCH (a mask neither bool nor of `query`'s dtype), FULMEN_CODE_INVALID_ARGUMENT (`dropout_p` outside [0, 1), a non-finite `scale`, or both a mask and `is_causal`), FULMEN_CODE_TORCH (libtorch failed, e.g. tensors on different devices)"),
    // ---- in place, under no_grad (parameters, buffers, EMA copies)
    op!("copy_", "inplace", &[TENSOR, t("src")], Output::InPlace,
        "`tensor.copy_(src)` under no_grad: `src` broadcast to `tensor`'s shape and converted to its dtype and device, written into its storage (a parameter from `fulmen_model_state_dict_get` changes in the model).",
        "FULMEN_CODE_TORCH (shapes that do not broadcast, a tensor that cannot be written, e.g. an expanded view)"),
    op!("copy_from_host", "inplace", &[TENSOR, len_named(p("data", ParamKind::HostData, ""), "nbytes")], Output::InPlace,
        "Overwrites `tensor` with `nbytes` of row-major host data of the `fulmen_dtype` `dtype` (converted to the tensor's dtype and device): sets a parameter from a host buffer. `nbytes` must be the tensor's element count times the size of `dtype`.",
        "FULMEN_CODE_DTYPE_MISMATCH (`dtype` is not a fulmen_dtype), FULMEN_CODE_SHAPE_MISMATCH (`nbytes` does not match), FULMEN_CODE_INVALID_ARGUMENT (bool data other than 0 / 1), FULMEN_CODE_TORCH (the tensor cannot be written)"),
    op!("fill_", "inplace", &[TENSOR, f("value", "")], Output::InPlace,
        "`tensor.fill_(value)` under no_grad (`nn.init.constant_`; `zeros_` and `ones_` are 0 and 1).", UNWRITABLE),
    op!("zero_", "inplace", &[TENSOR], Output::InPlace, "`tensor.zero_()` under no_grad.", UNWRITABLE),
    op!("add_", "inplace", &[TENSOR, t("other"), f("alpha", "1.0")], Output::InPlace,
        "`tensor.add_(other, alpha=alpha)` under no_grad: `tensor += alpha * other`, `other` broadcast (an EMA update is `mul_scalar_(decay)`, then `add_(param, 1 - decay)`).",
        NOT_FITTING),
    op!("add_scalar_", "inplace", &[TENSOR, f("value", "")], Output::InPlace, "`tensor.add_(value)` under no_grad.", UNWRITABLE),
    op!("mul_", "inplace", &[TENSOR, t("other")], Output::InPlace,
        "`tensor.mul_(other)` under no_grad, `other` broadcast (a pruning mask).", NOT_FITTING),
    op!("mul_scalar_", "inplace", &[TENSOR, f("value", "")], Output::InPlace, "`tensor.mul_(value)` under no_grad.", UNWRITABLE),
    op!("clamp_", "inplace", &[TENSOR, f("min", ""), f("max", "")], Output::InPlace,
        "`tensor.clamp_(min, max)` under no_grad; a NaN bound leaves that side open.",
        "FULMEN_CODE_INVALID_ARGUMENT (min > max), FULMEN_CODE_TORCH (the tensor cannot be written)"),
    op!("uniform_", "inplace", &[TENSOR, f("low", "0.0"), f("high", "1.0")], Output::InPlace,
        "`tensor.uniform_(low, high)` under no_grad, from the global generator (`fulmen_manual_seed`; the same seed gives PyTorch's values).",
        "FULMEN_CODE_DTYPE_MISMATCH (not floating), FULMEN_CODE_INVALID_ARGUMENT (bounds not finite, or low > high), FULMEN_CODE_TORCH (bounds the dtype cannot hold, e.g. beyond f16's range)"),
    op!("normal_", "inplace", &[TENSOR, f("mean", "0.0"), f("std", "1.0")], Output::InPlace,
        "`tensor.normal_(mean, std)` under no_grad, from the global generator.",
        "FULMEN_CODE_DTYPE_MISMATCH (not floating), FULMEN_CODE_INVALID_ARGUMENT (mean or std not finite, std negative)"),
    // ---- losses
    loss!("cross_entropy", &[t("logits"), t("target"), REDUCTION],
        "Cross-entropy of raw `logits` (N, C) or (N, C, d...) against class indices `target` (N) / (N, d...) of integer dtype, or against class probabilities shaped as `logits` (`F.cross_entropy`).",
        CLASS_ERRORS),
    loss!("cross_entropy_with_options", &[t("logits"), t("target"), opt("weight"), i("ignore_index", "-100"), f("label_smoothing", "0.0"), REDUCTION],
        "Cross-entropy with torch's options (`F.cross_entropy(logits, target, weight, ignore_index=, label_smoothing=)`): `weight` (NULL for none) rescales each class, targets equal to `ignore_index` count for nothing (-100 is torch's default), `label_smoothing` in [0, 1] mixes the targets with the uniform distribution.",
        CLASS_OPTION_ERRORS),
    loss!("nll", &[t("log_probs"), t("target"), REDUCTION],
        "Negative log-likelihood of `log_probs` (N, C) against class indices (`F.nll_loss`).", CLASS_ERRORS),
    loss!("nll_with_options", &[t("log_probs"), t("target"), opt("weight"), i("ignore_index", "-100"), REDUCTION],
        "Negative log-likelihood with torch's options (`F.nll_loss(log_probs, target, weight, ignore_index=)`): `weight` (NULL for none) rescales each class; targets equal to `ignore_index` count for nothing.",
        CLASS_OPTION_ERRORS),
    loss!("mse", PAIR_LOSS, "Mean squared error between `input` and `target` of the same shape (`F.mse_loss`).", LOSS_ERRORS),
    loss!("l1", PAIR_LOSS, "Mean absolute error between `input` and `target` of the same shape (`F.l1_loss`).", LOSS_ERRORS),
    loss!("bce_with_logits", &[t("logits"), t("target"), REDUCTION],
        "Binary cross-entropy of raw `logits` against targets in [0, 1] of the same shape, computed stably (`F.binary_cross_entropy_with_logits`).",
        LOSS_ERRORS),
    loss!("bce_with_logits_with_options", &[t("logits"), t("target"), opt("weight"), opt("pos_weight"), REDUCTION],
        "Binary cross-entropy of raw logits with torch's options: `weight` (NULL for none) rescales each element, `pos_weight` (NULL for none) the positive term, per class along the last dimension (`F.binary_cross_entropy_with_logits(logits, target, weight, pos_weight=)`).",
        "FULMEN_CODE_DTYPE_MISMATCH (a tensor not floating), FULMEN_CODE_SHAPE_MISMATCH (`logits` and `target` differ, or a weight does not broadcast to them), FULMEN_CODE_INVALID_ARGUMENT (`reduction` not a fulmen_reduction, or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed)"),
    loss!("bce", &[t("probs"), t("target"), opt("weight"), REDUCTION],
        "Binary cross-entropy of probabilities `probs` in [0, 1] against targets of the same shape; `weight` (NULL for none) rescales each element (`F.binary_cross_entropy`).",
        "FULMEN_CODE_DTYPE_MISMATCH (a tensor not floating), FULMEN_CODE_SHAPE_MISMATCH (`probs` and `target` differ, or `weight` does not broadcast to them), FULMEN_CODE_INVALID_ARGUMENT (`reduction` not a fulmen_reduction, or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed, e.g. a probability outside [0, 1])"),
    loss!("huber", &[t("input"), t("target"), f("delta", "1.0"), REDUCTION],
        "Huber loss: `0.5 d^2` where `|d| < delta`, else `delta (|d| - 0.5 delta)`, `d = input - target` (`F.huber_loss`).",
        "FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating), FULMEN_CODE_SHAPE_MISMATCH (their shapes differ), FULMEN_CODE_INVALID_ARGUMENT (`delta` not positive and finite, or `reduction` not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed)"),
    loss!("smooth_l1", &[t("input"), t("target"), f("beta", "1.0"), REDUCTION],
        "Smooth L1 loss: `0.5 d^2 / beta` where `|d| < beta`, else `|d| - 0.5 beta` (`F.smooth_l1_loss`).",
        "FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating), FULMEN_CODE_SHAPE_MISMATCH (their shapes differ), FULMEN_CODE_INVALID_ARGUMENT (`beta` negative or not finite, or `reduction` not a fulmen_reduction or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed)"),
    loss!("kl_div", &[t("input"), t("target"), b("log_target", "false"), REDUCTION],
        "KL divergence of the log-probabilities `input` from `target` (probabilities, or log-probabilities with `log_target`) (`F.kl_div`); FULMEN_REDUCTION_BATCH_MEAN divides the sum by the batch size, the mathematically right mean.",
        "FULMEN_CODE_DTYPE_MISMATCH (`input` or `target` not floating), FULMEN_CODE_SHAPE_MISMATCH (their shapes differ), FULMEN_CODE_INVALID_ARGUMENT (`reduction` is not a fulmen_reduction), FULMEN_CODE_TORCH (libtorch failed)"),
    loss!("cosine_embedding", &[t("x1"), t("x2"), t("target"), f("margin", "0.0"), REDUCTION],
        "Cosine embedding loss of pairs `x1`, `x2` (N, D) labelled 1 (similar) or -1 (dissimilar) in `target` (N): `1 - cos` or `max(0, cos - margin)` (`F.cosine_embedding_loss`).",
        PAIR_LABEL_ERRORS),
    loss!("margin_ranking", &[t("x1"), t("x2"), t("target"), f("margin", "0.0"), REDUCTION],
        "Margin ranking loss `max(0, -target * (x1 - x2) + margin)` with `target` 1 or -1, shaped as the inputs (`F.margin_ranking_loss`).",
        PAIR_LABEL_ERRORS),
    loss!("ctc", &[t("log_probs"), t("targets"), t("input_lengths"), t("target_lengths"), i("blank", "0"), b("zero_infinity", "false"), REDUCTION],
        "Connectionist temporal classification loss of `log_probs` (T, N, C) against padded label sequences `targets` (N, S), with i64 `input_lengths` (N) up to T and `target_lengths` (N) up to S (`F.ctc_loss`; labels past a target's length, such as -1 padding, are ignored); FULMEN_REDUCTION_MEAN divides each loss by its target length, then averages; `zero_infinity` zeroes impossible alignments.",
        "FULMEN_CODE_DTYPE_MISMATCH (`log_probs` not floating, or integer tensors that are not i64 or i32), FULMEN_CODE_SHAPE_MISMATCH (shapes that do not fit), FULMEN_CODE_OUT_OF_RANGE (`blank`, a label or a length out of range), FULMEN_CODE_INVALID_ARGUMENT (`reduction` not a fulmen_reduction, or BATCH_MEAN), FULMEN_CODE_TORCH (libtorch failed)"),
];

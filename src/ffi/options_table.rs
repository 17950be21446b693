//! The C API's option structs (`fulmen_*_options`), written once:
//! `tools/codegen/option_structs.rs` generates from this table, for each
//! area, `src/ffi/<area>/gen_options.rs` (the `#[repr(C)]` structs cbindgen
//! copies into the headers, their `*_default` functions and their
//! conversions to and from the core's options) and the Go structs of
//! `bindings/go/options_gen.go` with their defaults and conversions. The
//! C++ option types derive from the C structs and add only constructors.
//! Adding a struct or a field is an entry here, then `make header`;
//! `tests/option_structs_drift.rs` fails when a committed copy drifts.
//!
//! A struct converts to the core's options in one of three ways: `From`
//! (or `TryFrom`, when a field's check may refuse it) when every field
//! maps to the core; a generated `to_core` taking the core values of its
//! C strings and pointers, which the constructor converts by hand
//! ([`CoreMap::Manual`]); or not at all when the core has no options type
//! for it (`core: None`: the layers' options, whose core configs also take
//! the layer's sizes, and the CSV options, whose fields depend on each
//! other), where `*_default` sets every field and the constructor reads
//! the fields.

/// The C type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CType {
    /// `double`.
    F64,
    /// `int64_t`.
    I64,
    /// `int32_t`, holding a C enum's value.
    I32,
    /// `uint64_t`.
    U64,
    /// `bool`.
    Bool,
    /// `size_t`.
    Usize,
    /// `char`.
    Char,
    /// A pointer to constant data the caller owns: `Ptr(&Char)` is a
    /// `const char *` string, `Ptr(&F64)` a `const double *` array. The Go
    /// conversions leave it to the caller, who allocates and frees it.
    Ptr(&'static CType),
    /// A fixed-size array: `Array(&I64, 2)` is `int64_t name[2]`.
    Array(&'static CType, usize),
}

impl CType {
    /// The Rust type.
    pub fn rust(self) -> String {
        match self {
            CType::F64 => "f64".into(),
            CType::I64 => "i64".into(),
            CType::I32 => "i32".into(),
            CType::U64 => "u64".into(),
            CType::Bool => "bool".into(),
            CType::Usize => "usize".into(),
            CType::Char => "c_char".into(),
            CType::Ptr(to) => format!("*const {}", to.rust()),
            CType::Array(of, n) => format!("[{}; {n}]", of.rust()),
        }
    }

    /// The Go type a binding's field has unless the table names another
    /// (sizes are Go's `int`, as the bindings take them; a pointer field
    /// always names its Go type).
    pub fn go(self) -> String {
        match self {
            CType::F64 => "float64".into(),
            CType::I64 => "int64".into(),
            CType::I32 => "int32".into(),
            CType::U64 => "uint64".into(),
            CType::Bool => "bool".into(),
            CType::Usize => "int".into(),
            CType::Char => "byte".into(),
            CType::Ptr(_) => self.cgo(),
            CType::Array(of, n) => format!("[{n}]{}", of.go()),
        }
    }

    /// cgo's name of the C type.
    pub fn cgo(self) -> String {
        match self {
            CType::F64 => "C.double".into(),
            CType::I64 => "C.int64_t".into(),
            CType::I32 => "C.int32_t".into(),
            CType::U64 => "C.uint64_t".into(),
            CType::Bool => "C.bool".into(),
            CType::Usize => "C.size_t".into(),
            CType::Char => "C.char".into(),
            CType::Ptr(to) => format!("*{}", to.cgo()),
            CType::Array(of, n) => format!("[{n}]{}", of.cgo()),
        }
    }

    /// Whether it is a pointer (`Ptr`).
    pub fn is_pointer(self) -> bool {
        matches!(self, CType::Ptr(_))
    }

    /// Whether the Rust type is `c_char` or contains it.
    pub fn uses_c_char(self) -> bool {
        match self {
            CType::Char => true,
            CType::Ptr(of) | CType::Array(of, _) => of.uses_c_char(),
            _ => false,
        }
    }
}

/// How a C field maps to the core's options struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreMap {
    /// The same value at this path of the core struct: a field (`lr`) or
    /// an element of a tuple field (`betas.0`).
    Same(&'static str),
    /// The core field `field` is `to_core`, an expression of the C struct
    /// `o`; the C field is `to_c`, an expression of the core struct `d`.
    Convert { field: &'static str, to_core: &'static str, to_c: &'static str },
    /// As `Convert`, with `to_core` a `crate::error::Result` (a value the
    /// core refuses with its error, e.g. an enum's number checked): the C
    /// struct then converts with `TryFrom`.
    TryConvert { field: &'static str, to_core: &'static str, to_c: &'static str },
    /// No core field of its own: another field's `to_core` reads it (as
    /// `ema` reads `decay`), or the constructor does, with a `Manual`
    /// field (a pointer's length). The C field is `to_c`, an expression of
    /// the core struct `d`.
    Part { to_c: &'static str },
    /// The core field `field`, of Rust type `ty`, is converted by hand
    /// where the struct is used (from a C string or pointer, with its own
    /// checks and errors), then passed to the struct's generated
    /// `to_core`, which converts the other fields. The C field is `to_c`,
    /// an expression of the core struct `d` (NULL for a pointer).
    Manual { field: &'static str, ty: &'static str, to_c: &'static str },
}

/// One field of an option struct.
#[derive(Debug, Clone, Copy)]
pub struct OptionField {
    /// The C name (also the Rust name).
    pub name: &'static str,
    /// The C type.
    pub ty: CType,
    /// The doc comment, line by line, as the header shows it.
    pub doc: &'static [&'static str],
    /// The Go field's name; empty when the Go struct has no such field
    /// (a pointer's length, which the Go side sets with the pointer).
    pub go: &'static str,
    /// The Go field's type when it is not `ty`'s (a Go enum type, or the
    /// Go form of a pointer: `string`, `[]float64`).
    pub go_type: Option<&'static str>,
    /// The Go field's doc comment, line by line.
    pub go_doc: &'static [&'static str],
    /// Where the value lives in the core's options (unused when the struct
    /// has no core options type).
    pub core: CoreMap,
}

impl OptionField {
    /// The field at `path` of the core struct (`betas.0`) rather than at
    /// its own name.
    pub const fn at(self, path: &'static str) -> Self {
        OptionField { core: CoreMap::Same(path), ..self }
    }

    /// The field converted to and from the core field `field` (see
    /// [`CoreMap::Convert`]).
    pub const fn convert(self, field: &'static str, to_core: &'static str, to_c: &'static str) -> Self {
        OptionField { core: CoreMap::Convert { field, to_core, to_c }, ..self }
    }

    /// The field converted to the core field `field` by a check that may
    /// refuse it (see [`CoreMap::TryConvert`]).
    pub const fn try_convert(self, field: &'static str, to_core: &'static str, to_c: &'static str) -> Self {
        OptionField { core: CoreMap::TryConvert { field, to_core, to_c }, ..self }
    }

    /// The field read by another field's conversion (see [`CoreMap::Part`]).
    pub const fn part(self, to_c: &'static str) -> Self {
        OptionField { core: CoreMap::Part { to_c }, ..self }
    }

    /// The field converted by hand to the core field `field` of type `ty`
    /// (see [`CoreMap::Manual`]).
    pub const fn manual(self, field: &'static str, ty: &'static str, to_c: &'static str) -> Self {
        OptionField { core: CoreMap::Manual { field, ty, to_c }, ..self }
    }

    /// The field of Go type `go_type` (a Go enum type over `ty`, or the Go
    /// form of a pointer).
    pub const fn go_as(self, go_type: &'static str) -> Self {
        OptionField { go_type: Some(go_type), ..self }
    }

    /// Whether the Go conversions leave the field to the caller: a pointer,
    /// or a field the Go struct lacks.
    pub fn go_by_hand(&self) -> bool {
        self.ty.is_pointer() || self.go.is_empty()
    }
}

/// A field copied as is to and from the core field of the same name.
pub const fn field(
    name: &'static str,
    ty: CType,
    doc: &'static [&'static str],
    go: &'static str,
    go_doc: &'static [&'static str],
) -> OptionField {
    OptionField { name, ty, doc, go, go_type: None, go_doc, core: CoreMap::Same(name) }
}

/// A parameter of a `*_default` function.
#[derive(Debug, Clone, Copy)]
pub struct DefaultParam {
    /// The C name.
    pub name: &'static str,
    /// The C type.
    pub ty: CType,
    /// The Go name.
    pub go: &'static str,
    /// The Go type when it is not `ty`'s (a Go enum type).
    pub go_type: Option<&'static str>,
}

impl DefaultParam {
    /// The parameter of Go type `go_type` (a Go enum type over `ty`).
    pub const fn go_as(self, go_type: &'static str) -> Self {
        DefaultParam { go_type: Some(go_type), ..self }
    }
}

/// A parameter of C name `name`, type `ty` and Go name `go`.
pub const fn param(name: &'static str, ty: CType, go: &'static str) -> DefaultParam {
    DefaultParam { name, ty, go, go_type: None }
}

/// A `*_default` function.
#[derive(Debug, Clone, Copy)]
pub struct DefaultFn {
    /// The C function.
    pub name: &'static str,
    /// Its doc comment, line by line.
    pub doc: &'static [&'static str],
    /// Its parameters, which `core` and `set` read.
    pub params: &'static [DefaultParam],
    /// The core options it converts, a Rust expression; `None` when the
    /// struct has no core options type.
    pub core: Option<&'static str>,
    /// Fields set after the conversion, each to a Rust expression of the
    /// parameters (a value the core would not keep, such as a `kind` it
    /// refuses, or a pointer); without `core`, every field, in order.
    pub set: &'static [(&'static str, &'static str)],
    /// The Go function; empty when it is written by hand (it takes what
    /// the C function does not, such as a string).
    pub go: &'static str,
    /// The Go function's doc comment, line by line.
    pub go_doc: &'static [&'static str],
}

/// One option struct of the C API.
#[derive(Debug, Clone, Copy)]
pub struct OptionStruct {
    /// The C name, `fulmen_<what>_options`.
    pub name: &'static str,
    /// The area (the folder under `src/ffi/` and the header) it belongs to.
    pub area: &'static str,
    /// The doc comment, line by line.
    pub doc: &'static [&'static str],
    /// The core's options type it converts to and from, by path; `None`
    /// when the core has none (the constructor reads the fields).
    pub core: Option<&'static str>,
    /// Other paths the conversions name (enums of the core, the checks
    /// they call).
    pub uses: &'static [&'static str],
    /// The fields, in C order (the ABI: never reordered).
    pub fields: &'static [OptionField],
    /// Its `*_default` functions.
    pub defaults: &'static [DefaultFn],
    /// The Go struct's name.
    pub go: &'static str,
    /// The Go struct's doc comment, line by line.
    pub go_doc: &'static [&'static str],
}

impl OptionStruct {
    /// Whether converting the C struct to the core's options can fail.
    pub fn fallible(&self) -> bool {
        self.fields.iter().any(|f| matches!(f.core, CoreMap::TryConvert { .. }))
    }

    /// Whether some field is converted by hand (the struct then converts
    /// with a generated `to_core` instead of `From`).
    pub fn has_manual(&self) -> bool {
        self.fields.iter().any(|f| matches!(f.core, CoreMap::Manual { .. }))
    }
}

// The field types by their short names, for the table below.
use CType::{Bool, Char, Usize, F64, I32, I64, U64};
/// `const char *`, a C string.
const CSTR: CType = CType::Ptr(&Char);
/// `int64_t[2]`.
const I64X2: CType = CType::Array(&I64, 2);
/// `int64_t[3]`.
const I64X3: CType = CType::Array(&I64, 3);
/// `const double *`, an array.
const F64_PTR: CType = CType::Ptr(&F64);

/// Every option struct of the C API, grouped by area.
#[rustfmt::skip]
pub const OPTION_STRUCTS: &[OptionStruct] = &[
    OptionStruct {
        name: "fulmen_csv_options",
        area: "data",
        doc: &["Options of `fulmen_dataset_from_csv`; defaults from", "`fulmen_csv_options_default`."],
        core: None,
        uses: &[],
        fields: &[
            field("has_labels", Bool, &["Whether a column holds integer class labels (default true)."], "HasLabels", &["HasLabels: a column holds integer class labels."]),
            field("label_column", I64, &["The label column; negative counts from the end (default 0)."], "LabelColumn", &["LabelColumn is the label column; negative counts from the end."]),
            field("header", I32, &["1: the first row is a header, 0: it is not, -1: detect (default)."], "Header", &["Header says whether the first row is a header."]).go_as("CSVHeader"),
            field("delimiter", Char, &["Field separator (default ',')."], "Delimiter", &["Delimiter is the field separator."]),
            field("scaling", I32, &["A `fulmen_scaling` (default none)."], "Scaling", &["Scaling is how the features are scaled."]).go_as("Scaling"),
            field("scale_divisor", F64, &["Divisor for FULMEN_SCALING_DIVIDE (default 1)."], "ScaleDivisor", &["ScaleDivisor is the divisor for ScalingDivide."]),
            field("skip_rows", Usize, &["Lines skipped before anything is read, such as the count line that", "starts scikit-learn's CSVs (default 0)."], "SkipRows", &["SkipRows lines are skipped first (scikit-learn's count line)."]),
            field("label_name", CSTR, &["The label column by its header name, instead of `label_column`", "(default NULL; borrowed for the call)."], "LabelName", &["LabelName is the label column by header name (instead of LabelColumn)."]).go_as("string"),
            field("feature_columns", CSTR, &["The feature columns, by header name or 0-based index, comma", "separated, in the order they are read (\"age,income\" or \"2,0\");", "default NULL: every column but the label. Borrowed for the call."], "FeatureColumns", &["FeatureColumns are the feature columns, by header name or index", "(\"2\"), in this order; nil: every column but the label."]).go_as("[]string"),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_csv_options_default",
                doc: &["Default CSV options: labels in column 0, header detected, ',', no scaling."],
                params: &[],
                core: None,
                set: &[("has_labels", "true"), ("label_column", "0"), ("header", "-1"), ("delimiter", "b',' as c_char"), ("scaling", "0"), ("scale_divisor", "1.0"), ("skip_rows", "0"), ("label_name", "std::ptr::null()"), ("feature_columns", "std::ptr::null()")],
                go: "DefaultCSVOptions",
                go_doc: &["DefaultCSVOptions are the defaults: labels in column 0, header detected,", "',', no scaling."],
            },
        ],
        go: "CSVOptions",
        go_doc: &["CSVOptions are the options of LoadCSV (fulmen_csv_options)."],
    },
    OptionStruct {
        name: "fulmen_loader_options",
        area: "data",
        doc: &["Options of a loader; defaults from `fulmen_loader_options_default`."],
        core: Some("crate::data::DataLoaderOptions"),
        uses: &[],
        fields: &[
            field("batch_size", Usize, &["Samples per batch (default 1)."], "BatchSize", &["BatchSize is the number of samples per batch."]),
            field("shuffle", Bool, &["Reshuffle every epoch (default false)."], "Shuffle", &["Shuffle reshuffles every epoch."]),
            field("seed", U64, &["Seed of the shuffle; the order depends only on (seed, epoch)."], "Seed", &["Seed is the seed of the shuffle; the order depends only on (Seed, epoch)."]),
            field("drop_last", Bool, &["Drop the last incomplete batch (default false)."], "DropLast", &["DropLast drops the last incomplete batch."]),
            field("pin_memory", Bool, &["Copy each batch into pinned host memory, so that its copy to a GPU", "overlaps (torch's `pin_memory`; default false). Without CUDA it does", "nothing, as torch's DataLoader then does."], "PinMemory", &["PinMemory copies each batch into pinned host memory, so that its copy", "to a GPU overlaps (torch's pin_memory); without CUDA it does nothing."]),
            field("num_workers", Usize, &["Worker threads that read batches ahead of the loop, in the loader's", "order, so reading overlaps training (torch's `num_workers`; default", "0: the loop's thread reads them; at most 64). A host dataset needs", "`any_thread` in its vtable."], "NumWorkers", &["NumWorkers is the number of threads that read batches ahead of the", "loop, in the loader's order (torch's num_workers; 0: the loop's", "goroutine reads them; at most 64). A Go DataSource is read on the", "loop's goroutine unless its AnyThread is set: loaders over one", "without it refuse workers."]),
            field("prefetch_factor", Usize, &["Batches each worker reads ahead (torch's `prefetch_factor`; default", "2, 1 to 64)."], "PrefetchFactor", &["PrefetchFactor is the number of batches each worker reads ahead", "(torch's prefetch_factor; 1 to 64; 0 means the default, 2)."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_loader_options_default",
                doc: &["torch's DataLoader defaults (batch size 1, no shuffle, no workers)."],
                params: &[],
                core: Some("DataLoaderOptions::default()"),
                set: &[],
                go: "DefaultLoaderOptions",
                go_doc: &["DefaultLoaderOptions are torch's DataLoader defaults (batch size 1, no", "shuffle)."],
            },
        ],
        go: "LoaderOptions",
        go_doc: &["LoaderOptions are the options of a loader (fulmen_loader_options)."],
    },
    OptionStruct {
        name: "fulmen_conv2d_options",
        area: "nn",
        doc: &["Options of a 2-D convolution; get defaults from", "`fulmen_conv2d_options_default` and set what differs."],
        core: None,
        uses: &[],
        fields: &[
            field("kernel", I64X2, &["Kernel height and width."], "Kernel", &["Kernel is the kernel height and width."]),
            field("stride", I64X2, &["Stride (default 1, 1)."], "Stride", &["Stride (default 1, 1)."]),
            field("padding", I64X2, &["Zero padding (default 0, 0)."], "Padding", &["Padding is the zero padding (default 0, 0)."]),
            field("dilation", I64X2, &["Dilation (default 1, 1)."], "Dilation", &["Dilation (default 1, 1)."]),
            field("groups", I64, &["Groups (default 1)."], "Groups", &["Groups (default 1)."]),
            field("bias", Bool, &["Learn a bias (default true)."], "Bias", &["Bias learns a bias (default true)."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_conv2d_options_default",
                doc: &["Default convolution options for a square `kernel`."],
                params: &[param("kernel", I64, "kernel")],
                core: None,
                set: &[("kernel", "[kernel, kernel]"), ("stride", "[1, 1]"), ("padding", "[0, 0]"), ("dilation", "[1, 1]"), ("groups", "1"), ("bias", "true")],
                go: "DefaultConv2dOptions",
                go_doc: &["DefaultConv2dOptions are the default options for a square kernel."],
            },
        ],
        go: "Conv2dOptions",
        go_doc: &["Conv2dOptions are the options of a 2-D convolution (fulmen_conv2d_options)."],
    },
    OptionStruct {
        name: "fulmen_conv3d_options",
        area: "nn",
        doc: &["Options of a 3-D convolution; get defaults from", "`fulmen_conv3d_options_default` and set what differs."],
        core: None,
        uses: &[],
        fields: &[
            field("kernel", I64X3, &["Kernel depth, height and width."], "Kernel", &["Kernel is the kernel depth, height and width."]),
            field("stride", I64X3, &["Stride (default 1, 1, 1)."], "Stride", &["Stride (default 1, 1, 1)."]),
            field("padding", I64X3, &["Zero padding (default 0, 0, 0)."], "Padding", &["Padding is the zero padding (default 0, 0, 0)."]),
            field("dilation", I64X3, &["Dilation (default 1, 1, 1)."], "Dilation", &["Dilation (default 1, 1, 1)."]),
            field("groups", I64, &["Groups (default 1)."], "Groups", &["Groups (default 1)."]),
            field("bias", Bool, &["Learn a bias (default true)."], "Bias", &["Bias learns a bias (default true)."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_conv3d_options_default",
                doc: &["Default 3-D convolution options for a cubic `kernel`."],
                params: &[param("kernel", I64, "kernel")],
                core: None,
                set: &[("kernel", "[kernel; 3]"), ("stride", "[1; 3]"), ("padding", "[0; 3]"), ("dilation", "[1; 3]"), ("groups", "1"), ("bias", "true")],
                go: "DefaultConv3dOptions",
                go_doc: &["DefaultConv3dOptions are the default options for a cubic kernel."],
            },
        ],
        go: "Conv3dOptions",
        go_doc: &["Conv3dOptions are the options of a 3-D convolution (fulmen_conv3d_options)."],
    },
    OptionStruct {
        name: "fulmen_conv_transpose_options",
        area: "nn",
        doc: &["Options of a transposed convolution; get defaults from", "`fulmen_conv_transpose_options_default` and set what differs. Only the", "first `dims` entries of each array are read."],
        core: None,
        uses: &[],
        fields: &[
            field("dims", Usize, &["1 (`ConvTranspose1d`) or 2 (`ConvTranspose2d`)."], "Dims", &["Dims is 1 (ConvTranspose1d) or 2 (ConvTranspose2d)."]),
            field("kernel", I64X2, &["Kernel size per spatial dimension."], "Kernel", &["Kernel size per spatial dimension."]),
            field("stride", I64X2, &["Stride (default 1)."], "Stride", &["Stride (default 1)."]),
            field("padding", I64X2, &["Padding removed from each side of the output (default 0)."], "Padding", &["Padding removed from each side of the output (default 0)."]),
            field("output_padding", I64X2, &["Size added to one side of the output (default 0; smaller than the", "stride or the dilation)."], "OutputPadding", &["OutputPadding is added to one side of the output (default 0)."]),
            field("dilation", I64X2, &["Dilation (default 1)."], "Dilation", &["Dilation (default 1)."]),
            field("groups", I64, &["Groups (default 1)."], "Groups", &["Groups (default 1)."]),
            field("bias", Bool, &["Learn a bias (default true)."], "Bias", &["Bias learns a bias (default true)."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_conv_transpose_options_default",
                doc: &["Default transposed-convolution options for `dims` spatial dimensions", "and a square `kernel`."],
                params: &[param("dims", Usize, "dims"), param("kernel", I64, "kernel")],
                core: None,
                set: &[("dims", "dims"), ("kernel", "[kernel; 2]"), ("stride", "[1; 2]"), ("padding", "[0; 2]"), ("output_padding", "[0; 2]"), ("dilation", "[1; 2]"), ("groups", "1"), ("bias", "true")],
                go: "DefaultConvTransposeOptions",
                go_doc: &["DefaultConvTransposeOptions are the defaults for dims spatial dimensions", "and a square kernel."],
            },
        ],
        go: "ConvTransposeOptions",
        go_doc: &["ConvTransposeOptions are the options of a transposed convolution", "(fulmen_conv_transpose_options); only the first Dims entries are read."],
    },
    OptionStruct {
        name: "fulmen_rnn_options",
        area: "nn",
        doc: &["Options of RNN, LSTM and GRU; get defaults from", "`fulmen_rnn_options_default` and set what differs."],
        core: None,
        uses: &[],
        fields: &[
            field("num_layers", I64, &["Stacked layers (default 1, at most 1024)."], "NumLayers", &["NumLayers is the number of stacked layers (default 1, at most 1024)."]),
            field("bias", Bool, &["Learn `bias_ih` and `bias_hh` (default true)."], "Bias", &["Bias learns bias_ih and bias_hh (default true)."]),
            field("batch_first", Bool, &["Input and output are `(N, T, F)` rather than `(T, N, F)` (default false)."], "BatchFirst", &["BatchFirst takes and gives (N, T, F) rather than (T, N, F) (default false)."]),
            field("dropout", F64, &["Dropout on the outputs of every layer but the last, in training (default 0)."], "Dropout", &["Dropout applies to the outputs of every layer but the last, in training (default 0)."]),
            field("bidirectional", Bool, &["Run each layer both ways and concatenate (default false)."], "Bidirectional", &["Bidirectional runs each layer both ways (default false)."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_rnn_options_default",
                doc: &["PyTorch's defaults: one layer, biases, `(T, N, F)`, no dropout, one direction."],
                params: &[],
                core: None,
                set: &[("num_layers", "1"), ("bias", "true"), ("batch_first", "false"), ("dropout", "0.0"), ("bidirectional", "false")],
                go: "DefaultRNNOptions",
                go_doc: &["DefaultRNNOptions are PyTorch's defaults."],
            },
        ],
        go: "RNNOptions",
        go_doc: &["RNNOptions are the options of RNN, LSTM and GRU (fulmen_rnn_options)."],
    },
    OptionStruct {
        name: "fulmen_transformer_options",
        area: "nn",
        doc: &["Options of the transformer layers; get defaults from", "`fulmen_transformer_options_default` and set what differs."],
        core: None,
        uses: &[],
        fields: &[
            field("dim_feedforward", I64, &["Width of the feed-forward block (default 2048)."], "DimFeedforward", &["DimFeedforward is the width of the feed-forward block (default 2048)."]),
            field("dropout", F64, &["Dropout (default 0.1)."], "Dropout", &["Dropout (default 0.1)."]),
            field("activation", I32, &["Activation of the feed-forward block, a fulmen_activation (default", "FULMEN_ACTIVATION_RELU; FULMEN_ACTIVATION_GELU is PyTorch's \"gelu\")."], "Activation", &["Activation of the feed-forward block (default ReLU)."]).go_as("Activation"),
            field("activation_param", F64, &["The activation's parameter, as for `fulmen_model_activation_new` (default 0)."], "ActivationParam", &["ActivationParam is its parameter, as for NewActivation (default 0)."]),
            field("layer_norm_eps", F64, &["Epsilon of the layer norms (default 1e-5)."], "LayerNormEps", &["LayerNormEps is the epsilon of the layer norms (default 1e-5)."]),
            field("batch_first", Bool, &["Input and output are `(N, L, E)` rather than `(L, N, E)` (default false)."], "BatchFirst", &["BatchFirst takes and gives (N, L, E) rather than (L, N, E) (default false)."]),
            field("norm_first", Bool, &["Pre-norm: normalise before attention and feed-forward (default false)."], "NormFirst", &["NormFirst normalises before each block (default false: post-norm)."]),
            field("bias", Bool, &["Biases in the linear layers and layer norms (default true)."], "Bias", &["Bias gives the linear layers and layer norms biases (default true)."]),
            field("causal", Bool, &["Causal self-attention: each position attends to itself and the positions", "before it, as PyTorch's `is_causal=True` (its `src_is_causal` /", "`tgt_is_causal`). The layer then takes no self-attention mask (a key", "padding mask is allowed); without one, and without weights, attention", "runs through `scaled_dot_product_attention(is_causal=True)`, whose flash", "and memory-efficient kernels CUDA uses (default false)."], "Causal", &["Causal makes self-attention causal (PyTorch's is_causal=True): no", "self-attention mask is then taken, and CUDA's flash kernels can run", "(default false)."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_transformer_options_default",
                doc: &["PyTorch's defaults: 2048, 0.1, ReLU, 1e-5, `(L, N, E)`, post-norm, biases, not causal."],
                params: &[],
                core: None,
                set: &[("dim_feedforward", "2048"), ("dropout", "0.1"), ("activation", "0"), ("activation_param", "0.0"), ("layer_norm_eps", "1e-5"), ("batch_first", "false"), ("norm_first", "false"), ("bias", "true"), ("causal", "false")],
                go: "DefaultTransformerOptions",
                go_doc: &["DefaultTransformerOptions are PyTorch's defaults."],
            },
        ],
        go: "TransformerOptions",
        go_doc: &["TransformerOptions are the options of the transformer layers", "(fulmen_transformer_options)."],
    },
    OptionStruct {
        name: "fulmen_sgd_options",
        area: "optim",
        doc: &["SGD options (`torch.optim.SGD`); defaults from `fulmen_sgd_options_default`."],
        core: Some("crate::optim::SgdOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-3)."], "LR", &["LR is the learning rate."]),
            field("momentum", F64, &["Momentum factor (default 0)."], "Momentum", &["Momentum is the momentum factor."]),
            field("dampening", F64, &["Dampening of the momentum (default 0)."], "Dampening", &["Dampening is the dampening of the momentum."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("nesterov", Bool, &["Nesterov momentum (default false)."], "Nesterov", &["Nesterov enables Nesterov momentum."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_sgd_options_default",
                doc: &["torch's SGD defaults."],
                params: &[],
                core: Some("SgdOptions::default()"),
                set: &[],
                go: "DefaultSGDOptions",
                go_doc: &["DefaultSGDOptions are torch's SGD defaults (fulmen_sgd_options_default)."],
            },
        ],
        go: "SGDOptions",
        go_doc: &["SGDOptions are torch.optim.SGD's options (fulmen_sgd_options)."],
    },
    OptionStruct {
        name: "fulmen_adam_options",
        area: "optim",
        doc: &["Adam / AdamW options; defaults from `fulmen_adam_options_default` or", "`fulmen_adamw_options_default` (weight decay 1e-2)."],
        core: Some("crate::optim::AdamOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 is the first-moment decay."]).at("betas.0"),
            field("beta2", F64, &["Second-moment decay (default 0.999)."], "Beta2", &["Beta2 is the second-moment decay."]).at("betas.1"),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["Weight decay: L2 for Adam, decoupled for AdamW."], "WeightDecay", &["WeightDecay is L2 for Adam, decoupled for AdamW."]),
            field("amsgrad", Bool, &["AMSGrad variant (default false)."], "AMSGrad", &["AMSGrad enables the AMSGrad variant."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_adam_options_default",
                doc: &["torch's Adam defaults."],
                params: &[],
                core: Some("AdamOptions::default()"),
                set: &[],
                go: "DefaultAdamOptions",
                go_doc: &["DefaultAdamOptions are torch's Adam defaults."],
            },
            DefaultFn {
                name: "fulmen_adamw_options_default",
                doc: &["torch's AdamW defaults (weight decay 1e-2)."],
                params: &[],
                core: Some("AdamOptions::adamw()"),
                set: &[],
                go: "DefaultAdamWOptions",
                go_doc: &["DefaultAdamWOptions are torch's AdamW defaults (weight decay 1e-2)."],
            },
        ],
        go: "AdamOptions",
        go_doc: &["AdamOptions are the options of Adam and AdamW (fulmen_adam_options)."],
    },
    OptionStruct {
        name: "fulmen_rmsprop_options",
        area: "optim",
        doc: &["RMSprop options; defaults from `fulmen_rmsprop_options_default`."],
        core: Some("crate::optim::RmsPropOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-2)."], "LR", &["LR is the learning rate."]),
            field("alpha", F64, &["Smoothing constant (default 0.99)."], "Alpha", &["Alpha is the smoothing constant."]),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("momentum", F64, &["Momentum factor (default 0)."], "Momentum", &["Momentum is the momentum factor."]),
            field("centered", Bool, &["Centered variant (default false)."], "Centered", &["Centered enables the centered variant."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_rmsprop_options_default",
                doc: &["torch's RMSprop defaults."],
                params: &[],
                core: Some("RmsPropOptions::default()"),
                set: &[],
                go: "DefaultRMSpropOptions",
                go_doc: &["DefaultRMSpropOptions are torch's RMSprop defaults."],
            },
        ],
        go: "RMSpropOptions",
        go_doc: &["RMSpropOptions are torch.optim.RMSprop's options (fulmen_rmsprop_options)."],
    },
    OptionStruct {
        name: "fulmen_adagrad_options",
        area: "optim",
        doc: &["Adagrad options; defaults from `fulmen_adagrad_options_default`."],
        core: Some("crate::optim::AdagradOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-2)."], "LR", &["LR is the learning rate."]),
            field("lr_decay", F64, &["Learning-rate decay: step t uses `lr / (1 + (t - 1) * lr_decay)`", "(default 0)."], "LRDecay", &["LRDecay decays the learning rate: step t uses LR / (1 + (t-1) LRDecay)."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("initial_accumulator_value", F64, &["Starting value of the sum of squared gradients (default 0)."], "InitialAccumulatorValue", &["InitialAccumulatorValue starts the sum of squared gradients."]),
            field("eps", F64, &["Denominator term (default 1e-10)."], "Eps", &["Eps is the denominator term."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_adagrad_options_default",
                doc: &["torch's Adagrad defaults."],
                params: &[],
                core: Some("AdagradOptions::default()"),
                set: &[],
                go: "DefaultAdagradOptions",
                go_doc: &["DefaultAdagradOptions are torch's Adagrad defaults."],
            },
        ],
        go: "AdagradOptions",
        go_doc: &["AdagradOptions are torch.optim.Adagrad's options."],
    },
    OptionStruct {
        name: "fulmen_adamax_options",
        area: "optim",
        doc: &["Adamax options; defaults from `fulmen_adamax_options_default`."],
        core: Some("crate::optim::AdamaxOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 2e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 decays the gradient average."]).at("betas.0"),
            field("beta2", F64, &["Decay of the infinity norm (default 0.999)."], "Beta2", &["Beta2 decays the infinity norm."]).at("betas.1"),
            field("eps", F64, &["Term added to the norm (default 1e-8)."], "Eps", &["Eps is added to the norm."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_adamax_options_default",
                doc: &["torch's Adamax defaults."],
                params: &[],
                core: Some("AdamaxOptions::default()"),
                set: &[],
                go: "DefaultAdamaxOptions",
                go_doc: &["DefaultAdamaxOptions are torch's Adamax defaults."],
            },
        ],
        go: "AdamaxOptions",
        go_doc: &["AdamaxOptions are torch.optim.Adamax's options."],
    },
    OptionStruct {
        name: "fulmen_nadam_options",
        area: "optim",
        doc: &["NAdam options; defaults from `fulmen_nadam_options_default`."],
        core: Some("crate::optim::NAdamOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 2e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 decays the running average of the gradient."]).at("betas.0"),
            field("beta2", F64, &["Second-moment decay (default 0.999)."], "Beta2", &["Beta2 decays the running average of its square."]).at("betas.1"),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["Weight decay: L2, or decoupled with `decoupled_weight_decay`", "(default 0)."], "WeightDecay", &["WeightDecay is L2, or decoupled with DecoupledWeightDecay."]),
            field("momentum_decay", F64, &["Momentum decay of the momentum schedule (default 4e-3)."], "MomentumDecay", &["MomentumDecay is the decay of the momentum schedule."]),
            field("decoupled_weight_decay", Bool, &["Decoupled weight decay, as NAdamW (default false)."], "DecoupledWeightDecay", &["DecoupledWeightDecay makes it NAdamW."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_nadam_options_default",
                doc: &["torch's NAdam defaults."],
                params: &[],
                core: Some("NAdamOptions::default()"),
                set: &[],
                go: "DefaultNAdamOptions",
                go_doc: &["DefaultNAdamOptions are torch's NAdam defaults."],
            },
        ],
        go: "NAdamOptions",
        go_doc: &["NAdamOptions are torch.optim.NAdam's options."],
    },
    OptionStruct {
        name: "fulmen_radam_options",
        area: "optim",
        doc: &["RAdam options; defaults from `fulmen_radam_options_default`."],
        core: Some("crate::optim::RAdamOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 decays the running average of the gradient."]).at("betas.0"),
            field("beta2", F64, &["Second-moment decay (default 0.999)."], "Beta2", &["Beta2 decays the running average of its square."]).at("betas.1"),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["Weight decay: L2, or decoupled with `decoupled_weight_decay`", "(default 0)."], "WeightDecay", &["WeightDecay is L2, or decoupled with DecoupledWeightDecay."]),
            field("decoupled_weight_decay", Bool, &["Decoupled weight decay, as RAdamW (default false)."], "DecoupledWeightDecay", &["DecoupledWeightDecay makes it RAdamW."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_radam_options_default",
                doc: &["torch's RAdam defaults."],
                params: &[],
                core: Some("RAdamOptions::default()"),
                set: &[],
                go: "DefaultRAdamOptions",
                go_doc: &["DefaultRAdamOptions are torch's RAdam defaults."],
            },
        ],
        go: "RAdamOptions",
        go_doc: &["RAdamOptions are torch.optim.RAdam's options."],
    },
    OptionStruct {
        name: "fulmen_lbfgs_options",
        area: "optim",
        doc: &["LBFGS options; defaults from `fulmen_lbfgs_options_default`."],
        core: Some("crate::optim::LbfgsOptions"),
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate: the step length (the first iteration's scaled by", "`min(1, 1 / |g|_1)`; default 1)."], "LR", &["LR is the step length after the first iteration."]),
            field("max_iter", I64, &["Iterations per step (default 20; at least 1)."], "MaxIter", &["MaxIter is the number of iterations per step (at least 1)."]),
            field("max_eval", I64, &["Loss evaluations per step; 0 = torch's default, `max_iter * 5 / 4`."], "MaxEval", &["MaxEval is the number of loss evaluations per step; 0 is torch's", "default, MaxIter * 5 / 4."]).convert("max_eval", "(o.max_eval != 0).then_some(o.max_eval)", "d.max_eval.unwrap_or(0)"),
            field("tolerance_grad", F64, &["Stop when no gradient entry exceeds this in magnitude (default 1e-7)."], "ToleranceGrad", &["ToleranceGrad stops a step when no gradient entry exceeds it."]),
            field("tolerance_change", F64, &["Stop when the loss or the step changes less than this (default 1e-9)."], "ToleranceChange", &["ToleranceChange stops a step when the loss or the step changes less."]),
            field("history_size", I64, &["Update pairs kept (default 100; 1 to 1048576)."], "HistorySize", &["HistorySize is the number of update pairs kept (1 to 1048576)."]),
            field("strong_wolfe", Bool, &["The strong-Wolfe line search (torch's `line_search_fn =", "\"strong_wolfe\"`) instead of a fixed step (default false)."], "StrongWolfe", &["StrongWolfe uses the strong-Wolfe line search (torch's", "line_search_fn=\"strong_wolfe\") instead of a fixed step."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_lbfgs_options_default",
                doc: &["torch's LBFGS defaults."],
                params: &[],
                core: Some("LbfgsOptions::default()"),
                set: &[],
                go: "DefaultLBFGSOptions",
                go_doc: &["DefaultLBFGSOptions are torch's LBFGS defaults."],
            },
        ],
        go: "LBFGSOptions",
        go_doc: &["LBFGSOptions are torch.optim.LBFGS's options."],
    },
    OptionStruct {
        name: "fulmen_one_cycle_options",
        area: "schedulers",
        doc: &["Options of `OneCycleLR`; defaults from `fulmen_one_cycle_options_default`."],
        core: Some("crate::optim::OneCycleOptions"),
        uses: &["crate::optim::AnnealStrategy"],
        fields: &[
            field("max_lr", F64, &["Peak learning rate."], "MaxLR", &["MaxLR is the peak learning rate."]),
            field("total_steps", I64, &["Steps in the cycle."], "TotalSteps", &["TotalSteps is the number of steps in the cycle."]),
            field("pct_start", F64, &["Fraction of the cycle spent increasing the lr (default 0.3)."], "PctStart", &["PctStart is the fraction of the cycle spent increasing the lr."]),
            field("linear_anneal", Bool, &["Cosine (false, default) or linear (true) annealing."], "LinearAnneal", &["LinearAnneal anneals linearly instead of by cosine."]).convert("anneal_strategy", "if o.linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos }", "d.anneal_strategy == AnnealStrategy::Linear"),
            field("cycle_momentum", Bool, &["Cycle momentum / beta1 inversely to the lr (default true)."], "CycleMomentum", &["CycleMomentum cycles momentum / beta1 inversely to the lr."]),
            field("base_momentum", F64, &["Lower momentum bound (default 0.85)."], "BaseMomentum", &["BaseMomentum is the lower momentum bound."]),
            field("max_momentum", F64, &["Upper momentum bound (default 0.95)."], "MaxMomentum", &["MaxMomentum is the upper momentum bound."]),
            field("div_factor", F64, &["initial lr = max_lr / div_factor (default 25)."], "DivFactor", &["DivFactor: initial lr = MaxLR / DivFactor."]),
            field("final_div_factor", F64, &["min lr = initial lr / final_div_factor (default 1e4)."], "FinalDivFactor", &["FinalDivFactor: min lr = initial lr / FinalDivFactor."]),
            field("three_phase", Bool, &["Three-phase schedule (default false)."], "ThreePhase", &["ThreePhase uses the three-phase schedule."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_one_cycle_options_default",
                doc: &["torch's OneCycleLR defaults for a peak lr and a cycle length."],
                params: &[param("max_lr", F64, "maxLR"), param("total_steps", I64, "totalSteps")],
                core: Some("OneCycleOptions::new(max_lr, total_steps)"),
                set: &[],
                go: "DefaultOneCycleOptions",
                go_doc: &["DefaultOneCycleOptions are torch's OneCycleLR defaults for a peak lr and", "a cycle length."],
            },
        ],
        go: "OneCycleOptions",
        go_doc: &["OneCycleOptions are the options of OneCycleLR (fulmen_one_cycle_options)."],
    },
    OptionStruct {
        name: "fulmen_plateau_options",
        area: "schedulers",
        doc: &["Options of `ReduceLROnPlateau`; defaults from", "`fulmen_plateau_options_default`."],
        core: Some("crate::optim::PlateauOptions"),
        uses: &["crate::optim::PlateauMode", "crate::optim::ThresholdMode"],
        fields: &[
            field("mode_max", Bool, &["Higher metric is better (false: lower is better, the default)."], "ModeMax", &["ModeMax: a higher metric is better (false: lower is better)."]).convert("mode", "if o.mode_max { PlateauMode::Max } else { PlateauMode::Min }", "d.mode == PlateauMode::Max"),
            field("factor", F64, &["Factor applied to the lr on a plateau (default 0.1)."], "Factor", &["Factor is applied to the lr on a plateau."]),
            field("patience", U64, &["Bad steps tolerated before reducing (default 10)."], "Patience", &["Patience is the number of bad steps tolerated before reducing."]),
            field("threshold", F64, &["Threshold of a significant improvement (default 1e-4)."], "Threshold", &["Threshold is the threshold of a significant improvement."]),
            field("threshold_abs", Bool, &["Absolute (true) or relative (false, default) threshold."], "ThresholdAbs", &["ThresholdAbs makes the threshold absolute (false: relative)."]).convert("threshold_mode", "if o.threshold_abs { ThresholdMode::Abs } else { ThresholdMode::Rel }", "d.threshold_mode == ThresholdMode::Abs"),
            field("cooldown", U64, &["Steps to wait after a reduction (default 0)."], "Cooldown", &["Cooldown is the number of steps to wait after a reduction."]),
            field("min_lr", F64, &["Lower bound of the lr (default 0)."], "MinLR", &["MinLR is the lower bound of the lr."]),
            field("eps", F64, &["Smaller reductions are skipped (default 1e-8)."], "Eps", &["Eps: smaller reductions are skipped."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_plateau_options_default",
                doc: &["torch's ReduceLROnPlateau defaults."],
                params: &[],
                core: Some("PlateauOptions::default()"),
                set: &[],
                go: "DefaultPlateauOptions",
                go_doc: &["DefaultPlateauOptions are torch's ReduceLROnPlateau defaults."],
            },
        ],
        go: "PlateauOptions",
        go_doc: &["PlateauOptions are the options of ReduceLROnPlateau (fulmen_plateau_options)."],
    },
    OptionStruct {
        name: "fulmen_cyclic_lr_options",
        area: "schedulers",
        doc: &["CyclicLR options; defaults from `fulmen_cyclic_lr_options_default`."],
        core: Some("crate::optim::CyclicLrOptions"),
        uses: &["crate::optim::CyclicMode"],
        fields: &[
            field("base_lr", F64, &["Lower learning rate (every group)."], "BaseLR", &["BaseLR is the lower learning rate (every group)."]),
            field("max_lr", F64, &["Upper learning rate (every group)."], "MaxLR", &["MaxLR is the upper learning rate (every group)."]),
            field("step_size_up", I64, &["Steps of the rising half (default 2000)."], "StepSizeUp", &["StepSizeUp is the length of the rising half."]),
            field("step_size_down", I64, &["Steps of the falling half; 0 = `step_size_up` (the default)."], "StepSizeDown", &["StepSizeDown is the length of the falling half; 0 means StepSizeUp."]).convert("step_size_down", "(o.step_size_down != 0).then_some(o.step_size_down)", "d.step_size_down.unwrap_or(0)"),
            field("mode", I32, &["A `fulmen_cyclic_mode` (default triangular)."], "Mode", &["Mode scales the amplitude."]).try_convert("mode", "CyclicMode::from_i32(o.mode)", "d.mode as i32").go_as("CyclicMode"),
            field("gamma", F64, &["EXP_RANGE's factor (default 1)."], "Gamma", &["Gamma is CyclicExpRange's factor."]),
            field("cycle_momentum", Bool, &["Cycle the momentum (Adam family: beta1) inversely (default true)."], "CycleMomentum", &["CycleMomentum cycles the momentum (Adam: beta1) inversely."]),
            field("base_momentum", F64, &["Lower momentum (default 0.8)."], "BaseMomentum", &["BaseMomentum is the lower momentum."]),
            field("max_momentum", F64, &["Upper momentum (default 0.9)."], "MaxMomentum", &["MaxMomentum is the upper momentum."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_cyclic_lr_options_default",
                doc: &["torch's CyclicLR defaults between `base_lr` and `max_lr`."],
                params: &[param("base_lr", F64, "baseLR"), param("max_lr", F64, "maxLR")],
                core: Some("CyclicLrOptions::new(base_lr, max_lr)"),
                set: &[],
                go: "DefaultCyclicLROptions",
                go_doc: &["DefaultCyclicLROptions are torch's CyclicLR defaults between baseLR and", "maxLR."],
            },
        ],
        go: "CyclicLROptions",
        go_doc: &["CyclicLROptions are the options of CyclicLR (fulmen_cyclic_lr_options)."],
    },
    OptionStruct {
        name: "fulmen_metric_options",
        area: "metrics",
        doc: &["How a metric is built; start from `fulmen_metric_options_default`."],
        core: Some("crate::metrics::MetricOptions"),
        uses: &["crate::metrics::Average", "crate::metrics::MetricKind"],
        fields: &[
            field("kind", I32, &["A `fulmen_metric_kind`."], "Kind", &["Kind is what to compute."]).try_convert("kind", "MetricKind::from_i32(o.kind)", "d.kind as i32").go_as("MetricKind"),
            field("num_classes", I64, &["0: a binary task (one score or 0/1 label per sample, shaped as the", "targets); 2 to 4096: multiclass (scores (N, C, ...) or class indices", "(N, ...) for targets (N, ...)). Unused by MAE / MSE / RMSE."], "NumClasses", &["NumClasses is 0 for a binary task, 2 to 4096 for multiclass."]),
            field("average", I32, &["A `fulmen_average` for multiclass scores (default macro, as", "torchmetrics; AUROC takes macro or weighted)."], "Average", &["Average combines per-class scores (multiclass)."]).try_convert("average", "Average::from_i32(o.average)", "d.average as i32").go_as("Average"),
            field("threshold", F64, &["Binary: probabilities above it count as positive (default 0.5).", "Scores outside [0, 1] go through a sigmoid first (softmax for", "multiclass AUROC), as torchmetrics."], "Threshold", &["Threshold: binary probabilities above it are positive."]),
            field("thresholds", I64, &["AUROC: 0 (default) keeps every score for the exact curve; 2 to", "100000 bins it at that many thresholds in [0, 1] (constant memory)."], "Thresholds", &["Thresholds: AUROC's bins (0: the exact curve)."]),
            field("sync_on_compute", Bool, &["Sum the states over the ranks of a running distributed job at", "compute (default true; then every rank must call compute)."], "SyncOnCompute", &["SyncOnCompute sums the states over the ranks of a distributed job."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_metric_options_default",
                doc: &["torchmetrics' defaults for `kind` (a `fulmen_metric_kind`) over", "`num_classes` classes (0: binary)."],
                params: &[param("kind", I32, "kind").go_as("MetricKind"), param("num_classes", I64, "numClasses")],
                core: Some("MetricOptions::new(MetricKind::from_i32(kind).unwrap_or(MetricKind::Accuracy), num_classes)"),
                set: &[("kind", "kind")],
                go: "DefaultMetricOptions",
                go_doc: &["DefaultMetricOptions are torchmetrics' defaults for kind over", "numClasses classes (0: binary)."],
            },
        ],
        go: "MetricOptions",
        go_doc: &["MetricOptions are the options of a Metric (fulmen_metric_options)."],
    },
    OptionStruct {
        name: "fulmen_lr_find_options",
        area: "trainer",
        doc: &["Options of `fulmen_trainer_lr_find`; defaults from", "`fulmen_lr_find_options_default` (Lightning's)."],
        core: Some("crate::tuner::LrFindOptions"),
        uses: &["crate::ffi::trainer::tuner::lr_find_mode", "crate::ffi::trainer::tuner::lr_find_mode_code"],
        fields: &[
            field("min_lr", F64, &["The first learning rate (default 1e-8)."], "MinLR", &["MinLR is the first learning rate."]),
            field("max_lr", F64, &["The last learning rate (default 1)."], "MaxLR", &["MaxLR is the last learning rate."]),
            field("num_training", I64, &["Learning rates to try, one per optimizer step (default 100)."], "NumTraining", &["NumTraining is the number of learning rates tried, one per step."]),
            field("mode", I32, &["A `fulmen_lr_find_mode` (default exponential)."], "Mode", &["Mode is how the learning rate grows."]).try_convert("mode", "lr_find_mode(o.mode)", "lr_find_mode_code(d.mode)").go_as("LRFindMode"),
            field("early_stop_threshold", F64, &["Stop once the smoothed loss is above this multiple of the best one", "(default 4; 0: never stop early)."], "EarlyStopThreshold", &["EarlyStopThreshold stops the test once the smoothed loss exceeds", "this multiple of the best one; 0 never stops early."]).convert("early_stop_threshold", "(o.early_stop_threshold != 0.0).then_some(o.early_stop_threshold)", "d.early_stop_threshold.unwrap_or(0.0)"),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_lr_find_options_default",
                doc: &["Lightning's defaults: 1e-8 to 1 over 100 steps, exponentially, stopping", "at 4 times the best loss."],
                params: &[],
                core: Some("LrFindOptions::default()"),
                set: &[],
                go: "DefaultLRFindOptions",
                go_doc: &["DefaultLRFindOptions are Lightning's: 1e-8 to 1 over 100 steps,", "exponentially, stopping at 4 times the best loss."],
            },
        ],
        go: "LRFindOptions",
        go_doc: &["LRFindOptions are the options of a learning-rate range test", "(fulmen_lr_find_options)."],
    },
    OptionStruct {
        name: "fulmen_batch_size_finder_options",
        area: "trainer",
        doc: &["Options of `fulmen_trainer_scale_batch_size`; defaults from", "`fulmen_batch_size_finder_options_default` (Lightning's)."],
        core: Some("crate::tuner::BatchSizeOptions"),
        uses: &["crate::tuner::BatchSizeMode"],
        fields: &[
            field("binsearch", Bool, &["false: \"power\", doubling until a trial runs out of memory (the", "default); true: \"binsearch\", then searching between the last size", "that fit and the first that did not."], "BinSearch", &["BinSearch searches between the last size that fit and the first that", "did not; false doubles until a trial runs out of memory (\"power\")."]).convert("mode", "if o.binsearch { BatchSizeMode::BinSearch } else { BatchSizeMode::Power }", "d.mode == BatchSizeMode::BinSearch"),
            field("steps_per_trial", I64, &["Optimizer steps per trial (default 3)."], "StepsPerTrial", &["StepsPerTrial is the number of optimizer steps per trial."]),
            field("init_val", Usize, &["The first batch size tried (default 2)."], "InitVal", &["InitVal is the first batch size tried."]),
            field("max_trials", I64, &["The most trials (default 25)."], "MaxTrials", &["MaxTrials is the most trials."]),
            field("margin", F64, &["binsearch: the found size is reduced by this fraction, in [0, 1)", "(default 0.05)."], "Margin", &["Margin reduces a binsearch's result by this fraction, in [0, 1)."]),
            field("max_val", Usize, &["The largest batch size: sizes are capped at it, and the search ends", "once it reaches it, without trying it, as Lightning's (default 8192)."], "MaxVal", &["MaxVal caps the batch size; the search ends once it reaches it."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_batch_size_finder_options_default",
                doc: &["Lightning's defaults: power mode, 3 steps per trial from batch size 2,", "at most 25 trials, a 5% margin (binsearch), at most 8192."],
                params: &[],
                core: Some("BatchSizeOptions::default()"),
                set: &[],
                go: "DefaultBatchSizeFinderOptions",
                go_doc: &["DefaultBatchSizeFinderOptions are Lightning's defaults."],
            },
        ],
        go: "BatchSizeFinderOptions",
        go_doc: &["BatchSizeFinderOptions are the options of ScaleBatchSize (Lightning's", "scale_batch_size arguments)."],
    },
    OptionStruct {
        name: "fulmen_model_checkpoint_options",
        area: "callbacks",
        doc: &["Options of `fulmen_trainer_add_model_checkpoint`; defaults (Lightning's)", "from `fulmen_model_checkpoint_options_default`. Strings are copied."],
        core: Some("crate::callbacks::ModelCheckpointOptions"),
        uses: &["crate::ffi::callbacks::standard::mode", "crate::ffi::callbacks::standard::mode_code", "crate::ffi::callbacks::standard::tristate", "std::path::PathBuf"],
        fields: &[
            field("dirpath", CSTR, &["Folder; NULL = `<log dir>/checkpoints`."], "Dirpath", &["Dirpath is the folder (\"\": <log dir>/checkpoints)."]).manual("dirpath", "Option<PathBuf>", "std::ptr::null()").go_as("string"),
            field("filename", CSTR, &["Name template such as \"{epoch}-{val_loss:.3f}\"; NULL = \"{epoch}-{step}\"."], "Filename", &["Filename is the name template, such as \"{epoch}-{val_loss:.3f}\"", "(\"\": \"{epoch}-{step}\")."]).manual("filename", "Option<String>", "std::ptr::null()").go_as("string"),
            field("monitor", CSTR, &["Metric to rank by; NULL = keep the latest."], "Monitor", &["Monitor is the metric to rank by (\"\": keep the latest)."]).manual("monitor", "Option<String>", "std::ptr::null()").go_as("string"),
            field("mode", I32, &["A `fulmen_mode`: FULMEN_MODE_MIN (default) or FULMEN_MODE_MAX."], "Mode", &["Mode says whether lower or higher Monitor values are better."]).try_convert("mode", "mode(o.mode)", "mode_code(d.mode)").go_as("Mode"),
            field("save_top_k", I64, &["Best checkpoints to keep (-1 all, 0 none; default 1)."], "SaveTopK", &["SaveTopK is the number of best checkpoints to keep (-1 all, 0 none)."]),
            field("save_last", Bool, &["Also write `last.ckpt` (default false)."], "SaveLast", &["SaveLast also writes last.ckpt."]),
            field("every_n_train_steps", I64, &["Save every n optimizer steps (default 0: off)."], "EveryNTrainSteps", &["EveryNTrainSteps saves every n optimizer steps (0: off)."]),
            field("every_n_epochs", I64, &["Save every n epochs (default 1)."], "EveryNEpochs", &["EveryNEpochs saves every n epochs."]),
            field("save_weights_only", Bool, &["Save only weights (default false)."], "SaveWeightsOnly", &["SaveWeightsOnly saves only the weights (such a checkpoint cannot", "resume a fit)."]),
            field("auto_insert_metric_name", Bool, &["`name=value` in file names (default true)."], "AutoInsertMetricName", &["AutoInsertMetricName writes name=value in file names."]),
            field("save_on_train_epoch_end", I32, &["-1 auto (default), 0 after validation, 1 at training epoch end."], "SaveOnTrainEpochEnd", &["SaveOnTrainEpochEnd says when to save."]).try_convert("save_on_train_epoch_end", "tristate(o.save_on_train_epoch_end, \"save_on_train_epoch_end\")", "d.save_on_train_epoch_end.map_or(-1, i32::from)").go_as("CheckTiming"),
            field("train_time_interval", F64, &["Save when this many seconds of training passed since the last such", "save, checked at each training batch end (default 0: off). Not with", "every_n_train_steps, nor every_n_epochs other than 0 or 1 (then off)."], "TrainTimeInterval", &["TrainTimeInterval saves when this many seconds of training passed (0: off)."]).convert("train_time_interval", "(o.train_time_interval != 0.0).then_some(o.train_time_interval)", "d.train_time_interval.unwrap_or(0.0)"),
            field("save_on_exception", Bool, &["On a failure during fit, save a checkpoint and `last` (default false)."], "SaveOnException", &["SaveOnException saves a checkpoint when the fit fails."]),
            field("enable_version_counter", Bool, &["An existing name gets a `-v1` suffix (default true); false overwrites it."], "EnableVersionCounter", &["EnableVersionCounter adds -v1, -v2... to names that exist; false overwrites."]),
            field("save_last_link", Bool, &["With save_last, `last.ckpt` is a symlink to the newest checkpoint", "(Lightning's save_last=\"link\"; a copy where symlinks are refused)."], "SaveLastLink", &["SaveLastLink makes last.ckpt a symlink to the newest checkpoint."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_model_checkpoint_options_default",
                doc: &["Lightning's ModelCheckpoint defaults."],
                params: &[],
                core: Some("ModelCheckpointOptions::default()"),
                set: &[],
                go: "DefaultModelCheckpointOptions",
                go_doc: &["DefaultModelCheckpointOptions are Lightning's ModelCheckpoint defaults", "(from the library): keep the latest checkpoint, every epoch."],
            },
        ],
        go: "ModelCheckpointOptions",
        go_doc: &["ModelCheckpointOptions are the options of Lightning's ModelCheckpoint.", "Start from DefaultModelCheckpointOptions: the zero value saves nothing."],
    },
    OptionStruct {
        name: "fulmen_early_stopping_options",
        area: "callbacks",
        doc: &["Options of `fulmen_trainer_add_early_stopping`; defaults from", "`fulmen_early_stopping_options_default`."],
        core: Some("crate::callbacks::EarlyStoppingOptions"),
        uses: &["crate::ffi::callbacks::standard::mode", "crate::ffi::callbacks::standard::mode_code", "crate::ffi::callbacks::standard::tristate"],
        fields: &[
            field("monitor", CSTR, &["Metric to watch (required)."], "Monitor", &["Monitor is the metric to watch (required)."]).manual("monitor", "String", "std::ptr::null()").go_as("string"),
            field("min_delta", F64, &["Smallest change that counts as an improvement (default 0)."], "MinDelta", &["MinDelta is the smallest change that counts as an improvement."]),
            field("patience", I64, &["Checks without improvement before stopping (default 3)."], "Patience", &["Patience is the number of checks without improvement before stopping."]),
            field("mode", I32, &["A `fulmen_mode`: FULMEN_MODE_MIN (default) or FULMEN_MODE_MAX."], "Mode", &["Mode says whether lower or higher values are better."]).try_convert("mode", "mode(o.mode)", "mode_code(d.mode)").go_as("Mode"),
            field("strict", Bool, &["A missing metric is an error (default true)."], "Strict", &["Strict makes a missing metric an error."]),
            field("check_finite", Bool, &["Stop on NaN or infinite values (default true)."], "CheckFinite", &["CheckFinite stops on NaN or infinite values."]),
            field("stopping_threshold", F64, &["Stop once better than this; NaN = none (default)."], "StoppingThreshold", &["StoppingThreshold stops once the metric is better than this (NaN: none)."]).convert("stopping_threshold", "(!o.stopping_threshold.is_nan()).then_some(o.stopping_threshold)", "d.stopping_threshold.unwrap_or(f64::NAN)"),
            field("divergence_threshold", F64, &["Stop once worse than this; NaN = none (default)."], "DivergenceThreshold", &["DivergenceThreshold stops once the metric is worse than this (NaN: none)."]).convert("divergence_threshold", "(!o.divergence_threshold.is_nan()).then_some(o.divergence_threshold)", "d.divergence_threshold.unwrap_or(f64::NAN)"),
            field("check_on_train_epoch_end", I32, &["-1 auto (default), 0 after validation, 1 at training epoch end."], "CheckOnTrainEpochEnd", &["CheckOnTrainEpochEnd says when to check."]).try_convert("check_on_train_epoch_end", "tristate(o.check_on_train_epoch_end, \"check_on_train_epoch_end\")", "d.check_on_train_epoch_end.map_or(-1, i32::from)").go_as("CheckTiming"),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_early_stopping_options_default",
                doc: &["Lightning's EarlyStopping defaults (monitor NULL: set it)."],
                params: &[],
                core: Some("EarlyStoppingOptions::new(\"\")"),
                set: &[],
                go: "",
                go_doc: &[],
            },
        ],
        go: "EarlyStoppingOptions",
        go_doc: &["EarlyStoppingOptions are the options of Lightning's EarlyStopping.", "Start from DefaultEarlyStoppingOptions."],
    },
    OptionStruct {
        name: "fulmen_weight_averaging_options",
        area: "callbacks",
        doc: &["Weight averaging options; defaults (Lightning's `EMAWeightAveraging`)", "from `fulmen_weight_averaging_options_default`."],
        core: Some("crate::callbacks::WeightAveragingOptions"),
        uses: &["crate::ffi::callbacks::averaging::optional_start"],
        fields: &[
            field("ema", Bool, &["An exponential moving average with `decay` (default true); false", "averages every update equally (stochastic weight averaging,", "Lightning's `WeightAveraging`)."], "EMA", &["EMA keeps an exponential moving average with Decay; false averages", "every update equally (SWA)."]).convert("decay", "o.ema.then_some(o.decay)", "d.decay.is_some()"),
            field("decay", F64, &["The EMA decay in [0, 1] (default 0.999)."], "Decay", &["Decay is the EMA decay in [0, 1]."]).part("d.decay.unwrap_or(0.999)"),
            field("use_buffers", Bool, &["Average the buffers too (BatchNorm statistics; default true);", "otherwise they are copied from the model at each update."], "UseBuffers", &["UseBuffers averages the buffers too; otherwise they are copied."]),
            field("update_every_n_steps", I64, &["Update after every n-th optimizer step (default 1; 0: not per", "step)."], "UpdateEveryNSteps", &["UpdateEveryNSteps updates after every n-th optimizer step (0: not", "per step)."]),
            field("update_starting_at_step", I64, &["Update per step from this step index on; -1 (the default) from the", "first."], "UpdateStartingAtStep", &["UpdateStartingAtStep is the first step index updated (-1: the first)."]).try_convert("update_starting_at_step", "optional_start(o.update_starting_at_step, \"update_starting_at_step\")", "d.update_starting_at_step.unwrap_or(-1)"),
            field("update_starting_at_epoch", I64, &["Also update at each epoch end from this epoch on; -1 (the default)", "never."], "UpdateStartingAtEpoch", &["UpdateStartingAtEpoch also updates at each epoch end from this epoch", "on (-1: never)."]).try_convert("update_starting_at_epoch", "optional_start(o.update_starting_at_epoch, \"update_starting_at_epoch\")", "d.update_starting_at_epoch.unwrap_or(-1)"),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_weight_averaging_options_default",
                doc: &["Lightning's `EMAWeightAveraging` defaults."],
                params: &[],
                core: Some("WeightAveragingOptions::default()"),
                set: &[],
                go: "DefaultWeightAveragingOptions",
                go_doc: &["DefaultWeightAveragingOptions are Lightning's EMAWeightAveraging defaults."],
            },
        ],
        go: "WeightAveragingOptions",
        go_doc: &["WeightAveragingOptions are the options of weight averaging (Lightning's", "EMAWeightAveraging, or WeightAveraging's equal average when EMA is false)."],
    },
    OptionStruct {
        name: "fulmen_backbone_finetuning_options",
        area: "callbacks",
        doc: &["BackboneFinetuning options; Lightning's defaults from", "`fulmen_backbone_finetuning_options_default`."],
        core: Some("crate::callbacks::BackboneFinetuningOptions"),
        uses: &[],
        fields: &[
            field("backbone", CSTR, &["The backbone's dotted path in the model, NUL-terminated (default", "\"backbone\"; \"0\" is a Sequential's first child). Read during the", "call only."], "Backbone", &["Backbone is the backbone's dotted path in the model (\"backbone\",", "\"0\", \"encoder.layers\")."]).manual("backbone", "String", "std::ptr::null()").go_as("string"),
            field("unfreeze_backbone_at_epoch", I64, &["The epoch whose start unfreezes the backbone (default 10)."], "UnfreezeBackboneAtEpoch", &["UnfreezeBackboneAtEpoch is the epoch whose start unfreezes it."]),
            field("lambda_factor", F64, &["Each later epoch multiplies the backbone's lr by this (default 2,", "Lightning's `multiplicative` lambda_func)."], "LambdaFactor", &["LambdaFactor multiplies the backbone's lr at each later epoch."]),
            field("backbone_initial_ratio_lr", F64, &["The backbone's first lr as a fraction of the first group's lr", "(default 0.1)."], "BackboneInitialRatioLR", &["BackboneInitialRatioLR is its first lr as a fraction of the first", "group's."]),
            field("backbone_initial_lr", F64, &["The backbone's first lr; < 0 (the default) uses the ratio."], "BackboneInitialLR", &["BackboneInitialLR is its first lr instead (< 0: the ratio)."]).convert("backbone_initial_lr", "(o.backbone_initial_lr >= 0.0 || o.backbone_initial_lr.is_nan()).then_some(o.backbone_initial_lr)", "d.backbone_initial_lr.unwrap_or(-1.0)"),
            field("should_align", Bool, &["Keep the backbone's lr at most the first group's (default true)."], "ShouldAlign", &["ShouldAlign keeps its lr at most the first group's."]),
            field("train_bn", Bool, &["Train the backbone's BatchNorms all along (default true)."], "TrainBN", &["TrainBN keeps the backbone's BatchNorms trainable all along."]),
            field("verbose", Bool, &["Print both learning rates at each change on stderr (default false)."], "Verbose", &["Verbose prints both lrs at each change on stderr."]),
            field("rounding", I32, &["Decimals printed (default 12)."], "Rounding", &["Rounding is the number of decimals printed."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_backbone_finetuning_options_default",
                doc: &["Lightning's `BackboneFinetuning` defaults."],
                params: &[],
                core: Some("BackboneFinetuningOptions::default()"),
                set: &[("backbone", "c\"backbone\".as_ptr()")],
                go: "",
                go_doc: &[],
            },
        ],
        go: "BackboneFinetuningOptions",
        go_doc: &["BackboneFinetuningOptions are the options of BackboneFinetuning", "(Lightning's, with the backbone named by its path in the model)."],
    },
    OptionStruct {
        name: "fulmen_stochastic_weight_averaging_options",
        area: "callbacks",
        doc: &["StochasticWeightAveraging options; Lightning's defaults from", "`fulmen_stochastic_weight_averaging_options_default`."],
        core: Some("crate::callbacks::StochasticWeightAveragingOptions"),
        uses: &["crate::callbacks::SwaStart", "crate::ffi::callbacks::swa::swa_start", "crate::optim::AnnealStrategy"],
        fields: &[
            field("swa_lr", F64, &["The SWA lr of every param group (Lightning's `swa_lrs` as a float)."], "SWALR", &["SWALR is the SWA lr of every param group."]).manual("swa_lrs", "Vec<f64>", "d.swa_lrs.first().copied().unwrap_or(f64::NAN)"),
            field("swa_lrs", F64_PTR, &["One SWA lr per param group instead (Lightning's list), or NULL.", "Read during the call only."], "SWALRs", &["SWALRs, when not empty, holds one SWA lr per param group instead."]).part("std::ptr::null()").go_as("[]float64"),
            field("n_swa_lrs", Usize, &["Entries of `swa_lrs` (0: use `swa_lr`; at most 4096)."], "", &[]).part("0"),
            field("swa_epoch_start", I64, &["Averaging starts at this epoch, counted from 1; 0 (the default)", "uses `swa_epoch_start_fraction`."], "SWAEpochStart", &["SWAEpochStart is the epoch averaging starts at, counted from 1; 0", "uses SWAEpochStartFraction."]).try_convert("swa_epoch_start", "swa_start(o.swa_epoch_start, o.swa_epoch_start_fraction)", "match d.swa_epoch_start { SwaStart::Epoch(e) => e, SwaStart::Fraction(_) => 0 }"),
            field("swa_epoch_start_fraction", F64, &["Averaging starts at epoch `int(fraction * max_epochs)` (default", "0.8), when `swa_epoch_start` is 0."], "SWAEpochStartFraction", &["SWAEpochStartFraction starts it at int(fraction * max_epochs)."]).part("match d.swa_epoch_start { SwaStart::Fraction(f) => f, SwaStart::Epoch(_) => 0.8 }"),
            field("annealing_epochs", I64, &["Epochs of annealing to the SWA lr (default 10)."], "AnnealingEpochs", &["AnnealingEpochs is the number of epochs annealing to the SWA lr."]),
            field("linear_anneal", Bool, &["Linear annealing (true) instead of cosine (false, the default)."], "LinearAnneal", &["LinearAnneal anneals linearly instead of by a cosine."]).convert("annealing_strategy", "if o.linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos }", "d.annealing_strategy == AnnealStrategy::Linear"),
            field("average_on_device", Bool, &["Keep the average on the model's device (Lightning's `device=None`)", "instead of the CPU (false, the default, `device=\"cpu\"`)."], "AverageOnDevice", &["AverageOnDevice keeps the average on the model's device instead of", "the CPU."]).convert("average_on_cpu", "!o.average_on_device", "!d.average_on_cpu"),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_stochastic_weight_averaging_options_default",
                doc: &["Lightning's `StochasticWeightAveraging` defaults with `swa_lr` for", "every param group."],
                params: &[param("swa_lr", F64, "swaLR")],
                core: Some("StochasticWeightAveragingOptions::new(vec![swa_lr])"),
                set: &[],
                go: "DefaultStochasticWeightAveragingOptions",
                go_doc: &["DefaultStochasticWeightAveragingOptions are Lightning's", "StochasticWeightAveraging defaults with swaLR for every param group."],
            },
        ],
        go: "StochasticWeightAveragingOptions",
        go_doc: &["StochasticWeightAveragingOptions are the options of Lightning's", "StochasticWeightAveraging."],
    },
];

#[cfg(test)]
#[path = "options_table_tests.rs"]
mod tests;

//! The tensor ops are written once, in `src/tensor/ops/table.rs`. This
//! generator writes from that table the C functions
//! (`src/ffi/{tensor,tensor_ops,losses}/gen_*.rs`, which cbindgen copies
//! into the headers), the C++ methods and functions
//! (`bindings/cpp/include/fulmen/tensor_*_gen.inc`) and the Go methods and
//! functions (`bindings/go/tensor_ops_gen.go`). `tests/ops_drift.rs` fails
//! when a committed copy differs; `make header` rewrites them.
use fulmen::tensor::ops::table::{Output, Param, ParamKind, TensorOp, TENSOR_OPS};

/// The table the code comes from.
pub const SOURCE: &str = "src/tensor/ops/table.rs";
const CPP_METHODS: &str = "bindings/cpp/include/fulmen/tensor_methods_gen.inc";
const CPP_FUNCTIONS: &str = "bindings/cpp/include/fulmen/tensor_functions_gen.inc";
const CPP_LOSSES: &str = "bindings/cpp/include/fulmen/tensor_losses_gen.inc";
const GO: &str = "bindings/go/tensor_ops_gen.go";

/// Go names that plain camel case (with `InPlace` for an in-place op)
/// would spell badly.
const GO_NAMES: &[(&str, &str)] =
    &[("topk", "TopK"), ("logsumexp", "LogSumExp"), ("logsigmoid", "LogSigmoid"), ("copy_from_host", "CopyFromSlice")];

/// Ops whose Go method takes its last parameter, a list of sizes or
/// dimensions, as variadic `...int64`.
const GO_VARIADIC: &[&str] = &["reshape", "view", "permute"];

/// C++ names other than the op's own: overloads of one name (`add` of a
/// tensor and of a number) and names the binding had before the table.
const CPP_NAMES: &[(&str, &str)] = &[
    ("add_scalar", "add"),
    ("mul_scalar", "mul"),
    ("pow_scalar", "pow"),
    ("sum_dims", "sum"),
    ("mean_dims", "mean"),
    ("add_scalar_", "add_"),
    ("mul_scalar_", "mul_"),
    ("copy_from_host", "copy_from"),
];

/// Go names of losses that do not follow `<CamelName>Loss`.
const GO_LOSS_NAMES: &[(&str, &str)] = &[
    ("cross_entropy", "CrossEntropy"),
    ("cross_entropy_with_options", "CrossEntropyWithOptions"),
    ("nll", "NLLLoss"),
    ("nll_with_options", "NLLLossWithOptions"),
    ("mse", "MSELoss"),
    ("bce_with_logits", "BCEWithLogits"),
    ("bce_with_logits_with_options", "BCEWithLogitsWithOptions"),
    ("bce", "BCELoss"),
    ("kl_div", "KLDivLoss"),
    ("ctc", "CTCLoss"),
];

/// Wraps `text` into lines of at most `width` characters, each starting
/// with `prefix`.
fn wrap(text: &str, width: usize, prefix: &str) -> String {
    let mut out = String::new();
    let mut line = prefix.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.len() + 1 + word.len() > width {
            out += line.trim_end();
            out.push('\n');
            line = prefix.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out += line.trim_end();
    out.push('\n');
    out
}

fn groups() -> Vec<&'static str> {
    let mut g: Vec<&str> = Vec::new();
    for op in TENSOR_OPS {
        if !g.contains(&op.group) {
            g.push(op.group);
        }
    }
    g
}

// ---- C (Rust FFI)

/// What the header says about the outputs, after the op's own doc.
fn output_doc(op: &TensorOp) -> String {
    match op.output {
        Output::One => "The result is a new tensor written to `*out`.".into(),
        Output::Pair(a, b) => format!("The results are new tensors written to `*{a}` and `*{b}`."),
        Output::List => "The pieces are new tensors written to `outs[0..*count_out]`: `*count_out` gets their count, and when it exceeds `capacity` nothing else is written (call again with `*count_out` slots).".into(),
        Output::InPlace => format!(
            "`{}` is changed in place; nothing new is made. A meta tensor records the change for when its \
             model is materialized (`fulmen_meta_init_begin`): FULMEN_CODE_INVALID_STATE for a change of part \
             of one with no values recorded, FULMEN_CODE_UNSUPPORTED for a view of one or a meta operand.",
            first_name(op)
        ),
    }
}

/// Name of the op's first parameter (the tensor an in-place op changes).
fn first_name(op: &TensorOp) -> &'static str {
    op.params.first().map_or("", |p| p.name)
}

fn has_host_data(op: &TensorOp) -> bool {
    op.params.iter().any(|p| p.kind == ParamKind::HostData)
}

fn c_params(op: &TensorOp) -> Vec<String> {
    let mut v = Vec::new();
    for p in op.params {
        let n = p.name;
        match p.kind {
            ParamKind::Tensor | ParamKind::OptTensor => v.push(format!("{n}: *const fulmen_tensor")),
            ParamKind::Tensors => {
                v.push(format!("{n}: *const *const fulmen_tensor"));
                v.push(format!("{}: usize", p.len_name()));
            }
            ParamKind::I64 => v.push(format!("{n}: i64")),
            ParamKind::F64 => v.push(format!("{n}: f64")),
            ParamKind::Bool => v.push(format!("{n}: bool")),
            ParamKind::Dims => {
                v.push(format!("{n}: *const i64"));
                v.push(format!("{}: usize", p.len_name()));
            }
            ParamKind::HostData => {
                v.push(format!("{n}: *const c_void"));
                v.push(format!("{}: usize", p.len_name()));
                v.push("dtype: i32".into());
            }
            ParamKind::Str => v.push(format!("{n}: *const c_char")),
            ParamKind::DType | ParamKind::Reduction => v.push(format!("{n}: i32")),
        }
    }
    match op.output {
        Output::One => v.push("out: *mut *mut fulmen_tensor".into()),
        Output::Pair(a, b) => {
            v.push(format!("{a}: *mut *mut fulmen_tensor"));
            v.push(format!("{b}: *mut *mut fulmen_tensor"));
        }
        Output::List => {
            v.push("outs: *mut *mut fulmen_tensor".into());
            v.push("capacity: usize".into());
            v.push("count_out: *mut usize".into());
        }
        Output::InPlace => {}
    }
    v
}

/// Statements that turn C arguments into core arguments, and the argument
/// list of the core call.
fn rust_conversions(op: &TensorOp) -> (Vec<String>, String) {
    let mut lets = Vec::new();
    let mut args = Vec::new();
    for p in op.params {
        let n = p.name;
        match p.kind {
            ParamKind::Tensor => {
                lets.push(format!("let {n} = tensor_arg({n}, \"{n}\")?;"));
                args.push(format!("&{n}"));
            }
            ParamKind::OptTensor => {
                lets.push(format!("let {n} = opt_tensor_arg({n}, \"{n}\")?;"));
                args.push(format!("{n}.as_deref()"));
            }
            ParamKind::Tensors => {
                lets.push(format!("let {n} = tensor_list({n}, {}, \"{n}\")?;", p.len_name()));
                lets.push(format!("let {n}: Vec<&Tensor> = {n}.iter().map(|t| &**t).collect();"));
                args.push(format!("&{n}"));
            }
            ParamKind::Dims => {
                lets.push(format!("let {n} = i64_list({n}, {}, \"{n}\")?;", p.len_name()));
                args.push(n.to_string());
            }
            ParamKind::HostData => {
                lets.push(format!("let {n} = host_tensor({n}, {}, dtype, &{}.size())?;", p.len_name(), first_name(op)));
                args.push(format!("&{n}"));
            }
            ParamKind::Str => {
                lets.push(format!("let {n} = str_arg({n}, \"{n}\")?;"));
                args.push(n.to_string());
            }
            ParamKind::DType => {
                lets.push(format!("let {n} = DType::from_i32({n})?;"));
                args.push(n.to_string());
            }
            ParamKind::Reduction => {
                lets.push(format!("let {n} = LossReduction::from_i32({n})?;"));
                args.push(n.to_string());
            }
            ParamKind::I64 | ParamKind::F64 | ParamKind::Bool => args.push(n.to_string()),
        }
    }
    (lets, args.join(", "))
}

fn rust_function(op: &TensorOp) -> String {
    let c_name = op.c_name();
    let mut s = wrap(&format!("{} {}", op.doc, output_doc(op)), 80, "/// ");
    s += "///\n";
    s += &wrap(&format!("Errors: {}.", op.errors), 80, "/// ");
    if op.output == Output::InPlace {
        s += &wrap(
            &format!("Thread rules: the caller keeps other threads off `{}` meanwhile.", first_name(op)),
            80,
            "/// ",
        );
    }
    s += "#[no_mangle]\n";
    s += &format!("pub unsafe extern \"C\" fn {c_name}(\n");
    for p in c_params(op) {
        s += &format!("    {p},\n");
    }
    s += ") -> *mut fulmen_error {\n";
    s += "    guard!(|| {\n";
    let (lets, args) = rust_conversions(op);
    let core = op.core_name();
    let mut body: Vec<String> = Vec::new();
    match op.output {
        Output::One => body.push("check_out(out, \"out\")?;".into()),
        Output::Pair(a, b) => body.push(format!("check_out_pair({a}, \"{a}\", {b}, \"{b}\")?;")),
        Output::List => body.push("check_out(count_out, \"count_out\")?;".into()),
        Output::InPlace => {}
    }
    body.extend(lets);
    match op.output {
        Output::One => body.push(format!("emit(out, ops::{core}({args})?)")),
        Output::Pair(a, b) => {
            body.push(format!("let (first, second) = ops::{core}({args})?;"));
            body.push(format!("emit_pair({a}, first, {b}, second)"));
        }
        Output::List => {
            body.push(format!(
                "emit_list(outs, capacity, count_out, ops::{core}_count({args})?, || ops::{core}({args}))"
            ));
        }
        Output::InPlace => body.push(format!("ops::{core}({args})")),
    }
    for line in body {
        s += &format!("        {line}\n");
    }
    s += "    })\n}\n";
    s
}

fn rust_file(group: &str) -> String {
    let ops: Vec<&TensorOp> = TENSOR_OPS.iter().filter(|o| o.group == group).collect();
    let kinds: Vec<ParamKind> = ops.iter().flat_map(|o| o.params.iter().map(|p| p.kind)).collect();
    let has = |k: ParamKind| kinds.contains(&k);
    let outputs: Vec<Output> = ops.iter().map(|o| o.output).collect();
    let mut handle_uses = vec!["fulmen_tensor"];
    if outputs.contains(&Output::One) {
        handle_uses.push("emit");
    }
    if outputs.iter().any(|o| matches!(o, Output::Pair(..))) {
        handle_uses.extend(["check_out_pair", "emit_pair"]);
    }
    if outputs.contains(&Output::List) {
        handle_uses.push("emit_list");
    }
    for (k, name) in [
        (ParamKind::Tensor, "tensor_arg"),
        (ParamKind::OptTensor, "opt_tensor_arg"),
        (ParamKind::Tensors, "tensor_list"),
        (ParamKind::Dims, "i64_list"),
    ] {
        if has(k) {
            handle_uses.push(name);
        }
    }
    handle_uses.sort();
    let mut s = format!("//! Generated from {SOURCE} by tools/codegen/ops.rs (`make header`): do not edit.\n");
    s += &format!("//! The C functions of the `{group}` tensor ops; each converts its arguments\n");
    s += "//! and calls the core function of the same name in `crate::tensor::ops`.\n";
    s += &format!("use crate::ffi::tensor::handle::{{{}}};\n", handle_uses.join(", "));
    let mut error_uses = vec!["fulmen_error", "guard"];
    if has(ParamKind::Str) {
        error_uses.push("str_arg");
    }
    s += &format!("use crate::ffi::base::error::{{{}}};\n", error_uses.join(", "));
    if outputs.iter().any(|o| *o != Output::InPlace) {
        s += "use crate::ffi::base::handle::check_out;\n";
    }
    if has(ParamKind::HostData) {
        s += "use crate::ffi::tensor::create::host_tensor;\n";
    }
    s += "use crate::tensor::ops;\n";
    if has(ParamKind::Reduction) {
        s += "use crate::tensor::ops::LossReduction;\n";
    }
    if has(ParamKind::DType) {
        s += "use crate::tensor::DType;\n";
    }
    if has(ParamKind::Str) {
        s += "use std::ffi::c_char;\n";
    }
    if has(ParamKind::HostData) {
        s += "use std::ffi::c_void;\n";
    }
    if has(ParamKind::Tensors) {
        s += "use tch::Tensor;\n";
    }
    for op in ops {
        s += "\n";
        s += &rust_function(op);
    }
    s
}

// ---- C++

fn cpp_type(p: &Param) -> String {
    match p.kind {
        ParamKind::Tensor => "const Tensor&".into(),
        ParamKind::OptTensor => "const Tensor*".into(),
        ParamKind::Tensors => "const TensorList&".into(),
        ParamKind::I64 => "int64_t".into(),
        ParamKind::F64 => "double".into(),
        ParamKind::Bool => "bool".into(),
        ParamKind::Dims => "const Shape&".into(),
        ParamKind::HostData => "const std::vector<T>&".into(),
        ParamKind::Str => "const std::string&".into(),
        ParamKind::DType => "DType".into(),
        ParamKind::Reduction => "Reduction".into(),
    }
}

fn cpp_default(p: &Param) -> String {
    match p.kind {
        ParamKind::DType => format!("DType::{}", p.default),
        ParamKind::Reduction => format!("Reduction::{}", p.default),
        _ => p.default.to_string(),
    }
}

/// The C++ argument list of `params`, with defaults on the trailing run of
/// parameters that have one.
fn cpp_signature(params: &[Param]) -> String {
    let tail_from = params.iter().rposition(|p| p.default.is_empty()).map_or(0, |i| i + 1);
    params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut s = format!("{} {}", cpp_type(p), p.name);
            if i >= tail_from {
                s += &format!(" = {}", cpp_default(p));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Statements before the C call and its argument list (`self_get` is how
/// the method reads its own handle).
fn cpp_call_args(op: &TensorOp, method: bool) -> (Vec<String>, Vec<String>) {
    let mut pre = Vec::new();
    let mut args = Vec::new();
    for (i, p) in op.params.iter().enumerate() {
        let n = p.name;
        match p.kind {
            ParamKind::Tensor if method && i == 0 => args.push("get()".into()),
            ParamKind::Tensor => args.push(format!("{n}.get()")),
            ParamKind::OptTensor => args.push(format!("Tensor::optional_handle({n}, \"{n}\")")),
            ParamKind::Tensors => {
                pre.push(format!("std::vector<const fulmen_tensor*> {n}_h = detail::handles({n});"));
                args.push(format!("{n}_h.data()"));
                args.push(format!("{n}_h.size()"));
            }
            ParamKind::I64 | ParamKind::F64 | ParamKind::Bool => args.push(n.into()),
            ParamKind::Dims => {
                args.push(format!("{n}.data()"));
                args.push(format!("{n}.size()"));
            }
            ParamKind::HostData => {
                pre.push(format!("static const T {n}_none{{}};"));
                pre.push(format!("const T* {n}_ptr = {n}.empty() ? &{n}_none : {n}.data();"));
                args.push(format!("{n}_ptr"));
                args.push(format!("{n}.size() * sizeof(T)"));
                args.push("static_cast<int32_t>(dtype_of<T>)".into());
            }
            ParamKind::Str => args.push(format!("{n}.c_str()")),
            ParamKind::DType | ParamKind::Reduction => args.push(format!("static_cast<int32_t>({n})")),
        }
    }
    (pre, args)
}

fn cpp_name(op: &TensorOp) -> &'static str {
    CPP_NAMES.iter().find(|(k, _)| *k == op.name).map_or(op.name, |(_, v)| *v)
}

/// The C++ body of an in-place op: the C call, then the tensor itself for
/// a method.
fn cpp_in_place(op: &TensorOp, indent: &str, method: bool, args: &[String]) -> String {
    let mut s = format!("{indent}    check({}({}));\n", op.c_name(), args.join(", "));
    if method {
        s += &format!("{indent}    return *this;\n");
    }
    s + &format!("{indent}}}\n")
}

fn cpp_function(op: &TensorOp, indent: &str) -> String {
    let method = op.is_method();
    let params: &[Param] = if method { &op.params[1..] } else { op.params };
    let mut s = wrap(&format!("{} ({})", op.doc, op.c_name()), 100, &format!("{indent}/// "));
    if has_host_data(op) {
        s += &format!("{indent}template <class T>\n");
    }
    let (ret, maker, outs) = match op.output {
        Output::One => ("Tensor", "make", "fulmen_tensor** out"),
        Output::Pair(..) => ("std::pair<Tensor, Tensor>", "make_pair", "fulmen_tensor** first, fulmen_tensor** second"),
        Output::List => ("std::vector<Tensor>", "make_list", "fulmen_tensor** outs, size_t capacity, size_t* count"),
        Output::InPlace if method => ("const Tensor&", "", ""),
        Output::InPlace => ("void", "", ""),
    };
    let qualifier = if method { " const" } else { "" };
    let prefix = if method { "" } else { "inline " };
    s += &format!("{indent}{prefix}{ret} {}({}){qualifier} {{\n", cpp_name(op), cpp_signature(params));
    let (pre, mut args) = cpp_call_args(op, method);
    for line in pre {
        s += &format!("{indent}    {line}\n");
    }
    let out_args: Vec<String> = match op.output {
        Output::One => vec!["out".into()],
        Output::Pair(..) => vec!["first".into(), "second".into()],
        Output::List => vec!["outs".into(), "capacity".into(), "count".into()],
        Output::InPlace => return s + &cpp_in_place(op, indent, method, &args),
    };
    args.extend(out_args);
    let class = if method { "" } else { "Tensor::" };
    s += &format!("{indent}    return {class}{maker}([&]({outs}) {{\n");
    s += &format!("{indent}        return {}({});\n", op.c_name(), args.join(", "));
    s += &format!("{indent}    }});\n{indent}}}\n");
    s
}

/// Which ops go to which C++ file.
#[derive(Clone, Copy, PartialEq)]
enum CppPart {
    Methods,
    Functions,
    Losses,
}

fn cpp_part(op: &TensorOp) -> CppPart {
    if op.family == "loss" {
        CppPart::Losses
    } else if op.is_method() {
        CppPart::Methods
    } else {
        CppPart::Functions
    }
}

fn cpp_file(part: CppPart) -> String {
    let (what, indent) = match part {
        CppPart::Methods => ("tensor ops that are methods of fulmen::Tensor, included inside the class", "    "),
        CppPart::Functions => ("tensor ops that are functions of namespace fulmen, included after class Tensor", ""),
        CppPart::Losses => ("losses, functions of namespace fulmen::loss", ""),
    };
    let mut s = format!("// Generated from {SOURCE} by tools/codegen/ops.rs (`make header`): do not edit.\n");
    s += &format!("// The generated {what}.\n");
    for op in TENSOR_OPS.iter().filter(|o| cpp_part(o) == part) {
        s += "\n";
        s += &cpp_function(op, indent);
    }
    s
}

// ---- Go

fn camel(snake: &str, upper_first: bool) -> String {
    let mut out = String::new();
    for (i, w) in snake.split('_').enumerate() {
        let mut c = w.chars();
        if let Some(f) = c.next() {
            if i == 0 && !upper_first {
                out.push(f);
            } else {
                out.push(f.to_ascii_uppercase());
            }
            out.push_str(c.as_str());
        }
    }
    out
}

fn go_name(op: &TensorOp) -> String {
    if op.family == "loss" {
        return GO_LOSS_NAMES
            .iter()
            .find(|(k, _)| *k == op.name)
            .map_or_else(|| camel(op.name, true) + "Loss", |(_, v)| v.to_string());
    }
    let plain = || {
        let name = camel(op.name, true);
        if op.output == Output::InPlace {
            name + "InPlace"
        } else {
            name
        }
    };
    GO_NAMES.iter().find(|(k, _)| *k == op.name).map_or_else(plain, |(_, v)| v.to_string())
}

fn go_type(p: &Param) -> &'static str {
    match p.kind {
        ParamKind::Tensor | ParamKind::OptTensor => "*Tensor",
        ParamKind::Tensors => "[]*Tensor",
        ParamKind::I64 => "int64",
        ParamKind::F64 => "float64",
        ParamKind::Bool => "bool",
        ParamKind::Dims => "[]int64",
        ParamKind::HostData => "[]T",
        ParamKind::Str => "string",
        ParamKind::DType => "DType",
        ParamKind::Reduction => "Reduction",
    }
}

/// The Go type of parameter `i` of the `params` a Go function takes.
fn go_param_type(op: &TensorOp, params: &[Param], i: usize) -> &'static str {
    let p = &params[i];
    if GO_VARIADIC.contains(&op.name) && i + 1 == params.len() && p.kind == ParamKind::Dims {
        "...int64"
    } else {
        go_type(p)
    }
}

fn go_function(op: &TensorOp) -> String {
    // Go has no generic methods: an op taking host data of any element type
    // is a generic function.
    let method = op.is_method() && !has_host_data(op);
    let name = go_name(op);
    let params: &[Param] = if method { &op.params[1..] } else { op.params };
    let mut doc = format!("{name} calls {}: {}", op.c_name(), op.doc);
    if op.params.iter().any(|p| p.kind == ParamKind::OptTensor) {
        doc += " A nil tensor passes NULL; a closed one is an error.";
    }
    let mut s = wrap(&doc, 80, "// ");
    let sig: Vec<String> = (0..params.len())
        .map(|i| format!("{} {}", camel(params[i].name, false), go_param_type(op, params, i)))
        .collect();
    let ret = match op.output {
        Output::One => "(*Tensor, error)",
        Output::Pair(..) => "(*Tensor, *Tensor, error)",
        Output::List => "([]*Tensor, error)",
        Output::InPlace => "error",
    };
    let recv = if method { "(t *Tensor) " } else { "" };
    let type_params = if has_host_data(op) { "[T Element]" } else { "" };
    s += &format!("func {recv}{name}{type_params}({}) {ret} {{\n", sig.join(", "));
    let mut pre = Vec::new();
    let mut args = Vec::new();
    let mut alive = Vec::new();
    for (i, p) in op.params.iter().enumerate() {
        let n = camel(p.name, false);
        match p.kind {
            ParamKind::Tensor if method && i == 0 => {
                args.push("t.ptr()".to_string());
                alive.push("t".to_string());
            }
            ParamKind::Tensor => {
                args.push(format!("{n}.ptr()"));
                alive.push(n);
            }
            ParamKind::OptTensor => {
                let fail = match op.output {
                    Output::Pair(..) => "nil, nil, err",
                    Output::InPlace => "err",
                    _ => "nil, err",
                };
                pre.push(format!("if err := checkOptional({n}, \"{n}\"); err != nil {{\n\t\treturn {fail}\n\t}}"));
                args.push(format!("{n}.ptr()"));
                alive.push(n);
            }
            ParamKind::Tensors => {
                pre.push(format!("{n}Ptr, {n}Len, {n}Handles := tensorArray({n})"));
                args.push(format!("{n}Ptr"));
                args.push(format!("{n}Len"));
                alive.push(format!("{n}Handles"));
                alive.push(n);
            }
            ParamKind::I64 => args.push(format!("C.int64_t({n})")),
            ParamKind::F64 => args.push(format!("C.double({n})")),
            ParamKind::Bool => args.push(format!("C.bool({n})")),
            ParamKind::Dims => {
                pre.push(format!("{n}Ptr, {n}Len := shapeArg({n})"));
                args.push(format!("{n}Ptr"));
                args.push(format!("{n}Len"));
            }
            ParamKind::HostData => {
                pre.push(format!("{n}Ptr, {n}Len, {n}Held := hostBytes({n})"));
                args.push(format!("{n}Ptr"));
                args.push(format!("C.size_t({n}Len)"));
                args.push("C.int32_t(DTypeOf[T]())".into());
                alive.push(format!("{n}Held"));
            }
            ParamKind::Str => {
                pre.push(format!("{n}C := C.CString({n})"));
                pre.push(format!("defer C.free(unsafe.Pointer({n}C))"));
                args.push(format!("{n}C"));
            }
            ParamKind::DType | ParamKind::Reduction => args.push(format!("C.int32_t({n})")),
        }
    }
    for line in &pre {
        s += &format!("\t{line}\n");
    }
    let call = |outs: &[&str]| {
        let all: Vec<&str> = args.iter().map(String::as_str).chain(outs.iter().copied()).collect();
        format!("C.{}({})", op.c_name(), all.join(", "))
    };
    let keep = |s: &mut String| {
        for a in &alive {
            *s += &format!("\truntime.KeepAlive({a})\n");
        }
    };
    match op.output {
        Output::One => {
            s += "\tvar out cTensor\n";
            s += &format!("\terr := check({})\n", call(&["&out"]));
            keep(&mut s);
            s += "\tif err != nil {\n\t\treturn nil, err\n\t}\n\treturn newTensor(out), nil\n";
        }
        Output::Pair(..) => {
            s += "\tvar first, second cTensor\n";
            s += &format!("\terr := check({})\n", call(&["&first", "&second"]));
            keep(&mut s);
            s +=
                "\tif err != nil {\n\t\treturn nil, nil, err\n\t}\n\treturn newTensor(first), newTensor(second), nil\n";
        }
        Output::List => {
            s += "\tpieces, err := tensorPieces(func(outs *cTensor, capacity C.size_t, count *C.size_t) cErr {\n";
            s += &format!("\t\treturn {}\n\t}})\n", call(&["outs", "capacity", "count"]));
            keep(&mut s);
            s += "\treturn pieces, err\n";
        }
        Output::InPlace => {
            s += &format!("\terr := check({})\n", call(&[]));
            keep(&mut s);
            s += "\treturn err\n";
        }
    }
    s += "}\n";
    s
}

fn go_file() -> String {
    let strings = TENSOR_OPS.iter().any(|o| o.params.iter().any(|p| p.kind == ParamKind::Str));
    let mut s = format!("// Code generated by tools/codegen/ops.rs from {SOURCE}. DO NOT EDIT.\n\npackage fulmen\n\n");
    s += "/*\n#include <stdlib.h>\n#include <fulmen.h>\n*/\nimport \"C\"\n\n";
    s += if strings { "import (\n\t\"runtime\"\n\t\"unsafe\"\n)\n" } else { "import \"runtime\"\n" };
    for op in TENSOR_OPS {
        s += "\n";
        s += &go_function(op);
    }
    s
}

// ---- check or write

/// The folder under `src/ffi/` (the C API's area, `include/fulmen/<area>.h`)
/// of a group's generated functions.
fn area_of(group: &str) -> &'static str {
    match group {
        "loss" => "losses",
        "inplace" => "tensor",
        _ => "tensor_ops",
    }
}

/// Every file the table generates: `(path under the repository, text)`.
pub fn generated_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> =
        groups().into_iter().map(|g| (format!("src/ffi/{}/gen_{g}.rs", area_of(g)), rust_file(g))).collect();
    files.push((CPP_METHODS.into(), cpp_file(CppPart::Methods)));
    files.push((CPP_FUNCTIONS.into(), cpp_file(CppPart::Functions)));
    files.push((CPP_LOSSES.into(), cpp_file(CppPart::Losses)));
    files.push((GO.into(), go_file()));
    files
}

/// The op names (C names) that appear more than once in the table.
pub fn duplicate_names() -> Vec<String> {
    let mut names: Vec<String> = TENSOR_OPS.iter().map(|o| o.c_name()).collect();
    names.sort_unstable();
    let mut twice: Vec<String> = names.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0].clone()).collect();
    twice.dedup();
    twice
}

/// The rows the generator cannot write as the table documents them: a
/// method, an in-place op or an op taking host data whose first parameter
/// is not a tensor (the one the method is called on, the one changed, the
/// one host data is shaped as).
pub fn malformed_ops() -> Vec<String> {
    TENSOR_OPS
        .iter()
        .filter(|o| o.is_method() || o.output == Output::InPlace || has_host_data(o))
        .filter(|o| o.params.first().is_none_or(|p| p.kind != ParamKind::Tensor))
        .map(|o| o.c_name())
        .collect()
}

/// `(module file, module line)` each generated group needs, as
/// `src/ffi/<area>/mod.rs` and `pub mod gen_<group>;`.
pub fn module_lines() -> Vec<(String, String)> {
    groups().into_iter().map(|g| (format!("src/ffi/{}/mod.rs", area_of(g)), format!("pub mod gen_{g};"))).collect()
}

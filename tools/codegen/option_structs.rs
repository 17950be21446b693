//! The C API's option structs are written once, in
//! `src/ffi/options_table.rs`. This generator writes from that table, per
//! area, `src/ffi/<area>/gen_options.rs`: the `#[repr(C)]` structs (which
//! cbindgen copies into `fulmen/<area>.h`), their `*_default` functions
//! and the conversions to and from the core's options; and
//! `bindings/go/options_gen.go`: the Go structs, their `Default*`
//! functions and their conversions to and from C. The C++ option types
//! derive from the C structs and only add constructors, so nothing is
//! generated for them. `tests/option_structs_drift.rs` fails when a
//! committed copy differs; `make header` rewrites them.
use fulmen::ffi::options_table::{CType, CoreMap, DefaultFn, OptionField, OptionStruct, OPTION_STRUCTS};
use std::collections::{BTreeMap, BTreeSet};

/// The table the code comes from.
pub const SOURCE: &str = "src/ffi/options_table.rs";
const GENERATOR: &str = "tools/codegen/option_structs.rs";
const GO: &str = "bindings/go/options_gen.go";

/// A doc comment: each line after `marker`, indented.
fn doc(lines: &[&str], indent: &str, marker: &str) -> String {
    lines
        .iter()
        .map(|l| if l.is_empty() { format!("{indent}{marker}\n") } else { format!("{indent}{marker} {l}\n") })
        .collect()
}

/// Names joined as a sentence: `a`, `a and b`, `a, b and c`.
fn sentence(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The core type's name (the last part of its path).
fn core_name(s: &OptionStruct) -> &'static str {
    let core = s.core.unwrap_or_else(|| panic!("{SOURCE}: {} has no core options type", s.name));
    core.rsplit("::").next().unwrap_or(core)
}

/// The areas with option structs, in table order.
fn areas() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for s in OPTION_STRUCTS {
        if !out.contains(&s.area) {
            out.push(s.area);
        }
    }
    out
}

/// The `use` lines of an area's file, one per module, names sorted.
fn uses(structs: &[&OptionStruct]) -> String {
    let mut paths: Vec<&str> = Vec::new();
    if structs.iter().any(|s| s.fallible()) {
        paths.push("crate::error::Error");
    }
    if structs.iter().any(|s| s.fields.iter().any(|f| f.ty.uses_c_char())) {
        paths.push("std::ffi::c_char");
    }
    for s in structs {
        paths.extend(s.core);
        paths.extend(s.uses.iter().copied());
    }
    let mut by_module: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in paths {
        let (module, name) = p.rsplit_once("::").unwrap_or_else(|| panic!("{SOURCE}: `{p}` is not a path"));
        by_module.entry(module).or_default().insert(name);
    }
    let mut out = String::new();
    for (module, names) in by_module {
        let names: Vec<&str> = names.into_iter().collect();
        if names.len() == 1 {
            out += &format!("use {module}::{};\n", names[0]);
        } else {
            out += &format!("use {module}::{{{}}};\n", names.join(", "));
        }
    }
    out
}

/// The `#[repr(C)]` struct.
fn c_struct(s: &OptionStruct) -> String {
    let mut out = doc(s.doc, "", "///");
    out += "#[repr(C)]\n#[derive(Debug, Clone, Copy)]\n";
    out += &format!("pub struct {} {{\n", s.name);
    for f in s.fields {
        out += &doc(f.doc, "    ", "///");
        out += &format!("    pub {}: {},\n", f.name, f.ty.rust());
    }
    out += "}\n";
    out
}

/// `name: value` in a struct literal, or `name` alone when the value is
/// the variable of that name.
fn member(name: &str, value: &str) -> String {
    if name == value {
        name.to_owned()
    } else {
        format!("{name}: {value}")
    }
}

/// A `*_default` function: its core options, converted, with the fields
/// of `set` then set; without core options, the struct of `set`.
fn default_fn(s: &OptionStruct, d: &DefaultFn) -> String {
    let params: Vec<String> = d.params.iter().map(|p| format!("{}: {}", p.name, p.ty.rust())).collect();
    let mut out = doc(d.doc, "", "///");
    out += "#[no_mangle]\n";
    out += &format!("pub extern \"C\" fn {}({}) -> {} {{\n", d.name, params.join(", "), s.name);
    match d.core {
        None => {
            out += &format!("    {} {{\n", s.name);
            for (name, value) in d.set {
                out += &format!("        {},\n", member(name, value));
            }
            out += "    }\n";
        }
        Some(core) if d.set.is_empty() => out += &format!("    {core}.into()\n"),
        Some(core) => {
            out += &format!("    let mut c: {} = {core}.into();\n", s.name);
            for (name, value) in d.set {
                out += &format!("    c.{name} = {value};\n");
            }
            out += "    c\n";
        }
    }
    out += "}\n";
    out
}

/// The C field's value, an expression of the core options `d`.
fn to_c_expr(f: &OptionField) -> String {
    match f.core {
        CoreMap::Same(path) => format!("d.{path}"),
        CoreMap::Convert { to_c, .. }
        | CoreMap::TryConvert { to_c, .. }
        | CoreMap::Part { to_c }
        | CoreMap::Manual { to_c, .. } => to_c.to_string(),
    }
}

/// `From<core> for C`.
fn from_core(s: &OptionStruct) -> String {
    let core = core_name(s);
    let mut out = format!("impl From<{core}> for {} {{\n", s.name);
    out += &format!("    fn from(d: {core}) -> Self {{\n        {} {{\n", s.name);
    for f in s.fields {
        out += &format!("            {}: {},\n", f.name, to_c_expr(f));
    }
    out += "        }\n    }\n}\n";
    out
}

/// Where a C field goes in the core struct: the core field, the tuple
/// element (if any) and the value, an expression of the C struct `o` (a
/// manual field's: the parameter of its name); `None` for a part of
/// another field's conversion.
fn core_part(f: &OptionField) -> Option<(&'static str, Option<usize>, String)> {
    Some(match f.core {
        CoreMap::Same(path) => match path.split_once('.') {
            Some((top, index)) => {
                let index = index.parse::<usize>().unwrap_or_else(|_| panic!("{SOURCE}: `{path}` is not `field.N`"));
                (top, Some(index), format!("o.{}", f.name))
            }
            None => (path, None, format!("o.{}", f.name)),
        },
        CoreMap::Convert { field, to_core, .. } => (field, None, to_core.to_string()),
        CoreMap::TryConvert { field, to_core, .. } => (field, None, format!("{to_core}?")),
        CoreMap::Manual { field, .. } => (field, None, field.to_string()),
        CoreMap::Part { .. } => return None,
    })
}

/// The core struct's fields and their values, in the order the table
/// first names them; the elements of a tuple field make one tuple.
fn core_fields(s: &OptionStruct) -> Vec<(&'static str, String)> {
    let parts: Vec<(&'static str, Option<usize>, String)> = s.fields.iter().filter_map(core_part).collect();
    let mut tops: Vec<&'static str> = Vec::new();
    for p in &parts {
        if !tops.contains(&p.0) {
            tops.push(p.0);
        }
    }
    let mut out = Vec::new();
    for top in tops {
        let mut mine: Vec<&(&'static str, Option<usize>, String)> = parts.iter().filter(|p| p.0 == top).collect();
        mine.sort_by_key(|p| p.1);
        let value = if mine.len() == 1 && mine[0].1.is_none() {
            mine[0].2.clone()
        } else {
            assert!(
                mine.iter().enumerate().all(|(i, p)| p.1 == Some(i)),
                "{SOURCE}: {}: the core field `{top}` takes one field or every tuple element 0, 1, ...",
                s.name
            );
            format!("({})", mine.iter().map(|p| p.2.as_str()).collect::<Vec<_>>().join(", "))
        };
        out.push((top, value));
    }
    out
}

/// The core struct's literal: its fields, one a line, indented.
fn core_body(s: &OptionStruct, indent: &str) -> String {
    core_fields(s).iter().map(|(k, v)| format!("{indent}{},\n", member(k, v))).collect()
}

/// `From<C> for core`, or `TryFrom` where a field's conversion checks.
fn into_core(s: &OptionStruct) -> String {
    let core = core_name(s);
    let c = s.name;
    let body = core_body(s, "            ");
    if s.fallible() {
        format!(
            "impl TryFrom<{c}> for {core} {{\n    type Error = Error;\n\n    fn try_from(o: {c}) -> Result<Self, Error> {{\n        Ok({core} {{\n{body}        }})\n    }}\n}}\n"
        )
    } else {
        format!("impl From<{c}> for {core} {{\n    fn from(o: {c}) -> Self {{\n        {core} {{\n{body}        }}\n    }}\n}}\n")
    }
}

/// `to_core`, for a struct with fields converted by hand: it takes their
/// core values and converts the other fields.
fn to_core(s: &OptionStruct) -> String {
    let core = core_name(s);
    let manual: Vec<(&str, &str)> = s
        .fields
        .iter()
        .filter_map(|f| match f.core {
            CoreMap::Manual { field, ty, .. } => Some((field, ty)),
            _ => None,
        })
        .collect();
    let params: String = manual.iter().map(|(name, ty)| format!(", {name}: {ty}")).collect();
    let names: Vec<String> = manual.iter().map(|(name, _)| format!("`{name}`")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (ret, open, close) = if s.fallible() {
        (format!("Result<{core}, Error>"), format!("Ok({core} {{"), "})")
    } else {
        (core.to_owned(), format!("{core} {{"), "}")
    };
    let mut out = format!("impl {} {{\n", s.name);
    out += &format!("    /// The core's options, given its {} as converted by hand.\n", sentence(&names));
    out += &format!("    pub fn to_core(self{params}) -> {ret} {{\n");
    out += "        let o = self;\n";
    out += &format!("        {open}\n{}        {close}\n    }}\n}}\n", core_body(s, "            "));
    out
}

/// `src/ffi/<area>/gen_options.rs`.
fn rust_file(area: &str) -> String {
    let structs: Vec<&OptionStruct> = OPTION_STRUCTS.iter().filter(|s| s.area == area).collect();
    let mut out = format!("//! Generated from {SOURCE} by {GENERATOR} (`make header`): do not edit.\n");
    out += &format!("//! The option structs of `fulmen/{area}.h`, each with its `*_default`\n");
    out += "//! functions and, where the core has an options type for it, its\n";
    out += "//! conversions to and from the core's options.\n";
    out += &uses(&structs);
    for s in structs {
        out += "\n";
        out += &c_struct(s);
        for d in s.defaults {
            out += "\n";
            out += &default_fn(s, d);
        }
        if s.core.is_none() {
            continue;
        }
        out += "\n";
        out += &from_core(s);
        out += "\n";
        out += &if s.has_manual() { to_core(s) } else { into_core(s) };
    }
    out
}

/// The Go field's type.
fn go_field_type(f: &OptionField) -> String {
    f.go_type.map_or_else(|| f.ty.go(), str::to_owned)
}

/// The Go function that converts from C: `sgdOptionsFromC` for
/// `fulmen_sgd_options`.
fn go_from_c_name(s: &OptionStruct) -> String {
    let stem = s.name.strip_prefix("fulmen_").and_then(|n| n.strip_suffix("_options")).unwrap_or(s.name);
    let mut out = String::new();
    for (i, word) in stem.split('_').enumerate() {
        let mut chars = word.chars();
        match chars.next() {
            Some(first) if i > 0 => {
                out.push(first.to_ascii_uppercase());
                out.push_str(chars.as_str());
            }
            _ => out.push_str(word),
        }
    }
    out + "OptionsFromC"
}

/// The C names of the fields the Go conversions leave to the caller.
fn go_by_hand(s: &OptionStruct) -> Vec<&'static str> {
    s.fields.iter().filter(|f| f.go_by_hand()).map(|f| f.name).collect()
}

fn go_struct(s: &OptionStruct) -> String {
    let mut out = doc(s.go_doc, "", "//");
    out += &format!("type {} struct {{\n", s.go);
    for f in s.fields.iter().filter(|f| !f.go.is_empty()) {
        out += &doc(f.go_doc, "\t", "//");
        out += &format!("\t{} {}\n", f.go, go_field_type(f));
    }
    out += "}\n";
    out
}

fn go_default(s: &OptionStruct, d: &DefaultFn) -> String {
    let params: Vec<String> =
        d.params.iter().map(|p| format!("{} {}", p.go, p.go_type.map_or_else(|| p.ty.go(), str::to_owned))).collect();
    let args: Vec<String> = d.params.iter().map(|p| format!("{}({})", p.ty.cgo(), p.go)).collect();
    doc(d.go_doc, "", "//")
        + &format!(
            "func {}({}) {} {{\n\treturn {}(C.{}({}))\n}}\n",
            d.go,
            params.join(", "),
            s.go,
            go_from_c_name(s),
            d.name,
            args.join(", ")
        )
}

/// One field's copy in a Go conversion: `to.<to_field> = <conv>(from.<from_field>)`,
/// element by element for an array.
fn go_copy(out: &mut String, f: &OptionField, to: &str, from: &str, to_c: bool) {
    let (dst, src) = if to_c { (f.name, f.go) } else { (f.go, f.name) };
    match f.ty {
        CType::Array(of, _) => {
            let conv = if to_c { of.cgo() } else { of.go() };
            let range = if to_c { format!("{from}.{src}") } else { format!("{to}.{dst}") };
            *out += &format!("\tfor i := range {range} {{\n\t\t{to}.{dst}[i] = {conv}({from}.{src}[i])\n\t}}\n");
        }
        _ => {
            let conv = if to_c { f.ty.cgo() } else { go_field_type(f) };
            *out += &format!("\t{to}.{dst} = {conv}({from}.{src})\n");
        }
    }
}

fn go_from_c(s: &OptionStruct) -> String {
    let name = go_from_c_name(s);
    let by_hand = go_by_hand(s);
    let mut out = if by_hand.is_empty() {
        format!("// {name} is the Go form of a C {}.\n", s.name)
    } else {
        format!("// {name} is the Go form of a C {}, leaving out\n// {}.\n", s.name, sentence(&by_hand))
    };
    out += &format!("func {name}(c C.{}) (o {}) {{\n", s.name, s.go);
    for f in s.fields.iter().filter(|f| !f.go_by_hand()) {
        go_copy(&mut out, f, "o", "c", false);
    }
    out += "\treturn o\n}\n";
    out
}

fn go_to_c(s: &OptionStruct) -> String {
    let by_hand = go_by_hand(s);
    let mut out = if by_hand.is_empty() {
        format!("// c is the C form of the options, a {}.\n", s.name)
    } else {
        format!("// c is the C form of the options, a {}; the caller\n// sets {}.\n", s.name, sentence(&by_hand))
    };
    out += &format!("func (o {}) c() (c C.{}) {{\n", s.go, s.name);
    for f in s.fields.iter().filter(|f| !f.go_by_hand()) {
        go_copy(&mut out, f, "c", "o", true);
    }
    out += "\treturn c\n}\n";
    out
}

/// `bindings/go/options_gen.go`.
fn go_file() -> String {
    let mut out = format!(
        "// Code generated by {GENERATOR} from {SOURCE}. DO NOT EDIT.\n\npackage fulmen\n\n/*\n#include <fulmen.h>\n*/\nimport \"C\"\n"
    );
    for s in OPTION_STRUCTS {
        out += "\n";
        out += &go_struct(s);
        for d in s.defaults.iter().filter(|d| !d.go.is_empty()) {
            out += "\n";
            out += &go_default(s, d);
        }
        out += "\n";
        out += &go_from_c(s);
        out += "\n";
        out += &go_to_c(s);
    }
    out
}

/// Every file the table generates: `(path under the repository, text)`.
pub fn generated_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> =
        areas().into_iter().map(|a| (format!("src/ffi/{a}/gen_options.rs"), rust_file(a))).collect();
    files.push((GO.to_owned(), go_file()));
    files
}

/// The line each area's `mod.rs` needs: `(path, line)`.
pub fn module_lines() -> Vec<(String, String)> {
    areas().into_iter().map(|a| (format!("src/ffi/{a}/mod.rs"), "pub mod gen_options;".to_owned())).collect()
}

/// What a struct's `*_default` functions get wrong: with core options,
/// a function without them or a field set twice or unknown; without, a
/// function with them, one that does not set every field in order, or a
/// field that names a place in the core.
fn default_problems(s: &OptionStruct) -> Vec<String> {
    let mut out = Vec::new();
    let fields: Vec<&str> = s.fields.iter().map(|f| f.name).collect();
    for d in s.defaults {
        let set: Vec<&str> = d.set.iter().map(|(name, _)| *name).collect();
        match (s.core, d.core) {
            (Some(_), Some(_)) => {
                let mut seen = BTreeSet::new();
                for name in &set {
                    if !fields.contains(name) || !seen.insert(*name) {
                        out.push(format!("{}: `{name}` is not a field, or is set twice", d.name));
                    }
                }
            }
            (None, None) if set == fields => {}
            (None, None) => out.push(format!("{}: without core options it sets every field, in order", d.name)),
            _ => out.push(format!("{}: core options in the function but not in {}, or the reverse", d.name, s.name)),
        }
    }
    if s.core.is_none() {
        for f in s.fields.iter().filter(|f| f.core != CoreMap::Same(f.name)) {
            out.push(format!("{}.{}: a place in the core, but {} has no core options", s.name, f.name, s.name));
        }
    }
    out
}

/// What the table gets wrong: a name given twice (a struct, a C or Go
/// field of one struct, a Go type, a C or Go function), a name that does
/// not follow the C API's pattern, a pointer field without its Go type,
/// or a `*_default` function that does not fit its struct.
pub fn problems() -> Vec<String> {
    let mut out = Vec::new();
    let mut twice = |what: &str, names: Vec<&str>| {
        let mut seen = BTreeSet::new();
        for n in names.into_iter().filter(|n| !n.is_empty()) {
            if !seen.insert(n) {
                out.push(format!("{what} `{n}` appears twice"));
            }
        }
    };
    twice("struct", OPTION_STRUCTS.iter().map(|s| s.name).collect());
    twice("Go type", OPTION_STRUCTS.iter().map(|s| s.go).collect());
    twice("function", OPTION_STRUCTS.iter().flat_map(|s| s.defaults.iter().map(|d| d.name)).collect());
    twice("Go function", OPTION_STRUCTS.iter().flat_map(|s| s.defaults.iter().map(|d| d.go)).collect());
    for s in OPTION_STRUCTS {
        twice(s.name, s.fields.iter().map(|f| f.name).collect());
        twice(s.go, s.fields.iter().map(|f| f.go).collect());
    }
    for s in OPTION_STRUCTS {
        if !(s.name.starts_with("fulmen_") && s.name.ends_with("_options")) {
            out.push(format!("struct `{}` is not named fulmen_<what>_options", s.name));
        }
        for d in s.defaults {
            if !(d.name.starts_with("fulmen_") && d.name.ends_with("_options_default")) {
                out.push(format!("function `{}` is not named fulmen_<what>_options_default", d.name));
            }
        }
        for f in s.fields.iter().filter(|f| f.ty.is_pointer() && !f.go.is_empty() && f.go_type.is_none()) {
            out.push(format!("{}.{}: a pointer with a Go field names its Go type", s.name, f.name));
        }
        out.extend(default_problems(s));
    }
    out
}

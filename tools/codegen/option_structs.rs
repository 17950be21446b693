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
use fulmen::ffi::options_table::{CoreMap, DefaultFn, OptionField, OptionStruct, OPTION_STRUCTS};
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

/// The core type's name (the last part of its path).
fn core_name(s: &OptionStruct) -> &'static str {
    s.core.rsplit("::").next().unwrap_or(s.core)
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
    for s in structs {
        paths.push(s.core);
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

/// A `*_default` function: its core options, converted.
fn default_fn(s: &OptionStruct, d: &DefaultFn) -> String {
    let params: Vec<String> = d.params.iter().map(|p| format!("{}: {}", p.name, p.ty.rust())).collect();
    let mut out = doc(d.doc, "", "///");
    out += "#[no_mangle]\n";
    out += &format!("pub extern \"C\" fn {}({}) -> {} {{\n", d.name, params.join(", "), s.name);
    out += &format!("    {}.into()\n}}\n", d.core);
    out
}

/// The C field's value, an expression of the core options `d`.
fn to_c_expr(f: &OptionField) -> String {
    match f.core {
        CoreMap::Same(path) => format!("d.{path}"),
        CoreMap::Convert { to_c, .. } | CoreMap::TryConvert { to_c, .. } => to_c.to_string(),
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
/// element (if any) and the value, an expression of the C struct `o`.
fn core_part(f: &OptionField) -> (&'static str, Option<usize>, String) {
    match f.core {
        CoreMap::Same(path) => match path.split_once('.') {
            Some((top, index)) => {
                let index = index.parse::<usize>().unwrap_or_else(|_| panic!("{SOURCE}: `{path}` is not `field.N`"));
                (top, Some(index), format!("o.{}", f.name))
            }
            None => (path, None, format!("o.{}", f.name)),
        },
        CoreMap::Convert { field, to_core, .. } => (field, None, to_core.to_string()),
        CoreMap::TryConvert { field, to_core, .. } => (field, None, format!("{to_core}?")),
    }
}

/// The core struct's fields and their values, in the order the table
/// first names them; the elements of a tuple field make one tuple.
fn core_fields(s: &OptionStruct) -> Vec<(&'static str, String)> {
    let parts: Vec<(&'static str, Option<usize>, String)> = s.fields.iter().map(core_part).collect();
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

/// `From<C> for core`, or `TryFrom` where a field's conversion checks.
fn into_core(s: &OptionStruct) -> String {
    let core = core_name(s);
    let c = s.name;
    let body: String = core_fields(s).iter().map(|(k, v)| format!("            {k}: {v},\n")).collect();
    if s.fallible() {
        format!(
            "impl TryFrom<{c}> for {core} {{\n    type Error = Error;\n\n    fn try_from(o: {c}) -> Result<Self, Error> {{\n        Ok({core} {{\n{body}        }})\n    }}\n}}\n"
        )
    } else {
        format!("impl From<{c}> for {core} {{\n    fn from(o: {c}) -> Self {{\n        {core} {{\n{body}        }}\n    }}\n}}\n")
    }
}

/// `src/ffi/<area>/gen_options.rs`.
fn rust_file(area: &str) -> String {
    let structs: Vec<&OptionStruct> = OPTION_STRUCTS.iter().filter(|s| s.area == area).collect();
    let mut out = format!("//! Generated from {SOURCE} by {GENERATOR} (`make header`): do not edit.\n");
    out += &format!("//! The option structs of `fulmen/{area}.h`, each with its `*_default`\n");
    out += "//! functions and its conversions to and from the core's options.\n";
    out += &uses(&structs);
    for s in structs {
        out += "\n";
        out += &c_struct(s);
        for d in s.defaults {
            out += "\n";
            out += &default_fn(s, d);
        }
        out += "\n";
        out += &from_core(s);
        out += "\n";
        out += &into_core(s);
    }
    out
}

/// The Go field's type.
fn go_field_type(f: &OptionField) -> &'static str {
    f.go_type.unwrap_or_else(|| f.ty.go())
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

fn go_struct(s: &OptionStruct) -> String {
    let mut out = doc(s.go_doc, "", "//");
    out += &format!("type {} struct {{\n", s.go);
    for f in s.fields {
        out += &doc(f.go_doc, "\t", "//");
        out += &format!("\t{} {}\n", f.go, go_field_type(f));
    }
    out += "}\n";
    out
}

fn go_default(s: &OptionStruct, d: &DefaultFn) -> String {
    let params: Vec<String> = d.params.iter().map(|p| format!("{} {}", p.go, p.ty.go())).collect();
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

fn go_from_c(s: &OptionStruct) -> String {
    let name = go_from_c_name(s);
    let mut out = format!("// {name} is the Go form of a C {}.\n", s.name);
    out += &format!("func {name}(c C.{}) (o {}) {{\n", s.name, s.go);
    for f in s.fields {
        out += &format!("\to.{} = {}(c.{})\n", f.go, go_field_type(f), f.name);
    }
    out += "\treturn o\n}\n";
    out
}

fn go_to_c(s: &OptionStruct) -> String {
    let mut out = format!("// c is the C form of the options, a {}.\n", s.name);
    out += &format!("func (o {}) c() (c C.{}) {{\n", s.go, s.name);
    for f in s.fields {
        out += &format!("\tc.{} = {}(o.{})\n", f.name, f.ty.cgo(), f.go);
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
        for d in s.defaults {
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

/// The C struct names of the table.
pub fn struct_names() -> Vec<&'static str> {
    OPTION_STRUCTS.iter().map(|s| s.name).collect()
}

/// What the table gets wrong: a name given twice (a struct, a C or Go
/// field of one struct, a Go type, a C or Go function) or a name that does
/// not follow the C API's pattern.
pub fn problems() -> Vec<String> {
    let mut out = Vec::new();
    let mut twice = |what: &str, names: Vec<&str>| {
        let mut seen = BTreeSet::new();
        for n in names {
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
    }
    out
}

//! The trainer's options are written once, in `src/trainer/option_table.rs`.
//! This generator writes from that table the key list of
//! `fulmen_trainer_options_set`'s comment (then copied into
//! fulmen/trainer.h by cbindgen), the typed setters of the C++ and Go
//! bindings, and a test in each binding that calls every setter.
//! `tests/options_drift.rs` fails when a committed copy differs; `make
//! header` rewrites them.
use fulmen::trainer::option_table::{OptionKind, TrainerOption, TRAINER_OPTIONS};
use std::path::Path;

/// The table the code comes from.
pub const SOURCE: &str = "src/trainer/option_table.rs";
const GENERATOR: &str = "tools/codegen/options.rs";
const FFI: &str = "src/ffi/trainer/runs.rs";
const CPP: &str = "bindings/cpp/include/fulmen/trainer_options.hpp";
const CPP_TEST: &str = "bindings/cpp/tests/test_trainer_options.cpp";
const GO: &str = "bindings/go/trainer_options_gen.go";
const GO_TEST: &str = "bindings/go/trainer_options_gen_test.go";
const BEGIN: &str = "// Generated from src/trainer/option_table.rs by tools/codegen/options.rs: begin";
const END: &str = "// Generated: end";

/// Keys whose Go `Set<Name>` already takes a handle; their text setter is
/// `Set<Name>Name`.
const GO_HANDLE_SETTERS: &[&str] = &["accelerator", "precision", "strategy"];

/// Words spelled as Go initialisms in method names.
const GO_INITIALISMS: &[(&str, &str)] = &[("ddp", "DDP"), ("n", "N")];

/// Wraps `text` into lines of at most `width` characters, the first
/// starting with `first`, the others with `rest`.
fn wrap(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.len() + 1 + word.len() > width {
            lines.push(line);
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// "`key` (kind; default d): doc."
fn summary(o: &TrainerOption) -> String {
    format!("`{}` ({}; default {}): {}.", o.key, o.kind.describe(), o.default, o.doc)
}

fn ffi_block() -> String {
    let mut out = String::new();
    for o in TRAINER_OPTIONS {
        for line in wrap(&summary(o), 76, "/// - ", "///   ") {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

fn camel(key: &str) -> String {
    key.split('_')
        .map(|w| match GO_INITIALISMS.iter().find(|(k, _)| *k == w) {
            Some((_, up)) => up.to_string(),
            None => {
                let mut c = w.chars();
                c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
            }
        })
        .collect()
}

fn cpp_doc(o: &TrainerOption, indent: &str) -> String {
    wrap(&summary(o), 100, &format!("{indent}/// "), &format!("{indent}/// ")).join("\n") + "\n"
}

/// One setter (lvalue and rvalue forms) for `o`, with its doc comment.
fn cpp_setter(o: &TrainerOption) -> String {
    let k = o.key;
    let (template, params, body) = match o.kind {
        OptionKind::Bool => ("", "bool v".to_string(), "v"),
        OptionKind::Int => ("", "int64_t v".to_string(), "v"),
        OptionKind::OptionalInt => ("", "std::optional<int64_t> v".to_string(), "v"),
        OptionKind::OptionalNumber => ("", "std::optional<double> v".to_string(), "v"),
        OptionKind::CountOrFraction => (
            "template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>\n    ",
            "N v".to_string(),
            "v",
        ),
        OptionKind::BoolOrCount => {
            ("template <class N, std::enable_if_t<std::is_integral_v<N>, int> = 0>\n    ", "N v".to_string(), "v")
        }
        OptionKind::Duration | OptionKind::OptionalDuration => (
            "template <class Rep, class Period>\n    ",
            "std::chrono::duration<Rep, Period> v".to_string(),
            "seconds(v)",
        ),
        OptionKind::Text => ("", "std::string_view v".to_string(), "v"),
        // A template, so that a string literal does not convert to bool.
        OptionKind::BoolOrText => {
            ("template <class B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>\n    ", "B v".to_string(), "v")
        }
    };
    let mut s = cpp_doc(o, "    ");
    s += &format!("    {template}Self& {k}({params}) & {{ return put(\"{k}\", {body}); }}\n");
    s += &format!("    /// Sets `{k}` on a temporary and passes it on.\n");
    s += &format!("    {template}Self&& {k}({params}) && {{ return std::move(put(\"{k}\", {body})); }}\n");
    if o.kind == OptionKind::BoolOrText {
        s += &format!("    /// Sets `{k}` from text.\n");
        s += &format!("    Self& {k}(std::string_view v) & {{ return put(\"{k}\", v); }}\n");
        s += &format!("    /// Sets `{k}` from text on a temporary and passes it on.\n");
        s += &format!("    Self&& {k}(std::string_view v) && {{ return std::move(put(\"{k}\", v)); }}\n");
    }
    if o.kind == OptionKind::OptionalDuration {
        s += &format!("    /// Unsets `{k}` (\"none\").\n");
        s += &format!("    Self& {k}(std::nullopt_t) & {{ return put(\"{k}\", \"none\"); }}\n");
        s += &format!("    /// Unsets `{k}` on a temporary and passes it on.\n");
        s += &format!("    Self&& {k}(std::nullopt_t) && {{ return std::move(put(\"{k}\", \"none\")); }}\n");
    }
    s
}

fn cpp_header() -> String {
    let mut s = format!(
        "// Generated from {SOURCE} by {GENERATOR}; do not edit (regenerate with `make header`).\n\
#ifndef FULMEN_TRAINER_OPTIONS_HPP\n\
#define FULMEN_TRAINER_OPTIONS_HPP\n\
\n\
#include <chrono>\n\
#include <cstdint>\n\
#include <optional>\n\
#include <string_view>\n\
#include <type_traits>\n\
#include <utility>\n\
\n\
namespace fulmen::detail {{\n\
\n\
/// A typed setter for every trainer option, mixed into fulmen::TrainerOptions:\n\
/// `opts.max_epochs(5).limit_train_batches(0.25).precision(\"bf16-mixed\")`.\n\
/// Each sets the option of its name as fulmen_trainer_options_set does and\n\
/// chains; a bad value throws fulmen::Error (FULMEN_CODE_INVALID_ARGUMENT) and\n\
/// leaves the options unchanged. Counts and fractions follow the value's C++\n\
/// type: an integer is a count of batches, a floating value a fraction.\n\
template <class Self>\n\
class TrainerOptionSetters {{\n\
public:\n"
    );
    for (i, o) in TRAINER_OPTIONS.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        s += &cpp_setter(o);
    }
    s += "\nprivate:\n";
    s += "    Self& self() noexcept { return static_cast<Self&>(*this); }\n";
    s += "    template <class V>\n";
    s += "    Self& put(const char* key, const V& v) { return self().set(key, v); }\n";
    s += "    template <class V>\n";
    s += "    Self& put(const char* key, const std::optional<V>& v) { return v ? self().set(key, *v) : self().set(key, \"none\"); }\n";
    s += "    template <class Rep, class Period>\n";
    s += "    static double seconds(std::chrono::duration<Rep, Period> d) { return std::chrono::duration<double>(d).count(); }\n";
    s += "};\n\n}  // namespace fulmen::detail\n\n#endif  // FULMEN_TRAINER_OPTIONS_HPP\n";
    s
}

/// A C++ expression calling the setter of `o` with its default.
fn cpp_default_calls(o: &TrainerOption) -> Vec<String> {
    let k = o.key;
    let d = o.default;
    let values: Vec<String> = match o.kind {
        OptionKind::Bool | OptionKind::Int | OptionKind::CountOrFraction => vec![d.into()],
        OptionKind::BoolOrCount => vec!["0".into(), d.into()],
        OptionKind::OptionalInt | OptionKind::OptionalNumber if d == "none" => vec!["1".into(), "std::nullopt".into()],
        OptionKind::OptionalInt | OptionKind::OptionalNumber => vec![d.into()],
        OptionKind::Duration => vec![format!("std::chrono::seconds({d})")],
        OptionKind::OptionalDuration => vec!["std::chrono::milliseconds(90000)".into(), "std::nullopt".into()],
        OptionKind::Text => vec![format!("\"{d}\"")],
        OptionKind::BoolOrText => vec![format!("\"{}\"", text_sample(o)), bool_or_text(d)],
    };
    values.into_iter().map(|v| format!("o.{k}({v});")).collect()
}

/// A text value the text setter of a bool-or-text option takes, for the
/// generated tests.
fn text_sample(o: &TrainerOption) -> &'static str {
    match o.key {
        "logger" => "csv",
        "deterministic" => "warn",
        _ => "true",
    }
}

/// A bool-or-text default as a C++ / Go argument: a bool literal, or a
/// quoted string.
fn bool_or_text(d: &str) -> String {
    if d == "true" || d == "false" {
        d.into()
    } else {
        format!("\"{d}\"")
    }
}

fn cpp_test() -> String {
    let mut s = format!(
        "// Generated from {SOURCE} by {GENERATOR}; do not edit (regenerate with `make header`).\n\
// Calls every typed trainer-option setter with the option's default (and,\n\
// for optional values, with a value first), then builds a trainer.\n\
#include <fulmen/fulmen.hpp>\n\
#include <gtest/gtest.h>\n\
\n\
#include <chrono>\n\
#include <optional>\n\
\n\
TEST(TrainerOptionSetters, EverySetterTakesItsDefault) {{\n\
    fulmen::TrainerOptions o;\n"
    );
    for o in TRAINER_OPTIONS {
        for call in cpp_default_calls(o) {
            s += &format!("    {call}\n");
        }
    }
    s += "    fulmen::Trainer trainer(o);\n    EXPECT_TRUE(static_cast<bool>(trainer));\n}\n";
    s
}

fn go_name(o: &TrainerOption) -> String {
    let base = camel(o.key);
    if GO_HANDLE_SETTERS.contains(&o.key) {
        format!("Set{base}Name")
    } else {
        format!("Set{base}")
    }
}

fn go_doc(name: &str, o: &TrainerOption, extra: &str) -> String {
    let text = format!("{name} sets {}{extra}", summary(o));
    wrap(&text, 78, "// ", "// ").join("\n") + "\n"
}

fn go_setters(o: &TrainerOption) -> String {
    let k = o.key;
    let name = go_name(o);
    let unset = " Set(key, \"none\") unsets it.";
    match o.kind {
        OptionKind::Bool => {
            go_doc(&name, o, "")
                + &format!("func (o *TrainerOptions) {name}(v bool) error {{\n\treturn o.SetBool(\"{k}\", v)\n}}\n")
        }
        OptionKind::Int => {
            go_doc(&name, o, "")
                + &format!("func (o *TrainerOptions) {name}(v int64) error {{\n\treturn o.SetInt(\"{k}\", v)\n}}\n")
        }
        OptionKind::OptionalInt => {
            go_doc(&name, o, unset)
                + &format!("func (o *TrainerOptions) {name}(v int64) error {{\n\treturn o.SetInt(\"{k}\", v)\n}}\n")
        }
        OptionKind::OptionalNumber => {
            go_doc(&name, o, unset)
                + &format!("func (o *TrainerOptions) {name}(v float64) error {{\n\treturn o.SetFloat(\"{k}\", v)\n}}\n")
        }
        OptionKind::CountOrFraction => {
            go_doc(&name, o, " This one sets a count of batches.")
                + &format!(
                    "func (o *TrainerOptions) {name}(count int64) error {{\n\treturn o.SetInt(\"{k}\", count)\n}}\n\n"
                )
                + &go_doc(&format!("{name}Fraction"), o, " This one sets a fraction of the batches, in [0, 1].")
                + &format!(
                    "func (o *TrainerOptions) {name}Fraction(f float64) error {{\n\treturn o.SetFloat(\"{k}\", f)\n}}\n"
                )
        }
        OptionKind::BoolOrCount => {
            go_doc(&name, o, "")
                + &format!("func (o *TrainerOptions) {name}(on bool) error {{\n\treturn o.SetBool(\"{k}\", on)\n}}\n\n")
                + &go_doc(&format!("{name}Batches"), o, " This one sets the batch count.")
                + &format!(
                    "func (o *TrainerOptions) {name}Batches(n int64) error {{\n\treturn o.SetInt(\"{k}\", n)\n}}\n"
                )
        }
        OptionKind::Duration | OptionKind::OptionalDuration => {
            let extra = if o.kind == OptionKind::OptionalDuration { unset } else { "" };
            go_doc(&name, o, extra)
                + &format!(
                    "func (o *TrainerOptions) {name}(d time.Duration) error {{\n\treturn o.SetFloat(\"{k}\", d.Seconds())\n}}\n"
                )
        }
        OptionKind::Text => {
            go_doc(&name, o, "")
                + &format!("func (o *TrainerOptions) {name}(v string) error {{\n\treturn o.Set(\"{k}\", v)\n}}\n")
        }
        OptionKind::BoolOrText => {
            go_doc(&name, o, "")
                + &format!("func (o *TrainerOptions) {name}(on bool) error {{\n\treturn o.SetBool(\"{k}\", on)\n}}\n\n")
                + &go_doc(&format!("{name}Text"), o, " This one sets the text form.")
                + &format!("func (o *TrainerOptions) {name}Text(v string) error {{\n\treturn o.Set(\"{k}\", v)\n}}\n")
        }
    }
}

fn go_file() -> String {
    let mut s = format!(
        "// Code generated by {GENERATOR} from {SOURCE}. DO NOT EDIT.\n\n\
package fulmen\n\nimport \"time\"\n"
    );
    for o in TRAINER_OPTIONS {
        s.push('\n');
        s += &go_setters(o);
    }
    s
}

/// Go calls of every setter of `o`: a value first where one is optional,
/// then the default.
fn go_default_calls(o: &TrainerOption) -> Vec<String> {
    let name = go_name(o);
    let d = o.default;
    match o.kind {
        OptionKind::Bool | OptionKind::Int => vec![format!("o.{name}({d})")],
        OptionKind::Text => vec![format!("o.{name}(\"{d}\")")],
        OptionKind::BoolOrText if d == "true" || d == "false" => {
            vec![format!("o.{name}Text(\"{}\")", text_sample(o)), format!("o.{name}({d})")]
        }
        OptionKind::BoolOrText => {
            vec![format!("o.{name}Text(\"{}\")", text_sample(o)), format!("o.{name}Text(\"{d}\")")]
        }
        OptionKind::OptionalInt | OptionKind::OptionalNumber if d == "none" => {
            vec![format!("o.{name}(1)"), format!("o.Set(\"{}\", \"none\")", o.key)]
        }
        OptionKind::OptionalInt | OptionKind::OptionalNumber => vec![format!("o.{name}({d})")],
        OptionKind::CountOrFraction if d.contains('.') => {
            vec![format!("o.{name}(1)"), format!("o.{name}Fraction({d})")]
        }
        OptionKind::CountOrFraction => vec![format!("o.{name}Fraction(0.5)"), format!("o.{name}({d})")],
        OptionKind::BoolOrCount => vec![format!("o.{name}Batches(0)"), format!("o.{name}({d})")],
        OptionKind::Duration => vec![format!("o.{name}({d} * time.Second)")],
        OptionKind::OptionalDuration => {
            vec![format!("o.{name}(90 * time.Second)"), format!("o.Set(\"{}\", \"none\")", o.key)]
        }
    }
}

fn go_test() -> String {
    let mut s = format!(
        "// Code generated by {GENERATOR} from {SOURCE}. DO NOT EDIT.\n\n\
package fulmen\n\n\
import (\n\t\"testing\"\n\t\"time\"\n)\n\n\
// TestEveryTrainerOptionSetter calls every typed setter with its option's\n\
// default (and, for optional values, with a value first), then builds a\n\
// trainer.\n\
func TestEveryTrainerOptionSetter(t *testing.T) {{\n\
\to, err := NewTrainerOptions()\n\
\tif err != nil {{\n\t\tt.Fatal(err)\n\t}}\n\
\tdefer o.Close()\n\
\tcalls := []struct {{\n\t\tcall string\n\t\terr  error\n\t}}{{\n"
    );
    for o in TRAINER_OPTIONS {
        for call in go_default_calls(o) {
            s += &format!("\t\t{{{:?}, {call}}},\n", call);
        }
    }
    s += "\t}\n\tfor _, c := range calls {\n\t\tif c.err != nil {\n\t\t\tt.Errorf(\"%s: %v\", c.call, c.err)\n\t\t}\n\t}\n";
    s += "\ttr, err := NewTrainer(o)\n\tif err != nil {\n\t\tt.Fatal(err)\n\t}\n\ttr.Close()\n}\n";
    s
}

/// `src/ffi/trainer/runs.rs` with the generated block between its markers.
fn ffi_source(current: &str) -> String {
    let begin = current.find(BEGIN).expect("begin marker in src/ffi/trainer/runs.rs") + BEGIN.len() + 1;
    let end = current[begin..].find(END).expect("end marker in src/ffi/trainer/runs.rs") + begin;
    format!("{}{}{}", &current[..begin], ffi_block(), &current[end..])
}

/// Every file the table generates: `(path under the repository, text)`;
/// the C part is the block between the markers of `src/ffi/trainer/runs.rs`
/// as it is under `root`.
pub fn generated_files(root: &Path) -> Vec<(String, String)> {
    let ffi = std::fs::read_to_string(root.join(FFI)).expect("reading src/ffi/trainer/runs.rs");
    [(FFI, ffi_source(&ffi)), (CPP, cpp_header()), (CPP_TEST, cpp_test()), (GO, go_file()), (GO_TEST, go_test())]
        .into_iter()
        .map(|(rel, text)| (rel.to_owned(), text))
        .collect()
}

/// The keys of the table, each documented in the header as `` `key` (``.
pub fn keys() -> Vec<&'static str> {
    TRAINER_OPTIONS.iter().map(|o| o.key).collect()
}

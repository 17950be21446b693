//! The C API's headers: the one text cbindgen generates from the Rust
//! sources, split into one header per area (`include/fulmen/<area>.h`,
//! each item in the area of the Rust file that defines it) under the
//! umbrella `include/fulmen.h`. Used by `tests/header_drift.rs`, which
//! writes the headers (`make header`) or checks the committed ones, and by
//! the tests that read the API's text.
//!
//! To add a function or a constant: write it in the Rust file of its area
//! (the folder under `src/ffi/`); an option struct is an entry of
//! `src/ffi/options_table.rs` instead. Nothing here changes. A
//! new source file under `src/ffi/` joins the area of its folder; a core
//! file that defines a C constant or enum is placed by `CORE_AREAS`.
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// One header of the C API.
pub struct Area {
    /// The header's name: `include/fulmen/<name>.h`, paired with the C++
    /// binding's `<fulmen/<name>.hpp>` where one exists.
    pub name: &'static str,
    /// What the header declares, its `\file` comment's first line.
    pub title: &'static str,
}

/// The areas, each after every area its types need (the umbrella includes
/// them in this order). Their sources: `src/ffi/<name>/`.
pub const AREAS: &[Area] = &[
    Area { name: "base", title: "Conventions, errors, the runtime (version, seeds, threads) and callbacks' threads." },
    Area { name: "tensor", title: "Tensors: creation, queries, indexing, in-place updates, autograd." },
    Area { name: "tensor_ops", title: "Tensor operations: arithmetic, reductions, shapes, selection, activations." },
    Area { name: "losses", title: "Loss functions on tensors (torch.nn.functional's)." },
    Area { name: "data", title: "Datasets, loaders, batches and feature scaling." },
    Area { name: "value", title: "Values that TorchScript and exported methods take and return." },
    Area { name: "nn", title: "Models: layers, containers, host modules, initialisation, state." },
    Area { name: "script", title: "TorchScript and torch.export models, compiled steps, moves and casts." },
    Area {
        name: "flops",
        title: "FLOP counting (PyTorch's FlopCounterMode): measurements, counts by module, the host's formulas.",
    },
    Area { name: "optim", title: "Optimizers (torch.optim) and their parameter groups." },
    Area { name: "schedulers", title: "Learning-rate schedulers (torch.optim.lr_scheduler)." },
    Area { name: "metrics", title: "Metrics that accumulate over an epoch (torchmetrics')." },
    Area { name: "module", title: "The LightningModule as a vtable: steps, their context, manual optimization." },
    Area { name: "devices", title: "Devices and accelerators, built-in and custom (C vtables)." },
    Area { name: "distributed", title: "Distributed jobs: joining, collectives, DDP, vendors' collectives." },
    Area {
        name: "trainer",
        title: "The Trainer: options, precision, strategies, fit / validate / test / predict, tuning.",
    },
    Area {
        name: "after_run",
        title: "What the trainer knows: after a run (save_checkpoint, metrics, validate / test results), from hooks.",
    },
    Area { name: "callbacks", title: "Hooks and callbacks: built-in callbacks and host callbacks." },
    Area {
        name: "prediction",
        title: "Prediction writers (Lightning's BasePredictionWriter): tensors, or whole predictions as values.",
    },
    Area {
        name: "callback_list",
        title: "configure_callbacks: the callbacks a LightningModule adds, host and built-in, replacing the trainer's.",
    },
    Area {
        name: "loggers",
        title: "Loggers: CSV, TensorBoard, MLflow, W&B and Comet loggers (handles), host loggers, media from hooks.",
    },
];

/// The area of each core source (under `src/`) that defines a constant or
/// an enum of the C API; the longest matching prefix wins.
pub const CORE_AREAS: &[(&str, &str)] = &[
    ("error.rs", "base"),
    ("tensor/ops/loss.rs", "losses"),
    ("tensor/", "tensor"),
    ("data/", "data"),
    ("nn/init_fns.rs", "nn"),
    ("nn/safetensors_io.rs", "nn"),
    ("nn/", "value"),
    ("optim/scheduler/", "schedulers"),
    ("metrics/", "metrics"),
    ("accelerators/", "devices"),
    ("distributed/", "distributed"),
    ("checkpoint/", "trainer"),
    ("trainer/context.rs", "module"),
    ("trainer/hooks.rs", "callbacks"),
    ("trainer/", "trainer"),
    ("callbacks/", "callbacks"),
];

/// One declaration of the generated text: its doc comment and its C.
struct Item {
    name: String,
    text: String,
    function: bool,
    /// A struct type: other headers may point to it after a forward
    /// declaration, without including its header.
    is_struct: bool,
}

/// The generated text taken apart.
struct Parsed {
    /// The conventions comment cbindgen writes first.
    preamble: String,
    /// The `#define`s after the system includes (version, SONAME).
    after_includes: String,
    items: Vec<Item>,
}

fn is_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("/**") || t.starts_with('*')
}

fn blocks(lines: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    for line in lines {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                out.push(cur.join("\n"));
                cur.clear();
            }
        } else {
            cur.push(line);
        }
    }
    if !cur.is_empty() {
        out.push(cur.join("\n"));
    }
    out
}

fn first_word(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The C name a declaration block declares.
fn declared_name(block: &str) -> Result<String, String> {
    let decl = block.lines().find(|l| !is_comment(l)).ok_or_else(|| format!("a block with no declaration: {block}"))?;
    let name = if let Some(rest) = decl.strip_prefix("#define ") {
        first_word(rest)
    } else if let Some(at) = decl.find("(*") {
        first_word(&decl[at + 2..])
    } else if let Some(rest) = decl.strip_prefix("typedef struct ").or_else(|| decl.strip_prefix("typedef enum ")) {
        first_word(rest)
    } else if let Some(at) = decl.find('(') {
        let head = decl[..at].trim_end();
        head.rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("").to_owned()
    } else {
        String::new()
    };
    if name.is_empty() {
        return Err(format!("cannot tell what this declares: {decl}"));
    }
    Ok(name)
}

fn line_index(lines: &[&str], from: usize, what: &str, pred: impl Fn(usize) -> bool) -> Result<usize, String> {
    (from..lines.len()).find(|&i| pred(i)).ok_or_else(|| format!("the generated header has no {what}"))
}

fn parse(full: &str) -> Result<Parsed, String> {
    let lines: Vec<&str> = full.lines().collect();
    let end_preamble = line_index(&lines, 0, "opening comment", |i| lines[i] == " */")?;
    let last_include = line_index(&lines, end_preamble, "system includes", |i| {
        lines[i].starts_with("#include <") && !lines.get(i + 1).is_some_and(|l| l.starts_with("#include <"))
    })?;
    let soname = line_index(&lines, last_include, "FULMEN_SONAME", |i| lines[i].starts_with("#define FULMEN_SONAME "))?;
    let open = line_index(&lines, soname, "extern \"C\" block", |i| lines[i] == "extern \"C\" {")?;
    let close =
        line_index(&lines, open, "end of the extern \"C\" block", |i| lines[i].starts_with("}  // extern \"C\""))?;
    let types = blocks(&lines[soname + 1..open - 1]);
    let functions = blocks(&lines[open + 2..close - 1]);
    let mut items = Vec::new();
    for (text, function) in types.into_iter().map(|t| (t, false)).chain(functions.into_iter().map(|t| (t, true))) {
        let name = declared_name(&text)?;
        let is_struct = !function && text.lines().any(|l| l.starts_with("typedef struct ") && !l.contains("(*"));
        items.push(Item { name, text, function, is_struct });
    }
    Ok(Parsed {
        preamble: lines[..=end_preamble].join("\n"),
        after_includes: lines[last_include + 1..=soname].join("\n"),
        items,
    })
}

/// Where each Rust name the C API uses is defined: the source path under
/// `src/`, for every `pub struct / enum / type / const / static` and
/// `extern "C" fn`.
fn definitions(src: &Path) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        entries.sort();
        for path in entries {
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let rel = path.strip_prefix(src).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            for line in text.lines() {
                let line = line.trim_start();
                let rest = if let Some(at) = line.find("extern \"C\" fn ") {
                    &line[at + "extern \"C\" fn ".len()..]
                } else {
                    let Some(rest) = line.strip_prefix("pub ").or_else(|| line.strip_prefix("pub(crate) ")) else {
                        continue;
                    };
                    let Some(rest) =
                        ["struct ", "enum ", "type ", "const ", "static "].iter().find_map(|k| rest.strip_prefix(k))
                    else {
                        continue;
                    };
                    rest
                };
                out.entry(first_word(rest)).or_insert_with(|| rel.clone());
            }
        }
    }
    Ok(out)
}

/// The area of the Rust source `rel` (a path under `src/`).
fn area_of_source(rel: &str) -> Option<&'static str> {
    if let Some(rest) = rel.strip_prefix("ffi/") {
        let folder = rest.split('/').next()?;
        return AREAS.iter().find(|a| a.name == folder).map(|a| a.name);
    }
    CORE_AREAS.iter().filter(|(prefix, _)| rel.starts_with(prefix)).max_by_key(|(p, _)| p.len()).map(|(_, a)| *a)
}

/// The identifiers of an item's C (its comments left out), each with
/// whether it is used behind a pointer.
fn references(item: &Item) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for line in item.text.lines().filter(|l| !is_comment(l)) {
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let rest = line[i..].trim_start();
                out.push((line[start..i].to_owned(), rest.starts_with('*')));
            } else {
                i += 1;
            }
        }
    }
    out
}

/// The headers: `(path under include/, text)`, the umbrella first.
pub fn split(full: &str, src: &Path, rename: &HashMap<String, String>) -> Result<Vec<(String, String)>, String> {
    let parsed = parse(full)?;
    let defs = definitions(src)?;
    let rust_name: HashMap<&str, &str> = rename.iter().map(|(rust, c)| (c.as_str(), rust.as_str())).collect();
    let mut area_of: HashMap<String, usize> = HashMap::new();
    let mut unplaced = Vec::new();
    for item in &parsed.items {
        let name = item.name.as_str();
        let rust = rust_name.get(name).copied().unwrap_or(name);
        let place = defs.get(rust).and_then(|rel| {
            let area = area_of_source(rel)?;
            AREAS.iter().position(|a| a.name == area)
        });
        match place {
            Some(i) => {
                area_of.insert(item.name.clone(), i);
            }
            None => {
                unplaced.push(format!("{name} ({})", defs.get(rust).map_or("not found under src/", |r| r.as_str())))
            }
        }
    }
    if !unplaced.is_empty() {
        return Err(format!(
            "no area for {unplaced:?}: define each under src/ffi/<area>/, or add its core file to CORE_AREAS"
        ));
    }
    let structs: BTreeSet<&str> = parsed.items.iter().filter(|i| i.is_struct).map(|i| i.name.as_str()).collect();
    let mut files = vec![("fulmen.h".to_owned(), umbrella())];
    let mut problems = Vec::new();
    for (index, area) in AREAS.iter().enumerate() {
        let mine: Vec<&Item> = parsed.items.iter().filter(|i| area_of[&i.name] == index).collect();
        let mut needs = BTreeSet::new();
        for item in &mine {
            for (word, pointer) in references(item) {
                let Some(&other) = area_of.get(&word) else { continue };
                if other == index || (pointer && structs.contains(word.as_str())) {
                    continue;
                }
                if other > index {
                    problems.push(format!(
                        "{} ({}) uses {word} of {}, which comes later in AREAS",
                        item.name, area.name, AREAS[other].name
                    ));
                }
                needs.insert(other);
            }
        }
        needs.remove(&0);
        let text = area_header(area, &parsed, &mine, &needs, &structs);
        files.push((format!("fulmen/{}.h", area.name), text));
    }
    if !problems.is_empty() {
        return Err(format!("the areas' order cannot satisfy their uses: {problems:?}"));
    }
    Ok(files)
}

fn umbrella() -> String {
    let mut s = String::from(
        "/**\n * \\file fulmen.h\n * fulmen: Lightning-style training on libtorch, C API: every header of\n \
         * the API. The conventions every function follows (errors, ownership,\n * handles in use, threads, \
         signals, versions) are in fulmen/base.h.\n *\n * Generated from the Rust sources by `make header`; \
         do not edit by hand.\n */\n\n#ifndef FULMEN_H\n#define FULMEN_H\n\n",
    );
    for area in AREAS {
        s += &format!("#include \"fulmen/{}.h\"\n", area.name);
    }
    s += "\n#endif  /* FULMEN_H */\n";
    s
}

fn area_header(
    area: &Area,
    parsed: &Parsed,
    mine: &[&Item],
    needs: &BTreeSet<usize>,
    structs: &BTreeSet<&str>,
) -> String {
    let guard = format!("FULMEN_{}_H", area.name.to_uppercase());
    let mut s = if area.name == "base" {
        parsed.preamble.replacen("/*\n", &format!("/**\n * \\file fulmen/base.h\n * {}\n *\n", area.title), 1)
    } else {
        format!(
            "/**\n * \\file fulmen/{}.h\n * {}\n *\n * Part of the C API that <fulmen.h> includes whole; the conventions \
             every\n * function here follows are in fulmen/base.h. Generated by cbindgen from\n * src/ffi/{}/ \
             (`make header`); do not edit by hand.\n */",
            area.name, area.title, area.name
        )
    };
    s += &format!("\n\n#ifndef {guard}\n#define {guard}\n\n");
    if area.name == "base" {
        s += "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n";
        s += &parsed.after_includes;
        s += "\n\n/* Every struct of the API, declared so that any header may point to it. */\n";
        for name in structs {
            s += &format!("struct {name};\n");
        }
    } else {
        s += "#include \"base.h\"\n";
        for &i in needs {
            s += &format!("#include \"{}.h\"\n", AREAS[i].name);
        }
    }
    for item in mine.iter().filter(|i| !i.function) {
        s += "\n";
        s += &item.text;
        s += "\n";
    }
    let functions: Vec<&&Item> = mine.iter().filter(|i| i.function).collect();
    if !functions.is_empty() {
        s += "\n#ifdef __cplusplus\nextern \"C\" {\n#endif // __cplusplus\n";
        for item in functions {
            s += "\n";
            s += &item.text;
            s += "\n";
        }
        s += "\n#ifdef __cplusplus\n}  // extern \"C\"\n#endif  // __cplusplus\n";
    }
    s += &format!("\n#endif  /* {guard} */\n");
    s
}

/// The committed headers' text, every area in order: what the tests that
/// read the API (its comments, its options) search.
pub fn committed_api(root: &Path) -> String {
    let mut s = String::new();
    for area in AREAS {
        let path = root.join(format!("include/fulmen/{}.h", area.name));
        s += &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    }
    s
}

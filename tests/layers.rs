//! The main crate's modules depend one way (docs/design.md, "The parts"): every `src/**/*.rs` is
//! read, mapped to its top-level module, and each `crate::<module>` (in `main.rs`,
//! `tenant_placer::<module>`) it names, `use crate::{a, b}` groups included, must be in a lower
//! layer than its own. Modules of one layer do not name each other. A cycle cannot pass.
//!
//! `super::` paths are not followed: from a top-level module's files they stay inside it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom first. A module names only modules of layers below its own.
const LAYERS: &[&[&str]] = &[
    // The one error type; the CRD types and their conversions.
    &["error", "api"],
    // Each stands alone over the types: leader election, the metrics the controller counts into,
    // the invariants, the fleet report, manifest reading, the simulated provisioner (another
    // actor, which knows nothing of the controller).
    // Test fixtures (compiled for tests only) are built from the types too.
    &[
        "leader",
        "metrics",
        "invariants",
        "report",
        "manifests",
        "provisioner",
        "testing",
    ],
    // The run loop: knows nothing of HTTP, the page or metrics formatting.
    &["controller"],
    // What reads a running controller (the HTTP server and its page), and the in-process fleet.
    &["serve", "sim"],
    // The in-memory API for kubectl, with the controller and the server.
    &["sandbox"],
    // The binary.
    &["main"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/controller/writer.rs` → `controller`, `src/metrics.rs` → `metrics`; `lib.rs` (the crate
/// root, which only declares the modules) → None.
fn top_level_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (module != "lib").then(|| module.to_owned())
}

/// The text without `//` line comments (doc comments `///` and `//!` are kept: their links
/// resolve like code).
fn without_plain_comments(text: &str) -> String {
    text.lines()
        .map(|line| {
            let mut search = 0;
            while let Some(at) = line[search..].find("//") {
                let at = search + at;
                let rest = &line[at..];
                if rest.starts_with("///") || rest.starts_with("//!") {
                    search = at + 3;
                    continue;
                }
                // A `//` inside a string literal (a URL) is not a comment: count the quotes before.
                if line[..at].matches('"').count() % 2 == 1 {
                    search = at + 2;
                    continue;
                }
                return &line[..at];
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifier_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules `text` names through `root::` (`crate` or `tenant_placer`).
fn named_modules(text: &str, root: &str) -> BTreeSet<String> {
    let prefix = format!("{root}::");
    let mut named = BTreeSet::new();
    let mut search = 0;
    while let Some(at) = text[search..].find(&prefix) {
        let at = search + at;
        search = at + prefix.len();
        // `$crate::` and `my_crate::` are other paths.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = text[search..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::{C, D}, e}`: the names at the group's own depth.
            let mut depth = 0usize;
            let mut expect_name = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if expect_name && depth == 0 && (c.is_ascii_alphabetic() || c == '_') => {
                        named.insert(identifier_at(&group[i..]).to_owned());
                        expect_name = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = identifier_at(rest);
            if !name.is_empty() {
                named.insert(name.to_owned());
            }
        }
    }
    named
}

/// The code that ships: a file up to its unit tests (`#[cfg(test)]`, at the end of a file by
/// this crate's habit), which may use the test fixtures (`testing`) of any layer.
fn shipped(text: &str) -> &str {
    text.find("\n#[cfg(test)]").map_or(text, |at| &text[..at])
}

/// Every edge `(from, to)` that breaks the layering, with the file that names it.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let Some(module) = top_level_module(src, file) else {
            continue;
        };
        let shown = file.strip_prefix(src.parent().unwrap()).unwrap().display();
        let Some(own) = layer_of(&module) else {
            found.push(format!(
                "{shown}: module `{module}` has no layer: declare it in LAYERS (tests/layers.rs)"
            ));
            continue;
        };
        let text = without_plain_comments(shipped(&std::fs::read_to_string(file).unwrap()));
        let root = if module == "main" {
            "tenant_placer"
        } else {
            "crate"
        };
        for named in named_modules(&text, root) {
            // `crate::Error` and the like: items the crate root re-exports, not modules.
            if named == module || named.starts_with(|c: char| c.is_ascii_uppercase()) {
                continue;
            }
            match layer_of(&named) {
                Some(theirs) if theirs < own => {}
                Some(_) => found.push(format!(
                    "{shown}: `{module}` names `{named}`, which is not in a layer below it"
                )),
                None => found.push(format!(
                    "{shown}: `{module}` names `{named}`, which has no layer in LAYERS"
                )),
            }
        }
    }
    found
}

#[test]
fn the_main_crates_modules_depend_one_way_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "the modules do not depend one way (docs/design.md, \"The parts\"):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn every_layered_module_exists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for module in LAYERS.iter().flat_map(|layer| layer.iter()) {
        assert!(
            src.join(format!("{module}.rs")).is_file() || src.join(module).join("mod.rs").is_file(),
            "LAYERS names `{module}`, which is not a module of src/"
        );
    }
}

#[test]
fn references_are_read_from_paths_groups_and_nested_groups() {
    let text = "use crate::api::Node;\nuse crate::{\n    controller::{Health, Role},\n    \
                metrics,\n};\nlet x = $crate::nope; // crate::comment\nfn f(_: crate::serve::State) {}";
    let named = named_modules(&without_plain_comments(text), "crate");
    let named: Vec<_> = named.iter().map(String::as_str).collect();
    assert_eq!(named, ["api", "controller", "metrics", "serve"]);
}

#[test]
fn a_back_edge_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("controller")).unwrap();
    std::fs::write(src.join("metrics.rs"), "use crate::controller::Health;\n").unwrap();
    std::fs::write(
        src.join("controller/mod.rs"),
        "use crate::metrics::Metrics;\n",
    )
    .unwrap();
    let found = violations(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("`metrics` names `controller`"),
        "{found:?}"
    );
}

/// Inside `src/controller/`, bottom first: what the controller knows (state) and its Events;
/// the engine and the runner over it; the loops; the wiring (`mod.rs`). A file names only parts
/// of layers below its own, or its own part (files of one folder); loops do not name each other.
const CONTROLLER_LAYERS: &[&[&str]] = &[
    &["state", "publisher", "patch"],
    &["engine", "runner"],
    &["tenant", "node", "requests", "passes"],
    &["mod"],
];

/// Back edges that exist today, each `(file, item)`: the loops still share the wiring's one
/// `Context` (the next step gives each loop its own). The test fails on any other back edge, and
/// on one listed here that is gone (so the list only shrinks).
const KNOWN_BACK_EDGES: &[(&str, &str)] = &[
    ("controller/node.rs", "Context"),
    ("controller/passes.rs", "Context"),
    ("controller/requests.rs", "Context"),
    ("controller/tenant.rs", "Context"),
    ("controller/tenant.rs", "EventLevel"),
];

/// The part of the controller a file belongs to: its folder under `src/controller/` or its
/// file's name (`mod` for the wiring).
fn controller_part(controller: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(controller).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    let first = first.to_str().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

/// The controller's parts `text` (in `file`) names: `crate::controller::X`, and `super::X`
/// resolved from where the file sits (in `dir/mod.rs`, `super` is the controller; in
/// `dir/x.rs` it is `dir`, and `super::super` the controller).
fn named_parts(controller: &Path, file: &Path, text: &str) -> BTreeSet<String> {
    let relative = file.strip_prefix(controller).unwrap();
    let depth = relative.components().count() - 1;
    let is_mod = relative.file_name().is_some_and(|n| n == "mod.rs");
    // How many `super::` lead from this file to the controller's own scope.
    let to_controller = if is_mod { depth } else { depth + 1 };
    let mut named = named_modules(text, "crate::controller");
    if to_controller > 0 {
        named.extend(named_modules(
            text,
            &vec!["super"; to_controller].join("::"),
        ));
    }
    named
}

/// Every back edge inside the controller, as `(file, what it names)`.
fn controller_back_edges(controller: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(controller, &mut files);
    files.sort();
    let layer = |part: &str| CONTROLLER_LAYERS.iter().position(|l| l.contains(&part));
    let mut found = Vec::new();
    for file in &files {
        let part = controller_part(controller, file);
        let shown = file
            .strip_prefix(controller.parent().unwrap())
            .unwrap()
            .display()
            .to_string();
        let Some(own) = layer(&part) else {
            found.push((shown, format!("{part} (a part with no layer)")));
            continue;
        };
        let text = without_plain_comments(shipped(&std::fs::read_to_string(file).unwrap()));
        for named in named_parts(controller, file, &text) {
            // An item named at the controller's root (`super::Context`, a re-export such as
            // `crate::controller::TenantCache`) is the wiring's: name it by its part instead.
            let theirs = if named.starts_with(|c: char| c.is_ascii_uppercase()) {
                "mod"
            } else {
                named.as_str()
            };
            if theirs != part && layer(theirs).is_none_or(|theirs| theirs >= own) {
                found.push((shown.clone(), named));
            }
        }
    }
    found
}

#[test]
fn the_controllers_parts_depend_one_way_down_its_layers() {
    let controller = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller");
    let found = controller_back_edges(&controller);
    let known: Vec<(String, String)> = KNOWN_BACK_EDGES
        .iter()
        .map(|(file, item)| ((*file).to_owned(), (*item).to_owned()))
        .collect();
    let new: Vec<_> = found.iter().filter(|edge| !known.contains(edge)).collect();
    assert!(
        new.is_empty(),
        "the controller's parts do not depend one way (state < engine < loops < wiring); \
         (file, what it names):\n  {new:?}"
    );
    let gone: Vec<_> = known.iter().filter(|edge| !found.contains(edge)).collect();
    assert!(
        gone.is_empty(),
        "gone, remove from KNOWN_BACK_EDGES: {gone:?}"
    );
}

#[test]
fn a_back_edge_inside_the_controller_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let controller = dir.path().join("controller");
    std::fs::create_dir_all(controller.join("state")).unwrap();
    std::fs::create_dir_all(controller.join("engine")).unwrap();
    std::fs::write(
        controller.join("state/waiting.rs"),
        "use super::super::tenant::X;\n",
    )
    .unwrap();
    std::fs::write(
        controller.join("state/mod.rs"),
        "use super::engine::Engine;\n",
    )
    .unwrap();
    std::fs::write(
        controller.join("engine/mod.rs"),
        "use super::state::Synced;\n",
    )
    .unwrap();
    std::fs::write(
        controller.join("engine/batch.rs"),
        "use super::view::View;\n",
    )
    .unwrap();
    std::fs::write(
        controller.join("node.rs"),
        "use super::Context;\nuse super::tenant::A;\n",
    )
    .unwrap();
    let found = controller_back_edges(&controller);
    let edges = |file: &str| -> Vec<&str> {
        found
            .iter()
            .filter(|(f, _)| f == file)
            .map(|(_, n)| n.as_str())
            .collect()
    };
    assert_eq!(edges("controller/state/waiting.rs"), ["tenant"]);
    assert_eq!(edges("controller/state/mod.rs"), ["engine"]);
    assert!(edges("controller/engine/mod.rs").is_empty(), "{found:?}");
    assert!(edges("controller/engine/batch.rs").is_empty(), "{found:?}");
    assert_eq!(edges("controller/node.rs"), ["Context", "tenant"]);
}

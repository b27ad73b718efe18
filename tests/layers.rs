//! The main crate's modules depend one way (docs/design.md, "The parts"): every `src/**/*.rs` is
//! read, mapped to its top-level module, and each `crate::<module>` (in `main.rs`,
//! `tenant_placer::<module>`) it names, `use crate::{a, b}` groups included, must be in a lower
//! layer than its own. Modules of one layer do not name each other. A cycle cannot pass.
//!
//! `super::` paths are not followed: from a top-level module's files they stay inside it.
//!
//! Four more checks: no production module names the stand-ins for the world (`src/sim/`), even
//! one of a layer above them; inside `src/controller/`, its parts depend one way (state < engine <
//! settings < loops < wiring); `src/serve/` names no loop and no engine (nor what the controller
//! re-exports of them); and in every crate of
//! the workspace no two files import each other, directly or round a circle.
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
    // the fleet report, manifest reading, the trace export (which names no span's maker), the
    // client for the API server (kube's, with a bound on the requests in flight). Test fixtures
    // (compiled for tests only) are built from the types too.
    &[
        "client",
        "leader",
        "metrics",
        "report",
        "manifests",
        "telemetry",
        "testing",
    ],
    // The run loop: knows nothing of HTTP, the page or metrics formatting.
    &["controller"],
    // What reads a running controller (the HTTP server and its page), and the stand-ins for the
    // world (sim: the in-process fleet, the simulated provisioner and Cluster API, the
    // invariants), which production code never names (`production_never_names_the_stand_ins`).
    &["serve", "sim", "forecast"],
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

/// A file of the crate at `src`, read for the top-level modules it names.
struct ModuleFile {
    /// Its path from the crate's folder (`src/controller/node.rs`).
    shown: String,
    /// Its top-level module (`controller`).
    module: String,
    /// Its shipped code, without plain comments.
    text: String,
}

/// Every file of the crate at `src` but its root, in path order.
fn module_files_of(src: &Path) -> Vec<ModuleFile> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|file| {
            let module = top_level_module(src, file)?;
            let shown = file.strip_prefix(src.parent().unwrap()).unwrap();
            let text = std::fs::read_to_string(file).unwrap();
            Some(ModuleFile {
                shown: shown.display().to_string(),
                module,
                text: without_plain_comments(shipped(&text)),
            })
        })
        .collect()
}

/// Every edge `(from, to)` that breaks the layering, with the file that names it.
fn violations(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for ModuleFile {
        shown,
        module,
        text,
    } in module_files_of(src)
    {
        let Some(own) = layer_of(&module) else {
            found.push(format!(
                "{shown}: module `{module}` has no layer: declare it in LAYERS (tests/layers.rs)"
            ));
            continue;
        };
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

/// The modules that may name the stand-ins for the world (`crate::sim`: the in-process fleet, the
/// simulated provisioner and Cluster API, the invariants): the stand-ins themselves, the sandbox
/// and the binary (`simulate`, `plan`). Every other module is production code, and production
/// never runs on a fake. Unit tests (`#[cfg(test)]`) may use them, as the integration tests do.
const STAND_IN_USERS: &[&str] = &["sim", "sandbox", "main"];

/// Every shipped file of a production module that names `sim`.
fn production_naming_stand_ins(src: &Path) -> Vec<String> {
    module_files_of(src)
        .into_iter()
        .filter(|file| !STAND_IN_USERS.contains(&file.module.as_str()))
        .filter(|file| {
            named_modules(&file.text, "crate").contains("sim")
                || named_modules(&file.text, "tenant_placer").contains("sim")
        })
        .map(|file| format!("{}: `{}` names `sim`", file.shown, file.module))
        .collect()
}

#[test]
fn production_never_names_the_stand_ins() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = production_naming_stand_ins(&src);
    assert!(
        found.is_empty(),
        "production code names the stand-ins for the world (src/sim/: only {STAND_IN_USERS:?} \
         may): {found:#?}"
    );
}

#[test]
fn a_production_module_naming_the_stand_ins_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    for dir in ["serve", "controller", "sim"] {
        std::fs::create_dir_all(src.join(dir)).unwrap();
    }
    let write = |file: &str, text: &str| std::fs::write(src.join(file), text).unwrap();
    write("serve/mod.rs", "use crate::{api::Node, sim::invariants};\n");
    write(
        "controller/tenant.rs",
        "fn f() { crate::sim::provisioner::run() }\n",
    );
    // Unit tests, the sandbox and the stand-ins themselves may.
    write(
        "controller/node.rs",
        "fn f() {}\n#[cfg(test)]\nmod tests { use crate::sim::Fleet; }\n",
    );
    write("sandbox.rs", "use crate::sim::Fleet;\n");
    write("sim/fleet.rs", "use crate::sim::capi;\n");
    let found = production_naming_stand_ins(&src);
    assert_eq!(
        found,
        [
            "src/controller/tenant.rs: `controller` names `sim`",
            "src/serve/mod.rs: `serve` names `sim`"
        ]
    );
}

/// Inside `src/controller/`, bottom first: what the controller knows (state) and its Events;
/// the engine and the runner over it; the tunables (settings, which name the engine's retry
/// policy); the loops, each with its own struct of what it reads and writes through; the wiring
/// (`mod.rs`), which builds them. A file names only parts
/// of layers below its own, or its own part (files of one folder); loops do not name each other.
const CONTROLLER_LAYERS: &[&[&str]] = &[
    &["state", "publisher", "patch", "disruption"],
    &["engine", "runner"],
    &["settings"],
    // Consolidation and make-room, which the capacity tick runs as its steps.
    &["consolidation", "make_room"],
    &["tenant", "node", "capacity", "wake", "register", "capi"],
    &["mod"],
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
    assert!(
        found.is_empty(),
        "the controller's parts do not depend one way (state < engine < loops < wiring); \
         (file, what it names):\n  {found:?}"
    );
}

/// What a file under `src/serve/` may name of the controller: what it knows (`state`) and the
/// handles the wiring gives out (`Caches`, `Health`, `Handles`, ...), never a loop or the engine,
/// nor anything of theirs the controller re-exports (`reexported`: a loop's memory read through
/// the root would be a loop read all the same).
fn serve_reaches_into(text: &str, reexported: &BTreeSet<String>) -> Vec<String> {
    named_modules(text, "crate::controller")
        .into_iter()
        .filter(|named| {
            let handle = named.starts_with(|c: char| c.is_ascii_uppercase());
            !(named == "state" || handle && !reexported.contains(named))
        })
        .collect()
}

/// The names `src/controller/mod.rs` re-exports from a loop or the engine (`pub use
/// consolidation::Memory as X;` gives `X`); what it re-exports of `state` and `settings` is
/// what the controller knows and how it is set, which readers may name.
fn loop_reexports(controller_mod: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for statement in controller_mod.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = path.split("::").next().unwrap_or_default().trim();
        if ["state", "settings", "self", "crate", "super"].contains(&module) {
            continue;
        }
        let tail = path.split_once("::").map_or(path, |(_, tail)| tail);
        let group = tail.rsplit_once('{').map_or(tail, |(_, g)| g);
        for item in group.trim_end_matches('}').split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if !name.is_empty() {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_serving_layer_reads_handles_and_imports_no_loop() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let controller_mod = std::fs::read_to_string(root.join("src/controller/mod.rs")).unwrap();
    let reexported = loop_reexports(&without_plain_comments(&controller_mod));
    assert!(
        reexported.contains("CapacityLoop") && !reexported.contains("TenantCache"),
        "{reexported:?}"
    );
    let serve = root.join("src/serve");
    let mut files = Vec::new();
    rust_files(&serve, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let text = without_plain_comments(shipped(&std::fs::read_to_string(file).unwrap()));
        for named in serve_reaches_into(&text, &reexported) {
            found.push(format!("{} names controller::{named}", file.display()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    let sample = loop_reexports(
        "pub use capacity::CapacityLoop;\npub use consolidation::Snapshot as Kept;\n\
         pub use engine::{Bought, Engine};\npub use state::{Synced, WaitingRoom};\n\
         pub use settings::Settings;",
    );
    assert_eq!(
        sample.iter().map(String::as_str).collect::<Vec<_>>(),
        ["Bought", "CapacityLoop", "Engine", "Kept"]
    );
    assert_eq!(
        serve_reaches_into(
            "use crate::controller::{Caches, Kept, state::waiting::Waiter};\n\
             use crate::controller::tenant::WantedStatus;\nuse crate::controller::engine::X;",
            &sample
        ),
        ["Kept", "engine", "tenant"]
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

// --- No import circles between files, in every crate of the workspace ---------------------------
//
// Each file is a module (`a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` the root). A file names
// another when a path in its shipped code leads there: `crate::a::b::Item` (the deepest module on
// the path), `super::` and `self::` from where it sits, a child by its bare name (`b::Item` in
// `a/mod.rs`), and a name a module re-exports (`pub use`) leads on to where it comes from. A
// parent that names its child and a child that names its parent are a circle too (a doc link is
// no import). Binaries
// (`main.rs`, `bin/`) are crates of their own and are not read.

type Module = Vec<String>;

/// The text without any comment: a doc link is no import.
fn without_comments(text: &str) -> String {
    let code: Vec<&str> = text
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !(line.starts_with("///") || line.starts_with("//!"))
        })
        .collect();
    without_plain_comments(&code.join("\n"))
}

/// Every module file of the crate at `src`, by module path.
fn module_files(src: &Path) -> std::collections::BTreeMap<Module, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = std::collections::BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap().with_extension("");
        let mut path: Module = relative
            .components()
            .map(|c| c.as_os_str().to_str().unwrap().to_owned())
            .collect();
        if path.first().is_some_and(|p| p == "bin") || path == ["main"] {
            continue;
        }
        if path.last().is_some_and(|p| p == "mod") || path == ["lib"] {
            path.pop();
        }
        modules.insert(path, file);
    }
    modules
}

/// The paths written from `at` on (`a::b::{C, d::E}` gives `[a, b, C]` and `[a, b, d, E]`;
/// `as` aliases and `*` end a path). Each path keeps only identifier segments.
fn paths_at(text: &str, at: usize) -> Vec<Module> {
    fn skip_space(text: &[u8], mut i: usize) -> usize {
        while i < text.len() && text[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }
    fn parse(text: &[u8], mut i: usize, prefix: Module, out: &mut Vec<Module>) -> usize {
        let mut path = prefix;
        loop {
            i = skip_space(text, i);
            if text.get(i) == Some(&b'{') {
                i += 1;
                loop {
                    i = parse(text, i, path.clone(), out);
                    i = skip_space(text, i);
                    match text.get(i) {
                        Some(b',') => i += 1,
                        Some(b'}') => return i + 1,
                        _ => return i,
                    }
                    if skip_space(text, i) < text.len() && text[skip_space(text, i)] == b'}' {
                        return skip_space(text, i) + 1;
                    }
                }
            }
            let start = i;
            while i < text.len() && (text[i].is_ascii_alphanumeric() || text[i] == b'_') {
                i += 1;
            }
            if i > start {
                path.push(String::from_utf8_lossy(&text[start..i]).into_owned());
            }
            let after = skip_space(text, i);
            if i > start && text[after..].starts_with(b"::") {
                i = after + 2;
                continue;
            }
            out.push(path);
            return i;
        }
    }
    let mut out = Vec::new();
    parse(text.as_bytes(), at, Vec::new(), &mut out);
    out
}

/// Where each path that starts with `prefix` (not inside a longer name or path) begins.
fn starts_of(text: &str, prefix: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut search = 0;
    while let Some(at) = text[search..].find(prefix) {
        let at = search + at;
        search = at + prefix.len();
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        starts.push(at + prefix.len());
    }
    starts
}

/// The module a path from `base` leads to: as deep as the path names modules, then on through a
/// name the module re-exports.
fn resolve(
    modules: &std::collections::BTreeMap<Module, PathBuf>,
    reexports: &std::collections::BTreeMap<(Module, String), Module>,
    base: &[String],
    path: &[String],
) -> Option<Module> {
    let mut at: Module = base.to_vec();
    for segment in path {
        let mut deeper = at.clone();
        deeper.push(segment.clone());
        if modules.contains_key(&deeper) {
            at = deeper;
        } else {
            return Some(
                reexports
                    .get(&(at.clone(), segment.clone()))
                    .cloned()
                    .unwrap_or(at),
            );
        }
    }
    Some(at)
}

/// Every path `text` (the file of `module`) writes, each with the module it starts from.
fn written_paths(
    modules: &std::collections::BTreeMap<Module, PathBuf>,
    module: &[String],
    text: &str,
) -> Vec<(Module, Module)> {
    let mut paths = Vec::new();
    for at in starts_of(text, "crate::") {
        paths.extend(paths_at(text, at).into_iter().map(|p| (Vec::new(), p)));
    }
    for at in starts_of(text, "self::") {
        paths.extend(paths_at(text, at).into_iter().map(|p| (module.to_vec(), p)));
    }
    for at in starts_of(text, "super::") {
        let mut ups = 1;
        let mut at = at;
        while text[at..].starts_with("super::") {
            ups += 1;
            at += "super::".len();
        }
        let base = module[..module.len().saturating_sub(ups)].to_vec();
        paths.extend(paths_at(text, at).into_iter().map(|p| (base.clone(), p)));
    }
    // A child named by its bare name, and the paths of `use` statements (relative in 2018).
    let children = modules
        .keys()
        .filter(|m| m.len() == module.len() + 1 && m.starts_with(module));
    for child in children {
        let name = child.last().unwrap();
        for at in starts_of(text, &format!("{name}::")) {
            let from = at - name.len() - 2;
            paths.extend(
                paths_at(text, from)
                    .into_iter()
                    .map(|p| (module.to_vec(), p)),
            );
        }
    }
    paths
}

/// `(module, name) -> module the name comes from`, for every name a module re-exports.
fn reexports_of(
    modules: &std::collections::BTreeMap<Module, PathBuf>,
) -> std::collections::BTreeMap<(Module, String), Module> {
    let mut reexports = std::collections::BTreeMap::new();
    // Twice: a re-export of a re-export resolves on the second round.
    for _ in 0..2 {
        let mut found = Vec::new();
        for (module, file) in modules {
            let text = without_comments(shipped(&std::fs::read_to_string(file).unwrap()));
            for visibility in ["pub use ", "pub(crate) use ", "pub(super) use "] {
                for at in starts_of(&text, visibility) {
                    for path in paths_at(&text, at) {
                        let (base, path) = match path.first().map(String::as_str) {
                            Some("crate") => (Vec::new(), &path[1..]),
                            Some("self") => (module.clone(), &path[1..]),
                            Some("super") => {
                                let ups = path.iter().take_while(|s| *s == "super").count();
                                (
                                    module[..module.len().saturating_sub(ups)].to_vec(),
                                    &path[ups..],
                                )
                            }
                            _ => (module.clone(), &path[..]),
                        };
                        let Some((name, from)) = path.split_last() else {
                            continue;
                        };
                        if let Some(source) = resolve(modules, &reexports, &base, from)
                            && source != *module
                        {
                            found.push(((module.clone(), name.clone()), source));
                        }
                    }
                }
            }
        }
        reexports.extend(found);
    }
    reexports
}

/// Every file-level circle of the crate at `src`: each a sorted list of module paths, and the
/// edges inside it (`a -> b`).
fn import_circles(src: &Path) -> Vec<(Vec<String>, Vec<String>)> {
    let modules = module_files(src);
    let reexports = reexports_of(&modules);
    let mut edges: std::collections::BTreeMap<Module, BTreeSet<Module>> = Default::default();
    for (module, file) in &modules {
        let text = without_comments(shipped(&std::fs::read_to_string(file).unwrap()));
        let named = edges.entry(module.clone()).or_default();
        for (base, path) in written_paths(&modules, module, &text) {
            if let Some(to) = resolve(&modules, &reexports, &base, &path)
                && to != *module
            {
                named.insert(to);
            }
        }
    }
    let name = |m: &Module| {
        if m.is_empty() {
            "crate".to_owned()
        } else {
            m.join("::")
        }
    };
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut names: Vec<String> = c.iter().map(name).collect();
            names.sort();
            let mut inside: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    edges[from]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("{} -> {}", name(from), name(to)))
                })
                .collect();
            inside.sort();
            (names, inside)
        })
        .collect()
}

/// Tarjan's strongly connected components.
fn strongly_connected(
    edges: &std::collections::BTreeMap<Module, BTreeSet<Module>>,
) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        edges: &'a std::collections::BTreeMap<Module, BTreeSet<Module>>,
        index: std::collections::BTreeMap<&'a Module, usize>,
        low: std::collections::BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        components: Vec<Vec<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let Some((w, _)) = self.edges.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: Default::default(),
        low: Default::default(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.components
}

#[test]
fn no_file_of_any_crate_imports_another_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for src in [
        "src",
        "placement/src",
        "inmem-apiserver/src",
        "host-check/src",
    ] {
        for (circle, edges) in import_circles(&root.join(src)) {
            found.push(format!(
                "{src}: {} ({})",
                circle.join(", "),
                edges.join("; ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "import circles:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn import_circles_are_found_through_paths_groups_parents_and_reexports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("c")).unwrap();
    let write = |file: &str, text: &str| std::fs::write(src.join(file), text).unwrap();
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub use a::X;\n",
    );
    // a -> b (in a group), b -> a (through the root's re-export).
    write("a.rs", "use crate::{\n    b::Y,\n};\npub struct X;\n");
    write("b.rs", "use crate::X;\npub struct Y;\n");
    // c -> its child d (bare name), d -> c (super::); e -> d is no circle.
    write(
        "c/mod.rs",
        "mod d;\nmod e;\npub fn f() { d::g() }\npub struct Ctx;\n",
    );
    write("c/d.rs", "use super::Ctx;\npub fn g() {}\n");
    write(
        "c/e.rs",
        "use super::d::g;\n#[cfg(test)]\nmod tests { use super::super::Ctx; }\n",
    );
    let circles: Vec<Vec<String>> = import_circles(src).into_iter().map(|c| c.0).collect();
    assert_eq!(
        circles,
        [
            vec!["a".to_owned(), "b".into()],
            vec!["c".into(), "c::d".into()]
        ]
    );
}

//! The crate's modules form the layers its module doc declares: every `crate::` path in a
//! module leads to a module of the same or a lower layer, and the paths form no cycle.
//!
//! The layer list is read from `src/lib.rs` (the `# Layers` section), so the documentation is
//! the one home of the rule; this test is its enforcement.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layer index (0 = bottom) of every module named in the `# Layers` list of `lib_rs`.
fn declared_layers(lib_rs: &str, modules: &BTreeSet<String>) -> BTreeMap<String, usize> {
    let mut layers = BTreeMap::new();
    let mut layer: Option<usize> = None;
    let mut next: Option<usize> = None;
    let mut in_section = false;
    for line in lib_rs.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim_start();
        if doc.starts_with('#') {
            in_section = doc == "# Layers";
            continue;
        }
        if !in_section {
            continue;
        }
        let numbered = doc
            .split_once(". **")
            .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if numbered.is_some() {
            next = next.map_or(Some(0), |n: usize| n.checked_add(1));
            layer = next;
        } else if !line.starts_with("//!    ") {
            // Only indented lines continue an item.
            layer = None;
        }
        let Some(current) = layer else { continue };
        for (i, token) in doc.split('`').enumerate() {
            if i % 2 == 1 && modules.contains(token) {
                let previous = layers.insert(token.to_owned(), current);
                assert!(
                    previous.is_none_or(|p| p == current),
                    "module `{token}` is listed in two layers"
                );
            }
        }
    }
    layers
}

/// The modules `lib.rs` declares (`mod x;` / `pub mod x;`).
fn declared_modules(lib_rs: &str) -> BTreeSet<String> {
    lib_rs
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            rest.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// The modules `source` names through `crate::` paths, outside comments. A path through a
/// root re-export (`crate::Store`, `crate::{..}`) is reported as `Err`: it hides the module
/// it leads to.
fn uses(source: &str, modules: &BTreeSet<String>) -> Result<BTreeSet<String>, String> {
    let mut found = BTreeSet::new();
    for line in source.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split(" // ").next().unwrap_or_default();
        for (at, _) in code.match_indices("crate::") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `tier_testserver::` or `$crate::`
            }
            let rest = &code[at + "crate::".len()..];
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&ident) {
                found.insert(ident);
            } else {
                return Err(format!(
                    "`crate::{}` does not name a module: use the module path",
                    rest.chars().take(30).collect::<String>()
                ));
            }
        }
    }
    Ok(found)
}

/// Every edge from a lower layer to a higher one, as messages.
fn upward_edges(
    layers: &BTreeMap<String, usize>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, targets) in edges {
        for to in targets {
            let (a, b) = (layers[from], layers[to]);
            if b > a {
                wrong.push(format!(
                    "`{from}` (layer {}) uses `{to}` (layer {})",
                    a + 1,
                    b + 1
                ));
            }
        }
    }
    wrong
}

/// A cycle of `edges` (self-edges ignored), as the path around it, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let start = path.iter().position(|n| n == node).unwrap_or(0);
                let mut found = path[start..].to_vec();
                found.push(node.to_owned());
                return Some(found);
            }
            None => {}
        }
        state.insert(node.to_owned(), false);
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if next != node
                && let Some(found) = visit(next, edges, state, path)
            {
                return Some(found);
            }
        }
        path.pop();
        state.insert(node.to_owned(), true);
        None
    }
    let mut state = BTreeMap::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut state, &mut Vec::new()))
}

#[test]
fn modules_use_only_their_own_or_lower_layers_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules = declared_modules(&lib_rs);
    assert!(modules.len() > 10, "found only {modules:?} in lib.rs");
    let layers = declared_layers(&lib_rs, &modules);
    let unlisted: Vec<_> = modules
        .iter()
        .filter(|m| !layers.contains_key(*m))
        .collect();
    assert!(
        unlisted.is_empty(),
        "modules missing from the `# Layers` list of lib.rs: {unlisted:?}"
    );
    let mut edges = BTreeMap::new();
    for module in &modules {
        let path = src.join(format!("{module}.rs"));
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let used = uses(&source, &modules).unwrap_or_else(|e| panic!("{module}: {e}"));
        edges.insert(module.clone(), used);
    }
    let wrong = upward_edges(&layers, &edges);
    assert!(
        wrong.is_empty(),
        "lower layers use higher ones:\n{}",
        wrong.join("\n")
    );
    assert_eq!(cycle(&edges), None, "modules use each other in a circle");
}

#[test]
fn the_checks_catch_an_upward_use_a_cycle_and_a_re_export_path() {
    let modules: BTreeSet<String> = ["low", "high", "side"].map(String::from).into();
    let lib = "//! # Layers\n//!\n//! 1. **bottom**: `low`,\n//!    `side`.\n//! 2. **top**: `high` (the top).\n//!\n//! # Other\n//! `high` again\n";
    let layers = declared_layers(lib, &modules);
    assert_eq!(layers["low"], 0);
    assert_eq!(layers["side"], 0);
    assert_eq!(layers["high"], 1);

    let edges: BTreeMap<String, BTreeSet<String>> = [
        (
            "low".to_owned(),
            uses("use crate::high::X;", &modules).unwrap(),
        ),
        (
            "high".to_owned(),
            uses("let x = crate::low::f(); // crate::side", &modules).unwrap(),
        ),
        (
            "side".to_owned(),
            uses("// crate::high\nuse crate::low;", &modules).unwrap(),
        ),
    ]
    .into();
    assert_eq!(
        upward_edges(&layers, &edges),
        ["`low` (layer 1) uses `high` (layer 2)"]
    );
    assert_eq!(
        cycle(&edges),
        Some(["high", "low", "high"].map(String::from).to_vec())
    );
    assert!(uses("use crate::{Store};", &modules).is_err());
    assert!(
        uses("use tier_testserver::Store;", &modules)
            .unwrap()
            .is_empty()
    );
}

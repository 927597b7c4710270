//! The code's structure, drawn from its own imports: inside each library
//! crate, the top-level modules must form no circle (a module that uses
//! another may not be used by it, directly or through others). A circle
//! means two rooms that cannot be understood or changed apart; the fix is
//! a leaf module for what both need (as `pipeline::prefix` and
//! `pipeline::route_cache` are) or a call in one direction only (as the
//! backends call `appliance::engine`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name → the crate-local modules it refers to.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (line comments and doc
/// comments; block comments are not used in this code base).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The crate-local top-level modules `code` names through `prefix`
/// (`crate::` anywhere; `super::` in a top-level module's own file).
fn refs(code: &str, prefix: &str, out: &mut BTreeSet<String>) {
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue; // `pmd::crate_x::` or `a::super::`: not ours
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::b, c}`: the first segment of each item at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_ascii_alphabetic() || c == '_') => {
                        out.insert(ident(&group[k..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let m = ident(rest);
            if !m.is_empty() {
                out.insert(m.to_string());
            }
        }
    }
}

/// The module graph of the library crate whose sources are in `src`.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel.components().next().unwrap().as_os_str();
        let module = Path::new(first)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .to_string();
        if module == "lib" || module == "main" || module == "bin" {
            continue;
        }
        let text = code(&std::fs::read_to_string(f).unwrap());
        let e = g.entry(module.clone()).or_default();
        refs(&text, "crate::", e);
        if rel.components().count() == 1 {
            refs(&text, "super::", e);
        }
        e.remove(&module);
    }
    let names: BTreeSet<String> = g.keys().cloned().collect();
    for e in g.values_mut() {
        e.retain(|m| names.contains(m));
    }
    g
}

/// A circle in `g`, if there is one (as the modules along it).
fn circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        m: &str,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|p| p == m).unwrap();
                let mut c = path[at..].to_vec();
                c.push(m.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for n in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, n, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut state, &mut Vec::new()))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

#[test]
fn no_import_circles_between_modules() {
    for krate in ["pipeline", "pmd", "appliance", "bench"] {
        let g = graph(&workspace().join(krate).join("src"));
        assert!(g.len() > 3, "{krate}: modules found: {g:?}");
        if let Some(c) = circle(&g) {
            panic!("{krate}: import circle {}", c.join(" → "));
        }
    }
}

#[test]
fn the_checker_sees_circles_and_grouped_imports() {
    let mut r = BTreeSet::new();
    refs(
        "use crate::{a::B, c, d::{e, f}};\nlet x = crate::g::h();\npmd::crate_x::y; use super::k;",
        "crate::",
        &mut r,
    );
    let want: BTreeSet<String> = ["a", "c", "d", "g"].map(String::from).into();
    assert_eq!(r, want);
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default();
    assert_eq!(circle(&g), None);
    g.get_mut("c").unwrap().insert("a".into());
    assert_eq!(
        circle(&g),
        Some(["a", "b", "c", "a"].map(String::from).to_vec())
    );
    assert_eq!(code("x // crate::y\n/// crate::z\nw"), "x \n\nw");
}

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

/// The type-like names (structs, enums, traits, type aliases, unions)
/// a file defines at its top level (lines that start with the item: an
/// associated `type Err` inside an `impl` is indented).
fn types_defined(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let mut l = line;
        if let Some(r) = l.strip_prefix("pub") {
            l = r.strip_prefix(' ').unwrap_or(r);
            if l.starts_with('(') {
                l = l.split_once(") ").map_or("", |(_, r)| r);
            }
        }
        for kw in ["struct ", "enum ", "trait ", "type ", "union "] {
            if let Some(r) = l.strip_prefix(kw) {
                let name = ident(r);
                if name.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                    out.insert(name.to_string());
                }
            }
        }
    }
    out
}

/// The enum variants `code` declares, as far as a line tells (`    Poll,`,
/// `    Drop(Reason),`, `    Full { .. }`): not uses of a type so named.
fn variants(code: &str) -> BTreeSet<&str> {
    code.lines()
        .filter(|l| l.starts_with(' '))
        .filter_map(|l| {
            let t = l.trim_start();
            let name = ident(t);
            let rest = t[name.len()..].trim_start();
            (name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && (rest.is_empty() || rest.starts_with([',', '(', '{', '='])))
            .then_some(name)
        })
        .collect()
}

/// The identifiers `code` uses bare (not after `::`: `Next::Poll` is a
/// variant, `x::Poll` an item named by its path, which [`refs`] sees).
fn idents(code: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphanumeric() || b[i] == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if !(start >= 2 && &b[start - 2..start] == b"::") {
                out.insert(&code[start..i]);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The graphs of the submodules of each module that is a directory
/// (`config/`, `router/`, ...): its files other than `mod.rs` (the parent,
/// which every child may use), with an edge where one file names another
/// by path (`super::x::`, `crate::dir::x::`) or uses a type the other
/// defines (glob imports such as `use super::*` hide the path).
fn submodule_graphs(src: &Path) -> Vec<(String, Graph)> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let mut files = Vec::new();
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
        if d == src
            || !files.iter().any(|f| f.ends_with("mod.rs")) && !d.with_extension("rs").exists()
        {
            continue;
        }
        let name = d.strip_prefix(src).unwrap().display().to_string();
        let children: Vec<(String, String)> = files
            .iter()
            .filter(|f| !f.ends_with("mod.rs"))
            .map(|f| {
                (
                    f.file_stem().unwrap().to_string_lossy().to_string(),
                    code(&std::fs::read_to_string(f).unwrap()),
                )
            })
            .collect();
        let defs: Vec<BTreeSet<String>> = children.iter().map(|(_, c)| types_defined(c)).collect();
        let mut g = Graph::new();
        for (i, (m, c)) in children.iter().enumerate() {
            let declared = variants(c);
            let used: BTreeSet<&str> = idents(c)
                .into_iter()
                .filter(|w| !declared.contains(w))
                .collect();
            let mut named = BTreeSet::new();
            refs(c, "super::", &mut named);
            // A sibling named bare (`firewall::RawFirewall` under
            // `use super::*`).
            for (n, _) in &children {
                let path = format!("{n}::");
                let mut rest = c.as_str();
                while let Some(k) = rest.find(&path) {
                    let before = rest[..k].chars().last();
                    rest = &rest[k + path.len()..];
                    if !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == '_' || b == ':') {
                        named.insert(n.clone());
                        break;
                    }
                }
            }
            refs(
                c,
                &format!("crate::{}::", name.replace('/', "::")),
                &mut named,
            );
            let e = g.entry(m.clone()).or_default();
            for (j, (n, _)) in children.iter().enumerate() {
                let by_type = defs[j]
                    .iter()
                    .any(|t| used.contains(t.as_str()) && !defs[i].contains(t));
                if j != i && (named.contains(n) || by_type) {
                    e.insert(n.clone());
                }
            }
        }
        out.push((name, g));
    }
    out
}

/// The submodule check sees a circle hidden behind `use super::*` (a
/// type of each file used bare by the other, as `config/`'s `schema` and
/// `control_plane` were), and a sibling named by path.
#[test]
fn the_checker_sees_circles_behind_glob_imports() {
    let dir = std::env::temp_dir().join(format!("sluice-structure-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\nmod c;\nmod d;\n").unwrap();
    std::fs::write(
        dir.join("a/mod.rs"),
        "mod x;\nmod y;\nmod z;\nuse x::*;\nuse y::*;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/x.rs"),
        "use super::*;\npub struct RawFile { p: Vec<Punt> }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/y.rs"),
        "use super::*;\npub struct Punt;\nfn f(r: &RawFile) {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/z.rs"),
        "enum E {\n    Punt,\n}\nfn g() { super::x::h(); }\n",
    )
    .unwrap();
    let gs = submodule_graphs(&dir);
    let (_, g) = gs.iter().find(|(d, _)| d == "a").unwrap();
    assert_eq!(
        g["z"],
        ["x"].map(String::from).into(),
        "a variant is not a use"
    );
    assert!(circle(g).is_some(), "{g:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_import_circles_between_submodules() {
    let mut found = Vec::new();
    let mut dirs = 0;
    for krate in ["pipeline", "pmd", "appliance", "bench"] {
        for (dir, g) in submodule_graphs(&workspace().join(krate).join("src")) {
            dirs += 1;
            if let Some(c) = circle(&g) {
                found.push(format!("{krate}::{dir}: {} (edges: {g:?})", c.join(" → ")));
            }
        }
    }
    assert!(dirs >= 6, "directories found: {dirs}");
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
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
    let t = types_defined(
        "pub struct Raw {}\nenum E { A }\npub(super) type T = u8;\nlet my_struct = 1; fn f() {}",
    );
    assert_eq!(t, ["E", "Raw", "T"].map(String::from).into());
}

/// The modules of crate `krate`, as `a::b` paths (no `lib`, `main`,
/// binaries or test files).
fn modules(krate: &str) -> BTreeSet<String> {
    let src = workspace().join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().with_extension("");
            let m = rel.display().to_string().replace('/', "::");
            m.strip_suffix("::mod").map_or(m.clone(), str::to_string)
        })
        .filter(|m| {
            !matches!(m.as_str(), "lib" | "main")
                && !m.starts_with("bin::")
                && !m.split("::").any(|p| p == "tests")
        })
        .collect()
}

/// `docs/architecture.md` lists every module of every crate, and no
/// module that is gone: the page is drawn from the code.
#[test]
fn the_architecture_page_names_every_module() {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let every = doc
        .split_once("## Every module")
        .expect("a section `## Every module`")
        .1;
    for krate in ["appliance", "pipeline", "pmd", "bench"] {
        let section = every
            .split_once(&format!("### `{krate}`"))
            .unwrap_or_else(|| panic!("no table for {krate}"))
            .1;
        let section = section.split("\n### ").next().unwrap();
        let section = section.split("\n## ").next().unwrap();
        let listed: BTreeSet<String> = section
            .lines()
            .filter_map(|l| {
                l.strip_prefix("| `")?
                    .split_once('`')
                    .map(|(m, _)| m.to_string())
            })
            .filter(|m| m != "module")
            .collect();
        let have = modules(krate);
        let missing: Vec<_> = have.difference(&listed).collect();
        let gone: Vec<_> = listed.difference(&have).collect();
        assert!(
            missing.is_empty() && gone.is_empty(),
            "docs/architecture.md, {krate}: missing {missing:?}, no longer there {gone:?}"
        );
    }
}

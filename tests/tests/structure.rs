//! The crates' module structure: every module imports only from modules below it, so the
//! imports between the top-level modules of each crate (`crate::x` and `$crate::x` paths,
//! counted as text) form no circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of the crate at `src` (`foo.rs` or `foo/`; `lib.rs` is the root and
/// is left out), with the files of each.
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module != "lib" && module != "main" {
            modules.entry(module).or_default().push(file);
        }
    }
    modules
}

/// The text without comments (line and block), so paths in docs do not count.
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The modules among `names` that `text` names after `crate::`.
fn imports(text: &str, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in text.match_indices("crate::") {
        let after = &text[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a::X, b, c::{..}}`: the first name of each top-level item.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    _ if item_start && !c.is_whitespace() => {
                        found.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(after));
        }
    }
    found.retain(|m| names.contains(m));
    found
}

/// Every circle of imports between the top-level modules of the crate at `src`.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let modules = modules(src);
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|(module, files)| {
            let mut to = BTreeSet::new();
            for file in files {
                to.extend(imports(
                    &code(&std::fs::read_to_string(file).unwrap()),
                    &names,
                ));
            }
            to.remove(module);
            (module.clone(), to)
        })
        .collect();
    // A module is in a circle if it can reach itself; report each circle's members once.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = graph[from].iter().map(String::as_str).collect();
        while let Some(m) = stack.pop() {
            if seen.insert(m.to_owned()) {
                stack.extend(graph[m].iter().map(String::as_str));
            }
        }
        seen
    };
    let mut out: Vec<Vec<String>> = Vec::new();
    for module in graph.keys() {
        let from = reach(module);
        if from.contains(module) {
            let circle: Vec<String> = from
                .into_iter()
                .filter(|other| reach(other).contains(module))
                .collect();
            if !out.contains(&circle) {
                out.push(circle);
            }
        }
    }
    out
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    for name in ["lock-core", "lock-tower", "lock-macros", "lockctl"] {
        let src = crate_src(name);
        assert!(
            modules(&src).len() > 2,
            "{name}: no modules found at {src:?}"
        );
        let circles = circles(&src);
        assert!(circles.is_empty(), "{name}: import circles {circles:?}");
    }
}

#[test]
fn the_checker_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let write = |file: &str, text: &str| std::fs::write(dir.path().join(file), text).unwrap();
    write("lib.rs", "mod a; mod b; mod c;");
    write(
        "a.rs",
        "use crate::b::X;\n// crate::c in a comment does not count",
    );
    write("b.rs", "use crate::{c::{Y, Z}, a};");
    write("c.rs", "/* crate::a */ pub struct Y;");
    assert_eq!(
        circles(dir.path()),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
    write("b.rs", "use crate::c::Y;");
    assert!(circles(dir.path()).is_empty());
}

//! The crates' module structure: every import points down, so the imports between the files
//! of each crate form no cycle.
//!
//! Each crate's `src` is a graph with one node per `.rs` file (the root `lib.rs` or `main.rs`
//! and every `mod.rs` included) and an arrow from a file to every other file of the crate that
//! a path in its code names. The paths read are those that start with `crate::`, `$crate::`,
//! `super::` (any number of them) or `self::`, and those whose first name is a module file
//! below the file's own module (`use child::X`, which Rust reads as `self::child::X`); comments
//! and string and char literals are left out. A path names the file of the longest run of its
//! modules that is a file (`x.rs`, or `x/mod.rs`): `crate::a::b::X` is `a/b.rs` if there is
//! one, else `a.rs` or `a/mod.rs`, else the root. A grouped import is one path per item, and
//! an item that is not a module names the module the group is in. `super` in an inline module
//! (`mod tests { use super::*; }`) is the file itself, and a file naming itself is no arrow.
//! `mod x;` is no arrow.
//!
//! A second check keeps the older rule between the top-level modules: a folder is one module
//! there, so a folder whose files import a module that imports another of its files is caught
//! even when no single chain of files closes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// A module's path from the crate root: `[]` is the root, `["a", "b"]` is `a::b`.
type Module = Vec<String>;

/// Arrows between nodes (files, or top-level modules): node → (node it imports → the paths
/// that tie them, each with its line, and between top-level modules with its file).
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The module a file is (`a/b.rs` is `a::b`, `a/mod.rs` is `a`, `lib.rs` the root).
fn module_of(file: &str) -> Module {
    let mut module: Module = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    let root = module.len() == 1 && (module[0] == "lib" || module[0] == "main");
    if root || module.last().is_some_and(|last| last == "mod") {
        module.pop();
    }
    module
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// How many characters from `i` are a comment or a string or char literal (0 if none).
fn skipped(chars: &[char], i: usize) -> usize {
    let at = |j: usize| chars.get(j).copied().unwrap_or('\0');
    let word_start = |j: usize| j == 0 || !is_ident_char(chars[j - 1]);
    let end_of = |from: usize, close: &str| {
        let close: Vec<char> = close.chars().collect();
        (from..chars.len())
            .find(|&j| chars[j..].starts_with(&close))
            .map_or(chars.len(), |j| j + close.len())
    };
    match (at(i), at(i + 1), at(i + 2)) {
        ('/', '/', _) => {
            (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len())
                - i
        }
        ('/', '*', _) => {
            let (mut depth, mut j) = (0, i);
            while j < chars.len() {
                match (at(j), at(j + 1)) {
                    ('/', '*') => (depth, j) = (depth + 1, j + 2),
                    ('*', '/') if depth == 1 => return j + 2 - i,
                    ('*', '/') => (depth, j) = (depth - 1, j + 2),
                    _ => j += 1,
                }
            }
            chars.len() - i
        }
        ('"', _, _) => {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            (j + 1).min(chars.len()) - i
        }
        ('r', '"' | '#', _)
            if word_start(i) || (i > 0 && chars[i - 1] == 'b' && word_start(i - 1)) =>
        {
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if at(i + 1 + hashes) != '"' {
                return 0; // a raw identifier, `r#type`
            }
            end_of(i + 2 + hashes, &format!("\"{}", "#".repeat(hashes))) - i
        }
        ('\'', '\\', _) => end_of(i + 3, "'") - i,
        ('\'', _, '\'') => 3,
        _ => 0, // a lifetime, or code
    }
}

/// The text without comments and string and char literals, lines kept.
fn code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match skipped(&chars, i) {
            0 => {
                out.push(chars[i]);
                i += 1;
            }
            n => {
                out.push(' ');
                out.extend(chars[i..i + n].iter().filter(|&&c| c == '\n'));
                i += n;
            }
        }
    }
    out
}

struct Token<'a> {
    text: &'a str,
    line: usize,
}

/// The code's tokens: names (`$crate` is one), `::`, and single characters.
fn tokens(code: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = code.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        let mut end = start + c.len_utf8();
        if c == '\n' {
            line += 1;
            continue;
        } else if c.is_whitespace() {
            continue;
        } else if is_ident_char(c) || c == '$' {
            while let Some(&(i, c)) = chars.peek().filter(|(_, c)| is_ident_char(*c)) {
                end = i + c.len_utf8();
                chars.next();
            }
        } else if c == ':' && chars.peek().is_some_and(|&(_, c)| c == ':') {
            chars.next();
            end += 1;
        }
        out.push(Token {
            text: &code[start..end],
            line,
        });
    }
    out
}

fn is_name(token: Option<&Token<'_>>) -> bool {
    token.is_some_and(|t| t.text.starts_with(|c: char| is_ident_char(c) || c == '$'))
}

/// A path found in a file: the module it is read in (the file's, with the inline modules
/// around it), its names (`*` for a glob), its line.
struct Found {
    scope: Module,
    names: Vec<String>,
    line: usize,
}

/// Reads the path that starts at token `i` after the names `names`, one per item of its
/// groups, into `out`; returns the index of the first token after it.
fn spell(
    tokens: &[Token<'_>],
    mut i: usize,
    mut names: Vec<String>,
    out: &mut Vec<Found>,
) -> usize {
    let found = |names: Vec<String>, line: usize| Found {
        scope: Vec::new(),
        names,
        line,
    };
    while is_name(tokens.get(i)) {
        names.push(tokens[i].text.to_owned());
        i += 1;
        if tokens.get(i).map(|t| t.text) != Some("::") {
            break;
        }
        i += 1;
        match tokens.get(i).map(|t| t.text) {
            Some("{") => {
                i += 1;
                while let Some(token) = tokens.get(i) {
                    match token.text {
                        "}" => return i + 1,
                        "*" => {
                            out.push(found(
                                [names.clone(), vec!["*".into()]].concat(),
                                token.line,
                            ));
                            i += 1;
                        }
                        _ if is_name(Some(token)) => {
                            i = spell(tokens, i, names.clone(), out);
                            // `X as Y`: the rename is no path.
                            while tokens.get(i).is_some_and(|t| !matches!(t.text, "," | "}")) {
                                i += 1;
                            }
                        }
                        _ => i += 1,
                    }
                }
                return i;
            }
            Some("*") => {
                names.push("*".into());
                i += 1;
                break;
            }
            _ => {}
        }
    }
    out.push(found(names, tokens[i - 1].line));
    i
}

/// Every path in the code of the file that is module `module` that may name a module: each
/// name followed by `::` that does not continue a path or follow a `.` (`x.take::<T>()`).
fn paths(module: &[String], code: &str) -> Vec<Found> {
    let tokens = tokens(code);
    let mut braces: Vec<Option<String>> = Vec::new(); // the inline module each `{` opens
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let before = i.checked_sub(1).map(|j| tokens[j].text);
        match tokens[i].text {
            "{" => {
                let opens = i >= 2 && tokens[i - 2].text == "mod";
                braces.push(opens.then(|| tokens[i - 1].text.to_owned()));
                i += 1;
            }
            "}" => {
                braces.pop();
                i += 1;
            }
            _ if is_name(tokens.get(i))
                && tokens.get(i + 1).is_some_and(|t| t.text == "::")
                && !matches!(before, Some("::" | ".")) =>
            {
                let scope: Module = module
                    .iter()
                    .chain(braces.iter().flatten())
                    .cloned()
                    .collect();
                let mut found = Vec::new();
                i = spell(&tokens, i, Vec::new(), &mut found);
                out.extend(found.into_iter().map(|f| Found {
                    scope: scope.clone(),
                    ..f
                }));
            }
            _ => i += 1,
        }
    }
    out
}

/// The module file a path names, if it names one (see the file's docs).
fn resolve(files: &BTreeMap<Module, String>, found: &Found) -> Option<Module> {
    let mut at = found.scope.clone();
    let (first, rest) = found.names.split_first()?;
    match first.as_str() {
        "crate" | "$crate" => at.clear(),
        "self" => {}
        "super" => {
            at.pop()?;
        }
        child => {
            at.push(child.to_owned());
            if !files.contains_key(&at) {
                return None; // not a module file below this one: another crate, a type, ...
            }
        }
    }
    for name in rest {
        match name.as_str() {
            "super" => {
                at.pop()?;
            }
            "self" => {}
            name => {
                at.push(name.to_owned());
                if !files.contains_key(&at) {
                    at.pop();
                    break;
                }
            }
        }
    }
    while !files.contains_key(&at) {
        at.pop()?;
    }
    Some(at)
}

/// The module files of a crate given as (file relative to `src`, text) pairs, by module.
fn modules(sources: &[(String, String)]) -> BTreeMap<Module, String> {
    let mut files: BTreeMap<Module, String> = BTreeMap::new();
    for (file, _) in sources {
        let before = files.insert(module_of(file), file.clone());
        assert!(before.is_none(), "{file} and {before:?} are one module");
    }
    files
}

/// The file-level import graph of a crate given as (file relative to `src`, text) pairs.
fn graph(sources: &[(String, String)]) -> Graph {
    let files = modules(sources);
    let mut graph = Graph::new();
    for (file, text) in sources {
        let arrows = graph.entry(file.clone()).or_default();
        for found in paths(&module_of(file), &code(text)) {
            let Some(target) = resolve(&files, &found) else {
                continue;
            };
            if files[&target] != *file {
                let tie = format!("{} (line {})", found.names.join("::"), found.line);
                arrows
                    .entry(files[&target].clone())
                    .or_default()
                    .insert(tie);
            }
        }
    }
    graph
}

/// The graph of the top-level modules (a folder is one), the root left out.
fn top_level(graph: &Graph) -> Graph {
    let top = |file: &str| module_of(file).first().cloned();
    let mut out = Graph::new();
    for (file, arrows) in graph {
        let Some(from) = top(file) else { continue };
        let node = out.entry(from.clone()).or_default();
        for (target, ties) in arrows {
            match top(target) {
                Some(to) if to != from => {
                    let ties = ties.iter().map(|tie| format!("{file}: {tie}"));
                    node.entry(to).or_default().extend(ties);
                }
                _ => {}
            }
        }
    }
    out
}

/// The shortest chain of arrows from `from` to `to` (both included), if there is one.
fn chain<'a>(graph: &'a Graph, from: &'a str, to: &str) -> Option<Vec<&'a str>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(node) = queue.pop_front() {
        if node == to {
            let mut out = vec![node];
            while let Some(&before) = came_from.get(out.last().unwrap()) {
                out.push(before);
            }
            out.reverse();
            return Some(out);
        }
        for next in graph[node].keys() {
            if next != from && !came_from.contains_key(next.as_str()) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Cycles that between them hold every arrow that is on any cycle: each a chain of nodes,
/// the last importing the first.
fn cycles(graph: &Graph) -> Vec<Vec<&str>> {
    let mut covered: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut out = Vec::new();
    for (from, arrows) in graph {
        for to in arrows.keys() {
            if covered.contains(&(from.as_str(), to.as_str())) {
                continue;
            }
            if let Some(back) = chain(graph, to, from) {
                let cycle: Vec<&str> = [vec![from.as_str()], back].concat();
                covered.extend(cycle.windows(2).map(|pair| (pair[0], pair[1])));
                out.push(cycle[..cycle.len() - 1].to_vec());
            }
        }
    }
    out
}

/// Each cycle of the graph, as its chain and the paths that tie each step, or `None`.
fn report(name: &str, graph: &Graph) -> Option<String> {
    let cycles = cycles(graph);
    if cycles.is_empty() {
        return None;
    }
    // Knots: the files that import each other, the union of the cycles that share a file.
    let mut knots: Vec<BTreeSet<&str>> = Vec::new();
    for cycle in &cycles {
        let mut knot: BTreeSet<&str> = cycle.iter().copied().collect();
        knots.retain(|other| {
            let apart = other.is_disjoint(&knot);
            if !apart {
                knot.extend(other);
            }
            apart
        });
        knots.push(knot);
    }
    knots.sort();
    let mut out = format!(
        "{name}: {} import cycle(s) in {} knot(s); every import must point down, so each \
         cycle needs one of its arrows removed or turned around.\n",
        cycles.len(),
        knots.len()
    );
    for knot in &knots {
        out += &format!(
            "  knot: {}\n",
            Vec::from_iter(knot.iter().copied()).join(", ")
        );
    }
    for cycle in &cycles {
        let closed: Vec<&str> = cycle.iter().chain(&cycle[..1]).copied().collect();
        out += &format!("  {}\n", closed.join(" → "));
        for pair in closed.windows(2) {
            let ties: Vec<&str> = graph[pair[0]][pair[1]].iter().map(String::as_str).collect();
            out += &format!("    {} → {} via {}\n", pair[0], pair[1], ties.join(", "));
        }
    }
    Some(out)
}

/// The `.rs` files under `src`, as (path relative to `src` with `/`, text) pairs.
fn sources(src: &Path) -> Vec<(String, String)> {
    fn walk(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(src, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src).unwrap().components();
                let relative: Vec<_> = relative.map(|c| c.as_os_str().to_string_lossy()).collect();
                out.push((relative.join("/"), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(src, src, &mut out);
    out.sort();
    out
}

const CRATES: [&str; 6] = [
    "lock-core",
    "lock-tower",
    "lockctl",
    "lock-macros",
    "tools/lock-bench",
    "tests",
];

fn crate_graph(name: &str) -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src");
    let sources = sources(&src);
    let roots = sources
        .iter()
        .filter(|(file, _)| module_of(file).is_empty());
    assert_eq!(roots.count(), 1, "{name}: no one root file at {src:?}");
    let graph = graph(&sources);
    let arrows: usize = graph.values().map(BTreeMap::len).sum();
    assert!(
        sources.len() > 2 && arrows > 0,
        "{name}: {} files, {arrows} imports found at {src:?}",
        sources.len()
    );
    graph
}

#[test]
fn no_crate_has_an_import_cycle_between_its_files() {
    let reports: Vec<String> = CRATES
        .iter()
        .filter_map(|name| report(name, &crate_graph(name)))
        .collect();
    assert!(reports.is_empty(), "{}", reports.join("\n"));
}

#[test]
fn no_crate_has_an_import_cycle_between_its_top_level_modules() {
    let reports: Vec<String> = CRATES
        .iter()
        .filter_map(|name| report(name, &top_level(&crate_graph(name))))
        .collect();
    assert!(reports.is_empty(), "{}", reports.join("\n"));
}

/// A crate from (file, text) pairs.
fn tree(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(file, text)| (file.to_string(), text.to_string()))
        .collect()
}

/// A crate with a circle in the folder `a/` (`a/mod.rs` re-exports `self::b::X`, `a/b.rs`
/// uses `super::Y`) and one through `lib.rs` (`lib.rs` imports `c.rs`, which names
/// `crate::X`, a re-export of `lib.rs`).
const CYCLIC: [(&str, &str); 5] = [
    (
        "lib.rs",
        "mod a;\nmod c;\nmod d;\npub use self::a::X;\npub use c::Z;",
    ),
    ("a/mod.rs", "mod b;\npub use self::b::X;\npub struct Y;"),
    (
        "a/b.rs",
        "use super::Y;\npub struct X(Y);\n#[cfg(test)]\nmod tests {\n    use super::*;\n}",
    ),
    (
        "c.rs",
        "// use crate::d::W; in a comment\nconst S: &str = \"crate::d::W\";\n\
         pub struct Z;\nfn f(_: &'static crate::X) -> char { '\"' }",
    ),
    ("d.rs", "/* crate::c::Z */ pub struct W;"),
];

#[test]
fn the_checker_finds_a_circle_in_a_folder_and_one_through_lib_rs() {
    let graph = graph(&tree(&CYCLIC));
    assert_eq!(
        cycles(&graph),
        vec![vec!["a/b.rs", "a/mod.rs"], vec!["c.rs", "lib.rs"]]
    );
    let report = report("planted", &graph).unwrap();
    for line in [
        "a/b.rs → a/mod.rs via super::Y (line 1)",
        "a/mod.rs → a/b.rs via self::b::X (line 2)",
        "knot: a/b.rs, a/mod.rs\n  knot: c.rs, lib.rs\n",
        "c.rs → lib.rs via crate::X (line 4)",
        "lib.rs → c.rs via c::Z (line 5)",
    ] {
        assert!(report.contains(line), "{line:?} not in\n{report}");
    }
    // Comments, literals, `mod d;` and the tests' `use super::*` are no arrows.
    assert!(!graph.values().any(|arrows| arrows.contains_key("d.rs")));
    assert!(graph["a/b.rs"].keys().eq(["a/mod.rs"]));
}

#[test]
fn an_acyclic_crate_passes() {
    // The same crate with the back arrows turned down: `Y` lives in its own file below `b`,
    // and `c.rs` names `X` by its module instead of through `lib.rs`.
    let mut files = CYCLIC;
    files[1].1 = "mod b;\nmod y;\npub use self::b::X;\npub use y::Y;";
    files[2].1 = "use super::y::Y;\npub struct X(Y);";
    files[3].1 = "pub struct Z;\nfn f(_: &crate::a::b::X) {}";
    let mut files = files.to_vec();
    files.push(("a/y.rs", "pub struct Y;"));
    let graph = graph(&tree(&files));
    assert_eq!(report("acyclic", &graph), None);
    let arrows: Vec<(&str, &str)> = graph
        .iter()
        .flat_map(|(from, arrows)| arrows.keys().map(move |to| (from.as_str(), to.as_str())))
        .collect();
    assert_eq!(
        arrows,
        [
            ("a/b.rs", "a/y.rs"),
            ("a/mod.rs", "a/b.rs"),
            ("a/mod.rs", "a/y.rs"),
            ("c.rs", "a/b.rs"),
            ("lib.rs", "a/mod.rs"),
            ("lib.rs", "c.rs"),
        ]
    );
}

#[test]
fn paths_resolve_to_the_longest_run_of_modules_that_is_a_file() {
    let files = tree(&[
        ("main.rs", "mod x; mod p;"),
        // A folder module declared as `x.rs` + `x/`; a group with an item per module.
        (
            "x.rs",
            "mod y; mod z;\nuse crate::{p::{self, q::Q}, x::y::{Y as Why, *}};",
        ),
        // From `x/y/w.rs` (module `x::y::w`), `super::super` is `x`; `$crate` is the root.
        ("x/y.rs", "mod w;"),
        ("x/y/w.rs", "fn f() { super::super::z::g(); $crate::p::P; }"),
        // In an inline module, `super` is the file and `super::super` its parent.
        (
            "x/z.rs",
            "mod inner { fn g() { super::super::y::w::h(); super::h(); } }",
        ),
        ("p/mod.rs", "pub mod q; pub struct P;"),
        // `x.take::<T>()` and `Vec::new` are no paths; `r#"crate::x"#` is a literal.
        (
            "p/q.rs",
            "fn f(v: Vec<u8>) { v.take::<u8>(); Vec::new(); r#\"crate::x\"#; }",
        ),
    ]);
    let graph = graph(&files);
    let arrows: Vec<(&str, &str, Vec<&str>)> = graph
        .iter()
        .flat_map(|(from, arrows)| {
            arrows.iter().map(move |(to, ties)| {
                let ties = ties.iter().map(String::as_str).collect();
                (from.as_str(), to.as_str(), ties)
            })
        })
        .collect();
    let expected: Vec<(&str, &str, Vec<&str>)> = vec![
        ("x.rs", "p/mod.rs", vec!["crate::p::self (line 2)"]),
        ("x.rs", "p/q.rs", vec!["crate::p::q::Q (line 2)"]),
        (
            "x.rs",
            "x/y.rs",
            vec!["crate::x::y::* (line 2)", "crate::x::y::Y (line 2)"],
        ),
        ("x/y/w.rs", "p/mod.rs", vec!["$crate::p::P (line 1)"]),
        ("x/y/w.rs", "x/z.rs", vec!["super::super::z::g (line 1)"]),
        ("x/z.rs", "x/y/w.rs", vec!["super::super::y::w::h (line 1)"]),
    ];
    assert_eq!(arrows, expected);
}

#[test]
fn the_top_level_check_finds_a_circle_no_chain_of_files_closes() {
    // `x` imports the folder `y` through `y/mod.rs`, and `y/sub.rs` imports `x`: no file
    // reaches itself, but the folder `y` and `x` import each other.
    let files = tree(&[
        ("lib.rs", "mod x; mod y;"),
        ("x.rs", "use crate::y::Y;"),
        ("y/mod.rs", "mod sub; pub struct Y;"),
        ("y/sub.rs", "use crate::x;"),
    ]);
    let graph = graph(&files);
    assert_eq!(report("files", &graph), None);
    let top = top_level(&graph);
    assert_eq!(cycles(&top), vec![vec!["x", "y"]]);
    let report = report("modules", &top).unwrap();
    assert!(
        report.contains("y → x via y/sub.rs: crate::x (line 1)"),
        "{report}"
    );
}

/// lock-tower's layer modules: each a sibling over the pieces they share.
const TOWER_LAYERS: [&str; 3] = ["lock", "rate", "idempotency"];

/// The layer module `file` belongs to, if it belongs to one.
fn tower_layer(file: &str) -> Option<&'static str> {
    let top = file.split('/').next()?;
    TOWER_LAYERS
        .into_iter()
        .find(|layer| top == *layer || top.strip_suffix(".rs") == Some(layer))
}

/// Whether `file` is one of the pieces lock-tower's layers share: `keyed/`, `rejection*`,
/// `response.rs`, `body.rs`, `config.rs`.
fn tower_shared(file: &str) -> bool {
    file.starts_with("keyed/")
        || file.starts_with("rejection")
        || ["response.rs", "body.rs", "config.rs"].contains(&file)
}

/// The arrows of a lock-tower graph that break its layering: a shared piece importing a
/// layer, or a layer importing another layer. Each as `from → to via ties`.
fn tower_layering_breaks(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (from, arrows) in graph {
        for (to, ties) in arrows {
            let Some(to_layer) = tower_layer(to) else {
                continue;
            };
            let breaks = match tower_layer(from) {
                Some(from_layer) => from_layer != to_layer,
                None => tower_shared(from),
            };
            if breaks {
                let ties: Vec<&str> = ties.iter().map(String::as_str).collect();
                out.push(format!("{from} → {to} via {}", ties.join(", ")));
            }
        }
    }
    out
}

#[test]
fn lock_towers_layers_are_siblings_over_the_pieces_they_share() {
    let breaks = tower_layering_breaks(&crate_graph("lock-tower"));
    assert!(
        breaks.is_empty(),
        "lock-tower: nothing under keyed/, rejection*, response.rs, body.rs or config.rs may \
         import a layer (lock/, rate/, idempotency/), and no layer another; pass the values \
         the shared piece needs, or a trait the layer implements:\n  {}",
        breaks.join("\n  ")
    );
}

#[test]
fn the_layering_check_finds_a_shared_piece_or_a_layer_reaching_into_a_layer() {
    let files = tree(&[
        ("lib.rs", "mod body;\nmod keyed;\nmod lock;\nmod rate;"),
        ("keyed/mod.rs", "mod name;"),
        ("keyed/name.rs", "use crate::lock::settings::Settings;"),
        ("body.rs", "use crate::lock::request_lock::RequestLock;"),
        ("lock/mod.rs", "mod settings;\nmod request_lock;"),
        (
            "lock/settings.rs",
            "use crate::keyed::name::f;\npub struct Settings;",
        ),
        ("lock/request_lock.rs", "use super::settings::Settings;"),
        ("rate/mod.rs", "use crate::lock::settings::Settings;"),
    ]);
    let breaks = tower_layering_breaks(&graph(&files));
    assert_eq!(
        breaks,
        [
            "body.rs → lock/request_lock.rs via crate::lock::request_lock::RequestLock (line 1)",
            "keyed/name.rs → lock/settings.rs via crate::lock::settings::Settings (line 1)",
            "rate/mod.rs → lock/settings.rs via crate::lock::settings::Settings (line 1)",
        ]
    );
}

/// Whether `file` of lock-core is one of the wire room's dialects: the script table
/// (`wire/script.rs`) or the native commands (`wire/native/`).
fn is_dialect(file: &str) -> bool {
    file == "wire/script.rs" || file.starts_with("wire/native/")
}

/// Whether `file` of lock-core may name the dialects: the wire room itself, and the
/// transport (`backend/`), which sends them.
fn may_name_dialects(file: &str) -> bool {
    file.starts_with("wire/") || file.starts_with("backend/")
}

/// The paths in lock-core's files outside `wire/` and `backend/` that name a dialect of the
/// wire room: a path that resolves to one of its files (`use crate::wire::script::Op`,
/// `use crate::wire::{native, ...}`), or one that spells `wire::script` or `wire::native`
/// (through `use crate::wire;`). Each as `file: path (line n)`.
fn dialect_leaks(sources: &[(String, String)]) -> Vec<String> {
    let files = modules(sources);
    let mut out = Vec::new();
    for (file, text) in sources {
        if may_name_dialects(file) {
            continue;
        }
        for found in paths(&module_of(file), &code(text)) {
            let resolves = resolve(&files, &found).is_some_and(|to| is_dialect(&files[&to]));
            let spells = found
                .names
                .windows(2)
                .any(|w| w[0] == "wire" && (w[1] == "script" || w[1] == "native"));
            if resolves || spells {
                out.push(format!(
                    "{file}: {} (line {})",
                    found.names.join("::"),
                    found.line
                ));
            }
        }
    }
    out
}

fn lock_core_sources() -> Vec<(String, String)> {
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("lock-core")
            .join("src"),
    )
}

#[test]
fn only_the_wire_room_and_the_transport_name_the_dialects() {
    let sources = lock_core_sources();
    assert!(
        sources.iter().any(|(file, _)| is_dialect(file)),
        "lock-core has no wire/script.rs or wire/native/: {} files read",
        sources.len()
    );
    let leaks = dialect_leaks(&sources);
    assert!(
        leaks.is_empty(),
        "lock-core: outside wire/ and backend/, nothing names wire::script or wire::native; \
         ask the wire room (a re-export in wire/mod.rs, a Command method) instead:\n  {}",
        leaks.join("\n  ")
    );
}

#[test]
fn the_dialect_check_finds_every_way_of_naming_a_dialect() {
    let files = tree(&[
        ("lib.rs", "mod backend;\nmod engine;\nmod wire;\nmod info;"),
        (
            "wire/mod.rs",
            "pub mod native;\npub mod script;\npub use script::Mode;",
        ),
        ("wire/script.rs", "pub struct Call;\npub struct Mode;"),
        ("wire/native/mod.rs", "mod call;\npub use call::Call;"),
        (
            "wire/native/call.rs",
            "use crate::wire::script::Mode;\npub struct Call;",
        ),
        ("backend/mod.rs", "use crate::wire::script::{Call, Mode};"),
        (
            "engine/mod.rs",
            "use crate::wire::{Mode, native, script};\nfn f(_: &script::Call) {}",
        ),
        (
            "info.rs",
            "// crate::wire::native::Call in a comment\nuse crate::wire;\n\
             use crate::wire::Mode;\nfn g() { wire::native::Call; }",
        ),
    ]);
    assert_eq!(
        dialect_leaks(&files),
        [
            "engine/mod.rs: crate::wire::native (line 1)",
            "engine/mod.rs: crate::wire::script (line 1)",
            "info.rs: wire::native::Call (line 4)",
        ]
    );
}

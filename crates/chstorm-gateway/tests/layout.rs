//! The gateway's shape, measured: no import cycle between its modules, no function over
//! [`MAX_FN_LINES`] lines and no file over [`MAX_FILE_CODE_LINES`] lines of code. Tests are left
//! out: files named `tests.rs` or under a `tests/` folder, and `#[cfg(test)]` modules.
//!
//! * A module is a source file (`native/session.rs` is `native::session`, a `mod.rs` names its
//!   folder). It imports another when it names it in a path: `crate::a::b`, `super::b`,
//!   `self::b`. A module naming its own descendants (declaring or re-exporting its children) is
//!   not counted, nor is a descendant naming its ancestor: a folder and its files are one unit.
//!   A cycle between two folders is found as a cycle between their files.
//! * A function's lines run from its `fn` line to its closing brace.
//! * Lines of code are lines that are neither blank nor only a comment.
//!
//! The checks read the sources as text, with a lexer that knows Rust's comments, strings, chars
//! and lifetimes; they run over the crates listed in [`CRATES`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function may be, in lines.
const MAX_FN_LINES: usize = 100;
/// The most lines of code a file may have.
const MAX_FILE_CODE_LINES: usize = 700;
/// The crates whose `src/` is checked, relative to this crate's folder.
const CRATES: &[&str] = &[".", "../chstorm-sql"];

/// A source file reduced to what the checks need.
struct Source {
    /// `a::b` for `src/a/b.rs` or `src/a/b/mod.rs`; empty for `lib.rs`.
    module: Vec<String>,
    path: PathBuf,
    /// The text with comments, strings and chars blanked (newlines kept), test modules blanked.
    code: String,
    /// The original lines.
    lines: Vec<String>,
}

fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("readable src").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "tests" {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// Blanks comments, string and char literals (keeping newlines), so braces and paths are real.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r' && matches!(b.get(i + 1), Some(b'"' | b'#')) && !ident_before(b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            out.extend(std::iter::repeat_n(b' ', j + 1 - i));
            i = j + 1;
            while i < b.len() && !b[i..].starts_with(&close) {
                blank(&mut out, b[i]);
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len().min(b.len() - i)));
            i += close.len();
        } else if c == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): a lifetime has no closing quote.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| i + 2 + p)
            } else {
                let ch_len =
                    std::str::from_utf8(&b[i + 1..]).ok().and_then(|s| s.chars().next()).map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 1 + ch_len)
            };
            match end {
                Some(e) => {
                    out.extend(std::iter::repeat_n(b' ', e + 1 - i));
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 boundaries")
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Index of the `}` that closes the `{` at `open`.
fn closing(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len() - 1
}

/// Blanks `#[cfg(test)]` items (test modules and test-only functions).
fn drop_tests(code: &str) -> String {
    let mut b = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(p) = code[from..].find("#[cfg(test)]").map(|p| p + from) {
        from = p + 1;
        // Only items: a field or an expression under `#[cfg(test)]` stays.
        let next = code[p + "#[cfg(test)]".len()..].trim_start();
        let item = ["mod ", "fn ", "pub ", "impl", "use ", "struct ", "enum ", "const ", "static ", "async ", "#["];
        if !item.iter().any(|k| next.starts_with(k)) {
            continue;
        }
        let open = match b[p..].iter().position(|&c| c == b'{' || c == b';') {
            Some(o) if b[p + o] == b'{' => p + o,
            Some(o) => {
                from = p + o;
                continue;
            }
            None => break,
        };
        let close = closing(&b, open);
        for c in &mut b[p..=close] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = close;
    }
    String::from_utf8(b).expect("ASCII blanks")
}

fn load(src: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable source");
            let code = drop_tests(&strip(&text));
            Source { module: module_of(src, &path), lines: text.lines().map(str::to_string).collect(), code, path }
        })
        .collect()
}

fn sources() -> Vec<(String, Vec<Source>)> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    CRATES.iter().map(|c| (c.to_string(), load(&here.join(c).join("src")))).collect()
}

/// Lines of code: not blank once comments are gone.
fn code_lines(s: &Source) -> usize {
    s.code.lines().filter(|l| !l.trim().is_empty()).count()
}

/// Every function's (name, first line, length in lines).
fn functions(s: &Source) -> Vec<(String, usize, usize)> {
    let b = s.code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = s.code[from..].find("fn ").map(|p| p + from) {
        from = p + 3;
        if ident_before(b, p) {
            continue;
        }
        let name: String = s.code[p + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue; // `fn(` types
        }
        // The body opens at the first `{` before any `;` (a declaration without a body has none).
        let Some(o) = b[p..].iter().position(|&c| c == b'{' || c == b';') else { break };
        if b[p + o] == b';' {
            continue;
        }
        let close = closing(b, p + o);
        let line = |at: usize| s.code[..at].matches('\n').count() + 1;
        out.push((name, line(p), line(close) - line(p) + 1));
    }
    out
}

/// The modules a file names: `crate::a::b` -> the longest existing module prefix of `a::b`.
fn imports(s: &Source, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let b = s.code.as_bytes();
    for (start, base) in [("crate::", Vec::new()), ("super::", parent(&s.module)), ("self::", s.module.clone())] {
        let mut from = 0;
        while let Some(p) = s.code[from..].find(start).map(|p| p + from) {
            from = p + start.len();
            if ident_before(b, p) {
                continue;
            }
            let mut path = base.clone();
            let mut rest = &s.code[p + start.len()..];
            // `super::super::x`
            while let Some(r) = rest.strip_prefix("super::") {
                path.pop();
                rest = r;
            }
            for seg in rest.split("::") {
                let seg: String = seg.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if seg.is_empty() {
                    break;
                }
                path.push(seg);
            }
            // `use crate::{a, b::c}` names each of a group's modules.
            let group = rest.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
            if group.starts_with('{') {
                let inner = &group[1..closing(group.as_bytes(), 0)];
                for item in inner.split(',') {
                    let mut p2 = path.clone();
                    for seg in item.trim().split("::") {
                        let seg: String = seg.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        if seg.is_empty() {
                            break;
                        }
                        p2.push(seg);
                    }
                    out.extend(longest_module(&p2, known));
                }
            }
            out.extend(longest_module(&path, known));
        }
    }
    out
}

fn parent(m: &[String]) -> Vec<String> {
    m[..m.len().saturating_sub(1)].to_vec()
}

fn longest_module(path: &[String], known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains(p))
}

/// Whether `a` is `b` or one of its ancestors or descendants.
fn related(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Every import cycle, as a list of modules, found by Tarjan's strongly connected components.
fn cycles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on: BTreeSet<&'g Vec<String>>,
        out: Vec<Vec<String>>,
    }
    impl<'g> T<'g> {
        fn visit(&mut self, v: &'g Vec<String>) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let Some((w, _)) = self.g.get_key_value(w) else { continue };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(if w.is_empty() { "crate".to_string() } else { w.join("::") });
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

fn import_graph(files: &[Source]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let known: BTreeSet<Vec<String>> = files.iter().map(|s| s.module.clone()).collect();
    files
        .iter()
        .map(|s| {
            let to = imports(s, &known).into_iter().filter(|m| !related(m, &s.module)).collect();
            (s.module.clone(), to)
        })
        .collect()
}

#[test]
fn no_import_cycle_between_modules() {
    let mut found = Vec::new();
    for (krate, files) in sources() {
        for c in cycles(&import_graph(&files)) {
            found.push(format!("{krate}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import cycles (break them by moving what both need below both):\n{}", found.join("\n"));
}

#[test]
fn no_function_over_the_limit() {
    let mut found = Vec::new();
    for (_, files) in sources() {
        for s in &files {
            for (name, line, len) in functions(s) {
                if len > MAX_FN_LINES {
                    found.push(format!("{}:{line}: fn {name} is {len} lines", s.path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into named steps):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_file_over_the_limit() {
    let mut found = Vec::new();
    for (_, files) in sources() {
        for s in &files {
            let n = code_lines(s);
            if n > MAX_FILE_CODE_LINES {
                found.push(format!("{}: {n} lines of code", s.path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files over {MAX_FILE_CODE_LINES} lines of code (split them by subject):\n{}",
        found.join("\n")
    );
}

/// The checks themselves, on small known inputs, so that a check that cannot fail is caught.
#[test]
fn the_checks_find_what_they_look_for() {
    let src = |module: &str, text: &str| Source {
        module: if module.is_empty() { vec![] } else { module.split("::").map(str::to_string).collect() },
        path: PathBuf::from(module),
        code: drop_tests(&strip(text)),
        lines: text.lines().map(str::to_string).collect(),
    };
    let files = vec![
        src("", "mod a; mod b; mod n;"),
        src("a", "use crate::b::X; // crate::c\nfn f() { let s = \"crate::n\"; }"),
        src("b", "use crate::{a::Y, n};"),
        src("n", "pub mod q; pub use q::Z;"),
        src("n::q", "use super::super::n::r; use super::Z;"),
        src("n::r", "#[cfg(test)]\nmod tests { use crate::a::T; }\nfn g<'a>(x: &'a str) -> char { '{' }"),
        src("n::s", "fn h() -> S {\n    S {\n        #[cfg(test)]\n        waited,\n        x,\n    }\n}\nfn i() { }"),
    ];
    let g = import_graph(&files);
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
    assert!(g[&vec!["n".to_string(), "r".to_string()]].is_empty(), "test modules and ancestors are left out");
    let long = src("l", &format!("fn long() {{\n{}}}\nfn short() {{ }}\n", "    x();\n".repeat(120)));
    assert_eq!(functions(&long), vec![("long".to_string(), 1, 122), ("short".to_string(), 123, 1)]);
    assert_eq!(code_lines(&src("c", "// one\n\nfn a() {}\n/* two\n */\n")), 1);
    assert_eq!(files[5].lines.len(), 3);
    let fields = functions(&files[6]);
    assert_eq!(fields, vec![("h".to_string(), 1, 7), ("i".to_string(), 8, 1)], "a field under cfg(test) is no item");
}

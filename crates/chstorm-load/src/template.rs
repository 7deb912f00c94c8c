//! Query templates with placeholders.
//!
//! A placeholder is written `{name:kind(args)}` and replaced by a fresh value for every request:
//!
//! | kind               | value                                                        |
//! |--------------------|--------------------------------------------------------------|
//! | `uniform(a,b)`     | integer in `[a, b]`, each equally likely (decimals if `a` or `b` has a `.`) |
//! | `zipf(n,s)`        | integer rank in `[1, n]`, P(k) ∝ 1/k^s (1 is the most frequent) |
//! | `seq(a)`           | `a`, `a+1`, `a+2`, ... shared by all connections of the run    |
//! | `choice(file)`     | a random non-empty line of `file`, inserted verbatim (quote strings yourself) |
//!
//! `{name}` alone repeats the value that `name` got earlier in the same query.
//!
//! Mistakes are errors when the query is parsed, before any run: an unknown function
//! (`{x:unifrom(1,2)}`), a placeholder without its closing brace (`{x:uniform(1,2)`), a `{y}`
//! that no earlier placeholder defined. ClickHouse's own query parameters name a type, which
//! starts with a capital letter (`{id:UInt64}`, `{d:DateTime64(3)}`, also the SQL aliases such as
//! `{p:decimal(10,2)}`), and are left as they are. So is anything in braces inside a string
//! literal, a quoted identifier or a comment (`'{x}'`), unless it is a valid placeholder.
//!
//! Values come from a per-connection RNG seeded from `--seed`, so a run is reproducible for the
//! same seed and concurrency. Rendering writes into a reused buffer and does not allocate.

use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::Distribution;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A bad placeholder, with enough context to fix it.
#[derive(Debug, thiserror::Error)]
#[error("placeholder '{placeholder}': {reason}")]
pub struct TemplateError {
    pub placeholder: String,
    pub reason: String,
}

#[derive(Debug)]
enum Gen {
    Uniform {
        lo: i64,
        hi: i64,
    },
    UniformF {
        lo: f64,
        hi: f64,
    },
    Zipf(rand_distr::Zipf<f64>),
    /// The next value, and the step between values (the number of segments).
    Seq {
        next: AtomicI64,
        step: i64,
    },
    Choice(Vec<String>),
}

#[derive(Debug)]
enum Piece {
    Lit(String),
    /// Index into the template's generators.
    Var(usize),
}

/// A parsed query.
#[derive(Debug)]
pub struct Template {
    source: String,
    base_dir: std::path::PathBuf,
    segments: Vec<Piece>,
    gens: Vec<(String, Gen)>,
    /// The part of the workload whose `seq` values this template sends.
    part: crate::segment::Segment,
}

/// Per-connection rendering state: the RNG and scratch space for this request's values.
pub struct Renderer {
    rng: SmallRng,
    values: Vec<(usize, usize)>,
    scratch: Vec<u8>,
}

impl Renderer {
    pub fn new(rng: SmallRng) -> Renderer {
        Renderer { rng, values: Vec::new(), scratch: Vec::with_capacity(256) }
    }
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }
}

impl Template {
    /// Parses `sql`. Relative `choice(file)` paths are resolved against `base_dir`.
    pub fn parse(sql: &str, base_dir: &Path) -> Result<Arc<Template>, TemplateError> {
        Template::parse_part(sql, base_dir, crate::segment::Segment::WHOLE)
    }

    /// The same query as sent by `part` of the workload: its `seq(a)` placeholders give
    /// `a+I, a+I+N, ...` for segment I of N (see [`crate::segment`]).
    pub fn for_segment(&self, part: crate::segment::Segment) -> Result<Arc<Template>, TemplateError> {
        Template::parse_part(&self.source, &self.base_dir, part)
    }

    fn parse_part(sql: &str, base_dir: &Path, part: crate::segment::Segment) -> Result<Arc<Template>, TemplateError> {
        let mut segments = Vec::new();
        let mut gens: Vec<(String, Gen)> = Vec::new();
        let mut lit = String::new();
        let quoted = quoted_bytes(sql);
        let mut rest = sql;
        while let Some(open) = rest.find('{') {
            lit.push_str(&rest[..open]);
            // Outside string literals, quoted identifiers and comments, mistakes are errors.
            let strict = !quoted[sql.len() - rest.len() + open];
            let after = &rest[open + 1..];
            let close = after.find('}');
            let unclosed = match (close, after.find('{')) {
                (None, _) => Some(after),
                (Some(c), Some(o)) if o < c => Some(&after[..o]),
                _ => None,
            };
            if let (true, Some(text)) = (strict, unclosed) {
                if let Some(kind) = placeholder_kind(text).filter(|k| !is_clickhouse_type(k)) {
                    let shown = text.lines().next().unwrap_or("").trim_end();
                    let shown = &shown[..shown.find(')').map_or(shown.len(), |i| i + 1)];
                    return Err(TemplateError {
                        placeholder: format!("{{{shown}"),
                        reason: format!("no closing '}}' after {kind}(...); write {{{shown}}}"),
                    });
                }
            }
            let Some(close) = close else {
                lit.push_str(&rest[open..]);
                rest = "";
                break;
            };
            let inner = &after[..close];
            match parse_placeholder(inner, &gens, base_dir, strict, part)? {
                Some(Placeholder::New(name, gen)) => {
                    if gens.iter().any(|(n, _)| *n == name) {
                        return Err(err(
                            inner,
                            "this name is already defined in the query; write {name} to reuse its value",
                        ));
                    }
                    flush(&mut lit, &mut segments);
                    gens.push((name, gen));
                    segments.push(Piece::Var(gens.len() - 1));
                }
                Some(Placeholder::Ref(idx)) => {
                    flush(&mut lit, &mut segments);
                    segments.push(Piece::Var(idx));
                }
                None => {
                    lit.push('{');
                    lit.push_str(inner);
                    lit.push('}');
                }
            }
            rest = &after[close + 1..];
        }
        lit.push_str(rest);
        flush(&mut lit, &mut segments);
        Ok(Arc::new(Template { source: sql.to_string(), base_dir: base_dir.to_path_buf(), segments, gens, part }))
    }

    /// Re-parses a changed query text (for instance with a SETTINGS clause appended), keeping
    /// the directory that `choice(file)` paths are relative to and the segment.
    pub fn with_source(&self, sql: &str) -> Result<Arc<Template>, TemplateError> {
        Template::parse_part(sql, &self.base_dir, self.part)
    }

    /// The query as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the query has placeholders.
    pub fn has_placeholders(&self) -> bool {
        !self.gens.is_empty()
    }

    /// Renders a fresh instance into `out` (cleared first).
    pub fn render(&self, r: &mut Renderer, out: &mut Vec<u8>) {
        out.clear();
        r.scratch.clear();
        r.values.clear();
        for (_, gen) in &self.gens {
            let start = r.scratch.len();
            gen.write(&mut r.rng, &mut r.scratch);
            r.values.push((start, r.scratch.len()));
        }
        for seg in &self.segments {
            match seg {
                Piece::Lit(s) => out.extend_from_slice(s.as_bytes()),
                Piece::Var(i) => {
                    let (a, b) = r.values[*i];
                    out.extend_from_slice(&r.scratch[a..b]);
                }
            }
        }
    }
}

impl Gen {
    #[inline]
    fn write(&self, rng: &mut SmallRng, out: &mut Vec<u8>) {
        let mut ib = itoa::Buffer::new();
        match self {
            Gen::Uniform { lo, hi } => out.extend_from_slice(ib.format(rng.gen_range(*lo..=*hi)).as_bytes()),
            Gen::UniformF { lo, hi } => {
                use std::io::Write;
                let _ = write!(out, "{}", rng.gen_range(*lo..=*hi));
            }
            Gen::Zipf(z) => out.extend_from_slice(ib.format(z.sample(rng) as u64).as_bytes()),
            Gen::Seq { next, step } => {
                out.extend_from_slice(ib.format(next.fetch_add(*step, Ordering::Relaxed)).as_bytes())
            }
            Gen::Choice(values) => out.extend_from_slice(values[rng.gen_range(0..values.len())].as_bytes()),
        }
    }
}

enum Placeholder {
    New(String, Gen),
    Ref(usize),
}

fn err(p: &str, reason: impl Into<String>) -> TemplateError {
    TemplateError { placeholder: format!("{{{p}}}"), reason: reason.into() }
}

fn flush(lit: &mut String, segments: &mut Vec<Piece>) {
    if !lit.is_empty() {
        segments.push(Piece::Lit(std::mem::take(lit)));
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// chstorm's placeholder functions.
const KINDS: [&str; 4] = ["uniform", "zipf", "seq", "choice"];

/// How to tell chstorm's placeholders from ClickHouse query parameters, for error messages.
const TELL_APART: &str = "chstorm's placeholders are {name:uniform(a,b)}, {name:zipf(n,s)}, {name:seq(a)} and \
{name:choice(file)}; a ClickHouse query parameter names a type, which starts with a capital letter \
({id:UInt64}, {d:DateTime64(3)}), and is sent as written";

/// SQL type aliases ClickHouse accepts in any case, so a query parameter may name them in
/// lower case: `{p:decimal(10,2)}`, `{s:varchar(16)}`.
const LOWER_CASE_TYPES: &[&str] = &[
    "bigint",
    "binary",
    "bit",
    "blob",
    "bool",
    "boolean",
    "bytea",
    "char",
    "character",
    "date",
    "datetime",
    "datetime64",
    "dec",
    "decimal",
    "double",
    "enum",
    "fixed",
    "float",
    "int",
    "integer",
    "longblob",
    "longtext",
    "mediumint",
    "nchar",
    "numeric",
    "nvarchar",
    "real",
    "smallint",
    "text",
    "time",
    "timestamp",
    "tinyint",
    "varbinary",
    "varchar",
    "varchar2",
];

/// True when `kind` (the word after the colon) is a ClickHouse type name rather than a
/// placeholder function: type names start with a capital letter, or are SQL aliases.
fn is_clickhouse_type(kind: &str) -> bool {
    kind.starts_with(|c: char| c.is_ascii_uppercase()) || LOWER_CASE_TYPES.contains(&kind.to_ascii_lowercase().as_str())
}

/// The function name of a placeholder-shaped text `name:kind(...`, or None.
fn placeholder_kind(text: &str) -> Option<&str> {
    let (name, spec) = text.trim_start().split_once(':')?;
    let spec = spec.trim_start();
    let kind = spec[..spec.find('(')?].trim_end();
    (is_ident(name.trim()) && is_ident(kind)).then_some(kind)
}

/// The closest of chstorm's functions to a misspelt one, if it is close (edit distance <= 2).
fn suggestion(kind: &str) -> Option<&'static str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1; b.len() + 1];
            for (j, cb) in b.iter().enumerate() {
                cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
            }
            prev = cur;
        }
        prev[b.len()]
    }
    let k = kind.to_ascii_lowercase();
    KINDS.iter().map(|c| (distance(&k, c), *c)).filter(|(d, _)| *d <= 2).min().map(|(_, c)| c)
}

/// Which bytes of `sql` are inside a string literal (`'...'`), a quoted identifier (`"..."`,
/// `` `...` ``) or a comment (`-- ...`, `/* ... */`). Backslash escapes and doubled quotes
/// stay inside.
fn quoted_bytes(sql: &str) -> Vec<bool> {
    let b = sql.as_bytes();
    let mut out = vec![false; b.len()];
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let end = match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                loop {
                    match b.get(i) {
                        None => break b.len(),
                        Some(b'\\') => i += 2,
                        Some(&c) if c == q && b.get(i + 1) == Some(&q) => i += 2,
                        Some(&c) if c == q => break i + 1,
                        Some(_) => i += 1,
                    }
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n),
            b'/' if b.get(i + 1) == Some(&b'*') => sql[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2),
            _ => {
                i += 1;
                continue;
            }
        };
        let end = end.min(b.len());
        out[start..end].iter_mut().for_each(|x| *x = true);
        i = end;
    }
    out
}

/// Returns None when `inner` is not one of our placeholders (left verbatim in the query).
/// `strict` (outside literals and comments): a `{name}` never defined and an unknown function
/// are errors rather than text.
fn parse_placeholder(
    inner: &str,
    gens: &[(String, Gen)],
    base_dir: &Path,
    strict: bool,
    part: crate::segment::Segment,
) -> Result<Option<Placeholder>, TemplateError> {
    let inner_t = inner.trim();
    if is_ident(inner_t) {
        return match gens.iter().position(|(n, _)| n == inner_t) {
            Some(i) => Ok(Some(Placeholder::Ref(i))),
            None if strict => Err(err(
                inner,
                format!(
                    "'{inner_t}' has no value: define it earlier in the same query, e.g. {{{inner_t}:uniform(1,100)}}, \
                     and {{{inner_t}}} repeats that value (a ClickHouse query parameter names its type: {{{inner_t}:UInt64}})"
                ),
            )),
            None => Ok(None),
        };
    }
    let Some((name, spec)) = inner_t.split_once(':') else { return Ok(None) };
    let (name, spec) = (name.trim(), spec.trim());
    if is_ident(name) && KINDS.contains(&spec) {
        return Err(err(inner, format!("{spec} needs its arguments in parentheses; {TELL_APART}")));
    }
    let Some(open) = spec.find('(') else { return Ok(None) };
    let kind = spec[..open].trim_end();
    if !is_ident(name) || !KINDS.contains(&kind) {
        if strict && is_ident(name) && is_ident(kind) && !is_clickhouse_type(kind) {
            let hint = suggestion(kind).map(|k| format!(" (did you mean {k}?)")).unwrap_or_default();
            return Err(err(inner, format!("unknown placeholder function '{kind}'{hint}; {TELL_APART}")));
        }
        return Ok(None);
    }
    let Some(args) = spec[open + 1..].strip_suffix(')') else {
        return Err(err(inner, format!("missing ')' after {kind}(")));
    };
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    let want = |n: usize, usage: &str| -> Result<(), TemplateError> {
        if args.len() != n || args.iter().any(|a| a.is_empty()) {
            Err(err(inner, format!("expected {usage}")))
        } else {
            Ok(())
        }
    };
    let gen = match kind {
        "uniform" => {
            want(2, "uniform(a,b) with a <= b")?;
            if args.iter().any(|a| a.contains('.') || a.contains('e')) {
                let p = |a: &str| a.parse::<f64>().map_err(|_| err(inner, format!("'{a}' is not a number")));
                let (lo, hi) = (p(args[0])?, p(args[1])?);
                if lo > hi || !lo.is_finite() || !hi.is_finite() {
                    return Err(err(inner, "expected uniform(a,b) with a <= b"));
                }
                Gen::UniformF { lo, hi }
            } else {
                let p = |a: &str| a.parse::<i64>().map_err(|_| err(inner, format!("'{a}' is not an integer")));
                let (lo, hi) = (p(args[0])?, p(args[1])?);
                if lo > hi {
                    return Err(err(inner, "expected uniform(a,b) with a <= b"));
                }
                Gen::Uniform { lo, hi }
            }
        }
        "zipf" => {
            want(2, "zipf(n,s) with n >= 1 items and exponent s > 0")?;
            let n = args[0].parse::<u64>().ok().filter(|n| *n >= 1);
            let s = args[1].parse::<f64>().ok().filter(|s| *s > 0.0 && s.is_finite());
            match (n, s) {
                (Some(n), Some(s)) => {
                    Gen::Zipf(rand_distr::Zipf::new(n, s).map_err(|e| err(inner, format!("bad zipf parameters: {e}")))?)
                }
                _ => return Err(err(inner, "expected zipf(n,s) with n >= 1 items and exponent s > 0")),
            }
        }
        "seq" => {
            want(1, "seq(a) with an integer start a")?;
            let a = args[0].parse::<i64>().map_err(|_| err(inner, "expected seq(a) with an integer start a"))?;
            let first = a.saturating_add(i64::from(part.index));
            Gen::Seq { next: AtomicI64::new(first), step: i64::from(part.count) }
        }
        _ => {
            want(1, "choice(file) naming a file with one value per line")?;
            let path = base_dir.join(args[0]);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| err(inner, format!("cannot read {}: {e}", path.display())))?;
            let values: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
            if values.is_empty() {
                return Err(err(inner, format!("{} has no values (one per line expected)", path.display())));
            }
            Gen::Choice(values)
        }
    };
    Ok(Some(Placeholder::New(name.to_string(), gen)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn render_n(t: &Template, n: usize, seed: u64) -> Vec<String> {
        let mut r = Renderer::new(SmallRng::seed_from_u64(seed));
        let mut out = Vec::new();
        (0..n)
            .map(|_| {
                t.render(&mut r, &mut out);
                String::from_utf8(out.clone()).unwrap()
            })
            .collect()
    }

    fn here() -> &'static Path {
        Path::new(".")
    }

    #[test]
    fn literals_and_foreign_braces_pass_through() {
        let t = Template::parse("SELECT {id:UInt64}, map('a', 1), '{x}' FROM t", here()).unwrap();
        assert!(!t.has_placeholders());
        assert_eq!(render_n(&t, 1, 1)[0], "SELECT {id:UInt64}, map('a', 1), '{x}' FROM t");
        let t = Template::parse("SELECT '{' ", here()).unwrap();
        assert_eq!(render_n(&t, 1, 1)[0], "SELECT '{' ");
    }

    #[test]
    fn uniform_is_uniform_by_chi_square() {
        let t = Template::parse("{k:uniform(1,10)}", here()).unwrap();
        let n = 100_000;
        let mut counts = [0u64; 10];
        for v in render_n(&t, n, 42) {
            let v: usize = v.parse().unwrap();
            assert!((1..=10).contains(&v));
            counts[v - 1] += 1;
        }
        let expected = n as f64 / 10.0;
        let chi2: f64 = counts.iter().map(|&c| (c as f64 - expected).powi(2) / expected).sum();
        // 9 degrees of freedom: P(chi2 > 27.88) = 0.001.
        assert!(chi2 < 27.88, "chi2 = {chi2}, counts = {counts:?}");
    }

    #[test]
    fn zipf_follows_its_power_law() {
        let s = 1.1;
        let t = Template::parse(&format!("{{k:zipf(1000,{s})}}"), here()).unwrap();
        let n = 200_000;
        let mut counts = vec![0u64; 1001];
        for v in render_n(&t, n, 7) {
            let v: usize = v.parse().unwrap();
            assert!((1..=1000).contains(&v));
            counts[v] += 1;
        }
        // P(k) = k^-s / H(n,s); check the first 10 ranks by chi-square (10 cells + the rest).
        let h: f64 = (1..=1000).map(|k| (k as f64).powf(-s)).sum();
        let mut chi2 = 0.0;
        let mut rest_expected = n as f64;
        let mut rest_seen = n as f64;
        for (k, &seen) in counts.iter().enumerate().take(11).skip(1) {
            let e = n as f64 * (k as f64).powf(-s) / h;
            chi2 += (seen as f64 - e).powi(2) / e;
            rest_expected -= e;
            rest_seen -= seen as f64;
        }
        chi2 += (rest_seen - rest_expected).powi(2) / rest_expected;
        // 10 degrees of freedom: P(chi2 > 29.59) = 0.001.
        assert!(chi2 < 29.59, "chi2 = {chi2}");
        assert!(counts[1] > counts[2] && counts[2] > counts[10]);
    }

    #[test]
    fn seq_is_shared_and_refs_repeat_values() {
        let t = Template::parse("a={k:seq(5)} b={k} c={k}", here()).unwrap();
        let got = render_n(&t, 3, 1);
        assert_eq!(got, vec!["a=5 b=5 c=5", "a=6 b=6 c=6", "a=7 b=7 c=7"]);
        // The sequence continues across renderers (connections).
        assert_eq!(render_n(&t, 1, 2)[0], "a=8 b=8 c=8");
    }

    #[test]
    fn segments_send_their_share_of_seq_values() {
        let t = Template::parse("v={k:seq(10)} again={k}", here()).unwrap();
        let mut all = Vec::new();
        for index in 0..3 {
            let part = t.for_segment(crate::segment::Segment { index, count: 3 }).unwrap();
            let got = render_n(&part, 4, 1);
            assert_eq!(got[0], format!("v={} again={}", 10 + index, 10 + index));
            all.extend(got.iter().map(|g| g[2..].split(' ').next().unwrap().parse::<i64>().unwrap()));
        }
        all.sort_unstable();
        assert_eq!(all, (10..22).collect::<Vec<_>>(), "three segments of 4 send what one sends in 12");
        // A re-parsed text keeps its segment.
        let part = t.for_segment(crate::segment::Segment { index: 1, count: 2 }).unwrap();
        let again = part.with_source("SELECT {k:seq(0)}").unwrap();
        assert_eq!(render_n(&again, 2, 1), vec!["SELECT 1", "SELECT 3"]);
    }

    #[test]
    fn choice_reads_a_file_and_covers_it() {
        let dir = std::env::temp_dir().join(format!("chstorm-choice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("v.txt"), "'a'\n\n'b'\n'c'\n").unwrap();
        let t = Template::parse("x = {v:choice(v.txt)}", &dir).unwrap();
        let got = render_n(&t, 3000, 3);
        for want in ["x = 'a'", "x = 'b'", "x = 'c'"] {
            let c = got.iter().filter(|g| *g == want).count();
            assert!((800..1200).contains(&c), "{want}: {c}");
        }
        std::fs::write(dir.join("empty.txt"), "\n").unwrap();
        assert!(Template::parse("{v:choice(empty.txt)}", &dir).unwrap_err().to_string().contains("no values"));
        assert!(Template::parse("{v:choice(missing.txt)}", &dir).unwrap_err().to_string().contains("cannot read"));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn same_seed_same_values() {
        let t = Template::parse("{a:uniform(1,1000000)} {b:zipf(100,1.2)} {c:uniform(0.5,1.5)}", here()).unwrap();
        assert_eq!(render_n(&t, 50, 9), render_n(&t, 50, 9));
        assert_ne!(render_n(&t, 50, 9), render_n(&t, 50, 10));
    }

    #[test]
    fn typos_are_errors_and_clickhouse_parameters_are_not() {
        for (sql, needle) in [
            ("SELECT {x:unifrom(1,2)}", "unknown placeholder function 'unifrom' (did you mean uniform?)"),
            ("SELECT {x:random(1,2)}", "unknown placeholder function 'random'"),
            ("SELECT {x:uniform(1,2)", "no closing '}'"),
            ("SELECT {x:uniform(1,2) AND y = {z:seq(1)}", "no closing '}'"),
            ("SELECT {y}", "'y' has no value"),
            ("SELECT {k} + {k:uniform(1,2)}", "'k' has no value"),
            ("SELECT {x:uniform}", "needs its arguments"),
        ] {
            let e = Template::parse(sql, here()).unwrap_err().to_string();
            assert!(e.contains(needle), "{sql}: {e}");
        }
        let e = Template::parse("SELECT {x:unifrom(1,2)}", here()).unwrap_err().to_string();
        assert!(e.contains("{id:UInt64}") && e.contains("capital letter"), "says how to tell them apart: {e}");
        // ClickHouse query parameters, literals and comments stay as written.
        for sql in [
            "SELECT {id:UInt64}",
            "SELECT {d:DateTime64(3)}, {a:Array(String)}, {n:Nullable(UInt8)}, {m:Map(String, UInt64)}",
            "SELECT {p:decimal(10,2)}, {s:varchar(16)}",
            "SELECT '{y}', '{x:unifrom(1,2)}', \"{z}\", `{w}` -- {v}\n/* {u:foo(1)} */",
            "SELECT 'it''s {y}', 'back\\'slash {y}'",
            "SELECT '{'",
        ] {
            let t = Template::parse(sql, here()).unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert_eq!(render_n(&t, 1, 1)[0], sql);
        }
        // A placeholder inside a string literal is still one.
        let t = Template::parse("SELECT '{k:seq(7)}'", here()).unwrap();
        assert_eq!(render_n(&t, 1, 1)[0], "SELECT '7'");
    }

    #[test]
    fn bad_placeholders_say_what_is_wrong() {
        for (sql, needle) in [
            ("{k:uniform(5,1)}", "a <= b"),
            ("{k:uniform(1)}", "uniform(a,b)"),
            ("{k:zipf(0,1)}", "n >= 1"),
            ("{k:zipf(10,-1)}", "s > 0"),
            ("{k:seq(x)}", "integer start"),
            ("{k:uniform(1,2}", "missing ')'"),
            ("{k:seq(1)} {k:seq(2)}", "already defined"),
        ] {
            let e = Template::parse(sql, here()).unwrap_err().to_string();
            assert!(e.contains(needle), "{sql}: {e}");
        }
    }
}

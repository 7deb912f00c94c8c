//! What a query asks of the server beyond reading tables: the settings it
//! changes (`SETTINGS` clauses, `SET` statements) and the table functions it
//! calls (`remote`, `url`, `file`, `numbers`, ...). Pure functions over the
//! token stream of [`crate::lexer`] under a grammar (18.16's or the current one;
//! [`crate::reading`] checks that the grammars of a cluster read a text alike), so
//! comments, string literals, quoted names, case and white space cannot hide
//! or fake anything; text that does not lex, or whose brackets do not
//! balance, is an error (the caller refuses it for restricted users).
//!
//! Written by hand rather than with a SQL parser crate: none reads
//! ClickHouse's dialect (backquotes, `FINAL`, `SAMPLE`, `ARRAY JOIN`,
//! `INSERT ... FORMAT` followed by raw data), and the rules below are
//! deliberately looser than a grammar: when in doubt they report more.
//!
//! # What the server does itself with `readonly` (verified on 18.16.1)
//!
//! Sent as URL parameters of a POST, `readonly=1` last, after the gateway's
//! own parameters (`max_threads=3&max_execution_time=7&query_id=ro-test-1&readonly=1`):
//!
//! * **The earlier parameters still apply**: `system.settings` shows
//!   `max_threads 3`, `max_execution_time 7`, `readonly 1`, and the query runs
//!   under `query_id` `ro-test-1` (seen in `system.processes`). 18.16 checks
//!   URL settings against the `readonly` of the user's *profile*, not against
//!   one set in the same URL, so order does not matter: parameters *after*
//!   `readonly=1` apply too (`readonly=1&max_threads=3` gives 3), and so does
//!   a later `readonly` (`readonly=1&readonly=0` gives 0; the last one wins).
//!   For a read-only user the gateway must therefore drop every client `readonly` parameter and
//!   send its own, last.
//! * **Table functions are refused**, `numbers(10)` too, also in subqueries
//!   (`IN (SELECT number FROM numbers(3))`), and `DESCRIBE TABLE numbers(3)`:
//!   `Code: 164, e.displayText() = DB::Exception: Table functions are
//!   forbidden in readonly mode` (HTTP 500), for `remote`, `url`, `file`,
//!   `merge` alike. Tables are fine (`system.numbers`), and so is a query
//!   through a Distributed table: its shards get `readonly=1` too.
//! * **A `SETTINGS` clause that changes a value is refused**: `Code: 164,
//!   e.displayText() = DB::Exception: Cannot execute SET query in readonly
//!   mode` (HTTP 500), at any depth (a subquery's too). One that repeats the
//!   current value is accepted (18.16 checks only changed values):
//!   `SETTINGS max_threads = 2` when `max_threads` is already 2, even
//!   `SETTINGS readonly = 1`. That changes nothing, so it is harmless.
//! * **Writes are refused**, Code 164: `INSERT` (`Cannot insert into table in
//!   readonly mode`, also `INSERT INTO FUNCTION`), `CREATE` and `CREATE
//!   TEMPORARY TABLE` (`Cannot create table in readonly mode`), `DROP`
//!   (`Cannot drop table in readonly mode`), `ALTER`, `OPTIMIZE`, `SYSTEM`
//!   (`Cannot execute query in readonly mode`); `SET` in a session `Cannot
//!   execute SET query in readonly mode` (without a session, Code 113 `There
//!   is no session`). `KILL QUERY` is allowed.
//!
//! With **`readonly=2`**: table functions run (`numbers(10)` answers 10,
//! `remote(...)` reads the other server), `SETTINGS` clauses and `SET` apply
//! (except a change of `readonly` itself: `Code: 164 ... Cannot modify
//! 'readonly' setting in readonly mode`), writes are refused as above, and
//! `CREATE TEMPORARY TABLE` / `INSERT` into it are allowed in a session.
//!
//! **GET requests** run with `readonly=2` already, and on a GET any other
//! `readonly` parameter is refused: `readonly=1` or `readonly=0` gives `Code:
//! 164, e.displayText() = DB::Exception: Setting 'readonly' cannot be
//! overrided in readonly mode` (HTTP 500); `readonly=2` is accepted. To send
//! `readonly=1`, a gateway must forward a GET as a POST (the query stays in
//! the URL; an empty body needs `Content-Length: 0`: without it 18.16 answers
//! 411, Code 381 `There is neither Transfer-Encoding header nor
//! Content-Length header`).
//!
//! Newer releases (from their documentation, not verified here): the same
//! meanings of 1 and 2, and settings constraints also checked per setting.
//!
//! # What these functions find
//!
//! * [`settings_in_sql`]: every `SETTINGS name = value, ...` list anywhere
//!   (top level, subqueries, `UNION` parts, `INSERT ... SETTINGS` of newer
//!   releases, after `FORMAT` in newer releases) and the `SET a = 1, b = 'x'`
//!   statement. On 18.16 `SETTINGS` is always a clause when followed by a
//!   name: `SELECT 1 settings` and `FROM t settings WHERE settings.x = 1` are
//!   syntax errors, and the value must be a literal (number, string, `NULL`;
//!   `= random`, `= true`, `= [1]` and `= 1 + 1` are syntax errors), with
//!   `=` or `==`. The storage settings of `CREATE TABLE ... ENGINE = ...
//!   SETTINGS index_granularity = 8192` (before the statement's `SELECT`, if
//!   any) are table settings, not query settings, and are not listed.
//! * [`table_functions`]: a name followed by `(` where a table goes: after
//!   `FROM` (not the `FROM` of `extract(DAY FROM d)` / `substring(s FROM 2)`),
//!   after `JOIN` (not `ARRAY JOIN`, whose `range(3)` is an expression), after
//!   a comma of a `FROM`/`JOIN` list, `INSERT INTO [TABLE] FUNCTION f(...)`,
//!   `DESCRIBE [TABLE] f(...)`, `CREATE TABLE t AS f(...)` (newer releases),
//!   and `IN f(...)` when `f` is a known table function (18.16 reads `x IN
//!   numbers(3)` as a function call: `Code: 46 Unknown function numbers`;
//!   `IN tuple(1, 2)` is an ordinary function). Names may be backquoted
//!   (`` FROM `numbers`(3) `` runs on 18.16) and are compared
//!   case-insensitively by callers that match them.
//!
//! Of an `INSERT ... FORMAT <name>`, only the statement before its data is read
//! ([`crate::statement::sql_tokens`] walks the INSERT's head as the server's parser
//! does, so `FORMAT` or `VALUES` used as an alias or a column name is no data): a body
//! of any size costs nothing. The rows after `VALUES` (or `FORMAT Values`) are SQL:
//! current releases evaluate them with the SQL parser, subqueries with their own
//! `SETTINGS` and table functions included, so they are read like the rest.

use crate::lexer::{Grammar, Token, TokenKind};
use crate::statement::sql_tokens;

pub mod cacheable;
mod outside;
pub use outside::{calls_of, Call, CallKind, LOCAL_TABLE_FUNCTIONS};

/// Why a text could not be checked. The message is one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SqlRuleError {
    /// The lexer stopped: an unterminated string, name or comment, a
    /// malformed number, or a character ClickHouse does not accept.
    #[error("cannot read the query at byte {at}: {what}")]
    Unreadable { at: usize, what: String },
    /// A `(`/`[` without its closer, or the other way round.
    #[error("cannot read the query at byte {at}: unbalanced brackets")]
    Brackets { at: usize },
    /// A `SETTINGS` list or `SET` statement that is not `name = literal, ...`.
    #[error("cannot read the settings at byte {at}: {what}")]
    Settings { at: usize, what: String },
}

/// Table functions, for the `IN f(...)` rule (where an ordinary function may
/// stand too). 18.16's, and newer releases' that could read or write outside
/// the server's tables.
const KNOWN_TABLE_FUNCTIONS: &[&str] = &[
    "azureBlobStorage",
    "azureBlobStorageCluster",
    "cluster",
    "clusterAllReplicas",
    "deltaLake",
    "dictionary",
    "executable",
    "file",
    "fileCluster",
    "format",
    "gcs",
    "generateRandom",
    "generate_series",
    "hdfs",
    "hdfsCluster",
    "hudi",
    "iceberg",
    "input",
    "jdbc",
    "loop",
    "merge",
    "mongodb",
    "mysql",
    "null",
    "numbers",
    "numbers_mt",
    "odbc",
    "postgresql",
    "redis",
    "remote",
    "remoteSecure",
    "s3",
    "s3Cluster",
    "sqlite",
    "url",
    "urlCluster",
    "values",
    "view",
    "viewIfPermitted",
    "zeros",
    "zeros_mt",
];

/// Functions whose arguments may hold a `FROM` that is not a table's:
/// `extract(DAY FROM d)`, `substring(s FROM 2 FOR 3)` (18.16), and newer
/// releases' `trim(BOTH ' ' FROM s)`, `overlay(s PLACING t FROM 2)`.
const FROM_IN_ARGUMENTS: &[&str] = &["extract", "substring", "substr", "trim", "overlay"];

/// One token with its bracket depth (the depth it sits at; a bracket itself
/// is at the outer depth) and the index of its innermost enclosing `(`/`[`.
struct Tok<'a> {
    t: Token<'a>,
    depth: usize,
    open: Option<usize>,
}

/// The tokens of a statement with their bracket depths: `toks` as
/// [`crate::statement::sql_tokens`] gives them (an `INSERT ... FORMAT`'s data left out, the rows
/// of `VALUES` kept: they are SQL the server parses).
fn tokens<'a>(toks: &[Token<'a>]) -> Result<Vec<Tok<'a>>, SqlRuleError> {
    let mut out: Vec<Tok<'a>> = Vec::with_capacity(toks.len());
    let mut stack: Vec<usize> = Vec::new();
    for &t in toks {
        if t.kind == TokenKind::Error {
            return Err(SqlRuleError::Unreadable { at: t.start, what: describe_lex_error(t.text) });
        }
        let i = out.len();
        let open = stack.last().copied();
        let depth = stack.len();
        if t.is_punct("(") || t.is_punct("[") {
            stack.push(i);
        } else if t.is_punct(")") || t.is_punct("]") {
            let want = if t.text == ")" { "(" } else { "[" };
            match stack.pop() {
                Some(o) if out[o].t.text == want => {}
                _ => return Err(SqlRuleError::Brackets { at: t.start }),
            }
            out.push(Tok { t, depth: stack.len(), open: stack.last().copied() });
            continue;
        }
        out.push(Tok { t, depth, open });
    }
    if let Some(&o) = stack.last() {
        return Err(SqlRuleError::Brackets { at: out[o].t.start });
    }
    Ok(out)
}

fn describe_lex_error(text: &str) -> String {
    match text.as_bytes().first() {
        Some(b'\'') => "an unterminated string literal".into(),
        Some(b'`' | b'"') => "an unterminated quoted name".into(),
        Some(b'/') => "an unterminated /* comment".into(),
        Some(b'0'..=b'9' | b'.') => "a malformed number".into(),
        _ => format!("'{}' is not valid SQL here", text.chars().next().unwrap_or('?')),
    }
}

fn is_name(t: &Token<'_>) -> bool {
    matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent)
}

/// A word that is a keyword where it stands: not a name part after `.`.
fn kw_at(toks: &[Tok<'_>], i: usize, kw: &str) -> bool {
    toks[i].t.is_kw(kw) && !(i > 0 && toks[i - 1].t.is_punct("."))
}

/// How deeply `sql` nests, as ClickHouse 18.16's recursive parser and AST
/// visitors go into it: the most `(`/`[` brackets and `CASE ... END` open at
/// once. One pass over the tokens, nothing kept but a counter per open
/// bracket. Lenient: reading stops at the first token that does not lex (the
/// server refuses the text there too) and at an `INSERT ... FORMAT`'s data;
/// the rows of `VALUES` count (the server parses them as expressions).
///
/// Found on 18.16.1 (a throw-away `chstorm local up` server, each depth sent
/// once in a POST body with `max_query_size=100000000`, bisected per form):
/// the server process dies (stack overflow) at 936 nested `(1)`, `[1]`,
/// `NOT (` or `-(`; 910 `abs(`, `tuple(`, `if(1, ` or `arrayMap(x -> `; 928
/// bare `CASE WHEN 1 THEN`; 466 `CASE WHEN 1 THEN (` (932 by this count);
/// 813 `WHERE 1 IN (SELECT 1`; 758 scalar `(SELECT `; 2318 `FROM (SELECT *
/// FROM`. Below those, a depth past its `max_ast_depth` (1000 AST levels,
/// about 500 function calls) is refused with Code 167.
pub fn nesting_depth<S: AsRef<[u8]> + ?Sized>(sql: &S, grammar: Grammar) -> usize {
    nesting_depth_of(&sql_tokens(sql, grammar).0)
}

/// [`nesting_depth`] of a statement's tokens ([`crate::statement::sql_tokens`]'s, or a
/// [`crate::reading::Reading`]'s): reading stops at an error token.
pub fn nesting_depth_of(toks: &[Token<'_>]) -> usize {
    // Open CASEs per open bracket, and outside every bracket.
    let mut cases: Vec<usize> = Vec::new();
    let mut outer_cases = 0;
    let mut open_cases = 0;
    let mut deepest = 0;
    for t in toks {
        if t.kind == TokenKind::Error {
            break;
        }
        let here = cases.last_mut().unwrap_or(&mut outer_cases);
        if t.is_punct("(") || t.is_punct("[") {
            cases.push(0);
        } else if t.is_punct(")") || t.is_punct("]") {
            open_cases -= cases.pop().unwrap_or(0);
        } else if t.is_kw("CASE") {
            open_cases += 1;
            *here += 1;
        } else if t.is_kw("END") && *here > 0 {
            open_cases -= 1;
            *here -= 1;
        }
        deepest = deepest.max(cases.len() + open_cases);
    }
    deepest
}

/// Every setting a query sets in its text: the `SETTINGS` lists anywhere and
/// the `SET` statement, as (name, value) in order of appearance. Names are
/// unquoted; values are the literal's text (a string unquoted and unescaped,
/// a number as written, with its `-`; `NULL`, `true` and `false` as written).
/// Storage settings of `CREATE ... ENGINE = ... SETTINGS` are not listed.
///
/// Errors when the text does not lex, brackets do not balance, or a list
/// does not read as `name = literal, ...`: the caller cannot know what it
/// sets.
pub fn settings_in_sql<S: AsRef<[u8]> + ?Sized>(
    sql: &S,
    grammar: Grammar,
) -> Result<Vec<(String, String)>, SqlRuleError> {
    settings_of(&sql_tokens(sql, grammar).0)
}

/// [`settings_in_sql`] of a statement's tokens ([`crate::statement::sql_tokens`]'s, or a
/// [`crate::reading::Reading`]'s).
pub fn settings_of(toks: &[Token<'_>]) -> Result<Vec<(String, String)>, SqlRuleError> {
    let toks = tokens(toks)?;
    let mut out = Vec::new();
    let mut statement_start = 0;
    // In a CREATE/ATTACH statement, SETTINGS at the top level before its
    // first top-level SELECT are the table's.
    let mut storage_part = false;
    for i in 0..toks.len() {
        let t = &toks[i].t;
        if i == statement_start {
            storage_part = t.is_kw("CREATE") || t.is_kw("ATTACH");
            if t.is_kw("SET") {
                read_settings_list(&toks, i + 1, &mut out)?;
            }
        }
        if t.is_punct(";") && toks[i].depth == 0 {
            statement_start = i + 1;
            continue;
        }
        if toks[i].depth == 0 && t.is_kw("SELECT") {
            storage_part = false;
        }
        if !kw_at(&toks, i, "SETTINGS") || (storage_part && toks[i].depth == 0) {
            continue;
        }
        let next = toks.get(i + 1).map(|n| n.t);
        let then = toks.get(i + 2).map(|n| n.t);
        match (next, then) {
            (Some(n), Some(e)) if is_name(&n) && (e.is_punct("=") || e.is_punct("==")) => {
                read_settings_list(&toks, i + 1, &mut out)?;
            }
            (Some(n), _) if n.is_punct("(") => {
                return Err(SqlRuleError::Settings {
                    at: n.start,
                    what: "SETTINGS followed by a bracket: write SETTINGS name = value, ...".into(),
                });
            }
            // `settings` as a name (`AS settings`): 18.16 refuses a SETTINGS
            // clause without `name =` anyway.
            _ => {}
        }
    }
    Ok(out)
}

/// Reads `name = literal [, name = literal ...]` from `i`.
fn read_settings_list(toks: &[Tok<'_>], mut i: usize, out: &mut Vec<(String, String)>) -> Result<(), SqlRuleError> {
    let end_at = |i: usize| toks.get(i).map_or_else(|| toks.last().map_or(0, |t| t.t.end()), |t| t.t.start);
    let bad = |i: usize, what: &str| SqlRuleError::Settings { at: end_at(i), what: what.to_string() };
    loop {
        let name = toks
            .get(i)
            .filter(|t| is_name(&t.t))
            .and_then(|t| t.t.ident())
            .ok_or_else(|| bad(i, "expected a setting's name"))?;
        if !toks.get(i + 1).is_some_and(|t| t.t.is_punct("=") || t.t.is_punct("==")) {
            return Err(bad(i + 1, &format!("expected '=' after setting '{name}'")));
        }
        let (value, next) = literal(toks, i + 2).ok_or_else(|| {
            bad(i + 2, &format!("the value of setting '{name}' is not a literal (a number, a 'string' or NULL)"))
        })?;
        out.push((name, value));
        if toks.get(next).is_some_and(|t| t.t.is_punct(",")) {
            i = next + 1;
        } else {
            return Ok(());
        }
    }
}

/// A setting's value at `i`: its text and the index past it.
fn literal(toks: &[Tok<'_>], i: usize) -> Option<(String, usize)> {
    let t = toks.get(i)?.t;
    match t.kind {
        TokenKind::Str => Some((t.string_value()?, i + 1)),
        TokenKind::Number => Some((t.text.to_string(), i + 1)),
        TokenKind::Punct if t.text == "-" || t.text == "+" => {
            let n = toks.get(i + 1).filter(|n| n.t.kind == TokenKind::Number)?.t;
            let sign = if t.text == "-" { "-" } else { "" };
            Some((format!("{sign}{}", n.text), i + 2))
        }
        TokenKind::Word if ["NULL", "TRUE", "FALSE"].iter().any(|k| t.text.eq_ignore_ascii_case(k)) => {
            Some((t.text.to_string(), i + 1))
        }
        _ => None,
    }
}

/// The names of the table functions `sql` calls, in order of appearance (a
/// qualified name as `db.f`, a quoted one unquoted). See the module doc for
/// the positions that count.
///
/// Errors when the text does not lex or brackets do not balance.
pub fn table_functions<S: AsRef<[u8]> + ?Sized>(sql: &S, grammar: Grammar) -> Result<Vec<String>, SqlRuleError> {
    table_functions_of(&sql_tokens(sql, grammar).0)
}

/// [`table_functions`] of a statement's tokens ([`crate::statement::sql_tokens`]'s, or a
/// [`crate::reading::Reading`]'s).
pub fn table_functions_of(toks: &[Token<'_>]) -> Result<Vec<String>, SqlRuleError> {
    let toks = tokens(toks)?;
    let mut out = Vec::new();
    let mut lists: Vec<List> = vec![List::None];
    let mut statement_start = 0;
    let mut i = 0;
    while i < toks.len() {
        let Tok { t, depth, .. } = toks[i];
        lists.resize(depth + 1, List::None);
        if t.is_punct(";") && depth == 0 {
            statement_start = i + 1;
        }
        // A name (maybe qualified) followed by `(`?
        if is_name(&t) && !(i > 0 && toks[i - 1].t.is_punct(".")) {
            let mut last = i;
            while toks.get(last + 1).is_some_and(|d| d.t.is_punct("."))
                && toks.get(last + 2).is_some_and(|n| is_name(&n.t))
            {
                last += 2;
            }
            if toks.get(last + 1).is_some_and(|p| p.t.is_punct("(")) {
                let name: Option<Vec<String>> = (i..=last).step_by(2).map(|k| toks[k].t.ident()).collect();
                let name = name.map(|parts| parts.join(".")).unwrap_or_else(|| t.text.to_string());
                if i > 0 && table_position(&toks, i - 1, statement_start, &lists, &name) {
                    out.push(name);
                }
            }
        }
        // The list state at this depth.
        if t.kind == TokenKind::Word && !(i > 0 && (toks[i - 1].t.is_punct(".") || toks[i - 1].t.is_kw("AS"))) {
            let state = &mut lists[depth];
            if t.is_kw("JOIN") {
                let array = i > 0 && toks[i - 1].t.is_kw("ARRAY");
                *state = if array { List::Other } else { List::Tables };
            } else if t.is_kw("FROM") && !in_from_function(&toks, i) {
                *state = List::Tables;
            } else if t.is_kw("USING") {
                *state = List::Other;
            } else if [
                "WHERE",
                "PREWHERE",
                "GROUP",
                "ORDER",
                "HAVING",
                "LIMIT",
                "SETTINGS",
                "FORMAT",
                "UNION",
                "EXCEPT",
                "INTERSECT",
                "INTO",
                "SELECT",
                "WITH",
            ]
            .iter()
            .any(|k| t.is_kw(k))
            {
                *state = List::None;
            }
            // ON keeps Tables: an ON expression holds no top-level comma, so
            // a comma after it starts another table (`JOIN b ON x, url(...)`).
        }
        i += 1;
    }
    Ok(out)
}

/// What a comma at some bracket depth separates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    /// Nothing known (a select list, function arguments, ...).
    None,
    /// The tables of a `FROM` / `JOIN`.
    Tables,
    /// Columns of `USING`, expressions of `ARRAY JOIN`.
    Other,
}

/// True if a name followed by `(`, whose preceding token is at `p`, stands
/// where a table goes.
fn table_position(toks: &[Tok<'_>], p: usize, statement_start: usize, lists: &[List], name: &str) -> bool {
    let prev = &toks[p].t;
    if prev.is_punct(",") {
        return lists.get(toks[p].depth) == Some(&List::Tables);
    }
    if prev.kind != TokenKind::Word || (p > 0 && toks[p - 1].t.is_punct(".")) {
        return false;
    }
    let before = p.checked_sub(1).map(|b| toks[b].t);
    let first = &toks[statement_start].t;
    if prev.is_kw("FROM") {
        !in_from_function(toks, p)
    } else if prev.is_kw("JOIN") {
        !before.is_some_and(|b| b.is_kw("ARRAY"))
    } else if prev.is_kw("FUNCTION") {
        before.is_some_and(|b| b.is_kw("INTO") || b.is_kw("TABLE"))
    } else if prev.is_kw("DESCRIBE") || prev.is_kw("DESC") {
        p == statement_start
    } else if prev.is_kw("TABLE") {
        p == statement_start + 1 && (first.is_kw("DESCRIBE") || first.is_kw("DESC"))
    } else if prev.is_kw("AS") {
        toks[p].depth == 0 && (first.is_kw("CREATE") || first.is_kw("ATTACH"))
    } else if prev.is_kw("IN") {
        KNOWN_TABLE_FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(name))
    } else {
        false
    }
}

/// True if the `FROM` at `i` is an argument of `extract(...)`, `substring(...)`, ...
fn in_from_function(toks: &[Tok<'_>], i: usize) -> bool {
    toks[i].open.is_some_and(|o| {
        toks[o].t.is_punct("(")
            && o > 0
            && toks[o - 1].t.kind == TokenKind::Word
            && FROM_IN_ARGUMENTS.iter().any(|f| toks[o - 1].t.text.eq_ignore_ascii_case(f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Grammar = Grammar::V18_16;

    fn settings(sql: &str) -> Vec<(String, String)> {
        settings_in_sql(sql, G).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }
    fn funcs(sql: &str) -> Vec<String> {
        table_functions(sql, G).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The depth as one counter per bracket level, level 0 outside every bracket: the count the
    /// allocation-free [`nesting_depth`] must agree with.
    fn depth_by_levels(sql: &str) -> usize {
        let (mut cases, mut open, mut deepest) = (vec![0usize], 0, 0);
        for t in sql_tokens(sql, G).0.into_iter().take_while(|t| t.kind != TokenKind::Error) {
            if t.is_punct("(") || t.is_punct("[") {
                cases.push(0);
            } else if (t.is_punct(")") || t.is_punct("]")) && cases.len() > 1 {
                open -= cases.pop().unwrap_or(0);
            } else if t.is_kw("CASE") {
                open += 1;
                *cases.last_mut().unwrap() += 1;
            } else if t.is_kw("END") && *cases.last().unwrap() > 0 {
                open -= 1;
                *cases.last_mut().unwrap() -= 1;
            }
            deepest = deepest.max(cases.len() - 1 + open);
        }
        deepest
    }

    #[test]
    fn nesting_depth_counts_brackets_and_open_cases() {
        for (sql, depth) in [
            ("SELECT 1", 0),
            ("SELECT count() FROM t", 1),
            ("SELECT ((1))", 2),
            ("SELECT [[1], [2]]", 2),
            ("SELECT CASE WHEN 1 THEN 2 END", 1),
            ("SELECT CASE WHEN 1 THEN (CASE WHEN 2 THEN 3 END) END", 3),
            ("SELECT CASE WHEN (1) THEN 2 END, (CASE WHEN 1 THEN 2 END)", 2),
            ("SELECT 1)) + ((2", 2),
            ("SELECT '((((' AS s -- ((((", 0),
            ("INSERT INTO t VALUES ((((((1))))))", 6),
            ("INSERT INTO t FORMAT TSV\n((((((1))))))", 0),
            ("INSERT INTO t SELECT ((1)) FORMAT TSV", 2),
            ("SELECT END, CASE END END", 1),
        ] {
            assert_eq!(nesting_depth(sql, G), depth, "{sql}");
            assert_eq!(depth_by_levels(sql), depth, "{sql}");
        }
    }

    #[test]
    fn nesting_depth_agrees_with_a_counter_per_level_on_generated_statements() {
        use rand::{Rng, SeedableRng};
        let parts = ["(", ")", "[", "]", "CASE", "END", "WHEN 1 THEN", "1", ",", "'('", "x", "INSERT", "VALUES"];
        let mut rng = rand::rngs::StdRng::seed_from_u64(16);
        for _ in 0..5_000 {
            let n = rng.gen_range(0..40);
            let words: Vec<&str> = (0..n).map(|_| parts[rng.gen_range(0..parts.len())]).collect();
            let sql = format!("SELECT {}", words.join(" "));
            assert_eq!(nesting_depth(&sql, G), depth_by_levels(&sql), "{sql}");
            let insert = format!("INSERT {}", words.join(" "));
            assert_eq!(nesting_depth(&insert, G), depth_by_levels(&insert), "{insert}");
        }
    }

    #[test]
    fn settings_everywhere() {
        assert_eq!(settings("SELECT 1"), pairs(&[]));
        assert_eq!(settings("SELECT 1 SETTINGS max_threads = 64"), pairs(&[("max_threads", "64")]));
        assert_eq!(
            settings("SELECT * FROM items WHERE shop_id = 42 SETTINGS max_threads = 64, max_memory_usage = 0"),
            pairs(&[("max_threads", "64"), ("max_memory_usage", "0")])
        );
        assert_eq!(
            settings("select 1 settings load_balancing='random',max_threads==+2, x = -1, y = NULL, z = 0x10"),
            pairs(&[("load_balancing", "random"), ("max_threads", "2"), ("x", "-1"), ("y", "NULL"), ("z", "0x10")])
        );
        assert_eq!(
            settings("SELECT 1 SETTINGS `max_threads` = 1, \"readonly\" = 0"),
            pairs(&[("max_threads", "1"), ("readonly", "0")])
        );
        assert_eq!(settings("SELECT 1 SETTINGS s = 'it''s \\x41'"), pairs(&[("s", "it's A")]));
        // Subqueries, UNION parts, IN subqueries, scalar subqueries.
        assert_eq!(
            settings(
                "SELECT * FROM (SELECT 1 SETTINGS a = 1) WHERE x IN (SELECT 2 SETTINGS b = 2) \
                 UNION ALL SELECT (SELECT 3 SETTINGS c = 3) SETTINGS d = 4"
            ),
            pairs(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")])
        );
        // INSERT ... SELECT, INSERT ... SETTINGS (newer releases), after FORMAT (newer releases).
        assert_eq!(settings("INSERT INTO t SELECT 1 SETTINGS a = 1"), pairs(&[("a", "1")]));
        assert_eq!(settings("INSERT INTO t SETTINGS a = 1 VALUES (1)"), pairs(&[("a", "1")]));
        assert_eq!(settings("INSERT INTO t SETTINGS a = 1 FORMAT TSV\n1\t'"), pairs(&[("a", "1")]));
        assert_eq!(settings("SELECT 1 FORMAT JSON SETTINGS a = 1"), pairs(&[("a", "1")]));
        // SET statements.
        assert_eq!(settings("SET max_threads = 1, readonly = 0"), pairs(&[("max_threads", "1"), ("readonly", "0")]));
        assert_eq!(settings("  set\nprofile='web'"), pairs(&[("profile", "web")]));
        assert_eq!(settings("SELECT 1; SET a = 1"), pairs(&[("a", "1")]));
    }

    #[test]
    fn settings_not_fooled() {
        for sql in [
            "SELECT 'SETTINGS max_threads = 1'",
            "SELECT 1 -- SETTINGS max_threads = 1",
            "SELECT 1 /* SETTINGS max_threads = 1 */",
            "SELECT `SETTINGS` FROM t",
            "SELECT * FROM system.settings WHERE name = 'max_threads'",
            "SELECT settings.name FROM system.settings AS settings",
            "SELECT 1 AS settings",
            "SELECT name FROM system.settings WHERE changed",
            // Storage settings are the table's.
            "CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x SETTINGS index_granularity = 8192",
            "ALTER TABLE t MODIFY SETTING max_parts_in_total = 1",
            "INSERT INTO t VALUES ('SETTINGS a = 1')",
        ] {
            assert_eq!(settings(sql), pairs(&[]), "{sql}");
        }
        // Case, white space, comments between the pieces.
        assert_eq!(settings("SELECT 1\n\tsEtTiNgS/*x*/max_threads\n=\n-- c\n64"), pairs(&[("max_threads", "64")]));
        // A CREATE's query part is a query.
        assert_eq!(
            settings("CREATE TABLE t ENGINE = MergeTree ORDER BY x SETTINGS index_granularity = 1 AS SELECT 1 SETTINGS max_threads = 3"),
            pairs(&[("max_threads", "3")])
        );
        assert_eq!(settings("CREATE VIEW v AS SELECT 1 SETTINGS max_threads = 3"), pairs(&[("max_threads", "3")]));
    }

    #[test]
    fn settings_errors() {
        for sql in [
            "SELECT 1 SETTINGS max_threads = [1]",
            "SELECT 1 SETTINGS max_threads = random",
            "SELECT 1 SETTINGS max_threads = 1,",
            "SELECT 1 SETTINGS max_threads = 1, readonly",
            "SELECT 1 SETTINGS (max_threads = 1)",
            "SET max_threads",
            "SET max_threads = f(1)",
            "SELECT 1 SETTINGS max_threads = 'open",
            "SELECT 1 SETTINGS a = (1",
            "SELECT 1 # SETTINGS max_threads = 1",
            "SELECT 1 /* SETTINGS",
            "SELECT 1 SETTINGS s = '\\xff'",
        ] {
            let e = settings_in_sql(sql, G).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert_eq!(
            settings_in_sql("SELECT 'open", G).unwrap_err().to_string(),
            "cannot read the query at byte 7: an unterminated string literal"
        );
        assert_eq!(
            settings_in_sql("SELECT 1 SETTINGS a = [1]", G).unwrap_err().to_string(),
            "cannot read the settings at byte 22: the value of setting 'a' is not a literal (a number, a 'string' or NULL)"
        );
        // What follows a value is the server's business: `= 1 + 1` is its syntax error.
        assert_eq!(settings("SELECT 1 SETTINGS a = 1 + 1"), pairs(&[("a", "1")]));
    }

    #[test]
    fn table_functions_in_every_position() {
        assert_eq!(funcs("SELECT * FROM items"), Vec::<String>::new());
        assert_eq!(funcs("SELECT count() FROM numbers(10)"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM remote('127.0.0.1:9000', db.t)"), ["remote"]);
        assert_eq!(funcs("SELECT * FROM remoteSecure('h', db, t, 'u', 'p')"), ["remoteSecure"]);
        assert_eq!(funcs("select * from url('http://x/', TSV, 'a String')"), ["url"]);
        assert_eq!(funcs("SELECT * FROM file('a.tsv', TSV, 'x UInt8')"), ["file"]);
        assert_eq!(funcs("SELECT * FROM cluster('storm', default.items)"), ["cluster"]);
        for f in ["s3", "mysql", "jdbc", "odbc", "hdfs", "merge", "input", "generateRandom", "postgresql"] {
            assert_eq!(funcs(&format!("SELECT * FROM {f}('x')")), [f]);
        }
        // JOINs of every kind, comma lists, subqueries, UNION parts, IN subqueries.
        assert_eq!(funcs("SELECT * FROM t ANY LEFT JOIN url('u', TSV, 'x UInt8') USING x"), ["url"]);
        assert_eq!(funcs("SELECT * FROM t GLOBAL ALL INNER JOIN numbers(3) AS n ON t.x = n.number"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM t CROSS JOIN file('f')"), ["file"]);
        assert_eq!(funcs("SELECT * FROM t, numbers(3)"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM t AS a, b, numbers(3) AS c"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM t FINAL SAMPLE 1/10, numbers(3)"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM t JOIN u ON t.a = u.a, url('x')"), ["url"]);
        assert_eq!(funcs("SELECT * FROM (SELECT * FROM (SELECT * FROM file('f')))"), ["file"]);
        assert_eq!(funcs("SELECT 1 UNION ALL SELECT * FROM numbers(2)"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM t WHERE x IN (SELECT number FROM numbers(3))"), ["numbers"]);
        assert_eq!(funcs("SELECT (SELECT count() FROM remote('h', t))"), ["remote"]);
        assert_eq!(funcs("WITH (SELECT 1 FROM url('x')) AS y SELECT y"), ["url"]);
        assert_eq!(funcs("WITH c AS (SELECT * FROM url('x')) SELECT * FROM c"), ["url"]);
        assert_eq!(funcs("SELECT * FROM t WHERE x IN numbers(3)"), ["numbers"]);
        assert_eq!(funcs("SELECT * FROM t WHERE x GLOBAL NOT IN remote('h', t)"), ["remote"]);
        // Writes and DESCRIBE.
        assert_eq!(funcs("INSERT INTO FUNCTION file('f', TSV, 'x UInt8') VALUES (1)"), ["file"]);
        assert_eq!(funcs("INSERT INTO TABLE FUNCTION remote('h', db.t) SELECT 1"), ["remote"]);
        assert_eq!(funcs("INSERT INTO t SELECT * FROM input('x UInt8') FORMAT TSV\n1\n"), ["input"]);
        assert_eq!(funcs("INSERT INTO t SELECT * FROM values('x UInt8', 1)"), ["values"]);
        assert_eq!(funcs("DESCRIBE TABLE numbers(3)"), ["numbers"]);
        assert_eq!(funcs("desc url('x')"), ["url"]);
        assert_eq!(funcs("CREATE TABLE t AS remote('h', db.t)"), ["remote"]);
        assert_eq!(funcs("CREATE VIEW v AS SELECT * FROM url('x')"), ["url"]);
        // Several, in order.
        assert_eq!(
            funcs("SELECT * FROM numbers(1) AS a JOIN (SELECT * FROM url('x')) AS b USING x, file('f')"),
            ["numbers", "url"],
            "after USING the comma separates columns: file('f') is an (unknown) function there"
        );
    }

    /// Comments, case, quotes, white space and keyword games do not hide a
    /// table function.
    #[test]
    fn table_functions_not_hidden() {
        for (sql, want) in [
            ("SELECT * FROM /*x*/ url (  'x')", "url"),
            ("SELECT * FROM url/* c */('x')", "url"),
            ("SELECT * FROM url -- c\n('x')", "url"),
            ("SELECT * FROM\n\turl\n(\n'x'\n)", "url"),
            ("SELECT * FROM `url`('x')", "url"),
            ("SELECT * FROM \"url\"('x')", "url"),
            ("SeLeCt * fRoM URL('x')", "URL"),
            ("SELECT * FROM numbers(1) AS settings ANY LEFT JOIN url('x') USING number", "url"),
            ("SELECT * FROM numbers(1) AS where, url('x')", "numbers"),
            ("SELECT from FROM remote('h', t)", "remote"),
            ("SELECT * FROM db.url('x')", "db.url"),
            ("SELECT extract(DAY FROM d) FROM url('x')", "url"),
            ("SELECT * FROM t LEFT ARRAY JOIN arr AS a JOIN url('x') USING y", "url"),
            ("SELECT * FROM ((SELECT * FROM file('f')))", "file"),
            ("SELECT 1; SELECT * FROM url('x')", "url"),
        ] {
            let got = funcs(sql);
            assert!(got.contains(&want.to_string()), "{sql}: {got:?}");
        }
        assert_eq!(funcs("SELECT * FROM numbers(1) AS where, url('x')"), ["numbers", "url"]);
    }

    #[test]
    fn what_is_not_a_table_function() {
        for sql in [
            "SELECT count() FROM items WHERE shop_id = 42",
            "SELECT toDate(x), f(y) FROM t WHERE g(z) GROUP BY h(x) ORDER BY i(y)",
            "SELECT 'FROM url(1)' FROM t",
            "SELECT * FROM t -- FROM url('x')",
            "SELECT * FROM t /* JOIN url('x') */",
            "SELECT * FROM `FROM url('x')`",
            "SELECT extract(DAY FROM toDate(x)) FROM t",
            "SELECT substring(s FROM toUInt8(2)) FROM t",
            "SELECT * FROM t ARRAY JOIN range(3) AS r",
            "SELECT * FROM t LEFT ARRAY JOIN arrayMap(x -> x, a) AS r, range(2) AS q",
            "SELECT * FROM t WHERE x IN tuple(1, 2)",
            "SELECT * FROM t WHERE x IN (1, 2)",
            "SELECT * FROM t AS a JOIN u AS b USING (x, y)",
            "SELECT * FROM t JOIN u USING x, toString(y)",
            "SELECT * FROM (SELECT 1)",
            "SELECT * FROM system.numbers LIMIT 1",
            "SELECT a, b(c) FROM t",
            "SELECT 1 FROM t ORDER BY x DESC, f(y)",
            "SELECT * FROM t GROUP BY x, f(y)",
            "INSERT INTO t VALUES (f(1))",
            "INSERT INTO t FORMAT TSV\nFROM url('x')",
            "INSERT INTO t (a, b) VALUES ('FROM url(')",
            "SELECT * FROM t SETTINGS a = 1, b = 2",
            "CREATE TABLE t (x UInt8) ENGINE = MergeTree() ORDER BY tuple()",
            "DESCRIBE TABLE t",
            "SELECT x AS from FROM t",
        ] {
            assert_eq!(funcs(sql), Vec::<String>::new(), "{sql}");
        }
    }

    #[test]
    fn unreadable_text_is_an_error() {
        for sql in [
            "SELECT * FROM url('x",
            "SELECT * FROM url('x'",
            "SELECT * FROM url('x'))",
            "SELECT * FROM t # url('x')",
            "SELECT * FROM t /* url('x')",
            "SELECT * FROM `url('x')",
            "SELECT 123abc FROM url('x')",
            "SELECT [1) FROM t",
        ] {
            let e = table_functions(sql, G).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert_eq!(table_functions("SELECT (1", G).unwrap_err(), SqlRuleError::Brackets { at: 7 });
        assert_eq!(
            table_functions("SELECT 1 # c", G).unwrap_err().to_string(),
            "cannot read the query at byte 9: '#' is not valid SQL here"
        );
        // The data after an INSERT's FORMAT is not read, whatever it holds; the rows of VALUES
        // are SQL the server parses, and are read.
        assert_eq!(funcs("INSERT INTO t FORMAT RowBinary\n\u{1}'`\"/*#"), Vec::<String>::new());
        assert!(settings_in_sql("INSERT INTO t VALUES ('open", G).is_err());
        // A SETTINGS list right after the format's name is a clause where
        // `allow_settings_after_format_in_insert` is on: it is read as one.
        assert_eq!(settings("INSERT INTO t FORMAT TSV\nSETTINGS a = 1"), pairs(&[("a", "1")]));
        assert_eq!(settings("INSERT INTO t FORMAT TSV\nSETTINGS a = 1\n1\t'"), pairs(&[("a", "1")]));
    }

    /// Random SQL-ish text: never a panic, and only names from the text are
    /// reported.
    #[test]
    fn no_panic_on_random_input() {
        let pieces = [
            "SELECT ",
            "FROM ",
            "JOIN ",
            "ARRAY ",
            "url",
            "numbers",
            "(",
            ")",
            "'x'",
            ", ",
            "SETTINGS ",
            "a",
            " = ",
            "1",
            "-- c\n",
            "/* c */",
            "`",
            "'",
            "\"",
            "IN ",
            "AS ",
            "INSERT ",
            "INTO ",
            "FUNCTION ",
            "VALUES ",
            "FORMAT ",
            ";",
            ".",
            "extract(",
            "USING ",
            "ON ",
            "SET ",
            "é",
            "#",
        ];
        for s in crate::random_texts(&pieces, 17, 20_000, 20) {
            if let Ok(found) = table_functions(&s, G) {
                for f in found {
                    assert!(s.contains(&f) && s.contains('('), "{s:?}: {f}");
                }
            }
            if let Ok(found) = settings_in_sql(&s, G) {
                assert!(found.is_empty() || s.to_ascii_uppercase().contains("SET"), "{s:?}");
            }
        }
    }
}

//! Per-query settings as a SQL `SETTINGS` clause.
//!
//! The native protocol can carry settings in the Query packet, but below revision 54429 each
//! value is written in its setting's own binary type, so a client must know every setting's
//! type for every server version. A `SETTINGS` clause in the SQL text works on every version
//! and on both transports, so chstorm sends no binary settings at all.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Appends ` SETTINGS k = v, ...` to a SELECT so settings apply on any server version.
///
/// * Numbers are written bare, anything else as a quoted string literal.
/// * A trailing `;`, whitespace and comments are dropped first.
/// * When the query ends with `FORMAT <name>`, the clause goes before it.
/// * When the query already has a top-level `SETTINGS` clause, the settings are appended to it.
/// * Without settings the query is returned unchanged.
pub fn append_settings_clause<'a>(sql: &'a str, settings: &[(String, String)]) -> Cow<'a, str> {
    if settings.is_empty() {
        return Cow::Borrowed(sql);
    }
    let mut tokens = lex(sql);
    while tokens.last().is_some_and(|t| t.kind == TokKind::Punct(b';')) {
        tokens.pop();
    }
    let Some(last) = tokens.last() else {
        return Cow::Borrowed(sql);
    };
    let n = tokens.len();
    let word_is =
        |t: &Tok, w: &str| t.kind == TokKind::Word && t.depth == 0 && sql[t.start..t.end].eq_ignore_ascii_case(w);
    let format = (n >= 3
        && word_is(&tokens[n - 2], "FORMAT")
        && last.kind == TokKind::Word
        && !last_starts_with_digit(&sql[last.start..last.end]))
    .then(|| &sql[tokens[n - 2].start..last.end]);
    let body = &tokens[..if format.is_some() { n - 2 } else { n }];
    let has_settings = body.windows(3).enumerate().any(|(i, w)| {
        word_is(&w[0], "SETTINGS")
            && matches!(w[1].kind, TokKind::Word | TokKind::Quoted)
            && w[2].kind == TokKind::Punct(b'=')
            && (i == 0 || body[i - 1].kind != TokKind::Punct(b'.'))
    });
    let Some(body_last) = body.last() else {
        return Cow::Borrowed(sql);
    };

    let mut out = String::with_capacity(sql.len() + 32 * settings.len());
    out.push_str(&sql[..body_last.end]);
    out.push_str(if has_settings { ", " } else { " SETTINGS " });
    for (i, (k, v)) in settings.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_name(&mut out, k);
        out.push_str(" = ");
        push_value(&mut out, v);
    }
    if let Some(format) = format {
        out.push(' ');
        out.push_str(format);
    }
    Cow::Owned(out)
}

fn last_starts_with_digit(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

fn is_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

fn push_name(out: &mut String, name: &str) {
    if is_identifier(name) {
        out.push_str(name);
    } else {
        out.push('`');
        for c in name.chars() {
            if c == '`' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('`');
    }
}

/// A decimal integer or float literal: `-?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?`.
fn is_number(s: &str) -> bool {
    let b = s.strip_prefix('-').unwrap_or(s).as_bytes();
    let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
    let int = digits(b);
    let mut i = int;
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        frac = digits(&b[i + 1..]);
        i += 1 + frac;
    }
    if int + frac == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = digits(&b[i..]);
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len()
}

fn push_value(out: &mut String, v: &str) {
    if is_number(v) {
        out.push_str(v);
        return;
    }
    out.push('\'');
    for c in v.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokKind {
    /// Identifier, keyword or number.
    Word,
    /// String literal or quoted identifier.
    Quoted,
    Punct(u8),
}

#[derive(Debug, Clone, Copy)]
struct Tok {
    kind: TokKind,
    start: usize,
    end: usize,
    /// Bracket nesting depth at the token.
    depth: usize,
}

/// Splits SQL into tokens, skipping whitespace and comments. Good enough to find clause
/// keywords at the top level; not a validator.
fn lex(sql: &str) -> Vec<Tok> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = memchr(b, i, b'\n');
                continue;
            }
            b'#' => {
                i = memchr(b, i, b'\n');
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
                continue;
            }
            b'\'' | b'"' | b'`' => {
                i += 1;
                while i < b.len() {
                    if b[i] == b'\\' {
                        i += 2;
                    } else if b[i] == c {
                        i += 1;
                        if b.get(i) != Some(&c) {
                            break;
                        }
                        i += 1; // doubled quote
                    } else {
                        i += 1;
                    }
                }
                i = i.min(b.len());
                TokKind::Quoted
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                    i += 1;
                }
                TokKind::Word
            }
            c => {
                i += 1;
                TokKind::Punct(c)
            }
        };
        if matches!(kind, TokKind::Punct(b')' | b']')) {
            depth = depth.saturating_sub(1);
        }
        out.push(Tok { kind, start, end: i, depth });
        if matches!(kind, TokKind::Punct(b'(' | b'[')) {
            depth += 1;
        }
    }
    out
}

fn memchr(b: &[u8], from: usize, needle: u8) -> usize {
    b[from..].iter().position(|&c| c == needle).map_or(b.len(), |p| from + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn apply(sql: &str, pairs: &[(&str, &str)]) -> String {
        append_settings_clause(sql, &s(pairs)).into_owned()
    }

    #[test]
    fn no_settings_borrows_unchanged() {
        assert!(matches!(append_settings_clause("SELECT 1;", &[]), Cow::Borrowed("SELECT 1;")));
    }

    #[test]
    fn appends_clause() {
        assert_eq!(apply("SELECT 1", &[("max_threads", "1")]), "SELECT 1 SETTINGS max_threads = 1");
        assert_eq!(
            apply("SELECT 1 ;  \n", &[("max_threads", "1"), ("max_block_size", "65536")]),
            "SELECT 1 SETTINGS max_threads = 1, max_block_size = 65536"
        );
        assert_eq!(apply("SELECT 1 -- note\n", &[("a", "1")]), "SELECT 1 SETTINGS a = 1");
    }

    #[test]
    fn goes_before_format() {
        assert_eq!(
            apply("SELECT * FROM t FORMAT JSONEachRow;", &[("max_threads", "2")]),
            "SELECT * FROM t SETTINGS max_threads = 2 FORMAT JSONEachRow"
        );
        assert_eq!(apply("select 1 format Null", &[("a", "1")]), "select 1 SETTINGS a = 1 format Null");
        // `format` as a column name is not a FORMAT clause.
        assert_eq!(apply("SELECT format FROM t", &[("a", "1")]), "SELECT format FROM t SETTINGS a = 1");
        assert_eq!(apply("SELECT 'x FORMAT JSON'", &[("a", "1")]), "SELECT 'x FORMAT JSON' SETTINGS a = 1");
    }

    #[test]
    fn extends_existing_settings() {
        assert_eq!(
            apply("SELECT 1 SETTINGS max_threads = 1 FORMAT TSV", &[("b", "2")]),
            "SELECT 1 SETTINGS max_threads = 1, b = 2 FORMAT TSV"
        );
        assert_eq!(apply("SELECT 1 settings a=1;", &[("b", "x")]), "SELECT 1 settings a=1, b = 'x'");
        // SETTINGS inside a subquery or as a table name is not the outer clause.
        assert_eq!(
            apply("SELECT * FROM (SELECT 1 SETTINGS a = 1)", &[("b", "2")]),
            "SELECT * FROM (SELECT 1 SETTINGS a = 1) SETTINGS b = 2"
        );
        assert_eq!(
            apply("SELECT value FROM system.settings WHERE name = 'x'", &[("b", "2")]),
            "SELECT value FROM system.settings WHERE name = 'x' SETTINGS b = 2"
        );
    }

    #[test]
    fn quotes_values() {
        assert_eq!(
            apply("SELECT 1", &[("a", "-1.5e3"), ("b", "it's"), ("c", "back\\slash"), ("d", "1s"), ("e", "")]),
            "SELECT 1 SETTINGS a = -1.5e3, b = 'it\\'s', c = 'back\\\\slash', d = '1s', e = ''"
        );
        assert!(is_number("0.5") && is_number(".5") && is_number("5.") && is_number("10"));
        assert!(!is_number("-") && !is_number(".") && !is_number("1e") && !is_number("0x10"));
        assert_eq!(apply("SELECT 1", &[("we ird", "1")]), "SELECT 1 SETTINGS `we ird` = 1");
    }
}

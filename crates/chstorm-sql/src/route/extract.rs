//! Where the shard key of a query comes from: the `shard_key` URL parameter,
//! the `X-Chstorm-Shard-Key` header, or `<where_column> = <literal>` in the
//! WHERE clause.

use super::shard::KeyValue;
use super::sql::{ClauseKind, Sql, Statement};
use crate::lexer::{Grammar, TokenKind};

/// The URL parameter that carries a shard key. The gateway must remove it
/// before forwarding the query (ClickHouse rejects unknown parameters as
/// unknown settings).
pub const SHARD_KEY_PARAM: &str = "shard_key";
/// The request header that carries a shard key.
pub const SHARD_KEY_HEADER: &str = "X-Chstorm-Shard-Key";

/// Extracts the shard key. In order:
///
/// 1. the `shard_key` URL parameter (`url_param`, already percent-decoded),
/// 2. the `X-Chstorm-Shard-Key` header (`header`),
/// 3. the WHERE rule on `where_column`, if configured ([`key_from_where`]).
///
/// An empty parameter or header counts as absent. A parameter or header
/// value is returned as [`KeyValue::Str`] with the raw text (`"007"` stays
/// `"007"`, which matters for a `String` column); [`ShardingExpr::evaluate`]
/// reads it as an integer for integer columns. The client vouches for a key
/// it sends this way: the SQL is not checked against it.
///
/// [`ShardingExpr::evaluate`]: super::ShardingExpr::evaluate
pub fn extract_key<S: AsRef<[u8]> + ?Sized>(
    sql: &S,
    url_param: Option<&str>,
    header: Option<&str>,
    where_column: Option<&str>,
    grammar: Grammar,
) -> Option<KeyValue> {
    if let Some(v) = url_param.filter(|v| !v.is_empty()) {
        return Some(KeyValue::Str(v.to_string()));
    }
    if let Some(v) = header.filter(|v| !v.is_empty()) {
        return Some(KeyValue::Str(v.to_string()));
    }
    key_from_where(sql, where_column.filter(|c| !c.is_empty())?, grammar)
}

/// The WHERE rule: the single value `column` is pinned to, when routing the
/// query to that value's shard gives the same result as the Distributed
/// table; else `None` (fan out).
///
/// Accepted, in every `WHERE` / `PREWHERE` as a top-level conjunct of an AND
/// chain (also inside parentheses that only group an AND chain):
/// `col = lit`, `col == lit`, `lit = col`, `col IN (lit)`, `col IN lit`, with
/// `col` bare, `` `quoted` ``, `"quoted"` or qualified (`t.col`, `db.t.col`),
/// and `lit` an integer (`42`, `-7`, `- 7`, `0x2A`; non-negative ones are
/// [`KeyValue::UInt`], negative [`KeyValue::Int`]) or a single-quoted string
/// ([`KeyValue::Str`], unescaped). Keywords are case-insensitive; string
/// literals and comments are never scanned.
///
/// # Literals: only the forms every server reads the same way
///
/// Verified on 18.16.1 (`SELECT toTypeName(x), x`, and `count()` through the
/// Distributed `items` table):
///
/// | literal | 18.16 reads it as | routed? |
/// |---|---|---|
/// | `42`, `0` | UInt8 42, 0 | yes |
/// | `-7`, `- 7`, `-/**/7`, `-0` | Int8 -7 (a negative literal, not `negate(7)`), 0 | yes |
/// | `0x2A`, `0X2a`, `0x0A` | UInt8 42, 42, 10 (`0x1e2` is 482: `e` is a hex digit) | yes |
/// | `010`, `0010`, `007`, `00` | **octal**: UInt8 8, 8, 7, 0 | no: newer servers may read decimal |
/// | `08`, `09`, `010.0` | Float64 8, 9, 10 (not octal digits: parsed as a float) | no |
/// | `-0x2A` | Int8 -42 | no: hex negatives are not worth the doubt |
/// | `+5` | UInt8 5 (the `+` is dropped) | no: not every release accepts it |
/// | `1e1`, `10.0`, `.5e1`, `0x1p4` | Float64 | no: a float, not a key |
/// | `18446744073709551616`, `-9223372036854775809` | Float64 | no: out of range |
/// | `'42'` against an integer column | 18.16: Code 43 `Illegal types of arguments (UInt64, String) of function equals`; newer releases convert the string | no: [`Router::route`](super::Router::route) refuses a string literal for an integer column and a number for a String column |
///
/// `None` (fan out), the safe answer, when:
/// * the statement is not a query (`SELECT`, `WITH`, `(`) or `INSERT ... SELECT`;
///   the text does not lex, or holds several statements;
/// * no literal is found, or two different ones are (`1` and `'1'` differ);
/// * `col` appears in a WHERE / PREWHERE other than as such a conjunct
///   (under `OR`, `NOT`, `CASE`, `IN (1, 2)`, `col > 3`, `col = other`, ...);
/// * some `SELECT` reads a table (or table function) directly without such a
///   conjunct of its own, e.g. the second part of a `UNION ALL` or an
///   `IN (SELECT ... FROM t)` subquery;
/// * a `SELECT` joins (`JOIN`, or `FROM a, b`; `ARRAY JOIN` is fine): the
///   other side would only see the routed shard's rows;
/// * `col` is also an alias (`x AS col`, `x col`, `WITH 1 AS col`), since
///   ClickHouse substitutes aliases in WHERE.
pub fn key_from_where<S: AsRef<[u8]> + ?Sized>(sql: &S, column: &str, grammar: Grammar) -> Option<KeyValue> {
    // A text that names the column neither as written nor through an escape (`\x73`, `\N`, the
    // only ways a quoted name can differ from its bytes) pins it to nothing: no parse needed.
    let b = sql.as_ref();
    if !column.is_empty() && !b.contains(&b'\\') && !b.windows(column.len()).any(|w| w == column.as_bytes()) {
        return None;
    }
    let s = Sql::parse(sql, grammar)?;
    if s.statement == Statement::Other {
        return None;
    }
    let n = s.toks.len();
    let is_col = |i: usize| {
        matches!(s.toks[i].kind, TokenKind::Word | TokenKind::QuotedIdent)
            && s.toks[i].ident().as_deref() == Some(column)
    };

    // `col` must not also be an alias.
    for i in (1..n).filter(|&i| is_col(i)) {
        let p = &s.toks[i - 1];
        let alias = match p.kind {
            TokenKind::Word => p.is_kw("AS") || !is_expr_keyword(p.text),
            TokenKind::QuotedIdent | TokenKind::Number | TokenKind::Str => true,
            TokenKind::Punct => p.text == ")" || p.text == "]",
            TokenKind::Error => true,
        };
        if alias {
            return None;
        }
    }

    let mut accounted = vec![false; n];
    let mut literals: Vec<KeyValue> = Vec::new();
    for body in &s.bodies {
        for c in body.clauses(ClauseKind::From) {
            for j in s.level(c.start, c.end) {
                let t = &s.toks[j];
                if (t.is_kw("JOIN") && !(j > 0 && s.toks[j - 1].is_kw("ARRAY"))) || t.is_punct(",") {
                    return None;
                }
            }
        }
        let mut has_key = false;
        for c in body.clauses(ClauseKind::Where).chain(body.clauses(ClauseKind::Prewhere)) {
            let parts = conjuncts(&s, c.start, c.end);
            for (x, y) in parts {
                if let Some((col_at, value)) = match_conjunct(&s, x, y, column) {
                    accounted[col_at] = true;
                    literals.push(value);
                    has_key = true;
                }
            }
        }
        let reads_table = body.clauses(ClauseKind::From).next().is_some_and(|c| !s.is_subquery(c.start));
        if reads_table && !has_key {
            return None;
        }
    }

    let labels = s.labels();
    for i in (0..n).filter(|&i| is_col(i) && !accounted[i]) {
        if matches!(labels[i], Some((_, ClauseKind::Where | ClauseKind::Prewhere))) {
            return None;
        }
    }

    let first = literals.first()?;
    literals.iter().all(|l| l == first).then(|| first.clone())
}

/// Words after which `col` is an expression, not an alias.
fn is_expr_keyword(w: &str) -> bool {
    const KW: &[&str] = &[
        "SELECT", "DISTINCT", "FROM", "WHERE", "PREWHERE", "AND", "OR", "NOT", "BY", "ON", "USING", "HAVING", "WHEN",
        "THEN", "ELSE", "CASE", "IN", "IS", "LIKE", "ILIKE", "BETWEEN", "ALL", "ANY", "WITH", "JOIN", "LIMIT",
        "OFFSET", "INTERVAL", "GLOBAL", "TOP", "ARRAY", "SETTINGS", "INTO", "TABLE", "FINAL",
    ];
    KW.iter().any(|k| k.eq_ignore_ascii_case(w))
}

/// Splits `start..end` (starting at a token of its own depth) into the
/// conjuncts of a top-level AND chain, looking into parentheses that only
/// group one. A range with an operator that binds looser than AND (`OR`,
/// `?:`, `->`), a `CASE` (whose `WHEN a AND b` is not a conjunction), an
/// alias or a comma at its top level is one conjunct as a whole. Each range
/// is walked at its own level, nested groups from a work list: linear in the
/// tokens, whatever the nesting.
fn conjuncts(s: &Sql<'_>, start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut work = vec![(start, end)];
    while let Some((start, end)) = work.pop() {
        let loose = s.level(start, end).any(|j| {
            let t = &s.toks[j];
            t.is_kw("OR")
                || t.is_kw("CASE")
                || t.is_kw("AS")
                || t.is_punct("?")
                || t.is_punct(":")
                || t.is_punct("->")
                || t.is_punct(",")
        });
        if loose {
            out.push((start, end));
            continue;
        }
        let mut pieces = Vec::new();
        let mut piece = start;
        let mut between = false;
        for j in s.level(start, end) {
            let t = &s.toks[j];
            if t.is_kw("BETWEEN") {
                between = true;
            } else if t.is_kw("AND") {
                if between {
                    between = false;
                } else {
                    pieces.push((piece, j));
                    piece = j + 1;
                }
            }
        }
        pieces.push((piece, end));
        for (x, y) in pieces.into_iter().filter(|(x, y)| x < y) {
            if s.toks[x].is_punct("(") && s.close[x] == y - 1 && !s.is_subquery(x) {
                work.push((x + 1, y - 1));
            } else {
                out.push((x, y));
            }
        }
    }
    out
}

/// Matches one conjunct `x..y` against `col = lit`, `col == lit`,
/// `lit = col`, `col IN (lit)`, `col IN lit`. Returns the index of the
/// column's token and the literal's value.
fn match_conjunct(s: &Sql<'_>, x: usize, y: usize, column: &str) -> Option<(usize, KeyValue)> {
    let is_eq = |i: usize| i < y && (s.toks[i].is_punct("=") || s.toks[i].is_punct("=="));
    let col_at = |i: usize| -> Option<(usize, usize)> {
        let (next, last) = s.compound_ident(i, y)?;
        (s.toks[last].ident().as_deref() == Some(column)).then_some((next, last))
    };
    // col = lit, col IN ...
    if let Some((next, last)) = col_at(x) {
        if is_eq(next) {
            let (after, v) = literal(s, next + 1, y)?;
            return (after == y).then_some((last, v?));
        }
        if next < y && s.toks[next].is_kw("IN") {
            let i = next + 1;
            if i < y && s.toks[i].is_punct("(") && s.close[i] == y - 1 {
                let (after, v) = literal(s, i + 1, y - 1)?;
                return (after == y - 1).then_some((last, v?));
            }
            let (after, v) = literal(s, i, y)?;
            return (after == y).then_some((last, v?));
        }
        return None;
    }
    // lit = col
    let (after, v) = literal(s, x, y)?;
    if !is_eq(after) {
        return None;
    }
    let (next, last) = col_at(after + 1)?;
    (next == y).then_some((last, v?))
}

/// A literal at `i`: its end and its value (`None` value: a literal of a
/// shape we do not route on, such as `1.5`, or out of range).
fn literal(s: &Sql<'_>, i: usize, end: usize) -> Option<(usize, Option<KeyValue>)> {
    let t = s.toks.get(i).filter(|_| i < end)?;
    match t.kind {
        TokenKind::Str => Some((i + 1, t.string_value().map(KeyValue::Str))),
        TokenKind::Number => Some((i + 1, parse_uint(t.text).map(KeyValue::UInt))),
        TokenKind::Punct if t.text == "-" => {
            let num = s.toks.get(i + 1).filter(|t| i + 1 < end && t.kind == TokenKind::Number)?;
            // `-0x2A` is Int8 -42 on 18.16, but hex negatives are left alone.
            let v = parse_uint(num.text).filter(|_| hex_digits(num.text).is_none()).and_then(|u| match u {
                0 => Some(KeyValue::UInt(0)),
                u if u <= 1u64 << 63 => Some(KeyValue::Int((u as i64).wrapping_neg())),
                _ => None,
            });
            Some((i + 2, v))
        }
        _ => None,
    }
}

/// A non-negative integer literal that every server reads the same way:
/// decimal digits without a leading zero (`0` itself is fine), or `0x` hex
/// digits. `010` is octal 8 on 18.16 (`strtoull` with base 0) and `08` a
/// Float64, while newer servers may read both as decimal: `None` (fan out).
/// Floats (`1.5`, `1e3`, `0x1p4`) and values over `u64::MAX` are `None` too.
fn parse_uint(text: &str) -> Option<u64> {
    if let Some(hex) = hex_digits(text) {
        if hex.is_empty() || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if text.is_empty() || !text.bytes().all(|c| c.is_ascii_digit()) || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

fn hex_digits(text: &str) -> Option<&str> {
    text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Grammar = Grammar::V18_16;

    fn w(sql: &str) -> Option<KeyValue> {
        extract_key(sql, None, None, Some("shop_id"), G)
    }

    #[test]
    fn a_column_named_only_through_escapes_is_still_found() {
        // The text holds no `shop_id`: the name is made by the escapes of a quoted identifier.
        for sql in [
            "SELECT * FROM items WHERE `\\x73hop_id` = 5",
            "SELECT * FROM items WHERE \"shop\\x5fid\" = 5",
            "SELECT * FROM items WHERE `shop\\N_id` = 5",
        ] {
            assert_eq!(w(sql), Some(KeyValue::UInt(5)), "{sql}");
        }
        // Neither the name nor a backslash: nothing to pin, whatever else the text holds.
        for sql in ["SELECT 1", "SELECT * FROM items WHERE shop = 5", "SELECT * FROM items WHERE `shop_ id` = 5"] {
            assert_eq!(w(sql), None, "{sql}");
        }
        assert_eq!(key_from_where("SELECT * FROM items WHERE x = 1", "", G), None);
    }
    fn u(v: u64) -> Option<KeyValue> {
        Some(KeyValue::UInt(v))
    }

    #[test]
    fn precedence_of_sources() {
        let sql = "SELECT * FROM items WHERE shop_id = 5";
        assert_eq!(extract_key(sql, Some("007"), Some("9"), Some("shop_id"), G), Some(KeyValue::Str("007".into())));
        assert_eq!(extract_key(sql, None, Some("9"), Some("shop_id"), G), Some(KeyValue::Str("9".into())));
        assert_eq!(extract_key(sql, Some(""), Some("9"), Some("shop_id"), G), Some(KeyValue::Str("9".into())));
        assert_eq!(extract_key(sql, Some(""), Some(""), Some("shop_id"), G), u(5));
        assert_eq!(extract_key(sql, None, None, None, G), None);
        assert_eq!(extract_key(sql, None, None, Some(""), G), None);
        // The parameter wins even over a query that reads another key.
        assert_eq!(extract_key("SELECT 1", Some("x"), None, None, G), Some(KeyValue::Str("x".into())));
    }

    #[test]
    fn simple_forms() {
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5"), u(5));
        assert_eq!(w("select * from items where shop_id == 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE 5 = shop_id"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id IN (5)"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id IN 5"), u(5));
        assert_eq!(w("SELECT * FROM items AS t WHERE t.shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM db.items WHERE db.items.shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE `shop_id` = 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE \"shop_id\"=5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 0x1F"), u(31));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 18446744073709551615"), u(u64::MAX));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = -7"), Some(KeyValue::Int(-7)));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = - 7"), Some(KeyValue::Int(-7)));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = -9223372036854775808"), Some(KeyValue::Int(i64::MIN)));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = -0"), u(0));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 'a''b\\n'"), Some(KeyValue::Str("a'b\n".into())));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = ''"), Some(KeyValue::Str(String::new())));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5;"), u(5));
    }

    /// Every literal form, with what 18.16.1 reads it as (see the table on
    /// [`key_from_where`]): only the ones all servers agree on give a key.
    #[test]
    fn literal_forms_as_the_server_reads_them() {
        let k = |lit: &str| w(&format!("SELECT count() FROM items FINAL WHERE shop_id = {lit}"));
        let int = |v: i64| Some(KeyValue::Int(v));
        // Routed: decimal without a leading zero, positive hex, negative decimal.
        assert_eq!(k("42"), u(42));
        assert_eq!(k("0"), u(0));
        assert_eq!(k("0x2A"), u(42));
        assert_eq!(k("0X2a"), u(42));
        assert_eq!(k("0x0A"), u(10), "leading zeros after 0x are fine");
        assert_eq!(k("0x1e2"), u(482), "e is a hex digit: 18.16 says 482");
        assert_eq!(k("0xFFFFFFFFFFFFFFFF"), u(u64::MAX));
        assert_eq!(k("-7"), int(-7));
        assert_eq!(k("- 7"), int(-7), "18.16: toTypeName(- 7) = Int8");
        assert_eq!(k("-/* c */7"), int(-7));
        assert_eq!(k("-0"), u(0));
        // Not routed: octal on 18.16, decimal elsewhere.
        for lit in ["010", "0010", "007", "00", "08", "09", "019", "-010", "-00", "010.0"] {
            assert_eq!(k(lit), None, "{lit}");
        }
        // Not routed: hex negatives, `+`, floats, exponents, out of range, odd spellings.
        for lit in [
            "-0x2A",
            "- 0x2A",
            "+5",
            "+ 5",
            "1e1",
            "1E1",
            "1e+1",
            "10.0",
            "10.",
            ".5e1",
            "0x1p4",
            "0x1.8",
            "0x",
            "0x1E+2",
            "18446744073709551616",
            "0x10000000000000000",
            "-9223372036854775809",
            "- -7",
            "-(7)",
            "(7)",
            "inf",
            "nan",
            "NULL",
            "7 + 0",
        ] {
            assert_eq!(k(lit), None, "{lit}");
        }
        // The same rules for IN and `lit = col`.
        assert_eq!(w("SELECT * FROM items WHERE shop_id IN (010)"), None);
        assert_eq!(w("SELECT * FROM items WHERE shop_id IN 010"), None);
        assert_eq!(w("SELECT * FROM items WHERE 010 = shop_id"), None);
        assert_eq!(w("SELECT * FROM items WHERE 0x2A = shop_id"), u(42));
        // A string literal keeps its text: '010' is the string "010".
        assert_eq!(k("'010'"), Some(KeyValue::Str("010".into())));
    }

    #[test]
    fn and_chains_and_clauses() {
        assert_eq!(w("SELECT * FROM items FINAL WHERE shop_id = 5 AND item_id = 7"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE item_id = 7 and shop_id = 5 AND x > 1"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE (item_id = 7 AND (shop_id = 5)) AND z"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE x BETWEEN 1 AND 2 AND shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE x NOT BETWEEN 1 AND 2 AND shop_id = 5 AND y"), u(5));
        assert_eq!(w("SELECT * FROM items PREWHERE shop_id = 5 WHERE item_id = 7"), u(5));
        assert_eq!(w("SELECT * FROM items SAMPLE 1/10 PREWHERE shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5 AND shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5 SETTINGS max_threads = 4 FORMAT JSON"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5 ORDER BY shop_id LIMIT 1 BY shop_id"), u(5));
        assert_eq!(w("SELECT shop_id, count() FROM items WHERE shop_id = 5 GROUP BY shop_id HAVING count() > 1"), u(5));
        assert_eq!(w("SELECT * FROM items ARRAY JOIN tags WHERE shop_id = 5"), u(5));
        assert_eq!(
            w("SELECT * FROM items WHERE isNotNull(shop_id) AND shop_id = 5"),
            None,
            "shop_id outside the conjunct"
        );
    }

    #[test]
    fn comments_and_strings_are_not_scanned() {
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5 -- OR shop_id = 6"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5 /* OR shop_id = 6 */ AND x"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE x = 'shop_id = 6' AND shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM items WHERE x = 'OR' AND shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM items -- WHERE shop_id = 5"), None);
        assert_eq!(w("SELECT * FROM items WHERE x = 'shop_id = 5'"), None);
    }

    #[test]
    fn fan_out_cases() {
        for sql in [
            "SELECT * FROM items WHERE shop_id = 5 OR shop_id = 5",
            "SELECT * FROM items WHERE shop_id = 5 OR x = 1",
            "SELECT * FROM items WHERE shop_id = 5 AND x = 1 OR y = 2",
            "SELECT * FROM items WHERE (shop_id = 5 OR x) AND y",
            "SELECT * FROM items WHERE shop_id IN (5, 6)",
            "SELECT * FROM items WHERE shop_id IN (SELECT 5)",
            "SELECT * FROM items WHERE shop_id NOT IN (5)",
            "SELECT * FROM items WHERE NOT shop_id = 5",
            "SELECT * FROM items WHERE NOT (shop_id = 5 AND x)",
            "SELECT * FROM items WHERE shop_id = 5 AND shop_id = 6",
            "SELECT * FROM items WHERE shop_id = 5 AND shop_id = '5'",
            "SELECT * FROM items WHERE shop_id = 5 AND shop_id > 3",
            "SELECT * FROM items WHERE shop_id != 5",
            "SELECT * FROM items WHERE shop_id > 5",
            "SELECT * FROM items WHERE shop_id = 1.5",
            "SELECT * FROM items WHERE shop_id = 1e3",
            "SELECT * FROM items WHERE shop_id = 18446744073709551616",
            "SELECT * FROM items WHERE shop_id = -9223372036854775809",
            "SELECT * FROM items WHERE shop_id = toUInt64(5)",
            "SELECT * FROM items WHERE shop_id = 5 + 1",
            "SELECT * FROM items WHERE shop_id = item_id",
            "SELECT * FROM items WHERE shop_id = 5 = 1",
            "SELECT * FROM items WHERE (shop_id) = 5",
            "SELECT * FROM items WHERE shop_id = NULL",
            "SELECT * FROM items WHERE CASE WHEN x AND shop_id = 5 AND y THEN 1 ELSE 1 END",
            "SELECT * FROM items WHERE x ? shop_id = 5 : 1",
            "SELECT * FROM items WHERE shop_id = 5 AND x IN (SELECT x FROM other)",
            "SELECT * FROM items WHERE shop_id = 5 UNION ALL SELECT * FROM items",
            "SELECT * FROM items WHERE shop_id = 5 UNION ALL SELECT * FROM items WHERE shop_id = 6",
            "SELECT * FROM items AS a JOIN items AS b USING item_id WHERE a.shop_id = 5",
            "SELECT * FROM items ANY LEFT JOIN (SELECT * FROM items WHERE shop_id = 5) USING item_id WHERE shop_id = 5",
            "SELECT * FROM items, other WHERE shop_id = 5",
            "SELECT item_id AS shop_id FROM items WHERE shop_id = 5",
            "SELECT item_id shop_id FROM items WHERE shop_id = 5",
            "SELECT count() shop_id FROM items WHERE shop_id = 5",
            "WITH 5 AS shop_id SELECT * FROM items WHERE shop_id = 5",
            "SELECT * FROM items ARRAY JOIN arr AS shop_id WHERE shop_id = 5",
            "SELECT * FROM items",
            "SELECT 1",
            "SELECT * FROM items WHERE item_id = 5",
            "SELECT * FROM items HAVING shop_id = 5",
            "SELECT * FROM items WHERE shop_id = 5; SELECT 1",
            "SELECT * FROM items WHERE shop_id = 'unterminated",
            "SELECT * FROM items WHERE (shop_id = 5",
            "ALTER TABLE items DELETE WHERE shop_id = 5",
            "INSERT INTO items VALUES (1, 2) WHERE shop_id = 5",
            "INSERT INTO items FORMAT TSV\nSELECT * FROM items WHERE shop_id = 5",
            "SELECT * FROM items WHERE shop_id = 5 AND (shop_id, x) IN ((5, 1))",
            "SELECT * FROM items WHERE shop_id = 5 AS c",
            "SELECT * FROM items WHERE shop_id = 5 AND 'é' = x é",
        ] {
            assert_eq!(w(sql), None, "{sql}");
        }
    }

    #[test]
    fn subqueries() {
        assert_eq!(w("SELECT * FROM (SELECT * FROM items WHERE shop_id = 5)"), u(5));
        assert_eq!(w("SELECT * FROM (SELECT * FROM items WHERE shop_id = 5) WHERE shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM (SELECT * FROM items WHERE shop_id = 5) WHERE shop_id = 6"), None);
        assert_eq!(
            w("SELECT * FROM (SELECT * FROM items) WHERE shop_id = 5"),
            None,
            "the inner SELECT reads all shards"
        );
        assert_eq!(
            w("SELECT * FROM items WHERE shop_id = 5 AND item_id IN (SELECT item_id FROM items WHERE shop_id = 5)"),
            u(5)
        );
        assert_eq!(
            w("SELECT * FROM items WHERE shop_id = 5 AND item_id GLOBAL IN (SELECT item_id FROM items PREWHERE shop_id = 5)"),
            u(5)
        );
        assert_eq!(
            w("SELECT * FROM items WHERE shop_id = 5 AND item_id IN (SELECT shop_id FROM items WHERE shop_id = 5)"),
            u(5),
            "shop_id in the inner select list is fine"
        );
        assert_eq!(w("SELECT * FROM items WHERE shop_id = 5 UNION ALL SELECT * FROM items WHERE shop_id = 5"), u(5));
        assert_eq!(w("INSERT INTO t SELECT * FROM items WHERE shop_id = 5"), u(5));
        assert_eq!(w("WITH (SELECT 1) AS one SELECT * FROM items WHERE shop_id = 5"), u(5));
        assert_eq!(w("SELECT extract(DAY FROM d) FROM items WHERE shop_id = 5"), u(5));
        assert_eq!(w("SELECT * FROM numbers(10) WHERE shop_id = 5"), u(5));
    }

    #[test]
    fn other_columns() {
        let k = |sql: &str, col: &str| extract_key(sql, None, None, Some(col), G);
        assert_eq!(k("SELECT * FROM t WHERE `shop id` = 'x'", "shop id"), Some(KeyValue::Str("x".into())));
        assert_eq!(k("SELECT * FROM t WHERE Shop_Id = 5", "shop_id"), None, "identifiers are case-sensitive");
        assert_eq!(k("SELECT * FROM t WHERE shop_id = 5 AND user_id = 7", "user_id"), u(7));
    }

    /// The WHERE rule never panics, and never finds a key in text that has no
    /// `=`/`IN` next to the column.
    #[test]
    fn no_panic_on_random_input() {
        let pieces = [
            "SELECT ",
            "* ",
            "FROM ",
            "items ",
            "WHERE ",
            "shop_id ",
            "= ",
            "5 ",
            "AND ",
            "OR ",
            "(",
            ") ",
            "'x' ",
            "-- c\n",
            "/* c */",
            "IN ",
            ", ",
            "UNION ALL ",
            "JOIN ",
            "t.",
            "`shop_id` ",
            "- ",
            "0x1 ",
            "BETWEEN ",
            "CASE ",
            "END ",
            "AS ",
            "'",
            "`",
            "\"",
            "é",
            ";",
            "PREWHERE ",
            "NOT ",
        ];
        for s in crate::random_texts(&pieces, 11, 10_000, 20) {
            let got = w(&s);
            if got.is_some() {
                assert!(s.contains("shop_id"), "{s}");
            }
        }
    }
}

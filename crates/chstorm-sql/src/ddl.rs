//! What a `CREATE` statement leaves where: a statement without `ON CLUSTER` runs on the one
//! server it is sent to, and a table whose engine keeps its rows on that server (a
//! non-replicated MergeTree, a Log, Memory, ...) will hold rows on that server only, whatever
//! is created elsewhere later. [`local_create`] finds such statements, so that the gateway can
//! warn the client that sent one through it (docs/GATEWAY.md, "DDL through the gateway").
//!
//! Read from the tokens of 18.16's grammar: `CREATE [TEMPORARY] TABLE | MATERIALIZED VIEW [IF
//! NOT EXISTS] [db.]name [ON CLUSTER c] ... ENGINE = Name ...`. A `TEMPORARY` table lives in its
//! session; a table made `AS` another table without an `ENGINE` takes that table's engine, which
//! the text does not name; a materialized view `TO` a table stores nothing of its own: none of
//! them is reported, nor anything that does not lex.

use crate::lexer::{tokenize, Grammar, Token, TokenKind};

/// A `CREATE` without `ON CLUSTER` of a table that keeps its rows on the server it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCreate {
    /// `TABLE` or `MATERIALIZED VIEW`.
    pub object: &'static str,
    /// The table's name as written (`db.name` when it names its database).
    pub name: String,
    /// Its engine, as written.
    pub engine: String,
}

/// The engines that keep a table's rows on the server that has the table (18.16's and later
/// releases'), besides the non-replicated `*MergeTree` ones.
const LOCAL_ENGINES: &[&str] =
    &["Memory", "TinyLog", "Log", "StripeLog", "Set", "Join", "Buffer", "File", "EmbeddedRocksDB"];

/// True when `engine` keeps a table's rows on the server that has it: a `*MergeTree` that is
/// not `Replicated*`, or one of [`LOCAL_ENGINES`].
pub fn stores_locally(engine: &str) -> bool {
    (engine.ends_with("MergeTree") && !engine.starts_with("Replicated")) || LOCAL_ENGINES.contains(&engine)
}

/// The table `sql` creates on one server only, read by `grammar`, if it is a `CREATE` of that
/// kind (see the module doc); None for any other statement.
pub fn local_create(sql: &str, grammar: Grammar) -> Option<LocalCreate> {
    let toks = tokenize(sql, grammar);
    if toks.iter().any(|t| t.kind == TokenKind::Error) {
        return None;
    }
    let mut i = 0;
    let next_is = |i: usize, kw: &str| toks.get(i).is_some_and(|t| t.is_kw(kw));
    if !next_is(i, "CREATE") {
        return None;
    }
    i += 1;
    let object = if next_is(i, "TABLE") {
        i += 1;
        "TABLE"
    } else if next_is(i, "MATERIALIZED") && next_is(i + 1, "VIEW") {
        i += 2;
        "MATERIALIZED VIEW"
    } else {
        // TEMPORARY TABLE, VIEW, DATABASE, DICTIONARY, ...
        return None;
    };
    if next_is(i, "IF") && next_is(i + 1, "NOT") && next_is(i + 2, "EXISTS") {
        i += 3;
    }
    let (name, after) = name_at(&toks, i)?;
    i = after;
    if next_is(i, "ON") && next_is(i + 1, "CLUSTER") {
        return None;
    }
    // The engine: the first `ENGINE =` at depth 0 (a column's default or a SELECT may hold
    // brackets, none an ENGINE clause).
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(i) {
        match t.kind {
            TokenKind::Punct if t.text == "(" || t.text == "[" => depth += 1,
            TokenKind::Punct if t.text == ")" || t.text == "]" => depth = depth.saturating_sub(1),
            TokenKind::Word if depth == 0 && t.is_kw("TO") && object == "MATERIALIZED VIEW" => return None,
            TokenKind::Word if depth == 0 && t.is_kw("AS") && object == "MATERIALIZED VIEW" => return None,
            TokenKind::Word if depth == 0 && t.is_kw("ENGINE") => {
                let eq = toks.get(j + 1).is_some_and(|t| t.is_punct("="));
                let engine = toks.get(j + if eq { 2 } else { 1 }).and_then(Token::ident)?;
                return stores_locally(&engine).then_some(LocalCreate { object, name, engine });
            }
            _ => {}
        }
    }
    None
}

/// The `[db.]name` at `i`: its text and the index after it.
fn name_at(toks: &[Token<'_>], i: usize) -> Option<(String, usize)> {
    let first = toks.get(i)?.ident()?;
    if toks.get(i + 1).is_some_and(|t| t.is_punct(".")) {
        let second = toks.get(i + 2)?.ident()?;
        return Some((format!("{first}.{second}"), i + 3));
    }
    Some((first, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(sql: &str) -> Option<(String, String)> {
        let read = Grammar::ALL.map(|g| local_create(sql, g));
        assert_eq!(read[0], read[1], "the grammars read {sql:?} alike");
        read[0].clone().map(|c| (c.name, c.engine))
    }

    #[test]
    fn tables_that_keep_their_rows_on_one_server() {
        let t = |n: &str, e: &str| Some((n.to_string(), e.to_string()));
        assert_eq!(local("CREATE TABLE t (x UInt8) ENGINE = Memory"), t("t", "Memory"));
        assert_eq!(
            local("create table if not exists db.t (x UInt8) engine=MergeTree ORDER BY x"),
            t("db.t", "MergeTree")
        );
        assert_eq!(
            local("CREATE TABLE `a b` (x UInt8 DEFAULT (1 + 2), y Array(UInt8)) ENGINE = ReplacingMergeTree(x) ORDER BY x"),
            t("a b", "ReplacingMergeTree")
        );
        assert_eq!(local("/* c */ CREATE TABLE t (x UInt8) ENGINE = TinyLog"), t("t", "TinyLog"));
        assert_eq!(local("CREATE TABLE t ENGINE = Log AS SELECT 1"), t("t", "Log"));
        assert_eq!(local("CREATE TABLE t AS items_local ENGINE = Memory"), t("t", "Memory"));
        assert_eq!(
            local("CREATE MATERIALIZED VIEW mv ENGINE = SummingMergeTree ORDER BY k AS SELECT k FROM t").unwrap().1,
            "SummingMergeTree"
        );
        assert_eq!(
            local_create("CREATE MATERIALIZED VIEW mv ENGINE = Memory AS SELECT 1", Grammar::V18_16).unwrap().object,
            "MATERIALIZED VIEW"
        );
    }

    #[test]
    fn statements_that_do_not() {
        for sql in [
            "CREATE TABLE t ON CLUSTER storm (x UInt8) ENGINE = Memory",
            "CREATE TABLE IF NOT EXISTS db.t ON CLUSTER storm (x UInt8) ENGINE = MergeTree ORDER BY x",
            "CREATE TABLE t (x UInt8) ENGINE = ReplicatedMergeTree('/t/{shard}', '{replica}') ORDER BY x",
            "CREATE TABLE t AS items_local ENGINE = Distributed(storm, default, items_local)",
            "CREATE TABLE t (x UInt8) ENGINE = Distributed(storm, default, items_local)",
            "CREATE TABLE t AS other",
            "CREATE TEMPORARY TABLE t (x UInt8) ENGINE = Memory",
            "CREATE VIEW v AS SELECT 1",
            "CREATE DATABASE d",
            "CREATE MATERIALIZED VIEW mv TO dest AS SELECT 1",
            "CREATE TABLE t (x UInt8) ENGINE = Null",
            "INSERT INTO t VALUES (1)",
            "SELECT 'CREATE TABLE t (x UInt8) ENGINE = Memory'",
            "CREATE TABLE t (x String DEFAULT 'ENGINE = Memory') ENGINE = Merge(db, '^t')",
            "CREATE TABLE 't",
            "CREATE TABLE",
            "",
        ] {
            assert_eq!(local(sql), None, "{sql}");
        }
    }

    #[test]
    fn engines() {
        assert!(stores_locally("MergeTree") && stores_locally("CollapsingMergeTree") && stores_locally("Memory"));
        assert!(!stores_locally("ReplicatedMergeTree") && !stores_locally("Distributed") && !stores_locally("URL"));
    }

    #[test]
    fn random_text_does_not_panic() {
        let pieces = [
            "CREATE", " TABLE", " t", " ON", " CLUSTER", " ENGINE", " =", " Memory", "(", ")", " AS", "`", "'", ".",
            " x",
        ];
        for text in crate::random_texts(&pieces, 7, 3000, 14) {
            for g in Grammar::ALL {
                let _ = local_create(&text, g);
            }
        }
    }
}

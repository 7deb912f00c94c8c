//! The reading of SQL text against ClickHouse 26.9's own parser: the generated corpus of
//! `grammar_vs_server.rs`, and more of the forms only current releases read, each sent to 26.9
//! (chdb-core 26.9, in `target/test-clients/py`, installed by `scripts/install-deps`) through
//! `formatQuerySingleLine`, which gives the statement as 26.9 parsed it: no comments, every
//! literal in one spelling, every clause where the parser put it.
//!
//! Whenever 26.9 parses a statement, chstorm's current-grammar reading of the text must lex it
//! and find what its reading of 26.9's own formatting finds: the same statements (classes), the
//! same settings, the same table functions, and no routing key that 26.9's text does not have.
//! And wherever both grammars read a text alike, that one reading is the current one too.

mod corpus;

use chstorm_sql::lexer::{integer_value, Grammar};
use chstorm_sql::reading::{read, read_all, Grammars, Reading, Readings};
use chstorm_sql::route::{key_from_where, KeyValue};
use chstorm_sql::rules::{settings_of, table_functions_of};
use chstorm_sql::statement::Class;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// 26.9's formatting of each statement, or its error code.
fn formatted_by_26_9(statements: &[String]) -> Vec<Result<String, String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../../target/test-clients/py/bin/python");
    assert!(
        python.exists(),
        "ClickHouse 26.9's parser is not installed: run scripts/install-deps (it installs chdb-core 26.9 into \
         target/test-clients/py)"
    );
    let mut child = Command::new(&python)
        .arg(root.join("tests/py/format_queries.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the 26.9 oracle");
    let mut input = String::new();
    for s in statements {
        input.push_str(&corpus::hex(s.as_bytes()));
        input.push('\n');
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("the 26.9 oracle");
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the 26.9 oracle failed: {}", out.status);
    let lines: Vec<Result<String, String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| match l.split_once(' ') {
            Some(("OK", h)) => Ok(String::from_utf8(corpus::unhex(h)).unwrap()),
            Some((_, code)) => Err(code.to_string()),
            None => Err(l.to_string()),
        })
        .collect();
    assert_eq!(lines.len(), statements.len(), "one answer per statement (is chdb-core 26.9 installed?)");
    lines
}

/// What a reading says: its classes, its settings (values as the grammar reads numbers), its
/// table functions, its routing key on `shop_id`.
#[derive(Debug, PartialEq)]
struct Facts {
    classes: Vec<Class>,
    settings: Vec<(String, String)>,
    functions: Vec<String>,
    key: Option<KeyValue>,
}

fn facts(r: &Reading<'_>, sql: &str) -> Facts {
    let mut settings: Vec<(String, String)> = settings_of(&r.tokens)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let v = integer_value(v.trim(), r.grammar).map_or(v, |n| n.to_string());
            (k, v)
        })
        .collect();
    // 26.9 repeats an INSERT's SELECT settings at the INSERT's level: compare the set.
    settings.sort();
    settings.dedup();
    let mut functions: Vec<String> =
        table_functions_of(&r.tokens).unwrap_or_default().into_iter().map(|f| f.to_ascii_lowercase()).collect();
    functions.sort();
    Facts { classes: r.classes.clone(), settings, functions, key: key_from_where(sql, "shop_id", r.grammar) }
}

/// The forms only current releases read, in statements whose rules matter.
fn current_forms() -> Vec<String> {
    let mut v: Vec<String> = [
        "# x\nKILL QUERY WHERE 1",
        "#!/usr/bin/clickhouse\nSYSTEM SHUTDOWN",
        "/* /* */ SELECT */ INSERT INTO t VALUES (1)",
        "SELECT 1 // '\nSETTINGS max_execution_time=0 --'",
        "SELECT 010, 0b11, 1_000",
        "SELECT $$x$$ FROM numbers(1) SETTINGS max_threads = 1",
        "SELECT $tag$ SETTINGS max_threads = 1 $tag$",
        "SELECT \u{2018}SETTINGS max_threads = 1\u{2019}",
        "SELECT \u{201C}a b\u{201D} FROM (SELECT 1 AS \u{201C}a b\u{201D})",
        "SELECT 1\u{a0}SETTINGS\u{3000}max_threads = 2",
        "SELECT x'41', b'01000001'",
        "SELECT {x:UInt8}",
        "SELECT 1 <=> 2, 2 ^ 3",
        "SELECT a$b FROM (SELECT 1 AS a$b)",
        "SELECT 1abc FROM (SELECT 1 AS 1abc)",
        "WITH 1 AS x INSERT INTO t SELECT x",
        "SELECT 1 PARALLEL WITH SYSTEM FLUSH LOGS",
        "FROM numbers(2) SELECT number SETTINGS max_threads = 1",
        "INSERT INTO t SELECT count() AS format FROM (SELECT number FROM system.numbers LIMIT 150000000) SETTINGS max_rows_to_read = 0",
        "INSERT INTO t (format, values) SELECT 1, 2 SETTINGS max_threads = 3",
        "INSERT INTO t SETTINGS max_threads = 1 VALUES (1)",
        "INSERT INTO t SELECT * FROM url('http://127.0.0.1:1/?query=SELECT+1', TSV, 'x UInt8')",
        "SELECT * FROM items WHERE shop_id = 010",
        "SELECT * FROM items WHERE shop_id = 0b1010",
        "SELECT * FROM items WHERE shop_id = 1_0",
        "SELECT * FROM items WHERE shop_id = $$10$$",
        "SELECT * FROM items WHERE shop_id = \u{2212}10",
        "SELECT 1 FORMAT JSON SETTINGS max_threads = 1",
        "SELECT 1 /* a /* b */ c */ SETTINGS max_threads = 1",
        "SELECT 1 /* a /* b */ SETTINGS max_threads = 1 */",
        "(SELECT 1) SETTINGS max_threads = 1",
        "DESCRIBE TABLE url('http://127.0.0.1:1/', CSV, 'x UInt8')",
        "CREATE TABLE t ENGINE = Memory AS SELECT * FROM remote('127.0.0.1', system.one)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Every SETTINGS position with each comment form before and after it.
    for c in ["#! c\n", "# c\n", "// c\n", "-- c\n", "/* c */", "/* /* c */ */", "\u{a0}"] {
        v.push(format!(
            "{c}SELECT value FROM system.settings WHERE name = 'max_threads'{c}SETTINGS{c}max_threads{c}={c}3{c}"
        ));
        v.push(format!("INSERT INTO t{c}SELECT 1 AS format{c}SETTINGS max_threads = 3"));
    }
    v
}

#[test]
fn the_current_reading_says_what_26_9_parses() {
    let mut statements: Vec<String> =
        corpus::cases(0x6e61_6d65, 3000, "default.corpus_insert").into_iter().map(|c| c.sql).collect();
    statements.extend(current_forms());
    let formatted = formatted_by_26_9(&statements);
    let (mut parsed, mut agreed, mut settings, mut only_current) = (0, 0, 0, 0);
    for (sql, f) in statements.iter().zip(&formatted) {
        let both = read_all(sql, Grammars::ALL);
        let Ok(canonical) = f else { continue };
        parsed += 1;
        let mine = read(sql, Grammars::of(Grammar::Current)).unwrap();
        assert!(mine.lexed(), "26.9 parses {sql:?} and the current lexer stops at {:?}", mine.tokens.last());
        let theirs = read(canonical, Grammars::of(Grammar::Current)).unwrap();
        let (m, t) = (facts(&mine, sql), facts(&theirs, canonical));
        assert_eq!(m.classes, t.classes, "{sql:?} parses in 26.9 as {canonical:?}");
        assert_eq!(m.settings, t.settings, "{sql:?} parses in 26.9 as {canonical:?}");
        assert_eq!(m.functions, t.functions, "{sql:?} parses in 26.9 as {canonical:?}");
        // A key may be missed (the gateway then fans out), never made up or misread.
        assert!(m.key.is_none() || m.key == t.key, "{sql:?} parses in 26.9 as {canonical:?}: {:?}", m.key);
        if !m.settings.is_empty() {
            settings += 1;
        }
        match both {
            Readings::Agreed(r) => {
                agreed += 1;
                let b = facts(&r, sql);
                assert_eq!((b.classes, b.functions), (m.classes, m.functions), "{sql:?}");
                assert_eq!(b.settings.len(), m.settings.len(), "{sql:?}");
            }
            Readings::Disputed(..) => only_current += 1,
        }
    }
    eprintln!(
        "{} statements: 26.9 parses {parsed}, {settings} of them with settings; {agreed} read alike by both grammars, \
         {only_current} only by the current one",
        statements.len()
    );
    assert!(parsed > statements.len() / 4 && settings > 100 && only_current > 50, "the corpus exercises too little");
}

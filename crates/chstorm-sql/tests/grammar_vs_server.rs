//! The reading of SQL text against the servers that run it: a generated corpus
//! (`corpus/mod.rs`) read by chstorm's lexer and rules, and run by a real ClickHouse 18.16
//! server, which shows what it made of each statement: an answer or a syntax error, the
//! `max_block_size` a `SETTINGS` clause gave it, the row a routing key selects.
//!
//! Whenever 18.16 runs a statement, its 18.16 reading must say what the server did: it lexed,
//! it is the statement it was meant to be, it holds the settings that applied and no others,
//! and a routing key it reads is the value the server compared. And wherever both grammars
//! read a text alike ([`chstorm_sql::reading::Readings::Agreed`]), that one reading is the
//! 18.16 one: a rule of the gateway, which reads with every grammar of its cluster, decides as
//! this server would. The 26.9 half of the same corpus is `grammar_vs_chdb.rs`.

mod corpus;

use chstorm_local::shared_server;
use chstorm_sql::lexer::{integer_value, Grammar};
use chstorm_sql::reading::{read, read_all, Grammars, Reading, Readings};
use chstorm_sql::route::{key_from_where, KeyValue};
use chstorm_sql::rules::settings_of;
use chstorm_sql::statement::{Class, Operator};
use corpus::{Case, Meant};
use std::collections::BTreeMap;

const SEED: u64 = 0x6e61_6d65;
const CASES: usize = 3000;
const TABLE: &str = "default.corpus_insert";

/// What a reading of a case says: its classes, the `max_block_size` it sets (as a number when
/// it reads as one), and the routing key on `shop_id`.
#[derive(Debug, PartialEq)]
struct Facts {
    classes: Vec<Class>,
    block_size: Option<Option<u64>>,
    key: Option<KeyValue>,
}

fn facts(r: &Reading<'_>, sql: &str) -> Facts {
    let block_size = settings_of(&r.tokens)
        .ok()
        .and_then(|s| s.into_iter().rev().find(|(k, _)| k == "max_block_size"))
        .map(|(_, v)| integer_value(v.trim(), r.grammar));
    Facts { classes: r.classes.clone(), block_size, key: key_from_where(sql, "shop_id", r.grammar) }
}

fn meant_class(m: Meant) -> Class {
    match m {
        Meant::SettingsProbe | Meant::Select | Meant::Key => Class::Read,
        Meant::Kill => Class::Operator(Operator::Kill),
        Meant::InsertSelect => Class::Insert,
        Meant::System => Class::Operator(Operator::System),
    }
}

/// Checks one case that the server ran (`body` its answer); `inserted` is what an INSERT of
/// the case put in the table.
fn check_ran(n: usize, case: &Case, body: &str, inserted: Option<u64>, default_block: u64) {
    let sql = &case.sql;
    let r = read(sql, Grammars::of(Grammar::V18_16)).unwrap();
    assert!(r.lexed(), "18.16 ran {sql:?} and the 18.16 lexer stops at {:?}", r.tokens.last());
    let f = facts(&r, sql);
    // An INSERT whose first line a comment took runs as its SELECT, and answers rows.
    let ran_as = match case.meant {
        Meant::InsertSelect if !body.trim().is_empty() => Class::Read,
        m => meant_class(m),
    };
    assert_eq!(f.classes, std::slice::from_ref(&ran_as), "18.16 ran {sql:?} as {ran_as:?}, answering {body:?}");
    let ran_with = match case.meant {
        // No row: a blank or comment joined the probe's WHERE to what followed (`name = 'x' = 777`).
        Meant::SettingsProbe if body.trim().is_empty() => None,
        Meant::SettingsProbe => Some(body.trim().parse::<u64>().unwrap_or_else(|_| panic!("{sql:?}: {body:?}"))),
        // Nothing inserted: the WHERE was joined to what followed, as above.
        Meant::InsertSelect if ran_as == Class::Insert => inserted,
        Meant::InsertSelect => None,
        _ => None,
    };
    if let Some(v) = ran_with {
        let read_as = f.block_size.map(|v| v.unwrap_or_else(|| panic!("{sql:?}: a value that is no number")));
        assert_eq!(read_as.unwrap_or(default_block), v, "{sql:?}: the server ran with max_block_size {v}");
    }
    if case.meant == Meant::Select {
        assert!(body.starts_with(&format!("m{n}\t")), "{sql:?}: {body:?}");
    }
    if case.meant == Meant::Key {
        // A key the reading routes on must be the value the server compared: 42 selects the row.
        if let Some(k) = &f.key {
            let row = body.trim() == "42";
            assert_eq!(matches!(k, KeyValue::UInt(42)), row, "{sql:?}: key {k:?}, answer {body:?}");
        }
    }
}

/// The readings of every grammar, where they agree, are the 18.16 reading.
fn check_agreed(sql: &str) -> bool {
    match read_all(sql, Grammars::ALL) {
        Readings::Agreed(both) => {
            let old = read(sql, Grammars::of(Grammar::V18_16)).unwrap();
            let new = read(sql, Grammars::of(Grammar::Current)).unwrap();
            assert_eq!(facts(&both, sql), facts(&old, sql), "{sql:?}");
            assert_eq!(facts(&new, sql).classes, facts(&old, sql).classes, "{sql:?}");
            // The same settings; their values may differ only by a leading zero's base (octal
            // 0777 for 18.16, decimal for 26.9), which no rule reads (`chstorm_sql::reading`).
            assert_eq!(facts(&new, sql).block_size.is_some(), facts(&old, sql).block_size.is_some(), "{sql:?}");
            true
        }
        Readings::Disputed(..) => false,
    }
}

#[test]
fn the_18_16_reading_says_what_18_16_runs() {
    let server = shared_server();
    server.query(&format!("CREATE TABLE IF NOT EXISTS {TABLE} (n UInt32, v UInt64) ENGINE = Memory")).unwrap();
    server.query(&format!("TRUNCATE TABLE {TABLE}")).unwrap();
    let default_block: u64 = server
        .query("SELECT value FROM system.settings WHERE name = 'max_block_size'")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cases = corpus::cases(SEED, CASES, TABLE);
    let answers: Vec<Result<String, String>> =
        cases.iter().map(|c| server.query(&c.sql).map_err(|e| e.to_string())).collect();
    let inserted: BTreeMap<usize, u64> = server
        .query(&format!("SELECT n, v FROM {TABLE} FORMAT TSV"))
        .unwrap()
        .lines()
        .map(|l| {
            let (n, v) = l.split_once('\t').unwrap();
            (n.parse().unwrap(), v.parse().unwrap())
        })
        .collect();
    let (mut ran, mut set, mut agreed, mut hidden) = (0, 0, 0, 0);
    for (n, (case, answer)) in cases.iter().zip(&answers).enumerate() {
        if check_agreed(&case.sql) {
            agreed += 1;
        }
        let Ok(body) = answer else {
            // 18.16 refused it: its reading may be anything but a reason to run it twice.
            continue;
        };
        ran += 1;
        check_ran(n, case, body, inserted.get(&n).copied(), default_block);
        match case.meant {
            Meant::SettingsProbe if body.trim() == "777" => set += 1,
            Meant::SettingsProbe if case.sql.contains("max_block_size =") => hidden += 1,
            _ => {}
        }
    }
    eprintln!(
        "{CASES} cases: 18.16 ran {ran}; settings applied {set}, hidden {hidden}; both grammars agree on {agreed}"
    );
    // The corpus must exercise what it tests: statements that run, settings that apply and
    // settings hidden in comments or strings, texts the grammars read apart.
    assert!(ran > CASES / 5 && set > 50 && hidden > 50, "{ran} ran, {set} set, {hidden} hidden");
    assert!(agreed > CASES / 3 && agreed < CASES, "{agreed} agreed");
}

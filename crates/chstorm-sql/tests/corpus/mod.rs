//! The generated corpus of the grammar tests: statements whose comments, quotes, literals and
//! statement words sit in every position (before the first keyword, between keywords, inside
//! `SETTINGS`, around a routing key), each with what it is meant to be, so that a server's
//! answer shows what the server made of it.
//!
//! Every statement is built from a template and pieces drawn by a seeded generator. The
//! pieces are the forms the two grammars read differently (`#`, `//`, nested `/* */`,
//! heredocs, Unicode quotes and spaces, `_` in numbers, `0b`, words that start with digits)
//! and the ones they read alike, some of them opening a comment or a string that a later piece
//! closes, so that a `SETTINGS` clause or a statement word may be hidden from one grammar and
//! not the other.

#![allow(dead_code)]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// What a statement of the corpus is meant to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meant {
    /// `SELECT value FROM system.settings WHERE name = 'max_block_size' ...`: its answer is
    /// the `max_block_size` it ran with (777 when a SETTINGS clause of the text applied).
    SettingsProbe,
    /// A read whose answer is its marker.
    Select,
    /// `KILL QUERY WHERE query_id = '<marker>' SYNC`: kills nothing.
    Kill,
    /// `INSERT INTO <table> SELECT <case number>, <max_block_size it ran with>`.
    InsertSelect,
    /// `SYSTEM FLUSH LOGS`: harmless on a test server.
    System,
    /// `SELECT shop_id FROM (SELECT toUInt64(42) AS shop_id) WHERE shop_id = <literal>`: a
    /// row (42) when the literal is 42 as the server reads it.
    Key,
}

/// One statement and what it is meant to be.
#[derive(Clone, Debug)]
pub struct Case {
    pub sql: String,
    pub meant: Meant,
}

/// Blanks that both grammars skip alike.
const SAME_BLANKS: &[&str] =
    &[" ", "  ", "\t", "\n", "\r\n", "-- c\n", "--\n", "/* c */", "/**/", "// c\n", "/* -- */"];

/// Blanks that only the current grammar skips (18.16 stops at them), or that end elsewhere
/// in each grammar.
const DIFFERENT_BLANKS: &[&str] =
    &["# c\n", "#! c\n", "#c\n", "/* /* n */ */", "/* a /* b */ c */", "\u{a0}", "\u{3000}", "\u{feff}", "\u{2003}"];

/// Pieces that open or close a comment or a string, so that what comes between may be hidden:
/// used in pairs around a hidden part, or alone.
const OPENERS: &[(&str, &str)] = &[
    ("// '\n", "--'"),
    ("# '\n", "--'"),
    ("-- '\n", "--'"),
    ("/* /* */", "*/"),
    ("/* x /* y */ z", "*/"),
    ("/*", "*/"),
    ("$$", "$$"),
    ("$t$", "$t$"),
    ("\u{2018}", "\u{2019}"),
    ("'", "'"),
    ("#! '\n", "--'"),
    ("--", "\n"),
    ("//", "\n"),
    ("# ", "\n"),
];

/// Literals for the SELECT probes, read alike or not.
const LITERALS: &[&str] = &[
    "1",
    "010",
    "08",
    "0x1F",
    "0b11",
    "1_000",
    "1e3",
    ".5",
    "1.5",
    "'a''b'",
    "'a\\'b'",
    "$$x$$",
    "\u{2018}x\u{2019}",
    "x'41'",
    "1abc",
    "0x",
    "-1",
    "\u{2212}1",
    "{x:UInt8}",
];

/// Routing keys: 42 in many spellings, some read so only by one grammar, and others.
const KEYS: &[&str] = &[
    "42",
    "042",
    "0x2A",
    "0x2a",
    "4_2",
    "42_",
    "0b101010",
    "052",
    "42.0",
    "4.2e1",
    "'42'",
    "$$42$$",
    "-42",
    "- 42",
    "42abc",
    "4/**/2",
    "(42)",
    "\u{2212}42",
    "+42",
    "0042",
    "42 -- 1",
    "42 # 1\n",
    "{k:UInt8}",
    "43",
];

/// A blank: mostly one both grammars read alike, sometimes one they read apart.
fn blank(rng: &mut SmallRng) -> &'static str {
    match rng.gen_range(0..40) {
        0..=23 => " ",
        24..=37 => SAME_BLANKS[rng.gen_range(0..SAME_BLANKS.len())],
        _ => DIFFERENT_BLANKS[rng.gen_range(0..DIFFERENT_BLANKS.len())],
    }
}

/// `text` maybe wrapped in an opener and its closer: hidden from a grammar that reads the
/// opener as a comment or a string, and seen by one that does not.
fn maybe_hidden(rng: &mut SmallRng, text: &str) -> String {
    if rng.gen_bool(0.5) {
        return text.to_string();
    }
    let (open, close) = OPENERS[rng.gen_range(0..OPENERS.len())];
    format!("{open}{text}{close}")
}

/// Words joined by blanks, each blank drawn anew.
fn join(rng: &mut SmallRng, words: &[&str]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push_str(blank(rng));
        }
        out.push_str(w);
    }
    out
}

/// The `SETTINGS max_block_size = 777` tail of a probe, in some spelling, maybe hidden.
fn settings_tail(rng: &mut SmallRng) -> String {
    let value = ["777", "'777'", "0777", "777 "][rng.gen_range(0..4)];
    let eq = ["=", "=="][rng.gen_range(0..2)];
    let clause = join(rng, &["SETTINGS", "max_block_size", eq, value]);
    let tail = maybe_hidden(rng, &clause);
    format!("{}{tail}{}", blank(rng), blank(rng))
}

/// `count` cases from `seed`.
pub fn cases(seed: u64, count: usize, insert_table: &str) -> Vec<Case> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(count);
    for n in 0..count {
        let lead = format!(
            "{}{}",
            blank(&mut rng),
            if rng.gen_bool(0.2) { maybe_hidden(&mut rng, "") } else { String::new() }
        );
        let marker = format!("'m{n}'");
        let (body, meant) = match rng.gen_range(0..10) {
            0..=3 => {
                let probe = join(
                    &mut rng,
                    &["SELECT", "value", "FROM", "system.settings", "WHERE", "name", "=", "'max_block_size'"],
                );
                (format!("{probe}{}", settings_tail(&mut rng)), Meant::SettingsProbe)
            }
            4..=5 => {
                let lit = LITERALS[rng.gen_range(0..LITERALS.len())];
                let hidden = maybe_hidden(&mut rng, lit);
                let words = ["SELECT", &marker, ",", &hidden];
                let mut s = join(&mut rng, &words);
                if rng.gen_bool(0.3) {
                    s = format!("({s})");
                }
                (s, Meant::Select)
            }
            6 => {
                // No piece that may comment out the rest of a line: 18.16 reads `KILL QUERY SYNC`
                // without its WHERE as a KILL of every query, its own too, and dies of it.
                let words = ["KILL", "QUERY", "WHERE", "query_id", "=", &marker, "SYNC"];
                (join(&mut rng, &words), Meant::Kill)
            }
            7..=8 => {
                let alias = ["format", "values", "`format`", "settings_x"][rng.gen_range(0..4)];
                let number = n.to_string();
                let words = [
                    "INSERT",
                    "INTO",
                    insert_table,
                    "SELECT",
                    &number,
                    ",",
                    "toUInt64(value)",
                    "AS",
                    alias,
                    "FROM",
                    "system.settings",
                    "WHERE",
                    "name",
                    "=",
                    "'max_block_size'",
                ];
                (format!("{}{}", join(&mut rng, &words), settings_tail(&mut rng)), Meant::InsertSelect)
            }
            9 if rng.gen_bool(0.3) => (join(&mut rng, &["SYSTEM", "FLUSH", "LOGS"]), Meant::System),
            _ => {
                let key = KEYS[rng.gen_range(0..KEYS.len())];
                let words = [
                    "SELECT",
                    "shop_id",
                    "FROM",
                    "(SELECT",
                    "toUInt64(42)",
                    "AS",
                    "shop_id)",
                    "WHERE",
                    "shop_id",
                    "=",
                    key,
                ];
                (join(&mut rng, &words), Meant::Key)
            }
        };
        out.push(Case { sql: format!("{lead}{body}"), meant });
    }
    out
}

/// Hex of bytes, for a line protocol that needs no escaping.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

/// Bytes of hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0)).collect()
}

//! One reading of a statement for every rule: the text lexed under the grammar of each server it
//! may reach ([`Grammars`]), compared, and kept only when all of them read it alike.
//!
//! The gateway decides from SQL text before a server sees it: whether it is a read (retries,
//! hedges), whether it is an operator's statement, which settings and table functions it
//! names, how deep it nests, and where it routes. A server of another release may read the same
//! bytes otherwise (`# x` newline `KILL QUERY WHERE 1` is a syntax error for 18.16 and a KILL
//! for 26.9; `/* /* */ SELECT */ INSERT ...` a SELECT-ish error for 18.16 and an INSERT for
//! 26.9). So [`read`] lexes the text with every grammar in the set and compares the significant
//! tokens (kind and span): when they are the same, every rule built on them reads the text as
//! each of those servers does; when they differ, the caller gets a [`Disagreement`] that names
//! the first byte read two ways, and must refuse the statement for a user with rules and never
//! send it twice.
//!
//! What the tokens do not show, and what the callers do about it: a numeric literal with a
//! leading zero (`010`) is the same token for both grammars but octal 8 for 18.16 and decimal
//! 10 today; routing never routes on such a literal (`route::extract`), and no other rule reads
//! a literal's value except `readonly = 1`/`2`, which matches only those exact spellings.

use crate::lexer::{Grammar, Token, TokenKind};
use crate::statement::{classify, sql_tokens, Class, InsertData, Operator, StatementKind};

/// The grammars of the servers a statement may reach: a set of [`Grammar`]s, never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grammars(u8);

impl Grammars {
    /// Both grammars: for a cluster whose replicas' versions are not all known.
    pub const ALL: Grammars = Grammars(0b11);

    /// The set of one grammar.
    pub const fn of(g: Grammar) -> Grammars {
        Grammars(Self::bit(g))
    }

    const fn bit(g: Grammar) -> u8 {
        match g {
            Grammar::V18_16 => 1,
            Grammar::Current => 2,
        }
    }

    /// This set and `g`.
    pub const fn with(self, g: Grammar) -> Grammars {
        Grammars(self.0 | Self::bit(g))
    }

    /// Both sets.
    pub const fn union(self, other: Grammars) -> Grammars {
        Grammars(self.0 | other.0)
    }

    /// The grammars a server of release `major` (`SELECT version()`'s first number) reads
    /// with: 18.16's for 18.x; the current one for 24.1 and later, whose lexer
    /// (`src/Parsers/Lexer.cpp`) has every form the current grammar reads; both for 19.1 to
    /// 23.12, which came in between (a text is then read only where 18.16 and current releases
    /// read it alike) and for a release not known.
    pub const fn of_release(major: u64) -> Grammars {
        match major {
            18 => Grammars::of(Grammar::V18_16),
            24.. => Grammars::of(Grammar::Current),
            _ => Grammars::ALL,
        }
    }

    pub fn contains(self, g: Grammar) -> bool {
        self.0 & Self::bit(g) != 0
    }

    /// The grammars of the set, oldest first.
    pub fn iter(self) -> impl Iterator<Item = Grammar> {
        Grammar::ALL.into_iter().filter(move |&g| self.contains(g))
    }

    /// The oldest grammar of the set: the one a statement that reads alike is read with.
    pub fn first(self) -> Grammar {
        self.iter().next().unwrap_or(Grammar::Current)
    }

    /// The set's names, for messages: "ClickHouse 18.16 and current ClickHouse (24.x to 26.x)".
    pub fn names(self) -> String {
        self.iter().map(Grammar::name).collect::<Vec<_>>().join(" and ")
    }
}

impl Default for Grammars {
    fn default() -> Self {
        Grammars::ALL
    }
}

/// A text that two grammars of the set read differently. The message is one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{older} and {newer} read this statement differently from byte {at}: {older_reads} for the first, {newer_reads} \
     for the second"
)]
pub struct Disagreement {
    /// The first byte the grammars read differently.
    pub at: usize,
    pub older: &'static str,
    pub newer: &'static str,
    /// What each grammar reads there: "a comment or white space", "the word `KILL`", ...
    pub older_reads: String,
    pub newer_reads: String,
}

/// A statement as every grammar of its set reads it.
#[derive(Debug, Clone)]
pub struct Reading<'a> {
    /// The grammar it was read with (the oldest of the set; all read it alike).
    pub grammar: Grammar,
    /// Its significant tokens that are SQL (an `INSERT ... FORMAT`'s data left out); the last may
    /// be an error token, where lexing stopped.
    pub tokens: Vec<Token<'a>>,
    /// One class per statement of the text (split at `;` and `PARALLEL WITH`).
    pub classes: Vec<Class>,
    /// Where an INSERT's data starts.
    pub data: InsertData,
}

impl Reading<'_> {
    /// A read when every statement of the text is one.
    pub fn kind(&self) -> StatementKind {
        if self.classes.iter().all(|c| c.kind() == StatementKind::Read) {
            StatementKind::Read
        } else {
            StatementKind::Write
        }
    }

    /// Whether the text lexed to its end (or to its data) without an error.
    pub fn lexed(&self) -> bool {
        self.tokens.last().is_none_or(|t| t.kind != TokenKind::Error)
    }

    /// The operator kinds the statements need, each once, in the config's order.
    pub fn operators(&self) -> Vec<Operator> {
        operators_of(self.classes.iter())
    }
}

/// The operator kinds of `classes`, each once, in the config's order.
fn operators_of<'c>(classes: impl Iterator<Item = &'c Class>) -> Vec<Operator> {
    let mut ops: Vec<Operator> = classes
        .filter_map(|c| match c {
            Class::Operator(o) => Some(*o),
            _ => None,
        })
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

/// A statement as the grammars of its set read it: alike, or not.
#[derive(Debug, Clone)]
pub enum Readings<'a> {
    /// Every grammar reads it alike.
    Agreed(Reading<'a>),
    /// They do not: where, and each grammar's own reading (oldest first).
    Disputed(Disagreement, Vec<Reading<'a>>),
}

impl<'a> Readings<'a> {
    /// The reading every grammar shares, or where they part.
    pub fn agreed(&self) -> Result<&Reading<'a>, &Disagreement> {
        match self {
            Readings::Agreed(r) => Ok(r),
            Readings::Disputed(d, _) => Err(d),
        }
    }

    /// A read only when every grammar reads one: a disputed text is never sent twice.
    pub fn kind(&self) -> StatementKind {
        match self {
            Readings::Agreed(r) => r.kind(),
            Readings::Disputed(..) => StatementKind::Write,
        }
    }

    /// Every statement's class under every grammar.
    pub fn classes(&self) -> impl Iterator<Item = &Class> {
        let all: &[Reading<'a>] = match self {
            Readings::Agreed(r) => std::slice::from_ref(r),
            Readings::Disputed(_, each) => each,
        };
        all.iter().flat_map(|r| r.classes.iter())
    }

    /// The operator kinds any grammar's reading needs, each once, in the config's order.
    pub fn operators(&self) -> Vec<Operator> {
        operators_of(self.classes())
    }

    /// The deepest nesting any grammar reads ([`crate::rules::nesting_depth_of`]).
    pub fn depth(&self) -> usize {
        match self {
            Readings::Agreed(r) => crate::rules::nesting_depth_of(&r.tokens),
            Readings::Disputed(_, each) => {
                each.iter().map(|r| crate::rules::nesting_depth_of(&r.tokens)).max().unwrap_or(0)
            }
        }
    }
}

/// [`read`], and on a disagreement each grammar's own reading too.
pub fn read_all<S: AsRef<[u8]> + ?Sized>(sql: &S, grammars: Grammars) -> Readings<'_> {
    match read(sql, grammars) {
        Ok(r) => Readings::Agreed(r),
        Err(d) => {
            let each = grammars.iter().filter_map(|g| read(sql, Grammars::of(g)).ok()).collect();
            Readings::Disputed(d, each)
        }
    }
}

/// Reads `sql` under every grammar of `grammars`; the reading when they agree.
pub fn read<S: AsRef<[u8]> + ?Sized>(sql: &S, grammars: Grammars) -> Result<Reading<'_>, Disagreement> {
    let b = sql.as_ref();
    let mut set = grammars.iter();
    let grammar = set.next().unwrap_or(Grammar::Current);
    let (tokens, data) = sql_tokens(b, grammar);
    for other in set {
        let (theirs, their_data) = sql_tokens(b, other);
        if let Some(d) = differ(b, (grammar, &tokens), (other, &theirs)) {
            return Err(d);
        }
        if their_data != data {
            let at = |d: InsertData| match d {
                InsertData::None => "no data".to_string(),
                InsertData::Values(n) => format!("rows of SQL from byte {n}"),
                InsertData::Format(n) => format!("data from byte {n}"),
            };
            return Err(Disagreement {
                at: tokens.last().map_or(0, Token::end),
                older: grammar.name(),
                newer: other.name(),
                older_reads: at(data),
                newer_reads: at(their_data),
            });
        }
    }
    let classes = classify(&tokens);
    Ok(Reading { grammar, tokens, classes, data })
}

/// The first place two token lists differ, as a [`Disagreement`].
fn differ(sql: &[u8], a: (Grammar, &[Token<'_>]), b: (Grammar, &[Token<'_>])) -> Option<Disagreement> {
    let same = |x: &Token<'_>, y: &Token<'_>| x.kind == y.kind && x.start == y.start && x.len == y.len;
    let i = (0..a.1.len().max(b.1.len())).find(|&i| match (a.1.get(i), b.1.get(i)) {
        (Some(x), Some(y)) => !same(x, y),
        _ => true,
    })?;
    let (x, y) = (a.1.get(i), b.1.get(i));
    let at = match (x, y) {
        (Some(x), Some(y)) => x.start.min(y.start),
        (Some(t), None) | (None, Some(t)) => t.start,
        (None, None) => sql.len(),
    };
    Some(Disagreement {
        at,
        older: a.0.name(),
        newer: b.0.name(),
        older_reads: describe(x, at),
        newer_reads: describe(y, at),
    })
}

/// What a grammar reads at byte `at`, given its token there or after it.
fn describe(t: Option<&Token<'_>>, at: usize) -> String {
    let Some(t) = t else { return "the end of the statement".into() };
    if t.start > at {
        return "a comment or white space".into();
    }
    let text: String = t.text.chars().take(24).collect();
    let more = if t.text.chars().count() > 24 { "..." } else { "" };
    match t.kind {
        TokenKind::Word => format!("the word `{text}{more}`"),
        TokenKind::QuotedIdent => format!("the quoted name {text}{more}"),
        TokenKind::Number => format!("the number {text}{more}"),
        TokenKind::Str => format!("a string literal {text}{more}"),
        TokenKind::Punct => format!("`{text}`"),
        TokenKind::Error => match text.chars().next() {
            Some(c) => format!("an error (`{c}` cannot stand there)"),
            None => "an error (a byte that is not UTF-8)".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(sql: &str) -> Result<Reading<'_>, Disagreement> {
        read(sql, Grammars::ALL)
    }

    #[test]
    fn what_both_read_alike_is_read() {
        for q in [
            "SELECT 1",
            "SELECT 1 // comment",
            "SELECT 010, 0x1F, 1.5e3 FROM t -- x",
            "/* c */ SELECT 'a''b' FROM `t` WHERE \"c\" = 1",
            "INSERT INTO t FORMAT TSV\n# x\t/* $$ {",
        ] {
            assert!(both(q).is_ok(), "{q}: {:?}", both(q).err());
        }
    }

    #[test]
    fn what_they_read_apart_is_a_disagreement() {
        for (q, at) in [
            ("# x\nKILL QUERY WHERE 1", 0),
            ("/* /* */ SELECT */ INSERT INTO t VALUES (1)", 9),
            ("SELECT 1_000", 7),
            ("SELECT 1abc", 7),
            ("SELECT $$x$$", 7),
            ("SELECT a$b", 7),
            ("SELECT \u{2018}x\u{2019}", 7),
            ("SELECT {x:UInt8}", 7),
            ("SELECT 1\u{a0}+ 1", 8),
            ("SELECT x'41'", 7),
            ("INSERT INTO t VALUES (1_0)", 22),
        ] {
            let d = both(q).expect_err(q);
            assert_eq!(d.at, at, "{q}: {d}");
        }
        let d = both("# x\nKILL QUERY WHERE 1").unwrap_err();
        assert_eq!(
            d.to_string(),
            "ClickHouse 18.16 and current ClickHouse (24.x to 26.x) read this statement differently from byte 0: an \
             error (`#` cannot stand there) for the first, a comment or white space for the second"
        );
    }

    #[test]
    fn a_release_reads_with_its_grammar() {
        assert_eq!(Grammars::of_release(18), Grammars::of(Grammar::V18_16));
        for major in [19, 20, 22, 23] {
            assert_eq!(Grammars::of_release(major), Grammars::ALL, "{major}");
        }
        for major in [24, 25, 26, 27] {
            assert_eq!(Grammars::of_release(major), Grammars::of(Grammar::Current), "{major}");
        }
        let mixed = Grammars::of_release(18).union(Grammars::of_release(26));
        assert_eq!(mixed, Grammars::ALL);
    }

    #[test]
    fn one_grammar_reads_its_own_way() {
        let r = read("# x\nKILL QUERY WHERE 1", Grammars::of(Grammar::Current)).unwrap();
        assert_eq!(r.operators(), vec![Operator::Kill]);
        let r = read("# x\nKILL QUERY WHERE 1", Grammars::of(Grammar::V18_16)).unwrap();
        assert!(!r.lexed());
        assert_eq!(r.kind(), StatementKind::Write);
    }

    #[test]
    fn kinds_and_operators() {
        let kind = |q: &str| both(q).unwrap().kind();
        assert_eq!(kind("SELECT 1"), StatementKind::Read);
        assert_eq!(kind("(SELECT 1)"), StatementKind::Read);
        assert_eq!(kind("WITH 1 AS x SELECT x"), StatementKind::Read);
        assert_eq!(kind("WITH 1 AS x INSERT INTO t SELECT x"), StatementKind::Write);
        assert_eq!(kind("SELECT 1 PARALLEL WITH INSERT INTO t SELECT 1"), StatementKind::Write);
        assert_eq!(kind("SELECT 1; SELECT 2"), StatementKind::Read);
        assert_eq!(kind("SELECT 1;"), StatementKind::Read);
        assert_eq!(kind(""), StatementKind::Write);
        let ops = |q: &str| both(q).unwrap().operators();
        assert_eq!(ops("SELECT 1 PARALLEL WITH SYSTEM SHUTDOWN"), vec![Operator::System]);
        assert_eq!(ops("SELECT 1; KILL QUERY WHERE 1"), vec![Operator::Kill]);
    }
}

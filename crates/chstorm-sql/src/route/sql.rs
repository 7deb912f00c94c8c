//! Just enough structure over the token stream for routing: bracket depth,
//! the SELECT bodies at every nesting level, and their clauses.
//!
//! A *body* starts at a `SELECT` keyword and runs to the next `UNION`
//! (`EXCEPT`, `INTERSECT`) at its own depth or the end of its bracket group.
//! Its clauses are found at its own depth: `FROM` (which includes `FINAL`,
//! `SAMPLE`, `ARRAY JOIN`, `JOIN ... ON/USING`), `PREWHERE`, `WHERE`,
//! `GROUP BY`, `HAVING`, `ORDER BY`, `LIMIT`, `SETTINGS`, `FORMAT`,
//! `INTO OUTFILE`. A `FROM` inside brackets that do not hold a query
//! (`extract(DAY FROM d)`, `substring(s FROM 2)`) belongs to no body.
//!
//! ClickHouse does not reserve its keywords: on 18.16 `SELECT from FROM
//! (SELECT 1 AS from)` and `FROM numbers(1) AS settings JOIN ...` are valid.
//! Clauses found by their keywords would then be wrong, so a clause keyword
//! used as a name (after `.`, `AS`, a comma, an operator, or a keyword that
//! wants an operand, such as `SELECT`, `WHERE`, `AND`) makes [`Sql::parse`]
//! give up: routing then fans out.

use crate::lexer::{Grammar, Token, TokenKind};
use crate::statement::{sql_tokens, InsertData};

/// What kind of statement this is, as far as routing cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Statement {
    /// Starts with `SELECT`, `WITH` or `(`.
    Query,
    /// `INSERT ... SELECT` (no `VALUES` or `FORMAT` at the top level).
    InsertSelect,
    /// Anything else (DDL, `SHOW`, `INSERT ... VALUES`, ...).
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClauseKind {
    Select,
    From,
    Prewhere,
    Where,
    GroupBy,
    Having,
    OrderBy,
    Limit,
    Settings,
    Format,
    Into,
}

/// A clause: `kw` is the index of its (first) keyword, `start..end` the
/// tokens after its keyword(s).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clause {
    pub kind: ClauseKind,
    pub start: usize,
    pub end: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct Body {
    pub clauses: Vec<Clause>,
}

impl Body {
    pub fn clauses(&self, kind: ClauseKind) -> impl Iterator<Item = &Clause> {
        self.clauses.iter().filter(move |c| c.kind == kind)
    }
}

pub(crate) struct Sql<'a> {
    pub toks: Vec<Token<'a>>,
    /// For `(` and `[`: the index of the matching closer; else `usize::MAX`.
    pub close: Vec<usize>,
    /// Open brackets around the token (a bracket itself is at the outer depth).
    pub depth: Vec<u32>,
    /// The innermost `(`/`[` around the token (a bracket itself: the outer one); else `usize::MAX`.
    parent: Vec<usize>,
    /// For a `(`: true if its group holds a query (`(SELECT`, `(WITH`, `((SELECT`, ...).
    subquery: Vec<bool>,
    pub statement: Statement,
    pub bodies: Vec<Body>,
}

pub(crate) const NO_MATCH: usize = usize::MAX;

/// The most parts of a compound identifier that [`Sql::compound_ident`] reads
/// (`db.table.column` has 3); a longer chain is no name routing cares about.
const MAX_NAME_PARTS: usize = 4;

impl<'a> Sql<'a> {
    /// `None` when the text does not lex under `grammar`, brackets do not balance, or there
    /// is more than one statement. An `INSERT` with data (`VALUES`, `FORMAT`) is
    /// [`Statement::Other`], whatever follows.
    pub fn parse<S: AsRef<[u8]> + ?Sized>(sql: &'a S, grammar: Grammar) -> Option<Sql<'a>> {
        let mut toks: Vec<Token<'a>> = Vec::new();
        let mut close = Vec::new();
        let mut depth = Vec::new();
        let mut parent = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        let mut semicolon = false;
        let (all, data) = sql_tokens(sql, grammar);
        if data != InsertData::None {
            return Some(Sql::other());
        }
        for t in all {
            if t.kind == TokenKind::Error || semicolon {
                return None;
            }
            let i = toks.len();
            let closes = t.is_punct(")") || t.is_punct("]");
            let outer = if closes { stack.len().checked_sub(2) } else { stack.len().checked_sub(1) };
            parent.push(outer.map_or(NO_MATCH, |k| stack[k]));
            match (t.kind, t.text) {
                (TokenKind::Punct, "(" | "[") => {
                    depth.push(stack.len() as u32);
                    stack.push(i);
                    close.push(NO_MATCH);
                }
                (TokenKind::Punct, ")" | "]") => {
                    let open = stack.pop()?;
                    let want = if t.text == ")" { "(" } else { "[" };
                    if toks[open].text != want {
                        return None;
                    }
                    close[open] = i;
                    depth.push(stack.len() as u32);
                    close.push(NO_MATCH);
                }
                (TokenKind::Punct, ";") if stack.is_empty() => {
                    semicolon = true;
                    continue;
                }
                (TokenKind::Punct, ";") => return None,
                _ => {
                    depth.push(stack.len() as u32);
                    close.push(NO_MATCH);
                }
            }
            toks.push(t);
        }
        if !stack.is_empty() {
            return None;
        }
        if toks.windows(2).any(|w| keyword_used_as_name(&w[0], &w[1])) {
            return None;
        }
        let statement = match toks.first() {
            Some(t) if t.is_kw("SELECT") || t.is_kw("WITH") || t.is_punct("(") => Statement::Query,
            Some(t) if t.is_kw("INSERT") => {
                let has_select =
                    toks.iter().zip(&depth).any(|(t, &d)| d == 0 && (t.is_kw("SELECT") || t.is_kw("WITH")));
                if has_select {
                    Statement::InsertSelect
                } else {
                    Statement::Other
                }
            }
            _ => Statement::Other,
        };
        // `((SELECT ...))`: from the right, so each `(` looks one token ahead.
        let mut subquery = vec![false; toks.len()];
        for i in (0..toks.len()).rev() {
            subquery[i] = toks[i].is_punct("(")
                && toks
                    .get(i + 1)
                    .is_some_and(|t| t.is_kw("SELECT") || t.is_kw("WITH") || (t.is_punct("(") && subquery[i + 1]));
        }
        let mut sql = Sql { toks, close, depth, parent, subquery, statement, bodies: Vec::new() };
        sql.bodies = sql.find_bodies()?;
        Some(sql)
    }

    fn other() -> Sql<'a> {
        Sql {
            toks: Vec::new(),
            close: Vec::new(),
            depth: Vec::new(),
            parent: Vec::new(),
            subquery: Vec::new(),
            statement: Statement::Other,
            bodies: Vec::new(),
        }
    }

    /// True if the bracket group opened at `open` holds a query.
    pub fn is_subquery(&self, open: usize) -> bool {
        self.subquery.get(open).copied().unwrap_or(false)
    }

    /// The innermost `(`/`[` around token `i`.
    pub fn parent(&self, i: usize) -> Option<usize> {
        self.parent.get(i).copied().filter(|&p| p != NO_MATCH)
    }

    /// The token after `i` at `i`'s own depth: a bracket group is skipped whole
    /// (from its opener to its closer), so walking a level costs its own tokens only.
    pub fn next_at_level(&self, i: usize) -> usize {
        match self.close.get(i) {
            Some(&c) if c != NO_MATCH => c,
            _ => i + 1,
        }
    }

    /// The tokens of `start..end` at `start`'s depth, brackets included, their insides skipped.
    pub fn level(&self, start: usize, end: usize) -> impl Iterator<Item = usize> + '_ {
        let mut j = start;
        std::iter::from_fn(move || {
            if j >= end {
                return None;
            }
            let i = j;
            j = self.next_at_level(i);
            Some(i)
        })
    }

    /// For every `SELECT`, where its body ends: the next `SELECT`, `UNION`, `EXCEPT` or
    /// `INTERSECT` at its depth in its bracket group, or the group's closer, or the end.
    /// One pass from the right, keeping that stop for every depth.
    fn body_ends(&self) -> Vec<usize> {
        let n = self.toks.len();
        let levels = self.depth.iter().max().map_or(1, |&d| d as usize + 2);
        let mut stop = vec![n; levels];
        let mut ends = vec![n; n];
        for j in (0..n).rev() {
            let d = self.depth[j] as usize;
            let t = &self.toks[j];
            if t.is_punct(")") || t.is_punct("]") {
                stop[d + 1] = j;
            }
            if t.is_kw("SELECT") {
                ends[j] = stop[d];
                stop[d] = j;
            } else if t.is_kw("UNION") || t.is_kw("EXCEPT") || t.is_kw("INTERSECT") {
                stop[d] = j;
            }
        }
        ends
    }

    /// The bodies, each found in the tokens of its own depth. `None` when two
    /// `SELECT`s follow each other at one depth without a `UNION` between
    /// (not a query ClickHouse reads).
    fn find_bodies(&self) -> Option<Vec<Body>> {
        let ends = self.body_ends();
        let mut bodies = Vec::new();
        for s in (0..self.toks.len()).filter(|&s| self.toks[s].is_kw("SELECT")) {
            let end = ends[s];
            if self.toks.get(end).is_some_and(|t| t.is_kw("SELECT")) {
                return None;
            }
            bodies.push(Body { clauses: self.clauses_of(s, end) });
        }
        Some(bodies)
    }

    /// The clauses of the body of the `SELECT` at `s`, which ends at `end`.
    fn clauses_of(&self, s: usize, end: usize) -> Vec<Clause> {
        let mut marks: Vec<(ClauseKind, usize, usize)> = vec![(ClauseKind::Select, s, s + 1)];
        let mut j = s + 1;
        while j < end {
            let t = &self.toks[j];
            let next_is = |kw: &str| j + 1 < end && self.toks[j + 1].is_kw(kw);
            let found = if t.is_kw("FROM") {
                Some((ClauseKind::From, 1))
            } else if t.is_kw("PREWHERE") {
                Some((ClauseKind::Prewhere, 1))
            } else if t.is_kw("WHERE") {
                Some((ClauseKind::Where, 1))
            } else if t.is_kw("GROUP") && next_is("BY") {
                Some((ClauseKind::GroupBy, 2))
            } else if t.is_kw("HAVING") {
                Some((ClauseKind::Having, 1))
            } else if t.is_kw("ORDER") && next_is("BY") {
                Some((ClauseKind::OrderBy, 2))
            } else if t.is_kw("LIMIT") {
                Some((ClauseKind::Limit, 1))
            } else if t.is_kw("SETTINGS") {
                Some((ClauseKind::Settings, 1))
            } else if t.is_kw("FORMAT") {
                Some((ClauseKind::Format, 1))
            } else if t.is_kw("INTO") && next_is("OUTFILE") {
                Some((ClauseKind::Into, 2))
            } else {
                None
            };
            match found {
                Some((kind, len)) => {
                    marks.push((kind, j, j + len));
                    j += len;
                }
                None => j = self.next_at_level(j),
            }
        }
        marks
            .iter()
            .enumerate()
            .map(|(k, &(kind, _kw, start))| Clause { kind, start, end: marks.get(k + 1).map_or(end, |m| m.1) })
            .collect()
    }

    /// For every token, the innermost (body index, clause) it lies in. Each body
    /// labels the tokens of its own depth; a token deeper than every body's
    /// own level takes the label of its innermost bracket.
    pub fn labels(&self) -> Vec<Option<(usize, ClauseKind)>> {
        let mut labels = vec![None; self.toks.len()];
        for (b, body) in self.bodies.iter().enumerate() {
            for c in &body.clauses {
                // The keyword itself belongs to the clause too.
                let from = if c.kind == ClauseKind::Select { c.start - 1 } else { c.start };
                for i in self.level(from, c.end) {
                    labels[i] = Some((b, c.kind));
                    if self.close[i] != NO_MATCH {
                        labels[self.close[i]] = Some((b, c.kind));
                    }
                }
            }
        }
        for i in 0..labels.len() {
            if labels[i].is_none() {
                if let Some(p) = self.parent(i) {
                    labels[i] = labels[p];
                }
            }
        }
        labels
    }

    /// If a (possibly qualified) identifier `a.b.c` starts at `i`: the index
    /// just past it and the index of its last part. At most
    /// [`MAX_NAME_PARTS`] parts are read: past a longer chain comes a `.`.
    pub fn compound_ident(&self, i: usize, end: usize) -> Option<(usize, usize)> {
        let is_ident = |k: usize| k < end && matches!(self.toks[k].kind, TokenKind::Word | TokenKind::QuotedIdent);
        if !is_ident(i) {
            return None;
        }
        let mut last = i;
        while last + 1 < end
            && last < i + 2 * (MAX_NAME_PARTS - 1)
            && self.toks[last + 1].is_punct(".")
            && is_ident(last + 2)
        {
            last += 2;
        }
        Some((last + 1, last))
    }
}

/// Keywords the clause structure is found by.
const CLAUSE_WORDS: &[&str] = &[
    "FROM",
    "PREWHERE",
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "BY",
    "LIMIT",
    "SETTINGS",
    "FORMAT",
    "INTO",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "JOIN",
    "USING",
    "ON",
    "ARRAY",
    "FINAL",
    "SAMPLE",
];

/// Keywords after which comes an operand (a name or an expression), not a clause.
const BEFORE_OPERAND: &[&str] = &[
    "SELECT", "DISTINCT", "FROM", "WHERE", "PREWHERE", "AND", "OR", "NOT", "BY", "AS", "ON", "USING", "HAVING", "IN",
    "IS", "LIKE", "ILIKE", "BETWEEN", "WHEN", "THEN", "ELSE", "CASE", "LIMIT", "OFFSET", "SETTINGS", "JOIN",
    "INTERVAL", "TOP", "WITH", "SAMPLE", "FORMAT",
];

/// True if `t`, a clause keyword, stands where a name is expected after `prev`.
fn keyword_used_as_name(prev: &Token<'_>, t: &Token<'_>) -> bool {
    if t.kind != TokenKind::Word || !CLAUSE_WORDS.iter().any(|k| t.text.eq_ignore_ascii_case(k)) {
        return false;
    }
    match prev.kind {
        TokenKind::Word => BEFORE_OPERAND.iter().any(|k| prev.text.eq_ignore_ascii_case(k)),
        TokenKind::Punct => !matches!(prev.text, ")" | "]" | "*"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Grammar = Grammar::V18_16;

    fn clause_kinds(sql: &Sql<'_>, b: usize) -> Vec<ClauseKind> {
        sql.bodies[b].clauses.iter().map(|c| c.kind).collect()
    }

    #[test]
    fn bodies_and_clauses() {
        use ClauseKind::*;
        let s = Sql::parse(
            "SELECT a FROM t FINAL PREWHERE x WHERE y GROUP BY a HAVING z ORDER BY a LIMIT 1 SETTINGS m=1 FORMAT JSON;",
            G,
        )
        .unwrap();
        assert_eq!(s.statement, Statement::Query);
        assert_eq!(s.bodies.len(), 1);
        assert_eq!(
            clause_kinds(&s, 0),
            [Select, From, Prewhere, Where, GroupBy, Having, OrderBy, Limit, Settings, Format]
        );

        let s = Sql::parse("SELECT extract(DAY FROM d) FROM (SELECT 1 UNION ALL SELECT 2) WHERE q IN (SELECT 3)", G)
            .unwrap();
        assert_eq!(s.bodies.len(), 4);
        assert_eq!(clause_kinds(&s, 0), [Select, From, Where]);
        assert_eq!(clause_kinds(&s, 1), [Select]);
        let labels = s.labels();
        let idx = |text: &str| s.toks.iter().position(|t| t.text == text).unwrap();
        assert_eq!(labels[idx("d")], Some((0, Select)));
        assert_eq!(labels[idx("q")], Some((0, Where)));
        assert_eq!(labels[idx("3")], Some((3, Select)));
    }

    #[test]
    fn statements() {
        assert_eq!(Sql::parse("WITH 1 AS x SELECT x", G).unwrap().statement, Statement::Query);
        assert_eq!(Sql::parse("(SELECT 1)", G).unwrap().statement, Statement::Query);
        assert_eq!(Sql::parse("INSERT INTO t (a) SELECT 1", G).unwrap().statement, Statement::InsertSelect);
        // The data after VALUES / FORMAT is not read at all.
        assert_eq!(Sql::parse("INSERT INTO t VALUES ('unterminated", G).unwrap().statement, Statement::Other);
        assert_eq!(
            Sql::parse("insert into t format TSV\n1\tSELECT x FROM items", G).unwrap().statement,
            Statement::Other
        );
        assert_eq!(Sql::parse("SHOW TABLES FROM items", G).unwrap().statement, Statement::Other);
        assert!(Sql::parse("SELECT 1; SELECT 2", G).is_none());
        assert!(Sql::parse("SELECT (1", G).is_none());
        assert!(Sql::parse("SELECT 1)", G).is_none());
        assert!(Sql::parse("SELECT [1)", G).is_none());
        assert!(Sql::parse("SELECT 'x", G).is_none());
        assert!(Sql::parse("SELECT 1;", G).is_some());
    }

    /// 18.16 accepts keywords as names; the clauses would be misread, so
    /// parsing gives up (routing fans out).
    #[test]
    fn keywords_used_as_names() {
        for sql in [
            "SELECT from FROM (SELECT 1 AS from)",
            "SELECT a, where FROM t",
            "SELECT count() FROM numbers(1) AS settings ANY LEFT JOIN items USING x",
            "SELECT * FROM items AS where WHERE shop_id = 5",
            "SELECT * FROM system.settings WHERE name = 'x'",
            "SELECT * FROM t WHERE t.limit = 1",
            "SELECT * FROM t WHERE x = from",
            "SELECT * FROM t WHERE (format = 1)",
            "SELECT * FROM t WHERE a AND union",
            "SELECT 1 AS final FROM t",
        ] {
            assert!(Sql::parse(sql, G).is_none(), "{sql}");
        }
        for sql in [
            "SELECT * FROM items FINAL WHERE shop_id = 5 SETTINGS max_threads = 1 FORMAT JSON",
            "SELECT a.* FROM t AS a ANY LEFT JOIN u USING x WHERE y",
            "SELECT count(*) FROM t GLOBAL ALL INNER JOIN u ON t.a = u.a ORDER BY 1 DESC LIMIT 1 BY a",
            "SELECT * FROM t LEFT ARRAY JOIN arr AS x WHERE x IS NOT NULL GROUP BY x WITH TOTALS HAVING 1",
            "SELECT extract(DAY FROM d), substring(s FROM 2) FROM t SAMPLE 1/10 OFFSET 1/2",
            "SELECT CASE WHEN a THEN 1 END FROM t UNION ALL SELECT 2 FROM t",
            "INSERT INTO t SELECT * FROM u",
            "SELECT * FROM t LIMIT 10 OFFSET 5 SETTINGS a = 1",
        ] {
            assert!(Sql::parse(sql, G).is_some(), "{sql}");
        }
    }

    #[test]
    fn compound_identifiers() {
        let s = Sql::parse("SELECT db.t.`c`, x, y.1", G).unwrap();
        assert_eq!(s.compound_ident(1, s.toks.len()), Some((6, 5)));
        assert_eq!(s.compound_ident(7, s.toks.len()), Some((8, 7)));
        assert_eq!(s.compound_ident(9, s.toks.len()), Some((10, 9)), "y.1 is a tuple element");
        assert_eq!(s.compound_ident(2, s.toks.len()), None);
    }
}

//! What a statement is, as the server's parser decides it from its first words: a read, an
//! insert, a session statement, another write, a statement that drops or moves tables, or an
//! operator's statement (`KILL`, `SYSTEM`, users and grants, databases, server-wide objects).
//! Also where an `INSERT`'s data starts, so that the rules read all of its SQL and none of its
//! data.
//!
//! Followed: ClickHouse's `src/Parsers/ParserQuery.cpp` (the statement parsers of current
//! releases, in the order it tries them), `ParserQueryWithOutput.cpp` (SELECT, SHOW, EXPLAIN,
//! CREATE, DROP, RENAME, KILL, OPTIMIZE, ... with `FORMAT` and `SETTINGS`),
//! `ParserInsertQuery.cpp` (the head of an INSERT: table or `FUNCTION f(...)`, columns,
//! `PARTITION BY`, `SETTINGS`, then `VALUES`, `FORMAT name`, `SELECT`, `WITH` or `FROM INFILE`),
//! `ParserDropQuery.cpp` and `ParserRenameQuery.cpp`; checked against 26.9's parser (chdb-core,
//! `formatQuerySingleLine` with `implicit_select = 0`, the server's default) and 18.16.1.
//!
//! Found there and easy to miss: `WITH ... INSERT INTO t SELECT ...` is an INSERT (26.9 runs it
//! as one); `a PARALLEL WITH b` runs both statements; the rows after `VALUES` (and
//! `FORMAT Values`) are SQL expressions that current releases evaluate with the SQL parser,
//! subqueries, `SETTINGS` and table functions included (`INSERT INTO t VALUES ((SELECT ...
//! SETTINGS max_threads = 7))` runs with 7 on 26.9; 18.16 refuses a subquery there, Code 36);
//! `CREATE OR REPLACE TABLE` and `REPLACE TABLE` drop the table they name.

use crate::lexer::{Grammar, Lexer, Token, TokenKind};

/// Whether a statement only reads, for retries and hedges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// SELECT, WITH (without INSERT), SHOW, DESCRIBE/DESC, EXISTS, EXPLAIN, and current
    /// releases' `FROM t SELECT`: reads only, so it may be sent again.
    Read,
    /// Anything else, and text whose statement cannot be told: never sent twice.
    Write,
}

/// An operator's statement: refused for every gateway user unless its config allows the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    /// `KILL QUERY`, `KILL MUTATION`: reaches the queries of every user of the backend login.
    Kill,
    /// `SYSTEM ...`: the server itself (`SYSTEM SHUTDOWN`, caches, replication, merges).
    System,
    /// Users, roles, quotas, row and masking policies, settings profiles, `GRANT`, `REVOKE`,
    /// `SET ROLE`, `EXECUTE AS`, `MOVE USER`.
    Access,
    /// Databases: `DROP`/`DETACH`/`ATTACH`/`RENAME`/`ALTER`/`TRUNCATE DATABASE`, `EXCHANGE
    /// DATABASES`, `TRUNCATE ALL TABLES`; and tables a user does not own (see [`Class::Drop`]).
    Drop,
    /// Server-wide objects: functions, named collections, workloads, resources, `BACKUP`,
    /// `RESTORE`.
    Server,
}

impl Operator {
    /// Every kind, in the order the config lists them.
    pub const ALL: [Operator; 5] =
        [Operator::Kill, Operator::System, Operator::Access, Operator::Drop, Operator::Server];

    /// The kind's name in a user's `operator_statements`.
    pub fn name(self) -> &'static str {
        match self {
            Operator::Kill => "kill",
            Operator::System => "system",
            Operator::Access => "access",
            Operator::Drop => "drop",
            Operator::Server => "server",
        }
    }

    /// The kind named `name` (as in the config).
    pub fn from_name(name: &str) -> Option<Operator> {
        Operator::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// A table (view, dictionary) as a statement names it: its database when the name has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    pub database: Option<String>,
    pub table: String,
}

/// What one statement does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// See [`StatementKind::Read`].
    Read,
    /// `INSERT` (also `WITH ... INSERT`).
    Insert,
    /// `SET name = value, ...` (not `SET ROLE`).
    Set,
    /// `USE db`.
    Use,
    /// Any other statement the parsers know that changes only what its user may change:
    /// `CREATE` and `ALTER` of tables and views, `OPTIMIZE`, `DELETE`, `UPDATE`, temporary
    /// tables, transactions, `CHECK`, `WATCH`, `COPY`, indexes.
    Write,
    /// A statement that drops, detaches, attaches, renames, exchanges, truncates or replaces the
    /// tables (views, dictionaries) it names: allowed when the user owns their databases, or
    /// may send [`Operator::Drop`].
    Drop(Vec<Name>),
    /// An operator's statement.
    Operator(Operator),
    /// The first word is no statement the parsers know, or there is none (empty text, or text
    /// that does not lex).
    Unknown(String),
}

impl Class {
    /// Whether the statement only reads.
    pub fn kind(&self) -> StatementKind {
        match self {
            Class::Read => StatementKind::Read,
            _ => StatementKind::Write,
        }
    }
}

/// Where an `INSERT`'s data begins, and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertData {
    /// Not an INSERT with data in the text (a query, `INSERT ... SELECT`, `FROM INFILE`).
    None,
    /// `VALUES` or `FORMAT Values`: rows of SQL expressions from this byte on; the server parses
    /// them, so the rules read them too.
    Values(usize),
    /// `FORMAT <name>`: data from this byte on (after the format's name, and a `SETTINGS` list
    /// right after it, which `allow_settings_after_format_in_insert` makes a clause).
    Format(usize),
}

/// The significant tokens of `sql` under `grammar` that are SQL: all of them, except that an
/// `INSERT ... FORMAT <name>` stops before its data. Lexing stops at the first error token,
/// which is kept (callers give up on it). Also where the data starts.
pub fn sql_tokens<S: AsRef<[u8]> + ?Sized>(sql: &S, grammar: Grammar) -> (Vec<Token<'_>>, InsertData) {
    let mut toks: Vec<Token<'_>> = Vec::new();
    let mut head = InsertHead::default();
    let mut data = InsertData::None;
    let mut lexer = Lexer::new(sql, grammar).peekable();
    while let Some(t) = lexer.next() {
        let i = toks.len();
        toks.push(t);
        if t.kind == TokenKind::Error {
            break;
        }
        match head.step(&toks, i) {
            Some(HeadEnd::Values) => data = InsertData::Values(t.end()),
            Some(HeadEnd::Format) => {
                let Some(name) = lexer.next() else { break };
                toks.push(name);
                if name.kind == TokenKind::Error {
                    break;
                }
                if name.text.eq_ignore_ascii_case("Values") {
                    data = InsertData::Values(name.end());
                    continue;
                }
                let mut end = name.end();
                if lexer.peek().is_some_and(|s| s.is_kw("SETTINGS")) {
                    end = settings_after_format(&mut lexer, &mut toks).unwrap_or(end);
                }
                return (toks, InsertData::Format(end));
            }
            None => {}
        }
    }
    (toks, data)
}

/// A `SETTINGS name = literal, ...` list after an INSERT's format name: its tokens are pushed,
/// and the byte after the list returned. A list that does not read so is pushed as far as it
/// goes (the rules then refuse it).
fn settings_after_format<'a>(lexer: &mut std::iter::Peekable<Lexer<'a>>, toks: &mut Vec<Token<'a>>) -> Option<usize> {
    toks.push(lexer.next()?);
    loop {
        let name = lexer.next()?;
        toks.push(name);
        let eq = lexer.next()?;
        toks.push(eq);
        let mut value = lexer.next()?;
        toks.push(value);
        if value.is_punct("-") || value.is_punct("+") {
            value = lexer.next()?;
            toks.push(value);
        }
        if !matches!(name.kind, TokenKind::Word | TokenKind::QuotedIdent) || !(eq.is_punct("=") || eq.is_punct("==")) {
            return None;
        }
        if !lexer.peek().is_some_and(|c| c.is_punct(",")) {
            return Some(value.end());
        }
        toks.push(lexer.next()?);
    }
}

/// Where the head of an INSERT ends.
enum HeadEnd {
    /// At `VALUES`: rows of SQL follow.
    Values,
    /// At `FORMAT`: a format's name follows, then its data.
    Format,
}

/// The walk over an INSERT's head, one token at a time, as `ParserInsertQuery` reads it:
/// `INSERT INTO [TABLE]`, the table (`[db.]name`) or `FUNCTION f(...)`, then any of
/// `(columns)`, `PARTITION BY expr`, `SETTINGS name = literal, ...`, then `VALUES`, `FORMAT`,
/// or a query (`SELECT`, `WITH`, `(`, `FROM INFILE`), which is read to its end. A statement
/// that is not an INSERT, or whose head reads otherwise, is read whole: reading more of a text
/// as SQL can only make the rules find more.
#[derive(Default)]
struct InsertHead {
    state: HeadState,
    /// Open brackets inside the current part (WITH's expressions, arguments, columns).
    depth: usize,
}

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
enum HeadState {
    /// Before the statement's first word.
    #[default]
    Start,
    /// In `WITH ...`, looking for a top-level INSERT.
    With,
    /// After `INSERT`: `INTO`, `TABLE`, then `FUNCTION` or the table's name.
    Into,
    /// After `FUNCTION`: the function's name, then its arguments.
    Function,
    /// Inside a bracket group: the function's arguments or the columns.
    Group,
    /// After a name part of the table: a `.` or what follows the table.
    Table,
    /// After the `.` of `db.`: the table's name.
    TableDot,
    /// After the table or a part of the head: what comes next.
    After,
    /// In `PARTITION BY expr`: up to a top-level `SETTINGS`, `VALUES`, `FORMAT` or query.
    Partition,
    /// In `SETTINGS`: a name, `=`, a literal (maybe signed), then `,` or the end of the list.
    SettingName,
    SettingEq,
    SettingValue,
    SettingSigned,
    SettingNext,
    /// Read to the end.
    Done,
}

impl InsertHead {
    /// The head after token `t`.
    fn step(&mut self, toks: &[Token<'_>], i: usize) -> Option<HeadEnd> {
        use HeadState::*;
        let t = &toks[i];
        let open = t.is_punct("(") || t.is_punct("[");
        let close = t.is_punct(")") || t.is_punct("]");
        let name = matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent);
        self.state = match self.state {
            Start if t.is_kw("INSERT") => Into,
            Start if t.is_kw("WITH") => With,
            Start | Done => Done,
            With if open => self.nest(With),
            With if close => self.unnest(With),
            With if self.depth == 0 && t.is_kw("INSERT") => Into,
            With if self.depth == 0 && t.is_kw("SELECT") => Done,
            With => With,
            Into if t.is_kw("INTO") || t.is_kw("TABLE") => Into,
            Into if t.is_kw("FUNCTION") => Function,
            Into if name => Table,
            Into => Done,
            Function if open => self.nest(Group),
            Function if name || t.is_punct(".") => Function,
            Function => Done,
            Group if open => self.nest(Group),
            Group if close && self.depth == 1 => self.unnest(After),
            Group if close => self.unnest(Group),
            Group => Group,
            Table if t.is_punct(".") => TableDot,
            TableDot if name => Table,
            TableDot => Done,
            Table | After => return self.after(t),
            Partition if open => self.nest(Partition),
            Partition if close => self.unnest(Partition),
            Partition if self.depth == 0 && is_head_word(t) => return self.after(t),
            Partition => Partition,
            SettingName if name => SettingEq,
            SettingEq if t.is_punct("=") || t.is_punct("==") => SettingValue,
            SettingValue if t.is_punct("-") || t.is_punct("+") => SettingSigned,
            SettingValue | SettingSigned if matches!(t.kind, TokenKind::Number | TokenKind::Str | TokenKind::Word) => {
                SettingNext
            }
            SettingNext if t.is_punct(",") => SettingName,
            SettingNext => return self.after(t),
            SettingName | SettingEq | SettingValue | SettingSigned => Done,
        };
        None
    }

    fn nest(&mut self, next: HeadState) -> HeadState {
        self.depth += 1;
        next
    }

    fn unnest(&mut self, next: HeadState) -> HeadState {
        self.depth = self.depth.saturating_sub(1);
        next
    }

    /// After the table or a part of the head: what `t` starts.
    fn after(&mut self, t: &Token<'_>) -> Option<HeadEnd> {
        use HeadState::*;
        let (state, end) = if t.is_kw("VALUES") {
            (Done, Some(HeadEnd::Values))
        } else if t.is_kw("FORMAT") {
            (Done, Some(HeadEnd::Format))
        } else if t.is_punct("(") {
            self.depth = 1;
            (Group, None)
        } else if t.is_kw("PARTITION") {
            (Partition, None)
        } else if t.is_kw("SETTINGS") {
            (SettingName, None)
        } else {
            (Done, None)
        };
        self.state = state;
        end
    }
}

/// Words that end a `PARTITION BY` expression of an INSERT's head.
fn is_head_word(t: &Token<'_>) -> bool {
    ["SETTINGS", "VALUES", "FORMAT", "SELECT", "WITH"].iter().any(|k| t.is_kw(k))
}

/// The classes of the statements in `toks` (the significant tokens of one text, as
/// [`sql_tokens`] gives them): one per statement, split at top-level `;` and `PARALLEL WITH`;
/// an empty statement (a trailing `;`) counts only when there is no other.
pub fn classify(toks: &[Token<'_>]) -> Vec<Class> {
    let mut parts: Vec<&[Token<'_>]> = Vec::new();
    let mut start = 0;
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if t.is_punct("(") || t.is_punct("[") {
            depth += 1;
        } else if t.is_punct(")") || t.is_punct("]") {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_punct(";") {
            parts.push(&toks[start..i]);
            start = i + 1;
        } else if depth == 0 && t.is_kw("PARALLEL") && toks.get(i + 1).is_some_and(|n| n.is_kw("WITH")) {
            parts.push(&toks[start..i]);
            start = i + 2;
            i += 1;
        }
        i += 1;
    }
    parts.push(&toks[start.min(toks.len())..]);
    let classes: Vec<Class> = parts.iter().filter(|p| !p.is_empty()).map(|p| classify_one(p)).collect();
    if classes.is_empty() {
        return vec![Class::Unknown(String::new())];
    }
    classes
}

/// The class of one statement's tokens.
fn classify_one(toks: &[Token<'_>]) -> Class {
    let start = toks.iter().position(|t| !t.is_punct("(")).unwrap_or(toks.len());
    let toks = &toks[start..];
    let Some(first) = toks.first() else { return Class::Unknown(String::new()) };
    if first.kind == TokenKind::Error || first.kind != TokenKind::Word {
        return Class::Unknown(first.text.chars().take(32).collect());
    }
    let w = |k: usize| toks.get(k).filter(|t| t.kind == TokenKind::Word).map(|t| t.text.to_ascii_uppercase());
    let word = first.text.to_ascii_uppercase();
    match word.as_str() {
        "SELECT" | "SHOW" | "DESCRIBE" | "DESC" | "EXISTS" | "EXPLAIN" | "FROM" => Class::Read,
        "WITH" if with_insert(toks) => Class::Insert,
        "WITH" => Class::Read,
        "INSERT" => Class::Insert,
        "USE" => Class::Use,
        "SET" if matches!(w(1).as_deref(), Some("ROLE" | "DEFAULT")) => Class::Operator(Operator::Access),
        "SET" if w(1).as_deref() == Some("TRANSACTION") => Class::Write,
        "SET" => Class::Set,
        "KILL" => Class::Operator(Operator::Kill),
        "SYSTEM" => Class::Operator(Operator::System),
        "GRANT" | "REVOKE" | "MOVE" => Class::Operator(Operator::Access),
        "EXECUTE" if w(1).as_deref() == Some("AS") => Class::Operator(Operator::Access),
        "CHECK" if w(1).as_deref() == Some("GRANT") => Class::Read,
        "BACKUP" | "RESTORE" => Class::Operator(Operator::Server),
        "OPTIMIZE" | "DELETE" | "UPDATE" | "CHECK" | "WATCH" | "BEGIN" | "COMMIT" | "ROLLBACK" | "COPY" => Class::Write,
        "CREATE" | "ALTER" | "DROP" | "DETACH" | "ATTACH" | "RENAME" | "EXCHANGE" | "TRUNCATE" | "UNDROP"
        | "REPLACE" => ddl(&word, toks),
        _ => Class::Unknown(first.text.chars().take(32).collect()),
    }
}

/// `WITH ... INSERT`: an INSERT at the top level of a statement that starts with WITH.
fn with_insert(toks: &[Token<'_>]) -> bool {
    let mut depth = 0usize;
    for t in toks {
        if t.is_punct("(") || t.is_punct("[") {
            depth += 1;
        } else if t.is_punct(")") || t.is_punct("]") {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_kw("SELECT") {
            return false;
        } else if depth == 0 && t.is_kw("INSERT") {
            return true;
        }
    }
    false
}

/// Object types whose statements are [`Operator::Access`]: the first word(s) after the verb.
const ACCESS_OBJECTS: &[&str] =
    &["USER", "USERS", "ROLE", "ROLES", "QUOTA", "QUOTAS", "POLICY", "POLICIES", "PROFILE", "PROFILES"];

/// Object types whose statements are [`Operator::Server`].
const SERVER_OBJECTS: &[&str] = &["FUNCTION", "NAMED", "WORKLOAD", "RESOURCE"];

/// CREATE, ALTER, DROP, DETACH, ATTACH, RENAME, EXCHANGE, TRUNCATE, UNDROP, REPLACE.
fn ddl(verb: &str, toks: &[Token<'_>]) -> Class {
    let mut i = 1;
    let mut replace = verb == "REPLACE";
    if verb == "CREATE" && toks.get(1).is_some_and(|t| t.is_kw("OR")) && toks.get(2).is_some_and(|t| t.is_kw("REPLACE"))
    {
        replace = true;
        i = 3;
    }
    let word = |k: usize| toks.get(k).filter(|t| t.kind == TokenKind::Word).map(|t| t.text.to_ascii_uppercase());
    let mut object = word(i).unwrap_or_default();
    // ROW POLICY, MASKING POLICY, SETTINGS PROFILE, NAMED COLLECTION, MATERIALIZED VIEW, ...
    if matches!(object.as_str(), "ROW" | "MASKING" | "SETTINGS") && word(i + 1).is_some() {
        object = word(i + 1).unwrap_or_default();
    }
    if ACCESS_OBJECTS.contains(&object.as_str()) {
        return Class::Operator(Operator::Access);
    }
    if SERVER_OBJECTS.contains(&object.as_str()) {
        return Class::Operator(Operator::Server);
    }
    if matches!(object.as_str(), "DATABASE" | "DATABASES") || (object == "ALL" && verb != "CREATE") {
        return if verb == "CREATE" && !replace { Class::Write } else { Class::Operator(Operator::Drop) };
    }
    if object == "TEMPORARY" || object == "INDEX" {
        return Class::Write;
    }
    if matches!(verb, "CREATE" | "ALTER") && !replace {
        return Class::Write;
    }
    match table_names(verb, &toks[i..]) {
        Some(names) if !names.is_empty() => Class::Drop(names),
        _ => Class::Operator(Operator::Drop),
    }
}

/// The names a DROP-like statement acts on, from its object type on: `TABLE [IF EXISTS] a, b`,
/// `TABLE a TO b, c TO d` (RENAME: both sides), `TABLES a AND b` (EXCHANGE). `None` when they
/// do not read so (the caller then takes the statement for one that reaches any table).
fn table_names(verb: &str, toks: &[Token<'_>]) -> Option<Vec<Name>> {
    let mut i = 0;
    let objects = ["TABLE", "TABLES", "VIEW", "DICTIONARY", "DICTIONARIES", "MATERIALIZED", "LIVE", "WINDOW"];
    while toks.get(i).is_some_and(|t| objects.iter().any(|o| t.is_kw(o))) {
        i += 1;
    }
    if toks.get(i).is_some_and(|t| t.is_kw("IF")) {
        i += 1;
        while toks.get(i).is_some_and(|t| t.is_kw("NOT") || t.is_kw("EXISTS") || t.is_kw("EMPTY")) {
            i += 1;
        }
    }
    let mut names = Vec::new();
    loop {
        let (name, next) = compound_name(toks, i)?;
        names.push(name);
        i = next;
        let sep = toks.get(i);
        let more = match verb {
            "RENAME" => sep.is_some_and(|t| t.is_kw("TO") || t.is_punct(",")),
            "EXCHANGE" => sep.is_some_and(|t| t.is_kw("AND")),
            "DROP" => sep.is_some_and(|t| t.is_punct(",")),
            _ => false,
        };
        if !more {
            return Some(names);
        }
        i += 1;
    }
}

/// A `[db.]name` at `i`: the name and the index past it.
fn compound_name(toks: &[Token<'_>], i: usize) -> Option<(Name, usize)> {
    let part = |k: usize| toks.get(k).filter(|t| matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent))?.ident();
    let first = part(i)?;
    if toks.get(i + 1).is_some_and(|t| t.is_punct(".")) {
        let second = part(i + 2)?;
        return Some((Name { database: Some(first), table: second }, i + 3));
    }
    Some((Name { database: None, table: first }, i + 1))
}

#[cfg(test)]
mod tests;

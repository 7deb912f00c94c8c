//! Rewriting Distributed table names to local table names in a routed query.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::sql::{ClauseKind, Sql, Statement};
use super::{RouteError, Unrouted};
use crate::lexer::Grammar;

/// The database ClickHouse uses when a request names none (the backend user's
/// default database in the stock `users.xml`).
pub const DEFAULT_DATABASE: &str = "default";

/// The routed tables: each Distributed table, by database and name, and its
/// local table (`routing.tables`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedTables {
    /// (database, Distributed table) -> (local table's database if given, local table).
    map: BTreeMap<(String, String), (Option<String>, String)>,
}

impl RoutedTables {
    /// `tables` maps `table` or `db.table` to `local` or `db.local`. A key
    /// without a database is in `database` (`routing.database`, default
    /// `default`).
    pub fn new(tables: &BTreeMap<String, String>, database: &str) -> Result<RoutedTables, RouteError> {
        if tables.is_empty() {
            return Err(RouteError::NoTables);
        }
        let mut map = BTreeMap::new();
        for (key, value) in tables {
            let (db, table) = split_name(key);
            let (local_db, local) = split_name(value);
            for (d, t, name) in [(db, table, key), (local_db, local, value)] {
                if t.is_empty() || t.contains('.') || d.is_some_and(str::is_empty) {
                    return Err(RouteError::BadTableName(name.clone()));
                }
            }
            let db = db.unwrap_or(database).to_string();
            map.insert((db, table.to_string()), (local_db.map(str::to_string), local.to_string()));
        }
        Ok(RoutedTables { map })
    }

    /// The local table for `db.table`: its database when the config names
    /// one, and its name.
    pub fn local(&self, db: &str, table: &str) -> Option<(Option<&str>, &str)> {
        self.map.get(&(db.to_string(), table.to_string())).map(|(d, t)| (d.as_deref(), t.as_str()))
    }

    /// Every local table a routed query may read: its database when the config names one, and
    /// its name; each once.
    pub fn locals(&self) -> Vec<(Option<String>, String)> {
        let mut out: Vec<(Option<String>, String)> = self.map.values().cloned().collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Rewrites the references to the routed Distributed tables (`tables`) to
/// their local tables in `FROM` and `JOIN` positions of every `SELECT`
/// (subqueries included), returning the new text, or `None` when nothing was
/// rewritten: then the gateway must not route to a single shard, because the
/// query would still fan out.
///
/// * A reference's database is its prefix (`otherdb.items`), or else
///   `current_db`: the request's `database` (ClickHouse's `?database=`), `None`
///   meaning [`DEFAULT_DATABASE`]. Only a reference whose database and name
///   are a routed table's is rewritten: `otherdb.items`, or `items` with
///   `?database=otherdb`, is another table and stays as it is. An empty
///   `current_db` (`?database=` with no value: no current database on 18.16,
///   `Default database is not selected`) matches no unqualified name.
/// * A local table without a database keeps the reference's spelling
///   (`items` -> `items_local`, `default.items` -> `default.items_local`),
///   i.e. it is in the Distributed table's database; one with a database
///   replaces the whole reference.
/// * Quoting is kept (`` `items` `` -> `` `items_local` ``); a new name that
///   is not a plain identifier is backquoted.
/// * Aliases, `FINAL`, `SAMPLE`, `PREWHERE`, `SETTINGS`, `FORMAT` after the
///   name stay as they are. Column qualifiers naming the routed table
///   (`items.shop_id`, `default.items.shop_id`, `items.*`, beside an alias
///   too) are rewritten the same way, so they keep resolving; where such a
///   qualifier could mean something else, nothing is rewritten (see
///   `qualifier_edits`).
/// * Linear in the text's length: every walk over the tokens skips bracket
///   groups whole, and per-bracket facts (subquery or not, allowed or not)
///   are computed once.
/// * String literals, comments, column names, function arguments
///   (`remote('h', db, items)`), `ARRAY JOIN items` (an array column) and
///   other statements (`SHOW TABLES FROM items`, DDL, `INSERT ... VALUES`) are
///   not touched; only queries (`SELECT`, `WITH`, `(`) and `INSERT ... SELECT`
///   are rewritten. The text outside the replaced names is kept byte for byte.
pub fn rewrite_tables(sql: &str, tables: &RoutedTables, current_db: Option<&str>, grammar: Grammar) -> Option<String> {
    rewrite(sql, tables, current_db, grammar).ok()
}

/// [`rewrite_tables`], saying why nothing was rewritten: [`Unrouted::NoTable`], or
/// [`Unrouted::Subquery`] when a routed table is read by a subquery that is
/// neither in a `FROM` nor after `GLOBAL IN`. On the Distributed table such a
/// subquery is refused (`IN (SELECT ... FROM items)`: Code 288 `Double-distributed
/// IN/JOIN subqueries is denied (distributed_product_mode = 'deny')` on
/// 18.16), or reads all shards, or trips an 18.16 bug (a scalar subquery in
/// the select list: Code 10 `Not found column _subquery...`), while on the
/// routed replica it would read one shard's local table and answer.
/// `x IN items` (the table itself as a set) counts too.
pub(crate) fn rewrite(
    sql: &str,
    tables: &RoutedTables,
    current_db: Option<&str>,
    grammar: Grammar,
) -> Result<String, Unrouted> {
    let out = rewrite_bytes(sql.as_bytes(), tables, current_db, grammar)?;
    // Text in, text out: only names (text) were spliced into it.
    String::from_utf8(out).map_err(|_| Unrouted::NoTable)
}

/// [`rewrite`] on bytes: the query need not be UTF-8 (a string literal may
/// hold any bytes), and every byte outside the replaced names is kept.
pub(crate) fn rewrite_bytes(
    sql: &[u8],
    tables: &RoutedTables,
    current_db: Option<&str>,
    grammar: Grammar,
) -> Result<Vec<u8>, Unrouted> {
    let current_db = current_db.unwrap_or(DEFAULT_DATABASE);
    let s = Sql::parse(sql, grammar).ok_or(Unrouted::NoTable)?;
    if s.statement == Statement::Other {
        return Err(Unrouted::NoTable);
    }
    if table_as_set(&s, tables, current_db) {
        return Err(Unrouted::Subquery);
    }
    let refs = table_refs(&s);
    // `WITH items AS (SELECT ...)` (a common table expression, in releases
    // newer than 18.16): `FROM items` then means the CTE, not the table.
    let ctes: HashSet<String> = (0..s.toks.len().saturating_sub(2))
        .filter(|&i| s.toks[i + 1].is_kw("AS") && s.is_subquery(i + 2))
        .filter_map(|i| s.toks[i].ident())
        .collect();
    let allowed = subqueries_allowed(&s);
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut routed: Vec<Named> = Vec::new();
    let mut others: HashSet<String> = HashSet::new();
    for &(first, end) in &refs {
        let last = end - 1;
        let table = s.toks[last].ident().ok_or(Unrouted::NoTable)?;
        let db = if end - first == 3 { Some(s.toks[first].ident().ok_or(Unrouted::NoTable)?) } else { None };
        let local = tables.local(db.as_deref().unwrap_or(current_db), &table);
        let Some((new_db, new_table)) = local.filter(|_| db.is_some() || !ctes.contains(&table)) else {
            others.insert(table);
            continue;
        };
        if s.parent(first).is_some_and(|p| !allowed[p]) {
            return Err(Unrouted::Subquery);
        }
        match new_db {
            Some(new_db) => {
                let text = format!("{}.{}", quote(new_db, s.toks[first].text), quote(new_table, s.toks[last].text));
                edits.push((s.toks[first].start, s.toks[last].end(), text));
            }
            None => edits.push((s.toks[last].start, s.toks[last].end(), quote(new_table, s.toks[last].text))),
        }
        let db = db.unwrap_or_else(|| current_db.to_string());
        routed.push(Named { db, table, new_db: new_db.map(str::to_string), new_table: new_table.to_string() });
    }
    if edits.is_empty() {
        return Err(Unrouted::NoTable);
    }
    qualifier_edits(&s, &refs, &routed, &others, &mut edits)?;
    edits.sort_by_key(|e| (e.0, e.1));
    Ok(splice(sql, edits))
}

/// A routed table reference: its database and name, and its local table's.
struct Named {
    db: String,
    table: String,
    new_db: Option<String>,
    new_table: String,
}

/// `sql` with each `(start, end, text)` edit (sorted, not overlapping) applied.
fn splice(sql: &[u8], edits: Vec<(usize, usize, String)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(sql.len() + 16 * edits.len());
    let mut at = 0;
    for (start, end, text) in edits {
        out.extend_from_slice(&sql[at..start]);
        out.extend_from_slice(text.as_bytes());
        at = end;
    }
    out.extend_from_slice(&sql[at..]);
    out
}

/// `x IN items`: a routed Distributed table used as a set.
fn table_as_set(s: &Sql<'_>, tables: &RoutedTables, current_db: &str) -> bool {
    let n = s.toks.len();
    (0..n).filter(|&i| s.toks[i].is_kw("IN")).any(|i| {
        let Some((next, _)) = s.compound_ident(i + 1, n) else { return false };
        let call = s.toks.get(next).is_some_and(|t| t.is_punct("(") || t.is_punct("."));
        let table = s.toks[next - 1].ident();
        let db = if next - (i + 1) == 3 { s.toks[i + 1].ident() } else { Some(current_db.to_string()) };
        !call && next - (i + 1) <= 3 && matches!((db, table), (Some(db), Some(t)) if tables.local(&db, &t).is_some())
    })
}

/// The table references (first token, past-the-end token) in the `FROM`
/// clauses of every body, each clause walked at its own depth.
fn table_refs(s: &Sql<'_>) -> Vec<(usize, usize)> {
    let mut refs = Vec::new();
    for body in &s.bodies {
        for c in body.clauses(ClauseKind::From) {
            let mut expect_table = true;
            let mut in_condition = false;
            let mut j = c.start;
            while j < c.end {
                if expect_table {
                    expect_table = false;
                    if let Some(end) = table_ref(s, j, c.end) {
                        refs.push((j, end));
                        j = end;
                        continue;
                    }
                }
                let t = &s.toks[j];
                if t.is_kw("JOIN") {
                    in_condition = false;
                    expect_table = !(j > 0 && s.toks[j - 1].is_kw("ARRAY"));
                } else if t.is_kw("USING") || t.is_kw("ON") {
                    in_condition = true;
                } else if t.is_punct(",") && !in_condition {
                    expect_table = true;
                }
                j = s.next_at_level(j);
            }
        }
    }
    refs
}

/// Rewrites the column qualifiers that name a routed table: `items.col`,
/// `` `items`.col ``, `items.*`, `default.items.col` (the database must be
/// the table's) become `items_local.col`, `default.items_local.col`, ...
/// (18.16 resolves a table's name beside its alias too, and names result
/// columns without the qualifier, so the answer keeps its header). A
/// qualifier is the first part of a chain of at least two names
/// (`db.table.col`: the first two), or a name before `.*`.
///
/// [`Unrouted::NoTable`] when such a qualifier could also mean something
/// else: the name is an alias somewhere (`x AS items`, `t AS items`), or
/// another table of the same name is read (`otherdb.items`).
fn qualifier_edits(
    s: &Sql<'_>,
    refs: &[(usize, usize)],
    routed: &[Named],
    others: &HashSet<String>,
    edits: &mut Vec<(usize, usize, String)>,
) -> Result<(), Unrouted> {
    let n = s.toks.len();
    let mut in_ref = vec![false; n];
    for &(a, b) in refs {
        in_ref[a..b].iter_mut().for_each(|x| *x = true);
    }
    let aliases: HashSet<String> =
        (1..n).filter(|&i| s.toks[i - 1].is_kw("AS")).filter_map(|i| s.toks[i].ident()).collect();
    let by_db_name: HashMap<(String, String), &Named> =
        routed.iter().map(|r| ((r.db.clone(), r.table.clone()), r)).collect();
    let mut by_name: HashMap<String, &Named> = HashMap::new();
    let mut ambiguous: HashSet<String> = HashSet::new();
    for r in routed {
        if by_name.insert(r.table.clone(), r).is_some_and(|o| o.db != r.db) {
            ambiguous.insert(r.table.clone());
        }
    }
    let dot_star =
        |k: usize| s.toks.get(k).is_some_and(|t| t.is_punct(".")) && s.toks.get(k + 1).is_some_and(|t| t.is_punct("*"));
    let mut i = 0;
    while i < n {
        let after_dot = i > 0 && s.toks[i - 1].is_punct(".");
        let starts = !in_ref[i] && !after_dot;
        let Some((next, _)) = s.compound_ident(i, n).filter(|_| starts) else {
            i += 1;
            continue;
        };
        let parts = (next - i).div_ceil(2);
        let star = dot_star(next);
        let name = |k: usize| s.toks[k].ident();
        // `db.table.x...` / `db.table.*`, else `table.x...` / `table.*`.
        let (db_q, table_q) = if parts >= 3 || (parts == 2 && star) { (name(i), name(i + 2)) } else { (None, None) };
        let qualified = db_q.zip(table_q).and_then(|k| by_db_name.get(&k).copied());
        if let Some(r) = qualified {
            let db = r.new_db.as_deref().map_or_else(|| s.toks[i].text.to_string(), |d| quote(d, s.toks[i].text));
            let text = format!("{db}.{}", quote(&r.new_table, s.toks[i + 2].text));
            edits.push((s.toks[i].start, s.toks[i + 2].end(), text));
        } else if parts >= 2 || star {
            let first = name(i);
            if let Some(r) = first.and_then(|f| by_name.get(&f).copied()) {
                if aliases.contains(&r.table) || others.contains(&r.table) || ambiguous.contains(&r.table) {
                    return Err(Unrouted::NoTable);
                }
                edits.push((s.toks[i].start, s.toks[i].end(), quote(&r.new_table, s.toks[i].text)));
            }
        }
        i = next;
    }
    Ok(())
}

/// The words of a join's kind, before `JOIN`.
const JOIN_WORDS: &[&str] =
    &["GLOBAL", "ANY", "ALL", "ASOF", "SEMI", "ANTI", "LEFT", "RIGHT", "INNER", "FULL", "OUTER", "CROSS", "LOCAL"];

/// For every bracket: true if every subquery around and at it is the
/// statement itself, in a `FROM`, or after `GLOBAL IN` / `GLOBAL NOT IN` /
/// `GLOBAL ... JOIN`. Left to right, each bracket from its parent's answer.
fn subqueries_allowed(s: &Sql<'_>) -> Vec<bool> {
    let mut allowed = vec![true; s.toks.len()];
    for o in 0..s.toks.len() {
        if s.close[o] == super::sql::NO_MATCH {
            continue;
        }
        let outer = s.parent(o).is_none_or(|p| allowed[p]);
        allowed[o] = outer && (!s.is_subquery(o) || subquery_ok(s, o));
    }
    allowed
}

/// True if the subquery opened at `o` reads its tables where a Distributed
/// table would too: at the top, in a `FROM`, or after `GLOBAL`.
fn subquery_ok(s: &Sql<'_>, o: usize) -> bool {
    match o.checked_sub(1).map(|k| &s.toks[k]) {
        None => true,
        Some(t) if t.is_kw("FROM") => true,
        // `((SELECT ...))`: the outer bracket decides.
        Some(t) if t.is_punct("(") && s.is_subquery(o - 1) => true,
        Some(t) if t.is_kw("IN") => {
            let before = |k: usize| o.checked_sub(k).map(|k| &s.toks[k]);
            before(2).is_some_and(|t| t.is_kw("GLOBAL"))
                || (before(2).is_some_and(|t| t.is_kw("NOT")) && before(3).is_some_and(|t| t.is_kw("GLOBAL")))
        }
        // `GLOBAL [ANY|ALL] [LEFT|INNER|...] JOIN (SELECT ...)`.
        Some(t) if t.is_kw("JOIN") => s.toks[..o - 1]
            .iter()
            .rev()
            .take_while(|t| JOIN_WORDS.iter().any(|w| t.is_kw(w)))
            .any(|t| t.is_kw("GLOBAL")),
        _ => false,
    }
}

/// A table reference `t` or `db.t` at `i` that is not a table function
/// (`numbers(10)`) or a subquery. Returns the index past it.
fn table_ref(s: &Sql<'_>, i: usize, end: usize) -> Option<usize> {
    let (next, _last) = s.compound_ident(i, end)?;
    if next - i > 3 {
        return None;
    }
    if next < s.toks.len() && (s.toks[next].is_punct("(") || s.toks[next].is_punct(".")) {
        return None;
    }
    Some(next)
}

/// `db.table` -> (Some(db), table); `table` -> (None, table).
pub(crate) fn split_name(name: &str) -> (Option<&str>, &str) {
    match name.split_once('.') {
        Some((db, t)) => (Some(db), t),
        None => (None, name),
    }
}

/// `name` in the quoting style of `like` (the token it replaces): bare when
/// `like` was bare and `name` is a plain identifier, else backquotes (or
/// double quotes when `like` used them).
fn quote(name: &str, like: &str) -> String {
    let plain = name.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    let q = match like.as_bytes().first() {
        Some(b'"') => '"',
        Some(b'`') => '`',
        _ if plain => return name.to_string(),
        _ => '`',
    };
    let mut out = String::with_capacity(name.len() + 2);
    out.push(q);
    for c in name.chars() {
        if c == q || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push(q);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Grammar = Grammar::V18_16;

    fn map(pairs: &[(&str, &str)]) -> RoutedTables {
        let m: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RoutedTables::new(&m, DEFAULT_DATABASE).unwrap()
    }
    fn rw(sql: &str) -> Option<String> {
        rewrite_tables(sql, &map(&[("items", "items_local")]), None, G)
    }
    fn same(sql: &str, want: &str) {
        assert_eq!(rw(sql).as_deref(), Some(want), "{sql}");
    }

    #[test]
    fn the_local_tables_each_once() {
        let m = map(&[("items", "items_local"), ("shop.orders", "shop.orders_local"), ("other.items", "items_local")]);
        assert_eq!(
            m.locals(),
            vec![(None, "items_local".to_string()), (Some("shop".to_string()), "orders_local".to_string())]
        );
    }

    #[test]
    fn from_and_modifiers() {
        same("SELECT * FROM items WHERE shop_id = 1", "SELECT * FROM items_local WHERE shop_id = 1");
        same("select * from items", "select * from items_local");
        same("SELECT * FROM items FINAL WHERE x", "SELECT * FROM items_local FINAL WHERE x");
        same("SELECT * FROM items SAMPLE 1/10 PREWHERE x", "SELECT * FROM items_local SAMPLE 1/10 PREWHERE x");
        same("SELECT * FROM items SETTINGS max_threads=1", "SELECT * FROM items_local SETTINGS max_threads=1");
        same("SELECT * FROM items FORMAT JSON", "SELECT * FROM items_local FORMAT JSON");
        same("SELECT * FROM items;", "SELECT * FROM items_local;");
        same("SELECT * FROM items\n-- tail", "SELECT * FROM items_local\n-- tail");
        same("SELECT * FROM /* c */ items", "SELECT * FROM /* c */ items_local");
        same("SELECT * FROM items LIMIT 1", "SELECT * FROM items_local LIMIT 1");
    }

    #[test]
    fn db_prefix_quotes_and_aliases() {
        same("SELECT * FROM default.items", "SELECT * FROM default.items_local");
        same("SELECT * FROM `default`.`items` FINAL", "SELECT * FROM `default`.`items_local` FINAL");
        same("SELECT * FROM \"items\"", "SELECT * FROM \"items_local\"");
        same("SELECT * FROM items AS i WHERE i.x = 1", "SELECT * FROM items_local AS i WHERE i.x = 1");
        same("SELECT * FROM items i FINAL WHERE i.x = 1", "SELECT * FROM items_local i FINAL WHERE i.x = 1");
        same("SELECT * FROM items `i`", "SELECT * FROM items_local `i`");
        same(
            "SELECT items.shop_id FROM items FINAL WHERE items.shop_id = 5",
            "SELECT items_local.shop_id FROM items_local FINAL WHERE items_local.shop_id = 5",
        );
        same("SELECT `items`.* FROM default.`items`", "SELECT `items_local`.* FROM default.`items_local`");
        same("SELECT items.x FROM items AS t", "SELECT items_local.x FROM items_local AS t");
    }

    /// Column qualifiers naming the routed table, in every form 18.16 takes.
    #[test]
    fn qualified_columns() {
        for (sql, want) in [
            (
                "SELECT count() FROM default.items FINAL WHERE default.items.shop_id = 42",
                "SELECT count() FROM default.items_local FINAL WHERE default.items_local.shop_id = 42",
            ),
            (
                "SELECT count() FROM items AS i FINAL WHERE items.shop_id = 42",
                "SELECT count() FROM items_local AS i FINAL WHERE items_local.shop_id = 42",
            ),
            (
                "SELECT i.x, items.x, default.items.x FROM items i WHERE i.shop_id = 1",
                "SELECT i.x, items_local.x, default.items_local.x FROM items_local i WHERE i.shop_id = 1",
            ),
            (
                "SELECT `default`.`items`.`x` FROM `items` WHERE `items`.shop_id = 1",
                "SELECT `default`.`items_local`.`x` FROM `items_local` WHERE `items_local`.shop_id = 1",
            ),
            (
                "SELECT default.items.*, \"items\".* FROM items",
                "SELECT default.items_local.*, \"items_local\".* FROM items_local",
            ),
            ("SELECT items.n.a FROM items", "SELECT items_local.n.a FROM items_local"),
            // Not qualifiers: a tuple element, a lone name, another database's table.
            ("SELECT items.1, items FROM items", "SELECT items.1, items FROM items_local"),
            ("SELECT otherdb.items.x FROM items", "SELECT otherdb.items.x FROM items_local"),
            ("SELECT default.items FROM items", "SELECT default.items FROM items_local"),
        ] {
            same(sql, want);
        }
        let m = map(&[("items", "shard.items_local")]);
        assert_eq!(
            rewrite_tables("SELECT default.items.x, items.y FROM items", &m, None, G).as_deref(),
            Some("SELECT shard.items_local.x, items_local.y FROM shard.items_local")
        );
        // `items.` could mean another thing: fan out.
        for sql in [
            "SELECT items.x FROM items, otherdb.items",
            "SELECT items.x FROM items AS a, t AS items",
            "SELECT items.x FROM items ARRAY JOIN arr AS items",
        ] {
            assert_eq!(rw(sql), None, "{sql}");
        }
    }

    #[test]
    fn maps_with_databases_and_odd_names() {
        let m = map(&[("items", "shard.items_local"), ("db.orders", "orders_local"), ("x", "odd name")]);
        let r = |sql: &str, db: Option<&str>| rewrite_tables(sql, &m, db, G);
        assert_eq!(r("SELECT * FROM default.items", None).as_deref(), Some("SELECT * FROM shard.items_local"));
        assert_eq!(r("SELECT * FROM items", None).as_deref(), Some("SELECT * FROM shard.items_local"));
        assert_eq!(r("SELECT * FROM db.items", None), None, "db.items is another table");
        assert_eq!(r("SELECT * FROM db.orders", None).as_deref(), Some("SELECT * FROM db.orders_local"));
        assert_eq!(r("SELECT * FROM orders", Some("db")).as_deref(), Some("SELECT * FROM orders_local"));
        assert_eq!(r("SELECT * FROM other.orders", Some("db")), None);
        assert_eq!(r("SELECT * FROM orders", None), None, "orders is default.orders");
        assert_eq!(r("SELECT * FROM x", None).as_deref(), Some("SELECT * FROM `odd name`"));
        let m = map(&[("items", "it`s")]);
        assert_eq!(rewrite_tables("SELECT * FROM items", &m, None, G).as_deref(), Some(r"SELECT * FROM `it\`s`"));
    }

    /// Only the configured Distributed table in its database is rewritten:
    /// `otherdb.items`, or `items` in `?database=otherdb`, is another table.
    #[test]
    fn databases() {
        let m = map(&[("items", "items_local")]);
        let r = |sql: &str, db: Option<&str>| rewrite_tables(sql, &m, db, G);
        assert_eq!(r("SELECT * FROM items", Some("default")).as_deref(), Some("SELECT * FROM items_local"));
        assert_eq!(r("SELECT * FROM items", Some("otherdb")), None);
        assert_eq!(r("SELECT * FROM otherdb.items", None), None);
        assert_eq!(r("SELECT * FROM `otherdb`.`items`", Some("otherdb")), None);
        assert_eq!(r("SELECT * FROM items", Some("")), None, "no current database");
        assert_eq!(r("SELECT * FROM items", Some("Default")), None, "database names are case-sensitive");
        assert_eq!(
            r("SELECT * FROM default.items", Some("otherdb")).as_deref(),
            Some("SELECT * FROM default.items_local")
        );
        assert_eq!(r("SELECT * FROM default.items", Some("")).as_deref(), Some("SELECT * FROM default.items_local"));
        // Mixed: only the routed table's references change.
        assert_eq!(
            r("SELECT * FROM items WHERE x IN (SELECT x FROM otherdb.items)", None).as_deref(),
            Some("SELECT * FROM items_local WHERE x IN (SELECT x FROM otherdb.items)")
        );
        assert_eq!(r("SELECT * FROM otherdb.items UNION ALL SELECT * FROM items", Some("otherdb")), None);

        // routing.database: keys without a database are in it.
        let tables: BTreeMap<String, String> = [("items".to_string(), "items_local".to_string())].into();
        let shop = RoutedTables::new(&tables, "shop").unwrap();
        assert_eq!(rewrite_tables("SELECT * FROM items", &shop, None, G), None);
        assert_eq!(
            rewrite_tables("SELECT * FROM items", &shop, Some("shop"), G).as_deref(),
            Some("SELECT * FROM items_local")
        );
        assert_eq!(
            rewrite_tables("SELECT * FROM shop.items", &shop, None, G).as_deref(),
            Some("SELECT * FROM shop.items_local")
        );
        assert_eq!(rewrite_tables("SELECT * FROM default.items", &shop, None, G), None);
    }

    #[test]
    fn table_map_errors() {
        let m = |pairs: &[(&str, &str)]| {
            let t: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            RoutedTables::new(&t, DEFAULT_DATABASE)
        };
        assert_eq!(m(&[]), Err(RouteError::NoTables));
        for (k, v, bad) in [
            ("a.b.c", "x", "a.b.c"),
            (".items", "x", ".items"),
            ("db.", "x", "db."),
            ("items", "a.b.c", "a.b.c"),
            ("items", "", ""),
        ] {
            assert_eq!(m(&[(k, v)]), Err(RouteError::BadTableName(bad.to_string())), "{k}: {v}");
        }
    }

    #[test]
    fn joins_subqueries_unions() {
        same(
            "SELECT * FROM items AS a ANY LEFT JOIN items AS b USING (item_id)",
            "SELECT * FROM items_local AS a ANY LEFT JOIN items_local AS b USING (item_id)",
        );
        same(
            "SELECT * FROM a GLOBAL INNER JOIN default.items USING x",
            "SELECT * FROM a GLOBAL INNER JOIN default.items_local USING x",
        );
        same(
            "SELECT * FROM a GLOBAL ANY LEFT JOIN (SELECT * FROM items) USING x",
            "SELECT * FROM a GLOBAL ANY LEFT JOIN (SELECT * FROM items_local) USING x",
        );
        assert_eq!(rw("SELECT * FROM a ANY LEFT JOIN (SELECT * FROM items) USING x"), None, "Code 288 on Distributed");
        same("SELECT * FROM items ARRAY JOIN items", "SELECT * FROM items_local ARRAY JOIN items");
        assert_eq!(rw("SELECT * FROM t LEFT ARRAY JOIN items AS i"), None);
        assert_eq!(rw("SELECT * FROM a JOIN b USING a, items"), None);
        same(
            "SELECT * FROM (SELECT * FROM items WHERE a) WHERE b GLOBAL IN (SELECT x FROM items)",
            "SELECT * FROM (SELECT * FROM items_local WHERE a) WHERE b GLOBAL IN (SELECT x FROM items_local)",
        );
        same(
            "SELECT * FROM items WHERE b GLOBAL NOT IN ((SELECT x FROM (SELECT x FROM items)))",
            "SELECT * FROM items_local WHERE b GLOBAL NOT IN ((SELECT x FROM (SELECT x FROM items_local)))",
        );
        same("(SELECT * FROM items)", "(SELECT * FROM items_local)");
        same(
            "SELECT 1 FROM items UNION ALL SELECT 2 FROM default.items",
            "SELECT 1 FROM items_local UNION ALL SELECT 2 FROM default.items_local",
        );
        same("SELECT * FROM items, items AS b", "SELECT * FROM items_local, items_local AS b");
        same("INSERT INTO t SELECT * FROM items", "INSERT INTO t SELECT * FROM items_local");
        same(
            "WITH items AS (SELECT 1) SELECT * FROM default.items",
            "WITH items AS (SELECT 1) SELECT * FROM default.items_local",
        );
    }

    /// A routed table read by a subquery that is not in a FROM nor after
    /// GLOBAL IN: the Distributed table refuses it (Code 288) or reads all
    /// shards, so the query is not routed.
    #[test]
    fn subqueries_that_read_all_shards() {
        let m = map(&[("items", "items_local")]);
        for sql in [
            "SELECT * FROM items WHERE b IN (SELECT x FROM items)",
            "SELECT * FROM items WHERE b NOT IN (SELECT x FROM items WHERE s = 1)",
            "SELECT * FROM items WHERE b IN ((SELECT x FROM items))",
            "SELECT * FROM items WHERE (b, 1) IN (SELECT x, 1 FROM items)",
            "SELECT * FROM items WHERE b IN (SELECT x FROM (SELECT * FROM items))",
            "SELECT * FROM items WHERE b = (SELECT max(x) FROM items)",
            "SELECT (SELECT count() FROM items) FROM items",
            "WITH (SELECT max(x) FROM items) AS m SELECT m",
            "SELECT * FROM items WHERE b IN items",
            "SELECT * FROM items WHERE b NOT IN default.items",
            "SELECT * FROM items WHERE b GLOBAL IN (SELECT x FROM t WHERE y IN (SELECT y FROM items))",
            "SELECT 1 UNION ALL (SELECT * FROM items)",
            "SELECT toString((SELECT 1 FROM items))",
        ] {
            assert_eq!(rewrite(sql, &m, None, G), Err(Unrouted::Subquery), "{sql}");
            assert_eq!(rewrite_tables(sql, &m, None, G), None, "{sql}");
        }
        // Other tables in such subqueries are fine, and so is another database's items.
        same(
            "SELECT * FROM items WHERE b IN (SELECT x FROM otherdb.items) AND c IN otherdb.items",
            "SELECT * FROM items_local WHERE b IN (SELECT x FROM otherdb.items) AND c IN otherdb.items",
        );
        assert_eq!(rewrite("SELECT * FROM t WHERE b IN (1, 2)", &m, None, G), Err(Unrouted::NoTable));
    }

    #[test]
    fn what_is_not_touched() {
        for sql in [
            "SELECT items FROM t",
            "SELECT * FROM t WHERE items = 1",
            "SELECT 'FROM items' FROM t",
            "SELECT * FROM t -- FROM items",
            "SELECT * FROM t /* JOIN items */",
            "SELECT * FROM items_local",
            "SELECT * FROM my_items",
            "SELECT * FROM items(1)",
            "SELECT * FROM remote('h', db, items)",
            "SELECT * FROM db.items.x",
            "SELECT extract(DAY FROM items) FROM t",
            "SELECT substring(s FROM 2) FROM t",
            "SHOW TABLES FROM items",
            "DESCRIBE TABLE items",
            "CREATE VIEW v AS SELECT * FROM items",
            "INSERT INTO items VALUES (1)",
            "INSERT INTO t FORMAT TSV\nSELECT * FROM items",
            "SELECT * FROM t WHERE x IN items",
            "SELECT * FROM items; SELECT 1",
            "SELECT * FROM items WHERE x = 'open",
            "WITH items AS (SELECT 1) SELECT * FROM items",
            "SELECT * FROM (items",
            "",
        ] {
            assert_eq!(rw(sql), None, "{sql}");
        }
    }

    /// Random SQL-ish text: no panics, and any rewrite differs from the input
    /// only by `_local` names.
    #[test]
    fn no_panic_on_random_input() {
        let pieces = [
            "SELECT ",
            "* ",
            "FROM ",
            "items ",
            "db.",
            "WHERE ",
            "JOIN ",
            "ARRAY ",
            ", ",
            "(",
            ") ",
            "'items' ",
            "-- c\n",
            "/* items */",
            "items.x ",
            "`items` ",
            "FINAL ",
            "AS ",
            "i ",
            "UNION ALL ",
            "USING ",
            "\"",
            "'",
            "é",
            ";",
            "extract(",
            "t ",
        ];
        for s in crate::random_texts(&pieces, 5, 10_000, 16) {
            if let Some(out) = rw(&s) {
                let strip = |t: &str| t.replace("items_local", "items");
                assert_eq!(strip(&out), strip(&s), "{s:?} -> {out:?}");
            }
        }
    }
}

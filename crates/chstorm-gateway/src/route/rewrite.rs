//! Rewriting Distributed table names to local table names in a routed query.

use std::collections::BTreeMap;

use super::lexer::TokenKind;
use super::sql::{ClauseKind, Sql, Statement};
use super::{RouteError, Unrouted};

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
///   name stay as they are. A reference without an alias gets ` AS <old name>`
///   when the query qualifies columns with the old name (`items.shop_id`), so
///   they keep resolving.
/// * String literals, comments, column names, function arguments
///   (`remote('h', db, items)`), `ARRAY JOIN items` (an array column) and
///   other statements (`SHOW TABLES FROM items`, DDL, `INSERT ... VALUES`) are
///   not touched; only queries (`SELECT`, `WITH`, `(`) and `INSERT ... SELECT`
///   are rewritten. The text outside the replaced names is kept byte for byte.
pub fn rewrite_tables(sql: &str, tables: &RoutedTables, current_db: Option<&str>) -> Option<String> {
    rewrite(sql, tables, current_db).ok()
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
pub(crate) fn rewrite(sql: &str, tables: &RoutedTables, current_db: Option<&str>) -> Result<String, Unrouted> {
    let current_db = current_db.unwrap_or(DEFAULT_DATABASE);
    let s = Sql::parse(sql).ok_or(Unrouted::NoTable)?;
    if s.statement == Statement::Other {
        return Err(Unrouted::NoTable);
    }
    let n = s.toks.len();
    let routed = |first: usize, end: usize| -> bool {
        let table = s.toks[end - 1].ident();
        let db = if end - first == 3 { s.toks[first].ident() } else { Some(current_db.to_string()) };
        matches!((db, table), (Some(db), Some(t)) if tables.local(&db, &t).is_some())
    };
    // `x IN items`: the Distributed table as a set.
    for i in (0..n).filter(|&i| s.toks[i].is_kw("IN")) {
        if let Some((next, _)) = s.compound_ident(i + 1, n) {
            let call = s.toks.get(next).is_some_and(|t| t.is_punct("(") || t.is_punct("."));
            if !call && next - (i + 1) <= 3 && routed(i + 1, next) {
                return Err(Unrouted::Subquery);
            }
        }
    }

    // (first token, past-the-end token) of each table reference found.
    let mut refs: Vec<(usize, usize)> = Vec::new();
    for body in &s.bodies {
        let d = body.depth;
        for c in body.clauses(ClauseKind::From) {
            let mut expect_table = true;
            let mut in_condition = false;
            let mut j = c.start;
            while j < c.end {
                if s.depth[j] != d {
                    j += 1;
                    continue;
                }
                if expect_table {
                    expect_table = false;
                    if let Some(end) = table_ref(&s, j, c.end) {
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
                j += 1;
            }
        }
    }

    // `WITH items AS (SELECT ...)` (a common table expression, in releases
    // newer than 18.16): `FROM items` then means the CTE, not the table.
    let ctes: Vec<String> = (0..n.saturating_sub(2))
        .filter(|&i| s.toks[i + 1].is_kw("AS") && s.is_subquery(i + 2))
        .filter_map(|i| s.toks[i].ident())
        .collect();

    let parents = s.parents();
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for &(first, end) in &refs {
        let last = end - 1;
        let table = s.toks[last].ident().ok_or(Unrouted::NoTable)?;
        let db = if end - first == 3 { Some(s.toks[first].ident().ok_or(Unrouted::NoTable)?) } else { None };
        if db.is_none() && ctes.contains(&table) {
            continue;
        }
        let Some((new_db, new_table)) = tables.local(db.as_deref().unwrap_or(current_db), &table) else { continue };
        if !subqueries_allowed(&s, &parents, first) {
            return Err(Unrouted::Subquery);
        }
        match new_db {
            Some(new_db) => {
                let text = format!("{}.{}", quote(new_db, s.toks[first].text), quote(new_table, s.toks[last].text));
                edits.push((s.toks[first].start, s.toks[last].end(), text));
            }
            None => edits.push((s.toks[last].start, s.toks[last].end(), quote(new_table, s.toks[last].text))),
        }
        if !has_alias(&s, end) && qualifies_columns(&s, &refs, &table) {
            let alias = format!(" AS {}", quote(&table, s.toks[last].text));
            edits.push((s.toks[last].end(), s.toks[last].end(), alias));
        }
    }
    if edits.is_empty() {
        return Err(Unrouted::NoTable);
    }
    edits.sort_by_key(|e| (e.0, e.1));
    let mut out = String::with_capacity(sql.len() + 16 * edits.len());
    let mut at = 0;
    for (start, end, text) in edits {
        out.push_str(&sql[at..start]);
        out.push_str(&text);
        at = end;
    }
    out.push_str(&sql[at..]);
    Ok(out)
}

/// The words of a join's kind, before `JOIN`.
const JOIN_WORDS: &[&str] =
    &["GLOBAL", "ANY", "ALL", "ASOF", "SEMI", "ANTI", "LEFT", "RIGHT", "INNER", "FULL", "OUTER", "CROSS", "LOCAL"];

/// True if every subquery around token `i` is the statement itself, in a
/// `FROM`, or after `GLOBAL IN` / `GLOBAL NOT IN` / `GLOBAL ... JOIN`.
fn subqueries_allowed(s: &Sql<'_>, parents: &[Option<usize>], i: usize) -> bool {
    let mut p = parents[i];
    while let Some(o) = p {
        if s.is_subquery(o) {
            let ok = match o.checked_sub(1).map(|k| &s.toks[k]) {
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
            };
            if !ok {
                return false;
            }
        }
        p = parents[o];
    }
    true
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

/// True if the table reference ending before `next` has an alias.
fn has_alias(s: &Sql<'_>, next: usize) -> bool {
    let Some(t) = s.toks.get(next) else { return false };
    match t.kind {
        TokenKind::QuotedIdent => true,
        TokenKind::Word => t.is_kw("AS") || !NOT_ALIAS.iter().any(|k| t.text.eq_ignore_ascii_case(k)),
        _ => false,
    }
}

/// Words that may follow a table name and are not its alias.
const NOT_ALIAS: &[&str] = &[
    "FINAL",
    "SAMPLE",
    "PREWHERE",
    "WHERE",
    "GROUP",
    "ORDER",
    "LIMIT",
    "HAVING",
    "SETTINGS",
    "FORMAT",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "ANY",
    "ALL",
    "ASOF",
    "SEMI",
    "ANTI",
    "GLOBAL",
    "ARRAY",
    "JOIN",
    "ON",
    "USING",
    "INTO",
    "WITH",
    "PASTE",
    "LOCAL",
    "OUTER",
    "NATURAL",
];

/// True if some column is qualified with `table` (`items.shop_id`, `items.*`)
/// outside the table references themselves.
fn qualifies_columns(s: &Sql<'_>, refs: &[(usize, usize)], table: &str) -> bool {
    (0..s.toks.len().saturating_sub(2)).any(|i| {
        matches!(s.toks[i].kind, TokenKind::Word | TokenKind::QuotedIdent)
            && s.toks[i + 1].is_punct(".")
            && !(i > 0 && s.toks[i - 1].is_punct("."))
            && !refs.iter().any(|&(a, b)| (a..b).contains(&i))
            && s.toks[i].ident().as_deref() == Some(table)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn map(pairs: &[(&str, &str)]) -> RoutedTables {
        let m: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RoutedTables::new(&m, DEFAULT_DATABASE).unwrap()
    }
    fn rw(sql: &str) -> Option<String> {
        rewrite_tables(sql, &map(&[("items", "items_local")]), None)
    }
    fn same(sql: &str, want: &str) {
        assert_eq!(rw(sql).as_deref(), Some(want), "{sql}");
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
            "SELECT items.shop_id FROM items_local AS items FINAL WHERE items.shop_id = 5",
        );
        same("SELECT `items`.* FROM default.`items`", "SELECT `items`.* FROM default.`items_local` AS `items`");
        same("SELECT items.x FROM items AS t", "SELECT items.x FROM items_local AS t");
    }

    #[test]
    fn maps_with_databases_and_odd_names() {
        let m = map(&[("items", "shard.items_local"), ("db.orders", "orders_local"), ("x", "odd name")]);
        let r = |sql: &str, db: Option<&str>| rewrite_tables(sql, &m, db);
        assert_eq!(r("SELECT * FROM default.items", None).as_deref(), Some("SELECT * FROM shard.items_local"));
        assert_eq!(r("SELECT * FROM items", None).as_deref(), Some("SELECT * FROM shard.items_local"));
        assert_eq!(r("SELECT * FROM db.items", None), None, "db.items is another table");
        assert_eq!(r("SELECT * FROM db.orders", None).as_deref(), Some("SELECT * FROM db.orders_local"));
        assert_eq!(r("SELECT * FROM orders", Some("db")).as_deref(), Some("SELECT * FROM orders_local"));
        assert_eq!(r("SELECT * FROM other.orders", Some("db")), None);
        assert_eq!(r("SELECT * FROM orders", None), None, "orders is default.orders");
        assert_eq!(r("SELECT * FROM x", None).as_deref(), Some("SELECT * FROM `odd name`"));
        let m = map(&[("items", "it`s")]);
        assert_eq!(rewrite_tables("SELECT * FROM items", &m, None).as_deref(), Some(r"SELECT * FROM `it\`s`"));
    }

    /// Only the configured Distributed table in its database is rewritten:
    /// `otherdb.items`, or `items` in `?database=otherdb`, is another table.
    #[test]
    fn databases() {
        let m = map(&[("items", "items_local")]);
        let r = |sql: &str, db: Option<&str>| rewrite_tables(sql, &m, db);
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
        assert_eq!(rewrite_tables("SELECT * FROM items", &shop, None), None);
        assert_eq!(
            rewrite_tables("SELECT * FROM items", &shop, Some("shop")).as_deref(),
            Some("SELECT * FROM items_local")
        );
        assert_eq!(
            rewrite_tables("SELECT * FROM shop.items", &shop, None).as_deref(),
            Some("SELECT * FROM shop.items_local")
        );
        assert_eq!(rewrite_tables("SELECT * FROM default.items", &shop, None), None);
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
            assert_eq!(rewrite(sql, &m, None), Err(Unrouted::Subquery), "{sql}");
            assert_eq!(rewrite_tables(sql, &m, None), None, "{sql}");
        }
        // Other tables in such subqueries are fine, and so is another database's items.
        same(
            "SELECT * FROM items WHERE b IN (SELECT x FROM otherdb.items) AND c IN otherdb.items",
            "SELECT * FROM items_local WHERE b IN (SELECT x FROM otherdb.items) AND c IN otherdb.items",
        );
        assert_eq!(rewrite("SELECT * FROM t WHERE b IN (1, 2)", &m, None), Err(Unrouted::NoTable));
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
    /// only by `_local` names and ` AS ` aliases.
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
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        for _ in 0..10_000 {
            let n = rng.gen_range(0..16);
            let mut s = String::new();
            for _ in 0..n {
                s.push_str(pieces[rng.gen_range(0..pieces.len())]);
            }
            if let Some(out) = rw(&s) {
                let strip =
                    |t: &str| t.replace("items_local", "items").replace(" AS items", "").replace(" AS `items`", "");
                assert_eq!(strip(&out), strip(&s), "{s:?} -> {out:?}");
            }
        }
    }
}

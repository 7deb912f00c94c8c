//! Shard routing: send a query that carries a shard key to one replica of the
//! owning shard, with the Distributed table names rewritten to the local
//! ones, instead of fanning out through the Distributed table.
//!
//! Pure and deterministic: no I/O, no clocks, no randomness. The pieces:
//!
//! * [`extract_key`]: the key, from the `shard_key` URL parameter, the
//!   `X-Chstorm-Shard-Key` header, or `where_column = <literal>` in WHERE.
//! * [`ShardingExpr::evaluate`]: the sharding expression's value for the key,
//!   as the Distributed engine computes it on insert.
//! * [`select_shard`]: the weighted choice of the shard.
//! * [`rewrite_tables`]: Distributed -> local table names in FROM/JOIN, only
//!   for the configured tables in their databases ([`RoutedTables`]).
//! * [`Router`]: all of it for one cluster's `routing:` config.
//!
//! A query is routed only when all four succeed; otherwise it goes to any
//! healthy replica and through Distributed as usual (fan-out is always the
//! safe answer). Every reason to fan out is listed in docs/GATEWAY.md
//! ("What the gateway refuses and why").
//!
//! # How ClickHouse computes the shard (verified on 18.16.1)
//!
//! **`cityHash64` of an integer is not CityHash of its bytes.** For integer
//! arguments (and Date/DateTime/Float, not needed here) `cityHash64(x)` is
//! the SQL function `intHash64(bits)`, where `bits` is the value's own bytes
//! zero-extended to 64 bits (`FunctionAnyHash::executeIntType`:
//! `IntHash64Impl::apply(ext::bit_cast<UInt64>(x))`), and `intHash64(x)` is
//! the MurmurHash3 finalizer of `x ^ 0x4CF2D2BAAE6DA887` (mind the XOR: the
//! bare finalizer, ClickHouse's internal hash-table `intHash64`, gives other
//! values). On 18.16.1:
//!
//! * `cityHash64(123)` (a `UInt8` literal) = `cityHash64(toUInt8(123))` =
//!   `cityHash64(toUInt32(123))` = `cityHash64(toUInt64(123))` =
//!   `intHash64(123)` = 12585326385145454095. So the literal's type does not
//!   matter for non-negative values;
//! * for negative values it does: `cityHash64(-1)` (an `Int8` literal) =
//!   `intHash64(0xFF)` = 8055013221972926055, `cityHash64(toInt16(-1))` =
//!   `intHash64(0xFFFF)`, `cityHash64(toInt32(-1))` = `intHash64(0xFFFF_FFFF)`,
//!   `cityHash64(toInt64(-1))` = `cityHash64(toUInt64(-1))` = `intHash64(u64::MAX)`;
//! * `cityHash64('...')` of a `String` is CityHash64 v1.0.2 of the bytes
//!   ([`cityhash::city_hash64`]; Google's v1.1 gives other results).
//!
//! That is why [`ShardingExpr::evaluate`] takes the column's type: the value
//! is hashed as the *column* type (an insert converts the literal to it
//! first), not as the literal's type.
//!
//! Current releases (from reading the source, not verified against a server
//! here): `cityHash64` still has `use_int_hash_for_pods = true`, so integers
//! up to 64 bits still go through `intHash64` of the zero-extended bits, and
//! strings through `CityHash_v1_0_2::CityHash64`; (U)Int128/256 are hashed
//! as bytes, which does not concern us.
//!
//! **The shard.** The Distributed engine (`createBlockSelector`) builds one
//! slot per unit of weight (`slots = [0,0,1,2,...]`, shard `i` repeated
//! `weight_i` times), and sends a row to `slots[value % slots.len()]`. A
//! weight-0 shard gets no slot: it never receives rows, and keeps its index.
//! Seen on 18.16 with weights `[2,0,3]`: residues 0,1 went to the first
//! shard, 2..4 to the third, nothing to the second. With all weights 0 the
//! whole server process aborts on an insert into the Distributed table
//! (`libdivide.h: divider must be != 0`), so [`select_shard`] returns `None`
//! and [`validate_weights`] / [`Router::new`] refuse such a config.
//!
//! **Signed plain columns.** With a plain integer column as the sharding key,
//! the value is cast to an unsigned type of at least 32 bits before the
//! modulo: `Int8`/`Int16`/`Int32` are sign-extended to 32 bits
//! (`Int8` -1 -> 4294967295), `Int64` to 64 bits. Seen on 18.16 with weights
//! `[3,1,7]` (total 11, which tells 8/16/32/64-bit widenings apart).
//! `cityHash64(col)` always yields `UInt64`, so this only matters for plain
//! columns.

pub mod cityhash;
mod extract;
pub(crate) mod lexer;
mod rewrite;
mod shard;
mod sql;

use std::collections::BTreeMap;

pub use extract::{extract_key, key_from_where, SHARD_KEY_HEADER, SHARD_KEY_PARAM};
pub use rewrite::{rewrite_tables, RoutedTables, DEFAULT_DATABASE};
pub use shard::{select_shard, validate_weights, ColumnType, KeyValue, ShardingExpr};

/// What is wrong with a routing config or a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("sharding_key '{0}' is not supported: use cityHash64(column) or a plain integer column")]
    UnsupportedShardingKey(String),
    #[error(
        "column type '{0}' is not supported for the shard key: use UInt8, UInt16, UInt32, UInt64, Int8, Int16, Int32, Int64 or String"
    )]
    UnsupportedColumnType(String),
    #[error(
        "sharding_key '{column}' is a {col_type} column, which does not give an integer (ClickHouse refuses it too): use cityHash64({column})"
    )]
    NotAnInteger { column: String, col_type: ColumnType },
    #[error("shard key {key} is not a valid {col_type}")]
    InvalidKey { key: String, col_type: ColumnType },
    #[error(
        "no shard has a positive weight: ClickHouse aborts on an insert into such a Distributed table; give at least one shard a weight of 1 or more"
    )]
    NoWeight,
    #[error(
        "where_column '{where_column}' is not the sharding key's column '{column}': the WHERE rule would route by the wrong value"
    )]
    WhereColumnMismatch { where_column: String, column: String },
    #[error("routing.tables is empty: name the Distributed tables and their local tables (items: items_local)")]
    NoTables,
    #[error("routing.tables: '{0}' is not a table name (use table or db.table)")]
    BadTableName(String),
    #[error("routing.database: '{0}' is not a database name (a non-empty name without '.')")]
    BadDatabase(String),
}

/// One cluster's routing: the sharding expression and its column type, the
/// Distributed -> local table names, the optional WHERE column, and the shard
/// weights in config order.
#[derive(Clone, Debug)]
pub struct Router {
    expr: ShardingExpr,
    col_type: ColumnType,
    tables: RoutedTables,
    where_column: Option<String>,
    weights: Vec<u32>,
}

/// A routing decision: send `sql` to a replica of shard `shard` (0-based, in
/// config order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    pub shard: usize,
    /// The key found.
    pub key: KeyValue,
    /// The sharding expression's value for it.
    pub value: u64,
    /// The query with the local table names.
    pub sql: String,
}

/// Why a query is not routed (it fans out through Distributed instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrouted {
    /// No key in the URL, the header, or the WHERE clause.
    NoKey,
    /// A key that does not fit the column type (`shard_key=abc` for UInt64).
    BadKey(RouteError),
    /// A key, but no routed table (in its database) in a FROM/JOIN position.
    NoTable,
    /// A routed table read by a subquery that is not in a `FROM` nor after
    /// `GLOBAL IN` (`IN (SELECT ... FROM items)`, a scalar subquery, `x IN
    /// items`): the Distributed table refuses it (Code 288 on 18.16) or reads
    /// all shards there.
    Subquery,
    /// A WHERE literal of the other kind than the column: `'42'` for an
    /// integer column (18.16: Code 43, `Illegal types of arguments (UInt64,
    /// String) of function equals`; newer releases convert the string), or a
    /// number for a String column. Servers differ, so the query fans out.
    LiteralType,
}

impl Router {
    /// Checks the config: a supported `sharding_key`, a positive total
    /// weight, non-empty `tables` of `table` / `db.table` names, and a
    /// `where_column` (when given) equal to the sharding key's column.
    /// `database` (`routing.database`) is the database of the `tables` keys
    /// that name none; `None` is [`DEFAULT_DATABASE`].
    pub fn new(
        sharding_key: &str,
        col_type: ColumnType,
        tables: BTreeMap<String, String>,
        database: Option<String>,
        where_column: Option<String>,
        weights: Vec<u32>,
    ) -> Result<Router, RouteError> {
        let expr = ShardingExpr::parse(sharding_key)?;
        if let (ShardingExpr::Column { column }, ColumnType::String) = (&expr, col_type) {
            return Err(RouteError::NotAnInteger { column: column.clone(), col_type });
        }
        validate_weights(&weights)?;
        let database = database.unwrap_or_else(|| DEFAULT_DATABASE.to_string());
        if database.is_empty() || database.contains('.') {
            return Err(RouteError::BadDatabase(database));
        }
        let tables = RoutedTables::new(&tables, &database)?;
        let where_column = where_column.filter(|c| !c.is_empty());
        if let Some(w) = &where_column {
            if w != expr.column() {
                return Err(RouteError::WhereColumnMismatch {
                    where_column: w.clone(),
                    column: expr.column().to_string(),
                });
            }
        }
        Ok(Router { expr, col_type, tables, where_column, weights })
    }

    pub fn sharding_expr(&self) -> &ShardingExpr {
        &self.expr
    }

    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// The shard owning `key`.
    pub fn shard_of(&self, key: &KeyValue) -> Result<usize, RouteError> {
        let value = self.expr.evaluate(key, self.col_type)?;
        select_shard(value, &self.weights).ok_or(RouteError::NoWeight)
    }

    /// Decides where `sql` goes. `sql` is the whole query text, as the
    /// server will run it (the `query` URL parameter and the body joined as
    /// [`crate::request::join_query`] does). `url_param` is the decoded
    /// `shard_key` URL parameter, `header` the `X-Chstorm-Shard-Key` header,
    /// `database` the request's current database (the `database` URL
    /// parameter, see [`crate::request::current_database`]; `None` is
    /// [`DEFAULT_DATABASE`], `Some("")` no current database).
    pub fn route(
        &self,
        sql: &str,
        url_param: Option<&str>,
        header: Option<&str>,
        database: Option<&str>,
    ) -> Result<Routed, Unrouted> {
        let from_client = url_param.is_some_and(|v| !v.is_empty()) || header.is_some_and(|v| !v.is_empty());
        let key = extract_key(sql, url_param, header, self.where_column.as_deref()).ok_or(Unrouted::NoKey)?;
        // A literal from the SQL must be of the column's kind: whether and how a
        // server converts `'42'` for an integer column depends on its version.
        let string_column = self.col_type == ColumnType::String;
        if !from_client && matches!(key, KeyValue::Str(_)) != string_column {
            return Err(Unrouted::LiteralType);
        }
        let value = self.expr.evaluate(&key, self.col_type).map_err(Unrouted::BadKey)?;
        let shard = select_shard(value, &self.weights).ok_or(Unrouted::BadKey(RouteError::NoWeight))?;
        let sql = rewrite::rewrite(sql, &self.tables, database)?;
        Ok(Routed { shard, key, value, sql })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> BTreeMap<String, String> {
        [("items".to_string(), "items_local".to_string())].into_iter().collect()
    }

    fn router() -> Router {
        Router::new("cityHash64(shop_id)", ColumnType::UInt64, tables(), None, Some("shop_id".into()), vec![1, 1])
            .unwrap()
    }

    #[test]
    fn routes_point_lookups() {
        let r = router();
        let got = r.route("SELECT * FROM items FINAL WHERE shop_id = 123 AND item_id = 4", None, None, None).unwrap();
        // cityHash64(123) = 12585326385145454095 on 18.16; odd -> shard 1.
        assert_eq!(got.value, 12585326385145454095);
        assert_eq!(got.shard, 1);
        assert_eq!(got.key, KeyValue::UInt(123));
        assert_eq!(got.sql, "SELECT * FROM items_local FINAL WHERE shop_id = 123 AND item_id = 4");
        assert_eq!(r.shard_of(&KeyValue::UInt(123)), Ok(1));
        // The URL parameter gives the same shard for the same value.
        let by_param = r.route("SELECT * FROM items FINAL WHERE item_id = 4", Some("123"), None, None).unwrap();
        assert_eq!(by_param.shard, 1);
    }

    #[test]
    fn why_not_routed() {
        let r = router();
        assert_eq!(r.route("SELECT * FROM items", None, None, None), Err(Unrouted::NoKey));
        assert_eq!(r.route("SELECT * FROM items WHERE shop_id IN (1, 2)", None, None, None), Err(Unrouted::NoKey));
        assert!(matches!(r.route("SELECT * FROM items", Some("abc"), None, None), Err(Unrouted::BadKey(_))));
        assert_eq!(r.route("SELECT * FROM other WHERE shop_id = 1", None, None, None), Err(Unrouted::NoTable));
        assert_eq!(r.route("SELECT 1", Some("1"), None, None), Err(Unrouted::NoTable));
    }

    #[test]
    fn config_errors() {
        let e = |key: &str, ty: ColumnType, t: BTreeMap<String, String>, w: Option<&str>, weights: Vec<u32>| {
            Router::new(key, ty, t, None, w.map(String::from), weights).unwrap_err()
        };
        assert!(matches!(
            e("rand()", ColumnType::UInt64, tables(), None, vec![1]),
            RouteError::UnsupportedShardingKey(_)
        ));
        assert!(matches!(e("shop_id", ColumnType::String, tables(), None, vec![1]), RouteError::NotAnInteger { .. }));
        assert_eq!(e("shop_id", ColumnType::UInt64, tables(), None, vec![0, 0]), RouteError::NoWeight);
        assert_eq!(e("shop_id", ColumnType::UInt64, tables(), None, vec![]), RouteError::NoWeight);
        assert_eq!(e("shop_id", ColumnType::UInt64, BTreeMap::new(), None, vec![1]), RouteError::NoTables);
        let bad: BTreeMap<String, String> = [("items".to_string(), "a.b.c".to_string())].into_iter().collect();
        assert!(matches!(e("shop_id", ColumnType::UInt64, bad, None, vec![1]), RouteError::BadTableName(_)));
        let bad: BTreeMap<String, String> = [(".items".to_string(), "x".to_string())].into_iter().collect();
        assert!(matches!(e("shop_id", ColumnType::UInt64, bad, None, vec![1]), RouteError::BadTableName(_)));
        let err = e("cityHash64(shop_id)", ColumnType::UInt64, tables(), Some("item_id"), vec![1]);
        assert!(matches!(err, RouteError::WhereColumnMismatch { .. }));
        assert!(err.to_string().contains("'item_id'"), "{err}");
        // An empty where_column is no where_column.
        assert!(Router::new("shop_id", ColumnType::Int32, tables(), None, Some(String::new()), vec![1]).is_ok());
        for db in ["", "a.b"] {
            let err = Router::new("shop_id", ColumnType::Int32, tables(), Some(db.into()), None, vec![1]).unwrap_err();
            assert_eq!(err, RouteError::BadDatabase(db.into()));
        }
    }

    /// Octal literals, other databases, string literals.
    #[test]
    fn only_certain_answers_are_routed() {
        let r = router();
        let q = "SELECT count() FROM items FINAL WHERE shop_id = 010";
        assert_eq!(r.route(q, None, None, None), Err(Unrouted::NoKey), "010 is octal 8 on 18.16");
        let q = "SELECT count() FROM items FINAL WHERE shop_id = 42";
        assert!(r.route(q, None, None, None).is_ok());
        assert!(r.route(q, None, None, Some("default")).is_ok());
        assert_eq!(r.route(q, None, None, Some("otherdb")), Err(Unrouted::NoTable));
        assert_eq!(r.route(q, None, None, Some("")), Err(Unrouted::NoTable));
        let q = "SELECT count() FROM otherdb.items WHERE shop_id = 42";
        assert_eq!(r.route(q, None, None, None), Err(Unrouted::NoTable));
        let q = "SELECT count() FROM default.items WHERE shop_id = 42";
        assert_eq!(
            r.route(q, None, None, Some("otherdb")).unwrap().sql,
            "SELECT count() FROM default.items_local WHERE shop_id = 42"
        );
        // '42' for a UInt64 column: Code 43 on 18.16, converted by newer servers.
        let q = "SELECT count() FROM items WHERE shop_id = '42'";
        assert_eq!(r.route(q, None, None, None), Err(Unrouted::LiteralType));
        // The client's own key is text by design, whatever the column.
        assert!(r.route(q, Some("42"), None, None).is_ok());
        assert!(r.route(q, None, Some("42"), None).is_ok());
        // A number for a String column.
        let by_name =
            Router::new("cityHash64(name)", ColumnType::String, tables(), None, Some("name".into()), vec![1, 1])
                .unwrap();
        assert_eq!(by_name.route("SELECT * FROM items WHERE name = 42", None, None, None), Err(Unrouted::LiteralType));
        assert!(by_name.route("SELECT * FROM items WHERE name = '42'", None, None, None).is_ok());
        // A subquery that reads all shards through Distributed (or is refused there: Code 288).
        let q = "SELECT count() FROM items WHERE shop_id = 42 AND item_id IN (SELECT item_id FROM items WHERE shop_id = 42)";
        assert_eq!(r.route(q, None, None, None), Err(Unrouted::Subquery));
        assert!(r.route(&q.replace(" IN ", " GLOBAL IN "), None, None, None).is_ok());
        // routing.database
        let shop = Router::new(
            "cityHash64(shop_id)",
            ColumnType::UInt64,
            tables(),
            Some("shop".into()),
            Some("shop_id".into()),
            vec![1, 1],
        )
        .unwrap();
        let q = "SELECT count() FROM items WHERE shop_id = 42";
        assert_eq!(shop.route(q, None, None, None), Err(Unrouted::NoTable));
        assert!(shop.route(q, None, None, Some("shop")).is_ok());
    }
}

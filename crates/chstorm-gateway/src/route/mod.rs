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
//! * [`rewrite_tables`]: Distributed -> local table names in FROM/JOIN.
//! * [`Router`]: all of it for one cluster's `routing:` config.
//!
//! A query is routed only when all four succeed; otherwise it goes to any
//! healthy replica and through Distributed as usual (fan-out is always the
//! safe answer).
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
pub mod lexer;
mod rewrite;
mod shard;
mod sql;

use std::collections::BTreeMap;

pub use extract::{extract_key, key_from_where, SHARD_KEY_HEADER, SHARD_KEY_PARAM};
pub use rewrite::rewrite_tables;
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
}

/// One cluster's routing: the sharding expression and its column type, the
/// Distributed -> local table names, the optional WHERE column, and the shard
/// weights in config order.
#[derive(Clone, Debug)]
pub struct Router {
    expr: ShardingExpr,
    col_type: ColumnType,
    tables: BTreeMap<String, String>,
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
    /// A key, but no routed table in a FROM/JOIN position.
    NoTable,
}

impl Router {
    /// Checks the config: a supported `sharding_key`, a positive total
    /// weight, non-empty `tables` of `table` / `db.table` names, and a
    /// `where_column` (when given) equal to the sharding key's column.
    pub fn new(
        sharding_key: &str,
        col_type: ColumnType,
        tables: BTreeMap<String, String>,
        where_column: Option<String>,
        weights: Vec<u32>,
    ) -> Result<Router, RouteError> {
        let expr = ShardingExpr::parse(sharding_key)?;
        if let (ShardingExpr::Column { column }, ColumnType::String) = (&expr, col_type) {
            return Err(RouteError::NotAnInteger { column: column.clone(), col_type });
        }
        validate_weights(&weights)?;
        if tables.is_empty() {
            return Err(RouteError::NoTables);
        }
        for name in tables.keys().chain(tables.values()) {
            let (db, t) = rewrite::split_name(name);
            if t.is_empty() || t.contains('.') || db.is_some_and(str::is_empty) {
                return Err(RouteError::BadTableName(name.clone()));
            }
        }
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

    /// Decides where `sql` goes. `url_param` is the decoded `shard_key` URL
    /// parameter, `header` the `X-Chstorm-Shard-Key` header.
    pub fn route(&self, sql: &str, url_param: Option<&str>, header: Option<&str>) -> Result<Routed, Unrouted> {
        let key = extract_key(sql, url_param, header, self.where_column.as_deref()).ok_or(Unrouted::NoKey)?;
        let value = self.expr.evaluate(&key, self.col_type).map_err(Unrouted::BadKey)?;
        let shard = select_shard(value, &self.weights).ok_or(Unrouted::BadKey(RouteError::NoWeight))?;
        let sql = rewrite_tables(sql, &self.tables).ok_or(Unrouted::NoTable)?;
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
        Router::new("cityHash64(shop_id)", ColumnType::UInt64, tables(), Some("shop_id".into()), vec![1, 1]).unwrap()
    }

    #[test]
    fn routes_point_lookups() {
        let r = router();
        let got = r.route("SELECT * FROM items FINAL WHERE shop_id = 123 AND item_id = 4", None, None).unwrap();
        // cityHash64(123) = 12585326385145454095 on 18.16; odd -> shard 1.
        assert_eq!(got.value, 12585326385145454095);
        assert_eq!(got.shard, 1);
        assert_eq!(got.key, KeyValue::UInt(123));
        assert_eq!(got.sql, "SELECT * FROM items_local FINAL WHERE shop_id = 123 AND item_id = 4");
        assert_eq!(r.shard_of(&KeyValue::UInt(123)), Ok(1));
        // The URL parameter gives the same shard for the same value.
        let by_param = r.route("SELECT * FROM items FINAL WHERE item_id = 4", Some("123"), None).unwrap();
        assert_eq!(by_param.shard, 1);
    }

    #[test]
    fn why_not_routed() {
        let r = router();
        assert_eq!(r.route("SELECT * FROM items", None, None), Err(Unrouted::NoKey));
        assert_eq!(r.route("SELECT * FROM items WHERE shop_id IN (1, 2)", None, None), Err(Unrouted::NoKey));
        assert!(matches!(r.route("SELECT * FROM items", Some("abc"), None), Err(Unrouted::BadKey(_))));
        assert_eq!(r.route("SELECT * FROM other WHERE shop_id = 1", None, None), Err(Unrouted::NoTable));
        assert_eq!(r.route("SELECT 1", Some("1"), None), Err(Unrouted::NoTable));
    }

    #[test]
    fn config_errors() {
        let e = |key: &str, ty: ColumnType, t: BTreeMap<String, String>, w: Option<&str>, weights: Vec<u32>| {
            Router::new(key, ty, t, w.map(String::from), weights).unwrap_err()
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
        assert!(Router::new("shop_id", ColumnType::Int32, tables(), Some(String::new()), vec![1]).is_ok());
    }
}

//! Synthetic datasets, made inside ClickHouse with `INSERT ... SELECT ... FROM numbers(N)`, so
//! nothing is downloaded. Every statement is plain SQL that ClickHouse 18.16 and current
//! releases both accept.
//!
//! | name    | tables | shape |
//! |---------|--------|-------|
//! | `items` | `items` | Shopee-like: `ReplacingMergeTree(version) ORDER BY (shop_id, item_id)`, skewed shop sizes, 10% of keys with an older version so `FINAL` has work to do |
//! | `kv`    | `kv_int_g{G}`, `kv_fs_g{G}` | Altinity "In the Storm, Part 2": UInt64 ids from `cityHash64(number)`, FixedString(16) ids from `murmurHash3_128`, with values; one pair per index granularity G |
//! | `hits`  | `hits` | hits_v1-like: `ClientIP`, `ResolutionWidth` (skewed like real screens), `EventDate`, `URL`, `UserID`, ... |
//!
//! Loading is idempotent: a table that already holds the expected rows is left alone, and
//! `drop` rebuilds it.
//!
//! [`load_cluster`] loads `items` into a cluster instead: `items_local` on every node, a
//! Distributed table `items` sharded by `cityHash64(shop_id)`, rows written once through it (see
//! the `cluster` module and `docs/LOCAL_CLUSTER.md`).
//!
//! # Boundaries
//!
//! This crate owns the dataset definitions and their loading. It builds on `chstorm-proto` only;
//! it must not import the load engine, the outputs, the gateway or the CLI, and uses the local
//! harness (`chstorm-local`) only in its tests.

mod client;
mod cluster;
mod defs;
mod load;

pub use client::SqlClient;
pub use cluster::{
    load_cluster, ClusterLoadReport, ClusterNode, ClusterTarget, NodeRows, ITEMS_LOCAL, ITEMS_SHARDING_KEY,
};
pub use defs::{items_shop_expr as items_shop_sql, Dataset, DatasetName, TableDef};
pub use load::{dataset_vars, load, LoadOptions, LoadReport, META_TABLE};

/// Errors loading a dataset.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The caller asked for something that does not exist or makes no sense.
    #[error("{0}")]
    Invalid(String),
    /// The server refused a statement or could not be reached.
    #[error("{context}: {source}")]
    Server { context: String, source: chstorm_proto::ProtoError },
    /// Rows after loading differ from what was asked for.
    #[error("table {table} holds {got} rows after loading, expected {want}; rerun with --drop")]
    RowCount { table: String, got: u64, want: u64 },
}

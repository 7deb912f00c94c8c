//! Loading a dataset, idempotently, with progress and a row-count check.

use crate::client::SqlClient;
use crate::defs::{Dataset, DatasetName};
use crate::DataError;
use std::time::Instant;

/// Where loaded datasets record their parameters (`${items.rows}` in suites reads it).
pub const META_TABLE: &str = "chstorm_datasets";

/// How to load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Rows per table; default per dataset ([`DatasetName::default_rows`]).
    pub rows: Option<u64>,
    /// MergeTree index_granularity; default 8192 (ClickHouse's default).
    pub index_granularity: u32,
    /// Drop and rebuild the tables even when they are complete.
    pub drop: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { rows: None, index_granularity: 8192, drop: false }
    }
}

/// What loading did, per table.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub dataset: Dataset,
    /// (table, rows, whether it was (re)built now)
    pub tables: Vec<(String, u64, bool)>,
}

pub(crate) fn server<'a>(context: &'a str) -> impl FnOnce(chstorm_proto::ProtoError) -> DataError + 'a {
    move |source| DataError::Server { context: context.to_string(), source }
}

/// The dataset `opts` asks for, after checking rows and granularity.
pub(crate) fn dataset(name: DatasetName, opts: &LoadOptions) -> Result<Dataset, DataError> {
    let rows = opts.rows.unwrap_or_else(|| name.default_rows());
    if rows == 0 {
        return Err(DataError::Invalid("--rows must be at least 1".into()));
    }
    if opts.index_granularity == 0 {
        return Err(DataError::Invalid("--index-granularity must be at least 1".into()));
    }
    Ok(Dataset::new(name, rows, opts.index_granularity))
}

/// `CREATE TABLE IF NOT EXISTS` of [`META_TABLE`].
pub(crate) fn registry_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {META_TABLE} (dataset String, table String, rows UInt64, shops UInt64, \
index_granularity UInt32, loaded DateTime) ENGINE = ReplacingMergeTree(loaded) ORDER BY (dataset, table)"
    )
}

/// Loads `name` through `client`, calling `progress` with one line per step.
pub fn load(
    client: &mut SqlClient,
    name: DatasetName,
    opts: &LoadOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<LoadReport, DataError> {
    let ds = dataset(name, opts)?;
    let rows = ds.rows;
    client.query(&registry_ddl()).map_err(server("cannot create the dataset registry table"))?;
    let mut done = Vec::new();
    for t in &ds.tables {
        let exists = client
            .query_u64(&format!(
                "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = '{}'",
                t.name
            ))
            .map_err(server("cannot list tables"))?
            > 0;
        if exists && opts.drop {
            progress(&format!("{}: dropping (--drop)", t.name));
            client.query(&format!("DROP TABLE {}", t.name)).map_err(server("cannot drop table"))?;
        } else if exists {
            let have = client.query_u64(&t.count_sql).map_err(server("cannot count rows"))?;
            if have == t.expected_rows {
                progress(&format!("{}: already loaded with {have} rows, nothing to do", t.name));
                done.push((t.name.clone(), have, false));
                continue;
            }
            return Err(DataError::Invalid(format!(
                "table {} exists with {have} rows, not {}; rerun with --drop to rebuild it",
                t.name, t.expected_rows
            )));
        }
        progress(&format!("{}: creating", t.name));
        client.query(&t.create).map_err(server("cannot create table"))?;
        for (i, ins) in t.inserts.iter().enumerate() {
            let started = Instant::now();
            progress(&format!("{}: inserting, step {} of {} ...", t.name, i + 1, t.inserts.len()));
            client.query(ins).map_err(server("insert failed"))?;
            progress(&format!("{}: step {} done in {:.1} s", t.name, i + 1, started.elapsed().as_secs_f64()));
        }
        let have = client.query_u64(&t.count_sql).map_err(server("cannot count rows"))?;
        if have != t.expected_rows {
            return Err(DataError::RowCount { table: t.name.clone(), got: have, want: t.expected_rows });
        }
        client
            .query(&format!(
                "INSERT INTO {META_TABLE} VALUES ('{}', '{}', {}, {}, {}, now())",
                name.as_str(),
                t.name,
                rows,
                ds.shops,
                ds.index_granularity
            ))
            .map_err(server("cannot record the dataset"))?;
        progress(&format!("{}: verified {have} rows", t.name));
        done.push((t.name.clone(), have, true));
    }
    Ok(LoadReport { dataset: ds, tables: done })
}

/// Dataset parameters recorded by [`load`] on the server at `http_url` (`items.rows`,
/// `items.shops`, `kv.rows`, ...), as suites and compare read them for `${items.rows}`. Empty
/// when there are none or the server cannot say.
pub fn dataset_vars(http_url: &str, tls: &chstorm_proto::TlsOptions) -> std::collections::BTreeMap<String, String> {
    let mut vars = std::collections::BTreeMap::new();
    let Ok(mut c) = SqlClient::new(http_url, tls) else { return vars };
    c.timeout = std::time::Duration::from_secs(10);
    let sql = format!("SELECT dataset, max(rows), max(shops) FROM {META_TABLE} FINAL GROUP BY dataset");
    if let Ok(text) = c.query(&sql) {
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() == 3 {
                vars.insert(format!("{}.rows", f[0]), f[1].to_string());
                vars.insert(format!("{}.shops", f[0]), f[2].to_string());
            }
        }
    }
    vars
}

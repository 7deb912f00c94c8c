//! What a statement reaches outside the server's own tables: table functions, and the engines
//! and sources of the tables, databases and dictionaries it creates. `url()`, `remote()`, a
//! table `ENGINE = URL(...)` or a dictionary `SOURCE(HTTP(...))` run a query or read a file on
//! the server's own authority, out of reach of the settings the gateway fixes for a user: the
//! inner query of `url('http://replica/?query=...')` runs as the backend login with none of the
//! user's settings.
//!
//! The lists below name what stays inside the server; everything else counts as reaching
//! outside, so a table function or engine of a release the lists do not know is refused too.
//! Taken from ClickHouse 26.9's own `system.table_functions`, `system.table_engines` and
//! `system.database_engines` (chdb-core 26.9), and 18.16's (a subset).

use super::{tokens, SqlRuleError, Tok};
use crate::lexer::{Token, TokenKind};

/// Table functions that read only this server's data or the query's own text: numbers, local
/// tables and dictionaries, the INSERT's own data, generated rows, a view's subquery.
pub const LOCAL_TABLE_FUNCTIONS: &[&str] = &[
    "numbers",
    "numbers_mt",
    "zeros",
    "zeros_mt",
    "primes",
    "generateRandom",
    "generateSeries",
    "generate_series",
    "values",
    "null",
    "view",
    "viewIfPermitted",
    "viewExplain",
    "merge",
    "format",
    "input",
    "loop",
    "dictionary",
    "fuzzJSON",
    "fuzzQuery",
    "mergeTreeIndex",
    "mergeTreeProjection",
    "mergeTreeAnalyzeIndexes",
    "mergeTreeAnalyzeIndexesUUID",
    "mergeTreeCodecBlockCounts",
    "mergeTreeTextIndex",
    "timeSeriesData",
    "timeSeriesMetricFamilies",
    "timeSeriesMetrics",
    "timeSeriesSamples",
    "timeSeriesSelector",
    "timeSeriesTags",
];

/// Table engines whose data lives in this server (or, for `Distributed`, in the shards of its
/// own configured clusters, which receive the query's settings). Every `*MergeTree` too.
const LOCAL_TABLE_ENGINES: &[&str] = &[
    "Memory",
    "Log",
    "TinyLog",
    "StripeLog",
    "Null",
    "Set",
    "Join",
    "Buffer",
    "Distributed",
    "Merge",
    "Dictionary",
    "GenerateRandom",
    "EmbeddedRocksDB",
    "KeeperMap",
    "View",
    "MaterializedView",
    "LiveView",
    "WindowView",
    "Alias",
    "Loop",
    "TimeSeries",
    "FuzzJSON",
    "FuzzQuery",
];

/// Database engines whose tables live in this server.
const LOCAL_DATABASE_ENGINES: &[&str] = &["Atomic", "Ordinary", "Memory", "Lazy", "Replicated", "Dictionary"];

/// Where a statement names something that may reach outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// `FROM f(...)`, `INSERT INTO FUNCTION f(...)`, ... ([`super::table_functions`]).
    TableFunction,
    /// `ENGINE = X` of a `CREATE`/`ATTACH`/`REPLACE` of a table.
    TableEngine,
    /// `ENGINE = X` of a `CREATE`/`ATTACH` of a database.
    DatabaseEngine,
    /// `SOURCE(X(...))` of a dictionary.
    DictionarySource,
}

impl CallKind {
    /// How a refusal names it.
    pub fn describe(self) -> &'static str {
        match self {
            CallKind::TableFunction => "table function",
            CallKind::TableEngine => "table engine",
            CallKind::DatabaseEngine => "database engine",
            CallKind::DictionarySource => "dictionary source",
        }
    }
}

/// One name a statement calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub kind: CallKind,
    pub name: String,
}

impl Call {
    /// True when what it names stays inside the server (compared as ClickHouse compares table
    /// functions and engines: ignoring case).
    pub fn stays_local(&self) -> bool {
        let list = match self.kind {
            CallKind::TableFunction => LOCAL_TABLE_FUNCTIONS,
            CallKind::TableEngine => {
                if self.name.to_ascii_lowercase().ends_with("mergetree") {
                    return true;
                }
                LOCAL_TABLE_ENGINES
            }
            CallKind::DatabaseEngine => LOCAL_DATABASE_ENGINES,
            CallKind::DictionarySource => &["NULL"],
        };
        list.iter().any(|l| l.eq_ignore_ascii_case(&self.name))
    }
}

/// Every table function, engine and dictionary source of a statement's tokens, in order.
/// Errors when the tokens do not lex or brackets do not balance.
pub fn calls_of(toks: &[Token<'_>]) -> Result<Vec<Call>, SqlRuleError> {
    let mut out: Vec<Call> =
        super::table_functions_of(toks)?.into_iter().map(|name| Call { kind: CallKind::TableFunction, name }).collect();
    let toks = tokens(toks)?;
    let mut start = 0;
    for i in 0..=toks.len() {
        if i == toks.len() || (toks[i].t.is_punct(";") && toks[i].depth == 0) {
            out.extend(creates(&toks[start..i]));
            start = i + 1;
        }
    }
    Ok(out)
}

/// The engines and sources one `CREATE`/`ATTACH`/`REPLACE` statement names at its top level.
fn creates(toks: &[Tok<'_>]) -> Vec<Call> {
    let Some(first) = toks.first() else { return Vec::new() };
    if !["CREATE", "ATTACH", "REPLACE"].iter().any(|k| first.t.is_kw(k)) {
        return Vec::new();
    }
    let database = toks.iter().take(4).any(|t| t.t.is_kw("DATABASE"));
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate().filter(|(_, t)| t.depth == 0 && t.t.kind == TokenKind::Word) {
        if i > 0 && toks[i - 1].t.is_punct(".") {
            continue;
        }
        if t.t.is_kw("ENGINE") {
            let at = if toks.get(i + 1).is_some_and(|e| e.t.is_punct("=")) { i + 2 } else { i + 1 };
            if let Some(name) = toks.get(at).and_then(|n| n.t.ident()) {
                let kind = if database { CallKind::DatabaseEngine } else { CallKind::TableEngine };
                out.push(Call { kind, name });
            }
        } else if t.t.is_kw("SOURCE") && toks.get(i + 1).is_some_and(|p| p.t.is_punct("(")) {
            if let Some(name) = toks.get(i + 2).and_then(|n| n.t.ident()) {
                out.push(Call { kind: CallKind::DictionarySource, name });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::Grammar;
    use crate::statement::sql_tokens;

    fn calls(sql: &str) -> Vec<(CallKind, String, bool)> {
        calls_of(&sql_tokens(sql, Grammar::Current).0)
            .unwrap()
            .into_iter()
            .map(|c| {
                let local = c.stays_local();
                (c.kind, c.name, local)
            })
            .collect()
    }

    #[test]
    fn what_reaches_outside() {
        use CallKind::*;
        let s = |k, n: &str, l| (k, n.to_string(), l);
        assert_eq!(calls("SELECT * FROM numbers(3)"), [s(TableFunction, "numbers", true)]);
        assert_eq!(calls("SELECT * FROM url('http://x/?query=1', TSV)"), [s(TableFunction, "url", false)]);
        assert_eq!(calls("SELECT * FROM cluster('c', system.one)"), [s(TableFunction, "cluster", false)]);
        assert_eq!(calls("SELECT * FROM someNewFunction(1)"), [s(TableFunction, "someNewFunction", false)]);
        assert_eq!(
            calls("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x"),
            [s(TableEngine, "MergeTree", true)]
        );
        assert_eq!(
            calls("CREATE TABLE t ENGINE = ReplicatedReplacingMergeTree('/p', '{r}') ORDER BY x AS SELECT 1"),
            [s(TableEngine, "ReplicatedReplacingMergeTree", true)]
        );
        assert_eq!(calls("CREATE TABLE t ENGINE = URL('http://x', CSV) AS SELECT 1"), [s(TableEngine, "URL", false)]);
        assert_eq!(
            calls("CREATE TABLE t (x UInt8) ENGINE MySQL('h', 'd', 't', 'u', 'p')"),
            [s(TableEngine, "MySQL", false)]
        );
        assert_eq!(calls("ATTACH TABLE t (x UInt8) ENGINE = File(CSV)"), [s(TableEngine, "File", false)]);
        assert_eq!(calls("CREATE DATABASE d ENGINE = MySQL('h', 'd', 'u', 'p')"), [s(DatabaseEngine, "MySQL", false)]);
        assert_eq!(calls("CREATE DATABASE d ENGINE = Atomic"), [s(DatabaseEngine, "Atomic", true)]);
        assert_eq!(
            calls(
                "CREATE DICTIONARY d (k UInt64, v String) PRIMARY KEY k SOURCE(HTTP(url 'http://x' format 'TSV')) \
                 LAYOUT(FLAT()) LIFETIME(0)"
            ),
            [s(DictionarySource, "HTTP", false)]
        );
        assert_eq!(
            calls("CREATE TABLE t (x UInt8) ENGINE = Memory AS SELECT * FROM remote('h', system.one)"),
            [s(TableFunction, "remote", false), s(TableEngine, "Memory", true)]
        );
        // Not engines: a column named engine, a value.
        assert_eq!(calls("SELECT engine FROM system.tables WHERE engine = 'URL'"), []);
        assert_eq!(calls("CREATE TABLE t (engine String) ENGINE = Memory"), [s(TableEngine, "Memory", true)]);
    }

    /// Every name of the local lists is a table function or engine 26.9 knows (from its
    /// `system.table_functions` and `system.table_engines`), or one of older releases'.
    #[test]
    fn the_lists_name_real_things() {
        const FUNCTIONS_26_9: &str = "SQLStandardValues arrowstream azureBlobStorage azureBlobStorageCluster \
            bigquery cluster clusterAllReplicas cosn deltaLake deltaLakeAzure deltaLakeAzureCluster deltaLakeCluster \
            deltaLakeLocal deltaLakeS3 deltaLakeS3Cluster dictionary eval executable file fileCluster filesystem \
            format fuzzJSON fuzzQuery gcs generateRandom generateSeries generate_series hdfs hdfsCluster hudi \
            hudiCluster iceberg icebergAzure icebergAzureCluster icebergCluster icebergHDFS icebergHDFSCluster \
            icebergLocal icebergLocalCluster icebergS3 icebergS3Cluster input jdbc loop merge \
            mergeTreeAnalyzeIndexes mergeTreeAnalyzeIndexesUUID mergeTreeCodecBlockCounts mergeTreeIndex \
            mergeTreeProjection mergeTreeTextIndex mongodb mysql null numbers numbers_mt odbc oss paimon \
            paimonAzure paimonAzureCluster paimonCluster paimonHDFS paimonHDFSCluster paimonLocal paimonS3 \
            paimonS3Cluster postgresql primes prometheusQuery prometheusQueryRange python redis remote remoteSecure \
            s3 s3Cluster sqlite timeSeriesData timeSeriesMetricFamilies timeSeriesMetrics timeSeriesSamples \
            timeSeriesSelector timeSeriesTags url urlCluster values view viewExplain viewIfPermitted ytsaurus zeros \
            zeros_mt";
        const ENGINES_26_9: &str = "AggregatingMergeTree Alias ArrowStream AzureBlobStorage AzureQueue BigQuery \
            Buffer COSN CoalescingMergeTree CollapsingMergeTree DeltaLake DeltaLakeAzure DeltaLakeLocal DeltaLakeS3 \
            Dictionary Distributed EmbeddedRocksDB Executable ExecutablePool File FileLog FuzzJSON FuzzQuery GCS \
            GenerateRandom GraphiteMergeTree HDFS Hudi Iceberg IcebergAzure IcebergHDFS IcebergLocal IcebergS3 JDBC \
            Join Kafka KeeperMap Log Loop MaterializedPostgreSQL MaterializedView Memory Merge MergeTree MongoDB \
            MySQL Null ODBC OSS Paimon PaimonAzure PaimonHDFS PaimonLocal PaimonS3 PostgreSQL QueryRunner Redis \
            Remote RemoteSecure ReplacingMergeTree ReplicatedAggregatingMergeTree ReplicatedCoalescingMergeTree \
            ReplicatedCollapsingMergeTree ReplicatedGraphiteMergeTree ReplicatedMergeTree \
            ReplicatedReplacingMergeTree ReplicatedSummingMergeTree ReplicatedVersionedCollapsingMergeTree S3 \
            S3Queue SQLite Set StripeLog SummingMergeTree TimeSeries TinyLog URL VersionedCollapsingMergeTree View \
            YTsaurus";
        const DATABASES_26_9: &str = "Atomic Backup DataLakeCatalog Dictionary Filesystem HDFS \
            MaterializedPostgreSQL Memory MySQL Ordinary PostgreSQL Remote RemoteSecure Replicated S3 SQLite URL";
        let older = ["LiveView", "WindowView", "Lazy"];
        let has = |list: &str, n: &str| list.split_whitespace().any(|x| x == n);
        for f in LOCAL_TABLE_FUNCTIONS {
            assert!(has(FUNCTIONS_26_9, f), "{f}");
        }
        for e in LOCAL_TABLE_ENGINES {
            assert!(has(ENGINES_26_9, e) || older.contains(e), "{e}");
        }
        for e in LOCAL_DATABASE_ENGINES {
            assert!(has(DATABASES_26_9, e) || older.contains(e), "{e}");
        }
        // The ones that reach a server, a file or a program are not in them.
        for f in [
            "url",
            "remote",
            "remoteSecure",
            "cluster",
            "clusterAllReplicas",
            "file",
            "mysql",
            "jdbc",
            "odbc",
            "hdfs",
            "s3",
            "postgresql",
            "executable",
            "filesystem",
            "python",
            "eval",
            "urlCluster",
        ] {
            assert!(!Call { kind: CallKind::TableFunction, name: f.into() }.stays_local(), "{f}");
        }
        for e in ["URL", "File", "MySQL", "Remote", "S3", "Kafka", "Executable", "JDBC", "FileLog", "QueryRunner"] {
            assert!(!Call { kind: CallKind::TableEngine, name: e.into() }.stays_local(), "{e}");
        }
        for e in ["MySQL", "Remote", "S3", "Filesystem", "URL", "Backup"] {
            assert!(!Call { kind: CallKind::DatabaseEngine, name: e.into() }.stays_local(), "{e}");
        }
    }
}

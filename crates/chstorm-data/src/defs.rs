//! The dataset definitions: DDL and generating INSERTs.

use std::fmt::Write;

/// The datasets chstorm knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetName {
    Items,
    Kv,
    Hits,
}

impl DatasetName {
    pub const ALL: [DatasetName; 3] = [DatasetName::Items, DatasetName::Kv, DatasetName::Hits];

    pub fn parse(s: &str) -> Option<DatasetName> {
        match s {
            "items" => Some(DatasetName::Items),
            "kv" => Some(DatasetName::Kv),
            "hits" => Some(DatasetName::Hits),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetName::Items => "items",
            DatasetName::Kv => "kv",
            DatasetName::Hits => "hits",
        }
    }
    /// Default number of rows (per table). Altinity's Part 2 used 20M and 12M; these defaults
    /// load in seconds on a laptop and can be raised with `--rows`.
    pub fn default_rows(self) -> u64 {
        match self {
            DatasetName::Items => 1_000_000,
            DatasetName::Kv => 2_000_000,
            DatasetName::Hits => 1_000_000,
        }
    }
}

/// One table of a dataset.
#[derive(Debug, Clone)]
pub struct TableDef {
    pub name: String,
    pub create: String,
    /// INSERT ... SELECT statements, in order.
    pub inserts: Vec<String>,
    /// Rows `SELECT count() FROM name` must show after loading (for `items`: after FINAL).
    pub expected_rows: u64,
    /// The statement that counts rows for verification.
    pub count_sql: String,
}

/// A dataset instance: its name, its parameters and its tables.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: DatasetName,
    pub rows: u64,
    pub index_granularity: u32,
    /// `items` only: the number of shops (rows / 100, at least 1).
    pub shops: u64,
    pub tables: Vec<TableDef>,
}

/// The SQL expression giving the shop of an `items` item id: skewed so that shop 1 holds a few
/// percent of all items and most shops hold a handful. Suites use it to look up existing keys:
/// `WHERE shop_id = <items_shop_of({i})> AND item_id = {i:uniform(1,N)}`.
pub fn items_shop_expr(item_id_sql: &str, shops: u64) -> String {
    format!("1 + intDiv(pow(cityHash64({item_id_sql}) % 1000, 3) * {shops}, 1000000000)")
}

impl Dataset {
    pub fn new(name: DatasetName, rows: u64, index_granularity: u32) -> Dataset {
        let shops = (rows / 100).max(1);
        let tables = match name {
            DatasetName::Items => vec![items(rows, shops, index_granularity)],
            DatasetName::Kv => kv(rows, index_granularity),
            DatasetName::Hits => vec![hits(rows, index_granularity)],
        };
        Dataset { name, rows, index_granularity, shops, tables }
    }
}

/// `CREATE TABLE IF NOT EXISTS {table}` with the `items` schema (also used for `items_local` on a cluster).
pub(crate) fn items_create(table: &str, g: u32) -> String {
    items_create_as(table, "", "ReplacingMergeTree(version)", g)
}

/// The `items` schema's `items_local` on every node of a replicated cluster, by one `ON CLUSTER`
/// statement: `ReplicatedReplacingMergeTree` as the seed's cluster has it, one replica per node
/// (the `{replica}` macro) of its shard's table in ZooKeeper (`{shard}`), at
/// `/clickhouse/tables/{shard}/DB.TABLE`.
pub(crate) fn items_create_replicated(table: &str, cluster: &str, db: &str, g: u32) -> String {
    let engine =
        format!("ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{db}.{table}', '{{replica}}', version)");
    items_create_as(&format!("`{db}`.{table}"), &format!(" ON CLUSTER {cluster}"), &engine, g)
}

/// `CREATE TABLE IF NOT EXISTS {table}{on_cluster}` with the `items` schema and `engine`.
fn items_create_as(table: &str, on_cluster: &str, engine: &str, g: u32) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table}{on_cluster} (\
shop_id UInt64, item_id UInt64, version UInt32, title String, category UInt16, brand String, \
price Decimal(18, 2), stock Int32, rating Float32, sold UInt32, is_active UInt8, \
status Enum8('draft' = 0, 'live' = 1, 'banned' = 2), created DateTime, updated Date, \
tags Array(String), ship_from FixedString(2), weight_g UInt32\
) ENGINE = {engine} ORDER BY (shop_id, item_id) SETTINGS index_granularity = {g}"
    )
}

fn items(rows: u64, shops: u64, g: u32) -> TableDef {
    let create = items_create("items", g);
    let select = |version: u32, filter: &str| {
        let mut s = String::new();
        let _ = write!(
            s,
            "INSERT INTO items SELECT {shop} AS shop_id, number + 1 AS item_id, {version} AS version, \
concat('item-', toString(number), '-v{version}'), toUInt16(cityHash64(number, 1) % 500), \
concat('brand-', toString(cityHash64(number, 2) % 2000)), toDecimal64((cityHash64(number, 3) % 100000) / 100, 2), \
toInt32(cityHash64(number, 4) % 1000) - {version}, (cityHash64(number, 5) % 50) / 10, toUInt32(cityHash64(number, 6) % 100000), \
toUInt8(cityHash64(number, 7) % 10 != 0), arrayElement(['draft', 'live', 'banned'], 1 + cityHash64(number, 8) % 3), \
toDateTime(1500000000 + cityHash64(number, 9) % 100000000), toDate(17000 + cityHash64(number, 10) % 3000), \
[concat('t', toString(cityHash64(number, 11) % 100)), concat('t', toString(cityHash64(number, 12) % 100))], \
toFixedString(arrayElement(['SG', 'MY', 'TH', 'ID', 'VN', 'PH', 'TW', 'BR'], 1 + cityHash64(number, 13) % 8), 2), \
toUInt32(cityHash64(number, 14) % 5000) FROM numbers({rows}){filter}",
            shop = items_shop_expr("number + 1", shops),
        );
        s
    };
    TableDef {
        name: "items".into(),
        create,
        // The older versions first, then the current ones: 10% of keys have two rows until a
        // merge (or FINAL) keeps the highest version.
        inserts: vec![select(1, " WHERE number % 10 = 0"), select(2, "")],
        expected_rows: rows,
        count_sql: "SELECT count() FROM items FINAL".into(),
    }
}

fn kv(rows: u64, g: u32) -> Vec<TableDef> {
    let int = format!("kv_int_g{g}");
    let fs = format!("kv_fs_g{g}");
    vec![
        TableDef {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {int} (id UInt64, value String, n UInt64) ENGINE = MergeTree ORDER BY id \
SETTINGS index_granularity = {g}"
            ),
            inserts: vec![format!(
                "INSERT INTO {int} SELECT cityHash64(number), concat('value-', toString(number)), number FROM numbers({rows})"
            )],
            expected_rows: rows,
            count_sql: format!("SELECT count() FROM {int}"),
            name: int,
        },
        TableDef {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {fs} (id FixedString(16), value String, n UInt64) ENGINE = MergeTree ORDER BY id \
SETTINGS index_granularity = {g}"
            ),
            inserts: vec![format!(
                "INSERT INTO {fs} SELECT murmurHash3_128(toString(number)), concat('value-', toString(number)), number FROM numbers({rows})"
            )],
            expected_rows: rows,
            count_sql: format!("SELECT count() FROM {fs}"),
            name: fs,
        },
    ]
}

fn hits(rows: u64, g: u32) -> TableDef {
    // Screen widths skewed like real traffic: a few common widths, then a long tail.
    let width = "multiIf(u < 250, 1920, u < 420, 1366, u < 520, 1536, u < 600, 1440, u < 660, 1280, u < 740, 360, \
u < 800, 414, u < 850, 390, u < 880, 1600, u < 900, 2560, 320 + (cityHash64(number, 8) % 2240))";
    TableDef {
        name: "hits".into(),
        create: format!(
            "CREATE TABLE IF NOT EXISTS hits (WatchID UInt64, CounterID UInt32, EventDate Date, EventTime DateTime, \
UserID UInt64, ClientIP UInt32, ResolutionWidth UInt16, ResolutionHeight UInt16, URL String, Referer String, \
RegionID UInt32, OS UInt8, UserAgent UInt8, IsMobile UInt8) ENGINE = MergeTree PARTITION BY toYYYYMM(EventDate) \
ORDER BY (CounterID, EventDate, UserID) SETTINGS index_granularity = {g}"
        ),
        inserts: vec![format!(
            "INSERT INTO hits SELECT cityHash64(number), toUInt32(cityHash64(number, 1) % 1000), \
toDate(17500 + (number % 60)), toDateTime(1512000000 + number % 5184000), cityHash64(number, 2) % 100000, \
toUInt32(cityHash64(number, 3)), toUInt16({width}), toUInt16(600 + cityHash64(number, 4) % 900), \
concat('https://example.com/page/', toString(cityHash64(number, 5) % 10000)), \
concat('https://ref.example.org/', toString(cityHash64(number, 6) % 1000)), toUInt32(cityHash64(number, 7) % 300), \
toUInt8(cityHash64(number, 9) % 20), toUInt8(cityHash64(number, 10) % 30), toUInt8(u >= 660 AND u < 850) \
FROM (SELECT number, cityHash64(number, 11) % 1000 AS u FROM numbers({rows}))"
        )],
        expected_rows: rows,
        count_sql: "SELECT count() FROM hits".into(),
    }
}

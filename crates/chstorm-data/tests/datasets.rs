//! Datasets against a real server: row counts, idempotency, FINAL, skew.

use chstorm_data::{load, DatasetName, LoadOptions, SqlClient};
use chstorm_proto::TlsOptions;

fn client() -> SqlClient {
    SqlClient::new(chstorm_local::shared_server().http_url(), &TlsOptions::default()).unwrap()
}

fn q(c: &mut SqlClient, sql: &str) -> u64 {
    c.query_u64(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[test]
fn items_counts_idempotency_final_and_skew() {
    let mut c = client();
    let opts = LoadOptions { rows: Some(50_000), index_granularity: 256, drop: true };
    let mut steps = Vec::new();
    let r = load(&mut c, DatasetName::Items, &opts, &mut |s| steps.push(s.to_string())).unwrap();
    assert_eq!(r.tables, vec![("items".to_string(), 50_000, true)]);
    assert!(steps.iter().any(|s| s.contains("verified 50000 rows")), "{steps:?}");
    // Idempotent: a second load adds nothing.
    let again = load(&mut c, DatasetName::Items, &LoadOptions { drop: false, ..opts.clone() }, &mut |_| {}).unwrap();
    assert_eq!(again.tables, vec![("items".to_string(), 50_000, false)]);
    assert_eq!(q(&mut c, "SELECT count() FROM items FINAL"), 50_000);
    // 10% of the keys were written twice; FINAL keeps only the newest version.
    assert_eq!(q(&mut c, "SELECT count() FROM items FINAL WHERE version = 1"), 0);
    assert_eq!(q(&mut c, "SELECT count() FROM items FINAL WHERE version = 2"), 50_000);
    let raw = q(&mut c, "SELECT count() FROM items");
    assert!((50_000..=55_000).contains(&raw), "{raw}");
    // Skew: the biggest shop holds far more items than the median shop.
    let biggest = q(&mut c, "SELECT max(c) FROM (SELECT count() AS c FROM items FINAL GROUP BY shop_id)");
    let median = q(&mut c, "SELECT toUInt64(median(c)) FROM (SELECT count() AS c FROM items FINAL GROUP BY shop_id)");
    assert!(biggest >= 20 * median.max(1), "biggest shop {biggest}, median {median}");
    // The documented shop expression finds every item's shop.
    let expr = chstorm_data::Dataset::new(DatasetName::Items, 50_000, 256).shops;
    let shop_of_7 = chstorm_data::items_shop_sql("7", expr);
    assert_eq!(q(&mut c, &format!("SELECT count() FROM items FINAL WHERE item_id = 7 AND shop_id = {shop_of_7}")), 1);
}

#[test]
fn kv_and_hits_load_and_verify() {
    let mut c = client();
    let opts = LoadOptions { rows: Some(20_000), index_granularity: 64, drop: true };
    let r = load(&mut c, DatasetName::Kv, &opts, &mut |_| {}).unwrap();
    assert_eq!(r.tables.len(), 2);
    assert_eq!(q(&mut c, "SELECT count() FROM kv_int_g64 WHERE id = cityHash64(123)"), 1);
    assert_eq!(q(&mut c, "SELECT count() FROM kv_fs_g64 WHERE id = murmurHash3_128(toString(123))"), 1);
    assert_eq!(q(&mut c, "SELECT uniqExact(id) FROM kv_int_g64"), 20_000);
    let r = load(
        &mut c,
        DatasetName::Hits,
        &LoadOptions { rows: Some(30_000), index_granularity: 8192, drop: true },
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.tables[0].1, 30_000);
    let top = c
        .query("SELECT count(ClientIP) AS total, ResolutionWidth FROM hits GROUP BY ResolutionWidth ORDER BY total DESC LIMIT 100")
        .unwrap();
    let first: Vec<&str> = top.lines().next().unwrap().split('\t').collect();
    assert_eq!(first[1], "1920", "the most common width");
    assert!(top.lines().count() == 100, "a long tail of widths");
}

#[test]
fn bad_requests_are_clear() {
    let mut c = client();
    let e = load(&mut c, DatasetName::Items, &LoadOptions { rows: Some(0), ..Default::default() }, &mut |_| {})
        .unwrap_err();
    assert!(e.to_string().contains("--rows"));
    let Err(e) = SqlClient::new("clickhouse://127.0.0.1:9000", &TlsOptions::default()) else {
        panic!("native URL accepted")
    };
    assert!(e.to_string().contains("HTTP"), "{e}");
}

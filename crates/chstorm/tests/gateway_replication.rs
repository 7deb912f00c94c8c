//! Replication through the gateway, on a replicated 2x2 cluster (a ZooKeeper,
//! `ReplicatedReplacingMergeTree` items_local, `internal_replication` true): the second replica
//! of each shard stops fetching (`SYSTEM STOP FETCHES`), new versions of rows are inserted
//! through the Distributed table, and routed point lookups through the gateway must return the
//! new versions, the same answers as the Distributed table given the same limit
//! (`max_replica_delay_for_distributed_queries`), while a gateway that does not track delays
//! returns old ones; then both replicas of a shard lag (the least stale answers, and says so;
//! with falling back off the read is refused, as the Distributed table refuses it); then the
//! replicas catch up and are used again.

use chstorm_testenv::{curl, post, start_cluster, Env};
use std::time::{Duration, Instant};

/// `health.max_replica_delay` of the tracking gateway, and the Distributed table's limit.
const MAX_DELAY_S: u64 = 2;

/// A gateway probing every 200 ms with `max_replica_delay: {max_delay}` and a thread budget.
fn gateway(env: &Env, max_delay: &str) -> (chstorm_gateway::Gateway, String) {
    let path = env.gateway_config(|t| {
        t.replace("  interval: 500ms\n", "  interval: 200ms\n")
            .replace("  rise: 2\n", &format!("  rise: 2\n  max_replica_delay: {max_delay}\n"))
            .replace("    routing:\n", "    threads:\n      total: 4\n    routing:\n")
    });
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(path)).unwrap();
    let url = format!("http://{}", gw.addr);
    (gw, url)
}

/// The value of one series of the gateway's metrics (`name{labels}`), if it is there.
fn metric(gw: &str, series: &str) -> Option<f64> {
    let m = curl(&[&format!("{gw}/metrics")]).2;
    m.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

fn replica_series(name: &str, replica: &str) -> String {
    format!("{name}{{cluster=\"storm\",replica=\"{replica}\"}}")
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what} did not happen within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The routed lookup of one key.
fn lookup(shop: u64, item: u64) -> String {
    format!("SELECT max(version) FROM items FINAL WHERE shop_id = {shop} AND item_id = {item}")
}

/// Through the gateway with curl: (status, the replica that answered, X-Chstorm-Stale, body).
fn gw_lookup(gw: &str, sql: &str) -> (u16, String, Option<String>, String) {
    let (s, h, b) = curl(&["--data-binary", sql, gw]);
    let header = |name: &str| h.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
    (s, header("x-chstorm-replica:").unwrap_or_default(), header("x-chstorm-stale:"), b.trim().to_string())
}

#[test]
fn routed_reads_skip_lagging_replicas_and_use_them_again_once_caught_up() {
    let env = start_cluster();
    let (n11, n12, n21, n22) = (env.node_url(1, 1), env.node_url(1, 2), env.node_url(2, 1), env.node_url(2, 2));
    let (_gw, gw) = gateway(&env, &format!("{MAX_DELAY_S}s"));
    let (_blind, blind) = gateway(&env, "0s");
    wait_for("the first delays read", Duration::from_secs(5), || {
        metric(&gw, &replica_series("chstorm_gateway_replica_routed_delay_seconds", "2.2")) == Some(0.0)
    });

    // 60 keys, on both shards, and their versions now.
    let keys: Vec<(u64, u64, u64)> = post(
        &n11,
        "SELECT shop_id, item_id, version FROM items FINAL WHERE item_id % 97 = 0 ORDER BY item_id LIMIT 60",
    )
    .1
    .lines()
    .map(|l| {
        let v: Vec<u64> = l.split('\t').map(|x| x.parse().unwrap()).collect();
        (v[0], v[1], v[2])
    })
    .collect();
    assert_eq!(keys.len(), 60);
    let max_item = keys.last().unwrap().1;

    // The second replica of each shard stops fetching; new versions go through the Distributed
    // table to the first replica of each shard (load_balancing=in_order).
    for n in [&n12, &n22] {
        assert_eq!(post(n, "SYSTEM STOP FETCHES items_local").0, 200);
    }
    let insert = format!(
        "INSERT INTO items (shop_id, item_id, version) SELECT shop_id, item_id, version + 100 FROM items FINAL \
         WHERE item_id % 97 = 0 AND item_id <= {max_item}"
    );
    let (s, b) = post(&format!("{n11}/?load_balancing=in_order&insert_distributed_sync=1"), &insert);
    assert_eq!(s, 200, "{b}");
    let inserted = Instant::now();
    let new_versions = "SELECT count() FROM items_local FINAL WHERE item_id % 97 = 0 AND version >= 100";
    let held = |n: &str| post(n, new_versions).1.trim().parse::<u64>().unwrap();
    assert_eq!((held(&n12), held(&n22)), (0, 0), "the second replicas lag");
    assert_eq!(held(&n11) + held(&n21), 60, "the first replicas have every new version");

    // Once the gateway reads them at the limit or past it, no routed read goes there.
    wait_for("both second replicas seen lagging", Duration::from_secs(10), || {
        ["1.2", "2.2"].iter().all(|r| {
            metric(&gw, &replica_series("chstorm_gateway_replica_routed_delay_seconds", r))
                .is_some_and(|d| d >= MAX_DELAY_S as f64)
        })
    });
    eprintln!("the lagging replicas were steered away from {:?} after the insert", inserted.elapsed());
    std::thread::sleep(Duration::from_millis(500));
    let grants_before = metric(&gw, &replica_series("chstorm_gateway_thread_grant_count", "1.2")).unwrap_or(0.0);
    let mut through = chstorm_data::SqlClient::new(&gw, &Default::default()).unwrap();
    let mut blind_client = chstorm_data::SqlClient::new(&blind, &Default::default()).unwrap();
    let mut distributed = chstorm_data::SqlClient::new(
        &format!("{n12}/?max_replica_delay_for_distributed_queries={MAX_DELAY_S}"),
        &Default::default(),
    )
    .unwrap();
    let mut distributed_default = chstorm_data::SqlClient::new(&n12, &Default::default()).unwrap();
    let (mut blind_stale, mut default_stale) = (0, 0);
    for _ in 0..3 {
        for &(shop, item, version) in &keys {
            let q = lookup(shop, item);
            let want = (version + 100).to_string();
            assert_eq!(through.query(&q).unwrap().trim(), want, "shop {shop} item {item} through the gateway");
            assert_eq!(distributed.query(&q).unwrap().trim(), want, "the Distributed table with the same limit");
            blind_stale += (blind_client.query(&q).unwrap().trim() != want) as u32;
            default_stale += (distributed_default.query(&q).unwrap().trim() != want) as u32;
        }
    }
    eprintln!("of 180 lookups: {blind_stale} stale through a gateway that does not track delays, {default_stale} through Distributed with its default limit (300 s)");
    assert!(blind_stale > 0, "without tracking some reads go to the lagging replicas: the check has teeth");
    for (shop, item, _) in keys.iter().take(20) {
        let (s, replica, stale, _) = gw_lookup(&gw, &lookup(*shop, *item));
        assert_eq!((s, stale), (200, None));
        assert!(replica == "1.1" || replica == "2.1", "answered by {replica}");
    }
    // Native lookups take the same route.
    let native = _gw.native_addr.unwrap().port().to_string();
    for &(shop, item, version) in keys.iter().take(10) {
        let out = std::process::Command::new("clickhouse-client")
            .args(["--port", &native, "--query", &lookup(shop, item)])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), (version + 100).to_string(), "native");
    }
    let steered = |r: &str| metric(&gw, &replica_series("chstorm_gateway_reads_steered_total", r)).unwrap_or(0.0);
    assert!(steered("1.2") + steered("2.2") >= 180.0, "{} + {}", steered("1.2"), steered("2.2"));
    assert_eq!(steered("1.1") + steered("2.1"), 0.0);
    assert_eq!(
        metric(&gw, &replica_series("chstorm_gateway_thread_grant_count", "1.2")).unwrap_or(0.0),
        grants_before,
        "the thread budget grants nothing on the lagging replica: it is never picked"
    );

    // Both replicas of shard 1 lag: 1.1 stops fetching too and misses a part written on 1.2.
    assert_eq!(post(&n11, "SYSTEM STOP FETCHES items_local").0, 200);
    let (s, b) = post(&n12, "INSERT INTO items_local (shop_id, item_id, version) VALUES (999999999, 1, 1)");
    assert_eq!(s, 200, "{b}");
    wait_for("1.1 seen lagging", Duration::from_secs(10), || {
        metric(&gw, &replica_series("chstorm_gateway_replica_routed_delay_seconds", "1.1"))
            .is_some_and(|d| d >= MAX_DELAY_S as f64)
    });
    let d11 = metric(&gw, &replica_series("chstorm_gateway_replica_routed_delay_seconds", "1.1")).unwrap();
    let d12 = metric(&gw, &replica_series("chstorm_gateway_replica_routed_delay_seconds", "1.2")).unwrap();
    assert!(d11 < d12, "1.1 is the least stale: {d11} s against {d12} s");
    let on_shard_1: Vec<(u64, u64, u64)> = keys
        .iter()
        .copied()
        .filter(|(shop, item, _)| {
            post(&n11, &format!("SELECT count() FROM items_local WHERE shop_id = {shop} AND item_id = {item}")).1.trim()
                != "0"
        })
        .collect();
    assert!(!on_shard_1.is_empty());
    let (shop, item, version) = on_shard_1[0];
    let (s, replica, stale, body) = gw_lookup(&gw, &lookup(shop, item));
    assert_eq!((s, replica.as_str(), body), (200, "1.1", (version + 100).to_string()));
    let stale: u64 = stale.expect("X-Chstorm-Stale on a stale answer").parse().unwrap();
    assert!(stale >= MAX_DELAY_S, "the least stale replica's delay: {stale}");
    let stale_reads =
        metric(&gw, "chstorm_gateway_stale_reads_total{cluster=\"storm\",reason=\"stale\"}").unwrap_or(0.0);
    assert!(stale_reads >= 1.0);
    // Falling back off: refused, as the Distributed table refuses (Code 369 both).
    let strict = format!("{gw}/?fallback_to_stale_replicas_for_distributed_queries=0");
    let (s, _, _, body) = gw_lookup(&strict, &lookup(shop, item));
    assert_eq!(s, 503, "{body}");
    let refused = post(
        &format!(
            "{n21}/?max_replica_delay_for_distributed_queries={MAX_DELAY_S}&fallback_to_stale_replicas_for_distributed_queries=0"
        ),
        &lookup(shop, item),
    );
    assert!(refused.1.starts_with("Code: 369"), "the Distributed table: {refused:?}");
    // Worded as the cluster's release words it (18.16: `Code: 369, e.displayText() = ...`).
    let head = |t: &str| t.split("DB::Exception: ").next().unwrap_or_default().to_string();
    assert_eq!(head(&body), head(&refused.1), "the gateway's refusal, worded as the server's: {body}");

    // The replicas catch up: they are used again, and every answer is the new version.
    let started = Instant::now();
    for n in [&n11, &n12, &n22] {
        assert_eq!(post(n, "SYSTEM START FETCHES items_local").0, 200);
        assert_eq!(post(n, "SYSTEM SYNC REPLICA items_local").0, 200);
    }
    wait_for("every replica caught up", Duration::from_secs(10), || {
        ["1.1", "1.2", "2.1", "2.2"]
            .iter()
            .all(|r| metric(&gw, &replica_series("chstorm_gateway_replica_routed_delay_seconds", r)) == Some(0.0))
    });
    eprintln!("every replica was read fresh again {:?} after its fetches started", started.elapsed());
    std::thread::sleep(Duration::from_millis(500));
    let mut seen = std::collections::BTreeSet::new();
    for &(shop, item, version) in keys.iter().cycle().take(80) {
        let (s, replica, stale, body) = gw_lookup(&gw, &lookup(shop, item));
        assert_eq!((s, stale, body), (200, None, (version + 100).to_string()));
        seen.insert(replica);
    }
    assert!(seen.contains("1.2") && seen.contains("2.2"), "used again once caught up: {seen:?}");
}

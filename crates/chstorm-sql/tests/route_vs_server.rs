//! chstorm-sql's routing and cityHash64 against a real ClickHouse 18.16 server.
//!
//! * `cityHash64` of strings and of every integer type, and the literal-type
//!   behaviour, against the shared server (batched: a few queries in all).
//! * The whole chain (WHERE key -> evaluate -> select_shard -> rewrite)
//!   against a real Distributed table: a private server whose config has
//!   clusters with 2 and 3 shards that all point at the server itself, each
//!   shard with its own `default_database` (s0, s1, s2). A Distributed table
//!   with database `''` then writes each shard's rows into that shard's
//!   database, so we can see exactly where Distributed put every row, with
//!   weights [2,0,3] and [3,1,7] and signed plain columns.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use chstorm_local::{shared_server, LocalServer, ServerSpec};
use chstorm_sql::cityhash::{city_hash64, int_hash64};
use chstorm_sql::lexer::Grammar;
use chstorm_sql::route::{
    extract_key, rewrite_tables, select_shard, ColumnType, KeyValue, RoutedTables, Router, ShardingExpr, Unrouted,
    DEFAULT_DATABASE,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A ClickHouse string literal for `s`: backslash escapes for `\` and `'`,
/// `\xHH` for control bytes.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn parse_u64_lines(body: &str) -> Vec<u64> {
    body.lines().map(|l| l.trim().parse::<u64>().unwrap_or_else(|e| panic!("{l:?}: {e}"))).collect()
}

fn random_string(rng: &mut SmallRng, len: usize) -> String {
    const ALPHABETS: &[&str] = &[
        "abcdefghijklmnopqrstuvwxyz0123456789",
        "ABCxyz _-'\\\"`\t\n\r\u{0}\u{1}\u{7f}",
        "éüßçñø€日本語中文한국어😀🚀ᚠ",
    ];
    let kind = rng.gen_range(0..4);
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let alphabet: Vec<char> = ALPHABETS[if kind == 3 { rng.gen_range(0..3) } else { kind }].chars().collect();
        s.push(alphabet[rng.gen_range(0..alphabet.len())]);
    }
    s
}

/// Runs `SELECT cityHash64(arrayJoin([...]))` over `items` in batches that
/// stay under the server's 256 KiB `max_query_size`.
fn server_hashes(items: &[String], wrap: &str) -> Vec<u64> {
    let server = shared_server();
    let mut out = Vec::with_capacity(items.len());
    let mut i = 0;
    while i < items.len() {
        let mut sql = format!("SELECT cityHash64({wrap}(arrayJoin([");
        let first = i;
        while i < items.len() && (i == first || sql.len() + items[i].len() < 200_000) {
            if i > first {
                sql.push(',');
            }
            sql.push_str(&items[i]);
            i += 1;
        }
        sql.push_str("])))");
        let body = server.query(&sql).unwrap_or_else(|e| panic!("{e}"));
        out.extend(parse_u64_lines(&body));
    }
    assert_eq!(out.len(), items.len());
    out
}

#[test]
fn city_hash64_of_strings_matches_server() {
    let t = Instant::now();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0001);
    let mut strings: Vec<String> = Vec::new();
    // Every length 0..=300 (ASCII, so bytes = chars), then 2,000 random ones
    // of mixed alphabets and lengths up to 5,000 bytes.
    for len in 0..=300 {
        strings.push(random_string(&mut rng, len).chars().map(|c| if c.is_ascii() { c } else { 'x' }).collect());
    }
    for _ in 0..2000 {
        let len = match rng.gen_range(0..10) {
            0 => rng.gen_range(0..5000),
            1..=3 => rng.gen_range(0..17),
            _ => rng.gen_range(0..200),
        };
        strings.push(random_string(&mut rng, len));
    }
    strings.push(String::new());
    let literals: Vec<String> = strings.iter().map(|s| literal(s)).collect();
    let server = server_hashes(&literals, "");

    let expr = ShardingExpr::parse("cityHash64(s)").unwrap();
    for ((s, lit), want) in strings.iter().zip(&literals).zip(&server) {
        assert_eq!(city_hash64(s.as_bytes()), *want, "cityHash64({lit}), {} bytes", s.len());
        // The same key read from a WHERE literal, through the lexer's unescaping.
        let sql = format!("SELECT * FROM t WHERE s = {lit}");
        let key =
            extract_key(&sql, None, None, Some("s"), Grammar::V18_16).unwrap_or_else(|| panic!("no key in {sql}"));
        assert_eq!(key, KeyValue::Str(s.clone()));
        assert_eq!(expr.evaluate(&key, ColumnType::String).unwrap(), *want);
    }
    eprintln!("{} strings in {:?}", strings.len(), t.elapsed());
}

/// Escapes whose decoding the lexer must agree on with the server.
#[test]
fn string_escapes_decode_like_the_server() {
    let server = shared_server();
    let cases = [r"'a\'b'", "'a''b'", r"'\x41\x7e'", r"'\a\b\e\f\n\r\t\v\0'", r"'\q\\\/'", r"'x\Ny'", "'é\\'日'"];
    let sql = format!("SELECT cityHash64(arrayJoin([{}]))", cases.join(","));
    let want = parse_u64_lines(&server.query(&sql).unwrap());
    let expr = ShardingExpr::parse("cityHash64(s)").unwrap();
    for (lit, want) in cases.iter().zip(want) {
        let key =
            extract_key(&format!("SELECT 1 FROM t WHERE s = {lit}"), None, None, Some("s"), Grammar::V18_16).unwrap();
        assert_eq!(expr.evaluate(&key, ColumnType::String).unwrap(), want, "{lit} -> {key}");
    }
}

#[test]
fn city_hash64_of_integers_matches_server() {
    let t = Instant::now();
    let server = shared_server();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0002);
    let expr = ShardingExpr::parse("cityHash64(k)").unwrap();

    // 5,000 UInt64 values: edges, small, and full-range random.
    let mut values: Vec<u64> =
        vec![0, 1, 2, 127, 128, 255, 256, 65535, 65536, u64::from(u32::MAX), 1 << 32, 1 << 63, u64::MAX];
    while values.len() < 5000 {
        values.push(match rng.gen_range(0..3) {
            0 => rng.gen_range(0..1000),
            1 => rng.gen::<u32>().into(),
            _ => rng.gen(),
        });
    }
    let items: Vec<String> = values.iter().map(u64::to_string).collect();
    let got = server_hashes(&items, "toUInt64");
    for (v, want) in values.iter().zip(&got) {
        assert_eq!(expr.evaluate(&KeyValue::UInt(*v), ColumnType::UInt64).unwrap(), *want, "cityHash64(toUInt64({v}))");
        assert_eq!(expr.evaluate(&KeyValue::Str(v.to_string()), ColumnType::UInt64).unwrap(), *want);
    }
    // intHash64 is the same function.
    let sql = format!("SELECT intHash64(toUInt64(arrayJoin([{}])))", items[..500].join(","));
    for (v, want) in values.iter().zip(parse_u64_lines(&server.query(&sql).unwrap())) {
        assert_eq!(int_hash64(*v), want, "intHash64({v})");
    }

    // Every other integer type, with negative values for the signed ones.
    for (ty, conv, min, max) in [
        (ColumnType::UInt8, "toUInt8", 0i128, 255i128),
        (ColumnType::UInt16, "toUInt16", 0, 65535),
        (ColumnType::UInt32, "toUInt32", 0, u32::MAX as i128),
        (ColumnType::Int8, "toInt8", -128, 127),
        (ColumnType::Int16, "toInt16", -32768, 32767),
        (ColumnType::Int32, "toInt32", i32::MIN as i128, i32::MAX as i128),
        (ColumnType::Int64, "toInt64", i64::MIN as i128, i64::MAX as i128),
    ] {
        let mut vals: Vec<i128> = vec![min, max, 0, (-1i128).max(min), 1];
        while vals.len() < 500 {
            vals.push(rng.gen_range(min..=max));
        }
        // An array literal of mixed signs has a signed type that may be wider
        // than the value: convert each element on its own.
        let items: Vec<String> = vals.iter().map(|v| format!("{conv}({v})")).collect();
        let sql = format!("SELECT cityHash64(arrayJoin([{}]))", items.join(","));
        let got = parse_u64_lines(&server.query(&sql).unwrap());
        for (v, want) in vals.iter().zip(got) {
            let key = if *v < 0 { KeyValue::Int(*v as i64) } else { KeyValue::UInt(*v as u64) };
            assert_eq!(expr.evaluate(&key, ty).unwrap(), want, "cityHash64({conv}({v}))");
        }
    }
    eprintln!("integers in {:?}", t.elapsed());
}

/// A literal's type is the smallest that fits (`123` is UInt8, `-1` Int8);
/// only negative values hash differently because of it.
#[test]
fn literal_types_and_city_hash64() {
    let server = shared_server();
    let row = server
        .query(
            "SELECT toTypeName(123), cityHash64(123), cityHash64(toUInt64(123)), toTypeName(-1), cityHash64(-1), \
             cityHash64(toInt64(-1)), toTypeName(-200), cityHash64(-200), toTypeName(300), cityHash64(300) FORMAT TSV",
        )
        .unwrap();
    let f: Vec<&str> = row.trim_end().split('\t').collect();
    let e = ShardingExpr::parse("cityHash64(k)").unwrap();
    let h = |k: KeyValue, t: ColumnType| e.evaluate(&k, t).unwrap().to_string();
    assert_eq!(f[0], "UInt8");
    assert_eq!(f[1], f[2], "cityHash64(123) = cityHash64(toUInt64(123))");
    assert_eq!(f[1], h(KeyValue::UInt(123), ColumnType::UInt8));
    assert_eq!(f[2], h(KeyValue::UInt(123), ColumnType::UInt64));
    assert_eq!(f[3], "Int8");
    assert_ne!(f[4], f[5], "cityHash64(-1) differs from cityHash64(toInt64(-1))");
    assert_eq!(f[4], h(KeyValue::Int(-1), ColumnType::Int8));
    assert_eq!(f[5], h(KeyValue::Int(-1), ColumnType::Int64));
    assert_eq!(f[6], "Int16");
    assert_eq!(f[7], h(KeyValue::Int(-200), ColumnType::Int16));
    assert_eq!(f[8], "UInt16");
    assert_eq!(f[9], h(KeyValue::UInt(300), ColumnType::UInt64));
}

/// select_shard against the server's own arithmetic on its own hashes.
#[test]
fn select_shard_matches_server_modulo() {
    let server = shared_server();
    let mut rng = SmallRng::seed_from_u64(0x5eed_0003);
    let values: Vec<u64> = (0..2000).map(|_| rng.gen()).collect();
    let list = values.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let sql = format!(
        "SELECT h % 2, multiIf(h % 4 < 2, 0, h % 4 < 3, 1, 2), multiIf(h % 5 < 2, 0, 2), h % 7 \
         FROM (SELECT cityHash64(toUInt64(arrayJoin([{list}]))) AS h) FORMAT TSV"
    );
    let body = server.query(&sql).unwrap();
    let e = ShardingExpr::parse("cityHash64(shop_id)").unwrap();
    for (v, line) in values.iter().zip(body.lines()) {
        let f: Vec<usize> = line.split('\t').map(|x| x.parse().unwrap()).collect();
        let h = e.evaluate(&KeyValue::UInt(*v), ColumnType::UInt64).unwrap();
        assert_eq!(select_shard(h, &[1, 1]), Some(f[0]));
        assert_eq!(select_shard(h, &[2, 1, 1]), Some(f[1]));
        assert_eq!(select_shard(h, &[2, 0, 3]), Some(f[2]));
        assert_eq!(select_shard(h, &[1; 7]), Some(f[3]));
    }
}

// ---------------------------------------------------------------------------
// Real Distributed tables on a private server.

/// Posts `sql` with URL parameters `params`. HTTP/1.0, so the answer is not
/// chunked and ends with the connection.
fn post(server: &LocalServer, params: &str, sql: &str) -> String {
    let authority = server.http_url().strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(authority).unwrap();
    write!(s, "POST /?{params} HTTP/1.0\r\nHost: {authority}\r\nContent-Length: {}\r\n\r\n", sql.len()).unwrap();
    s.write_all(sql.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{sql}\n{head}\n{body}");
    body.to_string()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server whose clusters point at itself: `c3` shards s0,s1,s2 with weights
/// [2,0,3]; `c11` s0,s1,s2 with [3,1,7]; `c2` s0,s1 with [1,2].
fn cluster_server(dir: &std::path::Path) -> LocalServer {
    let mut last_err = None;
    for _ in 0..3 {
        let port = free_port();
        let shard = |w: u32, db: &str| {
            format!(
                "<shard><weight>{w}</weight><replica><host>127.0.0.1</host><port>{port}</port>\
                 <default_database>{db}</default_database></replica></shard>"
            )
        };
        let mut spec = ServerSpec::new(dir);
        spec.tcp_port = Some(port);
        spec.die_with_parent = true;
        spec.extra_config_xml = Some(format!(
            "<remote_servers><c3>{}{}{}</c3><c11>{}{}{}</c11><c2>{}{}</c2></remote_servers>",
            shard(2, "s0"),
            shard(0, "s1"),
            shard(3, "s2"),
            shard(3, "s0"),
            shard(1, "s1"),
            shard(7, "s2"),
            shard(1, "s0"),
            shard(2, "s1"),
        ));
        spec.extra_profile_xml =
            Some("<insert_distributed_sync>1</insert_distributed_sync><prefer_localhost_replica>0</prefer_localhost_replica>".into());
        match LocalServer::start(spec) {
            Ok(s) => return s,
            Err(e) => last_err = Some(e),
        }
    }
    panic!("cluster server: {}", last_err.unwrap());
}

/// Which shard database each value of `col` landed in, for a table in s0..s{n-1}.
fn placement(server: &LocalServer, table: &str, col: &str, shards: usize) -> BTreeMap<String, BTreeSet<usize>> {
    let mut at: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for s in 0..shards {
        for line in post(server, "", &format!("SELECT DISTINCT {col} FROM s{s}.{table} FORMAT TSV")).lines() {
            at.entry(line.to_string()).or_default().insert(s);
        }
    }
    at
}

#[test]
fn routing_matches_real_distributed_tables() {
    let t = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let server = cluster_server(dir.path());
    eprintln!("cluster server up in {:?}", t.elapsed());
    let q = |sql: &str| post(&server, "", sql);
    let mut rng = SmallRng::seed_from_u64(0x5eed_0004);
    for db in ["s0", "s1", "s2"] {
        q(&format!("CREATE DATABASE {db}"));
        q(&format!(
            "CREATE TABLE {db}.items_local (shop_id UInt64, item_id UInt64, v UInt64, name String) \
             ENGINE = ReplacingMergeTree(v) ORDER BY (shop_id, item_id) SAMPLE BY item_id"
        ));
        q(&format!("CREATE TABLE {db}.by_name_local (name String, x UInt32) ENGINE = MergeTree ORDER BY name"));
        for ty in ["Int8", "Int32", "Int64", "UInt8"] {
            q(&format!("CREATE TABLE {db}.k_{ty} (k {ty}) ENGINE = MergeTree ORDER BY tuple()"));
        }
    }
    q("CREATE TABLE default.items (shop_id UInt64, item_id UInt64, v UInt64, name String) \
       ENGINE = Distributed(c3, '', items_local, cityHash64(shop_id))");
    q("CREATE TABLE default.by_name (name String, x UInt32) ENGINE = Distributed(c2, '', by_name_local, cityHash64(name))");
    for ty in ["Int8", "Int32", "Int64", "UInt8"] {
        q(&format!("CREATE TABLE default.k_{ty} (k {ty}) ENGINE = Distributed(c11, '', k_{ty}, k)"));
    }

    // 3,000 shops, 1-3 items each, some rows twice with a newer version (FINAL).
    let shops: Vec<u64> = (0..3000)
        .map(|i| if i % 3 == 0 { rng.gen_range(0..100_000) } else { rng.gen() })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut rows = String::new();
    for &shop in &shops {
        for item in 0..rng.gen_range(1..4u64) {
            let _ = write!(rows, "({shop},{item},1,'n{shop}_{item}'),");
            if rng.gen_bool(0.3) {
                let _ = write!(rows, "({shop},{item},2,'new{shop}_{item}'),");
            }
        }
    }
    q(&format!("INSERT INTO default.items VALUES {}", rows.trim_end_matches(',')));

    let router = Router::new(
        "cityHash64(shop_id)",
        ColumnType::UInt64,
        [("items".to_string(), "items_local".to_string())].into_iter().collect(),
        None,
        Some("shop_id".into()),
        vec![2, 0, 3],
    )
    .unwrap();

    // Where Distributed put every shop = where the router sends its key.
    let at = placement(&server, "items_local", "shop_id", 3);
    assert_eq!(at.len(), shops.len());
    for &shop in &shops {
        let want: BTreeSet<usize> = [router.shard_of(&KeyValue::UInt(shop)).unwrap()].into();
        assert_eq!(at[&shop.to_string()], want, "shop {shop}");
    }
    assert!(!at.values().any(|s| s.contains(&1)), "the weight-0 shard got rows");

    // Point lookups: routed (rewritten, run in the shard's database) = Distributed.
    let mut lookups: Vec<u64> = shops.iter().step_by(shops.len() / 200).copied().collect();
    lookups.extend((0..20).map(|_| rng.gen::<u64>())); // absent shops
    for (i, shop) in lookups.iter().enumerate() {
        let sql = match i % 4 {
            0 => format!("SELECT item_id, v, name FROM items FINAL WHERE shop_id = {shop} ORDER BY item_id FORMAT TSV"),
            1 => format!("SELECT count(), sum(v) FROM items WHERE item_id < 2 AND shop_id = {shop}"),
            2 => format!("SELECT items.name FROM items FINAL PREWHERE items.shop_id = {shop} WHERE items.item_id = 0"),
            _ => format!(
                "SELECT * FROM items AS i FINAL WHERE (i.shop_id = {shop}) AND i.item_id GLOBAL IN \
                 (SELECT item_id FROM items WHERE shop_id = {shop} AND v = 2) ORDER BY item_id"
            ),
        };
        let routed = router.route(&sql, None, None, None, Grammar::V18_16).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        let distributed = q(&sql);
        let local = post(&server, &format!("database=s{}", routed.shard), &routed.sql);
        assert_eq!(local, distributed, "{sql}\nrouted to shard {}: {}", routed.shard, routed.sql);
    }
    // The same through the URL parameter and the header, for a filter the
    // WHERE rule does not read (the client vouches for the key).
    for shop in shops.iter().take(50) {
        let sql = format!("SELECT item_id, v FROM items FINAL WHERE shop_id IN ({shop}, {shop}) ORDER BY item_id");
        assert_eq!(router.route(&sql, None, None, None, Grammar::V18_16), Err(Unrouted::NoKey));
        let by_param = router.route(&sql, Some(&shop.to_string()), None, None, Grammar::V18_16).unwrap();
        let by_header = router.route(&sql, None, Some(&shop.to_string()), None, Grammar::V18_16).unwrap();
        assert_eq!(by_param.shard, by_header.shard);
        let local = post(&server, &format!("database=s{}", by_param.shard), &by_param.sql);
        let distributed = q(&format!("SELECT item_id, v FROM items FINAL WHERE shop_id = {shop} ORDER BY item_id"));
        assert_eq!(local, distributed, "shop {shop}");
    }

    // String keys: cityHash64(name) with weights [1,2].
    let names: Vec<String> = (0..1000)
        .map(|_| {
            let len = rng.gen_range(0..40);
            random_string(&mut rng, len)
        })
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    let values: Vec<String> = names.iter().enumerate().map(|(i, n)| format!("({},{i})", literal(n))).collect();
    q(&format!("INSERT INTO default.by_name VALUES {}", values.join(",")));
    let expr = ShardingExpr::parse("cityHash64(name)").unwrap();
    let mut seen = 0;
    for s in 0..2 {
        let xs = post(&server, "", &format!("SELECT x FROM s{s}.by_name_local FORMAT TSV"));
        for x in xs.lines() {
            let name = &names[x.parse::<usize>().unwrap()];
            let h = expr.evaluate(&KeyValue::Str(name.clone()), ColumnType::String).unwrap();
            assert_eq!(select_shard(h, &[1, 2]), Some(s), "name {name:?}");
            seen += 1;
        }
    }
    assert_eq!(seen, names.len());

    // Plain integer columns, with negative values: weights [3,1,7].
    for (ty, min, max) in [
        ("Int8", -128i64, 127i64),
        ("Int32", i32::MIN as i64, i32::MAX as i64),
        ("Int64", i64::MIN, i64::MAX),
        ("UInt8", 0, 255),
    ] {
        let col_type = ColumnType::parse(ty).unwrap();
        let mut vals: BTreeSet<i64> = [min, max, (-1i64).max(min), (-2i64).max(min), 0].into();
        let small = i128::from(max) - i128::from(min) < 300;
        if small {
            vals.extend(min..=max); // every value of Int8 / UInt8
        }
        while vals.len() < 300 && !small {
            vals.insert(rng.gen_range(min..=max));
        }
        let list: Vec<String> = vals.iter().map(|v| format!("({v})")).collect();
        q(&format!("INSERT INTO default.k_{ty} VALUES {}", list.join(",")));
        let e = ShardingExpr::parse("k").unwrap();
        let at = placement(&server, &format!("k_{ty}"), "k", 3);
        assert_eq!(at.len(), vals.len(), "{ty}");
        for v in &vals {
            let key = if *v < 0 { KeyValue::Int(*v) } else { KeyValue::UInt(*v as u64) };
            let shard = select_shard(e.evaluate(&key, col_type).unwrap(), &[3, 1, 7]).unwrap();
            assert_eq!(at[&v.to_string()], [shard].into(), "{ty} {v}");
        }
    }

    // rewrite_tables output is valid SQL for the server, odd spellings
    // included (an empty default.items_local makes the qualified one valid).
    q("CREATE TABLE default.items_local AS s0.items_local");
    let map: BTreeMap<String, String> = [("items".to_string(), "items_local".to_string())].into_iter().collect();
    let map = RoutedTables::new(&map, DEFAULT_DATABASE).unwrap();
    for sql in [
        "SELECT count() FROM `items` FINAL WHERE shop_id = 1",
        "SELECT count() FROM default.items AS t SAMPLE 1 WHERE t.shop_id = 1 SETTINGS max_threads = 1",
        "SELECT items.shop_id FROM items WHERE items.shop_id = 1 FORMAT TSV",
        "SELECT count() FROM items /* FROM items */ WHERE shop_id = 1 -- items",
        "SELECT count() FROM (SELECT * FROM items FINAL) WHERE shop_id = 1",
    ] {
        let rewritten = rewrite_tables(sql, &map, None, Grammar::V18_16).unwrap();
        q(sql);
        post(&server, "database=s0", &rewritten);
    }
    eprintln!("distributed checks in {:?}", t.elapsed());
    // A throwaway server: SIGKILL instead of the graceful stop, which waits
    // for its Distributed connections to itself.
    let mut server = server;
    server.kill9();
    eprintln!("cluster server down at {:?}", t.elapsed());
}

//! Which handler a request goes to, decided as ClickHouse's HTTP server decides it, and the
//! answers the gateway gives itself.
//!
//! ClickHouse 18.16 (`HTTPHandlerFactory`; checked against the server, and current releases
//! keep these rules for their default handlers):
//!
//! | request | answer |
//! |---|---|
//! | GET/HEAD with the target exactly `/` | 200 `Ok.\n`, `Content-Type: text/html; charset=UTF-8` |
//! | GET/HEAD with the target exactly `/ping` | 200 `Ok.\n` |
//! | GET/HEAD with a target starting with `/replicas_status` | the replicas' status |
//! | any method with a `?` in the target, or POST to any path | a query |
//! | other GET/HEAD | 404, `There is no handle <target>` and a help text |
//! | anything else | 501 Not Implemented, `Connection: Close` |
//!
//! So `GET /ping?x=1` is a query (and fails on the unknown setting `x`), and `POST /ping` with a
//! body is a query too; the proxy forwards a query's path unchanged, so every path behaves as on
//! the server. The gateway adds `GET /metrics` when `/metrics` is served on the main listener
//! (no `metrics_listen`), for users with `metrics: true` only (`crate::http::service::Listing`:
//! without credentials it is ClickHouse's 404, with failing ones 401 or 403).
//!
//! `/replicas_status` is answered from the gateway's own health view, not proxied: what a load
//! balancer in front of the gateway needs to know is whether the gateway can answer, i.e. whether
//! every shard of every cluster has a healthy replica. See [`replicas_status`]; the replicas'
//! URLs are only shown to users with `metrics: true`.

use crate::cluster::balancer::Balancer;
use http::{Method, StatusCode};

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Root,
    Ping,
    ReplicasStatus,
    Metrics,
    Query,
    NotFound,
    NotImplemented,
}

/// The handler for `method` and the request target `target` (path and query string, as sent).
/// `metrics_here`: `/metrics` is served on this listener.
pub fn endpoint(method: &Method, target: &str, metrics_here: bool) -> Endpoint {
    let get = method == Method::GET || method == Method::HEAD;
    if get {
        if target == "/" {
            return Endpoint::Root;
        }
        if target == "/ping" {
            return Endpoint::Ping;
        }
        if target.starts_with("/replicas_status") {
            return Endpoint::ReplicasStatus;
        }
        if metrics_here && target.split('?').next() == Some("/metrics") {
            return Endpoint::Metrics;
        }
    }
    if target.contains('?') || method == Method::POST {
        return Endpoint::Query;
    }
    if get {
        Endpoint::NotFound
    } else {
        Endpoint::NotImplemented
    }
}

/// ClickHouse 18.16's 404 body for `target`, byte for byte.
pub fn not_found_text(target: &str) -> String {
    format!(
        "There is no handle {target}\n\n\
         Use / or /ping for health checks.\n\
         Or /replicas_status for more sophisticated health checks.\n\n\
         Send queries from your program with POST method or GET /?query=...\n\n\
         Use clickhouse-client:\n\n\
         For interactive data analysis:\n    clickhouse-client\n\n\
         For batch query processing:\n    clickhouse-client --query='SELECT 1' > result\n    clickhouse-client < query > result\n"
    )
}

/// The gateway's `/replicas_status`: 200 `Ok.\n` when every shard of every cluster has at least
/// one healthy replica (by the gateway's health checks), else 503 and one line per replica and per
/// shard left without one. `verbose` lists the replicas in either case. A tab follows each colon,
/// as in ClickHouse's list; a replica's URL follows its state only with `urls` (the asker is a
/// user allowed the gateway's listings):
///
/// ```text
/// storm.1.1:  up. http://127.0.0.1:18123 version 18.16.1
/// storm.2.1:  down. http://127.0.0.1:18125 version unknown
/// storm.2.2:  down. http://127.0.0.1:18126 version unknown
/// storm.2:    no healthy replica.
/// ```
///
/// Each replica's line ends with its detected ClickHouse version (`crate::cluster::version`),
/// `unknown` while none is.
///
/// Not ClickHouse's replication delay: the gateway's health checks use `/ping`. (18.16 answers a
/// lagging replica with 200 and the delay list; later releases with 503, as here.)
pub fn replicas_status<'a>(
    clusters: impl Iterator<Item = &'a Balancer>,
    verbose: bool,
    urls: bool,
) -> (StatusCode, String) {
    let mut ok = true;
    let mut text = String::new();
    for b in clusters {
        for (si, shard) in b.shards.iter().enumerate() {
            for r in shard {
                let state = if r.is_healthy() { "up" } else { "down" };
                text.push_str(&format!("{}.{}:\t{state}.", b.cluster, r.label()));
                if urls {
                    // Its address and detected version, for those who may see them.
                    let version = r.version().map_or_else(|| "unknown".to_string(), |v| v.label());
                    text.push_str(&format!(" {} version {version}", r.addr.base));
                }
                text.push('\n');
            }
            if !shard.iter().any(|r| r.is_healthy()) {
                ok = false;
                text.push_str(&format!("{}.{}:\tno healthy replica.\n", b.cluster, si + 1));
            }
        }
    }
    match (ok, verbose) {
        (true, false) => (StatusCode::OK, "Ok.\n".into()),
        (true, true) => (StatusCode::OK, text),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, text),
    }
}

/// The `verbose=1` flag of a `/replicas_status` target.
pub fn verbose(target: &str) -> bool {
    let query = target.split_once('?').map(|(_, q)| q);
    crate::request::parse_params(query).iter().any(|(k, v)| k == "verbose" && v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use Endpoint::*;

    #[test]
    fn paths_go_where_clickhouse_sends_them() {
        let cases: &[(&str, &str, Endpoint)] = &[
            ("GET", "/", Root),
            ("HEAD", "/", Root),
            ("GET", "/ping", Ping),
            ("HEAD", "/ping", Ping),
            ("GET", "/replicas_status", ReplicasStatus),
            ("GET", "/replicas_status?verbose=1", ReplicasStatus),
            ("GET", "/replicas_status/x", ReplicasStatus),
            ("GET", "/replicas_status?query=SELECT%201", ReplicasStatus),
            ("GET", "/?query=SELECT%201", Query),
            ("GET", "/?", Query),
            ("GET", "/?x=1", Query),
            ("GET", "/ping?x=1", Query),
            ("GET", "/nope?query=SELECT%201", Query),
            ("POST", "/", Query),
            ("POST", "/ping", Query),
            ("POST", "/replicas_status", Query),
            ("POST", "/nope", Query),
            ("DELETE", "/?query=SELECT%201", Query),
            ("PUT", "/x?query=SELECT%201", Query),
            ("GET", "/nope", NotFound),
            ("GET", "//", NotFound),
            ("GET", "/ping/", NotFound),
            ("HEAD", "/play", NotFound),
            ("PUT", "/nope", NotImplemented),
            ("OPTIONS", "/", NotImplemented),
            ("PATCH", "/ping", NotImplemented),
        ];
        for &(m, t, want) in cases {
            let m = Method::from_bytes(m.as_bytes()).unwrap();
            assert_eq!(endpoint(&m, t, false), want, "{m} {t}");
        }
        assert_eq!(endpoint(&Method::GET, "/metrics", false), NotFound);
        assert_eq!(endpoint(&Method::GET, "/metrics", true), Metrics);
        assert_eq!(endpoint(&Method::GET, "/metrics?x=1", true), Metrics);
        assert_eq!(endpoint(&Method::POST, "/metrics", true), Query);
    }

    #[test]
    fn the_404_text_is_clickhouses() {
        let t = not_found_text("/nope");
        assert!(t.starts_with("There is no handle /nope\n\nUse / or /ping for health checks.\n"), "{t}");
        assert!(t.ends_with("    clickhouse-client < query > result\n"), "{t}");
        assert_eq!(t.len(), 382, "the length 18.16 sends for /nope");
    }

    fn balancer(yaml_shards: &str) -> Balancer {
        let text = format!(
            "listen: 127.0.0.1:0\nclusters:\n  storm:\n    shards:\n{yaml_shards}users:\n  - name: default\n    cluster: storm\n"
        );
        let cfg = crate::config::Config::parse(&text, std::path::Path::new("t.yaml")).unwrap();
        Balancer::new(&cfg.clusters["storm"])
    }

    #[test]
    fn replicas_status_is_ok_while_every_shard_has_a_healthy_replica() {
        let b = balancer(
            "      - replicas: [http://127.0.0.1:1, http://127.0.0.1:2]\n      - replicas: [http://127.0.0.1:3, http://127.0.0.1:4]\n",
        );
        assert_eq!(replicas_status([&b].into_iter(), false, true), (StatusCode::OK, "Ok.\n".into()));
        let r12 = b.shards[0][1].clone();
        b.set_health(&r12, false);
        assert_eq!(replicas_status([&b].into_iter(), false, true), (StatusCode::OK, "Ok.\n".into()));
        b.shards[1][1].observe_hello(&chstorm_proto::native::ServerInfo::of_version(
            chstorm_proto::versions::ServerVersion::V18_16,
        ));
        let (s, t) = replicas_status([&b].into_iter(), true, true);
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            t,
            "storm.1.1:\tup. http://127.0.0.1:1 version unknown\nstorm.1.2:\tdown. http://127.0.0.1:2 version unknown\n\
             storm.2.1:\tup. http://127.0.0.1:3 version unknown\nstorm.2.2:\tup. http://127.0.0.1:4 version 18.16.1\n"
        );
        let (_, anonymous) = replicas_status([&b].into_iter(), true, false);
        assert_eq!(anonymous, "storm.1.1:\tup.\nstorm.1.2:\tdown.\nstorm.2.1:\tup.\nstorm.2.2:\tup.\n", "no URL");
        for r in b.shards[1].clone() {
            b.set_health(&r, false);
        }
        let (s, t) = replicas_status([&b].into_iter(), false, true);
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            t.ends_with("storm.2.2:\tdown. http://127.0.0.1:4 version 18.16.1\nstorm.2:\tno healthy replica.\n"),
            "{t}"
        );
        let (s, t) = replicas_status([&b].into_iter(), false, false);
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert!(t.ends_with("storm.2.2:\tdown.\nstorm.2:\tno healthy replica.\n") && !t.contains("http"), "{t}");
    }

    #[test]
    fn verbose_flag() {
        assert!(verbose("/replicas_status?verbose=1"));
        assert!(verbose("/replicas_status?a=b&verbose=1"));
        assert!(!verbose("/replicas_status"));
        assert!(!verbose("/replicas_status?verbose=0"));
    }
}

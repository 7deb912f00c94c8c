//! The HTTP front's query service driven with in-memory requests (no socket) over a fake
//! backend: every phase (admission, authentication, reading, plan, attempts, answer, the one
//! exit's count) without a cluster.

use super::*;
use crate::cluster::upstream::GBody;
use crate::cluster::upstream::{full, Backend, BackendError, BoxFuture, Probe, Upstream};
use crate::config::Config;
use crate::http::respond::WWW_AUTHENTICATE;
use crate::metrics::{Metrics, RequestLabels};
use http::StatusCode;
use http_body_util::Full;
use std::sync::Mutex;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../../../../docs/gateway.example.yaml");

/// (replica, method, path and query, body) of a request a backend got.
type Sent = (String, String, String, Bytes);

/// A backend that answers every query `200` with `answer`, and records what it was sent.
#[derive(Default)]
struct Fake {
    answer: &'static str,
    /// Each request it got.
    sent: Arc<Mutex<Vec<Sent>>>,
    /// When set, each answer waits for a permit of it (taken for good).
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl Backend for Fake {
    fn send(
        &self,
        replica: &crate::config::ReplicaAddr,
        req: crate::cluster::upstream::BackendRequest,
    ) -> BoxFuture<Result<Response<GBody>, BackendError>> {
        let (replica, answer, sent, gate) = (replica.base.clone(), self.answer, self.sent.clone(), self.gate.clone());
        Box::pin(async move {
            let body = req.body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            sent.lock().unwrap().push((replica, req.method.to_string(), req.target, body));
            if let Some(g) = gate {
                g.acquire().await.expect("the gate stays open").forget();
            }
            Ok(Response::new(full(answer)))
        })
    }
    fn kill(&self, _: &crate::config::ReplicaAddr, _: &str, _: &str) -> BoxFuture<bool> {
        Box::pin(async { true })
    }
    fn reset_pool(&self, _: &crate::config::ReplicaAddr) {}
    fn alive(&self, _: &crate::config::ReplicaAddr, _: Duration) -> BoxFuture<Probe> {
        Box::pin(async { Probe::Alive })
    }
}

/// The example config with a read-only user `ro`, and the state over `fake`.
fn state(fake: Arc<Fake>) -> Arc<State> {
    state_with(fake, |_| {})
}

/// [`state`], with `edit` applied to the config first.
fn state_with(fake: Arc<Fake>, edit: impl FnOnce(&mut Config)) -> Arc<State> {
    let mut cfg = Config::parse(EXAMPLE, std::path::Path::new("g.yaml")).unwrap();
    let mut ro = cfg.users["default"].clone();
    ro.name = "ro".into();
    ro.readonly = true;
    cfg.users.insert("ro".into(), ro);
    edit(&mut cfg);
    let upstream = Arc::new(Upstream::new(&cfg.pool, Duration::from_secs(1), 1, &[], 1, 1).unwrap());
    Arc::new(State::new(cfg, Arc::new(Metrics::default()), upstream, fake))
}

fn request(method: Method, uri: &str, body: &'static str) -> Request<Full<Bytes>> {
    Request::builder().method(method).uri(uri).body(Full::new(Bytes::from_static(body.as_bytes()))).unwrap()
}

async fn send(state: &Arc<State>, req: Request<Full<Bytes>>) -> (StatusCode, HeaderMap, String) {
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let resp = serve(state.clone(), Box::new(req), peer, &AuthenticatedAs::default(), None).await.into_response();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    (parts.status, parts.headers, String::from_utf8_lossy(&body).into_owned())
}

fn count(state: &State, user: &str, status: u16, route: &'static str) -> u64 {
    state.metrics.requests.get_or_create(&RequestLabels { user: user.into(), status, route }).get()
}

#[tokio::test]
async fn a_read_only_users_insert_is_refused_with_403_and_counted_once() {
    let fake = Arc::new(Fake { answer: "", ..Fake::default() });
    let state = state(fake.clone());
    for (method, uri, body) in [
        (Method::POST, "/?user=ro", "INSERT INTO t VALUES (1)"),
        (Method::POST, "/?user=ro&query=INSERT%20INTO%20t%20FORMAT%20TSV", "1\n"),
        (Method::GET, "/?user=ro&query=CREATE%20TABLE%20t%20(a%20UInt8)%20ENGINE%20%3D%20Memory", ""),
        (Method::POST, "/?user=ro", "  /* a comment */ DROP TABLE t"),
    ] {
        let before = count(&state, "ro", 403, "rejected");
        let (status, _, text) = send(&state, request(method, uri, body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri} {body}: {text}");
        // Worded as a current server words it (no replica's version is known here).
        assert!(
            text.starts_with("Code: 164. DB::Exception: chstorm gateway: user 'ro' is read-only: only SELECT"),
            "{text}"
        );
        assert!(text.ends_with('\n') && text.lines().count() == 1, "one line: {text:?}");
        assert_eq!(count(&state, "ro", 403, "rejected"), before + 1, "{uri}: counted once");
    }
    assert!(fake.sent.lock().unwrap().is_empty(), "no backend saw a refused query");
}

#[tokio::test]
async fn an_admitted_select_reaches_the_backend_and_its_answer_is_relayed() {
    let fake = Arc::new(Fake { answer: "1\n", ..Fake::default() });
    let state = state(fake.clone());
    let (status, headers, text) = send(&state, request(Method::POST, "/?query_id=mine", "SELECT 1")).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "1\n"));
    assert_eq!(headers["x-clickhouse-query-id"], "mine", "the client sees its own query_id");
    assert_eq!(headers["x-chstorm-route"], "fanout");
    let sent = fake.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (_, method, uri, body) = &sent[0];
    assert!(headers.contains_key("x-chstorm-replica"), "{headers:?}");
    assert_eq!((method.as_str(), &body[..]), ("POST", &b"SELECT 1"[..]));
    assert!(uri.contains("query_id=default%3Amine"), "the backend runs it in the user's namespace: {uri}");
    assert_eq!(count(&state, "default", 200, "fanout"), 1);
    // A read-only user's GET goes as a POST, with readonly=1 last.
    let (status, _, _) = send(&state, request(Method::GET, "/?user=ro&query=SELECT%201", "")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, method, uri, _) = fake.sent.lock().unwrap()[1].clone();
    assert_eq!(method, "POST");
    assert!(uri.ends_with("&readonly=1"), "{uri}");
}

#[tokio::test]
async fn an_unknown_user_gets_401_with_the_realm_and_is_counted_as_unknown() {
    let state = state(Arc::new(Fake::default()));
    let (status, headers, text) = send(&state, request(Method::POST, "/?user=nobody", "SELECT 1")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], WWW_AUTHENTICATE);
    assert_eq!(text, "Code: 193. DB::Exception: chstorm gateway: unknown user or wrong password. (WRONG_PASSWORD)\n");
    assert_eq!(headers["x-clickhouse-exception-code"], "193");
    assert_eq!(count(&state, UNKNOWN_USER, 401, "rejected"), 1);
    // A cluster whose replica says it is 18.16 gets 18.16's wording.
    let r = state.clusters["storm"].balancer.replicas().next().unwrap().clone();
    r.observe_hello(&chstorm_proto::native::ServerInfo::of_version(chstorm_proto::versions::ServerVersion::V18_16));
    let (_, headers, text) = send(&state, request(Method::POST, "/?user=nobody", "SELECT 1")).await;
    assert_eq!(text, "Code: 193, e.displayText() = DB::Exception: chstorm gateway: unknown user or wrong password\n");
    assert_eq!(headers["x-clickhouse-exception-code"], "193");
}

#[test]
fn hop_headers_and_credentials_are_not_forwarded() {
    let mut h = HeaderMap::new();
    h.insert("authorization", "Basic eDp5".parse().unwrap());
    h.insert("x-clickhouse-key", "secret".parse().unwrap());
    h.insert("connection", "keep-alive".parse().unwrap());
    h.insert("x-clickhouse-format", "JSON".parse().unwrap());
    h.insert("content-encoding", "gzip".parse().unwrap());
    let names = |m: Arc<HeaderMap>| m.keys().map(|k| k.as_str().to_string()).collect::<Vec<_>>();
    assert_eq!(names(forwarded(&h, true)), vec!["x-clickhouse-format"], "a held body goes decompressed");
    assert_eq!(names(forwarded(&h, false)), vec!["x-clickhouse-format", "content-encoding"]);
    h.remove("x-clickhouse-format");
    let (a, b) = (forwarded(&h, true), forwarded(&h, true));
    assert!(a.is_empty() && Arc::ptr_eq(&a, &b), "nothing forwarded: one shared empty map");
}

/// A user waiting in its own queue holds no slot of the gateway's: with 2 global slots, a user
/// limited to 1 query in flight and 3 more waiting leaves the second slot to another user.
#[tokio::test]
async fn a_user_waiting_in_its_own_queue_leaves_the_gateways_slots_to_others() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let fake = Arc::new(Fake { answer: "1\n", gate: Some(gate.clone()), ..Fake::default() });
    let state = state_with(fake.clone(), |cfg| {
        (cfg.limits.max_concurrency, cfg.limits.queue_size) = (2, 1);
        let greedy = cfg.users.get_mut("default").unwrap();
        (greedy.max_concurrency, greedy.queue_size, greedy.queue_max_wait) = (1, 8, Duration::from_secs(30));
    });
    let sent = || fake.sent.lock().unwrap().len();
    let mut greedy = Vec::new();
    for _ in 0..4 {
        let state = state.clone();
        greedy.push(tokio::spawn(async move { send(&state, request(Method::POST, "/", "SELECT 1")).await }));
        tokio::task::yield_now().await;
    }
    while sent() < 1 {
        tokio::task::yield_now().await;
    }
    let other = {
        let state = state.clone();
        tokio::spawn(async move { send(&state, request(Method::POST, "/?user=ro", "SELECT 2")).await })
    };
    let t = std::time::Instant::now();
    while sent() < 2 {
        assert!(!other.is_finished(), "the other user was refused: {:?}", other.await.unwrap());
        assert!(t.elapsed() < Duration::from_secs(5), "the other user's query never reached the backend");
        tokio::task::yield_now().await;
    }
    assert_eq!(fake.sent.lock().unwrap()[1].3, &b"SELECT 2"[..], "the second slot went to the other user");
    gate.add_permits(5);
    assert_eq!(other.await.unwrap().0, StatusCode::OK);
    for g in greedy {
        assert_eq!(g.await.unwrap().0, StatusCode::OK, "each of the waiting queries is served in turn");
    }
}

#[test]
fn the_gateways_listings_are_for_users_allowed_them_and_anonymous_askers_see_a_404() {
    let secret = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // sha256("secret")
    let state = state_with(Arc::new(Fake::default()), |cfg| {
        let mut ops = cfg.users["default"].clone();
        (ops.name, ops.metrics) = ("ops".into(), true);
        ops.password_sha256 = Some(hex::decode(secret).unwrap().try_into().unwrap());
        cfg.users.insert("ops".into(), ops);
    });
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let ask = |uri: &str, auth: Option<&str>| {
        let mut b = Request::builder().uri(uri);
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        let kind = match listing_access(&state, &b.body(()).unwrap(), peer) {
            Listing::Allowed => "allowed".to_string(),
            Listing::Anonymous => "404".to_string(),
            Listing::Refused(r, label) => format!("{} {label}", r.status().as_u16()),
        };
        kind
    };
    let basic = |up: &str| format!("Basic {}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, up));
    assert_eq!(ask("/metrics", None), "404", "no credentials: user default, who may not");
    assert_eq!(ask("/metrics", Some(&basic("ops:secret"))), "allowed");
    assert_eq!(ask("/metrics?user=ops&password=secret", None), "allowed");
    assert_eq!(ask("/metrics", Some(&basic("ops:wrong"))), format!("401 {UNKNOWN_USER}"));
    assert_eq!(ask("/metrics?user=nobody", None), format!("401 {UNKNOWN_USER}"));
    assert_eq!(ask("/metrics", Some(&basic("default:"))), "403 default", "named, and not allowed");
    let far = Request::builder().uri("/metrics").header("authorization", basic("ops:secret")).body(()).unwrap();
    let from_far = listing_access(&state, &far, "10.1.2.3:1".parse().unwrap());
    assert!(
        matches!(from_far, Listing::Refused(r, _) if r.status() == StatusCode::FORBIDDEN),
        "a network it may not use"
    );
    // With `metrics: true` on the passwordless default, an asker without credentials is allowed.
    let open = state_with(Arc::new(Fake::default()), |cfg| cfg.users.get_mut("default").unwrap().metrics = true);
    let anonymous = Request::builder().uri("/metrics").body(()).unwrap();
    assert!(matches!(listing_access(&open, &anonymous, peer), Listing::Allowed));
}

#[tokio::test]
async fn a_client_s_quota_key_reaches_the_backend_once_as_the_parameter() {
    let fake = Arc::new(Fake { answer: "1\n", ..Fake::default() });
    let state = state(fake.clone());
    let with_quota = |uri: &str, key: &'static str| {
        let mut r = request(Method::POST, uri, "SELECT 1");
        r.headers_mut().insert("x-clickhouse-quota", key.parse().unwrap());
        r
    };
    // The header becomes the parameter (beside the gateway's Authorization, a current server
    // reads only the parameter); the same key both ways goes once.
    for uri in ["/", "/?quota_key=k1"] {
        let (status, _, text) = send(&state, with_quota(uri, "k1")).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let (_, _, target, _) = fake.sent.lock().unwrap().last().unwrap().clone();
        assert_eq!(target.matches("quota_key=k1").count(), 1, "{target}");
    }
    // Two different keys: refused as a current server refuses them, nothing sent.
    let before = fake.sent.lock().unwrap().len();
    let (status, headers, text) = send(&state, with_quota("/?quota_key=k2", "k1")).await;
    assert_eq!(
        (status, &headers["x-clickhouse-exception-code"]),
        (StatusCode::BAD_REQUEST, &"36".parse::<http::HeaderValue>().unwrap())
    );
    assert!(
        text.starts_with(
            "Code: 36. DB::Exception: Invalid authentication: it is not allowed to use X-ClickHouse-Quota"
        ),
        "{text}"
    );
    assert_eq!(fake.sent.lock().unwrap().len(), before);
}

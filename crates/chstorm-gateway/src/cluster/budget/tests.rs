//! Unit tests of the thread budget: the formula, the invariant under concurrency, release on
//! every path, `auto`, `queue` mode's max_wait, `observe`.

use super::probe::{self, parse_max_threads, parse_running, processes_schema, MaxThreadsSetting, ProcessesSchema};
use super::*;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::collections::BTreeSet;

fn cfg(total: usize, max: usize, mode: ThreadMode, max_wait_ms: u64, observe: bool) -> Threads {
    Threads {
        total: ThreadTotal::Fixed(total),
        max_per_query: max,
        cap_at_cores: false,
        mode,
        max_wait: Duration::from_millis(max_wait_ms),
        observe,
        observe_interval: Duration::from_millis(100),
        per_replica: BTreeMap::new(),
    }
}

fn budget(total: usize, max: usize, mode: ThreadMode, max_wait_ms: u64) -> Arc<ReplicaBudget> {
    ReplicaBudget::new("1.1", total, &cfg(total, max, mode, max_wait_ms, false), None)
}

fn check(s: Snapshot) {
    assert!(s.in_use <= s.total.saturating_sub(s.external) + s.floors, "in_use over total + floors: {s:?}");
}

#[test]
fn grants_follow_clamp_of_what_is_left() {
    let b = budget(8, 4, ThreadMode::Grant, 0);
    let g1 = b.grant_now(4, "a");
    let g2 = b.grant_now(4, "b");
    assert_eq!((g1.threads(), g2.threads()), (4, 4));
    let g3 = b.grant_now(4, "c");
    assert_eq!((g3.threads(), g3.is_floor()), (1, true), "budget spent: the 1-thread floor");
    assert_eq!(b.snapshot(), Snapshot { total: 8, in_use: 9, floors: 1, external: 0, queued: 0 });
    drop(g1);
    let g4 = b.grant_now(16, "d");
    assert_eq!((g4.threads(), g4.is_floor()), (3, false), "8 - 5 in use = 3, under max_per_query");
    let g5 = b.grant_now(4, "e");
    assert!(g5.is_floor());
    drop((g2, g3, g4, g5));
    assert_eq!(b.snapshot(), Snapshot { total: 8, in_use: 0, floors: 0, external: 0, queued: 0 });
}

#[test]
fn never_less_than_one_nor_more_than_wanted() {
    let b = budget(3, 2, ThreadMode::Grant, 0);
    assert_eq!(b.grant_now(0, "zero").threads(), 1, "want 0 still gets 1");
    assert_eq!(b.grant_now(100, "big").threads(), 2, "capped by max_per_query");
    let held = b.grant_now(1, "one");
    assert_eq!(held.threads(), 1, "the client's own max_threads = 1 caps the grant");
    let tiny = budget(1, 1, ThreadMode::Grant, 0);
    let all: Vec<Grant> = (0..5).map(|i| tiny.grant_now(8, &i.to_string())).collect();
    assert!(all.iter().all(|g| g.threads() == 1));
    assert_eq!(all.iter().filter(|g| g.is_floor()).count(), 4);
}

#[test]
fn wanted_honours_the_clients_max_threads_below_the_cap() {
    let p = |v: &str| vec![("query".to_string(), "SELECT 1".to_string()), ("max_threads".to_string(), v.to_string())];
    assert_eq!(wanted(&p("2"), 8), 2);
    assert_eq!(wanted(&p("64"), 8), 8);
    assert_eq!(wanted(&p("0"), 8), 8, "0 = the server default: no lowering");
    assert_eq!(wanted(&p("lots"), 8), 8);
    assert_eq!(wanted(&[], 8), 8);
    // The user's fixed settings are pushed last and win.
    let mut both = p("6");
    both.push(("max_threads".into(), "3".into()));
    assert_eq!(wanted(&both, 8), 3);
}

/// Many OS threads grant and release at random (seeded) while a checker samples the budget:
/// in_use never exceeds total + floors held, and everything comes back.
#[test]
fn invariant_holds_under_concurrent_grants_and_releases() {
    for (total, max) in [(4usize, 4usize), (8, 16), (16, 3), (1, 1)] {
        let b = budget(total, max, ThreadMode::Grant, 0);
        let stop = Arc::new(AtomicBool::new(false));
        let checker = {
            let (b, stop) = (b.clone(), stop.clone());
            // Samples until the workers are done (the workers check after every grant too: on a
            // loaded machine this thread may get no time slice before they finish).
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    check(b.snapshot());
                }
            })
        };
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                    let mut held: Vec<Grant> = Vec::new();
                    for i in 0..3000 {
                        if held.is_empty() || rng.gen_bool(0.55) {
                            let g = b.grant_now(rng.gen_range(0..=2 * max), &format!("{w}-{i}"));
                            assert!(g.threads() >= 1 && g.threads() <= max, "{g:?}");
                            check(b.snapshot());
                            held.push(g);
                        } else {
                            let k = rng.gen_range(0..held.len());
                            drop(held.swap_remove(k));
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        checker.join().unwrap();
        assert_eq!(b.snapshot(), Snapshot { total, in_use: 0, floors: 0, external: 0, queued: 0 }, "total {total}");
    }
}

/// The same in `queue` mode on a multi-threaded runtime: waiters, hand-offs, timeouts.
#[test]
fn invariant_holds_in_queue_mode_with_waiters_and_timeouts() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let b = budget(4, 4, ThreadMode::Queue, 5);
        let tasks: Vec<_> = (0..16u64)
            .map(|w| {
                let b = b.clone();
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                    for i in 0..60 {
                        let want = rng.gen_range(1..=6);
                        let hold = Duration::from_micros(rng.gen_range(0..3000));
                        let g = b.acquire(want, &format!("{w}-{i}")).await;
                        assert!(g.threads() >= 1 && g.threads() <= 4);
                        check(b.snapshot());
                        tokio::time::sleep(hold).await;
                        drop(g);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(b.snapshot(), Snapshot { total: 4, in_use: 0, floors: 0, external: 0, queued: 0 });
    });
}

#[test]
fn released_on_drop_on_panic_and_with_the_response_body() {
    let b = budget(4, 4, ThreadMode::Grant, 0);
    // A thread that panics while holding a grant gives it back while unwinding.
    let b2 = b.clone();
    let r = std::thread::spawn(move || {
        let _g = b2.grant_now(4, "p");
        panic!("boom");
    })
    .join();
    assert!(r.is_err());
    assert_eq!(b.snapshot().in_use, 0);
    // Carried by a response body (as the proxy does): held while the body lives.
    let g = b.grant_now(4, "body");
    let body = crate::http::body::Guarded::wrap(crate::cluster::upstream::full("answer"), (g,));
    assert_eq!(b.snapshot().in_use, 4);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let bytes = rt.block_on(async {
        use http_body_util::BodyExt;
        body.collect().await.unwrap().to_bytes()
    });
    assert_eq!(&bytes[..], b"answer");
    assert_eq!(b.snapshot().in_use, 0, "read to the end and dropped: released");
    // A body dropped unread (a client that went away).
    let body = crate::http::body::Guarded::wrap(crate::cluster::upstream::full("never read"), b.grant_now(2, "gone"));
    assert_eq!(b.snapshot().in_use, 2);
    drop(body);
    assert_eq!(b.snapshot().in_use, 0);
}

#[tokio::test]
async fn a_waiter_dropped_mid_wait_leaves_no_trace() {
    let b = budget(1, 1, ThreadMode::Queue, 10_000);
    let held = b.acquire(1, "held").await;
    // A waiter whose future is dropped while queued (the client disconnected).
    let b2 = b.clone();
    let w = tokio::spawn(async move { b2.acquire(1, "w").await.threads() });
    tokio::task::yield_now().await;
    assert_eq!(b.snapshot().queued, 1);
    w.abort();
    assert!(w.await.unwrap_err().is_cancelled());
    assert_eq!(b.snapshot().queued, 0);
    // A waiter that was handed a grant and dropped before it ran: the grant comes back.
    let b3 = b.clone();
    let w = tokio::spawn(async move { b3.acquire(1, "w2").await.threads() });
    tokio::task::yield_now().await;
    assert_eq!(b.snapshot().queued, 1);
    drop(held); // hands the thread to the waiter (synchronously, under the lock)
    assert_eq!(b.snapshot(), Snapshot { total: 1, in_use: 1, floors: 0, external: 0, queued: 0 });
    w.abort();
    let _ = w.await;
    assert_eq!(b.snapshot(), Snapshot { total: 1, in_use: 0, floors: 0, external: 0, queued: 0 });
}

#[tokio::test]
async fn queue_mode_waits_fifo_at_most_max_wait() {
    let b = budget(2, 2, ThreadMode::Queue, 150);
    let g = b.acquire(2, "first").await;
    assert_eq!(g.threads(), 2);
    // Spent: the next waits max_wait, then gets the 1-thread floor.
    let t = tokio::time::Instant::now();
    let late = b.acquire(2, "late").await;
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(150) && waited < Duration::from_secs(2), "{waited:?}");
    assert_eq!((late.threads(), late.is_floor()), (1, true));
    drop(late);
    // Two waiters; a release serves them in arrival order with what it frees.
    let (b1, b2) = (b.clone(), b.clone());
    let a = tokio::spawn(async move { b1.acquire(1, "a").await });
    tokio::task::yield_now().await;
    let c = tokio::spawn(async move { b2.acquire(2, "c").await });
    tokio::task::yield_now().await;
    assert_eq!(b.snapshot().queued, 2);
    let t = tokio::time::Instant::now();
    drop(g);
    let (ga, gc) = (a.await.unwrap(), c.await.unwrap());
    assert!(t.elapsed() < Duration::from_millis(140), "served by the release, not the timeout");
    assert_eq!((ga.threads(), gc.threads()), (1, 1), "a wanted 1, c got the 1 left");
    assert!(!ga.is_floor() && !gc.is_floor());
    assert!(ga.waited() > Duration::ZERO);
    drop((ga, gc));
    assert_eq!(b.snapshot(), Snapshot { total: 2, in_use: 0, floors: 0, external: 0, queued: 0 });
}

#[test]
fn grant_mode_never_waits() {
    let b = budget(1, 1, ThreadMode::Grant, 10_000);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let _g = rt.block_on(b.acquire(1, "a"));
    let t = Instant::now();
    let g = rt.block_on(b.acquire(1, "b"));
    assert!(g.is_floor() && t.elapsed() < Duration::from_millis(50));
}

#[test]
fn observe_counts_the_servers_other_queries() {
    let b = ReplicaBudget::new("1.1", 8, &cfg(8, 8, ThreadMode::Grant, 0, true), None);
    let mine = b.grant_now(3, "mine");
    // The server runs `mine` (3 threads, ours), `direct` (2) and another gateway's query (1).
    let ext = b.observe(&[("mine".into(), 3), ("direct".into(), 2), ("other-gw".into(), 1)]);
    assert_eq!(ext, 3, "our own query is counted once, by its grant");
    let next = b.grant_now(8, "next");
    assert_eq!(next.threads(), 2, "8 - 3 ours - 3 external");
    assert!(b.grant_now(8, "spent").is_floor());
    drop((mine, next));
    // Once ours ends, a poll that still lists it counts it as external (until the next poll).
    assert_eq!(b.observe(&[("mine".into(), 3)]), 3);
    assert_eq!(b.observe(&[]), 0);
}

#[test]
fn observe_frees_queued_waiters_when_external_load_leaves() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let b = ReplicaBudget::new("1.1", 4, &cfg(4, 4, ThreadMode::Queue, 10_000, true), None);
        b.observe(&[("direct".into(), 4)]);
        let b2 = b.clone();
        let w = tokio::spawn(async move { b2.acquire(4, "w").await.threads() });
        tokio::task::yield_now().await;
        assert_eq!(b.snapshot().queued, 1);
        b.observe(&[]);
        assert_eq!(w.await.unwrap(), 4);
    });
}

#[test]
fn set_total_wakes_waiters_and_moves_the_limit() {
    let b = budget(1, 8, ThreadMode::Grant, 0);
    let g = b.grant_now(8, "a");
    assert_eq!(g.threads(), 1);
    b.set_total(6);
    assert_eq!(b.grant_now(8, "b").threads(), 5);
}

#[test]
fn auto_reads_the_servers_cores() {
    // 18.16: the default, a plain number, changed = 0.
    assert_eq!(parse_max_threads("2", "0"), MaxThreadsSetting { cores: Some(2), default_max_threads: Some(2) });
    // Newer servers: 'auto(N)' (quoted in the value column).
    assert_eq!(
        parse_max_threads("'auto(16)'", "0"),
        MaxThreadsSetting { cores: Some(16), default_max_threads: Some(16) }
    );
    assert_eq!(parse_max_threads("auto(8)", "1"), MaxThreadsSetting { cores: Some(8), default_max_threads: Some(8) });
    // Set by a profile: not the cores, but still what queries get by default.
    assert_eq!(parse_max_threads("4", "1"), MaxThreadsSetting { cores: None, default_max_threads: Some(4) });
    assert_eq!(parse_max_threads("", ""), MaxThreadsSetting { cores: None, default_max_threads: None });
    assert_eq!(parse_max_threads("0", "0").cores, None);
    assert_eq!(probe::auto_total(2), 2);
    assert_eq!(probe::auto_total(8), 8);
    assert_eq!(probe::auto_total(0), 1);
    let local = std::thread::available_parallelism().unwrap().get();
    assert_eq!(probe::fallback_total(), local);
    // ClusterBudget: an auto total starts at the fallback, pending until learned.
    let cluster = crate::config::Cluster {
        name: "c".into(),
        user: "default".into(),
        password: String::new(),
        shards: vec![crate::config::Shard {
            weight: 1,
            replicas: vec![
                crate::config::ReplicaAddr { base: "http://h1:1".into(), https: false },
                crate::config::ReplicaAddr { base: "http://h2:1".into(), https: false },
            ],
        }],
        routing: None,
        native: Default::default(),
    };
    let mut t = cfg(0, 4, ThreadMode::Grant, 0, false);
    t.total = ThreadTotal::Auto;
    t.per_replica.insert("http://h2:1".into(), ThreadTotal::Fixed(6));
    let cb = ClusterBudget::new(&cluster, &t, None);
    assert_eq!(cb.get(0, 0).unwrap().total(), probe::fallback_total());
    assert!(cb.get(0, 0).unwrap().auto_pending.load(Ordering::Acquire));
    assert_eq!(cb.get(0, 1).unwrap().total(), 6, "per-replica override");
    assert!(!cb.get(0, 1).unwrap().auto_pending.load(Ordering::Acquire));
}

#[test]
fn observe_sql_per_server_version() {
    let v18 = ["is_initial_query", "query_id", "thread_numbers", "Settings.Names", "Settings.Values"];
    assert_eq!(processes_schema(v18), ProcessesSchema::Nested);
    assert_eq!(processes_schema(["query_id", "thread_ids", "Settings"]), ProcessesSchema::Map);
    assert_eq!(processes_schema(["query_id"]), ProcessesSchema::NoSettings);
    assert!(
        probe::observe_sql(ProcessesSchema::Nested).contains("Settings.Values[indexOf(Settings.Names, 'max_threads')]")
    );
    assert!(probe::observe_sql(ProcessesSchema::Map).contains("Settings['max_threads']"));
    assert!(probe::observe_sql(ProcessesSchema::Nested).contains("NOT LIKE 'chgw-observe-%'"));
    assert_eq!(parse_running("a\t4\nb\t0\n\ngarbage\n", 2), vec![("a".to_string(), 4), ("b".to_string(), 2)]);
}

/// Queue mode shares what a release frees among the waiters: two one-thread queries start, not
/// one query with both threads.
#[tokio::test]
async fn queue_mode_shares_freed_threads_among_waiters() {
    let b = budget(2, 16, ThreadMode::Queue, 10_000);
    let first = b.acquire(16, "first").await;
    assert_eq!(first.threads(), 2, "alone: the whole total");
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move { b.acquire(16, &format!("w{i}")).await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(b.snapshot().queued, 3);
    drop(first);
    tokio::task::yield_now().await;
    let s = b.snapshot();
    assert_eq!((s.in_use, s.queued), (2, 1), "2 freed threads, 3 waiters: two start with 1 each");
    let mut done = Vec::new();
    for w in waiters.into_iter().take(2) {
        done.push(w.await.unwrap());
    }
    assert!(done.iter().all(|g| g.threads() == 1), "{done:?}");
}

/// `total: adaptive`: the budget follows its controller (a probe moves the total and brings it
/// back), within the controller's bounds, and the invariant holds while it moves.
#[test]
fn an_adaptive_total_moves_the_budget() {
    let b = budget(2, 8, ThreadMode::Grant, 0);
    assert!(!b.is_adaptive());
    let tuning = adaptive::Tuning {
        window: Duration::ZERO,
        min_completions: 1,
        max_completions: 1,
        settle_min: 2,
        ..adaptive::Tuning::for_cores(2)
    };
    b.adapt_with(tuning, 2);
    assert!(b.is_adaptive());
    assert_eq!(b.total(), 2);
    let mut seen = BTreeSet::new();
    for i in 0..60 {
        let g = b.grant_now(8, &i.to_string());
        assert!(g.threads() <= b.total().max(1), "{g:?} over total {}", b.total());
        check(b.snapshot());
        drop(g);
        seen.insert(b.total());
    }
    assert!(seen.contains(&3), "it probed one step up: {seen:?}");
    assert!(seen.iter().all(|t| (1..=8).contains(t)), "{seen:?}");
    assert_eq!(b.snapshot().in_use, 0);
    // make_adaptive again (the server's cores became known) restarts where auto would be.
    b.make_adaptive(4);
    assert_eq!(b.total(), probe::auto_total(4));
}

#[test]
fn adaptive_in_config_starts_at_the_cores_until_the_server_tells() {
    let cluster = crate::config::Cluster {
        name: "c".into(),
        user: "default".into(),
        password: String::new(),
        shards: vec![crate::config::Shard {
            weight: 1,
            replicas: vec![crate::config::ReplicaAddr { base: "http://h1:1".into(), https: false }],
        }],
        routing: None,
        native: Default::default(),
    };
    let mut t = cfg(0, 4, ThreadMode::Queue, 0, false);
    t.total = ThreadTotal::Adaptive;
    let cb = ClusterBudget::new(&cluster, &t, None);
    let b = cb.get(0, 0).unwrap();
    assert!(b.is_adaptive());
    assert_eq!(b.total(), probe::fallback_total());
    assert!(b.auto_pending.load(Ordering::Acquire), "the server's cores are still to learn");
}

#[test]
fn server_cpu_figures_per_server_version() {
    // 18.16: no such metric.
    assert_eq!(probe::parse_cpu(""), None);
    // Newer servers: the machine's normalized times add up.
    let os = "OSUserTimeNormalized\t0.5\nOSSystemTimeNormalized\t0.25\nOSNiceTimeNormalized\t0\n";
    assert_eq!(probe::parse_cpu(os), Some(0.75));
    // In a container the cgroup's figures win.
    let both = format!("{os}CGroupUserTimeNormalized\t0.2\nCGroupSystemTimeNormalized\t0.1\n");
    assert!((probe::parse_cpu(&both).unwrap() - 0.3).abs() < 1e-9);
    assert_eq!(probe::parse_cpu("OSUserTimeNormalized\t3\n"), Some(1.0), "clamped");
    assert_eq!(probe::parse_cpu("OSUserTimeNormalized\tnan\ngarbage\n"), None);
    assert!(probe::CPU_SQL.contains("system.asynchronous_metrics"));
}

/// `max_per_query` not set: no grant is larger than the server's cores (a lone query gets the
/// cores, not the whole `auto` total); set, it is the cap as written.
#[test]
fn an_unset_max_per_query_caps_grants_at_the_cores() {
    let mut t = cfg(8, 16, ThreadMode::Queue, 1000, false);
    t.cap_at_cores = true;
    let b = ReplicaBudget::new("1.1", 8, &t, None);
    b.learn_cores(2);
    assert_eq!(b.max_per_query(), 2);
    let alone = b.grant_now(16, "alone");
    assert_eq!(alone.threads(), 2, "the cores, not the total of 8");
    let next = b.grant_now(16, "next");
    assert_eq!(next.threads(), 2);
    drop((alone, next));
    b.learn_cores(64);
    assert_eq!(b.max_per_query(), 16, "never above max_per_query");
    let fixed = budget(8, 16, ThreadMode::Queue, 1000);
    fixed.learn_cores(2);
    assert_eq!(fixed.grant_now(16, "set").threads(), 8, "max_per_query set: no cap at the cores");
}

/// Under the defaults (`threads: {}`), a storm of small queries is never held back: with the
/// total spent, every further query starts at once on the 1-thread floor. (In `queue` mode a
/// total of 2 runs a storm of `SELECT 1` at c=8 two at a time.)
#[tokio::test(start_paused = true)]
async fn default_mode_never_holds_a_storm_back() {
    let defaults = crate::config::Config::parse(
        "listen: 127.0.0.1:0\nclusters:\n  one:\n    shards:\n      - replicas: [http://127.0.0.1:9]\n    threads: {}\nusers:\n  - name: default\n    cluster: one\n",
        std::path::Path::new("g.yaml"),
    )
    .unwrap()
    .threads["one"]
        .clone();
    let b = ReplicaBudget::new("1.1", 2, &defaults, None);
    let started = tokio::time::Instant::now();
    let mut held = Vec::new();
    for i in 0..8 {
        held.push(b.acquire(2, &format!("q{i}")).await);
    }
    assert_eq!(started.elapsed(), Duration::ZERO, "a query waited for a thread");
    assert_eq!(held.iter().map(Grant::threads).collect::<Vec<_>>(), [2, 1, 1, 1, 1, 1, 1, 1]);
    assert_eq!(b.snapshot().queued, 0);
}

//! The cache's policy in paused time: merging, keeping, TTL, errors, leaving, bounds.

use super::*;
use crate::config::UserCache;
use std::future::Future;
use std::time::Duration;

fn cache() -> Cache {
    Cache::new(1 << 20, Default::default(), chstorm_proto::mem::Budget::new(64 << 20))
}

fn policy(ttl_ms: u64) -> UserCache {
    UserCache { ttl: Duration::from_millis(ttl_ms), max_entry_size: 1000, max_waiters: 3 }
}

fn key(s: &str) -> Key {
    Key(s.as_bytes().into())
}

fn lead(c: &Cache, k: &Key, p: &UserCache) -> (Feed, Waiter) {
    match c.lookup(k, "u", p) {
        Lookup::Lead(f, w) => (f, w),
        _ => panic!("expected a new group"),
    }
}

async fn read_all(w: &Waiter) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    loop {
        match w.next().await {
            Next::Chunks(c) => c.iter().for_each(|b| out.extend_from_slice(b)),
            Next::Done => return (out, None),
            Next::Broken(why) => return (out, Some(why)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn identical_reads_in_flight_share_one_answer_and_a_kept_one_until_its_ttl() {
    let c = cache();
    let (k, p) = (key("a"), policy(2000));
    let (mut feed, first) = lead(&c, &k, &p);
    feed.head(Head::status(200));
    feed.push(Bytes::from_static(b"hello ")).await;
    // A second and third join mid-answer: each reads from the first byte.
    let Lookup::Join(second) = c.lookup(&k, "u", &p) else { panic!("merged") };
    let Lookup::Join(third) = c.lookup(&k, "u", &p) else { panic!("merged") };
    assert!(matches!(c.lookup(&k, "u", &p), Lookup::Alone), "max_waiters: 3");
    feed.push(Bytes::from_static(b"world")).await;
    feed.finish(true);
    for w in [&first, &second, &third] {
        assert_eq!(w.head().await.unwrap().status, 200);
        assert_eq!(read_all(w).await, (b"hello world".to_vec(), None));
    }
    tokio::time::advance(Duration::from_millis(1999)).await;
    let Lookup::Hit(stored, age) = c.lookup(&k, "u", &p) else { panic!("kept") };
    assert_eq!((&stored.body[..], age), (&b"hello world"[..], Duration::from_millis(1999)));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(matches!(c.lookup(&k, "u", &p), Lookup::Lead(..)), "never past its TTL");
    let m = &c.shared.metrics;
    let n = |f: &prometheus_client::metrics::family::Family<
        UserLabel,
        prometheus_client::metrics::counter::Counter,
    >| { f.get_or_create(&UserLabel { user: "u".into() }).get() };
    assert_eq!((n(&m.hits), n(&m.merged), n(&m.misses)), (1, 2, 3));
}

#[tokio::test(start_paused = true)]
async fn merging_alone_keeps_nothing_and_an_error_goes_only_to_its_waiters() {
    let c = cache();
    let (k, p) = (key("a"), policy(0));
    let (feed, first) = lead(&c, &k, &p);
    let Lookup::Join(second) = c.lookup(&k, "u", &p) else { panic!("merged") };
    feed.head(Head::status(500));
    let mut feed = feed;
    feed.push(Bytes::from_static(b"Code: 60 ...")).await;
    feed.finish(false);
    for w in [&first, &second] {
        assert_eq!(w.head().await.unwrap().status, 500);
        assert_eq!(read_all(w).await.0, b"Code: 60 ...");
    }
    assert!(matches!(c.lookup(&k, "u", &p), Lookup::Lead(..)), "the next read runs anew");
    // With a TTL, an error is not kept either.
    let p = policy(5000);
    let (feed, _w) = lead(&c, &key("b"), &p);
    feed.head(Head::status(500));
    feed.finish(false);
    assert!(matches!(c.lookup(&key("b"), "u", &p), Lookup::Lead(..)));
    // A broken answer ends every waiter's with the error.
    let (mut feed, w) = lead(&c, &key("c"), &p);
    feed.head(Head::status(200));
    feed.push(Bytes::from_static(b"part")).await;
    feed.broken("the replica failed".into());
    assert_eq!(read_all(&w).await, (b"part".to_vec(), Some("the replica failed".into())));
    assert!(matches!(c.lookup(&key("c"), "u", &p), Lookup::Lead(..)));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_leaves_leaves_the_others_and_the_last_aborts_the_query() {
    let c = cache();
    let (k, p) = (key("a"), policy(1000));
    let (mut feed, first) = lead(&c, &k, &p);
    let Lookup::Join(second) = c.lookup(&k, "u", &p) else { panic!("merged") };
    let task = tokio::spawn(std::future::pending::<()>());
    feed.producer_slot().set(task.abort_handle());
    drop(first);
    assert!(feed.wanted(), "the first client leaving does not cancel the query");
    feed.head(Head::status(200));
    feed.push(Bytes::from_static(b"x")).await;
    assert!(matches!(second.next().await, Next::Chunks(_)));
    drop(second);
    assert!(!feed.wanted());
    assert!(task.await.unwrap_err().is_cancelled(), "the producer is aborted");
    feed.finish(true);
    assert!(matches!(c.lookup(&k, "u", &p), Lookup::Lead(..)), "an abandoned answer is not kept");
}

#[tokio::test(start_paused = true)]
async fn past_the_entry_limit_the_group_closes_and_goes_at_the_slowest_pace() {
    let c = cache();
    let (k, p) = (key("a"), policy(1000));
    let (mut feed, fast) = lead(&c, &k, &p);
    let Lookup::Join(slow) = c.lookup(&k, "u", &p) else { panic!("merged") };
    feed.head(Head::status(200));
    feed.push(Bytes::from(vec![b'a'; 600])).await;
    feed.push(Bytes::from(vec![b'b'; 600])).await;
    // Past 1000 bytes: no one new joins, and the answer will not be kept.
    assert!(matches!(c.lookup(&k, "u", &p), Lookup::Lead(..)), "a new group, not this one");
    assert!(matches!(fast.next().await, Next::Chunks(c) if c.len() == 2));
    // The producer's next chunk waits for the slow client.
    {
        let mut third = std::pin::pin!(feed.push(Bytes::from(vec![b'c'; 600])));
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(third.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        assert!(matches!(slow.next().await, Next::Chunks(c) if c.len() == 2));
        third.await;
    }
    feed.finish(true);
    assert_eq!(read_all(&fast).await.0.len(), 600);
    assert_eq!(read_all(&slow).await.0.len(), 600);
}

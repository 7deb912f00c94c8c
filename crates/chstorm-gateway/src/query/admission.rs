//! Admission: a concurrency limit with a bounded FIFO queue and a maximum wait, and a
//! requests-per-second token bucket. Past them a request is rejected at once (no timeout), so an
//! overloaded gateway answers 429/503 in well under a millisecond.
//!
//! Permits are RAII values: dropping the [`Permit`] (when the response body ends, fails or is
//! dropped by a disconnecting client) releases the slot. Nothing is decremented by hand.
//!
//! Both fronts admit a query in the same two steps: [`admit_rate`] (the authenticated user's
//! requests per second, refused at once), then [`admit_slots`] (a slot of the user's concurrency
//! limit, then one of the gateway-wide limit). A query waiting in its user's queue holds no slot
//! of the gateway's, so one user's backlog cannot take the slots other users need; a user's queue
//! costs the gateway only the waiting requests' heads (their bodies are read after admission). A
//! user with a cache (`users[].cache`) takes its slots only when its query needs a server, after
//! its request was read and planned (within the client buffer budget): a kept answer, or a place
//! among the clients of an identical read running now, waits in no queue. Each refusal is a
//! [`Refusal`] with its kind:
//! 503 / Code 202 for the gateway, 429 / Code 202 for a user.

use super::refusal::{Kind, Refusal};
use crate::config::User;
use crate::metrics::Metrics;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// The queue is full.
    QueueFull { in_flight: usize, queued: usize },
    /// Waited the maximum time for a slot.
    WaitedTooLong { waited: Duration },
    /// Over the requests-per-second limit.
    RateLimited { per_second: u32 },
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejected::QueueFull { in_flight, queued } => {
                write!(f, "{in_flight} queries in flight and {queued} waiting, the queue is full")
            }
            Rejected::WaitedTooLong { waited } => write!(f, "no slot free after waiting {} ms", waited.as_millis()),
            Rejected::RateLimited { per_second } => write!(f, "over the limit of {per_second} requests per second"),
        }
    }
}

/// A concurrency limit with a FIFO queue (tokio's semaphore is fair).
#[derive(Debug)]
pub struct Limiter {
    sem: Arc<Semaphore>,
    max: usize,
    queue_size: usize,
    max_wait: Duration,
    waiting: Arc<AtomicUsize>,
}

/// A held slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    _permit: OwnedSemaphorePermit,
}

struct Waiting(Arc<AtomicUsize>);
impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Limiter {
    /// `max` slots (at least 1), at most `queue_size` waiters, each for at most `max_wait`.
    pub fn new(max: usize, queue_size: usize, max_wait: Duration) -> Limiter {
        let max = max.max(1);
        Limiter {
            sem: Arc::new(Semaphore::new(max)),
            max,
            queue_size,
            max_wait,
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn in_flight(&self) -> usize {
        self.max - self.sem.available_permits()
    }

    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Takes a slot, waiting in line if needed.
    pub async fn acquire(&self) -> Result<Permit, Rejected> {
        if let Ok(p) = self.sem.clone().try_acquire_owned() {
            return Ok(Permit { _permit: p });
        }
        // Join the queue only if there is room in it.
        let n = self.waiting.fetch_add(1, Ordering::AcqRel);
        let guard = Waiting(self.waiting.clone());
        if n >= self.queue_size {
            drop(guard);
            return Err(Rejected::QueueFull { in_flight: self.in_flight(), queued: n });
        }
        let started = Instant::now();
        let res = tokio::time::timeout(self.max_wait, self.sem.clone().acquire_owned()).await;
        drop(guard);
        match res {
            Ok(Ok(p)) => Ok(Permit { _permit: p }),
            // The semaphore is never closed; treat it like a full queue if it were.
            Ok(Err(_)) => Err(Rejected::QueueFull { in_flight: self.in_flight(), queued: self.queued() }),
            Err(_) => Err(Rejected::WaitedTooLong { waited: started.elapsed() }),
        }
    }
}

/// A token bucket: `per_second` tokens a second, bursts up to `per_second`.
#[derive(Debug)]
pub struct RateLimit {
    per_second: u32,
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    pub fn new(per_second: u32) -> RateLimit {
        RateLimit { per_second, state: Mutex::new((per_second as f64, Instant::now())) }
    }

    /// Takes a token, or says the limit is reached.
    pub fn check(&self) -> Result<(), Rejected> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), Rejected> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let rate = self.per_second as f64;
        let tokens = (g.0 + now.saturating_duration_since(g.1).as_secs_f64() * rate).min(rate);
        if tokens >= 1.0 {
            *g = (tokens - 1.0, now);
            Ok(())
        } else {
            *g = (tokens, now);
            Err(Rejected::RateLimited { per_second: self.per_second })
        }
    }
}

/// A configured user with its admission state, resolved once per request (HTTP) or per
/// connection (native) by `super::auth::authenticate`.
pub struct UserRt {
    pub cfg: Arc<User>,
    pub limiter: Limiter,
    pub rate: Option<RateLimit>,
}

impl UserRt {
    /// The user `cfg` with its own limits (`max_concurrency`, `queue_size`, `queue_max_wait`,
    /// `requests_per_second`).
    pub fn new(cfg: &User) -> UserRt {
        UserRt {
            cfg: Arc::new(cfg.clone()),
            limiter: Limiter::new(cfg.max_concurrency, cfg.queue_size, cfg.queue_max_wait),
            rate: (cfg.requests_per_second > 0).then(|| RateLimit::new(cfg.requests_per_second)),
        }
    }
}

/// Takes a slot of the gateway-wide limit `global`, updating the queued and in-flight gauges.
async fn admit_global(global: &Limiter, metrics: &Metrics) -> Result<Permit, Refusal> {
    metrics.queued.set(global.queued() as i64);
    let permit = global.acquire().await.map_err(|why| Refusal::new(Kind::Overloaded, format!("overloaded: {why}")))?;
    metrics.in_flight.set(global.in_flight() as i64);
    Ok(permit)
}

/// Takes a token of `user`'s rate (`requests_per_second`), or refuses at once.
pub fn admit_rate(user: &UserRt) -> Result<(), Refusal> {
    match &user.rate {
        Some(rate) => rate.check().map_err(|why| user_refusal(user, why)),
        None => Ok(()),
    }
}

/// Takes a slot of `user`'s concurrency limit, waiting in its queue. A user with a cache takes
/// it only when its query needs a server: an answer kept or merged waits in no queue
/// (docs/GATEWAY.md, "Cache and merging").
async fn admit_slot(user: &UserRt) -> Result<Permit, Refusal> {
    user.limiter.acquire().await.map_err(|why| user_refusal(user, why))
}

/// A query's two slots, its user's and the gateway's, released together when dropped.
#[derive(Debug)]
pub struct Slots {
    _user: Permit,
    _global: Permit,
}

/// Why [`admit_slots`] refused: the user's limit, or the gateway's (with the user's slot taken,
/// to be held until the refusal is answered, as the fronts do for a query admitted at once).
#[derive(Debug)]
pub enum SlotRefusal {
    User(Refusal),
    Global(Refusal, Permit),
}

/// [`admit_slot`], then [`admit_global`]: the slots of a query whose rate was taken before.
pub async fn admit_slots(user: &UserRt, global: &Limiter, metrics: &Metrics) -> Result<Slots, SlotRefusal> {
    let permit = admit_slot(user).await.map_err(SlotRefusal::User)?;
    match admit_global(global, metrics).await {
        Ok(g) => Ok(Slots { _user: permit, _global: g }),
        Err(r) => Err(SlotRefusal::Global(r, permit)),
    }
}

fn user_refusal(user: &UserRt, why: Rejected) -> Refusal {
    Refusal::new(Kind::TooMany, format!("user '{}': {why}", user.cfg.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admits_up_to_the_limit_then_queues_then_rejects_fast() {
        let l = Limiter::new(2, 1, Duration::from_millis(200));
        let a = l.acquire().await.unwrap();
        let _b = l.acquire().await.unwrap();
        assert_eq!(l.in_flight(), 2);
        // The third waits in the queue; a fourth finds the queue full at once.
        let l = Arc::new(l);
        let l2 = l.clone();
        let waiter = tokio::spawn(async move { l2.acquire().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(l.queued(), 1);
        let t = Instant::now();
        assert!(matches!(l.acquire().await, Err(Rejected::QueueFull { .. })));
        assert!(t.elapsed() < Duration::from_millis(5), "rejection must be immediate");
        // Releasing a slot (RAII) admits the waiter in FIFO order.
        drop(a);
        assert!(waiter.await.unwrap().is_ok());
        assert_eq!(l.queued(), 0);
    }

    #[tokio::test]
    async fn a_waiter_gives_up_after_max_wait() {
        let l = Limiter::new(1, 10, Duration::from_millis(50));
        let _a = l.acquire().await.unwrap();
        let t = Instant::now();
        let e = l.acquire().await.unwrap_err();
        assert!(matches!(e, Rejected::WaitedTooLong { .. }), "{e}");
        assert!(t.elapsed() >= Duration::from_millis(50) && t.elapsed() < Duration::from_millis(150));
        assert_eq!(l.queued(), 0, "the waiter left the queue");
    }

    #[test]
    fn token_bucket_refills_at_its_rate() {
        let r = RateLimit::new(10);
        let t0 = Instant::now();
        for _ in 0..10 {
            r.check_at(t0).unwrap();
        }
        assert!(r.check_at(t0).is_err(), "burst is the rate");
        assert!(r.check_at(t0 + Duration::from_millis(50)).is_err(), "half a token");
        assert!(r.check_at(t0 + Duration::from_millis(110)).is_ok(), "a token after 100 ms");
    }
}

//! A one-time signal many tasks wait for: the drain's "shut down now" (`runtime::drain`), a
//! client's FIN (`http::client_fin`).
//!
//! A task waits in a [`Wait`] that it polls at each of its wake-ups (beside its other work, in a
//! `select!`). `tokio::sync::Notify` and `tokio_util`'s `CancellationToken` take a lock at every
//! such poll; that was paid on every request of every connection. A [`Wait`] registers its
//! task's waker once, and a poll by the same task after that costs a load and a comparison.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Fired once, and then for good.
#[derive(Debug, Default)]
pub struct Signal {
    fired: AtomicBool,
    waiters: Mutex<Waiters>,
}

/// The wakers of the waits that have polled, each in its own slot (a slab: no hashing).
#[derive(Debug, Default)]
struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Waiters {
    fn put(&mut self, slot: Option<usize>, waker: Waker) -> usize {
        // (A slot from before a `fire`, which emptied the slab, is no longer this wait's.)
        let i = slot.filter(|i| *i < self.slots.len()).or_else(|| self.free.pop()).unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[i] = Some(waker);
        i
    }

    fn remove(&mut self, slot: usize) {
        if let Some(w) = self.slots.get_mut(slot) {
            if w.take().is_some() {
                self.free.push(slot);
            }
        }
    }
}

impl Signal {
    /// Fires the signal and wakes every waiting task.
    pub fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        let waiters = std::mem::take(&mut *self.lock());
        waiters.slots.into_iter().flatten().for_each(Waker::wake);
    }

    pub fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Resolves once the signal has fired (at once if it has).
    pub fn wait(&self) -> Wait<&Signal> {
        Wait { signal: self, waiting: None }
    }

    /// [`Signal::wait`], owning a share of the signal.
    pub fn wait_owned(self: Arc<Self>) -> Wait<Arc<Signal>> {
        Wait { signal: self, waiting: None }
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().slots.iter().flatten().count()
    }
}

/// A wait for a [`Signal`]: registers its task's waker at its first poll, and again only when
/// polled by another task; leaves no trace when dropped.
#[derive(Debug)]
pub struct Wait<S: Deref<Target = Signal>> {
    signal: S,
    /// The slot of this wait and the waker registered in it.
    waiting: Option<(usize, Waker)>,
}

impl<S: Deref<Target = Signal> + Unpin> Future for Wait<S> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this.signal.is_fired() {
            return Poll::Ready(());
        }
        let slot = match &this.waiting {
            Some((_, w)) if w.will_wake(cx.waker()) => return Poll::Pending,
            Some((slot, _)) => Some(*slot),
            None => None,
        };
        let slot = this.signal.lock().put(slot, cx.waker().clone());
        this.waiting = Some((slot, cx.waker().clone()));
        // Fired between the first look and the registration: its wake-ups may have missed this.
        if this.signal.is_fired() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl<S: Deref<Target = Signal>> Drop for Wait<S> {
    fn drop(&mut self) {
        if let Some((slot, _)) = self.waiting.take() {
            if !self.signal.is_fired() {
                self.signal.lock().remove(slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn every_wait_is_woken_once_fired_and_gone_waits_leave_no_trace() {
        let s = Arc::new(Signal::default());
        let waits: Vec<_> = (0..5).map(|_| tokio::spawn(s.clone().wait_owned())).collect();
        // One wait given up before the signal, one polled from two tasks in turn.
        let gone = s.clone();
        tokio::spawn(async move { tokio::time::timeout(Duration::from_millis(10), gone.wait()).await })
            .await
            .unwrap()
            .unwrap_err();
        let mut moved = s.clone().wait_owned();
        assert!((&mut moved).now_or_never().is_none());
        let second = tokio::spawn(moved);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(s.waiting(), 6, "five waits and the moved one, in one slot each");
        assert!(!s.is_fired());
        s.fire();
        for w in waits {
            tokio::time::timeout(Duration::from_secs(1), w).await.expect("woken").unwrap();
        }
        tokio::time::timeout(Duration::from_secs(1), second).await.expect("woken").unwrap();
        assert_eq!(s.waiting(), 0);
        assert!(s.wait().now_or_never().is_some(), "after the signal: at once");
    }

    #[tokio::test]
    async fn a_wait_is_registered_once_per_task_and_dropped_without_a_trace() {
        let s = Signal::default();
        let mut w = s.wait();
        for _ in 0..3 {
            assert!(std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut w).poll(cx).is_pending())).await);
        }
        assert_eq!(s.waiting(), 1);
        drop(w);
        assert_eq!(s.waiting(), 0);
    }
}

//! Requests a [`Hang`](crate::FaultAction::Hang) fault holds: at most
//! [`Limits::max_held`](crate::Limits::max_held) at once, each released by the test, by its
//! timer, or dropped with its connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::faults::FaultId;

/// The held requests of one proxy.
#[derive(Debug)]
pub(crate) struct Held {
    inner: Mutex<HeldInner>,
    changed: Notify,
    capacity: usize,
}

#[derive(Debug, Default)]
struct HeldInner {
    next: u64,
    waiting: HashMap<u64, (FaultId, oneshot::Sender<()>)>,
}

/// One held request; dropping it (its connection closed) forgets it.
#[derive(Debug)]
pub(crate) struct Hold {
    held: Arc<Held>,
    key: u64,
    released: oneshot::Receiver<()>,
}

impl Held {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::default(),
            changed: Notify::new(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds one more request for `fault`; `None` when the bound is reached.
    pub(crate) fn hold(self: &Arc<Self>, fault: FaultId) -> Option<Hold> {
        let (tx, rx) = oneshot::channel();
        let key = {
            let mut inner = self.lock();
            if inner.waiting.len() >= self.capacity {
                return None;
            }
            let key = inner.next;
            inner.next = inner.next.wrapping_add(1);
            inner.waiting.insert(key, (fault, tx));
            key
        };
        self.changed.notify_waiters();
        Some(Hold {
            held: Arc::clone(self),
            key,
            released: rx,
        })
    }

    /// Releases the requests held by `fault` (every one for `None`); returns how many.
    pub(crate) fn release(&self, fault: Option<FaultId>) -> usize {
        let released: Vec<_> = {
            let mut inner = self.lock();
            let keys: Vec<u64> = inner
                .waiting
                .iter()
                .filter(|(_, (id, _))| fault.is_none_or(|f| f == *id))
                .map(|(key, _)| *key)
                .collect();
            keys.iter()
                .filter_map(|key| inner.waiting.remove(key))
                .collect()
        };
        let count = released.len();
        for (_, tx) in released {
            let _ = tx.send(());
        }
        self.changed.notify_waiters();
        count
    }

    /// Number of requests held now.
    pub(crate) fn count(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Waits until at least `n` requests are held or `timeout` passes; returns whether they were.
    pub(crate) async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.count() >= n;
            }
        }
    }
}

impl Hold {
    /// Waits until released, or for `release_after` when set.
    pub(crate) async fn wait(mut self, release_after: Option<Duration>) {
        match release_after {
            Some(after) => {
                let _ = tokio::time::timeout(after, &mut self.released).await;
            }
            None => {
                let _ = (&mut self.released).await;
            }
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let removed = self.held.lock().waiting.remove(&self.key).is_some();
        if removed {
            self.held.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_hold_ends_when_released_or_when_its_time_is_up() {
        let held = Arc::new(Held::new(4));
        let (a, b) = (FaultId(1), FaultId(2));
        let first = held.hold(a).unwrap();
        let second = held.hold(b).unwrap();
        assert_eq!(held.count(), 2);
        let started = Instant::now();
        let waiting = tokio::spawn(first.wait(None));
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!waiting.is_finished());
        assert_eq!(held.release(Some(a)), 1);
        waiting.await.unwrap();
        assert_eq!(held.count(), 1);
        second.wait(Some(Duration::from_secs(30))).await;
        assert_eq!(started.elapsed(), Duration::from_secs(3630));
        assert_eq!(held.count(), 0);
        assert_eq!(held.release(None), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn holds_are_bounded_and_forgotten_when_dropped() {
        let held = Arc::new(Held::new(2));
        let one = held.hold(FaultId(1)).unwrap();
        let _two = held.hold(FaultId(1)).unwrap();
        assert!(held.hold(FaultId(1)).is_none());
        drop(one);
        assert_eq!(held.count(), 1);
        assert!(held.hold(FaultId(1)).is_some());
        assert!(held.wait_for(1, Duration::from_secs(1)).await);
        assert!(!held.wait_for(3, Duration::from_secs(1)).await);
    }
}

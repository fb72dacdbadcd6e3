//! The leader elector on virtual time (tokio's paused clock) against a fake Lease API shared by
//! several replicas: acquire, renew, takeover after a leader dies, fencing while renewals fail or
//! hang, recovery, release on shutdown. A timeline of every replica's write permission checks
//! the one property that matters: no two replicas may write at the same instant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use tier_kube::lease::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, ElectionConfig, Elector,
    LeaderEvent, LeaseApi, LeaseCallError,
};
use tokio::time::{Instant, sleep};

const LEASE: Duration = DEFAULT_LEASE_DURATION;
const DEADLINE: Duration = DEFAULT_RENEW_DEADLINE;
const RETRY: Duration = DEFAULT_RETRY_PERIOD;

/// How a replica's calls behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Answered at once.
    None,
    /// Refused at once (a 503).
    Fail,
    /// Never answered.
    Hang,
}

/// One stored Lease with a resourceVersion, and a log of the writes it accepted.
#[derive(Default)]
struct Inner {
    lease: Option<Lease>,
    rv: u64,
    /// (when, by whom, the holder written).
    writes: Vec<(Instant, String, Option<String>)>,
    /// The longest a call was left waiting, from start to answer or abandonment.
    longest_call: Duration,
    /// Every call: (by whom, which).
    calls: Vec<(String, &'static str)>,
}

#[derive(Clone, Default)]
struct Store(Arc<Mutex<Inner>>);

impl Store {
    fn holder(&self) -> Option<String> {
        let inner = self.0.lock().unwrap();
        inner
            .lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone())
    }

    fn writes_by(&self, who: &str) -> Vec<Instant> {
        let inner = self.0.lock().unwrap();
        inner
            .writes
            .iter()
            .filter(|(_, by, _)| by == who)
            .map(|(at, _, _)| *at)
            .collect()
    }

    fn last_write_by(&self, who: &str) -> Instant {
        *self.writes_by(who).last().expect("no write")
    }

    fn longest_call(&self) -> Duration {
        self.0.lock().unwrap().longest_call
    }

    /// How many calls of each kind `who` made: (get, create, replace).
    fn calls_by(&self, who: &str) -> (usize, usize, usize) {
        let inner = self.0.lock().unwrap();
        let count = |what: &str| {
            inner
                .calls
                .iter()
                .filter(|(by, w)| by == who && *w == what)
                .count()
        };
        (count("get"), count("create"), count("replace"))
    }
}

/// One replica's view of the store: its name and its faults.
#[derive(Clone)]
struct Replica {
    store: Store,
    name: String,
    fault: Arc<Mutex<Fault>>,
}

/// Records how long a call waited, even when the caller drops it.
struct CallTimer<'a> {
    store: &'a Store,
    started: Instant,
}

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        let mut inner = self.store.0.lock().unwrap();
        inner.longest_call = inner.longest_call.max(took);
    }
}

impl Replica {
    fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    async fn call<T>(
        &self,
        what: &'static str,
        op: impl FnOnce(&mut Inner) -> Result<T, LeaseCallError>,
    ) -> Result<T, LeaseCallError> {
        self.store
            .0
            .lock()
            .unwrap()
            .calls
            .push((self.name.clone(), what));
        let _timer = CallTimer {
            store: &self.store,
            started: Instant::now(),
        };
        let fault = *self.fault.lock().unwrap();
        match fault {
            Fault::None => op(&mut self.store.0.lock().unwrap()),
            Fault::Fail => Err(LeaseCallError::Failed("503 ServiceUnavailable".into())),
            Fault::Hang => std::future::pending().await,
        }
    }

    fn store_lease(&self, inner: &mut Inner, mut lease: Lease) -> Lease {
        inner.rv += 1;
        lease.metadata.resource_version = Some(inner.rv.to_string());
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        inner
            .writes
            .push((Instant::now(), self.name.clone(), holder));
        inner.lease = Some(lease.clone());
        lease
    }
}

#[async_trait]
impl LeaseApi for Replica {
    async fn get(&self) -> Result<Option<Lease>, LeaseCallError> {
        self.call("get", |inner| Ok(inner.lease.clone())).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseCallError> {
        let lease = lease.clone();
        self.call("create", |inner| {
            if inner.lease.is_some() {
                return Err(LeaseCallError::Conflict("409 AlreadyExists".into()));
            }
            Ok(self.store_lease(inner, lease))
        })
        .await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseCallError> {
        let lease = lease.clone();
        self.call("replace", |inner| {
            let stored = inner
                .lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            if stored.is_none() || stored != lease.metadata.resource_version {
                return Err(LeaseCallError::Conflict("409 Conflict".into()));
            }
            Ok(self.store_lease(inner, lease))
        })
        .await
    }
}

/// Every change of every replica's write permission, in virtual time.
#[derive(Clone, Default)]
struct Timeline(Arc<Mutex<Vec<(Instant, String, bool)>>>);

impl Timeline {
    /// Follows `elector`'s permission under `name`.
    fn follow(&self, name: &str, elector: &Elector) {
        let mut rx = elector.may_write();
        let (log, name) = (self.clone(), name.to_owned());
        tokio::spawn(async move {
            loop {
                let value = *rx.borrow_and_update();
                log.0
                    .lock()
                    .unwrap()
                    .push((Instant::now(), name.clone(), value));
                if rx.changed().await.is_err() {
                    log.0.lock().unwrap().push((Instant::now(), name, false));
                    return;
                }
            }
        });
    }

    /// Asserts that no two replicas were permitted at one instant.
    fn assert_one_writer(&self) {
        let log = self.0.lock().unwrap();
        let mut leading: Vec<String> = Vec::new();
        for (at, name, value) in log.iter() {
            leading.retain(|n| n != name);
            if *value {
                leading.push(name.clone());
            }
            assert!(
                leading.len() <= 1,
                "two writers at {at:?}: {leading:?}\n{log:#?}"
            );
        }
    }

    /// When `name` was last permitted (turned true), if ever.
    fn gained(&self, name: &str) -> Option<Instant> {
        let log = self.0.lock().unwrap();
        let mut last = None;
        let mut was = false;
        for (at, n, value) in log.iter().filter(|(_, n, _)| n == name) {
            if *value && !was {
                last = Some(*at);
            }
            was = *value;
            let _ = n;
        }
        last
    }

    /// When `name` last lost the permission (turned false after true), if ever.
    fn lost(&self, name: &str) -> Option<Instant> {
        let log = self.0.lock().unwrap();
        let mut last = None;
        let mut was = false;
        for (at, _, value) in log.iter().filter(|(_, n, _)| n == name) {
            if !*value && was {
                last = Some(*at);
            }
            was = *value;
        }
        last
    }

    /// How many times `name` turned true.
    fn gains(&self, name: &str) -> usize {
        let log = self.0.lock().unwrap();
        let mut was = false;
        let mut gains = 0;
        for (_, _, value) in log.iter().filter(|(_, n, _)| n == name) {
            if *value && !was {
                gains += 1;
            }
            was = *value;
        }
        gains
    }
}

struct Cluster {
    store: Store,
    timeline: Timeline,
}

impl Cluster {
    fn new() -> Self {
        Self {
            store: Store::default(),
            timeline: Timeline::default(),
        }
    }

    fn replica(&self, name: &str) -> Replica {
        Replica {
            store: self.store.clone(),
            name: name.into(),
            fault: Arc::new(Mutex::new(Fault::None)),
        }
    }

    /// Starts an elector for `name` with the default timing, followed by the timeline.
    fn start(&self, name: &str) -> (Replica, Elector) {
        let replica = self.replica(name);
        let elector = Elector::spawn(
            replica.clone(),
            ElectionConfig::new("kube-system", "tierd", name),
        )
        .unwrap();
        self.timeline.follow(name, &elector);
        (replica, elector)
    }
}

/// Waits (virtual time) until `elector` may write, failing after `within`.
async fn leads(elector: &Elector, within: Duration) {
    let mut rx = elector.may_write();
    tokio::time::timeout(within, rx.wait_for(|v| *v))
        .await
        .expect("did not lead in time")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn one_replica_acquires_by_create_at_once_and_renews_every_retry_period() {
    let cluster = Cluster::new();
    let start = Instant::now();
    let (_a, a) = cluster.start("a");
    leads(&a, Duration::from_millis(1)).await;
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(cluster.store.holder().as_deref(), Some("a"));
    sleep(Duration::from_millis(60_500)).await;
    let writes = cluster.store.writes_by("a");
    // The create at 0 s, then one renewal every 2 s.
    assert_eq!(writes.len(), 31, "{writes:?}");
    for pair in writes.windows(2) {
        assert_eq!(pair[1] - pair[0], RETRY);
    }
    assert_eq!(
        cluster.timeline.gains("a"),
        1,
        "the permission never flapped"
    );
    assert!(*a.may_write().borrow());
    let status = a.status().borrow().clone();
    assert!(status.leading);
    assert_eq!(status.holder.as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn in_steady_state_each_replica_makes_one_call_per_retry_period() {
    let cluster = Cluster::new();
    let (_a, a) = cluster.start("a");
    leads(&a, Duration::from_millis(1)).await;
    let (_b, _b_elector) = cluster.start("b");
    sleep(Duration::from_millis(60_500)).await;
    // The leader: a read and a create, then one update per retry period and no read; the
    // standby: one read per retry period and no write.
    assert_eq!(cluster.store.calls_by("a"), (1, 1, 30));
    assert_eq!(cluster.store.calls_by("b"), (31, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_a_killed_leaders_lease_once_it_expired() {
    let cluster = Cluster::new();
    let (_a, a) = cluster.start("a");
    leads(&a, Duration::from_secs(1)).await;
    // Off a's beat: b sees each renewal 1.3 s after it was made.
    sleep(Duration::from_millis(1300)).await;
    let (_b, b) = cluster.start("b");
    sleep(Duration::from_secs(30)).await;
    assert!(!*b.may_write().borrow(), "b stands by while a renews");
    assert!(b.status().borrow().to_string().contains("held by a"));
    // SIGKILL: the loop is gone without a word.
    drop(a);
    let last = cluster.store.last_write_by("a");
    leads(&b, LEASE + RETRY + RETRY).await;
    let took_over = cluster.timeline.gained("b").unwrap();
    assert!(
        took_over >= last + LEASE,
        "b took over {:?} after a's last renewal, before the lease expired",
        took_over - last
    );
    assert!(
        took_over <= last + LEASE + RETRY,
        "b took over {:?} after a's last renewal: later than lease duration + retry period",
        took_over - last
    );
    assert_eq!(cluster.store.holder().as_deref(), Some("b"));
    cluster.timeline.assert_one_writer();
}

/// While the leader's calls fail (`fault`), it stops writing no later than the renew deadline
/// after its last confirmed renewal, and the standby starts no earlier than the lease duration
/// after it; then the standby leads and the old leader, healed, stays standby.
async fn fencing(fault: Fault) {
    let cluster = Cluster::new();
    let (a_api, a) = cluster.start("a");
    leads(&a, Duration::from_secs(1)).await;
    let (_b, b) = cluster.start("b");
    sleep(Duration::from_millis(20_500)).await;
    a_api.set(fault);
    let last = cluster.store.last_write_by("a");
    // Watch every instant from here: a stops at its deadline.
    sleep(DEADLINE).await;
    assert!(
        !*a.may_write().borrow(),
        "a still writes after the renew deadline"
    );
    let stopped = cluster.timeline.lost("a").unwrap();
    assert!(
        stopped <= last + DEADLINE,
        "a stopped {:?} after its last renewal",
        stopped - last
    );
    assert!(!*b.may_write().borrow());
    leads(&b, LEASE + RETRY).await;
    let started = cluster.timeline.gained("b").unwrap();
    assert!(
        started >= last + LEASE,
        "b started {:?} after a's last renewal",
        started - last
    );
    assert!(started - stopped >= LEASE - DEADLINE, "the fencing gap");
    // a's calls work again: it reads b's Lease and stays standby.
    a_api.set(Fault::None);
    sleep(Duration::from_secs(60)).await;
    assert!(!*a.may_write().borrow());
    assert!(*b.may_write().borrow());
    assert_eq!(cluster.store.holder().as_deref(), Some("b"));
    cluster.timeline.assert_one_writer();
    // No call waited past half the renew deadline (kube-scheduler's lock timeout).
    assert!(
        cluster.store.longest_call() <= DEADLINE / 2,
        "{:?}",
        cluster.store.longest_call()
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_stops_writing_before_the_standby_can_start() {
    fencing(Fault::Fail).await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_hang_stops_writing_at_the_deadline_while_the_call_hangs() {
    fencing(Fault::Hang).await;
}

#[tokio::test(start_paused = true)]
async fn nobody_writes_while_the_api_server_is_away_and_one_does_once_it_is_back() {
    let cluster = Cluster::new();
    let (a_api, a) = cluster.start("a");
    leads(&a, Duration::from_secs(1)).await;
    let (b_api, b) = cluster.start("b");
    sleep(Duration::from_secs(11)).await;
    for (api, fault) in [(&a_api, Fault::Hang), (&b_api, Fault::Fail)] {
        api.set(fault);
    }
    let last = cluster.store.last_write_by("a");
    sleep(Duration::from_secs(120)).await;
    assert!(!*a.may_write().borrow());
    assert!(!*b.may_write().borrow());
    assert!(cluster.timeline.lost("a").unwrap() <= last + DEADLINE);
    assert_eq!(cluster.timeline.gains("b"), 0, "b never wrote while away");
    a_api.set(Fault::None);
    b_api.set(Fault::None);
    sleep(DEADLINE).await;
    let leaders = [&a, &b].iter().filter(|e| *e.may_write().borrow()).count();
    assert_eq!(leaders, 1, "exactly one replica writes again");
    sleep(Duration::from_secs(60)).await;
    assert_eq!(
        [&a, &b].iter().filter(|e| *e.may_write().borrow()).count(),
        1
    );
    cluster.timeline.assert_one_writer();
}

#[tokio::test(start_paused = true)]
async fn release_on_shutdown_hands_the_lease_over_within_one_retry_period() {
    let cluster = Cluster::new();
    let (_a, mut a) = cluster.start("a");
    let mut a_events = a.events().unwrap();
    leads(&a, Duration::from_secs(1)).await;
    let (_b, b) = cluster.start("b");
    sleep(Duration::from_millis(7_300)).await;
    let released_at = Instant::now();
    a.release().await;
    assert_eq!(Instant::now(), released_at, "one call, answered at once");
    assert_eq!(cluster.store.holder(), None, "the holder is cleared");
    leads(&b, RETRY).await;
    let took_over = cluster.timeline.gained("b").unwrap();
    assert!(
        took_over - released_at <= RETRY,
        "{:?}",
        took_over - released_at
    );
    cluster.timeline.assert_one_writer();
    let mut seen = Vec::new();
    while let Some(event) = a_events.recv().await {
        seen.push(event);
    }
    assert_eq!(
        seen,
        [
            LeaderEvent::Acquired {
                identity: "a".into()
            },
            LeaderEvent::Released {
                identity: "a".into()
            }
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_releases_without_holding_writes_nothing() {
    let cluster = Cluster::new();
    let (_a, a) = cluster.start("a");
    leads(&a, Duration::from_secs(1)).await;
    let (_b, b) = cluster.start("b");
    sleep(Duration::from_secs(5)).await;
    b.release().await;
    assert!(cluster.store.writes_by("b").is_empty());
    assert_eq!(cluster.store.holder().as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn three_replicas_under_flapping_faults_never_write_together() {
    let cluster = Cluster::new();
    let replicas: Vec<(Replica, Elector)> =
        ["a", "b", "c"].iter().map(|n| cluster.start(n)).collect();
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..200 {
        let (api, _) = &replicas[rng.usize(..replicas.len())];
        api.set(match rng.u8(..4) {
            0 => Fault::Fail,
            1 => Fault::Hang,
            _ => Fault::None,
        });
        sleep(Duration::from_millis(rng.u64(100..6000))).await;
    }
    for (api, _) in &replicas {
        api.set(Fault::None);
    }
    sleep(LEASE + DEADLINE).await;
    let leaders = replicas
        .iter()
        .filter(|(_, e)| *e.may_write().borrow())
        .count();
    assert_eq!(leaders, 1);
    cluster.timeline.assert_one_writer();
    let total: usize = ["a", "b", "c"]
        .iter()
        .map(|n| cluster.timeline.gains(n))
        .sum();
    assert!(
        total >= 2,
        "the faults moved the lead at least once ({total})"
    );
}

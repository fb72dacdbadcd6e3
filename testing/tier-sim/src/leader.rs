//! Leadership changes and Lease expiry as faults: replicas of tierd, each a real driver gated
//! by a real elector (`tier_kube::lease`, kube-scheduler's timing) on one simulated Lease, on
//! the in-memory cluster, on virtual time.
//!
//! A seed draws a [`LeaderScenario`]: two or three replicas starting within 5 s, each with a
//! lagging cache; windows in which one replica's Lease calls fail (a 503) or hang (until the
//! elector cuts them); replicas killed (no release: their Lease expires) or terminated
//! (driver stopped, then the Lease released, as `tierd run` does on SIGTERM); an adversary
//! deleting or editing Tiers until `quiet_at`. The checks ([`LeaderReport::violations`]):
//!
//! - **one writer**: no two replicas are permitted to write at one instant;
//! - **gated writes**: every write a replica starts, it starts while permitted (so after a
//!   leader's renew deadline, at most one replica starts writes);
//! - **recovery**: once the faults and edits stop, exactly one replica leads and the store holds
//!   the desired Tiers within [`recovery_bound`].
//!
//! [`LeaderSabotage::IgnoreLease`] gives the second replica a gate that is always open, to
//! prove the checks can fail.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use tier_core::{DesiredSet, Driver, DriverConfig, Mode, in_sync};
use tier_kube::lease::{ElectionConfig, Elector, LeaseApi, LeaseCallError};
use tier_memory::{CacheConfig, MemoryCluster};
use tier_runtime::TokioClock;
use tokio::sync::watch;

use crate::sim::SimError;

/// How a replica ends before the run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL: the driver and the elector vanish at once; the Lease is not released.
    Kill(Duration),
    /// SIGTERM: the driver stops, then the Lease is released.
    Terminate(Duration),
}

impl Stop {
    fn at(self) -> Duration {
        match self {
            Stop::Kill(at) | Stop::Terminate(at) => at,
        }
    }
}

/// One replica of a [`LeaderScenario`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaPlan {
    /// Its name: the elector's identity and the writer's client.
    pub name: String,
    /// When it starts.
    pub start_at: Duration,
    /// Its cache's lag.
    pub lag: Duration,
    /// Its jitter seed.
    pub seed: u64,
    /// Whether and how it ends early.
    pub stop: Option<Stop>,
}

/// A window in which one replica's Lease calls fail or hang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseFault {
    /// Whose calls.
    pub replica: usize,
    /// From when.
    pub from: Duration,
    /// Until when.
    pub until: Duration,
    /// Hang (until the elector's call timeout) rather than fail at once.
    pub hang: bool,
}

/// What the adversary does to a Tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Deletes it.
    Delete,
    /// Changes its description.
    Describe,
}

/// A seeded world of replicas electing a leader; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderScenario {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The replicas, in start order.
    pub replicas: Vec<ReplicaPlan>,
    /// The Lease faults.
    pub faults: Vec<LeaseFault>,
    /// The adversary's edits: when, which of Antrea's six Tiers, what.
    pub edits: Vec<(Duration, usize, Edit)>,
    /// When faults and edits stop.
    pub quiet_at: Duration,
}

/// Deliberate breakage, to prove the checks can fail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeaderSabotage {
    /// None.
    #[default]
    None,
    /// The second replica's driver ignores the Lease (its gate is always open).
    IgnoreLease,
}

/// How long after `quiet_at` one replica must lead and the store be as desired: a dead
/// leader's Lease expires (lease duration + retry period), a replica fenced by faults acquires
/// it again, and the new leader's writes go (the core's own bound, 60 s, is generous).
pub fn recovery_bound(config: &ElectionConfig) -> Duration {
    config.lease_duration
        + config.renew_deadline
        + config.retry_period * 2
        + Duration::from_secs(60)
}

/// The elector's timing in these worlds: kube-scheduler's (15 s, 10 s, 2 s).
pub fn election(name: &str) -> ElectionConfig {
    ElectionConfig::new("kube-system", "tierd", name)
}

fn millis(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    let max = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rng.u64(..=max))
}

impl LeaderScenario {
    /// Draws a scenario from `seed`.
    pub fn generate(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x6c65_6164_6572);
        let quiet_at = Duration::from_secs(rng.u64(90..=300));
        let count = rng.usize(2..=3);
        let replicas = (0..count)
            .map(|i| {
                // Replica 0 runs to the end, so someone is left to lead.
                let stop = (i > 0).then(|| {
                    let at = Duration::from_secs(rng.u64(10..quiet_at.as_secs()));
                    match rng.u8(..4) {
                        0 => Some(Stop::Kill(at)),
                        1 => Some(Stop::Terminate(at)),
                        _ => None,
                    }
                });
                ReplicaPlan {
                    name: format!("tierd-{i}"),
                    start_at: millis(&mut rng, Duration::from_secs(5)),
                    lag: millis(&mut rng, Duration::from_secs(1)),
                    seed: rng.u64(..),
                    stop: stop.flatten(),
                }
            })
            .collect();
        let faults = (0..rng.usize(..=6))
            .map(|_| {
                let from = millis(&mut rng, quiet_at);
                let until = (from + Duration::from_secs(rng.u64(1..=40))).min(quiet_at);
                LeaseFault {
                    replica: rng.usize(..count),
                    from,
                    until,
                    hang: rng.bool(),
                }
            })
            .collect();
        let mut edits = Vec::new();
        let mut at = Duration::from_secs(rng.u64(1..=10));
        while at < quiet_at {
            let edit = if rng.bool() {
                Edit::Delete
            } else {
                Edit::Describe
            };
            edits.push((at, rng.usize(..6), edit));
            at += Duration::from_secs(rng.u64(2..=15));
        }
        Self {
            seed,
            replicas,
            faults,
            edits,
            quiet_at,
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let stops: Vec<String> = self
            .replicas
            .iter()
            .filter_map(|r| r.stop.map(|s| format!("{} {s:?}", r.name)))
            .collect();
        format!(
            "seed {}: {} replicas, {} Lease faults, stops [{}], {} edits, quiet at {:?}",
            self.seed,
            self.replicas.len(),
            self.faults.len(),
            stops.join(", "),
            self.edits.len(),
            self.quiet_at
        )
    }
}

/// What one seed showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderReport {
    /// The scenario, in words.
    pub scenario: String,
    /// Every violated check, in words; empty when the seed passed.
    pub violations: Vec<String>,
    /// Tier writes started, per replica in plan order.
    pub writes: Vec<usize>,
    /// How many times a replica became leader, summed.
    pub acquisitions: usize,
    /// From `quiet_at` to one leader and the desired store, if within the bound.
    pub recovered_after: Option<Duration>,
}

impl LeaderReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs seed `seed` on a fresh paused current-thread runtime.
///
/// # Errors
///
/// [`SimError::Runtime`] if no runtime can be built.
pub fn run_seed(seed: u64, sabotage: LeaderSabotage) -> Result<LeaderReport, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)?;
    Ok(runtime.block_on(simulate(&LeaderScenario::generate(seed), sabotage)))
}

/// The one simulated Lease, with a resourceVersion.
#[derive(Default)]
struct LeaseStore {
    lease: Option<Lease>,
    rv: u64,
}

/// A replica's view of the Lease: its faults, on the run's clock.
struct SimLeases {
    store: Arc<Mutex<LeaseStore>>,
    replica: usize,
    faults: Vec<LeaseFault>,
    start: tokio::time::Instant,
}

impl SimLeases {
    async fn call<T>(
        &self,
        op: impl FnOnce(&mut LeaseStore) -> Result<T, LeaseCallError>,
    ) -> Result<T, LeaseCallError> {
        let now = self.start.elapsed();
        let fault = self
            .faults
            .iter()
            .find(|f| f.replica == self.replica && f.from <= now && now < f.until);
        match fault {
            Some(f) if f.hang => std::future::pending().await,
            Some(_) => Err(LeaseCallError::Failed("503 ServiceUnavailable".into())),
            None => op(&mut self.store.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }
}

fn store(store: &mut LeaseStore, mut lease: Lease) -> Lease {
    store.rv += 1;
    lease.metadata.resource_version = Some(store.rv.to_string());
    store.lease = Some(lease.clone());
    lease
}

#[async_trait]
impl LeaseApi for SimLeases {
    async fn get(&self) -> Result<Option<Lease>, LeaseCallError> {
        self.call(|s| Ok(s.lease.clone())).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseCallError> {
        let lease = lease.clone();
        self.call(|s| {
            if s.lease.is_some() {
                return Err(LeaseCallError::Conflict("409 AlreadyExists".into()));
            }
            Ok(store(s, lease))
        })
        .await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseCallError> {
        let lease = lease.clone();
        self.call(|s| {
            let stored = s
                .lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            if stored.is_none() || stored != lease.metadata.resource_version {
                return Err(LeaseCallError::Conflict("409 Conflict".into()));
            }
            Ok(store(s, lease))
        })
        .await
    }
}

/// Every change of every replica's permission: (when, replica, permitted).
type Timeline = Arc<Mutex<Vec<(Instant, usize, bool)>>>;

fn follow(timeline: &Timeline, replica: usize, mut rx: watch::Receiver<bool>) {
    let timeline = Arc::clone(timeline);
    tokio::spawn(async move {
        loop {
            let value = *rx.borrow_and_update();
            let now = tokio::time::Instant::now().into_std();
            timeline
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((now, replica, value));
            if rx.changed().await.is_err() {
                let now = tokio::time::Instant::now().into_std();
                timeline
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((now, replica, false));
                return;
            }
        }
    });
}

/// A running replica.
struct Running {
    ensurer: Option<tier_runtime::Ensurer>,
    elector: Option<Elector>,
    /// The sabotaged gate's sender, kept open.
    _open: Option<watch::Sender<bool>>,
}

async fn simulate(scenario: &LeaderScenario, sabotage: LeaderSabotage) -> LeaderReport {
    let start = tokio::time::Instant::now();
    // No admission: the adversary may delete system Tiers (Antrea's webhook would refuse).
    let cluster = MemoryCluster::builder().without_admission().build();
    let desired = DesiredSet::antrea();
    let leases = Arc::new(Mutex::new(LeaseStore::default()));
    let timeline: Timeline = Arc::default();
    let mut violations = Vec::new();

    // The adversary, until quiet.
    let edits = scenario.edits.clone();
    let (adversary, editing) = (cluster.clone(), desired.clone());
    let edits = tokio::spawn(async move {
        for (at, tier, edit) in edits {
            tokio::time::sleep_until(start + at).await;
            let Some(name) = editing.tiers().get(tier).map(|t| t.name.clone()) else {
                continue;
            };
            let _ = match edit {
                Edit::Delete => adversary.delete(&name).map(drop),
                Edit::Describe => adversary
                    .edit(&name, |t| t.description = "edited by someone".into())
                    .map(drop),
            };
        }
    });

    // Every start and stop, in time order.
    let mut steps: Vec<(Duration, usize, bool)> = Vec::new();
    for (i, plan) in scenario.replicas.iter().enumerate() {
        steps.push((plan.start_at, i, true));
        if let Some(stop) = plan.stop {
            steps.push((stop.at(), i, false));
        }
    }
    steps.sort_by_key(|(at, i, starts)| (*at, !*starts, *i));
    let mut running: Vec<Running> = scenario
        .replicas
        .iter()
        .map(|_| Running {
            ensurer: None,
            elector: None,
            _open: None,
        })
        .collect();
    for (at, i, starts) in steps {
        tokio::time::sleep_until(start + at).await;
        let (Some(plan), Some(slot)) = (scenario.replicas.get(i), running.get_mut(i)) else {
            continue;
        };
        if starts {
            let api = SimLeases {
                store: Arc::clone(&leases),
                replica: i,
                faults: scenario.faults.clone(),
                start,
            };
            let Ok(elector) = Elector::spawn(api, election(&plan.name)) else {
                violations.push(format!("{}: the elector did not start", plan.name));
                continue;
            };
            follow(&timeline, i, elector.may_write());
            let cache = cluster.cache(CacheConfig::default().lag(plan.lag));
            let config = DriverConfig {
                seed: Some(plan.seed),
                ..DriverConfig::default()
            };
            let Ok(mut driver) = Driver::new(
                cache,
                cluster.writer(&plan.name),
                TokioClock,
                desired.clone(),
                config,
            ) else {
                violations.push(format!("{}: the driver did not start", plan.name));
                continue;
            };
            if sabotage == LeaderSabotage::IgnoreLease && i == 1 {
                let (open, gate) = watch::channel(true);
                driver.leadership(gate);
                slot._open = Some(open);
            } else {
                driver.leadership(elector.may_write());
            }
            slot.ensurer = Some(tier_runtime::spawn_driver(driver, Mode::Continuous));
            slot.elector = Some(elector);
        } else {
            match plan.stop {
                Some(Stop::Kill(_)) => {
                    // Both at once; calls in flight are dropped with the driver.
                    if let Some(ensurer) = slot.ensurer.take() {
                        ensurer.cancellation().cancel();
                    }
                    slot.elector = None;
                }
                Some(Stop::Terminate(_)) => {
                    if let Some(ensurer) = slot.ensurer.take() {
                        ensurer.shutdown().await;
                    }
                    if let Some(elector) = slot.elector.take() {
                        elector.release().await;
                    }
                }
                None => {}
            }
        }
    }

    tokio::time::sleep_until(start + scenario.quiet_at).await;
    edits.abort();
    let quiet = tokio::time::Instant::now();
    let bound = recovery_bound(&election("bound"));
    let mut recovered_after = None;
    while quiet.elapsed() <= bound {
        let leaders = running
            .iter()
            .filter(|r| r.elector.as_ref().is_some_and(|e| *e.may_write().borrow()))
            .count();
        let store_ok = desired.tiers().iter().all(|want| {
            cluster
                .get(&want.name)
                .is_some_and(|have| in_sync(want, &have))
        });
        if leaders == 1 && store_ok {
            recovered_after = Some(quiet.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if recovered_after.is_none() {
        violations.push(format!(
            "no single leader with the desired Tiers within {bound:?} after quiet"
        ));
    }

    let calls = cluster.calls();
    for slot in &mut running {
        if let Some(ensurer) = slot.ensurer.take() {
            ensurer.shutdown().await;
        }
        if let Some(elector) = slot.elector.take() {
            elector.release().await;
        }
    }
    let timeline = timeline
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    violations.extend(one_writer(&timeline, scenario, start.into_std()));
    let writes: Vec<usize> = scenario
        .replicas
        .iter()
        .map(|plan| calls.for_client(&plan.name).total())
        .collect();
    for (i, plan) in scenario.replicas.iter().enumerate() {
        for record in calls.for_client(&plan.name).records() {
            if !permitted(&timeline, i, record.started) {
                violations.push(format!(
                    "{} started a {:?} of {} at {:?} while not permitted",
                    plan.name,
                    record.verb,
                    record.name,
                    record.started.saturating_duration_since(start.into_std())
                ));
            }
        }
    }
    let acquisitions = (0..scenario.replicas.len())
        .map(|i| gains(&timeline, i))
        .sum();
    LeaderReport {
        scenario: scenario.describe(),
        violations,
        writes,
        acquisitions,
        recovered_after,
    }
}

/// Violations of "no two replicas permitted at one instant".
fn one_writer(
    timeline: &[(Instant, usize, bool)],
    scenario: &LeaderScenario,
    start: Instant,
) -> Vec<String> {
    let mut leading: Vec<usize> = Vec::new();
    let mut violations = Vec::new();
    for (at, replica, value) in timeline {
        leading.retain(|r| r != replica);
        if *value {
            leading.push(*replica);
        }
        if leading.len() > 1 {
            let names: Vec<&str> = leading
                .iter()
                .filter_map(|r| scenario.replicas.get(*r).map(|p| p.name.as_str()))
                .collect();
            let at = at.saturating_duration_since(start);
            violations.push(format!("two replicas permitted at {at:?}: {names:?}"));
        }
    }
    violations
}

/// Whether `replica` was permitted at `at` (or lost the permission at that very instant).
fn permitted(timeline: &[(Instant, usize, bool)], replica: usize, at: Instant) -> bool {
    let mut state = false;
    for (when, _, value) in timeline.iter().filter(|(_, r, _)| *r == replica) {
        if *when > at {
            break;
        }
        if *when == at && state && !*value {
            return true;
        }
        state = *value;
    }
    state
}

fn gains(timeline: &[(Instant, usize, bool)], replica: usize) -> usize {
    let mut was = false;
    let mut gains = 0;
    for (_, _, value) in timeline.iter().filter(|(_, r, _)| *r == replica) {
        if *value && !was {
            gains += 1;
        }
        was = *value;
    }
    gains
}

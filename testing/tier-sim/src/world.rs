//! The world of one run: the cluster as the scenario starts it, the adversary and the webhook's
//! recovery, the end of the fault phase, and a follower of the store.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tier_core::{DesiredSet, DriverConfig, ObservedTier, TierLister, TierSpec, in_sync};
use tier_memory::faults::{forbidden_on, unavailable};
use tier_memory::{
    ANTREA_TIERS, Admission, CacheConfig, Faults, MemoryCluster, RandomFaults, Resource, Verb,
};
use tokio::task::JoinHandle;
use tokio::time::sleep_until;

use crate::check::Journal;
use crate::liveness::{Liveness, LivenessOutcome};
use crate::scenario::{AdversaryAction, Scenario, TargetedEffect};

/// The user RBAC refuses in the worlds with permission faults.
const USER: &str = "system:serviceaccount:kube-system:tierd";

/// Builds the cluster of `scenario`: its starting Tiers, webhook and faults.
pub(crate) fn build_cluster(scenario: &Scenario) -> MemoryCluster {
    let cluster = MemoryCluster::builder()
        .with_tiers(scenario.start.iter().cloned())
        .admission(Admission::antrea().reading(scenario.webhook.view))
        .lag(scenario.webhook.lag)
        .build();
    script_faults(&cluster.faults(), scenario, ANTREA_TIERS);
    if !scenario.webhook.unreachable_until.is_zero() {
        cluster.set_webhook_reachable(false);
    }
    cluster
}

/// Scripts the random and targeted faults of `scenario` (until `quiet` clears them), RBAC's
/// refusals worded for `resource`. Shared by every controller's worlds.
pub(crate) fn script_faults(faults: &Faults, scenario: &Scenario, resource: Resource) {
    let plan = &scenario.faults;
    let mut random = RandomFaults::new(scenario.seed)
        .failing(plan.fail)
        .losing_responses(plan.lose_response)
        .latency(plan.max_latency);
    if let Some(after) = plan.retry_after {
        random = random.retry_after(after);
    }
    faults.random(random);
    for verb in [Verb::Create, Verb::Update] {
        if plan.hangs > 0 {
            faults.fail_next(verb, plan.hangs).hang();
        }
    }
    for fault in &scenario.targeted {
        let mut rule = faults.fail_next(fault.verb, 0).forever();
        if let Some(name) = &fault.name {
            rule = rule.for_name(name.clone());
        }
        match fault.effect {
            TargetedEffect::Unavailable => drop(rule.with(unavailable())),
            TargetedEffect::Hang => drop(rule.hang()),
            TargetedEffect::Forbidden => {
                drop(rule.with(forbidden_on(resource, fault.verb, USER)));
            }
        }
    }
}

/// The prune controller of [`Scenario::pruned`]: deletes the Tier `name` at the very instant the
/// store shows it, so its deletion is queued for every lagging cache together with the create.
async fn prune(cluster: MemoryCluster, name: String, journal: Journal) {
    let store = cluster.cache(CacheConfig::default());
    loop {
        let snapshot = store.snapshot();
        if snapshot.observe(&name).resource_version().is_some() {
            let result = cluster.delete(&name).map(drop);
            journal.note(|| format!("prune controller deletes {name}: {result:?}"));
        }
        store.changed(snapshot.generation).await;
    }
}

/// Plays the adversary's schedule, the webhook's recovery and the prune controller.
pub(crate) async fn play_world(cluster: MemoryCluster, scenario: Scenario, journal: Journal) {
    let pruner = match scenario.pruned.clone() {
        Some(name) => futures::future::Either::Left(prune(cluster.clone(), name, journal.clone())),
        None => futures::future::Either::Right(std::future::pending::<()>()),
    };
    let schedule = play_schedule(cluster, scenario, journal);
    // The schedule ends; the pruner never does: both stop when the world is aborted.
    futures::join!(schedule, pruner);
}

async fn play_schedule(cluster: MemoryCluster, scenario: Scenario, journal: Journal) {
    let mut webhook_down = !scenario.webhook.unreachable_until.is_zero();
    for event in &scenario.adversary {
        if webhook_down && scenario.webhook.unreachable_until <= event.at {
            sleep_until(journal.at(scenario.webhook.unreachable_until)).await;
            reachable(&cluster, &journal);
            webhook_down = false;
        }
        sleep_until(journal.at(event.at)).await;
        let result = match &event.action {
            AdversaryAction::Squat { name, priority } => cluster
                .create_raw(&TierSpec::new(name, *priority, "a user Tier"))
                .map(drop),
            AdversaryAction::Unsquat { name } | AdversaryAction::DeleteSystem { name } => {
                cluster.delete(name).map(drop)
            }
            AdversaryAction::EditPriority { name, priority } => {
                cluster.edit(name, |t| t.priority = *priority).map(drop)
            }
            AdversaryAction::EditDescription { name, description } => cluster
                .edit(name, |t| description.clone_into(&mut t.description))
                .map(drop),
        };
        journal.note(|| format!("adversary {:?}: {result:?}", event.action));
    }
    if webhook_down {
        sleep_until(journal.at(scenario.webhook.unreachable_until)).await;
        reachable(&cluster, &journal);
    }
}

fn reachable(cluster: &MemoryCluster, journal: &Journal) {
    cluster.set_webhook_reachable(true);
    journal.note(|| "webhook reachable".to_owned());
}

/// Stops faults, makes the webhook reachable and deletes every Tier outside the desired set.
pub(crate) fn quiet(cluster: &MemoryCluster, desired: &DesiredSet, journal: &Journal) {
    cluster.faults().clear();
    cluster.set_webhook_reachable(true);
    let blockers: Vec<String> = cluster
        .tiers()
        .into_keys()
        .filter(|name| desired.get(name).is_none())
        .collect();
    for name in &blockers {
        // Nothing else deletes Tiers now: it exists.
        let _ = cluster.delete(name);
    }
    journal.note(|| format!("quiet: faults stopped, blockers removed: {blockers:?}"));
}

/// Since when the store has matched the desired set (exactly, and by priority only).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Settle {
    /// Exactly desired since, if so now.
    pub(crate) exact: Option<Duration>,
    /// Every priority desired since, if so now.
    pub(crate) priorities: Option<Duration>,
}

/// What follows the store: since when it matched the desired set, and the liveness tracker.
#[derive(Debug)]
pub(crate) struct StoreWatch {
    task: JoinHandle<()>,
    settle: Arc<Mutex<Settle>>,
    liveness: Arc<Mutex<Liveness>>,
    journal: Journal,
}

impl StoreWatch {
    /// Stops following; the settle times, and the liveness outcome with every episode still
    /// open judged now.
    pub(crate) fn finish(self) -> (Settle, LivenessOutcome) {
        self.task.abort();
        let settle = *self.settle.lock().unwrap_or_else(PoisonError::into_inner);
        let liveness = self
            .liveness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .finish(self.journal.elapsed());
        (settle, liveness)
    }
}

/// Follows every change of the store through a cache without lag, recording since when it has
/// matched the desired set, and measuring per-Tier liveness (violations reported only when
/// `enforce_liveness`).
pub(crate) fn observe_store(
    cluster: &MemoryCluster,
    desired: &DesiredSet,
    scenario: &Scenario,
    driver: &DriverConfig,
    journal: &Journal,
    enforce_liveness: bool,
) -> StoreWatch {
    let settle = Arc::new(Mutex::new(Settle::default()));
    let liveness = Arc::new(Mutex::new(Liveness::new(
        desired,
        scenario,
        driver,
        journal,
        enforce_liveness,
    )));
    let cache = cluster.cache(CacheConfig::default());
    let (cluster, desired, task_journal, shared, live) = (
        cluster.clone(),
        desired.clone(),
        journal.clone(),
        Arc::clone(&settle),
        Arc::clone(&liveness),
    );
    let task = tokio::spawn(async move {
        let journal = task_journal;
        loop {
            let snapshot = cache.snapshot();
            let generation = snapshot.generation;
            let now = journal.elapsed();
            live.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .observe(&snapshot, now);
            let exact = store_matches(&cluster, &desired, in_sync);
            let priorities = store_matches(&cluster, &desired, |want, seen| {
                want.priority == seen.priority
            });
            {
                let mut settle = shared.lock().unwrap_or_else(PoisonError::into_inner);
                settle.exact = exact.then(|| settle.exact.unwrap_or(now));
                settle.priorities = priorities.then(|| settle.priorities.unwrap_or(now));
            }
            cache.changed(generation).await;
        }
    });
    StoreWatch {
        task,
        settle,
        liveness,
        journal: journal.clone(),
    }
}

pub(crate) fn store_matches(
    cluster: &MemoryCluster,
    desired: &DesiredSet,
    same: impl Fn(&TierSpec, &ObservedTier) -> bool,
) -> bool {
    desired.tiers().iter().all(|want| {
        cluster
            .get(&want.name)
            .is_some_and(|seen| same(want, &seen))
    })
}

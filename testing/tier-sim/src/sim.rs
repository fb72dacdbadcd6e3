//! Running one seed: a current-thread tokio runtime on paused (virtual) time, an in-memory
//! cluster, the scenario's initializers behind the checking decorators, its faults and adversary
//! until `quiet_at`, then convergence.
//!
//! Timeline of a run:
//!
//! 1. `0`: the cluster holds the scenario's starting Tiers; random faults on every call; the
//!    webhook possibly unreachable; a world task plays the adversary's schedule.
//! 2. each initializer starts at its `start_at` with its own lagging cache and its own writer.
//! 3. `quiet_at`: faults stop, the webhook is reachable, every Tier outside the desired set is
//!    deleted (the blockers), the adversary stops.
//! 4. tierd: every initializer must report `all_converged` with the store exactly desired and
//!    every cache caught up within [`Scenario::convergence_bound`]; then nothing may be written
//!    for [`SimConfig::settle`]. Baselines: they get [`SimConfig::limit`] to finish.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tier_core::{DesiredSet, DriverConfig, Mode, StatusHandle, in_sync};
use tier_memory::{CacheConfig, MemoryCluster, MemoryLister, SyncMode, Verb};
use tier_runtime::{Ensurer, TokioClock};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::baseline::{CallTimeout, antrea_new, antrea_old};
use crate::bounds::fleet_probe_limit;
use crate::check::{
    CheckingLister, CheckingWriter, Checks, Invariant, Journal, Violation, secs, watch_status,
};
use crate::sabotage::{Sabotage, Saboteur};
use crate::scenario::{InitializerPlan, Scenario, TargetedEffect};
use crate::world::{build_cluster, observe_store, play_world, quiet, store_matches};
use crate::worlds::World;

/// The initializer a run simulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Strategy {
    /// tierd: `tier_core::Driver` in continuous mode.
    Tierd,
    /// Antrea before the fix ([`antrea_old`]).
    AntreaOld,
    /// Antrea since the fix ([`antrea_new`]).
    AntreaNew,
}

impl Strategy {
    /// Every strategy, tierd first.
    pub const ALL: [Strategy; 3] = [Strategy::Tierd, Strategy::AntreaOld, Strategy::AntreaNew];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Tierd => "tierd",
            Strategy::AntreaOld => "antrea-old",
            Strategy::AntreaNew => "antrea-new",
        }
    }
}

/// How runs are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Which initializer runs.
    pub strategy: Strategy,
    /// tierd's driver configuration (the convergence bound derives from its timing; each
    /// initializer gets its own seed).
    pub driver: DriverConfig,
    /// How long after `quiet_at` the baselines get to finish.
    pub limit: Duration,
    /// How long tierd must stay converged without writing once it converged.
    pub settle: Duration,
    /// Breaks tierd on purpose (ignored by the baselines), to test the checks.
    pub sabotage: Option<Sabotage>,
    /// Keep a timeline of the run in the report.
    pub verbose: bool,
    /// The family of worlds seeds are drawn from ([`run_seed`]).
    pub world: World,
    /// Check the per-Tier liveness and write bound invariants of issue 15 ([`crate::bounds`])
    /// in the random worlds too, for tierd (always on in the issue-15 worlds, for every
    /// strategy). On by default.
    pub issue_15_checks: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            strategy: Strategy::Tierd,
            driver: DriverConfig::default(),
            limit: Duration::from_secs(300),
            settle: Duration::from_secs(30),
            sabotage: None,
            verbose: false,
            world: World::Random,
            issue_15_checks: true,
        }
    }
}

impl SimConfig {
    /// The same configuration for `strategy`.
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }
}

/// What one run of one seed showed.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The strategy.
    pub strategy: Strategy,
    /// Whether the scenario resembles issue 6694 (see [`Scenario::resembles_issue_6694`]).
    pub issue_6694: bool,
    /// Whether an adversary acted.
    pub adversary: bool,
    /// When faults stopped (from the start of the run).
    pub quiet_at: Duration,
    /// tierd's convergence bound after `quiet_at`.
    pub bound: Duration,
    /// The violations (the first ones, see `violation_count`).
    pub violations: Vec<Violation>,
    /// How many violations were found in all.
    pub violation_count: usize,
    /// tierd: every initializer reported all Tiers converged with the store exactly desired.
    /// Baselines: the store was exactly desired at the end.
    pub converged: bool,
    /// tierd: how long after `quiet_at` everything was at rest and converged.
    pub converged_after_quiet: Option<Duration>,
    /// Since when (from the start) the store has been exactly as desired, if it is at the end.
    pub settled_at: Option<Duration>,
    /// Since when (from the start) every desired Tier has had its desired priority, if so at the
    /// end (description ignored).
    pub priorities_settled_at: Option<Duration>,
    /// Write calls the initializers made (creates and updates, failed ones included).
    pub writes: usize,
    /// Of those, the ones that reported an error.
    pub failed_writes: usize,
    /// Of those, the ones the server's admission denied.
    pub denied_writes: usize,
    /// Of the denied ones, creates whose writer's own cache already showed the reason when the
    /// call started ("doomed": the writer could have known).
    pub doomed_writes: usize,
    /// The desired Tiers not exactly as desired at the start: the least writes a perfect
    /// initializer needs when nothing else changes them.
    pub start_drift: usize,
    /// Baselines: initializers still retrying when the run ended (livelocked or blocked).
    pub unfinished: usize,
    /// tierd: corrections its statuses reported in all (writes of a Tier it had written
    /// successfully before), summed over initializers. Without an adversary nothing changes a
    /// Tier back, so any correction is spurious.
    pub corrections: u64,
    /// The family the world was drawn from.
    pub world: World,
    /// The most writes one initializer sent for one Tier within 300 s, and the Tier.
    pub peak_tier_writes: Option<(String, usize)>,
    /// The longest a Tier the world allowed to be written waited to be in sync, from the
    /// allowance (see [`crate::bounds`]), and the Tier; `None` if no allowance was checked.
    pub longest_wait: Option<(String, Duration)>,
    /// Creates sent while RBAC refused every create (summed over initializers).
    pub forbidden_creates: usize,
    /// The timeline, when verbose.
    pub trace: Vec<String>,
}

impl SeedReport {
    /// No violation, and converged.
    pub fn passed(&self) -> bool {
        self.violation_count == 0 && self.converged
    }
}

/// The simulation could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The tokio runtime could not be built. Not retryable.
    #[error("cannot build the simulation runtime")]
    Runtime(#[source] std::io::Error),
    /// The driver configuration is out of range.
    #[error(transparent)]
    Config(#[from] tier_core::ConfigError),
}

/// Runs the scenario of `seed` in the family [`SimConfig::world`] (see
/// [`Scenario::generate_in`]).
///
/// # Errors
///
/// [`SimError::Runtime`] if no runtime can be built.
pub fn run_seed(seed: u64, config: &SimConfig) -> Result<SeedReport, SimError> {
    run_scenario(&Scenario::generate_in(config.world, seed), config)
}

/// Runs `scenario` on a fresh current-thread runtime with paused time. Deterministic: the same
/// scenario and configuration always give the same report.
///
/// # Errors
///
/// [`SimError::Runtime`] if no runtime can be built, [`SimError::Config`] if the driver
/// configuration is out of range.
pub fn run_scenario(scenario: &Scenario, config: &SimConfig) -> Result<SeedReport, SimError> {
    config.driver.validate()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)?;
    Ok(runtime.block_on(simulate(scenario, config)))
}

/// Runs every `(seed, strategy)` pair on `jobs` threads; reports come back ordered by seed,
/// then strategy.
///
/// # Errors
///
/// The first [`SimError`].
pub fn run_seeds(
    seeds: &[u64],
    strategies: &[Strategy],
    config: &SimConfig,
    jobs: usize,
) -> Result<Vec<SeedReport>, SimError> {
    let mut reports = in_parallel(seeds, strategies, jobs, |seed, strategy| {
        run_seed(seed, &config.clone().with_strategy(strategy))
    })?;
    reports.sort_by_key(|r| (r.seed, r.strategy));
    Ok(reports)
}

/// Runs `run` on every `(seed, strategy)` pair on `jobs` threads, in no particular order:
/// the one pool every controller's runs share.
///
/// # Errors
///
/// The first [`SimError`].
pub(crate) fn in_parallel<S, R>(
    seeds: &[u64],
    strategies: &[S],
    jobs: usize,
    run: impl Fn(u64, S) -> Result<R, SimError> + Sync,
) -> Result<Vec<R>, SimError>
where
    S: Copy + Send + Sync,
    R: Send,
{
    let work: Vec<(u64, S)> = seeds
        .iter()
        .flat_map(|&seed| strategies.iter().map(move |&s| (seed, s)))
        .collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(work.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, work.len().max(1)) {
            scope.spawn(|| {
                while let Some(&(seed, strategy)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = run(seed, strategy);
                    results
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(result);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .collect()
}

/// One started initializer.
struct Running {
    cache: MemoryLister,
    name: String,
    task: Task,
    checks: Arc<Checks>,
}

enum Task {
    Tierd {
        ensurer: Ensurer,
        status: StatusHandle,
    },
    Baseline(JoinHandle<()>),
}

async fn simulate(scenario: &Scenario, config: &SimConfig) -> SeedReport {
    let journal = Journal::new(config.verbose);
    let desired = DesiredSet::antrea();
    let cluster = build_cluster(scenario);
    let bound = scenario.convergence_bound(&config.driver);
    journal.note(|| scenario.describe());
    journal.note(|| format!("convergence bound after quiet: {}", secs(bound)));

    // The per-Tier invariants are tierd's promises: in the random worlds they are checked for
    // tierd (the baselines' report keeps comparing what they do there); in the issue-15 worlds
    // for every strategy, whose violations are the comparison.
    let per_tier = per_tier_checks(config, scenario);
    let store = observe_store(
        &cluster,
        &desired,
        scenario,
        &config.driver,
        &journal,
        per_tier,
    );
    let world = tokio::spawn(play_world(
        cluster.clone(),
        scenario.clone(),
        journal.clone(),
    ));
    let mut plans = scenario.initializers.clone();
    plans.sort_by_key(|p| p.start_at);
    let mut running = Vec::new();
    for plan in &plans {
        sleep_until(journal.at(plan.start_at)).await;
        running.push(start(plan, scenario, &cluster, &desired, &journal, config));
    }

    sleep_until(journal.at(scenario.quiet_at)).await;
    world.abort();
    quiet(&cluster, &desired, &journal);
    let quiet_at = journal.at(scenario.quiet_at);

    let mut converged_after_quiet = None;
    let mut unfinished = 0;
    match config.strategy {
        Strategy::Tierd => {
            let rested = rest(&mut running, &cluster, &desired, quiet_at + bound).await;
            match rested {
                Some(at) => {
                    converged_after_quiet = Some(at.saturating_duration_since(quiet_at));
                    journal.note(|| "converged and at rest".to_owned());
                    settle_down(&mut running, &cluster, &journal, config.settle).await;
                    contests_clear(&running, &journal, &config.driver).await;
                }
                None => journal.violation(
                    "harness",
                    Invariant::NoConvergence,
                    format!(
                        "not converged {} after faults stopped: {}",
                        secs(bound),
                        unconverged(&running, &cluster, &desired)
                    ),
                ),
            }
        }
        Strategy::AntreaOld | Strategy::AntreaNew => {
            unfinished = finish_baselines(&mut running, quiet_at + config.limit).await;
            journal.note(|| format!("{unfinished} initializer(s) still retrying"));
        }
    }

    let calls = cluster.calls();
    let forbidden_creates = fleet_probe(scenario, &running, &calls, &config.driver, &journal);
    let peak_tier_writes = running
        .iter()
        .filter_map(|r| r.checks.peak_writes())
        .max_by_key(|(_, n)| *n);
    for r in &running {
        if calls.for_client(&r.name).peak_in_flight() > 1 {
            journal.violation(
                &r.name,
                Invariant::OverlappingCalls,
                "the call log saw two calls for one Tier in flight at once".to_owned(),
            );
        }
    }
    let corrections = running
        .iter()
        .filter_map(|r| match &r.task {
            Task::Tierd { status, .. } => Some(status.current()),
            Task::Baseline(_) => None,
        })
        .flat_map(|status| status.tiers)
        .map(|t| t.corrections)
        .sum();
    let (denied_writes, doomed_writes) = running
        .iter()
        .map(|r| r.checks.denials())
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    for r in running {
        match r.task {
            Task::Tierd { ensurer, .. } => {
                ensurer.shutdown().await;
            }
            Task::Baseline(task) => task.abort(),
        }
    }
    let (settle, liveness) = store.finish();

    let start_drift = desired
        .tiers()
        .iter()
        .filter(|want| !scenario.start.contains(want))
        .count();
    let converged = match config.strategy {
        Strategy::Tierd => converged_after_quiet.is_some(),
        Strategy::AntreaOld | Strategy::AntreaNew => settle.exact.is_some(),
    };
    SeedReport {
        seed: scenario.seed,
        strategy: config.strategy,
        issue_6694: scenario.resembles_issue_6694(),
        adversary: scenario.has_adversary(),
        quiet_at: scenario.quiet_at,
        bound,
        violations: journal.violations(),
        violation_count: journal.violation_count(),
        converged,
        converged_after_quiet,
        settled_at: settle.exact,
        priorities_settled_at: settle.priorities,
        writes: calls.total(),
        failed_writes: calls.records().iter().filter(|r| r.is_failed()).count(),
        denied_writes,
        doomed_writes,
        start_drift,
        unfinished,
        corrections,
        world: scenario.world,
        peak_tier_writes,
        longest_wait: liveness.longest,
        forbidden_creates,
        trace: journal.trace(),
    }
}

/// Whether the per-Tier invariants of issue 15 are checked in this run (see [`SimConfig`]).
fn per_tier_checks(config: &SimConfig, scenario: &Scenario) -> bool {
    scenario.world != World::Random
        || (config.issue_15_checks && config.strategy == Strategy::Tierd)
}

/// While RBAC refuses every create (until `quiet_at`), each initializer may send its first wave
/// (the creates it started before the first refusal answered), then one create per step of the
/// Forbidden backoff for the whole fleet ([`fleet_probe_limit`]). Returns the
/// creates sent then, summed over initializers (0 when no world refuses creates).
fn fleet_probe(
    scenario: &Scenario,
    running: &[Running],
    calls: &tier_memory::CallLog,
    driver: &DriverConfig,
    journal: &Journal,
) -> usize {
    let refused = scenario.targeted.iter().any(|f| {
        f.verb == Verb::Create && f.name.is_none() && f.effect == TargetedEffect::Forbidden
    });
    if !refused {
        return 0;
    }
    let quiet = journal.at(scenario.quiet_at).into_std();
    let mut total = 0;
    for r in running {
        let mine = calls.for_client(&r.name);
        let creates: Vec<_> = mine
            .records()
            .iter()
            .filter(|c| c.verb == Verb::Create && c.started < quiet)
            .cloned()
            .collect();
        let sent = creates.len();
        total += sent;
        // Creates started before the first refusal answered could not know of it: that first
        // wave (at most one per missing Tier) is allowed, then one per backoff step.
        let first_refusal = creates.iter().filter_map(|c| c.finished).min();
        let first_wave = creates
            .iter()
            .filter(|c| first_refusal.is_none_or(|at| c.started <= at))
            .count();
        let plan = scenario.initializers.iter().find(|p| p.name == r.name);
        let from = plan.map_or(Duration::ZERO, |p| p.start_at + p.sync_after);
        let limit = first_wave.saturating_sub(1)
            + fleet_probe_limit(
                &driver.machine.forbidden_backoff,
                scenario.quiet_at.saturating_sub(from),
            );
        if sent > limit {
            journal.violation(
                &r.name,
                Invariant::FleetProbe,
                format!(
                    "{sent} creates while RBAC refused every create for {}, more than one per \
                     Forbidden backoff step for the fleet ({limit})",
                    secs(scenario.quiet_at.saturating_sub(from))
                ),
            );
        }
    }
    total
}

/// Starts one initializer: its cache and writer, behind the checking decorators, and the lag
/// changes of its cache.
fn start(
    plan: &InitializerPlan,
    scenario: &Scenario,
    cluster: &MemoryCluster,
    desired: &DesiredSet,
    journal: &Journal,
    config: &SimConfig,
) -> Running {
    let sync = if plan.sync_after.is_zero() {
        SyncMode::Immediate
    } else {
        SyncMode::After(plan.sync_after)
    };
    let cache = cluster.cache(CacheConfig::default().sync(sync).lag(plan.lag));
    if !scenario.lag_changes.is_empty() {
        let (changes, lagging, journal) =
            (scenario.lag_changes.clone(), cache.clone(), journal.clone());
        tokio::spawn(async move {
            for change in changes {
                sleep_until(journal.at(change.at)).await;
                lagging.set_lag(change.lag);
                journal.note(|| format!("cache lag now {:?}", change.lag));
            }
        });
    }
    let checks = Checks::new(
        &plan.name,
        desired.clone(),
        cache.clone(),
        cluster.clone(),
        journal.clone(),
    );
    checks.enforce_write_bound(per_tier_checks(config, scenario));
    let lister = CheckingLister::new(cache.clone(), Arc::clone(&checks));
    let checks_kept = Arc::clone(&checks);
    let writer = CheckingWriter::new(cluster.writer(&plan.name), Arc::clone(&checks));
    journal.note(|| format!("{} starts ({})", plan.name, config.strategy.as_str()));
    let task = match config.strategy {
        Strategy::Tierd => {
            let driver = DriverConfig {
                seed: Some(plan.seed),
                ..config.driver.clone()
            };
            let ensurer = tier_runtime::spawn(
                Saboteur::new(lister, config.sabotage, desired),
                Saboteur::new(writer, config.sabotage, desired),
                desired.clone(),
                driver,
                Mode::Continuous,
            );
            // `run_scenario` validated the configuration before anything started.
            #[allow(clippy::expect_used)]
            let ensurer = ensurer.expect("the driver configuration was validated");
            let status = ensurer.status();
            checks.attach(status.clone());
            tokio::spawn(watch_status(status.clone(), checks));
            Task::Tierd { ensurer, status }
        }
        Strategy::AntreaOld | Strategy::AntreaNew => {
            let (desired, strategy) = (desired.clone(), config.strategy);
            let writer = CallTimeout::new(writer, TokioClock, config.driver.call_timeout);
            Task::Baseline(tokio::spawn(async move {
                if strategy == Strategy::AntreaOld {
                    antrea_old(&lister, &writer, &TokioClock, &desired).await;
                } else {
                    antrea_new(&lister, &writer, &TokioClock, &desired).await;
                }
            }))
        }
    };
    Running {
        cache,
        name: plan.name.clone(),
        task,
        checks: checks_kept,
    }
}

/// Whether every initializer reports every Tier converged, the store is exactly desired and
/// every cache has caught up with the store (so nothing can change any more by itself).
fn at_rest(running: &[Running], cluster: &MemoryCluster, desired: &DesiredSet) -> bool {
    store_matches(cluster, desired, in_sync)
        && running.iter().all(|r| {
            r.cache.pending() == 0
                && match &r.task {
                    Task::Tierd { status, .. } => status.current().all_converged(),
                    Task::Baseline(_) => true,
                }
        })
}

/// Waits until [`at_rest`] or `deadline`; returns when it came to rest.
async fn rest(
    running: &mut [Running],
    cluster: &MemoryCluster,
    desired: &DesiredSet,
    deadline: Instant,
) -> Option<Instant> {
    loop {
        let now = Instant::now();
        if at_rest(running, cluster, desired) {
            return Some(now);
        }
        if now >= deadline {
            return None;
        }
        let tick = deadline.min(now + Duration::from_secs(1));
        next_status_change(running, tick).await;
    }
}

/// Resolves when any initializer's status changes, or at `until`.
async fn next_status_change(running: &mut [Running], until: Instant) {
    let changes: Vec<_> = running
        .iter_mut()
        .filter_map(|r| match &mut r.task {
            Task::Tierd { status, .. } => Some(Box::pin(changed_or_never(status))),
            Task::Baseline(_) => None,
        })
        .collect();
    let any = if changes.is_empty() {
        futures::future::Either::Left(std::future::pending::<()>())
    } else {
        futures::future::Either::Right(futures::future::select_all(changes).map(drop))
    };
    futures::select_biased! {
        () = any.fuse() => {}
        () = sleep_until(until).fuse() => {}
    }
}

/// Resolves on the next status change; never, once the driver is gone.
async fn changed_or_never(status: &mut StatusHandle) {
    if status.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// After convergence: for `window`, nothing may be written and every initializer must keep
/// reporting convergence.
async fn settle_down(
    running: &mut [Running],
    cluster: &MemoryCluster,
    journal: &Journal,
    window: Duration,
) {
    let before = cluster.calls().total();
    let end = Instant::now() + window;
    loop {
        for r in running.iter() {
            if let Task::Tierd { status, .. } = &r.task
                && !status.current().all_converged()
            {
                journal.violation(
                    &r.name,
                    Invariant::NotQuiescent,
                    format!("reports {} after converging", describe_unconverged(status)),
                );
                return;
            }
        }
        if Instant::now() >= end {
            break;
        }
        next_status_change(running, end).await;
    }
    let after = cluster.calls().total();
    if after != before {
        let calls = cluster.calls();
        let extra: Vec<String> = calls
            .records()
            .iter()
            .skip(before)
            .map(|r| format!("{} {} {}", r.client, r.verb, r.name))
            .collect();
        journal.violation(
            "harness",
            Invariant::NotQuiescent,
            format!("{} write(s) after converging: {extra:?}", after - before),
        );
    }
}

/// Waits a contest's quiet period (and a second) after the adversary stopped: no Tier may still
/// be reported contested then, without any further write.
async fn contests_clear(running: &[Running], journal: &Journal, driver: &DriverConfig) {
    tokio::time::sleep(driver.machine.contest.quiet() + Duration::from_secs(1)).await;
    for r in running {
        if let Task::Tierd { status, .. } = &r.task {
            let still: Vec<String> = status
                .current()
                .tiers
                .iter()
                .filter(|t| t.contested)
                .map(|t| t.name.clone())
                .collect();
            if !still.is_empty() {
                journal.violation(
                    &r.name,
                    Invariant::ContestNotCleared,
                    format!("still contested a quiet period after the contest: {still:?}"),
                );
            }
        }
    }
}

/// Waits for the baselines until `deadline`; returns how many had not finished.
async fn finish_baselines(running: &mut [Running], deadline: Instant) -> usize {
    let mut unfinished = 0;
    for r in running.iter_mut() {
        if let Task::Baseline(task) = &mut r.task
            && tokio::time::timeout_at(deadline, task).await.is_err()
        {
            unfinished += 1;
        }
    }
    unfinished
}

fn describe_unconverged(status: &StatusHandle) -> String {
    let status = status.current();
    let tiers: Vec<String> = status
        .unconverged()
        .map(|t| format!("{} {:?}", t.name, t.state))
        .collect();
    format!(
        "synced={} unconverged=[{}]",
        status.synced,
        tiers.join("; ")
    )
}

fn unconverged(running: &[Running], cluster: &MemoryCluster, desired: &DesiredSet) -> String {
    let mut out = Vec::new();
    for r in running {
        if let Task::Tierd { status, .. } = &r.task {
            out.push(format!(
                "{}: {} pending changes={}",
                r.name,
                describe_unconverged(status),
                r.cache.pending()
            ));
        }
    }
    let off: Vec<String> = desired
        .tiers()
        .iter()
        .filter(|want| !cluster.get(&want.name).is_some_and(|t| in_sync(want, &t)))
        .map(|want| format!("{}={:?}", want.name, cluster.get(&want.name)))
        .collect();
    out.push(format!("store off: [{}]", off.join(", ")));
    out.join(" | ")
}

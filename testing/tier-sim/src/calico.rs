//! Calico's worlds: tierd's fleet (`DesiredSet::calico()`) and Calico's own `EnsureInitialized`
//! on the same seeds, against the memory cluster serving Calico's Tier.
//!
//! A seed draws the faults, initializers, cache lags and fault phase exactly as an Antrea seed
//! does ([`Scenario::generate`], adversary and webhook left out: Calico has no Tier webhook),
//! then one of the [`CalicoWorld`]s and its starting store. At `quiet_at` faults stop, RBAC
//! grants `create`, and a missing CRD is installed (the caches complete their first list).
//!
//! | strategy | what it does |
//! |---|---|
//! | `tierd` | one driver per initializer, continuous; must converge within [`Scenario::convergence_bound`], write only desired Tiers, never before its cache synced, never two calls in flight for one Tier, never report a Tier contested (no other writer undoes a write here: replicas write the same fields), and then write nothing for [`SimConfig::settle`] |
//! | `calico` | [`calico_ensure_initialized`]: a blind create per built-in, `AlreadyExists` and `Unauthorized`/`Forbidden` count as success, never an update; retried every 5 s for 60 s, then fatal |
//!
//! The report says per strategy: converged (the store exactly desired at the end), stuck (tierd:
//! not converged within its bound; Calico: fatal), and the wrong fields and missing Tiers left.

use std::fmt::Write as _;
use std::time::Duration;

use tier_core::calico::{self, Calico, DefaultAction};
use tier_core::{
    Clock, Controller, DesiredSet, DriverConfig, ErrorClass, Mode, StatusHandle, TierWriter,
    WriteError,
};
use tier_memory::faults::not_installed;
use tier_memory::{CALICO_TIERS, CacheConfig, ClusterBuilder, MemoryCluster, SyncMode, Verb};
use tier_runtime::{Ensurer, TokioClock};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::baseline::{CallTimeout, sleep};
use crate::check::{Journal, secs};
use crate::scenario::{Scenario, TargetedEffect, TargetedFault};
use crate::sim::{SimConfig, SimError, in_parallel};
use crate::world::script_faults;

/// How long Calico's kube-controllers give `EnsureInitialized` before it is fatal.
pub const CALICO_DEADLINE: Duration = Duration::from_secs(60);
/// How often it retries meanwhile.
pub const CALICO_RETRY: Duration = Duration::from_secs(5);

/// The families of Calico worlds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalicoWorld {
    /// No Tier exists.
    Empty,
    /// All three built-ins exist, one or two with a wrong order or default action.
    WrongBuiltIn,
    /// Each built-in exact, absent or wrong, and user Tiers (some at a built-in's order).
    Drifted,
    /// As `Drifted`, and RBAC refuses `create` until `quiet_at`.
    CreateForbidden,
    /// The Tier CRD is missing until `quiet_at`, and no Tier exists.
    CrdMissing,
}

impl CalicoWorld {
    /// Every world, in report order.
    pub const ALL: [CalicoWorld; 5] = [
        CalicoWorld::Empty,
        CalicoWorld::WrongBuiltIn,
        CalicoWorld::Drifted,
        CalicoWorld::CreateForbidden,
        CalicoWorld::CrdMissing,
    ];

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CalicoWorld::Empty => "empty",
            CalicoWorld::WrongBuiltIn => "wrong-built-in",
            CalicoWorld::Drifted => "drifted",
            CalicoWorld::CreateForbidden => "create-forbidden",
            CalicoWorld::CrdMissing => "crd-missing",
        }
    }
}

/// What runs in a Calico world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalicoStrategy {
    /// tierd's driver with Calico's built-ins.
    Tierd,
    /// Calico's own `EnsureInitialized` ([`calico_ensure_initialized`]).
    Calico,
}

impl CalicoStrategy {
    /// Its name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CalicoStrategy::Tierd => "tierd",
            CalicoStrategy::Calico => "calico",
        }
    }
}

/// One Calico seed's world: the shared draws of [`Scenario`], the Calico world and store.
#[derive(Clone, Debug, PartialEq)]
pub struct CalicoScenario {
    /// Faults, initializers, lags and `quiet_at`, drawn as for Antrea (no adversary, no
    /// webhook); in [`CalicoWorld::CreateForbidden`] a targeted `create` refusal.
    pub base: Scenario,
    /// The family.
    pub world: CalicoWorld,
    /// What the store holds at the start, bypassing the schema (an older install's leftovers).
    pub start: Vec<calico::TierSpec>,
    /// When the Tier CRD is installed, if it is missing at the start.
    pub crd_at: Option<Duration>,
}

fn wrong_order(rng: &mut fastrand::Rng, order: Option<f64>) -> Option<f64> {
    match rng.u32(0..3) {
        0 => None,
        1 => order.map(|o| o + 1.0),
        _ => Some(f64::from(rng.u32(1..100))),
    }
}

fn flip(action: DefaultAction) -> DefaultAction {
    match action {
        DefaultAction::Deny => DefaultAction::Pass,
        DefaultAction::Pass => DefaultAction::Deny,
    }
}

impl CalicoScenario {
    /// Draws the scenario of `seed`. Deterministic.
    pub fn generate(seed: u64) -> Self {
        let mut base = Scenario::generate(seed);
        base.start.clear();
        base.adversary.clear();
        base.targeted.clear();
        base.lag_changes.clear();
        base.pruned = None;
        base.webhook.unreachable_until = Duration::ZERO;
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xca1_1c0);
        let world = CalicoWorld::ALL[rng.usize(..CalicoWorld::ALL.len())];
        let built_ins = calico::built_ins();
        let mut start = Vec::new();
        match world {
            CalicoWorld::Empty | CalicoWorld::CrdMissing => {}
            CalicoWorld::WrongBuiltIn => {
                // One or two of the three, in a cyclic run from a random one.
                let (n, wrong, first) = (built_ins.len(), rng.usize(1..=2), rng.usize(..3));
                for (i, mut tier) in built_ins.into_iter().enumerate() {
                    if (i + n - first) % n < wrong {
                        match rng.u32(0..3) {
                            0 => tier.order = wrong_order(&mut rng, tier.order),
                            1 => tier.default_action = flip(tier.default_action),
                            _ => {
                                tier.order = wrong_order(&mut rng, tier.order);
                                tier.default_action = flip(tier.default_action);
                            }
                        }
                    }
                    start.push(tier);
                }
            }
            CalicoWorld::Drifted | CalicoWorld::CreateForbidden => {
                for mut tier in built_ins {
                    match rng.u32(0..100) {
                        0..35 => {}
                        35..60 => continue,
                        60..75 => tier.order = wrong_order(&mut rng, tier.order),
                        75..90 => tier.default_action = flip(tier.default_action),
                        _ => {
                            tier.order = wrong_order(&mut rng, tier.order);
                            tier.default_action = flip(tier.default_action);
                        }
                    }
                    start.push(tier);
                }
                for i in 0..rng.u32(0..3) {
                    let order = match rng.u32(0..3) {
                        0 => None,
                        1 => Some(calico::KUBE_ADMIN_ORDER),
                        _ => Some(f64::from(rng.u32(1..2_000_000))),
                    };
                    start.push(calico::TierSpec::new(
                        format!("user-{i}"),
                        order,
                        DefaultAction::Pass,
                    ));
                }
            }
        }
        if world == CalicoWorld::CreateForbidden {
            base.targeted.push(TargetedFault {
                verb: Verb::Create,
                name: None,
                effect: TargetedEffect::Forbidden,
            });
        }
        let crd_at = (world == CalicoWorld::CrdMissing).then_some(base.quiet_at);
        Self {
            base,
            world,
            start,
            crd_at,
        }
    }

    /// The desired Tiers not exactly as desired at the start.
    pub fn start_drift(&self) -> usize {
        DesiredSet::<Calico>::calico()
            .tiers()
            .iter()
            .filter(|want| !self.start.contains(want))
            .count()
    }
}

/// How Calico's `EnsureInitialized` ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ensured {
    /// Every create succeeded or counted as success.
    Initialized,
    /// An error outlasted the deadline: the component exits (and crash-loops).
    Fatal(WriteError),
}

/// Calico's `EnsureInitialized` for the built-in Tiers (`libcalico-go/lib/clientv3/client.go`,
/// `ensureTierExists`), as kube-controllers runs it: one blind create per built-in in Calico's
/// order; `AlreadyExists` and `Unauthorized`/`Forbidden` count as success; an existing Tier is
/// never read nor updated. Any other error fails the pass, retried every [`CALICO_RETRY`] until
/// [`CALICO_DEADLINE`], then fatal.
pub async fn calico_ensure_initialized<W, C>(writer: &W, clock: &C) -> Ensured
where
    W: TierWriter<Calico>,
    C: Clock,
{
    let deadline = clock.now() + CALICO_DEADLINE;
    loop {
        let mut first_error = None;
        for tier in calico::built_ins() {
            match writer.create(&tier).await {
                Ok(()) => {}
                Err(e) if matches!(e.class, ErrorClass::Stale | ErrorClass::Forbidden) => {}
                Err(e) => {
                    tracing::info!(tier = %tier.name, err = %e, "Unable to initialize Tier");
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some(error) = first_error else {
            return Ensured::Initialized;
        };
        if clock.now() + CALICO_RETRY >= deadline {
            return Ensured::Fatal(error);
        }
        sleep(clock, CALICO_RETRY).await;
    }
}

/// What one run of one Calico seed showed.
#[derive(Clone, Debug, PartialEq)]
pub struct CalicoReport {
    /// The seed.
    pub seed: u64,
    /// The world.
    pub world: CalicoWorld,
    /// The strategy.
    pub strategy: CalicoStrategy,
    /// The store holds every built-in exactly at the end.
    pub converged: bool,
    /// tierd: not converged within its bound; Calico: fatal, or still retrying.
    pub stuck: bool,
    /// Built-ins present at the end with a wrong order or default action.
    pub wrong_fields: usize,
    /// Built-ins absent at the end.
    pub missing: usize,
    /// tierd: how long after `quiet_at` it was converged and at rest.
    pub converged_after_quiet: Option<Duration>,
    /// Write calls made (failed ones included).
    pub writes: usize,
    /// Of those, the failed ones.
    pub failed_writes: usize,
    /// Broken promises of tierd (empty for Calico's initializer, which promises none).
    pub violations: Vec<String>,
    /// The timeline, when verbose.
    pub trace: Vec<String>,
}

impl CalicoReport {
    /// tierd: converged without a violation. Calico: converged.
    pub fn passed(&self) -> bool {
        self.converged && self.violations.is_empty()
    }
}

/// Runs Calico seed `seed` with `strategy`, on a fresh current-thread runtime on paused time.
///
/// # Errors
///
/// [`SimError::Runtime`] if no runtime can be built, [`SimError::Config`] if the driver
/// configuration is out of range.
pub fn run_calico_seed(
    seed: u64,
    strategy: CalicoStrategy,
    config: &SimConfig,
) -> Result<CalicoReport, SimError> {
    config.driver.validate()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)?;
    let scenario = CalicoScenario::generate(seed);
    Ok(runtime.block_on(simulate(&scenario, strategy, config)))
}

/// Runs every `(seed, strategy)` pair on `jobs` threads; ordered by seed, then strategy.
///
/// # Errors
///
/// The first [`SimError`].
pub fn run_calico_seeds(
    seeds: &[u64],
    strategies: &[CalicoStrategy],
    config: &SimConfig,
    jobs: usize,
) -> Result<Vec<CalicoReport>, SimError> {
    let mut reports = in_parallel(seeds, strategies, jobs, |seed, strategy| {
        run_calico_seed(seed, strategy, config)
    })?;
    reports.sort_by_key(|r| (r.seed, r.strategy));
    Ok(reports)
}

/// The Calico driver configuration of the run: tierd's timing, Calico's admission.
fn driver_config(driver: &DriverConfig, seed: u64) -> DriverConfig<Calico> {
    DriverConfig {
        machine: driver.machine.clone(),
        call_timeout: driver.call_timeout,
        seed: Some(seed),
        admission: Calico::default_admission(),
    }
}

enum Task {
    Tierd {
        ensurer: Ensurer,
        status: StatusHandle,
        /// The first status that reported a Tier contested, if one did.
        contested: JoinHandle<Option<String>>,
    },
    Calico(JoinHandle<Ensured>),
}

struct Running {
    name: String,
    cache: tier_memory::MemoryLister<Calico>,
    task: Task,
}

/// Follows `status` until the driver stops: the first Tier reported contested, if any.
async fn first_contest(mut status: StatusHandle) -> Option<String> {
    loop {
        let current = status.current();
        if let Some(tier) = current.tiers.iter().find(|t| t.contested) {
            return Some(tier.to_string());
        }
        if current.stopped || status.changed().await.is_err() {
            return None;
        }
    }
}

fn build_cluster(scenario: &CalicoScenario) -> MemoryCluster<Calico> {
    let cluster = ClusterBuilder::<Calico>::default()
        .with_tiers(scenario.start.iter().cloned())
        .build();
    script_faults(&cluster.faults(), &scenario.base, CALICO_TIERS);
    if scenario.crd_at.is_some() {
        for verb in [Verb::Create, Verb::Update] {
            drop(
                cluster
                    .faults()
                    .fail_next(verb, 0)
                    .forever()
                    .with(not_installed(CALICO_TIERS)),
            );
        }
    }
    cluster
}

fn off(cluster: &MemoryCluster<Calico>) -> (usize, usize) {
    let (mut wrong, mut missing) = (0, 0);
    for want in DesiredSet::<Calico>::calico().tiers() {
        match cluster.get(&want.name) {
            None => missing += 1,
            Some(seen) if !calico::in_sync(want, &seen) => wrong += 1,
            Some(_) => {}
        }
    }
    (wrong, missing)
}

fn at_rest(running: &[Running], cluster: &MemoryCluster<Calico>) -> bool {
    off(cluster) == (0, 0)
        && running.iter().all(|r| {
            r.cache.pending() == 0
                && match &r.task {
                    Task::Tierd { status, .. } => status.current().all_converged(),
                    Task::Calico(_) => true,
                }
        })
}

async fn simulate(
    scenario: &CalicoScenario,
    strategy: CalicoStrategy,
    config: &SimConfig,
) -> CalicoReport {
    let journal = Journal::new(config.verbose);
    let desired = DesiredSet::<Calico>::calico();
    let base = &scenario.base;
    let cluster = build_cluster(scenario);
    let bound = base.convergence_bound(&config.driver);
    journal.note(|| {
        format!(
            "calico seed {} world {}: start {:?}; crd at {:?}; quiet at {}; bound {}",
            base.seed,
            scenario.world.as_str(),
            scenario.start,
            scenario.crd_at,
            secs(base.quiet_at),
            secs(bound)
        )
    });
    let mut violations = Vec::new();
    let mut plans = base.initializers.clone();
    plans.sort_by_key(|p| p.start_at);
    let mut running = Vec::new();
    for plan in &plans {
        sleep_until(journal.at(plan.start_at)).await;
        let sync = match (scenario.crd_at, plan.sync_after.is_zero()) {
            (Some(_), _) => SyncMode::Manual,
            (None, true) => SyncMode::Immediate,
            (None, false) => SyncMode::After(plan.sync_after),
        };
        let cache = cluster.cache(CacheConfig::default().sync(sync).lag(plan.lag));
        let writer = CallTimeout::new(
            cluster.writer(&plan.name),
            TokioClock,
            config.driver.call_timeout,
        );
        journal.note(|| format!("{} starts ({})", plan.name, strategy.as_str()));
        let task = match strategy {
            CalicoStrategy::Tierd => {
                let spawned = tier_runtime::spawn(
                    cache.clone(),
                    writer,
                    desired.clone(),
                    driver_config(&config.driver, plan.seed),
                    Mode::Continuous,
                );
                // `run_calico_seed` validated the configuration before anything started.
                #[allow(clippy::expect_used)]
                let ensurer = spawned.expect("the driver configuration was validated");
                let status = ensurer.status();
                let contested = tokio::spawn(first_contest(ensurer.status()));
                Task::Tierd {
                    ensurer,
                    status,
                    contested,
                }
            }
            CalicoStrategy::Calico => Task::Calico(tokio::spawn(async move {
                calico_ensure_initialized(&writer, &TokioClock).await
            })),
        };
        running.push(Running {
            name: plan.name.clone(),
            cache,
            task,
        });
    }

    sleep_until(journal.at(base.quiet_at)).await;
    let quiet_at = Instant::now();
    cluster.faults().clear();
    if scenario.crd_at.is_some() {
        for r in &running {
            r.cache.sync();
        }
    }
    journal.note(|| "quiet: faults stopped, create granted, CRD installed".to_owned());

    let mut converged_after_quiet = None;
    let mut stuck = false;
    match strategy {
        CalicoStrategy::Tierd => {
            let deadline = quiet_at + bound;
            loop {
                if at_rest(&running, &cluster) {
                    converged_after_quiet =
                        Some(Instant::now().saturating_duration_since(quiet_at));
                    break;
                }
                if Instant::now() >= deadline {
                    stuck = true;
                    violations.push(format!(
                        "not converged {} after faults stopped: {:?}",
                        secs(bound),
                        cluster.tiers()
                    ));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if converged_after_quiet.is_some() {
                let before = cluster.calls().total();
                tokio::time::sleep(config.settle).await;
                let after = cluster.calls().total();
                if after != before || !at_rest(&running, &cluster) {
                    violations.push(format!("{} write(s) after converging", after - before));
                }
            }
        }
        CalicoStrategy::Calico => {
            let deadline = quiet_at + config.limit;
            for r in &mut running {
                if let Task::Calico(task) = &mut r.task {
                    match tokio::time::timeout_at(deadline, task).await {
                        Ok(Ok(Ensured::Initialized)) => {}
                        Ok(Ok(Ensured::Fatal(e))) => {
                            journal.note(|| format!("{} fatal: {e}", r.name));
                            stuck = true;
                        }
                        Ok(Err(_)) | Err(_) => stuck = true,
                    }
                }
            }
        }
    }

    let calls = cluster.calls();
    for r in &running {
        let mine = calls.for_client(&r.name);
        if strategy == CalicoStrategy::Tierd && mine.peak_in_flight() > 1 {
            violations.push(format!(
                "{}: two calls for one Tier in flight at once",
                r.name
            ));
        }
        if let (CalicoStrategy::Tierd, Some(crd_at)) = (strategy, scenario.crd_at) {
            let installed = journal.at(crd_at).into_std();
            if mine.records().iter().any(|c| c.started < installed) {
                violations.push(format!("{}: wrote before its cache could sync", r.name));
            }
        }
    }
    for r in running {
        match r.task {
            Task::Tierd {
                ensurer, contested, ..
            } => {
                ensurer.shutdown().await;
                if let Ok(Some(tier)) = contested.await {
                    // Nobody but tierd writes the built-ins here: a contest is a false one.
                    violations.push(format!(
                        "{}: reported {tier} contested, yet no other writer undid a write",
                        r.name
                    ));
                }
            }
            Task::Calico(task) => task.abort(),
        }
    }
    let (wrong_fields, missing) = off(&cluster);
    CalicoReport {
        seed: base.seed,
        world: scenario.world,
        strategy,
        converged: (wrong_fields, missing) == (0, 0),
        stuck,
        wrong_fields,
        missing,
        converged_after_quiet,
        writes: calls.total(),
        failed_writes: calls.records().iter().filter(|r| r.is_failed()).count(),
        violations,
        trace: journal.trace(),
    }
}

/// One line about one run.
pub fn calico_outcome_line(r: &CalicoReport) -> String {
    let verdict = match (r.strategy, r.passed()) {
        (CalicoStrategy::Tierd, true) => "passed",
        (CalicoStrategy::Tierd, false) => "FAILED",
        (CalicoStrategy::Calico, true) => "converged",
        (CalicoStrategy::Calico, false) => "not converged",
    };
    let mut line = format!(
        "calico seed {} ({}) {}: {verdict}; {} write(s), {} failed; {} wrong, {} missing",
        r.seed,
        r.world.as_str(),
        r.strategy.as_str(),
        r.writes,
        r.failed_writes,
        r.wrong_fields,
        r.missing
    );
    if r.stuck {
        line.push_str("; stuck");
    }
    for v in &r.violations {
        let _ = write!(line, "; {v}");
    }
    line
}

/// Per world and strategy, then over all worlds: seeds, converged, stuck, seeds that left a
/// wrong field and how many, missing Tiers left, and writes per seed.
pub fn calico_table(reports: &[CalicoReport]) -> String {
    let mut out = String::from(
        "world             strategy  seeds  converged  stuck  wrong left (seeds/Tiers)  \
         missing left  writes/seed  failed/seed\n",
    );
    let rows = CalicoWorld::ALL
        .iter()
        .map(|w| (w.as_str(), Some(*w)))
        .chain([("all", None)]);
    for (name, world) in rows {
        for strategy in [CalicoStrategy::Tierd, CalicoStrategy::Calico] {
            let runs: Vec<&CalicoReport> = reports
                .iter()
                .filter(|r| r.strategy == strategy && world.is_none_or(|w| r.world == w))
                .collect();
            if runs.is_empty() {
                continue;
            }
            let n = runs.len();
            let count = |f: &dyn Fn(&CalicoReport) -> bool| runs.iter().filter(|r| f(r)).count();
            let sum = |f: &dyn Fn(&CalicoReport) -> usize| runs.iter().map(|r| f(r)).sum::<usize>();
            let per_seed = |total: usize| total as f64 / n as f64;
            let _ = writeln!(
                out,
                "{name:<17} {:<9} {n:>5}  {:>9}  {:>5}  {:>11}/{:<12}  {:>12}  {:>11.2}  {:>11.2}",
                strategy.as_str(),
                count(&|r| r.converged),
                count(&|r| r.stuck),
                count(&|r| r.wrong_fields > 0),
                sum(&|r| r.wrong_fields),
                sum(&|r| r.missing),
                per_seed(sum(&|r| r.writes)),
                per_seed(sum(&|r| r.failed_writes)),
            );
        }
    }
    out
}

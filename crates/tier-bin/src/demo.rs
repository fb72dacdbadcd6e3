//! `tierd demo`: the real initializer on an in-memory cluster from a messy start, narrated.
//!
//! The cluster starts with one Tier right, one with a drifted priority and description, one with
//! a drifted description, three missing, and a user's Tier `team-a` squatting networkops'
//! priority. The API fails some calls (503s, a 429 with `Retry-After`), and an administrator
//! deletes the squatter after 1.5 s. tierd sees the squatter in its cache and sends no create
//! for networkops until it is gone. Every API call, every event of the driver's event stream
//! and every state change is printed as it happens; the demo ends with the final table.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tier_core::calico::{self, Calico, DefaultAction};
use tier_core::{
    Controller, DesiredSet, DesiredTier, DriverConfig, EventReceiver, Mode, Snapshot, Status,
    Stopped, TierSpec, TierWriter, WriteError,
};
use tier_memory::{MemoryCluster, Verb, faults};
use tokio::time::Instant;

use crate::plan;

/// The squatter's name.
const SQUATTER: &str = "team-a";

/// When the administrator deletes the squatter.
const SQUATTER_REMOVED_AFTER: Duration = Duration::from_millis(1500);

/// The longest the demo may take before it gives up.
const DEMO_LIMIT: Duration = Duration::from_secs(30);

/// What the demo achieved.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoOutcome<C: Controller = tier_core::Antrea> {
    /// Whether every Tier converged.
    pub converged: bool,
    /// How long it took.
    pub elapsed: Duration,
    /// API writes made (creates and updates).
    pub writes: usize,
    /// Of those, how many failed.
    pub failed_writes: usize,
    /// The final Tiers, as stored.
    pub final_tiers: Snapshot<C>,
}

/// Prints timestamped lines to a shared sink; output errors (a closed pipe) are ignored.
#[derive(Clone)]
pub struct Narrator {
    start: Instant,
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Narrator {
    /// A narrator writing to `sink`, timing from now.
    pub fn new(sink: Box<dyn Write + Send>) -> Self {
        Self {
            start: Instant::now(),
            sink: Arc::new(Mutex::new(sink)),
        }
    }

    /// Prints `text` after the time since the start.
    pub fn line(&self, text: impl AsRef<str>) {
        let elapsed = self.start.elapsed().as_secs_f64();
        self.raw(&format!("[+{elapsed:6.3}s] {}\n", text.as_ref()));
    }

    /// Prints `text` as is.
    pub fn raw(&self, text: &str) {
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = sink.write_all(text.as_bytes());
        let _ = sink.flush();
    }
}

/// A writer that narrates every call of the writer it wraps.
struct Narrated<W> {
    inner: W,
    narrator: Narrator,
}

impl<W> Narrated<W> {
    fn finish(&self, verb: &str, tier: &str, result: &Result<(), WriteError>) {
        match result {
            Ok(()) => self.narrator.line(format!("  api: {verb} {tier} -> ok")),
            Err(e) => self.narrator.line(format!(
                "  api: {verb} {tier} -> {} error: {}",
                e.class, e.message
            )),
        }
    }
}

#[async_trait]
impl<C: Controller, W: TierWriter<C>> TierWriter<C> for Narrated<W> {
    async fn create(&self, tier: &C::Spec) -> Result<(), WriteError> {
        let result = self.inner.create(tier).await;
        self.finish("create", tier.name(), &result);
        result
    }

    async fn update(&self, tier: &C::Spec, resource_version: &str) -> Result<(), WriteError> {
        let result = self.inner.update(tier, resource_version).await;
        self.finish("update", tier.name(), &result);
        result
    }
}

/// The messy starting cluster and its scripted faults.
fn messy_cluster() -> MemoryCluster {
    let antrea = DesiredSet::antrea();
    let desired = |name: &str| antrea.get(name).cloned();
    let mut tiers: Vec<TierSpec> = Vec::new();
    tiers.extend(desired("baseline"));
    tiers.push(TierSpec::new("application", 240, "edited by hand"));
    if let Some(platform) = desired("platform") {
        tiers.push(TierSpec::new(
            "platform",
            platform.priority,
            "old description",
        ));
    }
    tiers.push(TierSpec::new(
        SQUATTER,
        150,
        "a user's Tier at networkops' priority",
    ));
    let cluster = MemoryCluster::builder().with_tiers(tiers).build();
    cluster
        .faults()
        .fail_next(Verb::Create, 2)
        .for_name("securityops")
        .with(faults::unavailable())
        .fail_next(Verb::Update, 1)
        .for_name("application")
        .with(faults::too_many_requests(Duration::from_secs(1)));
    cluster
}

/// A controller's demo: its messy start, narrated while the real initializer fixes it.
pub trait Demo {
    /// Runs the demo, narrating to `narrator`; whether every Tier converged.
    fn demo(seed: u64, narrator: &Narrator) -> impl std::future::Future<Output = bool> + Send;
}

impl Demo for tier_core::Antrea {
    async fn demo(seed: u64, narrator: &Narrator) -> bool {
        run(seed, narrator).await.converged
    }
}

/// Runs the demo of controller `C`, narrating to `narrator`; whether every Tier converged.
pub async fn converges<C: Demo>(seed: u64, narrator: &Narrator) -> bool {
    C::demo(seed, narrator).await
}

impl Demo for Calico {
    async fn demo(seed: u64, narrator: &Narrator) -> bool {
        run_calico(seed, narrator).await.converged
    }
}

/// A user's Calico Tier, which tierd must leave alone.
const CALICO_USER_TIER: &str = "security";

/// Calico's messy start: `default` right, `kube-admin` with the wrong default action and
/// `kube-baseline` with the wrong order (left by an older install; Calico's own initializer
/// never updates an existing Tier), a user's Tier, and a 503 on the first update.
fn messy_calico_cluster() -> MemoryCluster<Calico> {
    let tiers = [
        calico::TierSpec::new(
            calico::DEFAULT,
            Some(calico::DEFAULT_ORDER),
            DefaultAction::Deny,
        ),
        calico::TierSpec::new(
            calico::KUBE_ADMIN,
            Some(calico::KUBE_ADMIN_ORDER),
            DefaultAction::Deny,
        ),
        calico::TierSpec::new(calico::KUBE_BASELINE, Some(5_000.0), DefaultAction::Pass),
        calico::TierSpec::new(CALICO_USER_TIER, Some(100.0), DefaultAction::Pass),
    ];
    let cluster = tier_memory::ClusterBuilder::<Calico>::default()
        .with_tiers(tiers)
        .build();
    cluster
        .faults()
        .fail_next(Verb::Update, 1)
        .for_name(calico::KUBE_BASELINE)
        .with(faults::unavailable());
    cluster
}

/// Runs Calico's demo, narrating to `narrator`.
pub async fn run_calico(seed: u64, narrator: &Narrator) -> DemoOutcome<Calico> {
    let cluster = messy_calico_cluster();
    let desired = DesiredSet::<Calico>::calico();
    narrator.raw("tierd demo --controller calico: the real initializer against an in-memory cluster serving Calico's Tiers.\n\n");
    narrator.raw("The cluster at the start, and what tierd has to do (DESIRED and OBSERVED are order/defaultAction):\n");
    let start = Snapshot::synced(0, cluster.tiers().into_values());
    narrator.raw(&indent(&plan::render(&desired, &start)));
    narrator.raw(&format!(
        "\nAlso present: the user's Tier {CALICO_USER_TIER:?}, which tierd must leave alone. \
         Calico's own initializer creates missing built-ins but never corrects one. The API \
         will fail the first update of kube-baseline (503).\n\n"
    ));
    play(
        &cluster,
        &desired,
        seed,
        narrator,
        start,
        CALICO_USER_TIER,
        None,
    )
    .await
}

/// Runs Antrea's demo, narrating to `narrator`.
pub async fn run(seed: u64, narrator: &Narrator) -> DemoOutcome {
    let cluster = messy_cluster();
    let desired = DesiredSet::antrea();
    narrator.raw("tierd demo: the real initializer against an in-memory cluster.\n\n");
    narrator.raw("The cluster at the start, and what tierd has to do:\n");
    let start = Snapshot::synced(0, cluster.tiers().into_values());
    narrator.raw(&indent(&plan::render(&desired, &start)));
    narrator.raw(&format!(
        "\nAlso present: Tier {SQUATTER:?} at priority 150 (networkops' priority), which tierd \
         must leave alone. The API will fail two creates of securityops (503) and one update of \
         application (429, Retry-After 1s); an administrator deletes {SQUATTER:?} after {:.1}s.\n\n",
        SQUATTER_REMOVED_AFTER.as_secs_f64()
    ));

    let admin = {
        let (cluster, narrator) = (cluster.clone(), narrator.clone());
        async move {
            tokio::time::sleep(SQUATTER_REMOVED_AFTER).await;
            narrator.line(format!("admin: deletes Tier {SQUATTER}"));
            if let Err(e) = cluster.delete(SQUATTER) {
                narrator.line(format!("admin: delete failed: {e}"));
            }
        }
    };
    play(
        &cluster,
        &desired,
        seed,
        narrator,
        start,
        SQUATTER,
        Some(Box::pin(admin)),
    )
    .await
}

/// Someone else acting on the cluster while tierd runs (stopped when tierd stops).
type Meanwhile = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs the real initializer for `desired` on `cluster` (every write narrated, with the event
/// stream and every state change) until it converges or [`DEMO_LIMIT`], while `meanwhile`
/// runs; then the final table and the numbers. `untouched` is the user's Tier tierd must leave
/// alone, named in the last line.
async fn play<C>(
    cluster: &MemoryCluster<C>,
    desired: &DesiredSet<C>,
    seed: u64,
    narrator: &Narrator,
    start: Snapshot<C>,
    untouched: &str,
    meanwhile: Option<Meanwhile>,
) -> DemoOutcome<C>
where
    C: plan::Planned + tier_memory::Backend,
    MemoryCluster<C>: TierWriter<C>,
    tier_memory::MemoryLister<C>: tier_core::TierLister<C>,
{
    let writer = Narrated {
        inner: cluster.clone(),
        narrator: narrator.clone(),
    };
    let config = DriverConfig {
        seed: Some(seed),
        ..DriverConfig::default()
    };
    let spawned = tier_runtime::spawn_with_events(
        cluster.lister(),
        writer,
        desired.clone(),
        config,
        Mode::Once,
    );
    let (ensurer, events) = match spawned {
        Ok(spawned) => spawned,
        Err(error) => {
            narrator.raw(&format!("\nNOT started: {error}\n"));
            return DemoOutcome {
                converged: false,
                elapsed: Duration::ZERO,
                writes: 0,
                failed_writes: 0,
                final_tiers: start,
            };
        }
    };
    let started = Instant::now();
    let narrate_states = tokio::spawn(narrate_states(ensurer.status(), narrator.clone()));
    let narrate_events = tokio::spawn(narrate_events(events, narrator.clone()));
    let meanwhile = meanwhile.map(tokio::spawn);

    let cancel = ensurer.cancellation();
    let stopped = match tokio::time::timeout(DEMO_LIMIT, ensurer.join()).await {
        Ok(stopped) => stopped,
        Err(_) => {
            cancel.cancel();
            Stopped::Cancelled
        }
    };
    let elapsed = started.elapsed();
    if let Some(meanwhile) = meanwhile {
        meanwhile.abort();
    }
    // The state narrator ends when the driver's status channel closes.
    let _ = narrate_states.await;
    let _ = narrate_events.await;

    let calls = cluster.calls();
    let writes = calls.count(Verb::Create) + calls.count(Verb::Update);
    let failed_writes = calls.failed(Verb::Create) + calls.failed(Verb::Update);
    let final_tiers = Snapshot::synced(cluster.revision(), cluster.tiers().into_values());
    let converged = stopped == Stopped::Converged;

    narrator.raw("\nThe cluster at the end:\n");
    narrator.raw(&indent(&plan::render(desired, &final_tiers)));
    narrator.raw(&format!(
        "\n{} in {:.2}s with {writes} API writes ({failed_writes} failed and were retried); \
         {untouched:?} was never written.\n",
        if converged {
            "Converged"
        } else {
            "NOT converged"
        },
        elapsed.as_secs_f64(),
    ));
    DemoOutcome {
        converged,
        elapsed,
        writes,
        failed_writes,
        final_tiers,
    }
}

/// Prints every event of the driver's stream until the driver stops.
async fn narrate_events(mut events: EventReceiver, narrator: Narrator) {
    while let Some(event) = events.recv().await {
        narrator.line(format!("event: {event}"));
    }
}

/// Prints one line per Tier state change until the driver stops.
async fn narrate_states(mut status: tier_core::StatusHandle, narrator: Narrator) {
    let mut last: Vec<&'static str> = Vec::new();
    loop {
        let now: Status = status.current();
        for (i, tier) in now.tiers.iter().enumerate() {
            let label = tier.state.as_str();
            if last.get(i) == Some(&label) {
                continue;
            }
            if !(label == "pending" && last.is_empty()) {
                narrator.line(format!("tier {tier}"));
            }
        }
        last = now.tiers.iter().map(|t| t.state.as_str()).collect();
        if now.stopped || status.changed().await.is_err() {
            return;
        }
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use tier_core::Observed;

    use super::*;

    use super::tests_support::Buffer;

    #[tokio::test(start_paused = true)]
    async fn the_demo_converges_and_narrates() {
        let buffer = Buffer::default();
        let outcome = run(1, &Narrator::new(Box::new(buffer.clone()))).await;
        let text = buffer.text();
        assert!(outcome.converged, "{text}");
        assert!(
            outcome.elapsed >= SQUATTER_REMOVED_AFTER && outcome.elapsed < Duration::from_secs(3),
            "{:?}\n{text}",
            outcome.elapsed
        );
        for tier in DesiredSet::antrea().tiers() {
            let observed = outcome.final_tiers.observe(&tier.name);
            let Observed::Present(o) = observed else {
                panic!("{} missing\n{text}", tier.name);
            };
            assert_eq!(
                (o.priority, &o.description),
                (tier.priority, &tier.description)
            );
        }
        assert_eq!(
            outcome.final_tiers.observe(SQUATTER),
            tier_core::Observed::Absent
        );
        assert!(
            text.contains("tier networkops blocked: priority 150 is held by Tier team-a"),
            "{text}"
        );
        assert!(
            text.contains(
                "event: Tier networkops cannot be created: priority 150 is held by Tier team-a"
            ),
            "{text}"
        );
        assert!(text.contains("admin: deletes Tier team-a"), "{text}");
        assert!(text.contains("Converged in"), "{text}");
        // 2 updates of application (one 429), 1 of platform, 3 creates of securityops (two
        // 503s), 1 of emergency, and exactly one create of networkops, after the squatter went:
        // no doomed create.
        assert_eq!(text.matches("api: create networkops").count(), 1, "{text}");
        assert_eq!(outcome.writes, 8, "{text}");
        assert_eq!(outcome.failed_writes, 3, "{text}");
        let deleted = text
            .find("admin: deletes Tier team-a")
            .unwrap_or(usize::MAX);
        let created = text.find("api: create networkops").unwrap_or(0);
        assert!(created > deleted, "{text}");
        for untouched in ["baseline", SQUATTER] {
            assert!(!text.contains(&format!("create {untouched} ->")), "{text}");
            assert!(!text.contains(&format!("update {untouched} ->")), "{text}");
        }
    }
}

#[cfg(test)]
mod calico_tests {
    use super::tests_support::Buffer;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_calico_demo_corrects_both_built_ins_and_leaves_the_users_tier() {
        let buffer = Buffer::default();
        let outcome = run_calico(1, &Narrator::new(Box::new(buffer.clone()))).await;
        let text = buffer.text();
        assert!(outcome.converged, "{text}");
        for want in calico::built_ins() {
            let tier = outcome.final_tiers.observe(&want.name);
            let tier_core::Observed::Present(tier) = tier else {
                panic!("{} missing\n{text}", want.name);
            };
            assert!(calico::in_sync(&want, &tier), "{tier:?}\n{text}");
        }
        assert!(
            // Only its default action was wrong: the event names it alone.
            text.contains("event: corrected the defaultAction of Tier kube-admin"),
            "{text}"
        );
        assert_eq!((outcome.writes, outcome.failed_writes), (3, 1), "{text}");
        assert!(
            !text.contains(&format!("update {CALICO_USER_TIER} ->")),
            "{text}"
        );
    }
}

#[cfg(test)]
mod tests_support {
    use std::sync::{Arc, Mutex};

    /// A shared sink the tests read back.
    #[derive(Clone, Default)]
    pub(super) struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Buffer {
        pub(super) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

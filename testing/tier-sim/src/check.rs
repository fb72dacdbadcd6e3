//! The invariant checks: decorators around one initializer's ports that check every call, and a
//! [`Journal`] of the violations (and, when verbose, of everything that happened).
//!
//! - [`CheckingWriter`] checks every write as it starts: the initializer's cache has synced, the
//!   name is in the desired set, the fields are the desired ones, no other call of this
//!   initializer for that Tier is in flight.
//! - [`CheckingLister`] records every snapshot the initializer observes, by generation.
//! - [`Checks::check_status`] checks the initializer's published status (run on every port call
//!   and on every status change, by [`watch_status`]): a Tier reported converged is in sync in
//!   the snapshot the status was computed from, and in the store whenever the cache has caught
//!   up with it; a Tier reported contested had a write the store accepted from this initializer
//!   undone by another writer ([`Invariant::FalseContest`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tier_core::admission::AdmissionPolicy;
use tier_core::{
    DesiredSet, ErrorClass, Generation, Observed, Snapshot, Status, StatusHandle, TierLister,
    TierSpec, TierState, TierWriter, WriteError, in_sync,
};
use tier_memory::{MemoryCluster, MemoryLister};
use tokio::time::Instant;

use crate::bounds::{SOFT_LIMIT, SOFT_WINDOW, WRITE_WINDOWS, hard_limit, is_visible};

/// The most violations a journal keeps (it still counts the rest).
const MAX_KEPT: usize = 64;

/// Which invariant a [`Violation`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    /// A write started before the initializer's cache completed its first list.
    WriteBeforeSync,
    /// A write to a name outside the desired set.
    OutsideDesiredSet,
    /// A write of a desired name with other fields than the desired ones.
    UndesiredFields,
    /// Two calls of one initializer for one Tier in flight at once.
    OverlappingCalls,
    /// The published status disagrees with the cache or the store.
    StatusMismatch,
    /// Faults and blockers were gone, yet not everything converged within the bound.
    NoConvergence,
    /// After converging, an initializer wrote again or stopped reporting convergence.
    NotQuiescent,
    /// A Tier reported blocked although its own cache showed it (a false alarm).
    FalseBlocked,
    /// A Tier still reported contested a quiet period after the adversary stopped.
    ContestNotCleared,
    /// A Tier the world allowed to be written was not in sync within its liveness bound (see
    /// [`crate::bounds`]).
    Liveness,
    /// An initializer wrote one Tier more often than the write bound allows, or beyond the soft
    /// rate while its status showed no reason (see [`crate::bounds`]).
    WriteBound,
    /// While RBAC refused every create, an initializer sent more creates than one per step of
    /// the Forbidden backoff, for the whole fleet.
    FleetProbe,
    /// A Tier reported contested although no write the store accepted from this initializer
    /// was undone by another writer (changed or deleted after it): a denied, refused or failed
    /// write taken for a contest.
    FalseContest,
}

impl Invariant {
    /// A short kebab-case label.
    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::WriteBeforeSync => "write-before-sync",
            Invariant::OutsideDesiredSet => "outside-desired-set",
            Invariant::UndesiredFields => "undesired-fields",
            Invariant::OverlappingCalls => "overlapping-calls",
            Invariant::StatusMismatch => "status-mismatch",
            Invariant::NoConvergence => "no-convergence",
            Invariant::NotQuiescent => "not-quiescent",
            Invariant::FalseBlocked => "false-blocked",
            Invariant::ContestNotCleared => "contest-not-cleared",
            Invariant::Liveness => "liveness",
            Invariant::WriteBound => "write-bound",
            Invariant::FleetProbe => "fleet-probe",
            Invariant::FalseContest => "false-contest",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// When (virtual time since the run started).
    pub at: Duration,
    /// The initializer's client name (`harness` for run-wide checks).
    pub initializer: String,
    /// The invariant.
    pub invariant: Invariant,
    /// What exactly was seen.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at {}: {}: {}: {}",
            secs(self.at),
            self.initializer,
            self.invariant,
            self.detail
        )
    }
}

/// A duration as seconds with millisecond precision, e.g. `12.345s`.
pub fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one run records: violations and, when verbose, a timeline. Stamps use virtual time since
/// the journal was created. Cheap to clone; clones share the journal.
#[derive(Clone, Debug)]
pub struct Journal {
    start: Instant,
    verbose: bool,
    state: Arc<Mutex<JournalState>>,
}

#[derive(Debug, Default)]
struct JournalState {
    violations: Vec<Violation>,
    dropped: usize,
    trace: Vec<String>,
}

impl Journal {
    /// A journal starting now; `verbose` keeps a timeline too.
    pub fn new(verbose: bool) -> Self {
        Self {
            start: Instant::now(),
            verbose,
            state: Arc::default(),
        }
    }

    /// Virtual time since the journal was created.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The instant `offset` after the journal was created.
    pub fn at(&self, offset: Duration) -> Instant {
        self.start + offset
    }

    /// Records a violation (and notes it in the timeline).
    pub fn violation(&self, initializer: &str, invariant: Invariant, detail: String) {
        let violation = Violation {
            at: self.elapsed(),
            initializer: initializer.to_owned(),
            invariant,
            detail,
        };
        let mut state = lock(&self.state);
        if self.verbose {
            state.trace.push(format!("{violation}  <-- VIOLATION"));
        }
        if state.violations.len() < MAX_KEPT {
            state.violations.push(violation);
        } else {
            state.dropped += 1;
        }
    }

    /// Adds a timeline line (built only when verbose).
    pub fn note(&self, line: impl FnOnce() -> String) {
        if self.verbose {
            let line = format!("{:>9} {}", secs(self.elapsed()), line());
            lock(&self.state).trace.push(line);
        }
    }

    /// The violations kept so far, in order.
    pub fn violations(&self) -> Vec<Violation> {
        lock(&self.state).violations.clone()
    }

    /// How many violations were recorded in all (kept or not).
    pub fn violation_count(&self) -> usize {
        let state = lock(&self.state);
        state.violations.len() + state.dropped
    }

    /// The timeline (empty unless verbose).
    pub fn trace(&self) -> Vec<String> {
        lock(&self.state).trace.clone()
    }
}

/// The checks of one initializer, shared by its decorators and its status watcher.
#[derive(Debug)]
pub struct Checks {
    name: String,
    desired: DesiredSet,
    cache: MemoryLister,
    cluster: MemoryCluster,
    journal: Journal,
    state: Mutex<CheckState>,
}

#[derive(Debug, Default)]
struct CheckState {
    /// Calls in flight per Tier name.
    in_flight: BTreeMap<String, usize>,
    /// Every snapshot observed by the initializer, by generation, from the oldest generation a
    /// status may still refer to.
    snapshots: BTreeMap<Generation, Snapshot>,
    status: Option<StatusHandle>,
    /// The last state label and correction count of every Tier, for the timeline.
    states: Vec<(&'static str, u64)>,
    /// Writes the server's admission denied.
    denied: usize,
    /// Of those, creates the initializer's own cache already showed would be denied.
    doomed: usize,
    /// When each Tier's recent writes started, within the longest window of the write bound
    /// (at most [`MAX_WRITE_TIMES`] per Tier).
    writes: BTreeMap<String, VecDeque<Duration>>,
    /// The Tiers whose status showed a visible state ([`is_visible`]) since their last write.
    visible: BTreeSet<String>,
    /// The (Tier, soft?) write-bound violations already recorded: one each is enough.
    flagged: BTreeSet<(String, bool)>,
    /// The most writes of one Tier in any window of the longest length, and the Tier.
    peak: Option<(String, usize)>,
    /// Whether the write bound reports violations (it always measures).
    enforce_write_bound: bool,
    /// Per Tier: what the store shows of this initializer's accepted writes (see
    /// [`Accepted`]). One entry per desired Tier at most.
    accepted: BTreeMap<String, Accepted>,
    /// The Tiers the last status reported contested.
    contested: BTreeSet<String>,
}

/// The store's side of one Tier's accepted writes, for [`Invariant::FalseContest`].
#[derive(Debug, Default)]
struct Accepted {
    /// The store's resourceVersion right after this initializer's last accepted write, while
    /// no failed write of its own may have changed the store since.
    last: Option<String>,
    /// Accepted writes shown undone by another writer: the store held another resourceVersion
    /// when this initializer's next call started, or a later create succeeded (the Tier had
    /// been deleted; initializers never delete), or a later update was made on another
    /// resourceVersion than the one the accepted write left.
    undone: usize,
}

/// The most write times kept per Tier (a tight loop is flagged long before).
const MAX_WRITE_TIMES: usize = 10_000;

impl Checks {
    /// The checks of initializer `name`, whose own cache is `cache`, in `cluster`.
    pub fn new(
        name: &str,
        desired: DesiredSet,
        cache: MemoryLister,
        cluster: MemoryCluster,
        journal: Journal,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            desired,
            cache,
            cluster,
            journal,
            state: Mutex::default(),
        })
    }

    /// The initializer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reports write-bound violations (see [`crate::bounds`]) from now on, or stops; the peak is
    /// measured either way ([`SimConfig::issue_15_checks`](crate::SimConfig) in the random
    /// worlds, always in the others).
    pub fn enforce_write_bound(&self, on: bool) {
        lock(&self.state).enforce_write_bound = on;
    }

    /// Checks the initializer's published status from now on.
    pub fn attach(&self, status: StatusHandle) {
        lock(&self.state).status = Some(status);
    }

    fn violation(&self, invariant: Invariant, detail: String) {
        self.journal.violation(&self.name, invariant, detail);
    }

    /// Checks a write as it starts; the returned guard marks it in flight until dropped.
    fn call_starts(&self, verb: &str, tier: &TierSpec) -> InFlight<'_> {
        self.check_status();
        self.journal.note(|| {
            format!(
                "{} {verb} {} (priority {}, description {:?})",
                self.name, tier.name, tier.priority, tier.description
            )
        });
        if !self.cache.is_synced() {
            self.violation(
                Invariant::WriteBeforeSync,
                format!("{verb} {} before its cache synced", tier.name),
            );
        }
        match self.desired.get(&tier.name) {
            None => self.violation(
                Invariant::OutsideDesiredSet,
                format!("{verb} {} which is not a desired Tier", tier.name),
            ),
            Some(want) if want != tier => self.violation(
                Invariant::UndesiredFields,
                format!("{verb} {tier:?}, desired {want:?}"),
            ),
            Some(_) => {}
        }
        let n = {
            let mut state = lock(&self.state);
            let n = state.in_flight.entry(tier.name.clone()).or_insert(0);
            *n += 1;
            *n
        };
        if n > 1 {
            self.violation(
                Invariant::OverlappingCalls,
                format!("{n} calls for {} in flight at once", tier.name),
            );
        }
        self.count_write(&tier.name);
        InFlight {
            checks: self,
            name: tier.name.clone(),
        }
    }

    /// Counts a write of `name` starting now against the write bound (see [`crate::bounds`]).
    fn count_write(&self, name: &str) {
        let now = self.journal.elapsed();
        let longest = WRITE_WINDOWS
            .into_iter()
            .chain([SOFT_WINDOW])
            .fold(Duration::ZERO, Duration::max);
        let status = lock(&self.state).status.as_ref().map(StatusHandle::current);
        let visible_now = status
            .as_ref()
            .and_then(|s| s.tiers.iter().find(|t| t.name == name))
            .is_some_and(is_visible);
        let mut state = lock(&self.state);
        // Visible now, or at some status since the last write (the state a failed write leaves
        // lasts until the retry, whose own status may already read pending).
        let visible = state.visible.remove(name) || visible_now;
        let times = state.writes.entry(name.to_owned()).or_default();
        while times
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= longest)
        {
            times.pop_front();
        }
        if times.len() >= MAX_WRITE_TIMES {
            times.pop_front();
        }
        times.push_back(now);
        let within = |w: Duration| times.iter().filter(|t| now.saturating_sub(**t) < w).count();
        let hard = WRITE_WINDOWS
            .into_iter()
            .map(|w| (w, within(w), hard_limit(w)))
            .find(|(_, n, limit)| n > limit);
        let soft = within(SOFT_WINDOW);
        let in_longest = within(WRITE_WINDOWS[WRITE_WINDOWS.len() - 1]);
        if state.peak.as_ref().is_none_or(|(_, n)| in_longest > *n) {
            state.peak = Some((name.to_owned(), in_longest));
        }
        let mut found = Vec::new();
        if !state.enforce_write_bound {
            return;
        }
        if let Some((window, n, limit)) = hard
            && state.flagged.insert((name.to_owned(), false))
        {
            found.push(format!(
                "{n} writes of {name} within {}, more than the bound {limit}",
                secs(window)
            ));
        }
        if soft > SOFT_LIMIT && !visible && state.flagged.insert((name.to_owned(), true)) {
            let shown = status
                .as_ref()
                .and_then(|s| s.tiers.iter().find(|t| t.name == name))
                .map_or_else(|| "no status".to_owned(), ToString::to_string);
            found.push(format!(
                "{soft} writes of {name} within {}, more than {SOFT_LIMIT}, while its status \
                 shows no reason: {shown}",
                secs(SOFT_WINDOW)
            ));
        }
        drop(state);
        for detail in found {
            self.violation(Invariant::WriteBound, detail);
        }
    }

    /// The most writes of one Tier this initializer sent within the longest window of the write
    /// bound (300 s), and the Tier.
    pub fn peak_writes(&self) -> Option<(String, usize)> {
        lock(&self.state).peak.clone()
    }

    /// Writes denied by admission so far, and of those the doomed ones (denied creates whose
    /// reason the initializer's own cache showed when the call started).
    pub fn denials(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.denied, state.doomed)
    }

    /// Whether the initializer's own cache shows now that creating `tier` would be denied.
    fn predicts_denial(&self, tier: &TierSpec) -> bool {
        let policy = AdmissionPolicy::antrea(String::new());
        tier_core::predict(&policy, tier, &self.cache.snapshot()).is_some()
    }

    fn count_denial(&self, result: &Result<(), WriteError>, predicted: bool) {
        if let Err(e) = result
            && e.class == ErrorClass::Denied
        {
            let mut state = lock(&self.state);
            state.denied += 1;
            state.doomed += usize::from(predicted);
        }
    }

    /// The store's resourceVersion of `name` now (`None`: absent).
    fn stored_version(&self, name: &str) -> Option<String> {
        self.cluster.get(name).map(|t| t.resource_version)
    }

    /// Notes what the store shows of a write of `name` that just ended: an accepted one (its
    /// result, and whether it shows the previous accepted write undone by someone else), or a
    /// failed one that may have changed the store itself (a lost response), which makes the
    /// store's later changes unattributable until the next accepted write. `update_on` is an
    /// update's precondition; `before` the store's resourceVersion when the call started.
    fn count_accepted(
        &self,
        name: &str,
        update_on: Option<&str>,
        before: Option<String>,
        result: &Result<(), WriteError>,
    ) {
        let now = self.stored_version(name);
        let mut state = lock(&self.state);
        let accepted = state.accepted.entry(name.to_owned()).or_default();
        // Changed before this call started: by someone else (a failed write of ours that may
        // have changed it made `last` unknown).
        if accepted.last.is_some() && accepted.last != before {
            accepted.undone += 1;
            accepted.last = None;
        }
        match result {
            Ok(()) => {
                let undone = match (&accepted.last, update_on) {
                    // A create succeeded: the Tier written before was deleted since.
                    (Some(_), None) => true,
                    (Some(last), Some(basis)) => last != basis,
                    (None, _) => false,
                };
                accepted.undone += usize::from(undone);
                accepted.last = now;
            }
            Err(_) if before != now => accepted.last = None,
            Err(_) => {}
        }
    }

    /// A Tier newly reported contested must have had an accepted write undone by another writer:
    /// one shown by a later write, or the last one, which the store no longer holds.
    fn check_contests(&self, state: &mut CheckState, status: &Status) {
        let contested: BTreeSet<String> = status
            .tiers
            .iter()
            .filter(|t| t.contested || matches!(t.state, TierState::Contested { .. }))
            .map(|t| t.name.clone())
            .collect();
        let mut false_contests = Vec::new();
        for name in contested.difference(&state.contested) {
            let accepted = state.accepted.get(name);
            let gone = accepted
                .and_then(|a| a.last.as_ref())
                .is_some_and(|last| self.stored_version(name).as_ref() != Some(last));
            let undone = accepted.map_or(0, |a| a.undone) + usize::from(gone);
            if undone == 0 {
                let shown = status
                    .tiers
                    .iter()
                    .find(|t| t.name == *name)
                    .map_or_else(String::new, ToString::to_string);
                false_contests.push(format!(
                    "{name} reported contested, but no write the store accepted from this \
                     initializer was undone by another writer: {shown}"
                ));
            }
        }
        state.contested = contested;
        for detail in false_contests {
            self.violation(Invariant::FalseContest, detail);
        }
    }

    fn call_ends(&self, verb: &str, tier: &TierSpec, result: &Result<(), WriteError>) {
        self.journal.note(|| match result {
            Ok(()) => format!("{} {verb} {} ok", self.name, tier.name),
            Err(e) => format!("{} {verb} {} failed: {e}", self.name, tier.name),
        });
    }

    /// Records a snapshot the initializer observed (after checking the status published so far).
    fn observed(&self, snapshot: &Snapshot) {
        self.check_status();
        let mut state = lock(&self.state);
        state
            .snapshots
            .entry(snapshot.generation)
            .or_insert_with(|| snapshot.clone());
    }

    /// Checks the latest published status against the snapshot it was computed from, the cache
    /// and the store. A no-op before [`attach`](Self::attach).
    pub fn check_status(&self) {
        let Some(status) = lock(&self.state).status.as_ref().map(StatusHandle::current) else {
            return;
        };
        if status.synced && !self.cache.is_synced() {
            self.violation(
                Invariant::StatusMismatch,
                "status says synced but the cache has not completed its first list".to_owned(),
            );
        }
        let converged: Vec<&str> = status
            .tiers
            .iter()
            .filter(|t| t.state == TierState::Converged)
            .map(|t| t.name.as_str())
            .collect();
        if !converged.is_empty() {
            self.check_converged(&status, &converged);
        }
        self.check_blocked(&status);
        let mut state = lock(&self.state);
        for tier in status.tiers.iter().filter(|t| is_visible(t)) {
            if !state.visible.contains(&tier.name) {
                state.visible.insert(tier.name.clone());
            }
        }
        // Statuses only move forward: older snapshots are never needed again.
        state.snapshots = state.snapshots.split_off(&status.generation);
        self.check_contests(&mut state, &status);
        self.note_transitions(&mut state, &status);
    }

    /// A Tier is reported blocked only when the snapshot its status came from shows it absent
    /// and every named blocker present.
    fn check_blocked(&self, status: &Status) {
        let blocked: Vec<(&str, &Vec<String>)> = status
            .tiers
            .iter()
            .filter_map(|t| match &t.state {
                TierState::Blocked { blockers, .. } => Some((t.name.as_str(), blockers)),
                _ => None,
            })
            .collect();
        if blocked.is_empty() {
            return;
        }
        let snapshot = lock(&self.state).snapshots.get(&status.generation).cloned();
        let Some(snapshot) = snapshot else {
            return;
        };
        for (name, blockers) in blocked {
            let present = |n: &str| matches!(snapshot.observe(n), Observed::Present(_));
            if present(name) || !blockers.iter().all(|b| present(b)) {
                self.violation(
                    Invariant::FalseBlocked,
                    format!(
                        "status reports {name} blocked by {blockers:?} at generation {}, where \
                         the cache showed {:?}",
                        status.generation,
                        snapshot.observe(name)
                    ),
                );
            }
        }
    }

    fn check_converged(&self, status: &Status, converged: &[&str]) {
        let snapshot = lock(&self.state).snapshots.get(&status.generation).cloned();
        let Some(snapshot) = snapshot else {
            self.violation(
                Invariant::StatusMismatch,
                format!(
                    "status reports converged Tiers at generation {}, which the initializer \
                     never observed",
                    status.generation
                ),
            );
            return;
        };
        let current = self.cache.snapshot();
        let caught_up = current.generation == status.generation && self.cache.pending() == 0;
        for name in converged {
            let Some(want) = self.desired.get(name) else {
                self.violation(
                    Invariant::StatusMismatch,
                    format!("status reports {name}, which is not desired"),
                );
                continue;
            };
            match snapshot.observe(name) {
                Observed::Present(seen) if in_sync(want, &seen) => {}
                other => self.violation(
                    Invariant::StatusMismatch,
                    format!(
                        "status reports {name} converged at generation {}, where the cache \
                         showed {other:?}",
                        status.generation
                    ),
                ),
            }
            // The cache has applied every change written so far: it equals the store.
            if caught_up && !self.cluster.get(name).is_some_and(|t| in_sync(want, &t)) {
                self.violation(
                    Invariant::StatusMismatch,
                    format!(
                        "status reports {name} converged, the store holds {:?}",
                        self.cluster.get(name)
                    ),
                );
            }
        }
    }

    fn note_transitions(&self, state: &mut CheckState, status: &Status) {
        let labels: Vec<(&'static str, u64)> = status
            .tiers
            .iter()
            .map(|t| (t.state.as_str(), t.corrections))
            .collect();
        if labels != state.states {
            self.journal.note(|| {
                let tiers: Vec<String> = status
                    .tiers
                    .iter()
                    .map(|t| match t.corrections {
                        0 => format!("{}={}", t.name, t.state.as_str()),
                        n => format!("{}={}(corrections {n})", t.name, t.state.as_str()),
                    })
                    .collect();
                format!(
                    "{} status (generation {}): {}",
                    self.name,
                    status.generation,
                    tiers.join(" ")
                )
            });
            state.states = labels;
        }
    }
}

/// Marks one call in flight until dropped (also when the caller drops the call).
struct InFlight<'a> {
    checks: &'a Checks,
    name: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.checks.state);
        if let Some(n) = state.in_flight.get_mut(&self.name) {
            *n = n.saturating_sub(1);
        }
    }
}

/// A [`TierWriter`] decorator checking every call as it starts (see the [module docs](self)).
#[derive(Debug)]
pub struct CheckingWriter<W> {
    inner: W,
    checks: Arc<Checks>,
}

impl<W> CheckingWriter<W> {
    /// Checks every call made through `inner`.
    pub fn new(inner: W, checks: Arc<Checks>) -> Self {
        Self { inner, checks }
    }
}

#[async_trait]
impl<W: TierWriter> TierWriter for CheckingWriter<W> {
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError> {
        let _call = self.checks.call_starts("create", tier);
        let doomed = self.checks.predicts_denial(tier);
        let before = self.checks.stored_version(&tier.name);
        let result = self.inner.create(tier).await;
        self.checks.call_ends("create", tier, &result);
        self.checks.count_denial(&result, doomed);
        self.checks
            .count_accepted(&tier.name, None, before, &result);
        result
    }

    async fn update(&self, tier: &TierSpec, resource_version: &str) -> Result<(), WriteError> {
        let _call = self.checks.call_starts("update", tier);
        let before = self.checks.stored_version(&tier.name);
        let result = self.inner.update(tier, resource_version).await;
        self.checks.call_ends("update", tier, &result);
        self.checks.count_denial(&result, false);
        self.checks
            .count_accepted(&tier.name, Some(resource_version), before, &result);
        result
    }
}

/// A [`TierLister`] decorator recording every snapshot handed out, for the status checks.
#[derive(Debug)]
pub struct CheckingLister<L> {
    inner: L,
    checks: Arc<Checks>,
}

impl<L> CheckingLister<L> {
    /// Records every snapshot read through `inner`.
    pub fn new(inner: L, checks: Arc<Checks>) -> Self {
        Self { inner, checks }
    }
}

#[async_trait]
impl<L: TierLister> TierLister for CheckingLister<L> {
    async fn wait_synced(&self) {
        self.inner.wait_synced().await;
    }

    fn snapshot(&self) -> Snapshot {
        let snapshot = self.inner.snapshot();
        self.checks.observed(&snapshot);
        snapshot
    }

    async fn changed(&self, seen: Generation) {
        self.inner.changed(seen).await;
    }
}

/// Checks every status change of an initializer until its driver is gone.
pub async fn watch_status(mut status: StatusHandle, checks: Arc<Checks>) {
    checks.check_status();
    while status.changed().await.is_ok() {
        checks.check_status();
    }
}

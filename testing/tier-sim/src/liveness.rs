//! The per-Tier liveness invariant (see [`crate::bounds`]), checked on the store as it changes.
//!
//! For each desired Tier the tracker follows *episodes*: from the moment the store shows it out
//! of sync until it shows it in sync again. Within an episode the Tier is *allowed* from the
//! latest of: the world allowing the verb it needs ([`Scenario::allowed_from`]), the latest
//! change of the Tier by someone else (tierd only ever writes desired fields, so any change to
//! an out-of-sync content is someone else's), the verb it needs changing (a deletion turns an
//! update into a create), and the end of the last moment another Tier held its priority. An
//! allowed episode must end within [`Scenario::liveness_bound`]; the bound counts from the
//! allowance, so it holds for each Tier whatever the others do.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, DriverConfig, ObservedTier, Snapshot, in_sync, predict};
use tier_memory::Verb;

use crate::bounds::{HOT_EDITS, HOT_WINDOW};
use crate::check::{Invariant, Journal, secs};
use crate::scenario::Scenario;

/// One Tier's current episode.
#[derive(Debug, Default)]
struct Episode {
    /// The verb the Tier needs, while out of sync.
    verb: Option<Verb>,
    /// The resourceVersion last seen (`None`: absent).
    seen: Option<String>,
    /// Since when it is allowed, if it is; `None` while blocked or in sync.
    since: Option<Duration>,
    /// Changes by someone else, within [`HOT_WINDOW`].
    foreign: VecDeque<Duration>,
}

/// The longest wait seen and the violations, for the report.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LivenessOutcome {
    /// The longest a checked Tier waited from its allowance to being in sync (or to the end):
    /// the Tier and the wait.
    pub(crate) longest: Option<(String, Duration)>,
}

/// Follows the store for the liveness invariant.
#[derive(Debug)]
pub(crate) struct Liveness {
    desired: DesiredSet,
    scenario: Scenario,
    driver: DriverConfig,
    policy: AdmissionPolicy,
    journal: Journal,
    tiers: BTreeMap<String, Episode>,
    outcome: LivenessOutcome,
    /// Whether violations are reported (the longest wait is measured either way).
    enforce: bool,
}

impl Liveness {
    pub(crate) fn new(
        desired: &DesiredSet,
        scenario: &Scenario,
        driver: &DriverConfig,
        journal: &Journal,
        enforce: bool,
    ) -> Self {
        Self {
            desired: desired.clone(),
            scenario: scenario.clone(),
            driver: driver.clone(),
            policy: AdmissionPolicy::antrea(String::new()),
            journal: journal.clone(),
            tiers: BTreeMap::new(),
            outcome: LivenessOutcome::default(),
            enforce,
        }
    }

    /// The store as of `now` (a synced snapshot of a cache without lag).
    pub(crate) fn observe(&mut self, snapshot: &Snapshot, now: Duration) {
        let Some(tiers) = snapshot.tiers.as_ref() else {
            return;
        };
        for want in self.desired.tiers().to_vec() {
            let seen: Option<&ObservedTier> = tiers.get(&want.name);
            let episode = self.tiers.entry(want.name.clone()).or_default();
            let version = seen.map(|t| t.resource_version.clone());
            let changed = episode.seen != version;
            episode.seen = version;
            if seen.is_some_and(|t| in_sync(&want, t)) {
                let since = episode.since.take();
                episode.verb = None;
                if let Some(since) = since {
                    let fight = is_fight(&episode.foreign, since);
                    self.judge(&want.name, since, now, fight, true);
                }
                continue;
            }
            let verb = if seen.is_some() {
                Verb::Update
            } else {
                Verb::Create
            };
            while episode
                .foreign
                .front()
                .is_some_and(|at| now.saturating_sub(*at) > HOT_WINDOW)
            {
                episode.foreign.pop_front();
            }
            if changed {
                episode.foreign.push_back(now);
            }
            let blocked = verb == Verb::Create && predict(&self.policy, &want, snapshot).is_some();
            let allowed_from = self.scenario.allowed_from(verb, &want.name);
            episode.since = if blocked {
                None
            } else if changed || episode.verb != Some(verb) || episode.since.is_none() {
                Some(now.max(allowed_from))
            } else {
                episode.since
            };
            episode.verb = Some(verb);
        }
    }

    /// At the end of the run: every episode still open is judged at `now`.
    pub(crate) fn finish(&mut self, now: Duration) -> LivenessOutcome {
        let open: Vec<(String, Duration, bool)> = self
            .tiers
            .iter()
            .filter_map(|(name, e)| Some((name.clone(), e.since?, is_fight(&e.foreign, e.since?))))
            .collect();
        for (name, since, fight) in open {
            self.judge(&name, since, now, fight, false);
        }
        self.outcome.clone()
    }

    fn judge(&mut self, name: &str, since: Duration, now: Duration, fight: bool, ended: bool) {
        // Allowances from `quiet_at` on are the convergence invariant's.
        if since >= self.scenario.quiet_at || now < since {
            return;
        }
        let waited = now.saturating_sub(since);
        if self
            .outcome
            .longest
            .as_ref()
            .is_none_or(|(_, w)| waited > *w)
        {
            self.outcome.longest = Some((name.to_owned(), waited));
        }
        let bound = self.scenario.liveness_bound(&self.driver, fight);
        if self.enforce && waited > bound {
            let how = if ended {
                "in sync only"
            } else {
                "still not in sync"
            };
            let fight = if fight { " (in a fight)" } else { "" };
            self.journal.violation(
                "harness",
                Invariant::Liveness,
                format!(
                    "{name}{fight}: the world allowed its write at {}, {how} {} later (bound {})",
                    secs(since),
                    secs(waited),
                    secs(bound)
                ),
            );
        }
    }
}

/// Whether someone else changed the Tier at least [`HOT_EDITS`] times in the [`HOT_WINDOW`]
/// up to `at`.
fn is_fight(foreign: &VecDeque<Duration>, at: Duration) -> bool {
    foreign
        .iter()
        .filter(|t| **t <= at && at.saturating_sub(**t) <= HOT_WINDOW)
        .count()
        >= HOT_EDITS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{TargetedEffect, TargetedFault};
    use crate::worlds::World;

    fn tier(name: &str, priority: i64, description: &str, rv: u64) -> ObservedTier {
        ObservedTier {
            name: name.to_owned(),
            priority,
            description: description.to_owned(),
            resource_version: rv.to_string(),
            last_writer: None,
        }
    }

    /// The six desired Tiers but `without`, plus `extra`.
    fn store(without: &[&str], extra: &[ObservedTier]) -> Snapshot {
        let mut tiers: Vec<ObservedTier> = DesiredSet::antrea()
            .tiers()
            .iter()
            .filter(|t| !without.contains(&t.name.as_str()))
            .map(|t| tier(&t.name, t.priority, &t.description, 1))
            .collect();
        tiers.extend(extra.iter().cloned());
        Snapshot::synced(1, tiers)
    }

    /// baseline's writes fail until 200 s; nothing else is faulted.
    fn world() -> Scenario {
        let mut s = Scenario::issue_6694();
        s.world = World::FailingTier;
        s.initializers[0].sync_after = Duration::ZERO;
        s.quiet_at = Duration::from_secs(200);
        for verb in [Verb::Create, Verb::Update] {
            s.targeted.push(TargetedFault {
                verb,
                name: Some("baseline".to_owned()),
                effect: TargetedEffect::Unavailable,
            });
        }
        s
    }

    fn tracker(journal: &Journal) -> (Liveness, Duration) {
        let s = world();
        let driver = DriverConfig::default();
        let bound = s.liveness_bound(&driver, false);
        (
            Liveness::new(&DesiredSet::antrea(), &s, &driver, journal, true),
            bound,
        )
    }

    fn liveness_violations(journal: &Journal) -> Vec<String> {
        journal
            .violations()
            .iter()
            .filter(|v| v.invariant == Invariant::Liveness)
            .map(|v| v.detail.clone())
            .collect()
    }

    #[test]
    fn a_tier_allowed_but_not_written_within_its_bound_is_caught() {
        let journal = Journal::new(false);
        let (mut live, bound) = tracker(&journal);
        let t = Duration::from_secs(10);
        live.observe(&store(&["baseline"], &[]), Duration::ZERO);
        live.observe(&store(&["baseline", "application"], &[]), t);
        let outcome = live.finish(t + bound + Duration::from_secs(1));
        let found = liveness_violations(&journal);
        // baseline is not allowed before faults stop: only application is late.
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("application: "), "{found:?}");
        assert_eq!(
            outcome.longest,
            Some(("application".to_owned(), bound + Duration::from_secs(1)))
        );
    }

    #[test]
    fn a_tier_written_within_its_bound_passes() {
        let journal = Journal::new(false);
        let (mut live, bound) = tracker(&journal);
        let t = Duration::from_secs(10);
        live.observe(&store(&["baseline"], &[]), Duration::ZERO);
        live.observe(&store(&["baseline", "application"], &[]), t);
        live.observe(&store(&["baseline"], &[]), t + bound);
        live.finish(Duration::from_secs(400));
        assert_eq!(liveness_violations(&journal), Vec::<String>::new());
    }

    #[test]
    fn a_tier_blocked_by_another_is_allowed_only_once_the_blocker_goes() {
        let journal = Journal::new(false);
        let (mut live, bound) = tracker(&journal);
        let squatter = tier("team-a", 250, "", 2);
        live.observe(&store(&["application"], &[squatter]), Duration::ZERO);
        // Blocked for 100 s: no violation however long that takes.
        let freed = Duration::from_secs(100);
        live.observe(&store(&["application"], &[]), freed);
        live.observe(&store(&[], &[]), freed + bound);
        live.finish(Duration::from_secs(400));
        assert_eq!(liveness_violations(&journal), Vec::<String>::new());
    }

    #[test]
    fn a_fight_gets_the_contest_hold_off_more() {
        let journal = Journal::new(false);
        let (mut live, bound) = tracker(&journal);
        let driver = DriverConfig::default();
        let fight_bound = world().liveness_bound(&driver, true);
        assert_eq!(fight_bound, bound + driver.machine.contest.hold_cap);
        live.observe(&store(&["baseline"], &[]), Duration::ZERO);
        let mut at = Duration::from_secs(10);
        for k in 0..4 {
            let edited = tier("platform", 200, "mine", 10 + k);
            live.observe(&store(&["baseline", "platform"], &[edited]), at);
            at += Duration::from_secs(1);
        }
        // Held off longer than the plain bound, within the fight's.
        live.observe(
            &store(&["baseline"], &[]),
            at + bound + Duration::from_secs(1),
        );
        live.finish(Duration::from_secs(400));
        assert_eq!(liveness_violations(&journal), Vec::<String>::new());
    }
}
